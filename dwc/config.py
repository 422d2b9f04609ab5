"""Training configuration: one dataclass tree, saved as the run directory's ``config.json``."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .models.actors import ActorConfig


@dataclass
class SACConfig:
    """Defaults: the published protocol (CleanRL-style SAC)."""
    buffer_size: int = 1_000_000
    gamma: float = 0.99
    tau: float = 0.005
    batch_size: int = 256
    learning_starts: int = 5_000
    actor_lr: float = 3e-4
    q_lr: float = 1e-3
    alpha_lr: float = 1e-3
    adam_eps: float = 1e-5
    policy_frequency: int = 2
    autotune: bool = True
    alpha: float = 0.2  # initial / fixed entropy coefficient
    q_hidden: int = 256
    utd: float = 1.0  # gradient updates per env step


@dataclass
class PPOConfig:
    """CleanRL continuous-action PPO defaults, for cheap many-env training."""
    rollout_steps: int = 2048  # per env
    lr: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    minibatches: int = 32
    epochs: int = 10
    clip: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    v_hidden: int = 64
    anneal_lr: bool = True


@dataclass
class TrainConfig:
    env: str = "InvertedPendulum-v5"
    algo: str = "sac"  # sac | ppo
    steps: int = 100_000
    seed: int = 1
    device: str = "auto"
    cuda_graphs: bool = True  # SAC on CUDA: replay each update as a CUDA graph (actors that allow it)
    num_envs: int = 1
    threads: int = 1
    checkpoint_every: int = 10_000
    eval_episodes: int = 10
    actor: ActorConfig = field(default_factory=ActorConfig)
    sac: SACConfig = field(default_factory=SACConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        nested = {"actor": ActorConfig, "sac": SACConfig, "ppo": PPOConfig}
        kwargs = {}
        names = {f.name for f in dataclasses.fields(cls)}
        for k, v in d.items():
            if k not in names:
                raise ValueError(f"unknown config field {k!r}")
            kwargs[k] = nested[k](**v) if k in nested else v
        return cls(**kwargs)
