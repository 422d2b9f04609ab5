"""Fast executor: the IR compiled to bit-sliced C at run time (256 samples per 4 x 64-bit word).

Every signal (comparator bit, LUT output) of a block of 256 samples is one vector of four uint64
(GCC/Clang vector extensions, so AVX2 where the machine has it). Each LUT becomes straight-line
code: its truth table is decomposed into a multiplexer tree over its inputs (Shannon expansion)
with constant, literal and XOR leaves folded and repeated sub-functions shared. The shared object
is built with the system C compiler (``-O2 -march=native``) and cached by the hash of the source, the
compiler and the CPU it was built for.

One observation at a time (``act_one``, what ``dwc eval --frozen`` calls every env step) takes the
scalar path of the C header instead (:mod:`dwc.backends.c_header`, built the same way): a 256-lane block
for one sample, and numpy's per-call overheads around it, cost tens of microseconds; the scalar
function is called through ctypes on preallocated buffers, and quantises in C.
Bit-exact with :mod:`dwc.ir.reference` (tested on random and trained graphs).
"""
from __future__ import annotations

import ctypes

import numpy as np

from dwc.backends.bitslice import CHUNK, LutCode
from dwc.core.cbuild import build
from dwc.ir.graph import Graph

LANES = 256  # samples per block

_HEADER = r"""
#include <stdint.h>
#include <string.h>
typedef uint64_t W __attribute__((vector_size(32)));
static const W Z = {0, 0, 0, 0};
static const W O = {~0ULL, ~0ULL, ~0ULL, ~0ULL};

#ifdef __AVX2__
#include <immintrin.h>
#endif

/* Bit s of the result = sample s's observation >= t, for 256 samples of one dimension. */
static inline W cmp(const int32_t *col, int32_t t) {
    uint64_t r[4] = {0, 0, 0, 0};
#ifdef __AVX2__
    const __m256i tv = _mm256_set1_epi32(t - 1);  /* x >= t  <=>  x > t - 1 (t > INT32_MIN here) */
    for (int c = 0; c < 32; c++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(col + 8 * c));
        uint64_t m = (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(x, tv)));
        r[c >> 3] |= m << (8 * (c & 7));
    }
#else
    for (int s = 0; s < 256; s++) r[s >> 6] |= (uint64_t)(col[s] >= t) << (s & 63);
#endif
    W v = {r[0], r[1], r[2], r[3]};
    return v;
}

/* Popcount of n signals per sample, bit-sliced: a ripple counter over bit planes. */
static inline void popcount(const W *bits, const int32_t *idx, int n, int planes, int32_t *out, int stride) {
    W p[32];
    for (int k = 0; k < planes; k++) p[k] = Z;
    for (int i = 0; i < n; i++) {
        W carry = bits[idx[i]];
        for (int k = 0; k < planes; k++) { W t = p[k] & carry; p[k] ^= carry; carry = t; }
    }
    for (int s = 0; s < 256; s++) {
        int32_t c = 0;
        for (int k = 0; k < planes; k++) c |= (int32_t)((p[k][s >> 6] >> (s & 63)) & 1) << k;
        out[s * stride] = c;
    }
}
"""


def c_source(g: Graph) -> str:
    out = [_HEADER, f"enum {{ D = {g.obs_dim}, A = {len(g.groups)}, C = {len(g.comparators)} }};"]  # A: popcounts
    # comparators: a table, evaluated in a loop (constants folded to all-0 / all-1 words)
    kind = [0 if c.threshold > 2 ** 31 - 1 else 1 if c.threshold <= -(2 ** 31) else 2 for c in g.comparators]
    out.append(f"static const int32_t CDIM[] = {{{','.join(str(c.dim) for c in g.comparators) or '0'}}};")
    out.append("static const int32_t CTHR[] = {" + (",".join(
        str(c.threshold if k == 2 else 0) for c, k in zip(g.comparators, kind)) or "0") + "};")
    out.append(f"static const int8_t CKIND[] = {{{','.join(map(str, kind)) or '0'}}};")
    out.append("static void comparators(const int32_t *cols, W *c) {\n"
               "  for (int i = 0; i < C; i++)\n"
               "    c[i] = CKIND[i] == 2 ? cmp(cols + 256 * CDIM[i], CTHR[i]) : CKIND[i] ? O : Z;\n}")
    calls = []
    for l, layer in enumerate(g.layers):
        for start in range(0, len(layer), CHUNK):
            fn = f"layer{l}_{start}"
            body = []
            for j in range(start, min(start + CHUNK, len(layer))):
                lut = layer[j]
                code = LutCode(f"t{j}")
                e = code.expr(lut.table, lut.arity, [f"in[{i}]" for i in lut.inputs])
                body += ["  " + line for line in code.lines] + [f"  out[{j}] = {e};"]
            out.append(f"static void {fn}(const W *in, W *out) {{\n" + "\n".join(body) + "\n}")
            calls.append(f"  {fn}({'c' if l == 0 else f's{l - 1}'}, s{l});")
    decls = [f"  W c[{max(1, len(g.comparators))}];"] + [f"  W s{l}[{len(layer)}];" for l, layer in enumerate(g.layers)]
    last = f"s{len(g.layers) - 1}" if g.layers else "c"  # no LUT layers: groups read the comparators
    pops = []
    for a, grp in enumerate(g.groups):
        pops.append(f"  {{ static const int32_t idx[] = {{{','.join(map(str, grp)) or '0'}}};")
        pops.append(f"    popcount({last}, idx, {len(grp)}, {max(1, len(grp).bit_length())}, pop + {a}, A); }}")
    out.append("/* cols: D columns of 256 int32 samples; pop: 256 x A int32 (one per group) */\n"
               "void block(const int32_t *cols, int32_t *pop) {\n" + "\n".join(
                   decls + ["  comparators(cols, c);"] + calls + pops) + "\n}")
    return "\n".join(out) + "\n"


