"""The log in a directory: the single writer that only grows it, and readers that never write.

Scope: `Log` opens ``<ledger>/log/`` (Tessera's POSIX layout, files in ``layout``), classifies its
state (``state``: normal, committed-but-unpublished tail, or tampering), and then serves entries,
proofs and lookups (readers), or appends (writers, under the flock of ``.state/lock``).

Readers never write, rename, truncate, republish or delete anything under ``log/``; they read up
to the signed checkpoint. A derived lookup cache (``lookup``) lives in the cache directory the
caller gives (``<ledger>/index/``), which a reader may refresh.

Writers recover only forward, under the lock: files past the committed size (an append that died
before its commit) are removed, a committed but unsigned tail is republished, nothing at or below
the committed size is ever deleted, and nothing smaller or different than the largest checkpoint
ever signed is signed. A state no crash can produce is tampering (`TamperError`, exit 1) and
writers refuse to append to it, leaving every file as found.

Appending (one group commit): build the entries (each names the leaf hash of the one before in
``prev``) and sign the new checkpoint; write the entry bundles and hash tiles (under their own
names: all past the committed size), append the history record, write ``treeState`` and the
checkpoint to temp files; fsync all of these and the directories of the new names in one concurrent
round; rename ``treeState`` into place and fsync ``.state/`` (the commit); rename the checkpoint
into place and fsync the log directory (publication); then the ``on_publish`` hook. Three waits for
the disk per commit, whatever its size (docs/PERFORMANCE.md, "Durable appends", says why each is
needed).
Appending is idempotent by envelope digest, across processes and after a crash.

Fork safety: a `Log` used in a child after ``fork()`` re-opens its lock file and drops its
inherited lock descriptor, mutex and cache connection (``os.register_at_fork`` and a pid check),
so forked writers exclude each other like separate processes.

Non-scope: what an entry's envelope says (``ledger.record`` makes them; ``verify/`` checks them),
checking the whole log (``check``), witnessing (``witness``), serving the log over HTTP (the
layout can be served as static files).
Spec: schemas/log-entry.v1.md; c2sp.org/tlog-tiles, tlog-checkpoint, signed-note; RFC 6962.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
import time as _time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.digest import parse_digest
from trajledger.verify.errors import FormatError, SignatureError, VerificationError
from trajledger.verify.evidence import read_handovers
from trajledger.verify.log_entry import GENESIS_PREV, LogEntry
from trajledger.verify.log_key import Handover, handover_checkpoint, parse_handover
from trajledger.verify.merkle import EMPTY_ROOT, leaf_hash
from trajledger.verify.note import (
    ALG_ED25519,
    Note,
    Verifier,
    format_signature_line,
    verifier_from_vkey,
    vkey_string,
)
from trajledger.verify.tiles import TILE_HEIGHT, TILE_WIDTH, TileReader
from trajledger.verify.tlog_proof import TlogProof, verify_tlog_proof

from ..errors import LedgerError, LogError
from ..fs import TMP_PREFIX, FsyncGroup, fsync_dir, write_file_atomic
from ..keys import Signer
from .edge import ZERO_HASH, Edge
from .layout import (
    CHECKPOINT_FILE,
    HANDOVER_DIR,
    HISTORY_FILE,
    HISTORY_RECORD,
    INFLIGHT_FILE,
    LEGACY_INDEX_FILE,
    LOCK_FILE,
    STATE_DIR,
    TREE_STATE_FILE,
    VKEY_FILE,
    format_tree_state,
    history_record,
    parse_history,
    tile_rel,
)
from .lookup import CACHE_DIR, Lookup
from .state import LogState, check_floor, missing_file, read_state, tamper

if TYPE_CHECKING:
    from trajledger.verify.keys import PublicKey

    from ..store import ObjectStore
    from .check import LogReport

__all__ = ["EntrySpec", "Log", "SignerSource"]

SignerSource = Signer | Callable[[], Signer] | None
"""The log's key, or a function returning it (called on the first append), or None (reader)."""


def _now() -> str:
    return _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime())


@dataclass(frozen=True)
class EntrySpec:
    """What to append: everything of an entry but ``prev``, which the log fills in.

    Attributes:
        kind: one of `KINDS`.
        subject: ``sha256:<hex>`` of the artifact.
        envelope: ``sha256:<hex>`` of the envelope's bytes; appending is idempotent by it.
        signers: keyids of the envelope's signatures (sorted and deduplicated here).
        time: ``YYYY-MM-DDTHH:MM:SSZ``; None for the time of the append.
    """

    kind: str
    subject: str
    envelope: str
    signers: tuple[str, ...]
    time: str | None = None

    def __post_init__(self) -> None:
        """Normalise the signers and check every field with the entry parser's rules.

        Raises:
            FormatError: a field the entry format does not allow.
        """
        object.__setattr__(self, "signers", tuple(sorted(set(self.signers))))
        self.entry(GENESIS_PREV, self.time or "1970-01-01T00:00:00Z")

    def entry(self, prev: str, now: str) -> LogEntry:
        """Build the entry with ``prev`` (and ``now`` unless `time` is set)."""
        return LogEntry(
            kind=self.kind,
            subject=self.subject,
            envelope=self.envelope,
            signers=self.signers,
            time=self.time or now,
            prev=prev,
        )


@dataclass(frozen=True)
class OneRecord:
    """The rule that keeps one record per digest (`Log.one_record`), run under the log's lock.

    Attributes:
        kinds: the entry kinds of which a log holds one record per subject (artifacts).
        judge: given an entry of such a kind to append and ``(index, envelope)`` of the entries
            of its kind about its subject already in the log (or earlier in the same append):
            the index of the record it repeats (nothing is appended), None to append it, or an
            exception to refuse it.
    """

    kinds: frozenset[str]
    judge: Callable[[EntrySpec, Sequence[tuple[int, str]]], int | None]

