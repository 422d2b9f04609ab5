"""dwc board-sim: a virtual board, the board top's logic in Verilator behind a TCP socket."""
from __future__ import annotations

import argparse
from pathlib import Path

from dwc.cli.options import baud_rate
from dwc.core.defaults import BAUD
from dwc.core.errors import UserError


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
arrives: garbage, drop and corrupt are dwc hil --sim --inject's kinds, which counts host steps instead,
resends not included); garbage-reply, drop-reply, corrupt-reply or late-reply on the FRAME-th reply sent (the
garbage holds a false start byte; a late reply is held back until just before the reply after the
next, so it arrives while the host, having resent and moved on, waits for a later step's).
"""


def add(sub):
    p = sub.add_parser("board-sim", help="a virtual board: the board top's logic in Verilator behind a TCP socket",
                       description="Serve the board top's logic (core + UART link) in Verilator behind a TCP "
                                   "socket, byte for byte at the UART, for dwc hil --port socket://HOST:PORT.",
                       epilog=BOARD_SIM_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build", type=Path, help="build directory written by dwc compile")
    p.add_argument("--listen", default="127.0.0.1:5555", metavar="HOST:PORT",
                   help="address to serve on (default %(default)s; port 0 picks a free one, printed)")
    p.add_argument("--baud", type=baud_rate, default=BAUD, help=f"the UART's baud rate (default {BAUD}, as the board tops)")
    p.add_argument("--clock", type=float, metavar="MHZ",
                   help="the board's clock, which with --baud sets the clock cycles per bit: 25 for the ULX3S's "
                        "217, 12 for the iCEBreaker's 104 (default: 4 cycles per bit, as dwc hil --sim; fast)")
    p.add_argument("--inject", action="append", default=[], metavar="KIND@FRAME",
                   help="spoil one frame: garbage, drop, corrupt, disconnect (the FRAME-th observation received) "
                        "or garbage-reply, drop-reply, corrupt-reply, late-reply (the FRAME-th reply sent)")


def run(args) -> int:
    from dwc.sim.hil.board_sim import board_sim, board_sim_text
    from dwc.core.errors import interrupt_on_sigterm
    from dwc.ir.compiled import load_build
    load_build(args.build)
    if args.clock is not None and args.clock <= 0:
        raise UserError(f"--clock must be > 0 MHz, got {args.clock:g}")
    interrupt_on_sigterm()
    s = board_sim(args.build, args.listen, args.baud, args.clock, args.inject, log=lambda m: print(m, flush=True))
    print(("\n" if s.get("stopped") else "") + board_sim_text(s), flush=True)
    return 0
