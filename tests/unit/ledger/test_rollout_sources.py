"""Real rollouts in, losslessly: files written as TRL, verl and Minari write them (issue 12).

Fixtures:
- TRL: `trl_completions` writes the completions table exactly as TRL 1.16.0's
  ``GRPOTrainer.log`` does with ``log_completions`` (trl/trainer/grpo_trainer.py): a dict
  ``{"step", "prompt", "completion", **one float list per reward function (NaN where it returned
  None), **log_extra columns, "advantage"}`` through ``pd.DataFrame(table).to_parquet(
  output_dir/"completions"/f"completions_{global_step:05d}.parquet")``. TRL's dataset types
  are JSON lines of the documented keys (trl/data_utils.py); assistant messages carry
  ``reasoning_content`` as TRL's response parser (trl/chat_template_utils.py) emits it.
- verl: `verl_dump` writes what verl 0.9.1's ``_write_generations`` writes
  (verl/trainer/ppo/ray_trainer.py and verl/trainer/ppo/v1/trainer_base.py):
  ``{"input", "output", "gts", "score", "step", **reward_extra_infos}`` one JSON line per sample
  into ``<rollout_data_dir>/<global_steps>.jsonl``, ``json.dumps(entry, ensure_ascii=False)``;
  the legacy trainer adds ``request_id``, the v1 trainer ``uid``, the ``math_dapo`` reward
  ``acc`` (bool) and ``pred`` (string).
- Minari: written by minari 0.5.4's own ``minari.create_dataset_from_buffers`` (arrow and hdf5
  backends), read back by ``minari.MinariDataset``.
Each fixture is made once per module (small sizes; the bench uses big ones).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajledger.ledger.rollouts import typed_json
from trajledger.ledger.rollouts.chunks import ReaderOptions
from trajledger.ledger.rollouts.export import export_rollouts
from trajledger.ledger.rollouts.minari_io import minari_total_steps, unflatten_batch
from trajledger.ledger.rollouts.parquet_io import WriteStats, write_steps_parquet
from trajledger.ledger.rollouts.problems import RolloutValidationError
from trajledger.ledger.rollouts.readers import detect_format, iter_batch_inputs, iter_rollout_chunks
from trajledger.ledger.rollouts.space_values import column_values
from trajledger.ledger.rollouts.spaces import space_from_json, space_to_json
from trajledger.ledger.rollouts.success import episode_success
from trajledger.ledger.rollouts.validate import validate_steps

minari = pytest.importorskip("minari")  # in the test extra; skipped only where it is absent
pd = pytest.importorskip("pandas")


def record(paths: list[Path], out: Path, **kw: Any) -> tuple[WriteStats, pa.Table, pa.Table]:
    """Write inputs as one batch (what ``trajledger record`` does before storing)."""
    out.mkdir(parents=True, exist_ok=True)
    stats = write_steps_parquet(iter_batch_inputs(paths, **kw), out / "steps.parquet")
    return stats, pq.read_table(out / "steps.parquet"), pq.read_table(out / "episodes.parquet")


def problems(info: pytest.ExceptionInfo[RolloutValidationError]) -> list[str]:
    return [str(p) for p in info.value.problems]


# --- TRL -------------------------------------------------------------------------------------


def trl_completions(output_dir: Path, global_step: int, logs: dict[str, Any]) -> Path:
    """TRL 1.16.0 ``GRPOTrainer.log`` (log_completions=True): the completions parquet."""
    n = len(logs["prompt"])
    table = {
        "step": [global_step] * n,
        "prompt": logs["prompt"],
        "completion": logs["completion"],
        **logs["rewards"],
        **logs["extra"],
        "advantage": logs["advantages"],
    }
    path = output_dir / "completions" / f"completions_{global_step:05d}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(table).to_parquet(path)
    return path


NAN = float("nan")
GRPO_LOGS = {
    "prompt": [
        [{"role": "user", "content": "2+2?"}],
        [{"role": "user", "content": "2+2?"}],
        [{"role": "user", "content": "Name a prime."}],
    ],
    "completion": [
        [{"role": "assistant", "content": "4", "reasoning_content": "2 plus 2 is 4"}],
        [{"role": "assistant", "content": "5", "reasoning_content": "hmm"}],
        [{"role": "assistant", "content": "", "reasoning_content": None}],
    ],
    # One float list per reward function, named after it; NaN where a function returned None.
    "rewards": {"accuracy_reward": [1.0, 0.0, NAN], "format_reward": [0.5, 0.5, NAN]},
    "extra": {"solution": ["4", "4", "7"]},  # a log_extra column
    "advantages": [0.7, -0.7, 0.0],
}


@pytest.fixture(scope="module")
def trl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("trl")
    trl_completions(out, 10, GRPO_LOGS)
    later = {**GRPO_LOGS, "advantages": [0.1, 0.2, 0.3]}
    trl_completions(out, 20, later)
    return out


def test_trl_completions_parquet_recorded_without_conversion(trl_dir: Path, tmp_path: Path) -> None:
    path = trl_dir / "completions" / "completions_00010.parquet"
    assert detect_format(path) == "trl-completions"
    stats, steps, eps = record([path], tmp_path)
    assert stats.meta["formats"] == ["trl-completions"]
    assert steps["reasoning_content"].to_pylist() == [
        None,
        "2 plus 2 is 4",
        None,
        "hmm",
        None,
        None,
    ]
    # TRL's reward: the weighted nansum over the functions that applied (weights 1).
    assert steps["reward"].to_pylist() == [0.0, 1.5, 0.0, 0.5, None, None]
    rows = eps.to_pylist()
    assert [r["return"] for r in rows] == [1.5, 0.5, None]  # no score at all: no reward, not NaN
    assert rows[0]["judge_scores"] == [("accuracy_reward", 1.0), ("format_reward", 0.5)]
    assert rows[2]["judge_scores"] is None  # NaN is a missing score, never a NaN reward
    assert [dict(r["extras"]) for r in rows] == [
        {"step": "10", "solution": '"4"', "advantage": "0.7"},
        {"step": "10", "solution": '"4"', "advantage": "-0.7"},
        {"step": "10", "solution": '"7"', "advantage": "0.0"},
    ]
    assert [r["policy_version"] for r in rows] == [None] * 3  # (TRL's step is the log's)
    assert [r["episode_id"] for r in rows] == ["row-0", "row-1", "row-2"]
    assert stats.rewarded_episodes == 2


def test_trl_reward_weights_or_one_column(trl_dir: Path, tmp_path: Path) -> None:
    path = trl_dir / "completions" / "completions_00010.parquet"
    weights = ReaderOptions(reward_weights={"accuracy_reward": 2.0, "format_reward": 0.5})
    _, _, eps = record([path], tmp_path / "w", options=weights)
    assert eps["return"].to_pylist() == [2.25, 0.25, None]
    _, _, eps = record([path], tmp_path / "c", options=ReaderOptions(reward_column="format_reward"))
    assert eps["return"].to_pylist() == [0.5, 0.5, None]


def test_trl_pandas_jsonl_export_is_read_too(tmp_path: Path) -> None:
    """The same table as ``df.to_json(orient="records", lines=True)`` (NaN becomes null)."""
    n = len(GRPO_LOGS["prompt"])
    df = pd.DataFrame({"step": [10] * n, "prompt": GRPO_LOGS["prompt"],
                       "completion": GRPO_LOGS["completion"], **GRPO_LOGS["rewards"],
                       **GRPO_LOGS["extra"], "advantage": GRPO_LOGS["advantages"]})  # fmt: skip
    path = tmp_path / "completions.jsonl"
    df.to_json(path, orient="records", lines=True)
    assert detect_format(path) == "trl-completions"
    _, _, eps = record([path], tmp_path / "out")
    assert eps["return"].to_pylist() == [1.5, 0.5, None]


def test_several_completion_files_make_one_batch(trl_dir: Path, tmp_path: Path) -> None:
    files = sorted((trl_dir / "completions").iterdir())
    _, _, eps = record(files, tmp_path)
    ids = eps["episode_id"].to_pylist()
    assert len(ids) == len(set(ids)) == 6
    assert ids[0] == "completions_00010.parquet:row-0"
    assert ids[3] == "completions_00020.parquet:row-0"
    assert [dict(r["extras"])["step"] for r in eps.to_pylist()] == ["10"] * 3 + ["20"] * 3


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_trl_dataset_types(tmp_path: Path) -> None:
    conversational = write_jsonl(tmp_path / "conv.jsonl", [
        {"messages": [{"role": "user", "content": "hi"},
                      {"role": "assistant", "content": "hello", "reasoning_content": "greet"}]},
    ])  # fmt: skip
    prompt_completion = write_jsonl(tmp_path / "pc.jsonl", [
        {"prompt": "The sky is", "completion": " blue."},
        {"prompt": [{"role": "user", "content": "Sky?"}],
         "completion": [{"role": "assistant", "content": "Blue."}]},
    ])  # fmt: skip
    preference = write_jsonl(tmp_path / "pref.jsonl", [
        {"prompt": "The sky is", "chosen": " blue.", "rejected": " green."},
        {"chosen": [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "Blue"}],
         "rejected": [{"role": "user", "content": "Sky?"},
                      {"role": "assistant", "content": "Green"}]},
    ])  # fmt: skip
    kto = write_jsonl(tmp_path / "kto.jsonl", [
        {"prompt": "The sky is", "completion": " blue.", "label": True},
        {"prompt": "The sky is", "completion": " green.", "label": False},
    ])  # fmt: skip
    kinds = [detect_format(p) for p in (conversational, prompt_completion, preference, kto)]
    assert kinds == ["chat-jsonl", "trl-prompt-completion", "trl-preference", "trl-kto"]
    stats, steps, eps = record([conversational, prompt_completion, preference, kto], tmp_path / "b")
    assert stats.rewarded_episodes == 0 and stats.return_mean is None  # no made-up reward
    assert steps["reward"].null_count == steps.num_rows
    rows = {r["episode_id"]: r for r in eps.to_pylist()}
    assert "greet" in steps["reasoning_content"].to_pylist()
    pair = [rows["pref.jsonl:line-1/chosen"], rows["pref.jsonl:line-1/rejected"]]
    assert [(r["label"], r["group_id"], r["num_steps"]) for r in pair] == [
        ("chosen", "pref.jsonl:line-1", 2), ("rejected", "pref.jsonl:line-1", 2)
    ]  # fmt: skip
    assert rows["pref.jsonl:line-2/chosen"]["num_steps"] == 2  # implicit prompt: whole dialogue
    assert [rows[f"kto.jsonl:line-{i}"]["label"] for i in (1, 2)] == ["desirable", "undesirable"]


# --- verl ------------------------------------------------------------------------------------


def verl_dump(
    dump_path: Path, global_steps: int, inputs: list[str], outputs: list[str],
    gts: list[Any], scores: list[float], reward_extra_infos_dict: dict[str, list[Any]],
) -> Path:  # fmt: skip
    """verl 0.9.1 ``_write_generations`` (ray_trainer.py; v1/trainer_base.py alike)."""
    dump_path.mkdir(parents=True, exist_ok=True)
    filename = dump_path / f"{global_steps}.jsonl"
    n = len(inputs)
    base_data: dict[str, list[Any]] = {
        "input": inputs, "output": outputs, "gts": gts, "score": scores,
        "step": [global_steps] * n,
    }  # fmt: skip
    for k, v in reward_extra_infos_dict.items():
        if len(v) == n:
            base_data[k] = v
    with open(filename, "w") as f:
        for i in range(n):
            entry = {k: v[i] for k, v in base_data.items()}
            f.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
    return filename


def test_verl_dumps_with_any_extra_fields(tmp_path: Path) -> None:
    # Legacy trainer: request_id; math_dapo reward: acc (bool) and pred (string).
    legacy = verl_dump(
        tmp_path / "legacy", 10, ["1+1=", "2+2="], ["2", "5"], ["2", {"answer": "4"}],
        [1.0, -1.0],
        {"acc": [True, False], "pred": ["2", "5"], "request_id": ["r-1", "r-2"]},
    )  # fmt: skip
    # v1 trainer: the uid of the prompt each sample answers (a GRPO group).
    v1 = verl_dump(tmp_path / "v1", 10, ["1+1=", "1+1="], ["2", "3"], [None, None], [1.0, 0.0],
                   {"uid": ["q0_0_0", "q0_0_1"]})  # fmt: skip
    assert detect_format(legacy) == detect_format(v1) == "verl-jsonl"
    _, _, eps = record([legacy, v1], tmp_path / "out")
    rows = eps.to_pylist()
    ids = [r["episode_id"] for r in rows]
    assert ids == ["0:10.jsonl:line-1", "0:10.jsonl:line-2", "1:10.jsonl:line-1",
                   "1:10.jsonl:line-2"]  # fmt: skip
    first = dict(rows[0]["extras"])
    assert {k: json.loads(v) for k, v in first.items()} == {
        "gts": "2", "acc": True, "pred": "2", "request_id": "r-1"
    }  # fmt: skip
    assert json.loads(dict(rows[1]["extras"])["gts"]) == {"answer": "4"}
    assert rows[0]["judge_scores"] == [("acc", 1.0)]
    assert rows[2]["group_id"] == "q0_0_0" and rows[0]["return"] == 1.0


# --- Unknown inputs are named ----------------------------------------------------------------


def test_unknown_formats_are_named(tmp_path: Path) -> None:
    h5 = tmp_path / "main_data.hdf5"
    h5.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(64))
    with pytest.raises(RolloutValidationError) as info:
        detect_format(h5)
    assert problems(info) == [
        "this looks like HDF5; for Minari datasets give the dataset directory (the one holding "
        "metadata.json, or its parent)"
    ]
    z = tmp_path / "x.npz"
    np.savez(z, a=np.zeros(2))
    with pytest.raises(RolloutValidationError, match="this looks like a ZIP archive"):
        detect_format(z)
    with pytest.raises(RolloutValidationError, match="not a Minari dataset"):
        detect_format(tmp_path)


@pytest.mark.parametrize("ext", ["parquet", "jsonl"])
def test_a_directory_an_export_wrote_names_the_files_to_give(tmp_path: Path, ext: str) -> None:
    out = tmp_path / "export"
    out.mkdir()
    steps, episodes = out / f"steps.{ext}", out / f"episodes.{ext}"
    steps.write_bytes(b"")
    for given in (f"{steps}", f"{steps} --episodes {episodes}"):
        with pytest.raises(RolloutValidationError) as info:
            detect_format(out)
        assert problems(info) == [
            f"a directory, not a rollout file; it holds an export's steps.{ext}: give {given}"
        ]
        episodes.write_bytes(b"")


# --- Minari ----------------------------------------------------------------------------------


class ShapesEnv(gym.Env[Any, Any]):
    """Dict observations (float64 vector, uint8 image, Discrete) and Tuple actions."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Dict(
            {
                "pos": gym.spaces.Box(-1e300, 1e300, (2,), np.float64),
                "cam": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
                "mode": gym.spaces.Discrete(3, start=1),
            }
        )
        self.action_space = gym.spaces.Tuple(
            (gym.spaces.Discrete(2), gym.spaces.Box(-1.0, 1.0, (1,), np.float32))
        )
        self._t = 0

    def _obs(self) -> dict[str, Any]:
        return {
            "pos": np.array([self._t * 1e-17, 1e300 / (self._t + 1)], np.float64),
            "cam": np.full((8, 8, 3), self._t * 20, np.uint8),
            "mode": self._t % 3 + 1,
        }

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {"start": np.array([1.5, 2.5])}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._t += 1
        info = {"start": np.array([float(self._t), 0.0])}
        return self._obs(), 0.25 * self._t, self._t >= 3, False, info


