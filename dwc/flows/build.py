"""``dwc build``: one command from a task to a verified bitstream, stage by stage.

    train    OUT/run                    dwc train (or --from RUN); a killed run resumes
    compile  OUT/circuit                freeze, passes, Verilog; the frozen circuit's episodes
    verify   OUT/circuit                the Verilog in Verilator, closed loop on the same seeds
    synth    OUT/circuit/synth/TARGET   yosys, nextpnr, bitstream, resources, energy estimate

``OUT/build.json`` records, per stage, a digest of what it read (its options and the files it
consumes) and what it found; a re-run skips every stage whose digest is unchanged and whose outputs
exist, so an interrupted build continues where it stopped. ``OUT/summary.json`` holds the table.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from statistics import fmean

from dwc.core.defaults import DEFAULT_FREQ_MHZ, PIPELINE, SYNTH_TARGET, VERIFY_EPISODES
from dwc.core.errors import NotAsAsked, OptionError, UserError
from dwc.core.rundir import LOCK, hold_lock, load_config, write_json

def digest(options: dict, files: list[Path] = ()) -> str:
    """What a stage read: its options and the bytes of its input files."""
    h = hashlib.sha256(json.dumps(options, sort_keys=True, default=str).encode())
    for f in files:
        h.update(Path(f).read_bytes())
    return h.hexdigest()[:16]


class Manifest:
    """OUT/build.json: per stage, the digest it ran with and its results."""

    def __init__(self, out: Path):
        self.path = out / "build.json"
        try:
            self.stages = json.loads(self.path.read_text())["stages"] if self.path.exists() else {}
            if not isinstance(self.stages, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise UserError(f"{self.path} is not a build record (corrupt or cut short): delete it and run the same "
                            f"command again: every stage runs again, training from its checkpoint") from None

    def fresh(self, stage: str, key: str, outputs: list[Path], still=None) -> dict | None:
        """The recorded result if ``stage`` already ran with ``key`` and its outputs are still there (and,
        with ``still``, still say what was recorded: ``still(result)``)."""
        rec = self.stages.get(stage)
        if rec and rec["digest"] == key and all(Path(p).exists() for p in outputs) and (
                still is None or still(rec["result"])):
            return rec["result"]
        return None

    def record(self, stage: str, key: str, result: dict, seconds: float) -> dict:
        # later stages need no invalidation here: their digests cover the files this stage writes
        self.stages[stage] = {"digest": key, "result": result, "seconds": round(seconds, 1)}
        write_json(self.path, {"stages": self.stages})
        return result


def distilled_from(source: Path) -> str | None:
    """What ``--from SOURCE`` is where it holds no circuit but a policy to distil one from (the build's
    teacher, --algo distill): "an ONNX model" or "a float MLP"; None for a circuit, built as it is."""
    source = Path(source)
    if source.suffix == ".onnx":
        return "an ONNX model"
    if (source / "config.json").exists() and load_config(source).actor.policy == "mlp":
        return "a float MLP"
    return None


def build(out: Path, *args, **kwargs) -> dict:
    """Run the stages that are not up to date; returns the summary (also OUT/summary.json). A build
    that fails before writing anything leaves no empty OUT folder behind."""
    out = Path(out)
    new = not out.exists()
    lock = hold_lock(out, "dwc build")  # two builds in one folder would write each other's stages
    try:
        return _build(out, *args, **kwargs)
    except BaseException:
        if new and out.is_dir() and all(p.name == LOCK for p in out.iterdir()):
            shutil.rmtree(out)
        raise
    finally:
        if lock:
            lock.close()


def _build(out: Path, env: str | None = None, from_run: Path | None = None, train_cfg=None, target: str = SYNTH_TARGET,
           pipeline: int | str = PIPELINE, episodes: int = VERIFY_EPISODES, freq: float | None = None,
           progress: bool = True, log=print, input_register: bool = True) -> dict:
    """``freq``: the clock the circuit must reach (a miss is a failure, :func:`timing_failure`); None: placed
    for the default clock (DEFAULT_FREQ_MHZ), and a slower Fmax is reported, as dwc synth does."""
    from dwc.core.config import EVAL_SEED_OFFSET
    from dwc.flows.build_checks import check_build

    env = check_build(env, from_run, train_cfg, target, pipeline, episodes, freq)  # before any stage
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stages = _Stages(Manifest(out), log)
    run = _train(stages, out, from_run, train_cfg, progress, log)
    cfg = load_config(run)
    seed = cfg.seed + EVAL_SEED_OFFSET  # the evaluation seeds: frozen and RTL episodes are the same episodes
    circuit = out / "circuit"
    comp = _compile(stages, run, circuit, pipeline, target, freq or DEFAULT_FREQ_MHZ, episodes, seed, progress, log,
                    input_register)
    ver = _verify(stages, circuit, env, episodes, seed, progress, log)
    syn = _synth(stages, circuit, target, freq, log) if target != "none" else None

    summary = {"env": env, "run": str(run), "policy": comp["policy"], "train_steps": comp.get("train_steps"),
               "episodes": episodes, "seed": seed, "run_eval": _run_eval(run),
               "float_return": fmean(comp["float_returns"]), "frozen_return": fmean(comp["frozen_returns"]),
               "rtl_return": fmean(ver["rtl_returns"]),
               "rtl_equals_frozen": [round(r, 6) for r in ver["rtl_returns"]] == [round(r, 6) for r in comp["frozen_returns"]],
               "latency_cycles": comp["latency_cycles"], "ir_luts": comp["ir_luts"],
               "comparators": comp["comparators"], "synth": syn,
               "stages_run": stages.ran, "stages_skipped": stages.skipped, "circuit": str(circuit)}
    write_json(out / "summary.json", summary)
    return summary


def _run_eval(run: Path) -> dict | None:
    """The run's own evaluation (RUN/eval.json, --episodes of dwc train): the return a build quotes for the
    trained policy, beside the float return on the build's (fewer) RTL episodes."""
    try:
        ev = json.loads((run / "eval.json").read_text())
        return {k: ev[k] for k in ("episodes", "seed", "mean_return", "min_return", "max_return")}
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a run without one (or an unreadable one): the summary says so


