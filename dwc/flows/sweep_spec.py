"""A sweep spec: the YAML file, the runs it expands to (one :class:`Job` per task, config and seed) and
the training they have left. ``dwc sweep`` runs the jobs; ``dwc report`` reads their folders.

Layout of a sweep folder: see :mod:`dwc.flows.sweep`.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from dwc.core.config import TrainConfig, config_from_options
from dwc.core.defaults import DEFAULT_FREQ_MHZ, PIPELINE
from dwc.core.errors import OptionError, UserError
from dwc.core.rundir import last_logged_step, tail_records
from dwc.core.seeds import seed_dir

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
  student: {algo: distill, teacher: mlp, steps: 20000, policy: dwc}  # teacher: a config here; each run distils
                                          # that config's run of its task and seed (trained first), or a
                                          # folder: teacher: old-sweep/runs/{task}/mlp/seed{seed}/run
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
HARDWARE_KEYS = {"target": "none", "episodes": None, "pipeline": PIPELINE, "freq": DEFAULT_FREQ_MHZ}
RESOURCE_KEYS = {"cpus_per_run": 1, "gpus_per_run": "auto", "max_retries": 3, "seeds_per_run": 1}
# Options that change where and how fast a run goes, not what it computes: not part of a run's identity.
PLACEMENT = {"device", "cuda_graphs", "threads", "checkpoint_every"}
RESULT = "result.json"
ATTEMPTS = "attempts.jsonl"


def identity(cfg: TrainConfig, teacher: str | None = None) -> dict:
    """The options that decide what a run computes. ``teacher``: a distillation's teacher as the spec names
    it (a folder, or runs/TASK/CONFIG/seedS/run in the sweep); it stands for the resolved path it ends, so a
    sweep folder or repository copied elsewhere keeps its finished runs."""
    d = {k: v for k, v in cfg.to_dict().items() if k not in PLACEMENT}
    named = Path(teacher).parts if teacher else ()
    if named and Path(d["distill"]["teacher"]).parts[-len(named):] == named:
        d["distill"] = {**d["distill"], "teacher": teacher}
    return d


@dataclass
class Job:
    id: str  # TASK/CONFIG/seedS
    task: str
    config: str
    seed: int
    dir: Path
    cfg: TrainConfig
    hardware: dict | None
    teacher: str | None = None  # a distillation's teacher as the spec names it (see identity)
    after: str | None = None  # the sweep run (id) it distils, which must finish first

    @property
    def key(self) -> str:
        """What the run computes (recorded in its result.json)."""
        return hashlib.sha256(json.dumps([identity(self.cfg, self.teacher), self.hardware], sort_keys=True)
                              .encode()).hexdigest()[:16]

    def finished(self) -> bool:
        """result.json is there and was computed by this run: the run directory's config (fields added
        to dwc since it was written take their defaults) and the hardware options are the spec's."""
        p = self.dir / RESULT
        if not p.exists():
            return False
        from dwc.core.rundir import load_config
        try:
            stored = load_config(self.dir / "run")
        except UserError:
            return False
        return (json.loads(p.read_text()).get("hardware") == self.hardware
                and identity(stored, self.teacher) == identity(self.cfg, self.teacher))

    def logged_steps(self) -> int:
        """The last step its metrics.jsonl logged, at most its budget."""
        return min(last_logged_step(self.dir / "run"), self.cfg.steps)

    def payload(self) -> dict:  # what a worker receives: plain data
        return {"id": self.id, "task": self.task, "config": self.config, "seed": self.seed, "dir": str(self.dir),
                "cfg": self.cfg.to_dict(), "hardware": self.hardware, "key": self.key, "after": self.after}


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
    teachers: dict[str, str] = field(default_factory=dict)  # config name -> its teacher: a config, or a folder

    def jobs(self, out: Path) -> list[Job]:
        jobs = []
        # seed-major: the configs of one seed are queued together, so paired comparisons fill in seed by seed
        for task, seed, (name, opts) in itertools.product(self.tasks, self.seeds, self.configs.items()):
            if task not in self.config_tasks.get(name, self.tasks):
                continue
            teacher, after, teacher_env = self.teachers.get(name), None, None
            if teacher in self.configs:  # another config's run of this task and seed, trained first
                after = f"{task}/{teacher}/seed{seed}"
                teacher, teacher_env = f"runs/{after}/run", task
                opts = {**opts, "teacher": str(out / teacher)}
            elif teacher:  # a folder, its {task} and {seed} filled in, from where the sweep starts
                teacher = teacher.format(task=task, seed=seed)
                opts = {**opts, "teacher": str(Path(teacher).resolve())}
            cfg = config_from_options({**opts, "env": task, "seed": seed}, where=f"option in {self.path}, config {name}:",
                                      teacher_env=teacher_env)
            cfg.threads = int(self.resources["cpus_per_run"])
            hw = self.hardware[name] if cfg.actor.policy != "mlp" else None  # a float MLP has no circuit
            jobs.append(Job(f"{task}/{name}/seed{seed}", task, name, seed, seed_dir(out / "runs" / task / name, seed),
                            cfg, hw, teacher, after))
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
    from dwc.core.catalog import shipped_dir
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
    from dwc.fpga.devices import target_names
    if unknown := set(hw) - set(HARDWARE_KEYS):
        raise UserError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(HARDWARE_KEYS)}")
    hardware = {**HARDWARE_KEYS, **hw}
    if hardware["target"] != "none" and hardware["target"] not in target_names():
        raise UserError(f"{where}: target {hardware['target']!r}: choose from {', '.join(target_names())} or none")
    if hardware["episodes"] is not None and not (isinstance(hardware["episodes"], int) and hardware["episodes"] >= 1):
        raise UserError(f"{where}: episodes must be an integer >= 1")
    return hardware


