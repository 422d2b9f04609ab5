"""C back end: the IR as one self-contained C99 header, for microcontrollers and CPUs.

``c_header(graph, name)`` returns the text of ``name.h``: an stb-style single header (declarations
always; the definitions where ``NAME_IMPLEMENTATION`` is defined, in one C file), needing only
``<stdint.h>``, no allocation and no floating-point arithmetic on the input side:

* ``NAME_act_f`` / ``NAME_act_d``: float / double observations -> float / double actions;
* ``NAME_act_q``: fixed-point observation codes -> fixed-point action codes;
* ``NAME_quantize_f`` / ``NAME_quantize_d``: the observation quantiser alone;
* with ``NAME_BATCH`` defined too: ``NAME_batch_q`` / ``_d`` / ``_f``, 64 observations per
  ``uint64_t`` word, bit-sliced (the LUT code comes from :mod:`dwc.backends.fast`'s generator).

Semantics are exactly :mod:`dwc.ir.reference`'s. The quantiser reads the IEEE 754 bits of the
float and rounds in integer arithmetic (ties to even, saturating, +-inf too), so it does not depend
on the floating-point environment (rounding mode, x87 excess precision, a missing FPU); a NaN makes
the call return 1 + its position and write nothing. The scalar path is table-driven, for small
flash: comparator thresholds sorted per dimension, LUT truth tables packed as bits (LUTs grouped by
arity: one word per table from 3 inputs up), indices and action tables in the narrowest integer
type. ``NAME_UNROLLED`` swaps the LUT and popcount loops for straight-line code with the truth tables
as immediates (fewer instructions, more code): the fast executor's batch-1 path uses it for circuits
small enough (:func:`dwc.backends.fast.scalar_source`).

This module writes the circuit's tables and code; the parts around it (the comment, declarations,
quantiser and entry points) are :mod:`dwc.backends.c_header_api`.
"""
from __future__ import annotations

import re

from dwc.backends import c_header_api as api
from dwc.backends.bitslice import CHUNK, LutCode
from dwc.ir.graph import LUT, Comparator, Graph

LANES = 64  # observations per batch word

_INT_TYPES = [("int8_t", 8), ("int16_t", 16), ("int32_t", 32), ("int64_t", 64)]


def int_type(values) -> str:
    """The narrowest signed C type holding every value."""
    lo, hi = min(values, default=0), max(values, default=0)
    for name, bits in _INT_TYPES:
        if -(1 << (bits - 1)) <= lo and hi < 1 << (bits - 1):
            return name
    raise ValueError(f"values {lo}..{hi} do not fit 64 bits")


def index_type(n: int) -> str:
    """The narrowest unsigned C type for indices (or offsets) up to ``n``."""
    return "uint8_t" if n < 1 << 8 else "uint16_t" if n < 1 << 16 else "uint32_t"


def _literal(v: int, ctype: str) -> str:
    if ctype == "int64_t" and not -(1 << 31) <= v < 1 << 31:
        return f"INT64_C({v})"
    if ctype == "uint64_t" and v >= 1 << 32:
        return f"UINT64_C(0x{v:x})"
    return str(v)


def table_type(arity: int) -> str | None:
    """The unsigned type holding one truth table of 2**arity bits exactly (arity 3..6), else None."""
    return f"uint{8 << (arity - 3)}_t" if arity >= 3 else None


def _array(ctype: str, name: str, values: list[int], per_line: int = 24) -> tuple[str, int]:
    """``static const`` array text and its size in bytes (C has no empty arrays: one 0 stands in)."""
    vals = list(values) or [0]
    items = [_literal(v, ctype) for v in vals]
    rows = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    size = {"int8_t": 1, "uint8_t": 1, "int16_t": 2, "uint16_t": 2, "int32_t": 4, "uint32_t": 4,
            "int64_t": 8, "uint64_t": 8}[ctype] * len(vals)
    return f"static const {ctype} {name}[{len(vals)}] = {{\n    " + ",\n    ".join(rows) + "\n};", size


