"""Soft Actor-Critic, CleanRL-style: one loop, for one seed (``dwc train``) or several seeds of one
configuration trained together in one process (``dwc train --seeds``, dwc.train.multiseed).

The SAC authors' hyper-parameters by default (see SACConfig; docs/referee holds them to Stable-Baselines3's
SAC). Float twin-Q critics that read the raw observation, or CrossQ's (``--critic crossq``: batch
renormalised, no target copies); the actor is either the DWC or the MLP baseline (same interface).
Speed choices, each measured (scripts/bench_train.py):
- the twin critics are one batched module (one bmm per layer instead of two matmuls), all seeds' too
  (dwc.train.sac_nets);
- the actor step does not compute critic weight-gradients (critic params frozen during it);
- ``--precision bfloat16`` (fast on CPUs with AMX or AVX512-BF16; ``auto`` is float32: over 5 paired
  Hopper seeds bf16 cost the MLP return, docs/hopper-ab): the critics' and the MLP actor's hidden layer and the LUT
  layers' wiring-score gradient in bf16, everything else float32;
- on CUDA the whole update, and the acting forward, are replayed as CUDA graphs (:class:`GraphedCall`):
  at batch 256 a GPU update is bound by ~200 kernel launches from Python, not by arithmetic.

Each seed keeps everything of its own: its actor (the module a single run builds, so its checkpoint,
evaluation and compilation are a single run's), its twin critics, replay buffer, environments
(dwc.train.seed_envs), action sampler and random stream (a torch.Generator in the state the single run's
global generator would be in); the learner (dwc.train.sac_learner) updates all seeds at once.
"""
from __future__ import annotations

import contextlib
import random

import numpy as np
import torch

from dwc.core.config import TrainConfig
from dwc.core.errors import UserError, interrupts_held
from dwc.models import build_actor
from dwc.train.checkpoint import seed_everything
from dwc.train.common import GraphedCall, PhaseClock, flush_denormals, resolve_precision
from dwc.train.envs import episodes_state
from dwc.train.loop import train_loop
from dwc.train.replay import ReplayBuffer
from dwc.train.run import RunDir
from dwc.train.sac_learner import SACLearner, SeedsLearner
from dwc.train.sac_nets import TwinQ
from dwc.train.seed_envs import SeedEnvs, env_workers


def train_sac(cfg: TrainConfig, run: RunDir, device: torch.device):
    """A single run: the SAC loop with one seed. Returns its actor."""
    return train_sac_seeds([cfg], [run], device, resolve_precision(cfg.precision, device))[0]


def train_sac_seeds(cfgs: list[TrainConfig], runs: list[RunDir], device: torch.device, precision: torch.dtype,
                    label: str | None = None) -> list:
    """Train seed k of ``cfgs`` (configs that differ only in their seed) into ``runs[k]``, all in lockstep,
    from their checkpoints where they resume; ``label`` names them on the progress bar. Returns the actors."""
    cfg = cfgs[0]
    envs = SeedEnvs(cfg.env, len(cfgs), cfg.num_envs, env_workers(device, len(cfgs), cfg.num_envs))
    try:
        return _SAC(cfgs, runs, device, precision, envs).train(label)
    finally:
        envs.close()  # after every seed's final checkpoint (which reads the envs)


