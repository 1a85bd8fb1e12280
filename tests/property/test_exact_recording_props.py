"""Exact recording (issue 23 item 8): random spaces round-trip through record and export.

For random observation and action spaces (Dict, Tuple, nested; Box of int64 with its extremes
and values above 2^53, uint64 up to 2^64 - 1, float16, float32 with infinities; MultiBinary;
Discrete; Text) and random values of them:

- a Minari dataset of the values (written by minari, with the episode metadata its
  ``DataCollector`` adds) is recorded with `record_batch`, and so are the same episodes played
  through `LedgerRecorder`: both give back every value exactly, of its own dtype;
- ``export --format minari`` and ``--format parquet`` of the batch, recorded again, give the same
  steps.parquet and episodes.parquet, byte for byte (``--format minari`` with the backend it was
  read from);
- ``export --format jsonl`` gives every value exactly as a JSON number or string, or, when the
  batch holds a value JSON cannot (an infinity), refuses with a message.
"""

from __future__ import annotations

import itertools
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajledger import Ledger
from trajledger.integrations.gymnasium import LedgerRecorder
from trajledger.ledger.artifacts import batch_files, record_batch, register_environment
from trajledger.ledger.keys import Signer
from trajledger.ledger.rollout_export import export_batch
from trajledger.ledger.rollouts.parquet_io import write_steps_parquet
from trajledger.ledger.rollouts.readers import iter_batch_inputs
from trajledger.ledger.rollouts.space_values import column_values
from trajledger.verify.errors import FormatError

minari = pytest.importorskip("minari")

INT64 = (-(2**63), 2**63 - 1)
CHARSET = "abc xyz"

# --- spaces and values ------------------------------------------------------------------------

int64s = st.one_of(
    st.sampled_from([INT64[0], INT64[1], 2**53 + 1, -(2**53) - 1, 9007199254740993]),
    st.integers(*INT64),
)
LEAVES: dict[str, tuple[gym.Space[Any], Any]] = {
    "int64": (gym.spaces.Box(*INT64, (2,), np.int64), st.tuples(int64s, int64s)),
    "uint64": (
        gym.spaces.Box(0, 2**64 - 1, (), np.uint64),
        st.one_of(st.just(2**64 - 1), st.integers(0, 2**64 - 1)),
    ),
    "float16": (
        gym.spaces.Box(-1000, 1000, (1,), np.float16),
        st.tuples(st.floats(-1000, 1000, width=16)),
    ),
    "float32": (
        gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
        st.tuples(*[st.floats(width=32, allow_nan=False)] * 2),  # observations may be infinite
    ),
    "bool": (gym.spaces.MultiBinary(3), st.tuples(*[st.integers(0, 1)] * 3)),
    "discrete": (gym.spaces.Discrete(5, start=-2), st.integers(-2, 2)),
    # (min_length 0: the empty string is a value of the space, as the values drawn say)
    "text": (gym.spaces.Text(4, min_length=0, charset=CHARSET), st.text(CHARSET, max_size=4)),
}


def _leaf_value(space: gym.Space[Any], raw: Any) -> Any:
    if isinstance(space, gym.spaces.Text):
        return raw
    if isinstance(space, gym.spaces.Discrete):
        return np.int64(raw)
    return np.asarray(raw, dtype=space.dtype).reshape(space.shape)


@st.composite
def spaces(draw: st.DrawFn, depth: int = 0, *, finite: bool = False) -> tuple[gym.Space[Any], Any]:
    """A space and a strategy of its values (leaves, or a Dict / Tuple of spaces); ``finite``:
    no infinities (actions, which must be finite)."""
    kind = draw(st.sampled_from(["leaf", "dict", "tuple"] if depth < 2 else ["leaf"]))
    if kind == "leaf":
        space, raw = LEAVES[draw(st.sampled_from(sorted(LEAVES)))]
        if finite and space.dtype == np.float32:
            raw = st.tuples(*[st.floats(width=32, allow_nan=False, allow_infinity=False)] * 2)
        return space, raw.map(lambda r, s=space: _leaf_value(s, r))
    members = draw(st.lists(spaces(depth + 1, finite=finite), min_size=1, max_size=3))
    if kind == "tuple":
        space = gym.spaces.Tuple([m[0] for m in members])
        return space, st.tuples(*[m[1] for m in members])
    keys = [f"k{i}" for i in range(len(members))]
    space = gym.spaces.Dict(dict(zip(keys, [m[0] for m in members], strict=True)))
    values = st.fixed_dictionaries({k: m[1] for k, m in zip(keys, members, strict=True)})
    return space, values.map(lambda d: {k: d[k] for k in space.spaces})  # the space's order


