"""dwc sweep: a spec's tasks x configs x seeds as Ray tasks (train, evaluate, optional hardware); resumable."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dwc.cli.options import duration, log_for, show


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


def add(sub):
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
    p.add_argument("--stop-after", type=duration, metavar="TIME",
                   help="stop after TIME (e.g. 2h, 90m, 1h30m, 600s) as Ctrl-C stops: the runs in flight checkpoint "
                        "and the same command continues them; exit status 3 while runs are left. For parts of a "
                        "sweep on a machine lent for a few hours")
    p.add_argument("--address", help="a running Ray cluster (auto, HOST:PORT or ray://HOST:PORT); default: a "
                                     "local engine on this machine, or RAY_ADDRESS when set")
    p.add_argument("--cpus", type=int, help="local engine: CPUs to use (default all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the final state as JSON")


def run(args) -> int:
    from dwc.core.errors import TimeLimit
    from dwc.flows.sweep import sweep
    from dwc.core.seeds import parse_seeds
    tasks, configs = _names(args.tasks), _names(args.configs)
    seeds = parse_seeds(args.seeds) if args.seeds else None
    try:
        state = sweep(args.spec, args.out, args.address, args.cpus, progress=not args.no_progress, log=log_for(args),
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
    show(args, state, lambda s: f"{sum(r['state'] == 'finished' for r in runs)}/{len(runs)} runs finished"
         + (f", {len(failed)} failed (see {s['out']}/sweep.json)" if failed else "")
         + f"; table: dwc report {s['out']}")
    return 1 if failed else 0


def _names(text: str | None) -> list[str] | None:
    """'T1,T2' as ['T1', 'T2']; None where the option is not given."""
    return [n.strip() for n in text.split(",") if n.strip()] if text else None
