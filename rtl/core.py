"""The DWC core in Amaranth: fixed-point observation in, fixed-point action out, built from the IR.

Vendor-neutral (plain logic and registers, no FPGA primitives). Components, one module each, in
data-flow order: :class:`~.comparators.ComparatorBank` -> :class:`~.lut_layer.LUTLayer` (one per IR
layer) -> :class:`~.popcount.Popcount` (one per action) -> :class:`~.linear.LinearStage` (quantised
MLPs only) -> :class:`~.action_table.ActionTable` (one per action). This module composes them into
:class:`DWCCore` with a valid-in / valid-out handshake and a pipelining knob, emits the Verilog
(:func:`to_verilog`, leaf cells from :mod:`.cells`) and describes ports and register cuts for users
and tools.

Timing contract: ``obs`` and ``valid_in`` are sampled on a rising edge; ``action``/``valid_out``
show the result ``latency`` edges later (``DWCCore.latency``); a new observation may enter every
cycle. ``pipeline=0`` is registered inputs and outputs around one combinational core, latency 2 (with the
shared comparator bank the input register is the bank's first part, its digit compares, which the
observation feeds directly); each extra stage adds a register cut and one cycle of latency: the
first ones after the comparators, after each LUT layer and after the popcounts, the rest split the
popcount adder trees evenly (their depth, not the LUTs, bounds Fmax once the layers are cut).
``input_register=False`` drops the input register: the observation feeds the logic directly and
the first register after it samples it, one cycle less. With ``pipeline=0`` that is the
lowest latency in nanoseconds (one clock period, the whole path observation -> action register;
two balanced periods always take longer), for a core whose observation comes from a register, as
in the serial shell.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Signal, signed, unsigned
from amaranth.hdl import Instance
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from dwc.ir.graph import Graph

from dwc.rtl.action_table import ActionTable
from dwc.rtl.cells import CELLS_VERILOG, check_cells
from dwc.rtl.comparators import COMPARATORS, ComparatorBank, check_comparators, obs_layout
from dwc.rtl.linear import TABLE_BITS, LinearStage, extend, linear_input_shapes, lowering_report, signed_width
from dwc.rtl.lut_layer import LUTLayer
from dwc.rtl.popcount import COMPRESSOR, COMPRESSORS, Popcount, count_width, tree_depth


def to_verilog(core: "wiring.Component", name: str = "dwc_core") -> str:
    """The core (or a design containing it) as one flat Verilog module plus the leaf cells it instantiates.

    Amaranth's own Verilog keeps each component as a module whose ports are split bit by bit (the
    LUTs read single bits); flattening them (Amaranth's RTLIL through the yosys it ships, the same
    steps as ``amaranth.back.verilog`` plus ``flatten``) gives one module with named nets
    (``comparators.bits``, ``layer0.out``, ...), half the text, and faster simulator builds."""
    from amaranth._toolchain.yosys import find_yosys
    from amaranth.back import rtlil
    text = rtlil.convert(core, name=name)
    # the comparator bank stays a module of its own (dwc_comparators), so synthesis can report its
    # area apart from the rest (fpga.synth.area_split); FPGA flows flatten it like the rest
    # (edited in the RTLIL text: the yosys amaranth ships has neither setattr nor rename)
    import re
    bank = f"module \\{name}.comparators\n"
    text = re.sub(rf"\\{re.escape(name)}\.comparators(?=\s)", r"\\dwc_comparators",
                  text.replace(bank, "attribute \\keep_hierarchy 1\n" + bank))
    script = [f"read_rtlil <<rtlil\n{text}\nrtlil", "proc -nomux -norom", "flatten", "opt_clean",
              "write_verilog -norename -noattr"]
    text = find_yosys(lambda ver: ver >= (0, 40)).run(["-q", "-"], "\n".join(script), ignore_warnings=True)
    return text + "".join(body for cell, body in CELLS_VERILOG.items() if f"{cell} #(" in text)


def action_layout(g: Graph) -> data.StructLayout:
    return data.StructLayout({f"a{a}": signed(g.action_format.width) for a in range(g.action_dim)})


class DWCCore(wiring.Component):
    """The whole policy circuit with a valid handshake; ``latency`` cycles from input to output.

    ``scope="network"`` builds only the LUT layers and popcounts (comparator bits in, popcounts
    out), the scope of the published Artix-7 cores, so benchmarks can compare like with like; the
    input register then stands in for the cut after the comparators."""

    def __init__(self, graph: Graph, pipeline: int = 0, cells: str = "native", scope: str = "policy",
                 table_bits: int = TABLE_BITS, compressor: int = COMPRESSOR, comparators: str = COMPARATORS[0],
                 input_register: bool = True):
        check_cells(cells)
        check_comparators(comparators)
        self.comparators = comparators
        if compressor not in COMPRESSORS.values():
            raise ValueError(f"compressor must be one of {sorted(COMPRESSORS.values())}")
        self.table_bits, self.compressor = table_bits, compressor
        if scope not in ("policy", "network"):
            raise ValueError("scope must be 'policy' (observation in, action out) or 'network' (bits in, popcounts out)")
        self.scope = scope
        if not input_register and scope == "network":
            raise ValueError("scope 'network' always registers its input bits")
        self.input_register = input_register
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
        # a bare valid pair, not lib.stream: the core never stalls (no ready), and these are dwc_core.v's port names
        super().__init__({**ports, "valid_in": In(1), "valid_out": Out(1)})

    @property
    def latency(self) -> int:
        return latency_cycles(self.pipeline, self.input_register, network=self.scope == "network")

    def elaborate(self, platform):
        g, cells = self.graph, self.cells
        m = Module()
        stage = 0
        valid = Signal(name="valid_r" if self.input_register else "valid_c")
        m.d["sync" if self.input_register else "comb"] += valid.eq(self.valid_in)

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
            # the full lowering in deep pipelines keeps carry chains in synthesis (fpga.devices.default_options):
            # the carry-out form lets the comparator register pack at the chain's end. The shared one
            # takes the observation's register into the bank: it registers each threshold's result over
            # the lower digits (and the top digit's compares) in its place, so one LUT level is left
            # before the next register (Hopper DWC, pipeline max, ECP5: results/comparators/)
            shared = self.comparators == "shared"
            m.submodules.comparators = bank = ComparatorBank(g, cells, carry=bool(self.tree_cuts),
                                                             lowering=self.comparators,
                                                             registered=shared and self.input_register)
            if shared or not self.input_register:
                m.d.comb += bank.obs.eq(self.obs)
            else:
                obs = Signal(obs_layout(g), name="obs_r")
                m.d.sync += obs.eq(self.obs)
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
        m.d.sync += [self.action.eq(self._action_tables(m, counts, shapes)), self.valid_out.eq(valid)]
        return m

    def _action_tables(self, m: Module, counts, shapes: list) -> Signal:
        """Each action's table, indexed by its popcount (or its last linear layer's code - lo); the
        actions packed as the port is (combinational: the caller registers them)."""
        g, cells = self.graph, self.cells
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
        return action

    def port_description(self) -> dict:
        desc = port_description(self.graph, self.pipeline, self.compressor, self.comparators, self.input_register)
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


def latency_cycles(pipeline: int, input_register: bool = True, network: bool = False) -> int:
    """Cycles from observation in to action out: the output register, the input register and the
    pipeline's cuts; the network scope (bits in, counts out) has no comparator stage, so its first cut
    is not paid."""
    return 1 + input_register + pipeline - (network and pipeline > 0)


def port_description(g: Graph, pipeline: int, compressor: int = COMPRESSOR, comparators: str = COMPARATORS[0],
                     input_register: bool = True) -> dict:
    """What a user wiring the core needs: ports, fixed-point formats, latency (1 + input register +
    pipeline); and the popcount structure, comparator lowering and input register, so tools
    rebuilding the core (:func:`core_from_ports`: board tops, the serial link) match it."""
    return {
        "module": "dwc_core",
        "clock": "clk (rising edge)", "reset": "rst (synchronous, active high)",
        "latency_cycles": latency_cycles(pipeline, input_register), "initiation_interval": 1, "pipeline": pipeline,
        "input_register": input_register,
        "register_cuts": register_cuts(g, pipeline, compressor),
        "popcount_compressor": compressor, "comparators": comparators,
        "inputs": {"obs": [{"field": f"o{d}", "signed": True, "width": f.width, "frac": f.frac,
                            "lsb": sum(x.width for x in g.obs_formats[:d])} for d, f in enumerate(g.obs_formats)],
                   "valid_in": {"width": 1}},
        "outputs": {"action": [{"field": f"a{a}", "signed": True, "width": g.action_format.width,
                                "frac": g.action_format.frac, "lsb": a * g.action_format.width}
                               for a in range(g.action_dim)],
                    "valid_out": {"width": 1}},
    }


def core_from_ports(graph: Graph, ports: dict, pipeline: int | None = None) -> DWCCore:
    """The core (leaf-cell Verilog form) a build's port description ``ports`` (its ``dwc_core.json``)
    was made as, for the designs that embed it (board tops, the serial link); ``pipeline`` overrides
    the build's. Builds from before a choice existed get what was built then."""
    from dwc.rtl.comparators import built_comparators
    from dwc.rtl.popcount import built_compressor
    return DWCCore(graph, ports["pipeline"] if pipeline is None else pipeline, cells="verilog",
                   compressor=built_compressor(ports), comparators=built_comparators(ports),
                   input_register=ports.get("input_register", True))
