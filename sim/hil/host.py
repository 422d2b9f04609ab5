"""``dwc hil``: MuJoCo episodes on the host with every action computed by the circuit over the UART
link (``dwc.rtl.link``): on a board (``--port``, any pyserial URL: a serial device, or
``socket://HOST:PORT`` for a board behind ser2net or the virtual board of ``dwc board-sim``) or with
the board top's logic in Verilator (``--sim``), where faults can be injected into the link."""
from __future__ import annotations

import math
import re
import time
from pathlib import Path

from dwc.core.defaults import BAUD, BOARD_EPISODES, HIL_TIMEOUT_S, RECONNECT_S
from dwc.core.errors import NotAsAsked, OptionError, UserError
from dwc.core.rundir import write_json

SIM_DIVISOR = 4  # clock cycles per UART bit in simulation (the board uses clock / baud)


def parse_faults(spec: list[str], kinds=None, unit: str = "STEP") -> dict:
    """``KIND@N`` items -> {N: KIND}, one fault per N."""
    if kinds is None:
        from dwc.sim.hil.protocol import FAULTS as kinds
    out = {}
    for item in spec:
        kind, _, step = item.partition("@")
        if kind not in kinds or not step.isdigit():
            raise OptionError("inject", f" {item!r}: expected KIND@{unit} with KIND one of {', '.join(kinds)}")
        if int(step) in out:
            raise OptionError("inject", f": {unit.lower()} {step} is given twice ({out[int(step)]} and {kind}); "
                            f"one fault per {unit.lower()}")
        out[int(step)] = kind
    return out


def link_bench(build: Path, graph, ports: dict, divisor: int, work: Path, log=print):
    """The board top's logic (core + UART link at ``divisor`` cycles per bit) built in Verilator under
    ``work``; the build is reused while the Verilog is unchanged."""
    from dwc.rtl.link import link_verilog
    from dwc.sim.bitstream import public_ports
    from dwc.sim.runner import Bench
    work.mkdir(parents=True, exist_ok=True)
    src = work / "dwc_link.v"
    # Only the ports visible to the bench, so Verilator optimises the rest: a step's frames take
    # thousands of cycles, and with every signal public each one costs many times more.
    text = public_ports(link_verilog(graph, ports, divisor))
    if not src.exists() or src.read_text() != text:
        src.write_text(text)
    log("building the board top's logic (core + UART link) in Verilator ...")
    # Amaranth's FSM encoding draws Verilator style warnings (incomplete case) in the link's logic;
    # the core inside is the lint-clean one.
    return Bench([src], ports, work / "sim-verilator", toplevel="dwc_link", warnings_fatal=False, ports_only=True,
                 quick_build=False)


def hold_sim(work: Path, what: str):
    """Hold ``work`` (a link bench's folder: its job, events and results files) for this process: a second
    dwc board-sim or dwc hil --sim on the same build would rewrite them under the first (one line, exit 2)."""
    from dwc.core.rundir import hold_lock
    return hold_lock(work, what, advice="One dwc board-sim or dwc hil --sim at a time per build (and board-sim "
                                        "--clock): wait for it to end, or stop it (Ctrl-C)")


RESEND_ATTEMPTS = 4  # frames sent per step before giving up


