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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dwc.ir.compiled import load_build
from dwc.core.defaults import SIMULATOR, VECTORS, VERIFY_EPISODES
from dwc.core.errors import OptionError, UserError
from dwc.ir import Graph
from dwc.ir import reference as ref
from dwc.core.rundir import write_json

CLOCK_NS = 10  # the benches' clock period


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
    from dwc.core.config import EVAL_SEED_OFFSET, TrainConfig
    seed = graph.meta.get("seed")
    if seed is None and graph.meta.get("source_run"):
        try:
            seed = json.loads((Path(graph.meta["source_run"]) / "config.json").read_text()).get("seed")
        except (OSError, ValueError):
            pass
    return (TrainConfig.seed if seed is None else int(seed)) + EVAL_SEED_OFFSET


def verify(build: Path, env_id: str | None = None, episodes: int = VERIFY_EPISODES, sim: str = SIMULATOR,
           seed: int | None = None,
           max_steps: int | None = None, netlist: bool = False, n_random: int = VECTORS, progress: bool = True,
           log=print, bitstreams: list[str] | None = None) -> dict:
    """``bitstreams``: ``dwc synth`` targets of BUILD whose bitstream's netlist also runs both benches
    (:mod:`dwc.sim.bitstream`); an empty list means every target with a bitstream."""
    from dwc.ir.closed_loop import reference_episodes
    from dwc.ir.vectors import bench_vectors

    t_start = time.perf_counter()
    graph, ports, verilog = load_build(build)
    build = Path(build)
    env_id, bitstreams = _check_request(build, graph, env_id, episodes, max_steps, sim, n_random, bitstreams)
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
    checks = _Checks(graph, ports, build, sim, env_id, seeds, max_steps, progress, q, ref.actions_int(graph, q), ref_eps)
    designs, synth, decoded = _designs(build, verilog, ports, netlist, bitstreams, log)

    report = {"build": str(build), "env": env_id, "simulator": sim, "episodes": episodes, "seeds": seeds,
              "latency_cycles": ports["latency_cycles"], "clock_ns": CLOCK_NS,
              "vectors": {k: int(len(v)) for k, v in kinds.items()}, "designs": {}, "mismatch": None}
    if synth:
        report["netlist"] = synth
    if decoded:
        report["bitstreams"] = decoded
    try:
        for design in designs:
            d, mismatch = _check_design(design, checks, report["mismatch"] is None, log)
            report["designs"][design["name"]] = d
            if mismatch is not None:  # the first design's first mismatch is the one named
                report["mismatch"] = mismatch
    except RuntimeError as e:  # a simulator or tool failure: its message says what and where
        raise UserError(str(e)) from None
    # Latency of every result must equal the declared one, in both benches.
    lat_ok = all(set(d["vector_latency"]) <= {d["expected_latency"]} and
                 set(d["closed_loop_latency"]) <= {d["expected_latency"]} for d in report["designs"].values())
    report["mismatches"] = sum(d["vector_mismatches"] + d["closed_loop_mismatches"] for d in report["designs"].values())
    report["steps"] = report["designs"]["rtl"]["steps"]
    report["return_rtl"] = report["designs"]["rtl"]["return_rtl"]
    report["return_ref"] = [e["return"] for e in ref_eps]
    report["latency_ok"] = lat_ok
    report["reference_seconds"] = round(ref_seconds, 2)
    report["passed"] = (report["mismatches"] == 0 and lat_ok
                        and all(b.get("reproduced", True) for b in report.get("bitstreams", {}).values()))
    report["seconds"] = round(time.perf_counter() - t_start, 2)
    write_json(build / "verify_report.json", report)
    return report


def _check_request(build: Path, graph: Graph, env_id: str | None, episodes: int, max_steps: int | None, sim: str,
                   n_random: int, bitstreams: list[str] | None) -> tuple[str, list[str] | None]:
    """The environment and the bitstream targets to check, after the checks that need nothing long to
    run: a usage error stops here."""
    from dwc.sim.bitstream import BitstreamError, bitstream_targets, synth_report
    from dwc.sim.runner import SIMULATORS, SimulatorMissing, check_simulator
    env_id = env_id or graph.meta.get("env")
    if not env_id:
        raise OptionError("env_id", ": the graph names no environment; give one")
    if episodes < 0:
        raise OptionError("episodes", f" must be >= 0, got {episodes}")
    if max_steps is not None and max_steps < 1:
        raise OptionError("max_steps", f" must be >= 1, got {max_steps}")
    if n_random < 0:
        raise OptionError("n_random", f" must be >= 0, got {n_random}")
    if sim not in SIMULATORS:
        raise OptionError("sim", f" {sim!r}: choose from {', '.join(SIMULATORS)}")
    try:
        check_simulator(sim)
    except (SimulatorMissing, ValueError) as e:
        raise UserError(str(e)) from None
    if bitstreams is not None:  # before anything long runs: a build without the bitstream asked for stops here
        bitstreams = bitstreams or bitstream_targets(build)
        if not bitstreams:
            raise UserError(f"{build}: no bitstream to check (nothing under {build / 'synth'}); "
                            f"run: dwc synth {build} --target ecp5-25k (or ice40-up5k)")
        try:
            for target in bitstreams:
                synth_report(build, target)
        except BitstreamError as e:
            raise UserError(str(e)) from None
    return env_id, bitstreams


