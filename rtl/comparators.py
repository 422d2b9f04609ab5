"""Comparator bank: the observation's fixed-point fields against the IR's thresholds, as thermometer bits.

Two lowerings of the same function (``bits[c] = obs[dim_c] >= threshold_c``, signed):

``shared`` (the default): per observation dimension, the field is offset to an unsigned code (sign
bit flipped) and cut into 4-bit digits; each digit is compared once with every constant the
dimension's thresholds need (``digit >= k``, a 4-input function: one LUT4), and these are shared by
all thresholds of the dimension. Each threshold then only combines its digits' results, lowest
first: ``r = (digit > t_digit) | (digit >= t_digit) & r``. Plain logic, no arithmetic, so synthesis
maps it to LUTs on every family whatever its options. In the core the bank is registered
(``registered``): each threshold's result over its lower digits and the top digit's compares are
flip-flops, which take the place of the core's input register (same latency), so one LUT level is
left between them and the comparator bits. Measured on the comparator bank alone (Yosys
0.70; LUT4 sites = LUT4 + 2 per CCU2C): Hopper DWC, 326 comparators, ECP5 1,237 sites (registered as
in the core: 1,351 and 406 flip-flops; one full-width
compare per threshold: 5,449 as carry chains, 1,299 as soft logic), iCE40 1,234 LUT4 (4,562 SB_CARRY),
xc7 1,008 LUT6 (1,379 LUT + 325 CARRY4). results/comparators/ compares the two lowerings placed and routed.

``full``: one full-width compare with a constant per threshold (``dwc_cmp``, or ``dwc_cmp_carry``
whose result is a carry out, for deep pipelines); synthesis picks carry chains or soft logic by its
options (yosys ``-cmp2softlogic`` on ECP5).
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Signal, signed
from amaranth.hdl import Instance
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from dwc.ir.graph import Graph

from dwc.rtl.cells import check_cells

COMPARATORS = ("shared", "full")  # lowerings; the first is the default
DIGIT = 4  # bits per shared digit compare: a 4-input function, one LUT4 (measured best of 2..6 bits, and of mixes)


def check_comparators(lowering: str) -> None:
    if lowering not in COMPARATORS:
        raise ValueError(f"comparators must be one of {', '.join(COMPARATORS)} (got {lowering!r})")


def built_comparators(ports: dict) -> str:
    """The comparator lowering a build's core was made with (its ``dwc_core.json``; builds from
    before the choice existed used ``full``), so every rebuild of that core matches it."""
    return ports.get("comparators", "full")


def obs_layout(g: Graph) -> data.StructLayout:
    """The ``obs`` port: one signed fixed-point field ``o<d>`` per observation dimension."""
    return data.StructLayout({f"o{d}": signed(f.width) for d, f in enumerate(g.obs_formats)})


def at_least(u, k: int, width: int):
    """``u >= k`` for an unsigned ``width``-bit value and a constant, as an AND/OR chain from the
    constant's lowest set bit up (``u[j:0] >= k[j:0]`` is ``u[j] & rest`` where k has a 1, ``u[j] | rest``
    where it has a 0); a constant 0 or 1 outside 1..2**width - 1."""
    if k <= 0:
        return Const(1, 1)
    if k >= 1 << width:
        return Const(0, 1)
    low = (k & -k).bit_length() - 1
    r = u[low]
    for j in range(low + 1, width):
        r = (u[j] & r) if (k >> j) & 1 else (u[j] | r)
    return r


class ComparatorBank(wiring.Component):
    """Thermometer bits: ``bits[c] = obs[dim_c] >= threshold_c`` (signed compare with a constant).
    ``lowering``: ``shared`` or ``full`` (module docstring). ``carry`` (``full`` only): the Verilog
    cell computes each compare as a carry out (``dwc_cmp_carry``), for deep pipelines.
    ``registered`` (``shared`` only): the bank's first part is registered (``sync``): per threshold
    the result over all digits but the top one, and the top digit's compares; the bits come one
    cycle after ``obs``, one LUT level after those registers. The core uses these registers as its
    input register."""

    def __init__(self, graph: Graph, cells: str = "native", carry: bool = False, lowering: str = "shared",
                 registered: bool = False):
        check_cells(cells)
        check_comparators(lowering)
        if registered and lowering != "shared":
            raise ValueError("only the shared lowering registers its digit compares")
        self.graph, self.cells, self.carry, self.lowering = graph, cells, carry, lowering
        self.registered = registered
        super().__init__({"obs": In(obs_layout(graph)), "bits": Out(max(1, len(graph.comparators)))})

    def elaborate(self, platform):
        m = Module()
        digits: dict = {}  # (dim, digit, constant) -> the shared compare's signal
        for c, comp in enumerate(self.graph.comparators):
            f = self.graph.obs_formats[comp.dim]
            x = self.obs[f"o{comp.dim}"]
            if comp.threshold > f.max_int:  # constant comparators survive only in unoptimised graphs
                m.d.comb += self.bits[c].eq(0)
            elif comp.threshold <= f.min_int:
                m.d.comb += self.bits[c].eq(1)
            elif self.lowering == "shared":
                m.d.comb += self.bits[c].eq(self._shared(m, digits, comp.dim, comp.threshold))
            elif self.cells == "native":
                m.d.comb += self.bits[c].eq(x >= Const(comp.threshold, signed(f.width)))
            else:
                m.submodules[f"cmp{c}"] = Instance("dwc_cmp_carry" if self.carry else "dwc_cmp", p_W=f.width,
                                                   p_T=Const(comp.threshold, signed(f.width)), i_x=x, o_o=self.bits[c])
        return m

    def _shared(self, m: Module, digits: dict, dim: int, threshold: int):
        """``obs[dim] >= threshold`` from the dimension's shared digit compares, lowest digit first:
        ``r = ge(digit, t) & (ge(digit, t + 1) | r)`` (``>= t + 1`` implies ``>= t``, so this is
        ``digit > t | digit == t & r`` in a form that maps to one LUT4 per step pair). ``registered``:
        the result over all digits but the top one, and the top digit's compares, are registers."""
        width = self.graph.obs_formats[dim].width
        if (dim, "u") not in digits:  # the unsigned code: signed order = unsigned order with the sign bit flipped
            x = self.obs[f"o{dim}"]
            u = Signal(width, name=f"u{dim}")
            m.d.comb += u.eq(Cat(x[:width - 1], ~x[width - 1]))
            digits[dim, "u"] = u
        u = digits[dim, "u"]
        top = (width - 1) // DIGIT * DIGIT  # the top digit's lowest bit

        def ge(lo: int, k: int):  # digit at bit ``lo`` >= k, one signal per (dimension, digit, k)
            w = min(DIGIT, width - lo)
            if k <= 0 or k >= 1 << w:
                return at_least(u[lo:lo + w], k, w)
            if (dim, lo, k) not in digits:
                s = Signal(name=f"u{dim}_d{lo // DIGIT}_ge{k}")
                m.d["sync" if self.registered and lo == top else "comb"] += s.eq(at_least(u[lo:lo + w], k, w))
                digits[dim, lo, k] = s
            return digits[dim, lo, k]

        def digit(lo: int) -> int:
            return (t >> lo) & ((1 << min(DIGIT, width - lo)) - 1)

        t = threshold + (1 << (width - 1))
        if top == 0:
            return ge(0, digit(0))
        r = ge(0, digit(0))
        for lo in range(DIGIT, top, DIGIT):
            r = ge(lo, digit(lo)) & (ge(lo, digit(lo) + 1) | r)
        if self.registered:  # one register per distinct low part of the dimension's thresholds
            key = (dim, "low", t & ((1 << top) - 1))
            if key not in digits:
                digits[key] = Signal(name=f"u{dim}_low{t & ((1 << top) - 1)}")
                m.d.sync += digits[key].eq(r)
            r = digits[key]
        return ge(top, digit(top)) & (ge(top, digit(top) + 1) | r)
