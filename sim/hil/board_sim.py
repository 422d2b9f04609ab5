"""``dwc board-sim``: a virtual board. The board top's logic (core + UART link, what ``dwc hil --sim``
runs) in Verilator behind a TCP socket, byte for byte at the UART, so that ``dwc hil --port
socket://HOST:PORT`` drives it through the same serial code as a board on /dev/ttyUSB0 (or behind
ser2net). The simulator side is ``dwc.sim.cocotb_bench.board``."""
from __future__ import annotations

from pathlib import Path

from dwc.core.defaults import BAUD
from dwc.core.errors import OptionError, UserError
from dwc.core.signals import stops_ignored

FAULTS_IN = ("garbage", "drop", "corrupt", "disconnect")  # on the N-th observation frame received
FAULTS_OUT = ("garbage-reply", "drop-reply", "corrupt-reply", "late-reply")  # on the N-th reply sent


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; port 0 picks a free one)."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise OptionError("listen", f" {text!r}: expected HOST:PORT, e.g. 127.0.0.1:5555 (port 0: any free port)")
    return host, int(port)


def parse_board_faults(spec: list[str]) -> tuple[dict, dict]:
    """``KIND@N`` items -> (faults on observation frames received, faults on replies sent)."""
    from dwc.sim.hil.host import parse_faults
    kinds = FAULTS_IN + FAULTS_OUT
    inward = parse_faults([s for s in spec if not s.partition("@")[0].endswith("-reply")], kinds, "FRAME")
    outward = parse_faults([s for s in spec if s.partition("@")[0].endswith("-reply")], kinds, "FRAME")
    return inward, {n: k.removesuffix("-reply") for n, k in outward.items()}


def board_sim(build: Path, listen: str, baud: int = BAUD, clock_mhz: float | None = None, inject: list[str] = (),
              log=print) -> dict:
    """Serve BUILD's board top on ``listen`` until interrupted; returns the board's counters. The UART
    runs at ``clock_mhz / baud`` clock cycles per bit, by default ``SIM_DIVISOR`` (as ``dwc hil --sim``,
    whose Verilator build it then shares)."""
    from dwc.sim.hil.host import SIM_DIVISOR, hold_sim, link_bench
    from dwc.rtl.link import link_timeout
    from dwc.sim.runner import SimulationFailed
    from dwc.ir.compiled import load_build
    graph, ports, _ = load_build(build)
    build = Path(build)
    host, port = parse_listen(listen)
    inward, outward = parse_board_faults(list(inject))
    divisor = SIM_DIVISOR if clock_mhz is None else round(clock_mhz * 1e6 / baud)
    clock_mhz = clock_mhz or SIM_DIVISOR * baud / 1e6
    if divisor < 2:
        raise OptionError("baud", f" {baud} is too fast for a {clock_mhz:g} MHz clock: the UART needs at least 2 "
                        f"clock cycles per bit")
    # after the last bit on either line, the link has either answered or dropped the frame (its timeout)
    quiet = link_timeout(divisor) + 20 * divisor + 4 * ports["latency_cycles"] + 16
    work = build / ("hil" if divisor == SIM_DIVISOR else "board-sim")  # hil --sim's build at its divisor
    lock = hold_sim(work, "dwc board-sim")  # held until this process ends: the bench's files are its own
    try:
        bench = link_bench(build, graph, ports, divisor, work, log)
    except RuntimeError as e:
        lock and lock.close()
        raise UserError(str(e)) from None
    def on_event(e: dict) -> None:
        kind = e["event"]
        if kind == "listening":
            url = f"socket://{e['host'] if ':' not in e['host'] else '[' + e['host'] + ']'}:{e['port']}"
            log(f"virtual board listening on {url}: {build}'s core + UART link in Verilator, {baud} baud, "
                f"{divisor} clock cycles per bit (a {clock_mhz:g} MHz clock)")
            log(f"  drive it with: dwc hil {build} --port {url}    (Ctrl-C stops the board)")
        elif kind == "connected":
            log(f"connection from {e['peer']}")
        elif kind == "disconnected":
            log(f"{e['peer']} disconnected ({e['why']}); {e['replies_sent']} replies sent so far, waiting for "
                f"the next connection")
        elif kind == "fault":
            log(f"fault injected: {e['kind']} on {'reply' if e['kind'].endswith('-reply') else 'frame'} {e['frame']}")

    try:
        r = bench.board(divisor, host, port, quiet, inward, outward, on_event)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the counters, read with a second stop signal ignored
        with stops_ignored():  # (a service manager that repeats SIGTERM): one summary, no traceback
            s = bench.board_status()
        s["stopped"] = True
        return s
    except SimulationFailed as e:
        raise UserError(str(e)) from None
    if "error" in r:
        raise UserError(r["error"])
    return r  # the bench stops on its own only when this process is going away


def board_sim_text(s: dict) -> str:
    """The one line printed when the virtual board stops."""
    if not s.get("connections") and "frames_received" not in s:
        return "virtual board stopped"
    faults = f", faults injected {len(s['faults_injected'])}" if s.get("faults_injected") else ""
    return (f"virtual board stopped: {s['connections']} connection(s), {s['frames_received']} frames received, "
            f"{s['replies_sent']} replies sent, {s['frames_bad_on_chip']} bad frames dropped by the link{faults}")
