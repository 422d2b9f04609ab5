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
  With ``wiring_optim="sparse"`` only the candidates near each slot's maximum (the softmax's
  support) get that gradient, as a sparse tensor, for :class:`dwc.train.optim.WiringAdam`.
"""
from __future__ import annotations

import math
import warnings

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from dwc.models import native


def _count_wiring_updates(optimizer, args, kwargs) -> None:
    """Fused optimisers update parameters without bumping their version counter, so every
    optimiser step counts its updates of wiring weights here: cached wirings key on that count."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.dwc_updates = getattr(p, "dwc_updates", 0) + 1


register_optimizer_step_post_hook(_count_wiring_updates)


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


# exp(-16.2) < 1e-7: candidates further below their slot's maximum than this many tau vanish in its softmax
SOFTMAX_MARGIN = 16.2
# A sparse update tracks the entries within BAND softmax margins of each slot's maximum (see LUTLayer._band)
BAND = 2.0
BLOCK = 16  # rows per block of the blocked CPU column search (16 measured fastest for 1024 x 6144)


def _blocked(w: torch.Tensor) -> bool:
    """Whether the blocked column search below applies (a CPU matrix of at least 4 blocks)."""
    return w.device.type == "cpu" and w.shape[0] >= 4 * BLOCK


def _block_maxima(w: torch.Tensor) -> torch.Tensor:
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


