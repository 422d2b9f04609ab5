"""``dwc sweep``: tasks x seeds x policy configs, every run a task on Ray.

One run = train (resuming from its checkpoint when one exists) -> evaluation of the float and the
frozen policy on the same seeds -> optionally compile + Verilator verify (+ synthesis), through the
same functions as ``dwc train`` and ``dwc build``. Ray places the runs (one machine by default, a
running cluster when its address is given) and restarts a run whose worker died; the restarted run
resumes from its last checkpoint. A run that finished wrote ``result.json`` and is never redone,
so stopping a sweep and starting it again continues it.

Layout (``dwc report`` reads it)::

    SWEEP/spec.yaml, SWEEP/sweep.json               the spec and the runs it expands to, their state
    SWEEP/runs/TASK/CONFIG/seedS/run/               the training run (a dwc train run directory)
    SWEEP/runs/TASK/CONFIG/seedS/build/             compile / verify / synth (hardware section)
    SWEEP/runs/TASK/CONFIG/seedS/result.json        the run's figures, written last
    SWEEP/runs/TASK/CONFIG/seedS/attempts.jsonl     one line per start: pid, host, resumed or not
    SWEEP/runs/TASK/CONFIG/seedS/worker.log         everything the run printed
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .config import DEFAULT_FREQ_MHZ, RESUMABLE, TrainConfig, config_from_options, train_command
from .errors import UserError, interrupt_on_sigterm
from .rundir import CHECKPOINT, checkpoint_info, hold_lock, last_logged_step, tail_records, write_json
from .seeds import seed_dir

SPEC_HELP = """\
tasks: [InvertedPendulum-v5, Hopper-v5]   # Gymnasium env ids
seeds: 10                                 # 1..10, or a list: [1, 2, 3]
steps: 300000                             # env steps per run
options: {algo: sac}                      # dwc train options shared by every config
configs:                                  # name -> dwc train options (names as the flags, - or _)
  dwc: {policy: dwc, width: [256, 1024]}  # a list expands: configs dwc-width256, dwc-width1024
  mlp: {policy: mlp}
  qmlp: {policy: qmlp, hardware: {target: none}}  # a config's own hardware keys (false: no hardware stage)
  dwc-b15: {policy: dwc, thermo_bits: 15, tasks: [Hopper-v5]}  # tasks: this config on these of the tasks only
hardware:                                 # optional: after training, per circuit run
  target: ecp5-25k                        # compile + Verilator verify, then synthesis (a family such as ecp5: its smallest device that fits; none: no synthesis)
  episodes: 3                             # closed-loop Verilator episodes (default: all evaluation episodes)
  pipeline: max                           # register stages (dwc compile --pipeline); freq: 100 (MHz)
resources:                                # optional
  cpus_per_run: 1                         # Ray CPUs per run, also its torch threads
  gpus_per_run: auto                      # auto: 1 when the cluster has GPUs, else 0; 0.25 packs 4 runs per GPU
  max_retries: 3                          # restarts of a run whose worker died (each resumes)
  seeds_per_run: 1                        # SAC: this many seeds of a config trained together in one worker
                                          # (dwc train --seeds: faster than one process each; same runs)
scale_down:                               # optional: what --scale-down changes, for a quick check of the spec
  tasks: [Hopper-v5]                      # a subset of tasks (default: all)
  seeds: 1                                # and any of steps, options (over every config's), hardware, resources
