"""The IR as plain combinational Verilog: the independent specification ``dwc verify --formal``
proves the compiled core against.

Written straight from the IR's definition (:mod:`dwc.ir.graph`, the semantics of
:mod:`dwc.ir.reference`) and as simply as Verilog allows, sharing nothing with the hardware
generator in ``rtl/``: no pipeline, no clock, no leaf cells, no counters, no width tuning.

* observation field ``d``: ``obs[lsb +: width]`` sign-extended to a 64-bit signed integer ``q<d>``;
* comparator ``c``: ``assign c<c> = q<dim> >= threshold;`` (64-bit signed compare);
* LUT ``j`` of layer ``l``: its truth table as a constant, one bit selected by the address
  ``{input[arity-1], ..., input[0]}`` (address bit ``k`` = input ``k``);
* popcount of group ``a``: the sum of its bits, ``b3 + b17 + ...``; with ``chunk``, as named partial
  sums ``p<a>_s<level>_<i>`` (:func:`sum_levels`: runs of ``chunk`` bits, then pairs), each as wide as
  its count of bits, the cut points of the proof's adder lemmas;
* linear layer ``k`` (quantised MLPs): signed arithmetic wide enough for every value (at most 64 bits,
  as numpy's int64): ``acc = bias + sum w * x``, then the rounding shift (``>>>`` floors; a left shift
  folded into the constants: the same integers), then the clamp, then the code ``c<k>_<j>`` at the
  code's own width (the clamped value fits it; the next layer and the action tables extend it back).
  Each neuron's products ``m<k>_<j>_<i>`` and partial sums ``s<k>_<j>_<n>`` are named wires, added in
  adjacent pairs level by level (:func:`linear_sums`): the cut points of the proof's lemmas;
* action table ``a``: a case statement from its index (the popcount, or code - lo) to the action.

Ports are those of ``dwc_core`` without clock, reset and valid bits: ``obs`` in, ``action`` out,
packed the same way (``dwc_core.json``: field ``o<d>`` at its ``lsb``, action ``a`` at ``a * width``).
"""
from __future__ import annotations

from dwc.ir.graph import Graph, Linear

ZERO = "1'b0"
INT = 64  # the integer width of every arithmetic value: numpy's int64


def _int(v: int, width: int = INT) -> str:
    """A signed Verilog constant of ``width`` bits (default 64)."""
    return f"-{width}'sd{-v}" if v < 0 else f"{width}'sd{v}"


def _hex(v: int, width: int) -> str:
    """``v`` as a ``width``-bit two's-complement constant."""
    return f"{width}'h{v & ((1 << width) - 1):x}"


def _bits(n: int) -> int:
    """Bits of an unsigned value holding 0..n."""
    return max(1, n.bit_length())


def _round_shift(v: str, lin: Linear, width: int) -> str:
    """``round_shift(v, shift, rounding)`` of :mod:`dwc.ir.reference` on a signed expression, for a
    right shift (a left one is folded into the constants)."""
    s = lin.shift
    half, one = _int(1 << (s - 1), width), _int(1, width)
    if lin.rounding == "half_even":  # one less added when the floor is even
        return f"({v} + {half} - {one} + (({v} >>> {s}) & {one})) >>> {s}"
    return f"({v} + {half}) >>> {s}"


def _signed_bits(lo: int, hi: int) -> int:
    """Bits of a signed integer holding lo..hi."""
    return max(lo.bit_length(), hi.bit_length(), (-lo - 1).bit_length() if lo < 0 else 0) + 1


