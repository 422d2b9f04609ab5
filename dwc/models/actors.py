"""Actors: a Differentiable Weightless Controller (DWC) and the float MLP baseline.

Both share one interface, so the RL code never asks which it has:
- ``dist_params(obs) -> (mean, log_std)`` of the pre-tanh Gaussian (training);
- ``act(obs) -> action`` deterministic, squashed and rescaled to the action bounds (inference);
- ``normalizer`` the running observation normaliser (updated by the training loop);
- ``constrain_()`` re-projects parameters after each optimiser step.
"""
from __future__ import annotations


import torch
from torch import nn

from dwc.core.config import ActorConfig  # re-exported: the models API takes it
from dwc.core.errors import OptionError
from dwc.models.encoding import ObsNormalizer, Thermometer
from dwc.models.gates import GateLayer
from dwc.models.lut import LUTLayer

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def spread_thresholds(dims: int, bits: int, count: int) -> torch.Tensor:
    """``count`` thermometer bits (index d * bits + m) spread over the dimensions as evenly as
    possible and, within a dimension, over its thresholds (evenly in quantile)."""
    out = []
    for d in range(dims):
        k = min(bits, count // dims + (d < count % dims))
        out += [d * bits + int((j + 0.5) * bits / k) for j in range(k)]
    return torch.tensor(out, dtype=torch.int64)


def exact_tanh(u: torch.Tensor) -> torch.Tensor:
    """tanh in float64, rounded back: the same bits on every CPU. torch's float32 tanh and exp go
    through MKL's vector math, whose AVX-512 and AVX2 kernels differ in the last bit, and Hopper
    turns one bit of one action into a different episode (and a table entry of a different circuit)."""
    return torch.tanh(u.double()).to(u.dtype)


class _Actor(nn.Module):
    def __init__(self, obs_dim: int, action_low, action_high):
        super().__init__()
        self.normalizer = ObsNormalizer(obs_dim)
        low = torch.as_tensor(action_low, dtype=torch.float32)
        high = torch.as_tensor(action_high, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def dist_params(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def squash(self, u: torch.Tensor) -> torch.Tensor:
        return exact_tanh(u) * self.action_scale + self.action_bias

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        return self.squash(self.dist_params(obs)[0])

    def constrain_(self) -> None:
        pass

    compute_dtype = torch.float32  # of the large training matmuls (see dwc.train.common.resolve_precision)

    def set_precision(self, dtype: torch.dtype) -> None:
        """bf16 for the hidden matmul of an MLP actor and the wiring-score gradients of LUT layers;
        the forward values a DWC's circuit computes do not depend on it."""
        self.compute_dtype = dtype
        for m in self.modules():
            if isinstance(m, LUTLayer):
                m.grad_dtype = dtype

    def apply_budget_(self, progress: float) -> None:
        """Move toward the resource budgets at ``progress`` (0..1) of training; 1.0 enforces them."""

    def circuit_stats(self) -> dict:
        """Resource figures of the current circuit, logged during training."""
        return {}

    def wiring_stats(self) -> dict:
        """How settled a learnable wiring is, logged during training: per LUT layer the mean number of
        candidate sources per input within the softmax margin of its best one (1.0: every input has
        a clear winner). A sparse wiring update's cost grows with it."""
        layers = [m for m in self.modules() if isinstance(m, LUTLayer) and m.wiring == "learnable"]
        with torch.no_grad():
            return {f"candidates_per_input_l{i}": len(layer._support()[0]) / (layer.out_features * layer.n)
                    for i, layer in enumerate(layers)}

    def prepare_cuda_graphs(self) -> bool:
        """Make training forward/backward free of host syncs so an update can be captured as a CUDA
        graph; False if this actor cannot be (then training runs eagerly)."""
        for m in self.modules():
            if m is not self and hasattr(m, "prepare_cuda_graphs"):
                if not m.prepare_cuda_graphs():
                    return False
        return True

    def inference_state_dict(self) -> dict:
        return self.state_dict()

    @staticmethod
    def _bound_log_std(raw: torch.Tensor) -> torch.Tensor:
        return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1)


class MLPActor(_Actor):
    """Float baseline: normalised obs -> 2 x hidden ReLU -> (mean, log_std) heads (CleanRL SAC)."""

    def __init__(self, obs_dim: int, action_dim: int, action_low, action_high, cfg: ActorConfig):
        super().__init__(obs_dim, action_low, action_high)
        self.trunk = nn.Sequential(nn.Linear(obs_dim, cfg.hidden), nn.ReLU(),
                                   nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU())
        self.mean = nn.Linear(cfg.hidden, action_dim)
        self.log_std = nn.Linear(cfg.hidden, action_dim)

    def dist_params(self, obs):
        first, hidden = self.trunk[0], self.trunk[2]
        h = torch.relu(first(self.normalizer(obs)))
        dt = self.compute_dtype  # the hidden x hidden layer holds nearly all of the FLOPs
        h = torch.relu(hidden(h) if dt == torch.float32 else
                       nn.functional.linear(h.to(dt), hidden.weight.to(dt), hidden.bias.to(dt))).float()
        return self.mean(h), self._bound_log_std(self.log_std(h))

    @torch.no_grad()
    def act(self, obs):
        """In float64, rounded to float32 at the end: float32 matrix products sum in an order that
        depends on the CPU's BLAS kernel (AVX-512 or AVX2, Intel or AMD), and one bit of difference
        grows into a different Hopper episode; in float64 the final rounding hides it, so an
        evaluation gives the same returns on every machine."""
        layers = [self.trunk[0], self.trunk[2], self.mean]
        h = self.normalizer(obs.double())
        for i, layer in enumerate(layers):
            h = nn.functional.linear(h, layer.weight.double(), layer.bias.double())
            h = torch.relu(h) if i < len(layers) - 1 else h
        return self.squash(h.float())


class GroupSum(nn.Module):
    """Popcount of each action's block of bits, scaled to [eps, 1-eps], then a learnable affine.

    ``a = exp(log_alpha) * (x - 0.5) + beta`` per action (init log_alpha = ln 0.5, beta = 0).
    """

    def __init__(self, in_bits: int, actions: int, eps: float):
        super().__init__()
        if in_bits % actions:
            raise ValueError(f"last layer width {in_bits} must be divisible by the action dimension {actions}")
        self.actions, self.group = actions, in_bits // actions
        self.eps = eps
        self.log_alpha = nn.Parameter(torch.full((actions,), float(torch.log(torch.tensor(0.5)))))
        self.beta = nn.Parameter(torch.zeros(actions))

    def popcount(self, bits: torch.Tensor) -> torch.Tensor:
        if bits.dim() == 2 and bits.stride(0) == 1 and bits.shape[0] > 1:
            # feature-major storage (the LUT layers' layout, transposed): sum along memory rows; a
            # sum over the strided last dimension is ~10x slower on CPU
            return bits.t().reshape(self.actions, self.group, -1).sum(1).t()
        return bits.view(*bits.shape[:-1], self.actions, self.group).sum(-1)

    def forward(self, bits: torch.Tensor) -> torch.Tensor:
        x = self.eps + (1.0 - 2.0 * self.eps) * self.popcount(bits) / self.group
        alpha = torch.exp(self.log_alpha.double()).float()  # same bits on every CPU (see exact_tanh)
        return alpha * (x - 0.5) + self.beta


class DWCActor(_Actor):
    """obs -> normalise -> thermometer bits -> LUT layers -> GroupSum head -> pre-tanh mean.

    With ``policy="gates"`` the layers are differentiable logic-gate layers (2-input gates, hard in
    the forward, relaxed in the gradient): a logic-gate network with the same encoder, head and hardware.

    The last layer's width is rounded down to a multiple of the action dimension (one equal
    popcount group per action).

    The log-std comes from a separate small float MLP used only in training; the deterministic
    action (``act``) depends on the LUT circuit alone.
    """

    def __init__(self, obs_dim: int, action_dim: int, action_low, action_high, cfg: ActorConfig):
        super().__init__(obs_dim, action_low, action_high)
        last = cfg.last_width or cfg.width
        if last < action_dim:
            raise OptionError("width", f" / --last-width: the last layer's {last} LUTs are fewer than the "
                            f"{action_dim} actions (each action reads its own group of them)")
        last -= last % action_dim  # e.g. 1023 for Hopper's 3 actions
        self.encoder = Thermometer(obs_dim, cfg.thermo_bits)
        sizes = [self.encoder.out_features] + [cfg.width] * (cfg.layers - 1) + [last]
        self.comparator_budget = cfg.max_comparators
        self._allowed_n = None  # thresholds the first layer may read (cached; a loaded state recounts)
        self.register_load_state_dict_post_hook(lambda module, keys: setattr(module, "_allowed_n", None))
        if cfg.policy == "gates":  # a logic-gate network: the same circuit shape with 2-input gates
            if cfg.max_comparators:
                raise ValueError("a comparator budget applies to LUT layers (policy dwc), not gates")
            self.luts = nn.ModuleList(GateLayer(sizes[i], sizes[i + 1]) for i in range(cfg.layers))
        else:
            pool = None
            if cfg.max_comparators:  # random wiring draws from a fixed spread; learnable starts from all
                pool = (spread_thresholds(obs_dim, cfg.thermo_bits, cfg.max_comparators) if cfg.wiring == "random"
                        else torch.arange(sizes[0]))
            self.luts = nn.ModuleList(
                LUTLayer(sizes[i], sizes[i + 1], cfg.lut_inputs, cfg.wiring, cfg.tau,
                         thermometer_bits=cfg.thermo_bits if i == 0 else 0, source_pool=pool if i == 0 else None,
                         wiring_optim=cfg.wiring_optim, dense_every=cfg.wiring_refresh)
                for i in range(cfg.layers))
        self.head = GroupSum(last, action_dim, cfg.groupsum_eps)
        self.log_std_net = nn.Sequential(nn.Linear(obs_dim, cfg.logstd_hidden), nn.ReLU(),
                                         nn.Linear(cfg.logstd_hidden, cfg.logstd_hidden), nn.ReLU(),
                                         nn.Linear(cfg.logstd_hidden, action_dim))

    def circuit_bits(self, xn: torch.Tensor) -> torch.Tensor:
        """Normalised obs -> output bits of the last LUT layer (what hardware feeds the popcounts)."""
        if not torch.is_grad_enabled() and all(isinstance(layer, LUTLayer) for layer in self.luts):
            # nothing to differentiate: bytes, not floats, and only the thresholds the first layer reads
            first = self.luts[0]
            bits = first.lookup_bits(self.encoder.forward_fm_rows(xn, first.wiring_indices().view(-1), torch.uint8))
            for layer in self.luts[1:]:
                bits = layer.forward_bits(bits)
            return bits.to(xn.dtype).t()
        bits = self.encoder.forward_fm(xn)  # feature-major through the LUT layers
        for layer in self.luts:
            bits = layer.forward_fm(bits)
        return bits.t()

    def apply_budget_(self, progress: float) -> None:
        """The comparator budget's schedule: the first layer's allowed thresholds shrink geometrically
        from all of them at 20% of training to the budget at 60% (the last 40% adapt the tables and
        the wiring to the thresholds that remain); from 60% on, and at 1.0 always, the budget holds."""
        first = self.luts[0]
        if not self.comparator_budget or first.wiring != "learnable":
            return
        n0, k = first.in_features, self.comparator_budget
        t = min(1.0, max(0.0, (progress - 0.2) / 0.4))
        target = max(k, round(n0 * (k / n0) ** t))
        if self._allowed_n is None:  # counted once per process: a per-step .sum() would sync a GPU every step
            self._allowed_n = int(first.allowed.sum())
        if target < self._allowed_n and (target <= 0.98 * self._allowed_n or target == k):
            first.limit_sources_(target)
            self._allowed_n = target

    def circuit_stats(self) -> dict:
        stats = {"luts": sum(layer.out_features for layer in self.luts)}
        if isinstance(self.luts[0], LUTLayer):
            stats["comparators"] = self.luts[0].sources_read()
        return stats

    def popcounts(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head.popcount(self.circuit_bits(self.normalizer(obs)))

    def dist_params(self, obs):
        xn = self.normalizer(obs)
        return self.head(self.circuit_bits(xn)), self._bound_log_std(self.log_std_net(xn))

    def constrain_(self) -> None:
        for layer in self.luts:
            layer.constrain_()

    def inference_state_dict(self) -> dict:
        """The state dict with each learnable wiring stored as its argmax indices: what inference
        needs, ~1000x smaller than the float candidate scores (used for shipped policies)."""
        state = self.state_dict()
        for i, layer in enumerate(self.luts):
            if layer.wiring == "learnable":
                del state[f"luts.{i}.wiring_weights"]
                state[f"luts.{i}.wiring_indices"] = layer.wiring_indices().flatten().to(torch.int32)
        return state

    def load_state_dict(self, state, strict: bool = True, assign: bool = False):
        """Also accepts :meth:`inference_state_dict` output (wiring as indices -> one-hot scores)."""
        state = dict(state)
        for i, layer in enumerate(self.luts):
            idx = state.pop(f"luts.{i}.wiring_indices", None)
            if idx is not None and layer.wiring == "learnable":
                w = torch.zeros_like(layer.wiring_weights)
                w[idx.to(w.device, torch.int64), torch.arange(w.shape[1], device=w.device)] = 1.0
                state[f"luts.{i}.wiring_weights"] = w
        return super().load_state_dict(state, strict=strict, assign=assign)


class QMLPActor(_Actor):
    """A quantised MLP (:mod:`dwc.models.qmlp`): exact integer function in eval mode; the log-std
    comes from a small float network used only in training, as for the DWC."""

    def __init__(self, obs_dim: int, action_dim: int, action_low, action_high, cfg: ActorConfig):
        super().__init__(obs_dim, action_low, action_high)
        from dwc.models.qmlp import QMLPNet
        self.net = QMLPNet(obs_dim, action_dim, cfg)
        self.log_std_net = nn.Sequential(nn.Linear(obs_dim, cfg.logstd_hidden), nn.ReLU(),
                                         nn.Linear(cfg.logstd_hidden, action_dim))

    def prepare_cuda_graphs(self) -> bool:
        return False  # the power-of-two scales are picked on the host from running maxima each step

    @property
    def encoder(self):
        return self.net.encoder  # the freeze reads the thermometer thresholds like a DWC's

    def dist_params(self, obs):
        xn = self.normalizer(obs)
        return self.net(xn), self._bound_log_std(self.log_std_net(xn))


def build_actor(cfg: ActorConfig, obs_dim: int, action_dim: int, action_low, action_high) -> _Actor:
    if cfg.policy in ("dwc", "gates"):
        return DWCActor(obs_dim, action_dim, action_low, action_high, cfg)
    if cfg.policy == "qmlp":
        return QMLPActor(obs_dim, action_dim, action_low, action_high, cfg)
    if cfg.policy == "mlp":
        return MLPActor(obs_dim, action_dim, action_low, action_high, cfg)
    raise ValueError(f"unknown policy {cfg.policy!r} (choose dwc, gates, qmlp or mlp)")
