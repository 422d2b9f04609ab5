"""Every bad input a user can give answers with one line on stderr and the exit status the help documents,
before any work starts where the check needs no work; never a traceback (issue 51's list, and more)."""
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dwc.cli import main

ROOT = Path(__file__).parent.parent
GATES = ROOT / "policies" / "inverted-pendulum-v5-gates"
DWC = ROOT / "policies" / "inverted-pendulum-v5-dwc"
SMALL = ["--width", "32", "--lut-inputs", "4", "--thermo-bits", "7", "--learning-starts", "50", "--steps", "100"]


def one_line(capsys, *words) -> str:
    """The command's stderr: one line, naming ``words``."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    return err


@pytest.fixture(scope="module")
def core(small_build):
    """A compiled build: conftest's small DWC at InvertedPendulum's dimensions."""
    return small_build


# --- checked before any work -----------------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["build", "--pipeline", "99"], ["--pipeline 99", "at most 13 register stages"]),  # 2 x 1024, ecp5-25k's 3:2
    (["build", "--freq", "-5"], ["--freq -5", "> 0 MHz"]),
    (["build", "--env", "Nope-v1"], ["unknown environment 'Nope-v1'"]),
    (["build", "--steps", "100"], ["--steps 100 is not above --learning-starts 5000"]),
    (["build", "--target", "nonexistent"], ["--target 'nonexistent'"]),
    (["build", "--from", str(DWC), "--pipeline", "30"], ["--pipeline 30", "at most"]),
    (["build", "--pipeline", "-1"], ["--pipeline", "'-1'"]),
    (["train", "--steps", "100"], ["--steps 100 is not above --learning-starts 5000"]),
])
def test_a_build_checks_every_stage_before_training(argv, words, tmp_path, capsys):
    """dwc build refuses what compile or synth would refuse, before training (which would take hours
    with these defaults): exit 2, one line, no output folder."""
    out = tmp_path / "b"
    t0 = time.perf_counter()
    code = main(argv + ["--out", str(out), "--no-progress"])
    assert code == 2 and not out.exists()
    one_line(capsys, *words)
    assert time.perf_counter() - t0 < 30  # an env and the popcount's depth at most, no training


@pytest.mark.parametrize("argv", [["synth", "{core}", "--board", "ulx3s", "--baud", "{baud}"],
                                  ["hil", "{core}", "--sim", "--baud", "{baud}"],
                                  ["board-sim", "{core}", "--baud", "{baud}"]])
@pytest.mark.parametrize("baud", ["0", "7", "-5", "fast"])
def test_a_baud_rate_is_checked_alike_everywhere(argv, baud, core, capsys):
    code = main([a.format(core=core, baud=baud) for a in argv])
    assert code == 2
    one_line(capsys, "--baud", f"expected a baud rate >= 1200 (e.g. 115200), got '{baud}'")


def test_bad_values_answer_at_once_without_torch(tmp_path):
    """What needs no env or torch answers in under a second, in a process that never imports torch."""
    calls = [["build", "--freq", "-5", "--out", f"{tmp_path}/b"], ["train", "--steps", "10", "--out", f"{tmp_path}/r"],
             ["build", "--target", "vu9p", "--out", f"{tmp_path}/b"], ["hil", f"{tmp_path}", "--sim", "--baud", "7"],
             ["synth", f"{tmp_path}", "--board", "ulx3s", "--baud", "0"], ["compile", str(GATES), "--out",
                                                                          f"{tmp_path}/c", "--pipeline", "-1"]]
    code = ("import sys, time\nfrom dwc.cli import main\nfrom dwc.cli import app\nout = []\n"
            f"for argv in {calls!r}:\n"
            "    t = time.perf_counter()\n"
            "    try:\n        c = main(argv)\n    except SystemExit as e:\n        c = e.code\n"
            "    out.append((c, round(time.perf_counter() - t, 3)))\n"
            "print('RESULT', out, 'TORCH', 'torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT"))
    results = eval(line.split(" ", 1)[1].rsplit(" TORCH", 1)[0])
    assert [c for c, _ in results] == [2] * len(calls) and line.endswith("TORCH False"), res.stdout + res.stderr
    assert max(s for _, s in results) < 1.0, results
    assert len(res.stderr.strip().splitlines()) == len(calls), res.stderr


@pytest.mark.parametrize("config, words", [({"algo": "sac"}, ["names no env"]),
                                           ({"env": 17}, ["env: expected str, got 17"]),
                                           ({"env": "Hopper-v5", "actor": {"width": "abc"}},
                                            ["actor.width: expected int, got 'abc'"]),
                                           ("{", ["config.json is invalid"])])
def test_a_broken_config_json_is_one_line(config, words, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(GATES, run)
    (run / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    assert main(["compile", str(run), "--out", str(tmp_path / "c")]) == 2
    one_line(capsys, *words)
    assert main(["build", "--from", str(run), "--out", str(tmp_path / "b"), "--target", "none"]) == 2
    one_line(capsys, *words)


# --- no traceback on a user path ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["train", *SMALL, "--out", "/proc/dwc-x/run"],
                                  ["compile", str(GATES), "--out", "/proc/dwc-x/c"],
                                  ["build", "--from", str(GATES), "--target", "none", "--out", "/proc/dwc-x/b"],
                                  ["export", str(GATES), "--c", "--out", "/proc/dwc-x/p.h"],
                                  ["export", str(GATES), "--out", "/proc/dwc-x/p"]])
def test_an_out_that_cannot_be_made_is_one_line(argv, capsys):
    assert main(argv + ["--no-progress"] * (argv[0] == "train")) == 2
    one_line(capsys, "--out /proc/dwc-x/", "cannot create /proc/dwc-x")


def test_a_corrupt_build_record_is_one_line(tmp_path, capsys):
    out = tmp_path / "b"
    out.mkdir()
    (out / "build.json").write_text('{"stages": {"train": ')
    assert main(["build", "--from", str(GATES), "--target", "none", "--out", str(out)]) == 2
    one_line(capsys, "build.json is not a build record", "delete it")


def test_an_unknown_env_in_verify_is_one_line(core, tmp_path, capsys):
    assert main(["verify", str(core), "--env", "Nope-v1"]) == 2
    one_line(capsys, "--env 'Nope-v1': unknown environment")
    other = tmp_path / "other"
    shutil.copytree(core, other)
    g = json.loads((other / "graph.json").read_text())
    g.setdefault("meta", {})["env"] = "Gone-v9"
    (other / "graph.json").write_text(json.dumps(g))
    assert main(["verify", str(other)]) == 2
    one_line(capsys, "'Gone-v9': unknown environment")


def test_a_design_that_does_not_fit_inside_build_is_one_line(core, tmp_path, monkeypatch, capsys):
    """DoesNotFit from fpga/synth.py inside dwc build: exit 1 (built, not as asked), one line, the circuit kept.
    The compile stage stands in with a compiled core and the verify stage with its record: the synth
    stage's refusal is what is tested."""
    import dwc.flows.build as flow
    from dwc.fpga import synth

    def compiled(stage, run, circuit, *a, **k):
        shutil.copytree(core, circuit)
        return {"float_returns": [1.0], "frozen_returns": [1.0], "ir_luts": 9, "comparators": 3,
                "latency_cycles": 2, "policy": "gates", "train_steps": 1}
    monkeypatch.setattr(flow, "_compile", compiled)
    monkeypatch.setattr(flow, "_verify", lambda *a, **k: {"rtl_returns": [1.0], "mismatches": 0, "steps": 1})

    def too_big(build, target, *a, **k):
        raise synth.DoesNotFit(f"{target} (iCE40UP5K) is too small for this design: 9000 LUT4 of 5280")
    monkeypatch.setattr(synth, "synth_smallest", too_big)
    assert main(["build", "--from", str(GATES), "--target", "ice40-up5k", "--out", str(tmp_path / "b")]) == 1
    one_line(capsys, "ice40-up5k (iCE40UP5K) is too small", "kept in")


