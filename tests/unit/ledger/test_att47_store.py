"""att47 (issue 21 item 8): the store's path for small files, which a model's directory holds by
the thousand, decides as the general path did: the same digests and sizes, the bytes hashed are
the bytes stored (a file that changes while it is read included), durable before it is named,
and the temp file opened once, not twice."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from trajledger import Ledger
from trajledger.ledger import store as store_module
from trajledger.ledger.files import collect_files, manifest_for
from trajledger.ledger.fs import TMP_PREFIX
from trajledger.ledger.record import record_files
from trajledger.ledger.store import ObjectStore
from trajledger.verify.digest import CHUNK, hash_file


def _sizes() -> list[int]:
    return [0, 1, 4095, 4096, 70_000, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17]


@pytest.mark.parametrize("durable", [True, False])
def test_every_size_is_stored_as_the_bytes_it_hashes_to(tmp_path: Path, durable: bool) -> None:
    """Small (under one chunk: the new path) and large (direct writes) alike: the digest and
    size `put_file` returns are those of the file, and the object holds exactly its bytes."""
    store = ObjectStore(tmp_path / "store", durable=durable)
    for i, size in enumerate(_sizes()):
        data = hashlib.sha256(str(i).encode()).digest() * (size // 32 + 1)
        src = tmp_path / f"f{i}"
        src.write_bytes(data[:size])
        got = store.put_file(src)
        assert (got.size, got.sha256) == (size, hashlib.sha256(data[:size]).hexdigest())
        assert store.path_of("sha256:" + got.sha256).read_bytes() == data[:size]
    assert not [p for p in (tmp_path / "store" / "sha256").iterdir()
                if p.name.startswith(TMP_PREFIX)]  # fmt: skip


def test_a_small_file_opens_its_temp_file_once_and_is_durable_before_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 1: a small file's temp file was opened twice (made, closed, opened again by the
    sink): written now through the descriptor that made it, fsynced before the rename."""
    src = tmp_path / "config.json"
    src.write_bytes(b'{"hidden_size": 4096}\n' * 100)
    store = ObjectStore(tmp_path / "store")
    events: list[tuple[str, object]] = []
    real_open, real_fsync, real_replace = os.open, os.fsync, os.replace

    def opening(path: object, *args: object, **kw: object) -> int:
        fd = real_open(path, *args, **kw)  # type: ignore[arg-type]
        if str(path).startswith(TMP_PREFIX):
            events.append(("open", fd))
        return fd

    def fsyncing(fd: int) -> None:
        events.append(("fsync", fd))
        real_fsync(fd)

    def replacing(a: object, b: object, **kw: object) -> None:
        events.append(("replace", a))
        real_replace(a, b, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(store_module.os, "open", opening)
    monkeypatch.setattr(store_module.os, "fsync", fsyncing)
    monkeypatch.setattr(store_module.os, "replace", replacing)
    got = store.put_file(src)
    monkeypatch.undo()
    opens = [fd for what, fd in events if what == "open"]
    assert len(opens) == 1, events
    kinds = [what for what, _ in events]
    assert ("fsync", opens[0]) in events
    assert kinds.index("fsync") < kinds.index("replace")  # (bytes durable before the name)
    assert hash_file(store.path_of("sha256:" + got.sha256)).sha256 == got.sha256


@pytest.mark.parametrize("change", ["grown", "truncated", "rewritten"])
def test_a_small_file_changed_after_it_was_opened_is_stored_as_the_bytes_read(
    tmp_path: Path, change: str
) -> None:
    """A file under one chunk when opened, then grown past several chunks, cut short or
    rewritten before it is read: what is stored is what was read, under its own digest (the
    small path writes the page cache whatever the size turns out to be)."""
    src = tmp_path / "tokenizer.json"
    src.write_bytes(b"a" * 1000)
    new = {"grown": b"g" * (3 * CHUNK + 5), "truncated": b"t" * 10,
           "rewritten": b"r" * 1000}[change]  # fmt: skip

    def opened(_: os.stat_result) -> None:
        with open(src, "r+b") as f:
            f.write(new)
            f.truncate(len(new))

    store = ObjectStore(tmp_path / "store")
    got = store.put_file(src, opened=opened)
    stored = store.path_of("sha256:" + got.sha256).read_bytes()
    assert stored == new and got.size == len(new)
    assert got.sha256 == hashlib.sha256(new).hexdigest()


def test_attest_of_a_model_shaped_tree_gives_the_manifest_hashing_alone_gives(
    tmp_path: Path, home: Path
) -> None:
    """The copy (`record_files`: store, hash while copying) and hashing alone (`manifest_for`,
    the verifier's `hash_files`) agree on every file of a model-like tree: shards over one
    chunk, many small files, an empty one."""
    ledger = Ledger.open(home)
    alice = ledger.keys.create("alice", encrypt=False)
    tree = tmp_path / "model"
    for i in range(3):
        (tree / "shards").mkdir(parents=True, exist_ok=True)
        (tree / "shards" / f"model-{i}.safetensors").write_bytes(os.urandom(CHUNK * 2 + i * 4099))
    for i in range(60):
        d = tree / ("tokenizer", "config")[i % 2]
        d.mkdir(exist_ok=True)
        (d / f"f{i}.json").write_bytes(os.urandom(1 + i * 997))
    (tree / "empty").write_bytes(b"")
    rec = record_files(ledger, [tree], alice, name="model")
    assert rec.manifest is not None and len(rec.manifest.files) == 64
    assert rec.manifest == manifest_for(collect_files([tree]))
    for entry in rec.manifest.files:
        assert len(ledger.store.get_verified(entry.digest)) == entry.size


@pytest.mark.parametrize("batch", [True, False])
def test_the_entries_of_the_fan_out_directories_made_are_durable_with_the_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: bool
) -> None:
    """Finding 2: a put into a new fan-out directory made it (``mkdir``) and fsynced the
    directory that gained the object's name, not the parent that gained the new directory's:
    on a file system that does not write a new directory's entry with the directory itself, a
    crash after the log named the object could lose it. `adopt_files` (imports) did make its
    parents durable; `put_file` / `put_bytes` (attest, record) do not."""
    store = ObjectStore(tmp_path / "store")
    store.put_bytes(b"first")  # (the store's `sha256` made: its own parent is not the point)
    synced: set[int] = set()
    real_fsync = os.fsync

    def fsyncing(fd: int) -> None:
        synced.add(os.fstat(fd).st_ino)
        real_fsync(fd)

    src = tmp_path / "vocab.txt"
    src.write_bytes(b"hello\n" * 10)
    monkeypatch.setattr(os, "fsync", fsyncing)
    if batch:
        names: set[Path] = set()
        got = store.put_file(src, names=names)
        store.sync_names(names)
        digest = "sha256:" + got.sha256
    else:
        digest = store.put_bytes(src.read_bytes())
    monkeypatch.undo()
    leaf = store.path_of(digest).parent
    want = {leaf: "the leaf", leaf.parent: "the first fan-out level", leaf.parent.parent: "sha256"}
    made = [what for p, what in want.items() if p.stat().st_ino not in synced]
    assert not made, f"not fsynced: {made}"
