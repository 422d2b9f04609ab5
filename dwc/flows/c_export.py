"""``dwc export --c``: a compiled policy as one C99 header (:mod:`dwc.backends.c_header`), checked against
the reference executor on this machine and measured: code and table bytes (``-Os``; for a Cortex-M4
too when ``arm-none-eabi-gcc`` is installed) and nanoseconds per action on this CPU (``-O2``,
scalar and 64-wide batch)."""
from __future__ import annotations

import ctypes
import platform
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from dwc.core.errors import OptionError, UserError
from dwc.ir import Graph, IRError
from dwc.ir import reference as ref
from dwc.backends.c_header import c_header, c_layout
from dwc.core.cbuild import c_compiler, cpu_model
from dwc.core.rundir import write_json, write_text

DEFAULT_NAME = "dwc_policy"
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
CORTEX_M4 = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=soft", "-ffreestanding"]


def source_graph(source: Path, out: Path | None) -> tuple[Graph, Path]:
    """The graph to export and the header's path: a ``dwc compile`` folder (or its graph.json), or a
    run / policy folder frozen and optimised here as ``dwc compile`` does with its default widths."""
    source = Path(source)
    gpath = source if source.suffix == ".json" else source / "graph.json"
    if gpath.is_file():
        try:
            g = Graph.load(gpath)
        except IRError as e:
            raise UserError(f"{gpath}: {e}") from None
        return g, Path(out) if out else gpath.parent / f"{DEFAULT_NAME}.h"
    if (source / "config.json").is_file():
        if out is None:
            raise UserError(f"{source} is a trained policy, not a dwc compile output: give --out FILE.h for the "
                            f"header (frozen with dwc compile's defaults), or run dwc compile {source} --out BUILD "
                            f"first and export BUILD")
        from dwc.flows.compile import freeze_run
        from dwc.ir.passes import optimize
        return optimize(freeze_run(source))[0], Path(out)
    raise UserError(f"{source} holds no graph.json: run dwc compile POLICY --out {source} first, then "
                    f"dwc export --c {source}")


def c_name(header: Path) -> str:
    """The functions' prefix: the header's file name as a C identifier (dwc_policy.h -> dwc_policy)."""
    name = re.sub(r"\W", "_", header.stem, flags=re.ASCII) or DEFAULT_NAME
    return "_" + name if name[0].isdigit() else name


def export_c(source: Path, out: Path | None = None, measure: bool = True, log=print) -> dict:
    g, header = source_graph(source, out)
    if header.suffix != ".h":
        raise OptionError("out", f" {header}: a C header's name ends in .h")
    name = c_name(header)
    try:
        text = c_header(g, name)
    except ValueError as e:
        raise UserError(f"this circuit has no C form: {e}") from None
    header.parent.mkdir(parents=True, exist_ok=True)
    write_text(header, text)
    layout = c_layout(g, name)
    counts = g.counts()
    report = {
        "header": str(header), "name": name, "source": str(source), "env": g.meta.get("env"),
        "policy": g.meta.get("policy"), "obs_dim": g.obs_dim, "act_dim": g.action_dim,
        "circuit": {k: counts[k] for k in ("comparators", "luts", "luts_per_layer", "popcount_sizes")
                    if k in counts} | ({"linear_layers": counts["linear_layers"]} if "linear_layers" in counts else {}),
        "functions": [f"{name}_{f}" for f in ("act_f", "act_d", "act_q", "quantize_f", "quantize_d")],
        "batch_functions": [f"{name}_batch_{f}" for f in ("q", "f", "d")],
        "header_bytes": len(text.encode()),
        "table_bytes": layout["table_bytes"],  # the scalar path's arrays, exact
        "buffer_bytes": layout["buffer_bytes"],  # its working buffers in one call
        "sizes": {}, "speed": None, "check": None, "notes": [],
    }
    if measure:
        measure_header(g, header, name, report, log)
    write_json(header.with_suffix(".json"), report)
    report["report"] = str(header.with_suffix(".json"))
    return report


def object_sizes(cc: str, flags: list[str], header: Path, name: str, size_tool: str, *options: str) -> dict:
    """Section sizes of the implementation compiled with ``flags`` and the header's ``options``
    (BATCH, UNROLLED): code (.text), constant tables (.rodata), data; and the stack frames gcc
    reports (-fstack-usage), largest and all added."""
    u = name.upper()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "impl.c"
        src.write_text("".join(f"#define {u}_{o}\n" for o in ("IMPLEMENTATION", *options))
                       + f'#include "{header.resolve()}"\n')
        res = subprocess.run([cc, *STRICT, *flags, "-fstack-usage", "-c", "impl.c", "-o", "impl.o"], cwd=tmp,
                             capture_output=True, text=True)
        if res.returncode:
            raise RuntimeError(f"{cc} failed on the header: {res.stderr.strip()[:800]}")
        listing = subprocess.run([size_tool, "-A", "impl.o"], cwd=tmp, capture_output=True, text=True).stdout
        su = (Path(tmp) / "impl.su").read_text() if (Path(tmp) / "impl.su").exists() else ""
    sec = {}
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(".") and parts[1].isdigit():
            sec[parts[0]] = int(parts[1])
    pick = lambda *pre: sum(v for k, v in sec.items() if any(k == p or k.startswith(p + ".") for p in pre))
    frames = [int(line.split("\t")[1]) for line in su.splitlines() if line.count("\t") >= 2]
    return {"code_bytes": pick(".text"), "table_bytes": pick(".rodata"), "data_bytes": pick(".data", ".bss"),
            "stack_frames_max": max(frames, default=0), "stack_frames_sum": sum(frames),
            "compiler": cc, "flags": " ".join(flags)}


