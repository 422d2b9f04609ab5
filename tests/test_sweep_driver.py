"""The dwc sweep driver: its runs on a running Ray cluster or a local engine of its own (whose workers import
this dwc), nothing written when no engine starts, one driver per sweep folder, and --tasks/--seeds/--configs
starting part of a spec now."""
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dwc.cli import main
from dwc.core.errors import UserError
from dwc.flows.sweep_spec import load_spec
from helpers import SMALL_SWEEP, wait_for, write_spec


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
        wait_for(lambda: "Ray runtime started" in (tmp_path / "head.log").read_text(), 120, "the Ray head")
        spec = write_spec(tmp_path / "one.yaml", f"""
tasks: [InvertedPendulum-v5]
seeds: [3]
steps: 600
options: {json.dumps(SMALL_SWEEP)}
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
