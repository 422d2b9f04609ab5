"""Models: thermometer code, LUT layer forward/EFD/wiring gradients, heads, normaliser."""
import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from dwc.models import ActorConfig, LUTLayer, ObsNormalizer, Thermometer, build_actor, efd_matrix, thermometer_thresholds


@pytest.mark.parametrize("bits", [5, 15, 63, 255])
def test_thermometer_thresholds(bits):
    t = thermometer_thresholds(bits)
    assert t.numel() == bits
    assert torch.all(t[1:] > t[:-1])  # strictly increasing
    assert torch.allclose(t, -t.flip(0), atol=1e-12)  # symmetric
    assert t[0].item() == pytest.approx(-10.0) and t[-1].item() == pytest.approx(10.0)
    assert t[bits // 2].item() == 0.0  # the extra 0 in the middle
    # Gaussian quantiles: the inner thresholds are denser than the outer ones.
    gaps = (t[1:] - t[:-1]).numpy()
    assert gaps[bits // 2] < gaps[0]


def test_thermometer_rejects_even_bits():
    with pytest.raises(ValueError):
        thermometer_thresholds(64)


def test_thermometer_encoding_is_monotone_bits():
    enc = Thermometer(dim=3, bits=7)
    x = torch.tensor([[-11.0, 0.0, 10.0], [0.1, -0.1, 3.0]])
    bits = enc(x).view(2, 3, 7)
    thr = enc.thresholds
    for b in range(2):
        for d in range(3):
            expect = (x[b, d] >= thr).float()
            assert torch.equal(bits[b, d], expect)
    assert bits[0, 0].sum() == 0 and bits[0, 2].sum() == 7


def test_normalizer_matches_batch_statistics_and_freezes():
    torch.manual_seed(0)
    data = torch.randn(1000, 4, dtype=torch.float64) * torch.tensor([1.0, 5.0, 0.1, 30.0]) + 3.0
    norm = ObsNormalizer(4)
    for chunk in data.split(37):
        norm.update(chunk)
    assert torch.allclose(norm.mean, data.mean(0), atol=1e-6)
    assert torch.allclose(norm.var, data.var(0, unbiased=False), rtol=1e-6)
    norm.freeze()
    before = norm.mean.clone()
    norm.update(torch.full((10, 4), 1e6, dtype=torch.float64))
    assert torch.equal(norm.mean, before)
    out = norm(torch.full((1, 4), 1e9))
    assert torch.all(out == 10.0)  # clipped


def _truth_table_forward(layer: LUTLayer, x: torch.Tensor) -> torch.Tensor:
    """Explicit per-sample, per-LUT lookup: the definition the vectorised layer must match."""
    idx = layer.wiring_indices()
    out = torch.zeros(x.shape[0], layer.out_features)
    for b in range(x.shape[0]):
        for j in range(layer.out_features):
            addr = sum(int(x[b, idx[j, k]].item()) << k for k in range(layer.n))
            out[b, j] = float(layer.tables[j, addr].item() > 0)
    return out


@pytest.mark.parametrize("n,wiring", [(2, "random"), (4, "learnable"), (6, "learnable"), (6, "random")])
def test_lut_forward_equals_truth_table(n, wiring):
    torch.manual_seed(n)
    layer = LUTLayer(20, 12, n=n, wiring=wiring)
    x = (torch.rand(16, 20) > 0.5).float()
    assert torch.equal(layer(x), _truth_table_forward(layer, x))


def test_random_wiring_is_balanced():
    layer = LUTLayer(10, 20, n=5, wiring="random")
    counts = torch.bincount(layer.wiring_indices().flatten(), minlength=10)
    assert counts.min() == counts.max() == 10


def _brute_force_efd(tables: torch.Tensor, addr: int, k: int, n: int, alpha: float, beta: float) -> float:
    """Sum over every address pair differing only in bit k of (T[..1..] - T[..0..]),
    weighted by alpha * beta ** (Hamming distance to the current address, bit k ignored)."""
    total = 0.0
    others = [b for b in range(n) if b != k]
    for values in itertools.product([0, 1], repeat=n - 1):
        base = sum(v << b for v, b in zip(values, others))
        h = sum(((base >> b) & 1) != ((addr >> b) & 1) for b in others)
        diff = tables[base | (1 << k)].item() - tables[base].item()
        total += alpha * beta ** h * diff
    return total


@pytest.mark.parametrize("n", [2, 3, 4])
def test_efd_gradient_matches_brute_force(n):
    torch.manual_seed(0)
    layer = LUTLayer(8, 5, n=n, wiring="random")
    x = (torch.rand(6, 8) > 0.5).float().requires_grad_(True)
    g_out = torch.randn(6, 5)
    layer(x).backward(g_out)
    alpha, beta = 0.5 * 0.75 ** (n - 1), 1.0 / 3.0
    idx = layer.wiring_indices()
    expect = torch.zeros(6, 8)
    expect_tables = torch.zeros_like(layer.tables)
    for b in range(6):
        for j in range(5):
            addr = sum(int(x[b, idx[j, k]].item()) << k for k in range(n))
            expect_tables[j, addr] += g_out[b, j]  # straight-through at the looked-up entry
            for k in range(n):
                expect[b, idx[j, k]] += g_out[b, j] * _brute_force_efd(layer.tables[j], addr, k, n, alpha, beta)
    assert torch.allclose(x.grad, expect, atol=1e-5)
    assert torch.allclose(layer.tables.grad, expect_tables, atol=1e-6)


def test_efd_with_beta_zero_is_plain_finite_difference():
    m = efd_matrix(3, alpha=1.0, beta=0.0).view(8, 8, 3)  # [k_addr, a, bit]
    table = torch.randn(8)
    surface = torch.einsum("k,kab->ab", table, m)
    for a in range(8):
        for k in range(3):
            fd = table[a | (1 << k)] - table[a & ~(1 << k)]
            assert surface[a, k].item() == pytest.approx(fd.item(), abs=1e-6)


@pytest.mark.parametrize("sources,luts,n,spread", [(30, 8, 3, 1.0), (300, 64, 4, 1.0), (300, 64, 4, 30.0)])
def test_learnable_wiring_gradients(sources, luts, n, spread):
    """300 sources take the blocked CPU search (18 blocks and a short one), at init and with the
    scores spread apart as training does."""
    torch.manual_seed(1)
    layer = LUTLayer(sources, luts, n=n, wiring="learnable", sparse_softmax=True)
    dense = LUTLayer(sources, luts, n=n, wiring="learnable", sparse_softmax=False)
    with torch.no_grad():
        layer.wiring_weights.mul_(spread)
    dense.load_state_dict(layer.state_dict())
    x = (torch.rand(10, sources) > 0.5).float()
    g_out = torch.randn(10, luts)
    xs = [x.clone().requires_grad_(True) for _ in range(2)]
    layer(xs[0]).backward(g_out)
    dense(xs[1]).backward(g_out)
    # The wiring weight gradient: every candidate source gets g * (2x - 1) of its slot.
    assert layer.wiring_weights.grad is not None and layer.wiring_weights.grad.abs().sum() > 0
    assert torch.allclose(layer.wiring_weights.grad, dense.wiring_weights.grad, atol=1e-5)
    # The sparse softmax equals the dense softmax product to float precision at tau = 1e-3.
    assert layer.soft_wiring().layout == torch.sparse_csr
    assert xs[0].grad.abs().sum() > 0
    assert torch.allclose(xs[0].grad, xs[1].grad, atol=1e-4, rtol=1e-3)


def test_learnable_wiring_weight_gradient_formula():
    torch.manual_seed(2)
    layer = LUTLayer(12, 4, n=2, wiring="learnable")
    x = (torch.rand(5, 12) > 0.5).float()
    # Capture the gradient arriving at the selected bits by hooking a leaf copy of them.
    idx = layer.wiring_indices().flatten()
    sel = x[:, idx].clone().requires_grad_(True)
    from dwc.models.lut_efd import LutLookup
    out = LutLookup.apply(sel.t().contiguous(), layer.tables, layer.efd).t()
    g_out = torch.randn_like(out)
    (g_sel,) = torch.autograd.grad(out, sel, g_out)
    layer(x).backward(g_out)
    expect = (2 * x - 1).t() @ g_sel  # (sources, slots)
    assert torch.allclose(layer.wiring_weights.grad, expect, atol=1e-5)


def test_thermometer_wiring_gradient_equals_dense():
    from dwc.models.lut_wiring import thermometer_wiring_grad
    torch.manual_seed(3)
    enc = Thermometer(dim=5, bits=9)
    x = enc(torch.randn(40, 5) * 4).t().contiguous()  # feature-major (45, 40), includes saturation
    g = torch.randn(24, 40)
    for batched in (False, True):  # the CPU loops and the GPU's batched form, both checked here
        assert torch.allclose(thermometer_wiring_grad(g, x, 9, batched), (2 * x - 1) @ g.t(), atol=1e-4)
    # and through the layer: a first layer that knows its input is a thermometer code
    layer = LUTLayer(45, 8, n=3, thermometer_bits=9)
    plain = LUTLayer(45, 8, n=3)
    plain.load_state_dict(layer.state_dict())
    for l in (layer, plain):
        l(x.t()).backward(torch.ones(40, 8))
    assert torch.allclose(layer.wiring_weights.grad, plain.wiring_weights.grad, atol=1e-4)


def test_argmax_cache_follows_weight_updates():
    layer = LUTLayer(16, 4, n=2)
    with torch.no_grad():
        layer.wiring_weights[:, 0].zero_()
        layer.wiring_weights[5, 0] = 10.0
    assert layer.wiring_indices()[0, 0] == 5  # populates the cache
    with torch.no_grad():
        layer.wiring_weights[9, 0] = 20.0  # in-place, as an optimiser step does
    assert layer.wiring_indices()[0, 0] == 9


@pytest.mark.parametrize("fused", [True, False])
def test_forward_uses_current_wiring_after_optimizer_steps(fused):
    """Fused Adam updates weights without bumping their version: the wiring must still follow."""
    torch.manual_seed(0)
    layer = LUTLayer(24, 16, n=3)
    opt = torch.optim.Adam(layer.parameters(), lr=0.05, fused=fused)
    x = (torch.rand(32, 24) > 0.5).float()
    first = layer.wiring_indices().clone()
    for _ in range(20):
        layer(x).sum().backward()
        opt.step()
        opt.zero_grad()
    assert not torch.equal(first, layer.wiring_indices())  # the wiring did move
    assert torch.equal(layer.wiring_indices().flatten(), layer.wiring_weights.argmax(0))
    assert torch.equal(layer(x), _truth_table_forward(layer, x))


@pytest.mark.parametrize("policy", ["dwc", "mlp"])
def test_actor_interface(policy):
    cfg = ActorConfig(policy=policy, width=64, lut_inputs=4, thermo_bits=7, hidden=32)
    actor = build_actor(cfg, obs_dim=5, action_dim=3, action_low=[-2, -1, 0], action_high=[2, 1, 1])
    obs = torch.randn(9, 5) * 3
    mean, log_std = actor.dist_params(obs)
    assert mean.shape == log_std.shape == (9, 3)
    a = actor.act(obs)
    low, high = torch.tensor([-2.0, -1, 0]), torch.tensor([2.0, 1, 1])
    assert torch.all(a >= low) and torch.all(a <= high)
    if policy == "dwc":
        # width 64 is rounded down to 63 = 3 groups of 21; popcounts are integers in range
        assert actor.luts[-1].out_features == 63
        pc = actor.popcounts(obs)
        assert pc.shape == (9, 3) and torch.all((pc >= 0) & (pc <= 21)) and torch.equal(pc, pc.round())
        # the deterministic action is a function of the popcounts alone
        x = 1e-3 + (1 - 2e-3) * pc / 21
        u = torch.exp(actor.head.log_alpha) * (x - 0.5) + actor.head.beta
        assert torch.allclose(a, torch.tanh(u) * actor.action_scale + actor.action_bias, atol=1e-6)


def test_dwc_tables_stay_clamped_and_all_parts_learn():
    torch.manual_seed(0)
    cfg = ActorConfig(width=32, lut_inputs=3, thermo_bits=5)
    actor = build_actor(cfg, 4, 2, [-1, -1], [1, 1])
    opt = torch.optim.Adam(actor.parameters(), lr=0.5)
    before = {k: v.clone() for k, v in actor.state_dict().items()}
    for _ in range(3):
        mean, log_std = actor.dist_params(torch.randn(64, 4))
        (mean.square().sum() + log_std.sum()).backward()
        opt.step()
        opt.zero_grad()
        actor.constrain_()
    for layer in actor.luts:
        assert layer.tables.abs().max() <= 1.0
    changed = [k for k, v in actor.state_dict().items() if not torch.equal(v, before[k])]
    for part in ("luts.0.tables", "luts.0.wiring_weights", "luts.1.wiring_weights", "head.log_alpha", "head.beta"):
        assert part in changed, part


def test_inference_state_dict_round_trip_is_exact_and_small():
    torch.manual_seed(0)
    cfg = ActorConfig(width=96, lut_inputs=6, thermo_bits=15)
    actor = build_actor(cfg, 6, 3, [-1] * 3, [1] * 3)
    obs = torch.randn(200, 6) * 2
    actor.normalizer.update(obs)
    slim = actor.inference_state_dict()
    assert not any(k.endswith("wiring_weights") for k in slim)
    copy = build_actor(cfg, 6, 3, [-1] * 3, [1] * 3)
    copy.load_state_dict(slim)
    assert torch.equal(actor.popcounts(obs), copy.popcounts(obs))
    assert torch.equal(actor.act(obs), copy.act(obs))
    size = sum(v.numel() * v.element_size() for v in slim.values())
    full = sum(v.numel() * v.element_size() for v in actor.state_dict().values())
    assert size < full / 5


CUDA_ACTORS = {  # every actor type, small: the same code path must give the same numbers on both devices
    "dwc-learnable": ActorConfig(width=256, thermo_bits=15),
    "dwc-random": ActorConfig(width=256, thermo_bits=15, wiring="random"),
    "gates": ActorConfig(policy="gates", width=256, thermo_bits=15),
    "qmlp": ActorConfig(policy="qmlp", hidden=32, layers=2, thermo_bits=15),
    "mlp": ActorConfig(policy="mlp", hidden=64),
}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("kind", list(CUDA_ACTORS))
def test_cpu_and_cuda_agree(kind):
    """Deterministic actions bit-identical for the logic circuits (their outputs are integer
    popcounts or codes), float outputs and every parameter gradient within float tolerance."""
    torch.manual_seed(0)
    cfg = CUDA_ACTORS[kind]
    cpu = build_actor(cfg, 11, 4, [-1] * 4, [1] * 4)
    gpu = build_actor(cfg, 11, 4, [-1] * 4, [1] * 4)
    gpu.load_state_dict(cpu.state_dict())
    gpu = gpu.cuda()
    obs = torch.randn(512, 11) * 2
    cpu.normalizer.update(obs)
    gpu.normalizer.update(obs.cuda())
    if hasattr(cpu, "popcounts"):
        assert torch.equal(cpu.popcounts(obs), gpu.popcounts(obs.cuda()).cpu())
    if kind == "qmlp":  # the integer output codes (tanh of them may differ in the last ulp across devices)
        cpu.eval(), gpu.eval()
        with torch.no_grad():
            codes_c, e_c = cpu.net.output_codes(cpu.normalizer(obs))
            codes_g, e_g = gpu.net.output_codes(gpu.normalizer(obs.cuda()))
        assert e_c == e_g and torch.equal(codes_c, codes_g.cpu())
        cpu.train(), gpu.train()
    m_c, s_c = cpu.dist_params(obs)
    m_g, s_g = gpu.dist_params(obs.cuda())
    assert torch.allclose(m_c, m_g.cpu(), atol=1e-5, rtol=1e-5)
    (m_c.sum() + s_c.sum()).backward()
    (m_g.sum() + s_g.sum()).backward()
    for (name, p_c), p_g in zip(cpu.named_parameters(), gpu.parameters()):
        assert (p_c.grad is None) == (p_g.grad is None), name
        if p_c.grad is not None:
            assert torch.allclose(p_c.grad, p_g.grad.cpu(), atol=1e-4, rtol=1e-4), name


@pytest.mark.parametrize("rows,cols", [(200, 37), (1000, 64), (64, 5)])
def test_column_max_equals_torch_max_with_first_index(rows, cols):
    """The blocked CPU argmax gives torch's values and the first maximal row, also with a leftover
    block, masked (-inf) sources and the ties of a one-hot wiring loaded from indices."""
    from dwc.models.column_search import column_max
    torch.manual_seed(0)
    w = torch.rand(rows, cols)
    w[::3] = float("-inf")  # sources outside an allowed mask
    top, idx = column_max(w)
    ref = w.max(dim=0)
    assert torch.equal(top, ref.values) and torch.equal(idx, w.argmax(0))
    onehot = torch.zeros(rows, cols)
    pick = torch.randint(rows, (cols,))
    onehot[pick, torch.arange(cols)] = 1.0
    assert torch.equal(column_max(onehot)[1], pick)
    tied = torch.zeros(rows, cols)  # all equal: the first row, as torch.argmax
    assert torch.equal(column_max(tied)[1], torch.zeros(cols, dtype=torch.int64))


@pytest.mark.parametrize("rows,cols", [(200, 37), (1000, 64), (64, 5), (1024, 300)])
def test_near_max_finds_exactly_the_entries_within_the_margin(rows, cols):
    """The blocked CPU search returns the same entries as a full scan: at init (many per column),
    with quantised ties, with -inf (masked) sources, and at a zero margin (the maxima only)."""
    from dwc.models.column_search import column_max, near_max
    torch.manual_seed(1)
    masked = torch.rand(rows, cols)
    masked[1::4] = float("-inf")
    for w in (torch.rand(rows, cols), (torch.rand(rows, cols) * 8).floor(), masked):
        top = column_max(w)[0]
        for margin in (0.0, 0.0162, 0.5):
            src, slot = near_max(w, top, margin)
            full = torch.nonzero(w >= top - margin, as_tuple=True)
            assert torch.equal((src * cols + slot).sort().values, full[0] * cols + full[1]), margin


@pytest.mark.parametrize("n", [2, 6, 8])
@pytest.mark.parametrize("wiring", ["learnable", "random", "learnable-sparse"])
def test_inference_forward_on_bytes_equals_the_training_forward(n, wiring):
    """Without autograd the circuit runs on uint8 bits (the first layer's thresholds only): the same
    output bits and actions."""
    wiring, _, optim = wiring.partition("-")
    cfg = ActorConfig(width=96, lut_inputs=n, wiring=wiring, thermo_bits=15, wiring_optim=optim or "dense")
    actor = build_actor(cfg, 5, 3, -np.ones(3), np.ones(3))
    obs = torch.randn(300, 5) * 2
    train_bits = actor.circuit_bits(actor.normalizer(obs))
    with torch.no_grad():
        fast_bits = actor.circuit_bits(actor.normalizer(obs))
        fast_mean = actor.dist_params(obs)[0]
    assert train_bits.requires_grad and fast_bits.dtype == train_bits.dtype
    assert torch.equal(fast_bits, train_bits.detach())
    assert torch.equal(fast_mean, actor.dist_params(obs)[0].detach())


def test_wiring_score_gradient_in_bf16_is_close_to_float32():
    """bf16 products (exact 2x-1, g rounded) stay within 1% of the float32 gradient, for a plain
    input and for a thermometer one (whose float32 route is the histogram)."""
    from dwc.models.lut_wiring import wiring_score_grad
    torch.manual_seed(0)
    g = torch.randn(96, 256)
    x = (torch.rand(300, 256) > 0.5).float()
    ref = (2 * x - 1) @ g.t()
    for bits, xin in ((0, x), (15, Thermometer(dim=20, bits=15).forward_fm(torch.randn(256, 20) * 3))):
        ref = (2 * xin - 1) @ g.t()
        assert torch.allclose(wiring_score_grad(g, xin, bits), ref, atol=1e-4)
        bf = wiring_score_grad(g, xin, bits, torch.bfloat16)
        assert bf.dtype == torch.float32 and bf.shape == ref.shape
        assert (bf - ref).norm() / ref.norm() < 0.01


def test_thermometer_feature_major_equals_transposed_forward():
    enc = Thermometer(dim=7, bits=15)
    xn = torch.randn(33, 7) * 4
    xn[0, 0] = enc.thresholds[3]  # exactly on a threshold: bit set (>=)
    assert torch.equal(enc.forward_fm(xn), enc(xn).t())
    few = torch.tensor([104, 0, 3, 3, 50, 17])  # any order, repeats: what a first layer's wiring reads
    many = torch.randperm(105).repeat(2)  # more reads than bits: encoded whole, then selected
    for rows in (few, many):
        for dtype in (torch.float32, torch.uint8):
            assert torch.equal(enc.forward_fm_rows(xn, rows, dtype), enc.forward_fm(xn, dtype)[rows])


def test_precision_changes_gradients_not_the_circuit():
    """bf16 training matmuls: the DWC's forward (the circuit) is identical, its wiring gradients
    stay close; the MLP actor's outputs move by bf16 rounding only."""
    from dwc.train.common import fast_bf16, resolve_precision
    torch.manual_seed(0)
    cfg = ActorConfig(width=96, lut_inputs=4, thermo_bits=15)
    a = build_actor(cfg, 6, 3, [-1] * 3, [1] * 3)
    b = build_actor(cfg, 6, 3, [-1] * 3, [1] * 3)
    b.load_state_dict(a.state_dict())
    b.set_precision(torch.bfloat16)
    obs = torch.randn(64, 6) * 2
    for actor in (a, b):
        actor.dist_params(obs)[0].square().sum().backward()
    assert torch.equal(a.popcounts(obs), b.popcounts(obs))
    for la, lb in zip(a.luts, b.luts):
        ga, gb = la.wiring_weights.grad, lb.wiring_weights.grad
        assert (ga - gb).norm() / ga.norm() < 0.01
    m32 = build_actor(ActorConfig(policy="mlp", hidden=64), 6, 3, [-1] * 3, [1] * 3)
    m16 = build_actor(ActorConfig(policy="mlp", hidden=64), 6, 3, [-1] * 3, [1] * 3)
    m16.load_state_dict(m32.state_dict())
    m16.set_precision(torch.bfloat16)
    mean32, mean16 = m32.dist_params(obs)[0], m16.dist_params(obs)[0]
    assert not torch.equal(mean32, mean16) and torch.allclose(mean32, mean16, atol=0.05)
    cpu = torch.device("cpu")
    assert resolve_precision("float32", cpu) == torch.float32 and resolve_precision("bfloat16", cpu) == torch.bfloat16
    assert resolve_precision("auto", cpu) == torch.float32  # bf16 cost the MLP return (results/hopper-ab): opt-in only
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():  # the speed probe (benchmarks, help) agrees with the CPU flags the kernel reports
        fast_flags = set(cpuinfo.read_text().split()) & {"amx_tile", "avx512_bf16"}
        assert fast_bf16(cpu) == bool(fast_flags), fast_flags
    from dwc.core.errors import UserError
    with pytest.raises(UserError, match="precision"):
        resolve_precision("fp8", cpu)


def test_twin_q_bf16_hidden_layer_stays_close_and_keeps_float32_output():
    from dwc.train.sac import TwinQ
    torch.manual_seed(0)
    q32 = TwinQ(14, 256)
    q16 = TwinQ(14, 256, mid_dtype=torch.bfloat16)
    q16.load_state_dict(q32.state_dict())
    x, a = torch.randn(128, 11), torch.rand(128, 3) * 2 - 1
    v32, v16 = q32(x, a), q16(x, a)
    assert v16.dtype == torch.float32 and v16.shape == (2, 128)
    assert not torch.equal(v32, v16) and (v32 - v16).abs().max() < 0.01 * v32.abs().max() + 1e-3
    for q in (q32, q16):
        q(x, a).sum().backward()
    for p32, p16 in zip(q32.parameters(), q16.parameters()):
        assert p16.grad.dtype == torch.float32
        assert (p32.grad - p16.grad).norm() / p32.grad.norm() < 0.05  # measured 2% at most (first layer)
