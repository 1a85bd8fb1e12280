"""``trajledger show``: describe a recorded artifact from the log and the store.

Scope: resolve a reference, read its record, envelope, statement and manifest, and list its
status records (approvals, revocations, erasures), and the logs an import brought the record
from (``origins``: ``ORIGIN+KEYHASH`` each; empty for this ledger's own records). A record that
is not an artifact (an approval, a revocation: what ``approve`` and ``revoke`` print is its
envelope digest) is shown by its envelope digest, with the artifact it is about. Descriptive
only: ``trajledger verify`` judges.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import FormatError, ProvenanceError
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.manifest import Manifest
from trajledger.verify.statement import Statement
from trajledger.verify.strict_json import load_object

from .catalog import Catalog, Origins, RefError

if TYPE_CHECKING:
    from .home import LedgerHome

__all__ = ["carried", "describe", "elided", "envelope_entry"]

STATUS_KINDS = ("approval", "revocation", "erasure", "refusal")


def describe(ledger: LedgerHome, ref: str) -> dict[str, Any]:
    """A JSON-ready description of the artifact ``ref`` names, from the envelope its log entry
    names (re-hashed: other bytes in its place are refused, never shown as the record).

    Raises:
        RefError: the reference resolves to nothing or to several artifacts.
        StoreError: the envelope is missing from the store.
        DigestMismatchError: the stored envelope does not hash to the digest its entry names.
    """
    catalog = Catalog(ledger)
    try:
        item = catalog.resolve(ref)
    except RefError:
        index = envelope_entry(ledger, ref)
        if index is None:
            raise
        return _describe_record(ledger, catalog, index)
    # The envelope the log names, or nothing: bytes put in its place would be shown as the
    # record (review rev17: another training config, exit 0).
    envelope = Envelope.from_bytes(ledger.store.get_verified(item.envelope))
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
        "origins": Origins(ledger).names(item.index),
        "predicateType": statement.predicate_type,
        "predicate": statement.predicate,
        "carries": [{"name": n, "digest": d, "size": None if b is None else len(b)}
                    for n, d, b in carried(statement.predicate)],
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
            status.append(f"{record.kind} at log index {i} ({record.time}) by {by}"
                          + "".join(_withdrawals(ledger, record)))
    info["status"] = status
    return info


def _descriptors(value: Any) -> Iterator[dict[str, Any]]:
    """Each object of ``value`` (a predicate) that carries ``content`` under a ``name``: an
    in-toto resource descriptor holding its bytes (a run's dependency lock), in order."""
    todo = [value]
    while todo:  # iteratively: a predicate is another's JSON, nested at will
        v = todo.pop()
        if isinstance(v, dict):
            if isinstance(v.get("content"), str) and isinstance(v.get("name"), str):
                yield v
            todo += reversed(list(v.values()))
        elif isinstance(v, list):
            todo += reversed(v)


def carried(predicate: Any) -> list[tuple[str, str | None, bytes | None]]:
    """What a record carries whole (out47 finding 1: ``show`` printed a several-KB lock
    inline): each descriptor's name, its ``sha256:`` digest (None: none given) and its bytes
    (None: its ``content`` is no base64)."""
    out = []
    for d in _descriptors(predicate):
        digest = d.get("digest")
        hexa = digest.get("sha256") if isinstance(digest, dict) else None
        try:
            data: bytes | None = base64.b64decode(d["content"], validate=True)
        except ValueError:
            data = None
        out.append((d["name"], f"sha256:{hexa}" if isinstance(hexa, str) else None, data))
    return out


def elided(predicate: Any) -> Any:
    """``predicate`` with each carried ``content`` replaced by where its line is (`carried`),
    for the text form: the JSON form keeps the bytes. Iteratively, as `_descriptors`: a signed
    predicate nested some hundreds deep was a RecursionError, exit 4 (rev46 finding 4)."""
    top: list[Any] = [None]
    todo: list[tuple[Any, Any, Any]] = [(predicate, top, 0)]
    while todo:
        v, parent, at = todo.pop()
        if isinstance(v, dict):
            named = isinstance(v.get("name"), str)
            parent[at] = fields = dict.fromkeys(v)
            for k, x in v.items():
                if k == "content" and named and isinstance(x, str):
                    fields[k] = "(carried: see its 'carries' line)"
                else:
                    todo.append((x, fields, k))
        elif isinstance(v, list):
            parent[at] = items = [None] * len(v)
            todo += ((x, items, i) for i, x in enumerate(v))
        else:
            parent[at] = v
    return top[0]


def _withdrawals(ledger: LedgerHome, record: LogEntry) -> list[str]:
    """``; revocation at log index N names it`` for each revocation of an approval's record
    (a withdrawal: whether it counts, verifiers judge: ``admit``, ``verify``)."""
    if record.kind != "approval":
        return []
    return [f"; revocation at log index {j} names it (withdrawn, if it counts)"
            for j in ledger.log.find_subject(record.envelope)
            if LogEntry.from_bytes(ledger.log.entry(j)).kind == "revocation"]


def envelope_entry(ledger: LedgerHome, ref: str) -> int | None:
    """The log index of the record whose envelope is the full digest ``ref``, or None."""
    ref = ref.strip()
    if not ref.startswith("sha256:") or len(ref) != len("sha256:") + 64:
        return None
    try:
        return ledger.log.find_envelope(ref)
    except FormatError:  # not hex: no envelope digest (a damaged log is reported, not hidden)
        return None


def _describe_record(ledger: LedgerHome, catalog: Catalog, index: int) -> dict[str, Any]:
    """A record named by its envelope digest (an approval, a revocation...): the entry, its
    checked envelope's statement, and the artifact it is about when the catalog names it."""
    entry = LogEntry.from_bytes(ledger.log.entry(index), f"log entry {index}")
    envelope = Envelope.from_bytes(ledger.store.get_verified(entry.envelope))
    statement = Statement.from_bytes(envelope.payload)
    try:
        item = catalog.resolve(entry.subject)
        about = f"{item.kind} {item.ref}"
    except ProvenanceError:
        about = None
    return {
        "kind": entry.kind,
        "ref": None,
        "name": None,
        "version": None,
        "digest": entry.envelope,
        "index": index,
        "envelope": entry.envelope,
        "subject": entry.subject,
        "about": about,
        "time": entry.time,
        "signers": list(entry.signers),
        "origins": Origins(ledger).names(index),
        "predicateType": statement.predicate_type,
        "predicate": statement.predicate,
        "carries": [{"name": n, "digest": d, "size": None if b is None else len(b)}
                    for n, d, b in carried(statement.predicate)],
        "status": [w.removeprefix("; ") for w in _withdrawals(ledger, entry)],
    }
