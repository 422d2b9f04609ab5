"""The LUT lookup as an autograd function (:class:`LutLookup`): forward the exact hardware semantics
(``table[address] > 0``), backward the straight-through gradient for the tables and the Extended
Finite Difference (EFD) gradient for the input bits, one small matmul with a constant matrix
(:func:`efd_matrix`) and a gather. :class:`dwc.models.lut.LUTLayer` uses it."""
from __future__ import annotations

import torch


EFD_BETA = 1.0 / 3.0  # the weight of each further bit of Hamming distance (DWN's)


def efd_alpha(n: int) -> float:
    return 0.5 * 0.75 ** (n - 1)  # the DWN default scaling


def efd_matrix(n: int, alpha: float | None = None, beta: float = EFD_BETA) -> torch.Tensor:
    """Constant (2^n, 2^n * n) matrix M with ``(table @ M)[j, a*n + k]`` = EFD dOut/dbit_k at address a."""
    if alpha is None:
        alpha = efd_alpha(n)
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


def efd_by_bit(n: int) -> torch.Tensor:
    """:func:`efd_matrix` (2^n, 2^n * n) with columns ``k * 2^n + a`` instead of ``a * n + k``."""
    size = 1 << n
    return efd_matrix(n).view(size, size, n).permute(0, 2, 1).reshape(size, n * size).contiguous()


def lookup(sel: torch.Tensor, tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Feature-major LUT lookup: the selected bits (L*n, B) in {0,1} -> (output bits (L, B), addresses (L, B) int64)."""
    luts, size = tables.shape
    n = size.bit_length() - 1
    bits = sel.view(luts, n, sel.shape[1])
    addr = bits[:, 0].clone()
    for k in range(1, n):
        addr.add_(bits[:, k], alpha=float(1 << k))
    addr = addr.to(torch.int64)
    out = torch.gt(torch.gather(tables, 1, addr), 0, out=sel.new_empty(addr.shape))  # no bool detour: ~10x faster on CPU
    return out, addr


class LutLookup(torch.autograd.Function):
    """Feature-major: bits (L*n, B) in {0,1}, tables (L, 2^n) -> bits (L, B); ``efd`` is
    :func:`efd_matrix` with its columns ordered by input bit, then address (:func:`efd_by_bit`), so the
    EFD surface comes out contiguous per bit for the gather (~20% faster backward on CPU).

    Feature-major rows keep every op a contiguous sweep over the batch (3-10x faster on CPU
    than batch-major with a size-n inner dimension).
    """

    @staticmethod
    def forward(ctx, sel: torch.Tensor, tables: torch.Tensor, efd: torch.Tensor):
        out, addr = lookup(sel, tables)
        ctx.save_for_backward(addr, tables, efd)
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        addr, tables, efd = ctx.saved_tensors
        grad_out = grad_out.contiguous()  # arrives transposed from the head; strided math is ~10x slower
        luts, size = tables.shape
        n = size.bit_length() - 1
        grad_sel = grad_tables = None
        if ctx.needs_input_grad[0]:
            # EFD gradient at every address of every LUT, then read off at each sample's address.
            surface = (tables @ efd).view(luts, n, size)  # efd by input bit, then address: (L, n, 2^n)
            picked = torch.gather(surface, 2, addr.unsqueeze(1).expand(luts, n, addr.shape[1]))
            grad_sel = picked.mul_(grad_out.unsqueeze(1)).view(luts * n, -1)
        if ctx.needs_input_grad[1]:
            grad_tables = torch.zeros_like(tables).scatter_add_(1, addr, grad_out)  # straight-through
        return grad_sel, grad_tables, None

