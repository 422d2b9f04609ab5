"""The skeleton every training algorithm runs in (SAC, PPO, distillation). The algorithm's own file
keeps its collect and update steps; what is the same for all of them is here: the env-step counter
and progress bar, the episode returns, the periodic metrics (charts/SPS, the circuit's size, how settled
a learnable wiring is),
checkpoints (every ``--checkpoint-every`` steps and at the end), the training's cost and Ctrl-C/SIGTERM::

    with train_loop(run, envs, actor, state) as loop:
        while loop.step < cfg.steps:
            ...                                  # act, envs.step
            loop.advance(n, rewards, dones)      # n more env steps
            ...                                  # update
            loop.report({"losses/...": ..., "charts/SPS": loop.sps()})
            loop.checkpoint_if_due()
    # left normally: a final checkpoint. By Ctrl-C or SIGTERM (KeyboardInterrupt): a checkpoint at the
    # current step, then the interrupt goes on to the CLI, which says how to resume.
"""
from __future__ import annotations

import contextlib
import time
from typing import Callable

from dwc.train.common import EpisodeTracker, RateMeter
from dwc.train.run import RunDir


class TrainLoop:
    """The run's progress: ``step`` (env steps so far, from the checkpoint on resume), the progress bar,
    episode returns, SPS and checkpoints. ``state(step)`` is what the algorithm checkpoints besides the
    step (RunDir adds the config and the RNG states).

    Each checkpoint also holds the training's cost so far, over all its legs: "cpu_s", this process's
    CPU seconds (what a user's machine spent, however loaded it was; environments stepped in worker
    processes, on a GPU host, are not in it), "wall_s", and "from_step", the step from which they count
    (0, or where a run begun before dwc recorded them resumed). ``share`` runs training in one process
    (seeds trained together) split its time equally."""

    def __init__(self, run: RunDir, actor, state: Callable[[int], dict], share: int = 1):
        self.run, self.actor, self.state, self.share = run, actor, state, share
        self.step = self.last_checkpoint = run.start_step
        self.episodes = EpisodeTracker(run.cfg.num_envs)
        self.bar = run.start_progress(run.cfg.steps)
        self.meter = RateMeter(self.step)
        before = (run.resume_state or {}).get("cost")
        self.cost_before = dict(before) if before else {"cpu_s": 0.0, "wall_s": 0.0, "from_step": self.step}
        self.started = (time.process_time(), time.perf_counter())

    def cost(self) -> dict:
        cpu, wall = time.process_time() - self.started[0], time.perf_counter() - self.started[1]
        b = self.cost_before
        return {"cpu_s": round(b["cpu_s"] + cpu / self.share, 3), "wall_s": round(b["wall_s"] + wall / self.share, 3),
                "from_step": b["from_step"]}

    def advance(self, n: int, rewards, dones) -> None:
        """``n`` more env steps, whose rewards and ends (one per env) go to the episode returns."""
        self.step += n
        self.episodes.step(self.run, self.step, rewards, dones)
        self.bar.update(n)

    def sps(self) -> float:
        """Env steps per second since the previous call."""
        return self.meter.rate(self.step)

    def report(self, scalars: dict, **postfix) -> None:
        """Log ``scalars``, the actor's circuit size and its wiring's candidates per input at this step;
        the bar shows the recent return, the last SPS and ``postfix``."""
        self.run.log(self.step, **scalars, **{f"circuit/{k}": v for k, v in self.actor.circuit_stats().items()},
                     **{f"wiring/{k}": v for k, v in self.actor.wiring_stats().items()})
        self.bar.set_postfix(**self.episodes.postfix(self.meter.last), **postfix)

    def checkpoint(self) -> None:
        self.run.save_checkpoint({"step": self.step, **self.state(self.step), "cost": self.cost()})
        self.last_checkpoint = self.step

    def checkpoint_if_due(self) -> None:
        if self.step - self.last_checkpoint >= self.run.cfg.checkpoint_every:
            self.checkpoint()


@contextlib.contextmanager
def train_loop(run: RunDir, envs, actor, state: Callable[[int], dict], checkpoint_on_interrupt: bool = True,
               share: int = 1):
    """A :class:`TrainLoop` for the block; at its end a checkpoint and ``envs`` closed (None: the caller
    closes them, after every checkpoint that reads them). Without
    ``checkpoint_on_interrupt`` an interrupt keeps the last periodic checkpoint (PPO's, whose state
    is only whole between iterations)."""
    loop = TrainLoop(run, actor, state, share)
    try:
        yield loop
        loop.checkpoint()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: keep everything up to this step
        if checkpoint_on_interrupt:
            loop.checkpoint()
        raise
    finally:
        if envs is not None:
            envs.close()
