"""8N1 UART receiver and transmitter (plain logic; ``divisor`` clock cycles per bit)."""
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class UARTRx(wiring.Component):
    """``data``/``valid`` for one cycle per received byte; ``error`` for one cycle on a bad stop bit."""

    def __init__(self, divisor: int):
        if divisor < 2:
            raise ValueError("divisor must be >= 2 clock cycles per bit")
        self.divisor = divisor
        super().__init__({"rx": In(1, init=1), "data": Out(8), "valid": Out(1), "error": Out(1)})

    def elaborate(self, platform):
        m = Module()
        rx = Signal(init=1)
        m.d.sync += rx.eq(self.rx)  # one register against metastability is enough for a sketch of 8N1
        timer = Signal(range(max(2, self.divisor * 3 // 2 + 1)))
        bits = Signal(4)
        shreg = Signal(8)
        m.d.sync += [self.valid.eq(0), self.error.eq(0)]
        with m.FSM():
            with m.State("IDLE"):
                with m.If(~rx):  # start bit: sample the data bits in their middle (the input
                    # register and this state already took ~2 cycles of the 1.5 bits to wait)
                    m.d.sync += [timer.eq(max(0, self.divisor + self.divisor // 2 - 3)), bits.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                with m.If(timer == 0):
                    m.d.sync += [shreg.eq((rx << 7) | (shreg >> 1)), bits.eq(bits + 1),
                                 timer.eq(self.divisor - 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("STOP"):
                with m.If(timer == 0):
                    with m.If(rx):
                        m.d.sync += [self.data.eq(shreg), self.valid.eq(1)]
                    with m.Else():
                        m.d.sync += self.error.eq(1)
                    m.next = "WAIT_IDLE"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("WAIT_IDLE"):  # after a framing error, wait for the line to go high
                with m.If(rx):
                    m.next = "IDLE"
        return m


class UARTTx(wiring.Component):
    """Sends ``data`` when ``valid`` and ``ready``; ``ready`` is low while a byte is on the line."""

    def __init__(self, divisor: int):
        if divisor < 2:
            raise ValueError("divisor must be >= 2 clock cycles per bit")
        self.divisor = divisor
        super().__init__({"tx": Out(1, init=1), "data": In(8), "valid": In(1), "ready": Out(1)})

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self.divisor))
        frame = Signal(10)  # start, 8 data (LSB first), stop
        left = Signal(4)
        m.d.comb += self.ready.eq(left == 0)
        with m.If(left == 0):
            with m.If(self.valid):
                m.d.sync += [frame.eq((1 << 9) | (self.data << 1)), left.eq(10), timer.eq(self.divisor - 1),
                             self.tx.eq(0)]
        with m.Elif(timer == 0):
            m.d.sync += [frame.eq(frame >> 1), left.eq(left - 1), timer.eq(self.divisor - 1)]
            m.d.sync += self.tx.eq(((frame >> 1) & 1) | (left == 1))
        with m.Else():
            m.d.sync += timer.eq(timer - 1)
        return m
