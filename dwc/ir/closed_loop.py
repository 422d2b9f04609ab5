"""Closed-loop episodes driven by integer actions, shared by the reference run (host) and the RTL
run (inside the cocotb simulator), so both quantise observations and apply actions identically.

Observation (float) -> fixed-point integers (the circuit's input) -> integer action (from the RTL or
the reference executor) -> float action -> ``env.step``. Same seed + same actions = same episode,
because MuJoCo is deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dwc.core.errors import OptionError
from dwc.ir import Graph
from dwc.ir.graph import check_observation


@dataclass
class Episode:
    """One seeded episode; call :meth:`step` with the integer action for :attr:`q` until :attr:`done`."""
    env: object
    graph: Graph
    seed: int
    max_steps: int | None = None
    observations: list = field(default_factory=list)  # integer observations fed to the policy
    actions: list = field(default_factory=list)  # integer actions it answered
    ret: float = 0.0
    done: bool = False

    def __post_init__(self):
        # FixedFormat.quantize for all dims at once (the same float64 arithmetic, checked in tests):
        # this runs once per closed-loop step, inside the simulator's Python.
        f = self.graph.obs_formats
        self._scale = np.array([2.0 ** x.frac for x in f])
        self._lo, self._hi = np.array([x.min_int for x in f]), np.array([x.max_int for x in f])
        obs, _ = self.env.reset(seed=self.seed)
        self._set(obs)

    def _set(self, obs) -> None:
        check_observation(obs, f"at step {len(self.actions)} of the episode with seed {self.seed}")
        self.q = np.clip(np.rint(np.asarray(obs, dtype=np.float64) * self._scale), self._lo, self._hi).astype(np.int64)

    def step(self, action_int) -> None:
        action_int = [int(a) for a in action_int]
        self.observations.append([int(v) for v in self.q])
        self.actions.append(action_int)
        obs, r, term, trunc, _ = self.env.step(self.graph.action_format.to_float(action_int))
        self.ret += float(r)
        self.done = bool(term or trunc) or (self.max_steps is not None and len(self.actions) >= self.max_steps)
        self._set(obs)

    def record(self) -> dict:
        return {"seed": self.seed, "return": self.ret, "steps": len(self.actions),
                "observations": self.observations, "actions": self.actions}


def make_env(env_id: str, graph: Graph):
    """The env, checked against the circuit's port widths (a clear error, not a shape crash); an id
    Gymnasium does not know (--env, or a graph's meta.env) is one line, named as the ``env`` option."""
    import gymnasium as gym
    if not isinstance(env_id, str):
        raise OptionError("env", ": none given, and the circuit names none (its graph.json has no meta.env)")
    try:
        env = gym.make(env_id)
    except gym.error.Error as e:  # NameNotFound, VersionNotFound, DeprecatedEnv, ...
        raise OptionError("env", f" {env_id!r}: unknown environment ({e})") from None
    if env.observation_space.shape != (graph.obs_dim,) or env.action_space.shape != (graph.action_dim,):
        env.close()
        raise OptionError("env", f" {env_id}: it has {env.observation_space.shape[0]} observation and "
                         f"{env.action_space.shape[0]} action dims; the circuit has {graph.obs_dim} and "
                         f"{graph.action_dim}")
    return env


def action_mismatches(a: list[dict], b: list[dict]) -> int:
    """Steps whose actions differ between two runs of the same seeded episodes, plus any length gap."""
    return sum(sum(x != y for x, y in zip(p["actions"], q["actions"])) + abs(p["steps"] - q["steps"])
               for p, q in zip(a, b))


def reference_episodes(graph: Graph, env_id: str, seeds: list[int], max_steps: int | None = None,
                       progress: bool = False) -> list[dict]:
    """The same episodes driven by the IR reference executor."""
    from tqdm import tqdm

    from dwc.ir.reference import actions_int
    env = make_env(env_id, graph)
    out = []
    for seed in tqdm(seeds, desc="reference episodes", unit="ep", disable=not progress):
        ep = Episode(env, graph, seed, max_steps)
        while not ep.done:
            ep.step(actions_int(graph, ep.q[None])[0])
        out.append(ep.record())
    env.close()
    return out
