"""The codesign frontier: return vs LUTs vs Fmax on one FPGA for several circuit sizes, LUT arities
and comparator budgets, from real training, real synthesis and real place and route.

Every point is a `dwc sweep` run (so the benchmark is resumable and runs on a Ray cluster with
--address): train with SAC, freeze, verify the Verilog in Verilator on closed-loop episodes, then
yosys + nextpnr for --target with the deepest pipeline. Configs are named lutN[-lL]-wW[-cK]: N-input
LUTs (4 = native on ECP5/iCE40, trained with --target), L layers where not 2 (reference runs), W LUTs
per layer, at most K comparators.
--reference runs trained elsewhere (a long training, a shipped policy, a circuit distilled from one
with `dwc train --algo distill`) go through the same compile/verify/synth and join the frontier
(--no-sweep: only them). A distilled circuit counts its teacher's training budget, with its own env
steps shown apart (steps A+B), and is compared with its teacher when the teacher is a row too.

Printed: one row per config with the median frozen return, LUTs (and on ECP5 LUT4 sites: LUT4s plus
the two per carry cell), Fmax, latency; for LUT4 rows, the comparison with a LUT6 circuit chosen by
REFERENCE_RULE (same task, training budget and precision, paired by seed): the ratio of frozen-return
IQMs with a 95% paired-bootstrap CI, P(LUT4 > LUT6) with its CI (dwc.flows.stats; no CI below 5 paired
seeds), the LUT and LUT4-site ratios; and whether it is on the Pareto frontier of (return up, LUTs
down) among runs of its budget; the issue's target (ECP5: >= 0.95x the LUT6 return with <= 1/3 of its
LUTs at >= 150 MHz) is checked on every LUT4 row (on the IQM ratio). JSON and PNG next to the sweep.

  .venv/bin/python scripts/bench_codesign.py --tasks InvertedPendulum-v5 --steps 10000 --widths 64 256
  .venv/bin/python scripts/bench_codesign.py --tasks Hopper-v5 InvertedPendulum-v5 --steps 300000 \\
      --widths 128 256 512 --comparators 0 96 --reference policies/hopper-v5-dwc --address auto
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_RETURN, TARGET_LUTS, TARGET_MHZ = 0.95, 1 / 3, 150.0
REFERENCE_RULE = ("each LUT4 row is compared with one LUT6 row of the same task whose runs pair with its own by seed, "
                  "training budget and precision: its LUT6 twin (lut6 + the same width and comparator budget) or, "
                  "for a distilled circuit, its teacher; else the one with the most paired seeds, ties broken by "
                  "config name. return x = IQM(LUT4) / IQM(LUT6) of the frozen returns over the paired seeds with a "
                  "95% paired-bootstrap CI; P(>LUT6) = the probability of improvement with its 95% bootstrap CI "
                  "(rliable); no CI below 5 paired seeds.")


def spec_text(args) -> str:
    configs = {}
    for n in args.arities:
        for w in args.widths:
            for k in args.comparators:
                opts = {"policy": "dwc", "lut_inputs": n, "width": w, "wiring": args.wiring}
                if n == 4:  # native on the LUT4 fabrics: trained for the target
                    from dwc.core.targets import family_of  # machxo3-6900 is a MachXO2-family device
                    opts = {**opts, "target": family_of(args.target) or args.target}
                    del opts["lut_inputs"]
                if k:
                    opts["max_comparators"] = k
                configs[config_name(n, w, k)] = opts
    spec = {"tasks": args.tasks, "seeds": args.seeds, "steps": args.steps,
            "options": {"thermo_bits": args.thermo_bits, "learning_starts": args.learning_starts,
                        "eval_episodes": args.episodes},
            "configs": configs,
            "hardware": {"target": args.target, "episodes": args.hw_episodes, "pipeline": "max", "freq": args.freq}}
    return json.dumps(spec, indent=1)  # JSON is YAML


def config_name(lut_inputs: int, width: int, max_comparators: int, layers: int = 2, last_width: int = 0) -> str:
    """lutN[-lL]-wW[-lastV][-cK]; the layer count only where it is not the default 2, the last layer's
    width only where it is not W."""
    return (f"lut{lut_inputs}" + (f"-l{layers}" if layers != 2 else "") + f"-w{width}"
            + (f"-last{last_width}" if last_width and last_width != width else "")
            + (f"-c{max_comparators}" if max_comparators else ""))


def reference_point(run: Path, out: Path, args) -> dict:
    """A run trained outside the sweep (e.g. a long training, or a shipped policy) through dwc build
    (compile, Verilator closed loop, synthesis for --target), named by its circuit and its folder."""
    from dwc.flows.build import build
    from dwc.train.distill import teacher_summary
    from dwc.core.rundir import load_config
    cfg = load_config(run)
    a = cfg.actor
    # a sweep's run folder (.../CONFIG/seedN/run) is named by its config; the build folder by its path
    label = run.parent.parent.name if run.name == "run" and run.parent.name.startswith("seed") else run.name
    where = hashlib.sha256(str(run.resolve()).encode()).hexdigest()[:8]
    s = build(out / "reference" / f"{label}-{where}", from_run=run, target=args.target, pipeline="max",
              episodes=args.episodes, freq=args.freq, progress=False, log=lambda *a: None)
    row = {"task": s["env"], "config": f"{config_name(a.lut_inputs, a.width, a.max_comparators, a.layers, a.last_width)} ({label})",
           "arity": a.lut_inputs, "frozen": s["frozen_return"], "luts": s["synth"]["luts"],
           "lut4_sites": s["synth"].get("lut4_sites"), "fmax_mhz": s["synth"]["fmax_mhz"],
           "latency_cycles": s["latency_cycles"], "comparators": s["comparators"], "ir_luts": s["ir_luts"],
           "train_steps": s["train_steps"], "seeds": 1, "reference": True,
           "rtl_equals_frozen": s["rtl_equals_frozen"]}
    if cfg.algo == "distill":  # its RL budget is its teacher's; its own env steps are counted apart
        teacher = teacher_summary(cfg.distill.teacher)
        row.update(train_steps=teacher["train_steps"], distill_steps=s["train_steps"],
                   distilled_from=Path(teacher["path"]).name)
    row["runs"] = [{"seed": cfg.seed, "train_steps": row["train_steps"], "precision": cfg.precision,
                    "frozen_return": row["frozen"]}]
    return row


def merge_seeds(rows: list[dict]) -> list[dict]:
    """Reference rows of one circuit, budget and precision (the seeds of one config) as one row with
    all their runs, for the paired comparison; its figures are the medians over the seeds."""
    from statistics import median
    merged: dict[tuple, dict] = {}
    for r in rows:
        precisions = tuple(sorted({str(x["precision"]) for x in r["runs"]}))
        key = (r["task"], r["config"], r["train_steps"], r.get("distill_steps"), precisions)
        if key not in merged:
            merged[key] = dict(r, members=[r])
        else:
            merged[key]["members"].append(r)
    out = []
    for m in merged.values():
        members = m.pop("members")
        m["runs"] = sorted((x for r in members for x in r["runs"]), key=lambda x: (x["seed"] is None, x["seed"]))
        m["seeds"] = len(m["runs"])
        for k in ("frozen", "luts", "lut4_sites", "fmax_mhz", "latency_cycles", "comparators", "ir_luts"):
            vals = [r[k] for r in members if r.get(k) is not None]
            m[k] = median(vals) if vals else None
        if "rtl_equals_frozen" in m:
            m["rtl_equals_frozen"] = all(r["rtl_equals_frozen"] for r in members)
        out.append(m)
    return out


def points(sweep_dir: Path) -> list[dict]:
    """One point per (task, config) that has synthesised runs: medians over its seeds, and its runs'
    seed, budget, precision and frozen return for the paired comparisons."""
    from dwc.flows.report import aggregate
    from dwc.flows.report_runs import load_runs
    state, results = load_runs(sweep_dir)
    med = lambda q: None if q is None else q["median"]
    runs = lambda r: [{k: x.get(k) for k in ("seed", "train_steps", "precision", "frozen_return")}
                      for x in sorted(results, key=lambda x: x["seed"]) if (x["task"], x["config"]) == (r["task"], r["config"])]
    return [{"task": r["task"], "config": r["config"], "arity": int(r["config"][3]), "frozen": med(r["frozen_return"]),
             "luts": med(r["luts"]), "lut4_sites": med(r["lut4_sites"]), "fmax_mhz": med(r["fmax_mhz"]), "latency_cycles": med(r["latency_cycles"]),
             "comparators": med(r["comparators"]), "ir_luts": med(r["ir_luts"]), "train_steps": r["train_steps"],
             "seeds": len(r["seeds"]), "runs": runs(r)}
            for r in aggregate(state, results) if r["seeds"] and r["luts"] is not None]


def _runs(row: dict) -> list[dict]:
    """A row's runs; a row without them (made by hand) is one run of unknown seed and precision."""
    return row.get("runs") or [{"seed": None, "train_steps": row["train_steps"], "precision": row.get("precision"),
                                "frozen_return": row["frozen"]}]