def _linear_width(lin: Linear, ranges: list[tuple[int, int]]) -> int:
    """One width for a linear layer's arithmetic that holds every value it can compute: the inputs, each
    product and partial sum (bounded by the sums of the products' extremes and the bias), the rounding
    constant added, the shifted value, and the clamp bounds. Up to 64 bits, as numpy's int64; a layer
    needing more is refused (numpy would wrap around where the reference does not)."""
    most = 1
    for row, b in zip(lin.weights, lin.bias):
        lo = hi = b
        for w, (xl, xh) in zip(row, ranges):
            lo, hi = lo + min(w * xl, w * xh), hi + max(w * xl, w * xh)
        # every partial sum (any subset of the products, with or without the bias) lies between the
        # sum of the negative and of the positive extremes
        neg = min(0, b) + sum(min(0, w * xl, w * xh) for w, (xl, xh) in zip(row, ranges))
        pos = max(0, b) + sum(max(0, w * xl, w * xh) for w, (xl, xh) in zip(row, ranges))
        lo, hi = min(lo, neg, 0, b), max(hi, pos, 0, b)
        if lin.shift > 0:
            hi += 1 << (lin.shift - 1)
        else:
            lo, hi = lo << -lin.shift, hi << -lin.shift
        most = max(most, _signed_bits(lo, hi))
    most = max([most, _signed_bits(lin.lo, lin.hi)] + [_signed_bits(xl, xh) for xl, xh in ranges])
    if most > INT:
        raise ValueError(f"a linear layer needs {most}-bit arithmetic; the IR's reference executor computes in 64")
    return most


def sum_levels(n: int, chunk: int) -> list[list[tuple[int, int]]]:
    """The bracketing of a sum of ``n`` terms in runs of ``chunk``, then adjacent pairs (an odd one out
    joins the next level as it is): per level (the runs first, the total last), each partial sum's
    children in the level before, ``(i, j)`` (a run: its terms ``i`` .. ``j - 1``; a carried one: ``(i, i)``).
    Every bracketing is the same integer."""
    if n == 0:
        return []
    levels = [[(i, min(i + chunk, n)) for i in range(0, n, chunk)]]
    while len(levels[-1]) > 1:
        m = len(levels[-1])
        levels.append([(i, i + 1) for i in range(0, m - 1, 2)] + ([(m - 1, m - 1)] if m % 2 else []))
    return levels


def sum_sizes(n: int, chunk: int) -> list[list[int]]:
    """The number of terms in each partial sum of :func:`sum_levels`."""
    sizes: list[list[int]] = []
    for k, level in enumerate(sum_levels(n, chunk)):
        sizes.append([j - i if k == 0 else sizes[-1][i] + (sizes[-1][j] if j != i else 0) for i, j in level])
    return sizes


def node_name(a: int, level: int, i: int) -> str:
    """The reference's wire of partial sum ``i`` at ``level`` (1-based: 1 = the runs) of popcount ``a``."""
    return f"p{a}_s{level}_{i}"
def reference_verilog(g: Graph, name: str = "dwc_ref", chunk: int | None = None) -> str:
    """Module ``name``: ``obs`` -> ``action``, combinational, exactly the IR's function.

    ``chunk``: each popcount's sum as named partial sums, runs of ``chunk`` bits, then pairs, the order
    a circuit's adder tree adds them in (the compiled core's first-level counter size, ``dwc_core.json``
    ``popcount_compressor``). The value is the same for every bracketing; a SAT solver, though, proves
    two sums equal quickly only when their partial sums match (a flat 85-bit sum against the core's
    tree takes minutes, the bracketed one a second), and the named partial sums let a proof cut the
    sum level by level."""
    obs_bits = sum(f.width for f in g.obs_formats)
    aw = g.action_format.width
    out = [f"// {name}: the policy's IR as plain combinational Verilog (dwc.backends.reference_verilog), the",
           "// specification dwc verify --formal proves the compiled core against.",
           f"module {name}(obs, action);",
           f"  input [{obs_bits - 1}:0] obs;",
           f"  output [{g.action_dim * aw - 1}:0] action;",
           "  // observation: signed fixed-point fields, sign-extended to 64-bit integers"]
    bits = _comparators(out, g)
    bits = _lut_layers(out, g, bits)
    x = _popcounts(out, g, bits, chunk)
    x, width = _linear_layers(out, g, x)
    _action_tables(out, g, x, width)
    out.append(f"  assign action = {{{', '.join(f'a{a}' for a in reversed(range(g.action_dim)))}}};")
    out.append("endmodule")
    return "\n".join(out) + "\n"


