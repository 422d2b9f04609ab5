"""Passes preserve the function: property tests on random graphs built to contain every pattern
the passes look for (constant comparators, constant/degenerate LUTs, repeated and don't-care
inputs, duplicates, dead LUTs)."""

import numpy as np
import pytest

from dwc.ir import LUT, Comparator, FixedFormat, Graph
from dwc.ir import reference as ref
from dwc.ir.passes import PASSES, cofactor, optimize, permute
from helpers import inputs_for, random_graph


def same_function(a: Graph, b: Graph, seed: int) -> bool:
    # 8-bit observations: with <= 4 dims, 600 random samples plus extremes cover most comparator patterns
    q = inputs_for(a, 600, seed)
    return np.array_equal(ref.actions_int(a, q), ref.actions_int(b, q))


@pytest.mark.parametrize("seed", range(60))
def test_each_pass_preserves_the_function(seed):
    g = random_graph(seed)
    for name, p in PASSES:  # one pass may empty a layer; the reference executor still runs it
        out = p(g)
        assert same_function(g, out, seed), name
        g = out


@pytest.mark.parametrize("seed", range(60))
def test_optimize_preserves_the_function_and_never_grows(seed):
    g = random_graph(seed)
    opt, report = optimize(g)
    assert same_function(g, opt, seed)
    assert report[-1]["luts"] <= report[0]["luts"] + len(g.layers)  # + placeholder LUTs for emptied layers
    assert report[-1]["comparators"] <= report[0]["comparators"]
    again, _ = optimize(opt)
    assert again.to_dict() == opt.to_dict()  # a fixed point
    opt.validate()


def test_cofactor_and_permute():
    # f(x0, x1, x2) = x0 & ~x2 | x1
    table = sum(((a & 1) & (~a >> 2 & 1) | (a >> 1 & 1)) << a for a in range(8))
    assert cofactor(table, 3, 1, 1) == 0b1111  # x1 = 1 -> always 1
    assert cofactor(table, 3, 1, 0) == 0b0010  # x1 = 0 -> x0 & ~x2 over (x0, x2)
    p = permute(table, 3, [2, 0, 1])  # new inputs (x2, x0, x1)
    for a in range(8):
        x2, x0, x1 = a & 1, a >> 1 & 1, a >> 2 & 1
        assert (p >> a) & 1 == (x0 & (1 - x2) | x1)


def test_known_reductions():
    f = FixedFormat(8, 0)
    comps = [Comparator(0, -128), Comparator(0, 200), Comparator(0, 5), Comparator(0, 9)]  # const 1, const 0
    layer0 = [
        LUT([2, 0], 0b1000),  # x2 & const1 -> x2 (arity 1)
        LUT([3, 1], 0b1110),  # x3 | const0 -> x3
        LUT([2, 2], 0b1001),  # xnor(x2, x2) -> constant 1
        LUT([2], 0b10),       # x2: a duplicate of LUT 0 after folding
        LUT([3], 0b01),       # dead: nobody reads it
    ]
    g = Graph([f], comps, [layer0], [[0, 1, 2, 3]], FixedFormat(8, 0), [[0, 1, 2, 3, 4]])
    opt, report = optimize(g)
    assert same_function(g, opt, 0)
    assert len(opt.comparators) == 2 and len(opt.layers[0]) == 2
    assert sorted(map(sorted, opt.groups)) == [[0, 0, 1]]  # the duplicate counts twice
    assert opt.action_tables == [[1, 2, 3, 4]]  # the constant-1 bit shifted the table


@pytest.mark.parametrize("seed", range(25))
def test_fast_executor_matches_reference_on_random_graphs(seed, tmp_path, monkeypatch):
    from dwc.backends.fast import FastExecutor
    monkeypatch.setenv("DWC_CACHE_DIR", str(tmp_path))
    g = random_graph(seed)
    q = inputs_for(g, 300, seed)  # 302 samples: four full 64-sample words and a partial one
    fast = FastExecutor(g)
    assert np.array_equal(fast.popcounts(q), ref.popcounts(g, q))
    assert np.array_equal(fast.actions_int(q), ref.actions_int(g, q))
    opt, _ = optimize(g)
    assert np.array_equal(FastExecutor(opt).actions_int(q), ref.actions_int(g, q))


def test_identical_comparators_merge():
    f = FixedFormat(8, 0)
    comps = [Comparator(0, 5), Comparator(1, 3), Comparator(0, 5)]
    g = Graph([f, f], comps, [[LUT([0, 1], 0b0110), LUT([2, 1], 0b1000)]], [[0, 1]], FixedFormat(8, 0), [[0, 1, 2]])
    opt, _ = optimize(g)
    assert len(opt.comparators) == 2 and same_function(g, opt, 0)