def compare(rows: list[dict]) -> None:
    """Each LUT4 row against the LUT6 row REFERENCE_RULE picks: the paired comparison of frozen
    returns (dwc.flows.stats.compare_paired), ratios of LUTs and LUT4 sites, and the issue's target (on
    the IQM ratio); ``reference_note`` where no LUT6 row pairs. Pareto flags."""
    from dwc.flows.report_compare import pair_runs
    from dwc.flows.stats import compare_paired
    for r in rows:
        if r["arity"] != 4:
            continue
        paired = []  # (LUT6 row, seed -> LUT4 return, seed -> LUT6 return) of each LUT6 row with a paired seed
        for x in rows:
            if x["task"] == r["task"] and x["arity"] == 6:
                # the architecture is the treatment: a LUT6 run pairs only at the LUT4 run's precision
                same = {(a["seed"], a["precision"]) for a in _runs(r)}
                mine, theirs, _ = pair_runs(_runs(r), [b for b in _runs(x) if (b["seed"], b["precision"]) in same],
                                            "frozen_return")
                if mine:
                    paired.append((x, mine, theirs))
        if not paired:
            r["reference_note"] = "no LUT6 row of this task with runs of the same seed, budget and precision"
            continue
        twin = lambda x: (x["config"] == "lut6" + r["config"][len("lut4"):]
                          or bool(r.get("distilled_from") and x["config"].endswith(f"({r['distilled_from']})")))
        ref, mine, theirs = min(paired, key=lambda p: (not twin(p[0]), -len(p[1]), p[0]["config"]))
        c = compare_paired(mine, theirs)
        r["vs"] = ref["config"]
        r.update(return_ratio=c["ratio"], return_ratio_ci_low=c["ratio_ci_low"], return_ratio_ci_high=c["ratio_ci_high"],
                 p_improvement=c["p_improvement"], p_improvement_ci_low=c["p_improvement_ci_low"],
                 p_improvement_ci_high=c["p_improvement_ci_high"], paired_seeds=c["seeds"], n=c["n"], note=c["note"])
        r["lut_ratio"] = r["luts"] / ref["luts"]
        if r.get("lut4_sites") and ref.get("lut4_sites"):
            r["site_ratio"] = r["lut4_sites"] / ref["lut4_sites"]
        # met only when the ratio's whole CI clears the target; without a CI (n < 5) unproven (None)
        hw_ok = r["lut_ratio"] <= TARGET_LUTS and (r["fmax_mhz"] or 0) >= TARGET_MHZ
        low = r["return_ratio_ci_low"]
        r["meets_target"] = (False if not hw_ok or r["return_ratio"] is None or r["return_ratio"] < TARGET_RETURN
                             else None if low is None else low >= TARGET_RETURN)
    for r in rows:
        r["pareto"] = not any(x is not r and x["task"] == r["task"] and x["train_steps"] == r["train_steps"]
                              and x["frozen"] >= r["frozen"]
                              and x["luts"] <= r["luts"] and (x["frozen"] > r["frozen"] or x["luts"] < r["luts"])
                              for x in rows)


