"""Adam that also takes sparse gradients: the learnable wiring's sparse update (``--wiring-optim sparse``).

With ``wiring_optim="sparse"`` a LUT layer's wiring scores get a gradient only at the candidates near
each slot's maximum (:meth:`dwc.models.lut.LUTLayer.sparse_score_grad`): a few per slot instead of
every source, 10.5M scores for the published 2 x 1024 size. :class:`WiringAdam` steps such a
parameter lazily: the entries with a gradient take exactly the step ``torch.optim.Adam`` takes (the
same kernel, on those entries gathered, with the parameter's own step count for the bias
correction, and the group's learning rate, betas, eps, weight decay and maximize), and every other
entry keeps its value and its moments until it has a gradient again (dense Adam would move it by
its decaying momentum). Dense gradients go through ``torch.optim.Adam`` unchanged, and the state
dict has Adam's layout, so this is a drop-in replacement for the actor's optimiser.

It also counts each parameter's steps (``dwc_steps``: Adam's own count, restored with its state, so a
resumed run keeps its rhythm) and the dense ones among them (``dwc_dense_steps``): with
``--wiring-refresh K`` every K-th step of the wiring scores is dense, and a layer's tracked band must
not outlive one.
"""
from __future__ import annotations

import torch
from torch.optim.adam import adam
from torch.optim.optimizer import _get_scalar_dtype

from dwc.models import native


class WiringAdam(torch.optim.Adam):
    """``torch.optim.Adam`` (same arguments, same state) that also steps parameters whose gradient is
    a sparse COO tensor, lazily: only the entries present in it change."""

    native = True  # the lazy step by the compiled kernel where it applies (dwc.models.native)

    @torch.no_grad()
    def step(self, closure=None):
        sparse = {id(p): p.grad for group in self.param_groups for p in group["params"]
                  if p.grad is not None and p.grad.is_sparse}
        if not sparse:
            loss = super().step(closure)
            self._count_steps(sparse)
            return loss
        params = {id(p): p for group in self.param_groups for p in group["params"]}
        for key in sparse:  # Adam refuses sparse gradients: it steps the dense ones alone
            params[key].grad = None
        try:
            loss = super().step(closure)
        finally:
            for key, grad in sparse.items():
                params[key].grad = grad
        for group in self.param_groups:
            for p in group["params"]:
                if id(p) in sparse:
                    self._lazy_step(p, sparse[id(p)], group)
        self._count_steps(sparse)
        return loss

    def _count_steps(self, sparse: dict) -> None:
        """Host-side counts (no device sync): Adam steps every parameter that has a gradient once."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.dwc_steps = getattr(p, "dwc_steps", 0) + 1
                    if id(p) not in sparse:
                        p.dwc_dense_steps = getattr(p, "dwc_dense_steps", 0) + 1

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state.get(p, {})
                p.dwc_steps = int(state["step"]) if "step" in state else 0
                p.dwc_dense_steps = getattr(p, "dwc_dense_steps", 0) + 1  # the scores were replaced

    def _lazy_step(self, p: torch.Tensor, grad: torch.Tensor, group: dict) -> None:
        if group["amsgrad"] or group["differentiable"] or torch.is_complex(p) or not p.is_contiguous():
            raise ValueError("WiringAdam's sparse step takes contiguous real parameters, without amsgrad "
                             "or differentiable")
        state = self.state[p]
        if not state:  # Adam's initial state: its checkpoints and ours are alike
            state["step"] = (torch.zeros((), dtype=_get_scalar_dtype(is_fused=group["fused"]), device=p.device)
                             if group["fused"] or group["capturable"] else torch.tensor(0.0, dtype=_get_scalar_dtype()))
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        strides = torch.tensor(p.stride(), device=p.device)  # of a contiguous parameter: flat positions
        flat = (grad._indices() * strides[:, None]).sum(0)
        if not grad.is_coalesced() and not bool((flat[1:] > flat[:-1]).all()):
            # autograd drops the coalesced flag of the gradient it stores; a layer's gradient comes sorted
            # and unique (checked above), and only one summed from several backward passes needs this sort
            grad = grad.coalesce()
            flat = (grad._indices() * strides[:, None]).sum(0)
        version = p._version
        if self.native and native.usable(p, state["exp_avg"], state["exp_avg_sq"]) and not group["capturable"]:
            # one pass over the entries where PyTorch takes seven (gathers, Adam, scatters): the moments
            # are read and written in place, to float32 rounding of Adam's own kernel
            state["step"] += 1  # as Adam counts: before its step
            beta1, beta2 = group["betas"]
            stepped = native.lazy_adam(flat, grad._values().contiguous(), p, state["exp_avg"], state["exp_avg_sq"],
                                       int(state["step"]), float(group["lr"]), float(beta1), float(beta2),
                                       group["eps"], group["weight_decay"], group.get("decoupled_weight_decay", False),
                                       group["maximize"])
            p.view(-1)[:0].add_(0)  # bump the version counter, as an in-place step does (the band keys on it)
            p.dwc_lazy_step, p.dwc_lazy_moved = (version, p._version), (flat, stepped)
            return
        views = [t.view(-1) for t in (p, state["exp_avg"], state["exp_avg_sq"])]
        value, exp_avg, exp_avg_sq = (v.index_select(0, flat) for v in views)
        adam([value], [grad._values().contiguous()], [exp_avg], [exp_avg_sq], [], [state["step"]],
             foreach=False, capturable=group["capturable"], differentiable=False, fused=group["fused"],
             decoupled_weight_decay=group.get("decoupled_weight_decay", False), amsgrad=False,
             beta1=group["betas"][0], beta2=group["betas"][1], lr=group["lr"],
             weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"])
        for view, new in zip(views, (value, exp_avg, exp_avg_sq)):
            view.index_copy_(0, flat, new)
        # which change of the parameter this step was, and the entries it moved (flat positions, ascending,
        # and their new values): a LUT layer that sent the gradient knows that only these entries moved
        # (its tracked band, dwc.models.lut.LUTLayer._band)
        p.dwc_lazy_step, p.dwc_lazy_moved = (version, p._version), (flat, value)
