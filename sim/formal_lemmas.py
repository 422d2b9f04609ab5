"""The lemmas of ``dwc verify --formal``'s reference proof (:mod:`dwc.sim.formal` runs them; its
docstring gives the argument): where the core and the reference are cut (:func:`stages`), and the
checker module that states one lemma (:func:`checker_verilog`)."""
from __future__ import annotations

from dataclasses import dataclass

from dwc.backends.reference_verilog import (code_bits, code_name, linear_sums, linear_widths, node_name,
                                            product_name, sum_name, sum_sizes)
from dwc.ir import Graph

MONOLITHIC = "contract, in one piece"


@dataclass(frozen=True)
class Point:
    """An internal net of the core and the reference's nets it must equal."""
    net: str  # in the flattened dwc_core
    spec: tuple[tuple[str, int], ...]  # the reference's nets (name, width), least significant first
    delay: int  # clock edges from the observation at the core's input to its value on this net
    # per reference net, the values it takes, proved with it: the largest (sums), or (lo, hi) of a signed value
    most: tuple[int | tuple[int, int] | None, ...] | None = None
    bits: int | None = None  # the core's width where it differs from the reference's (partial sums)
    signed: bool = False  # one reference net; both values two's complement, equal as integers (linear layers)

    @property
    def spec_width(self) -> int:
        return sum(w for _, w in self.spec)

    @property
    def width(self) -> int:
        """The core net's width; the reference's nets, zero-extended, are compared with it."""
        return self.bits or self.spec_width


@dataclass(frozen=True)
class Stage:
    """One lemma. ``asserted``: the core's nets it proves equal to the reference's stage, both reading
    ``inputs`` (the previous stage's nets, cut in both designs and driven by the same values; none:
    the observation) ``depth`` clock edges earlier. No asserted nets: the contract, from the cut
    ``inputs`` (the action tables' outputs) to the ports; ``whole``: the contract with nothing cut."""
    name: str
    asserted: tuple[Point, ...]
    inputs: tuple[Point, ...]
    depth: int
    whole: bool = False


def _bits(n: int) -> int:
    return max(1, n.bit_length())


def stages(g: Graph, ports: dict, nets: dict[str, int]) -> list[Stage]:
    """The lemmas for this core: its internal nets at the component boundaries, with the clock edge at
    which each holds the value of a given observation (from ``register_cuts``). Only nets present in the
    flattened core (``nets``: name -> width) with the reference's width (a partial sum: at least it) are
    used; a boundary without them is skipped (the lemma after it spans both), and an unrecognised
    pipeline layout gives the contract in one piece."""
    cuts, latency = ports.get("register_cuts", []), ports["latency_cycles"]
    aw = g.action_format.width
    groups: list[tuple[str, list[Point]]] = []
    # the input register (in the shared comparator bank: its digit-compare registers), if any
    d = int(ports.get("input_register", True))
    if g.comparators:
        cmp = [Point("comparators.bits", tuple((f"c{c}", 1) for c in range(len(g.comparators))), d)]
        groups.append(("comparators", _registered("comparators", "cmp_r", cmp, cuts, nets)))
    d += "comparators" in cuts
    for l, layer in enumerate(g.layers):
        out = [Point(f"layer{l}.out", tuple((f"l{l}_{j}", 1) for j in range(len(layer))), d)]
        groups.append((f"layer{l}", _registered(f"layer{l}", f"layer{l}_r", out, cuts, nets)))
        d += f"layer{l}" in cuts
    # the adder trees, level by level at their registers (each lemma a few small adders), after the
    # first-level counters where those are not registered themselves
    tree = [int(c.rsplit(" ", 1)[1]) for c in cuts if c.startswith("adder level")]
    chunk = ports.get("popcount_compressor")
    if chunk:
        if 1 not in tree:
            groups.append(("counters", _tree_points(g, chunk, nets, 1, d, "pop{a}.cnt{i}")))
        for k, c in enumerate(tree):
            groups.append((f"adder level {c}", _tree_points(g, chunk, nets, c, d + k + 1, f"pop{{a}}.l{c}_{{i}}")))
    d += len(tree)
    counts = [Point(f"pop{a}.count", ((f"p{a}", _bits(len(grp))),), d, (len(grp),)) for a, grp in enumerate(g.groups)]
    groups.append(("popcounts", _registered("popcounts", "pop_r", counts, cuts, nets)))
    d += "popcounts" in cuts
    for k in range(len(g.linear)):
        groups += _linear_groups(g, k, groups[-1][1], cuts, nets)
        d += f"linear{k}" in cuts
    groups.append(("action tables", [Point(f"table{a}.action", ((f"a{a}", aw),), d) for a in range(g.action_dim)]))
    whole = [Stage(MONOLITHIC, (), (), latency, whole=True)]
    if d + 1 != latency:
        return whole
    groups = [(n, pts, *ins) for n, pts, *ins in groups if pts and all(nets.get(p.net) == p.width for p in pts)]
    if not groups or groups[-1][0] != "action tables":
        return whole
    out, prev, proved = [], (), set()
    for name, pts, *ins in groups:
        inputs = tuple(ins[0]) if ins else prev  # default: the previous lemma's nets
        # sound only if every net a lemma cuts was proved by an earlier one (a skipped boundary's was not)
        if not proved.issuperset(inputs):
            return whole
        out.append(Stage(name, tuple(pts), inputs, pts[0].delay - (inputs[0].delay if inputs else 0)))
        prev = tuple(pts)
        proved.update(pts)
    return out + [Stage("contract", (), prev, latency - prev[0].delay)]


