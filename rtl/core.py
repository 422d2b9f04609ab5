"""The DWC core in Amaranth: fixed-point observation in, fixed-point action out, built from the IR.

Vendor-neutral (plain logic and registers, no FPGA primitives). Components, in data-flow order:
comparator bank -> LUT layers -> popcount trees -> action tables, wrapped by :class:`DWCCore` with
a valid-in / valid-out handshake and a pipelining knob.

Timing contract: ``obs`` and ``valid_in`` are sampled on a rising edge; ``action``/``valid_out``
show the result ``latency`` edges later (``DWCCore.latency``); a new observation may enter every
cycle. ``pipeline=0`` is the minimum-latency design (registered inputs and outputs around one
combinational core, latency 2); each extra stage adds a register cut (after the comparators, then
after each LUT layer, then after the popcounts) and one cycle of latency.
"""
from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Signal, signed
from amaranth.hdl import Instance
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

# Leaf cells for the emitted Verilog: plain, vendor-neutral modules whose parameters keep their full
# width, so the output lints clean in Verilator (Amaranth narrows constant operands, which Verilator
# flags as WIDTH warnings). Amaranth's own simulator cannot run Instances, so ``cells="native"``
# builds the same leaves from Amaranth expressions; the Verilator bench checks the Verilog path.
CELLS_VERILOG = {
    "dwc_cmp": """
module dwc_cmp #(parameter integer W = 16, parameter signed [W-1:0] T = 0) (input signed [W-1:0] x, output o);
  assign o = x >= T;
endmodule
""",
    "dwc_lut": """
module dwc_lut #(parameter integer N = 6, parameter [(1 << N) - 1:0] INIT = 0) (input [N-1:0] a, output o);
  assign o = INIT[a];
endmodule
""",
    "dwc_add": """
module dwc_add #(parameter integer W = 1) (input [W-1:0] a, input [W-1:0] b, output [W:0] y);
  assign y = {1'b0, a} + {1'b0, b};
endmodule
""",
}


def to_verilog(core: "DWCCore") -> str:
    """The core as one Verilog file: Amaranth's output plus the leaf cells it instantiates."""
    from amaranth.back import verilog
    text = verilog.convert(core, name="dwc_core")
    return text + "".join(body for name, body in CELLS_VERILOG.items() if f"{name} #(" in text)

from dwc.ir.graph import Graph


def obs_layout(g: Graph) -> data.StructLayout:
    return data.StructLayout({f"o{d}": signed(f.width) for d, f in enumerate(g.obs_formats)})


def action_layout(g: Graph) -> data.StructLayout:
    return data.StructLayout({f"a{a}": signed(g.action_format.width) for a in range(g.action_dim)})


def comparator_bank(m: Module, g: Graph, obs, cells: str) -> Signal:
    """Thermometer bits: bit c = obs[dim_c] >= threshold_c (signed compare against a constant)."""
    bits = Signal(max(1, len(g.comparators)), name="cmp_bits")
    for c, comp in enumerate(g.comparators):
        f = g.obs_formats[comp.dim]
        x = obs[f"o{comp.dim}"]
        if comp.threshold > f.max_int:
            m.d.comb += bits[c].eq(0)
        elif comp.threshold <= f.min_int:
            m.d.comb += bits[c].eq(1)
        elif cells == "native":
            m.d.comb += bits[c].eq(x >= Const(comp.threshold, signed(f.width)))
        else:
            m.submodules[f"cmp{c}"] = Instance("dwc_cmp", p_W=f.width, p_T=Const(comp.threshold, signed(f.width)),
                                               i_x=x, o_o=bits[c])
    return bits


def lut_layer(m: Module, layer, inputs: Signal, name: str, cells: str) -> Signal:
    """Each LUT: its truth table as a constant, one bit selected by the input bits (one LUT of a
    6-input-LUT fabric; one line of Verilog each, so emission stays fast)."""
    out = Signal(len(layer), name=name)
    for j, lut in enumerate(layer):
        if lut.arity == 0:
            m.d.comb += out[j].eq(lut.table & 1)
            continue
        addr = Cat(*(inputs[i] for i in lut.inputs))
        if cells == "native":
            m.d.comb += out[j].eq(Const(lut.table, 1 << lut.arity).bit_select(addr, 1))
        else:
            m.submodules[f"{name}_lut{j}"] = Instance("dwc_lut", p_N=lut.arity, p_INIT=Const(lut.table, 1 << lut.arity),
                                                      i_a=addr, o_o=out[j])
    return out


