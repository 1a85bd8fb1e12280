"""The user's trust state shared by threads and processes (ledger/trust_state.py).

The floor is raised by every publication of this user's log writers, in any thread or process;
readers that read the checkpoint just before another process published must not mistake the
raised floor for a rollback, and processes opening a new state at once must not collide.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from trajledger import Ledger
from trajledger.ledger import trust_rows, trust_schema, trust_state
from trajledger.ledger.errors import LedgerError, TamperError
from trajledger.ledger.log import EntrySpec, checked
from trajledger.ledger.trust_state import TrustState
from trajledger.ledger.user_state import STATE_DIR_ENV
from trajledger.verify.errors import ProvenanceError


def _spec(ledger: Ledger, n: int) -> EntrySpec:
    d = "sha256:" + hashlib.sha256(f"entry {n}".encode()).hexdigest()
    return EntrySpec("files", d, d, ("0" * 64,))


def test_a_writer_thread_publishes_into_the_state_opened_by_another(home: Path) -> None:
    ledger = Ledger.open(home)
    ledger.trust_state()  # opened (and its SQLite connection made) in this thread
    errors: list[BaseException] = []

    def append(start: int) -> None:
        try:
            for n in range(start, start + 5):
                ledger.log.append([_spec(ledger, n)])
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=append, args=(i * 100,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    floor = TrustState.open(ledger.log.vkey).floor_checkpoint()
    assert floor is not None and floor.size == ledger.log.size == 15
    assert ledger.trust_state().size == 15


def test_a_state_held_too_long_by_another_process_says_what_to_do(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    vkey = Ledger.open(home).log.vkey
    holder = TrustState.open(vkey)  # another process, reading a large log for the first time
    monkeypatch.setattr(trust_state, "WAIT_LIMIT", 0.0)  # gives up at the first look: told first
    monkeypatch.setattr(trust_state, "_QUIET_WAIT", 0.0)  # it says so at once
    waiting = TrustState.open(vkey)
    try:
        said = r"still held by another trajledger process of yours after 0 s; let it finish"
        with holder._write(), pytest.raises(LedgerError, match=said), waiting._write():
            pass
        assert "NOTE: waiting for another trajledger process of yours" in capsys.readouterr().err
        with waiting._write():  # once it is done, writing works, and silently
            pass
        assert capsys.readouterr().err == ""
    finally:
        holder.close()
        waiting.close()


def test_a_short_wait_for_another_writer_says_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another process's commit (not a first reading of the log) is waited for silently."""
    vkey = Ledger.open(home).log.vkey
    holder, waiting = TrustState.open(vkey), TrustState.open(vkey)
    monkeypatch.setattr(trust_state, "_QUIET_WAIT", 60.0)
    entered = threading.Event()
    try:
        with holder._write():

            def later() -> None:
                threading.Event().wait(1.0)  # past the first half-second try
                raw = holder._db._db  # past the lock this thread's holder keeps
                raw.execute("COMMIT")
                raw.execute("BEGIN")  # (for the context's own COMMIT)

            t = threading.Thread(target=later)
            t.start()
            with waiting._write():
                entered.set()
            t.join()
        assert entered.is_set()
        assert "waiting" not in capsys.readouterr().err
    finally:
        holder.close()
        waiting.close()


