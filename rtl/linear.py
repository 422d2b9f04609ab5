"""Linear layers of quantised MLPs: per-neuron lowering (lookup tables or constant-coefficient
arithmetic) and the signed-code shapes they pass between stages."""
from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Signal, signed, unsigned
from amaranth.hdl import Instance, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from dwc.core.defaults import TABLE_BITS  # neurons reading at most this many input bits become tables
from dwc.ir.graph import Graph, Linear

from dwc.rtl.cells import check_cells
from dwc.rtl.popcount import count_width


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


def neuron_table(lin: Linear, j: int, shapes: list) -> list[int]:
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


def neuron_lowering(lin: Linear, in_shapes: list, table_bits: int) -> list[tuple[str, int]]:
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

    def __init__(self, lin: Linear, in_shapes: list, cells: str = "native", table_bits: int = TABLE_BITS):
        check_cells(cells)
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
