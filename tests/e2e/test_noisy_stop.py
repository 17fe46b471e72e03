"""A stop on the evaluation return of a few episodes, unconfirmed, is called noisy where the job
is checked (`kuberl validate`) and where it starts (`kuberl train`); confirmed, it is not."""

import pytest
import yaml

from testkit import rljob, run_kuberl

NOISY = "the stop rests on the mean of 5 episodes, which a lucky draw passes"


def manifest(tmp_path, confirm_episodes):
    job = rljob("noisy")
    job["spec"]["trainer"] |= {
        "evaluation": {"everyIterations": 1, "episodes": 5, "confirmEpisodes": confirm_episodes},
        "stop": {"evaluationReturnMean": 500, "iterations": 1},
    }
    path = tmp_path / "noisy.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


@pytest.mark.parametrize(("confirm_episodes", "warned"), [(0, True), (100, False)])
def test_validate_warns_of_a_stop_on_few_episodes(tmp_path, confirm_episodes, warned):
    checked = run_kuberl("validate", manifest(tmp_path, confirm_episodes))

    assert checked.returncode == 0, checked.stderr
    assert (NOISY in checked.stderr) == warned, checked.stderr
    assert "set evaluation.confirmEpisodes to 30 or more" in checked.stderr or not warned


def test_train_warns_of_a_stop_on_few_episodes_before_it_trains(tmp_path):
    trained = run_kuberl("train", manifest(tmp_path, 0), "--run-dir", tmp_path / "run", timeout=300)

    assert trained.returncode == 0, trained.stderr
    assert f"warning: stop.evaluationReturnMean: {NOISY}" in trained.stderr, trained.stderr
