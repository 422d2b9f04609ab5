"""dwc train's options (all but --out, --resume and --seeds), shared by dwc build so that both train the
same run: each option's name, default and help are said once, here."""
from __future__ import annotations

from dwc.cli.options import Renamed, count
from dwc.core.config import CROSSQ, OPTIONS, QMLP_HIDDEN, TrainConfig, option_value
from dwc.core.targets import NATIVE_LUT_INPUTS


def shown(value) -> str:
    """A default as the help writes it: 3e-4 rather than 0.0003."""
    if isinstance(value, float) and value and abs(value) <= 1e-2:
        mantissa, exponent = f"{value:e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return str(value)


# Each option's default as --help states it: TrainConfig's, so it is said once (dwc.core.config).
DEFAULT = {name: shown(option_value(TrainConfig(), name)) for name in OPTIONS}

TRAIN_TARGET_HELP = ("FPGA family whose LUTs the circuit is trained as: " + "; ".join(
    f"{' | '.join(n for n, k in NATIVE_LUT_INPUTS.items() if k == size)} ({size}-input LUTs)"
    for size in sorted(set(NATIVE_LUT_INPUTS.values()))) + "; sets --lut-inputs to the fabric's LUT so one trained "
    "LUT is one LUT cell (gatemate: half a CPE is a tree of three 2-input LUTs over 4 inputs, which holds a trained "
    "LUT4 where it decomposes that way, else it takes more); a synth target name such as ecp5-25k also works; the "
    "option's old name still works, with a note")


EPISODES_HELP = (f"deterministic episodes of the trained policy evaluated at the end of training, into eval.json "
                 f"(default {DEFAULT['eval_episodes']}, as dwc eval)")


def add_train_options(p, target_flag: str = "--target", old_episodes: bool = True):
    """dwc train's options (all but --out/--resume), shared by dwc build so that both train the same run.
    The LUT family trained for is --lut-family; ``target_flag`` is its old name (dwc train's --target, dwc
    build's --train-target, as build's --target is the FPGA to synthesise for), still taken with a note.
    --eval-episodes' old name --episodes is dwc train's only (``old_episodes``): dwc build's counted the
    verified episodes too, and is build's own."""
    _add_run_options(p, old_episodes)
    _add_circuit_options(p, target_flag)
    _add_learner_options(p)


def _add_run_options(p, old_episodes: bool):
    """The task, the algorithm and how the run is carried out."""
    p.add_argument("--env", help=f"Gymnasium env id with Box spaces (default {DEFAULT['env']})")
    p.add_argument("--policy", choices=["dwc", "gates", "qmlp", "mlp"],
                   help="actor type: dwc (LUT layers), gates (logic-gate network: 2-input gates choosing among "
                        "the 16 Boolean functions, random wiring; --layers/--width/--thermo-bits apply), qmlp "
                        "(quantised MLP, power-of-two scales; --layers hidden layers of --hidden, --weight-bits, "
                        "--act-bits, --out-bits, --thermo-bits input thresholds), mlp (float baseline) "
                        f"(default {DEFAULT['policy']})")
    p.add_argument("--algo", choices=["sac", "ppo", "distill"],
                   help="algorithm: sac, ppo, or distill (learn a float MLP teacher's actions: --teacher's, "
                        f"or one this run trains first; see below) (default {DEFAULT['algo']})")
    p.add_argument("--steps", type=int, help=f"total env steps (default {DEFAULT['steps']})")
    p.add_argument("--seed", type=int, help=f"seed; same seed + CPU = same run (default {DEFAULT['seed']})")
    p.add_argument("--device", help="auto | cpu | cuda (default auto: CUDA when present)")
    p.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_const", const=False,
                   help="SAC on CUDA: run each update op by op instead of replaying it as a CUDA graph "
                        "(graphs are the default where the actor allows them: ~200 launches become one)")
    p.add_argument("--precision", choices=["auto", "float32", "bfloat16"],
                   help="arithmetic of the large training matmuls (critics' and MLP actor's hidden layer, LUT "
                        "wiring-score gradients; all else float32, and a DWC circuit is exact either way). auto = "
                        "float32. bfloat16 is faster on CPUs with AMX or AVX512-BF16 (Xeon 4th gen+, AMD Zen 4+; "
                        "Hopper DWC training 1.37x): over 5 paired Hopper seeds it showed no return cost for a DWC "
                        f"but cost the MLP return, see docs/training.md (default {DEFAULT['precision']})")
    p.add_argument("--num-envs", type=int, help=f"parallel envs stepped together (default {DEFAULT['num_envs']})")
    p.add_argument("--threads", type=int,
                   help=f"torch CPU threads (default {DEFAULT['threads']}: fastest on 2 cores)")
    p.add_argument("--checkpoint-every", type=int,
                   help=f"env steps between checkpoints (default {DEFAULT['checkpoint_every']})")
    p.add_argument("--eval-episodes", *["--episodes"] * old_episodes, dest="eval_episodes", type=count,
                   action=Renamed, help=EPISODES_HELP)


