"""The ``dwc`` command. Each subcommand is one stage of checkpoint -> ... -> bitstream."""
from __future__ import annotations

import argparse
import errno
import json
import sys
from pathlib import Path

from dwc.core.config import DEFAULT_FREQ_MHZ
from dwc.core.catalog import POLICIES_DIR
from dwc.core.errors import UserError

MAIN_HELP = """\
dwc: train logic-circuit controllers on MuJoCo tasks and compile them into verified FPGA circuits.
Policies: Differentiable Weightless Controllers (LUT networks), logic-gate networks, quantised MLPs
(trained here or imported from ONNX), and float MLPs as the baseline.

stages, from a task to a bitstream:
  train     train a policy with SAC or PPO, or distil a trained one into a circuit; resumable
  eval      deterministic episodes of a trained run (and of its frozen circuit): RUN/eval.json
  export    copy a trained policy's essentials (a few MB) into a folder, e.g. policies/; --c: a C header
  compile   freeze a trained policy into the integer LUT-graph IR (BUILD/graph.json) and emit Verilog
  import    lower a quantised ONNX MLP from another tool into the same IR and Verilog
  verify    run the Verilog in Verilator/Icarus against the IR: vectors + closed-loop MuJoCo episodes
  synth     yosys + nextpnr for ECP5 / iCE40 (bitstream, Fmax) or Xilinx 7 (LUT estimate); report.json
  hil       episodes with every action from the circuit over its UART link: a board, or --sim
  board-sim a virtual board: the board top's logic in Verilator behind a TCP socket, for dwc hil --port
all in one:
  build     train (or --from a run) -> compile -> verify -> synth, one summary table; re-runs skip what is done
  demo      a shipped policy through compile, verify and an ECP5 bitstream (the quick look)
many runs:
  sweep     tasks x seeds x configs on Ray (this machine or a cluster): train, evaluate, optional hardware
  report    a sweep's table: IQM and median over seeds with 95% CIs, paired comparisons, learning curves
  policies  list the shipped pretrained policies (policies/) with their returns

quick start (about 10 minutes on a 2-core laptop):
  dwc demo                                            # no training: a shipped policy to a bitstream
  dwc build --env InvertedPendulum-v5 --steps 20000 --learning-starts 2000 --width 256 --thermo-bits 31 --out builds/ip
or stage by stage (a shipped policy works too: policies/inverted-pendulum-v5-dwc):
  dwc train --env InvertedPendulum-v5 --steps 20000 --learning-starts 2000 --width 256 --thermo-bits 31 --out runs/ip
  dwc compile runs/ip --out build/ip --pipeline 1     # IR + Verilog
  dwc verify build/ip --episodes 3                    # Verilator, closed loop against the IR
  dwc synth build/ip --target ecp5-25k                # bitstream + resources/Fmax report

The defaults are the published circuit (2 x 1024 six-input LUTs, learnable wiring), sized for a
GPU: on a CPU it trains at a few env-steps/s; --width 256 or --wiring random are far cheaper.
Each command's --help has examples.
"""

TRAIN_HELP = """\
examples:
  # the published DWC (2 x 1024 LUT6, 63 thermometer bits) with SAC on Hopper, resumable:
  dwc train --env Hopper-v5 --steps 300000 --out runs/hopper-dwc
  dwc train --out runs/hopper-dwc --resume          # continue after a crash or Ctrl-C
  # the float baseline, same protocol:
  dwc train --env Hopper-v5 --policy mlp --steps 300000 --out runs/hopper-mlp
  # a small DWC with PPO on 8 envs:
  dwc train --env InvertedPendulum-v5 --algo ppo --num-envs 8 --width 64 --lut-inputs 4 --out runs/ip-ppo
  # codesign for ECP5: native 4-input LUTs, at most 512 LUTs and 96 comparators after freezing:
  dwc train --env Hopper-v5 --target ecp5 --max-luts 512 --max-comparators 96 --out runs/hopper-ecp5
  # or distil a trained policy into such a circuit (minutes, not an RL run; how close it gets
  # depends on what the small circuit can represent, see the README):
  dwc train --algo distill --teacher policies/hopper-v5-dwc --target ecp5 --width 128 --steps 20000 --out runs/hopper-ecp5-distilled
  # the two-stage recipe in one resumable run: a float MLP teacher by SAC (runs/walker/teacher),
  # then a 2 x 256 DWC that learns its actions:
  dwc train --env Walker2d-v5 --algo distill --teacher-steps 300000 --steps 20000 --width 256 --out runs/walker
  # seeds 1 to 4 of one SAC config together in one process (runs/ip4/seed1 ... seed4, each a run
  # directory like the one dwc train --seed S writes; resume with --seeds 1-4 --resume):
  dwc train --env InvertedPendulum-v5 --seeds 1-4 --width 256 --thermo-bits 31 --out runs/ip4

The run directory holds config.json, checkpoint.pt (atomic, every --checkpoint-every steps),
metrics.jsonl, tb/ (TensorBoard: tensorboard --logdir RUN/tb) and eval.json at the end.
On --resume the stored config is used; --steps may be raised to train longer.
"""


