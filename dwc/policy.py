"""A trained policy folder (a run directory or an exported policy) as a PyTorch actor: loading it
for evaluation and compilation, and exporting the slim copy shipped in policies/."""
from __future__ import annotations

import shutil
from pathlib import Path

import torch

from .errors import UserError
from .models import build_actor
from .rl.envs import check_env_id
from .rl.run import learning_curve_png, load_checkpoint
from .rundir import CHECKPOINT, COMMANDS, LEGS, load_config, write_json


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