def _add_circuit_options(p, target_flag: str):
    """The policy's model and the codesign budgets (the groups in this order: --help shows them so)."""
    m = p.add_argument_group(f"DWC model (defaults: the published {DEFAULT['layers']} x {DEFAULT['width']} "
                             f"LUT{DEFAULT['lut_inputs']}, B = {DEFAULT['thermo_bits']})")
    m.add_argument("--layers", type=int, help=f"LUT layers (default {DEFAULT['layers']})")
    m.add_argument("--width", type=int, help="LUTs per layer; the last is rounded down to a multiple of "
                                             f"the action dim (default {DEFAULT['width']})")
    m.add_argument("--last-width", type=int, help="LUTs in the last layer, if not --width: the action tables and "
                                                  "popcounts grow with it, so a wide first layer and a narrow "
                                                  "last one keep capacity where it is cheap (default: --width)")
    m.add_argument("--lut-inputs", type=int, help=f"inputs per LUT, 2..6 (default {DEFAULT['lut_inputs']})")
    m.add_argument("--thermo-bits", type=int,
                   help=f"thermometer thresholds per obs dim, odd (default {DEFAULT['thermo_bits']})")
    m.add_argument("--wiring", choices=["learnable", "random"],
                   help=f"LUT input wiring (default {DEFAULT['wiring']})")
    m.add_argument("--wiring-optim", choices=["dense", "sparse"],
                   help="SAC update of a learnable wiring's candidate scores: dense (every candidate gets its "
                        "gradient and an Adam step, as published) or sparse (only the few candidates within the "
                        "softmax margin of each input's best one: much cheaper on a CPU; the others keep their "
                        "scores until they come near again, so it trains a different wiring) "
                        f"(default {DEFAULT['wiring_optim']})")
    m.add_argument("--wiring-refresh", type=int, metavar="K",
                   help="with --wiring-optim sparse: every K-th wiring update is the dense one, so candidates "
                        "far from an input's best one still climb (at 1/K of the dense pace), at about 1/K of "
                        f"the dense step's extra cost (default {DEFAULT['wiring_refresh']}: never)")
    c = p.add_argument_group("codesign: train for a target FPGA and within its budgets (dwc policies)")
    c.add_argument("--lut-family", target_flag, dest="target", action=Renamed, metavar="FAMILY",
                   help=TRAIN_TARGET_HELP)
    c.add_argument("--max-luts", type=int, help="at most this many LUTs in the LUT layers; sizes --width when it "
                                                "is not given (popcount adders come on top)")
    c.add_argument("--max-comparators", type=int,
                   help="at most this many distinct thermometer thresholds read by the first layer, i.e. "
                        "comparators in hardware. Learnable wiring: the allowed thresholds shrink from all of "
                        "them at 20%% of training to the budget at 60%%, keeping the most-read ones, so LUT inputs "
                        "reuse shared thresholds; random wiring draws from an even spread of that many")
    m.add_argument("--hidden", type=int, help=f"float MLP hidden width (default {DEFAULT['hidden']}); quantised "
                                              f"MLP (--policy qmlp) hidden width, default {QMLP_HIDDEN}: the shipped "
                                              f"2 x {QMLP_HIDDEN} (policies/inverted-pendulum-v5-qmlp16) returns 1000.0 "
                                              "of 1000 over 10 episodes and compiles and verifies in about a minute "
                                              "(results/qmlp-cost); 2 x 64 is already 1,612 constant multipliers; "
                                              "wider on request")
    m.add_argument("--weight-bits", type=int,
                   help=f"qmlp: signed weight bits, 2..8 (default {DEFAULT['weight_bits']})")
    m.add_argument("--act-bits", type=int,
                   help=f"qmlp: unsigned activation bits, 1..8 (default {DEFAULT['act_bits']})")
    m.add_argument("--out-bits", type=int,
                   help=f"qmlp: signed output-code bits before tanh, 2..10 (default {DEFAULT['out_bits']})")
    m.add_argument("--fan-in", type=int, help="qmlp: inputs per neuron, a fixed random sparse wiring as in "
                                              "LogicNets (small fan-in x bits lets dwc compile turn neurons into "
                                              f"lookup tables); 0 = dense (default {DEFAULT['fan_in']})")


