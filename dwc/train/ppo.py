"""PPO (clipped objective, GAE), CleanRL-style, for cheap many-env training.

The actor is the same squashed-Gaussian interface SAC uses (DWC or MLP); the value function is a
small float MLP over normalised observations. The rollout stores the pre-tanh sample so the
log-probability of old actions is exact. Truncated episodes bootstrap from V(final observation).
Checkpoints are written between iterations, so a resumed run repeats no partial rollout.
Rewards are scaled by the running std of each env's discounted return (clipped to +-10), as CleanRL's
PPO does with gymnasium's NormalizeReward; logged episode returns stay unscaled.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from dwc.core.config import TrainConfig
from dwc.models import build_actor
from dwc.models.encoding import ObsNormalizer
from dwc.train.common import flush_denormals, resolve_precision, sample_action, squashed_log_prob
from dwc.train.envs import episodes_state, make_vector_env, start_episodes
from dwc.train.loop import train_loop
from dwc.train.run import RunDir
from dwc.train.checkpoint import set_rng_state


def value_net(obs_dim: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, 1))


def train_ppo(cfg: TrainConfig, run: RunDir, device: torch.device):
    pc = cfg.ppo
    envs = make_vector_env(cfg.env, cfg.num_envs)
    act_space = envs.single_action_space
    obs_dim, act_dim = envs.single_observation_space.shape[0], act_space.shape[0]
    actor = build_actor(cfg.actor, obs_dim, act_dim, act_space.low, act_space.high).to(device)
    actor.set_precision(resolve_precision(cfg.precision, device))
    critic = value_net(obs_dim, pc.v_hidden).to(device)
    params = list(actor.parameters()) + list(critic.parameters())
    opt = torch.optim.Adam(params, lr=pc.lr, eps=1e-5, fused=True)
    counters = {"iterations": 0}
    ret_stats = ObsNormalizer(1)  # running variance of the discounted return, for reward scaling
    disc_ret = np.zeros(cfg.num_envs)
    if run.resume_state:
        s = run.resume_state
        actor.load_state_dict(s["actor"])
        critic.load_state_dict(s["critic"])
        opt.load_state_dict(s["opt"])
        counters = s["counters"]
        set_rng_state(s["rng"])
        if "ret_stats" in s:  # checkpoints before reward scaling have none
            ret_stats.load_state_dict(s["ret_stats"])
            disc_ret = s["disc_ret"]

    T, N = pc.rollout_steps, cfg.num_envs
    batch = T * N
    total_iters = max(1, -(-cfg.steps // batch))
    buf_obs = torch.zeros(T, N, obs_dim, device=device)
    buf_u = torch.zeros(T, N, act_dim, device=device)
    buf_logp = torch.zeros(T, N, device=device)
    buf_rew = torch.zeros(T, N, device=device)
    buf_done = torch.zeros(T, N, device=device)
    buf_val = torch.zeros(T, N, device=device)

    obs = None  # the observations acted on next

    def state(step: int) -> dict:  # a checkpoint at this step, with the episodes in flight
        s = {"actor": actor.state_dict(), "critic": critic.state_dict(), "opt": opt.state_dict(),
             "counters": counters, "obs_dim": obs_dim, "act_dim": act_dim,
             "ret_stats": ret_stats.state_dict(), "disc_ret": disc_ret}
        if obs is not None:
            s["episodes"] = episodes_state(envs, obs, None, loop.episodes)
        return s

    def as_t(x):
        return torch.as_tensor(x, dtype=torch.float32, device=device)

    # checkpoints only between iterations: an interrupt keeps the last one, and a resume repeats no partial rollout
    with train_loop(run, envs, actor, state, checkpoint_on_interrupt=False) as loop:
        obs, fresh = start_episodes(run.resume_state, envs, None, loop.episodes, cfg.seed + run.start_step)
        if fresh:
            actor.normalizer.update(as_t(obs))
        while loop.step < cfg.steps:
            if pc.anneal_lr:
                opt.param_groups[0]["lr"] = pc.lr * (1.0 - counters["iterations"] / total_iters)
            for t in range(T):
                o = as_t(obs)
                with torch.no_grad():
                    a, logp, u = sample_action(actor, o)
                    v = critic(actor.normalizer(o)).squeeze(-1)
                next_obs, rew, terms, truncs, infos = envs.step(a.cpu().numpy())
                dones = terms | truncs
                loop.advance(N, rew, dones)
                rew = rew.astype(np.float64)  # a copy: scaling and bootstrapping must not touch the logged reward
                if pc.norm_reward:
                    disc_ret = disc_ret * pc.gamma + rew
                    ret_stats.update(torch.as_tensor(disc_ret).unsqueeze(-1))
                    rew = np.clip(rew / np.sqrt(ret_stats.var.item() + 1e-8), -10.0, 10.0)
                    disc_ret[dones] = 0.0
                # Bootstrap truncated episodes from the value of the state they really reached.
                for i in np.flatnonzero(truncs & ~terms):
                    with torch.no_grad():
                        fo = as_t(infos["final_obs"][i]).unsqueeze(0)
                        rew[i] += pc.gamma * critic(actor.normalizer(fo)).item()
                buf_obs[t], buf_u[t], buf_logp[t], buf_val[t] = o, u, logp, v
                buf_rew[t], buf_done[t] = as_t(rew), as_t(dones)
                actor.normalizer.update(as_t(next_obs))
                obs = next_obs

            with torch.no_grad():
                next_v = critic(actor.normalizer(as_t(obs))).squeeze(-1)
                adv = torch.zeros_like(buf_rew)
                last = torch.zeros(N, device=device)
                for t in reversed(range(T)):
                    nv = next_v if t == T - 1 else buf_val[t + 1]
                    nonterm = 1.0 - buf_done[t]
                    delta = buf_rew[t] + pc.gamma * nv * nonterm - buf_val[t]
                    last = delta + pc.gamma * pc.gae_lambda * nonterm * last
                    adv[t] = last
                returns = adv + buf_val

            b_obs, b_u, b_logp = buf_obs.reshape(batch, -1), buf_u.reshape(batch, -1), buf_logp.reshape(-1)
            b_adv, b_ret = adv.reshape(-1), returns.reshape(-1)
            with flush_denormals():
                for _ in range(pc.epochs):
                    for mb in torch.randperm(batch, device=device).tensor_split(min(pc.minibatches, batch)):
                        mean, log_std = actor.dist_params(b_obs[mb])
                        ratio = (squashed_log_prob(actor, mean, log_std, b_u[mb]) - b_logp[mb]).exp()
                        a_mb = b_adv[mb]
                        a_mb = (a_mb - a_mb.mean()) / (a_mb.std(correction=0) + 1e-8)
                        pg_loss = torch.max(-a_mb * ratio, -a_mb * ratio.clamp(1 - pc.clip, 1 + pc.clip)).mean()
                        v_loss = 0.5 * (critic(actor.normalizer(b_obs[mb])).squeeze(-1) - b_ret[mb]).square().mean()
                        # Entropy of the pre-tanh Gaussian (the squashed one has no closed form).
                        entropy = (log_std + 0.5 + 0.5 * np.log(2 * np.pi)).sum(-1).mean()
                        loss = pg_loss + pc.vf_coef * v_loss - pc.ent_coef * entropy
                        opt.zero_grad(set_to_none=True)
                        loss.backward()
                        nn.utils.clip_grad_norm_(params, pc.max_grad_norm)
                        opt.step()
                        actor.constrain_()
            counters["iterations"] += 1
            actor.apply_budget_(loop.step / cfg.steps)
            loop.report({"losses/policy": pg_loss.item(), "losses/value": v_loss.item(),
                         "losses/entropy": entropy.item(), "charts/SPS": loop.sps(),  # over the last iteration
                         "charts/approx_kl": (ratio.log().neg().mean()).item()})
            loop.checkpoint_if_due()
    return actor

