"""The LUT-graph IR: a trained policy as an exact integer function, observation in, action out.

Every front end lowers into :class:`Graph`; every back end (executors, HDL) reads it. Semantics:

1. observation: ``D`` signed fixed-point integers ``q[d]`` (``width`` bits, ``frac`` fractional
   bits: real value ``q / 2**frac``); inputs outside the range saturate.
2. comparators: bit ``c`` = ``q[dim_c] >= threshold_c`` (the normaliser is folded into the
   integer threshold).
3. LUT layers: LUT ``j`` of layer ``l`` reads ``inputs[k]`` (indices into the comparator bits for
   layer 0, else into layer ``l-1``'s outputs) as address bit ``k`` and outputs bit
   ``(table >> address) & 1``. Arity 1..6 (``len(inputs)``), ``table`` < 2**(2**arity).
4. popcount groups: group ``a`` counts the ones among the last layer's bits ``groups[a]`` (the
   comparator bits when there are no LUT layers, e.g. a quantised MLP's input codes).
5. integer linear layers (optional, quantised MLPs): ``x`` = the popcounts; each layer computes
   ``y[j] = clamp(round_shift(sum_i weights[j][i] * x[i] + bias[j], shift), lo, hi)`` where
   ``round_shift(v, s) = floor((v + 2**(s-1)) / 2**s)`` for ``s > 0`` (round half up) and
   ``v * 2**-s`` otherwise; with ``rounding = "half_even"`` ties go to the even integer instead
   (ONNX QuantizeLinear's rounding, for imported models). The last layer's outputs are the codes.
6. action tables: ``actions.tables[a][i]`` is the action as a signed fixed-point integer of
   ``actions.width`` bits with ``actions.frac`` fractional bits, for ``i`` = the popcount of group
   ``a`` (no linear layers) or the code ``y[a] - lo`` of the last linear layer.

Serialised as JSON with ``schema_version``; :func:`Graph.from_json` validates everything and raises
:class:`IRError` naming the offending field.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

SCHEMA_VERSION = 1
MAX_ARITY = 6
ROUNDINGS = ("half_up", "half_even")


class IRError(ValueError):
    """A malformed IR: the message names the field."""


def check_observation(obs, where: str = "") -> None:
    """The one rule for non-finite observations, everywhere an observation meets a policy (float or
    frozen evaluation, the closed-loop benches, hardware in the loop): NaN is an error (it has no
    fixed-point code, and a NaN from the env means the simulation broke down); +-inf, like every value
    outside the format, saturates to the format's ends (:meth:`FixedFormat.quantize`)."""
    import numpy as np
    nan = np.isnan(np.asarray(obs, dtype=np.float64))
    if nan.any():
        from dwc.core.errors import UserError
        dims = sorted({int(d) for d in np.nonzero(nan)[-1]})
        raise UserError(f"NaN observation{' ' + where if where else ''} (dimension(s) {dims}): a NaN has no "
                        f"fixed-point code, so no policy or circuit can act on it; the env's simulation has "
                        f"broken down (an unstable state or action)")


@dataclass(frozen=True)
class FixedFormat:
    """Signed fixed point: ``width`` bits in all, ``frac`` of them after the binary point."""
    width: int
    frac: int

    @property
    def min_int(self) -> int:
        return -(1 << (self.width - 1))

    @property
    def max_int(self) -> int:
        return (1 << (self.width - 1)) - 1

    def quantize(self, x):
        """Round to nearest (ties to even) and saturate (+-inf too); works on numpy arrays and floats.
        NaN is refused (:func:`check_observation`)."""
        import numpy as np
        check_observation(x)
        return np.clip(np.rint(np.asarray(x, dtype=np.float64) * 2.0 ** self.frac), self.min_int,
                       self.max_int).astype(np.int64)

    def to_float(self, q):
        import numpy as np
        return np.asarray(q, dtype=np.float64) / 2.0 ** self.frac