def _teachers(path: Path, configs: dict[str, dict], config_tasks: dict[str, list[str]],
              tasks: list[str]) -> dict[str, str]:
    """Each distillation config's teacher, taken out of its options (Spec.jobs sets each run's): another
    config of the spec, whose run of the same task and seed it distils, or a folder whose {task} and
    {seed} Spec.jobs fills in; checked."""
    teachers = {}
    for name, opts in configs.items():
        teacher = opts.get("teacher")
        if not isinstance(teacher, str) or not teacher:
            continue  # config_from_options names what is wrong
        if opts.get("algo") != "distill":
            raise UserError(f"{path}: config {name}: teacher {teacher} applies to algo: distill")
        if teacher in configs:
            if configs[teacher].get("algo", "sac") == "distill":
                raise UserError(f"{path}: config {name}: teacher {teacher} must be a config trained by RL, not distilled")
            if missing := [t for t in config_tasks.get(name, tasks) if t not in config_tasks.get(teacher, tasks)]:
                raise UserError(f"{path}: config {name}: its teacher {teacher} has no runs on {', '.join(missing)}")
        else:
            try:
                teacher.format(task="", seed=0)
            except (KeyError, IndexError, ValueError) as e:
                raise UserError(f"{path}: config {name}: teacher {teacher!r}: a folder may hold {{task}} and {{seed}} "
                                f"only ({type(e).__name__}: {e})") from None
        teachers[name] = opts.pop("teacher")
    return teachers


def load_spec(path: Path, scale_down: bool = False) -> Spec:
    """Read and check a sweep spec; every problem is one UserError line naming the file. ``scale_down``:
    with the spec's scale_down section applied (fewer tasks, seeds, steps; options over every config's)."""
    path = resolve_spec(path)
    raw = _read_yaml(path)
    tasks = all_tasks = _task_list(path, raw["tasks"], "tasks")  # tasks: after scale_down, a subset
    down = {}
    if scale_down:
        down, tasks = _scale_down(path, raw, tasks)
    seeds = _seeds(path, raw)
    shared, scaled = _shared_options(path, raw, down)
    configs, hardware, config_tasks = _configs(path, raw, down, shared, scaled, all_tasks)
    teachers = _teachers(path, configs, config_tasks, all_tasks)
    res = _resources(path, raw, down)
    from dwc.train.envs import check_env_id
    for t in tasks:  # fail before any run starts
        check_env_id(t).close()
    spec = Spec(path, tasks, seeds, configs, hardware, res, scaled_down=scale_down, config_tasks=config_tasks,
                teachers=teachers)
    if not spec.jobs(Path(".")):  # builds and validates every run's config
        raise UserError(f"{path}: no runs: no config is given any of the tasks {', '.join(tasks)}")
    return spec


