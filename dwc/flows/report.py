"""``dwc report SWEEP``: the paper-style table of a sweep, each run by seed, its comparisons and learning curves.

Per task and configuration, over seeds: the IQM with a 95% bootstrap CI (:mod:`dwc.flows.stats`), the
median and quartiles of the float policy's return, of the frozen integer circuit's and (when the
sweep had a hardware section) of the Verilog's in Verilator, plus LUTs and Fmax. Every config is
compared with one baseline config, seed by seed (:func:`dwc.flows.report_compare.comparisons`). Writes SWEEP/report.json,
SWEEP/report.md and one SWEEP/curves_TASK.png per task (median training return across seeds, band =
its 95% bootstrap CI).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dwc.core import published
from dwc.flows import stats
from dwc.core.catalog import circuit_size
from dwc.core.rundir import METRICS, episode_returns, write_json, write_text
from dwc.flows.report_compare import RULE, check_baselines, comparisons
from dwc.flows.report_runs import (FIGURES, RETURN_NAMES, RETURNS, load_runs, planned_actor, training_left,
                                   unfinished)

CURVE_POINTS = 50


def unfinished_text(rows: list[dict], planned: int, markdown: bool = False, left: dict | None = None) -> str:
    """The unfinished runs: a table of those started or failed, one line naming those not started and
    one with the training they still need (``left``: :func:`training_left`)."""
    if not rows:
        return f"All {planned} runs finished."
    n = lambda v: "-" if v is None else f"{v:,}"
    head = f"Not finished: {len(rows)} of {planned} runs; the same dwc sweep command continues them, each started " \
           "run from its checkpoint"
    live = [r for r in rows if r["state"] != "not started"]
    # a checkpoint saved before checkpoint.json was written beside it: there, but its step unknown
    ck = lambda r: n(r["checkpoint_step"]) if r["checkpoint_step"] is not None or r["logged_step"] is None else "yes"
    body = [[r["id"], r["state"] + (f": {r['error']}" if r.get("error") else ""), ck(r), n(r["logged_step"]),
             n(r["steps"])] for r in live]
    out = [head]
    if body:
        out += ["", _grid(["run", "state", "checkpoint at step", "last logged step", "steps"], body, markdown)]
    waiting = [r["id"] for r in rows if r["state"] == "not started"]
    if waiting:
        out += ["", f"Not started in this folder ({len(waiting)}): " + ", ".join(waiting)]
    if left:
        unknown = left["runs_without_rate"]
        out += ["", f"Training left: about {left['seconds_on_one_worker'] / 3600:.1f} hours on one worker, each run "
                    "at its own last training rate or, not started, at its task and config's in this folder "
                    "(evaluation and hardware stages not counted" +
                (f"; nor {unknown} run{'s' * (unknown != 1)} of a config none of whose runs has trained)" if unknown
                 else ")")]
    return "\n".join(out)


def aggregate(state: dict, results: list[dict], intervals: bool = False, sweep_dir: Path | None = None) -> list[dict]:
    """One row per (task, config) in the spec's order. ``intervals``: the returns get
    :func:`dwc.flows.stats.summarize` (IQM and bootstrap CIs, about a second a figure) instead of quartiles.
    ``sweep_dir``: a row without a finished run takes its policy from a started run's config.json."""
    from collections import Counter
    planned = Counter((rec["task"], rec["config"]) for rec in state["runs"].values())
    groups: dict[tuple, list[dict]] = {key: [] for key in planned}
    for r in results:
        groups.setdefault((r["task"], r["config"]), []).append(r)
    rows = []
    for (task, config), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["seed"])
        actor = (rs[0].get("options") or {}).get("actor") if rs else planned_actor(sweep_dir, state, task, config)
        row = {"task": task, "config": config, "policy": rs[0]["policy"] if rs else (actor or {}).get("policy"),
               "model": circuit_size(actor) if actor else None,
               "seeds": [r["seed"] for r in rs], "planned": planned[task, config],
               "train_steps": min((r["train_steps"] for r in rs), default=None),
               "steps_with_teacher": min((r["steps_with_teacher"] for r in rs if r.get("steps_with_teacher") is not None),
                                         default=None)}
        for key in FIGURES:
            values = [r[key] for r in rs if r.get(key) is not None]
            row[key] = stats.summarize(values) if intervals and key in RETURNS and values else stats.quartiles(values)
        costed = [r for r in rs if r.get("cpu_hours_with_teacher")]
        row["cpu_hours"] = stats.quartiles([r["cpu_hours_with_teacher"] for r in costed])
        row["cpu_hours_estimated"] = any(r["cpu_hours_estimated"] for r in costed)
        # what a user's CPU time buys: each run's deployed return over its hours, its teacher's counted
        row["return_per_cpu_hour"] = stats.quartiles([r["deployed_return"] / r["cpu_hours_with_teacher"] for r in costed
                                                      if r.get("deployed_return") is not None])
        eq = [r["rtl_equals_frozen"] for r in rs if r.get("rtl_equals_frozen") is not None]
        row["rtl_equals_frozen"] = all(eq) if eq else None
        # the device each circuit was placed on: with a family target, the smallest that fits, per seed
        row["targets"] = sorted({r["target"] for r in rs if r.get("target")})
        rows.append(row)
    return rows


