"""ONNX import: a quantised MLP exported by another tool (QDQ form) -> the integer IR.

Read: one float input (N, D) and one float output (N, A), and between them a chain
    QuantizeLinear -> DequantizeLinear            (the observation's quantiser)
    MatMul | Gemm, Add/Sub of constants, Relu     (affine pieces), each run closed by
    QuantizeLinear -> DequantizeLinear            (a requantisation: one IR layer)
    Tanh | Sigmoid | Mul | Add | Sub | Div | Clip | Relu | Q/DQ   (an elementwise tail with constants)
with weights given as DequantizeLinear of an integer initializer (zero point 0; per-tensor or
per-output-channel scales) and constants as initializers or DequantizeLinear of them. This covers
onnxruntime's static QDQ layout (requantised after MatMul and again after the bias Add, Relu folded
into a zero point, Q/DQ around Tanh and Mul) and the plainer MatMul-Add-Relu-Q form. Identity and
Flatten are skipped.

Why it is exact: with power-of-two scales every float the ONNX model computes is an integer times
a power of two, so onnxruntime's float32 arithmetic is exact (while sums stay below 2**24) and each
QuantizeLinear is ``round_half_even(acc * 2**-k)`` on an integer ``acc``: an IR linear layer with
``rounding="half_even"``. Zero points are carried as offsets (codes are kept centred, ``code - zp``),
the observation quantiser becomes one comparator per code step (thresholds found on the same
arithmetic), and the tail folds into the action tables. Scales that are not powers of two are
refused: onnxruntime's float rounding could not be reproduced exactly by integer hardware.

The file itself is read, checked and indexed by :mod:`dwc.frontends.onnx_model`; this module walks it.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dwc.core.defaults import ACT_WIDTH, OBS_WIDTH
from dwc.core.errors import OptionError, UserError
from dwc.frontends.onnx_model import OnnxModel, Quant
from dwc.ir.graph import Comparator, FixedFormat, Graph, Linear

TAIL_OPS = ("Tanh", "Mul", "Add", "Sub", "Div", "Clip", "Relu", "Sigmoid")
SKIP_OPS = ("Identity", "Flatten")
ACC_LIMIT = 1 << 24  # float32 holds every integer below this exactly


def _pow2_exponent(scale: np.ndarray, what: str) -> np.ndarray:
    """k with scale == 2**k for every entry, or a UserError naming ``what``."""
    s = np.asarray(scale, np.float64).reshape(-1)
    if np.any(s <= 0):
        raise UserError(f"{what}: scales must be positive, got {s[s <= 0][0]}")
    k = np.round(np.log2(s)).astype(np.int64)
    bad = s != np.ldexp(1.0, k)
    if np.any(bad):
        raise UserError(f"{what}: scale {float(s[bad][0])!r} is not a power of two; dwc import needs power-of-two "
                        f"scales (e.g. Brevitas po2 scaling), since other scales round in float32 in ways "
                        f"integer hardware cannot reproduce exactly")
    return k


def _same_quant(a: Quant, b: Quant) -> bool:
    return np.array_equal(a.scale, b.scale) and np.array_equal(a.zero, b.zero)


def load_model(path: Path) -> OnnxModel:
    """The ONNX file, checked (QONNX nodes lowered to QDQ by qonnx) and indexed for the walk."""
    return OnnxModel(Path(path))


def _input(node, i: int) -> str | None:
    """A node's optional input ``i`` (ONNX marks an absent one by an empty name), or None."""
    return node.input[i] if len(node.input) > i and node.input[i] else None


