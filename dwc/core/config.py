"""Training configuration: one dataclass tree, saved as the run directory's ``config.json``.
Plain data, no torch: the CLI, sweeps and reports read it without importing the models."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dwc.core.defaults import EVAL_EPISODES
from dwc.core.errors import OptionError, UserError
from dwc.core.targets import NATIVE_LUT_INPUTS, family_of


@dataclass
class ActorConfig:
    policy: str = "dwc"  # dwc | gates | qmlp | mlp
    # DWC (defaults: the published configuration)
    layers: int = 2
    width: int = 1024
    last_width: int = 0  # the last layer's LUTs, which the action popcounts read (0 = width)
    lut_inputs: int = 6
    thermo_bits: int = 63
    wiring: str = "learnable"  # learnable | random
    # update of learnable wiring scores: dense (every candidate, as published) | sparse (near-max only)
    wiring_optim: str = "dense"
    # sparse update: every this many wiring steps the dense one instead, so far candidates still move (0: never)
    wiring_refresh: int = 0
    tau: float = 1e-3
    groupsum_eps: float = 1e-3
    # float parts
    hidden: int = 256  # MLP actor width (2 hidden layers); a quantised MLP's unless given: QMLP_HIDDEN
    # quantised MLP (policy="qmlp"; layers = hidden layers, thermo_bits = input thresholds per dim)
    weight_bits: int = 4
    act_bits: int = 4
    out_bits: int = 8
    fan_in: int = 0  # qmlp: inputs per neuron (LogicNets-style sparsity); 0 = dense
    # resource budgets the frozen circuit meets (0 = none): LUTs in the LUT layers (sizes the width),
    # distinct thermometer thresholds the first layer reads (comparators in hardware)
    max_luts: int = 0
    max_comparators: int = 0
    logstd_hidden: int = 64  # the DWC's training-only log-std network

    def to_dict(self) -> dict:
        return asdict(self)

    def layer_widths(self) -> list[int]:
        """LUTs per layer as configured (the model rounds the last down to whole action groups)."""
        return [self.width] * (self.layers - 1) + [self.last_width or self.width]


# A quantised MLP's hidden width unless --hidden is given. Chosen by measured return and build time: the shipped
# 2 x 16 (policies/inverted-pendulum-v5-qmlp16) returns 1000.0 of 1000 on 10 InvertedPendulum episodes and
# compiles and verifies at pipeline max in about a minute (dwc build --from it --target none; results/qmlp-cost),
# where 2 x 64 is already 1,612 constant multipliers whose synthesis had not finished after 10 minutes
# (results/qmlp-2x64). Wider on request (--hidden).
QMLP_HIDDEN = 16


def layer_shape(layers: int, width: int, last_width: int = 0) -> str:
    """How reports name the LUT layers: '2 x 1024', or '256 + 129' when the last one differs."""
    widths = [width] * (layers - 1) + [last_width or width]
    return f"{layers} x {width}" if len(set(widths)) == 1 else " + ".join(map(str, widths))


@dataclass
class SACConfig:
    """Defaults: the SAC authors' hyper-parameters as Stable-Baselines3 ships them (one learning rate,
    3e-4, for actor, critics and entropy coefficient; that coefficient tuned from 1.0; the actor stepped
    with every critic step; critics reading the raw observation), with the paper's 5k random steps.
    The paper's CleanRL-style protocol (critic lr 1e-3, actor every 2nd step) left the MLP baseline far
    behind a stock SAC on Ant-v5; results/referee measures both. configs/paper.yaml pins the paper's."""
    buffer_size: int = 1_000_000
    gamma: float = 0.99
    tau: float = 0.005
    batch_size: int = 256
    learning_starts: int = 5_000
    actor_lr: float = 3e-4
    q_lr: float = 3e-4
    alpha_lr: float = 3e-4
    adam_eps: float = 1e-8
    policy_frequency: int = 1  # actor and alpha steps every this many critic steps, this many at once
    autotune: bool = True
    alpha: float = 1.0  # initial (autotune) or fixed entropy coefficient
    q_hidden: int = 256
    utd: float = 1.0  # gradient updates per env step
    # what the critics read: the raw observation (CleanRL's and SB3's SAC) or the actor's normalised one
    # ("normalized", as dwc did before); the actor normalises its own input either way (a DWC's thresholds
    # need it)
    critic_input: str = "raw"
    # the critics: "sac" (twin Q with Polyak-averaged target copies) or "crossq" (Bhatt et al. 2024: batch
    # renormalised twin Q, no target copies, the current and next state-actions in one batch); the actor
    # is the same either way, so a circuit's structure does not depend on it. --critic crossq brings its
    # own defaults (CROSSQ) for the options not given.
    critic: str = "sac"
    policy_delay: int = 1  # one actor and alpha step every this many critic steps (TD3's and CrossQ's delay)
    adam_beta1: float = 0.9  # the actor's and critics' Adam beta1


