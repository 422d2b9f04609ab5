"""dwc sweep / dwc report: spec expansion and errors, the equivalent dwc train command, the
aggregation, and a real sweep on a local Ray engine with a worker killed mid-run and the driver
stopped and restarted."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dwc.cli import build_parser, main
from dwc.core.errors import UserError
from dwc.flows.report import aggregate, curve, report
from dwc.flows.stats import quartiles
from dwc.core.config import train_command
from dwc.flows.sweep_spec import load_spec

SMALL = {"learning_starts": 300, "batch_size": 32, "checkpoint_every": 200, "eval_episodes": 2, "thermo_bits": 7,
         "width": 32, "lut_inputs": 4, "hidden": 32}


def torch_load(path: Path) -> dict:
    import torch
    return torch.load(path, weights_only=False)


def write_spec(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_spec_expands_lists_and_shares_options(tmp_path):
    spec = load_spec(write_spec(tmp_path / "s.yaml", """
tasks: [InvertedPendulum-v5, InvertedDoublePendulum-v5]
seeds: 3
steps: 2000
options: {learning-starts: 100, algo: sac}
configs:
  dwc: {policy: dwc, width: [32, 64], lut_inputs: [4, 6]}
  float-mlp: {policy: mlp, learning_starts: 50}
hardware: {target: none, episodes: 1}
"""))
    assert spec.seeds == [1, 2, 3]
    assert list(spec.configs) == ["dwc-width32-lut-inputs4", "dwc-width32-lut-inputs6", "dwc-width64-lut-inputs4",
                                  "dwc-width64-lut-inputs6", "float-mlp"]
    jobs = spec.jobs(tmp_path / "out")
    assert len(jobs) == 2 * 5 * 3 and len({j.id for j in jobs}) == len(jobs)
    j = next(j for j in jobs if j.id == "InvertedDoublePendulum-v5/dwc-width64-lut-inputs4/seed2")
    assert (j.cfg.env, j.cfg.seed, j.cfg.steps, j.cfg.actor.width, j.cfg.actor.lut_inputs, j.cfg.sac.learning_starts) \
        == ("InvertedDoublePendulum-v5", 2, 2000, 64, 4, 100)
    assert j.hardware["target"] == "none" and j.dir == tmp_path / "out/runs/InvertedDoublePendulum-v5/dwc-width64-lut-inputs4/seed2"
    mlp = next(j for j in jobs if j.config == "float-mlp")  # names keep their dashes
    assert mlp.cfg.sac.learning_starts == 50 and mlp.hardware is None  # a config overrides shared options; no circuit
    # a run's identity ignores where it runs, not what it computes
    key = j.key
    j.cfg.device, j.cfg.threads = "cuda", 4
    assert j.key == key
    j.cfg.steps = 3000
    assert j.key != key


def test_runs_started_earlier_are_queued_first(tmp_path):
    from dwc.core.rundir import CHECKPOINT
    from dwc.flows.sweep import _groups
    spec = load_spec(write_spec(tmp_path / "s.yaml", """
