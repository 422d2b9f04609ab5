"""The DWC core in Amaranth: fixed-point observation in, fixed-point action out, built from the IR.

Vendor-neutral (plain logic and registers, no FPGA primitives). Components, in data-flow order:
:class:`ComparatorBank` -> :class:`LUTLayer` (one per IR layer) -> :class:`Popcount` (one per action)
-> :class:`ActionTable` (one per action), composed by :class:`DWCCore` with a valid-in / valid-out
handshake and a pipelining knob.

Timing contract: ``obs`` and ``valid_in`` are sampled on a rising edge; ``action``/``valid_out``
show the result ``latency`` edges later (``DWCCore.latency``); a new observation may enter every
cycle. ``pipeline=0`` is the minimum-latency design (registered inputs and outputs around one
combinational core, latency 2); each extra stage adds a register cut and one cycle of latency: the
first ones after the comparators, after each LUT layer and after the popcounts, the rest split the
popcount adder trees evenly (their depth, not the LUTs, bounds Fmax once the layers are cut).
"""
from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Signal, signed, unsigned
from amaranth.hdl import Instance, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from dwc.ir.graph import LUT, Graph

# Leaf cells for the emitted Verilog: plain, vendor-neutral modules whose parameters keep their full
# width, so the output lints clean in Verilator (Amaranth narrows constant operands, which Verilator
# flags as WIDTH warnings). Amaranth's own simulator cannot run Instances, so ``cells="native"``
# builds the same leaves from Amaranth expressions; the Verilator bench checks the Verilog path.
CELLS_VERILOG = {
    "dwc_cmp": """
module dwc_cmp #(parameter integer W = 16, parameter signed [W-1:0] T = 0) (input signed [W-1:0] x, output o);
  // x >= T (signed) as an unsigned compare of both offset by 2^(W-1) (= sign bit flipped): FPGA
  // flows can then map it to soft logic instead of a carry chain (yosys -cmp2softlogic on ECP5).
  localparam [W-1:0] U = {~T[W-1], T[W-2:0]};
  wire [W-1:0] u = {~x[W-1], x[W-2:0]};
  assign o = u >= U;
endmodule
""",
    "dwc_cmp_carry": """
module dwc_cmp_carry #(parameter integer W = 16, parameter signed [W-1:0] T = 0) (input signed [W-1:0] x, output o);
  // x >= T as the carry out of u + (2^W - U) (u, U offset as in dwc_cmp): the result is the last sum
  // bit of the carry chain, so a register can pack next to it (ECP5, Hopper DWC at pipeline max:
  // 188 -> 211 MHz, same LUTs); used when the pipeline registers the comparators.
  localparam [W-1:0] U = {~T[W-1], T[W-2:0]};
  localparam [W:0] K = (1 << W) - U;
  wire [W-1:0] u = {~x[W-1], x[W-2:0]};
  wire [W:0] s = {1'b0, u} + K;
  assign o = s[W];
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
    # Signed arithmetic of the quantised MLP's linear layers: the caller sizes W from the value
    # ranges, so every result fits and operands, constants and results all share one width.
    "dwc_sadd": """
module dwc_sadd #(parameter integer W = 2) (input signed [W-1:0] a, input signed [W-1:0] b, output signed [W-1:0] y);
  assign y = a + b;
endmodule
""",
    "dwc_smulc": """
module dwc_smulc #(parameter integer W = 2, parameter signed [W-1:0] C = 0) (input signed [W-1:0] a, output signed [W-1:0] y);
  assign y = a * C;
endmodule
""",
    "dwc_requant": """
module dwc_requant #(parameter integer W = 2, parameter integer S = 0, parameter integer OW = 2,
                     parameter integer EVEN = 0, parameter signed [W-1:0] HALF = 0,
                     parameter signed [W-1:0] LO = 0, parameter signed [W-1:0] HI = 0)
                    (input signed [W-1:0] a, output signed [OW-1:0] y);
  // round at 2^S, ties up (HALF = 2^(S-1)) or to even (HALF = 2^(S-1) - 1 plus the floor's lowest
  // bit a[S]); S = 0: HALF = 0, no rounding. Then clamp to LO..HI.
  wire signed [W-1:0] odd = {{(W-1){1'b0}}, (EVEN != 0 && S > 0) ? a[S] : 1'b0};
  wire signed [W-1:0] r = (a + HALF + odd) >>> S;
  assign y = r < LO ? LO[OW-1:0] : r > HI ? HI[OW-1:0] : r[OW-1:0];
endmodule
""",
}
CELLS = ("native", "verilog")


def _check_cells(cells: str) -> None:
    if cells not in CELLS:
        raise ValueError("cells must be 'native' (Amaranth simulation) or 'verilog' (emission)")


def to_verilog(core: "wiring.Component", name: str = "dwc_core") -> str:
    """The core (or a design containing it) as one flat Verilog module plus the leaf cells it instantiates.

    Amaranth's own Verilog keeps each component as a module whose ports are split bit by bit (the
    LUTs read single bits); flattening them (Amaranth's RTLIL through the yosys it ships, the same
    steps as ``amaranth.back.verilog`` plus ``flatten``) gives one module with named nets
    (``comparators.bits``, ``layer0.out``, ...), half the text, and faster simulator builds."""
    from amaranth._toolchain.yosys import find_yosys
    from amaranth.back import rtlil
    text = rtlil.convert(core, name=name)
    script = [f"read_rtlil <<rtlil\n{text}\nrtlil", "proc -nomux -norom", "flatten", "opt_clean",
              "write_verilog -norename -noattr"]
    text = find_yosys(lambda ver: ver >= (0, 40)).run(["-q", "-"], "\n".join(script), ignore_warnings=True)
    return text + "".join(body for cell, body in CELLS_VERILOG.items() if f"{cell} #(" in text)


def obs_layout(g: Graph) -> data.StructLayout:
    return data.StructLayout({f"o{d}": signed(f.width) for d, f in enumerate(g.obs_formats)})


def action_layout(g: Graph) -> data.StructLayout:
    return data.StructLayout({f"a{a}": signed(g.action_format.width) for a in range(g.action_dim)})


def count_width(n: int) -> int:
    """Bits of a popcount over ``n`` inputs."""
    return max(1, n.bit_length())


class ComparatorBank(wiring.Component):
    """Thermometer bits: ``bits[c] = obs[dim_c] >= threshold_c`` (signed compare with a constant).
    ``carry``: the Verilog cell computes it as a carry out (``dwc_cmp_carry``), for deep pipelines."""

    def __init__(self, graph: Graph, cells: str = "native", carry: bool = False):
        _check_cells(cells)
        self.graph, self.cells, self.carry = graph, cells, carry
        super().__init__({"obs": In(obs_layout(graph)), "bits": Out(max(1, len(graph.comparators)))})

    def elaborate(self, platform):
        m = Module()
        for c, comp in enumerate(self.graph.comparators):
            f = self.graph.obs_formats[comp.dim]
            x = self.obs[f"o{comp.dim}"]
            if comp.threshold > f.max_int:  # constant comparators survive only in unoptimised graphs
                m.d.comb += self.bits[c].eq(0)
            elif comp.threshold <= f.min_int:
                m.d.comb += self.bits[c].eq(1)
            elif self.cells == "native":
                m.d.comb += self.bits[c].eq(x >= Const(comp.threshold, signed(f.width)))
            else:
                m.submodules[f"cmp{c}"] = Instance("dwc_cmp_carry" if self.carry else "dwc_cmp", p_W=f.width,
                                                   p_T=Const(comp.threshold, signed(f.width)), i_x=x, o_o=self.bits[c])
        return m


class LUTLayer(wiring.Component):
    """One IR layer: each LUT's truth table as a constant, one bit selected by its input bits."""

    def __init__(self, luts: list[LUT], n_inputs: int, cells: str = "native"):
        _check_cells(cells)
        self.luts, self.cells = luts, cells
        super().__init__({"inp": In(max(1, n_inputs)), "out": Out(max(1, len(luts)))})

    def elaborate(self, platform):
        m = Module()
        for j, lut in enumerate(self.luts):
            if lut.arity == 0:
                m.d.comb += self.out[j].eq(lut.table & 1)
                continue
            addr = Cat(*(self.inp[i] for i in lut.inputs))
            if self.cells == "native":
                m.d.comb += self.out[j].eq(Const(lut.table, 1 << lut.arity).bit_select(addr, 1))
            else:
                m.submodules[f"lut{j}"] = Instance("dwc_lut", p_N=lut.arity, p_INIT=Const(lut.table, 1 << lut.arity),
                                                   i_a=addr, o_o=self.out[j])
        return m


COMPRESSOR = 6  # inputs per first-level counter on LUT6 fabrics: one 6-input LUT per output bit
# Per fabric, measured (ECP5, Hopper DWC, pipeline max): a 6-input function costs 4 LUT4 + 3 muxes on
# a LUT4 fabric, so full adders (3:2, two 3-input LUTs) win there: 1,400 -> 1,232 LUT4 (LUT4-trained
# circuit) and 2,679 -> 2,511 (LUT6-trained), 246 -> 251 MHz, one more adder level. On xc7 6:3 stays
# (LUT6-trained Hopper DWC: 850 LUT6 with 6:3, 979 with 3:2).
COMPRESSORS = {4: 3, 6: 6}  # native LUT inputs of the fabric -> first-level counter size


def built_compressor(ports: dict) -> int:
    """The first-level popcount counter a build's core was made with (its ``dwc_core.json``; builds
    from before the choice existed used 6:3), so every rebuild of that core matches it."""
    return ports.get("popcount_compressor", COMPRESSOR)


def compressor_for(fabric_lut_inputs: int) -> int:
    """The first-level popcount counter for a fabric with ``fabric_lut_inputs``-input LUTs."""
    return COMPRESSORS[fabric_lut_inputs]


def tree_depth(n: int, compressor: int = COMPRESSOR) -> int:
    """Levels of a popcount tree over ``n`` inputs: one of counters, then pairwise adders."""
    return 0 if n <= 1 else 1 + (-(-n // compressor) - 1).bit_length()


def counter_table(k: int, bit: int) -> int:
    """Truth table of output ``bit`` of the popcount of ``k`` inputs (address bit i = input i)."""
    return sum(((bin(a).count("1") >> bit) & 1) << a for a in range(1 << k))


class Popcount(wiring.Component):
    """Number of set bits among ``n`` inputs: ``compressor``-input counters (6:3 on LUT6 fabrics, each
    output bit one 6-input function, a LUT6 on Xilinx: ~0.5 LUT per input instead of ~2.5 for a
    carry-chain adder tree on 1-bit operands; 3:2 full adders on LUT4 fabrics), then a balanced tree
    of adders over their counts.

    ``cuts``: adder levels (1-based) after which the partial sums are registered, each adding one
    cycle. ``depth`` >= the tree's own depth lets trees of different sizes share one cut schedule
    (a finished tree's sum is registered at the later cuts too, so all counts stay aligned)."""

    def __init__(self, n: int, cells: str = "native", cuts: tuple[int, ...] = (), depth: int | None = None,
                 compressor: int = COMPRESSOR):
        _check_cells(cells)
        self.n, self.cells, self.cuts, self.compressor = n, cells, tuple(sorted(set(cuts))), compressor
        self.depth = tree_depth(n, compressor) if depth is None else depth
        if self.depth < tree_depth(n, compressor) or any(not 1 <= c <= self.depth for c in self.cuts):
            raise ValueError(f"cuts {self.cuts} / depth {self.depth} do not fit a tree over {n} inputs")
        super().__init__({"inp": In(max(1, n)), "count": Out(count_width(n))})

    @property
    def latency(self) -> int:
        return len(self.cuts)

    def elaborate(self, platform):
        m = Module()
        if self.n == 0:
            return m  # count stays 0 (no registers needed: it is constant)
        adders = 0

        def add(a, b):
            nonlocal adders
            if len(a) == len(b) or self.cells == "native":
                return a + b
            # Unequal widths: Amaranth emits the narrower operand unextended (a Verilator WIDTH
            # warning); a port connection keeps the explicit zero-extension.
            w = max(len(a), len(b))
            y = Signal(w + 1, name=f"sum{adders}")
            m.submodules[f"add{adders}"] = Instance(
                "dwc_add", p_W=w, i_a=Cat(a, Const(0, w - len(a))), i_b=Cat(b, Const(0, w - len(b))), o_y=y)
            adders += 1
            return y

        def count(chunk):
            if len(chunk) == 1:
                return chunk[0]
            if self.cells == "native":
                return sum(chunk[1:], chunk[0])
            out = Signal(count_width(len(chunk)), name=f"cnt{adders}")
            for b in range(len(out)):
                m.submodules[f"cnt{adders}_{b}"] = Instance(
                    "dwc_lut", p_N=len(chunk), p_INIT=Const(counter_table(len(chunk), b), 1 << len(chunk)),
                    i_a=Cat(*chunk), o_o=out[b])
            return out

        bits = [self.inp[i] for i in range(self.n)]
        level = bits
        for depth in range(1, self.depth + 1):
            if depth == 1:
                level = []
                for i in range(0, self.n, self.compressor):
                    level.append(count(bits[i:i + self.compressor]))
                    adders += 1
            elif len(level) > 1:
                nxt = [add(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
                level = nxt + level[-1:] if len(level) % 2 else nxt
            if depth in self.cuts:
                regs = [Signal(len(x), name=f"l{depth}_{i}") for i, x in enumerate(level)]
                m.d.sync += [r.eq(x) for r, x in zip(regs, level)]
                level = regs
        m.d.comb += self.count.eq(level[0])
        return m


class ActionTable(wiring.Component):
    """Popcount -> fixed-point action: the IR's per-action table (head, tanh and bounds folded in)."""

    def __init__(self, entries: list[int], count_bits: int, width: int):
        self.entries, self.width = list(entries), width
        super().__init__({"count": In(count_bits), "action": Out(signed(width))})

    def elaborate(self, platform):
        m = Module()
        entries = self.entries + self.entries[-1:] * ((1 << len(self.count)) - len(self.entries))
        table = Array(Const(v, signed(self.width)) for v in entries)  # unreachable codes: a full case
        m.d.comb += self.action.eq(table[self.count])
        return m


def signed_width(lo: int, hi: int) -> int:
    """Bits of a signed value holding every integer in lo..hi."""
    return max(lo.bit_length(), hi.bit_length()) + 1


def code_shape(lo: int, hi: int):
    """The shape of codes in lo..hi: unsigned when none is negative (a ReLU layer's), else signed."""
    return unsigned(max(1, hi.bit_length())) if lo >= 0 else signed(signed_width(lo, hi))


def shape_range(sh) -> tuple[int, int]:
    """The integers a shape holds."""
    return (-(1 << (sh.width - 1)), (1 << (sh.width - 1)) - 1) if sh.signed else (0, (1 << sh.width) - 1)


def extend(v: Value, signed_: bool, width: int) -> Value:
    """``v`` sign- or zero-extended to ``width`` bits by explicit concatenation (lint-clean)."""
    fill = v[-1].replicate(width - len(v)) if signed_ else Const(0, width - len(v))
    return Cat(v, fill) if width > len(v) else v


TABLE_BITS = 8  # default: neurons reading at most this many input bits become lookup tables


def neuron_table(lin, j: int, shapes: list) -> list[int]:
    """LogicNets-style enumeration of neuron ``j``: the reference executor's output code for every
    value of the inputs it reads (nonzero weights), addressed by their bits concatenated in input order."""
    from dataclasses import replace

    import numpy as np

    from dwc.ir.reference import linear_layer
    reads = [i for i, w in enumerate(lin.weights[j]) if w]
    addr = np.arange(1 << sum(shapes[i].width for i in reads), dtype=np.int64)
    x, lsb = np.zeros((len(addr), len(shapes)), np.int64), 0
    for i in reads:
        width = shapes[i].width
        v = (addr >> lsb) & ((1 << width) - 1)
        x[:, i] = v - ((v >> (width - 1)) << width) if shapes[i].signed else v  # two's complement
        lsb += width
    return linear_layer(replace(lin, weights=[lin.weights[j]], bias=[lin.bias[j]]), x)[:, 0].tolist()


def neuron_lowering(lin, in_shapes: list, table_bits: int) -> list[tuple[str, int]]:
    """("constant" | "table" | "arithmetic", input bits read) for each neuron of a linear layer."""
    out = []
    for row in lin.weights:
        bits = sum(sh.width for sh, w in zip(in_shapes, row) if w)
        out.append(("constant" if bits == 0 else "table" if bits <= table_bits else "arithmetic", bits))
    return out


def linear_input_shapes(g: Graph) -> list[list]:
    """The input shapes of each linear layer: the popcounts, then the previous layer's codes."""
    shapes, out = [unsigned(count_width(len(grp))) for grp in g.groups], []
    for lin in g.linear:
        out.append(shapes)
        shapes = [code_shape(lin.lo, lin.hi)] * lin.outputs
    return out


def lowering_report(g: Graph, table_bits: int) -> list[dict]:
    """Per linear layer: how many neurons became lookup tables and why (for dwc_core.json)."""
    report = []
    for k, (lin, shapes) in enumerate(zip(g.linear, linear_input_shapes(g))):
        lowered = neuron_lowering(lin, shapes, table_bits)
        kinds = [kind for kind, _ in lowered]
        report.append({"layer": k, "neurons": len(kinds), "table": kinds.count("table"),
                       "arithmetic": kinds.count("arithmetic"), "constant": kinds.count("constant"),
                       "input_bits_per_neuron": sorted({b for _, b in lowered}),
                       "rule": f"lookup tables (LogicNets style) where a neuron reads <= {table_bits} input bits "
                               f"(fan-in x bits: one table of 2^bits entries per output bit), else "
                               f"constant-coefficient arithmetic"})
    return report


class LinearStage(wiring.Component):
    """One IR linear layer (quantised MLP), lowered neuron by neuron in one of two ways:

    - ``table`` (LogicNets style): a neuron reading at most ``table_bits`` input bits (fan-in x bits)
      is enumerated into one lookup table per output bit: few LUTs, one LUT level when <= 6 bits;
    - ``arithmetic``: constant-coefficient dot product, rounding shift and clamp; with
      ``cells="verilog"`` a balanced tree of leaf cells at one width per neuron, sized from the
      inputs' ranges so nothing overflows (lint-clean); synthesis builds shift-and-add trees.
    ``lowering`` lists the choice per neuron."""

    def __init__(self, lin, in_shapes: list, cells: str = "native", table_bits: int = TABLE_BITS):
        _check_cells(cells)
        self.lin, self.in_shapes, self.cells = lin, in_shapes, cells
        self.out_shape = code_shape(lin.lo, lin.hi)
        self.lowering = neuron_lowering(lin, in_shapes, table_bits)
        super().__init__({"inp": In(sum(sh.width for sh in in_shapes)),
                          "out": Out(lin.outputs * self.out_shape.width)})

    def _neuron_table(self, m: Module, j: int, xs: list) -> Value:
        row = self.lin.weights[j]
        entries = neuron_table(self.lin, j, self.in_shapes)
        y = Signal(self.out_shape, name=f"y{j}")
        if len(entries) == 1:  # reads nothing: a constant
            m.d.comb += y.eq(entries[0])
            return y
        addr = Cat(*(x for x, w in zip(xs, row) if w))
        if self.cells == "native":
            m.d.comb += y.eq(Array(Const(v, self.out_shape) for v in entries)[addr])
            return y
        mask = (1 << self.out_shape.width) - 1
        for b in range(self.out_shape.width):
            init = sum((((v & mask) >> b) & 1) << a for a, v in enumerate(entries))
            m.submodules[f"n{j}_lut{b}"] = Instance("dwc_lut", p_N=len(addr), p_INIT=Const(init, len(entries)),
                                                    i_a=addr, o_o=y[b])
        return y

    def _neuron_cells(self, m: Module, j: int, xs: list, row, bias: int) -> Value:
        lin = self.lin
        up = max(0, -lin.shift)  # a left shift folds into the constants
        row, bias, s = [w << up for w in row], bias << up, max(0, lin.shift)
        even = lin.rounding == "half_even" and s > 0
        half = (1 << (s - 1)) - even if s else 0
        terms = [(x, sh, w) for x, sh, w in zip(xs, self.in_shapes, row) if w]
        lows = [min(w * r for r in shape_range(sh)) for _, sh, w in terms]
        highs = [max(w * r for r in shape_range(sh)) for _, sh, w in terms]
        lo, hi = sum(lows), sum(highs)  # every term's range holds 0, so partial sums stay inside
        width = signed_width(min(lo, bias + lo, lin.lo, 0), max(hi, bias + hi + half + even, lin.hi, 0))
        level = [Const(bias, signed(width))]
        for i, (x, sh, w) in enumerate(terms):
            xw = extend(x, sh.signed, width)
            if w != 1:
                y = Signal(signed(width), name=f"n{j}_t{i}")
                m.submodules[f"n{j}_mul{i}"] = Instance("dwc_smulc", p_W=width, p_C=Const(w, signed(width)),
                                                        i_a=xw, o_y=y)
                xw = y
            level.append(xw)
        adds = 0
        while len(level) > 1:  # balanced: log2(fan-in) adders deep
            nxt = []
            for a, b in zip(level[::2], level[1::2]):
                y = Signal(signed(width), name=f"n{j}_s{adds}")
                m.submodules[f"n{j}_add{adds}"] = Instance("dwc_sadd", p_W=width, i_a=a, i_b=b, o_y=y)
                nxt.append(y)
                adds += 1
            level = nxt + level[len(level) - len(level) % 2:]
        y = Signal(self.out_shape, name=f"y{j}")
        m.submodules[f"n{j}_requant"] = Instance(
            "dwc_requant", p_W=width, p_S=s, p_OW=self.out_shape.width, p_EVEN=int(even),
            p_HALF=Const(half, signed(width)),
            p_LO=Const(lin.lo, signed(width)), p_HI=Const(lin.hi, signed(width)), i_a=level[0], o_y=y)
        return y

    def elaborate(self, platform):
        m = Module()
        raw, xs, lsb = [], [], 0  # each input's bits, and (for the Amaranth arithmetic) its signed view
        for sh in self.in_shapes:
            raw.append(self.inp[lsb:lsb + sh.width])
            xs.append(raw[-1].as_signed() if sh.signed else raw[-1])
            lsb += sh.width
        w_out = self.out_shape.width
        for j, (row, b) in enumerate(zip(self.lin.weights, self.lin.bias)):
            if self.lowering[j][0] in ("table", "constant"):  # a constant is a table of one entry
                y = self._neuron_table(m, j, raw)
            elif self.cells == "verilog":
                y = self._neuron_cells(m, j, raw, row, b)
            else:
                y = self._neuron_native(m, j, xs, row, b)
            m.d.comb += self.out[j * w_out:(j + 1) * w_out].eq(y)
        return m

    def _neuron_native(self, m: Module, j: int, xs: list, row, b: int) -> Value:
        """Amaranth arithmetic (simulation): the same function as the leaf-cell tree."""
        acc = Const(b, signed(max(2, abs(b).bit_length() + 1)))
        for x, w in zip(xs, row):
            if w:
                acc = acc + x * Const(w, signed(abs(w).bit_length() + 1))
        sh = self.lin.shift
        if sh <= 0:
            r = acc << -sh
        elif self.lin.rounding == "half_even":  # ties to even: the floor's lowest bit breaks them
            r = (acc + ((1 << (sh - 1)) - 1) + acc[min(sh, len(acc) - 1)]) >> sh  # beyond: the sign
        else:
            r = (acc + (1 << (sh - 1))) >> sh  # >> on a signed value floors
        y = Signal(self.out_shape, name=f"y{j}")
        with m.If(r < self.lin.lo):
            m.d.comb += y.eq(self.lin.lo)
        with m.Elif(r > self.lin.hi):
            m.d.comb += y.eq(self.lin.hi)
        with m.Else():
            m.d.comb += y.eq(r)
        return y


class DWCCore(wiring.Component):
    """The whole policy circuit with a valid handshake; ``latency`` cycles from input to output.

    ``scope="network"`` builds only the LUT layers and popcounts (comparator bits in, popcounts
    out), the scope of the published Artix-7 cores, so benchmarks can compare like with like; the
    input register then stands in for the cut after the comparators."""

    def __init__(self, graph: Graph, pipeline: int = 0, cells: str = "native", scope: str = "policy",
                 table_bits: int = TABLE_BITS, compressor: int = COMPRESSOR):
        _check_cells(cells)
        if compressor not in COMPRESSORS.values():
            raise ValueError(f"compressor must be one of {sorted(COMPRESSORS.values())}")
        self.table_bits, self.compressor = table_bits, compressor
        if scope not in ("policy", "network"):
            raise ValueError("scope must be 'policy' (observation in, action out) or 'network' (bits in, popcounts out)")
        self.scope = scope
        self.graph, self.cells = graph, cells
        self.tree_depth = max_tree_depth(graph, compressor)
        most = max_pipeline(graph, compressor)
        if not 0 <= pipeline <= most:
            raise ValueError(f"pipeline must be in 0..{most} for this graph ({len(graph.layers)} layers, popcount "
                             f"trees {self.tree_depth} adder levels deep)")
        self.pipeline = pipeline
        self.tree_cuts = tree_cuts(graph, pipeline, compressor)
        if scope == "network" and graph.linear:
            raise ValueError("scope 'network' is for LUT networks (no linear layers)")
        if scope == "policy":
            ports = {"obs": In(obs_layout(graph)), "action": Out(action_layout(graph))}
        else:
            ports = {"bits": In(max(1, len(graph.comparators))),
                     "counts": Out(sum(count_width(len(grp)) for grp in graph.groups))}
        super().__init__({**ports, "valid_in": In(1), "valid_out": Out(1)})

    @property
    def latency(self) -> int:
        return 2 + self.pipeline - (self.scope == "network" and self.pipeline > 0)

    def elaborate(self, platform):
        g, cells = self.graph, self.cells
        m = Module()
        stage = 0
        valid = Signal(name="valid_r")
        m.d.sync += valid.eq(self.valid_in)

        def cut(sig, name):
            """Register ``sig`` (and the valid bit) if this cut point is pipelined."""
            nonlocal stage, valid
            stage += 1
            if stage > self.pipeline:
                return sig
            reg = Signal(len(sig), name=name)
            v = Signal(name=f"{name}_valid")
            m.d.sync += [reg.eq(sig), v.eq(valid)]
            valid = v
            return reg

        if self.scope == "policy":
            obs = Signal(obs_layout(g), name="obs_r")
            m.d.sync += obs.eq(self.obs)
            # deep pipelines keep carry chains in synthesis (fpga.synth.default_options): the carry-out
            # form lets the comparator register pack at the chain's end
            m.submodules.comparators = bank = ComparatorBank(g, cells, carry=bool(self.tree_cuts))
            m.d.comb += bank.obs.eq(obs)
            bits = cut(bank.bits, "cmp_r")
        else:
            bits = Signal(len(self.bits), name="bits_r")
            m.d.sync += bits.eq(self.bits)
            stage += 1  # the input register is the cut after the comparators
        for l, luts in enumerate(g.layers):
            m.submodules[f"layer{l}"] = layer = LUTLayer(luts, len(bits), cells)
            m.d.comb += layer.inp.eq(bits)
            bits = cut(layer.out, f"layer{l}_r")
        counts = []
        for a, grp in enumerate(g.groups):
            m.submodules[f"pop{a}"] = pop = Popcount(len(grp), cells, self.tree_cuts, self.tree_depth, self.compressor)
            if grp:
                m.d.comb += pop.inp.eq(Cat(*(bits[i] for i in grp)))
            counts.append(pop.count)
        for j in range(len(self.tree_cuts)):  # the valid bit follows the adder trees' registers
            v = Signal(name=f"pop_valid{j}")
            m.d.sync += v.eq(valid)
            valid = v
        counts = cut(Cat(*counts), "pop_r")
        if self.scope == "network":
            m.d.sync += [self.counts.eq(counts), self.valid_out.eq(valid)]
            return m
        shapes = [unsigned(count_width(len(grp))) for grp in g.groups]
        for k, (lin, in_shapes) in enumerate(zip(g.linear, linear_input_shapes(g))):
            m.submodules[f"linear{k}"] = dense = LinearStage(lin, in_shapes, cells, self.table_bits)
            m.d.comb += dense.inp.eq(counts)
            counts, shapes = cut(dense.out, f"linear{k}_r"), [dense.out_shape] * lin.outputs
        lo = g.linear[-1].lo if g.linear else 0
        action = Signal(action_layout(g), name="action_c")
        offset = 0
        for a in range(g.action_dim):
            width = shapes[a].width
            index = Signal(max(1, (g.table_size(a) - 1).bit_length()), name=f"index{a}")
            code = counts[offset:offset + width]
            if not g.linear:
                m.d.comb += index.eq(code)
            elif cells == "native":
                m.d.comb += index.eq((code.as_signed() if shapes[a].signed else code) - lo)
            else:  # code - lo in 0..table size, through a leaf cell of one width (lint-clean)
                w = signed_width(min(lo, -lo, 0), max(g.linear[-1].hi - lo, -lo, 0))
                d = Signal(signed(w), name=f"index{a}_d")
                m.submodules[f"index{a}_sub"] = Instance("dwc_sadd", p_W=w, i_a=extend(code, shapes[a].signed, w),
                                                          i_b=Const(-lo, signed(w)), o_y=d)
                m.d.comb += index.eq(d[:len(index)])
            m.submodules[f"table{a}"] = table = ActionTable(g.action_tables[a], len(index), g.action_format.width)
            m.d.comb += [table.count.eq(index), action[f"a{a}"].eq(table.action)]
            offset += width
        m.d.sync += [self.action.eq(action), self.valid_out.eq(valid)]
        return m

    def port_description(self) -> dict:
        desc = port_description(self.graph, self.pipeline, self.compressor)
        if self.graph.linear:
            desc["linear_lowering"] = lowering_report(self.graph, self.table_bits)
        if self.scope == "network":
            offsets = [0]
            for grp in self.graph.groups:
                offsets.append(offsets[-1] + count_width(len(grp)))
            desc.update(scope="network", latency_cycles=self.latency,
                        inputs={"bits": [{"field": "bits", "signed": False, "width": len(self.bits), "frac": 0,
                                          "lsb": 0}], "valid_in": {"width": 1}},
                        outputs={"counts": [{"field": f"p{a}", "signed": False, "width": count_width(len(grp)),
                                             "frac": 0, "lsb": offsets[a]} for a, grp in enumerate(self.graph.groups)],
                                 "valid_out": {"width": 1}})
        return desc


def standard_cuts(g: Graph) -> int:
    """Register cuts before any inside the adder trees: comparators, each LUT layer, popcounts, each linear layer."""
    return len(g.layers) + 2 + len(g.linear)


def max_tree_depth(g: Graph, compressor: int = COMPRESSOR) -> int:
    """Levels of the deepest popcount tree: the trees share one register schedule."""
    return max((tree_depth(len(grp), compressor) for grp in g.groups), default=0)


def tree_cuts(g: Graph, pipeline: int, compressor: int = COMPRESSOR) -> tuple[int, ...]:
    """Adder levels registered inside the popcount trees: the stages beyond the standard cuts split
    the trees into equal runs of levels."""
    depth = max_tree_depth(g, compressor)
    extra = max(0, pipeline - standard_cuts(g))
    return tuple(round(depth * j / (extra + 1)) for j in range(1, extra + 1))


def register_cuts(g: Graph, pipeline: int, compressor: int = COMPRESSOR) -> list[str]:
    """Where the ``pipeline`` register stages sit, in data-flow order (for reports and users)."""
    standard = ["comparators", *(f"layer{l}" for l in range(len(g.layers))), "popcounts",
                *(f"linear{k}" for k in range(len(g.linear)))]
    first = standard[:min(pipeline, len(standard))]
    if "popcounts" not in first:
        return first
    i = first.index("popcounts")
    return first[:i] + [f"adder level {c}" for c in tree_cuts(g, pipeline, compressor)] + first[i:]


def max_pipeline(g: Graph, compressor: int = COMPRESSOR) -> int:
    """Most register cuts a graph takes: the standard ones, then one per inner adder level."""
    return standard_cuts(g) + max(0, max_tree_depth(g, compressor) - 1)


def data_ports(ports: dict) -> tuple[str, str]:
    """Names of the data input and output ports (obs/action, or bits/counts for the network scope)."""
    return (next(k for k in ports["inputs"] if k != "valid_in"), next(k for k in ports["outputs"] if k != "valid_out"))


def port_bits(ports: dict) -> tuple[int, int]:
    """Widths of the packed input and output words described by a port description."""
    i, o = data_ports(ports)
    return sum(f["width"] for f in ports["inputs"][i]), sum(f["width"] for f in ports["outputs"][o])


def port_description(g: Graph, pipeline: int, compressor: int = COMPRESSOR) -> dict:
    """What a user wiring the core needs: ports, fixed-point formats, latency (2 + pipeline); and the
    popcount structure, so tools rebuilding the core (board tops, the energy model) match it."""
    return {
        "module": "dwc_core",
        "clock": "clk (rising edge)", "reset": "rst (synchronous, active high)",
        "latency_cycles": 2 + pipeline, "initiation_interval": 1, "pipeline": pipeline,
        "register_cuts": register_cuts(g, pipeline, compressor),
        "popcount_compressor": compressor,
        "inputs": {"obs": [{"field": f"o{d}", "signed": True, "width": f.width, "frac": f.frac,
                            "lsb": sum(x.width for x in g.obs_formats[:d])} for d, f in enumerate(g.obs_formats)],
                   "valid_in": {"width": 1}},
        "outputs": {"action": [{"field": f"a{a}", "signed": True, "width": g.action_format.width,
                                "frac": g.action_format.frac, "lsb": a * g.action_format.width}
                               for a in range(g.action_dim)],
                    "valid_out": {"width": 1}},
    }
