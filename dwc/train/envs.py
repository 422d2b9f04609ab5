"""Gymnasium environments: validation with clear errors, vectorised construction, seeding, and the
state a checkpoint keeps of them so that a resumed run continues its episodes exactly."""
from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import numpy as np

from dwc.core.errors import UserError


# Gymnasium's own HalfCheetah model sets a compiler attribute that newer MuJoCo deprecates: nothing
# a user can act on, printed at every env made (every evaluation, every sweep run)
_UNACTIONABLE = ("compiler attribute 'settotalmass' is deprecated",)


def _mujoco_warning(message: str) -> None:
    """MuJoCo's warnings (an unstable simulation, a full contact buffer) as Python warnings: by default
    MuJoCo appends them to MUJOCO_LOG.TXT in the user's working folder."""
    import warnings
    if not any(m in message for m in _UNACTIONABLE):
        warnings.warn(f"MuJoCo: {message.strip()}", RuntimeWarning, stacklevel=2)


try:
    import mujoco
except ImportError:  # no MuJoCo: other Gymnasium tasks only
    mujoco = None
if hasattr(mujoco, "set_mju_user_warning"):  # not without MuJoCo, or with bindings that lack the hook
    mujoco.set_mju_user_warning(_mujoco_warning)


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
    return gym.vector.SyncVectorEnv([lambda: Resumable(gym.make(env_id))] * num_envs,
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


_PLAIN = (bool, int, float, str, type(None), np.ndarray, np.generic)


def _layers(env: gym.Env):
    """The env and every wrapper around it, outermost first."""
    while True:
        yield env
        if not isinstance(env, gym.Wrapper):
            return
        env = env.env


class Resumable(gym.Wrapper):
    """A training env whose whole state can be read and restored (``checkpoint_state``, also through a
    vector env's ``get_attr``/``set_attr``, in worker processes too), so that a checkpoint keeps the
    episodes in flight and a resumed run continues them where they were, bit for bit.

    The state of the env and of each wrapper under this one: their plain attributes (TimeLimit's step
    count, a classic-control env's physics state, flags), the env's random generator (it draws the
    next episode's start), and a MuJoCo env's whole ``MjData``. All of it, not only qpos and qvel: the
    next step also reads the constraint solver's warm start, and the rewards read positions that
    MuJoCo computed before the last step's integration (Humanoid's centre of mass), which no state
    vector holds."""

    @property
    def checkpoint_state(self) -> list[dict]:
        state = []
        for layer in _layers(self.env):
            attrs = vars(layer)
            s = {"type": type(layer).__name__,
                 "attrs": {k: copy.deepcopy(v) for k, v in attrs.items() if isinstance(v, _PLAIN)}}
            if isinstance(attrs.get("_np_random"), np.random.Generator):
                s["np_random"] = attrs["_np_random"].bit_generator.state
            if mujoco is not None and isinstance(attrs.get("data"), mujoco.MjData):
                data = copy.copy(attrs["data"])
                for timer in data.timer:  # wall-clock profiling, not physics: equal runs, equal checkpoints
                    timer.duration, timer.number = 0.0, 0
                s["mjdata"] = pickle.dumps(data)
            state.append(s)
        return state

    @checkpoint_state.setter
    def checkpoint_state(self, state: list[dict]) -> None:
        layers = list(_layers(self.env))
        if [type(layer).__name__ for layer in layers] != [s["type"] for s in state]:
            raise ValueError("the checkpoint's environment has other wrappers than this one")
        for layer, s in zip(layers, state):
            for k, v in s["attrs"].items():
                setattr(layer, k, copy.deepcopy(v))
            if "np_random" in s:  # a new generator of the saved kind (an env never reset has none yet)
                layer._np_random = np.random.Generator(getattr(np.random, s["np_random"]["bit_generator"])())
                layer._np_random.bit_generator.state = s["np_random"]
            if "mjdata" in s:
                mujoco.mj_copyData(layer.data, layer.model, pickle.loads(s["mjdata"]))


ENV_STATE = "checkpoint_state"  # Resumable's, read and set through a vector env's get_attr / set_attr


def episodes_state(envs, obs: np.ndarray, space: gym.Space | None, tracker) -> dict:
    """What a checkpoint keeps of the episodes in flight: every env's state (:class:`Resumable`), the
    observations acted on next, the returns summed so far (``tracker``, a
    :class:`~dwc.train.common.EpisodeTracker`) and the random stream of ``space``, the action space that
    draws SAC's first (random) actions (None where nothing samples from it).
    ``envs``: a vector env of Resumable envs, or anything with its ``get_attr``."""
    return {"envs": list(envs.get_attr(ENV_STATE)), "obs": np.array(obs, copy=True), "returns": tracker.state_dict(),
            "action_space": None if space is None else copy.deepcopy(space.np_random.bit_generator.state)}


def resume_episodes(checkpoint: dict | None, envs, space: gym.Space | None, tracker) -> np.ndarray | None:
    """Restore :func:`episodes_state` from a checkpoint and return the observations to act on; None when
    there is nothing to restore (a new run, or a checkpoint written before dwc kept episodes) or these
    envs cannot take it (a note says why): the caller then starts fresh episodes."""
    saved = (checkpoint or {}).get("episodes")
    if saved is None:
        return None
    try:
        envs.set_attr(ENV_STATE, saved["envs"])
    except (ValueError, TypeError, KeyError, RuntimeError, pickle.UnpicklingError) as e:
        print(f"note: the checkpoint's episodes cannot be restored here ({type(e).__name__}: "
              f"{str(e).splitlines()[0][:120] if str(e) else ''}); the resumed run starts fresh episodes", flush=True)
        return None
    if space is not None:
        space.np_random.bit_generator.state = saved["action_space"]
    tracker.load_state_dict(saved["returns"])
    return np.array(saved["obs"], copy=True)


def start_episodes(checkpoint: dict | None, envs, space: gym.Space | None, tracker,
                   seed: int) -> tuple[np.ndarray, bool]:
    """The observations a training loop acts on first, and whether they start fresh episodes: those in
    flight at the checkpoint (:func:`resume_episodes`), else new ones, ``envs`` reset and ``space``
    seeded with ``seed`` (the run's seed plus its start step). Fresh observations are the caller's to
    add to its normaliser; restored ones are in it already."""
    obs = resume_episodes(checkpoint, envs, space, tracker)
    if obs is not None:
        return obs, False
    obs, _ = envs.reset(seed=seed)
    if space is not None:
        space.seed(seed)
    return obs, True


def real_next_obs(next_obs: np.ndarray, dones: np.ndarray, infos: dict) -> np.ndarray:
    """The observation each env actually reached (final one where an episode ended)."""
    if not dones.any() or "final_obs" not in infos:
        return next_obs
    out = next_obs.copy()
    for i in np.flatnonzero(infos.get("_final_obs", dones)):
        out[i] = infos["final_obs"][i]
    return out