tasks: [InvertedPendulum-v5, Hopper-v5]
seeds: 2
steps: 2000
configs: {mlp: {policy: mlp}, dwc: {policy: dwc}}
"""))
    jobs = spec.jobs(tmp_path / "out")
    assert [g[0].id for g in _groups(jobs, 1)] == [j.id for j in jobs]  # the spec's order: task, seed, config
    for started in ("Hopper-v5/dwc/seed2", "Hopper-v5/mlp/seed1"):
        run = next(j for j in jobs if j.id == started).dir / "run"
        run.mkdir(parents=True)
        (run / CHECKPOINT).write_bytes(b"")
    order = [g[0].id for g in _groups(jobs, 1)]
    assert order[:2] == ["Hopper-v5/mlp/seed1", "Hopper-v5/dwc/seed2"] and order[2:] == [
        j.id for j in jobs if j.id not in order[:2]]
    together = _groups(jobs, 2)  # seeds of a task and config trained together: the group with a started seed first
    assert [j.id for j in together[0]] == ["Hopper-v5/mlp/seed1", "Hopper-v5/mlp/seed2"]


def test_time_left_gives_each_run_its_own_rate(tmp_path):
    """A sweep's time left: a run that has trained goes at the rate it logged last; one that has not at
    the median rate of its task and config's other runs; the groups share the workers in queue order."""
    from dwc.flows.sweep_spec import TimeLeft
    spec = load_spec(write_spec(tmp_path / "s.yaml", """
tasks: [Hopper-v5]
seeds: 3
steps: 10000
options: {learning_starts: 1000}
configs: {mlp: {policy: mlp}, dwc: {policy: dwc}}
"""))
    jobs = {j.id: j for j in spec.jobs(tmp_path / "out")}

    def logs(run_id, sps, steps):
        run = jobs[run_id].dir / "run"
        run.mkdir(parents=True)
        with open(run / "metrics.jsonl", "w") as f:
            for i, (r, s) in enumerate(zip(sps, steps)):
                f.write(json.dumps({"step": s, "losses/q": 1.0}) + "\n" + json.dumps({"step": s, "charts/SPS": r}) + "\n")
            f.write('{"step": 9')  # a torn last line is no record
    logs("Hopper-v5/mlp/seed1", [100.0, 80.0, 100.0], [8000, 9000, 10000])  # finished: its rate is 100
    logs("Hopper-v5/mlp/seed2", [50.0], [5000])   # half done at 50 steps/s: 100 s left
    # 8000 steps at its median 15: 533 s; the rate of SAC's random warm-up (to step 1000) is not its rate
    logs("Hopper-v5/dwc/seed1", [1500.0, 10.0, 20.0], [1000, 1500, 2000])
    tl = TimeLeft(list(jobs.values()), slots=2)
    assert tl.rate(jobs["Hopper-v5/mlp/seed3"]) == 75.0  # its config's others: the median of 100 and 50
    assert tl.rate(jobs["Hopper-v5/dwc/seed2"]) == 15.0 and tl.rate(jobs["Hopper-v5/mlp/seed2"]) == 50.0
    assert [jobs[i].logged_steps() for i in ("Hopper-v5/mlp/seed1", "Hopper-v5/mlp/seed2", "Hopper-v5/mlp/seed3")] == [
        10000, 5000, 0]
    left = lambda *ids: tl([[jobs[i]] for i in ids])
    # mlp2 (100 s) and dwc1 (533 s) now; mlp3 (10000/75 = 133 s) then takes mlp2's worker: dwc1 ends last
    assert left("Hopper-v5/mlp/seed2", "Hopper-v5/dwc/seed1", "Hopper-v5/mlp/seed3") == (pytest.approx(8000 / 15), 0)
    # dwc2 (667 s) after mlp3 on the first worker to free: 100 + 133 + 667
    assert left("Hopper-v5/mlp/seed2", "Hopper-v5/dwc/seed1", "Hopper-v5/mlp/seed3", "Hopper-v5/dwc/seed2") == (
        pytest.approx(100 + 10000 / 75 + 10000 / 15), 0)
    # the steps a caller has just read (the progress bar's, every 2 s) are used as given, not read again
    assert tl([[jobs["Hopper-v5/mlp/seed2"]]], {"Hopper-v5/mlp/seed2": 7500}) == (pytest.approx(2500 / 50), 0)
    # --longest-first: the begun runs first, then the longest left; a config with no rate counts as longest
    from dwc.flows.sweep import _groups
    (jobs["Hopper-v5/mlp/seed2"].dir / "run" / "checkpoint.pt").write_bytes(b"")
    order = [g[0].id for g in _groups(list(jobs.values()), 1, tl)]
    assert order == ["Hopper-v5/mlp/seed2",  # begun
                     "Hopper-v5/dwc/seed2", "Hopper-v5/dwc/seed3",  # 667 s each, in the spec's order
                     "Hopper-v5/dwc/seed1", "Hopper-v5/mlp/seed3", "Hopper-v5/mlp/seed1"]  # 533, 133, 0 s
    tl.own.pop("Hopper-v5/dwc/seed1")  # no dwc run has trained: counted apart, not guessed
    seconds, unknown = left("Hopper-v5/mlp/seed2", "Hopper-v5/dwc/seed1")
    assert seconds == pytest.approx(100) and unknown == 1
    assert [g[0].id for g in _groups(list(jobs.values()), 1, tl)][1:4] == [  # and queued as the longest
        "Hopper-v5/dwc/seed1", "Hopper-v5/dwc/seed2", "Hopper-v5/dwc/seed3"]
    assert build_parser().parse_args(["sweep", "s.yaml", "--longest-first"]).longest_first
    assert "1 run of a config not trained yet" in tl.text([[jobs["Hopper-v5/dwc/seed1"]]])


