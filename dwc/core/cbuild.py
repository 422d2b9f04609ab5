"""C sources built by the system compiler on first use, cached per source, flags and CPU.

Shared by the fast executor (:mod:`dwc.backends.fast`) and the LUT layer's CPU kernels
(:mod:`dwc.models.native`)."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


def c_compiler() -> str | None:
    """The system C compiler: ``$CC``, else the first of cc, gcc and clang on the PATH; None without one."""
    return next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)


def _cache_dir() -> Path:
    d = Path(os.environ.get("DWC_CACHE_DIR", Path.home() / ".cache" / "dwc")) / "fast"
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:  # a home that cannot be written: a per-user temporary folder
        d = Path(tempfile.gettempdir()) / f"dwc-{os.getuid() if hasattr(os, 'getuid') else 0}" / "fast"
        d.mkdir(parents=True, exist_ok=True)
    return d


def _cpu_key() -> str:
    """What -march=native compiles for: the CPU's model and instruction-set flags. Part of the cache
    key, so a cache shared by different CPUs (a cluster's home folder) never loads another CPU's code."""
    import platform
    try:
        info = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
        fields = {k.strip(): v.strip() for k, v in (l.split(":", 1) for l in info.splitlines() if ":" in l)}
        picked = [fields.get(k, "") for k in ("vendor_id", "model name", "flags", "Features", "CPU part")]
        return "|".join([platform.machine(), *picked])
    except OSError:  # no /proc (macOS): the platform's own description
        return "|".join([platform.machine(), platform.processor(), platform.platform()])


def cpu_model() -> str:
    """The CPU's name for benchmark records ("AMD EPYC", ...)."""
    import platform
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


UNUSED_DAYS = 30  # a cached library not used for this long is removed when another one is built


def _prune(cache: Path, keep: Path) -> None:
    """Every circuit and every version of the kernels has its own library: those not used for
    UNUSED_DAYS (their modification time, renewed on each use) go, so the cache does not grow forever."""
    cutoff = time.time() - UNUSED_DAYS * 86400
    for old in cache.glob("dwc_*.so"):
        try:
            if old != keep and old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:  # another process removed it, or a cache shared read-only
            pass


def build(src: str, cc: str = "cc", flags: tuple[str, ...] = ("-O2",)) -> Path:
    """The shared library of C source ``src`` built with ``cc``, ``flags`` and ``-march=native``, cached
    by all of them and this CPU (:func:`_cpu_key`); parallel builders share one file."""
    key = hashlib.sha256(f"{cc}\n{' '.join(flags)}\n{_cpu_key()}\n{src}".encode()).hexdigest()[:20]
    so = _cache_dir() / f"dwc_{key}.so"
    if so.exists():
        try:
            os.utime(so)  # used now: kept by _prune
        except OSError:
            pass
    else:
        with tempfile.TemporaryDirectory(dir=so.parent) as tmp:  # beside it: os.replace cannot cross file systems
            c_file, tmp_so = Path(tmp) / "source.c", Path(tmp) / "lib.so"
            c_file.write_text(src)
            res = subprocess.run([cc, *flags, "-march=native", "-shared", "-fPIC", "-o", str(tmp_so), str(c_file)],
                                 capture_output=True, text=True)
            if res.returncode:
                raise RuntimeError(f"C compiler failed: {res.stderr.strip()[:500]}")
            os.replace(tmp_so, so)  # atomic: concurrent builders never see a partial file
        _prune(so.parent, so)
    return so