def _read_yaml(path: Path) -> dict:
    """The spec file's mapping, its top-level keys checked."""
    import yaml

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
    return raw


def _mapping(path: Path, v, what: str, names: bool = False) -> dict:
    """A YAML mapping; option names may use - or _ (``names``: keys are names, kept as written)."""
    if not isinstance(v, dict):
        raise UserError(f"{path}: {what} must be a mapping, got {v!r}")
    return {str(k) if names else str(k).replace("-", "_"): x for k, x in v.items()}


def _task_list(path: Path, v, what: str) -> list[str]:
    tasks = v if isinstance(v, list) else [v]
    if not tasks or not all(isinstance(t, str) for t in tasks):
        raise UserError(f"{path}: {what} must be a list of env ids, got {v!r}")
    return tasks


def _scale_down(path: Path, raw: dict, tasks: list[str]) -> tuple[dict, list[str]]:
    """The scale_down section, checked, and the tasks it keeps; its seeds and steps replace ``raw``'s."""
    if raw.get("scale_down") is None:
        raise OptionError("scale_down", f": {path} has no scale_down section to apply (see dwc sweep --help)")
    down = _mapping(path, raw["scale_down"], "scale_down")
    if unknown := set(down) - SCALE_DOWN_KEYS:
        raise UserError(f"{path}: scale_down: unknown key(s) {', '.join(sorted(unknown))}; "
                        f"known: {', '.join(sorted(SCALE_DOWN_KEYS))}")
    if "tasks" in down:  # a subset, so the scaled-down spec cannot drift from the full one
        if extra := [t for t in _task_list(path, down["tasks"], "scale_down: tasks") if t not in tasks]:
            raise UserError(f"{path}: scale_down: tasks {', '.join(extra)} not in the spec's tasks")
        tasks = [t for t in tasks if t in down["tasks"]]
    for k in ("seeds", "steps"):
        if k in down:
            raw[k] = down[k]
    return down, tasks


def _seeds(path: Path, raw: dict) -> list[int]:
    seeds = raw["seeds"]
    if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds >= 1:
        seeds = list(range(1, seeds + 1))
    if not (isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds)) or len(set(seeds)) != len(seeds):
        raise UserError(f"{path}: seeds must be a count >= 1 or a list of distinct integers, got {raw['seeds']!r}")
    return seeds


def _shared_options(path: Path, raw: dict, down: dict) -> tuple[dict, dict]:
    """The options every config shares (the spec's steps among them), and scale_down's, which go over
    each config's own."""
    shared = _mapping(path, raw.get("options") or {}, "options")
    if "steps" in raw:
        shared["steps"] = raw["steps"]
    for k in ("env", "seed"):
        if k in shared:
            raise UserError(f"{path}: options: {k} comes from {k}s, not options")
    scaled = _mapping(path, down.get("options") or {}, "scale_down: options")
    if "steps" in down:  # over a config's own steps too (a distillation's)
        scaled.setdefault("steps", down["steps"])
    return shared, scaled


