"""In-process training: ``with ledger.training(...) as run``: the data, saves, refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trajledger import Ledger
from trajledger.ledger.errors import LedgerError
from trajledger.runner.admission import DataRefusedError
from trajledger.runner.trainers import TrainingDataError
from trajledger.verify.dsse import Envelope
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.statement import Statement


def _kinds(ledger: Ledger) -> list[str]:
    return [LogEntry.from_bytes(e).kind for e in ledger.log.entries(0, ledger.log.size)]


def _predicate(ledger: Ledger, digest: str) -> dict[str, object]:
    for raw in ledger.log.entries(0, ledger.log.size):
        e = LogEntry.from_bytes(raw)
        if e.subject == digest and e.kind == "checkpoint":
            return Statement.from_bytes(Envelope.from_bytes(ledger.store.get(e.envelope)).payload
                                        ).predicate
    raise AssertionError(digest)


def test_the_run_gives_the_admitted_data(chat_home: Path) -> None:
    ledger = Ledger.open(chat_home)
    with ledger.training("chat@1", key="trainer", name="sft", version="1") as run:
        assert run.admission.name == "chat" and run.admission.report.ok
        assert run.steps.num_rows == 26 and run.episodes.num_rows == 8
        assert run.steps is run.steps  # built once
        convs = run.conversations()
        assert convs[0]["messages"][-1] == {"role": "assistant", "content": "0"}
        ds = run.hf_dataset("conversations")
        assert ds.num_rows == 8 and ds[1]["messages"][1]["content"] == "what is 1 + 1 ?"
        steps = run.hf_dataset()
        assert steps.num_rows == 26 and "extras" in steps.column_names  # maps as {key, value}
        assert run.hf_dataset("episodes")["episode_id"][0] == "conv-0"
        with pytest.raises(ValueError, match="table 'rows'"):
            run.hf_dataset("rows")  # type: ignore[arg-type]
    assert _kinds(ledger)[-1] == "approval"  # nothing recorded by reading


def test_save_records_checkpoints_with_their_lineage(chat_home: Path, tmp_path: Path) -> None:
    ledger = Ledger.open(chat_home)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 64)
    with ledger.training("chat@1", key="trainer", name="sft", version="1") as run:
        mid = run.save(model, step=5, metrics={"loss": 1.5}, trainer="t:Cfg",
                       config={"lr": 0.1}, seed=7)
        (model / "model.safetensors").write_bytes(b"\1" * 64)  # trained further
        final = run.save(model, metrics={"loss": 1.0})
        with pytest.raises(LedgerError, match=r"checkpoint sft@1 is already recorded"):
            run.save(model)
    assert run.saved == [mid, final]
    assert _kinds(ledger)[-2:] == ["checkpoint", "checkpoint"]
    pred = _predicate(ledger, mid.digest)
    build = pred["buildDefinition"]
    assert isinstance(build, dict)
    assert build["buildType"] == "https://trajledger.dev/build/python/v1"
    ext = build["externalParameters"]
    assert (ext["name"], ext["version"], ext["step"], ext["trainer"], ext["seed"]) == (
        "sft", "1-step5", 5, "t:Cfg", 7)
    assert ext["config"] == {"lr": 0.1}
    assert ext["command"] == [sys.executable, *sys.argv]  # this process's command line
    roles = [d["annotations"]["role"] for d in build["resolvedDependencies"]]
    assert roles[:2] == ["dataset", "environment"] and "dependency-lock" in roles
    byproducts = pred["runDetails"]["byproducts"]  # type: ignore[index]
    assert byproducts[0]["annotations"] == {"loss": 1.5}
    for ref in ("sft@1-step5", "sft@1"):
        report = ledger.verify(ref)
        assert report.ok, report.failures()
    # After the block: refused.
    with pytest.raises(LedgerError, match=r"training run sft@1 is over"):
        run.save(model, step=9)


def test_a_directory_with_nothing_to_record(chat_home: Path, tmp_path: Path) -> None:
    ledger = Ledger.open(chat_home)
    with ledger.training("chat@1", key="trainer", name="sft", version="1") as run:
        with pytest.raises(LedgerError, match="not a directory"):
            run.save(tmp_path / "missing")
        (tmp_path / "empty").mkdir()
        with pytest.raises(LedgerError, match="holds no file to record"):
            run.save(tmp_path / "empty")


def _first_batch(ledger: Ledger) -> str:
    return next(LogEntry.from_bytes(e).subject for e in ledger.log.entries(0, ledger.log.size)
                if LogEntry.from_bytes(e).kind == "rollout-batch")


def _model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\0" * 64)
    return model


def test_a_refused_dataset_does_not_start_the_block(chat_home: Path) -> None:
    ledger = Ledger.open(chat_home)
    ledger.create_dataset("chat", "2", "train", [_first_batch(ledger)], key="vendor")
    entered = False
    with (
        pytest.raises(DataRefusedError, match="dataset chat@2: refused"),
        ledger.training("chat@2", key="trainer", name="sft", version="1"),
    ):
        entered = True
    assert not entered
    assert _kinds(ledger)[-1] == "refusal"
    refusal = LogEntry.from_bytes(ledger.log.entry(ledger.log.size - 1))
    body = Statement.from_bytes(Envelope.from_bytes(ledger.store.get(refusal.envelope)).payload)
    assert body.predicate["trainer"] == "in-process"


def test_a_save_after_the_data_was_revoked_records_nothing(
    chat_home: Path, tmp_path: Path
) -> None:
    # rev6 finding 1: every way to train judges the rules again before it records.
    ledger = Ledger.open(chat_home)
    model, batch = _model(tmp_path), _first_batch(ledger)
    with ledger.training("chat@1", key="trainer", name="sft", version="1") as run:
        run.save(model, step=1)
        ledger.revoke(batch, key="approver", reason="PII")
        with pytest.raises(DataRefusedError, match="nothing was recorded") as e:
            run.save(model, step=2)
    assert "revoked: PII" in str(e.value)
    assert _kinds(ledger)[-3:] == ["checkpoint", "revocation", "refusal"]


def test_a_revocation_while_the_files_are_stored_is_seen_under_the_logs_lock(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rev6 finding 1: the rules are judged again under the log's lock, just before the append
    # (the judgement before storing the files can be overtaken while a large model is stored).
    ledger = Ledger.open(chat_home)
    model, batch = _model(tmp_path), _first_batch(ledger)
    with ledger.training("chat@1", key="trainer", name="sft", version="1") as run:
        store = run.ledger.store
        put_file = store.put_file

        def revoke_then_put(*args: object, **kw: object) -> object:
            Ledger.open(chat_home).revoke(batch, key="approver", reason="PII")
            monkeypatch.setattr(store, "put_file", put_file)
            return put_file(*args, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(store, "put_file", revoke_then_put)
        with pytest.raises(DataRefusedError, match="nothing was recorded"):
            run.save(model)
    assert _kinds(ledger)[-2:] == ["revocation", "refusal"]


def test_conversations_of_observation_data_are_refused(chat_home: Path) -> None:
    import pyarrow as pa

    ledger = Ledger.open(chat_home)
    with ledger.training("chat@1", key="trainer", name="sft", version="1") as run:
        run._tables = (run.steps.set_column(  # a table without messages
            run.steps.schema.get_field_index("role"), "role",
            pa.nulls(run.steps.num_rows, pa.string())), run.episodes)
        with pytest.raises(TrainingDataError, match="no step has a role"):
            run.conversations()


def test_a_file_that_changes_while_it_is_saved_is_refused(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # trn35 (`runner.settled`): what `run.save` records is the directory as listed. A writer
    # on another thread (an uploader, a logger writing into the directory) that grows a file
    # after the store copied it recorded a mix of the file's states, exit 0, before.
    from trajledger.runner.settled import OutputsChangedError

    ledger = Ledger.open(chat_home)
    model = _model(tmp_path)
    with ledger.training("chat@1", key="trainer", name="sft", version="1") as run:
        store = run.ledger.store
        put_file = store.put_file

        def put_then_grow(path: Path, **kw: object) -> object:
            got = put_file(path, **kw)  # type: ignore[arg-type]
            with open(path, "ab") as f:
                f.write(b"more")
            return got

        monkeypatch.setattr(store, "put_file", put_then_grow)
        size = ledger.log.size
        with pytest.raises(OutputsChangedError, match="changed while it was recorded"):
            run.save(model)
        assert ledger.log.size == size
        monkeypatch.setattr(store, "put_file", put_file)
        run.save(model)  # held still: recorded
    assert _kinds(ledger)[-1] == "checkpoint"