def open_port(url: str, baud: int, timeout_s: float):
    """A serial port by pyserial URL: a device (/dev/ttyUSB0, COM3), ``socket://HOST:PORT`` (a virtual
    board from ``dwc board-sim``, or a board behind ser2net) or ``rfc2217://HOST:PORT``."""
    try:
        import serial
    except ImportError:
        raise OptionError("port", " needs pyserial: pip install pyserial") from None
    scheme, _, rest = url.partition("://")
    if scheme in ("socket", "rfc2217"):
        from urllib.parse import urlsplit
        try:
            ok = bool(urlsplit(url).hostname) and urlsplit(url).port is not None and not rest.endswith(":")
        except ValueError:  # a port that is not a number in 0..65535
            ok = False
        if not ok:
            raise OptionError("port", f" {url}: expected {scheme}://HOST:PORT, e.g. {scheme}://127.0.0.1:5555")
    try:
        return serial.serial_for_url(url, baudrate=baud, timeout=timeout_s)
    except (serial.SerialException, ValueError, OSError) as e:
        why = re.sub(r"(\[Errno \d+\] )?could not open port \S+: ", "", str(e), flags=re.IGNORECASE)
        why = re.sub(r"\[Errno \d+\] ", "", why)
        if scheme == "socket":
            hint = "is dwc board-sim (or ser2net for a remote board) listening there?"
        elif scheme == "rfc2217":
            hint = "is ser2net (with RFC 2217 telnet) listening there?"
        elif "://" in url:
            hint = "a port is a device (/dev/ttyUSB0) or a URL socket://HOST:PORT or rfc2217://HOST:PORT"
        else:
            hint = "is the board plugged in, and is this its serial device?"
        raise OptionError("port", f" {url}: {why}; {hint}") from None


class _Link:
    """A serial port that reopens itself: after a lost connection (a board unplugged, a socket
    closed) it tries ``serial_for_url`` again for up to ``reconnect_s`` seconds."""

    def __init__(self, url: str, baud: int, read_s: float, reconnect_s: float):
        self.url, self.baud, self.read_s, self.reconnect_s = url, baud, read_s, reconnect_s
        self.port = open_port(url, baud, read_s)
        self.reconnects = 0

    def reopen(self, why: str) -> None:
        try:
            self.port.close()
        except Exception:  # noqa: BLE001 - whatever state the old port is in, it is gone
            pass
        t0, wait, tries = time.perf_counter(), 0.05, 0
        while True:
            tries += 1
            try:
                self.port = open_port(self.url, self.baud, self.read_s)
                self.reconnects += 1
                return
            except UserError as e:
                last = (e.detail if isinstance(e, OptionError) else str(e)).removeprefix(f" {self.url}: ")
            if time.perf_counter() - t0 + wait > self.reconnect_s:
                raise UserError(f"lost the connection to {self.url} ({why}) and could not reopen it in "
                                f"{tries} tries over {self.reconnect_s:g} s: {last}")
            time.sleep(wait)
            wait = min(2 * wait, 1.0)


def run_serial(graph, ports, port: str, baud: int, env_id: str, seeds, max_steps, timeout_s: float = HIL_TIMEOUT_S,
               reconnect_s: float = RECONNECT_S) -> dict:
    """The host loop on a serial port (pyserial, any URL it opens): frame, send, wait up to
    ``timeout_s`` for the response, resend on a timeout or a bad frame; reopen the port when the
    connection is lost."""
    import serial

    from dwc.ir.closed_loop import Episode, make_env
    from dwc.sim.hil.protocol import ResponseParser, obs_frame, reply_for
    try:
        env = make_env(env_id, graph)
    except ValueError as e:
        raise UserError(str(e)) from None
    link, parser = _Link(port, baud, min(0.05, timeout_s), reconnect_s), ResponseParser(ports)
    episodes, latencies, retries, late, link_s, step, lost = [], set(), 0, 0, 0.0, 0, None
    t0 = time.perf_counter()

    def receive(deadline: float, seq: int):
        """The reply to observation ``seq``; replies to earlier ones that come late are dropped."""
        nonlocal late
        while time.perf_counter() < deadline:
            got, others = reply_for(parser.feed(link.port.read(max(1, link.port.in_waiting))), seq)
            late += others
            if got:
                return got
        return None

    try:
        for seed in seeds:
            ep = Episode(env, graph, seed, max_steps)
            while not ep.done:
                frame, got = obs_frame(ep.q, ports, step), None
                for attempt in range(RESEND_ATTEMPTS):
                    t = time.perf_counter()
                    try:
                        link.port.write(frame)
                        got = receive(t + timeout_s, step)
                    except serial.SerialException as e:  # the connection is gone: reopen, then resend
                        link.reopen(str(e))
                        parser.reset()
                    link_s += time.perf_counter() - t
                    if got:
                        break
                    retries += 1
                    parser.reset()  # a frame cut short by a lost byte never completes
                if got is None:
                    raise UserError(f"no valid response from {port} after {RESEND_ATTEMPTS} attempts (step "
                                    f"{len(ep.actions)}); is the board programmed with this build's bitstream at "
                                    f"{baud} baud?")
                ep.step(got[0])
                latencies.add(got[1])
                step += 1
            episodes.append(ep.record())
    except UserError as e:  # the board is gone (or mute): what finished is kept, the report says where it stopped
        lost = {"why": str(e), "steps": step, "episodes_done": len(episodes), "episode_steps": len(ep.actions)}
    finally:
        link.port.close()
        env.close()
    return {"episodes": episodes, "latency": sorted(latencies), "retries": retries, "reconnects": link.reconnects,
            "late_replies": late, "bad_frames_host": parser.bad, "seconds": time.perf_counter() - t0,
            "link_seconds": link_s, "lost": lost}


