"""Policy types compared on equal terms: same task, same FPGA target, same flow.

For each policy folder (shipped under policies/ or any run directory): its training budget, the
return of the float model and of the frozen integer circuit (re-evaluated here on the same seeds),
then `dwc compile` + `dwc synth` on one target: LUTs, FFs, DSPs, Fmax, latency and the energy
estimate. Policies that cannot be compiled into a circuit (the float MLP baseline) keep their
returns and show "-" for hardware. A PNG of return vs LUTs comes next to the JSON.

  .venv/bin/python scripts/bench_policies.py --task InvertedPendulum-v5 --target ecp5-25k
  .venv/bin/python scripts/bench_policies.py --policies runs/a runs/b --target ice40-hx8k --episodes 5
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def evaluate(policy: Path, episodes: int) -> dict:
    from dwc.core.errors import UserError
    from dwc.flows.evaluate import evaluate_run
    try:
        r = evaluate_run(policy, episodes, progress=False, frozen=True, write=False)
        return {"float": r["mean_return"], "float_std": r["std_return"], "frozen": r["frozen"]["mean_return"],
                "frozen_std": r["frozen"]["std_return"], "policy": r["policy"], "steps": r["train_steps"]}
    except UserError:  # not freezable (float MLP): the float model only
        r = evaluate_run(policy, episodes, progress=False, write=False)
        return {"float": r["mean_return"], "float_std": r["std_return"], "frozen": None, "frozen_std": None,
                "policy": r["policy"], "steps": r["train_steps"]}


def hardware(policy: Path, work: Path, target: str, pipeline: str, freq: float) -> dict:
    from dwc.flows.compile import compile_run
    from dwc.fpga.synth import DoesNotFit, synth
    build = work / policy.name
    # the target also picks the popcount counters (full adders on LUT4 fabrics), as dwc build does
    c = compile_run(policy, build, pipeline=int(pipeline) if pipeline != "max" else "max", target=target)
    try:
        r = synth(build, target, freq, log=lambda *a: None)
    except DoesNotFit as e:
        return {"ir": c["counts"], "fits": False, "why": str(e)}
    dsp = sum(v for k, v in r["core"]["cells"].items() if "MULT" in k or "DSP" in k or "MAC" in k)
    return {"ir": c["counts"], "fits": True, "luts": r["luts"], "ffs": r["ffs"], "dsps": dsp,
            "fmax_mhz": r["fmax_mhz"], "latency_cycles": r["latency_cycles"],
            "nj": r["energy"]["per_action_nj"], "yosys_options": r["yosys_options"]}


def plot(rows: list[dict], path: Path, title: str) -> None:
    """Side by side per policy with a circuit: LUTs, Fmax and estimated energy; the circuit's
    return in each label."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    hw = [r for r in rows if r.get("luts")]
    labels = [f"{r['name']}\n({r['policy']}, return {r['frozen']:.0f})" for r in hw]
    fig, axes = plt.subplots(1, 3, figsize=(10, 0.9 + 0.55 * max(1, len(hw))), dpi=110, sharey=True)
    for ax, key, name in zip(axes, ("luts", "fmax_mhz", "nj"), ("LUTs (core)", "Fmax (MHz)", "nJ / action (est.)")):
        values = [r[key] or 0 for r in hw]
        ax.barh(range(len(hw)), values, color=[f"C{i}" for i in range(len(hw))])
        for i, v in enumerate(values):
            ax.annotate(f"{v:,.0f}" if key != "nj" else f"{v:.2g}", (v, i), xytext=(3, 0), textcoords="offset points",
                        va="center", fontsize=7)
        ax.set_xlabel(name)
        ax.set_xlim(0, max(values or [1]) * 1.3)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(hw)), labels, fontsize=7)
    axes[0].invert_yaxis()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    from dwc.fpga.synth import TARGETS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="InvertedPendulum-v5", help="env id: the shipped policies of this task")
    ap.add_argument("--policies", nargs="+", type=Path, help="policy/run folders instead of the shipped ones")
    ap.add_argument("--target", default="ecp5-25k", choices=list(TARGETS))
    ap.add_argument("--pipeline", default="1", help="register stages for every circuit, or max (default 1)")
    ap.add_argument("--freq", type=float, default=200.0, help="clock requested from nextpnr (MHz)")
    ap.add_argument("--episodes", type=int, default=10, help="evaluation episodes per policy (same seeds)")
    ap.add_argument("--out", type=Path, default=Path("bench_policies"), help="folder for the JSON and PNG")
    args = ap.parse_args()
    if args.policies:
        policies = args.policies
    else:
        policies = [p for p in sorted((ROOT / "policies").iterdir()) if (p / "config.json").exists()
                    and json.loads((p / "config.json").read_text()).get("env") == args.task]
    if not policies:
        raise SystemExit(f"no policies for {args.task}; give --policies")
    work = Path(tempfile.mkdtemp(prefix="dwc-bench-policies-"))
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for p in policies:
        print(f"--- {p.name}: evaluating ...", flush=True)
        row = {"name": p.name, **evaluate(p, args.episodes)}
        if row["frozen"] is not None:
            print(f"--- {p.name}: compile + synth for {args.target} ...", flush=True)
            row.update(hardware(p, work, args.target, args.pipeline, args.freq))
        rows.append(row)
        print(f"    {json.dumps({k: v for k, v in row.items() if k != 'ir'})}", flush=True)
        # after every policy: a long run that is cut short keeps what it measured
        (args.out / "bench_policies.json").write_text(json.dumps(rows, indent=2))
    plot(rows, args.out / "bench_policies.png", f"{args.task} on {args.target}, pipeline {args.pipeline}")
    print(f"\n{args.task}, target {args.target}, pipeline {args.pipeline}, {args.episodes} episodes (same seeds); "
          f"nJ: ESTIMATED energy per action")
    print(f"{'policy':<28}{'type':<7}{'steps':>7}{'float':>9}{'circuit':>9}{'LUTs':>7}{'FFs':>6}{'DSPs':>5}"
          f"{'Fmax':>7}{'lat':>4}{'nJ':>8}")
    for r in rows:
        hw = (f"{r['luts']:>7}{r['ffs']:>6}{r['dsps']:>5}{r['fmax_mhz']:>7.1f}{r['latency_cycles']:>4}{r['nj']:>8.3g}"
              if r.get("fits") else f"{'-':>7}{'-':>6}{'-':>5}{'-':>7}{'-':>4}{'-':>8}")
        frozen = f"{r['frozen']:>9.1f}" if r["frozen"] is not None else f"{'-':>9}"
        print(f"{r['name']:<28}{r['policy']:<7}{r['steps']:>7}{r['float']:>9.1f}{frozen}{hw}")
    print(f"wrote {args.out / 'bench_policies.json'} and {args.out / 'bench_policies.png'}")


if __name__ == "__main__":
    main()
