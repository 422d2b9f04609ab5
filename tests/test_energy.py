"""The energy estimate's measured part: switching activity of the circuit's nets, computed from the
same values the IR reference executor (and so the verified RTL) produces."""
import numpy as np
import pytest

from dwc.fpga.energy import activity, build_activity, energy, net_values
from dwc.ir import reference as ref
from dwc.ir.vectors import extreme_vectors, random_vectors
from helpers import random_graph, random_linear_graph


@pytest.mark.parametrize("seed", range(4))
def test_net_values_are_the_circuits(seed):
    g = random_graph(seed)
    q = np.concatenate([random_vectors(g, 50, seed), extreme_vectors(g)])
    v = net_values(g, q)
    assert np.array_equal(v["comparators"], ref.comparator_bits(g, q))
    w = g.action_format.width
    bits = v["actions"].reshape(len(q), g.action_dim, w).astype(np.int64)
    words = (bits << np.arange(w)).sum(axis=2)
    signed = np.where(words >= 1 << (w - 1), words - (1 << w), words)
    assert np.array_equal(signed, ref.actions_int(g, q))


@pytest.mark.parametrize("seed", range(4))
def test_net_values_of_quantised_mlps(seed):
    """Linear layers (now lowered to hardware, so synthesised and estimated too) are followed to the actions."""
    g = random_linear_graph(seed, with_luts=seed % 2 == 1)
    q = np.concatenate([random_vectors(g, 50, seed), extreme_vectors(g)])
    v = net_values(g, q)
    w = g.action_format.width
    bits = v["actions"].reshape(len(q), g.action_dim, w).astype(np.int64)
    words = (bits << np.arange(w)).sum(axis=2)
    assert np.array_equal(np.where(words >= 1 << (w - 1), words - (1 << w), words), ref.actions_int(g, q))
    assert v["linear"].shape[1] > 0


def test_activity_counts_toggles():
    g = random_graph(1)
    q = random_vectors(g, 40, 0)
    assert activity(g, [np.repeat(q[:1], 10, axis=0)])["alpha"] == 0.0  # a constant input switches nothing
    lo, hi = extreme_vectors(g)[:2]
    flip = activity(g, [np.array([lo, hi] * 5)])
    assert flip["stages"]["comparators"]["toggle_rate"] > 0 and flip["transitions"] == 9
    # transitions are counted within each sequence, never across two
    assert activity(g, [q[:20], q[20:]])["transitions"] == 38
    with pytest.raises(ValueError):
        activity(g, [q[:1]])


def test_energy_arithmetic():
    report = {"family": "ecp5", "fmax_mhz": 100.0,
              "core": {"luts": 1000, "ffs": 100, "cells": {"LUT4": 1000, "CCU2C": 10, "TRELLIS_FF": 100}}}
    e1 = energy(report, {"alpha": 0.1}, "ecp5-25k")
    e2 = energy(report, {"alpha": 0.2}, "ecp5-25k")
    assert e1["estimate"] and e2["dynamic_nj"] == pytest.approx(2 * e1["dynamic_nj"], rel=1e-3)
    assert e1["static_nj"] == pytest.approx(e1["parameters"]["static_mw"] * 1e-3 / 100e6 * 1e9, rel=1e-3)
    assert e1["per_action_nj"] == pytest.approx(e1["dynamic_nj"] + e1["clock_nj"] + e1["static_nj"], abs=1e-3)
    assert energy({**report, "fmax_mhz": None}, {"alpha": 0.1}, "ecp5-25k")["static_nj"] is None


def test_activity_from_closed_loop_episodes():
    from dwc.frontends.freeze import untrained_graph
    from dwc.models import ActorConfig
    g = untrained_graph(4, 1, ActorConfig(width=16, lut_inputs=4, thermo_bits=7), env="InvertedPendulum-v5")
    a = build_activity(g, 200)
    assert a["transitions"] > 100 and "InvertedPendulum-v5" in a["source"] and 0 < a["alpha"] < 1
