"""A sweep stopped and started again: a real sweep on a local Ray engine with a worker killed mid-run and
the driver stopped and restarted, the stop at --stop-after, and which runs count as finished or start over."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from dwc.flows.report import report
from dwc.flows.sweep_spec import load_spec
from helpers import SMALL_SWEEP, wait_for, write_spec

FIRST = 800  # the first budget's steps (checkpoints every 200, so the killed worker has one to resume from)


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
    spec = write_spec(tmp_path / "small.yaml", spec_text.format(steps=FIRST, options=json.dumps(SMALL_SWEEP)))
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
        wait_for(lambda: (victim / "run/checkpoint.pt").exists() and (victim / "attempts.jsonl").exists(), 300,
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
    assert all(json.loads((d / "result.json").read_text())["train_steps"] == FIRST for d in runs.values())

    # 2. a longer budget, the driver stopped with runs unfinished, and started again
    steps = FIRST + 1400  # room for the stop to land while the last runs train
    write_spec(spec, spec_text.format(steps=steps, options=json.dumps(SMALL_SWEEP)))
    log = open(tmp_path / "driver2.log", "w")
    # started the way a background job is (`nohup dwc sweep ... &`): SIGINT ignored, in Ray's workers too
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        done = lambda d: (d / "result.json").exists() and json.loads((d / "result.json").read_text())["train_steps"] == steps
        # every run into its second leg's training loop first (it has logged a step past FIRST), so
        # the stop lands in the loops of the unfinished ones (what this part tests), not in a
        # worker that is still starting
        def training(d):
            if f"# from step {FIRST}" not in (d / "run/commands.txt").read_text():
                return False
            try:  # the last line may be half-written
                return json.loads((d / "run/metrics.jsonl").read_text().splitlines()[-1])["step"] > FIRST
            except (ValueError, KeyError, IndexError):
                return False
        wait_for(lambda: any(done(d) for d in runs.values()) and all(done(d) or training(d) for d in runs.values()),
                  300, "a finished run, the others training")
        # SIGTERM, dwc's polite stop (as Ctrl-C; a background job under a non-interactive shell ignores SIGINT)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 130, (tmp_path / "driver2.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    # the stopped runs' workers wind down on their own (a run that was about to end may still finish)
    wait_for(lambda: subprocess.run(["pgrep", "-f", "ray::Inverted"], capture_output=True).returncode != 0, 60,
              "the stopped workers to exit")
    finished_before = {k: (d / "result.json").stat().st_mtime_ns for k, d in runs.items() if done(d)}
    assert 0 < len(finished_before) < 4  # 2 runs at a time: the last ones had just started
    # where the stopped sweep stands: dwc report lists each unfinished run with the step of its
    # checkpoint (read without loading it), and the next start names them as it resumes them
    import torch
    at = {str(d.relative_to(out / "runs")): torch.load(d / "run/checkpoint.pt", weights_only=False)["step"]
          for k, d in runs.items() if k not in finished_before}
    assert all(FIRST < s < steps for s in at.values())
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
        assert r["train_cpu_s"] > 0  # its training's CPU time, every leg since step 0, however often it was stopped
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
options: {json.dumps(SMALL_SWEEP)}
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
