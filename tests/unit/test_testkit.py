"""tests/testkit.py's `release_files`: what the fault sweeps rely on before they put a ledger
back (no connection of the run before left open on a database), at the cost of a full
collection only when one is needed (suite41)."""

from __future__ import annotations

import gc
import os
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import testkit

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="no /proc/self/fd")


class Cycle:
    """An object in a reference cycle holding a database open (as a command's ``Ledger``)."""

    def __init__(self, db: Path) -> None:
        self.con = sqlite3.connect(db)
        self.con.execute("CREATE TABLE IF NOT EXISTS t (x)")
        self.me = self


@pytest.fixture
def full_collections() -> Iterator[list[int]]:
    """The generations of the collections made meanwhile (``gc.callbacks``); none but those
    asked for (the collector is off meanwhile: a garbage cycle stays where the test put it)."""
    made: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            made.append(info["generation"])

    gc.callbacks.append(note)
    gc.disable()
    try:
        yield made
    finally:
        gc.enable()
        gc.callbacks.remove(note)


def test_a_database_held_by_an_old_cycle_is_closed_by_a_full_collection(
        tmp_path: Path, full_collections: list[int]) -> None:
    db = tmp_path / "state.sqlite"
    held = Cycle(db)
    gc.collect(1)  # it survives the young collections: in the oldest generation now
    del held
    assert testkit.held_open((tmp_path,)) == [str(db)]
    testkit.release_files(tmp_path)
    assert testkit.held_open((tmp_path,)) == []
    assert 2 in full_collections


def test_what_the_last_run_left_is_closed_without_a_full_collection(
        tmp_path: Path, full_collections: list[int]) -> None:
    """A young cycle holding a database is freed by the young collections; the log writer's
    lock, kept open by a reachable writer (and a deleted file elsewhere, not under the roots),
    asks for no full collection."""
    lock = tmp_path / "home" / testkit.WRITER_LOCK
    lock.parent.mkdir(parents=True)
    writer = os.open(lock, os.O_RDWR | os.O_CREAT)
    gone = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    other = os.open(gone, os.O_RDWR | os.O_CREAT)
    os.unlink(gone)
    try:
        Cycle(tmp_path / "home" / "state.sqlite")  # dropped at once: garbage, young
        assert testkit.held_open((tmp_path,)) == [str(tmp_path / "home" / "state.sqlite")]
        testkit.release_files(tmp_path)
        assert testkit.held_open((tmp_path,)) == []
        assert 2 not in full_collections, full_collections
    finally:
        os.close(writer)
        os.close(other)


def test_a_deleted_file_still_held_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "put-back"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.unlink(path)
        assert testkit.held_open((tmp_path,)) == [str(path)]
    finally:
        os.close(fd)


def test_where_descriptors_cannot_be_listed_it_collects_in_full(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, full_collections: list[int]) -> None:
    def unlisted(path: str) -> list[str]:
        raise FileNotFoundError(path)

    monkeypatch.setattr(testkit.os, "listdir", unlisted)
    assert testkit.held_open((tmp_path,)) is None
    testkit.release_files(tmp_path)
    assert 2 in full_collections


