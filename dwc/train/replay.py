"""Uniform replay buffer over raw (un-normalised) transitions, stored as numpy arrays.

Raw observations are stored so the critic always sees them through the actor's current
normaliser; the whole buffer is part of a checkpoint, so a resumed SAC run loses nothing.
"""
from __future__ import annotations

import numpy as np
import torch


class ReplayBuffer:
    FIELDS = ("obs", "next_obs", "actions", "rewards", "terminations")

    def __init__(self, capacity: int, obs_dim: int, action_dim: int, seed: int):
        self.capacity = int(capacity)
        self.obs = np.zeros((self.capacity, obs_dim), np.float32)
        self.next_obs = np.zeros((self.capacity, obs_dim), np.float32)
        self.actions = np.zeros((self.capacity, action_dim), np.float32)
        self.rewards = np.zeros(self.capacity, np.float32)
        self.terminations = np.zeros(self.capacity, np.float32)
        self.pos = 0
        self.size = 0
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def add(self, obs, next_obs, actions, rewards, terminations) -> None:
        """Add a batch of transitions (one per env)."""
        for i in range(len(obs)):
            p = self.pos
            self.obs[p], self.next_obs[p], self.actions[p] = obs[i], next_obs[i], actions[i]
            self.rewards[p], self.terminations[p] = rewards[i], terminations[i]
            self.pos = (p + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)

    def sample(self, batch: int, device) -> tuple[torch.Tensor, ...]:
        idx = self.rng.integers(0, self.size, size=batch)
        return tuple(torch.as_tensor(getattr(self, f)[idx], device=device) for f in self.FIELDS)

    def state_dict(self) -> dict:
        # Only the filled part: a 300k-step Hopper buffer is ~30 MB, not the 1e6 capacity.
        d = {f: getattr(self, f)[: self.size].copy() for f in self.FIELDS}
        d.update(pos=self.pos, size=self.size, rng=self.rng.bit_generator.state)
        return d

    def load_state_dict(self, d: dict) -> None:
        if d["size"] > self.capacity:
            raise ValueError(f"checkpoint replay holds {d['size']} transitions, capacity is {self.capacity}")
        for f in self.FIELDS:
            getattr(self, f)[: d["size"]] = d[f]
        self.pos, self.size = int(d["pos"]), int(d["size"])
        self.rng.bit_generator.state = d["rng"]
