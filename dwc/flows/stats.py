"""Statistics over seeds as reviewers of RL results ask for them (Agarwal et al., "Deep Reinforcement
Learning at the Edge of the Statistical Precipice", NeurIPS 2021), through the authors' library rliable:
the interquartile mean (IQM), 95% stratified-bootstrap percentile confidence intervals and the
probability of improvement.

rliable is imported inside the functions: its import takes seconds (arch, pandas, scipy) and
``dwc --help`` must stay fast.
"""
from __future__ import annotations

import contextlib
import warnings
from collections.abc import Hashable, Iterator, Mapping, Sequence

import numpy as np

from dwc.core.errors import UserError

MIN_SEEDS = 5  # fewer seeds: a bootstrap over them can only reshuffle a handful of values; point estimates only
CONFIDENCE = 0.95
SEED = 0  # of the bootstrap resampling: the same runs always give the same report
# Bootstrap replicates per interval. Each runs rliable's statistic once in Python (IQM: scipy's
# trim_mean, ~0.1 ms; a probability of improvement: a Mann-Whitney U, ~0.5 ms): a figure's CIs take
# ~0.3 s and a comparison ~1 s on a loaded 2-core machine. Measured on 8 seeds, an interval's ends move
# by ~3% (REPS) and ~5% (POI_REPS) of its width from one bootstrap seed to another; SEED fixes them.
REPS = 2000
POI_REPS = 1000


def no_ci(n: int) -> str:
    return f"n = {n}, no CI"


@contextlib.contextmanager
def seeded() -> Iterator[np.random.RandomState]:
    """A fixed-seed RandomState for rliable, and numpy's global RNG seeded for the block and restored
    after it: rliable 1.2's bootstraps draw their indices with np.random.choice, whatever random_state
    says. arch's warning that random_state is deprecated is silenced."""
    saved = np.random.get_state()
    np.random.seed(SEED)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield np.random.RandomState(SEED)
    finally:
        np.random.set_state(saved)


def _finite(values, what: str) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise UserError(f"no {what} to summarise")
    if not np.isfinite(x).all():
        raise UserError(f"non-finite {what}: {x.ravel().tolist()}")
    return x


def iqm(x: np.ndarray) -> float:
    from rliable import metrics
    return float(metrics.aggregate_iqm(x))


def quartiles(values: Sequence[float]) -> dict | None:
    """n, median, q1, q3 (numpy's linear percentiles) of the seeds' values; None for no values."""
    if len(values) == 0:
        return None
    q1, med, q3 = np.percentile(np.asarray(values, dtype=float), [25, 50, 75])
    return {"n": len(values), "median": float(med), "q1": float(q1), "q3": float(q3)}


def summarize(values: Sequence[float]) -> dict:
    """One task's per-seed values: n, median, q1, q3 (numpy's linear percentiles), the IQM and, from
    MIN_SEEDS seeds on, 95% percentile CIs of the IQM (ci_low, ci_high) and of the median
    (median_ci_low, median_ci_high) from one stratified bootstrap over seeds; below that the CIs are
    None and ``note`` says so."""
    x = _finite(values, "values").ravel()
    out = {**quartiles(x), "iqm": iqm(x), "ci_low": None, "ci_high": None, "median_ci_low": None,
           "median_ci_high": None, "note": None}
    if len(x) < MIN_SEEDS:
        return {**out, "note": no_ci(len(x))}
    from rliable import library as rly
    with seeded() as rs:
        _, ci = rly.get_interval_estimates({"x": x[:, None]}, lambda s: np.array([iqm(s), np.median(s)]),
                                           reps=REPS, confidence_interval_size=CONFIDENCE, random_state=rs)
    (lo, med_lo), (hi, med_hi) = ci["x"]
    return {**out, "ci_low": float(lo), "ci_high": float(hi), "median_ci_low": float(med_lo),
            "median_ci_high": float(med_hi)}


