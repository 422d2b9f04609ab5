"""dwc.flows.stats (IQM, bootstrap CIs, paired comparisons, through rliable) and what dwc report and
scripts/bench_codesign.py make of them, on a sweep folder written by hand: CIs per config, the stated
baseline rule, pairing by seed, budget and precision, no CI below 5 seeds."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from dwc.flows import stats
from dwc.cli import main
from dwc.core.errors import UserError
from dwc.flows.report import report, unfinished_text
from dwc.flows.report_runs import unfinished
from dwc.core.rundir import record_checkpoint


def test_summarize_gives_the_iqm_and_a_ci_around_it():
    x = [1.0, 2.0, 3.0, 4.0, 5.0, 100.0]
    s = stats.summarize(x)
    assert s["iqm"] == pytest.approx(scipy.stats.trim_mean(x, 0.25)) and s["iqm"] == pytest.approx(3.5)
    assert (s["n"], s["median"], s["q1"], s["q3"], s["note"]) == (6, 3.5, 2.25, 4.75, None)
    assert s["ci_low"] <= s["iqm"] <= s["ci_high"] and s["ci_low"] < s["ci_high"]
    assert s["median_ci_low"] <= s["median"] <= s["median_ci_high"] and s["median_ci_low"] < s["median_ci_high"]
    y = np.random.default_rng(0).normal(1000, 200, 12)
    t = stats.summarize(y)
    assert t["iqm"] == pytest.approx(scipy.stats.trim_mean(y, 0.25)) and t["ci_low"] < t["iqm"] < t["ci_high"]
    # reproducible whatever numpy's global RNG holds, which is left as it was
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    assert stats.summarize(y) == t and (np.random.get_state()[1] == before).all()
    assert stats.fmt(t) == f"{t['iqm']:.1f} [{t['ci_low']:.1f}, {t['ci_high']:.1f}]"


def test_fewer_than_five_seeds_keep_the_point_estimates_without_ci():
    s = stats.summarize([3.0, 1.0])
    assert (s["iqm"], s["median"], s["n"]) == (2.0, 2.0, 2) and s["note"] == "n = 2, no CI"
    assert s["ci_low"] is s["ci_high"] is s["median_ci_low"] is s["median_ci_high"] is None
    assert stats.fmt(s) == "2.0 (n = 2, no CI)"
    for bad in ([], [1.0, float("nan")]):
        with pytest.raises(UserError):
            stats.summarize(bad)


def test_compare_paired_pairs_common_seeds_only():
    base = {s: float(v) for s, v in enumerate(np.random.default_rng(1).uniform(10, 20, 6), 1)}
    twice = {s: 2 * v for s, v in base.items()}
    c = stats.compare_paired({**twice, 9: 1e6}, {**base, 7: 0.0})  # seeds 9 and 7 have no partner
    assert c["seeds"] == [1, 2, 3, 4, 5, 6] and c["n"] == 6 and c["note"] is None
    # every paired resample is exactly 2x: the paired bootstrap's ratio CI collapses on 2
    assert c["ratio"] == 2.0 and (c["ratio_ci_low"], c["ratio_ci_high"]) == (2.0, 2.0)
    # 2x values in [20, 40) beat every baseline value in [10, 20)
    assert c["p_improvement"] == 1.0 and c["p_improvement_ci_low"] == 1.0
    noisy = stats.compare_paired({s: v + (-1) ** s * 3 for s, v in base.items()}, base)
    assert noisy["ratio_ci_low"] < noisy["ratio"] < noisy["ratio_ci_high"]
    assert 0 <= noisy["p_improvement_ci_low"] < noisy["p_improvement"] < noisy["p_improvement_ci_high"] <= 1

    few = stats.compare_paired({1: 3.0, 2: 4.0}, {1: 1.0, 2: 2.0, 3: 9.0})
    assert few["n"] == 2 and few["ratio"] == pytest.approx(3.5 / 1.5) and few["p_improvement"] == 1.0
    assert few["ratio_ci_low"] is None and few["p_improvement_ci_low"] is None and few["note"] == "n = 2, no CI"
    assert stats.compare_paired({1: 3.0}, {1: -1.0})["ratio"] is None  # no ratio of a non-positive return
    with pytest.raises(UserError, match="no seed in both"):
        stats.compare_paired({1: 1.0}, {2: 1.0})


def test_curve_band_is_the_median_and_a_ci_where_every_seed_has_a_value():
    y = np.random.default_rng(2).normal(size=(6, 20)).cumsum(axis=1)
    y[:, :2], y[0, 2] = np.nan, np.nan
    band = stats.curve_band(y)
    assert np.isnan(band["median"][:2]).all() and np.allclose(band["median"][3:], np.median(y[:, 3:], axis=0))
    assert np.isnan(band["ci_low"][:3]).all() and (band["ci_low"][3:] <= band["median"][3:]).all()
    assert (band["median"][3:] <= band["ci_high"][3:]).all() and (band["ci_low"][3:] < band["ci_high"][3:]).all()
    two = stats.curve_band(y[:2])
    assert two["ci_low"] is None and two["note"] == "n = 2, no CI"


@pytest.fixture
def few_resamples(monkeypatch):
    """The report tests check what goes where, not the intervals' precision: fewer bootstrap resamples."""
    monkeypatch.setattr(stats, "REPS", 400)
    monkeypatch.setattr(stats, "POI_REPS", 200)


