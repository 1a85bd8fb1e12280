"""The Gymnasium recorder (trajledger/integrations/gymnasium.py) on CartPole-v1 (discrete actions)
and Pendulum-v1 (continuous actions): what is recorded validates and is exactly what the environment
produced; batches are written every N episodes and on flush / close.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajledger.integrations.gymnasium import GENERATOR, LedgerRecorder
from trajledger.ledger.artifacts import batch_files, register_environment, register_evaluator
from trajledger.ledger.home import Ledger
from trajledger.ledger.keys import Signer
from trajledger.ledger.validate_files import validate_files
from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import PolicyError
from trajledger.verify.statement import Statement

CLOCK_START = 1_700_000_000_000_000


@pytest.fixture
def ledger(home: Path) -> Ledger:
    return Ledger.open(home)


@pytest.fixture
def alice(ledger: Ledger) -> Signer:
    signer = ledger.keys.create("alice", encrypt=False)
    register_environment(ledger, "cartpole", "1", signer, gymnasium_id="CartPole-v1")
    register_environment(ledger, "pendulum", "1", signer, gymnasium_id="Pendulum-v1")
    register_evaluator(ledger, "env-reward", "1", "deterministic", signer)
    return signer


def ticking() -> Iterator[int]:
    t = CLOCK_START
    while True:
        yield t
        t += 1000


@dataclass
class Played:
    """What the environment produced, observed outside the recorder."""

    obs: list[list[float]] = field(default_factory=list)
    actions: list[list[float]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminated: list[bool] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    episode_ids: list[str] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)


def play(env: gym.Env[Any, Any], seeds: list[int], played: Played, prefix: str,
         first: int = 0, max_steps: int | None = None) -> None:  # fmt: skip
    """Play one episode per seed with seeded random actions, noting every transition."""
    for n, seed in enumerate(seeds, first):
        obs, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        for step in range(max_steps or 10**9):
            action = env.action_space.sample()
            next_obs, reward, terminated, truncated, _ = env.step(action)
            played.obs.append(np.asarray(obs, dtype=np.float32).ravel().tolist())
            played.actions.append(np.asarray(action, dtype=np.float32).reshape(-1).tolist())
            played.rewards.append(float(reward))
            played.terminated.append(bool(terminated))
            played.truncated.append(bool(truncated))
            played.episode_ids.append(f"{prefix}-{n}")
            played.steps.append(step)
            obs = next_obs
            if terminated or truncated:
                break


def stored(ledger: Ledger, batch: str, name: str) -> pa.Table:
    return pq.read_table(io.BytesIO(ledger.store.get_verified(batch_files(ledger, batch)[name])))


def steps_of(ledger: Ledger, batches: list[str]) -> pa.Table:
    return pa.concat_tables([stored(ledger, b, "steps.parquet") for b in batches])


def predicate(ledger: Ledger, recorder: LedgerRecorder, n: int) -> dict[str, Any]:
    envelope = ledger.store.get(recorder.results[n].recorded.envelope_digest)
    return Statement.from_bytes(Envelope.from_bytes(envelope).payload).predicate


def test_cartpole_recorded_as_played(ledger: Ledger, alice: Signer, tmp_path: Path) -> None:
    clock = ticking()
    env = LedgerRecorder(
        gym.make("CartPole-v1"), ledger, env_ref="cartpole@1", policy="random", signer=alice,
        every=3, evaluator="env-reward@1", episode_prefix="run", licence="CC0-1.0",
        clock=lambda: next(clock),
    )  # fmt: skip
    played = Played()
    seeds = [11, 12, 13, 14, 15, 16, 17]
    play(env, seeds, played, "run")
    # Two batches of three were written during play; the seventh episode waits for close().
    assert len(env.batches) == 2 and env.pending_episodes == 1
    env.close()
    assert len(env.batches) == 3 and env.pending_episodes == 0
    assert [r.stats["num_episodes"] for r in env.results] == [3, 3, 1]

    steps = steps_of(ledger, env.batches)
    assert steps.column("episode_id").to_pylist() == played.episode_ids
    assert steps.column("step").to_pylist() == played.steps
    assert steps.column("obs").to_pylist() == played.obs
    assert steps.column("action").to_pylist() == played.actions
    assert steps.column("reward").to_pylist() == played.rewards
    assert steps.column("terminated").to_pylist() == played.terminated
    assert steps.column("truncated").to_pylist() == played.truncated
    stamps = steps.column("timestamp").cast(pa.int64()).to_pylist()
    assert stamps == [CLOCK_START + 1000 * i for i in range(len(stamps))]

    episodes = pa.concat_tables([stored(ledger, b, "episodes.parquet") for b in env.batches])
    assert episodes.column("seed").to_pylist() == seeds
    assert episodes.column("policy_version").to_pylist() == ["random"] * 7
    assert set(episodes.column("env_version").to_pylist()) == {env.results[0].environment.digest}
    p = predicate(ledger, env, 0)
    assert (p["generator"], p["licence"], p["evaluator"]["name"]) == (
        GENERATOR, "CC0-1.0", "env-reward"
    )  # fmt: skip
    assert p["seeds"] == ["11", "12", "13"]
    names = [
        Statement.from_bytes(
            Envelope.from_bytes(ledger.store.get(r.recorded.envelope_digest)).payload
        )
        .subjects[0]
        .name
        for r in env.results
    ]
    assert names == ["gym-CartPole-v1-run-1", "gym-CartPole-v1-run-2", "gym-CartPole-v1-run-3"]

    # What was recorded validates as it stands in the store.
    for n, b in enumerate(env.batches):
        path = tmp_path / f"batch-{n}.parquet"
        path.write_bytes(ledger.store.get_verified(batch_files(ledger, b)["steps.parquet"]))
        report = validate_files([path])
        assert report.problems == () and report.num_episodes == (3 if n < 2 else 1)


def test_pendulum_continuous_actions(ledger: Ledger, alice: Signer) -> None:
    env = LedgerRecorder(
        gym.make("Pendulum-v1", max_episode_steps=30), ledger, env_ref="pendulum@1",
        policy="random", signer=alice, every=2, episode_prefix="pd",
    )  # fmt: skip
    played = Played()
    play(env, [0, 1], played, "pd")
    assert env.pending_episodes == 0 and len(env.batches) == 1
    steps = steps_of(ledger, env.batches)
    assert steps.num_rows == 60
    assert steps.column("action").to_pylist() == played.actions
    assert all(len(a) == 1 and -2.0 <= a[0] <= 2.0 for a in played.actions)
    assert steps.column("obs").to_pylist() == played.obs
    assert steps.column("reward").to_pylist() == played.rewards
    assert steps.column("truncated").to_pylist() == [s == 29 for s in range(30)] * 2
    assert env.results[0].stats["seeds"] == ["0", "1"]
    env.close()
    assert len(env.batches) == 1  # nothing was pending


def test_flush_and_unfinished_episodes(ledger: Ledger, alice: Signer) -> None:
    env = LedgerRecorder(
        gym.make("CartPole-v1"), ledger, env_ref="cartpole@1", policy="random", signer=alice,
        every=100, episode_prefix="f",
    )  # fmt: skip
    assert env.flush() is None
    play(env, [1], Played(), "f")
    digest = env.flush()
    assert digest is not None and env.batches == [digest]
    assert env.flush() is None  # nothing new

    env.reset(seed=2)
    env.step(0)
    env.step(1)
    with pytest.warns(
        RuntimeWarning,
        match=r"^LedgerRecorder: episode f-1 discarded after 2 step\(s\): reset\(\) was called "
        "before it terminated or was truncated$",
    ):
        env.reset(seed=3)
    env.step(0)
    with pytest.warns(RuntimeWarning, match=r"episode f-2 discarded after 1 step\(s\): close\(\)"):
        env.close()
    assert env.discarded_steps == 3 and env.batches == [digest]
    env.close()  # a second close is harmless


def test_step_needs_an_episode(ledger: Ledger, alice: Signer) -> None:
    env = LedgerRecorder(
        gym.make("CartPole-v1"), ledger, env_ref="cartpole@1", policy="p", signer=alice, every=5
    )
    with pytest.raises(gym.error.ResetNeeded, match=r"step\(\) without an episode in progress"):
        env.step(0)
    play(env, [0], Played(), "x")
    with pytest.raises(gym.error.ResetNeeded, match=r"call reset\(\) first$"):
        env.step(0)  # the episode ended


@pytest.mark.parametrize("every", [0, -1, True, 2.5])
def test_every_must_be_a_positive_integer(ledger: Ledger, alice: Signer, every: Any) -> None:
    with pytest.raises(ValueError, match=rf"^LedgerRecorder: every = {every!r}, want a whole "):
        LedgerRecorder(
            gym.make("CartPole-v1"), ledger, env_ref="cartpole@1", policy="p", signer=alice,
            every=every,
        )  # fmt: skip


def test_unregistered_references_refused_at_once(ledger: Ledger, alice: Signer) -> None:
    with pytest.raises(PolicyError, match=r"^environment cartpole@2: not registered"):
        LedgerRecorder(
            gym.make("CartPole-v1"), ledger, env_ref="cartpole@2", policy="p", signer=alice
        )
    with pytest.raises(PolicyError, match=r"^evaluator judge@1: not registered"):
        LedgerRecorder(
            gym.make("CartPole-v1"), ledger, env_ref="cartpole@1", policy="p", signer=alice,
            evaluator="judge@1",
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"^LedgerRecorder: policy is empty"):
        LedgerRecorder(
            gym.make("CartPole-v1"), ledger, env_ref="cartpole@1", policy="", signer=alice
        )


def test_failed_flush_keeps_the_episodes(
    ledger: Ledger, alice: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trajledger.ledger.artifacts as artifacts

    env = LedgerRecorder(
        gym.make("CartPole-v1"), ledger, env_ref="cartpole@1", policy="p", signer=alice, every=1
    )

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise PolicyError("environment cartpole@1: not registered (simulated)")

    monkeypatch.setattr(artifacts, "record_batch", broken)
    with pytest.raises(PolicyError, match=r"\(simulated\)$"):
        play(env, [0], Played(), "x")
    assert env.pending_episodes == 1 and env.batches == []
    with pytest.raises(PolicyError, match=r"\(simulated\)$"):
        env.close()  # the environment is closed all the same
    assert env.pending_episodes == 1
    monkeypatch.undo()
    assert env.flush() is not None and env.pending_episodes == 0
    assert env.results[0].stats["num_episodes"] == 1
    env.close()  # already closed: nothing to do
