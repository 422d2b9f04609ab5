"""Function-preserving optimisation passes over the IR.

Each pass takes a Graph and returns a new one computing the same integer function (observation
ints -> action ints) for every input; tests check that on random graphs. ``optimize`` runs them to
a fixed point and records the counts after each pass.

Signals are referred to per layer: layer 0 reads comparator bits, layer l reads layer l-1's LUT
outputs. A signal may be found constant (a comparator whose threshold is outside the observation
range, a LUT whose table ignores its inputs); constants are folded into their consumers' tables,
and constant bits of a popcount group are folded into that action's table.
"""
from __future__ import annotations

from dataclasses import replace

from dwc.ir.graph import LUT, Graph

Const = int  # 0 or 1 for a constant signal, None otherwise


# ------------------------------------------------------------------ truth-table algebra
def full(arity: int) -> int:
    return (1 << (1 << arity)) - 1


def cofactor(table: int, arity: int, k: int, value: int) -> int:
    """The table of arity-1 obtained by fixing input k to ``value``."""
    out = 0
    low = (1 << k) - 1
    for a in range(1 << (arity - 1)):
        src = (a & low) | (value << k) | ((a >> k) << (k + 1))
        out |= ((table >> src) & 1) << a
    return out


def permute(table: int, arity: int, order: list[int]) -> int:
    """Table for inputs reordered so new input i is old input ``order[i]``."""
    out = 0
    for a in range(1 << arity):
        src = 0
        for i, old in enumerate(order):
            src |= ((a >> i) & 1) << old
        out |= ((table >> src) & 1) << a
    return out


def lut_constant(lut: LUT) -> Const | None:
    if lut.table == 0:
        return 0
    if lut.table == full(lut.arity):
        return 1
    return None


def simplify_lut(lut: LUT, const_of) -> LUT:
    """Fold constant inputs, drop inputs the table ignores, merge repeated inputs, sort inputs."""
    inputs, table = list(lut.inputs), lut.table
    k = 0
    while k < len(inputs):
        c = const_of(inputs[k])
        n = len(inputs)
        if c is not None:
            table = cofactor(table, n, k, c)
            del inputs[k]
            continue
        lo, hi = cofactor(table, n, k, 0), cofactor(table, n, k, 1)
        if lo == hi:  # don't-care input
            table = lo
            del inputs[k]
            continue
        if inputs[k] in inputs[:k]:  # the same signal twice: only the diagonal is reachable
            first = inputs.index(inputs[k])
            diag = 0
            for a in range(1 << (n - 1)):
                src = (a & ((1 << k) - 1)) | ((a >> k) << (k + 1))
                src |= ((src >> first) & 1) << k
                diag |= ((table >> src) & 1) << a
            table = diag
            del inputs[k]
            k = 0  # an input may have become a don't-care
            continue
        k += 1
    order = sorted(range(len(inputs)), key=lambda i: inputs[i])
    return LUT([inputs[i] for i in order], permute(table, len(inputs), order))


# ------------------------------------------------------------------ passes
def fold_constants(g: Graph) -> Graph:
    """Constant comparators and LUTs are folded into consumers; constant popcount bits into the
    action tables. Also drops don't-care and repeated inputs (arity reduction) and sorts inputs."""
    comp_const = []
    for c in g.comparators:
        f = g.obs_formats[c.dim]
        comp_const.append(1 if c.threshold <= f.min_int else 0 if c.threshold > f.max_int else None)
    consts = comp_const
    layers = []
    for layer in g.layers:
        prev = consts
        new = [simplify_lut(lut, lambda i: prev[i]) for lut in layer]
        layers.append(new)
        consts = [lut_constant(l) for l in new]
    groups, tables, ones = [], list(g.action_tables), []
    for a, grp in enumerate(g.groups):
        ones.append(sum(1 for i in grp if consts[i] == 1))
        keep = [i for i in grp if consts[i] is None]
        groups.append(keep)
        if not g.linear:  # popcount p of the rest = p + ones in all
            tables[a] = tables[a][ones[a]:ones[a] + len(keep) + 1]
    linear = g.linear
    if linear and any(ones):  # the first linear layer's bias absorbs the constant ones instead
        first = linear[0]
        bias = [b + sum(w * k for w, k in zip(row, ones)) for b, row in zip(first.bias, first.weights)]
        linear = [replace(first, bias=bias)] + linear[1:]
    return replace(g, layers=layers, groups=groups, action_tables=tables, linear=linear)


