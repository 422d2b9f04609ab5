"""scripts/formal_table.py --archive: the table rewritten from saved formal reports (a real one, archived
from a proof of the shipped gate network), cells not run listed as such, and the files copied; nothing runs."""
import importlib.util
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("formal_table", ROOT / "scripts" / "formal_table.py")
ft = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ft)
SAVED = ROOT / "results" / "formal" / "table"
CELL = "inverted-pendulum-v5-gates-pmax"


def test_archive_tables_saved_reports_and_copies_them(tmp_path, capsys):
    out, dest = tmp_path / "work", tmp_path / "archive"
    for d, suffix in (("reports", ".json"), ("logs", ".log")):
        (out / d).mkdir(parents=True)
        shutil.copy(SAVED / d / f"{CELL}{suffix}", out / d / f"{CELL}{suffix}")
    assert ft.main(["--out", str(out), "--archive", str(dest), "--policies", "inverted-pendulum-v5-gates"]) == 0
    assert "archived 1 cells" in capsys.readouterr().out
    assert not (out / "builds" / "inverted-pendulum-v5-gates").exists()  # nothing compiled
    records = {r["cell"]: r for r in json.loads((dest / "table.json").read_text())}
    assert records[CELL]["verdict"] == "PROVED" and records[CELL]["reference"]["status"] == "proved"
    assert records[CELL]["latency_cycles"] == json.loads((SAVED / "reports" / f"{CELL}.json").read_text())["latency_cycles"]
    assert {records[c]["verdict"] for c in records if c != CELL} == {"not run"} and len(records) == 4
    assert (dest / "reports" / f"{CELL}.json").exists() and (dest / "logs" / f"{CELL}.log").exists()
    assert "PROVED" in (dest / "summary.md").read_text() and (dest / "table.md").exists()
