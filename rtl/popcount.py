"""Popcount trees (first-level counters, then adders) and the per-fabric choice of counter."""
from __future__ import annotations

from amaranth import Cat, Const, Module, Signal
from amaranth.hdl import Instance
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from dwc.rtl.cells import check_cells


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


def count_width(n: int) -> int:
    """Bits of a popcount over ``n`` inputs."""
    return max(1, n.bit_length())


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
        check_cells(cells)
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
            if self.cells == "native":
                return a + b
            w = max(len(a), len(b))
            # every partial sum a named net (sum<k>), so the netlist proof of dwc verify --formal cuts
            # the tree at each adder instead of proving a whole unregistered tree in one SAT problem
            y = Signal(w + 1, name=f"sum{adders}")
            if len(a) == len(b):
                m.d.comb += y.eq(a + b)
                adders += 1
                return y
            # Unequal widths: Amaranth emits the narrower operand unextended (a Verilator WIDTH
            # warning); a port connection keeps the explicit zero-extension.
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
