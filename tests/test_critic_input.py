"""What SAC's critics read: the raw observation by default, the actor's normalised one for runs saved
before that option existed."""
import numpy as np
import pytest
import torch


@pytest.mark.parametrize("critic_input", ["raw", "normalized"])
def test_the_critics_read_what_the_config_says(critic_input):
    """SAC's critics read the raw observation (the default, as CleanRL's and SB3's SAC) or the actor's
    normalised one (runs saved before the option existed); the actor normalises its own input either way."""
    from dwc.core.config import ActorConfig, SACConfig
    from dwc.models import build_actor
    from dwc.train.sac import SACLearner

    torch.manual_seed(0)
    actor = build_actor(ActorConfig(policy="mlp", hidden=16), 3, 2, -np.ones(2), np.ones(2))
    actor.normalizer.update(torch.randn(100, 3, dtype=torch.float64) * 5 + 7)  # far from mean 0, std 1
    sc = SACConfig(batch_size=8, q_hidden=16, critic_input=critic_input)
    learner = SACLearner(actor, 3, 2, sc, torch.device("cpu"))
    seen = []
    forward = learner.qf.forward
    learner.qf.forward = lambda xn, a: (seen.append(xn.detach().clone()), forward(xn, a))[1]
    obs = torch.randn(8, 3) * 5 + 7
    learner.update(obs, obs, torch.zeros(8, 2), torch.zeros(8), torch.zeros(8), torch.randn(8, 2), torch.randn(2, 8, 2))
    expected = obs if critic_input == "raw" else actor.normalizer(obs)
    # the critic loss and both actor steps (the learner stacks seeds: a single run's is seed 0 of 1)
    assert len(seen) == 3 and all(torch.equal(x, expected.unsqueeze(0)) for x in seen)


def test_a_run_saved_before_the_critic_input_option_resumes_as_it_was_trained():
    from dwc.core.config import TrainConfig
    saved = TrainConfig().to_dict()
    del saved["sac"]["critic_input"]
    assert TrainConfig.from_dict(saved).sac.critic_input == "normalized"
    assert TrainConfig().sac.critic_input == "raw"
    assert TrainConfig.from_dict(TrainConfig().to_dict()).sac.critic_input == "raw"