def _comparators(out: list[str], g: Graph) -> list[str]:
    """The observation's fields as integers and the comparators on them; the comparator bits' names."""
    lsb = 0
    for d, f in enumerate(g.obs_formats):  # one bit wider than the field: every threshold fits
        out.append(f"  wire signed [{f.width}:0] q{d} = $signed(obs[{lsb + f.width - 1}:{lsb}]);")
        lsb += f.width
    out.append("  // comparators: bit c = q[dim] >= threshold (signed)")
    for c, comp in enumerate(g.comparators):
        out.append(f"  wire c{c} = q{comp.dim} >= {_int(comp.threshold, g.obs_formats[comp.dim].width + 1)};")
    return [f"c{c}" for c in range(len(g.comparators))]


def _lut_layers(out: list[str], g: Graph, bits: list[str]) -> list[str]:
    """Each LUT layer reading the one before (the first: the comparator bits); the last one's bit names."""
    for l, layer in enumerate(g.layers):
        out.append(f"  // LUT layer {l}: output = table[address], address bit k = input k")
        names = []
        for j, lut in enumerate(layer):
            n = f"l{l}_{j}"
            if lut.arity == 0:
                out.append(f"  wire {n} = 1'b{lut.table & 1};")
            else:
                size = 1 << lut.arity
                addr = ", ".join(bits[i] for i in reversed(lut.inputs))
                out.append(f"  wire [{size - 1}:0] {n}_t = {size}'h{lut.table:x};")
                out.append(f"  wire {n} = {n}_t[{{{addr}}}];")
            names.append(n)
        bits = names
    return bits


def _popcounts(out: list[str], g: Graph, bits: list[str], chunk: int | None) -> list[str]:
    out.append("  // popcounts: the number of ones among each group's bits" +
               (f", as named partial sums (runs of {chunk}, then pairs)" if chunk else ""))
    for a, grp in enumerate(g.groups):
        terms = [bits[i] for i in grp]
        if not chunk or not terms:
            out.append(f"  wire [{_bits(len(grp)) - 1}:0] p{a} = {' + '.join(terms) or ZERO};")
            continue
        sizes = sum_sizes(len(terms), chunk)
        for k, level in enumerate(sum_levels(len(terms), chunk)):
            for i, ((lo, hi), n) in enumerate(zip(level, sizes[k])):
                if k == 0:
                    value = " + ".join(terms[lo:hi])
                else:  # every partial sum as wide as its count of terms: no carry is lost
                    value = " + ".join(node_name(a, k, c) for c in sorted({lo, hi}))
                out.append(f"  wire [{_bits(n) - 1}:0] {node_name(a, k + 1, i)} = {value};")
        out.append(f"  wire [{_bits(len(grp)) - 1}:0] p{a} = {node_name(a, len(sizes), 0)};")
    return [f"p{a}" for a in range(len(g.groups))]


def linear_sums(n: int) -> list[list[tuple[int, int, int]]]:
    """The bracketing of a neuron's sum of ``n`` leaves (the bias, then the products): adjacent pairs,
    level by level, an odd one out carried to the next level as it is. Per level, each sum as ``(a, b, s)``:
    nodes ``a`` + ``b`` make node ``s`` (leaves are nodes ``0 .. n - 1``, sums ``n, n + 1, ...`` in the order
    made). Every bracketing is the same integer; this one is a balanced tree's."""
    levels, nodes, made = [], list(range(n)), n
    while len(nodes) > 1:
        level = [(a, b, made + i) for i, (a, b) in enumerate(zip(nodes[::2], nodes[1::2]))]
        made += len(level)
        levels.append(level)
        nodes = [s for _, _, s in level] + nodes[len(nodes) - len(nodes) % 2:]
    return levels


def product_name(k: int, j: int, i: int) -> str:
    """The reference's wire of weight ``i`` times input ``i`` of neuron ``j`` in linear layer ``k``."""
    return f"m{k}_{j}_{i}"


def sum_name(k: int, j: int, n: int) -> str:
    """The reference's wire of the ``n``-th partial sum (0-based, :func:`linear_sums` order) of neuron ``j``."""
    return f"s{k}_{j}_{n}"


