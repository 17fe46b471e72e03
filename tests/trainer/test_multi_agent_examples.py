"""The multi-agent examples learn past their targets (deploy/examples/): three agents covering
three landmarks with one shared PPO policy (MPE's simple_spread), on 3 seeds."""

from pathlib import Path

import pytest

from kuberl_operator.validation import load_rljob
from kuberl_trainer.job.driver import Driver

EXAMPLES = Path(__file__).parents[2] / "deploy" / "examples"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_simple_spread_agents_learn_to_cover_the_landmarks(tmp_path, seed):
    """Acting at random returns about -85 and standing still -76 (the sum over the three agents
    of an episode). Here a mean of -65 over 100 episodes within 600k agent steps: seeds 0 and 2
    reached it within 120k (23 and 31 s), seed 1 at 485k, after a dip to -93 that RLlib's run of
    the same settings shows too (bench/multi_agent_spread.py)."""
    job = load_rljob(EXAMPLES / "mpe-spread-ppo.yaml")
    stop = {"episodeReturnMean": -65, "timesteps": 600_000}
    trainer = job.spec.trainer.model_copy(
        update={
            "seed": seed,
            "stop": type(job.spec.trainer.stop).model_validate(stop),
            "checkpoint": job.spec.trainer.checkpoint.model_copy(update={"export_policy": False}),
        }
    )
    result = Driver(trainer, job.spec.rollout_workers, tmp_path, job.name).run()
    assert result.stopped_by == "episodeReturnMean>=-65", result
