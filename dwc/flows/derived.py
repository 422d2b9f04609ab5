"""What a build folder holds beyond the circuit (reports and work of verify, synth, hil, formal): a
compile or import that writes another circuit there clears them, so no report beside graph.json
speaks of a circuit that is gone (a build's summary, a verify_report.json, a bitstream)."""
from __future__ import annotations

import functools
import hashlib
import inspect
import shutil
from pathlib import Path

# Each stage's outputs in a build folder, made from its circuit (graph.json, dwc_core.v)
DERIVED = ("verify_report.json", "verify", "synth", "board", "hil_report.json", "hil", "board-sim",
           "formal_report.json", "formal")
CIRCUIT = ("graph.json", "dwc_core.v", "dwc_core.json")


def circuit_digest(out: Path) -> str | None:
    """The circuit's files' bytes, hashed (None where a folder holds none yet)."""
    files = [Path(out) / n for n in CIRCUIT]
    if not all(f.exists() for f in files):
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()


def clears_derived(fn):
    """For a function that writes a circuit into its ``out`` folder: once it has written a circuit other
    than the one there before, the outputs of DERIVED go (the same circuit keeps them: its verification
    and bitstream still hold). A failure changes nothing here."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        out = Path(sig.bind(*args, **kwargs).arguments["out"])
        before = circuit_digest(out)
        result = fn(*args, **kwargs)
        if before is not None and circuit_digest(out) != before:
            for name in DERIVED:
                path = out / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                elif path.exists() or path.is_symlink():
                    path.unlink()
        return result
    return run
