"""Before/after table of the comparator lowerings from dwc synth runs: ``full`` (one full-width
compare per threshold, the old default) against ``shared`` (per-dimension shared digit compares,
registered in place of the input register; today's default), per policy and target.

Reads DIR/<policy>-<target>-<lowering>[-p<K>].report.json (dwc synth's report.json) and, for a
design refused before place and route, the refusal in DIR/<same name>.synth.log; writes
DIR/summary.json and prints the table as Markdown.

    python scripts/comparators_summary.py results/comparators
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

NAME = re.compile(r"^(?P<policy>.+)-(?P<target>ecp5-25k|ecp5-85k|ice40-up5k|ice40-hx8k|xc7)-(?P<lowering>shared|full)"
                  r"(?:-p(?P<pipeline>\d+))?$")
REFUSED = re.compile(r"is too small for this (?:design|core): (?:the core alone needs |core \+ shell needs )?"
                     r"(?P<kind>\w+) (?P<need>\d+)/(?P<have>\d+)")


def row(name: str, d: Path) -> dict | None:
    m = NAME.match(name)
    if not m:
        return None
    out = {"name": name, "policy": m["policy"], "target": m["target"], "lowering": m["lowering"]}
    rep = d / f"{name}.report.json"
    log = d / f"{name}.synth.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    lat = re.search(r"latency (\d+) cycles", text)
    pipe = re.search(r"--pipeline (\w+)", text)
    out["pipeline"] = m["pipeline"] or (pipe[1] if pipe else None)
    if not rep.exists():
        ref = REFUSED.search(text)
        luts = re.search(r"\((\d+) LUT4 \+", text)
        out.update(placed=False, latency_cycles=int(lat[1]) if lat else None, core_luts=int(luts[1]) if luts else None,
                   refused=({"kind": ref["kind"], "predicted": int(ref["need"]), "available": int(ref["have"])}
                            if ref else None))
        return out
    r = json.loads(rep.read_text())
    a = r.get("area") or {}

    def part(p: dict | None) -> dict | None:
        if not p:
            return None
        carries = {k: v for k, v in p["cells"].items() if k in ("CCU2C", "SB_CARRY", "CARRY4")}
        return {"lut_sites": p.get("lut_sites"), "luts": p["luts"], "carry_cells": carries, "ffs": p["ffs"]}
    cells = r.get("cells") or {}
    out.update(placed=bool(cells.get("used")), latency_cycles=r["latency_cycles"], core_luts=r["luts"],
               core_ffs=r["ffs"], cells_kind=cells.get("kind"), cells_used=cells.get("used"),
               cells_available=cells.get("available"), utilisation=r.get("utilisation"),
               comparators=part(a.get("comparators")), network=part(a.get("network")),
               requested_mhz=r.get("requested_mhz"), fmax_mhz=r.get("fmax_mhz"),
               latency_ns_at_fmax=r.get("action_latency_ns"),
               latency_ns_at_requested=r.get("action_latency_ns_at_requested"), timing_met=r.get("timing_met"),
               seconds=r.get("seconds"), tools=r.get("tools"))
    # nextpnr rerun on the same netlist with other placement seeds (<name>.seed<N>.pnr.json)
    seeds = {1: r.get("fmax_mhz")}
    for f in sorted(d.glob(f"{name}.seed*.pnr.json")):
        fm = [v["achieved"] for v in json.loads(f.read_text()).get("fmax", {}).values()]
        seeds[int(f.name.split(".seed")[1].split(".")[0])] = round(min(fm), 2) if fm else None
    if len(seeds) > 1:
        out["fmax_mhz_by_seed"] = seeds
    return out


def fmt(v, spec: str = ",") -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[dict]) -> str:
    lines = ["| policy | target | pipeline | comparators | cells (core + shell) | LUTs (core) | comparator area | "
             "network area | Fmax / req MHz | latency | ns at Fmax / req | timing met |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if not r["placed"]:
            ref = r.get("refused")
            cells = (f"{ref['predicted']:,} / {ref['available']:,} {ref['kind']} predicted: refused" if ref
                     else "(estimate only)" if r["target"] == "xc7" else "-")
        else:
            cells = f"{r['cells_used']:,} {r['cells_kind']}"
        cmp_, net = r.get("comparators"), r.get("network")
        area = (lambda p: "-" if not p else f"{p['lut_sites']:,} ({p['ffs']:,} FF)")
        fmax = (f"{r['fmax_mhz']:.1f} / {r['requested_mhz']:g}" if r.get("fmax_mhz") else "-")
        if r.get("fmax_mhz_by_seed"):
            fmax += " (seeds " + ", ".join(f"{k}: {v:.1f}" for k, v in sorted(r["fmax_mhz_by_seed"].items())) + ")"
        ns = (f"{r['latency_ns_at_fmax']:.1f} / {r['latency_ns_at_requested']:.1f}"
              if r.get("latency_ns_at_fmax") else "-")
        met = {True: "yes", False: "no", None: "-"}[r.get("timing_met")]
        lines.append(f"| {r['policy']} | {r['target']} | {r['pipeline']} | {r['lowering']} | {cells} | "
                     f"{fmt(r.get('core_luts'))} | {area(cmp_)} | {area(net)} | {fmax} | "
                     f"{fmt(r['latency_cycles'], '')} | {ns} | {met} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, help="folder of <policy>-<target>-<lowering>[-pK].report.json / .synth.log")
    args = ap.parse_args(argv)
    names = sorted({p.name.split(".")[0] for p in args.dir.glob("*.synth.log")}
                   | {p.name.split(".")[0] for p in args.dir.glob("*.report.json")})
    rows = [r for r in (row(n, args.dir) for n in names) if r]
    if not rows:
        print(f"comparators_summary: no <policy>-<target>-<lowering> reports or logs in {args.dir}", file=sys.stderr)
        return 2
    order = {"full": 0, "shared": 1}
    rows.sort(key=lambda r: (r["policy"], r["target"], int(r["pipeline"]) if str(r["pipeline"]).isdigit() else 99,
                             order[r["lowering"]]))
    pairs = []
    for r in rows:  # shared against full at the same policy, target and pipeline
        if r["lowering"] != "shared":
            continue
        f = next((x for x in rows if x["lowering"] == "full" and
                  (x["policy"], x["target"], x["pipeline"]) == (r["policy"], r["target"], r["pipeline"])), None)
        if f and r.get("comparators") and f.get("comparators"):
            pairs.append({"policy": r["policy"], "target": r["target"], "pipeline": r["pipeline"],
                          "comparator_lut_sites": [f["comparators"]["lut_sites"], r["comparators"]["lut_sites"]],
                          "comparator_ratio": round(r["comparators"]["lut_sites"] / f["comparators"]["lut_sites"], 4),
                          "cells": [f.get("cells_used"), r.get("cells_used")],
                          "cells_saved": (f["cells_used"] - r["cells_used"]
                                          if f.get("cells_used") and r.get("cells_used") else None),
                          "fmax_mhz": [f.get("fmax_mhz"), r.get("fmax_mhz")],
                          "latency_ns_at_fmax": [f.get("latency_ns_at_fmax"), r.get("latency_ns_at_fmax")]})
    (args.dir / "summary.json").write_text(json.dumps({"runs": rows, "full_vs_shared": pairs}, indent=2) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
