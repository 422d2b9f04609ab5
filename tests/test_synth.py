"""``dwc synth``: real yosys + nextpnr + bitstream packing on a small core (the published size is
far too slow for CI; scripts/bench_hw.py covers it)."""
import json
from pathlib import Path

import pytest

from dwc.cli import main


@pytest.fixture(scope="module")
def small_build(tmp_path_factory):
    """A small untrained DWC at InvertedPendulum's dimensions (2 x 32 LUT4, 7 thresholds per dim)."""
    from dwc.compile import emit_verilog
    from dwc.ir.freeze import untrained_graph
    from dwc.models import ActorConfig
    out = tmp_path_factory.mktemp("small")
    g = untrained_graph(4, 1, ActorConfig(width=32, lut_inputs=4, thermo_bits=7), env="InvertedPendulum-v5")
    g.save(out / "graph.json")
    emit_verilog(g, out, pipeline=1)
    return out


@pytest.mark.parametrize("target", ["ecp5-25k", "ice40-up5k"])
def test_synth_place_route_and_bitstream(small_build, target, capsys):
    assert main(["synth", str(small_build), "--target", target, "--freq", "50"]) == 0
    assert target in capsys.readouterr().out
    r = json.loads((small_build / "synth" / target / "report.json").read_text())
    assert r["luts"] > 0 and r["ffs"] > 0 and r["latency_cycles"] == 3
    assert r["fmax_mhz"] > 20 and abs(r["actions_per_s"] - r["fmax_mhz"] * 1e6) < 1e4  # one action per cycle
    bit = Path(r["bitstream"])
    assert bit.exists() and bit.stat().st_size > 10_000
    assert r["shell"]["ffs"] >= 4 * 16 + 16  # one FF per port bit, reported apart from the core
    assert any("nextpnr" in c for c in r["commands"]) and all(r["tools"].values())
    e = r["energy"]  # an estimate from activity measured on InvertedPendulum episodes
    assert e["estimate"] and "InvertedPendulum-v5" in e["activity"]["source"] and 0 < e["activity"]["alpha"] < 1
    assert e["at_mhz"] == r["fmax_mhz"] and 0 < e["dynamic_nj"] < e["per_action_nj"]


def test_xc7_estimate(small_build):
    assert main(["synth", str(small_build), "--target", "xc7"]) == 0
    r = json.loads((small_build / "synth" / "xc7" / "report.json").read_text())
    assert r["luts"] > 0 and r["bitstream"] is None and r["fmax_mhz"] is None
    assert sum(r["core"]["lut_by_inputs"].values()) == r["luts"]
    assert r["energy"]["static_nj"] is None and r["energy"]["per_action_nj"] > 0  # no clock: dynamic only


def test_synth_errors(tmp_path, capsys):
    assert main(["synth", str(tmp_path), "--target", "ecp5-25k"]) == 2
    assert "not a dwc compile output" in capsys.readouterr().err


def test_serial_shell_computes_the_policy(small_build, tmp_path):
    """The shell that place and route wraps around the core (and that sets its pin count) passes
    observations and actions through unchanged: core + shell in Verilator vs the IR reference."""
    import numpy as np

    from dwc.ir import Graph
    from dwc.ir import reference as ref
    from dwc.rtl.shell import shell_verilog
    from dwc.sim.runner import Bench
    from dwc.sim.vectors import extreme_vectors, random_vectors
    g = Graph.load(small_build / "graph.json")
    ports = json.loads((small_build / "dwc_core.json").read_text())
    (tmp_path / "shell.v").write_text(shell_verilog(ports))
    q = np.concatenate([random_vectors(g, 30, 0), extreme_vectors(g)[:10]])
    bench = Bench([small_build / "dwc_core.v", tmp_path / "shell.v"], ports, tmp_path / "sim", toplevel="dwc_shell",
                  warnings_fatal=False)
    assert np.array_equal(bench.serial_shell(q), ref.actions_int(g, q))


@pytest.mark.parametrize("board", ["icebreaker", "ulx3s"])
def test_board_top_builds_a_bitstream(small_build, board, capsys):
    """Core + UART link on a real board definition (amaranth-boards), through the open tools."""
    assert main(["synth", str(small_build), "--board", board]) == 0
    r = json.loads((small_build / "board" / board / "report.json").read_text())
    assert Path(r["bitstream"]).stat().st_size > 10_000 and r["latency_cycles"] == 3
    assert r["fmax_mhz"] >= r["clock_mhz"]  # timing met at the board's clock
    assert board in capsys.readouterr().out


def test_default_options_follow_the_pipelining():
    """The measured winners: ECP5 soft-logic comparators up to popcount cuts, no block RAM once the
    adder trees are pipelined (README "Synthesis options, measured")."""
    from dwc.fpga.synth import TARGETS, default_options
    shallow = {"register_cuts": ["comparators", "layer0", "layer1", "popcounts"]}
    deep = {"register_cuts": ["comparators", "layer0", "layer1", "adder level 4", "popcounts"]}
    assert default_options(TARGETS["ecp5-25k"], shallow) == "-cmp2softlogic"
    assert default_options(TARGETS["ecp5-85k"], deep) == "-nobram"
    assert default_options(TARGETS["ice40-hx8k"], deep) == default_options(TARGETS["ice40-hx8k"], shallow) == ""


@pytest.mark.slow
@pytest.mark.ci  # ~1 minute: a few small place-and-route runs
def test_pipeline_auto_picks_the_fewest_stages_that_reach_the_clock(tmp_path):
    """Timing-aware lowering on measured Fmax: every tried design really went through nextpnr; the
    choice meets the clock and every shallower design tried misses it; the core written has the
    chosen latency."""
    from dwc.compile import choose_pipeline, emit_verilog, popcount_compressor
    from dwc.ir.freeze import untrained_graph
    from dwc.models import ActorConfig
    from dwc.rtl.core import max_pipeline
    g = untrained_graph(4, 1, ActorConfig(width=32, lut_inputs=4, thermo_bits=7), env="InvertedPendulum-v5")
    freq = 200.0
    k, tried = choose_pipeline(g, tmp_path, "ecp5-25k", freq, log=lambda *a: None)
    by_k = {t["pipeline"]: t for t in tried}
    compressor = popcount_compressor(g, "ecp5-25k")  # ECP5: full adders, one adder level more than 6:3
    assert max_pipeline(g, compressor) in by_k and k in by_k
    assert by_k[k]["fmax_mhz"] >= freq, tried  # this small core reaches 200 MHz with its deepest pipeline
    assert all(t["fmax_mhz"] < freq for t in tried if t["pipeline"] < k), tried
    for t in tried:
        report = json.loads((tmp_path / "pipeline_search" / f"p{t['pipeline']}" / "synth/ecp5-25k/report.json").read_text())
        assert report["fmax_mhz"] == t["fmax_mhz"] and report["latency_cycles"] == 2 + t["pipeline"]
    emit_verilog(g, tmp_path, k, compressor=compressor)
    assert json.loads((tmp_path / "dwc_core.json").read_text())["latency_cycles"] == 2 + k


def test_pipeline_auto_needs_a_placed_target(tmp_path, capsys):
    policy = Path(__file__).resolve().parent.parent / "policies" / "inverted-pendulum-v5-gates"
    assert main(["compile", str(policy), "--out", str(tmp_path / "b"), "--pipeline", "auto"]) == 2
    assert "--pipeline auto measures Fmax" in capsys.readouterr().err
    assert main(["compile", str(policy), "--out", str(tmp_path / "c"), "--pipeline", "auto", "--target", "xc7"]) == 2