def timing_failure(s: dict) -> str | None:
    """Why a build did not give the clock it was asked for (an explicit --freq), or None."""
    syn = s.get("synth") or {}
    if syn.get("clock_required") and syn.get("timing_met") is False:
        return (f"timing not met on {syn['target']}: Fmax {syn['fmax_mhz']} MHz < {syn['requested_mhz']:g} MHz "
                f"requested (--freq)")
    return None


class _Stages:
    """Runs each stage of a build unless OUT/build.json has it up to date, and keeps which ran and which
    were skipped."""

    def __init__(self, man: Manifest, log):
        self.man, self.log, self.ran, self.skipped = man, log, [], []

    def __call__(self, name: str, key: str, outputs: list[Path], work, still=None) -> dict:
        found = self.man.fresh(name, key, outputs, still)
        if found is not None:
            self.skipped.append(name)
            self.log(f"[{name}] up to date (inputs unchanged), skipped")
            return found
        self.log(f"[{name}] running ...")
        t0 = time.perf_counter()
        result = work()
        self.ran.append(name)
        return self.man.record(name, key, result, time.perf_counter() - t0)


def _train(stage: _Stages, out: Path, from_run: Path | None, train_cfg, progress: bool, log) -> Path:
    """The run the circuit comes from: ``from_run``, or OUT/run trained (on from its checkpoint if it has one)."""
    from dwc.core.config import OPTIONS, option_value, resume_config, train_command
    from dwc.flows.evaluate import train_and_evaluate
    if from_run is not None:
        run = Path(from_run)
        if not (run / "config.json").exists():
            raise OptionError("from_run", f" {run}: not a run or policy folder (no config.json)")
        log(f"[train] from {run}, skipped")
        return run
    run = out / "run"
    cfg_dict = train_cfg.to_dict()

    def do_train():
        cfg, resume = train_cfg, (run / "checkpoint.pt").exists()
        if resume:  # an interrupted or shorter run of this build: trained on, if it trains the same thing
            cfg = resume_config(load_config(run), {k: option_value(train_cfg, k) for k in OPTIONS},
                                flags={"target": "--lut-family"})
        r = train_and_evaluate(cfg, run, resume=resume, progress=progress, log=log,
                               command=train_command(cfg, run, resume=resume))
        return {"train_steps": r["train_steps"], "mean_return": r["mean_return"]}
    stage("train", digest(cfg_dict), [run / "checkpoint.pt", run / "eval.json"], do_train)
    return run


