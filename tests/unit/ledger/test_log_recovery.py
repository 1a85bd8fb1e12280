"""Crash recovery of the log writer: an append interrupted anywhere is all or nothing; and the
order in which one commit makes its files durable (at the end of the module).

A crash is simulated by raising `Killed` (a BaseException nothing in the library catches) at a
chosen point of the commit protocol; a new `Log.open` plays the process that comes next. Opening
never changes a file (readers never write); the next writer recovers, forward only, under the
lock. An append of an entry already logged (idempotent: it adds nothing) plays that writer.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import testkit

from trajledger.ledger.errors import LogError, TamperError
from trajledger.ledger.fs import FsyncGroup, fsync_all
from trajledger.ledger.keys import Signer
from trajledger.ledger.log import EntrySpec, Log, format_tree_state, verify_log_dir
from trajledger.ledger.log import files as files_module

ORIGIN = "example.org/recovery"
SIGNER = Signer.generate("log")  # TEST ONLY
KEYID = Signer.generate("producer").keyid  # TEST ONLY


class Killed(BaseException):
    """Stands for SIGKILL: unwinds without running any except clause of the library."""


def inflight(directory: Path) -> bool:
    """Whether the log's lock file says an append is in flight (its first byte)."""
    return (directory / ".state/lock").read_bytes()[:1] == b"1"


def spec(i: int) -> EntrySpec:
    return testkit.entry_spec(i, KEYID)


def tree(log_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(log_dir)): p.read_bytes()
        for p in sorted(log_dir.rglob("*"))
        if p.is_file() and p.name != "lock"
    }


def recover(directory: Path) -> Log:
    """The next writer: opens (changing nothing) and appends an entry already logged."""
    before = tree(directory)
    writer = Log.open(directory, SIGNER)
    assert tree(directory) == before, "opening changed a file"
    assert writer.append([spec(3)]) == [3]
    return writer


@pytest.fixture
def log(tmp_path: Path) -> Log:
    log = Log.create(tmp_path / "log", ORIGIN, SIGNER)
    log.append([spec(i) for i in range(10)])
    return log


def kill_at(monkeypatch: pytest.MonkeyPatch, name: str, *, after: bool = False) -> None:
    """Make ``Log.<name>`` die (before it runs, or after it ran)."""
    original: Callable[..., Any] = getattr(Log, name)

    def dying(self: Log, *args: Any, **kwargs: Any) -> Any:
        if after:
            original(self, *args, **kwargs)
        raise Killed(name)

    monkeypatch.setattr(Log, name, dying)


def crashed_append(
    log: Log, monkeypatch: pytest.MonkeyPatch, point: str, after: bool, n: int
) -> None:
    with monkeypatch.context() as m:
        kill_at(m, point, after=after)
        with pytest.raises(Killed):
            log.append([spec(i) for i in range(100, 100 + n)])


@pytest.mark.parametrize(
    ("point", "after"),
    [("_write", False), ("_write", True), ("_append_history", False), ("_append_history", True)],
)
@pytest.mark.parametrize("n", [3, 300])
def test_crash_before_commit_leaves_nothing(
    log: Log, monkeypatch: pytest.MonkeyPatch, point: str, after: bool, n: int
) -> None:
    before = tree(log.directory)
    crashed_append(log, monkeypatch, point, after, n)
    assert inflight(log.directory)
    assert Log.open(log.directory).size == 10
    reopened = recover(log.directory)
    assert reopened.size == 10
    assert tree(log.directory) == before
    assert reopened.append([spec(100)]) == [10]
    report = verify_log_dir(log.directory)
    assert report.ok, report.problems
    assert report.warnings == []


