"""Shipping trained policies: the slim copy of a run (``dwc export``), the median seed of a sweep
config, a sweep's archive, and the README written next to a shipped policy."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from dwc.core.catalog import deployed_return
from dwc.core.errors import OptionError, UserError
from dwc.train.checkpoint import load_actor, load_checkpoint
from dwc.train.run import learning_curve_png
from dwc.core.rundir import CHECKPOINT, COMMANDS, LEGS, load_config, write_json


SLIM_KEYS = {"step", "config", "actor", "obs_dim", "act_dim"}  # all an exported checkpoint holds


def is_exported(run_dir: Path) -> bool:
    """Whether a policy folder is :func:`export_policy`'s slim copy (no training state to resume)."""
    return set(load_checkpoint(Path(run_dir) / CHECKPOINT)) <= SLIM_KEYS


def export_policy(run_dir: Path, out: Path) -> dict:
    """Copy a trained run's inference essentials (a few MB at most) into ``out``: config.json, a slim
    checkpoint.pt (actor only, wiring as indices), eval.json, metrics.jsonl and the commands that
    trained it. The result is itself a run directory: ``dwc eval OUT`` works on it."""
    run_dir, out = Path(run_dir), Path(out)
    actor, cfg, step = load_actor(run_dir)
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} already exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    slim = {"step": step, "config": cfg.to_dict(), "actor": actor.inference_state_dict(),
            "obs_dim": actor.normalizer.mean.numel(), "act_dim": actor.action_scale.numel()}
    assert set(slim) == SLIM_KEYS
    torch.save(slim, out / CHECKPOINT)
    write_json(out / "config.json", cfg.to_dict())
    for name in ("eval.json", "metrics.jsonl", COMMANDS, LEGS):
        if (run_dir / name).exists():
            shutil.copy2(run_dir / name, out / name)
    if (out / "metrics.jsonl").exists():
        learning_curve_png(out / "metrics.jsonl", out / "learning_curve.png",
                           f"{cfg.env}, {cfg.actor.policy} / {cfg.algo}, {step} steps")
    return {"out": str(out), "bytes": sum(f.stat().st_size for f in out.iterdir()), "step": step}


# which of a sweep config's seeds becomes the shipped policy: a typical one, never the best
MEDIAN_RULE = ("the median seed by the deployed policy's return (its frozen integer circuit's where it has one, "
               "else the float policy's) over the finished seeds of the task and config; with an even number of "
               "seeds the lower of the two middle ones")


