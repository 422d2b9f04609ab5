"""A learnable wiring's autograd functions and gradients: each LUT input slot reads the ``argmax`` of a
column of candidate scores (:class:`LearnableWiring`); its scores get ``g * (2x - 1)``
(:func:`wiring_score_grad`) and the source bits get ``g`` spread by ``softmax(w / tau)``.
:class:`NativeWiredLookup` does the wiring and the LUT lookup in one step in the native CPU kernels.
Also the balanced random wiring of ``wiring="random"``."""
from __future__ import annotations

import math

import torch

from dwc.models import native
from dwc.models.lut_efd import EFD_BETA, efd_alpha


def thermometer_wiring_grad(g: torch.Tensor, x: torch.Tensor, bits: int, batched: bool | None = None) -> torch.Tensor:
    """``(2x - 1) @ g.T`` for x made of thermometer codes (groups of ``bits`` bits, bit m set iff the
    group's level > m), in O(S*B*D) instead of O(S*B*D*bits): histogram g by level, then a reverse
    cumulative sum gives, for every threshold, the sum of g over samples whose bit is set.

    ``batched`` (default: on CUDA) does it in a few large kernels (one-hot product, cumsum), which
    suits a GPU; the CPU default loops over dimensions and levels, ~30x faster there."""
    slots, batch = g.shape
    dims = x.shape[0] // bits
    levels = x.view(dims, bits, batch).sum(1).to(torch.int64)  # (D, B) in 0..bits
    g_t = g.t().contiguous()
    if batched is None and native.usable(g_t):  # the same sums in one pass per dimension, vectorised
        return native.thermometer_grad(levels, g_t, bits)
    if g.is_cuda if batched is None else batched:
        onehot = torch.nn.functional.one_hot(levels, bits + 1).to(g.dtype)  # (D, B, bits + 1)
        hist = (onehot.transpose(1, 2) @ g_t).flip(1).cumsum(1).flip(1)  # sum over levels >= row
        return (2.0 * hist[:, 1:] - g_t.sum(0)).reshape(dims * bits, slots)
    hist = torch.zeros(dims, bits + 1, slots, dtype=g.dtype, device=g.device)
    for d in range(dims):
        hist[d].index_add_(0, levels[d], g_t)
    for m in range(bits - 1, 0, -1):  # in-place reverse cumsum (torch.cumsum on this dim is ~30x slower)
        hist[:, m] += hist[:, m + 1]
    above = hist[:, 1:]  # above[d, m] = sum of g over samples whose level > m, i.e. whose bit m is set
    return (2.0 * above - g_t.sum(0)).view(dims * bits, slots)


def wiring_score_grad(g: torch.Tensor, x: torch.Tensor, bits: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The gradient of every candidate score, ``(2x - 1) @ g.T`` (sources, slots), from the bits
    x (sources, batch) and the gradient g (slots, batch) arriving at the selected bits.

    ``dtype=torch.bfloat16`` runs the product in bf16 with float32 accumulation (AMX on recent x86
    CPUs, tensor cores on GPUs): ``2x - 1`` is exact in bf16 and g is rounded to 8 significant bits
    (~0.2% relative error in the result, far below the minibatch noise that Adam sees); 10x
    faster than float32 for a published-size layer on a CPU with AMX. In float32, a thermometer
    input (``bits`` > 0) takes the cheaper histogram route of :func:`thermometer_wiring_grad`."""
    if dtype != torch.float32:
        return ((2.0 * x - 1.0).to(dtype) @ g.to(dtype).t()).float()
    if bits:
        return thermometer_wiring_grad(g, x, bits)
    return (2.0 * x - 1.0) @ g.t()  # in this orientation: a transposed product would be copied (~2x slower)


class LearnableWiring(torch.autograd.Function):
    """Feature-major: x (I, B) -> x[idx] (S, B), idx = argmax of each slot's weight column.

    weights (I, S): one column of candidate scores per slot. ``layer.soft_wiring()`` gives the
    column-wise softmax(weights / tau), needed only when the input itself needs a gradient.
    ``layer``: the :class:`dwc.models.lut.LUTLayer` whose wiring this is (not imported here: it imports this).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weights: torch.Tensor, idx: torch.Tensor, layer):
        ctx.save_for_backward(x)
        ctx.layer = layer
        return x.index_select(0, idx)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        (x,) = ctx.saved_tensors
        layer = ctx.layer
        grad_x = grad_w = None
        if ctx.needs_input_grad[1]:
            if layer.wiring_optim == "sparse" and not layer.dense_step_due():  # near-max candidates: a sampled product
                grad_w = layer.sparse_score_grad(g, x)
            else:  # every candidate source gets a gradient: the costly part
                grad_w = wiring_score_grad(g, x, layer.thermometer_bits, layer.grad_dtype)
        if ctx.needs_input_grad[0]:
            grad_x = layer.soft_wiring() @ g
        return grad_x, grad_w, None, None


