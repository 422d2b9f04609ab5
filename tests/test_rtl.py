"""The Amaranth core computes exactly the IR reference's actions, with the declared latency and
one result per cycle (Amaranth simulator; the Verilator/cocotb benches check the Verilog)."""
import numpy as np
import pytest

from dwc.ir import reference as ref
from dwc.rtl.core import DWCCore, max_pipeline
from dwc.sim.pysim import run_vectors
from helpers import inputs_for, random_graph


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("pipeline", [0, 1, 3, "max"])
def test_core_matches_reference(seed, pipeline):
    g = random_graph(seed)
    # "max": every cut, the popcount adder trees registered at each level
    pipeline = max_pipeline(g) if pipeline == "max" else min(pipeline, len(g.layers) + 2)
    core = DWCCore(g, pipeline)
    q = inputs_for(g, 40, seed)
    actions, latency = run_vectors(core, q, gaps=seed % 2 == 1)
    assert np.array_equal(actions, ref.actions_int(g, q))
    assert set(latency) == {core.latency}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("pipeline", [0, "max"])
def test_core_with_full_adder_popcounts_matches_reference(seed, pipeline):
    """The LUT4-fabric popcount (3:2 counters, one adder level more) computes the same actions."""
    g = random_graph(seed)
    pipeline = max_pipeline(g, 3) if pipeline == "max" else pipeline
    core = DWCCore(g, pipeline, compressor=3)
    q = inputs_for(g, 40, seed)
    actions, latency = run_vectors(core, q, gaps=seed % 2 == 1)
    assert np.array_equal(actions, ref.actions_int(g, q)) and set(latency) == {core.latency}
    assert core.port_description()["popcount_compressor"] == 3


def test_verilog_and_port_description():
    from amaranth.back import verilog
    g = random_graph(3)
    core = DWCCore(g, 1)
    text = verilog.convert(core, name="dwc_core")
    assert "module dwc_core" in text and "valid_out" in text
    desc = core.port_description()
    assert desc["latency_cycles"] == 3
    assert [p["width"] for p in desc["inputs"]["obs"]] == [f.width for f in g.obs_formats]


def test_trained_policy_core_matches_reference():
    from pathlib import Path

    from dwc.flows.compile import freeze_run
    from dwc.ir.passes import optimize
    g, _ = optimize(freeze_run(Path(__file__).parent.parent / "policies" / "inverted-pendulum-v5-dwc"))
    rng = np.random.default_rng(0)
    q = np.concatenate([ref.quantize_obs(g, rng.normal(0, 1, (80, g.obs_dim))),
                        [[f.min_int for f in g.obs_formats], [f.max_int for f in g.obs_formats]]])
    core = DWCCore(g, 2)
    actions, latency = run_vectors(core, q)
    assert np.array_equal(actions, ref.actions_int(g, q)) and set(latency) == {core.latency}


@pytest.mark.parametrize("pipeline,target,comparators", [
    # slow only (~130 s): pipeline 0 in Verilator stays in CI through test_verify.py's one-cycle core (vectors and
    # closed loop), the input register through its pipeline-1 build, the shared bank's threshold edges here below
    pytest.param(0, None, "shared", marks=pytest.mark.slow), ("max", None, "full"), ("max", "ecp5", "shared")])
