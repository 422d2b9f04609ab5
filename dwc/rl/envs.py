"""Gymnasium environments: validation with clear errors, vectorised construction, seeding."""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from ..errors import UserError


def _mujoco_warning(message: str) -> None:
    """MuJoCo's warnings (an unstable simulation, a full contact buffer) as Python warnings: by default
    MuJoCo appends them to MUJOCO_LOG.TXT in the user's working folder."""
    import warnings
    warnings.warn(f"MuJoCo: {message.strip()}", RuntimeWarning, stacklevel=2)


try:
    import mujoco
    mujoco.set_mju_user_warning(_mujoco_warning)
except (ImportError, AttributeError):  # no MuJoCo (other Gymnasium tasks), or bindings without the hook
    pass


def check_env_id(env_id: str) -> gym.Env:
    """Make one env or raise a one-line :class:`UserError` (unknown id, missing deps, non-Box spaces)."""
    try:
        env = gym.make(env_id)
    except gym.error.Error as e:  # NameNotFound, VersionNotFound, DeprecatedEnv, ...
        raise UserError(f"unknown environment {env_id!r}: {e}") from None
    except ImportError as e:
        raise UserError(f"environment {env_id!r} needs a missing package: {e}") from None
    for name, space in (("observation", env.observation_space), ("action", env.action_space)):
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            env.close()
            raise UserError(f"environment {env_id!r} has a {type(space).__name__}{getattr(space, 'shape', '')} "
                            f"{name} space; dwc needs flat Box observation and action spaces")
    if not np.all(np.isfinite(env.action_space.low)) or not np.all(np.isfinite(env.action_space.high)):
        env.close()
        raise UserError(f"environment {env_id!r} has unbounded actions; dwc needs finite action bounds")
    return env


def make_vector_env(env_id: str, num_envs: int) -> gym.vector.SyncVectorEnv:
    """``num_envs`` copies stepped in-process (on 2 cores AsyncVectorEnv is slower).

    SAME_STEP autoreset: the step that ends an episode returns the next episode's first
    observation and the true final one in ``info["final_obs"]``, so no transition is wasted.
    """
    check_env_id(env_id).close()
    return gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * num_envs,
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def real_next_obs(next_obs: np.ndarray, dones: np.ndarray, infos: dict) -> np.ndarray:
    """The observation each env actually reached (final one where an episode ended)."""
    if not dones.any() or "final_obs" not in infos:
        return next_obs
    out = next_obs.copy()
    for i in np.flatnonzero(infos.get("_final_obs", dones)):
        out[i] = infos["final_obs"][i]
    return out
