"""The comparator bank's lowerings compute exactly the IR's thermometer bits (``q[dim] >= threshold``):
every input code of small fixed-point formats (Amaranth simulation) and of 8- and 16-bit ones
(Verilator), random and extreme codes of 16-bit ones, the shipped policies' thresholds; a compiled policy with the shared lowering
passes ``dwc verify``; synthesis reports the bank's area apart from the rest, smaller than before."""
import json
from pathlib import Path

import numpy as np
import pytest

from dwc.ir import LUT, Comparator, FixedFormat, Graph
from dwc.ir import reference as ref
from dwc.rtl.comparators import COMPARATORS, ComparatorBank

ROOT = Path(__file__).resolve().parent.parent


def thresholds_for(f: FixedFormat, n: int, rng) -> list[int]:
    """``n`` thresholds of a format, always with its edges: the lowest code (constant 1), one above,
    the highest code, one past it (constant 0) and 0, -1; duplicates allowed."""
    edges = [f.min_int, f.min_int + 1, f.max_int, f.max_int + 1, 0, -1, 1]
    return edges + [int(t) for t in rng.integers(f.min_int, f.max_int + 2, max(0, n - len(edges)))]


def probe_graph(formats: list[FixedFormat], per_dim: int, seed: int) -> Graph:
    """A graph whose actions are its comparator bits: one identity LUT and one single-bit popcount
    group per comparator, action table [0, 1] (so a bench reading actions reads the bank)."""
    rng = np.random.default_rng(seed)
    comps = [Comparator(d, t) for d, f in enumerate(formats) for t in thresholds_for(f, per_dim, rng)]
    n = len(comps)
    return Graph(formats, comps, [[LUT([c], 0b10) for c in range(n)]], [[c] for c in range(n)], FixedFormat(2, 0),
                 [[0, 1]] * n, meta={"env": "probe"})


def bank_bits(g: Graph, lowering: str, q: np.ndarray, registered: bool = False) -> np.ndarray:
    """The bank in Amaranth's simulator: bits for every row of ``q`` (``registered``: read a clock
    edge after the observation is set, the digit compares being registers)."""
    from amaranth.sim import Simulator
    bank = ComparatorBank(g, "native", lowering=lowering, registered=registered)
    got = []

    async def bench(ctx):
        for row in q:
            for d in range(g.obs_dim):
                ctx.set(bank.obs[f"o{d}"], int(row[d]))
            if registered:
                await ctx.tick()
            v = ctx.get(bank.bits)
            got.append([(v >> c) & 1 for c in range(len(g.comparators))])

    sim = Simulator(bank)
    if registered:
        sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return np.array(got, dtype=np.uint8)


def every_code(g: Graph, seed: int = 0) -> np.ndarray:
    """Every code of every dimension (the others' codes drawn at random alongside)."""
    rng = np.random.default_rng(seed)
    rows = []
    for d, f in enumerate(g.obs_formats):
        block = np.stack([rng.integers(x.min_int, x.max_int + 1, 1 << f.width) for x in g.obs_formats], axis=1)
        block[:, d] = np.arange(f.min_int, f.max_int + 1)
        rows.append(block)
    return np.concatenate(rows)


def edge_codes(g: Graph, n_random: int, seed: int) -> np.ndarray:
    """Random codes, the formats' extremes, 0, -1, and every threshold with a code either side."""
    rng = np.random.default_rng(seed)
    lo = np.array([f.min_int for f in g.obs_formats])
    hi = np.array([f.max_int for f in g.obs_formats])
    rows = [rng.integers(lo, hi + 1, (n_random, g.obs_dim)), [lo], [hi], [np.zeros_like(lo)], [np.full_like(lo, -1)]]
    for c in g.comparators:
        for e in (-1, 0, 1):
            row = rng.integers(lo, hi + 1)
            row[c.dim] = min(max(c.threshold + e, lo[c.dim]), hi[c.dim])
            rows.append([row])
    return np.concatenate(rows).astype(np.int64)


@pytest.mark.parametrize("lowering,registered", [("shared", False), ("shared", True), ("full", False)])
@pytest.mark.parametrize("widths", [(2, 3, 4), (5, 7), (8,), (9, 12)])
def test_every_code_of_small_formats(widths, lowering, registered):
    """Exhaustive: each dimension through all its codes, 2- to 12-bit formats (digits cut short,
    a format narrower than one digit), thresholds at and past both ends; the shared bank with its
    digit compares combinational and registered (as in the core)."""
    g = probe_graph([FixedFormat(w, 0) for w in widths], 24, seed=sum(widths))
    q = every_code(g)
    assert np.array_equal(bank_bits(g, lowering, q, registered), ref.comparator_bits(g, q))


@pytest.mark.parametrize("lowering", COMPARATORS)
def test_random_and_extreme_codes_of_16_bit_formats(lowering):
    g = probe_graph([FixedFormat(16, f) for f in (13, 0, 9)], 40, seed=16)
    q = edge_codes(g, 3000, 1)
    assert np.array_equal(bank_bits(g, lowering, q), ref.comparator_bits(g, q))


@pytest.mark.parametrize("policy", [
    # slow only (~80 s in Amaranth's simulator): CI keeps the pendulum's bank here, and the shared lowering's
    # every code of small formats, random and extreme 16-bit codes above and the Verilator tests below
    pytest.param("hopper-v5-dwc", marks=pytest.mark.slow), "inverted-pendulum-v5-dwc"])
def test_shipped_policies_thresholds(policy):
    """The shipped DWCs' banks (326 and 119 comparators), shared lowering."""
    from dwc.flows.compile import freeze_run
    from dwc.ir.passes import optimize
    g, _ = optimize(freeze_run(ROOT / "policies" / policy))
    q = edge_codes(g, 500, 2)
    assert np.array_equal(bank_bits(g, "shared", q), ref.comparator_bits(g, q))


