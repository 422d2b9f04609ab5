"""`dwc build` / `dwc demo`: the stages in one command, the summary, and re-runs that skip what is up
to date (real compile, real Verilator closed loop; synthesis in the slow test)."""
import json
from pathlib import Path

import pytest

from dwc.cli import main
from helpers import SMALL_DWC, assert_one_line_error, run_cli

POLICY = Path(__file__).parent.parent / "policies" / "inverted-pendulum-v5-gates"


def test_build_from_a_policy_then_skips_what_is_up_to_date(tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["build", "--from", str(POLICY), "--target", "none", "--verify-episodes", "1", "--out", str(out),
                 "--no-progress", "--json"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["stages_run"] == ["compile", "verify"] and s["rtl_equals_frozen"]
    assert s["rtl_return"] == s["frozen_return"] == 1000.0 and s["synth"] is None
    assert json.loads((out / "circuit" / "verify_report.json").read_text())["mismatches"] == 0
    capsys.readouterr()
    assert main(["build", "--from", str(POLICY), "--target", "none", "--verify-episodes", "1", "--out", str(out),
                 "--no-progress", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stages_run"] == []  # nothing changed: nothing re-runs
    (out / "circuit" / "verify_report.json").unlink()  # an output gone: that stage runs again, alone
    assert main(["build", "--from", str(POLICY), "--target", "none", "--verify-episodes", "1", "--out", str(out),
                 "--no-progress", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stages_run"] == ["verify"]
    # a dwc verify since replaced the report (vectors only, say): the stage runs again rather than quote it
    report = out / "circuit" / "verify_report.json"
    report.write_text(json.dumps({**json.loads(report.read_text()), "episodes": 0, "return_rtl": []}))
    assert main(["build", "--from", str(POLICY), "--target", "none", "--verify-episodes", "1", "--out", str(out),
                 "--no-progress", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stages_run"] == ["verify"]
    assert json.loads(report.read_text())["episodes"] == 1
    # dropping the input register changes the circuit: compile and verify run again, one cycle shorter
    assert main(["build", "--from", str(POLICY), "--target", "none", "--verify-episodes", "1", "--out", str(out),
                 "--no-progress", "--json", "--pipeline", "max", "--no-input-register"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["stages_run"] == ["compile", "verify"] and s["rtl_equals_frozen"]
    ports = json.loads((out / "circuit" / "dwc_core.json").read_text())
    assert s["latency_cycles"] == ports["latency_cycles"] == 1 + ports["pipeline"] and not ports["input_register"]


def test_build_errors_are_one_line(tmp_path):
    assert_one_line_error(run_cli("build", "--from", str(tmp_path / "none"), "--out", str(tmp_path / "o")),
                          "not a run or policy folder")
    assert_one_line_error(run_cli("build", "--from", str(POLICY), "--target", "vu9p", "--out", str(tmp_path / "o")),
                          "--target 'vu9p'")
    assert_one_line_error(run_cli("build", "--from", str(POLICY), "--env", "Hopper-v5", "--target", "none",
                                  "--out", str(tmp_path / "o")), "trained on InvertedPendulum-v5")
    assert not (tmp_path / "o").exists()  # a failed build leaves no empty folder behind
    import os
    from dwc.core.rundir import hold_lock
    held = hold_lock(tmp_path / "busy", "dwc build")  # as a build running there holds it
    assert_one_line_error(run_cli("build", "--from", str(POLICY), "--target", "none", "--out", str(tmp_path / "busy")),
                          f"busy is in use: dwc build by pid {os.getpid()}")
    held.close()


@pytest.mark.slow
@pytest.mark.ci  # ~40 s: the one test of the whole chain from a task to a bitstream
def test_build_trains_compiles_verifies_and_synthesises(tmp_path):
    """The whole pipeline from a task: a short training run, then a real iCE40 bitstream."""
    out = tmp_path / "b"
    assert main(["build", "--env", "InvertedPendulum-v5", "--steps", "400", "--learning-starts", "200",
                 "--target", "ice40-hx8k", "--pipeline", "1", "--verify-episodes", "2", "--out", str(out), "--no-progress",
                 *SMALL_DWC]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["stages_run"] == ["train", "compile", "verify", "synth"] and s["rtl_equals_frozen"]
    assert Path(s["synth"]["bitstream"]).stat().st_size > 0 and s["synth"]["luts"] > 0
    syn = s["synth"]
    assert syn["requested_mhz"] == 100 and syn["timing_met"] == (syn["fmax_mhz"] >= 100)
    assert syn["cells"]["kind"] == "ICESTORM_LC" and syn["cells"]["used"] >= syn["luts"]
    assert Path(syn["constraints"]).suffix == ".pcf"


@pytest.mark.slow
@pytest.mark.ci  # ~1 minute
def test_build_trains_a_teacher_distils_it_compiles_and_verifies(tmp_path):
    """The two-stage recipe from a task to a verified circuit in one command: a float MLP teacher by SAC,
    a DWC student by DAgger, the frozen circuit compiled and run in Verilator against the IR."""
    out = tmp_path / "d"
    assert main(["build", "--env", "InvertedPendulum-v5", "--algo", "distill", "--teacher-steps", "1200",
                 "--learning-starts", "300", "--hidden", "32", "--steps", "500", "--dagger-steps", "250",
                 "--target", "none", "--pipeline", "1", "--verify-episodes", "2", "--out", str(out), "--no-progress",
                 *SMALL_DWC]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["stages_run"] == ["train", "compile", "verify"] and s["rtl_equals_frozen"]
    teacher = json.loads((out / "run" / "teacher" / "eval.json").read_text())
    assert teacher["policy"] == "mlp" and teacher["train_steps"] == 1200
    ev = json.loads((out / "run" / "eval.json").read_text())
    assert ev["algo"] == "distill" and ev["teacher"]["train_steps"] == 1200 and ev["policy"] == "dwc"


def test_build_summary_shows_the_timing_verdict_and_the_placed_cells():
    from dwc.flows.build import summary_table
    s = {"env": "InvertedPendulum-v5", "policy": "dwc", "run": "r", "float_return": 1000.0, "episodes": 2,
         "frozen_return": 1000.0, "rtl_return": 1000.0, "rtl_equals_frozen": True, "latency_cycles": 3, "ir_luts": 64,
         "stages_run": ["synth"], "stages_skipped": [],
         "synth": {"target": "ice40-up5k", "luts": 174, "ffs": 103, "fmax_mhz": 16.54, "requested_mhz": 100,
                   "timing_met": False, "cells": {"kind": "ICESTORM_LC", "used": 637, "available": 5280},
                   "utilisation": 0.1206, "utilisation_of": "ICESTORM_LC", "constraints": "x/pins.pcf",
                   "nj_per_action": 0.1, "bitstream": "x/top.bin"}}
    table = summary_table(s)
    assert "Fmax 16.5 MHz < 100 requested: TIMING NOT MET" in table
    assert "637 ICESTORM_LC of 5280; 12% of the device's ICESTORM_LC" in table and "x/pins.pcf" in table
    old = dict(s, synth={k: v for k, v in s["synth"].items() if k not in ("requested_mhz", "timing_met", "cells")})
    assert "16.54 MHz" in summary_table(old)  # a build.json from before these fields still prints
    family = dict(s, synth=dict(s["synth"], target="ice40-hx8k", too_small={"ice40-up5k": "too small: ..."}))
    row = next(ln for ln in summary_table(family).splitlines() if ln.startswith("too small"))
    assert row.split(None, 2)[2] == "ice40-up5k (the smallest device of the family it fits: ice40-hx8k)"


def _options(sub):
    """A subcommand's optional arguments: dest -> (flags, default, help)."""
    import argparse

    from dwc.cli import build_parser
    parser = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[sub]
    return {a.dest: (tuple(a.option_strings), a.default, a.help) for a in parser._actions if a.option_strings}


def test_build_takes_every_train_option_with_its_name_default_and_help():
    train, build = _options("train"), _options("build")
    # train's own run handling, not training options; --seeds writes one run folder per seed (dwc sweep
    # builds each seed of a multi-seed config)
    own = {"out", "resume", "json", "no_progress", "help", "seeds"}
    for dest, (flags, default, help_) in train.items():
        if dest in own:
            continue
        # the LUT family trained for is --lut-family in both; its old name is --target in train and
        # --train-target in build, whose --target is the FPGA to synthesise for
        want = ("--lut-family", "--train-target") if dest == "target" else flags
        if dest == "eval_episodes":  # its old name --episodes is train's only: build's counted the RTL's too
            want = ("--eval-episodes",)
        assert build[dest] == (want, default, help_), dest
    assert build["synth_target"][0] == ("--target",)
    assert train["eval_episodes"][0] == ("--eval-episodes", "--episodes")  # as dwc eval's; --episodes the old name
    assert build["episodes"][:2] == (("--verify-episodes", "--episodes"), 3)  # as dwc verify's; the old one sets both


TRAIN_OPTS = ["--env", "InvertedPendulum-v5", "--steps", "300", "--learning-starts", "100", "--seed", "3",
              "--precision", "float32", "--eval-episodes", "1", "--lut-family", "ice40", *SMALL_DWC[:2],
              "--thermo-bits", "7", "--checkpoint-every", "100"]


def test_build_trains_the_run_train_trains_and_continues_it(tmp_path, capsys):
    """dwc build with dwc train's options writes the same config.json as dwc train (the synthesis
    --target none takes no part in it), a larger --steps trains the same run on, and an option that
    would train something else is named in the error."""
    assert main(["train", *TRAIN_OPTS, "--out", str(tmp_path / "t"), "--no-progress"]) == 0
    capsys.readouterr()
    out = tmp_path / "b"
    build = ["build", "--target", "none", "--verify-episodes", "1", "--out", str(out), "--no-progress", "--json"]
    assert main([*build, *TRAIN_OPTS]) == 0
    trained = json.loads((tmp_path / "t" / "config.json").read_text())
    assert json.loads((out / "run" / "config.json").read_text()) == trained
    assert trained["actor"]["lut_inputs"] == 4 and trained["target"] == "ice40"
    s = json.loads(capsys.readouterr().out)
    assert s["stages_run"] == ["train", "compile", "verify"] and s["rtl_equals_frozen"] and s["train_steps"] == 300

    longer = [("500" if a == "300" else a) for a in TRAIN_OPTS]
    assert main([*build, *longer]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["stages_run"] == ["train", "compile", "verify"] and s["train_steps"] == 500
    steps = [json.loads(l)["step"] for l in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] <= 500  # one run, continued: no restart from step 0
    assert json.loads((out / "run" / "config.json").read_text())["steps"] == 500
    legs = [l for l in (out / "run" / "commands.txt").read_text().splitlines() if l.startswith("dwc train")]
    assert len(legs) == 2 and "--resume" not in legs[0] and "--resume" in legs[1] and "--steps 500" in legs[1]

    res = run_cli(*build[:-1], *[("16" if a == "32" else a) for a in longer])  # --width 32 -> 16
    assert_one_line_error(res, "--width 16 (the run has 32)")
