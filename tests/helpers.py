"""Helpers the test modules share (fixtures are in conftest.py): the CLI run as a user runs it, small
training runs, checkpoint comparison to the bit, random IR graphs and their inputs, the bit-exact check
of a trained actor against its frozen graph, and small dwc sweep specs."""
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from dwc.ir import LUT, Comparator, FixedFormat, Graph, Linear
from dwc.ir import reference as ref
from dwc.core.rundir import checkpoint_info

# the command line

SMALL_DWC = ["--width", "32", "--lut-inputs", "4", "--thermo-bits", "7"]
ENV = "InvertedPendulum-v5"


def small_args(out, algo="sac", policy="dwc", steps=400, extra=()):
    args = ["train", "--env", ENV, "--algo", algo, "--policy", policy, "--steps", str(steps), "--out", str(out),
            "--checkpoint-every", "200", "--eval-episodes", "2", "--no-progress", "--hidden", "32"]
    args += SMALL_DWC
    if algo == "sac":
        args += ["--learning-starts", "150", "--batch-size", "32"]
    else:
        args += ["--num-envs", "2", "--rollout-steps", "50"]
    return args + list(extra)


def metrics(run: Path) -> list[dict]:
    return [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]


def stop_at(run: Path, args: list[str], signum: int, after: int) -> int:
    """Start ``dwc train`` in a process, send it ``signum`` once it logged a step past ``after``; the step
    its checkpoint then holds."""
    proc = subprocess.Popen([sys.executable, "-m", "dwc"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if (run / "checkpoint.pt").exists() and (run / "metrics.jsonl").exists() and \
                max((m["step"] for m in metrics(run)), default=0) > after:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be stopped"
    proc.send_signal(signum)
    proc.communicate(timeout=120)
    step = torch.load(run / "checkpoint.pt", weights_only=False)["step"]
    # what dwc report and dwc sweep read without loading the checkpoint: a stop between the checkpoint
    # and its checkpoint.json (a SIGKILL, or a SIGTERM where no checkpoint follows it) leaves the step
    # unknown, never another step
    assert checkpoint_info(run)["step"] in (step, None)
    return step


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "dwc", *args], capture_output=True, text=True, timeout=120)


def assert_one_line_error(res, *needles):
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    lines = [l for l in res.stderr.strip().splitlines() if l]
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]


# checkpoints

