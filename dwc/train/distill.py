"""Distillation (DAgger): train a circuit to act like an already trained policy.

The codesign use: a large policy (the published-size DWC, a float MLP) is trained once with SAC;
a circuit sized for a target FPGA's budgets then learns to reproduce its deterministic actions,
which takes supervised gradient steps on a few thousand states instead of another RL run.

- The teacher is any run or policy folder (``--teacher``); its deterministic action labels every
  state the student sees.
- Iteration 0 rolls out the teacher; every later iteration rolls out the student itself, labelled
  by the teacher (DAgger, Ross et al. 2011), so the dataset covers the states the student visits
  (trained on the teacher's states alone, a student's small errors take it where it was never shown
  what to do).
- ``--dagger-noise``: Gaussian noise on every rolled-out action (DART, Laskey et al. 2017), the label
  still the teacher's noiseless action, so the data also covers the states next to the policy's path
  that a circuit's small errors lead to.
- Loss: mean squared error between the student's and the teacher's actions, in units of the
  action range, minimised by Adam with a rate annealed linearly to 1/1000 of ``--distill-lr``.
  No reward is used for learning; the episodes' returns are logged as in SAC.
- The student's observation normaliser is the teacher's, frozen: the teacher's statistics describe
  the states the policy meets, and a fixed normaliser is what the circuit's comparators fold in. A
  teacher exported to ONNX has none: the student's is fitted on the teacher's own rollout (the first
  iteration's states) and frozen before the first update.
- Budgets (``--max-comparators``) follow the same schedule over the run's steps as in SAC.

Without ``--teacher`` the run trains its teacher first, in RUN/teacher: a float MLP (``--hidden``) by SAC
(the run's SAC options) for ``--teacher-steps``, the run's env and seed; an interrupted run resumes it
from its own checkpoint. The run's step-0 checkpoint is written before, so the whole recipe is one
resumable run; the student's random streams are set aside while the teacher trains, so it learns the
same whether the teacher was trained in this process or an earlier one.

Training budget: ``--steps`` counts the student's env steps. The teacher's own training steps are
recorded (``eval.json``: ``teacher.train_steps``) so that comparisons can count both.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dwc.core.config import TrainConfig
from dwc.core.errors import OptionError, UserError, interrupts_held
from dwc.models import build_actor
from dwc.train.checkpoint import load_actor
from dwc.train.common import flush_denormals, resolve_precision
from dwc.train.envs import episodes_state, make_vector_env, start_episodes
from dwc.train.loop import train_loop
from dwc.train.optim import WiringAdam
from dwc.train.run import RunDir
from dwc.train.checkpoint import set_rng_state

OWN_TEACHER = "teacher"  # RUN/teacher: the teacher a run without --teacher trains first


def teacher_path(cfg: TrainConfig, run_dir: Path) -> Path:
    """The folder whose policy the distilled run ``run_dir`` learns: --teacher, else its own."""
    return Path(cfg.distill.teacher) if cfg.distill.teacher else Path(run_dir) / OWN_TEACHER


class OnnxTeacher:
    """A policy exported to ONNX (float observation (N, D) in, action (N, A) out: the output named
    ``action``, else the first), run by onnxruntime on the CPU. It carries no observation statistics, so
    the student's normaliser is fitted on the teacher's own rollout (the first iteration) and then frozen."""
    normalizer = None

    def __init__(self, path: Path, obs_dim: int, act_dim: int):
        try:
            import onnxruntime as ort
        except ImportError:
            raise UserError("an ONNX teacher runs on onnxruntime: pip install 'dwc[onnx]'") from None
        try:
            self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - onnxruntime's own exception types
            raise OptionError("teacher", f" {path}: not a model onnxruntime can run: {str(e).splitlines()[0]}") from None
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        names = [o.name for o in outputs]
        self.input, self.output = inputs[0].name, "action" if "action" in names else names[0]
        got = self.session.run([self.output], {self.input: np.zeros((2, obs_dim), np.float32)})[0]
        if len(inputs) != 1 or got.shape != (2, act_dim):
            raise OptionError("teacher", f" {path}: expected one input (N, {obs_dim}) and an action output (N, {act_dim}), "
                            f"got {len(inputs)} input(s) and an output of shape {tuple(got.shape)} for 2 observations")

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.detach().cpu().numpy().astype(np.float32, copy=False)
        return torch.as_tensor(self.session.run([self.output], {self.input: x})[0], dtype=torch.float32,
                               device=obs.device)


def load_teacher(path: Path, env: str, obs_dim: int, act_dim: int, device: torch.device):
    """The teacher's policy (eval mode, normaliser frozen): a run or policy folder, or an .onnx model."""
    if Path(path).suffix == ".onnx":
        return OnnxTeacher(path, obs_dim, act_dim)
    teacher, tcfg, _ = load_actor(Path(path), str(device))
    if tcfg.env != env:
        raise OptionError("teacher", f" {path} was trained on {tcfg.env}, not {env}")
    return teacher


