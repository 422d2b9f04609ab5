"""Quantised MLPs (``--policy qmlp``): power-of-two fake-quant makes the eval-mode network an exact
integer function; the IR's linear layers reproduce it bit for bit."""
import json

import numpy as np
import pytest
import torch

from dwc.cli import main
from dwc.ir import reference as ref
from dwc.frontends.freeze import freeze_qmlp
from dwc.ir.passes import optimize
from dwc.models import ActorConfig, build_actor
from helpers import extreme_observations


def trained_looking_qmlp(seed: int, **bits):
    torch.manual_seed(seed)
    cfg = ActorConfig(policy="qmlp", layers=2, hidden=24, thermo_bits=15, **bits)
    actor = build_actor(cfg, 5, 3, [-2, -1, -0.5], [2, 1, 0.5])
    actor.normalizer.update(torch.randn(500, 5, dtype=torch.float64) * 3 + 1)
    for _ in range(5):  # training-mode passes set the activation ranges
        actor.dist_params(torch.randn(256, 5) * 3 + 1)
    return actor.eval()


@pytest.mark.parametrize("seed,bits", [(0, {}), (1, {"weight_bits": 2, "act_bits": 1, "out_bits": 4}),
                                       (2, {"weight_bits": 8, "act_bits": 8, "out_bits": 10}),
                                       (3, {"weight_bits": 4, "act_bits": 2, "out_bits": 8, "fan_in": 3})])
def test_frozen_qmlp_is_bit_exact(seed, bits):
    actor = trained_looking_qmlp(seed, **bits)
    graph = freeze_qmlp(actor)
    assert not graph.layers and len(graph.linear) == 3
    rng = np.random.default_rng(seed)
    q = rng.integers([f.min_int for f in graph.obs_formats], [f.max_int + 1 for f in graph.obs_formats], (3000, 5))
    q = np.concatenate([q, extreme_observations(graph)])
    x = torch.tensor(q * np.array([2.0 ** -f.frac for f in graph.obs_formats]), dtype=torch.float32)
    with torch.no_grad():
        codes, _ = actor.net.output_codes(actor.normalizer(x))
        want = graph.action_format.quantize(actor.act(x).numpy())
    assert np.array_equal(ref.codes(graph, q) + graph.linear[-1].lo, codes.numpy().astype(np.int64))
    assert np.array_equal(ref.actions_int(graph, q), want)
    assert len(np.unique(want[:, 0])) > 5  # not a constant policy
    assert np.array_equal(ref.actions_int(optimize(graph)[0], q), want)


def test_sparse_qmlp_lowers_to_lookup_tables():
    """--fan-in K (LogicNets-style sparsity): K nonzero weights per neuron; with 2-bit activations the
    hidden and output neurons read 3 x 2 = 6 bits and become lookup tables, first-layer neurons reading
    3 x 4-bit input codes stay arithmetic; the Amaranth core equals the reference either way."""
    from dwc.rtl.core import DWCCore
    from dwc.rtl.linear import lowering_report
    from dwc.sim.pysim import run_vectors
    actor = trained_looking_qmlp(4, weight_bits=3, act_bits=2, out_bits=6, fan_in=3)
    graph = freeze_qmlp(actor)
    for layer in actor.net.hidden:
        assert torch.all((layer.int_weights()[0] != 0).sum(1) <= 3)
    report = lowering_report(graph, 8)
    assert report[0]["arithmetic"] > 0 and max(report[0]["input_bits_per_neuron"]) == 12  # some weights round to 0
    assert [(r["table"], r["arithmetic"]) for r in report[1:]] == [(24, 0), (3, 0)]
    rng = np.random.default_rng(4)
    q = rng.integers([f.min_int for f in graph.obs_formats], [f.max_int + 1 for f in graph.obs_formats], (300, 5))
    actions, _ = run_vectors(DWCCore(graph, 2), q)
    assert np.array_equal(actions, ref.actions_int(graph, q))


def test_weights_are_integers_in_range():
    actor = trained_looking_qmlp(3, weight_bits=3)
    graph = freeze_qmlp(actor)
    for lin in graph.linear:
        assert max(abs(w) for row in lin.weights for w in row) <= 3


