"""The compiled CPU kernels (dwc/models/lut_native.c) against the PyTorch definitions they replace, for
every LUT size they take; the layer-level checks (gradients, the lazy Adam step) are in
test_wiring_optim.py."""
import pytest
import torch

from dwc.models import native
from dwc.models.lut import LUTLayer
from dwc.models.lut_efd import EFD_BETA, efd_alpha, efd_matrix, lookup
from dwc.models.lut_wiring import thermometer_wiring_grad


@pytest.fixture(autouse=True)
def _compiled():
    assert native.library() is not None, "a C compiler is part of the toolchain (docs/troubleshooting.md)"


@pytest.mark.parametrize("n", range(1, 9))
def test_efd_surface_is_the_matrix_product(n):
    tables = torch.randn(37, 1 << n, generator=torch.Generator().manual_seed(n))  # 37: not a multiple of 16
    want = (tables @ efd_matrix(n)).view(37, 1 << n, n)
    torch.testing.assert_close(native.efd_surface(tables, efd_alpha(n), EFD_BETA), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", range(1, 9))
def test_lut_forward_is_the_lookup(n):
    g = torch.Generator().manual_seed(n)
    x = (torch.rand(50, 33, generator=g) < 0.5).float()
    idx = torch.randint(0, 50, (21 * n,), generator=g)
    tables = torch.randn(21, 1 << n, generator=g)
    out, addr = native.lut_forward(x, idx, tables)
    want_out, want_addr = lookup(x.index_select(0, idx), tables)
    assert torch.equal(out, want_out) and torch.equal(addr.long(), want_addr)


@pytest.mark.parametrize("n", [2, 6, 7, 8])
@pytest.mark.parametrize("wiring", ["learnable", "random"])
def test_the_layers_byte_forward_is_pytorchs(n, wiring):
    torch.manual_seed(n)
    layer = LUTLayer(40, 25, n, wiring)
    x = (torch.rand(40, 19) < 0.5).to(torch.uint8)
    sel = x.index_select(0, layer.wiring_indices().flatten())
    got = layer.forward_bits(x), layer.lookup_bits(sel)
    layer.native = False
    assert torch.equal(got[0], layer.forward_bits(x)) and torch.equal(got[1], layer.lookup_bits(sel))
    assert torch.equal(got[0], layer.forward_fm(x.float()).to(torch.uint8))


@pytest.mark.parametrize("dims, bits, slots", [(3, 7, 40), (5, 15, 300)])  # 300: blocks of 256 and a rest
def test_thermometer_grad_is_the_product(dims, bits, slots):
    g = torch.Generator().manual_seed(bits)
    levels = torch.randint(0, bits + 1, (dims, 33), generator=g)
    x = (levels[:, None, :] > torch.arange(bits)[None, :, None]).float().reshape(dims * bits, 33)
    grad = torch.randn(slots, 33, generator=g)
    got = native.thermometer_grad(levels, grad.t().contiguous(), bits)
    torch.testing.assert_close(got, (2 * x - 1) @ grad.t(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, thermometer_wiring_grad(grad, x, bits, batched=False), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("slots", [64, 200])  # whole chunks of 64 slots, and a rest
def test_thermometer_grad_sums_in_the_histogram_order(slots):
    """The same bits as a histogram of the gradient rows by level (samples in batch order), its running
    sum from the top level down, then 2 x that - the batch's total (summed sample by sample)."""
    g = torch.Generator().manual_seed(slots)
    bits, batch = 15, 96
    levels = torch.randint(0, bits + 1, (7, batch), generator=g)
    grad_t = torch.randn(batch, slots, generator=g)
    hist = torch.zeros(7, bits + 1, slots)
    for d in range(7):
        for b in range(batch):
            hist[d, levels[d, b]] += grad_t[b]
    for m in range(bits - 1, 0, -1):
        hist[:, m] += hist[:, m + 1]
    total = torch.zeros(slots)
    for b in range(batch):
        total += grad_t[b]
    assert torch.equal(native.thermometer_grad(levels, grad_t, bits), (2 * hist[:, 1:] - total).reshape(7 * bits, slots))


def test_thermometer_grad_split_over_threads_is_the_same():
    """With --threads > 1 the dimensions are split among threads: the same bits for any count."""
    g = torch.Generator().manual_seed(3)
    levels = torch.randint(0, 16, (11, 64), generator=g)
    grad_t = torch.randn(64, 300, generator=g)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = native.thermometer_grad(levels, grad_t, 15)
        for count in (2, 3, 11):
            torch.set_num_threads(count)
            assert torch.equal(native.thermometer_grad(levels, grad_t, 15), one)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("rows", [64, 70])  # whole blocks of 16, and a short last block
def test_block_max_is_torchs_amax(rows):
    g = torch.Generator().manual_seed(rows)
    w = torch.rand(rows, 37, generator=g)
    w[3, 5], w[20, 7], w[rows - 1, 9] = float("-inf"), float("nan"), float("nan")
    w[17:32, 11] = float("-inf")  # a block of masked sources
    full = rows // 16 * 16
    want = w[:full].view(rows // 16, 16, 37).amax(1)
    if full < rows:
        want = torch.cat([want, w[full:].amax(0, keepdim=True)])
    torch.testing.assert_close(native.block_max(w, 16), want, rtol=0, atol=0, equal_nan=True)


def test_order_by_slot_is_a_stable_sort():
    g = torch.Generator().manual_seed(0)
    flat = torch.unique(torch.randint(0, 40 * 30, (300,), generator=g))  # row-major entries of a 40 x 30 matrix
    src, slot = flat // 30, flat % 30
    by_slot, ptr, pos = native.order_by_slot(src, slot, 30)
    want = torch.argsort(slot * 40 + src)
    assert torch.equal(pos, want) and torch.equal(by_slot, src[want])
    assert torch.equal(ptr, torch.cat([torch.zeros(1, dtype=torch.int64), torch.bincount(slot, minlength=30).cumsum(0)]))


def test_more_than_eight_inputs_is_refused():
    with pytest.raises(ValueError, match="1 to 8 inputs"):
        native.efd_surface(torch.zeros(2, 1 << 9), 0.1, 0.3)
