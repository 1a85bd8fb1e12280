"""A view of a log's entries by subject, kind and listing: what lineage verification looks up.

Scope: the `LogIndex` protocol the lineage verifier asks "which entries are about this digest?",
"which datasets list this batch?", "which artifacts depend on this one?", and `MemoryIndex`, its
implementation over the entries an `Evidence` source holds (a whole ledger directory, or the
subset an exported bundle carries). trajledger's own implementation over a live ledger keeps the
same answers in the user's state directory and extends them incrementally
(``trajledger.ledger.trust_state``).

What an index answers is *where to look*, never what to believe: the verifier verifies every
record it uses (inclusion under the signed checkpoint, envelope digest, signatures). An index
must be complete for the entries it covers, because a revocation it omitted could not be seen;
that is why trajledger keeps its index where write access to the ledger cannot reach it.

Reading envelopes: `listing` and `referrers` need a record's predicate (the batches a dataset
lists, the blobs an erasure deleted, an artifact's dependencies). A record whose envelope is
missing or does not parse is reported by `unreadable`: what it would list is unknown, so a
verifier fails the decisions it could affect (fail closed).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple, Protocol

from .digest import digest_bytes
from .dsse import Envelope
from .errors import FormatError, ProvenanceError
from .kinds import KINDS
from .log_entry import LogEntry
from .predicates import HELD_OUT, Dataset, Predicate
from .report import short
from .statement import Statement

__all__ = ["Blobs", "LogIndex", "MemoryIndex", "read_record"]


class Blobs(Protocol):
    """Where envelopes are read from (unverified bytes)."""

    def blob(self, digest: str) -> bytes | None:
        """The bytes stored under ``digest``, or None when absent."""
        ...


class LogIndex(Protocol):
    """Entries of a log under one checkpoint, looked up by subject, kind and listing.

    The caller's index is trusted as its caller is (a ``root`` equal to the checkpoint's proves
    every entry included, `TrustedLog`). Optional: ``checked(note, verifier)``, which
    `TrustedLog` verifies the checkpoint with in place of `verify_checkpoint` (the ledger's trust
    state: its handle verified that note by that key already, ci47 finding 6); an index without
    it (a bundle's, `MemoryIndex`) has the note verified as always."""

    @property
    def size(self) -> int:
        """The tree size the index covers (entries ``0 .. size-1``, or a subset of them)."""
        ...

    def entry(self, index: int) -> LogEntry | None:
        """The parsed entry at ``index`` (None when the index does not hold it)."""
        ...

    def entry_bytes(self, index: int) -> bytes | None:
        """The entry's exact bytes (its leaf preimage), or None."""
        ...

    def about(self, subject: str) -> Sequence[int]:
        """Indices of every entry whose subject is ``subject``, ascending."""
        ...

    def of_kind(self, kind: str) -> Sequence[int]:
        """Indices of every entry of ``kind``, ascending."""
        ...

    def entries_about(self, subjects: Collection[str]) -> dict[int, tuple[LogEntry, bytes]]:
        """Every entry whose subject is one of ``subjects``, parsed and as bytes, by index:
        `about`, `entry` and `entry_bytes` of many subjects in one look-up (a dataset's
        batches)."""
        ...

    def listing(self, digest: str) -> Sequence[int]:
        """Indices of the records whose predicate lists ``digest`` (`verify.kinds.Kind.listed`):
        the datasets holding a batch, the erasures that deleted a blob. Ascending."""
        ...

    def listings(self, digests: Collection[str]) -> Mapping[str, Sequence[int]]:
        """`listing` of each of ``digests`` in one look-up (every digest a key)."""
        ...

    def referrers(self, digest: str) -> Sequence[tuple[int, str]]:
        """``(index, role)`` of the artifacts whose predicate depends on ``digest``."""
        ...

    def unreadable(self) -> Sequence[int]:
        """Indices of records (of kinds whose predicate is indexed: named, listing, lineage)
        whose envelope could not be read (missing, not hashing to the entry, or malformed), so
        what they list or name is unknown."""
        ...

    def held_out(self) -> Sequence[int]:
        """Indices of the dataset records whose predicate gives a split that is never trained
        on (`verify.predicates.HELD_OUT`), ascending. A dataset record whose envelope cannot be
        read is in `unreadable` instead."""
        ...


def read_record(entry: LogEntry, envelope: bytes | None, what: str) -> tuple[Statement, Predicate]:
    """The statement and typed predicate of ``entry``'s envelope, without verifying signatures.

    Raises:
        FormatError: the envelope is absent, does not hash to the entry, or does not parse as a
            statement of the entry's kind.
    """
    if envelope is None:
        raise FormatError(f"{what}: envelope {short(entry.envelope)} is missing")
    if digest_bytes(envelope) != entry.envelope:
        raise FormatError(f"{what}: envelope does not hash to {short(entry.envelope)}")
    statement = Statement.from_bytes(Envelope.from_bytes(envelope, what).payload, what)
    return statement, KINDS[entry.kind].read(statement, what)


class _Predicates(NamedTuple):
    """What a `MemoryIndex`'s records say, read from their envelopes (`MemoryIndex.listing`,
    `MemoryIndex.referrers`, `MemoryIndex.unreadable`, `MemoryIndex.held_out`)."""

    listing: dict[str, list[int]]
    referrers: dict[str, list[tuple[int, str]]]
    unreadable: list[int]
    held_out: list[int]


class MemoryIndex:
    """An index built in memory from the entries at hand (a ledger directory, a bundle).

    Entries are parsed as they are added; envelopes are read (from ``blobs``) only when a
    listing or the referrers are first asked for, and then for the kinds that need them.
    """

    def __init__(self, size: int, blobs: Blobs) -> None:
        """An empty index of a tree of ``size`` entries; add entries with `add`."""
        self._size = size
        self._blobs = blobs
        self._entries: dict[int, LogEntry] = {}
        self._raw: dict[int, bytes] = {}
        self._about: dict[str, list[int]] = {}
        self._kind: dict[str, list[int]] = {}
        self._read: _Predicates | None = None

    def add(self, index: int, raw: bytes, entry: LogEntry | None = None) -> LogEntry:
        """Add one entry: ``raw`` parsed strictly, unless ``entry`` is given, parsed from it
        already (`verify.logcheck.check_entries` parses every entry it checks).

        Raises:
            FormatError: the entry does not parse.
        """
        if entry is None:
            entry = LogEntry.from_bytes(raw, f"log entry {index}")
        self._entries[index] = entry
        self._raw[index] = raw
        self._about.setdefault(entry.subject, []).append(index)
        self._kind.setdefault(entry.kind, []).append(index)
        self._read = None
        return entry

    @property
    def size(self) -> int:
        """The tree size."""
        return self._size

    def entry(self, index: int) -> LogEntry | None:
        """The parsed entry, or None."""
        return self._entries.get(index)

    def entry_bytes(self, index: int) -> bytes | None:
        """The entry's bytes, or None."""
        return self._raw.get(index)

    def about(self, subject: str) -> Sequence[int]:
        """Entries about ``subject``."""
        return self._about.get(subject, [])

    def of_kind(self, kind: str) -> Sequence[int]:
        """Entries of ``kind``."""
        return self._kind.get(kind, [])

    def entries_about(self, subjects: Collection[str]) -> dict[int, tuple[LogEntry, bytes]]:
        """Entries about any of ``subjects``."""
        return {i: (self._entries[i], self._raw[i]) for s in subjects for i in self.about(s)}

    def _predicates(self) -> _Predicates:
        """What the records' predicates say, read once (again after `add`)."""
        if self._read is None:
            self._read = self._read_envelopes()
        return self._read

    def _read_envelopes(self) -> _Predicates:
        read = _Predicates({}, {}, [], [])
        for i in sorted(self._entries):
            entry = self._entries[i]
            kind = KINDS[entry.kind]
            if not (kind.lists or kind.lineage):
                continue
            try:
                _st, pred = read_record(entry, self._blobs.blob(entry.envelope), f"log entry {i}")
            except ProvenanceError:
                read.unreadable.append(i)
                continue
            for d in kind.listed(pred):
                read.listing.setdefault(d, []).append(i)
            for dep in kind.dependencies(pred):
                read.referrers.setdefault(dep.digest, []).append((i, dep.role))
            if isinstance(pred, Dataset) and pred.split in HELD_OUT:
                read.held_out.append(i)
        return read

    def listing(self, digest: str) -> Sequence[int]:
        """Records listing ``digest``."""
        return self._predicates().listing.get(digest, [])

    def listings(self, digests: Collection[str]) -> dict[str, Sequence[int]]:
        """Records listing each of ``digests``."""
        return {d: self.listing(d) for d in digests}

    def referrers(self, digest: str) -> Sequence[tuple[int, str]]:
        """Artifacts depending on ``digest``."""
        return self._predicates().referrers.get(digest, [])

    def unreadable(self) -> Sequence[int]:
        """Records whose envelope cannot be read."""
        return self._predicates().unreadable

    def held_out(self) -> Sequence[int]:
        """Holdout and regression dataset records."""
        return self._predicates().held_out
