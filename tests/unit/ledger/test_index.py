"""The audit index (ledger/index/): contents, rebuild == incremental, queries, statistics
computed by hand, the far-below warning; exact and near-duplicate contamination between splits
(ledger/contamination.py, from the features kept with each batch, not the index); erased and
damaged batches; and the feature vectors behind near duplicates.

One ledger is built per test module (numeric and chat batches, a train and a holdout dataset, a
checkpoint trained on the train dataset); tests that change it work on a copy.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from trajledger import Ledger
from trajledger.ledger.artifacts import (
    batch_files,
    create_dataset,
    record_batch,
    register_environment,
    register_evaluator,
)
from trajledger.ledger.catalog import RefError
from trajledger.ledger.contamination import Finding, check_dataset, contamination_findings
from trajledger.ledger.episode_features import iter_step_features
from trajledger.ledger.episode_vectors import fold, numeric_vectors
from trajledger.ledger.errors import LedgerError
from trajledger.ledger.index import (
    MIN_NEAR_STEPS,
    NEAR_NUMERIC_THRESHOLD,
    NEAR_TEXT_THRESHOLD,
    VECTOR_DIM,
    Index,
    QueryError,
    query_table,
    reindex,
    segment_stats,
)
from trajledger.ledger.index import tables as index_tables
from trajledger.ledger.record import record_files
from trajledger.ledger.status import erase, revoke
from trajledger.verify import predicates
from trajledger.verify.errors import FormatError, PolicyError

# --------------------------------------------------------------------------------------------
# The test ledger

VOCAB = [f"w{i}" for i in range(300)]
N_LLM = 40


def craft_dataset(ledger: Ledger, name: str, split: str, batches: list[str], key: Any) -> Any:
    """Record a dataset directly (no contamination check), as an older writer could have."""
    from trajledger.ledger.record import record_files
    from trajledger.verify.predicates import Dataset

    body = Dataset(name, "1", split, tuple(batches)).to_predicate()
    path = ledger.root / "tmp" / f"{name}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(body))
    return record_files(
        ledger, {"dataset.json": path}, key, predicates.DATASET, body, name=f"{name}@1"
    )


def words(seed: int, n: int = 40) -> list[str]:
    rng = np.random.default_rng(seed)
    return [VOCAB[i] for i in rng.integers(len(VOCAB), size=n)]


def walk(seed: int, steps: int) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).normal(size=(steps, 4)), axis=0)


def numeric_rows(
    episode: str, obs: np.ndarray, actions: Sequence[int], reward: float = 1.0
) -> list[dict[str, Any]]:
    last = len(obs) - 1
    return [
        {
            "episode_id": episode,
            "step": t,
            "obs": [float(v) for v in obs[t]],
            "action": [float(actions[t])],
            "reward": reward,
            "terminated": t == last,
            "truncated": False,
        }
        for t in range(len(obs))
    ]


def actions(seed: int, steps: int) -> list[int]:
    return [int(a) for a in np.random.default_rng(seed + 1000).integers(2, size=steps)]


@dataclass(frozen=True)
class LlmEpisode:
    """The spec of one chat episode; the expected statistics are computed from these."""

    i: int
    language: str
    task_type: str
    success: bool
    judge: float
    cost: float
    invalid: bool
    reward: float
    task_id: str
    interventions: int


def llm_spec(i: int) -> LlmEpisode:
    en = i < N_LLM // 2
    success = (i % 5 != 0) if en else (i % 5 == 0)  # en 16/20, de 4/20
    judge = 0.9 if success else 0.2
    if i % 8 == 3:
        judge = 1.0 - judge  # the judge disagrees with the deterministic check
    return LlmEpisode(
        i=i,
        language="en" if en else "de",
        task_type="math" if i % 2 == 0 else "code",
        success=success,
        judge=judge,
        cost=0.01 * (1 + i % 3),
        invalid=i % 7 == 6,
        reward=(1.0 if success else 0.0) + 0.25 * (i % 4),
        task_id=f"task-{i % 30}",
        interventions=1 if i % 10 == 9 else 0,
    )


def chat_line(
    episode: str, prompt: Sequence[str], answer: str, spec: LlmEpisode | None = None
) -> str:
    obj: dict[str, Any] = {
        "episode_id": episode,
        "messages": [
            {"role": "system", "content": "You are a careful assistant. Answer briefly."},
            {"role": "user", "content": " ".join(prompt)},
            {
                "role": "assistant",
                "content": answer,
                **({"safety_interventions": spec.interventions} if spec else {}),
            },
        ],
        "reward": spec.reward if spec else 0.5,
    }
    if spec is not None:
        obj.update(
            task_id=spec.task_id,
            language=spec.language,
            task_type=spec.task_type,
            termination_reason="success" if spec.success else "failure",
            judge_scores={"judge": spec.judge},
            cost_usd=spec.cost,
            invalid=spec.invalid,
        )
    return json.dumps(obj)


@dataclass(frozen=True)
class Built:
    root: Path
    train_num: str
    train_llm: str
    hold_num: str
    hold_llm: str
    train_set: str
    hold_set: str
    checkpoint: str
    mid_size: int


def build(root: Path, scratch: Path) -> Built:
    ledger = Ledger.init(root, origin="test/index")
    key = ledger.keys.create("producer", encrypt=False)
    register_environment(ledger, "grid", "1", key)
    register_environment(ledger, "chat", "1", key)
    register_evaluator(ledger, "judge", "1", "llm-judge", key, model_id="judge-model")
    # Numeric train batch: a0..a5 of 30 steps, a6 of 10 steps.
    rows: list[dict[str, Any]] = []
    for k in range(6):
        rows += numeric_rows(f"a{k}", walk(k, 30), actions(k, 30))
    rows += numeric_rows("a6", walk(6, 10), actions(6, 10))
    train_num = record_batch(ledger, rows, env="grid@1", policy="p1", signer=key, name="train-num")
    # Chat train batch: 40 episodes in two languages and two task types.
    train_file = scratch / "train.jsonl"
    train_file.write_text(
        "".join(
            chat_line(f"e{s.i}", [f"problem{s.i}", *words(s.i)], f"answer {s.i}", s) + "\n"
            for s in map(llm_spec, range(N_LLM))
        )
    )
    train_llm = record_batch(
        ledger, [train_file], env="chat@1", policy="m1", signer=key, evaluator="judge@1",
        name="train-llm",
    )  # fmt: skip
    train_set = create_dataset(
        ledger, "train-set", "1", "train",
        [train_num.recorded.digest, train_llm.recorded.digest], key,
    )  # fmt: skip
    mid_size = ledger.log.size
    Index(ledger).update()  # indexed up to here; the rest is added incrementally below
    # Numeric holdout: h0 = a0 exactly, h1 = a1 + tiny noise, h2/h3 unrelated, h4 = a6 + noise
    # (too short for a near match).
    noise = np.random.default_rng(7)
    hold = numeric_rows("h0", walk(0, 30), actions(0, 30))
    hold += numeric_rows("h1", walk(1, 30) + noise.normal(0, 1e-3, (30, 4)), actions(1, 30))
    hold += numeric_rows("h2", walk(102, 30), actions(102, 30))
    hold += numeric_rows("h3", walk(103, 40), actions(103, 40))
    hold += numeric_rows("h4", walk(6, 10) + noise.normal(0, 1e-3, (10, 4)), actions(6, 10))
    hold_num = record_batch(ledger, hold, env="grid@1", policy="p1", signer=key, name="hold-num")
    # Chat holdout: x0 = e3 exactly, x1 = e7's prompt with one word changed, x2 unrelated.
    changed = [f"problem{7}", *words(7)]
    changed[10] = "different"
    hold_file = scratch / "hold.jsonl"
    hold_file.write_text(
        chat_line("x0", ["problem3", *words(3)], "answer 3", llm_spec(3))
        + "\n"
        + chat_line("x1", changed, "a completely different answer")
        + "\n"
        + chat_line("x2", ["problem999", *words(999)], "answer")
        + "\n"
    )
    hold_llm = record_batch(
        ledger, [hold_file], env="chat@1", policy="m1", signer=key, name="hold-llm"
    )
    # Recorded around `create_dataset`, which now refuses exact duplicates across splits:
    # the index must find them in records made by older writers or other tools.
    hold_set = craft_dataset(
        ledger, "hold-set", "holdout", [hold_num.recorded.digest, hold_llm.recorded.digest], key
    )
    # A checkpoint trained on the train set (its SLSA provenance names the dataset).
    weights = scratch / "policy.bin"
    weights.write_bytes(b"weights")
    ckpt = record_files(
        ledger,
        {"policy.bin": weights},
        key,
        predicates.CHECKPOINT,
        {
            "buildDefinition": {
                "buildType": "https://trajledger.dev/build/train/v1",
                "externalParameters": {"name": "ck", "version": "1"},
                "resolvedDependencies": [
                    {
                        "name": "dataset:train-set@1",
                        "digest": {"sha256": train_set.recorded.digest[7:]},
                        "annotations": {"role": "dataset"},
                    }
                ],
            },
            "runDetails": {"builder": {"id": "test"}},
        },
        name="ck",
        inline_manifest=False,
    )
    return Built(
        root,
        train_num.recorded.digest,
        train_llm.recorded.digest,
        hold_num.recorded.digest,
        hold_llm.recorded.digest,
        train_set.recorded.digest,
        hold_set.digest,
        ckpt.digest,
        mid_size,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    base = tmp_path_factory.mktemp("index")
    scratch = base / "scratch"
    scratch.mkdir()
    b = build(base / "ledger", scratch)
    Index(Ledger.open(b.root)).index_batches()  # every batch's episodes too
    return b


@pytest.fixture
def ledger(built: Built) -> Ledger:
    """The shared ledger, read only."""
    return Ledger.open(built.root)


@pytest.fixture
def copy(built: Built, tmp_path: Path) -> Iterator[Ledger]:
    """A private copy of the ledger (and of its index) to change."""
    root = tmp_path / "copy"
    shutil.copytree(built.root, root)
    yield Ledger.open(root)


def rows(ledger: Ledger, table: str, where: str | None = None, **kw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = query_table(ledger, table, where, **kw).to_pylist()
    return out


def snapshot(ledger: Ledger) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    index = Index(ledger)
    index.index_batches()  # every batch's episodes, so that both tables are complete
    arts = index.query("artifacts").sort_by("log_index").to_pylist()
    cols = [*(n for n in index.query("episodes", limit=0).column_names), "vector"]
    eps = index.query("episodes", columns=cols).sort_by(
        [("batch_index", "ascending"), ("episode_id", "ascending")]
    )
    return arts, eps.to_pylist()


# --------------------------------------------------------------------------------------------
# Contents


def test_artifact_rows(ledger: Ledger, built: Built) -> None:
    arts = {(r["kind"], r["ref"]): r for r in rows(ledger, "artifacts")}
    assert len(rows(ledger, "artifacts")) == ledger.log.size
    batch = arts[("rollout-batch", "train-llm")]
    assert batch["digest"] == built.train_llm
    assert (batch["env"], batch["evaluator"], batch["policy_version"]) == (
        "chat@1",
        "judge@1",
        "m1",
    )
    assert (batch["num_episodes"], batch["data"], batch["episodes_indexed"]) == (40, "indexed", 40)
    assert batch["signers"] == [ledger.keys.signer("producer").keyid]
    ds = arts[("dataset", "hold-set@1")]
    assert ds["split"] == "holdout" and ds["batches"] == sorted([built.hold_num, built.hold_llm])
    assert arts[("checkpoint", "ck@1")]["datasets"] == [built.train_set]
    assert not any(r["revoked"] or r["erased"] for r in arts.values())


def test_episode_rows(ledger: Ledger, built: Built) -> None:
    eps = rows(ledger, "episodes", columns=None)
    assert len(eps) == 7 + N_LLM + 5 + 3
    by_id = {(r["batch"], r["episode_id"]): r for r in eps}
    a0 = by_id[(built.train_num, "a0")]
    # env_version and policy_version come from the batch when the episode leaves them null.
    assert (a0["env_version"], a0["policy_version"], a0["num_steps"], a0["return"]) == (
        "grid@1",
        "p1",
        30,
        30.0,
    )
    assert (a0["modality"], a0["success"], a0["termination_reason"]) == (
        "numeric",
        None,
        "terminated",
    )
    e3 = by_id[(built.train_llm, "e3")]
    spec = llm_spec(3)
    assert e3["modality"] == "text" and e3["success"] is spec.success
    assert json.loads(e3["judge_scores"]) == {"judge": spec.judge}
    assert e3["judge_score"] == pytest.approx(spec.judge)
    assert (e3["language"], e3["task_type"], e3["cost_usd"]) == ("en", "code", spec.cost)
    assert by_id[(built.train_llm, "e9")]["safety_interventions"] == 1
    # The fingerprint ignores ids: h0 is a0 recorded again.
    assert by_id[(built.hold_num, "h0")]["fingerprint"] == a0["fingerprint"]
    assert len({r["fingerprint"] for r in eps}) == len(eps) - 2  # h0 = a0, x0 = e3


def test_update_is_incremental(copy: Ledger, built: Built) -> None:
    index = Index(copy)
    assert index.update().entries == 0  # already current
    key = copy.keys.signer("producer")
    late = record_batch(
        copy, numeric_rows("n0", walk(50, 20), actions(50, 20)), env="grid@1", policy="p2",
        signer=key, name="late",
    )  # fmt: skip
    result = index.update()
    assert (result.start, result.end, result.rebuilt) == (copy.log.size - 1, copy.log.size, False)
    # The entry's row is there; its episodes wait until a question needs the batch.
    assert (result.batches, result.episodes) == (1, 0)
    row = rows(copy, "artifacts", f"digest = '{late.digest}'")[0]
    assert (row["data"], row["episodes_indexed"]) == ("pending", 0)
    assert index.index_batches([late.digest]) == (1, 1)
    assert index.index_batches([late.digest]) == (0, 0)  # done once
    assert len(rows(copy, "episodes", "policy_version = 'p2'")) == 1


def test_rebuild_equals_incremental(copy: Ledger, built: Built) -> None:
    # The shared index was built in two steps (up to the train dataset, then the rest).
    assert built.mid_size < copy.log.size
    incremental = snapshot(copy)
    assert reindex(copy).rebuilt
    assert snapshot(copy) == incremental


def test_empty_ledger(home: Path) -> None:
    ledger = Ledger.open(home)
    assert rows(ledger, "episodes") == [] and rows(ledger, "artifacts") == []
    again = Index(ledger).update()
    assert (again.start, again.end, again.rebuilt) == (0, 0, False)


@pytest.mark.parametrize("damage", ["pending", "garbage", "other-log", "no-table"])
def test_damaged_index_is_rebuilt(copy: Ledger, damage: str) -> None:
    index = Index(copy)
    before = snapshot(copy)
    state = json.loads(index.state_path.read_text())
    if damage == "pending":
        index.state_path.write_text(json.dumps({**state, "pending": True}))
    elif damage == "garbage":
        index.state_path.write_text("{not json")
    elif damage == "other-log":
        index.state_path.write_text(json.dumps({**state, "last": "00" * 32}))
    else:
        shutil.rmtree(index.dir / "episodes.lance")
    assert Index(copy).update().rebuilt
    assert snapshot(copy) == before


def test_an_index_that_cannot_be_written(
    copy: Ledger, built: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only copy of a ledger (found by tests/e2e/test_read_only.py: query and stats
    failed): a current index is read in place; one that must change is changed in a temporary
    copy, with a note; the ledger's index is left as it was; it is not rebuilt there."""
    import errno
    import os

    real_open = os.open

    def read_only(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        if str(path).startswith(str(copy.root / "index")) and flags & (os.O_RDWR | os.O_WRONLY):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kw)

    def files() -> dict[str, bytes]:
        return {str(p): p.read_bytes() for p in (copy.root / "index").rglob("*") if p.is_file()}

    Index(copy).index_batches()  # current, every batch's episodes
    before = files()
    notes: list[str] = []
    monkeypatch.setattr(os, "open", read_only)
    assert len(query_table(copy, "artifacts", note=notes.append)) == copy.log.size
    assert notes == [] and files() == before  # read in place
    monkeypatch.setattr(os, "open", real_open)
    late = record_batch(
        copy, numeric_rows("n0", walk(51, 20), actions(51, 20)), env="grid@1", policy="p3",
        signer=copy.keys.signer("producer"), name="later",
    )  # fmt: skip
    before = files()
    monkeypatch.setattr(os, "open", read_only)
    got = query_table(copy, "episodes", "policy_version = 'p3'", note=notes.append)
    assert got.column("batch").to_pylist() == [late.digest]
    assert len(notes) == 1 and "cannot be written" in notes[0]
    assert files() == before
    with pytest.raises(LedgerError, match="cannot be written, so the index is not rebuilt"):
        reindex(copy)


