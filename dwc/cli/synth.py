"""dwc synth: yosys and nextpnr for the compiled core (bitstream, resources, Fmax), or a board top."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dwc.cli.options import Renamed, add_no_progress, baud_rate, quiet_log
from dwc.core.defaults import BAUD, DEFAULT_FREQ_MHZ, ENERGY_STEPS, PLACEMENT_SEED
from dwc.core.errors import UserError


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
are the core alone; place and route wraps it in a 7-pin serial shell (clk, rst, sin, load,
shift_out, sout, done; reported apart) so it fits
any package. nextpnr routes with its default router (router1, usually the better Fmax); one that has
not finished after --route-budget seconds is stopped and the design placed and routed again with
router2, which routes congested cores far faster (report: router). Open tools only, all from PyPI:
YoWASP yosys and nextpnr, whose wheels ship every family's packer (icepack, ecppack, xo2pack, gmpack,
prjoxide), and apycula's gowin_pack; the first use of each compiles its WebAssembly (about a minute,
cached). The MachXO3LF-6900 (machxo3-6900) is placed, routed and timed but gets no bitstream: the
wheel's xo2pack has no MachXO3 database (report.json: bitstream null). dwc verify --bitstream checks
iCE40, ECP5 and Gowin bitstreams; MachXO2, GateMate and Nexus ones are packed but not checked (no
decoder of them is in dwc yet).
"""


def add(sub):
    from dwc.core.tools import ROUTE_BUDGET_S
    from dwc.fpga.devices import BOARDS, target_names
    p = sub.add_parser("synth", help="synthesise, place and route the compiled core for an FPGA; bitstream + report",
                       description="Synthesise the compiled core with yosys for an FPGA family, place and route it "
                                   "with nextpnr, pack a bitstream, and report resources, Fmax and throughput.",
                       epilog=SYNTH_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build", type=Path, help="build directory written by dwc compile")
    p.add_argument("--target", action="append", choices=target_names(), default=[],
                   help="FPGA target: a device, or a family (ecp5, ice40) for the smallest of its devices that the "
                        "core fits; repeat for several")
    p.add_argument("--board", action="append", choices=BOARDS, default=[],
                   help="a board top: the core behind a UART link (dwc.rtl.link), built to a bitstream; "
                        "repeat for several")
    p.add_argument("--baud", type=baud_rate, metavar="RATE",
                   help=f"with --board: the UART's baud rate (default {BAUD}). A large observation needs more to "
                        "keep up with its task (dwc hil reports the rate real time needs); the board's clock must "
                        "make it within 2%% with at least 8 cycles a bit, e.g. 1000000 on every board")
    p.add_argument("--freq", type=float, metavar="MHZ",
                   help=f"clock the core must reach, in MHz: place and route for it, exit 1 if Fmax falls short "
                        f"(default: placed for {DEFAULT_FREQ_MHZ:g} MHz, and a slower Fmax is reported, not an error)")
    p.add_argument("--yosys-opts", help="options for yosys' synth_* command, replacing the target's measured "
                                        "default (ECP5: -cmp2softlogic, or -nobram when the adder trees are "
                                        "pipelined; others: none), e.g. -nowidelut")
    p.add_argument("--placement-seed", "--seed", dest="seed", type=int, default=PLACEMENT_SEED, action=Renamed,
                   metavar="N", help=f"nextpnr's placement seed (default {PLACEMENT_SEED}; --seed, its old name, "
                                     f"still works: elsewhere --seed seeds episodes)")
    p.add_argument("--route-budget", dest="route_budget_s", type=float, metavar="SECONDS", default=ROUTE_BUDGET_S,
                   help=f"how long nextpnr's default router (router1, usually the better Fmax) may route before "
                        f"the design is placed and routed again with router2, which routes congested designs "
                        f"far faster (default {ROUTE_BUDGET_S:g}; the report's \"router\" says which routed)")
    p.add_argument("--pins", type=Path, metavar="FILE",
                   help="pin constraints for the shell's ports (clk, rst, sin, load, shift_out, sout, done): a PCF "
                        "for iCE40 targets, an LPF for ECP5; default: nextpnr's choice, written to the synth folder")
    p.add_argument("--energy-steps", type=int, default=ENERGY_STEPS, metavar="N",
                   help="closed-loop steps of the policy's env over which switching activity is measured for "
                        f"the energy estimate (default {ENERGY_STEPS}; 0 = no estimate)")
    add_no_progress(p)
    p.add_argument("--json", action="store_true", help="print the reports as JSON")


def run(args) -> int:
    from dwc.fpga.synth import synth_build
    from dwc.fpga.synth_summary import synth_text, timing_missed
    if args.freq is not None and args.freq <= 0:
        raise UserError("--freq must be > 0")
    if not args.target and not args.board:
        raise UserError("give at least one --target or --board")
    if args.energy_steps < 0:
        raise UserError("--energy-steps must be >= 0")
    if args.route_budget_s < 0:
        raise UserError("--route-budget must be >= 0 seconds")
    log = quiet_log(args)
    if args.baud is not None and not args.board:
        raise UserError("--baud sets a board top's UART: give it with --board")
    r = synth_build(args.build, args.target, args.board, args.freq, args.yosys_opts, args.seed, args.energy_steps,
                    log=log, pins=args.pins, route_budget_s=args.route_budget_s, baud=args.baud)
    for e in r["did_not_fit"]:
        print(f"dwc synth: {e}", file=sys.stderr)
    print(json.dumps(r["reports"] + r["boards"], indent=2) if args.json else synth_text(r["reports"], r["boards"]))
    missed = timing_missed(r["reports"], r["boards"])
    if missed:
        print(f"dwc synth: timing not met on {', '.join(missed)}", file=sys.stderr)
    return 1 if r["did_not_fit"] or missed else 0