def test_an_encrypted_key_is_derived_once_and_every_other_load_is_real(tmp_path: Path) -> None:
    """tests/conftest.py's `load_each_encrypted_key_once`: the same file and passphrase give
    the key loaded before (scrypt not run again); a wrong passphrase, the same key encrypted
    again (another salt) and another key are each loaded for real."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from trajledger.ledger.key_pkcs8 import encrypted_pkcs8

    key = ed25519.Ed25519PrivateKey.generate()
    pem = encrypted_pkcs8(key, b"right")
    first = serialization.load_pem_private_key(pem, b"right")
    assert serialization.load_pem_private_key(pem, b"right") is first
    with pytest.raises(ValueError):
        serialization.load_pem_private_key(pem, b"wrong")
    with pytest.raises(ValueError):  # (a failed load is not kept either)
        serialization.load_pem_private_key(pem, b"wrong")
    again = serialization.load_pem_private_key(encrypted_pkcs8(key, b"right"), b"right")
    assert again is not first and again.private_bytes_raw() == key.private_bytes_raw()
    other = ed25519.Ed25519PrivateKey.generate()
    loaded = serialization.load_pem_private_key(encrypted_pkcs8(other, b"right"), b"right")
    assert loaded.private_bytes_raw() == other.private_bytes_raw()  # type: ignore[union-attr]


def test_the_environment_is_read_once_until_a_distribution_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/conftest.py's `read_each_environment_once`: the same lines without a second read
    while the search path holds the same distributions; a distribution installed, upgraded or
    removed there (at once: no clock involved) is read for real."""
    import importlib.metadata

    from trajledger.runner import buildinfo

    reads = []
    distributions = importlib.metadata.distributions

    def counted() -> object:
        reads.append(1)
        return distributions()

    monkeypatch.setattr(importlib.metadata, "distributions", counted)
    monkeypatch.syspath_prepend(str(tmp_path))
    first = buildinfo.environment_lock()
    assert buildinfo.environment_lock() == first and len(reads) == 1
    assert first == buildinfo.environment_lock.__wrapped__()  # type: ignore[attr-defined]

    def install(version: str) -> None:
        meta = tmp_path / f"suite46_probe-{version}.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text(f"Name: suite46-probe\nVersion: {version}\n")

    install("1.0")
    assert "suite46-probe==1.0" in buildinfo.environment_lock().decode().splitlines()
    (tmp_path / "suite46_probe-1.0.dist-info" / "METADATA").unlink()
    (tmp_path / "suite46_probe-1.0.dist-info").rmdir()
    install("2.0")
    lines = buildinfo.environment_lock().decode().splitlines()
    assert "suite46-probe==2.0" in lines and "suite46-probe==1.0" not in lines
    (tmp_path / "suite46_probe-2.0.dist-info" / "METADATA").unlink()
    (tmp_path / "suite46_probe-2.0.dist-info").rmdir()
    assert buildinfo.environment_lock() == first


def test_a_module_that_names_the_flushes_has_the_real_ones(tmp_path: Path) -> None:
    """tests/conftest.py's `_real_flushes`: this module names os.fsync, os.fdatasync and
    fs.syncfs (tests/unit/test_flushes_in_tests.py sees the ones that do not wait), and the
    user state's commits are synced (``PRAGMA synchronous=FULL`` stays FULL)."""
    from trajledger.ledger import fs

    for flush in (os.fsync, os.fdatasync, fs.syncfs):
        assert not hasattr(flush, "__wrapped__"), flush
    assert fs.syncfs.__module__ == "trajledger.ledger.fs"
    con = sqlite3.connect(tmp_path / "state.sqlite")
    con.execute("PRAGMA synchronous=FULL")
    assert con.execute("PRAGMA synchronous").fetchone() == (2,)
    con.close()


def test_a_file_still_held_after_the_full_collection_is_named(
        tmp_path: Path, full_collections: list[int]) -> None:
    """rev39 finding 6: a connection something still reaches (a leak a notebook or a server
    would keep) is not closed by any collection; putting its database back under it is the
    hazard `release_files` exists for, so it fails, naming the file, instead of returning."""
    db = tmp_path / "state.sqlite"
    held = Cycle(db)  # reachable: held here
    with pytest.raises(AssertionError, match="still held open after a full collection") as e:
        testkit.release_files(tmp_path)
    assert str(db) in str(e.value)
    assert 2 in full_collections
    held.con.close()
    testkit.release_files(tmp_path)  # closed: nothing to say


def own_handler_is_kept(signum: int) -> None:
    """`testkit.interrupt_as_in_the_foreground` leaves a handler of the process's own."""
    def own(signum: int, frame: object) -> None:
        pass

    signal.signal(signum, own)
    testkit.interrupt_as_in_the_foreground()
    assert signal.getsignal(signum) is own


