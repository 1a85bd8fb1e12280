"""Environments, evaluators, rollout batches and datasets (ledger/artifacts.py), and the
``Ledger.record_batch`` method.

Each refusal asserts the specific error and message, and that the ledger did not change (log size
and the set of stored blobs).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajledger import Ledger
from trajledger.ledger.artifacts import (
    BatchResult,
    batch_files,
    create_dataset,
    record_batch,
    register_environment,
    register_evaluator,
    resolve_registered,
)
from trajledger.ledger.catalog import RefError
from trajledger.ledger.errors import LedgerError
from trajledger.ledger.keys import Signer
from trajledger.ledger.rollouts import RolloutValidationError
from trajledger.verify import predicates
from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import FormatError, PolicyError
from trajledger.verify.statement import Statement, verify_statement


@pytest.fixture
def ledger(home: Path) -> Ledger:
    return Ledger.open(home)


@pytest.fixture
def alice(ledger: Ledger) -> Signer:
    return ledger.keys.create("alice", encrypt=False)


@pytest.fixture
def registered(ledger: Ledger, alice: Signer) -> Ledger:
    """Environment cart@1 (index 0) and evaluator judge@1 (index 1)."""
    register_environment(ledger, "cart", "1", alice, gymnasium_id="CartPole-v1")
    register_evaluator(ledger, "judge", "1", "deterministic", alice)
    return ledger


def snapshot(ledger: Ledger) -> tuple[int, frozenset[str]]:
    return ledger.log.size, frozenset(ledger.store.iter_digests())


def rows(episodes: int = 2, steps: int = 3, base: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "episode_id": f"ep-{e}",
            "step": s,
            "obs": [float(e), float(s)],
            "action": [float(s % 2)],
            "reward": 1.0 + e,
            "terminated": s == steps - 1,
            "truncated": False,
        }
        for e in range(base, base + episodes)
        for s in range(steps)
    ]


def statement(ledger: Ledger, envelope_digest: str) -> Statement:
    return Statement.from_bytes(Envelope.from_bytes(ledger.store.get(envelope_digest)).payload)


def table_of(ledger: Ledger, batch: str, name: str) -> pa.Table:
    return pq.read_table(io.BytesIO(ledger.store.get_verified(batch_files(ledger, batch)[name])))


# -- environments and evaluators ------------------------------------------------------------------


def test_register_environment_descriptor(ledger: Ledger, alice: Signer) -> None:
    import gymnasium

    rec = register_environment(
        ledger, "cart", "1", alice, gymnasium_id="CartPole-v1", source="gymnasium"
    )
    st = statement(ledger, rec.envelope_digest)
    verify_statement(
        Envelope.from_bytes(ledger.store.get(rec.envelope_digest)),
        [alice.public],
        allowed_predicate_types={predicates.ENVIRONMENT},
        subject_digest=rec.digest,
    )
    assert st.subjects[0].name == "cart@1"
    assert {k: v for k, v in st.predicate.items() if k != "manifest"} == {
        "name": "cart", "version": "1", "source": "gymnasium", "gymnasiumId": "CartPole-v1"
    }  # fmt: skip
    (descriptor,) = batch_files(ledger, rec.digest).items()
    assert descriptor[0] == "environment.json"
    assert json.loads(ledger.store.get_verified(descriptor[1])) == {
        "name": "cart",
        "version": "1",
        "source": "gymnasium",
        "gymnasium": {"id": "CartPole-v1", "version": gymnasium.__version__},
    }


def test_register_environment_files_and_rules(
    ledger: Ledger, alice: Signer, tmp_path: Path
) -> None:
    code, rules = tmp_path / "env.py", tmp_path / "rules.md"
    code.write_text("x = 1\n")
    rules.write_text("+1 per step\n")
    rec = register_environment(ledger, "grid", "2", alice, files=[code], rules=rules)
    files = batch_files(ledger, rec.digest)
    assert sorted(files) == ["env.py", "rules.md"]
    assert statement(ledger, rec.envelope_digest).predicate["rulesDigest"] == files["rules.md"]


def test_environment_version_is_immutable(ledger: Ledger, alice: Signer) -> None:
    first = register_environment(ledger, "cart", "1", alice)
    before = snapshot(ledger)
    with pytest.raises(
        PolicyError,
        match=rf"^environment cart@1: already recorded as {first.digest} \(log index 0\); "
        "versions are immutable, record a new version$",
    ):
        register_environment(ledger, "cart", "1", alice, source="elsewhere")
    assert snapshot(ledger) == before
    assert register_environment(ledger, "cart", "2", alice).index == 1


def test_two_writers_racing_for_one_name_log_one_record(
    ledger: Ledger, alice: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rev6 (finding 2's root): a name was checked free only before the record's files were
    # written, outside the log's lock; a writer that took the name meanwhile (here: while the
    # descriptor is written) was not seen, and the log held two records of cart@1.
    import trajledger.ledger.artifacts as artifacts

    real = artifacts._descriptor
    raced: list[bool] = []

    def racing(tmp: Path, name: str, body: dict[str, Any]) -> dict[str, Path]:
        if not raced:
            raced.append(True)
            register_environment(Ledger.open(ledger.root), "cart", "1", alice, source="other")
        return real(tmp, name, body)

    monkeypatch.setattr(artifacts, "_descriptor", racing)
    with pytest.raises(PolicyError, match=r"^environment cart@1: already recorded as "):
        register_environment(ledger, "cart", "1", alice)
    assert raced and ledger.log.size == 1


def test_environment_with_unreadable_rules(ledger: Ledger, alice: Signer, tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match=r"rules\.md: cannot read: No such file or directory$"):
        register_environment(ledger, "cart", "1", alice, rules=tmp_path / "rules.md")
    assert snapshot(ledger) == (0, frozenset())


def test_register_evaluator(ledger: Ledger, alice: Signer, tmp_path: Path) -> None:
    rubric, prompt = tmp_path / "rubric.md", tmp_path / "prompt.txt"
    rubric.write_text("1 if right\n")
    prompt.write_text("Judge this.\n")
    rec = register_evaluator(
        ledger, "gpt", "3", "llm-judge", alice, model_id="m-1", rubric=rubric, prompt=prompt
    )
    files = batch_files(ledger, rec.digest)
    p = statement(ledger, rec.envelope_digest).predicate
    assert (p["kind"], p["modelId"]) == ("llm-judge", "m-1")
    assert (p["rubricDigest"], p["promptDigest"]) == (files["rubric.md"], files["prompt.txt"])


@pytest.mark.parametrize(
    ("kind", "model", "message"),
    [
        ("llm-judge", None, r"^evaluator j@1: an llm-judge needs --model$"),
        ("oracle", None, r"^evaluator j@1 \(evaluator/v1\): kind is 'oracle', want one of "
         r"\['deterministic', 'llm-judge', 'human'\]$"),
    ],
)
def test_bad_evaluator_refused(
    ledger: Ledger, alice: Signer, kind: str, model: str | None, message: str
) -> None:
    with pytest.raises(FormatError, match=message):
        register_evaluator(ledger, "j", "1", kind, alice, model_id=model)
    assert snapshot(ledger) == (0, frozenset())


def test_evaluator_version_is_immutable(registered: Ledger, alice: Signer) -> None:
    before = snapshot(registered)
    with pytest.raises(PolicyError, match=r"^evaluator judge@1: already recorded as sha256:"):
        register_evaluator(registered, "judge", "1", "human", alice)
    assert snapshot(registered) == before


def test_resolve_registered(registered: Ledger) -> None:
    assert resolve_registered(registered, "cart@1", "environment").ref == "cart@1"
    with pytest.raises(RefError, match=r"^judge@1: is an evaluator, not an environment$"):
        resolve_registered(registered, "judge@1", "environment")


# -- rollout batches ------------------------------------------------------------------------------


def test_record_batch_from_rows(registered: Ledger, alice: Signer) -> None:
    seen: list[int] = []
    result = record_batch(
        registered,
        rows(),
        env="cart@1",
        evaluator="judge@1",
        policy="ppo-1",
        signer=alice,
        consent="opt-in",
        licence="CC0-1.0",
        retention="365d",
        on_chunk=seen.append,
    )
    assert isinstance(result, BatchResult) and result.digest == result.recorded.digest
    assert (result.environment.ref, result.evaluator and result.evaluator.ref) == (
        "cart@1",
        "judge@1",
    )
    assert sum(seen) == 6
    st = statement(registered, result.recorded.envelope_digest)
    assert st.predicate_type == predicates.ROLLOUT_BATCH
    assert st.subjects[0].name == "rollouts-cart@1-ppo-1"
    p = st.predicate
    assert p["counts"] == {"steps": 6, "episodes": 2}
    assert (p["consent"], p["licence"], p["retention"]) == ("opt-in", "CC0-1.0", "365d")
    assert (p["policyVersion"], p["generator"], p["schemaVersion"]) == ("ppo-1", "trajledger", "3")
    assert p["stats"]["reward_sum"] == 9.0 and "seeds" not in p["stats"]
    assert result.stats["num_steps"] == 6
    steps = table_of(registered, result.digest, "steps.parquet")
    assert steps.column("obs").to_pylist() == [r["obs"] for r in rows()]


def test_record_batch_from_table_with_episodes(registered: Ledger, alice: Signer) -> None:
    from trajledger.ledger.rollouts import rows_to_episodes, rows_to_table

    episodes = rows_to_episodes(
        [
            {"episode_id": "ep-0", "seed": 7, "policy_version": "given"},
            {"episode_id": "ep-1", "seed": 2**60},
        ]
    )
    result = record_batch(
        registered, rows_to_table(rows()), env="cart@1", policy="p", signer=alice,
        episodes=episodes,
    )  # fmt: skip
    eps = table_of(registered, result.digest, "episodes.parquet").to_pylist()
    env = result.environment.digest
    assert [(e["seed"], e["env_version"], e["policy_version"]) for e in eps] == [
        (7, env, "given"),  # a given version is kept, a null one filled
        (2**60, env, "p"),
    ]
    # Seeds beyond 2^53 cannot be JSON numbers: the signed predicate carries decimal strings.
    assert statement(registered, result.recorded.envelope_digest).predicate["seeds"] == [
        "7",
        str(2**60),
    ]
    assert result.stats["seeds"] == ["7", str(2**60)]


def test_record_batch_from_files(registered: Ledger, alice: Signer, tmp_path: Path) -> None:
    from trajledger.ledger.rollouts import rows_to_table

    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(rows_to_table(rows()), a)
    pq.write_table(rows_to_table(rows(base=5)), b)
    eps = tmp_path / "eps.parquet"
    pq.write_table(pa.table({"episode_id": ["ep-0", "ep-6"], "task_id": ["t0", "t6"]}), eps)
    # The episode file covers episodes of both files: it is given to the batch once.
    result = record_batch(
        registered, [a, str(b)], env="cart@1", policy="p", signer=alice, episodes=eps
    )
    got = table_of(registered, result.digest, "episodes.parquet")
    assert got.column("episode_id").to_pylist() == ["ep-0", "ep-1", "ep-5", "ep-6"]
    assert got.column("task_id").to_pylist() == ["t0", None, None, "t6"]


def test_record_batch_is_byte_reproducible(registered: Ledger, alice: Signer) -> None:
    one = record_batch(registered, rows(), env="cart@1", policy="p", signer=alice)
    before = snapshot(registered)
    two = record_batch(registered, rows(), env="cart@1", policy="p", signer=alice)
    assert (two.digest, two.recorded.index) == (one.digest, one.recorded.index)
    assert snapshot(registered) == before


@pytest.mark.parametrize(
    ("change", "differ"),
    [
        ({"evaluator": "judge@1"}, "evaluator"),
        ({"licence": "MIT"}, "licence"),
        ({"name": "other"}, "name"),
        ({"generator": "g2"}, "generator"),
    ],
)
def test_same_rollouts_with_other_metadata_refused(
    registered: Ledger, alice: Signer, change: dict[str, Any], differ: str
) -> None:
    first = record_batch(registered, rows(), env="cart@1", policy="p", signer=alice)
    before = snapshot(registered)
    with pytest.raises(
        PolicyError,
        match=rf"^rollout batch {first.digest}: the same rollouts are already recorded at log "
        rf"index 2 as 'rollouts-cart@1-p' with other metadata \({differ}\); a batch digest "
        rf"names one record: use that one \('trajledger show {first.digest}' shows how it was "
        r"recorded\)$",
    ):
        record_batch(registered, rows(), env="cart@1", policy="p", signer=alice, **change)
    assert snapshot(registered) == before


def test_other_policy_is_other_data(registered: Ledger, alice: Signer) -> None:
    # The policy version is written into the episode table, so the batch differs.
    one = record_batch(registered, rows(), env="cart@1", policy="p1", signer=alice)
    two = record_batch(registered, rows(), env="cart@1", policy="p2", signer=alice)
    assert one.digest != two.digest
    assert (
        batch_files(registered, one.digest)["steps.parquet"]
        == (batch_files(registered, two.digest)["steps.parquet"])
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"env": "cart@2"},
            RefError,
            r"^cart@2: environment cart has no version '2'; recorded versions: 1 \(refer to "
            r"one as cart@1\)$",
        ),
        (
            {"evaluator": "cart@1"},
            RefError,
            r"^cart@1: is an environment, not an evaluator$",
        ),
        ({"policy": ""}, FormatError, r"^rollout batch: the policy version is empty"),
        ({"source": []}, FormatError, r"^rollout batch: no input given \(no files, no rows\)$"),
        ({"source": 7}, FormatError, r"^rollout batch: input is a int, want file paths, a "),
        ({"source": ["a.parquet", {"x": 1}]}, FormatError, r"mixes files with other values"),
        (
            {"source": ["missing.parquet"]},
            LedgerError,
            r"^missing\.parquet: no such file or directory$",
        ),
        (
            {"episodes": Path("e.parquet")},
            FormatError,
            r"^with steps given as a table or rows, give episodes as a table too$",
        ),
    ],
    ids=["env", "evaluator", "policy", "empty", "not-a-source", "mixed", "missing", "episodes"],
)
def test_record_batch_refusals(
    registered: Ledger, alice: Signer, kwargs: dict[str, Any], error: type[Exception],
    message: str,
) -> None:  # fmt: skip
    args: dict[str, Any] = {"source": rows(), "env": "cart@1", "policy": "p", **kwargs}
    before = snapshot(registered)
    with pytest.raises(error, match=message):
        record_batch(registered, args.pop("source"), signer=alice, **args)
    assert snapshot(registered) == before


def test_episode_table_with_files_refused(
    registered: Ledger, alice: Signer, tmp_path: Path
) -> None:
    from trajledger.ledger.rollouts import rows_to_episodes, rows_to_table

    src = tmp_path / "a.parquet"
    pq.write_table(rows_to_table(rows()), src)
    with pytest.raises(FormatError, match=r"^with steps given as files, give episodes as a file"):
        record_batch(
            registered, [src], env="cart@1", policy="p", signer=alice,
            episodes=rows_to_episodes([{"episode_id": "ep-0"}]),
        )  # fmt: skip
    with pytest.raises(LedgerError, match=r"nope\.parquet: no such file$"):
        record_batch(
            registered, [src], env="cart@1", policy="p", signer=alice,
            episodes=tmp_path / "nope.parquet",
        )  # fmt: skip


def test_episode_file_with_jsonl_refused(registered: Ledger, alice: Signer, tmp_path: Path) -> None:
    src = tmp_path / "chat.jsonl"
    src.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}], "reward": 1}))
    eps = tmp_path / "eps.parquet"
    pq.write_table(pa.table({"episode_id": ["line-1"]}), eps)
    with pytest.raises(FormatError, match=r"this input carries its own episode attributes"):
        record_batch(registered, [src], env="cart@1", policy="p", signer=alice, episodes=eps)


def test_invalid_rollouts_leave_no_trace(registered: Ledger, alice: Signer) -> None:
    bad = rows()
    bad[1]["reward"] = float("nan")
    bad[5]["terminated"] = False
    before = snapshot(registered)
    with pytest.raises(RolloutValidationError) as info:
        record_batch(registered, bad, env="cart@1", policy="p", signer=alice)
    assert [str(p) for p in info.value.problems][:1] == [
        "row 1, column 'reward': reward is nan, want a finite number"
    ]
    assert snapshot(registered) == before
    assert list((registered.root / "tmp").iterdir()) == []  # the private directory is gone


# -- datasets -------------------------------------------------------------------------------------


def test_create_dataset_and_duplicates(registered: Ledger, alice: Signer) -> None:
    a = record_batch(registered, rows(), env="cart@1", policy="p", signer=alice)
    copy = [dict(r, episode_id="copy") for r in rows(episodes=1, base=1)]
    b = record_batch(registered, rows(episodes=1, base=9) + copy, env="cart@1", policy="q",
                     signer=alice)  # fmt: skip
    result = create_dataset(
        registered, "mix", "1", "train", [a.digest[:13], b.digest, a.digest], alice
    )
    first, second = sorted([a.digest, b.digest])
    dup, orig = ("copy", "ep-1") if first == a.digest else ("ep-1", "copy")
    assert result.duplicate_episodes == (
        f"episode {dup!r} of batch {second[:19]}… duplicates episode {orig!r} of batch "
        f"{first[:19]}…",
    )
    assert [b.digest for b in result.batches] == [a.digest, b.digest]  # distinct, in order
    p = statement(registered, result.recorded.envelope_digest).predicate
    assert (p["name"], p["version"], p["split"], p["purpose"], p["batches"]) == (
        "mix", "1", "train", "train", [first, second]
    )  # fmt: skip
    (name, blob), = batch_files(registered, result.digest).items()  # fmt: skip
    assert name == "dataset.json"
    assert json.loads(registered.store.get_verified(blob))["batches"] == [first, second]


def test_dataset_refusals(registered: Ledger, alice: Signer) -> None:
    a = record_batch(registered, rows(), env="cart@1", policy="p", signer=alice)
    train = create_dataset(registered, "t", "1", "train", [a.digest], alice)
    before = snapshot(registered)
    with pytest.raises(
        PolicyError,
        match=rf"^dataset h@1 \(regression\): batch {a.digest} is already in train dataset t@1 "
        rf"\({train.digest[:19]}…\): leave it out \(a batch is in one split\), or record new "
        r"rollouts for the regression set$",
    ):
        create_dataset(registered, "h", "1", "regression", [a.digest], alice)
    with pytest.raises(PolicyError, match=r"^dataset t@1: already recorded as sha256:"):
        create_dataset(registered, "t", "1", "train", [a.digest], alice)
    with pytest.raises(RefError, match=r"^cart@1: is an environment, not a rollout-batch$"):
        create_dataset(registered, "x", "1", "train", ["cart@1"], alice)
    with pytest.raises(FormatError, match=r"^dataset x@1: no member batches, want at least one$"):
        create_dataset(registered, "x", "1", "train", [], alice)
    with pytest.raises(FormatError, match=r"^dataset x@1: split 'test', want one of train, "):
        create_dataset(registered, "x", "1", "test", [a.digest], alice)
    assert snapshot(registered) == before


def test_unreadable_dataset_record_fails_closed(registered: Ledger, alice: Signer) -> None:
    a = record_batch(registered, rows(), env="cart@1", policy="p", signer=alice)
    train = create_dataset(registered, "t", "1", "train", [a.digest], alice)
    registered.store.delete(train.recorded.envelope_digest)
    with pytest.raises(
        LedgerError,
        match=rf"^dataset {train.digest} \(log index 3\): its envelope "
        rf"{train.recorded.envelope_digest} cannot be read, so its split is unknown",
    ):
        create_dataset(registered, "h", "1", "holdout", [a.digest], alice)


# -- Ledger.record_batch --------------------------------------------------------------------------


def test_ledger_record_batch(registered: Ledger, alice: Signer) -> None:
    by_key = registered.record_batch(rows(), env="cart@1", policy="p", key="alice", name="k")
    by_signer = registered.record_batch(
        rows(base=3), env="cart@1", policy="p", signer=alice, evaluator="judge@1"
    )
    assert (by_key.recorded.index, by_signer.recorded.index) == (2, 3)
    assert by_signer.evaluator is not None and by_signer.evaluator.ref == "judge@1"
    assert statement(registered, by_key.recorded.envelope_digest).subjects[0].name == "k"
    with pytest.raises(TypeError, match=r"give exactly one of key= \(a key name\) or signer=$"):
        registered.record_batch(rows(), env="cart@1", policy="p")
    with pytest.raises(TypeError, match=r"give exactly one of key="):
        registered.record_batch(rows(), env="cart@1", policy="p", key="alice", signer=alice)


def test_single_input_path(registered: Ledger, alice: Signer, tmp_path: Path) -> None:
    from trajledger.ledger.rollouts import rows_to_table

    src = tmp_path / "a.parquet"
    pq.write_table(rows_to_table(rows()), src)
    assert (
        record_batch(registered, src, env="cart@1", policy="p", signer=alice).stats["num_steps"]
        == 6
    )


def test_unusable_log_key_fails_before_any_work(
    registered: Ledger, alice: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trajledger.ledger.rollouts as rollouts

    (registered.root / "log-key" / "log.key").unlink()
    reopened = Ledger.open(registered.root)
    monkeypatch.setattr(rollouts, "write_steps_parquet", None)  # must not be reached
    before = snapshot(reopened)
    with pytest.raises(LedgerError, match=r"^key log: its private half .*log-key/log\.key is "
                       r"missing, but .*log\.pub is there: restore it from your backup$"):
        record_batch(reopened, rows(), env="cart@1", policy="p", signer=alice)
    assert snapshot(reopened) == before


@pytest.mark.parametrize("change", [{"policy": "q"}, {"name": "again", "policy": "q"}])
def test_erased_rollouts_are_not_restored_under_another_batch(
    registered: Ledger, alice: Signer, change: dict[str, Any]
) -> None:
    """Only the same batch digest was refused: the same steps recorded under another policy
    (its episodes table, so the batch digest, differ) stored the erased steps.parquet again
    and were recorded, exit 0; the erased batch then verified "erased" with its data back
    (rev8). Now a file whose blob an erasure here deleted is refused likewise."""
    from trajledger.ledger.status import erase

    first = record_batch(registered, rows(), env="cart@1", policy="p", signer=alice)
    steps = batch_files(registered, first.digest)["steps.parquet"]
    erasure, _deleted, _kept = erase(registered, first.digest, alice, reason="consent")
    before = snapshot(registered)
    with pytest.raises(PolicyError) as e:
        record_batch(registered, rows(), env="cart@1", signer=alice,
                     **{"policy": "p", **change})  # fmt: skip
    assert str(e.value).endswith(
        f": steps.parquet: these rollouts were erased (blob {steps[:19]}…, deleted by the "
        f"erasure at log index {erasure.index}); recording them again would restore erased "
        "data"), str(e.value)
    assert snapshot(registered) == before
    other = record_batch(registered, rows(base=5), env="cart@1", policy="q", signer=alice)
    assert other.digest != first.digest  # other rollouts are recorded


@pytest.mark.parametrize("change", [{}, {"licence": "MIT"}], ids=["same-metadata", "other"])
def test_erased_rollouts_are_not_restored(
    registered: Ledger, alice: Signer, change: dict[str, Any]
) -> None:
    from trajledger.ledger.status import erase

    first = record_batch(registered, rows(), env="cart@1", policy="p", signer=alice)
    erasure, deleted, _kept = erase(registered, first.digest, alice, reason="consent")
    assert deleted == 3  # steps.parquet, episodes.parquet and the kept episode features
    before = snapshot(registered)
    with pytest.raises(
        PolicyError,
        match=rf"^rollout batch {first.digest}: these rollouts were erased \(log index "
        rf"{erasure.index}\); recording them again would restore erased data$",
    ):
        record_batch(registered, rows(), env="cart@1", policy="p", signer=alice, **change)
    assert snapshot(registered) == before
