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
    """A PPO run, CleanRL's loop in steps: set up (or resume), then per iteration collect a rollout, compute
    its advantages, update, log and checkpoint. Returns the actor."""
    return _PPO(cfg, run, device, make_vector_env(cfg.env, cfg.num_envs)).train()


class _PPO:
    """The state of one PPO run: actor, value net, optimiser, reward scaling, the rollout buffers, the
    observations acted on next and the training loop (dwc.train.loop)."""

    def __init__(self, cfg: TrainConfig, run: RunDir, device: torch.device, envs):
        self.cfg, self.run, self.device, self.envs, self.pc = cfg, run, device, envs, cfg.ppo
        act_space = envs.single_action_space
        self.obs_dim, self.act_dim = envs.single_observation_space.shape[0], act_space.shape[0]
        # built in this order, so the initial weights draw the same random numbers as they always have
        self.actor = build_actor(cfg.actor, self.obs_dim, self.act_dim, act_space.low, act_space.high).to(device)
        self.actor.set_precision(resolve_precision(cfg.precision, device))
        self.critic = value_net(self.obs_dim, self.pc.v_hidden).to(device)
        self.params = list(self.actor.parameters()) + list(self.critic.parameters())
        self.opt = torch.optim.Adam(self.params, lr=self.pc.lr, eps=1e-5, fused=True)
        self.counters = {"iterations": 0}
        self.ret_stats = ObsNormalizer(1)  # running variance of the discounted return, for reward scaling
        self.disc_ret = np.zeros(cfg.num_envs)
        self._resume()
        self.T, self.N = self.pc.rollout_steps, cfg.num_envs
        self.batch = self.T * self.N
        self.total_iters = max(1, -(-cfg.steps // self.batch))
        T, N = self.T, self.N
        self.buf = {"obs": torch.zeros(T, N, self.obs_dim, device=device),
                    "u": torch.zeros(T, N, self.act_dim, device=device)}
        self.buf.update({k: torch.zeros(T, N, device=device) for k in ("logp", "rew", "done", "val")})
        self.obs = None  # the observations acted on next
        self.loop = None

    def _resume(self) -> None:
        s = self.run.resume_state
        if not s:
            return
        self.actor.load_state_dict(s["actor"])
        self.critic.load_state_dict(s["critic"])
        self.opt.load_state_dict(s["opt"])
        self.counters = s["counters"]
        set_rng_state(s["rng"])
        if "ret_stats" in s:  # checkpoints before reward scaling have none
            self.ret_stats.load_state_dict(s["ret_stats"])
            self.disc_ret = s["disc_ret"]

    def _state(self, step: int) -> dict:
        """A checkpoint at this step, with the episodes in flight."""
        s = {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(), "opt": self.opt.state_dict(),
             "counters": self.counters, "obs_dim": self.obs_dim, "act_dim": self.act_dim,
             "ret_stats": self.ret_stats.state_dict(), "disc_ret": self.disc_ret}
        if self.obs is not None:
            s["episodes"] = episodes_state(self.envs, self.obs, None, self.loop.episodes)
        return s

    def _t(self, x) -> torch.Tensor:
        return torch.as_tensor(x, dtype=torch.float32, device=self.device)

    def _value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.actor.normalizer(obs)).squeeze(-1)

    def _learning_reward(self, rew: np.ndarray, terms: np.ndarray, truncs: np.ndarray, infos: dict) -> np.ndarray:
        """The reward PPO learns from: scaled by the running std of the discounted return, and truncated
        episodes bootstrapped from the value of the state they really reached."""
        pc, dones = self.pc, terms | truncs
        rew = rew.astype(np.float64)  # a copy: scaling and bootstrapping must not touch the logged reward
        if pc.norm_reward:
            self.disc_ret = self.disc_ret * pc.gamma + rew
            self.ret_stats.update(torch.as_tensor(self.disc_ret).unsqueeze(-1))
            rew = np.clip(rew / np.sqrt(self.ret_stats.var.item() + 1e-8), -10.0, 10.0)
            self.disc_ret[dones] = 0.0
        for i in np.flatnonzero(truncs & ~terms):
            with torch.no_grad():
                rew[i] += pc.gamma * self._value(self._t(infos["final_obs"][i]).unsqueeze(0)).item()
        return rew

    def _collect(self) -> None:
        """One rollout of ``rollout_steps`` steps of every env into the buffers."""
        buf = self.buf
        for t in range(self.T):
            o = self._t(self.obs)
            with torch.no_grad():
                a, logp, u = sample_action(self.actor, o)
                v = self._value(o)
            next_obs, rew, terms, truncs, infos = self.envs.step(a.cpu().numpy())
            dones = terms | truncs
            self.loop.advance(self.N, rew, dones)
            rew = self._learning_reward(rew, terms, truncs, infos)
            buf["obs"][t], buf["u"][t], buf["logp"][t], buf["val"][t] = o, u, logp, v
            buf["rew"][t], buf["done"][t] = self._t(rew), self._t(dones)
            self.actor.normalizer.update(self._t(next_obs))
            self.obs = next_obs

    @torch.no_grad()
    def _advantages(self) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE advantages and the value targets (returns) of the rollout."""
        pc, rew, done, val = self.pc, self.buf["rew"], self.buf["done"], self.buf["val"]
        next_v = self._value(self._t(self.obs))
        adv = torch.zeros_like(rew)
        last = torch.zeros(self.N, device=self.device)
        for t in reversed(range(self.T)):
            nv = next_v if t == self.T - 1 else val[t + 1]
            nonterm = 1.0 - done[t]
            delta = rew[t] + pc.gamma * nv * nonterm - val[t]
            last = delta + pc.gamma * pc.gae_lambda * nonterm * last
            adv[t] = last
        return adv, adv + val

    def _update(self, adv: torch.Tensor, returns: torch.Tensor) -> tuple:
        """``epochs`` passes of clipped-objective minibatch updates over the rollout; returns the last
        minibatch's policy loss, value loss, entropy and probability ratio."""
        pc, batch = self.pc, self.batch
        b_obs, b_u = self.buf["obs"].reshape(batch, -1), self.buf["u"].reshape(batch, -1)
        b_logp, b_adv, b_ret = self.buf["logp"].reshape(-1), adv.reshape(-1), returns.reshape(-1)
        with flush_denormals():
            for _ in range(pc.epochs):
                for mb in torch.randperm(batch, device=self.device).tensor_split(min(pc.minibatches, batch)):
                    mean, log_std = self.actor.dist_params(b_obs[mb])
                    ratio = (squashed_log_prob(self.actor, mean, log_std, b_u[mb]) - b_logp[mb]).exp()
                    a_mb = b_adv[mb]
                    a_mb = (a_mb - a_mb.mean()) / (a_mb.std(correction=0) + 1e-8)
                    pg_loss = torch.max(-a_mb * ratio, -a_mb * ratio.clamp(1 - pc.clip, 1 + pc.clip)).mean()
                    v_loss = 0.5 * (self._value(b_obs[mb]) - b_ret[mb]).square().mean()
                    # Entropy of the pre-tanh Gaussian (the squashed one has no closed form).
                    entropy = (log_std + 0.5 + 0.5 * np.log(2 * np.pi)).sum(-1).mean()
                    loss = pg_loss + pc.vf_coef * v_loss - pc.ent_coef * entropy
                    self.opt.zero_grad(set_to_none=True)
                    loss.backward()
                    nn.utils.clip_grad_norm_(self.params, pc.max_grad_norm)
                    self.opt.step()
                    self.actor.constrain_()
        return pg_loss, v_loss, entropy, ratio

    def train(self):
        cfg, pc = self.cfg, self.pc
        # checkpoints only between iterations: an interrupt keeps the last one, and a resume repeats no partial rollout
        with train_loop(self.run, self.envs, self.actor, self._state, checkpoint_on_interrupt=False) as loop:
            self.loop = loop
            self.obs, fresh = start_episodes(self.run.resume_state, self.envs, None, loop.episodes,
                                             cfg.seed + self.run.start_step)
            if fresh:
                self.actor.normalizer.update(self._t(self.obs))
            while loop.step < cfg.steps:
                if pc.anneal_lr:
                    self.opt.param_groups[0]["lr"] = pc.lr * (1.0 - self.counters["iterations"] / self.total_iters)
                self._collect()
                pg_loss, v_loss, entropy, ratio = self._update(*self._advantages())
                self.counters["iterations"] += 1
                self.actor.apply_budget_(loop.step / cfg.steps)
                loop.report({"losses/policy": pg_loss.item(), "losses/value": v_loss.item(),
                             "losses/entropy": entropy.item(), "charts/SPS": loop.sps(),  # over the last iteration
                             "charts/approx_kl": (ratio.log().neg().mean()).item()})
                loop.checkpoint_if_due()
        return self.actor
