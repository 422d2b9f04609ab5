"""The run directory while training: atomic checkpoints, RNG state, metrics (JSONL + TensorBoard),
progress bar, learning-curve plots. The file layout and the torch-free readers are in dwc.core.rundir."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from dwc.core.config import TrainConfig
from dwc.core.errors import OptionError, UserError
from dwc.train.checkpoint import load_checkpoint, rng_state
from dwc.core.rundir import (CHECKPOINT, COMMANDS, CONFIG, LEGS, LOCK, METRICS, atomic_write_bytes, code_version, episode_returns, hold_lock, machine, read_metrics, record_checkpoint, write_json)


class RunDir:
    """Owns the run directory's files; the training loops only call its methods."""

    def __init__(self, path: Path, cfg: TrainConfig, resume: bool, progress: bool = True,
                 command: list[str] | None = None, log=print):
        self.path = Path(path)
        self.say = log  # status lines (stderr where stdout carries JSON); log() writes metrics
        self.ckpt_path = self.path / CHECKPOINT
        self.resume_state: dict | None = None
        created = not self.path.exists()
        self._lock = hold_lock(self.path, "training")  # before reading or clearing anything in it
        try:
            self._open(cfg, resume, progress, command)
        except BaseException:
            if self._lock:
                self._lock.close()
            if created:  # a refused start leaves no folder behind
                shutil.rmtree(self.path, ignore_errors=True)
            raise

    def _open(self, cfg: TrainConfig, resume: bool, progress: bool, command: list[str] | None) -> None:
        if resume:
            if not self.ckpt_path.exists():
                raise OptionError("resume", f": no checkpoint in {self.path} to resume from; a run stopped before "
                                f"its first checkpoint starts again without --resume")
            self.resume_state = load_checkpoint(self.ckpt_path)
        elif (self.path / CONFIG).exists() and not self.ckpt_path.exists():
            # a run stopped before its first checkpoint: nothing to keep, so this start begins it again
            (self.path / METRICS).unlink(missing_ok=True)
            shutil.rmtree(self.path / "tb", ignore_errors=True)
        elif any(p.name != LOCK for p in self.path.iterdir()):
            raise UserError(f"output directory {self.path} already exists and is not empty; "
                            f"pass --resume to continue it or choose another --out")
        self.cfg = cfg
        write_json(self.path / CONFIG, cfg.to_dict())
        self.start_step = int(self.resume_state["step"]) if self.resume_state else 0
        if command:
            import shlex
            with open(self.path / COMMANDS, "a") as f:
                f.write(f"# from step {self.start_step}\n{shlex.join(command)}\n")
        self._truncate_metrics(self.start_step)
        self._metrics = open(self.path / METRICS, "a", buffering=1)  # line-buffered: tail -f works
        from torch.utils.tensorboard import SummaryWriter  # slow import, only when training
        # purge_step drops events a crashed run logged after its last checkpoint.
        self.tb = SummaryWriter(str(self.path / "tb"), purge_step=self.start_step or None)
        self.progress = progress
        self.bar = None
        # what a checkpoint stores of the random streams: the process's (a seed trained with others
        # sets its own, dwc.train.multiseed)
        self.rng = rng_state

    def record_leg(self, **facts) -> None:
        """RUN/legs.json: what each start of this run (the first, then every resume) trained with, as
        resolved on its machine (--precision auto, --device auto), from which step."""
        p = self.path / LEGS
        legs = json.loads(p.read_text()) if p.exists() else []
        legs = [leg for leg in legs if leg["from_step"] < self.start_step]  # legs a crash discarded go
        write_json(p, legs + [dict(from_step=self.start_step, **facts, code=code_version(), machine=machine())])

    def _truncate_metrics(self, step: int) -> None:
        """Keep only metrics up to the checkpoint, so a resumed run never logs a step twice (a line
        torn by a kill or a full disk mid-write goes too)."""
        p = self.path / METRICS
        if not p.exists():
            return
        kept = [json.dumps(r) for r in read_metrics(p) if r.get("step", 0) <= step]
        atomic_write_bytes(p, lambda f: f.write("".join(l + "\n" for l in kept).encode()))

    def log(self, step: int, **scalars) -> None:
        rec = {"step": int(step)}
        for k, v in scalars.items():
            v = float(v)
            rec[k] = v
            self.tb.add_scalar(k, v, step)
        self._metrics.write(json.dumps(rec) + "\n")

    def save_checkpoint(self, state: dict) -> None:
        state = dict(state, config=self.cfg.to_dict(), rng=self.rng())
        self._metrics.flush()
        self.tb.flush()
        atomic_write_bytes(self.ckpt_path, lambda f: torch.save(state, f))
        record_checkpoint(self.path, state["step"], state.get("cost"))  # for dwc report and dwc sweep

    def start_progress(self, total: int):
        import sys

        from tqdm import tqdm
        # In a log file (CI, nohup) print a line every 30 s instead of redrawing.
        self.bar = tqdm(total=total, initial=self.start_step, unit="step", dynamic_ncols=True,
                        mininterval=0.2 if sys.stderr.isatty() else 30.0,
                        disable=not self.progress, desc=f"{self.cfg.algo} {self.cfg.actor.policy} {self.cfg.env}")
        return self.bar

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self._metrics.close()
        self.tb.close()
        if self._lock:
            self._lock.close()  # lets go of RUN/.lock


def learning_curve_png(metrics: Path, path: Path, title: str = "") -> bool:
    """Episodic return vs env step from a run's metrics.jsonl (raw points and a moving median);
    False when the run logged no episodes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = episode_returns(metrics)
    if not pts:
        return False
    steps, rets = np.array(pts).T
    order = np.argsort(steps, kind="stable")
    steps, rets = steps[order], rets[order]
    k = max(1, len(rets) // 50)
    smooth = [np.median(rets[max(0, i - k):i + k + 1]) for i in range(len(rets))]
    fig, ax = plt.subplots(figsize=(5, 3), dpi=110)
    ax.plot(steps, rets, ".", ms=1.5, alpha=0.3, color="tab:blue")
    ax.plot(steps, smooth, color="tab:blue", lw=1.5)
    ax.set_xlabel("env steps")
    ax.set_ylabel("episodic return (training)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True
