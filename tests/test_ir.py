"""The IR: JSON round trip and validation, and bit-exact equivalence of the frozen circuit with the
trained PyTorch model on >= 10,000 observations (real rollouts, random, extremes)."""
import copy
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from dwc.cli import main
from dwc.ir import Graph, IRError
from dwc.ir import reference as ref
from dwc.frontends.freeze import freeze
from dwc.ir.passes import optimize
from dwc.models import ActorConfig, build_actor
from dwc.train.checkpoint import load_actor
from helpers import assert_bit_exact, extreme_observations

POLICY = Path(__file__).parent.parent / "policies" / "inverted-pendulum-v5-dwc"


@pytest.fixture(scope="module")
def shipped():
    actor, cfg, _ = load_actor(POLICY)
    return actor, cfg, freeze(actor)


def rollout_observations(actor, env_id: str, steps: int, seed: int) -> np.ndarray:
    """Observations visited by the trained policy (with action noise, to leave the ideal path)."""
    env = gym.make(env_id)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    for t in range(steps):
        out.append(obs)
        with torch.no_grad():
            a = actor.act(torch.as_tensor(obs, dtype=torch.float32)[None])[0].numpy()
        a = np.clip(a + rng.normal(0, 0.3, a.shape), env.action_space.low, env.action_space.high)
        obs, _, term, trunc, _ = env.step(a)
        if term or trunc:
            obs, _ = env.reset(seed=seed + t + 1)
    env.close()
    return np.asarray(out)


def test_trained_policy_is_bit_exact_on_10k_observations(shipped):
    actor, cfg, graph = shipped
    rollouts = ref.quantize_obs(graph, rollout_observations(actor, cfg.env, 6000, seed=3))
    rng = np.random.default_rng(0)
    lo = np.array([f.min_int for f in graph.obs_formats])
    hi = np.array([f.max_int for f in graph.obs_formats])
    uniform = rng.integers(lo, hi + 1, size=(3000, graph.obs_dim))
    near = np.clip(rollouts[rng.integers(0, len(rollouts), 1000)] + rng.integers(-3, 4, (1000, graph.obs_dim)), lo, hi)
    q = np.concatenate([rollouts, uniform, near, extreme_observations(graph)])
    assert len(q) >= 10_000
    assert_bit_exact(actor, graph, q)
    optimized, _ = optimize(graph)
    assert_bit_exact(actor, optimized, q)  # the passes preserve it too


@pytest.mark.parametrize("n,layers,width,last_width,wiring", [
    (6, 2, 60, 0, "learnable"), (4, 2, 64, 0, "random"), (2, 2, 30, 0, "learnable"), (4, 3, 64, 31, "learnable")])
def test_random_circuits_are_bit_exact(n, layers, width, last_width, wiring):
    torch.manual_seed(n)
    cfg = ActorConfig(layers=layers, width=width, last_width=last_width, lut_inputs=n, thermo_bits=15, wiring=wiring)
    actor = build_actor(cfg, 5, 3, [-2, -1, -0.5], [2, 1, 0.5])
    actor.normalizer.update(torch.randn(500, 5, dtype=torch.float64) * torch.tensor([0.01, 1, 30, 500, 3.0]) + 7)
    actor.eval()
    graph = freeze(actor)
    last = (last_width or width) // 3 * 3  # whole action groups
    assert [len(layer) for layer in graph.layers] == [width] * (layers - 1) + [last]
    rng = np.random.default_rng(n)
    q = rng.integers([f.min_int for f in graph.obs_formats], [f.max_int + 1 for f in graph.obs_formats], (2000, 5))
    assert_bit_exact(actor, graph, np.concatenate([q, extreme_observations(graph)]))


def test_json_round_trip(shipped, tmp_path):
    _, _, graph = shipped
    graph.save(tmp_path / "g.json")
    again = Graph.load(tmp_path / "g.json")
    assert again.to_dict() == graph.to_dict()
    q = np.random.default_rng(1).integers(-2000, 2000, (200, graph.obs_dim))
    assert np.array_equal(ref.actions_int(again, q), ref.actions_int(graph, q))