def c_order(g: Graph) -> Graph:
    """The same function with comparators sorted by (dimension, threshold) and each layer's LUTs
    grouped by arity (every index remapped): one threshold list per dimension, one loop per arity."""
    order = sorted(range(len(g.comparators)), key=lambda c: (g.comparators[c].dim, g.comparators[c].threshold))
    comps = [Comparator(g.comparators[c].dim, g.comparators[c].threshold) for c in order]
    new = {old: i for i, old in enumerate(order)}
    layers = []
    for layer in g.layers:
        luts = [LUT([new[i] for i in lut.inputs], lut.table) for lut in layer]
        order = sorted(range(len(luts)), key=lambda j: luts[j].arity)
        layers.append([luts[j] for j in order])
        new = {old: i for i, old in enumerate(order)}
    groups = [[new[i] for i in grp] for grp in g.groups]
    out = Graph(g.obs_formats, comps, layers, groups, g.action_format, g.action_tables, g.meta, g.linear)
    out.validate()
    return out


def linear_plan(g: Graph) -> list[dict]:
    """Per linear layer: the accumulator type that no sum (partial ones and the rounding constant
    included) can overflow, from interval bounds on its inputs, and the weight and bias types."""
    lo_x = [0] * len(g.groups)
    hi_x = [len(grp) for grp in g.groups]
    plans = []
    for k, lin in enumerate(g.linear):
        if not (-(1 << 31) <= lin.lo and lin.hi < 1 << 31):
            raise ValueError(f"linear[{k}]: codes {lin.lo}..{lin.hi} do not fit int32")
        top, bottom = 0, 0  # bounds of every partial sum: the bias, then the terms in any order
        for row, b in zip(lin.weights, lin.bias):
            top = max(top, max(b, 0) + sum(max(0, w * a, w * z) for w, a, z in zip(row, lo_x, hi_x)))
            bottom = min(bottom, min(b, 0) + sum(min(0, w * a, w * z) for w, a, z in zip(row, lo_x, hi_x)))
        s = lin.shift
        if s > 0:  # the rounding constant (ties to even adds at most as much); the result floors
            top, bottom = top + (1 << (s - 1)), bottom
            out_top, out_bottom = top >> s, bottom >> s
        else:
            top, bottom = top << -s, bottom << -s
            out_top, out_bottom = top, bottom
        acc = "int32_t" if -(1 << 31) <= bottom and top < 1 << 31 and s <= 30 else "int64_t"
        if acc == "int64_t" and not (-(1 << 63) <= bottom and top < 1 << 63):
            raise ValueError(f"linear[{k}]: sums up to {max(top, -bottom)} overflow 64-bit integers")
        plans.append({"acc": acc, "weights": int_type([w for row in lin.weights for w in row]),
                      "bias": int_type(lin.bias),
                      "clamp_lo": lin.lo > out_bottom, "clamp_hi": lin.hi < out_top})  # a clamp that can act
        lo_x, hi_x = [lin.lo] * lin.outputs, [lin.hi] * lin.outputs
    return plans


