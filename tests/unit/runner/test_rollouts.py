"""Rollouts from a policy in Gymnasium: table layout, seeding, actions, errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from trajledger.ledger.rollouts.schema import EPISODE_SCHEMA, STEP_SCHEMA
from trajledger.ledger.rollouts.validate import validate_episodes, validate_steps
from trajledger.runner.rollouts import RolloutError, episode_id, run_policy
from trajledger.runner.trainers import PolicyMismatchError, TrainingData, load_policy
from trajledger.runner.trainers.bc import BCTrainer


def fixed_clock() -> int:
    return 1_700_000_000_000_000


class Constant:
    """A policy that always answers ``action``."""

    def __init__(self, action: Any) -> None:
        self.action = action
        self.seen: list[npt.NDArray[Any]] = []

    def act(self, obs: npt.NDArray[Any]) -> Any:
        self.seen.append(obs)
        return self.action


def check_valid(result: Any) -> None:
    assert result.steps.schema.equals(STEP_SCHEMA, check_metadata=True)
    assert result.episodes.schema.equals(EPISODE_SCHEMA, check_metadata=True)
    report = validate_steps(result.steps)
    assert report.ok, report
    report = validate_episodes(result.episodes, steps=result.steps)
    assert report.ok, report


def test_cartpole_random_tables() -> None:
    result = run_policy(None, "CartPole-v1", 3, 11, policy_version="random")
    check_valid(result)
    steps, episodes = result.steps.to_pydict(), result.episodes.to_pylist()
    assert result.seeds == (11, 12, 13)
    assert [e["episode_id"] for e in episodes] == [f"random/CartPole-v1/{s}" for s in (11, 12, 13)]
    assert episode_id("random", "CartPole-v1", 11) == "random/CartPole-v1/11"
    assert [e["seed"] for e in episodes] == [11, 12, 13]
    assert {e["policy_version"] for e in episodes} == {"random"}
    assert [e["return"] for e in episodes] == list(result.returns)
    assert sum(e["num_steps"] for e in episodes) == len(steps["step"])
    assert result.mean_return == pytest.approx(sum(result.returns) / 3)
    assert {tuple(a) for a in steps["action"]} == {(0.0,), (1.0,)}
    assert {len(o) for o in steps["obs"]} == {4}
    # Every CartPole step pays 1 and every random episode falls over well before step 500.
    assert set(steps["reward"]) == {1.0}
    assert sum(steps["is_first"]) == sum(steps["is_last"]) == sum(steps["terminated"]) == 3
    assert not any(steps["truncated"])
    assert {e["termination_reason"] for e in episodes} == {"terminated"}
    assert steps["content"] == [None] * len(steps["step"])


def test_continuous_env_tables_and_truncation() -> None:
    result = run_policy(None, "Pendulum-v1", 2, 0, max_steps=25, policy_version="random")
    check_valid(result)
    actions = np.array(result.steps["action"].to_pylist())
    assert actions.shape == (50, 1)
    assert (np.abs(actions) <= 2.0).all() and len(np.unique(actions)) == 50
    assert {len(o) for o in result.steps["obs"].to_pylist()} == {3}
    assert result.episodes["num_steps"].to_pylist() == [25, 25]
    assert result.episodes["termination_reason"].to_pylist() == ["truncated"] * 2
    assert result.steps["truncated"].to_pylist() == ([False] * 24 + [True]) * 2


@pytest.mark.parametrize(("env_id", "max_steps"), [("CartPole-v1", None), ("Pendulum-v1", 30)])
def test_same_seed_same_table(env_id: str, max_steps: int | None) -> None:
    def run(episodes: int, seed: int) -> Any:
        return run_policy(
            None, env_id, episodes, seed, max_steps=max_steps, policy_version="r", clock=fixed_clock
        )

    a, b = run(3, 5), run(3, 5)
    assert a.steps.equals(b.steps) and a.episodes.equals(b.episodes)
    assert not run(3, 6).steps.equals(a.steps)
    # An episode depends on its own seed only, not on how many came before it.
    later = run(2, 6)
    first_of_later = later.steps.filter(pc.equal(later.steps["episode_id"], f"r/{env_id}/6"))
    same_in_a = a.steps.filter(pc.equal(a.steps["episode_id"], f"r/{env_id}/6"))
    assert first_of_later.equals(same_in_a)


def test_timestamps_come_from_the_clock() -> None:
    result = run_policy(None, "CartPole-v1", 1, 0, policy_version="r", clock=fixed_clock)
    stamps = result.steps["timestamp"].cast(pa.int64()).to_pylist()
    assert set(stamps) == {fixed_clock()}


def test_policy_acts_on_the_recorded_observation() -> None:
    policy = Constant(1)
    result = run_policy(policy, "CartPole-v1", 2, 0, policy_version="sha256:abc")
    assert result.steps["action"].to_pylist() == [[1.0]] * len(result.steps)
    recorded = np.array(result.steps["obs"].to_pylist(), dtype=np.float32)
    np.testing.assert_array_equal(np.array(policy.seen), recorded)
    assert policy.seen[0].dtype == np.float32
    assert result.episodes["episode_id"][0].as_py() == "sha256:abc/CartPole-v1/0"


def test_discrete_action_forms() -> None:
    for action in (np.int64(0), np.array([0.0], np.float32), 0.0):
        result = run_policy(Constant(action), "CartPole-v1", 1, 0, policy_version="p")
        assert set(map(tuple, result.steps["action"].to_pylist())) == {(0.0,)}


def test_continuous_actions_are_clipped_to_the_space() -> None:
    result = run_policy(
        Constant(np.array([10.0])), "Pendulum-v1", 1, 0, max_steps=5, policy_version="p"
    )
    assert result.steps["action"].to_pylist() == [[2.0]] * 5


@pytest.mark.parametrize(
    ("env_id", "action", "message"),
    [
        ("CartPole-v1", 2, r"policy action 2 is not an action of Discrete\(2\)"),
        ("CartPole-v1", 0.5, r"policy action 0.5 is not an action of Discrete\(2\)"),
        ("CartPole-v1", np.array([0, 1]), "is not one integer for Discrete"),
        ("CartPole-v1", True, "is not one integer for Discrete"),
        ("CartPole-v1", float("nan"), "is not one integer for Discrete"),
        ("Pendulum-v1", 1, "policy returned the integer 1 for Box"),
        ("Pendulum-v1", np.zeros(2), "policy action has 2 elements .* want 1 finite"),
        ("Pendulum-v1", np.array([np.nan]), r"\(finite: False\), want 1 finite"),
    ],
)
def test_invalid_policy_actions_are_refused(env_id: str, action: Any, message: str) -> None:
    with pytest.raises(PolicyMismatchError, match=message):
        run_policy(Constant(action), env_id, 1, 0, policy_version="p")


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(RolloutError, match="environment 'NoSuchEnv-v0' cannot be made"):
        run_policy(None, "NoSuchEnv-v0", 1, 0, policy_version="r")
    with pytest.raises(RolloutError, match="episodes = 0, want >= 1"):
        run_policy(None, "CartPole-v1", 0, 0, policy_version="r")
    with pytest.raises(RolloutError, match="seed = -1, want >= 0"):
        run_policy(None, "CartPole-v1", 1, -1, policy_version="r")
    with pytest.raises(RolloutError, match="max_steps = 0, want >= 1"):
        run_policy(None, "CartPole-v1", 1, 0, max_steps=0, policy_version="r")


def test_continuous_policy_round_trip_through_bc() -> None:
    data = run_policy(None, "Pendulum-v1", 6, 0, max_steps=40, policy_version="random")
    result = BCTrainer().train(TrainingData(data.steps, data.episodes), {"epochs": 3}, 0)
    policy = load_policy(result.files)
    rollout = run_policy(policy, "Pendulum-v1", 2, 100, max_steps=10, policy_version="ckpt")
    check_valid(rollout)
    actions: npt.NDArray[np.float64] = np.array(rollout.steps["action"].to_pylist())
    assert actions.shape == (20, 1) and (np.abs(actions) <= 2.0).all()
