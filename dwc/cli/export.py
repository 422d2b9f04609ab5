"""dwc export, four ways: a run's slim copy; a sweep config's median seed; a whole sweep, slim (--all);
a compiled circuit as a C header (--c)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dwc.cli.options import show
from dwc.core.errors import UserError


def add(sub):
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


def run(args) -> int:
    if args.c:
        return _c_header(args)
    if args.out is None:
        raise UserError("--out is required: the new folder for the policy (or --c for a C header)")
    if args.all:
        return _whole_sweep(args)
    if (args.run / "sweep.json").exists():
        return _median_seed(args)
    return _one_run(args)


def _c_header(args) -> int:
    """--c: a compiled circuit (or a run, frozen first) as one C99 header."""
    from dwc.flows.c_export import export_c, export_c_text
    show(args, export_c(args.run, args.out), export_c_text)
    return 0


def _whole_sweep(args) -> int:
    """--all: every finished run of a sweep, slim, into the sweep folder --out."""
    if not (args.run / "sweep.json").exists():
        raise UserError(f"--all archives a sweep's runs; {args.run} is not a sweep folder (no sweep.json)")
    if args.config or args.task or args.seed is not None:
        raise UserError("--all takes every finished run: give no --config, --task or --seed with it")
    from dwc.flows.export import archive_sweep
    r = archive_sweep(args.run, args.out)
    show(args, r, lambda r: f"{args.out}: {len(r['added'])} run(s) added"
         + (f", {len(r['kept'])} already there" if r["kept"] else "")
         + f"; {r['finished']}/{r['runs']} runs finished, {r['bytes'] / 1e6:.1f} MB in all")
    return 0


def _median_seed(args) -> int:
    """From a sweep folder: the median seed (or --seed) of a task's config, with every seed's returns."""
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


def _one_run(args) -> int:
    """A trained run's slim copy: a run directory of its own."""
    if args.config or args.task or args.seed is not None:
        raise UserError(f"--config, --task and --seed pick a run of a sweep; {args.run} is not a sweep folder")
    from dwc.core.rundir import load_config
    load_config(args.run)  # a wrong path fails at once, before torch is imported
    from dwc.flows.export import export_policy
    r = export_policy(args.run, args.out)
    print(f"exported step-{r['step']} policy to {r['out']} ({r['bytes'] / 1e6:.2f} MB)")
    return 0
