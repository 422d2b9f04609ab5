"""Comparator bank: the observation's fixed-point fields against the IR's thresholds, as thermometer bits."""
from __future__ import annotations

from amaranth import Const, Module, signed
from amaranth.hdl import Instance
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from dwc.ir.graph import Graph

from .cells import check_cells


def obs_layout(g: Graph) -> data.StructLayout:
    """The ``obs`` port: one signed fixed-point field ``o<d>`` per observation dimension."""
    return data.StructLayout({f"o{d}": signed(f.width) for d, f in enumerate(g.obs_formats)})


class ComparatorBank(wiring.Component):
    """Thermometer bits: ``bits[c] = obs[dim_c] >= threshold_c`` (signed compare with a constant).
    ``carry``: the Verilog cell computes it as a carry out (``dwc_cmp_carry``), for deep pipelines."""

    def __init__(self, graph: Graph, cells: str = "native", carry: bool = False):
        check_cells(cells)
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
