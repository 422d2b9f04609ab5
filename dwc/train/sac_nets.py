"""SAC's networks for K seeds at once: the twin critics of every seed as one batched module
(:class:`TwinQ`) and the seeds' actors as one (:class:`SeedActors`). A single run is K = 1.

On exactness (why some layers are batched and others run per seed) see dwc.train.multiseed."""
from __future__ import annotations

import copy
import math

import torch
from torch import nn

from dwc.models.actors import MLPActor
from dwc.models.encoding import CLIP, running_stats
from dwc.train.batch_renorm import MemberRenorm
from dwc.train.common import sample_action


class TwinQ(nn.Module):
    """Twin Q MLPs (in -> h -> h -> 1), ``members`` of them (2 per seed, seed-major) evaluated together
    with batched matmuls.

    ``mid_dtype`` bfloat16 runs the hidden x hidden layer (94% of the FLOPs) in bf16 with float32
    accumulation; the input layer and the Q output stay float32 (a bf16 Q of ~300 would be
    rounded by ~1, as large as a reward).

    ``renorm``: CrossQ's critic, a batch renormalisation before every layer (dwc.train.batch_renorm);
    ``forward(..., update_stats=True)`` normalises by the batch and moves the running statistics."""

    def __init__(self, in_dim: int, hidden: int, members: int = 2, mid_dtype: torch.dtype = torch.float32,
                 renorm: bool = False):
        super().__init__()
        self.norms = nn.ModuleList(MemberRenorm(members, n) for n in (in_dim, hidden, hidden)) if renorm else None
        sizes = [in_dim, hidden, hidden, 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for i in range(3):
            w = torch.empty(members, sizes[i], sizes[i + 1])
            b = torch.empty(members, 1, sizes[i + 1])
            bound = 1.0 / math.sqrt(sizes[i])  # nn.Linear's default init, per member
            nn.init.uniform_(w, -bound, bound)
            nn.init.uniform_(b, -bound, bound)
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(b))
        self.members, self.mid_dtype = members, mid_dtype

    @classmethod
    def joined(cls, critics: list["TwinQ"]) -> "TwinQ":
        """One module holding the members of ``critics`` (one per seed), seed-major."""
        joint = copy.deepcopy(critics[0])  # then its parameters replaced by the members of all (no random draws)
        joint.weights = nn.ParameterList(nn.Parameter(torch.cat([c.weights[i].detach() for c in critics]))
                                         for i in range(len(critics[0].weights)))
        joint.biases = nn.ParameterList(nn.Parameter(torch.cat([c.biases[i].detach() for c in critics]))
                                        for i in range(len(critics[0].biases)))
        joint.members = sum(c.members for c in critics)
        if joint.norms is not None:
            for i, norm in enumerate(joint.norms):
                for name, t in [*norm.named_parameters(recurse=False), *norm.named_buffers(recurse=False)]:
                    joined = torch.cat([getattr(c.norms[i], name).detach() for c in critics])
                    setattr(norm, name, nn.Parameter(joined) if isinstance(t, nn.Parameter) else joined)
        return joint

    def forward(self, xn: torch.Tensor, action: torch.Tensor, update_stats: bool = False) -> torch.Tensor:
        """Every member's Q of one input (batch, ...) -> (members, batch), or each seed's twin Q of its own
        inputs (K, batch, ...) -> (K, 2, batch)."""
        h = torch.cat([xn, action], -1)
        if h.dim() == 2:
            h = h.unsqueeze(0).expand(self.members, -1, -1)
        else:  # seed k's input to its members 2k, 2k + 1 (for one seed: the same view as above)
            h = h.unsqueeze(1).expand(-1, 2, -1, -1).reshape(self.members, *h.shape[1:])
        (w0, w1, w2), (b0, b1, b2), dt = self.weights, self.biases, self.mid_dtype
        norm = (lambda i, x: self.norms[i](x, update_stats)) if self.norms is not None else (lambda i, x: x)
        h = torch.relu(torch.baddbmm(b0, norm(0, h), w0))
        h = torch.relu(torch.baddbmm(b1.to(dt), norm(1, h).to(dt), w1.to(dt))).float()
        q = torch.baddbmm(b2, norm(2, h), w2).squeeze(-1)  # (members, batch)
        return q if xn.dim() == 2 else q.view(-1, 2, q.shape[-1])


