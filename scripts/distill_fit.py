"""How well can a circuit fit its teacher? Offline regression on a distillation run's own dataset.

A distillation run (``dwc train --algo distill``) keeps every state it visited with the teacher's action
there in its checkpoint. This script trains fresh students of several widths on that dataset alone (90%
of the states, the rest held out), with the run's loss, batch size and annealed rate, for many more
updates than the run gave, and prints the loss on both parts as it goes. It separates the two reasons a
student stays far from its teacher:

- the loss keeps falling with more updates: the run gave too few (raise ``--updates-per-step`` or steps);
- it flattens at the same level whatever the updates, and lower for a wider circuit: capacity;
- the held-out loss stays well above the training loss: the dataset is too small (more DAgger steps).

    python scripts/distill_fit.py /work/sweeps/distill-recipes/runs/Walker2d-v5/s256-40k/seed1/run \
        --widths 256 1024 --updates 40000 --json /tmp/fit.json

The loss is the run's: mean squared error of the action, in half action ranges (``losses/distill`` in its
metrics.jsonl is the same quantity on one minibatch).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch

from dwc.core.errors import UserError
from dwc.core.rundir import load_config
from dwc.models import build_actor
from dwc.train.checkpoint import load_checkpoint
from dwc.train.common import flush_denormals
from dwc.train.distill import action_error, annealed_lr
from dwc.train.optim import WiringAdam


def student_for(cfg, width: int, wiring_optim: str, obs_dim: int, act_dim: int, space, normalizer: dict):
    """A fresh student of the run's circuit at another width (and wiring update), with the run's (frozen)
    normaliser."""
    actor = build_actor(dataclasses.replace(cfg.actor, width=width, wiring_optim=wiring_optim), obs_dim, act_dim,
                        space.low, space.high)
    actor.normalizer.load_state_dict(normalizer)
    actor.normalizer.freeze()
    return actor


def loss_on(student, obs: torch.Tensor, act: torch.Tensor, chunk: int = 4096) -> float:
    """The mean squared action error over a whole set, in half action ranges."""
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(obs), chunk):
            total += action_error(student, obs[i:i + chunk], act[i:i + chunk]).sum().item()
    return total / (len(obs) * act.shape[1])


def fit(student, wiring_optim: str, train: tuple, held: tuple, updates: int, lr: float, batch: int, every: int,
        seed: int, curve: list, saved=lambda: None) -> list[dict]:
    """Adam (WiringAdam for the sparse wiring update, as a run) on minibatches of ``train``, the rate annealed as
    a run anneals it; the losses every ``every`` appended to ``curve``, ``saved()`` called after each (so an
    interrupted fit keeps what it measured)."""
    opt = (WiringAdam if wiring_optim == "sparse" else torch.optim.Adam)(student.parameters(), lr=lr, fused=True)
    rng, t0 = np.random.default_rng(seed), time.time()
    for u in range(updates):
        progress = (u + 1) / updates
        opt.param_groups[0]["lr"] = annealed_lr(lr, progress)
        idx = torch.as_tensor(rng.integers(0, len(train[0]), batch))
        with flush_denormals():
            err = action_error(student, train[0][idx], train[1][idx]).mean()
            opt.zero_grad(set_to_none=True)
            err.backward()
            opt.step()
            student.constrain_()
        if (u + 1) % every == 0 or u + 1 == updates:
            curve.append({"updates": u + 1, "train_loss": loss_on(student, *train),
                          "held_out_loss": loss_on(student, *held), "seconds": round(time.time() - t0, 1)})
            print(f"  {u + 1:>7} updates: train {curve[-1]['train_loss']:.4f}  held out {curve[-1]['held_out_loss']:.4f}"
                  f"  ({curve[-1]['seconds']:.0f} s)", flush=True)
            saved()
    return curve


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="a distillation run folder (its checkpoint holds the dataset)")
    p.add_argument("--widths", type=int, nargs="+", help="student widths (default: the run's)")
    p.add_argument("--updates", type=int, default=40000, help="minibatch updates per student (default 40000)")
    p.add_argument("--wiring-optim", choices=("dense", "sparse"), help="the students' wiring update (default: the run's)")
    p.add_argument("--lr", type=float, help="learning rate (default: the run's --distill-lr)")
    p.add_argument("--every", type=int, default=5000, help="updates between loss measurements (default 5000)")
    p.add_argument("--states", type=int, help="fit the first N states of the dataset only (the dataset as the run "
                                               "had it at step N; default all)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, help="write the curves here")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.run)
        ckpt = load_checkpoint(args.run / "checkpoint.pt")
    except UserError as e:
        raise SystemExit(f"distill_fit: {e}")
    if cfg.algo != "distill" or "data_obs" not in ckpt:
        raise SystemExit(f"distill_fit: {args.run} is not a distillation run with its dataset in the checkpoint")
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    import gymnasium as gym
    space = gym.make(cfg.env).action_space
    obs, act = (torch.as_tensor(np.asarray(ckpt[k][:args.states]), dtype=torch.float32)
                for k in ("data_obs", "data_act"))
    order = torch.as_tensor(np.random.default_rng(args.seed).permutation(len(obs)))
    cut = int(0.9 * len(obs))
    train, held = (obs[order[:cut]], act[order[:cut]]), (obs[order[cut:]], act[order[cut:]])
    normalizer = {k.removeprefix("normalizer."): v for k, v in ckpt["actor"].items() if k.startswith("normalizer.")}
    lr, wiring_optim = args.lr or cfg.distill.distill_lr, args.wiring_optim or cfg.actor.wiring_optim
    report = {"run": str(args.run), "env": cfg.env, "wiring_optim": wiring_optim, "states": len(obs),
              "held_out": len(obs) - cut, "lr": lr, "batch_size": cfg.sac.batch_size, "updates": args.updates,
              "students": []}

    def saved():
        if args.json:
            args.json.write_text(json.dumps(report, indent=2) + "\n")
    for width in args.widths or [cfg.actor.width]:
        print(f"width {width}: {cut} states to fit, {len(obs) - cut} held out, rate {lr:g}", flush=True)
        student = student_for(cfg, width, wiring_optim, ckpt["obs_dim"], ckpt["act_dim"], space, normalizer)
        report["students"].append({"width": width, "curve": []})
        fit(student, wiring_optim, train, held, args.updates, lr, cfg.sac.batch_size, args.every, args.seed,
            report["students"][-1]["curve"], saved)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
