"""dwc train --seeds: seeds trained together in one process follow their single runs bit for bit
(checkpoints compared whole: parameters, optimiser moments, replay buffer, random-stream states),
write the same run directories, resume together or one by one, and stop cleanly on SIGTERM."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from dwc.cli import main
from helpers import differences, stop_at

ENV = "InvertedPendulum-v5"
# batch 32 x 1 action = 32 floats: whole AVX-512 chunks (see dwc.train.multiseed on exactness)
TINY = ["--env", ENV, "--checkpoint-every", "200", "--eval-episodes", "1", "--no-progress", "--hidden", "32",
        "--width", "32", "--lut-inputs", "4", "--thermo-bits", "7", "--learning-starts", "150", "--batch-size", "32"]


def train(out: Path, *extra: str) -> None:
    tiny = TINY if "gates" not in extra else [w for w in TINY if w not in ("--lut-inputs", "4")]  # gates: 2 inputs
    assert main(["train", *tiny, "--out", str(out), *extra]) == 0


def checkpoint(run: Path) -> dict:
    ckpt = torch.load(run / "checkpoint.pt", weights_only=False)
    for k in ("numpy", "python"):  # the global streams, which SAC does not draw from
        ckpt["rng"].pop(k)
    return ckpt


def returns(run: Path) -> list[tuple[int, float]]:
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["charts/episodic_return"]) for r in recs if "charts/episodic_return" in r]


def assert_same_run(single: Path, together: Path) -> None:
    assert differences(checkpoint(single), checkpoint(together)) == []
    assert returns(single) == returns(together)
    a, b = (json.loads((r / "config.json").read_text()) for r in (single, together))
    assert a == b
    ev = [json.loads((r / "eval.json").read_text()) for r in (single, together)]
    assert 0 < ev[0].pop("train_cpu_s") and 0 < ev[1].pop("train_cpu_s") and ev[0] == ev[1]  # all but the time taken


@pytest.mark.slow
@pytest.mark.ci
def test_a_seed_trained_with_another_is_its_single_run(tmp_path):
    """The reduced check (CI): seed 2 of 1,2 is bit for bit seed 2 alone, DWC, 150 updates."""
    train(tmp_path / "single2", "--steps", "300", "--seed", "2")
    train(tmp_path / "both", "--steps", "300", "--seeds", "1,2")
    assert_same_run(tmp_path / "single2", tmp_path / "both" / "seed2")
    summary = json.loads((tmp_path / "both" / "seeds.json").read_text())
    assert summary["seeds"] == [1, 2] and len(summary["evaluations"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mlp", "dwc", "gates", "dwc --wiring-optim sparse"])
def test_every_seed_follows_its_single_run(tmp_path, policy):
    options = ["--policy", *policy.split()]
    for s in (1, 2, 3):
        train(tmp_path / f"single{s}", *options, "--steps", "400", "--seed", str(s))
    train(tmp_path / "all", *options, "--steps", "400", "--seeds", "1-3")
    for s in (1, 2, 3):
        assert_same_run(tmp_path / f"single{s}", tmp_path / "all" / f"seed{s}")


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["0", "1"])
def test_seeds_with_several_envs_each_follow_their_single_runs(tmp_path, monkeypatch, workers):
    """--num-envs 2 per seed, the seeds' environments stepped in the training process (a CPU's default)
    or all at once in worker processes (a GPU host's): the same transitions either way."""
    monkeypatch.setenv("DWC_ENV_WORKERS", workers)
    options = ["--policy", "mlp", "--num-envs", "2", "--steps", "400"]
    for s in (1, 2):
        train(tmp_path / f"single{s}", *options, "--seed", str(s))
    train(tmp_path / "both", *options, "--seeds", "1,2")
    for s in (1, 2):
        assert_same_run(tmp_path / f"single{s}", tmp_path / "both" / f"seed{s}")


def test_env_workers_setting_is_checked(monkeypatch):
    from dwc.core.errors import UserError
    from dwc.train.seed_envs import env_workers
    cpu = torch.device("cpu")
    assert env_workers(cpu, 2, 1) is False  # a CPU's cores train; its envs step in-process
    assert env_workers(torch.device("cuda"), 1, 1) is False  # one seed (a single run): in-process on any host
    monkeypatch.setenv("DWC_ENV_WORKERS", "1")
    assert env_workers(cpu, 2, 1) is True
    monkeypatch.setenv("DWC_ENV_WORKERS", "yes")
    with pytest.raises(UserError, match="DWC_ENV_WORKERS"):
        env_workers(cpu, 2, 1)


@pytest.mark.slow
def test_seeds_resume_together_and_alone(tmp_path):
    """Legs 300 -> 400 -> 500: the multi-seed run resumes seed 1 alone (plain dwc train), then both
    together, where seed 2 first catches up alone; every leg as the single runs' legs."""
    for s in (1, 2):
        train(tmp_path / f"single{s}", "--steps", "300", "--seed", str(s))
        for steps in ("400", "500"):
            assert main(["train", "--out", str(tmp_path / f"single{s}"), "--resume", "--steps", steps,
                         "--no-progress"]) == 0
    multi = tmp_path / "multi"
    train(multi, "--steps", "300", "--seeds", "1-2")
    assert main(["train", "--out", str(multi / "seed1"), "--resume", "--steps", "400", "--no-progress"]) == 0
    assert main(["train", "--out", str(multi), "--seeds", "1-2", "--resume", "--steps", "500", "--no-progress"]) == 0
    for s in (1, 2):
        assert_same_run(tmp_path / f"single{s}", multi / f"seed{s}")


@pytest.mark.slow
def test_seeds_stopped_and_resumed_together_follow_their_single_runs(tmp_path):
    """SIGTERM in the middle of an iteration, then --resume: each seed still ends as its single run left
    alone (the episodes in flight at the checkpoint go on)."""
    for s in (1, 2):
        train(tmp_path / f"single{s}", "--steps", "800", "--seed", str(s))
    multi = tmp_path / "multi"
    args = ["train", *TINY, "--steps", "800", "--seeds", "1-2", "--out", str(multi)]
    assert 200 <= stop_at(multi / "seed2", args, signal.SIGTERM, after=350) < 800
    assert main(["train", "--out", str(multi), "--seeds", "1-2", "--resume", "--no-progress"]) == 0
    for s in (1, 2):
        assert_same_run(tmp_path / f"single{s}", multi / f"seed{s}")


@pytest.mark.slow
def test_sigterm_checkpoints_every_seed_at_one_step(tmp_path):
    out = tmp_path / "multi"
    args = ["train", *TINY, "--steps", "100000", "--seeds", "1-2", "--out", str(out)]
    args[args.index("--checkpoint-every") + 1] = "100000"
    proc = subprocess.Popen([sys.executable, "-m", "dwc", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 120
    metrics = out / "seed2" / "metrics.jsonl"
    while time.time() < deadline and not (metrics.exists() and "episodic_return" in metrics.read_text()):
        time.sleep(0.2)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "--resume" in err and "Traceback" not in err
    steps = [torch.load(out / f"seed{s}" / "checkpoint.pt", weights_only=False)["step"] for s in (1, 2)]
    assert steps[0] == steps[1] > 0


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "1-2", "--seed", "3"], "--seed and --seeds"),
    (["--seeds", "3-1"], "runs backwards"),
    (["--seeds", "1,x"], "expected a range"),
    (["--seeds", "1,1"], "listed twice"),
    (["--seeds", "1-2", "--algo", "ppo"], "--seeds trains SAC runs together"),
    (["--seeds", "1-2", "--resume"], "--resume: no checkpoint"),
])
def test_seeds_errors_are_one_line(tmp_path, capsys, argv, message):
    assert main(["train", "--out", str(tmp_path / "x"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


SPEC = """\
tasks: [InvertedPendulum-v5]
seeds: 2
steps: 300
options: {policy: dwc, width: 32, lut_inputs: 4, thermo_bits: 7, hidden: 32, learning_starts: 150,
          batch_size: 32, checkpoint_every: 200, eval_episodes: 1}
configs:
  dwc: {}
resources: {seeds_per_run: 2}
"""


def test_sweep_help_names_seeds_per_run():
    from dwc.flows.sweep_spec import SPEC_HELP
    assert "seeds_per_run" in SPEC_HELP


@pytest.mark.slow
def test_sweep_trains_the_seeds_of_a_config_together(tmp_path):
    """resources.seeds_per_run: the seeds of one config are one task, trained together; each run
    directory is its single run's (seed 2 compared with dwc train --seed 2) and each gets its result."""
    from dwc.flows.sweep_spec import load_spec
    from dwc.flows.sweep import _groups, run_jobs
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "sweep").mkdir()
    jobs = load_spec(tmp_path / "spec.yaml").jobs(tmp_path / "sweep")
    groups = _groups(jobs, 2)
    assert [[j.seed for j in g] for g in groups] == [[1, 2]]
    results = run_jobs([j.payload() for j in groups[0]])
    assert [r.get("error") for r in results] == [None, None]
    assert [r["seed"] for r in results] == [1, 2] and all(r["frozen_return"] is not None for r in results)
    train(tmp_path / "single2", "--steps", "300", "--seed", "2")
    assert differences(checkpoint(tmp_path / "single2"), checkpoint(jobs[1].dir / "run")) == []
    assert returns(tmp_path / "single2") == returns(jobs[1].dir / "run")
    attempts = [json.loads(line) for line in (jobs[1].dir / "attempts.jsonl").read_text().splitlines()]
    assert attempts[-1]["together"] == [j.id for j in jobs]
    assert "training sac dwc on InvertedPendulum-v5, seeds 1, 2 together" in (jobs[1].dir / "worker.log").read_text()


def layout(obj):
    """Keys, shapes and dtypes of a checkpoint, without the values."""
    if isinstance(obj, dict):
        return {k: layout(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [layout(v) for v in obj]
    if torch.is_tensor(obj) or isinstance(obj, np.ndarray):
        return (tuple(obj.shape), str(obj.dtype), str(getattr(obj, "device", "cpu")))
    return type(obj).__name__


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_seeds_train_together_on_cuda(tmp_path, capsys):
    """On CUDA (the update of all seeds replayed as one CUDA graph, their acting as another, each seed's
    noise from its own CUDA generator): every graph is captured (no eager fallback), and each seed's run
    directory has its single run's checkpoint layout and resumes alone."""
    train(tmp_path / "single2", "--steps", "300", "--seed", "2", "--device", "cuda")
    train(tmp_path / "both", "--steps", "300", "--seeds", "1,2", "--device", "cuda")
    assert "capture failed" not in capsys.readouterr().out
    assert layout(checkpoint(tmp_path / "single2")) == layout(checkpoint(tmp_path / "both" / "seed2"))
    assert main(["train", "--out", str(tmp_path / "both" / "seed2"), "--resume", "--steps", "400",
                 "--no-progress"]) == 0
    assert torch.load(tmp_path / "both" / "seed2" / "checkpoint.pt", weights_only=False)["step"] == 400