def control_period(env_id: str) -> float | None:
    """Seconds of simulated time per env step (MuJoCo: frame_skip x the model's timestep), the period a
    controller on a real robot would have to answer in; None where the env does not say."""
    import gymnasium as gym
    env = gym.make(env_id)
    try:
        dt = getattr(env.unwrapped, "dt", None)
        return float(dt) if dt else None
    finally:
        env.close()


def hil(build: Path, env_id: str | None = None, episodes: int = BOARD_EPISODES, seed: int | None = None,
        max_steps: int | None = None, sim: bool = True, port: str | None = None, baud: int = BAUD,
        inject: list[str] = (), log=print, timeout_s: float = HIL_TIMEOUT_S, reconnect_s: float = RECONNECT_S) -> dict:
    from dwc.rtl.link import frame_lengths
    from dwc.ir.closed_loop import action_mismatches, reference_episodes
    from dwc.ir.compiled import load_build
    from dwc.sim.verify import evaluation_seed
    graph, ports, _ = load_build(build)
    build = Path(build)
    env_id = env_id or graph.meta.get("env")
    faults = parse_faults(list(inject))
    if faults and not sim:
        raise OptionError("inject", " works with --sim only; for faults on a port, give them to the virtual board: "
                        "dwc board-sim BUILD --inject KIND@FRAME")
    seeds = [(evaluation_seed(graph) if seed is None else seed) + i for i in range(episodes)]

    def reference():
        try:
            return reference_episodes(graph, env_id, seeds, max_steps)
        except ValueError as e:
            raise UserError(str(e)) from None
    if sim:
        lock = hold_sim(build / "hil", "dwc hil --sim")
        try:
            ref = reference()  # before the build: a wrong --env says so at once
            bench = link_bench(build, graph, ports, SIM_DIVISOR, build / "hil", log)
            log(f"running {episodes} episode(s) over the simulated UART ...")
            r = bench.hil(build / "graph.json", env_id, seeds, SIM_DIVISOR, max_steps, faults)
        except RuntimeError as e:
            raise UserError(str(e)) from None
        finally:
            if lock:
                lock.close()
    else:
        log(f"running {episodes} episode(s) over {port} ...")
        r = run_serial(graph, ports, port, baud, env_id, seeds, max_steps, timeout_s, reconnect_s)
        ref = reference()[:len(r["episodes"])]  # a lost board: the episodes it finished
    obs_len, act_len = frame_lengths(ports)
    bits = 10 * (obs_len + act_len)
    steps = sum(e["steps"] for e in r["episodes"])
    report = {"build": str(build), "env": env_id, "mode": "sim" if sim else f"serial {port}", "episodes": episodes,
              "seeds": seeds, "steps": steps, "return_hil": [e["return"] for e in r["episodes"]],
              "return_ref": [e["return"] for e in ref], "latency_cycles_on_chip": r["latency"],
              "latency_cycles_declared": ports["latency_cycles"], "retries": r["retries"],
              # steps count across the episodes; a fault after the last step was never sent
              "faults_injected": {str(k): v for k, v in faults.items() if k < steps},
              "faults_not_reached": {str(k): v for k, v in faults.items() if k >= steps},
              "frame_bytes": {"obs": obs_len, "action": act_len},
              "link_time_per_step_s_at_baud": round(bits / baud, 6), "baud": baud,
              "wall_seconds": round(r["seconds"], 2)}
    # Real time on a robot: a step's frames on the serial line (the circuit's own latency is nanoseconds)
    # against the task's control period.
    dt = control_period(env_id)
    report.update(control_period_s=dt, link_keeps_up=bits / baud <= dt if dt else None,
                  baud_for_real_time=math.ceil(bits / dt) if dt else None)
    if "frames_bad" in r:
        report.update(frames_ok_on_chip=r["frames_ok"], frames_bad_on_chip=r["frames_bad"])
    if "link_seconds" in r:
        report["link_time_per_step_s_measured"] = round(r["link_seconds"] / max(1, steps), 6)
    if "reconnects" in r:
        report.update(reconnects=r["reconnects"], bad_frames_at_host=r["bad_frames_host"])
    report["late_replies_dropped"] = r.get("late_replies", 0)  # replies to an earlier observation (its sequence byte)
    report["action_mismatches"] = action_mismatches(r["episodes"], ref)
    report["passed"] = (report["action_mismatches"] == 0 and set(r["latency"]) <= {ports["latency_cycles"]}
                        and not r.get("lost"))
    if lost := r.get("lost"):
        report["lost"] = lost
    write_json(build / "hil_report.json", report)
    if lost:
        raise NotAsAsked(f"{lost['why']}; {lost['episodes_done']} of {episodes} episode(s) finished "
                         f"({lost['steps']} steps in all, {lost['episode_steps']} of the episode in progress), "
                         f"{report['action_mismatches']} action mismatches in them: see {build / 'hil_report.json'}")
    return report