def _add_train(sub):
    p = sub.add_parser("train", help="train a policy (resumable)", description="Train a DWC or MLP policy.",
                       epilog=TRAIN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="run directory (must be new unless --resume)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its checkpoint, exactly: it ends as the run left alone "
                        "would (learning state and the episodes in flight restored)")
    p.add_argument("--seeds", help="SAC: train several seeds of this config together in one process (batched "
                                   "critics and optimisers; faster than one process per seed), e.g. 1-8 or 1,3,5: "
                                   "one run directory per seed, OUT/seedS, each resumable alone too")
    _add_train_options(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the final evaluation as JSON")


TRAIN_TARGET_HELP = ("FPGA family the circuit is for: ecp5 | ice40 (4-input LUTs) | xc7 (6-input LUTs); sets "
                     "--lut-inputs to the fabric's LUT so one trained LUT is one LUT cell (a synth target name such "
                     "as ecp5-25k also works)")


EPISODES_HELP = "deterministic episodes evaluated at the end of training (default 10)"


def _add_train_options(p, target_flag: str = "--target", episodes: bool = True):
    """dwc train's options (all but --out/--resume), shared by dwc build so that both train the same run.
    dwc build calls the training --target ``--train-target``, its own --target being the synthesis target,
    and gives --episodes itself (``episodes=False``): there it counts the RTL's episodes too."""
    p.add_argument("--env", help="Gymnasium env id with Box spaces (default InvertedPendulum-v5)")
    p.add_argument("--policy", choices=["dwc", "gates", "qmlp", "mlp"],
                   help="actor type: dwc (LUT layers), gates (logic-gate network: 2-input gates choosing among "
                        "the 16 Boolean functions, random wiring; --layers/--width/--thermo-bits apply), qmlp "
                        "(quantised MLP, power-of-two scales; --layers hidden layers of --hidden, --weight-bits, "
                        "--act-bits, --out-bits, --thermo-bits input thresholds), mlp (float baseline) (default dwc)")
    p.add_argument("--algo", choices=["sac", "ppo", "distill"],
                   help="algorithm: sac, ppo, or distill (learn a float MLP teacher's actions: --teacher's, "
                        "or one this run trains first; see below) (default sac)")
    p.add_argument("--steps", type=int, help="total env steps (default 100000)")
    p.add_argument("--seed", type=int, help="seed; same seed + CPU = same run (default 1)")
    p.add_argument("--device", help="auto | cpu | cuda (default auto: CUDA when present)")
    p.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_const", const=False,
                   help="SAC on CUDA: run each update op by op instead of replaying it as a CUDA graph "
                        "(graphs are the default where the actor allows them: ~200 launches become one)")
    p.add_argument("--precision", choices=["auto", "float32", "bfloat16"],
                   help="arithmetic of the large training matmuls (critics' and MLP actor's hidden layer, LUT "
                        "wiring-score gradients; all else float32, and a DWC circuit is exact either way). auto = "
                        "float32. bfloat16 is faster on CPUs with AMX or AVX512-BF16 (Xeon 4th gen+, AMD Zen 4+; "
                        "Hopper DWC training 1.37x): over 5 paired Hopper seeds it showed no return cost for a DWC "
                        "but cost the MLP return, see docs/training.md (default auto)")
    p.add_argument("--num-envs", type=int, help="parallel envs stepped together (default 1)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default 1: fastest on 2 cores)")
    p.add_argument("--checkpoint-every", type=int, help="env steps between checkpoints (default 10000)")
    if episodes:  # --episodes, as in dwc eval, verify, hil and build; --eval-episodes is its older name
        p.add_argument("--episodes", "--eval-episodes", dest="eval_episodes", type=_count, help=EPISODES_HELP)
    m = p.add_argument_group("DWC model (defaults: the published 2 x 1024 LUT6, B = 63)")
    m.add_argument("--layers", type=int, help="LUT layers (default 2)")
    m.add_argument("--width", type=int, help="LUTs per layer; the last is rounded down to a multiple of "
                                             "the action dim (default 1024)")
    m.add_argument("--last-width", type=int, help="LUTs in the last layer, if not --width: the action tables and "
                                                  "popcounts grow with it, so a wide first layer and a narrow "
                                                  "last one keep capacity where it is cheap (default: --width)")
    m.add_argument("--lut-inputs", type=int, help="inputs per LUT, 2..6 (default 6)")
    m.add_argument("--thermo-bits", type=int, help="thermometer thresholds per obs dim, odd (default 63)")
    m.add_argument("--wiring", choices=["learnable", "random"], help="LUT input wiring (default learnable)")
    m.add_argument("--wiring-optim", choices=["dense", "sparse"],
                   help="SAC update of a learnable wiring's candidate scores: dense (every candidate gets its "
                        "gradient and an Adam step, as published) or sparse (only the few candidates within the "
                        "softmax margin of each input's best one: much cheaper on a CPU; the others keep their "
                        "scores until they come near again, so it trains a different wiring) (default dense)")
    m.add_argument("--wiring-refresh", type=int, metavar="K",
                   help="with --wiring-optim sparse: every K-th wiring update is the dense one, so candidates "
                        "far from an input's best one still climb (at 1/K of the dense pace), at about 1/K of "
                        "the dense step's extra cost (default 0: never)")
    c = p.add_argument_group("codesign: train for a target FPGA and within its budgets (dwc policies)")
    c.add_argument(target_flag, dest="target", help=TRAIN_TARGET_HELP)
    c.add_argument("--max-luts", type=int, help="at most this many LUTs in the LUT layers; sizes --width when it "
                                                "is not given (popcount adders come on top)")
    c.add_argument("--max-comparators", type=int,
                   help="at most this many distinct thermometer thresholds read by the first layer, i.e. "
                        "comparators in hardware. Learnable wiring: the allowed thresholds shrink from all of "
                        "them at 20%% of training to the budget at 60%%, keeping the most-read ones, so LUT inputs "
                        "reuse shared thresholds; random wiring draws from an even spread of that many")
    m.add_argument("--hidden", type=int, help="MLP / quantised MLP hidden width (default 256)")
    m.add_argument("--weight-bits", type=int, help="qmlp: signed weight bits, 2..8 (default 4)")
    m.add_argument("--act-bits", type=int, help="qmlp: unsigned activation bits, 1..8 (default 4)")
    m.add_argument("--out-bits", type=int, help="qmlp: signed output-code bits before tanh, 2..10 (default 8)")
    m.add_argument("--fan-in", type=int, help="qmlp: inputs per neuron, a fixed random sparse wiring as in "
                                              "LogicNets (small fan-in x bits lets dwc compile turn neurons into "
                                              "lookup tables); 0 = dense (default 0)")
    s = p.add_argument_group("SAC (defaults: the SAC authors' hyper-parameters as Stable-Baselines3 ships them, "
                             "5k random steps; the paper's CleanRL-style protocol as dwc ran it before is --q-lr 1e-3 "
                             "--alpha-lr 1e-3 --adam-eps 1e-5 --policy-frequency 2 --alpha 0.2 --critic-input "
                             "normalized, as configs/paper.yaml pins it; results/referee says why the defaults changed)")
    s.add_argument("--learning-starts", type=int, help="random-action steps before updates (default 5000)")
    s.add_argument("--batch-size", type=int, help="minibatch, also of --algo distill (default 256)")
    s.add_argument("--buffer-size", type=int, help="replay capacity (default 1000000)")
    s.add_argument("--actor-lr", type=float, help="actor learning rate (default 3e-4)")
    s.add_argument("--q-lr", type=float, help="critics' learning rate (default 3e-4)")
    s.add_argument("--alpha-lr", type=float, help="entropy coefficient's learning rate (default 3e-4)")
    s.add_argument("--adam-eps", type=float, help="the actor's Adam epsilon (default 1e-8)")
    s.add_argument("--policy-frequency", type=int, metavar="K",
                   help="actor and entropy steps every K critic steps, K at a time (default 1)")
    s.add_argument("--alpha", type=float, help="initial entropy coefficient, tuned toward entropy -|A| (default 1.0)")
    s.add_argument("--critic-input", choices=("raw", "normalized"),
                   help="what the critics read: the raw observation, or the actor's normalised one, as dwc did "
                        "before (default raw)")
    g = p.add_argument_group("PPO")
    g.add_argument("--rollout-steps", type=int, help="steps per env per iteration (default 2048)")
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
                                                     "(default 300000)")
    d.add_argument("--dagger-steps", type=int, help="env steps per iteration; the first iteration is rolled out "
                                                    "by the teacher, the rest by the student (default 1000)")
    d.add_argument("--updates-per-step", type=float, help="minibatch (--batch-size) gradient steps per collected "
                                                          "env step (default 2.0)")
    d.add_argument("--distill-lr", type=float, help="the student's learning rate (default 1e-2)")


def _add_eval(sub):
    p = sub.add_parser("eval", help="evaluate a trained run deterministically",
                       description="Run deterministic episodes of a trained run and write RUN/eval.json "
                                   "(env, episodes, mean/median/std/min/max return, per-episode returns).",
                       epilog="examples:\n  dwc eval runs/hopper-dwc --episodes 20 --json\n"
                              "  dwc eval policies/hopper-v5-dwc --frozen --out /tmp/hopper-eval.json",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="run directory written by dwc train")
    p.add_argument("--episodes", type=_count, default=10, help="number of episodes (default 10)")
    p.add_argument("--seed", type=int, help="first episode seed (default: the run's seed + 10000)")
    p.add_argument("--device", default="cpu", help="auto | cpu | cuda (default cpu)")
    p.add_argument("--frozen", action="store_true",
                   help="also evaluate the frozen integer circuit (the IR dwc compile writes) on the same seeds")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="write the evaluation here (default RUN/eval.json; an exported policy's recorded "
                        "eval.json, e.g. in policies/, is never overwritten: pass --out to save a new one)")
    p.add_argument("--no-progress", action="store_true")


def _train_config(args):
    from dwc.core.config import OPTIONS, config_from_options, resume_config
    from dwc.core.rundir import load_config

    given = {k: v for k, v in vars(args).items() if v is not None and k in OPTIONS}
    if args.resume:
        return resume_config(load_config(args.out), given)
    return config_from_options(given)


def cmd_train(args) -> int:
    if args.seeds is not None:
        return _train_seeds(args)
    from dwc.core.errors import interrupt_on_sigterm
    cfg = _train_config(args)  # options checked before torch is imported: a mistake answers at once
    from dwc.flows.evaluate import eval_text, train_and_evaluate
    interrupt_on_sigterm()
    result = train_and_evaluate(cfg, args.out, resume=args.resume, progress=not args.no_progress,
                                command=["dwc"] + args.argv, log=_log_for(args))
    print(json.dumps(result, indent=2) if args.json else eval_text(result))
    return 0


def _train_seeds(args) -> int:
    """dwc train --seeds: the seeds' configs (checked before torch is imported), trained together."""
    from dwc.core.config import OPTIONS
    from dwc.core.seeds import SUMMARY, check_together, parse_seeds, seed_configs, seed_dir
    seeds = parse_seeds(args.seeds)
    cfgs = seed_configs({k: v for k, v in vars(args).items() if v is not None and k in OPTIONS}, seeds, args.out,
                        args.resume)
    check_together(cfgs[0])
    from dwc.core.errors import interrupt_on_sigterm
    from dwc.flows.evaluate import eval_text
    from dwc.flows.evaluate import train_and_evaluate_seeds
    interrupt_on_sigterm()
    results = train_and_evaluate_seeds(cfgs, [seed_dir(args.out, s) for s in seeds], [args.resume] * len(seeds),
                                       progress=not args.no_progress, commands=[["dwc"] + args.argv] * len(seeds),
                                       log=_log_for(args), summary=args.out / SUMMARY)
    print(json.dumps(results, indent=2) if args.json else
          "\n".join(f"seed {r['seed']} ({r['run']}): {eval_text(r)}" for r in results))
    return 0


