"""The ``dwc`` command: the top-level parser, the dispatch to one module per subcommand, and the mapping of
errors to one line and an exit status. Each subcommand is one stage of checkpoint -> ... -> bitstream."""
from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path

from dwc.cli import (board_sim, build, demo, evaluate, export, hil, import_onnx, policies, report, sweep, synth,
                     train, verify)
from dwc.cli import compile as compile_  # not to hide the builtin
from dwc.core.errors import OptionError, UserError, interrupt_on_sigterm


MAIN_HELP = """\
dwc: train logic-circuit controllers on MuJoCo tasks and compile them into verified FPGA circuits.
Policies: Differentiable Weightless Controllers (LUT networks), logic-gate networks, quantised MLPs
(trained here or imported from ONNX), and float MLPs as the baseline.

stages, from a task to a bitstream:
  train     train a policy with SAC or PPO, or distil a trained one into a circuit; resumable
  eval      deterministic episodes of a trained run (and of its frozen circuit): RUN/eval.json
  export    copy a trained policy's essentials (a few MB) into a folder, e.g. policies/; --c: a C header
  compile   freeze a trained policy into the integer LUT-graph IR (BUILD/graph.json) and emit Verilog
  import    lower a quantised ONNX MLP from another tool into the same IR and Verilog
  verify    run the Verilog in Verilator/Icarus against the IR: vectors + closed-loop MuJoCo episodes
  synth     yosys + nextpnr for ECP5 / iCE40 (bitstream, Fmax) or Xilinx 7 (LUT estimate); report.json
  hil       episodes with every action from the circuit over its UART link: a board, or --sim
  board-sim a virtual board: the board top's logic in Verilator behind a TCP socket, for dwc hil --port
all in one:
  build     train (or --from a run) -> compile -> verify -> synth, one summary table; re-runs skip what is done
  demo      a shipped policy through compile, verify and an ECP5 bitstream (the quick look)
many runs:
  sweep     tasks x seeds x configs on Ray (this machine or a cluster): train, evaluate, optional hardware
  report    a sweep's table: IQM and median over seeds with 95% CIs, paired comparisons, learning curves
  policies  list the shipped pretrained policies (policies/) with their returns

quick start (about 10 minutes on a 2-core laptop):
  dwc demo                                            # no training: a shipped policy to a bitstream
  dwc build --env InvertedPendulum-v5 --steps 20000 --learning-starts 2000 --width 256 --thermo-bits 31 --out builds/ip
or stage by stage (a shipped policy works too: policies/inverted-pendulum-v5-dwc):
  dwc train --env InvertedPendulum-v5 --steps 20000 --learning-starts 2000 --width 256 --thermo-bits 31 --out runs/ip
  dwc compile runs/ip --out build/ip --pipeline 1     # IR + Verilog
  dwc verify build/ip --verify-episodes 3             # Verilator, closed loop against the IR
  dwc synth build/ip --target ecp5-25k                # bitstream + resources/Fmax report

exit status, every command (each command's --help says what it checks):
  0    done as asked
  1    it ran, but not as asked: a check found a mismatch (verify, hil, build) or no proof, the
       clock an explicit --freq asked for was missed, the design does not fit the FPGA, or fewer
       episodes ran than asked (hil on a lost board), or the disk refused the outputs
  2    refused: a bad option, input file or folder (one line on stderr), nothing started
  130  interrupted (Ctrl-C, SIGTERM): finished work is kept, and the message says how to continue

The defaults are the published circuit (2 x 1024 six-input LUTs, learnable wiring), sized for a
GPU: on a CPU it trains at a few env-steps/s; --width 256 or --wiring random are far cheaper.
Each command's --help has examples.
"""


# The subcommands in the order dwc --help lists them: each module's add(subparsers) declares its
# options, its run(args) carries it out and returns the exit status.
COMMANDS = {"train": train, "eval": evaluate, "export": export, "build": build, "demo": demo, "compile": compile_,
            "import": import_onnx, "verify": verify, "synth": synth, "hil": hil, "board-sim": board_sim,
            "policies": policies, "sweep": sweep, "report": report}


def build_parser() -> argparse.ArgumentParser:
    return _parser_and_commands()[0]


