"""Replay buffers: circular storage, uniform sampling, and prioritized sampling checked against
the probabilities and importance weights of Schaul et al. (2016)."""

from __future__ import annotations

import numpy as np
import pytest

from kuberl_trainer.job.checkpoint_format import load_state, write_state
from kuberl_trainer.optimizers.replay_buffer import (
    PrioritizedReplayBuffer,
    ReplayBuffer,
    SegmentTree,
)


def transitions(start: int, count: int) -> dict[str, np.ndarray]:
    """Rows numbered start.. so tests can tell which transitions a buffer holds."""
    ids = np.arange(start, start + count)
    return {
        "obs": np.stack([ids, -ids], axis=1).astype(np.float32),
        "actions": ids.astype(np.int64),
    }


def test_add_wraps_around_keeping_the_newest():
    buffer = ReplayBuffer(capacity=5, seed=0)
    buffer.add(transitions(0, 3))
    written = buffer.add(transitions(3, 4))

    assert len(buffer) == 5
    np.testing.assert_array_equal(written, [3, 4, 0, 1])
    np.testing.assert_array_equal(buffer.columns["actions"], [5, 6, 2, 3, 4])
    np.testing.assert_array_equal(buffer.columns["obs"][:, 1], -buffer.columns["actions"])


def test_a_batch_larger_than_the_capacity_keeps_its_last_rows():
    buffer = ReplayBuffer(capacity=4, seed=0)
    buffer.add(transitions(0, 1))
    buffer.add(transitions(1, 10))

    assert len(buffer) == 4
    assert sorted(buffer.columns["actions"]) == [7, 8, 9, 10]
    buffer.add(transitions(11, 1))  # overwrites the oldest, 7
    assert sorted(buffer.columns["actions"]) == [8, 9, 10, 11]


def test_add_rejects_different_columns():
    buffer = ReplayBuffer(capacity=4, seed=0)
    buffer.add(transitions(0, 2))
    with pytest.raises(ValueError, match="columns"):
        buffer.add({"obs": np.zeros((1, 2), np.float32)})


def test_uniform_sample_shapes_dtypes_and_only_stored_rows():
    buffer = ReplayBuffer(capacity=100, seed=0)
    buffer.add(transitions(0, 10))

    batch = buffer.sample(32)

    assert batch["obs"].shape == (32, 2) and batch["obs"].dtype == np.float32
    assert batch["actions"].shape == (32,) and batch["actions"].dtype == np.int64
    assert set(batch["actions"]) <= set(range(10))
    np.testing.assert_array_equal(batch["obs"][:, 0], batch["actions"])  # rows stay whole


def test_uniform_sampling_is_determined_by_the_seed():
    def draws(seed: int) -> np.ndarray:
        buffer = ReplayBuffer(capacity=100, seed=seed)
        buffer.add(transitions(0, 50))
        return np.concatenate([buffer.sample(16)["actions"] for _ in range(3)])

    np.testing.assert_array_equal(draws(1), draws(1))
    assert not np.array_equal(draws(1), draws(2))


def test_sampling_an_empty_buffer_says_so():
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(capacity=4, seed=0).sample(1)


def test_state_round_trip_continues_identically():
    buffer = ReplayBuffer(capacity=8, seed=3)
    buffer.add(transitions(0, 11))
    restored = ReplayBuffer(capacity=8, seed=99)
    restored.load_state(buffer.state())

    np.testing.assert_array_equal(restored.sample(20)["actions"], buffer.sample(20)["actions"])
    restored.add(transitions(11, 1))
    buffer.add(transitions(11, 1))
    np.testing.assert_array_equal(restored.columns["actions"], buffer.columns["actions"])


def prioritized(td_errors: list[float], alpha: float, seed: int = 0) -> PrioritizedReplayBuffer:
    buffer = PrioritizedReplayBuffer(capacity=len(td_errors), alpha=alpha, eps=1e-9, seed=seed)
    indices = buffer.add(transitions(0, len(td_errors)))
    buffer.update_priorities(indices, np.array(td_errors))
    return buffer


