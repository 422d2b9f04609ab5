"""``dwc compile``: trained run -> BUILD/graph.json (+ the HDL stages as they land)."""
from __future__ import annotations

import time
from pathlib import Path

from dwc.core.defaults import ACT_WIDTH, COMPARATOR_BANK, DEFAULT_FREQ_MHZ, OBS_WIDTH, PIPELINE, TABLE_BITS
from dwc.core.errors import OptionError, UserError
from dwc.core.pipeline import AUTO, resolve_stages
from dwc.ir import Graph
from dwc.frontends.freeze import freeze
from dwc.ir.passes import optimize
from dwc.ir.inputs_report import heatmap_png, input_usage
from dwc.core.rundir import replaces_outputs, write_json, write_text
from dwc.flows.derived import clears_derived


def freeze_run(run: Path, obs_width: int = OBS_WIDTH, act_width: int = ACT_WIDTH, obs_frac: list[int] | None = None,
               loaded: tuple | None = None) -> Graph:
    """Load a run's actor and freeze it; a clear error for policies that cannot be frozen yet.
    ``loaded``: the run's (actor, config, step) as :func:`dwc.flows.export.load_actor` gave them on the CPU,
    so a caller that has them does not read the checkpoint (replay buffer and all) a second time."""
    from dwc.train.checkpoint import load_actor
    actor, cfg, step = loaded if loaded is not None else load_actor(run)
    if obs_frac is not None:
        if len(obs_frac) == 1:
            obs_frac = obs_frac * actor.normalizer.mean.numel()
        if len(obs_frac) != actor.normalizer.mean.numel():
            raise OptionError("obs_frac", f": {len(obs_frac)} values for {actor.normalizer.mean.numel()} observation dims")
        if any(not -32 <= f <= 32 for f in obs_frac):
            raise OptionError("obs_frac", " values must be in -32..32")
    if cfg.actor.policy not in ("dwc", "gates", "qmlp"):
        raise UserError(f"{run}: a {cfg.actor.policy!r} policy has no integer circuit (dwc, gates and qmlp do)")
    for name, w in (("obs_width", obs_width), ("act_width", act_width)):
        if not 4 <= w <= 24:  # 24: q / 2**frac must be exact in float32 for the bit-exact check
            raise OptionError(name, f" must be in 4..24, got {w}")
    meta = {"env": cfg.env, "policy": cfg.actor.policy, "source_run": str(run), "train_steps": int(step),
            "seed": cfg.seed,
            "actor": cfg.actor.to_dict(), "target": cfg.target}
    if cfg.actor.policy == "qmlp":
        from dwc.frontends.freeze import freeze_qmlp
        return freeze_qmlp(actor, obs_width, act_width, meta, obs_frac)
    return freeze(actor, obs_width, act_width, meta, obs_frac)


def popcount_compressor(graph: Graph, target: str | None = None) -> int:
    """The popcounts' first-level counter for the fabric the circuit is built for: ``target``'s (an
    FPGA name or family), else the family the run was trained for (``dwc train --lut-family``), else a
    LUT6 fabric's 6:3 (see :data:`dwc.rtl.popcount.COMPRESSORS` for what was measured)."""
    from dwc.rtl.popcount import COMPRESSOR, compressor_for
    from dwc.core.targets import NATIVE_LUT_INPUTS, family_of
    if target and target != "none" and family_of(target) is None:
        raise OptionError("target", f" {target!r}: choose an FPGA family ({', '.join(NATIVE_LUT_INPUTS)}) or a device "
                        f"of one (e.g. ecp5-25k)")
    family = family_of(target) or family_of(graph.meta.get("target"))
    return compressor_for(NATIVE_LUT_INPUTS[family]) if family else COMPRESSOR


# Constant multipliers in the Verilog, and what synthesis made of them here (yosys + nextpnr, ECP5, 2 CPU
# cores): 132 (the shipped 2 x 16 quantised MLP) took 83 s in all; 1,612 (2 x 64) did not finish in
# 10 minutes (results/qmlp-cost/). Above this many, compile says so before a long verify or synth starts.
SLOW_MULTIPLIERS = 400


