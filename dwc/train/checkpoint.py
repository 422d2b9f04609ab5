"""Checkpoints: saving and restoring the random state, loading a checkpoint with one-line errors,
and rebuilding a trained actor from a policy folder (a run directory or an exported policy)."""
from __future__ import annotations

import pickle
import random
import zipfile
from pathlib import Path

import numpy as np
import torch

from dwc.core.errors import UserError
from dwc.core.rundir import CHECKPOINT, load_config
from dwc.models import build_actor
from dwc.train.envs import check_env_id


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])
    if s.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def load_checkpoint(path: Path, map_location="cpu") -> dict:
    """Load a checkpoint or raise a one-line UserError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=False)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError, OSError) as e:
        raise UserError(f"corrupt or truncated checkpoint {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if not isinstance(ckpt, dict) or "step" not in ckpt or "config" not in ckpt:
        raise UserError(f"corrupt checkpoint {path}: not a dwc checkpoint")
    return ckpt



def load_actor(run_dir: Path, device: str = "cpu"):
    """Rebuild the trained actor of a run directory in eval mode, normaliser frozen."""
    run_dir = Path(run_dir)
    cfg = load_config(run_dir)
    ckpt = load_checkpoint(run_dir / CHECKPOINT, map_location=device)
    if "actor" not in ckpt:  # a distillation's step 0, written before its teacher trains
        raise UserError(f"{run_dir} has no trained policy yet: its teacher ({run_dir / 'teacher'}) trains first")
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
