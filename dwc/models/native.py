"""The CPU kernels of ``lut_native.c``, compiled with the system C compiler on first use.

They are built and cached like the IR's fast executor (:func:`dwc.core.cbuild.build`: ``-march=native``,
keyed by the source, compiler, flags and this CPU, under ``~/.cache/dwc/fast`` or ``$DWC_CACHE_DIR``),
so parallel training runs share one build. Without a C compiler, or with ``DWC_NATIVE=0``,
:func:`library` is None and the LUT layers use their plain PyTorch code, which computes the same
gradients (to float32 rounding: the kernels sum in another order).
"""
from __future__ import annotations

import ctypes
import os
import warnings
from functools import lru_cache
from pathlib import Path

import torch

from dwc.core.cbuild import build, c_compiler

SOURCE = Path(__file__).with_name("lut_native.c")
FLAGS = ("-O3", "-fno-math-errno", "-std=c99")


@lru_cache(maxsize=None)
def library() -> ctypes.CDLL | None:
    """The compiled kernels, or None (disabled, no compiler, or the build failed: a warning says why)."""
    if os.environ.get("DWC_NATIVE", "1") == "0":
        return None
    cc = c_compiler()
    if cc is None:
        return None
    try:
        lib = ctypes.CDLL(str(build(SOURCE.read_text(), cc, FLAGS)))
    except (OSError, RuntimeError) as e:
        warnings.warn(f"dwc: native LUT kernels unavailable, using PyTorch's ({e})", RuntimeWarning, stacklevel=2)
        return None
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.lut_wiring_backward.restype = ctypes.c_int
    lib.lut_wiring_backward.argtypes = [i64, i64, i64] + [ptr] * 12
    f32 = ctypes.c_float
    lib.lazy_adam.restype = None
    lib.lazy_adam.argtypes = [i64] + [ptr] * 5 + [f32] * 7 + [ctypes.c_int, ptr]
    lib.band_refresh.restype = None
    lib.band_refresh.argtypes = [i64, ptr, ptr, i64, ptr, ptr]
    lib.block_max.restype = None
    lib.block_max.argtypes = [i64, i64, i64, ptr, ptr]
    lib.slot_max.restype = None
    lib.slot_max.argtypes = [i64, i64, ptr, ptr, ptr]
    lib.near_entries.restype = i64
    lib.near_entries.argtypes = [i64, i64] + [ptr] * 4 + [f32, i64] + [ptr] * 4
    lib.efd_surface.restype = ctypes.c_int
    lib.efd_surface.argtypes = [i64, i64, ptr, f32, f32, ptr]
    lib.lut_forward_bits.restype = ctypes.c_int
    lib.lut_forward_bits.argtypes = [i64, i64, i64] + [ptr] * 4
    lib.thermometer_grad.restype = ctypes.c_int
    lib.thermometer_grad.argtypes = [i64, i64, i64, i64] + [ptr] * 4
    lib.order_by_slot.restype = None
    lib.order_by_slot.argtypes = [i64, i64] + [ptr] * 5
    lib.lut_forward.restype = ctypes.c_int
    lib.lut_forward.argtypes = [i64, i64, i64] + [ptr] * 5
    return lib


def usable(*tensors: torch.Tensor, dtype: torch.dtype = torch.float32) -> bool:
    """Whether the kernels take these tensors: on the CPU, of ``dtype``, and compiled here."""
    return (all(t.device.type == "cpu" and t.dtype == dtype for t in tensors)
            and library() is not None)


def _ptr(t: torch.Tensor | None) -> int | None:
    if t is None:
        return None
    if not t.is_contiguous():
        raise ValueError("native kernels take contiguous tensors")
    return t.data_ptr()


