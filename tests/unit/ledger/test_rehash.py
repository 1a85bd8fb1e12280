"""ledger.rehash.ForkedHasher: a walk's blobs re-hashed by forked worker processes decide as the
thread pool of verify.blobs.BlobHasher does (the same failures, filed on the same nodes, with the
same messages; an unreadable blob raises the same error), stop when the walk stops (the workers
killed and reaped, what they held failing its node), and are not forked where a fork is unsafe
(another thread running) or costs more than it saves (less than one group of blobs)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from testkit import DigestFiles

from trajledger.ledger import rehash
from trajledger.ledger.rehash import ForkedHasher, can_fork
from trajledger.verify import blobs as blobs_module
from trajledger.verify.blobs import BlobHasher
from trajledger.verify.report import FAIL, Node


def lineage(root: Path) -> list[tuple[str, str, int]]:
    """(path, digest, size) of sound, tampered, short and missing blobs, mixed."""
    store = DigestFiles(root)
    out = []
    for i in range(23):
        data = bytes([i]) * (1000 + i)
        digest = store.put(data)
        size = len(data)
        if i % 5 == 1:  # tampered
            (root / digest.removeprefix("sha256:")).write_bytes(b"x" + data[1:])
        elif i % 5 == 2:  # not the size its manifest says
            size += 3
        elif i % 7 == 3:  # missing
            digest = "sha256:" + f"{i:064x}"
        out.append((f"f{i}", digest, size))
    return out


def checks(hasher: BlobHasher, files: list[tuple[str, str, int]]) -> list[list[tuple[str, str]]]:
    nodes = [Node("sha256:" + f"{n:064x}", "rollout-batch") for n in range(4)]
    for i, (path, digest, size) in enumerate(files):
        hasher.later(nodes[i % 4], path, digest, size)
    hasher.finish()
    return [[(c.what, c.detail) for c in n.checks if c.status == FAIL] for n in nodes]


@pytest.fixture
def small_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blobs_module, "GROUP_BLOBS", 3)


@pytest.fixture
def may_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork here whatever idle threads other tests left in this process (`can_fork` itself is
    tested in a fresh interpreter below)."""
    monkeypatch.setattr(rehash, "can_fork", lambda: True)


