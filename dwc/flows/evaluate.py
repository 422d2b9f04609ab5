"""Evaluation of trained policies, above training (dwc.train) and the IR (dwc.ir): deterministic
episodes of the float policy and of its frozen integer circuit, and training followed by them."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dwc.core.config import EVAL_SEED_OFFSET, TrainConfig, load_config
from dwc.core.defaults import EVAL_DEVICE
from dwc.core.errors import OptionError, UserError
from dwc.train.checkpoint import load_actor
from dwc.train.common import actor_act_fn, evaluate, resolve_device
from dwc.core.rundir import training_cpu_seconds, write_json

def train_and_evaluate(cfg: TrainConfig, out: Path, resume: bool = False, progress: bool = True,
                       command: list[str] | None = None, frozen: bool = False, log=print) -> dict:
    """``dwc train``: train (or resume) into ``out`` (:func:`dwc.train.trainer.train`), then the
    deterministic evaluation written to eval.json (with ``frozen``, of the frozen circuit too)."""
    from dwc.train.trainer import train
    device = train(cfg, out, resume=resume, progress=progress, command=command, log=log)
    if cfg.algo == "distill" and not cfg.distill.teacher:  # the teacher it trained, evaluated once
        from dwc.train.distill import teacher_path
        own = teacher_path(cfg, out)
        if not (own / "eval.json").exists():
            log(eval_text(evaluate_run(own, cfg.eval_episodes, device=str(device), progress=progress)))
    return evaluate_run(out, cfg.eval_episodes, device=str(device), progress=progress, frozen=frozen)


def evaluate_run(run_dir: Path, episodes: int, device: str = EVAL_DEVICE, seed: int | None = None,
                 progress: bool = True, frozen: bool = False, write: bool = True) -> dict:
    """Deterministic episodes of the float policy; with ``frozen`` also of the frozen integer IR
    (what goes into hardware) on the same seeds, reported under ``"frozen"``. ``device`` "run" (EVAL_DEVICE):
    the one the run's config names, which its training's own evaluation ran on (cpu for a CUDA run where no GPU is)."""
    if episodes < 1:
        raise OptionError("episodes", f" must be >= 1, got {episodes}")
    dev = _device(run_dir, device)
    actor, cfg, step = load_actor(run_dir, str(dev))
    seed = cfg.seed + EVAL_SEED_OFFSET if seed is None else seed
    if frozen:  # freeze first: a policy that cannot be frozen fails before any episode runs
        from dwc.flows.compile import freeze_run
        from dwc.backends.fast import FastExecutor
        on_cpu = (actor, cfg, step) if dev.type == "cpu" else None  # else freeze a CPU copy of its own
        circuit = FastExecutor(freeze_run(Path(run_dir), loaded=on_cpu))  # bit-exact with the reference executor
    result = evaluate(actor_act_fn(actor, dev), cfg.env, episodes, seed, progress=progress)
    result.update(policy=cfg.actor.policy, algo=cfg.algo, train_steps=int(step), deterministic=True,
                  train_cpu_s=training_cpu_seconds(Path(run_dir)))
    if stats := actor.circuit_stats():  # the trained circuit's size against its budgets
        result["circuit"] = dict(stats, max_luts=cfg.actor.max_luts or None,
                                 max_comparators=cfg.actor.max_comparators or None, target=cfg.target or None)
    if cfg.algo == "distill":  # a distilled run's budget also counts its teacher's training
        from dwc.train.distill import teacher_path, teacher_summary
        try:
            result["teacher"] = teacher_summary(teacher_path(cfg, run_dir))
        except UserError:
            result["teacher"] = {"path": str(teacher_path(cfg, run_dir)), "missing": True}
    if frozen:
        result["frozen"] = evaluate(circuit.act_one, cfg.env, episodes, seed, progress=progress)
    if write:  # benchmarks read shipped policies without touching their recorded evaluation
        write_json(Path(run_dir) / "eval.json", result)
    return result


def _device(run_dir: Path, device: str):
    """``device`` resolved; "run": the run's own (its config.json's), as its training evaluated it."""
    if device != EVAL_DEVICE:
        return resolve_device(device)
    import torch
    own = load_config(run_dir).device
    return resolve_device("cpu" if own.startswith("cuda") and not torch.cuda.is_available() else own)


def evaluate_into(run_dir: Path, episodes: int, out: Path | None = None, device: str = EVAL_DEVICE,
                  seed: int | None = None, progress: bool = True, frozen: bool = False) -> tuple[dict, Path | None]:
    """``dwc eval``: :func:`evaluate_run`, written to ``out``, by default to the run's own eval.json, which
    belongs to its training: not while it trains (the run's lock is held meanwhile), and never to an
    exported policy's recorded one (then nothing is written). Returns the result and where it went."""
    from dwc.flows.export import is_exported
    from dwc.core.rundir import hold_lock
    run_dir = Path(run_dir)
    own = out is None
    out = out or (None if is_exported(run_dir) else run_dir / "eval.json")
    lock = hold_lock(run_dir, "dwc eval", "Its eval.json is written when the training ends; to evaluate "
                     "the latest checkpoint now, pass --out FILE") if own and out is not None else None
    try:
        result = evaluate_run(run_dir, episodes, device=device, seed=seed, progress=progress, frozen=frozen,
                              write=False)
        if out is not None:
            write_json(out, result)
    finally:
        if lock is not None:
            lock.close()
    return result, out


def _cost(result: dict) -> str:
    """The training's CPU time, a distilled run's teacher's beside it, where the checkpoints recorded them."""
    own, teacher = result.get("train_cpu_s"), (result.get("teacher") or {}).get("train_cpu_s")
    if own is None:
        return ""
    span = lambda s: f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"  # noqa: E731
    return f"; training took {span(own)} of CPU time" + (f" (its teacher {span(teacher)})" if teacher else "")


def eval_text(result: dict) -> str:
    """An evaluation (:func:`evaluate_run`) for people: the float policy's returns, then the frozen circuit's."""
    head = f"{result['env']}  {result['policy']}/{result['algo']}"
    lines = [f"{head} after {result['train_steps']} steps: return mean {result['mean_return']:.1f}  median "
             f"{result['median_return']:.1f}  std {result['std_return']:.1f}  over {result['episodes']} "
             f"deterministic episodes" + _cost(result)]
    if "frozen" in result:
        f = result["frozen"]
        lines.append(f"{'frozen integer circuit':>{len(head)}} ({result['train_steps']} steps): return mean "
                     f"{f['mean_return']:.1f}  median {f['median_return']:.1f}  std {f['std_return']:.1f}")
    return "\n".join(lines)


def train_and_evaluate_seeds(cfgs: list[TrainConfig], dirs: list[Path], resume: list[bool], progress: bool = True,
                             commands: list[list[str]] | None = None, log=print,
                             summary: Path | None = None) -> list[dict]:
    """``dwc train --seeds``: train the seeds together, then evaluate each (its eval.json, as dwc train
    writes); with ``summary``, also a JSON file listing the seeds' folders and evaluations."""
    from dwc.train.multiseed import train_seeds

    device = train_seeds(cfgs, dirs, resume, progress=progress, commands=commands, log=log)
    results = [dict(evaluate_run(d, c.eval_episodes, device=str(device), progress=progress), seed=c.seed, run=str(d))
               for c, d in zip(cfgs, dirs)]
    if summary is not None:
        returns = [r["mean_return"] for r in results]
        write_json(summary, {"seeds": [c.seed for c in cfgs], "runs": [str(d) for d in dirs],
                             "mean_return_over_seeds": float(np.mean(returns)),
                             "median_return_over_seeds": float(np.median(returns)), "evaluations": results})
    return results