"""

# keys a spec's scale_down section may override (dwc sweep --scale-down)
SCALE_DOWN_KEYS = {"tasks", "seeds", "steps", "options", "hardware", "resources"}

SPEC_KEYS = {"tasks", "seeds", "steps", "options", "configs", "hardware", "resources", "scale_down"}
# episodes None: the run's evaluation episodes, so float, frozen and hardware returns are over the same ones
HARDWARE_KEYS = {"target": "none", "episodes": None, "pipeline": "max", "freq": DEFAULT_FREQ_MHZ}
RESOURCE_KEYS = {"cpus_per_run": 1, "gpus_per_run": "auto", "max_retries": 3, "seeds_per_run": 1}
# Options that change where and how fast a run goes, not what it computes: not part of a run's identity.
PLACEMENT = {"device", "cuda_graphs", "threads", "checkpoint_every"}
RESULT = "result.json"
ATTEMPTS = "attempts.jsonl"


def identity(cfg: TrainConfig) -> dict:
    """The options that decide what a run computes."""
    return {k: v for k, v in cfg.to_dict().items() if k not in PLACEMENT}


@dataclass
class Job:
    id: str  # TASK/CONFIG/seedS
    task: str
    config: str
    seed: int
    dir: Path
    cfg: TrainConfig
    hardware: dict | None

    @property
    def key(self) -> str:
        """What the run computes (recorded in its result.json)."""
        return hashlib.sha256(json.dumps([identity(self.cfg), self.hardware], sort_keys=True).encode()).hexdigest()[:16]

    def finished(self) -> bool:
        """result.json is there and was computed by this run: the run directory's config (fields added
        to dwc since it was written take their defaults) and the hardware options are the spec's."""
        p = self.dir / RESULT
        if not p.exists():
            return False
        from .rundir import load_config
        try:
            stored = load_config(self.dir / "run")
        except UserError:
            return False
        return json.loads(p.read_text()).get("hardware") == self.hardware and identity(stored) == identity(self.cfg)

    def logged_steps(self) -> int:
        """The last step its metrics.jsonl logged, at most its budget."""
        return min(last_logged_step(self.dir / "run"), self.cfg.steps)

    def payload(self) -> dict:  # what a worker receives: plain data
        return {"id": self.id, "task": self.task, "config": self.config, "seed": self.seed, "dir": str(self.dir),
                "cfg": self.cfg.to_dict(), "hardware": self.hardware, "key": self.key}


@dataclass
class Spec:
    path: Path
    tasks: list[str]
    seeds: list[int]
    configs: dict[str, dict]  # expanded: name -> dwc train options
    hardware: dict[str, dict | None]  # config name -> its hardware stage (None: none)
    resources: dict = field(default_factory=dict)
    scaled_down: bool = False  # loaded with the spec's scale_down section applied
    config_tasks: dict[str, list[str]] = field(default_factory=dict)  # config name -> its tasks, if a subset

    def jobs(self, out: Path) -> list[Job]:
        jobs = []
        # seed-major: the configs of one seed are queued together, so paired comparisons fill in seed by seed
        for task, seed, (name, opts) in itertools.product(self.tasks, self.seeds, self.configs.items()):
            if task not in self.config_tasks.get(name, self.tasks):
                continue
            cfg = config_from_options({**opts, "env": task, "seed": seed}, where=f"option in {self.path}, config {name}:")
            cfg.threads = int(self.resources["cpus_per_run"])
            hw = self.hardware[name] if cfg.actor.policy != "mlp" else None  # a float MLP has no circuit
            jobs.append(Job(f"{task}/{name}/seed{seed}", task, name, seed, seed_dir(out / "runs" / task / name, seed),
                            cfg, hw))
        return jobs


def _expand(name: str, opts: dict) -> dict[str, dict]:
    """A list-valued option makes one config per value (the product over several lists)."""
    lists = [(k, v) for k, v in opts.items() if isinstance(v, list)]
    if not lists:
        return {name: opts}
    out = {}
    for values in itertools.product(*(v for _, v in lists)):
        suffix = "-".join(f"{k.replace('_', '-')}{v}" for (k, _), v in zip(lists, values))
        out[f"{name}-{suffix}"] = {**opts, **{k: v for (k, _), v in zip(lists, values)}}
    return out


def shipped_specs() -> dict[str, Path]:
    """The sweep specs shipped with dwc (configs/ in the repository, dwc.configs in a wheel), by name."""
    from .catalog import shipped_dir
    return {p.stem: p for p in sorted(shipped_dir("configs").glob("*.yaml"))}