def arithmetic_cost(verilog: str) -> dict:
    """The constant-coefficient arithmetic of the linear layers as emitted (quantised MLPs), with a
    warning when it is large enough to make Verilator and synthesis take many minutes."""
    import re
    cells = {k: len(re.findall(rf"^\s*dwc_{k} ", verilog, re.M)) for k in ("smulc", "sadd")}
    cost = {"multipliers": cells["smulc"], "adders": cells["sadd"], "warning": None}
    if cells["smulc"] > SLOW_MULTIPLIERS:
        cost["warning"] = (f"the core has {cells['smulc']:,} constant multipliers and {cells['sadd']:,} adders: "
                           f"expect verify and synth to take tens of minutes or more (measured here: 132 "
                           f"multipliers synthesised in 83 s, 1,612 did not finish in 10 minutes). A smaller "
                           f"--hidden, a sparse --fan-in or fewer --weight-bits shrink it")
    return cost


def _warn_arithmetic(hdl: dict, log) -> None:
    if hdl["arithmetic"] and hdl["arithmetic"]["warning"]:
        log(f"warning: {hdl['arithmetic']['warning']}")


def emit_verilog(graph: Graph, out: Path, pipeline: int | str, scope: str = "policy",
                 table_bits: int | None = None, compressor: int | None = None, comparators: str = COMPARATOR_BANK,
                 input_register: bool = True) -> dict:
    """BUILD/dwc_core.v (Amaranth -> Verilog) and BUILD/dwc_core.json (ports, formats, latency).
    ``pipeline``: register stages, or "max" for every cut the graph has (highest Fmax); ``scope``:
    see :class:`dwc.rtl.core.DWCCore` ("network" is for benchmarks against published cores);
    ``table_bits``: linear-layer neurons reading at most this many bits become lookup tables;
    ``compressor``: the popcounts' first-level counter (default: :func:`popcount_compressor`);
    ``comparators``: the comparator bank's lowering, "shared" or "full" (:mod:`dwc.rtl.comparators`);
    ``input_register``: False feeds the observation to the logic unregistered (one cycle less)."""
    from dwc.rtl.comparators import COMPARATORS
    from dwc.rtl.core import DWCCore, max_pipeline, to_verilog
    if comparators not in COMPARATORS:
        raise OptionError("comparators", f": choose {' or '.join(COMPARATORS)}, got {comparators!r}")
    compressor = popcount_compressor(graph) if compressor is None else compressor
    try:
        pipeline = resolve_stages(pipeline, max_pipeline(graph, compressor))
        core = DWCCore(graph, pipeline, cells="verilog", scope=scope, compressor=compressor,
                       table_bits=TABLE_BITS if table_bits is None else table_bits, comparators=comparators,
                       input_register=input_register)
    except ValueError as e:
        raise OptionError("pipeline", f": {e}") from None
    t0 = time.perf_counter()
    verilog = to_verilog(core)
    write_text(out / "dwc_core.v", verilog)
    ports = core.port_description()
    write_json(out / "dwc_core.json", ports)
    return {"verilog": str(out / "dwc_core.v"), "ports": str(out / "dwc_core.json"),
            "latency_cycles": ports["latency_cycles"], "pipeline": ports["pipeline"],
            "popcount_compressor": compressor, "comparators": comparators, "input_register": input_register,
            "linear_lowering": ports.get("linear_lowering"),
            "arithmetic": arithmetic_cost(verilog) if graph.linear else None,
            "seconds": round(time.perf_counter() - t0, 3)}


