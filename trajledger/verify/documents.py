"""The documents a signed predicate names by path and digest (a dataset's card), checked as
part of an artifact's files.

Scope: `check_document`: listed by the manifest as named, within `CARD_MAX_BYTES`, present (or
deleted by a verified erasure) and hashing to its digest. Loaded only for a record that names
documents: a lineage without cards never needs it.
Non-scope: the other files of a manifest (``verify.lineage``), what a card says (``ledger.cards``).
Spec: schemas/SPEC.md, section "Dataset cards".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .digest import digest_bytes
from .manifest import Manifest
from .predicates import CARD_MAX_BYTES
from .report import ERASED, OK, Node
from .report import short as _short
from .retractions import erasure_note

if TYPE_CHECKING:
    from .evidence import Evidence
    from .judge import Record

__all__ = ["Documents", "check_document"]


class Documents(Protocol):
    """Where a document is read from: a `verify.lineage.LineageVerifier`, which stands above
    this module and loads it for a record that names documents."""

    evidence: Evidence

    def erased_blob(self, blob: str) -> Record | None: ...


def check_document(v: Documents, node: Node, manifest: Manifest, path: str,
                   digest: str) -> None:
    """Check a file the signed predicate names as a document (a dataset's card).

    Steps:
        1. The manifest lists ``path`` with the digest the predicate names.
        2. It is at most `CARD_MAX_BYTES`; its blob is present (or deleted by a verified
           erasure) with the listed size.
        3. Its bytes, read whole (so an export carries them even without data), hash to
           the digest.
    """
    # (1)
    listed = next((f for f in manifest.files if f.path == path), None)
    if listed is None or listed.digest != digest:
        node.fail(path, f"the signed record names {path} {_short(digest)}, the manifest "
                  + (f"lists {_short(listed.digest)}" if listed else "does not list it"))
        return
    # (2)
    if listed.size > CARD_MAX_BYTES:
        node.fail(path, f"{listed.size} bytes, want at most {CARD_MAX_BYTES}")
        return
    size = v.evidence.blob_size(digest)
    data = v.evidence.blob(digest) if size == listed.size else None
    if size is None or (data is None and size == listed.size):
        by = v.erased_blob(digest)
        if by is not None:
            node.add(path, ERASED, erasure_note(by, f"{path} deleted"))
        else:
            node.fail(path, f"blob {_short(digest)} is missing (exports carry it, with "
                      "data or without)")
    elif data is None:
        node.fail(path, f"tampered: {size} bytes, want {listed.size} (blob {_short(digest)})")
    elif (got := digest_bytes(data)) != digest:
        # (3)
        node.fail(path, f"tampered: content hashes to {_short(got)}, want {_short(digest)}")
    else:
        node.add(path, OK, f"{listed.size} bytes, the digest its signed record names")
