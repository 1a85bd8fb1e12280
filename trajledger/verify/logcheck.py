"""The subset checker of a log's entries: what an evidence bundle or a reader holds.

Scope: `check_entries` checks a *subset* of a log's entries against a tree (size and root,
normally from a verified checkpoint): each parses strictly (`LogEntry.from_bytes`), the
``prev`` chain between neighbouring indices, and each entry's inclusion proof under the root (or
the root the entries rebuild, when they are the whole tree or an extension of a compact range:
``verify.rebuild``, loaded only then).
It reports every problem as a `Finding` (the caller's name for the file, the entry, what is
wrong), not only the first.

Non-scope: the whole tiled log (tiles and entry bundles, like Tessera's ``fsck``:
`verify.log_fsck.check_log`, for ``log verify``), trust in the size and root (verify the
checkpoint first: ``verify.checkpoint``), what entries claim about envelopes and blobs (the
caller's per-entry callback).

Spec: RFC 6962 section 2.1; schemas/log-entry.v1.md (entries, chain).

API (for the lineage verifier and evidence bundles)::

    findings = check_entries(entries_by_index, size, root, proof_of=lambda i: [...hashes...],
                             name=lambda i: f"entries/{i}", on_entry=...)
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import FormatError, ProofError, ProvenanceError
from .log_entry import GENESIS_PREV, LogEntry
from .merkle import leaf_hash
from .merkle import verify_inclusion as _verify_inclusion

if TYPE_CHECKING:
    from .compact import CompactRange

__all__ = ["EntryCallback", "Finding", "check_entries"]

EntryCallback = Callable[[int, LogEntry], Iterable[str]]
"""Called with each entry that parses; returns the problems it finds with it (may be empty)."""


@dataclass(frozen=True)
class Finding:
    """One problem: the file it is in (relative to the log root), the entry, what is wrong.

    Attributes:
        file: e.g. ``tile/0/000.p/5`` or ``tile/entries/001``; for a subset, the caller's name.
        index: the entry index concerned, when there is one.
        message: what is wrong, observed vs expected.
    """

    file: str
    index: int | None
    message: str

    def __str__(self) -> str:
        """``<file> (entry <i>): <message>``."""
        at = f" (entry {self.index})" if self.index is not None else ""
        return f"{self.file}{at}: {self.message}"


def check_entries(
    entries: Mapping[int, bytes],
    size: int,
    root: bytes,
    proof_of: Callable[[int], Sequence[bytes]],
    *,
    name: Callable[[int], str] = lambda i: f"entry {i}",
    on_entry: EntryCallback | None = None,
    start: CompactRange | None = None,
    carried: Container[int] = (),
) -> list[Finding]:
    """Check a subset of a log's entries against a tree (size and root).

    Steps:
        1. Each index must lie inside the tree.
        2. Each entry parses strictly; ``on_entry`` runs on it.
        3. Where entries ``i - 1`` and ``i`` are both given, ``i``'s ``prev`` is the leaf hash
           of ``i - 1``; entry 0's is `GENESIS_PREV`.
        4. The entries from ``start.size`` on (an extension of the tree: every one of them
           must be given) extend ``start`` to the root (no proofs needed); so do all of them
           when they are the whole tree (every index below ``size``: ``start`` is the empty
           range). Each other entry's inclusion proof (``proof_of(i)``, for the tree of
           ``size``) must lead to ``root``, and so must those of ``carried`` (an evidence
           bundle's proofs: one that is wrong is refused, not ignored, redo15 finding 6).

    Args:
        entries: entry bytes by index.
        size: the tree size (a verified checkpoint's).
        root: the root at that size.
        proof_of: the inclusion proof of entry ``i`` at ``size``; raises KeyError,
            OSError or ProvenanceError when there is none.
        name: how to name entry ``i``'s file in findings (e.g. a bundle member).
        on_entry: per-entry check (`EntryCallback`).
        start: the compact range of the tree's first ``start.size`` entries (unverified: the
            rebuilt root decides), from which ``entries`` hold every entry to ``size``.
        carried: the entries whose proofs are checked even when the rebuilt root proves them.

    Returns:
        Every problem found, in index order; empty when the subset holds.
    """
    findings: list[Finding] = []
    rebuilt, last = size, None  # the entries from ``rebuilt`` on need no proofs
    if start is not None or (size > 0 and len(entries) >= size
                             and all(i in entries for i in range(size))):
        from .rebuild import rebuild  # loaded only for a whole tree or an extension

        rebuilt, first, last = rebuild(entries, size, root, start, name)
        findings += [Finding(*f) for f in first]
        if rebuilt > size:  # the extension starts after the tree: nothing else is checked
            return findings
    for i in sorted(entries):
        data = entries[i]
        # (1)
        if not 0 <= i < size:
            findings.append(Finding(name(i), i, f"index {i} is outside the tree of size {size}"))
            continue
        # (2)
        try:
            entry = LogEntry.from_bytes(data, f"log entry {i}")
        except FormatError as e:
            findings.append(Finding(name(i), i, str(e)))
        else:
            if on_entry is not None:
                findings.extend(Finding(name(i), i, m) for m in on_entry(i, entry))
            # (3)
            want = GENESIS_PREV if i == 0 else None
            if i - 1 in entries:
                want = leaf_hash(entries[i - 1]).hex()
            if want is not None and entry.prev != want:
                findings.append(
                    Finding(
                        name(i),
                        i,
                        f"entry {i}: prev is {entry.prev}, want {want} (the leaf hash of "
                        f"{'entry ' + str(i - 1) if i else 'no entry (genesis)'}): the hash "
                        "chain is broken",
                    )
                )
        # (4)
        if i >= rebuilt and i not in carried:
            continue
        try:
            proof = proof_of(i)
        except (KeyError, OSError, ProvenanceError) as e:
            findings.append(Finding(name(i), i, f"no inclusion proof at size {size}: {e}"))
            continue
        try:
            _verify_inclusion(i, size, leaf_hash(data), proof, root)
        except ProofError as e:
            findings.append(Finding(name(i), i, f"not included under the tree: {e}"))
    return findings + ([Finding(*last)] if last is not None else [])

