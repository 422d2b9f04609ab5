"""Proof 2 of :mod:`dwc.sim.formal`: the synthesised netlist against ``dwc_core.v``, net by shared net.

``equiv_make`` pairs the nets the two share by name; a power-up check, then the induction step one
component (or part, or neuron) at a time with ``equiv_induct``, then what is left with whole cones.
The claim and its assumptions are in :mod:`dwc.sim.formal_report`; the argument in :mod:`dwc.sim.formal`.
"""
from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path
from typing import NamedTuple

from dwc.core.errors import UserError
from dwc.core.rundir import write_text
from dwc.sim.formal_yosys import _PREP, _sat, _yosys
from dwc.sim.formal_progress import SolverProgress
from dwc.sim.formal_report import ASSUMPTIONS_NETLIST, CLAIM_NETLIST, METHOD_NETLIST, STAMP, sat_results


# Synthesis merges equal logic across neurons: a netlist sum of one neuron may read another's partial sum
# or constant product (the 2 x 16 MLP's linear1.n2_s4 reads n13_s4 and n0_t7). Its proof then needs that
# net's own logic too, and that one's products, down to the layer's input: a neuron's cone goes three
# named nets further (1,113 of the 2 x 16 MLP's nets were left unproved without, 22 with)
NEURON_ROUNDS = 3


class Group(NamedTuple):
    """One induction problem: a yosys selection of nets and how many named nets past its own its cone reaches."""
    selection: str
    rounds: int = 0
    name: str = ""  # the first part of its nets' names (``layer1``, ``linear1``): what _chunked splits
    neurons_apart: bool = False  # an arithmetic layer's other nets, its neurons being groups of their own


def _net_groups(verilog: str) -> list[Group]:
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
        out += [Group(f"w:{g}.{j}_*", NEURON_ROUNDS, f"{g}.{j}") for j in neurons]
        out.append(Group(whole + (f" w:{g}.n*_* %d" if neurons else ""), 0, g, bool(neurons)))
    return out


# a net inside one neuron of an arithmetic layer (its products and partial sums)
_NEURON = re.compile(r"(linear\d+\.n\d+)_")


def _aliases(netlist: str) -> tuple[list[str], list[str]]:
    """The netlist's named nets that are only another name of a named net (``assign a = b;``: the
    comparator bank's ``bits`` and the core's, a popcount's last sum and its count, a LUT that is a
    wire): not matched on their own. Two names matched for one net in the same proof merge their cut
    points (yosys equiv_make), and a component's logic would then not read its shared nets as cut.
    Not two bits of one net (``r[8] = r[7]``: register bits synthesis merged, which dwc_core.v has
    apart; unmatched, the one in dwc_core.v would be free in the induction step) nor ports.

    Of a net's names the one synthesis kept is matched, except where a neuron's net is also another
    component's (a product by 1 is the layer's input): that component's name is matched, so each
    neuron's logic in dwc_core.v reads the same cut as the netlist's. A net that several neurons name and
    no component does (two neurons' equal low product bits) is matched under none of them: a cut in one
    neuron's logic would be a free value in the other's. Returns the aliases and, of them, the names of
    the nets matched under another name than synthesis kept (or none), which the proof makes private in
    the netlist (see _HIDE)."""
    name = r"(\\\S+|[A-Za-z]\w*)"
    ports = set(re.findall(rf"^\s*(?:input|output)\s+(?:\[[^\]]*\]\s*)?{name}", netlist, re.M))  # always matched
    pairs = [(a.lstrip("\\"), b.lstrip("\\")) for a, b in re.findall(rf"^\s*assign {name} *= {name} *;", netlist, re.M)
             if a not in ports and not {a[:1], b[:1], a[1:2], b[1:2]} & {"$", "_"}
             and a.split("[")[0] != b.split("[")[0]]
    kept = {a: b for a, b in pairs}  # each alias and the name synthesis kept for its net

    def root(n: str) -> str:
        while n in kept:
            n = kept[n]
        return n
    nets: dict[str, set[str]] = {}
    for a, b in pairs:
        nets.setdefault(root(b), {root(b)}).add(a)
    ports = {p.lstrip("\\") for p in ports}
    out, moved = set(), set()
    for kept_name, names in nets.items():
        neurons = {m.group(1) for n in names if (m := _NEURON.match(n))}
        others = sorted(n for n in names if not _NEURON.match(n))
        keep = (None if len(neurons) > 1 and not others else
                others[0] if neurons and others and _NEURON.match(kept_name) else kept_name)
        out |= names - {keep} - ports
        if keep != kept_name:
            moved |= names - {keep} - ports
    return sorted(out), sorted(moved)


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
# ran out of 600 s; the names only choose where the proof cuts, never what it proves. So in the netlist for a
# net _aliases matched under another name than synthesis kept (moved.txt): its cells then read the matched one
_HIDE = ["select -read matched.txt", "select -set matched %", "select -clear", "rename -hide gold/w:* @matched %d"]
_HIDE_MOVED = ["select -read moved.txt", "select -set moved %", "select -clear", "rename -hide @moved"]


