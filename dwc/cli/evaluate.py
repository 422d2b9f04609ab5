"""dwc eval: deterministic episodes of a trained run (and of its frozen circuit), written to RUN/eval.json."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dwc.cli.options import Renamed, count, show
from dwc.core.config import EVAL_SEED_OFFSET
from dwc.core.defaults import EVAL_DEVICE, EVAL_EPISODES


def add(sub):
    p = sub.add_parser("eval", help="evaluate a trained run deterministically",
                       description="Run deterministic episodes of a trained run and write RUN/eval.json "
                                   "(env, episodes, mean/median/std/min/max return, per-episode returns).",
                       epilog="examples:\n  dwc eval runs/hopper-dwc --eval-episodes 20 --json\n"
                              "  dwc eval policies/hopper-v5-dwc --frozen --out /tmp/hopper-eval.json",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="run directory written by dwc train")
    p.add_argument("--eval-episodes", "--episodes", dest="episodes", type=count, default=EVAL_EPISODES,
                   action=Renamed, help=f"number of episodes (default {EVAL_EPISODES}, as dwc train's own evaluation)")
    p.add_argument("--seed", type=int, help=f"first episode seed (default: the run's seed + {EVAL_SEED_OFFSET})")
    p.add_argument("--device", default=EVAL_DEVICE,
                   help=f"run | auto | cpu | cuda (default {EVAL_DEVICE}: the device the run's config.json names, "
                        "auto unless trained with another --device: the one its training's own evaluation ran on, "
                        "so dwc eval RUN reproduces RUN/eval.json; a run trained on cuda evaluates on cpu where no "
                        "GPU is)")
    p.add_argument("--frozen", action="store_true",
                   help="also evaluate the frozen integer circuit (the IR dwc compile writes) on the same seeds")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="write the evaluation here (default RUN/eval.json; an exported policy's recorded "
                        "eval.json, e.g. in policies/, is never overwritten: pass --out to save a new one)")
    p.add_argument("--no-progress", action="store_true")


def run(args) -> int:
    from dwc.core.rundir import load_config
    load_config(args.run)  # a wrong path fails at once, before torch is imported
    from dwc.flows.evaluate import eval_text, evaluate_into
    result, out = evaluate_into(args.run, args.episodes, args.out, device=args.device, seed=args.seed,
                                progress=not args.no_progress, frozen=args.frozen)
    show(args, result, eval_text)
    print(f"wrote {out}" if out is not None else
          f"{args.run} is an exported policy: its recorded eval.json is kept; --out FILE saves this evaluation",
          file=sys.stderr)
    return 0
