"""Codesign: training for a target's LUT arity and within LUT / comparator budgets that the frozen,
optimised circuit meets."""
import json

import numpy as np
import pytest
import torch

from dwc.cli import main
from dwc.core.config import config_from_options
from dwc.core.errors import UserError
from dwc.models.actors import ActorConfig, build_actor, spread_thresholds
from dwc.models.lut import LUTLayer
from helpers import assert_one_line_error, run_cli



def test_limit_sources_keeps_the_most_read_and_moves_the_rest_to_their_next_best():
    torch.manual_seed(0)
    layer = LUTLayer(12, 10, n=3, source_pool=torch.arange(12))
    w = layer.wiring_weights.detach()
    before = layer.wiring_indices().flatten().clone()
    reads = torch.bincount(before, minlength=12)
    layer.limit_sources_(4)
    kept = torch.nonzero(layer.allowed).flatten()
    assert len(kept) == 4
    assert reads[kept].min() >= reads[~layer.allowed].max()  # the most-read sources stay
    after = layer.wiring_indices().flatten()
    assert set(after.tolist()) <= set(kept.tolist())
    for s in range(30):  # every slot reads its best allowed candidate; slots on kept sources do not move
        assert after[s] == kept[w[kept, s].argmax()]
        if layer.allowed[before[s]]:
            assert after[s] == before[s]
    x = (torch.rand(5, 12) > 0.5).float()
    ref = LUTLayer(12, 10, n=3, wiring="random")  # the same circuit with the wiring written out
    ref.tables.data.copy_(layer.tables.data)
    ref.fixed_wiring.copy_(after)
    assert torch.equal(layer(x), ref(x))
    # gradients still reach every wiring score and only allowed sources may win later
    layer(x).sum().backward()
    assert layer.wiring_weights.grad is not None


