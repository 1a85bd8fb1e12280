"""ObjectStore: the same contract on a local directory and through pyarrow.fs.

The pyarrow backend runs on ``pyarrow.fs._MockFileSystem`` (in memory) when the installed
pyarrow has it, else on a ``SubTreeFileSystem`` over a temporary ``LocalFileSystem``; either way
every call goes through the pyarrow code path of the store, not the local one.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trajledger.ledger.errors import StoreError
from trajledger.ledger.fs import TMP_PREFIX
from trajledger.ledger.store import ObjectStore, verify_bytes
from trajledger.verify.errors import DigestMismatchError, FormatError

pafs = pytest.importorskip("pyarrow.fs")

HELLO = b"hello"
HELLO_HEX = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"  # sha256("hello")
HELLO_DIGEST = "sha256:" + HELLO_HEX
ABSENT = "sha256:" + "0" * 64


def _pyarrow_fs(tmp_path: Path) -> Any:
    mock = getattr(pafs, "_MockFileSystem", None)
    if mock is not None:
        return mock()
    root = tmp_path / "pafs"
    root.mkdir()
    return pafs.SubTreeFileSystem(str(root), pafs.LocalFileSystem())


class Backend:
    """A store plus raw access to where its blobs live, to tamper and inspect."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        if kind == "local":
            self.fs = None
            self.store = ObjectStore(tmp_path / "objects")
        else:
            self.fs = _pyarrow_fs(tmp_path)
            self.store = ObjectStore.with_filesystem(self.fs, "bucket/objects/")

    def location(self, digest: str) -> str:
        h = digest.removeprefix("sha256:")
        rel = f"sha256/{h[:2]}/{h[2:4]}/{h}"
        return str(self.store.root / rel) if self.fs is None else f"bucket/objects/{rel}"

    def overwrite(self, digest: str, data: bytes) -> None:
        if self.fs is None:
            path = Path(self.location(digest))
            path.chmod(0o644)
            path.write_bytes(data)
        else:
            with self.fs.open_output_stream(self.location(digest)) as out:
                out.write(data)

    def all_files(self) -> list[str]:
        if self.fs is None:
            return sorted(
                str(Path(d, f).relative_to(self.store.root))
                for d, _dirs, files in os.walk(self.store.root)
                for f in files
            )
        sel = pafs.FileSelector("bucket/objects", recursive=True, allow_not_found=True)
        return sorted(
            i.path.removeprefix("bucket/objects/")
            for i in self.fs.get_file_info(sel)
            if i.type == pafs.FileType.File
        )


