"""The shipped sweep spec of the reference paper's protocol (configs/paper.yaml, `dwc sweep paper`):
it asks for what the paper did, its scale_down section changes only budgets and sizes, and the
scaled-down sweep runs end to end (train, frozen evaluation, compile, Verilator) with dwc report's
table beside the published figures."""
import json
import time

import pytest

from dwc.core import published
from dwc.cli import main
from dwc.core.config import TrainConfig
from dwc.core.errors import UserError
from dwc.flows.sweep_spec import load_spec, shipped_specs

TASKS = ["Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Humanoid-v5", "Walker2d-v5"]
# the paper's SAC (dwc-reference: "Training protocol"); q_hidden = its critics, 2 x 256
PAPER_SAC = {"buffer_size": 1_000_000, "gamma": 0.99, "tau": 0.005, "batch_size": 256, "learning_starts": 5000,
             "actor_lr": 3e-4, "adam_eps": 1e-5, "q_lr": 1e-3, "alpha_lr": 1e-3, "autotune": True,
             "policy_frequency": 2, "q_hidden": 256, "utd": 1.0}
PAPER_DWC = {"layers": 2, "width": 1024, "last_width": 0, "lut_inputs": 6, "thermo_bits": 63, "wiring": "learnable",
             "tau": 1e-3}


def test_paper_spec_is_the_published_protocol():
    spec = load_spec("paper")  # the shipped spec, by name
    assert spec.path == shipped_specs()["paper"] and spec.path.parent.name == "configs"
    assert spec.tasks == TASKS and spec.seeds == list(range(1, 11)) and list(spec.configs) == ["mlp", "qmlp", "dwc"]
    jobs = spec.jobs(spec.path.parent / "unused")
    assert len(jobs) == 5 * 3 * 10
    for j in jobs:
        c = j.cfg
        assert (c.algo, c.steps, c.num_envs, c.precision) == ("sac", 1_000_000, 1, "float32")
        assert {k: getattr(c.sac, k) for k in PAPER_SAC} == PAPER_SAC, j.id
    dwc = next(j for j in jobs if j.config == "dwc").cfg.actor
    assert {k: getattr(dwc, k) for k in PAPER_DWC} == PAPER_DWC
    assert next(j for j in jobs if j.config == "mlp").cfg.actor.hidden == 256
    hw = {j.config: j.hardware for j in jobs if j.seed == 1 and j.task == "Hopper-v5"}
    assert hw["mlp"] is None and hw["qmlp"] is None and hw["dwc"]["target"] == "xc7" and hw["dwc"]["pipeline"] == 0
    assert hw["dwc"]["episodes"] is None  # the hardware return over every evaluation episode
    assert set(published.RETURNS) == {t.split("-v")[0] for t in TASKS}


def test_scale_down_changes_budgets_and_sizes_only():
    """--scale-down is the same spec with its scale_down section over it: a subset of the tasks, the
    same configs and hardware stages, every other option as in the full spec."""
    full, down = load_spec("paper"), load_spec("paper", scale_down=True)
    assert set(down.tasks) < set(full.tasks) and list(down.configs) == list(full.configs) and down.scaled_down
    import yaml
    changed = set(yaml.safe_load(full.path.read_text())["scale_down"]["options"]) | {"steps", "seed"}
    for f, d in zip(full.jobs(full.path.parent), down.jobs(full.path.parent)):
        if (f.task, f.seed) != (d.task, d.seed):
            continue
        fc, dc = f.cfg.to_dict(), d.cfg.to_dict()
        flat = lambda c: {**{k: v for k, v in c.items() if not isinstance(v, dict)},
                          **{k: v for s in ("actor", "sac") for k, v in c[s].items()}}
        diff = {k for k, v in flat(fc).items() if flat(dc)[k] != v}
        assert diff <= changed, (f.id, diff - changed)
        assert (f.hardware is None) == (d.hardware is None)
    assert [d.hardware for d in down.jobs(full.path.parent) if d.hardware] and \
        all(d.hardware["target"] == "none" for d in down.jobs(full.path.parent) if d.hardware)


def test_scale_down_without_a_section_is_one_line(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {width: 8}}\n")
    with pytest.raises(UserError, match="no scale_down section"):
        load_spec(spec, scale_down=True)
    spec.write_text("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {width: 8}}\nscale_down: {tasks: [Hopper-v5]}\n")
    with pytest.raises(UserError, match="Hopper-v5 not in the spec's tasks"):
        load_spec(spec, scale_down=True)


def test_a_config_sets_its_own_hardware_stage(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs:\n  a: {width: 8}\n"
                    "  b: {width: 8, hardware: {target: none, episodes: 2}}\n  c: {width: 8, hardware: false}\n"
                    "hardware: {target: xc7, pipeline: 1}\n")
    hw = {j.config: j.hardware for j in load_spec(spec).jobs(tmp_path)}
    assert hw["a"]["target"] == "xc7" and hw["c"] is None
    assert (hw["b"]["target"], hw["b"]["episodes"], hw["b"]["pipeline"]) == ("none", 2, 1)


