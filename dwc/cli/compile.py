"""dwc compile: freeze a trained policy into the integer LUT-graph IR and emit its Verilog."""
from __future__ import annotations

import argparse
from pathlib import Path

from dwc.cli.options import (add_build_options, add_hdl_options, add_input_register, add_no_progress, int_list,
                             log_for, show)
from dwc.core.defaults import COMPARATOR_BANK, DEFAULT_FREQ_MHZ


def add(sub):
    p = sub.add_parser("compile", help="freeze a trained DWC into the integer LUT-graph IR",
                       description="Freeze a trained DWC run into BUILD/graph.json: fixed-point observation "
                                   "in, comparators with the normaliser folded in, LUT layers, popcounts and "
                                   "action tables out, bit-exact with the PyTorch model on quantised inputs; "
                                   "optimise it; emit the circuit as Verilog (BUILD/dwc_core.v, ports and "
                                   "latency in BUILD/dwc_core.json). Also writes BUILD/compile_report.json.",
                       epilog="example:\n  dwc compile policies/inverted-pendulum-v5-dwc --out build/ip",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="run directory (dwc train) or exported policy")
    add_build_options(p)
    p.add_argument("--obs-frac", type=int_list, metavar="F[,F...]",
                   help="fractional bits of the observation, one value or one per dimension (default: sized "
                        "from the training statistics so every threshold is representable)")
    add_hdl_options(p)
    p.add_argument("--onnx", action="store_true",
                   help="also write BUILD/policy.onnx (float observation in, action out; needs dwc[onnx])")
    p.add_argument("--target", help="the FPGA (or family: ecp5, ice40, xc7) the circuit is for: it picks the "
                                     "popcount structure (3:2 full adders on the LUT4 fabrics, 6:3 counters on "
                                     "xc7; default: the run's dwc train --lut-family, else 6:3) and, with --pipeline "
                                     "auto, the device whose measured Fmax picks the stages (default: the run's "
                                     "--lut-family's smallest device, e.g. ecp5-25k)")
    p.add_argument("--freq", type=float, default=DEFAULT_FREQ_MHZ,
                   help=f"with --pipeline auto: the clock to reach, MHz (default {DEFAULT_FREQ_MHZ:g})")
    p.add_argument("--comparators", choices=("shared", "full"), default=COMPARATOR_BANK,
                   help="the comparator bank's lowering: shared = each observation dimension's 4-bit digits "
                        "compared once and shared by its thresholds, plain LUT logic (a quarter of the ECP5 area "
                        "of carry-chain compares); full = one full-width compare per threshold, as before "
                        f"(default {COMPARATOR_BANK})")
    add_input_register(p)
    add_no_progress(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args) -> int:
    from dwc.core.rundir import load_config
    load_config(args.run)  # a wrong path fails at once, before torch is imported
    from dwc.flows.compile import compile_run, compile_text, placed_target
    target = placed_target(args.target, args.run) if args.pipeline == "auto" else args.target
    r = compile_run(args.run, args.out, args.obs_width, args.act_width, onnx=args.onnx, obs_frac=args.obs_frac,
                    pipeline=args.pipeline, table_bits=args.table_bits, target=target, freq=args.freq,
                    log=log_for(args) if not args.no_progress else (lambda *a: None), comparators=args.comparators, input_register=args.input_register)
    show(args, r, compile_text)
    return 0
