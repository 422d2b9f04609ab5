"""``dwc synth`` for the smaller open families: Lattice MachXO2 (nextpnr-machxo2, Trellis' xo2pack),
Cologne Chip GateMate (nextpnr-himbaechel-gatemate, gmpack) and Lattice Nexus (nextpnr-nexus, prjoxide),
on the small core; their constraints files and pin tables alone."""
import json
import subprocess
from pathlib import Path

import pytest

from dwc.cli import main


# Wall (user) seconds at a load average of ~6 on 2 cores: machxo2 20 (8), gatemate 38 (14), nexus 83 (33);
# all three run in CI: one reduced place and route per family. The shipped gate network instead: machxo2
# refused in 21 s (does not fit), gatemate 242 (94), nexus 161 (72), gowin-4k 190 (71): too long for CI.
@pytest.mark.slow
@pytest.mark.parametrize("target,family", [pytest.param("machxo2", "machxo2-1200", marks=pytest.mark.ci),
                                           pytest.param("gatemate", "gatemate-a1", marks=pytest.mark.ci),
                                           pytest.param("nexus", "nexus-40k", marks=pytest.mark.ci)])
def test_family_synth_place_route_and_pack(small_build, target, family, capsys):
    """A family target places the small core on its device at 20 MHz, packs a bitstream, and reports
    the placed cells, the timing verdict and the pins it constrained."""
    from dwc.fpga.pins import KIND, SHELL_PORTS, file_kind, parse_constraints
    assert main(["synth", str(small_build), "--target", target, "--freq", "20", "--energy-steps", "0"]) == 0
    out = capsys.readouterr().out
    assert f"{family}: Fmax" in out and ">= 20 requested: timing met" in out
    r = json.loads((small_build / "synth" / family / "report.json").read_text())
    assert r["family"] == family.split("-")[0] and r["smallest_fit"]["device"] == family
    assert r["luts"] > 0 and r["ffs"] > 0 and r["fmax_mhz"] > 20 and r["timing_met"] is True
    c = r["cells"]
    assert c["kind"] == {"machxo2-1200": "TRELLIS_COMB", "gatemate-a1": "CPE_LT", "nexus-40k": "OXIDE_COMB"}[family]
    assert c["used"] > 0
    # nextpnr-nexus and the GateMate one route with router2 unless told otherwise; the report says so
    assert r["router"] == {"machxo2-1200": "router1"}.get(family, "router2") and r["router1_gave_up_after_s"] is None
    if family == "machxo2-1200":  # ECP5's packing rules, the carry a CCU2D: within 1% here
        assert abs(c["predicted"] - c["used"]) <= 0.01 * c["used"], c
    else:
        assert c["predicted"] is None  # no pre-check on GateMate and Nexus
    bit = Path(r["bitstream"])
    assert bit.name == "top.bit" and bit.exists() and bit.stat().st_size > 10_000
    text = Path(r["constraints"]).read_text()
    assert file_kind(text) == KIND[r["family"]] and parse_constraints(text, file_kind(text)) == r["pins"]
    assert set(r["pins"]) == set(SHELL_PORTS) and r["pins_bonded_default"]
    pack = {"machxo2-1200": "yowasp-xo2pack top.config", "gatemate-a1": "yowasp-gmpack top.config",
            "nexus-40k": "yowasp-prjoxide pack top.fasm"}[family]
    assert any(c.startswith(f"{pack} top.bit") for c in r["commands"]) and pack.split()[0] in r["tools"]