def resolve_spec(path: Path) -> Path:
    """``path`` itself, or the shipped spec of that name (``paper`` -> configs/paper.yaml) when no such file
    exists here."""
    path = Path(path)
    if path.exists() or len(path.parts) != 1:
        return path
    specs = shipped_specs()
    return specs.get(path.stem if path.suffix in (".yaml", ".yml") else path.name, path)


def _hardware(hw: dict, where: str) -> dict:
    """HARDWARE_KEYS with ``hw`` over them, checked."""
    from .fpga.synth import target_names
    if unknown := set(hw) - set(HARDWARE_KEYS):
        raise UserError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(HARDWARE_KEYS)}")
    hardware = {**HARDWARE_KEYS, **hw}
    if hardware["target"] != "none" and hardware["target"] not in target_names():
        raise UserError(f"{where}: target {hardware['target']!r}: choose from {', '.join(target_names())} or none")
    if hardware["episodes"] is not None and not (isinstance(hardware["episodes"], int) and hardware["episodes"] >= 1):
        raise UserError(f"{where}: episodes must be an integer >= 1")
    return hardware


def load_spec(path: Path, scale_down: bool = False) -> Spec:
    """Read and check a sweep spec; every problem is one UserError line naming the file. ``scale_down``:
    with the spec's scale_down section applied (fewer tasks, seeds, steps; options over every config's)."""
    import yaml

    path = resolve_spec(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UserError(f"no sweep spec at {path}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)  # where the parser stopped (0-based)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UserError(f"{path} is not valid YAML{at}: {what}") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected a mapping with tasks, seeds, steps, configs")
    if unknown := set(raw) - SPEC_KEYS:
        raise UserError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(SPEC_KEYS))}")
    for k in ("tasks", "seeds", "configs"):
        if k not in raw:
            raise UserError(f"{path}: missing {k!r} (see dwc sweep --help)")

    def mapping(v, what, names: bool = False):
        """A YAML mapping; option names may use - or _ (``names``: keys are names, kept as written)."""
        if not isinstance(v, dict):
            raise UserError(f"{path}: {what} must be a mapping, got {v!r}")
        return {str(k) if names else str(k).replace("-", "_"): x for k, x in v.items()}

    def task_list(v, what):
        tasks = v if isinstance(v, list) else [v]
        if not tasks or not all(isinstance(t, str) for t in tasks):
            raise UserError(f"{path}: {what} must be a list of env ids, got {v!r}")
        return tasks

    tasks = all_tasks = task_list(raw["tasks"], "tasks")  # tasks: after scale_down, a subset
    down = {}
    if scale_down:
        if raw.get("scale_down") is None:
            raise UserError(f"{path} has no scale_down section: --scale-down needs one (see dwc sweep --help)")
        down = mapping(raw["scale_down"], "scale_down")
        if unknown := set(down) - SCALE_DOWN_KEYS:
            raise UserError(f"{path}: scale_down: unknown key(s) {', '.join(sorted(unknown))}; "
                            f"known: {', '.join(sorted(SCALE_DOWN_KEYS))}")
        if "tasks" in down:  # a subset, so the scaled-down spec cannot drift from the full one
            if extra := [t for t in task_list(down["tasks"], "scale_down: tasks") if t not in tasks]:
                raise UserError(f"{path}: scale_down: tasks {', '.join(extra)} not in the spec's tasks")
            tasks = [t for t in tasks if t in down["tasks"]]
        for k in ("seeds", "steps"):
            if k in down:
                raw[k] = down[k]
    seeds = raw["seeds"]
    if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds >= 1:
        seeds = list(range(1, seeds + 1))
    if not (isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds)) or len(set(seeds)) != len(seeds):
        raise UserError(f"{path}: seeds must be a count >= 1 or a list of distinct integers, got {raw['seeds']!r}")
    shared = mapping(raw.get("options") or {}, "options")
    if "steps" in raw:
        shared["steps"] = raw["steps"]
    for k in ("env", "seed"):
        if k in shared:
            raise UserError(f"{path}: options: {k} comes from {k}s, not options")
    scaled = mapping(down.get("options") or {}, "scale_down: options")
    hw_all = mapping(raw["hardware"], "hardware") if raw.get("hardware") is not None else None
    hw_down = mapping(down.get("hardware") or {}, "scale_down: hardware")
    configs, hardware, config_tasks = {}, {}, {}
    for name, opts in mapping(raw["configs"], "configs", names=True).items():
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
            raise UserError(f"{path}: config name {name!r}: use letters, digits and _.+- (it names folders)")
        opts = mapping(opts or {}, f"config {name}")
        hw = opts.pop("hardware", None)  # the config's own hardware keys, over the spec's (false: none)
        only = opts.pop("tasks", None)  # a subset of the spec's tasks (a costly setting only where it is needed)
        if only is not None:
            only = task_list(only, f"config {name}: tasks")
            if extra := [t for t in only if t not in all_tasks]:
                raise UserError(f"{path}: config {name}: tasks {', '.join(extra)} not in the spec's tasks")
        if hw is False or (hw is None and hw_all is None):
            hw = None
        else:
            hw = _hardware({**(hw_all or {}), **mapping(hw or {}, f"config {name}: hardware"), **hw_down},
                           f"{path}: config {name}: hardware" if hw else f"{path}: hardware")
        for n, o in _expand(name, {**shared, **opts}).items():
            if n in configs:
                raise UserError(f"{path}: config {n} defined twice")
            configs[n], hardware[n] = {**o, **scaled}, hw
            if only is not None:
                config_tasks[n] = only
    if not configs:
        raise UserError(f"{path}: configs is empty")
    res = {**RESOURCE_KEYS, **mapping(raw.get("resources") or {}, "resources"),
           **mapping(down.get("resources") or {}, "scale_down: resources")}
    if unknown := set(res) - set(RESOURCE_KEYS):
        raise UserError(f"{path}: resources: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(RESOURCE_KEYS)}")
    if not (isinstance(res["cpus_per_run"], int) and res["cpus_per_run"] >= 1):
        raise UserError(f"{path}: resources: cpus_per_run must be an integer >= 1")
    if res["gpus_per_run"] != "auto" and not (isinstance(res["gpus_per_run"], (int, float)) and res["gpus_per_run"] >= 0):
        raise UserError(f"{path}: resources: gpus_per_run must be auto or a number >= 0")
    if not (isinstance(res["max_retries"], int) and res["max_retries"] >= 0):
        raise UserError(f"{path}: resources: max_retries must be an integer >= 0")
    if not (isinstance(res["seeds_per_run"], int) and res["seeds_per_run"] >= 1):
        raise UserError(f"{path}: resources: seeds_per_run must be an integer >= 1")
    from .rl.envs import check_env_id
    for t in tasks:  # fail before any run starts
        check_env_id(t).close()
    spec = Spec(path, tasks, seeds, configs, hardware, res, scaled_down=scale_down, config_tasks=config_tasks)
    if not spec.jobs(Path(".")):  # builds and validates every run's config
        raise UserError(f"{path}: no runs: no config is given any of the tasks {', '.join(tasks)}")
    return spec


