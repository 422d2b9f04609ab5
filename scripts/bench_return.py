"""The float MLP baseline held to a referee: ``dwc train --policy mlp`` against Stable-Baselines3's
SAC (scripts/referee_sac.py, SB3's own defaults) on the same tasks, seeds, budget and
``learning_starts``, side by side; and ``dwc train --policy mlp --critic crossq`` against sb3-contrib's
CrossQ (sides dwc-crossq and sb3-crossq). Each dwc side is read against its own referee (REFEREE).

Every DWC result is read against its paired MLP; this bench says whether that MLP is as strong as
a stock SAC. Per task it reports each seed's deterministic return (10 episodes on the seeds
``dwc eval`` uses), the IQM return ratio dwc / SB3 over the paired seeds with its 95% stratified
bootstrap CI (rliable, from 5 paired seeds; fewer: "n = 3, no CI") and rliable's probability that
dwc's MLP beats SB3; over all tasks, the IQM of paper-normalised scores (return / the paper's MLP
median) for each side, their ratio, and 95% CIs from a bootstrap stratified by task. A task is
flagged "below" when its ratio is under 0.9 or its CI lies below 1. One plot per task shows both
sides' training curves.

Runs go to OUT/runs/TASK/SIDE/seedS, each resumable: run the same command again after a stop
and finished runs are kept, the others resume from their checkpoints. Both sides train on one
torch thread, ``--jobs`` of them at a time. The dwc side runs the ``dwc`` package of the tree this
script sits in (a frozen copy of the code stays frozen while you edit another).

  python scripts/bench_return.py --out /work/bench/referee --seeds 1-3 --steps 100000 --jobs 2
  python scripts/bench_return.py --out /work/bench/referee --report-only   # tables and plots of what finished
  python scripts/bench_return.py --out /work/bench/crossq --sides dwc-crossq,sb3-crossq --tasks Walker2d-v5
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TASKS = ("Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Humanoid-v5", "Walker2d-v5")
SIDES = ("dwc", "sb3", "dwc-crossq", "sb3-crossq")
REFEREE = {"dwc": "sb3", "dwc-crossq": "sb3-crossq"}  # each dwc side -> the established implementation it is held to
LABEL = {"dwc": "dwc train --policy mlp", "sb3": "Stable-Baselines3 SAC",
         "dwc-crossq": "dwc train --policy mlp --critic crossq", "sb3-crossq": "sb3-contrib CrossQ"}
BELOW = 0.9  # a task whose ratio is under this (or whose CI lies below 1) is flagged


def run_dir(out: Path, task: str, side: str, seed: int) -> Path:
    return out / "runs" / task / side / f"seed{seed}"


def command(args, task: str, side: str, seed: int, run: Path) -> list[str]:
    common = ["--seed", str(seed), "--steps", str(args.steps), "--learning-starts", str(args.learning_starts)]
    if args.q_hidden and side.endswith("crossq"):  # the CrossQ pair's critics, the same width on both sides
        common += ["--q-hidden", str(args.q_hidden)]
    if side.startswith("sb3"):
        return [sys.executable, str(ROOT / "scripts" / "referee_sac.py"), "--env", task, *common,
                "--algo", "crossq" if side == "sb3-crossq" else "sac",
                "--eval-episodes", str(args.eval_episodes), "--out", str(run)]
    cmd = [sys.executable, "-m", "dwc", "train", "--env", task, "--policy", "mlp", "--hidden", "256", *common,
           "--threads", "1", "--precision", "float32", "--eval-episodes", str(args.eval_episodes),
           "--out", str(run), "--no-progress"] + ["--critic", "crossq"] * (side == "dwc-crossq")
    return cmd + ["--resume"] if (run / "config.json").is_file() else cmd


def finished(run: Path) -> bool:
    return (run / "eval.json").is_file()


def run_jobs(args, jobs: list[tuple[str, str, int]]) -> int:
    """Runs the jobs ``args.jobs`` at a time; Ctrl-C stops them (each checkpoints) and returns 130."""
    from tqdm import tqdm
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "OMP_NUM_THREADS": "1"}
    todo, running, failed = list(jobs), [], []
    bar = tqdm(total=len(jobs), unit="run", desc="referee bench")
    try:
        while todo or running:
            while todo and len(running) < args.jobs:
                task, side, seed = todo.pop(0)
                run = run_dir(args.out, task, side, seed)
                run.parent.mkdir(parents=True, exist_ok=True)
                log = open(run.parent / f"seed{seed}.log", "a")
                proc = subprocess.Popen(command(args, task, side, seed, run), stdout=log, stderr=subprocess.STDOUT,
                                        env=env, cwd=ROOT, start_new_session=True)
                running.append((proc, log, (task, side, seed), time.time()))
                bar.write(f"started {task} {side} seed {seed} (log: {log.name})")
            time.sleep(2)
            for item in list(running):
                proc, log, (task, side, seed), t0 = item
                if proc.poll() is None:
                    continue
                running.remove(item)
                log.close()
                ok = proc.returncode == 0 and finished(run_dir(args.out, task, side, seed))
                bar.write(f"{'finished' if ok else 'FAILED'} {task} {side} seed {seed} in {(time.time() - t0) / 60:.1f} min"
                          + ("" if ok else f" (exit {proc.returncode}; see {log.name})"))
                if not ok:
                    failed.append((task, side, seed))
                bar.update(1)
    except KeyboardInterrupt:
        bar.write("interrupted: the runs in flight checkpoint; run the same command to resume")
        for proc, *_ in running:
            os.killpg(proc.pid, signal.SIGINT)
        for proc, log, *_ in running:
            proc.wait()
            log.close()
        return 130
    finally:
        bar.close()
    return 1 if failed else 0


def collect(out: Path) -> dict:
    """task -> side -> seed -> eval.json, from every finished run under OUT/runs."""
    found: dict = {}
    for ev in sorted((out / "runs").glob("*/*/seed*/eval.json")):
        seed_dir = ev.parent
        task, side, seed = seed_dir.parent.parent.name, seed_dir.parent.name, int(seed_dir.name[4:])
        found.setdefault(task, {}).setdefault(side, {})[seed] = json.loads(ev.read_text())
    return found


def aggregate(found: dict, side: str) -> dict:
    """IQM of paper-normalised scores over the tasks and seeds ``side`` and its referee both finished, each
    side's CI and the ratio's, from rliable's bootstrap stratified by task (seeds resampled within each task)."""
    import numpy as np
    from rliable import library as rly

    from dwc.core import published
    from dwc.flows import stats
    pair = (side, REFEREE[side])
    tasks = [t for t in sorted(found) if published.published(t, "mlp") and paired_seeds(found[t], side)]
    if not tasks:
        return {"tasks": [], "note": "no task with paired runs"}
    n = min(len(paired_seeds(found[t], side)) for t in tasks)  # rliable needs the same runs per task
    # each task's first n paired seeds (the same seed numbers in every task when the bench ran them all)
    norm = {s: np.array([[found[t][s][paired_seeds(found[t], side)[i]]["mean_return"] / published.published(t, "mlp")
                          for t in tasks] for i in range(n)]) for s in pair}
    iqm = {s: stats.iqm(norm[s]) for s in pair}
    out = {"tasks": tasks, "seeds_per_task": n, "runs": n * len(tasks), "normalised_by": "the paper's FP32 MLP median",
           "iqm": iqm, "ratio": iqm[side] / iqm[pair[1]] if iqm[pair[1]] > 0 else None, "ci": None, "ratio_ci": None,
           "note": None}
    if n * len(tasks) < stats.MIN_SEEDS or n < 2:
        return {**out, "note": stats.no_ci(n * len(tasks))}
    with stats.seeded() as rs:
        _, ci = rly.get_interval_estimates({s: norm[s] for s in pair}, lambda x: np.array([stats.iqm(x)]),
                                           reps=stats.REPS, confidence_interval_size=stats.CONFIDENCE, random_state=rs)
        paired = rly.StratifiedBootstrap(norm[side], norm[pair[1]], random_state=rs)
        lo, hi = paired.conf_int(lambda x, y: np.array([stats.iqm(x) / stats.iqm(y)]), reps=stats.REPS,
                                 size=stats.CONFIDENCE, method="percentile")[:, 0]
    return {**out, "ci": {s: [float(ci[s][0][0]), float(ci[s][1][0])] for s in pair},
            "ratio_ci": [float(lo), float(hi)]}


