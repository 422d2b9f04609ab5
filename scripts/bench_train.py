"""Benchmark SAC training speed: Stable-Baselines3 vs our SAC (MLP actor, DWC actor).

What is measured: env-steps per second in the *update phase* only, i.e. after learning has
started, where every env step does one gradient update (batch 256, [256, 256] critics). The first
1000 steps after --learning-starts are treated as warm-up and excluded; the remaining
--measure-steps - 1000 steps are timed. All runs use the same env, seed and thread count, each in
a fresh process, one after another, on one --device (cpu by default; cuda for a GPU server's figures).
With --rounds R every run is repeated R times, the runs interleaved (round 1: all of them, then
round 2, ...), and each one's median rate is reported: on a shared or virtual machine whose speed
drifts by tens of percent within minutes, interleaving exposes every run to the same drift.
Our runs use --precision auto (float32) unless told; --precision bfloat16 measures the bf16 matmuls
(fast on CPUs with AMX or AVX512-BF16). The precision is printed in the context line.

  sb3            stable_baselines3.SAC("MlpPolicy"), net_arch [256, 256] for actor and critics,
                 batch 256, train_freq=1, gradient_steps=1; timed with a callback.
  mlp            our SAC (dwc.train.trainer) with the float MLP actor; timed from metrics.jsonl
                 "charts/SPS" (one entry per 1000 steps).
  dwc-random     our SAC with the DWC actor, random wiring.
  dwc-learnable  our SAC with the DWC actor, learnable wiring (the published default), its scores
                 updated densely (--wiring-optim dense, the default).
  dwc-sparse     the same with --wiring-optim sparse: only the candidates near each input's best one
                 get a gradient and an Adam step.
  dwc-refresh    (on request) the sparse update with every K-th wiring step dense
                 (--wiring-refresh K; K from --refresh, default 4).
  mlp-eager      (on request) our MLP SAC with --no-cuda-graphs: what the CUDA graphs bring.
  mlp-fp32       (on request) our MLP SAC with --precision float32: what bf16 matmuls bring
                 (with --precision bfloat16 for the others).
  mlp-crossq     (on request) our MLP SAC with CrossQ's critics (--critic crossq and its defaults: batch
                 renormalised 2 x 1024 critics, no targets, the actor every 3rd update).
  mlp-crossq256  (on request) the same with 256-wide critics (--q-hidden 256).
  dwc-sparse-crossq256  (on request) dwc-sparse with CrossQ's critics, 256 wide.
  sb3-crossq     (on request) sb3_contrib.CrossQ("MlpPolicy") with its defaults (2 x 1024 critics),
                 batch 256; timed as sb3.
  dwc-adam       (on request) only the fused Adam step over a learnable DWC actor's parameters,
                 one per env step as in SAC, with fixed gradients, no env and no networks: the floor
                 that a dense optimiser over the ~10M wiring scores (published size) sets, printed
                 as a rate like the others, so its "time/step vs MLP" is that floor's share.

Example (small and quick; the published DWC width is 1024, the default):
  .venv/bin/python scripts/bench_train.py --env Hopper-v5 --threads 1 \\
      --learning-starts 1000 --measure-steps 2000 --dwc-width 256 --json /tmp/bench.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from dwc.core.errors import UserError
from dwc.core.cbuild import cpu_model
from dwc.train.common import resolve_precision
from dwc.train.envs import check_env_id

ALL = ("sb3", "mlp", "dwc-random", "dwc-learnable", "dwc-sparse", "mlp-eager", "mlp-fp32", "dwc-adam", "dwc-refresh",
       "mlp-crossq", "mlp-crossq256", "dwc-sparse-crossq256", "sb3-crossq")
DEFAULT = ALL[:5]
WARMUP = 1000  # steps after learning starts that are not timed (one SPS window)
TARGET = 1.5  # our MLP SAC's steps/s over SB3's, and the DWC runs' time per step over the MLP's ...


def dwc_target(width: int) -> float:
    """... the DWC runs' target: 1.5x the MLP's time per step up to width 256, 2x above (published 1024)."""
    return TARGET if width <= 256 else 2.0


def bench_sb3(args, crossq: bool = False) -> float:
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    start = args.learning_starts + WARMUP
    total = args.learning_starts + args.measure_steps

    class Timer(BaseCallback):
        t0 = t1 = None

        def _on_step(self) -> bool:  # runs after the env step, before that step's update
            if self.num_timesteps == start:
                self.t0 = time.perf_counter()
            return True

        def _on_training_end(self) -> None:
            self.t1 = time.perf_counter()

    torch.set_num_threads(args.threads)
    env = gym.make(args.env)
    if crossq:
        from sb3_contrib import CrossQ
        model = CrossQ("MlpPolicy", env, batch_size=256, buffer_size=max(total, 1), train_freq=1, gradient_steps=1,
                       learning_starts=args.learning_starts, seed=1, device=args.device, verbose=0)
    else:
        model = SAC("MlpPolicy", env, batch_size=256, buffer_size=max(total, 1), train_freq=1,
                    gradient_steps=1, learning_starts=args.learning_starts, seed=1, device=args.device,
                    policy_kwargs=dict(net_arch=dict(pi=[256, 256], qf=[256, 256])), verbose=0)
    timer = Timer()
    model.learn(total_timesteps=total, callback=timer)
    env.close()
    return (total - start) / (timer.t1 - timer.t0)


def bench_ours(args, policy: str, wiring: str | None = None, graphs: bool = True, precision: str | None = None,
               wiring_optim: str = "dense", refresh: int = 0, crossq_width: int = 0) -> float:
    from dwc.core.config import TrainConfig, use_crossq
    from dwc.train.trainer import train

    cfg = TrainConfig(env=args.env, algo="sac", steps=args.learning_starts + args.measure_steps,
                      seed=1, threads=args.threads, checkpoint_every=10**9, eval_episodes=1,
                      device=args.device, cuda_graphs=graphs, precision=precision or args.precision)
    cfg.actor.policy = policy
    if wiring:
        cfg.actor.wiring, cfg.actor.wiring_optim, cfg.actor.wiring_refresh = wiring, wiring_optim, refresh
        cfg.actor.width = args.dwc_width
    cfg.sac.learning_starts = args.learning_starts
    if crossq_width:  # CrossQ's critics and defaults, the critics this wide
        cfg.sac.q_hidden = crossq_width
        use_crossq(cfg.sac, given=("q_hidden",))
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        run = Path(tmp) / "run"
        train(cfg, run, progress=False)
        recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rates = [r["charts/SPS"] for r in recs
             if "charts/SPS" in r and r["step"] > args.learning_starts + WARMUP]
    if not rates:
        raise SystemExit(f"{policy}/{wiring}: no SPS entries after step {args.learning_starts + WARMUP}")
    # equal 1000-step windows: total steps / total time = harmonic mean of the window rates
    return len(rates) / sum(1.0 / r for r in rates)


def bench_adam(args) -> float:
    """Adam steps per second over the DWC actor's parameters, as `dwc train` runs them (fused,
    the SAC actor's settings, under flush_denormals, glibc keeping freed memory)."""
    from dwc.core.config import TrainConfig
    from dwc.models import build_actor
    from dwc.train.common import flush_denormals, keep_freed_memory

    keep_freed_memory()
    torch.set_num_threads(args.threads)
    cfg = TrainConfig(env=args.env)
    cfg.actor.width = args.dwc_width
    env = check_env_id(args.env)  # only for its spaces: the actor's sizes
    obs, act = env.observation_space, env.action_space
    actor = build_actor(cfg.actor, obs.shape[0], act.shape[0], act.low, act.high).to(args.device)
    env.close()
    params = list(actor.parameters())
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opt = torch.optim.Adam(params, lr=cfg.sac.actor_lr, eps=cfg.sac.adam_eps, fused=True)
    steps = args.measure_steps - WARMUP
    with flush_denormals():
        for i in range(WARMUP + steps):
            if i == WARMUP:
                t0 = time.perf_counter()
            opt.step()
        if args.device == "cuda":
            torch.cuda.synchronize()
    return steps / (time.perf_counter() - t0)


