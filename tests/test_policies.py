"""Shipped policies still load and reproduce their recorded evaluation exactly (real rollouts)."""
import json
from pathlib import Path

import pytest

from dwc.rl.common import actor_act_fn, evaluate
from dwc.rl.train import load_actor

POLICIES = sorted(p.parent for p in (Path(__file__).parent.parent / "policies").glob("*/eval.json"))


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_shipped_policy_reproduces_its_eval(policy):
    recorded = json.loads((policy / "eval.json").read_text())
    actor, cfg, step = load_actor(policy)
    assert step == recorded["train_steps"]
    result = evaluate(actor_act_fn(actor, "cpu"), cfg.env, 3, recorded["seed"])
    assert result["returns"] == recorded["returns"][:3]
    assert (policy / "README.md").is_file() and "dwc train" in (policy / "README.md").read_text()


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
