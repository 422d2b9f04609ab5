"""Quantised MLP actor (``--policy qmlp``): a small fake-quant with straight-through rounding.

Every scale is a power of two, so the network in eval mode is an exact integer function that the IR
writes as integer linear layers with a rounding shift (no multipliers beyond the weights):

- input: the DWC's thermometer (Gaussian-quantile thresholds); dim ``d``'s code is its number of
  set bits minus ``B // 2`` (a non-uniform ``log2(B+1)``-bit quantiser; the IR's comparators and
  popcounts compute exactly this);
- hidden layers: weights ``round(W / s_w)`` clamped to ``weight_bits`` (signed, symmetric), ``s_w =
  2**ceil(log2(max|W| / qmax))`` from the current weights; bias rounded to the accumulator's scale;
  ReLU and requantisation to ``act_bits`` unsigned codes at a power-of-two scale that tracks the
  running maximum of the pre-activations during training and is frozen in eval;
- output: the same linear layer, requantised to ``out_bits`` signed codes; the action is
  ``tanh(code * s_out)`` scaled to the bounds, a table per action in the IR.

Rounding is half up (``floor(x + 0.5)``) everywhere, as in the IR; straight-through gradients. A
QAT library (Brevitas) would add a heavy dependency for what is, with power-of-two scales, a few
lines; the scale choice is what makes the integer function exact without requantisation
multipliers.
"""
from __future__ import annotations

import math

import torch
from torch import nn


def round_half_up(x: torch.Tensor) -> torch.Tensor:
    """Forward ``floor(x + 0.5)``, gradient 1 (straight-through)."""
    return x + (torch.floor(x + 0.5) - x).detach()


def pot_exponent(max_abs: float, qmax: int) -> int:
    """Smallest e with ``max_abs / 2**e <= qmax`` (the power-of-two scale exponent)."""
    return math.ceil(math.log2(max(max_abs, 1e-12) / qmax))


class QLinear(nn.Module):
    """Fake-quantised linear layer on integer input codes of scale ``2**in_exp``; outputs integer codes."""

    def __init__(self, n_in: int, n_out: int, weight_bits: int, out_bits: int, signed_out: bool, momentum: float = 0.01,
                 fan_in: int = 0):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)
        self.weight_bits, self.out_bits, self.signed_out, self.momentum = weight_bits, out_bits, signed_out, momentum
        if fan_in and fan_in < n_in:
            # LogicNets-style sparsity: each output reads fan_in random inputs (fixed at construction), so
            # fan_in x input bits stays small enough to enumerate the neuron into lookup tables
            keep = torch.stack([torch.randperm(n_in)[:fan_in] for _ in range(n_out)])
            self.register_buffer("mask", torch.zeros(n_out, n_in).scatter_(1, keep, 1.0))
        else:
            self.mask = None  # dense (no buffer: checkpoints of dense models stay as they were)
        self.register_buffer("out_max", torch.tensor(1.0))  # running max |pre-activation| (real units)
        self.register_buffer("seen", torch.tensor(False))  # the first training batch sets out_max outright

    def _masked(self, w: torch.Tensor) -> torch.Tensor:
        return w if self.mask is None else w * self.mask

    @property
    def w_qmax(self) -> int:
        return (1 << (self.weight_bits - 1)) - 1

    @property
    def out_range(self) -> tuple[int, int]:
        if self.signed_out:
            return -(1 << (self.out_bits - 1)), (1 << (self.out_bits - 1)) - 1
        return 0, (1 << self.out_bits) - 1

    def weight_exp(self) -> int:
        return pot_exponent(float(self._masked(self.linear.weight.detach()).abs().max()), self.w_qmax)

    def out_exp(self) -> int:
        return pot_exponent(float(self.out_max), self.out_range[1])

    def int_weights(self) -> tuple[torch.Tensor, int]:
        e = self.weight_exp()
        w = self._masked(torch.clamp(round_half_up(self.linear.weight / 2.0 ** e), -self.w_qmax, self.w_qmax))
        return w, e

    def int_bias(self, acc_exp: int) -> torch.Tensor:
        """The bias as integers at the accumulator's scale ``2**acc_exp``."""
        return round_half_up(self.linear.bias / 2.0 ** acc_exp)

    def forward(self, x: torch.Tensor, in_exp: int) -> tuple[torch.Tensor, int]:
        """Integer-valued codes (N, in) of scale 2**in_exp -> codes (N, out) and their exponent."""
        w, we = self.int_weights()
        acc_exp = we + in_exp
        b = self.int_bias(acc_exp)
        dtype = torch.float64 if not self.training else x.dtype  # eval: exact integers in float64
        acc = x.to(dtype) @ w.to(dtype).t() + b.to(dtype)
        if self.training:  # track the real-valued range of what this layer outputs
            with torch.no_grad():
                cur = max(float((acc * 2.0 ** acc_exp).abs().max()) if acc.numel() else 0.0, 1e-6)
                if bool(self.seen):
                    self.out_max.mul_(1 - self.momentum).add_(self.momentum * cur)
                else:
                    self.out_max.fill_(cur)
                    self.seen.fill_(True)
        oe = self.out_exp()
        lo, hi = self.out_range
        y = torch.clamp(round_half_up(acc * 2.0 ** (acc_exp - oe)), lo, hi)
        return y, oe

    def shift(self, in_exp: int) -> int:
        """The IR's rounding shift for this layer: out = round(acc * 2**(acc_exp - out_exp))."""
        return self.out_exp() - (self.weight_exp() + in_exp)


class QMLPNet(nn.Module):
    """Normalised obs -> thermometer codes -> QLinear (x ``layers``, unsigned codes: ReLU) -> QLinear."""

    def __init__(self, obs_dim: int, action_dim: int, cfg):
        super().__init__()
        from dwc.models.encoding import Thermometer
        self.encoder = Thermometer(obs_dim, cfg.thermo_bits)
        sizes = [obs_dim] + [cfg.hidden] * cfg.layers
        self.hidden = nn.ModuleList(QLinear(sizes[i], sizes[i + 1], cfg.weight_bits, cfg.act_bits, False,
                                            fan_in=cfg.fan_in) for i in range(cfg.layers))
        self.out = QLinear(sizes[-1], action_dim, cfg.weight_bits, cfg.out_bits, True, fan_in=cfg.fan_in)

    def codes(self, xn: torch.Tensor) -> torch.Tensor:
        """Normalised obs -> the integer input codes (popcount of each dim's thermometer - B // 2)."""
        bits = self.encoder(xn)
        b = self.encoder.bits
        return bits.view(*bits.shape[:-1], -1, b).sum(-1) - b // 2

    def output_codes(self, xn: torch.Tensor) -> tuple[torch.Tensor, int]:
        x, e = self.codes(xn), 0
        for layer in self.hidden:
            x, e = layer(x, e)  # unsigned codes: the clamp at 0 is the ReLU
        return self.out(x, e)

    def forward(self, xn: torch.Tensor) -> torch.Tensor:
        """The pre-tanh mean: an output code times its power-of-two scale."""
        y, oe = self.output_codes(xn)
        return (y * 2.0 ** oe).to(xn.dtype)