def _cell(q: dict | None, fmt: str = "{:.1f}") -> str:
    if q is None:
        return "-"
    if q["n"] == 1:
        return fmt.format(q["median"])
    return f"{fmt.format(q['median'])} [{fmt.format(q['q1'])}, {fmt.format(q['q3'])}]"


def _hours(r: dict, key: str, fmt: str) -> str:
    """A row's cost figure, "~" before it where a run's training time is estimated (see the legend)."""
    return ("~" if r.get("cpu_hours_estimated") and r.get(key) else "") + _cell(r.get(key), fmt)


def _grid(head: list[str], body: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body])
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(b) for b in body])


def table(rows: list[dict], markdown: bool = False) -> str:
    """Returns as IQM [95% CI] (median [quartiles] for rows aggregated without intervals), LUTs, Fmax,
    latency and the FPGA the circuits were placed on."""
    ret = lambda q: stats.fmt(q) if q and "iqm" in q else _cell(q)
    head = ["task", "config", "seeds", "steps", "float return", "frozen return", "hardware return", "IR LUTs",
            "comparators", "FPGA LUTs", "Fmax MHz", "latency cycles", "FPGA", "CPU hours a run"]
    body = []
    for r in rows:
        hw = ret(r["rtl_return"])
        if r["rtl_equals_frozen"] is False:
            hw += " (DIFFERS from frozen)"
        body.append([r["task"], r["config"], f"{len(r['seeds'])}/{r['planned']}", str(r["train_steps"] or "-"),
                     ret(r["float_return"]), ret(r["frozen_return"]), hw,
                     _cell(r["ir_luts"], "{:.0f}"), _cell(r["comparators"], "{:.0f}"), _cell(r["luts"], "{:.0f}"),
                     _cell(r["fmax_mhz"]),
                     _cell(r["latency_cycles"], "{:.0f}"), "/".join(r.get("targets") or []) or "-",
                     _hours(r, "cpu_hours", "{:.2f}")])
    return _grid(head, body, markdown)


def paper_rows(rows: list[dict]) -> list[dict]:
    """Each row's deployed return (the frozen circuit's where the policy has one, else the float
    policy's) next to the paper's published median for that task and policy type
    (:mod:`dwc.core.published`), with our budget (steps x seeds) as a fraction of the paper's 1M x 10."""
    out = []
    for r in rows:
        figure = "frozen_return" if r["frozen_return"] else "float_return"
        q = r[figure] or {}
        pub = published.published(r["task"], r["policy"])
        out.append({"task": r["task"], "config": r["config"], "policy": r["policy"], "model": r.get("model"),
                    "figure": RETURN_NAMES[figure], "seeds": len(r["seeds"]), "planned": r["planned"],
                    "train_steps": r["train_steps"], **{k: q.get(k) for k in (
                        "n", "median", "median_ci_low", "median_ci_high", "iqm", "ci_low", "ci_high", "note")},
                    "published_median": pub, "published_model": published.MODELS.get(r["policy"]) if pub else None,
                    "ratio_to_published": q["median"] / pub if pub and q.get("median") is not None else None,
                    "return_per_cpu_hour": (r.get("return_per_cpu_hour") or {}).get("median"),
                    "cpu_hours_estimated": r.get("cpu_hours_estimated"),
                    "budget_ratio": published.budget_ratio(r.get("steps_with_teacher") or r["train_steps"],
                                                           len(r["seeds"]))})
    return out


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}" if abs(x) >= 0.01 or x == 0 else f"{x:.1e}"


