"""The report's comparisons: on each task, each config against the earlier configs of the spec it
can be compared with (or the baselines named), seed by seed (:func:`dwc.flows.stats.compare_paired`).
:data:`RULE` says which pairs are compared and how."""
from __future__ import annotations

import json

from dwc.core.errors import OptionError
from dwc.flows import stats
from dwc.flows.report_runs import RETURNS


def config_order(state: dict) -> list[str]:
    """Config names in the spec's order (dwc sweep lists sweep.json's runs in it)."""
    return list(dict.fromkeys(rec["config"] for rec in state["runs"].values()))


RULE = ("Each config is compared with every config before it in the spec (the earlier one is the baseline) that "
        "it shares its training precision with, or differs from in precision alone, so a precision change is never "
        "confounded with another (other options may differ between two configs: each pair reads as what its two "
        "configs change); --baseline NAME keeps the comparisons with NAME. On each task runs pair by seed, and only "
        "when both trained for the same steps (a distilled run pairs with its own teacher run); deployed = the frozen "
        "circuit's return against a float policy's; ratio = IQM(config) / IQM(baseline) over the paired seeds with a "
        "95% paired-bootstrap CI; P(config > baseline) = rliable's probability of improvement with a 95% "
        f"bootstrap CI; no CI below {stats.MIN_SEEDS} paired seeds.")


def check_baselines(state: dict, baselines: list[str] | None) -> list[str]:
    """The configs named by --baseline, checked against the sweep's."""
    order = config_order(state)
    for b in baselines or []:
        if b not in order:
            raise OptionError("baseline", f" {b!r}: no such config in this sweep (configs: {', '.join(order)})")
    return list(baselines or [])


def comparable(runs: list[dict], base: list[dict]) -> str | None:
    """Why two configs' runs cannot be compared (None when they can): they must share the training
    precision, or differ in it alone."""
    precisions = {r.get("precision") for r in runs}, {b.get("precision") for b in base}
    if len(precisions[0] | precisions[1]) == 1:
        return None
    options = [{json.dumps(r.get("options"), sort_keys=True) for r in rs} for rs in (runs, base)]
    if options[0] == options[1] and len(options[0]) == 1:
        return None
    return (f"precision {'/'.join(sorted(map(str, precisions[0])))} vs {'/'.join(sorted(map(str, precisions[1])))} "
            "and other options differ too: two treatments at once")


def pair_runs(runs: list[dict], baseline: list[dict], key: str) -> tuple[dict, dict, list[str]]:
    """Seed -> ``key`` of ``runs`` and of the ``baseline`` runs they pair with (same seed and
    train_steps), and why each other seed of ``runs`` that has the figure is not paired."""
    base = {b["seed"]: b for b in baseline if b.get(key) is not None}
    mine, theirs, why = {}, {}, {}
    for r in runs:
        if r.get(key) is None:
            continue
        b = base.get(r["seed"])
        if b is None:
            reason = "no baseline run of this seed"
        elif r["train_steps"] != b["train_steps"] and not (r.get("teacher") and r["teacher"] == b.get("id")):
            # other budgets pair only as a student with its own teacher
            reason = f"{r['train_steps']} steps, the baseline {b['train_steps']}"
        else:
            mine[r["seed"]], theirs[r["seed"]] = r[key], b[key]
            continue
        why.setdefault(reason, []).append(r["seed"])
    return mine, theirs, [f"seed{'s' * (len(s) > 1)} {', '.join(map(str, s))}: {reason}" for reason, s in why.items()]


def comparisons(state: dict, results: list[dict], baselines: list[str] | None = None) -> list[dict]:
    """Per task, each config against each comparable earlier config of the spec (or against the
    ``baselines`` named), per return figure both have, over paired seeds (:func:`pair_runs`,
    :func:`dwc.flows.stats.compare_paired`); n = 0 and a note where none pair. See RULE."""
    out, order = [], config_order(state)
    for task in dict.fromkeys(rec["task"] for rec in state["runs"].values()):
        runs = {c: sorted((r for r in results if (r["task"], r["config"]) == (task, c)), key=lambda r: r["seed"])
                for c in order}
        for i, config in enumerate(order):
            for base in (baselines if baselines else order[:i]):
                if base == config or not runs[config]:
                    continue
                entry = {"task": task, "config": config, "baseline": base}
                if not runs[base]:
                    if baselines:
                        out.append({**entry, "figure": None, "seeds": [], "n": 0,
                                    "note": "the baseline has no finished run of this task"})
                    continue
                if (why := comparable(runs[config], runs[base])) is not None:
                    if baselines:  # asked for: say why not
                        out.append({**entry, "figure": None, "seeds": [], "n": 0, "note": f"not compared: {why}"})
                    continue
                circuits = [any(r.get("frozen_return") is not None for r in runs[c]) for c in (config, base)]
                # a circuit against a float policy: also each one as it is deployed
                keys = RETURNS + ("deployed_return",) * (circuits[0] != circuits[1])
                for key in keys:
                    has = lambda rs: [r for r in rs if r.get(key) is not None]
                    if not has(runs[config]) or not has(runs[base]):
                        continue  # a figure one of the two does not have (a float MLP has no circuit)
                    mine, theirs, unpaired = pair_runs(runs[config], runs[base], key)
                    paired = [r for r in runs[config] if r["seed"] in mine] or has(runs[config])
                    out.append({**entry, "figure": key, "train_steps": sorted({r["train_steps"] for r in paired}),
                                "precision": sorted({str(r.get("precision")) for r in paired}),
                                **(stats.compare_paired(mine, theirs) if mine else
                                   {"seeds": [], "n": 0, "note": "not paired: " + "; ".join(unpaired)}),
                                "unpaired": unpaired})
    return out