def test_comparator_budget_schedule_and_random_pool():
    cfg = ActorConfig(width=64, lut_inputs=4, thermo_bits=15, max_comparators=20)
    a = build_actor(cfg, 11, 3, -np.ones(3), np.ones(3))
    assert a.circuit_stats()["comparators"] > 20
    a.apply_budget_(0.1)  # before 20% of training: all thresholds allowed
    assert int(a.luts[0].allowed.sum()) == 11 * 15
    a.apply_budget_(0.4)
    mid = int(a.luts[0].allowed.sum())
    assert 20 < mid < 165
    a.apply_budget_(0.6)
    assert int(a.luts[0].allowed.sum()) == 20 and a.circuit_stats()["comparators"] <= 20
    pool = spread_thresholds(11, 15, 20)
    assert len(pool) == 20 == len(set(pool.tolist()))
    assert sorted(torch.bincount(pool // 15, minlength=11).tolist()) == [1] * 2 + [2] * 9
    r = build_actor(ActorConfig(width=64, lut_inputs=4, thermo_bits=15, max_comparators=20, wiring="random"),
                    11, 3, -np.ones(3), np.ones(3))
    assert set(r.luts[0].wiring_indices().flatten().tolist()) == set(pool.tolist())


def test_target_sets_the_native_lut_and_max_luts_sizes_the_layers():
    c = config_from_options({"target": "ecp5-25k", "max_luts": 600})
    assert (c.target, c.actor.lut_inputs, c.actor.width) == ("ecp5", 4, 300)
    assert config_from_options({"target": "xc7"}).actor.lut_inputs == 6
    assert config_from_options({"target": "ice40", "layers": 3, "max_luts": 100}).actor.width == 33
    # a narrow last layer leaves the rest of the budget to the layers before it
    a = config_from_options({"max_luts": 500, "last_width": 128}).actor
    assert (a.width, a.layer_widths()) == (372, [372, 128])
    for opts, msg in [({"target": "zynq"}, "choose from"), ({"target": "ecp5", "lut_inputs": 6}, "4-input"),
                      ({"max_luts": 100, "width": 256}, "exceed"), ({"policy": "gates", "max_comparators": 8}, "dwc"),
                      ({"max_luts": 300, "width": 200, "last_width": 128}, "200 \\+ 128 = 328 LUTs exceed"),
                      ({"last_width": -1}, "--last-width")]:
        with pytest.raises(UserError, match=msg):
            config_from_options(opts)


# The fabric's logic-cell LUT per family, written out (not read from dwc.core.targets) so a wrong entry there
# fails here. GateMate's CPE is no LUT4 but a tree of 2-input LUTs; half a CPE (yosys' CC_L2T4) is a
# LUT2 of two LUT2s over 4 inputs, the nearest LUT size.
FABRIC_LUT = {"ecp5": 4, "ice40": 4, "gowin": 4, "machxo2": 4, "gatemate": 4, "nexus": 4, "xc7": 6}


def test_every_family_and_device_trains_its_fabric_lut():
    from dwc.core.targets import FAMILIES
    assert set(FAMILIES) == set(FABRIC_LUT)  # a new family is added here too, with its LUT size
    for family, f in FAMILIES.items():
        for name in (family, *f.devices):  # gowin-9k, machxo3-6900 (a MachXO2-family device), gatemate-a1, ...
            c = config_from_options({"target": name})
            assert (c.target, c.actor.lut_inputs) == (family, FABRIC_LUT[family]), name


@pytest.mark.slow  # 190 s at a load of ~6 on 2 cores
def test_build_for_gatemate_trains_and_compiles_lut4(tmp_path, capsys):
    """dwc build --lut-family gatemate with no --lut-inputs (whose default is 6): a short real run on
    InvertedPendulum-v5, frozen, compiled and verified, is a LUT4 circuit marked with its family."""
    out, family = tmp_path / "b", "gatemate"
    assert main(["build", "--env", "InvertedPendulum-v5", "--lut-family", family, "--steps", "300",
                 "--learning-starts", "100", "--width", "32", "--thermo-bits", "7", "--eval-episodes", "1",
                 "--checkpoint-every", "300", "--target", "none", "--verify-episodes", "1", "--out", str(out),
                 "--no-progress", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["stages_run"] == ["train", "compile", "verify"] and s["rtl_equals_frozen"]
    config = json.loads((out / "run" / "config.json").read_text())
    assert (config["target"], config["actor"]["lut_inputs"]) == (family, 4)
    graph = json.loads((out / "circuit" / "graph.json").read_text())
    assert {len(lut["inputs"]) for layer in graph["layers"] for lut in layer} <= {1, 2, 3, 4}
    assert max(len(lut["inputs"]) for layer in graph["layers"] for lut in layer) == 4
    assert graph["meta"]["target"] == family


def test_cli_budget_errors(tmp_path):
    assert_one_line_error(run_cli("train", "--lut-family", "zynq", "--out", str(tmp_path / "a")), "--lut-family")
    assert_one_line_error(run_cli("train", "--lut-family", "ecp5", "--lut-inputs", "6", "--out", str(tmp_path / "b")),
                          "4-input")
    assert_one_line_error(run_cli("train", "--max-luts", "100", "--width", "256", "--out", str(tmp_path / "c")),
                          "--max-luts")
    assert_one_line_error(run_cli("train", "--env", "Hopper-v5", "--width", "64", "--last-width", "2", "--out",
                                  str(tmp_path / "d")), "fewer than the 3 actions")


@pytest.mark.parametrize("algo", ["sac", "ppo"])
def test_trained_circuit_meets_its_budgets_after_freezing(tmp_path, algo):
    """A real short run on Hopper-v5 (11 x 15 = 165 thresholds) for ECP5 with budgets of 120 LUTs and
    24 comparators: the compiled circuit has 4-input LUTs and meets both; the comparators the
    first layer read fell from above the budget to within it during training."""
    run, build = tmp_path / "run", tmp_path / "build"
    args = ["train", "--env", "Hopper-v5", "--algo", algo, "--lut-family", "ecp5", "--max-luts", "120",
            "--max-comparators", "24", "--thermo-bits", "15", "--steps", "2000", "--checkpoint-every", "1000",
            "--eval-episodes", "1", "--out", str(run), "--no-progress", "--hidden", "32"]
    args += ["--learning-starts", "300", "--batch-size", "32"] if algo == "sac" else ["--num-envs", "2", "--rollout-steps", "50"]
    assert main(args) == 0
    # SAC logs at 1000 steps (mid-schedule) and at 2000
    seen = [json.loads(l)["circuit/comparators"] for l in (run / "metrics.jsonl").read_text().splitlines()
            if "circuit/comparators" in l]
    assert seen[0] > 24 and seen[-1] <= 24
    ev = json.loads((run / "eval.json").read_text())["circuit"]
    assert ev["comparators"] <= 24 and ev["luts"] <= 120 and ev["target"] == "ecp5"
    assert main(["compile", str(run), "--out", str(build)]) == 0
    rep = json.loads((build / "compile_report.json").read_text())
    assert rep["budget"]["met"] and rep["counts"]["comparators"] <= 24 and rep["counts"]["luts"] <= 120
    graph = json.loads((build / "graph.json").read_text())
    arities = {len(lut["inputs"]) for layer in graph["layers"] for lut in layer}
    assert max(arities) <= 4
    # trained for a LUT4 fabric: the popcounts are built from full adders (3:2), unless told otherwise
    assert graph["meta"]["target"] == "ecp5" and rep["hdl"]["popcount_compressor"] == 3
    assert json.loads((build / "dwc_core.json").read_text())["popcount_compressor"] == 3
    assert main(["compile", str(run), "--out", str(tmp_path / "xc7"), "--target", "xc7"]) == 0
    assert json.loads((tmp_path / "xc7" / "dwc_core.json").read_text())["popcount_compressor"] == 6
    assert_one_line_error(run_cli("compile", str(run), "--out", str(tmp_path / "bad"), "--target", "zynq"), "--target")


def test_frontier_compares_each_lut4_circuit_with_a_lut6_one_of_the_same_budget(tmp_path):
    """scripts/bench_codesign.py: a LUT4 row is measured against the sweep's LUT6 config of the same
    width and comparator budget, else the first LUT6 row (a reference run) of the same task and
    training budget; never across budgets. Pareto flags are per training budget."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).parent.parent / "scripts" / "bench_codesign.py"
    spec = importlib.util.spec_from_file_location("bench_codesign", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    row = lambda config, arity, steps, frozen, luts, mhz=200.0: {
        "task": "Hopper-v5", "config": config, "arity": arity, "train_steps": steps, "frozen": frozen,
        "luts": luts, "lut4_sites": 3 * luts, "fmax_mhz": mhz, "seeds": 1, "comparators": 100, "latency_cycles": 10}
    rows = [row("lut6-w256 (ref)", 6, 300, 3000.0, 2400), row("lut4-w128-c96 (long)", 4, 300, 2900.0, 700),
            row("lut4-w256 (long)", 4, 300, 2900.0, 1200), row("lut4-w128-c96 (slow)", 4, 300, 2900.0, 700, 140.0),
            row("lut6-w32", 6, 10, 500.0, 400), row("lut4-w32", 4, 10, 300.0, 100), row("lut4-w64", 4, 20, 9.0, 1),
            row("lut4-w16", 4, 20, 400.0, 50)]  # would dominate lut4-w32 were budgets mixed
    bench.compare(rows)
    by = {r["config"]: r for r in rows}
    # within the hardware targets and above the return ratio, but one seed has no CI: unproven, not met
    assert by["lut4-w128-c96 (long)"]["vs"] == "lut6-w256 (ref)" and by["lut4-w128-c96 (long)"]["meets_target"] is None
    assert by["lut4-w128-c96 (long)"]["site_ratio"] == pytest.approx(700 / 2400)
    assert not by["lut4-w256 (long)"]["meets_target"]  # 0.5x the LUTs
    assert not by["lut4-w128-c96 (slow)"]["meets_target"]  # below 150 MHz
    assert by["lut4-w32"]["vs"] == "lut6-w32" and by["lut4-w32"]["return_ratio"] == pytest.approx(0.6)
    assert "vs" not in by["lut4-w64"] and "vs" not in by["lut6-w256 (ref)"]  # no LUT6 peer; LUT6 rows
    assert by["lut4-w64"]["pareto"] and by["lut4-w32"]["pareto"] and by["lut6-w32"]["pareto"]
    assert by["lut4-w128-c96 (long)"]["pareto"] and not by["lut4-w256 (long)"]["pareto"]
    # reference runs are named by their circuit; the layer count only where it is not the default
    assert bench.config_name(4, 128, 128) == "lut4-w128-c128" and bench.config_name(6, 256, 0) == "lut6-w256"
    assert bench.config_name(4, 128, 128, layers=3) == "lut4-l3-w128-c128"
    assert bench.config_name(4, 256, 128, last_width=129) == "lut4-w256-last129-c128"
    # a distilled circuit is measured against its teacher (a row of the teacher's budget), not the first LUT6 row
    rows = [row("lut6-w128 (other)", 6, 300, 2000.0, 1300), row("lut6-w256 (hopper-v5-dwc)", 6, 300, 3000.0, 2400),
            dict(row("lut4-w128-c128 (student)", 4, 300, 2900.0, 700), distill_steps=20, distilled_from="hopper-v5-dwc")]
    bench.compare(rows)
    assert rows[2]["vs"] == "lut6-w256 (hopper-v5-dwc)" and rows[2]["return_ratio"] == pytest.approx(2900 / 3000)
    text = bench.table(rows)
    assert "300+20" in text and "distilled" in text
    # the plot: one point per row, the seeds' interquartile range as a bar where a row has several
    rows[1]["runs"] = [{"frozen_return": v} for v in (2800.0, 3000.0, 3300.0)]
    bench.plot(rows, tmp_path / "frontier.png", "ecp5-25k")
    assert (tmp_path / "frontier.png").stat().st_size > 10_000
