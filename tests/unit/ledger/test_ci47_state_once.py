"""The trust state and the policy in force read once a command, decisions unchanged (ci47).

A command asks for its trust state several times (its policy, each name it resolves, each record
it checks), and each ask was a whole sync: a write transaction, the six tables counted, the
unreadable records read again. A sync to the note the last one reached, with no commit to the
database since, is one statement now (`TrustState.sync`); these tests pin that it is, and that
everything a whole sync would refuse or read again between two asks still is: a row another
connection changed, a floor raised elsewhere and the log rolled back, a record that was
unreadable, this object's own writes. An existing state opens without running its schema
unless a table or index is missing; the policy history is followed once for the same records.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trajledger import Ledger
from trajledger.ledger import policy_state, trust_state
from trajledger.ledger.errors import TamperError
from trajledger.ledger.log import EntrySpec
from trajledger.ledger.policy_state import current_policy, policy_toml, read_policy_file
from trajledger.ledger.status import record_policy
from trajledger.ledger.trust_state import TrustState


def _spec(n: int) -> EntrySpec:
    d = "sha256:" + hashlib.sha256(f"entry {n}".encode()).hexdigest()
    return EntrySpec("files", d, d, ("0" * 64,))


def spy(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[Any]:
    """Replace ``owner.name`` by a pass-through that appends its first argument to the list
    returned."""
    seen: list[Any] = []
    real = getattr(owner, name)

    def through(*args: Any, **kwargs: Any) -> Any:
        seen.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, through)
    return seen


def _dataset(ledger: Ledger) -> int:
    """A one-batch dataset (a listing record: its envelope is read to index it); its index."""
    from trajledger.ledger.artifacts import create_dataset, record_batch, register_environment

    key = ledger.keys.create("p", encrypt=False)
    register_environment(ledger, "e", "1", key)
    rows = [{"episode_id": "x", "step": 0, "obs": [0.0], "action": [0.0], "reward": 1.0,
             "terminated": True, "truncated": False}]
    batch = record_batch(ledger, rows, env="e@1", policy="p", signer=key).recorded.digest
    return create_dataset(ledger, "d", "1", "holdout", [batch], key).recorded.index


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The statements of every SQLite connection made from now on."""
    sql: list[str] = []
    real = trust_state.sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        con = real(*args, **kwargs)
        con.set_trace_callback(sql.append)
        return con

    monkeypatch.setattr(trust_state.sqlite3, "connect", connect)
    yield sql


def test_a_second_ask_for_the_same_checkpoint_is_one_statement(
    home: Path, opened: list[str]
) -> None:
    ledger = Ledger.open(home)
    _dataset(ledger)
    state = ledger.trust_state()
    size = state.size
    before = len(opened)
    assert ledger.trust_state() is state and state.size == size
    assert opened[before:] == ["PRAGMA data_version"]
    ledger.log.append([_spec(1)])  # a new checkpoint: a whole sync, in a transaction
    assert ledger.trust_state().size == size + 1
    assert "BEGIN IMMEDIATE" in opened[before:] and "COMMIT" in opened[before:]


