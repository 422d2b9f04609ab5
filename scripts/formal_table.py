"""``dwc verify --formal`` over every shipped policy that is a circuit: one table for the docs.

Every folder of policies/ is compiled as ``dwc compile POLICY --out OUT/builds/CELL --pipeline K`` at
``--pipeline 0``, ``2`` and ``max``, and at ``max`` with ``--no-input-register``; a policy ``dwc compile``
refuses (the float MLPs: not circuits) is recorded once with compile's own one-line reason and skipped.
Each build is proved by ``dwc verify --formal BUILD --no-progress`` with the default time limit (per
proof). Policies run smallest first (by checkpoint size), so the 2 x 1024 and Humanoid come last.

Writes, after every cell: OUT/reports/CELL.json (the build's formal_report.json), OUT/logs/CELL.log
(compile's and verify's output, the commands, wall and CPU seconds), OUT/formal_table.json (one record per
cell: per-lemma seconds, each proof's status and seconds, the verdict, and for what was not proved the
bound reached and why) and OUT/formal_table.md. Resumable: a cell whose OUT/reports/CELL.json exists is
read, not rerun (delete it to rerun one). Example, from the repository root:

    .venv/bin/python scripts/formal_table.py --out /tmp/ft --policies inverted-pendulum-v5-gates --pipelines max
    nohup nice -n 5 .venv/bin/python scripts/formal_table.py --out /work/formal-table > /work/formal-table.log 2>&1 &
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from dwc.core.rundir import write_json  # all or nothing: a stopped run leaves the old table

ROOT = Path(__file__).resolve().parent.parent
DWC = str(Path(sys.executable).with_name("dwc"))
RETRIES, WAIT_S = 10, 120  # a dwc that crashes (its code mid-edit in a shared tree) is tried again
CONFIGS = [("0", True), ("2", True), ("max", True), ("max", False)]  # (--pipeline, input register)


def policies(names: list[str] | None) -> list[str]:
    """The policy folders, smallest checkpoint first (the circuit's size follows the actor's), the
    quantised MLPs after the LUT networks: their constant-coefficient arithmetic is what the solver
    proves slowest (a small qmlp's two layers took 45 minutes at load 11, both proofs out of time)."""
    found = [p for p in (ROOT / "policies").iterdir() if (p / "config.json").exists()]
    if names:
        found = [p for p in found if p.name in names]

    def cost(p: Path):
        arithmetic = json.loads((p / "config.json").read_text()).get("actor", {}).get("policy") == "qmlp"
        return arithmetic, (p / "checkpoint.pt").stat().st_size, p.name
    return [p.name for p in sorted(found, key=cost)]


def cell_name(policy: str, pipeline: str, reg: bool) -> str:
    return f"{policy}-p{pipeline}" + ("" if reg else "-noreg")


def _run(cmd: list[str], log, timeout: float | None = None) -> tuple[int, float, float]:
    """Run ``cmd`` with its output appended to ``log``: (exit status, wall seconds, CPU seconds of it and
    its children, yosys included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    t0 = time.perf_counter()
    try:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        rc = 124
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    log.write(f"# exit {rc}, {wall:.1f} s wall, {cpu:.1f} s CPU, load {os.getloadavg()[0]:.1f}\n")
    log.flush()
    return rc, wall, cpu


def run_cell(out: Path, policy: str, pipeline: str, reg: bool) -> dict:
    """Compile and prove one cell; its record (the report is kept in OUT/reports)."""
    name = cell_name(policy, pipeline, reg)
    build = out / "builds" / name
    compile_cmd = [DWC, "compile", f"policies/{policy}", "--out", str(build), "--pipeline", pipeline,
                   "--no-progress"] + ([] if reg else ["--no-input-register"])
    verify_cmd = [DWC, "verify", "--formal", str(build), "--no-progress"]
    rec = {"cell": name, "policy": policy, "pipeline": pipeline, "input_register": reg,
           "compile_command": " ".join(["dwc"] + compile_cmd[1:]), "command": " ".join(["dwc"] + verify_cmd[1:]),
           "load_at_start": round(os.getloadavg()[0], 1)}
    with open(out / "logs" / f"{name}.log", "w") as log:
        rc, wall, _ = _run(compile_cmd, log, timeout=3600)
        rec["compile_s"] = round(wall, 1)
        text = (out / "logs" / f"{name}.log").read_text()
        if rc != 0:
            reason = next((line for line in reversed(text.splitlines()) if line and not line.startswith(("#", "$"))), "")
            rec.update(why=reason.strip(), exit=rc)
            if rc == 2 and "Traceback" not in text:  # compile refused it, in one line: not a circuit
                rec["verdict"] = "not compiled"
                write_json(out / "reports" / f"{name}.json", {"not_compiled": rec})
            else:  # a crash (the code being edited, say): not recorded, tried again
                rec.update(verdict="error", crashed=True)
            return rec
        rc, wall, cpu = _run(verify_cmd, log)
    rec.update(exit=rc, verify_s=round(wall, 1), verify_cpu_s=round(cpu, 1))
    report = build / "formal_report.json"
    if not report.exists() or report.stat().st_mtime < (build / "dwc_core.v").stat().st_mtime:
        rec.update(verdict="error", why=f"dwc verify --formal exited {rc} without a report (see the log)")
        return rec
    shutil.copy(report, out / "reports" / f"{name}.json")
    return summarise(rec, json.loads(report.read_text()))


def from_log(log: Path) -> dict:
    """Wall and CPU seconds of a cell's dwc verify, from its log's last '# exit' line."""
    runs = re.findall(r"^# exit (\d+), ([\d.]+) s wall, ([\d.]+) s CPU, load ([\d.]+)", log.read_text(), re.M) \
        if log.exists() else []
    if not runs:
        return {}
    rc, wall, cpu, _ = runs[-1]
    return {"exit": int(rc), "verify_s": float(wall), "verify_cpu_s": float(cpu)}


def summarise(rec: dict, report: dict, log: Path | None = None) -> dict:
    """A table record from a formal_report.json (``rec``: what the run itself knew; else its ``log``)."""
    if "not_compiled" in report:
        return report["not_compiled"]
    if "verify_s" not in rec and log is not None:
        rec = {**rec, **from_log(log)}
    ref, net = report["proofs"].get("reference", {}), report["proofs"].get("netlist", {})
    rec = {**rec, "latency_cycles": report["latency_cycles"], "resolved_pipeline": report.get("pipeline"),
           "luts": report["circuit"].get("luts"), "comparators": report["circuit"].get("comparators"),
           "lemmas": [{k: s.get(k) for k in ("lemma", "status", "seconds", "induction_length", "reached_length")}
                      for s in ref.get("lemmas", [])],
           "reference": {"status": ref.get("status"), "seconds": ref.get("seconds")},
           "netlist": {"status": net.get("status"), "seconds": net.get("seconds"),
                       "nets_compared": net.get("nets_compared"), "nets_proved": net.get("nets_proved")},
           "timeout_s": report["timeout_s"], "seconds": report["seconds"], "date": report["date"],
           "verdict": "PROVED" if report["proved"] else "NOT PROVED"}
    rec["why"] = None if report["proved"] else why_not(report)
    return rec


def why_not(report: dict) -> str:
    """Where a proof stopped and how far it had got."""
    out = []
    for name, p in report["proofs"].items():
        if p["status"] == "proved":
            continue
        if name == "reference":
            stuck = next((s for s in p.get("lemmas", []) if s["status"] != "proved"), None)
            if stuck is None:
                out.append(f"reference: {p['status']} after {p.get('seconds')} s")
                continue
            left = sum(s["status"] == "not run" for s in p["lemmas"])
            got = stuck.get("reached_length") or stuck.get("induction_length")
            out.append(f"reference: lemma '{stuck['lemma']}' {stuck['status']} after {stuck.get('seconds')} s"
                       + (f" at induction length {got} (needs {max(1, stuck.get('depth') or 1)})" if got else "")
                       + (f", {left} lemma(s) not run" if left else ""))
        else:
            done = (f", {p['nets_proved']:,} of {p['nets_compared']:,} nets proved"
                    if p.get("nets_compared") is not None else ", induction (equiv_induct) unfinished")
            out.append(f"netlist: {p['status']} after {p.get('seconds')} s (power-up {p.get('power_up')}{done})")
    return "; ".join(out)


def markdown(records: list[dict]) -> str:
    head = ("| policy | pipeline (latency) | input register | LUTs, comparators | lemmas, s | reference proof | "
            "netlist proof | verdict | wall s (CPU s) |\n|---|---|---|---|---|---|---|---|---|")
    rows, notes, waiting = [], [], {}
    for r in records:
        if r["verdict"] == "not run":
            waiting.setdefault(r["policy"], []).append(f"{r['pipeline']}{'' if r['input_register'] else ' without input register'}")
            continue
        if r["verdict"] in ("not compiled", "error"):
            if r["verdict"] != "not compiled" or r["pipeline"] == "0":
                notes.append(f"- `{r['policy']}`, pipeline {r['pipeline']}"
                             f"{'' if r['input_register'] else ', no input register'}: {r['verdict']}"
                             + (f": {r['why']}" if r.get("why") else ""))
            continue
        lat = f"{r['pipeline']} ({r['latency_cycles']})"
        lemmas = ", ".join(f"{s['lemma']} {s['seconds']}" + ("" if s["status"] == "proved" else f" {s['status']}")
                           for s in r["lemmas"] if s["status"] != "not run")
        ref, net = r["reference"], r["netlist"]
        took = f"{r['verify_s']} ({r['verify_cpu_s']})" if r.get("verify_s") is not None else f"{r['seconds']}"
        rows.append(f"| {r['policy']} | {lat} | {'yes' if r['input_register'] else 'no'} | {r['luts']}, "
                    f"{r['comparators']} | {lemmas} | {ref['status']} {ref['seconds']} s | {net['status']} "
                    f"{net['seconds']} s | {r['verdict']} | {took} |")
        if r.get("why"):
            notes.append(f"- {r['policy']}, pipeline {r['pipeline']}"
                         f"{'' if r['input_register'] else ', no input register'}: {r['why']}")
    notes += [f"- `{p}`: not run yet at pipeline {', '.join(cells)}" for p, cells in waiting.items()]
    return "\n".join([head, *rows, "", *notes]) + "\n"


def summary_markdown(records: list[dict]) -> str:
    """The table without the per-lemma seconds, for the docs."""
    out = ["| policy | pipeline (latency) | input register | reference proof | netlist proof | verdict | wall s (CPU s) |",
           "|---|---|---|---|---|---|---|"]
    for r in records:
        if r["verdict"] in ("not compiled", "error", "not run"):
            continue
        ref, net = r["reference"], r["netlist"]
        took = f"{r['verify_s']} ({r['verify_cpu_s']})" if r.get("verify_s") is not None else f"{r['seconds']}"
        nets = f", {net['nets_proved']:,} nets" if net.get("nets_proved") and net["status"] == "proved" else ""
        out.append(f"| {r['policy']} | {r['pipeline']} ({r['latency_cycles']}) | {'yes' if r['input_register'] else 'no'} | "
                   f"{ref['status']}, {ref['seconds']} s | {net['status']}, {net['seconds']} s{nets} | {r['verdict']} | {took} |")
    return "\n".join(out) + "\n"


def archive(out: Path, dest: Path) -> int:
    """The tables and each run cell's report and log copied to DEST (no builds); returns the cells copied."""
    for d in ("reports", "logs"):
        (dest / d).mkdir(parents=True, exist_ok=True)
    for src, name in (("formal_table.md", "table.md"), ("formal_table.json", "table.json"),
                      ("formal_table_summary.md", "summary.md")):
        shutil.copy(out / src, dest / name)
    reports = sorted((out / "reports").glob("*.json"))
    for r in reports:
        shutil.copy(r, dest / "reports" / r.name)
        if (log := out / "logs" / f"{r.stem}.log").exists():
            shutil.copy(log, dest / "logs" / log.name)
    return len(reports)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="work folder (outside the repository)")
    ap.add_argument("--policies", nargs="+", help="only these policy folders (default: all of policies/)")
    ap.add_argument("--pipelines", nargs="+", default=None, help="only these --pipeline values (0 2 max)")
    ap.add_argument("--no-run", action="store_true", help="only write the table from the saved reports")
    ap.add_argument("--archive", type=Path, metavar="DIR",
                    help="run nothing: write the table from the saved reports, then copy it (table.md, table.json, "
                         "summary.md) and every cell's report and log to DIR (e.g. results/formal/table)")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    if args.archive:
        main(["--out", str(out), "--no-run"] + (["--policies", *args.policies] if args.policies else []))
        print(f"archived {archive(out, args.archive)} cells to {args.archive}")
        return 0
    for d in ("builds", "reports", "logs"):
        (out / d).mkdir(parents=True, exist_ok=True)
    records = []
    for policy in policies(args.policies):
        for pipeline, reg in CONFIGS:
            if args.pipelines and pipeline not in args.pipelines:
                continue
            name = cell_name(policy, pipeline, reg)
            saved = out / "reports" / f"{name}.json"
            if saved.exists():
                rec = summarise({"cell": name, "policy": policy, "pipeline": pipeline, "input_register": reg},
                                json.loads(saved.read_text()), out / "logs" / f"{name}.log")
                print(f"[{name}] read: {rec['verdict']}", flush=True)
            elif args.no_run:
                rec = {"cell": name, "policy": policy, "pipeline": pipeline, "input_register": reg, "verdict": "not run"}
            else:
                for attempt in range(RETRIES):
                    print(f"[{name}] compiling and proving (load {os.getloadavg()[0]:.1f}) ...", flush=True)
                    rec = run_cell(out, policy, pipeline, reg)
                    if not rec.get("crashed"):
                        break
                    print(f"[{name}] dwc crashed ({rec['why']}); trying again in {WAIT_S} s", flush=True)
                    time.sleep(WAIT_S)
                print(f"[{name}] {rec['verdict']}" + (f" in {rec['verify_s']} s" if "verify_s" in rec else "")
                      + (f": {rec['why']}" if rec.get("why") else ""), flush=True)
            records.append(rec)
            write_json(out / "formal_table.json", records)
            (out / "formal_table.md").write_text(markdown(records))
            (out / "formal_table_summary.md").write_text(summary_markdown(records))
            if rec["verdict"] == "not compiled" and pipeline == "0":
                break  # not a circuit (compile says why): the other depths would say the same
    return 0


if __name__ == "__main__":
    sys.exit(main())
