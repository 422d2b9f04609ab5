"""Hashes of everything a refactor must leave unchanged, to compare before and after.

Verilog of every compilable shipped policy at pipelines 0, 2 and max, and the metrics and
checkpoint tensors of short training runs (SAC one seed and two seeds together, PPO,
distillation, a quantised MLP). Timing fields (wall clock, steps per second) are left out.

    python scripts/fingerprint.py --out /tmp/before.json
    ... refactor ...
    python scripts/fingerprint.py --out /tmp/after.json --compare /tmp/before.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = ("0", "2", "max")
ENV = "InvertedPendulum-v5"
SHORT = ["--env", ENV, "--steps", "600", "--learning-starts", "200", "--eval-episodes", "1",
         "--no-progress", "--checkpoint-every", "300", "--width", "64", "--hidden", "32"]
RUNS = {
    "sac-dwc": ["--policy", "dwc", "--seed", "3"],
    "sac-dwc-seeds": ["--policy", "dwc", "--seeds", "3,4"],
    "sac-qmlp": ["--policy", "qmlp", "--seed", "2"],
    "ppo-dwc": ["--policy", "dwc", "--algo", "ppo", "--rollout-steps", "200"],
    "distill-dwc": ["--policy", "dwc", "--algo", "distill", "--teacher",
                    str(ROOT / "policies/inverted-pendulum-v5-mlp")],
}
TIMING = ("time", "sps", "second", "hours", "wall")


def _dwc(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "dwc", *args], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _tensors(obj, prefix=""):
    """Every tensor and array in a checkpoint, by path, as bytes."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj.detach().cpu().contiguous().numpy().tobytes()
    elif hasattr(obj, "tobytes"):
        yield prefix, obj.tobytes()
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            yield from _tensors(obj[k], f"{prefix}/{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}/{i}")


def _run_prints(run: Path) -> dict:
    out = {}
    for metrics in sorted(run.rglob("metrics.jsonl")):
        rows = [{k: v for k, v in json.loads(line).items() if not any(t in k.lower() for t in TIMING)}
                for line in metrics.read_text().splitlines() if line.strip()]
        out[str(metrics.relative_to(run))] = _digest(json.dumps(rows, sort_keys=True).encode())
    for ckpt in sorted(run.rglob("checkpoint.pt")):
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        h = hashlib.sha256()
        for name, data in _tensors(state):
            h.update(name.encode() + data)
        out[str(ckpt.relative_to(run))] = h.hexdigest()[:16]
    return out


def fingerprint(work: Path, only: set[str] | None) -> dict:
    prints: dict[str, str] = {}
    for folder in sorted((ROOT / "policies").iterdir()):
        cfg = folder / "config.json"
        if not cfg.is_file() or json.loads(cfg.read_text())["actor"]["policy"] == "mlp":
            continue
        for k in PIPELINES:
            name = f"verilog/{folder.name}/pipeline-{k}"
            if only and not any(o in name for o in only):
                continue
            out = work / "verilog" / folder.name / k
            _dwc("compile", str(folder), "--out", str(out), "--pipeline", k)
            prints[name] = _digest((out / "dwc_core.v").read_bytes())
            print(name, prints[name], flush=True)
    for name, args in RUNS.items():
        if only and not any(o in f"train/{name}" for o in only):
            continue
        out = work / "train" / name
        _dwc("train", *SHORT, *args, "--out", str(out))
        for part, d in _run_prints(out).items():
            prints[f"train/{name}/{part}"] = d
            print(f"train/{name}/{part}", d, flush=True)
    return prints


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="JSON of the hashes")
    ap.add_argument("--compare", type=Path, help="an earlier --out: list what differs, exit 1 if anything")
    ap.add_argument("--only", help="comma-separated substrings of the names to compute (e.g. train/,hopper)")
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    with tempfile.TemporaryDirectory() as tmp:
        prints = fingerprint(Path(tmp), only)
    a.out.write_text(json.dumps(prints, indent=1, sort_keys=True) + "\n")
    if a.compare:
        before = json.loads(a.compare.read_text())
        names = sorted(set(before) | set(prints)) if not only else sorted(prints)
        differ = [n for n in names if before.get(n) != prints.get(n)]
        for n in differ:
            print(f"DIFFERS {n}: {before.get(n)} -> {prints.get(n)}")
        print(f"{len(names) - len(differ)} of {len(names)} identical")
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
