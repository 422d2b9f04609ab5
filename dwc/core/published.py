"""The reference paper's published returns, the one table ``dwc report`` sets our sweeps against.

Source: Kresse & Lampert, "Differentiable Weightless Controllers: Learning Logic Circuits for
Continuous Control", ICML 2026 (arXiv 2512.01467): median deterministic return over 10 seeds after
1M SAC environment steps, Gymnasium MuJoCo v4 environments. Plain data, no imports: the CLI and the
report read it without torch.
"""
from __future__ import annotations

SOURCE = ("Kresse & Lampert, Differentiable Weightless Controllers, ICML 2026 (arXiv 2512.01467): "
          "median over 10 seeds, 1M SAC steps, MuJoCo v4 envs")
SEEDS = 10
STEPS = 1_000_000
# what each published column is, by our --policy
MODELS = {"mlp": "FP32 MLP 2 x 256", "qmlp": "quantised MLP (the paper's best small config)",
          "dwc": "DWC 2 x 1024 LUT6, B = 63"}
# task (env id without its version) -> policy -> published median return
RETURNS = {
    "Ant": {"mlp": 5598, "qmlp": 4717, "dwc": 5677},
    "HalfCheetah": {"mlp": 11529, "qmlp": 10465, "dwc": 7549},
    "Hopper": {"mlp": 2797, "qmlp": 1931, "dwc": 3120},
    "Humanoid": {"mlp": 6186, "qmlp": 5954, "dwc": 6141},
    "Walker2d": {"mlp": 5044, "qmlp": 4656, "dwc": 5025},
}


def published(env_id: str, policy: str | None) -> float | None:
    """The published median for a Gymnasium env id (any version: Hopper-v5 -> Hopper) and policy type,
    or None where the paper has none."""
    return RETURNS.get(env_id.rsplit("-v", 1)[0], {}).get(policy)


def budget_ratio(steps: int | None, seeds: int) -> float | None:
    """Our env steps x seeds as a fraction of the paper's 1M x 10."""
    return steps * seeds / (STEPS * SEEDS) if steps else None