def run_job(job: dict) -> dict:
    """One sweep run, start to result.json; runs in a Ray worker (or anywhere: it is a plain function).
    Returns the result, or {"id", "error"} for a problem a retry would not fix."""
    return run_jobs([job])[0]


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


def run_jobs(jobs: list[dict]) -> list[dict]:
    """Sweep runs that differ only in their seed, start to result.json, as :func:`run_job` runs one; with
    more than one (``resources.seeds_per_run``), their SAC training runs together in this process
    (dwc.rl.multiseed, as dwc train --seeds), then each is evaluated (and built) on its own. A run
    directory is the one it would be alone. Returns one result or {"id", "error"} per run."""
    import contextlib
    import signal
    import threading

    # Ray's cancel (a stopped sweep) raises KeyboardInterrupt here through interrupt_main, which does
    # nothing while SIGINT is ignored: so it is in every worker of a driver started as a background
    # job (`nohup dwc sweep ... &`). The worker blocks SIGINT at the OS, so only the cancel gets in.
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
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
    from .rundir import load_config
    stored = load_config(run).to_dict()
    changed = [k for k, v in cfg.to_dict().items() if stored.get(k) != v and k not in RESUMABLE]
    if changed:
        raise UserError(f"{run} holds a run with other {', '.join(changed)} than the spec; "
                        f"use another sweep folder or delete that run")