def test_a_config_can_run_on_some_tasks_only(tmp_path):
    """A config's tasks: a subset of the spec's; its runs exist on those tasks only, and --scale-down
    keeps the intersection."""
    text = """
tasks: [InvertedPendulum-v5, InvertedDoublePendulum-v5]
seeds: 2
steps: 2000
configs:
  mlp: {policy: mlp}
  dwc-b15: {policy: dwc, width: 32, thermo_bits: 15, tasks: [InvertedDoublePendulum-v5]}
scale_down: {tasks: [InvertedPendulum-v5]}
"""
    spec = load_spec(write_spec(tmp_path / "s.yaml", text))
    ids = sorted(j.id for j in spec.jobs(tmp_path / "out"))
    assert ids == sorted([f"{t}/mlp/seed{s}" for t in spec.tasks for s in (1, 2)]
                         + [f"InvertedDoublePendulum-v5/dwc-b15/seed{s}" for s in (1, 2)])
    assert all(j.cfg.actor.thermo_bits == 15 for j in spec.jobs(tmp_path / "out") if j.config == "dwc-b15")
    down = load_spec(tmp_path / "s.yaml", scale_down=True)
    assert [j.id for j in down.jobs(tmp_path / "out")] == ["InvertedPendulum-v5/mlp/seed1", "InvertedPendulum-v5/mlp/seed2"]
    # scaled down to tasks that no config is given: no runs, said in one line
    write_spec(tmp_path / "s.yaml", text.replace("  mlp: {policy: mlp}\n", ""))
    with pytest.raises(UserError, match="no runs: no config is given any of the tasks InvertedPendulum-v5"):
        load_spec(tmp_path / "s.yaml", scale_down=True)


def test_shipped_specs_load(tmp_path):
    """Every spec shipped in configs/ and docs/ loads, full and scaled down, into distinct runs."""
    root = Path(__file__).resolve().parents[1]
    specs = sorted(root.glob("configs/*.yaml")) + sorted(root.glob("docs/*/spec.yaml"))
    assert len(specs) >= 4
    for path in specs:
        for down in (False, True):
            if down and "scale_down" not in path.read_text():
                continue
            jobs = load_spec(path, scale_down=down).jobs(tmp_path)
            assert jobs and len({j.id for j in jobs}) == len(jobs), path


@pytest.mark.parametrize("text, message", [
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {widht: 3}}", "unknown option in .*config a: 'widht'"),
    ("tasks: [NoSuchEnv-v0]\nseeds: 1\nconfigs: {a: {}}", "NoSuchEnv-v0"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 0\nconfigs: {a: {}}", "seeds"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {width: big}}", "expected int"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {thermo_bits: 8}}", "odd"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a/b: {}}", "config name"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {}}\nhardware: {target: zynq}", "target"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {}}\nresources: {gpus: 1}", "unknown"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\noptions: {seed: 3}\nconfigs: {a: {}}", "seed"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1", "missing 'configs'"),
    ("tasks: [a\n", r"not valid YAML \(line 2, column 1\)"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {tasks: [Hopper-v5]}}", "tasks Hopper-v5 not in the spec's tasks"),
])
def test_spec_errors_are_one_line(tmp_path, capsys, text, message):
    spec = write_spec(tmp_path / "s.yaml", text)
    with pytest.raises(UserError, match=message):
        load_spec(spec)
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dwc sweep: error:") and "\n" not in err and "Traceback" not in err


def test_recorded_command_rebuilds_the_same_config(tmp_path):
    """commands.txt of a sweep run holds a dwc train command that trains exactly that run."""
    from dwc.cli.train import train_config
    spec = load_spec(write_spec(tmp_path / "s.yaml", """
tasks: [Hopper-v5]
seeds: [7]
steps: 1234
configs: {q: {policy: qmlp, fan_in: 3, weight_bits: 3, actor_lr: 0.001, cuda_graphs: false, algo: ppo}}
"""))
    job = spec.jobs(tmp_path)[0]
    words = train_command(job.cfg, tmp_path / "run")
    args = build_parser().parse_args(words[1:])
    assert train_config(args).to_dict() == job.cfg.to_dict()


def test_quartiles_and_aggregate():
    assert quartiles([1.0, 2.0, 3.0, 4.0, 100.0]) == {"median": 3.0, "q1": 2.0, "q3": 4.0, "n": 5}
    assert quartiles([]) is None
    state = {"runs": {f"T/c/seed{s}": {"task": "T", "config": "c", "seed": s, "dir": "x"} for s in (1, 2, 3)}}
    res = [{"task": "T", "config": "c", "seed": s, "policy": "dwc", "train_steps": 10, "float_return": f,
            "frozen_return": f - 1, "rtl_return": None, "rtl_equals_frozen": None, "luts": None, "ir_luts": 5,
            "fmax_mhz": None} for s, f in ((2, 20.0), (1, 10.0))]
    row, = aggregate(state, res)
    assert row["seeds"] == [1, 2] and row["planned"] == 3
    assert row["float_return"] == {"median": 15.0, "q1": 12.5, "q3": 17.5, "n": 2}
    assert row["frozen_return"]["median"] == 14.0 and row["rtl_return"] is None


