"""What a sweep yields: the aggregation and curves of dwc report, the hardware stage's verified circuits,
and dwc export: the shipped (median) seed and the slim archive that every reader takes as the sweep."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dwc.cli import main
from dwc.flows.report import aggregate, curve
from dwc.flows.stats import quartiles
from helpers import SMALL_SWEEP, write_spec


def torch_load(path: Path) -> dict:
    import torch
    return torch.load(path, weights_only=False)


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


def test_curve_bins_episodes_on_the_grid(tmp_path):
    m = tmp_path / "metrics.jsonl"
    m.write_text("".join(json.dumps(r) + "\n" for r in [
        {"step": 5, "losses/q": 1.0}, {"step": 10, "charts/episodic_return": 2.0},
        {"step": 12, "charts/episodic_return": 4.0}, {"step": 31, "charts/episodic_return": 9.0}]))
    y = curve(m, np.array([5.0, 15.0, 25.0, 35.0]))
    assert np.isnan(y[0]) and list(y[1:]) == [3.0, 3.0, 9.0]


def test_the_shipped_seed_is_the_median_by_deployed_return():
    from dwc.flows.export import median_run
    runs = [{"seed": s, "float_return": f, "frozen_return": z}
            for s, f, z in ((1, 900.0, 100.0), (2, 100.0, 300.0), (3, 500.0, 200.0))]
    assert median_run(runs)["seed"] == 3  # by the frozen circuit's return, not the float policy's
    assert median_run(runs[:2])["seed"] == 1  # even count: the lower middle one, never the best
    mlp = [{"seed": s, "float_return": f, "frozen_return": None} for s, f in ((1, 5.0), (2, 7.0), (3, 6.0), (4, 6.0))]
    assert median_run(mlp)["seed"] == 3  # float returns where there is no circuit; a tie goes to the lower seed


@pytest.mark.slow
# not in CI: test_paper_spec's scaled-down sweep runs its circuits in Verilator through the same stage
def test_sweep_hardware_stage_verifies_each_circuit(tmp_path):
    """The hardware section: each run is compiled and run closed loop in Verilator; the report's
    hardware return is the Verilog's and equals the frozen policy's on the same episodes."""
    spec = write_spec(tmp_path / "hw.yaml", f"""
tasks: [InvertedPendulum-v5]
seeds: [1]
steps: 600
options: {json.dumps(SMALL_SWEEP)}
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
    assert main(["eval", str(ship), "--frozen", "--eval-episodes", "2", "--out", str(tmp_path / "e.json"), "--no-progress"]) == 0
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
