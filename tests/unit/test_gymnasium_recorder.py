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
import testkit

from trajledger import Ledger
from trajledger.integrations.gymnasium import GENERATOR, LedgerRecorder
from trajledger.ledger.artifacts import batch_files, register_environment, register_evaluator
from trajledger.ledger.catalog import RefError
from trajledger.ledger.keys import Signer
from trajledger.ledger.rollouts.space_values import column_values
from trajledger.ledger.validate_files import validate_files
from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import PolicyError
from trajledger.verify.statement import Statement

CLOCK_START = 1_700_000_000_000_000


def build_alice(home: Path) -> None:
    """A ledger with key alice, environments cartpole@1 and pendulum@1, evaluator env-reward@1."""
    ledger = Ledger.init(home, origin="test/ledger")
    signer = ledger.keys.create("alice", encrypt=False)
    register_environment(ledger, "cartpole", "1", signer, gymnasium_id="CartPole-v1")
    register_environment(ledger, "pendulum", "1", signer, gymnasium_id="Pendulum-v1")
    register_evaluator(ledger, "env-reward", "1", "deterministic", signer)


@pytest.fixture(scope="module")
def alice_template(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[None]:
    """`build_alice`, once."""
    return testkit.build_template(tmp_path_factory.mktemp("gym-template"), build_alice)


@pytest.fixture
def ledger(alice_template: testkit.Template[None], tmp_path: Path) -> Ledger:
    return Ledger.open(testkit.copy_template(alice_template, tmp_path / "home"))


@pytest.fixture
def alice(ledger: Ledger) -> Signer:
    return ledger.keys.signer("alice")


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
    with pytest.raises(RefError, match=r"^cartpole@2: environment cartpole has no version '2'"):
        LedgerRecorder(
            gym.make("CartPole-v1"), ledger, env_ref="cartpole@2", policy="p", signer=alice
        )
    with pytest.raises(RefError, match=r"^evaluator judge@1: not registered"):
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


# --- Schema v3 fidelity: dtypes, shapes, images, Dict/Tuple spaces, final obs, info ----------


class FidelityEnv(gym.Env[Any, Any]):
    """A 512x512x3 uint8 camera and a float64 position in a Dict; Tuple actions; rich infos."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Dict(
            {
                "cam": gym.spaces.Box(0, 255, (512, 512, 3), np.uint8),
                "pos": gym.spaces.Box(-np.inf, np.inf, (2,), np.float64),
            }
        )
        self.action_space = gym.spaces.Tuple(
            (gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
        )
        self._t = 0

    def _obs(self) -> dict[str, Any]:
        return {
            "cam": np.full((512, 512, 3), self._t, np.uint8),
            "pos": np.array([1e-300 * self._t, 0.1 + self._t], np.float64),
        }

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {"origin": np.array([0.5, 0.25], np.float32)}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._t += 1
        info = {"t": self._t, "hit": (True, np.int16(self._t)), "nan": float("nan")}
        return self._obs(), 1.0, self._t >= 2, False, info


class ImageEnv(gym.Env[Any, Any]):
    """An image observation space as it stands (not in a Dict): kept as uint8 [H, W, C]."""

    observation_space = gym.spaces.Box(0, 255, (512, 512, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros((512, 512, 3), np.uint8), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return np.full((512, 512, 3), 7, np.uint8), 0.5, True, False, {}


def test_image_observations_keep_dtype_and_shape(ledger: Ledger, alice: Signer) -> None:
    """A 512x512x3 frame was refused by v1 (over 1 MiB as float32): now uint8, [512, 512, 3]."""
    env = LedgerRecorder(ImageEnv(), ledger, env_ref="cartpole@1", policy="p", signer=alice,
                         every=1, episode_prefix="img")  # fmt: skip
    env.reset(seed=1)
    env.step(0)
    steps = stored(ledger, env.batches[0], "steps.parquet")
    field = steps.schema.field("obs")
    assert field.type == pa.list_(pa.uint8()) and field.metadata == {
        b"trajledger.shape": b"[512, 512, 3]"
    }
    assert steps.schema.field("action").type == pa.list_(pa.int64())
    eps = stored(ledger, env.batches[0], "episodes.parquet")
    final = np.asarray(eps["final_obs"].combine_chunks().values).reshape(512, 512, 3)
    assert (final == 7).all()


def test_dict_tuple_spaces_float64_final_obs_and_info(ledger: Ledger, alice: Signer) -> None:
    from trajledger.ledger.rollouts import typed_json
    from trajledger.ledger.rollouts.spaces import space_from_json

    inner = FidelityEnv()
    env = LedgerRecorder(inner, ledger, env_ref="cartpole@1", policy="p", signer=alice,
                         every=1, episode_prefix="fid")  # fmt: skip
    env.reset(seed=3)
    actions = [(1, np.array([0.5, -0.5], np.float32)), (2, np.array([0.25, 1.0], np.float32))]
    for a in actions:
        env.step(a)
    p = predicate(ledger, env, 0)
    obs_space = space_from_json(p["observationSpace"])
    act_space = space_from_json(p["actionSpace"])
    assert obs_space == inner.observation_space and act_space == inner.action_space
    steps = stored(ledger, env.batches[0], "steps.parquet")
    # Rollout schema v3: Dict and Tuple values are structs, each member of its own dtype.
    obs = column_values(steps["obs"].combine_chunks(), steps.schema.field("obs"))
    assert obs["pos"].dtype == np.float64 and obs["cam"].dtype == np.uint8
    assert obs["pos"][1].tolist() == [1e-300, 1.1] and (obs["cam"][1] == 1).all()
    assert obs_space.contains({k: v[1] for k, v in obs.items()})
    acts = column_values(steps["action"].combine_chunks(), steps.schema.field("action"))
    assert isinstance(acts, tuple) and acts[0].tolist() == [1, 2] and acts[0].dtype == np.int64
    assert acts[1][1].tolist() == [0.25, 1.0] and acts[1].dtype == np.float32
    info = typed_json.loads(steps["info"][0].as_py())
    assert info["t"] == 1 and info["hit"][1].dtype == np.int16 and np.isnan(info["nan"])
    eps = stored(ledger, env.batches[0], "episodes.parquet")
    final = column_values(eps["final_obs"].combine_chunks(), eps.schema.field("final_obs"))
    assert final["pos"][0].tolist() == [2e-300, 2.1]
    assert typed_json.loads(eps["reset_info"][0].as_py())["origin"].dtype == np.float32


def test_registered_spaces_must_match(ledger: Ledger, alice: Signer) -> None:
    from trajledger.ledger.artifacts import environment_spaces

    # The spaces alone (no Gymnasium id: an environment of one's own with CartPole's spaces).
    register_environment(ledger, "cp-spaces", "1", alice,
                         **environment_spaces(gymnasium_id="CartPole-v1"))  # fmt: skip
    LedgerRecorder(gym.make("CartPole-v1"), ledger, env_ref="cp-spaces@1", policy="p",
                   signer=alice)  # fmt: skip
    with pytest.raises(ValueError, match="observationSpace differs from the one recorded"):
        LedgerRecorder(gym.make("Pendulum-v1"), ledger, env_ref="cp-spaces@1", policy="p",
                       signer=alice)  # fmt: skip


def test_the_registered_gymnasium_id_must_match(ledger: Ledger, alice: Signer) -> None:
    """Another Gymnasium environment than the registered one is refused at once (issue 23's
    first hour: Pendulum wrapped as cartpole@1 was recorded under CartPole's name), for one
    environment and a vector environment alike."""
    register_environment(ledger, "cp-id", "1", alice, gymnasium_id="CartPole-v1")
    want = (r"^LedgerRecorder: the environment is Pendulum-v1, but cp-id@1 is registered for "
            r"CartPole-v1: wrap CartPole-v1, or register Pendulum-v1 as an environment of its "
            r"own \(trajledger env register NAME --version V --gym-id Pendulum-v1\)$")
    for env in (gym.make("Pendulum-v1"), gym.make_vec("Pendulum-v1", num_envs=2)):
        with pytest.raises(ValueError, match=want):
            LedgerRecorder(env, ledger, env_ref="cp-id@1", policy="p", signer=alice)
        env.close()
    LedgerRecorder(gym.make("CartPole-v1"), ledger, env_ref="cp-id@1", policy="p",
                   signer=alice).close()  # fmt: skip


def test_info_that_cannot_be_kept_is_refused(ledger: Ledger, alice: Signer) -> None:
    class Odd(gym.Wrapper[Any, Any, Any, Any]):
        def step(self, action: Any) -> Any:
            obs, r, te, tr, _ = self.env.step(action)
            return obs, r, te, tr, {"obj": object()}

    env = LedgerRecorder(Odd(gym.make("CartPole-v1")), ledger, env_ref="cartpole@1",
                         policy="p", signer=alice)  # fmt: skip
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"info \$\.obj: a object cannot be kept losslessly"):
        env.step(0)
    assert env.discarded_steps == 1
    with pytest.raises(gym.error.ResetNeeded):
        env.step(0)


# --- Hostile environments: every value is checked when it arrives (review rev11) -------------


class CounterEnv(gym.Env[Any, Any]):
    """Observation ``[t]`` at step t of an episode of ``length`` steps (2 + the reset seed), so
    a recorded episode shows whether any of its transitions is missing; ``hostile`` replaces
    what step ``at`` of an episode returns (reward, flags or observation)."""

    observation_space = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, hostile: dict[str, Any] | None = None, at: int = 2) -> None:
        self.hostile, self.at, self.t, self.length, self.steps = hostile or {}, at, 0, 2, 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t, self.length = 0, 2 + (seed or 0)
        return np.array([0.0], np.float32), {}

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        self.t += 1
        self.steps += 1
        out = {"obs": np.array([self.t], np.float32), "reward": 1.0,
               "terminated": self.t >= self.length, "truncated": False}  # fmt: skip
        if self.t == self.at:
            out.update(self.hostile)
        return out["obs"], out["reward"], out["terminated"], out["truncated"], out.get("info", {})


def counted_episodes(ledger: Ledger, batches: list[str]) -> dict[str, tuple[list[float], float]]:
    """Each recorded episode's observations and final observation; each must be whole."""
    steps = steps_of(ledger, batches)
    eps = pa.concat_tables([stored(ledger, b, "episodes.parquet") for b in batches])
    out: dict[str, tuple[list[float], float]] = {}
    finals = dict(zip(eps["episode_id"].to_pylist(), eps["final_obs"].to_pylist(), strict=True))
    for eid in finals:
        rows = [i for i, e in enumerate(steps["episode_id"].to_pylist()) if e == eid]
        obs = [steps["obs"][i].as_py()[0] for i in rows]
        assert obs == [float(t) for t in range(len(obs))], f"{eid}: a transition is missing"
        assert finals[eid] == [float(len(obs))]
        out[eid] = (obs, finals[eid][0])
    return out


HOSTILE_STEPS = [
    ({"reward": float("nan")}, r"reward is nan, want a finite number"),
    ({"reward": float("-inf")}, r"reward is -inf, want a finite number"),
    ({"reward": None}, r"reward None is not a number"),
    ({"reward": "1.5"}, r"reward '1\.5' is not a number"),
    ({"reward": np.array([1.0, 2.0])}, r"reward array\(\[1\., 2\.\]\) is not a number"),
    ({"terminated": "no"}, r"terminated is 'no', want a boolean"),
    ({"truncated": np.array([True, False])}, r"truncated is array.*want a boolean"),
    ({"obs": np.zeros(3, np.float32)}, r"step\(\) observation has shape \[3\], the space \[1\]"),
    ({"obs": None}, r"step\(\) observation None is not a Box"),
    ({"obs": np.array([0.1])}, r"observation is float64, and the space's float32 would change"),
    ({"obs": np.array([1e40])}, r"observation is float64, and the space's float32 would change"),
    ({"info": {"x": "a" * (1 << 20)}}, r"info has 1048584 bytes, over the limit of 1048576"),
    # out of the Box's bounds, and NaN (in no Box), as ``contains`` decides: `record` of a file
    # refuses them too (tests/unit/ledger/test_space_check.py)
    ({"obs": np.array([-1.0], np.float32)}, r"observation array\(\[-1\.\].* is outside Box"),
    ({"obs": np.array([np.nan], np.float32)}, r"observation array\(\[nan\].* is outside Box"),
]


@pytest.mark.parametrize(("hostile", "message"), HOSTILE_STEPS)
def test_a_hostile_step_is_refused_and_spoils_no_batch(
    ledger: Ledger, alice: Signer, hostile: dict[str, Any], message: str
) -> None:
    """A bad value is refused at the step that returns it, its episode discarded whole; the
    episodes around it are recorded (a bad value that reached the batch used to fail every
    later flush and close, keeping good episodes pending for ever)."""
    env = LedgerRecorder(CounterEnv(hostile, at=2), ledger, env_ref="cartpole@1", policy="p",
                         signer=alice, every=10, episode_prefix="h")  # fmt: skip
    zero = np.zeros(1, np.float32)
    env.reset(seed=0)
    env.step(zero)  # step 1 of 2: fine
    with pytest.raises(ValueError, match=message):
        env.step(zero)  # step 2 returns the hostile value
    assert env.discarded_steps == 2 and env.pending_episodes == 0
    with pytest.raises(gym.error.ResetNeeded):
        env.step(zero)
    env.unwrapped.at = -1  # type: ignore[attr-defined]
    for seed in (1, 0):
        env.reset(seed=seed)
        while not any(env.step(zero)[2:4]):
            pass
    env.close()
    assert env.discarded_steps == 2 and env.pending_episodes == 0 and len(env.batches) == 1
    recorded = counted_episodes(ledger, env.batches)
    assert {k: len(v[0]) for k, v in recorded.items()} == {"h-1": 3, "h-2": 2}


def test_an_action_that_does_not_fit_is_refused_before_the_step(
    ledger: Ledger, alice: Signer
) -> None:
    """The action recorded is the one given: float64 0.1 is no float32 value, so it is refused
    (not rounded) before the environment moves, and the episode goes on."""
    env = LedgerRecorder(CounterEnv(), ledger, env_ref="cartpole@1", policy="p", signer=alice,
                         every=1, episode_prefix="a")  # fmt: skip
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action is float64, and the space's float32 would"):
        env.step(np.array([0.1]))
    with pytest.raises(ValueError, match=r"action has shape \[2\], the space \[1\]"):
        env.step(np.zeros(2, np.float32))
    assert env.unwrapped.steps == 0  # type: ignore[attr-defined]
    env.step(np.array([0.5]))  # float64, but exactly a float32 value
    env.step([0.25])
    env.close()
    steps = steps_of(ledger, env.batches)
    assert steps["action"].to_pylist() == [[0.5], [0.25]] and env.discarded_steps == 0


def test_a_vector_sub_environment_with_a_bad_value_loses_only_its_episode(
    ledger: Ledger, alice: Signer
) -> None:
    envs = LedgerRecorder(
        gym.vector.SyncVectorEnv([lambda: CounterEnv(), lambda: CounterEnv({"reward": np.nan})]),
        ledger, env_ref="cartpole@1", policy="p", signer=alice, every=10, episode_prefix="v",
    )  # fmt: skip
    envs.reset(seed=[3, 3])
    actions = np.zeros((2, 1), np.float32)
    with pytest.warns(RuntimeWarning, match=r"episode v-1 discarded after 2 step\(s\): .*nan"):
        for _ in range(5):
            envs.step(actions)
    envs.close()
    assert set(counted_episodes(ledger, envs.batches)) == {"v-0"}


def test_a_failed_flush_in_a_vector_step_leaves_no_hole(
    ledger: Ledger, alice: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that fails to record at a step is recorded after every sub-environment's
    transition of that step is kept (the sub-environments after the first to finish used to
    lose that step's transition when the batch failed)."""
    import trajledger.ledger.artifacts as artifacts

    envs = LedgerRecorder(
        gym.vector.SyncVectorEnv([CounterEnv, CounterEnv, CounterEnv]), ledger,
        env_ref="cartpole@1", policy="p", signer=alice, every=1, episode_prefix="f",
    )  # fmt: skip
    real = artifacts.record_batch

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise PolicyError("simulated")

    envs.reset(seed=[0, 2, 4])  # episodes of 2, 4 and 6 steps
    actions = np.zeros((3, 1), np.float32)
    envs.step(actions)
    monkeypatch.setattr(artifacts, "record_batch", broken)
    with pytest.raises(PolicyError, match="simulated"):
        envs.step(actions)  # sub-environment 0 finishes: its batch fails
    monkeypatch.setattr(artifacts, "record_batch", real)
    for _ in range(4):
        envs.step(actions)
    with pytest.warns(RuntimeWarning, match="discarded"):
        envs.close()  # sub-environment 0's automatic episodes are of 2 steps: one is unfinished
    recorded = counted_episodes(ledger, envs.batches)  # each one whole
    assert {k: len(recorded[k][0]) for k in ("f-0", "f-1", "f-2")} == {"f-0": 2, "f-1": 4, "f-2": 6}
    assert {r.stats["num_episodes"] for r in envs.results} == {1}


def test_a_recorder_is_neither_pickled_nor_copied(ledger: Ledger, alice: Signer) -> None:
    """It holds the ledger and the signing key: refused with a message, not a TypeError about
    a key class (pickle) or about ``__new__``'s arguments (copy)."""
    import copy
    import pickle

    for env in (gym.make("CartPole-v1"), gym.make_vec("CartPole-v1", num_envs=2)):
        rec = LedgerRecorder(env, ledger, env_ref="cartpole@1", policy="p", signer=alice)
        for attempt in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match=r"Recorder cannot be pickled or copied: it holds"):
                attempt(rec)
        rec.close()


# --- A Ctrl-C in a step (out42) -----------------------------------------------------------------


class InterruptedEnv(CounterEnv):
    """A CounterEnv where Ctrl-C lands once while step ``at`` runs, after the environment has
    moved on (as it does in a notebook, where the environment's step takes the time)."""

    def __init__(self, at: int = 2) -> None:
        super().__init__(at=at)
        self.interrupt = True

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        out = super().step(action)
        if self.t == self.at and self.interrupt:
            self.interrupt = False
            raise KeyboardInterrupt
        return out


def test_a_ctrl_c_in_a_step_drops_the_episode_rather_than_record_a_hole(
    ledger: Ledger, alice: Signer
) -> None:
    """The cell run again after a Ctrl-C went on stepping the episode: the signed batch held it
    with the interrupted transition missing (observations 0, 1, 3: an environment that never
    played so), as if whole."""
    env = LedgerRecorder(InterruptedEnv(), ledger, env_ref="cartpole@1", policy="p",
                         signer=alice, every=10, episode_prefix="k")  # fmt: skip
    zero = np.zeros(1, np.float32)
    env.reset(seed=2)  # 4 steps
    env.step(zero)
    with (
        pytest.warns(RuntimeWarning, match=r"^LedgerRecorder: episode k-0 discarded after 2 "
                     r"step\(s\): step\(\) raised KeyboardInterrupt, so the environment may have "
                     r"moved on without the transition being recorded; call reset\(\)"),
        pytest.raises(KeyboardInterrupt),
    ):  # fmt: skip
        env.step(zero)
    with pytest.raises(gym.error.ResetNeeded, match=r"call reset\(\) first$"):
        env.step(zero)  # the cell run again
    env.reset(seed=1)
    while not any(env.step(zero)[2:4]):
        pass
    env.close()
    assert env.discarded_steps == 2
    assert {k: len(v[0]) for k, v in counted_episodes(ledger, env.batches).items()} == {"k-1": 3}


def test_a_ctrl_c_in_a_vector_step_drops_the_episodes_rather_than_record_holes(
    ledger: Ledger, alice: Signer
) -> None:
    """Interrupted while the vector environment stepped its sub-environments (the first moved
    on, the second not): every episode in progress is dropped, and the next step asks for a
    reset (the first sub-environment's episode was recorded without that step)."""
    envs = LedgerRecorder(gym.vector.SyncVectorEnv([InterruptedEnv, CounterEnv]), ledger,
                          env_ref="cartpole@1", policy="p", signer=alice, every=10,
                          episode_prefix="v")  # fmt: skip
    actions = np.zeros((2, 1), np.float32)
    envs.reset(seed=[3, 3])
    envs.step(actions)
    with (
        pytest.warns(RuntimeWarning, match=r"step\(\) raised KeyboardInterrupt") as caught,
        pytest.raises(KeyboardInterrupt),
    ):
        envs.step(actions)
    assert sorted(str(w.message).split(" discarded")[0] for w in caught) == [
        "LedgerRecorder: episode v-0", "LedgerRecorder: episode v-1"]  # fmt: skip
    with pytest.raises(gym.error.ResetNeeded, match=r"call reset\(\) first$"):
        envs.step(actions)
    envs.reset(seed=[1, 1])
    for _ in range(3):
        envs.step(actions)
    envs.close()
    recorded = counted_episodes(ledger, envs.batches)
    assert {k: len(v[0]) for k, v in recorded.items()} == {"v-2": 3, "v-3": 3}