class NativeWiredLookup(torch.autograd.Function):
    """The learnable wiring and the LUT lookup of a layer as one step, in the native kernels of
    :mod:`dwc.models.native`: x (I, B) -> bits (L, B), with the same forward as :class:`LearnableWiring`
    then :class:`LutLookup` and the same gradients (to float32 rounding). A sparse update's backward
    is one kernel; a dense one (the published update, or a sparse update's refresh) takes the
    kernel's gradient at the selected bits and then the dense score gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weights: torch.Tensor, tables: torch.Tensor, idx: torch.Tensor, layer):
        x = x.contiguous()
        out, addr = native.lut_forward(x, idx, tables.detach())
        ctx.save_for_backward(x, addr, tables)
        ctx.layer = layer
        return out

    @staticmethod
    def backward(ctx, gout: torch.Tensor):
        x, addr, tables = ctx.saved_tensors
        layer = ctx.layer
        need_x, need_w, need_t = ctx.needs_input_grad[:3]
        luts, size = tables.shape
        surface = native.efd_surface(tables.detach(), efd_alpha(layer.n), EFD_BETA)  # by address, then input bit
        grad_t = torch.zeros_like(tables) if need_t else None
        dense = need_w and (layer.wiring_optim == "dense" or layer.dense_step_due())
        if need_w and not dense:
            grad_x = torch.zeros_like(x) if need_x else None
            src, slot, _ = layer._support()
            src_by_slot, slot_ptr, pos = layer._support_by_slot()
            soft = layer.soft_wiring().values()[pos] if need_x else None
            values = native.lut_wiring_backward(surface, addr, gout.contiguous(), x, src_by_slot, slot_ptr, pos, soft,
                                                grad_x=grad_x, grad_tables=grad_t)
            grad_w = torch.sparse_coo_tensor(torch.stack([src, slot]), values, layer.wiring_weights.shape,
                                             is_coalesced=True, check_invariants=False)
            return grad_x, grad_w, grad_t, None, None
        # a dense step, or no score gradient: the gradient at the selected bits, then PyTorch's products
        no_candidates = torch.zeros(luts * layer.n + 1, dtype=torch.int64)  # every slot's pointers: none
        g = torch.empty(luts * layer.n, x.shape[1], dtype=x.dtype)
        native.lut_wiring_backward(surface, addr, gout.contiguous(), x, no_candidates[:0], no_candidates,
                                   no_candidates[:0], None, g=g, grad_tables=grad_t)
        grad_w = wiring_score_grad(g, x, layer.thermometer_bits, layer.grad_dtype) if need_w else None
        grad_x = layer.soft_wiring() @ g if need_x else None
        return grad_x, grad_w, grad_t, None, None


def balanced_random_wiring(in_features: int, slots: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Each source used as evenly as possible: concatenated random permutations, cut to ``slots``."""
    reps = math.ceil(slots / in_features)
    perm = torch.cat([torch.randperm(in_features, generator=generator) for _ in range(reps)])
    return perm[:slots]
