"""``dwc sweep``: tasks x seeds x policy configs, every run a task on Ray.

One run = train (resuming from its checkpoint when one exists) -> evaluation of the float and the
frozen policy on the same seeds -> optionally compile + Verilator verify (+ synthesis), through the
same functions as ``dwc train`` and ``dwc build``. Ray places the runs (one machine by default, a
running cluster when its address is given) and restarts a run whose worker died; the restarted run
resumes from its last checkpoint. A run that finished wrote ``result.json`` and is never redone,
so stopping a sweep and starting it again continues it.

The spec and its runs: :mod:`dwc.flows.sweep_spec`. Layout (``dwc report`` reads it)::

    SWEEP/spec.yaml, SWEEP/sweep.json               the spec and the runs it expands to, their state
    SWEEP/runs/TASK/CONFIG/seedS/run/               the training run (a dwc train run directory)
    SWEEP/runs/TASK/CONFIG/seedS/build/             compile / verify / synth (hardware section)
    SWEEP/runs/TASK/CONFIG/seedS/result.json        the run's figures, written last
    SWEEP/runs/TASK/CONFIG/seedS/attempts.jsonl     one line per start: pid, host, resumed or not
    SWEEP/runs/TASK/CONFIG/seedS/worker.log         everything the run printed
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

from dwc.core.config import RESUMABLE, TrainConfig, train_command
from dwc.core.errors import OptionError, TimeLimit, UserError, interrupt_on_sigterm
from dwc.core.rundir import CHECKPOINT, checkpoint_info, hold_lock, training_cpu_seconds, write_json
from dwc.flows.sweep_spec import ATTEMPTS, RESULT, Job, Spec, TimeLeft, load_spec


def run_job(job: dict, *after) -> dict:
    """One sweep run, start to result.json; runs in a Ray worker (or anywhere: it is a plain function).
    Returns the result, or {"id", "error"} for a problem a retry would not fix. ``after``: the results of
    the runs it had to wait for (a distillation's teacher)."""
    return run_jobs([job], *after)[0]


class _Tee:
    """Output written to several logs (the seeds trained together share their training's output)."""

    def __init__(self, files):
        self.files = files

    def write(self, text: str) -> int:
        for f in self.files:
            f.write(text)
        return len(text)

    def flush(self) -> None:
        for f in self.files:
            f.flush()

    def isatty(self) -> bool:
        return False


def run_jobs(jobs: list[dict], *after) -> list[dict]:
    """Sweep runs that differ only in their seed, start to result.json, as :func:`run_job` runs one; with
    more than one (``resources.seeds_per_run``), their SAC training runs together in this process
    (dwc.train.multiseed, as dwc train --seeds), then each is evaluated (and built) on its own. A run
    directory is the one it would be alone. Returns one result or {"id", "error"} per run."""
    import contextlib
    import signal
    import threading

    # Ray's cancel (a stopped sweep) raises KeyboardInterrupt here through interrupt_main, which does
    # nothing while SIGINT is ignored: so it is in every worker of a driver started as a background
    # job (`nohup dwc sweep ... &`). The worker blocks SIGINT at the OS, so only the cancel gets in.
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    teachers = {r["id"]: r for a in after for r in (a if isinstance(a, list) else [a])}
    if failed := [t for job in jobs if "error" in (t := teachers.get(job.get("after"), {}))]:
        return [{"id": job["id"], "error": f"its teacher {failed[0]['id']} failed: {failed[0]['error']}"} for job in jobs]
    sweep_dir = Path(jobs[0]["dir"]).parents[3]
    if not sweep_dir.is_dir():
        return [{"id": job["id"], "error": f"{sweep_dir} is not visible on {socket.gethostname()}: on a cluster "
                                           f"the sweep folder must be on storage every node mounts"} for job in jobs]
    starts = []  # (job, its folder, run directory, resumed)
    for job in jobs:
        d = Path(job["dir"])
        d.mkdir(parents=True, exist_ok=True)
        # an earlier result (e.g. a smaller step budget) stops counting the moment this run starts again
        (d / RESULT).unlink(missing_ok=True)
        run = d / "run"
        resumed = (run / CHECKPOINT).exists()
        if not resumed and run.exists():  # a start stopped before its first checkpoint: nothing to resume
            shutil.rmtree(run)
        with open(d / ATTEMPTS, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "time": time.time(),
                                "resumed": resumed, **({"together": [j["id"] for j in jobs]} if len(jobs) > 1 else {})})
                    + "\n")
        starts.append((job, d, run, resumed))
    t0 = time.perf_counter()
    results, device = {}, None
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(open(d / "worker.log", "a", buffering=1)) for _, d, _, _ in starts]
        if len(jobs) > 1:  # the seeds' training, together; its output goes to every seed's log
            with contextlib.redirect_stdout(_Tee(logs)), contextlib.redirect_stderr(_Tee(logs)):
                try:
                    device = _train_together(starts)
                except Exception as e:  # noqa: BLE001 - one line per run (a bug's traceback in the logs)
                    return [_failure(job, d, e) for job, d, _, _ in starts]
        for (job, d, run, resumed), log in zip(starts, logs):
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                try:
                    results[job["id"]] = _run(job, d, run, resumed, t0, trained_on=device)
                except Exception as e:  # noqa: BLE001 - one line (a bug's traceback in its log)
                    results[job["id"]] = _failure(job, d, e)
    return [results[job["id"]] for job in jobs]