def _linear_groups(g: Graph, k: int, given: list[Point], cuts: list[str], nets: dict[str, int]) -> list[tuple]:
    """The lemmas of linear layer ``k``, whose inputs ``given`` (the popcounts or the previous layer's codes)
    are proved: ``(name, points, inputs)``. Each arithmetic neuron's products (the core's ``n<j>_t<i>``:
    the constant multiplies), then its partial sums level by level (``n<j>_s<n>``, one adder each, from
    the nets of the level before), then every neuron's code (table neurons: from ``given``) at the
    layer's output (its register, where it has one). The core computes each neuron at its own width, the
    reference at the layer's: compared as integers. Without those nets in the core, the layer is one lemma."""
    lin, width = g.linear[k], linear_widths(g)[k]
    d, up = given[0].delay, max(0, -lin.shift)  # a left shift is folded into the constants
    ranges = ([(0, len(grp)) for grp in g.groups] if k == 0 else
              [(g.linear[k - 1].lo, g.linear[k - 1].hi)] * len(lin.weights[0]))

    def pt(net: str, name: str, lo: int, hi: int) -> Point:
        """Each value with its range (the next lemma's inputs take only those: both sides sized for them)."""
        return Point(f"linear{k}.{net}", ((name, width),), d, ((lo, hi),), nets.get(f"linear{k}.{net}"), signed=True)
    products, levels, tops = [], [], []
    for j, row in enumerate(lin.weights):
        reads = [i for i, w in enumerate(row) if w]
        # a lookup table (or a constant) has no arithmetic to cut; a neuron nothing reads, no nets at all
        if f"linear{k}.n{j}_s0" not in nets:
            continue
        span = [(lin.bias[j] << up,) * 2] + [sorted((w << up) * x for x in ranges[i]) for i, w in enumerate(row) if w]
        # the leaves: the bias (a constant), the products (the core's n<j>_t<t>); a weight of 1 has none
        # in the core (the adder reads the layer's input itself, cut at ``given``: an input of every level)
        nodes: list[Point | None] = [None] + [pt(f"n{j}_t{t}", product_name(k, j, i), *span[t + 1])
                                              if row[i] << up != 1 else None for t, i in enumerate(reads)]
        products += [p for p in nodes if p is not None]
        leaves = len(nodes)
        alive = list(range(leaves))  # the nodes the next level adds (or carries): its inputs
        for c, level in enumerate(linear_sums(leaves)):
            if len(levels) <= c:
                levels.append(([], []))
            if not levels[c][1]:
                levels[c][1].extend(given)
            levels[c][1].extend(nodes[i] for i in alive if nodes[i] is not None)
            for a, b, n in level:
                span.append((span[a][0] + span[b][0], span[a][1] + span[b][1]))
                nodes.append(pt(f"n{j}_s{n - leaves}", sum_name(k, j, n - leaves), *span[n]))
                levels[c][0].append(nodes[-1])
            alive = [n for _, _, n in level] + alive[len(alive) - len(alive) % 2:]
        tops.append(nodes[-1])
    cw, signed = code_bits(lin.lo, lin.hi)
    code = _registered(f"linear{k}", f"linear{k}_r",
                       [Point(f"linear{k}.out", tuple((code_name(k, j), cw) for j in range(lin.outputs)), d,
                              ((lin.lo, lin.hi) if signed else lin.hi,) * lin.outputs)], cuts, nets)
    inner = products + [p for pts, _ in levels for p in pts]
    if not inner or any(p.net not in nets for p in inner):
        return [(f"linear{k}", code, given)]
    return ([(f"linear{k} products", products, given)]
            + [(f"linear{k} sums {c + 1}", pts, ins) for c, (pts, ins) in enumerate(levels)]
            + [(f"linear{k}", code, list(given) + [p for p in tops if p not in given])])