def test_a_second_simulation_of_one_build_is_refused(core, capsys):
    """A second dwc board-sim (or hil --sim) on a build whose link bench is in use: one line, exit 2, and
    the first one's files are left alone (they were rewritten under it: a JSONDecodeError in its thread)."""
    from dwc.sim.hil.host import hold_sim
    first = hold_sim(core / "hil", "dwc board-sim")
    try:
        assert main(["board-sim", str(core), "--listen", "127.0.0.1:0"]) == 2
        one_line(capsys, "is in use: dwc board-sim by pid", "One dwc board-sim or dwc hil --sim at a time")
        assert main(["hil", str(core), "--sim"]) == 2
        one_line(capsys, "is in use")
    finally:
        first.close()
    g = json.loads((core / "graph.json").read_text())
    nameless = core.parent / "nameless"
    shutil.copytree(core, nameless, dirs_exist_ok=True)
    del g["meta"]["env"]
    (nameless / "graph.json").write_text(json.dumps(g))
    assert main(["hil", str(nameless), "--sim"]) == 2  # a circuit that names no env, and no --env
    one_line(capsys, "--env: none given")


def test_a_line_not_of_the_bench_is_skipped(tmp_path):
    """The events file tail (sim/runner.py) passes on the bench's events and skips what it cannot read."""
    from dwc.sim.runner import _Tail
    seen, path = [], tmp_path / "events.jsonl"
    path.write_text('{"event": "listening"}\n{"event": "conn\n{"event": "connected"}\n')
    with _Tail(path, seen.append):
        pass
    assert seen == [{"event": "listening"}, {"event": "connected"}]