# a component's nets per induction problem at most: the 2 x 1024 DWC's layer1 (1,023 LUT6 outputs) as one
# problem was 2M variables at pipeline 2 and ran out of 600 s; its LUTs are independent given their inputs
CHUNK = 512


def _chunked(groups: list[Group], matched: list[str], work: Path) -> list[Group]:
    """``groups`` with each component of more than CHUNK matched nets split into selection files
    (``@file:NAME``, the equiv module's nets by name) of CHUNK nets each. Neurons stay whole."""
    out = []
    for group in groups:
        g = group.name
        members = [n for n in matched if n == g or n.startswith((f"{g}.", f"{g}["))]
        if group.neurons_apart:
            members = [n for n in members if not re.match(rf"{re.escape(g)}\.n\d+_", n)]
        if group.rounds or len(members) <= CHUNK:
            out.append(group)
            continue
        for k in range(0, len(members), CHUNK):
            name = f"part_{g}_{k // CHUNK}.txt"
            write_text(work / name, "".join(f"equiv/{n}\n" for n in members[k:k + CHUNK]))
            out.append(Group(f"@file:{name}", 0, g))
    return out


def _induction(groups: list[Group]) -> list[str]:
    """The induction step (all shared nets equal in a cycle -> all equal in the next), component by
    component (``equiv_induct`` on a selection uses only the selected cells: each is a small problem).
    First each component's nets, each from the shared nets its own logic reads (the cone stops at
    every other shared net, whose value is then free: a stronger claim, so sound); what that leaves
    (where a net's logic reads an alias of a shared net rather than the net) with its whole input cone,
    once the proved nets' netlist logic is gone (opt_clean). One problem over all nets (equiv_induct
    over the design) took 330 s on the Ant DWC without the input register and ran out of 600 s with it;
    net by net (equiv_simple) ~1.2 s a net, 45 min for the Ant DWC's 2,259. The later steps take only
    the nets still unproved (equiv_mark's regions): a component with none is then an empty problem, where
    its cone alone took 1-3 s to select (the 2 x 64 MLP's 290 later problems, almost all empty)."""
    def problem(g: str, cone: str, left: bool = False) -> list[str]:
        only = " a:equiv_region>0 %i" if left else ""
        if g.startswith("@file:"):  # a part of a large component, its nets listed by name
            pick = [f"select -read {g[6:]}", f"select -set eq % %ci1 t:$equiv %i{only}", "select -clear"]
        else:  # "w:bits" alone left a pipeline-0 core's comparator bits to the last step's cones
            pick = [f"select -set eq {g} %ci1 t:$equiv %i{only}"]
        return pick + [f"equiv_induct -seq 1 @eq %ci1{cone}"]

    # a cone up to the next named nets ($equiv cells); %ci2 steps over them to the nets they compare. The
    # neurons go further only once the first pass is done: a proved net's netlist logic is gone by then
    # (opt_clean), so the further cone is mostly dwc_core.v's word-level logic
    out = [line for g in groups for line in problem(g.selection, " %ci*:-$equiv")] + ["opt_clean", "equiv_mark"]
    further = [line for g in groups if g.rounds
               for line in problem(g.selection, " %ci*:-$equiv" + " %ci2 %ci*:-$equiv" * g.rounds, True)]
    out += further + (["opt_clean", "equiv_mark"] if further else []) + ["log DWC-STAGE induction-rest"]
    out += [line for g in groups for line in problem(g.selection, " %ci*", True)]
    # then any net still unproved, all at once: those no component's selection takes (a name of Amaranth's,
    # inp$15: 428 nets of the 2 x 64 MLP without the input register), first up to the next named nets
    for cone in (" %ci*:-$equiv", " %ci*"):
        out += ["opt_clean", "equiv_mark", "select -set eq t:$equiv a:equiv_region>0 %i",
                f"equiv_induct -seq 1 @eq %ci1{cone}"]
    return out + ["opt_clean"]


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
    aliases, moved = _aliases(netlist)
    write_text(work / "aliases.txt", "".join(f"{n}\n" for n in aliases))
    matched = sorted(set(_names(netlist)) - set(aliases))
    write_text(work / "matched.txt", "".join(f"gold/{n}\n" for n in matched))
    write_text(work / "moved.txt", "".join(f"gate/{n}\n" for n in moved))
    read = ["read_verilog netlist.v", "rename dwc_core gate", "read_verilog dwc_core.v", "rename dwc_core gold",
            "hierarchy -check", "proc", "flatten gold", "opt_clean",
            # one wire per bit in gold too, as the netlist has them, so the names match
            "splitnets gold", *_HIDE, *(_HIDE_MOVED if moved else []),
            "memory", "opt_clean", "async2sync", "dffunmap", "design -save pair"]
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
