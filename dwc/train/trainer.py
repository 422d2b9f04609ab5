"""``train``: set up a run (device, precision, seeds, run directory) and hand it to its algorithm.
Evaluation is dwc.flows.evaluate's (train_and_evaluate is what ``dwc train`` runs)."""
from __future__ import annotations

from pathlib import Path

import torch

from dwc.core.config import RESUMABLE, TrainConfig, resume_config
from dwc.core.errors import UserError
from dwc.core.rundir import CHECKPOINT, load_config
from dwc.train.common import keep_freed_memory, resolve_device, resolve_precision
from dwc.train.envs import check_env_id
from dwc.train.run import RunDir
from dwc.train.checkpoint import rng_state, seed_everything, set_rng_state


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
    run = RunDir(out, cfg, resume=resume, progress=progress, command=command, log=log)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} CPU thread(s)"
    log(f"training {cfg.algo} {cfg.actor.policy} on {cfg.env}: device {device} ({where}), "
          f"{str(precision).removeprefix('torch.')} matmuls")
    try:
        run.record_leg(device=str(device), where=where, precision=str(precision).removeprefix("torch."))
        if run.start_step >= cfg.steps:
            log(f"{out}: already at step {run.start_step} >= --steps {cfg.steps}; nothing to train")
        else:
            from dwc.train.distill import train_distill
            from dwc.train.ppo import train_ppo
            from dwc.train.sac import train_sac
            if cfg.algo == "distill" and not cfg.distill.teacher:
                _train_own_teacher(cfg, run)
            {"sac": train_sac, "ppo": train_ppo, "distill": train_distill}[cfg.algo](cfg, run, device)
    finally:
        run.close()
    return device


def _train_own_teacher(cfg: TrainConfig, run: RunDir) -> None:
    """A distillation without --teacher: its step-0 checkpoint (from then on the run resumes, its teacher's
    progress too), then RUN/teacher trained, resumed or found finished, this process's random streams left
    as they were (dwc.train.distill)."""
    from dwc.train.distill import OWN_TEACHER, teacher_config
    if not run.resume_state:
        run.save_checkpoint({"step": 0, "before_teacher": True})
    path, tcfg = run.path / OWN_TEACHER, teacher_config(cfg)
    resume = (path / CHECKPOINT).exists()
    if resume:  # the same teacher, trained further if --teacher-steps grew
        stored = load_config(path)
        what = lambda c: {k: v for k, v in c.to_dict().items() if k not in RESUMABLE}
        if what(stored) != what(tcfg):
            raise UserError(f"{path} holds another teacher than this run trains; delete it to train it again")
        tcfg = resume_config(stored, {k: getattr(tcfg, k) for k in RESUMABLE})
    run.say(f"first its teacher, {path}: a float MLP 2 x {cfg.actor.hidden} by SAC for {tcfg.steps} steps"
            + (" (resumed)" if resume else ""))
    saved = rng_state()
    train(tcfg, path, resume=resume, progress=run.progress, command=None, log=run.say)
    set_rng_state(saved)