# --------------------------------------------------------------------------------------------
# Queries


def test_query_filters(ledger: Ledger, built: Built) -> None:
    specs = [llm_spec(i) for i in range(N_LLM)]
    got = rows(
        ledger,
        "episodes",
        "return > 1.2 AND env_version = 'chat@1'",
        columns=["episode_id"],
        within="train-llm",
    )
    want = {f"e{s.i}" for s in specs if s.reward > 1.2}
    assert {r["episode_id"] for r in got} == want and want
    got = rows(ledger, "episodes", "language = 'de' AND success", columns=["episode_id"])
    assert {r["episode_id"] for r in got} == {
        f"e{s.i}" for s in specs if s.language == "de" and s.success
    }
    assert len(rows(ledger, "episodes", "modality = 'numeric'", limit=3)) == 3
    within = rows(ledger, "episodes", within="hold-set@1", columns=["episode_id"])
    assert sorted(r["episode_id"] for r in within) == [
        "h0",
        "h1",
        "h2",
        "h3",
        "h4",
        "x0",
        "x1",
        "x2",
    ]
    arts = rows(ledger, "artifacts", "kind = 'dataset' AND split = 'train'", columns=["ref"])
    assert arts == [{"ref": "train-set@1"}]


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("retrun > 1", "--where 'retrun > 1': Schema error: No field named retrun."),
        ("return >", "--where 'return >': SQL syntax error: Expected: an expression, found: EOF"),
        (
            "language = 5",
            "--where 'language = 5': Received literal Int64(5) and could not convert to literal "
            "of type 'Utf8'",
        ),
    ],
)
def test_bad_filter(ledger: Ledger, where: str, message: str) -> None:
    with pytest.raises(QueryError, match="^" + re.escape(message)):
        rows(ledger, "episodes", where, within="train-set@1")


