"""The run directory's files, without torch: their names, crash-safe writes, and readers of the
config and metrics that the CLI, sweeps and reports use (dwc.train.run writes them while training).

    RUN/config.json        the full TrainConfig
    RUN/checkpoint.pt      everything needed to resume (written atomically; dwc.train.run)
    RUN/metrics.jsonl      one JSON object per logged event, each with "step"
    RUN/tb/                TensorBoard event files
    RUN/eval.json          the final deterministic evaluation
    RUN/commands.txt       every command line that trained this run (one per leg: start, resumes)
    RUN/legs.json          per leg, the device and precision it resolved (--precision/--device auto),
                           the dwc code that ran it (:func:`code_version`) and the machine (:func:`machine`)
    RUN/.lock              held by the process training it (:func:`hold_lock`)
"""
from __future__ import annotations

import functools
import inspect
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

from dwc.core.config import CONFIG, load_config
from dwc.core.errors import UserError

@functools.lru_cache(maxsize=1)
def code_version() -> dict:
    """Which dwc is running: its version, the folder it was imported from and, in a git checkout, the
    commit and whether the package had uncommitted changes; recorded per training leg (legs.json) so
    that every figure can be traced to the code that trained it."""
    import subprocess
    import dwc
    from dwc import __version__
    pkg = Path(dwc.__file__).resolve().parent
    out = {"version": __version__, "path": str(pkg)}
    git = ["git", "-C", str(pkg)]
    try:
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode == 0:
            changes = subprocess.run([*git, "status", "--porcelain", "--", "."], capture_output=True, text=True,
                                     timeout=10)
            out.update(commit=head.stdout.strip(), uncommitted_changes=bool(changes.stdout.strip()))
    except (OSError, subprocess.TimeoutExpired):  # no git, or a slow file system: version and path only
        pass
    return out


@functools.lru_cache(maxsize=1)
def machine() -> dict:
    """Where a leg ran, recorded per training leg beside the code: a run is exact on one machine, but
    another CPU model (other float kernels) or another version of a package it steps or trains with
    rounds differently, so the same command can end elsewhere."""
    import platform
    from importlib.metadata import PackageNotFoundError, version
    cpu = platform.processor()
    try:  # Linux: the model name ("AMD EPYC ...", "Intel(R) Xeon(R) ..."); platform.processor() is the arch
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    packages = {}
    for name in ("torch", "numpy", "mujoco", "gymnasium"):
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            pass
    return {"cpu": cpu, "python": platform.python_version(), "packages": packages}


__all__ = ["CHECKPOINT", "CHECKPOINT_INFO", "COMMANDS", "CONFIG", "LEGS", "LOCK", "METRICS", "atomic_write_bytes",
           "checkpoint_info", "code_version", "episode_returns", "last_logged_step", "load_config", "machine", "read_metrics",
           "hold_lock", "record_checkpoint", "replaces_outputs", "tail_records", "write_json", "write_text"]

CHECKPOINT = "checkpoint.pt"
CHECKPOINT_INFO = "checkpoint.json"  # the checkpoint's step: a checkpoint with its replay buffer is up to ~1 GB
METRICS = "metrics.jsonl"
LEGS = "legs.json"
COMMANDS = "commands.txt"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# mkstemp makes 0600 files; outputs get the mode any other file written here gets (0644 under umask 022).
FILE_MODE = 0o666 & ~_umask()


class _RecordingWriter:
    """A file whose failed writes are remembered: torch.save reports a full disk as a RuntimeError
    ("unexpected pos"), which would hide the OSError (ENOSPC) that the CLI turns into one clear line."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, b):
        try:
            return self.f.write(b)
        except OSError as e:
            self.error = self.error or e
            raise

    def __getattr__(self, name):
        return getattr(self.f, name)


def atomic_write_bytes(path: Path, write) -> None:
    """Write via a temp file in the same folder, fsync, rename: a crash leaves the old file intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            rec = _RecordingWriter(f)
            try:
                write(rec)
            except Exception:
                if rec.error is not None:
                    raise rec.error from None
                raise
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:  # name the file that could not be written
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise


def write_text(path: Path, text: str) -> None:
    """A text output (Verilog, a graph, a report), all or nothing: a full disk leaves the old file or none."""
    atomic_write_bytes(Path(path), lambda f: f.write(text.encode()))


def write_json(path: Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=2) + "\n")