def cmd_eval(args) -> int:
    from dwc.core.rundir import load_config
    load_config(args.run)  # a wrong path fails at once, before torch is imported
    from dwc.flows.evaluate import eval_text, evaluate_run
    from dwc.flows.export import is_exported
    from dwc.core.rundir import hold_lock, write_json
    out = args.out or (None if is_exported(args.run) else args.run / "eval.json")
    # The run's own eval.json belongs to its training, which writes it at the end: not while it trains.
    lock = hold_lock(args.run, "dwc eval", "Its eval.json is written when the training ends; to evaluate "
                     "the latest checkpoint now, pass --out FILE") if args.out is None and out is not None else None
    result = evaluate_run(args.run, args.episodes, device=args.device, seed=args.seed,
                          progress=not args.no_progress, frozen=args.frozen, write=False)
    if out is not None:
        write_json(out, result)
    if lock is not None:
        lock.close()
    print(json.dumps(result, indent=2) if args.json else eval_text(result))
    print(f"wrote {out}" if out is not None else
          f"{args.run} is an exported policy: its recorded eval.json is kept; --out FILE saves this evaluation",
          file=sys.stderr)
    return 0


def _add_export(sub):
    p = sub.add_parser("export", help="copy a trained policy's essentials (a few MB) into a new folder; or, with "
                                      "--c, its compiled circuit as a C header",
                       description="Write OUT/config.json, a slim OUT/checkpoint.pt (actor only; learnable "
                                   "wirings as indices), eval.json, metrics.jsonl and commands.txt. "
                                   "OUT is a run directory: dwc eval OUT works on it.\n\n"
                                   "From a dwc sweep folder (--config, --task): the median seed of that task and\n"
                                   "config by the deployed return (the frozen circuit's where there is one; of an\n"
                                   "even count the lower middle one), never the best, plus OUT/seeds.json (every\n"
                                   "seed's returns and circuit figures) and, if the sweep ran its hardware stages,\n"
                                   "OUT/hardware/ (build summary, verification and synthesis reports).\n\n"
                                   "With --all (from a sweep folder): every finished run, slim, into the sweep\n"
                                   "folder OUT, to keep a sweep's results (in git, say) without its training state.\n\n"
                                   "With --c: write the circuit of a dwc compile output folder as one self-contained\n"
                                   "C99 header for microcontrollers and CPUs (float or fixed-point observation in,\n"
                                   "action out, bit-exact with the circuit; only <stdint.h>), check it against the\n"
                                   "reference executor, and report its code and table sizes and the time per action\n"
                                   "on this CPU (also in a .json beside the header).",
                       epilog="examples:\n  dwc export runs/hopper-dwc --out policies/hopper-v5-dwc\n"
                              "  dwc export sweeps/five-tasks --task Ant-v5 --config dwc --out policies/ant-v5-dwc"
                              "   # its median seed\n"
                              "  dwc export sweeps/five-tasks --all --out results/five-tasks/sweep   # every run, slim\n"
                              "  dwc compile policies/hopper-v5-dwc --out build/hopper\n"
                              "  dwc export --c build/hopper                     # build/hopper/dwc_policy.h, "
                              "dwc_policy_act_f() etc.\n"
                              "  dwc export --c build/hopper --out src/hopper.h  # hopper_act_f() etc.\n"
                              "see docs/compiling.md, 'C for microcontrollers and CPUs'",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, metavar="SOURCE",
                   help="run directory written by dwc train; or a dwc sweep folder with --config (and --task "
                        "where it has several): its median seed is exported (see above); with --c, a dwc compile "
                        "output folder (a run or policy folder is frozen first, with dwc compile's defaults, and "
                        "then needs --out)")
    p.add_argument("--out", type=Path, help="new folder for the policy; with --c, the header file (default "
                                            "SOURCE/dwc_policy.h; its name prefixes the C functions)")
    p.add_argument("--config", help="(from a sweep) the spec's config to ship, e.g. dwc")
    p.add_argument("--task", help="(from a sweep) its task, e.g. Ant-v5; needed where the sweep has several")
    p.add_argument("--seed", type=int, help="(from a sweep) ship this seed instead of the median one; the shipped "
                                            "policy records all seeds' returns either way (seeds.json)")
    p.add_argument("--all", action="store_true",
                   help="(from a sweep) every finished run, slim, into the sweep folder --out (made, or added to): "
                        "results, policies and hardware reports without training state, a few hundred KB a run; "
                        "dwc report and dwc export read it like the sweep, and dwc sweep continues from a copy of it")
    p.add_argument("--c", action="store_true", help="write the compiled circuit as a C99 header instead")
    p.add_argument("--json", action="store_true", help="with --c or --all: print the report as JSON")


def cmd_export(args) -> int:
    if args.c:
        from dwc.flows.c_export import export_c, export_c_text
        r = export_c(args.run, args.out)
        print(json.dumps(r, indent=2) if args.json else export_c_text(r))
        return 0
    if args.out is None:
        raise UserError("--out is required: the new folder for the policy (or --c for a C header)")
    if args.all:
        if not (args.run / "sweep.json").exists():
            raise UserError(f"--all archives a sweep's runs; {args.run} is not a sweep folder (no sweep.json)")
        if args.config or args.task or args.seed is not None:
            raise UserError("--all takes every finished run: give no --config, --task or --seed with it")
        from dwc.flows.export import archive_sweep
        r = archive_sweep(args.run, args.out)
        if args.json:
            print(json.dumps(r, indent=2))
        else:
            print(f"{args.out}: {len(r['added'])} run(s) added" + (f", {len(r['kept'])} already there" if r["kept"] else "")
                  + f"; {r['finished']}/{r['runs']} runs finished, {r['bytes'] / 1e6:.1f} MB in all")
        return 0
    if (args.run / "sweep.json").exists():
        if args.config is None:
            raise UserError(f"{args.run} is a sweep: give --config (and --task where it has several) to ship its "
                            "median seed")
        from dwc.flows.export import export_from_sweep
        r = export_from_sweep(args.run, args.config, args.out, task=args.task, seed=args.seed)
        seeds = ", ".join(f"seed {s}: {v:.1f}" for s, v in zip(r["seeds"], r["returns"]))
        which = (f"the median of {len(r['seeds'])} by {r['deployed']} return" if r["median"] else "as asked")
        unfinished = len(r["seeds"]) < r["planned"]
        print(f"{r['task']}/{r['config']}: {r['deployed']} returns {seeds}"
              + (f" ({len(r['seeds'])} of {r['planned']} seeds finished)" if unfinished else "")
              + f"\nexported seed {r['seed']} ({which}), step {r['step']}, to {r['out']} ({r['bytes'] / 1e6:.2f} MB)"
              + (f"; with its {', '.join(r['hardware'])} in hardware/" if r["hardware"] else "")
              + "; every seed's returns in seeds.json")
        if r["left_out"]:
            print(f"left out, trained for another budget than step {r['step']}: {'; '.join(r['left_out'])}",
                  file=sys.stderr)
        return 0
    if args.config or args.task or args.seed is not None:
        raise UserError(f"--config, --task and --seed pick a run of a sweep; {args.run} is not a sweep folder")
    from dwc.core.rundir import load_config
    load_config(args.run)  # a wrong path fails at once, before torch is imported
    from dwc.flows.export import export_policy
    r = export_policy(args.run, args.out)
    print(f"exported step-{r['step']} policy to {r['out']} ({r['bytes'] / 1e6:.2f} MB)")
    return 0


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None