def play(env: gym.Env[Any, Any], seeds: list[int]) -> list[Any]:

    out = []
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        env.action_space.seed(seed)
        observations, actions, rewards, terms, truncs, infos = [obs], [], [], [], [], [info]
        done = False
        while not done:
            action = env.action_space.sample()
            obs, reward, term, trunc, info = env.step(action)
            for lst, v in ((observations, obs), (actions, action), (rewards, reward),
                           (terms, term), (truncs, trunc), (infos, info)):  # fmt: skip
                lst.append(v)
            done = term or trunc
        out.append((seed, observations, actions, rewards, terms, truncs, infos))
    return out


def _stack(values: list[Any]) -> Any:
    if isinstance(values[0], dict):
        return {k: _stack([v[k] for v in values]) for k in values[0]}
    if isinstance(values[0], tuple):
        return tuple(_stack([v[i] for v in values]) for i in range(len(values[0])))
    return np.stack([np.asarray(v) for v in values])


def minari_dataset(root: Path, name: str, env: gym.Env[Any, Any], fmt: str, **kw: Any) -> Path:
    """A dataset written by minari's own ``create_dataset_from_buffers``."""
    from minari.data_collector import EpisodeBuffer

    buffers = [
        EpisodeBuffer(seed=seed, observations=_stack(obs), actions=_stack(act), rewards=rew,
                      terminations=te, truncations=tr, infos=_stack(infos))
        for seed, obs, act, rew, te, tr, infos in play(env, [0, 1, 2])
    ]  # fmt: skip
    ds = minari.create_dataset_from_buffers(
        f"test/{name}-{fmt}-v0", buffers, env=env if env.spec else None,
        observation_space=env.observation_space, action_space=env.action_space,
        algorithm_name="random", author="tester", author_email="t@example.org",
        code_permalink="https://example.org/code", ref_min_score=0.0, ref_max_score=500.0,
        description="fixture", data_format=fmt, **kw,
    )  # fmt: skip
    return Path(ds.storage.data_path)