def _add_learner_options(p):
    """The hyper-parameters of SAC, PPO and distillation."""
    s = p.add_argument_group("SAC (defaults: the SAC authors' hyper-parameters as Stable-Baselines3 ships them, "
                             f"{DEFAULT['learning_starts']} random steps; the paper's CleanRL-style protocol as dwc "
                             "ran it before is --q-lr 1e-3 --alpha-lr 1e-3 --adam-eps 1e-5 --policy-frequency 2 "
                             "--alpha 0.2 --critic-input normalized, as configs/paper.yaml pins it; results/referee "
                             "says why the defaults changed)")
    s.add_argument("--learning-starts", type=int,
                   help=f"random-action steps before updates (default {DEFAULT['learning_starts']})")
    s.add_argument("--batch-size", type=int,
                   help=f"minibatch, also of --algo distill (default {DEFAULT['batch_size']})")
    s.add_argument("--buffer-size", type=int, help=f"replay capacity (default {DEFAULT['buffer_size']})")
    s.add_argument("--actor-lr", type=float, help=f"actor learning rate (default {DEFAULT['actor_lr']})")
    s.add_argument("--q-lr", type=float, help=f"critics' learning rate (default {DEFAULT['q_lr']})")
    s.add_argument("--alpha-lr", type=float,
                   help=f"entropy coefficient's learning rate (default {DEFAULT['alpha_lr']})")
    s.add_argument("--adam-eps", type=float, help=f"the actor's Adam epsilon (default {DEFAULT['adam_eps']})")
    s.add_argument("--policy-frequency", type=int, metavar="K",
                   help="actor and entropy steps every K critic steps, K at a time "
                        f"(default {DEFAULT['policy_frequency']})")
    s.add_argument("--alpha", type=float,
                   help=f"initial entropy coefficient, tuned toward entropy -|A| (default {DEFAULT['alpha']})")
    s.add_argument("--critic-input", choices=("raw", "normalized"),
                   help="what the critics read: the raw observation, or the actor's normalised one, as dwc did "
                        f"before (default {DEFAULT['critic_input']})")
    s.add_argument("--critic", choices=("sac", "crossq"),
                   help="sac: twin Q critics with slowly following target copies; crossq (CrossQ, Bhatt et al. "
                        "2024): batch renormalised critics with no target copies, fewer actor steps (the actor, "
                        "so the circuit, is the same kind either way). crossq's own defaults for the options not "
                        "given: " + ", ".join(f"--{k.replace('_', '-')} {shown(v)}" for k, v in CROSSQ.items())
                        + f" (sb3-contrib's CrossQ) (default {DEFAULT['critic']})")
    s.add_argument("--q-hidden", type=int, help=f"critics' hidden width (default {DEFAULT['q_hidden']})")
    s.add_argument("--policy-delay", type=int, metavar="D",
                   help=f"one actor and entropy step every D critic steps (default {DEFAULT['policy_delay']})")
    s.add_argument("--adam-beta1", type=float,
                   help=f"the actor's and critics' Adam beta1 (default {DEFAULT['adam_beta1']})")
    g = p.add_argument_group("PPO")
    g.add_argument("--rollout-steps", type=int,
                   help=f"steps per env per iteration (default {DEFAULT['rollout_steps']})")
    d = p.add_argument_group("distillation (--algo distill): the student (this run's actor options) learns a trained "
                             "policy's deterministic actions on the states it visits itself (DAgger); --steps counts "
                             "the student's env steps, eval.json records the teacher's own")
    d.add_argument("--teacher", help="run or policy folder whose actions are learned, e.g. policies/hopper-v5-mlp "
                                     "(its env is the default --env), or an .onnx model (float observation in, "
                                     "action out; give --env; the student's normaliser is fitted on the model's "
                                     "rollout); without it the run first trains its own "
                                     "teacher into OUT/teacher: a float MLP (--hidden) by SAC (the SAC options "
                                     "above) for --teacher-steps, resumed with the run")
    d.add_argument("--teacher-steps", type=int, help="SAC env steps of the teacher a run without --teacher trains "
                                                     f"(default {DEFAULT['teacher_steps']})")
    d.add_argument("--dagger-steps", type=int, help="env steps per iteration; the first iteration is rolled out "
                                                    "by the teacher, the rest by the student "
                                                    f"(default {DEFAULT['dagger_steps']})")
    d.add_argument("--updates-per-step", type=float, help="minibatch (--batch-size) gradient steps per collected "
                                                          f"env step (default {DEFAULT['updates_per_step']})")
    d.add_argument("--distill-lr", type=float, help=f"the student's learning rate (default {DEFAULT['distill_lr']})")
    d.add_argument("--dagger-noise", type=float, metavar="SIGMA",
                   help="Gaussian noise (std, in half action ranges) added to the action of every rollout, the "
                        "teacher's and the student's, the label staying the teacher's noiseless action: the data "
                        "then covers states just off the policy's own path, where a small error of the circuit "
                        f"takes it (DART) (default {DEFAULT['dagger_noise']})")
