"""Soft Actor-Critic, CleanRL-style: one loop you can read top to bottom.

The SAC authors' hyper-parameters by default (see SACConfig; results/referee holds them to Stable-Baselines3's
SAC). Float twin-Q critics that read the raw observation; the actor is either the DWC or the MLP
baseline (same interface). Speed choices, each measured (scripts/bench_train.py):
- the twin critics are one batched module (one bmm per layer instead of two matmuls);
- the actor step does not compute critic weight-gradients (critic params frozen during it);
- ``--precision bfloat16`` (fast on CPUs with AMX or AVX512-BF16; ``auto`` is float32: over 5 paired
  Hopper seeds bf16 cost the MLP return, results/hopper-ab): the critics' and the MLP actor's hidden layer and the LUT
  layers' wiring-score gradient in bf16, everything else float32;
- on CUDA the whole update, and the acting forward, are replayed as CUDA graphs (:class:`GraphedCall`):
  at batch 256 a GPU update is bound by ~200 kernel launches from Python, not by arithmetic.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import torch
from torch import nn

from dwc.core.config import TrainConfig
from dwc.core.errors import interrupts_held
from dwc.models import build_actor
from dwc.train.common import (GraphedCall, PhaseClock, critic_view, flush_denormals, resolve_precision, sample_action)
from dwc.train.envs import episodes_state, make_vector_env, real_next_obs, start_episodes
from dwc.train.loop import train_loop
from dwc.train.optim import WiringAdam
from dwc.train.replay import ReplayBuffer
from dwc.train.run import RunDir
from dwc.train.checkpoint import set_rng_state


class TwinQ(nn.Module):
    """Two independent Q MLPs (in -> h -> h -> 1) evaluated together with batched matmuls.

    ``mid_dtype`` bfloat16 runs the hidden x hidden layer (94% of the FLOPs) in bf16 with float32
    accumulation; the input layer and the Q output stay float32 (a bf16 Q of ~300 would be
    rounded by ~1, as large as a reward)."""

    def __init__(self, in_dim: int, hidden: int, members: int = 2, mid_dtype: torch.dtype = torch.float32):
        super().__init__()
        sizes = [in_dim, hidden, hidden, 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for i in range(3):
            w = torch.empty(members, sizes[i], sizes[i + 1])
            b = torch.empty(members, 1, sizes[i + 1])
            bound = 1.0 / math.sqrt(sizes[i])  # nn.Linear's default init, per member
            nn.init.uniform_(w, -bound, bound)
            nn.init.uniform_(b, -bound, bound)
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(b))
        self.members, self.mid_dtype = members, mid_dtype

    def forward(self, xn: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        h = torch.cat([xn, action], -1).unsqueeze(0).expand(self.members, -1, -1)
        (w0, w1, w2), (b0, b1, b2), dt = self.weights, self.biases, self.mid_dtype
        h = torch.relu(torch.baddbmm(b0, h, w0))
        h = torch.relu(torch.baddbmm(b1.to(dt), h.to(dt), w1.to(dt))).float()
        return torch.baddbmm(b2, h, w2).squeeze(-1)  # (members, batch)


class SACLearner:
    """Actor, twin critics, target critics, entropy coefficient and their optimisers; ``update``
    is one SAC gradient step. The update takes its minibatch and Gaussian noise as inputs and never
    reads a value back to the host, so on CUDA it can be captured once and replayed as a graph."""

    def __init__(self, actor, obs_dim: int, act_dim: int, sc, device: torch.device, graphs: bool = False,
                 precision: torch.dtype = torch.float32):
        self.actor, self.sc = actor, sc
        actor.set_precision(precision)
        self.qf = TwinQ(obs_dim + act_dim, sc.q_hidden, mid_dtype=precision).to(device)
        self.qf_target = copy.deepcopy(self.qf)
        opt = dict(fused=True, capturable=graphs)  # capturable: step counts live on the GPU
        # Adam; a learnable wiring trained with --wiring-optim sparse sends sparse gradients, stepped lazily
        self.actor_opt = WiringAdam(actor.parameters(), lr=sc.actor_lr, eps=sc.adam_eps, **opt)
        self.q_opt = torch.optim.Adam(self.qf.parameters(), lr=sc.q_lr, **opt)
        self.log_alpha = torch.tensor(math.log(sc.alpha), device=device, requires_grad=True)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=sc.alpha_lr, **opt)
        self.target_entropy = -float(act_dim)
        self.graphs = graphs

    OPTIMIZERS = ("actor_opt", "q_opt", "alpha_opt")

    def state_dict(self) -> dict:
        state = {"actor": self.actor.state_dict(), "qf": self.qf.state_dict(),
                 "qf_target": self.qf_target.state_dict(), "log_alpha": self.log_alpha.detach()}
        state.update({k: getattr(self, k).state_dict() for k in self.OPTIMIZERS})
        return state

    def load_state_dict(self, s: dict) -> None:
        self.actor.load_state_dict(s["actor"])
        self.qf.load_state_dict(s["qf"])
        self.qf_target.load_state_dict(s["qf_target"])
        with torch.no_grad():
            self.log_alpha.copy_(s["log_alpha"])
        for k in self.OPTIMIZERS:
            opt = getattr(self, k)
            opt.load_state_dict(s[k])
            for group in opt.param_groups:  # a run may resume on another device than it started on
                group["capturable"] = self.graphs

    def update(self, obs, next_obs, actions, rewards, terms, noise_next, noise_pi=None) -> dict:
        """One gradient step; ``noise_pi`` (policy_frequency, batch, act) also steps the actor and
        alpha (CleanRL's delayed update). Returns the losses as GPU/CPU scalars (not synced)."""
        sc, actor, qf = self.sc, self.actor, self.qf
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_a, next_logp, _ = sample_action(actor, next_obs, noise_next)
            q_next = self.qf_target(critic_view(sc, actor.normalizer, next_obs), next_a).min(0).values \
                - alpha * next_logp
            target = rewards + sc.gamma * (1.0 - terms) * q_next
        xn = critic_view(sc, actor.normalizer, obs)
        q = qf(xn, actions)
        q_loss = (q - target).square().mean(1).sum()
        self.q_opt.zero_grad(set_to_none=True)
        q_loss.backward()
        self.q_opt.step()
        stats = {"losses/q": q_loss.detach() / 2, "losses/q_mean": q.detach().mean()}

        if noise_pi is not None:
            qf.requires_grad_(False)
            try:
                for eps in noise_pi:
                    a, logp, _ = sample_action(actor, obs, eps)
                    actor_loss = (self.log_alpha.detach().exp() * logp - qf(xn, a).min(0).values).mean()
                    self.actor_opt.zero_grad(set_to_none=True)
                    actor_loss.backward()
                    self.actor_opt.step()
                    actor.constrain_()
                    if sc.autotune:
                        alpha_loss = -(self.log_alpha.exp() * (logp.detach() + self.target_entropy)).mean()
                        self.alpha_opt.zero_grad(set_to_none=True)
                        alpha_loss.backward()
                        self.alpha_opt.step()
            finally:
                qf.requires_grad_(True)
            stats.update({"losses/actor": actor_loss.detach(), "losses/alpha": self.log_alpha.detach().exp(),
                          "losses/entropy": -logp.detach().mean()})
        with torch.no_grad():
            torch._foreach_lerp_(list(self.qf_target.parameters()), list(qf.parameters()), sc.tau)
        return stats


def train_sac(cfg: TrainConfig, run: RunDir, device: torch.device):
    sc = cfg.sac
    envs = make_vector_env(cfg.env, cfg.num_envs)
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    obs_dim, act_dim = obs_space.shape[0], act_space.shape[0]

    actor = build_actor(cfg.actor, obs_dim, act_dim, act_space.low, act_space.high).to(device)
    graphs = device.type == "cuda" and cfg.cuda_graphs and actor.prepare_cuda_graphs()
    learner = SACLearner(actor, obs_dim, act_dim, sc, device, graphs, resolve_precision(cfg.precision, device))
    update_step = GraphedCall(learner.update) if graphs else learner.update

    @torch.no_grad()
    def explore(obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return sample_action(actor, obs, noise)[0]
    act_step = GraphedCall(explore) if graphs else explore
    rb = ReplayBuffer(min(sc.buffer_size, cfg.steps), obs_dim, act_dim, seed=cfg.seed)
    counters = {"updates": 0}

    if run.resume_state:
        s = run.resume_state
        learner.load_state_dict(s)
        rb.load_state_dict(s["replay"])
        counters = s["counters"]
        set_rng_state(s["rng"])
    obs = None  # the observations acted on next

    def state(step: int) -> dict:  # a checkpoint at this step, with the episodes in flight
        s = {**learner.state_dict(), "replay": rb.state_dict(), "counters": counters,
             "obs_dim": obs_dim, "act_dim": act_dim}
        if obs is not None:
            s["episodes"] = episodes_state(envs, obs, act_space, loop.episodes)
        return s

    def update(log: bool) -> dict:
        batch = rb.sample(sc.batch_size, device)
        noise_next = torch.randn(sc.batch_size, act_dim, device=device)
        noise_pi = None
        if counters["updates"] % sc.policy_frequency == 0:
            noise_pi = torch.randn(sc.policy_frequency, sc.batch_size, act_dim, device=device)
        with flush_denormals():
            stats = update_step(*batch, noise_next, noise_pi)
        counters["updates"] += 1
        return {k: v.item() for k, v in stats.items()} if log else {}

    updates_per_iter = max(1, round(cfg.num_envs * sc.utd))
    clock, iterations, log_due = PhaseClock(), 0, False
    with train_loop(run, envs, actor, state) as loop:
        obs, fresh = start_episodes(run.resume_state, envs, act_space, loop.episodes, cfg.seed + run.start_step)
        if fresh:
            actor.normalizer.update(torch.as_tensor(obs, device=device))
        while loop.step < cfg.steps:
            # a whole iteration changes together (envs, random streams, replay, normaliser, step counter,
            # learner): an interrupt inside it is taken at its end, so the checkpoint resumes exactly
            with interrupts_held():
                if loop.step < sc.learning_starts:
                    actions = np.stack([act_space.sample() for _ in range(cfg.num_envs)])
                else:
                    o = torch.as_tensor(obs, dtype=torch.float32, device=device)
                    actions = act_step(o, torch.randn(cfg.num_envs, act_dim, device=device)).cpu().numpy()
                clock.lap("act")
                next_obs, rewards, terms, truncs, infos = envs.step(actions)
                clock.lap("env")
                dones = terms | truncs
                rb.add(obs, real_next_obs(next_obs, dones, infos), actions, rewards, terms)
                actor.normalizer.update(torch.as_tensor(next_obs, device=device))
                loop.advance(cfg.num_envs, rewards, dones)
                obs = next_obs
                clock.lap("record")
                if loop.step > sc.learning_starts:
                    log_due |= loop.step % 1000 < cfg.num_envs
                    for _ in range(updates_per_iter):
                        stats = update(log=log_due)
                        if "losses/actor" in stats:  # logged at an update that also steps the actor and alpha
                            run.log(loop.step, **stats)
                            log_due = False
                actor.apply_budget_(loop.step / cfg.steps)
                clock.lap("update")
            iterations += 1
            if loop.step % 1000 < cfg.num_envs:  # SPS over the last 1000 steps, and where the time went
                loop.report({"charts/SPS": loop.sps(), **clock.report(iterations)})
                iterations = 0
            loop.checkpoint_if_due()
            clock.lap("record")
    return actor