@pytest.fixture(scope="module")
def minari_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("minari")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", str(root))
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for fmt in ("arrow", "hdf5"):
                minari_dataset(root, "cartpole", gym.make("CartPole-v1"), fmt)
                minari_dataset(root, "shapes", ShapesEnv(), fmt, jpeg_encoding=False)
        yield root


def data_dir(root: Path, name: str, fmt: str) -> Path:
    return root / "test" / f"{name}-{fmt}-v0" / "data"


@pytest.mark.parametrize("fmt", ["arrow", "hdf5"])
def test_minari_dataset_recorded_without_conversion(
    minari_root: Path, fmt: str, tmp_path: Path
) -> None:
    src = data_dir(minari_root, "cartpole", fmt)
    assert detect_format(src.parent) == detect_format(src) == "minari"
    stats, steps, eps = record([src.parent], tmp_path)
    ds = minari.MinariDataset(src)
    episodes = list(ds.iterate_episodes())
    assert stats.num_episodes == len(episodes) and stats.num_steps == ds.total_steps
    obs = np.asarray(steps["obs"].combine_chunks().values).reshape(-1, 4)
    assert steps["obs"].type == pa.list_(pa.float32())
    assert np.array_equal(obs, np.concatenate([e.observations[:-1] for e in episodes]))
    finals = np.asarray(eps["final_obs"].combine_chunks().values).reshape(-1, 4)
    assert np.array_equal(finals, np.stack([e.observations[-1] for e in episodes]))
    assert steps["action"].type == pa.list_(pa.int64())  # Discrete: int64, shape []
    assert eps["seed"].to_pylist() == [0, 1, 2]
    meta = stats.meta
    assert meta["observationSpace"] == space_to_json(gym.make("CartPole-v1").observation_space)
    assert meta["envSpec"]["id"] == "CartPole-v1"
    m = meta["minari"]
    assert (m["dataset_id"], m["ref_max_score"], m["author"], m["data_format"]) == (
        f"test/cartpole-{fmt}-v0", 500, ["tester"], fmt
    )  # fmt: skip
    assert validate_steps(steps).ok