def differences(a, b, path: str = "") -> list[str]:
    """Where two checkpoints differ, to the bit ([] when identical), but for the time their training took
    ("cost": never the same twice)."""
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a)} != {sorted(b)}"]
        return [d for k in a if k != "cost" for d in differences(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, (list, tuple)):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    if torch.is_tensor(a):
        same = a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        same = a.dtype == b.dtype and np.array_equal(a, b)
    else:
        same = a == b
    return [] if same else [path]


# IR graphs

def random_graph(seed: int) -> Graph:
    rng = random.Random(seed)
    dims = rng.randint(1, 4)
    formats = [FixedFormat(8, rng.randint(0, 4)) for _ in range(dims)]
    comps = []
    for _ in range(rng.randint(2, 12)):
        d = rng.randrange(dims)
        f = formats[d]
        comps.append(Comparator(d, rng.choice([f.min_int, f.max_int + 1, rng.randint(f.min_int, f.max_int)])))
    layers, n_in = [], len(comps)
    for _ in range(rng.randint(1, 3)):
        layer = []
        for _ in range(rng.randint(2, 10)):
            arity = rng.randint(0, 6)
            inputs = [rng.randrange(n_in) for _ in range(arity)]
            table = rng.choice([0, (1 << (1 << arity)) - 1, rng.getrandbits(1 << arity), 0b1010 if arity >= 2 else 1])
            layer.append(LUT(inputs, table & ((1 << (1 << arity)) - 1)))
        if rng.random() < 0.5:
            layer.append(LUT(list(layer[0].inputs), layer[0].table))  # an exact duplicate
        layers.append(layer)
        n_in = len(layer)
    actions = rng.randint(1, 3)
    groups = [[rng.randrange(n_in) for _ in range(rng.randint(0, n_in))] for _ in range(actions)]
    afmt = FixedFormat(12, 4)
    tables = [[rng.randint(afmt.min_int, afmt.max_int) for _ in range(len(g) + 1)] for g in groups]
    g = Graph(formats, comps, layers, groups, afmt, tables)
    g.validate()
    return g


def inputs_for(g: Graph, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lo = np.array([f.min_int for f in g.obs_formats])
    hi = np.array([f.max_int for f in g.obs_formats])
    q = rng.integers(lo, hi + 1, size=(n, g.obs_dim))
    return np.concatenate([q, lo[None], hi[None]])


def random_linear_graph(seed: int, with_luts: bool) -> Graph:
    """Thermometer comparators per dim -> popcounts (input codes) -> 1-3 linear layers -> tables;
    with LUT layers in between when ``with_luts`` (a LUT network with a linear head)."""
    rng = random.Random(seed)
    if with_luts:
        base = random_graph(seed)
        formats, comps, layers, groups = base.obs_formats, base.comparators, base.layers, base.groups
    else:
        dims = rng.randint(1, 4)
        formats = [FixedFormat(8, rng.randint(0, 4)) for _ in range(dims)]
        comps, groups = [], []
        for d in range(dims):  # a thermometer per dim, some thresholds constant, some repeated
            ts = sorted(rng.choice([formats[d].min_int, formats[d].max_int + 1, rng.randint(-128, 127)])
                        for _ in range(rng.randint(1, 9)))
            groups.append(list(range(len(comps), len(comps) + len(ts))))
            comps += [Comparator(d, t) for t in ts]
        layers = []
    linear, n_in = [], len(groups)
    for k in range(rng.randint(1, 3)):
        n_out = rng.randint(1, 5)
        lo = rng.randint(-20, 0)
        linear.append(Linear([[rng.randint(-9, 9) for _ in range(n_in)] for _ in range(n_out)],
                             [rng.randint(-50, 50) for _ in range(n_out)], rng.randint(-2, 4), lo,
                             lo + rng.randint(0, 40), ("half_up", "half_even")[(seed + k) % 2]))
        n_in = n_out
    afmt = FixedFormat(12, 4)
    last = linear[-1]
    tables = [[rng.randint(afmt.min_int, afmt.max_int) for _ in range(last.hi - last.lo + 1)]
              for _ in range(last.outputs)]
    g = Graph(formats, comps, layers, groups, afmt, tables, {}, linear)
    g.validate()
    return g


# a trained actor against its frozen graph

def assert_bit_exact(actor, graph: Graph, q: np.ndarray) -> None:
    scale = np.array([2.0 ** -f.frac for f in graph.obs_formats])
    x = torch.tensor(q * scale, dtype=torch.float32)  # exactly the quantised values
    with torch.no_grad():
        pc_torch = actor.popcounts(x).numpy().astype(np.int64)
        act_torch = graph.action_format.quantize(actor.act(x).numpy())
    pc_ir = ref.popcounts(graph, q)
    assert np.array_equal(pc_ir, pc_torch), f"{(pc_ir != pc_torch).sum()} popcount mismatches"
    assert np.array_equal(ref.actions_int(graph, q), act_torch)


def extreme_observations(graph: Graph) -> np.ndarray:
    lo = np.array([f.min_int for f in graph.obs_formats])
    hi = np.array([f.max_int for f in graph.obs_formats])
    rows = [lo, hi, np.zeros_like(lo), lo + 1, hi - 1]
    # every threshold, and one below it, in every dimension at once
    per_dim = [[c.threshold for c in graph.comparators if c.dim == d] for d in range(graph.obs_dim)]
    for k in range(max(map(len, per_dim))):
        t = np.array([p[min(k, len(p) - 1)] for p in per_dim])
        rows += [np.clip(t, lo, hi), np.clip(t - 1, lo, hi)]
    return np.stack(rows)


# dwc sweep specs

# a spec's shared options for small, quick runs
SMALL_SWEEP = {"learning_starts": 300, "batch_size": 32, "checkpoint_every": 200, "eval_episodes": 2,
               "thermo_bits": 7, "width": 32, "lut_inputs": 4, "hidden": 32}


def write_spec(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def wait_for(pred, timeout, what):
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