def _compile(stage: _Stages, run: Path, circuit: Path, pipeline: int | str, target: str, freq: float, episodes: int,
             seed: int, progress: bool, log, input_register: bool) -> dict:
    """The circuit compiled, and the float and frozen policies on the evaluation episodes."""
    from dwc.flows.compile import compile_run
    from dwc.flows.evaluate import evaluate_run

    def do_compile():
        c = compile_run(run, circuit, pipeline=pipeline, target=None if target == "none" else target, freq=freq,
                        log=log, input_register=input_register)
        ev = evaluate_run(run, episodes, seed=seed, progress=progress, frozen=True, write=False)
        return {"float_returns": ev["returns"], "frozen_returns": ev["frozen"]["returns"],
                "ir_luts": c["counts"]["luts"], "comparators": c["counts"]["comparators"],
                "latency_cycles": c["hdl"]["latency_cycles"], "policy": ev["policy"], "train_steps": ev["train_steps"]}
    # what else shapes the circuit: with auto, the clock (it picks the stages); the input register only
    # when dropped, so earlier builds' keys stay valid
    shape = ({"freq": freq} if pipeline == "auto" else {}) | ({} if input_register else {"input_register": False})
    # the target picks the popcount structure (and, with auto, the stages)
    return stage("compile", digest({"pipeline": pipeline, "target": target, "episodes": episodes, "seed": seed, **shape},
                                   [run / "checkpoint.pt", run / "config.json"]),
                 [circuit / "graph.json", circuit / "dwc_core.v"], do_compile)