@pytest.mark.parametrize("fmt", ["arrow", "hdf5"])
def test_a_minari_dataset_declaring_far_more_than_it_stores_is_refused_unread(
    minari_root: Path, fmt: str, tmp_path: Path
) -> None:
    """An episode's rewards replaced by 320 MB that the file does not hold: an HDF5 dataset
    whose chunks were never written (a 48 KB file of 1.6 GB took 21 GB and the OOM killer
    before this check), or an Arrow file whose zstd batch declares them."""
    import shutil

    import h5py
    import pyarrow.ipc as ipc

    src = tmp_path / "data"
    shutil.copytree(data_dir(minari_root, "cartpole", fmt), src)
    n = 40_000_000
    if fmt == "hdf5":
        with h5py.File(src / "main_data.hdf5", "a") as f:
            del f["episode_0"]["rewards"]
            f["episode_0"].create_dataset("rewards", shape=(n,), dtype="f8", chunks=(1 << 20,))
        want = "dataset 'episode_0/rewards' declares 320,000,000 bytes ((40000000,) float64)"
    else:
        part = src / "0" / "part-0.arrow"
        big = pa.table({"rewards": pa.array(np.zeros(n))})
        with ipc.new_file(part, big.schema,
                          options=ipc.IpcWriteOptions(compression="zstd")) as w:
            w.write_table(big)
        want = "0/part-0.arrow: a record batch of "
    assert sum(p.stat().st_size for p in src.rglob("*") if p.is_file()) < 5 << 20
    with pytest.raises(RolloutValidationError) as info:
        record([src], tmp_path / "out")
    assert want in problems(info)[0] and "decompression bomb" in problems(info)[0]


