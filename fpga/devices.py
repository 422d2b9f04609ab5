"""The devices ``dwc synth`` builds for: per device, its yosys ``synth_*`` command, nextpnr's device
arguments and its capacity; per family, the cell names its report counts and the yosys options that
won when measured. :mod:`dwc.fpga.synth` runs the flow on these rows."""
from __future__ import annotations

from dataclasses import dataclass

from dwc.core.targets import FAMILIES


@dataclass(frozen=True)
class Target:
    family: str  # ecp5 | ice40 | gowin | machxo2 | gatemate | nexus | xc7
    synth: str  # yosys command
    nextpnr: tuple = ()  # device arguments; empty = no place and route
    luts: int = 0  # LUT capacity of the device (LUT4 for ecp5/ice40, LUT6 for xc7)
    ffs: int = 0
    device: str = ""
    default_opts: str = ""  # for designs pipelined up to the popcounts (see default_options)
    deep_opts: str = ""  # for designs whose adder trees are pipelined too
    # Gowin: apycula's chip database (gowin_pack -d, nextpnr's --vopt family), and the device and package
    # naming the part's pins in it (db.pinout[pinout_device][package]); MachXO2: Trellis' device and package,
    # or the part itself where Trellis' database lacks it (pins asked of nextpnr)
    pack_device: str = ""
    pinout_device: str = ""
    package: str = ""


def _gowin(part: str, chip: str, pinout_device: str, package: str, luts: int, ffs: int) -> Target:
    return Target("gowin", "synth_gowin", ("--device", part, "--vopt", f"family={chip}"), luts, ffs, part,
                  pack_device=chip, pinout_device=pinout_device, package=package)


TARGETS = {
    "ecp5-25k": Target("ecp5", "synth_ecp5", ("--25k", "--package", "CABGA381"), 24288, 24288, "LFE5U-25F",
                       "-cmp2softlogic", "-nobram"),
    "ecp5-45k": Target("ecp5", "synth_ecp5", ("--45k", "--package", "CABGA381"), 43848, 43848, "LFE5U-45F",
                       "-cmp2softlogic", "-nobram"),
    "ecp5-85k": Target("ecp5", "synth_ecp5", ("--85k", "--package", "CABGA381"), 83640, 83640, "LFE5U-85F",
                       "-cmp2softlogic", "-nobram"),
    "ice40-up5k": Target("ice40", "synth_ice40", ("--up5k", "--package", "sg48"), 5280, 5280, "iCE40UP5K"),
    "ice40-hx8k": Target("ice40", "synth_ice40", ("--hx8k", "--package", "ct256"), 7680, 7680, "iCE40HX8K"),
    # LUT4 and DFF capacities as nextpnr-himbaechel-gowin 0.11 reports them (a CFU: 8 LUT4, 6 DFF)
    "gowin-1k": _gowin("GW1NZ-LV1QN48C6/I5", "GW1NZ-1", "GW1NZ-1", "QFN48", 1152, 864),  # Tang Nano 1K
    "gowin-4k": _gowin("GW1NSR-LV4CQN48PC7/I6", "GW1NS-4", "GW1NSR-4C", "QFN48P", 4608, 3456),  # Tang Nano 4K
    "gowin-9k": _gowin("GW1NR-LV9QN88PC6/I5", "GW1N-9C", "GW1NR-9C", "QFN88P", 8640, 6480),  # Tang Nano 9K
    "gowin-18k": _gowin("GW2A-LV18PG256C8/I7", "GW2A-18C", "GW2A-18C", "PBGA256", 20736, 15552),  # Tang Primer 20K
    # MachXO2 1200HC in TQFP144 (nextpnr-machxo2; yosys' synth_lattice, Trellis' xo2pack)
    "machxo2-1200": Target("machxo2", "synth_lattice -family xo2", ("--device", "LCMXO2-1200HC-4TG144C"), 1280, 1280,
                           "LCMXO2-1200HC-4TG144C", pinout_device="LCMXO2-1200", package="TQFP144"),
    # MachXO3LF-6900 in caBGA256 (the MachXO3LF starter kit's part), placed by nextpnr-machxo2 like a MachXO2.
    # The wheel's Trellis database has no MachXO3: its pins are asked of nextpnr (pinout_device is the part),
    # and xo2pack cannot pack it (pack_device empty: no bitstream)
    "machxo3-6900": Target("machxo2", "synth_lattice -family xo3", ("--device", "LCMXO3LF-6900C-5BG256C"), 6864, 6864,
                           "LCMXO3LF-6900C-5BG256C", pinout_device="LCMXO3LF-6900C-5BG256C", package="CABGA256"),
    # GateMate A1 (20,480 CPEs, each two CPE_LT halves and two CPE_FF as nextpnr counts them); nextpnr takes
    # LUT trees (-luttree), and its 8-input muxes do not place (-nomx8)
    "gatemate-a1": Target("gatemate", "synth_gatemate -luttree -nomx8", ("--device", "CCGM1A1"), 40960, 40960,
                          "CCGM1A1", pinout_device="CCGM1A1", package="FBGA324"),
    # CrossLink-NX (nextpnr-nexus, prjoxide). -noccu2: yosys 0.70 starts carry chains from a constant cell
    # (VLO) that nextpnr-nexus 0.11.1 refuses ("CIN net ... driven by non-CCU2 cell"), so comparators and
    # adders are built from LUTs
    "nexus-40k": Target("nexus", "synth_lattice -family lifcl", ("--device", "LIFCL-40-9BG400C"), 32256, 32256,
                        "LIFCL-40-9BG400C", "-noccu2", "-noccu2", pinout_device="LIFCL-40-9BG400C", package="CABGA400"),
    "xc7": Target("xc7", "synth_xilinx -family xc7", (), 20800, 41600, "xc7a35t (for capacity only)"),
}
# A family as a target: its devices smallest first (dwc.core.targets), synthesised for the first the core fits
# (synth_smallest); a family whose only device bears its name (xc7) is that device.
FAMILY_DEVICES = {name: f.devices for name, f in FAMILIES.items() if name not in TARGETS}


