"""Vector environments (issue 23 item 5): `LedgerRecorder` wraps ``SyncVectorEnv`` and
``AsyncVectorEnv`` directly, in every autoreset mode of Gymnasium 1.x (NextStep, SameStep,
Disabled), and records every sub-environment's episodes, whole and exactly, into one batch per
flush; the batch verifies and makes a dataset with one ``--batch``, through the command line.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from trajledger import Ledger
from trajledger.integrations.gymnasium import LedgerRecorder, VectorLedgerRecorder
from trajledger.ledger.artifacts import batch_files, register_environment
from trajledger.ledger.keys import Signer
from trajledger.ledger.rollouts import typed_json
from trajledger.runner.cli import main
from trajledger.verify.dsse import Envelope
from trajledger.verify.statement import Statement

N_ENVS = 3


class Counter(gym.Env[Any, Any]):
    """Sub-environment ``i``: its k-th episode lasts ``2 + (i + k) % 3`` steps; the observation
    at step t is ``[i, k, t]`` (float64) beside a Discrete step count, so every recorded value
    says where it came from."""

    def __init__(self, i: int) -> None:
        self.i = i
        self.k = -1
        self.observation_space = gym.spaces.Dict({
            "where": gym.spaces.Box(-1, 1e9, (3,), np.float64),
            "t": gym.spaces.Discrete(10),
        })  # fmt: skip
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self) -> dict[str, Any]:
        return {"where": np.array([self.i, self.k, self.t], np.float64), "t": self.t}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.k += 1
        self.t = 0
        return self._obs(), {"env": self.i, "k": self.k}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        end = self.t == 2 + (self.i + self.k) % 3
        return self._obs(), float(self.t), end and self.i != 1, end and self.i == 1, {"t": self.t}


@pytest.fixture
def world(tmp_path: Path) -> tuple[Ledger, Signer, Path]:
    home = tmp_path / "home"
    Ledger.init(home, origin="test/vector")
    ledger = Ledger.open(home)
    signer = ledger.keys.create("producer", encrypt=False)
    register_environment(ledger, "counter", "1", signer)
    return ledger, signer, home


def make(kind: str, mode: AutoresetMode) -> gym.vector.VectorEnv[Any, Any, Any]:
    fns = [lambda i=i: Counter(i) for i in range(N_ENVS)]
    if kind == "sync":
        return SyncVectorEnv(fns, autoreset_mode=mode)
    return AsyncVectorEnv(fns, autoreset_mode=mode, context="fork")


def play(envs: Any, mode: AutoresetMode, steps: int) -> None:
    """Step all sub-environments ``steps`` times (Disabled: reset the finished ones)."""
    envs.reset(seed=7)
    for _ in range(steps):
        _, _, terminated, truncated, _ = envs.step(np.zeros(N_ENVS, dtype=np.int64))
        done = terminated | truncated
        if mode == AutoresetMode.DISABLED and done.any():
            envs.reset(options={"reset_mask": done})


def recorded(ledger: Ledger, digest: str) -> tuple[Any, Any]:
    files = batch_files(ledger, digest)
    steps = pq.read_table(ledger.store.path_of(files["steps.parquet"]))
    eps = pq.read_table(ledger.store.path_of(files["episodes.parquet"]))
    return steps, eps


def check_episodes(ledger: Ledger, batches: list[str]) -> set[tuple[int, int]]:
    """Every recorded episode is whole and exact; returns the (sub-env, episode) pairs."""
    seen: set[tuple[int, int]] = set()
    for digest in batches:
        steps, eps = recorded(ledger, digest)
        by_id: dict[str, list[dict[str, Any]]] = {}
        for row in steps.to_pylist():
            by_id.setdefault(row["episode_id"], []).append(row)
        for ep in eps.to_pylist():
            rows = by_id[ep["episode_id"]]
            i, k = int(rows[0]["obs"]["where"][0]), int(rows[0]["obs"]["where"][1])
            length = 2 + (i + k) % 3
            assert [r["obs"]["where"] for r in rows] == [[i, k, t] for t in range(length)]
            assert [r["obs"]["t"] for r in rows] == [[t] for t in range(length)]
            assert [r["reward"] for r in rows] == [float(t + 1) for t in range(length)]
            assert [typed_json.loads(r["info"]) for r in rows] == [
                {"t": np.int64(t + 1)} for t in range(length)
            ]
            assert rows[-1]["terminated"] == (i != 1) and rows[-1]["truncated"] == (i == 1)
            assert ep["final_obs"]["where"] == [i, k, length] and ep["num_steps"] == length
            reset = typed_json.loads(ep["reset_info"])
            assert (int(reset["env"]), int(reset["k"])) == (i, k)
            # reset(seed=7) seeds sub-environment i with 7 + i; automatic resets with none
            assert ep["seed"] == (7 + i if k == 0 else None)
            assert (i, k) not in seen
            seen.add((i, k))
    return seen


MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("mode", MODES, ids=[m.value for m in MODES])
def test_every_sub_environment_recorded_exactly(
    world: tuple[Ledger, Signer, Path], kind: str, mode: AutoresetMode
) -> None:
    ledger, signer, _ = world
    envs = LedgerRecorder(make(kind, mode), ledger, env_ref="counter@1", policy="p",
                          signer=signer, every=4, episode_prefix="v")  # fmt: skip
    assert isinstance(envs, VectorLedgerRecorder)
    play(envs, mode, 12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        envs.close()
    # every sub-environment finished episodes; each batch holds every=4 of them, mixed
    seen = check_episodes(ledger, envs.batches)
    assert {i for i, _ in seen} == set(range(N_ENVS))
    assert [r.stats["num_episodes"] for r in envs.results[:-1]] == [4] * (len(envs.results) - 1)
    # what every sub-environment finished was recorded; the unfinished ones were dropped
    finished = {(i, k) for i in range(N_ENVS) for k in range(_episodes_done(i, mode))}
    assert seen == finished
    assert envs.discarded_steps == sum(_steps_left(i, mode) for i in range(N_ENVS))
    assert len(caught) == sum(1 for i in range(N_ENVS) if _steps_left(i, mode))


def _schedule(i: int, mode: AutoresetMode) -> list[tuple[int, int]]:
    """(episode k, step t) of sub-environment i at each of the 12 steps; (-1, -1) for a step
    NextStep spends resetting it."""
    out: list[tuple[int, int]] = []
    k, t = 0, 0
    while len(out) < 12:
        t += 1
        out.append((k, t))
        if t == 2 + (i + k) % 3:
            k, t = k + 1, 0
            if mode == AutoresetMode.NEXT_STEP and len(out) < 12:
                out.append((-1, -1))
    return out[:12]


def _episodes_done(i: int, mode: AutoresetMode) -> int:
    return sum(1 for k, t in _schedule(i, mode) if k >= 0 and t == 2 + (i + k) % 3)


def _steps_left(i: int, mode: AutoresetMode) -> int:
    k, t = _schedule(i, mode)[-1]
    return 0 if k < 0 or t == 2 + (i + k) % 3 else t


def test_one_batch_verifies_and_makes_a_dataset(
    world: tuple[Ledger, Signer, Path], tmp_path: Path
) -> None:
    ledger, signer, home = world
    envs = LedgerRecorder(make("sync", AutoresetMode.NEXT_STEP), ledger, env_ref="counter@1",
                          policy="p", signer=signer, every=100)  # fmt: skip
    play(envs, AutoresetMode.NEXT_STEP, 9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        envs.close()
    (digest,) = envs.batches
    assert envs.results[0].stats["num_episodes"] == len(check_episodes(ledger, [digest]))
    (home / "policy.toml").write_text(
        'name = "vector"\nserial = 1\n[roles.producer]\nkeys = ["keys/producer.pub"]\n'
        f'[roles.log]\nvkeys = ["{ledger.log.vkey}"]\n'
    )
    runner = CliRunner()
    r = runner.invoke(main, ["--ledger", str(home), "verify", digest,
                             "--policy", str(home / "policy.toml")])  # fmt: skip
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["--ledger", str(home), "dataset", "create", "counter-train",
                             "--version", "1", "--split", "train", "--batch", digest,
                             "--key", "producer"])  # fmt: skip
    assert r.exit_code == 0, r.output


def test_step_before_reset_and_old_gymnasium_refused(world: tuple[Ledger, Signer, Path]) -> None:
    ledger, signer, _ = world
    envs = LedgerRecorder(make("sync", AutoresetMode.NEXT_STEP), ledger, env_ref="counter@1",
                          policy="p", signer=signer)  # fmt: skip
    with pytest.raises(gym.error.ResetNeeded, match="call reset\\(\\) first"):
        envs.step(np.zeros(N_ENVS, dtype=np.int64))
    envs.close()
    odd = make("sync", AutoresetMode.NEXT_STEP)
    odd.metadata = {**odd.metadata, "autoreset_mode": "Sometimes"}
    with pytest.raises(ValueError, match="autoreset mode 'Sometimes' is unknown"):
        LedgerRecorder(odd, ledger, env_ref="counter@1", policy="p", signer=signer)
    odd.close()


def test_make_vec_spec_is_the_sub_environments(world: tuple[Ledger, Signer, Path]) -> None:
    ledger, signer, _ = world
    register_environment(ledger, "cartpole", "1", signer, gymnasium_id="CartPole-v1")
    envs = LedgerRecorder(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"),
                          ledger, env_ref="cartpole@1", policy="p", signer=signer, every=2)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    while not envs.batches:
        envs.step(envs.action_space.sample())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the episode in progress is dropped
        envs.close()
    assert envs.results[0].stats["num_episodes"] == 2
    envelope = Envelope.from_bytes(ledger.store.get(envs.results[0].recorded.envelope_digest))
    spec = Statement.from_bytes(envelope.payload).predicate["envSpec"]
    assert spec["id"] == "CartPole-v1" and "num_envs" not in spec["kwargs"]
