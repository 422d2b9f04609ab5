"""An ONNX file read for ``dwc import`` (:mod:`dwc.frontends.onnx_import` walks it): checked, QONNX
nodes lowered to QuantizeLinear/DequantizeLinear by qonnx, and indexed (constants, the producer and
consumers of each tensor), with the quantisers' parameters and constant codes evaluated as
onnxruntime does."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dwc.core.errors import UserError

QRANGE = {"INT8": (-128, 127), "UINT8": (0, 255), "INT16": (-32768, 32767), "UINT16": (0, 65535),
          "INT4": (-8, 7), "UINT4": (0, 15)}


@dataclass
class Quant:
    """A QuantizeLinear's parameters (per tensor or per channel) and its raw code range."""
    scale: np.ndarray  # float64, exact copies of the float32 scales
    zero: np.ndarray  # int64
    qmin: int
    qmax: int


def _per_channel(a, ndim: int, axis: int) -> np.ndarray:
    """A per-tensor (scalar) or per-channel (vector along ``axis``) parameter, shaped to broadcast."""
    a = np.asarray(a)
    shape = [1] * ndim
    if a.size > 1:
        shape[axis] = -1
    return np.reshape(a, shape)


class OnnxModel:
    """The ONNX graph as lookup tables: constants, producers and consumers of each tensor."""

    def __init__(self, path: Path):
        try:
            import onnx
            from onnx import numpy_helper
        except ImportError:
            raise UserError("dwc import needs the onnx package: pip install 'dwc[onnx]'") from None
        if not path.is_file():
            raise UserError(f"{path}: no such file")
        try:
            model = onnx.load(str(path))
            onnx.checker.check_model(model)
        except Exception as e:  # noqa: BLE001 - onnx raises several unrelated types
            raise UserError(f"{path}: not a valid ONNX model ({str(e).splitlines()[0][:160]})") from None
        self.onnx, self.model, self.g = onnx, model, model.graph
        qonnx = [n.op_type for n in model.graph.node if "qonnx" in n.domain or "finn" in n.domain]
        if qonnx:  # QONNX Quant nodes: qonnx's own QuantToQCDQ rewrites them as QuantizeLinear -> Clip -> DQ
            try:
                from qonnx.core.modelwrapper import ModelWrapper
                from qonnx.transformation.qonnx_to_qcdq import QuantToQCDQ
            except ImportError:
                raise UserError(f"{path}: QONNX nodes ({', '.join(sorted(set(qonnx)))}) need the qonnx library: "
                                f"pip install 'dwc[qonnx]'") from None
            model = ModelWrapper(model).transform(QuantToQCDQ()).model
            left = sorted({n.op_type for n in model.graph.node if "qonnx" in n.domain or "finn" in n.domain})
            if left:
                raise UserError(f"{path}: qonnx could not lower {', '.join(left)} to QuantizeLinear/DequantizeLinear")
            self.model, self.g = model, model.graph
        self.consts = {t.name: numpy_helper.to_array(t) for t in self.g.initializer}
        for n in self.g.node:
            if n.op_type == "Constant":
                self.consts[n.output[0]] = numpy_helper.to_array(onnx.helper.get_attribute_value(n.attribute[0]))
        self.consumers: dict[str, list] = {}
        for n in self.g.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.producer = {o: n for n in self.g.node for o in n.output}
        inputs = [i for i in self.g.input if i.name not in self.consts]
        if len(inputs) != 1 or len(self.g.output) != 1:
            raise UserError(f"{path}: expected one input (observation) and one output (action), found "
                            f"{len(inputs)} and {len(self.g.output)}")
        self.input, self.output = inputs[0], self.g.output[0]

    def attr(self, node, name: str, default=None):
        for a in node.attribute:
            if a.name == name:
                return self.onnx.helper.get_attribute_value(a)
        return default

    def const(self, name: str, what: str) -> np.ndarray:
        """A constant input: an initializer, a Constant node, or DequantizeLinear of constants."""
        if name in self.consts:
            return self.consts[name]
        node = self.producer.get(name)
        if node is not None and node.op_type == "DequantizeLinear" and self.is_const(node.output[0]):
            return self.dequantize_const(node)[0]
        raise UserError(f"{what}: input {name!r} must be a constant (initializer or DequantizeLinear of one)")

    def is_const(self, name: str) -> bool:
        if name in self.consts:
            return True
        node = self.producer.get(name)
        return node is not None and node.op_type in ("DequantizeLinear", "QuantizeLinear", "Clip") and \
            all(self.is_const(i) for i in node.input if i)

    def int_codes(self, name: str) -> np.ndarray:
        """Integer codes of a constant: an integer initializer, or QuantizeLinear [-> Clip] of a float one
        (QONNX's QCDQ form of quantised weights), evaluated as onnxruntime does."""
        if name in self.consts:
            return self.consts[name].astype(np.int64)
        node = self.producer[name]
        if node.op_type == "Clip":
            lo = self.consts[node.input[1]] if len(node.input) > 1 and node.input[1] else -np.inf
            hi = self.consts[node.input[2]] if len(node.input) > 2 and node.input[2] else np.inf
            return np.clip(self.int_codes(node.input[0]), lo, hi).astype(np.int64)
        q = self.quant(node)
        x = self.consts[node.input[0]].astype(np.float32)
        axis = self.attr(node, "axis", 1)
        scale, zero = _per_channel(q.scale.astype(np.float32), x.ndim, axis), _per_channel(q.zero, x.ndim, axis)
        return np.clip(np.rint(x / scale) + zero, q.qmin, q.qmax).astype(np.int64)

    def dequantize_const(self, node) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(float32 values as onnxruntime computes them, integer values, scale, axis) of a constant DQ."""
        q = self.int_codes(node.input[0])
        scale = self.consts[node.input[1]].astype(np.float64)
        zero = self.consts[node.input[2]].astype(np.int64) if len(node.input) > 2 and node.input[2] else 0
        axis = self.attr(node, "axis", 1)
        centred = q - _per_channel(zero, q.ndim, axis)
        return centred.astype(np.float32) * _per_channel(scale, q.ndim, axis).astype(np.float32), centred, scale, axis

    def next(self, name: str):
        """The one node reading tensor ``name`` (None at the graph output)."""
        users = self.consumers.get(name, [])
        if name == self.output.name and not users:
            return None
        if len(users) != 1:
            raise UserError(f"tensor {name!r} feeds {len(users)} nodes; dwc import reads a single chain "
                            f"(an MLP), not a branching graph")
        return users[0]

    def quant(self, node) -> Quant:
        if len(node.input) < 2 or node.input[1] not in self.consts:
            raise UserError(f"{node.op_type} {node.name!r}: the scale must be a constant")
        scale = self.consts[node.input[1]].astype(np.float64).reshape(-1)
        zp = self.consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if zp is None:
            zero, kind = np.zeros(1, np.int64), "UINT8"
        else:
            zero = zp.astype(np.int64).reshape(-1)
            kind = zp.dtype.name.upper()
        if kind not in QRANGE:
            raise UserError(f"{node.op_type} {node.name!r}: {kind.lower()} codes are not supported "
                            f"(use one of {', '.join(k.lower() for k in QRANGE)})")
        return Quant(scale, zero, *QRANGE[kind])
