"""End to end: files shaped as the newest outside writers write them, recorded by ``record``.

Each input is built here from the writer's own code (package, version, module and function named
in a comment above it; read from the released wheel, never imported), recorded through the CLI
(auto-detected, and with ``--format``), and the stored steps and episodes compared value by value
with what the writer meant; or refused with one line per problem, exit 1, the ledger unchanged.
No test needs the network or the writer packages.
"""

from __future__ import annotations

import io
import json
import math
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import testkit
from click.testing import CliRunner, Result

from trajledger import Ledger
from trajledger.runner.cli import main

KEY = ("--key", "alice")
REC = ("--env", "cart@1", "--policy", "p0", *KEY)


@pytest.fixture
def home(alice_home: Path) -> Path:
    """A ledger with key alice (encrypted), environment cart@1 (tests/e2e/conftest.py)."""
    return alice_home


def run(runner: CliRunner, home: Path, *args: str | Path) -> Result:
    return runner.invoke(main, ["--ledger", str(home), *map(str, args)], prog_name="trajledger")


def recorded(
    runner: CliRunner, home: Path, *args: str | Path, env: str = "cart@1"
) -> dict[str, list[dict[str, Any]]]:
    """Record (must succeed) and return the stored ``episodes`` and ``steps`` as rows."""
    r = run(runner, home, "record", *args, "--env", env, *REC[2:])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    digest = r.stdout.strip()
    show = run(runner, home, "show", digest, "--json")
    assert show.exit_code == 0, show.output
    files = {f["path"]: f["digest"] for f in json.loads(show.stdout)["files"]}
    store = Ledger.open(home).store
    return {
        name: pq.read_table(io.BytesIO(store.get_verified(files[f"{name}.parquet"]))).to_pylist()
        for name in ("episodes", "steps")
    }


def refused(runner: CliRunner, home: Path, args: list[str | Path], stderr: str) -> None:
    """``record ARGS`` exits 1 with exactly ``stderr``, no traceback, the ledger unchanged."""
    before = testkit.snapshot(home)
    r = run(runner, home, "record", *args, *REC)
    assert (r.exit_code, r.stderr, r.stdout) == (1, stderr, ""), r.output
    assert "Traceback" not in r.output
    assert testkit.snapshot(home) == before


def fail_lines(subject: Path | str, problems: list[str]) -> str:
    n = len(problems)
    return f"FAIL: {subject}: {n} problem{'s' if n != 1 else ''} (rollout schema v3)\n" + "".join(
        f"FAIL:   {p}\n" for p in problems
    )


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    # json.dumps(entry, ensure_ascii=False) + "\n", as verl writes each line
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


# -- verl 0.9.1 ---------------------------------------------------------------------------------
#
# verl 0.9.1, verl/trainer/ppo/ray_trainer.py, RayPPOTrainer._validate: every validation sample's
# score is appended to reward_extra_infos_dict["reward"], and _write_generations writes each key
# of that dict of the batch's length beside input, output, gts, score and step; so with
# trainer.validation_data_dir set, every line of DIR/<step>.jsonl holds both "score" and
# "reward", the same number. verl/trainer/ppo/v1/trainer_base.py (the v1 trainer's validation)
# does the same and adds "uid" ("{sample}_{rollout}_{output}"); extra infos a sample lacks are
# None.

VERL_VALIDATION = [
    {"input": "user\nSolve 2+2.", "output": "4", "gts": "4", "score": 1.0, "step": 0,
     "reward": 1.0, "acc": True, "pred": "4"},
    {"input": "user\nSolve 5-9.", "output": "4", "gts": "-4", "score": 0.0, "step": 0,
     "reward": 0.0, "acc": False, "pred": "4"},
    {"input": "user\nHi", "output": "", "gts": None, "score": 0.25, "step": 0,
     "reward": 0.25, "acc": None, "pred": None, "uid": "s7_0_1"},
]  # fmt: skip


