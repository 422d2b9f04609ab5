"""SAC's learner: actors, twin critics, target critics, entropy coefficients and their optimisers for K
seeds at once (:class:`SeedsLearner`; a single run is K = 1), and :class:`SACLearner`, one seed's
learner on unstacked tensors, for tests and scripts that drive updates themselves.

What the seeds share is the arithmetic of the update:

- their twin critics are one :class:`~dwc.train.sac_nets.TwinQ` of 2K members: one batched matmul per
  layer for all seeds (the critics are most of an MLP run's update);
- one fused Adam per optimiser over all seeds' parameters (Adam is element-wise, so every seed's
  parameters take the steps their own optimiser would take);
- each seed's loss is its own; their sum is differentiated, which gives every seed's parameters exactly
  their own loss's gradient.
"""
from __future__ import annotations

import copy
import math

import torch

from dwc.core.errors import UserError
from dwc.train.common import critic_view, sample_action
from dwc.train.optim import WiringAdam
from dwc.train.sac_nets import SeedActors, TwinQ


def _critic_rows(k: int) -> slice:
    return slice(2 * k, 2 * k + 2)


class SeedsLearner:
    """SAC for K seeds: ``update`` takes every seed's minibatch and noise stacked on a leading seed
    dimension and returns per-seed losses (K,). It takes its inputs as tensors and never reads a value
    back to the host, so on CUDA it can be captured once and replayed as a graph.
    ``seed_state_dict(k)`` is seed k's learner in a single run's checkpoint format; ``load_seeds``
    takes K of them."""

    OPTIMIZERS = ("actor_opt", "q_opt", "alpha_opt")

    def __init__(self, actors: list, critics: list[TwinQ], sc, device: torch.device, graphs: bool = False,
                 precision: torch.dtype = torch.float32):
        self.actors, self.sc, self.k = SeedActors(actors), sc, len(actors)
        for a in actors:
            a.set_precision(precision)
        self.qf = TwinQ.joined(critics)  # the 2K members of all seeds' critics, seed-major
        self.crossq = sc.critic == "crossq"
        self.qf_target = None if self.crossq else copy.deepcopy(self.qf)  # CrossQ has no target critics
        opt = dict(fused=True, capturable=graphs)  # capturable: step counts live on the GPU
        betas = (sc.adam_beta1, 0.999)
        self.params_per_actor = len(list(actors[0].parameters()))
        # Adam; a learnable wiring trained with --wiring-optim sparse sends sparse gradients, stepped lazily
        self.actor_opt = WiringAdam([p for a in actors for p in a.parameters()], lr=sc.actor_lr, eps=sc.adam_eps,
                                    betas=betas, **opt)
        self.q_opt = torch.optim.Adam(self.qf.parameters(), lr=sc.q_lr, betas=betas, **opt)
        self.log_alpha = torch.full((self.k,), math.log(sc.alpha), device=device, requires_grad=True)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=sc.alpha_lr, **opt)
        self.target_entropy = -float(actors[0].action_scale.numel())
        self.graphs = graphs

    # -- one seed's view, in the single run's format -------------------------------------------------------------

    def seed_state_dict(self, k: int) -> dict:
        rows = _critic_rows(k)
        state = {"actor": self.actors.actors[k].state_dict(),
                 "qf": {n: t[rows].clone() for n, t in self.qf.state_dict().items()},
                 "log_alpha": self.log_alpha.detach()[k].clone()}
        if self.qf_target is not None:
            state["qf_target"] = {n: t[rows].clone() for n, t in self.qf_target.state_dict().items()}
        P = self.params_per_actor
        critic_params = len(self.q_opt.param_groups[0]["params"])
        state["actor_opt"] = _optimizer_part(self.actor_opt, {i: (k * P + i, None) for i in range(P)})
        state["q_opt"] = _optimizer_part(self.q_opt, {i: (i, rows) for i in range(critic_params)})
        state["alpha_opt"] = _optimizer_part(self.alpha_opt, {0: (0, k)})
        return state

    def load_seeds(self, states: list[dict]) -> None:
        """Load K single-run learner states (:meth:`seed_state_dict`'s format), seed k into member k."""
        with torch.no_grad():
            for k, s in enumerate(states):
                self.actors.actors[k].load_state_dict(s["actor"])
                for critic, key in [(c, n) for c, n in ((self.qf, "qf"), (self.qf_target, "qf_target")) if c is not None]:
                    for name, t in critic.state_dict().items():
                        t[_critic_rows(k)] = s[key][name].to(t)
                self.log_alpha[k] = s["log_alpha"].to(self.log_alpha)
        P = self.params_per_actor
        self.actor_opt.load_state_dict(_optimizer_join([s["actor_opt"] for s in states],
                                                       lambda k, i: (k * P + i, None), P * self.k))
        self.q_opt.load_state_dict(_optimizer_join([s["q_opt"] for s in states], lambda k, i: (i, "cat"),
                                                   len(self.q_opt.param_groups[0]["params"])))
        self.alpha_opt.load_state_dict(_optimizer_join([s["alpha_opt"] for s in states], lambda k, i: (0, "stack"), 1))
        for name in self.OPTIMIZERS:
            for group in getattr(self, name).param_groups:  # a run may resume on another device than it started on
                group["capturable"] = self.graphs

    # -- the update ---------------------------------------------------------------------------------------------

    def update(self, obs, next_obs, actions, rewards, terms, noise_next, noise_pi=None) -> dict:
        """One gradient step of every seed; inputs (K, batch, ...). ``noise_pi`` (policy_frequency, K,
        batch, act) also steps the actors and alphas (CleanRL's delayed update). Returns per-seed losses
        (K,), not synced. With CrossQ's critics the actor step reads them by their running statistics."""
        sc, actors, qf = self.sc, self.actors, self.qf
        alpha = self.log_alpha.detach().exp().unsqueeze(1)
        with torch.no_grad():
            next_a, next_logp, _ = sample_action(actors, next_obs, noise_next)
        xn, xn_next = critic_view(sc, actors.normalize, obs), critic_view(sc, actors.normalize, next_obs)
        if self.crossq:  # one forward of the current and next pairs: the batch statistics of both (CrossQ)
            both = qf(torch.cat([xn, xn_next], 1), torch.cat([actions, next_a], 1), update_stats=True)
            q, q_next = both[..., :obs.shape[1]], both[..., obs.shape[1]:].detach()
        else:
            q = qf(xn, actions)
            with torch.no_grad():
                q_next = self.qf_target(xn_next, next_a)
        with torch.no_grad():
            target = rewards + sc.gamma * (1.0 - terms) * (q_next.min(1).values - alpha * next_logp)
        q_losses = (q - target.unsqueeze(1)).square().mean(2).sum(1)
        self.q_opt.zero_grad(set_to_none=True)
        q_losses.sum().backward()
        self.q_opt.step()
        stats = {"losses/q": q_losses.detach() / 2, "losses/q_mean": q.detach().mean((1, 2))}
        if noise_pi is not None:
            stats.update(self._actor_steps(obs, xn, noise_pi))
        if self.qf_target is not None:
            with torch.no_grad():
                torch._foreach_lerp_(list(self.qf_target.parameters()), list(qf.parameters()), sc.tau)
        return stats

    def _actor_steps(self, obs, xn, noise_pi) -> dict:
        """The actors' (and with autotune the alphas') steps, one per ``noise_pi[i]``, the critics frozen."""
        actors, qf = self.actors, self.qf
        qf.requires_grad_(False)  # the actor step computes no critic weight-gradients
        try:
            for eps in noise_pi:
                a, logp, _ = sample_action(actors, obs, eps)
                alpha = self.log_alpha.detach().exp().unsqueeze(1)
                actor_losses = (alpha * logp - qf(xn, a).min(1).values).mean(1)
                self.actor_opt.zero_grad(set_to_none=True)
                actor_losses.sum().backward()
                self.actor_opt.step()
                for actor in actors.actors:
                    actor.constrain_()
                if self.sc.autotune:
                    alpha = self.log_alpha.exp().unsqueeze(1)
                    alpha_losses = -(alpha * (logp.detach() + self.target_entropy)).mean(1)
                    self.alpha_opt.zero_grad(set_to_none=True)
                    alpha_losses.sum().backward()
                    self.alpha_opt.step()
        finally:
            qf.requires_grad_(True)
        return {"losses/actor": actor_losses.detach(), "losses/alpha": self.log_alpha.detach().exp(),
                "losses/entropy": -logp.detach().mean(1)}


