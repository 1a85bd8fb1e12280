"""First use in bulk equals first use entry by entry on a hostile log (review of issue 21's
first use: `trust_rows` and `TrustState.sync`).

The log holds, beside the chat ledger's sound records: a rollout batch whose envelope has a
duplicate ``payload`` key (the batch's fast reading takes it; the strict parse refuses it), a
dataset whose envelope is missing, one whose stored envelope does not hash to its entry, a
revocation whose envelope is not JSON, and an environment of another digest under the name and
version of the ledger's own (a name clash). Its rows are the same however the log is read:
extended after every entry, in one bulk reading (indexes built after the rows), by worker
processes, and as ``fsck`` and ``reindex --check`` derive them again
(`TrustState.disagreements`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from trajledger import Ledger
from trajledger.ledger import trust_rows, trust_state
from trajledger.ledger.log import EntrySpec
from trajledger.ledger.record import record_statement
from trajledger.ledger.user_state import STATE_DIR_ENV
from trajledger.verify.log_index import read_record
from trajledger.verify.predicates import ENVIRONMENT


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _hostile(home: Path) -> dict[str, int]:
    """Append the hostile records; their log indices by name."""
    ledger = Ledger.open(home)
    state = ledger.trust_state()
    batch = state.entry(state.of_kind("rollout-batch")[0])
    env = state.entry(state.of_kind("environment")[0])
    assert batch is not None and env is not None
    signer = ledger.keys.signer("vendor")
    where: dict[str, int] = {}
    # A name clash: another environment, signed, under the ledger's environment's name.
    statement, _ = read_record(env, ledger.store.get(env.envelope), "environment")
    other = ledger.store.put_bytes(b"another environment's manifest")
    where["clash"] = record_statement(ledger, "clash", other, ENVIRONMENT, statement.predicate,
                                      signer, "environment").index
    # A batch envelope with its payload given twice.
    doc = json.loads(ledger.store.get(batch.envelope))
    text = json.dumps(doc)[:-1] + ', "payload": ' + json.dumps(doc["payload"]) + "}"
    twice = ledger.store.put_bytes(text.encode())
    specs = [EntrySpec("rollout-batch", _digest(b"twice"), twice, batch.signers)]
    # A dataset whose envelope is missing, one whose stored envelope has other bytes.
    specs.append(EntrySpec("dataset", _digest(b"missing"), _digest(b"never stored"),
                           batch.signers))
    damaged = ledger.store.put_bytes(b"the dataset's envelope, before it was damaged")
    path = ledger.store.path_of(damaged)
    path.chmod(0o644)
    path.write_bytes(b"other bytes")
    specs.append(EntrySpec("dataset", _digest(b"damaged"), damaged, batch.signers))
    # A revocation whose envelope is not JSON.
    garbage = ledger.store.put_bytes(b"{")
    specs.append(EntrySpec("revocation", batch.subject, garbage, batch.signers))
    for name, i in zip(("twice", "missing", "damaged", "revocation"), ledger.log.append(specs),
                       strict=True):
        where[name] = i
    return where


def _read(home: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch, **knobs: Any
          ) -> dict[str, set[tuple[Any, ...]]]:
    with monkeypatch.context() as m:
        m.setenv(STATE_DIR_ENV, str(state_dir))
        for name, value in knobs.items():
            m.setattr(trust_state, name, value)
        if knobs.get("_PARALLEL_FROM") == 1:
            m.setattr(trust_rows.Workers, "possible", staticmethod(lambda: True))
        ledger = Ledger.open(home)
        state = ledger.trust_state()
        try:
            assert state.size == ledger.log.size
            assert state.disagreements(ledger.log.entries, ledger.read_blob) == []
            return {t: state._rows(t) for t in trust_state._TABLES}
        finally:
            state.close()


def test_a_hostile_log_gives_the_same_rows_however_it_is_read(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Entry by entry: a state extended before and after the hostile records were appended.
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "incremental"))
    Ledger.open(chat_home).trust_state()
    where = _hostile(chat_home)
    incremental = _read(chat_home, tmp_path / "incremental", monkeypatch, _CHUNK=1)
    bulk = _read(chat_home, tmp_path / "bulk", monkeypatch, _BULK_FROM=1)
    workers = _read(chat_home, tmp_path / "workers", monkeypatch, _PARALLEL_FROM=1, _CHUNK=2)
    assert incremental == bulk == workers
    unreadable = {i for (i,) in bulk["unreadable"]}
    # The records that must be read strictly are listed unreadable (a revocation is read
    # by each decision it could affect: tests/e2e/test_verify_bulk_attacks.py)...
    assert {where["missing"], where["damaged"]} <= unreadable
    # ... the batch the fast reading takes is named by its entry (its decisions read it
    # strictly and fail: tests/unit/ledger/test_trust_state.py), and the clash is indexed.
    names = {row[0]: row for row in bulk["names"]}
    assert where["twice"] not in unreadable and names[where["twice"]][4] == _digest(b"twice")
    clash = names[where["clash"]]
    assert [row for row in names.values() if row[1:4] == clash[1:4]] != [clash]