def test_an_interrupt_ignored_by_the_shell_reaches_the_tests_children() -> None:
    """A run started in the background inherits SIGINT ignored, and so did every command the
    tests started and interrupted: test_rehash's Ctrl-C test failed in every such run, put down
    to the load (suite41, suite42). `testkit.interrupt_as_in_the_foreground` gives the process
    a terminal's interrupt back; a handler of its own stays."""
    import signal
    import subprocess
    import sys

    before = signal.getsignal(signal.SIGINT)
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `pytest ... &` in a script starts
        testkit.interrupt_as_in_the_foreground()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                               check=True, timeout=60)  # fmt: skip
        assert child.stdout.strip() == "True"
        own_handler_is_kept(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")
def test_a_hang_up_ignored_by_nohup_reaches_the_tests_children(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run started with ``nohup`` inherits SIGHUP ignored, and so did every command the tests
    started and hung up: test_exit_codes' and test_outsiders_day's SIGHUP cases failed in every
    such run (suite43). `testkit.interrupt_as_in_the_foreground` keeps this process surviving
    a hang-up (a handler that does nothing, in its workers too: they start as new programs,
    told by `testkit.HANG_UP_IGNORED`) while the commands it starts get the default again; a
    handler of its own stays."""
    import subprocess
    import sys

    before = signal.getsignal(signal.SIGHUP)
    probe = "import signal; print(signal.getsignal(signal.SIGHUP) is signal.SIG_DFL)"
    monkeypatch.delenv(testkit.HANG_UP_IGNORED, raising=False)
    try:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # a run started at a terminal: left
        testkit.interrupt_as_in_the_foreground()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
        assert testkit.HANG_UP_IGNORED not in os.environ
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup pytest ...` starts
        testkit.interrupt_as_in_the_foreground()
        assert signal.getsignal(signal.SIGHUP) is testkit.hang_up_survived
        os.kill(os.getpid(), signal.SIGHUP)  # survived: the run goes on, as nohup asked
        child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                               check=True, timeout=60)  # fmt: skip
        assert child.stdout.strip() == "True"
        # A worker: started as a new program (the default), told by the controller.
        assert os.environ[testkit.HANG_UP_IGNORED] == "1"
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        testkit.interrupt_as_in_the_foreground()
        assert signal.getsignal(signal.SIGHUP) is testkit.hang_up_survived
        own_handler_is_kept(signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, before)


def test_built_once_copies_one_build_and_moves_its_paths(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`testkit.built_once`: the build runs once for a key; each other test's call gets a copy
    of its files, the paths of what it returned (and of a `Party`'s attributes) moved to its
    own directory; a second call in the same test builds anew."""
    builds: list[Path] = []

    def build(root: Path) -> tuple[testkit.Party, Path, str]:
        builds.append(root)
        party = testkit.Party(root, "p")
        (root / "made.txt").write_text(str(len(builds)))
        return party, root / "made.txt", "text"

    key = ("test_built_once", tmp_path)
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "a.py::first (call)")
    (tmp_path / "a").mkdir()
    party, made, text = testkit.built_once(key, tmp_path / "a", build)
    assert (party.home, party.state, made, text) == (
        tmp_path / "a" / "p", tmp_path / "a" / "p-state", tmp_path / "a" / "made.txt", "text")
    assert made.read_text() == "1" and party.state.is_dir() and builds[0] != tmp_path / "a"
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "a.py::second (call)")
    (tmp_path / "b").mkdir()
    party, made, _ = testkit.built_once(key, tmp_path / "b", build)
    assert (party.home, made.read_text(), len(builds)) == (tmp_path / "b" / "p", "1", 1)
    (tmp_path / "c").mkdir()
    party, made, _ = testkit.built_once(key, tmp_path / "c", build)  # the same test again
    assert (builds[-1], made.read_text()) == (tmp_path / "c", "2")