def measure(name: str, args) -> float:
    """One run's env-steps/s (runs in its own process)."""
    if name in ("sb3", "sb3-crossq"):
        return bench_sb3(args, crossq=name == "sb3-crossq")
    if name == "dwc-adam":
        return bench_adam(args)
    return {"mlp": lambda: bench_ours(args, "mlp"),
            "dwc-random": lambda: bench_ours(args, "dwc", "random"),
            "dwc-learnable": lambda: bench_ours(args, "dwc", "learnable"),
            "dwc-sparse": lambda: bench_ours(args, "dwc", "learnable", wiring_optim="sparse"),
            "dwc-refresh": lambda: bench_ours(args, "dwc", "learnable", wiring_optim="sparse", refresh=args.refresh),
            "mlp-eager": lambda: bench_ours(args, "mlp", graphs=False),
            "mlp-fp32": lambda: bench_ours(args, "mlp", precision="float32"),
            "mlp-crossq": lambda: bench_ours(args, "mlp", crossq_width=1024),
            "mlp-crossq256": lambda: bench_ours(args, "mlp", crossq_width=256),
            "dwc-sparse-crossq256": lambda: bench_ours(args, "dwc", "learnable", wiring_optim="sparse",
                                                       crossq_width=256)}[name]()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="where every run's networks live (default cpu); the env always steps on the CPU")
    p.add_argument("--threads", type=int, default=1, help="torch threads for every run (default 1)")
    p.add_argument("--learning-starts", type=int, default=1000,
                   help="random-action steps before updates begin; a multiple of 1000 (default 1000)")
    p.add_argument("--measure-steps", type=int, default=2000,
                   help="steps after learning starts; the first 1000 are warm-up, the rest timed; "
                        "a multiple of 1000, >= 2000 (default 2000)")
    p.add_argument("--refresh", type=int, default=4, help="dwc-refresh's K (--wiring-refresh; default 4)")
    p.add_argument("--which", default=",".join(DEFAULT),
                   help=f"comma list among {','.join(ALL)} (default {','.join(DEFAULT)})")
    p.add_argument("--dwc-width", type=int, default=1024, help="DWC layer width (default 1024 = published)")
    p.add_argument("--precision", default="auto", choices=("auto", "float32", "bfloat16"),
                   help="our runs' --precision (default auto = float32; bfloat16 is fast on CPUs with AMX or "
                        "AVX512-BF16); mlp-fp32 is always float32")
    p.add_argument("--rounds", type=int, default=3, help="interleaved repetitions of every run; medians are "
                                                          "reported (default 3)")
    p.add_argument("--json", type=Path, help="also write the results to this JSON file (after each round the "
                                             "rounds so far, marked partial)")
    args = p.parse_args()
    which = [w.strip() for w in args.which.split(",") if w.strip()]
    if bad := [w for w in which if w not in ALL]:
        p.error(f"unknown --which entries {bad}; choose among {','.join(ALL)}")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if args.learning_starts % 1000 or args.measure_steps % 1000 or args.measure_steps < 2000:
        p.error("--learning-starts must be a multiple of 1000, --measure-steps a multiple of 1000 and >= 2000")
    try:  # once here, instead of a traceback from every run's process
        check_env_id(args.env).close()
    except UserError as e:
        p.error(str(e))

    if args.device == "cuda" and not torch.cuda.is_available():
        p.error(f"--device cuda: this torch build ({torch.__version__}) sees no CUDA GPU")
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else None
    context = {"torch": torch.__version__, "threads": args.threads, "cpu": cpu_model(), "device": args.device,
               "gpu": gpu, "env": args.env,
               "learning_starts": args.learning_starts, "measure_steps": args.measure_steps,
               "timed_steps": args.measure_steps - WARMUP, "dwc_width": args.dwc_width, "rounds": args.rounds,
               "wiring_refresh": args.refresh if "dwc-refresh" in which else None,
               "precision": str(resolve_precision(args.precision, torch.device(args.device))).removeprefix("torch.")}
    print("machine: " + ", ".join(f"{k}={context[k]}" for k in ("cpu", "gpu", "device", "torch", "threads", "precision")
                                  if context[k] is not None))
    print(f"env={args.env}  learning_starts={args.learning_starts}  timed steps={context['timed_steps']} "
          f"(after {WARMUP} warm-up update steps)  dwc_width={args.dwc_width}", flush=True)

    rounds = {name: [] for name in ALL if name in which}
    spawn = multiprocessing.get_context("spawn")
    for r in range(args.rounds):
        for name in rounds:
            print(f"round {r + 1}/{args.rounds}: running {name} ...", flush=True)
            # a fresh process per run: nothing one run leaves behind (allocator settings, caches,
            # threads) reaches the next
            with ProcessPoolExecutor(1, mp_context=spawn) as pool:
                rounds[name].append(pool.submit(measure, name, args).result())
            print(f"  {name}: {rounds[name][-1]:.1f} env-steps/s", flush=True)
        if args.json and r + 1 < args.rounds:  # a run stopped early keeps the rounds it finished
            args.json.write_text(json.dumps({"context": context, "rounds_done": r + 1, "partial": True,
                                             "sps_rounds": rounds}, indent=2) + "\n")
    sps = {name: statistics.median(v) for name, v in rounds.items()}

    def ratio(a, b):
        return a / b if a is not None and b else None

    def fmt(x, suffix="x"):
        return "-" if x is None else f"{x:.2f}{suffix}"

    print(f"\n{'run':<22}{'env-steps/s':>12}{'rounds min..max':>16}{'vs SB3':>9}{'time/step vs MLP':>18}")
    rows = {}
    for name, v in sps.items():
        vs_sb3 = ratio(v, sps.get("sb3"))
        vs_mlp = ratio(sps.get("mlp"), v) if name.startswith("dwc") else None
        rows[name] = {"sps": v, "sps_rounds": rounds[name], "ratio_vs_sb3": vs_sb3, "time_per_step_vs_mlp": vs_mlp}
        spread = f"{min(rounds[name]):.1f}..{max(rounds[name]):.1f}"
        print(f"{name:<22}{v:>12.1f}{spread:>16}{fmt(vs_sb3):>9}{fmt(vs_mlp):>18}")

    print("\ntarget checks:")
    checks = {}
    r = ratio(sps.get("mlp"), sps.get("sb3"))
    checks["mlp_vs_sb3"] = {"target": f">= {TARGET}x", "measured": r, "pass": None if r is None else r >= TARGET}
    print(f"  our MLP SAC >= {TARGET}x SB3's steps/s: "
          + ("not measured (needs sb3 and mlp)" if r is None else f"{r:.2f}x -> {'PASS' if r >= TARGET else 'MISS'}"))
    target = dwc_target(args.dwc_width)
    if (r := rows.get("dwc-adam", {}).get("time_per_step_vs_mlp")) is not None:
        print(f"  floor: Adam over the learnable DWC's parameters alone takes {r:.2f}x the MLP SAC's whole "
              f"step (the target leaves the DWC {target - 1:.2f}x on top of the MLP's step)")
    for name in ("dwc-random", "dwc-learnable", "dwc-sparse", "dwc-refresh"):
        if name == "dwc-refresh" and name not in rows:  # on request only
            continue
        r = rows.get(name, {}).get("time_per_step_vs_mlp")
        checks[f"{name}_vs_mlp"] = {"target": f"<= {target}x", "measured": r,
                                    "pass": None if r is None else r <= target}
        print(f"  DWC actor ({name}) time per step <= {target}x the MLP actor's (width {args.dwc_width}): "
              + ("not measured (needs mlp and " + name + ")" if r is None
                 else f"{r:.2f}x -> {'PASS' if r <= target else 'MISS'}"))

    if args.json:
        args.json.write_text(json.dumps({"context": context, "results": rows, "checks": checks}, indent=2) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