def _count(text: str) -> int:
    """A count of at least one (episodes, ...), checked when the command line is read."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return n


def _pipeline(text: str) -> int | str:
    if text in ("max", "auto"):
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of stages, max or auto, got {text!r}") from None


def _add_compile(sub):
    p = sub.add_parser("compile", help="freeze a trained DWC into the integer LUT-graph IR",
                       description="Freeze a trained DWC run into BUILD/graph.json: fixed-point observation "
                                   "in, comparators with the normaliser folded in, LUT layers, popcounts and "
                                   "action tables out, bit-exact with the PyTorch model on quantised inputs; "
                                   "optimise it; emit the circuit as Verilog (BUILD/dwc_core.v, ports and "
                                   "latency in BUILD/dwc_core.json). Also writes BUILD/compile_report.json.",
                       epilog="example:\n  dwc compile policies/inverted-pendulum-v5-dwc --out build/ip",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="run directory (dwc train) or exported policy")
    _add_build_options(p)
    p.add_argument("--obs-frac", type=_int_list, metavar="F[,F...]",
                   help="fractional bits of the observation, one value or one per dimension (default: sized "
                        "from the training statistics so every threshold is representable)")
    _add_hdl_options(p)
    p.add_argument("--onnx", action="store_true",
                   help="also write BUILD/policy.onnx (float observation in, action out; needs dwc[onnx])")
    p.add_argument("--target", help="the FPGA (or family: ecp5, ice40, xc7) the circuit is for: it picks the "
                                     "popcount structure (3:2 full adders on the LUT4 fabrics, 6:3 counters on "
                                     "xc7; default: the run's dwc train --target, else 6:3) and, with --pipeline "
                                     "auto, the device whose measured Fmax picks the stages (default: the run's "
                                     "--target family's smallest device, e.g. ecp5-25k)")
    p.add_argument("--freq", type=float, default=DEFAULT_FREQ_MHZ,
                   help=f"with --pipeline auto: the clock to reach, MHz (default {DEFAULT_FREQ_MHZ:g})")
    p.add_argument("--comparators", choices=("shared", "full"), default="shared",
                   help="the comparator bank's lowering: shared = each observation dimension's 4-bit digits "
                        "compared once and shared by its thresholds, plain LUT logic (a quarter of the ECP5 area "
                        "of carry-chain compares); full = one full-width compare per threshold, as before "
                        "(default shared)")
    _add_input_register(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def _add_input_register(p):
    p.add_argument("--input-register", action=argparse.BooleanOptionalAction, default=True,
                   help="register the observation where it enters the core (default). --no-input-register feeds "
                        "it to the logic directly, so the first register after it samples it: one cycle less. "
                        "With --pipeline 0 the whole path from observation to action is then one clock period, "
                        "the lowest latency in nanoseconds (at the lowest Fmax); the observation must come from "
                        "a register clocked with the core, as in the serial shell")


def _add_build_options(p):
    p.add_argument("--out", type=Path, required=True, help="build directory")
    p.add_argument("--obs-width", type=int, default=16, help="observation fixed-point width in bits (default 16)")
    p.add_argument("--act-width", type=int, default=16, help="action fixed-point width in bits (default 16)")


def _add_hdl_options(p):
    p.add_argument("--table-bits", type=int, default=None, metavar="N",
                   help="quantised MLPs: a neuron whose nonzero-weight inputs total at most N bits (fan-in x "
                        "bits) is enumerated into lookup tables, LogicNets style; wider ones become "
                        "constant-coefficient arithmetic (default 8; 0 = always arithmetic)")
    p.add_argument("--pipeline", type=_pipeline, default=0, metavar="K|max|auto",
                   help="register stages inside the core: 0 = minimum latency (registered I/O around one "
                        "combinational core, 2 cycles); each stage adds a cycle. The first stages go after the "
                        "comparators, after each LUT layer and after the popcounts (and each linear layer); more "
                        "split the popcount adder trees evenly, for Fmax; max = all of them; auto (dwc compile "
                        "and build) = the fewest stages that reach --freq on --target, found by synthesis and "
                        "place and route of the candidates (a binary search, ~4 runs) (default 0)")


def cmd_compile(args) -> int:
    from dwc.core.rundir import load_config
    load_config(args.run)  # a wrong path fails at once, before torch is imported
    from dwc.flows.compile import compile_run, compile_text, placed_target
    target = placed_target(args.target, args.run) if args.pipeline == "auto" else args.target
    r = compile_run(args.run, args.out, args.obs_width, args.act_width, onnx=args.onnx, obs_frac=args.obs_frac,
                    pipeline=args.pipeline, table_bits=args.table_bits, target=target, freq=args.freq,
                    log=_log_for(args), comparators=args.comparators, input_register=args.input_register)
    print(json.dumps(r, indent=2) if args.json else compile_text(r))
    return 0


def _add_import(sub):
    p = sub.add_parser("import", help="lower a quantised ONNX MLP (QDQ) into the IR and Verilog",
                       description="Read a quantised MLP policy exported by another tool (QDQ form, as "
                                   "onnxruntime's quantiser writes it: QuantizeLinear/DequantizeLinear around "
                                   "MatMul/Gemm, Add, Relu; QONNX Quant nodes with the qonnx library; power-of-two "
                                   "scales; an elementwise tail such as Tanh or Mul folds into the action tables) "
                                   "and write BUILD/graph.json, BUILD/dwc_core.v and BUILD/import_report.json. "
                                   "The result is checked against onnxruntime before anything is written; then "
                                   "dwc verify, synth and hil work on BUILD as after dwc compile.",
                       epilog="example:\n  dwc import policy.onnx --out build/imported --env InvertedPendulum-v5\n"
                              "  dwc verify build/imported",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", type=Path, help="the .onnx file")
    _add_build_options(p)
    p.add_argument("--env", help="the Gymnasium env the policy drives (checked against the model's shapes; "
                                 "dwc verify's closed loop uses it)")
    _add_hdl_options(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def cmd_import(args) -> int:
    from dwc.flows.compile import import_model, import_text
    r = import_model(args.model, args.out, args.env, args.obs_width, args.act_width, args.pipeline,
                     table_bits=args.table_bits, log=_log_for(args))
    print(json.dumps(r, indent=2) if args.json else import_text(r))
    return 0


BUILD_HELP = """\
examples:
  dwc build --env InvertedPendulum-v5 --steps 20000 --width 256 --thermo-bits 31 --out builds/ip
  dwc build --env InvertedPendulum-v5 --steps 30000 --width 256 --thermo-bits 31 --out builds/ip
                                           # the same build, trained on from step 20000
  dwc build --env Hopper-v5 --train-target ecp5 --width 256 --max-comparators 128 --out builds/hop4
                                           # trained as 4-input LUTs (ECP5's cell), built for ECP5-25k
  dwc build --from policies/hopper-v5-dwc --target xc7 --out builds/hopper     # skip training
  dwc build --from runs/ip --target none --out builds/ip-rtl                     # stop after verify
  dwc build --from policies/walker2d-v5-mlp --width 256 --steps 20000 --out builds/walker
                                           # a float MLP: a 2 x 256 DWC learns its actions, then is built

