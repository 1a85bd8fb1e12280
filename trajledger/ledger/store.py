"""Content-addressed object store.

Scope: blobs named by the SHA-256 of their bytes, at ``objects/sha256/<2 hex>/<2 hex>/<64 hex>``,
written once. Local directories are written durably with the OS (temp file
``objects/sha256/.tmp-<host>-<pid>-<random>``, fsync, rename, directory fsync); a put of an object
whose stored bytes do not hash to its name replaces it atomically, and temp files of killed
writers are removed by `ObjectStore.drop_temp_files` (only those no live writer can own). Any
other location (``s3://``, ``gs://``, ...) goes through ``pyarrow.fs`` (``ledger.remote``),
imported only then: a blob is hashed before it is uploaded, straight to its final key (no
temporary objects), and hashed again as it is sent (removed if the source changed); an object
already at the key is kept only when it reads back with the digest, and every read of a remote
blob is checked against its digest, because whoever can write the bucket can change it.

Non-scope: what the blobs mean. Reading verified bytes of a local store is the caller's request
(`ObjectStore.get_verified`), because hashing a large blob twice is a real cost.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import IO, Any

from trajledger.verify.digest import (
    CHUNK,
    DIGEST_PREFIX,
    HEX64,
    FileDigest,
    digest_bytes,
    hash_file,
    parse_digest,
)
from trajledger.verify.errors import DigestMismatchError, FormatError
from trajledger.verify.evidence import MAX_BLOB_READ

from .errors import StoreError, next_step
from .fs import TMP_PREFIX, fsync_dir, is_stale, open_dirs_below, sync_paths, temp_name
from .hashing import copy_hashing
from .store_sink import DirectSink

__all__ = ["REMOTE_CHUNK", "ObjectStore", "verify_bytes"]

REMOTE_CHUNK = 8 << 20
"""Read size for remote blobs (few large requests; a whole-object read is slower)."""

_SMALL = 1 << 16
"""A local blob smaller than this (an envelope, a manifest) is read in one call, no file object."""


def _read_local(path: str) -> bytes:
    """The bytes of a local file: a small one in one ``read`` (and a ``pread`` of one byte
    past it that finds the end), a larger one whole, in one read sized by the file. A FIFO
    planted in the store does not block the open (``O_NONBLOCK``: nothing for a regular file)
    and fails the ``pread``; a device (``/dev/zero`` never ends) is refused before it is read
    whole (review redo21)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        data = os.read(fd, _SMALL)
        if len(data) == _SMALL or os.pread(fd, 1, len(data)):
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", path)
            os.lseek(fd, 0, os.SEEK_SET)
            with open(fd, "rb", buffering=0, closefd=False) as f:
                data = f.readall()
        return data
    finally:
        os.close(fd)


def verify_bytes(data: bytes, expected: str, subject: str) -> None:
    """Check that ``data`` hashes to the digest string ``expected``.

    Raises:
        FormatError: ``expected`` is not a digest string.
        DigestMismatchError: the bytes hash to something else.
    """
    parse_digest(expected, f"expected digest of {subject}")
    _refuse_other(subject, digest_bytes(data), expected)


def _refuse_other(subject: str, observed: str, expected: str | None) -> None:
    """Raise `DigestMismatchError` when ``expected`` is given and is not ``observed``."""
    if expected is not None and observed != expected:
        raise DigestMismatchError(
            f"{subject}: content hashes to {observed}, want {expected}",
            subject=subject,
            expected=expected,
            observed=observed,
        )


