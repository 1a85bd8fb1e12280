"""The write side's encodings of what ``verify/`` parses: what the ledger writes, the verifier
reads back with its strict parsers, and nothing a verification needs (so ``verify/`` keeps only
the reading half).

Scope: a DSSE envelope (``verify.dsse.Envelope.from_bytes``), a verifier key string
(``verify.note.verifier_from_vkey``), a checkpoint's note text
(``verify.checkpoint.Checkpoint.from_text``), a signed note's signature lines and wire form
(``verify.note.Note.from_bytes``), a tlog-proof (``verify.tlog_proof.TlogProof.from_bytes``),
a bundle's ``proofs/<n>.consistency`` and ``.range`` members
(``verify.consistency.parse_consistency_proof``), its ``bundle.json``
(``verify.bundle_index.BundleIndex.from_bytes``), a log entry
(``verify.log_entry.LogEntry.from_bytes``; `relinked_entry` re-checks only the two fields an
append fills in).
Non-scope: signing (``ledger.signing``), what is written where (``ledger.exchange``,
``ledger.log``).
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

from trajledger.verify.checkpoint import Checkpoint
from trajledger.verify.digest import HEX64
from trajledger.verify.dsse import Envelope
from trajledger.verify.entry_fields import check_entry_fields
from trajledger.verify.errors import FormatError
from trajledger.verify.log_entry import (
    ENTRY_VERSION,
    MAX_ENTRY_SIZE,
    LogEntry,
)
from trajledger.verify.note import (
    ALG_ED25519,
    MAX_SIGNATURES,
    Note,
    NoteSignature,
    Verifier,
    check_key_name,
    check_text_bytes,
    key_hash,
)
from trajledger.verify.times import parse_time
from trajledger.verify.tlog_proof import TLOG_PROOF_HEADER, TlogProof

from .signing import canonical_json

if TYPE_CHECKING:  # (`INDEX_KEYS` loads where written: every reader of the log imports this
    # module for `verifier_vkey`, and `verify` need not load a bundle's index format, walk50)
    from trajledger.verify.bundle_index import BundleIndex

__all__ = [
    "b64encode",
    "bundle_index_bytes",
    "checkpoint_text",
    "consistency_proof_bytes",
    "envelope_bytes",
    "format_signature_line",
    "log_entry",
    "note_bytes",
    "relinked_entry",
    "signature_line",
    "tlog_proof_bytes",
    "verifier_vkey",
    "vkey_string",
]


def b64encode(data: bytes) -> str:
    """Standard base64 with padding, as DSSE writers emit it."""
    return base64.b64encode(data).decode("ascii")


def envelope_bytes(envelope: Envelope) -> bytes:
    """An envelope as compact JSON with standard padded base64 (the form written to disk)."""
    obj = {
        "payload": b64encode(envelope.payload),
        "payloadType": envelope.payload_type,
        "signatures": [
            ({"keyid": s.keyid} if s.keyid else {}) | {"sig": b64encode(s.sig)}
            for s in envelope.signatures
        ],
    }
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("ascii")


def checkpoint_text(cp: Checkpoint) -> bytes:
    """The note text of a checkpoint (origin, size, base64 root, extension lines), final
    newline included: what the log key signs."""
    lines = [cp.origin, str(cp.size), base64.b64encode(cp.root).decode(), *cp.extensions]
    return ("\n".join(lines) + "\n").encode()


def format_signature_line(name: str, key_hash: bytes, sig: bytes) -> bytes:
    """Return one note signature line: ``— <name> <base64(key_hash || sig)>`` and a newline.

    Args:
        name: the key name.
        key_hash: the 4-byte key ID.
        sig: the signature over the note text.

    Returns:
        The UTF-8 line, newline included.

    Raises:
        FormatError: a key ID that is not 4 bytes, an empty signature, or a name no reader
            accepts (``verify.note.check_key_name``).
    """
    if len(key_hash) != 4 or not sig:
        raise FormatError(
            f"signature line for {name}: key ID has {len(key_hash)} bytes and signature "
            f"{len(sig)}, want 4 and at least 1"
        )
    check_key_name(name, "note signature")
    return "\u2014 ".encode() + name.encode() + b" " + base64.b64encode(key_hash + sig) + b"\n"


def tlog_proof_bytes(proof: TlogProof) -> bytes:
    """A proof in its text form (c2sp.org/tlog-proof): header, ``extra``, index, hashes, a
    blank line, the checkpoint."""
    lines = [TLOG_PROOF_HEADER]
    if proof.extra is not None:
        lines.append(b"extra " + base64.b64encode(proof.extra))
    lines.append(b"index " + str(proof.index).encode())
    lines.extend(base64.b64encode(h) for h in proof.inclusion)
    return b"\n".join(lines) + b"\n\n" + proof.checkpoint


def signature_line(sig: NoteSignature) -> bytes:
    """A parsed signature line written back, newline included.

    Raises:
        FormatError: (a line not parsed) a bad name, a key ID that is not 4 bytes, or an empty
            signature.
    """
    check_key_name(sig.name, "note signature")
    if len(sig.key_hash) != 4:
        raise FormatError(
            f"note signature by {sig.name}: key ID has {len(sig.key_hash)} bytes, want 4"
        )
    if not sig.signature:
        raise FormatError(f"note signature by {sig.name}: signature is empty")
    return format_signature_line(sig.name, sig.key_hash, sig.signature)


def note_bytes(note: Note) -> bytes:
    """A note in its wire form: text, blank line, signature lines (a parsed note's exact
    input).

    Raises:
        FormatError: (a note not parsed) the text is not valid UTF-8, has control characters or
            does not end in a newline; no signatures or more than 100; a bad signature line.
    """
    check_text_bytes(note.text, "note text")
    if not note.text.endswith(b"\n"):
        raise FormatError("note text does not end in a newline")
    if not note.signatures:
        raise FormatError("note has no signature lines, want at least 1")
    if len(note.signatures) > MAX_SIGNATURES:
        raise FormatError(
            f"note has {len(note.signatures)} signature lines, want at most {MAX_SIGNATURES}"
        )
    return note.text + b"\n" + b"".join(signature_line(s) for s in note.signatures)


def consistency_proof_bytes(proof: list[bytes]) -> bytes:
    """A ``proofs/<n>.consistency`` member: one standard base64 hash per line, each ending LF."""
    return b"".join(base64.b64encode(h) + b"\n" for h in proof)


def vkey_string(name: str, ed25519_public_bytes: bytes, alg: int = ALG_ED25519) -> str:
    """Return the verifier key string for an Ed25519 public key.

    Args:
        name: the key name.
        ed25519_public_bytes: the 32-byte raw public key.
        alg: `ALG_ED25519` for a log key, `ALG_COSIGNATURE_V1` for a witness key.

    Returns:
        ``<name>+<key ID hex>+<base64(alg || key)>``.

    Raises:
        FormatError: invalid name, unsupported type or a key that is not 32 bytes.
    """
    Verifier(name=name, alg=alg, public_key=ed25519_public_bytes)
    kh = key_hash(name, alg, ed25519_public_bytes)
    return f"{name}+{kh.hex()}+{base64.b64encode(bytes([alg]) + ed25519_public_bytes).decode()}"


def verifier_vkey(verifier: Verifier) -> str:
    """The verifier key string of a parsed verifier key (what it was parsed from)."""
    return vkey_string(verifier.name, verifier.public_key, verifier.alg)


def bundle_index_bytes(index: BundleIndex) -> bytes:
    """The canonical (RFC 8785) bytes of ``bundle.json``: the only encoding. Its members are
    its format's (``verify.bundle_index.INDEX_KEYS``, as ``BundleIndex.from_bytes`` requires);
    a member or terms object holds its dataclass's fields (absent terms are null)."""
    from trajledger.verify.bundle_index import INDEX_KEYS

    obj: dict[str, Any] = {
        "created": index.created,
        "erased": list(index.erased),
        "extension": index.extension,
        "format": index.format,
        # (each dataclass's fields, as `dataclasses.asdict` gives them: its generic deep copy
        # costs about 10 us a member, a bundle has thousands)
        "members": [{"name": m.name, "size": m.size, "sha256": m.sha256} for m in index.members],
        "omitted": list(index.omitted),
        "origin": index.origin,
        "subject": index.subject,
        "terms": [{"batch": t.batch, "licence": t.licence, "consent": t.consent,
                   "retention": t.retention} for t in index.terms],
        "vkey": index.vkey,
    }
    return canonical_json({k: obj[k] for k in INDEX_KEYS[index.format]})


