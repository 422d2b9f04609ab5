"""FPGA resources, Fmax and latency of DWC cores on every target, next to the published Artix-7
figures of the reference paper (core-only DWCs: about 0.8k-3.2k LUT6 and 1-3 cycles of latency).

Each design is compiled, then `dwc synth` runs the real tools (yosys, nextpnr, ecppack/icepack).

  .venv/bin/python scripts/bench_hw.py                          # a small core on every target,
                                                                # pipeline 1 and max
  .venv/bin/python scripts/bench_hw.py --designs small ip --targets ecp5-25k xc7
  .venv/bin/python scripts/bench_hw.py --designs published --targets xc7   # hours here; see README

designs: small (untrained 2 x 32 LUT4, B = 7, InvertedPendulum dims), ip (the shipped
InvertedPendulum DWC, 2 x 256 LUT6), hopper (the shipped Hopper DWC), published (untrained
2 x 1024 LUT6, B = 63, Hopper dims), or the path of any trained run or policy folder (e.g. a
published-size DWC you trained: what the passes prune from a trained circuit shows there).
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

PUBLISHED = "published Artix-7 core (reference paper): ~0.8k-3.2k LUT6, 1-3 cycles"
PUBLISHED_LUTS = (800, 3200)  # the range's ends, for the ratio column (LUT6 targets only)
ROOT = Path(__file__).resolve().parent.parent


def make_design(name: str, out: Path, pipeline: str, scope: str = "policy") -> Path:
    """Compile one design into ``out``; ``pipeline``: a number of register stages or "max";
    ``scope="network"``: LUT layers + popcounts only (the published cores' scope)."""
    from dwc.flows.compile import emit_verilog, freeze_run
    from dwc.frontends.freeze import untrained_graph
    from dwc.ir.passes import optimize
    from dwc.models import ActorConfig
    if name == "small":
        g = untrained_graph(4, 1, ActorConfig(width=32, lut_inputs=4, thermo_bits=7), env="InvertedPendulum-v5")
    elif name == "published":
        g = untrained_graph(11, 3, env="Hopper-v5")
    else:
        shipped = {"ip": "inverted-pendulum-v5-dwc", "hopper": "hopper-v5-dwc"}
        g, _ = optimize(freeze_run(ROOT / "policies" / shipped[name] if name in shipped else Path(name)))
    out.mkdir(parents=True, exist_ok=True)
    g.save(out / "graph.json")
    emit_verilog(g, out, pipeline if pipeline == "max" else int(pipeline), scope)
    return out


def main() -> None:
    from dwc.fpga.energy import build_activity
    from dwc.fpga.synth import TARGETS, DoesNotFit, synth
    from dwc.ir import Graph
    from dwc.rtl.popcount import built_compressor
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--designs", nargs="+", default=["small"],
                    help="small, ip, hopper, published, or run/policy folders (default small)")
    ap.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    ap.add_argument("--pipeline", nargs="+", default=["1", "max"],
                    help="register stages, one design per value: a number, or max (every cut, adder trees "
                         "split at each level); default: 1 max")
    ap.add_argument("--scope", choices=["policy", "network"], default="policy",
                    help="policy: observation in, action out (what dwc compile builds); network: comparator bits "
                         "in, popcounts out, the scope of the published Artix-7 figures (default policy)")
    ap.add_argument("--freq", type=float, default=200.0, help="clock requested from nextpnr (MHz)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    if bad := [d for d in args.designs if d not in ("small", "ip", "hopper", "published") and not Path(d).is_dir()]:
        ap.error(f"unknown designs {bad}: use small, ip, hopper, published or a run/policy folder")
    work = Path(tempfile.mkdtemp(prefix="dwc-bench-hw-"))
    rows = []
    for d in args.designs:
        for pipe in args.pipeline:
            build = make_design(d, work / f"{Path(d).name}-p{pipe}", pipe, args.scope)
            n_luts = sum(len(layer) for layer in json.loads((build / "graph.json").read_text())["layers"])
            ports = json.loads((build / "dwc_core.json").read_text())
            activity = build_activity(Graph.load(build / "graph.json"), 1000, built_compressor(ports))
            for t in args.targets:
                print(f"--- {d}, pipeline {pipe}, on {t} ...", flush=True)
                row = {"design": d, "scope": args.scope, "pipeline": pipe, "ir_luts": n_luts, "target": t}
                try:
                    r = synth(build, t, args.freq, log=lambda *a: None, activity=activity)
                    rows.append({**row, "luts": r["luts"], "ffs": r["ffs"], "fmax_mhz": r["fmax_mhz"],
                                 "latency_cycles": r["latency_cycles"], "nj": r["energy"]["per_action_nj"],
                                 "yosys_options": r["yosys_options"], "seconds": r["seconds"], "fits": True})
                except DoesNotFit as e:
                    rows.append({**row, "fits": False, "why": str(e)})
                print(f"    {json.dumps(rows[-1])}", flush=True)
                if args.json:  # after every row: a long run that is cut short keeps what it measured
                    args.json.write_text(json.dumps(rows, indent=2))
    print(f"\nscope {args.scope}, {args.freq:g} MHz requested; LUTs: the core alone (LUT4 on ECP5/iCE40, all LUT sizes on xc7); "
          f"nJ: ESTIMATED energy per action at Fmax (dwc.fpga.energy; xc7: no static part)")
    print(f"{'design':<10}{'pipe':>5}{'IR LUTs':>8}  {'target':<11}{'LUTs':>7}{'FFs':>6}{'Fmax':>8}{'lat':>5}"
          f"{'nJ':>10}{'secs':>7}  {'LUTs vs published':>18}")
    for r in rows:
        head = f"{r['design']:<10}{r['pipeline']:>5}{r['ir_luts']:>8}  {r['target']:<11}"
        if r["fits"]:
            fmax = f"{r['fmax_mhz']:.1f}" if r["fmax_mhz"] else "-"
            # LUT6 against LUT6 only: the published core is Artix-7
            ratio = (f"{r['luts'] / PUBLISHED_LUTS[1]:.2f}-{r['luts'] / PUBLISHED_LUTS[0]:.2f}x"
                     if r["target"] == "xc7" else "- (LUT4)")
            print(f"{head}{r['luts']:>7}{r['ffs']:>6}{fmax:>8}{r['latency_cycles']:>5}{r['nj']:>10.3g}"
                  f"{r['seconds']:>7.0f}  {ratio:>18}")
        else:
            print(f"{head}  does not fit: {r['why'][:70]}")
    print(PUBLISHED)


if __name__ == "__main__":
    main()