def _failure(job: dict, d: Path, e: Exception) -> dict:
    """A run that stopped with ``e``: {"id", "error"}, a problem's one line, or a bug's, whose traceback
    goes to the run's worker.log (this process's output there)."""
    import traceback
    if isinstance(e, UserError):
        print(f"error: {e}")
        return {"id": job["id"], "error": str(e)}
    traceback.print_exc()
    return {"id": job["id"], "error": f"{type(e).__name__}: {e} (traceback in {d / 'worker.log'})"}


def _check_resumed(cfg: TrainConfig, run: Path) -> None:
    """A run directory resumed by the sweep must hold a run of the spec's options."""
    from dwc.core.rundir import load_config
    stored = load_config(run).to_dict()
    changed = [k for k, v in cfg.to_dict().items() if stored.get(k) != v and k not in RESUMABLE]
    if changed:
        raise UserError(f"{run} holds a run with other {', '.join(changed)} than the spec; "
                        f"use another sweep folder or delete that run")


def _train_together(starts: list) -> str:
    """Train the seeds of ``starts`` together (dwc train --seeds); the device they trained on."""
    from dwc.train.multiseed import train_seeds
    cfgs = [TrainConfig.from_dict(job["cfg"]) for job, _, _, _ in starts]
    for cfg, (_, _, run, resumed) in zip(cfgs, starts):
        if resumed:
            _check_resumed(cfg, run)
    device = train_seeds(cfgs, [run for _, _, run, _ in starts], [resumed for _, _, _, resumed in starts],
                         progress=False, commands=[train_command(c, run, resume=resumed)
                                                   for c, (_, _, run, resumed) in zip(cfgs, starts)])
    return str(device)


def _run(job: dict, d: Path, run: Path, resumed: bool, t0: float, trained_on: str | None = None) -> dict:
    """One run's training (unless already ``trained_on`` that device, with its seeds together), evaluation
    and hardware stages, and its result.json."""
    from dwc.flows.build import build
    from dwc.flows.evaluate import evaluate_run, train_and_evaluate

    cfg = TrainConfig.from_dict(job["cfg"])
    circuit = cfg.actor.policy != "mlp"
    if trained_on:
        ev = evaluate_run(run, cfg.eval_episodes, device=trained_on, progress=False, frozen=circuit)
    else:
        if resumed:
            _check_resumed(cfg, run)
        ev = train_and_evaluate(cfg, run, resume=resumed, progress=False,
                                command=train_command(cfg, run, resume=resumed), frozen=circuit)
    result = {"id": job["id"], "key": job["key"], "task": job["task"], "config": job["config"], "seed": job["seed"],
              "policy": cfg.actor.policy, "teacher": job.get("after"), "train_steps": ev["train_steps"],
              "episodes": ev["episodes"],
              "float_return": ev["mean_return"], "float_returns": ev["returns"],
              "frozen_return": ev["frozen"]["mean_return"] if circuit else None,
              "frozen_returns": ev["frozen"]["returns"] if circuit else None,
              "hardware": job["hardware"], "rtl_return": None, "rtl_equals_frozen": None, "luts": None,
              "lut4_sites": None, "fmax_mhz": None, "ir_luts": None, "comparators": None, "latency_cycles": None}
    result["train_cpu_s"] = training_cpu_seconds(run)
    if circuit and not job["hardware"] and cfg.actor.policy != "qmlp":
        result.update(circuit_size(run))
    if job["hardware"]:
        hw = job["hardware"]
        s = build(d / "build", from_run=run, target=hw["target"], pipeline=hw["pipeline"],
                  episodes=hw["episodes"] or cfg.eval_episodes, freq=hw["freq"], progress=False)
        syn = s["synth"] or {}
        result.update(rtl_return=s["rtl_return"], rtl_equals_frozen=s["rtl_equals_frozen"], ir_luts=s["ir_luts"],
                      comparators=s["comparators"], latency_cycles=s["latency_cycles"], luts=syn.get("luts"),
                      lut4_sites=syn.get("lut4_sites"), fmax_mhz=syn.get("fmax_mhz"), target=syn.get("target"))
    result["seconds"] = round(time.perf_counter() - t0, 1)
    write_json(d / RESULT, result)
    return result