def test_machxo2_clock_goes_to_a_primary_clock_pin():
    """nextpnr-machxo2 routes a clock only from a primary-clock input (elsewhere: "Failed to route net
    ... using dedicated routing"): the default pins put clk on a PCLKT pin, the rest on plain ones."""
    from dwc.fpga.devices import TARGETS, package_of, pin_device
    from dwc.fpga.pins import SHELL_PORTS, _trellis_iodb, ecp5_bonded_default
    t = TARGETS["machxo2-1200"]
    pins = ecp5_bonded_default(pin_device(t), package_of(t), family="machxo2")
    db = _trellis_iodb(pin_device(t), "machxo2")
    where = db["packages"][package_of(t)]
    function = {(m["col"], m["row"], m["pio"]): m.get("function", "") for m in db["pio_metadata"]}

    def fn(pin):
        p = where[pin]
        return function[(p["col"], p["row"], p["pio"])]
    assert list(pins) == list(SHELL_PORTS) and len(set(pins.values())) == len(SHELL_PORTS)
    assert fn(pins["clk"]).startswith("PCLKT") and not any(fn(p) for k, p in pins.items() if k != "clk")


def test_ccf_files_round_trip_and_gatemate_pins_are_where_nextpnr_puts_them(tmp_path):
    from dwc.core.tools import find_tool
    from dwc.fpga.pins import constraints_text, file_kind, gatemate_bonded_default, parse_constraints, placed_pins
    pins = gatemate_bonded_default()
    text = constraints_text(pins, "gatemate", "a header")
    assert file_kind(text) == "CCF" and parse_constraints(text, "CCF") == pins
    board = 'Pin_in "clk" Loc = "IO_SB_A8" | SCHMITT_TRIGGER=true;\nNet "rst" Loc = "IO_EB_B0";  # a button\n'
    assert file_kind(board) == "CCF" and parse_constraints(board, "CCF") == {"clk": "IO_SB_A8", "rst": "IO_EB_B0"}
    probe = {**pins, "extra": "IO_WB_B8"}  # and one pin from across the die
    ports = {port: {"direction": "input", "bits": [i + 2]} for i, port in enumerate(probe)}
    cells = {f"ib_{port}": {"type": "CC_IBUF", "attributes": {"keep": "1"}, "port_directions": {"I": "input",
                                                                                              "Y": "output"},
                            "connections": {"I": [i + 2], "Y": [i + 100]}} for i, port in enumerate(probe)}
    nets = {port: {"bits": p["bits"]} for port, p in ports.items()}
    (tmp_path / "t.json").write_text(json.dumps({"modules": {"t": {"attributes": {"top": "1"}, "ports": ports,
                                                                   "cells": cells, "netnames": nets}}}))
    (tmp_path / "t.ccf").write_text(constraints_text(probe, "gatemate"))
    subprocess.run([find_tool("yowasp-nextpnr-himbaechel-gatemate"), "--device", "CCGM1A1", "--vopt", "ccf=t.ccf",
                    "--json", "t.json", "--write", "w.json"], cwd=tmp_path, capture_output=True, check=True)
    placed = json.loads((tmp_path / "w.json").read_text())
    assert placed_pins(placed, "gatemate", "CCGM1A1", "FBGA324") == dict(sorted(probe.items()))


def test_pdc_files_round_trip_and_nexus_pins_are_asked_of_nextpnr(tmp_path, capsys, small_build):
    """Nexus pins come from nextpnr-nexus itself (a pack of one input per pin, seconds): the default
    pins are plain 3.3 V pins, the clock on a primary-clock one; a pin it refuses stops dwc synth
    before any tool runs, with nextpnr's reason on one line."""
    from dwc.fpga.pins import NEXUS_DEFAULT, constraints_text, file_kind, nexus_pin_sites, parse_constraints
    text = constraints_text(NEXUS_DEFAULT, "nexus", "a header")
    assert file_kind(text) == "PDC" and parse_constraints(text, "PDC") == NEXUS_DEFAULT
    assert parse_constraints("ldc_set_location -site {E12} [get_ports {clk}]\n", "PDC") == {"clk": "E12"}
    sites = nexus_pin_sites("LIFCL-40-9BG400C", list(NEXUS_DEFAULT.values()))
    assert sites["K2"] == "X0/Y19/PIOA" and len(set(sites.values())) == 7
    pdc = tmp_path / "p.pdc"
    pdc.write_text(constraints_text({**NEXUS_DEFAULT, "sin": "B2"}, "nexus"))  # B2 is a D-PHY pin
    assert main(["synth", str(small_build), "--target", "nexus-40k", "--pins", str(pdc)]) == 2
    err = capsys.readouterr().err
    assert "B2: not a 3.3 V I/O pin of LIFCL-40-9BG400C" in err and "DPHY0_DP0" in err and len(err.splitlines()) == 1