def _train_together(starts: list) -> str:
    """Train the seeds of ``starts`` together (dwc train --seeds); the device they trained on."""
    from .rl.multiseed import train_seeds
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
    from .build import build
    from .evaluation import evaluate_run, train_and_evaluate

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
              "policy": cfg.actor.policy, "train_steps": ev["train_steps"], "episodes": ev["episodes"],
              "float_return": ev["mean_return"], "float_returns": ev["returns"],
              "frozen_return": ev["frozen"]["mean_return"] if circuit else None,
              "frozen_returns": ev["frozen"]["returns"] if circuit else None,
              "hardware": job["hardware"], "rtl_return": None, "rtl_equals_frozen": None, "luts": None,
              "lut4_sites": None, "fmax_mhz": None, "ir_luts": None, "comparators": None, "latency_cycles": None}
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
    os.chdir(Path(__file__).resolve().parent.parent)
    try:
        if address:  # a running cluster: it brings its own resources
            ray.init(address=address, logging_level="WARNING", log_to_driver=False)
        else:  # a new local engine for this machine (never a cluster started earlier), gone when the sweep ends
            ray.init(address="local", num_cpus=cpus or os.cpu_count(), include_dashboard=False, logging_level="WARNING",
                     log_to_driver=False, object_store_memory=100 * 2**20)
    except (ConnectionError, RuntimeError, ValueError) as e:
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
          cpus_per_run: int | None = None, longest_first: bool = False) -> dict:
    """Run every unfinished run of the spec on Ray; returns (and writes to SWEEP/sweep.json) the state.
    ``scale_down``: the spec with its scale_down section applied (default folder sweeps/SPEC-NAME-scale-down).
    ``tasks``/``seeds``/``configs``: run only the spec's runs of these (a part now, the rest later, into the
    same folder);
    ``seeds_per_run``, ``cpus_per_run``: over the spec's resources (where runs go and how many threads
    they use, not what they compute);
    ``longest_first``: queue the runs not begun by their training time left, longest first (see _groups)."""
    import shutil

    spec = load_spec(spec_path, scale_down=scale_down)
    spec_path = spec.path  # a shipped spec's name resolved
    now_tasks, now_seeds, now_configs = _part(spec, tasks, seeds, configs)
    if seeds_per_run is not None:
        if seeds_per_run < 1:
            raise UserError(f"--seeds-per-run must be >= 1, got {seeds_per_run}")
        spec.resources["seeds_per_run"] = seeds_per_run
    if cpus_per_run is not None:
        if cpus_per_run < 1:
            raise UserError(f"--cpus-per-run must be >= 1, got {cpus_per_run}")
        spec.resources["cpus_per_run"] = cpus_per_run
    out = Path(out) if out else Path("sweeps") / (spec_path.stem + "-scale-down" * scale_down)
    jobs = spec.jobs(out.resolve())
    unfinished = [j for j in jobs if not j.finished()]
    todo = [j for j in unfinished if j.task in now_tasks and j.seed in now_seeds and j.config in now_configs]
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
            for group in _groups(todo, spec.resources["seeds_per_run"], time_left if longest_first else None):
                for j in group:
                    j.cfg.device = "cuda" if gpus > 0 else "cpu"
                how = dict(num_cpus=spec.resources["cpus_per_run"], num_gpus=gpus, name="+".join(j.id for j in group),
                           max_retries=spec.resources["max_retries"], retry_exceptions=False)
                if len(group) == 1:
                    pending[task.options(**how).remote(group[0].payload())] = group
                else:
                    pending[together.options(**how).remote([j.payload() for j in group])] = group
            _wait(ray, pending, state, out, progress, log, time_left)
        except KeyboardInterrupt:
            # Ray raises KeyboardInterrupt inside each running run, which then checkpoints; give them a moment.
            for ref in pending:
                ray.cancel(ref)
            ray.wait(list(pending), num_returns=len(pending), timeout=30)
            raise
        finally:
            ray.shutdown()
        return state
    finally:
        if lock:
            lock.close()  # explicitly: a traceback kept by the caller would keep the file, and the lock, open


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


