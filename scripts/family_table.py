"""The shipped policies on the smallest device of each FPGA family: one table for the docs.

Each policy is compiled once (``dwc compile POLICY --out OUT/builds/NAME --pipeline max``), then each
family is synthesised, placed and routed as ``dwc synth BUILD --target FAMILY`` does (the default clock:
placed for 100 MHz, a slower Fmax reported, not failed), landing on the family's smallest device the
core fits. ``xc7`` is yosys' LUT6/FF estimate alone (no place and route, no Fmax). Writes
OUT/family_table.json (one record per policy x family: device, cells placed, LUTs, FFs, Fmax, latency,
timing verdict, fit, wall seconds, the exact command) and OUT/family_table.md, rewritten after every
cell. Resumable: a cell whose BUILD/synth/<device>/report.json is newer than the build (and was made
for that family) is read, not rerun; so is a recorded "does not fit" newer than the build (unless the
family has gained a device since); Ctrl-C
loses no finished cell (dwc synth leaves a half-run target's folder as it was). Example, from the
repository root (minutes to hours per cell on a loaded machine):

    .venv/bin/python scripts/family_table.py --out /tmp/ft --policies inverted-pendulum-v5-gates --families ecp5 xc7
    .venv/bin/python scripts/family_table.py --out /work/family-table        # everything; rerun to resume
    .venv/bin/python scripts/family_table.py --out /work/family-table --archive results/fpga-families

``--archive DIR`` runs nothing: it copies the table and each finished cell's report.json, nextpnr log and
pins (DIR/POLICY/DEVICE/) with a commands.txt, the artefacts the docs' figures cite.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

POLICIES = ["inverted-pendulum-v5-gates", "inverted-pendulum-v5-dwc", "hopper-v5-dwc", "halfcheetah-v5-dwc"]
FAMILIES = ["ecp5", "ice40", "gowin", "machxo2", "gatemate", "nexus", "xc7"]  # xc7: an estimate only


def devices_of(family: str) -> tuple[str, ...]:
    from dwc.core.targets import FAMILIES as TABLE
    return TABLE[family].devices


def finished_report(build: Path, family: str) -> dict | None:
    """The report of a finished ``--target family`` run on this build, if one is newer than the build."""
    built = (build / "dwc_core.v").stat().st_mtime
    for device in devices_of(family):
        path = build / "synth" / device / "report.json"
        if not path.exists() or path.stat().st_mtime <= built:
            continue
        report = json.loads(path.read_text())
        landed_for = (report.get("smallest_fit") or {}).get("family")
        if landed_for == family or (family == device and landed_for is None):  # xc7 is its own device
            return report
    return None


def record(policy: str, family: str, build: Path, report: dict | None, wall_s: float | None,
           not_fit: str | None = None) -> dict:
    """One table row from a synth report (or from the DoesNotFit that refused every device)."""
    r = report or {}
    fmax, cells = r.get("fmax_mhz"), r.get("cells")
    return {"policy": policy, "family": family, "estimate_only": family == "xc7",
            "fits": not_fit is None, "did_not_fit": not_fit,
            "device": r.get("target"), "part": r.get("device"),
            "too_small": sorted((r.get("smallest_fit") or {}).get("too_small", {})),
            "cells": {k: cells[k] for k in ("kind", "used", "available")} if cells else None,
            "utilisation": r.get("utilisation"), "utilisation_of": r.get("utilisation_of"),
            "luts": r.get("luts"), "ffs": r.get("ffs"), "fmax_mhz": fmax, "requested_mhz": r.get("requested_mhz"),
            "timing_met": r.get("timing_met"), "latency_cycles": r.get("latency_cycles"),
            "action_latency_ns": r.get("action_latency_ns"),
            "wall_s": wall_s if wall_s is not None else r.get("seconds"), "synth_seconds": r.get("seconds"),
            "command": f"dwc synth {build} --target {family}", "build": str(build),
            "devices": list(devices_of(family)),  # those it could land on: a no-fit is rerun when the family grows
            "compile_command": f"dwc compile policies/{policy} --out {build} --pipeline max",
            "finished_at": time.time()}


def verdict(rec: dict) -> str:
    if not rec["fits"]:
        return "does not fit"
    if rec["estimate_only"]:
        return "estimate (no P&R)"
    if rec["fmax_mhz"] is None:
        return "no Fmax"
    return f"{'met' if rec['timing_met'] else 'not met'} ({rec['requested_mhz']:g} MHz placed)"


def markdown(records: list[dict]) -> str:
    """The table for the docs; a cell that did not fit carries its reason below the table."""
    head = ("| policy | family | device | cells placed (core + shell) | LUTs (core) | FFs (core) | Fmax MHz "
            "| latency cycles | latency ns | timing | wall s |\n|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|\n")
    rows, notes = [], []
    for r in records:
        cells = (f"{r['cells']['used']:,}/{r['cells']['available']:,} {r['cells']['kind']}" if r["cells"] else
                 f"{r['utilisation']:.1%} of {r['utilisation_of']}" if r["utilisation"] is not None else "-")
        num = (lambda v, f="{:,}": "-" if v is None else f.format(v))
        too_small = f" ({', '.join(r['too_small'])} too small)" if r["too_small"] else ""
        if not r["fits"]:
            notes.append(f"- {r['policy']} on {r['family']}: {r['did_not_fit']}")
        rows.append(f"| {r['policy']} | {r['family']}{' (estimate)' if r['estimate_only'] else ''} "
                    f"| {r['device'] or '-'}{too_small} | {cells} | {num(r['luts'])} | {num(r['ffs'])} "
                    f"| {num(r['fmax_mhz'], '{:.1f}')} | {num(r['latency_cycles'])} "
                    f"| {num(r['action_latency_ns'], '{:.1f}')} | {verdict(r)} | {num(r['wall_s'], '{:.0f}')} |")
    return head + "\n".join(rows) + "\n" + ("\nDid not fit:\n\n" + "\n".join(notes) + "\n" if notes else "")


def save(out: Path, records: list[dict]) -> None:
    """Both files, replaced whole (an interrupt leaves the previous ones)."""
    for name, text in (("family_table.json", json.dumps(records, indent=2)), ("family_table.md", markdown(records))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text + ("\n" if name.endswith("json") else ""))
        tmp.replace(out / name)


CELL_FILES = ("report.json", "nextpnr.log", "pnr.json", "pins.cst", "pins.lpf", "pins.pcf", "pins.ccf", "pins.pdc")


def archive(out: Path, dest: Path) -> int:
    """The table and each finished cell's small files (CELL_FILES: no netlists, no bitstreams; the report
    holds the bitstream's path and the exact commands) copied to DEST/POLICY/DEVICE/, a commands.txt that
    remakes them; returns the cells copied. A table policy's cells no longer in the table are removed."""
    records = json.loads((out / "family_table.json").read_text())
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("family_table.json", "family_table.md"):
        shutil.copy(out / name, dest / name)
    copied, lines = [], ["# the builds: dwc compile at --pipeline max, then dwc synth BUILD --target FAMILY per cell",
                         f"# (scripts/family_table.py --out {out}; the table's command and compile_command per cell)"]
    for r in records:
        lines += [r["compile_command"], r["command"] + ("" if r["fits"] else "   # does not fit")]
        if not r["fits"] or not r["device"]:
            continue
        src, to = Path(r["build"]) / "synth" / r["device"], dest / r["policy"] / r["device"]
        to.mkdir(parents=True, exist_ok=True)
        for name in CELL_FILES:
            if (src / name).exists():
                shutil.copy(src / name, to / name)
        copied.append(to)
    policies = {r["policy"] for r in records}  # other folders under DEST are left alone
    for stale in {d for pol in policies for d in (dest / pol).glob("*") if d.is_dir()} - set(copied):
        shutil.rmtree(stale)
    (dest / "commands.txt").write_text("\n".join(dict.fromkeys(lines)) + "\n")
    return len(copied)