def _tree_points(g: Graph, chunk: int, nets: dict[str, int], level: int, delay: int, net: str) -> list[Point]:
    """The partial sums at ``level`` of every popcount's tree (:func:`sum_levels`; a finished tree's
    total at the levels past its own), as the core's nets ``net`` (``{a}``: the popcount, ``{i}``: the
    partial sum) and the reference's named partial sums; each at most its count of bits. The core's
    width is its own (adders one bit wider than their operands), at least the reference's."""
    out = []
    for a, grp in enumerate(g.groups):
        sizes = sum_sizes(len(grp), chunk)
        at = min(level, len(sizes))
        for i, n in enumerate(sizes[at - 1] if sizes else []):
            name, w = net.format(a=a, i=i), _bits(n)
            bits = nets.get(name, 0)
            out.append(Point(name, ((node_name(a, at, i), w),), delay, (n,), bits if bits > w else None))
    return out


def _registered(cut: str, reg: str, points: list[Point], cuts: list[str], nets: dict[str, int]) -> list[Point]:
    """A boundary's pipeline register ``reg`` (all of ``points``, packed least significant first) where
    the core has one, one clock edge after them: the next lemma's logic then reads the same cut nets in
    both designs, and what the two share merges (the LUTs: the same table and address)."""
    if cut not in cuts or nets.get(reg) != sum(p.width for p in points):
        return points
    mosts = sum((p.most or (None,) * len(p.spec) for p in points), ())
    return [Point(reg, sum((p.spec for p in points), ()), points[0].delay + 1,
                  mosts if any(m is not None for m in mosts) else None)]


def _delay_line(o: list[str], name: str, width: int, depth: int, reset: bool = False) -> None:
    """``<name>_1`` .. ``<name>_<depth>``: ``<name>_0`` one, two, ... clock edges old. ``reset``: cleared
    by ``rst`` as the core's pipeline registers are (the same whenever no reset came in between, which
    the lemmas assume), so a core register and its reference twin with the same input merge into one."""
    for k in range(1, depth + 1):
        o.append(f"  reg [{width - 1}:0] {name}_{k} = {width}'d0;")
        clear = f"rst ? {width}'d0 : " if reset else ""
        o.append(f"  always @(posedge clk) {name}_{k} <= {clear}{name}_{k - 1};")