@dataclass
class _Affine:
    """The value between two QuantizeLinear nodes as integer algebra on the current codes:
    ``2**e * (w @ codes + beta)`` per output row (exact, since every scale is a power of two)."""
    w: np.ndarray  # (out, in) int64
    beta: np.ndarray  # (out,) int64
    e: np.ndarray  # (out,) int64
    relu: bool = False

    @classmethod
    def identity(cls, n: int, e: int) -> "_Affine":
        """The codes themselves: an Add, Relu or requantisation with no product before it."""
        return cls(np.eye(n, dtype=np.int64), np.zeros(n, np.int64), np.full(n, e))

    def add_constant(self, values, where: str) -> None:
        """beta += values / 2**e exactly, refining the unit (doubling w and beta) until it is integral."""
        values = np.broadcast_to(np.asarray(values, np.float64).reshape(-1), self.beta.shape)
        for _ in range(40):
            units = values / np.ldexp(1.0, self.e)
            if np.all(units == np.round(units)):
                self.beta = self.beta + np.round(units).astype(np.int64)
                return
            self.w, self.beta, self.e = self.w * 2, self.beta * 2, self.e - 1
        raise UserError(f"{where}: the constant is not representable on a power-of-two grid of the sum")

    def largest_sum(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per row, the largest |w @ codes + beta| over codes in [lo, hi]: what float32 must hold exactly."""
        return np.abs(self.w) @ np.maximum(np.abs(lo), np.abs(hi)) + np.abs(self.beta)

    def to_linear(self, e_out: int, lo: int, hi: int) -> Linear:
        """code = round_half_even(2**(e - e_out) * (w @ x + beta)) as one IR layer: one shift per layer
        (the smallest exponent), rows with larger exponents scaled up by the difference."""
        d = self.e - e_out
        low = int(d.min())
        rows = self.w << (d - low)[:, None]
        bias = self.beta << (d - low)
        return Linear(rows.tolist(), bias.tolist(), -low, lo, hi, "half_even")


class _ChainReader:
    """Walks the QDQ chain from the observation to the output, one handler per operator of the affine
    layers, and collects IR layers. Between two QuantizeLinear nodes the value is ``pending`` (an
    :class:`_Affine` of the current codes); each QuantizeLinear turns it into an IR layer. The first op
    that is not affine (Tanh, ...) starts the elementwise tail."""

    def __init__(self, m: OnnxModel):
        self.m = m
        self.seen: list[str] = []  # every operator read, in order: the report's "operators"
        self.layers: list[Linear] = []
        self.tail: list[tuple[str, dict]] = []
        self.pending: _Affine | None = None
        self.last_q_output = self.last_zero = None  # the last layer's code tensor, for the onnxruntime check
        self.handlers = {"Add": self._add_constant, "Sub": self._add_constant, "Relu": self._relu,
                         "MatMul": self._product, "Gemm": self._product, "QuantizeLinear": self._requantise}

    def read(self, obs_dim: int) -> None:
        node = self._read_observation(obs_dim)
        node = self._read_layers(node)
        self._read_tail(node)

    # ------------------------------------------------------------------ walking the chain
    def _step(self, name: str):
        """The node reading ``name``, past Identity/Flatten (no-ops on an (N, D) tensor)."""
        node = self.m.next(name)
        while node is not None and node.op_type in SKIP_OPS:
            self.seen.append(node.op_type)
            node = self.m.next(node.output[0])
        return node

    def _expect(self, node, ops: tuple, where: str):
        if node is None or node.op_type not in ops:
            got = "the graph output" if node is None else f"{node.op_type} ({node.name or 'unnamed'})"
            raise UserError(f"unsupported model: {where} expects {' or '.join(ops)}, found {got}; dwc import reads "
                            f"QuantizeLinear/DequantizeLinear, MatMul/Gemm, Add, Relu and an elementwise tail "
                            f"({', '.join(TAIL_OPS)})")
        self.seen.append(node.op_type)
        return node

    def _clip_bounds(self, node, what: str) -> tuple:
        """A Clip's constant (min, max), None where absent."""
        lo, hi = _input(node, 1), _input(node, 2)
        return (None if lo is None else self.m.const(lo, f"{what} min"),
                None if hi is None else self.m.const(hi, f"{what} max"))

    def _dequantize_after(self, q_node, q: Quant, where: str):
        """The DequantizeLinear closing ``q_node``, past an optional Clip of the codes (QONNX's narrow and
        sub-8-bit ranges); returns (DQ node, raw code range after the clip)."""
        qmin, qmax = q.qmin, q.qmax
        nxt = self._step(q_node.output[0])
        if nxt is not None and nxt.op_type == "Clip":
            self.seen.append("Clip")
            lo, hi = self._clip_bounds(nxt, f"{where} Clip")
            qmin = qmin if lo is None else max(qmin, int(lo))
            qmax = qmax if hi is None else min(qmax, int(hi))
            nxt = self._step(nxt.output[0])
        dq = self._expect(nxt, ("DequantizeLinear",), f"after {where}'s QuantizeLinear")
        if not _same_quant(q, self.m.quant(dq)):
            raise UserError(f"{where}: DequantizeLinear must use its QuantizeLinear's scale and zero point")
        return dq, qmin, qmax

    # ------------------------------------------------------------------ the three parts of the chain
    def _read_observation(self, obs_dim: int):
        """The observation's Q/DQ: one power-of-two scale; its centred code range starts the walk."""
        q_node = self._expect(self._step(self.m.input.name), ("QuantizeLinear",), "the observation")
        q_in = self.m.quant(q_node)
        exps = _pow2_exponent(q_in.scale, "the observation's QuantizeLinear")
        if len(set(exps.tolist())) != 1:
            raise UserError("per-channel observation scales are not supported")
        dq, qmin, qmax = self._dequantize_after(q_node, q_in, "the observation")
        self.e_in = self.code_exp = int(exps[0])  # code_exp, code_lo, code_hi: the current codes
        self.lo_in = self.code_lo = np.broadcast_to(qmin - q_in.zero, (obs_dim,)).astype(np.int64)
        self.hi_in = self.code_hi = np.broadcast_to(qmax - q_in.zero, (obs_dim,)).astype(np.int64)
        self.cur = dq.output[0]
        return self._step(self.cur)

    def _read_layers(self, node):
        """The affine ops and requantisations, each through its handler; returns the tail's first node."""
        while node is not None and node.op_type in self.handlers:
            self.seen.append(node.op_type)
            where = f"layer {len(self.layers)} ({node.op_type} {node.name or 'unnamed'})"
            self.cur = self.handlers[node.op_type](node, where)
            node = self._step(self.cur)
        if self.pending is not None:
            raise UserError("unsupported model: the last layer's output must be requantised (QuantizeLinear) "
                            "before the tail or the output")
        if not any(op in ("MatMul", "Gemm") for op in self.seen):
            raise UserError("unsupported model: no MatMul/Gemm layer after the observation's quantiser")
        return node

    def _read_tail(self, node) -> None:
        """The elementwise tail (Q/DQ pairs included) with its constants; it folds into the action tables."""
        while node is not None:
            if node.op_type not in TAIL_OPS + ("QuantizeLinear", "DequantizeLinear"):
                raise UserError(f"unsupported operator {node.op_type} ({node.name or 'unnamed'}) after the last "
                                f"layer; the tail may hold {', '.join(TAIL_OPS)} with constant operands, "
                                f"and Q/DQ pairs")
            self.tail.append((node.op_type, self._tail_constants(node)))
            self.seen.append(node.op_type)
            self.cur = node.output[0]
            node = self._step(self.cur)

    def _tail_constants(self, node) -> dict:
        op = node.op_type
        if op in ("Mul", "Add", "Sub", "Div"):
            other = [i for i in node.input if i != self.cur]
            if len(other) != 1:
                raise UserError(f"{op} ({node.name or 'unnamed'}): expected one constant operand")
            return {"c": self.m.const(other[0], op).astype(np.float32), "first": node.input[0] == self.cur}
        if op == "Clip":
            lo, hi = self._clip_bounds(node, "Clip")
            return {"lo": None if lo is None else lo.astype(np.float32),
                    "hi": None if hi is None else hi.astype(np.float32)}
        if op in ("QuantizeLinear", "DequantizeLinear"):
            return {"q": self.m.quant(node)}
        return {}

    # ------------------------------------------------------------------ handlers of the affine layers
    # Each takes (node, where) and returns the tensor the walk continues from.
    def _pending(self) -> _Affine:
        """The pending affine map; the identity on the current codes where none is."""
        if self.pending is None:
            self.pending = _Affine.identity(len(self.code_lo), self.code_exp)
        return self.pending

    def _add_constant(self, node, where: str) -> str:
        """Add/Sub of a constant: folded into the pending bias."""
        other = [i for i in node.input if i != self.cur]
        if len(other) != 1 or (node.op_type == "Sub" and node.input[0] != self.cur):
            raise UserError(f"{where}: expected the activations and one constant")
        value = self.m.const(other[0], where).astype(np.float32).astype(np.float64)
        self._pending().add_constant(-value if node.op_type == "Sub" else value, where)
        return node.output[0]

    def _relu(self, node, where: str) -> str:
        """Relu: the next requantisation clamps at code 0."""
        self._pending().relu = True
        return node.output[0]

    def _product(self, node, where: str) -> str:
        """MatMul/Gemm by integer weights: starts the pending map (Gemm's bias folded into it)."""
        if self.pending is not None:
            raise UserError(f"{where}: two products without a QuantizeLinear between them are not supported")
        if node.input[0] != self.cur:
            raise UserError(f"{where}: the activations must be the first operand")
        w, e_w = self._weights(node, where)
        n_out = w.shape[1]
        self.pending = _Affine(w.T.astype(np.int64), np.zeros(n_out, np.int64),
                               self.code_exp + np.broadcast_to(e_w, (n_out,)).astype(np.int64))
        if node.op_type == "Gemm" and _input(node, 2):
            self.pending.add_constant(self.m.const(node.input[2], f"{where} bias").astype(np.float32), where)
        return node.output[0]

    def _weights(self, node, where: str) -> tuple[np.ndarray, np.ndarray]:
        """A product's integer weights, (in, out), and the power-of-two exponents of their scales."""
        m, gemm = self.m, node.op_type == "Gemm"
        wnode = m.producer.get(node.input[1])
        if wnode is None or wnode.op_type != "DequantizeLinear":
            found = "a float initializer" if node.input[1] in m.consts else "a computed tensor"
            raise UserError(f"{where}: the weights must be DequantizeLinear of an integer initializer (a quantised "
                            f"model), found {found}")
        _, w_int, w_scale, axis = m.dequantize_const(wnode)
        if _input(wnode, 2) and np.any(m.consts.get(wnode.input[2], 0) != 0):
            raise UserError(f"{where}: weight zero points must be 0")
        trans_b = gemm and m.attr(node, "transB", 0)
        if gemm and (m.attr(node, "alpha", 1.0) != 1.0 or m.attr(node, "beta", 1.0) != 1.0
                     or m.attr(node, "transA", 0)):
            raise UserError(f"{where}: Gemm with alpha/beta != 1 or transA is not supported")
        w = w_int.T if trans_b else w_int
        if w.ndim != 2 or w.shape[0] != len(self.code_lo):
            raise UserError(f"{where}: weights of shape {tuple(w_int.shape)} do not take {len(self.code_lo)} inputs")
        e_w = _pow2_exponent(w_scale, f"{where} weights")
        if e_w.size > 1 and axis != (0 if trans_b else 1):
            raise UserError(f"{where}: per-channel weight scales must run along the outputs")
        return w, e_w

    def _requantise(self, node, where: str) -> str:
        """QuantizeLinear: the pending map (or the codes themselves) becomes an IR layer."""
        p = self._pending()
        q_out = self.m.quant(node)
        e_out = _pow2_exponent(q_out.scale, where)
        if e_out.size > 1 or q_out.zero.size > 1:
            raise UserError(f"{where}: per-channel output scales or zero points are not supported")
        dqn, qmin, qmax = self._dequantize_after(node, q_out, where)
        lo, hi = int(qmin - q_out.zero[0]), int(qmax - q_out.zero[0])
        lo = max(lo, 0) if p.relu else lo
        span = p.largest_sum(self.code_lo, self.code_hi)
        if np.any(span >= ACC_LIMIT):
            raise UserError(f"{where}: sums can reach {int(span.max())} quanta, beyond float32's exact integers "
                            f"(2**24), so the ONNX model itself rounds them")
        self.layers.append(p.to_linear(int(e_out[0]), lo, hi))
        self.pending, self.last_q_output, self.last_zero = None, dqn.input[0], _input(dqn, 2)
        self.code_exp = int(e_out[0])
        self.code_lo, self.code_hi = np.full(len(p.beta), lo), np.full(len(p.beta), hi)
        return dqn.output[0]

    def summary(self, layers: list[Linear], fmt: FixedFormat, a_fmt: FixedFormat) -> dict:
        """What was read, for the import report."""
        return {"operators": self.seen, "layers": [{"outputs": l.outputs, "inputs": len(l.weights[0]),
                                                    "shift": l.shift, "lo": l.lo, "hi": l.hi} for l in layers],
                "observation_codes": [int(self.lo_in.min()), int(self.hi_in.max())],
                "tail": [op for op, _ in self.tail], "obs_format": {"width": fmt.width, "frac": fmt.frac},
                "action_format": {"width": a_fmt.width, "frac": a_fmt.frac}}


# The tail's operators on float32 arrays, as onnxruntime computes them: (values, constants) -> values.
def _tail_quantize(v, c):  # onnxruntime: round(v / scale) in float32, ties to even, then clip
    q = c["q"]
    return np.clip(np.rint(v / q.scale.astype(np.float32)) + q.zero, q.qmin, q.qmax)


def _tail_dequantize(v, c):
    q = c["q"]
    return (v - q.zero).astype(np.float32) * q.scale.astype(np.float32)


def _tail_binary(fn):
    """A binary op with one constant operand, on the side the model has it."""
    return lambda v, c: fn(v, c["c"]) if c["first"] else fn(c["c"], v)


TAIL_FUNCTIONS = {
    "Tanh": lambda v, c: np.tanh(v),
    "Sigmoid": lambda v, c: (1 / (1 + np.exp(-v))).astype(np.float32),
    "Relu": lambda v, c: np.maximum(v, np.float32(0)),
    "Clip": lambda v, c: np.clip(v, -np.inf if c["lo"] is None else c["lo"], np.inf if c["hi"] is None else c["hi"]),
    "QuantizeLinear": _tail_quantize, "DequantizeLinear": _tail_dequantize,
    "Mul": _tail_binary(operator.mul), "Add": _tail_binary(operator.add), "Sub": _tail_binary(operator.sub),
    "Div": _tail_binary(operator.truediv),
}


def _apply_tail(tail: list[tuple[str, dict]], v: np.ndarray) -> np.ndarray:
    v = v.astype(np.float32)
    for op, c in tail:
        v = np.asarray(TAIL_FUNCTIONS[op](v, c), np.float32)
    return v


def _observation_dim(m: OnnxModel) -> int:
    dims = m.input.type.tensor_type.shape.dim
    if len(dims) != 2 or not dims[1].dim_value:
        raise UserError(f"input {m.input.name!r}: expected shape (N, D) with a fixed D")
    return dims[1].dim_value


def _observation_format(lo_in: np.ndarray, hi_in: np.ndarray, e_in: int, obs_width: int) -> FixedFormat:
    """Fixed point fine enough to place every threshold of the observation quantiser exactly."""
    span = float(np.max(np.maximum(np.abs(lo_in - 1), np.abs(hi_in + 1))) * 2.0 ** e_in)
    frac = obs_width - 2 - math.floor(math.log2(span))
    if frac < -e_in + 1:
        raise OptionError("obs_width", f" {obs_width} is too narrow for the observation quantiser (range +-{span:g} at "
                        f"steps of {2.0 ** e_in:g}); use --obs-width {obs_width + (-e_in + 1 - frac)} or more")
    return FixedFormat(obs_width, frac)


def _code_comparators(fmt: FixedFormat, lo_in: np.ndarray, hi_in: np.ndarray, e_in: int):
    """One comparator per code step of each dimension, so a group's popcount is ``code - lo_in``;
    returns (comparators, groups)."""
    comparators, groups = [], []
    grid = np.arange(fmt.min_int, fmt.max_int + 1, dtype=np.int64)
    for d in range(len(lo_in)):
        # centred code of each representable input, as onnxruntime computes it (exact: powers of two)
        code = np.clip(np.rint(grid * 2.0 ** (-fmt.frac - e_in)), lo_in[d], hi_in[d]).astype(np.int64)
        start = len(comparators)
        for c in range(int(lo_in[d]) + 1, int(hi_in[d]) + 1):
            first_at = int(np.searchsorted(code, c))  # the code never decreases along the grid
            comparators.append(Comparator(d, int(grid[first_at]) if first_at < len(grid) else fmt.max_int + 1))
        groups.append(list(range(start, len(comparators))))
    return comparators, groups


def _absorb_code_offset(first: Linear, lo_in: np.ndarray) -> Linear:
    """The first layer reads popcounts (``code - lo_in``), so its bias adds back ``W @ lo_in``."""
    offset = np.asarray(first.weights, np.int64) @ lo_in
    return replace(first, bias=(np.asarray(first.bias) + offset).tolist())


def _action_tables(last: Linear, tail: list, e_last: int, act_width: int) -> tuple[FixedFormat, list]:
    """The tail evaluated on every code of the last layer (exponent ``e_last``), in a format that fits its peak."""
    codes = np.arange(last.lo, last.hi + 1)
    values = np.stack([_apply_tail(tail, codes * 2.0 ** e_last)] * last.outputs)
    peak = float(np.max(np.abs(values))) or 1.0
    a_fmt = FixedFormat(act_width, act_width - 1 - (math.floor(math.log2(peak)) + 1))
    return a_fmt, [a_fmt.quantize(v).tolist() for v in values]


def import_onnx(m: OnnxModel, path: Path, obs_width: int = OBS_WIDTH, act_width: int = ACT_WIDTH,
                env: str | None = None) -> tuple[Graph, dict]:
    """Lower the QDQ MLP ``m`` (read from ``path``) to an IR graph; returns (graph, what was read)."""
    obs_dim = _observation_dim(m)
    chain = _ChainReader(m)
    chain.read(obs_dim)
    fmt = _observation_format(chain.lo_in, chain.hi_in, chain.e_in, obs_width)
    comparators, groups = _code_comparators(fmt, chain.lo_in, chain.hi_in, chain.e_in)
    layers = [_absorb_code_offset(chain.layers[0], chain.lo_in)] + chain.layers[1:]
    a_fmt, tables = _action_tables(layers[-1], chain.tail, chain.code_exp, act_width)
    meta = {"env": env, "policy": "onnx-qmlp", "source": str(path), "frontend": "onnx (QDQ)",
            "onnx_codes_tensor": chain.last_q_output, "onnx_codes_zero_point": chain.last_zero}  # for the checks
    graph = Graph([fmt] * obs_dim, comparators, [], groups, a_fmt, tables, meta, layers)
    graph.validate()
    return graph, chain.summary(layers, fmt, a_fmt)


def reference_session_options(ort):
    """onnxruntime without graph rewrites: the ONNX operators as specified. Its default optimisations
    fuse QDQ patterns into int8 kernels that on x86 may saturate 16-bit pair sums (u8 x s8 products;
    onnxruntime's own advice is reduce_range), which is not the model's defined function."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return opts


def check_against_onnxruntime(m: OnnxModel, graph: Graph, n: int = 20000, seed: int = 0) -> dict:
    """Run the ONNX model (onnxruntime, :func:`reference_session_options`) and the IR on the same
    fixed-point observations: the last layer's codes must be equal; actions may differ only by the
    action format's rounding (half an LSB)."""
    try:
        import onnx
        import onnxruntime as ort
    except ImportError:
        raise UserError("dwc import checks itself with onnxruntime: pip install 'dwc[onnx]'") from None
    from dwc.ir import reference as ref
    model = onnx.ModelProto()
    model.CopyFrom(m.model)  # the check adds an output; the loaded model stays as read
    zp = m.consts.get(graph.meta["onnx_codes_zero_point"]) if graph.meta["onnx_codes_zero_point"] else None
    kind = onnx.TensorProto.UINT8 if zp is None else onnx.helper.np_dtype_to_tensor_dtype(zp.dtype)
    model.graph.output.append(onnx.helper.make_tensor_value_info(graph.meta["onnx_codes_tensor"], kind, None))
    sess = ort.InferenceSession(model.SerializeToString(), reference_session_options(ort),
                                providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    f = graph.obs_formats[0]
    q = np.concatenate([rng.integers(f.min_int, f.max_int + 1, (n, graph.obs_dim)),
                        np.round(rng.normal(0, 0.05, (n, graph.obs_dim)) * (f.max_int + 1)).clip(f.min_int, f.max_int),
                        np.full((1, graph.obs_dim), f.min_int), np.full((1, graph.obs_dim), f.max_int)]).astype(np.int64)
    x = (q * 2.0 ** -f.frac).astype(np.float32)
    action, code = sess.run(None, {sess.get_inputs()[0].name: x})
    zp = 0 if zp is None else zp.astype(np.int64)
    want = ref.codes(graph, q) + graph.linear[-1].lo  # centred codes
    code_mismatch = int(np.sum(np.any(code.astype(np.int64) - zp != want, axis=1)))
    got = graph.action_format.to_float(ref.actions_int(graph, q))
    lsb = 2.0 ** -graph.action_format.frac
    err = float(np.max(np.abs(got - action)))
    return {"vectors": int(len(q)), "code_mismatches": code_mismatch, "max_action_error": err,
            "action_lsb": lsb, "actions_within_half_lsb": bool(err <= lsb / 2 + 1e-9)}