def log_entry(
    kind: str, subject: str, envelope: str, signers: tuple[str, ...], time: str, prev: str
) -> LogEntry:
    """A log entry from its fields, with its canonical (RFC 8785) bytes: every value is ASCII
    without characters JSON escapes, so the encoding is this template.

    Raises:
        FormatError: a field is not what the format allows (``check_entry_fields``), or the
            encoding exceeds 65,535 bytes (the largest entry an entry bundle can hold).
    """
    check_entry_fields(kind, subject, envelope, signers, time, prev, "log entry")
    return _encoded(kind, subject, envelope, signers, time, prev)


def relinked_entry(entry: LogEntry, prev: str, time: str) -> LogEntry:
    """``entry`` (made by `log_entry`, so its kind, subject, envelope and signers are checked)
    with another ``prev`` and ``time``, the two fields checked here (as `log_entry` checks
    them): what the log appends, once per entry, from an `EntrySpec` checked when it was made.

    Raises:
        FormatError: ``prev`` is not 64 lowercase hex, or ``time`` is not a valid
            ``YYYY-MM-DDTHH:MM:SSZ``.
    """
    parse_time(time, "log entry")
    if not isinstance(prev, str) or not HEX64.fullmatch(prev):
        raise FormatError(f"log entry: prev {prev!r} is not 64 lowercase hex")
    return _encoded(entry.kind, entry.subject, entry.envelope, entry.signers, time, prev)


def _encoded(
    kind: str, subject: str, envelope: str, signers: tuple[str, ...], time: str, prev: str
) -> LogEntry:
    """The entry of checked fields with its canonical bytes (the template `log_entry` names).

    Raises:
        FormatError: the encoding exceeds `MAX_ENTRY_SIZE` bytes.
    """
    quoted = ",".join(f'"{k}"' for k in signers)
    raw = (
        f'{{"envelope":"{envelope}","kind":"{kind}","prev":"{prev}","signers":[{quoted}],'
        f'"subject":"{subject}","time":"{time}","v":{ENTRY_VERSION}}}'
    ).encode("ascii")
    if len(raw) > MAX_ENTRY_SIZE:
        raise FormatError(f"log entry: encodes to {len(raw)} bytes, want at most {MAX_ENTRY_SIZE}")
    return LogEntry(kind, subject, envelope, signers, time, prev, raw)
