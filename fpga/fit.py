"""Will it fit? The device's own limiting resource, predicted from yosys' netlist before place and
route, and read from nextpnr after it.

Both families count logic in cells that hold more than a LUT, so a LUT count alone misjudges a fit:

* iCE40 counts logic cells (``ICESTORM_LC``): one LUT4, one carry and one flip-flop each. A carry
  shares its cell with a LUT only when the LUT reads the carry's two inputs; a flip-flop shares only
  with the LUT that alone drives it (a shift register's flip-flops take a cell each); and a carry
  chain whose carry-in comes from logic, or whose carry-out is read by logic, takes an extra cell at
  that end (nextpnr's "LCs used to legalise carry chains").
* Gowin counts ``LUT4`` and ``ALU`` positions (an ALU is its slice's LUT in arithmetic mode), ``DFF``
  (six per eight LUTs) and the wide-LUT muxes ``MUX2_LUT5``..``8`` apart. A flip-flop that no LUT
  drives gets a pass-through LUT after placement (the D input comes through its slice's LUT) unless
  it sits beside the ALU that drives it, so LUT4 = LUTs + flip-flops driven by neither. Each carry
  chain gets a head ALU that feeds its carry-in, a tail ALU where its carry-out is read, and a
  filler to make its length even.
* MachXO2 (nextpnr-machxo2) is counted with ECP5's rules, its carry the ``CCU2D``: an approximation
  of its own packer (the small core: 340 predicted, 339 placed).
* Nexus is not predicted (not measured against its packer yet).
* GateMate is not predicted (its packer splits LUT trees over CPE halves and routes through CPEs as
  bridges); only nextpnr's own overuse refuses a design there.
* ECP5 counts ``TRELLIS_COMB`` (two per slice: a LUT4 or half of a 2-bit carry, ``CCU2C``) and
  ``TRELLIS_FF``. A ``CCU2C`` takes two; a chain whose carry-in comes from logic, or whose carry-out
  is read by logic, gets one more ``CCU2C`` (two cells) at that end. ``PFUMX``/``L6MUX21`` (wide LUTs)
  sit in the slices of their LUTs and take none.

:func:`predict` applies these rules (nextpnr's packer: ice40/pack.cc, ice40/chains.cc,
ecp5/pack.cc) to the netlist yosys wrote. Measured against nextpnr's own count (0.11.1, this
repository's designs; the table below), it was within 0.5% on core + shell (exact on ECP5),
which is what the fit pre-check needs: a design predicted above the device's capacity is refused
before place and route. Gowin (himbaechel's gowin/pack.cc, gowin.cc create_passthrough_luts): the
table's gowin rows, nextpnr-himbaechel-gowin 0.11.1, where ALU, DFF and the wide-LUT muxes were exact.
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

# The limiting logic resource nextpnr reports per family, and the block RAM.
CELL_KIND = {"ice40": "ICESTORM_LC", "ecp5": "TRELLIS_COMB", "gowin": "LUT4", "machxo2": "TRELLIS_COMB",
             "gatemate": "CPE_LT", "nexus": "OXIDE_COMB"}
FF_KIND = {"ice40": None, "ecp5": "TRELLIS_FF", "gowin": "DFF", "machxo2": "TRELLIS_FF",
           "gatemate": "CPE_FF", "nexus": "OXIDE_FF"}  # iCE40's flip-flops live in its logic cells
RAM_KIND = {"ice40": ("SB_RAM40_4K", "ICESTORM_RAM"), "ecp5": ("DP16KD", "DP16KD"), "gowin": ("BSRAM", "BSRAM"),
            "machxo2": ("DP8KC", "DP8KC"), "gatemate": ("CC_BRAM_40K", "RAM"), "nexus": ("DP16K", "OXIDE_EBR")}
# Gowin: LUT4 and ALU share the LUT positions; what else nextpnr counts apart, per LUT position
GOWIN_LOGIC = "LUT4+ALU"
GOWIN_PER_LUT = {"ALU": 0.75, "MUX2_LUT5": 0.5, "MUX2_LUT6": 0.25, "MUX2_LUT7": 0.125, "MUX2_LUT8": 0.125}
GOWIN_BSRAM = ("SP", "SPX9", "SDP", "SDPX9", "SDPB", "SDPX9B", "DP", "DPX9", "DPB", "DPX9B", "ROM", "ROMX9", "pROM",
               "pROMX9")

# Accuracy: how close the prediction came to nextpnr 0.11.1's own count (yosys 0.70), on this repository's
# designs (results/fpga-cells: the shipped policies at the deepest pipeline, 100 MHz requested; "pack"
# = nextpnr --pack-only on the same netlist, scripts/fit_check.py, for designs refused before place
# and route). Core + shell is the netlist nextpnr places; the core alone is the early check.
#
#   design                          comparators  target       nextpnr  core + shell      core alone
#   small untrained 2 x 32 LUT4     full         ice40-up5k     637    640 (+0.5%)       -
#   small untrained 2 x 32 LUT4     full         ecp5-25k       375    375 (exact)       -
#   InvertedPendulum gates          full         ice40-up5k   3,628    3,631 (+0.1%)     3,628 (exact)
#   InvertedPendulum gates          full         ecp5-25k     3,938    3,938 (exact)     3,934 (-0.1%)
#   InvertedPendulum DWC            full         ice40-up5k   6,736    6,739 (+0.04%)    6,744 (+0.1%)  (pack)
#   InvertedPendulum DWC            full         ecp5-25k     5,137    5,137 (exact)     5,141 (+0.1%)
#   Hopper DWC                      full         ice40-up5k  10,174   10,184 (+0.1%)    10,209 (+0.3%)  (pack)
#   Hopper DWC                      full         ecp5-25k     9,520    9,520 (exact)     9,471 (-0.5%)
#   InvertedPendulum gates          shared       ice40-up5k   2,158    2,156 (-0.1%)     2,155 (-0.1%)
#   InvertedPendulum gates          shared       ecp5-25k     2,074    2,074 (exact)     2,098 (+1.2%)
#   InvertedPendulum DWC            shared       ice40-up5k   5,180    5,178 (-0.04%)    5,154 (-0.5%)
#   InvertedPendulum DWC            shared       ecp5-25k     3,184    3,184 (exact)     3,129 (-1.7%)
#   Hopper DWC                      shared       ecp5-25k     3,990    3,990 (exact)     3,929 (-1.5%)
#   small untrained 2 x 32 LUT4     shared       gowin-9k       648    648 (exact)       -         (LUT4)
#   InvertedPendulum DWC, pipe max  shared       gowin-9k     3,086    3,076 (-0.3%)     -         (LUT4)
#   the same, yosys -nobram         shared       gowin-9k     3,335    3,315 (-0.6%)     -         (LUT4)
#
# The iCE40 differences are nextpnr's few "LUTs merged into carry LCs" (5 per design here) and the
# like, not modelled. yosys optimises core + shell together a little differently from the core
# alone, so the early check refuses only above 103% of the device (synth._fits ``slack``); the
# second one, on core + shell, at 100%.


class _Netlist:
    """Drivers and users of every bit of one flattened module of yosys' ``write_json``."""

    def __init__(self, mod: dict):
        self.cells = mod.get("cells", {})
        self.driver: dict = {}
        self.users: dict = defaultdict(list)
        for name, c in self.cells.items():
            dirs = c.get("port_directions", {})
            for port, bits in c.get("connections", {}).items():
                for b in bits:
                    if isinstance(b, str):  # a constant: "0", "1", "x"
                        continue
                    if dirs.get(port) == "output":
                        self.driver[b] = (name, port)
                    else:
                        self.users[b].append((name, port))
        for pname, p in mod.get("ports", {}).items():
            for b in p.get("bits", []):
                if isinstance(b, str):
                    continue
                if p["direction"] == "output":
                    self.users[b].append(("$port", pname))
                else:
                    self.driver[b] = ("$port", pname)

    def bit(self, cell: str, port: str):
        bits = self.cells[cell]["connections"].get(port, [])
        return bits[0] if bits else None

    def of_type(self, *types: str) -> list[str]:
        return [n for n, c in self.cells.items() if c["type"] in types]

    def type(self, cell: str) -> str | None:
        return self.cells[cell]["type"] if cell in self.cells else None