@pytest.mark.parametrize("fmt", [(), ("--format", "verl-jsonl")], ids=["detected", "format"])
def test_verl_validation_dump_records_score_once(
    runner: CliRunner, home: Path, tmp_path: Path, fmt: tuple[str, ...]
) -> None:
    src = jsonl(tmp_path / "0.jsonl", VERL_VALIDATION)
    got = recorded(runner, home, src, *fmt)
    eps = got["episodes"]
    assert [(e["episode_id"], e["return"], e["policy_version"], e["group_id"]) for e in eps] == [
        ("line-1", 1.0, "0", None),
        ("line-2", 0.0, "0", None),
        ("line-3", 0.25, "0", "s7_0_1"),
    ]
    assert [e["judge_scores"] for e in eps] == [[("acc", 1.0)], [("acc", 0.0)], None]
    assert [dict(e["extras"]) for e in eps] == [
        {"gts": '"4"', "acc": "true", "pred": '"4"'},
        {"gts": '"-4"', "acc": "false", "pred": '"4"'},
        {"uid": '"s7_0_1"'},
    ]
    steps = got["steps"]
    assert [(s["episode_id"], s["step"], s["role"], s["content"], s["reward"]) for s in steps] == [
        ("line-1", 0, "user", "user\nSolve 2+2.", 0.0),
        ("line-1", 1, "assistant", "4", 1.0),
        ("line-2", 0, "user", "user\nSolve 5-9.", 0.0),
        ("line-2", 1, "assistant", "4", 0.0),
        ("line-3", 0, "user", "user\nHi", 0.0),
        ("line-3", 1, "assistant", "", 0.25),
    ]