def _designs(build: Path, verilog: Path, ports: dict, netlist: bool, bitstreams: list[str] | None,
             log) -> tuple[list[dict], dict | None, dict]:
    """The designs to check: (each design, the netlist synthesis' record or None, the bitstreams' by target)."""
    from dwc.sim.bitstream import BitstreamError, NotReproduced, prepare
    # Each design: its sources; lint_clean: the emitted Verilog lints clean under Verilator's default
    # warnings (every policy type), so its warnings stay fatal; a yosys netlist is not written to be.
    # top: core, or the serial shell of a bitstream.
    L = ports["latency_cycles"]
    designs = [{"name": "rtl", "sources": [verilog], "lint_clean": True, "top": "core",
                "toplevel": "dwc_core", "latency": L, "ports_only": False}]
    synth = None
    if netlist:
        from dwc.sim.netlist import synthesize
        log("synthesising the netlist with yosys ...")
        synth = synthesize(verilog, build / "verify" / "netlist")
        designs.append({**designs[0], "name": "netlist", "sources": [Path(synth["netlist"])], "lint_clean": False})
    decoded = {}
    for target in bitstreams or []:
        log(f"[{target}] the bitstream's netlist ...")
        try:
            b = prepare(build, target, build / "verify" / f"bitstream-{target}", log)
        except NotReproduced as e:  # checked, and found to differ: a failure, not a usage error
            decoded[target] = {"target": target, "reproduced": False, "error": str(e)}
            continue
        except (BitstreamError, RuntimeError) as e:
            raise UserError(str(e)) from None
        decoded[target] = b
        # through the serial shell, done is a register: one cycle after the core's valid_out
        designs.append({"name": f"bitstream-{target}", "sources": [Path(s) for s in b["sources"]], "lint_clean": False,
                        "top": "harness" if b["top"] == "shell" else "core",
                        "toplevel": b["toplevel"], "latency": L + (b["top"] == "shell"),
                        "ports_only": True})
    return designs, synth, decoded


@dataclass(frozen=True)
class _Checks:
    """What every design is checked on: the vectors and the reference's actions for them, and the
    reference's closed-loop episodes (on ``seeds``)."""
    graph: Graph
    ports: dict
    build: Path
    sim: str
    env_id: str
    seeds: list[int]
    max_steps: int | None
    progress: bool
    q: np.ndarray
    want: np.ndarray
    ref_eps: list[dict]


def _check_design(design: dict, checks: _Checks, describe: bool, log) -> tuple[dict, dict | None]:
    """One design through both benches: its report entry, and its first mismatch (with a waveform of it)
    where it has one and ``describe`` (no earlier design had one)."""
    from dwc.ir.closed_loop import action_mismatches
    name, sources, sim = design["name"], design["sources"], checks.sim
    q, want, ref_eps = checks.q, checks.want, checks.ref_eps
    log(f"[{name}] building with {sim} ...")
    t0 = time.perf_counter()
    bench = _bench(design, checks.ports, checks.build / "verify" / f"{name}-{sim}", sim)
    build_s = time.perf_counter() - t0
    t_run = time.perf_counter()
    log(f"[{name}] vector bench: {len(q)} observations{' through the serial shell' if design['top'] == 'harness' else ''} ...")
    vec = bench.vectors(q)
    got = vec["actions"]
    bad = [i for i in range(len(q)) if i >= len(got) or not np.array_equal(got[i], want[i])]
    cl = {"episodes": [], "latency": [], "seconds": 0.0}
    if checks.seeds:
        log(f"[{name}] closed loop: {len(checks.seeds)} {checks.env_id} episode(s) with every action from the circuit ...")
        cl = bench.closed_loop(checks.build / "graph.json", checks.env_id, checks.seeds, checks.max_steps,
                               sum(e["steps"] for e in ref_eps) if checks.progress else None)
    steps = sum(e["steps"] for e in cl["episodes"])
    first = _first_episode_mismatch(cl["episodes"], ref_eps)
    ep_mismatches = action_mismatches(cl["episodes"], ref_eps)
    d = {"sources": [str(s) for s in sources], "top": design["top"], "build_seconds": round(build_s, 2),
         "vector_mismatches": len(bad), "vector_latency": sorted(set(vec["latency"])),
         "expected_latency": design["latency"],
         "one_result_per_cycle": (len(got) == len(q) and set(vec["latency"]) == {design["latency"]}
                                  if design["top"] == "core" else None),  # the shell: one at a time
         "steps": steps, "episode_steps": [e["steps"] for e in cl["episodes"]], "closed_loop_mismatches": ep_mismatches,
         "closed_loop_latency": cl["latency"],
         "return_rtl": [e["return"] for e in cl["episodes"]], "return_ref": [e["return"] for e in ref_eps],
         "env_steps_per_s": round(steps / cl["seconds"], 1) if cl["seconds"] else None,
         "run_seconds": round(time.perf_counter() - t_run, 2)}
    if not describe or not (bad or first is not None):
        return d, None
    graph = checks.graph
    if first is not None:  # a closed-loop step is the most telling place to name
        e, t = first
        obs_seq = np.array(cl["episodes"][e]["observations"][:t + 1],
                           dtype=np.int64).reshape(-1, graph.obs_dim)
        window = obs_seq[max(0, t - 7):]
        rtl_a = cl["episodes"][e]["actions"][t] if t < len(cl["episodes"][e]["actions"]) else []
        ref_a = ref_eps[e]["actions"][t] if t < len(ref_eps[e]["actions"]) else []
        m = {"design": name, "bench": "closed_loop", "episode": e, "seed": checks.seeds[e], "step": t,
             **_describe(graph, obs_seq[-1] if len(obs_seq) else [], rtl_a, ref_a)}
    else:
        i = bad[0]
        window = q[max(0, i - 7):i + 1]
        m = {"design": name, "bench": "vectors", "vector": int(i),
             **_describe(graph, q[i], got[i] if i < len(got) else [], want[i])}
    m.update(_waveform(design, checks.ports, checks.build / "verify" / f"{name}-{sim}-waves", sim, window))
    return d, m


