"""Freeze: a trained DWC actor (PyTorch, eval mode) -> the integer IR, bit-exact by construction.

- Observation formats: ``width`` bits (default 16) per dimension, the integer part sized so every
  threshold the circuit can read (mu +- 10 sigma of the training observations) is representable;
  saturation beyond it cannot change any comparison.
- Comparator thresholds: the smallest integer q for which the PyTorch model's own float32
  arithmetic (normalise, clip, compare) gives 1 at q / 2**frac, found by binary search over the
  whole integer range. The comparison is monotone in q, so ``q >= T`` reproduces the model exactly
  on every representable observation, rounding included.
- Action tables: for every popcount value the model's own head (affine, tanh, bounds) evaluated in
  float32, rounded to the action format.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from dwc.core.defaults import ACT_WIDTH, OBS_WIDTH
from dwc.models.actors import DWCActor
from dwc.models.encoding import CLIP
from dwc.ir.graph import LUT, Comparator, FixedFormat, Graph, Linear


def obs_formats(actor: DWCActor, width: int = OBS_WIDTH, frac: list[int] | None = None) -> list[FixedFormat]:
    """Per dimension: ``width`` bits, fractional bits from the training statistics unless ``frac``
    overrides them (any format stays bit-exact; a coarse one only saturates more thresholds)."""
    if frac is not None:
        return [FixedFormat(width, f) for f in frac]
    mean = actor.normalizer.mean.double()
    std = torch.sqrt(actor.normalizer.var + actor.normalizer.eps).double()
    reach = torch.maximum((mean - CLIP * std).abs(), (mean + CLIP * std).abs())
    formats = []
    for r in reach.tolist():
        int_bits = max(0, math.floor(math.log2(r)) + 1) if r > 0 else 0  # |x| < 2**int_bits
        formats.append(FixedFormat(width, width - 1 - int_bits))
    return formats


@torch.no_grad()
def integer_thresholds(actor: DWCActor, formats: list[FixedFormat]) -> np.ndarray:
    """(D, B) smallest integer observation whose thermometer bit m is 1 (max_int + 1 if none)."""
    dims, bits = actor.encoder.dim, actor.encoder.bits
    lo = torch.tensor([[f.min_int] * bits for f in formats], dtype=torch.int64)
    hi = torch.tensor([[f.max_int + 1] * bits for f in formats], dtype=torch.int64)
    scale = torch.tensor([2.0 ** -f.frac for f in formats], dtype=torch.float64).view(dims, 1)
    m = torch.arange(bits)
    while bool((lo < hi).any()):
        mid = (lo + hi) // 2
        # (bits, D) batch: row m holds each dimension's candidate for threshold m
        x = (mid.double() * scale).t().float()
        on = actor.encoder(actor.normalizer(x)).view(bits, dims, bits)[m, :, m].t().bool()
        active = lo < hi
        hi = torch.where(active & on, mid, hi)
        lo = torch.where(active & ~on, mid + 1, lo)
    return lo.numpy()


def action_format(actor: DWCActor, width: int = ACT_WIDTH) -> FixedFormat:
    reach = float(torch.maximum((actor.action_bias - actor.action_scale).abs(),
                                (actor.action_bias + actor.action_scale).abs()).max())
    int_bits = max(0, math.floor(math.log2(reach)) + 1) if reach > 0 else 0
    return FixedFormat(width, width - 1 - int_bits)


@torch.no_grad()
def action_tables(actor: DWCActor, fmt: FixedFormat) -> list[list[int]]:
    """tables[a][p] = the model's action a when its group holds p ones, in fixed point."""
    head = actor.head
    size = head.group
    p = torch.arange(size + 1)
    bits = (torch.arange(size).view(1, size) < p.view(-1, 1)).float()  # row p: p ones
    bits = bits.repeat(1, head.actions)  # every group gets p ones
    acts = actor.squash(head(bits))  # (size+1, A) float32, the model's own arithmetic
    return [fmt.quantize(acts[:, a].numpy()).tolist() for a in range(head.actions)]


