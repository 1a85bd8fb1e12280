"""Reading the log in a directory: opening it, classifying its state, entries, proofs, lookups.

Scope: `LogReader`, the half of `Log` that never writes under ``log/``: it opens
``<ledger>/log/`` (Tessera's POSIX layout, files in ``layout``), classifies its state (``state``:
normal, committed-but-unpublished tail, or tampering), checks it against the caller's floor,
and serves entries, proofs (RFC 6962, c2sp.org/tlog-proof) and lookups, up to the signed
checkpoint. A derived lookup cache (``lookup``) lives in the cache directory the caller gives
(``<ledger>/index/``), which a reader may refresh. The handle it holds (mutex, lock descriptor,
lookup connection) is dropped in a child after ``fork()`` (``os.register_at_fork`` and a pid
check), so that forked writers exclude each other like separate processes.

Non-scope: appending, recovery and the log key (``writer``), checking the whole log (``check``).
Spec: schemas/log-entry.v1.md; c2sp.org/tlog-tiles, tlog-checkpoint, tlog-proof; RFC 6962.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Self

from trajledger.verify.checkpoint import Checkpoint
from trajledger.verify.digest import parse_digest
from trajledger.verify.errors import FormatError, SignatureError, VerificationError
from trajledger.verify.ledger_dir import read_handovers, read_regular
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.note import Verifier, verifier_from_vkey
from trajledger.verify.tiles import TileReader
from trajledger.verify.tlog_proof import TlogProof, verify_tlog_proof

from ..encode import verifier_vkey
from ..errors import LogError, TamperError, read_failure
from ..keys import Signer
from .checked import CheckedNotes
from .layout import VKEY_FILE, LogPaths
from .lookup import CACHE_DIR, Lookup
from .spec import OneRecord, SignerSource, note_key_bytes
from .state import LogState, check_floor, missing_file, read_state, tamper

if TYPE_CHECKING:
    from trajledger.verify.keys import PublicKey

    from ..store import ObjectStore
    from .check import LogReport

__all__ = ["LogReader"]

_LOGS: weakref.WeakSet[LogReader] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for log in list(_LOGS):
        log._forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


class LogReader:
    """The reading half of `Log`: the open directory, its classified state, entries, proofs and
    lookups. Reading needs no lock, writes nothing under ``log/``, and sees the latest signed
    checkpoint. Thread-safe and fork-safe; any number of processes may open the same directory.

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
        checked: CheckedNotes | None = None,
    ) -> None:
        """Use `Log.create` or `Log.open`."""
        self.directory = directory
        self.verifier = verifier
        self.checked = checked if checked is not None else CheckedNotes()
        """Verifies this log's checkpoint notes, each note once by each key (its holder's)."""
        self._signer_source = signer
        self._signer: Signer | None = signer if isinstance(signer, Signer) else None
        self._on_publish = on_publish
        self._cleanup = cleanup
        self._pid = os.getpid()
        self._mutex = threading.RLock()
        self._lock_fd: int | None = None
        self._lock_depth = 0  # (`Log._locked` nested in this process: the flock is held once)
        self._recovered = False
        self._cleaned = False
        self._state: LogState | None = None
        self._floor = floor
        self.followed: str | None = None
        """The key this object was opened under, once it followed a rotation another process
        published (`_follow_rotation`): it then signs only with the key it followed to, loaded
        again (`Log._key_now`)."""
        self._readers: dict[int, TileReader] = {}
        self._vkey: tuple[Verifier, str] | None = None
        self._paths_of: LogPaths | None = None
        self._lookup = Lookup(cache_dir / CACHE_DIR if cache_dir else None, verifier.name)
        self.one_record: OneRecord | None = None
        """Set by the ledger: appends of a digest already recorded are judged by it, under the
        lock, whichever writer appends."""
        _LOGS.add(self)

    # -- opening ----------------------------------------------------------------------------------

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
        checked: CheckedNotes | None = None,
    ) -> Self:
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
            checked: verifies the checkpoint notes, each once (its holder's: the ledger's
                handle shares its own with its trust state; default, this log's own).

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
            own = read_regular(path).decode("utf-8").strip()
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
        checked = checked if checked is not None else CheckedNotes()
        seen: Checkpoint | None = None
        if floor is not None:
            try:
                seen = checked(floor, verifier)
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
            checked=checked,
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

    def __enter__(self) -> Self:
        """Use the log in a ``with`` block; it is closed at the end."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the log."""
        self.close()

    # -- the state --------------------------------------------------------------------------------

    def _paths(self) -> LogPaths:
        """The paths of the log's own files, as strings (`LogPaths`; built once)."""
        paths = self._paths_of
        if paths is None or paths.directory is not self.directory:
            paths = self._paths_of = LogPaths(self.directory)
        return paths

    def _state_now(self) -> LogState:
        """The classified state of the directory, re-read when its files changed."""
        st = self._state
        if st is not None:
            paths = self._paths()
            try:
                cp = read_regular(paths.checkpoint)
            except FileNotFoundError:
                cp = None
            except OSError as e:
                raise LogError(f"{paths.checkpoint}: cannot read: {e}") from e
            try:
                ts = read_regular(paths.tree_state)
            except OSError:
                ts = b""
            if (cp, ts) == st.key:
                return st
        try:
            st = read_state(self.directory, self.verifier, self.checked)
        except TamperError:
            followed = self._follow_rotation()
            if followed is None:
                raise
            st = followed
        self._readers = {}
        if self._floor is not None:
            check_floor(self.directory, self._floor, st, self._reader_for(st))
        if st.checkpoint is not None and (
            self._floor is None or st.checkpoint.size >= self._floor.size
        ):
            self._floor = st.checkpoint
        self._state = st
        return st

    def _follow_rotation(self) -> LogState | None:
        """The state after a `Log.rotate_key` another process published since this object read
        the log (its checkpoint then verifies by the new key only): the ``vkey`` file's key is
        taken when the handovers signed by this object's key lead to it (`key_chain`, each
        signed by both keys it names) and the tiles give every handover's tree; the caller then
        checks the floor as always. None when no verified handover leads to it (a replaced key:
        the caller's error stands).

        Raises:
            TamperError: the new key's checkpoint does not verify, or a handover's tree is not
                the log's.
            LogError: the ``vkey`` file or a handover cannot be read (`errors.read_failure`:
                not a replaced key, exit 3).
        """
        from trajledger.verify.errors import ProvenanceError
        from trajledger.verify.log_key import key_chain
        from trajledger.verify.merkle import EMPTY_ROOT

        try:
            own = read_regular(self.directory / VKEY_FILE).decode("utf-8").strip()
            chain = key_chain(self.vkey, self.key_handovers())
        except (OSError, UnicodeDecodeError, ProvenanceError, LogError) as e:
            if read_failure(e) is not None:  # (not a replaced key: one this could not read)
                raise LogError(f"log {self.origin}: its checkpoint is not signed by the key this "
                               f"command opened it with, and whether the key was rotated "
                               f"cannot be read: {e}") from e
            return None
        reached = [h.new for h in chain]
        if own == self.vkey or own not in reached:
            return None
        verifier = verifier_from_vkey(own)
        st = read_state(self.directory, verifier, self.checked)
        reader = TileReader(self._fetch, st.tree_size)
        for h in chain[: reached.index(own) + 1]:
            n = h.checkpoint.size
            if n > st.published or (reader.subtree_root(0, n) if n else EMPTY_ROOT) != (
                    h.checkpoint.root):
                raise tamper(self.directory / VKEY_FILE, f"names {own!r}, handed over at size "
                             f"{n}, but the log's tiles are another tree at that size")
        self.followed = self.followed or self.vkey
        self.verifier = verifier
        return st

    def _reader_for(self, st: LogState) -> TileReader:
        reader = self._readers.get(st.tree_size)
        if reader is None:
            self._readers = {st.tree_size: TileReader(self._fetch, st.tree_size)}
            reader = self._readers[st.tree_size]
        return reader

    def _fetch(self, rel: str) -> bytes:
        return read_regular(self.directory / rel)

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

    # -- simple reads -----------------------------------------------------------------------------

    @property
    def origin(self) -> str:
        """The log's origin (the checkpoint's first line and the log key's name)."""
        return self.verifier.name

    @property
    def vkey(self) -> str:
        """The log's C2SP verifier key string, ``<origin>+<key ID>+<base64 key>``."""
        cached = self._vkey
        if cached is None or cached[0] is not self.verifier:  # (computed again after a rotation)
            cached = self._vkey = (self.verifier, verifier_vkey(self.verifier))
        return cached[1]

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

    # -- proofs -----------------------------------------------------------------------------------

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

    # -- lookups ----------------------------------------------------------------------------------

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

    def _check_signer(self, signer: Signer) -> None:
        raw = note_key_bytes(signer, "log")
        if raw != self.verifier.public_key:
            raise LogError(
                f"log key {signer.name}: is not the key of log {self.origin} (vkey {self.vkey})"
            )

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

    # -- the handle after fork() ------------------------------------------------------------------

    def _forget_after_fork(self) -> None:
        """In a forked child: drop what the parent's process owned (lock descriptor, mutex,
        lookup connection), so this process locks on its own like any other."""
        self._mutex = threading.RLock()
        fd, self._lock_fd, self._lock_depth = self._lock_fd, None, 0
        if fd is not None:
            # The child's copy of the parent's descriptor: closing it does not release the
            # parent's lock (flock belongs to the open file description, still open there).
            with contextlib.suppress(OSError):
                os.close(fd)
        self._pid = os.getpid()
        self._recovered = self._cleaned = False
        self._lookup.forget_after_fork()
        self._readers = {}

    # -- checking ---------------------------------------------------------------------------------

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
