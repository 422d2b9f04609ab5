"""Which observation dimensions and thresholds a circuit reads: a JSON report and a PNG heat map."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dwc.ir.graph import Graph


def input_usage(frozen: Graph, optimized: Graph, bits: int) -> dict:
    """Fan-out of every comparator the optimised circuit kept, placed on the frozen circuit's
    (dimension x thermometer threshold) grid; thresholds in the observation's own units."""
    position: dict[tuple, list[int]] = {}
    for i, c in enumerate(frozen.comparators):
        position.setdefault((c.dim, c.threshold), []).append(i % bits)
    fanout = np.zeros(len(optimized.comparators), dtype=np.int64)
    # the comparators' readers: the first LUT layer, or the popcount groups (quantised MLP inputs)
    readers = [lut.inputs for lut in optimized.layers[0]] if optimized.layers else optimized.groups
    for inputs in readers:
        for i in inputs:
            fanout[i] += 1
    grid = np.zeros((optimized.obs_dim, bits), dtype=np.int64)
    dims = []
    for d in range(optimized.obs_dim):
        comps = [(i, c) for i, c in enumerate(optimized.comparators) if c.dim == d]
        scale = 2.0 ** -optimized.obs_formats[d].frac
        for i, c in comps:
            for m in position.get((c.dim, c.threshold), []):
                grid[d, m] = fanout[i]
        dims.append({"dim": d, "comparators": len(comps), "lut_inputs": int(sum(fanout[i] for i, _ in comps)),
                     "thresholds": sorted(c.threshold * scale for _, c in comps)})
    return {"grid": grid.tolist(), "dims": dims, "comparators_used": len(optimized.comparators),
            "comparators_possible": len(frozen.comparators),
            "dims_unused": [d["dim"] for d in dims if d["comparators"] == 0]}


def heatmap_png(usage: dict, path: Path, title: str = "") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.asarray(usage["grid"])
    fig, ax = plt.subplots(figsize=(min(14, 2 + grid.shape[1] * 0.16), 1.2 + grid.shape[0] * 0.32), dpi=110)
    masked = np.ma.masked_equal(grid, 0)
    im = ax.imshow(masked, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_facecolor("#eeeeee")  # grey = comparator not read by the circuit
    ax.set_xlabel("thermometer threshold index (low -> high observation value)")
    ax.set_ylabel("observation dimension")
    ax.set_yticks(range(grid.shape[0]))
    fig.colorbar(im, ax=ax, label="LUT inputs reading it")
    ax.set_title(title or f"{usage['comparators_used']} of {usage['comparators_possible']} comparators read "
                          f"(grey: unused)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