def test_bad_columns(ledger: Ledger) -> None:
    with pytest.raises(QueryError, match=r"^episodes: no column 'nope'; columns are batch, "):
        rows(ledger, "episodes", columns=["episode_id", "nope"])
    with pytest.raises(QueryError, match=r"^--by: no episode column 'vector'"):
        segment_stats(ledger, "train-set@1", ["vector"])
    with pytest.raises(QueryError, match=r"^table 'steps': unknown"):
        rows(ledger, "steps")


# --------------------------------------------------------------------------------------------
# Statistics


def expected(specs: Sequence[LlmEpisode]) -> dict[str, Any]:
    """The metrics of chat episodes, computed directly from their specs."""
    n = len(specs)
    wins = [s for s in specs if s.success]
    agree = [s for s in specs if (s.judge >= 0.5) == s.success]
    cost = sum(s.cost for s in specs)
    return {
        "episodes": n,
        "success_rate": len(wins) / n,
        "mean_return": sum(s.reward for s in specs) / n,
        "mean_length": 3.0,
        "invalid_rate": sum(s.invalid for s in specs) / n,
        "intervention_rate": sum(s.interventions > 0 for s in specs) / n,
        "judge_agreement": len(agree) / n,
        "cost_per_episode": cost / n,
        "cost_per_success": cost / len({s.task_id for s in wins}),
    }


