"""Evidence read straight from a ledger directory on local disk.

Scope: `LedgerDirEvidence`, `verify.evidence.Evidence` over a ledger directory (stdlib only:
tiles, entry bundles and the object store are plain files); `DirBlobs`, a local object
directory; `read_handovers`, a log's key handover notes; `read_regular`, the one way the
log's files are read (a FIFO or a device planted there is refused). Loaded by those who read
a ledger directory (trajledger itself), never by ``python -m verify BUNDLE``.
Non-scope: deciding anything. Every byte returned here is checked by the caller against a
signature, a digest or a Merkle proof before it is believed.
"""

from __future__ import annotations

import errno
import os
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from .checkpoint import Checkpoint
from .compact import CompactRange
from .digest import parse_digest
from .errors import FormatError
from .evidence import read_blob_file
from .log_key import HANDOVER_DIR
from .note import Note
from .tiles import TileReader

__all__ = ["Blobs", "DirBlobs", "LedgerDirEvidence", "open_regular", "read_handovers",
           "read_regular"]

MAX_NOTE = 1 << 20
"""The most bytes a signed note (a checkpoint, a key handover) may hold."""


_SPECIAL = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(
    os, "O_BINARY", 0)


def _regular_fd(path: str | Path) -> int:
    """`open_regular`'s descriptor (``O_NONBLOCK`` left set: it changes nothing for a regular
    file, open(2))."""
    fd = os.open(path, _FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            return fd
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        what = next((w for is_kind, w in _SPECIAL if is_kind(mode)), "a special file")
        raise OSError(errno.EINVAL, f"not a regular file but {what}", str(path))
    except BaseException:
        os.close(fd)
        raise


def open_regular(path: str | Path) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file (or a symbolic link to one): opened
    without blocking (a FIFO's open waits for a writer), then `os.fstat`: a FIFO, a device
    (``/dev/zero`` never ends), a socket or a directory an insider planted in a ledger is
    refused before a byte is read (docs/SECURITY.md, review redo21).

    Raises:
        OSError: it cannot be opened, or is not a regular file: `IsADirectoryError`, else
            ``EINVAL`` with a ``strerror`` that says what it is.
    """
    return os.fdopen(_regular_fd(path), "rb")


def read_regular(path: str | Path, limit: int = -1) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``), as `open_regular` opens it
    (a log's tile: one open, one fstat and two reads, as ``Path.read_bytes``).

    Raises:
        OSError: as `open_regular`, or a read error.
    """
    fd = _regular_fd(path)
    try:
        parts, n = [], 0
        while chunk := os.read(fd, 1 << 16 if limit < 0 else min(limit - n, 1 << 16)):
            parts.append(chunk)
            n += len(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def read_handovers(log_dir: Path) -> list[bytes]:
    """The key handover notes of a log directory, ``key-handovers/1``, ``2``, ... in order, up
    to the first number without a file (unverified).

    Raises:
        FormatError: a file cannot be read, or is larger than a checkpoint may be.
    """
    out: list[bytes] = []
    directory = log_dir / HANDOVER_DIR
    while True:
        path = directory / str(len(out) + 1)
        try:
            data = read_regular(path, MAX_NOTE + 1)
        except FileNotFoundError:
            return out
        except OSError as e:
            raise FormatError(f"key handover {path}: cannot read: {e.strerror}") from e
        if len(data) > MAX_NOTE:
            raise FormatError(f"key handover {path}: larger than {MAX_NOTE} bytes")
        out.append(data)


class Blobs(Protocol):
    """Where blobs are read from: a local object directory, or (in ``ledger``) any store."""

    def blob(self, digest: str) -> bytes | None:
        """The blob's bytes, or None when absent."""
        ...

    def has_blob(self, digest: str) -> bool:
        """True when the blob is present."""
        ...

    def blob_path(self, digest: str) -> Path | None:
        """A local file holding the blob (for streaming hashes), or None when absent."""
        ...

    def blob_size(self, digest: str) -> int | None:
        """The stored size of a blob, or None when absent."""
        ...


class DirBlobs:
    """Blobs in a local ``objects/sha256/<2>/<2>/<64>`` directory."""

    def __init__(self, objects: Path) -> None:
        """Read blobs under ``objects``."""
        self.objects = objects

    def blob_path(self, digest: str) -> Path | None:
        """Path of a blob in the object store, when present."""
        h = parse_digest(digest, "blob digest")
        path = self.objects / "sha256" / h[:2] / h[2:4] / h
        return path if path.is_file() else None

    def has_blob(self, digest: str) -> bool:
        """True when the blob file exists."""
        return self.blob_path(digest) is not None

    def blob_size(self, digest: str) -> int | None:
        """The blob file's size, or None when absent."""
        path = self.blob_path(digest)
        return None if path is None else path.stat().st_size

    def blob(self, digest: str) -> bytes | None:
        """The blob's bytes, or None when absent."""
        return read_blob_file(self.blob_path(digest), digest)


class LedgerDirEvidence:
    """Evidence read straight from a ledger directory (``ledger.toml``, ``log/``, objects)."""

    def __init__(self, root: Path, blobs: Blobs | None = None, *, note: bytes | None = None
                 ) -> None:
        """Open a ledger directory for reading.

        Args:
            root: the ledger directory (its ``log/`` is read directly).
            blobs: where blobs come from; default the local store named in ``ledger.toml``.
                trajledger passes a reader over its configured store (``s3://`` included).
            note: the signed checkpoint to read the log at (default: ``log/checkpoint``).

        Raises:
            FormatError: no readable checkpoint, or (without ``blobs``) a store that is not a
                local directory.
        """
        self.root = root
        self.log_dir = root / "log"
        if blobs is None:
            store = "objects"
            cfg = root / "ledger.toml"
            if cfg.is_file():
                try:
                    doc = tomllib.loads(cfg.read_text("utf-8"))
                except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
                    raise FormatError(f"{cfg}: not valid TOML: {e}") from e
                except RecursionError as e:
                    raise FormatError(f"{cfg}: not valid TOML: nested too deeply") from e
                section = doc.get("ledger", {})
                if not isinstance(section, dict):
                    raise FormatError(f"{cfg}: [ledger] must be a table")
                store = str(section.get("store", "objects"))
            if "://" in store:
                raise FormatError(
                    f"{cfg}: the store is {store}; the standalone verifier reads local "
                    "ledgers only (export a bundle, or verify through trajledger)"
                )
            blobs = DirBlobs(root / store)
        self.blobs = blobs
        self._note = note if note is not None else self._read(
            self.log_dir / "checkpoint", "log checkpoint"
        )
        try:
            self.size = Checkpoint.from_text(Note.from_bytes(self._note).text).size
        except FormatError as e:
            raise FormatError(f"{self.log_dir / 'checkpoint'}: {e}") from e
        self._tiles = TileReader(self._fetch, self.size, cache_tiles=256)

    @staticmethod
    def _read(path: Path, what: str) -> bytes:
        try:
            return read_regular(path)
        except FileNotFoundError as e:
            raise FormatError(f"{what} {path}: missing") from e
        except OSError as e:
            raise FormatError(f"{what} {path}: cannot read: {e.strerror}") from e

    def _fetch(self, rel: str) -> bytes:
        return read_regular(self.log_dir / rel)

    def checkpoint_note(self) -> bytes:
        """The log's ``checkpoint`` file."""
        return self._note

    def entries(self) -> Iterator[tuple[int, bytes]]:
        """Every entry of the checkpoint's tree, read bundle by bundle."""
        step = 256
        for start in range(0, self.size, step):
            end = min(start + step, self.size)
            for i, e in enumerate(self._tiles.entries(start, end)):
                yield start + i, e

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """A proof built from the hash tiles."""
        return self._tiles.inclusion_proof(index, size)

    def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]:
        """A consistency proof built from the hash tiles."""
        return self._tiles.consistency_proof(old_size, new_size)

    def blob_path(self, digest: str) -> Path | None:
        """A local file holding the blob, when present."""
        return self.blobs.blob_path(digest)

    def has_blob(self, digest: str) -> bool:
        """True when the blob is present."""
        return self.blobs.has_blob(digest)

    def blob_size(self, digest: str) -> int | None:
        """The blob's stored size, or None when absent."""
        return self.blobs.blob_size(digest)

    def omitted(self, digest: str) -> bool:
        """A ledger directory omits nothing."""
        return False

    def key_handovers(self) -> list[bytes]:
        """The files ``log/key-handovers/1``, ``2``, ... (up to the first one missing).

        Raises:
            FormatError: one cannot be read.
        """
        return read_handovers(self.log_dir)

    def extension(self) -> CompactRange | None:
        """None: a ledger directory proves any entry from its tiles."""
        return None

    def blob(self, digest: str) -> bytes | None:
        """The blob's bytes, or None when absent."""
        return self.blobs.blob(digest)