def record_checkpoint(run: Path, step: int, cost: dict | None = None) -> None:
    """RUN/checkpoint.json beside a checkpoint just saved: its step, its training cost so far (see
    :class:`dwc.train.loop.TrainLoop`), and the file's size and mtime, by which :func:`checkpoint_info`
    knows it describes this checkpoint and not the one before (a kill between the two writes)."""
    st = (Path(run) / CHECKPOINT).stat()
    write_json(Path(run) / CHECKPOINT_INFO, {"step": int(step), **({"cost": cost} if cost else {}),
                                             "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})


def checkpoint_info(run: Path) -> dict | None:
    """A run directory's checkpoint without loading it: {"step", "cost"}, or None without one. Both are
    None where checkpoint.json does not describe this checkpoint (saved before dwc wrote it, copied
    without its times, or a kill between the two writes); "cost" also where it was saved before dwc
    recorded one."""
    try:
        st = (Path(run) / CHECKPOINT).stat()
    except OSError:
        return None
    try:
        info = json.loads((Path(run) / CHECKPOINT_INFO).read_text())
        if (info["bytes"], info["mtime_ns"]) == (st.st_size, st.st_mtime_ns):
            return {"step": int(info["step"]), "cost": info.get("cost")}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return {"step": None, "cost": None}


def training_cpu_seconds(run: Path) -> float | None:
    """The CPU seconds a finished run's training took, all its legs together (its share where seeds
    trained together), from its last checkpoint; None where that checkpoint does not hold them from
    step 0 (a run begun before dwc recorded them)."""
    cost = (checkpoint_info(run) or {}).get("cost")
    return cost["cpu_s"] if cost and cost.get("from_step") == 0 else None


LOCK = ".lock"


def hold_lock(folder: Path, what: str, advice: str = ""):
    """Take FOLDER/.lock for this process, or raise UserError naming the process that holds it (and
    ADVICE, what to do instead): two processes training one run, or driving one sweep, would
    interleave their metrics and checkpoints.
    The lock is the OS's (flock), so it goes with its process however that ends, and never goes stale;
    keep the returned file open while it is needed, close it to let go (None where the OS has no flock)."""
    try:
        import fcntl
    except ImportError:  # Windows
        return None
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        f = open(folder / LOCK, "a+")
    except OSError:  # not writable: whatever writes there next says so
        return None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise UserError(f"{folder} is in use: {holder}. " + (advice or
                        f"One {what} at a time in a folder: wait for it to end, "
                        f"or stop it (Ctrl-C, or kill PID: it checkpoints first) and start again")) from None
    except OSError:  # a file system without locks (some FUSE and parallel ones): go on unguarded, as before
        f.close()
        return None
    f.seek(0)
    f.truncate()
    f.write(f"{what} by pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    f.flush()
    return f


def tail_records(run: Path, nbytes: int = 4096) -> list[dict]:
    """The records in the last ``nbytes`` of a run directory's metrics.jsonl (the file grows to MBs, and
    a progress line wants only its end); the first line, likely cut, and torn lines are skipped."""
    p = Path(run) / METRICS
    try:
        with open(p, "rb") as f:
            size = p.stat().st_size
            f.seek(max(0, size - nbytes))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    return _records(lines[1:] if size > nbytes else lines)


def estimated_training_seconds(run: Path) -> float | None:
    """For a run trained before dwc recorded its cost: the wall seconds its training took, estimated from the
    steps per second it logged (each logged rate times the steps since the record before it; its share
    where seeds trained together, as legs.json says). None without a logged rate."""
    try:
        legs = json.loads((Path(run) / LEGS).read_text())
    except (OSError, ValueError):
        legs = []
    together = sorted((leg.get("from_step", 0), len(leg.get("seeds_together") or [1])) for leg in legs)

    def share(step: int) -> int:
        return next((k for start, k in reversed(together) if start < step), 1)
    seconds, last, seen = 0.0, 0, False
    for r in read_metrics(Path(run) / METRICS):
        sps = r.get("charts/SPS")
        if sps is None:
            continue
        if sps > 0:
            seconds, seen = seconds + (r["step"] - last) / sps / share(r["step"]), True
        last = r["step"]
    return seconds if seen else None


def last_logged_step(run: Path) -> int:
    """The latest step in a run directory's metrics.jsonl, 0 if none."""
    recs = tail_records(run)
    return recs[-1]["step"] if recs else 0


def read_metrics(metrics: Path) -> list[dict]:
    """The records of a metrics.jsonl. The file is only appended to, so a kill or a full disk can
    tear its last line at most; a line that does not parse as a record is skipped, not fatal."""
    return _records(Path(metrics).read_bytes().decode(errors="replace").splitlines()) if Path(metrics).exists() else []


def _records(lines: list[str]) -> list[dict]:
    recs = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("step"), int):
            recs.append(rec)
    return recs


def episode_returns(metrics: Path) -> list[tuple[int, float]]:
    """(env step, episodic return) of every training episode a run's metrics.jsonl logged."""
    return [(r["step"], r["charts/episodic_return"]) for r in read_metrics(metrics) if "charts/episodic_return" in r]


def replaces_outputs(*names: str):
    """For a function that writes ``names`` into its ``out`` folder: all of them or none. The previous
    ones are moved aside first and come back if the function fails, so a failed stage (``dwc compile
    --pipeline 99``, a full disk, Ctrl-C) leaves the last good outputs or, for a new folder, nothing;
    on success the old ones go, so no stale output of an earlier run stays beside the new ones."""
    def wrap(fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def run(*args, **kwargs):
            out = Path(sig.bind(*args, **kwargs).arguments["out"])
            new = not out.exists()
            out.mkdir(parents=True, exist_ok=True)
            aside = Path(tempfile.mkdtemp(dir=out, prefix=".previous-"))
            moved = [n for n in names if (out / n).exists()]
            for n in moved:
                os.replace(out / n, aside / n)
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                for n in names:
                    _remove(out / n)
                for n in moved:
                    os.replace(aside / n, out / n)
                shutil.rmtree(aside)
                if new and not any(out.iterdir()):
                    out.rmdir()
                raise
            shutil.rmtree(aside)
            return result
        return run
    return wrap


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