def _module(netlist: dict, top: str) -> dict:
    mods = netlist["modules"]
    return mods.get(top) or next(m for m in mods.values() if m.get("attributes", {}).get("top"))


def _chains(n: _Netlist, carry: str, cin: str, cout: str) -> list[list[str]]:
    """Carry chains in order, first cell first (a carry whose carry-in is another carry's carry-out
    continues that carry's chain)."""
    nxt, has_prev = {}, set()
    for c in n.of_type(carry):
        co = n.bit(c, cout)
        for user, port in n.users.get(co, []) if co is not None else []:
            if n.type(user) == carry and port == cin:
                nxt[c] = user
                has_prev.add(user)
                break
    chains = []
    for c in n.of_type(carry):
        if c in has_prev:
            continue
        chain = [c]
        while chain[-1] in nxt:
            chain.append(nxt[chain[-1]])
        chains.append(chain)
    return chains


def _ice40(n: _Netlist) -> dict:
    luts = n.of_type("SB_LUT4")
    ffs = [c for c, v in n.cells.items() if v["type"].startswith("SB_DFF")]
    carries = n.of_type("SB_CARRY")
    # flip-flops paired with the LUT that alone drives them (pack_lut_lutffs)
    paired = 0
    for f in ffs:
        d = n.bit(f, "D")
        drv = n.driver.get(d)
        if drv and n.type(drv[0]) == "SB_LUT4" and len(n.users.get(d, [])) == 1:
            paired += 1
    # carries that share a cell with a LUT reading both their inputs on I1, I2 (pack_carries)
    by_inputs = defaultdict(list)
    for lut in luts:
        by_inputs[(n.bit(lut, "I1"), n.bit(lut, "I2"))].append(lut)
    merged_with: dict[str, str] = {}
    taken = set()
    for c in carries:
        for lut in by_inputs.get((n.bit(c, "I0"), n.bit(c, "I1")), []):
            if lut not in taken:
                taken.add(lut)
                merged_with[c] = lut
                break
    # chain ends that need a feed-in or pass-out cell (chains.cc split_carry_chain)
    legalise = 0
    for chain in _chains(n, "SB_CARRY", "CI", "CO"):
        if n.bit(chain[0], "CI") is not None and not isinstance(n.bit(chain[0], "CI"), str):
            legalise += 1
        for i, c in enumerate(chain):
            co = n.bit(c, "CO")
            users = n.users.get(co, []) if co is not None else []
            at_end = i == len(chain) - 1
            if not users or (len(users) == 1 and not at_end):
                continue
            i3 = [u for u, p in users if p == "I3" and n.type(u) == "SB_LUT4"]
            if at_end:
                if not (len(users) == 1 and i3):
                    legalise += 1
            elif len(users) > 2 or not i3 or merged_with.get(chain[i + 1]) != i3[0]:
                legalise += 2  # a pass-out, then a feed-in for the rest of the chain
    cells = len(luts) + (len(ffs) - paired) + (len(carries) - len(merged_with)) + legalise
    return {"ICESTORM_LC": cells, "SB_RAM40_4K": len(n.of_type("SB_RAM40_4K")),
            "detail": {"luts": len(luts), "ffs": len(ffs), "ffs_with_their_lut": paired, "carries": len(carries),
                       "carries_with_a_lut": len(merged_with), "chain_end_cells": legalise}}