@pytest.mark.parametrize("lowering", COMPARATORS)
def test_emitted_verilog_in_verilator(tmp_path, lowering):
    """The emitted Verilog in Verilator, read through a probe graph's actions: every code of two 8-bit
    dimensions and of a 16-bit one, random + extreme codes of all; the bank is its own module."""
    from dwc.flows.compile import emit_verilog
    from dwc.sim.runner import simulate_vectors
    g = probe_graph([FixedFormat(8, 3), FixedFormat(8, 0), FixedFormat(16, 11)], 30, 8)
    q = np.concatenate([every_code(g), edge_codes(g, 2000, 3)])
    emit_verilog(g, tmp_path, 1, comparators=lowering)
    verilog = (tmp_path / "dwc_core.v").read_text()
    assert "module dwc_comparators(" in verilog and ("dwc_cmp #(" in verilog) == (lowering == "full")
    ports = json.loads((tmp_path / "dwc_core.json").read_text())
    assert ports["comparators"] == lowering
    r = simulate_vectors(tmp_path / "dwc_core.v", ports, q, tmp_path / "sim")
    assert np.array_equal(r["actions"], ref.comparator_bits(g, q))


@pytest.mark.slow  # CI: test_verify.py::test_circuit_equals_reference_in_closed_loop[verilator] runs the same compile
# (the shipped policy, pipeline 1, the default shared lowering, asserted there) and verify (2 episodes, 500 vectors)
def test_verify_passes_with_the_shared_lowering(tmp_path, capsys):
    """dwc compile (shared comparators, the default) then dwc verify: vectors and closed-loop episodes."""
    from dwc.cli import main
    build = tmp_path / "b"
    assert main(["compile", str(ROOT / "policies" / "inverted-pendulum-v5-dwc"), "--out", str(build),
                 "--pipeline", "1", "--comparators", "shared"]) == 0
    assert json.loads((build / "dwc_core.json").read_text())["comparators"] == "shared"
    assert main(["verify", str(build), "--no-progress", "--verify-episodes", "2", "--max-steps", "200",
                 "--vectors", "500"]) == 0
    r = json.loads((build / "verify_report.json").read_text())
    assert r["passed"] and r["mismatches"] == 0 and r["steps"] == 400 and r["return_rtl"] == r["return_ref"]


def test_old_builds_rebuild_with_the_full_lowering():
    """A dwc_core.json from before the choice existed names no lowering: its core was the full one."""
    from dwc.rtl.comparators import built_comparators, check_comparators
    assert built_comparators({}) == "full" and built_comparators({"comparators": "shared"}) == "shared"
    with pytest.raises(ValueError, match="comparators must be one of"):
        check_comparators("tree")


@pytest.mark.slow
@pytest.mark.ci  # two yosys runs of a small core, no place and route
def test_synth_reports_comparator_area_smaller_than_the_full_lowering(tmp_path):
    """ECP5 (xc7's yosys estimate alike): the report splits the area into the comparator bank and the
    rest; the shared bank takes fewer LUT4 sites than full-width compares (carry chains at the deepest
    pipeline, soft logic otherwise), and the rest is unchanged by the lowering."""
    from dwc.flows.compile import emit_verilog
    from dwc.fpga.synth import area_split
    from dwc.fpga.synth_summary import area_text
    from dwc.frontends.freeze import untrained_graph
    from dwc.models import ActorConfig
    from dwc.rtl.core import max_pipeline
    g = untrained_graph(4, 1, ActorConfig(width=32, lut_inputs=4, thermo_bits=15), env="InvertedPendulum-v5")
    g.comparators = [c for c in g.comparators if c.threshold > -(1 << 15)]  # (none constant)
    areas = {}
    for lowering in COMPARATORS:
        out = tmp_path / lowering
        out.mkdir()
        emit_verilog(g, out, max_pipeline(g, 3), compressor=3, comparators=lowering)
        areas[lowering] = area_split(out, "ecp5-25k", out / "area")
    shared, full = areas["shared"], areas["full"]
    assert shared["comparator_lowering"] == "shared" and full["comparator_lowering"] == "full"
    assert full["comparators"]["cells"].get("CCU2C", 0) > 0 and "CCU2C" not in shared["comparators"]["cells"]
    for a in (shared, full):  # ECP5: a CCU2C takes two LUT4 sites
        for part in ("comparators", "network"):
            assert a[part]["lut_sites"] == a[part]["lut4_sites"] == a[part]["luts"] + 2 * a[part]["cells"].get("CCU2C", 0)
    assert 0 < shared["comparators"]["lut_sites"] < full["comparators"]["lut_sites"] / 2
    assert abs(shared["network"]["lut_sites"] - full["network"]["lut_sites"]) <= 0.02 * full["network"]["lut_sites"]
    # the shared bank's registers stand in for the core's input register, which the full lowering keeps
    # in the rest of the core: the flip-flops move from one part to the other, their total unchanged
    assert full["comparators"]["ffs"] == 0 < shared["comparators"]["ffs"]
    assert shared["network"]["ffs"] < full["network"]["ffs"]
    text = area_text({"target": "ecp5-25k", "family": "ecp5", "area": full})
    c = full["comparators"]
    assert text.startswith(f"ecp5-25k: area: comparators (full) {c['lut_sites']:,} LUT sites ({c['luts']:,} LUTs + "
                           f"{c['cells']['CCU2C']:,} carry cells), 0 FFs; network {full['network']['lut_sites']:,} LUT sites")