Stages: train -> compile -> verify -> synth. The training stage is dwc train with the same options:
OUT/run/config.json is the one dwc train would write. Re-running the same command skips every stage
whose inputs did not change (OUT/build.json records them); an interrupted build continues where it
stopped (training resumes from its checkpoint), and a larger --steps trains the same run on. Options
that change what is trained (--width, --seed, ...) need a new --out; the error names them.
OUT/summary.json holds the final table.
"""


def _add_build(sub):
    p = sub.add_parser("build", help="task to verified bitstream in one command (train, compile, verify, synth)",
                       description="Train (or take --from RUN), freeze and compile, verify the Verilog in closed "
                                   "loop on the evaluation episodes, synthesise for --target, and print one summary: "
                                   "float, frozen and RTL returns, LUTs, Fmax, latency, energy estimate, bitstream. "
                                   "Training takes every dwc train option, with the same meaning and default, so "
                                   "dwc build trains exactly the run dwc train would; only dwc train's --target is "
                                   "called --train-target here (--target is the FPGA to synthesise for, and it does "
                                   "not change what is trained).",
                       epilog=BUILD_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="build folder (run/, circuit/, build.json, summary.json)")
    p.add_argument("--from", dest="from_run", type=Path,
                   help="a trained run or policy folder: a circuit skips training; a float MLP, or an .onnx "
                        "model (with --env), is the teacher the circuit described by the training options learns "
                        "from (--algo distill)")
    p.add_argument("--target", dest="synth_target", default="ecp5-25k",
                   help="FPGA to synthesise for: a device, a family (ecp5, ice40: its smallest device the core "
                        "fits), or none to stop after verify (default ecp5-25k); it also picks the "
                        "popcount structure (see dwc compile), never the trained LUT size (that is --lut-inputs or "
                        "--train-target)")
    p.add_argument("--pipeline", type=_pipeline, default="max", metavar="K|max|auto",
                   help="register stages in the core (default max: highest Fmax; auto: the fewest that reach "
                        "--freq on --target, measured by place and route)")
    _add_input_register(p)
    p.add_argument("--freq", type=float, default=DEFAULT_FREQ_MHZ,
                   help=f"clock requested from nextpnr in MHz (default {DEFAULT_FREQ_MHZ:g})")
    p.add_argument("--episodes", "--eval-episodes", dest="eval_episodes", type=_count,
                   help="evaluation episodes: the trained run's own at the end of training (as dwc train; default "
                        "10) and the summary's float, frozen and RTL returns (default 3, as the RTL episodes are "
                        "slow)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    _add_train_options(p, target_flag="--train-target", episodes=False)  # training: as dwc train (none with --from)


def cmd_build(args) -> int:
    from dwc.flows.build import build
    episodes = 3 if args.eval_episodes is None else args.eval_episodes
    train_cfg = None
    if args.from_run is not None and (_is_float_mlp(args.from_run) or args.from_run.suffix == ".onnx"):
        what = "an ONNX model" if args.from_run.suffix == ".onnx" else "a float MLP"  # no circuit in it: distil one
        if args.algo not in (None, "distill") or args.teacher is not None:
            raise UserError(f"--from {args.from_run} is {what}, which dwc build distils into a circuit; "
                            f"drop --algo / --teacher")
        args.algo, args.teacher, args.from_run = "distill", str(args.from_run), None
        _log_for(args)(f"--from {args.teacher}: {what}, the teacher of the circuit this build distils "
                       f"(dwc train --algo distill --teacher {args.teacher})")
    if args.from_run is not None:
        from dwc.core.config import OPTIONS
        given = [k for k, v in vars(args).items() if v is not None and k in OPTIONS and k not in ("env", "eval_episodes")]
        if given:
            raise UserError(f"--from {args.from_run}: nothing is trained, so the training option(s) "
                            f"{', '.join(_flag(k) for k in given)} do not apply; drop them or drop --from")
    else:
        args.resume = False
        train_cfg = _train_config(args)
        if train_cfg.actor.policy == "mlp":
            raise UserError("--policy mlp: a float MLP has no circuit; dwc build takes dwc, gates or qmlp "
                            "(train the MLP baseline with dwc train)")
    s = build(args.out, args.env, args.from_run, train_cfg, args.synth_target, args.pipeline, episodes,
              args.freq, progress=not args.no_progress, log=_log_for(args), input_register=args.input_register)
    return _print_build_summary(s, args)


def _is_float_mlp(run: Path) -> bool:
    from dwc.core.rundir import load_config
    return (Path(run) / "config.json").exists() and load_config(run).actor.policy == "mlp"


def _flag(name: str) -> str:
    return {"target": "--train-target", "eval_episodes": "--episodes"}.get(name, "--" + name.replace("_", "-"))


def _print_build_summary(s: dict, args) -> int:
    from dwc.flows.build import summary_table
    print(json.dumps(s, indent=2) if args.json else "\n" + summary_table(s))
    return 0 if s["rtl_equals_frozen"] else 1


def _log_for(args):
    """Progress lines: stdout, or stderr when stdout carries --json."""
    return (lambda *a: print(*a, file=sys.stderr, flush=True)) if args.json else (lambda *a: print(*a, flush=True))


def _add_demo(sub):
    p = sub.add_parser("demo", help="the embedded default: a shipped policy through compile, verify and an ECP5 bitstream",
                       description="dwc build --from policies/inverted-pendulum-v5-gates --target ecp5-25k: the "
                                   "shipped logic-gate policy (InvertedPendulum-v5, return 1000) compiled, verified "
                                   "in Verilator on 3 closed-loop episodes and built into an ECP5 bitstream, with "
                                   "the summary table. A few minutes on 2 CPU cores; a second run is instant.")
    p.add_argument("--out", type=Path, default=Path("builds/demo"), help="build folder (default builds/demo)")
    p.add_argument("--policy", default="inverted-pendulum-v5-gates",
                   help="a folder under policies/ (default inverted-pendulum-v5-gates; see dwc policies)")
    p.add_argument("--target", default="ecp5-25k", help="FPGA target or none (default ecp5-25k)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def cmd_demo(args) -> int:
    from dwc.flows.build import build
    policy = POLICIES_DIR / args.policy
    if not (policy / "config.json").exists():
        raise UserError(f"--policy {args.policy}: not in {POLICIES_DIR} (dwc policies lists them)")
    if policy.is_relative_to(Path.cwd()):  # said as the user would type it (from a checkout: policies/...)
        policy = policy.relative_to(Path.cwd())
    s = build(args.out, None, policy, None, args.target, "max", 3, DEFAULT_FREQ_MHZ, progress=not args.no_progress,
              log=_log_for(args))
    return _print_build_summary(s, args)


VERIFY_HELP = """\
examples:
  dwc verify build/ip                                  # 3 episodes on the graph's env, Verilator
  dwc verify build/ip --episodes 10 --sim icarus       # the second simulator
  dwc verify build/ip --netlist                        # also the netlist yosys synthesises
  dwc verify build/ip --bitstream                      # also every bitstream dwc synth built in build/ip
  dwc verify build/ip --bitstream --target ice40-up5k  # only that one
  dwc verify --formal build/ip                         # proofs for all inputs instead (yosys SAT)
  dwc verify --formal build/ip --formal-timeout 120 --formal-proof reference

Exit status 0 only when the circuit matched the reference executor on every vector and every
closed-loop step, with the declared latency; 1 otherwise (the first mismatch is printed, and a
waveform of it written under BUILD/verify/). BUILD/verify_report.json holds the figures.

--bitstream checks the FPGA image itself, in the same two benches: an iCE40 bitstream (top.bin) is
decoded back into a netlist with Project IceStorm (apt-get install fpga-icestorm), LUT contents and
routing included; an ECP5 bitstream cannot be decoded, so nextpnr runs again with the recorded
command and its routed netlist is simulated with yosys' ECP5 cell models, once its configuration has
packed into the very same top.bit. Either is driven through the serial shell dwc synth placed
(observations shifted in, actions shifted out, one at a time): minutes on a shipped policy.

--formal proves, for every input sequence: dwc_core.v equals the IR written as plain Verilog
through the timing contract (latency, valid, reset), and the synthesised netlist equals dwc_core.v.
Exit status 0 only when everything requested was proved; 1 on a counterexample (printed) or when
the solver ran out of time. BUILD/formal_report.json says what was proved and how long it took.
"""


def _add_verify(sub):
    p = sub.add_parser("verify", help="prove the compiled circuit equals the frozen policy, in a real simulator",
                       description="Run the emitted Verilog in a real simulator (cocotb): a vector bench "
                                   "(random, extreme and recorded-rollout observations, one per cycle) and "
                                   "closed-loop MuJoCo episodes whose every action comes from the circuit, "
                                   "each against the IR reference executor: identical actions, identical "
                                   "returns, the declared latency.",
                       epilog=VERIFY_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build", type=Path, help="build directory written by dwc compile")
    p.add_argument("--env", help="Gymnasium env id (default: the env the policy was trained on)")
    p.add_argument("--episodes", type=_count, default=3, help="closed-loop episodes (default 3)")
    p.add_argument("--seed", type=int, help="seed of the first episode and of the random vectors (default: the "
                                            "evaluation seeds of dwc eval, the training seed + 10000)")
    p.add_argument("--max-steps", type=int, help="cut each episode after this many steps (default: the env's limit)")
    p.add_argument("--sim", default="verilator", choices=["verilator", "icarus"], help="simulator (default verilator)")
    p.add_argument("--vectors", type=int, default=1000, help="random vectors in the vector bench (default 1000)")
    p.add_argument("--netlist", action="store_true",
                   help="also run both benches on the gate-level netlist yosys synthesises from the Verilog")
    p.add_argument("--bitstream", action="store_true",
                   help="also run both benches on what dwc synth put in each bitstream of BUILD: iCE40 decoded "
                        "back from the bitstream (icebox_vlog, Debian's fpga-icestorm), ECP5 as nextpnr routed it "
                        "(re-run, checked to pack into the same bitstream), each driven through its serial shell")
    p.add_argument("--target", action="append", metavar="TARGET",
                   help="with --bitstream: only this dwc synth target (repeat for more; default: every target "
                        "of BUILD with a bitstream)")
    p.add_argument("--formal", action="store_true",
                   help="instead of simulating, prove equivalence for all inputs with yosys's SAT solver: "
                        "dwc_core.v against the IR's reference Verilog, the netlist against dwc_core.v")
    p.add_argument("--formal-timeout", type=float, default=600, metavar="S",
                   help="time limit of each proof, in seconds (default 600)")
    p.add_argument("--formal-proof", choices=["all", "reference", "netlist"], default="all",
                   help="which proof --formal runs (default all)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--no-progress", action="store_true")


def cmd_verify(args) -> int:
    if args.formal:
        from dwc.sim.formal import PROOFS, formal, summary as formal_summary
        log = (lambda *a: None) if args.json else (lambda msg: print(msg, flush=True))
        r = formal(args.build, args.formal_timeout,
                   PROOFS if args.formal_proof == "all" else (args.formal_proof,), log=log)
        print(json.dumps(r, indent=2) if args.json else formal_summary(r))
        return 0 if r["proved"] else 1
    from dwc.sim.verify import summary, verify
    if args.vectors < 0:
        raise UserError("--vectors must be >= 0")
    if args.target and not args.bitstream:
        raise UserError("--target picks the bitstream --bitstream checks; add --bitstream")
    log = (lambda *a: None) if args.json else (lambda msg: print(msg, flush=True))
    r = verify(args.build, args.env, args.episodes, args.sim, args.seed, args.max_steps, args.netlist,
               args.vectors, progress=not args.no_progress and not args.json, log=log,
               bitstreams=(args.target or []) if args.bitstream else None)
    print(json.dumps(r, indent=2) if args.json else summary(r))
    return 0 if r["passed"] else 1


SYNTH_HELP = """\
examples:
  dwc synth build/ip --target ecp5-25k                  # bitstream + report for an ECP5 25k
  dwc synth build/ip --target ecp5                      # the smallest ECP5 (25k, 45k, 85k) it fits
  dwc synth build/ip --target xc7                       # LUT6/FF estimate (no place and route)
  dwc synth build/ip --target ice40-up5k --freq 48
  dwc synth build/ip --target ice40-up5k --pins my.pcf  # your pins (PCF for iCE40, LPF for ECP5)
  dwc synth build/big --target ecp5-25k --route-budget 0  # route with router2 at once (a congested core)

