"""Benchmark: K SAC seeds trained together in one process (dwc train --seeds 1-K) against the same K
seeds as K separate processes running at the same time (dwc train --seed S, one per seed), side by side.

What is measured, for every K of --ks and every mode:
  training: seconds from the first process's "training ..." line (imports and setup done) to the
      last one's end (--learning-starts random-action steps, --measure-steps update steps and the
      final 1-episode evaluation) and the aggregate rate K x steps / that time: the ratio compared
      with the target (a long run pays the imports once, so they are left out);
  wall: the same from the processes' start (imports included);
  aggregate env-steps/s in the update phase, when --measure-steps >= 2000: every env step does one
      gradient update per seed; the first 1000 steps after --learning-starts are warm-up, the rest
      timed from metrics.jsonl "charts/SPS" (one entry per 1000 steps). Together: K x the seeds'
      common rate (they step in lockstep); separate: the sum of the K processes' rates;
  CPU: user + system seconds all of its processes used, per 1000 env steps (less load-dependent than
      rates on a shared machine: how much work the K seeds cost, whoever else runs);
  where the time goes: ms per loop iteration (every seed acts, steps its envs, records, updates once)
      in each phase, from metrics.jsonl "time/*" over the same windows (on a GPU the update's device
      time shows under "act", which waits for the updated actor), and any "note:" a run printed
      (e.g. a CUDA graph capture that failed, which leaves the update eager).
Modes: "separate" (each process --threads 1, the default) and "together-tN" for each N of
--together-threads (the one process with --threads N).
Runs are interleaved: every round measures every (K, mode) once, the mode order reversed every other
round, and medians over rounds are reported; the machine's load average is recorded before and after
each measurement, with the other processes using the CPU at the start (name and %CPU). With Linux's
autogroup scheduling (recorded) the K processes and the one process, all started from this script's
session, get the same share of a busy machine; without it K processes would get K shares.

Example (what results/bench-seeds/ holds):
  .venv/bin/python scripts/bench_seeds.py --env Hopper-v5 --policy mlp --ks 2,4 --together-threads 1,2 \\
      --learning-starts 200 --measure-steps 400 --rounds 2 --json results/bench-seeds/hopper-mlp.json
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from dwc.core.rundir import read_metrics  # no torch: this process only starts and times the training ones

WARMUP = 1000  # update-phase steps not timed (one SPS window)
TARGETS = {4: 1.2}  # aggregate env-steps/s together / separate, at K = 4 on a CPU


def load_snapshot(exclude: set[int]) -> dict:
    """The load average and the processes (not ours) using the CPU right now."""
    top = []
    try:
        out = subprocess.run(["ps", "-eo", "pid,pcpu,comm", "--sort=-pcpu", "--no-headers"], capture_output=True,
                             text=True, timeout=10).stdout
        for line in out.splitlines()[:12]:
            pid, pcpu, comm = line.split(None, 2)
            if int(pid) not in exclude and float(pcpu) >= 5.0:
                top.append({"pid": int(pid), "cpu_percent": float(pcpu), "command": comm.strip()})
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return {"loadavg_1min": os.getloadavg()[0], "busy_processes": top}


def _autogroup() -> bool | None:
    """Whether Linux shares the CPU between sessions (autogroups) rather than threads: then the K
    processes, started from this one, get the one session's share that the single process gets."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return None


def train_args(args, out: Path, threads: int) -> list[str]:
    words = [sys.executable, "-m", "dwc", "train", "--env", args.env, "--policy", args.policy,
             "--steps", str(args.learning_starts + args.measure_steps), "--learning-starts", str(args.learning_starts),
             "--checkpoint-every", str(10**9), "--eval-episodes", "1", "--no-progress", "--threads", str(threads),
             "--device", args.device, "--out", str(out)]
    if args.policy in ("dwc", "gates"):
        words += ["--width", str(args.width), "--thermo-bits", str(args.thermo_bits), "--wiring", args.wiring]
    return words


