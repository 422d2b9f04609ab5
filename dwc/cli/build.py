"""dwc build: train (or --from a run) -> compile -> verify -> synth, with one summary table."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from dwc.cli.options import PIPELINE_HELP, Renamed, add_input_register, count, given_options, log_for, pipeline_stages
from dwc.cli.train import train_config
from dwc.cli.train_options import add_train_options
from dwc.core.defaults import DEFAULT_FREQ_MHZ, PIPELINE, SYNTH_TARGET, VERIFY_EPISODES
from dwc.core.errors import OptionError, UserError


BUILD_HELP = """\
examples:
  dwc build --env InvertedPendulum-v5 --steps 20000 --learning-starts 2000 --width 256 --thermo-bits 31 --out builds/ip
  dwc build --env InvertedPendulum-v5 --steps 30000 --learning-starts 2000 --width 256 --thermo-bits 31 --out builds/ip
                                           # the same build, trained on from step 20000
  dwc build --env Hopper-v5 --lut-family ecp5 --width 256 --max-comparators 128 --out builds/hop4
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
OUT/summary.json holds the final table. Every stage's options (the task, --pipeline against the
circuit's size, --target, --freq, --verify-episodes) are checked before training starts.

exit status: 0 = built as asked; 1 = built but not as asked: the RTL differs from the frozen circuit,
the core does not fit --target, or it misses the clock an explicit --freq asked for (without --freq it
is placed for 100 MHz and a slower Fmax is only reported); 2 = refused (a bad option or input file,
nothing started); 130 = interrupted (finished stages kept).
"""


def add(sub):
    p = sub.add_parser("build", help="task to verified bitstream in one command (train, compile, verify, synth)",
                       description="Train (or take --from RUN), freeze and compile, verify the Verilog in closed "
                                   "loop on the evaluation episodes, synthesise for --target, and print one summary: "
                                   "float, frozen and RTL returns, LUTs, Fmax, latency, energy estimate, bitstream. "
                                   "Training takes every dwc train option, with the same meaning and default, so "
                                   "dwc build trains exactly the run dwc train would (--lut-family: the LUTs "
                                   "trained; --target: the FPGA to synthesise for, which does not change what is "
                                   "trained).",
                       epilog=BUILD_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="build folder (run/, circuit/, build.json, summary.json)")
    p.add_argument("--from", dest="from_run", type=Path,
                   help="a trained run or policy folder: a circuit skips training; a float MLP, or an .onnx "
                        "model (with --env), is the teacher the circuit described by the training options learns "
                        "from (--algo distill)")
    p.add_argument("--target", dest="synth_target", default=SYNTH_TARGET,
                   help=f"FPGA to synthesise for: a device, a family (ecp5, ice40: its smallest device the core "
                        f"fits), or none to stop after verify (default {SYNTH_TARGET}); it also picks the "
                        "popcount structure (see dwc compile), never the trained LUT size (that is --lut-inputs or "
                        "--lut-family)")
    p.add_argument("--pipeline", type=pipeline_stages, default=PIPELINE, metavar="K|max|auto", help=PIPELINE_HELP)
    add_input_register(p)
    p.add_argument("--freq", type=float, metavar="MHZ",
                   help=f"clock the core must reach, in MHz: placed for it, exit 1 if Fmax falls short (default: "
                        f"placed for {DEFAULT_FREQ_MHZ:g} MHz, and a slower Fmax is reported, not an error)")
    p.add_argument("--verify-episodes", "--episodes", dest="episodes", type=count, default=VERIFY_EPISODES,
                   action=Renamed, split="--eval-episodes",
                   help=f"closed-loop episodes the summary's float, frozen and RTL returns are the means of, the RTL's "
                        f"in Verilator (default {VERIFY_EPISODES}, as dwc verify: they are slow); the trained run's "
                        "own evaluation is --eval-episodes (the old --episodes sets both)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_train_options(p, target_flag="--train-target", old_episodes=False)  # training: as dwc train (none with --from)


def run(args) -> int:
    from dwc.flows.build import build, distilled_from
    if args.from_run is not None and (what := distilled_from(args.from_run)):
        _distil_from(args, what)
    if "--episodes" in getattr(args, "old_names", ()) and args.eval_episodes is None and args.from_run is None:
        args.eval_episodes = args.episodes  # the old --episodes counted the training's evaluation too
    train_cfg = _training(args)
    s = build(args.out, args.env, args.from_run, train_cfg, args.synth_target, args.pipeline, args.episodes,
              args.freq, progress=not args.no_progress, log=log_for(args), input_register=args.input_register)
    return print_summary(s, args)


def _distil_from(args, what: str) -> None:
    """--from a float MLP or an ONNX model (``what``): no circuit in it, so it is the teacher of one."""
    if args.algo not in (None, "distill") or args.teacher is not None:
        raise UserError(f"--from {args.from_run} is {what}, which dwc build distils into a circuit; "
                        f"drop --algo / --teacher")
    args.algo, args.teacher, args.from_run = "distill", str(args.from_run), None
    log_for(args)(f"--from {args.teacher}: {what}, the teacher of the circuit this build distils "
                  f"(dwc train --algo distill --teacher {args.teacher})")


def _training(args):
    """The config of the run this build trains; None with --from a circuit, which takes no training option."""
    if args.from_run is not None:
        given = list(given_options(args, leave_out=("env",)))
        if given:
            raise UserError(f"--from {args.from_run}: nothing is trained, so the training option(s) "
                            f"{', '.join(_flag(k) for k in given)} do not apply; drop them or drop --from")
        return None
    args.resume = False
    try:
        train_cfg = train_config(args)
    except OptionError as e:  # a training option: named by its flag here (build's own --target is the FPGA's)
        raise UserError(f"{_flag(e.option)}{e.detail}") from None
    if train_cfg.actor.policy == "mlp":
        raise UserError("--policy mlp: a float MLP has no circuit; dwc build takes dwc, gates or qmlp "
                        "(train the MLP baseline with dwc train)")
    return train_cfg


def _flag(name: str) -> str:
    return {"target": "--lut-family"}.get(name, "--" + name.replace("_", "-"))


def print_summary(s: dict, args) -> int:
    """The build's summary table (dwc build and dwc demo); exit status 1 unless the RTL equals the frozen circuit
    and the clock an explicit --freq asked for is met."""
    import sys

    from dwc.flows.build import summary_table, timing_failure
    print(json.dumps(s, indent=2) if args.json else "\n" + summary_table(s))
    missed = timing_failure(s)
    if missed:
        print(f"dwc {args.command}: {missed}", file=sys.stderr)
    if not s["rtl_equals_frozen"]:
        print(f"dwc {args.command}: the RTL's returns differ from the frozen circuit's", file=sys.stderr)
    return 0 if s["rtl_equals_frozen"] and not missed else 1