def sample_frequencies(buffer: PrioritizedReplayBuffer, draws: int) -> np.ndarray:
    counts = np.zeros(buffer.capacity)
    for _ in range(draws // 100):
        np.add.at(counts, buffer.sample(100, beta=0.4)["indices"], 1)
    return counts / counts.sum()


def test_sampling_frequency_is_proportional_to_priority_to_the_alpha():
    td_errors = np.array([1.0, 2.0, 3.0, 4.0, 8.0])
    buffer = prioritized(list(td_errors), alpha=0.6)

    frequencies = sample_frequencies(buffer, draws=100_000)

    expected = td_errors**0.6 / (td_errors**0.6).sum()
    # 100k draws: a frequency's standard error is below 0.0016, so 0.006 is about 4 sigma.
    np.testing.assert_allclose(frequencies, expected, atol=0.006)


def test_importance_weights_against_hand_computed_values():
    # alpha 1: P = [1, 2, 4] / 7, N = 3; w_i = (N P_i)^-beta / (N P_min)^-beta = (1 / p_i)^beta.
    buffer = prioritized([1.0, 2.0, 4.0], alpha=1.0)

    batch = buffer.sample(300, beta=0.5)

    expected_by_index = np.array([1.0, 2.0**-0.5, 4.0**-0.5])
    np.testing.assert_allclose(batch["weights"], expected_by_index[batch["indices"]], rtol=1e-6)
    assert batch["weights"].dtype == np.float32
    np.testing.assert_array_equal(batch["actions"], batch["indices"])  # columns match indices


def test_updating_priorities_changes_what_is_sampled():
    buffer = prioritized([1.0, 1.0, 1.0, 1.0], alpha=1.0)
    before = sample_frequencies(buffer, draws=20_000)
    buffer.update_priorities(np.array([2]), np.array([97.0]))  # 97 of a total of 100

    after = sample_frequencies(buffer, draws=20_000)

    np.testing.assert_allclose(before, 0.25, atol=0.02)
    assert after[2] == pytest.approx(0.97, abs=0.01)


def test_new_transitions_get_the_largest_priority_seen():
    buffer = PrioritizedReplayBuffer(capacity=8, alpha=0.5, eps=0.0, seed=0)
    assert buffer.sums.leaves(buffer.add(transitions(0, 2)))[0] == 1.0  # before any update
    buffer.update_priorities(np.array([0, 1]), np.array([-9.0, 0.5]))  # |TD error| counts

    new = buffer.add(transitions(2, 3))

    np.testing.assert_allclose(buffer.sums.leaves(new), 3.0)  # 9 ** 0.5
    np.testing.assert_allclose(buffer.sums.leaves(np.array([0, 1])), [3.0, 0.5**0.5])


def test_stratified_sampling_stays_within_stored_transitions():
    buffer = PrioritizedReplayBuffer(capacity=1000, alpha=0.6, eps=1e-6, seed=0)
    buffer.add(transitions(0, 37))  # 1024 leaves, 37 filled: most of the tree is empty

    indices = np.concatenate([buffer.sample(64, beta=0.4)["indices"] for _ in range(200)])

    assert indices.min() >= 0 and indices.max() < 37
    assert len(np.unique(indices)) == 37


def test_several_minibatches_in_one_pass_are_those_of_as_many_calls():
    def filled():
        buffer = PrioritizedReplayBuffer(capacity=1000, alpha=0.6, eps=1e-6, seed=3)
        buffer.update_priorities(buffer.add(transitions(0, 300)), np.linspace(0.1, 5.0, 300))
        return buffer

    at_once = filled().sample(64, beta=0.4, count=8)
    one_by_one = filled()
    calls = [one_by_one.sample(64, beta=0.4) for _ in range(8)]

    assert set(at_once) == set(calls[0])
    for key, value in at_once.items():
        np.testing.assert_array_equal(value, np.concatenate([call[key] for call in calls]))


def test_tree_totals_after_batch_updates_with_repeated_indices():
    rng = np.random.default_rng(0)
    capacity = 100  # not a power of two: 28 padding leaves
    sums = SegmentTree(capacity, np.add, 0.0)
    mins = SegmentTree(capacity, np.minimum, np.inf)
    values = np.zeros(capacity)
    for _ in range(50):
        indices = rng.integers(0, capacity, 64)
        new = rng.random(64) * 10
        _, last = np.unique(indices[::-1], return_index=True)  # the value written last wins
        values[indices[::-1][last]] = new[::-1][last]
        sums.update(indices, new)
        mins.update(indices, new)
    leaves = sums.leaves(np.arange(capacity))
    np.testing.assert_allclose(leaves, values)
    assert sums.root == pytest.approx(values.sum())
    inner = np.arange(1, sums.num_leaves)
    np.testing.assert_allclose(
        sums.nodes[inner], sums.nodes[2 * inner] + sums.nodes[2 * inner + 1], rtol=1e-12
    )
    assert mins.root == mins.leaves(np.arange(capacity)).min()


def test_prioritized_state_round_trip_keeps_priorities():
    buffer = prioritized([1.0, 5.0, 2.0, 0.5], alpha=0.7, seed=4)
    restored = PrioritizedReplayBuffer(capacity=4, alpha=0.7, eps=1e-9, seed=0)
    restored.load_state(buffer.state())

    assert restored.max_priority == buffer.max_priority
    assert restored.sums.root == pytest.approx(buffer.sums.root)
    assert restored.mins.root == pytest.approx(buffer.mins.root)
    a, b = restored.sample(10, beta=0.4), buffer.sample(10, beta=0.4)
    np.testing.assert_array_equal(a["indices"], b["indices"])
    np.testing.assert_allclose(a["weights"], b["weights"])


def test_a_replay_shard_call_brings_minibatches_each_drawn_over_all_priorities():
    from kuberl_trainer.optimizers.replay_shard import ReplayShard

    shard = ReplayShard(capacity=64, alpha=1.0, eps=1e-9, seed=0)
    shard.buffer.add(transitions(0, 64))  # equal priorities: stratified draws spread evenly

    batch = shard.sample(batch_size=8, beta=0.4, count=3)

    assert {len(column) for column in batch.values()} == {24}
    np.testing.assert_array_equal(batch["obs"][:, 0], batch["indices"])
    for minibatch in np.split(batch["indices"], 3):
        # One draw from each eighth of the buffer, as a single call of 8 would draw, not the
        # thirds of one draw of 24 cut in three.
        np.testing.assert_array_equal(minibatch // 8, np.arange(8))


def image_transitions(start: int, count: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Rows numbered start.. with uint8 frame stacks (kept compressed) whose next stack shares
    three frames with the stack, as Atari's do, and a float column (kept as an array)."""
    frames = rng.integers(0, 4, size=(count + 4, 6, 5), dtype=np.uint8)  # mostly background
    stacks = np.stack([frames[i : i + 4] for i in range(count + 1)])
    ids = np.arange(start, start + count)
    return {
        "obs": stacks[:-1],
        "next_obs": stacks[1:],
        "actions": ids,
        "rewards": ids.astype(np.float32) / 2,
    }


@pytest.mark.parametrize("prioritized", [False, True])
def test_image_columns_are_kept_compressed_and_come_back_exactly(prioritized):
    rng = np.random.default_rng(0)
    buffer = PrioritizedReplayBuffer(10, alpha=0.6, seed=0) if prioritized else ReplayBuffer(10, 0)
    added = [image_transitions(0, 7, rng), image_transitions(7, 6, rng)]  # wraps around
    for batch in added:
        buffer.add(batch)
    assert set(buffer.packed) == {"obs", "next_obs"}
    assert set(buffer.columns) == {"actions", "rewards"}
    by_id = {key: np.concatenate([batch[key] for batch in added]) for key in added[0]}

    sampled = buffer.sample(50, 0.4) if prioritized else buffer.sample(50)
    assert sampled["obs"].dtype == sampled["next_obs"].dtype == np.uint8
    assert sorted(set(sampled["actions"])) <= list(range(3, 13))  # the newest 10
    for key in ("obs", "next_obs", "rewards"):
        np.testing.assert_array_equal(sampled[key], by_id[key][sampled["actions"]])
    raw = sum(by_id[key][0].nbytes for key in ("obs", "next_obs")) * len(buffer)
    assert buffer.nbytes < raw + buffer.columns["actions"].nbytes + buffer.columns["rewards"].nbytes


def test_compressed_state_round_trip_continues_identically():
    rng = np.random.default_rng(1)
    buffer = ReplayBuffer(capacity=8, seed=3)
    buffer.add(image_transitions(0, 11, rng))
    state = buffer.state()
    assert state["packed"]["blocks"].dtype == np.uint8  # plain arrays: a weights_only checkpoint
    restored = ReplayBuffer(capacity=8, seed=99)
    restored.load_state(state)

    expected, got = buffer.sample(20), restored.sample(20)
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key])
    more = image_transitions(11, 3, rng)
    buffer.add(more)
    restored.add(more)
    np.testing.assert_array_equal(restored.sample(30)["obs"], buffer.sample(30)["obs"])


def test_a_state_of_image_arrays_loads_into_compressed_storage():
    """A checkpoint written when images were stored as arrays resumes: they are compressed then."""
    batch = image_transitions(0, 5, np.random.default_rng(2))
    old_state = {
        "columns": batch,
        "next_index": 0,
        "size": 5,
        "rng": ReplayBuffer(5).rng.bit_generator.state,
    }
    buffer = ReplayBuffer(capacity=5, seed=0)
    buffer.load_state(old_state)

    assert set(buffer.packed) == {"obs", "next_obs"}
    sampled = buffer.sample(10)
    np.testing.assert_array_equal(sampled["next_obs"], batch["next_obs"][sampled["actions"]])


def test_an_image_of_another_shape_is_refused_naming_the_column():
    rng = np.random.default_rng(3)
    buffer = ReplayBuffer(capacity=8, seed=0)
    buffer.add(image_transitions(0, 2, rng))
    other = image_transitions(2, 2, rng)
    other["next_obs"] = other["next_obs"][:, :, :3]
    with pytest.raises(ValueError, match=r"next_obs of uint8 \(4, 6, 5\), got uint8 \(4, 3, 5\)"):
        buffer.add(other)
    assert len(buffer) == 2  # nothing of the refused batch was written
    np.testing.assert_array_equal(buffer.columns["actions"][:2], [0, 1])


def test_a_compressed_buffer_goes_through_a_weights_only_checkpoint(tmp_path):
    """state.pt is loaded with torch.load(weights_only=True): the blocks must be plain arrays."""
    buffer = PrioritizedReplayBuffer(capacity=6, alpha=0.6, seed=0)
    buffer.add(image_transitions(0, 9, np.random.default_rng(4)))
    write_state(tmp_path / "state.pt", {"replay_buffer": buffer.state()})
    restored = PrioritizedReplayBuffer(capacity=6, alpha=0.6, seed=0)
    restored.load_state(load_state((tmp_path / "state.pt").read_bytes())["replay_buffer"])

    expected, got = buffer.sample(12, 0.4), restored.sample(12, 0.4)
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key])
