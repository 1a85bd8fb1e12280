"""``trajledger show``: describe a recorded artifact from the log and the store.

Scope: resolve a reference, read its record, envelope, statement and manifest, and list its
status records (approvals, revocations, erasures). Descriptive only: ``trajledger verify``
judges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import ProvenanceError
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.manifest import Manifest
from trajledger.verify.statement import Statement
from trajledger.verify.strict_json import load_object

from .catalog import Catalog

if TYPE_CHECKING:
    from .home import Ledger

__all__ = ["describe"]

STATUS_KINDS = ("approval", "revocation", "erasure", "refusal")


def describe(ledger: Ledger, ref: str) -> dict[str, Any]:
    """A JSON-ready description of the artifact ``ref`` names.

    Raises:
        RefError: the reference resolves to nothing or to several artifacts.
        StoreError: the envelope is missing from the store.
    """
    item = Catalog(ledger).resolve(ref)
    envelope = Envelope.from_bytes(ledger.store.get(item.envelope))
    statement = Statement.from_bytes(envelope.payload)
    entry = LogEntry.from_bytes(ledger.log.entry(item.index))
    info: dict[str, Any] = {
        "kind": item.kind,
        "ref": item.ref,
        "name": item.name,
        "version": item.version,
        "digest": item.digest,
        "index": item.index,
        "envelope": item.envelope,
        "time": entry.time,
        "signers": list(entry.signers),
        "predicateType": statement.predicate_type,
        "predicate": statement.predicate,
    }
    try:
        if ledger.store.exists(item.digest):
            manifest = Manifest.from_json(
                load_object(ledger.store.get_verified(item.digest), "manifest")
            )
            info["files"] = [
                {
                    "path": f.path,
                    "size": f.size,
                    "digest": f.digest,
                    "present": ledger.store.exists(f.digest),
                }
                for f in manifest.files
            ]
    except ProvenanceError as e:
        info["files_error"] = str(e)
    status = []
    for i in ledger.log.find_subject(item.digest):
        record = LogEntry.from_bytes(ledger.log.entry(i))
        if record.kind in STATUS_KINDS:
            by = ", ".join(s[:12] for s in record.signers)
            status.append(f"{record.kind} at log index {i} ({record.time}) by {by}")
    info["status"] = status
    return info
