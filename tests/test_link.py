"""The UART policy link (dwc.rtl.link) in Amaranth's simulator: frames in, actions out, equal to the
IR reference; corrupted, truncated and garbage input is dropped and the link resynchronises."""
import pytest
from amaranth.sim import Simulator

from dwc.ir import reference as ref
from dwc.rtl.core import DWCCore, port_description
from dwc.rtl.link import PolicyLink
from dwc.sim.hil.protocol import ResponseParser, obs_frame
from helpers import inputs_for, random_graph

DIV = 4  # clock cycles per UART bit


def uart_bits(data: bytes) -> list[int]:
    bits = []
    for b in data:
        bits += [0] + [(b >> i) & 1 for i in range(8)] + [1]
    return bits


def run_link(g, chunks: list[bytes], cycles_after: int = 2000) -> tuple[ResponseParser, list]:
    """Send each chunk, then leave the line idle long enough for a response (the host waits for the
    action before sending the next observation), while decoding the tx line."""
    core = DWCCore(g, pipeline=1)
    link = PolicyLink(core, DIV)
    ports = core.port_description()
    parser = ResponseParser(ports)
    got = []
    gap = [1] * ((link.act_bytes + 4) * 10 + 30)  # the reply frame's bits and some

    async def bench(ctx):
        line = [bit for c in chunks for bit in uart_bits(c) + gap]
        cur, nbit = 0, 0
        total = len(line) * DIV + cycles_after
        sample_at = None
        for cyc in range(total):
            ctx.set(link.rx, line[cyc // DIV] if cyc // DIV < len(line) else 1)
            await ctx.tick()
            tx = ctx.get(link.tx)
            # a plain UART receiver for the tx line: sample mid-bit
            if sample_at is None:
                if tx == 0:
                    sample_at, nbit, cur = cyc + DIV + DIV // 2, 0, 0
            elif cyc == sample_at:
                if nbit < 8:
                    cur |= tx << nbit
                    nbit += 1
                    sample_at += DIV
                else:
                    got.extend(parser.feed(bytes([cur])))
                    sample_at = None

    sim = Simulator(link)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return parser, got


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_link_returns_the_reference_actions(seed):
    g = random_graph(seed)
    ports = port_description(g, 1)
    q = inputs_for(g, 5, seed)
    seqs = [252, 253, 254, 255, 0, 1, 7]  # any byte, wrapping (inputs_for gives 5 + 2 observations)
    parser, got = run_link(g, [obs_frame(v, ports, seq) for v, seq in zip(q, seqs)])
    assert [a for _, a, _ in got] == ref.actions_int(g, q).tolist()
    assert [s for s, _, _ in got] == seqs  # each reply names the observation it answers
    assert {lat for _, _, lat in got} == {3}  # latency in cycles, as declared, measured on chip


def test_link_drops_bad_frames_and_resynchronises():
    g = random_graph(4)
    ports = port_description(g, 1)
    q = inputs_for(g, 4, 4)
    frames = [obs_frame(v, ports, i) for i, v in enumerate(q)]
    corrupted = bytearray(frames[1])
    corrupted[2] ^= 0x10  # checksum fails
    dropped = frames[2][:3] + frames[2][4:]  # one byte lost: the frame times out
    # garbage before a frame; a false start (0xA5 then silence: the parser times out); a frame with a
    # flipped bit (checksum); a frame missing a byte (times out); then a good frame again
    parser, got = run_link(g, [b"\x00\xff\x13" + frames[0], b"\xa5\x01", bytes(corrupted), dropped, frames[3]])
    want = ref.actions_int(g, q).tolist()
    assert [(s, a) for s, a, _ in got] == [(0, want[0]), (3, want[3])]


def test_the_host_takes_only_the_reply_to_its_observation():
    """A resent observation's first reply may come after all, once the host has moved on: its
    sequence byte tells it apart, so it is dropped, never taken for the next step's action."""
    from dwc.sim.hil.protocol import reply_for
    late, mine = (6, [1, 2], 3), (7, [5, 5], 3)
    assert reply_for([late, mine], 7) == (([5, 5], 3), 1)
    assert reply_for([late], 7) == (None, 1)
    assert reply_for([mine, mine], 7) == (([5, 5], 3), 1)  # a reply to both sends of the same frame
    assert reply_for([(0, [9], 3)], 256) == (([9], 3), 0)  # the step number mod 256
