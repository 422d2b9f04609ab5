"""Simulated hardware in the loop (``dwc hil --sim``): the Verilator build of the board top's logic
(core + UART link) two ways, side by side in one run on the same compiled policy and episode:

  ports only    what ``dwc hil --sim`` and ``dwc board-sim`` build: only the top's ports visible to
                cocotb, Verilator optimising the rest (C++ at the default -O level)
  all public    every signal visible to cocotb (its default) and the C++ unoptimised, as earlier
                versions built it

For each: the build's seconds, the seconds for the steps over the link (``wall_seconds`` of the
run), the actions' agreement with the reference executor, and the ratios.

  .venv/bin/python scripts/bench_hil.py --build BUILD --steps 100 --json out.json
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path


def run(build: Path, graph, ports: dict, env_id: str, steps: int, ports_only: bool, work: Path) -> dict:
    from dwc.hil import SIM_DIVISOR
    from dwc.rtl.link import link_verilog
    from dwc.sim.bitstream import public_ports
    from dwc.sim.closed_loop import action_mismatches, reference_episodes
    from dwc.sim.runner import Bench
    from dwc.verify import evaluation_seed

    shutil.rmtree(work, ignore_errors=True)  # a fresh build each time: its cost is measured
    work.mkdir(parents=True)
    text = link_verilog(graph, ports, SIM_DIVISOR)
    src = work / "dwc_link.v"
    src.write_text(public_ports(text) if ports_only else text)
    t0 = time.perf_counter()
    bench = Bench([src], ports, work / "sim-verilator", toplevel="dwc_link", warnings_fatal=False,
                  ports_only=ports_only, unoptimised=not ports_only)
    built = time.perf_counter() - t0
    seeds = [evaluation_seed(graph)]
    r = bench.hil(build / "graph.json", env_id, seeds, SIM_DIVISOR, steps, {})
    ref = reference_episodes(graph, env_id, seeds, steps)
    return {"build_seconds": round(built, 2), "run_seconds": round(r["seconds"], 2),
            "steps": sum(e["steps"] for e in r["episodes"]), "action_mismatches": action_mismatches(r["episodes"], ref)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, required=True, help="a dwc compile output folder")
    ap.add_argument("--steps", type=int, default=100, help="env steps over the link (one episode, cut there)")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default BUILD/bench-hil)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    if not (args.build / "graph.json").is_file():
        ap.error(f"--build {args.build}: not a dwc compile output folder (no graph.json); make one with "
                 "dwc compile POLICY --out FOLDER")

    from dwc.compiled import load_build
    from dwc.rtl.link import frame_lengths
    graph, ports, _ = load_build(args.build)
    env_id = graph.meta["env"]
    work = args.work or args.build / "bench-hil"
    out = {"build": str(args.build), "env": env_id, "frame_bytes": list(frame_lengths(ports))}
    for name, ports_only in (("ports_only", True), ("all_public", False)):
        out[name] = run(args.build, graph, ports, env_id, args.steps, ports_only, work / name)
        print(f"{name:10s}  build {out[name]['build_seconds']:7.1f} s   {out[name]['steps']} steps "
              f"{out[name]['run_seconds']:7.1f} s   mismatches {out[name]['action_mismatches']}", flush=True)
    a, b = out["ports_only"], out["all_public"]
    out["run_speedup"] = round(b["run_seconds"] / a["run_seconds"], 2)
    out["total_speedup"] = round((b["build_seconds"] + b["run_seconds"]) / (a["build_seconds"] + a["run_seconds"]), 2)
    print(f"ports only against all public: {out['run_speedup']}x the steps' speed, "
          f"{out['total_speedup']}x with the builds")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