def compiled(policy: str, out: Path) -> Path:
    """OUT/builds/NAME, compiled once at the deepest pipeline (kept on a rerun)."""
    from dwc.core.catalog import shipped_policy
    build = out / "builds" / policy
    if not ((build / "compile_report.json").exists() and (build / "dwc_core.v").exists()):
        run = shipped_policy(policy)
        print(f"compile: dwc compile {run} --out {build} --pipeline max", flush=True)
        from dwc.flows.compile import compile_run
        compile_run(run, build, pipeline="max", log=lambda *a: print(*a, flush=True))
    return build


def one_cell(policy: str, family: str, build: Path, old: dict | None, activity: list, verbose: bool) -> tuple[dict, str]:
    """The cell's record and "read" (from a finished run, or a recorded no-fit, newer than the build) or "ran"."""
    built = (build / "dwc_core.v").stat().st_mtime
    report = finished_report(build, family)
    if report is not None:
        return record(policy, family, build, report, old["wall_s"] if old and old["fits"] else None), "read"
    if old and not old["fits"] and old["finished_at"] > built and old.get("devices") == list(devices_of(family)):
        return old, "read"
    from dwc.fpga.synth import DoesNotFit, synth_smallest
    if not activity:  # measured once per build, for every family (as dwc synth does for its targets)
        from dwc.fpga.energy import build_activity
        from dwc.ir.compiled import load_build
        from dwc.rtl.popcount import built_compressor
        from dwc.core.defaults import ENERGY_STEPS
        graph, ports, _ = load_build(build)
        activity.append(build_activity(graph, ENERGY_STEPS, built_compressor(ports)))
    t0 = time.perf_counter()
    log = (lambda *a: print(*a, flush=True)) if verbose else (lambda *a: None)
    try:
        report = synth_smallest(build, family, None, log=log, activity=activity[0])
    except DoesNotFit as e:
        return record(policy, family, build, None, round(time.perf_counter() - t0, 1), not_fit=str(e)), "ran"
    return record(policy, family, build, report, round(time.perf_counter() - t0, 1)), "ran"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for builds/, family_table.json and .md")
    p.add_argument("--policies", nargs="+", default=POLICIES, metavar="NAME",
                   help=f"shipped policies (dwc policies lists them; default: {' '.join(POLICIES)})")
    p.add_argument("--families", nargs="+", default=FAMILIES, choices=FAMILIES, metavar="FAMILY",
                   help=f"FPGA families, each on its smallest device that fits (default: {' '.join(FAMILIES)})")
    p.add_argument("--verbose", action="store_true", help="dwc synth's own progress lines too")
    p.add_argument("--archive", type=Path, metavar="DIR",
                   help="run nothing: copy the table and the finished cells' reports and logs to DIR")
    args = p.parse_args(argv)
    if args.archive:
        print(f"archived {archive(args.out, args.archive)} cells and the table to {args.archive}")
        return 0
    from dwc.core.catalog import shipped_policy
    from dwc.core.errors import UserError
    try:
        [shipped_policy(pol) for pol in args.policies]  # a wrong name fails now, not hours in
    except UserError as e:
        p.error(str(e))
    args.out.mkdir(parents=True, exist_ok=True)
    table = args.out / "family_table.json"
    previous = {(r["policy"], r["family"]): r for r in (json.loads(table.read_text()) if table.exists() else [])}
    done, activities = dict(previous), {}
    cells = [(pol, fam) for pol in args.policies for fam in args.families]
    for i, (policy, family) in enumerate(cells, 1):
        build = compiled(policy, args.out)
        print(f"[{i}/{len(cells)}] {policy} x {family} ...", flush=True)
        try:
            rec, how = one_cell(policy, family, build, previous.get((policy, family)), activities.setdefault(policy, []),
                           args.verbose)
        except Exception as e:  # a tool failure: say so, keep the other cells going; rerun retries it
            print(f"[{i}/{len(cells)}] {policy} x {family}: FAILED: {str(e)[:400]}", flush=True)
            continue
        done[(policy, family)] = rec
        save(args.out, [done[k] for k in sorted(done, key=order)])
        what = (f"does not fit: {rec['did_not_fit'][:160]}" if not rec["fits"] else
                f"{rec['device']}, {rec['luts']} LUTs, Fmax {rec['fmax_mhz']}, {verdict(rec)}")
        print(f"[{i}/{len(cells)}] {policy} x {family}: {what} ({rec['wall_s']} s{', read from its report' if how == 'read' else ''})",
              flush=True)
    print(f"wrote {table} and {args.out / 'family_table.md'} ({len(done)} cells)")
    return 0


def order(key: tuple[str, str]) -> tuple:
    pol, fam = key
    return (POLICIES.index(pol) if pol in POLICIES else len(POLICIES), pol,
            FAMILIES.index(fam) if fam in FAMILIES else len(FAMILIES))


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    sys.exit(main())
