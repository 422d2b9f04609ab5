"""The learnable wiring's sparse update (--wiring-optim sparse): the gradient on the softmax's support
equals the dense one there, the lazy Adam step equals torch's Adam where both see the same gradient
and leaves the other scores (and their moments) alone, and SAC training with it runs, checkpoints
and resumes bit for bit."""
import io
import json

import pytest
import torch

from dwc.cli import main
from dwc.core.config import ActorConfig, SACConfig
from dwc.models import build_actor
from dwc.models.lut import SOFTMAX_MARGIN, LUTLayer
from dwc.train.optim import WiringAdam
from helpers import ENV, assert_one_line_error, run_cli, small_args



def _layers(sources=300, luts=96, n=6, bits=0, seed=0):
    """A sparse-update layer and a dense one with the same parameters."""
    torch.manual_seed(seed)
    sparse = LUTLayer(sources, luts, n, thermometer_bits=bits, wiring_optim="sparse")
    dense = LUTLayer(sources, luts, n, thermometer_bits=bits)
    dense.load_state_dict(sparse.state_dict())
    return sparse, dense


def _bits(sources, batch, bits=0, seed=1):
    g = torch.Generator().manual_seed(seed)
    if not bits:
        return (torch.rand(sources, batch, generator=g) < 0.5).float()
    levels = torch.randint(0, bits + 1, (sources // bits, batch), generator=g)
    return (levels[:, None] > torch.arange(bits)[None, :, None]).float().reshape(sources, batch)


@pytest.mark.parametrize("bits", [0, 7])
def test_the_sparse_gradient_is_the_dense_one_on_the_softmax_support(bits):
    sparse, dense = _layers(sources=21 * 7, luts=64, n=4, bits=bits)
    x = _bits(21 * 7, 48, bits)
    gy = torch.randn(64, 48, generator=torch.Generator().manual_seed(2))
    for layer in (sparse, dense):
        layer.forward_fm(x).backward(gy)
    grad = sparse.wiring_weights.grad
    assert grad.is_sparse and dense.wiring_weights.grad.layout == torch.strided
    w = sparse.wiring_weights.detach()
    support = w >= w.max(0).values - SOFTMAX_MARGIN * sparse.tau
    src, slot = grad.coalesce().indices()
    assert torch.equal(torch.zeros_like(support).index_put_((src, slot), torch.tensor(True)), support)
    assert 1 <= support.sum(0).min() and support.sum() < w.numel() / 4  # a few candidates per slot
    torch.testing.assert_close(grad.to_dense()[support], dense.wiring_weights.grad[support], rtol=1e-5, atol=1e-6)
    # the rest is unchanged (to float32 rounding: the native kernel sums the tables' gradient in another order)
    torch.testing.assert_close(sparse.tables.grad, dense.tables.grad, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bits, refresh, optim", [(7, 0, "sparse"), (0, 0, "sparse"), (0, 2, "sparse"),
                                                  (7, 0, "dense"), (0, 0, "dense")])
def test_the_native_backward_gives_pytorchs_gradients(bits, refresh, optim):
    """The compiled kernels (dwc.models.native) against the layer's PyTorch code at the parameters of a
    few optimiser steps: the same outputs, and the same gradients of the tables, the input and the
    scores (on the same support) to float32 rounding; with a dense refresh every second step, and
    with the published dense update, too."""
    from dwc.models import native

    assert native.library() is not None, "a C compiler is part of the toolchain (docs/troubleshooting.md)"
    torch.manual_seed(0)
    layer = LUTLayer(21 * 7, 60, 6, thermometer_bits=bits, wiring_optim=optim, dense_every=refresh)
    twin = LUTLayer(21 * 7, 60, 6, thermometer_bits=bits, wiring_optim=optim, dense_every=refresh)
    twin.native = False
    opt = WiringAdam(layer.parameters(), lr=1e-2, eps=1e-5, fused=True)
    kinds = []
    for step in range(4):
        twin.load_state_dict(layer.state_dict())
        twin.wiring_weights.dwc_steps = getattr(layer.wiring_weights, "dwc_steps", 0)
        x = _bits(21 * 7, 40, bits, seed=step)
        gy = torch.randn(60, 40, generator=torch.Generator().manual_seed(10 + step))
        got = []
        for each in (layer, twin):
            each.zero_grad()
            xin = x.clone().requires_grad_(not bits)
            out = each.forward_fm(xin)
            out.backward(gy)
            got.append((out, each.tables.grad, each.wiring_weights.grad, xin.grad))
        (out, gt, gw, gx), (out_t, gt_t, gw_t, gx_t) = got
        assert torch.equal(out, out_t)
        torch.testing.assert_close(gt, gt_t, rtol=1e-6, atol=1e-6)
        kinds.append("sparse" if gw.is_sparse else "dense")
        assert gw.is_sparse == gw_t.is_sparse
        if gw.is_sparse:
            assert torch.equal(gw.coalesce().indices(), gw_t.coalesce().indices())
            gw, gw_t = gw.coalesce().values(), gw_t.coalesce().values()
        torch.testing.assert_close(gw, gw_t, rtol=1e-5, atol=1e-5)
        if not bits:
            torch.testing.assert_close(gx, gx_t, rtol=1e-6, atol=1e-6)
        opt.step()
    assert kinds == (["sparse", "dense"] * 2 if refresh else [optim] * 4)
    assert layer._native_backward(x) and not twin._native_backward(x)


def test_the_lazy_step_is_adams_step_on_the_entries_with_a_gradient():
    """Same gradient values (dense Adam gets zeros off the support): the first step from zero moments is
    bit for bit Adam's on every entry, tables included; later steps with the same support too (to the
    last bit of float32)."""
    sparse, dense = _layers()
    x = _bits(300, 64)
    lazy = WiringAdam(sparse.parameters(), lr=3e-4, eps=1e-5, fused=True)
    lazy.native = False  # PyTorch's Adam on the gathered entries (the native kernel: the test below)
    adam = torch.optim.Adam(dense.parameters(), lr=3e-4, eps=1e-5, fused=True)
    before = sparse.wiring_weights.detach().clone()
    for step in range(3):
        gy = torch.randn(96, 64, generator=torch.Generator().manual_seed(10 + step))
        lazy.zero_grad()
        adam.zero_grad()
        sparse.forward_fm(x).backward(gy)
        dense.forward_fm(x).backward(gy)
        grad = sparse.wiring_weights.grad
        if step == 0:
            support = grad.coalesce().indices()
        else:  # the same entries every step: then dense Adam never moves the others either
            grad = torch.sparse_coo_tensor(support, grad.to_dense()[support[0], support[1]], grad.shape,
                                           check_invariants=True)
            sparse.wiring_weights.grad = grad
        dense.wiring_weights.grad = grad.to_dense()
        dense.tables.grad = sparse.tables.grad.clone()  # the native kernel's sum may differ in its last bit
        lazy.step()
        adam.step()
        # Adam's kernel takes a vector path and a scalar tail: on the gathered entries an element may fall
        # in the other one and round its last bit differently from the second step on
        same = torch.equal if step == 0 else lambda a, b: torch.allclose(a, b, rtol=1e-6, atol=0)
        for name in ("wiring_weights", "tables"):
            p, q = getattr(sparse, name), getattr(dense, name)
            assert same(p, q), (step, name)
            for k in ("step", "exp_avg", "exp_avg_sq"):
                assert same(lazy.state[p][k], adam.state[q][k]), (step, name, k)
    moved = sparse.wiring_weights.detach() != before
    on_support = torch.zeros_like(moved).index_put_(tuple(support), torch.tensor(True))
    assert moved.any() and not (moved & ~on_support).any()


@pytest.mark.parametrize("weight_decay, decoupled, maximize", [(0.0, False, False), (0.1, False, True), (0.1, True, False)])
def test_the_native_lazy_step_is_pytorchs(weight_decay, decoupled, maximize):
    """WiringAdam's lazy step by the compiled kernel against the same step by PyTorch's Adam on the
    gathered entries: the same parameters and moments to float32 rounding, over steps whose supports
    differ; every other entry untouched."""
    torch.manual_seed(0)
    w = torch.randn(50, 40)
    params = [torch.nn.Parameter(w.clone()) for _ in range(2)]
    opts = [WiringAdam([p], lr=1e-2, eps=1e-5, fused=True, weight_decay=weight_decay,
                       decoupled_weight_decay=decoupled, maximize=maximize) for p in params]
    opts[1].native = False
    for step in range(5):
        g = torch.Generator().manual_seed(step)
        idx = torch.nonzero(torch.rand(50, 40, generator=g) < 0.2).t()
        values = torch.randn(idx.shape[1], generator=g)
        for p, opt in zip(params, opts):
            p.grad = torch.sparse_coo_tensor(idx, values, p.shape, check_invariants=True).coalesce()
            opt.step()
        torch.testing.assert_close(params[0], params[1], rtol=1e-6, atol=1e-7)
        for k in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opts[0].state[params[0]][k], opts[1].state[params[1]][k], rtol=1e-6, atol=1e-8)
        assert int(opts[0].state[params[0]]["step"]) == int(opts[1].state[params[1]]["step"]) == step + 1
    never = torch.ones(50, 40, dtype=torch.bool)
    for step in range(5):
        g = torch.Generator().manual_seed(step)
        never &= ~(torch.rand(50, 40, generator=g) < 0.2)
    assert never.any() and torch.equal(params[0].detach()[never], w[never])