def test_an_ask_reads_the_logs_files_once(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each read of the log's checkpoint opens ``checkpoint`` and ``.state/treeState``: an ask
    read them twice (its size, then its note)."""
    from trajledger.ledger.log import reader

    ledger = Ledger.open(home)
    _dataset(ledger)
    ledger.trust_state()
    reads = spy(monkeypatch, reader, "read_regular")
    ledger.trust_state()
    assert [Path(r).name for r in reads] == ["checkpoint", "treeState"]


def test_opening_a_ledger_and_its_log_checks_the_state_directory_four_times(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`user_state.check_enclosing` (a realpath and a stat of each directory above the state:
    0.12 ms) ran six times: the settings' two pins and the lost floor's two paths each found
    the directory again."""
    from trajledger.ledger import user_state

    checked = spy(monkeypatch, user_state, "check_enclosing")
    assert Ledger.open(home).log.size == 0
    assert len(checked) == 4 and len(set(checked)) == 1


def test_a_record_still_unreadable_is_tried_at_each_ask(home: Path, opened: list[str]) -> None:
    ledger = Ledger.open(home)
    ledger.log.append([_spec(0)])  # its envelope is in no store
    state = ledger.trust_state()
    assert state.unreadable() == [0]
    before = len(opened)
    ledger.trust_state()
    assert ("SELECT u.idx, e.raw FROM unreadable u JOIN entries e ON e.idx = u.idx"
            in opened[before:])


def test_a_row_another_connection_deleted_between_two_asks_is_refused(home: Path) -> None:
    ledger = Ledger.open(home)
    _dataset(ledger)
    state = ledger.trust_state()
    size = state.size
    con = sqlite3.connect(state.path / "state.sqlite")
    con.execute("DELETE FROM entries WHERE idx = 0")
    con.commit()
    con.close()
    said = f"entries holds {size - 1} row(s), {size} were derived"
    with pytest.raises(TamperError, match=re.escape(said)):
        ledger.trust_state()


def test_a_floor_raised_elsewhere_then_the_log_rolled_back_is_refused(
    home: Path, tmp_path: Path
) -> None:
    """The note read again is the one this object synced to, but another process raised the
    floor beyond it meanwhile: the rollback is refused, as a whole sync refuses it."""
    ledger = Ledger.open(home)
    _dataset(ledger)
    size = ledger.trust_state().size
    shutil.copytree(home / "log", tmp_path / "old")
    other = Ledger.open(home)
    other.log.append([_spec(1)])  # the floor is one entry beyond
    other.trust_state().close()
    shutil.rmtree(home / "log")
    shutil.copytree(tmp_path / "old", home / "log")
    assert ledger.log.size == size
    with pytest.raises(TamperError, match="rollback"):
        ledger.trust_state()


def test_a_record_unreadable_at_the_last_ask_is_read_again(home: Path) -> None:
    ledger = Ledger.open(home)
    index = _dataset(ledger)
    entry = ledger.trust_state().entry(index)
    assert entry is not None
    blob = ledger.store.path_of(entry.envelope)
    kept = blob.read_bytes()
    blob.parent.chmod(blob.parent.stat().st_mode | stat.S_IWUSR)
    blob.unlink()
    state = ledger.trust_state()
    state.rebuild()  # read the log again without the envelope: the record is unreadable
    assert ledger.trust_state().unreadable() == [index]
    blob.write_bytes(kept)  # the envelope is back (a `fsck --repair`), the log unchanged
    assert ledger.trust_state().unreadable() == []


def test_an_own_write_between_two_asks_syncs_again(home: Path) -> None:
    ledger = Ledger.open(home)
    _dataset(ledger)
    state = ledger.trust_state()
    size = state.size
    state.rebuild()  # this connection's write: data_version does not change
    assert state.size == 0
    assert ledger.trust_state().size == size and state.entry(0) is not None


def test_an_existing_state_opens_without_its_schema(home: Path, opened: list[str]) -> None:
    vkey = Ledger.open(home).log.vkey
    TrustState.open(vkey).close()
    assert not [s for s in opened if "CREATE" in s]


def test_a_state_missing_a_table_or_index_has_it_made_again(
    home: Path, opened: list[str]
) -> None:
    ledger = Ledger.open(home)
    ledger.log.append([_spec(0)])
    path = ledger.trust_state().path / "state.sqlite"
    con = sqlite3.connect(path)
    con.execute("DROP INDEX names_folded")
    con.execute("DROP TABLE entries")
    con.commit()
    con.close()
    TrustState.open(ledger.log.vkey).close()
    con = sqlite3.connect(path)
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    con.close()
    assert {"names_folded", "entries", "entries_kind"} <= names
    with pytest.raises(TamperError, match=re.escape("entries holds 0 row(s), 1 were derived")):
        Ledger.open(home).trust_state()  # made empty: its count is checked, as before


def test_the_policy_history_is_followed_once_for_the_same_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger.init(tmp_path / "led", origin="test/ps")
    ks = {n: ledger.keys.create(n, encrypt=False) for n in ("vendor", "a", "b")}

    def write(serial: int, name: str) -> Path:
        path = tmp_path / f"{name}-{serial}.toml"
        text = policy_toml("ps", {"producer": ([("vendor", ks["vendor"].public)], 1, ""),
                                  "approver": ([(a, ks[a].public) for a in ("a", "b")], 2, "")},
                           ledger.log.vkey, header=f"# {name}")
        path.write_text(text.replace("serial = 1", f"serial = {serial}"))
        return path

    first = write(1, "first")
    record_policy(ledger, first, [ks["a"], ks["b"]])
    followed = spy(monkeypatch, policy_state, "follow_history")
    found = current_policy(ledger)
    assert found is not None and current_policy(ledger) == found and len(followed) == 1
    # Another start: followed; the same file read again (another object, equal): not.
    given = read_policy_file(first, None)
    current_policy(ledger, given)
    current_policy(ledger, read_policy_file(first, None))
    assert followed == [None, given]
    # Another record (a successor): other records, followed again, and in force.
    record_policy(ledger, write(2, "second"), [ks["a"], ks["b"]])
    now = current_policy(ledger)
    assert len(followed) == 3 and followed[-1] is None
    assert now is not None and now[1].serial == 2