# --critic crossq: sb3-contrib's CrossQ defaults (its referee), for the options a run does not give
CROSSQ = {"actor_lr": 1e-3, "q_lr": 1e-3, "alpha_lr": 1e-3, "adam_beta1": 0.5, "policy_delay": 3, "q_hidden": 1024}


def use_crossq(sac: SACConfig, given=()) -> None:
    """CrossQ's critics, with CROSSQ's defaults for the options not in ``given``."""
    sac.critic = "crossq"
    for name, value in CROSSQ.items():
        if name not in given:
            setattr(sac, name, value)


@dataclass
class PPOConfig:
    """CleanRL continuous-action PPO defaults, for cheap many-env training."""
    rollout_steps: int = 2048  # per env
    lr: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    minibatches: int = 32
    epochs: int = 10
    clip: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    v_hidden: int = 64
    anneal_lr: bool = True
    # rewards divided by the running std of the discounted return (CleanRL's NormalizeReward): value
    # targets near unit scale whatever the task's reward scale, so one vf_coef and grad clip fit all
    norm_reward: bool = True


@dataclass
class DistillConfig:
    """DAgger distillation from a trained policy (``--algo distill``, :mod:`dwc.train.distill`)."""
    teacher: str = ""  # run or policy folder whose deterministic actions are the labels ("": RUN/teacher, trained first)
    teacher_steps: int = 300_000  # SAC steps of the float MLP teacher a run without --teacher trains first
    dagger_steps: int = 1000  # env steps per iteration (the first rolled out by the teacher)
    updates_per_step: float = 2.0  # gradient steps (minibatches of --batch-size) per collected env step
    distill_lr: float = 1e-2
    dagger_noise: float = 0.0  # std of Gaussian noise on the rolled-out action, in half action ranges (DART)


