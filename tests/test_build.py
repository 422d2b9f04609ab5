"""`dwc build` / `dwc demo`: the stages in one command, the summary, and re-runs that skip what is up
to date (real compile, real Verilator closed loop; synthesis in the slow test)."""
import json
from pathlib import Path

import pytest

from dwc.cli import main
from test_train import SMALL_DWC, assert_one_line_error, run_cli

POLICY = Path(__file__).parent.parent / "policies" / "inverted-pendulum-v5-gates"


def test_build_from_a_policy_then_skips_what_is_up_to_date(tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["build", "--from", str(POLICY), "--target", "none", "--episodes", "1", "--out", str(out),
                 "--no-progress", "--json"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["stages_run"] == ["compile", "verify"] and s["rtl_equals_frozen"]
    assert s["rtl_return"] == s["frozen_return"] == 1000.0 and s["synth"] is None
    assert json.loads((out / "circuit" / "verify_report.json").read_text())["mismatches"] == 0
    capsys.readouterr()
    assert main(["build", "--from", str(POLICY), "--target", "none", "--episodes", "1", "--out", str(out),
                 "--no-progress", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stages_run"] == []  # nothing changed: nothing re-runs
    (out / "circuit" / "verify_report.json").unlink()  # an output gone: that stage runs again, alone
    assert main(["build", "--from", str(POLICY), "--target", "none", "--episodes", "1", "--out", str(out),
                 "--no-progress", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stages_run"] == ["verify"]


def test_build_errors_are_one_line(tmp_path):
    assert_one_line_error(run_cli("build", "--from", str(tmp_path / "none"), "--out", str(tmp_path / "o")),
                          "not a run or policy folder")
    assert_one_line_error(run_cli("build", "--from", str(POLICY), "--target", "vu9p", "--out", str(tmp_path / "o")),
                          "--target 'vu9p'")
    assert_one_line_error(run_cli("build", "--from", str(POLICY), "--env", "Hopper-v5", "--target", "none",
                                  "--out", str(tmp_path / "o")), "trained on InvertedPendulum-v5")


@pytest.mark.slow
@pytest.mark.ci  # ~40 s: the one test of the whole chain from a task to a bitstream
def test_build_trains_compiles_verifies_and_synthesises(tmp_path):
    """The whole pipeline from a task: a short training run, then a real iCE40 bitstream."""
    out = tmp_path / "b"
    assert main(["build", "--env", "InvertedPendulum-v5", "--steps", "400", "--learning-starts", "200",
                 "--target", "ice40-hx8k", "--pipeline", "1", "--episodes", "2", "--out", str(out), "--no-progress",
                 *SMALL_DWC]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["stages_run"] == ["train", "compile", "verify", "synth"] and s["rtl_equals_frozen"]
    assert Path(s["synth"]["bitstream"]).stat().st_size > 0 and s["synth"]["luts"] > 0
