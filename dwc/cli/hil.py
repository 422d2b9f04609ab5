"""dwc hil: closed-loop episodes with every action from the circuit over its UART link (a board, or --sim)."""
from __future__ import annotations

import argparse
from pathlib import Path

from dwc.cli.options import Renamed, add_no_progress, baud_rate, count, quiet_log, show
from dwc.core.config import EVAL_SEED_OFFSET
from dwc.core.defaults import BAUD, BOARD_EPISODES, HIL_TIMEOUT_S, RECONNECT_S
from dwc.core.errors import UserError


HIL_HELP = """\
examples:
  dwc hil build/ip --sim --board-episodes 2                   # board top's logic in Verilator
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
reconnections. Exit 0 only when every action equals the reference's; 1 on a mismatch, or when the
board is lost (no reply after 4 sends, or not reopened within --reconnect): the line says how many
steps and episodes finished, and hil_report.json keeps their results ("lost": where it stopped).
"""


def add(sub):
    p = sub.add_parser("hil", help="hardware-in-the-loop episodes over the UART link (board or --sim)",
                       description="Run MuJoCo episodes with every action computed by the circuit behind its "
                                   "UART link, on a board or simulated.",
                       epilog=HIL_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build", type=Path, help="build directory written by dwc compile")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--sim", action="store_true", help="the board top's logic (core + UART link) in Verilator")
    where.add_argument("--port", help="the board's serial port: a device (/dev/ttyUSB0, COM3) or a URL, "
                                      "socket://HOST:PORT (ser2net, dwc board-sim) or rfc2217://HOST:PORT")
    p.add_argument("--baud", type=baud_rate, default=BAUD, help=f"UART baud rate (default {BAUD}, as the board tops)")
    p.add_argument("--env", help="Gymnasium env id (default: the policy's)")
    p.add_argument("--board-episodes", "--episodes", dest="episodes", type=count, default=BOARD_EPISODES,
                   action=Renamed, help=f"closed-loop episodes over the link (default {BOARD_EPISODES})")
    p.add_argument("--seed", type=int, help="seed of the first episode (default: the evaluation seeds of dwc eval, "
                                            f"the training seed + {EVAL_SEED_OFFSET})")
    p.add_argument("--max-steps", type=int, help="cut each episode after this many steps")
    p.add_argument("--inject", action="append", default=[], metavar="KIND@STEP",
                   help="(--sim) spoil the observation frame of step STEP, counted from 0 across all the "
                        "episodes (a resent frame is not a step): garbage (bytes before it), drop (one byte "
                        "lost) or corrupt (one bit flipped). The same kinds as dwc board-sim --inject KIND@FRAME, "
                        "which counts the frames the board receives, resent ones included (it knows no steps)")
    p.add_argument("--timeout", dest="timeout_s", type=float, default=HIL_TIMEOUT_S, metavar="SECONDS",
                   help=f"(--port) resend a frame when no valid reply came within this long "
                        f"(default {HIL_TIMEOUT_S:g})")
    p.add_argument("--reconnect", dest="reconnect_s", type=float, default=RECONNECT_S, metavar="SECONDS",
                   help=f"(--port) after a lost connection, keep trying to reopen the port this long "
                        f"(default {RECONNECT_S:g})")
    add_no_progress(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args) -> int:
    from dwc.sim.hil.host import hil, hil_text
    from dwc.ir.compiled import load_build
    load_build(args.build)
    if args.timeout_s <= 0 or args.reconnect_s < 0:
        raise UserError("--timeout must be > 0 and --reconnect >= 0 seconds")
    r = hil(args.build, args.env, args.episodes, args.seed, args.max_steps, args.sim, args.port, args.baud,
            args.inject, log=quiet_log(args), timeout_s=args.timeout_s, reconnect_s=args.reconnect_s)
    show(args, r, hil_text)
    return 0 if r["passed"] else 1