def paper_table(prow: list[dict], markdown: bool = False) -> str:
    """Our median and IQM with their 95% CIs beside the published median, and the budget ratio."""
    head = ["task", "config", "model", "return", "median [95% CI]", "IQM [95% CI]", "paper median", "ours / paper",
            "steps x seeds", "budget / paper", "return per CPU hour"]
    body = [[p["task"], p["config"], p["model"] or "-", p["figure"], stats.fmt(p if p["n"] else None, "median"),
             stats.fmt(p if p["n"] else None), "-" if p["published_median"] is None else f"{p['published_median']:.0f}",
             _ratio(p["ratio_to_published"]),
             f"{p['train_steps']:,} x {p['seeds']}" if p["train_steps"] else f"- x 0/{p['planned']}",
             _ratio(p["budget_ratio"]), "-" if p["return_per_cpu_hour"] is None else
             ("~" if p["cpu_hours_estimated"] else "") + f"{p['return_per_cpu_hour']:.0f}"]
            for p in prow]
    return _grid(head, body, markdown)


PAPER_LEGEND = (f"Published: {published.SOURCE}; paper median = its FP32 MLP 2 x 256 for --policy mlp, its best "
                "small quantised MLP for qmlp, its DWC 2 x 1024 LUT6 (B = 63) for dwc, whatever this sweep's sizes "
                "(model). return = the deployed policy: the frozen integer circuit where the policy has one, else "
                "the float policy. ours / paper = our median / the published one; budget / paper = our env steps x "
                f"finished seeds / ({published.STEPS:,} x {published.SEEDS}), a distilled run's steps counting its "
                f"teacher's too; return per CPU hour = the median over seeds of each run's return / its training's "
                f"CPU hours (a distilled run's teacher's included), what an hour of one core bought (~: estimated, "
                f"see CPU hours above). Below "
                f"{stats.MIN_SEEDS} seeds no CI "
                "(\"n = k, no CI\").")


def spread_table(rows: list[dict], markdown: bool = False) -> str:
    """The returns' median [25th, 75th percentile] over seeds."""
    head = ["task", "config", "float return", "frozen return", "hardware return"]
    return _grid(head, [[r["task"], r["config"]] + [_cell(r[k]) for k in RETURNS] for r in rows], markdown)


# each finished run's own figures, as report.json "runs" holds them
RUN_KEYS = ("task", "config", "seed", "train_steps", *RETURNS, "rtl_equals_frozen", "luts", "ir_luts", "comparators",
            "fmax_mhz", "latency_cycles", "target")


def by_seed(rows: list[dict], results: list[dict]) -> list[dict]:
    """Every finished run's figures, grouped as the rows are (the spec's order), by seed within a
    group: the values the medians and IQMs above summarise."""
    order = {(r["task"], r["config"]): i for i, r in enumerate(rows)}
    ranked = sorted(results, key=lambda r: (order.get((r["task"], r["config"]), len(order)), r["seed"]))
    return [{k: r.get(k) for k in RUN_KEYS} for r in ranked]


def seed_table(runs: list[dict], markdown: bool = False) -> str:
    """One line per finished run: its returns, its circuit's size and clock and the device it was placed on."""
    num = lambda x, fmt="{:.1f}": "-" if x is None else fmt.format(x)  # noqa: E731
    head = ["task", "config", "seed", "steps", "float return", "frozen return", "hardware return", "IR LUTs",
            "comparators", "FPGA LUTs", "Fmax MHz", "FPGA"]
    body = [[r["task"], r["config"], str(r["seed"]), num(r["train_steps"], "{:d}"), num(r["float_return"]),
             num(r["frozen_return"]),
             num(r["rtl_return"]) + (" (DIFFERS from frozen)" if r["rtl_equals_frozen"] is False else ""),
             num(r["ir_luts"], "{:.0f}"), num(r["comparators"], "{:.0f}"), num(r["luts"], "{:.0f}"),
             num(r["fmax_mhz"]), r["target"] or "-"] for r in runs]
    return _grid(head, body, markdown)


def comparison_table(comps: list[dict], markdown: bool = False) -> str:
    def note(c: dict) -> str:  # with n = 0 the note already says why nothing paired
        return "; ".join(([c["note"]] if c["note"] else []) + [f"not paired: {u}" for u in c.get("unpaired", []) if c["n"]])

    head = ["task", "config", "vs", "return", "steps", "precision", "paired seeds", "IQM ratio [95% CI]",
            "P(config > baseline) [95% CI]", "note"]
    join = lambda xs: "/".join(map(str, xs)) or "-"
    body = [[c["task"], c["config"], c["baseline"], RETURN_NAMES.get(c["figure"], "-"), join(c.get("train_steps", [])),
             join(c.get("precision", [])), ", ".join(map(str, c["seeds"])) or "-", stats.fmt(c, "ratio", "{:.3f}"),
             stats.fmt(c, "p_improvement", "{:.2f}"), note(c)] for c in comps]
    return _grid(head, body, markdown)


