"""Time SAC gradient updates at a trained run's state, against the float MLP actor's on the same data.

bench_train.py times a fresh run's first updates, where a learnable wiring is at its most expensive
for the sparse update (each input still has many candidates near its best one). This times the
updates at the state a checkpoint holds (its actor, critics, optimisers and replay), so a run
checkpointed later in training shows what its updates cost there. Per run: SAC updates exactly as
dwc train does them (the actor every policy_frequency updates of the run's config, that many times,
denormals flushed, glibc keeping freed memory), on minibatches of the run's own replay; the baseline
is a fresh MLP actor with the first run's SAC settings and critics, on its replay. Update time only: no env steps
and no acting, which dilute the ratio in a real run. Rounds interleave the runs and the baseline, in
one process, 1 thread by default; each figure is the median over rounds.

  .venv/bin/python scripts/bench_update.py RUN [RUN ...] --updates 30 --rounds 3 --json out.json

--parts also times the DWC-specific parts of each run's updates (LUT lookups, wiring, the wiring's
Adam step, the thermometer encoding), wrapped one call at a time in an extra round after the timed
ones; nested parts (indented) are included in their parent's time.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from dwc.core.config import ActorConfig
from dwc.core.errors import UserError
from dwc.models import build_actor
from dwc.train.common import flush_denormals, keep_freed_memory
from dwc.train.checkpoint import load_checkpoint
from dwc.train.sac import SACLearner
from dwc.core.rundir import CHECKPOINT, load_config


class Bench:
    """One learner and the replay it samples from."""

    def __init__(self, name: str, actor_cfg: ActorConfig, sac, ckpt: dict, load: bool):
        obs_dim, act_dim = ckpt["obs_dim"], ckpt["act_dim"]
        actor = build_actor(actor_cfg, obs_dim, act_dim, -np.ones(act_dim), np.ones(act_dim))
        self.learner = SACLearner(actor, obs_dim, act_dim, sac, torch.device("cpu"))
        replay = ckpt["replay"]
        self.data = [torch.as_tensor(replay[f][: replay["size"]]) for f in
                     ("obs", "next_obs", "actions", "rewards", "terminations")]
        if load:
            self.learner.load_state_dict(ckpt)
        else:  # the baseline: a fresh actor whose normaliser has seen the same observations
            actor.normalizer.update(self.data[0])
        self.name, self.sac, self.act_dim = name, sac, act_dim
        self.gen = torch.Generator().manual_seed(0)
        self.wiring = actor.wiring_stats()

    def time(self, updates: int) -> float:
        """Milliseconds per update over ``updates`` SAC updates."""
        sc, b = self.sac, self.sac.batch_size
        t0 = time.perf_counter()
        for i in range(updates):
            idx = torch.randint(0, len(self.data[0]), (b,), generator=self.gen)
            obs, next_obs, actions, rewards, terms = (t[idx] for t in self.data)
            noise_pi = torch.randn(sc.policy_frequency, b, self.act_dim) if i % sc.policy_frequency == 0 else None
            with flush_denormals():
                self.learner.update(obs, next_obs, actions, rewards.view(-1).float(), terms.view(-1).float(),
                                    torch.randn(b, self.act_dim), noise_pi)
        return (time.perf_counter() - t0) / updates * 1e3


# (object, attribute, label): the DWC-specific calls --parts times; a label indented by a space is part
# of the one above it
PARTS = [("dwc.models.lut_efd:LutLookup", "forward", "LUT lookup forward"),
         ("dwc.models.lut_efd:LutLookup", "backward", "LUT lookup backward (EFD)"),
         ("dwc.models.lut_wiring:LearnableWiring", "forward", "wiring forward (argmax select)"),
         ("dwc.models.lut_wiring:LearnableWiring", "backward", "wiring backward"),
         ("dwc.models.lut:LUTLayer", "sparse_score_grad", " sampled score gradient (sparse)"),
         ("dwc.models.lut_wiring:NativeWiredLookup", "forward", "wiring + LUT forward (native)"),
         ("dwc.models.lut_wiring:NativeWiredLookup", "backward", "wiring + LUT backward (native)"),
         ("dwc.models.native:", "lut_wiring_backward", " the kernel"),
         ("dwc.models.native:", "thermometer_grad", " every score's gradient (dense, thermometer inputs)"),
         ("dwc.models.lut:LUTLayer", "soft_wiring", " softmax over the support"),
         ("dwc.models.lut:LUTLayer", "lookup_bits", "no-grad lookups (target actions)"),
         ("dwc.models.lut:LUTLayer", "_top", "wiring argmax (searched once per optimiser step)"),
         ("dwc.models.lut:LUTLayer", "_band", " band read or full search"),
         ("dwc.train.optim:WiringAdam", "step", "actor's Adam step"),
         ("dwc.train.optim:WiringAdam", "_lazy_step", " wiring scores' lazy Adam step"),
         ("dwc.models.encoding:Thermometer", "forward_fm", "thermometer encoding"),
         ("dwc.models.encoding:Thermometer", "forward_fm_rows", "thermometer encoding (read bits only)")]


def time_parts(bench: "Bench", updates: int) -> dict:
    """Milliseconds per update spent in each of PARTS over ``updates`` updates of ``bench``."""
    import importlib
    spent, saved = {}, []

    def timed(fn, label):
        def call(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t0
        return call
    for where, attr, label in PARTS:
        module, _, name = where.partition(":")
        obj = getattr(importlib.import_module(module), name) if name else importlib.import_module(module)
        raw = obj.__dict__[attr]  # a module's function, or a class's method
        saved.append((obj, attr, raw))
        fn = raw.__func__ if isinstance(raw, staticmethod) else raw
        setattr(obj, attr, staticmethod(timed(fn, label)) if isinstance(raw, staticmethod) else timed(fn, label))
    try:
        bench.time(updates)
    finally:
        for obj, attr, raw in saved:
            setattr(obj, attr, raw)
    return {label: round(spent[label] / updates * 1e3, 3) for _, _, label in PARTS if label in spent}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="SAC run directories with a full checkpoint (replay included)")
    p.add_argument("--updates", type=int, default=30, help="updates timed per run and round (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="untimed updates per run first (default 5)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--parts", action="store_true", help="also time the DWC-specific parts of each run's updates")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    benches = []
    for run in args.runs:
        cfg = load_config(run)
        ckpt = load_checkpoint(run / CHECKPOINT)
        if cfg.algo != "sac" or "replay" not in ckpt:
            raise SystemExit(f"error: {run} is not a SAC run with its full checkpoint (an exported policy has no replay)")
        benches.append(Bench(str(run), cfg.actor, cfg.sac, ckpt, load=True))
        if len(benches) == 1:
            baseline = Bench("mlp (fresh, same replay)", ActorConfig(policy="mlp"), cfg.sac, ckpt, load=False)
    benches.insert(0, baseline)
    for b in benches:
        b.time(args.warmup)
    times = {b.name: [] for b in benches}
    for r in range(args.rounds):
        for b in benches:
            times[b.name].append(b.time(args.updates))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{t[-1]:.1f}" for t in times.values()) + " ms/update")
    mlp = statistics.median(times[baseline.name])
    rows = [{"run": b.name, "ms_per_update": statistics.median(times[b.name]), "rounds_ms": times[b.name],
             "vs_mlp": statistics.median(times[b.name]) / mlp, "wiring": b.wiring} for b in benches]
    if args.parts:
        for b, row in zip(benches[1:], rows[1:]):
            row["parts_ms_per_update"] = time_parts(b, args.updates)
    print(f"\n{'run':50s} {'ms/update':>10s} {'vs MLP':>7s}  wiring candidates per input")
    for row in rows:
        cands = " / ".join(f"{v:.2f}" for v in row["wiring"].values()) or "-"
        print(f"{row['run']:50s} {row['ms_per_update']:10.1f} {row['vs_mlp']:6.2f}x  {cands}")
    for row in rows:
        if row.get("parts_ms_per_update"):
            print(f"\n{row['run']}: ms per update in each DWC-specific part (an extra round, each call wrapped)")
            for label, ms in row["parts_ms_per_update"].items():
                print(f"  {label:50s} {ms:6.2f}")
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "updates": args.updates, "rounds": args.rounds,
                                         "torch": torch.__version__, "results": rows}, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    try:
        main()
    except UserError as e:
        raise SystemExit(f"error: {e}")
