"""What several subcommands share: argument types checked as the command line is read, the option
groups of dwc compile, import and build, and how a command prints progress and its result."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dwc.core.config import OPTIONS
from dwc.core.defaults import ACT_WIDTH, OBS_WIDTH, PIPELINE, TABLE_BITS
from dwc.core.pipeline import parse_pipeline


def int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None


def count(text: str) -> int:
    """A count of at least one (episodes, ...), checked when the command line is read."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return n


# The slowest UART rate the link takes: below it one frame of a large observation outlasts dwc hil's
# resend timeout, and no board top is built for one.
MIN_BAUD = 1200


def baud_rate(text: str) -> int:
    """A UART baud rate (dwc synth --board, hil, board-sim: one check for all three), as the line is read."""
    try:
        baud = int(text)
    except ValueError:
        baud = 0
    if baud < MIN_BAUD:
        raise argparse.ArgumentTypeError(f"expected a baud rate >= {MIN_BAUD} (e.g. 115200), got {text!r}")
    return baud


class Renamed(argparse.Action):
    """An option with an old name kept working (the flags after the first): given by it, the value is taken
    and one line on stderr names the option to use, so a script keeps running and learns the new name.
    ``split``: the other option an old name also set before it was split in two (dwc build's --episodes, now
    --verify-episodes and --eval-episodes); the command sets that one, seeing the old name in
    ``args.old_names``."""

    def __init__(self, option_strings, dest, split: str | None = None, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.split = split

    def __call__(self, parser, namespace, values, option_string=None):
        new = self.option_strings[0]
        if option_string != new:
            new = f"{new} and {self.split}" if self.split else new
            print(f"{parser.prog}: {option_string} is the old name of {new}; use {new} (the old one still works)",
                  file=sys.stderr)
            namespace.old_names = [*getattr(namespace, "old_names", []), option_string]
        setattr(namespace, self.dest, values)


def pipeline_stages(text: str) -> int | str:
    try:
        return parse_pipeline(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_input_register(p):
    p.add_argument("--input-register", action=argparse.BooleanOptionalAction, default=True,
                   help="register the observation where it enters the core (default). --no-input-register feeds "
                        "it to the logic directly, so the first register after it samples it: one cycle less. "
                        "With --pipeline 0 the whole path from observation to action is then one clock period, "
                        "the lowest latency in nanoseconds (at the lowest Fmax); the observation must come from "
                        "a register clocked with the core, as in the serial shell")


def add_build_options(p):
    p.add_argument("--out", type=Path, required=True, help="build directory")
    p.add_argument("--obs-width", type=int, default=OBS_WIDTH,
                   help=f"observation fixed-point width in bits (default {OBS_WIDTH})")
    p.add_argument("--act-width", type=int, default=ACT_WIDTH,
                   help=f"action fixed-point width in bits (default {ACT_WIDTH})")


PIPELINE_HELP = ("register stages inside the core: 0 = minimum latency (registered I/O around one combinational "
                 "core, 2 cycles); each stage adds a cycle. The first stages go after the comparators, after each "
                 "LUT layer and after the popcounts (and each linear layer); more split the popcount adder trees "
                 "evenly, for Fmax; max = all of them; auto (dwc compile and build) = the fewest stages that reach "
                 "--freq on --target, found by synthesis and place and route of the candidates (a binary search, "
                 f"~4 runs) (default {PIPELINE}: the highest Fmax, as every command that builds a core; the larger "
                 "DWCs miss the default 100 MHz on ECP5 at 0)")


def add_hdl_options(p):
    p.add_argument("--table-bits", type=int, default=None, metavar="N",
                   help="quantised MLPs: a neuron whose nonzero-weight inputs total at most N bits (fan-in x "
                        "bits) is enumerated into lookup tables, LogicNets style; wider ones become "
                        f"constant-coefficient arithmetic (default {TABLE_BITS}; 0 = always arithmetic)")
    p.add_argument("--pipeline", type=pipeline_stages, default=PIPELINE, metavar="K|max|auto", help=PIPELINE_HELP)


def log_for(args):
    """Progress lines: stdout, or stderr when stdout carries --json."""
    return (lambda *a: print(*a, file=sys.stderr, flush=True)) if args.json else (lambda *a: print(*a, flush=True))


def duration(text: str) -> float:
    """'2h', '90m', '1h30m', '600s' or '600' (seconds) as seconds."""
    import re
    m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", text.strip())
    seconds = sum(float(x or 0) * k for x, k in zip(m.groups(), (3600, 60, 1))) if m else 0.0
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: give hours, minutes and/or seconds, e.g. 2h, 90m, "
                                         f"1h30m, 600s")
    return seconds


def given_options(args, leave_out: tuple[str, ...] = ()) -> dict:
    """The training options (dwc.core.config.OPTIONS) given on the command line, by name."""
    return {k: v for k, v in vars(args).items() if v is not None and k in OPTIONS and k not in leave_out}


def add_no_progress(p):
    """--no-progress on a command that prints progress lines while it works (tools run, stages, episodes)."""
    p.add_argument("--no-progress", action="store_true",
                   help="no progress lines while it works (the result, warnings and errors still print)")


def quiet_log(args):
    """Progress lines on stdout, or none when stdout carries --json or --no-progress was given."""
    quiet = args.json or getattr(args, "no_progress", False)
    return (lambda *a: None) if quiet else (lambda msg: print(msg, flush=True))


def show(args, result, text) -> None:
    """A command's result: as JSON with --json, else as ``text(result)`` says it."""
    print(json.dumps(result, indent=2) if args.json else text(result))