def paired_seeds(by_side: dict, side: str) -> list[int]:
    """The seeds both ``side`` and its referee finished."""
    return sorted(set(by_side.get(side, {})) & set(by_side.get(REFEREE[side], {})))


def task_rows(found: dict) -> list[dict]:
    from dwc.core import published
    from dwc.flows import stats
    rows = []
    for task in sorted(found):
        sides = found[task]
        row = {"task": task, "paper_mlp": published.published(task, "mlp"),
               "returns": {side: {s: r["mean_return"] for s, r in sorted(sides.get(side, {}).items())} for side in SIDES},
               "lengths": {side: {s: r["mean_length"] for s, r in sorted(sides.get(side, {}).items())} for side in SIDES},
               "comparisons": {}}  # dwc side -> its paired comparison with its referee
        for side, referee in REFEREE.items():
            if paired_seeds(sides, side):
                comp = stats.compare_paired(row["returns"][side], row["returns"][referee])
                ratio, hi = comp["ratio"], comp["ratio_ci_high"]
                comp["verdict"] = ("no ratio" if ratio is None else
                                   "below" if ratio < BELOW or (hi is not None and hi < 1) else "level or above")
                row["comparisons"][side] = comp
        rows.append(row)
    return rows


def fmt_ci(lo, hi) -> str:
    return f" [{lo:.2f}, {hi:.2f}]" if lo is not None else ""