def _ecp5(n: _Netlist, carry: str = "CCU2C", ram: str = "DP16KD") -> dict:
    luts = n.of_type("LUT4")
    ccu = n.of_type(carry)
    ffs = n.of_type("TRELLIS_FF")
    dpr = n.of_type("TRELLIS_DPR16X4")
    # ecp5/pack.cc split_carry_chain: a connected carry-in (a constant too, once nextpnr has made it
    # a net) is fed in by a CCU2C; a connected carry-out at a chain's end, or one read by more than
    # the next carry, is passed out by one.
    feeds = 0
    for chain in _chains(n, carry, "CIN", "COUT"):
        feeds += n.bit(chain[0], "CIN") is not None
        for i, c in enumerate(chain):
            co = n.bit(c, "COUT")
            if co is None or isinstance(co, str):
                continue
            if i == len(chain) - 1 or len(n.users.get(co, [])) > 1:
                feeds += 1
    constants = 2 if luts or ccu else 0  # nextpnr's GND and VCC drivers are a TRELLIS_COMB each
    comb = len(luts) + 2 * len(ccu) + 2 * feeds + 4 * len(dpr) + constants
    return {"TRELLIS_COMB": comb, "TRELLIS_FF": len(ffs), ram: len(n.of_type(ram)),
            "detail": {"luts": len(luts), "ccu2c": len(ccu), "ffs": len(ffs), "chain_end_ccu2c": feeds,
                       "pfumx": len(n.of_type("PFUMX")), "l6mux21": len(n.of_type("L6MUX21"))}}