def choose_pipeline(graph: Graph, out: Path, target: str, freq: float, table_bits: int | None = None,
                    log=print, compressor: int | None = None, comparators: str = COMPARATOR_BANK,
                    input_register: bool = True) -> tuple[int, list[dict]]:
    """Timing-aware lowering: the fewest register stages whose core, synthesised and placed and routed
    for ``target``, reaches ``freq`` MHz (measured by nextpnr, not modelled). Binary search over
    0..max stages (Fmax grows with the stages, up to place-and-route noise); each tried design is kept
    under OUT/pipeline_search/pK. When even the deepest pipeline misses the clock, it is the choice."""
    from dwc.fpga.synth import TARGETS, DoesNotFit, synth
    from dwc.rtl.core import max_pipeline
    if target not in TARGETS or not TARGETS[target].nextpnr:
        raise OptionError("pipeline", f" auto measures Fmax by place and route: give --target one of "
                        f"{', '.join(k for k, t in TARGETS.items() if t.nextpnr)}")
    compressor = popcount_compressor(graph, target) if compressor is None else compressor
    tried: dict[int, dict] = {}

    def measure(k: int) -> float:
        d = out / "pipeline_search" / f"p{k}"
        d.mkdir(parents=True, exist_ok=True)
        emit_verilog(graph, d, k, table_bits=table_bits, compressor=compressor, comparators=comparators,
                     input_register=input_register)
        log(f"[pipeline auto] {k} stages: synthesis, place and route for {target} ...")
        try:
            r = synth(d, target, freq, log=lambda *a: None, energy_steps=0)
        except DoesNotFit as e:
            raise UserError(str(e)) from None
        tried[k] = {"pipeline": k, "latency_cycles": r["latency_cycles"], "fmax_mhz": r["fmax_mhz"],
                    "luts": r["luts"], "ffs": r["ffs"], "latency_ns": r.get("action_latency_ns")}
        log(f"[pipeline auto] {k} stages: {r['fmax_mhz']} MHz, {r['luts']} LUTs, latency {r['latency_cycles']}")
        return r["fmax_mhz"] or 0.0

    lo, hi = 0, max_pipeline(graph, compressor)
    if measure(hi) >= freq:
        while lo < hi:  # invariant: hi meets the clock
            mid = (lo + hi) // 2
            if measure(mid) >= freq:
                hi = mid
            else:
                lo = mid + 1
    return hi, sorted(tried.values(), key=lambda t: t["pipeline"])


@clears_derived
@replaces_outputs("graph.json", "dwc_core.v", "dwc_core.json", "inputs_report.json", "inputs_heatmap.png",
                  "policy.onnx", "compile_report.json", "pipeline_search")
