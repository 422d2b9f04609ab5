"""Pieces both algorithms share: device choice, the squashed-Gaussian policy, evaluation."""
from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from ..errors import UserError

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {name}: no CUDA GPU is available to this torch build "
                        f"(torch {torch.__version__}); use --device cpu or auto")
    try:
        return torch.device(name)
    except RuntimeError:
        raise UserError(f"--device {name!r} is not a device (use auto, cpu or cuda)") from None


def squashed_log_prob(actor, mean: torch.Tensor, log_std: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """log pi(a) for a = tanh(u) * scale + bias with u ~ N(mean, std), summed over action dims."""
    logp = -0.5 * ((u - mean) / log_std.exp()).square() - log_std - LOG_SQRT_2PI
    logp = logp - torch.log(actor.action_scale * (1 - torch.tanh(u).square()) + 1e-6)
    return logp.sum(-1)


def sample_action(actor, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reparameterised sample: (action, log_prob, pre-tanh u)."""
    mean, log_std = actor.dist_params(obs)
    u = mean + log_std.exp() * torch.randn_like(mean)
    return actor.squash(u), squashed_log_prob(actor, mean, log_std, u), u


@torch.no_grad()
def evaluate(act_fn, env_id: str, episodes: int, seed: int, progress: bool = False) -> dict:
    """Deterministic episodes of ``act_fn(obs: np.ndarray) -> np.ndarray`` on fresh seeded envs."""
    from tqdm import tqdm
    env = gym.make(env_id)
    returns, lengths = [], []
    for ep in tqdm(range(episodes), desc=f"eval {env_id}", disable=not progress, unit="ep"):
        obs, _ = env.reset(seed=seed + ep)
        done, ret, n = False, 0.0, 0
        while not done:
            obs, r, term, trunc, _ = env.step(act_fn(obs))
            ret += float(r)
            n += 1
            done = term or trunc
        returns.append(ret)
        lengths.append(n)
    env.close()
    r = np.asarray(returns)
    return {"env": env_id, "episodes": episodes, "seed": seed, "mean_return": float(r.mean()),
            "median_return": float(np.median(r)), "std_return": float(r.std()),
            "min_return": float(r.min()), "max_return": float(r.max()),
            "mean_length": float(np.mean(lengths)), "returns": [float(x) for x in r]}


def actor_act_fn(actor, device):
    def act(obs: np.ndarray) -> np.ndarray:
        o = torch.as_tensor(obs, dtype=torch.float32, device=device).unsqueeze(0)
        return actor.act(o)[0].cpu().numpy()
    return act


class EpisodeTracker:
    """Sums rewards per env and logs each finished episode's return and length."""

    def __init__(self, num_envs: int):
        self.ret = np.zeros(num_envs)
        self.len = np.zeros(num_envs, dtype=np.int64)
        self.recent: list[float] = []
        self.episodes = 0

    def step(self, run, step: int, rewards: np.ndarray, dones: np.ndarray) -> None:
        self.ret += rewards
        self.len += 1
        for i in np.flatnonzero(dones):
            self.episodes += 1
            self.recent = (self.recent + [float(self.ret[i])])[-10:]
            run.log(step, **{"charts/episodic_return": self.ret[i], "charts/episodic_length": self.len[i]})
            self.ret[i], self.len[i] = 0.0, 0

    def postfix(self, sps: float) -> dict:
        return {"sps": f"{sps:.0f}", "ret": f"{np.mean(self.recent):.1f}" if self.recent else "-"}


class RateMeter:
    """Env-steps per second over the window since the previous ``rate()`` call."""

    def __init__(self, step: int):
        import time
        self._clock = time.perf_counter
        self.step, self.t = step, self._clock()
        self.last = 0.0

    def rate(self, step: int) -> float:
        now = self._clock()
        if now > self.t and step > self.step:
            self.last = (step - self.step) / (now - self.t)
        self.step, self.t = step, now
        return self.last