def forked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids of the workers forked from here on."""
    pids: list[int] = []
    real = ForkedHasher._fork

    def spy(self: ForkedHasher, workers: list[rehash._Worker]) -> None:
        try:
            real(self, workers)
        finally:
            pids.extend(w.pid for w in workers)

    monkeypatch.setattr(ForkedHasher, "_fork", spy)
    return pids


def gone(pid: int) -> bool:
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    return True


@pytest.mark.usefixtures("small_groups", "may_fork")
def test_forked_workers_file_what_the_thread_pool_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = lineage(tmp_path)
    pids = forked(monkeypatch)
    got = checks(ForkedHasher(DigestFiles(tmp_path), workers=2), files)
    assert len(pids) == 2 and os.getpid() not in pids
    assert all(gone(p) for p in pids)  # reaped when the walk finished
    want = checks(BlobHasher(DigestFiles(tmp_path)), files)
    assert got == want
    details = [d for node in got for _, d in node]
    assert any(d.startswith("tampered: content hashes to") for d in details)
    assert any(d.startswith("tampered: 1") and "bytes, want" in d for d in details)
    assert any(d.endswith("is missing") for d in details)


@pytest.mark.usefixtures("small_groups", "may_fork")
def test_workers_whose_pipes_are_numbered_past_1024_are_waited_for(tmp_path: Path) -> None:
    """A process with many files open gives the workers' pipes descriptors of 1024 and more,
    which select() refuses: the walk stopped with 'BUG: ValueError: filedescriptor out of range
    in select()' (seen in a long test session, fix13). Waited for with poll(), it decides as
    the thread pool does."""
    files = lineage(tmp_path)
    held: list[int] = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        got = checks(ForkedHasher(DigestFiles(tmp_path), workers=2), files)
    finally:
        for fd in held:
            os.close(fd)
    assert got == checks(BlobHasher(DigestFiles(tmp_path)), files)


@pytest.mark.usefixtures("small_groups", "may_fork")
def test_a_blob_that_cannot_be_read_raises_what_a_thread_raises(tmp_path: Path) -> None:
    store = DigestFiles(tmp_path)
    unreadable = "sha256:" + "5" * 64
    (tmp_path / ("5" * 64)).mkdir()  # a directory where the blob should be
    for hasher in (ForkedHasher(store, workers=2), BlobHasher(store)):
        node = Node("sha256:" + "6" * 64, "rollout-batch")
        for i in range(6):
            hasher.later(node, f"f{i}", store.put(bytes([i]) * 10), 10)
        hasher.later(node, "weights", unreadable, 10)
        with pytest.raises(IsADirectoryError, match="Is a directory") as e:
            hasher.finish()
        assert e.value.filename == str(tmp_path / ("5" * 64))


@pytest.mark.usefixtures("small_groups", "may_fork")
def test_a_walk_that_stops_kills_the_workers_and_fails_what_they_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DigestFiles(tmp_path)
    pids = forked(monkeypatch)
    hasher = ForkedHasher(store, workers=2)
    node = Node("sha256:" + "7" * 64, "rollout-batch")
    for i in range(7):
        hasher.later(node, f"f{i}", store.put(bytes([i]) * 100), 100)
    assert len(pids) == 2
    hasher.close()  # as LineageVerifier.close does when the walk raises
    assert all(gone(p) for p in pids)
    assert not hasher.pending and hasher.workers is None
    dropped = [c for c in node.checks if c.status == FAIL]
    # Whatever had not been collected fails its node, never looking verified.
    assert dropped and {c.detail for c in dropped} == {
        "not re-hashed: the verification was interrupted"}
    assert len(dropped) <= 7


@pytest.mark.usefixtures("small_groups")
def test_no_fork_beside_another_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pids = forked(monkeypatch)
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert not can_fork()
        files = lineage(tmp_path)
        got = checks(ForkedHasher(DigestFiles(tmp_path), workers=2), files)
    finally:
        release.set()
        other.join()
    assert pids == []
    assert got == checks(BlobHasher(DigestFiles(tmp_path)), files)


def test_the_idle_fsync_threads_are_ended_then_a_fork_is_safe(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import threading
        from pathlib import Path
        from trajledger.ledger.fs import sync_paths
        from trajledger.ledger.rehash import can_fork
        files = [Path({str(tmp_path)!r}) / f"s{{i}}" for i in range(3)]
        for f in files:
            f.write_bytes(b"s")
        sync_paths(files)  # starts the fsync pool, whose threads stay
        assert threading.active_count() > 1
        assert can_fork() and threading.active_count() == 1
        sync_paths(files)  # a new pool
        other = threading.Thread(target=threading.Event().wait, args=(5,), daemon=True)
        other.start()
        assert not can_fork()
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.stdout.strip() == "ok", r.stderr


def test_less_than_a_group_is_hashed_on_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = forked(monkeypatch)
    store = DigestFiles(tmp_path)
    hasher = ForkedHasher(store)
    node = Node("sha256:" + "8" * 64, "checkpoint")
    hasher.later(node, "weights", store.put(b"w" * 10), 10)
    hasher.later(node, "config", store.put(b"c" * 10), 9)
    hasher.finish()
    assert pids == []
    assert [c.detail for c in node.checks if c.status == FAIL] == [
        f"tampered: 10 bytes, want 9 (blob sha256:{hashlib.sha256(b'c' * 10).hexdigest()[:12]}…)"]


# -- workers that die, forks that fail, Ctrl-C: the walk decides as the thread pool does --------


def dies_on(monkeypatch: pytest.MonkeyPatch, digests: set[str]) -> None:
    """A worker that comes to one of ``digests`` is killed there (as the OOM killer would):
    SIGKILL, mid-group, before it answers; this process hashes them as usual."""
    parent = os.getpid()
    real = ForkedHasher.check

    def check(self: ForkedHasher, digest: str, size: int, stop: threading.Event) -> str | None:
        if os.getpid() != parent and digest in digests:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, digest, size, stop)

    monkeypatch.setattr(ForkedHasher, "check", check)


@pytest.mark.usefixtures("small_groups", "may_fork")
@pytest.mark.parametrize("dying", [1, 2])
def test_a_worker_that_dies_leaves_its_groups_to_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dying: int
) -> None:
    """One worker killed mid-group, or both (then the thread pool takes the groups still to
    come): the same failures on the same nodes as the thread pool, every worker reaped."""
    files = lineage(tmp_path)
    want = checks(BlobHasher(DigestFiles(tmp_path)), files)
    pids = forked(monkeypatch)
    # The 4th blob is in the second group (groups of 3), the 7th in the third: each worker
    # is sent one of the first two groups.
    dies_on(monkeypatch, {files[3][1], files[0][1]} if dying == 2 else {files[3][1]})
    hasher = ForkedHasher(DigestFiles(tmp_path), workers=2)
    got = checks(hasher, files)
    assert len(pids) == 2 and all(gone(p) for p in pids)
    assert got == want


@pytest.mark.usefixtures("small_groups", "may_fork")
def test_workers_killed_from_outside_between_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both workers killed once forked (their pipes end; a request meets a broken pipe): the
    groups they owed and the rest hashed here, the same failures as the thread pool."""
    files = lineage(tmp_path)
    want = checks(BlobHasher(DigestFiles(tmp_path)), files)
    pids = forked(monkeypatch)
    hasher = ForkedHasher(DigestFiles(tmp_path), workers=2)
    nodes = [Node("sha256:" + f"{n:064x}", "rollout-batch") for n in range(4)]
    for i, (path, digest, size) in enumerate(files):
        hasher.later(nodes[i % 4], path, digest, size)
        if i == 2:  # the first group has gone out
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
    hasher.finish()
    got = [[(c.what, c.detail) for c in n.checks if c.status == FAIL] for n in nodes]
    assert len(pids) == 2 and all(gone(p) for p in pids)
    assert got == want