def test_bitstreams_without_a_decoder_are_skipped_or_refused(tmp_path):
    """dwc verify --bitstream checks iCE40, ECP5 and Gowin: a MachXO2, GateMate or Nexus bitstream is left
    out of the default list of targets, and asked for by name is refused in one line saying why."""
    from dwc.sim.bitstream import BitstreamError, bitstream_targets, synth_report
    for target, family in (("nexus-40k", "nexus"), ("ecp5-25k", "ecp5")):
        work = tmp_path / "synth" / target
        work.mkdir(parents=True)
        (work / "top.bit").write_bytes(b"\0")
        (work / "report.json").write_text(json.dumps({"family": family, "bitstream": str(work / "top.bit")}))
    assert bitstream_targets(tmp_path) == ["ecp5-25k"]
    work = tmp_path / "synth" / "gowin-1k"  # a Gowin die the decoder was not checked on: refused, not "corrupt"
    work.mkdir(parents=True)
    (work / "top.fs").write_text("0")
    (work / "report.json").write_text(json.dumps({"family": "gowin", "bitstream": "top.fs", "pack_device": "GW1NZ-1"}))
    assert bitstream_targets(tmp_path) == ["ecp5-25k"]
    with pytest.raises(BitstreamError, match="GW1N-9C .* only, not GW1NZ-1's"):
        synth_report(tmp_path, "gowin-1k")
    with pytest.raises(BitstreamError, match="checks iCE40, ECP5 and Gowin bitstreams; top.bit was packed by dwc "
                                             "synth, but no decoder of nexus bitstreams is checked yet"):
        synth_report(tmp_path, "nexus-40k")


# 97 s (the small core built in 22 s more) at a load of ~12 on 2 cores: the one MachXO3 run in CI.
@pytest.mark.slow
@pytest.mark.ci
def test_machxo3_places_and_routes_on_pins_asked_of_nextpnr_without_a_bitstream(small_build, tmp_path, capsys):
    """The MachXO2 family's larger device is a MachXO3LF-6900, which nextpnr-machxo2 places but the wheel's
    Trellis database lacks: its pins are asked of nextpnr, it reports like the 1200 (cells as predicted,
    Fmax, timing verdict, latency in ns), has no bitstream and says why; dwc verify --bitstream refuses it in
    one line; a pin the package lacks stops dwc synth before any tool runs."""
    from dwc.fpga.pins import MACHXO3_DEFAULT, asked_pin_sites, file_kind, parse_constraints
    from dwc.sim.bitstream import BitstreamError, bitstream_targets, synth_report
    part = "LCMXO3LF-6900C-5BG256C"
    assert asked_pin_sites("machxo2", part, ["H14", "J16"]) == {"H14": "X40/Y12/PIOA", "J16": "X40/Y15/PIOA"}
    lpf = tmp_path / "p.lpf"
    lpf.write_text("".join(f'LOCATE COMP "{p}" SITE "{"A1" if p == "sin" else s}";\n'
                           for p, s in MACHXO3_DEFAULT.items()))  # A1 is not a ball of caBGA256
    assert main(["synth", str(small_build), "--target", "machxo3-6900", "--pins", str(lpf)]) == 2
    err = capsys.readouterr().err
    assert f"A1: not an I/O pin of {part}" in err and "does not exist for package" in err and len(err.splitlines()) == 1

    assert main(["synth", str(small_build), "--target", "machxo3-6900", "--freq", "20", "--energy-steps", "0"]) == 0
    out = capsys.readouterr().out
    assert "machxo3-6900: Fmax" in out and ">= 20 requested: timing met" in out and "no MachXO3 database" in out
    r = json.loads((small_build / "synth" / "machxo3-6900" / "report.json").read_text())
    assert (r["family"], r["device"], r["capacity"]["luts"]) == ("machxo2", part, 6864)
    assert r["fmax_mhz"] > 20 and r["timing_met"] and r["action_latency_ns"] == round(3e3 / r["fmax_mhz"], 2)
    c = r["cells"]
    assert c["kind"] == "TRELLIS_COMB" and c["available"] == 6864 and abs(c["predicted"] - c["used"]) <= 0.01 * c["used"]
    assert r["bitstream"] is None and "no MachXO3 database" in r["no_bitstream"] and "yowasp-xo2pack" not in r["tools"]
    assert r["pins"] == MACHXO3_DEFAULT and r["pins_bonded_default"]
    text = Path(r["constraints"]).read_text()
    assert file_kind(text) == "LPF" and parse_constraints(text, "LPF") == r["pins"]
    assert "machxo3-6900" not in bitstream_targets(small_build)
    with pytest.raises(BitstreamError, match="machxo3-6900: no bitstream: .*nothing to check"):
        synth_report(small_build, "machxo3-6900")