def teacher_config(cfg: TrainConfig) -> TrainConfig:
    """The teacher a run without --teacher trains: a float MLP by SAC, the run's env, seed, SAC options,
    where and how fast it runs."""
    from dwc.core.config import ActorConfig
    return TrainConfig(env=cfg.env, algo="sac", steps=cfg.distill.teacher_steps, seed=cfg.seed, device=cfg.device,
                       cuda_graphs=cfg.cuda_graphs, precision=cfg.precision, num_envs=cfg.num_envs,
                       threads=cfg.threads, checkpoint_every=cfg.checkpoint_every, eval_episodes=cfg.eval_episodes,
                       actor=ActorConfig(policy="mlp", hidden=cfg.actor.hidden), sac=cfg.sac)


def teacher_summary(path: Path) -> dict:
    """What eval.json records of a distilled run's teacher (its folder, env, policy, steps, and its return
    where it was evaluated)."""
    import json

    from dwc.core.rundir import load_config, training_cpu_seconds
    from dwc.train.checkpoint import load_checkpoint
    if Path(path).suffix == ".onnx":
        if not Path(path).is_file():
            raise UserError(f"{path} does not exist")
        return {"path": str(path), "env": None, "policy": "onnx", "algo": None, "train_steps": None, "train_cpu_s": None,
                "mean_return": None}
    cfg = load_config(Path(path))
    step = int(load_checkpoint(Path(path) / "checkpoint.pt")["step"])
    ev = Path(path) / "eval.json"
    ret = json.loads(ev.read_text()).get("mean_return") if ev.exists() else None
    return {"path": str(path), "env": cfg.env, "policy": cfg.actor.policy, "algo": cfg.algo, "train_steps": step,
            "train_cpu_s": training_cpu_seconds(Path(path)),
            "mean_return": ret}


