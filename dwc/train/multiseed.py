"""Several seeds of one SAC configuration trained together in one process (``dwc train --seeds 1-8``):
the run directories, resumes and catch-ups of the seeds; the training is dwc.train.sac's one loop with
K seeds (a single run is its K = 1).

Each seed keeps everything of its own (dwc.train.sac); what the seeds share is the arithmetic of the
update (dwc.train.sac_learner):

- their twin critics are one :class:`~dwc.train.sac_nets.TwinQ` of 2K members: one batched matmul per layer
  for all seeds (the critics are most of an MLP run's update);
- one fused Adam per optimiser over all seeds' parameters (Adam is element-wise, so every seed's
  parameters take the steps their own optimiser would take);
- MLP actors (``--policy mlp``) run as batched matmuls over stacked weights. The circuit actors
  (dwc, gates, qmlp) run their own forward and backward per seed inside the batched update: the LUT
  layers' custom autograd functions (straight-through tables, EFD input gradients, the learnable
  wiring's score gradient and its cached argmax/softmax) work on one network's tensors;
- acting is one call over all seeds (each seed's own forward inside it, so one CUDA graph and one
  host sync for all K), and the K running observation normalisers update as one stacked tensor;
  then the K environments step, one after another or, on a GPU host with a core to spare for each,
  all at once in worker processes (dwc.train.seed_envs).

Seed k follows ``dwc train --seed k`` bit for bit on a CPU (tests/test_multiseed.py), as long as an
element-wise tensor of one seed in the update (batch x action dims: log-std, tanh, log) is a whole
number of the CPU's SIMD chunks (32 floats with AVX-512, 16 with AVX2): torch computes the elements
of a tensor's tail past the last whole chunk with scalar libm calls and the rest with vectorised
ones, which can differ in the last bit. ``--batch-size`` 256 (the default) meets it for any action
dimension; other batch sizes train equally well but not bit-identically to the single run.

Checkpoints: each seed's run directory gets exactly the checkpoint its single run would write at the
same step, so ``dwc train --out OUT/seedS --resume`` continues one seed alone, and ``--seeds ...
--resume`` continues them together (a seed whose checkpoint is behind the others first catches up
alone, as a single run, then they go on together).
"""
from __future__ import annotations

from pathlib import Path

import torch

from dwc.core.config import TrainConfig
from dwc.core.errors import UserError
from dwc.core.seeds import SUMMARY, check_together
from dwc.train.common import keep_freed_memory, resolve_device, resolve_precision
from dwc.train.envs import check_env_id
from dwc.train.run import RunDir
from dwc.train.sac import train_sac_seeds


def _where(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} CPU thread(s)"


def train_seeds(cfgs: list[TrainConfig], dirs: list[Path], resume: list[bool], progress: bool = True,
                commands: list[list[str]] | None = None, log=print) -> torch.device:
    """Train (or resume) seed k of ``cfgs`` into ``dirs[k]`` up to ``cfgs[k].steps``, all together;
    ``resume[k]``: continue dirs[k] from its checkpoint; ``commands[k]`` is recorded in its commands.txt.
    The configs differ only in their seed. Returns the device trained on."""
    from dwc.train.trainer import train

    cfg0 = cfgs[0]
    check_together(cfg0)
    if len({c.seed for c in cfgs}) != len(cfgs):
        raise UserError("every seed trained together must differ")
    device = resolve_device(cfg0.device)
    precision = resolve_precision(cfg0.precision, device)
    check_env_id(cfg0.env).close()
    torch.set_num_threads(cfg0.threads)
    keep_freed_memory()
    commands = commands or [None] * len(cfgs)
    runs = [RunDir(d, c, resume=r, progress=False, command=cmd) for c, d, r, cmd in zip(cfgs, dirs, resume, commands)]
    starts = [r.start_step for r in runs]
    if len(set(starts)) > 1:  # e.g. a kill between two seeds' checkpoints: the lagging ones catch up alone
        goal = min(max(starts), cfg0.steps)
        for k, run in enumerate(runs):
            run.close()
            if starts[k] < goal:
                log(f"{dirs[k]}: at step {starts[k]}, the others at {goal}: training it alone up to {goal}")
                alone = TrainConfig.from_dict({**cfgs[k].to_dict(), "steps": goal})
                train(alone, dirs[k], resume=runs[k].resume_state is not None, progress=progress,
                      command=commands[k], log=log)
        runs = [RunDir(d, c, resume=True, progress=False) for c, d in zip(cfgs, dirs)]
    seeds = ", ".join(str(c.seed) for c in cfgs)
    log(f"training {cfg0.algo} {cfg0.actor.policy} on {cfg0.env}, seeds {seeds} together: device {device} "
        f"({_where(device)}), {str(precision).removeprefix('torch.')} matmuls")
    try:
        for run in runs:
            run.record_leg(device=str(device), where=_where(device), precision=str(precision).removeprefix("torch."),
                           seeds_together=[c.seed for c in cfgs])
        if runs[0].start_step >= cfg0.steps:
            log(f"seeds {seeds}: already at step {runs[0].start_step} >= --steps {cfg0.steps}; nothing to train")
        else:
            runs[0].progress = progress
            train_sac_seeds(cfgs, runs, device, precision,
                            label=f"{cfg0.algo} {cfg0.actor.policy} {cfg0.env} seeds {seeds.replace(' ', '')}")
    finally:
        for run in runs:
            run.close()
    return device


__all__ = ["SUMMARY", "train_seeds"]
