"""cocotb test module: stream integer observations through the emitted Verilog core, one per cycle,
and record every action with the cycle it appeared. Inputs and outputs are files named by
environment variables, so the host side (dwc.sim.runner) does all the comparing."""
import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge


def pack(values, fields) -> int:
    word = 0
    for v, f in zip(values, fields):
        word |= (int(v) & ((1 << f["width"]) - 1)) << f["lsb"]
    return word


def unpack(word: int, fields) -> list[int]:
    out = []
    for f in fields:
        v = (word >> f["lsb"]) & ((1 << f["width"]) - 1)
        out.append(v - (1 << f["width"]) if f["signed"] and v >> (f["width"] - 1) else v)
    return out


@cocotb.test()
async def stream_vectors(dut):
    ports = json.load(open(os.environ["DWC_PORTS"]))
    vectors = json.load(open(os.environ["DWC_VECTORS"]))
    obs_fields, act_fields = ports["inputs"]["obs"], ports["outputs"]["action"]
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.valid_in.value = 0
    dut.obs.value = 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    # Inputs are driven at the falling edge, sampled at the rising edge; outputs are read once the
    # rising edge has settled. An observation driven before edge e whose action is visible after edge
    # e + L has latency L (the same convention as the Amaranth-simulator bench).
    results, accepted, cycle, sent = [], [], 0, 0
    limit = len(vectors) + 4 * ports["latency_cycles"] + 20
    while len(results) < len(vectors) and cycle < limit:
        await FallingEdge(dut.clk)
        feeding = sent < len(vectors)
        if feeding:
            dut.obs.value = pack(vectors[sent], obs_fields)
            accepted.append(cycle)
            sent += 1
        dut.valid_in.value = int(feeding)
        await RisingEdge(dut.clk)
        await ReadOnly()
        cycle += 1
        if int(dut.valid_out.value):
            results.append({"cycle": cycle, "action": unpack(int(dut.action.value), act_fields)})
    json.dump({"results": results, "accepted": accepted}, open(os.environ["DWC_RESULTS"], "w"))
