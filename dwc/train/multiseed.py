"""Several seeds of one SAC configuration trained together in one process (``dwc train --seeds 1-8``).

Each seed keeps everything of its own: its actor (the module a single run builds, so its checkpoint,
evaluation and compilation are a single run's), its twin critics, replay buffer, environments,
action sampler and random stream (a torch.Generator in the state the single run's global generator
would be in). What the seeds share is the arithmetic of the update:

- their twin critics are one :class:`~dwc.train.sac.TwinQ` of 2K members: one batched matmul per layer
  for all seeds (the critics are most of an MLP run's update);
- one fused Adam per optimiser over all seeds' parameters (Adam is element-wise, so every seed's
  parameters take the steps their own optimiser would take);
- MLP actors (``--policy mlp``) run as batched matmuls over stacked weights. The circuit actors
  (dwc, gates, qmlp) run their own forward and backward per seed inside the batched update: the LUT
  layers' custom autograd functions (straight-through tables, EFD input gradients, the learnable
  wiring's score gradient and its cached argmax/softmax) work on one network's tensors;
- acting is one call over all seeds (each seed's own forward inside it, so one CUDA graph and one
  host sync for all K), and the K running observation normalisers update as one stacked tensor;
  then the K environments step, one after another or, on a GPU host with a core to spare for each,
  all at once in worker processes (:class:`SeedEnvs`).

Seed k follows ``dwc train --seed k`` bit for bit on a CPU (tests/test_multiseed.py), as long as an
element-wise tensor of one seed in the update (batch x action dims: log-std, tanh, log) is a whole
number of the CPU's SIMD chunks (32 floats with AVX-512, 16 with AVX2): torch computes the elements
of a tensor's tail past the last whole chunk with scalar libm calls and the rest with vectorised
ones, which can differ in the last bit. ``--batch-size`` 256 (the default) meets it for any action
dimension; other batch sizes train equally well but not bit-identically to the single run.

Checkpoints: each seed's run directory gets exactly the checkpoint its single run would write at the
same step, so ``dwc train --out OUT/seedS --resume`` continues one seed alone, and ``--seeds ...
--resume`` continues them together (a seed whose checkpoint is behind the others first catches up
alone, as a single run, then they go on together).
"""
from __future__ import annotations

import contextlib
import copy
import math
import os
import random
import signal
import threading
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from dwc.core.config import TrainConfig
from dwc.core.errors import UserError, interrupts_held
from dwc.models import build_actor
from dwc.models.actors import MLPActor
from dwc.models.encoding import CLIP, running_stats
from dwc.core.seeds import SUMMARY, check_together
from dwc.train.common import (GraphedCall, PhaseClock, critic_view, flush_denormals, keep_freed_memory, resolve_device, resolve_precision, sample_action)
from dwc.train.envs import (Resumable, check_env_id, episodes_state, make_vector_env, real_next_obs, resume_episodes)
from dwc.train.loop import train_loop
from dwc.train.replay import ReplayBuffer
from dwc.train.optim import WiringAdam
from dwc.train.run import RunDir
from dwc.train.checkpoint import seed_everything
from dwc.train.sac import SACLearner, TwinQ


