"""Inference throughput of the frozen circuit vs the float MLP actor, side by side in one run.

Measures samples/s at batch 1 and batch 4096 on one thread for:
  torch-mlp    the 2 x 256 float MLP actor in PyTorch (what users would deploy instead)
  ort-mlp      the same MLP (same weights) as an ONNX Gemm/Relu graph in onnxruntime (if installed)
  reference    the IR's numpy reference executor (obviously correct, slow)
  fast         the IR compiled to bit-sliced C (256 samples per block of 4 x 64-bit words)
on a DWC of the published size (2 x 1024 LUT6, B = 63, Hopper-v5 dimensions, random weights:
throughput does not depend on the learned values) or on a trained policy (--policy DIR).

Then batch 1 as dwc eval --frozen meets it, one float observation in, one action out, per call
(median of --rounds rounds, the candidates taking turns so that a change in the machine's load
hits them all alike; min-max in brackets; ratios to ort-mlp's median):
  fast act_one     the fast executor's batch-1 path: the C header's scalar function through ctypes
  c-header call    that C function alone through ctypes (no Python around it: the floor)
  fast 256-block   the fast executor's block path for one sample (batch 1's path before act_one)
  fast 256-block, codes in   the same from fixed-point codes (what the table above measured before)
  reference        reference.act on one observation
  torch-mlp / ort-mlp as above

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
from dwc.backends.fast import FastExecutor
from dwc.frontends.freeze import untrained_graph
from dwc.ir.passes import optimize
from dwc.models import ActorConfig, build_actor


def rate(fn, batch: int, min_seconds: float = 1.0) -> float:
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_seconds:
        fn()
        n += batch
    return n / (time.perf_counter() - t0)


def ort_mlp(mlp):
    """The MLP actor's deterministic action as an onnxruntime session (1 thread), or None."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    inits, nodes, x = [], [], "obs"
    std = np.sqrt(mlp.normalizer.var.numpy() + mlp.normalizer.eps)
    inits += [numpy_helper.from_array(mlp.normalizer.mean.numpy().astype(np.float32), "mu"),
              numpy_helper.from_array(std.astype(np.float32), "sd")]
    nodes += [helper.make_node("Sub", [x, "mu"], ["c"]), helper.make_node("Div", ["c", "sd"], ["n"]),
              helper.make_node("Clip", ["n", "lo", "hi"], ["h0"])]
    inits += [numpy_helper.from_array(np.float32(-10), "lo"), numpy_helper.from_array(np.float32(10), "hi")]
    layers = [mlp.trunk[0], mlp.trunk[2], mlp.mean]
    for i, lin in enumerate(layers):
        inits += [numpy_helper.from_array(lin.weight.detach().numpy(), f"w{i}"),
                  numpy_helper.from_array(lin.bias.detach().numpy(), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [f"h{i}", f"w{i}", f"b{i}"], [f"g{i}"], transB=1))
        nodes.append(helper.make_node("Relu" if i < 2 else "Tanh", [f"g{i}"], [f"h{i + 1}"]))
    inits += [numpy_helper.from_array(mlp.action_scale.numpy(), "scale"),
              numpy_helper.from_array(mlp.action_bias.numpy(), "bias")]
    nodes += [helper.make_node("Mul", ["h3", "scale"], ["s"]), helper.make_node("Add", ["s", "bias"], ["action"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["N", None])],
                              [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["N", None])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", help="a trained run or policies/ folder: DWC, gate network or quantised MLP "
                                     "(default: a random DWC of the published size)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--rounds", type=int, default=7, help="batch-1 rounds per candidate (default 7)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.policy:  # any policy with a circuit (DWC, gate network, quantised MLP), frozen as dwc compile does
        from pathlib import Path

        from dwc.flows.compile import freeze_run
        graph, _ = optimize(freeze_run(Path(args.policy)))
        obs_dim, act_dim = graph.obs_dim, graph.action_dim
    else:
        obs_dim, act_dim = 11, 3
        graph = untrained_graph(obs_dim, act_dim)
    mlp = build_actor(ActorConfig(policy="mlp"), obs_dim, act_dim, [-1] * act_dim, [1] * act_dim).eval()
    fast = FastExecutor(graph)
    sess = ort_mlp(mlp)
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
            if sess is not None:
                xn = x.numpy()
                assert np.allclose(sess.run(None, {"obs": xn})[0], mlp.act(x).numpy(), atol=1e-5)  # same function
                r["ort-mlp"] = rate(lambda: sess.run(None, {"obs": xn}), batch)
        qs = q[:256]
        r["reference"] = rate(lambda: reference.actions_int(graph, qs), len(qs))
        rows.append(r)
    luts = sum(len(l) for l in graph.layers)
    print(f"circuit: {luts} LUTs, {len(graph.comparators)} comparators, {obs_dim} obs dims; 1 thread; samples/s")
    print(f"{'batch':>6} {'torch-mlp':>12} {'ort-mlp':>12} {'fast':>12} {'reference':>12} {'fast/torch':>11} "
          f"{'fast/ort':>9}")
    for r in rows:
        ort_rate = r.get("ort-mlp")
        print(f"{r['batch']:>6} {r['torch-mlp']:>12.0f} {ort_rate or float('nan'):>12.0f} {r['fast']:>12.0f} "
              f"{r['reference']:>12.0f} {r['fast'] / r['torch-mlp']:>10.2f}x "
              + (f"{r['fast'] / ort_rate:>8.2f}x" if ort_rate else f"{'-':>9}"))
    b1 = rows[0]
    print(f"batch-1 latency: torch-mlp {1e6 / b1['torch-mlp']:.1f} us, "
          + (f"ort-mlp {1e6 / b1['ort-mlp']:.1f} us, " if "ort-mlp" in b1 else "") + f"fast {1e6 / b1['fast']:.1f} us")
    one = batch_one(graph, fast, mlp, sess, args.rounds)
    print(f"\nbatch 1, one float observation -> one action per call; us per action, median of {args.rounds} "
          f"rounds [min-max]; ratio = ort-mlp's median / this median (> 1: faster than ort-mlp)")
    ort_us = one.get("ort-mlp", {}).get("median_us")
    for name, r in one.items():
        ratio = f"{ort_us / r['median_us']:>7.2f}x" if ort_us else f"{'-':>8}"
        print(f"  {name:<26} {r['median_us']:>9.2f} us  [{r['min_us']:.2f}-{r['max_us']:.2f}]  {ratio}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"luts": luts, "rows": rows, "batch1": one, "context": context()}, f, indent=2)


def us_per_call(fn, seconds: float) -> float:
    """Microseconds per call, calls in runs of 20 between clock reads."""
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            fn()
        n += 20
    return (time.perf_counter() - t0) / n * 1e6


def batch_one(graph, fast, mlp, sess, rounds: int, seconds: float = 0.3) -> dict:
    """us per call at batch 1 for each candidate: rounds of ``seconds`` each, candidates interleaved."""
    rng = np.random.default_rng(1)
    lo = np.array([f.min_int for f in graph.obs_formats])
    hi = np.array([f.max_int for f in graph.obs_formats])
    obs = rng.uniform(lo, hi) * np.array([2.0 ** -f.frac for f in graph.obs_formats])  # as an env returns it
    assert np.array_equal(fast.act_one(obs), reference.act(graph, obs)[0])
    assert np.array_equal(fast.act_blocks(obs), reference.act(graph, obs))
    q = reference.quantize_obs(graph, obs)
    x = torch.tensor(obs[None], dtype=torch.float32)
    args = fast._args_d
    fast._obs1[...] = obs
    cands = {"fast act_one": lambda: fast.act_one(obs),
             "c-header call": lambda: fast._act_d(*args),
             "fast 256-block": lambda: fast.act_blocks(obs),
             "fast 256-block, codes in": lambda: fast.actions_int_blocks(q),
             "reference": lambda: reference.act(graph, obs)}
    if sess is not None:
        xn = x.numpy()
        cands["ort-mlp"] = lambda: sess.run(None, {"obs": xn})
    cands["torch-mlp"] = lambda: mlp.act(x)
    times = {k: [] for k in cands}
    with torch.no_grad():
        for _ in range(rounds):
            for k, fn in cands.items():
                times[k].append(us_per_call(fn, seconds))
    return {k: {"median_us": round(float(np.median(v)), 3), "min_us": round(min(v), 3), "max_us": round(max(v), 3),
                "rounds_us": [round(t, 3) for t in v]} for k, v in times.items()}


def context() -> dict:
    import os
    import platform
    from dwc.core.cbuild import cpu_model
    ctx = {"cpu": cpu_model(), "machine": platform.machine(), "cores": os.cpu_count(), "threads": 1,
           "torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
           "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "load_average": os.getloadavg()}
    try:
        import onnxruntime
        ctx["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    return ctx


if __name__ == "__main__":
    main()
