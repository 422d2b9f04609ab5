"""Column searches over a learnable wiring's score matrix (sources x slots): each slot's maximum and
first argmax (:func:`column_max`), and the entries near it (:func:`near_max`), blocked on the CPU
where torch's own reductions along dim 0 are scalar loops."""
from __future__ import annotations

import torch

from dwc.models import native

BLOCK = 16  # rows per block of the blocked CPU column search (16 measured fastest for 1024 x 6144)


def blocked(w: torch.Tensor) -> bool:
    """Whether the blocked column search below applies (a CPU matrix of at least 4 blocks)."""
    return w.device.type == "cpu" and w.shape[0] >= 4 * BLOCK


def block_maxima(w: torch.Tensor) -> torch.Tensor:
    """(ceil(rows / BLOCK), cols): the maximum of each column within each block of BLOCK rows."""
    if native.usable(w) and w.is_contiguous():
        return native.block_max(w, BLOCK)
    rows, cols = w.shape
    full = rows // BLOCK * BLOCK
    maxima = w[:full].view(rows // BLOCK, BLOCK, cols).amax(1)
    if full < rows:  # the rows left over form one more, shorter block
        maxima = torch.cat([maxima, w[full:].amax(0, keepdim=True)])
    return maxima


def _first_true_row(hit: torch.Tensor) -> torch.Tensor:
    """The first True row of each column of a (rows, cols) bool matrix, as a float32 ``amin``: on
    CPU torch's argmax along dim 0, and an int64 amin, are scalar loops (~10 ns an element)."""
    rows = torch.arange(hit.shape[0], device=hit.device, dtype=torch.float32)[:, None]
    return torch.where(hit, rows, float(hit.shape[0])).amin(0).long()


def column_entries(w: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """``w[rows, cols]`` through the flat view (torch's 2-D gather along dim 0 is ~2x slower on CPU)."""
    return w.view(-1).index_select(0, (rows * w.shape[1] + cols).view(-1)).view(rows.shape)


def column_max(w: torch.Tensor, maxima: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``w.max(dim=0)`` (values, first index of the maximum) of a (rows, cols) matrix.

    On CPU, torch's max-with-indices along dim 0 is not vectorised (~45 ms for 1024 x 6144); this
    takes the vectorised ``amax`` of row blocks (``maxima``, if already computed), then searches
    only each column's first winning block: ~10x faster there. Other devices use torch.max."""
    rows, cols = w.shape
    if not blocked(w):
        top = w.max(dim=0)
        return top.values, top.indices
    if maxima is None:
        maxima = block_maxima(w)
    top = maxima.amax(0)
    start = _first_true_row(maxima == top) * BLOCK
    rows_of = (start + torch.arange(BLOCK, device=w.device)[:, None]).clamp_(max=rows - 1)  # (BLOCK, cols)
    inside = column_entries(w, rows_of, torch.arange(cols, device=w.device))
    return top, start + _first_true_row(inside == top)


def near_max(w: torch.Tensor, top: torch.Tensor, margin: float, maxima: torch.Tensor | None = None,
             with_values: bool = False) -> tuple[torch.Tensor, ...]:
    """(rows, cols) of every entry with ``w >= top - margin`` (top = the column maxima), and with
    ``with_values`` the entries themselves.

    On CPU only the row blocks whose maximum reaches the threshold are searched (for a learnable
    wiring at tau ~ 1e-3 about one block per column): ~7x faster than ``nonzero`` over the whole
    matrix, which on CPU is a slow two-pass scan. A block's entries cost ~9x a scanned one, so where
    the blocks found hold more than 1/9 of the matrix (the wide support of a fresh wiring: ~17
    candidates per input at 1024 x 6138, 40 ms searched by blocks, 18 ms scanned) the whole matrix
    is scanned instead. The order is not sorted."""
    thr = top - margin
    hit = None
    if blocked(w):
        hit = (block_maxima(w) if maxima is None else maxima) >= thr
        if int(hit.sum()) * BLOCK * 9 > w.numel():
            hit = None
    if hit is None:
        rows, cols = torch.nonzero(w >= thr, as_tuple=True)
        return (rows, cols, column_entries(w, rows, cols)) if with_values else (rows, cols)
    blk, col = torch.nonzero(hit, as_tuple=True)
    rows_of = blk[:, None] * BLOCK + torch.arange(BLOCK, device=w.device)  # (pairs, BLOCK)
    inside = rows_of < w.shape[0]  # the last block may be short
    rows_of = rows_of.clamp_(max=w.shape[0] - 1)
    values = column_entries(w, rows_of, col[:, None].expand_as(rows_of))
    pair, r = torch.nonzero((values >= thr[col][:, None]) & inside, as_tuple=True)
    return (rows_of[pair, r], col[pair]) + ((values[pair, r],) if with_values else ())


def first_max_among(rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, top: torch.Tensor,
                    n_rows: int) -> torch.Tensor:
    """The first row of each column's maximum ``top`` among the entries (rows, cols, values) of a
    (n_rows, len(top)) matrix that include every entry equal to it: what ``column_max`` finds, from
    ``near_max``'s entries without another search of the matrix."""
    best = values == top[cols]
    first = torch.full(top.shape, n_rows, dtype=torch.int64, device=top.device)
    return first.scatter_reduce_(0, cols[best], rows[best], "amin")

