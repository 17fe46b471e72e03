"""The driver in-process: stop conditions, progress rows, resume, and no Ray without remote
workers."""

import itertools
import json
import math
import pathlib
import subprocess
import sys
import textwrap

import pytest

from kuberl_contract.config import RolloutConfig, StopConditions
from kuberl_trainer.job import trainer as trainer_module
from kuberl_trainer.job.checkpoint import CheckpointSaveError, CheckpointStore
from kuberl_trainer.job.driver import Driver
from kuberl_trainer.job.outcome import stop_reason
from kuberl_trainer.job.ray_session import set_private_ray_token
from kuberl_trainer.job.resume import META_ROW
from kuberl_trainer.job.trainer import worker_seed
from kuberl_trainer.rollouts.rollout_worker import RolloutWorker
from testkit import trainer_config

ROW = {"timesteps_total": 1000, "iteration": 10, "episode_return_mean": 50.0, "time_total_s": 5.0}


@pytest.mark.parametrize(
    "stop, row, expected",
    [
        ({"timesteps": 1000}, ROW, "timesteps>=1000"),
        ({"timesteps": 1001}, ROW, None),
        ({"iterations": 10, "timesteps": 5000}, ROW, "iterations>=10"),
        ({"episodeReturnMean": 50}, ROW, "episodeReturnMean>=50"),
        ({"episodeReturnMean": 50}, {**ROW, "episode_return_mean": math.nan}, None),
        ({"evaluationReturnMean": 40}, ROW, None),  # not evaluated this iteration
        (
            {"evaluationReturnMean": 40},
            {**ROW, "evaluation_return_mean": 45.0},
            "evaluationReturnMean>=40",
        ),
        ({"wallTimeSeconds": 4.5}, ROW, "wallTimeSeconds>=4.5"),
    ],
)
def test_stop_reason(stop, row, expected):
    assert stop_reason(StopConditions.model_validate(stop), row) == expected


PROGRESS_KEYS = {
    "iteration", "timesteps_total", "episode_return_mean", "episode_len_mean", "samples_per_s",
    "time_total_s", "policy_loss", "vf_loss", "entropy", "kl",
}  # fmt: skip


def small_ppo(iterations):
    return trainer_config(
        algorithm="PPO",
        stop={"iterations": iterations},
        hyperparameters={"rollout_length": 32, "num_epochs": 2},
        checkpoint={"everyIterations": 2, "keep": 2},
    )


def test_progress_rows_and_resume_continue_counters(tmp_path, monkeypatch):
    seeds = []  # of the local worker, in each run

    class SeedRecordingWorker(RolloutWorker):
        def __init__(self, *args, seed, **kwargs):
            seeds.append(seed)
            super().__init__(*args, seed=seed, **kwargs)

    monkeypatch.setattr(trainer_module, "RolloutWorker", SeedRecordingWorker)
    first = Driver(small_ppo(3), RolloutConfig(envs_per_worker=4), tmp_path, "job").run()
    assert (first.iteration, first.stopped_by) == (3, "iterations>=3")
    assert first.checkpoint == str(tmp_path / "checkpoints" / "checkpoint-00000003")

    second = Driver(small_ppo(5), RolloutConfig(envs_per_worker=4), tmp_path, "job").run()
    assert second.resumed_from == first.checkpoint
    assert second.iteration == 5
    assert second.time_total_s > first.time_total_s
    assert seeds[0] == 0 and seeds[1] != seeds[0]  # resumed: its envs do not replay the first's

    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4, 5]
    # 4 envs x 32 steps an iteration, less the steps that only reset an env after an episode
    this_iter = [r["timesteps_this_iter"] for r in rows]
    assert all(100 < steps < 128 for steps in this_iter), this_iter
    assert [r["timesteps_total"] for r in rows] == list(itertools.accumulate(this_iter))
    assert (first.timesteps, second.timesteps) == (sum(this_iter[:3]), sum(this_iter))
    assert rows[-1].keys() >= PROGRESS_KEYS
    assert all(r["samples_per_s"] > 0 for r in rows)

    finished = Driver(small_ppo(5), RolloutConfig(envs_per_worker=4), tmp_path, "job").run()
    assert (finished.iteration, finished.stopped_by) == (5, "iterations>=5")
    assert len((tmp_path / "progress.jsonl").read_text().splitlines()) == 5  # nothing retrained


def test_a_row_cut_short_by_a_crash_is_dropped_when_the_run_resumes(tmp_path):
    Driver(small_ppo(2), RolloutConfig(envs_per_worker=4), tmp_path, "job").run()
    progress = tmp_path / "progress.jsonl"
    with progress.open("a") as file:  # the process died while writing row 3
        file.write('{"iteration": 3, "timesteps_to')
    resumed = Driver(small_ppo(3), RolloutConfig(envs_per_worker=4), tmp_path, "job").run()
    assert resumed.iteration == 3
    assert [json.loads(line)["iteration"] for line in progress.read_text().splitlines()] == [
        1,
        2,
        3,
    ]


def small_pg(iterations, every):
    return trainer_config(
        algorithm="PG",
        stop={"iterations": iterations},
        hyperparameters={"rollout_length": 16},
        checkpoint={"everyIterations": every, "keep": 2},
    )


def run_pg(run_dir, iterations, every):
    return Driver(
        small_pg(iterations, every), RolloutConfig(envs_per_worker=2), run_dir, "job"
    ).run()


