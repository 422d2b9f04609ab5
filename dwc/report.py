"""``dwc report SWEEP``: the paper-style table of a sweep, its comparisons and learning curves.

Per task and configuration, over seeds: the IQM with a 95% bootstrap CI (:mod:`dwc.stats`), the
median and quartiles of the float policy's return, of the frozen integer circuit's and (when the
sweep had a hardware section) of the Verilog's in Verilator, plus LUTs and Fmax. Every config is
compared with one baseline config, seed by seed (:func:`comparisons`). Writes SWEEP/report.json,
SWEEP/report.md and one SWEEP/curves_TASK.png per task (median training return across seeds, band =
its 95% bootstrap CI).
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from . import stats
from .errors import UserError
from .rl.run import CONFIG, METRICS, episode_returns, write_json

# per-run figures summarised over seeds
FIGURES = ("float_return", "frozen_return", "rtl_return", "luts", "lut4_sites", "ir_luts", "comparators", "fmax_mhz",
           "latency_cycles")
RETURNS = ("float_return", "frozen_return", "rtl_return")  # these get IQMs, CIs and comparisons
CURVE_POINTS = 50


def quartiles(values: list[float]) -> dict | None:
    """Median and the 25th/75th percentiles (linear interpolation, as numpy) of the seeds' values."""
    if not values:
        return None
    q1, med, q3 = np.percentile(np.asarray(values, dtype=float), [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3), "n": len(values)}


def _precision(run_dir: Path) -> str | None:
    """The run's --precision as its config.json records it (None when it cannot be read)."""
    try:
        return json.loads((run_dir / "run" / CONFIG).read_text()).get("precision")
    except (OSError, ValueError):
        return None


def load_runs(sweep_dir: Path) -> tuple[dict, list[dict]]:
    """SWEEP/sweep.json and the result.json of every run that finished, with its directory and the
    precision of its training."""
    sweep_dir = Path(sweep_dir)
    try:
        state = json.loads((sweep_dir / "sweep.json").read_text())
    except FileNotFoundError:
        raise UserError(f"{sweep_dir} is not a sweep folder (no sweep.json; dwc sweep writes it)") from None
    results = []
    for rid, rec in state["runs"].items():
        p = sweep_dir / rec["dir"] / "result.json"
        if p.exists():
            results.append(dict(json.loads(p.read_text()), dir=str(sweep_dir / rec["dir"]),
                                precision=_precision(sweep_dir / rec["dir"])))
    return state, results


def aggregate(state: dict, results: list[dict], intervals: bool = False) -> list[dict]:
    """One row per (task, config) in the spec's order. ``intervals``: the returns get
    :func:`dwc.stats.summarize` (IQM and bootstrap CIs, about a second a figure) instead of quartiles."""
    from collections import Counter
    planned = Counter((rec["task"], rec["config"]) for rec in state["runs"].values())
    groups: dict[tuple, list[dict]] = {key: [] for key in planned}
    for r in results:
        groups.setdefault((r["task"], r["config"]), []).append(r)
    rows = []
    for (task, config), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["seed"])
        row = {"task": task, "config": config, "policy": rs[0]["policy"] if rs else None,
               "seeds": [r["seed"] for r in rs], "planned": planned[task, config],
               "train_steps": min((r["train_steps"] for r in rs), default=None)}
        for key in FIGURES:
            values = [r[key] for r in rs if r.get(key) is not None]
            row[key] = stats.summarize(values) if intervals and key in RETURNS and values else quartiles(values)
        eq = [r["rtl_equals_frozen"] for r in rs if r.get("rtl_equals_frozen") is not None]
        row["rtl_equals_frozen"] = all(eq) if eq else None
        rows.append(row)
    return rows


def _cell(q: dict | None, fmt: str = "{:.1f}") -> str:
    if q is None:
        return "-"
    if q["n"] == 1:
        return fmt.format(q["median"])
    return f"{fmt.format(q['median'])} [{fmt.format(q['q1'])}, {fmt.format(q['q3'])}]"


