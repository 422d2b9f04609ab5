"""One Stable-Baselines3 SAC run: the referee that ``dwc train --policy mlp`` is held to; with
``--algo crossq``, sb3-contrib's CrossQ, the referee of ``dwc train --policy mlp --critic crossq``.

SB3's own SAC with its own defaults (lr 3e-4 everywhere, entropy coefficient tuned from 1.0, actor
updated every step, no observation normalisation), or sb3-contrib's CrossQ with its own (lr 1e-3,
Adam beta1 0.5, batch renormalised 2 x 1024 critics without targets, actor every 3rd step; its
actor also batch renormalised, where dwc's is the actor a circuit replaces); only
``learning_starts`` is set, to the value the dwc run it is paired with uses, and the replay buffer
is cut to the run's length (it never fills past that, so nothing changes). The run folder holds
what a ``dwc train`` run folder holds, so one report reads both:

  metrics.jsonl   one line per training episode: step, charts/episodic_return, charts/episodic_length
  eval.json       deterministic episodes on the seeds ``dwc eval`` uses (training seed + 10,000)
  config.json     the command's options, SB3's hyperparameters and the library versions
  checkpoint/     model and replay buffer every --checkpoint-every steps, and on Ctrl-C

Run again with the same options to resume from the checkpoint: the learner, its optimisers and the
replay buffer come back; the episode in flight and the random streams start afresh (SB3 keeps no
environment state), so a resumed run is not step-for-step the one left alone.

  python scripts/referee_sac.py --env Ant-v5 --seed 1 --steps 100000 --learning-starts 10000 --out RUN
"""
from __future__ import annotations

import argparse
import fcntl
import importlib
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

from dwc.core.config import EVAL_SEED_OFFSET  # the same evaluation episodes as dwc eval
from dwc.core.rundir import write_json

def versions() -> dict:
    import gymnasium
    import mujoco
    import numpy
    import stable_baselines3
    import torch
    contrib = importlib.util.find_spec("sb3_contrib") and importlib.import_module("sb3_contrib").__version__
    return {"stable_baselines3": stable_baselines3.__version__, "sb3_contrib": contrib, "torch": torch.__version__,
            "gymnasium": gymnasium.__version__, "mujoco": mujoco.__version__, "numpy": numpy.__version__,
            "python": platform.python_version(), "cpu": platform.processor() or platform.machine()}


def checkpoint_step(ckpt: Path) -> int | None:
    info = ckpt / "step.json"
    return json.loads(info.read_text())["step"] if info.is_file() else None


def save(model, ckpt: Path) -> None:
    """Model and replay buffer, then step.json last: a checkpoint without step.json is incomplete."""
    ckpt.mkdir(exist_ok=True)
    (ckpt / "step.json").unlink(missing_ok=True)
    model.save(ckpt / "model.zip")
    model.save_replay_buffer(ckpt / "replay.pkl")
    write_json(ckpt / "step.json", {"step": int(model.num_timesteps)})


def trim_metrics(metrics: Path, step: int) -> None:
    """Drop the episodes logged after the checkpoint: the resumed run logs that stretch again."""
    if metrics.is_file():
        keep = [line for line in metrics.read_text().splitlines() if line and json.loads(line)["step"] <= step]
        metrics.write_text("".join(line + "\n" for line in keep))


def make_callback(metrics: Path, ckpt: Path, every: int, total: int):
    from stable_baselines3.common.callbacks import BaseCallback
    from tqdm import tqdm

    class Recorder(BaseCallback):
        """Logs each finished episode (Monitor's info) and checkpoints every ``every`` steps."""

        def _on_training_start(self) -> None:
            self.file = metrics.open("a")
            self.bar = tqdm(total=total, initial=self.num_timesteps, unit="step", mininterval=5,
                            desc=f"sb3 {type(self.model).__name__} {self.training_env.envs[0].spec.id}")
            self.recent: list[float] = []

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    ep = info["episode"]
                    self.file.write(json.dumps({"step": self.num_timesteps, "charts/episodic_return": float(ep["r"]),
                                                "charts/episodic_length": int(ep["l"])}) + "\n")
                    self.recent = (self.recent + [float(ep["r"])])[-10:]
                    self.bar.set_postfix(ret=f"{sum(self.recent) / len(self.recent):.1f}", refresh=False)
            self.bar.update(1)
            if self.num_timesteps % every == 0:
                self.file.flush()
                save(self.model, ckpt)
            return True

        def _on_training_end(self) -> None:
            self.file.close()
            self.bar.close()

    return Recorder()


