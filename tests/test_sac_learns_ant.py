"""SAC's float MLP learns Ant-v5 as a stock SAC does: the regression check for the baseline every DWC is
read against. With the critics reading the actor's normalised observation and the CleanRL-style
hyper-parameters, dwc's MLP kept falling (median training episode 65-91 steps at 25-35k on seeds 1-3,
86-153 at 90-100k), while Stable-Baselines3's SAC stood by 30-35k; results/referee has both."""
import json

import numpy as np
import pytest

from dwc.cli import main


@pytest.mark.slow
@pytest.mark.ci  # ~10 minutes on one core
def test_sac_mlp_stops_falling_on_ant(tmp_path):
    run = tmp_path / "ant"
    assert main(["train", "--env", "Ant-v5", "--policy", "mlp", "--steps", "30000", "--seed", "1",
                 "--eval-episodes", "5", "--out", str(run), "--no-progress"]) == 0
    episodes = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    late = [e for e in episodes if "charts/episodic_length" in e and 20_000 < e["step"] <= 30_000]
    lengths = [e["charts/episodic_length"] for e in late]
    returns = [e["charts/episodic_return"] for e in late]
    # episodes ending in (20k, 30k]: before the fix 23-37 episodes, median 62-137 steps and a return of -8
    # to 2 (seeds 1-3; the closest variant that still fell, 97-133 steps, return 38-50); after it 15-18 episodes,
    # median 326-1000 steps, return 68-156 (seeds 1, 2 and this test's run)
    assert np.median(lengths) >= 200 and np.median(returns) >= 30, (lengths, returns)
    ev = json.loads((run / "eval.json").read_text())
    assert ev["mean_return"] > 50, ev