def test_the_shipped_seed_is_the_median_by_deployed_return():
    from dwc.flows.export import median_run
    runs = [{"seed": s, "float_return": f, "frozen_return": z}
            for s, f, z in ((1, 900.0, 100.0), (2, 100.0, 300.0), (3, 500.0, 200.0))]
    assert median_run(runs)["seed"] == 3  # by the frozen circuit's return, not the float policy's
    assert median_run(runs[:2])["seed"] == 1  # even count: the lower middle one, never the best
    mlp = [{"seed": s, "float_return": f, "frozen_return": None} for s, f in ((1, 5.0), (2, 7.0), (3, 6.0), (4, 6.0))]
    assert median_run(mlp)["seed"] == 3  # float returns where there is no circuit; a tie goes to the lower seed


def test_curve_bins_episodes_on_the_grid(tmp_path):
    m = tmp_path / "metrics.jsonl"
    m.write_text("".join(json.dumps(r) + "\n" for r in [
        {"step": 5, "losses/q": 1.0}, {"step": 10, "charts/episodic_return": 2.0},
        {"step": 12, "charts/episodic_return": 4.0}, {"step": 31, "charts/episodic_return": 9.0}]))
    y = curve(m, np.array([5.0, 15.0, 25.0, 35.0]))
    assert np.isnan(y[0]) and list(y[1:]) == [3.0, 3.0, 9.0]