class _Gen:
    def __init__(self, g: Graph, name: str):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"{name!r} is not a C identifier")
        if any(f.width > 32 for f in g.obs_formats) or g.action_format.width > 32:
            raise ValueError("the C back end takes fixed-point formats of at most 32 bits")
        self.g, self.p, self.u = c_order(g), name, name.upper()
        self.table_bytes = 0
        self.tables: list[str] = []
        self.ram = {}  # buffer -> bytes, the scalar path's working memory

    def array(self, ctype: str, name: str, values, guard: str = "") -> str:
        """A constant table; ``guard``: the preprocessor condition under which some code reads it (an
        unread static array is a warning)."""
        text, size = _array(ctype, f"{self.p}_{name}", list(values))
        self.tables.append(f"#if {guard}\n{text}\n#endif" if guard else text)
        self.table_bytes += size
        return f"{self.p}_{name}"

    # ------------------------------------------------------------------ tables
    def build_tables(self) -> None:
        g = self.g
        D, C = g.obs_dim, len(g.comparators)
        self.array("uint8_t", "obs_width", [f.width for f in g.obs_formats])
        self.array("int8_t", "obs_frac", [f.frac for f in g.obs_formats])
        starts = [0]
        for d in range(D):
            starts.append(starts[-1] + sum(1 for c in g.comparators if c.dim == d))
        self.thr_type = int_type([c.threshold for c in g.comparators])
        if C:  # an unused static array would be a warning
            self.array(index_type(C), "cmp_start", starts)
            self.array(self.thr_type, "cmp_thr", [c.threshold for c in g.comparators])
        self.segments = []  # per layer: [(arity, count, first LUT, input offset)]
        table_driven = f"!defined({self.u}_UNROLLED)"
        for l, layer in enumerate(g.layers):
            segs, inputs = [], []
            j = 0
            while j < len(layer):
                a = layer[j].arity
                n = sum(1 for lut in layer[j:] if lut.arity == a)
                luts = layer[j:j + n]
                if table_type(a):  # one word per truth table
                    self.array(table_type(a), f"l{l}_t{a}", [lut.table for lut in luts], table_driven)
                else:  # 1, 2 or 4 bits per table: packed into bytes
                    bits = [(lut.table >> i) & 1 for lut in luts for i in range(1 << a)]
                    self.array("uint8_t", f"l{l}_t{a}", [sum(b << k for k, b in enumerate(bits[i:i + 8]))
                                                         for i in range(0, len(bits), 8)], table_driven)
                segs.append((a, n, j, len(inputs)))
                inputs += [i for lut in luts for i in lut.inputs]
                j += n
            if inputs:
                self.array(index_type(g.layer_inputs(l) - 1), f"l{l}_in", inputs, table_driven)
            self.segments.append(segs)
        gstart = [0]
        for grp in g.groups:
            gstart.append(gstart[-1] + len(grp))
        loops = f"!defined({self.u}_UNROLLED) || defined({self.u}_BATCH)"
        self.array(index_type(gstart[-1]), "grp_start", gstart, loops)
        self.array(index_type(g.group_sources - 1), "grp_idx", [i for grp in g.groups for i in grp], loops)
        self.plans = linear_plan(g)
        for k, (lin, plan) in enumerate(zip(g.linear, self.plans)):
            self.array(plan["weights"], f"w{k}", [row[i] for i in range(len(lin.weights[0])) for row in lin.weights])
            self.array(plan["bias"], f"b{k}", lin.bias)
        astart = [0]
        for t in g.action_tables:
            astart.append(astart[-1] + len(t))
        self.array(index_type(astart[-1]), "act_start", astart)
        self.act_type = int_type([v for t in g.action_tables for v in t])
        self.array(self.act_type, "act_table", [v for t in g.action_tables for v in t])

    # ------------------------------------------------------------------ scalar code
    def core(self) -> str:
        """Comparators -> LUT layers -> popcounts, one observation, bits as bytes."""
        g, p = self.g, self.p
        D, C = g.obs_dim, len(g.comparators)
        L = []
        L.append(f"static void {p}_core(const int32_t *q, int32_t *act_q)\n{{")
        L.append(f"    uint8_t c[{max(C, 1)}];")
        self.ram["comparator bits"] = max(C, 1)
        for l, layer in enumerate(g.layers):
            L.append(f"    uint8_t s{l}[{len(layer)}];")
            self.ram[f"layer {l} bits"] = len(layer)
        L.append(f"    int32_t pc[{len(g.groups)}];")
        self.ram["popcounts"] = 4 * len(g.groups)
        if C:
            L.append(f"    for (int d = 0; d < {D}; d++) {{  /* thresholds sorted per dimension */\n"
                     f"        const int32_t v = q[d];\n"
                     f"        for (int j = {p}_cmp_start[d]; j < (int){p}_cmp_start[d + 1]; j++)\n"
                     f"            c[j] = (uint8_t)(v >= {p}_cmp_thr[j]);\n    }}")
        else:
            L.append("    (void)q;\n    c[0] = 0;")
        L.append(f"#ifndef {self.u}_UNROLLED")
        for l, segs in enumerate(self.segments):
            src = "c" if l == 0 else f"s{l - 1}"
            for a, n, j0, in_off in segs:
                addr = " | ".join(f"(unsigned){src}[i[{k}]]" + (f" << {k}" if k else "") for k in range(a)) or "0u"
                L.append(f"    for (int j = 0; j < {n}; j++) {{  /* {n} LUT{a} */")
                if a:
                    L.append(f"        const {self.in_type(l)} *i = {p}_l{l}_in + {in_off} + {a} * j;")
                if table_type(a):
                    L.append(f"        s{l}[{j0} + j] = (uint8_t)(({p}_l{l}_t{a}[j] >> ({addr})) & 1u);\n    }}")
                else:
                    L.append(f"        const unsigned t = ((unsigned)j << {a}) + ({addr});\n"
                             f"        s{l}[{j0} + j] = (uint8_t)(({p}_l{l}_t{a}[t >> 3] >> (t & 7u)) & 1u);\n    }}")
        last = f"s{len(g.layers) - 1}" if g.layers else "c"
        L.append(f"    for (int a = 0; a < {len(g.groups)}; a++) {{\n"
                 f"        int32_t n = 0;\n"
                 f"        for (int k = {p}_grp_start[a]; k < (int){p}_grp_start[a + 1]; k++) n += {last}[{p}_grp_idx[k]];\n"
                 f"        pc[a] = n;\n    }}")
        L.append(f"#else  /* {self.u}_UNROLLED: straight-line code, truth tables as immediates */")
        for l, layer in enumerate(g.layers):
            src = "c" if l == 0 else f"s{l - 1}"
            for j, lut in enumerate(layer):
                addr = " | ".join(f"{src}[{i}]" + (f" << {k}" if k else "") for k, i in enumerate(lut.inputs)) or "0"
                tt = {6: "UINT64_C(0x{:x})", 5: "UINT32_C(0x{:x})"}.get(lut.arity, "0x{:x}u").format(lut.table)
                L.append(f"    s{l}[{j}] = (uint8_t)(({tt} >> ({addr})) & 1u);")
        for a, grp in enumerate(g.groups):
            L.append(f"    pc[{a}] = " + (" + ".join(f"{last}[{i}]" for i in grp) or "0") + ";")
        L.append("#endif")
        L.append(f"    {p}_tail(pc, act_q);\n}}")
        return "\n".join(L)

    def in_type(self, l: int) -> str:
        return index_type(self.g.layer_inputs(l) - 1)

    def tail(self) -> str:
        """Popcounts -> linear layers -> action tables (shared by the scalar and the batch path)."""
        g, p = self.g, self.p
        L = [f"static void {p}_tail(const int32_t *pc, int32_t *act_q)\n{{"]
        x = "pc"
        for k, (lin, plan) in enumerate(zip(g.linear, self.plans)):
            acc, n_in, s = plan["acc"], len(lin.weights[0]), lin.shift
            bits = acc[3:5]
            O = lin.outputs
            L.append(f"    int32_t y{k}[{O}];\n    {acc} v{k}[{O}];")
            self.ram[f"linear {k} sums and codes"] = (4 + int(bits) // 8) * O
            # input by input over contiguous weight columns (vectorises), skipping zero inputs (ReLU codes)
            L.append(f"    for (int o = 0; o < {O}; o++) v{k}[o] = {p}_b{k}[o];\n"
                     f"    for (int i = 0; i < {n_in}; i++) {{\n"
                     f"        const {acc} xi = {x}[i];\n"
                     f"        if (xi == 0) continue;\n"
                     f"        for (int o = 0; o < {O}; o++) v{k}[o] += ({acc}){p}_w{k}[i * {O} + o] * xi;\n"
                     f"    }}\n"
                     f"    for (int o = 0; o < {O}; o++) {{\n"
                     f"        {acc} v = v{k}[o];")
            if s > 0:
                half = _literal(1 << (s - 1), "int64_t" if acc == "int64_t" else "int32_t")
                if lin.rounding == "half_even":  # one less added when the floor is even: ties go to even
                    L.append(f"        v = {p}_shr{bits}(v + ({half} - 1) + ({p}_shr{bits}(v, {s}) & 1), {s});")
                else:
                    L.append(f"        v = {p}_shr{bits}(v + {half}, {s});")
            elif s < 0:
                L.append(f"        v = v * {_literal(1 << -s, acc)};")
            if plan["clamp_lo"]:
                L.append(f"        if (v < {lin.lo}) v = {lin.lo};")
            if plan["clamp_hi"]:
                L.append(f"        if (v > {lin.hi}) v = {lin.hi};")
            L.append(f"        y{k}[o] = (int32_t)v;\n    }}")
            x = f"y{k}"
        lo = g.linear[-1].lo if g.linear else 0
        idx = f"{x}[a] - ({lo})" if lo else f"{x}[a]"
        L.append(f"    for (int a = 0; a < {g.action_dim}; a++) act_q[a] = {p}_act_table[{p}_act_start[a] + {idx}];\n}}")
        return "\n".join(L)

    def shr_helpers(self) -> str:
        out = []
        for bits in sorted({pl["acc"][3:5] for pl, lin in zip(self.plans, self.g.linear) if lin.shift > 0}):
            t = f"int{bits}_t"
            out.append(f"/* floor(v / 2**s), whatever the compiler does with >> on negative numbers */\n"
                       f"static {t} {self.p}_shr{bits}({t} v, int s) {{ return v >= 0 ? v >> s : -1 - ((-1 - v) >> s); }}")
        return "\n".join(out)

    # ------------------------------------------------------------------ batch code
    def batch(self) -> str:
        g, p = self.g, self.p
        D, C, A = g.obs_dim, len(g.comparators), len(g.groups)
        out, calls = [], []
        for l, layer in enumerate(g.layers):  # straight-line bit-sliced code, dwc.backends.fast's generator
            for start in range(0, len(layer), CHUNK):
                fn = f"{p}_b{l}_{start}"
                body = []
                for j in range(start, min(start + CHUNK, len(layer))):
                    lut = layer[j]
                    code = LutCode(f"t{j}", "uint64_t", "(uint64_t)0", "~(uint64_t)0")
                    e = code.expr(lut.table, lut.arity, [f"in[{i}]" for i in lut.inputs])
                    body += ["    " + line for line in code.lines] + [f"    out[{j}] = {e};"]
                unused = "" if any("in[" in b for b in body) else "    (void)in;\n"
                out.append(f"static void {fn}(const uint64_t *in, uint64_t *out)\n{{\n{unused}" + "\n".join(body) + "\n}")
                calls.append(f"    {fn}({'c' if l == 0 else f'w{l - 1}'}, w{l});")
        planes = max(1, max(len(grp) for grp in g.groups).bit_length())
        last = f"w{len(g.layers) - 1}" if g.layers else "c"
        decl = [f"    uint64_t c[{max(C, 1)}];"] + [f"    uint64_t w{l}[{len(layer)}];" for l, layer in enumerate(g.layers)]
        per_dim = max(sum(1 for c in g.comparators if c.dim == d) for d in range(D)) if C else 0
        # a dimension's comparator words are a thermometer: word r = the lanes whose count of thresholds
        # <= the value (binary search) is above r; bucket k = the lanes whose count is k
        cmp = (f"    for (int d = 0; d < {D}; d++) {{\n"
               f"        const {self.thr_type} *thr = {p}_cmp_thr + {p}_cmp_start[d];\n"
               f"        const int m = (int){p}_cmp_start[d + 1] - (int){p}_cmp_start[d];\n"
               f"        uint64_t bucket[{per_dim + 1}], w = 0;\n"
               f"        for (int k = 0; k <= m; k++) bucket[k] = 0;\n"
               f"        for (int s = 0; s < n; s++) {{\n"
               f"            const int32_t v = q[s * {D} + d];\n"
               f"            int k = 0, len = m;\n"
               f"            while (len > 0) {{\n"
               f"                const int half = len >> 1;\n"
               f"                if (thr[k + half] <= v) {{ k += half + 1; len -= half + 1; }} else len = half;\n"
               f"            }}\n"
               f"            bucket[k] |= (uint64_t)1 << s;\n"
               f"        }}\n"
               f"        for (int r = m - 1; r >= 0; r--) {{ w |= bucket[r + 1]; c[{p}_cmp_start[d] + r] = w; }}\n"
               f"    }}") if C else "    (void)q;\n    c[0] = 0;"
        out.append(
            f"/* n <= 64 observations (rows of q) -> n rows of act_q: lane s of every word is observation s */\n"
            f"static void {p}_bcore(const int32_t *q, int n, int32_t *act_q)\n{{\n" + "\n".join(decl) + "\n"
            f"    int32_t pc[64][{A}];\n"
            f"{cmp}\n" + "\n".join(calls) + "\n"
            f"    for (int a = 0; a < {A}; a++) {{  /* popcount: a ripple counter over bit planes */\n"
            f"        uint64_t pl[{planes}] = {{0}};\n"
            f"        for (int k = {p}_grp_start[a]; k < (int){p}_grp_start[a + 1]; k++) {{\n"
            f"            uint64_t carry = {last}[{p}_grp_idx[k]];\n"
            f"            for (int b = 0; b < {planes} && carry; b++) {{ const uint64_t t = pl[b] & carry; pl[b] ^= carry; carry = t; }}\n"
            f"        }}\n"
            f"        for (int s = 0; s < n; s++) {{\n"
            f"            int32_t v = 0;\n"
            f"            for (int b = 0; b < {planes}; b++) v |= (int32_t)((pl[b] >> s) & 1u) << b;\n"
            f"            pc[s][a] = v;\n        }}\n    }}\n"
            f"    for (int s = 0; s < n; s++) {p}_tail(pc[s], act_q + s * {g.action_dim});\n}}")
        return "\n\n".join(out)

    # ------------------------------------------------------------------ whole header
    def header(self) -> str:
        g, p, u = self.g, self.p, self.u
        self.build_tables()
        core, tail, batch = self.core(), self.tail(), self.batch()
        helpers = self.shr_helpers()
        parts = [api.doc_comment(g, p, u), api.declarations(g, p, u),
                 f"\n#ifdef {u}_IMPLEMENTATION\n#ifndef {u}_IMPLEMENTED\n#define {u}_IMPLEMENTED",
                 "\n\n".join(self.tables), helpers, tail, core, api.quantiser(p), api.entry(p, u),
                 api.float_api(g, p, u, "f"), f"#ifndef {u}_NO_DOUBLE", api.float_api(g, p, u, "d"), "#endif",
                 f"#ifdef {u}_BATCH", batch, api.batch_entry(g, p), api.float_batch(g, p, "f"),
                 f"#ifndef {u}_NO_DOUBLE", api.float_batch(g, p, "d"), "#endif", f"#endif /* {u}_BATCH */",
                 f"#endif\n#endif /* {u}_IMPLEMENTATION */"]
        return "\n\n".join(x for x in parts if x) + "\n"


def c_header(g: Graph, name: str = "dwc_policy") -> str:
    """The policy as a self-contained C99 header named ``name.h`` (functions ``name_act_f`` etc.)."""
    return _Gen(g, name).header()


def c_layout(g: Graph, name: str = "dwc_policy") -> dict:
    """What the header's scalar path stores and needs: table bytes (exact, from the arrays) and the
    working memory of one call (bytes of its buffers, before the compiler's own stack use)."""
    gen = _Gen(g, name)
    gen.header()
    return {"table_bytes": gen.table_bytes, "buffer_bytes": sum(gen.ram.values()), "buffers": gen.ram}
