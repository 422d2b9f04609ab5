"""SAC's environments for K seeds, ``n`` per seed (``--num-envs``), each seed's exactly those of its single
run: in this process one vector env per seed, stepped one after another, or all K x n at once in
worker processes. A single run is K = 1, in this process."""
from __future__ import annotations

import copy
import os

import gymnasium as gym
import numpy as np

from dwc.core.errors import UserError
from dwc.core.signals import stops_ignored
from dwc.train.envs import Resumable, make_vector_env, real_next_obs, resume_episodes, start_episodes


def env_workers(device, seeds: int, envs_per_seed: int) -> bool:
    """Whether the seeds' environments step in worker processes: ``DWC_ENV_WORKERS=1`` or ``0`` says so;
    by default only for several seeds trained on a GPU with a free CPU core per environment (the update
    then leaves the host's cores idle; on a CPU it needs them, and the workers' messages cost more than
    they save)."""
    forced = os.environ.get("DWC_ENV_WORKERS", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    if forced:
        raise UserError(f"DWC_ENV_WORKERS={forced!r}: use 1 (environments in worker processes), 0 (in the "
                        "training process) or leave it unset (workers on a GPU host with a core per environment)")
    return device.type == "cuda" and seeds > 1 and len(os.sched_getaffinity(0)) > seeds * envs_per_seed


class SeedEnvs:
    """The K seeds' environments, ``n`` per seed, each seed's exactly those of its single run
    (:func:`~dwc.train.envs.make_vector_env`, reset with the same seeds, SAME_STEP autoreset). Without
    ``workers`` the K vector envs step one after another in this process; with them all K x n step at
    once in worker processes (gymnasium's AsyncVectorEnv over shared memory), with the same results."""

    def __init__(self, env_id: str, k: int, n: int, workers: bool):
        self.k, self.n, self.workers, self.closed = k, n, workers, False
        if workers:
            with stops_ignored():
                self.vec = gym.vector.AsyncVectorEnv([lambda: Resumable(gym.make(env_id))] * (k * n), context="spawn",
                                                     autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
            self.envs = []
            self.spaces = [copy.deepcopy(self.vec.single_action_space) for _ in range(k)]
        else:
            self.envs = [make_vector_env(env_id, n) for _ in range(k)]
            self.spaces = [e.single_action_space for e in self.envs]
        first = self.vec if workers else self.envs[0]
        self.obs_dim = first.single_observation_space.shape[0]

    def start(self, checkpoints: list, trackers: list, seeds: list[int]) -> tuple[list[np.ndarray], list[bool]]:
        """Each seed's first observations and whether they start fresh episodes, as its single run starts
        (:func:`~dwc.train.envs.start_episodes`): the episodes in flight at its checkpoint, else new ones,
        its envs reset and its action space seeded with ``seeds[k]``."""
        if not self.workers:
            starts = [start_episodes(c, e, space, t, s)
                      for c, e, space, t, s in zip(checkpoints, self.envs, self.spaces, trackers, seeds)]
            return [obs for obs, _ in starts], [fresh for _, fresh in starts]
        # the workers' vector env resets all its envs at once: then the seeds with episodes to go on restore them
        obs, _ = self.vec.reset(seed=[s + i for s in seeds for i in range(self.n)])
        obs = list(obs.reshape(self.k, self.n, -1))
        fresh = []
        for k, (c, space, t, s) in enumerate(zip(checkpoints, self.spaces, trackers, seeds)):
            restored = resume_episodes(c, self.part(k), space, t)
            if restored is None:
                space.seed(s)
            else:
                obs[k] = restored
            fresh.append(restored is None)
        return obs, fresh

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
