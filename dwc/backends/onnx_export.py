"""ONNX export of a frozen circuit: float observation in, action out, standard operators only.

The model mirrors the IR stage by stage: quantise (Round is half-to-even like numpy's rint, the
scale a power of two, so exact), comparators (Gather + GreaterOrEqual), each LUT layer as one
Gather of input bits, an address sum and a Gather from the layer's concatenated truth tables
(LUTs narrower than the widest are padded with a constant-0 input), popcounts (ReduceSum) and the
action tables (Gather). Outputs ``action`` (float) and ``popcounts`` (int64).

A quantised MLP's integer linear layers follow the popcounts: MatMul and Add in int64, the rounding
shift as Floor (ties up) or Round (ties to even) of a float64 division by 2**shift (exact: the
sums stay far below 2**53; ONNX's integer Div truncates toward zero, which is not the IR's floor), the clamp as Max/Min in int64;
the last layer's codes minus its ``lo`` index the action tables.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dwc.ir.graph import Graph

OPSET = 17


class _Model:
    """The ONNX graph's nodes and initializers, in the order they are made."""

    def __init__(self):
        from onnx import helper, numpy_helper
        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes, self.inits = [], []

    def const(self, name: str, value) -> str:
        self.inits.append(self.numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attrs) -> str:
        self.nodes.append(self.helper.make_node(op, inputs, [output], **attrs))
        return output


def to_onnx(g: Graph):
    import onnx
    from onnx import TensorProto, helper

    if any(f.width > 24 for f in g.obs_formats) or g.action_format.width > 24:
        raise ValueError("ONNX export keeps fixed-point values in float32: widths must be <= 24")
    m = _Model()  # the stages in the IR's order, each reading the tensor the one before made
    bits = _comparators(m, g, _quantise(m, g))
    zero_col = _zero_column(m)
    x = _popcounts(m, g, _lut_layers(m, g, bits, zero_col), zero_col)
    _actions(m, g, _linear_layers(m, g, x))

    graph = helper.make_graph(
        m.nodes, "dwc_circuit",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["N", g.obs_dim])],
        [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["N", g.action_dim]),
         helper.make_tensor_value_info("popcounts", TensorProto.INT64, ["N", len(g.groups)])],
        m.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="dwc")
    model.ir_version = 8  # readable by onnxruntime releases of the last few years
    onnx.checker.check_model(model)
    return model


def _quantise(m: _Model, g: Graph) -> str:
    """clip(round(obs * 2**frac), min, max), kept in float32 (exact below 2**24)."""
    const, node = m.const, m.node
    scale = const("q_scale", np.array([2.0 ** f.frac for f in g.obs_formats], np.float32))
    lo = const("q_min", np.array([f.min_int for f in g.obs_formats], np.float32))
    hi = const("q_max", np.array([f.max_int for f in g.obs_formats], np.float32))
    rounded = node("Round", [node("Mul", ["obs", scale], "scaled")], "rounded")
    return node("Min", [node("Max", [rounded, lo], "q_lo"), hi], "q")  # Clip takes scalar bounds only


def _comparators(m: _Model, g: Graph, q: str) -> str:
    from onnx import TensorProto
    const, node = m.const, m.node
    dims = const("cmp_dim", np.array([c.dim for c in g.comparators] or [0], np.int64))
    thr = const("cmp_thr", np.array([c.threshold for c in g.comparators] or [0], np.float32))
    bits = node("Cast", [node("GreaterOrEqual", [node("Gather", [q, dims], "cmp_q", axis=1), thr], "cmp_b")],
                "bits_c", to=TensorProto.INT64)
    return bits


def _zero_column(m: _Model) -> str:
    """A (N, 1) column of zeros: the padding input of narrow LUTs."""
    from onnx import TensorProto, helper
    const, node = m.const, m.node
    n = node("Slice", [node("Shape", ["obs"], "obs_shape"), const("i0", np.array([0])), const("i1", np.array([1]))],
             "n")
    return node("ConstantOfShape", [node("Concat", [n, const("one", np.array([1]))], "zshape", axis=0)],
                "zero_col", value=helper.make_tensor("z", TensorProto.INT64, [1], [0]))