def lazy_adam(flat: torch.Tensor, grad: torch.Tensor, param: torch.Tensor, exp_avg: torch.Tensor,
              exp_avg_sq: torch.Tensor, step: int, lr: float, beta1: float, beta2: float, eps: float,
              weight_decay: float, decoupled: bool, maximize: bool) -> torch.Tensor:
    """See ``lazy_adam`` in lut_native.c: Adam's step ``step`` (from 1) on the entries ``flat`` of
    ``param`` and its moments, in place; returns the entries' new values."""
    step_size = lr / (1.0 - beta1 ** step)
    bc2_sqrt = (1.0 - beta2 ** step) ** 0.5
    decay = -lr * weight_decay if decoupled else weight_decay
    stepped = torch.empty(len(flat), dtype=param.dtype)
    library().lazy_adam(len(flat), *map(_ptr, (flat, grad, param, exp_avg, exp_avg_sq)), step_size, bc2_sqrt,
                        1.0 - beta1, beta2, 1.0 - beta2, eps, decay, int(maximize), _ptr(stepped))
    return stepped


def band_refresh(band_flat: torch.Tensor, values: torch.Tensor, changed: torch.Tensor,
                 changed_values: torch.Tensor) -> None:
    """See ``band_refresh`` in lut_native.c: ``values`` (the band's scores) updated in place where the
    sorted flat positions ``changed`` meet the band's ``band_flat``."""
    library().band_refresh(len(band_flat), _ptr(band_flat), _ptr(values), len(changed), _ptr(changed),
                           _ptr(changed_values))


