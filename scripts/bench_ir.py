"""Inference throughput of the frozen circuit vs the float MLP actor, side by side in one run.

Measures samples/s at batch 1 and batch 4096 on one thread for:
  torch-mlp    the 2 x 256 float MLP actor in PyTorch (what users would deploy instead)
  reference    the IR's numpy reference executor (obviously correct, slow)
  fast         the IR compiled to bit-sliced C (64 samples per word)
on a DWC of the published size (2 x 1024 LUT6, B = 63, Hopper-v5 dimensions, random weights:
throughput does not depend on the learned values) or on a trained policy (--policy DIR).

  .venv/bin/python scripts/bench_ir.py            # published size
  .venv/bin/python scripts/bench_ir.py --policy policies/inverted-pendulum-v5-dwc
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from dwc.ir import reference
from dwc.ir.fast import FastExecutor
from dwc.ir.freeze import freeze, untrained_graph
from dwc.ir.passes import optimize
from dwc.models import ActorConfig, build_actor


def rate(fn, batch: int, min_seconds: float = 1.0) -> float:
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_seconds:
        fn()
        n += batch
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", help="a trained DWC run or policies/ folder (default: random published size)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.policy:
        from dwc.rl.train import load_actor
        actor, cfg, _ = load_actor(args.policy)
        obs_dim, act_dim = actor.encoder.dim, actor.head.actions
        graph, _ = optimize(freeze(actor))
    else:
        obs_dim, act_dim = 11, 3
        graph = untrained_graph(obs_dim, act_dim)
    mlp = build_actor(ActorConfig(policy="mlp"), obs_dim, act_dim, [-1] * act_dim, [1] * act_dim).eval()
    fast = FastExecutor(graph)
    rng = np.random.default_rng(0)
    lo = [f.min_int for f in graph.obs_formats]
    hi = [f.max_int + 1 for f in graph.obs_formats]
    rows = []
    for batch in (1, 4096):
        q = rng.integers(lo, hi, (batch, obs_dim))
        x = torch.tensor(q * np.array([2.0 ** -f.frac for f in graph.obs_formats]), dtype=torch.float32)
        with torch.no_grad():
            r = {"batch": batch, "torch-mlp": rate(lambda: mlp.act(x), batch),
                 "fast": rate(lambda: fast.actions_int(q), batch)}
        qs = q[:256]
        r["reference"] = rate(lambda: reference.actions_int(graph, qs), len(qs))
        rows.append(r)
    luts = sum(len(l) for l in graph.layers)
    print(f"circuit: {luts} LUTs, {len(graph.comparators)} comparators, {obs_dim} obs dims; 1 thread; samples/s")
    print(f"{'batch':>6} {'torch-mlp':>12} {'fast':>12} {'reference':>12} {'fast/mlp':>9}")
    for r in rows:
        print(f"{r['batch']:>6} {r['torch-mlp']:>12.0f} {r['fast']:>12.0f} {r['reference']:>12.0f} "
              f"{r['fast'] / r['torch-mlp']:>8.2f}x")
    b1 = rows[0]
    print(f"batch-1 latency: torch-mlp {1e6 / b1['torch-mlp']:.1f} us, fast {1e6 / b1['fast']:.1f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"luts": luts, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