def _column_entries(w: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """``w[rows, cols]`` through the flat view (torch's 2-D gather along dim 0 is ~2x slower on CPU)."""
    return w.view(-1).index_select(0, (rows * w.shape[1] + cols).view(-1)).view(rows.shape)


def column_max(w: torch.Tensor, maxima: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``w.max(dim=0)`` (values, first index of the maximum) of a (rows, cols) matrix.

    On CPU, torch's max-with-indices along dim 0 is not vectorised (~45 ms for 1024 x 6144); this
    takes the vectorised ``amax`` of row blocks (``maxima``, if already computed), then searches
    only each column's first winning block: ~10x faster there. Other devices use torch.max."""
    rows, cols = w.shape
    if not _blocked(w):
        top = w.max(dim=0)
        return top.values, top.indices
    if maxima is None:
        maxima = _block_maxima(w)
    top = maxima.amax(0)
    start = _first_true_row(maxima == top) * BLOCK
    rows_of = (start + torch.arange(BLOCK, device=w.device)[:, None]).clamp_(max=rows - 1)  # (BLOCK, cols)
    inside = _column_entries(w, rows_of, torch.arange(cols, device=w.device))
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
    if _blocked(w):
        hit = (_block_maxima(w) if maxima is None else maxima) >= thr
        if int(hit.sum()) * BLOCK * 9 > w.numel():
            hit = None
    if hit is None:
        rows, cols = torch.nonzero(w >= thr, as_tuple=True)
        return (rows, cols, _column_entries(w, rows, cols)) if with_values else (rows, cols)
    blk, col = torch.nonzero(hit, as_tuple=True)
    rows_of = blk[:, None] * BLOCK + torch.arange(BLOCK, device=w.device)  # (pairs, BLOCK)
    inside = rows_of < w.shape[0]  # the last block may be short
    rows_of = rows_of.clamp_(max=w.shape[0] - 1)
    values = _column_entries(w, rows_of, col[:, None].expand_as(rows_of))
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


def _lookup(sel: torch.Tensor, tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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


class _LutLookup(torch.autograd.Function):
    """Feature-major: bits (L*n, B) in {0,1}, tables (L, 2^n) -> bits (L, B); ``efd`` is
    :func:`efd_matrix` with its columns ordered by input bit, then address (:func:`efd_by_bit`), so the
    EFD surface comes out contiguous per bit for the gather (~20% faster backward on CPU).

    Feature-major rows keep every op a contiguous sweep over the batch (3-10x faster on CPU
    than batch-major with a size-n inner dimension).
    """

    @staticmethod
    def forward(ctx, sel: torch.Tensor, tables: torch.Tensor, efd: torch.Tensor):
        out, addr = _lookup(sel, tables)
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


class _LearnableWiring(torch.autograd.Function):
    """Feature-major: x (I, B) -> x[idx] (S, B), idx = argmax of each slot's weight column.

    weights (I, S): one column of candidate scores per slot. ``layer.soft_wiring()`` gives the
    column-wise softmax(weights / tau), needed only when the input itself needs a gradient.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weights: torch.Tensor, idx: torch.Tensor, layer: "LUTLayer"):
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


class _NativeWiredLookup(torch.autograd.Function):
    """The learnable wiring and the LUT lookup of a layer as one step, in the native kernels of
    :mod:`dwc.models.native`: x (I, B) -> bits (L, B), with the same forward as :class:`_LearnableWiring`
    then :class:`_LutLookup` and the same gradients (to float32 rounding). A sparse update's backward
    is one kernel; a dense one (the published update, or a sparse update's refresh) takes the
    kernel's gradient at the selected bits and then the dense score gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weights: torch.Tensor, tables: torch.Tensor, idx: torch.Tensor, layer: "LUTLayer"):
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


class LUTLayer(nn.Module):
    """``out_features`` LUTs with ``n`` inputs each over ``in_features`` bits.

    ``wiring="learnable"`` (default, as published) learns which source feeds each input slot;
    ``wiring="random"`` fixes a balanced random wiring at construction.
    ``thermometer_bits`` > 0 declares the input to be thermometer codes of that many bits per
    dimension (a DWC's first layer), which makes the wiring-weight gradient ~bits times cheaper.
    ``sparse_softmax`` keeps, per slot, only the candidates whose softmax weight is above 1e-7 of
    the largest (for tau ~ 1e-3 a handful): the same gradient to float precision, 10x cheaper.
    ``wiring_optim="sparse"`` gives the wiring scores a gradient on that support only (a sparse COO
    tensor; the published method, ``"dense"``, gives every candidate one): the other scores keep
    their values until they come within the margin again. An optimiser must take sparse gradients
    for it (:class:`dwc.train.optim.WiringAdam`).
    ``source_pool`` (source indices) gives the layer an ``allowed`` mask: inputs are only ever read
    from allowed sources. A random wiring draws from the pool; a learnable one chooses among them,
    and :meth:`limit_sources_` narrows the mask during training (a comparator budget).
    """

    def __init__(self, in_features: int, out_features: int, n: int = 6, wiring: str = "learnable",
                 tau: float = 1e-3, sparse_softmax: bool = True, thermometer_bits: int = 0,
                 source_pool: torch.Tensor | None = None, wiring_optim: str = "dense", dense_every: int = 0):
        super().__init__()
        if not 1 <= n <= 8:
            raise ValueError(f"LUT inputs must be in 1..8, got {n}")
        if wiring not in ("learnable", "random"):
            raise ValueError(f"wiring must be 'learnable' or 'random', got {wiring!r}")
        if wiring_optim not in ("dense", "sparse"):
            raise ValueError(f"wiring_optim must be 'dense' or 'sparse', got {wiring_optim!r}")
        self.wiring_optim = wiring_optim
        self.dense_every = dense_every  # a sparse update's dense refresh: every this many wiring steps
        self.in_features, self.out_features, self.n = in_features, out_features, n
        self.wiring, self.tau, self.sparse_softmax = wiring, tau, sparse_softmax
        if thermometer_bits and in_features % thermometer_bits:
            raise ValueError(f"in_features {in_features} is not a multiple of thermometer_bits {thermometer_bits}")
        self.thermometer_bits = thermometer_bits
        self.tables = nn.Parameter(torch.empty(out_features, 1 << n).uniform_(-1.0, 1.0))
        slots = out_features * n
        allowed = None
        if source_pool is not None:
            allowed = torch.zeros(in_features, dtype=torch.bool)
            allowed[source_pool] = True
        self.register_buffer("allowed", allowed)
        self.allowed_changes = 0  # part of the wiring cache key
        if wiring == "learnable":
            # (sources, slots): column s scores every candidate source of input slot s
            self.wiring_weights = nn.Parameter(torch.rand(in_features, slots))
        elif source_pool is not None:
            pool = torch.as_tensor(source_pool, dtype=torch.int64)
            self.register_buffer("fixed_wiring", pool[balanced_random_wiring(len(pool), slots)])
        else:
            self.register_buffer("fixed_wiring", balanced_random_wiring(in_features, slots))
        self.register_buffer("efd", efd_by_bit(n), persistent=False)
        self._cache: dict = {}
        self.graph_safe = False
        self.grad_dtype = torch.float32  # of the wiring-score gradient (see wiring_score_grad)
        self.native = True  # the CPU kernels where they apply (see _native_backward, _native_bits)

    def prepare_cuda_graphs(self) -> bool:
        """No host syncs from here on: no wiring cache (a replayed graph changes the weights without
        Python seeing it) and a dense softmax (the sparse one sizes its tensors from the data).
        A sparse wiring update sizes its gradient from the data too: such a layer runs eagerly."""
        if self.wiring == "learnable" and self.wiring_optim == "sparse":
            return False
        self.graph_safe, self.sparse_softmax = True, False
        return True

    def _cached(self, name: str, compute):
        """Wiring-derived tensors, recomputed only when the weights change (they change once per
        optimiser step but are read by every forward: acting, critic targets, actor loss)."""
        w = self.wiring_weights
        if self.graph_safe:
            return compute()
        key = (w.data_ptr(), w._version, w.device, getattr(w, "dwc_updates", 0), self.allowed_changes)
        if self._cache.get("key") != key:
            self._cache = {"key": key}
        if name not in self._cache:
            self._cache[name] = compute()
        return self._cache[name]

    def dense_step_due(self) -> bool:
        """Whether the wiring's next optimiser step is a sparse update's dense refresh: its step count
        (kept by :class:`dwc.train.optim.WiringAdam` from Adam's own, so a resumed run keeps the rhythm)
        reaches a multiple of ``dense_every``."""
        return bool(self.dense_every) and (getattr(self.wiring_weights, "dwc_steps", 0) + 1) % self.dense_every == 0

    def _masked(self, w: torch.Tensor) -> torch.Tensor:
        """Scores with sources outside the allowed mask at -inf: never the argmax, zero softmax weight."""
        return w if self.allowed is None else w.masked_fill(~self.allowed[:, None], float("-inf"))

    def _scores(self) -> torch.Tensor:
        return self._cached("scores", lambda: self._masked(self.wiring_weights.detach()))

    def _top(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(column maxima, first argmax, the block maxima both were found from, or None).

        Where the training backward needs the softmax's support (a sparse update, or an input that
        takes a gradient), the support is found first and the argmax read off its entries: the same
        first index of the maximum, one search of the score matrix instead of two."""
        def compute():
            if self.wiring_optim == "sparse" and self.sparse_softmax:  # no masked copy of the scores needed
                src, slot, values, top = self._band()
                self._cache["near_sorted"] = True  # row-major, as the band is
                if self.native and native.usable(values):
                    *near, argmax = native.near_entries(values, src, slot, top, SOFTMAX_MARGIN * self.tau,
                                                        self.in_features)
                    self._cache["near"], self._cache["near_values"] = tuple(near[:2]), near[2]
                    return top, argmax, None
                near = torch.nonzero(values >= top[slot] - SOFTMAX_MARGIN * self.tau).view(-1)  # once, not per mask
                self._cache["near"] = (src.index_select(0, near), slot.index_select(0, near))
                return top, first_max_among(src, slot, values, top, self.in_features), None
            w = self._scores()
            if not _blocked(w):
                return (*column_max(w), None)
            maxima = _block_maxima(w)
            if not (self.sparse_softmax and (self.wiring_optim == "sparse" or not self.thermometer_bits)):
                return (*column_max(w, maxima=maxima), maxima)
            top = maxima.amax(0)
            src, slot, values = near_max(w, top, SOFTMAX_MARGIN * self.tau, maxima=maxima, with_values=True)
            self._cache["near"] = (src, slot)  # for _support, under the same weights
            return top, first_max_among(src, slot, values, top, w.shape[0]), maxima
        return self._cached("max", compute)

    def _band(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(sources, slots, current scores, column maxima) of the band: every allowed entry within
        ``BAND`` softmax margins of its slot's maximum at the last full search, in row-major order.

        A sparse update changes only the scores on the softmax's support, which lies in the band, so
        between full searches every score outside the band keeps its value, and all of them stay
        below the band's floor (the maximum at the search less ``BAND`` margins). While each slot's
        maximum stays within one extra margin of the one found by the search, the band therefore
        holds every entry within the margin of the maximum, and the maximum itself: each update reads
        the band's ~2x support entries instead of searching the whole matrix (two passes over 6.3M
        scores per layer at 1024 wide). A slot whose maximum has sunk further, a change that was not
        :class:`dwc.train.optim.WiringAdam`'s lazy step (loading a checkpoint, another optimiser) or a
        new source mask starts a full search again."""
        w = self.wiring_weights.detach()  # the band holds allowed entries only: no mask to apply
        band = getattr(self, "_tracked", None)
        # a dense step (a refresh) moves every score, and fused Adam leaves the version counter alone
        key = (w.data_ptr(), w.device, self.allowed_changes, getattr(self.wiring_weights, "dwc_dense_steps", 0))
        if band is not None and band["key"] == key and (
                band["version"] == w._version or getattr(self.wiring_weights, "dwc_lazy_step", None)
                == (band["version"], w._version)):
            if self.native and native.usable(w):
                values = band["values"]  # the band's scores, kept: refreshed only where the lazy step moved one
                if band["version"] != w._version:  # that step recorded what it moved (WiringAdam._lazy_step)
                    native.band_refresh(band["flat"], values, *self.wiring_weights.dwc_lazy_moved)
                top = native.slot_max(values, band["slot"], len(band["floor"]))
            else:
                values = w.view(-1).index_select(0, band["flat"])
                top = torch.full_like(band["floor"], float("-inf")).scatter_reduce_(0, band["slot"], values, "amax")
            if bool((top >= band["floor"] + SOFTMAX_MARGIN * self.tau).all()):
                band["version"] = w._version
                return band["src"], band["slot"], values, top
        scores = self._scores()
        maxima = _block_maxima(scores) if _blocked(scores) else None
        top = scores.amax(0) if maxima is None else maxima.amax(0)
        floor = top - BAND * SOFTMAX_MARGIN * self.tau
        src, slot, values = near_max(scores, top, BAND * SOFTMAX_MARGIN * self.tau, maxima=maxima, with_values=True)
        order = torch.argsort(src * scores.shape[1] + slot)
        src, slot = src[order], slot[order]
        values = values[order]
        self._tracked = {"key": key, "version": w._version, "floor": floor, "flat": src * scores.shape[1] + slot,
                         "src": src, "slot": slot, "values": values}
        return src, slot, values, top

    def _argmax(self) -> torch.Tensor:
        return self._top()[1]

    def sources_read(self) -> int:
        """Distinct sources the current wiring reads (for a first layer: comparators in hardware)."""
        return int(torch.unique(self._flat_indices()).numel())

    @torch.no_grad()
    def limit_sources_(self, keep: int) -> None:
        """Shrink the allowed sources to ``keep``: those read by the most slots, ties broken by how
        close a source's best score comes to winning a slot. Slots whose source is dropped move to
        their best allowed candidate, so inputs concentrate on fewer, shared sources."""
        if self.allowed is None or self.wiring != "learnable" or int(self.allowed.sum()) <= keep:
            return
        w = self._scores()
        top, idx, _ = self._top()
        reads = torch.bincount(idx, minlength=self.in_features).to(w.dtype)
        closeness = (w - top).amax(dim=1)  # 0 for a source some slot reads, -inf if not allowed
        order = torch.argsort(closeness, descending=True, stable=True)
        order = order[torch.argsort(reads[order], descending=True, stable=True)]  # reads first, then closeness
        allowed = torch.zeros_like(self.allowed)
        allowed[order[:keep]] = True
        self.allowed.copy_(allowed & self.allowed)
        self.allowed_changes += 1

    def _support(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(sources, slots, CSR row pointers) of the candidates within ``SOFTMAX_MARGIN * tau`` of their
        slot's maximum, in row-major order: where the column-wise softmax(w / tau) is not negligible."""
        def compute():
            top, _, maxima = self._top()
            if "near" in self._cache:
                src, slot = self._cache["near"]
            else:
                src, slot = near_max(self._scores(), top, SOFTMAX_MARGIN * self.tau, maxima=maxima)
            if not self._cache.get("near_sorted"):  # the band's entries come in row-major order already
                order = torch.argsort(src * len(top) + slot)  # CSR: row-major
                src, slot = src[order], slot[order]
            rows = torch.bincount(src, minlength=self.in_features).cumsum(0)
            return src, slot, torch.cat([rows.new_zeros(1), rows])
        return self._cached("support", compute)

    def _support_by_slot(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The support ordered by slot, as the native backward reads it: (sources, slot pointers
        (slots + 1), each entry's position in the row-major order of :meth:`_support`)."""
        def compute():
            src, slot, _ = self._support()
            return native.order_by_slot(src.contiguous(), slot.contiguous(), self.out_features * self.n)
        return self._cached("by_slot", compute)

    def _native_backward(self, x: torch.Tensor) -> bool:
        """Whether this forward takes the native kernels (:class:`_NativeWiredLookup`): a learnable wiring
        trained on the CPU in float32 (a sparse update with the sparse softmax), where the kernels
        compiled (``self.native = False`` turns it off)."""
        return (self.native and self.wiring == "learnable" and (self.wiring_optim == "dense" or self.sparse_softmax)
                and self.n <= 8 and torch.is_grad_enabled() and self.wiring_weights.requires_grad
                and native.usable(x, self.tables))

    def _support_csr(self, values: torch.Tensor) -> torch.Tensor:
        """A sparse CSR (sources, slots) matrix with ``values`` on the support."""
        _, slot, crow = self._support()
        with warnings.catch_warnings():  # "sparse CSR support is in beta": CSR @ dense is all we use
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(crow, slot, values, self.wiring_weights.shape, check_invariants=False)

    def soft_wiring(self) -> torch.Tensor:
        """Column-wise softmax(w / tau) (I, S): sparse (CSR), or dense with ``sparse_softmax=False``."""
        def compute():
            if not self.sparse_softmax:
                return torch.softmax(self._scores() / self.tau, dim=0)
            top = self._top()[0]
            src, slot, _ = self._support()  # allowed sources only: the scores there are the weights
            scores = self._cache.get("near_values")  # read with the band, or else read now
            if scores is None:
                scores = _column_entries(self.wiring_weights.detach(), src, slot)
            e = torch.exp((scores - top[slot]) / self.tau)
            return self._support_csr(e / torch.zeros_like(top).index_add_(0, slot, e)[slot])
        return self._cached("soft", compute)

    def sparse_score_grad(self, g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The gradient ``(2x - 1) @ g.T`` of the wiring scores at the softmax's support only, as a
        coalesced sparse COO tensor of the scores' shape: ``x @ g.T`` sampled at those entries
        (``support x batch`` multiply-adds, against ``sources x slots x batch`` for every candidate)."""
        src, slot, _ = self._support()
        mask = self._cached("mask", lambda: self._support_csr(torch.ones_like(slot, dtype=x.dtype)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            dots = torch.sparse.sampled_addmm(mask, x, g.t(), beta=0.0).values()
        values = 2.0 * dots - g.sum(1)[slot]
        return torch.sparse_coo_tensor(torch.stack([src, slot]), values, mask.shape, is_coalesced=True,
                                       check_invariants=False)

    def _flat_indices(self) -> torch.Tensor:
        return self.fixed_wiring if self.wiring == "random" else self._argmax()

    def wiring_indices(self) -> torch.Tensor:
        """(out_features, n) source index of every LUT input slot (bit k of the address = slot k)."""
        return self._flat_indices().view(self.out_features, self.n)

    def truth_tables(self) -> torch.Tensor:
        """(out_features, 2**n) bool: each LUT's output at every address (what the forward computes)."""
        return (self.tables.detach() > 0).cpu()

    def forward_fm(self, x: torch.Tensor) -> torch.Tensor:
        """Feature-major forward: bits (in_features, batch) -> bits (out_features, batch)."""
        if self._native_backward(x):
            return _NativeWiredLookup.apply(x, self.wiring_weights, self.tables, self._argmax(), self)
        if self.wiring == "learnable":
            sel = _LearnableWiring.apply(x, self.wiring_weights, self._argmax(), self)
        else:
            sel = x.index_select(0, self.fixed_wiring)
        return _LutLookup.apply(sel, self.tables, self.efd.to(x.dtype))

    def _native_bits(self, x: torch.Tensor) -> bool:
        """Whether :meth:`forward_bits` takes the native kernel (bytes on the CPU, compiled kernels)."""
        return self.native and self.n <= 8 and native.usable(x, dtype=torch.uint8) and native.usable(self.tables)

    @torch.no_grad()
    def forward_bits(self, x: torch.Tensor) -> torch.Tensor:
        """Inference forward on uint8 bits (in_features, batch) -> uint8 (out_features, batch): the
        values of :meth:`forward_fm` at a quarter of its memory traffic, ~2x faster on CPU (acting,
        critic targets, evaluation)."""
        if self._native_bits(x):
            return native.lut_forward_bits(x.contiguous(), self._flat_indices(), self.tables.detach())
        return self.lookup_bits(x.index_select(0, self._flat_indices()))

    @torch.no_grad()
    def lookup_bits(self, sel: torch.Tensor) -> torch.Tensor:
        """:meth:`forward_bits` from the bits its inputs read, ``x[wiring_indices().flatten()]``
        (out_features * n, batch) uint8."""
        if self._native_bits(sel):
            if len(getattr(self, "_rows", ())) != len(sel):
                self._rows = torch.arange(len(sel))  # sel's rows, in order
            return native.lut_forward_bits(sel.contiguous(), self._rows, self.tables.detach())
        sel = sel.view(self.out_features, self.n, sel.shape[1])
        addr = sel[:, 0].clone()
        for k in range(1, self.n):  # n <= 8: the address fits a byte
            addr.add_(sel[:, k], alpha=1 << k)
        return torch.gather((self.tables.detach() > 0).to(torch.uint8), 1, addr.long())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Bits (batch, in_features) -> bits (batch, out_features)."""
        return self.forward_fm(x.t().contiguous()).t()

    @torch.no_grad()
    def constrain_(self) -> None:
        """Keep tables in [-1, 1]; call after every optimiser step."""
        self.tables.clamp_(-1.0, 1.0)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, luts={self.out_features}, n={self.n}, wiring={self.wiring}"