@pytest.fixture(params=["local", "pyarrow"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return Backend(request.param, tmp_path)


def test_put_get_round_trip_and_layout(backend: Backend) -> None:
    store = backend.store
    assert not store.exists(HELLO_DIGEST)
    assert store.put_bytes(HELLO) == HELLO_DIGEST
    assert store.exists(HELLO_DIGEST)
    assert store.get(HELLO_DIGEST) == HELLO
    assert store.get_verified(HELLO_DIGEST) == HELLO
    assert backend.all_files() == [f"sha256/2c/f2/{HELLO_HEX}"]


def test_put_is_idempotent(backend: Backend) -> None:
    store = backend.store
    store.put_bytes(HELLO)
    assert store.put_bytes(HELLO) == HELLO_DIGEST
    assert store.put_stream(io.BytesIO(HELLO)).sha256 == HELLO_HEX
    assert backend.all_files() == [f"sha256/2c/f2/{HELLO_HEX}"]


def test_put_stream_larger_than_one_chunk(backend: Backend) -> None:
    data = os.urandom((1 << 20) * 2 + 12345)
    fd = backend.store.put_stream(io.BytesIO(data), name="big.bin")
    assert fd.size == len(data)
    assert fd.sha256 == hashlib.sha256(data).hexdigest()
    assert str(fd.path) == "big.bin"
    assert backend.store.get_verified(fd.digest) == data
    assert backend.all_files() == [f"sha256/{fd.sha256[:2]}/{fd.sha256[2:4]}/{fd.sha256}"]


def test_put_file(backend: Backend, tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(HELLO)
    fd = backend.store.put_file(src)
    assert (fd.digest, fd.size) == (HELLO_DIGEST, 5)
    assert backend.store.get(HELLO_DIGEST) == HELLO


def test_a_fifo_or_device_where_a_file_was_is_refused_not_read(backend: Backend,
                                                              tmp_path: Path) -> None:
    """rev33 finding 4: a file listed as regular (`collect_files`, `runner.settled`) can be
    replaced by a FIFO or a link to a device before the store opens it: the store opened a FIFO
    blocking until some writer came (for good: a worker thread no Ctrl-C ends), and would have
    copied ``/dev/zero`` until the disk was full. Now it is refused before it is read. (The
    writer here, once the FIFO is open for reading, closes at once: the old code stored b"".)
    On a remote store too (the lead, after rev33: it hashed the path, then opened it again to
    upload)."""
    import threading

    store = backend.store
    fifo = tmp_path / "model.bin"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: os.close(os.open(fifo, os.O_WRONLY)), daemon=True)
    writer.start()
    try:
        with pytest.raises(StoreError, match=r"model\.bin: not a regular file now \(a FIFO"):
            store.put_file(fifo)
    finally:  # the writer's open waits for a reader: give it one until it has had it
        while writer.is_alive():
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
            writer.join(0.01)
    zero = tmp_path / "zero.bin"
    zero.symlink_to("/dev/zero")
    with pytest.raises(StoreError, match=r"zero\.bin: not a regular file now"):
        store.put_file(zero)
    model = tmp_path / "ok.bin"
    model.write_bytes(HELLO)
    seen: list[os.stat_result] = []
    assert store.put_file(model, opened=seen.append).digest == HELLO_DIGEST
    assert [(s.st_ino, s.st_size) for s in seen] == [(model.stat().st_ino, len(HELLO))]
    assert store.get(HELLO_DIGEST) == HELLO


def test_put_file_missing_source(backend: Backend, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"nope\.bin: cannot read: No such file or directory$"):
        backend.store.put_file(tmp_path / "nope.bin")


def test_get_absent(backend: Backend) -> None:
    with pytest.raises(StoreError, match=f"^object {ABSENT}: not in the store$"):
        backend.store.get(ABSENT)
    with pytest.raises(StoreError, match="not in the store"):
        backend.store.get_verified(ABSENT)


def test_get_verified_detects_altered_bytes(backend: Backend) -> None:
    backend.store.put_bytes(HELLO)
    backend.overwrite(HELLO_DIGEST, b"HELLO")
    want = hashlib.sha256(b"HELLO").hexdigest()
    if backend.store.is_local:
        assert backend.store.get(HELLO_DIGEST) == b"HELLO"  # unchecked read: the caller's choice
    else:
        with pytest.raises(DigestMismatchError, match=f"hashes to sha256:{want}"):
            backend.store.get(HELLO_DIGEST)  # a remote read is always checked
    with pytest.raises(
        DigestMismatchError, match=f"content hashes to sha256:{want}, want {HELLO_DIGEST}$"
    ) as info:
        backend.store.get_verified(HELLO_DIGEST)
    assert info.value.expected == HELLO_DIGEST
    assert info.value.observed == "sha256:" + want


@pytest.mark.parametrize(
    "bad", ["2cf24dba", "sha256:" + HELLO_HEX.upper(), "sha512:" + HELLO_HEX, "sha256:" + "0" * 63]
)
def test_malformed_digest_is_refused(backend: Backend, bad: str) -> None:
    for call in (backend.store.exists, backend.store.get, backend.store.delete):
        with pytest.raises(FormatError, match="is not of the form sha256:<64 lowercase hex>"):
            call(bad)


def test_iter_digests(backend: Backend) -> None:
    assert list(backend.store.iter_digests()) == []
    digests = {backend.store.put_bytes(bytes([i]) * i) for i in range(5)}
    assert set(backend.store.iter_digests()) == digests


def test_delete(backend: Backend) -> None:
    backend.store.put_bytes(HELLO)
    assert backend.store.delete(HELLO_DIGEST) is True
    assert not backend.store.exists(HELLO_DIGEST)
    assert backend.store.delete(HELLO_DIGEST) is False
    assert list(backend.store.iter_digests()) == []


def test_copy_to(backend: Backend, tmp_path: Path) -> None:
    backend.store.put_bytes(HELLO)
    dest = tmp_path / "out.bin"
    backend.store.copy_to(HELLO_DIGEST, dest)
    assert dest.read_bytes() == HELLO


def test_no_temp_files_remain(backend: Backend) -> None:
    backend.store.put_bytes(HELLO)
    backend.store.put_stream(io.BytesIO(b"stream"))
    backend.store.put_stream(io.BytesIO(HELLO))  # duplicate: its temp file must go
    assert not [f for f in backend.all_files() if TMP_PREFIX in f]


# -- local only -----------------------------------------------------------------------------------


def test_local_blobs_are_read_only(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path / "objects")
    store.put_bytes(HELLO)
    fd = store.put_stream(io.BytesIO(b"other"))
    for digest in (HELLO_DIGEST, fd.digest):
        assert stat.S_IMODE(store.path_of(digest).stat().st_mode) == 0o444



@pytest.mark.parametrize("size", [0, 1, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, 3 << 20])
def test_local_get_reads_every_size_whole(tmp_path: Path, size: int) -> None:
    """A small blob is read in one call, a larger one whole: the same bytes either way."""
    store = ObjectStore(tmp_path / "objects")
    data = os.urandom(size)
    assert store.get(store.put_bytes(data)) == data

def test_local_second_put_does_not_rewrite(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path / "objects")
    store.put_bytes(HELLO)
    inode = store.path_of(HELLO_DIGEST).stat().st_ino
    store.put_bytes(HELLO)
    store.put_stream(io.BytesIO(HELLO))
    assert store.path_of(HELLO_DIGEST).stat().st_ino == inode


def test_local_file_uri_is_a_local_store(tmp_path: Path) -> None:
    store = ObjectStore(f"file://{tmp_path}/objects")
    store.put_bytes(HELLO)
    assert store.path_of(HELLO_DIGEST) == tmp_path / "objects" / "sha256/2c/f2" / HELLO_HEX
    assert store.path_of(HELLO_DIGEST).is_file()


def test_drop_temp_files_removes_only_what_no_live_writer_owns(tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    from trajledger.ledger.fs import STALE_AFTER, temp_name

    store = ObjectStore(tmp_path / "objects")
    store.put_bytes(HELLO)
    top = store.root / "sha256"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    mine = top / temp_name()  # this process: alive
    gone = top / temp_name().replace(f"-{os.getpid()}-", f"-{dead}-")  # exited: dead
    old = top / f"{TMP_PREFIX}{'a' * 59}"  # no owner (trajledger 0.1), an old one
    young = top / f"{TMP_PREFIX}{'b' * 59}"  # no owner, written just now
    deep = store.path_of(HELLO_DIGEST).parent / f"{TMP_PREFIX}{'c' * 59}"  # where 0.1 wrote them
    for p in (mine, gone, old, young, deep):
        p.write_bytes(b"partial")
    past = time.time() - STALE_AFTER - 60
    for p in (old, deep):
        os.utime(p, (past, past))
    assert list(store.iter_digests()) == [HELLO_DIGEST]
    assert store.drop_temp_files() == 2
    assert [p.exists() for p in (mine, gone, old, young, deep)] == [True, False, False, True, True]
    assert store.drop_temp_files(everywhere=True) == 1
    assert not deep.exists()
    assert store.drop_temp_files(everywhere=True) == 0


@pytest.mark.parametrize(
    "put",
    [lambda s: s.put_bytes(HELLO), lambda s: s.put_stream(io.BytesIO(HELLO), name="hello")],
    ids=["put_bytes", "put_stream"],
)
def test_a_put_keeps_only_an_object_that_hashes_to_its_name(
    backend: Backend, put: Callable[[ObjectStore], object]
) -> None:
    """Bytes of the right size but not the right content (planted by whoever can write the
    bucket, or damaged) are replaced by the put, not kept because the size matched."""
    backend.store.put_bytes(HELLO)
    for planted in (b"HELLO", b"hellp"):  # the same size as b"hello"
        backend.overwrite(HELLO_DIGEST, planted)
        with pytest.raises(DigestMismatchError):
            backend.store.check_object(HELLO_DIGEST)
        put(backend.store)
        assert backend.store.check_object(HELLO_DIGEST) == 5
        assert backend.store.get(HELLO_DIGEST) == HELLO
    assert backend.all_files() == [f"sha256/2c/f2/{HELLO_HEX}"]


def test_a_damaged_object_is_replaced_by_the_next_put(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path / "objects")
    store.put_bytes(HELLO)
    path = store.path_of(HELLO_DIGEST)
    os.chmod(path, 0o644)
    for planted in (b"HELLO", b"hello, world"):
        path.write_bytes(planted)
        with pytest.raises(DigestMismatchError):
            store.check_object(HELLO_DIGEST)
        assert store.put_bytes(HELLO) == HELLO_DIGEST
        assert path.read_bytes() == HELLO and stat.S_IMODE(path.stat().st_mode) == 0o444
        os.chmod(path, 0o644)
        path.write_bytes(planted)
        assert store.put_stream(io.BytesIO(HELLO)).digest == HELLO_DIGEST
        assert path.read_bytes() == HELLO
        os.chmod(path, 0o644)
    assert store.check_object(HELLO_DIGEST) == 5
    assert store.temp_files(everywhere=True) == []


def test_put_stream_refuses_bytes_that_do_not_give_the_expected_digest(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path / "objects")
    with pytest.raises(DigestMismatchError, match="content hashes to sha256:2cf2"):
        store.put_stream(io.BytesIO(HELLO), name="src", expect=ABSENT)
    assert not store.exists(HELLO_DIGEST) and store.temp_files() == []
    assert store.put_stream(io.BytesIO(HELLO), expect=HELLO_DIGEST).digest == HELLO_DIGEST


def _fail_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    def fsync(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize(
    "put",
    [lambda s: s.put_bytes(HELLO), lambda s: s.put_stream(io.BytesIO(HELLO), name="hello")],
    ids=["put_bytes", "put_stream"],
)
def test_local_write_failure_is_a_store_error_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, put: Callable[[ObjectStore], object]
) -> None:
    store = ObjectStore(tmp_path / "objects")
    _fail_fsync(monkeypatch)
    with pytest.raises(StoreError, match="No space left on device"):
        put(store)
    monkeypatch.undo()
    assert not store.exists(HELLO_DIGEST)
    leftovers = [f for _d, _s, files in os.walk(store.root) for f in files]
    assert leftovers == []


def test_path_of_refused_off_disk(tmp_path: Path) -> None:
    store = ObjectStore.with_filesystem(_pyarrow_fs(tmp_path), "bucket")
    with pytest.raises(StoreError, match=r"^path_of: the store is not on a local disk$"):
        store.path_of(HELLO_DIGEST)


def test_a_temp_dir_is_owned_by_its_process(tmp_path: Path) -> None:
    from trajledger.ledger.fs import is_stale, temp_dir

    with temp_dir(tmp_path / "tmp") as tmp:
        path = Path(tmp)
        assert path.name.startswith(TMP_PREFIX) and f"-{os.getpid()}-" in path.name
        assert not is_stale(path)  # this process is alive
        dead = path.with_name(path.name.replace(f"-{os.getpid()}-", "-999999999-"))
        path.rename(dead)
        assert is_stale(dead)  # no such process: the next writer may remove it at once
        dead.rename(path)


# -- large objects: written around the page cache when the file system allows it -------------


SIZES = [0, 1, 4095, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 123, 4 << 20]


def _opened_direct(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, for each object temp file opened for writing, whether it was opened O_DIRECT."""
    seen: list[bool] = []
    real = os.open

    def spy(path: Any, flags: int, *a: Any, **kw: Any) -> int:
        if TMP_PREFIX in os.fspath(path) and flags & os.O_WRONLY:
            seen.append(bool(flags & getattr(os, "O_DIRECT", 0)))
        return real(path, flags, *a, **kw)

    monkeypatch.setattr(os, "open", spy)
    return seen


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT here")
@pytest.mark.parametrize("size", SIZES)
def test_large_files_are_stored_directly_and_read_back_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    src = tmp_path / "src"
    data = os.urandom(size)
    src.write_bytes(data)
    store = ObjectStore(tmp_path / "objects")
    seen = _opened_direct(monkeypatch)
    got = store.put_file(src)
    assert got.size == size and got.sha256 == hashlib.sha256(data).hexdigest()
    assert store.path_of(got.digest).read_bytes() == data
    direct = [d for d in seen if d]
    # O_DIRECT only for a file of at least one whole chunk, and only where /tmp allows it.
    assert (len(direct) > 0) == (size >= (1 << 20) and _tmp_allows_direct(tmp_path))
    assert store.temp_files(everywhere=True) == []


def _tmp_allows_direct(where: Path) -> bool:
    probe = where / "probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    probe.unlink()
    return True


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT here")
@pytest.mark.parametrize("tail", [1, 4095, 4096, 4097, 5000, (1 << 20) - 1])
def test_only_the_last_partial_block_goes_through_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: int
) -> None:
    """A file's last chunk that is not whole blocks: its whole blocks are still written
    directly; only the bytes after the last whole block (under 4 KiB) through the page cache,
    at the same offset."""
    if not _tmp_allows_direct(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    src = tmp_path / "src"
    data = os.urandom((1 << 20) + tail)
    src.write_bytes(data)
    real_open, real_write = os.open, os.write
    direct_fds: set[int] = set()
    written = {"direct": 0, "cached": 0}

    def fopen(path: Any, flags: int, *a: Any, **kw: Any) -> int:
        fd = real_open(path, flags, *a, **kw)
        if flags & os.O_DIRECT:
            direct_fds.add(fd)
        else:
            direct_fds.discard(fd)
        return fd

    def fwrite(fd: int, view: Any) -> int:
        n = real_write(fd, view)
        written["direct" if fd in direct_fds else "cached"] += n
        return n

    monkeypatch.setattr(os, "open", fopen)
    monkeypatch.setattr(os, "write", fwrite)
    store = ObjectStore(tmp_path / "objects")
    got = store.put_file(src)
    monkeypatch.undo()
    assert got.sha256 == hashlib.sha256(data).hexdigest()
    assert store.path_of(got.digest).read_bytes() == data
    assert written == {"direct": len(data) - tail % 4096, "cached": tail % 4096}


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT here")
@pytest.mark.parametrize("refused", ["open", "write"])
def test_a_file_system_that_refuses_direct_io_gets_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refused: str
) -> None:
    """EINVAL from opening with O_DIRECT (tmpfs), or from a direct write (an unaligned
    buffer, a block size larger than 4096): the object is written through the page cache from
    where the direct writes stopped."""
    import errno

    src = tmp_path / "src"
    data = os.urandom(3 * (1 << 20) + 5)
    src.write_bytes(data)
    real_open, real_write = os.open, os.write
    direct_fds: set[int] = set()
    writes = [0]

    def fopen(path: Any, flags: int, *a: Any, **kw: Any) -> int:
        if flags & os.O_DIRECT:
            if refused == "open":
                raise OSError(errno.EINVAL, "Invalid argument", path)
            fd = real_open(path, flags, *a, **kw)
            direct_fds.add(fd)
            return fd
        return real_open(path, flags, *a, **kw)

    def fwrite(fd: int, view: Any) -> int:
        if fd in direct_fds:
            writes[0] += 1
            if writes[0] == 2:  # the first chunk went direct, the second is refused
                direct_fds.discard(fd)
                raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, view)

    monkeypatch.setattr(os, "open", fopen)
    monkeypatch.setattr(os, "write", fwrite)
    store = ObjectStore(tmp_path / "objects")
    got = store.put_file(src)
    monkeypatch.undo()
    assert got.sha256 == hashlib.sha256(data).hexdigest()
    assert store.path_of(got.digest).read_bytes() == data
    assert writes[0] == (0 if refused == "open" else 2)


def test_streams_without_a_file_are_stored_through_the_page_cache(tmp_path: Path) -> None:
    data = os.urandom(2 * (1 << 20) + 7)

    class ReadOnly:
        def __init__(self) -> None:
            self._f = io.BytesIO(data)

        def read(self, n: int = -1) -> bytes:
            return self._f.read(n)

    store = ObjectStore(tmp_path / "objects")
    for stream in (io.BytesIO(data), ReadOnly()):
        got = store.put_stream(stream, name="s")  # type: ignore[arg-type]
        assert store.path_of(got.digest).read_bytes() == data


# -- adopting staged files (import) ----------------------------------------------------------------


def _staged(where: Path, blobs: list[bytes]) -> list[Any]:
    from trajledger.verify.digest import FileDigest

    where.mkdir(exist_ok=True)
    out = []
    for data in blobs:
        path = where / hashlib.sha256(data).hexdigest()
        path.write_bytes(data)
        out.append(FileDigest(path, len(data), path.name))
    return out


def test_adopt_files_one_durability_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The staged files' data is synced in one pass before any of them has its name in the
    store, then the directories that gained a name (made ones' parents too) in one more."""
    import trajledger.ledger.store as store_module

    store = ObjectStore(tmp_path / "objects")
    store.put_bytes(HELLO)  # an object already there: adopted as a no-op
    blobs = [b"one", b"two", b"three", HELLO]
    files = _staged(tmp_path / "staging", blobs)
    passes: list[tuple[list[str | Path], list[str]]] = []

    def sync_paths(paths: list[str | Path]) -> None:
        passes.append((list(paths), sorted(store.iter_digests())))

    monkeypatch.setattr(store_module, "sync_paths", sync_paths)
    advanced: list[int] = []
    store.adopt_files(files, advanced.append)
    new = [f for f in files if f.digest != HELLO_DIGEST]
    assert passes[0][0] == [f.path for f in new]
    assert passes[0][1] == [HELLO_DIGEST]  # nothing new named before the data pass
    dirs = {Path(p) for p in passes[1][0]}
    for f in new:
        final = store.path_of(f.digest)
        assert final.read_bytes() == next(b for b in blobs if hashlib.sha256(b).hexdigest()
                                          == f.sha256)
        assert stat.S_IMODE(final.stat().st_mode) == 0o444
        assert {final.parent, final.parent.parent} <= dirs
    assert len(passes) == 2 and sorted(advanced) == sorted(len(b) for b in blobs)
    assert list((tmp_path / "staging").iterdir()) == []


def test_adopt_files_moves_many_in_on_two_threads(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """From `MOVE_IN_SPLIT` files on, the renames run on two threads (digests below 8 and from
    8 on): every file is in place, read-only, each directory that gained a name is in the
    directory pass, and every byte is told to ``advance``; a failure on the other thread is
    raised as the store's error, naming the file."""
    import trajledger.ledger.store as store_module

    store = ObjectStore(tmp_path / "objects")
    blobs = [b"blob %d" % n for n in range(store_module.MOVE_IN_SPLIT + 36)]
    files = _staged(tmp_path / "staging", blobs)
    assert {f.sha256 >= "8" for f in files} == {True, False}
    passes: list[list[str | Path]] = []
    real = store_module.sync_paths
    monkeypatch.setattr(store_module, "sync_paths", lambda paths: passes.append(list(paths))
                        or real(paths))
    advanced: list[int] = []
    store.adopt_files(files, advanced.append)
    for f in files:
        final = store.path_of(f.digest)
        assert final.read_bytes() == blobs[[hashlib.sha256(b).hexdigest() for b in blobs]
                                           .index(f.sha256)]
        assert stat.S_IMODE(final.stat().st_mode) == 0o444
        assert {final.parent, final.parent.parent} <= {Path(p) for p in passes[-1]}
    assert sum(advanced) == sum(len(b) for b in blobs)
    assert list((tmp_path / "staging").iterdir()) == []
    # a rename that fails on the second thread: a directory where the object goes
    more = _staged(tmp_path / "staging2", [b"more %d" % n for n in range(80)])
    blocked = next(f for f in more if f.sha256 >= "8")
    store.path_of(blocked.digest).mkdir(parents=True)
    with pytest.raises(StoreError, match=f"{blocked.sha256} -> .*{blocked.sha256}: cannot move "
                                         "into the store"):
        store.adopt_files(more)


def test_adopt_files_with_a_flush_of_the_file_system(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Given ``flush`` (an import's `fs.FileSystemSync.sync`), it runs once, after every file has
    its name, instead of the directory pass; a staged file already read-only is renamed as it
    is (no ``chmod``), one the umask left otherwise is made read-only."""
    import trajledger.ledger.store as store_module

    store = ObjectStore(tmp_path / "objects")
    files = _staged(tmp_path / "staging", [b"read-only", b"writable"])
    files[0].path.chmod(0o444)
    files[1].path.chmod(0o600)
    monkeypatch.setattr(store_module, "sync_paths", lambda paths: pytest.fail("a fsync pass"))
    chmods: list[Path] = []
    real_chmod = os.chmod
    monkeypatch.setattr(store_module.os, "chmod",
                        lambda path, mode: chmods.append(Path(path)) or real_chmod(path, mode))
    flushed: list[list[str]] = []
    store.adopt_files(files, synced=lambda: None,
                      flush=lambda: flushed.append(sorted(store.iter_digests())))
    assert flushed == [sorted(f.digest for f in files)]
    assert chmods == [files[1].path]
    for f in files:
        assert stat.S_IMODE(store.path_of(f.digest).stat().st_mode) == 0o444


def test_adopt_files_refuses_a_size_that_changed(tmp_path: Path) -> None:
    from trajledger.verify.digest import FileDigest

    store = ObjectStore(tmp_path / "objects")
    (f,) = _staged(tmp_path / "staging", [b"grown"])
    with pytest.raises(StoreError, match="not 6 bytes: the file changed after it was written"):
        store.adopt_files([FileDigest(f.path, 6, f.sha256)])
    assert list(store.iter_digests()) == []


def test_adopt_files_waits_for_a_pass_started_ahead(tmp_path: Path) -> None:
    from trajledger.ledger.fs import sync_paths_ahead

    store = ObjectStore(tmp_path / "objects")
    files = _staged(tmp_path / "staging", [b"a", b"b"])
    waited: list[bool] = []
    wait = sync_paths_ahead([f.path for f in files])
    store.adopt_files(files, synced=lambda: waited.append(True) or wait())
    assert waited == [True] and sorted(store.iter_digests()) == sorted(f.digest for f in files)


def test_adopt_files_removes_no_staged_file_before_the_pass_ahead_ended(tmp_path: Path) -> None:
    """A staged object the store already holds is dropped, but only once the pass started
    ahead (which opens every staged file by name) is over: before, a slow pass met a file
    removed under it and the import failed "No such file or directory" (a race seen in CI)."""
    store = ObjectStore(tmp_path / "objects")
    store.put_bytes(HELLO)
    files = _staged(tmp_path / "staging", [b"new", HELLO])
    present: list[list[bool]] = []
    store.adopt_files(files, synced=lambda: present.append([f.path.exists() for f in files]))
    assert present == [[True, True]]
    assert sorted(store.iter_digests()) == sorted(f.digest for f in files)
    assert list((tmp_path / "staging").iterdir()) == []


EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_verify_bytes() -> None:
    verify_bytes(b"abc", "sha256:" + ABC, "blob")
    with pytest.raises(
        DigestMismatchError, match=rf"^blob: content hashes to sha256:{EMPTY}, want sha256:{ABC}$"
    ) as e:
        verify_bytes(b"", "sha256:" + ABC, "blob")
    assert (e.value.subject, e.value.expected, e.value.observed) == (
        "blob", "sha256:" + ABC, "sha256:" + EMPTY
    )
    with pytest.raises(FormatError, match=r"expected digest of blob"):
        verify_bytes(b"abc", ABC, "blob")


class _Counting:
    """A pyarrow filesystem whose input files count the bytes they deliver, and may deliver
    more than they list (a server that sends past its Content-Length)."""

    def __init__(self, fs: Any, extra: bytes = b"") -> None:
        self.fs, self.extra, self.delivered = fs, extra, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fs, name)

    def open_input_file(self, path: str) -> Any:
        outer, inner = self, self.fs.open_input_file(path)

        class File:
            def __enter__(self) -> File:
                return self

            def __exit__(self, *exc: object) -> None:
                inner.close()

            def size(self) -> int:
                return int(inner.size())

            def read(self, n: int) -> bytes:
                data = bytes(inner.read(n))
                if not data:  # past the end it lists
                    data, outer.extra = outer.extra[:n], outer.extra[n:]
                outer.delivered += len(data)
                return data

        return File()

    open_input_stream = open_input_file


def _remote_with(tmp_path: Path, data: bytes, under: str, extra: bytes = b"") -> Any:
    """A remote store whose object ``under`` holds ``data`` (counted as read)."""
    fs = _Counting(_pyarrow_fs(tmp_path), extra)
    store = ObjectStore.with_filesystem(fs, "bucket/objects")
    h = under.removeprefix("sha256:")
    fs.create_dir(f"bucket/objects/sha256/{h[:2]}/{h[2:4]}")
    with fs.open_output_stream(f"bucket/objects/sha256/{h[:2]}/{h[2:4]}/{h}") as out:
        out.write(data)
    return store, fs


@pytest.mark.parametrize("size", [0, 1, 1023, 1024, 1025, 3 * 1024 + 7])
def test_a_remote_read_streams_in_chunks_and_gives_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    import trajledger.ledger.store as store_module

    monkeypatch.setattr(store_module, "REMOTE_CHUNK", 1024)
    data = os.urandom(size)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    store, fs = _remote_with(tmp_path, data, digest)
    assert store.get(digest) == data
    assert store.get(digest, size=size, limit=size) == data
    assert store.get_verified(digest, size=size) == data
    assert fs.delivered == 3 * size


def test_a_remote_blob_larger_than_its_record_or_bound_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rev10: a remote blob was read whole into memory before it was hashed: an envelope
    # replaced in the bucket by a 50 GB object exhausted memory before the mismatch was found.
    import trajledger.ledger.store as store_module

    monkeypatch.setattr(store_module, "REMOTE_CHUNK", 1024)
    store, fs = _remote_with(tmp_path, os.urandom(100_000), HELLO_DIGEST)
    what = f"object {HELLO_DIGEST[:19]}… in bucket/objects"
    with pytest.raises(DigestMismatchError, match=f"^{what}: 100000 bytes, want 5$") as info:
        store.get(HELLO_DIGEST, size=5)  # the size a manifest lists
    assert info.value.expected == HELLO_DIGEST
    with pytest.raises(DigestMismatchError, match=r"100000 bytes, want 5$"):
        store.get_verified(HELLO_DIGEST, size=5)
    with pytest.raises(FormatError, match=f"^{what}: 100000 bytes, more than the 65536 it may"):
        store.get(HELLO_DIGEST, limit=1 << 16)  # a kind's bound: an envelope's
    assert fs.delivered == 0


def test_a_remote_blob_sending_more_than_it_lists_is_refused_as_soon_as_it_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trajledger.ledger.store as store_module

    monkeypatch.setattr(store_module, "REMOTE_CHUNK", 1024)
    store, fs = _remote_with(tmp_path, HELLO, HELLO_DIGEST, extra=os.urandom(100_000))
    with pytest.raises(DigestMismatchError, match=r"more bytes than the 5 listed$"):
        store.get(HELLO_DIGEST)
    assert fs.delivered <= 6


def _link_in_place(store: ObjectStore, rel: str, outside: Path) -> Path:
    """A directory of the store at ``rel`` replaced by a link to ``outside`` (what a member of
    a shared store's group can do, rev14); returns the link."""
    link = store.root / rel
    if link.is_dir():
        link.rename(link.with_name(link.name + ".aside"))
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    return link


def _writes(tmp_path: Path) -> dict[str, Callable[[ObjectStore, list[bytes]], object]]:
    from trajledger.ledger.store import MOVE_IN_SPLIT
    from trajledger.verify.digest import FileDigest

    def adopt_one(store: ObjectStore, blobs: list[bytes]) -> object:
        f = _staged(tmp_path / "staging", blobs[:1])[0]
        return store.adopt_file(f.path, FileDigest(f.path, f.size, f.sha256))

    def many(blobs: list[bytes]) -> list[bytes]:  # the first one's fan-out, on two threads
        return blobs + [b"more %d" % n for n in range(MOVE_IN_SPLIT)]

    return {
        "put_bytes": lambda store, blobs: store.put_bytes(blobs[0]),
        "put_stream": lambda store, blobs: store.put_stream(io.BytesIO(blobs[0])),
        "put_file": lambda store, blobs: store.put_file(_staged(tmp_path / "src", blobs)[0].path),
        "adopt_file": adopt_one,
        "adopt_files": lambda store, blobs: store.adopt_files(_staged(tmp_path / "st", blobs)),
        "adopt_files_threads": lambda store, blobs: store.adopt_files(
            _staged(tmp_path / "st2", many(blobs))),
    }


@pytest.mark.parametrize("level", ["sha256", "fan", "leaf"])
@pytest.mark.parametrize("write", ["put_bytes", "put_stream", "put_file", "adopt_file",
                                   "adopt_files", "adopt_files_threads"])
@pytest.mark.parametrize("size", [5, 3 << 20])
def test_no_write_goes_through_a_directory_swapped_for_a_link(
    tmp_path: Path, level: str, write: str, size: int
) -> None:
    """Every way a local store writes an object walks its directories by descriptors, none
    followed if it is a link: a store directory replaced by a link to a directory the user may
    write gets nothing (no object, no temp file), and the write is a StoreError naming the
    link and ``trajledger fsck`` (exit 3 at the command line). Before, each was followed."""
    store = ObjectStore(tmp_path / "objects")
    store.put_bytes(b"something already stored")
    data = os.urandom(size)
    h = hashlib.sha256(data).hexdigest()
    rel = {"sha256": "sha256", "fan": f"sha256/{h[:2]}", "leaf": f"sha256/{h[:2]}/{h[2:4]}"}
    outside = tmp_path / "insider"
    outside.mkdir()
    link = _link_in_place(store, rel[level], outside)
    with pytest.raises(StoreError, match=rf"^{link}: is a symbolic link \(to {outside}\) "
                       r"where trajledger keeps a directory of its own: .*'trajledger "
                       r"fsck'"):
        _writes(tmp_path)[write](store, [data])
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("remove", ["delete", "delete_unchanged"])
def test_no_removal_goes_through_a_directory_swapped_for_a_link(
    tmp_path: Path, remove: str
) -> None:
    """Erasure and ``gc`` remove an object by the same walk: a fan-out directory replaced by a
    link to one holding a file of the object's name leaves that file as it is."""
    store = ObjectStore(tmp_path / "objects")
    digest = store.put_bytes(HELLO)
    path = store.path_of(digest)
    mtime = path.stat().st_mtime
    outside = tmp_path / "insider"
    outside.mkdir()
    (outside / path.name).write_bytes(b"the insider's file")
    link = _link_in_place(store, f"sha256/{path.parent.parent.name}/{path.parent.name}", outside)
    with pytest.raises(StoreError, match=rf"^{link}: is a symbolic link"):
        store.delete(digest) if remove == "delete" else store.delete_unchanged(digest, mtime)
    assert [(p.name, p.read_bytes()) for p in outside.iterdir()] == [
        (path.name, b"the insider's file")]


def test_a_file_where_the_store_keeps_a_directory_is_refused(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path / "objects")
    h = hashlib.sha256(HELLO).hexdigest()
    (tmp_path / "objects" / "sha256").mkdir(parents=True)
    (tmp_path / "objects" / "sha256" / h[:2]).write_bytes(b"")
    with pytest.raises(StoreError, match=r"is not a directory where trajledger keeps"):
        store.put_bytes(HELLO)
    assert store.temp_files() == []
