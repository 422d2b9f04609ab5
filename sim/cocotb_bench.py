"""cocotb tests run inside the simulator on the emitted core (or its synthesised netlist, or the netlist
of a bitstream, whose top is the serial shell: ``dwc.sim.bitstream``).

The host side (``dwc.sim.runner``) writes a job file (``DWC_JOB``) and reads the results file the
tests write; all comparing against the reference happens on the host.

- ``vectors``: integer observations streamed one per cycle; every action recorded with its cycle.
- ``closed_loop``: MuJoCo episodes whose every action comes from the circuit (the core's ports, or
  the serial shell's harness when the job's ``top`` is ``harness``).
- ``serial_shell``: observations one at a time through the serial shell, every action and latency.

Inputs are driven after the falling edge and sampled at the rising edge; outputs are read once the
rising edge has settled (ReadOnly). An observation driven before edge e whose action is visible after
edge e + L has latency L (the Amaranth-simulator bench uses the same convention).
"""
import json
import os
import time

import cocotb
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from dwc.sim.words import pack, unpack


async def start(dut, clock_impl: str | None = None):
    """Clock and reset on the core's ports; ``clock_impl="gpi"`` toggles the clock inside the
    simulator (for benches whose Python waits many cycles at once)."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns", impl=clock_impl).start())
    dut.rst.value = 1
    dut.valid_in.value = 0
    dut.obs.value = 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


_JOB = {}


def job() -> dict:
    """This simulator run's job, read once: another run on the same build may write a new job file
    meanwhile (a virtual board serving while dwc hil --sim runs)."""
    if not _JOB:
        with open(os.environ["DWC_JOB"]) as f:
            _JOB.update(json.load(f))
    return _JOB


def save(name: str, result: dict) -> None:
    path = job()["results"][name]
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)


@cocotb.test()
async def vectors(dut):
    j = job()
    if "vectors" not in j:
        return
    ports = j["ports"]
    obs_fields, act_fields = ports["inputs"]["obs"], ports["outputs"]["action"]
    with open(j["vectors"]) as f:
        vecs = json.load(f)
    harness = j.get("top") == "harness"
    await start(dut, "gpi" if harness else None)
    if harness:  # one at a time through the serial shell
        results, accepted = [], []
        for v in vecs:
            action, latency = await harness_act(dut, v, ports, accepted)
            results.append({"cycle": accepted[-1] + latency, "action": action})
        save("vectors", {"results": results, "accepted": accepted})
        return
    results, accepted, cycle, sent = [], [], 0, 0
    limit = len(vecs) + 4 * ports["latency_cycles"] + 20
    while len(results) < len(vecs) and cycle < limit:
        await FallingEdge(dut.clk)
        feeding = sent < len(vecs)
        if feeding:
            dut.obs.value = pack(vecs[sent], obs_fields)
            accepted.append(cycle)
            sent += 1
        dut.valid_in.value = int(feeding)
        await RisingEdge(dut.clk)
        await ReadOnly()
        cycle += 1
        if int(dut.valid_out.value):
            results.append({"cycle": cycle, "action": unpack(int(dut.action.value), act_fields)})
    save("vectors", {"results": results, "accepted": accepted})


async def core_act(dut, q, ports) -> tuple[list[int], int]:
    """Drive one observation into the core for one cycle, wait for ``valid_out``: the action and its
    latency in cycles."""
    limit = 4 * ports["latency_cycles"] + 20
    await FallingEdge(dut.clk)
    dut.obs.value = pack(q, ports["inputs"]["obs"])
    dut.valid_in.value = 1
    cycles = 0
    while True:
        await RisingEdge(dut.clk)
        await ReadOnly()
        cycles += 1
        if int(dut.valid_out.value) or cycles >= limit:
            break
        await FallingEdge(dut.clk)
        dut.valid_in.value = 0
    if cycles >= limit:
        raise RuntimeError(f"no valid_out within {limit} cycles")
    return unpack(int(dut.action.value), ports["outputs"]["action"]), cycles


async def harness_act(dut, q, ports, taken: list | None = None) -> tuple[list[int], int]:
    """One observation through the serial shell inside its harness (``dwc.sim.bitstream.shell_harness``,
    the core's port names plus ``latency``): the action and its latency from ``load`` to ``done``.
    The harness shifts the bits in the simulator, so Python wakes up once per observation.
    ``taken`` gets the number of the edge after which the harness shifts the observation in."""
    from cocotb.triggers import First, Timer

    from dwc.rtl.core import port_bits
    limit = sum(port_bits(ports)) + 4 * ports["latency_cycles"] + 20
    await FallingEdge(dut.clk)
    dut.obs.value = pack(q, ports["inputs"]["obs"])
    dut.valid_in.value = 1
    await RisingEdge(dut.clk)
    if taken is not None:
        taken.append(int(get_sim_time("ns")) // 10)
    await FallingEdge(dut.clk)
    dut.valid_in.value = 0
    if int(dut.valid_out.value) == 0:
        fired = await First(RisingEdge(dut.valid_out), Timer(10 * limit, unit="ns"))  # one timer, not a wake-up per cycle
        if isinstance(fired, Timer):
            raise RuntimeError(f"no action from the serial shell within {limit} cycles")
    await ReadOnly()
    return unpack(int(dut.action.value), ports["outputs"]["action"]), int(dut.latency.value)


async def start_shell(dut):
    """Clock and reset for the serial shell (``dwc.rtl.shell``: ports ``clk rst sin load shift_out
    sout done``). The clock toggles inside the simulator (``gpi``): dozens of cycles pass per
    observation shifted in, where a clock driven from Python would cost most of the time."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns", impl="gpi").start())
    dut.rst.value, dut.sin.value, dut.load.value, dut.shift_out.value = 1, 0, 0, 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


