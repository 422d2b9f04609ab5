"""Test observations for the vector benches: random, extreme and recorded from rollouts."""
from __future__ import annotations

import numpy as np

from dwc.ir import Graph


def extreme_vectors(g: Graph) -> np.ndarray:
    """All-minimum, all-maximum, zero, and every comparator threshold and the value just below it
    (in all dimensions at once, cycling through each dimension's thresholds), so every comparator
    is seen on both sides of its edge."""
    lo = [f.min_int for f in g.obs_formats]
    hi = [f.max_int for f in g.obs_formats]
    rows = [lo, hi, [0] * g.obs_dim]
    per_dim = [sorted({c.threshold for c in g.comparators if c.dim == d}) or [0] for d in range(g.obs_dim)]
    for i in range(max(len(t) for t in per_dim)):
        at = [t[i % len(t)] for t in per_dim]
        rows += [at, [v - 1 for v in at]]
    return np.clip(np.array(rows, dtype=np.int64), lo, hi)


def random_vectors(g: Graph, n: int, seed: int) -> np.ndarray:
    """Uniform over each dimension's whole range, and uniform between its lowest and highest
    threshold (where the comparators actually switch)."""
    rng = np.random.default_rng(seed)
    lo = np.array([f.min_int for f in g.obs_formats])
    hi = np.array([f.max_int for f in g.obs_formats])
    t_lo = np.array([min([c.threshold for c in g.comparators if c.dim == d], default=0) for d in range(g.obs_dim)])
    t_hi = np.array([max([c.threshold for c in g.comparators if c.dim == d], default=0) for d in range(g.obs_dim)])
    t_lo, t_hi = np.clip(t_lo - 1, lo, hi), np.clip(t_hi, lo, hi)
    return np.concatenate([rng.integers(lo, hi + 1, (n - n // 2, g.obs_dim)),
                           rng.integers(t_lo, t_hi + 1, (n // 2, g.obs_dim))])


def bench_vectors(g: Graph, episodes: list[dict], n_random: int, seed: int, max_recorded: int = 5000) -> dict:
    """The vector bench's inputs, by kind (recorded: observations of the reference episodes)."""
    recorded = [o for ep in episodes for o in ep["observations"]][:max_recorded]
    return {"random": random_vectors(g, n_random, seed), "extreme": extreme_vectors(g),
            "recorded": np.array(recorded, dtype=np.int64).reshape(-1, g.obs_dim)}
