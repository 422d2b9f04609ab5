"""scripts/family_table.py: the table assembled from saved synth reports, and a rerun that reads finished
cells (newer than the build, made for that family) instead of running the tools again."""
import importlib.util
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("family_table", ROOT / "scripts" / "family_table.py")
ft = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ft)
POLICY = "inverted-pendulum-v5-gates"


def _report(build: Path, device: str, family: str | None, **kw) -> Path:
    r = {"target": device, "device": f"part of {device}", "luts": 1652, "ffs": 1389, "fmax_mhz": 180.0,
         "requested_mhz": 100.0, "timing_met": True, "latency_cycles": 15, "action_latency_ns": 83.3, "seconds": 99.0,
         "cells": {"kind": "LUT4", "used": 2074, "available": 4608, "predicted": 2070},
         "smallest_fit": {"family": family, "device": device, "too_small": {"gowin-1k": "too small"}} if family else None}
    path = build / "synth" / device / "report.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**r, **kw}))
    return path


def _build(out: Path) -> Path:
    build = out / "builds" / POLICY
    build.mkdir(parents=True)
    for name in ("dwc_core.v", "compile_report.json"):
        (build / name).write_text("{}")
    os.utime(build / "dwc_core.v", (1000, 1000))
    return build


def test_finished_cells_are_read_and_tabled(tmp_path, capsys):
    build = _build(tmp_path)
    _report(build, "gowin-4k", "gowin")
    _report(build, "ecp5-25k", None)  # a plain --target ecp5-25k run: not the family's cell
    stale = _report(build, "ice40-up5k", "ice40")
    os.utime(stale, (500, 500))  # older than the build: would be rerun
    assert ft.finished_report(build, "gowin")["target"] == "gowin-4k"
    assert ft.finished_report(build, "ecp5") is None and ft.finished_report(build, "ice40") is None
    _report(build, "xc7", None, cells=None, fmax_mhz=None, requested_mhz=None, timing_met=None,
            action_latency_ns=None, utilisation=0.055, utilisation_of="LUT6")
    no_fit = {**ft.record(POLICY, "machxo2", build, None, 31.0, not_fit="machxo2-1200 is too small: 136%"),
              "finished_at": 2000.0}
    (tmp_path / "family_table.json").write_text(json.dumps([no_fit]))
    assert ft.main(["--out", str(tmp_path), "--policies", POLICY, "--families", "gowin", "machxo2", "xc7"]) == 0
    recs = json.loads((tmp_path / "family_table.json").read_text())
    assert [r["family"] for r in recs] == ["gowin", "machxo2", "xc7"]
    gowin, machxo2, xc7 = recs
    assert gowin["device"] == "gowin-4k" and gowin["cells"] == {"kind": "LUT4", "used": 2074, "available": 4608}
    assert gowin["too_small"] == ["gowin-1k"] and gowin["wall_s"] == 99.0 and gowin["fits"]
    assert gowin["command"] == f"dwc synth {build} --target gowin"
    assert not machxo2["fits"] and machxo2["wall_s"] == 31.0
    assert xc7["estimate_only"] and xc7["fmax_mhz"] is None
    md = (tmp_path / "family_table.md").read_text()
    assert f"| {POLICY} | gowin | gowin-4k (gowin-1k too small) | 2,074/4,608 LUT4 | 1,652 | 1,389 | 180.0 | 15 | 83.3 | met (100 MHz placed) | 99 |" in md
    assert "| xc7 (estimate) | xc7 | 5.5% of LUT6 |" in md and "does not fit" in md and "136%" in md
    lines = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("[") for line in lines) == 6  # a start and an end line per cell
    assert sum(line.endswith(", read from its report)") for line in lines) == 3  # no tool ran


def test_archive_copies_the_finished_cells(tmp_path):
    """--archive runs nothing: the table, each fitting cell's report and logs under DIR/POLICY/DEVICE/,
    the commands, and no folder for a cell that did not fit or is no longer in the table."""
    build = _build(tmp_path)
    cell = _report(build, "gowin-4k", "gowin").parent
    (cell / "nextpnr.log").write_text("Max frequency")
    (cell / "top.fs").write_text("0101")  # a bitstream: not archived
    no_fit = ft.record(POLICY, "machxo2", build, None, 31.0, not_fit="too small")
    (tmp_path / "family_table.json").write_text(json.dumps([ft.record(POLICY, "gowin", build, None, 99.0)
                                                           | {"device": "gowin-4k"}, no_fit]))
    (tmp_path / "family_table.md").write_text("table")
    dest = tmp_path / "arch"
    (dest / POLICY / "gowin-1k").mkdir(parents=True)  # stale: removed
    assert ft.main(["--out", str(tmp_path), "--archive", str(dest)]) == 0
    assert sorted(p.name for p in (dest / POLICY / "gowin-4k").iterdir()) == ["nextpnr.log", "report.json"]
    assert not (dest / POLICY / "gowin-1k").exists() and (dest / "family_table.md").read_text() == "table"
    cmds = (dest / "commands.txt").read_text()
    assert f"dwc synth {build} --target gowin\n" in cmds and "--target machxo2   # does not fit" in cmds
    assert cmds.count("\ndwc compile ") == 1