def circuit_size(run: Path) -> dict:
    """IR LUTs and comparators of a run's circuit after the IR passes: a few seconds where the hardware stage
    (Verilog, Verilator, synthesis) takes minutes, so every LUT circuit in a sweep's table has its size (a
    quantised MLP's waits for the hardware stage: a wide one's arithmetic takes long to lower)."""
    from dwc.flows.compile import freeze_run
    from dwc.ir.passes import optimize
    counts = optimize(freeze_run(run))[0].counts()
    return {"ir_luts": counts["luts"], "comparators": counts["comparators"]}


def _start_ray(address: str | None, cpus: int | None):
    address = address or os.environ.get("RAY_ADDRESS")
    # read by Ray at import: set before it
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address and "RAY_AUTH_MODE" not in os.environ and (
            os.environ.get("RAY_AUTH_TOKEN") or (Path.home() / ".ray" / "auth_token").exists()):
        os.environ["RAY_AUTH_MODE"] = "token"  # Ray's clusters want the token; a driver sends it only in this mode
    elif not address:
        # what Ray does by default for a new local engine (a token, made on first use), said explicitly: without
        # it, Ray warns on every start that it chose so
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    try:
        import ray
    except ImportError:
        raise UserError("dwc sweep runs on Ray: pip install 'dwc[sweep]' (or pip install ray)") from None
    # Ray puts the driver's working folder first on its workers' import path: a sweep started from
    # another dwc source folder would train with that code. Started from the folder that holds this
    # dwc, the workers import the code the sweep was started with (legs.json records it per run).
    here = os.getcwd()
    os.chdir(Path(__file__).resolve().parents[2])
    try:
        if address:  # a running cluster: it brings its own resources
            ray.init(address=address, logging_level="WARNING", log_to_driver=False)
        else:  # a new local engine for this machine (never a cluster started earlier), gone when the sweep ends
            ray.init(address="local", num_cpus=cpus or os.cpu_count(), include_dashboard=False, logging_level="WARNING",
                     log_to_driver=False, object_store_memory=100 * 2**20)
    except Exception as e:  # noqa: BLE001 - Ray raises plain Exception too (a local node that timed out starting)
        raise UserError(f"cannot start Ray{' at ' + address if address else ''}: {str(e).splitlines()[0]}") from None
    finally:
        os.chdir(here)
    return ray, address or "local"


def _part(spec: Spec, tasks: list[str] | None, seeds: list[int] | None,
          configs: list[str] | None = None) -> tuple[set[str], set[int], set[str]]:
    """The tasks, seeds and configs of ``spec`` to run now (--tasks/--seeds/--configs: subsets of the
    spec's, checked)."""
    for given, have, what in ((tasks, spec.tasks, "tasks"), (seeds, spec.seeds, "seeds"),
                              (configs, list(spec.configs), "configs")):
        if given is not None and (extra := [x for x in given if x not in have]):
            raise UserError(f"--{what} {','.join(map(str, extra))}: not among the spec's {what} "
                            f"({', '.join(map(str, have))})")
    return set(tasks or spec.tasks), set(seeds or spec.seeds), set(configs or spec.configs)