class SACLearner(SeedsLearner):
    """One seed's learner (K = 1) on unstacked tensors: ``update`` takes (batch, ...) inputs and
    ``noise_pi`` (policy_frequency, batch, act) and returns scalar losses; ``state_dict`` is a single
    run's. The update is :meth:`SeedsLearner.update`'s, on a seed dimension of one."""

    def __init__(self, actor, obs_dim: int, act_dim: int, sc, device: torch.device, graphs: bool = False,
                 precision: torch.dtype = torch.float32):
        critic = TwinQ(obs_dim + act_dim, sc.q_hidden, mid_dtype=precision, renorm=sc.critic == "crossq").to(device)
        super().__init__([actor], [critic], sc, device, graphs, precision)

    @property
    def actor(self):
        return self.actors.actors[0]

    def state_dict(self) -> dict:
        return self.seed_state_dict(0)

    def load_state_dict(self, s: dict) -> None:
        self.load_seeds([s])

    def update(self, obs, next_obs, actions, rewards, terms, noise_next, noise_pi=None) -> dict:
        one = [t.unsqueeze(0) for t in (obs, next_obs, actions, rewards, terms, noise_next)]
        stats = super().update(*one, None if noise_pi is None else noise_pi.unsqueeze(1))
        return {name: v[0] for name, v in stats.items()}