def test_stats_by_language_and_task_type(ledger: Ledger) -> None:
    report = segment_stats(ledger, "train-llm", ["language", "task_type"])
    specs = [llm_spec(i) for i in range(N_LLM)]
    agg = report.aggregate
    for k, v in expected(specs).items():
        assert getattr(agg, k) == pytest.approx(v), k
    assert [s.label for s in report.segments] == [
        "language=de,task_type=code",
        "language=de,task_type=math",
        "language=en,task_type=code",
        "language=en,task_type=math",
    ]
    for seg in report.segments:
        key = dict(seg.key)
        part = [
            s for s in specs if (s.language, s.task_type) == (key["language"], key["task_type"])
        ]
        for k, v in expected(part).items():
            assert getattr(seg.metrics, k) == pytest.approx(v), (seg.label, k)


def test_stats_by_hand(ledger: Ledger) -> None:
    """A few numbers worked out on paper from llm_spec."""
    report = segment_stats(ledger, "train-llm", ["language"])
    de, en = (s.metrics for s in report.segments)
    assert (en.successes, en.labelled, de.successes) == (16, 20, 4)
    assert report.aggregate.success_rate == 0.5
    # Disagreements at i % 8 == 3: i = 3, 11, 19 (en), 27, 35 (de).
    assert (en.judge_agreement, de.judge_agreement) == (17 / 20, 18 / 20)
    # Invalid at i % 7 == 6: 6, 13 (en); 20, 27, 34 (de).
    assert (en.invalid_rate, de.invalid_rate) == (2 / 20, 3 / 20)
    # de successes: i = 20, 25, 30, 35 -> tasks 20, 25, 0, 5 (i % 30): 4 solved tasks.
    # de costs: 0.01 * (1 + i % 3) for i = 20..39 = 0.01 * (7*1 + 7*2 + 6*3)... summed below.
    de_cost = sum(0.01 * (1 + i % 3) for i in range(20, 40))
    assert de.solved_tasks == 4 and de.cost_per_success == pytest.approx(de_cost / 4)
    # en successes: 16 episodes, tasks i % 30 = 16 distinct tasks.
    assert en.solved_tasks == 16


def test_far_below_warning(ledger: Ledger) -> None:
    report = segment_stats(ledger, "train-llm", ["language"])
    de, en = report.segments
    # Aggregate p = 0.5; de: 0.2 with n = 20, SE = sqrt(0.25 / 20) = 0.112; gap 0.3 > 0.224
    # and 0.3 >= 20% of 0.5. Its mean return is also far below: both are flagged.
    assert de.label == "language=de" and len(de.warnings) == 2
    assert de.warnings[0] == (
        "success rate 0.200 is far below 0.500 overall (2.7 standard errors, n=20)"
    )
    assert de.warnings[1].startswith("mean return ")
    assert en.warnings == ()
    assert report.warnings == [f"language=de: {w}" for w in de.warnings]
    js = report.to_json()
    assert [s["below_aggregate"] for s in js["segments"]] == [True, False]
    assert js["segments"][0]["key"] == {"language": "de"}


def test_no_warning_for_small_gaps(ledger: Ledger) -> None:
    # By task type the success rates are 0.5 and 0.5: nothing is flagged.
    report = segment_stats(ledger, "train-llm", ["task_type"])
    assert [s.metrics.success_rate for s in report.segments] == [0.5, 0.5]
    assert report.warnings == []


def test_stats_of_dataset_and_checkpoint(ledger: Ledger, built: Built) -> None:
    ds = segment_stats(ledger, "train-set@1", ["env_version"])
    ck = segment_stats(ledger, "ck@1", ["env_version"])
    assert ds.batches == ck.batches == tuple(sorted([built.train_num, built.train_llm]))
    assert ck.kind == "checkpoint" and ck.aggregate == ds.aggregate
    chat, grid = ck.segments
    assert (chat.label, chat.metrics.episodes, grid.label, grid.metrics.episodes) == (
        "env_version=chat@1",
        40,
        "env_version=grid@1",
        7,
    )
    # No labels, judges or costs on the numeric episodes: those metrics are null, not zero.
    assert grid.metrics.success_rate is None and grid.metrics.judge_agreement is None
    assert grid.metrics.cost_per_episode is None and grid.metrics.intervention_rate is None
    assert grid.metrics.mean_return == pytest.approx((6 * 30 + 10) / 7)
    # A judge picked by name gives the same agreement here (one judge per episode).
    named = segment_stats(ledger, "train-llm", judge_key="judge").aggregate
    assert named.judge_agreement == segment_stats(ledger, "train-llm").aggregate.judge_agreement


