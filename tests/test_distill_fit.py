"""scripts/distill_fit.py: fresh students fitted offline to a distillation run's own dataset."""
import importlib.util
import json
from pathlib import Path

import pytest

from dwc.cli import main

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("distill_fit", ROOT / "scripts" / "distill_fit.py")
fit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fit)


def test_a_student_fitted_to_the_runs_dataset_gets_closer_with_updates(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--algo", "distill", "--teacher", str(ROOT / "policies" / "inverted-pendulum-v5-dwc"),
                 "--steps", "500", "--dagger-steps", "250", "--width", "16", "--lut-inputs", "4", "--thermo-bits", "7",
                 "--eval-episodes", "1", "--out", str(run), "--no-progress"]) == 0
    out = tmp_path / "fit.json"
    assert fit.main([str(run), "--widths", "12", "24", "--updates", "300", "--every", "100", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert (r["states"], r["held_out"], r["lr"]) == (500, 50, 0.01)
    assert [s["width"] for s in r["students"]] == [12, 24]
    for s in r["students"]:
        losses = [c["train_loss"] for c in s["curve"]]
        assert [c["updates"] for c in s["curve"]] == [100, 200, 300]
        assert losses[-1] < losses[0] and all(c["held_out_loss"] >= 0 for c in s["curve"])
    assert "held out" in capsys.readouterr().out
    assert fit.main([str(run), "--widths", "12", "--updates", "100", "--every", "100", "--wiring-optim", "sparse",
                     "--states", "300", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["wiring_optim"] == "sparse" and (r["states"], r["held_out"]) == (300, 30)
    assert r["students"][0]["curve"][0]["train_loss"] > 0
    with pytest.raises(SystemExit, match="not a distillation run"):
        fit.main([str(ROOT / "policies" / "inverted-pendulum-v5-dwc")])