def _stacked_linear(layers: list[nn.Linear], x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Each seed's ``layers[k](x[k])`` for x (K, batch, in) as one batched matmul (the same sums as
    nn.Linear's, element for element, on CPU)."""
    w = torch.stack([layer.weight for layer in layers]).transpose(1, 2)
    b = torch.stack([layer.bias for layer in layers]).unsqueeze(1)
    if dtype == torch.float32:
        return torch.baddbmm(b, x, w)
    return torch.baddbmm(b.to(dtype), x.to(dtype), w.to(dtype))


class SeedActors:
    """K actors of one kind (one per seed) as one: ``dist_params`` and ``normalize`` take (K, batch, obs)
    and return (K, batch, ...), so :func:`dwc.train.common.sample_action` works on all seeds at once.
    One seed (a single run) runs its actor's own forward."""

    def __init__(self, actors: list):
        self.actors = actors
        self.action_scale, self.action_bias = actors[0].action_scale, actors[0].action_bias  # one env: one action box
        self.fused = len(actors) > 1 and all(isinstance(a, MLPActor) for a in actors)

    @property
    def k(self) -> int:
        return len(self.actors)

    def squash(self, u: torch.Tensor) -> torch.Tensor:
        return self.actors[0].squash(u)

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """Every seed's observations through its own running normaliser (ObsNormalizer.forward's steps)."""
        norms = [a.normalizer for a in self.actors]
        mean = torch.stack([n.mean for n in norms]).unsqueeze(1)
        std = torch.sqrt(torch.stack([n.var for n in norms]).unsqueeze(1) + norms[0].eps).to(obs.dtype)
        return ((obs - mean.to(obs.dtype)) / std).clamp(-CLIP, CLIP)

    @torch.no_grad()
    def update_normalizers(self, obs: torch.Tensor) -> None:
        """ObsNormalizer.update for every seed at once, ``obs`` (K, n, obs): its update
        (:func:`~dwc.models.encoding.running_stats`) on the seeds' statistics stacked, written back
        with one multi-tensor copy (K separate updates are a dozen kernel launches each, and a host
        sync each for the frozen flag; a normaliser is only frozen after training, which the SAC loop
        checks once)."""
        norms = [a.normalizer for a in self.actors]
        mean, var, count = (torch.stack([getattr(n, f) for n in norms]) for f in ("mean", "var", "count"))
        new_mean, new_var, total = running_stats(mean, var, count.unsqueeze(1), obs.to(mean))
        torch._foreach_copy_([t for nm in norms for t in (nm.mean, nm.var, nm.count)],
                             [t for k in range(self.k) for t in (new_mean[k], new_var[k], total[k, 0])])

    @torch.no_grad()
    def explore(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Every seed's exploration action for its observations, ``obs`` (K, n, obs) -> (K, n, act):
        each seed's own forward (its single run's arithmetic, whatever the actor), launched as one
        call so that on a GPU the K forwards are one CUDA graph and one sync."""
        return torch.stack([sample_action(a, o, e)[0] for a, o, e in zip(self.actors, obs, noise)])

    def dist_params(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.fused:  # one seed, or circuit actors: each seed's own forward (see dwc.train.multiseed)
            means, log_stds = zip(*(a.dist_params(o) for a, o in zip(self.actors, obs)))
            return torch.stack(means), torch.stack(log_stds)
        a = self.actors
        # The hidden x hidden layer (nearly all of the FLOPs) batched; the input layer and the heads per
        # seed: torch's 2-D and batched kernels sum thin products (a 1-wide head, the weight gradient
        # of a few-input layer) in different orders, which would end bit-exactness with the single run.
        h = torch.relu(torch.stack([m.trunk[0](x) for m, x in zip(a, self.normalize(obs))]))
        h = torch.relu(_stacked_linear([m.trunk[2] for m in a], h, a[0].compute_dtype)).float()
        return (torch.stack([m.mean(x) for m, x in zip(a, h)]),
                a[0]._bound_log_std(torch.stack([m.log_std(x) for m, x in zip(a, h)])))
