"""Logic-gate networks (``--policy gates``): the relaxation is exact at the corners, eval mode is
the circuit, and freezing gives an IR of 2-input LUTs bit-exact with the PyTorch model."""
import numpy as np
import pytest
import torch

from dwc.cli import main
from dwc.ir import reference as ref
from dwc.frontends.freeze import freeze
from dwc.ir.passes import optimize
from dwc.models import ActorConfig, build_actor
from dwc.models.gates import BASIS, GateLayer
from helpers import assert_bit_exact, extreme_observations


def test_relaxation_is_each_boolean_function_at_the_corners():
    for f in range(16):
        for a in (0, 1):
            for b in (0, 1):
                c = BASIS[f]
                assert c[0] + c[1] * a + c[2] * b + c[3] * a * b == (f >> (a + 2 * b)) & 1


def test_eval_layer_is_its_truth_tables():
    torch.manual_seed(0)
    layer = GateLayer(20, 50)
    layer.weights.data = torch.randn(50, 16) * 4  # all 16 functions in use
    layer.eval()
    x = torch.randint(0, 2, (20, 300)).float()
    out = layer.forward_fm(x)
    idx, tables = layer.wiring_indices(), layer.truth_tables()
    addr = (x[idx[:, 0]] + 2 * x[idx[:, 1]]).long()  # (50, 300)
    assert torch.equal(out, torch.gather(tables.float(), 1, addr))
    assert len(set(layer.weights.argmax(1).tolist())) > 10


def test_training_forward_is_the_circuit_with_relaxed_gradients():
    layer = GateLayer(8, 16)
    x = torch.randint(0, 2, (8, 5)).float().requires_grad_()
    y = layer.forward_fm(x)
    layer.eval()
    assert torch.equal(y.detach(), layer.forward_fm(x).detach())  # training forward = deployed circuit
    y.sum().backward()
    assert layer.weights.grad.abs().sum() > 0 and x.grad.abs().sum() > 0


@pytest.mark.parametrize("layers", [1, 3])
def test_frozen_gate_network_is_bit_exact(layers):
    torch.manual_seed(layers)
    cfg = ActorConfig(policy="gates", layers=layers, width=96, lut_inputs=2, thermo_bits=15, wiring="random")
    actor = build_actor(cfg, 5, 3, [-2, -1, -0.5], [2, 1, 0.5])
    actor.normalizer.update(torch.randn(500, 5, dtype=torch.float64) * 3 + 1)
    for layer in actor.luts:  # trained-looking: every function chosen somewhere
        layer.weights.data += torch.randn_like(layer.weights) * 6
    actor.eval()
    graph = freeze(actor)
    assert all(lut.arity <= 2 for layer in graph.layers for lut in layer)
    rng = np.random.default_rng(layers)
    q = rng.integers([f.min_int for f in graph.obs_formats], [f.max_int + 1 for f in graph.obs_formats], (2000, 5))
    q = np.concatenate([q, extreme_observations(graph)])
    assert_bit_exact(actor, graph, q)
    # the passes fold constant gates (2 of the 16 functions) into the action tables: popcounts
    # shift, actions stay identical
    assert np.array_equal(ref.actions_int(optimize(graph)[0], q), ref.actions_int(graph, q))


def test_train_gates_cli(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--env", "InvertedPendulum-v5", "--policy", "gates", "--layers", "2", "--width", "64",
                 "--thermo-bits", "7", "--steps", "400", "--learning-starts", "200", "--eval-episodes", "1",
                 "--out", str(out), "--no-progress"]) == 0
    assert main(["eval", str(out), "--eval-episodes", "1", "--frozen", "--no-progress", "--json"]) == 0
    import json
    r = json.loads((out / "eval.json").read_text())
    # bit-exact on the same fixed-point inputs (tested above); the float model sees unquantised
    # observations, so episodes may drift apart a little, never by much
    assert r["policy"] == "gates" and abs(r["frozen"]["mean_return"] - r["mean_return"]) <= 0.2 * r["mean_return"]
    # the same compile and verify as a DWC: 2-input LUTs in the IR, the RTL bit-exact in Verilator
    build = tmp_path / "build"
    assert main(["compile", str(out), "--out", str(build), "--pipeline", "1"]) == 0
    graph = json.loads((build / "graph.json").read_text())
    assert max(len(lut["inputs"]) for layer in graph["layers"] for lut in layer) <= 2
    assert main(["verify", str(build), "--verify-episodes", "1", "--max-steps", "60"]) == 0
    assert json.loads((build / "verify_report.json").read_text())["mismatches"] == 0
    assert main(["train", "--env", "InvertedPendulum-v5", "--policy", "gates", "--lut-inputs", "4",
                 "--out", str(tmp_path / "bad")]) == 2