# --- exit statuses and reports -----------------------------------------------------------------------------

def test_the_exit_statuses_are_documented(capsys):
    from dwc.cli.app import build_parser
    text = build_parser().format_help()
    for line in ("0    done as asked", "1    it ran, but not as asked", "2    refused", "130  interrupted"):
        assert line in text, line
    sub = next(a for a in build_parser()._actions if a.choices and "build" in a.choices).choices
    assert "exit status: 0 = built as asked; 1 = built but not as asked" in sub["build"].format_help()


def test_a_new_circuit_clears_what_belonged_to_the_old_one(tmp_path):
    """dwc compile into a build folder: the same circuit keeps its reports; another one clears them."""
    out = tmp_path / "b"
    assert main(["compile", str(GATES), "--out", str(out)]) == 0
    derived = [out / "verify_report.json", out / "hil_report.json", out / "synth" / "ecp5-25k" / "report.json",
               out / "formal_report.json"]
    for f in derived:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{}")
    assert main(["compile", str(GATES), "--out", str(out)]) == 0  # the same circuit: its reports hold
    assert all(f.exists() for f in derived)
    assert main(["compile", str(GATES), "--out", str(out), "--pipeline", "1"]) == 0
    assert not any(f.exists() for f in derived) and not (out / "synth").exists()
    assert (out / "graph.json").exists() and (out / "compile_report.json").exists()


def summary(**synth) -> dict:
    return {"env": "Hopper-v5", "run": "r", "policy": "dwc", "train_steps": 10, "episodes": 3, "seed": 10001,
            "run_eval": {"episodes": 10, "seed": 10001, "mean_return": 8715.1, "min_return": 3088.0,
                         "max_return": 9400.0},
            "float_return": 9340.5, "frozen_return": 9340.5, "rtl_return": 9340.5, "rtl_equals_frozen": True,
            "latency_cycles": 9, "ir_luts": 100, "comparators": 10, "stages_run": [], "stages_skipped": [],
            "synth": {"target": "ecp5-25k", "luts": 1, "ffs": 1, "fmax_mhz": 80.0, "nj_per_action": 1,
                      "bitstream": "b", **synth} if synth else None}


def test_a_summary_quotes_the_run_evaluation_and_a_missed_clock_fails(capsys):
    from types import SimpleNamespace

    from dwc.cli.build import print_summary
    args = SimpleNamespace(json=False, command="build")
    assert print_summary(summary(), args) == 0
    out = capsys.readouterr().out
    assert "8715.1  (the run's evaluation: mean of 10 episodes, min 3088.0" in out and "9340.5" in out
    required = summary(requested_mhz=100.0, timing_met=False, clock_required=True)
    assert print_summary(required, args) == 1
    assert "timing not met on ecp5-25k: Fmax 80.0 MHz < 100 MHz requested (--freq)" in capsys.readouterr().err
    placed = summary(requested_mhz=100.0, timing_met=False, clock_required=False)  # no --freq: reported only
    assert print_summary(placed, args) == 0


# --- one meaning per option name -------------------------------------------------------------------------