def test_stats_unknown_ref(ledger: Ledger) -> None:
    with pytest.raises(RefError):
        segment_stats(ledger, "nothing@9", ["language"])


# --------------------------------------------------------------------------------------------
# Contamination


def pairs(findings: Sequence[Finding]) -> set[tuple[str, str, str]]:
    return {(f.kind, f.train_episode, f.other_episode) for f in findings}


WANT = {
    ("exact", "a0", "h0"),
    ("near", "a1", "h1"),
    ("exact", "e3", "x0"),
    ("near", "e7", "x1"),
}


def test_contamination_of_holdout_and_train(ledger: Ledger, built: Built) -> None:
    hold = contamination_findings(ledger, built.hold_set)
    assert pairs(hold) == WANT
    assert pairs(contamination_findings(ledger, "train-set@1")) == WANT
    near_num = next(f for f in hold if f.other_episode == "h1")
    assert NEAR_NUMERIC_THRESHOLD <= near_num.similarity <= 1.0
    assert near_num.other_datasets == ("holdout hold-set@1",)
    assert near_num.train_datasets == ("train train-set@1",)
    exact = next(f for f in hold if f.other_episode == "h0")
    assert (exact.similarity, exact.matches, exact.train_batch, exact.other_batch) == (
        1.0,
        1,
        built.train_num,
        built.hold_num,
    )
    assert str(exact) == (
        f"episode h0 of batch {built.hold_num[:19]}… (holdout hold-set@1) is an exact duplicate "
        f"of train episode a0 of batch {built.train_num[:19]}… (train train-set@1)"
    )
    assert exact.to_json()["other_datasets"] == ["holdout hold-set@1"]


def split_contamination(ledger: Ledger, split: str, batches: Sequence[str]) -> list[Finding]:
    return list(check_dataset(ledger, split, batches).findings)


def test_contamination_between_batches(ledger: Ledger, built: Built) -> None:
    found = split_contamination(ledger, "train", [built.train_num])
    assert pairs(found) == {("exact", "a0", "h0"), ("near", "a1", "h1")}


def test_contamination_before_recording(ledger: Ledger, built: Built) -> None:
    # `dataset create` asks before the dataset exists: a new holdout made of train batches.
    found = split_contamination(ledger, "regression", [built.train_llm])
    assert len(found) == N_LLM and {f.kind for f in found} == {"exact"}
    assert split_contamination(ledger, "train", [built.train_num]) == [
        f
        for f in contamination_findings(ledger, built.hold_set)
        if f.train_batch == built.train_num
    ]


