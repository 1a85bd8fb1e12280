"""An open writer's commits under a failing fsync (rev44, thirty-second round, item 3: the fsync
pool of dur46, `fs.SyncPool`, and the last directory fsynced on the caller's thread).

Every fsync of a commit, one at a time, fails (EIO, or ENOSPC at every other point) on
whichever thread runs it: the append either raises `LogError` or was not hit, never reports
entries it did not commit; the same open writer then appends the same entries (a commit not
made is made; one made is found) and the next ones; the log verifies. Run over the appends of
test_log_fastpath (1,073 entries across four tile boundaries), the log left is the one whose
digest that test knows (``KNOWN``, REV a8fd2f10's): a failed commit leaves no byte behind."""

from __future__ import annotations

import errno
import importlib.util
import os
import shutil
import threading
from pathlib import Path

import pytest

from trajledger.ledger.errors import LogError
from trajledger.ledger.log import Log, verify_log_dir

_spec = importlib.util.spec_from_file_location(
    "rev44_fastpath", Path(__file__).with_name("test_log_fastpath.py"))
assert _spec is not None and _spec.loader is not None
fastpath = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fastpath)  # its appends, helpers and known digest
fixed_clock = fastpath.fixed_clock
SWEPT = (0, 3, 14, 24)
"""The appends swept: 250 entries into an empty log, 3 across 256, 241 ending at 512, 300
across 1,024 (a level-1 tile too)."""


def test_every_fsync_of_a_commit_failing_in_turn_leaves_the_known_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real, lock = os.fsync, threading.Lock()
    calls = {"n": 0, "fail": -1}

    def fsync(fd: int) -> None:
        with lock:
            calls["n"] += 1
            hit = calls["n"] == calls["fail"]
        if hit:
            code = errno.ENOSPC if calls["fail"] % 2 else errno.EIO
            raise OSError(code, os.strerror(code))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    base = tmp_path / "base"
    log = Log.create(base, fastpath.ORIGIN, fastpath.SIGNER)
    start, failed = 0, 0
    for i, n in enumerate(fastpath.SIZES):
        for k in range(1, 1_000) if i in SWEPT else ():
            copy = tmp_path / "copy"
            shutil.copytree(base, copy)
            writer = Log.open(copy, fastpath.SIGNER)
            calls["n"], calls["fail"] = 0, k
            try:
                writer.append(fastpath.specs(start, n))
            except LogError:
                failed += 1
            else:
                assert calls["n"] < k, f"append {i}: fsync {k} failed, the commit said made"
            hit, calls["fail"] = calls["n"] >= k, -1
            assert writer.append(fastpath.specs(start, n)) == list(range(start, start + n))
            assert writer.append(fastpath.specs(start + n, 1)) == [start + n]
            writer.close()
            assert verify_log_dir(copy).ok, (i, k)
            shutil.rmtree(copy)
            if not hit:
                break
        assert log.append(fastpath.specs(start, n)) == list(range(start, start + n))
        start += n
    log.close()
    assert failed > 4 * len(SWEPT)  # every fsync point of each swept commit was reached
    assert fastpath.digest(fastpath.tree(base)) == fastpath.KNOWN