class TimeLeft:
    """How long a sweep's training has left, from each run's own training rate (the median of the last
    env-steps/s it logged, charts/SPS) or, before it has trained, the median rate of the other runs of its
    task and config in the sweep folder: a sweep of fast and slow configs has no single rate. The runs'
    groups train in queue order on ``slots`` workers at once, the first ones now. Evaluation and the
    hardware stages are not counted."""

    def __init__(self, jobs: list[Job], slots: int):
        self.slots, self.own = max(1, slots), {}
        for j in jobs:
            self.refresh(j)

    def refresh(self, job: Job) -> None:
        sps = [r["charts/SPS"] for r in tail_records(job.dir / "run", 32768)
               if isinstance(r.get("charts/SPS"), (int, float)) and r["charts/SPS"] > 0]
        if sps:
            self.own[job.id] = (job.task, job.config, statistics.median(sps))

    def rate(self, job: Job) -> float | None:
        if job.id in self.own:
            return self.own[job.id][2]
        alike = [r for t, c, r in self.own.values() if (t, c) == (job.task, job.config)]
        return statistics.median(alike) if alike else None

    def __call__(self, groups: list[list[Job]]) -> tuple[float, int]:
        """Seconds left and how many runs of ``groups`` have no rate to count (none of theirs has trained)."""
        free, unknown = [0.0] * self.slots, 0
        for group in groups:
            rates = [(j, self.rate(j)) for j in group]
            unknown += sum(r is None for _, r in rates)
            i = free.index(min(free))
            free[i] += max(((j.cfg.steps - j.logged_steps()) / r for j, r in rates if r), default=0.0)
        return max(free), unknown

    def text(self, groups: list[list[Job]]) -> str:
        from tqdm import tqdm

        seconds, unknown = self(groups)
        unknown = f" + {unknown} run{'s' * (unknown != 1)} of a config not trained yet" if unknown else ""
        return f"training left about {tqdm.format_interval(seconds)}{unknown}"


def _wait(ray, pending: dict, state: dict, out: Path, progress: bool, log, time_left: TimeLeft) -> None:
    """Until every task of ``pending`` (Ray reference -> its runs) has ended: the progress bar, each
    run's state in SWEEP/sweep.json and a line per finished or failed run."""
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
        f"training rate or its task and config's in this folder (evaluation and hardware stages not counted)")
    t_last, t_line, t0, ended = 0.0, time.monotonic(), time.monotonic(), set()
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=2.0)
        ended |= {j.id for ref in done for j in pending[ref]}
        if time.monotonic() - t_last > 2.0 or done:
            # never backwards (a resumed run's metrics drop back to its checkpoint): a negative rate is no ETA
            bar.n = max(bar.n, sum(j.cfg.steps if j.id in ended else j.logged_steps() for j in jobs))
            left = [g for g in pending.values() if not any(j.id in ended for j in g)]
            bar.set_postfix_str(time_left.text(left), refresh=False)
            bar.refresh()
            t_last = time.monotonic()
            if t_last - t_line >= 60.0:
                for g in left[:time_left.slots]:  # those training now: their rates move
                    for j in g:
                        time_left.refresh(j)
                if progress and not tty:
                    log(tqdm.format_meter(bar.n, bar.total, t_last - t0, prefix=f"sweep ({len(jobs)} runs)",
                                          unit="step", initial=initial, bar_format=fmt,
                                          postfix=time_left.text(left)))
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
                    say(f"done {j.id}: return {r['float_return']:.1f}{frozen}{rtl} "
                              f"({r['train_steps']} steps, {r['seconds']:.0f} s)")
            write_json(out / "sweep.json", state)
    bar.close()
