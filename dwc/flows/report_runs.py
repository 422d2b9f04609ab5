"""A sweep folder as ``dwc report`` reads it: the result of every finished run with the options and
precision it trained with, the runs not finished (started, failed or not started) and the training
they still need, and the figures a run's result holds."""
from __future__ import annotations

import json
from pathlib import Path

from dwc.core.catalog import deployed_return
from dwc.core.errors import UserError
from dwc.core.rundir import CONFIG, LEGS, checkpoint_info, estimated_training_seconds, last_logged_step

# per-run figures summarised over seeds
FIGURES = ("float_return", "frozen_return", "rtl_return", "luts", "lut4_sites", "ir_luts", "comparators", "fmax_mhz",
           "latency_cycles")
RETURNS = ("float_return", "frozen_return", "rtl_return")  # these get IQMs, CIs and comparisons
RETURN_NAMES = {"float_return": "float", "frozen_return": "frozen", "rtl_return": "hardware",
                "deployed_return": "deployed"}


# what a comparison holds apart from the treatment: the budget (paired on separately), the seed (the
# pairing key), the task, and where a run ran
NOT_TREATMENT = {"env", "seed", "steps", "precision", "device", "cuda_graphs", "threads", "checkpoint_every",
                 "eval_episodes"}


def _options(cfg: dict) -> dict:
    """The options of a run's config.json that decide what it trains, other than its precision:
    two configs whose runs differ in none of these differ in precision alone."""
    return {k: v for k, v in cfg.items() if k not in NOT_TREATMENT}


def run_config(run_dir: Path) -> dict:
    """The run's config.json, with "precision" as it trained: --precision auto resolves per machine,
    so it is read from the legs the run recorded (joined with "+" if its legs differ)."""
    try:
        cfg = json.loads((run_dir / "run" / CONFIG).read_text())
    except (OSError, ValueError):
        return {}
    if cfg.get("precision") == "auto":
        try:
            legs = json.loads((run_dir / "run" / LEGS).read_text())
            cfg["precision"] = "+".join(dict.fromkeys(leg["precision"] for leg in legs)) or "auto"
        except (OSError, ValueError, KeyError, TypeError):
            pass  # runs from before legs.json: "auto", compared as written
    return cfg


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
            cfg = run_config(sweep_dir / rec["dir"])
            r = json.loads(p.read_text())
            results.append(dict(r, dir=str(sweep_dir / rec["dir"]), precision=cfg.get("precision"),
                                options=_options(cfg), deployed_return=deployed_return(r)))
    # a distilled run's cost counts its teacher's, in CPU hours and env steps
    for r in results:
        r["cpu_hours"], r["cpu_hours_estimated"] = training_hours(r, Path(r["dir"]) / "run")
    by_id = {r["id"]: r for r in results}
    steps = {r["id"]: r.get("train_steps") for r in results}
    for r in results:
        teacher = by_id.get(r.get("teacher")) if r.get("teacher") else {"cpu_hours": 0.0}
        if r["cpu_hours"] is not None and teacher is not None and teacher["cpu_hours"] is not None:
            r["cpu_hours_with_teacher"] = r["cpu_hours"] + teacher["cpu_hours"]
            r["cpu_hours_estimated"] = r["cpu_hours_estimated"] or bool(teacher.get("cpu_hours_estimated"))
        teacher = steps.get(r.get("teacher")) if r.get("teacher") else 0
        r["steps_with_teacher"] = None if teacher is None or r.get("train_steps") is None else r["train_steps"] + teacher
    return state, results


def training_hours(result: dict, run: Path) -> tuple[float | None, bool]:
    """A run's training CPU hours as its result recorded them (all its legs, its share of a process that
    trained seeds together), else estimated from the rates its metrics logged (wall-clock: a run trained
    before dwc recorded CPU time); and whether it is the estimate."""
    if result.get("train_cpu_s") is not None:
        return result["train_cpu_s"] / 3600, False
    seconds = estimated_training_seconds(run)
    return (None, False) if seconds is None else (seconds / 3600, True)


def unfinished(sweep_dir: Path, state: dict) -> list[dict]:
    """The runs without a result, in the spec's order: "started" (a checkpoint in this folder that the
    same dwc sweep command resumes from: its step, and the last step logged since, which moves while the
    run trains), "failed" (its error; resumes too, from a checkpoint if it has one) or "not started" (in
    this folder: an archive made by dwc export holds finished runs only)."""
    rows = []
    for rid, rec in state["runs"].items():
        d = Path(sweep_dir) / rec["dir"]
        if (d / "result.json").exists():
            continue
        ck = checkpoint_info(d / "run")
        failed = rec.get("state") == "failed"
        row = {"id": rid, "state": "failed" if failed else "started" if ck else "not started",
               "checkpoint_step": ck["step"] if ck else None,
               "logged_step": last_logged_step(d / "run") if ck else None,
               "steps": run_config(d).get("steps") if ck else None}
        rows.append(dict(row, error=rec.get("error")) if failed else row)
    return rows


def training_left(sweep_dir: Path, state: dict) -> dict | None:
    """The training the unfinished runs still need on one worker (dwc.flows.sweep_spec.TimeLeft: each run at its own
    last training rate, or its task and config's in this folder); None where the folder's spec.yaml does
    not load (written by another dwc version)."""
    from dwc.flows.sweep_spec import TimeLeft, load_spec
    try:
        jobs = load_spec(Path(sweep_dir) / "spec.yaml", scale_down=state.get("scale_down", False)).jobs(
            Path(sweep_dir).resolve())
    except (UserError, OSError):
        return None
    left = [[j] for j in jobs if j.id in state["runs"] and not (j.dir / "result.json").exists()]
    seconds, unknown = TimeLeft(jobs, 1)(left)
    return {"seconds_on_one_worker": round(seconds), "runs_without_rate": unknown}


def planned_actor(sweep_dir: Path | None, state: dict, task: str, config: str) -> dict | None:
    """The actor config of a (task, config) none of whose runs finished yet, from the first of its
    run directories that has a config.json (a run that started), or None."""
    for rec in state["runs"].values() if sweep_dir else ():
        if (rec["task"], rec["config"]) == (task, config) and (actor := run_config(sweep_dir / rec["dir"]).get("actor")):
            return actor
    return None
