"""CrossQ's critics (``--critic crossq``): batch renormalisation per member, one forward of the current and
next state-actions, no target critics, the actor stepped every --policy-delay critic steps; the run resumes
and trains seeds together exactly as SAC's does."""
import json
import math
import signal

import numpy as np
import pytest
import torch

from dwc.cli import main
from dwc.core.config import CROSSQ, SACConfig, config_from_options
from dwc.models import ActorConfig, build_actor
from dwc.train.batch_renorm import MemberRenorm
from dwc.train.sac_learner import SACLearner
from helpers import ENV, differences, stop_at


def test_renorm_is_batch_norm_in_warm_up_then_the_running_statistics():
    torch.manual_seed(0)
    norm = MemberRenorm(members=2, features=3, momentum=0.9, warmup=1)
    x = torch.randn(2, 64, 3) * torch.tensor([1.0, 2.0, 0.5]) + 2
    y = norm(x, update=True)  # warm-up: each member normalised by its own batch
    want = (x - x.mean(1, keepdim=True)) / (x.var(1, keepdim=True) + norm.eps).sqrt()
    assert torch.allclose(y, want, atol=1e-5)
    assert torch.allclose(norm.ra_mean[..., :3], 0.9 * x.mean(1, keepdim=True))  # moved 0.9 of the way from 0
    assert norm.ra_mean.shape == (2, 1, 16) and not norm.ra_mean[..., 3:].any()  # stored padded, the pad unused
    assert norm.steps.tolist() == [1, 1]
    norm(x, update=True)  # step 2 is past the warm-up: now the running statistics normalise
    running = (x - norm.ra_mean[..., :3]) / (norm.ra_var[..., :3] + norm.eps).sqrt()
    before = {n: t.clone() for n, t in norm.state_dict().items()}
    y = norm(x, update=False)  # the actor's read: running statistics, nothing moves
    assert torch.allclose(y, running, atol=1e-5)
    assert differences(before, dict(norm.state_dict())) == []
    x2 = x + 0.1
    mean_before, var_before = norm.ra_mean[..., :3].clone(), norm.ra_var[..., :3].clone()
    y = norm(x2, update=True)  # r and d within bounds here: the running statistics' normalisation ...
    want = (x2 - mean_before) / (var_before + norm.eps).sqrt()
    assert torch.allclose(y, want, atol=1e-4)
    # ... with batch norm's gradient: the batch mean's shift is taken out, so a constant shift has none
    x3 = x2.clone().requires_grad_(True)
    MemberRenorm(2, 3, warmup=0)(x3, update=True).sum().backward()
    assert x3.grad.abs().max() < 1e-4


def learner(critic: str, **kw) -> SACLearner:
    torch.manual_seed(0)
    actor = build_actor(ActorConfig(policy="mlp", hidden=32), 5, 2, np.full(2, -1.0), np.full(2, 1.0))
    return SACLearner(actor, 5, 2, SACConfig(batch_size=16, q_hidden=8, critic=critic, **kw), torch.device("cpu"))


def test_the_critics_read_the_current_and_next_pairs_as_one_batch_and_have_no_targets():
    lr = learner("crossq")
    assert lr.qf_target is None and "qf_target" not in lr.state_dict()
    assert lr.actor_opt.param_groups[0]["betas"][0] == lr.q_opt.param_groups[0]["betas"][0] == 0.9  # SACConfig's
    g = torch.Generator().manual_seed(1)
    obs, nxt = torch.randn(16, 5, generator=g), torch.randn(16, 5, generator=g) + 3
    act = torch.rand(16, 2, generator=g) * 2 - 1
    first = lr.qf.norms[0]
    lr.update(obs, nxt, act, torch.randn(16), torch.zeros(16), torch.randn(16, 2), torch.randn(1, 16, 2))
    # the input layer's statistics moved toward the joint batch's mean: current and next observations both
    joint_obs_mean = torch.cat([obs, nxt]).mean(0)
    assert torch.allclose(first.ra_mean[0, 0, :5], 0.01 * joint_obs_mean, atol=1e-6)
    assert first.steps.tolist() == [1, 1]  # one critic forward updated them; the actor's step read them only
    assert not torch.allclose(first.ra_mean[0, 0, :5], 0.01 * obs.mean(0), atol=1e-3)