def _optimizer_part(opt: torch.optim.Optimizer, pick: dict) -> dict:
    """One seed's optimiser state dict from the joint one: ``pick`` maps the seed's parameter index to
    (the joint index, the part of its state tensors: None = all, a slice or an index)."""
    joint = opt.state_dict()
    state = {}
    for i, (j, part) in pick.items():
        if j in joint["state"]:
            state[i] = {n: (v.clone() if part is None or n == "step" else v[part].clone()) if torch.is_tensor(v) else v
                        for n, v in joint["state"][j].items()}
    group = {n: v for n, v in joint["param_groups"][0].items() if n != "params"}
    return {"state": state, "param_groups": [dict(group, params=sorted(pick))]}


def _optimizer_join(parts: list[dict], where, count: int) -> dict:
    """The joint optimiser state dict from K single-seed ones: ``where(k, i)`` gives the joint index of
    seed k's parameter i and how the seeds' state tensors join there (None: own parameter, "cat" on
    the member dimension, "stack" scalars)."""
    had = [bool(p["state"]) for p in parts]
    if any(had) and not all(had):
        raise UserError("the seeds' checkpoints are at different points of training (some have optimiser state, "
                        "some not); resume them alone with dwc train --out RUN --resume")
    state: dict = {}
    joins: dict = {}
    for k, part in enumerate(parts):
        for i, s in part["state"].items():
            j, how = where(k, int(i))
            if how is None:
                state[j] = s
            else:
                state.setdefault(j, []).append(s)
                joins[j] = torch.cat if how == "cat" else torch.stack
    for j, join in joins.items():
        v = state[j]  # every seed's step count is the same: the first one's is kept
        state[j] = {n: (v[0][n] if n == "step" else join([s[n] for s in v])) if torch.is_tensor(v[0][n]) else v[0][n]
                    for n in v[0]}
    group = {n: x for n, x in parts[0]["param_groups"][0].items() if n != "params"}
    return {"state": state, "param_groups": [dict(group, params=list(range(count)))]}