@dataclass
class Comparator:
    dim: int
    threshold: int


@dataclass
class LUT:
    inputs: list[int]
    table: int  # bit a of ``table`` is the output at address a

    @property
    def arity(self) -> int:
        return len(self.inputs)


@dataclass
class Linear:
    """An integer linear layer with requantisation: see the module docstring, point 5."""
    weights: list[list[int]]  # (outputs, inputs)
    bias: list[int]
    shift: int
    lo: int
    hi: int
    rounding: str = "half_up"  # or "half_even" (ties to even)

    @property
    def outputs(self) -> int:
        return len(self.bias)


@dataclass
class Graph:
    obs_formats: list[FixedFormat]
    comparators: list[Comparator]
    layers: list[list[LUT]]
    groups: list[list[int]]
    action_format: FixedFormat
    action_tables: list[list[int]]
    meta: dict = field(default_factory=dict)  # provenance: env, policy, source run, notes
    linear: list[Linear] = field(default_factory=list)  # quantised MLPs; empty for LUT networks

    @property
    def obs_dim(self) -> int:
        return len(self.obs_formats)

    @property
    def action_dim(self) -> int:
        return self.linear[-1].outputs if self.linear else len(self.groups)

    def table_size(self, a: int) -> int:
        """Entries of action ``a``'s table: the popcount range, or the last linear layer's code range."""
        return self.linear[-1].hi - self.linear[-1].lo + 1 if self.linear else len(self.groups[a]) + 1

    @property
    def group_sources(self) -> int:
        """How many bits the popcount groups read from (the last LUT layer, or the comparators)."""
        return len(self.layers[-1]) if self.layers else len(self.comparators)

    def layer_inputs(self, l: int) -> int:
        """How many bits layer ``l`` reads from."""
        return len(self.comparators) if l == 0 else len(self.layers[l - 1])

    # ---------------------------------------------------------------- serialisation
    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "meta": self.meta,
            "observation": {"formats": [asdict(f) for f in self.obs_formats]},
            "comparators": [[c.dim, c.threshold] for c in self.comparators],
            "layers": [[{"inputs": l.inputs, "table": f"{l.table:x}"} for l in layer] for layer in self.layers],
            "groups": self.groups,
            **({"linear": [{k: v for k, v in asdict(l).items() if k != "rounding" or v != "half_up"}
                           for l in self.linear]} if self.linear else {}),
            "actions": {"format": asdict(self.action_format), "tables": self.action_tables},
        }

    def save(self, path: Path) -> None:
        from dwc.core.rundir import write_text
        write_text(path, json.dumps(self.to_dict(), separators=(",", ":")) + "\n")

    @classmethod
    def load(cls, path: Path) -> "Graph":
        try:
            d = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise IRError(f"{path}: no such file") from None
        except json.JSONDecodeError as e:
            raise IRError(f"{path}: not JSON ({e})") from None
        return cls.from_dict(d)

    @classmethod
    def from_dict(cls, d) -> "Graph":
        v = _Validator(d)
        g = v.graph()
        g.validate()
        return g

    def validate(self) -> None:
        """Check every index, size and format; raise IRError naming the first bad field."""
        if not self.obs_formats:
            raise IRError("observation.formats: empty")
        for i, f in enumerate(self.obs_formats):
            _check_format(f, f"observation.formats[{i}]")
        for i, c in enumerate(self.comparators):
            if not 0 <= c.dim < self.obs_dim:
                raise IRError(f"comparators[{i}].dim: {c.dim} outside 0..{self.obs_dim - 1}")
            f = self.obs_formats[c.dim]
            if not f.min_int <= c.threshold <= f.max_int + 1:
                raise IRError(f"comparators[{i}].threshold: {c.threshold} outside the {f.width}-bit range")
        if not self.layers and not self.linear:
            raise IRError("layers: empty (a graph needs LUT layers, linear layers, or both)")
        for l, layer in enumerate(self.layers):
            n_in = self.layer_inputs(l)
            if not layer:
                raise IRError(f"layers[{l}]: empty")
            for j, lut in enumerate(layer):
                where = f"layers[{l}][{j}]"
                if not 0 <= lut.arity <= MAX_ARITY:
                    raise IRError(f"{where}.inputs: arity {lut.arity} outside 0..{MAX_ARITY}")
                for k, i in enumerate(lut.inputs):
                    if not 0 <= i < n_in:
                        raise IRError(f"{where}.inputs[{k}]: {i} outside 0..{n_in - 1}")
                if not 0 <= lut.table < 1 << (1 << lut.arity):
                    raise IRError(f"{where}.table: more than 2**{lut.arity} bits")
        last = self.group_sources
        if not self.groups:
            raise IRError("groups: empty")
        for a, grp in enumerate(self.groups):
            for k, i in enumerate(grp):
                if not 0 <= i < last:
                    raise IRError(f"groups[{a}][{k}]: {i} outside 0..{last - 1}")
        n_in = len(self.groups)
        for k, lin in enumerate(self.linear):
            where = f"linear[{k}]"
            if not lin.bias:
                raise IRError(f"{where}.bias: empty")
            if len(lin.weights) != lin.outputs or any(len(row) != n_in for row in lin.weights):
                raise IRError(f"{where}.weights: expected {lin.outputs} rows of {n_in} integers")
            if not -62 <= lin.shift <= 62:
                raise IRError(f"{where}.shift: {lin.shift} outside -62..62")
            if lin.lo > lin.hi:
                raise IRError(f"{where}.lo: {lin.lo} above hi {lin.hi}")
            if lin.rounding not in ROUNDINGS:
                raise IRError(f"{where}.rounding: {lin.rounding!r} is not one of {', '.join(ROUNDINGS)}")
            n_in = lin.outputs
        _check_format(self.action_format, "actions.format")
        if len(self.action_tables) != self.action_dim:
            raise IRError(f"actions.tables: {len(self.action_tables)} tables for {self.action_dim} actions")
        for a, tab in enumerate(self.action_tables):
            if len(tab) != self.table_size(a):
                raise IRError(f"actions.tables[{a}]: {len(tab)} entries, the "
                              f"{'code' if self.linear else 'popcount'} range needs {self.table_size(a)}")
            for p, q in enumerate(tab):
                if not self.action_format.min_int <= q <= self.action_format.max_int:
                    raise IRError(f"actions.tables[{a}][{p}]: {q} outside the action format")

    def counts(self) -> dict:
        """Sizes for reports: LUTs per layer and per arity, comparators per dim, group sizes."""
        per_arity: dict[int, int] = {}
        for layer in self.layers:
            for lut in layer:
                per_arity[lut.arity] = per_arity.get(lut.arity, 0) + 1
        per_dim = [0] * self.obs_dim
        for c in self.comparators:
            per_dim[c.dim] += 1
        out = {"luts": sum(len(l) for l in self.layers), "luts_per_layer": [len(l) for l in self.layers],
               "luts_per_arity": {str(k): v for k, v in sorted(per_arity.items())},
               "comparators": len(self.comparators), "comparators_per_dim": per_dim,
               "popcount_sizes": [len(g) for g in self.groups]}
        if self.linear:
            out["linear_layers"] = [[l.outputs, len(l.weights[0])] for l in self.linear]
            out["weights_nonzero"] = sum(1 for l in self.linear for row in l.weights for w in row if w)
        return out


