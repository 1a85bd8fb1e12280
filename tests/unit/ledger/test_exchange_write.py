"""The bundle writer (``ledger.bundle_write.write_bundle``): the tar is what ``tarfile`` writes.

The writer streams each object once (read, hashed, compressed on a worker thread) and writes the
tar headers itself; its tar must be, byte for byte, what ``tarfile`` writes in ``w|`` pax mode
for the same members (the format readers and ``tar --zstd -x`` take), whatever the member sizes
around the 512-byte block and the 10,240-byte record; a stored object that changed is refused.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from trajledger.ledger.bundle_write import tar_header, write_bundle
from trajledger.ledger.encode import bundle_index_bytes
from trajledger.verify.bundle_index import BundleIndex, Member
from trajledger.verify.errors import DigestMismatchError


def _members(tmp_path: Path, sizes: list[int]) -> tuple[dict[str, bytes], dict[str, Path]]:
    small = {"checkpoint": b"c" * 100, "entries/0": b"e" * 512, "proofs/0.tlog-proof": b"p"}
    files = {}
    for n in sizes:
        data = os.urandom(n)
        name = hashlib.sha256(data).hexdigest()
        (tmp_path / name).write_bytes(data)
        files[f"objects/sha256/{name}"] = tmp_path / name
    return small, files


def _index(small: dict[str, bytes], files: dict[str, Path]) -> Any:
    members = [Member(n, len(b), hashlib.sha256(b).hexdigest()) for n, b in small.items()]
    members += [Member(n, p.stat().st_size, n.rsplit("/", 1)[1]) for n, p in files.items()]
    return BundleIndex("sha256:" + "0" * 64, "example.com/log", "vkey", "2025-01-01T00:00:00Z",
                       tuple(sorted(members, key=lambda m: m.name)))


def _tarfile_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


@given(name=st.text(min_size=1, max_size=120) | st.text("abc/_.-0123456789", min_size=95,
                                                        max_size=105),
       size=st.integers(0, 8**11 - 1) | st.integers(8**11 - 2, 8**12) | st.sampled_from(
           [0, 511, 512, 8**11 - 1, 8**11]))
def test_a_member_header_is_what_tarfile_builds(name: str, size: int) -> None:
    """The writer's own ustar block (ASCII names up to 100 characters, sizes below 8**11) and
    its fall-back to ``tarfile`` (longer or non-ASCII names, larger sizes: a pax record)."""
    assert tar_header(name, size) == _tarfile_header(name, size)


def _tarfile_reference(index: Any, small: dict[str, bytes], files: dict[str, Path]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [("bundle.json", bundle_index_bytes(index)),
                           *((m.name, small[m.name] if m.name in small
                              else files[m.name].read_bytes()) for m in index.members)]:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("sizes", [[], [0], [1, 511, 512, 513], [(1 << 20) + 7, 3 << 20, 10239]])
def test_the_tar_is_what_tarfile_writes(tmp_path: Path, sizes: list[int]) -> None:
    small, files = _members(tmp_path, sizes)
    index = _index(small, files)
    out = tmp_path / "b.tar.zst"
    told: list[int] = []
    written = write_bundle(out, index, small, files, told.append)
    assert written == out.stat().st_size
    with open(out, "rb") as fh:
        tar = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True).read()
    assert tar == _tarfile_reference(index, small, files)
    assert sum(told) == sum(m.size for m in index.members)


def test_an_object_that_changed_in_the_store_is_refused(tmp_path: Path) -> None:
    small, files = _members(tmp_path, [1000])
    index = _index(small, files)
    path = next(iter(files.values()))
    path.write_bytes(b"x" * 1000)  # same size, other bytes
    out = tmp_path / "b.tar.zst"
    with pytest.raises(DigestMismatchError, match=f"object sha256:{path.name} in the store "
                                                  "is 1000 bytes hashing to sha256:"):
        write_bundle(out, index, small, files, lambda _n: None)
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == [path.name]


@pytest.mark.parametrize("bad", [0, 1, 2])
def test_a_changed_object_hashed_ahead_is_refused(tmp_path: Path, bad: int) -> None:
    """Objects of 64 KiB or more are hashed on a thread of their own and checked one object
    later (xfer44): a changed one is refused all the same, first, middle or last, one chunk or
    several, and nothing is written."""
    small, files = _members(tmp_path, [70_000, (1 << 20) * 2 + 5, 65_536])
    index = _index(small, files)
    path = sorted(files.items())[bad][1]
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # same size, other bytes
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    out = tmp_path / "b.tar.zst"
    with pytest.raises(DigestMismatchError, match=f"object sha256:{path.name} in the store "
                                                  f"is {len(data)} bytes hashing to sha256:"):
        write_bundle(out, index, small, files, lambda _n: None)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in files.values())


def test_large_objects_are_hashed_off_the_writing_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writing thread (read, compressor input, output) was the export's critical path, the
    zstd workers idle two thirds of the time (xfer44): an object of 64 KiB or more is hashed
    on another thread while it is compressed; a small one where it is read. Same bytes."""
    import threading

    small, files = _members(tmp_path, [100, 65_536, (1 << 20) * 3])
    index = _index(small, files)
    first = tmp_path / "first.tar.zst"
    write_bundle(first, index, small, files, lambda _n: None)
    threads: dict[int, set[str]] = {}
    real = hashlib.sha256

    class Seen:
        def __init__(self, data: bytes = b"") -> None:
            self.h = real(data)

        def update(self, data: bytes) -> None:
            threads.setdefault(len(data), set()).add(threading.current_thread().name)
            self.h.update(data)

        def hexdigest(self) -> str:
            return self.h.hexdigest()

    monkeypatch.setattr(hashlib, "sha256", Seen)  # (every module's: the writer's and ``hashing``'s)
    out = tmp_path / "b.tar.zst"
    write_bundle(out, index, small, files, lambda _n: None)
    assert out.read_bytes() == first.read_bytes()
    assert {n for n, names in threads.items() if names != {"MainThread"}} == {65_536, 1 << 20}


