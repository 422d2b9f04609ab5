"""One layer of the LUT network: each LUT a constant truth table addressed by its input bits."""
from __future__ import annotations

from amaranth import Cat, Const, Module
from amaranth.hdl import Instance
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from dwc.ir.graph import LUT

from dwc.rtl.cells import check_cells


class LUTLayer(wiring.Component):
    """One IR layer: each LUT's truth table as a constant, one bit selected by its input bits."""

    def __init__(self, luts: list[LUT], n_inputs: int, cells: str = "native"):
        check_cells(cells)
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