@pytest.mark.parametrize("argv, old, new", [
    (["train", "--target", "ecp5", "--lut-inputs", "6", "--out", "{tmp}/r"], "--target", "--lut-family"),
    (["build", "--train-target", "ecp5", "--lut-inputs", "6", "--out", "{tmp}/b"], "--train-target", "--lut-family"),
    (["synth", "{tmp}/none", "--target", "ecp5-25k", "--seed", "3"], "--seed", "--placement-seed"),
    (["train", "--episodes", "2", "--steps", "10", "--out", "{tmp}/r"], "--episodes", "--eval-episodes"),
    (["eval", "{tmp}/none", "--episodes", "2"], "--episodes", "--eval-episodes"),
    (["verify", "{tmp}/none", "--episodes", "2"], "--episodes", "--verify-episodes"),
    (["hil", "{tmp}/none", "--sim", "--episodes", "2"], "--episodes", "--board-episodes"),
    (["build", "--episodes", "2", "--steps", "10", "--out", "{tmp}/b"], "--episodes",
     "--verify-episodes and --eval-episodes"),
])
def test_an_old_option_name_still_works_and_names_the_new_one(argv, old, new, tmp_path, capsys):
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2  # refused for another reason, after the note
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].endswith(f"{old} is the old name of {new}; use {new} (the old one still works)"), err
    if new == "--lut-family":  # the option is named by its new flag in the error
        assert "error: --lut-family ecp5 has 4-input LUTs; drop --lut-inputs 6" in err[1], err


def test_the_old_episodes_of_build_sets_both_counts(tmp_path, monkeypatch, capsys):
    """dwc build --episodes N (before the split): the training's evaluation and the verified episodes, both N;
    with --from a circuit (no training) the verified ones only."""
    import dwc.flows.build
    asked = []

    def build_stub(out, env, policy, cfg, target, pipeline, episodes, freq, **kw):
        asked.append((cfg and cfg.eval_episodes, episodes))
        return {}
    monkeypatch.setattr(dwc.flows.build, "build", build_stub)
    monkeypatch.setattr("dwc.cli.build.print_summary", lambda s, args: 0)
    assert main(["build", "--episodes", "4", "--out", str(tmp_path / "b")]) == 0
    assert main(["build", "--from", str(GATES), "--episodes", "4", "--out", str(tmp_path / "b")]) == 0
    assert main(["build", "--out", str(tmp_path / "b")]) == 0
    assert main(["build", "--eval-episodes", "5", "--verify-episodes", "2", "--out", str(tmp_path / "b")]) == 0
    assert asked == [(4, 4), (None, 4), (10, 3), (5, 2)]
    assert main(["build", "--from", str(GATES), "--eval-episodes", "4", "--out", str(tmp_path / "b")]) == 2
    assert "the training option(s) --eval-episodes do not apply" in capsys.readouterr().err


def test_no_option_name_means_two_things():
    """--lut-family, not --target, for the LUTs trained as; --placement-seed, not --seed, for nextpnr; episodes
    by what runs them (the old --episodes is an alias of the new name); every command that shows progress
    takes --no-progress."""
    from dwc.cli.app import _parser_and_commands
    commands = _parser_and_commands()[1]
    flags = {name: {f: a for a in p._actions for f in a.option_strings} for name, p in commands.items()}
    assert flags["train"]["--target"].dest == "target" and flags["train"]["--target"].option_strings[0] == "--lut-family"
    assert flags["synth"]["--seed"].option_strings[0] == "--placement-seed"
    olds = {name: flags[name]["--episodes"].option_strings[0] for name in flags if "--episodes" in flags[name]}
    assert olds == {"train": "--eval-episodes", "eval": "--eval-episodes", "build": "--verify-episodes",
                    "verify": "--verify-episodes", "hil": "--board-episodes"}
    for name in ("train", "eval", "build", "demo", "compile", "verify", "synth", "hil", "sweep"):
        assert "--no-progress" in flags[name], name


def test_a_mistyped_option_is_named_before_a_missing_argument(capsys):
    """dwc synth --bogus (no build folder either): the mistyped option is what is named, not 'build'."""
    assert main(["synth", "--bogus"]) == 2
    one_line(capsys, "unknown option --bogus")
    assert main(["synth"]) == 2
    one_line(capsys, "the following arguments are required: build")
