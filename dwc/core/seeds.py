"""Several seeds of one configuration trained together (``dwc train --seeds 1-8``), the parts without
torch: the seed list, the run folder of each seed and their configs. The training itself is
dwc.train.multiseed.

    OUT/seed1/, OUT/seed2/, ...   one run directory per seed, each exactly what ``dwc train --seed S``
                                  writes (config.json, checkpoint.pt, metrics.jsonl, tb/, eval.json)
    OUT/seeds.json                the seeds and their evaluations (written at the end)
"""
from __future__ import annotations

import re
from pathlib import Path

from dwc.core.config import TrainConfig, resume_config
from dwc.core.errors import OptionError, UserError
from dwc.core.rundir import CHECKPOINT, CONFIG, load_config

SUMMARY = "seeds.json"
MAX_SEEDS = 64


def parse_seeds(text: str) -> list[int]:
    """``1-8``, ``1,3,5`` or both (``1-4,9``) -> distinct seeds in the order given."""
    seeds: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise OptionError("seeds", f" {text!r}: expected a range like 1-8, a list like 1,3,5 or both (1-4,9)")
        lo, hi = int(m[1]), int(m[2] or m[1])
        if hi < lo:
            raise OptionError("seeds", f" {text!r}: the range {part} runs backwards")
        seeds += range(lo, hi + 1)
    if len(set(seeds)) != len(seeds):
        raise OptionError("seeds", f" {text!r}: a seed is listed twice")
    if len(seeds) > MAX_SEEDS:
        raise OptionError("seeds", f" {text!r}: {len(seeds)} seeds; at most {MAX_SEEDS} train together in one process")
    return seeds


def seed_dir(out: Path, seed: int) -> Path:
    """The run directory of ``seed`` under ``out`` (the folder name dwc sweep uses too)."""
    return Path(out) / f"seed{seed}"


def seed_configs(given: dict, seeds: list[int], out: Path, resume: bool) -> list[TrainConfig]:
    """One config per seed from dwc train's options ``given`` (which must not hold a seed). New runs:
    the options with each seed; resumed ones: each seed folder's stored config with the resumable
    options applied (what ``dwc train --out OUT/seedS --resume`` does)."""
    from dwc.core.config import config_from_options

    if "seed" in given:
        raise OptionError("seed", " and --seeds: give one of them (--seeds 1-4 trains seeds 1 to 4)")
    out = Path(out)
    if (out / CONFIG).exists():
        raise UserError(f"{out} is the run directory of a single seed; --seeds writes one run directory per seed "
                        f"under --out (OUT/seed1, ...), so choose another --out")
    if not resume:
        return [config_from_options({**given, "seed": s}) for s in seeds]
    missing = [str(seed_dir(out, s)) for s in seeds if not (seed_dir(out, s) / CHECKPOINT).exists()]
    if missing:
        raise OptionError("resume", f": no checkpoint in {', '.join(missing)}; a run stopped before its first checkpoint "
                        f"starts again without --resume (and --seeds must list the seeds trained before)")
    cfgs = [resume_config(load_config(seed_dir(out, s)), given) for s in seeds]
    first = {k: v for k, v in cfgs[0].to_dict().items() if k != "seed"}
    for s, c in zip(seeds, cfgs):
        if {k: v for k, v in c.to_dict().items() if k != "seed"} != first:
            raise UserError(f"{seed_dir(out, s)} was trained with other options than {seed_dir(out, seeds[0])}; "
                            f"seeds train together only with the same options (resume it alone with dwc train --out "
                            f"{seed_dir(out, s)} --resume)")
    return cfgs


def check_together(cfg: TrainConfig) -> None:
    """Seeds train together with SAC only (PPO and distillation: one process per seed)."""
    if cfg.algo != "sac":
        raise OptionError("seeds", f" trains SAC runs together; --algo {cfg.algo} trains one seed per process "
                        f"(run dwc train --seed S once per seed)")