def _wait_for(pred, timeout, what):
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.ci
def test_sweep_survives_a_killed_worker_and_a_stopped_driver(tmp_path):
    """2 tasks x 2 seeds on a local Ray engine. One run's worker is SIGKILLed after its first
    checkpoint: Ray restarts it, it resumes from that checkpoint and the sweep completes. Then the
    budget is raised and the driver is stopped (SIGTERM) as soon as one run finished, and started
    again: finished runs are kept untouched, the rest resume, and every run ends at its full step
    count with its metrics intact."""
    spec_text = """
tasks: [InvertedPendulum-v5, InvertedDoublePendulum-v5]
seeds: 2
steps: {steps}
options: {options}
configs: {{dwc: {{policy: dwc}}}}
"""
    spec = write_spec(tmp_path / "small.yaml", spec_text.format(steps=1400, options=json.dumps(SMALL)))
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "dwc", "sweep", str(spec), "--out", str(out), "--no-progress"]
    runs = {f"{t}/seed{s}": out / "runs" / t / "dwc" / f"seed{s}"
            for t in ("InvertedPendulum-v5", "InvertedDoublePendulum-v5") for s in (1, 2)}
    victim = runs["InvertedPendulum-v5/seed1"]

    # 1. a worker killed mid-run
    log = open(tmp_path / "driver1.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            env={k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"})
    try:
        _wait_for(lambda: (victim / "run/checkpoint.pt").exists() and (victim / "attempts.jsonl").exists(), 120,
                  "the first checkpoint")
        pid = json.loads((victim / "attempts.jsonl").read_text().splitlines()[0])["pid"]
        os.kill(pid, signal.SIGKILL)
        assert proc.wait(timeout=600) == 0, (tmp_path / "driver1.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    # the local engine gets Ray's default token authentication, asked for by name: so Ray does not warn of it
    assert "Token authentication" not in (tmp_path / "driver1.log").read_text()
    legs = [l for l in (victim / "run/commands.txt").read_text().splitlines() if l.startswith("# from step")]
    assert legs[0] == "# from step 0" and int(legs[1].split()[-1]) > 0  # Ray's restart resumed, not restarted
    words = [l for l in (victim / "run/commands.txt").read_text().splitlines() if l.startswith("dwc train")]
    assert "--resume" not in words[0] and "--resume" in words[1]  # each leg as the dwc train command it equals
    assert [json.loads(l)["resumed"] for l in (victim / "attempts.jsonl").read_text().splitlines()] == [False, True]
    assert all(json.loads((d / "result.json").read_text())["train_steps"] == 1400 for d in runs.values())

    # 2. a longer budget, the driver stopped with runs unfinished, and started again
    steps = 3000  # 1,600 more steps: room for the stop to land while the last runs train
    write_spec(spec, spec_text.format(steps=steps, options=json.dumps(SMALL)))
    log = open(tmp_path / "driver2.log", "w")
    # started the way a background job is (`nohup dwc sweep ... &`): SIGINT ignored, in Ray's workers too
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        done = lambda d: (d / "result.json").exists() and json.loads((d / "result.json").read_text())["train_steps"] == steps
        # every run into its second leg's training loop first (it has logged a step past 1400), so
        # the stop lands in the loops of the unfinished ones (what this part tests), not in a
        # worker that is still starting
        def training(d):
            if "# from step 1400" not in (d / "run/commands.txt").read_text():
                return False
            try:  # the last line may be half-written
                return json.loads((d / "run/metrics.jsonl").read_text().splitlines()[-1])["step"] > 1400
            except (ValueError, KeyError, IndexError):
                return False
        _wait_for(lambda: any(done(d) for d in runs.values()) and all(done(d) or training(d) for d in runs.values()),
                  300, "a finished run, the others training")
        # SIGTERM, dwc's polite stop (as Ctrl-C; a background job under a non-interactive shell ignores SIGINT)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 130, (tmp_path / "driver2.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    # the stopped runs' workers wind down on their own (a run that was about to end may still finish)
    _wait_for(lambda: subprocess.run(["pgrep", "-f", "ray::Inverted"], capture_output=True).returncode != 0, 60,
              "the stopped workers to exit")
    finished_before = {k: (d / "result.json").stat().st_mtime_ns for k, d in runs.items() if done(d)}
    assert 0 < len(finished_before) < 4  # 2 runs at a time: the last ones had just started
    # where the stopped sweep stands: dwc report lists each unfinished run with the step of its
    # checkpoint (read without loading it), and the next start names them as it resumes them
    import torch
    at = {str(d.relative_to(out / "runs")): torch.load(d / "run/checkpoint.pt", weights_only=False)["step"]
          for k, d in runs.items() if k not in finished_before}
    assert all(1400 < s < steps for s in at.values())
    assert {r["id"]: (r["state"], r["checkpoint_step"], r["steps"]) for r in report(out)["unfinished"]} == \
        {rid: ("started", s, steps) for rid, s in at.items()}
    assert "Not finished: " in (out / "report.md").read_text()

    # with its progress on, into a file as under nohup: lines, not a redrawn bar
    again = subprocess.run([c for c in cmd if c != "--no-progress"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "\r" not in again.stdout + again.stderr
    assert sum(l.startswith("done ") for l in again.stdout.splitlines()) == 4 - len(finished_before)
    assert f"{len(finished_before)} finished earlier (kept), {4 - len(finished_before)} to run" in again.stdout
    assert all(f"{rid} at step {s:,}" in again.stdout for rid, s in at.items()), again.stdout
    for k, d in runs.items():
        r = json.loads((d / "result.json").read_text())
        assert r["train_steps"] == steps and r["frozen_return"] is not None and len(r["float_returns"]) == 2
        if k in finished_before:  # never redone
            assert (d / "result.json").stat().st_mtime_ns == finished_before[k]
        ev = json.loads((d / "run/eval.json").read_text())
        assert ev["train_steps"] == steps and ev["frozen"]["returns"] == r["frozen_returns"]
        m = [json.loads(l)["step"] for l in (d / "run/metrics.jsonl").read_text().splitlines()]
        assert m == sorted(m) and m[-1] <= steps  # nothing logged twice after a resume

    # a third start finds nothing to do
    third = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert third.returncode == 0 and "4 finished earlier (kept), 0 to run" in third.stdout

    rep = subprocess.run([sys.executable, "-m", "dwc", "report", str(out), "--json"], capture_output=True, text=True)
    assert rep.returncode == 0, rep.stderr
    rows = json.loads(rep.stdout)["rows"]
    assert [(r["task"], len(r["seeds"])) for r in rows] == [("InvertedPendulum-v5", 2), ("InvertedDoublePendulum-v5", 2)]
    for r in rows:
        vals = sorted(json.loads((runs[f"{r['task']}/seed{s}"] / "result.json").read_text())["frozen_return"] for s in (1, 2))
        assert r["frozen_return"]["median"] == pytest.approx(sum(vals) / 2)
    assert (out / "report.md").exists() and (out / "curves_InvertedPendulum-v5.png").stat().st_size > 1000


@pytest.mark.slow
@pytest.mark.ci  # ~1 minute: one run stopped by the clock
def test_sweep_stops_after_the_time_it_was_given(tmp_path):
    """--stop-after: at that time the run in flight checkpoints and the driver stops, exit status 3
    with a line that says how to continue; the run stays to do, its checkpoint there to resume."""
    spec = write_spec(tmp_path / "s.yaml", f"""
tasks: [InvertedPendulum-v5]
seeds: 1
steps: 1000000
options: {json.dumps(SMALL)}
configs: {{dwc: {{policy: dwc}}}}
""")
    out = tmp_path / "sweep"
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "dwc", "sweep", str(spec), "--out", str(out), "--no-progress",
                          "--stop-after", "45s"], capture_output=True, text=True, timeout=400)
    took = time.monotonic() - t0
    assert res.returncode == 3, res.stdout + res.stderr
    assert "stopped after 0:00:45 (--stop-after)" in res.stderr and "the same dwc sweep command continues" in res.stderr
    assert re.search(r"--stop-after stops the sweep in 0:00:[0-4]\d", res.stdout)  # said up front, with the time left
    assert 45 <= took < 45 + 120, took  # stopped at the time, not at the run's end (1M steps)
    run = out / "runs/InvertedPendulum-v5/dwc/seed1"
    assert not (run / "result.json").exists()
    assert json.loads((out / "sweep.json").read_text())["runs"]["InvertedPendulum-v5/dwc/seed1"]["state"] == "todo"
    assert 0 < json.loads((run / "run/checkpoint.json").read_text())["step"] < 1000000


@pytest.mark.slow
@pytest.mark.ci  # ~1 minute: two 600-step runs, one circuit in Verilator
def test_sweep_hardware_stage_verifies_each_circuit(tmp_path):
    """The hardware section: each run is compiled and run closed loop in Verilator; the report's
    hardware return is the Verilog's and equals the frozen policy's on the same episodes."""
    spec = write_spec(tmp_path / "hw.yaml", f"""
tasks: [InvertedPendulum-v5]
seeds: [1]
steps: 600
options: {json.dumps(SMALL)}
configs: {{dwc: {{policy: dwc}}, mlp: {{policy: mlp}}}}
hardware: {{target: none, episodes: 1, pipeline: 1}}
""")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "s"), "--no-progress"]) == 0
    r = json.loads((tmp_path / "s/runs/InvertedPendulum-v5/dwc/seed1/result.json").read_text())
    assert r["rtl_equals_frozen"] is True and r["ir_luts"] > 0 and r["latency_cycles"] >= 1
    assert r["rtl_return"] == pytest.approx(r["frozen_returns"][0])
    mlp = json.loads((tmp_path / "s/runs/InvertedPendulum-v5/mlp/seed1/result.json").read_text())
    assert mlp["frozen_return"] is None and mlp["rtl_return"] is None
    assert main(["report", str(tmp_path / "s")]) == 0
    # shipping the config's (only) seed: the policy, every seed's figures and the run's hardware reports
    ship = tmp_path / "ship"
    assert main(["export", str(tmp_path / "s"), "--config", "dwc", "--out", str(ship)]) == 0
    seeds = json.loads((ship / "seeds.json").read_text())
    assert seeds["shipped_seed"] == 1 and seeds["deployed_return"] == "frozen"
    assert seeds["runs"][0]["rtl_equals_frozen"] is True and seeds["runs"][0]["frozen_return"] == r["frozen_return"]
    assert json.loads((ship / "hardware/verify_report.json").read_text())["passed"] is True
    assert json.loads((ship / "hardware/summary.json").read_text())["rtl_equals_frozen"] is True
    readme = (ship / "README.md").read_text()
    assert f"| 1 (shipped) | {r['float_return']:.1f} | {r['frozen_return']:.1f} | {r['rtl_return']:.1f} | yes |" in readme
    # the shipped policy is the sweep's run: its frozen circuit returns what the sweep measured, episode by episode
    assert main(["eval", str(ship), "--frozen", "--episodes", "2", "--out", str(tmp_path / "e.json"), "--no-progress"]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["frozen"]["returns"] == pytest.approx(r["frozen_returns"])

    # the slim archive: no training state, and every reader takes it as the sweep itself
    from dwc.flows.export import is_exported
    from dwc.flows.report_runs import load_runs
    arch = tmp_path / "archive"
    assert main(["export", str(tmp_path / "s"), "--all", "--out", str(arch)]) == 0
    assert all(is_exported(d) for d in arch.glob("runs/*/*/seed*/run"))
    assert json.loads((arch / "sweep.json").read_text())["spec"] == "spec.yaml"  # its own copy, not this machine's
    assert not list(arch.rglob("*.v")) and not (arch / "runs/InvertedPendulum-v5/dwc/seed1/run/tb").exists()
    strip = lambda rs: sorted((dict(x, dir=None) for x in rs), key=lambda x: x["id"])
    assert strip(load_runs(arch)[1]) == strip(load_runs(tmp_path / "s")[1])
    ship2 = tmp_path / "ship2"
    assert main(["export", str(arch), "--config", "dwc", "--out", str(ship2)]) == 0
    assert (ship2 / "hardware/verify_report.json").read_bytes() == (ship / "hardware/verify_report.json").read_bytes()
    assert torch_load(ship2 / "checkpoint.pt")["actor"].keys() == torch_load(ship / "checkpoint.pt")["actor"].keys()
    assert main(["report", str(arch)]) == 0
    # archiving again adds nothing; a copy of the archive is a sweep folder whose runs are all finished
    from dwc.flows.export import archive_sweep
    assert archive_sweep(tmp_path / "s", arch)["added"] == []
    from dwc.flows.sweep import sweep
    shutil.copytree(arch, tmp_path / "again")
    state = sweep(spec, tmp_path / "again", progress=False, log=lambda *a: None)
    assert {rec["state"] for rec in state["runs"].values()} == {"finished"}


@pytest.mark.slow
@pytest.mark.ci
def test_sweep_runs_on_a_running_cluster(tmp_path):
    """--address: the runs go to a Ray cluster started beforehand (`ray start --head`), not to a
    local engine of the sweep's own."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray_cli = Path(sys.executable).parent / "ray"
    head_log = open(tmp_path / "head.log", "w")
    head = subprocess.Popen([str(ray_cli), "start", "--head", "--port", str(port), "--num-cpus", "1",
                             "--include-dashboard=false", "--disable-usage-stats", "--block"],
                            stdout=head_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for(lambda: "Ray runtime started" in (tmp_path / "head.log").read_text(), 120, "the Ray head")
        spec = write_spec(tmp_path / "one.yaml", f"""
tasks: [InvertedPendulum-v5]
seeds: [3]
steps: 600
options: {json.dumps(SMALL)}
configs: {{dwc: {{policy: dwc}}}}
""")
        res = subprocess.run([sys.executable, "-m", "dwc", "sweep", str(spec), "--out", str(tmp_path / "s"),
                              "--address", f"127.0.0.1:{port}", "--no-progress"], capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"(127.0.0.1:{port}): 1 CPUs" in res.stdout  # the cluster's resources, not this machine's 2+
        r = json.loads((tmp_path / "s/runs/InvertedPendulum-v5/dwc/seed3/result.json").read_text())
        assert r["train_steps"] == 600 and r["frozen_return"] is not None
    finally:
        head.send_signal(signal.SIGINT)  # ray start --block stops its processes on SIGINT
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        head_log.close()


@pytest.mark.slow
@pytest.mark.ci  # ~10 s: a local engine and one task
def test_workers_import_the_dwc_the_sweep_was_started_with(tmp_path, monkeypatch):
    """Ray puts the driver's working folder first on its workers' import path. A sweep started from a
    folder holding another dwc (an older checkout) still trains with its own."""
    import dwc
    from dwc.flows.sweep import _start_ray

    def imported_dwc() -> str:  # a local function: Ray sends it by value, the worker imports dwc itself
        import dwc
        return dwc.__file__

    other = tmp_path / "old-checkout"
    (other / "dwc").mkdir(parents=True)
    (other / "dwc" / "__init__.py").write_text("")
    monkeypatch.chdir(other)
    ray, _ = _start_ray(None, 1)
    try:
        assert Path.cwd() == other  # the driver's own folder is left as it was
        assert ray.get(ray.remote(imported_dwc).remote(), timeout=120) == dwc.__file__
    finally:
        ray.shutdown()


def test_a_finished_run_stays_finished_when_dwc_gains_a_config_field(tmp_path):
    """A run is identified by its directory's config.json, read with today's defaults: results
    written before a new option existed are still recognised; a changed option is not."""
    from dwc.core.rundir import write_json
    spec = load_spec(write_spec(tmp_path / "s.yaml", "tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {width: 8}}"))
    job = spec.jobs(tmp_path)[0]
    old = job.cfg.to_dict()
    del old["target"], old["actor"]["max_luts"]  # as written by an older dwc
    write_json(job.dir / "run" / "config.json", old)
    write_json(job.dir / "result.json", {"hardware": None})
    assert job.finished()
    job.cfg.device = "cuda"  # where it runs does not matter
    assert job.finished()
    job.cfg.actor.width = 16
    assert not job.finished()


def test_a_run_stopped_before_its_first_checkpoint_starts_again(tmp_path):
    """A worker killed (or a driver stopped) before a run's first checkpoint leaves a run folder with
    config.json and metrics but nothing to resume: the next start trains it from step 0 instead of
    failing on the non-empty folder (seen when a stopped bench_codesign sweep was restarted)."""
    from dwc.core.rundir import write_json
    from dwc.flows.sweep import run_job
    spec = load_spec(write_spec(tmp_path / "s.yaml", """
tasks: [InvertedPendulum-v5]
seeds: 1
steps: 300
configs: {m: {policy: mlp, learning_starts: 100, eval_episodes: 1}}
"""))
    job = spec.jobs(tmp_path)[0]
    write_json(job.dir / "run" / "config.json", job.cfg.to_dict())
    (job.dir / "run" / "metrics.jsonl").write_text('{"step": 50}\n')
    result = run_job(job.payload())
    assert "error" not in result, result
    assert result["train_steps"] == 300 and job.finished()


def test_a_sweep_that_cannot_start_writes_nothing(tmp_path, monkeypatch):
    import dwc.flows.sweep as sw

    def no_engine(address, cpus):
        raise UserError("cannot start Ray at 10.9.9.9:6379: connection refused")
    monkeypatch.setattr(sw, "_start_ray", no_engine)
    spec = write_spec(tmp_path / "s.yaml", "tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {width: 8}}")
    with pytest.raises(UserError, match="cannot start Ray"):
        sw.sweep(spec, tmp_path / "out", progress=False, log=lambda *a: None)
    assert not (tmp_path / "out").exists()  # no spec.yaml, no sweep.json, no folder


def test_one_driver_a_sweep_folder(tmp_path, monkeypatch):
    """A second dwc sweep on a folder that a driver is using stops with the first one's pid, before it
    starts an engine; the folder is free again once the first one lets go."""
    import dwc.flows.sweep as sw
    from dwc.core.rundir import hold_lock
    started = []
    monkeypatch.setattr(sw, "_start_ray", lambda address, cpus: started.append(1) or pytest.fail("an engine"))
    spec = write_spec(tmp_path / "s.yaml", "tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {width: 8}}")
    held = hold_lock(tmp_path / "out", "dwc sweep")  # as the first driver holds it
    with pytest.raises(UserError, match=f"out is in use: dwc sweep by pid {os.getpid()} on "):
        sw.sweep(spec, tmp_path / "out", progress=False, log=lambda *a: None)
    assert not started and not (tmp_path / "out" / "sweep.json").exists()
    held.close()
    hold_lock(tmp_path / "out", "dwc sweep").close()  # the refused driver kept nothing


def test_part_of_a_spec_runs_now_and_the_rest_stays_to_do(tmp_path, monkeypatch):
    """--tasks/--seeds pick the spec's runs to start now; the others stay in sweep.json as to do (a later
    command runs them into the same folder), and a task or seed outside the spec is one clear error."""
    import dwc.flows.sweep as sw
    from dwc.core.rundir import write_json
    spec = write_spec(tmp_path / "s.yaml", "tasks: [InvertedPendulum-v5, InvertedDoublePendulum-v5]\nseeds: 2\n"
                                           "configs: {a: {width: 8}}")
    for j in load_spec(spec).jobs((tmp_path / "out").resolve()):
        if j.seed == 1 and j.task == "InvertedPendulum-v5":  # as a finished run leaves it
            write_json(j.dir / "run" / "config.json", j.cfg.to_dict())
            write_json(j.dir / "result.json", {"hardware": None})
    started = []
    monkeypatch.setattr(sw, "_start_ray", lambda address, cpus: started.append(1) or (_ for _ in ()).throw(
        AssertionError("nothing to run: no engine")))
    said = []
    state = sw.sweep(spec, tmp_path / "out", progress=False, log=said.append, tasks=["InvertedPendulum-v5"], seeds=[1])
    assert not started
    assert {k: r["state"] for k, r in state["runs"].items()} == {
        "InvertedPendulum-v5/a/seed1": "finished", "InvertedPendulum-v5/a/seed2": "todo",
        "InvertedDoublePendulum-v5/a/seed1": "todo", "InvertedDoublePendulum-v5/a/seed2": "todo"}
    assert "1 finished earlier (kept), 0 to run now, 3 left for later" in said[0]
    assert json.loads((tmp_path / "out" / "sweep.json").read_text())["runs"] == state["runs"]
    with pytest.raises(UserError, match=r"--seeds 3: not among the spec's seeds \(1, 2\)"):
        sw.sweep(spec, tmp_path / "out", progress=False, log=said.append, seeds=[3])
    with pytest.raises(UserError, match="--tasks Hopper-v5: not among the spec's tasks"):
        sw.sweep(spec, tmp_path / "out", progress=False, log=said.append, tasks=["Hopper-v5"])
    # the same from the command line: one line, no traceback
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--seeds", "1-3"]) == 2
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--seeds-per-run", "0"]) == 2
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--cpus-per-run", "0"]) == 2
    # more threads per run is placement, not another run: the finished run stays finished
    state = sw.sweep(spec, tmp_path / "out", progress=False, log=said.append, tasks=["InvertedPendulum-v5"], seeds=[1],
                     cpus_per_run=2)
    assert not started and state["runs"]["InvertedPendulum-v5/a/seed1"]["state"] == "finished"
    with pytest.raises(UserError, match=r"--configs b: not among the spec's configs \(a\)"):
        sw.sweep(spec, tmp_path / "out", progress=False, log=said.append, configs=["b"])
    state = sw.sweep(spec, tmp_path / "out", progress=False, log=said.append, configs=["a"], seeds=[1],
                     tasks=["InvertedPendulum-v5"])
    assert not started and "0 to run now, 3 left for later" in said[-1]
    # an archive of a sweep none of whose runs finished is a sweep folder with every run to do
    shutil.rmtree(tmp_path / "out" / "runs")
    assert main(["export", str(tmp_path / "out"), "--all", "--out", str(tmp_path / "arch")]) == 0
    assert {r["state"] for r in json.loads((tmp_path / "arch" / "sweep.json").read_text())["runs"].values()} == {"todo"}
    assert main(["export", str(tmp_path / "out"), "--all", "--out", str(tmp_path / "s.yaml")]) == 2  # not a folder