def table(rows: list[dict]) -> str:
    from dwc.flows.stats import fmt
    num = lambda v, f="{:.0f}": "-" if v is None else f.format(v)
    steps = lambda r: f"{r['train_steps']}" + (f"+{r['distill_steps']}" if r.get("distill_steps") else "")
    vs = lambda r, key: fmt(r, key, "{:.2f}") if "vs" in r else "-"  # with its CI, or "(n = k, no CI)"
    head = ["task", "config", "seeds", "steps", "frozen return", "LUTs", "LUT4 sites", "comparators", "Fmax MHz",
            "latency", "vs", "paired", "return x [95% CI]", "P(>LUT6) [95% CI]", "LUTs x", "sites x", "Pareto", "target"]
    body = [[r["task"], r["config"], str(r["seeds"]), steps(r), f"{r['frozen']:.1f}", f"{r['luts']:.0f}",
             num(r.get("lut4_sites")), "-" if r["comparators"] is None else f"{r['comparators']:.0f}",
             "-" if r["fmax_mhz"] is None else f"{r['fmax_mhz']:.1f}",
             "-" if r["latency_cycles"] is None else f"{r['latency_cycles']:.0f}",
             r.get("vs", "-"), str(r.get("n", "-")), vs(r, "return_ratio"), vs(r, "p_improvement"),
             f"{r['lut_ratio']:.2f}" if r.get("lut_ratio") is not None else "-", num(r.get("site_ratio"), "{:.2f}"),
             "*" if r["pareto"] else "",
             {True: "MET", False: "no"}.get(r.get("meets_target"), "unproven (no CI)" if "vs" in r else "-")]
            for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    notes = ["steps A+B: a distilled circuit (dwc train --algo distill): its teacher's A SAC steps, then B env "
             "steps of its own (DAgger, no reward)"] if any(r.get("distill_steps") for r in rows) else []
    notes += [f"{r['config']}: {r['reference_note']}" for r in rows if r.get("reference_note")]
    notes += [f"vs: {REFERENCE_RULE}"] if any(r["arity"] == 4 for r in rows) else []
    notes += [f"target: return ratio >= {TARGET_RETURN} over the whole 95% CI (so >= 5 paired seeds), LUTs <= "
              f"{TARGET_LUTS:.2f}x, Fmax >= {TARGET_MHZ:.0f} MHz"] if any("vs" in r for r in rows) else []
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body] + notes)


