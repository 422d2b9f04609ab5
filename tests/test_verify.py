"""``dwc verify``: the emitted Verilog (and its yosys netlist) in Verilator and Icarus, against the IR
reference executor, on vectors and on closed-loop MuJoCo episodes."""
import json
import math
import shutil
from pathlib import Path

import pytest

from dwc.cli import main
from dwc.ir import Graph

POLICY = Path(__file__).parent.parent / "policies" / "inverted-pendulum-v5-dwc"


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    assert main(["compile", str(POLICY), "--out", str(out), "--pipeline", "1"]) == 0
    return out


def verify(build, *args) -> tuple[int, dict]:
    code = main(["verify", str(build), "--no-progress", *args])
    return code, json.loads((build / "verify_report.json").read_text())


@pytest.mark.parametrize("sim", ["verilator", "icarus"])
def test_circuit_equals_reference_in_closed_loop(build, sim, capsys):
    # the default comparator lowering (shared): test_comparators' own compile-and-verify is slow-only
    assert json.loads((build / "dwc_core.json").read_text())["comparators"] == "shared"
    code, r = verify(build, "--sim", sim, "--verify-episodes", "2", "--max-steps", "300", "--vectors", "500")
    out = capsys.readouterr().out
    assert code == 0 and r["passed"] and "PASS" in out
    assert r["mismatches"] == 0 and r["mismatch"] is None
    assert r["steps"] == 600 and r["episodes"] == 2 and r["latency_cycles"] == 3
    assert r["return_rtl"] == r["return_ref"] and min(r["return_rtl"]) >= 300  # the policy balances
    d = r["designs"]["rtl"]
    assert d["vector_latency"] == [3] and d["closed_loop_latency"] == [3] and d["one_result_per_cycle"]
    assert r["vectors"]["recorded"] == 600 and r["vectors"]["random"] == 500 and r["vectors"]["extreme"] > 0


def test_the_one_cycle_core_without_an_input_register(tmp_path, capsys):
    """--no-input-register --pipeline 0: observation to action register in one cycle, exact in
    Verilator with latency 1 on vectors and in closed loop."""
    assert main(["compile", str(POLICY), "--out", str(tmp_path), "--pipeline", "0", "--no-input-register"]) == 0
    assert json.loads((tmp_path / "dwc_core.json").read_text())["input_register"] is False
    code, r = verify(tmp_path, "--verify-episodes", "1", "--max-steps", "200", "--vectors", "300")
    assert code == 0 and r["passed"] and r["mismatches"] == 0 and r["latency_cycles"] == 1
    d = r["designs"]["rtl"]
    assert d["vector_latency"] == [1] and d["closed_loop_latency"] == [1] and d["one_result_per_cycle"]


def test_a_wrong_circuit_is_caught_and_named(small_build, tmp_path):
    """Change one action-table entry in the IR the circuit is checked against: verify must fail at the
    first closed-loop step that uses it, name the step, observation and both actions, and dump a
    waveform of it. On the small untrained core (2 x 32 LUT4): the check and its traced replay are two
    Verilator builds; with the shipped 2 x 256 LUT6 policy the test took 320 s, now 203 s (load ~9)."""
    bad = tmp_path / "bad"
    shutil.copytree(small_build, bad, ignore=shutil.ignore_patterns("verify*", "netlist*", "synth*"))
    g = Graph.load(bad / "graph.json")
    # the popcount the policy hits on the first step of episode seed 0
    from dwc.ir import reference as ref
    from dwc.ir.closed_loop import reference_episodes
    ep = reference_episodes(g, "InvertedPendulum-v5", [0], max_steps=5)[0]
    pc = ref.popcounts(g, [ep["observations"][2]])[0, 0]
    g.action_tables[0][pc] += 1
    g.save(bad / "graph.json")
    first_use = next(t for t, o in enumerate(ep["observations"]) if ref.popcounts(g, [o])[0, 0] == pc)
    code, r = verify(bad, "--verify-episodes", "1", "--max-steps", "50", "--vectors", "50", "--seed", "0")
    assert code == 1 and not r["passed"] and r["mismatches"] > 0
    m = r["mismatch"]
    assert m["bench"] == "closed_loop" and m["episode"] == 0 and m["step"] == first_use
    assert m["observation_int"] == ep["observations"][first_use]
    assert m["action_ref_int"][0] == m["action_rtl_int"][0] + 1
    assert Path(m["waveform"]).stat().st_size > 0


def test_post_synthesis_netlist_matches(build):
    code, r = verify(build, "--netlist", "--verify-episodes", "1", "--max-steps", "200", "--vectors", "300")
    assert code == 0 and r["passed"]
    n = r["designs"]["netlist"]
    assert n["vector_mismatches"] == 0 and n["closed_loop_mismatches"] == 0 and n["steps"] == 200
    assert n["return_rtl"] == r["return_ref"] and n["vector_latency"] == [3]
    text = Path(r["netlist"]["netlist"]).read_text()
    assert "dwc_lut" not in text  # really the gate-level netlist, not the RTL again


def test_clear_errors(tmp_path, build, capsys):
    assert main(["verify", str(tmp_path)]) == 2
    assert "not a dwc compile output" in capsys.readouterr().err
    assert main(["verify", str(build), "--env", "Hopper-v5", "--verify-episodes", "1"]) == 2
    assert "observation" in capsys.readouterr().err


def published_size_build(tmp_path) -> Path:
    """An untrained DWC of the published size (2 x 1024 LUT6, B = 63) at Hopper-v5's dimensions."""
    from dwc.flows.compile import emit_verilog
    from dwc.frontends.freeze import untrained_graph
    g = untrained_graph(11, 3, env="Hopper-v5")
    assert g.counts()["luts"] > 2000 and g.counts()["comparators"] > 600
    g.save(tmp_path / "graph.json")
    emit_verilog(g, tmp_path, pipeline=1)
    return tmp_path


