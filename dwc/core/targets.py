"""The FPGA families dwc builds for, in one table: each family's logic-cell LUT size (what ``dwc train
--target`` trains, and the popcount's first counter) and its devices, smallest first (what a family
``--target`` places on: the smallest the core fits). How each device is synthesised, placed and routed
is fpga/devices.py's ``TARGETS``, keyed by these device names; a test checks the two agree."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    lut_inputs: int  # inputs of the fabric's logic-cell LUT
    devices: tuple[str, ...]  # smallest first
    placed: bool = True  # an open place-and-route flow exists (Fmax, --pipeline auto, bitstreams)


FAMILIES = {
    # no ecp5-12k: nextpnr's --12k places on the whole 25k die (24,288 cells), so it could not tell a fit apart
    "ecp5": Family(4, ("ecp5-25k", "ecp5-45k", "ecp5-85k")),
    "ice40": Family(4, ("ice40-up5k", "ice40-hx8k")),
    # the dies of Sipeed's Tang Nano 1K, 4K, 9K and Tang Primer 20K (nextpnr-himbaechel-gowin, apycula)
    "gowin": Family(4, ("gowin-1k", "gowin-4k", "gowin-9k", "gowin-18k")),
    # nextpnr-machxo2 (YoWASP 0.11.1) has chip databases for two dies only: the MachXO2-1200 (and the 640 on
    # it) and the MachXO3LF-6900, the same fabric (its 4300 in BG400 is that die too); none for the larger
    # MachXO2s (2000, 4000, 7000). So the family's larger device is a MachXO3
    "machxo2": Family(4, ("machxo2-1200", "machxo3-6900")),
    # Cologne Chip's logic cell (CPE) is no LUT4: half a CPE is a tree of three 2-input LUTs over 4 inputs,
    # which holds 1,208 of the 65,536 4-input functions (yosys builds the others from a CPE in mux mode);
    # trained as 4-input LUTs all the same, what half a CPE takes in (docs/hardware.md, codesign)
    "gatemate": Family(4, ("gatemate-a1",)),
    "nexus": Family(4, ("nexus-40k",)),  # CrossLink-NX LIFCL-40 (its evaluation board's BG400)
    "xc7": Family(6, ("xc7",), placed=False),  # synthesis and a capacity estimate only
}
NATIVE_LUT_INPUTS = {name: f.lut_inputs for name, f in FAMILIES.items()}


def family_of(target: str | None) -> str | None:
    """The family a device or family name belongs to ("ecp5-25k" -> "ecp5"); None for none or an unknown name."""
    if not target or target == "none":
        return None
    return next((name for name, f in FAMILIES.items() if target == name or target in f.devices), None)


def smallest_device(target: str) -> str:
    """A family's smallest device; a device (or any other name) itself."""
    return FAMILIES[target].devices[0] if target in FAMILIES else target
