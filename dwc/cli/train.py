"""dwc train: one run, or several seeds of one SAC config trained together (--seeds)."""
from __future__ import annotations

import argparse
from pathlib import Path

from dwc.cli.options import given_options, log_for, show
from dwc.cli.train_options import add_train_options


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
  dwc train --env Hopper-v5 --lut-family ecp5 --max-luts 512 --max-comparators 96 --out runs/hopper-ecp5
  # or distil a trained policy into such a circuit (minutes, not an RL run; how close it gets
  # depends on what the small circuit can represent, see the README):
  dwc train --algo distill --teacher policies/hopper-v5-dwc --lut-family ecp5 --width 128 --steps 20000 --out runs/hopper-ecp5-distilled
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


def add(sub):
    p = sub.add_parser("train", help="train a policy (resumable)", description="Train a DWC or MLP policy.",
                       epilog=TRAIN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="run directory (must be new unless --resume)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its checkpoint, exactly: it ends as the run left alone "
                        "would (learning state and the episodes in flight restored)")
    p.add_argument("--seeds", help="SAC: train several seeds of this config together in one process (batched "
                                   "critics and optimisers; faster than one process per seed), e.g. 1-8 or 1,3,5: "
                                   "one run directory per seed, OUT/seedS, each resumable alone too")
    add_train_options(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the final evaluation as JSON")


def train_config(args):
    """The run's config from the command line (with --resume, the stored one with what may change);
    checked here, before torch is imported."""
    from dwc.core.config import config_from_options, resume_config
    from dwc.core.rundir import load_config

    given = given_options(args)
    if args.resume:
        return resume_config(load_config(args.out), given)
    return config_from_options(given)


def run(args) -> int:
    if args.seeds is not None:
        return _train_seeds(args)
    from dwc.core.errors import interrupt_on_sigterm
    cfg = train_config(args)  # options checked before torch is imported: a mistake answers at once
    from dwc.flows.evaluate import eval_text, train_and_evaluate
    interrupt_on_sigterm()
    result = train_and_evaluate(cfg, args.out, resume=args.resume, progress=not args.no_progress,
                                command=["dwc"] + args.argv, log=log_for(args))
    show(args, result, eval_text)
    return 0


def _train_seeds(args) -> int:
    """dwc train --seeds: the seeds' configs (checked before torch is imported), trained together."""
    from dwc.core.seeds import SUMMARY, check_together, parse_seeds, seed_configs, seed_dir
    seeds = parse_seeds(args.seeds)
    cfgs = seed_configs(given_options(args), seeds, args.out, args.resume)
    check_together(cfgs[0])
    from dwc.core.errors import interrupt_on_sigterm
    from dwc.flows.evaluate import eval_text, train_and_evaluate_seeds
    interrupt_on_sigterm()
    results = train_and_evaluate_seeds(cfgs, [seed_dir(args.out, s) for s in seeds], [args.resume] * len(seeds),
                                       progress=not args.no_progress, commands=[["dwc"] + args.argv] * len(seeds),
                                       log=log_for(args), summary=args.out / SUMMARY)
    show(args, results, lambda rs: "\n".join(f"seed {r['seed']} ({r['run']}): {eval_text(r)}" for r in rs))
    return 0