@pytest.mark.slow
def test_published_size_in_verilator(tmp_path):
    build = published_size_build(tmp_path)
    code, r = verify(build, "--verify-episodes", "3", "--vectors", "1000")
    assert code == 0 and r["mismatches"] == 0 and r["steps"] > 0
    assert r["return_rtl"] == r["return_ref"] and r["designs"]["rtl"]["vector_latency"] == [3]


@pytest.mark.slow
def test_published_size_netlist(tmp_path):
    build = published_size_build(tmp_path)
    code, r = verify(build, "--netlist", "--verify-episodes", "1", "--vectors", "500")
    assert code == 0 and r["designs"]["netlist"]["vector_mismatches"] == 0
    assert r["designs"]["netlist"]["return_rtl"] == r["return_ref"]


def test_episode_quantises_like_the_ir():
    """The closed loop's vectorised quantiser equals FixedFormat.quantize (what the IR defines)."""
    import gymnasium as gym
    import numpy as np

    from dwc.ir import reference as ref
    from dwc.ir.closed_loop import Episode
    from dwc.flows.compile import freeze_run
    g = freeze_run(POLICY)
    env = gym.make("InvertedPendulum-v5")
    ep = Episode(env, g, seed=0)
    rng = np.random.default_rng(0)
    for obs in np.concatenate([rng.normal(0, 3, (500, g.obs_dim)), [[1e9] * g.obs_dim, [-1e9] * g.obs_dim]]):
        ep._set(obs)
        assert np.array_equal(ep.q, ref.quantize_obs(g, obs)[0])


def test_hil_sim_over_the_uart_link_with_faults(build, capsys):
    """dwc hil --sim: the board top's logic (core + UART link) in Verilator, every action over the
    serial protocol; garbage is skipped, a dropped byte and a flipped bit are caught by the link and
    the host resends; returns equal dwc verify's."""
    code, v = verify(build, "--verify-episodes", "1", "--max-steps", "60", "--vectors", "50")
    assert code == 0
    assert main(["hil", str(build), "--sim", "--board-episodes", "1", "--max-steps", "60", "--inject", "garbage@5",
                 "--inject", "drop@15", "--inject", "corrupt@30", "--inject", "drop@1000"]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "not reached, the run has 60 steps" in out
    r = json.loads((build / "hil_report.json").read_text())
    assert r["return_hil"] == v["return_rtl"] == r["return_ref"] and r["steps"] == 60
    assert r["action_mismatches"] == 0 and r["latency_cycles_on_chip"] == [3]
    assert r["retries"] == 2 and r["frames_bad_on_chip"] == 2 and r["frames_ok_on_chip"] == 60
    assert r["faults_injected"] == {"5": "garbage", "15": "drop", "30": "corrupt"}
    assert r["faults_not_reached"] == {"1000": "drop"}  # a 60-step run never sent step 1000
    # real time: the step's frames on the line against InvertedPendulum's 40 ms control period
    bits = 10 * (r["frame_bytes"]["obs"] + r["frame_bytes"]["action"])
    assert r["control_period_s"] == pytest.approx(0.04) and r["link_keeps_up"] is True
    assert r["baud_for_real_time"] == math.ceil(bits / 0.04) and "the task steps every 40.0 ms: the link keeps up" in out


def test_hil_errors(build, capsys):
    assert main(["hil", str(build), "--sim", "--inject", "melt@3"]) == 2
    assert "KIND@STEP" in capsys.readouterr().err
    assert main(["hil", str(build), "--sim", "--inject", "drop@3", "--inject", "garbage@3"]) == 2
    assert "step 3 is given twice (drop and garbage)" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("policy", [  # CI: the small quantised MLP and the gate network (~30 s each)
    "inverted-pendulum-v5-qmlp",
    pytest.param("inverted-pendulum-v5-qmlp16", marks=pytest.mark.ci),
    pytest.param("inverted-pendulum-v5-gates", marks=pytest.mark.ci)])
def test_hil_sim_for_other_policy_types(tmp_path, policy):
    """The quantised MLP and the gate network go over the same UART link as a DWC, bit-exact."""
    from pathlib import Path
    src = Path(__file__).parent.parent / "policies" / policy
    assert main(["compile", str(src), "--out", str(tmp_path), "--pipeline", "1"]) == 0
    assert main(["hil", str(tmp_path), "--sim", "--board-episodes", "1", "--max-steps", "30", "--inject", "corrupt@10"]) == 0
    r = json.loads((tmp_path / "hil_report.json").read_text())
    assert r["action_mismatches"] == 0 and r["return_hil"] == r["return_ref"] and r["retries"] == 1


def test_verify_and_hil_default_to_the_evaluation_seeds(build):
    """dwc eval, verify and hil evaluate the same episodes by default: the training seed + 10000."""
    from dwc.core.config import EVAL_SEED_OFFSET
    from dwc.sim.verify import evaluation_seed
    g = Graph.load(build / "graph.json")
    assert evaluation_seed(g) == g.meta["seed"] + EVAL_SEED_OFFSET
    g.meta.pop("seed")  # a graph compiled before the seed was recorded: its source run's config.json
    assert evaluation_seed(g) == json.loads((Path(g.meta["source_run"]) / "config.json").read_text())["seed"] + \
        EVAL_SEED_OFFSET
    code, r = verify(build, "--verify-episodes", "1", "--max-steps", "5", "--vectors", "10")
    assert code == 0 and r["seeds"] == [evaluation_seed(g)]
