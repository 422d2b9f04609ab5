"""Does --precision bfloat16 change what SAC learns? One trained run's replay buffer and learner state,
the same stream of minibatches and noise, updated in float32 and in bf16 side by side; a third
learner runs float32 on another minibatch stream as the yardstick of ordinary noise. Printed per
window of updates: the critic's TD loss, the mean Q and the actor loss of each.

If bf16 differed from float32 by more than the yardstick row differs from both, it would be
changing the learning; the RL outcome itself cannot tell (two runs of one seed part ways within
~20k steps whatever their arithmetic).

  .venv/bin/python scripts/check_precision.py runs/hopper-dwc --updates 3000
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a SAC run directory with its full checkpoint (replay buffer, critics)")
    ap.add_argument("--updates", type=int, default=3000)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the windows to this file")
    args = ap.parse_args()

    from dwc.core.config import TrainConfig
    from dwc.core.errors import UserError
    from dwc.models import build_actor
    from dwc.train.replay import ReplayBuffer
    from dwc.train.checkpoint import load_checkpoint
    from dwc.train.sac import SACLearner
    torch.set_num_threads(1)
    try:
        ck = load_checkpoint(args.run / "checkpoint.pt")
        if "replay" not in ck or "qf" not in ck:
            raise UserError(f"{args.run} holds no SAC learner state (a shipped policy keeps only its actor)")
    except UserError as e:
        print(f"check_precision: error: {e}", file=sys.stderr)
        return 2
    cfg = TrainConfig.from_dict(ck["config"])
    obs_dim, act_dim, cpu = ck["obs_dim"], ck["act_dim"], torch.device("cpu")

    def learner(precision):
        actor = build_actor(cfg.actor, obs_dim, act_dim, -np.ones(act_dim), np.ones(act_dim))
        sac = SACLearner(actor, obs_dim, act_dim, cfg.sac, cpu, precision=precision)
        sac.load_state_dict(ck)
        return sac

    replay = ReplayBuffer(ck["replay"]["size"], obs_dim, act_dim, seed=0)
    replay.load_state_dict(ck["replay"])
    runs = {"float32": (torch.float32, 0), "bfloat16": (torch.bfloat16, 0), "float32, other batches": (torch.float32, 1)}
    rows = {}
    for name, (precision, stream) in runs.items():
        sac = learner(precision)
        replay.rng = np.random.Generator(np.random.PCG64(stream))
        gen = torch.Generator().manual_seed(stream)
        seen = []
        for u in range(args.updates):
            batch = replay.sample(cfg.sac.batch_size, cpu)
            noise_pi = torch.randn(2, cfg.sac.batch_size, act_dim, generator=gen) if u % 2 == 0 else None
            s = sac.update(*batch, torch.randn(cfg.sac.batch_size, act_dim, generator=gen), noise_pi)
            if noise_pi is not None:
                seen.append((s["losses/q"].item(), s["losses/q_mean"].item(), s["losses/actor"].item()))
        rows[name] = [np.mean(w, axis=0).tolist() for w in np.array_split(np.array(seen), args.windows)]
        print(f"{name:<24}" + " | ".join(f"TD {q:7.3f}  Q {m:8.2f}  actor {a:8.2f}" for q, m, a in rows[name]),
              flush=True)
    if args.json:
        args.json.write_text(json.dumps({"run": str(args.run), "updates": args.updates, "windows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