def _lut_layers(m: _Model, g: Graph, bits: str, zero_col: str) -> str:
    const, node = m.const, m.node
    for l, layer in enumerate(g.layers):
        width = max(1, max(lut.arity for lut in layer))
        pad = len(g.comparators) if l == 0 else len(g.layers[l - 1])  # index of the zero column
        idx = np.array([lut.inputs + [pad] * (width - lut.arity) for lut in layer], np.int64).reshape(-1)
        tables = np.zeros((len(layer), 1 << width), np.int64)
        for j, lut in enumerate(layer):
            for a in range(1 << lut.arity):
                tables[j, a] = (lut.table >> a) & 1
        ext = node("Concat", [bits, zero_col], f"ext{l}", axis=1)
        sel = node("Gather", [ext, const(f"idx{l}", idx)], f"sel{l}", axis=1)
        sel = node("Reshape", [sel, const(f"shape{l}", np.array([-1, len(layer), width], np.int64))], f"sel3_{l}")
        weighted = node("Mul", [sel, const(f"pow{l}", (1 << np.arange(width)).astype(np.int64))], f"w{l}")
        addr = node("ReduceSum", [weighted, const(f"ax{l}", np.array([2], np.int64))], f"addr{l}", keepdims=0)
        flat = node("Add", [addr, const(f"off{l}", np.arange(len(layer), dtype=np.int64) << width)], f"flat{l}")
        bits = node("Gather", [const(f"tab{l}", tables.reshape(-1)), flat], f"bits{l}", axis=0)
    return bits


def _popcounts(m: _Model, g: Graph, bits: str, zero_col: str) -> str:
    const, node = m.const, m.node
    pops = []
    for a, grp in enumerate(g.groups):
        if grp:
            gb = node("Gather", [bits, const(f"grp{a}", np.array(grp, np.int64))], f"gb{a}", axis=1)
            pc = node("ReduceSum", [gb, const(f"gax{a}", np.array([1], np.int64))], f"pc{a}", keepdims=1)
        else:
            pc = node("Mul", [zero_col, const(f"zero{a}", np.array(0, np.int64))], f"pc{a}")
        pops.append(pc)
    return node("Concat", pops, "popcounts", axis=1)


def _linear_layers(m: _Model, g: Graph, x: str) -> str:
    """A quantised MLP's integer layers; then the last layer's codes minus its ``lo``, the action tables' index."""
    from onnx import TensorProto
    const, node = m.const, m.node
    for k, lin in enumerate(g.linear):
        acc = node("Add", [node("MatMul", [x, const(f"w{k}", np.asarray(lin.weights, np.int64).T)], f"mm{k}"),
                           const(f"b{k}", np.asarray(lin.bias, np.int64))], f"acc{k}")
        if lin.shift > 0 and lin.rounding == "half_even":  # ONNX Round: ties to even
            real = node("Cast", [acc], f"acc_f{k}", to=TensorProto.DOUBLE)
            down = node("Round", [node("Div", [real, const(f"div{k}", np.array(2.0 ** lin.shift))], f"div_acc{k}")],
                        f"round{k}")
            acc = node("Cast", [down], f"shifted{k}", to=TensorProto.INT64)
        elif lin.shift > 0:
            half = node("Add", [acc, const(f"half{k}", np.array(1 << (lin.shift - 1), np.int64))], f"half_acc{k}")
            real = node("Cast", [half], f"acc_f{k}", to=TensorProto.DOUBLE)
            down = node("Floor", [node("Div", [real, const(f"div{k}", np.array(2.0 ** lin.shift))], f"div_acc{k}")],
                        f"floor{k}")
            acc = node("Cast", [down], f"shifted{k}", to=TensorProto.INT64)
        elif lin.shift < 0:
            acc = node("Mul", [acc, const(f"up{k}", np.array(1 << -lin.shift, np.int64))], f"shifted{k}")
        x = node("Min", [node("Max", [acc, const(f"lo{k}", np.array(lin.lo, np.int64))], f"clip_lo{k}"),
                         const(f"hi{k}", np.array(lin.hi, np.int64))], f"codes{k}")
    if g.linear:
        x = node("Sub", [x, const("code_lo", np.array(g.linear[-1].lo, np.int64))], "table_index")
    return x


def _actions(m: _Model, g: Graph, x: str) -> None:
    const, node = m.const, m.node
    acts = []
    for a in range(g.action_dim):
        idx = node("Gather", [x, const(f"act_col{a}", np.array([a], np.int64))], f"act_idx{a}", axis=1)
        table = np.asarray(g.action_tables[a], np.float64) * 2.0 ** -g.action_format.frac
        acts.append(node("Gather", [const(f"act{a}", table.astype(np.float32)), idx], f"act_{a}", axis=0))
    node("Concat", acts, "action", axis=1)


def export(g: Graph, path: Path) -> None:
    import onnx
    onnx.save(to_onnx(g), str(path))