# A sweep as dwc sweep lays it out (dwc/flows/sweep.py): spec order zeta-ref, alpha, zeta-bf16, few (not
# alphabetical); alpha (another width) is exactly twice zeta-ref on every seed; zeta-bf16 is zeta-ref at
# another precision, so it is compared with zeta-ref but not with alpha (two treatments at once); few
# has 2 seeds, one trained for another budget, which does not pair.
STEPS = 1000
BASE = {1: 100.0, 2: 130.0, 3: 90.0, 4: 150.0, 5: 120.0}
RUNS = {"zeta-ref": {s: (v, "float32", STEPS, 256) for s, v in BASE.items()},
        "alpha": {s: (2 * v, "float32", STEPS, 128) for s, v in BASE.items()},
        "zeta-bf16": {s: (v - 10, "bfloat16", STEPS, 256) for s, v in BASE.items()},
        "few": {1: (80.0, "float32", STEPS, 64), 2: (70.0, "float32", STEPS // 2, 64)}}


def write_sweep(out: Path) -> Path:
    runs = {}
    for seed in range(1, 6):  # seed-major, configs in the spec's order, as Spec.jobs
        for config, by_seed in RUNS.items():
            rid, rdir = f"T-v0/{config}/seed{seed}", f"runs/T-v0/{config}/seed{seed}"
            runs[rid] = {"dir": rdir, "task": "T-v0", "config": config, "seed": seed, "state": "todo"}
            if seed not in by_seed:
                continue
            ret, precision, steps, width = by_seed[seed]
            d = out / rdir
            (d / "run").mkdir(parents=True)
            (d / "run" / "config.json").write_text(json.dumps({"precision": precision, "seed": seed, "steps": steps,
                                                                   "actor": {"width": width}}))
            (d / "run" / "metrics.jsonl").write_text("".join(
                json.dumps({"step": k * steps // 4, "charts/episodic_return": ret * k / 4}) + "\n" for k in range(1, 5)))
            (d / "result.json").write_text(json.dumps({
                "id": rid, "task": "T-v0", "config": config, "seed": seed, "policy": "dwc", "train_steps": steps,
                "episodes": 2, "float_return": ret, "float_returns": [ret, ret], "frozen_return": ret - 1.0,
                "frozen_returns": [ret - 1.0] * 2, "hardware": None, "rtl_return": None, "rtl_equals_frozen": None,
                "luts": None, "lut4_sites": None, "fmax_mhz": None, "ir_luts": 64, "comparators": 8,
                "latency_cycles": 11 if config == "alpha" else None,
                "target": ("ecp5-45k" if seed == 5 else "ecp5-25k") if config == "alpha" else None}))
            runs[rid]["state"] = "finished"
    (out / "sweep.json").write_text(json.dumps({"spec": "spec.yaml", "out": str(out), "runs": runs}))
    return out


def test_report_gives_cis_and_compares_with_the_stated_baseline(tmp_path, few_resamples):
    sweep = write_sweep(tmp_path / "s")
    rep = report(sweep)
    rows = {r["config"]: r for r in json.loads((sweep / "report.json").read_text())["rows"]}
    assert list(rows) == ["zeta-ref", "alpha", "zeta-bf16", "few"]
    for config, r in rows.items():
        for key in ("float_return", "frozen_return"):
            assert {"iqm", "ci_low", "ci_high", "median", "q1", "q3", "median_ci_low", "median_ci_high"} <= set(r[key])
    ref = rows["zeta-ref"]["float_return"]
    assert ref["iqm"] == pytest.approx(scipy.stats.trim_mean(list(BASE.values()), 0.25))
    assert ref["ci_low"] < ref["iqm"] < ref["ci_high"]
    assert rows["few"]["float_return"]["ci_low"] is None and rows["few"]["float_return"]["note"] == "n = 2, no CI"

    # each config against the earlier comparable ones, in the spec's (not alphabetical) order
    assert "every config before it in the spec" in rep["baseline_rule"] and rep["baselines"] is None
    comps = {(c["config"], c["baseline"], c["figure"]): c for c in rep["comparisons"]}
    pairs = {(c, b) for c, b, _ in comps}
    assert pairs == {("alpha", "zeta-ref"), ("zeta-bf16", "zeta-ref"), ("few", "zeta-ref"), ("few", "alpha")}
    alpha = comps["alpha", "zeta-ref", "float_return"]
    assert alpha["seeds"] == [1, 2, 3, 4, 5] and alpha["n"] == 5
    assert (alpha["ratio"], alpha["ratio_ci_low"], alpha["ratio_ci_high"]) == (2.0, 2.0, 2.0)
    assert alpha["p_improvement"] == 1.0 and alpha["train_steps"] == [STEPS] and alpha["precision"] == ["float32"]
    bf16 = comps["zeta-bf16", "zeta-ref", "float_return"]  # precision alone differs: compared
    assert bf16["n"] == 5 and bf16["ratio"] < 1 and bf16["precision"] == ["bfloat16"]
    # another budget: not paired, and said so
    few = comps["few", "zeta-ref", "float_return"]
    assert few["n"] == 1 and few["seeds"] == [1] and few["ratio_ci_low"] is None and few["note"] == "n = 1, no CI"
    assert few["unpaired"] == [f"seed 2: {STEPS // 2} steps, the baseline {STEPS}"]
    md = (sweep / "report.md").read_text()
    assert rep["command"] == f"dwc report {sweep}" and f"Written by `dwc report {sweep}`." in md
    assert "n = 2, no CI" in md and "n = 1, no CI" in md and f"seed 2: {STEPS // 2} steps, the baseline {STEPS}" in md
    assert "| alpha | zeta-ref | float |" in md and "2.000 [2.000, 2.000]" in md
    # the circuits' latency, and each device a family target placed them on
    assert rows["alpha"]["targets"] == ["ecp5-25k", "ecp5-45k"] and rows["zeta-ref"]["targets"] == []
    assert rows["alpha"]["latency_cycles"]["median"] == 11
    assert "| 11 [11, 11] | ecp5-25k/ecp5-45k |" in md
    # every finished run by itself, grouped in the spec's order, by seed: the values the rows summarise
    runs = rep["runs"]
    assert [(r["config"], r["seed"]) for r in runs] == [(c, s) for c in RUNS for s in sorted(RUNS[c])]
    assert all(r["float_return"] == RUNS[r["config"]][r["seed"]][0] for r in runs)
    assert json.loads((sweep / "report.json").read_text())["runs"] == runs
    assert "| T-v0 | alpha | 5 | 1000 | 240.0 | 239.0 | - | 64 | 8 | - | - | ecp5-45k |" in md
    assert (sweep / "curves_T-v0.png").stat().st_size > 1000


def test_report_says_where_unfinished_runs_stand(tmp_path, capsys, few_resamples, monkeypatch):
    import types
    monkeypatch.setattr("dwc.train.envs.check_env_id", lambda env_id: types.SimpleNamespace(close=lambda: None))  # T-v0
    sweep = write_sweep(tmp_path / "s")  # few has seeds 1-2 only: seeds 3-5 are to do
    run = sweep / "runs/T-v0/few/seed3/run"  # seed 3 started: a checkpoint at step 500, then logged to 600
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"precision": "float32", "seed": 3, "steps": STEPS}))
    (run / "checkpoint.pt").write_bytes(b"a checkpoint")
    record_checkpoint(run, 500)
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "charts/SPS": 20.0}) + "\n" for s in (500, 600)))
    with open(sweep / "runs/T-v0/few/seed1/run/metrics.jsonl", "a") as f:  # a finished run of its config, at 10/s
        f.write(json.dumps({"step": STEPS, "charts/SPS": 10.0}) + "\n")
    (sweep / "spec.yaml").write_text(f"tasks: [T-v0]\nseeds: 5\nsteps: {STEPS}\noptions: {{learning_starts: 100}}\nconfigs: "
                                     "{zeta-ref: {}, alpha: {}, zeta-bf16: {}, few: {}}\n")
    state = json.loads((sweep / "sweep.json").read_text())
    state["runs"]["T-v0/few/seed4"].update(state="failed", error="RuntimeError: boom")
    (sweep / "sweep.json").write_text(json.dumps(state))
    assert main(["report", str(sweep)]) == 0
    out = capsys.readouterr().out
    rows = {r["id"]: r for r in json.loads((sweep / "report.json").read_text())["unfinished"]}
    assert list(rows) == ["T-v0/few/seed3", "T-v0/few/seed4", "T-v0/few/seed5"]
    assert (rows["T-v0/few/seed3"]["state"], rows["T-v0/few/seed3"]["checkpoint_step"],
            rows["T-v0/few/seed3"]["logged_step"], rows["T-v0/few/seed3"]["steps"]) == ("started", 500, 600, STEPS)
    assert rows["T-v0/few/seed4"]["state"] == "failed" and rows["T-v0/few/seed4"]["error"] == "RuntimeError: boom"
    assert rows["T-v0/few/seed5"]["state"] == "not started"
    assert "Not finished: 3 of 20 runs" in out and "T-v0/few/seed3  started" in out and "500" in out
    assert "failed: RuntimeError: boom" in out and "Not started in this folder (1): T-v0/few/seed5" in out
    md = (sweep / "report.md").read_text()
    assert "| T-v0/few/seed3 | started | 500 | 600 | 1,000 |" in md
    # training left: seed 3 its 400 steps at its own 20/s, seeds 4 and 5 all 1000 at the median of its config's 10 and 20
    left = json.loads((sweep / "report.json").read_text())["training_left"]
    assert left == {"seconds_on_one_worker": round(400 / 20 + 2 * STEPS / 15), "runs_without_rate": 0}
    assert "Training left: about 0.0 hours on one worker" in out
    # a newer checkpoint that its checkpoint.json does not describe (a kill between the two writes): there, step unknown
    (run / "checkpoint.pt").write_bytes(b"a later checkpoint")
    assert unfinished(sweep, state)[0]["checkpoint_step"] is None
    assert "| T-v0/few/seed3 | started | yes | 600 | 1,000 |" in unfinished_text(unfinished(sweep, state), 20, True)