@pytest.mark.parametrize("name", ["cartpole", "shapes"])
@pytest.mark.parametrize("fmt", ["arrow", "hdf5"])
def test_minari_round_trip(minari_root: Path, name: str, fmt: str, tmp_path: Path) -> None:
    """Minari -> trajledger -> Minari -> trajledger: the same data, dtypes and spaces."""
    src = data_dir(minari_root, name, fmt)
    stats, steps, eps = record([src], tmp_path / "a")
    rec = {k: stats.meta.get(k) for k in ("observationSpace", "actionSpace", "envSpec")}
    rec["source"] = {"minari": stats.meta["minari"]}
    other = "hdf5" if fmt == "arrow" else "arrow"
    export_rollouts(
        (tmp_path / "a" / "steps.parquet").read_bytes(),
        (tmp_path / "a" / "episodes.parquet").read_bytes(),
        rec, tmp_path / "out", "minari", minari_format=other,
    )  # fmt: skip
    back = minari.MinariDataset(tmp_path / "out" / "data")
    orig = minari.MinariDataset(src)
    assert back.spec.dataset_id == orig.spec.dataset_id
    assert back.observation_space == orig.observation_space
    assert back.action_space == orig.action_space
    for key in ("ref_min_score", "ref_max_score", "author", "algorithm_name", "description"):
        assert back.storage.metadata.get(key) == orig.storage.metadata.get(key), key
    for a, b in zip(back.iterate_episodes(), orig.iterate_episodes(), strict=True):
        _same(a.observations, b.observations)
        _same(a.actions, b.actions)
        _same(a.infos, b.infos)
        assert np.array_equal(a.rewards, b.rewards)
        assert np.array_equal(a.terminations, b.terminations)
    _, steps2, eps2 = record([tmp_path / "out"], tmp_path / "b")
    assert steps2.equals(steps) and eps2.equals(eps)  # record -> export -> record: same episodes


def _same(a: Any, b: Any) -> None:
    def empty(x: Any) -> bool:
        return x is None or (isinstance(x, dict) and not x)

    if empty(a) and empty(b):
        return  # no infos: Minari's arrow backend gives {}, its hdf5 backend None
    if isinstance(b, dict):
        assert a.keys() == b.keys()
        for k in b:
            _same(a[k], b[k])
    elif isinstance(b, tuple):
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    else:
        x, y = np.asarray(a), np.asarray(b)
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)


def test_float64_images_and_dict_tuple_spaces_kept(minari_root: Path, tmp_path: Path) -> None:
    stats, steps, eps = record([data_dir(minari_root, "shapes", "hdf5")], tmp_path)
    space = space_from_json(stats.meta["observationSpace"])
    assert space == ShapesEnv().observation_space
    # Dict observations are structs: each member keeps its own dtype and shape.
    field = steps.schema.field("obs")
    assert field.metadata[b"trajledger.space"] == b"Dict"
    assert [f.name for f in field.type] == list(space.spaces)
    obs = column_values(steps["obs"].combine_chunks(), field)
    assert obs["pos"].dtype == np.float64 and obs["pos"][0, 1] == 1e300
    assert obs["cam"].dtype == np.uint8 and obs["cam"].shape[1:] == (8, 8, 3)
    assert obs["mode"].dtype == np.int64 and obs["mode"].shape[1:] == ()
    assert space.contains({k: v[0] for k, v in obs.items()})
    act_field = steps.schema.field("action")
    assert act_field.metadata[b"trajledger.space"] == b"Tuple"
    info = typed_json.loads(steps["info"][0].as_py())
    assert info["start"].dtype == np.float64 and info["start"].tolist() == [1.0, 0.0]
    assert typed_json.loads(eps["reset_info"][0].as_py())["start"].tolist() == [1.5, 2.5]


