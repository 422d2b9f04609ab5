"""Where a circuit's float policy and its frozen integer circuit part ways, step by step.

On the evaluation episodes of a run (the seeds ``dwc eval`` uses), the float policy acts and, on every
state it visits, the frozen circuit is asked for its action too. Per state it records:

- whether the popcounts (the circuit's counts before the action tables) agree: the float policy compares
  the float observation with its thresholds, the circuit the observation rounded to its fixed-point
  format, so a value within one rounding step of a threshold can flip a comparator and move a count;
- the action difference, in units of the action range (the tables' rounding alone is below 2^-14).

A tiny per-step difference that the task's dynamics amplify makes the two policies' episodes part
ways: their returns then differ as two rollouts of almost the same policy do, not because the circuit
is worse. The episodes of the frozen circuit on the same seeds are run as well, for their returns.

  python scripts/float_vs_frozen.py RUN [RUN ...] --episodes 10 --json out.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's dwc, as every script here


def compare(run: Path, episodes: int) -> dict:
    import gymnasium as gym
    import torch

    from dwc.flows.compile import freeze_run
    from dwc.core.config import EVAL_SEED_OFFSET
    from dwc.ir import reference as ref
    from dwc.backends.fast import FastExecutor
    from dwc.train.checkpoint import load_actor
    from dwc.train.common import evaluate

    actor, cfg, step = load_actor(run)
    graph = freeze_run(run, loaded=(actor, cfg, step))
    circuit = FastExecutor(graph)
    scale = actor.action_scale.numpy()
    seed = cfg.seed + EVAL_SEED_OFFSET
    env = gym.make(cfg.env)
    steps = pop_differ = 0
    diffs, float_returns = [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done, ret = False, 0.0
        while not done:
            x = torch.as_tensor(obs, dtype=torch.float32)[None]
            with torch.no_grad():
                a_float = actor.act(x)[0].numpy()
                pc_float = actor.popcounts(x)[0].numpy().astype(np.int64)
            q = ref.quantize_obs(graph, obs[None])
            pc_frozen = circuit.popcounts(q)[0]
            a_frozen = circuit.act_one(obs)
            pop_differ += int((pc_float != pc_frozen).any())
            diffs.append(float(np.max(np.abs(a_float - a_frozen) / scale)))
            obs, r, term, trunc, _ = env.step(a_float)
            ret += float(r)
            steps += 1
            done = term or trunc
        float_returns.append(ret)
    env.close()
    frozen = evaluate(circuit.act_one, cfg.env, episodes, seed)
    d = np.asarray(diffs)
    return {"run": str(run), "env": cfg.env, "episodes": episodes, "states": steps,
            "float_returns": float_returns, "frozen_returns": frozen["returns"],
            "states_popcounts_differ": pop_differ, "share_popcounts_differ": pop_differ / steps,
            "action_difference": {"median": float(np.median(d)), "p99": float(np.quantile(d, 0.99)),
                                  "max": float(d.max()), "share_above_1e-3": float((d > 1e-3).mean())}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="trained circuit runs or policy folders")
    p.add_argument("--episodes", type=int, default=10, help="evaluation episodes (default 10, as dwc train's)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes must be >= 1, got {args.episodes}")
    from dwc.core.errors import UserError
    try:
        rows = [compare(r, args.episodes) for r in args.runs]
    except UserError as e:
        p.exit(2, f"float_vs_frozen.py: error: {e}\n")
    for r in rows:
        a = r["action_difference"]
        print(f"{r['run']}: {r['states']} states; popcounts differ on {r['states_popcounts_differ']} "
              f"({r['share_popcounts_differ']:.2%}); action difference / range: median {a['median']:.1e}, "
              f"99th percentile {a['p99']:.1e}, max {a['max']:.1e}\n"
              f"  float returns  {', '.join(f'{x:.0f}' for x in r['float_returns'])}\n"
              f"  frozen returns {', '.join(f'{x:.0f}' for x in r['frozen_returns'])}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
