"""What ``dwc verify --formal`` reports (:mod:`dwc.sim.formal` runs the proofs): the claim, assumptions
and method of each proof, the solver's log read into per-lemma results, a counterexample of the
contract told in the policy's terms, and the summary printed for people."""
from __future__ import annotations

import re

from dwc.ir import Graph


# ---------------------------------------------------------------------------------------------- claims

def claim_reference(latency: int) -> str:
    return (f"For every input sequence, in every clock cycle t from power-up: valid_out is high exactly when "
            f"valid_in was high in cycle t-{latency} and rst was low in cycles t-{latency} to t-1; and whenever "
            f"valid_out is high, action equals the reference's action for the observation of cycle t-{latency}.")


ASSUMPTIONS_REFERENCE = ("Power-up state: every register at its declared initial value (0). One clock, "
                         "rising edge. The reference is the IR as plain Verilog (dwc.backends.reference_verilog); "
                         "both designs as read by yosys's Verilog front end.")
METHOD_REFERENCE = ("A chain of lemmas, one per component boundary (comparator bits, LUT layers, the popcount "
                    "trees' counters and registered adder levels against the reference's named partial sums, "
                    "popcounts, action tables, then the ports), each proved by yosys sat -tempinduct "
                    "(MiniSat) from power-up (a lemma with no register between its cut and its nets: sat "
                    "in one frame over every state, a stronger claim): the core and the reference cut at the "
                    "previous boundary (the core's pipeline register where it has one) and driven by the "
                    "same values, the core's "
                    "nets equal the reference's, delayed as the pipeline delays them, whenever the pipeline "
                    "has carried them that far without a reset; partial sums also at most their count of "
                    "bits, which the next lemma assumes. Identical logic on both sides is merged first "
                    "(opt_merge), the solver proves the rest. When a lemma fails, the contract in one piece "
                    "(nothing cut).")
CLAIM_NETLIST = ("For every input sequence, in every clock cycle from power-up: every net the netlist and "
                 "dwc_core.v share by name (the ports action and valid_out, the pipeline registers, the "
                 "kept nets between components; a netlist net that is only another name of one of these is "
                 "compared as that one, and one that only several neurons' products or sums name, through the "
                 "nets it feeds) has the same value in both.")
ASSUMPTIONS_NETLIST = ("Power-up state: every register at its declared initial value (a register without one "
                       "may hold anything). Both designs as read by yosys's Verilog front end; the generic "
                       "netlist's cells as yosys defines them.")
METHOD_NETLIST = ("Register and net correspondence by name (yosys equiv_make; dwc_core.v's names the "
                  "netlist lacks made private, so its cells read the matched nets). Power-up: a miter of "
                  "every shared net, one cycle from the declared initial values (sat). Induction step: if every "
                  "shared net is equal in a cycle, every one is equal in the next (equiv_induct -seq 1, "
                  "MiniSat, component by component: each net first from the shared nets its logic reads, "
                  "any left with its whole input cone). "
                  "Hence all are equal in every cycle. When a net is not proved, the outputs alone are "
                  "checked (miter, sat -tempinduct) for a counterexample.")


# ------------------------------------------------------------------------------------ the solver's log

STAMP = re.compile(r"^\[(\d+\.\d+)\] ?", re.M)


def sat_results(log: str) -> list[dict]:
    """Per stage of a log (``log DWC-STAGE`` markers): the ``sat -tempinduct`` outcome, status proved |
    counterexample | unproved | running (cut short), the induction length, the largest problem, the
    seconds the stage took (from the log's time stamps) and the counterexample table."""
    out = []
    parts = re.split(r"^\[[\d.]+\] ?DWC-STAGE .*$", log, flags=re.M)
    stamps = [float(t) for t in re.findall(r"^\[([\d.]+)\] ?DWC-STAGE", log, re.M)]
    for i, chunk in enumerate(parts[1:]):
        times = [float(t) for t in STAMP.findall(chunk)]
        text = STAMP.sub("", chunk)
        sizes = [(int(v), int(c)) for v, c in re.findall(r"Solving problem with (\d+) variables and (\d+) clauses", text)]
        r = {"status": "running", "variables": max((v for v, _ in sizes), default=0),
             "clauses": max((c for _, c in sizes), default=0),
             "seconds": round(max(times) - stamps[i], 1) if times else 0.0, "started": stamps[i]}
        lengths = re.findall(r"Trying induction with length (\d+)", text)
        if "Induction step proven: SUCCESS!" in text:
            r["status"] = "proved"
            r["induction_length"] = int(lengths[-1]) if lengths else None
        elif "model found for base case: FAIL!" in text:
            r["status"] = "counterexample"
            r["trace"] = _trace(text)
            r["length"] = int(lengths[-1]) if lengths else None
        elif "SAT proof finished - no model found: SUCCESS!" in text:
            r["status"] = "proved"  # one frame, every state (formal._sat_frame)
        elif re.search(r"[Rr]eached maximum number of time steps|proof failed|model found: FAIL!", text):
            # one frame's counterexample starts from any state, perhaps one the core never reaches
            r["status"] = "unproved"
        if r["status"] in ("running", "unproved") and lengths:
            r["reached_length"] = int(lengths[-1])  # how far the induction got before it stopped
        out.append(r)
    return out


