"""Run a DWC core in Amaranth's built-in simulator: the quickest check of the HDL against the IR
(cocotb + Verilator benches check the emitted Verilog)."""
from __future__ import annotations

import numpy as np
from amaranth.sim import Simulator

from dwc.rtl.core import DWCCore


def run_vectors(core: DWCCore, q: np.ndarray, gaps: bool = False) -> tuple[np.ndarray, list[int]]:
    """Stream integer observations (one per cycle; with ``gaps`` every third cycle is idle) and
    return the actions in order, plus the cycle each was accepted and produced (for latency)."""
    g = core.graph
    results, accepted, produced = [], [], []

    async def bench(ctx):
        cycle, i = 0, 0
        while len(results) < len(q):
            feed = i < len(q) and not (gaps and cycle % 3 == 2)
            if feed:
                for d in range(g.obs_dim):
                    ctx.set(core.obs[f"o{d}"], int(q[i, d]))
                accepted.append(cycle)
                i += 1
            ctx.set(core.valid_in, int(feed))
            await ctx.tick()
            cycle += 1
            if ctx.get(core.valid_out):
                results.append([ctx.get(core.action[f"a{a}"]) for a in range(g.action_dim)])
                produced.append(cycle)
            if cycle > 10 * len(q) + 100:
                raise RuntimeError("the core stopped producing results")

    sim = Simulator(core)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return np.asarray(results, dtype=np.int64), [p - a for a, p in zip(accepted, produced)]
