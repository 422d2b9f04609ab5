"""Action table: a popcount (or linear code) indexes the fixed-point action."""
from __future__ import annotations

from amaranth import Array, Const, Module, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


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