def test_train_qmlp_cli(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--env", "InvertedPendulum-v5", "--policy", "qmlp", "--hidden", "8", "--thermo-bits",
                 "15", "--steps", "400", "--learning-starts", "200", "--eval-episodes", "1", "--out", str(out),
                 "--no-progress"]) == 0
    assert main(["eval", str(out), "--eval-episodes", "2", "--frozen", "--no-progress"]) == 0
    r = json.loads((out / "eval.json").read_text())
    # bit-exact on the same fixed-point inputs (tested above); the float model sees unquantised
    # observations, so episodes may drift apart a little, never by much
    assert r["policy"] == "qmlp" and abs(r["frozen"]["mean_return"] - r["mean_return"]) <= 0.2 * r["mean_return"]
    # the same compile and verify as a DWC: linear layers lowered to constant-coefficient arithmetic,
    # the Verilog bit-exact with the IR in Verilator, closed loop included
    build = tmp_path / "build"
    assert main(["compile", str(out), "--out", str(build), "--pipeline", "2"]) == 0
    assert len(json.loads((build / "graph.json").read_text())["linear"]) == 3
    assert main(["verify", str(build), "--verify-episodes", "1", "--max-steps", "60"]) == 0
    assert json.loads((build / "verify_report.json").read_text())["mismatches"] == 0
    assert main(["train", "--env", "InvertedPendulum-v5", "--policy", "qmlp", "--weight-bits", "1",
                 "--out", str(tmp_path / "bad")]) == 2


def test_onnx_export_of_the_shipped_qmlp_matches_the_reference(tmp_path):
    """policy.onnx of a quantised MLP (integer MatMul, floor shift, clamp, tables) equals the IR's
    reference executor on quantised, random and extreme observations."""
    ort = pytest.importorskip("onnxruntime")
    from pathlib import Path

    from dwc.ir.graph import Graph
    policy = Path(__file__).parent.parent / "policies" / "inverted-pendulum-v5-qmlp"
    assert main(["compile", str(policy), "--out", str(tmp_path), "--onnx"]) == 0
    graph = Graph.load(tmp_path / "graph.json")
    assert graph.linear and any(lin.shift > 0 for lin in graph.linear)
    sess = ort.InferenceSession(str(tmp_path / "policy.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    q = np.concatenate([rng.integers([f.min_int for f in graph.obs_formats], [f.max_int + 1 for f in graph.obs_formats],
                                     (4000, graph.obs_dim)), extreme_observations(graph)])
    x = (q * np.array([2.0 ** -f.frac for f in graph.obs_formats])).astype(np.float32)
    action, pc = sess.run(["action", "popcounts"], {"obs": x})
    assert np.array_equal(pc, ref.popcounts(graph, q))
    assert np.array_equal(action, ref.act(graph, x).astype(np.float32))
    raw = rng.normal(0, 1, (3000, graph.obs_dim)).astype(np.float32)
    assert np.array_equal(sess.run(["action"], {"obs": raw})[0], ref.act(graph, raw).astype(np.float32))


def test_compile_counts_the_arithmetic_and_warns_when_it_is_slow_to_build(tmp_path, capsys):
    """The shipped 2 x 64 quantised MLP (1,612 constant multipliers: synthesis did not finish in 10
    minutes) is flagged before a verify or synth starts; the 2 x 16 one (132: 83 s) is not."""
    from pathlib import Path
    policies = Path(__file__).parent.parent / "policies"
    for name, warned in (("inverted-pendulum-v5-qmlp", True), ("inverted-pendulum-v5-qmlp16", False)):
        assert main(["compile", str(policies / name), "--out", str(tmp_path / name), "--json"]) == 0
        arithmetic = json.loads(capsys.readouterr().out)["hdl"]["arithmetic"]
        verilog = (tmp_path / name / "dwc_core.v").read_text()
        assert arithmetic["multipliers"] == verilog.count("\n  dwc_smulc #(") > 0  # instances, not the module
        assert (arithmetic["warning"] is not None) == warned