def train(args, out: Path):
    import gymnasium as gym
    import torch
    if args.algo == "crossq":
        from sb3_contrib import CrossQ as Algo
    else:
        from stable_baselines3 import SAC as Algo

    torch.set_num_threads(args.threads)
    env = gym.make(args.env)
    ckpt, metrics = out / "checkpoint", out / "metrics.jsonl"
    done = checkpoint_step(ckpt)
    if done is None:
        metrics.unlink(missing_ok=True)
        kwargs = {} if args.q_hidden is None else {  # the library's actor, critics of --q-hidden
            "policy_kwargs": {"net_arch": {"pi": [256, 256], "qf": [args.q_hidden] * 2}}}
        model = Algo("MlpPolicy", env, learning_starts=args.learning_starts, buffer_size=min(1_000_000, args.steps),
                     seed=args.seed, device="cpu", verbose=0, **kwargs)
    else:
        print(f"resuming from the checkpoint at step {done:,}", flush=True)
        trim_metrics(metrics, done)
        model = Algo.load(ckpt / "model.zip", env=env, device="cpu")
        model.load_replay_buffer(ckpt / "replay.pkl")
        model.set_random_seed(args.seed + done)
    write_json(out / "config.json", {
        "referee": "sb3-contrib CrossQ" if args.algo == "crossq" else "stable-baselines3 SAC", "env": args.env,
        "q_hidden": args.q_hidden, "seed": args.seed, "steps": args.steps,
        "learning_starts": args.learning_starts, "threads": args.threads, "eval_episodes": args.eval_episodes,
        "hyperparameters": {k: repr(getattr(model, k)) for k in (
            "learning_rate", "buffer_size", "batch_size", "tau", "gamma", "train_freq", "gradient_steps",
            "ent_coef", "target_entropy", "target_update_interval", "policy_delay", "policy_kwargs")
            if hasattr(model, k)},
        "versions": versions(), "command": [sys.executable, *sys.argv]})
    left = args.steps - model.num_timesteps
    t0 = time.perf_counter()
    try:
        if left > 0:
            model.learn(left, callback=make_callback(metrics, ckpt, args.checkpoint_every, args.steps),
                        reset_num_timesteps=False)
    except KeyboardInterrupt:
        save(model, ckpt)
        print(f"\ninterrupted: checkpointed at step {model.num_timesteps:,}; run the same command to resume",
              flush=True)
        sys.exit(130)
    save(model, ckpt)
    return model, time.perf_counter() - t0


def evaluate(model, args) -> dict:
    from dwc.train.common import evaluate as dwc_evaluate  # the same episodes and summary as dwc eval
    return dwc_evaluate(lambda obs: model.predict(obs, deterministic=True)[0], args.env, args.eval_episodes,
                        args.seed + EVAL_SEED_OFFSET)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", required=True, help="Gymnasium env id, e.g. Ant-v5")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--steps", type=int, default=100_000, help="env steps (default 100000)")
    ap.add_argument("--learning-starts", type=int, default=10_000,
                    help="random-action steps before updates start (default 10000)")
    ap.add_argument("--out", type=Path, required=True, help="run folder (resumed if it holds a checkpoint)")
    ap.add_argument("--algo", choices=("sac", "crossq"), default="sac",
                    help="sac: Stable-Baselines3's SAC; crossq: sb3-contrib's CrossQ (default sac)")
    ap.add_argument("--q-hidden", type=int, help="critics' hidden width, both layers (default: the library's, 256 "
                                                 "for SAC, 1024 for CrossQ)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--eval-episodes", type=int, default=10, help="deterministic episodes at the end (default 10)")
    ap.add_argument("--checkpoint-every", type=int, default=10_000, help="env steps between checkpoints")
    args = ap.parse_args()
    if args.q_hidden is not None and args.q_hidden < 1:
        ap.error("--q-hidden must be >= 1")
    for name in ("steps", "threads", "eval_episodes", "checkpoint_every"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if not 0 <= args.learning_starts < args.steps:
        ap.error("--learning-starts must be >= 0 and below --steps")
    for module in ("stable_baselines3", "sb3_contrib")[:1 + (args.algo == "crossq")]:
        if importlib.util.find_spec(module) is None:
            sys.exit(f"error: {module} is not installed: pip install -e '.[bench]'")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    lock = (out / ".lock").open("a+")
    try:  # one process per run folder: a second would interleave checkpoints and metrics
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"error: another process is training {out} (see {out / '.lock'}); wait for it or stop it")
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    model, seconds = train(args, out)
    result = evaluate(model, args)
    result["train_seconds_this_leg"] = round(seconds, 1)
    write_json(out / "eval.json", result)
    print(f"{args.env} seed {args.seed}: mean return {result['mean_return']:.1f} over {args.eval_episodes} "
          f"deterministic episodes (mean length {result['mean_length']:.0f})", flush=True)


if __name__ == "__main__":
    main()