def text(rep: dict) -> str:
    lines = []
    for side, referee in REFEREE.items():
        if any(r["returns"][side] or r["returns"][referee] for r in rep["tasks"]):
            lines += pair_table(rep, side, referee) + [""]
    lines += ["Returns: mean of the deterministic evaluation episodes of each seed (the seeds dwc eval uses). Ratio: IQM over the "
              "paired seeds, 95% CI from a paired stratified bootstrap (rliable) from 5 seeds on. Verdict 'below': "
              f"ratio under {BELOW} or its CI below 1."]
    return "\n".join(lines)


def pair_table(rep: dict, side: str, referee: str) -> list[str]:
    """The table of one dwc side against its referee, and their aggregate over the tasks."""
    lines = [f"{LABEL[side]} against {LABEL[referee]}:", "",
             "| task | seeds | dwc, each seed | referee, each seed | IQM dwc | IQM referee | dwc / referee [95% CI] "
             "| P(dwc > referee) | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rep["tasks"]:
        c = r["comparisons"].get(side)
        each = {s: ", ".join(f"{v:.0f}" for v in r["returns"][s].values()) or "-" for s in (side, referee)}
        if not c:
            lines.append(f"| {r['task']} | unpaired | {each[side]} | {each[referee]} | | | | | |")
            continue
        ratio = "-" if c["ratio"] is None else f"{c['ratio']:.2f}{fmt_ci(c['ratio_ci_low'], c['ratio_ci_high'])}"
        note = f" ({c['note']})" if c["note"] else ""
        lines.append(f"| {r['task']} | {c['n']} | {each[side]} | {each[referee]} | {c['candidate_iqm']:.0f} | "
                     f"{c['baseline_iqm']:.0f} | {ratio}{note} | {c['p_improvement']:.2f} | {c['verdict']} |")
    a = rep["aggregate"][side]
    if a.get("tasks"):
        ci = a["ci"] or {}
        k = a["seeds_per_task"]  # the same count from every task (rliable's bootstrap needs it): the first k paired
        lines += ["", f"Over {len(a['tasks'])} tasks x the first {k} paired seed{'s' * (k != 1)} of each, IQM of scores "
                  f"normalised by {a['normalised_by']}: dwc {a['iqm'][side]:.3f}{fmt_ci(*ci.get(side, (None, None)))}, "
                  f"referee {a['iqm'][referee]:.3f}{fmt_ci(*ci.get(referee, (None, None)))}; dwc / referee "
                  f"{a['ratio']:.2f}{fmt_ci(*(a['ratio_ci'] or (None, None)))}" + (f" ({a['note']})" if a["note"] else "")]
    return lines


def plot(out: Path, found: dict) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from dwc.flows import stats
    from dwc.flows.report import curve
    paths = []
    for task, sides in sorted(found.items()):
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
        for side, label in LABEL.items():
            runs = sorted(out.glob(f"runs/{task}/{side}/seed*/metrics.jsonl"))
            if not runs:
                continue
            steps = max(json.loads((r.parent / "config.json").read_text())["steps"] for r in runs)
            grid = np.linspace(0, steps, 41)[1:]
            band = stats.curve_band([curve(r, grid) for r in runs])
            line, = ax.plot(grid, band["median"], lw=1.5, label=f"{label} ({band['note'] or f'{len(runs)} seeds'})")
            if band["ci_low"] is not None:
                ax.fill_between(grid, band["ci_low"], band["ci_high"], color=line.get_color(), alpha=0.2, lw=0)
        ax.set_xlabel("env steps")
        ax.set_ylabel("episodic return (training)")
        ax.set_title(f"{task}: median over seeds", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"curves_{task}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(str(path))
    return paths


def report(out: Path, argv: list[str]) -> dict:
    found = collect(out)
    rep = {"command": [Path(sys.executable).name, "scripts/bench_return.py", *argv], "tasks": task_rows(found),
           "aggregate": {side: aggregate(found, side) for side in REFEREE}, "plots": plot(out, found)}
    (out / "bench.json").write_text(json.dumps(rep, indent=2) + "\n")
    (out / "bench.md").write_text(text(rep) + "\n")
    return rep


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="bench folder (keep it outside the repository)")
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated env ids (default: the five v5 tasks)")
    ap.add_argument("--seeds", default="1-3", help="e.g. 1-3 or 1,4 (default 1-3)")
    ap.add_argument("--sides", default="dwc,sb3",
                    help=f"which to train, comma-separated: {', '.join(SIDES)} (default dwc,sb3: the SAC pair)")
    ap.add_argument("--steps", type=int, default=100_000, help="env steps per run (default 100000)")
    ap.add_argument("--learning-starts", type=int, default=10_000,
                    help="random-action steps before updates, the same on both sides (default 10000)")
    ap.add_argument("--eval-episodes", type=int, default=10, help="deterministic episodes per run (default 10)")
    ap.add_argument("--q-hidden", type=int,
                    help="the CrossQ sides' critic width, both sides (default: CrossQ's 1024; 256 is much "
                         "cheaper on a CPU)")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time, one core each (default 1)")
    ap.add_argument("--report-only", action="store_true", help="no training: tables and plots of the finished runs")
    args = ap.parse_args()
    from dwc.core.errors import UserError
    from dwc.core.seeds import parse_seeds
    try:
        seeds = parse_seeds(args.seeds)
    except UserError as e:
        ap.error(str(e))
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not sides or set(sides) - set(SIDES):
        ap.error(f"--sides {args.sides!r}: choose from {', '.join(SIDES)}")
    if args.steps < 1 or args.jobs < 1 or args.eval_episodes < 1 or not 0 <= args.learning_starts < args.steps:
        ap.error("--steps, --jobs and --eval-episodes must be >= 1, and --learning-starts in [0, --steps)")
    if args.q_hidden is not None and args.q_hidden < 1:
        ap.error("--q-hidden must be >= 1")
    args.out.mkdir(parents=True, exist_ok=True)
    status = 0
    if not args.report_only:
        jobs = [(t, side, s) for s in seeds for t in tasks for side in sides
                if not finished(run_dir(args.out, t, side, s))]
        print(f"{len(jobs)} runs to train ({len(tasks) * len(seeds) * len(sides) - len(jobs)} finished already), "
              f"{args.jobs} at a time", flush=True)
        status = run_jobs(args, jobs)
    rep = report(args.out, sys.argv[1:])
    print(text(rep))
    print(f"\nwritten: {args.out / 'bench.json'}, {args.out / 'bench.md'}, {len(rep['plots'])} plots")
    return status


if __name__ == "__main__":
    sys.exit(main())