def plot(rows: list[dict], path: Path, target: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from dwc.flows.stats import quartiles
    panels = list(dict.fromkeys((r["task"], r["train_steps"]) for r in rows))  # one training budget a panel
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4), dpi=110, squeeze=False)
    fmax = [r["fmax_mhz"] or 0 for r in rows]
    for ax, (task, steps) in zip(axes[0], panels):
        rs = [r for r in rows if r["task"] == task and r["train_steps"] == steps]
        widest = max(r["luts"] for r in rs)
        for r in rs:
            seeds = [x["frozen_return"] for x in r.get("runs", []) if x.get("frozen_return") is not None]
            if len(seeds) >= 2:  # the spread over seeds: 25th to 75th percentile
                q = quartiles(seeds)
                ax.errorbar(r["luts"], r["frozen"], yerr=[[r["frozen"] - q["q1"]], [q["q3"] - r["frozen"]]], fmt="none",
                            ecolor="0.5", elinewidth=0.8, capsize=3, zorder=1)
            sc = ax.scatter(r["luts"], r["frozen"], c=[r["fmax_mhz"] or 0], cmap="viridis", vmin=min(fmax),
                            vmax=max(fmax) + 1e-9, marker="s" if r["arity"] == 6 else "o", s=70, edgecolors="k",
                            linewidths=1.5 if r.get("reference") else 0.5)
            right = r["luts"] == widest and len(rs) > 1  # the rightmost label goes left, off the colour bar
            ax.annotate(r["config"], (r["luts"], r["frozen"]), fontsize=6, xytext=(-4 if right else 4, 3),
                        textcoords="offset points", ha="right" if right else "left")
        front = sorted((r for r in rs if r["pareto"]), key=lambda r: r["luts"])
        ax.plot([r["luts"] for r in front], [r["frozen"] for r in front], "k--", lw=0.8, label="Pareto frontier")
        ax.set_xscale("log")
        ax.set_xlabel(f"LUTs on {target} (synthesised core)")
        ax.set_ylabel("frozen circuit return (median over seeds)")
        ax.set_title(f"{task}, {steps:,} steps\n(o LUT4 codesigned, s LUT6; bold edge: trained outside the sweep;\n"
                     "bars: 25th-75th percentile over seeds)",
                     fontsize=7)
        ax.margins(x=0.25, y=0.1)  # room for the labels of the outermost points
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.colorbar(sc, ax=ax, label="Fmax (MHz)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["Hopper-v5", "InvertedPendulum-v5"])
    ap.add_argument("--steps", type=int, default=300_000, help="SAC env steps per run (the same for every config)")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--widths", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--arities", type=int, nargs="+", default=[4, 6], help="LUT inputs (4: native on --target)")
    ap.add_argument("--comparators", type=int, nargs="+", default=[0], help="comparator budgets (0: none)")
    ap.add_argument("--wiring", choices=["learnable", "random"], default="learnable")
    ap.add_argument("--thermo-bits", type=int, default=63)
    ap.add_argument("--learning-starts", type=int, default=5000)
    ap.add_argument("--episodes", type=int, default=10, help="evaluation episodes (float and frozen)")
    ap.add_argument("--hw-episodes", type=int, help="closed-loop Verilator episodes per run (default: --episodes)")
    ap.add_argument("--target", default="ecp5-25k")
    ap.add_argument("--freq", type=float, default=200.0, help="clock requested from nextpnr (MHz)")
    ap.add_argument("--reference", type=Path, nargs="*", default=[],
                    help="runs trained outside the sweep to place on the frontier too (built like the sweep's runs)")
    ap.add_argument("--no-sweep", action="store_true", help="only the --reference runs (no training here)")
    ap.add_argument("--out", type=Path, default=ROOT / "sweeps" / "codesign")
    ap.add_argument("--address", help="a running Ray cluster (default: a local engine)")
    args = ap.parse_args()

    from dwc.core.errors import UserError
    from dwc.flows.sweep import sweep
    args.out.mkdir(parents=True, exist_ok=True)
    spec = args.out / "codesign.yaml"
    spec.write_text(spec_text(args))
    try:
        state = {"runs": {}} if args.no_sweep else sweep(spec, args.out, args.address, progress=True)
        rows = ([] if args.no_sweep else points(args.out)) + merge_seeds([reference_point(r, args.out, args)
                                                                           for r in args.reference])
    except UserError as e:
        print(f"bench_codesign: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nbench_codesign: interrupted; the same command continues (finished runs are kept)", file=sys.stderr)
        return 130
    failed = [k for k, v in state["runs"].items() if v["state"] == "failed"]
    compare(rows)
    print(table(rows))
    if failed:
        print(f"failed runs (see {args.out}/sweep.json): {', '.join(failed)}")
    (args.out / "codesign.json").write_text(json.dumps({"target": args.target, "reference_rule": REFERENCE_RULE,
                                                        "rows": rows}, indent=2) + "\n")
    plot(rows, args.out / "codesign.png", args.target)
    print(f"written: {args.out / 'codesign.json'}, {args.out / 'codesign.png'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