def test_batched_unflatten_matches_gymnasium() -> None:
    """v2 batches hold Dict and Tuple values flattened; export unflattens them many at once."""
    env = ShapesEnv()
    env.observation_space.seed(3)
    samples = [env.observation_space.sample() for _ in range(4)]
    flat = np.stack([gym.spaces.flatten(env.observation_space, s) for s in samples])
    back = unflatten_batch(env.observation_space, flat)
    _same(back, _stack(samples))
    md = gym.spaces.MultiDiscrete([3, 4], start=[1, 0])
    md.seed(0)
    xs = [md.sample() for _ in range(3)]
    got = np.stack([gym.spaces.flatten(md, x) for x in xs])
    assert np.array_equal(unflatten_batch(md, got), np.stack(xs))


def test_spaces_json_is_canonical_and_round_trips() -> None:
    import rfc8785

    for space in (
        gym.make("CartPole-v1").observation_space, ShapesEnv().observation_space,
        ShapesEnv().action_space, gym.spaces.MultiBinary([2, 3]),
        gym.spaces.Box(np.iinfo(np.int64).min, np.iinfo(np.int64).max, (2,), np.int64),
    ):  # fmt: skip
        d = space_to_json(space)
        rfc8785.dumps(d)  # no NaN, no infinity, no integer beyond 2^53
        assert space_from_json(json.loads(json.dumps(d))) == space