def test_scalar_indexes_of_a_large_index_change_no_answer(
    copy: Ledger, built: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A large index gets scalar indexes on the columns lookups filter on; the answers stay.
    before = snapshot(copy), segment_stats(copy, "train-set@1", ["env_version"])
    monkeypatch.setattr(index_tables, "_INDEX_MIN_ROWS", 1)  # this ledger counts as large
    shutil.rmtree(copy.root / "index")
    after = snapshot(copy), segment_stats(copy, "train-set@1", ["env_version"])
    assert after == before
    index = Index(copy)
    indexed = {
        name: {c for ix in index._table(name).list_indices() for c in ix.columns}
        for name in ("artifacts", "episodes")
    }
    assert indexed == {"artifacts": {"digest", "kind"}, "episodes": {"batch"}}
    assert [r["digest"] for r in rows(copy, "artifacts", f"digest = '{built.train_num}'")] == [
        built.train_num
    ]


def test_contamination_needs_no_index(copy: Ledger, built: Built) -> None:
    # The check reads the features kept with each batch: no audit index is built or read.
    shutil.rmtree(copy.root / "index")
    check = check_dataset(copy, "holdout", [built.hold_num, built.hold_llm])
    assert pairs(check.findings) == WANT
    assert set(check.sources.values()) == {"recorded"} and check.warnings == ()
    assert not (copy.root / "index" / "lance").exists()


def test_contamination_sees_records_the_index_has_not(copy: Ledger, built: Built) -> None:
    key = copy.keys.signer("producer")
    late = record_batch(
        copy, numeric_rows("late", walk(2, 30), actions(2, 30)), env="grid@1", policy="p1",
        signer=key, name="late-copy-of-a2",
    )  # fmt: skip
    craft_dataset(copy, "regress", "regression", [late.recorded.digest], key)
    found = contamination_findings(copy, "regress@1")  # the index has not seen either yet
    assert pairs(found) == {("exact", "a2", "late")}


def test_unknown_dataset(ledger: Ledger, built: Built) -> None:
    with pytest.raises(RefError, match="not recorded"):
        contamination_findings(ledger, built.train_num)  # a batch, not a dataset
    with pytest.raises(FormatError, match=r"^split 'dev': unknown, want one of train, holdout"):
        split_contamination(ledger, "dev", [built.train_num])


# --------------------------------------------------------------------------------------------
# Erasure, revocation, damage


def test_erased_batch(copy: Ledger, built: Built) -> None:
    key = copy.keys.signer("producer")
    erase(copy, built.hold_num, key, reason="consent")
    revoke(copy, "train-set@1", key, reason="labels were wrong")
    Index(copy).update()
    batch = rows(copy, "artifacts", f"digest = '{built.hold_num}' AND kind = 'rollout-batch'")[0]
    assert (batch["erased"], batch["data"], batch["episodes_indexed"]) == (True, "erased", 0)
    assert rows(copy, "episodes", f"batch = '{built.hold_num}'") == []
    ds = rows(copy, "artifacts", "kind = 'dataset' AND revoked", columns=["ref"])
    assert ds == [{"ref": "train-set@1"}]
    # The erasure and revocation records themselves are rows, unflagged.
    status = rows(
        copy,
        "artifacts",
        "kind IN ('erasure', 'revocation')",
        columns=["kind", "reason", "revoked", "erased"],
    )
    assert status == [
        {"kind": "erasure", "reason": "consent", "revoked": False, "erased": False},
        {"kind": "revocation", "reason": "labels were wrong", "revoked": False, "erased": False},
    ]
    # Rebuilt from the log, the erased batch (its blobs are gone) indexes the same way.
    incremental = snapshot(copy)
    reindex(copy)
    assert snapshot(copy) == incremental
    assert pairs(contamination_findings(copy, built.hold_set)) == {
        ("exact", "e3", "x0"),
        ("near", "e7", "x1"),
    }
    # Statistics of the erased batch: no episodes left, and no failure.
    assert segment_stats(copy, built.hold_num).aggregate.episodes == 0


def kept_features(ledger: Ledger, batch: str) -> Path:
    """The store path of the features file recorded with ``batch``."""
    from trajledger.ledger.batch_features import batch_predicate
    from trajledger.ledger.catalog import Catalog

    item = Catalog(ledger).resolve(batch, {"rollout-batch"})
    pred = batch_predicate(ledger.store, item.envelope)
    assert pred is not None and pred.features is not None
    return ledger.store.path_of(pred.features.digest)


def test_damaged_batch_data(copy: Ledger, built: Built) -> None:
    files = batch_files(copy, built.hold_llm)
    copy.store.path_of(files["steps.parquet"]).write_bytes(b"not parquet")
    kept_features(copy, built.hold_llm).unlink()  # so the step file is needed
    copy.store.path_of(built.hold_num).unlink()  # the manifest itself
    reindex(copy)
    arts = {r["digest"]: r for r in rows(copy, "artifacts", "kind = 'rollout-batch'")}
    assert (arts[built.hold_llm]["data"], arts[built.hold_llm]["episodes_indexed"]) == (
        "partial",
        3,
    )
    assert (arts[built.hold_num]["data"], arts[built.hold_num]["episodes_indexed"]) == (
        "missing",
        0,
    )
    partial = rows(
        copy, "episodes", f"batch = '{built.hold_llm}'", columns=["fingerprint", "modality"]
    )
    assert partial == [{"fingerprint": None, "modality": None}] * 3
    # The duplicate check needs neither: hold-num's signed record names its kept features (and
    # carries its manifest inline); hold-llm has neither kept features nor a readable step file.
    check = check_dataset(copy, "holdout", [built.hold_num, built.hold_llm])
    assert pairs(check.findings) == {("exact", "a0", "h0"), ("near", "a1", "h1")}
    assert check.sources == {
        built.hold_num: "recorded", built.hold_llm: "none", **dict.fromkeys(
            [built.train_num, built.train_llm], "recorded")
    }  # fmt: skip
    (warning,) = check.warnings  # (its features file absent is derived data, computed again
    # from the steps when they can be read: out46 finding 9, the lead's decision)
    assert warning.startswith(f"batch {built.hold_llm[:19]}…: its steps.parquet cannot be read (")
    assert warning.endswith(": its episodes were not compared")


# --------------------------------------------------------------------------------------------
# Feature vectors


def test_fold_is_identity_up_to_width() -> None:
    col = pa.chunked_array(
        [pa.array([[1.0, 2.0], None, [1.0, 2.0, 3.0, 4.0, 5.0]], pa.list_(pa.float32()))]
    )
    folded = fold(col, 3, 4)
    # Value 4 of row 2 (index 4) wraps to slot 0 with sign -1: 1 - 5 = -4.
    assert folded.tolist() == [[1.0, 2.0, 0.0, 0.0], [0.0] * 4, [-4.0, 2.0, 3.0, 4.0]]


def cos(a: np.ndarray | None, b: np.ndarray | None) -> float:
    assert a is not None and b is not None
    return float(a @ b)


def features(obs: np.ndarray, acts: Sequence[int]) -> np.ndarray:
    return np.hstack(
        [
            np.pad(obs, ((0, 0), (0, 12))),
            np.pad(np.array(acts, float)[:, None], ((0, 0), (0, 3))),
            np.ones((len(obs), 1)),
        ]
    )


def numeric_vector(x: np.ndarray) -> np.ndarray | None:
    vectors, valid = numeric_vectors(x, np.array([0]), np.array([len(x)]))
    return vectors[0] if valid[0] else None


def text_vector(messages: Sequence[tuple[str, str]]) -> np.ndarray | None:
    """The feature vector of one conversation, through the whole step-feature path."""
    t = pa.table(
        {
            "episode_id": ["c"] * len(messages),
            "step": pa.array(range(len(messages)), pa.int64()),
            "role": [r for r, _ in messages],
            "content": [c for _, c in messages],
        }
    )
    (chunk,) = iter_step_features([t])
    assert chunk.modality == ["text"]
    return chunk.vectors[0] if chunk.valid[0] else None


def test_numeric_near_duplicates() -> None:
    base = features(walk(1, 60), actions(1, 60))
    v = numeric_vector(base)
    assert (
        v is not None and v.shape == (VECTOR_DIM,) and math.isclose(float(v @ v), 1.0, rel_tol=1e-5)
    )
    noisy = base.copy()
    noisy[:, :4] += np.random.default_rng(0).normal(0, 1e-2, (60, 4))
    assert cos(v, numeric_vector(noisy)) > NEAR_NUMERIC_THRESHOLD
    others = [numeric_vector(features(walk(s, 60), actions(s, 60))) for s in range(10, 30)]
    assert max(cos(v, o) for o in others) < NEAR_NUMERIC_THRESHOLD
    # Episodes longer than one projection chunk (256 steps) work the same way.
    long = features(walk(2, 700), actions(2, 700))
    long_noisy = long + np.random.default_rng(1).normal(0, 1e-3, long.shape)
    assert cos(numeric_vector(long), numeric_vector(long_noisy)) > NEAR_NUMERIC_THRESHOLD
    assert numeric_vector(np.zeros((5, 21))) is None
    assert MIN_NEAR_STEPS == 16


def test_text_near_duplicates() -> None:
    prompt = " ".join(words(1))
    v = text_vector([("system", "be brief"), ("user", prompt), ("assistant", "yes")])
    changed = prompt.split()
    changed[5] = "other"
    w = text_vector([("user", " ".join(changed)), ("assistant", "a different answer entirely")])
    assert cos(v, w) > NEAR_TEXT_THRESHOLD
    unrelated = [text_vector([("user", " ".join(words(s)))]) for s in range(100, 140)]
    assert max(cos(v, u) for u in unrelated) < 0.5
    # The system prompt and the answers do not count; case and punctuation do not either.
    assert cos(v, text_vector([("system", "other"), ("user", prompt.upper() + "!")])) > 0.999
    # Only the assistant spoke: its messages are used.
    assert text_vector([("assistant", prompt)]) is not None


# --------------------------------------------------------------------------------------------
# Kept up per batch; streamed; verified contamination


def test_only_the_compared_batches_are_indexed(copy: Ledger, built: Built) -> None:
    Index(copy).index_batches()  # every batch recorded so far
    key = copy.keys.signer("producer")
    unrelated = record_batch(
        copy, numeric_rows("u0", walk(77, 20), actions(77, 20)), env="grid@1", policy="p9",
        signer=key, name="unrelated",
    )  # fmt: skip
    new = record_batch(
        copy, numeric_rows("n0", walk(0, 30), actions(0, 30)), env="grid@1", policy="p9",
        signer=key, name="new-holdout",
    )  # fmt: skip
    found = split_contamination(copy, "holdout", [new.digest])
    assert pairs(found) == {("exact", "a0", "n0")}
    data = {
        r["digest"]: r["data"]
        for r in rows(copy, "artifacts", "kind = 'rollout-batch'", columns=["digest", "data"])
    }
    assert data[unrelated.digest] == "pending"  # never read: it is in no compared set
    assert data[new.digest] == "pending"  # the check does not use the index either
    # A question about every episode indexes the rest, with progress in steps.
    seen: list[tuple[int, str, int]] = []

    @contextlib.contextmanager
    def progress(total: int, label: str) -> Iterator[Any]:
        done = [0]
        yield lambda n: done.__setitem__(0, done[0] + n)
        seen.append((total, label, done[0]))

    Index(copy, progress=progress).query("episodes", "policy_version = 'p9'")
    assert seen == [(50, "indexing 2 batch(es)", 50)]


def test_an_interrupted_batch_is_dropped_and_indexed_again(copy: Ledger, built: Built) -> None:
    index = Index(copy)
    index.index_batches()
    want = snapshot(copy)
    # As if a process died while adding hold-num's episodes: its row still says pending, the
    # state names it, and some of its episode rows were written.
    table = index._connect().open_table("artifacts")
    table.update(where=f"digest = '{built.hold_num}'", values={"data": "pending"})
    state = json.loads(index.state_path.read_text())
    index.state_path.write_text(json.dumps({**state, "batch": built.hold_num}))
    assert Index(copy).update().entries == 0
    assert rows(copy, "artifacts", f"digest = '{built.hold_num}'")[0]["data"] == "pending"
    assert Index(copy)._scan("episodes", f"batch = '{built.hold_num}'").num_rows == 0
    assert snapshot(copy) == want  # indexed again, once


def test_streamed_features_equal_the_whole_table_fingerprints() -> None:
    from trajledger.ledger.rollouts.dedup import episode_fingerprints

    steps: list[dict[str, Any]] = []
    for k in range(12):
        steps += numeric_rows(f"s{k}", walk(k, 5 + 7 * k), actions(k, 5 + 7 * k))
    t = pa.Table.from_pylist(steps)
    want = episode_fingerprints(t)
    for size in (1, 3, 40, 1000):
        got: dict[str, str] = {}
        for chunk in iter_step_features(t.to_batches(max_chunksize=size)):
            got.update(zip(chunk.episode_ids, chunk.fingerprints, strict=True))
        assert got == want, size


def test_steps_out_of_order_are_refused_by_the_features() -> None:
    from trajledger.ledger.episode_features import FeatureOrderError

    # Checked within each record batch (the index also checks the episode file's order).
    ids, step = ["a", "b", "a", "c"], [0, 0, 1, 0]
    t = pa.table({"episode_id": ids, "step": pa.array(step, pa.int64())})
    with pytest.raises(FeatureOrderError, match="not contiguous"):
        list(iter_step_features([t]))
    t = pa.table({"episode_id": ["a", "a"], "step": pa.array([1, 0], pa.int64())})
    with pytest.raises(FeatureOrderError, match="ascending"):
        list(iter_step_features([t]))


def hold_side(ledger: Ledger, built: Built) -> dict[str, list[str]]:
    return {b: ["holdout hold-set@1"] for b in (built.hold_num, built.hold_llm)}


def test_verified_contamination_equals_the_kept_features_and_ignores_them(
    copy: Ledger, built: Built
) -> None:
    from trajledger.ledger.contamination import verified_contamination

    train = {built.train_num: None, built.train_llm: None}
    report = verified_contamination(copy.store, train, hold_side(copy, built))
    assert report.unchecked == () and report.episodes == (8, 47)
    assert pairs(report.findings) == WANT
    assert [f.to_json() for f in report.findings] == [
        {**f.to_json(), "train_datasets": []} for f in contamination_findings(copy, built.hold_set)
    ]
    # Deleting the holdout's kept features (derived data, computed again from the step file
    # without a word: out46 finding 9) hides nothing from either check; the verified one reads
    # re-hashed bytes only.
    kept_features(copy, built.hold_num).unlink()
    shutil.rmtree(copy.root / "index" / "features", ignore_errors=True)
    before = report
    check = check_dataset(copy, "holdout", [built.hold_num, built.hold_llm])
    assert pairs(check.findings) == WANT  # computed from the step file instead
    assert check.sources[built.hold_num] == "computed"
    assert check.warnings == ()
    again = verified_contamination(copy.store, train, hold_side(copy, built))
    assert again == before
    # Verified tables given by the caller are used as they are (the store is not read).
    import pyarrow.parquet as pq

    table = pq.read_table(copy.store.path_of(batch_files(copy, built.train_num)["steps.parquet"]))
    given = verified_contamination(copy.store, {built.train_num: table}, hold_side(copy, built))
    assert pairs(given.findings) == {("exact", "a0", "h0"), ("near", "a1", "h1")}


def test_verified_contamination_reports_unverifiable_holdouts(copy: Ledger, built: Built) -> None:
    from trajledger.ledger.contamination import verified_contamination

    steps = batch_files(copy, built.hold_num)["steps.parquet"]
    path = copy.store.path_of(steps)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    copy.store.path_of(built.hold_llm).unlink()  # the manifest of the other holdout batch
    report = verified_contamination(
        copy.store, {built.train_num: None, built.train_llm: None}, hold_side(copy, built)
    )
    assert report.findings == ()
    assert len(report.unchecked) == 2
    assert any(
        u.startswith(f"holdout/regression batch {built.hold_num[:19]}…: object")
        and "hashes to" in u
        for u in report.unchecked
    ), report.unchecked
    assert any("not in the store" in u for u in report.unchecked), report.unchecked


def duplicate_episodes(ledger: Ledger, batches: Sequence[str]) -> list[str]:
    return list(check_dataset(ledger, "regression", batches).duplicates)


def test_duplicate_episodes_within_a_set(ledger: Ledger, built: Built) -> None:
    lines = duplicate_episodes(ledger, [built.train_num, built.hold_num])
    first, second = sorted([built.train_num, built.hold_num])
    assert len(lines) == 1
    dup, orig = ("h0", "a0") if first == built.train_num else ("a0", "h0")
    assert lines[0] == (
        f"episode {dup!r} of batch {second[:19]}… duplicates episode {orig!r} of batch "
        f"{first[:19]}…"
    )
    assert duplicate_episodes(ledger, [built.train_num]) == []


def test_text_features_do_not_depend_on_the_slice_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from trajledger.ledger import episode_features

    rows = []
    for e in range(30):
        for k, role in enumerate(("system", "user", "assistant", "tool")):
            text = " ".join(words(e * 4 + k, 10 + e))
            rows.append({"episode_id": f"t{e}", "step": k, "role": role, "content": text})
    t = pa.Table.from_pylist(rows)
    whole = episode_features.FeatureChunk.concat(list(iter_step_features([t])))
    monkeypatch.setattr(episode_features, "TEXT_SLICE", 64)  # about one message per slice
    sliced = episode_features.FeatureChunk.concat(list(iter_step_features([t])))
    assert sliced.valid.all()
    assert np.array_equal(whole.vectors, sliced.vectors)


def test_duplicates_from_kept_features_equal_those_from_the_bytes(
    copy: Ledger, built: Built
) -> None:
    """Issue 21 item 1: detection with the features kept since recording equals detection by
    reading the steps again: duplicates within a set, exact and near duplicates across splits
    (numeric and chat), the admission gate's verified check, and the refusal of ``dataset
    create``, word for word."""
    from trajledger.ledger.contamination import verified_contamination

    key = copy.keys.signer("producer")
    copied = record_batch(
        copy, numeric_rows("c0", walk(0, 30), actions(0, 30))
        + numeric_rows("c1", walk(1, 30) + 1e-3, actions(1, 30)), env="grid@1", policy="p1",
        signer=key, name="copies-of-a0-a1",
    )  # fmt: skip
    sets = {
        "holdout": [built.hold_num, built.hold_llm],
        "train": [built.train_num, built.train_llm, built.hold_num],
        "regression": [copied.digest, built.hold_llm],
    }

    def refusal() -> str:
        with pytest.raises(PolicyError) as e:
            create_dataset(copy, "new-hold", "1", "holdout", [copied.digest], key)
        return str(e.value)

    kept = {split: check_dataset(copy, split, b) for split, b in sets.items()}
    kept_refusal = refusal()
    assert {s for c in kept.values() for s in c.sources.values()} == {"recorded"}
    # Without any kept features file (as for a batch recorded before they were kept): each
    # batch's features are computed from its steps.parquet.
    for batch in {b for c in kept.values() for b in c.sources}:
        kept_features(copy, batch).unlink()
    shutil.rmtree(copy.root / "index" / "features", ignore_errors=True)
    again = {split: check_dataset(copy, split, b) for split, b in sets.items()}
    # (computed once per batch, then read from the derived cache)
    assert {s for c in again.values() for s in c.sources.values()} == {"computed", "cache"}
    for split in sets:
        assert again[split].duplicates == kept[split].duplicates, split
        assert again[split].findings == kept[split].findings, split
    assert refusal() == kept_refusal
    assert "exactly duplicate episodes of the other split" in kept_refusal
    assert pairs(kept["holdout"].findings) == WANT
    assert kept["train"].duplicates and kept["regression"].findings
    # The gate reads the verified bytes and finds the same across splits.
    train = {built.train_num: None, built.train_llm: None}
    gate = verified_contamination(copy.store, train, hold_side(copy, built))
    assert [f.to_json() for f in gate.findings] == [
        {**f.to_json(), "train_datasets": []} for f in kept["holdout"].findings
    ]


def test_the_far_below_warning_on_mean_return_counts_the_returns() -> None:
    """rev12's left item (fixed by fix11): the standard error of a segment's mean return was
    taken over all its episodes, those without a return (null: data without rewards) too, so
    a segment mixing both warned more readily, with an n that counted episodes. Here a segment
    of 2 returns and 8 nulls, 2.8 below an aggregate of deviation 2.1: within 2 standard errors
    for n = 2 (no warning), beyond them for n = 10 (the warning given before); one of 10
    returns warns, with n=10."""
    from trajledger.ledger.index.stats import _Columns, _warnings

    def columns(ret: list[float]) -> _Columns:
        nan = np.full(len(ret), np.nan)
        return _Columns(np.array(ret), nan, nan, nan, nan, nan, nan,
                        [f"t{i}" for i in range(len(ret))])

    others = [9.0, 13.0] * 15
    mixed = columns(others + [8.0, 8.0] + [math.nan] * 8)
    everything = np.arange(40)
    seg = mixed.metrics(np.arange(30, 40))
    agg = mixed.metrics(everything)
    assert (seg.episodes, seg.returns, agg.returns) == (10, 2, 32)
    assert _warnings(seg, agg) == ()
    full = columns(others + [7.5] * 10)
    seg, agg = full.metrics(np.arange(30, 40)), full.metrics(everything)
    (warning,) = _warnings(seg, agg)
    assert warning.startswith("mean return 7.5 is far below ") and warning.endswith(", n=10)")