@dataclass
class TrainConfig:
    env: str = "InvertedPendulum-v5"
    algo: str = "sac"  # sac | ppo | distill
    steps: int = 100_000
    seed: int = 1
    device: str = "auto"
    cuda_graphs: bool = True  # SAC on CUDA: replay each update as a CUDA graph (actors that allow it)
    precision: str = "auto"  # the large training matmuls: auto | float32 | bfloat16 (see dwc.train.common.resolve_precision)
    num_envs: int = 1
    threads: int = 1
    checkpoint_every: int = 10_000
    eval_episodes: int = EVAL_EPISODES
    target: str = ""  # FPGA family trained for (ecp5, ice40, xc7): sets the LUT arity; "" = none
    actor: ActorConfig = field(default_factory=ActorConfig)
    sac: SACConfig = field(default_factory=SACConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        """The config a run directory saved. A field it lacks takes the value it had before the field
        existed (:data:`BEFORE_FIELD`), not today's default: a run resumes as it was trained."""
        nested = {"actor": ActorConfig, "sac": SACConfig, "ppo": PPOConfig, "distill": DistillConfig}
        kwargs = {}
        names = {f.name for f in dataclasses.fields(cls)}
        for k, v in d.items():
            if k not in names:
                raise ValueError(f"unknown config field {k!r}")
            if k in nested:
                v = {**BEFORE_FIELD.get(k, {}), **v}
            kwargs[k] = nested[k](**v) if k in nested else v
        return cls(**kwargs)


# Fields added after runs were saved without them -> the behaviour those runs were trained with
BEFORE_FIELD = {"sac": {"critic_input": "normalized"}}


CONFIG = "config.json"  # a run directory's TrainConfig
# Evaluation episodes (dwc eval, verify, hil, build) start at the training seed + this, so they
# never replay a training episode and every command evaluates the same episodes by default.
EVAL_SEED_OFFSET = 10_000


def load_config(run: Path) -> TrainConfig:
    """A run's config.json; a file without ``env``, with a field of the wrong type, or not JSON at all is
    one line naming the field (a default silently put in its place would load another task's policy)."""
    run = Path(run)
    try:
        d = json.loads((run / CONFIG).read_text())
        if not isinstance(d, dict) or "env" not in d:
            raise ValueError("it names no env (the task the policy was trained on)")
        _check_types(d, TrainConfig())
        return TrainConfig.from_dict(d)
    except FileNotFoundError:
        if not run.exists():
            raise UserError(f"{run} does not exist") from None
        raise UserError(f"{run} is not a dwc run directory (no {CONFIG})") from None
    except (ValueError, TypeError) as e:
        raise UserError(f"{run / CONFIG} is invalid: {e}") from None


def _check_types(d: dict, defaults, where: str = "") -> None:
    """Each field of ``d`` of its default's type (an int where a float is due is fine), sections alike."""
    for k, v in d.items():
        if not hasattr(defaults, k):
            continue  # from_dict names unknown fields
        want = getattr(defaults, k)
        if dataclasses.is_dataclass(want):
            if not isinstance(v, dict):
                raise ValueError(f"{where}{k}: expected a section (an object), got {v!r}")
            _check_types(v, want, f"{where}{k}.")
        elif not (type(v) is type(want) or (type(want) is float and type(v) is int)):
            raise ValueError(f"{where}{k}: expected {type(want).__name__}, got {v!r}")


# dwc train's options (flag names without "--", dashes as underscores) -> the config section holding them.
# The CLI and sweep specs both set a TrainConfig through this one table.
OPTIONS = {
    **{k: None for k in ("env", "algo", "steps", "seed", "device", "cuda_graphs", "precision", "num_envs", "threads",
                         "checkpoint_every", "eval_episodes", "target")},
    **{k: "actor" for k in ("policy", "layers", "width", "last_width", "lut_inputs", "thermo_bits", "wiring",
                            "wiring_optim", "wiring_refresh", "hidden", "weight_bits", "act_bits", "out_bits", "fan_in", "max_luts", "max_comparators")},
    **{k: "sac" for k in ("learning_starts", "batch_size", "buffer_size", "actor_lr", "q_lr", "alpha_lr", "adam_eps",
                          "policy_frequency", "alpha", "critic_input", "critic", "q_hidden", "policy_delay",
                          "adam_beta1")},
    **{k: "ppo" for k in ("rollout_steps",)},
    **{k: "distill" for k in ("teacher", "teacher_steps", "dagger_steps", "updates_per_step", "distill_lr",
                              "dagger_noise")},
}
# Options whose dwc train flag is not the field's name
FLAGS = {"target": "--lut-family"}
# What may change when resuming: how long and where to run, not what is trained.
RESUMABLE = {"steps", "device", "cuda_graphs", "precision", "threads", "checkpoint_every", "eval_episodes"}


def option_value(cfg: TrainConfig, name: str):
    section = OPTIONS[name]
    return getattr(getattr(cfg, section) if section else cfg, name)


def resume_config(stored: TrainConfig, given: dict, flags: dict | None = None) -> TrainConfig:
    """The stored run's config with the RESUMABLE options of ``given`` applied. Any other option of
    ``given`` must equal the stored value: a resumed run keeps what it trains; each conflict is named
    (as ``flags`` spells the option, if it renames any)."""
    flags = {**FLAGS, **(flags or {})}
    conflicts = [f"{flags.get(k, '--' + k.replace('_', '-'))} {v} (the run has {option_value(stored, k)})"
                 for k, v in given.items()
                 if k not in RESUMABLE and option_value(stored, k) != v]
    if conflicts:
        raise UserError(f"the run in place was trained with other options: {'; '.join(conflicts)}; a resumed run "
                        f"keeps what it trains (use another output folder for a new run)")
    cfg = TrainConfig.from_dict(stored.to_dict())
    for k in RESUMABLE & given.keys():
        setattr(cfg, k, given[k])
    return cfg


def train_command(cfg: TrainConfig, out: Path, resume: bool = False) -> list[str]:
    """The dwc train command line equivalent to a run trained by dwc sweep or dwc build (recorded in
    its commands.txt; ``resume`` for a leg that continued the run)."""
    default = TrainConfig()
    words = ["dwc", "train"]
    for name in OPTIONS:
        v = option_value(cfg, name)
        if name == "cuda_graphs":
            words += [] if v else ["--no-cuda-graphs"]
        elif v != option_value(default, name) or name in ("env", "policy", "algo", "steps", "seed"):
            words += [FLAGS.get(name, f"--{name.replace('_', '-')}"), str(v)]
    return words + ["--out", str(out)] + ["--resume"] * resume + ["--no-progress"]


def config_from_options(options: dict, where: str = "option", teacher_env: str | None = None) -> TrainConfig:
    """A validated TrainConfig from dwc train's options; ``where`` names their source in errors.
    ``teacher_env``: the task of a --teacher that is not trained yet (a sweep's teacher run), else it is
    read from the teacher's config."""
    cfg = TrainConfig()
    for name, value in options.items():
        if name not in OPTIONS:
            raise UserError(f"unknown {where} {name!r}; known options: {', '.join(sorted(OPTIONS))}")
        section = getattr(cfg, OPTIONS[name]) if OPTIONS[name] else cfg
        default = getattr(section, name)
        if type(default) is float and type(value) is int:
            value = float(value)
        if type(value) is not type(default):
            raise UserError(f"{where} {name}: expected {type(default).__name__}, got {value!r}")
        setattr(section, name, value)
    if cfg.target:  # the target's native LUT: one IR LUT is one LUT of the fabric
        family = family_of(cfg.target)
        if family is None:
            raise OptionError("target", f" {cfg.target!r}: choose from {', '.join(NATIVE_LUT_INPUTS)}")
        cfg.target, native = family, NATIVE_LUT_INPUTS[family]
        if options.get("lut_inputs", native) != native and cfg.actor.policy == "dwc":
            raise OptionError("target", f" {family} has {native}-input LUTs; drop --lut-inputs {options['lut_inputs']} "
                            f"(or drop --lut-family to train another arity)")
        if cfg.actor.policy == "dwc":
            cfg.actor.lut_inputs = native
    if cfg.algo == "distill" and cfg.distill.teacher.endswith(".onnx"):  # a model file names no task
        if not Path(cfg.distill.teacher).is_file():
            raise OptionError("teacher", f" {cfg.distill.teacher} does not exist")
        if "env" not in options:
            raise OptionError("teacher", f" {cfg.distill.teacher}: give --env, the task the model acts in")
    elif cfg.algo == "distill" and cfg.distill.teacher:  # the student learns the teacher's task
        task = teacher_env or load_config(cfg.distill.teacher).env
        if "env" in options and cfg.env != task:
            raise OptionError("teacher", f" {cfg.distill.teacher} was trained on {task}, not --env {cfg.env}")
        cfg.env = task
    if cfg.sac.critic == "crossq":
        use_crossq(cfg.sac, options)
    a = cfg.actor
    if a.max_luts and "width" not in options:  # the budget sizes the layers (those --last-width leaves)
        a.width = (max(1, (a.max_luts - a.last_width) // (a.layers - 1)) if a.last_width and a.layers > 1
                   else max(1, a.max_luts // a.layers))
    if cfg.actor.policy == "gates":  # a gate is a 2-input LUT on a fixed random wiring (as published)
        if options.get("lut_inputs", 2) != 2 or options.get("wiring", "random") != "random":
            raise OptionError("policy", " gates: gates have 2 inputs and a random wiring; drop --lut-inputs / --wiring")
        cfg.actor.lut_inputs, cfg.actor.wiring = 2, "random"
    if a.policy == "qmlp" and "hidden" not in options:
        a.hidden = QMLP_HIDDEN  # a circuit that builds in minutes (see QMLP_HIDDEN)
    validate(cfg)
    return cfg


def validate(cfg: TrainConfig) -> None:
    a = cfg.actor
    checks = [
        (cfg.algo in ("sac", "ppo", "distill"), f"--algo must be sac, ppo or distill, got {cfg.algo!r}"),
        (cfg.distill.teacher_steps >= 1, f"--teacher-steps must be >= 1, got {cfg.distill.teacher_steps}"),
        (cfg.distill.dagger_steps >= 1, f"--dagger-steps must be >= 1, got {cfg.distill.dagger_steps}"),
        (cfg.distill.updates_per_step > 0, f"--updates-per-step must be > 0, got {cfg.distill.updates_per_step}"),
        (cfg.distill.distill_lr > 0, f"--distill-lr must be > 0, got {cfg.distill.distill_lr}"),
        (0 <= cfg.distill.dagger_noise <= 1, f"--dagger-noise must be in [0, 1], got {cfg.distill.dagger_noise}"),
        (a.policy in ("dwc", "gates", "qmlp", "mlp"), f"--policy must be dwc, gates, qmlp or mlp, got {a.policy!r}"),
        (a.wiring in ("learnable", "random"), f"--wiring must be learnable or random, got {a.wiring!r}"),
        (a.wiring_optim in ("dense", "sparse"), f"--wiring-optim must be dense or sparse, got {a.wiring_optim!r}"),
        (a.wiring_optim == "dense" or (a.policy == "dwc" and a.wiring == "learnable" and cfg.algo in ("sac", "distill")),
         "--wiring-optim sparse applies to a learnable wiring (--policy dwc --wiring learnable) trained by "
         "--algo sac or distill"),
        (a.wiring_refresh >= 0, f"--wiring-refresh must be >= 0, got {a.wiring_refresh}"),
        (a.wiring_refresh == 0 or a.wiring_optim == "sparse", "--wiring-refresh applies to --wiring-optim sparse"),
        (cfg.steps >= 1, f"--steps must be >= 1, got {cfg.steps}"),
        # refused, not warned: a run with no update is a random policy, and a warning scrolls away in a long job
        (cfg.algo != "sac" or cfg.steps > cfg.sac.learning_starts,
         f"--steps {cfg.steps} is not above --learning-starts {cfg.sac.learning_starts}: SAC would only take random "
         f"actions and never update the policy; give more --steps or a lower --learning-starts"),
        (cfg.algo != "distill" or cfg.distill.teacher or cfg.distill.teacher_steps > cfg.sac.learning_starts,
         f"--teacher-steps {cfg.distill.teacher_steps} is not above --learning-starts {cfg.sac.learning_starts}: the "
         f"teacher's SAC would never update; give more --teacher-steps or a lower --learning-starts"),
        (min(cfg.sac.actor_lr, cfg.sac.q_lr, cfg.sac.alpha_lr, cfg.sac.adam_eps, cfg.sac.alpha) > 0,
         "--actor-lr, --q-lr, --alpha-lr, --adam-eps and --alpha must be > 0"),
        (cfg.sac.policy_frequency >= 1, f"--policy-frequency must be >= 1, got {cfg.sac.policy_frequency}"),
        (cfg.sac.policy_delay >= 1, f"--policy-delay must be >= 1, got {cfg.sac.policy_delay}"),
        (cfg.sac.policy_delay == 1 or cfg.sac.policy_frequency == 1,
         "give --policy-delay (one actor step every D critic steps) or --policy-frequency (K actor steps every K "
         "critic steps), not both"),
        (0 <= cfg.sac.adam_beta1 < 1, f"--adam-beta1 must be in [0, 1), got {cfg.sac.adam_beta1}"),
        (cfg.sac.q_hidden >= 1, f"--q-hidden must be >= 1, got {cfg.sac.q_hidden}"),
        (cfg.sac.critic in ("sac", "crossq"), f"--critic must be sac or crossq, got {cfg.sac.critic!r}"),
        (cfg.sac.critic_input in ("raw", "normalized"),
         f"--critic-input must be raw or normalized, got {cfg.sac.critic_input!r}"),
        (cfg.num_envs >= 1, f"--num-envs must be >= 1, got {cfg.num_envs}"),
        (cfg.threads >= 1, f"--threads must be >= 1, got {cfg.threads}"),
        (cfg.checkpoint_every >= 1, f"--checkpoint-every must be >= 1, got {cfg.checkpoint_every}"),
        (cfg.eval_episodes >= 1, f"--eval-episodes must be >= 1, got {cfg.eval_episodes}"),
        (2 <= a.lut_inputs <= 6, f"--lut-inputs must be in 2..6, got {a.lut_inputs}"),
        (a.layers >= 1, f"--layers must be >= 1, got {a.layers}"),
        (2 <= a.weight_bits <= 8, f"--weight-bits must be in 2..8, got {a.weight_bits}"),
        (1 <= a.act_bits <= 8, f"--act-bits must be in 1..8, got {a.act_bits}"),
        (2 <= a.out_bits <= 10, f"--out-bits must be in 2..10, got {a.out_bits}"),
        (a.fan_in >= 0, f"--fan-in must be >= 0 (0 = dense), got {a.fan_in}"),
        (a.hidden >= 1, f"--hidden must be >= 1, got {a.hidden}"),
        (a.width >= 1, f"--width must be >= 1, got {a.width}"),
        (a.thermo_bits >= 3 and a.thermo_bits % 2 == 1, f"--thermo-bits must be odd and >= 3, got {a.thermo_bits}"),
        (a.max_luts >= 0 and a.max_comparators >= 0, "--max-luts and --max-comparators must be >= 0 (0 = no budget)"),
        (a.last_width >= 0, f"--last-width must be >= 0 (0 = --width), got {a.last_width}"),
        (not a.max_luts or sum(a.layer_widths()) <= a.max_luts,
         f"--max-luts {a.max_luts}: {layer_shape(a.layers, a.width, a.last_width)} = {sum(a.layer_widths())} "
         f"LUTs exceed it"),
        (not (a.max_luts or a.max_comparators) or a.policy == "dwc",
         f"--max-luts / --max-comparators apply to --policy dwc, not {a.policy}"),
        (cfg.sac.batch_size >= 1, f"--batch-size must be >= 1, got {cfg.sac.batch_size}"),
        (cfg.ppo.rollout_steps >= 1, f"--rollout-steps must be >= 1, got {cfg.ppo.rollout_steps}"),
    ]
    for ok, msg in checks:
        if not ok:
            raise UserError(msg)
