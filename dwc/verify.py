"""``dwc verify``: prove that a compiled circuit computes exactly what the frozen policy computes.

For the emitted Verilog (and, with ``netlist``, the netlist yosys synthesises from it), in a real
simulator through cocotb:
1. vector bench: random, extreme and recorded-rollout observations, one per cycle, against the IR
   reference executor: every action, the latency of every result;
2. closed loop: MuJoCo episodes whose actions come from the circuit, next to the same episodes
   driven by the reference executor: identical action sequences and returns.
The first mismatch is named (bench, episode, step, observation, both actions) and a waveform of it
is dumped.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from .errors import UserError
from .ir import Graph
from .ir import reference as ref
from .rundir import write_json

CLOCK_NS = 10  # the benches' clock period


def load_build(build: Path) -> tuple[Graph, dict, Path]:
    build = Path(build)
    missing = [n for n in ("graph.json", "dwc_core.json", "dwc_core.v") if not (build / n).exists()]
    if missing:
        raise UserError(f"{build}: not a dwc compile output (missing {', '.join(missing)}); "
                        f"run: dwc compile RUN --out {build}")
    try:
        graph = Graph.load(build / "graph.json")
        ports = json.loads((build / "dwc_core.json").read_text())
    except (ValueError, KeyError) as e:
        raise UserError(f"{build}: {e}") from None
    return graph, ports, build / "dwc_core.v"


def _describe(graph: Graph, q, rtl, want) -> dict:
    fmt = graph.action_format
    return {"observation_int": [int(v) for v in q],
            "observation": [float(f.to_float(v)) for f, v in zip(graph.obs_formats, q)],
            "action_rtl_int": [int(v) for v in rtl], "action_ref_int": [int(v) for v in want],
            "action_rtl": [float(fmt.to_float(v)) for v in rtl], "action_ref": [float(fmt.to_float(v)) for v in want]}


def _first_episode_mismatch(rtl_eps: list[dict], ref_eps: list[dict]) -> tuple[int, int] | None:
    for e, (a, b) in enumerate(zip(rtl_eps, ref_eps)):
        for t, (x, y) in enumerate(zip(a["actions"], b["actions"])):
            if x != y:
                return e, t
        if len(a["actions"]) != len(b["actions"]):
            return e, min(len(a["actions"]), len(b["actions"]))
    return None


def evaluation_seed(graph) -> int:
    """The first evaluation episode's seed of a compiled policy, as dwc eval picks it: its training
    seed (from the graph, else its source run's config.json, else the default 1) + EVAL_SEED_OFFSET."""
    from .config import EVAL_SEED_OFFSET, TrainConfig
    seed = graph.meta.get("seed")
    if seed is None and graph.meta.get("source_run"):
        try:
            seed = json.loads((Path(graph.meta["source_run"]) / "config.json").read_text()).get("seed")
        except (OSError, ValueError):
            pass
    return (TrainConfig.seed if seed is None else int(seed)) + EVAL_SEED_OFFSET


def verify(build: Path, env_id: str | None = None, episodes: int = 3, sim: str = "verilator",
           seed: int | None = None,
           max_steps: int | None = None, netlist: bool = False, n_random: int = 1000, progress: bool = True,
           log=print) -> dict:
    from .sim.closed_loop import action_mismatches, reference_episodes
    from .sim.runner import Bench, SimulatorMissing, check_simulator
    from .sim.vectors import bench_vectors

    t_start = time.perf_counter()
    graph, ports, verilog = load_build(build)
    build = Path(build)
    env_id = env_id or graph.meta.get("env")
    if not env_id:
        raise UserError("the graph names no environment; pass --env")
    if episodes < 0 or (max_steps is not None and max_steps < 1):
        raise UserError("--episodes must be >= 0 and --max-steps >= 1")
    try:
        check_simulator(sim)
    except (SimulatorMissing, ValueError) as e:
        raise UserError(str(e)) from None
    seed = evaluation_seed(graph) if seed is None else seed
    seeds = [seed + i for i in range(episodes)]
    try:
        t0 = time.perf_counter()
        ref_eps = reference_episodes(graph, env_id, seeds, max_steps, progress)
        ref_seconds = time.perf_counter() - t0
    except ValueError as e:
        raise UserError(str(e)) from None
    kinds = bench_vectors(graph, ref_eps, n_random, seed)
    q = np.concatenate(list(kinds.values()))
    want = ref.actions_int(graph, q)

    # (name, sources, lint-clean): the emitted Verilog lints clean under Verilator's default
    # warnings (every policy type), so its warnings stay fatal; a yosys netlist is not written to be
    designs = [("rtl", [verilog], True)]
    synth = None
    if netlist:
        from .sim.netlist import synthesize
        log("synthesising the netlist with yosys ...")
        synth = synthesize(verilog, build / "verify" / "netlist")
        designs.append(("netlist", [Path(synth["netlist"])], False))

    report = {"build": str(build), "env": env_id, "simulator": sim, "episodes": episodes, "seeds": seeds,
              "latency_cycles": ports["latency_cycles"], "clock_ns": CLOCK_NS,
              "vectors": {k: int(len(v)) for k, v in kinds.items()}, "designs": {}, "mismatch": None}
    if synth:
        report["netlist"] = synth
    try:
        for name, sources, lint_clean in designs:
            log(f"[{name}] building with {sim} ...")
            t0 = time.perf_counter()
            bench = Bench(sources, ports, build / "verify" / f"{name}-{sim}", sim, warnings_fatal=lint_clean,
                          unoptimised=name == "netlist")  # a gate netlist builds ~5x faster at -O0
            build_s = time.perf_counter() - t0
            log(f"[{name}] vector bench: {len(q)} observations ...")
            vec = bench.vectors(q)
            got = vec["actions"]
            bad = [i for i in range(len(q)) if i >= len(got) or not np.array_equal(got[i], want[i])]
            cl = {"episodes": [], "latency": [], "seconds": 0.0}
            if episodes:
                log(f"[{name}] closed loop: {episodes} {env_id} episode(s) with every action from the circuit ...")
                cl = bench.closed_loop(build / "graph.json", env_id, seeds, max_steps,
                                          sum(e["steps"] for e in ref_eps) if progress else None)
            steps = sum(e["steps"] for e in cl["episodes"])
            first = _first_episode_mismatch(cl["episodes"], ref_eps)
            ep_mismatches = action_mismatches(cl["episodes"], ref_eps)
            d = {"sources": [str(s) for s in sources], "build_seconds": round(build_s, 2),
                 "vector_mismatches": len(bad), "vector_latency": sorted(set(vec["latency"])),
                 "one_result_per_cycle": len(got) == len(q) and set(vec["latency"]) == {ports["latency_cycles"]},
                 "steps": steps, "episode_steps": [e["steps"] for e in cl["episodes"]], "closed_loop_mismatches": ep_mismatches,
                 "closed_loop_latency": cl["latency"],
                 "return_rtl": [e["return"] for e in cl["episodes"]], "return_ref": [e["return"] for e in ref_eps],
                 "env_steps_per_s": round(steps / cl["seconds"], 1) if cl["seconds"] else None}
            report["designs"][name] = d
            if report["mismatch"] is None and (bad or first is not None):
                if first is not None:  # a closed-loop step is the most telling place to name
                    e, t = first
                    obs_seq = np.array(cl["episodes"][e]["observations"][:t + 1],
                                       dtype=np.int64).reshape(-1, graph.obs_dim)
                    window = obs_seq[max(0, t - 7):]
                    rtl_a = cl["episodes"][e]["actions"][t] if t < len(cl["episodes"][e]["actions"]) else []
                    ref_a = ref_eps[e]["actions"][t] if t < len(ref_eps[e]["actions"]) else []
                    m = {"design": name, "bench": "closed_loop", "episode": e, "seed": seeds[e], "step": t,
                         **_describe(graph, obs_seq[-1] if len(obs_seq) else [], rtl_a, ref_a)}
                else:
                    i = bad[0]
                    window = q[max(0, i - 7):i + 1]
                    m = {"design": name, "bench": "vectors", "vector": int(i),
                         **_describe(graph, q[i], got[i] if i < len(got) else [], want[i])}
                m.update(_waveform(sources, ports, build / "verify" / f"{name}-{sim}-waves", sim, lint_clean,
                                   name == "netlist", window))
                report["mismatch"] = m
    except RuntimeError as e:  # a simulator or tool failure: its message says what and where
        raise UserError(str(e)) from None
    # Latency of every result must equal the declared one, in both benches.
    lat_ok = all(set(d["vector_latency"]) == {ports["latency_cycles"]} and
                 set(d["closed_loop_latency"]) <= {ports["latency_cycles"]} for d in report["designs"].values())
    report["mismatches"] = sum(d["vector_mismatches"] + d["closed_loop_mismatches"] for d in report["designs"].values())
    report["steps"] = report["designs"]["rtl"]["steps"]
    report["return_rtl"] = report["designs"]["rtl"]["return_rtl"]
    report["return_ref"] = [e["return"] for e in ref_eps]
    report["latency_ok"] = lat_ok
    report["reference_seconds"] = round(ref_seconds, 2)
    report["passed"] = report["mismatches"] == 0 and lat_ok
    report["seconds"] = round(time.perf_counter() - t_start, 2)
    write_json(build / "verify_report.json", report)
    return report


def _waveform(sources, ports, build_dir: Path, sim: str, lint_clean: bool, unoptimised: bool,
              window: np.ndarray) -> dict:
    """Replay the observations leading up to the first mismatch (the last one is it) with tracing on.
    The circuit's output depends only on its last input, so the replay shows the same wrong action."""
    from .sim.runner import Bench
    try:
        bench = Bench(sources, ports, build_dir, sim, waves=True, warnings_fatal=lint_clean, unoptimised=unoptimised)
        r = bench.vectors(window)
    except (RuntimeError, OSError) as e:  # the simulator failed: the mismatch report matters more than the waveform
        return {"waveform": None, "waveform_error": str(e)}
    enter = r["accepted"][-1]
    return {"waveform": str(bench.wave_file),
            "waveform_note": f"the mismatching observation is driven in cycle {enter} after reset and its action "
                             f"appears {ports['latency_cycles']} rising edges later "
                             f"(clock {CLOCK_NS} ns, 2 reset cycles first)"}


def summary(report: dict) -> str:
    lines = [f"dwc verify: {report['build']} on {report['env']} with {report['simulator']}, "
             f"latency {report['latency_cycles']} cycles (declared)"]
    v = report["vectors"]
    for name, d in report["designs"].items():
        lines.append(f"[{name}] vectors: {sum(v.values())} ({v['random']} random, {v['extreme']} extreme, "
                     f"{v['recorded']} recorded): {d['vector_mismatches']} mismatches, latency "
                     f"{d['vector_latency']} cycles, one result per cycle: {'yes' if d['one_result_per_cycle'] else 'NO'}")
        if d["return_rtl"]:
            lines.append(f"[{name}] {'episode':>8} {'seed':>5} {'steps':>6} {'return (circuit)':>17} {'return (reference)':>19}")
            for i, (a, b) in enumerate(zip(d["return_rtl"], d["return_ref"])):
                lines.append(f"[{name}] {i:>8} {report['seeds'][i]:>5} {d['episode_steps'][i]:>6} {a:>17.3f} {b:>19.3f}")
            lines.append(f"[{name}] closed loop: {d['steps']} steps, {d['closed_loop_mismatches']} action mismatches, "
                         f"{d['env_steps_per_s']} env-steps/s in the simulator")
    m = report["mismatch"]
    if m:
        where = (f"vector {m['vector']}" if m["bench"] == "vectors"
                 else f"episode {m['episode']} (seed {m['seed']}) step {m['step']}")
        lines.append(f"FIRST MISMATCH [{m['design']}] {m['bench']} {where}: observation {m['observation']}; "
                     f"circuit {m['action_rtl']} vs reference {m['action_ref']}")
        if m.get("waveform"):
            lines.append(f"  waveform: {m['waveform']} ({m['waveform_note']})")
    lines.append(("PASS" if report["passed"] else "FAIL") + f": {report['mismatches']} mismatches "
                 f"in {report['seconds']} s; report: {report['build']}/verify_report.json")
    return "\n".join(lines)
