"""HDL-stage figures, measured side by side in one run:

  emission      seconds for dwc compile's Verilog emission (Amaranth -> flat Verilog), target < 10 s
  closed loop   env-steps/s of MuJoCo episodes whose every action comes from the circuit running in
                Verilator (cocotb), target >= 1,000/s, next to the same loop with the IR reference
                executor and to bare env.step (the ceiling) on the same machine

for a DWC of the published size (2 x 1024 LUT6, B = 63, Hopper-v5 dimensions, untrained: the cost
depends on the circuit's shape, not on what it learned) or a compiled build (--build DIR).

  .venv/bin/python scripts/bench_hdl.py                       # published size on Hopper-v5
  .venv/bin/python scripts/bench_hdl.py --build build/ip      # a compiled policy on its env
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np


def env_step_rate(env_id: str, action: np.ndarray, steps: int) -> float:
    """Bare env.step with a fixed action, resets included: the ceiling for any closed loop."""
    import gymnasium as gym
    env = gym.make(env_id)
    env.reset(seed=0)
    t0 = time.perf_counter()
    for _ in range(steps):
        _, _, term, trunc, _ = env.step(action)
        if term or trunc:
            env.reset()
    return steps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, help="a dwc compile output (default: an untrained published-size DWC)")
    ap.add_argument("--env", default=None, help="env for the closed loop (default: the build's, or Hopper-v5)")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--max-steps", type=int, default=1000)
    ap.add_argument("--pipeline", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()

    from dwc.flows.compile import emit_verilog
    from dwc.ir import Graph
    from dwc.frontends.freeze import untrained_graph
    from dwc.sim.verify import verify

    build = args.build or Path(tempfile.mkdtemp(prefix="dwc-bench-hdl-"))
    if args.build:
        graph = Graph.load(build / "graph.json")
    else:
        graph = untrained_graph(11, 3, env="Hopper-v5")
        graph.save(build / "graph.json")
    env_id = args.env or graph.meta.get("env") or "Hopper-v5"
    hdl = emit_verilog(graph, build, args.pipeline)
    r = verify(build, env_id, args.episodes, "verilator", max_steps=args.max_steps, n_random=200, progress=True)
    d = r["designs"]["rtl"]
    ref_rate = d["steps"] / r["reference_seconds"] if r["reference_seconds"] else float("nan")
    bare = env_step_rate(env_id, np.zeros(graph.action_dim), 5000)
    res = {"circuit": graph.counts(), "env": env_id, "pipeline": args.pipeline,
           "emission_seconds": hdl["seconds"], "verilator_build_seconds": d["build_seconds"],
           "closed_loop_steps": d["steps"], "verilator_steps_per_s": d["env_steps_per_s"],
           "reference_steps_per_s": round(ref_rate, 1), "bare_env_steps_per_s": round(bare, 1),
           "mismatches": r["mismatches"]}
    c = res["circuit"]
    print(f"\ncircuit: {c['luts']} LUTs {c['luts_per_arity']}, {c['comparators']} comparators; {env_id}; "
          f"pipeline {args.pipeline}")
    print(f"{'Verilog emission':<36}{hdl['seconds']:>10.2f} s     target < 10 s: {'met' if hdl['seconds'] < 10 else 'MISSED'}")
    print(f"{'Verilator build':<36}{d['build_seconds']:>10.2f} s")
    print(f"{'closed loop, circuit in Verilator':<36}{d['env_steps_per_s']:>10.0f} steps/s  "
          f"target >= 1000: {'met' if d['env_steps_per_s'] >= 1000 else 'MISSED'}")
    print(f"{'closed loop, IR reference executor':<36}{ref_rate:>10.0f} steps/s  "
          f"(Verilator / reference: {d['env_steps_per_s'] / ref_rate:.2f}x)")
    print(f"{'bare env.step':<36}{bare:>10.0f} steps/s  (Verilator loop reaches "
          f"{d['env_steps_per_s'] / bare:.0%} of it)")
    print(f"{d['steps']} closed-loop steps in {args.episodes} episodes, {r['mismatches']} mismatches")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