SCALAR = "dwc_one"  # the C header's prefix inside the executor


UNROLLED_MAX_BYTES = 48_000  # about what x86-64 code of the unrolled LUTs may take and still run faster


def unrolled_bytes(g: Graph) -> int:
    """Roughly the x86-64 code of the header's unrolled LUTs (hopper-v5-dwc: 43 kB measured for 464 LUTs)."""
    return sum(16 + 13 * lut.arity for layer in g.layers for lut in layer)


def scalar_source(g: Graph) -> str:
    """The C header (:mod:`dwc.backends.c_header`) with its implementation: the batch-1 path. Unrolled
    (straight-line, fewer instructions) while that code stays small: the gate network's runs in half
    the time of the table-driven loops, but the published 2 x 1024 LUT6 size's (~190 kB) outgrows the
    instruction cache and runs 1.6x slower than them (A/B on the 2-core EPYC, -O2 -march=native)."""
    from dwc.backends.c_header import c_header
    unrolled = f"#define {SCALAR.upper()}_UNROLLED\n" if unrolled_bytes(g) <= UNROLLED_MAX_BYTES else ""
    return f"#define {SCALAR.upper()}_IMPLEMENTATION\n{unrolled}" + c_header(g, SCALAR)


class FastExecutor:
    """``FastExecutor(graph).popcounts(q)`` / ``.actions_int(q)`` / ``.act(obs)``, like the reference;
    ``.act_one(obs)`` for one observation (the scalar path)."""

    def __init__(self, g: Graph, cc: str = "cc"):
        if any(f.width > 32 for f in g.obs_formats):
            raise ValueError("the fast executor takes observations of at most 32 bits")
        self.graph = g
        self._lib = ctypes.CDLL(str(build(c_source(g), cc)))
        self._lib.block.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self._tables = [np.asarray(t, dtype=np.int64) for t in g.action_tables]
        self._cols = np.zeros((g.obs_dim, LANES), dtype=np.int32)
        self._pop = np.zeros((LANES, len(g.groups)), dtype=np.int32)
        try:
            one = ctypes.CDLL(str(build(scalar_source(g), cc)))
        except ValueError:  # a linear layer whose sums overflow 64 bits, or a 32+-bit action: blocks only
            one = None
        if one is not None:  # preallocated buffers, passed as ready-made pointers (no argtypes to convert)
            self._act_d, self._act_q = getattr(one, f"{SCALAR}_act_d"), getattr(one, f"{SCALAR}_act_q")
            self._act_d.restype, self._act_q.restype = ctypes.c_int, None
            self._obs1, self._act1 = np.zeros(g.obs_dim), np.zeros(g.action_dim)
            self._q1, self._actq1 = np.zeros(g.obs_dim, dtype=np.int32), np.zeros(g.action_dim, dtype=np.int32)
            self._args_d = (ctypes.c_void_p(self._obs1.ctypes.data), ctypes.c_void_p(self._act1.ctypes.data))
            self._args_q = (ctypes.c_void_p(self._q1.ctypes.data), ctypes.c_void_p(self._actq1.ctypes.data))
        self._one = one

    def act_one(self, obs: np.ndarray) -> np.ndarray:
        """One float observation (``D`` values) -> its float action (``A``), as :meth:`act` computes it."""
        if self._one is None:
            return self.act(np.reshape(obs, (1, -1)))[0]
        self._obs1[...] = obs
        if self._act_d(*self._args_d):  # nonzero: a NaN, refused as everywhere
            from dwc.ir.graph import check_observation
            check_observation(obs)
        return self._act1.copy()

    def popcounts(self, q: np.ndarray) -> np.ndarray:
        q = np.atleast_2d(q)
        n = q.shape[0]
        out = np.empty((n, len(self.graph.groups)), dtype=np.int64)
        cols, pop = self._cols, self._pop
        for base in range(0, n, LANES):
            m = min(LANES, n - base)
            cols[:, :m] = q[base:base + m].T
            self._lib.block(cols.ctypes.data, pop.ctypes.data)
            out[base:base + m] = pop[:m]
        return out

    def actions_int(self, q: np.ndarray) -> np.ndarray:
        q = np.atleast_2d(q)
        if q.shape[0] == 1 and self._one is not None:  # codes as int32, as the blocks take them
            self._q1[...] = q[0]
            self._act_q(*self._args_q)
            return self._actq1[None].astype(np.int64)
        return self.actions_int_blocks(q)

    def actions_int_blocks(self, q: np.ndarray) -> np.ndarray:
        """:meth:`actions_int` in blocks of 256, whatever the batch (batch 1's path before ``act_one``)."""
        from dwc.ir.reference import linear_layer
        idx = self.popcounts(q)
        for lin in self.graph.linear:  # a few small integer matmuls: numpy is fast enough
            idx = linear_layer(lin, idx)
        if self.graph.linear:
            idx = idx - self.graph.linear[-1].lo
        return np.stack([self._tables[a][idx[:, a]] for a in range(self.graph.action_dim)], axis=1)

    def act(self, obs: np.ndarray) -> np.ndarray:
        if self._one is not None and np.ndim(obs) <= 2 and np.size(obs) == self.graph.obs_dim:
            return self.act_one(obs)[None]
        return self.act_blocks(obs)

    def act_blocks(self, obs: np.ndarray) -> np.ndarray:
        """:meth:`act` in blocks of 256, whatever the batch."""
        from dwc.ir.reference import quantize_obs
        return self.graph.action_format.to_float(self.actions_int_blocks(quantize_obs(self.graph, obs)))
