"""A pin-light shell around the core for out-of-context place-and-route.

The core's parallel ports (an observation of ~200 bits, actions of ~50) exceed small packages'
pins. The shell shifts the observation in one bit per cycle, presents it to the core for one cycle
on ``load``, captures the action on ``valid_out`` and shifts it out one bit per cycle: 5 pins plus
the clock. The core's timing paths (register to register inside it) are unchanged; the shell adds
one flip-flop per port bit, reported separately from the core.
"""
from __future__ import annotations

from amaranth import ClockSignal, Module, ResetSignal, Signal
from amaranth.hdl import Instance
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from dwc.rtl.core import data_ports, port_bits


class SerialShell(wiring.Component):
    """Wraps the Verilog module ``dwc_core`` (described by its port JSON) by name."""

    def __init__(self, ports: dict):
        self.obs_bits, self.act_bits = port_bits(ports)
        self.in_port, self.out_port = data_ports(ports)
        super().__init__({"sin": In(1), "load": In(1), "shift_out": In(1), "sout": Out(1), "done": Out(1)})

    def elaborate(self, platform):
        m = Module()
        obs = Signal(self.obs_bits)
        act = Signal(self.act_bits)
        core_act = Signal(self.act_bits)
        valid_out = Signal()
        m.d.sync += obs.eq(obs[1:] | (self.sin << (self.obs_bits - 1)))  # shift in, LSB first
        with m.If(valid_out):
            m.d.sync += [act.eq(core_act), self.done.eq(1)]
        with m.Elif(self.shift_out):
            m.d.sync += [act.eq(act >> 1), self.done.eq(0)]
        m.d.comb += self.sout.eq(act[0])
        m.submodules.core = Instance("dwc_core", i_clk=ClockSignal("sync"), i_rst=ResetSignal("sync"),
                                     i_valid_in=self.load, o_valid_out=valid_out,
                                     **{f"i_{self.in_port}": obs, f"o_{self.out_port}": core_act})
        return m


def shell_verilog(ports: dict) -> str:
    from amaranth.back import verilog
    return verilog.convert(SerialShell(ports), name="dwc_shell", emit_src=False)
