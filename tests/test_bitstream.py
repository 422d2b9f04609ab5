"""``dwc verify --bitstream``: the vector bench and closed-loop episodes on what ``dwc synth`` put in
the bitstream (iCE40: decoded back from top.bin with icebox_vlog; ECP5: nextpnr's routed netlist,
shown to pack into the same top.bit), on a small core, and a corrupted bitstream refused.

Measured at a load average of ~24 on 2 cores (45 min for the file), the iCE40 test took 1,305 s (its
synthesis included), ECP5 612 s, the corrupted iCE40 bitstream 534 s and the changed ECP5 bitstream
227 s. At a load average of ~3 the corrupted iCE40 bitstream took 85 s with its synthesis: it runs in
CI (decoding, the benches on the decoded netlist, and the refusal), and so does the changed ECP5
bitstream (62 s). The passing iCE40 test took 77 s at that load."""
import json
import re
import shutil
from pathlib import Path

import pytest

from dwc.cli import main
# the small untrained DWC of test_synth (2 x 32 LUT4 at InvertedPendulum's dimensions), built anew here

# one short episode and a few vectors: each observation takes ~90 cycles through the serial shell
QUICK = ["--verify-episodes", "1", "--max-steps", "40", "--vectors", "40", "--no-progress"]


def synthesised(build: Path, target: str) -> Path:
    if not (build / "synth" / target / "report.json").exists():
        assert main(["synth", str(build), "--target", target, "--freq", "20", "--energy-steps", "0"]) == 0
    return build


def needs_icestorm():
    if shutil.which("icebox_vlog") is None:
        pytest.fail("icebox_vlog is not installed (apt-get install fpga-icestorm; .ci/run installs it)")


def check_passed(build: Path, target: str) -> dict:
    r = json.loads((build / "verify_report.json").read_text())
    ports = json.loads((build / "dwc_core.json").read_text())
    d = r["designs"][f"bitstream-{target}"]
    assert r["passed"] and r["mismatches"] == 0, r["mismatch"]
    assert d["top"] == "harness" and d["vector_mismatches"] == 0 and d["closed_loop_mismatches"] == 0
    assert d["vector_latency"] == [ports["latency_cycles"] + 1]  # done is a register after the core's valid_out
    assert d["steps"] == r["designs"]["rtl"]["steps"] > 0 and d["return_rtl"] == d["return_ref"]
    assert sum(r["vectors"].values()) > 40
    b = r["bitstreams"][target]
    files = {"ice40-up5k": "top.bin", "ecp5-25k": "top.bit", "gowin-9k": "top.fs"}
    assert b["top"] == "shell" and b["bitstream"].endswith(files[target])
    assert len(b["bitstream_sha256"]) == 64
    return r


@pytest.mark.slow
def test_ice40_bitstream_decoded_matches_the_reference(small_build, capsys, monkeypatch):
    needs_icestorm()
    synthesised(small_build, "ice40-up5k")
    capsys.readouterr()
    assert main(["verify", str(small_build), "--bitstream", "--target", "ice40-up5k", *QUICK]) == 0
    out = capsys.readouterr().out
    assert "[bitstream-ice40-up5k]" in out and "decoded from the bitstream" in out and "PASS" in out
    r = check_passed(small_build, "ice40-up5k")
    b = r["bitstreams"]["ice40-up5k"]
    assert b["luts"] > 100 and b["ffs"] > 80 and any(c.startswith("icebox_vlog") for c in b["commands"])
    decoded = Path(b["netlist"]).read_text()
    pins = json.loads((small_build / "synth" / "ice40-up5k" / "report.json").read_text())["pins"]
    assert all(re.search(rf"\b(input|output) {p}\b", decoded) for p in pins)  # ports named by the placed pins
    import dwc.sim.bitstream as bs  # without IceStorm: one line that says what to install
    which = bs.shutil.which
    monkeypatch.setattr(bs.shutil, "which", lambda name, *a, **k: None if name == "icebox_vlog" else which(name, *a, **k))
    assert main(["verify", str(small_build), "--bitstream", "--target", "ice40-up5k", *QUICK]) == 2
    err = capsys.readouterr().err.strip()
    assert "icebox_vlog" in err and "apt-get install fpga-icestorm" in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_ecp5_routed_netlist_matches_the_reference(small_build, capsys):
    synthesised(small_build, "ecp5-25k")
    capsys.readouterr()
    assert main(["verify", str(small_build), "--bitstream", "--target", "ecp5-25k", *QUICK]) == 0
    assert "nextpnr's routed netlist" in capsys.readouterr().out
    r = check_passed(small_build, "ecp5-25k")
    b = r["bitstreams"]["ecp5-25k"]
    assert b["cells"]["TRELLIS_COMB"] > 100 and b["cells"]["TRELLIS_FF"] > 80
    assert "cmp routed.bit top.bit" in b["commands"]