def _trace(chunk: str) -> dict:
    """The counterexample table yosys prints: {signal: {step: binary string}} (step 'init' too)."""
    tr: dict = {}
    for step, name, bits in re.findall(r"^\s+(\d+|init)\s+\\(\S+)\s+\S+\s+\S+\s+([01xX]+)\s*$", chunk, re.M):
        tr.setdefault(name, {})[step] = bits
    return tr


# -------------------------------------------------------------------------------------- counterexample

def _obs_fields(g: Graph, bits: str) -> list[int]:
    """A packed observation (binary string, MSB first) -> its signed fields."""
    v, out, lsb = int(bits, 2), [], 0
    for f in g.obs_formats:
        x = (v >> lsb) & ((1 << f.width) - 1)
        out.append(x - (1 << f.width) if x >> (f.width - 1) else x)
        lsb += f.width
    return out


def _action_fields(g: Graph, bits: str) -> list[int]:
    w, v = g.action_format.width, int(bits, 2)
    return [((v >> (a * w)) & ((1 << w) - 1)) - ((1 << w) if (v >> (a * w + w - 1)) & 1 else 0)
            for a in range(g.action_dim)]


def describe_reference_cex(g: Graph, ports: dict, trace: dict) -> dict:
    """The input sequence of a counterexample, and where the contract breaks: the cycle, the
    observation L cycles earlier, the core's outputs, and the IR reference executor's action for it."""
    import numpy as np

    from dwc.ir import reference as ref
    L = ports["latency_cycles"]
    steps = sorted(int(s) for s in trace.get("obs", {}) if s != "init")
    seq = [{"cycle": s, "rst": int(trace.get("rst", {}).get(str(s), "0"), 2),
            "valid_in": int(trace.get("valid_in", {}).get(str(s), "0"), 2),
            "observation_int": _obs_fields(g, trace["obs"][str(s)])} for s in steps]
    out = {"inputs": seq, "note": f"cycle 1 starts from power-up; an observation fed in cycle t is the core's "
                                  f"result in cycle t + {L}"}
    act, vo = trace.get("core.action", {}), trace.get("core.valid_out", {})
    if act:
        for s in steps:  # the first cycle whose output breaks the contract
            src = s - L
            v_exp = src >= 1 and seq[src - 1]["valid_in"] and not any(x["rst"] for x in seq[src - 1:s - 1])
            got_v = int(vo.get(str(s), "0"), 2)
            q = seq[src - 1]["observation_int"] if src >= 1 else None
            want = [int(v) for v in ref.actions_int(g, np.array([q]))[0]] if q is not None else None
            got = _action_fields(g, act[str(s)])
            if got_v != bool(v_exp) or (got_v and got != want):
                fmt = g.action_format
                out.update({"cycle": s, "valid_out": got_v, "valid_out_expected": int(bool(v_exp)),
                            "observation_int": q, "action_core_int": got, "action_reference_int": want,
                            "action_core": [float(fmt.to_float(v)) for v in got],
                            "action_reference": [float(fmt.to_float(v)) for v in want] if want else None})
                break
    return out


def summary(report: dict) -> str:
    lines = [f"dwc verify --formal: {report['build']} (latency {report['latency_cycles']} cycles, "
             f"{report['circuit']['luts']} LUTs, {report['circuit']['comparators']} comparators)"]
    for name, p in report["proofs"].items():
        what = ("dwc_core.v == the IR's reference Verilog, through the timing contract" if name == "reference"
                else "the synthesised netlist == dwc_core.v")
        lines.append(f"[{name}] {what}: {p['status'].upper()} in {p['seconds']} s")
        for s in p.get("lemmas", []):
            extra = f", induction length {s['induction_length']}" if s.get("induction_length") else ""
            took = f" ({s['seconds']} s{extra})" if "seconds" in s else ""
            lines.append(f"[{name}]   lemma {s['lemma']}: {s['status']}{took}")
        if p["status"] == "proved":
            lines.append(f"[{name}]   proved: {p['claim']}")
        cex = p.get("counterexample")
        if cex and "cycle" in cex:
            lines.append(f"[{name}]   COUNTEREXAMPLE from power-up, cycle {cex['cycle']}: observation "
                         f"{cex['observation_int']} (fixed-point codes) -> core {cex['action_core_int']} "
                         f"(valid_out {cex['valid_out']}), reference {cex['action_reference_int']} "
                         f"(valid_out {cex['valid_out_expected']})")
        elif cex:
            lines.append(f"[{name}]   COUNTEREXAMPLE found (inputs per cycle in the report)")
        elif p["status"] == "timeout":
            lines.append(f"[{name}]   not proved: the solver ran out of time ({report['timeout_s']} s; "
                         f"--formal-timeout)")
        elif p["status"] != "proved":
            lines.append(f"[{name}]   not proved ({p['status']})")
    lines.append(("PROVED" if report["proved"] else "NOT PROVED") + f" in {report['seconds']} s; report: "
                 f"{report['build']}/formal_report.json")
    return "\n".join(lines)