class _SAC:
    """The state of one SAC training process: K seeds' actors, learner, replay buffers, random streams,
    environments and training loops (dwc.train.loop), stepped together."""

    def __init__(self, cfgs: list[TrainConfig], runs: list[RunDir], device: torch.device, precision: torch.dtype,
                 envs: SeedEnvs):
        self.cfgs, self.runs, self.device, self.envs = cfgs, runs, device, envs
        self.cfg, self.sc, self.n = cfgs[0], cfgs[0].sac, cfgs[0].num_envs
        self.obs_dim, self.act_dim = envs.obs_dim, envs.spaces[0].shape[0]
        critics = self._build(precision)
        graphs = device.type == "cuda" and self.cfg.cuda_graphs and all([a.prepare_cuda_graphs() for a in self.actors])
        self.learner = SeedsLearner(self.actors, critics, self.sc, device, graphs, precision)
        self.update_step = GraphedCall(self.learner.update) if graphs else self.learner.update
        self.explore = GraphedCall(self.learner.actors.explore) if graphs else self.learner.actors.explore
        self.rbs = [ReplayBuffer(min(self.sc.buffer_size, c.steps), self.obs_dim, self.act_dim, seed=c.seed)
                    for c in cfgs]
        self.counters = [{"updates": 0} for _ in cfgs]
        self.obs = None  # every seed's observations acted on next
        self.loops: list = []
        self.log_due = False
        self._resume()
        if any(bool(a.normalizer.frozen) for a in self.actors):
            raise UserError("a seed's observation normaliser is frozen (an exported policy's); train from a "
                            "checkpoint of dwc train instead")

    def _build(self, precision: torch.dtype) -> list[TwinQ]:
        """Each seed's start exactly as its single run makes it: seeds, actor, critics, then its random
        stream for the noise (in the state the single run's global generator would be in)."""
        self.actors, self.gens, self.inits, critics = [], [], [], []
        for c, space in zip(self.cfgs, self.envs.spaces):
            seed_everything(c.seed)
            actor = build_actor(c.actor, self.obs_dim, self.act_dim, space.low, space.high).to(self.device)
            actor.set_precision(precision)
            critics.append(TwinQ(self.obs_dim + self.act_dim, self.sc.q_hidden, mid_dtype=precision,
                                 renorm=self.sc.critic == "crossq").to(self.device))
            gen = torch.Generator(device=self.device)
            if self.device.type == "cpu":
                gen.set_state(torch.get_rng_state())
            else:
                gen.manual_seed(c.seed)  # the single run's CUDA generator: seeded, not drawn from yet
            self.actors.append(actor), self.gens.append(gen)
            self.inits.append({"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                               "python": random.getstate()})
        return critics

    def _rng(self, k: int):
        """Seed k's random streams as a checkpoint stores the process's (RunDir.rng): its generator's."""
        def state() -> dict:
            s = dict(self.inits[k], cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
            if self.device.type == "cpu":
                s["torch"] = self.gens[k].get_state()
            else:
                s["cuda"][self.device.index or 0] = self.gens[k].get_state()
            return s
        return state

    def _resume(self) -> None:
        if any(r.resume_state for r in self.runs):
            self.learner.load_seeds([r.resume_state for r in self.runs])
        for k, run in enumerate(self.runs):
            run.rng = self._rng(k)
            s = run.resume_state
            if s:
                self.rbs[k].load_state_dict(s["replay"])
                self.counters[k] = s["counters"]
                if self.device.type == "cpu":
                    self.gens[k].set_state(s["rng"]["torch"])
                elif s["rng"].get("cuda"):
                    self.gens[k].set_state(s["rng"]["cuda"][self.device.index or 0])

    def _state(self, k: int):
        def checkpoint(step: int) -> dict:  # seed k's, as its single run's: with its episodes in flight
            s = {**self.learner.seed_state_dict(k), "replay": self.rbs[k].state_dict(), "counters": self.counters[k],
                 "obs_dim": self.obs_dim, "act_dim": self.act_dim}
            if self.obs is not None:
                s["episodes"] = episodes_state(self.envs.part(k), self.obs[k], self.envs.spaces[k],
                                               self.loops[k].episodes)
            return s
        return checkpoint

    def _start(self) -> None:
        """Each seed's first observations, as its single run starts or resumes (fresh ones go to its normaliser)."""
        obs, fresh = self.envs.start([r.resume_state for r in self.runs], [loop.episodes for loop in self.loops],
                                     [c.seed + r.start_step for c, r in zip(self.cfgs, self.runs)])
        for actor, o, new in zip(self.actors, obs, fresh):
            if new:
                actor.normalizer.update(torch.as_tensor(o, device=self.device))
        self.obs = obs

    def _act(self) -> list[np.ndarray]:
        """Every seed's actions: random before learning starts, then all seeds' observations in and all their
        actions out, one transfer each way."""
        if self.loops[0].step < self.sc.learning_starts:
            return [np.stack([space.sample() for _ in range(self.n)]) for space in self.envs.spaces]
        noise = torch.stack([torch.randn(self.n, self.act_dim, device=self.device, generator=g) for g in self.gens])
        obs = torch.as_tensor(np.stack(self.obs), dtype=torch.float32, device=self.device)
        return list(self.explore(obs, noise).cpu().numpy())

    def _update(self, log: bool) -> bool:
        """One update of every seed; with ``log``, logs its losses if it also steps the actors (and says so)."""
        sc, device, rbs = self.sc, self.device, self.rbs
        # ReplayBuffer.sample's draw from each seed's own buffer and generator, sent to the device as one
        # (seeds, batch, ...) tensor per field
        idx = [rb.rng.integers(0, rb.size, size=sc.batch_size) for rb in rbs]
        batch = [torch.as_tensor(np.stack([getattr(rb, f)[i] for rb, i in zip(rbs, idx)]), device=device)
                 for f in ReplayBuffer.FIELDS]
        noise_next = torch.stack([torch.randn(sc.batch_size, self.act_dim, device=device, generator=g)
                                  for g in self.gens])
        noise_pi = None  # K actor steps every K critic steps (CleanRL), or one every D (TD3's, CrossQ's delay)
        if self.counters[0]["updates"] % (sc.policy_frequency * sc.policy_delay) == 0:
            noise_pi = torch.stack([torch.randn(sc.policy_frequency, sc.batch_size, self.act_dim, device=device,
                                                generator=g) for g in self.gens], 1)
        with flush_denormals():
            stats = self.update_step(*batch, noise_next, noise_pi)
        for c in self.counters:
            c["updates"] += 1
        if not (log and noise_pi is not None):
            return False
        values = {name: v.tolist() for name, v in stats.items()}
        for k, run in enumerate(self.runs):
            run.log(self.loops[0].step, **{name: v[k] for name, v in values.items()})
        return True

    def _iteration(self, clock: PhaseClock) -> int:
        """One step of every seed's envs, then its updates; returns the step reached. A whole iteration
        changes together (envs, random streams, replay, normalisers, step counters, learner): an interrupt
        inside it is taken at its end, so the checkpoint resumes exactly."""
        with interrupts_held():
            actions = self._act()
            clock.lap("act")
            steps = self.envs.step(actions)
            clock.lap("env")
            for k, (next_obs, reached, rewards, terms, dones) in enumerate(steps):
                self.rbs[k].add(self.obs[k], reached, actions[k], rewards, terms)
                self.loops[k].advance(self.n, rewards, dones)
                self.obs[k] = next_obs
            self.learner.actors.update_normalizers(torch.as_tensor(np.stack(self.obs), device=self.device))
            step = self.loops[0].step
            clock.lap("record")
            if step > self.sc.learning_starts:
                self.log_due |= step % 1000 < self.n
                for _ in range(max(1, round(self.n * self.sc.utd))):
                    if self._update(log=self.log_due):  # logged at an update that also steps the actors and alphas
                        self.log_due = False
            for a in self.actors:
                a.apply_budget_(step / self.cfg.steps)
            clock.lap("update")
        return step

    def train(self, label: str | None) -> list:
        with contextlib.ExitStack() as stack:
            self.loops = [stack.enter_context(train_loop(run, None, a, self._state(k), share=len(self.runs)))
                          for k, (run, a) in enumerate(zip(self.runs, self.actors))]
            if label and self.loops[0].bar is not None:
                self.loops[0].bar.set_description(label)
            self._start()
            clock, iterations = PhaseClock(), 0
            while self.loops[0].step < self.cfg.steps:
                step = self._iteration(clock)
                iterations += 1
                if step % 1000 < self.n:  # SPS (of each seed) over the last 1000 steps, and where the time went
                    times = clock.report(iterations)
                    iterations = 0
                    for loop in self.loops:
                        loop.report({"charts/SPS": loop.sps(), **times})
                for loop in self.loops:
                    loop.checkpoint_if_due()
                clock.lap("record")
        return self.actors


__all__ = ["SACLearner", "SeedsLearner", "TwinQ", "train_sac", "train_sac_seeds"]