def real_time(r: dict) -> str:
    """Whether the link's time per step fits the task's control period, and the baud rate that would."""
    if not r.get("control_period_s"):
        return ""
    need = f"{r['baud_for_real_time']:,} baud"
    return (f"; the task steps every {r['control_period_s'] * 1e3:.1f} ms: "
            + (f"the link keeps up (it would from {need})" if r["link_keeps_up"] else
               f"too slow for real time, which needs at least {need}"))


def hil_text(r: dict) -> str:
    """The report of :func:`hil` for people: per-episode returns, link faults and timing, PASS/FAIL."""
    lines = [f"episode {i} (seed {r['seeds'][i]}): return over the link {a:.3f}, reference {b:.3f}"
             for i, (a, b) in enumerate(zip(r["return_hil"], r["return_ref"]))]
    not_reached = (f" (not reached, the run has {r['steps']} steps: {r['faults_not_reached']})"
                   if r["faults_not_reached"] else "")
    lines += [f"{r['steps']} steps, {r['action_mismatches']} action mismatches, on-chip latency "
              f"{r['latency_cycles_on_chip']} cycles (declared {r['latency_cycles_declared']}), "
              f"{r['retries']} resent frames, "
              + (f"{r['reconnects']} reconnections, {r['bad_frames_at_host']} bad replies skipped"
                 if "reconnects" in r else f"faults injected {r['faults_injected'] or 'none'}{not_reached}"),
              f"link: {r['frame_bytes']['obs']} + {r['frame_bytes']['action']} bytes per step = "
              f"{r['link_time_per_step_s_at_baud'] * 1e3:.2f} ms at {r['baud']} baud" + real_time(r),
              ("PASS" if r["passed"] else "FAIL") + f"; report: {r['build']}/hil_report.json"]
    return "\n".join(lines)