@pytest.mark.slow  # compile ~1 min, the 1200 refused in ~20 s, the 6900 placed in minutes
def test_machxo2_family_places_the_gate_network_on_its_smallest_device_that_fits(tmp_path):
    """The shipped gate network (1,740 LUT4 + 1,373 FF) fits no MachXO2-1200: --target machxo2 skips it
    before place and route and lands on the MachXO3LF-6900, saying why."""
    build = tmp_path / "g"
    assert main(["compile", str(Path(__file__).resolve().parents[1] / "policies" / "inverted-pendulum-v5-gates"),
                 "--out", str(build)]) == 0
    assert main(["synth", str(build), "--target", "machxo2", "--energy-steps", "0"]) == 0
    r = json.loads((build / "synth" / "machxo3-6900" / "report.json").read_text())
    fit = r["smallest_fit"]
    assert fit["device"] == "machxo3-6900" and list(fit["too_small"]) == ["machxo2-1200"]
    assert "before place and route" in fit["too_small"]["machxo2-1200"] and not (build / "synth" / "machxo2-1200").exists()
    assert r["cells"]["used"] > 1740 and r["fmax_mhz"] > 0 and r["bitstream"] is None


def test_a_tool_that_crashes_in_its_webassembly_runtime_is_named_in_one_line(tmp_path):
    """A YoWASP tool that traps (a bug inside it) fails with one line naming the tool, the trap and its log,
    not the runtime's Python traceback: xo2pack given a MachXO3 configuration (it has no MachXO3 database,
    and throws), and the log of nextpnr-himbaechel-gatemate 0.11.1 crashing after it routed the shipped
    InvertedPendulum DWC."""
    from dwc.core.tools import crash_text, run_tool
    (tmp_path / "top.config").write_text(".device LCMXO3-6900\n")
    with pytest.raises(RuntimeError) as e:
        run_tool("yowasp-xo2pack", ["top.config", "top.bit"], tmp_path / "pack.log", cwd=tmp_path)
    assert str(e.value) == f"yowasp-xo2pack crashed (thrown Wasm exception, inside the tool: not a design error); " \
                          f"its log: {tmp_path / 'pack.log'}"
    assert "Traceback" in (tmp_path / "pack.log").read_text()
    log = Path(__file__).resolve().parents[1] / "results/fpga-families/failed/inverted-pendulum-v5-dwc-gatemate-a1.nextpnr.log"
    assert crash_text("nextpnr", log.read_text()) == ("nextpnr crashed after routing (wasm trap: out of bounds memory "
                                                      "access, inside the tool: not a design error)")
    assert crash_text("nextpnr", "ERROR: Failed to route net clk\n") is None  # an error the tool reports itself