def progress_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]


def saved(run_dir, iteration):
    return str(run_dir / "checkpoints" / f"checkpoint-{iteration:08d}")


def test_the_row_of_an_iteration_checkpointed_names_its_checkpoint(tmp_path):
    result = run_pg(tmp_path, 3, every=2)  # saves at iteration 2 and at the stop
    assert result.checkpoint == saved(tmp_path, 3)
    assert [r["checkpoint"] for r in progress_rows(tmp_path)] == [
        None,
        saved(tmp_path, 2),
        saved(tmp_path, 3),
    ]


@pytest.mark.parametrize("cut_short", [False, True], ids=["before-the-row", "writing-the-row"])
def test_a_crash_between_the_checkpoint_and_its_row_is_repaired_on_resuming(tmp_path, cut_short):
    run_pg(tmp_path, 2, every=2)
    progress = tmp_path / "progress.jsonl"
    *before, last = progress.read_text().splitlines(keepends=True)
    written = json.loads(last)
    assert written["checkpoint"] == saved(tmp_path, 2)
    # As if the process died after saving checkpoint 2, before or while writing its row.
    progress.write_text("".join(before) + (last[:25] if cut_short else ""))

    resumed = run_pg(tmp_path, 3, every=2)
    assert resumed.resumed_from == saved(tmp_path, 2)
    rows = progress_rows(tmp_path)
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert rows[1] == written  # put back from the checkpoint, naming it
    assert rows[2]["checkpoint"] == saved(tmp_path, 3)


def test_a_checkpoint_saved_without_its_row_still_resumes(tmp_path):
    """As one saved after its row was written, or by an older kuberl: the rows are kept as they
    are."""
    run_pg(tmp_path, 2, every=2)
    manifest = pathlib.Path(saved(tmp_path, 2)) / "manifest.json"
    contents = json.loads(manifest.read_text())
    del contents["meta"][META_ROW]
    manifest.write_text(json.dumps(contents))
    progress = tmp_path / "progress.jsonl"
    progress.write_text(progress.read_text().splitlines(keepends=True)[0])

    resumed = run_pg(tmp_path, 3, every=2)
    assert resumed.resumed_from == saved(tmp_path, 2)
    assert [r["iteration"] for r in progress_rows(tmp_path)] == [1, 3]


def test_a_failed_save_leaves_the_row_naming_the_previous_checkpoint(tmp_path, monkeypatch):
    save = CheckpointStore.save

    def failing_at_iteration_2(store, iteration, state, meta):
        if iteration == 2:
            raise CheckpointSaveError("could not save iteration 2: the store is full")
        return save(store, iteration, state, meta)

    monkeypatch.setattr(CheckpointStore, "save", failing_at_iteration_2)
    result = run_pg(tmp_path, 3, every=1)
    assert result.checkpoint == saved(tmp_path, 3)
    assert [r["checkpoint"] for r in progress_rows(tmp_path)] == [
        saved(tmp_path, 1),
        saved(tmp_path, 1),
        saved(tmp_path, 3),
    ]


def test_workers_started_again_get_seeds_of_their_own():
    first_starts = [worker_seed(7, index, 0, 0) for index in range(3)]
    assert first_starts == [7, 7 + 10_007, 7 + 2 * 10_007]  # a new run's, far apart
    restarts = [(0, 1), (0, 2), (12, 0), (12, 1), (40, 0)]  # (resumed iteration, start)
    again = [worker_seed(7, index, *restart) for index in range(3) for restart in restarts]
    assert len(set(again)) == len(again) and not set(again) & set(first_starts)
    assert again == [worker_seed(7, index, *restart) for index in range(3) for restart in restarts]


@pytest.mark.parametrize(
    "trainer",
    [
        {"algorithm": "PG"},
        # ES's noise table is shared through the object store only when there are remote workers.
        {"algorithm": "ES", "hyperparameters": {"noise_size": 10_000, "episodes_per_batch": 8}},
    ],
)
def test_zero_remote_workers_never_start_ray(tmp_path, trainer):
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(tmp_path.parent)!r})
        from pydantic import TypeAdapter
        from kuberl_contract.config import TrainerConfig, RolloutConfig
        from kuberl_trainer.job.driver import Driver
        config = TypeAdapter(TrainerConfig).validate_python(
            {{"env": "CartPole-v1", "stop": {{"iterations": 2}}, **{trainer!r}}})
        Driver(config, RolloutConfig(replicas=0), Path({str(tmp_path)!r}), "job").run()
        print("ray imported" if "ray" in sys.modules else "no ray")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "no ray"


@pytest.mark.parametrize(
    "chosen", [{"RAY_AUTH_MODE": "disabled"}, {"RAY_AUTH_TOKEN_PATH": "/run/token"}]
)
def test_a_private_ray_keeps_the_authentication_chosen_in_the_environment(chosen):
    environ = {"PATH": "/bin", **chosen}
    assert not set_private_ray_token(environ)
    assert environ == {"PATH": "/bin", **chosen}


def test_a_private_ray_gets_a_token_of_its_own():
    first, second = {"PATH": "/bin"}, {}
    assert set_private_ray_token(first) and set_private_ray_token(second)
    assert (
        len(first["RAY_AUTH_TOKEN"]) == 64 and first["RAY_AUTH_TOKEN"] != second["RAY_AUTH_TOKEN"]
    )
