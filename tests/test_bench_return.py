"""The referee bench (scripts/bench_return.py): dwc's float MLP and Stable-Baselines3's SAC trained side by
side on real MuJoCo envs, paired by task, seed and budget, evaluated on the same episodes, and reported."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH, REFEREE = ROOT / "scripts" / "bench_return.py", ROOT / "scripts" / "referee_sac.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=600)


def test_both_sides_train_on_the_same_task_seeds_and_budget_and_are_reported(tmp_path):
    out = tmp_path / "bench"
    res = run(BENCH, "--out", out, "--tasks", "Hopper-v5", "--seeds", "1-2", "--steps", "1200",
              "--learning-starts", "1000", "--eval-episodes", "2", "--jobs", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    for side in ("dwc", "sb3"):
        for seed in (1, 2):
            run_dir = out / "runs" / "Hopper-v5" / side / f"seed{seed}"
            ev = json.loads((run_dir / "eval.json").read_text())
            assert ev["seed"] == seed + 10_000 and ev["episodes"] == 2  # the episodes dwc eval plays
            cfg = json.loads((run_dir / "config.json").read_text())
            assert cfg["steps"] == 1200
            steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
            assert steps == sorted(steps) and steps[-1] <= 1200
    rep = json.loads((out / "bench.json").read_text())
    (row,) = rep["tasks"]
    assert list(row["comparisons"]) == ["dwc"]  # the CrossQ pair did not run
    comp = row["comparisons"]["dwc"]
    assert comp["seeds"] == [1, 2] and comp["note"].startswith("n = 2, no CI")
    assert comp["ratio"] == pytest.approx(comp["candidate_iqm"] / comp["baseline_iqm"])
    assert comp["baseline_iqm"] > 0 and comp["verdict"] in ("below", "level or above")
    assert (out / "curves_Hopper-v5.png").stat().st_size > 0 and "| Hopper-v5 | 2 |" in (out / "bench.md").read_text()
    # a second call trains nothing: every run finished
    again = run(BENCH, "--out", out, "--tasks", "Hopper-v5", "--seeds", "1-2", "--steps", "1200",
                "--learning-starts", "1000", "--eval-episodes", "2")
    assert again.returncode == 0 and "0 runs to train (4 finished already)" in again.stdout


@pytest.mark.slow  # ~30 s; not in CI, which runs the bench's own test above
def test_a_referee_run_resumes_from_its_checkpoint(tmp_path):
    out = tmp_path / "sb3"
    common = ["--env", "Hopper-v5", "--seed", "3", "--learning-starts", "500", "--eval-episodes", "1",
              "--checkpoint-every", "300", "--out", out]
    assert run(REFEREE, *common, "--steps", "900").returncode == 0
    assert json.loads((out / "checkpoint" / "step.json").read_text())["step"] == 900
    res = run(REFEREE, *common, "--steps", "1200")
    assert res.returncode == 0 and "resuming from the checkpoint at step 900" in res.stdout
    assert json.loads((out / "checkpoint" / "step.json").read_text())["step"] == 1200
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] > 900


def test_bad_options_are_one_line(tmp_path):
    res = run(BENCH, "--out", tmp_path, "--sides", "dwc,ppo")
    assert res.returncode == 2 and "choose from dwc, sb3, dwc-crossq, sb3-crossq" in res.stderr
    assert "Traceback" not in res.stderr
    res = run(REFEREE, "--env", "Hopper-v5", "--seed", "1", "--steps", "100", "--learning-starts", "100",
              "--out", tmp_path / "r")
    assert res.returncode == 2 and "--learning-starts must be" in res.stderr


def test_a_referee_run_in_training_is_not_trained_twice(tmp_path):
    import fcntl
    out = tmp_path / "r"
    out.mkdir()
    with (out / ".lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running referee holds it
        res = run(REFEREE, "--env", "Hopper-v5", "--seed", "1", "--steps", "300", "--learning-starts", "100",
                  "--out", out)
    assert res.returncode == 1 and "another process is training" in res.stderr and not (out / "metrics.jsonl").exists()


def test_the_crossq_pair_trains_the_same_critics_on_both_sides(tmp_path):
    out = tmp_path / "bench"
    res = run(BENCH, "--out", out, "--tasks", "Hopper-v5", "--seeds", "1", "--steps", "1100", "--learning-starts",
              "1000", "--eval-episodes", "1", "--jobs", "2", "--sides", "dwc-crossq,sb3-crossq", "--q-hidden", "32")
    assert res.returncode == 0, res.stdout + res.stderr
    runs = out / "runs" / "Hopper-v5"
    ours = json.loads((runs / "dwc-crossq" / "seed1" / "config.json").read_text())["sac"]
    referee = json.loads((runs / "sb3-crossq" / "seed1" / "config.json").read_text())
    assert ours["critic"] == "crossq" and ours["q_hidden"] == 32 and ours["policy_delay"] == 3
    assert referee["referee"] == "sb3-contrib CrossQ" and referee["q_hidden"] == 32
    assert "'qf': [32, 32]" in referee["hyperparameters"]["policy_kwargs"]
    (row,) = json.loads((out / "bench.json").read_text())["tasks"]
    assert list(row["comparisons"]) == ["dwc-crossq"] and row["comparisons"]["dwc-crossq"]["seeds"] == [1]
    assert "against sb3-contrib CrossQ" in (out / "bench.md").read_text()