def test_a_process_waiting_for_another_reading_the_log_shows_its_progress(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import contextlib

    vkey = Ledger.open(home).log.vkey
    holder, waiting = TrustState.open(vkey), TrustState.open(vkey)
    bars: list[tuple[int, str]] = []
    advanced: list[int] = []
    saw = {10_000: threading.Event(), 30_000: threading.Event()}

    def advance(n: int) -> None:
        advanced.append(n)
        if sum(advanced) in saw:
            saw[sum(advanced)].set()

    @contextlib.contextmanager
    def bar(total: int, label: str) -> Any:
        bars.append((total, label))
        yield advance

    waiting.progress = bar
    monkeypatch.setattr(trust_state, "WAIT_LIMIT", 60.0)  # a hang fails, not the CI's clock
    entered = threading.Event()
    try:
        with holder._write():
            # The holder reads 40,000 entries and has done 10,000, then 30,000 of them.
            trust_state._write_reading(holder.path, 10_000, 40_000)

            def later() -> None:
                saw[10_000].wait(60)
                trust_state._write_reading(holder.path, 30_000, 40_000)
                saw[30_000].wait(60)
                raw = holder._db._db  # past the lock this thread's holder keeps
                raw.execute("COMMIT")  # done: the waiter goes ahead
                raw.execute("BEGIN")  # (for the context's own COMMIT)

            t = threading.Thread(target=later)
            t.start()
            with waiting._write():
                entered.set()
            t.join()
        assert entered.is_set()
        assert bars == [(40_000, "waiting: another process reads the log")]
        assert sum(advanced) == 30_000 and advanced[0] == 10_000
        assert "NOTE: waiting for another trajledger process of yours" in capsys.readouterr().err
    finally:
        holder.close()
        waiting.close()


def test_a_stale_checkpoint_read_is_not_a_rollback(home: Path) -> None:
    reader, writer = Ledger.open(home), Ledger.open(home)
    reader.trust_state()
    stale = reader.log.checkpoint_bytes()
    writer.log.append([_spec(writer, 1)])  # another writer publishes: the floor rises
    log = reader.log
    calls = iter([stale])
    real = log.checkpoint_bytes

    def first_stale() -> bytes:
        return next(calls, None) or real()

    log.checkpoint_bytes = first_stale  # type: ignore[method-assign]
    assert reader.trust_state().size == 1  # re-read the checkpoint, found the newer one


def test_a_real_rollback_is_still_refused(home: Path, tmp_path: Path) -> None:
    import shutil

    ledger = Ledger.open(home)
    ledger.trust_state()
    shutil.copytree(home / "log", tmp_path / "old")
    ledger.log.append([_spec(ledger, 1)])
    shutil.rmtree(home / "log")
    shutil.copytree(tmp_path / "old", home / "log")
    with pytest.raises(TamperError, match="rollback: the signed checkpoint has size 0"):
        Ledger.open(home).trust_state()


def _open_state(state_dir: str, vkey: str, barrier: Any) -> int:
    os.environ[STATE_DIR_ENV] = state_dir
    barrier.wait()
    TrustState.open(vkey).close()
    return 0


def test_processes_creating_one_state_at_once(home: Path, tmp_path: Path) -> None:
    vkey = Ledger.open(home).log.vkey
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(6)
    procs = [
        ctx.Process(target=_open_state, args=(str(tmp_path / "fresh"), str(vkey), barrier))
        for _ in range(6)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 6


def _three_datasets(ledger: Ledger) -> tuple[int, int, int]:
    """A train, a holdout and a regression dataset of one batch each; their log indices."""
    from trajledger.ledger.artifacts import create_dataset, record_batch, register_environment

    key = ledger.keys.create("producer", encrypt=False)
    register_environment(ledger, "cart", "1", key, gymnasium_id="CartPole-v1")
    out = []
    for n, split in enumerate(("train", "holdout", "regression")):
        steps = [{"episode_id": f"e{n}", "step": s, "obs": [float(n), float(s)],
                  "action": [0.0], "reward": 1.0, "terminated": s == 2, "truncated": False}
                 for s in range(3)]
        batch = record_batch(ledger, steps, env="cart@1", policy="p", signer=key)
        out.append(create_dataset(ledger, split, "1", split, [batch.digest], key).recorded.index)
    return out[0], out[1], out[2]


def test_the_held_out_datasets_are_indexed(home: Path) -> None:
    """The admission gate verifies the holdout and regression datasets, not every dataset."""
    from trajledger.verify.ledger_dir import LedgerDirEvidence
    from trajledger.verify.log_index import MemoryIndex

    ledger = Ledger.open(home)
    _train, holdout, regression = _three_datasets(ledger)
    assert ledger.trust_state().held_out() == [holdout, regression]
    evidence = LedgerDirEvidence(home)
    memory = MemoryIndex(ledger.log.size, evidence)
    for i, raw in evidence.entries():
        memory.add(i, raw)
    assert list(memory.held_out()) == [holdout, regression]


def _one_batch_dataset(ledger: Ledger, split: str) -> str:
    """Key ``p``, environment ``e@1``, a one-step batch and dataset ``d@1`` of ``split``:
    the batch's digest."""
    from trajledger.ledger.artifacts import create_dataset, record_batch, register_environment

    key = ledger.keys.create("p", encrypt=False)
    register_environment(ledger, "e", "1", key)
    rows = [{"episode_id": "x", "step": 0, "obs": [0.0], "action": [0.0], "reward": 1.0,
             "terminated": True, "truncated": False}]
    batch = record_batch(ledger, rows, env="e@1", policy="p", signer=key).recorded.digest
    create_dataset(ledger, "d", "1", split, [batch], key)
    return batch


def test_a_state_of_an_older_format_reads_the_log_again(home: Path) -> None:
    import sqlite3

    ledger = Ledger.open(home)
    _train, holdout, regression = _three_datasets(ledger)
    state = ledger.trust_state()
    floor = state.floor()
    with sqlite3.connect(state.path / "state.sqlite") as db:  # what format 1 held
        db.execute("UPDATE meta SET value = ? WHERE key = 'format'", (b"1",))
        db.execute("DELETE FROM held_out")
    state.close()
    size = Ledger.open(home).log.size
    reopened = TrustState.open(ledger.log.vkey)
    # Until the first sync derives the rows again (review rev12, closed by the lead: the open
    # forgot them at once, in a transaction of its own, so a command of the user reading them
    # meanwhile found none), a reader finds the old rows and the old format: a process that
    # dies before the sync leaves the state to be derived again by the next.
    other = TrustState.open(ledger.log.vkey)
    assert reopened.size == other.size == size and reopened.floor() == floor
    with sqlite3.connect(state.path / "state.sqlite") as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone() == (b"1",)
        assert db.execute("SELECT count(*) FROM entries").fetchone() == (size,)
    assert Ledger.open(home).trust_state().held_out() == [holdout, regression]
    with sqlite3.connect(state.path / "state.sqlite") as db:
        current = str(trust_state.STATE_FORMAT).encode()
        assert db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone() == (current,)
    assert TrustState.open(ledger.log.vkey).held_out() == [holdout, regression]


def test_init_refuses_an_origin_that_names_another_log_this_user_knows(tmp_path: Path) -> None:
    from trajledger.ledger.errors import LedgerError

    first = Ledger.init(tmp_path / "a", origin="example.org/log")
    first.trust_state()  # this user has used the log: its key is noted under the origin
    with pytest.raises(LedgerError, match=r"origin 'example.org/log' already names another log"):
        Ledger.init(tmp_path / "b", origin="example.org/log")
    assert not (tmp_path / "b").exists()
    Ledger.init(tmp_path / "c", origin="example.org/other").trust_state()


# -- issue 18: the state protected like the ledger -------------------------------------------------


def test_the_state_is_private_and_durable(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stat

    # The product's setting, not the tests' page cache (tests/conftest.py page_cache_commits).
    monkeypatch.setenv("TRAJLEDGER_TESTS_REAL_FLUSHES", "1")
    state = Ledger.open(home).trust_state()
    db = state.path / "state.sqlite"
    assert stat.S_IMODE(state.path.stat().st_mode) == 0o700
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    # The floor survives a crash once stored: every commit is synced.
    assert state._db.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    state.close()
    db.chmod(0o666)
    with pytest.raises(LedgerError, match=f"{db}: writable by its group and other users"):
        TrustState.open(Ledger.open(home).log.vkey)
    db.chmod(0o600)
    root = Path(os.environ[STATE_DIR_ENV])
    root.chmod(0o777)
    with pytest.raises(LedgerError, match=f"{root}: writable by its group and other users "
                       rf"\(mode 0777\); run 'chmod go-w {root}'"):
        Ledger.open(home)
    root.chmod(0o700)


def count_verifications(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """From now on, each note the trust state verifies is appended to the list returned."""
    verified: list[bytes] = []
    real = trust_state.verify_checkpoint

    def counting(note: bytes, *args: Any, **kwargs: Any) -> Any:
        verified.append(note)
        return real(note, *args, **kwargs)

    for module in (trust_state, checked):  # the floor's checks are `CheckedNotes`' (walk48)
        monkeypatch.setattr(module, "verify_checkpoint", counting)
    return verified


def test_a_publication_by_this_process_verifies_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Raising the floor to a checkpoint this process's writer just signed with the log's key
    (its private key held here) verifies nothing: the note is kept as verified when signed
    (issue 21 item 7, app50; before, one Ed25519 verification per publication), nor the floor
    verified before; a state opened anew (another process) verifies the stored floor, and a
    floor whose stored bytes changed is verified again."""
    ledger = Ledger.open(home)
    state = ledger.trust_state()
    ledger.log.append([_spec(ledger, 0)])
    verified = count_verifications(monkeypatch)
    for n in range(1, 4):
        ledger.log.append([_spec(ledger, n)])
    assert verified == []
    floor = state.floor_checkpoint()
    assert floor is not None and floor.size == ledger.log.size == 4 and verified == []
    other = TrustState.open(ledger.log.vkey)
    try:
        again = other.floor_checkpoint()
    finally:
        other.close()
    assert again == floor and verified == [ledger.log.checkpoint_bytes()]
    # Never again, however many publications: the notes kept are the newest, the floor among
    # them (app51: a full `CheckedNotes` was emptied, and the floor verified again every
    # seventh publication).
    verified.clear()
    for n in range(4, 24):
        ledger.log.append([_spec(ledger, n)])
    assert verified == [] and state.floor_checkpoint().size == 24  # type: ignore[union-attr]
    # Other bytes in the stored floor (the signature changed): verified again, and refused.
    note = ledger.log.checkpoint_bytes()
    forged = note[:-6] + (b"B" if note[-6:-5] == b"A" else b"A") + note[-5:]
    state._note = forged
    with pytest.raises(ProvenanceError):
        state.floor_checkpoint()
    assert verified[-1] == forged


def test_each_use_of_the_state_verifies_a_checkpoint_it_has_not_verified(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every use of the state syncs it to the log's checkpoint: the same note, already verified
    by this object, is not verified again; other bytes are, and a forged note is refused."""
    ledger = Ledger.open(home)
    ledger.log.append([_spec(ledger, 0)])
    state = ledger.trust_state()
    verified = count_verifications(monkeypatch)
    for _ in range(3):
        assert ledger.trust_state() is state
    assert verified == []  # the note the first use verified, read again
    note = ledger.log.checkpoint_bytes()
    forged = note[:-6] + (b"B" if note[-6:-5] == b"A" else b"A") + note[-5:]
    with pytest.raises(ProvenanceError):
        state.sync(forged, ledger.log.entries, ledger.read_blob)
    assert verified == [forged]
    state.sync(note, ledger.log.entries, ledger.read_blob)  # a refused note is not kept
    assert verified == [forged]


@pytest.mark.parametrize("table", ["entries", "listing", "refs", "held_out", "names"])
def test_a_row_deleted_or_added_is_refused_and_reported(home: Path, table: str) -> None:
    import sqlite3

    ledger = Ledger.open(home)
    _one_batch_dataset(ledger, "holdout")
    state = ledger.trust_state()
    db = state.path / "state.sqlite"
    con = sqlite3.connect(db)
    if table == "held_out":
        con.execute("INSERT INTO held_out (idx) VALUES (0)")
    else:
        con.execute(f"DELETE FROM {table} WHERE rowid = (SELECT MIN(rowid) FROM {table})")
    con.commit()
    con.close()
    blob = ledger.read_blob
    problems = state.disagreements(ledger.log.entries, blob)
    assert len(problems) == 1 and problems[0].startswith(f"trust state {db}: table {table}: ")
    with pytest.raises(TamperError, match=re.escape(f"trust state {db}: {table} holds ")):
        Ledger.open(home).trust_state()
    state.rebuild()
    assert Ledger.open(home).trust_state().disagreements(ledger.log.entries, blob) == []


def test_pins_and_forgetting(tmp_path: Path) -> None:
    from trajledger.ledger.trust_pins import pin_log_key
    from trajledger.ledger.user_state import fingerprint, known_origin

    root = tmp_path / "led"
    vkey = Ledger.init(root, origin="test/pins").log.vkey
    state = TrustState.open(vkey)
    assert state.pinned() == "created by you ('trajledger init')"
    state.close()
    assert fingerprint(vkey).startswith("test/pins+" + vkey.split("+")[1] + "+sha256:")
    TrustState.forget(vkey)
    assert known_origin("test/pins") is None
    note = (root / "log" / "checkpoint").read_bytes()
    pinned = pin_log_key(vkey, note)
    assert (pinned.origin, pinned.size) == ("test/pins", 0)
    other = vkey.replace("test/pins", "test/other", 1)
    with pytest.raises(ProvenanceError):  # not signed by that key: nothing is pinned
        pin_log_key(other, note)
    assert known_origin("test/other") is None


@pytest.mark.parametrize("chunk", [1, 3])
def test_reading_in_bulk_derives_the_rows_read_one_by_one(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """First use gathers each run of entries' rows and inserts them table by table: the same
    rows as reading entry by entry, for every table (names, listings, references, held-out
    datasets, unreadable records), whatever the runs' boundaries."""
    import json

    from trajledger import Ledger as Api

    ledger = Api.open(chat_home)
    held = tmp_path / "held.jsonl"
    lines = [{"episode_id": f"held-{n}", "task_id": f"mul-{n}", "reward": 1.0,
              "messages": [{"role": "user", "content": f"what is {n} * 7 ?"},
                           {"role": "assistant", "content": f"{7 * n}"}]}
             for n in range(6)]
    held.write_text("".join(json.dumps(line) + "\n" for line in lines))
    batch = ledger.record_batch([held], env="chat@1", policy="model-0", key="vendor",
                                fmt="chat-jsonl", name="held-batch")
    ledger.create_dataset("chat-held", "1", "holdout", [batch.digest], key="vendor")
    ledger.revoke(batch.digest, key="approver", reason="test")
    gone = ledger.trust_state().entry(ledger.log.size - 3)  # the held-out batch
    assert gone is not None
    ledger.store.delete(gone.envelope)  # a record whose envelope cannot be read

    def rows(state_dir: Path, size: int) -> dict[str, set[tuple[Any, ...]]]:
        monkeypatch.setenv(STATE_DIR_ENV, str(state_dir))
        monkeypatch.setattr(trust_state, "_CHUNK", size)
        state = Ledger.open(chat_home).trust_state()
        try:
            return {t: state._rows(t) for t in trust_schema.TABLES}
        finally:
            state.close()

    one_by_one, bulk = rows(tmp_path / "s1", 1), rows(tmp_path / f"s{chunk}", chunk)
    big = rows(tmp_path / "sbig", 1024)
    assert one_by_one == bulk == big
    assert one_by_one["held_out"] and one_by_one["unreadable"] and one_by_one["listing"]


def test_first_use_of_a_long_log_draws_its_progress(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import contextlib

    from trajledger.ledger import home as home_module

    Ledger.open(home).log.append([_spec(Ledger.open(home), n) for n in range(40)])
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "new-user"))
    monkeypatch.setattr(home_module, "_BAR_FROM", 30)
    monkeypatch.setattr(trust_state, "_CHUNK", 16)
    bars: list[tuple[int, str]] = []
    steps: list[int] = []

    @contextlib.contextmanager
    def bar(total: int, label: str) -> Any:
        bars.append((total, label))
        yield steps.append

    ledger = Ledger.open(home)
    ledger.progress = bar
    assert ledger.trust_state().size == 40
    assert bars == [(40, "reading the log into your state")] and steps == [16, 16, 8]
    ledger.log.append([_spec(ledger, 99)])
    assert ledger.trust_state().size == 41 and len(bars) == 1  # one entry behind: no bar


def _all_rows(home: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch
              ) -> dict[str, set[tuple[Any, ...]]]:
    """Every derived table of a first use of ``home``'s log in the new ``state_dir``."""
    monkeypatch.setenv(STATE_DIR_ENV, str(state_dir))
    state = Ledger.open(home).trust_state()
    try:
        return {t: state._rows(t) for t in trust_schema.TABLES}
    finally:
        state.close()


def test_first_use_in_bulk_equals_the_state_extended_entry_by_entry(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows of a first use (rollout batches read by `trust_rows.batch_fields`, the rest
    strictly; the indexes built after the rows; the envelopes read by worker processes) are
    those of a state extended after every record, and those of reading every record strictly:
    batches with an evaluator and a policy version naming a checkpoint included."""
    from trajledger import Ledger as Api

    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "incremental"))
    monkeypatch.setattr(trust_state, "_CHUNK", 1)
    ledger = Api.open(chat_home)
    ledger.register_evaluator("judge", "1", "deterministic", key="vendor")
    src = tmp_path / "more.jsonl"
    src.write_text(json.dumps({"episode_id": "m-1", "task_id": "t", "reward": 0.5, "messages": [
        {"role": "user", "content": "2 + 2 ?"}, {"role": "assistant", "content": "4"}]}) + "\n")
    fake = "sha256:" + "ab" * 32
    ledger.record_batch([src], env="chat@1", policy=fake, key="vendor", fmt="chat-jsonl",
                        name="with-evaluator", evaluator="judge@1")
    ledger.record_batch([src], env="chat@1", policy="model-1", key="vendor", fmt="chat-jsonl",
                        name="plain")
    incremental = Ledger.open(chat_home).trust_state()
    step_by_step = {t: incremental._rows(t) for t in trust_schema.TABLES}
    incremental.close()
    monkeypatch.setattr(trust_state, "_CHUNK", 1024)
    monkeypatch.setattr(trust_state, "_BULK_FROM", 1)  # the indexes built after the rows
    bulk = _all_rows(chat_home, tmp_path / "bulk", monkeypatch)
    state = Ledger.open(chat_home).trust_state()
    indexes = {r[0] for r in state._db.execute("SELECT name FROM sqlite_master WHERE type = "
                                               "'index' AND sql IS NOT NULL")}
    state.close()
    assert indexes == set(trust_schema.INDEXES)
    monkeypatch.setattr(trust_state, "_BULK_FROM", 10**9)
    # Envelopes read and parsed by worker processes, runs of 2 entries, several in flight.
    monkeypatch.setattr(trust_state, "_PARALLEL_FROM", 1)
    monkeypatch.setattr(trust_state, "_CHUNK", 2)
    monkeypatch.setattr(trust_rows.Workers, "possible", staticmethod(lambda: True))
    handed: list[int] = []
    derive = trust_rows.Workers.derive

    def counted(self: Any, entries: Any) -> Any:
        handed.append(len(entries))
        return derive(self, entries)

    monkeypatch.setattr(trust_rows.Workers, "derive", counted)
    parallel = _all_rows(chat_home, tmp_path / "parallel", monkeypatch)
    assert sum(handed) == Ledger.open(chat_home).log.size and len(handed) > 2
    monkeypatch.setattr(trust_state, "_PARALLEL_FROM", 10**9)
    monkeypatch.setattr(trust_state, "_CHUNK", 1024)
    monkeypatch.setattr(trust_rows, "batch_fields", lambda *args: None)
    strict = _all_rows(chat_home, tmp_path / "strict", monkeypatch)
    assert bulk == step_by_step == strict == parallel
    refs = {(role, dst) for dst, _, role in bulk["refs"]}
    assert {"environment", "evaluator", "generated-by"} <= {r for r, _ in refs}
    assert any(row[2] == "with-evaluator" for row in bulk["names"])


def test_a_batch_the_index_takes_but_the_strict_read_refuses_fails_closed(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """First use reads a rollout batch's name and links without the strict parse; a record
    that gives them but that the strict read refuses (here: a negative episode count, signed
    by the vendor) is indexed by its name, and every decision that uses it reads it strictly
    and fails: verifying it, and a dataset listing it, are refused, and so is approving that
    dataset."""
    from trajledger import Ledger as Api
    from trajledger.ledger.record import record_statement
    from trajledger.runner.admission import DataRefusedError
    from trajledger.verify.errors import FormatError
    from trajledger.verify.log_index import read_record
    from trajledger.verify.predicates import ROLLOUT_BATCH

    ledger = Api.open(chat_home)
    good = ledger.trust_state().by_name("chat-batch", "")[0]
    good_entry = ledger.trust_state().entry(good.index)
    assert good_entry is not None
    envelope = ledger.store.get(good_entry.envelope)
    statement, _ = read_record(good_entry, envelope, "good batch")
    bad_pred = dict(statement.predicate, counts={"episodes": -1, "steps": 3})
    subject = ledger.store.put_bytes(b"not a manifest: the record is refused before its data")
    bad = record_statement(ledger, "bad-batch", subject, ROLLOUT_BATCH, bad_pred,
                           ledger.keys.signer("vendor"), "rollout-batch")

    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "first-use"))
    fresh = Api.open(chat_home)
    state = fresh.trust_state()
    entry = state.entry(bad.index)
    assert entry is not None
    assert [r.index for r in state.by_name("bad-batch", "")] == [bad.index]
    assert bad.index not in state.unreadable()
    assert [(i, role) for _, i, role in state._rows("refs") if i == bad.index] == [
        (bad.index, "environment")]
    with pytest.raises(FormatError, match=r"counts\.episodes is -1"):
        read_record(entry, fresh.store.get(entry.envelope), "bad batch")

    report = fresh.verify("bad-batch")
    assert not report.ok
    assert any("counts.episodes is -1" in str(f) for f in report.failures())
    fresh.create_dataset("uses-bad", "1", "train", [bad.digest], key="vendor")
    with pytest.raises(DataRefusedError, match=r"counts\.episodes is -1"):
        fresh.approve("uses-bad@1", key="approver")  # approving it is a decision too
    uses = fresh.verify("uses-bad@1")
    assert not uses.ok
    assert any("counts.episodes is -1" in str(f) for f in uses.failures())


@pytest.mark.parametrize("statement", [
    [], "x", {"predicate": "x", "subject": [{"name": "b"}]},
    {"predicate": [], "subject": [{"name": "b"}]},
    {"predicate": {}, "subject": "ab", "predicateType": "x"},
    {"predicate": {"environment": "x"}, "subject": [["b"]]},
    {"predicate": {"environment": {"digest": 7}, "policyVersion": "p"}, "subject": [{"name": "b"}]},
    {"predicate": {"environment": {"digest": "sha256:" + "0" * 64}, "evaluator": [],
                   "policyVersion": "p"}, "subject": [{"name": "b"}]},
    {"predicate": {"environment": {"digest": "sha256:" + "0" * 64}, "policyVersion": ""},
     "subject": [{"name": "b"}]},
    {"predicate": {"environment": {"digest": "sha256:" + "0" * 64}, "policyVersion": "p",
                   "failuresOf": "sha256:xyz"}, "subject": [{"name": "b"}]},
])
def test_a_batch_the_fast_reading_cannot_read_goes_to_the_strict_one(statement: Any) -> None:
    """Whatever a batch's envelope holds, the fast reading gives its fields or None (the
    strict parse then decides), never an exception that would stop a first use."""
    import base64

    from trajledger.verify.predicates import ROLLOUT_BATCH

    if isinstance(statement, dict):
        statement = {"predicateType": ROLLOUT_BATCH, **statement}
    payload = base64.b64encode(json.dumps(statement).encode()).decode()
    for envelope in (json.dumps({"payload": payload}).encode(), b"[1]", b"{", b"\xff",
                     b"[" * 100_000):
        digest = "sha256:" + hashlib.sha256(envelope).hexdigest()
        assert trust_rows.batch_fields(digest, "sha256:" + "1" * 64, envelope) is None


def test_a_command_reading_the_state_while_reindex_runs_never_finds_it_empty(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev12, finding 1. Failed before: ``reindex`` deleted the rows in one transaction and
    derived them again in the next, reading the whole log (minutes at scale). A command of the
    same user that had synced before (``impact``, ``verify``, a training run) and read the
    rows meanwhile found none: probed, ``impact`` of a revoked batch answered '✓ OK: … 4 checks
    passed', the revocation 'ignored: … signed by producer key …, which did not produce' the
    batch, and no dataset or checkpoint built on it. Here the reindex is held while it reads
    the log (`LedgerHome.rebuild_trust_state`), and the reader's answers must be the ones from
    before; they failed (all empty) with ``rebuild()`` then ``trust_state()``."""
    ledger = Ledger.open(home)
    batch = _one_batch_dataset(ledger, "train")
    Ledger.open(home).revoke(batch, key="p", reason="PII")
    reader = Ledger.open(home).trust_state()

    def answers() -> tuple[object, ...]:
        return (reader.about(batch), reader.referrers(batch), reader.listing(batch),
                [reader.entry(i) for i in reader.about(batch)])

    before = answers()
    assert len(before[0]) == 2 and before[2]  # the batch's record and its revocation; a dataset
    writer = Ledger.open(home)
    held = writer.log_state(writer.log.vkey)
    reading, resume = threading.Event(), threading.Event()
    read_run = TrustState._read_run

    def held_read_run(self: TrustState, *args: Any) -> Any:
        if self is held and not reading.is_set():
            reading.set()
            assert resume.wait(60)
        return read_run(self, *args)

    monkeypatch.setattr(TrustState, "_read_run", held_read_run)
    failed: list[BaseException] = []

    def reindex() -> None:
        try:
            writer.rebuild_trust_state()
        except BaseException as e:  # reported by the test's thread
            failed.append(e)

    thread = threading.Thread(target=reindex)
    thread.start()
    try:
        assert reading.wait(60)
        during = answers()
    finally:
        resume.set()
        thread.join(60)
    assert not failed, failed
    assert during == before
    assert answers() == before
    fresh = Ledger.open(home)
    assert reader.disagreements(fresh.log.entries, fresh.read_blob) == []


def test_a_name_is_looked_up_folded_in_case_by_an_index() -> None:
    """`TrustIndex.by_folded_name` (rev22: a new name equal to a recorded one but for case is
    refused, on every new environment, evaluator, dataset and checkpoint, twice) reads the
    ``names_folded`` index, not every named row (270 ms at a million rows without it)."""
    import sqlite3

    db = sqlite3.connect(":memory:")
    db.executescript(trust_schema.SCHEMA)
    db.execute("INSERT INTO names VALUES (0, 'dataset', 'cartpole-train', '1', 'sha256:00')")
    plan = db.execute("EXPLAIN QUERY PLAN SELECT idx FROM names WHERE lower(name) = lower(?) "
                      "AND idx < ? ORDER BY idx", ("Cartpole-Train", 1)).fetchall()
    assert "USING INDEX names_folded" in str(plan), plan


def test_a_write_sqlite_refuses_says_what_to_do(home: Path) -> None:
    """left35 finding 4 (left34's Left): the trust state's ``cannot write:`` lines of a SQLite
    error had no next step (an ``sqlite3.Error`` has no ``errno`` for `errors.next_step`); its
    ``sqlite_errorcode`` now gives the same advice: a full database (SQLITE_FULL, made real
    with ``max_page_count``), one that may not be written (SQLITE_READONLY, with
    ``query_only``); and BUSY, IOERR (extended codes too) and CANTOPEN."""
    import sqlite3

    state = Ledger.open(home).trust_state()
    pages = state._db.execute("PRAGMA page_count").fetchall()[0][0]
    state._db.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(LedgerError) as e, state._write():
        state._put("filler", b"0" * 200_000)
    assert str(e.value).endswith(": cannot write: database or disk is full; nothing was changed "
                                 "in it; free space on the disk written to (the ledger's, or "
                                 "where --out writes) or write elsewhere, then run the command "
                                 "again"), e.value
    state._db.execute("PRAGMA max_page_count = 1073741823")
    state._db.execute("PRAGMA query_only = 1")
    with pytest.raises(LedgerError) as e, state._write():
        state._put("filler", b"0")
    assert str(e.value).endswith(": cannot write: attempt to write a readonly database; check "
                                 "who owns it and its mode ('ls -ld'), or use a place of yours"), \
        e.value  # refused at BEGIN IMMEDIATE (`_try_begin`)
    state._db.execute("PRAGMA query_only = 0")
    assert state._meta("filler") is None
    from trajledger.ledger.errors import sqlite_next_step

    for code, step in ((5, "; another trajledger process of yours holds it: let it finish"),
                       (10 | 3 << 8, "; the disk failed a read or write (full, removed or "
                                     "failing: 'dmesg' says which)"),
                       (14, "; check who owns it and its mode ('ls -ld')"), (1, "")):
        error = sqlite3.OperationalError("x")
        error.sqlite_errorcode = code
        assert sqlite_next_step(error).startswith(step) and (step or not sqlite_next_step(error))


def test_a_ctrl_c_just_after_begin_leaves_the_handle_usable(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt in a notebook that landed just after ``BEGIN IMMEDIATE`` (in
    ``_try_begin``'s ``finally``, before ``_write``'s ``try``) left the state's connection
    inside a transaction: every later call on the handle failed, ``trust state …: cannot
    write: cannot start a transaction within a transaction``, until the kernel was restarted
    (out40: found by interrupting ``create_dataset`` at random times). Now the transaction is
    rolled back, nothing is half-written and the next call records."""
    ledger = Ledger.open(home)
    ledger.log.append([_spec(ledger, 0)])
    begin, hit = TrustState._try_begin, []

    def interrupted(self: TrustState, wait: float) -> bool:
        began = begin(self, wait)
        if not hit:
            hit.append(wait)
            raise KeyboardInterrupt
        return began

    monkeypatch.setattr(TrustState, "_try_begin", interrupted)
    size = ledger.log.size
    with pytest.raises(KeyboardInterrupt):
        ledger.log.append([_spec(ledger, 1)])
    assert hit and ledger.log.size <= size + 1
    ledger.log.append([_spec(ledger, 1), _spec(ledger, 2)])
    assert ledger.log.size == size + 2 == ledger.trust_state().size