def flip_lut_bit(asc: Path, x: int, y: int, lc: int, index: int) -> None:
    """Invert truth-table entry ``index`` of logic cell ``lc`` in logic tile (x, y) of an .asc (the
    bit positions icebox reads: rows 2 lc and 2 lc + 1, columns 36..45 of the tile)."""
    lines = asc.read_text().split("\n")
    start = lines.index(f".logic_tile {x} {y}")
    b = [4, 14, 15, 5, 6, 16, 17, 7, 3, 13, 12, 2, 1, 11, 10, 0][index]
    row, col = start + 1 + 2 * lc + b // 10, 36 + b % 10
    line = lines[row]
    lines[row] = line[:col] + ("1" if line[col] == "0" else "0") + line[col + 1:]
    asc.write_text("\n".join(lines))


@pytest.mark.slow
@pytest.mark.ci  # 85 s with its synthesis at load average ~3: decoding, benches, refusal
def test_a_corrupted_ice40_bitstream_is_refused(small_build, tmp_path, capsys):
    """One truth-table bit of the LUT that feeds the action's serial output, flipped in the bitstream:
    the decoded netlist differs there, and verify names a mismatching observation and exits 1."""
    needs_icestorm()
    from dwc.core.tools import run_tool
    from dwc.sim.bitstream import prepare
    synthesised(small_build, "ice40-up5k")
    build = tmp_path / "b"
    shutil.copytree(small_build, build, ignore=shutil.ignore_patterns("verify", "verify_report.json"))
    work = build / "synth" / "ice40-up5k"
    good = prepare(build, "ice40-up5k", tmp_path / "good")
    text = Path(good["netlist"]).read_text()
    d_net = re.search(r"/\* FF +\d+ +\d+ +\d+ \*/ always @\(posedge clk\).* sout <= rst \? 1'b0 : (\w+);", text).group(1)
    lut = re.search(rf"assign {d_net} = /\* LUT +(\d+) +(\d+) +(\d+) \*/ (.*);", text)
    x, y, lc = (int(v) for v in lut.groups()[:3])
    flip_lut_bit(work / "top.asc", x, y, lc, 0)
    run_tool("yowasp-icepack", ["top.asc", "top.bin"], work / "pack.log", cwd=work)  # the corrupted bitstream
    bad = prepare(build, "ice40-up5k", tmp_path / "bad")
    assert bad["bitstream_sha256"] != good["bitstream_sha256"]
    changed = re.search(rf"assign {d_net} = /\* LUT +{x} +{y} +{lc} \*/ (.*);", Path(bad["netlist"]).read_text())
    assert changed.group(1) != lut.group(4)  # that LUT, and only its contents, decode differently
    capsys.readouterr()
    assert main(["verify", str(build), "--bitstream", "--target", "ice40-up5k", *QUICK]) == 1
    out = capsys.readouterr().out
    assert "FIRST MISMATCH [bitstream-ice40-up5k]" in out and "FAIL" in out
    r = json.loads((build / "verify_report.json").read_text())
    assert r["designs"]["rtl"]["vector_mismatches"] == 0 and r["designs"]["bitstream-ice40-up5k"]["vector_mismatches"] > 0
    m = r["mismatch"]
    assert m["design"] == "bitstream-ice40-up5k" and m["action_rtl_int"] != m["action_ref_int"]
    assert len(m["observation_int"]) == 4 and Path(m["waveform"]).exists()


@pytest.mark.slow
@pytest.mark.ci  # 62 s with its synthesis at load average ~3
def test_a_changed_ecp5_bitstream_is_refused(small_build, tmp_path, capsys):
    """A bit of top.bit changed after dwc synth: the routed design no longer packs into it; exit 1."""
    synthesised(small_build, "ecp5-25k")
    build = tmp_path / "b"
    shutil.copytree(small_build, build, ignore=shutil.ignore_patterns("verify", "verify_report.json"))
    bit = build / "synth" / "ecp5-25k" / "top.bit"
    data = bytearray(bit.read_bytes())
    data[len(data) // 2] ^= 0x10
    bit.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["verify", str(build), "--bitstream", "--target", "ecp5-25k", *QUICK]) == 1
    assert "packs into another bitstream than" in capsys.readouterr().out
    r = json.loads((build / "verify_report.json").read_text())
    assert not r["passed"] and r["bitstreams"]["ecp5-25k"]["reproduced"] is False


def test_bitstream_errors_are_one_line(small_build, tmp_path, capsys):
    build = tmp_path / "nosynth"
    shutil.copytree(small_build, build, ignore=shutil.ignore_patterns("synth", "verify", "verify_report.json"))
    assert main(["verify", str(build), "--bitstream"]) == 2
    assert "no bitstream to check" in capsys.readouterr().err
    assert main(["verify", str(build), "--bitstream", "--target", "ice40-up5k"]) == 2
    err = capsys.readouterr().err
    assert "no bitstream for ice40-up5k" in err and "dwc synth" in err and len(err.strip().splitlines()) == 1
    assert main(["verify", str(build), "--target", "ecp5-25k"]) == 2
    assert "add --bitstream" in capsys.readouterr().err