_LOGS: weakref.WeakSet[Log] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for log in list(_LOGS):
        log._forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        _unlink(path)


def _drop_temp_files(directory: Path) -> None:
    """Remove temp files in a log directory (called under the lock: no live writer owns them)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(TMP_PREFIX):
            _remove(directory / name)


def _write_new(path: Path, data: bytes) -> int:
    """Create (or truncate) ``path`` and write ``data``; returns it open, not yet fsynced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        raise
    return fd


class _SyncRound:
    """The files and directories one commit writes, made durable together: each file's fsync
    starts as soon as it is handed over (`FsyncGroup`), and leaving the ``with`` block fsyncs
    the directories too, waits for all and closes them; a failure raises and the commit goes no
    further. A batch that hands over `LIMIT` files waits for them then, so that it never holds
    more descriptors."""

    LIMIT = 64

    def __init__(self) -> None:
        self._fds: list[int] = []
        self._dirs: set[Path] = set()
        self._group = FsyncGroup()

    def __enter__(self) -> _SyncRound:
        return self

    def file(self, fd: int) -> None:
        """Take an open file: its fsync starts now; it is closed once all are done."""
        self._fds.append(fd)
        self._group.start(fd)
        if len(self._fds) >= self.LIMIT:
            self._finish()

    def directory(self, path: Path) -> None:
        """Fsync this directory too, at the end (a name was created or renamed in it)."""
        self._dirs.add(path)

    def _finish(self) -> None:
        try:
            self._group.wait()
        finally:
            fds, self._fds = self._fds, []
            for fd in fds:
                os.close(fd)

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is not None:
            with contextlib.suppress(OSError):
                self._finish()
            return
        try:
            for d in sorted(self._dirs):
                fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
                self._fds.append(fd)
                self._group.start(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                self._finish()
            raise
        self._finish()


def note_key_bytes(signer: Signer, role: str) -> bytes:
    """The raw Ed25519 public key of a signed-note key (the log's, a witness's).

    Raises:
        LogError: the key is not Ed25519 (``role`` names it in the message).
    """
    try:
        return signer.public.raw_ed25519()
    except FormatError as e:
        algorithm = signer.public.algorithm
        raise LogError(f"{role} key {signer.name}: is {algorithm}, want ed25519") from e


def _log_verifier(origin: str, signer: Signer) -> Verifier:
    raw = note_key_bytes(signer, "log")
    try:
        return verifier_from_vkey(vkey_string(origin, raw, ALG_ED25519))
    except FormatError as e:
        raise LogError(f"log origin {origin!r}: {e}") from e


class Log:
    """An open transparency log directory. Build with `Log.create` or `Log.open`.

    Reading (entries, proofs, lookups) needs no lock, writes nothing, and sees the latest signed
    checkpoint. Appending needs the log's signer (passed directly, or as a function called on
    first use so that an encrypted key is only decrypted when something is appended). A `Log`
    is thread-safe and fork-safe; any number of processes may open the same directory.

    Attributes:
        directory: the log directory.
        verifier: the log's public key as a signed-note verifier.
    """

    def __init__(
        self,
        directory: Path,
        verifier: Verifier,
        signer: SignerSource,
        *,
        cache_dir: Path | None = None,
        floor: Checkpoint | None = None,
        on_publish: Callable[[bytes], None] | None = None,
        cleanup: Callable[[], None] | None = None,
    ) -> None:
        """Use `Log.create` or `Log.open`."""
        self.directory = directory
        self.verifier = verifier
        self._signer_source = signer
        self._signer: Signer | None = signer if isinstance(signer, Signer) else None
        self._on_publish = on_publish
        self._cleanup = cleanup
        self._pid = os.getpid()
        self._mutex = threading.RLock()
        self._lock_fd: int | None = None
        self._recovered = False
        self._cleaned = False
        self._state: LogState | None = None
        self._floor = floor
        self._readers: dict[int, TileReader] = {}
        self._dirs: set[Path] = set()
        self._lookup = Lookup(cache_dir / CACHE_DIR if cache_dir else None, verifier.name)
        self.one_record: OneRecord | None = None
        """Set by the ledger: appends of a digest already recorded are judged by it, under the
        lock, whichever writer appends."""
        _LOGS.add(self)

    # -- creating and opening -----------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        origin: str,
        signer: Signer,
        *,
        cache_dir: Path | None = None,
        on_publish: Callable[[bytes], None] | None = None,
    ) -> Log:
        """Create an empty log: its verifier key, a treeState of size 0 and a signed checkpoint.

        Args:
            directory: where the log lives (created; must not already hold a log).
            origin: the checkpoint origin, also the log key's name in the signed note.
            signer: the log's Ed25519 key.
            cache_dir: where derived lookup data may be kept (None: in memory).
            on_publish: called with each checkpoint note this object publishes.

        Returns:
            The open log.

        Raises:
            LogError: a log already exists there, the origin is not a valid key name, the key is
                not Ed25519, or the files cannot be written.
        """
        verifier = _log_verifier(origin, signer)
        if (directory / TREE_STATE_FILE).exists() or (directory / CHECKPOINT_FILE).exists():
            raise LogError(f"{directory}: a log already exists here")
        log = cls(directory, verifier, signer, cache_dir=cache_dir, on_publish=on_publish)
        try:
            (directory / STATE_DIR).mkdir(parents=True, exist_ok=True)
            write_file_atomic(directory / VKEY_FILE, verifier.vkey.encode() + b"\n")
            with log._locked():
                ts = format_tree_state(0, EMPTY_ROOT)
                write_file_atomic(directory / TREE_STATE_FILE, ts)
                log._recovered = log._cleaned = True
                log._publish_new(signer, Edge(0, [], [], [], ZERO_HASH), ts)
        except OSError as e:
            raise LogError(f"{directory}: cannot create the log: {e.strerror or e}") from e
        return log

    @classmethod
    def open(
        cls,
        directory: Path,
        signer: SignerSource = None,
        *,
        vkey: str | None = None,
        floor: bytes | None = None,
        cache_dir: Path | None = None,
        on_publish: Callable[[bytes], None] | None = None,
        cleanup: Callable[[], None] | None = None,
    ) -> Log:
        """Open a log and classify its state; writes nothing.

        Steps:
            1. Read the verifier key (``vkey`` file); it must equal ``vkey`` when given (the
               caller's trusted key); check ``signer`` is the log's key.
            2. Verify ``floor`` (a checkpoint note seen before) by the log key.
            3. Classify the state (`read_state`): tampering raises; and the signed checkpoint
               must be ``floor``'s tree or a consistent extension of it.

        Args:
            directory: the log directory.
            signer: the log's key (or a function returning it), needed only to append.
            vkey: the trusted verifier key string; default: the log's own ``vkey`` file.
            floor: a signed checkpoint note of this log seen before (kept outside the ledger by
                the caller): the log must not be behind it or fork from it.
            cache_dir: where derived lookup data may be kept (``<ledger>/index/``; None: in
                memory).
            on_publish: called with each checkpoint note this object publishes (to advance the
                caller's floor). An exception from it propagates after the publication.
            cleanup: run once per process under the lock before the first write (housekeeping
                of the ledger's other leftovers); OSError and LedgerError from it are ignored.

        Returns:
            The open log.

        Raises:
            LogError: no log there, an unreadable file, or a signer that is not the log's key.
            TamperError: the files contradict what was signed or committed (the file is named),
                a ``vkey`` other than the trusted one, a floor not signed by the log key, or a
                rollback or fork from the floor.
        """
        # (1)
        path = directory / VKEY_FILE
        try:
            own = path.read_text("utf-8").strip()
        except FileNotFoundError as e:
            raise LogError(f"{directory}: no log here (no {VKEY_FILE} file)") from e
        except (OSError, UnicodeDecodeError) as e:
            raise LogError(f"{path}: cannot read: {e}") from e
        if vkey is not None and own != vkey:
            raise tamper(path, f"is {own!r}, want {vkey!r} (the trusted log key)")
        try:
            verifier = verifier_from_vkey(own)
        except FormatError as e:
            raise LogError(f"{path}: {e}") from e
        # (2)
        seen: Checkpoint | None = None
        if floor is not None:
            try:
                seen = verify_checkpoint(floor, verifier, origin=verifier.name)
            except (FormatError, SignatureError) as e:
                raise tamper(
                    path,
                    f"the checkpoint seen before is not signed by this key ({e}): the log key "
                    "was replaced",
                ) from e
        log = cls(
            directory,
            verifier,
            signer,
            cache_dir=cache_dir,
            floor=seen,
            on_publish=on_publish,
            cleanup=cleanup,
        )
        if isinstance(signer, Signer):
            log._check_signer(signer)
        # (3)
        with log._mutex:
            log._state_now()
        return log

    def close(self) -> None:
        """Release the lock file and the lookup cache. The object is unusable afterwards."""
        with self._mutex:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
            self._lookup.close()

    def __enter__(self) -> Log:
        """Use the log in a ``with`` block; it is closed at the end."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the log."""
        self.close()

    # -- the state ------------------------------------------------------------------------------

    def _state_now(self) -> LogState:
        """The classified state of the directory, re-read when its files changed."""
        st = self._state
        if st is not None:
            try:
                cp = (self.directory / CHECKPOINT_FILE).read_bytes()
            except FileNotFoundError:
                cp = None
            except OSError as e:
                raise LogError(f"{self.directory / CHECKPOINT_FILE}: cannot read: {e}") from e
            try:
                ts = (self.directory / TREE_STATE_FILE).read_bytes()
            except OSError:
                ts = b""
            if (cp, ts) == st.key:
                return st
        st = read_state(self.directory, self.verifier)
        self._readers = {}
        if self._floor is not None:
            check_floor(self.directory, self._floor, st, self._reader_for(st))
        if st.checkpoint is not None and (
            self._floor is None or st.checkpoint.size >= self._floor.size
        ):
            self._floor = st.checkpoint
        self._state = st
        return st

    def _reader_for(self, st: LogState) -> TileReader:
        reader = self._readers.get(st.tree_size)
        if reader is None:
            self._readers = {st.tree_size: TileReader(self._fetch, st.tree_size)}
            reader = self._readers[st.tree_size]
        return reader

    def _fetch(self, rel: str) -> bytes:
        return (self.directory / rel).read_bytes()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """A committed file that is missing or malformed is tampering: name it."""
        try:
            yield
        except FileNotFoundError as e:
            size = self._state.tree_size if self._state is not None else 0
            where = missing_file(self.directory, e.filename, size)
            raise tamper(where, f"missing, but the committed tree of size {size} needs it") from e
        except OSError as e:
            raise LogError(f"log: cannot read {e.filename}: {e.strerror}") from e
        except FormatError as e:
            rel = str(e).split(": ", 1)[0]
            where = self.directory / rel if rel.startswith("tile/") else self.directory / "tile"
            raise tamper(where, str(e)) from e

    # -- simple reads ---------------------------------------------------------------------------

    @property
    def origin(self) -> str:
        """The log's origin (the checkpoint's first line and the log key's name)."""
        return self.verifier.name

    @property
    def vkey(self) -> str:
        """The log's C2SP verifier key string, ``<origin>+<key ID>+<base64 key>``."""
        return self.verifier.vkey

    def tree_state(self) -> tuple[int, bytes]:
        """The committed size and root (treeState's, checked against the tiles).

        May be ahead of the signed checkpoint (a tail the next writer publishes).

        Raises:
            TamperError: the log's files contradict each other.
        """
        with self._mutex:
            st = self._state_now()
            return st.tree_size, st.tree_root

    @property
    def size(self) -> int:
        """The size of the signed checkpoint: what readers read up to (re-read each time).

        Raises:
            TamperError: the log's files contradict each other.
        """
        with self._mutex:
            return self._state_now().published

    def checkpoint_bytes(self) -> bytes:
        """The published signed checkpoint, verbatim (with any witness cosignatures).

        Raises:
            LogError: no checkpoint was published yet (the log's creation did not finish).
            TamperError: the log's files contradict each other.
        """
        with self._mutex:
            note = self._state_now().note
        if note is None:
            raise LogError(
                f"log {self.origin}: no checkpoint published yet (its creation did not finish; "
                "the next append publishes it)"
            )
        return note

    def checkpoint(self) -> Checkpoint:
        """The published checkpoint, verified by the log's key.

        Raises:
            LogError: no checkpoint was published yet.
            TamperError: it is missing, malformed, or not signed by the log's key.
        """
        with self._mutex:
            cp = self._state_now().checkpoint
        if cp is None:
            self.checkpoint_bytes()  # raises the LogError
            raise AssertionError("unreachable")
        return cp

    def _check_range(self, what: str, start: int, end: int, size: int) -> None:
        if not 0 <= start <= end <= size:
            raise LogError(f"{what} [{start}, {end}) is outside the log of size {size}")

    def entries(self, start: int, end: int) -> list[bytes]:
        """Entries ``start`` to ``end - 1`` (below the signed size), as stored.

        Raises:
            LogError: the range is outside the log.
            TamperError: a bundle is missing or malformed.
        """
        with self._mutex:
            st = self._state_now()
            self._check_range("entry range", start, end, st.published)
            with self._reading():
                return self._reader_for(st).entries(start, end)

    def entry(self, index: int) -> bytes:
        """The bytes of entry ``index``.

        Raises:
            LogError: no such entry.
            TamperError: its bundle is missing or malformed.
        """
        with self._mutex:
            st = self._state_now()
            if not 0 <= index < st.published:
                raise LogError(f"log entry {index}: outside the log of size {st.published}")
            with self._reading():
                return self._reader_for(st).entries(index, index + 1)[0]

    # -- proofs ---------------------------------------------------------------------------------

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """The RFC 6962 inclusion proof of entry ``index`` in the tree of ``size`` entries.

        Args:
            index: the entry.
            size: the tree size; default the signed size.

        Raises:
            LogError: ``index``/``size`` outside the log.
            TamperError: a tile is missing or malformed.
        """
        with self._mutex:
            st = self._state_now()
            current = st.published
            n = current if size is None else size
            if not 0 <= index < n <= current:
                raise LogError(
                    f"inclusion proof for entry {index} at size {n}: want "
                    f"0 <= index < size <= {current}"
                )
            with self._reading():
                return self._reader_for(st).inclusion_proof(index, n)

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        """The RFC 6962 consistency proof from the tree of ``old`` entries to ``new``.

        Args:
            old: the older size, at least 1.
            new: the newer size; default the signed size.

        Raises:
            LogError: sizes outside ``1 <= old <= new <= size``.
            TamperError: a tile is missing or malformed.
        """
        with self._mutex:
            st = self._state_now()
            current = st.published
            n = current if new is None else new
            if not 0 < old <= n <= current:
                raise LogError(
                    f"consistency proof from size {old} to {n}: want 1 <= old <= new <= {current}"
                )
            with self._reading():
                return self._reader_for(st).consistency_proof(old, n)

    def root_at(self, size: int) -> bytes:
        """The root of the tree of the first ``size`` entries, from the tiles.

        Raises:
            LogError: ``size`` beyond the signed size.
            TamperError: a tile is missing or malformed.
        """
        with self._mutex:
            st = self._state_now()
            if not 0 <= size <= st.published:
                raise LogError(f"tree size {size}: outside the log of size {st.published}")
            with self._reading():
                return self._reader_for(st).subtree_root(0, size)

    def tlog_proof(self, index: int) -> TlogProof:
        """An offline ``c2sp.org/tlog-proof@v1`` proof of entry ``index`` under the checkpoint.

        The proof is checked (`verify_tlog_proof`) before it is returned.

        Raises:
            LogError: the entry is not covered by the published checkpoint.
            TamperError: a file is missing, or the proof does not verify.
        """
        with self._mutex:
            cp_bytes = self.checkpoint_bytes()
            cp = self.checkpoint()
            if not 0 <= index < cp.size:
                raise LogError(
                    f"log entry {index}: not covered by the published checkpoint of size {cp.size}"
                )
            proof = TlogProof(index, tuple(self.inclusion_proof(index, cp.size)), cp_bytes)
            try:
                verify_tlog_proof(proof, self.entry(index), self.verifier, self.origin)
            except VerificationError as e:
                raise tamper(self.directory / "tile", f"entry {index}: {e}") from e
            return proof

    # -- lookups --------------------------------------------------------------------------------

    def find_envelope(self, digest: str) -> int | None:
        """The index of the entry naming envelope ``digest``, or None.

        Raises:
            FormatError: ``digest`` is not a ``sha256:<hex>`` string.
            TamperError: a bundle is missing.
        """
        parse_digest(digest, "envelope digest")
        with self._mutex:
            hits = self._find("env", [digest], self._state_now(), writer=False).get(digest, [])
            return hits[0] if hits else None

    def find_subject(self, digest: str) -> list[int]:
        """The indices of every entry about subject ``digest``, in log order.

        Raises:
            FormatError: ``digest`` is not a ``sha256:<hex>`` string.
            TamperError: a bundle is missing.
        """
        parse_digest(digest, "subject digest")
        with self._mutex:
            return self._find("subj", [digest], self._state_now(), writer=False).get(digest, [])

    def _find(
        self, column: str, digests: Sequence[str], st: LogState, *, writer: bool
    ) -> dict[str, list[int]]:
        """Indices of the entries whose envelope (column "env") or subject ("subj") is one of
        ``digests``, from the lookup cache, each confirmed on the entry itself."""
        size = st.tree_size if writer else st.published
        reader = self._reader_for(st)
        wanted = set(digests)
        out: dict[str, list[int]] = {}
        with self._reading():
            self._lookup.sync(
                size,
                st.tree_size,
                reader.entries,
                lambda i: reader.leaf_hashes(i, i + 1)[0],
                writer=writer,
            )
            for indices in self._lookup.candidates(column, digests, size).values():
                for i in indices:
                    raw = reader.entries(i, i + 1)[0]
                    try:
                        entry = LogEntry.from_bytes(raw, f"log entry {i}")
                    except FormatError:
                        continue  # 'log verify' reports it; it names nothing
                    value = entry.envelope if column == "env" else entry.subject
                    if value in wanted:
                        out.setdefault(value, []).append(i)
        for hits in out.values():
            hits.sort()
        return out

    # -- appending ------------------------------------------------------------------------------

    def _get_signer(self) -> Signer:
        if self._signer is None:
            if self._signer_source is None:
                raise LogError(f"log {self.origin}: opened without its key; cannot append")
            if isinstance(self._signer_source, Signer):
                signer = self._signer_source
            else:
                signer = self._signer_source()
            self._check_signer(signer)
            self._signer = signer
        return self._signer

    def require_signer(self) -> None:
        """Load the log's key now, so that a missing key or passphrase fails before a caller
        does work whose result it would then fail to append.

        Raises:
            LogError: the log was opened without a key, or the key is not the log's.
            KeyError_: the key cannot be loaded (unknown, wrong passphrase).
        """
        self._get_signer()

    def _check_signer(self, signer: Signer) -> None:
        raw = note_key_bytes(signer, "log")
        if raw != self.verifier.public_key:
            raise LogError(
                f"log key {signer.name}: is not the key of log {self.origin} (vkey {self.vkey})"
            )

    def append(
        self,
        specs: Sequence[EntrySpec],
        *,
        check: Callable[[int], None] | None = None,
        foreign: bool = False,
    ) -> list[int]:
        """Append entries in one group commit; return each one's index.

        An entry whose envelope is already in the log (appended earlier, by any process, or
        earlier in ``specs``) is not added again: its existing index is returned.

        Steps:
            1. Take the flock; classify the state (tampering refuses, nothing written); recover
               forward (leftovers past the committed size removed, a committed unsigned tail
               republished).
            2. Run ``check`` with the committed size: raising aborts with nothing written.
            3. Find the envelopes already logged (confirmed on the entries); and, unless
               ``foreign``, let `one_record` judge each entry of its kinds whose subject the
               log (or this append) already has a record of, of its kind: one record per
               digest.
            4. Build the new entries, chained by ``prev``; compute the new tiles; sign the new
               checkpoint.
            5. Write bundles and tiles (under their own names: past the committed size, nobody
               reads them), the history record, treeState and the checkpoint (temp files);
               fsync them all, and the directories of the new names, in one concurrent round.
            6. Rename treeState into place and fsync its directory: the commit.
            7. Rename the checkpoint into place and fsync its directory: the publication.
            8. Call ``on_publish``.

        Args:
            specs: the entries to append, in order.
            check: a precondition run under the lock (e.g. a policy serial must still be the
                next one); an exception from it propagates and nothing is appended.
            foreign: the entries are another log's records, logged here by an import: not
                judged by `one_record` (they are no second record of this origin).

        Returns:
            The index of each spec's entry, in the order of ``specs``.

        Raises:
            TamperError: the log's files contradict what was signed or committed.
            LogError: no signer, another log's key, an envelope already logged with another
                kind or subject, or an I/O error (the log is then unchanged unless the error
                came after the commit, in which case the entries are in the log and a retry
                returns their indices).
        """
        if not specs:
            return []
        signer = self._get_signer()
        with self._locked():
            # (1)
            st = self._writer_state(signer)
            edge = st.edge
            # (2)
            if check is not None:
                check(edge.size)
                st = self._writer_state(signer)  # the check only reads; make sure of it
                edge = st.edge
            # (3)
            existing = self._find("env", [s.envelope for s in specs], st, writer=True)
            rule = None if foreign else self.one_record
            unique = [s.subject for s in specs if rule is not None and s.kind in rule.kinds]
            about = self._find("subj", unique, st, writer=True) if unique else {}
            new: list[EntrySpec] = []
            pending: dict[str, int] = {}
            result: list[int] = []
            for spec in specs:
                hits = existing.get(spec.envelope)
                if hits:
                    self._check_same(hits[0], spec, st)
                    result.append(hits[0])
                    continue
                index = pending.get(spec.envelope)
                if index is None and rule is not None and spec.kind in rule.kinds:
                    prior = [(i, env) for i in about.get(spec.subject, [])
                             for kind, env in [self._kind_envelope(i, st)] if kind == spec.kind]
                    prior += [(edge.size + n, s.envelope) for n, s in enumerate(new)
                              if (s.kind, s.subject) == (spec.kind, spec.subject)]
                    same = rule.judge(spec, prior) if prior else None
                    if same is not None:
                        result.append(same)
                        continue
                if index is None:
                    index = edge.size + len(new)
                    pending[spec.envelope] = index
                    new.append(spec)
                else:
                    first = new[index - edge.size]
                    if (first.kind, first.subject) != (spec.kind, spec.subject):
                        raise LogError(
                            f"envelope {spec.envelope}: given twice, as {first.kind} of "
                            f"{first.subject} and as {spec.kind} of {spec.subject}"
                        )
                result.append(index)
            if new:
                self._commit(st, new, signer)
            return result

    def _kind_envelope(self, index: int, st: LogState) -> tuple[str, str]:
        with self._reading():
            entry = LogEntry.from_bytes(self._reader_for(st).entries(index, index + 1)[0])
        return entry.kind, entry.envelope

    def _check_same(self, index: int, spec: EntrySpec, st: LogState) -> None:
        with self._reading():
            entry = LogEntry.from_bytes(self._reader_for(st).entries(index, index + 1)[0])
        if (entry.kind, entry.subject) != (spec.kind, spec.subject):
            raise LogError(
                f"envelope {spec.envelope}: already logged at index {index} as {entry.kind} of "
                f"{entry.subject}, not {spec.kind} of {spec.subject}"
            )

    def _commit(self, st: LogState, specs: Sequence[EntrySpec], signer: Signer) -> None:
        edge = st.edge
        # (4)
        now = _now()
        raws: list[bytes] = []
        hashes: list[bytes] = []
        prev = edge.prev
        for spec in specs:
            raw = spec.entry(prev.hex(), now).to_bytes()
            prev = leaf_hash(raw)
            raws.append(raw)
            hashes.append(prev)
        new_edge, writes, completed, _partial = edge.extend(raws, hashes)
        ts = format_tree_state(new_edge.size, new_edge.root)
        cp, note = self._sign(signer, new_edge)  # before any write: a refusal leaves nothing
        inflight = self.directory / INFLIGHT_FILE
        ts_tmp = self.directory / STATE_DIR / (TMP_PREFIX + "treeState")
        cp_tmp = self.directory / (TMP_PREFIX + CHECKPOINT_FILE)
        try:
            os.close(os.open(inflight, os.O_WRONLY | os.O_CREAT, 0o644))
            # (5)
            with _SyncRound() as durable:
                for rel, data in writes:
                    durable.file(self._write(rel, data, durable))
                self._append_history(new_edge.size, durable)
                durable.file(_write_new(ts_tmp, ts))
                durable.file(_write_new(cp_tmp, note))
            # (6)
            os.replace(ts_tmp, self.directory / TREE_STATE_FILE)
            fsync_dir(self.directory / STATE_DIR)
        except OSError as e:
            for tmp in (ts_tmp, cp_tmp):
                _unlink(tmp)
            raise LogError(f"log {self.origin}: cannot append: {e.strerror or e}") from e
        self._state = LogState((st.note, ts), st.checkpoint, st.note, new_edge.size,
                               new_edge.root, new_edge)  # fmt: skip
        self._readers = {}
        # (7)
        try:
            self._publish(cp, note, new_edge, ts, staged=cp_tmp)
        except OSError as e:
            _unlink(cp_tmp)
            raise LogError(
                f"log {self.origin}: entries {edge.size}..{new_edge.size - 1} are committed but "
                f"the checkpoint could not be written: {e.strerror or e} (the next append "
                "publishes them)"
            ) from e
        # After publication: housekeeping whose failure changes nothing.
        with contextlib.suppress(OSError):
            _unlink(inflight)
        for rel in completed:
            pdir = self.directory / (rel + ".p")
            shutil.rmtree(pdir, ignore_errors=True)
            self._dirs.discard(pdir)
        self._lookup.add(edge.size, [(s.envelope, s.subject) for s in specs], new_edge.prev)
        # (8)
        if self._on_publish is not None:
            self._on_publish(note)

    def _write(self, rel: str, data: bytes, durable: _SyncRound) -> int:
        """Write a tile or bundle under its own name, left open for the commit's fsync round
        (``durable`` also gets its directory). Returns the descriptor.

        No temp file and no rename: every path a commit writes is past the committed size (a
        new full tile, a new partial width), so no reader asks for it until the commit that
        makes it durable, and one an interrupted append leaves (whole, cut short, or with bytes
        a power cut lost) is a leftover the next writer removes (docs/PERFORMANCE.md,
        "Durable appends").
        """
        path = self.directory / rel
        self._ensure_dir(path.parent, durable)
        fd = _write_new(path, data)
        durable.directory(path.parent)
        return fd

    def _ensure_dir(self, directory: Path, durable: _SyncRound) -> None:
        if directory in self._dirs:
            return
        missing: list[Path] = []
        d = directory
        while not d.is_dir():
            missing.append(d)
            d = d.parent
        for m in reversed(missing):
            with contextlib.suppress(FileExistsError):
                os.mkdir(m)
            durable.directory(m.parent)
        self._dirs.add(directory)

    def _append_history(self, size: int, durable: _SyncRound) -> None:
        path = self.directory / HISTORY_FILE
        created = not path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, history_record(size))
        except BaseException:
            os.close(fd)
            raise
        durable.file(fd)
        if created:
            durable.directory(path.parent)

    def _sign(self, signer: Signer, edge: Edge) -> tuple[Checkpoint, bytes]:
        """The checkpoint of ``edge``'s tree and its signed note."""
        cp = Checkpoint(self.origin, edge.size, edge.root)
        text = cp.to_text()
        line = format_signature_line(self.origin, self.verifier.key_hash, signer.sign(text))
        return cp, text + b"\n" + line

    def _publish(
        self, cp: Checkpoint, note: bytes, edge: Edge, ts: bytes, *, staged: Path | None = None
    ) -> None:
        """Publish ``note``, the signed checkpoint ``cp`` of ``edge``'s tree (committed as
        ``ts``): rename ``staged`` (its temp file, already fsynced) into place, or write it
        (temp, fsync, rename); then fsync the log directory. The caller calls ``on_publish``.

        Raises:
            OSError: it cannot be written.
        """
        path = self.directory / CHECKPOINT_FILE
        if staged is None:
            write_file_atomic(path, note)
        else:
            os.replace(staged, path)
            fsync_dir(self.directory)
        self._state = LogState((note, ts), cp, note, edge.size, edge.root, edge)
        self._readers = {}
        self._floor = cp

    def _publish_new(self, signer: Signer, edge: Edge, ts: bytes) -> None:
        """Sign and publish the checkpoint of a tree committed earlier (a new log, a committed
        tail left by a writer that stopped), then call ``on_publish``."""
        cp, note = self._sign(signer, edge)
        self._publish(cp, note, edge, ts)
        if self._on_publish is not None:
            self._on_publish(note)

    def add_cosignature(self, expected: bytes, note: bytes) -> None:
        """Replace the checkpoint ``expected`` by ``note``, the same signed tree with other
        cosignature lines (the witness's), under the lock.

        Raises:
            LogError: the checkpoint changed meanwhile (run again), or cannot be written.
            TamperError: the log's files contradict each other.
            FormatError: ``note`` is not the same checkpoint text.
        """
        if Note.from_bytes(note).text != Note.from_bytes(expected).text:
            raise FormatError("cosigned checkpoint: its text differs from the checkpoint's")
        verify_checkpoint(note, self.verifier, origin=self.origin)
        with self._locked():
            st = self._state_now()
            if st.note != expected:
                raise LogError(
                    f"log {self.origin}: the checkpoint changed while cosigning; run again"
                )
            try:
                write_file_atomic(self.directory / CHECKPOINT_FILE, note)
            except OSError as e:
                raise LogError(
                    f"log {self.origin}: cannot write the checkpoint: {e.strerror}"
                ) from e
            assert st.checkpoint is not None
            self._state = LogState((note, st.key[1]), st.checkpoint, note, st.tree_size,
                                   st.tree_root, st.edge)  # fmt: skip

    # -- the log key ------------------------------------------------------------------------------

    def key_handovers(self) -> list[bytes]:
        """The log's key handover notes, oldest first (``key-handovers/1``, ``2``, ...).

        Raises:
            LogError: one cannot be read.
        """
        try:
            return read_handovers(self.directory)
        except FormatError as e:
            raise LogError(str(e)) from e

    def rotate_key(self, new: Signer) -> Handover:
        """Hand the log over to the key ``new``: the current tree, signed by the old key and by
        ``new`` with a line naming both, becomes the checkpoint; from then on ``new`` signs.

        Steps:
            1. Take the lock; classify the state and recover forward (a committed unsigned
               tail is first published under the old key).
            2. Build the handover of the current tree (`verify.log_key.handover_checkpoint`),
               signed by the old key and by ``new``, and check it (`parse_handover`).
            3. Write it as ``key-handovers/<n>`` (the next number; the last one again when an
               interrupted rotation to the same key left it), then as the checkpoint
               (publication), then the ``vkey`` file naming ``new``'s key: every step is
               atomic, and until the ``vkey`` file changes the old key is the log's.
            4. Call ``on_publish`` with the handover (it is signed by the old key: the caller's
               floor for that key).

        Resuming: when the ``vkey`` file already names ``new``'s key, nothing is written and
        the last handover is returned.

        Raises:
            LogError: ``new`` is not an Ed25519 key, is the current key, an interrupted rotation
                went to another key, or a file cannot be written.
            TamperError: the log's files contradict what was signed or committed.
        """
        target = _log_verifier(self.origin, new)
        with self._locked():
            if target.vkey == self.vkey:
                handovers = self.key_handovers()
                last = parse_handover(handovers[-1]) if handovers else None
                if last is None or last.new != target.vkey:
                    raise LogError(f"log key {new.name}: is already the key of log {self.origin}")
                return last
            old = self._get_signer()
            # (1)
            st = self._writer_state(old)
            # (2)
            cp = handover_checkpoint(Checkpoint(self.origin, st.edge.size, st.edge.root),
                                     self.vkey, target.vkey)
            text = cp.to_text()
            note = (text + b"\n"
                    + format_signature_line(self.origin, self.verifier.key_hash, old.sign(text))
                    + format_signature_line(self.origin, target.key_hash, new.sign(text)))
            handover = parse_handover(note)
            # (3)
            handovers = self.key_handovers()
            number = len(handovers) + 1
            if handovers:
                last = parse_handover(handovers[-1])
                if last.old == self.vkey:
                    if last.new != target.vkey:
                        raise LogError(
                            f"log {self.origin}: an interrupted rotation handed the key over to "
                            f"{last.new}; finish it with that key"
                        )
                    number -= 1
            try:
                (self.directory / HANDOVER_DIR).mkdir(exist_ok=True)
                write_file_atomic(self.directory / HANDOVER_DIR / str(number), note)
                write_file_atomic(self.directory / CHECKPOINT_FILE, note)
                write_file_atomic(self.directory / VKEY_FILE, target.vkey.encode() + b"\n")
            except OSError as e:
                raise LogError(f"log {self.origin}: cannot rotate its key: {e.strerror}") from e
            self.verifier = target
            self._signer = new
            self._signer_source = new
            self._state = None
            self._readers = {}
            self._floor = cp
            # (4)
            if self._on_publish is not None:
                self._on_publish(note)
            return handover

    # -- locking and recovery -------------------------------------------------------------------

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        """Hold the writer's lock: no process appends meanwhile (for ``gc``).

        Returns:
            A context manager; re-entrant within this object.
        """
        return self._locked()

    def _forget_after_fork(self) -> None:
        """In a forked child: drop what the parent's process owned (lock descriptor, mutex,
        lookup connection), so this process locks on its own like any other."""
        self._mutex = threading.RLock()
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            # The child's copy of the parent's descriptor: closing it does not release the
            # parent's lock (flock belongs to the open file description, still open there).
            with contextlib.suppress(OSError):
                os.close(fd)
        self._pid = os.getpid()
        self._recovered = self._cleaned = False
        self._lookup.forget_after_fork()
        self._readers = {}

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self._pid != os.getpid():
            self._forget_after_fork()  # forked without the at-fork hook (it normally runs)
        with self._mutex:
            if self._lock_fd is None:
                path = self.directory / LOCK_FILE
                try:
                    self._lock_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                except FileNotFoundError as e:
                    self._state_now()  # a missing .state is tampering: say so
                    raise LogError(f"{path}: cannot open the lock: {e.strerror}") from e
                except OSError as e:
                    raise LogError(f"{path}: cannot open the lock: {e.strerror}") from e
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _writer_state(self, signer: Signer) -> LogState:
        """Under the lock: classify, recover forward, republish a committed unsigned tail."""
        st = self._state_now()
        inflight = self.directory / INFLIGHT_FILE
        crashed = inflight.exists()
        if not self._recovered or crashed:
            self._dirs.clear()
            try:
                self._remove_leftovers(st.tree_size)
                self._truncate_history(st.tree_size)
                _unlink(self.directory / LEGACY_INDEX_FILE)
            except OSError as e:
                raise LogError(f"log {self.origin}: cannot recover: {e.strerror or e}") from e
            self._recovered = True
        if not self._cleaned:
            self._cleaned = True
            if self._cleanup is not None:
                with contextlib.suppress(OSError, LedgerError):
                    self._cleanup()
        if st.unpublished:
            self._check_tail(st)
            try:
                if not st.key[1]:  # creation stopped before its first treeState
                    empty = format_tree_state(0, EMPTY_ROOT)
                    write_file_atomic(self.directory / TREE_STATE_FILE, empty)
                    st = self._state_now()
                self._publish_new(signer, st.edge, st.key[1])
            except OSError as e:
                raise LogError(f"log {self.origin}: cannot republish: {e.strerror}") from e
            st = self._state_now()
        if crashed:
            with contextlib.suppress(OSError):
                _unlink(inflight)
        return st

    def _check_tail(self, st: LogState) -> None:
        """A committed tail about to be signed must parse and chain from the signed tree."""
        start = st.published
        if start == st.tree_size:
            return
        reader = self._reader_for(st)
        with self._reading():
            raws = reader.entries(start, st.tree_size)
            prev = reader.leaf_hashes(start - 1, start)[0].hex() if start else GENESIS_PREV
        for i, raw in enumerate(raws, start):
            try:
                entry = LogEntry.from_bytes(raw, f"log entry {i}")
            except FormatError as e:
                raise tamper(self.directory / "tile", f"unsigned tail: {e}") from e
            if entry.prev != prev:
                raise tamper(
                    self.directory / "tile",
                    f"unsigned tail: entry {i}: prev is {entry.prev}, want {prev}",
                )
            prev = entry.leaf_hash.hex()

    def _remove_leftovers(self, size: int) -> None:
        """Remove temp files and every tile or bundle past the committed size."""
        for d in (self.directory, self.directory / STATE_DIR):
            _drop_temp_files(d)
        levels = [-1]
        level = 0
        while (self.directory / "tile" / str(level)).is_dir():
            levels.append(level)
            level += 1
        for level in levels:
            shift = TILE_HEIGHT * (level + 1) if level >= 0 else TILE_HEIGHT
            full = size >> shift
            width = (size >> (shift - TILE_HEIGHT)) % TILE_WIDTH
            seen: set[Path] = set()
            index = full
            while True:
                path = self.directory / tile_rel(level, index)
                pdir = Path(str(path) + ".p")
                if path.parent not in seen:
                    seen.add(path.parent)
                    _drop_temp_files(path.parent)
                    _drop_temp_files(pdir)
                if not (path.exists() or pdir.exists()):
                    break
                _remove(path)
                if index == full and pdir.is_dir():
                    for name in os.listdir(pdir):
                        if not (name.isdigit() and int(name) <= width):
                            _remove(pdir / name)
                else:
                    _remove(pdir)
                index += 1
            # Partial tiles of tiles completed just before a crash: garbage, as after a commit.
            index = full - 1
            while index >= 0:
                pdir = self.directory / (tile_rel(level, index) + ".p")
                if not pdir.exists():
                    break
                _remove(pdir)
                index -= 1

    def _truncate_history(self, size: int) -> None:
        """Drop history records past the committed size (an append that did not commit).

        Reads only the file's tail: the records past the committed size are the last ones.
        """
        path = self.directory / HISTORY_FILE
        try:
            length = path.stat().st_size
        except FileNotFoundError:
            return
        n = HISTORY_RECORD.size
        whole = length - length % n
        with open(path, "rb") as f:
            tail_from = max(0, whole - 64 * n)
            f.seek(tail_from)
            data = f.read(whole - tail_from)
        sizes, bad, _torn = parse_history(data)
        if bad is not None:
            return  # damaged, not interrupted: leave it for 'log verify' to report
        keep = [i for i, s in enumerate(sizes) if s <= size]
        if not keep:
            if size == 0 and tail_from == 0:
                end = 0
            else:
                return  # it does not record the committed size here: damaged, leave it
        else:
            last = keep[-1]
            if sizes[last] != size:
                return
            end = tail_from + (last + 1) * n
        if end < length:
            with open(path, "r+b") as f:
                f.truncate(end)
                f.flush()
                os.fsync(f.fileno())

    # -- checking -------------------------------------------------------------------------------

    def verify(
        self,
        store: ObjectStore | None = None,
        *,
        keys: Mapping[str, PublicKey] | None = None,
        skip_data: bool = False,
    ) -> LogReport:
        """Check the whole log; see `verify_log_dir`. The log's own ``vkey`` is trusted."""
        from .check import verify_log_dir

        return verify_log_dir(
            self.directory,
            vkey=self.vkey,
            store=store,
            keys=keys,
            skip_data=skip_data,
        )

