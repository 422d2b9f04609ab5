"""The two-stage recipe in one run: ``dwc train --algo distill`` without --teacher trains a float MLP
teacher by SAC into RUN/teacher, then distils it; stopped while its teacher trains, the run resumes to
the same teacher and the same student, bit for bit."""
import json
import signal
import subprocess
import sys
import time

import pytest
import torch

from dwc.cli import main
from helpers import differences


def recipe(out):
    return ["train", "--env", "InvertedPendulum-v5", "--algo", "distill", "--teacher-steps", "1200",
            "--learning-starts", "300", "--batch-size", "32", "--hidden", "32", "--steps", "500",
            "--dagger-steps", "250", "--checkpoint-every", "200", "--width", "16", "--lut-inputs", "4",
            "--thermo-bits", "7", "--eval-episodes", "2", "--no-progress", "--out", str(out)]


def load(path):
    return torch.load(path, weights_only=False)


def test_the_recipe_trains_its_teacher_then_distils_and_resumes_exactly(tmp_path):
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert main(recipe(whole)) == 0
    teacher = load(whole / "teacher/checkpoint.pt")
    assert teacher["step"] == 1200 and teacher["config"]["actor"]["policy"] == "mlp"
    assert teacher["config"]["algo"] == "sac" and teacher["config"]["sac"]["learning_starts"] == 300
    ev = json.loads((whole / "eval.json").read_text())
    tev = json.loads((whole / "teacher/eval.json").read_text())
    assert ev["algo"] == "distill" and ev["train_steps"] == 500
    assert ev["teacher"] == {"path": str(whole / "teacher"), "env": "InvertedPendulum-v5", "policy": "mlp",
                             "algo": "sac", "train_steps": 1200, "train_cpu_s": tev["train_cpu_s"],
                             "mean_return": tev["mean_return"]}
    # what each took, recorded by their checkpoints: the student's own CPU time, its teacher's apart
    assert 0 < ev["train_cpu_s"] and 0 < tev["train_cpu_s"] != ev["train_cpu_s"]
    # stopped while its teacher trains, then resumed: the same teacher and the same student
    proc = subprocess.Popen([sys.executable, "-m", "dwc", *recipe(stopped)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while time.time() < deadline and not (stopped / "teacher/checkpoint.pt").exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert load(stopped / "checkpoint.pt").get("before_teacher") and load(stopped / "teacher/checkpoint.pt")["step"] < 1200
    # no trained policy yet: a reader says so in one line
    assert main(["eval", str(stopped), "--no-progress"]) == 2
    assert main(["train", "--out", str(stopped), "--resume", "--no-progress"]) == 0
    for f in ("teacher/checkpoint.pt", "checkpoint.pt"):
        a, b = load(whole / f), load(stopped / f)
        for k in ("actor", "data_obs", "data_act", "step"):
            if k in a:
                assert differences(a[k], b[k]) == [], (f, k)
    assert json.loads((stopped / "eval.json").read_text())["returns"] == ev["returns"]


def test_build_from_a_float_mlp_only_distils(tmp_path, capsys):
    from pathlib import Path
    mlp = Path(__file__).resolve().parents[1] / "policies" / "inverted-pendulum-v5-mlp"
    assert main(["build", "--from", str(mlp), "--algo", "sac", "--out", str(tmp_path / "c")]) == 2
    assert "is a float MLP, which dwc build distils" in capsys.readouterr().err and not (tmp_path / "c").exists()


@pytest.mark.slow  # ~1 minute; the whole recipe's build (below) runs the same stages in CI
def test_build_from_a_float_mlp_distils_it_into_a_circuit(tmp_path, capsys):
    """dwc build --from a float MLP: the training options describe the circuit that learns its actions,
    which is then compiled and run closed loop in Verilator."""
    from pathlib import Path
    mlp = Path(__file__).resolve().parents[1] / "policies" / "inverted-pendulum-v5-mlp"
    out = tmp_path / "b"
    assert main(["build", "--from", str(mlp), "--width", "16", "--lut-inputs", "4", "--thermo-bits", "7",
                 "--steps", "500", "--dagger-steps", "250", "--target", "none", "--verify-episodes", "1",
                 "--out", str(out), "--no-progress", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["stages_run"] == ["train", "compile", "verify"] and s["rtl_equals_frozen"] and s["policy"] == "dwc"
    cfg = json.loads((out / "run/config.json").read_text())
    assert cfg["algo"] == "distill" and cfg["distill"]["teacher"] == str(mlp) and cfg["actor"]["width"] == 16


def test_build_runs_the_whole_recipe(tmp_path, capsys):
    """dwc build with --algo distill and no teacher: the teacher by SAC, the student, compile and the
    Verilog closed loop in Verilator, in one command (reduced sizes; the learning is tested above and in
    test_distill.py)."""
    out = tmp_path / "b"
    args = [a for a in recipe(out / "unused") if a not in ("train", "--out", str(out / "unused"))]
    assert main(["build", *args, "--target", "none", "--verify-episodes", "1", "--out", str(out), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["stages_run"] == ["train", "compile", "verify"] and s["rtl_equals_frozen"]
    assert load(out / "run/teacher/checkpoint.pt")["step"] == 1200
    assert json.loads((out / "run/eval.json").read_text())["teacher"]["path"] == str(out / "run/teacher")


@pytest.mark.slow  # ~2 minutes: a learning run
def test_an_onnx_model_is_a_teacher_too(tmp_path, capsys):
    """A policy exported to ONNX (here the shipped InvertedPendulum DWC, by dwc compile --onnx) teaches a
    circuit through dwc build --from: the student's normaliser is fitted on the model's rollout and frozen,
    and it learns to act as the model (which balances the pole: 1000)."""
    from pathlib import Path
    policy = Path(__file__).resolve().parents[1] / "policies" / "inverted-pendulum-v5-dwc"
    assert main(["compile", str(policy), "--out", str(tmp_path / "c"), "--onnx"]) == 0
    model = tmp_path / "c" / "policy.onnx"
    capsys.readouterr()
    out = tmp_path / "b"
    assert main(["build", "--from", str(model), "--env", "InvertedPendulum-v5", "--width", "48", "--lut-inputs", "4",
                 "--thermo-bits", "31", "--steps", "4000", "--dagger-steps", "250", "--target", "none",
                 "--verify-episodes", "3", "--out", str(out), "--no-progress", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["rtl_equals_frozen"] and s["frozen_return"] >= 900, s
    ckpt = load(out / "run/checkpoint.pt")
    assert bool(ckpt["actor"]["normalizer.frozen"]) and float(ckpt["actor"]["normalizer.var"].min()) != 1.0
    assert json.loads((out / "run/eval.json").read_text())["teacher"]["policy"] == "onnx"
    assert main(["build", "--from", str(model), "--out", str(tmp_path / "d")]) == 2  # no --env: one line
    assert "give --env" in capsys.readouterr().err
