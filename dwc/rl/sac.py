"""Soft Actor-Critic, CleanRL-style: one loop you can read top to bottom.

Published protocol by default (see SACConfig). Float twin-Q critics; the actor is either the
DWC or the MLP baseline (same interface). Speed choices, each measured (scripts/bench_train.py):
- the twin critics are one batched module (one bmm per layer instead of two matmuls);
- the actor step does not compute critic weight-gradients (critic params frozen during it).
"""
from __future__ import annotations

import copy
import math

import numpy as np
import torch
from torch import nn

from ..config import TrainConfig
from ..models import build_actor
from .common import EpisodeTracker, RateMeter, sample_action
from .envs import make_vector_env, real_next_obs
from .replay import ReplayBuffer
from .run import RunDir, set_rng_state


class TwinQ(nn.Module):
    """Two independent Q MLPs (in -> h -> h -> 1) evaluated together with batched matmuls."""

    def __init__(self, in_dim: int, hidden: int, members: int = 2):
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
        self.members = members

    def forward(self, xn: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        h = torch.cat([xn, action], -1).unsqueeze(0).expand(self.members, -1, -1)
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(b, h, w)
            if i < 2:
                h = torch.relu(h)
        return h.squeeze(-1)  # (members, batch)


def train_sac(cfg: TrainConfig, run: RunDir, device: torch.device):
    sc = cfg.sac
    envs = make_vector_env(cfg.env, cfg.num_envs)
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    obs_dim, act_dim = obs_space.shape[0], act_space.shape[0]

    actor = build_actor(cfg.actor, obs_dim, act_dim, act_space.low, act_space.high).to(device)
    qf = TwinQ(obs_dim + act_dim, sc.q_hidden).to(device)
    qf_target = copy.deepcopy(qf)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=sc.actor_lr, eps=sc.adam_eps, fused=True)
    q_opt = torch.optim.Adam(qf.parameters(), lr=sc.q_lr, fused=True)
    target_entropy = -float(act_dim)
    log_alpha = torch.tensor(math.log(sc.alpha), device=device, requires_grad=True)
    alpha_opt = torch.optim.Adam([log_alpha], lr=sc.alpha_lr, fused=True)
    rb = ReplayBuffer(min(sc.buffer_size, cfg.steps), obs_dim, act_dim, seed=cfg.seed)
    counters = {"updates": 0}

    step = run.start_step
    if run.resume_state:
        s = run.resume_state
        actor.load_state_dict(s["actor"])
        qf.load_state_dict(s["qf"])
        qf_target.load_state_dict(s["qf_target"])
        actor_opt.load_state_dict(s["actor_opt"])
        q_opt.load_state_dict(s["q_opt"])
        with torch.no_grad():
            log_alpha.copy_(s["log_alpha"])
        alpha_opt.load_state_dict(s["alpha_opt"])
        rb.load_state_dict(s["replay"])
        counters = s["counters"]
        set_rng_state(s["rng"])
        act_space.seed(cfg.seed + step)

    def checkpoint():
        run.save_checkpoint({
            "step": step, "actor": actor.state_dict(), "qf": qf.state_dict(), "qf_target": qf_target.state_dict(),
            "actor_opt": actor_opt.state_dict(), "q_opt": q_opt.state_dict(), "log_alpha": log_alpha.detach(),
            "alpha_opt": alpha_opt.state_dict(), "replay": rb.state_dict(), "counters": counters,
            "obs_dim": obs_dim, "act_dim": act_dim})

    def update(log: bool):
        obs, next_obs, actions, rewards, terms = rb.sample(sc.batch_size, device)
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            next_a, next_logp, _ = sample_action(actor, next_obs)
            q_next = qf_target(actor.normalizer(next_obs), next_a).min(0).values - alpha * next_logp
            target = rewards + sc.gamma * (1.0 - terms) * q_next
        xn = actor.normalizer(obs)
        q = qf(xn, actions)
        q_loss = (q - target).square().mean(1).sum()
        q_opt.zero_grad(set_to_none=True)
        q_loss.backward()
        q_opt.step()

        stats = {}
        if counters["updates"] % sc.policy_frequency == 0:
            # CleanRL's delayed update: policy_frequency actor steps every policy_frequency updates.
            qf.requires_grad_(False)
            for _ in range(sc.policy_frequency):
                a, logp, _ = sample_action(actor, obs)
                actor_loss = (log_alpha.detach().exp() * logp - qf(xn, a).min(0).values).mean()
                actor_opt.zero_grad(set_to_none=True)
                actor_loss.backward()
                actor_opt.step()
                actor.constrain_()
                if sc.autotune:
                    alpha_loss = -(log_alpha.exp() * (logp.detach() + target_entropy)).mean()
                    alpha_opt.zero_grad(set_to_none=True)
                    alpha_loss.backward()
                    alpha_opt.step()
            qf.requires_grad_(True)
            if log:
                stats = {"losses/actor": actor_loss.item(), "losses/alpha": log_alpha.exp().item(),
                         "losses/entropy": -logp.detach().mean().item()}
        with torch.no_grad():
            torch._foreach_lerp_(list(qf_target.parameters()), list(qf.parameters()), sc.tau)
        counters["updates"] += 1
        if log:
            stats.update({"losses/q": q_loss.item() / 2, "losses/q_mean": q.detach().mean().item()})
        return stats

    obs, _ = envs.reset(seed=cfg.seed + step)  # a resumed run starts fresh episodes (documented)
    if not run.resume_state:
        act_space.seed(cfg.seed)
    actor.normalizer.update(torch.as_tensor(obs, device=device))
    episodes = EpisodeTracker(cfg.num_envs)
    bar = run.start_progress(cfg.steps)
    mid_transition = False
    updates_per_iter = max(1, round(cfg.num_envs * sc.utd))
    last_ckpt, meter = step, RateMeter(step)
    try:
        while step < cfg.steps:
            if step < sc.learning_starts:
                actions = np.stack([act_space.sample() for _ in range(cfg.num_envs)])
            else:
                with torch.no_grad():
                    a, _, _ = sample_action(actor, torch.as_tensor(obs, dtype=torch.float32, device=device))
                actions = a.cpu().numpy()
            next_obs, rewards, terms, truncs, infos = envs.step(actions)
            dones = terms | truncs
            mid_transition = True  # replay, normaliser and step counter change together
            rb.add(obs, real_next_obs(next_obs, dones, infos), actions, rewards, terms)
            actor.normalizer.update(torch.as_tensor(next_obs, device=device))
            step += cfg.num_envs
            mid_transition = False
            episodes.step(run, step, rewards, dones)
            obs = next_obs

            if step > sc.learning_starts:
                for k in range(updates_per_iter):
                    stats = update(log=(step % 1000 < cfg.num_envs and k == 0))
                    if stats:
                        run.log(step, **stats)
            bar.update(cfg.num_envs)
            if step % 1000 < cfg.num_envs:  # SPS over the last 1000 steps
                sps = meter.rate(step)
                run.log(step, **{"charts/SPS": sps})
                bar.set_postfix(**episodes.postfix(sps))
            if step - last_ckpt >= cfg.checkpoint_every:
                checkpoint()
                last_ckpt = step
        checkpoint()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: keep everything up to this step
        if not mid_transition:
            checkpoint()
        raise
    finally:
        envs.close()
    return actor