class ObjectStore:
    """A write-once blob store under one root (a local directory or a pyarrow.fs URI)."""

    def __init__(self, root: str | Path, *, durable: bool = True) -> None:
        """Open a store. Nothing is created until the first write.

        Args:
            root: a local directory, or a URI pyarrow.fs understands (``s3://bucket/prefix``).
            durable: fsync each write (turn off only for throwaway stores).
        """
        self.durable = durable
        root_s = str(root)
        self._fs: Any = None
        if "://" in root_s and not root_s.startswith("file://"):
            from .remote import open_filesystem

            self._fs, self._prefix = open_filesystem(root_s)
            self.root = Path(self._prefix)
        else:
            self.root = Path(root_s.removeprefix("file://"))
            self._prefix = str(self.root)

    @classmethod
    def with_filesystem(cls, fs: Any, prefix: str) -> ObjectStore:
        """A store on an explicit ``pyarrow.fs.FileSystem`` (tests use the mock filesystem)."""
        store = cls.__new__(cls)
        store.durable = True
        store._fs = fs
        store._prefix = prefix.rstrip("/")
        store.root = Path(store._prefix)
        return store

    def _rel(self, digest: str) -> str:
        h = parse_digest(digest, "object digest")
        return f"sha256/{h[:2]}/{h[2:4]}/{h}"

    @property
    def is_local(self) -> bool:
        """True for a store on the local disk (blobs have paths)."""
        return self._fs is None

    def path_of(self, digest: str) -> Path:
        """Local path of a blob (local stores only)."""
        if self._fs is not None:
            raise StoreError("path_of: the store is not on a local disk")
        return self.root / self._rel(digest)

    def _location(self, digest: str) -> str:
        """The blob's path on the local disk, or its key in the remote filesystem; a string,
        so that the hot reads of a local store (`exists`, `size`, `get`) build no `Path`."""
        return f"{self._prefix}/{self._rel(digest)}"

    # -- writing -------------------------------------------------------------------------------

    def put_bytes(self, data: bytes) -> str:
        """Store ``data``; returns its digest. Storing the same bytes twice is a no-op.

        On a local disk, an object already stored under that digest whose bytes are not
        ``data`` (damaged or planted) is replaced atomically.

        Raises:
            StoreError: the store cannot be written (no temp file is left behind).
        """
        digest = digest_bytes(data)
        if self._fs is not None:
            self._remote_put(digest, len(data), lambda: io.BytesIO(data))
            return digest
        final = self.path_of(digest)
        if _holds(final, data):
            return digest
        try:
            with _Temp(self, keep=True) as tmp:
                _write_all(tmp.fd, data)
                if self.durable:
                    os.fsync(tmp.fd)
                os.fchmod(tmp.fd, 0o444)
                tmp.install(digest)
        except OSError as e:
            raise StoreError(f"object {digest}: cannot write: {e.strerror or e}{next_step(e)}"
                             ) from e
        return digest

    def _open_dir(self, parts: Sequence[str], *, at: int | None = None, base: str = "",
                  made: set[str] | None = None, make: bool = True) -> int:
        """A descriptor of the store's directory ``parts`` (``sha256``, its two fan-out
        levels), opened one component at a time relative to the last, none followed if it is
        a link (``O_NOFOLLOW | O_DIRECTORY``), from ``at`` (a descriptor of the directory
        ``base``) or else from the root (the store's location as configured: followed). A
        missing component is made (its parent's path added to ``made``, when given, for the
        caller to make durable), unless ``make`` is false (then FileNotFoundError). Whoever
        can write the store cannot have a writer write through a fan-out directory they
        replaced by a link to a directory of theirs (rev14).

        Raises:
            StoreError: a component is a symbolic link, or not a directory.
            OSError: a directory cannot be opened or made.
        """
        if at is not None:
            return open_dirs_below(at, base, parts, StoreError, make=make, made=made)
        try:
            root = os.open(self._prefix, _ROOT)
        except FileNotFoundError:
            if not make:
                raise
            os.makedirs(self._prefix, exist_ok=True)
            root = os.open(self._prefix, _ROOT)
        try:
            return open_dirs_below(root, self._prefix, parts, StoreError, make=make, made=made)
        finally:
            os.close(root)

    def put_file(
        self, path: str | os.PathLike[str], *, names: set[Path] | None = None,
        opened: Callable[[os.stat_result], None] | None = None,
    ) -> FileDigest:
        """Copy a file into the store, hashing while copying (one read of the source).

        Args:
            path: the file.
            names: as `put_stream`.
            opened: given the ``fstat`` of the file opened, before it is read (on a local
                store): the caller's check that it is the file it listed (`runner.settled`).

        Raises:
            StoreError: the source cannot be read, is not a regular file (rev33: a FIFO would
                block the read for good, ``/dev/zero`` fill the store), or the store cannot
                be written.
        """
        try:  # (not blocked by a FIFO put at the path since it was listed: refused below)
            src = open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb", buffering=0)  # noqa: SIM115
        except OSError as e:
            raise StoreError(f"{path}: cannot read: {e.strerror}") from e
        with src:
            if not stat.S_ISREG((st := os.fstat(src.fileno())).st_mode):  # FIFO, /dev/zero
                raise StoreError(f"{path}: not a regular file now (a FIFO or a device put at its "
                                 "path, or a link to one); nothing was stored from it")
            if opened is not None:
                opened(st)
            if self._fs is not None:  # hashed, then uploaded, from the file opened (the lead)
                return self._remote_put_file(Path(path), str(path), opened=src)
            return self._put_local(src, str(path), None, names, st.st_size < CHUNK)

    def sync_names(self, names: set[Path]) -> None:
        """Make the names of objects stored with ``names=`` durable: fsync every directory
        that gained one, all at once (`fs.sync_paths`), instead of one after each object.

        An object's bytes were made durable before it got its name, as always; until this
        returns, a crash may lose the names (the objects are then not stored, never stored
        with other bytes). A caller records nothing that refers to the objects before it.

        Raises:
            StoreError: a directory cannot be opened or fsynced.
        """
        try:
            sync_paths(sorted(names, key=str))  # (not Path's slow comparison)
        except OSError as e:
            raise StoreError(f"{e.filename or self.root}: cannot make the stored objects' "
                             f"names durable: {e.strerror or e}") from e

    def put_stream(
        self, stream: IO[bytes], *, name: str = "stream", expect: str | None = None,
        names: set[Path] | None = None,
    ) -> FileDigest:
        """Store everything read from ``stream``, hashing while copying; constant memory.

        On a local disk, an object already stored under the digest whose bytes do not hash to
        it (damaged or planted) is replaced atomically.

        Args:
            stream: the bytes to store.
            name: what to call the source in messages.
            expect: the digest the bytes must have; otherwise nothing is stored.
            names: when given, the directory that gains the object's name (a durable local
                store) is added to it instead of being fsynced here: the caller makes them all
                durable at once (`sync_names`) before it records anything that refers to the
                object. Many objects stored at once pay one pass for their names.

        Raises:
            StoreError: the source cannot be read or the store cannot be written.
            DigestMismatchError: the bytes do not hash to ``expect``.
        """
        if self._fs is None:
            return self._put_local(stream, name, expect, names, False)
        # Remote: spool to a local temporary file (hashing), then upload under the digest.
        with tempfile.NamedTemporaryFile(prefix=TMP_PREFIX) as spool:
            try:
                while chunk := stream.read(CHUNK):
                    spool.write(chunk)
                spool.flush()
            except OSError as e:
                raise StoreError(f"{name}: cannot store: {e.strerror or e}") from e
            return self._remote_put_file(Path(spool.name), name, expect=expect)

    def _put_local(self, stream: IO[bytes], name: str, expect: str | None,
                   names: set[Path] | None, small: bool) -> FileDigest:
        """`put_stream` on a local disk. ``small``: a file under one chunk when opened, written
        through the descriptor its temp file was made with, in the page cache (direct writes
        are whole chunks), not opened again (att47 finding 1). Hashed bytes = bytes written."""
        try:
            with _Temp(self, keep=small) as tmp:
                source = (stream if isinstance(stream, io.BufferedIOBase | io.RawIOBase)
                          else stream.read)
                with DirectSink(tmp.open, direct=self.durable and not small) as out:
                    digest, size = copy_hashing(
                        source, partial(_write_all, tmp.fd) if small else out.write, CHUNK)
                    fd = tmp.fd if small else out.fd
                    if self.durable:
                        os.fsync(fd)
                    os.fchmod(fd, 0o444)
                h = digest[len(DIGEST_PREFIX):]
                _refuse_other(name, digest, expect)
                if not _intact(f"{self._prefix}/sha256/{h[:2]}/{h[2:4]}/{h}", size, h):
                    tmp.install(digest, names)
        except OSError as e:
            raise StoreError(f"{name}: cannot store: {e.strerror or e}") from e
        return FileDigest(Path(name), size, h)

    # -- remote writing --------------------------------------------------------------------------

    def _remote_put_file(self, path: Path, name: str, expect: str | None = None,
                         opened: IO[bytes] | None = None) -> FileDigest:
        """Hash a local file, then upload it under its digest (unless present); with ``expect``,
        only when it hashes to that. Given ``opened`` (`put_file`'s, checked as a regular
        file), both read that file, not what the path names by then."""
        def source() -> io.BufferedReader:
            if opened is None:
                return open(path, "rb")  # closed by its caller
            os.lseek(opened.fileno(), 0, os.SEEK_SET)
            return os.fdopen(os.dup(opened.fileno()), "rb")

        try:
            with source() as src:
                digest, size = copy_hashing(src, lambda _: None)
        except OSError as e:
            raise StoreError(f"{name}: cannot read: {e.strerror}") from e
        _refuse_other(name, digest, expect)

        self._remote_put(digest, size, source)
        return FileDigest(Path(name), size, digest.removeprefix(DIGEST_PREFIX))

    def adopt_file(self, path: str | os.PathLike[str], known: FileDigest) -> FileDigest:
        """Move a file whose digest is already known (hashed while it was written) into the store.

        On a local store the file is renamed into place (no copy, no second read); it must be
        on the store's filesystem and is consumed. Elsewhere it is copied (and hashed on the
        way, which must agree). Storing bytes that are already there is a no-op.

        Raises:
            StoreError: the file cannot be moved or copied, or its bytes do not match ``known``.
        """
        if self._fs is not None:
            got = self.put_file(path)
            if (got.size, got.sha256) != (known.size, known.sha256):
                raise StoreError(
                    f"{path}: stored as {got.digest} ({got.size} bytes), want {known.digest} "
                    f"({known.size} bytes): the file changed after it was written"
                )
            return got
        src = Path(path)
        final = self.path_of(known.digest)
        try:
            size = src.stat().st_size
            if size != known.size:
                raise StoreError(
                    f"{src}: {size} bytes, want {known.size}: the file changed after it was written"
                )
            if _intact(final, known.size, known.sha256):
                src.unlink()
                return FileDigest(Path(path), known.size, known.sha256)
            if self.durable:
                fd = os.open(src, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.chmod(src, 0o444)
            h = known.sha256
            leaf = self._open_dir(("sha256", h[:2], h[2:4]))
            try:
                try:
                    os.replace(src, h, dst_dir_fd=leaf)
                except OSError as e:
                    if e.errno != errno.EXDEV:  # another filesystem: copy instead
                        raise
                    return self._adopt_by_copy(src, known)
                if self.durable:
                    os.fsync(leaf)
            finally:
                os.close(leaf)
        except OSError as e:
            raise StoreError(f"{src}: cannot move into the store: {e.strerror or e}") from e
        return FileDigest(Path(path), known.size, known.sha256)

    def adopt_files(
        self, files: Sequence[FileDigest], advance: Callable[[int], None] = lambda _n: None,
        *, synced: Callable[[], None] | None = None, flush: Callable[[], None] | None = None,
    ) -> None:
        """Move many files whose digests are known into the store, with one durability pass.

        `adopt_file` for a batch (an import's objects, staged on the store's filesystem and
        hashed as they were written): instead of a file fsync and a directory fsync per
        object, every file's data is fsynced at once (`fs.sync_paths`: concurrently), then
        every file is renamed into place (on two threads from `MOVE_IN_SPLIT` files on), then
        every directory that gained a name is fsynced at once. The data is durable before any
        object has its name, so a crash never leaves a named object with other bytes; a crash
        before the last pass leaves at most objects that no log entry names yet (``trajledger
        gc`` collects orphans). ``advance(n)`` is told of each file's bytes once it is in
        place; ``synced``, when given, waits for the files' data pass started earlier
        (`fs.sync_paths_ahead`, while the caller verified them) instead of running it here; it
        is waited for first, before any staged file is moved or removed. ``flush``, when
        given, makes the whole file system durable (`fs.FileSystemSync.sync`: staging and
        store on one file system) and stands for the directory pass. A staged file already
        read-only (created so) keeps its mode: no ``chmod``. Elsewhere (a remote store, or a
        store that does not fsync) each goes through `adopt_file`.

        Raises:
            StoreError: a file cannot be moved, or its size is not the known one.
        """
        if self._fs is not None or not self.durable:
            for f in files:
                self.adopt_file(f.path, f)
                advance(f.size)
            return
        # Paths as strings: pathlib's objects cost more than the system calls here (thousands
        # of objects: their hashing in sets, ``parent``, joining).
        todo: list[tuple[FileDigest, str, bool]] = []
        try:
            if synced is not None:
                # (before any staged file is removed: the pass ahead opens each one by name)
                synced()
            for f in files:
                final = self._location(f.digest)
                st = os.stat(f.path)
                if st.st_size != f.size:
                    raise StoreError(f"{f.path}: not {f.size} bytes: the file changed after it "
                                     "was written")
                if _intact(final, f.size, f.sha256):
                    os.unlink(f.path)
                    advance(f.size)
                else:
                    todo.append((f, final, stat.S_IMODE(st.st_mode) != 0o444))
            # (the data first, then the names, then the directories holding the names)
            if synced is None:
                sync_paths([f.path for f, _, _ in todo])
            named: set[str] = set()
            made: set[str] = set()
            if len(todo) < MOVE_IN_SPLIT:
                self._move_in(todo, named, made, advance)
            else:
                # Two halves by the digest's first hex digit: each its own fan-out directories
                # (no two threads make the same one); the system calls leave the GIL.
                high = [t for t in todo if t[0].sha256 >= "8"]
                with ThreadPoolExecutor(1, thread_name_prefix="trajledger-move-in") as pool:
                    other = pool.submit(self._move_in, high, set(), set(), lambda _n: None)
                    self._move_in([t for t in todo if t[0].sha256 < "8"], named, made,
                                  advance)
                    high_named, high_made = other.result()
                named |= high_named
                made |= high_made
                advance(sum(f.size for f, _, _ in high))
            if flush is not None:
                flush()
            else:
                sync_paths(sorted(named | made))
        except OSError as e:
            # Name the file (and, for a rename, where it was going): the error alone does not.
            where = " -> ".join(str(n) for n in (e.filename, e.filename2) if n is not None)
            raise StoreError(f"{where or self.root}: cannot move into the store: "
                             f"{e.strerror or e}") from e

    def _move_in(
        self, todo: Sequence[tuple[FileDigest, str, bool]], named: set[str], made: set[str],
        advance: Callable[[int], None],
    ) -> tuple[set[str], set[str]]:
        """Rename each staged file (its data already durable) to its place, read-only (made so
        when its flag says it is not), making its directories (walked by descriptors, none
        followed if it is a link: `_open_dir`; the first level's kept open for the batch);
        adds to ``named`` the
        directories that gained a name and to ``made`` the parents of those made
        (`adopt_files`, which fsyncs them all); returns both."""
        under = f"{self._prefix}/sha256"
        sha = self._open_dir(("sha256",), made=made)
        fans: dict[str, int] = {}
        try:
            for f, final, writable in todo:
                if writable:
                    os.chmod(f.path, 0o444)
                h = f.sha256
                fan = fans.get(h[:2])
                if fan is None:
                    fan = fans[h[:2]] = self._open_dir((h[:2],), at=sha, base=under, made=made)
                leaf = self._open_dir((h[2:4],), at=fan, base=f"{under}/{h[:2]}", made=made)
                try:
                    os.replace(f.path, h, dst_dir_fd=leaf)
                except OSError as e:
                    if e.errno != errno.EXDEV:
                        raise OSError(e.errno, e.strerror, f.path, None, final) from e
                    self._adopt_by_copy(f.path, f)  # another filesystem: copied, made durable
                else:
                    named.add(final.rpartition("/")[0])
                finally:
                    os.close(leaf)
                advance(f.size)
        finally:
            for fd in (sha, *fans.values()):
                os.close(fd)
        return named, made

    def _adopt_by_copy(self, path: Path, known: FileDigest) -> FileDigest:
        """`adopt_file` across filesystems: copy (hashing), check, remove the source."""
        got = self.put_file(path)
        if (got.size, got.sha256) != (known.size, known.sha256):
            raise StoreError(f"{path}: stored as {got.digest}, want {known.digest}")
        path.unlink(missing_ok=True)
        return got

    def _remote_put(self, digest: str, size: int, source: Callable[[], IO[bytes]]) -> None:
        """Upload the bytes ``source()`` opens to the blob's final key, unless the object there
        already holds them.

        An object already at the key is kept only when it has the size and, read back, the
        digest (whoever can write the bucket may have put other bytes there, of the right
        size); otherwise it is replaced. The upload is hashed as it is sent; if the bytes are
        not those of ``digest`` (the source changed since it was hashed), the object is removed
        and nothing is stored.
        """
        import pyarrow.fs as pafs

        from .remote import needs_directories

        final = self._location(digest)
        try:
            info = self._fs.get_file_info(final)
            if info.type == pafs.FileType.File and info.size == size:
                with self._fs.open_input_stream(final) as held:
                    kept, _ = copy_hashing(held.read, lambda _: None, REMOTE_CHUNK)
                if kept == digest:
                    return
            if needs_directories(self._fs):
                self._fs.create_dir(final.rsplit("/", 1)[0], recursive=True)
            with source() as src, self._fs.open_output_stream(final) as out:
                sent, _ = copy_hashing(src.read, out.write, CHUNK)
        except OSError as e:
            raise StoreError(f"object {digest}: cannot write to {self._prefix}: {e}") from e
        if sent != digest:
            with contextlib.suppress(OSError):
                self._fs.delete_file(final)
            raise StoreError(f"object {digest}: the source changed while it was uploaded; retry")

    # -- reading -------------------------------------------------------------------------------

    def exists(self, digest: str) -> bool:
        """True when the blob is present."""
        if self._fs is None:
            return os.path.isfile(self._location(digest))
        import pyarrow.fs as pafs

        info = self._fs.get_file_info(self._location(digest))
        return bool(info.type == pafs.FileType.File)

    def size(self, digest: str) -> int | None:
        """The stored size of a blob, or None when it is absent (no regular file there, as
        `exists` says: a directory's own size is no blob's)."""
        if self._fs is None:
            try:
                st = os.stat(self._location(digest))
            except FileNotFoundError:
                return None
            return st.st_size if stat.S_ISREG(st.st_mode) else None
        import pyarrow.fs as pafs

        info = self._fs.get_file_info(self._location(digest))
        return int(info.size) if info.type == pafs.FileType.File else None

    def get(self, digest: str, *, size: int | None = None, limit: int = MAX_BLOB_READ) -> bytes:
        """The blob's bytes; unchecked on a local disk, checked against the digest when remote.

        A remote blob is streamed, hashed as it comes: one listed at another size than
        ``size``, or larger than ``limit``, is refused before a byte is read; one that sends
        more than it listed is refused as soon as it does.

        Args:
            digest: the blob's name.
            size: the size its record lists (a manifest's), when known.
            limit: the most bytes the caller takes (a kind's bound: an envelope's).

        Raises:
            StoreError: absent or unreadable.
            DigestMismatchError: a remote blob whose bytes (or listed size) were altered.
            FormatError: a remote blob listed larger than ``limit``.
        """
        if self._fs is None:
            try:
                return _read_local(self._location(digest))
            except FileNotFoundError as e:
                raise StoreError(f"object {digest}: not in the store") from e
            except OSError as e:
                raise StoreError(f"object {digest}: cannot read: {e}") from e
        # A remote blob is always checked: whoever can write the bucket can change it.
        what = f"object {digest[:19]}… in {self._prefix}"
        try:
            with self._fs.open_input_file(self._location(digest)) as f:
                listed = f.size()
                if size is not None and listed != size:
                    raise DigestMismatchError(f"{what}: {listed} bytes, want {size}",
                                              subject=what, expected=digest)
                if listed > limit:
                    raise FormatError(f"{what}: {listed} bytes, more than the {limit} it may hold")
                hasher, have = hashlib.sha256(), 0
                parts: list[bytes] = []
                # Chunked reads: read() of a whole S3 stream is several times slower.
                while chunk := bytes(f.read(min(REMOTE_CHUNK, listed + 1 - have))):
                    have += len(chunk)
                    if have > listed:
                        raise DigestMismatchError(f"{what}: more bytes than the {listed} listed",
                                                  subject=what, expected=digest)
                    hasher.update(chunk)
                    parts.append(chunk)
        except FileNotFoundError as e:
            raise StoreError(f"object {digest}: not in the store") from e
        except OSError as e:
            raise StoreError(f"object {digest}: cannot read: {e}") from e
        observed = DIGEST_PREFIX + hasher.hexdigest()
        if observed != digest:
            raise DigestMismatchError(f"{what}: content hashes to {observed}, want {digest}",
                                      subject=what, expected=digest, observed=observed)
        return b"".join(parts)

    @contextlib.contextmanager
    def open_input(self, digest: str) -> Iterator[IO[bytes]]:
        """A stream of the blob's bytes, unchecked (the reader hashes what it reads). A local
        blob that is not a regular file (a FIFO or a device planted) is refused before a byte
        is read, without waiting (`verify.ledger_dir.open_regular`; review rev27).

        Raises:
            StoreError: absent or unreadable.
        """
        from trajledger.verify.ledger_dir import open_regular

        try:
            if self._fs is None:
                f: Any = open_regular(self.path_of(digest))
            else:
                f = self._fs.open_input_stream(self._location(digest))
        except FileNotFoundError as e:
            raise StoreError(f"object {digest}: not in the store") from e
        except OSError as e:
            raise StoreError(f"object {digest}: cannot read: {e}") from e
        with f:
            yield f

    def get_verified(self, digest: str, *, size: int | None = None,
                     limit: int = MAX_BLOB_READ) -> bytes:
        """The blob's bytes after checking they hash to ``digest`` (``size`` and ``limit``:
        as for `get`).

        Raises:
            StoreError: absent or unreadable.
            DigestMismatchError: the stored bytes were altered.
        """
        data = self.get(digest, size=size, limit=limit)
        if self._fs is None:  # remote reads are checked by `get`
            verify_bytes(data, digest, f"object {digest[:19]}…")
        return data

    def iter_digests(self) -> Iterator[str]:
        """Every stored digest, in no particular order: each file at the place of its name
        (temp files, and whatever else a store or bucket holds, are not objects)."""
        if self._fs is None:
            base = self.root / "sha256"
            if not base.is_dir():
                return
            for dirpath, _dirs, files in os.walk(base):
                for f in files:
                    if HEX64.fullmatch(f) and dirpath == f"{base}/{f[:2]}/{f[2:4]}":
                        yield DIGEST_PREFIX + f
            return
        import pyarrow.fs as pafs

        sel = pafs.FileSelector(f"{self._prefix}/sha256", recursive=True, allow_not_found=True)
        for info in self._fs.get_file_info(sel):
            name = info.base_name
            if (info.type == pafs.FileType.File and HEX64.fullmatch(name)
                    and info.path == self._location(DIGEST_PREFIX + name)):
                yield DIGEST_PREFIX + name

    def delete(self, digest: str) -> bool:
        """Remove a blob (erasure). Returns False when it was already absent."""
        try:
            if self._fs is None:
                h = self._rel(digest).rpartition("/")[2]
                leaf = self._open_dir(("sha256", h[:2], h[2:4]), make=False)
                try:
                    try:
                        os.unlink(h, dir_fd=leaf)
                    except OSError as e:  # named by its path
                        raise OSError(e.errno, e.strerror, self._location(digest)) from e
                    if self.durable:
                        os.fsync(leaf)
                finally:
                    os.close(leaf)
            else:
                self._fs.delete_file(self._location(digest))
        except FileNotFoundError:
            return False
        return True

    def delete_unchanged(self, digest: str, mtime: float) -> bool:
        """Remove an orphan blob (`fsck.gc`) unless it was written or touched since its
        modification time was ``mtime``; returns whether it was removed.

        On a local disk the object is first renamed aside (atomic), then its time is read
        again: a writer that touched it before the rename (`_touch`, as it keeps it) has
        changed that time, and the object is linked back; one that touches it after the
        rename finds it absent and stores it again. Either way a writer never keeps an object
        that is then removed. A remote store reads the time and deletes, the narrow window
        between the two being unclosed there.

        Raises:
            StoreError: the object cannot be removed.
        """
        try:
            if self._fs is not None:
                if self.modified(digest) != mtime:
                    return False
                return self.delete(digest)
            h = self._rel(digest).rpartition("/")[2]
            try:
                leaf = self._open_dir(("sha256", h[:2], h[2:4]), make=False)
            except FileNotFoundError:
                return False
            try:
                aside = temp_name()
                try:
                    os.rename(h, aside, src_dir_fd=leaf, dst_dir_fd=leaf)
                except FileNotFoundError:
                    return False
                if os.stat(aside, dir_fd=leaf, follow_symlinks=False).st_mtime != mtime:
                    with contextlib.suppress(FileExistsError):  # a writer stored it again
                        os.link(aside, h, src_dir_fd=leaf, dst_dir_fd=leaf,
                                follow_symlinks=False)
                    os.unlink(aside, dir_fd=leaf)
                    return False
                os.unlink(aside, dir_fd=leaf)
                if self.durable:
                    os.fsync(leaf)
            finally:
                os.close(leaf)
        except OSError as e:
            raise StoreError(f"object {digest}: cannot remove: {e.strerror or e}") from e
        return True

    def temp_files(self, *, everywhere: bool = False) -> list[Path]:
        """Temp files in the local store: those of ``objects/sha256/`` (where this version
        writes them), or with ``everywhere`` also in every object directory (older versions)."""
        base = self.root / "sha256"
        if self._fs is not None or not base.is_dir():
            return []
        if not everywhere:
            return sorted(base / n for n in os.listdir(base) if n.startswith(TMP_PREFIX))
        found: list[Path] = []
        for dirpath, _dirs, files in os.walk(base):
            found.extend(Path(dirpath) / f for f in files if f.startswith(TMP_PREFIX))
        return sorted(found)

    def drop_temp_files(self, *, everywhere: bool = False) -> int:
        """Remove temp files left by killed writers (only those no live writer can own:
        ``ledger.fs.is_stale``); returns how many."""
        n = 0
        for path in self.temp_files(everywhere=everywhere):
            if is_stale(path):
                _unlink(str(path))
                n += 1
        return n

    def modified(self, digest: str) -> float | None:
        """When the object was last written (POSIX seconds); None when the store cannot say.

        Raises:
            StoreError: absent or unreadable.
        """
        try:
            if self._fs is None:
                return self.path_of(digest).stat().st_mtime
            info = self._fs.get_file_info(self._location(digest))
        except FileNotFoundError as e:
            raise StoreError(f"object {digest}: not in the store") from e
        except OSError as e:
            raise StoreError(f"object {digest}: cannot read: {e.strerror or e}") from e
        mtime = getattr(info, "mtime", None)
        return mtime.timestamp() if mtime is not None else None

    def check_object(self, digest: str, *, size: int | None = None, rehash: bool = True) -> int:
        """Check a stored object without reading it into memory; returns its size.

        Args:
            digest: the object's name.
            size: the size it must have (a manifest's), when known.
            rehash: re-hash its bytes (else only the size is compared).

        Raises:
            StoreError: absent or unreadable.
            DigestMismatchError: the size or the bytes are not the ones named.
        """
        what = f"object {digest}"
        try:
            if self._fs is None:
                path = self.path_of(digest)
                st = path.stat()
                if not stat.S_ISREG(st.st_mode):  # a FIFO or a device planted: never read
                    raise OSError(errno.EINVAL, "not a regular file", str(path))
                have = st.st_size
                got = hash_file(path).sha256 if rehash and (size is None or have == size) else None
            else:
                import pyarrow.fs as pafs

                info = self._fs.get_file_info(self._location(digest))
                if info.type != pafs.FileType.File:
                    raise FileNotFoundError(2, "not in the store", self._location(digest))
                have = int(info.size)
                got = None
                if rehash and (size is None or have == size):
                    with self._fs.open_input_stream(self._location(digest)) as f:
                        got = copy_hashing(f.read, lambda _: None, CHUNK)[0][len(DIGEST_PREFIX):]
        except FileNotFoundError as e:
            raise StoreError(f"{what}: not in the store") from e
        except OSError as e:
            raise StoreError(f"{what}: cannot read: {e.strerror or e}") from e
        if size is not None and have != size:
            raise DigestMismatchError(
                f"{what}: {have} bytes, want {size}", subject=what, expected=digest
            )
        if got is not None and DIGEST_PREFIX + got != digest:
            raise DigestMismatchError(
                f"{what}: content hashes to {DIGEST_PREFIX + got}, want {digest}",
                subject=what,
                expected=digest,
                observed=DIGEST_PREFIX + got,
            )
        return have

    def copy_to(self, digest: str, dest: Path) -> None:
        """Copy a blob to a local file (for exports and checkouts), streaming.

        Raises:
            StoreError: absent or unreadable.
        """
        try:
            if self._fs is None:
                shutil.copyfile(self.path_of(digest), dest)
                return
            with self._fs.open_input_stream(self._location(digest)) as src, open(dest, "wb") as out:
                observed, _ = copy_hashing(src.read, out.write, REMOTE_CHUNK)
        except FileNotFoundError as e:
            raise StoreError(f"object {digest}: not in the store") from e
        except OSError as e:
            raise StoreError(f"object {digest}: cannot copy to {dest}: {e}") from e
        if observed != digest:
            dest.unlink(missing_ok=True)
            subject = f"object {digest[:19]}… in {self._prefix}"
            raise DigestMismatchError(
                f"{subject}: content hashes to {observed}, want {digest}",
                subject=subject,
                expected=digest,
                observed=observed,
            )


_ROOT = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
"""How the store's root is opened: as configured, a link followed (the user's own setting)."""

class _Temp:
    """A temp file of a local store (``sha256/.tmp-…``), made and renamed relative to a
    descriptor of ``sha256`` opened from the root (`ObjectStore._open_dir`), never through a
    link. Removed on leaving the block unless `install` named it."""

    def __init__(self, store: ObjectStore, *, keep: bool = False) -> None:
        """``keep``: the descriptor it was made with stays open for writing (`fd`)."""
        self._store = store
        self.made: set[str] = set()  # directories that gained a directory made here
        self.dir_fd = store._open_dir(("sha256",), made=self.made)
        self.name = temp_name()
        self._kept = False
        try:
            self.fd = fd = self.open(os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except BaseException:
            os.close(self.dir_fd)
            raise
        if not keep:
            os.close(fd)
            self.fd = -1

    def open(self, flags: int) -> int:
        """Open the temp file (never a link planted in its place) with ``flags``."""
        return os.open(self.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                       dir_fd=self.dir_fd)

    def install(self, digest: str, names: set[Path] | None = None) -> None:
        """Rename the complete temp file (read-only, its bytes durable) to the object's name
        (replacing a damaged one) from ``sha256`` (`ObjectStore._open_dir`); the directories
        that gained the name or one made for it are fsynced, or added to ``names``.

        Raises:
            StoreError: a directory is where the object goes (named, and what to do)."""
        h = digest[len(DIGEST_PREFIX):]
        store = self._store
        leaf = store._open_dir((h[:2], h[2:4]), at=self.dir_fd, base=f"{store._prefix}/sha256",
                               made=self.made)
        try:
            try:
                os.replace(self.name, h, src_dir_fd=self.dir_fd, dst_dir_fd=leaf)
            except OSError as e:  # a directory where the object goes (left33)
                if e.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise
                raise StoreError(
                    f"{store._location(digest)}: a directory is in the way of object "
                    f"{digest[:19]}…, which is a file: it is none of the ledger's; move it out "
                    "of the store, then run again") from e
            self._kept = True
            if store.durable:  # (att47 finding 2: the parents of directories made, too)
                if names is None:
                    os.fsync(leaf)
                    for made in sorted(self.made):  # (one object: no pass of many)
                        fsync_dir(made)
                else:
                    names.add(Path(f"{store._prefix}/sha256/{h[:2]}/{h[2:4]}"))
                    names.update(Path(m) for m in self.made)
        finally:
            os.close(leaf)

    def __enter__(self) -> _Temp:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.fd >= 0:
                os.close(self.fd)
            if not self._kept:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.name, dir_fd=self.dir_fd)
        finally:
            os.close(self.dir_fd)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte of ``data`` to ``fd`` (short writes continued)."""
    while data:
        data = memoryview(data)[os.write(fd, data):]


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _touch(path: str | Path) -> None:
    """Mark an object a writer is about to keep as just written (its mtime set to now).

    A stored object nothing names yet (an orphan) can be the one a writer needs: `fsck.gc`
    removes an orphan only if its mtime is the one it saw when it chose it, so touching it
    before the writer checks it keeps it (`ObjectStore.delete_unchanged`: the removal and the
    touch cannot interleave so that the writer keeps an object that is then removed). Raises
    FileNotFoundError when the object is not there; an object this user may not touch (a
    store shared with others, a read-only file system) is left as it is.
    """
    try:
        os.utime(path)
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.EACCES, errno.EROFS):
            raise


def _holds(path: Path, data: bytes) -> bool:
    """Whether the object file at ``path`` exists and holds exactly ``data`` (touched first:
    `_touch`)."""
    try:
        _touch(path)
        with open(path, "rb") as f:
            return f.read(len(data) + 1) == data
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return False


MOVE_IN_SPLIT = 64
"""`ObjectStore.adopt_files` moves this many staged files or more in on two threads: an
import's thousands of ``mkdir`` and ``rename`` calls are the kernel's work, which two cores
share (a new store makes a directory for nearly every object)."""


def _intact(path: str | Path, size: int, hexdigest: str) -> bool:
    """Whether the object file at ``path`` exists and hashes to ``hexdigest`` (touched first:
    `_touch`)."""
    try:
        _touch(path)
        if os.stat(path).st_size != size:
            return False
        return hash_file(path).sha256 == hexdigest
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return False