Writes BUILD/synth/<target>/report.json (luts, ffs, cells, utilisation, fmax_mhz, requested_mhz,
timing_met, latency_cycles with action_latency_ns at Fmax and action_latency_ns_at_requested (where it is met),
actions_per_s, area: the comparator bank and the rest apart, bitstream, constraints, pins, energy,
tool versions, the exact commands) and the tools' logs next to it; pins.pcf / pins.lpf there holds the pins nextpnr
used (give it back with --pins to keep them). Exit status 1 when a target misses the clock given
with --freq (without --freq, place and route aims at 100 MHz and a slower Fmax is only reported) or
does not fit; a design that cannot fit is refused before place and route. A run that
fails or is refused leaves the previous BUILD/synth/<target>/ as it was (or none); its own files
and logs go to BUILD/synth/<target>.failed/. The energy
per action is an ESTIMATE: switching activity measured on closed-loop episodes of the policy's env
(IR reference executor) times assumed per-cell energies, plus static power over the clock period;
the model and its constants are in the report. The core's resources
are the core alone; place and route wraps it in a 5-pin serial shell (reported apart) so it fits
any package. nextpnr routes with its default router (router1, usually the better Fmax); one that has
not finished after --route-budget seconds is stopped and the design placed and routed again with
router2, which routes congested cores far faster (report: router). Open tools only (YoWASP
yosys/nextpnr from PyPI); the first use of each compiles its WebAssembly (about a minute, cached).
"""


def _add_synth(sub):
    from dwc.fpga.synth import ROUTE_BUDGET_S, target_names
    p = sub.add_parser("synth", help="synthesise, place and route the compiled core for an FPGA; bitstream + report",
                       description="Synthesise the compiled core with yosys for an FPGA family, place and route it "
                                   "with nextpnr, pack a bitstream, and report resources, Fmax and throughput.",
                       epilog=SYNTH_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build", type=Path, help="build directory written by dwc compile")
    p.add_argument("--target", action="append", choices=target_names(), default=[],
                   help="FPGA target: a device, or a family (ecp5, ice40) for the smallest of its devices that the "
                        "core fits; repeat for several")
    p.add_argument("--board", action="append", choices=["ulx3s", "icebreaker"], default=[],
                   help="a board top: the core behind a UART link (dwc.rtl.link), built to a bitstream; "
                        "repeat for several")
    p.add_argument("--baud", type=int, metavar="RATE",
                   help="with --board: the UART's baud rate (default 115200). A large observation needs more to keep "
                        "up with its task (dwc hil reports the rate real time needs); the board's clock must make it "
                        "within 2%% with at least 8 cycles a bit, e.g. 1000000 on both boards")
    p.add_argument("--freq", type=float, metavar="MHZ",
                   help=f"clock the core must reach, in MHz: place and route for it, exit 1 if Fmax falls short "
                        f"(default: placed for {DEFAULT_FREQ_MHZ:g} MHz, and a slower Fmax is reported, not an error)")
    p.add_argument("--yosys-opts", help="options for yosys' synth_* command, replacing the target's measured "
                                        "default (ECP5: -cmp2softlogic, or -nobram when the adder trees are "
                                        "pipelined; others: none), e.g. -nowidelut")
    p.add_argument("--seed", type=int, default=1, help="nextpnr placement seed")
    p.add_argument("--route-budget", type=float, metavar="SECONDS", default=ROUTE_BUDGET_S,
                   help=f"how long nextpnr's default router (router1, usually the better Fmax) may route before "
                        f"the design is placed and routed again with router2, which routes congested designs "
                        f"far faster (default {ROUTE_BUDGET_S:g}; the report's \"router\" says which routed)")
    p.add_argument("--pins", type=Path, metavar="FILE",
                   help="pin constraints for the shell's ports (clk, rst, sin, load, shift_out, sout, done): a PCF "
                        "for iCE40 targets, an LPF for ECP5; default: nextpnr's choice, written to the synth folder")
    p.add_argument("--energy-steps", type=int, default=1000, metavar="N",
                   help="closed-loop steps of the policy's env over which switching activity is measured for "
                        "the energy estimate (default 1000; 0 = no estimate)")
    p.add_argument("--json", action="store_true", help="print the reports as JSON")


def cmd_synth(args) -> int:
    from dwc.fpga.synth import synth_build, synth_text, timing_missed
    if args.freq is not None and args.freq <= 0:
        raise UserError("--freq must be > 0")
    if not args.target and not args.board:
        raise UserError("give at least one --target or --board")
    if args.energy_steps < 0:
        raise UserError("--energy-steps must be >= 0")
    if args.route_budget < 0:
        raise UserError("--route-budget must be >= 0 seconds")
    log = (lambda *a: None) if args.json else (lambda msg: print(msg, flush=True))
    if args.baud is not None and not args.board:
        raise UserError("--baud sets a board top's UART: give it with --board")
    r = synth_build(args.build, args.target, args.board, args.freq, args.yosys_opts, args.seed, args.energy_steps,
                    log=log, pins=args.pins, route_budget_s=args.route_budget, baud=args.baud)
    for e in r["did_not_fit"]:
        print(f"dwc synth: {e}", file=sys.stderr)
    print(json.dumps(r["reports"] + r["boards"], indent=2) if args.json else synth_text(r["reports"], r["boards"]))
    missed = timing_missed(r["reports"], r["boards"])
    if missed:
        print(f"dwc synth: timing not met on {', '.join(missed)}", file=sys.stderr)
    return 1 if r["did_not_fit"] or missed else 0


HIL_HELP = """\
examples:
  dwc hil build/ip --sim --episodes 2                         # board top's logic in Verilator
  dwc hil build/ip --sim --inject garbage@3 --inject drop@10  # link faults: garbage|drop|corrupt @ step
  dwc hil build/ip --port /dev/ttyUSB0 --baud 115200          # a board flashed by dwc synth --board
  dwc hil build/ip --port socket://127.0.0.1:5555             # the virtual board of dwc board-sim
  dwc hil build/ip --port socket://lab-pi:3333                # a board behind ser2net on another machine

Every action comes from the circuit over the UART protocol of dwc.rtl.link (0xA5 | sequence |
observation | checksum -> 0x5A | sequence | action | on-chip latency | checksum); a lost or corrupted
frame is resent after a timeout, a late reply to an earlier observation is told apart by its sequence
byte and dropped, garbage between frames is skipped, and a lost connection (board unplugged, socket closed)
is reopened for up to --reconnect seconds. --port takes anything pyserial opens: a device, or
socket://HOST:PORT and rfc2217://HOST:PORT. Writes BUILD/hil_report.json: returns next to the
reference executor's, on-chip latency in cycles, link time per step beside the task's control period
(and the baud rate real time needs: dwc synth --board ... --baud builds a board top for it), resent frames and, on a port,
reconnections. Exit 0 only when every action equals the reference's.
"""


def _add_hil(sub):
    p = sub.add_parser("hil", help="hardware-in-the-loop episodes over the UART link (board or --sim)",
                       description="Run MuJoCo episodes with every action computed by the circuit behind its "
                                   "UART link, on a board or simulated.",
                       epilog=HIL_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build", type=Path, help="build directory written by dwc compile")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--sim", action="store_true", help="the board top's logic (core + UART link) in Verilator")
    where.add_argument("--port", help="the board's serial port: a device (/dev/ttyUSB0, COM3) or a URL, "
                                      "socket://HOST:PORT (ser2net, dwc board-sim) or rfc2217://HOST:PORT")
    p.add_argument("--baud", type=int, default=115200, help="UART baud rate (default 115200, as the board tops)")
    p.add_argument("--env", help="Gymnasium env id (default: the policy's)")
    p.add_argument("--episodes", type=_count, default=1, help="closed-loop episodes over the link (default 1)")
    p.add_argument("--seed", type=int, help="seed of the first episode (default: the evaluation seeds of dwc eval, "
                                            "the training seed + 10000)")
    p.add_argument("--max-steps", type=int, help="cut each episode after this many steps")
    p.add_argument("--inject", action="append", default=[], metavar="KIND@STEP",
                   help="(--sim) inject a link fault before that step's frame: garbage, drop or corrupt")
    p.add_argument("--timeout", type=float, default=0.5, metavar="SECONDS",
                   help="(--port) resend a frame when no valid reply came within this long (default 0.5)")
    p.add_argument("--reconnect", type=float, default=10.0, metavar="SECONDS",
                   help="(--port) after a lost connection, keep trying to reopen the port this long (default 10)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def cmd_hil(args) -> int:
    from dwc.sim.hil.host import hil, hil_text
    from dwc.ir.compiled import load_build
    load_build(args.build)
    if args.baud < 1200:
        raise UserError(f"--baud must be >= 1200, got {args.baud}")
    if args.timeout <= 0 or args.reconnect < 0:
        raise UserError("--timeout must be > 0 and --reconnect >= 0 seconds")
    log = (lambda *a: None) if args.json else (lambda msg: print(msg, flush=True))
    r = hil(args.build, args.env, args.episodes, args.seed, args.max_steps, args.sim, args.port, args.baud,
            args.inject, log=log, timeout_s=args.timeout, reconnect_s=args.reconnect)
    print(json.dumps(r, indent=2) if args.json else hil_text(r))
    return 0 if r["passed"] else 1


BOARD_SIM_HELP = """\
examples:
  dwc board-sim build/ip                                      # listens on 127.0.0.1:5555
  dwc hil build/ip --port socket://127.0.0.1:5555             # in another terminal: episodes over it
  dwc board-sim build/ip --listen 0.0.0.0:5555                # reachable from other machines
  dwc board-sim build/ip --inject drop-reply@3 --inject disconnect@10   # faults, for the host's recovery
  dwc board-sim build/ip --clock 25       # the ULX3S's bit timing (217 cycles per bit): ~50x slower,
  dwc hil build/ip --port socket://127.0.0.1:5555 --timeout 10   # so give the host time to wait

