"""The reference executor: the IR's semantics written plainly in numpy, one stage at a time.

Everything faster (bit-sliced executors, HDL simulation) is checked against this.
"""
from __future__ import annotations

import functools

import numpy as np

from dwc.ir.graph import Graph, check_observation


def quantize_obs(g: Graph, obs: np.ndarray) -> np.ndarray:
    """Float observations (N, D) -> saturated fixed-point integers (N, D)."""
    obs = np.atleast_2d(obs)
    check_observation(obs)  # on the whole batch: a NaN is named by its dimension, not its row
    return np.stack([f.quantize(obs[:, d]) for d, f in enumerate(g.obs_formats)], axis=1)


def comparator_bits(g: Graph, q: np.ndarray) -> np.ndarray:
    """Integer observations (N, D) -> comparator bits (N, C) as uint8: bit c = q[dim_c] >= threshold_c."""
    q = np.atleast_2d(np.asarray(q, dtype=np.int64))
    dims = np.array([c.dim for c in g.comparators], dtype=np.int64)
    thresholds = np.array([c.threshold for c in g.comparators], dtype=np.int64)
    return (q[:, dims] >= thresholds).astype(np.uint8)


def truth_table(lut) -> np.ndarray:
    """The LUT's 2**arity output bits as an array indexed by address."""
    return _truth_table(lut.table, lut.arity)


@functools.lru_cache(maxsize=1 << 16)
def _truth_table(table: int, arity: int) -> np.ndarray:
    return np.array([(table >> a) & 1 for a in range(1 << arity)], dtype=np.uint8)


def lut_layer(layer, bits: np.ndarray) -> np.ndarray:
    """Bits (N, inputs) -> bits (N, LUTs): address bit k = the k-th input. LUTs of one arity are
    looked up together (one gather), so a step of the published circuit takes microseconds."""
    out = np.zeros((bits.shape[0], len(layer)), dtype=np.uint8)
    for arity, (js, inputs, tables) in _by_arity(tuple((l.table, tuple(l.inputs)) for l in layer)).items():
        addr = (bits[:, inputs].astype(np.int64) << np.arange(arity)).sum(axis=2)  # (N, LUTs of this arity)
        out[:, js] = tables[np.arange(len(js)), addr]
    return out


@functools.lru_cache(maxsize=8)
def _by_arity(layer: tuple) -> dict:
    """arity -> (LUT positions, input indices (n, arity), truth tables (n, 2**arity))."""
    groups: dict = {}
    for j, (table, inputs) in enumerate(layer):
        groups.setdefault(len(inputs), []).append((j, inputs, _truth_table(table, len(inputs))))
    return {a: (np.array([j for j, _, _ in g]), np.array([i for _, i, _ in g], dtype=np.int64).reshape(len(g), a),
                np.stack([t for _, _, t in g])) for a, g in groups.items()}


def popcounts(g: Graph, q: np.ndarray) -> np.ndarray:
    """Integer observations (N, D) -> per-action popcounts (N, A)."""
    bits = comparator_bits(g, q)
    for layer in g.layers:
        bits = lut_layer(layer, bits)
    return np.stack([bits[:, grp].sum(axis=1, dtype=np.int64) for grp in g.groups], axis=1)


def round_shift(v: np.ndarray, shift: int, rounding: str = "half_up") -> np.ndarray:
    """``v / 2**shift`` rounded to an integer, ties up (``floor((v + 2**(shift-1)) / 2**shift)``) or to
    even, for shift > 0; ``v * 2**-shift`` otherwise."""
    if shift <= 0:
        return v << -shift
    if rounding == "half_even":  # the floor's parity breaks the tie: one less added when it is even
        return (v + (1 << (shift - 1)) - 1 + ((v >> shift) & 1)) >> shift
    return (v + (1 << (shift - 1))) >> shift  # numpy's >> on int64 floors


def linear_layer(lin, x: np.ndarray) -> np.ndarray:
    """Integer inputs (N, I) -> requantised, clamped integer outputs (N, O)."""
    acc = x.astype(np.int64) @ np.asarray(lin.weights, dtype=np.int64).T + np.asarray(lin.bias, dtype=np.int64)
    return np.clip(round_shift(acc, lin.shift, lin.rounding), lin.lo, lin.hi)


def codes(g: Graph, q: np.ndarray) -> np.ndarray:
    """Integer observations (N, D) -> the index into each action table (N, A): the popcounts, or the
    last linear layer's codes minus its ``lo``."""
    x = popcounts(g, q)
    for lin in g.linear:
        x = linear_layer(lin, x)
    return x - g.linear[-1].lo if g.linear else x


def actions_int(g: Graph, q: np.ndarray) -> np.ndarray:
    """Integer observations (N, D) -> fixed-point actions (N, A)."""
    idx = codes(g, q)
    return np.stack([np.asarray(g.action_tables[a], dtype=np.int64)[idx[:, a]] for a in range(g.action_dim)], axis=1)


def act(g: Graph, obs: np.ndarray) -> np.ndarray:
    """Float observations -> float actions, exactly as the circuit would compute them."""
    return g.action_format.to_float(actions_int(g, quantize_obs(g, obs)))