def _stacked_linear(layers: list[nn.Linear], x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Each seed's ``layers[k](x[k])`` for x (K, batch, in) as one batched matmul (the same sums as
    nn.Linear's, element for element, on CPU)."""
    w = torch.stack([layer.weight for layer in layers]).transpose(1, 2)
    b = torch.stack([layer.bias for layer in layers]).unsqueeze(1)
    if dtype == torch.float32:
        return torch.baddbmm(b, x, w)
    return torch.baddbmm(b.to(dtype), x.to(dtype), w.to(dtype))


class SeedActors:
    """K actors of one kind (one per seed) as one: ``dist_params`` and ``normalize`` take (K, batch, obs)
    and return (K, batch, ...), so :func:`dwc.train.common.sample_action` works on all seeds at once."""

    def __init__(self, actors: list):
        self.actors = actors
        self.action_scale, self.action_bias = actors[0].action_scale, actors[0].action_bias  # one env: one action box
        self.fused = all(isinstance(a, MLPActor) for a in actors)

    def squash(self, u: torch.Tensor) -> torch.Tensor:
        return self.actors[0].squash(u)

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """Every seed's observations through its own running normaliser (ObsNormalizer.forward's steps)."""
        norms = [a.normalizer for a in self.actors]
        mean = torch.stack([n.mean for n in norms]).unsqueeze(1)
        std = torch.sqrt(torch.stack([n.var for n in norms]).unsqueeze(1) + norms[0].eps).to(obs.dtype)
        return ((obs - mean.to(obs.dtype)) / std).clamp(-CLIP, CLIP)

    @torch.no_grad()
    def update_normalizers(self, obs: torch.Tensor) -> None:
        """ObsNormalizer.update for every seed at once, ``obs`` (K, n, obs): its update
        (:func:`~dwc.models.encoding.running_stats`) on the seeds' statistics stacked, written back
        with one multi-tensor copy (K
        separate updates are a dozen kernel launches each, and a host sync each for the frozen flag;
        a normaliser is only frozen after training, which :func:`train_seeds` checks once)."""
        norms = [a.normalizer for a in self.actors]
        mean, var, count = (torch.stack([getattr(n, f) for n in norms]) for f in ("mean", "var", "count"))
        new_mean, new_var, total = running_stats(mean, var, count.unsqueeze(1), obs.to(mean))
        torch._foreach_copy_([t for nm in norms for t in (nm.mean, nm.var, nm.count)],
                             [t for k in range(self.k) for t in (new_mean[k], new_var[k], total[k, 0])])

    @property
    def k(self) -> int:
        return len(self.actors)

    @torch.no_grad()
    def explore(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Every seed's exploration action for its observations, ``obs`` (K, n, obs) -> (K, n, act):
        each seed's own forward (its single run's arithmetic, whatever the actor), launched as one
        call so that on a GPU the K forwards are one CUDA graph and one sync."""
        return torch.stack([sample_action(a, o, e)[0] for a, o, e in zip(self.actors, obs, noise)])

    def dist_params(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.fused:  # circuit actors: each seed's own forward (see the module's docstring)
            means, log_stds = zip(*(a.dist_params(o) for a, o in zip(self.actors, obs)))
            return torch.stack(means), torch.stack(log_stds)
        a = self.actors
        # The hidden x hidden layer (nearly all of the FLOPs) batched; the input layer and the heads per
        # seed: torch's 2-D and batched kernels sum thin products (a 1-wide head, the weight gradient
        # of a few-input layer) in different orders, which would end bit-exactness with the single run.
        h = torch.relu(torch.stack([m.trunk[0](x) for m, x in zip(a, self.normalize(obs))]))
        h = torch.relu(_stacked_linear([m.trunk[2] for m in a], h, a[0].compute_dtype)).float()
        return (torch.stack([m.mean(x) for m, x in zip(a, h)]),
                a[0]._bound_log_std(torch.stack([m.log_std(x) for m, x in zip(a, h)])))


def _critic_rows(k: int) -> slice:
    return slice(2 * k, 2 * k + 2)


class SeedsLearner:
    """:class:`~dwc.train.sac.SACLearner` for K seeds at once: ``update`` takes every seed's minibatch and
    noise stacked on a leading seed dimension and returns per-seed losses (K,). ``seed_state_dict(k)``
    is exactly what seed k's own SACLearner.state_dict() would be; ``load_seeds`` takes K of them."""

    OPTIMIZERS = SACLearner.OPTIMIZERS

    def __init__(self, actors: list, critics: list[TwinQ], sc, device: torch.device, graphs: bool = False,
                 precision: torch.dtype = torch.float32):
        self.actors, self.sc, self.k = SeedActors(actors), sc, len(actors)
        for a in actors:
            a.set_precision(precision)
        self.qf = copy.deepcopy(critics[0])  # then the 2K members of all seeds' critics, seed-major
        self.qf.weights = nn.ParameterList(nn.Parameter(torch.cat([c.weights[i].detach() for c in critics]))
                                           for i in range(len(critics[0].weights)))
        self.qf.biases = nn.ParameterList(nn.Parameter(torch.cat([c.biases[i].detach() for c in critics]))
                                          for i in range(len(critics[0].biases)))
        self.qf.members = 2 * self.k
        self.qf_target = copy.deepcopy(self.qf)
        opt = dict(fused=True, capturable=graphs)
        self.params_per_actor = len(list(actors[0].parameters()))
        # SACLearner's actor optimiser: Adam that also steps a sparse wiring gradient (--wiring-optim sparse)
        self.actor_opt = WiringAdam([p for a in actors for p in a.parameters()], lr=sc.actor_lr, eps=sc.adam_eps, **opt)
        self.q_opt = torch.optim.Adam(self.qf.parameters(), lr=sc.q_lr, **opt)
        self.log_alpha = torch.full((self.k,), math.log(sc.alpha), device=device, requires_grad=True)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=sc.alpha_lr, **opt)
        self.target_entropy = -float(actors[0].action_scale.numel())
        self.graphs = graphs

    def q(self, critic: TwinQ, xn: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """(K, 2, batch): each seed's twin Q of its own (normalised obs, action) pairs (TwinQ.forward's
        steps with one input per seed instead of one for both members)."""
        h = torch.cat([xn, action], -1)
        h = h.unsqueeze(1).expand(-1, 2, -1, -1).reshape(2 * self.k, *h.shape[1:])
        (w0, w1, w2), (b0, b1, b2), dt = critic.weights, critic.biases, critic.mid_dtype
        h = torch.relu(torch.baddbmm(b0, h, w0))
        h = torch.relu(torch.baddbmm(b1.to(dt), h.to(dt), w1.to(dt))).float()
        return torch.baddbmm(b2, h, w2).squeeze(-1).view(self.k, 2, -1)

    # -- one seed's view, in the single run's format -------------------------------------------------------------

    def _actor_indices(self, k: int) -> range:
        return range(k * self.params_per_actor, (k + 1) * self.params_per_actor)

    def seed_state_dict(self, k: int) -> dict:
        rows = _critic_rows(k)
        state = {"actor": self.actors.actors[k].state_dict(),
                 "qf": {n: t[rows].clone() for n, t in self.qf.state_dict().items()},
                 "qf_target": {n: t[rows].clone() for n, t in self.qf_target.state_dict().items()},
                 "log_alpha": self.log_alpha.detach()[k].clone()}
        critic_params = len(self.q_opt.param_groups[0]["params"])
        own = {i: (j, None) for i, j in enumerate(self._actor_indices(k))}  # this seed's actor parameters
        state["actor_opt"] = _optimizer_part(self.actor_opt, own)
        state["q_opt"] = _optimizer_part(self.q_opt, {i: (i, rows) for i in range(critic_params)})
        state["alpha_opt"] = _optimizer_part(self.alpha_opt, {0: (0, k)})
        return state

    def load_seeds(self, states: list[dict]) -> None:
        """Load K single-run learner states (SACLearner.state_dict() format), seed k into member k."""
        with torch.no_grad():
            for k, s in enumerate(states):
                self.actors.actors[k].load_state_dict(s["actor"])
                for critic, key in ((self.qf, "qf"), (self.qf_target, "qf_target")):
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
            for group in getattr(self, name).param_groups:
                group["capturable"] = self.graphs

    # -- the update ---------------------------------------------------------------------------------------------

    def update(self, obs, next_obs, actions, rewards, terms, noise_next, noise_pi=None) -> dict:
        """SACLearner.update for every seed; inputs (K, batch, ...), ``noise_pi`` (policy_frequency, K,
        batch, act). Each seed's loss is its single run's; their sum is differentiated, which gives every
        seed's parameters exactly their own loss's gradient. Returns per-seed losses (K,), not synced."""
        sc, actors, qf = self.sc, self.actors, self.qf
        alpha = self.log_alpha.detach().exp().unsqueeze(1)
        with torch.no_grad():
            next_a, next_logp, _ = sample_action(actors, next_obs, noise_next)
            q_next = self.q(self.qf_target, critic_view(sc, actors.normalize, next_obs), next_a).min(1).values \
                - alpha * next_logp
            target = rewards + sc.gamma * (1.0 - terms) * q_next
        xn = critic_view(sc, actors.normalize, obs)
        q = self.q(qf, xn, actions)
        q_losses = (q - target.unsqueeze(1)).square().mean(2).sum(1)
        self.q_opt.zero_grad(set_to_none=True)
        q_losses.sum().backward()
        self.q_opt.step()
        stats = {"losses/q": q_losses.detach() / 2, "losses/q_mean": q.detach().mean((1, 2))}

        if noise_pi is not None:
            qf.requires_grad_(False)
            try:
                for eps in noise_pi:
                    a, logp, _ = sample_action(actors, obs, eps)
                    alpha = self.log_alpha.detach().exp().unsqueeze(1)
                    actor_losses = (alpha * logp - self.q(qf, xn, a).min(1).values).mean(1)
                    self.actor_opt.zero_grad(set_to_none=True)
                    actor_losses.sum().backward()
                    self.actor_opt.step()
                    for actor in actors.actors:
                        actor.constrain_()
                    if sc.autotune:
                        alpha = self.log_alpha.exp().unsqueeze(1)
                        alpha_losses = -(alpha * (logp.detach() + self.target_entropy)).mean(1)
                        self.alpha_opt.zero_grad(set_to_none=True)
                        alpha_losses.sum().backward()
                        self.alpha_opt.step()
            finally:
                qf.requires_grad_(True)
            stats.update({"losses/actor": actor_losses.detach(), "losses/alpha": self.log_alpha.detach().exp(),
                          "losses/entropy": -logp.detach().mean(1)})
        with torch.no_grad():
            torch._foreach_lerp_(list(self.qf_target.parameters()), list(qf.parameters()), sc.tau)
        return stats


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


def _env_workers(device: torch.device, count: int) -> bool:
    """Whether the seeds' environments step in worker processes: ``DWC_ENV_WORKERS=1`` or ``0`` says so;
    by default only when training on a GPU with a free CPU core per environment (the update then leaves
    the host's cores idle; on a CPU it needs them, and the workers' messages cost more than they save)."""
    forced = os.environ.get("DWC_ENV_WORKERS", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    if forced:
        raise UserError(f"DWC_ENV_WORKERS={forced!r}: use 1 (environments in worker processes), 0 (in the "
                        "training process) or leave it unset (workers on a GPU host with a core per environment)")
    return device.type == "cuda" and len(os.sched_getaffinity(0)) > count


@contextlib.contextmanager
def _signals_ignored():
    """Processes started in the block ignore Ctrl-C and SIGTERM (the disposition survives their exec): the
    trainer alone gets them, checkpoints, and then closes its workers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


class SeedEnvs:
    """The K seeds' environments, ``n`` per seed, each seed's exactly those of its single run
    (:func:`~dwc.train.envs.make_vector_env`, reset with the same seeds, SAME_STEP autoreset). Without
    ``workers`` the K vector envs step one after another in this process; with them all K x n step at
    once in worker processes (gymnasium's AsyncVectorEnv over shared memory), with the same results."""

    def __init__(self, env_id: str, k: int, n: int, workers: bool):
        self.k, self.n, self.workers, self.closed = k, n, workers, False
        if workers:
            with _signals_ignored():
                self.vec = gym.vector.AsyncVectorEnv([lambda: Resumable(gym.make(env_id))] * (k * n), context="spawn",
                                                     autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
            self.envs = []
            self.spaces = [copy.deepcopy(self.vec.single_action_space) for _ in range(k)]
        else:
            self.envs = [make_vector_env(env_id, n) for _ in range(k)]
            self.spaces = [e.single_action_space for e in self.envs]
        first = self.vec if workers else self.envs[0]
        self.obs_dim = first.single_observation_space.shape[0]

    def reset(self, seeds: list[int]) -> list[np.ndarray]:
        """Seed k's vector env reset with ``seeds[k]`` (its envs get seeds[k], seeds[k] + 1, ...)."""
        if not self.workers:
            return [e.reset(seed=s)[0] for e, s in zip(self.envs, seeds)]
        obs, _ = self.vec.reset(seed=[s + i for s in seeds for i in range(self.n)])
        return list(obs.reshape(self.k, self.n, -1))

    def part(self, k: int) -> "_SeedPart":
        """Seed k's envs, read and set as one vector env (their checkpoint state)."""
        return _SeedPart(self, k)

    def step(self, actions: list[np.ndarray]) -> list[tuple]:
        """Each seed's (next_obs, the observation reached (the final one where an episode ended),
        rewards, terminations, episode ends), for its actions (n, act)."""
        if self.workers:
            next_obs, rewards, terms, truncs, infos = self.vec.step(np.concatenate(actions))
            dones = terms | truncs
            reached = real_next_obs(next_obs, dones, infos)
            return [(next_obs[p], reached[p], rewards[p], terms[p], dones[p])
                    for p in (slice(k * self.n, (k + 1) * self.n) for k in range(self.k))]
        out = []
        for e, a in zip(self.envs, actions):
            next_obs, rewards, terms, truncs, infos = e.step(a)
            dones = terms | truncs
            out.append((next_obs, real_next_obs(next_obs, dones, infos), rewards, terms, dones))
        return out

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for e in self.envs or [self.vec]:
                e.close()


class _SeedPart:
    """One seed's envs of a :class:`SeedEnvs`, with a vector env's ``get_attr`` and ``set_attr``."""

    def __init__(self, envs: SeedEnvs, k: int):
        self.envs, self.k, self.rows = envs, k, slice(k * envs.n, (k + 1) * envs.n)

    def get_attr(self, name: str) -> tuple:
        if not self.envs.workers:
            return self.envs.envs[self.k].get_attr(name)
        return self.envs.vec.get_attr(name)[self.rows]

    def set_attr(self, name: str, values: list) -> None:
        if not self.envs.workers:
            return self.envs.envs[self.k].set_attr(name, values)
        every = list(self.envs.vec.get_attr(name))  # the workers' vector env sets all its envs at once
        every[self.rows] = values
        self.envs.vec.set_attr(name, every)


def _where(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} CPU thread(s)"


def train_seeds(cfgs: list[TrainConfig], dirs: list[Path], resume: list[bool], progress: bool = True,
                commands: list[list[str]] | None = None, log=print) -> torch.device:
    """Train (or resume) seed k of ``cfgs`` into ``dirs[k]`` up to ``cfgs[k].steps``, all together;
    ``resume[k]``: continue dirs[k] from its checkpoint; ``commands[k]`` is recorded in its commands.txt.
    The configs differ only in their seed. Returns the device trained on."""
    from dwc.train.trainer import train

    cfg0 = cfgs[0]
    check_together(cfg0)
    if len({c.seed for c in cfgs}) != len(cfgs):
        raise UserError("every seed trained together must differ")
    device = resolve_device(cfg0.device)
    precision = resolve_precision(cfg0.precision, device)
    check_env_id(cfg0.env).close()
    torch.set_num_threads(cfg0.threads)
    keep_freed_memory()
    commands = commands or [None] * len(cfgs)
    runs = [RunDir(d, c, resume=r, progress=False, command=cmd) for c, d, r, cmd in zip(cfgs, dirs, resume, commands)]
    starts = [r.start_step for r in runs]
    if len(set(starts)) > 1:  # e.g. a kill between two seeds' checkpoints: the lagging ones catch up alone
        goal = min(max(starts), cfg0.steps)
        for k, run in enumerate(runs):
            run.close()
            if starts[k] < goal:
                log(f"{dirs[k]}: at step {starts[k]}, the others at {goal}: training it alone up to {goal}")
                alone = TrainConfig.from_dict({**cfgs[k].to_dict(), "steps": goal})
                train(alone, dirs[k], resume=runs[k].resume_state is not None, progress=progress,
                      command=commands[k], log=log)
        runs = [RunDir(d, c, resume=True, progress=False) for c, d in zip(cfgs, dirs)]
    seeds = ", ".join(str(c.seed) for c in cfgs)
    log(f"training {cfg0.algo} {cfg0.actor.policy} on {cfg0.env}, seeds {seeds} together: device {device} "
        f"({_where(device)}), {str(precision).removeprefix('torch.')} matmuls")
    try:
        for run in runs:
            run.record_leg(device=str(device), where=_where(device), precision=str(precision).removeprefix("torch."),
                           seeds_together=[c.seed for c in cfgs])
        if runs[0].start_step >= cfg0.steps:
            log(f"seeds {seeds}: already at step {runs[0].start_step} >= --steps {cfg0.steps}; nothing to train")
        else:
            runs[0].progress = progress
            _train_sac_seeds(cfgs, runs, device, precision)
    finally:
        for run in runs:
            run.close()
    return device


def _train_sac_seeds(cfgs: list[TrainConfig], runs: list[RunDir], device: torch.device, precision: torch.dtype):
    """dwc.train.sac.train_sac for every seed, in lockstep (its loop, line for line, once per seed)."""
    cfg, sc = cfgs[0], cfgs[0].sac
    envs = SeedEnvs(cfg.env, len(cfgs), cfg.num_envs, _env_workers(device, len(cfgs) * cfg.num_envs))
    spaces, actors, critics, gens, inits = envs.spaces, [], [], [], []
    for c, space in zip(cfgs, spaces):  # each seed's start exactly as its single run makes it: seeds, actor, critics
        seed_everything(c.seed)
        obs_dim, act_dim = envs.obs_dim, space.shape[0]
        actor = build_actor(c.actor, obs_dim, act_dim, space.low, space.high).to(device)
        actor.set_precision(precision)
        critics.append(TwinQ(obs_dim + act_dim, sc.q_hidden, mid_dtype=precision).to(device))
        gen = torch.Generator(device=device)
        if device.type == "cpu":
            gen.set_state(torch.get_rng_state())
        else:
            gen.manual_seed(c.seed)  # the single run's CUDA generator: seeded, not drawn from yet
        actors.append(actor), gens.append(gen)
        inits.append({"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()})
    graphs = device.type == "cuda" and cfg.cuda_graphs and all([a.prepare_cuda_graphs() for a in actors])
    learner = SeedsLearner(actors, critics, sc, device, graphs, precision)
    update_step = GraphedCall(learner.update) if graphs else learner.update

    explore = GraphedCall(learner.actors.explore) if graphs else learner.actors.explore
    rbs = [ReplayBuffer(min(sc.buffer_size, c.steps), obs_dim, act_dim, seed=c.seed) for c in cfgs]
    counters = [{"updates": 0} for _ in cfgs]

    def rng(k: int):
        def state() -> dict:
            s = dict(inits[k], cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
            if device.type == "cpu":
                s["torch"] = gens[k].get_state()
            else:
                s["cuda"][device.index or 0] = gens[k].get_state()
            return s
        return state

    resumed = [r.resume_state for r in runs if r.resume_state]
    if resumed:
        learner.load_seeds([r.resume_state for r in runs])
    for k, (c, run) in enumerate(zip(cfgs, runs)):
        run.rng = rng(k)
        if run.resume_state:
            s = run.resume_state
            rbs[k].load_state_dict(s["replay"])
            counters[k] = s["counters"]
            if device.type == "cpu":
                gens[k].set_state(s["rng"]["torch"])
            elif s["rng"].get("cuda"):
                gens[k].set_state(s["rng"]["cuda"][device.index or 0])
    obs = None  # every seed's observations acted on next

    def state(k: int):
        def checkpoint(step: int) -> dict:  # seed k's, as its single run's: with its episodes in flight
            s = {**learner.seed_state_dict(k), "replay": rbs[k].state_dict(), "counters": counters[k],
                 "obs_dim": obs_dim, "act_dim": act_dim}
            if obs is not None:
                s["episodes"] = episodes_state(envs.part(k), obs[k], spaces[k], loops[k].episodes)
            return s
        return checkpoint

    def update(log: bool) -> bool:
        """One update of every seed; with ``log``, logs its losses if it also steps the actors (and says so)."""
        # ReplayBuffer.sample's draw from each seed's own buffer and generator, sent to the device as one
        # (seeds, batch, ...) tensor per field
        idx = [rb.rng.integers(0, rb.size, size=sc.batch_size) for rb in rbs]
        batch = [torch.as_tensor(np.stack([getattr(rb, f)[i] for rb, i in zip(rbs, idx)]), device=device)
                 for f in ReplayBuffer.FIELDS]
        noise_next = torch.stack([torch.randn(sc.batch_size, act_dim, device=device, generator=g) for g in gens])
        noise_pi = None
        if counters[0]["updates"] % sc.policy_frequency == 0:
            noise_pi = torch.stack([torch.randn(sc.policy_frequency, sc.batch_size, act_dim, device=device, generator=g)
                                    for g in gens], 1)
        with flush_denormals():
            stats = update_step(*batch, noise_next, noise_pi)
        for c in counters:
            c["updates"] += 1
        if not (log and noise_pi is not None):
            return False
        values = {name: v.tolist() for name, v in stats.items()}
        for k, run in enumerate(runs):
            run.log(loops[0].step, **{name: v[k] for name, v in values.items()})
        return True

    if any(bool(a.normalizer.frozen) for a in actors):
        raise UserError("a seed's observation normaliser is frozen (an exported policy's); train from a "
                        "checkpoint of dwc train instead")
    n = cfg.num_envs
    updates_per_iter = max(1, round(n * sc.utd))
    with contextlib.ExitStack() as stack:
        stack.callback(envs.close)  # last: after every seed's final checkpoint (which reads the envs)
        loops = [stack.enter_context(train_loop(run, None, a, state(k))) for k, (run, a) in enumerate(zip(runs, actors))]
        if loops[0].bar is not None:
            seeds = ",".join(str(c.seed) for c in cfgs)
            loops[0].bar.set_description(f"{cfg.algo} {cfg.actor.policy} {cfg.env} seeds {seeds}")
        fresh = envs.reset([c.seed + run.start_step for c, run in zip(cfgs, runs)])
        started = []
        for k, (c, run) in enumerate(zip(cfgs, runs)):  # each seed as its single run starts or resumes
            restored = resume_episodes(run.resume_state, envs.part(k), spaces[k], loops[k].episodes)
            if restored is None:  # a new run (or a checkpoint without its episodes): fresh ones, seeded by the step
                spaces[k].seed(c.seed + run.start_step)
                actors[k].normalizer.update(torch.as_tensor(fresh[k], device=device))
            started.append(fresh[k] if restored is None else restored)
        obs = started
        clock, iterations, log_due = PhaseClock(), 0, False
        while loops[0].step < cfg.steps:
            # a whole iteration changes together (as in dwc.train.sac): an interrupt is taken at its end
            with interrupts_held():
                if loops[0].step < sc.learning_starts:
                    actions = [np.stack([space.sample() for _ in range(n)]) for space in spaces]
                else:  # all seeds' observations in, all their actions out: one transfer each way
                    noise = torch.stack([torch.randn(n, act_dim, device=device, generator=g) for g in gens])
                    actions = list(explore(torch.as_tensor(np.stack(obs), dtype=torch.float32, device=device),
                                           noise).cpu().numpy())
                clock.lap("act")
                steps = envs.step(actions)
                clock.lap("env")
                for k, (next_obs, reached, rewards, terms, dones) in enumerate(steps):
                    rbs[k].add(obs[k], reached, actions[k], rewards, terms)
                    loops[k].advance(n, rewards, dones)
                    obs[k] = next_obs
                learner.actors.update_normalizers(torch.as_tensor(np.stack(obs), device=device))
                step = loops[0].step
                clock.lap("record")
                if step > sc.learning_starts:
                    log_due |= step % 1000 < n
                    for _ in range(updates_per_iter):
                        if update(log=log_due):  # logged at an update that also steps the actors and alphas
                            log_due = False
                for a in actors:
                    a.apply_budget_(step / cfg.steps)
                clock.lap("update")
            iterations += 1
            if step % 1000 < n:  # SPS (of each seed) over the last 1000 steps, and where the time went
                times = clock.report(iterations)
                iterations = 0
                for loop in loops:
                    loop.report({"charts/SPS": loop.sps(), **times})
            for loop in loops:
                loop.checkpoint_if_due()
            clock.lap("record")
    return actors


__all__ = ["SUMMARY", "SeedActors", "SeedsLearner", "train_seeds"]
