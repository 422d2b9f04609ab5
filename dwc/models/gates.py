"""Differentiable logic-gate layer (Petersen et al., "Deep Differentiable Logic Gate Networks",
NeurIPS 2022): each neuron is a 2-input gate choosing among the 16 Boolean functions.

The gradient relaxes the choice: the softmax-weighted mix of the 16 functions' real-valued forms
(a AND b -> a*b, a XOR b -> a + b - 2ab, ...). Every such form is an affine function of
(1, a, b, ab), so the mix is ``c0 + c1 a + c2 b + c3 ab`` with ``c = softmax(w) @ BASIS``: one small
matmul per layer, no loop over functions. The forward (training and eval) is each gate's argmax
function on hard bits, exactly a 2-input LUT, so the network trained is the circuit deployed
(straight-through estimator); the IR and the hardware take it unchanged.
Wiring is random and fixed (as published), balanced over the sources.
"""
from __future__ import annotations

import torch
from torch import nn

from dwc.models.lut import balanced_random_wiring

# Truth table of function f as the bits f(a, b) at address a + 2b: tables 0..15 are all 16 functions.
# Coefficients over (1, a, b, ab) that reproduce each table at the four corners, and relax it inside.
_TABLES = torch.arange(16)
_CORNERS = torch.stack([(_TABLES >> k) & 1 for k in range(4)], dim=1).double()  # f(00), f(10), f(01), f(11)
BASIS = torch.stack([_CORNERS[:, 0], _CORNERS[:, 1] - _CORNERS[:, 0], _CORNERS[:, 2] - _CORNERS[:, 0],
                     _CORNERS[:, 3] - _CORNERS[:, 1] - _CORNERS[:, 2] + _CORNERS[:, 0]], dim=1).float()


class GateLayer(nn.Module):
    """``out_features`` 2-input gates over ``in_features`` bits; hard forward, relaxed gradient in training."""

    n = 2  # inputs per gate (the attribute names match dwc.models.lut.LUTLayer's)
    wiring = "random"

    def __init__(self, in_features: int, out_features: int, generator: torch.Generator | None = None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        # Initialise near "pass-through a" / "pass-through b" (tables 0b1010 and 0b1100), which
        # keeps early deep networks from collapsing to constants (difflogic's residual init idea).
        w = torch.randn(out_features, 16) * 0.1
        w[torch.arange(out_features), torch.where(torch.arange(out_features) % 2 == 0, 0b1010, 0b1100)] += 5.0
        self.weights = nn.Parameter(w)
        self.register_buffer("fixed_wiring", balanced_random_wiring(in_features, 2 * out_features, generator))
        self.register_buffer("basis", BASIS.clone(), persistent=False)

    def wiring_indices(self) -> torch.Tensor:
        """(out_features, 2): source of input a (address bit 0) and b (address bit 1) per gate."""
        return self.fixed_wiring.view(self.out_features, 2)

    def truth_tables(self) -> torch.Tensor:
        """(out_features, 4) bool: each gate's chosen function at addresses a + 2b (what eval computes)."""
        f = self.weights.detach().argmax(dim=1).cpu()
        return ((f.view(-1, 1) >> torch.arange(4)) & 1).bool()

    def forward_fm(self, x: torch.Tensor) -> torch.Tensor:
        """Feature-major: bits (in_features, batch) -> bits (out_features, batch)."""
        pair = x.index_select(0, self.fixed_wiring).view(self.out_features, 2, x.shape[1])
        a, b = pair[:, 0], pair[:, 1]
        hard = self.basis.index_select(0, self.weights.argmax(dim=1))  # exact 0/1 results on 0/1 inputs
        if self.training:
            # Straight-through: the forward is the circuit (hard function, 0/1 bits), the gradient is
            # the relaxed mix's. A soft forward trains a different network from the one deployed; on
            # InvertedPendulum it reached 1000 in training but 370 with hard gates.
            soft = torch.softmax(self.weights, dim=1) @ self.basis  # (out, 4)
            c = hard + (soft - soft.detach())  # exactly hard in value
        else:
            c = hard
        return c[:, :1] + c[:, 1:2] * a + c[:, 2:3] * b + c[:, 3:4] * (a * b)

    def constrain_(self) -> None:
        pass

    def extra_repr(self) -> str:
        return f"in={self.in_features}, gates={self.out_features}"
