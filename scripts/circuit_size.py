"""Fill in the circuit size (IR LUTs and comparators after the IR passes) of a sweep's finished LUT-circuit
runs that finished before `dwc sweep` recorded it, or without a hardware stage: their result.json gains
"ir_luts" and "comparators", which `dwc report` then shows. A few seconds a run: the circuit is frozen
from the run's checkpoint and optimised, no Verilog, no synthesis.

    python scripts/circuit_size.py /work/sweeps/distill-recipes [--force]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dwc.core.rundir import write_json
from dwc.flows.sweep import circuit_size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep", type=Path, help="a sweep folder (dwc sweep --out)")
    ap.add_argument("--force", action="store_true", help="recompute sizes already recorded")
    args = ap.parse_args(argv)
    results = sorted(args.sweep.glob("runs/*/*/seed*/result.json"))
    if not results:
        print(f"{args.sweep}: no finished runs (runs/TASK/CONFIG/seedS/result.json)", file=sys.stderr)
        return 2
    for path in results:
        r = json.loads(path.read_text())
        if r.get("policy") not in ("dwc", "gates") or (r.get("ir_luts") is not None and not args.force):
            continue
        size = circuit_size(path.parent / "run")
        write_json(path, dict(r, **size))
        print(f"{path.parent}: {size['ir_luts']} IR LUTs, {size['comparators']} comparators")
    return 0


if __name__ == "__main__":
    sys.exit(main())
