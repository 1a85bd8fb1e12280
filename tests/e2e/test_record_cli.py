"""End to end: ``trajledger env/evaluator register, record, dataset create, show`` via CliRunner.

Happy paths: every input format recorded and read back from the store; references resolved by
NAME@VERSION, full digest and prefix. Refusals: one test per bad input of issue 4, each asserting
the exit code (DESIGN §8), the exact stderr (row and column where relevant), no traceback, and
that the ledger did not change: the same log size (``log info --json``) and the same objects.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import testkit
from click.testing import CliRunner, Result

from trajledger import Ledger
from trajledger.runner.cli import main

Columns = dict[str, list[Any]]
KEY = ("--key", "alice")
REC = ("--env", "cart@1", "--policy", "p0", *KEY)
"""Options of a plain ``record``."""


def run(runner: CliRunner, home: Path, *args: str | Path) -> Result:
    return runner.invoke(main, ["--ledger", str(home), *map(str, args)], prog_name="trajledger")


def expect(result: Result, code: int, stderr: str, stdout: str | None = None) -> None:
    """Exit code, exact stderr, and no escaped exception or traceback."""
    assert result.stderr == stderr, result.output
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    if stdout is not None:
        assert result.stdout == stdout


def refused(
    runner: CliRunner, home: Path, args: Sequence[str | Path], code: int, stderr: str
) -> None:
    """Run a command that must be refused, and check that the ledger did not change."""
    before = testkit.snapshot(home)
    expect(run(runner, home, *args), code, stderr, "")
    assert testkit.snapshot(home) == before


# -- inputs ---------------------------------------------------------------------------------------


def classic(episodes: int = 2, steps: int = 3, base: int = 0) -> Columns:
    """The minimal classic form: distinct content in every episode (no duplicates)."""
    cols: Columns = {
        k: [] for k in ("episode_id", "step", "obs", "action", "reward", "terminated", "truncated")
    }
    for e in range(base, base + episodes):
        for s in range(steps):
            cols["episode_id"].append(f"ep-{e}")
            cols["step"].append(s)
            cols["obs"].append([0.0, float(e), 0.25, float(s)])  # fits cart@1: CartPole's Box
            cols["action"].append([float(s % 2)])
            cols["reward"].append(1.0 + e)
            cols["terminated"].append(s == steps - 1)
            cols["truncated"].append(False)
    return cols


def sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def write_parquet(path: Path, cols: Columns | pa.Table) -> Path:
    pq.write_table(cols if isinstance(cols, pa.Table) else pa.table(cols), path)
    return path


def jsonl(path: Path, *lines: dict[str, Any] | bytes) -> Path:
    path.write_bytes(
        b"".join((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n" for x in lines)
    )
    return path


def chat(episode_id: str, answer: str = "4", reward: float = 1.0) -> dict[str, Any]:
    return {
        "episode_id": episode_id,
        "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": answer}],
        "reward": reward,
    }


CHAT = [
    {
        "episode_id": "ep-1",
        "task_id": "math-7",
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "logprob": -0.25},
        ],
        "reward": 1.0,
        "judge_scores": {"correct": 1.0},
        "usage": {"prompt_tokens": 30, "completion_tokens": 2},
        "cost_usd": 0.002,
        "latency_ms": 120,
        "termination_reason": "success",
        "language": "en",
        "task_type": "math",
        "model_id": "m-1",
    },
    {
        "episode_id": "ep-2",
        "task_id": "web-3",
        "messages": [
            {"role": "system", "content": "You browse."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "name": "weather", "content": "18C, sunny"},
            {"role": "assistant", "content": "18C and sunny."},
        ],
        "reward": 0.5,
        "termination_reason": "max_turns",
        "language": "en",
        "task_type": "web",
    },
]
TRL = [  # rows of TRL's completions table, as pandas writes them as JSON lines
    {
        "step": 120,
        "prompt": "Write a haiku about rain.",
        "completion": "Soft rain on the roof",
        "format": 0.2,
        "quality": 0.5,
        "advantage": 0.1,
    },
    {
        "step": 120,
        "prompt": [{"role": "user", "content": "2+3?"}],
        "completion": [{"role": "assistant", "content": "5"}],
        "format": None,
        "quality": 1.0,
        "advantage": -0.1,
    },
]
VERL = [
    {"input": "Solve 3*4.", "output": "12", "score": 1.0, "step": 7, "acc": True, "gts": "12"},
    {"input": "Solve 5-9.", "output": "4", "score": 0.0, "step": 7, "acc": False, "gts": "-4"},
]


@pytest.fixture
def home(alice_home: Path) -> Path:
    """A copy of a ledger with key alice (encrypted), environment cart@1 and evaluator judge@1
    (tests/e2e/conftest.py); this test's user built it; its key's passphrase set."""
    return alice_home


def record(
    runner: CliRunner, home: Path, *inputs: Path, policy: str = "p0", extra: tuple[str, ...] = ()
) -> str:
    """Record and return the batch digest: the last (and only) stdout line."""
    r = run(runner, home, "record", *inputs, "--env", "cart@1", "--policy", policy, *KEY, *extra)
    assert r.exit_code == 0, r.output
    *_, digest = r.stdout.splitlines()
    assert r.stdout == digest + "\n"
    assert digest.startswith("sha256:") and len(digest) == 71
    return digest


def stored_table(home: Path, batch: str, name: str) -> pa.Table:
    """A table of a recorded batch, read from the store through its manifest."""
    ledger = Ledger.open(home)
    files = {f["path"]: f["digest"] for f in show_json(home, batch)["files"]}
    return pq.read_table(io.BytesIO(ledger.store.get_verified(files[name])))


def show_json(home: Path, ref: str) -> dict[str, Any]:
    r = run(CliRunner(), home, "show", ref, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)  # type: ignore[no-any-return]


# -- happy paths ----------------------------------------------------------------------------------


def test_register_environment_and_evaluator(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    rules = tmp_path / "rules.txt"
    rules.write_text("reward 1 per step\n")
    code = tmp_path / "env.py"
    code.write_text("ENV = 'grid'\n")
    args = ["env", "register", "grid", "--version", "2.0", "--source", "https://example.com/grid"]
    r = run(runner, home, *args, "--file", code, "--rules", rules, *KEY)
    expect(r, 0, "OK: environment grid@2.0 recorded at log index 2\n")
    info = show_json(home, "grid@2.0")
    assert r.stdout == info["digest"] + "\n"
    assert info["kind"] == "environment"
    assert info["predicate"]["rulesDigest"] == sha256(rules)
    assert info["predicate"]["source"] == "https://example.com/grid"
    assert [f["path"] for f in info["files"]] == ["env.py", "rules.txt"]

    rubric = tmp_path / "rubric.md"
    rubric.write_text("1 if correct\n")
    judge = "evaluator register gpt-judge --version 3 --kind llm-judge --model judge-model-1"
    r = run(runner, home, *judge.split(), "--rubric", rubric, *KEY)
    expect(r, 0, "OK: evaluator gpt-judge@3 recorded at log index 3\n")
    p = show_json(home, "gpt-judge@3")["predicate"]
    assert (p["kind"], p["modelId"]) == ("llm-judge", "judge-model-1")
    assert p["rubricDigest"] == sha256(rubric)

    # Without files, a descriptor is the environment's content.
    env = show_json(home, "cart@1")
    assert [f["path"] for f in env["files"]] == ["environment.json"]
    assert env["predicate"]["gymnasiumId"] == "CartPole-v1"


def test_record_minimal_parquet(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    cols = classic()
    src = write_parquet(tmp_path / "min.parquet", cols)
    args = "--env cart@1 --evaluator judge@1 --policy ppo-7 --licence CC-BY-4.0 --key alice"
    r = run(runner, home, "record", src, *args.split())
    expect(r, 0, "OK: batch of 2 episode(s), 6 step(s) recorded at log index 2\n")
    digest = r.stdout.strip()
    info = show_json(home, digest)
    env, judge = show_json(home, "cart@1"), show_json(home, "judge@1")
    p = info["predicate"]
    assert info["kind"] == "rollout-batch"
    assert p["environment"] == {"name": "cart", "version": "1", "digest": env["digest"]}
    assert p["evaluator"] == {"name": "judge", "version": "1", "digest": judge["digest"]}
    assert (p["policyVersion"], p["licence"], p["counts"]) == (
        "ppo-7",
        "CC-BY-4.0",
        {"steps": 6, "episodes": 2},
    )
    assert p["stats"]["return_mean"] == 4.5  # returns 3 and 6
    assert [f["path"] for f in info["files"]] == ["episodes.parquet", "steps.parquet"]

    steps = stored_table(home, digest, "steps.parquet")
    assert steps.column("episode_id").to_pylist() == cols["episode_id"]
    assert steps.column("obs").to_pylist() == cols["obs"]
    assert steps.column("reward").to_pylist() == cols["reward"]
    assert steps.column("is_first").to_pylist() == [True, False, False] * 2
    episodes = stored_table(home, digest, "episodes.parquet").to_pylist()
    assert [(e["episode_id"], e["return"], e["num_steps"]) for e in episodes] == [
        ("ep-0", 3.0, 3),
        ("ep-1", 6.0, 3),
    ]
    # The recorder fills the versions the input left null.
    assert {(e["env_version"], e["policy_version"]) for e in episodes} == {(env["digest"], "ppo-7")}


def test_record_full_schema_with_episode_file(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    from trajledger.ledger.rollouts import EPISODE_ATTR_SCHEMA, STEP_SCHEMA

    rows = []
    for s in range(3):
        rows.append(
            {
                "episode_id": "e0",
                "step": s,
                "is_first": s == 0,
                "is_last": s == 2,
                "terminated": False,
                "truncated": s == 2,
                "reward": 0.5,
                "obs": [1.0, 2.0, 0.0, 0.0],  # a step of cart@1 (CartPole-v1)
                "action": [1.0],
                "action_logprob": -1.5,
                "timestamp": 1_700_000_000_000_000 + s,
                "latency_ms": 3.0,
                "role": None,
                "content": None,
                "tool_calls": None,
                "tool_results": None,
                "prompt_tokens": None,
                "completion_tokens": None,
                "model_id": "policy-net",
                "cost_usd": 0.01,
                "safety_interventions": s,
            }
        )
    steps_in = write_parquet(tmp_path / "steps.parquet", pa.Table.from_pylist(rows, STEP_SCHEMA))
    eps_in = write_parquet(
        tmp_path / "eps.parquet",
        pa.Table.from_pylist(
            [
                {
                    "episode_id": "e0",
                    "task_id": "level-3",
                    "seed": 42,
                    "env_version": "CartPole-v1",
                    "judge_scores": [("safety", 0.9)],
                    "language": "en",
                    "task_type": "control",
                }
            ],
            EPISODE_ATTR_SCHEMA,
        ),
    )
    digest = record(runner, home, steps_in, extra=("--episodes", str(eps_in)))
    steps = stored_table(home, digest, "steps.parquet")
    assert (
        steps.schema.equals(STEP_SCHEMA)
        and steps.to_pylist() == pa.Table.from_pylist(rows, STEP_SCHEMA).to_pylist()
    )
    (ep,) = stored_table(home, digest, "episodes.parquet").to_pylist()
    assert ep == {
        "episode_id": "e0",
        "task_id": "level-3",
        "env_version": "CartPole-v1",  # kept as given
        "policy_version": "p0",
        "seed": 42,
        "return": 1.5,
        "num_steps": 3,
        "termination_reason": "truncated",
        "judge_scores": [("safety", 0.9)],
        "cost_usd": pytest.approx(0.03),
        "language": "en",
        "task_type": "control",
        "invalid": False,
        "group_id": None,
        "label": None,
        "success": None,
        "final_obs": None,
        "reset_info": None,
        "extras": None,
    }
    assert show_json(home, digest)["predicate"]["seeds"] == ["42"]
    meta = pq.ParquetFile(
        io.BytesIO(
            Ledger.open(home).store.get_verified(
                {f["path"]: f["digest"] for f in show_json(home, digest)["files"]}["steps.parquet"]
            )
        )
    )
    col = meta.metadata.row_group(0).column(steps.schema.get_field_index("reward"))
    assert col.compression == "ZSTD" and "BYTE_STREAM_SPLIT" in col.encodings


@pytest.mark.parametrize(
    ("lines", "steps", "episodes"),
    [
        pytest.param(
            CHAT,
            7,
            [
                ("ep-1", 1.0, "success", None, [("correct", 1.0)]),
                ("ep-2", 0.5, "max_turns", None, None),
            ],
            id="chat",
        ),
        pytest.param(
            TRL,
            4,
            [
                # (TRL's step is the log's, kept as an extra: the policy is --policy's)
                ("line-1", 0.7, "terminated", None, [("format", 0.2), ("quality", 0.5)]),
                ("line-2", 1.0, "terminated", None, [("quality", 1.0)]),
            ],
            id="trl",
        ),
        pytest.param(
            VERL,
            4,
            [
                ("line-1", 1.0, "terminated", "7", [("acc", 1.0)]),
                ("line-2", 0.0, "terminated", "7", [("acc", 0.0)]),
            ],
            id="verl",
        ),
    ],
)
def test_record_jsonl_dumps(
    runner: CliRunner,
    home: Path,
    tmp_path: Path,
    lines: list[dict[str, Any]],
    steps: int,
    episodes: list[tuple[Any, ...]],
) -> None:
    src = jsonl(tmp_path / "dump.jsonl", *lines)
    r = run(runner, home, "record", src, "--env", "cart@1", "--policy", "llm-1", *KEY)
    expect(r, 0, f"OK: batch of 2 episode(s), {steps} step(s) recorded at log index 2\n")
    got = stored_table(home, r.stdout.strip(), "episodes.parquet").to_pylist()
    assert [
        (
            e["episode_id"],
            e["return"],
            e["termination_reason"],
            e["policy_version"] if e["policy_version"] != "llm-1" else None,
            e["judge_scores"],
        )
        for e in got
    ] == episodes
    table = stored_table(home, r.stdout.strip(), "steps.parquet")
    assert table.num_rows == steps and table.column("obs").null_count == steps


def test_chat_columns_round_trip(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    digest = record(runner, home, jsonl(tmp_path / "chat.jsonl", *CHAT))
    rows = stored_table(home, digest, "steps.parquet").to_pylist()
    assert [r["role"] for r in rows] == [
        "user",
        "assistant",
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert (
        rows[1]["prompt_tokens"],
        rows[1]["completion_tokens"],
        rows[1]["model_id"],
        rows[1]["latency_ms"],
        rows[1]["action_logprob"],
    ) == (30, 2, "m-1", 120.0, -0.25)
    assert json.loads(rows[4]["tool_calls"])[0]["function"]["name"] == "weather"
    assert json.loads(rows[5]["tool_results"]) == {"tool_call_id": "c1", "name": "weather"}
    assert rows[6]["truncated"] and not rows[6]["terminated"]  # max_turns is a truncation


def test_dataset_create_reports_duplicate_episodes(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    a = record(runner, home, write_parquet(tmp_path / "a.parquet", classic()))
    # Batch b repeats the content of a's episode ep-1 under another id.
    cols = classic(episodes=1, base=1)
    cols["episode_id"] = ["copy"] * 3
    b_cols = {k: classic(episodes=1, base=5)[k] + cols[k] for k in cols}
    b = record(runner, home, write_parquet(tmp_path / "b.parquet", b_cols))
    first, second = sorted([a, b])
    dup, orig = ("'copy'", "'ep-1'") if first == a else ("'ep-1'", "'copy'")
    args = ["dataset", "create", "mix", "--version", "1", "--split", "train", "--key", "alice"]
    r = run(runner, home, *args, "--batch", a[7:19], "--batch", b)
    expect(
        r,
        0,
        f"WARNING: episode {dup} of batch {second[:19]}… duplicates episode {orig} of batch "
        f"{first[:19]}…\n"
        "OK: dataset mix@1 (train, 2 batch(es)) recorded at log index 4\n",
    )
    info = show_json(home, "mix@1")
    assert r.stdout == info["digest"] + "\n"
    assert info["predicate"]["batches"] == [first, second]
    assert (info["predicate"]["split"], info["predicate"]["purpose"]) == ("train", "train")


def test_show_by_name_digest_and_prefix(runner: CliRunner, home: Path) -> None:
    info = show_json(home, "cart@1")
    digest, envelope = info["digest"], info["envelope"]
    keyid = info["signers"][0]
    descriptor = info["files"][0]

    def dump(key: str) -> str:
        return json.dumps(info["predicate"][key], sort_keys=True)

    text = (
        "environment cart@1\n"
        f"  digest      {digest}\n"
        "  log index   0\n"
        f"  envelope    {envelope}\n"
        f"  signers     {keyid}\n"
        "  predicate   https://trajledger.dev/attestation/environment/v1\n"
        f"    actionSpace: {dump('actionSpace')}\n"
        f"    envSpec: {dump('envSpec')}\n"
        "    gymnasiumId: CartPole-v1\n"
        "    name: cart\n"
        f"    observationSpace: {dump('observationSpace')}\n"
        "    version: 1\n"
        f"  file        environment.json  {descriptor['size']} bytes  {descriptor['digest']}\n"
    )
    for ref in ("cart@1", digest, digest[7:], digest[:13], digest[7:13].upper()):
        expect(run(runner, home, "show", ref), 0, "", text)
        assert show_json(home, ref) == info
    assert set(info) == {
        "kind",
        "ref",
        "name",
        "version",
        "digest",
        "index",
        "envelope",
        "time",
        "signers",
        "origins",
        "predicateType",
        "predicate",
        "files",
        "status",
        "carries",  # out47 finding 1: what the record carries whole (here nothing)
    }
    assert info["carries"] == []
    assert info["origins"] == []
    assert (info["kind"], info["ref"], info["index"], info["status"]) == (
        "environment",
        "cart@1",
        0,
        [],
    )
    assert descriptor["present"] is True


def test_show_batch_by_its_name(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    digest = record(runner, home, write_parquet(tmp_path / "a.parquet", classic()))
    # The default name holds the environment's NAME@VERSION; it still resolves.
    info = show_json(home, "rollouts-cart@1-p0")
    assert (info["digest"], info["kind"]) == (digest, "rollout-batch")
    out = run(runner, home, "show", "rollouts-cart@1-p0").stdout
    assert '    counts: {"episodes": 2, "steps": 6}\n' in out


def test_record_again_is_idempotent(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    src = write_parquet(tmp_path / "a.parquet", classic())
    digest = record(runner, home, src)
    before = testkit.snapshot(home)
    r = run(runner, home, "record", src, *REC)
    expect(r, 0, "OK: batch of 2 episode(s), 6 step(s) already recorded at log index 2\n",
           digest + "\n")
    assert testkit.snapshot(home) == before


def test_validate_command(runner: CliRunner, tmp_path: Path) -> None:
    good = write_parquet(tmp_path / "a.parquet", classic())
    expect(
        run(runner, tmp_path / "no-ledger", "validate", good),
        0,
        "OK: 1 file(s): 6 step(s), 2 episode(s) valid\n",
        "",
    )
    bad = classic()
    bad["reward"][2] = math.nan
    path = write_parquet(tmp_path / "bad.parquet", bad)
    r = run(runner, tmp_path / "no-ledger", "validate", path, "--json")
    expect(
        r,
        1,
        f"FAIL: {path}: 1 problem (rollout schema v3)\n"
        "FAIL:   row 2, column 'reward': reward is nan, want a finite number\n",
    )
    assert json.loads(r.stdout) == {
        "ok": False,
        "steps": 0,
        "episodes": 0,
        "problems": [
            f"{path}: 1 problem (rollout schema v3)",
            "  row 2, column 'reward': reward is nan, want a finite number",
        ],
    }


# -- bad input: refused, nothing recorded ----------------------------------------------------------


def _drop_terminated(c: Columns) -> None:
    del c["terminated"]


def _string_reward(c: Columns) -> None:
    c["reward"] = [str(x) for x in c["reward"]]


def _nan_inf(c: Columns) -> None:
    c["reward"][1], c["reward"][4] = math.nan, -math.inf


def _no_final_step_first(c: Columns) -> None:
    c["terminated"][2] = False


def _gap(c: Columns) -> None:
    c["step"][1] = 2


def _repeat(c: Columns) -> None:
    c["step"][2] = 1


def _split_episode(c: Columns) -> None:
    for k in c:
        c[k] = c[k] + c[k][:3]


def _oversized(c: Columns) -> None:
    c["content"] = [None] * 6
    c["content"][3] = "x" * ((1 << 20) + 1)


BAD_PARQUET = {
    "missing-required-column": (
        _drop_terminated,
        ["column 'terminated': missing required column"],
    ),
    "wrong-type": (_string_reward, ["column 'reward': type string, want double"]),
    "nan-and-inf-rewards": (
        _nan_inf,
        [
            "row 1, column 'reward': reward is nan, want a finite number",
            "row 4, column 'reward': reward is -inf, want a finite number",
        ],
    ),
    "step-gap": (
        _gap,
        [
            "row 1, column 'step': episode 'ep-0': step 2 follows step 0; step 1 is missing",
            "row 2, column 'step': episode 'ep-0': step 2 follows step 2, want 3 (a repeat or a "
            "step back)",
        ],
    ),
    "step-repeat": (
        _repeat,
        [
            "row 2, column 'step': episode 'ep-0': step 1 follows step 1, want 2 (a repeat or a "
            "step back)",
        ],
    ),
    "duplicate-episode-id": (
        _split_episode,
        [
            "row 6, column 'episode_id': episode 'ep-0' appears again after other episodes; its "
            "steps must be contiguous",
        ],
    ),
    "oversized-field": (
        _oversized,
        [
            "row 3, column 'content': value has 1048577 bytes, over the limit of 1048576",
        ],
    ),
}


def fail_lines(subject: Path | str, problems: list[str]) -> str:
    n = len(problems)
    return f"FAIL: {subject}: {n} problem{'s' if n != 1 else ''} (rollout schema v3)\n" + "".join(
        f"FAIL:   {p}\n" for p in problems
    )


@pytest.mark.parametrize("case", sorted(BAD_PARQUET))
def test_bad_parquet_refused(runner: CliRunner, home: Path, tmp_path: Path, case: str) -> None:
    mutate, problems = BAD_PARQUET[case]
    cols = classic()
    mutate(cols)
    src = write_parquet(tmp_path / f"{case}.parquet", cols)
    refused(runner, home, ["record", src, *REC], 1, fail_lines(src, problems))


def test_episode_without_final_step_refused(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    cols = classic()
    cols["terminated"][5] = False
    src = write_parquet(tmp_path / "open.parquet", cols)
    before = testkit.snapshot(home)
    r = run(runner, home, "record", src, *REC)
    assert (r.exit_code, r.stdout) == (1, "")
    assert (
        "FAIL:   row 5, column 'terminated': episode 'ep-1' has no final step: its last step 2 "
        "is neither terminated nor truncated\n" in r.stderr
    )
    assert "Traceback" not in r.output
    assert testkit.snapshot(home) == before


def test_episode_without_final_step_reported_once(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    cols = classic()
    cols["terminated"][5] = False
    src = write_parquet(tmp_path / "open.parquet", cols)
    expect(
        run(runner, home, "record", src, *REC),
        1,
        fail_lines(
            src,
            [
                "row 5, column 'terminated': episode 'ep-1' has no final step: its "
                "last step 2 is neither terminated nor truncated"
            ],
        ),
    )


def _bad_utf8_table(column: str) -> pa.Table:
    cols: dict[str, Any] = classic()
    raw = [x.encode() for x in cols["episode_id"]] if column == "episode_id" else [b"ok"] * 6
    raw[4] = b"caf\xe9"  # Latin-1, not UTF-8
    cols[column] = pa.array(raw, pa.binary()).view(pa.string())
    return pa.table(cols)


def test_invalid_utf8_in_parquet_refused(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    src = write_parquet(tmp_path / "latin1.parquet", _bad_utf8_table("content"))
    refused(
        runner,
        home,
        ["record", src, *REC],
        1,
        fail_lines(src, ["row 4, column 'content': value is not valid UTF-8"]),
    )


def test_invalid_utf8_episode_id_refused(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    src = write_parquet(tmp_path / "latin1.parquet", _bad_utf8_table("episode_id"))
    refused(
        runner,
        home,
        ["record", src, *REC],
        1,
        fail_lines(src, ["row 4, column 'episode_id': value is not valid UTF-8"]),
    )


LATIN1_LINE = json.dumps(chat("b", answer="caf\u00e9")).encode().replace(b"\\u00e9", b"\xe9")
LATIN1_AT = LATIN1_LINE.index(b"\xe9")  # 0-based byte offset in the line

BAD_JSONL: dict[str, tuple[list[dict[str, Any] | bytes], list[str], str]] = {
    "bad-json-line": (
        [chat("a"), b'{"messages": [', chat("b")],
        ["line 2: not valid JSON: Expecting value: line 1 column 15 (char 14)"],
        "chat-jsonl",
    ),
    "invalid-utf8": (
        [chat("a"), LATIN1_LINE],
        [f"line 2: not valid UTF-8 (invalid continuation byte at byte {LATIN1_AT})"],
        "chat-jsonl",
    ),
    "wrong-type": (
        [chat("a"), {**chat("b"), "reward": "high"}],
        ["line 2, column 'reward': string, want a number"],
        "chat-jsonl",
    ),
    "duplicate-episode-id": (
        [chat("a"), chat("b", "5"), chat("a", "6")],
        ["line 3, column 'episode_id': episode 'a' already given on line 1"],
        "chat-jsonl",
    ),
    "missing-role": (
        [chat("a"), {"episode_id": "b", "messages": [{"content": "hi"}], "reward": 1.0}],
        ["line 2, column 'messages[0].role': null, want a string"],
        "chat-jsonl",
    ),
    "nan-reward": (
        [chat("a"), b'{"messages": [{"role": "user", "content": "x"}], "reward": NaN}'],
        ['line 2: not valid JSON: NaN is not valid JSON (field "reward"); write null for a number '
         "that is missing"],
        "chat-jsonl",
    ),
    "trl-completion-missing": (
        [{"step": 1, "prompt": "p", "fmt": 1.0, "advantage": 0.0}],
        ["line 1, column 'completion': null, want a string or a list of messages"],
        "trl-completions",
    ),
    "verl-score-wrong-type": (
        [{"input": "p", "output": "c", "score": "1.0", "note": "hm"}],
        ["line 1, column 'score': string, want a number"],
        "verl-jsonl",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_JSONL))
def test_bad_jsonl_refused(runner: CliRunner, home: Path, tmp_path: Path, case: str) -> None:
    lines, problems, fmt = BAD_JSONL[case]
    src = jsonl(tmp_path / f"{case}.jsonl", *lines)
    refused(runner, home, ["record", src, "--format", fmt, *REC], 1, fail_lines(src, problems))


def test_undetectable_input_refused(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    src = jsonl(tmp_path / "x.jsonl", {"text": "hello"})
    refused(
        runner,
        home,
        ["record", src, *REC],
        1,
        fail_lines(
            src,
            [
                "line 1: cannot tell the format from keys ['text']: want 'messages' (chat), "
                "'prompt'+'completion' (TRL completions or prompt-completion; with 'label': "
                "KTO), 'chosen'+'rejected' (TRL preference), 'input'/'prompt'+'output'/"
                "'response' (verl), or 'episode_id'+'step' (rollout rows)"
            ],
        ),
    )


def record_args(src: Path, refs: str = "--env cart@1") -> list[str | Path]:
    return ["record", src, *refs.split(), "--policy", "p0", *KEY]


def test_unregistered_environment_refused(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    src = write_parquet(tmp_path / "a.parquet", classic())
    refused(
        runner, home, record_args(src, "--env cart@2"), 3,
        "FAIL: cart@2: environment cart has no version '2'; recorded versions: 1 (refer to one "
        "as cart@1)\n",
    )  # fmt: skip
    refused(
        runner, home, record_args(src, "--env carts@1"), 3,
        "FAIL: carts@1: no environment has this name; did you mean 'cart@1'?\n",
    )  # fmt: skip
    refused(
        runner, home, record_args(src, "--env pole@1"), 3,
        "FAIL: environment pole@1: not registered; register it first with 'trajledger env "
        "register' (pole@1: no environment has this name; see 'trajledger log show')\n",
    )  # fmt: skip


def test_evaluator_used_as_environment_refused(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    src = write_parquet(tmp_path / "a.parquet", classic())
    judge = show_json(home, "judge@1")["digest"]
    refused(
        runner, home, record_args(src, f"--env {judge}"), 3,
        f"FAIL: {judge}: is an evaluator (judge@1), not an environment\n",
    )  # fmt: skip


def test_unregistered_evaluator_refused(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    src = write_parquet(tmp_path / "a.parquet", classic())
    refused(
        runner, home, record_args(src, "--env cart@1 --evaluator judge@9"), 3,
        "FAIL: judge@9: evaluator judge has no version '9'; recorded versions: 1 (refer to one "
        "as judge@1)\n",
    )  # fmt: skip


def test_same_rollouts_with_other_metadata_refused(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    src = write_parquet(tmp_path / "a.parquet", classic())
    digest = record(runner, home, src)
    refused(
        runner, home, record_args(src, "--env cart@1 --evaluator judge@1"), 1,
        f"FAIL: rollout batch {digest}: the same rollouts are already recorded at log "
        "index 2 as 'rollouts-cart@1-p0' with other metadata (evaluator); a batch digest "
        f"names one record: use that one ('trajledger show {digest}' shows how it was "
        "recorded)\n",
    )  # fmt: skip


def test_missing_input_file_refused(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope.parquet"
    refused(runner, home, record_args(missing), 3, f"FAIL: {missing}: no such file or directory\n")


def test_episodes_file_with_jsonl_refused(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    src = jsonl(tmp_path / "chat.jsonl", *CHAT)
    eps = write_parquet(tmp_path / "eps.parquet", {"episode_id": ["ep-1"]})
    refused(
        runner, home, [*record_args(src), "--episodes", eps], 1,
        f"FAIL: {src}: this input carries its own episode attributes; --episodes is for steps "
        "in the rollout schema (Parquet, Arrow, rollout JSON lines)\n",
    )  # fmt: skip


def dataset_args(name: str, version: str, split: str, *batches: str) -> list[str | Path]:
    args: list[str | Path] = ["dataset", "create", name, "--version", version, "--split", split]
    return [*args, *(x for b in batches for x in ("--batch", b)), *KEY]


def test_batch_in_another_split_refused(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    a = record(runner, home, write_parquet(tmp_path / "a.parquet", classic()))
    b = record(runner, home, write_parquet(tmp_path / "b.parquet", classic(base=7)))
    r = run(runner, home, *dataset_args("train-set", "1", "train", a))
    assert r.exit_code == 0, r.output
    train = r.stdout.strip()
    refused(
        runner, home, dataset_args("eval-set", "1", "holdout", b, a), 1,
        f"FAIL: dataset eval-set@1 (holdout): batch {a} is already in train dataset "
        f"train-set@1 ({train[:19]}…): leave it out (a batch is in one split), or record new "
        "rollouts for the holdout set\n",
    )  # fmt: skip
    # The same split may share batches.
    r = run(runner, home, *dataset_args("train-set", "2", "train", a, b))
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (
            "env register cart --version 1 --key alice",
            "FAIL: environment cart@1: already recorded as {cart} (log index 0); versions are "
            "immutable, record a new version\n",
        ),
        (
            "evaluator register judge --version 1 --kind human --key alice",
            "FAIL: evaluator judge@1: already recorded as {judge} (log index 1); versions are "
            "immutable, record a new version\n",
        ),
        (
            "dataset create ds --version 1 --split holdout --batch {batch} --key alice",
            "FAIL: dataset ds@1: already recorded as {ds} (log index 3); versions are immutable, "
            "record a new version\n",
        ),
    ],
    ids=["environment", "evaluator", "dataset"],
)
def test_name_version_reregistration_refused(
    runner: CliRunner, home: Path, tmp_path: Path, args: str, stderr: str
) -> None:
    batch = record(runner, home, write_parquet(tmp_path / "a.parquet", classic()))
    r = run(runner, home, *dataset_args("ds", "1", "train", batch))
    assert r.exit_code == 0, r.output
    refs = {k: show_json(home, f"{k}@1")["digest"] for k in ("cart", "judge", "ds")}
    refused(runner, home, args.format(batch=batch).split(), 1, stderr.format(**refs))


def test_unknown_references_refused(runner: CliRunner, home: Path) -> None:
    see = "see 'trajledger log show'"
    refused(runner, home, ["show", "cart@9"], 3,
            "FAIL: cart@9: environment cart has no version '9'; recorded versions: 1 (refer to "
            "one as cart@1)\n")
    refused(runner, home, ["show", "nothing@9"], 3,
            f"FAIL: nothing@9: no artifact has this name; {see}\n")
    refused(runner, home, ["show", "0" * 64], 3,
            f"FAIL: {'0' * 64}: no artifact with this digest is recorded; {see}\n")
    refused(runner, home, ["show", "sha256:abcdef"], 3,
            f"FAIL: sha256:abcdef: no artifact has a digest starting with abcdef; {see}\n")
    refused(runner, home, ["show", "cart"], 3,
            "FAIL: cart: needs a version (NAME@VERSION); recorded: cart@1\n")
    refused(runner, home, ["show", "kart@1"], 3,
            "FAIL: kart@1: no artifact has this name; did you mean 'cart@1'?\n")
    refused(
        runner, home, ["show", "zebra"], 3,
        "FAIL: zebra: no artifact has this name; refer to one by NAME@VERSION, "
        "sha256:<hex> or a digest prefix of 6+ hex characters\n",
    )  # fmt: skip
    refused(
        runner, home, dataset_args("ds", "1", "train", "cart@1"), 3,
        "FAIL: cart@1: is an environment, not a rollout-batch\n",
    )  # fmt: skip


def test_ambiguous_reference_refused(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    env = show_json(home, "cart@1")["digest"]
    r = run(
        runner, home, "evaluator", "register", "cart", "--version", "1", "--kind", "human", *KEY
    )
    assert r.exit_code == 0, r.output
    ev = r.stdout.strip()
    refused(
        runner, home, ["show", "cart@1"], 3,
        f"FAIL: cart@1: ambiguous, matches 2 artifacts (environment cart@1 {env[:19]}…, "
        f"evaluator cart@1 {ev[:19]}…); use the digest instead\n",
    )  # fmt: skip
    # A kind narrows it: recording needs an environment, so cart@1 is the environment.
    batch = record(runner, home, write_parquet(tmp_path / "a.parquet", classic()))
    assert show_json(home, batch)["predicate"]["environment"]["digest"] == env


def test_record_usage_errors(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    src = write_parquet(tmp_path / "a.parquet", classic())
    before = testkit.snapshot(home)
    r = run(runner, home, "record", src, "--policy", "p0", *KEY)
    assert r.exit_code == 2 and "Missing option '--env'" in r.stderr
    r = run(runner, home, "record", src, "--env", "cart@1", "--policy", "p0", "--key", "bob")
    keys = home / "keys"
    expect(
        r, 3, f"FAIL: key bob: no private key in {keys}; create it with 'trajledger key new bob'\n"
    )
    assert testkit.snapshot(home) == before


def test_erased_rollouts_refused(runner: CliRunner, home: Path, tmp_path: Path) -> None:
    src = write_parquet(tmp_path / "a.parquet", classic())
    digest = record(runner, home, src)
    r = run(runner, home, "erase", digest, "--reason", "consent", *KEY)
    assert r.exit_code == 0, r.output
    refused(
        runner, home, record_args(src), 1,
        f"FAIL: rollout batch {digest}: these rollouts were erased (log index 3); recording "
        "them again would restore erased data\n",
    )  # fmt: skip