def _broken(graph: Graph, edit) -> dict:
    d = copy.deepcopy(graph.to_dict())
    edit(d)
    return d


@pytest.mark.parametrize("edit,field", [
    (lambda d: d.update(schema_version=99), "schema_version"),
    (lambda d: d.pop("groups"), "groups"),
    (lambda d: d["comparators"].__setitem__(0, [9, 0]), "comparators[0].dim"),
    (lambda d: d["comparators"].__setitem__(1, [0, 1 << 20]), "comparators[1].threshold"),
    (lambda d: d["layers"][0][3]["inputs"].__setitem__(2, 10 ** 6), "layers[0][3].inputs[2]"),
    (lambda d: d["layers"][1][0].update(table="1" + "0" * 16), "layers[1][0].table"),
    (lambda d: d["layers"][1][0].update(table="xyz"), "layers[1][0].table"),
    (lambda d: d["layers"][1][2].update(inputs=[0] * 7, table="0"), "layers[1][2].inputs"),
    (lambda d: d["groups"][0].append(10 ** 5), "groups[0]"),
    (lambda d: d["actions"]["tables"][0].pop(), "actions.tables[0]"),
    (lambda d: d["actions"]["tables"][0].__setitem__(0, 1 << 40), "actions.tables[0][0]"),
    (lambda d: d["observation"]["formats"][0].update(width="16"), "observation.formats[0].width"),
    (lambda d: d["actions"].pop("format"), "actions.format"),
])
def test_malformed_graphs_name_the_field(shipped, edit, field):
    _, _, graph = shipped
    with pytest.raises(IRError) as e:
        Graph.from_dict(_broken(graph, edit))
    assert str(e.value).startswith(field), str(e.value)