def test_crash_after_commit_before_publication(log: Log, monkeypatch: pytest.MonkeyPatch) -> None:
    original_publish = Log._publish
    crashed_append(log, monkeypatch, "_publish", False, 5)
    # Committed, not yet published: readers read up to the signed checkpoint (10 entries).
    before = tree(log.directory)
    reader = Log.open(log.directory)
    assert reader.size == 10
    assert reader.tree_state()[0] == 15
    assert reader.checkpoint().size == 10
    with pytest.raises(LogError, match="log entry 12: outside the log of size 10"):
        reader.entry(12)
    with pytest.raises(LogError, match="log entry 12: not covered by the published checkpoint"):
        reader.tlog_proof(12)
    report = verify_log_dir(log.directory)
    assert report.ok, report.problems
    assert any("lags the committed size 15" in w for w in report.warnings)
    # Opening with the key changes nothing either: only a write republishes.
    assert Log._publish is original_publish
    writer = Log.open(log.directory, SIGNER)
    assert writer.size == 10
    assert tree(log.directory) == before
    # Retrying the append is idempotent: the writer republishes the tail, adds nothing.
    assert writer.append([spec(i) for i in range(100, 105)]) == [10, 11, 12, 13, 14]
    assert writer.checkpoint().size == 15
    assert writer.tlog_proof(12).index == 12
    assert reader.size == 15
    assert verify_log_dir(log.directory).warnings == []