def popcount(m: Module, bits: list, name: str, cells: str):
    """A balanced adder tree; result width = bits needed for len(bits)."""
    width = max(1, len(bits).bit_length())
    if not bits:
        return Const(0, width)
    adders: list = []

    def add(a, b):
        if len(a) == len(b) or cells == "native":
            return a + b
        # Unequal widths: Amaranth emits the narrower operand unextended (a Verilator WIDTH warning);
        # a port connection keeps the explicit zero-extension.
        w = max(len(a), len(b))
        y = Signal(w + 1)
        m.submodules[f"{name}_add{len(adders)}"] = Instance(
            "dwc_add", p_W=w, i_a=Cat(a, Const(0, w - len(a))), i_b=Cat(b, Const(0, w - len(b))), o_y=y)
        adders.append(y)
        return y

    level = list(bits)
    while len(level) > 1:
        nxt = [add(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    total = Signal(width, name=name)
    m.d.comb += total.eq(level[0])
    return total


class DWCCore(wiring.Component):
    """The whole policy circuit with a valid handshake; ``latency`` cycles from input to output."""

    def __init__(self, graph: Graph, pipeline: int = 0, cells: str = "native"):
        if cells not in ("native", "verilog"):
            raise ValueError("cells must be 'native' (Amaranth simulation) or 'verilog' (emission)")
        self.graph, self.cells = graph, cells
        self.cuts = len(graph.layers) + 2  # after comparators, after each layer, after popcounts
        if not 0 <= pipeline <= self.cuts:
            raise ValueError(f"pipeline must be in 0..{self.cuts} for a {len(graph.layers)}-layer graph")
        self.pipeline = pipeline
        super().__init__({"obs": In(obs_layout(graph)), "valid_in": In(1),
                          "action": Out(action_layout(graph)), "valid_out": Out(1)})

    @property
    def latency(self) -> int:
        return 2 + self.pipeline

    def elaborate(self, platform):
        g = self.graph
        m = Module()
        stage = 0
        obs = Signal(obs_layout(g), name="obs_r")
        valid = Signal(name="valid_r")
        m.d.sync += [obs.eq(self.obs), valid.eq(self.valid_in)]

        def cut(sig, name):
            """Register ``sig`` (and the valid bit) if this cut point is pipelined."""
            nonlocal stage, valid
            stage += 1
            if stage > self.pipeline:
                return sig
            reg = Signal(sig.shape(), name=name)
            v = Signal(name=f"{name}_valid")
            m.d.sync += [reg.eq(sig), v.eq(valid)]
            valid = v
            return reg

        bits = cut(comparator_bank(m, g, obs, self.cells), "cmp_r")
        for l, layer in enumerate(g.layers):
            bits = cut(lut_layer(m, layer, bits, f"layer{l}", self.cells), f"layer{l}_r")
        counts = [popcount(m, [bits[i] for i in grp], f"pop{a}", self.cells) for a, grp in enumerate(g.groups)]
        counts = cut(Cat(*counts), "pop_r")
        offset = 0
        action = Signal(action_layout(g), name="action_c")
        for a, grp in enumerate(g.groups):
            width = max(1, len(grp).bit_length())
            p = counts[offset:offset + width]
            offset += width
            entries = list(g.action_tables[a])
            entries += entries[-1:] * ((1 << width) - len(entries))  # unreachable codes: a full case
            table = Array(Const(v, signed(g.action_format.width)) for v in entries)
            m.d.comb += action[f"a{a}"].eq(table[p])
        m.d.sync += [self.action.eq(action), self.valid_out.eq(valid)]
        return m

    def port_description(self) -> dict:
        """What a user wiring the core needs: ports, fixed-point formats, latency."""
        g = self.graph
        return {
            "module": "dwc_core",
            "clock": "clk (rising edge)", "reset": "rst (synchronous, active high)",
            "latency_cycles": self.latency, "initiation_interval": 1, "pipeline": self.pipeline,
            "inputs": {"obs": [{"field": f"o{d}", "signed": True, "width": f.width, "frac": f.frac,
                                "lsb": sum(x.width for x in g.obs_formats[:d])} for d, f in enumerate(g.obs_formats)],
                       "valid_in": {"width": 1}},
            "outputs": {"action": [{"field": f"a{a}", "signed": True, "width": g.action_format.width,
                                    "frac": g.action_format.frac, "lsb": a * g.action_format.width}
                                   for a in range(g.action_dim)],
                        "valid_out": {"width": 1}},
        }