def test_compile_and_frozen_eval_cli(tmp_path, capsys):
    assert main(["compile", str(POLICY), "--out", str(tmp_path / "build")]) == 0
    graph = Graph.load(tmp_path / "build" / "graph.json")
    report = json.loads((tmp_path / "build" / "compile_report.json").read_text())
    assert report["counts"]["luts"] == sum(len(l) for l in graph.layers)
    assert report["passes"][0]["luts"] == 256 + 256 and report["passes"][-1]["luts"] <= 512
    usage = json.loads((tmp_path / "build" / "inputs_report.json").read_text())
    assert np.asarray(usage["grid"]).sum() == sum(l.arity for l in graph.layers[0])  # every first-layer input placed
    assert usage["comparators_used"] == len(graph.comparators)
    assert np.asarray(usage["grid"])[:, 0].sum() == 0  # threshold -10 sigma is always true: folded away
    assert (tmp_path / "build" / "inputs_heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "module dwc_core" in (tmp_path / "build" / "dwc_core.v").read_text()
    ports = json.loads((tmp_path / "build" / "dwc_core.json").read_text())
    assert ports["latency_cycles"] == 2 + ports["pipeline"] and ports["pipeline"] >= 4  # every cut: max by default
    policy = tmp_path / "policy"
    import shutil
    shutil.copytree(POLICY, policy)
    capsys.readouterr()
    assert main(["eval", str(policy), "--eval-episodes", "1", "--frozen", "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["frozen"]["returns"] == out["returns"]  # this policy: both balance the full episode


def test_compile_rejects_bad_input(tmp_path):
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-m", "dwc", "compile", str(tmp_path / "nope"), "--out", str(tmp_path / "b")],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "nope does not exist" in res.stderr
    (tmp_path / "empty").mkdir()
    res = subprocess.run([sys.executable, "-m", "dwc", "compile", str(tmp_path / "empty"), "--out", str(tmp_path / "b")],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "not a dwc run" in res.stderr
    res = subprocess.run([sys.executable, "-m", "dwc", "compile", str(POLICY), "--out", str(tmp_path / "b"),
                          "--obs-width", "40"], capture_output=True, text=True)
    assert res.returncode == 2 and "--obs-width" in res.stderr


def test_fast_executor_on_the_trained_policy(shipped, tmp_path, monkeypatch):
    from dwc.backends.fast import FastExecutor
    monkeypatch.setenv("DWC_CACHE_DIR", str(tmp_path))
    actor, cfg, graph = shipped
    rng = np.random.default_rng(5)
    q = np.concatenate([rng.integers(-40000, 40000, (5000, graph.obs_dim)).clip(-32768, 32767),
                        extreme_observations(graph)])
    for g in (graph, optimize(graph)[0]):
        assert np.array_equal(FastExecutor(g).actions_int(q), ref.actions_int(graph, q))


def test_fast_executor_cache_is_per_cpu(tmp_path, monkeypatch):
    """Code built with -march=native is cached per CPU: another CPU sharing the cache folder (a
    cluster's home) builds its own object instead of loading one that may use missing instructions."""
    from dwc.core import cbuild
    monkeypatch.setenv("DWC_CACHE_DIR", str(tmp_path))
    assert "flags" not in cbuild._cpu_key() and len(cbuild._cpu_key()) > 20  # a real description of this CPU
    src = "int one(void) { return 1; }\n"
    here = cbuild.build(src)
    assert cbuild.build(src) == here  # cached
    monkeypatch.setattr(cbuild, "_cpu_key", lambda: "x86_64|GenuineIntel|another model|sse2")
    assert cbuild.build(src) != here and len(list((tmp_path / "fast").glob("*.so"))) == 2


def test_fast_build_removes_long_unused_libraries(tmp_path, monkeypatch):
    """Each circuit and kernel version caches its own library: building one removes those unused for
    UNUSED_DAYS; a library in use has its time renewed and stays."""
    import os
    import time
    from dwc.core import cbuild
    monkeypatch.setenv("DWC_CACHE_DIR", str(tmp_path))
    used = cbuild.build("int used(void) { return 1; }\n")
    stale, recent = tmp_path / "fast" / "dwc_stale.so", tmp_path / "fast" / "dwc_recent.so"
    stale.write_bytes(b""), recent.write_bytes(b"")
    old = time.time() - (cbuild.UNUSED_DAYS + 1) * 86400
    for f in (stale, used):
        os.utime(f, (old, old))
    assert cbuild.build("int used(void) { return 1; }\n") == used  # in use again: renewed, nothing built
    assert stale.exists()
    cbuild.build("int other(void) { return 2; }\n")  # a new library: the stale one goes
    assert not stale.exists() and recent.exists() and used.exists()


def test_onnx_export_matches_the_reference(shipped, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    actor, cfg, _ = shipped
    assert main(["compile", str(POLICY), "--out", str(tmp_path), "--onnx"]) == 0
    graph = Graph.load(tmp_path / "graph.json")
    sess = ort.InferenceSession(str(tmp_path / "policy.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    q = np.concatenate([ref.quantize_obs(graph, rollout_observations(actor, cfg.env, 2000, seed=11)),
                        rng.integers([f.min_int for f in graph.obs_formats], [f.max_int + 1 for f in graph.obs_formats],
                                     (3000, graph.obs_dim)), extreme_observations(graph)])
    x = (q * np.array([2.0 ** -f.frac for f in graph.obs_formats])).astype(np.float32)  # quantised inputs
    action, pc = sess.run(["action", "popcounts"], {"obs": x})
    assert np.array_equal(pc, ref.popcounts(graph, q))
    assert np.array_equal(action, ref.act(graph, x).astype(np.float32))
    raw = rng.normal(0, 2, (3000, graph.obs_dim)).astype(np.float32)  # and unquantised ones
    assert np.array_equal(sess.run(["action"], {"obs": raw})[0], ref.act(graph, raw).astype(np.float32))


def test_user_formats_stay_bit_exact(shipped):
    """A coarse user-chosen format saturates thresholds but the circuit still equals the model on
    every representable observation."""
    actor, _, _ = shipped
    graph = freeze(actor, obs_width=8, obs_frac=[4, 2, 6, 0])
    assert [f.frac for f in graph.obs_formats] == [4, 2, 6, 0]
    q = np.stack(np.meshgrid(*[np.arange(-128, 128, 17)] * 4), -1).reshape(-1, 4)
    assert_bit_exact(actor, graph, q)
