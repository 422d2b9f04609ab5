"""HDL-stage figures, measured side by side in one run:

  emission      seconds for dwc compile's Verilog emission (Amaranth -> flat Verilog), target < 10 s
  closed loop   env-steps/s of MuJoCo episodes whose every action comes from the circuit running in
                Verilator (cocotb), target >= 1,000/s, next to the same loop with the IR reference
                executor and to bare env.step (the ceiling) on the same machine

for a DWC of the published size (2 x 1024 LUT6, B = 63, Hopper-v5 dimensions, untrained: the cost
depends on the circuit's shape, not on what it learned) or a compiled build (--build DIR).

  .venv/bin/python scripts/bench_hdl.py                       # published size on Hopper-v5
  .venv/bin/python scripts/bench_hdl.py --build build/ip      # a compiled policy on its env
  .venv/bin/python scripts/bench_hdl.py --compare-opt --episodes 3   # Verilator's C++ at -O0 (dwc's
                        # default for checks) against Verilator's own optimisation: build s, steps/s
"""
from __future__ import annotations

import argparse
import json
import shutil
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


def measure(build: Path, env_id: str, args) -> dict:
    """dwc verify's closed loop on ``build``: the Verilator build's seconds and the steps per second."""
    from dwc.sim.verify import verify
    r = verify(build, env_id, args.episodes, "verilator", max_steps=args.max_steps, n_random=200, progress=True)
    d = r["designs"]["rtl"]
    ref_rate = d["steps"] / r["reference_seconds"] if r["reference_seconds"] else float("nan")
    return {"verilator_build_seconds": d["build_seconds"], "closed_loop_steps": d["steps"],
            "verilator_steps_per_s": d["env_steps_per_s"], "reference_steps_per_s": round(ref_rate, 1),
            "verify_seconds": r["seconds"], "mismatches": r["mismatches"]}


def compare_opt(build: Path, env_id: str, args) -> dict:
    """The same check built twice in fresh folders: dwc's -O0 and Verilator's own C++ optimisation."""
    from dwc.sim import runner
    default = runner.VERILATOR_CXX_OPT
    res = {}
    for name, opt in (("verilator_own", None), ("dwc_default", default)):
        copy = Path(tempfile.mkdtemp(prefix=f"dwc-bench-hdl-{name}-"))
        shutil.copytree(build, copy, dirs_exist_ok=True, ignore=shutil.ignore_patterns("verify*"))
        runner.VERILATOR_CXX_OPT = opt
        try:
            res[name] = {"cxx_opt": opt or "Verilator's", **measure(copy, env_id, args)}
        finally:
            runner.VERILATOR_CXX_OPT = default
    own, ours = res["verilator_own"], res["dwc_default"]
    ours_label = f"dwc's {default}"
    print(f"\n{'':<28}{'Verilator own opt':>18}{ours_label:>18}{'ratio':>10}")
    for key, label in (("verilator_build_seconds", "build s"), ("verilator_steps_per_s", "closed loop steps/s"),
                       ("verify_seconds", "whole check s")):
        print(f"{label:<28}{own[key]:>18.1f}{ours[key]:>18.1f}{ours[key] / own[key]:>10.2f}")
    print(f"{own['closed_loop_steps']} closed-loop steps each; mismatches {own['mismatches']} and {ours['mismatches']}")
    return res


def report(res: dict, graph, env_id: str, emission: float, args) -> None:
    c = graph.counts()
    bare = env_step_rate(env_id, np.zeros(graph.action_dim), 5000)
    res["bare_env_steps_per_s"] = round(bare, 1)
    rate, ref_rate = res["verilator_steps_per_s"], res["reference_steps_per_s"]
    print(f"\ncircuit: {c['luts']} LUTs {c['luts_per_arity']}, {c['comparators']} comparators; {env_id}; "
          f"pipeline {args.pipeline}")
    print(f"{'Verilog emission':<36}{emission:>10.2f} s     target < 10 s: {'met' if emission < 10 else 'MISSED'}")
    print(f"{'Verilator build':<36}{res['verilator_build_seconds']:>10.2f} s")
    print(f"{'closed loop, circuit in Verilator':<36}{rate:>10.0f} steps/s  "
          f"target >= 1000: {'met' if rate >= 1000 else 'MISSED'}")
    print(f"{'closed loop, IR reference executor':<36}{ref_rate:>10.0f} steps/s  "
          f"(Verilator / reference: {rate / ref_rate:.2f}x)")
    print(f"{'bare env.step':<36}{bare:>10.0f} steps/s  (Verilator loop reaches {rate / bare:.0%} of it)")
    print(f"{res['closed_loop_steps']} closed-loop steps in {args.episodes} episodes, {res['mismatches']} mismatches")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, help="a dwc compile output (default: an untrained published-size DWC)")
    ap.add_argument("--env", default=None, help="env for the closed loop (default: the build's, or Hopper-v5)")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--max-steps", type=int, default=1000)
    ap.add_argument("--pipeline", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--compare-opt", action="store_true",
                    help="build the circuit twice, Verilator's C++ at -O0 and at Verilator's own optimisation")
    args = ap.parse_args()

    from dwc.flows.compile import emit_verilog
    from dwc.frontends.freeze import untrained_graph
    from dwc.ir import Graph

    build = args.build or Path(tempfile.mkdtemp(prefix="dwc-bench-hdl-"))
    if args.build:
        graph = Graph.load(build / "graph.json")
    else:
        graph = untrained_graph(11, 3, env="Hopper-v5")
        graph.save(build / "graph.json")
    env_id = args.env or graph.meta.get("env") or "Hopper-v5"
    hdl = emit_verilog(graph, build, args.pipeline)
    if args.compare_opt:
        res = compare_opt(build, env_id, args)
    else:
        res = measure(build, env_id, args)
        report(res, graph, env_id, hdl["seconds"], args)
    res.update(circuit=graph.counts(), env=env_id, pipeline=args.pipeline, emission_seconds=hdl["seconds"])
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
