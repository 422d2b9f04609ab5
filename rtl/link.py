"""The policy behind a UART: the hardware-in-the-loop protocol, shared by board tops and the host.

Frames (bytes; multi-byte words little-endian; checksum makes the sum of payload + checksum 0 mod 256):

  host -> FPGA   0xA5 | sequence | observation word (obs_bytes) | checksum
  FPGA -> host   0x5A | sequence | action word (act_bytes) | latency in cycles (1 byte) | checksum

The observation word is the core's ``obs`` port bits (field ``o<d>`` at its ``lsb``, from the port
JSON) zero-padded to whole bytes; the action word likewise. The reply carries the sequence byte of
the observation it answers, so a host that resent an observation can tell a late reply to an earlier
one from the reply it waits for. A frame with a bad checksum, a UART framing error or a gap longer
than ``timeout`` cycles inside a frame is dropped and the parser waits for the next 0xA5, so the host
resynchronises by resending after its own timeout.
"""
from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from dwc.rtl.core import port_bits
from dwc.rtl.uart import UARTRx, UARTTx

OBS_START, ACT_START = 0xA5, 0x5A


def link_timeout(divisor: int) -> int:
    """Cycles of silence inside a frame after which the link drops it: about four byte times."""
    return 40 * divisor


def frame_sizes(ports: dict) -> tuple[int, int]:
    """Bytes of the observation word and of the action word."""
    obs_bits, act_bits = port_bits(ports)
    return (obs_bits + 7) // 8, (act_bits + 7) // 8


def frame_lengths(ports: dict) -> tuple[int, int]:
    """Bytes of a whole observation frame (start, sequence, word, checksum) and reply frame (start,
    sequence, word, latency, checksum)."""
    obs_b, act_b = frame_sizes(ports)
    return obs_b + 3, act_b + 4


class PolicyLink(wiring.Component):
    """UART rx -> frame parser -> ``core`` (a DWCCore) -> response frame -> UART tx."""

    def __init__(self, core, divisor: int, timeout: int | None = None):
        self.core, self.divisor = core, divisor
        desc = core.port_description()
        self.obs_bytes, self.act_bytes = frame_sizes(desc)
        self.timeout = timeout or link_timeout(divisor)
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1), "frames_ok": Out(16), "frames_bad": Out(16)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        m.submodules.rx = rx = UARTRx(self.divisor)
        m.submodules.tx = tx = UARTTx(self.divisor)
        m.d.comb += [rx.rx.eq(self.rx), self.tx.eq(tx.tx)]

        frame = Signal(8 * (self.obs_bytes + 1))  # sequence byte, then the observation word
        obs, seq = frame[8:], Signal(8)
        count = Signal(range(max(self.obs_bytes + 1, self.act_bytes + 3) + 2))
        total = Signal(8)
        idle = Signal(range(self.timeout + 1))
        latency = Signal(8)
        act = Signal(8 * self.act_bytes)
        out = Signal(8 * (self.act_bytes + 3))  # sequence, action bytes, latency, checksum
        m.d.sync += core.valid_in.eq(0)
        m.d.comb += core.obs.as_value().eq(obs[:len(core.obs.as_value())])

        with m.FSM():
            with m.State("START"):
                with m.If(rx.valid & (rx.data == OBS_START)):
                    m.d.sync += [count.eq(0), total.eq(0), idle.eq(0)]
                    m.next = "PAYLOAD"
            with m.State("PAYLOAD"):
                m.d.sync += idle.eq(idle + 1)
                with m.If(rx.error | (idle == self.timeout)):
                    m.d.sync += self.frames_bad.eq(self.frames_bad + 1)
                    m.next = "START"
                with m.Elif(rx.valid):
                    m.d.sync += [frame.eq(Cat(frame[8:], rx.data)), total.eq(total + rx.data), count.eq(count + 1),
                                 idle.eq(0)]
                    with m.If(count == self.obs_bytes):
                        m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += idle.eq(idle + 1)
                with m.If(rx.error | (idle == self.timeout)):
                    m.d.sync += self.frames_bad.eq(self.frames_bad + 1)
                    m.next = "START"
                with m.Elif(rx.valid):
                    with m.If((total + rx.data)[:8] == 0):
                        m.d.sync += [core.valid_in.eq(1), latency.eq(0), self.frames_ok.eq(self.frames_ok + 1),
                                     seq.eq(frame[:8])]
                        m.next = "COMPUTE"
                    with m.Else():
                        m.d.sync += self.frames_bad.eq(self.frames_bad + 1)
                        m.next = "START"
            with m.State("COMPUTE"):  # count from the edge where the core samples valid_in
                with m.If(~core.valid_in):
                    m.d.sync += latency.eq(latency + 1)
                with m.If(core.valid_out):
                    m.d.sync += act.eq(core.action.as_value())
                    m.next = "PREPARE"
            with m.State("PREPARE"):  # response bytes and their checksum
                body = Cat(seq, act, latency)
                s = 0
                for i in range(self.act_bytes + 2):
                    s = s + body[8 * i:8 * i + 8]
                m.d.sync += [out.eq(Cat(body, (0 - s)[:8])), count.eq(0)]
                m.next = "SEND_START"
            with m.State("SEND_START"):
                m.d.comb += [tx.data.eq(ACT_START), tx.valid.eq(1)]
                with m.If(tx.ready):
                    m.next = "SEND"
            with m.State("SEND"):
                m.d.comb += [tx.data.eq(out[:8]), tx.valid.eq(tx.ready)]
                with m.If(tx.ready):
                    m.d.sync += [out.eq(out >> 8), count.eq(count + 1)]
                    with m.If(count == self.act_bytes + 2):
                        m.next = "START"
        return m


def link_verilog(graph, ports: dict, divisor: int) -> str:
    """The board top's logic (core + UART link, ports ``clk rst rx tx``) as Verilog module ``dwc_link``,
    with the same leaf cells as ``dwc_core.v`` (the core rebuilt as its port description ``ports``
    says): what ``dwc hil --sim`` runs in Verilator."""
    from dwc.rtl.core import core_from_ports, to_verilog
    return to_verilog(PolicyLink(core_from_ports(graph, ports), divisor), name="dwc_link")