def block_max(w: torch.Tensor, block: int) -> torch.Tensor:
    """See ``block_max`` in lut_native.c: (ceil(rows / block), cols), each column's maximum in each block of rows."""
    rows, cols = w.shape
    out = torch.empty(-(-rows // block), cols, dtype=w.dtype)
    library().block_max(rows, cols, block, _ptr(w), _ptr(out))
    return out


def slot_max(values: torch.Tensor, slot: torch.Tensor, slots: int) -> torch.Tensor:
    """See ``slot_max`` in lut_native.c: the largest of ``values`` in each slot."""
    top = torch.empty(slots, dtype=values.dtype)
    library().slot_max(len(values), slots, _ptr(values), _ptr(slot), _ptr(top))
    return top


def near_entries(values: torch.Tensor, src: torch.Tensor, slot: torch.Tensor, top: torch.Tensor, margin: float,
                 none: int) -> tuple[torch.Tensor, ...]:
    """See ``near_entries`` in lut_native.c: (sources, slots, values) of the entries within ``margin``
    of their slot's maximum, and each slot's first source at its maximum (``none`` if it has none)."""
    n = len(values)
    near_src, near_slot = torch.empty(n, dtype=torch.int64), torch.empty(n, dtype=torch.int64)
    near_values, argmax = torch.empty(n, dtype=values.dtype), torch.empty(len(top), dtype=torch.int64)
    count = library().near_entries(n, len(top), *map(_ptr, (values, src, slot, top)), margin, none,
                                   *map(_ptr, (near_src, near_slot, near_values, argmax)))
    return near_src[:count], near_slot[:count], near_values[:count], argmax


def efd_surface(tables: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """See ``efd_surface`` in lut_native.c: (luts, 2^n, n), ``tables @ efd_matrix(n, alpha, beta)``."""
    luts, size = tables.shape
    n = size.bit_length() - 1
    surface = torch.empty(luts, size, n, dtype=torch.float32)
    if library().efd_surface(luts, n, _ptr(tables), alpha, beta, _ptr(surface)):
        raise ValueError(f"native LUT kernels take 1 to 8 inputs per LUT, not {n}")
    return surface


@lru_cache(maxsize=None)
def _pool(threads: int):
    from concurrent.futures import ThreadPoolExecutor
    return ThreadPoolExecutor(threads, thread_name_prefix="dwc-native")


def thermometer_grad(levels: torch.Tensor, g_t: torch.Tensor, bits: int) -> torch.Tensor:
    """See ``thermometer_grad`` in lut_native.c: (dims * bits, slots) from the levels (dims, batch)
    int64 and the gradient g_t (batch, slots). With torch's threads (``--threads``) above one, the
    observation dimensions are split among that many threads (ctypes lets go of the GIL during a call;
    each dimension's rows are computed the same way, so the result does not depend on the split)."""
    dims, batch = levels.shape
    slots = g_t.shape[1]
    out = torch.empty(dims * bits, slots, dtype=torch.float32)
    threads = min(torch.get_num_threads(), dims)
    if threads == 1:
        total = torch.empty(slots, dtype=torch.float32)
        codes = [library().thermometer_grad(dims, bits, batch, slots, *map(_ptr, (levels, g_t, out, total)))]
    else:
        cuts = [dims * t // threads for t in range(threads + 1)]
        totals = torch.empty(threads, slots, dtype=torch.float32)  # each part sums the batch for itself
        parts = [_pool(threads).submit(library().thermometer_grad, d1 - d0, bits, batch, slots, _ptr(levels[d0:d1]),
                                       _ptr(g_t), _ptr(out[d0 * bits:d1 * bits]), _ptr(totals[t]))
                 for t, (d0, d1) in enumerate(zip(cuts, cuts[1:]))]
        codes = [part.result() for part in parts]
    if any(codes):
        raise MemoryError("thermometer_grad: out of memory")
    return out


def order_by_slot(src: torch.Tensor, slot: torch.Tensor, slots: int) -> tuple[torch.Tensor, ...]:
    """See ``order_by_slot`` in lut_native.c: (sources in slot order, slot pointers, row-major positions)."""
    slot_ptr = torch.empty(slots + 1, dtype=torch.int64)
    pos, src_by_slot = torch.empty_like(src), torch.empty_like(src)
    library().order_by_slot(len(src), slots, *map(_ptr, (src, slot, slot_ptr, pos, src_by_slot)))
    return src_by_slot, slot_ptr, pos


def lut_forward(x: torch.Tensor, idx: torch.Tensor, tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """See ``lut_forward`` in lut_native.c: (output bits (luts, batch) float32, addresses (luts, batch) uint8)."""
    luts, size = tables.shape
    batch = x.shape[1]
    out = torch.empty(luts, batch, dtype=torch.float32)
    addr = torch.empty(luts, batch, dtype=torch.uint8)
    if library().lut_forward(luts, size.bit_length() - 1, batch, *map(_ptr, (x, idx, tables, out, addr))):
        raise ValueError(f"native LUT kernels take 1 to 8 inputs per LUT, not {size.bit_length() - 1}")
    return out, addr


def lut_forward_bits(x: torch.Tensor, idx: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
    """See ``lut_forward_bits`` in lut_native.c: output bits (luts, batch) uint8 from bits x uint8."""
    luts, size = tables.shape
    out = torch.empty(luts, x.shape[1], dtype=torch.uint8)
    if library().lut_forward_bits(luts, size.bit_length() - 1, x.shape[1], *map(_ptr, (x, idx, tables, out))):
        raise ValueError(f"native LUT kernels take 1 to 8 inputs per LUT, not {size.bit_length() - 1}")
    return out


def lut_wiring_backward(surface, addr, gout, x, src, slot_ptr, pos, soft, grad_x=None, g=None, grad_tables=None):
    """See ``lut_wiring_backward`` in lut_native.c: returns the wiring scores' gradient on the support
    (float32, ordered by ``pos``); fills ``grad_x``, ``g`` and ``grad_tables`` where given (zeroed
    ones for the sums)."""
    luts, _, n = surface.shape
    batch = addr.shape[1]
    grad_w = torch.empty(len(src), dtype=torch.float32)
    args = (surface, addr, gout, x, src, slot_ptr, pos, soft if grad_x is not None else None, grad_w, grad_x, g,
            grad_tables)
    if library().lut_wiring_backward(luts, n, batch, *map(_ptr, args)):
        raise MemoryError("lut_wiring_backward: out of memory, or not 1 to 8 inputs per LUT")
    return grad_w
