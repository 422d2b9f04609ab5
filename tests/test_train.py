"""Training on real MuJoCo envs: short SAC/PPO runs, checkpoint/resume (exact, also after SIGKILL), eval,
reproducibility and the CLI's one-line errors."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dwc.cli import main
from dwc.core.rundir import checkpoint_info
from helpers import ENV, assert_one_line_error, differences, metrics, run_cli, small_args, stop_at


@pytest.mark.parametrize("algo", ["sac", "ppo"])
@pytest.mark.parametrize("policy", ["dwc", "mlp"])
def test_train_resume_eval(tmp_path, algo, policy, capsys):
    run = tmp_path / "run"
    assert main(small_args(run, algo, policy, steps=400)) == 0
    for f in ("config.json", "checkpoint.pt", "metrics.jsonl", "eval.json"):
        assert (run / f).is_file(), f
    assert any((run / "tb").iterdir())
    ev = json.loads((run / "eval.json").read_text())
    for k in ("env", "episodes", "mean_return", "median_return", "std_return"):
        assert k in ev
    assert ev["env"] == ENV and ev["episodes"] == 2 and ev["mean_return"] > 0
    ckpt = torch.load(run / "checkpoint.pt", weights_only=False)
    assert ckpt["step"] == 400
    assert any("charts/episodic_return" in m for m in metrics(run))

    # resume to a longer budget: continues from 400, does not restart
    assert main(["train", "--out", str(run), "--resume", "--steps", "600", "--no-progress"]) == 0
    ckpt = torch.load(run / "checkpoint.pt", weights_only=False)
    assert ckpt["step"] == 600
    if algo == "sac":
        assert ckpt["replay"]["size"] == 600  # every transition of both legs kept
    capsys.readouterr()
    assert main(["eval", str(run), "--eval-episodes", "3", "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["episodes"] == 3 and out["train_steps"] == 600 and len(out["returns"]) == 3
    actor = torch.load(run / "checkpoint.pt", weights_only=False)["actor"]
    assert all(torch.isfinite(v).all() for v in actor.values() if v.is_floating_point())
    commands = (run / "commands.txt").read_text()
    assert "# from step 0" in commands and "# from step 400" in commands and "--resume" in commands

    # export: a slim policy folder that evaluates to exactly the same returns
    assert main(["export", str(run), "--out", str(tmp_path / "policy")]) == 0
    assert (tmp_path / "policy" / "learning_curve.png").stat().st_size > 5000
    recorded = (tmp_path / "policy" / "eval.json").read_bytes()
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "policy"), "--eval-episodes", "3", "--json", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["returns"] == out["returns"]
    # an exported policy's recorded evaluation is kept; --out writes a new one elsewhere
    assert (tmp_path / "policy" / "eval.json").read_bytes() == recorded
    assert main(["eval", str(tmp_path / "policy"), "--eval-episodes", "1", "--out", str(tmp_path / "e.json"),
                 "--no-progress"]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["returns"] == out["returns"][:1]
    assert (tmp_path / "policy" / "eval.json").read_bytes() == recorded


def test_sac_is_reproducible_on_cpu(tmp_path):
    for name in ("a", "b"):
        assert main(small_args(tmp_path / name, steps=300)) == 0
    a = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)
    for k, v in a["actor"].items():
        assert torch.equal(v, b["actor"][k]), k
    assert json.loads((tmp_path / "a" / "eval.json").read_text())["returns"] == \
        json.loads((tmp_path / "b" / "eval.json").read_text())["returns"]


@pytest.mark.parametrize("algo,signum", [("sac", signal.SIGTERM), ("sac", signal.SIGKILL), ("ppo", signal.SIGTERM)])
def test_a_stopped_run_resumes_exactly(tmp_path, algo, signum):
    """Stopped anywhere (SIGTERM: a checkpoint at that step; SIGKILL: back to the last periodic one) and
    resumed, a run ends bit for bit where the same run left alone ends: the episodes in flight at the
    checkpoint go on (their returns are logged whole), and no random stream draws anything twice."""
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert main(small_args(whole, algo, steps=1000)) == 0
    at = stop_at(stopped, small_args(stopped, algo, steps=1000), signum, after=450)
    assert 200 <= at < 1000
    if (algo, signum) == ("sac", signal.SIGTERM):  # SAC checkpoints where it stops: its checkpoint.json says so
        assert checkpoint_info(stopped)["step"] == at
    before = torch.load(stopped / "checkpoint.pt", weights_only=False)["cost"]
    assert main(["train", "--out", str(stopped), "--resume", "--no-progress"]) == 0
    a, b = (torch.load(r / "checkpoint.pt", weights_only=False) for r in (whole, stopped))
    assert differences(a, b) == []
    # the training's cost counts every leg, from step 0; checkpoint.json holds it for dwc report and sweep
    assert before["from_step"] == b["cost"]["from_step"] == 0 and 0 < before["cpu_s"] < b["cost"]["cpu_s"]
    assert before["wall_s"] < b["cost"]["wall_s"] and checkpoint_info(stopped)["cost"] == b["cost"]
    returns = [[(m["step"], m["charts/episodic_return"]) for m in metrics(r) if "charts/episodic_return" in m]
               for r in (whole, stopped)]
    assert len(returns[0]) > 5 and returns[0] == returns[1]
    steps = [m["step"] for m in metrics(stopped)]
    assert steps == sorted(steps)  # what the stopped leg logged after its checkpoint was dropped, not doubled
    ev = [json.loads((r / "eval.json").read_text()) for r in (whole, stopped)]
    assert 0 < ev[0].pop("train_cpu_s") and 0 < ev[1].pop("train_cpu_s") and ev[0] == ev[1]  # all but the time taken


def test_sigterm_saves_a_checkpoint_at_the_current_step(tmp_path):
    run = tmp_path / "run"
    args = small_args(run, steps=100000)
    args[args.index("--checkpoint-every") + 1] = "100000"  # no periodic checkpoint before the kill
    proc = subprocess.Popen([sys.executable, "-m", "dwc"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 120
    while time.time() < deadline and "episodic_return" not in _text(run / "metrics.jsonl"):
        time.sleep(0.2)
    time.sleep(2)  # well into the update phase (learning starts at 150 steps)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "--resume" in err and "Traceback" not in err
    ckpt = torch.load(run / "checkpoint.pt", weights_only=False)
    assert ckpt["step"] > 0 and ckpt["replay"]["size"] == ckpt["step"]


def test_a_run_killed_before_its_first_checkpoint_starts_again(tmp_path):
    run = tmp_path / "run"
    args = small_args(run, steps=100000)
    args[args.index("--checkpoint-every") + 1] = "100000"
    proc = subprocess.Popen([sys.executable, "-m", "dwc"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and "episodic_return" not in _text(run / "metrics.jsonl"):
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert (run / "config.json").exists() and not (run / "checkpoint.pt").exists()
    assert_one_line_error(run_cli("train", "--out", str(run), "--resume"), "starts again without --resume")
    again = run_cli(*small_args(run, steps=300))
    assert again.returncode == 0, again.stderr
    assert torch.load(run / "checkpoint.pt", weights_only=False)["step"] == 300
    steps = [m["step"] for m in metrics(run)]
    assert steps == sorted(steps) and max(steps) <= 300  # nothing left of the killed start


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_cli_errors(tmp_path):
    assert_one_line_error(run_cli("train", "--env", "NoSuchEnv-v0", "--out", str(tmp_path / "x")), "unknown environment")
    assert_one_line_error(run_cli("train", "--env", "CartPole-v1", "--out", str(tmp_path / "x")), "Box")
    (tmp_path / "exists").mkdir()
    (tmp_path / "exists" / "f").write_text("x")
    assert_one_line_error(run_cli("train", "--env", ENV, "--out", str(tmp_path / "exists")), "--resume")
    assert_one_line_error(run_cli("train", "--out", str(tmp_path / "nothing"), "--resume"), "nothing does not exist")
    assert_one_line_error(run_cli("train", "--out", str(tmp_path / "exists"), "--resume"), "not a dwc run")
    assert_one_line_error(run_cli("train", "--env", ENV, "--lut-inputs", "9", "--out", str(tmp_path / "y")), "lut-inputs")
    assert_one_line_error(run_cli("eval", str(tmp_path / "missing")), "missing does not exist")
    if not torch.cuda.is_available():
        assert_one_line_error(run_cli("train", "--env", ENV, "--device", "cuda", "--out", str(tmp_path / "z")), "CUDA")


def test_one_process_trains_a_run_at_a_time(tmp_path):
    """A second dwc train on a run that a process is training stops with that process's pid, and so
    does a dwc eval that would write the run's eval.json; the lock goes with the training, so the
    run resumes once it has ended."""
    import os
    from dwc.core.rundir import hold_lock
    run = tmp_path / "run"
    assert main(small_args(run, steps=200)) == 0
    held = hold_lock(run, "training")  # free: the finished training let go of it
    try:
        assert_one_line_error(run_cli("train", "--out", str(run), "--resume", "--steps", "300"),
                              f"is in use: training by pid {os.getpid()}")
        assert_one_line_error(run_cli("train", "--env", ENV, "--out", str(tmp_path / "run")), "in use")
        # nor does dwc eval write the run's eval.json under it; --out evaluates the checkpoint elsewhere
        assert_one_line_error(run_cli("eval", str(run), "--eval-episodes", "1"), "pass --out FILE")
        assert main(["eval", str(run), "--eval-episodes", "1", "--no-progress", "--out", str(tmp_path / "e.json")]) == 0
    finally:
        held.close()
    assert main(["train", "--out", str(run), "--resume", "--steps", "300", "--no-progress"]) == 0
    assert json.loads((run / "eval.json").read_text())["train_steps"] == 300
    from dwc.core.config import TrainConfig
    from dwc.core.errors import UserError
    from dwc.train.run import RunDir
    with pytest.raises(UserError, match="no checkpoint"):  # refused after taking the lock: no folder left behind
        RunDir(tmp_path / "fresh", TrainConfig(), resume=True)
    assert not (tmp_path / "fresh").exists()


def test_a_torn_metrics_line_does_not_stop_resume(tmp_path):
    """A kill or a full disk mid-write tears metrics.jsonl's last line; --resume drops it and goes on."""
    run = tmp_path / "run"
    assert main(small_args(run, steps=200)) == 0
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 19')  # torn: no closing brace, no newline
    assert main(["train", "--out", str(run), "--resume", "--steps", "300", "--no-progress"]) == 0
    lines = (run / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(l)["step"] for l in lines]  # every line parses again
    assert steps == sorted(steps) and 200 < steps[-1] <= 300  # the resumed leg logged on after the tear
    assert json.loads((run / "eval.json").read_text())["train_steps"] == 300
    legs = json.loads((run / "legs.json").read_text())  # what each leg resolved (--precision auto)
    assert [leg["from_step"] for leg in legs] == [0, 200] and {leg["precision"] for leg in legs} <= {"float32",
                                                                                                     "bfloat16"}
    import dwc
    code = legs[-1]["code"]  # the code that trained the leg: this checkout's commit, where there is one
    assert code["version"] == dwc.__version__ and code["path"] == str(Path(dwc.__file__).resolve().parent)
    assert len(code.get("commit", "x" * 40)) == 40
    import numpy
    import torch
    where = legs[-1]["machine"]  # the machine that ran it: a run is exact on one CPU model and install only
    assert where["cpu"] and where["packages"]["torch"] == torch.__version__ and where["packages"]["numpy"] == numpy.__version__


