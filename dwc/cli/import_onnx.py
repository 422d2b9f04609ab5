"""dwc import: lower a quantised ONNX MLP from another tool into the IR and Verilog (the module is not
called import.py, a keyword)."""
from __future__ import annotations

import argparse
from pathlib import Path

from dwc.cli.options import add_build_options, add_hdl_options, log_for, show


def add(sub):
    p = sub.add_parser("import", help="lower a quantised ONNX MLP (QDQ) into the IR and Verilog",
                       description="Read a quantised MLP policy exported by another tool (QDQ form, as "
                                   "onnxruntime's quantiser writes it: QuantizeLinear/DequantizeLinear around "
                                   "MatMul/Gemm, Add, Relu; QONNX Quant nodes with the qonnx library; power-of-two "
                                   "scales; an elementwise tail such as Tanh or Mul folds into the action tables) "
                                   "and write BUILD/graph.json, BUILD/dwc_core.v and BUILD/import_report.json. "
                                   "The result is checked against onnxruntime before anything is written; then "
                                   "dwc verify, synth and hil work on BUILD as after dwc compile.",
                       epilog="example:\n  dwc import policy.onnx --out build/imported --env InvertedPendulum-v5\n"
                              "  dwc verify build/imported",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", type=Path, help="the .onnx file")
    add_build_options(p)
    p.add_argument("--env", help="the Gymnasium env the policy drives (checked against the model's shapes; "
                                 "dwc verify's closed loop uses it)")
    add_hdl_options(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args) -> int:
    from dwc.flows.compile import import_model, import_text
    r = import_model(args.model, args.out, args.env, args.obs_width, args.act_width, args.pipeline,
                     table_bits=args.table_bits, log=log_for(args))
    show(args, r, import_text)
    return 0