async def shell_act(dut, q, ports, loaded: list | None = None) -> tuple[list[int], int]:
    """One observation through the serial shell: shift it in LSB first, pulse ``load``, wait for
    ``done``, shift the action out. Returns the action and its latency in cycles, counted as the
    vector bench counts (the edge that takes ``load`` is the first; ``done`` is high after the last):
    the core's latency + 1, since ``done`` is a register. ``loaded`` gets the number of the edge that
    took ``load`` (10 ns clock from time 0)."""
    from dwc.rtl.core import port_bits
    obs_bits, act_bits = port_bits(ports)
    limit = 4 * ports["latency_cycles"] + 10
    word = pack(q, ports["inputs"]["obs"])
    for i in range(obs_bits):
        await FallingEdge(dut.clk)
        dut.sin.value = (word >> i) & 1
    await FallingEdge(dut.clk)
    dut.load.value = 1
    await RisingEdge(dut.clk)  # the core takes the observation
    if loaded is not None:
        loaded.append(int(get_sim_time("ns")) // 10)
    await FallingEdge(dut.clk)
    dut.load.value = 0
    cycles = 1
    while True:
        await RisingEdge(dut.clk)
        await ReadOnly()
        cycles += 1
        if int(dut.done.value) or cycles >= limit:
            break
    if cycles >= limit:
        raise RuntimeError(f"no done within {limit} cycles")
    out = 0
    for i in range(act_bits):
        await FallingEdge(dut.clk)
        out |= int(dut.sout.value) << i
        dut.shift_out.value = 1
    await FallingEdge(dut.clk)
    dut.shift_out.value = 0
    return unpack(out, ports["outputs"]["action"]), cycles


@cocotb.test()
async def closed_loop(dut):
    """Each step: drive the quantised observation for one cycle, wait for valid_out, read the action,
    step MuJoCo with it. The simulator is paused while Python runs, so env time costs no cycles."""
    j = job()
    if "closed_loop" not in j:
        return
    from dwc.ir import Graph
    from dwc.ir.closed_loop import Episode, make_env

    cl, ports = j["closed_loop"], j["ports"]
    graph = Graph.load(cl["graph"])
    env = make_env(cl["env"], graph)
    act = harness_act if j.get("top") == "harness" else core_act
    await start(dut, "gpi" if act is harness_act else None)
    episodes, latencies, done = [], [], 0
    t0 = time.perf_counter()
    for seed in cl["seeds"]:
        ep = Episode(env, graph, seed, cl.get("max_steps"))
        while not ep.done:
            try:
                action, cycles = await act(dut, ep.q, ports)
            except RuntimeError as e:
                raise RuntimeError(f"{e} at step {len(ep.actions)} of the episode with seed {seed}") from None
            latencies.append(cycles)
            ep.step(action)
            done += 1
            if done % 250 == 0:
                with open(j["progress"], "w") as f:  # read by the host's progress bar
                    f.write(str(done))
        episodes.append(ep.record())
    seconds = time.perf_counter() - t0
    env.close()
    save("closed_loop", {"episodes": episodes, "latency": sorted(set(latencies)), "seconds": seconds})


@cocotb.test()
async def serial_shell(dut):
    """The place-and-route shell (``dwc.rtl.shell``) around the core: each observation shifted in,
    loaded, its action shifted out (:func:`shell_act`); the latency of each and the cycle it was loaded."""
    j = job()
    if "serial_shell" not in j:
        return
    with open(j["serial_shell"]) as f:
        vecs = json.load(f)
    await start_shell(dut)
    results, accepted, latency = [], [], []
    for v in vecs:
        action, cycles = await shell_act(dut, v, j["ports"], accepted)
        results.append(action)
        latency.append(cycles)
    save("serial_shell", {"actions": results, "latency": latency, "accepted": accepted})


async def uart_send(dut, data: bytes, bit_ns: int) -> None:
    """8N1 on ``rx``, LSB first, ``bit_ns`` per bit; the line stays high after the stop bit."""
    from cocotb.triggers import Timer
    for byte in data:
        for bit in [0] + [(byte >> i) & 1 for i in range(8)] + [1]:
            dut.rx.value = bit
            await Timer(bit_ns, unit="ns")


async def uart_byte_after_start(dut, bit_ns: int) -> int:
    """The byte on ``tx`` whose start bit's falling edge was just seen: each data bit sampled in its
    middle; returns in the middle of the stop bit."""
    from cocotb.triggers import Timer
    await Timer(bit_ns * 3 // 2, unit="ns")
    byte = 0
    for i in range(8):
        byte |= int(dut.tx.value) << i
        await Timer(bit_ns, unit="ns")
    return byte


async def start_link(dut, clock_impl: str | None = None) -> None:
    """Clock and reset for the UART link top ``dwc_link`` (ports ``clk rst rx tx``), line idle.
    ``clock_impl="gpi"`` toggles the clock inside the simulator instead of from Python: many times
    faster where thousands of cycles pass per byte."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns", impl=clock_impl).start())
    dut.rst.value, dut.rx.value = 1, 1
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


@cocotb.test()
async def hil(dut):
    """Closed-loop episodes over the UART link (``dwc_link``: core + link, the board top's logic):
    the host side frames each observation, sends it bit by bit on ``rx``, decodes ``tx``, resends on
    a timeout or a bad frame. ``faults`` injects link errors at given steps."""
    j = job()
    if "hil" not in j:
        return
    from cocotb.triggers import First, Timer

    from dwc.ir import Graph
    from dwc.ir.closed_loop import Episode, make_env
    from dwc.sim.hil.protocol import ResponseParser, faulty, obs_frame, reply_for

    h, ports = j["hil"], j["ports"]
    bit_ns = 10 * h["divisor"]
    graph = Graph.load(h["graph"])
    env = make_env(h["env"], graph)
    faults = {int(k): v for k, v in h.get("faults", {}).items()}
    await start_link(dut)
    parser = ResponseParser(ports)

    async def receive(timeout_ns: int, seq: int):
        """Bytes from tx until the reply to observation ``seq`` (late replies to earlier ones are
        dropped) or the timeout."""
        nonlocal late
        while True:
            fired = await First(FallingEdge(dut.tx), Timer(timeout_ns, unit="ns"))
            if isinstance(fired, Timer):
                return None
            got, others = reply_for(parser.feed(bytes([await uart_byte_after_start(dut, bit_ns)])), seq)
            late += others
            if got:
                return got

    timeout_ns = bit_ns * 10 * h["timeout_bytes"]
    episodes, latencies, retries, steps, late = [], set(), 0, 0, 0
    t0 = time.perf_counter()
    for seed in h["seeds"]:
        ep = Episode(env, graph, seed, h.get("max_steps"))
        while not ep.done:
            frame = obs_frame(ep.q, ports, steps)
            kind = faults.get(steps)
            got = None
            for attempt in range(4):
                await uart_send(dut, faulty(frame, kind) if attempt == 0 and kind else frame, bit_ns)
                got = await receive(timeout_ns, steps)
                if got is not None:
                    break
                retries += 1
            if got is None:
                raise RuntimeError(f"no valid response after 4 attempts at step {len(ep.actions)} (seed {seed})")
            action, latency = got
            latencies.add(latency)
            ep.step(action)
            steps += 1
        episodes.append(ep.record())
    save("hil", {"episodes": episodes, "latency": sorted(latencies), "retries": retries,
                 "bad_frames_host": parser.bad, "late_replies": late, "seconds": time.perf_counter() - t0,
                 "frames_ok": int(dut.frames_ok.value), "frames_bad": int(dut.frames_bad.value)})


@cocotb.test()
async def board(dut):
    """A virtual board (``dwc board-sim``): the UART link top ``dwc_link`` behind a TCP socket, byte
    for byte at the UART. Bytes from the socket are shifted into ``rx`` at ``divisor`` cycles per bit,
    back to back as a UART sends a buffer; bytes decoded from ``tx`` go back to the socket.

    Simulated time runs while the link has work (bytes to shift in, a frame being parsed, computed or
    sent: until ``quiet_cycles`` after the last bit on either line) and stands still while the link is
    idle and the socket silent (the simulator waits in ``select``), so the run is faster or slower than
    real time while the link sees the bit timing of the board. One client at a time: a new connection
    replaces the current one, and the board keeps running across connections, as behind ser2net.
    Faults are injected into the N-th observation frame received or the N-th reply sent. Events go to
    ``events`` (JSON lines) as they happen, counters to ``status``; it serves until the process is
    killed or its parent (``dwc board-sim``) is gone."""
    j = job()
    if "board" not in j:
        return
    from cocotb.queue import Queue
    from cocotb.simtime import get_sim_time
    from cocotb.triggers import Timer

    from dwc.sim.board_server import BoardServer

    b, results = j["board"], j["results"]["board"]
    bit_ns, quiet_ns = 10 * b["divisor"], 10 * b["quiet_cycles"]
    try:
        server = BoardServer(b, j["ports"], lambda: (int(get_sim_time("ns")) // 10, int(dut.frames_ok.value),
                                                      int(dut.frames_bad.value)))
    except OSError as e:
        with open(results, "w") as f:
            json.dump({"error": f"cannot listen on {b['host']}:{b['port']}: {e.strerror or e}"}, f)
        return
    await start_link(dut, "gpi")
    rx_bytes = Queue()
    busy = {"rx": False, "tx": False}
    last_bit_ns = 0.0  # end of the last byte on either line
    server.listening()
    server.status()

    async def drive_rx():
        nonlocal last_bit_ns
        while True:
            byte = await rx_bytes.get()
            busy["rx"] = True
            await uart_send(dut, bytes([byte]), bit_ns)
            busy["rx"], last_bit_ns = not rx_bytes.empty(), get_sim_time("ns")

    async def watch_tx():
        nonlocal last_bit_ns
        while True:
            await FallingEdge(dut.tx)
            busy["tx"] = True
            byte = await uart_byte_after_start(dut, bit_ns)
            busy["tx"], last_bit_ns = False, get_sim_time("ns")
            server.reply(byte)

    cocotb.start_soon(drive_rx())
    cocotb.start_soon(watch_tx())
    parent, checked, was_idle = os.getppid(), time.monotonic(), True
    while True:
        idle = not (busy["rx"] or busy["tx"] or not rx_bytes.empty()) and get_sim_time("ns") - last_bit_ns >= quiet_ns
        if idle and not was_idle:
            server.status()
        was_idle = idle
        server.poll(1.0 if idle else 0, rx_bytes.put_nowait)
        if time.monotonic() - checked > 1.0:
            if os.getppid() != parent:  # dwc board-sim is gone: nobody serves this socket any more
                break
            checked = time.monotonic()
        if not idle or not rx_bytes.empty():
            await Timer(10 * bit_ns, unit="ns")  # the board runs for a byte time
    server.stop()
    with open(results, "w") as f:
        json.dump(server.status(), f)
