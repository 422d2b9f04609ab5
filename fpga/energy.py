"""Energy per action: an ESTIMATE from measured switching activity and assumed per-device constants.

Model (documented in every report under ``energy.model``):

1. Activity (measured). The IR reference executor runs closed-loop episodes of the policy's env;
   for every net the circuit has at IR level (comparator bits, LUT outputs, every partial sum of the
   popcount adder trees, action bits) we count how often it changes from one action to the next.
   ``dwc verify`` proves the RTL computes these very values, so the toggle counts are those of the
   RTL nets. Their mean toggle rate ``alpha`` is applied to every mapped LUT/carry output and FF
   (a vectorless-style extrapolation: the LUT4s a LUT6 is split into are not observed one by one).
2. Dynamic energy per action = alpha * (LUTs + carries + FFs) * 1/2 * C_net * Vcc^2.
3. Clock energy per cycle = FFs * C_clk * Vcc^2 (the clock pin and its share of the clock tree,
   charged and discharged every cycle); at full throughput one action takes one cycle.
4. Static energy per action = P_static / f, at the routed Fmax (one action per cycle).

C_net, C_clk and P_static are assumptions of the right order for each process (40 nm ECP5 and
iCE40, 55 nm Gowin GW1N/GW2A, 65 nm MachXO2, 28 nm Artix-7, GateMate and Nexus), not measurements; they are written into the report so a user can redo the
arithmetic with their vendor power calculator's figures. Only the activity is measured here.
"""
from __future__ import annotations

import numpy as np

from dwc.core.defaults import ENERGY_STEPS
from dwc.ir import Graph
from dwc.ir.reference import comparator_bits, linear_layer, lut_layer

# Per-family constants. vcc: core supply (V). c_net_ff: switched capacitance of a LUT output with its
# routing (fF); c_clk_ff: clock capacitance per flip-flop incl. its share of the clock tree (fF).
# static_mw: typical core leakage of the device at 25 C (order of magnitude; the UltraPlus is a
# low-leakage part, the HX and the ECP5 are not).
FAMILIES = {
    "ecp5": {"vcc": 1.1, "c_net_ff": 20.0, "c_clk_ff": 8.0},
    "ice40": {"vcc": 1.2, "c_net_ff": 20.0, "c_clk_ff": 8.0},
    "gowin": {"vcc": 1.2, "c_net_ff": 25.0, "c_clk_ff": 10.0},  # 55 nm: a little more than 40 nm
    "machxo2": {"vcc": 1.2, "c_net_ff": 30.0, "c_clk_ff": 12.0},  # 65 nm; the HC's regulator makes 1.2 V inside
    "gatemate": {"vcc": 1.0, "c_net_ff": 12.0, "c_clk_ff": 5.0},  # 28 nm, like the Artix-7
    "nexus": {"vcc": 1.0, "c_net_ff": 12.0, "c_clk_ff": 5.0},  # 28 nm FD-SOI
    "xc7": {"vcc": 1.0, "c_net_ff": 12.0, "c_clk_ff": 5.0},
}
STATIC_MW = {"ecp5-25k": 25.0, "ecp5-85k": 60.0, "ice40-up5k": 0.1, "ice40-hx8k": 1.4, "xc7": 60.0,
             # Gowin: assumed orders of magnitude growing with the die (GW1NZ is a low-power part), not datasheet
             # figures; Gowin's power estimator gives a device's own
             "gowin-1k": 0.5, "gowin-4k": 4.0, "gowin-9k": 8.0, "gowin-18k": 25.0,
             # assumed orders of magnitude, like the Gowin figures
             "machxo2-1200": 3.0, "machxo3-6900": 10.0, "gatemate-a1": 20.0, "nexus-40k": 10.0}
DEVICE_PARAMETERS = {"gowin-18k": {"vcc": 1.0}}  # GW2A-LV's core runs at 1.0 V, GW1N(Z,S)-LV's at 1.2 V
# ecp5-45k: between the 25k's and the 85k's in proportion to its logic cells, not a figure of its own
STATIC_MW["ecp5-45k"] = 25.0 + (60.0 - 25.0) * (43848 - 24288) / (83640 - 24288)

MODEL = ("estimate: E = alpha*(LUTs+carries+FFs)*0.5*C_net*Vcc^2 + FFs*C_clk*Vcc^2 + P_static/f, one action per "
         "cycle at the routed Fmax; alpha = mean toggle rate per action of the circuit's IR-level nets "
         "(comparators, LUT outputs, adder-tree partial sums, linear-layer codes, action bits) measured by the IR "
         "reference executor "
         "on closed-loop episodes; C_net, C_clk, Vcc and P_static are assumed per-family constants (see parameters)")


def _bits(x: np.ndarray, width: int) -> np.ndarray:
    """Integers (N,) -> their low ``width`` bits (N, width), two's complement for negatives."""
    return ((x[:, None].astype(np.int64) >> np.arange(width)) & 1).astype(np.uint8)


