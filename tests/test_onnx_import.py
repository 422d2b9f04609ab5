"""`dwc import`: quantised ONNX MLPs (QDQ, as onnxruntime and Brevitas export them) lowered into the
IR, bit-exact with onnxruntime, then verified in Verilator like any compiled policy; one-line errors
for what it cannot read."""
import json

import numpy as np
import pytest

from dwc.cli import main
from dwc.ir import Graph
from dwc.ir import reference as ref

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from helpers import assert_one_line_error, run_cli


def qdq_mlp(path, obs_dim=4, hidden=(16,), act_dim=1, seed=0, in_scale=2.0 ** -4, w_scale=2.0 ** -7,
            out_scale=2.0 ** -2, per_channel=False, zero_point=0, tail=True, extra=None, in_int4=False):
    """A QDQ MLP as onnxruntime's static quantisation writes it, with power-of-two scales:
    Q/DQ(obs) -> [DQ(int8 W) MatMul, DQ(int32 b) Add, Relu, Q/DQ] per hidden layer -> output layer
    (int8 codes, zero point ``zero_point``) -> Tanh -> Mul 3 (the action bound). ``in_int4``: a 4-bit
    observation quantiser (opset 21), 15 comparators per dimension instead of 255."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def init(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    init("s_in", np.float32(in_scale))
    if in_int4:
        inits.append(helper.make_tensor("z_in", TensorProto.INT4, [], [0]))
    else:
        init("z_in", np.int8(0))
    cur = node("DequantizeLinear", [node("QuantizeLinear", ["obs", "s_in", "z_in"], "obs_q"), "s_in", "z_in"], "obs_dq")
    n_in, prev = obs_dim, in_scale
    sizes = list(hidden) + [act_dim]
    for k, n_out in enumerate(sizes):
        last = k == len(sizes) - 1
        w = rng.integers(-127, 128, (n_in, n_out)).astype(np.int8)
        sw = (w_scale * 2.0 ** -rng.integers(0, 3, n_out)).astype(np.float32) if per_channel else np.float32(w_scale)
        init(f"w{k}", w)
        init(f"sw{k}", sw)
        init(f"zw{k}", np.zeros(n_out, np.int8) if per_channel else np.int8(0))
        w_dq = node("DequantizeLinear", [f"w{k}", f"sw{k}", f"zw{k}"], f"w{k}_dq", **({"axis": 1} if per_channel else {}))
        mm = node("MatMul", [cur, w_dq], f"mm{k}")
        init(f"b{k}", rng.integers(-300, 300, n_out).astype(np.int32))
        init(f"sb{k}", (prev * np.asarray(sw, np.float64)).astype(np.float32))
        init(f"zb{k}", np.zeros(n_out, np.int32) if per_channel else np.int32(0))
        b_dq = node("DequantizeLinear", [f"b{k}", f"sb{k}", f"zb{k}"], f"b{k}_dq", **({"axis": 0} if per_channel else {}))
        acc = node("Add", [mm, b_dq], f"acc{k}")
        if not last:
            acc = node("Relu", [acc], f"relu{k}")
        init(f"so{k}", np.float32(out_scale))
        init(f"zo{k}", np.int8(zero_point) if last else np.uint8(0))
        cur = node("DequantizeLinear", [node("QuantizeLinear", [acc, f"so{k}", f"zo{k}"], f"q{k}"), f"so{k}", f"zo{k}"],
                   f"dq{k}")
        n_in, prev = n_out, out_scale
    if extra:
        cur = node(extra, [cur], "extra")
    if tail:
        init("bound", np.float32(3.0))
        cur = node("Mul", [node("Tanh", [cur], "tanh"), "bound"], "scaled")
    nodes[-1].output[0] = "action"
    graph = helper.make_graph(nodes, "qdq_mlp", [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["N", obs_dim])],
                              [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["N", act_dim])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21 if in_int4 else 13)])
    model.ir_version = 10 if in_int4 else 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("variant", [{}, {"per_channel": True, "zero_point": 5, "hidden": (12, 8)},
                                     {"in_int4": True, "in_scale": 2.0 ** -1}])
def test_import_is_bit_exact_with_onnxruntime(tmp_path, variant):
    model = qdq_mlp(tmp_path / "p.onnx", seed=len(variant), **variant)
    build = tmp_path / "build"
    assert main(["import", str(model), "--out", str(build), "--env", "InvertedPendulum-v5", "--json"]) == 0
    report = json.loads((build / "import_report.json").read_text())
    assert report["check_against_onnxruntime"]["code_mismatches"] == 0
    assert report["read"]["tail"] == ["Tanh", "Mul"]
    g = Graph.load(build / "graph.json")
    assert g.meta["env"] == "InvertedPendulum-v5" and all(l.rounding == "half_even" for l in g.linear)
    # fresh observations, independent of the import's own check: on the fixed-point grid the action
    # is onnxruntime's, up to the action format's rounding
    from dwc.frontends.onnx_import import reference_session_options
    sess = ort.InferenceSession(str(model), reference_session_options(ort), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(9)
    f = g.obs_formats[0]
    x = np.concatenate([rng.normal(0, 3, (3000, 4)), rng.uniform(-20, 20, (1000, 4))]).astype(np.float32)
    xq = (ref.quantize_obs(g, x) * 2.0 ** -f.frac).astype(np.float32)
    want = sess.run(None, {"obs": xq})[0]
    got = ref.act(g, xq)
    assert np.max(np.abs(got - want)) <= 2.0 ** -g.action_format.frac / 2 + 1e-9
    assert np.unique(np.round(want, 3)).size > 20  # not a constant policy: the test can tell wrong apart


def test_imported_policy_verifies_in_verilator(tmp_path):
    """The same Verilog back end and the same proof as a trained policy: vectors and a closed-loop episode."""
    model = qdq_mlp(tmp_path / "p.onnx", seed=3, in_int4=True, in_scale=2.0 ** -1)
    build = tmp_path / "build"
    assert main(["import", str(model), "--out", str(build), "--env", "InvertedPendulum-v5", "--pipeline", "1"]) == 0
    assert main(["verify", str(build), "--verify-episodes", "1", "--max-steps", "40", "--vectors", "300", "--no-progress"]) == 0
    assert json.loads((build / "verify_report.json").read_text())["mismatches"] == 0


def test_import_errors_are_one_line(tmp_path):
    bad_scale = qdq_mlp(tmp_path / "s.onnx", w_scale=0.01)
    assert_one_line_error(run_cli("import", str(bad_scale), "--out", str(tmp_path / "a")), "not a power of two")
    odd_op = qdq_mlp(tmp_path / "o.onnx", extra="Softsign", tail=False)
    assert_one_line_error(run_cli("import", str(odd_op), "--out", str(tmp_path / "b")), "unsupported operator Softsign")
    good = qdq_mlp(tmp_path / "g.onnx")
    assert_one_line_error(run_cli("import", str(good), "--out", str(tmp_path / "c"), "--env", "Hopper-v5"),
                          "observations/actions are 11/3 wide")
    assert_one_line_error(run_cli("import", str(tmp_path / "missing.onnx"), "--out", str(tmp_path / "d")),
                          "no such file")
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    assert_one_line_error(run_cli("import", str(tmp_path / "junk.onnx"), "--out", str(tmp_path / "e")),
                          "not a valid ONNX model")
    assert not any((tmp_path / d).exists() for d in "abcde")  # nothing written on error


def ort_quantized_mlp(tmp_path, pow2: bool):
    """A float MLP quantised by onnxruntime's own static QDQ quantiser (its real layout: requantised
    after MatMul and after Add, constants as DequantizeLinear, Q/DQ around Tanh and Mul); with
    ``pow2`` every scale is then rounded to a power of two (what a po2-scaled export looks like)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    rng = np.random.default_rng(0)
    inits, nodes, x, sizes = [], [], "obs", [4, 16, 1]
    for k in range(2):
        inits += [numpy_helper.from_array(rng.normal(0, 0.5, (sizes[k], sizes[k + 1])).astype(np.float32), f"w{k}"),
                  numpy_helper.from_array(rng.normal(0, 0.1, sizes[k + 1]).astype(np.float32), f"b{k}")]
        nodes += [helper.make_node("MatMul", [x, f"w{k}"], [f"m{k}"]), helper.make_node("Add", [f"m{k}", f"b{k}"], [f"a{k}"])]
        x = f"a{k}"
        if k == 0:
            nodes.append(helper.make_node("Relu", [x], ["r0"]))
            x = "r0"
    inits.append(numpy_helper.from_array(np.float32(3.0), "bound"))
    nodes += [helper.make_node("Tanh", [x], ["t"]), helper.make_node("Mul", ["t", "bound"], ["action"])]
    graph = helper.make_graph(nodes, "f", [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["N", 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "float.onnx"))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"obs": rng.normal(0, 1, (64, 4)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)
    path = tmp_path / ("q2.onnx" if pow2 else "q.onnx")
    quantize_static(str(tmp_path / "float.onnx"), str(path), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    if pow2:
        q = onnx.load(str(path))
        for t in q.graph.initializer:
            if t.name.endswith("_scale"):
                s = numpy_helper.to_array(t)
                t.CopyFrom(numpy_helper.from_array(np.exp2(np.round(np.log2(s))).astype(np.float32), t.name))
        onnx.save(q, str(path))
    return path


def test_onnxruntime_quantized_model_imports_when_its_scales_are_powers_of_two(tmp_path):
    from dwc.frontends.onnx_import import reference_session_options
    plain = ort_quantized_mlp(tmp_path, pow2=False)
    assert_one_line_error(run_cli("import", str(plain), "--out", str(tmp_path / "a")), "not a power of two")
    model = ort_quantized_mlp(tmp_path, pow2=True)
    build = tmp_path / "b"
    assert main(["import", str(model), "--out", str(build), "--json"]) == 0
    report = json.loads((build / "import_report.json").read_text())
    assert report["check_against_onnxruntime"]["code_mismatches"] == 0
    assert report["read"]["tail"] == ["Tanh", "QuantizeLinear", "DequantizeLinear", "Mul", "QuantizeLinear",
                                      "DequantizeLinear"]
    g = Graph.load(build / "graph.json")
    sess = ort.InferenceSession(str(model), reference_session_options(ort), providers=["CPUExecutionProvider"])
    x = (ref.quantize_obs(g, np.random.default_rng(1).normal(0, 2, (4000, 4))) * 2.0 ** -g.obs_formats[0].frac)
    x = x.astype(np.float32)
    want = sess.run(None, {"obs": x})[0]
    assert np.max(np.abs(ref.act(g, x) - want)) <= 2.0 ** -g.action_format.frac / 2 + 1e-9
    assert np.unique(want).size > 10


def test_qonnx_quant_nodes_import_bit_exact_with_qonnx_execution(tmp_path):
    """QONNX Quant nodes (weights and activations, 4-bit narrow weights, a 4-bit unsigned hidden
    code): lowered through qonnx's QuantToQCDQ, then the same import; the circuit equals qonnx's own
    execution of the QONNX model."""
    pytest.importorskip("qonnx")
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    domain = "qonnx.custom_op.general"
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def init(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))

    def quant(x, out, scale, bits, signed, narrow=0):
        init(out + "_s", scale)
        init(out + "_z", 0.0)
        init(out + "_b", bits)
        nodes.append(helper.make_node("Quant", [x, out + "_s", out + "_z", out + "_b"], [out], domain=domain,
                                      signed=signed, narrow=narrow, rounding_mode="ROUND"))
    quant("obs", "xq", 2.0 ** -4, 8, 1)
    init("w0", rng.normal(0, 0.3, (4, 8)))
    quant("w0", "w0q", 2.0 ** -5, 4, 1, narrow=1)
    init("b0", np.round(rng.normal(0, 0.2, 8) * 2 ** 9) / 2 ** 9)
    nodes += [helper.make_node("MatMul", ["xq", "w0q"], ["m0"]), helper.make_node("Add", ["m0", "b0"], ["a0"]),
              helper.make_node("Relu", ["a0"], ["r0"])]
    quant("r0", "h0", 2.0 ** -3, 4, 0)
    init("w1", rng.normal(0, 0.3, (8, 1)))
    quant("w1", "w1q", 2.0 ** -5, 4, 1, narrow=1)
    nodes.append(helper.make_node("MatMul", ["h0", "w1q"], ["m1"]))
    quant("m1", "y", 2.0 ** -4, 8, 1)
    nodes.append(helper.make_node("Tanh", ["y"], ["action"]))
    graph = helper.make_graph(nodes, "qonnx_mlp", [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["N", 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(domain, 1)])
    path = tmp_path / "qonnx.onnx"
    onnx.save(model, str(path))
    build = tmp_path / "b"
    assert main(["import", str(path), "--out", str(build), "--env", "InvertedPendulum-v5", "--json"]) == 0
    report = json.loads((build / "import_report.json").read_text())
    assert report["check_against_onnxruntime"]["code_mismatches"] == 0 and "Clip" in report["read"]["operators"]
    g = Graph.load(build / "graph.json")
    x = (ref.quantize_obs(g, rng.normal(0, 3, (500, 4))) * 2.0 ** -g.obs_formats[0].frac).astype(np.float32)
    from qonnx.transformation.infer_shapes import InferShapes
    qmodel = ModelWrapper(str(path))
    qmodel.set_tensor_shape("obs", [len(x), 4])
    want = execute_onnx(qmodel.transform(InferShapes()), {"obs": x})["action"]
    assert np.max(np.abs(ref.act(g, x) - want)) <= 2.0 ** -g.action_format.frac / 2 + 1e-6
    assert np.unique(np.round(want, 4)).size > 20
