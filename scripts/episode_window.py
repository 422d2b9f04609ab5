"""The training episodes that ended in a window of env steps, per run: how many, their median return and
median length. A quick read of whether a policy still falls (many short episodes) or stands, for runs of
``dwc train`` or ``scripts/referee_sac.py`` (both log ``charts/episodic_return``/``_length`` per episode).

  python scripts/episode_window.py RUN [RUN ...] --from 25000 --to 35000 [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def window(metrics: Path, lo: int, hi: int) -> dict:
    """Episodes ending at a step in (lo, hi]; a torn last line (a run stopped mid-write) is skipped."""
    lengths, returns = [], []
    for line in metrics.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "charts/episodic_length" in rec and lo < rec["step"] <= hi:
            lengths.append(rec["charts/episodic_length"])
            returns.append(rec["charts/episodic_return"])
    if not lengths:
        return {"episodes": 0, "median_return": None, "median_length": None}
    return {"episodes": len(lengths), "median_return": round(float(np.median(returns)), 1),
            "median_length": float(np.median(lengths))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="run folders holding metrics.jsonl")
    ap.add_argument("--from", dest="lo", type=int, required=True, help="window start (exclusive), env steps")
    ap.add_argument("--to", dest="hi", type=int, required=True, help="window end (inclusive), env steps")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    if args.hi <= args.lo:
        ap.error("--to must be above --from")
    missing = [str(r) for r in args.runs if not (r / "metrics.jsonl").is_file()]
    if missing:
        ap.error(f"no metrics.jsonl in {', '.join(missing)}")
    rows = {str(r): window(r / "metrics.jsonl", args.lo, args.hi) for r in args.runs}
    width = max(len(k) for k in rows)
    print(f"{'run':{width}}  episodes  median return  median length   (episodes ending in ({args.lo}, {args.hi}])")
    for run, w in rows.items():
        ret = "-" if w["median_return"] is None else f"{w['median_return']:.1f}"
        length = "-" if w["median_length"] is None else f"{w['median_length']:.0f}"
        print(f"{run:{width}}  {w['episodes']:8d}  {ret:>13}  {length:>13}")
    if args.json:
        args.json.write_text(json.dumps({"window": [args.lo, args.hi], "command": sys.argv, "runs": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