def test_verilog_in_verilator_matches_reference(tmp_path, pipeline, target, comparators):
    """The emitted Verilog, built by Verilator and driven by cocotb: zero mismatches, declared latency;
    for a LUT4 target with full-adder popcounts too; both comparator lowerings."""
    import json
    from pathlib import Path

    from dwc.cli import main
    from dwc.ir import Graph
    from dwc.sim.runner import simulate_vectors

    policy = Path(__file__).parent.parent / "policies" / "inverted-pendulum-v5-dwc"
    assert main(["compile", str(policy), "--out", str(tmp_path), "--pipeline", str(pipeline),
                 "--comparators", comparators] + (["--target", target] if target else [])) == 0
    g = Graph.load(tmp_path / "graph.json")
    ports = json.loads((tmp_path / "dwc_core.json").read_text())
    rng = np.random.default_rng(len(str(pipeline)))
    q = np.concatenate([ref.quantize_obs(g, rng.normal(0, 1, (400, g.obs_dim))),
                        rng.integers([f.min_int for f in g.obs_formats], [f.max_int + 1 for f in g.obs_formats],
                                     (100, g.obs_dim)),
                        [[f.min_int for f in g.obs_formats], [f.max_int for f in g.obs_formats], [0] * g.obs_dim]])
    # every comparator at its threshold and one code either side (the carry-out comparator's edge cases)
    edges = [[min(max(c.threshold + e, f.min_int), f.max_int) if d == c.dim else 0
              for d, f in enumerate(g.obs_formats)] for c in g.comparators for e in (-1, 0, 1)]
    q = np.concatenate([q, np.array(edges, dtype=q.dtype)])
    verilog = (tmp_path / "dwc_core.v").read_text()
    # the full lowering's deep pipelines use the carry-out form; the shared one has no compare cells
    assert ("dwc_cmp_carry #(" in verilog) == (pipeline == "max" and comparators == "full")
    assert ("dwc_cmp" in verilog) == (comparators == "full")
    r = simulate_vectors(tmp_path / "dwc_core.v", ports, q, tmp_path / "sim_build")
    assert np.array_equal(r["actions"], ref.actions_int(g, q))
    assert set(r["latency"]) == {ports["latency_cycles"]} == {2 + ports["pipeline"]}
    # every cut: comparators, 2 layers, popcount, and the inner levels of a 256-input tree: 6:3
    # counters then 6 levels of adders, or (LUT4 fabric) 3:2 counters then 7 levels
    assert ports["popcount_compressor"] == (3 if target else 6)
    if pipeline == "max":
        assert ports["pipeline"] == 4 + (7 if target else 6)
    import re
    counters = {int(n) for n in re.findall(r"\.N\(32'd(\d+)\)\n  \) \\pop\d+\.cnt", verilog)}
    assert max(counters) == (3 if target else 6)  # (a group's last counter may take fewer)


@pytest.mark.parametrize("policy", ["dwc", "qmlp", "dwc --comparators full"])
@pytest.mark.parametrize("pipeline", ["1", "max"])
def test_emitted_verilog_lints_clean(tmp_path, pipeline, policy):
    """Verilator's lint (its default warnings, nothing suppressed) finds nothing in dwc compile's
    output: LUT networks and the quantised MLP's signed arithmetic alike, both comparator lowerings."""
    import subprocess
    from pathlib import Path

    from dwc.cli import main
    from dwc.sim.runner import _verilator_env
    policy, *options = policy.split()
    policy = Path(__file__).parent.parent / "policies" / f"inverted-pendulum-v5-{policy}"
    assert main(["compile", str(policy), "--out", str(tmp_path), "--pipeline", pipeline, *options]) == 0
    _verilator_env()
    res = subprocess.run(["verilator", "--lint-only", str(tmp_path / "dwc_core.v")], capture_output=True, text=True)
    assert res.returncode == 0 and "%Warning" not in res.stderr, res.stderr[:2000]


def test_register_cuts_are_described():
    from dwc.rtl.core import max_pipeline, port_description
    g = random_graph(2)
    most = max_pipeline(g)
    cuts = port_description(g, most)["register_cuts"]
    assert len(cuts) == most and cuts[0] == "comparators" and cuts[-1] == "popcounts"
    assert port_description(g, 1)["register_cuts"] == ["comparators"]


@pytest.mark.parametrize("pipeline", [0, 2, "max"])
def test_network_scope_gives_the_popcounts(pipeline):
    """Bits in, popcounts out (the published cores' scope, for like-with-like benchmarks)."""
    from amaranth.sim import Simulator
    g = random_graph(4)
    pipeline = max_pipeline(g) if pipeline == "max" else pipeline
    core = DWCCore(g, pipeline, scope="network")
    q = inputs_for(g, 30, 4)
    bits, want = ref.comparator_bits(g, q), ref.popcounts(g, q)
    widths = [max(1, len(grp).bit_length()) for grp in g.groups]
    got = []

    async def bench(ctx):
        for t in range(len(q) + core.latency):
            if t < len(q):
                ctx.set(core.bits, sum(int(b) << c for c, b in enumerate(bits[t])))
            ctx.set(core.valid_in, int(t < len(q)))
            await ctx.tick()
            if ctx.get(core.valid_out):
                word, row = ctx.get(core.counts), []
                for w in widths:
                    row.append(word & ((1 << w) - 1))
                    word >>= w
                got.append(row)

    sim = Simulator(core)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert np.array_equal(np.array(got), want)
