"""The user's trust state shared by threads and processes (ledger/trust_state.py).

The floor is raised by every publication of this user's log writers, in any thread or process;
readers that read the checkpoint just before another process published must not mistake the
raised floor for a rollback, and processes opening a new state at once must not collide.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from trajledger.ledger.errors import TamperError
from trajledger.ledger.home import STATE_DIR_ENV, Ledger
from trajledger.ledger.log import EntrySpec
from trajledger.ledger.trust_state import TrustState


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