def compile_run(run: Path, out: Path, obs_width: int = OBS_WIDTH, act_width: int = ACT_WIDTH, onnx: bool = False,
                obs_frac: list[int] | None = None, pipeline: int | str = PIPELINE, table_bits: int | None = None,
                target: str | None = None, freq: float = DEFAULT_FREQ_MHZ, log=print,
                comparators: str = COMPARATOR_BANK, input_register: bool = True) -> dict:
    """``pipeline``: register stages, "max", or "auto" (the fewest that reach ``freq`` MHz on ``target``,
    measured by :func:`choose_pipeline`). ``target`` (or the one trained for) also picks the popcount
    structure (:func:`popcount_compressor`). ``comparators``, ``input_register``: see :func:`emit_verilog`."""
    t0 = time.perf_counter()
    frozen = freeze_run(run, obs_width, act_width, obs_frac)
    graph, passes = optimize(frozen)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    graph.save(out / "graph.json")
    compressor = popcount_compressor(graph, target)
    search = None
    if pipeline == AUTO:
        pipeline, tried = choose_pipeline(graph, out, target, freq, table_bits, log, compressor, comparators,
                                          input_register)
        search = {"target": target, "requested_mhz": freq, "chosen": pipeline, "tried": tried,
                  "met": any(t["pipeline"] == pipeline and (t["fmax_mhz"] or 0) >= freq for t in tried)}
    usage = input_usage(frozen, graph, frozen.meta["thermometer_bits"])
    write_json(out / "inputs_report.json", usage)
    heatmap_png(usage, out / "inputs_heatmap.png",
                f"{graph.meta['env']}: {usage['comparators_used']} of {usage['comparators_possible']} "
                f"comparators read (grey: unused)")
    if onnx:
        try:
            from dwc.backends.onnx_export import export
            export(graph, out / "policy.onnx")
        except ImportError:
            raise OptionError("onnx", " needs the onnx package: pip install 'dwc[onnx]'") from None
    hdl = emit_verilog(graph, out, pipeline, table_bits=table_bits, compressor=compressor, comparators=comparators,
                       input_register=input_register)
    _warn_arithmetic(hdl, log)
    counts = graph.counts()
    actor_cfg = frozen.meta["actor"]
    budget = {"max_luts": actor_cfg.get("max_luts") or None, "luts": counts["luts"],
              "max_comparators": actor_cfg.get("max_comparators") or None, "comparators": counts["comparators"]}
    budget["met"] = ((budget["max_luts"] is None or budget["luts"] <= budget["max_luts"]) and
                     (budget["max_comparators"] is None or budget["comparators"] <= budget["max_comparators"]))
    report = {
        "graph": str(out / "graph.json"),
        "env": graph.meta["env"],
        "counts": counts,
        "budget": budget,  # the training budgets against the frozen, optimised circuit
        "passes": passes,  # counts after each pass, from the frozen graph ("input") to the end
        "obs_formats": [{"width": f.width, "frac": f.frac} for f in graph.obs_formats],
        "action_format": {"width": graph.action_format.width, "frac": graph.action_format.frac},
        "inputs": {"comparators_used": usage["comparators_used"], "dims_unused": usage["dims_unused"],
                   "report": str(out / "inputs_report.json"), "heatmap": str(out / "inputs_heatmap.png")},
        "onnx": str(out / "policy.onnx") if onnx else None,
        "hdl": hdl,
        "pipeline_search": search,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    write_json(out / "compile_report.json", report)
    return report


@clears_derived
@replaces_outputs("graph.json", "dwc_core.v", "dwc_core.json", "import_report.json")
def import_model(model: Path, out: Path, env: str | None = None, obs_width: int = OBS_WIDTH, act_width: int = ACT_WIDTH,
                 pipeline: int | str = PIPELINE, check_vectors: int = 20000, table_bits: int | None = None,
                 log=print) -> dict:
    """``dwc import``: a quantised ONNX MLP (QDQ) -> BUILD/graph.json and the Verilog, like ``compile``.

    The lowering checks itself: onnxruntime and the IR run the same fixed-point observations, the last
    layer's codes must agree on every one (else nothing is written)."""
    from dwc.frontends.onnx_import import check_against_onnxruntime, import_onnx, load_model
    if pipeline == AUTO:
        raise OptionError("pipeline", " auto: dwc compile and dwc build only; give dwc import a number of stages or max")
    t0 = time.perf_counter()
    if env is not None:
        from dwc.train.envs import check_env_id
        e = check_env_id(env)
        dims = (e.observation_space.shape[0], e.action_space.shape[0])
        e.close()
    onnx_model = load_model(Path(model))
    graph, info = import_onnx(onnx_model, Path(model), obs_width, act_width, env)
    if env is not None and dims != (graph.obs_dim, graph.action_dim):
        raise OptionError("env", f" {env}: observations/actions are {dims[0]}/{dims[1]} wide, the model takes "
                        f"{graph.obs_dim} and gives {graph.action_dim}")
    check = check_against_onnxruntime(onnx_model, graph, check_vectors)
    if check["code_mismatches"] or not check["actions_within_half_lsb"]:
        raise UserError(f"the lowered graph disagrees with onnxruntime on {check['code_mismatches']} of "
                        f"{check['vectors']} observations (max action error {check['max_action_error']:.3g}); "
                        f"nothing written")
    optimized, passes = optimize(graph)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    optimized.save(out / "graph.json")
    hdl = emit_verilog(optimized, out, pipeline, table_bits=table_bits)
    _warn_arithmetic(hdl, log)
    report = {"model": str(model), "graph": str(out / "graph.json"), "env": env, "read": info,
              "check_against_onnxruntime": check, "counts": optimized.counts(), "passes": passes, "hdl": hdl,
              "seconds": round(time.perf_counter() - t0, 3)}
    write_json(out / "import_report.json", report)
    return report


def placed_target(target: str | None, run: Path) -> str | None:
    """The device --pipeline auto measures on: ``target`` (a device, or a family's smallest device),
    else the smallest device of the family the run was trained for."""
    from dwc.core.rundir import load_config
    from dwc.core.targets import FAMILIES, smallest_device
    if target is None:  # --pipeline auto places and routes, so it needs a device: a family's smallest
        family = FAMILIES.get(load_config(run).target)
        return family.devices[0] if family and family.placed else None
    return smallest_device(target)


def _lowering_lines(hdl: dict) -> list[str]:
    lines = [f"  linear layer {l['layer']}: {l['neurons']} neurons: {l['table']} lookup tables, {l['arithmetic']} "
             f"arithmetic, {l['constant']} constant (reading no input); input bits per neuron "
             f"{l['input_bits_per_neuron']}" for l in hdl.get("linear_lowering") or []]
    if hdl.get("arithmetic"):
        a = hdl["arithmetic"]
        lines.append(f"  arithmetic: {a['multipliers']:,} constant multipliers, {a['adders']:,} adders")
    return lines


def compile_text(r: dict) -> str:
    """The report of :func:`compile_run` for people: the passes' effect, inputs, budget, Verilog."""
    lines = [f"{'pass':<28}{'comparators':>12}{'LUTs':>8}  per layer        per arity"]
    rows = [p for p in r["passes"] if p["round"] <= 1]  # the frozen graph, then the first round
    rows.append(dict(r["passes"][-1], **{"pass": f"final (after {r['passes'][-1]['round']} rounds)"}))
    for p in rows:
        arity = " ".join(f"{k}:{v}" for k, v in p["luts_per_arity"].items())
        lines.append(f"{p['pass']:<28}{p['comparators']:>12}{p['luts']:>8}  {str(p['luts_per_layer']):<16} {arity}")
    c, i, b = r["counts"], r["inputs"], r["budget"]
    lines += [f"wrote {r['graph']}: popcounts {c['popcount_sizes']} ({r['seconds']:.2f} s)",
              f"inputs: {i['comparators_used']} comparators read, unused dims {i['dims_unused'] or 'none'}; "
              f"heat map {i['heatmap']}"]
    if b["max_luts"] or b["max_comparators"]:
        verdict = "met" if b["met"] else "EXCEEDED (a run stopped before its budget schedule ended?)"
        lines.append(f"budget: {b['luts']} LUTs (max {b['max_luts'] or '-'}), {b['comparators']} comparators (max "
                     f"{b['max_comparators'] or '-'}): {verdict}")
    if r["onnx"]:
        lines.append(f"ONNX model: {r['onnx']}")
    h, ps = r["hdl"], r["pipeline_search"]
    if ps:
        lines.append(f"pipeline auto for {ps['target']} at {ps['requested_mhz']:g} MHz: " + ", ".join(
            f"{t['pipeline']} stages {t['fmax_mhz']} MHz" for t in ps["tried"]) + f" -> {ps['chosen']} stages"
            + ("" if ps["met"] else " (the deepest; the clock is NOT met)"))
    k = h["popcount_compressor"]
    lines.append(f"Verilog: {h['verilog']} (latency {h['latency_cycles']} cycles, {h.get('comparators', 'full')} "
                 f"comparators, popcounts from {k}:{k.bit_length()} counters, ports in {h['ports']}, "
                 f"{h['seconds']:.1f} s)")
    return "\n".join(lines + _lowering_lines(h))


def import_text(r: dict) -> str:
    """The report of :func:`import_model` for people: what was read, the check, the Verilog."""
    info, c, h = r["read"], r["check_against_onnxruntime"], r["hdl"]
    lines = [f"read {r['model']}: {' '.join(info['operators'])}"]
    lines += [f"  layer {k}: {l['inputs']} -> {l['outputs']}, shift {l['shift']}, codes {l['lo']}..{l['hi']}"
              for k, l in enumerate(info["layers"])]
    lines += [f"  observation codes {info['observation_codes'][0]}..{info['observation_codes'][1]} "
              f"(fixed point {info['obs_format']['width']}.{info['obs_format']['frac']}), tail "
              f"{' '.join(info['tail']) or 'none'} folded into the action tables",
              f"checked against onnxruntime: {c['vectors']} observations, {c['code_mismatches']} code mismatches, "
              f"max action difference {c['max_action_error']:.3g} (LSB {c['action_lsb']:.3g})",
              f"wrote {r['graph']}; Verilog {h['verilog']} (latency {h['latency_cycles']} cycles); "
              f"report {Path(r['graph']).parent / 'import_report.json'}"]
    return "\n".join(lines + _lowering_lines(h))