A virtual board, for running dwc hil --port without hardware. It serves the board top's logic (the
core behind the UART link, the logic dwc hil --sim runs and dwc synth --board puts on a board) in
Verilator behind a TCP socket, byte for byte at the UART: bytes received on the socket are shifted
into the UART's rx pin bit by bit, each bit --clock / --baud clock cycles long, and the bytes its tx
pin sends go back on the socket as they leave it. Simulated time runs while the link has work and
stands still while it waits for the host, so the board answers faster or slower than a real one
(Verilator runs it at some thousands of clock cycles per second), while the link
sees the board's bit timing. It is what ser2net does for a real board, so dwc hil reaches it the
same way: --port socket://HOST:PORT, through the same serial code as /dev/ttyUSB0.

One connection at a time; a new one replaces the current one. The board keeps running between
connections (its frame counters stay), as a real board behind ser2net does. It serves until Ctrl-C
and then prints one line: connections, frames received, replies sent, bad frames the link dropped.

--inject KIND@FRAME (repeatable) spoils one frame on the socket, counted from 0 since the board
started, resent frames included: garbage, drop, corrupt or disconnect on the FRAME-th observation
received (garbage bytes before it, one byte lost, one bit flipped, or the connection closed as it
arrives); garbage-reply, drop-reply, corrupt-reply or late-reply on the FRAME-th reply sent (the
garbage holds a false start byte; a late reply is held back until just before the reply after the
next, so it arrives while the host, having resent and moved on, waits for a later step's).
"""


def _add_board_sim(sub):
    p = sub.add_parser("board-sim", help="a virtual board: the board top's logic in Verilator behind a TCP socket",
                       description="Serve the board top's logic (core + UART link) in Verilator behind a TCP "
                                   "socket, byte for byte at the UART, for dwc hil --port socket://HOST:PORT.",
                       epilog=BOARD_SIM_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build", type=Path, help="build directory written by dwc compile")
    p.add_argument("--listen", default="127.0.0.1:5555", metavar="HOST:PORT",
                   help="address to serve on (default 127.0.0.1:5555; port 0 picks a free one, printed)")
    p.add_argument("--baud", type=int, default=115200, help="the UART's baud rate (default 115200, as the board tops)")
    p.add_argument("--clock", type=float, metavar="MHZ",
                   help="the board's clock, which with --baud sets the clock cycles per bit: 25 for the ULX3S's "
                        "217, 12 for the iCEBreaker's 104 (default: 4 cycles per bit, as dwc hil --sim; fast)")
    p.add_argument("--inject", action="append", default=[], metavar="KIND@FRAME",
                   help="spoil one frame: garbage, drop, corrupt, disconnect (the FRAME-th observation received) "
                        "or garbage-reply, drop-reply, corrupt-reply, late-reply (the FRAME-th reply sent)")


def cmd_board_sim(args) -> int:
    from dwc.sim.hil.board_sim import board_sim, board_sim_text
    from dwc.core.errors import interrupt_on_sigterm
    from dwc.ir.compiled import load_build
    load_build(args.build)
    if args.baud < 1200 or (args.clock is not None and args.clock <= 0):
        raise UserError("--baud must be >= 1200 and --clock > 0 MHz")
    interrupt_on_sigterm()
    s = board_sim(args.build, args.listen, args.baud, args.clock, args.inject, log=lambda m: print(m, flush=True))
    print(("\n" if s.get("stopped") else "") + board_sim_text(s), flush=True)
    return 0


SWEEP_HELP = """\
A spec (YAML); every task x config x seed is one run:

{spec}
examples:
  dwc sweep sweep.yaml --out sweeps/mine           # a local Ray engine on this machine
  dwc sweep sweep.yaml --out sweeps/mine           # again: finished runs are kept, the rest resume
  dwc sweep paper --out /nfs/sweeps/paper --address auto   # the paper's protocol, on a running Ray cluster
  dwc sweep paper --scale-down                     # the same spec at its scale_down size (minutes, CPU)
  dwc sweep paper --tasks Ant-v5 --seeds 1-2       # part of a spec now; the same folder takes the rest later
  dwc sweep sweep.yaml --out sweeps/mine --stop-after 2h   # 2 hours of it, then checkpoint and stop (exit 3)
  dwc report sweeps/paper-scale-down
  dwc export sweeps/mine --task Hopper-v5 --config dwc --out policies/hopper-dwc   # ship the median seed

Shipped specs (a name instead of a file): {shipped}. paper = the reference paper's protocol: 5 MuJoCo
tasks x float MLP / quantised MLP / DWC x 10 seeds x 1M SAC steps, each DWC compiled, verified in
Verilator and synthesised for xc7 (see docs/training.md, "The paper's protocol").

A run whose worker dies is restarted by Ray (up to resources.max_retries) and resumes from its last
checkpoint (every --checkpoint-every steps, an option like any other). Ctrl-C stops the sweep; the
running runs checkpoint first. On a cluster, every node needs dwc installed and the sweep folder on
shared storage; --address (or RAY_ADDRESS) names the cluster, as ray.init takes it.

Exit status: 0 every run finished; 1 a run failed (the others went on); 2 bad input; 3 stopped by
--stop-after with runs left; 130 interrupted (Ctrl-C, SIGTERM).
"""


def _add_sweep(sub):
    from dwc.flows.sweep_spec import SPEC_HELP, shipped_specs
    p = sub.add_parser("sweep", help="tasks x seeds x configs as Ray tasks: train, frozen eval, optional hardware",
                       description="Run a sweep spec: every run trains (GPU where the workers have one), evaluates "
                                   "the float and the frozen policy, and optionally compiles, verifies and "
                                   "synthesises, as a task on Ray. Resumable; dwc report makes the table.",
                       epilog=SWEEP_HELP.format(spec=SPEC_HELP, shipped=", ".join(shipped_specs()) or "none"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec", type=Path, help="sweep spec (YAML, see below), or the name of a shipped one (paper)")
    p.add_argument("--out", type=Path, help="sweep folder (default sweeps/SPEC-NAME, with --scale-down "
                                            "sweeps/SPEC-NAME-scale-down)")
    p.add_argument("--scale-down", action="store_true",
                   help="apply the spec's scale_down section (fewer tasks, seeds and steps, smaller circuits): the "
                        "same protocol at check size, e.g. before starting the full one or in CI")
    p.add_argument("--tasks", metavar="T1,T2", help="run only the spec's runs of these tasks now (the rest stay "
                                                    "to do: the same command without it, or with others, later)")
    p.add_argument("--seeds", metavar="1-2", help="run only the spec's runs of these seeds now (e.g. 1-2 or 1,3); "
                                                  "with --tasks or --configs, all apply")
    p.add_argument("--configs", metavar="C1,C2", help="run only the spec's runs of these configs now (as the spec "
                                                     "names them, expanded: e.g. dwc-width256)")
    p.add_argument("--seeds-per-run", type=int, metavar="K",
                   help="train K seeds of a config together in one process (over the spec's resources; the same "
                        "runs either way)")
    p.add_argument("--cpus-per-run", type=int, metavar="N",
                   help="CPUs (and torch threads) per run, over the spec's resources: e.g. a long run given both "
                        "cores of a 2-core machine to finish sooner (the same training; threads change only "
                        "the summation order)")
    p.add_argument("--longest-first", action="store_true",
                   help="queue the runs not begun yet by their training time left, longest first (each at the rate "
                        "of its config's runs in the folder; a config with none counts as longest), instead of the "
                        "spec's order: on a few workers a slow config queued last trains alone at the end")
    p.add_argument("--stop-after", type=_duration, metavar="TIME",
                   help="stop after TIME (e.g. 2h, 90m, 1h30m, 600s) as Ctrl-C stops: the runs in flight checkpoint "
                        "and the same command continues them; exit status 3 while runs are left. For parts of a "
                        "sweep on a machine lent for a few hours")
    p.add_argument("--address", help="a running Ray cluster (auto, HOST:PORT or ray://HOST:PORT); default: a "
                                     "local engine on this machine, or RAY_ADDRESS when set")
    p.add_argument("--cpus", type=int, help="local engine: CPUs to use (default all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the final state as JSON")


def _duration(text: str) -> float:
    """'2h', '90m', '1h30m', '600s' or '600' (seconds) as seconds."""
    import re
    m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", text.strip())
    seconds = sum(float(x or 0) * k for x, k in zip(m.groups(), (3600, 60, 1))) if m else 0.0
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: give hours, minutes and/or seconds, e.g. 2h, 90m, "
                                         f"1h30m, 600s")
    return seconds


def cmd_sweep(args) -> int:
    from dwc.core.errors import TimeLimit
    from dwc.flows.sweep import sweep
    if args.cpus is not None and args.cpus < 1:
        raise UserError(f"--cpus must be >= 1, got {args.cpus}")
    from dwc.core.seeds import parse_seeds
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None
    seeds = parse_seeds(args.seeds) if args.seeds else None
    configs = [c.strip() for c in args.configs.split(",") if c.strip()] if args.configs else None
    try:
        state = sweep(args.spec, args.out, args.address, args.cpus, progress=not args.no_progress, log=_log_for(args),
                      scale_down=args.scale_down, tasks=tasks, seeds=seeds, seeds_per_run=args.seeds_per_run,
                      configs=configs, cpus_per_run=args.cpus_per_run, longest_first=args.longest_first,
                      stop_after=args.stop_after)
    except TimeLimit:
        from datetime import timedelta
        print(f"dwc sweep: stopped after {timedelta(seconds=round(args.stop_after))} (--stop-after): finished runs are "
              f"kept and the others checkpointed; the same dwc sweep command continues them (dwc report shows where "
              f"each stands)", file=sys.stderr)
        return 3
    runs = state["runs"].values()
    failed = [r for r in runs if r["state"] == "failed"]
    if args.json:
        print(json.dumps(state, indent=2))
    else:
        out = state["out"]
        print(f"{sum(r['state'] == 'finished' for r in runs)}/{len(runs)} runs finished"
              + (f", {len(failed)} failed (see {out}/sweep.json)" if failed else "") + f"; table: dwc report {out}")
    return 1 if failed else 0


def _add_report(sub):
    p = sub.add_parser("report", help="paper-style table and learning curves of a sweep",
                       description="Per task and config, over seeds: the IQM with a 95% bootstrap CI, the median "
                                   "and quartiles of the float, frozen and hardware (Verilator) return, LUTs, Fmax; "
                                   "each finished run by seed; each config compared with the earlier configs of "
                                   "the spec it shares its precision with or differs from in precision alone, over "
                                   "paired seeds. Writes "
                                   "SWEEP/report.json, SWEEP/report.md and SWEEP/curves_TASK.png. Works on a sweep "
                                   "still running or stopped: it ends with the runs not finished, each started one "
                                   "with the step of its checkpoint, where the same dwc sweep command resumes it.")
    p.add_argument("sweep", type=Path, help="sweep folder written by dwc sweep")
    p.add_argument("--baseline", metavar="CONFIG", action="append",
                   help="compare every other config with CONFIG only (repeat for several baselines); default: "
                        "each config against each earlier comparable config of the spec")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def cmd_report(args) -> int:
    from dwc.flows.report import report, text
    rep = report(args.sweep, baselines=args.baseline)
    if args.json:
        print(json.dumps(rep, indent=2))
        return 0
    print(text(rep))
    print(f"\nwritten: {args.sweep / 'report.json'}, {args.sweep / 'report.md'}, " + ", ".join(rep["curves"]))
    return 0


def _add_policies(sub):
    p = sub.add_parser("policies", help="list the shipped pretrained policies with their returns",
                       description=f"List the policies shipped in {POLICIES_DIR} (each a run directory: "
                                   "dwc eval, compile and verify work on it).")
    p.add_argument("--json", action="store_true", help="print the list as JSON")


def cmd_policies(args) -> int:
    from dwc.core.catalog import list_policies, policies_text
    rows = list_policies()
    print(json.dumps(rows, indent=2) if args.json else policies_text(rows))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from dwc import __version__
    parser = argparse.ArgumentParser(prog="dwc", description=MAIN_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"dwc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_train(sub)
    _add_eval(sub)
    _add_export(sub)
    _add_build(sub)
    _add_demo(sub)
    _add_compile(sub)
    _add_import(sub)
    _add_verify(sub)
    _add_synth(sub)
    _add_hil(sub)
    _add_board_sim(sub)
    _add_policies(sub)
    _add_sweep(sub)
    _add_report(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args, unknown = parser.parse_known_args(argv)
    args.argv = argv
    if args.command is None:
        parser.print_help()
        return 2
    if unknown:
        print(f"dwc {args.command}: error: {_unknown_options(args.command, unknown)} (dwc {args.command} --help "
              f"lists the options)", file=sys.stderr)
        return 2
    try:
        return {"train": cmd_train, "eval": cmd_eval, "export": cmd_export, "build": cmd_build, "demo": cmd_demo,
                "compile": cmd_compile, "import": cmd_import, "verify": cmd_verify, "synth": cmd_synth,
                "hil": cmd_hil, "board-sim": cmd_board_sim, "policies": cmd_policies, "sweep": cmd_sweep, "report": cmd_report}[args.command](args)
    except UserError as e:
        print(f"dwc {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ndwc {args.command}: interrupted{_what_is_kept(args)}", file=sys.stderr)
        return 130
    except OSError as e:
        if e.errno not in DISK_ERRORS:
            raise  # anything else is a bug worth its traceback
        where = f" ({e.filename})" if e.filename else ""
        print(f"dwc {args.command}: error: {e.strerror}{where}; free space or fix the permission, then run it "
              f"again{_what_is_kept(args)}", file=sys.stderr)
        return 1


def _unknown_options(command: str, unknown: list[str]) -> str:
    """"unknown option --widht (did you mean --width?)" for what argparse could not place."""
    import difflib
    parser = _subparsers(build_parser())[command]
    known = [f for a in parser._actions for f in a.option_strings]
    options = [u.split("=")[0] for u in unknown if u.startswith("-")]
    if not options:
        return f"unexpected argument {' '.join(unknown)}"
    words = []
    for o in options:
        close = difflib.get_close_matches(o, known, n=1)
        words.append(o + (f" (did you mean {close[0]}?)" if close else ""))
    return f"unknown option {', '.join(words)}"


def _subparsers(parser: argparse.ArgumentParser) -> dict:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


# Storage that cannot take the outputs: one line saying what was kept, not a traceback.
DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS}


def _what_is_kept(args) -> str:
    """After a stop part-way (Ctrl-C, SIGTERM, a full disk): what survives and how to continue."""
    if args.command == "train" and getattr(args, "seeds", None):
        return (f"; each seed's run directory in {args.out} keeps its last checkpoint, continue with the same "
                f"command and --resume (a seed without a checkpoint: start again without --resume)")
    if args.command == "train":
        if (args.out / "checkpoint.pt").exists():
            return f"; checkpoint kept in {args.out}, continue with: dwc train --out {args.out} --resume"
        return " before its first checkpoint, so nothing to resume: start it again with the same command"
    if args.command == "sweep":
        return "; finished runs are kept and the others checkpointed, continue with the same dwc sweep command"
    if args.command in ("build", "demo"):
        return "; finished stages are kept (training checkpointed), continue with the same command"
    return ""


if __name__ == "__main__":
    raise SystemExit(main())