def sweep(spec_path: Path, out: Path | None = None, address: str | None = None, cpus: int | None = None,
          progress: bool = True, log=print, scale_down: bool = False, tasks: list[str] | None = None,
          seeds: list[int] | None = None, seeds_per_run: int | None = None, configs: list[str] | None = None,
          cpus_per_run: int | None = None, longest_first: bool = False, stop_after: float | None = None) -> dict:
    """Run every unfinished run of the spec on Ray; returns (and writes to SWEEP/sweep.json) the state.
    ``scale_down``: the spec with its scale_down section applied (default folder sweeps/SPEC-NAME-scale-down).
    ``tasks``/``seeds``/``configs``: run only the spec's runs of these (a part now, the rest later, into the
    same folder);
    ``seeds_per_run``, ``cpus_per_run``: over the spec's resources (where runs go and how many threads
    they use, not what they compute);
    ``longest_first``: queue the runs not begun by their training time left, longest first (see _groups);
    ``stop_after``: seconds from now after which the runs in flight checkpoint and the sweep stops, as on
    Ctrl-C, raising :class:`TimeLimit` (a part of a sweep on a machine lent for a while)."""
    if cpus is not None and cpus < 1:
        raise OptionError("cpus", f" must be >= 1, got {cpus}")
    deadline = time.monotonic() + stop_after if stop_after else None
    spec = load_spec(spec_path, scale_down=scale_down)
    spec_path = spec.path  # a shipped spec's name resolved
    now_tasks, now_seeds, now_configs = _part(spec, tasks, seeds, configs)
    if seeds_per_run is not None:
        if seeds_per_run < 1:
            raise OptionError("seeds_per_run", f" must be >= 1, got {seeds_per_run}")
        spec.resources["seeds_per_run"] = seeds_per_run
    if cpus_per_run is not None:
        if cpus_per_run < 1:
            raise OptionError("cpus_per_run", f" must be >= 1, got {cpus_per_run}")
        spec.resources["cpus_per_run"] = cpus_per_run
    out = Path(out) if out else Path("sweeps") / (spec_path.stem + "-scale-down" * scale_down)
    jobs = spec.jobs(out.resolve())
    unfinished = [j for j in jobs if not j.finished()]
    todo = [j for j in unfinished if j.task in now_tasks and j.seed in now_seeds and j.config in now_configs]
    # a student's unfinished teacher runs first, whatever the part chosen
    ids, need = {j.id for j in todo}, {j.after for j in todo if j.after}
    todo = [j for j in unfinished if j.id in need - ids] + todo
    todo_ids = {j.id for j in unfinished}
    state = {"spec": str(spec_path), "out": str(out), "scale_down": scale_down, "runs": {j.id: {"dir": str(j.dir.relative_to(out.resolve())), "task": j.task,
                                                     "config": j.config, "seed": j.seed,
                                                     "state": "todo" if j.id in todo_ids else "finished"} for j in jobs}}
    # one driver a folder; a second one stops before it starts an engine
    lock = hold_lock(out, "dwc sweep") if out.exists() else None
    try:
        # the engine first: a sweep that cannot start writes nothing (no spec.yaml, sweep.json or folder)
        ray, where = _start_ray(address, cpus) if todo else (None, None)
        out.mkdir(parents=True, exist_ok=True)
        lock = lock or hold_lock(out, "dwc sweep")
        if Path(spec_path).resolve() != (out / "spec.yaml").resolve():
            shutil.copyfile(spec_path, out / "spec.yaml")
        plural = lambda n, what: f"{n} {what}{'s' * (n != 1)}"
        shape = " x ".join(plural(len(xs), w) for xs, w in ((spec.tasks, "task"), (spec.configs, "config"), (spec.seeds, "seed")))
        if spec.config_tasks:
            shape += ", some configs on some tasks only"
        later = len(unfinished) - len(todo)
        log(f"{out}: {len(jobs)} runs ({shape}); {len(jobs) - len(unfinished)} finished earlier (kept), "
            f"{len(todo)} to run" + (f" now, {later} left for later (not in --tasks/--seeds/--configs)" if later else ""))
        resumes = [(j.id, ck["step"]) for j in todo if (ck := checkpoint_info(j.dir / "run"))]
        if resumes:  # they go first (_groups)
            log("resuming from their checkpoints: " + ", ".join(
                f"{rid} at step {step:,}" if step is not None else rid for rid, step in resumes))
        write_json(out / "sweep.json", state)
        if not todo:
            return state
        _run_on_ray(ray, where, spec, jobs, todo, state, out, progress, log, longest_first, deadline)
        return state
    finally:
        if lock:
            lock.close()  # explicitly: a traceback kept by the caller would keep the file, and the lock, open