@pytest.mark.slow
@pytest.mark.ci
def test_paper_spec_scaled_down_end_to_end(tmp_path, capsys):
    """dwc sweep paper --scale-down, then dwc report: every run trains, every circuit's Verilog returns
    what its frozen policy returns, and the report sets each row beside the published median with
    the budget ratio (n = 1: no CI)."""
    out = tmp_path / "paper"
    t0 = time.monotonic()
    assert main(["sweep", "paper", "--scale-down", "--out", str(out), "--no-progress"]) == 0
    swept = time.monotonic() - t0
    down = load_spec("paper", scale_down=True)
    steps, seeds = down.jobs(out)[0].cfg.steps, len(down.seeds)
    for task in down.tasks:
        for config in down.configs:
            r = json.loads((out / "runs" / task / config / "seed1" / "result.json").read_text())
            assert r["train_steps"] == steps and r["float_return"] is not None
            if config == "dwc":  # compiled and run closed loop in Verilator
                assert r["rtl_equals_frozen"] is True and r["rtl_return"] == pytest.approx(r["frozen_returns"][0])
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Against the published results" in text and "n = 1, no CI" in text and published.SOURCE in text
    assert main(["report", str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["paper"]["rows"]
    assert [(p["task"], p["config"]) for p in rows] == [(t, c) for t in down.tasks for c in down.configs]
    for p in rows:
        assert p["published_median"] == published.RETURNS[p["task"].split("-v")[0]][p["policy"]]
        assert p["budget_ratio"] == pytest.approx(steps * seeds / 1e7) and p["note"] == "n = 1, no CI"
        assert p["figure"] == ("float" if p["policy"] == "mlp" else "frozen")
        assert p["ratio_to_published"] == pytest.approx(p["median"] / p["published_median"])
    print(f"scaled-down paper sweep: {swept:.0f} s, with the report {time.monotonic() - t0:.0f} s")


def test_report_sets_each_row_beside_the_published_median(tmp_path, monkeypatch):
    """From 5 seeds the medians and IQMs get CIs; a config whose runs started but none finished has
    the published figure and dashes; the budget is steps x finished seeds against 1M x 10."""
    from dwc.flows import stats
    from dwc.flows.report import report, text
    monkeypatch.setattr(stats, "REPS", 200)
    monkeypatch.setattr(stats, "POI_REPS", 100)
    returns = {1: 2900.0, 2: 3100.0, 3: 3300.0, 4: 2500.0, 5: 3500.0}
    runs = {}
    for seed in returns:
        for config in ("dwc", "mlp"):
            rid = f"Hopper-v5/{config}/seed{seed}"
            runs[rid] = {"dir": f"runs/{rid}", "task": "Hopper-v5", "config": config, "seed": seed, "state": "todo"}
            d = tmp_path / "runs" / rid
            (d / "run").mkdir(parents=True)
            cfg = TrainConfig(env="Hopper-v5", seed=seed, steps=200_000)
            cfg.actor.policy = config
            (d / "run" / "config.json").write_text(json.dumps(cfg.to_dict()))
            if config == "mlp":  # started, not finished
                continue
            (d / "run" / "metrics.jsonl").write_text(json.dumps({"step": 100, "charts/episodic_return": 1.0}) + "\n")
            r = returns[seed]
            (d / "result.json").write_text(json.dumps({
                "id": rid, "task": "Hopper-v5", "config": config, "seed": seed, "policy": "dwc", "train_steps": 200_000,
                "episodes": 1, "float_return": r + 1, "float_returns": [r + 1], "frozen_return": r,
                "frozen_returns": [r], "hardware": None, "rtl_return": None, "rtl_equals_frozen": None}))
            runs[rid]["state"] = "finished"
    (tmp_path / "sweep.json").write_text(json.dumps({"spec": "s.yaml", "out": str(tmp_path), "runs": runs}))
    rep = report(tmp_path)
    dwc, mlp = rep["paper"]["rows"]
    assert (dwc["config"], dwc["model"], dwc["figure"], dwc["n"]) == ("dwc", "2 x 1024 LUT6", "frozen", 5)
    assert dwc["median"] == 3100.0 and dwc["median_ci_low"] <= 3100.0 <= dwc["median_ci_high"]
    assert dwc["ci_low"] <= dwc["iqm"] <= dwc["ci_high"] and dwc["note"] is None
    assert dwc["published_median"] == 3120 and dwc["ratio_to_published"] == pytest.approx(3100 / 3120)
    assert dwc["budget_ratio"] == pytest.approx(200_000 * 5 / 1e7)
    assert mlp["n"] is None and mlp["published_median"] == 2797 and mlp["budget_ratio"] is None
    out = text(rep)
    line = next(l for l in out.splitlines() if l.startswith("Hopper-v5  dwc") and "3120" in l)
    assert "3100.0 [" in line and "0.99" in line and "200,000 x 5" in line and "0.10" in line
    assert next(l for l in out.splitlines() if l.startswith("Hopper-v5  mlp") and "2797" in l).count("- x 0/5")
