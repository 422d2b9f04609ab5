"""The policies shipped with dwc (package data ``dwc.policies``): where they are and what each one is,
found without importing torch."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from dwc.core.config import ActorConfig, layer_shape
from dwc.core.errors import OptionError, UserError


def shipped_dir(name: str) -> Path:
    """A top-level folder of the repository shipped as package data (policies/, configs/): installed
    inside the package (dwc.NAME) by a wheel."""
    spec = importlib.util.find_spec(f"dwc.{name}")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parents[2] / name  # a source tree that is not installed


POLICIES_DIR = shipped_dir("policies")


def circuit_size(actor: dict) -> str:
    """The actor's shape in words: "2 x 256 LUT6", "QMLP 2 x 16 W4A4", "MLP 2 x 256"; thresholds per
    dimension where they are not the default (the published 63): "2 x 256 LUT6, B = 15"."""
    shape = layer_shape(actor.get("layers", 0), actor.get("width", 0), actor.get("last_width", 0))
    bits = actor.get("thermo_bits", ActorConfig.thermo_bits)
    thresholds = f", B = {bits}" if bits != ActorConfig.thermo_bits else ""
    return {"dwc": f"{shape} LUT{actor.get('lut_inputs')}{thresholds}", "gates": f"{shape} gates{thresholds}",
            "qmlp": f"QMLP {actor.get('layers')} x {actor.get('hidden')} W{actor.get('weight_bits')}A{actor.get('act_bits')}"
            }.get(actor.get("policy"), f"MLP 2 x {actor.get('hidden')}")


def deployed_return(result: dict) -> float:
    """A run's return as deployed (a sweep's result.json): the frozen circuit's where the policy has one."""
    return result["float_return"] if result.get("frozen_return") is None else result["frozen_return"]


def shipped_policy(name: str) -> Path:
    """The folder of the shipped policy ``name`` (``dwc demo --policy``), said as the user would type it:
    relative to the working directory where it lies below it (from a checkout: policies/...)."""
    policy = POLICIES_DIR / name
    if not (policy / "config.json").exists():
        raise OptionError("policy", f" {name}: not in {POLICIES_DIR} (dwc policies lists them)")
    return policy.relative_to(Path.cwd()) if policy.is_relative_to(Path.cwd()) else policy


def list_policies() -> list[dict]:
    """One row per shipped policy: its env, circuit, training steps and evaluated returns."""
    rows = []
    for d in sorted(POLICIES_DIR.glob("*/config.json")):
        d = d.parent
        cfg = json.loads((d / "config.json").read_text())
        ev = json.loads((d / "eval.json").read_text()) if (d / "eval.json").exists() else {}
        a = cfg.get("actor", {})
        # a policy shipped from a sweep (dwc export SWEEP) records every seed; one trained alone is its own seed
        seeds = json.loads((d / "seeds.json").read_text()) if (d / "seeds.json").exists() else None
        rows.append({"seed": seeds["shipped_seed"] if seeds else cfg.get("seed"),
                     "seeds_trained": len(seeds["runs"]) if seeds else 1,
                     "seed_returns": [deployed_return(r) for r in seeds["runs"]] if seeds else None,
                     "name": d.name, "path": str(d), "env": cfg.get("env"), "policy": a.get("policy"),
                     "size": circuit_size(a), "algo": cfg.get("algo"), "steps": ev.get("train_steps"),
                     "mean_return": ev.get("mean_return"), "std_return": ev.get("std_return"),
                     "frozen_mean_return": ev.get("frozen", {}).get("mean_return"), "episodes": ev.get("episodes")})
    if not rows:
        raise UserError(f"no shipped policies found in {POLICIES_DIR}")
    return rows


def policies_text(rows: list[dict]) -> str:
    w = max(len(r["name"]) for r in rows) + 2  # names and circuits grow: keep the columns apart
    c = max(18, max(len(r["size"]) for r in rows) + 2)
    lines = [f"{'policy':<{w}}{'env':<22}{'circuit':<{c}}{'steps':>8}{'return':>18}{'frozen':>9}  seed"]
    for r in rows:
        ret = f"{r['mean_return']:.1f} ± {r['std_return']:.1f}" if r["mean_return"] is not None else "-"
        fr = f"{r['frozen_mean_return']:.1f}" if r["frozen_mean_return"] is not None else "-"
        seed = f"{r['seed']}" + (f" (median of {r['seeds_trained']})" if r["seeds_trained"] > 1 else "")
        lines.append(f"{r['name']:<{w}}{r['env']:<22}{r['size']:<{c}}{r['steps'] or '-':>8}{ret:>18}{fr:>9}  {seed}")
    return "\n".join(lines + [f"(deterministic episodes; folders in {POLICIES_DIR}; a policy shipped from several "
                              "seeds lists them all in its seeds.json)"])
