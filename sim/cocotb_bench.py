"""cocotb tests run inside the simulator on the emitted core (or its synthesised netlist).

The host side (``dwc.sim.runner``) writes a job file (``DWC_JOB``) and reads the results file the
tests write; all comparing against the reference happens on the host.

- ``vectors``: integer observations streamed one per cycle; every action recorded with its cycle.
- ``closed_loop``: MuJoCo episodes whose every action comes from the circuit.

Inputs are driven after the falling edge and sampled at the rising edge; outputs are read once the
rising edge has settled (ReadOnly). An observation driven before edge e whose action is visible after
edge e + L has latency L (the Amaranth-simulator bench uses the same convention).
"""
import json
import os
import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from dwc.sim.words import pack, unpack


async def start(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.valid_in.value = 0
    dut.obs.value = 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


def job() -> dict:
    with open(os.environ["DWC_JOB"]) as f:
        return json.load(f)


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
    await start(dut)
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


@cocotb.test()
async def closed_loop(dut):
    """Each step: drive the quantised observation for one cycle, wait for valid_out, read the action,
    step MuJoCo with it. The simulator is paused while Python runs, so env time costs no cycles."""
    j = job()
    if "closed_loop" not in j:
        return
    from dwc.ir import Graph
    from dwc.sim.closed_loop import Episode, make_env

    cl, ports = j["closed_loop"], j["ports"]
    obs_fields, act_fields = ports["inputs"]["obs"], ports["outputs"]["action"]
    graph = Graph.load(cl["graph"])
    env = make_env(cl["env"], graph)
    await start(dut)
    limit = 4 * ports["latency_cycles"] + 20
    episodes, latencies, done = [], [], 0
    t0 = time.perf_counter()
    for seed in cl["seeds"]:
        ep = Episode(env, graph, seed, cl.get("max_steps"))
        while not ep.done:
            await FallingEdge(dut.clk)
            dut.obs.value = pack(ep.q, obs_fields)
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
                raise RuntimeError(f"no valid_out within {limit} cycles at step {len(ep.actions)}")
            latencies.append(cycles)
            ep.step(unpack(int(dut.action.value), act_fields))
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
    """The place-and-route shell (``dwc.rtl.shell``) around the core: shift each observation in LSB
    first, pulse ``load``, wait for ``done``, shift the action out."""
    from dwc.rtl.core import port_bits

    j = job()
    if "serial_shell" not in j:
        return
    ports = j["ports"]
    obs_fields, act_fields = ports["inputs"]["obs"], ports["outputs"]["action"]
    obs_bits, act_bits = port_bits(ports)
    with open(j["serial_shell"]) as f:
        vecs = json.load(f)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value, dut.sin.value, dut.load.value, dut.shift_out.value = 1, 0, 0, 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    results = []
    for v in vecs:
        word = pack(v, obs_fields)
        for i in range(obs_bits):
            await FallingEdge(dut.clk)
            dut.sin.value = (word >> i) & 1
        await FallingEdge(dut.clk)
        dut.load.value = 1
        await FallingEdge(dut.clk)
        dut.load.value = 0
        for _ in range(4 * ports["latency_cycles"] + 10):
            await ReadOnly()
            if int(dut.done.value):
                break
            await FallingEdge(dut.clk)
        out = 0
        for i in range(act_bits):
            await FallingEdge(dut.clk)
            out |= int(dut.sout.value) << i
            dut.shift_out.value = 1
        await FallingEdge(dut.clk)
        dut.shift_out.value = 0
        results.append(unpack(out, act_fields))
    save("serial_shell", {"actions": results})


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
    from dwc.sim.closed_loop import Episode, make_env
    from dwc.sim.link_codec import ResponseParser, faulty, obs_frame

    h, ports = j["hil"], j["ports"]
    bit_ns = 10 * h["divisor"]
    graph = Graph.load(h["graph"])
    env = make_env(h["env"], graph)
    faults = {int(k): v for k, v in h.get("faults", {}).items()}
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value, dut.rx.value = 1, 1
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    parser = ResponseParser(ports)

    async def send(data: bytes):
        for byte in data:
            for bit in [0] + [(byte >> i) & 1 for i in range(8)] + [1]:
                dut.rx.value = bit
                await Timer(bit_ns, unit="ns")

    async def receive(timeout_ns: int):
        """Bytes from tx until a good response frame or the timeout."""
        while True:
            fired = await First(FallingEdge(dut.tx), Timer(timeout_ns, unit="ns"))
            if isinstance(fired, Timer):
                return None
            await Timer(bit_ns * 3 // 2, unit="ns")
            byte = 0
            for i in range(8):
                byte |= int(dut.tx.value) << i
                await Timer(bit_ns, unit="ns")
            frames = parser.feed(bytes([byte]))
            if frames:
                return frames[0]

    timeout_ns = bit_ns * 10 * h["timeout_bytes"]
    episodes, latencies, retries, steps = [], set(), 0, 0
    t0 = time.perf_counter()
    for seed in h["seeds"]:
        ep = Episode(env, graph, seed, h.get("max_steps"))
        while not ep.done:
            frame = obs_frame(ep.q, ports)
            kind = faults.get(steps)
            got = None
            for attempt in range(4):
                await send(faulty(frame, kind) if attempt == 0 and kind else frame)
                got = await receive(timeout_ns)
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
                 "bad_frames_host": parser.bad, "seconds": time.perf_counter() - t0,
                 "frames_ok": int(dut.frames_ok.value), "frames_bad": int(dut.frames_bad.value)})
