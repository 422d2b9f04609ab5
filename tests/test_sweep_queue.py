"""The order a sweep queues its runs in (started runs first, --longest-first) and the time it says is left,
each run at its own rate."""
import json

import pytest

from dwc.cli import build_parser
from dwc.flows.sweep_spec import load_spec
from helpers import write_spec


def test_runs_started_earlier_are_queued_first(tmp_path):
    from dwc.core.rundir import CHECKPOINT
    from dwc.flows.sweep import _groups
    spec = load_spec(write_spec(tmp_path / "s.yaml", """
tasks: [InvertedPendulum-v5, Hopper-v5]
seeds: 2
steps: 2000
options: {learning_starts: 1000}
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