def _verify(stage: _Stages, circuit: Path, env: str, episodes: int, seed: int, progress: bool, log) -> dict:
    """The same episodes with every action from the Verilog."""
    from dwc.sim.verify import verify

    def do_verify():
        r = verify(circuit, env, episodes, seed=seed, progress=progress, log=log)
        if not r["passed"]:
            raise NotAsAsked(f"verification failed: {r['mismatches']} mismatches; see {circuit / 'verify_report.json'}")
        return {"rtl_returns": r["return_rtl"], "mismatches": r["mismatches"], "steps": r["steps"]}
    def still(rec: dict) -> bool:
        """verify_report.json is still this stage's: a dwc verify since (other episodes, --max-steps, a
        failure) replaced it, so the stage runs again rather than quote what the file no longer says."""
        try:
            r = json.loads((circuit / "verify_report.json").read_text())
            return (r["passed"] and r["episodes"] == episodes and r["seeds"][:1] == [seed] and not r.get("max_steps")
                    and r["return_rtl"] == rec["rtl_returns"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
    return stage("verify", digest({"episodes": episodes, "seed": seed}, [circuit / "graph.json", circuit / "dwc_core.v"]),
                 [circuit / "verify_report.json"], do_verify, still)


def _synth(stage: _Stages, circuit: Path, target: str, freq: float | None, log) -> dict:
    """The circuit synthesised for ``target`` (a family: the smallest of its devices that it fits)."""
    from dwc.fpga.devices import FAMILY_DEVICES
    from dwc.fpga.synth import DoesNotFit, synth_smallest

    def do_synth():
        try:
            r = synth_smallest(circuit, target, freq, log=log)  # its tools' progress, with seconds
        except DoesNotFit as e:  # one line, exit 1: the build ran, the design is too big for the target
            raise NotAsAsked(f"{e}; the circuit and its verification are kept in {circuit}") from None
        # ECP5: LUT4 sites counts the carry cells' LUTs too (the comparators' and adders' CCU2C)
        return {"target": r["target"], "luts": r["luts"], "lut4_sites": r["core"].get("lut4_sites"), "ffs": r["ffs"],
                "fmax_mhz": r["fmax_mhz"], "requested_mhz": r.get("requested_mhz"), "timing_met": r.get("timing_met"),
                "clock_required": r.get("clock_required"),
                "cells": r.get("cells"), "utilisation": r.get("utilisation"),
                "utilisation_of": r.get("utilisation_of"), "constraints": r.get("constraints"),
                "bitstream": r.get("bitstream"), "no_bitstream": r.get("no_bitstream"),
                "nj_per_action": r["energy"]["per_action_nj"],
                "too_small": r.get("smallest_fit", {}).get("too_small")}
    # no --freq: placed for the default clock, not required (a key of its own, so an explicit one re-runs)
    key = digest({"target": target, "freq": freq or DEFAULT_FREQ_MHZ} | ({} if freq else {"required": False}),
                 [circuit / "dwc_core.v", circuit / "dwc_core.json"])
    # a family's device is known once synthesised: its report is checked through the recorded target
    done = stage.man.fresh("synth", key, []) if target in FAMILY_DEVICES else None
    return stage("synth", key, [circuit / "synth" / (done["target"] if done else target) / "report.json"], do_synth)


def summary_table(s: dict) -> str:
    syn = s["synth"] or {}
    rows = [("env / policy", f"{s['env']} / {s['policy']} ({s['run']})")]
    if ev := s.get("run_eval"):  # the trained policy's return: the run's own evaluation, as dwc train printed it
        rows.append(("trained return", f"{ev['mean_return']:.1f}  (the run's evaluation: mean of {ev['episodes']} "
                                       f"episodes, min {ev['min_return']:.1f}, max {ev['max_return']:.1f}; eval.json)"))
    rows += [("float return", f"{s['float_return']:.1f}  (float policy, mean of the {s['episodes']} episodes frozen and RTL run)"),
            ("frozen return", f"{s['frozen_return']:.1f}  (integer circuit, reference executor)"),
            ("RTL return", f"{s['rtl_return']:.1f}  (Verilog in Verilator; "
                           f"{'equal to frozen, episode by episode' if s['rtl_equals_frozen'] else 'DIFFERS from frozen'})"),
            ("latency", f"{s['latency_cycles']} cycles"),
            ("IR LUTs", str(s["ir_luts"]))]
    if syn:
        from dwc.fpga.synth_summary import timing_text
        rows += [(f"{syn['target']} LUTs / FFs", f"{syn['luts']} / {syn['ffs']}  (the core alone)")]
        if syn.get("too_small"):
            rows.append(("too small", f"{', '.join(syn['too_small'])} (the smallest device of the family it fits: "
                                      f"{syn['target']})"))
        if syn.get("cells"):
            c = syn["cells"]
            rows.append(("placed cells", f"{c['used']} {c['kind']} of {c['available']}; {syn['utilisation']:.0%} of the "
                                         f"device's {syn['utilisation_of']} (core + shell)"))
        rows += [("timing", timing_text(syn["fmax_mhz"], syn.get("requested_mhz"), syn.get("clock_required", True))
                  if "requested_mhz" in syn
                  else f"Fmax {syn['fmax_mhz']} MHz"),
                 ("energy / action", f"{syn['nj_per_action']} nJ (estimate)"),
                 ("bitstream", str(syn["bitstream"] or syn.get("no_bitstream")))]  # a MachXO3 has none
        if syn.get("constraints"):
            rows.append(("pins", syn["constraints"]))
    rows.append(("stages", f"ran {', '.join(s['stages_run']) or 'none'}; up to date: {', '.join(s['stages_skipped']) or 'none'}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
