"""The ledger's transparency log: a hash-chained RFC 6962 Merkle log in the C2SP tlog-tiles layout.

Scope: the single writer of ``<ledger>/log/`` (Tessera's POSIX layout), reading entries and
proofs back, checking the whole log (`verify_log_dir`), and the witness that cosigns it
(`cosign`). Files, relative to the log directory::

    checkpoint                   C2SP signed note (tlog-checkpoint) by the log's Ed25519 key
    vkey                         the log's C2SP verifier key string (so readers need no keystore)
    tile/<L>/<N>[.p/<W>]         hash tiles
    tile/entries/<N>[.p/<W>]     entry bundles (uint16 big-endian length prefix per entry)
    .state/lock                  flock()ed by the one process appending
    .state/treeState             {"size":n,"root":"<b64>"}: the commit point
    .state/history               every committed size (u64 BE + CRC-32), so that every partial
                                 tile a published checkpoint needs can be checked for presence
    .state/inflight              exists from an append's first write to its publication
    .state/index                 derived lookup index: per entry, 64-bit prefixes of its
                                 envelope and subject digests

Appending (one process at a time, under the flock): build the entries (each names the leaf hash of
the one before in ``prev``), then write entry bundles and hash tiles, each as temp file + fsync +
rename, append and fsync the history record, then one fsync pass over the directories touched
(group commit: one fsync round per batch, not per entry); then ``treeState`` (commit), the signed
``checkpoint`` (publication). An append interrupted before the commit leaves only files past the
committed size, which are ignored, overwritten or removed by the next writer: all or nothing.
Appending is idempotent by envelope digest, across processes and after a crash.

The lookup index is derived: it is rebuilt from the entries whenever it is missing, stale or
unreadable, and every answer it gives is confirmed against the entry itself. Nothing is verified
against it.

Non-scope: what an entry's envelope says (``ledger.record`` makes them; ``verify/`` checks them),
trust policy, and serving the log over HTTP (the layout can be served as static files).

Spec: schemas/log-entry.v1.md (entries, files, commit protocol), c2sp.org/tlog-tiles,
c2sp.org/tlog-checkpoint, c2sp.org/signed-note, c2sp.org/tlog-cosignature, RFC 6962.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import shutil
import struct
import sys
import threading
import time as _time
import zlib
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trajledger.verify._json import load_object
from trajledger.verify.checkpoint import (
    Checkpoint,
    check_consistent,
    cosignature_message,
    verify_checkpoint,
)
from trajledger.verify.digest import parse_digest, verify_bytes
from trajledger.verify.dsse import Envelope, verify_envelope
from trajledger.verify.errors import (
    DigestMismatchError,
    FormatError,
    SignatureError,
    VerificationError,
)
from trajledger.verify.keys import PublicKey
from trajledger.verify.log_entry import GENESIS_PREV, KINDS, LogEntry
from trajledger.verify.manifest import manifest_from_statement
from trajledger.verify.merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    leaf_hash,
    node_hash,
    root_from_leaf_hashes,
)
from trajledger.verify.note import (
    ALG_COSIGNATURE_V1,
    ALG_ED25519,
    Note,
    Verifier,
    format_signature_line,
    key_hash,
    verifier_from_vkey,
    vkey_string,
)
from trajledger.verify.statement import Statement
from trajledger.verify.tiles import (
    TILE_HEIGHT,
    TILE_WIDTH,
    TileReader,
    entries_path,
    format_entry_bundle,
    parse_entry_bundle,
    parse_tile,
    tile_path,
)
from trajledger.verify.tlog_proof import TlogProof, verify_tlog_proof

from ._fs import TMP_PREFIX, fsync_dir, write_file_atomic
from .errors import KeyError_, LogError, StoreError
from .keys import Signer
from .store import ObjectStore

__all__ = [
    "CHECKPOINT_FILE",
    "KINDS",
    "CosignResult",
    "EntrySpec",
    "Log",
    "LogReport",
    "Problem",
    "cosign",
    "format_tree_state",
    "parse_tree_state",
    "verify_log_dir",
]

CHECKPOINT_FILE = "checkpoint"
VKEY_FILE = "vkey"
STATE_DIR = ".state"
LOCK_FILE = ".state/lock"
TREE_STATE_FILE = ".state/treeState"
HISTORY_FILE = ".state/history"
INFLIGHT_FILE = ".state/inflight"
INDEX_FILE = ".state/index"

_HISTORY_RECORD = struct.Struct(">QI")
_ZERO_HASH = bytes(HASH_SIZE)
_INDEX_RECORD = 16
_MERGE_AT = 1 << 16


def _now() -> str:
    return _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime())


def _digest_key(digest: str) -> int:
    # 64 bits of the digest: enough to find candidates, which are then confirmed on the entry.
    return int(digest[7:23], 16)


# -- small formats ----------------------------------------------------------------------------


def format_tree_state(size: int, root: bytes) -> bytes:
    """Return the ``.state/treeState`` bytes: ``{"size":n,"root":"<b64>"}`` (Tessera's form)."""
    return b'{"size":%d,"root":"%s"}' % (size, base64.b64encode(root))


def parse_tree_state(data: bytes) -> tuple[int, bytes]:
    """Parse ``.state/treeState`` strictly.

    Args:
        data: the file's bytes.

    Returns:
        The committed size and root.

    Raises:
        FormatError: not a JSON object with exactly an integer ``size`` >= 0 and a ``root`` of
            canonical base64 of 32 bytes.
    """
    obj = load_object(data, "treeState")
    if set(obj) != {"size", "root"}:
        raise FormatError(f"treeState: fields are {sorted(obj)}, want ['root', 'size']")
    size, root_b64 = obj["size"], obj["root"]
    if type(size) is not int or size < 0:
        raise FormatError(f"treeState: size {size!r}, want an integer >= 0")
    if not isinstance(root_b64, str):
        raise FormatError(f"treeState: root is {type(root_b64).__name__}, want base64 text")
    try:
        root = base64.b64decode(root_b64, validate=True)
    except binascii.Error as e:
        raise FormatError(f"treeState: root {root_b64!r} is not base64") from e
    if len(root) != HASH_SIZE or base64.b64encode(root).decode() != root_b64:
        raise FormatError(f"treeState: root {root_b64!r} is not canonical base64 of 32 bytes")
    return size, root


def _history_record(size: int) -> bytes:
    body = struct.pack(">Q", size)
    return _HISTORY_RECORD.pack(size, zlib.crc32(body))


def _parse_history(data: bytes) -> tuple[list[int], int | None, bool]:
    """Split history bytes into sizes; returns (sizes, record number of a bad CRC, torn tail)."""
    sizes: list[int] = []
    whole = len(data) - len(data) % _HISTORY_RECORD.size
    for off in range(0, whole, _HISTORY_RECORD.size):
        size, crc = _HISTORY_RECORD.unpack_from(data, off)
        if zlib.crc32(data[off : off + 8]) != crc:
            return sizes, off // _HISTORY_RECORD.size, whole != len(data)
        sizes.append(size)
    return sizes, None, whole != len(data)


def _partial_widths(size: int) -> Iterator[tuple[int, int, int]]:
    """Yield (level, tile index, width) of every partial tile a tree of ``size`` has."""
    level = 0
    while size >> (TILE_HEIGHT * level):
        width = (size >> (TILE_HEIGHT * level)) % TILE_WIDTH
        if width:
            yield level, size >> (TILE_HEIGHT * (level + 1)), width
        level += 1


def _tile_rel(level: int, index: int, width: int | None = None) -> str:
    """Path of a hash tile (level >= 0) or an entry bundle (level -1)."""
    return entries_path(index, width) if level < 0 else tile_path(level, index, width)


def _parse_tile_rel(rel: str) -> tuple[int, int, int | None] | None:
    """Parse a canonical path below ``tile/`` into (level or -1 for entries, index, width)."""
    parts = rel.split("/")
    if len(parts) < 3 or parts[0] != "tile":
        return None
    if parts[1] == "entries":
        level = -1
    elif parts[1].isdigit() and str(int(parts[1])) == parts[1] and int(parts[1]) <= 63:
        level = int(parts[1])
    else:
        return None
    rest = parts[2:]
    width: int | None = None
    if len(rest) >= 2 and rest[-2].endswith(".p"):
        if not rest[-1].isdigit():
            return None
        width = int(rest[-1])
        rest = [*rest[:-2], rest[-2][:-2]]
    index = 0
    for i, group in enumerate(rest):
        digits = group[1:] if i < len(rest) - 1 else group
        if (i < len(rest) - 1 and not group.startswith("x")) or not (
            len(digits) == 3 and digits.isdigit()
        ):
            return None
        index = index * 1000 + int(digits)
    try:
        canonical = _tile_rel(level, index, width)
    except ValueError:
        return None
    return (level, index, width) if canonical == rel else None


# -- entries to append ------------------------------------------------------------------------


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


# -- the right edge of the tree, in memory ----------------------------------------------------


@dataclass
class _Edge:
    """What appending needs from a committed tree: its compact range and rightmost tiles.

    ``compact`` holds (height, hash) of the perfect subtrees the tree splits into, largest first;
    ``tiles[L]`` the hashes of the partial tile at level L; ``bundle`` the partial entry bundle.
    """

    size: int
    compact: list[tuple[int, bytes]]
    tiles: list[list[bytes]]
    bundle: list[bytes]
    prev: bytes
    root: bytes = b""

    def __post_init__(self) -> None:
        if not self.root:
            self.root = _fold(self.compact)

    def extend(
        self, entries: Sequence[bytes], hashes: Sequence[bytes]
    ) -> tuple[_Edge, list[tuple[str, bytes]], list[str], dict[int, tuple[int, int]]]:
        """Append entries; return the new edge, the files to write, the tiles completed, and
        the partial tile each level now ends with (level -1: entry bundle)."""
        n = self.size
        compact = list(self.compact)
        tiles = [list(t) for t in self.tiles]
        bundle = list(self.bundle)
        bundle_writes: list[tuple[str, bytes]] = []
        tile_writes: dict[int, list[tuple[str, bytes]]] = {}
        completed: list[str] = []
        touched: set[int] = set()

        def push(level: int, pos: int, h: bytes) -> None:
            while len(tiles) <= level:
                tiles.append([])
            tile = tiles[level]
            tile.append(h)
            touched.add(level)
            if len(tile) == TILE_WIDTH:
                path = tile_path(level, pos >> TILE_HEIGHT)
                tile_writes.setdefault(level, []).append((path, b"".join(tile)))
                completed.append(path)
                tiles[level] = []

        for raw, lh in zip(entries, hashes, strict=True):
            bundle.append(raw)
            if len(bundle) == TILE_WIDTH:
                path = entries_path(n >> TILE_HEIGHT)
                bundle_writes.append((path, format_entry_bundle(bundle)))
                completed.append(path)
                bundle = []
            push(0, n, lh)
            n += 1
            compact.append((0, lh))
            while len(compact) > 1 and compact[-1][0] == compact[-2][0]:
                height, right = compact.pop()
                _, left = compact.pop()
                height += 1
                node = node_hash(left, right)
                compact.append((height, node))
                if height % TILE_HEIGHT == 0:
                    push(height // TILE_HEIGHT, (n >> height) - 1, node)

        partial: dict[int, tuple[int, int]] = {}
        if bundle and entries:
            path = entries_path(n >> TILE_HEIGHT, len(bundle))
            bundle_writes.append((path, format_entry_bundle(bundle)))
            partial[-1] = (n >> TILE_HEIGHT, len(bundle))
        writes = list(bundle_writes)
        for level in sorted(set(tile_writes) | touched):
            writes.extend(tile_writes.get(level, []))
            if level in touched and tiles[level]:
                index = n >> (TILE_HEIGHT * (level + 1))
                writes.append((tile_path(level, index, len(tiles[level])), b"".join(tiles[level])))
                partial[level] = (index, len(tiles[level]))
        edge = _Edge(n, compact, tiles, bundle, hashes[-1] if hashes else self.prev)
        return edge, writes, completed, partial


def _fold(compact: Sequence[tuple[int, bytes]]) -> bytes:
    if not compact:
        return EMPTY_ROOT
    root = compact[-1][1]
    for _, h in reversed(compact[:-1]):
        root = node_hash(h, root)
    return root


# -- the derived lookup index -----------------------------------------------------------------


class _Index:
    """Envelope and subject lookups, derived from the entries and rebuildable at any time.

    ``.state/index`` holds one 16-byte record per entry, in log order: the first 64 bits of the
    envelope digest and of the subject digest (little-endian). Writers append records after each
    commit (no fsync: a lost tail is rebuilt from the entries); every process keeps the records
    in memory with sorted copies (numpy) for lookups. Lookups only give candidates: callers
    confirm each one on the entry, and a record that disagrees with its entry makes the index be
    rebuilt. Nothing is verified against it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.loaded = False
        self.file_valid = 0  # leading file records known to equal the records in memory
        self._keys = (array("Q"), array("Q"))
        self._sorted: list[tuple[Any, Any]] = []
        self._sorted_n = 0
        self._tail: tuple[dict[int, list[int]], dict[int, list[int]]] = ({}, {})

    @property
    def count(self) -> int:
        """How many entries (from index 0) the records in memory cover."""
        return len(self._keys[0])

    def record(self, i: int) -> tuple[int, int]:
        """The (envelope key, subject key) recorded for entry ``i``."""
        return self._keys[0][i], self._keys[1][i]

    def clear(self) -> None:
        """Forget every record (the next sync rebuilds them from the entries)."""
        self._keys = (array("Q"), array("Q"))
        self._sorted, self._sorted_n, self._tail = [], 0, ({}, {})
        self.file_valid = 0

    def drop_from(self, n: int) -> None:
        """Forget the records of entries ``n`` and later."""
        if n < self.count:
            for a in self._keys:
                del a[n:]
            self._sorted, self._sorted_n, self._tail = [], 0, ({}, {})
        self.file_valid = min(self.file_valid, n)

    def read_file(self, size: int) -> int:
        """Load records from the file for entries ``count`` .. ``size - 1``; return how many."""
        self.loaded = True
        start = self.count
        try:
            with open(self.path, "rb") as f:
                f.seek(start * _INDEX_RECORD)
                data = f.read((size - start) * _INDEX_RECORD) if size > start else b""
        except FileNotFoundError:
            return 0
        rows = array("Q", data[: len(data) - len(data) % _INDEX_RECORD])
        if sys.byteorder == "big":
            rows.byteswap()
        self.add(rows[0::2], rows[1::2])
        if self.file_valid == start:
            self.file_valid = self.count
        return len(rows) // 2

    def add(self, envs: Sequence[int], subjects: Sequence[int]) -> None:
        """Append records for the next entries."""
        start = self.count
        self._keys[0].extend(envs)
        self._keys[1].extend(subjects)
        if self._sorted and self.count - self._sorted_n <= _MERGE_AT:
            for column, keys in enumerate((envs, subjects)):
                tail = self._tail[column]
                for i, k in enumerate(keys, start):
                    tail.setdefault(k, []).append(i)

    def persist(self) -> None:
        """Make the file hold exactly the records in memory (under the log's lock)."""
        try:
            have = self.path.stat().st_size
        except FileNotFoundError:
            have = 0
        n = min(have // _INDEX_RECORD, self.file_valid, self.count)
        with open(self.path, "ab") as f:
            if have != n * _INDEX_RECORD:
                f.truncate(n * _INDEX_RECORD)
            if n < self.count:
                rows = array("Q", bytes(16 * (self.count - n)))
                rows[0::2] = self._keys[0][n:]
                rows[1::2] = self._keys[1][n:]
                if sys.byteorder == "big":
                    rows.byteswap()
                f.write(rows.tobytes())
        self.file_valid = self.count

    def lookup(self, column: int, keys: Sequence[int]) -> dict[int, list[int]]:
        """Candidate indices for each key (column 0: envelopes, 1: subjects), ascending."""
        import numpy as np

        if not self._sorted or self.count - self._sorted_n > _MERGE_AT:
            self._sorted = []
            for col in self._keys:
                values = np.frombuffer(col, dtype=np.uint64) if len(col) else np.zeros(0, np.uint64)
                order = np.argsort(values, kind="stable")
                self._sorted.append((values[order], order))
            self._sorted_n = self.count
            self._tail = ({}, {})
        values, order = self._sorted[column]
        wanted = np.array(sorted(set(keys)), dtype=np.uint64)
        lo = np.searchsorted(values, wanted, side="left")
        hi = np.searchsorted(values, wanted, side="right")
        out: dict[int, list[int]] = {}
        for k, a, b in zip(wanted.tolist(), lo.tolist(), hi.tolist(), strict=True):
            hits = sorted(order[a:b].tolist()) if b > a else []
            hits += self._tail[column].get(k, [])
            if hits:
                out[k] = hits
        return out


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


# -- the log ----------------------------------------------------------------------------------


SignerSource = Signer | Callable[[], Signer] | None


class Log:
    """An open transparency log directory. Build with `Log.create` or `Log.open`.

    Reading (entries, proofs, lookups) needs no lock and sees the latest committed state.
    Appending needs the log's signer (passed directly, or as a function called on first use so
    that an encrypted key is only decrypted when something is appended). A `Log` is thread-safe;
    any number of processes may open the same directory.

    Attributes:
        directory: the log directory.
        verifier: the log's public key as a signed-note verifier.
    """

    def __init__(self, directory: Path, verifier: Verifier, signer: SignerSource) -> None:
        """Use `Log.create` or `Log.open`."""
        self.directory = directory
        self.verifier = verifier
        self._signer_source = signer
        self._signer: Signer | None = signer if isinstance(signer, Signer) else None
        self._mutex = threading.RLock()
        self._lock_fd: int | None = None
        self._recovered = False
        self._edge: _Edge | None = None
        self._readers: dict[int, TileReader] = {}
        self._dirs: set[Path] = set()
        self._index = _Index(directory / INDEX_FILE)

    # -- creating and opening -----------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, origin: str, signer: Signer) -> Log:
        """Create an empty log: its verifier key, a treeState of size 0 and a signed checkpoint.

        Args:
            directory: where the log lives (created; must not already hold a log).
            origin: the checkpoint origin, also the log key's name in the signed note.
            signer: the log's Ed25519 key.

        Returns:
            The open log.

        Raises:
            LogError: a log already exists there, the origin is not a valid key name, the key is
                not Ed25519, or the files cannot be written.
        """
        verifier = _log_verifier(origin, signer)
        if (directory / TREE_STATE_FILE).exists() or (directory / CHECKPOINT_FILE).exists():
            raise LogError(f"{directory}: a log already exists here")
        log = cls(directory, verifier, signer)
        try:
            (directory / STATE_DIR).mkdir(parents=True, exist_ok=True)
            write_file_atomic(directory / VKEY_FILE, verifier.vkey.encode() + b"\n")
            with log._locked():
                write_file_atomic(directory / TREE_STATE_FILE, format_tree_state(0, EMPTY_ROOT))
                log._publish(signer, 0, EMPTY_ROOT)
                log._recovered = True
        except OSError as e:
            raise LogError(f"{directory}: cannot create the log: {e.strerror or e}") from e
        log._edge = _Edge(0, [], [], [], _ZERO_HASH)
        return log

    @classmethod
    def open(cls, directory: Path, signer: SignerSource = None) -> Log:
        """Open a log; recover from an interrupted append when no other process is appending.

        Steps:
            1. Read the verifier key (``vkey``) and check ``signer`` is the log's key.
            2. Read treeState and rebuild the right edge of the tree from the tiles; its root
               must equal treeState's.
            3. If the flock is free: drop temp files, remove leftovers past the committed size,
               truncate the history to the committed size, republish a missing or stale
               checkpoint (with a signer). Otherwise the next append does it.

        Args:
            directory: the log directory.
            signer: the log's key (or a function returning it), needed only to append.

        Returns:
            The open log.

        Raises:
            LogError: no log there, an unreadable or inconsistent state, or a signer that is not
                the log's key.
        """
        # (1)
        try:
            vkey = (directory / VKEY_FILE).read_text("utf-8").strip()
        except FileNotFoundError as e:
            raise LogError(f"{directory}: no log here (no {VKEY_FILE} file)") from e
        except (OSError, UnicodeDecodeError) as e:
            raise LogError(f"{directory / VKEY_FILE}: cannot read: {e}") from e
        try:
            verifier = verifier_from_vkey(vkey)
        except FormatError as e:
            raise LogError(f"{directory / VKEY_FILE}: {e}") from e
        log = cls(directory, verifier, signer)
        if isinstance(signer, Signer):
            log._check_signer(signer)
        # (2)
        with log._mutex:
            log._current_edge()
        # (3)
        log._try_recover()
        return log

    def close(self) -> None:
        """Release the lock file and the index. The object is unusable afterwards."""
        with self._mutex:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> Log:
        """Use the log in a ``with`` block; it is closed at the end."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the log."""
        self.close()

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
        """Read the committed size and root from treeState.

        Raises:
            LogError: treeState is missing or malformed.
        """
        path = self.directory / TREE_STATE_FILE
        try:
            return parse_tree_state(path.read_bytes())
        except FileNotFoundError as e:
            raise LogError(
                f"{path}: missing; the log is damaged (run 'trajledger log verify')"
            ) from e
        except OSError as e:
            raise LogError(f"{path}: cannot read: {e.strerror}") from e
        except FormatError as e:
            raise LogError(f"{path}: {e}; the log is damaged (run 'trajledger log verify')") from e

    @property
    def size(self) -> int:
        """The committed number of entries (read afresh: other processes may have appended)."""
        return self.tree_state()[0]

    def checkpoint_bytes(self) -> bytes:
        """The published signed checkpoint, verbatim (with any witness cosignatures).

        Raises:
            LogError: the checkpoint file is missing or unreadable.
        """
        path = self.directory / CHECKPOINT_FILE
        try:
            return path.read_bytes()
        except OSError as e:
            raise LogError(f"{path}: cannot read: {e.strerror}") from e

    def checkpoint(self) -> Checkpoint:
        """The published checkpoint, after verifying its signature by the log's key.

        Raises:
            LogError: the checkpoint file is missing.
            FormatError: it is malformed.
            SignatureError: it is not signed by the log's key.
        """
        return verify_checkpoint(self.checkpoint_bytes(), self.verifier, origin=self.origin)

    def _fetch(self, rel: str) -> bytes:
        return (self.directory / rel).read_bytes()

    def _reader(self, size: int) -> TileReader:
        reader = self._readers.get(size)
        if reader is None:
            self._readers = {size: TileReader(self._fetch, size)}
            reader = self._readers[size]
        return reader

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Turn a tile that vanished or never existed into a LogError naming it."""
        try:
            yield
        except FileNotFoundError as e:
            where = os.path.relpath(e.filename, self.directory) if e.filename else "a tile"
            raise LogError(
                f"log {where}: missing; the log is damaged (run 'trajledger log verify')"
            ) from e
        except OSError as e:
            raise LogError(f"log: cannot read {e.filename}: {e.strerror}") from e

    def _check_range(self, what: str, start: int, end: int, size: int) -> None:
        if not 0 <= start <= end <= size:
            raise LogError(f"{what} [{start}, {end}) is outside the log of size {size}")

    def entries(self, start: int, end: int) -> list[bytes]:
        """Entries ``start`` to ``end - 1``, as stored (their bytes are their leaf preimages).

        Raises:
            LogError: the range is outside the log, or a bundle is missing.
            FormatError: a bundle is malformed.
        """
        with self._mutex:
            size = self.size
            self._check_range("entry range", start, end, size)
            with self._reading():
                return self._reader(size).entries(start, end)

    def entry(self, index: int) -> bytes:
        """The bytes of entry ``index``.

        Raises:
            LogError: no such entry, or its bundle is missing.
            FormatError: the bundle is malformed.
        """
        with self._mutex:
            size = self.size
            if not 0 <= index < size:
                raise LogError(f"log entry {index}: outside the log of size {size}")
            with self._reading():
                return self._reader(size).entries(index, index + 1)[0]

    # -- proofs -----------------------------------------------------------------------------

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """The RFC 6962 inclusion proof of entry ``index`` in the tree of ``size`` entries.

        Args:
            index: the entry.
            size: the tree size; default the committed size.

        Raises:
            LogError: ``index``/``size`` outside the log, or a tile is missing.
        """
        with self._mutex:
            current = self.size
            n = current if size is None else size
            if not 0 <= index < n <= current:
                raise LogError(
                    f"inclusion proof for entry {index} at size {n}: want "
                    f"0 <= index < size <= {current}"
                )
            with self._reading():
                return self._reader(current).inclusion_proof(index, n)

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        """The RFC 6962 consistency proof from the tree of ``old`` entries to ``new``.

        Args:
            old: the older size, at least 1.
            new: the newer size; default the committed size.

        Raises:
            LogError: sizes outside ``1 <= old <= new <= size``, or a tile is missing.
        """
        with self._mutex:
            current = self.size
            n = current if new is None else new
            if not 0 < old <= n <= current:
                raise LogError(
                    f"consistency proof from size {old} to {n}: want 1 <= old <= new <= {current}"
                )
            with self._reading():
                return self._reader(current).consistency_proof(old, n)

    def root_at(self, size: int) -> bytes:
        """The root of the tree of the first ``size`` entries, from the tiles (not verified).

        Raises:
            LogError: ``size`` beyond the log, or a tile is missing.
        """
        with self._mutex:
            current = self.size
            if not 0 <= size <= current:
                raise LogError(f"tree size {size}: outside the log of size {current}")
            with self._reading():
                return self._reader(current).subtree_root(0, size)

    def tlog_proof(self, index: int) -> TlogProof:
        """An offline ``c2sp.org/tlog-proof@v1`` proof of entry ``index`` under the checkpoint.

        The proof is checked (`verify_tlog_proof`) before it is returned.

        Raises:
            LogError: the entry is not covered by the published checkpoint, or a file is missing.
            FormatError, SignatureError: the published checkpoint is malformed or badly signed.
        """
        with self._mutex:
            cp_bytes = self.checkpoint_bytes()
            cp = verify_checkpoint(cp_bytes, self.verifier, origin=self.origin)
            if not 0 <= index < cp.size:
                raise LogError(
                    f"log entry {index}: not covered by the published checkpoint of size {cp.size}"
                )
            proof = TlogProof(index, tuple(self.inclusion_proof(index, cp.size)), cp_bytes)
            verify_tlog_proof(proof, self.entry(index), self.verifier, self.origin)
            return proof

    # -- lookups --------------------------------------------------------------------------------

    def find_envelope(self, digest: str) -> int | None:
        """The index of the entry naming envelope ``digest``, or None.

        Raises:
            FormatError: ``digest`` is not a ``sha256:<hex>`` string.
            LogError: a bundle is missing.
        """
        parse_digest(digest, "envelope digest")
        with self._mutex:
            found = self._lookup("env", [digest], self.size)
            hits = found.get(digest, [])
            return hits[0] if hits else None

    def find_subject(self, digest: str) -> list[int]:
        """The indices of every entry about subject ``digest``, in log order.

        Raises:
            FormatError: ``digest`` is not a ``sha256:<hex>`` string.
            LogError: a bundle is missing.
        """
        parse_digest(digest, "subject digest")
        with self._mutex:
            return self._lookup("subj", [digest], self.size).get(digest, [])

    def _lookup(self, column: str, digests: Sequence[str], size: int) -> dict[str, list[int]]:
        """Indices of the entries whose envelope (column "env") or subject ("subj") is one of
        ``digests``, confirmed on the entries themselves."""
        self._sync_index(size, write=False)
        col = 0 if column == "env" else 1
        wanted = set(digests)
        out: dict[str, list[int]] = {}
        reader = self._reader(size)
        with self._reading():
            for indices in self._index.lookup(col, [_digest_key(d) for d in digests]).values():
                for i in indices:
                    if i >= size:
                        continue
                    entry = LogEntry.from_bytes(reader.entries(i, i + 1)[0], f"log entry {i}")
                    value = entry.envelope if col == 0 else entry.subject
                    if value in wanted:
                        out.setdefault(value, []).append(i)
        return out

    def _index_matches(self, i: int, size: int) -> bool:
        """Whether the index record of entry ``i`` agrees with the entry."""
        raw = self._reader(size).entries(i, i + 1)[0]
        try:
            entry = LogEntry.from_bytes(raw, f"log entry {i}")
        except FormatError:
            return False
        return self._index.record(i) == (_digest_key(entry.envelope), _digest_key(entry.subject))

    def _sync_index(self, size: int, *, write: bool) -> None:
        """Make the in-memory index cover entries 0 .. ``size - 1``; with ``write`` (under the
        lock) also the index file.

        Records are taken from the file where another process wrote them, checked on their last
        entry, and otherwise rebuilt by parsing the entries.
        """
        ix = self._index
        with self._reading():
            if ix.count > size:
                ix.clear()
            if not ix.loaded or ix.count < size:
                before = ix.count
                if ix.read_file(size) and not self._index_matches(ix.count - 1, size):
                    ix.drop_from(before)
                    if before and not self._index_matches(before - 1, size):
                        ix.clear()
            reader = self._reader(size)
            step = 64 * TILE_WIDTH
            while ix.count < size:
                start = ix.count
                raws = reader.entries(start, min(size, start + step))
                envs, subjects = [], []
                for i, raw in enumerate(raws, start):
                    e = LogEntry.from_bytes(raw, f"log entry {i}")
                    envs.append(_digest_key(e.envelope))
                    subjects.append(_digest_key(e.subject))
                ix.add(envs, subjects)
        if write:
            with contextlib.suppress(OSError):
                ix.persist()  # derived data: the next writer rebuilds what is missing

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
        try:
            raw = signer.public.raw_ed25519()
        except FormatError as e:
            raise LogError(
                f"log key {signer.name}: is {signer.public.algorithm}, want ed25519"
            ) from e
        if raw != self.verifier.public_key:
            raise LogError(
                f"log key {signer.name}: is not the key of log {self.origin} (vkey {self.vkey})"
            )

    def append(self, specs: Sequence[EntrySpec]) -> list[int]:
        """Append entries in one group commit; return each one's index.

        An entry whose envelope is already in the log (appended earlier, by any process, or
        earlier in ``specs``) is not added again: its existing index is returned.

        Steps:
            1. Take the flock; recover from a crashed writer if needed; reload the tree if
               another process appended; bring the lookup index up to date.
            2. Find the envelopes already logged (confirmed on the entries).
            3. Build the new entries, chained by ``prev``; compute the new tiles.
            4. Write bundles, tiles and the history record; one directory fsync pass.
            5. Write treeState (the commit), then the signed checkpoint (publication).

        Args:
            specs: the entries to append, in order.

        Returns:
            The index of each spec's entry, in the order of ``specs``.

        Raises:
            LogError: no signer, another log's key, a damaged log, an envelope already logged
                with another kind or subject, or an I/O error (the log is then unchanged unless
                the error came after the commit, in which case the entries are in the log and a
                retry returns their indices).
        """
        if not specs:
            return []
        signer = self._get_signer()
        with self._mutex, self._locked():
            # (1)
            self._recover_if_needed()
            edge = self._current_edge()
            self._sync_index(edge.size, write=True)
            # (2)
            existing = self._lookup("env", [s.envelope for s in specs], edge.size)
            new: list[EntrySpec] = []
            pending: dict[str, int] = {}
            result: list[int] = []
            for spec in specs:
                hits = existing.get(spec.envelope)
                if hits:
                    self._check_same(hits[0], spec, edge.size)
                    result.append(hits[0])
                    continue
                index = pending.get(spec.envelope)
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
                self._commit(edge, new, signer)
            return result

    def _check_same(self, index: int, spec: EntrySpec, size: int) -> None:
        with self._reading():
            entry = LogEntry.from_bytes(self._reader(size).entries(index, index + 1)[0])
        if (entry.kind, entry.subject) != (spec.kind, spec.subject):
            raise LogError(
                f"envelope {spec.envelope}: already logged at index {index} as {entry.kind} of "
                f"{entry.subject}, not {spec.kind} of {spec.subject}"
            )

    def _commit(self, edge: _Edge, specs: Sequence[EntrySpec], signer: Signer) -> None:
        # (3)
        now = _now()
        raws: list[bytes] = []
        hashes: list[bytes] = []
        prev = edge.prev
        for spec in specs:
            raw = spec.entry(prev.hex(), now).to_bytes()
            prev = leaf_hash(raw)
            raws.append(raw)
            hashes.append(prev)
        new_edge, writes, completed, partial = edge.extend(raws, hashes)
        try:
            inflight = self.directory / INFLIGHT_FILE
            inflight.touch()
            self._drop_stale_partials(edge.size, partial)
            # (4)
            dirs: set[Path] = set()
            for rel, data in writes:
                self._write(rel, data, dirs)
            self._append_history(new_edge.size, dirs)
            for d in sorted(dirs):
                fsync_dir(d)
            # (5)
            dirs = set()
            self._write(TREE_STATE_FILE, format_tree_state(new_edge.size, new_edge.root), dirs)
            for d in dirs:
                fsync_dir(d)
        except OSError as e:
            raise LogError(f"log {self.origin}: cannot append: {e.strerror or e}") from e
        self._edge = new_edge
        self._readers = {}
        try:
            self._publish(signer, new_edge.size, new_edge.root)
        except OSError as e:
            raise LogError(
                f"log {self.origin}: entries {edge.size}..{new_edge.size - 1} are committed but "
                f"the checkpoint could not be written: {e.strerror or e}"
            ) from e
        _unlink(inflight)
        for rel in completed:
            pdir = self.directory / (rel + ".p")
            shutil.rmtree(pdir, ignore_errors=True)
            self._dirs.discard(pdir)
        self._index.add(
            [_digest_key(s.envelope) for s in specs], [_digest_key(s.subject) for s in specs]
        )
        with contextlib.suppress(OSError):
            self._index.persist()  # derived data: a missing tail is rebuilt from the entries

    def _write(self, rel: str, data: bytes, dirs: set[Path]) -> None:
        """Temp file + fsync + rename; the directory is added to ``dirs`` for the fsync pass."""
        path = self.directory / rel
        parent = path.parent
        self._ensure_dir(parent, dirs)
        tmp = parent / (TMP_PREFIX + path.name)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        dirs.add(parent)

    def _ensure_dir(self, directory: Path, dirs: set[Path]) -> None:
        if directory in self._dirs:
            return
        missing: list[Path] = []
        d = directory
        while not d.is_dir():
            missing.append(d)
            d = d.parent
        for m in reversed(missing):
            m.mkdir(exist_ok=True)
            dirs.add(m.parent)
        self._dirs.add(directory)

    def _append_history(self, size: int, dirs: set[Path]) -> None:
        path = self.directory / HISTORY_FILE
        created = not path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, _history_record(size))
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            dirs.add(path.parent)

    def _drop_stale_partials(self, size: int, partial: Mapping[int, tuple[int, int]]) -> None:
        """Before writing, remove partial widths no commit produced (leftovers of an append that
        died without leaving its inflight marker) from the tiles this batch writes a partial
        version of and from the committed right edge."""
        targets = {(level, index) for level, (index, _width) in partial.items()}
        targets.update((level, index) for level, index, _w in _partial_widths(size))
        targets.update((-1, index) for level, index, _w in _partial_widths(size) if level == 0)
        for level, index in targets:
            pdir = self.directory / (_tile_rel(level, index) + ".p")
            if not pdir.is_dir():
                continue
            shift = TILE_HEIGHT * (level + 1) if level >= 0 else TILE_HEIGHT
            cur_width = (size >> (shift - TILE_HEIGHT)) % TILE_WIDTH
            keep = cur_width if index == size >> shift else 0
            for name in os.listdir(pdir):
                if not (name.isdigit() and int(name) <= keep):
                    _remove(pdir / name)

    def _publish(self, signer: Signer, size: int, root: bytes) -> None:
        text = Checkpoint(self.origin, size, root).to_text()
        sig = signer.sign(text)
        line = format_signature_line(self.origin, self.verifier.key_hash, sig)
        write_file_atomic(self.directory / CHECKPOINT_FILE, text + b"\n" + line)

    # -- locking and recovery -------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, *, blocking: bool = True) -> Iterator[bool]:
        with self._mutex:
            if self._lock_fd is None:
                path = self.directory / LOCK_FILE
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    self._lock_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                except OSError as e:
                    raise LogError(f"{path}: cannot open the lock: {e.strerror}") from e
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _try_recover(self) -> None:
        # A read-only log (an archive, a copy) is still readable and provable: skip recovery.
        if not os.access(self.directory / STATE_DIR, os.W_OK):
            return
        with self._locked(blocking=False) as got:
            if got:
                self._recover_if_needed()

    def _recover_if_needed(self) -> None:
        """Under the lock: clean up after a writer that died, once per open or after a crash."""
        if self._recovered and not (self.directory / INFLIGHT_FILE).exists():
            return
        size, root = self.tree_state()
        self._dirs.clear()
        try:
            self._remove_leftovers(size)
            self._truncate_history(size)
        except OSError as e:
            raise LogError(f"log {self.origin}: cannot recover: {e.strerror or e}") from e
        self._current_edge()
        try:
            cp = Checkpoint.from_text(Note.from_bytes(self.checkpoint_bytes()).text)
            stale = (cp.size, cp.root) != (size, root)
        except (LogError, FormatError):
            stale = True
        if stale:
            # The key is only loaded when there is something to republish; without it (a reader,
            # no passphrase) the checkpoint lags until the next append.
            try:
                signer: Signer | None = self._get_signer()
            except (LogError, KeyError_):
                signer = None
            if signer is not None:
                try:
                    self._publish(signer, size, root)
                except OSError as e:
                    raise LogError(f"log {self.origin}: cannot republish: {e.strerror}") from e
        _unlink(self.directory / INFLIGHT_FILE)
        self._recovered = True

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
                path = self.directory / _tile_rel(level, index)
                pdir = Path(str(path) + ".p")
                if path.parent not in seen:
                    seen.add(path.parent)
                    _drop_temp_files(path.parent)
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
                pdir = self.directory / (_tile_rel(level, index) + ".p")
                if not pdir.exists():
                    break
                _remove(pdir)
                index -= 1

    def _truncate_history(self, size: int) -> None:
        """Drop history records past the committed size (an append that did not commit)."""
        path = self.directory / HISTORY_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        sizes, bad, _torn = _parse_history(data)
        if bad is not None:
            return  # damaged, not interrupted: leave it for 'log verify' to report
        keep = sum(1 for s in sizes if s <= size)
        if (sizes[keep - 1] if keep else 0) != size:
            return  # it does not record the committed size: damaged, leave it
        end = keep * _HISTORY_RECORD.size
        if end < len(data):
            with open(path, "r+b") as f:
                f.truncate(end)
                f.flush()
                os.fsync(f.fileno())

    def _current_edge(self) -> _Edge:
        """The right edge of the committed tree; reloaded from the tiles when it changed."""
        size, root = self.tree_state()
        edge = self._edge
        if edge is not None and edge.size == size and edge.root == root:
            return edge
        self._readers = {}
        with self._reading():
            edge = self._load_edge(size)
        if edge.root != root:
            raise LogError(
                f"log {self.directory}: the tiles give root {base64.b64encode(edge.root).decode()} "
                f"at size {size}, but treeState says {base64.b64encode(root).decode()}; the log "
                "is damaged (run 'trajledger log verify')"
            )
        self._edge = edge
        return edge

    def _load_edge(self, size: int) -> _Edge:
        # The partial tiles first: they are what a committed size needs, and what is named
        # when one is missing (the reader below falls back to full tiles).
        tiles: list[list[bytes]] = []
        level = 0
        while size >> (TILE_HEIGHT * level):
            width = (size >> (TILE_HEIGHT * level)) % TILE_WIDTH
            index = size >> (TILE_HEIGHT * (level + 1))
            rel = tile_path(level, index, width) if width else ""
            try:
                tiles.append(parse_tile(self._fetch(rel), width) if width else [])
            except FormatError as e:
                raise LogError(f"log {rel}: {e}; the log is damaged") from e
            level += 1
        bundle: list[bytes] = []
        width = size % TILE_WIDTH
        if width:
            rel = entries_path(size >> TILE_HEIGHT, width)
            try:
                bundle = parse_entry_bundle(self._fetch(rel), width=width)
            except FormatError as e:
                raise LogError(f"log {rel}: {e}; the log is damaged") from e
            if [leaf_hash(e) for e in bundle] != tiles[0]:
                raise LogError(
                    f"log {rel}: its entries do not hash to the leaves of "
                    f"{tile_path(0, size >> TILE_HEIGHT, width)}; the log is damaged"
                )
        reader = self._reader(size)
        compact: list[tuple[int, bytes]] = []
        start = 0
        for height in range(size.bit_length() - 1, -1, -1):
            if size >> height & 1:
                compact.append((height, reader.node_hash(height, start >> height)))
                start += 1 << height
        prev = reader.leaf_hashes(size - 1, size)[0] if size else _ZERO_HASH
        return _Edge(size, compact, tiles, bundle, prev)

    # -- checking -------------------------------------------------------------------------------

    def verify(
        self,
        store: ObjectStore | None = None,
        *,
        keys: Mapping[str, PublicKey] | None = None,
        deep: bool = False,
    ) -> LogReport:
        """Check the whole log; see `verify_log_dir`. The log's own ``vkey`` is trusted."""
        return verify_log_dir(self.directory, vkey=self.vkey, store=store, keys=keys, deep=deep)


def _log_verifier(origin: str, signer: Signer) -> Verifier:
    try:
        raw = signer.public.raw_ed25519()
    except FormatError as e:
        raise LogError(f"log key {signer.name}: is {signer.public.algorithm}, want ed25519") from e
    try:
        return verifier_from_vkey(vkey_string(origin, raw, ALG_ED25519))
    except FormatError as e:
        raise LogError(f"log origin {origin!r}: {e}") from e


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        _unlink(path)


def _drop_temp_files(directory: Path) -> None:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(TMP_PREFIX):
            _remove(directory / name)


# -- checking a log directory -----------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a log: the file (relative to the log directory) and entry index.

    Attributes:
        file: the file the problem is in, e.g. ``tile/0/000.p/5`` or ``.state/treeState``.
        index: the entry index concerned, when there is one.
        message: what is wrong, observed vs expected.
    """

    file: str
    index: int | None
    message: str

    def __str__(self) -> str:
        """``<file>: <message>``, with the entry index when there is one."""
        at = f" (entry {self.index})" if self.index is not None else ""
        return f"{self.file}{at}: {self.message}"


@dataclass
class LogReport:
    """The result of checking a log directory.

    Attributes:
        directory: the log checked.
        origin: the log's origin, when the verifier key was readable.
        size: the committed size checked (treeState's, else the checkpoint's).
        root: the root rebuilt from the entries, when it could be.
        checkpoint_size: the size of the published checkpoint, when it verified.
        problems: everything wrong, with file and index.
        warnings: harmless findings (leftovers of an interrupted append, stray files).
        entries_checked: entries parsed and chained.
        envelopes_checked: envelopes read from the store and checked against their entry.
        blobs_checked: manifest blobs found in the store.
    """

    directory: Path
    origin: str = ""
    size: int = 0
    root: bytes | None = None
    checkpoint_size: int | None = None
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    entries_checked: int = 0
    envelopes_checked: int = 0
    blobs_checked: int = 0

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    def problem(self, file: str, message: str, index: int | None = None) -> None:
        """Record a problem."""
        self.problems.append(Problem(file, index, message))

    def to_json(self) -> dict[str, Any]:
        """A stable JSON rendering (``log verify --json``)."""
        return {
            "directory": str(self.directory),
            "origin": self.origin,
            "size": self.size,
            "root": base64.b64encode(self.root).decode() if self.root is not None else None,
            "checkpoint_size": self.checkpoint_size,
            "ok": self.ok,
            "problems": [
                {"file": p.file, "index": p.index, "message": p.message} for p in self.problems
            ],
            "warnings": list(self.warnings),
            "entries_checked": self.entries_checked,
            "envelopes_checked": self.envelopes_checked,
            "blobs_checked": self.blobs_checked,
        }

    def raise_if_failed(self) -> None:
        """Raise if any problem was found.

        Raises:
            VerificationError: listing every problem, one per line.
        """
        if self.problems:
            lines = "\n".join(f"log/{p}" for p in self.problems)
            raise VerificationError(
                f"log {self.directory}: {len(self.problems)} problem(s):\n{lines}"
            )


_MAX_PER_FILE = 5


class _Checker:
    """State of one `verify_log_dir` run."""

    def __init__(
        self,
        directory: Path,
        report: LogReport,
        *,
        entry_format: bool,
        store: ObjectStore | None,
        keys: Mapping[str, PublicKey] | None,
        deep: bool,
    ) -> None:
        self.dir = directory
        self.report = report
        self.entry_format = entry_format
        self.store = store
        self.keys = keys or {}
        self.deep = deep
        self.present: dict[tuple[int, int], dict[int | None, str]] = {}
        self.prev: str | None = GENESIS_PREV  # None: unknown (the bundle before is unreadable)
        self.chain_ok = True
        self.env_keys = array("Q")
        self.erased: set[str] = set()
        self.missing_blobs: list[tuple[int, str, str, str, str]] = []
        self.dups: set[int] = set()
        self.mismatches: list[tuple[str, str, int, list[tuple[int, bytes, bytes]]]] = []

    def read(self, rel: str, *, required: bool = True) -> bytes | None:
        try:
            return (self.dir / rel).read_bytes()
        except FileNotFoundError:
            if required:
                self.report.problem(rel, "missing")
            return None
        except OSError as e:
            self.report.problem(rel, f"cannot read: {e.strerror}")
            return None

    # (4) the files present under tile/
    def scan(self) -> None:
        base = self.dir / "tile"
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                rel = os.path.relpath(os.path.join(dirpath, name), self.dir).replace(os.sep, "/")
                if name.startswith(TMP_PREFIX):
                    self.report.warnings.append(
                        f"{rel}: temp file of an interrupted append (removed by the next writer)"
                    )
                    continue
                parsed = _parse_tile_rel(rel)
                if parsed is None:
                    self.report.warnings.append(f"{rel}: not a tile or entry bundle; ignored")
                    continue
                level, index, width = parsed
                self.present.setdefault((level, index), {})[width] = rel

    def compare(self, rel: str, data: bytes, want: bytes, first: int | None) -> None:
        """Compare a file with the bytes rebuilt from the entries; report what differs.

        Hash tiles are compared hash by hash (``first``: the entry index of hash 0 for level-0
        tiles, else None); entry bundles as a whole.
        """
        if data == want:
            return
        if rel.startswith("tile/entries/"):
            self.report.problem(
                rel, f"differs from the entries it must hold ({len(data)} bytes, want {len(want)})"
            )
            return
        if len(data) != len(want):
            self.report.problem(
                rel, f"has {len(data)} bytes, want {len(want)} ({len(want) // HASH_SIZE} hashes)"
            )
            return
        bad = [
            i
            for i in range(0, len(want), HASH_SIZE)
            if data[i : i + HASH_SIZE] != want[i : i + HASH_SIZE]
        ]
        for off in bad[:_MAX_PER_FILE]:
            i = off // HASH_SIZE
            self.report.problem(
                rel,
                f"hash {i} is {data[off : off + HASH_SIZE].hex()}, want "
                f"{want[off : off + HASH_SIZE].hex()} (rebuilt from the entries)",
                index=None if first is None else first + i,
            )
        if len(bad) > _MAX_PER_FILE:
            self.report.problem(rel, f"and {len(bad) - _MAX_PER_FILE} more wrong hashes")

    def old_partials(
        self,
        level: int,
        index: int,
        current: int | None,
        want_of: Callable[[int], bytes],
        first: int | None,
    ) -> None:
        """Check the other versions of a tile that are present: older partial tiles (which
        published checkpoints need) and partials of a full tile not yet garbage-collected.

        Versions wider than ``current`` (None: the tile is full) are past the committed size;
        `leftovers` reports those.
        """
        limit = TILE_WIDTH if current is None else current
        for width, rel in sorted(
            self.present.get((level, index), {}).items(), key=lambda kv: kv[0] or TILE_WIDTH
        ):
            if width is None or width >= limit:
                continue
            data = self.read(rel)
            if data is not None:
                self.compare(rel, data, want_of(width), first)

    def entries_tile(self, b: int, width: int) -> tuple[list[bytes] | None, list[bytes] | None]:
        """(5) Entry bundle ``b`` and level-0 tile ``b``: returns the leaf hashes rebuilt from
        the entries and the hashes the tile holds (None when unreadable). Where they differ is
        recorded in `mismatches`; `blame` decides later which file is wrong."""
        w = None if width == TILE_WIDTH else width
        erel, trel = entries_path(b, w), tile_path(0, b, w)
        first = b * TILE_WIDTH
        entries: list[bytes] | None = None
        data = self.read(erel)
        if data is not None:
            try:
                entries = parse_entry_bundle(data, width=width)
            except FormatError as e:
                self.report.problem(erel, str(e))
        tile: list[bytes] | None = None
        tdata = self.read(trel)
        if tdata is not None:
            try:
                tile = parse_tile(tdata, width)
            except FormatError as e:
                self.report.problem(trel, str(e))
        leaves = [leaf_hash(e) for e in entries] if entries is not None else None
        if leaves is not None and tile is not None and leaves != tile:
            bad = [i for i in range(width) if leaves[i] != tile[i]]
            self.mismatches.append((erel, trel, first, [(i, leaves[i], tile[i]) for i in bad]))
        if entries is not None:
            ents = entries
            self.old_partials(-1, b, w, lambda v: format_entry_bundle(ents[:v]), first)
        basis = leaves if leaves is not None else tile
        if basis is not None:
            hs = basis
            self.old_partials(0, b, w, lambda v: b"".join(hs[:v]), first)
        if entries is not None and self.entry_format:
            self.check_entries(erel, first, entries)
        elif self.entry_format:
            # The bundle is unreadable: continue the chain from the tile's last leaf hash, if
            # any, rather than blame the next bundle for this one.
            self.prev = tile[-1].hex() if tile is not None else None
        return leaves, tile

    def blame(self, trusted: bytes | None, by_entries: bool, by_tiles: bool) -> None:
        """Report each bundle/tile disagreement on the file that is wrong: the tile when the
        entries rebuild the trusted root, the bundle when the tiles do, else both."""
        for erel, trel, first, bad in self.mismatches:
            for i, leaf, held in bad[:_MAX_PER_FILE]:
                if trusted is not None and by_entries:
                    self.report.problem(
                        trel,
                        f"hash {i} is {held.hex()}, want {leaf.hex()} (the leaf hash of entry "
                        f"{first + i} in {erel})",
                        index=first + i,
                    )
                elif trusted is not None and by_tiles:
                    self.report.problem(
                        erel,
                        f"entry {first + i} hashes to {leaf.hex()}, but {trel} and the committed "
                        f"root have {held.hex()}",
                        index=first + i,
                    )
                else:
                    self.report.problem(
                        erel,
                        f"entry {first + i} hashes to {leaf.hex()}, but {trel} has {held.hex()}",
                        index=first + i,
                    )
            if len(bad) > _MAX_PER_FILE:
                culprit = trel if trusted is not None and by_entries else erel
                self.report.problem(culprit, f"and {len(bad) - _MAX_PER_FILE} more hashes differ")

    # (6) entries: format, chain, duplicates, envelopes
    def check_entries(self, rel: str, first: int, entries: Sequence[bytes]) -> None:
        for i, raw in enumerate(entries, first):
            self.report.entries_checked += 1
            try:
                entry = LogEntry.from_bytes(raw, f"log entry {i}")
            except FormatError as e:
                self.report.problem(rel, str(e), index=i)
                self.prev = leaf_hash(raw).hex()
                continue
            if self.prev is not None and entry.prev != self.prev:
                self.report.problem(
                    rel,
                    f"entry {i}: prev is {entry.prev}, want {self.prev} (the leaf hash of the "
                    f"entry before): the hash chain is broken",
                    index=i,
                )
            self.prev = entry.leaf_hash.hex()
            self.env_keys.append(_digest_key(entry.envelope))
            if entry.kind == "erasure":
                self.erased.add(entry.subject)
            if self.store is not None:
                self.check_envelope(rel, i, entry)

    def check_envelope(self, rel: str, i: int, entry: LogEntry) -> None:
        store = self.store
        if store is None:
            return
        what = f"envelope {entry.envelope} of entry {i}"
        try:
            data = store.get(entry.envelope)
            verify_bytes(data, entry.envelope, what)
            envelope = Envelope.from_bytes(data, what)
            statement = Statement.from_bytes(envelope.payload, f"{what}: statement")
        except (StoreError, DigestMismatchError, FormatError) as e:
            self.report.problem(rel, str(e), index=i)
            return
        self.report.envelopes_checked += 1
        if all(s.digest != entry.subject for s in statement.subjects):
            names = ", ".join(s.digest for s in statement.subjects)
            self.report.problem(
                rel, f"{what}: statement subjects are {names}, want one of {entry.subject}", index=i
            )
        signers = tuple(sorted({s.keyid for s in envelope.signatures}))
        if signers != entry.signers:
            self.report.problem(
                rel,
                f"{what}: signed by keyids {list(signers)}, entry says {list(entry.signers)}",
                index=i,
            )
        for keyid in signers:
            key = self.keys.get(keyid)
            if key is None:
                continue
            try:
                verify_envelope(envelope, [key], what=what)
            except (SignatureError, FormatError) as e:
                self.report.problem(rel, str(e), index=i)
        if "manifest" in statement.predicate:
            try:
                manifest = manifest_from_statement(statement, f"{what}: statement")
            except (FormatError, DigestMismatchError) as e:
                self.report.problem(rel, str(e), index=i)
                return
            for f in manifest.files:
                self.check_blob(rel, i, entry.subject, f.path, f.digest)

    def check_blob(self, rel: str, i: int, subject: str, path: str, digest: str) -> None:
        store = self.store
        if store is None:
            return
        try:
            if self.deep:
                store.get_verified(digest)
            elif not store.exists(digest):
                self.missing_blobs.append((i, rel, subject, path, digest))
                return
        except StoreError:
            self.missing_blobs.append((i, rel, subject, path, digest))
            return
        except DigestMismatchError as e:
            self.report.problem(rel, f"blob {path}: {e}", index=i)
            return
        self.report.blobs_checked += 1

    def finish_entries(self) -> None:
        for i, rel, subject, path, digest in self.missing_blobs:
            if subject in self.erased or digest in self.erased:
                continue
            self.report.problem(rel, f"blob {path} ({digest}): not in the store", index=i)
        keys = sorted(self.env_keys)
        dups = {keys[i] for i in range(1, len(keys)) if keys[i] == keys[i - 1]}
        self.dups = dups

    def upper_levels(self, size: int, level1: list[bytes]) -> list[list[bytes]]:
        """(5) Levels >= 1: compare every tile with the hashes rebuilt from below."""
        levels: list[list[bytes]] = [[], level1]
        level = 1
        while size >> (TILE_HEIGHT * level):
            hashes = levels[level]
            count = size >> (TILE_HEIGHT * level)
            full, width = divmod(count, TILE_WIDTH)
            for t in range(full + (1 if width else 0)):
                w = TILE_WIDTH if t < full else width
                rel = tile_path(level, t, None if w == TILE_WIDTH else w)
                chunk = hashes[t * TILE_WIDTH : t * TILE_WIDTH + w]
                data = self.read(rel)
                if data is not None:
                    self.compare(rel, data, b"".join(chunk), None)
                self.old_partials(level, t, None if w == TILE_WIDTH else w, _prefix_of(chunk), None)
            levels.append(
                [
                    root_from_leaf_hashes(hashes[t * TILE_WIDTH : (t + 1) * TILE_WIDTH])
                    for t in range(full)
                ]
            )
            level += 1
        return levels

    def leftovers(self, size: int) -> None:
        """(8) Tiles past the committed size: an interrupted append; harmless."""
        for (level, index), versions in sorted(self.present.items()):
            shift = TILE_HEIGHT * (level + 1) if level >= 0 else TILE_HEIGHT
            full = size >> shift
            width = (size >> (shift - TILE_HEIGHT)) % TILE_WIDTH
            for w, rel in versions.items():
                if index > full or (index == full and (w is None or w > width)):
                    self.report.warnings.append(
                        f"{rel}: past the committed size {size} (an interrupted append); ignored"
                    )


def _prefix_of(hashes: Sequence[bytes]) -> Callable[[int], bytes]:
    return lambda width: b"".join(hashes[:width])


def _root_from_levels(
    size: int, levels: Sequence[Sequence[bytes]], last_leaves: Sequence[bytes]
) -> bytes:
    """MTH of the whole tree from the per-level hashes and the leaves of the last level-0 tile."""
    compact: list[tuple[int, bytes]] = []
    start = 0
    for height in range(size.bit_length() - 1, -1, -1):
        if not size >> height & 1:
            continue
        level = height // TILE_HEIGHT
        if level == 0:
            offset = start - (size >> TILE_HEIGHT << TILE_HEIGHT)
            node = root_from_leaf_hashes(last_leaves[offset : offset + (1 << height)])
        else:
            first = start >> (TILE_HEIGHT * level)
            node = root_from_leaf_hashes(
                levels[level][first : first + (1 << (height - TILE_HEIGHT * level))]
            )
        compact.append((height, node))
        start += 1 << height
    return _fold(compact)


def verify_log_dir(
    directory: Path,
    *,
    vkey: str | None = None,
    store: ObjectStore | None = None,
    keys: Mapping[str, PublicKey] | None = None,
    deep: bool = False,
    entry_format: bool = True,
) -> LogReport:
    """Check a log directory completely and report every problem with its file and index.

    Steps:
        1. Read the verifier key: ``vkey`` when given (the caller's trust), else the ``vkey`` file.
        2. Read and parse treeState: the committed size and root.
        3. Verify the checkpoint's signature by the log key and its origin.
        4. List every file under ``tile/``.
        5. Rebuild the tree from the entries: every entry bundle, its leaf hashes against the
           level-0 tile, each level's tile hashes against the hashes rebuilt from the level
           below; older partial versions of tiles must be prefixes of the rebuilt ones.
        6. For trajledger logs: parse every entry strictly and follow the ``prev`` chain; with a
           store, every envelope must be there, hash to its digest, name the entry's subject and
           be signed by the entry's signers (verified for the keys in ``keys``), and every blob
           of its manifest must be in the store (re-hashed with ``deep``) unless erased.
        7. The rebuilt root must equal treeState's and, at the checkpoint's size, the
           checkpoint's; the history must end at the committed size and every partial tile a
           committed size needs must be there (unless its full tile is).
        8. Files past the committed size are leftovers of an interrupted append: warnings.

    Args:
        directory: the log directory.
        vkey: the trusted verifier key string; default the log's own ``vkey`` file.
        store: the object store holding the envelopes and blobs, to check them too.
        keys: public keys by keyid whose envelope signatures are verified.
        deep: re-hash every blob instead of checking it is present.
        entry_format: False for logs whose entries are not trajledger entries (a Tessera log):
            step 6 is skipped and a missing history is not a problem.

    Returns:
        The report; ``report.ok`` is False when anything is wrong.
    """
    report = LogReport(directory)
    # (1)
    verifier: Verifier | None = None
    text = _read_for_report(directory, VKEY_FILE, report, "the log's verifier key is unknown")
    try:
        own = text.decode("utf-8").strip() if text is not None else None
        if own is not None and vkey is not None and own != vkey:
            report.problem(VKEY_FILE, f"is {own!r}, want {vkey!r} (the trusted log key)")
        if vkey is not None or own is not None:
            verifier = verifier_from_vkey(vkey if vkey is not None else str(own))
            report.origin = verifier.name
    except UnicodeDecodeError as e:
        report.problem(VKEY_FILE, f"not UTF-8 text: {e}")
    except FormatError as e:
        report.problem(VKEY_FILE if vkey is None else "(trusted vkey)", str(e))
    # (2)
    state: tuple[int, bytes] | None = None
    data = _read_for_report(directory, TREE_STATE_FILE, report, "the committed size is unknown")
    if data is not None:
        try:
            state = parse_tree_state(data)
        except FormatError as e:
            report.problem(TREE_STATE_FILE, str(e))
    # (3)
    cp: Checkpoint | None = None
    cp_data = _read_for_report(directory, CHECKPOINT_FILE, report, "no checkpoint is published")
    if cp_data is not None and verifier is not None:
        try:
            cp = verify_checkpoint(cp_data, verifier, origin=verifier.name)
            report.checkpoint_size = cp.size
        except (FormatError, VerificationError) as e:
            report.problem(CHECKPOINT_FILE, str(e))
    if state is not None:
        size = state[0]
    elif cp is not None:
        size = cp.size
    else:
        return report
    report.size = size
    checker = _Checker(
        directory, report, entry_format=entry_format, store=store, keys=keys, deep=deep
    )
    # (4)
    checker.scan()
    # (5) (6)
    level1: list[bytes] = []  # roots of full level-0 tiles, from the entries where readable
    level1_tiles: list[bytes] = []  # the same from the level-0 tiles where readable
    last: tuple[list[bytes], list[bytes]] = ([], [])
    broken = False
    full0, width0 = divmod(size, TILE_WIDTH)
    for b in range(full0 + (1 if width0 else 0)):
        width = TILE_WIDTH if b < full0 else width0
        leaves, tile = checker.entries_tile(b, width)
        if leaves is None and tile is None:
            broken = True
        by_entries = leaves or tile or [_ZERO_HASH] * width
        by_tiles = tile or leaves or [_ZERO_HASH] * width
        if width == TILE_WIDTH:
            level1.append(root_from_leaf_hashes(by_entries))
            level1_tiles.append(root_from_leaf_hashes(by_tiles))
        else:
            last = (by_entries, by_tiles)
    if entry_format:
        checker.finish_entries()
        _report_duplicates(checker, size)
    levels = checker.upper_levels(size, level1)
    # (7)
    if broken:
        report.problem(TREE_STATE_FILE, "the tree cannot be rebuilt: entries and tiles are missing")
        return _finish(checker, size, entry_format)
    root = _root_from_levels(size, levels, last[0])
    root_tiles = root
    if checker.mismatches:
        root_tiles = _root_from_levels(size, _levels_above(size, level1_tiles), last[1])
    report.root = root
    signed = cp.root if cp is not None and cp.size == size else None
    trusted = signed if signed is not None else (state[1] if state is not None else None)
    checker.blame(trusted, root == trusted, root_tiles == trusted)
    if state is not None and state[1] not in (root, root_tiles):
        report.problem(
            TREE_STATE_FILE,
            f"root is {base64.b64encode(state[1]).decode()}, want "
            f"{base64.b64encode(root).decode()} (rebuilt from the entries)",
        )
    if cp is not None:
        _check_checkpoint_root(report, directory, cp, size, (root, root_tiles))
    return _finish(checker, size, entry_format)


def _finish(checker: _Checker, size: int, entry_format: bool) -> LogReport:
    _check_history(checker, size, entry_format)
    # (8)
    checker.leftovers(size)
    checker.report.problems.sort(key=lambda p: -1 if p.index is None else p.index)
    return checker.report


def _levels_above(size: int, level1: list[bytes]) -> list[list[bytes]]:
    """Per-level hashes (levels >= 1) rebuilt from level-1 hashes alone, without reading tiles."""
    levels: list[list[bytes]] = [[], level1]
    level = 1
    while size >> (TILE_HEIGHT * level):
        hashes = levels[level]
        full = (size >> (TILE_HEIGHT * level)) // TILE_WIDTH
        levels.append(
            [
                root_from_leaf_hashes(hashes[t * TILE_WIDTH : (t + 1) * TILE_WIDTH])
                for t in range(full)
            ]
        )
        level += 1
    return levels


def _read_for_report(directory: Path, rel: str, report: LogReport, why: str) -> bytes | None:
    try:
        return (directory / rel).read_bytes()
    except FileNotFoundError:
        report.problem(rel, f"missing: {why}")
    except OSError as e:
        report.problem(rel, f"cannot read: {e.strerror}")
    return None


def _check_checkpoint_root(
    report: LogReport, directory: Path, cp: Checkpoint, size: int, roots: tuple[bytes, bytes]
) -> None:
    if cp.size > size:
        report.problem(CHECKPOINT_FILE, f"size {cp.size} is beyond the committed size {size}")
        return
    if cp.size == size:
        want = roots
    else:
        report.warnings.append(
            f"{CHECKPOINT_FILE}: size {cp.size} lags the committed size {size} (an append was "
            "interrupted before publication; the next writer republishes)"
        )
        try:
            at = TileReader(lambda rel: (directory / rel).read_bytes(), size).subtree_root(
                0, cp.size
            )
        except (OSError, FormatError) as e:
            report.problem(CHECKPOINT_FILE, f"cannot rebuild the root at size {cp.size}: {e}")
            return
        want = (at, at)
    if cp.root not in want:
        report.problem(
            CHECKPOINT_FILE,
            f"root at size {cp.size} is {base64.b64encode(cp.root).decode()}, want "
            f"{base64.b64encode(want[0]).decode()} (rebuilt from the entries)",
        )


def _check_history(checker: _Checker, size: int, required: bool) -> None:
    report = checker.report
    path = checker.dir / HISTORY_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if size and required:
            report.problem(HISTORY_FILE, f"missing: the committed sizes up to {size} are unknown")
        elif size:
            report.warnings.append(
                f"{HISTORY_FILE}: absent; older partial tiles are not checked for presence"
            )
        return
    except OSError as e:
        report.problem(HISTORY_FILE, f"cannot read: {e.strerror}")
        return
    sizes, bad, torn = _parse_history(data)
    committed = [s for s in sizes if s <= size]
    if bad is not None:
        report.problem(HISTORY_FILE, f"record {bad} has a wrong CRC-32: the file is damaged")
    elif torn and (not sizes or sizes[-1] < size):
        report.problem(
            HISTORY_FILE,
            f"ends with a partial record ({len(data)} bytes, want a multiple of "
            f"{_HISTORY_RECORD.size})",
        )
    elif torn:
        report.warnings.append(f"{HISTORY_FILE}: a torn record past the committed size; ignored")
    if any(b <= a for a, b in itertools.pairwise(sizes)):
        report.problem(HISTORY_FILE, "sizes are not strictly increasing")
    if bad is None and size and (not committed or committed[-1] != size):
        last = committed[-1] if committed else "nothing"
        report.problem(HISTORY_FILE, f"last committed size is {last}, want {size} (treeState's)")
    if len(committed) < len(sizes) and bad is None:
        report.warnings.append(f"{HISTORY_FILE}: sizes past the committed size {size}; ignored")
    # Every partial tile a committed size needs, unless the full tile replaced it.
    needed: set[tuple[int, int, int]] = set()
    for s in committed:
        for level, index, width in _partial_widths(s):
            needed.add((level, index, width))
            if level == 0:
                needed.add((-1, index, width))
    for level, index, width in sorted(needed):
        shift = TILE_HEIGHT * (level + 1) if level >= 0 else TILE_HEIGHT
        if index < size >> shift:
            continue  # the full tile exists now; partials of it may be garbage-collected
        if width not in checker.present.get((level, index), {}):
            report.problem(
                _tile_rel(level, index, width),
                f"missing, but {HISTORY_FILE} records a checkpoint of a size that needs it",
            )


def _report_duplicates(checker: _Checker, size: int) -> None:
    dups = checker.dups
    if not dups:
        return
    reader = TileReader(lambda rel: (checker.dir / rel).read_bytes(), size)
    seen: dict[str, int] = {}
    for b in range(0, size, TILE_WIDTH):
        try:
            raws = reader.entries(b, min(size, b + TILE_WIDTH))
        except (OSError, FormatError):
            continue
        for i, raw in enumerate(raws, b):
            try:
                entry = LogEntry.from_bytes(raw)
            except FormatError:
                continue
            if _digest_key(entry.envelope) not in dups:
                continue
            first = seen.setdefault(entry.envelope, i)
            if first != i:
                checker.report.problem(
                    entries_path(i >> TILE_HEIGHT),
                    f"envelope {entry.envelope} is logged twice, at {first} and {i}; appends "
                    "are idempotent, so one is not from this log's writer",
                    index=i,
                )


# -- the witness ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CosignResult:
    """What `cosign` did.

    Attributes:
        origin: the log cosigned.
        old_size: the size last cosigned before (None on the first cosignature).
        size: the size cosigned now.
        witness_vkey: the witness's verifier key (cosignature/v1) for trust policies.
        timestamp: the cosignature's time (POSIX seconds).
    """

    origin: str
    old_size: int | None
    size: int
    witness_vkey: str
    timestamp: int


def _witness_state_path(state_dir: Path, origin: str) -> Path:
    return state_dir / (hashlib.sha256(origin.encode()).hexdigest() + ".json")


def cosign(log: Log, witness: Signer, state_dir: Path, *, now: int | None = None) -> CosignResult:
    """Act as a witness: check the log's checkpoint is consistent with the last one cosigned,
    then add a tlog-cosignature/v1 line to it.

    Steps:
        1. Load the witness's state for this origin: the log key pinned on first use and the
           checkpoint last cosigned.
        2. Refuse a log key other than the pinned one.
        3. Verify the log's current checkpoint with that key.
        4. Check it against the last cosigned one (`check_consistent`): a smaller size
           (rollback), another root at the same size (fork) or a failed consistency proof
           (fetched from the log, verified against both signed roots) is refused.
        5. Sign the cosignature and add it to ``checkpoint`` (under the log's lock, only if the
           checkpoint did not change meanwhile; an older line by this witness is replaced).
        6. Record the cosigned checkpoint as the new state.

    Args:
        log: the log to witness.
        witness: the witness's Ed25519 key; its name is the cosignature's key name.
        state_dir: where the witness keeps its state (``<ledger>/witness``).
        now: the cosignature time; default now.

    Returns:
        What was cosigned.

    Raises:
        LogError: the witness key is not Ed25519, the state or checkpoint cannot be read or
            written, or the checkpoint changed while cosigning.
        SignatureError: the checkpoint is not signed by the pinned log key, or the log key changed.
        ConsistencyError: rollback, fork or inconsistent checkpoints.
    """
    try:
        raw = witness.public.raw_ed25519()
    except FormatError as e:
        raise LogError(
            f"witness key {witness.name}: is {witness.public.algorithm}, want ed25519"
        ) from e
    witness_vkey = vkey_string(witness.name, raw, ALG_COSIGNATURE_V1)
    # (1)
    path = _witness_state_path(state_dir, log.origin)
    state: dict[str, Any] | None = None
    if path.exists():
        try:
            state = load_object(path.read_bytes(), f"witness state {path}")
        except (OSError, FormatError) as e:
            raise LogError(f"witness state {path}: cannot read: {e}") from e
    pinned = str(state["log_vkey"]) if state else log.vkey
    # (2)
    if pinned != log.vkey:
        raise SignatureError(
            f"log {log.origin}: key is now {log.vkey}, but the witness pinned {pinned}"
        )
    verifier = verifier_from_vkey(pinned)
    # (3)
    cp_bytes = log.checkpoint_bytes()
    new = verify_checkpoint(cp_bytes, verifier, origin=log.origin)
    # (4)
    old_size: int | None = None
    if state:
        old = verify_checkpoint(str(state["checkpoint"]).encode(), verifier, origin=log.origin)
        old_size = old.size
        proof: list[bytes] = []
        if 0 < old.size < new.size:
            proof = log.consistency_proof(old.size, new.size)
        check_consistent(old, new, proof)
    # (5)
    timestamp = int(_time.time()) if now is None else now
    note = Note.from_bytes(cp_bytes)
    sig = witness.sign(cosignature_message(note.text, timestamp))
    kh = key_hash(witness.name, ALG_COSIGNATURE_V1, raw)
    line = format_signature_line(witness.name, kh, struct.pack(">Q", timestamp) + sig)
    with log._locked():
        current = log.checkpoint_bytes()
        if current != cp_bytes:
            raise LogError(f"log {log.origin}: the checkpoint changed while cosigning; run again")
        kept = b"".join(
            s.to_line() for s in note.signatures if (s.name, s.key_hash) != (witness.name, kh)
        )
        try:
            write_file_atomic(log.directory / CHECKPOINT_FILE, note.text + b"\n" + kept + line)
        except OSError as e:
            raise LogError(f"log {log.origin}: cannot write the checkpoint: {e.strerror}") from e
    # (6)
    doc = {
        "origin": log.origin,
        "log_vkey": pinned,
        "witness": witness_vkey,
        "checkpoint": cp_bytes.decode("utf-8"),
    }
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        write_file_atomic(path, json.dumps(doc, sort_keys=True, indent=1).encode() + b"\n")
    except OSError as e:
        raise LogError(f"witness state {path}: cannot write: {e.strerror}") from e
    return CosignResult(log.origin, old_size, new.size, witness_vkey, timestamp)