@pytest.mark.usefixtures("small_groups", "may_fork")
def test_a_dead_worker_with_an_unreadable_blob_raises_what_a_thread_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DigestFiles(tmp_path)
    (tmp_path / ("5" * 64)).mkdir()  # a directory where the blob should be
    dies_on(monkeypatch, {"sha256:" + "5" * 64})
    hasher = ForkedHasher(store, workers=2)
    node = Node("sha256:" + "6" * 64, "rollout-batch")
    for i in range(6):
        hasher.later(node, f"f{i}", store.put(bytes([i]) * 10), 10)
    hasher.later(node, "weights", "sha256:" + "5" * 64, 10)
    with pytest.raises(IsADirectoryError, match="Is a directory"):
        hasher.finish()


@pytest.mark.usefixtures("small_groups", "may_fork")
def test_a_fork_that_fails_leaves_the_workers_forked_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = lineage(tmp_path)
    want = checks(BlobHasher(DigestFiles(tmp_path)), files)
    real = os.fork
    for fail_at in (1, 2):  # no worker (the thread pool), or one
        pids: list[int] = []

        def fork(fail_at: int = fail_at, pids: list[int] = pids) -> int:
            if len(pids) + 1 == fail_at:
                raise BlockingIOError(11, "Resource temporarily unavailable")
            pid = real()
            if pid:
                pids.append(pid)
            return pid

        monkeypatch.setattr(os, "fork", fork)
        got = checks(ForkedHasher(DigestFiles(tmp_path), workers=2), files)
        assert len(pids) == fail_at - 1 and all(gone(p) for p in pids)
        assert got == want


@pytest.mark.usefixtures("small_groups", "may_fork")
def test_an_interrupt_between_two_forks_leaves_no_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DigestFiles(tmp_path)
    pids: list[int] = []
    real = os.fork

    def fork() -> int:
        if pids:
            raise KeyboardInterrupt
        pid = real()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    hasher = ForkedHasher(store, workers=3)
    node = Node("sha256:" + "7" * 64, "rollout-batch")
    with pytest.raises(KeyboardInterrupt):
        for i in range(3):
            hasher.later(node, f"f{i}", store.put(bytes([i]) * 100), 100)
    hasher.close()  # as the walk's close does
    assert len(pids) == 1 and gone(pids[0])


@pytest.mark.usefixtures("small_groups", "may_fork")
def test_an_interrupt_while_waiting_for_answers_leaves_no_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DigestFiles(tmp_path)
    pids = forked(monkeypatch)
    real = ForkedHasher._read

    def read(self: ForkedHasher, *, block: bool) -> None:
        if block:
            raise KeyboardInterrupt
        real(self, block=block)

    monkeypatch.setattr(ForkedHasher, "_read", read)
    check = ForkedHasher.check

    def slow(self: ForkedHasher, digest: str, size: int, stop: threading.Event) -> str | None:
        time.sleep(0.2)  # (in the workers: so finish() has answers to wait for)
        return check(self, digest, size, stop)

    monkeypatch.setattr(ForkedHasher, "check", slow)
    hasher = ForkedHasher(store, workers=2)
    node = Node("sha256:" + "7" * 64, "rollout-batch")
    for i in range(7):
        hasher.later(node, f"f{i}", store.put(bytes([i]) * 100), 100)
    with pytest.raises(KeyboardInterrupt):
        hasher.finish()
    assert len(pids) == 2 and all(gone(p) for p in pids)
    assert {c.detail for c in node.checks if c.status == FAIL} <= {
        "not re-hashed: the verification was interrupted"}


def test_ctrl_c_reaches_the_parent_and_no_worker_is_left(tmp_path: Path) -> None:
    """SIGINT sent to the whole process group (as a terminal's Ctrl-C is) while the workers
    hash: the workers ignore it, the parent stops, kills and reaps them; none is left running."""
    code = textwrap.dedent(f"""
        import os, sys, time, threading
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from pathlib import Path
        from testkit import DigestFiles
        from trajledger.ledger.rehash import ForkedHasher
        from trajledger.verify import blobs
        from trajledger.verify.report import Node
        blobs.GROUP_BLOBS = 1
        real = ForkedHasher.check
        def check(self, digest, size, stop):
            time.sleep(0.2)  # hashing that lasts
            return real(self, digest, size, stop)
        ForkedHasher.check = check
        store = DigestFiles(Path({str(tmp_path)!r}))
        hasher = ForkedHasher(store, workers=2)
        node = Node("sha256:" + "7" * 64, "rollout-batch")
        try:  # as LineageVerifier.run does
            for i in range(40):
                hasher.later(node, f"f{{i}}", store.put(bytes([i]) * 10), 10)
            print(" ".join(str(w.pid) for w in hasher.workers), flush=True)
            hasher.finish()
        except KeyboardInterrupt:
            hasher.close()
            print("interrupted", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    workers = [int(p) for p in proc.stdout.readline().split()]
    assert len(workers) == 2
    time.sleep(0.3)  # while it waits in finish() for the workers' answers
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert out.strip() == "interrupted"
    assert err == ""  # no worker's traceback
    for pid in workers:  # reaped by the parent, or gone with it: not running
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