def _run_on_ray(ray, where: str, spec: Spec, jobs: list[Job], todo: list[Job], state: dict, out: Path,
                progress: bool, log, longest_first: bool, deadline: float | None = None) -> None:
    """Queue the runs of ``todo`` on the started engine and wait for them all (``jobs``: every run of the
    spec, for the time left); Ctrl-C, SIGTERM or the ``deadline`` (time.monotonic()) checkpoints the runs
    in flight, then the engine stops."""
    interrupt_on_sigterm()  # after ray.init, whose native SIGTERM handler would abort the driver instead
    pending = {}
    try:
        res = ray.cluster_resources()
        gpus = spec.resources["gpus_per_run"]
        if gpus == "auto":
            gpus = 1 if res.get("GPU", 0) > 0 else 0
        log(f"engine: Ray {ray.__version__} ({where}): {res.get('CPU', 0):g} CPUs, {res.get('GPU', 0):g} GPUs; "
            f"each run {spec.resources['cpus_per_run']} CPU, {gpus:g} GPU, up to {spec.resources['max_retries']} restarts")
        slots = int(res.get("CPU", 0) // spec.resources["cpus_per_run"])
        if gpus > 0:
            slots = min(slots, int(res.get("GPU", 0) // gpus))
        time_left = TimeLeft(jobs, slots)
        task = ray.remote(run_job)
        together = ray.remote(run_jobs)
        if longest_first:
            log("queue: the runs begun earlier first, then the longest training left first")
        ref_of = {}  # run id -> the Ray task that trains it
        for group in _groups(todo, spec.resources["seeds_per_run"], time_left if longest_first else None):
            for j in group:
                j.cfg.device = "cuda" if gpus > 0 else "cpu"
            how = dict(num_cpus=spec.resources["cpus_per_run"], num_gpus=gpus, name="+".join(j.id for j in group),
                       max_retries=spec.resources["max_retries"], retry_exceptions=False)
            # a distillation waits for its teacher's task: Ray starts a task once the tasks passed to it ended
            after = [ref_of[j.after] for j in group if j.after in ref_of]
            if len(group) == 1:
                ref = task.options(**how).remote(group[0].payload(), *after)
            else:
                ref = together.options(**how).remote([j.payload() for j in group], *after)
            pending[ref] = group
            ref_of.update({j.id: ref for j in group})
        _wait(ray, pending, state, out, progress, log, time_left, deadline)
    except KeyboardInterrupt:
        # Ray raises KeyboardInterrupt inside each running run, which then checkpoints; give them a moment.
        for ref in pending:
            ray.cancel(ref)
        ray.wait(list(pending), num_returns=len(pending), timeout=30)
        raise
    finally:
        ray.shutdown()


def _groups(jobs: list[Job], size: int, longest_first: TimeLeft | None = None) -> list[list[Job]]:
    """The runs as Ray tasks, in the order they are queued: up to ``size`` seeds of one task and config
    (SAC) per task, trained together; every other run alone. Runs started earlier (a checkpoint to
    resume) come first, so a restarted sweep finishes what it began before it begins more; then the
    spec's order or, with ``longest_first``, the longest training left first (by its estimate; those it
    has no rate for count as longest): on a few workers, long runs queued last would train alone at the end."""
    groups: dict = {}
    for j in jobs:
        key = (j.task, j.config) if size > 1 and j.cfg.algo == "sac" else j.id
        groups.setdefault(key, []).append(j)
    tasks = [g[i:i + size] for g in groups.values() for i in range(0, len(g), size)]
    started = lambda g: any((j.dir / "run" / CHECKPOINT).exists() for j in g)
    if longest_first is None:
        return sorted(tasks, key=lambda g: not started(g))

    def left(g: list[Job]) -> float:
        seconds, unknown = longest_first([g])
        return float("inf") if unknown else seconds
    return sorted(tasks, key=lambda g: (not started(g), -left(g)))


def _wait(ray, pending: dict, state: dict, out: Path, progress: bool, log, time_left: TimeLeft,
          deadline: float | None = None) -> None:
    """Until every task of ``pending`` (Ray reference -> its runs) has ended, or the ``deadline``
    (TimeLimit): the progress bar, each run's state in SWEEP/sweep.json and a line per finished or
    failed run."""
    from tqdm import tqdm

    jobs = [j for group in pending.values() for j in group]
    # In a log file (nohup, CI) a redrawn bar would be one endless line that hides the "done" lines:
    # there the progress is a line of its own every minute, and every message starts a line.
    tty = sys.stderr.isatty()
    # steps resumed from checkpoints count as done from the start, so the rate is this session's; the time
    # left is TimeLeft's (tqdm's would give every run the mean rate)
    initial = sum(j.logged_steps() for j in jobs)
    fmt = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]"
    bar = tqdm(total=sum(j.cfg.steps for j in jobs), unit="step", disable=not (progress and tty), dynamic_ncols=True,
               desc=f"sweep ({len(jobs)} runs)", initial=initial, bar_format=fmt)
    say = bar.write if progress and tty else log
    say(f"{time_left.text(list(pending.values()))} with {time_left.slots} run(s) at once, each at its own "
        f"training rate or its task and config's in this folder (evaluation and hardware stages not counted)"
        + (f"; --stop-after stops the sweep in {timedelta(seconds=round(deadline - time.monotonic()))}"
           if deadline is not None else ""))
    t_last, t_line, t0, ended = 0.0, time.monotonic(), time.monotonic(), set()
    while pending:
        if deadline is not None and time.monotonic() >= deadline:
            bar.close()
            raise TimeLimit
        done, _ = ray.wait(list(pending), num_returns=1, timeout=2.0)
        ended |= {j.id for ref in done for j in pending[ref]}
        if time.monotonic() - t_last > 2.0 or done:
            logged = {j.id: j.cfg.steps if j.id in ended else j.logged_steps() for j in jobs}  # one read a tick
            # never backwards (a resumed run's metrics drop back to its checkpoint): a negative rate is no ETA
            bar.n = max(bar.n, sum(logged.values()))
            left = [g for g in pending.values() if not any(j.id in ended for j in g)]
            bar.set_postfix_str(time_left.text(left, logged), refresh=False)
            bar.refresh()
            t_last = time.monotonic()
            if t_last - t_line >= 60.0:
                for g in left[:time_left.slots]:  # those training now: their rates move
                    for j in g:
                        time_left.refresh(j)
                if progress and not tty:
                    log(tqdm.format_meter(bar.n, bar.total, t_last - t0, prefix=f"sweep ({len(jobs)} runs)",
                                          unit="step", initial=initial, bar_format=fmt,
                                          postfix=time_left.text(left, logged)))
                t_line = t_last
        for ref in done:
            group = pending.pop(ref)
            try:
                rs = ray.get(ref)
                rs = rs if isinstance(rs, list) else [rs]
            except ray.exceptions.RayError as e:  # its worker died more often than max_retries allows
                rs = [{"id": j.id, "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"} for j in group]
            for j, r in zip(group, rs):
                rec = state["runs"][j.id]
                if "error" in r:
                    rec.update(state="failed", error=r["error"])
                    say(f"FAILED {j.id}: {r['error']}")
                else:
                    rec.update(state="finished")
                    frozen = f", frozen {r['frozen_return']:.1f}" if r["frozen_return"] is not None else ""
                    rtl = f", RTL {r['rtl_return']:.1f}" if r["rtl_return"] is not None else ""
                    cpu = f", training {r['train_cpu_s']:.0f} s of CPU time" if r.get("train_cpu_s") is not None else ""
                    say(f"done {j.id}: return {r['float_return']:.1f}{frozen}{rtl} "
                        f"({r['train_steps']} steps, {r['seconds']:.0f} s{cpu})")
            write_json(out / "sweep.json", state)
    bar.close()