def median_run(results: list[dict]) -> dict:
    """The run :data:`MEDIAN_RULE` picks (ties in return broken by the lower seed)."""
    ordered = sorted(results, key=lambda r: (deployed_return(r), r["seed"]))
    return ordered[(len(ordered) - 1) // 2]


def export_from_sweep(sweep_dir: Path, config: str, out: Path, task: str | None = None,
                      seed: int | None = None) -> dict:
    """Ship one run of a sweep: :func:`export_policy` of the median seed (:data:`MEDIAN_RULE`) of
    ``task``/``config``, or of ``seed``; plus ``seeds.json`` (every finished seed's returns and
    circuit figures, which seed was shipped and why) and, where the sweep ran the hardware stages,
    ``hardware/`` (that run's build summary, verification report and synthesis report)."""
    from dwc.flows.report_runs import load_runs
    sweep_dir = Path(sweep_dir)
    state, results = load_runs(sweep_dir)
    tasks = list(dict.fromkeys(rec["task"] for rec in state["runs"].values()))
    configs = list(dict.fromkeys(rec["config"] for rec in state["runs"].values()))
    if task is None:
        if len(tasks) > 1:
            raise UserError(f"{sweep_dir} has several tasks: give --task ({', '.join(tasks)})")
        task = tasks[0]
    if task not in tasks:
        raise OptionError("task", f" {task!r}: {sweep_dir} has {', '.join(tasks)}")
    if config not in configs:
        raise OptionError("config", f" {config!r}: {sweep_dir} has {', '.join(configs)}")
    runs = sorted((r for r in results if (r["task"], r["config"]) == (task, config)), key=lambda r: r["seed"])
    if not runs:
        raise UserError(f"no run of {task}/{config} in {sweep_dir} has finished yet")
    # seeds compare at one budget: a seed that finished at fewer steps (the spec's steps raised since) is left out
    budget = max(r["train_steps"] for r in runs)
    other_budget = [f"seed {r['seed']}: {r['train_steps']} steps" for r in runs if r["train_steps"] != budget]
    runs = [r for r in runs if r["train_steps"] == budget]
    if seed is None:
        chosen, rule = median_run(runs), MEDIAN_RULE
    else:
        found = [r for r in runs if r["seed"] == seed]
        if not found:
            raise OptionError("seed", f" {seed}: the finished seeds of {task}/{config} at {budget} steps are "
                            f"{', '.join(str(r['seed']) for r in runs)}")
        chosen, rule = found[0], "the seed given (--seed)"
    run_dir = Path(chosen["dir"])
    summary = export_policy(run_dir / "run", out)
    out = Path(out)
    copied = []
    if reports := hardware_reports(run_dir / "build"):  # the sweep's compile / verify / synth of this run
        (out / "hardware").mkdir()
        for rel in reports:
            name = {"summary.json": "summary.json", "circuit/verify_report.json": "verify_report.json"}.get(
                rel, "synth_report.json")
            shutil.copy2(run_dir / "build" / rel, out / "hardware" / name)
            copied.append(name)
    keys = ("seed", "train_steps", "episodes", "float_return", "frozen_return", "rtl_return", "rtl_equals_frozen",
            "ir_luts", "comparators", "luts", "lut4_sites", "fmax_mhz", "latency_cycles", "target")
    record = {"sweep": str(sweep_dir.resolve()), "task": task, "config": config, "shipped_seed": chosen["seed"],
              "rule": rule, "deployed_return": "frozen" if chosen.get("frozen_return") is not None else "float",
              "runs": [{k: r.get(k) for k in keys} for r in runs], "left_out_other_budget": other_budget,
              "hardware_files": copied,
              "seeds_planned": sum((rec["task"], rec["config"]) == (task, config) for rec in state["runs"].values())}
    write_json(out / "seeds.json", record)
    (out / "README.md").write_text(shipped_readme(record, load_config(out).to_dict(), out))
    return dict(summary, seed=chosen["seed"], seeds=[r["seed"] for r in runs], planned=record["seeds_planned"],
                median=seed is None,
                returns=[deployed_return(r) for r in runs], deployed=record["deployed_return"], rule=rule,
                hardware=copied, task=task, config=config, left_out=other_budget)


def hardware_reports(build: Path) -> list[str]:
    """The reports of a sweep run's hardware stages that exist, as paths under its build folder: the
    build summary, the verification report and the synthesis report."""
    build = Path(build)
    if not (build / "summary.json").exists():
        return []
    syn = json.loads((build / "summary.json").read_text()).get("synth") or {}
    wanted = ["summary.json", "circuit/verify_report.json"]
    if syn.get("target"):
        wanted.append(f"circuit/synth/{syn['target']}/report.json")
    return [rel for rel in wanted if (build / rel).exists()]


def archive_sweep(sweep_dir: Path, dest: Path) -> dict:
    """Every finished run of a sweep, slim, into the sweep folder ``dest`` (made, or added to): per run its
    result.json, the trained policy as :func:`export_policy` leaves it (config, actor, evaluation, metrics,
    commands) and its hardware reports; no replay buffer, optimiser or build products, so a few hundred KB
    a run. ``dwc report`` and ``dwc export`` read the archive as they read the sweep, and ``dwc sweep``
    counts its runs as finished when it is copied back as a sweep folder. A run already in ``dest`` is
    kept as it is."""
    from dwc.flows.report_runs import load_runs
    sweep_dir, dest = Path(sweep_dir), Path(dest)
    state, results = load_runs(sweep_dir)
    if dest.exists() and not dest.is_dir():
        raise UserError(f"{dest} is a file: --out names the archive's folder")
    old = json.loads((dest / "sweep.json").read_text()) if (dest / "sweep.json").exists() else None
    if dest.exists() and any(dest.iterdir()) and old is None:
        raise UserError(f"{dest} exists and is not a sweep folder: give a new folder or an earlier archive")
    dest.mkdir(parents=True, exist_ok=True)
    added, kept = [], []
    for r in results:
        src, rel = Path(r["dir"]), Path(r["dir"]).relative_to(sweep_dir)
        to = dest / rel
        if (to / "result.json").exists():
            kept.append(r["id"])
            continue
        if to.exists():  # a copy that stopped half-way: done again
            shutil.rmtree(to)
        export_policy(src / "run", to / "run")
        for rel_report in hardware_reports(src / "build"):
            (to / "build" / rel_report).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / "build" / rel_report, to / "build" / rel_report)
        if (src / "attempts.jsonl").exists():
            shutil.copy2(src / "attempts.jsonl", to / "attempts.jsonl")
        shutil.copy2(src / "result.json", to / "result.json")  # last: it marks the run as complete
        added.append(r["id"])
    runs = dict(old["runs"]) if old else {}
    for rid, rec in state["runs"].items():
        runs.setdefault(rid, rec)
    for rec in runs.values():
        rec["state"] = "finished" if (dest / rec["dir"] / "result.json").exists() else "todo"
        rec.pop("error", None)
    if (sweep_dir / "spec.yaml").exists() and not (dest / "spec.yaml").exists():
        shutil.copy2(sweep_dir / "spec.yaml", dest / "spec.yaml")
    spec = "spec.yaml" if (dest / "spec.yaml").exists() else (old or state)["spec"]  # the archive's own copy
    write_json(dest / "sweep.json", {**(old or state), "spec": spec, "out": str(dest), "runs": runs})
    return {"out": str(dest), "added": added, "kept": kept, "runs": len(runs),
            "finished": sum(rec["state"] == "finished" for rec in runs.values()),
            "bytes": sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())}