def _parser_and_commands() -> tuple[argparse.ArgumentParser, dict]:
    """The dwc parser, and each subcommand's parser by name."""
    from dwc import __version__
    parser = argparse.ArgumentParser(prog="dwc", description=MAIN_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"dwc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineParser)
    for command in COMMANDS.values():
        command.add(sub)
    return parser, sub.choices


class _OneLineParser(argparse.ArgumentParser):
    """A subcommand's parser whose refusals are one line (argparse's own print the usage first): a script
    reads the reason on the last line of stderr, as for every other error."""

    def error(self, message):
        raise _Refused(f"{self.prog}: error: {message} ({self.prog} --help lists the options)")


class _Refused(Exception):
    """A command line argparse could not read: main prints it and returns 2 (a caller of main() gets the
    status, as from the shell, rather than SystemExit)."""


def _flagged(parser: argparse.ArgumentParser, e: OptionError) -> str:
    """An OptionError in the command line's words: the option's flag (the one whose destination or
    spelling matches the library's name for it) and what is wrong."""
    dashed = "--" + e.option.replace("_", "-")
    flags = [a.option_strings for a in parser._actions if a.option_strings]
    flag = next((f[0] for f in flags if dashed in f), None) or next(
        (a.option_strings[0] for a in parser._actions if a.dest == e.option and a.option_strings), dashed)
    return f"{flag}{e.detail}"


def main(argv: list[str] | None = None) -> int:
    parser, commands = _parser_and_commands()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args, unknown = parser.parse_known_args(argv)
    except _Refused as e:  # a mistyped option first: argparse would complain of what it then missed
        typos = _unknown_flags(argv[0], argv[1:], commands) if argv and argv[0] in commands else []
        print(f"dwc {argv[0]}: error: {_unknown_options(argv[0], typos)} (dwc {argv[0]} --help lists the options)"
              if typos else e, file=sys.stderr)
        return 2
    args.argv = argv
    if args.command is None:
        parser.print_help()
        return 2
    if unknown:
        print(f"dwc {args.command}: error: {_unknown_options(args.command, unknown)} (dwc {args.command} --help "
              f"lists the options)", file=sys.stderr)
        return 2
    # every command stops on SIGTERM as on Ctrl-C (exit 130, its tools killed); commands whose imports
    # set their own handler (training, Ray) set this one again after them
    interrupt_on_sigterm()
    try:
        return COMMANDS[args.command].run(args)
    except UserError as e:
        message = _flagged(commands[args.command], e) if isinstance(e, OptionError) else str(e)
        print(f"dwc {args.command}: error: {message}", file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        print(f"\ndwc {args.command}: interrupted{_what_is_kept(args)}", file=sys.stderr)
        return 130
    except OSError as e:
        if (out := _outside_out(e, args)) is not None:
            print(f"dwc {args.command}: error: --out {out}: cannot create {e.filename} ({e.strerror})",
                  file=sys.stderr)
            return 2
        if e.errno not in DISK_ERRORS:
            raise  # anything else is a bug worth its traceback
        where = f" ({e.filename})" if e.filename else ""
        print(f"dwc {args.command}: error: {e.strerror}{where}; free space or fix the permission, then run it "
              f"again{_what_is_kept(args)}", file=sys.stderr)
        return 1


def _outside_out(e: OSError, args) -> Path | None:
    """--out, where ``e`` is the failure to create it (or a folder above it): a path that cannot exist
    there (under /proc, below a file) is the user's to change, not a bug."""
    out = getattr(args, "out", None)
    if out is None or e.filename is None or e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EEXIST):
        return None  # a refused write (EACCES, a full disk) is the disk's: said below, with what was kept
    where = Path(os.path.abspath(e.filename))
    target = Path(os.path.abspath(out))
    return out if where == target or where in target.parents else None


def _unknown_flags(command: str, words: list[str], commands: dict) -> list[str]:
    """The words that look like options and that ``command`` does not have."""
    known = {f for a in commands[command]._actions for f in a.option_strings}
    return [w for w in words if w.startswith("--") and w.split("=")[0] not in known]


def _unknown_options(command: str, unknown: list[str]) -> str:
    """"unknown option --widht (did you mean --width?)" for what argparse could not place."""
    import difflib
    parser = _parser_and_commands()[1][command]
    known = [f for a in parser._actions for f in a.option_strings]  # argparse lists a parser's options nowhere public
    options = [u.split("=")[0] for u in unknown if u.startswith("-")]
    if not options:
        return f"unexpected argument {' '.join(unknown)}"
    words = []
    for o in options:
        close = difflib.get_close_matches(o, known, n=1)
        words.append(o + (f" (did you mean {close[0]}?)" if close else ""))
    return f"unknown option {', '.join(words)}"


# Storage that cannot take the outputs: one line saying what was kept, not a traceback.
DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS}


def _what_is_kept(args) -> str:
    """After a stop part-way (Ctrl-C, SIGTERM, a full disk): what survives and how to continue."""
    if args.command == "train" and getattr(args, "seeds", None):
        return (f"; each seed's run directory in {args.out} keeps its last checkpoint, continue with the same "
                f"command and --resume (a seed without a checkpoint: start again without --resume)")
    if args.command == "train":
        if (args.out / "checkpoint.pt").exists():
            return f"; checkpoint kept in {args.out}, continue with: dwc train --out {args.out} --resume"
        return " before its first checkpoint, so nothing to resume: start it again with the same command"
    if args.command == "sweep":
        return "; finished runs are kept and the others checkpointed, continue with the same dwc sweep command"
    if args.command in ("build", "demo"):
        return "; finished stages are kept (training checkpointed), continue with the same command"
    return ""