@st.composite
def episodes(draw: st.DrawFn) -> tuple[gym.Space[Any], gym.Space[Any], list[list[Any]], Any]:
    """Spaces and 1-2 episodes of observations (n + 1 each) and actions (n each)."""
    obs_space, obs_values = draw(spaces())
    act_space, act_values = draw(spaces(depth=1, finite=True))
    played = []
    for _ in range(draw(st.integers(1, 2))):
        n = draw(st.integers(1, 3))
        played.append(
            (draw(st.lists(obs_values, min_size=n + 1, max_size=n + 1)),
             draw(st.lists(act_values, min_size=n, max_size=n)))
        )  # fmt: skip
    return obs_space, act_space, played, draw(st.sampled_from(["hdf5", "arrow"]))


class Replay(gym.Env[Any, Any]):
    """Plays given observations back; the episode ends after the last; empty infos."""

    def __init__(self, obs_space: gym.Space[Any], act_space: gym.Space[Any]) -> None:
        self.observation_space, self.action_space = obs_space, act_space
        self.script: Iterator[list[Any]] = iter(())
        self._obs: list[Any] = []

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._obs = next(self.script)
        self._t = 0
        return self._obs[0], {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._t += 1
        return self._obs[self._t], 0.5 * self._t, self._t == len(self._obs) - 1, False, {}


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("exact")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", str(root / "minari"))
        yield root


def new_ledger(root: Path) -> tuple[Ledger, Signer]:
    """A ledger of its own for each example: the same data may be drawn twice."""
    home = root / f"home{next(COUNTER)}"
    Ledger.init(home, origin=f"test/{home.name}")
    ledger = Ledger.open(home)
    signer = ledger.keys.create("producer", encrypt=False)
    register_environment(ledger, "replay", "1", signer)
    return ledger, signer


COUNTER = itertools.count()


def minari_dataset(
    root: Path, obs_space: gym.Space[Any], act_space: gym.Space[Any], played: list[Any], fmt: str
) -> Path:
    """The episodes as minari writes them, with the episode metadata DataCollector adds."""
    from minari.data_collector import EpisodeBuffer
    from minari.data_collector.callbacks import EpisodeMetadataCallback

    def stack(values: list[Any]) -> Any:
        if isinstance(values[0], dict):
            return {k: stack([v[k] for v in values]) for k in values[0]}
        if isinstance(values[0], tuple):
            return tuple(stack([v[i] for v in values]) for i in range(len(values[0])))
        if isinstance(values[0], str):
            return list(values)
        return np.stack([np.asarray(v) for v in values])

    buffers = [
        EpisodeBuffer(seed=seed, observations=stack(obs), actions=stack(acts),
                      rewards=[0.5 * (t + 1) for t in range(len(acts))],
                      terminations=[t == len(acts) - 1 for t in range(len(acts))],
                      truncations=[False] * len(acts), infos={})
        for seed, (obs, acts) in enumerate(played)
    ]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = minari.create_dataset_from_buffers(
            f"test/exact{next(COUNTER)}-v0", buffers, observation_space=obs_space,
            action_space=act_space, algorithm_name="replay", data_format=fmt,
        )  # fmt: skip
    ds.storage.update_episode_metadata(ds.storage.apply(EpisodeMetadataCallback()))
    return Path(ds.storage.data_path)


def same(got: Any, want: Any, where: str) -> None:
    """Exactly equal: the same members, dtypes and values (strings for Text)."""
    if isinstance(want, dict):
        assert sorted(got) == sorted(want), where  # stored in the space's order
        for k in want:
            same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            same(g, w, f"{where}[{i}]")
    elif isinstance(want[0], str):
        assert list(got) == list(want), where
    else:
        w = np.stack([np.asarray(x) for x in want])
        assert got.dtype == w.dtype and got.shape == w.shape, where
        assert got.tobytes() == w.tobytes(), where  # bit for bit: int64 > 2^53 included


def rows(played: list[Any], which: int) -> list[Any]:
    """Observations the actions were chosen on (which=0), or actions (which=1), in order."""
    return [v for obs, acts in played for v in (obs[:-1] if which == 0 else acts)]


def members(values: list[Any]) -> Any:
    """Per-step values stacked member by member, to compare with `column_values`."""
    if isinstance(values[0], dict):
        return {k: members([v[k] for v in values]) for k in values[0]}
    if isinstance(values[0], tuple):
        return tuple(members([v[i] for v in values]) for i in range(len(values[0])))
    return values


def check_batch(ledger: Ledger, digest: str, played: list[Any]) -> dict[str, str]:
    files = batch_files(ledger, digest)
    steps = pq.read_table(ledger.store.path_of(files["steps.parquet"]))
    for column, which in (("obs", 0), ("action", 1)):
        got = column_values(steps[column].combine_chunks(), steps.schema.field(column))
        same(got, members(rows(played, which)), column)
    eps = pq.read_table(ledger.store.path_of(files["episodes.parquet"]))
    finals = column_values(eps["final_obs"].combine_chunks(), eps.schema.field("final_obs"))
    same(finals, members([obs[-1] for obs, _ in played]), "final_obs")
    assert set(steps["info"].to_pylist()) == {"{}"}  # empty infos stay {}
    return files


def rerecord(paths: list[Path], out: Path, env: str, episodes: Path | None = None) -> list[str]:
    """Record again as `record` does (the same reader, validation and writer), unsigned."""
    out.mkdir()
    stats = write_steps_parquet(
        iter_batch_inputs(paths, episodes=episodes), out / "steps.parquet",
        fill={"env_version": env, "policy_version": "replayed"},
    )  # fmt: skip
    return [f"sha256:{stats.steps_file.sha256}", f"sha256:{stats.episodes_file.sha256}"]


def json_numbers_exact(path: Path, played: list[Any]) -> None:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for column, which in (("obs", 0), ("action", 1)):
        for line, want in zip(lines, rows(played, which), strict=True):
            compare_json(line[column], want, column)


def compare_json(got: Any, want: Any, where: str) -> None:
    if isinstance(want, dict):
        for k in want:
            compare_json(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, tuple):
        for i, w in enumerate(want):
            compare_json(got[str(i)], w, f"{where}.{i}")
    elif isinstance(want, str):
        assert got == want, where
    else:
        flat = np.asarray(want).reshape(-1)
        exact = [int(x) if flat.dtype.kind in "iub" else float(x) for x in flat.tolist()]
        assert got == exact, where  # Python's json keeps integers of any size


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=episodes())
def test_random_spaces_round_trip_exactly(
    case: tuple[gym.Space[Any], gym.Space[Any], list[Any], str],
    world: Path,
) -> None:
    obs_space, act_space, played, backend = case
    root = world
    ledger, signer = new_ledger(root)
    n = next(COUNTER)
    work = root / f"case{n}"
    work.mkdir()
    # record a Minari dataset of the values
    data = minari_dataset(root, obs_space, act_space, played, backend)
    b1 = record_batch(ledger, [data], env="replay@1", policy="replayed", signer=signer,
                      name=f"exact-{n}")  # fmt: skip
    files = check_batch(ledger, b1.digest, played)
    want = [files["steps.parquet"], files["episodes.parquet"]]
    env_digest = b1.environment.digest
    # record the same episodes while they are played
    replay = Replay(obs_space, act_space)
    replay.script = iter([obs for obs, _ in played])
    recorder = LedgerRecorder(replay, ledger, env_ref="replay@1", policy="replayed",
                              signer=signer, every=len(played), name=f"gym-{n}")  # fmt: skip
    for seed, (_, acts) in enumerate(played):
        recorder.reset(seed=seed)
        for a in acts:
            recorder.step(a)
    check_batch(ledger, recorder.batches[0], played)
    # every export format: the same batch back, exact values, or a refusal with a message
    export_batch(ledger, b1.digest, work / "minari", "minari", minari_format=backend)
    assert rerecord([work / "minari"], work / "m", env_digest) == want
    export_batch(ledger, b1.digest, work / "parquet", "parquet")
    plain = work / "parquet"
    got = rerecord([plain / "steps.parquet"], work / "p", env_digest, plain / "episodes.parquet")
    assert got == want
    infinite = any(
        isinstance(v, np.ndarray) and v.dtype.kind == "f" and not np.isfinite(v).all()
        for obs, acts in played for step in obs + acts for v in leaves(step)
    )  # fmt: skip
    if infinite:
        with pytest.raises(FormatError, match="which JSON cannot; export as parquet instead"):
            export_batch(ledger, b1.digest, work / "jsonl", "jsonl")
        assert not (work / "jsonl").exists()
    else:
        export_batch(ledger, b1.digest, work / "jsonl", "jsonl")
        json_numbers_exact(work / "jsonl" / "steps.jsonl", played)


def leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for v in value.values():
            yield from leaves(v)
    elif isinstance(value, tuple):
        for v in value:
            yield from leaves(v)
    else:
        yield value


def test_an_int64_above_2_53_beside_a_float_is_exact(world: Path) -> None:
    """The issue's case: ``9007199254740993`` came back as ``9007199254740992``."""
    ledger, signer = new_ledger(world)
    space = gym.spaces.Dict({
        "count": gym.spaces.Box(*INT64, (), np.int64),
        "x": gym.spaces.Box(-1, 1, (), np.float32),
    })  # fmt: skip
    obs = [{"count": np.int64(9007199254740993 + t), "x": np.float32(0.5)} for t in range(3)]
    replay = Replay(space, gym.spaces.Discrete(2))
    replay.script = iter([obs])
    env = LedgerRecorder(replay, ledger, env_ref="replay@1", policy="p", signer=signer, every=1)
    env.reset(seed=0)
    env.step(0)
    env.step(1)
    steps = pq.read_table(
        ledger.store.path_of(batch_files(ledger, env.batches[0])["steps.parquet"])
    )
    got = column_values(steps["obs"].combine_chunks(), steps.schema.field("obs"))
    assert got["count"].tolist() == [9007199254740993, 9007199254740994]