def _slices(p: Point) -> list[tuple[int, int, int | None]]:
    """(lsb, width, most) of each reference net ``p`` stands for, in the core's net (one net: all of it)."""
    mosts = p.most or (None,) * len(p.spec)
    if len(p.spec) == 1:
        return [(0, p.width, mosts[0])]
    out, lsb = [], 0
    for (_, w), most in zip(p.spec, mosts):
        out.append((lsb, w, most))
        lsb += w
    return out


def _bounds(v: str, p: Point) -> list[str]:
    """``v`` (the core's net, or the checker's input standing for it) within each reference net's bounds."""
    out = []
    for lsb, w, most in _slices(p):
        part = f"{v}[{lsb + w - 1}:{lsb}]"
        if isinstance(most, tuple):
            # constants just wide enough: a comparison is as wide as its widest operand (64-bit ones made
            # the bounds of a 2 x 64 quantised MLP's partial sums 5,000 64-bit comparators, 2M clauses)
            lo, hi = (f"-{b.bit_length() + 2}'sd{-b}" if b < 0 else f"{b.bit_length() + 2}'sd{b}" for b in most)
            out.append(f"$signed({part}) >= {lo} && $signed({part}) <= {hi}")
        elif most is not None:
            out.append(f"{part} <= {w}'d{most}")
    return out


def _signed_cut(x: str, p: Point) -> str:
    """The reference's (signed) net driven from the core's value ``x``: sign-extended where the
    reference's net is wider; where it is narrower, its low bits (the lemma that proved ``p`` proved the
    value fits them; the checker assumes it of ``x``: :func:`_fits`)."""
    sw, w = p.spec_width, p.width
    return x if sw == w else f"{{{{{sw - w}{{{x}[{w - 1}]}}}}, {x}}}" if sw > w else f"{x}[{sw - 1}:0]"


def _fits(x: str, p: Point) -> list[str]:
    """Where the reference's signed net is narrower than the core's: the value fits it (proved with ``p``)."""
    narrower = p.signed and p.spec_width < p.width
    return [f"assume($signed({x}) == $signed({x}[{p.spec_width - 1}:0]));"] if narrower else []


def _reference_side(o: list[str], stage: Stage, ab: int) -> list[str]:
    """The reference in the checker (cut at the lemma's inputs, its outputs delayed by the lemma's
    depth) and the assertions on the core's nets; the contract in one piece: its action."""
    ins, depth = stage.inputs, stage.depth
    asserts = []
    # the reference's stage reads only its input nets; its observation input, cut off, is don't care
    rconns = [f".obs({'obs_1' if stage.whole else 'obs'})"]
    if stage.whole:
        o.append(f"  wire [{ab - 1}:0] ra_0;")
        rconns.append(".action(ra_0)")
    cut = {}  # a reference net that is an input of the lemma too (a finished sum): the input itself
    for i, p in enumerate(ins):
        lsb = 0
        for name, w in p.spec:
            cut[name] = _signed_cut(f"x{i}", p) if p.signed else f"x{i}[{lsb + w - 1}:{lsb}]"
            rconns.append(f".\\{name}.i ({cut[name]})")
            lsb += w
    for j, p in enumerate(stage.asserted):
        o.append(f"  wire [{p.spec_width - 1}:0] q{j}_0;  // the reference's {p.net}")
        lsb = 0
        for name, w in p.spec:
            if name in cut:
                o.append(f"  assign q{j}_0[{lsb + w - 1}:{lsb}] = {cut[name]};")
            else:
                rconns.append(f".{name}(q{j}_0[{lsb + w - 1}:{lsb}])")
            lsb += w
        _delay_line(o, f"q{j}", p.spec_width, depth, reset=True)
        guard = f"if (h{depth}) " if depth else ""
        asserts.append(f"{guard}assert($signed(r{j}) == $signed(q{j}_{depth}));" if p.signed else
                       f"{guard}assert(r{j} == q{j}_{depth});")
        asserts += [f"assert({c});" for c in _bounds(f"r{j}", p)]
    o.append(f"  dwc_ref spec({', '.join(rconns)});")
    return asserts


