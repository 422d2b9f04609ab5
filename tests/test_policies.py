"""Shipped policies still load and reproduce their recorded evaluation exactly (real rollouts), on
any CPU: the evaluation arithmetic does not depend on which vector kernels the machine picks."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dwc.train.common import actor_act_fn, evaluate
from dwc.train.checkpoint import load_actor

POLICIES = sorted(p.parent for p in (Path(__file__).parent.parent / "policies").glob("*/eval.json"))


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_shipped_policy_reproduces_its_eval(policy):
    recorded = json.loads((policy / "eval.json").read_text())
    actor, cfg, step = load_actor(policy)
    assert step == recorded["train_steps"]
    result = evaluate(actor_act_fn(actor, "cpu"), cfg.env, 3, recorded["seed"])
    assert result["returns"] == recorded["returns"][:3]
    assert (policy / "README.md").is_file() and "dwc train" in (policy / "README.md").read_text()


@pytest.mark.parametrize("policy", [p for p in POLICIES if "frozen" in json.loads((p / "eval.json").read_text())],
                         ids=lambda p: p.name)
def test_evaluation_with_the_frozen_circuit_reproduces_both_returns(policy):
    """dwc eval --frozen freezes the actor it evaluates (one checkpoint read): the float returns stay the
    recorded ones, and so do the frozen circuit's."""
    from dwc.flows.evaluate import evaluate_run
    recorded = json.loads((policy / "eval.json").read_text())
    result = evaluate_run(policy, 2, seed=recorded["seed"], progress=False, frozen=True, write=False)
    assert result["returns"] == recorded["returns"][:2]
    assert result["frozen"]["returns"] == recorded["frozen"]["returns"][:2]


def test_policies_are_small():
    for policy in POLICIES:
        assert sum(f.stat().st_size for f in policy.iterdir()) < 5e6, policy


def test_dwc_policies_lists_them_with_their_returns(capsys):
    from dwc.cli import main
    assert main(["policies", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {p.name for p in POLICIES}
    for p in POLICIES:
        recorded = json.loads((p / "eval.json").read_text())
        assert rows[p.name]["mean_return"] == recorded["mean_return"]
        assert rows[p.name]["env"] == recorded["env"]
        seeds = json.loads((p / "seeds.json").read_text()) if (p / "seeds.json").exists() else None
        assert rows[p.name]["seed"] == (seeds["shipped_seed"] if seeds else json.loads((p / "config.json").read_text())["seed"])
        assert rows[p.name]["seeds_trained"] == (len(seeds["runs"]) if seeds else 1)


# Computes a policy's deterministic actions on fixed observations and its frozen circuit's action
# tables, and saves them; run once in this process and once with other kernels forced.
_ACTIONS = """
import sys, numpy as np, torch
from pathlib import Path
from dwc.train.checkpoint import load_actor
from dwc.flows.compile import freeze_run
actor, cfg, _ = load_actor(sys.argv[1])
obs = np.random.default_rng(0).standard_normal((3000, actor.normalizer.mean.numel())) * 3
act = actor.act(torch.as_tensor(obs, dtype=torch.float32)).numpy()
tables = np.array(freeze_run(Path(sys.argv[1])).action_tables) if cfg.actor.policy == "dwc" else np.zeros(0)
np.savez(sys.argv[2], act=act, tables=tables)
"""
# AVX2-less MKL and scalar ATen kernels: float32 tanh, exp and matrix products give other last bits
# there than with AVX-512 or AVX2, as they do between Intel and AMD machines.
OTHER_KERNELS = {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ATEN_CPU_CAPABILITY": "default"}


@pytest.mark.parametrize("name", ["hopper-v5-mlp", "hopper-v5-dwc-ecp5"])
def test_actions_do_not_depend_on_the_cpus_kernels(name, tmp_path):
    policy = Path(__file__).parent.parent / "policies" / name
    runs = {}
    for label, extra in (("native", {}), ("other", OTHER_KERNELS)):
        out = tmp_path / f"{label}.npz"
        subprocess.run([sys.executable, "-c", _ACTIONS, str(policy), str(out)], check=True,
                       env={**os.environ, **extra})
        runs[label] = np.load(out)
    for key in ("act", "tables"):
        assert np.array_equal(runs["native"][key], runs["other"][key]), key
