"""dwc report: a sweep's table (IQM and median over seeds with CIs, paired comparisons) and learning curves."""
from __future__ import annotations

import json
from pathlib import Path


def add(sub):
    p = sub.add_parser("report", help="paper-style table and learning curves of a sweep",
                       description="Per task and config, over seeds: the IQM with a 95% bootstrap CI, the median "
                                   "and quartiles of the float, frozen and hardware (Verilator) return, the circuit's size "
                                   "(IR LUTs and comparators; FPGA LUTs where synthesised), Fmax; "
                                   "each finished run by seed; each config compared with the earlier configs of "
                                   "the spec it shares its precision with or differs from in precision alone, over "
                                   "paired seeds. Writes "
                                   "SWEEP/report.json, SWEEP/report.md and SWEEP/curves_TASK.png. Works on a sweep "
                                   "still running or stopped: it ends with the runs not finished, each started one "
                                   "with the step of its checkpoint, where the same dwc sweep command resumes it.")
    p.add_argument("sweep", type=Path, help="sweep folder written by dwc sweep")
    p.add_argument("--baseline", metavar="CONFIG", action="append",
                   help="compare every other config with CONFIG only (repeat for several baselines); default: "
                        "each config against each earlier comparable config of the spec")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args) -> int:
    from dwc.flows.report import report, text
    rep = report(args.sweep, baselines=args.baseline)
    if args.json:
        print(json.dumps(rep, indent=2))
        return 0
    print(text(rep))
    print(f"\nwritten: {args.sweep / 'report.json'}, {args.sweep / 'report.md'}, " + ", ".join(rep["curves"]))
    return 0