def net_values(g: Graph, q: np.ndarray, compressor: int | None = None) -> dict[str, np.ndarray]:
    """Every IR-level net of the circuit for integer observations ``q`` (N, D): stage -> bits (N, nets);
    the popcounts as built with ``compressor``-input first-level counters (default 6:3)."""
    bits = comparator_bits(g, q)
    stages = {"comparators": bits}
    for l, layer in enumerate(g.layers):
        bits = lut_layer(layer, bits)
        stages[f"layer{l}"] = bits
    from dwc.rtl.linear import code_shape
    from dwc.rtl.popcount import COMPRESSOR, count_width
    compressor = compressor or COMPRESSOR
    sums, counts = [], []
    for grp in g.groups:  # the adder trees level by level, as rtl.popcount.Popcount builds them
        level = []  # (value, width in the RTL): the first-level counters' outputs first
        for i in range(0, len(grp), compressor):
            chunk = bits[:, grp[i:i + compressor]].astype(np.int64)
            level.append((chunk.sum(axis=1), count_width(chunk.shape[1])))
            if chunk.shape[1] > 1:
                sums.append(_bits(*level[-1]))
        while len(level) > 1:
            nxt = [(a + b, max(wa, wb) + 1) for (a, wa), (b, wb) in zip(level[0::2], level[1::2])]
            level = nxt + level[-1:] if len(level) % 2 else nxt
            sums += [_bits(v, w) for v, w in nxt]
        counts.append(level[0][0] if level else np.zeros(len(q), dtype=np.int64))
    stages["popcounts"] = np.concatenate(sums, axis=1) if sums else np.zeros((len(q), 0), np.uint8)
    idx = np.stack(counts, axis=1)
    if g.linear:  # quantised MLPs: each linear layer's output codes, then the table index
        codes = []
        for lin in g.linear:
            idx = linear_layer(lin, idx)
            codes += [_bits(idx[:, j], code_shape(lin.lo, lin.hi).width) for j in range(lin.outputs)]
        stages["linear"] = np.concatenate(codes, axis=1)
        idx = idx - g.linear[-1].lo
    w = g.action_format.width
    stages["actions"] = np.concatenate([_bits(np.asarray(g.action_tables[a])[idx[:, a]], w)
                                        for a in range(g.action_dim)], axis=1)
    return stages


def activity(g: Graph, sequences: list[np.ndarray], compressor: int | None = None) -> dict:
    """Mean toggle rate per action of each stage's nets over sequences of consecutive observations
    (each (N, D); transitions are counted within a sequence, never across two)."""
    stats: dict[str, list[int]] = {}
    for q in sequences:
        q = np.asarray(q, dtype=np.int64)
        for name, v in net_values(g, q, compressor).items():
            s = stats.setdefault(name, [v.shape[1], 0, 0])
            s[1] += int((v[1:] != v[:-1]).sum())
            s[2] += v.shape[1] * max(0, len(q) - 1)
    toggles, nets = sum(s[1] for s in stats.values()), sum(s[2] for s in stats.values())
    if not nets:
        raise ValueError("activity needs at least two consecutive observations")
    return {"alpha": round(toggles / nets, 4),
            "transitions": sum(max(0, len(q) - 1) for q in sequences),
            "stages": {n: {"nets": s[0], "toggle_rate": round(s[1] / s[2], 4) if s[2] else 0.0}
                       for n, s in stats.items()}}


def build_activity(g: Graph, steps: int = ENERGY_STEPS, compressor: int | None = None) -> dict:
    """Activity over ``steps`` closed-loop steps of the graph's env (short episodes, e.g. a falling
    Hopper, strung together with the next seeds), or over random observations when the graph names
    no installed env (said in ``source``)."""
    import gymnasium as gym

    from dwc.ir.closed_loop import reference_episodes
    env_id = g.meta.get("env")
    if not env_id or env_id not in gym.registry:
        from dwc.ir.vectors import random_vectors
        return {**activity(g, [random_vectors(g, steps, 0)], compressor),
                "source": "random observations (the graph names no installed env)"}
    seqs: list[np.ndarray] = []
    while sum(map(len, seqs)) < steps and len(seqs) < 100:
        ep = reference_episodes(g, env_id, [len(seqs)], steps - sum(map(len, seqs)))[0]
        seqs.append(np.asarray(ep["observations"], dtype=np.int64))
    return {**activity(g, seqs, compressor),
            "source": f"{len(seqs)} closed-loop {env_id} episode(s), seeds 0..{len(seqs) - 1}, IR reference executor"}


def _sig(x: float) -> float:
    return float(f"{x:.4g}")  # four significant digits: the model is no more precise than that


def energy(report: dict, act: dict, target: str) -> dict:
    """The energy block of a synth report, from its resources, Fmax and the measured activity."""
    p = {**FAMILIES[report["family"]], **DEVICE_PARAMETERS.get(target, {})}
    core = report["core"]
    carries = sum(v for k, v in core["cells"].items() if k in ("CCU2C", "CCU2D", "SB_CARRY", "CARRY4", "ALU",
                                                                     "CC_ADDF"))
    e_net = 0.5 * p["c_net_ff"] * 1e-15 * p["vcc"] ** 2
    dyn = act["alpha"] * (core["luts"] + carries + core["ffs"]) * e_net
    clk = core["ffs"] * p["c_clk_ff"] * 1e-15 * p["vcc"] ** 2
    static_mw = STATIC_MW[target]
    fmax = report.get("fmax_mhz")
    static = static_mw * 1e-3 / (fmax * 1e6) if fmax else None
    out = {"estimate": True, "model": MODEL,
           "parameters": {**p, "static_mw": static_mw, "source": "assumed per-family constants, not measured"},
           "activity": act, "dynamic_nj": _sig(dyn * 1e9), "clock_nj": _sig(clk * 1e9),
           "static_nj": _sig(static * 1e9) if static is not None else None,
           "per_action_nj": _sig((dyn + clk + (static or 0.0)) * 1e9),
           "at_mhz": fmax}
    if static is None:
        out["note"] = "no routed Fmax for this target: static energy left out of per_action_nj"
    return out