# The boards a board top is built for (dwc.fpga.boards), here so a command's --help lists them without
# importing Amaranth
BOARD_DEVICE = {"ulx3s": "ULX3S (ECP5 LFE5U-85F)", "icebreaker": "iCEBreaker (iCE40 UP5K)",
                "tangnano9k": "Tang Nano 9K (Gowin GW1NR-LV9QN88PC6/I5)",
                "tangprimer20k": "Tang Primer 20K on its Dock (Gowin GW2A-LV18PG256C8/I7)"}
BOARDS = tuple(BOARD_DEVICE)


def target_names() -> list[str]:
    """What a --target takes: a device, or a family for its smallest device that fits."""
    return [*TARGETS, *FAMILY_DEVICES]


def device_for(target: str) -> Target:
    """The device ``target`` names, or the smallest of the family it names."""
    return TARGETS[FAMILY_DEVICES.get(target, (target,))[0]]


# Cell names -> report categories, per family (yosys `stat` names after mapping).
LUT_CELLS = {"ecp5": ("LUT4",), "ice40": ("SB_LUT4",), "gowin": ("LUT1", "LUT2", "LUT3", "LUT4"), "machxo2": ("LUT4",),
             "gatemate": ("CC_LUT1", "CC_LUT2", "CC_L2T4", "CC_L2T5"), "nexus": ("LUT4",),
             "xc7": ("LUT1", "LUT2", "LUT3", "LUT4", "LUT5", "LUT6")}
FF_PREFIX = {"ecp5": ("TRELLIS_FF",), "ice40": ("SB_DFF",), "gowin": ("DFF",), "machxo2": ("TRELLIS_FF",),
             "gatemate": ("CC_DFF",), "nexus": ("FD1P3",), "xc7": ("FD",)}
# LUT positions per carry cell (a Gowin ALU is its slice's LUT4 in arithmetic mode)
CARRY_SITES = {"ecp5": {"CCU2C": 2}, "ice40": {"SB_CARRY": 1}, "gowin": {"ALU": 1}, "machxo2": {"CCU2D": 2},
               "gatemate": {"CC_ADDF": 1}, "nexus": {"CCU2": 2}, "xc7": {"CARRY4": 4}}
# yosys options for the core synthesised alone (no pins): synth_gowin would put I/O buffers on its ports
CORE_ONLY_OPTS = {"gowin": " -noiopads", "gatemate": " -noiopad -noclkbuf", "nexus": " -noiopad"}
# LUT positions per wide-function cell: Nexus' WIDEFN9 (a 5-input function) fills two LUT4 sites
WIDE_SITES = {"nexus": {"WIDEFN9": 2}}
# Block RAMs per device (nextpnr's ICESTORM_RAM / DP16KD / BSRAM capacity)
RAM_BLOCKS = {"ecp5-25k": 56, "ecp5-45k": 108, "ecp5-85k": 208, "ice40-up5k": 30, "ice40-hx8k": 32, "gowin-1k": 4,
              "gowin-4k": 10, "gowin-9k": 26, "gowin-18k": 46, "machxo2-1200": 7, "machxo3-6900": 26, "gatemate-a1": 32,
              "nexus-40k": 84, "xc7": 50}


def default_options(t: Target, ports: dict) -> str:
    """The yosys options that won when measured (README "FPGA synthesis").

    ECP5, pipelined up to the popcounts: ``-cmp2softlogic`` turns the comparators' carry chains into
    LUTs (small core: 605 -> 370 LUT4 sites, 83 -> 88 MHz). ECP5 with the adder trees pipelined
    (the Fmax-oriented designs): ``-nobram``, keeping carry-chain comparators; otherwise yosys puts
    the registered action table into a block RAM whose 5.6 ns clock-to-output caps Fmax near
    125 MHz (shipped InvertedPendulum DWC, pipeline max: 125.6 MHz default, 184.9 with
    -cmp2softlogic -nobram, 202.2 with -nobram). iCE40: abc9 (the default) beats -noabc (162 vs
    545 LUT4). Gowin: yosys' default, the action table in a BSRAM: the same InvertedPendulum DWC on
    gowin-9k reached 167.2 MHz so and 127.5 with -nobram (100 MHz requested, seed 1). Nexus:
    -noccu2 (see TARGETS)."""
    deep = any(c.startswith("adder") for c in ports.get("register_cuts", []))
    return t.deep_opts if deep and t.deep_opts else t.default_opts


def package_of(t: Target) -> str:
    return t.package or t.nextpnr[t.nextpnr.index("--package") + 1]


def pin_device(t: Target) -> str:
    """The device name the pin tables use: Trellis' (LFE5U-25F) for ECP5, nextpnr's (up5k) for iCE40,
    apycula's pinout device (GW1NR-9C) for Gowin."""
    return t.device if t.family == "ecp5" else t.pinout_device or t.nextpnr[0].lstrip("-")  # MachXO2: LCMXO2-1200


def pnr_tool(t: Target) -> str:
    """The YoWASP nextpnr that places and routes the device."""
    himbaechel = t.family in ("gowin", "gatemate")
    return f"yowasp-nextpnr-himbaechel-{t.family}" if himbaechel else f"yowasp-nextpnr-{t.family}"
