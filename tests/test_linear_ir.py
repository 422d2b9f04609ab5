"""Integer linear layers in the IR (the quantised-MLP extension): semantics written out by hand,
JSON round trip and validation, the passes and the fast executor preserving the function."""
import json
from pathlib import Path

import numpy as np
import pytest

from dwc.ir import Comparator, FixedFormat, Graph, IRError, Linear
from dwc.ir import reference as ref
from dwc.ir.passes import PASSES, optimize
from helpers import inputs_for, random_linear_graph


def test_semantics_by_hand():
    f = FixedFormat(8, 0)
    comps = [Comparator(0, t) for t in (-10, 0, 10)] + [Comparator(1, 5)]
    lin = Linear([[3, -2], [1, 1]], [1, -4], 1, -3, 3)  # y = clamp(round((W x + b) / 2), -3, 3)
    g = Graph([f, f], comps, [], [[0, 1, 2], [3]], FixedFormat(8, 0), [[10, 11, 12, 13, 14, 15, 16]] * 2, {}, [lin])
    q = np.array([[0, 0], [20, 9], [-50, 100]])
    # popcounts: (2, 0), (3, 1), (0, 1)
    # row 0: (3*2 + 1) = 7 -> (7 + 1) >> 1 = 4 -> clamp 3; (2 - 4) = -2 -> (-2 + 1) >> 1 = -1
    # row 1: 9 - 2 + 1 = 8 -> 4 -> 3; 4 - 4 = 0 -> 0
    # row 2: -2 + 1 = -1 -> 0; 1 - 4 = -3 -> (-3 + 1) >> 1 = -1
    assert ref.codes(g, q).tolist() == [[6, 2], [6, 3], [3, 2]]
    assert ref.actions_int(g, q).tolist() == [[16, 12], [16, 13], [13, 12]]
    # ties to even (ONNX QuantizeLinear): 7/2 -> 4, -1/2 -> 0 (even), -3/2 -> -2; 9/2 -> 4 (even)
    g.linear[0] = Linear([[3, -2], [1, 1]], [1, -4], 1, -3, 3, "half_even")
    assert ref.codes(g, q).tolist() == [[6, 2], [6, 3], [3, 1]]
    even = np.arange(-40, 41)
    for s in (1, 2, 3):
        assert np.array_equal(ref.round_shift(even, s, "half_even"), np.rint(even / 2 ** s).astype(np.int64))


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("with_luts", [False, True])
def test_passes_preserve_linear_graphs(seed, with_luts):
    g = random_linear_graph(seed, with_luts)
    q = inputs_for(g, 600, seed)
    want = ref.actions_int(g, q)
    for name, p in PASSES:
        g2 = p(g)
        assert np.array_equal(ref.actions_int(g2, q), want), name
    opt, _ = optimize(g)
    assert np.array_equal(ref.actions_int(opt, q), want)
    assert Graph.from_dict(opt.to_dict()).to_dict() == opt.to_dict()  # JSON round trip


@pytest.mark.parametrize("seed", range(8))
def test_fast_executor_runs_linear_graphs(seed, tmp_path, monkeypatch):
    from dwc.backends.fast import FastExecutor
    monkeypatch.setenv("DWC_CACHE_DIR", str(tmp_path))
    g = random_linear_graph(seed, with_luts=seed % 2 == 1)
    q = inputs_for(g, 300, seed)
    assert np.array_equal(FastExecutor(g).actions_int(q), ref.actions_int(g, q))


@pytest.mark.parametrize("edit,field", [
    (lambda d: d["linear"][0].update(weights=[[1]]), "linear[0].weights"),
    (lambda d: d["linear"][0].update(lo=5, hi=1), "linear[0].lo"),
    (lambda d: d["linear"][0].update(shift=99), "linear[0].shift"),
    (lambda d: d["linear"][0].update(bias="x"), "linear[0].bias"),
    (lambda d: d["linear"][0].update(rounding="stochastic"), "linear[0].rounding"),
    (lambda d: d["actions"]["tables"][0].pop(), "actions.tables[0]"),
])
def test_malformed_linear_layers_name_the_field(edit, field):
    d = random_linear_graph(3, with_luts=False).to_dict()
    edit(d)
    with pytest.raises(IRError, match=field.replace("[", r"\[").replace("]", r"\]")):
        Graph.from_dict(d)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("pipeline", [0, 3, "max"])
@pytest.mark.parametrize("table_bits", [0, 10])
def test_core_with_linear_layers_matches_reference(seed, pipeline, table_bits):
    """The Amaranth core (LinearStage: constant-coefficient sums, rounding shift, clamp; or, for
    neurons reading <= table_bits bits, enumerated lookup tables) computes the reference's actions at
    the declared latency."""
    from dwc.rtl.core import DWCCore, max_pipeline
    from dwc.sim.pysim import run_vectors
    g = random_linear_graph(seed, with_luts=seed % 2 == 1)
    pipeline = max_pipeline(g) if pipeline == "max" else min(pipeline, max_pipeline(g))
    core = DWCCore(g, pipeline, table_bits=table_bits)
    q = inputs_for(g, 60, seed)
    actions, latency = run_vectors(core, q)
    assert np.array_equal(actions, ref.actions_int(g, q))
    assert set(latency) == {core.latency}


@pytest.mark.parametrize("rounding,table_bits", [("half_up", 0), ("half_even", 0), ("half_even", 12)])
def test_linear_verilog_in_verilator_matches_reference(tmp_path, rounding, table_bits):
    """The emitted leaf-cell datapath (signed adders, constant multipliers, requantisers; with
    table_bits 12 the first layer's neurons as lookup tables) built by Verilator with its warnings
    fatal: the reference's actions for both roundings, on vectors full of exact ties (the other
    rounding would give other actions on them)."""
    from dataclasses import replace

    from dwc.flows.compile import emit_verilog
    from dwc.sim.runner import simulate_vectors
    rng = np.random.default_rng(4)
    f = FixedFormat(8, 0)
    comps = [Comparator(d, int(t)) for d in range(3) for t in range(-112, 128, 16)]  # 15 per dim
    wide = [Linear(rng.integers(-9, 10, (5, 3)).tolist(), rng.integers(-30, 31, 5).tolist(), 2, -60, 60, rounding),
            Linear(rng.integers(-5, 6, (2, 5)).tolist(), rng.integers(-9, 10, 2).tolist(), 1, -200, 200, rounding)]
    g = Graph([f] * 3, comps, [], [list(range(15 * d, 15 * d + 15)) for d in range(3)], FixedFormat(10, 0),
              [list(range(-200, 201))] * 2, {}, wide)
    g.validate()
    q = inputs_for(g, 400, 1)
    other = "half_up" if rounding == "half_even" else "half_even"
    assert not np.array_equal(ref.actions_int(replace(g, linear=[replace(l, rounding=other) for l in wide]), q),
                              ref.actions_int(g, q))  # the vectors tell the roundings apart
    hdl = emit_verilog(g, tmp_path, 1, table_bits=table_bits)
    tables = [layer["table"] for layer in hdl["linear_lowering"]]
    assert tables == ([5, 0] if table_bits else [0, 0])  # 3 inputs x 4 bits = 12; 5 x 7 = 35
    ports = json.loads((tmp_path / "dwc_core.json").read_text())
    r = simulate_vectors(Path(hdl["verilog"]), ports, q, tmp_path / "sim_build")
    assert np.array_equal(r["actions"], ref.actions_int(g, q))