def _configs(path: Path, raw: dict, down: dict, shared: dict, scaled: dict,
             all_tasks: list[str]) -> tuple[dict[str, dict], dict[str, dict | None], dict[str, list[str]]]:
    """The configs, list-valued options expanded: (name -> options, name -> its hardware stage or
    None, name -> its tasks where a subset)."""
    hw_all = _mapping(path, raw["hardware"], "hardware") if raw.get("hardware") is not None else None
    hw_down = _mapping(path, down.get("hardware") or {}, "scale_down: hardware")
    configs, hardware, config_tasks = {}, {}, {}
    for name, opts in _mapping(path, raw["configs"], "configs", names=True).items():
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
            raise UserError(f"{path}: config name {name!r}: use letters, digits and _.+- (it names folders)")
        opts = _mapping(path, opts or {}, f"config {name}")
        hw = opts.pop("hardware", None)  # the config's own hardware keys, over the spec's (false: none)
        only = opts.pop("tasks", None)  # a subset of the spec's tasks (a costly setting only where it is needed)
        if only is not None:
            only = _task_list(path, only, f"config {name}: tasks")
            if extra := [t for t in only if t not in all_tasks]:
                raise UserError(f"{path}: config {name}: tasks {', '.join(extra)} not in the spec's tasks")
        if hw is False or (hw is None and hw_all is None):
            hw = None
        else:
            hw = _hardware({**(hw_all or {}), **_mapping(path, hw or {}, f"config {name}: hardware"), **hw_down},
                           f"{path}: config {name}: hardware" if hw else f"{path}: hardware")
        for n, o in _expand(name, {**shared, **opts}).items():
            if n in configs:
                raise UserError(f"{path}: config {n} defined twice")
            configs[n], hardware[n] = {**o, **scaled}, hw
            if only is not None:
                config_tasks[n] = only
    if not configs:
        raise UserError(f"{path}: configs is empty")
    return configs, hardware, config_tasks


def _resources(path: Path, raw: dict, down: dict) -> dict:
    """RESOURCE_KEYS with the spec's and scale_down's over them, checked."""
    res = {**RESOURCE_KEYS, **_mapping(path, raw.get("resources") or {}, "resources"),
           **_mapping(path, down.get("resources") or {}, "scale_down: resources")}
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
    return res


class TimeLeft:
    """How long a sweep's training has left, from each run's own training rate (the median of the last
    env-steps/s it logged after SAC's random warm-up, charts/SPS) or, before it has trained, the median
    rate of the other runs of its task and config in the sweep folder: a sweep of fast and slow configs
    has no single rate. The runs'
    groups train in queue order on ``slots`` workers at once, the first ones now. Evaluation and the
    hardware stages are not counted."""

    def __init__(self, jobs: list[Job], slots: int):
        self.slots, self.own = max(1, slots), {}
        for j in jobs:
            self.refresh(j)

    def refresh(self, job: Job) -> None:
        # SAC's first learning_starts steps take random actions and no updates, 50-100x faster than the rest
        # (a run no longer than that is all warm-up: then that is its rate)
        sac = job.cfg.sac
        warm = sac.learning_starts if job.cfg.algo == "sac" and sac.learning_starts < job.cfg.steps else 0
        sps = [r["charts/SPS"] for r in tail_records(job.dir / "run", 32768)
               if isinstance(r.get("charts/SPS"), (int, float)) and r["charts/SPS"] > 0 and r.get("step", 0) > warm]
        if sps:
            self.own[job.id] = (job.task, job.config, statistics.median(sps))

    def rate(self, job: Job) -> float | None:
        if job.id in self.own:
            return self.own[job.id][2]
        alike = [r for t, c, r in self.own.values() if (t, c) == (job.task, job.config)]
        return statistics.median(alike) if alike else None

    def __call__(self, groups: list[list[Job]], logged: dict[str, int] | None = None) -> tuple[float, int]:
        """Seconds left and how many runs of ``groups`` have no rate to count (none of theirs has trained).
        ``logged``: run id -> steps logged, where the caller has just read them (else read here)."""
        free, unknown = [0.0] * self.slots, 0
        done = (lambda j: logged[j.id]) if logged is not None else (lambda j: j.logged_steps())
        for group in groups:
            rates = [(j, self.rate(j)) for j in group]
            unknown += sum(r is None for _, r in rates)
            i = free.index(min(free))
            free[i] += max(((j.cfg.steps - done(j)) / r for j, r in rates if r), default=0.0)
        return max(free), unknown

    def text(self, groups: list[list[Job]], logged: dict[str, int] | None = None) -> str:
        from tqdm import tqdm

        seconds, unknown = self(groups, logged)
        unknown = f" + {unknown} run{'s' * (unknown != 1)} of a config not trained yet" if unknown else ""
        return f"training left about {tqdm.format_interval(seconds)}{unknown}"