def timed_windows(run: Path, args) -> list[dict]:
    """The run's metrics records of its timed windows (one "charts/SPS" record per 1000 steps, past the
    warm-up after --learning-starts)."""
    return [r for r in read_metrics(run / "metrics.jsonl")
            if "charts/SPS" in r and r["step"] > args.learning_starts + WARMUP]


def update_rate(windows: list[dict]) -> float | None:
    """Env-steps/s over the timed windows (total steps / total time of equal windows); None when the
    run is too short to have one."""
    rates = [r["charts/SPS"] for r in windows]
    return len(rates) / sum(1.0 / r for r in rates) if rates else None


def phase_times(windows: list[dict]) -> dict:
    """ms per loop iteration in each phase (time/*: acting, env steps, recording, update) over the
    same windows."""
    keys = sorted({key for r in windows for key in r if key.startswith("time/")})
    return {key.removeprefix("time/").removesuffix("_ms"): statistics.mean(r.get(key, 0.0) for r in windows)
            for key in keys}


def measure(args, k: int, mode: str, tmp: Path) -> dict:
    """One measurement: K seeds together (mode together-tN) or as K concurrent processes."""
    folder = tmp / f"{mode}-k{k}"
    shutil.rmtree(folder, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    if mode == "separate":
        cmds = [train_args(args, folder / f"seed{s}", 1) + ["--seed", str(s)] for s in range(1, k + 1)]
    else:
        cmds = [train_args(args, folder, int(mode.removeprefix("together-t"))) + ["--seeds", f"1-{k}"]]
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds]
    started: dict[int, float] = {}  # process index -> when it printed "training ..."
    ended: dict[int, float] = {}
    errors: dict[int, list[str]] = {i: [] for i in range(len(procs))}

    notes: list[str] = []  # e.g. a CUDA graph capture that failed: the update then runs eagerly

    def watch(i: int, stream) -> None:
        for line in stream:
            if line.startswith("training ") and i not in started:
                started[i] = time.perf_counter()
            if line.startswith("note:"):
                notes.append(line.strip())
        ended[i] = time.perf_counter()

    def keep(i: int, stream) -> None:  # read as it comes: a full pipe would stall the run
        errors[i] += list(stream)
    watchers = [threading.Thread(target=f, args=(i, s), daemon=True)
                for i, p in enumerate(procs) for f, s in ((watch, p.stdout), (keep, p.stderr))]
    for w in watchers:
        w.start()
    try:
        time.sleep(min(20.0, 2.0 + k))  # the load with our processes past their imports
        load_start = load_snapshot({os.getpid()} | {p.pid for p in procs})
        for i, (p, c) in enumerate(zip(procs, cmds)):
            if p.wait():
                for w in watchers:
                    w.join()
                raise SystemExit(f"failed ({p.returncode}): {' '.join(c)}\n{''.join(errors[i])[-2000:]}")
    finally:  # stopped (Ctrl-C) or failed: no training left behind
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for w in watchers:
        w.join()
    wall = time.perf_counter() - t0
    if len(started) < len(procs):
        raise SystemExit(f"{mode} K={k}: a run never printed its 'training ...' line")
    training = max(ended.values()) - min(started.values())
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    windows = [timed_windows(folder / f"seed{s}", args) for s in range(1, k + 1)]
    rates = [update_rate(w) for w in windows]
    per_seed = [phase_times(w) for w in windows]
    phases = {key: statistics.mean(p[key] for p in per_seed if key in p) for key in sorted(set().union(*per_seed))}
    steps = k * (args.learning_starts + args.measure_steps)
    agg = sum(rates) if None not in rates else None
    shutil.rmtree(folder, ignore_errors=True)
    return {"k": k, "mode": mode, "training_s": training, "training_sps": steps / training,
            "update_phase_sps": agg, "per_seed_sps": rates, "wall_s": wall, "wall_sps": steps / wall, "cpu_s": cpu,
            "cpu_ms_per_step": 1000.0 * cpu / steps, "phase_ms_per_iteration": phases, "notes": sorted(set(notes)),
            "load_during": load_start, "loadavg_after": os.getloadavg()[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--policy", default="mlp", choices=("mlp", "dwc", "gates", "qmlp"))
    p.add_argument("--width", type=int, default=256, help="dwc/gates layer width (default 256)")
    p.add_argument("--thermo-bits", type=int, default=31, help="dwc/gates thermometer bits (default 31)")
    p.add_argument("--wiring", default="learnable", choices=("learnable", "random"))
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--ks", default="2,4", help="seed counts K, comma list (default 2,4)")
    p.add_argument("--together-threads", default="1", help="torch threads of the one process, comma list: one "
                                                           "mode each (default 1)")
    p.add_argument("--learning-starts", type=int, default=1000, help="random-action steps (default 1000)")
    p.add_argument("--measure-steps", type=int, default=2000,
                   help="steps after learning starts (default 2000); from 2000 on, a multiple of 1000, the "
                        "update phase is also timed alone (its first 1000 steps warm up)")
    p.add_argument("--rounds", type=int, default=2, help="interleaved repetitions; medians reported (default 2)")
    p.add_argument("--target", type=float, help="required together/separate ratio at the largest K (default: 1.2 at "
                                                "K = 4 on a CPU, none otherwise)")
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = p.parse_args()
    try:
        ks = [int(k) for k in args.ks.split(",")]
        threads = [int(t) for t in args.together_threads.split(",")]
    except ValueError:
        p.error("--ks and --together-threads take comma lists of integers")
    if min(ks) < 2 or min(threads) < 1 or args.rounds < 1:
        p.error("--ks values must be >= 2, --together-threads >= 1, --rounds >= 1")
    if args.learning_starts < 0 or args.measure_steps < 1:
        p.error("--learning-starts must be >= 0 and --measure-steps >= 1")
    import torch

    from dwc.core.cbuild import cpu_model
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device}: this torch build ({torch.__version__}) sees no CUDA GPU")
    modes = ["separate"] + [f"together-t{t}" for t in threads]
    context = {"torch": torch.__version__, "cpu": cpu_model(), "cpus": os.cpu_count(), "device": args.device,
               "gpu": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None,
               "env": args.env, "policy": args.policy, "learning_starts": args.learning_starts,
               "measure_steps": args.measure_steps, "rounds": args.rounds,
               "command": " ".join([Path(sys.executable).name] + sys.argv),
               "load_at_start": load_snapshot({os.getpid()}), "sched_autogroup": _autogroup()}
    if args.policy in ("dwc", "gates"):
        context.update(width=args.width, thermo_bits=args.thermo_bits, wiring=args.wiring)
    print("machine: " + ", ".join(f"{k}={context[k]}" for k in ("cpu", "cpus", "gpu", "device", "torch")
                                  if context[k] is not None))
    print(f"load at start: {context['load_at_start']['loadavg_1min']:.2f} (1 min); busy: "
          + (", ".join(f"{b['command']} {b['cpu_percent']:.0f}%" for b in context["load_at_start"]["busy_processes"])
             or "none"), flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_seeds_") as tmp:
        for r in range(args.rounds):
            for k in ks:
                for mode in (modes if r % 2 == 0 else modes[::-1]):
                    print(f"round {r + 1}/{args.rounds}: K={k} {mode} ...", flush=True)
                    m = measure(args, k, mode, Path(tmp))
                    m["round"] = r + 1
                    results.append(m)
                    if args.json:  # what is measured so far survives a stopped run
                        args.json.parent.mkdir(parents=True, exist_ok=True)
                        args.json.write_text(json.dumps({"context": context, "measurements": results}, indent=2) + "\n")
                    phase = m["update_phase_sps"]
                    print(f"  aggregate {m['training_sps']:.1f} env-steps/s over the training "
                          f"({m['training_s']:.0f} s), "
                          f"{m['wall_sps']:.1f} over the wall time ({m['wall_s']:.0f} s)"
                          + (f", {phase:.1f} in the update phase" if phase else "")
                          + f"; CPU {m['cpu_ms_per_step']:.1f} ms/step; load {m['load_during']['loadavg_1min']:.2f} -> "
                            f"{m['loadavg_after']:.2f}", flush=True)
                    if m["phase_ms_per_iteration"]:  # one iteration: every seed acts, steps, records, updates
                        print("  ms per loop iteration: " + ", ".join(
                            f"{name} {ms:.2f}" for name, ms in m["phase_ms_per_iteration"].items()), flush=True)
                    for note in m["notes"]:
                        print(f"  {note}", flush=True)

    def median(k, mode, key):
        values = [m[key] for m in results if m["k"] == k and m["mode"] == mode]
        return None if None in values else statistics.median(values)

    print(f"\n{'K':>3} {'mode':<14}{'training sps':>13}{'vs separate':>13}{'wall sps':>10}{'vs separate':>13}"
          f"{'update-phase sps':>18}{'vs separate':>13}{'CPU ms/step':>13}{'CPU vs sep.':>13}")
    table, checks = [], {}
    for k in ks:
        for mode in modes:
            row = {"k": k, "mode": mode, **{key: median(k, mode, key) for key in
                                           ("training_sps", "wall_sps", "update_phase_sps", "cpu_ms_per_step")}}
            row["ratio_vs_separate"] = row["training_sps"] / median(k, "separate", "training_sps")
            row["wall_ratio_vs_separate"] = row["wall_sps"] / median(k, "separate", "wall_sps")
            phase, base = row["update_phase_sps"], median(k, "separate", "update_phase_sps")
            row["update_phase_ratio_vs_separate"] = phase / base if phase and base else None
            # work per env step, separate / this: > 1 means fewer CPU seconds for the same training
            row["cpu_efficiency_vs_separate"] = median(k, "separate", "cpu_ms_per_step") / row["cpu_ms_per_step"]
            row["rounds_training_sps"] = [m["training_sps"] for m in results if m["k"] == k and m["mode"] == mode]
            table.append(row)
            ph = "-" if phase is None else f"{phase:.1f}"
            phr = row["update_phase_ratio_vs_separate"]
            phr = "-" if phr is None else f"{phr:.2f}x"
            print(f"{k:>3} {mode:<14}{row['training_sps']:>13.1f}{row['ratio_vs_separate']:>12.2f}x"
                  f"{row['wall_sps']:>10.1f}{row['wall_ratio_vs_separate']:>12.2f}x{ph:>18}{phr:>13}"
                  f"{row['cpu_ms_per_step']:>13.2f}{row['cpu_efficiency_vs_separate']:>12.2f}x")
    kmax = max(ks)
    target = args.target if args.target is not None else (TARGETS.get(kmax) if args.device == "cpu" else None)
    best = max((row for row in table if row["k"] == kmax and row["mode"] != "separate"),
               key=lambda row: row["ratio_vs_separate"])
    if target is not None:
        checks[f"k{kmax}_together_vs_separate"] = {"target": f">= {target}x", "measured": best["ratio_vs_separate"],
                                                   "mode": best["mode"], "pass": best["ratio_vs_separate"] >= target}
        print(f"\ntarget: K={kmax} together >= {target}x separate processes (aggregate env-steps/s): "
              f"{best['ratio_vs_separate']:.2f}x ({best['mode']}) -> "
              f"{'PASS' if best['ratio_vs_separate'] >= target else 'MISS'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"context": context, "table": table, "measurements": results,
                                         "checks": checks}, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