def freeze(actor: DWCActor, obs_width: int = OBS_WIDTH, act_width: int = ACT_WIDTH, meta: dict | None = None,
           obs_frac: list[int] | None = None) -> Graph:
    if not isinstance(actor, DWCActor):
        raise TypeError(f"freeze needs a DWC actor, got {type(actor).__name__}")
    actor = actor.cpu().eval()
    formats = obs_formats(actor, obs_width, obs_frac)
    thresholds = integer_thresholds(actor, formats)
    bits = actor.encoder.bits
    comparators = [Comparator(d, int(thresholds[d, m])) for d in range(actor.encoder.dim) for m in range(bits)]
    layers = []
    for layer in actor.luts:
        idx = layer.wiring_indices().tolist()
        on = layer.truth_tables().numpy()
        tables = [sum(1 << int(a) for a in np.flatnonzero(row)) for row in on]
        layers.append([LUT(list(map(int, i)), t) for i, t in zip(idx, tables)])
    g_size = actor.head.group
    groups = [list(range(a * g_size, (a + 1) * g_size)) for a in range(actor.head.actions)]
    afmt = action_format(actor, act_width)
    graph = Graph(formats, comparators, layers, groups, afmt, action_tables(actor, afmt), dict(meta or {}))
    graph.meta.setdefault("thermometer_bits", bits)
    graph.validate()
    return graph


@torch.no_grad()
def freeze_qmlp(actor, obs_width: int = OBS_WIDTH, act_width: int = ACT_WIDTH, meta: dict | None = None,
                obs_frac: list[int] | None = None) -> Graph:
    """A quantised MLP actor (eval mode) -> comparators (its thermometer) -> one popcount per dim (the
    input codes) -> integer linear layers -> action tables; bit-exact by construction."""
    from dwc.models.actors import QMLPActor
    if not isinstance(actor, QMLPActor):
        raise TypeError(f"freeze_qmlp needs a QMLP actor, got {type(actor).__name__}")
    actor = actor.cpu().eval()
    formats = obs_formats(actor, obs_width, obs_frac)
    thresholds = integer_thresholds(actor, formats)
    dims, bits = actor.encoder.dim, actor.encoder.bits
    comparators = [Comparator(d, int(thresholds[d, m])) for d in range(dims) for m in range(bits)]
    groups = [list(range(d * bits, (d + 1) * bits)) for d in range(dims)]
    linear, in_exp = [], 0
    for k, layer in enumerate([*actor.net.hidden, actor.net.out]):
        w, we = layer.int_weights()
        w, b = w.double(), layer.int_bias(we + in_exp).double()  # the model's own rounding
        if k == 0:  # the model's codes are popcount - B // 2; the IR feeds the raw popcounts
            b = b - w.sum(dim=1) * (bits // 2)
        lo, hi = layer.out_range
        linear.append(Linear([[int(v) for v in row] for row in w.tolist()], [int(v) for v in b.tolist()],
                             layer.shift(in_exp), lo, hi))
        in_exp = layer.out_exp()
    afmt = action_format(actor, act_width)
    lo, hi = actor.net.out.out_range
    codes = torch.arange(lo, hi + 1, dtype=torch.float64)
    mean = (codes * 2.0 ** in_exp).float().view(-1, 1).repeat(1, actor.action_scale.numel())
    acts = actor.squash(mean)  # the model's own float32 head, code by code
    tables = [afmt.quantize(acts[:, a].numpy()).tolist() for a in range(acts.shape[1])]
    graph = Graph(formats, comparators, [], groups, afmt, tables, dict(meta or {}), linear)
    graph.meta.setdefault("thermometer_bits", bits)
    graph.validate()
    return graph


def untrained_graph(obs_dim: int, act_dim: int, config=None, seed: int = 0, env: str | None = None) -> Graph:
    """The frozen, optimised graph of an untrained DWC (published size unless ``config`` says otherwise):
    what benchmarks use where cost depends on the circuit's shape, not on what it learned. The
    normaliser sees standard-normal observations so the thresholds spread as after training."""
    import torch

    from dwc.models import ActorConfig, build_actor
    from dwc.ir.passes import optimize
    torch.manual_seed(seed)
    actor = build_actor(config or ActorConfig(), obs_dim, act_dim, [-1.0] * act_dim, [1.0] * act_dim)
    actor.normalizer.update(torch.randn(1000, obs_dim, dtype=torch.float64))
    graph, _ = optimize(freeze(actor.eval(), meta={"env": env, "policy": "dwc", "untrained": True}))
    return graph
