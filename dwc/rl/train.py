"""Entry points behind ``dwc train`` and ``dwc eval``: set up, dispatch to an algorithm, evaluate."""
from __future__ import annotations

from pathlib import Path

import torch

from ..config import TrainConfig
from ..errors import UserError
from ..models import build_actor
from .common import actor_act_fn, evaluate, keep_freed_memory, resolve_device, resolve_precision
from .envs import check_env_id
from .run import (CHECKPOINT, COMMANDS, LEGS, RunDir, learning_curve_png, load_checkpoint, load_config,
                  seed_everything, write_json)

EVAL_SEED_OFFSET = 10_000  # evaluation episodes never reuse training seeds


def train(cfg: TrainConfig, out: Path, resume: bool = False, progress: bool = True,
          command: list[str] | None = None, frozen: bool = False, log=print) -> dict:
    """Train (or resume) into ``out``; finish with a deterministic evaluation written to eval.json
    (with ``frozen``, of the frozen integer circuit too). ``command`` (the CLI words) is recorded in
    RUN/commands.txt; ``log`` takes the status lines (stderr where stdout carries JSON)."""
    if cfg.algo not in ("sac", "ppo", "distill"):
        raise UserError(f"unknown --algo {cfg.algo!r} (choose sac, ppo or distill)")
    device = resolve_device(cfg.device)
    precision = resolve_precision(cfg.precision, device)
    check_env_id(cfg.env).close()
    torch.set_num_threads(cfg.threads)
    keep_freed_memory()
    seed_everything(cfg.seed)
    run = RunDir(out, cfg, resume=resume, progress=progress, command=command)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} CPU thread(s)"
    log(f"training {cfg.algo} {cfg.actor.policy} on {cfg.env}: device {device} ({where}), "
          f"{str(precision).removeprefix('torch.')} matmuls")
    run.record_leg(device=str(device), where=where, precision=str(precision).removeprefix("torch."))
    try:
        if run.start_step >= cfg.steps:
            log(f"{out}: already at step {run.start_step} >= --steps {cfg.steps}; evaluating only")
        else:
            from .distill import train_distill
            from .ppo import train_ppo
            from .sac import train_sac
            {"sac": train_sac, "ppo": train_ppo, "distill": train_distill}[cfg.algo](cfg, run, device)
    finally:
        run.close()
    return evaluate_run(out, cfg.eval_episodes, device=str(device), progress=progress, frozen=frozen)


def load_actor(run_dir: Path, device: str = "cpu"):
    """Rebuild the trained actor of a run directory in eval mode, normaliser frozen."""
    run_dir = Path(run_dir)
    cfg = load_config(run_dir)
    ckpt = load_checkpoint(run_dir / CHECKPOINT, map_location=device)
    env = check_env_id(cfg.env)
    space = env.action_space
    env.close()
    actor = build_actor(cfg.actor, ckpt["obs_dim"], ckpt["act_dim"], space.low, space.high)
    try:
        actor.load_state_dict(ckpt["actor"])
    except RuntimeError as e:
        raise UserError(f"checkpoint {run_dir / CHECKPOINT} does not match its config.json: "
                        f"{str(e).splitlines()[0]}") from None
    actor.normalizer.freeze()
    return actor.to(device).eval(), cfg, ckpt["step"]


def export_policy(run_dir: Path, out: Path) -> dict:
    """Copy a trained run's inference essentials (a few MB at most) into ``out``: config.json, a slim
    checkpoint.pt (actor only, wiring as indices), eval.json, metrics.jsonl and the commands that
    trained it. The result is itself a run directory: ``dwc eval OUT`` works on it."""
    import shutil

    run_dir, out = Path(run_dir), Path(out)
    actor, cfg, step = load_actor(run_dir)
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} already exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    slim = {"step": step, "config": cfg.to_dict(), "actor": actor.inference_state_dict(),
            "obs_dim": actor.normalizer.mean.numel(), "act_dim": actor.action_scale.numel()}
    torch.save(slim, out / CHECKPOINT)
    write_json(out / "config.json", cfg.to_dict())
    for name in ("eval.json", "metrics.jsonl", COMMANDS, LEGS):
        if (run_dir / name).exists():
            shutil.copy2(run_dir / name, out / name)
    if (out / "metrics.jsonl").exists():
        learning_curve_png(out / "metrics.jsonl", out / "learning_curve.png",
                           f"{cfg.env}, {cfg.actor.policy} / {cfg.algo}, {step} steps")
    return {"out": str(out), "bytes": sum(f.stat().st_size for f in out.iterdir()), "step": step}


def evaluate_run(run_dir: Path, episodes: int, device: str = "cpu", seed: int | None = None,
                 progress: bool = True, frozen: bool = False, write: bool = True) -> dict:
    """Deterministic episodes of the float policy; with ``frozen`` also of the frozen integer IR
    (what goes into hardware) on the same seeds, reported under ``"frozen"``."""
    if episodes < 1:
        raise UserError(f"--episodes must be >= 1, got {episodes}")
    dev = resolve_device(device)
    actor, cfg, step = load_actor(run_dir, str(dev))
    seed = cfg.seed + EVAL_SEED_OFFSET if seed is None else seed
    if frozen:  # freeze first: a policy that cannot be frozen fails before any episode runs
        from ..compile import freeze_run
        from ..ir.fast import FastExecutor
        circuit = FastExecutor(freeze_run(Path(run_dir)))  # bit-exact with the reference executor
    result = evaluate(actor_act_fn(actor, dev), cfg.env, episodes, seed, progress=progress)
    result.update(policy=cfg.actor.policy, algo=cfg.algo, train_steps=int(step), deterministic=True)
    if stats := actor.circuit_stats():  # the trained circuit's size against its budgets
        result["circuit"] = dict(stats, max_luts=cfg.actor.max_luts or None,
                                 max_comparators=cfg.actor.max_comparators or None, target=cfg.target or None)
    if cfg.algo == "distill":  # a distilled run's budget also counts its teacher's training
        from .distill import teacher_summary
        try:
            result["teacher"] = teacher_summary(cfg.distill.teacher)
        except UserError:
            result["teacher"] = {"path": cfg.distill.teacher, "missing": True}
    if frozen:
        result["frozen"] = evaluate(lambda obs: circuit.act(obs)[0], cfg.env, episodes, seed, progress=progress)
    if write:  # benchmarks read shipped policies without touching their recorded evaluation
        write_json(Path(run_dir) / "eval.json", result)
    return result