def _f(x, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def shipped_readme(record: dict, cfg: dict, out: Path) -> str:
    """The README of a policy shipped from a sweep: what it is, how it was trained, every seed's
    returns with the shipped one marked, and its circuit's hardware figures."""
    from dwc.core.catalog import circuit_size
    shipped = next(r for r in record["runs"] if r["seed"] == record["shipped_seed"])
    circuit = cfg["actor"]["policy"] != "mlp"  # a float MLP has no frozen circuit
    commands = (out / COMMANDS).read_text().splitlines() if (out / COMMANDS).exists() else []
    first = next((c for c in commands if c.strip() and not c.startswith("#")), "(not recorded)")
    lines = [f"# {record['task']}, {circuit_size(cfg['actor'])}, {cfg['algo'].upper()}, {shipped['train_steps']:,} steps",
             "",
             f"Seed {record['shipped_seed']} of config `{record['config']}` of a `dwc sweep` "
             f"({len(record['runs'])} of its {record['seeds_planned']} seeds finished when it was shipped), chosen by "
             f"rule: {record['rule']}. "
             f"Trained on {cfg['device']} at {cfg['precision']} precision; the first command "
             f"(`commands.txt` has every leg):", "", f"    {first}", "",
             f"Deterministic evaluation, {shipped['episodes']} episodes per seed (mean return"
             + ("; frozen = the integer circuit, RTL = its Verilog in Verilator, closed loop):" if circuit else "):"), ""]
    if circuit:
        lines += ["| seed | float | frozen | RTL | RTL = frozen | LUTs | Fmax MHz | latency cycles | FPGA |",
                  "|---|---|---|---|---|---|---|---|---|"]
    else:
        lines += ["| seed | return |", "|---|---|"]
    for r in record["runs"]:
        mark = " (shipped)" if r["seed"] == record["shipped_seed"] else ""
        eq = {True: "yes", False: "NO", None: "-"}[r["rtl_equals_frozen"]]
        lines.append(f"| {r['seed']}{mark} | {_f(r['float_return'])} | {_f(r['frozen_return'])} | "
                     f"{_f(r['rtl_return'])} | {eq} | {_f(r['luts'] or r['ir_luts'], '{:.0f}')} | "
                     f"{_f(r['fmax_mhz'])} | {_f(r['latency_cycles'], '{:.0f}')} | {r.get('target') or '-'} |"
                     if circuit else f"| {r['seed']}{mark} | {_f(r['float_return'])} |")
    lines += ["", "Every seed's figures: `seeds.json`."
              + (" The shipped seed's build summary, verification and synthesis reports: `hardware/`."
                 if record["hardware_files"] else ""),
              f"Re-evaluate: `dwc eval {out}" + (f" --frozen`; compile it: `dwc compile {out} --out BUILD`." if circuit
                                                 else "`."), ""]
    return "\n".join(lines)
