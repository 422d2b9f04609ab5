"""Differentiable LUT layer (DWN-style) in pure PyTorch: one code path for CPU and CUDA.

Forward is exact hardware semantics: each LUT reads ``n`` input bits, forms the address
``sum_k bit_k << k`` and outputs ``table[address] > 0``.

Backward:
- table entries get a straight-through gradient at the looked-up address;
- input bits get the Extended Finite Difference (EFD) gradient: for input k, the sum over every
  address of (table[addr with k=1] - table[addr with k=0]) weighted by ``alpha * beta**h`` where
  h is the Hamming distance to the current address ignoring bit k. Because the weights depend only
  on (address, address'), the per-LUT EFD surface is one small matmul with a constant matrix,
  then a gather: no loop over LUTs, no custom kernel;
- learnable wiring: each input slot picks ``argmax`` of a weight row over all candidate sources;
  its weights get ``g * (2x - 1)`` and the source bits get ``g`` spread by ``softmax(w / tau)``.
"""
from __future__ import annotations

import math

import torch
from torch import nn


def efd_matrix(n: int, alpha: float | None = None, beta: float = 1.0 / 3.0) -> torch.Tensor:
    """Constant (2^n, 2^n * n) matrix M with ``(table @ M)[j, a*n + k]`` = EFD dOut/dbit_k at address a."""
    if alpha is None:
        alpha = 0.5 * 0.75 ** (n - 1)  # the DWN default scaling
    size = 1 << n
    addr = torch.arange(size)
    k_bits = torch.arange(n)
    # entry[k_addr, a, k]
    a = addr.view(1, size, 1)
    other = addr.view(size, 1, 1)
    mask = ~(1 << k_bits).view(1, 1, n)
    diff = (a ^ other) & mask
    h = torch.zeros_like(diff)
    for b in range(n):
        h += (diff >> b) & 1
    sign = torch.where(((other >> k_bits.view(1, 1, n)) & 1) == 1, 1.0, -1.0).double()
    m = sign * alpha * torch.pow(torch.tensor(beta, dtype=torch.float64), h.double())
    return m.reshape(size, size * n).float()


class _LutLookup(torch.autograd.Function):
    """bits (B, L*n) in {0,1}, tables (L, 2^n) -> bits (B, L)."""

    @staticmethod
    def forward(ctx, sel: torch.Tensor, tables: torch.Tensor, pow2: torch.Tensor, efd: torch.Tensor):
        luts, size = tables.shape
        n = pow2.numel()
        addr = (sel.view(sel.shape[0], luts, n) * pow2).sum(-1).to(torch.int64)
        flat = addr + torch.arange(luts, device=sel.device).mul_(size)
        out = (tables.reshape(-1)[flat] > 0).to(sel.dtype)
        ctx.save_for_backward(flat, tables, efd)
        ctx.n = n
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        flat, tables, efd = ctx.saved_tensors
        luts, size = tables.shape
        grad_sel = grad_tables = None
        if ctx.needs_input_grad[0]:
            surface = (tables @ efd).view(luts * size, ctx.n)  # EFD gradient at every address
            grad_sel = (surface[flat] * grad_out.unsqueeze(-1)).reshape(grad_out.shape[0], luts * ctx.n)
        if ctx.needs_input_grad[1]:
            grad_tables = torch.zeros(luts * size, dtype=grad_out.dtype, device=grad_out.device)
            grad_tables = grad_tables.index_add_(0, flat.reshape(-1), grad_out.reshape(-1)).view(luts, size)
        return grad_sel, grad_tables, None, None


class _LearnableWiring(torch.autograd.Function):
    """x (B, I), weights (S, I) -> x[:, argmax(weights, 1)] (B, S)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weights: torch.Tensor, tau: float, topk: int):
        idx = weights.argmax(dim=1)
        ctx.save_for_backward(x, weights)
        ctx.tau, ctx.topk = tau, topk
        return x.index_select(1, idx)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        x, weights = ctx.saved_tensors
        grad_x = grad_w = None
        if ctx.needs_input_grad[1]:
            grad_w = g.t() @ (2.0 * x - 1.0)
        if ctx.needs_input_grad[0]:
            if ctx.topk and ctx.topk < weights.shape[1]:
                # With tau ~ 1e-3 the softmax is one-hot to float precision beyond the top few
                # candidates; the top-k scatter equals the dense product and costs O(B*S*k).
                vals, ids = weights.topk(ctx.topk, dim=1)
                p = torch.softmax(vals / ctx.tau, dim=1)
                src = (g.unsqueeze(-1) * p).reshape(g.shape[0], -1)
                grad_x = torch.zeros_like(x).index_add_(1, ids.reshape(-1), src)
            else:
                grad_x = g @ torch.softmax(weights / ctx.tau, dim=1)
        return grad_x, grad_w, None, None


def balanced_random_wiring(in_features: int, slots: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Each source used as evenly as possible: concatenated random permutations, cut to ``slots``."""
    reps = math.ceil(slots / in_features)
    perm = torch.cat([torch.randperm(in_features, generator=generator) for _ in range(reps)])
    return perm[:slots]


class LUTLayer(nn.Module):
    """``out_features`` LUTs with ``n`` inputs each over ``in_features`` bits.

    ``wiring="learnable"`` (default, as published) learns which source feeds each input slot;
    ``wiring="random"`` fixes a balanced random wiring at construction.
    ``softmax_topk`` = 0 uses the dense softmax for the wiring's input gradient.
    """

    def __init__(self, in_features: int, out_features: int, n: int = 6, wiring: str = "learnable",
                 tau: float = 1e-3, softmax_topk: int = 8):
        super().__init__()
        if not 1 <= n <= 8:
            raise ValueError(f"LUT inputs must be in 1..8, got {n}")
        if wiring not in ("learnable", "random"):
            raise ValueError(f"wiring must be 'learnable' or 'random', got {wiring!r}")
        self.in_features, self.out_features, self.n = in_features, out_features, n
        self.wiring, self.tau, self.softmax_topk = wiring, tau, softmax_topk
        self.tables = nn.Parameter(torch.empty(out_features, 1 << n).uniform_(-1.0, 1.0))
        slots = out_features * n
        if wiring == "learnable":
            self.wiring_weights = nn.Parameter(torch.rand(slots, in_features))
        else:
            self.register_buffer("fixed_wiring", balanced_random_wiring(in_features, slots))
        self.register_buffer("pow2", 2.0 ** torch.arange(n, dtype=torch.float32), persistent=False)
        self.register_buffer("efd", efd_matrix(n), persistent=False)

    def wiring_indices(self) -> torch.Tensor:
        """(out_features, n) source index of every LUT input slot (bit k of the address = slot k)."""
        idx = self.wiring_weights.argmax(dim=1) if self.wiring == "learnable" else self.fixed_wiring
        return idx.view(self.out_features, self.n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.wiring == "learnable":
            sel = _LearnableWiring.apply(x, self.wiring_weights, self.tau, self.softmax_topk)
        else:
            sel = x.index_select(1, self.fixed_wiring)
        return _LutLookup.apply(sel, self.tables, self.pow2.to(x.dtype), self.efd.to(x.dtype))

    @torch.no_grad()
    def constrain_(self) -> None:
        """Keep tables in [-1, 1]; call after every optimiser step."""
        self.tables.clamp_(-1.0, 1.0)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, luts={self.out_features}, n={self.n}, wiring={self.wiring}"