def _bench(design: dict, ports: dict, build_dir: Path, sim: str, waves: bool = False):
    from dwc.sim.runner import Bench
    return Bench(design["sources"], ports, build_dir, sim, waves=waves, warnings_fatal=design["lint_clean"],
                 toplevel=design["toplevel"], top=design["top"],
                 ports_only=design["ports_only"])


def _waveform(design: dict, ports, build_dir: Path, sim: str, window: np.ndarray) -> dict:
    """Replay the observations leading up to the first mismatch (the last one is it) with tracing on.
    The circuit's output depends only on its last input, so the replay shows the same wrong action."""
    try:
        bench = _bench(design, ports, build_dir, sim, waves=True)
        r = bench.vectors(window)
    except (RuntimeError, OSError) as e:  # the simulator failed: the mismatch report matters more than the waveform
        return {"waveform": None, "waveform_error": str(e)}
    enter = r["accepted"][-1]
    if design["top"] == "harness":
        return {"waveform": str(bench.wave_file),
                "waveform_note": f"the mismatching observation is shifted in on sin (LSB first) and loaded at rising "
                                 f"edge {enter}; done rises {design['latency']} edges later and the action is shifted "
                                 f"out on sout, LSB first (clock {CLOCK_NS} ns)"}
    return {"waveform": str(bench.wave_file),
            "waveform_note": f"the mismatching observation is driven in cycle {enter} after reset and its action "
                             f"appears {ports['latency_cycles']} rising edges later "
                             f"(clock {CLOCK_NS} ns, 2 reset cycles first)"}


def summary(report: dict) -> str:
    lines = [f"dwc verify: {report['build']} on {report['env']} with {report['simulator']}, "
             f"latency {report['latency_cycles']} cycles (declared)"]
    v = report["vectors"]
    for target, b in report.get("bitstreams", {}).items():
        if not b.get("reproduced", True):
            lines.append(f"[bitstream-{target}] NOT CHECKED, FAILED: {b['error']}")
            continue
        lines.append(f"[bitstream-{target}] {b['bitstream']} (sha256 {b['bitstream_sha256'][:16]}...): {b['method']}, "
                     f"top: {'the serial shell' if b['top'] == 'shell' else 'dwc_core'}, {b['seconds']} s")
    for name, d in report["designs"].items():
        if d.get("top", "core") == "harness":
            how = (f"latency {d['vector_latency']} cycles from load to done (the core's "
                   f"{report['latency_cycles']} + 1), one observation at a time through the serial shell")
        else:
            how = (f"latency {d['vector_latency']} cycles, one result per cycle: "
                   f"{'yes' if d['one_result_per_cycle'] else 'NO'}")
        lines.append(f"[{name}] vectors: {sum(v.values())} ({v['random']} random, {v['extreme']} extreme, "
                     f"{v['recorded']} recorded): {d['vector_mismatches']} mismatches, {how}")
        if d["return_rtl"]:
            lines.append(f"[{name}] {'episode':>8} {'seed':>5} {'steps':>6} {'return (circuit)':>17} {'return (reference)':>19}")
            for i, (a, b) in enumerate(zip(d["return_rtl"], d["return_ref"])):
                lines.append(f"[{name}] {i:>8} {report['seeds'][i]:>5} {d['episode_steps'][i]:>6} {a:>17.3f} {b:>19.3f}")
            lines.append(f"[{name}] closed loop: {d['steps']} steps, {d['closed_loop_mismatches']} action mismatches, "
                         f"{d['env_steps_per_s']} env-steps/s in the simulator")
        if "run_seconds" in d:
            lines.append(f"[{name}] {d['build_seconds']} s to build, {d['run_seconds']} s to run both benches")
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