def test_report_baseline_named_on_the_command_line(tmp_path, capsys, few_resamples):
    sweep = write_sweep(tmp_path / "s")
    assert main(["report", str(sweep), "--baseline", "alpha", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["baselines"] == ["alpha"] and rep["command"] == f"dwc report {sweep} --baseline alpha"
    comps = {(c["config"], c["figure"]): c for c in rep["comparisons"]}
    c = comps["zeta-ref", "float_return"]
    assert c["baseline"] == "alpha" and (c["ratio"], c["ratio_ci_low"], c["ratio_ci_high"]) == (0.5, 0.5, 0.5)
    assert c["p_improvement"] == 0.0
    # asked for, a comparison of two treatments at once is refused, with the reason
    assert comps["zeta-bf16", None]["n"] == 0 and "two treatments" in comps["zeta-bf16", None]["note"]
    assert main(["report", str(sweep), "--baseline", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--baseline 'nope'" in err and "zeta-ref, alpha, zeta-bf16, few" in err and "\n" not in err


def test_codesign_compares_with_the_lut6_row_the_rule_picks(few_resamples):
    """bench_codesign: a LUT4 row against LUT6 rows paired by seed, budget and precision: the twin
    config first, else the most paired seeds, then the name; rows of another precision never."""
    path = Path(__file__).parent.parent / "scripts" / "bench_codesign.py"
    spec = importlib.util.spec_from_file_location("bench_codesign", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def row(config, values, precision="float32", steps=300):
        runs = [{"seed": s, "train_steps": steps, "precision": precision, "frozen_return": v} for s, v in values.items()]
        return {"task": "Hopper-v5", "config": config, "arity": int(config[3]), "train_steps": steps,
                "frozen": float(np.median(list(values.values()))), "luts": 100 if config[3] == "4" else 400,
                "lut4_sites": None, "fmax_mhz": 200.0, "seeds": len(values), "comparators": 8, "latency_cycles": 3,
                "runs": runs}
    five = {s: 1000.0 + 10 * s for s in range(1, 6)}
    rows = [row("lut6-w64 (b)", {1: 900.0, 2: 950.0}), row("lut6-w64 (a)", {1: 900.0, 3: 950.0}),
            row("lut6-w32", {s: v / 0.9 for s, v in five.items()}, precision="bfloat16"),
            row("lut4-w32", five), row("lut4-w16", {1: 500.0, 2: 600.0, 9: 700.0})]
    bench.compare(rows)
    by = {r["config"]: r for r in rows}
    # its twin lut6-w32 trained at another precision: not paired; two rows pair 2 seeds each -> by name
    assert by["lut4-w32"]["vs"] == "lut6-w64 (a)" and by["lut4-w32"]["paired_seeds"] == [1, 3]
    assert by["lut4-w32"]["note"] == "n = 2, no CI" and by["lut4-w32"]["return_ratio_ci_low"] is None
    assert by["lut4-w16"]["vs"] == "lut6-w64 (b)" and by["lut4-w16"]["n"] == 2  # seeds 1, 2 against 1, 3
    rows[2] = row("lut6-w32", {s: v / 0.9 for s, v in five.items()})  # the twin at the same precision wins
    bench.compare(rows)
    r = rows[3]
    assert r["vs"] == "lut6-w32" and r["n"] == 5 and r["return_ratio"] == pytest.approx(0.9)
    assert r["return_ratio_ci_low"] == pytest.approx(0.9) and r["return_ratio_ci_high"] == pytest.approx(0.9)
    assert r["p_improvement"] < 0.5 and r["meets_target"] is False
    text = bench.table(rows)
    assert "0.90 [0.90, 0.90]" in text and "n = 2, no CI" in text and "ties broken by config name" in text


def test_codesign_reference_runs_of_one_config_become_one_paired_row(few_resamples):
    """bench_codesign --reference with the seeds of a sweep config: one row per circuit, budget and
    precision holding every seed's run, so the LUT4 circuit is compared with the LUT6 one over the
    paired seeds (with a CI from 5 of them)."""
    path = Path(__file__).parent.parent / "scripts" / "bench_codesign.py"
    spec = importlib.util.spec_from_file_location("bench_codesign", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def ref(config, arity, seed, frozen, luts):
        return {"task": "Hopper-v5", "config": config, "arity": arity, "train_steps": 100, "frozen": frozen,
                "luts": luts, "lut4_sites": 3 * luts, "fmax_mhz": 220.0 + seed, "latency_cycles": 10, "comparators": 9,
                "ir_luts": luts, "seeds": 1, "reference": True, "rtl_equals_frozen": True,
                "runs": [{"seed": seed, "train_steps": 100, "precision": "float32", "frozen_return": frozen}]}
    rows = bench.merge_seeds([ref("lut4-w256 (lut4)", 4, s, 1000.0 + s, 680 + s) for s in range(1, 6)]
                             + [ref("lut6-w256 (dwc)", 6, s, 2000.0 + 2 * s, 2500) for s in range(5, 0, -1)])
    assert [(r["config"], r["seeds"]) for r in rows] == [("lut4-w256 (lut4)", 5), ("lut6-w256 (dwc)", 5)]
    lut4 = rows[0]
    assert [x["seed"] for x in lut4["runs"]] == [1, 2, 3, 4, 5] and lut4["frozen"] == 1003.0 and lut4["luts"] == 683
    bench.compare(rows)
    assert lut4["vs"] == "lut6-w256 (dwc)" and lut4["n"] == 5 and lut4["paired_seeds"] == [1, 2, 3, 4, 5]
    assert lut4["return_ratio_ci_low"] is not None and lut4["return_ratio"] == pytest.approx(1003.0 / 2006.0)
    assert lut4["meets_target"] is False  # half the return


def test_the_training_time_of_a_run_from_before_dwc_recorded_it_is_estimated(tmp_path):
    """From the rates its metrics logged: each rate times the steps since the record before it (a rate of 0,
    logged before any was measured, adds nothing), shared among the seeds a leg trained together."""
    from dwc.core.rundir import estimated_training_seconds
    recs = [{"step": 1000, "charts/SPS": 0.0}, {"step": 2000, "charts/SPS": 100.0},
            {"step": 2500, "charts/episodic_return": 1.0}, {"step": 4000, "charts/SPS": 20.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (tmp_path / "legs.json").write_text(json.dumps([{"from_step": 0}, {"from_step": 3000, "seeds_together": [1, 2]}]))
    assert estimated_training_seconds(tmp_path) == pytest.approx(1000 / 100 + 2000 / 20 / 2)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 10, "charts/episodic_return": 1.0}) + "\n")
    assert estimated_training_seconds(tmp_path) is None
