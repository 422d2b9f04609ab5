"""dwc verify: the emitted Verilog in a simulator against the IR (vectors and closed-loop episodes), or
proved equal for all inputs (--formal)."""
from __future__ import annotations

import argparse
from pathlib import Path

from dwc.cli.options import Renamed, count, quiet_log, show
from dwc.core.config import EVAL_SEED_OFFSET
from dwc.core.defaults import FORMAL_TIMEOUT_S, SIMULATOR, VECTORS, VERIFY_EPISODES
from dwc.core.errors import UserError


VERIFY_HELP = """\
examples:
  dwc verify build/ip                                  # 3 episodes on the graph's env, Verilator
  dwc verify build/ip --verify-episodes 10 --sim icarus  # the second simulator
  dwc verify build/ip --netlist                        # also the netlist yosys synthesises
  dwc verify build/ip --bitstream                      # also every bitstream dwc synth built in build/ip
  dwc verify build/ip --bitstream --target ice40-up5k  # only that one
  dwc verify --formal build/ip                         # proofs for all inputs instead (yosys SAT)
  dwc verify --formal build/ip --formal-timeout 120 --formal-proof reference

Exit status 0 only when the circuit matched the reference executor on every vector and every
closed-loop step, with the declared latency; 1 otherwise (the first mismatch is printed, and a
waveform of it written under BUILD/verify/). BUILD/verify_report.json holds the figures.

--bitstream checks the FPGA image itself, in the same two benches: an iCE40 bitstream (top.bin) is
decoded back into a netlist with Project IceStorm (apt-get install fpga-icestorm), LUT contents and
routing included; an ECP5 bitstream cannot be decoded, so nextpnr runs again with the recorded
command and its routed netlist is simulated with yosys' ECP5 cell models, once its configuration has
packed into the very same top.bit. Either is driven through the serial shell dwc synth placed
(observations shifted in, actions shifted out, one at a time): minutes on a shipped policy.

--formal proves, for every input sequence: dwc_core.v equals the IR written as plain Verilog
through the timing contract (latency, valid, reset), and the synthesised netlist equals dwc_core.v.
Exit status 0 only when everything requested was proved; 1 on a counterexample (printed) or when
the solver ran out of time. BUILD/formal_report.json says what was proved and how long it took.
"""


def add(sub):
    p = sub.add_parser("verify", help="prove the compiled circuit equals the frozen policy, in a real simulator",
                       description="Run the emitted Verilog in a real simulator (cocotb): a vector bench "
                                   "(random, extreme and recorded-rollout observations, one per cycle) and "
                                   "closed-loop MuJoCo episodes whose every action comes from the circuit, "
                                   "each against the IR reference executor: identical actions, identical "
                                   "returns, the declared latency.",
                       epilog=VERIFY_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build", type=Path, help="build directory written by dwc compile")
    p.add_argument("--env", dest="env_id", metavar="ENV", help="Gymnasium env id (default: the env the policy was "
                                                                "trained on)")
    p.add_argument("--verify-episodes", "--episodes", dest="episodes", type=count, default=VERIFY_EPISODES,
                   action=Renamed, help=f"closed-loop episodes in the simulated circuit (default {VERIFY_EPISODES}, "
                                        "as dwc build: they are slow)")
    p.add_argument("--seed", type=int, help="seed of the first episode and of the random vectors (default: the "
                                            f"evaluation seeds of dwc eval, the training seed + {EVAL_SEED_OFFSET})")
    p.add_argument("--max-steps", type=int, help="cut each episode after this many steps (default: the env's limit)")
    p.add_argument("--sim", default=SIMULATOR, choices=["verilator", "icarus"], help=f"simulator (default {SIMULATOR})")
    p.add_argument("--vectors", dest="n_random", metavar="VECTORS", type=int, default=VECTORS,
                   help=f"random vectors in the vector bench (default {VECTORS})")
    p.add_argument("--netlist", action="store_true",
                   help="also run both benches on the gate-level netlist yosys synthesises from the Verilog")
    p.add_argument("--bitstream", action="store_true",
                   help="also run both benches on what dwc synth put in each bitstream of BUILD: iCE40 decoded "
                        "back from the bitstream (icebox_vlog, Debian's fpga-icestorm), Gowin decoded back "
                        "(apycula's gowin_unpack), ECP5 as nextpnr routed it (re-run, checked to pack into the same "
                        "bitstream), each driven through its serial shell; MachXO2, GateMate and Nexus bitstreams "
                        "are not checked (no decoder yet)")
    p.add_argument("--target", action="append", metavar="TARGET",
                   help="with --bitstream: only this dwc synth target (repeat for more; default: every target "
                        "of BUILD with a bitstream)")
    p.add_argument("--formal", action="store_true",
                   help="instead of simulating, prove equivalence for all inputs with yosys's SAT solver: "
                        "dwc_core.v against the IR's reference Verilog, the netlist against dwc_core.v")
    p.add_argument("--formal-timeout", dest="timeout", type=float, default=FORMAL_TIMEOUT_S, metavar="S",
                   help=f"time limit of each proof, in seconds (default {FORMAL_TIMEOUT_S:g})")
    p.add_argument("--formal-proof", choices=["all", "reference", "netlist"], default="all",
                   help="which proof --formal runs (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--no-progress", action="store_true")


def run(args) -> int:
    if args.formal:
        return _prove(args)
    from dwc.sim.verify import summary, verify
    if args.target and not args.bitstream:
        raise UserError("--target picks the bitstream --bitstream checks; add --bitstream")
    r = verify(args.build, args.env_id, args.episodes, args.sim, args.seed, args.max_steps, args.netlist,
               args.n_random, progress=not args.no_progress and not args.json, log=quiet_log(args),
               bitstreams=(args.target or []) if args.bitstream else None)
    show(args, r, summary)
    return 0 if r["passed"] else 1


def _prove(args) -> int:
    """--formal: yosys SAT proofs instead of simulation."""
    from dwc.sim.formal import PROOFS, formal
    from dwc.sim.formal_report import summary as formal_summary
    r = formal(args.build, args.timeout,
               PROOFS if args.formal_proof == "all" else (args.formal_proof,), log=quiet_log(args))
    show(args, r, formal_summary)
    return 0 if r["proved"] else 1
