"""A sweep config that distils another config of the spec (``teacher: CONFIG``): each of its runs learns
from that config's run of the same task and seed, which Ray trains first."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dwc.cli import main
from dwc.core.errors import UserError
from dwc.flows.sweep_spec import load_spec

ROOT = Path(__file__).resolve().parents[1]

SPEC = """
tasks: [InvertedPendulum-v5]
seeds: [1, 2]
steps: 600
options: {learning_starts: 300, batch_size: 32, checkpoint_every: 200, eval_episodes: 2, hidden: 32}
configs:
  mlp: {policy: mlp}
  student: {algo: distill, teacher: mlp, steps: 300, dagger_steps: 100, policy: dwc, width: 16, lut_inputs: 4,
            thermo_bits: 7}
"""


def test_each_run_distils_the_teacher_run_of_its_task_and_seed(tmp_path):
    (tmp_path / "s.yaml").write_text(SPEC)
    spec = load_spec(tmp_path / "s.yaml")
    jobs = {j.id: j for j in spec.jobs(tmp_path / "out")}
    s2 = jobs["InvertedPendulum-v5/student/seed2"]
    assert s2.after == "InvertedPendulum-v5/mlp/seed2" and s2.cfg.steps == 300
    assert s2.cfg.distill.teacher == str(jobs["InvertedPendulum-v5/mlp/seed2"].dir / "run")
    assert jobs["InvertedPendulum-v5/mlp/seed2"].after is None
    # a sweep folder copied elsewhere names the same runs: the teacher counts by its run, not its path
    moved = {j.id: j for j in spec.jobs(tmp_path / "elsewhere")}
    assert moved[s2.id].key == s2.key and moved[s2.id].cfg.distill.teacher != s2.cfg.distill.teacher
    # scaled down, a config's own steps give way to the section's
    (tmp_path / "d.yaml").write_text(SPEC + "scale_down: {steps: 50, options: {learning_starts: 20}}\n")
    assert {j.cfg.steps for j in load_spec(tmp_path / "d.yaml", scale_down=True).jobs(tmp_path)} == {50}


def test_a_teacher_folder_takes_the_task_and_seed(tmp_path, monkeypatch):
    """teacher: a folder with {task} and {seed}, e.g. an earlier sweep's runs, read from where the sweep
    starts; the runs stay the same runs when that folder and the sweep move together."""
    from dwc.core.rundir import write_json
    from dwc.core.config import TrainConfig
    for seed in (1, 2):
        write_json(tmp_path / f"old/runs/Hopper-v5/mlp/seed{seed}/run/config.json",
                   TrainConfig(env="Hopper-v5", seed=seed, steps=10).to_dict())
    (tmp_path / "s.yaml").write_text("tasks: [Hopper-v5]\nseeds: 2\nconfigs:\n  s: {algo: distill, policy: dwc, "
                                     "teacher: 'old/runs/{task}/mlp/seed{seed}/run'}\n")
    monkeypatch.chdir(tmp_path)
    jobs = load_spec(tmp_path / "s.yaml").jobs(tmp_path / "out")
    assert [j.cfg.distill.teacher for j in jobs] == [str(tmp_path / f"old/runs/Hopper-v5/mlp/seed{s}/run") for s in (1, 2)]
    assert all(j.after is None for j in jobs)
    shutil.copytree(tmp_path / "old", tmp_path / "new/old")
    monkeypatch.chdir(tmp_path / "new")
    assert [j.key for j in load_spec(tmp_path / "s.yaml").jobs(tmp_path / "new/out")] == [j.key for j in jobs]
    (tmp_path / "t.yaml").write_text("tasks: [Hopper-v5]\nseeds: 1\nconfigs: {s: {algo: distill, teacher: 'a/{env}'}}")
    with pytest.raises(UserError, match=r"a folder may hold \{task\} and \{seed\} only"):
        load_spec(tmp_path / "t.yaml")


@pytest.mark.parametrize("student, message", [
    ("{teacher: mlp, policy: dwc}", "teacher mlp applies to algo: distill"),
    ("{algo: distill, teacher: other, policy: dwc}\n  other: {algo: distill, teacher: mlp}",
     "teacher other must be a config trained by RL"),
    ("{algo: distill, teacher: mlp, policy: dwc, tasks: [Hopper-v5]}", "its teacher mlp has no runs on Hopper-v5"),
])
def test_teacher_errors_are_one_line(tmp_path, capsys, student, message):
    text = ("tasks: [InvertedPendulum-v5, Hopper-v5]\nseeds: 1\nconfigs:\n  mlp: {policy: mlp, tasks: [InvertedPendulum-v5]}\n"
            f"  student: {student}\n")
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(UserError, match=message):
        load_spec(tmp_path / "s.yaml")
    assert main(["sweep", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dwc sweep: error:") and "\n" not in err


def test_a_student_waits_for_its_teacher(tmp_path):
    """Two workers, the students asked for alone: their teachers are trained first and a student starts
    once its teacher's run ended, though a worker is free; it learns from its own seed's teacher, and its
    result names it."""
    (tmp_path / "s.yaml").write_text(SPEC)
    out = tmp_path / "out"
    assert main(["sweep", str(tmp_path / "s.yaml"), "--out", str(out), "--cpus", "2", "--configs", "student",
                 "--seeds", "2", "--no-progress"]) == 0
    runs = out / "runs" / "InvertedPendulum-v5"
    teacher = json.loads((runs / "mlp/seed2/result.json").read_text())
    student = json.loads((runs / "student/seed2/result.json").read_text())
    assert student["teacher"] == "InvertedPendulum-v5/mlp/seed2" and student["train_steps"] == 300
    assert teacher["teacher"] is None and teacher["train_steps"] == 600
    assert json.loads((runs / "student/seed2/run/eval.json").read_text())["teacher"]["path"] == str(runs / "mlp/seed2/run")
    assert not (runs / "mlp/seed1").exists() and not (runs / "student/seed1").exists()
    # the student started after its teacher's result was written (each attempt records its start time)
    started = json.loads((runs / "student/seed2/attempts.jsonl").read_text().splitlines()[0])["time"]
    assert started >= (runs / "mlp/seed2/result.json").stat().st_mtime
    # without a hardware stage a circuit still records its size, as dwc compile counts it; a float MLP has none
    main(["compile", str(runs / "student/seed2/run"), "--out", str(tmp_path / "c"), "--no-progress"])
    counts = json.loads((tmp_path / "c/compile_report.json").read_text())["counts"]
    assert (student["ir_luts"], student["comparators"]) == (counts["luts"], counts["comparators"]) != (None, None)
    assert teacher["ir_luts"] is None and teacher["comparators"] is None
    # a run that finished before sizes were recorded gets them from scripts/circuit_size.py
    path = runs / "student/seed2/result.json"
    path.write_text(json.dumps(dict(student, ir_luts=None, comparators=None)))
    subprocess.run([sys.executable, "scripts/circuit_size.py", str(out)], check=True, cwd=ROOT, capture_output=True)
    assert json.loads(path.read_text()) == student
    # the report pairs each student with its own teacher (300 steps against 600), also as deployed: the
    # frozen circuit against the float MLP; a student's hours count its teacher's
    from dwc.flows.report import report
    rep = report(out)
    comps = {c["figure"]: c for c in rep["comparisons"] if (c["config"], c["baseline"]) == ("student", "mlp")}
    assert set(comps) == {"float_return", "deployed_return"} and comps["deployed_return"]["seeds"] == [2]
    assert comps["deployed_return"]["ratio"] == pytest.approx(student["frozen_return"] / teacher["float_return"])
    rows = {r["config"]: r for r in rep["rows"]}
    hours = (student["train_cpu_s"] + teacher["train_cpu_s"]) / 3600
    assert 0 < student["train_cpu_s"] < student["seconds"] and 0 < teacher["train_cpu_s"] < teacher["seconds"]
    assert rows["student"]["cpu_hours"]["median"] == pytest.approx(hours) and not rows["student"]["cpu_hours_estimated"]
    # what its CPU time bought: the circuit's return over those hours
    assert rows["student"]["return_per_cpu_hour"]["median"] == pytest.approx(student["frozen_return"] / hours)
    # and its env steps count its teacher's in the budget against the paper's (1M steps x 10 seeds)
    paper = {p["config"]: p for p in rep["paper"]["rows"]}
    assert rows["student"]["steps_with_teacher"] == 900 and paper["student"]["budget_ratio"] == pytest.approx(900 / 1e7)
    assert paper["mlp"]["budget_ratio"] == pytest.approx(600 / 1e7)
    from dwc.flows.stats import MIN_SEEDS
    assert f"Below {MIN_SEEDS} seeds no CI" in rep["paper"]["legend"]
    # copied elsewhere, the sweep is finished as it was
    shutil.copytree(out, tmp_path / "copy")
    from dwc.flows.sweep import sweep
    state = sweep(tmp_path / "s.yaml", tmp_path / "copy", progress=False, log=lambda *a: None, seeds=[2])
    assert state["runs"]["InvertedPendulum-v5/student/seed2"]["state"] == "finished"
