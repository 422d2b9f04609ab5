"""``dwc hil``: MuJoCo episodes on the host with every action computed by the circuit over the UART
link (``dwc.rtl.link``): on a board (``--port``) or with the board top's logic in Verilator
(``--sim``), where faults can be injected into the link."""
from __future__ import annotations

import time
from pathlib import Path

from .errors import UserError
from .rundir import write_json

SIM_DIVISOR = 4  # clock cycles per UART bit in simulation (the board uses clock / baud)


def _faults(spec: list[str]) -> dict:
    from .sim.link_codec import FAULTS
    out = {}
    for item in spec:
        kind, _, step = item.partition("@")
        if kind not in FAULTS or not step.isdigit():
            raise UserError(f"--inject {item!r}: expected KIND@STEP with KIND one of {', '.join(FAULTS)}")
        if int(step) in out:
            raise UserError(f"--inject: step {step} is given twice ({out[int(step)]} and {kind}); one fault per step")
        out[int(step)] = kind
    return out


def run_serial(graph, ports, port: str, baud: int, env_id: str, seeds, max_steps, timeout_s: float = 0.5) -> dict:
    """The host loop on a real serial port (pyserial): frame, send, wait, resend on timeout."""
    try:
        import serial
    except ImportError:
        raise UserError("--port needs pyserial: pip install pyserial") from None
    from .sim.closed_loop import Episode, make_env
    from .sim.link_codec import ResponseParser, obs_frame
    try:
        link = serial.Serial(port, baud, timeout=timeout_s)
    except serial.SerialException as e:
        raise UserError(f"--port {port}: {e}") from None
    env, parser = make_env(env_id, graph), ResponseParser(ports)
    episodes, latencies, retries, link_s = [], set(), 0, 0.0
    t0 = time.perf_counter()
    for seed in seeds:
        ep = Episode(env, graph, seed, max_steps)
        while not ep.done:
            frame, got = obs_frame(ep.q, ports), None
            for _ in range(4):
                t = time.perf_counter()
                link.write(frame)
                deadline = t + timeout_s
                while got is None and time.perf_counter() < deadline:
                    frames = parser.feed(link.read(max(1, link.in_waiting)))
                    got = frames[0] if frames else None
                link_s += time.perf_counter() - t
                if got:
                    break
                retries += 1
            if got is None:
                raise UserError(f"no valid response from {port} after 4 attempts (step {len(ep.actions)}); "
                                f"is the board programmed with this build's bitstream at {baud} baud?")
            ep.step(got[0])
            latencies.add(got[1])
        episodes.append(ep.record())
    return {"episodes": episodes, "latency": sorted(latencies), "retries": retries, "bad_frames_host": parser.bad,
            "seconds": time.perf_counter() - t0, "link_seconds": link_s}


def hil(build: Path, env_id: str | None, episodes: int, seed: int | None = None, max_steps: int | None = None,
        sim: bool = True, port: str | None = None, baud: int = 115200, inject: list[str] = (), log=print) -> dict:
    from .rtl.link import frame_sizes, link_verilog
    from .sim.closed_loop import action_mismatches, reference_episodes
    from .verify import evaluation_seed, load_build
    graph, ports, _ = load_build(build)
    build = Path(build)
    env_id = env_id or graph.meta.get("env")
    faults = _faults(list(inject))
    if faults and not sim:
        raise UserError("--inject works with --sim only")
    seeds = [(evaluation_seed(graph) if seed is None else seed) + i for i in range(episodes)]
    try:
        ref = reference_episodes(graph, env_id, seeds, max_steps)
    except ValueError as e:
        raise UserError(str(e)) from None
    if sim:
        from .sim.runner import Bench
        work = build / "hil"
        work.mkdir(parents=True, exist_ok=True)
        src = work / "dwc_link.v"
        text = link_verilog(graph, ports, SIM_DIVISOR)
        if not src.exists() or src.read_text() != text:
            src.write_text(text)
        log("building the board top's logic (core + UART link) in Verilator ...")
        try:
            # Amaranth's FSM encoding draws Verilator style warnings (incomplete case) in the link's
            # logic; the core inside is the lint-clean one.
            bench = Bench([src], ports, work / "sim-verilator", toplevel="dwc_link", warnings_fatal=False,
                          unoptimised=True)  # the build dominates a short episode
            log(f"running {episodes} episode(s) over the simulated UART ...")
            r = bench.hil(build / "graph.json", env_id, seeds, SIM_DIVISOR, max_steps, faults)
        except RuntimeError as e:
            raise UserError(str(e)) from None
    else:
        r = run_serial(graph, ports, port, baud, env_id, seeds, max_steps)
    obs_b, act_b = frame_sizes(ports)
    bits = 10 * ((obs_b + 2) + (act_b + 3))
    steps = sum(e["steps"] for e in r["episodes"])
    report = {"build": str(build), "env": env_id, "mode": "sim" if sim else f"serial {port}", "episodes": episodes,
              "seeds": seeds, "steps": steps, "return_hil": [e["return"] for e in r["episodes"]],
              "return_ref": [e["return"] for e in ref], "latency_cycles_on_chip": r["latency"],
              "latency_cycles_declared": ports["latency_cycles"], "retries": r["retries"],
              # steps count across the episodes; a fault after the last step was never sent
              "faults_injected": {str(k): v for k, v in faults.items() if k < steps},
              "faults_not_reached": {str(k): v for k, v in faults.items() if k >= steps},
              "frame_bytes": {"obs": obs_b + 2, "action": act_b + 3},
              "link_time_per_step_s_at_baud": round(bits / baud, 6), "baud": baud,
              "wall_seconds": round(r["seconds"], 2)}
    if "frames_bad" in r:
        report.update(frames_ok_on_chip=r["frames_ok"], frames_bad_on_chip=r["frames_bad"])
    if "link_seconds" in r:
        report["link_time_per_step_s_measured"] = round(r["link_seconds"] / max(1, steps), 6)
    report["action_mismatches"] = action_mismatches(r["episodes"], ref)
    report["passed"] = report["action_mismatches"] == 0 and set(r["latency"]) <= {ports["latency_cycles"]}
    write_json(build / "hil_report.json", report)
    return report


def hil_text(r: dict) -> str:
    """The report of :func:`hil` for people: per-episode returns, link faults and timing, PASS/FAIL."""
    lines = [f"episode {i} (seed {r['seeds'][i]}): return over the link {a:.3f}, reference {b:.3f}"
             for i, (a, b) in enumerate(zip(r["return_hil"], r["return_ref"]))]
    not_reached = (f" (not reached, the run has {r['steps']} steps: {r['faults_not_reached']})"
                   if r["faults_not_reached"] else "")
    lines += [f"{r['steps']} steps, {r['action_mismatches']} action mismatches, on-chip latency "
              f"{r['latency_cycles_on_chip']} cycles (declared {r['latency_cycles_declared']}), "
              f"{r['retries']} resent frames, faults injected {r['faults_injected'] or 'none'}{not_reached}",
              f"link: {r['frame_bytes']['obs']} + {r['frame_bytes']['action']} bytes per step = "
              f"{r['link_time_per_step_s_at_baud'] * 1e3:.2f} ms at {r['baud']} baud",
              ("PASS" if r["passed"] else "FAIL") + f"; report: {r['build']}/hil_report.json"]
    return "\n".join(lines)
