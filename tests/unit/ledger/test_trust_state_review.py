"""First use, reviewed (issue 21: `trust_rows`, `TrustState.sync`): a hostile log, worker
processes that die or are interrupted.

First use in bulk equals first use entry by entry on a hostile log. The log holds, beside the
chat ledger's sound records: a rollout batch whose envelope has a duplicate ``payload`` key (the
batch's fast reading takes it; the strict parse refuses it), a dataset whose envelope is
missing, one whose stored envelope does not hash to its entry, a revocation whose envelope is
not JSON, and an environment of another digest under the name and version of the ledger's own (a
name clash). Its rows are the same however the log is read: extended after every entry, in one
bulk reading (indexes built after the rows), by worker processes, and as ``fsck`` and ``reindex
--check`` derive them again (`TrustState.disagreements`).

A long first use whose worker processes die or are interrupted (`trust_rows.Workers`): the rows
are still the ones read in this process and the reading completes; Ctrl-C prints one line, keeps
nothing, and the next command reads the log again. Found by review: a worker killed while it
derived rows (the out-of-memory killer, a signal) made the whole first use fail with
``BrokenProcessPool`` (exit 4, "please report"), and every later command could fail the same
way; Ctrl-C printed a traceback of each idle worker above its one FAIL line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trajledger import Ledger
from trajledger.ledger import home as home_module
from trajledger.ledger import trust_rows, trust_schema, trust_state
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
        with contextlib.closing(ledger.trust_state()) as state:
            assert state.size == ledger.log.size
            assert state.disagreements(ledger.log.entries, ledger.read_blob) == []
            return {t: state._rows(t) for t in trust_schema.TABLES}


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


def test_a_worker_killed_mid_reading_leaves_the_rows_to_this_process(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alone = _read(chat_home, tmp_path / "alone", monkeypatch)
    # Envelopes read by worker processes, runs of 2 entries; the first read in a worker
    # kills it (SIGKILL, as the out-of-memory killer does): the pool is then broken.
    flag = tmp_path / "killed"
    real = home_module.local_blob_reader

    def dying_reader(root: Path) -> Callable[[str], bytes | None]:
        read = real(root)

        def first_read_kills(digest: str) -> bytes | None:
            try:
                os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return read(digest)
            os.kill(os.getpid(), signal.SIGKILL)
            return None

        return first_read_kills

    monkeypatch.setattr(home_module, "local_blob_reader", dying_reader)
    assert _read(chat_home, tmp_path / "killed-worker", monkeypatch, _PARALLEL_FROM=1,
                 _CHUNK=2) == alone
    assert flag.exists()  # a worker did die, and the reading went on without it


INTERRUPTED = """
import signal, sys, time
# As at a terminal: a pytest started with SIGINT ignored (a shell without job control) would
# hand that on, and Python then never raises KeyboardInterrupt.
signal.signal(signal.SIGINT, signal.default_int_handler)
from pathlib import Path
from trajledger.ledger import trust_rows, trust_schema, trust_state
trust_state._PARALLEL_FROM = 1
trust_state._CHUNK = 2
trust_rows.Workers.possible = staticmethod(lambda: True)
flag = Path(sys.argv[2])

def stuck(path, done, total):  # the parent, after its first run: the workers are idle
    flag.touch()
    time.sleep(600)

trust_state._write_reading = stuck
from trajledger.runner.cli import main
sys.argv = ["trajledger", "--ledger", sys.argv[1], "log", "info"]
main()
"""


def test_ctrl_c_during_a_long_first_use_says_one_line_and_the_next_command_reads_again(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by review: Ctrl-C (SIGINT to the terminal's process group) during a first use read
    by worker processes printed a traceback of each idle worker above the one FAIL line."""
    state_dir, flag = tmp_path / "state", tmp_path / "reading"
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED, str(chat_home), str(flag)], start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TRAJLEDGER_STATE_DIR": str(state_dir)})
    deadline = time.monotonic() + 120
    while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the workers are done with the runs handed to them, and wait for more
    os.killpg(proc.pid, signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (
        130, "FAIL: interrupted; nothing was recorded or half-written\n")
    # Nothing was kept of the reading: the next use reads the whole log, as a first use.
    monkeypatch.setenv(STATE_DIR_ENV, str(state_dir))
    ledger = Ledger.open(chat_home)
    state = ledger.trust_state()
    assert state.size == ledger.log.size
    assert state.disagreements(ledger.log.entries, ledger.read_blob) == []
