"""``train``: set up a run (device, precision, seeds, run directory) and hand it to its algorithm.
Evaluation is dwc.evaluation's (train_and_evaluate is what ``dwc train`` runs)."""
from __future__ import annotations

from pathlib import Path

import torch

from ..config import TrainConfig
from ..errors import UserError
from .common import keep_freed_memory, resolve_device, resolve_precision
from .envs import check_env_id
from .run import RunDir, seed_everything


def train(cfg: TrainConfig, out: Path, resume: bool = False, progress: bool = True,
          command: list[str] | None = None, log=print) -> torch.device:
    """Train (or resume) into ``out`` up to ``cfg.steps``; returns the device it trained on.
    ``command`` (the CLI words) is recorded in RUN/commands.txt; ``log`` takes the status lines
    (stderr where stdout carries JSON)."""
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
    try:
        run.record_leg(device=str(device), where=where, precision=str(precision).removeprefix("torch."))
        if run.start_step >= cfg.steps:
            log(f"{out}: already at step {run.start_step} >= --steps {cfg.steps}; nothing to train")
        else:
            from .distill import train_distill
            from .ppo import train_ppo
            from .sac import train_sac
            {"sac": train_sac, "ppo": train_ppo, "distill": train_distill}[cfg.algo](cfg, run, device)
    finally:
        run.close()
    return device