def test_scores_without_a_gradient_keep_their_value_and_moments():
    """Lazy: an entry updated once and then left out keeps its score and both moments, where dense
    Adam would move it on by its momentum; the bias correction follows the parameter's step count."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.rand(5, 4))
    opt = WiringAdam([w], lr=1e-2, eps=1e-5, fused=True)
    idx = torch.tensor([[0, 3], [1, 2]])
    w.grad = torch.sparse_coo_tensor(idx, torch.tensor([1.0, -2.0]), w.shape, check_invariants=True)
    opt.step()
    after_first = w.detach().clone()
    moments = {k: opt.state[w][k].clone() for k in ("exp_avg", "exp_avg_sq")}
    w.grad = torch.sparse_coo_tensor(torch.tensor([[4], [0]]), torch.tensor([0.5]), w.shape, check_invariants=True)
    opt.step()
    assert float(opt.state[w]["step"]) == 2
    for i, j in idx.t().tolist():  # left alone
        assert w[i, j] == after_first[i, j]
        for k, m in moments.items():
            assert opt.state[w][k][i, j] == m[i, j]
    changed = (w.detach() != after_first).nonzero().tolist()
    assert changed == [[4, 0]]
    # the entry stepped at count 2: Adam's bias-corrected step, first moment 0.1 g, second 0.001 g^2
    m, v = 0.1 * 0.5, 0.001 * 0.25
    want = after_first[4, 0] - 1e-2 * (m / (1 - 0.9 ** 2)) / ((v / (1 - 0.999 ** 2)) ** 0.5 + 1e-5)
    assert torch.isclose(w[4, 0], want, rtol=1e-6)


def _learner(seed=0, refresh=0):
    from dwc.train.sac import SACLearner
    torch.manual_seed(seed)
    cfg = ActorConfig(width=64, lut_inputs=4, thermo_bits=15, wiring_optim="sparse", wiring_refresh=refresh)
    actor = build_actor(cfg, 11, 3, [-1] * 3, [1] * 3)
    actor.normalizer.update(torch.randn(200, 11, generator=torch.Generator().manual_seed(5)) * 3)
    return SACLearner(actor, 11, 3, SACConfig(batch_size=32), torch.device("cpu"))


def _updates(learner, gen, count):
    for i in range(count):
        b = 32
        batch = (torch.randn(b, 11, generator=gen), torch.randn(b, 11, generator=gen),
                 torch.rand(b, 3, generator=gen) * 2 - 1, torch.randn(b, generator=gen),
                 (torch.rand(b, generator=gen) < 0.1).float(), torch.randn(b, 3, generator=gen))
        learner.update(*batch, torch.randn(2, b, 3, generator=gen) if i % 2 == 0 else None)


@pytest.mark.parametrize("refresh", [0, 4])
def test_sac_with_the_sparse_update_resumes_bit_for_bit(refresh):
    """A learner saved after some updates (as a checkpoint holds it), loaded into a fresh one, then
    updated on the same minibatches as the original: every parameter and optimiser state equal; with
    a dense refresh every 4th wiring step, the resumed learner keeps the rhythm."""
    a = _learner(refresh=refresh)
    gen = torch.Generator().manual_seed(3)
    _updates(a, gen, 6)  # 6 actor steps: with refresh 4 the 4th was dense, the 6th is sparse
    assert all(p.grad is None or p.grad.is_sparse for p in (layer.wiring_weights for layer in a.actor.luts))
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = _learner(seed=99, refresh=refresh)  # other initial parameters: everything must come from the checkpoint
    b.load_state_dict(torch.load(buf, weights_only=False))
    rng = gen.get_state()
    _updates(a, gen, 6)
    _updates(b, torch.Generator().set_state(rng), 6)
    for (name, x), y in zip(a.state_dict()["actor"].items(), b.state_dict()["actor"].values()):
        assert torch.equal(x, y), name
    for k in a.OPTIMIZERS:
        sa, sb = getattr(a, k).state_dict()["state"], getattr(b, k).state_dict()["state"]
        for i in sa:
            for name in sa[i]:
                assert torch.equal(sa[i][name], sb[i][name]), (k, i, name)
    for la, lb in zip(a.actor.luts, b.actor.luts):
        assert torch.equal(la.wiring_indices(), lb.wiring_indices())


def test_a_dense_refresh_every_k_steps(tmp_path):
    """--wiring-refresh K: the wiring's steps K, 2K, ... take the dense gradient (every score moves),
    the others the sparse one (only the support moves); the argmax and support stay exact across
    both kinds of step (a dense one ends the layer's tracked band)."""
    torch.manual_seed(0)
    layer = LUTLayer(21 * 7, 40, 6, thermometer_bits=7, wiring_optim="sparse", dense_every=3)
    opt = WiringAdam(layer.parameters(), lr=1e-3, eps=1e-5, fused=True)
    x = _bits(21 * 7, 48, 7)
    kinds = []
    for step in range(1, 10):
        before = layer.wiring_weights.detach().clone()
        opt.zero_grad()
        layer.forward_fm(x).backward(torch.randn(40, 48, generator=torch.Generator().manual_seed(step)))
        kinds.append("sparse" if layer.wiring_weights.grad.is_sparse else "dense")
        opt.step()
        moved = (layer.wiring_weights.detach() != before).float().mean().item()
        assert moved > 0.9 if kinds[-1] == "dense" else 0 < moved < 0.3
        scores = layer.wiring_weights.detach()
        top = scores.max(0).values
        assert torch.equal(layer.wiring_indices().flatten(), torch.argmax((scores == top).to(torch.uint8), 0))
        src, slot, _ = layer._support()
        assert torch.equal(torch.stack([src, slot], 1), torch.nonzero(scores >= top - SOFTMAX_MARGIN * layer.tau))
    assert kinds == ["sparse", "sparse", "dense"] * 3
    assert layer.wiring_weights.dwc_steps == int(opt.state[layer.wiring_weights]["step"]) == 9
    # the option: recorded in the run's config, refused without the sparse update
    run = tmp_path / "run"
    assert main(small_args(run, steps=300, extra=["--wiring-optim", "sparse", "--wiring-refresh", "4"])) == 0
    assert json.loads((run / "config.json").read_text())["actor"]["wiring_refresh"] == 4
    assert_one_line_error(run_cli("train", "--env", ENV, "--wiring-refresh", "4", "--out", str(tmp_path / "r")),
                          "--wiring-refresh applies to --wiring-optim sparse")


def test_train_with_the_sparse_update_checkpoints_and_resumes(tmp_path):
    run = tmp_path / "run"
    assert main(small_args(run, steps=300, extra=["--wiring-optim", "sparse"])) == 0
    assert json.loads((run / "config.json").read_text())["actor"]["wiring_optim"] == "sparse"
    assert main(["train", "--out", str(run), "--resume", "--steps", "400", "--no-progress"]) == 0
    ckpt = torch.load(run / "checkpoint.pt", weights_only=False)
    assert ckpt["step"] == 400 and "--wiring-optim sparse" in (run / "commands.txt").read_text()
    assert_one_line_error(run_cli("train", "--out", str(run), "--resume", "--wiring-optim", "dense"),
                          "--wiring-optim dense (the run has sparse)")


def test_the_sparse_update_is_refused_where_it_does_not_apply(tmp_path):
    for extra in (["--wiring", "random"], ["--policy", "mlp"], ["--algo", "ppo"]):
        assert_one_line_error(run_cli("train", "--env", ENV, "--wiring-optim", "sparse", *extra,
                                      "--out", str(tmp_path / "r")), "--wiring-optim sparse applies to")


@pytest.mark.parametrize("optim", ["dense", "sparse"])
@pytest.mark.parametrize("sources,bits", [(21 * 7, 7), (200, 0), (70, 0)])
def test_argmax_and_support_are_the_exact_ones(optim, sources, bits):
    """A layer that needs the softmax's support reads its argmax off the support's entries: still
    the first index of each slot's maximum (ties included), and the support every entry within the
    margin, in row-major order; with a source mask too."""
    torch.manual_seed(0)
    pool = torch.arange(0, sources, 2) if bits else None
    layer = LUTLayer(sources, 40, 6, thermometer_bits=bits, wiring_optim=optim, source_pool=pool)
    for trial in range(3):
        with torch.no_grad():
            w = layer.wiring_weights
            w.copy_(torch.rand_like(w) if trial == 0 else torch.randn_like(w) if trial == 1 else
                    torch.round(torch.rand_like(w) * 20) / 20)  # the last with many ties
        scores = w.detach() if pool is None else w.detach().masked_fill(~layer.allowed[:, None], float("-inf"))
        top = scores.max(0).values
        first = torch.argmax((scores == top).to(torch.uint8), 0)  # torch's argmax picks the first of equal ones
        assert torch.equal(layer.wiring_indices().flatten(), first), trial
        src, slot, _ = layer._support()
        assert torch.equal(torch.stack([src, slot], 1), torch.nonzero(scores >= top - SOFTMAX_MARGIN * layer.tau))


@pytest.mark.parametrize("lr", [3e-4, 5e-3])
def test_the_tracked_band_gives_the_exact_argmax_and_support_through_training(lr):
    """A sparse update moves only the support's scores, so the layer follows a band of entries near each
    slot's maximum instead of searching every score each step. Through lazy Adam steps, with slow
    maxima (the band holds) and fast sinking ones (it must search again), and after a change that was
    not a lazy step, the argmax and the support stay exactly those of a full search."""
    torch.manual_seed(0)
    pool = torch.arange(0, 21 * 7, 2)
    layer = LUTLayer(21 * 7, 40, 6, thermometer_bits=7, wiring_optim="sparse", source_pool=pool)
    opt = WiringAdam(layer.parameters(), lr=lr, eps=1e-5, fused=True)
    x = _bits(21 * 7, 48, 7)
    searches = 0
    for step in range(60):
        if step == 40:
            with torch.no_grad():  # not a lazy step: the band must not be trusted
                layer.wiring_weights[5:9].add_(0.5)
        tracked = getattr(layer, "_tracked", None)
        opt.zero_grad()
        layer.forward_fm(x).backward(torch.randn(40, 48, generator=torch.Generator().manual_seed(step)))
        searches += getattr(layer, "_tracked", None) is not tracked
        scores = layer.wiring_weights.detach().masked_fill(~layer.allowed[:, None], float("-inf"))
        top = scores.max(0).values
        assert torch.equal(layer.wiring_indices().flatten(), torch.argmax((scores == top).to(torch.uint8), 0))
        src, slot, _ = layer._support()
        assert torch.equal(torch.stack([src, slot], 1), torch.nonzero(scores >= top - SOFTMAX_MARGIN * layer.tau))
        opt.step()
    # the first search, the one after the foreign change, and at the large step size the sinking maxima
    assert searches == 2 if lr < 1e-3 else searches > 3


@pytest.mark.parametrize("optim", ["dense", "sparse"])
def test_training_logs_how_settled_the_wiring_is(optim):
    """wiring_stats (logged as wiring/candidates_per_input_l*): per learnable layer the mean number of
    candidates within the softmax margin of each input's best one; 1.0 once every input has a clear winner."""
    torch.manual_seed(0)
    actor = build_actor(ActorConfig(width=64, lut_inputs=4, thermo_bits=15, wiring_optim=optim), 11, 3, [-1] * 3, [1] * 3)
    stats = actor.wiring_stats()
    assert list(stats) == ["candidates_per_input_l0", "candidates_per_input_l1"]
    for layer, value in zip(actor.luts, stats.values()):
        w = layer.wiring_weights.detach()
        assert value == (w >= w.max(0).values - SOFTMAX_MARGIN * layer.tau).sum().item() / w.shape[1] > 1.5
    with torch.no_grad():  # a settled wiring: one clear winner per input
        for layer in actor.luts:
            rows, cols = layer.wiring_weights.shape
            layer.wiring_weights.zero_()[torch.arange(cols) % rows, torch.arange(cols)] = 1.0
    assert all(v == 1.0 for v in actor.wiring_stats().values())
    assert build_actor(ActorConfig(policy="mlp"), 11, 3, [-1] * 3, [1] * 3).wiring_stats() == {}


def test_a_sparse_update_with_a_dense_softmax_still_gives_a_row_major_support():
    torch.manual_seed(0)
    layer = LUTLayer(200, 40, 6, wiring_optim="sparse", sparse_softmax=False)
    w = layer.wiring_weights.detach()
    w.mul_(20)  # a narrow support, as in training: searched by row blocks, which finds it out of order
    src, slot, _ = layer._support()
    assert torch.equal(torch.stack([src, slot], 1),
                       torch.nonzero(w >= w.max(0).values - SOFTMAX_MARGIN * layer.tau))