def test_crossq_brings_its_defaults_and_keeps_what_is_given():
    cfg = config_from_options({"critic": "crossq", "q_hidden": 256})
    assert cfg.sac.q_hidden == 256 and cfg.sac.policy_delay == CROSSQ["policy_delay"] == 3
    assert cfg.sac.q_lr == cfg.sac.actor_lr == 1e-3 and cfg.sac.adam_beta1 == 0.5
    assert config_from_options({}).sac.critic == "sac" and config_from_options({}).sac.policy_delay == 1


# a tiny CrossQ run: DWC actor, critics 32 wide, batch 32
TINY = ["--env", ENV, "--critic", "crossq", "--q-hidden", "32", "--width", "32", "--lut-inputs", "4",
        "--thermo-bits", "7", "--learning-starts", "150", "--batch-size", "32", "--checkpoint-every", "200",
        "--eval-episodes", "1", "--no-progress"]


def test_a_crossq_run_steps_its_actor_every_third_update_and_resumes_exactly(tmp_path):
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert main(["train", *TINY, "--steps", "800", "--out", str(whole)]) == 0
    ckpt = torch.load(whole / "checkpoint.pt", weights_only=False)
    updates = 800 - 150
    assert ckpt["counters"]["updates"] == updates
    actor_steps = {int(s["step"]) for s in ckpt["actor_opt"]["state"].values()}
    critic_steps = {int(s["step"]) for s in ckpt["q_opt"]["state"].values()}
    assert actor_steps == {math.ceil(updates / 3)} and critic_steps == {updates}
    assert ckpt["qf"]["norms.0.steps"].tolist() == [updates, updates]
    cfg = json.loads((whole / "config.json").read_text())["sac"]
    assert cfg["critic"] == "crossq" and cfg["policy_delay"] == 3 and cfg["q_hidden"] == 32
    at = stop_at(stopped, ["train", *TINY, "--steps", "800", "--out", str(stopped)], signal.SIGTERM, after=450)
    assert 200 <= at < 800
    assert main(["train", "--out", str(stopped), "--resume", "--no-progress"]) == 0
    assert differences(ckpt, torch.load(stopped / "checkpoint.pt", weights_only=False)) == []


@pytest.mark.slow
def test_crossq_seeds_trained_together_follow_their_single_runs(tmp_path):
    for s in (1, 2):
        assert main(["train", *TINY, "--policy", "mlp", "--hidden", "32", "--steps", "400", "--seed", str(s),
                     "--out", str(tmp_path / f"single{s}")]) == 0
    assert main(["train", *TINY, "--policy", "mlp", "--hidden", "32", "--steps", "400", "--seeds", "1-2",
                 "--out", str(tmp_path / "both")]) == 0
    for s in (1, 2):
        a, b = (torch.load(r / "checkpoint.pt", weights_only=False)
                for r in (tmp_path / f"single{s}", tmp_path / "both" / f"seed{s}"))
        for k in ("numpy", "python"):
            a["rng"].pop(k), b["rng"].pop(k)
        assert differences(a, b) == []


def test_bad_crossq_options_are_one_line(capsys, tmp_path):
    assert main(["train", "--critic", "crossq", "--policy-delay", "0", "--out", str(tmp_path / "a")]) == 2
    assert "--policy-delay must be >= 1" in capsys.readouterr().err
    assert main(["train", "--policy-delay", "2", "--policy-frequency", "2", "--out", str(tmp_path / "b")]) == 2
    assert "not both" in capsys.readouterr().err
