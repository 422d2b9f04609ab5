"""The C back end (dwc export --c): the header compiles warning-free as strict C99 (and for a
Cortex-M4 when arm-none-eabi-gcc is installed), and its float, double, fixed-point and batch entry
points agree with the reference executor on >= 10,000 observations per shipped policy type: random
over the whole float range (out-of-range values, +-inf, subnormals), exact rounding ties, random
integer codes and each format's extremes; NaN returns its position and writes nothing."""
import ctypes
import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dwc.flows.compile import freeze_run
from dwc.ir import FixedFormat, Graph
from dwc.ir import reference as ref
from dwc.backends.c_header import c_header
from dwc.ir.passes import optimize
from helpers import random_graph, random_linear_graph

POLICIES = Path(__file__).parent.parent / "policies"
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")


def compile_lib(headers: dict[str, str], tmp_path: Path, options=("BATCH",)) -> ctypes.CDLL:
    """One shared object from the headers (name -> text), each with its implementation and ``options``
    (BATCH: the batch functions too; UNROLLED: the straight-line scalar code)."""
    lines = []
    for name, text in headers.items():
        (tmp_path / f"{name}.h").write_text(text)
        lines += [f"#define {name.upper()}_{o}" for o in ("IMPLEMENTATION", *options)] + [f'#include "{name}.h"']
    tag = "_".join(options) or "plain"
    (tmp_path / f"lib_{tag}.c").write_text("\n".join(lines) + "\n")
    so = tmp_path / f"lib_{tag}.so"
    res = subprocess.run(["gcc", *STRICT, "-O2", "-shared", "-fPIC", "-o", str(so), str(tmp_path / f"lib_{tag}.c")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[:3000]
    return ctypes.CDLL(str(so))


class CPolicy:
    """The header's functions through ctypes, on numpy arrays."""

    def __init__(self, lib, name: str, g: Graph):
        self.lib, self.p, self.g = lib, name, g

    def fn(self, suffix):
        f = getattr(self.lib, f"{self.p}_{suffix}")
        f.restype = ctypes.c_int
        return f

    def rows(self, suffix, x: np.ndarray, out_dtype, width: int):
        """Call the scalar entry ``suffix`` once per row: (outputs, return codes)."""
        f = self.fn(suffix)
        x = np.ascontiguousarray(x)
        out = np.full((len(x), width), 7777, dtype=out_dtype)
        rcs = np.array([f(ctypes.c_void_p(x[i].ctypes.data), ctypes.c_void_p(out[i].ctypes.data))
                        for i in range(len(x))])
        return out, rcs

    def batch(self, suffix, x: np.ndarray, out_dtype):
        x = np.ascontiguousarray(x)
        out = np.full((len(x), self.g.action_dim), 7777, dtype=out_dtype)
        rc = self.fn(f"batch_{suffix}")(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(out.ctypes.data),
                                       ctypes.c_int(len(x)))
        return out, rc


def float_observations(g: Graph, n: int, seed: int) -> np.ndarray:
    """float64 observations: random bit patterns over the whole range (NaN replaced by +-inf),
    uniform over 1.5x each format's range, exact ties k + 1/2 and their neighbours, the formats'
    edges, +-0, +-inf, subnormals and the largest doubles."""
    rng = np.random.default_rng(seed)
    D = g.obs_dim
    frac = np.array([f.frac for f in g.obs_formats])
    lo = np.array([f.min_int for f in g.obs_formats], dtype=np.float64)
    hi = np.array([f.max_int for f in g.obs_formats], dtype=np.float64)
    k = n // 5
    bits = rng.integers(0, 2 ** 63, (k, D), dtype=np.uint64) | (rng.integers(0, 2, (k, D), dtype=np.uint64) << 63)
    wild = bits.view(np.float64).copy()
    wild[np.isnan(wild)] = np.inf * np.sign(rng.normal(size=np.isnan(wild).sum()))
    uniform = rng.uniform(1.5 * lo, 1.5 * hi, (k, D)) * 2.0 ** -frac
    ties = (rng.integers(lo.astype(np.int64) - 2, hi.astype(np.int64) + 2, (k, D)) + 0.5) * 2.0 ** -frac
    near = np.nextafter(ties, rng.choice([-np.inf, np.inf], (k, D)))
    special = np.array([0.0, -0.0, np.inf, -np.inf, 5e-324, -5e-324, 2.2e-308, np.finfo(np.float64).max,
                        -np.finfo(np.float64).max, 1e300, -1e300, 1e-300])
    edges = np.concatenate([np.stack([v * 2.0 ** -frac for v in (lo, hi, lo - 0.5, hi + 0.5, lo - 0.51, hi + 0.49,
                                                                  hi + 0.5000001, lo + 0.5, hi - 0.5)]),
                            np.repeat(special[:, None], D, axis=1)])
    rest = rng.choice(special, (n - 4 * k - len(edges), D))
    x = np.concatenate([wild, uniform, ties, near, edges, rest])
    for col in range(D):  # mix the kinds across dimensions too
        rng.shuffle(x[4 * k:, col])
    return x


def float32_observations(g: Graph, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    D = g.obs_dim
    k = n // 3
    bits = rng.integers(0, 2 ** 32, (k, D), dtype=np.uint64).astype(np.uint32)
    wild = bits.view(np.float32).copy()
    wild[np.isnan(wild)] = np.float32(np.inf)
    x64 = float_observations(g, n - k, seed + 1)
    ties = x64.astype(np.float32)  # ties k + 1/2 with small k are exact in float32 too
    return np.concatenate([wild, ties])


def int_observations(g: Graph, n: int, seed: int) -> np.ndarray:
    """Random codes in range, every dimension at its extremes (all 2^D corners where few), and some
    arbitrary int32 values outside the formats (compared as they are, like the reference)."""
    rng = np.random.default_rng(seed)
    lo = np.array([f.min_int for f in g.obs_formats])
    hi = np.array([f.max_int for f in g.obs_formats])
    D = g.obs_dim
    corners = min(2 ** D, 4096)
    sel = rng.integers(0, 2, (corners, D)) if 2 ** D > 4096 else (np.arange(corners)[:, None] >> np.arange(D)) & 1
    ext = np.where(sel == 1, hi, lo)
    wide = rng.integers(-2 ** 31, 2 ** 31, (n // 10, D))
    return np.concatenate([rng.integers(lo, hi + 1, (n - len(ext) - len(wide), D)), ext, wide]).astype(np.int32)


def check_policy(lib, name: str, g: Graph, n: int, seed: int = 0) -> None:
    with np.errstate(over="ignore"):  # huge values times 2**frac: inf, which saturates
        _check_policy(CPolicy(lib, name, g), name, g, n, seed)


def _check_policy(c: CPolicy, name: str, g: Graph, n: int, seed: int) -> None:
    D, A = g.obs_dim, g.action_dim
    x = float_observations(g, n, seed)
    want_q = ref.quantize_obs(g, x)
    got_q, rc = c.rows("quantize_d", x, np.int32, D)
    assert not rc.any() and np.array_equal(got_q, want_q), f"{(got_q != want_q).sum()} quantiser mismatches"
    want = ref.act(g, x)
    got, rc = c.rows("act_d", x, np.float64, A)
    assert not rc.any() and np.array_equal(got, want), f"act_d: {(got != want).any(axis=1).sum()} of {n} differ"
    batch = hasattr(c.lib, f"{name}_batch_d")
    if batch:
        got, rc = c.batch("d", x, np.float64)
        assert rc == 0 and np.array_equal(got, want), "batch_d"
    x32 = float32_observations(g, n, seed)
    want32 = ref.act(g, x32.astype(np.float64)).astype(np.float32)
    got, rc = c.rows("act_f", x32, np.float32, A)
    assert not rc.any() and np.array_equal(got, want32), f"act_f: {(got != want32).any(axis=1).sum()} differ"
    if batch:
        got, rc = c.batch("f", x32, np.float32)
        assert rc == 0 and np.array_equal(got, want32), "batch_f"
    q = int_observations(g, n, seed)
    want = ref.actions_int(g, q)
    got, _ = c.rows("act_q", q, np.int32, A)
    assert np.array_equal(got, want), f"act_q: {(got != want).any(axis=1).sum()} differ"
    if batch:
        got = np.full((len(q), A), 7777, dtype=np.int32)
        c.lib[f"{name}_batch_q"](ctypes.c_void_p(q.ctypes.data), ctypes.c_void_p(got.ctypes.data),
                                 ctypes.c_int(len(q)))
        assert np.array_equal(got, want), "batch_q"
    # NaN: 1 + its dimension (scalar) or 1 + its observation (batch); nothing written
    for d in range(D):
        bad = x[:3].copy()
        bad[1, d] = np.nan
        bad[2, (d + 1) % D] = -np.nan
        out, rc = c.rows("act_d", bad, np.float64, A)
        assert list(rc) == [0, d + 1, (d + 1) % D + 1] and (out[1:] == 7777).all()
        out, rc = c.rows("act_f", bad.astype(np.float32), np.float32, A)
        assert list(rc) == [0, d + 1, (d + 1) % D + 1] and (out[1:] == 7777).all()
        if batch:
            out, rc = c.batch("d", bad, np.float64)
            assert rc == 2 and (out == 7777).all()
            out, rc = c.batch("f", bad.astype(np.float32), np.float32)
            assert rc == 2 and (out == 7777).all()


@pytest.fixture(scope="module")
def shipped():
    """The shipped DWC, gate network and 2 x 64 quantised MLP, frozen and optimised as dwc compile does."""
    return {name: optimize(freeze_run(POLICIES / policy))[0] for name, policy in
            (("ip_dwc", "inverted-pendulum-v5-dwc"), ("ip_gates", "inverted-pendulum-v5-gates"),
             ("ip_qmlp", "inverted-pendulum-v5-qmlp"))}


@pytest.mark.parametrize("options", [("BATCH",), ("UNROLLED",)])
def test_shipped_policies_match_the_reference(shipped, tmp_path, options):
    """Table-driven scalar code and the batch functions; then the unrolled scalar code."""
    lib = compile_lib({name: c_header(g, name) for name, g in shipped.items()}, tmp_path, options)
    for name, g in shipped.items():
        check_policy(lib, name, g, 10_000)


def random_graphs():
    gs = [random_graph(s) for s in range(12)] + [random_linear_graph(s, s % 2 == 1) for s in range(12)]
    # formats at the ends of what the IR allows: 2 and 32 bits, negative and large fractions
    g = random_graph(99)
    rng = random.Random(3)
    g.obs_formats = [FixedFormat(rng.choice([2, 3, 31, 32]), rng.choice([-20, -3, 0, 7, 40])) for _ in g.obs_formats]
    for c in g.comparators:
        f = g.obs_formats[c.dim]
        c.threshold = rng.choice([f.min_int, f.max_int + 1, rng.randint(f.min_int, f.max_int)])
    g.action_format = FixedFormat(32, 3)
    g.action_tables = [[rng.randint(-2 ** 31, 2 ** 31 - 1) for _ in t] for t in g.action_tables]
    g.validate()
    return gs + [g]


def test_random_graphs_match_the_reference(tmp_path):
    """Arity 0..6, repeated and constant thresholds, empty popcount groups, linear layers with
    negative shifts and both roundings, 2- and 32-bit formats: one C file, a header per graph."""
    gs = random_graphs()
    headers = {f"g{i}": c_header(g, f"g{i}") for i, g in enumerate(gs)}
    for options in (("BATCH",), ("UNROLLED", "BATCH")):
        lib = compile_lib(headers, tmp_path, options)
        for i, g in enumerate(gs):
            check_policy(lib, f"g{i}", g, 600, seed=i)


def test_the_header_alone_compiles_clean(shipped, tmp_path):
    """Included without the implementation (declarations only), and with it but without the batch
    functions: no warnings either way, and no symbol beyond the documented API."""
    g = shipped["ip_qmlp"]
    (tmp_path / "p.h").write_text(c_header(g, "p"))
    (tmp_path / "a.c").write_text('#include "p.h"\n#include "p.h"\nint f(void) { return P_OBS_DIM + P_ACT_DIM; }\n')
    (tmp_path / "b.c").write_text('#define P_IMPLEMENTATION\n#include "p.h"\n')
    (tmp_path / "c.c").write_text('#define P_IMPLEMENTATION\n#define P_UNROLLED\n#include "p.h"\n')
    for src in ("a.c", "b.c", "c.c"):
        res = subprocess.run(["gcc", *STRICT, "-Os", "-c", src], cwd=tmp_path, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr[:2000]
    syms = subprocess.run(["nm", "-g", "--defined-only", "b.o"], cwd=tmp_path, capture_output=True, text=True).stdout
    assert sorted(l.split()[-1] for l in syms.splitlines()) == ["p_act_d", "p_act_f", "p_act_q", "p_quantize_d",
                                                               "p_quantize_f"]


@pytest.mark.parametrize("cc", ["arm-none-eabi-gcc", "aarch64-linux-gnu-gcc"])
def test_cross_compiles(shipped, tmp_path, cc):
    """A microcontroller (Cortex-M4, no OS: freestanding, only the compiler's own stdint.h) and a
    64-bit ARM Linux: strict C99, no warnings (the batch functions too, but for the DWC's, which take
    the compiler half a minute here). Skipped without the compiler."""
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} not installed (Debian: apt-get install gcc-arm-none-eabi / gcc-aarch64-linux-gnu)")
    flags = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=soft", "-ffreestanding"] if "eabi" in cc else []
    for name, g in shipped.items():
        (tmp_path / f"{name}.h").write_text(c_header(g, name))
        u = name.upper()
        batch = f"#define {u}_BATCH\n" if name != "ip_dwc" else ""
        (tmp_path / f"{name}.c").write_text(f'#define {u}_IMPLEMENTATION\n{batch}#include "{name}.h"\n')
        res = subprocess.run([cc, *STRICT, *flags, "-Os", "-c", f"{name}.c"], cwd=tmp_path, capture_output=True,
                             text=True)
        assert res.returncode == 0, res.stderr[:2000]


def test_fast_executor_batch_one_path(shipped, tmp_path, monkeypatch):
    """dwc eval --frozen's path: one observation at a time through the header's scalar function
    (ctypes, preallocated buffers), the same actions as the reference; a NaN is refused by name."""
    from dwc.core.errors import UserError
    from dwc.backends.fast import FastExecutor
    monkeypatch.setenv("DWC_CACHE_DIR", str(tmp_path))
    for name, g in shipped.items():
        fast = FastExecutor(g)
        with np.errstate(over="ignore"):
            x = float_observations(g, 2000, 7)
            want = ref.act(g, x)
        got = np.stack([fast.act_one(o) for o in x])
        assert np.array_equal(got, want), name
        assert np.array_equal(fast.act(x[5]), want[5:6]) and np.array_equal(fast.act(x[5:6]), want[5:6])
        q = int_observations(g, 300, 7)
        assert all(np.array_equal(fast.actions_int(q[i:i + 1]), ref.actions_int(g, q[i:i + 1])) for i in range(300))
        bad = x[0].copy()
        bad[-1] = np.nan
        with pytest.raises(UserError, match="NaN observation"):
            fast.act_one(bad)


def test_export_c_command(shipped, tmp_path, capsys):
    """dwc export --c BUILD: the header and its report (sizes, speed, a check with 0 mismatches);
    a policy folder needs --out; a folder without graph.json is one line naming dwc compile."""
    from dwc.cli import main
    build = tmp_path / "build"
    build.mkdir()
    shipped["ip_qmlp"].save(build / "graph.json")
    assert main(["export", "--c", str(build), "--json"]) == 0
    import json
    r = json.loads(capsys.readouterr().out)
    assert (build / "dwc_policy.h").exists() and json.loads((build / "dwc_policy.json").read_text())["check"] == r["check"]
    assert r["check"]["mismatches"] == 0 and r["check"]["observations"] >= 20000
    assert all(r["speed"][k]["ns_per_action"] > 0 for k in ("scalar", "scalar_unrolled", "batch"))
    host = next(iter(r["sizes"].values()))
    assert host["code_bytes"] > 0 and host["table_bytes"] >= r["table_bytes"] > 0
    assert main(["export", "--c", str(POLICIES / "inverted-pendulum-v5-gates")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and "dwc compile" in err
    assert main(["export", "--c", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no graph.json" in err and "dwc compile" in err
    out = tmp_path / "src" / "ip-gates.h"
    assert main(["export", "--c", str(POLICIES / "inverted-pendulum-v5-gates"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ip_gates_act_f" in out.read_text() and "0 mismatches" in text
