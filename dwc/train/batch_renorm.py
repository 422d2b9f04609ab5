"""Batch renormalisation (Ioffe 2017) for networks evaluated together as ``members`` of one batched module,
as CrossQ's critics use it (Bhatt et al. 2024; sb3-contrib's CrossQ is its referee here).

Why CrossQ needs it: without target critics, a critic must read the current and the next state-action pairs
as one distribution, so the statistics are those of their joint batch (see SeedsLearner's CrossQ update).
Renormalisation, unlike plain batch norm, moves to the running statistics after a warm-up, so one odd
minibatch late in training does not shift every Q value."""
from __future__ import annotations

import torch
from torch import nn

RMAX, DMAX = 3.0, 5.0  # the bounds of the correction r (scale) and d (shift), as the paper and sb3-contrib
PAD = 16  # floats: a member's parameters are stored in whole multiples of this (two members: 32, AVX-512's chunk)


class MemberRenorm(nn.Module):
    """Batch renormalisation of x (members, batch, features), each member with its own statistics, scale
    and bias. ``forward(x, update=True)`` normalises by the batch (corrected toward the running statistics
    after ``warmup`` updates) and moves the running statistics; ``update=False`` normalises by the running
    statistics alone and changes nothing (the actor's step reads the critics that way)."""

    def __init__(self, members: int, features: int, momentum: float = 0.01, eps: float = 1e-3,
                 warmup: int = 100_000):
        super().__init__()
        # stored PAD-wide per member (the padding never read, its gradient 0): a seed's part of each tensor is
        # whole SIMD chunks, which the fused Adam over all seeds steps as the single run's Adam does
        width = -(-features // PAD) * PAD
        self.scale = nn.Parameter(torch.ones(members, 1, width))
        self.bias = nn.Parameter(torch.zeros(members, 1, width))
        self.register_buffer("ra_mean", torch.zeros(members, 1, width))
        self.register_buffer("ra_var", torch.ones(members, 1, width))
        self.features = features
        # one count per member, so that a seed's rows of every buffer are its own (checkpoints slice them)
        self.register_buffer("steps", torch.zeros(members, dtype=torch.long))
        self.momentum, self.eps, self.warmup = momentum, eps, warmup

    def forward(self, x: torch.Tensor, update: bool) -> torch.Tensor:
        f = self.features
        scale, bias, ra_mean, ra_var = (t[..., :f] for t in (self.scale, self.bias, self.ra_mean, self.ra_var))
        if not update:
            return (x - ra_mean) / (ra_var + self.eps).sqrt() * scale + bias
        mean, var = x.mean(1, keepdim=True), x.var(1, keepdim=True)
        std = (var + self.eps).sqrt()
        xh = (x - mean) / std
        with torch.no_grad():
            running_std = (ra_var + self.eps).sqrt()
            r = (std / running_std).clamp(1 / RMAX, RMAX)
            d = ((mean - ra_mean) / running_std).clamp(-DMAX, DMAX)
            renorm = (self.steps > self.warmup).view(-1, 1, 1)  # a tensor test: no host sync, graph-capturable
            ra_mean.lerp_(mean, self.momentum)  # views: the module's buffers move
            ra_var.lerp_(var, self.momentum)
            self.steps += 1
        # batch norm in the warm-up; then (x - mean) / std * r + d, which is (x - running mean) / running std
        # while r and d are within their bounds, with the gradient of batch norm
        return torch.where(renorm, xh * r + d, xh) * scale + bias