def _gowin(n: _Netlist) -> dict:
    luts = [c for c, v in n.cells.items() if v["type"] in ("LUT1", "LUT2", "LUT3", "LUT4")]
    ffs = {c for c, v in n.cells.items() if v["type"].startswith("DFF")}
    alus = n.of_type("ALU")
    # constrain_lutffs: each LUT with the first unpaired flip-flop its output drives; a flip-flop an
    # ALU's sum drives sits beside that ALU, whose slot needs no pass-through either
    paired: set = set()
    for cell, out in [(lut, "F") for lut in luts] + [(alu, "SUM") for alu in alus]:
        f = n.bit(cell, out)
        for user, port in n.users.get(f, []) if f is not None else []:
            if port == "D" and user in ffs and user not in paired:
                paired.add(user)
                break
    # pack_alus: a chain continues while a carry-out feeds exactly one ALU's carry-in
    nxt = {}
    for a in alus:
        users = n.users.get(n.bit(a, "COUT"), []) if n.bit(a, "COUT") is not None else []
        if len(users) == 1 and users[0][1] == "CIN" and n.type(users[0][0]) == "ALU":
            nxt[a] = users[0][0]
    added = 0
    for head in set(alus) - set(nxt.values()):
        k, a = 1, head
        while a in nxt:
            a, k = nxt[a], k + 1
        co = n.bit(a, "COUT")
        tail = bool(co is not None and not isinstance(co, str) and n.users.get(co))  # a carry-out block
        added += 1 + tail + (1 + k + tail) % 2  # the carry-in block, the tail, a filler to an even length
    ram16 = len([c for c, v in n.cells.items() if v["type"].startswith("RAM16SDP")])
    out = {"LUT4": len(luts) + len(ffs) - len(paired) + 4 * ram16, "ALU": len(alus) + added, "DFF": len(ffs),
           "BSRAM": len([c for c, v in n.cells.items() if v["type"] in GOWIN_BSRAM])}
    out.update({m: len(n.of_type(m)) for m in GOWIN_PER_LUT if m != "ALU"})
    out[GOWIN_LOGIC] = out["LUT4"] + out["ALU"]
    out["detail"] = {"luts": len(luts), "ffs": len(ffs), "ffs_with_their_lut": len(paired), "alu": len(alus),
                     "chain_alus_added": added}
    return out


def predict(netlists: list[tuple[dict, str]], family: str) -> dict:
    """The device resources nextpnr will count for these netlists together ((yosys JSON, top
    module) pairs: the core, and the shell with the core as a black box)."""
    total: dict = {}
    if family in ("gatemate", "nexus"):
        return {"detail": {"note": f"not predicted on {family}"}}
    for netlist, top in netlists:
        rules = {"ice40": _ice40, "gowin": _gowin, "machxo2": lambda n: _ecp5(n, "CCU2D", "DP8KC")}.get(family, _ecp5)
        one = rules(_Netlist(_module(netlist, top)))
        for k, v in one.items():
            if k == "detail":
                d = total.setdefault("detail", {})
                for kk, vv in v.items():
                    d[kk] = d.get(kk, 0) + vv
            else:
                total[k] = total.get(k, 0) + v
    return total


def nextpnr_utilisation(log: Path) -> dict[str, dict]:
    """nextpnr's "Device utilisation" table: kind -> {used, available}."""
    rows = re.findall(r"Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", Path(log).read_text(errors="replace"))
    return {k: {"used": int(u), "available": int(a)} for k, u, a in rows}


def capacity(family: str, luts: int, ffs: int, ram_blocks: int) -> dict[str, int]:
    """What the fit pre-check holds a prediction to: kind -> the device's count."""
    cap = {CELL_KIND[family]: luts, RAM_KIND[family][0]: ram_blocks}
    if FF_KIND[family]:
        cap[FF_KIND[family]] = ffs
    if family == "gowin":
        cap.update({GOWIN_LOGIC: luts, **{k: int(luts * f) for k, f in GOWIN_PER_LUT.items()}})
    return cap


def limiting(resources: dict[str, dict], family: str) -> tuple[str, float]:
    """The most used of the family's logic, flip-flop and block-RAM resources: (kind, fraction); on
    Gowin the logic is LUT4 and ALU together, which share the LUT positions."""
    kinds = [CELL_KIND[family], FF_KIND[family], RAM_KIND[family][1]]
    if family == "gowin" and "LUT4" in resources and "ALU" in resources:
        resources = {**resources, GOWIN_LOGIC: {"used": resources["LUT4"]["used"] + resources["ALU"]["used"],
                                                "available": resources["LUT4"]["available"]}}
        kinds.append(GOWIN_LOGIC)
    fr = [(k, resources[k]["used"] / resources[k]["available"]) for k in kinds
          if k and k in resources and resources[k]["available"]]
    return max(fr, key=lambda kv: kv[1]) if fr else (CELL_KIND[family], 0.0)