def checker_verilog(g: Graph, ports: dict, stage: Stage) -> str:
    """Module ``dwc_formal`` for one lemma: the core (``dwc_core``; the stage's nets exposed, its input
    nets cut and driven from the module's inputs ``x<i>``), the reference (``dwc_ref``, cut the same
    way and driven by the same values, its outputs delayed by ``depth`` clock edges: the reference is
    combinational, so that is its value on the inputs of ``depth`` edges earlier; both designs reading
    the same nets, the logic they share merges before the solver runs), and the assertions."""
    L = ports["latency_cycles"]
    ob = sum(f.width for f in g.obs_formats)
    ab = g.action_dim * g.action_format.width
    ins, depth = stage.inputs, stage.depth
    o = [f"// dwc verify --formal, lemma '{stage.name}' (dwc.sim.formal_lemmas.checker_verilog)",
         "module dwc_formal(clk, rst, valid_in, obs" + "".join(f", x{i}" for i in range(len(ins))) + ");",
         "  input clk, rst, valid_in;", f"  input [{ob - 1}:0] obs;"]
    for i, p in enumerate(ins):
        o.append(f"  input [{p.width - 1}:0] x{i};  // drives the core's {p.net} and the reference's same net")
    o += [f"  wire [{ab - 1}:0] action;", "  wire valid_out;"]
    conns = [".clk(clk)", ".rst(rst)", ".valid_in(valid_in)", ".obs(obs)", ".action(action)", ".valid_out(valid_out)"]
    conns += [f".\\{p.net}.i (x{i})" for i, p in enumerate(ins)]
    for j, p in enumerate(stage.asserted):
        o.append(f"  wire [{p.width - 1}:0] r{j};  // the core's {p.net}")
        conns.append(f".\\{p.net} (r{j})")
    o.append(f"  dwc_core core({', '.join(conns)});")
    for i, p in enumerate(ins):
        o.append(f"  wire [{p.width - 1}:0] x{i}_0 = x{i};")
        if not stage.asserted:
            _delay_line(o, f"x{i}", p.width, depth)
    if stage.whole:
        o.append(f"  wire [{ob - 1}:0] obs_0 = obs;")
        _delay_line(o, "obs", ob, 1)
    o.append("  // h<k>: the last k clock edges happened, with reset low at each")
    for k in range(1, max(depth, L) + 1):
        o.append(f"  reg h{k} = 1'b0;")
        o.append(f"  always @(posedge clk) h{k} <= !rst" + (f" && h{k - 1};" if k > 1 else ";"))
    asserts = _reference_side(o, stage, ab) if stage.asserted or stage.whole else []
    for i, p in enumerate(ins):  # proved by an earlier lemma
        asserts[:0] = [f"assume({c});" for c in _bounds(f"x{i}", p)] + _fits(f"x{i}", p)
    if not stage.asserted:  # the contract
        o.append("  // the handshake: valid_in, L clock edges later, cleared by reset")
        for k in range(1, L + 1):
            o.append(f"  reg v{k} = 1'b0;")
            o.append(f"  always @(posedge clk) v{k} <= !rst && {'valid_in' if k == 1 else f'v{k - 1}'};")
        if stage.whole:
            _delay_line(o, "ra", ab, L - 1)
            want = f"ra_{L - 1}"
        else:
            want = "{" + ", ".join(f"x{i}_{depth}" for i in reversed(range(len(ins)))) + "}"
        asserts += [f"assert(valid_out == v{L});", f"if (valid_out) assert(action == {want});"]
    o.append("  always @* begin")
    o += [f"    {a}" for a in asserts]
    o.append("  end")
    o.append("endmodule")
    return "\n".join(o) + "\n"
