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


def build_link(build: Path, graph, ports: dict, ports_only: bool, work: Path):
    """The Verilator build of the link top: ``dwc hil --sim``'s own (:func:`dwc.sim.hil.host.link_bench`), or
    the earlier one, every signal public and the C++ unoptimised."""
    from dwc.sim.hil.host import SIM_DIVISOR, link_bench
    from dwc.rtl.link import link_verilog
    from dwc.sim.runner import Bench
    if ports_only:
        return link_bench(build, graph, ports, SIM_DIVISOR, work, log=lambda *_: None)
    src = work / "dwc_link.v"
    src.write_text(link_verilog(graph, ports, SIM_DIVISOR))
    return Bench([src], ports, work / "sim-verilator", toplevel="dwc_link", warnings_fatal=False, quick_build=True)


def run(build: Path, graph, ports: dict, env_id: str, seeds: list, steps: int, ref: list, ports_only: bool,
        work: Path) -> dict:
    from dwc.sim.hil.host import SIM_DIVISOR
    from dwc.ir.closed_loop import action_mismatches

    shutil.rmtree(work, ignore_errors=True)  # a fresh build each time: its cost is measured
    work.mkdir(parents=True)
    t0 = time.perf_counter()
    bench = build_link(build, graph, ports, ports_only, work)
    built = time.perf_counter() - t0
    r = bench.hil(build / "graph.json", env_id, seeds, SIM_DIVISOR, steps, {})
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

    from dwc.ir.compiled import load_build
    from dwc.rtl.link import frame_lengths
    from dwc.ir.closed_loop import reference_episodes
    from dwc.sim.verify import evaluation_seed
    graph, ports, _ = load_build(args.build)
    env_id = graph.meta["env"]
    seeds = [evaluation_seed(graph)]
    ref = reference_episodes(graph, env_id, seeds, args.steps)  # what both builds' actions must equal
    work = args.work or args.build / "bench-hil"
    out = {"build": str(args.build), "env": env_id, "frame_bytes": list(frame_lengths(ports))}
    for name, ports_only in (("ports_only", True), ("all_public", False)):
        out[name] = run(args.build, graph, ports, env_id, seeds, args.steps, ref, ports_only, work / name)
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