LEGEND = ("Returns: each run's mean deterministic return over the evaluation episodes; IQM [95% CI] = their "
          "interquartile mean over seeds with a 95% stratified-bootstrap percentile CI (rliable, "
          f"{stats.REPS} resamples, fixed seed; below {stats.MIN_SEEDS} seeds no CI: \"n = k, no CI\"); spread = "
          "their median [25th, 75th percentile]. float = the trained policy and frozen = its integer circuit "
          "(reference executor), over the evaluation episodes; hardware = the Verilog in Verilator, closed loop, "
          "over the same episodes (or the first hardware.episodes of them; flagged if it differs from the frozen "
          "circuit's on any); IR LUTs and comparators = the circuit after the IR passes; FPGA LUTs = synthesised "
          "LUTs (LUT4 on ECP5 and iCE40), Fmax and latency "
          "(clock cycles from observation in to action out): median [25th, 75th percentile]; FPGA = the device(s) "
          "the circuits were placed on (with a family target, the smallest each seed's circuit fits); CPU hours a "
          "run = the CPU time its training took, all its legs (its share where seeds trained together in one "
          "process), a distilled run's with its teacher's; ~ where a run trained before dwc recorded it: the "
          "wall-clock time estimated from the steps per second it logged.")


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
            band = stats.curve_band([curve(Path(r["dir"]) / "run" / METRICS, grid) for r in runs])
            label = f"{config} ({band['note'] or f'{len(runs)} seeds'})"
            line, = ax.plot(grid, band["median"], lw=1.5, label=label)
            if band["ci_low"] is not None:
                ax.fill_between(grid, band["ci_low"], band["ci_high"], color=line.get_color(), alpha=0.2, lw=0)
        ax.set_xlabel("env steps")
        ax.set_ylabel("episodic return (training)")
        ax.set_title(f"{task}: median over seeds, band = its 95% bootstrap CI (from {stats.MIN_SEEDS} seeds)",
                     fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = Path(sweep_dir) / f"curves_{task}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(str(path))
    return paths


def text(rep: dict, markdown: bool = False) -> str:
    """The report's tables, its comparison rule and legend, as report.md and dwc report print them."""
    comps = comparison_table(rep["comparisons"], markdown) if rep["comparisons"] else "(nothing to compare)"
    return "\n".join([
        "Returns: IQM over seeds [95% CI]", "", table(rep["rows"], markdown), "",
        "Against the published results", "", paper_table(rep["paper"]["rows"], markdown), "", rep["paper"]["legend"], "",
        "Spread of the returns over seeds: median [25th, 75th percentile]", "", spread_table(rep["rows"], markdown), "",
        "By seed: each finished run", "", seed_table(rep.get("runs", []), markdown), "",
        "Comparisons. " + rep["baseline_rule"], "", comps, "", rep["legend"], "",
        unfinished_text(rep.get("unfinished", []), rep["runs_planned"], markdown, rep.get("training_left"))])


def report(sweep_dir: Path, baselines: list[str] | None = None) -> dict:
    """SWEEP/report.json, report.md and the curves; ``baselines``: the configs the others are compared
    with (default: see RULE)."""
    sweep_dir = Path(sweep_dir)
    state, results = load_runs(sweep_dir)
    baselines = check_baselines(state, baselines)  # a bad --baseline fails before seconds of bootstrap
    rows = aggregate(state, results, intervals=True, sweep_dir=sweep_dir)
    failed = {rid: rec.get("error") for rid, rec in state["runs"].items() if rec.get("state") == "failed"}
    curves = plot_curves(sweep_dir, results)
    import shlex
    command = shlex.join(["dwc", "report", str(sweep_dir)] + [a for b in baselines or [] for a in ("--baseline", b)])
    rep = {"sweep": str(sweep_dir), "command": command, "runs_planned": len(state["runs"]),
           "runs_finished": len(results),
           "failed": failed, "unfinished": unfinished(sweep_dir, state), "training_left": training_left(sweep_dir, state),
           "rows": rows, "runs": by_seed(rows, results),
           "baselines": baselines or None, "baseline_rule": RULE,
           "comparisons": comparisons(state, results, baselines), "curves": curves, "legend": LEGEND,
           "paper": {"source": published.SOURCE, "rows": paper_rows(rows), "legend": PAPER_LEGEND}}
    write_json(sweep_dir / "report.json", rep)
    md = [f"# Sweep report: {len(results)} of {len(state['runs'])} runs finished", "", f"Written by `{command}`.", "",
          text(rep, markdown=True), ""]
    md += [f"![{Path(c).stem}]({Path(c).name})" for c in curves]
    write_text(sweep_dir / "report.md", "\n".join(md) + "\n")
    return rep
