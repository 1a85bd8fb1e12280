"""The writer's fast path decides and writes as the slow one did (issue 21 item 7, dur46).

A writer kept open appends from what it holds in memory: the state it committed (re-read only
to see that the files did not change), the partial entry bundle it extends with its new entries
rather than encoding every entry of the bundle again, the paths of its own files built once, the
last directory of the fsync round synced on its own thread. A writer opened anew for every
append has none of that: it reads the state and the right edge back from the tiles. Both must
leave the same log, byte for byte (every tile, entry bundle, history record, treeState and signed
checkpoint), and that log is the one the code before these changes wrote for the same appends
(REV a8fd2f10: ``KNOWN``, the digest of every file). The appends cross tile boundaries one entry
at a time, at the end of a batch and inside one.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
from pathlib import Path

import pytest
import testkit
from cryptography.hazmat.primitives.asymmetric import ed25519

from trajledger.ledger.errors import LogError
from trajledger.ledger.keys import Signer
from trajledger.ledger.log import EntrySpec, Log, verify_log_dir
from trajledger.ledger.log import edge as edge_module
from trajledger.ledger.log import writer as writer_module
from trajledger.verify.tiles import format_entry_bundle, parse_entry_bundle

ORIGIN = "example.org/fastpath"
SIGNER = Signer.from_private(  # TEST ONLY: a fixed key, so that the signatures are known too
    "log", ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
)
KEYID = "b" * 64
SIZES = [250, *[1] * 10, 3, 7, 1, 241, *[1] * 5, 250, *[1] * 3, 300, 2, 1]
"""Entries per append (27 appends, 1,073 entries): one by one across 256; a batch ending at 512;
one by one across 768; a batch across 1,024 (the fourth full tile, and a level-1 tile of 4)."""
KNOWN = "13ba725efa6a50037501dd97118598dc638d9ba2cf5935ce1a10c83f8ac673cf"
"""SHA-256 of every file of the log (`digest`) written by REV a8fd2f10 for ``SIZES``."""


def specs(start: int, count: int) -> list[EntrySpec]:
    return [testkit.entry_spec(i, KEYID) for i in range(start, start + count)]


def tree(log_dir: Path) -> dict[str, bytes]:
    return {
        p.relative_to(log_dir).as_posix(): p.read_bytes()
        for p in sorted(log_dir.rglob("*"))
        if p.is_file() and p.name != "lock"
    }


def digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name, data in sorted(files.items()):
        h.update(name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "_now", lambda: "2026-12-07T00:00:00Z")


def kept_open(directory: Path) -> dict[str, bytes]:
    log = Log.create(directory, ORIGIN, SIGNER)
    start = 0
    for n in SIZES:
        assert log.append(specs(start, n)) == list(range(start, start + n))
        start += n
    log.close()
    return tree(directory)


def opened_each_time(directory: Path) -> dict[str, bytes]:
    Log.create(directory, ORIGIN, SIGNER).close()
    start = 0
    for n in SIZES:
        with Log.open(directory, SIGNER) as log:
            assert log.append(specs(start, n)) == list(range(start, start + n))
        start += n
    return tree(directory)


def test_an_open_writer_writes_the_log_a_writer_opened_for_each_append_writes(
    tmp_path: Path,
) -> None:
    fast, slow = kept_open(tmp_path / "fast"), opened_each_time(tmp_path / "slow")
    assert fast.keys() == slow.keys()
    assert [name for name in fast if fast[name] != slow[name]] == []
    assert {"tile/entries/004.p/49", "tile/entries/003", "tile/1/000.p/4"} <= fast.keys()
    assert verify_log_dir(tmp_path / "fast").ok


def test_the_log_is_the_one_the_code_before_wrote(tmp_path: Path) -> None:
    assert digest(kept_open(tmp_path / "log")) == KNOWN


def test_every_partial_bundle_is_its_entries_encoded_whole(tmp_path: Path) -> None:
    """What the edge extends is what encoding the bundle's entries anew gives, at each width."""
    log = Log.create(tmp_path / "log", ORIGIN, SIGNER)
    start = 0
    for n in SIZES:
        log.append(specs(start, n))
        start += n
        edge = log._state_now().edge
        assert edge.encoded == (format_entry_bundle(edge.bundle) if edge.bundle else b"")
        width = start % 256
        if width:
            rel = f"tile/entries/{start // 256:03d}.p/{width}"
            data = (log.directory / rel).read_bytes()
            assert data == edge.encoded and parse_entry_bundle(data, width=width) == edge.bundle


def test_an_entry_too_long_for_a_bundle_is_refused_and_nothing_written(tmp_path: Path) -> None:
    log = Log.create(tmp_path / "log", ORIGIN, SIGNER)
    log.append(specs(0, 3))
    before = tree(log.directory)
    edge = log._state_now().edge
    with pytest.raises(edge_module.FormatError, match="entry 3 has 70000 bytes"):
        edge.extend([b"x" * 70000], [bytes(32)])
    assert edge.encoded == format_entry_bundle(edge.bundle)  # the edge held is unchanged
    assert tree(log.directory) == before


def test_a_failed_fsync_of_the_last_directory_stops_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round's last directory is fsynced on the caller's thread: its failure, like any
    other of the round, stops the commit before treeState is renamed (nothing committed), and
    the next writer appends the same entry at the same index."""
    log = Log.create(tmp_path / "log", ORIGIN, SIGNER)
    log.append(specs(0, 3))
    real = os.fsync
    failed: list[int] = []

    def fsync(fd: int) -> None:
        here = threading.current_thread() is threading.main_thread()
        if here and stat.S_ISDIR(os.fstat(fd).st_mode) and not failed:
            failed.append(fd)
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(LogError, match="cannot append: Input/output error"):
        log.append(specs(3, 1))
    monkeypatch.setattr(os, "fsync", real)
    assert failed
    reopened = Log.open(log.directory, SIGNER)
    assert reopened.size == 3
    assert reopened.append(specs(3, 1)) == [3]
    assert verify_log_dir(log.directory).ok