def _check_format(f: FixedFormat, where: str) -> None:
    if not 2 <= f.width <= 32:
        raise IRError(f"{where}.width: {f.width} outside 2..32")
    if not -64 <= f.frac <= 64:
        raise IRError(f"{where}.frac: {f.frac} outside -64..64")


class _Validator:
    """Turns parsed JSON into a Graph, naming the field of any type or shape error."""

    def __init__(self, d):
        self.d = d

    def _get(self, obj, key, typ, where):
        if not isinstance(obj, dict) or key not in obj:
            raise IRError(f"{where}{key}: missing")
        val = obj[key]
        if not isinstance(val, typ) or isinstance(val, bool):
            raise IRError(f"{where}{key}: expected {typ.__name__ if isinstance(typ, type) else typ}, "
                          f"got {type(val).__name__}")
        return val

    def _format(self, obj, where) -> FixedFormat:
        return FixedFormat(self._get(obj, "width", int, where + "."), self._get(obj, "frac", int, where + "."))

    def graph(self) -> Graph:
        d = self.d
        if not isinstance(d, dict):
            raise IRError("top level: expected an object")
        version = self._get(d, "schema_version", int, "")
        if version != SCHEMA_VERSION:
            raise IRError(f"schema_version: {version} is not supported (this dwc reads {SCHEMA_VERSION})")
        obs = self._get(d, "observation", dict, "")
        formats = [self._format(f, f"observation.formats[{i}]")
                   for i, f in enumerate(self._get(obs, "formats", list, "observation."))]
        comps = []
        for i, c in enumerate(self._get(d, "comparators", list, "")):
            if not (isinstance(c, list) and len(c) == 2 and all(isinstance(x, int) for x in c)):
                raise IRError(f"comparators[{i}]: expected [dim, threshold] integers")
            comps.append(Comparator(*c))
        layers = []
        for l, layer in enumerate(self._get(d, "layers", list, "")):
            if not isinstance(layer, list):
                raise IRError(f"layers[{l}]: expected a list of LUTs")
            luts = []
            for j, lut in enumerate(layer):
                where = f"layers[{l}][{j}]."
                inputs = self._get(lut, "inputs", list, where)
                if not all(isinstance(i, int) and not isinstance(i, bool) for i in inputs):
                    raise IRError(f"{where}inputs: expected integers")
                table = self._get(lut, "table", str, where)
                try:
                    luts.append(LUT(inputs, int(table, 16)))
                except ValueError:
                    raise IRError(f"{where}table: {table!r} is not hexadecimal") from None
            layers.append(luts)
        groups = self._get(d, "groups", list, "")
        for a, g in enumerate(groups):
            if not isinstance(g, list) or not all(isinstance(i, int) for i in g):
                raise IRError(f"groups[{a}]: expected a list of integers")
        acts = self._get(d, "actions", dict, "")
        tables = self._get(acts, "tables", list, "actions.")
        for a, t in enumerate(tables):
            if not isinstance(t, list) or not all(isinstance(q, int) for q in t):
                raise IRError(f"actions.tables[{a}]: expected a list of integers")
        meta = d.get("meta", {})
        if not isinstance(meta, dict):
            raise IRError("meta: expected an object")
        linear = []
        if not isinstance(d.get("linear", []), list):
            raise IRError("linear: expected a list of layers")
        for k, lin in enumerate(d.get("linear", [])):
            where = f"linear[{k}]."
            weights = self._get(lin, "weights", list, where)
            if not all(isinstance(r, list) and all(isinstance(w, int) and not isinstance(w, bool) for w in r)
                       for r in weights):
                raise IRError(f"{where}weights: expected lists of integers")
            bias = self._get(lin, "bias", list, where)
            if not all(isinstance(b, int) and not isinstance(b, bool) for b in bias):
                raise IRError(f"{where}bias: expected integers")
            linear.append(Linear(weights, bias, self._get(lin, "shift", int, where), self._get(lin, "lo", int, where),
                                 self._get(lin, "hi", int, where), lin.get("rounding", "half_up")))
        return Graph(formats, comps, layers, groups, self._format(acts.get("format"), "actions.format"), tables, meta,
                     linear)