def test_crash_before_the_lookup_cache_is_written(
    log: Log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trajledger.ledger.log.lookup import Lookup

    cache = tmp_path / "cache"
    writer = Log.open(log.directory, SIGNER, cache_dir=cache)
    assert writer.append([spec(1)]) == [1]
    with monkeypatch.context() as m:

        def dying(self: object, *args: object) -> None:
            raise Killed("lookup")

        m.setattr(Lookup, "add", dying)
        with pytest.raises(Killed):
            writer.append([spec(i) for i in range(100, 105)])
    again = Log.open(log.directory, SIGNER, cache_dir=cache)
    assert again.append([spec(i) for i in range(100, 106)]) == [10, 11, 12, 13, 14, 15]
    assert again.size == 16


def test_a_live_writer_recovers_after_another_one_died(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    survivor = Log.open(log.directory, SIGNER)
    crashed_append(log, monkeypatch, "_write", True, 300)
    assert (log.directory / "tile/entries/000").exists()  # written past the committed size
    assert survivor.append([spec(200)]) == [10]
    assert not (log.directory / "tile/entries/000").exists()
    assert not inflight(log.directory)
    report = verify_log_dir(log.directory)
    assert report.ok and report.warnings == [], (report.problems, report.warnings)


def test_temp_files_are_dropped_by_the_next_writer(log: Log) -> None:
    temps = [
        log.directory / ".tmp-checkpoint",
        log.directory / ".state/.tmp-treeState",
        log.directory / "tile/entries/000.p/.tmp-12",
        log.directory / "tile/0/.tmp-000",
    ]
    for t in temps:
        t.write_bytes(b"partial write")
    report = verify_log_dir(log.directory)
    assert report.ok
    assert sum("temp file of an interrupted append" in w for w in report.warnings) == 2
    recover(log.directory)
    assert [t for t in temps if t.exists()] == []


def test_leftovers_past_the_committed_size_are_removed(log: Log) -> None:
    d = log.directory
    junk = {
        "tile/entries/000.p/12": b"\x00\x01x",
        "tile/0/000.p/12": b"\x00" * 64,
        "tile/0/000": b"\x00" * 8192,
        "tile/0/001.p/3": b"\x00" * 96,
        "tile/1/000.p/1": b"\x00" * 32,
    }
    for rel, data in junk.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
    report = verify_log_dir(d)
    assert report.ok, report.problems
    assert sorted(w.split(":")[0] for w in report.warnings) == sorted(junk)
    recover(d)
    assert [rel for rel in junk if (d / rel).exists()] == []
    assert verify_log_dir(d).warnings == []


def test_stale_partials_are_overwritten_or_dropped_by_the_next_append(log: Log) -> None:
    # Leftovers a writer could not announce: the in-flight byte (never fsynced) lost with a
    # power cut that kept the tiles. Every writer after a power cut is a new process (a killed
    # one keeps its marker in the page cache), and a new writer recovers before it appends.
    d = log.directory
    log.close()
    (d / "tile/entries/000.p/12").write_bytes(b"\x00\x01x" * 12)
    (d / "tile/0/000.p/12").write_bytes(b"\xff" * 32 * 12)
    (d / "tile/0/000.p/15").write_bytes(b"\xff" * 32 * 15)
    assert not inflight(d)
    Log.open(d, SIGNER).append([spec(i) for i in range(100, 105)])  # 10 -> 15 skips width 12
    assert not (d / "tile/0/000.p/12").exists()
    assert (d / "tile/0/000.p/15").read_bytes() != b"\xff" * 32 * 15
    report = verify_log_dir(d)
    assert report.ok and report.warnings == [], (report.problems, report.warnings)


def test_torn_history_record_is_truncated(log: Log) -> None:
    history = log.directory / ".state/history"
    good = history.read_bytes()
    history.write_bytes(good + b"\x00\x00\x00")
    assert verify_log_dir(log.directory).ok
    recover(log.directory)
    assert history.read_bytes() == good


@pytest.mark.parametrize("damage", ["deleted", "emptied", "its last record dropped"])
def test_a_history_that_lost_the_committed_size_is_refused_not_extended(
    log: Log, damage: str
) -> None:
    """`.state/history` truncated or deleted by an insider: `log verify` reports it, but the
    next writer appended its record to what was left, and `log verify` then passed: the record
    of which older partial tiles must be kept was gone, with the evidence that it was removed.
    A commit makes its history record durable first, so no crash leaves a history without the
    committed size: the writer refuses it, writing nothing."""
    log.append([spec(i) for i in range(10, 12)])  # history: 10, 12
    history = log.directory / ".state/history"
    good = history.read_bytes()
    if damage == "deleted":
        history.unlink()
    else:
        history.write_bytes(b"" if damage == "emptied" else good[:12])
    before = tree(log.directory)
    writer = Log.open(log.directory, SIGNER)
    with pytest.raises(TamperError, match=r"\.state/history: .*committed size 12"):
        writer.append([spec(20)])
    assert tree(log.directory) == before
    assert not verify_log_dir(log.directory).ok


def test_tiles_are_checked_against_tree_state_on_open(log: Log) -> None:
    state = log.directory / ".state/treeState"
    state.write_bytes(format_tree_state(10, b"\x07" * 32))
    with pytest.raises(TamperError, match=r"treeState: root at size 10 is \S+, but the signed"):
        Log.open(log.directory, SIGNER)
    state.write_bytes(format_tree_state(11, b"\x07" * 32))
    with pytest.raises(TamperError, match=r"tile/0/000.p/11: missing, but the committed tree"):
        Log.open(log.directory, SIGNER)
    state.write_bytes(b"{}")
    with pytest.raises(TamperError, match=r"treeState: fields are \[\], want \['root', 'size'\]"):
        Log.open(log.directory, SIGNER)


def test_open_refuses_a_directory_without_a_log(tmp_path: Path) -> None:
    with pytest.raises(LogError, match="no log here"):
        Log.open(tmp_path)

# -- the commit's durability order (DESIGN §4; docs/PERFORMANCE.md, "Durable appends") ---------
#
# Traced on the real calls (os.open with O_CREAT, os.fsync, os.replace; each descriptor named by
# /proc/self/fd), one commit must: (1) fsync every new tile and entry bundle, the history file,
# the temp files of treeState and the checkpoint, and the directories the new names are in,
# before treeState is renamed into place (the commit); (2) fsync .state/ after that rename and
# before the checkpoint is renamed into place; (3) fsync the log directory after the
# checkpoint's rename, before on_publish runs. And fsync_all runs every fsync it is given, to
# the end, even when one fails.

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="names descriptors by /proc")


@pytest.fixture
def trace(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """Every file creation, fsync (of the path its descriptor names) and rename (to its
    target), in order."""
    events: list[tuple[str, str]] = []
    lock = threading.Lock()
    real_open, real_fsync, real_replace = os.open, os.fsync, os.replace

    def open_(path: Any, flags: int, *a: Any, **kw: Any) -> int:
        fd = real_open(path, flags, *a, **kw)
        if flags & os.O_CREAT:
            with lock:
                events.append(("create", os.readlink(f"/proc/self/fd/{fd}")))
        return fd

    def fsync(fd: Any) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        real_fsync(fd)
        with lock:
            events.append(("fsync", path))

    def replace(src: Any, dst: Any, *a: Any, **kw: Any) -> None:
        real_replace(src, dst, *a, **kw)
        with lock:
            events.append(("replace", os.fspath(dst)))

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    yield events


@linux_only
def test_one_commit_makes_everything_durable_before_the_commit_and_publication(
    tmp_path: Path, trace: list[tuple[str, str]]
) -> None:
    published: list[int] = []
    log = Log.create(tmp_path / "log", ORIGIN, SIGNER,
                     on_publish=lambda note: published.append(len(trace)))  # fmt: skip
    log.append([spec(i) for i in range(300)])  # 0 -> 300: full tiles and partial ones
    trace.clear()
    published.clear()
    log.append([spec(i) for i in range(300, 520)])  # crosses the tile boundary at 512
    d = str(log.directory)
    commit = trace.index(("replace", f"{d}/.state/treeState"))
    publication = trace.index(("replace", f"{d}/checkpoint"))
    before = {p for kind, p in trace[:commit] if kind == "fsync"}
    tiles = {p for kind, p in trace[:commit] if kind == "create" and "/tile/" in p}
    # (1) every new tile and bundle, and its directory; history; both temp files
    assert tiles == {f"{d}/tile/entries/001", f"{d}/tile/0/001", f"{d}/tile/0/002.p/8",
                     f"{d}/tile/entries/002.p/8", f"{d}/tile/1/000.p/2"}  # fmt: skip
    assert tiles <= before
    assert {os.path.dirname(p) for p in tiles} <= before
    assert {f"{d}/.state/history", f"{d}/.state/.tmp-treeState", f"{d}/.tmp-checkpoint"} <= before
    # (2) the commit's directory between the commit and the publication
    assert ("fsync", f"{d}/.state") in trace[commit:publication]
    # (3) the publication's directory after it, before on_publish
    assert trace[publication + 1 :] == [("fsync", d)] and published == [len(trace)]
    assert verify_log_dir(log.directory).ok


@linux_only
def test_a_large_batch_holds_a_bounded_number_of_descriptors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outstanding = [0]
    most: list[int] = []
    real_start, real_wait = FsyncGroup.start, FsyncGroup.wait

    def start(self: FsyncGroup, fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):  # the last round adds directories: no limit
            outstanding[0] += 1
            most.append(outstanding[0])
        real_start(self, fd)

    def wait(self: FsyncGroup) -> None:
        real_wait(self)
        outstanding[0] = 0

    monkeypatch.setattr(FsyncGroup, "start", start)
    monkeypatch.setattr(FsyncGroup, "wait", wait)
    monkeypatch.setattr(files_module.SyncRound, "LIMIT", 4)
    log = Log.create(tmp_path / "log", ORIGIN, SIGNER)
    most.clear()
    log.append([spec(i) for i in range(256 * 6 + 3)])  # 12 full files, partials, history...
    assert max(most) == 4 and len(most) > 15  # 12 full files, 2 partial, the history, 2 temps
    assert log.size == 256 * 6 + 3 and verify_log_dir(log.directory).ok


def test_fsync_all_syncs_every_descriptor_and_raises_the_first_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = [tmp_path / f"f{i}" for i in range(6)]
    fds = [os.open(f, os.O_WRONLY | os.O_CREAT, 0o600) for f in files]
    synced: list[int] = []
    lock = threading.Lock()

    def fsync(fd: int) -> None:
        with lock:
            synced.append(fd)
        if fd in (fds[2], fds[4]):
            raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    try:
        with pytest.raises(OSError, match="Input/output error"):
            fsync_all(fds)
        assert sorted(synced) == sorted(fds)  # none skipped because another failed
        synced.clear()
        fsync_all(fds[:2])
        fsync_all(fds[:1])
        fsync_all([])
        assert sorted(synced) == sorted(fds[:2] + fds[:1])
    finally:
        for fd in fds:
            os.close(fd)