def code_name(k: int, j: int) -> str:
    """The reference's wire of neuron ``j``'s output code in linear layer ``k``, at the code's width."""
    return f"c{k}_{j}"


def code_bits(lo: int, hi: int) -> tuple[int, bool]:
    """(width, signed) of the narrowest two's-complement code holding ``lo .. hi``."""
    return (max(1, hi.bit_length()), False) if lo >= 0 else (_signed_bits(lo, hi), True)


def linear_widths(g: Graph) -> list[int]:
    """The arithmetic width of each linear layer (:func:`_linear_width`)."""
    ranges, out = [(0, len(grp)) for grp in g.groups], []  # the values each input of the next layer takes
    for lin in g.linear:
        out.append(_linear_width(lin, ranges))
        ranges = [(lin.lo, lin.hi)] * lin.outputs
    return out


def _linear_layers(out: list[str], g: Graph, x: list[str]) -> tuple[list[str], int]:
    """A quantised MLP's layers on the popcounts; the last one's output codes and arithmetic width."""
    width = INT
    for k, (lin, width) in enumerate(zip(g.linear, linear_widths(g))):
        up = max(0, -lin.shift)  # a left shift: the constants times 2^up (the same integers)
        out.append(f"  // linear layer {k}: y = clamp(round_shift(W x + b, {lin.shift}), {lin.lo}, {lin.hi}) in "
                   f"{width}-bit signed arithmetic, which holds every value it computes")
        xs = []
        for i, v in enumerate(x):  # every operand signed, so the arithmetic is signed (a code extends)
            xs.append(f"x{k}_{i}")
            out.append(f"  wire signed [{width - 1}:0] x{k}_{i} = {v};")
        cw, signed = code_bits(lin.lo, lin.hi)
        y = []
        for j in range(lin.outputs):
            nodes = [_int(lin.bias[j] << up, width)]
            for i, w in enumerate(lin.weights[j]):
                if w:
                    nodes.append(product_name(k, j, i))
                    out.append(f"  wire signed [{width - 1}:0] {nodes[-1]} = {_int(w << up, width)} * {xs[i]};")
            leaves = len(nodes)
            for level in linear_sums(leaves):
                for a, b, n in level:  # node n is nodes[n]: made in order
                    out.append(f"  wire signed [{width - 1}:0] {sum_name(k, j, n - leaves)} = {nodes[a]} + {nodes[b]};")
                    nodes.append(sum_name(k, j, n - leaves))
            acc, r = f"acc{k}_{j}", f"r{k}_{j}"
            out.append(f"  wire signed [{width - 1}:0] {acc} = {nodes[-1]};")
            out.append(f"  wire signed [{width - 1}:0] {r} = "
                       f"{_round_shift(acc, lin, width) if lin.shift > 0 else acc};")
            lo, hi = _int(lin.lo, width), _int(lin.hi, width)
            out.append(f"  wire signed [{width - 1}:0] y{k}_{j} = {r} < {lo} ? {lo} : {r} > {hi} ? {hi} : {r};")
            y.append(code_name(k, j))
            out.append(f"  wire {'signed ' if signed else ''}[{cw - 1}:0] {y[-1]} = y{k}_{j}[{cw - 1}:0];")
        x = y
    return x, width


def _action_tables(out: list[str], g: Graph, x: list[str], width: int) -> None:
    """A case statement per action from its index (the popcount, or the last layer's code - lo)."""
    aw = g.action_format.width
    out.append("  // action tables: index -> fixed-point action")
    for a, table in enumerate(g.action_tables):
        if g.linear:
            index = f"i{a}"
            out.append(f"  wire signed [{width - 1}:0] {index} = {x[a]} - {_int(g.linear[-1].lo, width)};")
        else:
            index, width = x[a], _bits(len(g.groups[a]))
        out.append(f"  reg [{aw - 1}:0] a{a};")
        out.append("  always @* begin")
        out.append(f"    case ({index})")
        for i, v in enumerate(table):
            out.append(f"      {width}'d{i}: a{a} = {_hex(v, aw)};")
        out.append(f"      default: a{a} = {aw}'d0;  // no such index")
        out.append("    endcase")
        out.append("  end")