def merge_duplicates(g: Graph) -> Graph:
    """LUTs of a layer with identical inputs and table become one; consumers are redirected
    (a popcount group may then count one signal twice, which is what it computed before)."""
    layers = [list(l) for l in g.layers]
    groups = g.groups
    for l, layer in enumerate(layers):
        seen: dict[tuple, int] = {}
        remap = []
        for lut in layer:
            key = (tuple(lut.inputs), lut.table)
            remap.append(seen.setdefault(key, len(seen)))
        layers[l] = [None] * len(seen)
        for j, lut in enumerate(layer):
            layers[l][remap[j]] = lut
        if l + 1 < len(layers):
            layers[l + 1] = [LUT([remap[i] for i in lut.inputs], lut.table) for lut in layers[l + 1]]
        else:
            groups = [[remap[i] for i in grp] for grp in groups]
    return replace(g, layers=layers, groups=groups)


def remove_dead_luts(g: Graph) -> Graph:
    """LUTs whose output reaches no popcount are removed, back to front."""
    layers = [list(l) for l in g.layers]
    groups = g.groups
    live = {i for grp in groups for i in grp}
    for l in range(len(layers) - 1, -1, -1):
        keep = sorted(live)
        index = {old: new for new, old in enumerate(keep)}
        if l + 1 < len(layers):
            layers[l + 1] = [LUT([index[i] for i in lut.inputs], lut.table) for lut in layers[l + 1]]
        else:
            groups = [[index[i] for i in grp] for grp in groups]
        layers[l] = [layers[l][i] for i in keep]
        live = {i for lut in layers[l] for i in lut.inputs}
    return replace(g, layers=layers, groups=groups)


def remove_unused_comparators(g: Graph) -> Graph:
    """Comparators no first-layer LUT reads are removed; identical ones (same dimension and
    integer threshold, e.g. two thresholds that quantise alike) become one."""
    if not g.layers:  # the popcount groups read the comparators directly (quantised MLP inputs)
        return _dedupe_group_comparators(g)
    used = sorted({i for lut in g.layers[0] for i in lut.inputs})
    first_of: dict[tuple, int] = {}
    keep, index = [], {}
    for i in used:
        key = (g.comparators[i].dim, g.comparators[i].threshold)
        if key not in first_of:
            first_of[key] = len(keep)
            keep.append(g.comparators[i])
        index[i] = first_of[key]
    first = [LUT([index[i] for i in lut.inputs], lut.table) for lut in g.layers[0]]
    return replace(g, comparators=keep, layers=[first] + g.layers[1:])


def _dedupe_group_comparators(g: Graph) -> Graph:
    """Without LUT layers: keep the comparators the groups count, one per (dim, threshold); a group
    then counts a merged comparator as often as it counted its copies, as before."""
    first_of: dict[tuple, int] = {}
    keep, index = [], {}
    for i in sorted({i for grp in g.groups for i in grp}):
        key = (g.comparators[i].dim, g.comparators[i].threshold)
        if key not in first_of:
            first_of[key] = len(keep)
            keep.append(g.comparators[i])
        index[i] = first_of[key]
    return replace(g, comparators=keep, groups=[[index[i] for i in grp] for grp in g.groups])


PASSES = [
    ("fold_constants", fold_constants),
    ("merge_duplicates", merge_duplicates),
    ("remove_dead_luts", remove_dead_luts),
    ("remove_unused_comparators", remove_unused_comparators),
]


def optimize(g: Graph, max_rounds: int = 10) -> tuple[Graph, list[dict]]:
    """Run every pass until nothing changes; the report has the counts before and after each pass.

    A layer left with no LUT keeps one constant LUT so the graph stays well-formed."""
    report = [{"pass": "input", "round": 0, **g.counts()}]
    for rnd in range(1, max_rounds + 1):
        before = g.to_dict()
        for name, p in PASSES:
            g = p(g)
            g = _keep_layers_nonempty(g)
            report.append({"pass": name, "round": rnd, **g.counts()})
        if g.to_dict() == before:
            break
    g.validate()
    return g, report


def _keep_layers_nonempty(g: Graph) -> Graph:
    if all(g.layers):
        return g
    layers = [l if l else [LUT([], 0)] for l in g.layers]
    return replace(g, layers=layers)