def test_the_bundle_does_not_depend_on_the_number_of_compression_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same members give the same bytes with 1, 2 or 3 zstd workers (`ZSTD_THREADS` is a
    matter of time only): large enough members that the work is cut into several jobs."""
    import trajledger.ledger.bundle_write as bundle_write

    small: dict[str, bytes] = {"checkpoint": b"c" * 100}
    files: dict[str, Path] = {}
    for data in (os.urandom(9 << 20), bytes(range(256)) * (12 << 12), os.urandom(5 << 20)):
        name = hashlib.sha256(data).hexdigest()
        (tmp_path / name).write_bytes(data)
        files[f"objects/sha256/{name}"] = tmp_path / name
    index = _index(small, files)
    written = []
    for workers in (1, 2, 3):
        monkeypatch.setattr(bundle_write, "ZSTD_THREADS", workers)
        out = tmp_path / f"b{workers}.tar.zst"
        write_bundle(out, index, small, files, lambda _n: None)
        written.append(out.read_bytes())
    assert written[0] == written[1] == written[2]
    assert len(written[0]) < sum(m.size for m in index.members)


def test_the_compressor_hands_the_file_pieces_of_up_to_a_mebibyte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its output buffer is `WRITE_SIZE` (1 MiB), not zstd's 128 KiB: each piece is a call
    into Python (the file's sink); 2,374 calls for the bench's 300 MB, now about 300
    (xfer44). The bundle is the same bytes as with the default buffer."""
    import trajledger.ledger.bundle_write as bundle_write

    small: dict[str, bytes] = {"checkpoint": b"c" * 100}
    data = os.urandom(6 << 20)
    (tmp_path / (name := hashlib.sha256(data).hexdigest())).write_bytes(data)
    files = {f"objects/sha256/{name}": tmp_path / name}
    index = _index(small, files)
    sizes: list[int] = []
    real = bundle_write.SyncBehind.wrote  # (told of each piece written to the file)

    def counted(self: Any, n: int) -> None:
        sizes.append(n)
        real(self, n)

    monkeypatch.setattr(bundle_write.SyncBehind, "wrote", counted)
    out = tmp_path / "b.tar.zst"
    write_bundle(out, index, small, files, lambda _n: None)
    assert sum(sizes) == out.stat().st_size
    first = len(sizes)  # (how many depends on when zstd's two workers finish: a CI run gave 10)
    monkeypatch.setattr(bundle_write, "WRITE_SIZE", zstandard.COMPRESSION_RECOMMENDED_OUTPUT_SIZE)
    again = tmp_path / "again.tar.zst"
    write_bundle(again, index, small, files, lambda _n: None)
    assert again.read_bytes() == out.read_bytes()
    assert max(sizes[:first]) > zstandard.COMPRESSION_RECOMMENDED_OUTPUT_SIZE
    assert first * 2 < len(sizes) - first, (first, len(sizes) - first)  # (48 or more pieces)


def test_the_tar_does_not_depend_on_the_compression_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ZSTD_LEVEL` (1 since the xfer43 pass, 3 before) changes the bundle file's size, never
    the tar inside it: the same members at levels 1 and 3 decompress to the same bytes, and
    the level-1 file is the larger, as the trade it makes says."""
    import trajledger.ledger.bundle_write as bundle_write

    small: dict[str, bytes] = {"checkpoint": b"c" * 100, "entries/0": b'{"a": 1}\n' * 500}
    files: dict[str, Path] = {}
    for data in (os.urandom(3 << 20), b"".join(b"%d," % i for i in range(400_000))):
        name = hashlib.sha256(data).hexdigest()
        (tmp_path / name).write_bytes(data)
        files[f"objects/sha256/{name}"] = tmp_path / name
    index = _index(small, files)
    tars, sizes = [], []
    for level in (1, 3):
        monkeypatch.setattr(bundle_write, "ZSTD_LEVEL", level)
        out = tmp_path / f"l{level}.tar.zst"
        write_bundle(out, index, small, files, lambda _n: None)
        sizes.append(out.stat().st_size)
        with out.open("rb") as f:
            tars.append(zstandard.ZstdDecompressor().stream_reader(f).read())
    assert tars[0] == tars[1]
    assert sizes[0] > sizes[1]


def test_an_export_whose_pass_to_the_disk_failed_is_refused_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fs.SyncBehind` (the bundle's data sent to the disk while it is compressed): a failed
    ``fdatasync`` is an error the final ``fsync`` would not see again; the export refuses."""
    from trajledger.ledger import fs

    def fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", fdatasync, raising=False)
    monkeypatch.setattr(fs.SyncBehind, "EVERY", 1)
    (tmp_path / "store").mkdir()
    small, files = _members(tmp_path / "store", [3 << 20])
    index = _index(small, files)
    out = tmp_path / "out" / "b.tar.zst"
    out.parent.mkdir()
    with pytest.raises(OSError, match="Input/output error"):
        write_bundle(out, index, small, files, lambda _n: None)
    assert list(out.parent.iterdir()) == []