# --- Export to plain files -------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(minari_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("recorded")
    record([data_dir(minari_root, "shapes", "arrow")], out)
    return out


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_plain_exports_read_by_pandas_polars_duckdb_datasets(
    recorded: Path, fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    duckdb = pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "plain"
    result = export_rollouts(
        (recorded / "steps.parquet").read_bytes(), (recorded / "episodes.parquet").read_bytes(),
        {}, out, fmt,
    )  # fmt: skip
    n = {"steps": result.steps, "episodes": result.episodes}
    for name, rows in n.items():
        path = out / f"{name}.{fmt}"
        if fmt == "parquet":
            frames = [pd.read_parquet(path), pl.read_parquet(path)]
            ds = datasets.Dataset.from_parquet(str(path), cache_dir=str(tmp_path / "c"))
            count = duckdb.sql(f"select count(*) from read_parquet('{path}')").fetchall()
        else:
            frames = [pd.read_json(path, lines=True), pl.read_ndjson(path)]
            ds = datasets.Dataset.from_json(str(path), cache_dir=str(tmp_path / "c"))
            count = duckdb.sql(f"select count(*) from read_json_auto('{path}')").fetchall()
        assert [len(f) for f in frames] == [rows, rows] and len(ds) == rows
        assert count == [(rows,)]


def test_plain_exports_record_back_to_the_same_episodes(recorded: Path, tmp_path: Path) -> None:
    steps = pq.read_table(recorded / "steps.parquet")
    eps = pq.read_table(recorded / "episodes.parquet")
    for fmt in ("parquet", "jsonl"):
        out = tmp_path / fmt
        export_rollouts((recorded / "steps.parquet").read_bytes(),
                        (recorded / "episodes.parquet").read_bytes(), {}, out, fmt)  # fmt: skip
        _, steps2, eps2 = record([out / f"steps.{fmt}"], tmp_path / f"re-{fmt}",
                                 episodes=out / f"episodes.{fmt}")  # fmt: skip
        if fmt == "parquet":
            assert steps2.equals(steps) and eps2.equals(eps)
        else:  # JSON has one number type: the values come back, the tensor dtypes widen
            assert steps2["episode_id"].equals(steps["episode_id"])
            assert steps2["obs"].to_pylist() == steps["obs"].to_pylist()
            assert steps2["info"].to_pylist() == steps["info"].to_pylist()
            assert eps2["reset_info"].to_pylist() == eps["reset_info"].to_pylist()
            assert eps2["return"].to_pylist() == eps["return"].to_pylist()


def test_export_refusals(tmp_path: Path) -> None:
    from trajledger.ledger.rollouts.export import ExportError
    from trajledger.ledger.rollouts.rows import rows_to_table

    table = rows_to_table([{"episode_id": "e", "step": 0, "obs": [float("inf")],
                            "terminated": True, "truncated": False}])  # fmt: skip
    write_steps_parquet([table], tmp_path / "steps.parquet")
    data = [(tmp_path / n).read_bytes() for n in ("steps.parquet", "episodes.parquet")]
    with pytest.raises(ExportError, match="which JSON cannot; export as parquet instead"):
        export_rollouts(*data, {}, tmp_path / "j", "jsonl")
    with pytest.raises(ExportError, match="Minari needs a reward for every step"):
        export_rollouts(*data, {}, tmp_path / "m", "minari")
    assert not (tmp_path / "j").exists() and not (tmp_path / "m").exists()
    with pytest.raises(FileExistsError):
        export_rollouts(*data, {}, tmp_path, "parquet")


def test_a_time_iso_8601_cannot_hold_refuses_a_jsonl_export(tmp_path: Path) -> None:
    """rev43 finding 4: a batch holding a time past the year 9999 (recorded before `record`
    refused one, or signed by another tool) made `export --format jsonl` fail as a bug
    (`OverflowError: date value out of range`, exit 4); it is refused as a NaN is."""
    from trajledger.ledger.rollouts.export import ExportError
    from trajledger.ledger.rollouts.rows import rows_to_table

    table = rows_to_table([{"episode_id": "e", "step": 0, "obs": [0.0], "terminated": True,
                            "truncated": False, "timestamp": "2026-12-07T00:00:00Z"}])
    write_steps_parquet([table], tmp_path / "steps.parquet")
    table = pq.read_table(tmp_path / "steps.parquet")
    i = table.schema.get_field_index("timestamp")
    pq.write_table(table.set_column(i, table.schema.field(i), pa.array(
        [253_402_300_800_000_000], table.schema.field(i).type)), tmp_path / "steps.parquet")
    data = [(tmp_path / n).read_bytes() for n in ("steps.parquet", "episodes.parquet")]
    with pytest.raises(ExportError, match="outside the years 1 to 9999"):
        export_rollouts(*data, {}, tmp_path / "j", "jsonl")
    assert not (tmp_path / "j").exists()
    export_rollouts(*data, {}, tmp_path / "p", "parquet")  # (Parquet holds it)


# --- Success: one definition -----------------------------------------------------------------


def test_success_rate_counts_every_episode_of_a_labelling_batch(tmp_path: Path) -> None:
    """Episodes cut by length or error are not successes: the rate is over all episodes."""
    reasons = ["success", "failure", "length", "error", "success"]
    rows = [{"messages": [{"role": "user", "content": "q"}], "reward": 1.0,
             "termination_reason": r} for r in reasons]  # fmt: skip
    rows.append({"messages": [{"role": "user", "content": "q"}], "reward": 0.0, "success": True})
    path = write_jsonl(tmp_path / "chat.jsonl", rows)
    stats, _, eps = record([path], tmp_path / "out")
    assert (stats.success_count, stats.success_rate) == (3, 0.5)
    assert episode_success(eps) == [True, False, False, False, True, True]
    assert math.isclose(sum(x is True for x in episode_success(eps)) / eps.num_rows, 0.5)
    # TRL and verl records carry a success label too (v1 could not).
    verl = verl_dump(tmp_path / "verl", 1, ["q", "q"], ["a", "b"], [None, None], [1.0, 0.0],
                     {"success": [True, False]})  # fmt: skip
    trl = write_jsonl(tmp_path / "trl.jsonl", [
        {"step": 1, "prompt": "p", "completion": "c", "f": 1.0, "success": True,
         "advantage": 0.0},
    ])  # fmt: skip
    stats, _, eps = record([verl, trl], tmp_path / "labels")
    assert eps["success"].to_pylist() == [True, False, True] and stats.success_rate == 2 / 3
    unlabelled = write_jsonl(tmp_path / "u.jsonl", rows[2:4])
    stats, _, eps = record([unlabelled], tmp_path / "u")
    assert stats.success_rate is None and episode_success(eps) == [None, None]


def test_reading_minari_without_minari_says_what_to_install(
    minari_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    real = builtins.__import__

    def no_minari(name: str, *args: Any, **kw: Any) -> Any:
        if name == "minari" or name.startswith("minari."):
            raise ImportError(name)
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_minari)
    with pytest.raises(RolloutValidationError, match=r"pip install 'trajledger\[minari\]'"):
        list(iter_rollout_chunks(data_dir(minari_root, "cartpole", "hdf5")))


def test_module_docstring_names_versions() -> None:
    assert "TRL 1.16.0" in (__doc__ or "") and "verl 0.9.1" in (__doc__ or "")
    assert os.path.basename(__file__) == "test_rollout_sources.py"


def test_deeply_nested_json_is_refused_not_a_crash(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    path = tmp_path / "deep.jsonl"
    path.write_text('{"messages": ' + deep + "}\n")
    with pytest.raises(RolloutValidationError) as info:
        detect_format(path)
    assert problems(info) == ["line 1: not accepted: JSON nested too deeply"]
    path.write_text(json.dumps({"messages": [{"role": "user", "tool_calls": deep}]}) + "\n")
    with pytest.raises(RolloutValidationError) as info:
        list(iter_rollout_chunks(path))
    assert problems(info) == [
        "line 1, column 'messages[0].tool_calls': JSON text nested too deeply"
    ]
    with pytest.raises(typed_json.TypedJSONError, match="nested too deeply"):
        typed_json.loads(deep)


def test_typed_json_round_trip_and_refusals() -> None:
    value = {
        "a": np.arange(6, dtype=np.int16).reshape(2, 3), "s": np.float32(1.5), "t": (1, "x"),
        "f": [float("nan"), float("inf")], "b": b"\x00\xff", "$nd": 1, "o": {"$t": 2},
    }  # fmt: skip
    back = typed_json.loads(typed_json.dumps(value))
    assert back["a"].dtype == np.int16 and back["a"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert isinstance(back["s"], np.float32) and back["t"] == (1, "x") and back["b"] == b"\x00\xff"
    assert math.isnan(back["f"][0]) and back["f"][1] == math.inf
    assert back["$nd"] == 1 and back["o"] == {"$t": 2}
    with pytest.raises(typed_json.TypedJSONError, match=r"\$\.k: a object cannot be kept"):
        typed_json.dumps({"k": object()})
    bad = '{"$nd": {"dtype": "<f8", "shape": [1000000000], "data": ""}}'
    with pytest.raises(typed_json.TypedJSONError, match="needs 8000000000 bytes, has 0"):
        typed_json.loads(bad)
    with pytest.raises(typed_json.TypedJSONError, match="not a number type"):
        typed_json.loads('{"$nd": {"dtype": "O", "shape": [], "data": ""}}')


def test_large_rows_are_read_in_chunks_of_bounded_size(tmp_path: Path) -> None:
    """65,536 image rows would be gigabytes: chunks are cut by bytes too (CHUNK_BYTES)."""
    from trajledger.ledger.rollouts import readers

    frames = np.zeros((40, 64, 64, 3), np.uint8)
    table = pa.table({
        "episode_id": ["e"] * 40, "step": list(range(40)),
        "obs": pa.FixedShapeTensorArray.from_numpy_ndarray(frames),
        "reward": [0.0] * 40, "terminated": [i == 39 for i in range(40)], "truncated": [False] * 40,
    })  # fmt: skip
    pq.write_table(table, tmp_path / "img.parquet", row_group_size=40)
    old = readers.CHUNK_BYTES
    readers.CHUNK_BYTES = 64 * 64 * 3 * 10  # about ten frames a chunk
    try:
        sizes = [c.steps.num_rows for c in iter_rollout_chunks(tmp_path / "img.parquet")]
    finally:
        readers.CHUNK_BYTES = old
    assert 3 <= len(sizes) <= 6 and sum(sizes) == 40


@pytest.mark.parametrize("fmt", ["arrow", "hdf5"])
def test_minari_total_steps_is_what_minari_wrote(minari_root: Path, fmt: str) -> None:
    """The recording bar's total for a Minari directory: its metadata.json's ``total_steps``,
    read without minari, from the data directory or the dataset's."""
    src = data_dir(minari_root, "cartpole", fmt)
    steps = minari.MinariDataset(src).total_steps
    assert minari_total_steps(src) == minari_total_steps(src.parent) == steps > 0


@pytest.mark.parametrize("meta", ['{"data_format": "arrow"}', '{"data_format": "arrow", '
                                  '"total_steps": true}', '{"data_format": "arrow", '
                                  '"total_steps": -3}', '{"data_format": "arrow", '
                                  '"total_steps": "12"}', '["data_format"]', '{"data_format": '])
def test_minari_total_steps_none_when_not_stated(tmp_path: Path, meta: str) -> None:
    (tmp_path / "metadata.json").write_text(meta)
    assert minari_total_steps(tmp_path) is None
    assert minari_total_steps(tmp_path / "absent") is None


@pytest.mark.parametrize(("fmt", "seed", "want"), [
    *(("arrow", s, f"episode 0: seed {s!r}, want an integer within int64")
      for s in (1 << 63, float("inf"), float("nan"), 1.5)),
    ("hdf5", 1 << 63, "episode 0: seed 9223372036854775808, want an integer within int64"),
    ("hdf5", float("inf"), "cannot be read: OverflowError('cannot convert float infinity"),
])  # fmt: skip
def test_a_minari_seed_that_is_no_int64_integer_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, seed: Any, want: str
) -> None:
    """An episode's seed past int64 or infinite ended in OverflowError (a BUG line through
    the CLI), 1.5 was recorded as 1, NaN refused as an unreadable dataset: each is a refusal
    naming the episode and its seed. (minari's own HDF5 storage takes `int` of the seed: there
    an infinity is refused as unreadable, and 1.5 is 1 before this reader sees it.)"""
    from minari.data_collector import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    env = gym.make("CartPole-v1")
    (_, obs, act, rew, te, tr, _), = play(env, [0])
    buffer = EpisodeBuffer(seed=seed, observations=np.stack(obs), actions=np.array(act),
                           rewards=rew, terminations=te, truncations=tr, infos={})  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = minari.create_dataset_from_buffers(
            f"test/seeds-{fmt}-v0", [buffer], env=env, algorithm_name="random",
            author="tester", author_email="t@example.org", code_permalink="https://e.org/c",
            description="fixture", data_format=fmt,
        )  # fmt: skip
    with pytest.raises(RolloutValidationError) as info:
        list(iter_rollout_chunks(Path(ds.storage.data_path)))
    assert want in str(info.value)