def test_cli_errors_on_damaged_runs(tmp_path):
    run = tmp_path / "run"
    assert main(small_args(run, steps=200)) == 0
    assert_one_line_error(run_cli("train", "--out", str(run), "--resume", "--policy", "mlp"), "--policy mlp (the run has dwc)")
    data = (run / "checkpoint.pt").read_bytes()
    (run / "checkpoint.pt").write_bytes(data[: len(data) // 2])  # truncated, as by a full disk
    assert_one_line_error(run_cli("train", "--out", str(run), "--resume", "--steps", "400"), "corrupt or truncated")
    assert_one_line_error(run_cli("eval", str(run)), "corrupt or truncated")
    (run / "checkpoint.pt").write_bytes(b"garbage")
    assert_one_line_error(run_cli("eval", str(run)), "corrupt")


def test_help_teaches():
    res = run_cli("train", "--help")
    assert res.returncode == 0
    for s in ("--resume", "examples:", "--lut-inputs", "--device", "tensorboard"):
        assert s in res.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("algo,policy", [("sac", "dwc"), ("ppo", "dwc"), ("sac", "mlp"), ("sac", "gates"),
                                         ("ppo", "qmlp")])
def test_training_runs_on_cuda(tmp_path, capsys, algo, policy):
    """Train, resume and evaluate on the GPU (SAC updates as CUDA graphs: capture must not fail); the
    CUDA-trained checkpoint then compiles on the CPU into an IR that matches the model bit for bit
    (compile checks that itself)."""
    run = tmp_path / "run"
    args = small_args(run, algo, policy, steps=300, extra=["--device", "cuda"])
    if policy == "gates":  # 2-input gates: no --lut-inputs
        i = args.index("--lut-inputs")
        del args[i:i + 2]
    assert main(args) == 0
    assert main(["train", "--out", str(run), "--resume", "--steps", "400", "--device", "cuda", "--no-progress"]) == 0
    assert main(["eval", str(run), "--eval-episodes", "2", "--device", "cuda", "--no-progress"]) == 0
    recorded = json.loads((run / "eval.json").read_text())
    assert recorded["train_steps"] == 400
    # by default dwc eval runs where the run trained (its config: cuda), so it reproduces eval.json
    assert main(["eval", str(run), "--eval-episodes", "2", "--out", str(tmp_path / "e.json"), "--no-progress"]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["returns"] == recorded["returns"]
    assert "capture failed" not in capsys.readouterr().out
    if policy != "mlp":
        assert main(["compile", str(run), "--out", str(tmp_path / "build")]) == 0
        assert (tmp_path / "build" / "graph.json").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("policy", ["mlp", "dwc", "gates"])
def test_cuda_graph_updates_match_eager(policy):
    """The same SAC updates (same batches, same noise) replayed as CUDA graphs and run op by op give
    the same parameters: the graphs do the work, and the wiring argmax is recomputed every replay."""
    from dwc.core.config import SACConfig
    from dwc.models import ActorConfig, build_actor
    from dwc.train.common import GraphedCall, sample_action
    from dwc.train.sac import SACLearner

    dev, sc, obs_dim, act_dim = torch.device("cuda"), SACConfig(batch_size=64), 11, 3
    cfg = ActorConfig(policy=policy, width=96, lut_inputs=4, thermo_bits=15, hidden=64)

    def learner(graphs: bool):
        torch.manual_seed(0)
        actor = build_actor(cfg, obs_dim, act_dim, [-1] * act_dim, [1] * act_dim).to(dev)
        assert actor.prepare_cuda_graphs()  # both take the sync-free path; only one is captured
        actor.normalizer.update(torch.randn(100, obs_dim, device=dev) * 3)
        return SACLearner(actor, obs_dim, act_dim, sc, dev, graphs)

    eager, graphed = learner(False), learner(True)
    step = GraphedCall(graphed.update)
    gen = torch.Generator(device=dev).manual_seed(1)
    for i in range(24):  # 12 of each kind: 3 warm-up, 1 capture, 8 replays
        b = sc.batch_size
        batch = (torch.randn(b, obs_dim, device=dev, generator=gen), torch.randn(b, obs_dim, device=dev, generator=gen),
                 torch.rand(b, act_dim, device=dev, generator=gen) * 2 - 1, torch.randn(b, device=dev, generator=gen),
                 (torch.rand(b, device=dev, generator=gen) < 0.1).float(), torch.randn(b, act_dim, device=dev, generator=gen))
        noise_pi = torch.randn(2, b, act_dim, device=dev, generator=gen) if i % 2 == 0 else None
        s_e = eager.update(*batch, noise_pi)
        s_g = step(*batch, noise_pi)
        for k in s_e:
            assert torch.allclose(s_e[k], s_g[k], rtol=1e-4, atol=1e-5), (i, k)
    assert len(step.graphs) == 2 and not step.failed
    for (name, p_e), p_g in zip(eager.actor.state_dict().items(), graphed.actor.state_dict().values()):
        if p_e.is_floating_point():
            assert torch.allclose(p_e, p_g, rtol=1e-4, atol=1e-5), name
    for p_e, p_g in zip(eager.qf_target.parameters(), graphed.qf_target.parameters()):
        assert torch.allclose(p_e, p_g, rtol=1e-4, atol=1e-5)
    if policy == "dwc":
        for l_e, l_g in zip(eager.actor.luts, graphed.actor.luts):
            assert torch.equal(l_e.wiring_indices(), l_g.wiring_indices())
    # the acting forward as a graph, captured early and replayed after the parameters moved on
    act = GraphedCall(torch.no_grad()(lambda o, eps: sample_action(graphed.actor, o, eps)[0]), warmup=1)
    for i in range(6):
        o, eps = torch.randn(1, obs_dim, device=dev), torch.randn(1, act_dim, device=dev)
        with torch.no_grad():
            want = sample_action(graphed.actor, o, eps)[0]
        assert torch.allclose(act(o, eps), want, rtol=1e-5, atol=1e-6), i
        step(*batch, torch.randn(2, sc.batch_size, act_dim, device=dev))  # parameters change
    assert len(act.graphs) == 1


def test_an_interrupt_inside_a_held_block_arrives_when_the_block_ends():
    from dwc.core.errors import interrupt_on_sigterm, interrupts_held
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    # a background job may inherit SIGINT ignored; the held signal goes to whatever handler was there
    signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupt_on_sigterm()
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(sig)
            finished = []
            with pytest.raises(KeyboardInterrupt):
                with interrupts_held():
                    signal.raise_signal(sig)
                    finished.append(sig)  # the block is not cut short
            assert finished == [sig]
            assert signal.getsignal(sig) is handler  # handlers are put back
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def test_a_held_interrupt_arrives_where_the_os_blocks_sigint():
    """Ray's cancel (a sweep being stopped) interrupts a worker with interrupt_main while the worker
    blocks SIGINT at the OS: the held interrupt must reach its handler without a real signal."""
    import _thread
    from dwc.core.errors import interrupts_held
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with pytest.raises(KeyboardInterrupt):
            with interrupts_held():
                _thread.interrupt_main()
                time.sleep(0.05)  # Python runs the (holding) handler here
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, before)


def test_freed_memory_is_kept_so_sac_updates_do_not_page_fault():
    """keep_freed_memory stops glibc handing freed blocks back to the OS.

    The mechanism, shown the same on every glibc machine: two 4 MB blocks freed together grow the
    heap top past the default (adaptive, 2 x block) trim threshold, so glibc returns them and the
    next step faults ~2,000 zeroed pages in anew; with the setting it keeps them (0 faults).
    Whether a given SAC update pattern trips the default depends on the machine's kernels and
    tensor sizes (~3,500 faults per 2 x 256 DWC update on the Xeon dev machine, ~0 on CI's), so for SAC
    only the kept case is asserted: its updates take next to no faults."""
    mechanism = """
import ctypes, resource, sys
from dwc.train.common import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 4 << 20
def step():
    a, b = libc.malloc(size), libc.malloc(size)
    ctypes.memset(a, 1, size)
    ctypes.memset(b, 1, size)
    libc.free(b)
    libc.free(a)
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""
    sac_updates = """
import resource, torch
from dwc.train.common import keep_freed_memory
assert keep_freed_memory()
torch.set_num_threads(1)
from dwc.core.config import SACConfig
from dwc.models.actors import ActorConfig, build_actor
from dwc.train.sac import SACLearner
actor = build_actor(ActorConfig(policy="dwc", width=256), 11, 3, [-1] * 3, [1] * 3)
sac = SACLearner(actor, 11, 3, SACConfig(), torch.device("cpu"))
def update(i, b=256):
    sac.update(torch.randn(b, 11), torch.randn(b, 11), torch.rand(b, 3) * 2 - 1, torch.randn(b), torch.zeros(b),
               torch.randn(b, 3), torch.randn(2, b, 3) if i % 2 == 0 else None)
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(10):
    update(i)
before = faults()
for i in range(10):
    update(i)
print((faults() - before) / 10)
"""
    def faults_per_step(code, *args):
        res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        return float(res.stdout.split()[-1])
    kept, returned = faults_per_step(mechanism, "keep"), faults_per_step(mechanism, "default")
    assert kept < 50 and returned > 1500, (kept, returned)  # 2 x 4 MB = 2,048 pages
    assert faults_per_step(sac_updates) < 200


def test_updates_flush_denormals_and_nothing_else_does():
    """Inside flush_denormals a denormal operand counts as zero (Adam's decaying moments stop taking
    x86's slow assists); outside it, and after it, IEEE arithmetic holds (env steps, evaluation)."""
    from dwc.train.common import flush_denormals
    tiny = torch.tensor([1e-39])  # below float32's smallest normal, 1.18e-38
    assert (tiny * 1.0).item() > 0
    with flush_denormals() as flushing:
        if not flushing:
            pytest.skip("this CPU cannot flush denormals")
        assert (tiny * 1.0).item() == 0.0
    assert (tiny * 1.0).item() > 0


def test_mujoco_warnings_are_python_warnings_not_a_log_file(tmp_path, monkeypatch):
    """An unstable simulation makes MuJoCo warn; by default it appends MUJOCO_LOG.TXT to the working
    folder (the user's). dwc turns the warning into a Python RuntimeWarning and writes no file."""
    import warnings

    from dwc.train.envs import check_env_id
    monkeypatch.chdir(tmp_path)
    env = check_env_id("Hopper-v5")
    env.reset(seed=0)
    env.unwrapped.data.qvel[:] = 1e30  # blows the integrator up
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.step(env.action_space.sample())
    env.close()
    assert any("MuJoCo: Nan, Inf or huge value" in str(w.message) for w in caught)
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
    with warnings.catch_warnings(record=True) as caught:  # but not the deprecation in Gymnasium's own models
        warnings.simplefilter("always")
        check_env_id("HalfCheetah-v5").close()
    assert not [w for w in caught if "MuJoCo" in str(w.message)]


def test_phase_clock_reports_ms_per_iteration():
    """time/<phase>_ms: each phase's wall time between reports, per loop iteration; a report starts afresh."""
    from dwc.train.common import PhaseClock
    now = iter([0.0, 0.002, 0.005, 0.006, 0.010, 0.011])
    clock = PhaseClock(lambda: next(now))
    for phase in ("act", "update", "act", "update", "env"):
        clock.lap(phase)
    assert clock.report(2) == pytest.approx({"time/act_ms": 1.5, "time/update_ms": 3.5, "time/env_ms": 0.5})
    assert clock.report(1) == {}


def test_eval_runs_on_the_device_the_run_names(tmp_path):
    """dwc eval's default device is the run's own (config.json's), the one its training's evaluation used;
    a CUDA run where no GPU is evaluates on the CPU; a device given is taken as given."""
    from dwc.flows.evaluate import _device
    gpu = "cuda" if torch.cuda.is_available() else "cpu"
    for named, want in (("cpu", "cpu"), ("auto", gpu), ("cuda", gpu)):
        (tmp_path / "config.json").write_text(json.dumps({"env": ENV, "device": named}))
        assert _device(tmp_path, "run").type == want, named
    assert _device(tmp_path, "cpu").type == "cpu"


def test_a_runs_cost_adds_up_its_legs_and_splits_a_shared_process(monkeypatch):
    """A checkpoint's cost: the CPU and wall seconds of every leg so far (the resumed leg's added to what
    its checkpoint held), each leg's split equally among the seeds its process trained together."""
    from types import SimpleNamespace
    import dwc.train.loop as loop_mod
    clock = {"cpu": 100.0, "wall": 1000.0}
    monkeypatch.setattr(loop_mod.time, "process_time", lambda: clock["cpu"])
    monkeypatch.setattr(loop_mod.time, "perf_counter", lambda: clock["wall"])

    def run(resume_state):
        return SimpleNamespace(start_step=(resume_state or {}).get("step", 0), resume_state=resume_state,
                               cfg=SimpleNamespace(num_envs=1, steps=10), start_progress=lambda total: None)
    first = loop_mod.TrainLoop(run(None), None, lambda step: {}, share=3)
    clock["cpu"] += 30.0
    clock["wall"] += 60.0
    assert first.cost() == {"cpu_s": 10.0, "wall_s": 20.0, "from_step": 0}
    resumed = loop_mod.TrainLoop(run({"step": 5, "cost": first.cost()}), None, lambda step: {})
    clock["cpu"] += 4.0
    clock["wall"] += 5.0
    assert resumed.cost() == {"cpu_s": 14.0, "wall_s": 25.0, "from_step": 0}
    # a run begun before dwc recorded costs counts from the step it resumed at
    assert loop_mod.TrainLoop(run({"step": 5}), None, lambda step: {}).cost()["from_step"] == 5