def action_error(student, obs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The distillation loss per element: the squared difference of the student's deterministic action from
    the teacher's, in half action ranges."""
    mean, _ = student.dist_params(obs)
    return ((student.squash(mean) - labels) / student.action_scale).square()


def annealed_lr(lr: float, progress: float) -> float:
    """The rate at ``progress`` (0..1) of the updates: linear from ``lr`` to 1/1000 of it, so the last
    updates settle the circuit instead of leaving it wherever a full-size last step put it."""
    return lr * (1.0 - progress) + 1e-3 * lr * progress


def train_distill(cfg: TrainConfig, run: RunDir, device: torch.device):
    """A distillation run, in steps: set up (or resume), then per DAgger iteration roll out and label,
    regress the student onto the labels, log and checkpoint. Returns the student."""
    return _Distill(cfg, run, device, make_vector_env(cfg.env, cfg.num_envs)).train()


class _Distill:
    """The state of one distillation: teacher, student, optimiser, the labelled dataset, the minibatch
    sampler, the observations acted on next and the training loop (dwc.train.loop)."""

    def __init__(self, cfg: TrainConfig, run: RunDir, device: torch.device, envs):
        self.cfg, self.run, self.device, self.envs, self.dc = cfg, run, device, envs, cfg.distill
        act_space = envs.single_action_space
        self.obs_dim, self.act_dim = envs.single_observation_space.shape[0], act_space.shape[0]
        # the teacher is loaded before the student is built, so the student's initial weights draw the
        # same random numbers as they always have
        self.teacher = load_teacher(teacher_path(cfg, run.path), cfg.env, self.obs_dim, self.act_dim, device)
        self.student = build_actor(cfg.actor, self.obs_dim, self.act_dim, act_space.low, act_space.high).to(device)
        self.student.set_precision(resolve_precision(cfg.precision, device))
        if self.teacher.normalizer is not None:  # frozen with the teacher's
            self.student.normalizer.load_state_dict(self.teacher.normalizer.state_dict())
        # --wiring-optim sparse sends sparse wiring gradients, which WiringAdam steps lazily (dense: plain Adam)
        adam = WiringAdam if cfg.actor.wiring_optim == "sparse" else torch.optim.Adam
        self.opt = adam(self.student.parameters(), lr=self.dc.distill_lr, fused=True)
        self.data_obs = np.zeros((cfg.steps, self.obs_dim), dtype=np.float32)  # every visited state ...
        self.data_act = np.zeros((cfg.steps, self.act_dim), dtype=np.float32)  # ... and the teacher's action there
        self.counters = {"iterations": 0}
        self.rng = np.random.default_rng(cfg.seed)  # the minibatch sampler
        self._resume()
        self.obs = None  # the observations acted on next
        self.loop = None
        self.loss = float("nan")  # the last update's, logged once per iteration

    def _resume(self) -> None:
        s = self.run.resume_state
        if not s or s.get("before_teacher"):  # the step-0 checkpoint of a run that trained its own teacher
            return
        self.student.load_state_dict(s["actor"])
        self.opt.load_state_dict(s["opt"])
        n = min(len(s["data_obs"]), self.cfg.steps)  # --steps may have been raised on resume
        self.data_obs[:n], self.data_act[:n] = s["data_obs"][:n], s["data_act"][:n]
        self.counters = s["counters"]
        self.rng.bit_generator.state = s["sampler"]
        set_rng_state(s["rng"])

    def _state(self, step: int) -> dict:
        """A checkpoint at this step, with the episodes in flight."""
        s = {"actor": self.student.state_dict(), "opt": self.opt.state_dict(),
             "data_obs": self.data_obs[:step].copy(), "data_act": self.data_act[:step].copy(),
             "counters": self.counters, "sampler": self.rng.bit_generator.state, "obs_dim": self.obs_dim,
             "act_dim": self.act_dim}
        if self.obs is not None:
            s["episodes"] = episodes_state(self.envs, self.obs, None, self.loop.episodes)
        return s

    def _t(self, x) -> torch.Tensor:
        return torch.as_tensor(x, dtype=torch.float32, device=self.device)

    def _rollout(self, actor, end: int) -> None:
        """``actor`` (the teacher first, then the student) acts up to step ``end``, every state it meets
        stored with the teacher's action there."""
        loop = self.loop
        while loop.step < end:
            o = self._t(self.obs)
            label = self.teacher.act(o)
            action = (label if actor is self.teacher else self.student.act(o)).cpu().numpy()
            with interrupts_held():  # envs, data, noise stream and step counter change together
                next_obs, rewards, terms, truncs, _ = self.envs.step(self._noisy(action))
                step, k = loop.step, min(self.cfg.num_envs, end - loop.step)
                self.data_obs[step:step + k], self.data_act[step:step + k] = self.obs[:k], label[:k].cpu().numpy()
                loop.advance(k, rewards, terms | truncs)
                self.obs = next_obs

    def _noisy(self, action: np.ndarray) -> np.ndarray:
        """The rolled-out action with --dagger-noise added (drawn from the checkpointed sampler, only when
        asked for, so a run without noise draws what it always drew), clipped to the action space."""
        sigma = self.dc.dagger_noise
        if sigma == 0:
            return action
        space = self.envs.single_action_space
        noise = self.rng.standard_normal(action.shape) * sigma * (space.high - space.low) / 2
        return np.clip(action + noise, space.low, space.high).astype(action.dtype)

    def _regress(self, start: int, end: int) -> int:
        """The iteration's updates of the student's actions onto the teacher's, on minibatches of all data so
        far, from the first one not yet done; returns how many the iteration has."""
        dc, cfg, student = self.dc, self.cfg, self.student
        updates = max(1, round(dc.updates_per_step * (end - start)))
        for u in range(self.counters.get("updates_done", 0), updates):
            progress = (start + (end - start) * (u + 1) / updates) / cfg.steps
            with interrupts_held(), flush_denormals():  # a checkpoint never sees a half-applied optimiser step
                self.opt.param_groups[0]["lr"] = annealed_lr(dc.distill_lr, progress)
                idx = self.rng.integers(0, self.loop.step, cfg.sac.batch_size)
                err = action_error(student, self._t(self.data_obs[idx]), self._t(self.data_act[idx])).mean()
                self.opt.zero_grad(set_to_none=True)
                err.backward()
                self.opt.step()
                student.constrain_()
                student.apply_budget_(progress)
                self.counters["updates_done"] = u + 1
                self.loss = err.item() if u == updates - 1 else self.loss
        return updates

    def train(self):
        cfg, counters, student = self.cfg, self.counters, self.student
        with train_loop(self.run, self.envs, student, self._state) as loop:
            self.loop = loop
            self.obs, _ = start_episodes(self.run.resume_state, self.envs, None, loop.episodes,
                                         cfg.seed + self.run.start_step)
            while loop.step < cfg.steps:
                # an iteration's progress is in the counters, so a checkpoint taken inside it resumes exactly
                start = counters.setdefault("rollout_start", loop.step)
                end = min(start + self.dc.dagger_steps, cfg.steps)
                # 1. roll out (the teacher first, then the student), every state labelled by the teacher
                self._rollout(self.teacher if counters["iterations"] == 0 else student, end)
                if not bool(student.normalizer.frozen):  # a teacher without statistics: its rollout's, kept
                    student.normalizer.update(self._t(self.data_obs[:loop.step]))
                    student.normalizer.freeze()
                # 2. regress the student's actions onto the teacher's
                updates = self._regress(start, end)
                counters["iterations"] += 1
                counters.pop("rollout_start"), counters.pop("updates_done", None)
                loop.report({"losses/distill": self.loss, "charts/SPS": loop.sps(), "distill/updates": updates},
                            loss=f"{self.loss:.4f}")
                loop.checkpoint_if_due()
            student.apply_budget_(1.0)
        return student