def table(rows: list[dict], markdown: bool = False) -> str:
    head = ["task", "config", "seeds", "steps", "float return", "frozen return", "hardware return", "LUTs", "Fmax MHz"]
    body = []
    for r in rows:
        hw = _cell(r["rtl_return"])
        if r["rtl_equals_frozen"] is False:
            hw += " (DIFFERS from frozen)"
        body.append([r["task"], r["config"], f"{len(r['seeds'])}/{r['planned']}", str(r["train_steps"] or "-"),
                     _cell(r["float_return"]), _cell(r["frozen_return"]), hw,
                     _cell(r["luts"] or r["ir_luts"], "{:.0f}"), _cell(r["fmax_mhz"])])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body])
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(b) for b in body])


LEGEND = ("median [25th, 75th percentile] over seeds of each run's mean deterministic return; float = the "
          "trained policy and frozen = its integer circuit (reference executor), over the evaluation "
          "episodes; hardware = the Verilog in Verilator, closed loop, over the same episodes (or the first "
          "hardware.episodes of them; flagged if it differs from the frozen circuit's on any); LUTs = "
          "synthesised LUTs (IR LUTs without a synthesis target).")


def curve(metrics: Path, grid: np.ndarray) -> np.ndarray:
    """Training episodic return on ``grid``: the mean of the episodes that ended in each grid cell,
    carried forward over cells without one (NaN before the first episode)."""
    pts = episode_returns(metrics)
    out = np.full(len(grid), np.nan)
    if not pts:
        return out
    steps, rets = np.array(pts, dtype=float).T
    cell = np.searchsorted(grid, steps, side="left")  # episode ending at s belongs to the first grid point >= s
    last = np.nan
    for i in range(len(grid)):
        m = cell == i
        last = rets[m].mean() if m.any() else last
        out[i] = last
    return out


def plot_curves(sweep_dir: Path, results: list[dict]) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for task in dict.fromkeys(r["task"] for r in results):
        rs = [r for r in results if r["task"] == task]
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
        for config in dict.fromkeys(r["config"] for r in rs):
            runs = [r for r in rs if r["config"] == config]
            grid = np.linspace(0, max(r["train_steps"] for r in runs), CURVE_POINTS + 1)[1:]
            ys = np.array([curve(Path(r["dir"]) / "run" / METRICS, grid) for r in runs])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells before the first episode
                q1, med, q3 = np.nanpercentile(ys, [25, 50, 75], axis=0)
            line, = ax.plot(grid, med, lw=1.5, label=f"{config} ({len(runs)} seeds)")
            if len(runs) > 1:
                ax.fill_between(grid, q1, q3, color=line.get_color(), alpha=0.2, lw=0)
        ax.set_xlabel("env steps")
        ax.set_ylabel("episodic return (training)")
        ax.set_title(f"{task}: median over seeds, band = quartiles", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = Path(sweep_dir) / f"curves_{task}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(str(path))
    return paths


def report(sweep_dir: Path) -> dict:
    sweep_dir = Path(sweep_dir)
    state, results = load_runs(sweep_dir)
    rows = aggregate(state, results)
    failed = {rid: rec.get("error") for rid, rec in state["runs"].items() if rec.get("state") == "failed"}
    curves = plot_curves(sweep_dir, results)
    rep = {"sweep": str(sweep_dir), "runs_planned": len(state["runs"]), "runs_finished": len(results),
           "failed": failed, "rows": rows, "curves": curves, "legend": LEGEND}
    write_json(sweep_dir / "report.json", rep)
    md = [f"# Sweep {sweep_dir.name}", "", table(rows, markdown=True), "", LEGEND, ""]
    md += [f"![{Path(c).stem}]({Path(c).name})" for c in curves]
    (sweep_dir / "report.md").write_text("\n".join(md) + "\n")
    return rep