def compare_paired(candidate: Mapping[Hashable, float], baseline: Mapping[Hashable, float]) -> dict:
    """A candidate config against the baseline over the seeds both ran (``seeds``, ``n``): the ratio
    IQM(candidate) / IQM(baseline) with a 95% CI from a paired bootstrap (both resampled with the same
    seeds), and P(candidate > baseline), rliable's probability of improvement, with its CI (the two
    resampled independently, as rliable does). No ratio when a paired baseline value is <= 0 (a ratio
    of returns means nothing then); no CIs under MIN_SEEDS paired seeds (``note`` says why)."""
    from rliable import library as rly, metrics

    seeds = [s for s in candidate if s in baseline]
    if not seeds:
        raise UserError("no seed in both the candidate and the baseline: nothing to compare")
    c = _finite([candidate[s] for s in seeds], "candidate values")[:, None]  # (n_seeds, 1 task)
    b = _finite([baseline[s] for s in seeds], "baseline values")[:, None]
    n, notes = len(seeds), []
    ratio_ok = bool((b > 0).all())
    out = {"seeds": seeds, "n": n, "candidate_iqm": iqm(c), "baseline_iqm": iqm(b),
           "ratio": iqm(c) / iqm(b) if ratio_ok else None, "ratio_ci_low": None, "ratio_ci_high": None,
           "p_improvement": float(metrics.probability_of_improvement(c, b)),
           "p_improvement_ci_low": None, "p_improvement_ci_high": None}
    if not ratio_ok:
        notes.append("a baseline value <= 0: no ratio")
    if n < MIN_SEEDS:
        return {**out, "note": "; ".join([no_ci(n)] + notes)}
    with seeded() as rs:
        if ratio_ok:
            paired = rly.StratifiedBootstrap(c, b, random_state=rs)  # one index draw for both arrays
            lo, hi = paired.conf_int(lambda x, y: np.array([iqm(x) / iqm(y)]), reps=REPS, size=CONFIDENCE,
                                     method="percentile")[:, 0]
            out.update(ratio_ci_low=float(lo), ratio_ci_high=float(hi))
        _, ci = rly.get_interval_estimates({"p": [c, b]}, metrics.probability_of_improvement, reps=POI_REPS,
                                           confidence_interval_size=CONFIDENCE, random_state=rs)
    lo, hi = np.ravel(ci["p"])
    return {**out, "p_improvement_ci_low": float(lo), "p_improvement_ci_high": float(hi),
            "note": "; ".join(notes) or None}


def curve_band(curves: np.ndarray) -> dict:
    """Learning curves of several seeds on one step grid (n_seeds x n_points, NaN before a seed's
    first episode): the median over seeds per point and, from MIN_SEEDS seeds on, a 95% bootstrap CI
    of it per point (seeds resampled independently at each point, as rliable's sample-efficiency
    curves). The band is NaN where a seed has no value yet, and None under MIN_SEEDS seeds."""
    y = np.asarray(curves, dtype=float)
    if y.ndim != 2 or y.shape[0] == 0:
        raise UserError(f"learning curves must be an n_seeds x n_points array, got shape {y.shape}")
    n = y.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN points before the first episode
        median = np.nanmedian(y, axis=0)
    out = {"n": n, "median": median, "ci_low": None, "ci_high": None, "note": None}
    if n < MIN_SEEDS:
        return {**out, "note": no_ci(n)}
    from rliable import library as rly
    full = np.isfinite(y).all(axis=0)
    lo, hi = np.full(y.shape[1], np.nan), np.full(y.shape[1], np.nan)
    if full.any():
        with seeded() as rs:
            _, ci = rly.get_interval_estimates({"c": y[:, None, full]}, lambda s: np.median(s, axis=0)[0],
                                               reps=REPS, confidence_interval_size=CONFIDENCE, random_state=rs)
        lo[full], hi[full] = ci["c"]
    return {**out, "ci_low": lo, "ci_high": hi}


def fmt(summary: dict | None, key: str = "iqm", spec: str = "{:.1f}") -> str:
    """``summary[key]`` with its CI: "2801.3 [2033.3, 3200.0]", or "2801.3 (n = 2, no CI)". The CI of
    "iqm" is ci_low/ci_high (as summarize names it), of any other key KEY_ci_low/KEY_ci_high."""
    if summary is None or summary.get(key) is None:
        return "-"
    lo, hi = ("ci_low", "ci_high") if key == "iqm" else (f"{key}_ci_low", f"{key}_ci_high")
    point = spec.format(summary[key])
    if summary.get(lo) is None:
        return f"{point} ({no_ci(summary['n'])})" if summary["n"] < MIN_SEEDS else point
    return f"{point} [{spec.format(summary[lo])}, {spec.format(summary[hi])}]"