def test_verl_score_and_reward_that_differ_are_refused(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    rows = [dict(VERL_VALIDATION[0], reward=0.5), dict(VERL_VALIDATION[1], reward="0.0")]
    src = jsonl(tmp_path / "0.jsonl", rows)
    refused(runner, home, [src], fail_lines(src, [
        "line 1, column 'reward': both score (1.0) and reward (0.5) given, and they differ; want "
        "one, or the same number (verl's validation dumps write both)",
        "line 2, column 'reward': both score (0.0) and reward ('0.0') given, and they differ; "
        "want one, or the same number (verl's validation dumps write both)",
    ]))  # fmt: skip


# -- minari 0.5.4 -------------------------------------------------------------------------------
#
# minari 0.5.4, minari/dataset/minari_storage.py, MinariStorage.new(..., jpeg_encoding=True):
# "jpeg_encoding" is written to metadata.json (True by default in create_dataset_from_buffers,
# create_dataset_from_collector_env and DataCollector), and an image space (is_image_space: a
# uint8 Box of 2 or 3 dimensions, at least 32 x 32, low 0, high 255) is stored JPEG-encoded by
# both backends (_storages/arrow_storage.py _encode_space, hdf5_storage.py
# _add_episode_to_group): lossy. Reading decodes it (_decode_space).


def _image_dataset(fmt: str, jpeg: bool) -> tuple[Path, np.ndarray]:
    """Two episodes of three steps of 32 x 32 RGB images, as minari writes them (under
    MINARI_DATASETS_PATH); and the images the environment gave, final observations included."""
    import minari
    from minari.data_collector import EpisodeBuffer

    frames = (np.arange(2 * 4 * 32 * 32 * 3).reshape(2, 4, 32, 32, 3) * 7 % 256).astype(np.uint8)
    buffers = [
        EpisodeBuffer(seed=e, observations=frames[e], actions=np.array([e, e, e], np.int64),
                      rewards=[0.5, 0.25, 1.0], terminations=[False, False, True],
                      truncations=[False] * 3, infos={})
        for e in range(2)
    ]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = minari.create_dataset_from_buffers(
            f"test/img-{fmt}-v0", buffers,
            observation_space=gym.spaces.Box(0, 255, (32, 32, 3), np.uint8),
            action_space=gym.spaces.Discrete(2), algorithm_name="random", author="tester",
            author_email="t@example.org", code_permalink="https://example.org/code",
            data_format=fmt, jpeg_encoding=jpeg,
        )  # fmt: skip
    return Path(ds.storage.data_path), frames


@pytest.mark.parametrize("jpeg", [True, False], ids=["jpeg", "raw"])
@pytest.mark.parametrize("fmt", ["arrow", "hdf5"])
def test_minari_image_dataset_says_whether_its_images_are_jpeg(
    runner: CliRunner,
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fmt: str,
    jpeg: bool,
) -> None:
    import minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    data, frames = _image_dataset(fmt, jpeg)
    # An environment of the dataset's spaces (a 32 x 32 x 3 image Box, not cart@1's CartPole)
    r = run(runner, home, "env", "register", "img", "--version", "1", "--from-minari",
            data.parent, *KEY)
    assert r.exit_code == 0, r.output
    got = recorded(runner, home, data.parent, env="img@1")
    # The observations are what minari reads back, value by value (the decoded JPEG when
    # jpeg_encoding is on: not the frames the environment gave, so the record must say so).
    read = list(minari.dataset.minari_storage.MinariStorage.read(data).get_episodes([0, 1]))
    want = [o for ep in read for o in np.asarray(ep["observations"])[:-1]]
    stored = [np.asarray(s["obs"], np.uint8).reshape(32, 32, 3) for s in got["steps"]]
    assert len(stored) == len(want) == 6
    assert all(np.array_equal(a, b) for a, b in zip(stored, want, strict=True))
    finals = [np.asarray(e["final_obs"], np.uint8).reshape(32, 32, 3) for e in got["episodes"]]
    for a, ep in zip(finals, read, strict=True):
        assert np.array_equal(a, np.asarray(ep["observations"])[-1])
    assert np.array_equal(np.stack(want[:3]), frames[0, :3]) is (not jpeg)
    show = run(runner, home, "show", "rollouts-img@1-p0", "--json")
    predicate = json.loads(show.stdout)["predicate"]
    source = (json.loads(predicate) if isinstance(predicate, str) else predicate)["source"]
    assert source["minari"]["jpeg_encoding"] is jpeg
    assert source["minari"]["data_format"] == fmt
    # export writes the values as recorded, raw (never JPEG again): minari reads them back
    out = tmp_path / "export"
    r = run(runner, home, "export", "rollouts-img@1-p0", "--format", "minari", "--out", out)
    assert r.exit_code == 0, r.output
    assert json.loads((out / "data" / "metadata.json").read_text())["jpeg_encoding"] is False
    back = list(minari.dataset.minari_storage.MinariStorage.read(out / "data").get_episodes([0, 1]))
    for a, b in zip(back, read, strict=True):
        assert np.array_equal(np.asarray(a["observations"]), np.asarray(b["observations"]))


def test_verl_nan_score_and_mapped_extra_names_are_refused(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    # json.dumps(entry, ensure_ascii=False) allows NaN: verl writes a NaN score as NaN
    nan = tmp_path / "nan.jsonl"
    nan.write_text(json.dumps({"input": "u", "output": "a", "gts": None, "score": math.nan,
                               "step": 2}) + "\n")  # fmt: skip
    refused(runner, home, [nan], fail_lines(nan, [
        'line 1: not valid JSON: NaN is not valid JSON (field "score"); write null for a number '
        "that is missing"]))
    extra = jsonl(tmp_path / "3.jsonl", [
        {"input": "u", "output": "a", "gts": "1", "score": 1.0, "step": 3, "success": 1.0},
        {"input": "u", "output": "b", "gts": "1", "score": 0.0, "step": 3, "task_id": 17},
    ])  # fmt: skip
    refused(runner, home, [extra], fail_lines(extra, [
        "line 1, column 'success': number, want a boolean",
        "line 2, column 'task_id': number, want a string",
    ]))  # fmt: skip


# -- TRL 1.16.0 ---------------------------------------------------------------------------------
#
# trl 1.16.0, trl/trainer/grpo_trainer.py, GRPOTrainer.log (log_completions=True): a dict of
# "step" ([global_step] * n), "prompt" and "completion" (each through
# trl/trainer/utils.py strip_images_from_messages: an image block becomes {"type": "image"}),
# one column per reward function (rewards_per_func[:, i].tolist(): float32 values, NaN where the
# function returned None), the log_extra columns and "advantage", made a pandas DataFrame and
# written with DataFrame.to_parquet to OUTPUT_DIR/completions/completions_{step:05d}.parquet.
# Tool-calling completions (_tool_call_loop): the assistant message with "tool_calls"
# ([{"type": "function", "function": {"name", "arguments": dict}}]), then {"role": "tool",
# "name": name, "content": str(result)}, then the next assistant message.


def _completions(path: Path, table: dict[str, list[Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(table).to_parquet(path)
    return path


def _text(block: str) -> dict[str, Any]:
    return {"type": "text", "text": block}


@pytest.mark.parametrize("fmt", [(), ("--format", "trl-completions")], ids=["detected", "format"])
def test_trl_multimodal_tool_calling_table(
    runner: CliRunner, home: Path, tmp_path: Path, fmt: tuple[str, ...]
) -> None:
    prompts = [
        [{"role": "user", "content": [{"type": "image"}, _text("What is in the image?")]}],
        [{"role": "system", "content": [_text("be brief")]},
         {"role": "user", "content": [_text("2+2? then look up 'cat'")]}],
    ]  # fmt: skip
    completions = [
        [{"role": "assistant", "content": [_text("A cat.")]}],
        [{"role": "assistant", "content": [_text("")], "tool_calls": [
            {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
         {"role": "tool", "name": "add", "content": [_text("4")]},
         {"role": "assistant", "content": [_text("")], "tool_calls": [
            {"type": "function", "function": {"name": "search", "arguments": {"q": "cat"}}}]},
         {"role": "tool", "name": "search", "content": [_text("a small feline")]},
         {"role": "assistant", "content": [_text("4; a small feline")]}],
    ]  # fmt: skip
    src = _completions(tmp_path / "completions" / "completions_00003.parquet", {
        "step": [3, 3], "prompt": prompts, "completion": completions,
        "accuracy_reward": [1.0, math.nan], "format_reward": [0.5, 0.25],
        "advantage": [0.7, -0.7],
    })  # fmt: skip
    got = recorded(runner, home, src, *fmt)
    eps = got["episodes"]
    # TRL's step is the trainer's step at the log, not the generating policy's: kept as the
    # extra `step`; the policy version is record --policy's.
    assert [(e["episode_id"], e["policy_version"], e["return"]) for e in eps] == [
        ("row-0", "p0", 1.5), ("row-1", "p0", 0.25)
    ]  # fmt: skip
    assert [e["judge_scores"] for e in eps] == [
        [("accuracy_reward", 1.0), ("format_reward", 0.5)], [("format_reward", 0.25)]
    ]  # fmt: skip
    assert [dict(e["extras"]) for e in eps] == [{"step": "3", "advantage": "0.7"},
                                                {"step": "3", "advantage": "-0.7"}]
    rows = [(s["episode_id"], s["step"], s["role"], s["content"], s["tool_calls"],
             s["tool_results"], s["reward"]) for s in got["steps"]]  # fmt: skip
    call = '[{{"type":"function","function":{{"name":"{}","arguments":{}}}}}]'
    assert rows == [
        # pyarrow's struct union: the image block's "text" is null in the file
        ("row-0", 0, "user", '[{"type":"image","text":null},'
         '{"type":"text","text":"What is in the image?"}]', None, None, 0.0),
        ("row-0", 1, "assistant", '[{"type":"text","text":"A cat."}]', None, None, 1.5),
        ("row-1", 0, "system", '[{"type":"text","text":"be brief"}]', None, None, 0.0),
        ("row-1", 1, "user", '[{"type":"text","text":"2+2? then look up \'cat\'"}]', None, None,
         0.0),
        # ... and each call's arguments carry every argument name of the file's calls
        ("row-1", 2, "assistant", '[{"type":"text","text":""}]',
         call.format("add", '{"a":2,"b":2,"q":null}'), None, 0.0),
        ("row-1", 3, "tool", '[{"type":"text","text":"4"}]', None, '{"name":"add"}', 0.0),
        ("row-1", 4, "assistant", '[{"type":"text","text":""}]',
         call.format("search", '{"a":null,"b":null,"q":"cat"}'), None, 0.0),
        ("row-1", 5, "tool", '[{"type":"text","text":"a small feline"}]', None,
         '{"name":"search"}', 0.0),
        ("row-1", 6, "assistant", '[{"type":"text","text":"4; a small feline"}]', None, None,
         0.25),
    ]  # fmt: skip


def test_trl_column_types_kept_exactly(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    # The Arrow types a completions table (or a copy of it through pyarrow) may hold:
    # dictionary-encoded and view strings, int32 step, float16 and float32 scores, a NaN
    # advantage, an empty completion, a log_extra column no row filled (type null)
    r16 = np.array([0.1, np.nan, 1 / 3], np.float16)
    r32 = np.array([0.1, 0.2, np.nan], np.float32)
    src = tmp_path / "completions_00001.parquet"
    pq.write_table(pa.table({
        "step": pa.array([1, 1, 1], pa.int32()),
        "prompt": pa.array(["p", "p", "q"]).dictionary_encode(),
        "completion": pa.array(["a", "b", ""], pa.string_view()),
        "r16": pa.array(r16), "r32": pa.array(r32),
        "note": pa.nulls(3),
        "advantage": pa.array([math.nan, 0.5, -0.5]),
    }), src)  # fmt: skip
    got = recorded(runner, home, src)
    f16, f32 = [float(x) for x in r16], [float(x) for x in r32]
    assert [(e["return"], e["judge_scores"], dict(e["extras"])) for e in got["episodes"]] == [
        (math.fsum([f16[0], f32[0]]), [("r16", f16[0]), ("r32", f32[0])],
         {"step": "1", "advantage": '{"$f":"nan"}'}),
        (f32[1], [("r32", f32[1])], {"step": "1", "advantage": "0.5"}),
        (f16[2], [("r16", f16[2])], {"step": "1", "advantage": "-0.5"}),
    ]  # fmt: skip
    assert [s["content"] for s in got["steps"]] == ["p", "a", "p", "b", "q", ""]


def test_trl_distillation_table_and_empty_table(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    # trl 1.16.0, trl/trainer/distillation_trainer.py, DistillationTrainer.log: step, prompt,
    # completion only (decoded texts)
    src = _completions(tmp_path / "d" / "completions_00004.parquet",
                       {"step": [4], "prompt": ["Say hi"], "completion": ["hi"]})  # fmt: skip
    got = recorded(runner, home, src)
    assert [(e["policy_version"], e["return"], e["extras"]) for e in got["episodes"]] == [
        ("p0", None, [("step", "4")])
    ]
    assert [(s["role"], s["content"], s["reward"]) for s in got["steps"]] == [
        ("user", "Say hi", None), ("assistant", "hi", None)
    ]  # fmt: skip
    empty = _completions(tmp_path / "e" / "completions_00005.parquet",
                         {"step": [], "prompt": [], "completion": [], "advantage": []})  # fmt: skip
    problem = "the input holds no steps, want at least one"
    refused(runner, home, [empty], fail_lines(empty, [problem]))


def test_trl_dataset_types_not_recorded(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    # TRL's dataset formats (its documentation, "Dataset formats and types"): stepwise
    # supervision (prompt, completions, labels) and language modeling (text) have no
    # prompt/completion pair to make steps of
    stepwise = {"prompt": ["Solve"], "completions": [["s1", "s2"]], "labels": [[True, False]]}
    for name, table in (
        ("stepwise", stepwise),
        ("lm", {"text": ["The sky is blue."]}),
    ):
        src = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table(table), src)
        cols = sorted(table)
        refused(runner, home, [src], fail_lines(src, [
            f"cannot tell the format from the columns {cols}: want the rollout schema (episode_id, "
            "step, ...), or the columns of a chat, TRL or verl record (see "
            "schemas/rollout-inputs.md)"
        ]))  # fmt: skip