BENCH = r"""#define _POSIX_C_SOURCE 199309L
#include <time.h>
#define @U@_IMPLEMENTATION
@OPTIONS@
#include "@H@"

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* ns per action over `passes` passes of n observations; -1 on a NaN */
double run_scalar(const double *obs, double *act, int n, int passes)
{
    const double t0 = now_ns();
    for (int p = 0; p < passes; p++)
        for (int i = 0; i < n; i++)
            if (@P@_act_d(obs + (long)i * @U@_OBS_DIM, act + (long)i * @U@_ACT_DIM)) return -1.0;
    return (now_ns() - t0) / ((double)n * passes);
}

#ifdef @U@_BATCH
double run_batch(const double *obs, double *act, int n, int passes)
{
    const double t0 = now_ns();
    for (int p = 0; p < passes; p++)
        if (@P@_batch_d(obs, act, n)) return -1.0;
    return (now_ns() - t0) / ((double)n * passes);
}
#endif

void run_q(const int32_t *q, int32_t *act, int n)
{
    for (int i = 0; i < n; i++) @P@_act_q(q + (long)i * @U@_OBS_DIM, act + (long)i * @U@_ACT_DIM);
}
"""


def check_observations(g: Graph, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Float observations over 1.25x each format's range, with exact ties and +-inf mixed in, and
    random in-range codes with each format's extremes."""
    rng = np.random.default_rng(seed)
    frac = np.array([f.frac for f in g.obs_formats])
    lo = np.array([f.min_int for f in g.obs_formats])
    hi = np.array([f.max_int for f in g.obs_formats])
    x = rng.uniform(1.25 * lo, 1.25 * hi, (n, g.obs_dim)) * 2.0 ** -frac
    ties = rng.random((n, g.obs_dim)) < 0.2
    x[ties] = ((rng.integers(lo, hi + 1, (n, g.obs_dim)) + 0.5) * 2.0 ** -frac)[ties]
    x[rng.random((n, g.obs_dim)) < 0.01] = np.inf
    x[rng.random((n, g.obs_dim)) < 0.01] = -np.inf
    q = rng.integers(lo, hi + 1, (n, g.obs_dim))
    q[: n // 8] = np.where(rng.integers(0, 2, (n // 8, g.obs_dim)) == 1, hi, lo)
    return x, q.astype(np.int32)


def _timed(fn, reps: int = 5, seconds: float = 0.1) -> dict:
    """ns per action: median, min and max of ``reps`` repetitions of about ``seconds`` each."""
    once = fn(1)
    passes = max(1, int(seconds / max(once * 1e-9 * 4096, 1e-7)))
    runs = sorted(fn(passes) for _ in range(reps))
    return {"ns_per_action": round(runs[len(runs) // 2], 1), "min": round(runs[0], 1), "max": round(runs[-1], 1),
            "repetitions": reps, "actions_per_repetition": passes * 4096}


def measure_header(g: Graph, header: Path, name: str, report: dict, log=print) -> None:
    cc = c_compiler()
    if cc is None:
        report["notes"].append("no C compiler (cc, gcc, clang) found: sizes, speed and the check were skipped")
        return
    size_tool = shutil.which("size")
    if size_tool:
        host = platform.machine()
        sizes = report["sizes"][host] = object_sizes(cc, ["-Os"], header, name, size_tool)
        sizes["batch_code_bytes"] = object_sizes(cc, ["-Os"], header, name, size_tool, "BATCH")["code_bytes"] \
            - sizes["code_bytes"]
        unrolled(sizes, object_sizes(cc, ["-Os"], header, name, size_tool, "UNROLLED"))
    else:
        report["notes"].append("no size tool (binutils): code sizes skipped")
    arm, arm_size = shutil.which("arm-none-eabi-gcc"), shutil.which("arm-none-eabi-size")
    if arm and arm_size:
        # table-driven only: the unrolled code is for CPUs (and arm-none-eabi-gcc -Os takes minutes on it)
        report["sizes"]["cortex-m4"] = object_sizes(arm, ["-Os", *CORTEX_M4], header, name, arm_size)
    libs = {v: bench_lib(cc, header, name, opts) for v, opts in (("tables", ["BATCH"]), ("unrolled", ["UNROLLED"]))}
    n = 4096
    x, q = check_observations(g, n)
    with np.errstate(over="ignore"):
        want, want_q = ref.act(g, x), ref.actions_int(g, q)
    t0 = time.perf_counter()
    speed, mismatches = {}, 0
    for v, lib in libs.items():
        act, act_q = np.zeros((n, g.action_dim)), np.zeros((n, g.action_dim), dtype=np.int32)
        speed["scalar" if v == "tables" else "scalar_unrolled"] = _timed(
            lambda p: lib.run_scalar(x.ctypes.data, act.ctypes.data, n, p))
        lib.run_q(q.ctypes.data, act_q.ctypes.data, n)
        mismatches += int((act != want).any(axis=1).sum() + (act_q != want_q).any(axis=1).sum())
    act = np.zeros((n, g.action_dim))
    speed["batch"] = _timed(lambda p: libs["tables"].run_batch(x.ctypes.data, act.ctypes.data, n, p))
    mismatches += int((act != want).any(axis=1).sum())
    report["check"] = {"observations": 5 * n, "mismatches": mismatches,
                       "what": f"{n} float observations through {name}_act_d (table-driven and unrolled) and "
                               f"{name}_batch_d, {n} codes through {name}_act_q (both), against the reference "
                               f"executor"}
    if mismatches:
        raise RuntimeError(f"the C header disagrees with the reference executor on {mismatches} observations: a bug "
                           f"in dwc's C back end; please report it with {header}")
    report["speed"] = {"compiler": f"{cc} -O2", "cpu": cpu_model(), "threads": 1, **speed,
                       "seconds": round(time.perf_counter() - t0, 1)}


def unrolled(sizes: dict, other: dict) -> None:
    sizes["unrolled_code_bytes"], sizes["unrolled_table_bytes"] = other["code_bytes"], other["table_bytes"]


def bench_lib(cc: str, header: Path, name: str, options: list[str]) -> ctypes.CDLL:
    """The header with ``options`` and the timing loops of :data:`BENCH`, built -O2 and loaded."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "bench.c"
        src.write_text(BENCH.replace("@OPTIONS@", "".join(f"#define {name.upper()}_{o}\n" for o in options))
                       .replace("@U@", name.upper()).replace("@P@", name).replace("@H@", str(header.resolve())))
        so = Path(tmp) / "bench.so"
        res = subprocess.run([cc, *STRICT, "-O2", "-shared", "-fPIC", "-o", str(so), str(src)], capture_output=True,
                             text=True)
        if res.returncode:
            raise RuntimeError(f"{cc} failed on the header: {res.stderr.strip()[:800]}")
        lib = ctypes.CDLL(str(so))
    fns = ["run_scalar"] + (["run_batch"] if "BATCH" in options else [])
    for fn in fns:
        getattr(lib, fn).restype = ctypes.c_double
        getattr(lib, fn).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.run_q.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    return lib


def export_c_text(r: dict) -> str:
    lines = [f"wrote {r['header']}: C99, {r['obs_dim']} observations -> {r['act_dim']} action(s); functions "
             f"{r['name']}_act_f / _act_d / _act_q (and {r['name']}_batch_* with {r['name'].upper()}_BATCH)",
             f"  tables {r['table_bytes']:,} B, working buffers {r['buffer_bytes']:,} B per call"]
    for target, s in r["sizes"].items():
        extra = f"; batch functions +{s['batch_code_bytes']:,} B" if "batch_code_bytes" in s else ""
        if "unrolled_code_bytes" in s:
            extra += f"; unrolled {s['unrolled_code_bytes']:,} B code + {s['unrolled_table_bytes']:,} B tables"
        lines.append(f"  {target} ({Path(s['compiler']).name} {s['flags']}): code {s['code_bytes']:,} B + tables "
                     f"{s['table_bytes']:,} B, largest stack frame {s['stack_frames_max']} B{extra}")
    if r["speed"]:
        sp = r["speed"]
        for k, label in (("scalar", "scalar"), ("scalar_unrolled", "scalar, unrolled"), ("batch", "batch, 64/word")):
            t = sp[k]
            lines.append(f"  {label:<18} {t['ns_per_action']:>9,.1f} ns per action on {sp['cpu']} ({sp['compiler']}, "
                         f"median of {t['repetitions']}: {t['min']:,.1f}-{t['max']:,.1f})")
    if r["check"]:
        lines.append(f"  checked against the reference executor: {r['check']['observations']:,} observations, "
                     f"{r['check']['mismatches']} mismatches")
    lines += [f"  note: {n}" for n in r["notes"]]
    lines.append(f"  report: {r['report']}")
    return "\n".join(lines)
