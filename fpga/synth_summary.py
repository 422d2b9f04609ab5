"""``dwc synth``'s reports for people: one row per target, the area split, the timing verdict, the
energy estimate and the boards (:func:`synth_text`), and which missed the clock they required."""
from __future__ import annotations

from dwc.core.tools import router_text
from dwc.fpga.devices import CARRY_SITES


def area_text(r: dict) -> str | None:
    """``ecp5-25k: area: comparators (shared) 1,237 LUT sites (1,237 LUTs), 0 FFs; network ...`` (a synth
    report's split; LUT sites count carry cells as the LUT positions they take)."""
    a = r.get("area")
    if not a:
        return None

    def part(p: dict) -> str:
        carries = sum(v for k, v in p["cells"].items() if k in CARRY_SITES[r["family"]])
        return (f"{p['lut_sites']:,} LUT sites ({p['luts']:,} LUTs" + (f" + {carries:,} carry cells" if carries else "")
                + f"), {p['ffs']:,} FFs")
    return (f"{r['target']}: area: comparators ({a['comparator_lowering']}) {part(a['comparators'])}; "
            f"network {part(a['network'])}")


def timing_text(fmax: float | None, requested: float | None, required: bool = True) -> str:
    """``Fmax 16.5 MHz < 100 requested: TIMING NOT MET`` (or ``>= ...: timing met``); with ``required``
    false (no --freq given) a slower Fmax is stated, not failed."""
    if requested is None:
        return "no clock (estimate only)"
    if not required and (fmax is None or fmax < requested):
        reached = "no Fmax reported" if fmax is None else f"Fmax {fmax:.1f} MHz"
        return f"{reached} (placed for the default {requested:g} MHz; no clock required: --freq MHZ requires one)"
    if fmax is None:
        return f"no Fmax reported, {requested:g} MHz requested: TIMING NOT MET"
    if fmax >= requested:
        return f"Fmax {fmax:.1f} MHz >= {requested:g} requested: timing met"
    return f"Fmax {fmax:.1f} MHz < {requested:g} requested: TIMING NOT MET"


def cells_text(r: dict) -> str:
    """``637 ICESTORM_LC`` / ``375 TRELLIS_COMB``: the logic cells nextpnr placed (core + shell)."""
    c = r.get("cells")
    return f"{c['used']} {c['kind']}" if c and c.get("used") is not None else "-"


def synth_text(reports: list[dict], boards: list[dict]) -> str:
    """The reports of :func:`synth_build` for people: one row per target, its timing verdict, the
    energy estimates, boards."""
    lines = []
    if reports:
        lines.append(f"{'target':<12}{'LUTs':>8}{'FFs':>7}{'cells (placed)':>20}{'util':>6} {'of':<13}{'Fmax':>7}"
                     f"{'req':>6}{'latency':>9}{'ns':>7}{'ns@req':>7}{'actions/s':>11}  bitstream")
    for r in reports:
        fmax = f"{r['fmax_mhz']:.1f}" if r["fmax_mhz"] else "-"
        req = f"{r['requested_mhz']:g}" if r.get("requested_mhz") else "-"
        aps = f"{r['actions_per_s'] / 1e6:.1f} M" if r["actions_per_s"] else "-"
        util = f"{r['utilisation']:.0%}" if r.get("utilisation") is not None else "-"
        ns = f"{r['action_latency_ns']:.1f}" if r.get("action_latency_ns") else "-"
        ns_req = f"{r['action_latency_ns_at_requested']:.1f}" if r.get("action_latency_ns_at_requested") else "-"
        lines.append(f"{r['target']:<12}{r['luts']:>8}{r['ffs']:>7}{cells_text(r):>20}{util:>6} "
                     f"{r.get('utilisation_of') or '-':<13}{fmax:>7}{req:>6}{r['latency_cycles']:>8}c{ns:>7}{ns_req:>7}{aps:>11}  "
                     f"{r['bitstream'] or ('(none)' if r.get('no_bitstream') else '(estimate only)')}")
    if reports:
        lines.append("LUTs/FFs: the core alone (LUT4 on ecp5/ice40/gowin/machxo2/nexus, LUT6 on xc7, LUT trees on gatemate); cells: the logic cells nextpnr placed "
                     "(core + serial shell); util: the device's most used resource; Fmax/req in MHz (nextpnr's timing "
                     "analysis / requested); latency: the core's observation in to action out, in cycles, in ns at Fmax and in ns at the "
                     "requested clock (ns@req, where the design reaches it)")
    for r in reports:
        if area_text(r):
            lines.append(area_text(r))
        if r.get("requested_mhz") is not None:
            lines.append(f"{r['target']}: {timing_text(r['fmax_mhz'], r['requested_mhz'], r.get('clock_required', True))}")
        if line := router_text(r["target"], r):
            lines.append(line)
        if r.get("constraints"):
            lines.append(f"{r['target']}: pins {', '.join(f'{k}={v}' for k, v in r['pins'].items())} -> {r['constraints']}")
        if r.get("no_bitstream"):
            lines.append(f"{r['target']}: {r['no_bitstream']}")
        if r.get("nextpnr_crashed_once"):
            lines.append(f"{r['target']}: nextpnr crashed after routing once (its log: nextpnr-crashed.log); placed and "
                         f"routed again with the options in the report's nextpnr command")
    for r in reports:
        if "energy" in r:
            e = r["energy"]
            static = (f" + static {e['static_nj']:.3g} ({e['parameters']['static_mw']:g} mW at {e['at_mhz']:g} MHz)"
                      if e["static_nj"] is not None else " (no Fmax: static left out)")
            lines.append(f"{r['target']}: ESTIMATED {e['per_action_nj']:.3g} nJ/action = dynamic "
                         f"{e['dynamic_nj']:.3g} (activity {e['activity']['alpha']:.3f}) + clock {e['clock_nj']:.3g}"
                         f"{static}")
    if any("energy" in r for r in reports):
        lines.append("energy: an estimate (measured activity x assumed per-cell energies); model in report.json "
                     "'energy'")
    for b in boards:
        lines.append(f"board {b['board']} ({b['device']}): clock {b['clock_mhz']:g} MHz, "
                     f"{timing_text(b['fmax_mhz'], b['clock_mhz'])}, UART {b['baud']} baud, latency "
                     f"{b['latency_cycles']} cycles; bitstream {b['bitstream']}")
        if line := router_text(f"board {b['board']}", b):
            lines.append(line)
        if b.get("constraints"):
            lines.append(f"board {b['board']}: pins {', '.join(f'{k}={v}' for k, v in b['pins'].items())} -> "
                         f"{b['constraints']}")
    return "\n".join(lines)


def timing_missed(reports: list[dict], boards: list[dict] = ()) -> list[str]:
    """The targets and boards whose Fmax is below the clock required of them (a board's own clock)."""
    return ([r["target"] for r in reports if r.get("timing_met") is False and r.get("clock_required", True)]
            + [b["board"] for b in boards if b.get("timing_met") is False])
