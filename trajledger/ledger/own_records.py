"""Which records another log ships back are this ledger's own (`sent_back`).

Scope: an update (``updates.apply_update``) leaves out of what it takes in the records of this
ledger's own that the other log holds too (it imported them from here, or appended them): not
listed by the import record, they stay this ledger's own (review rev28, finding 3). A record
is this ledger's own when it is logged here, listed by no import record, and one of its
envelope's signatures **verifies** (stored here, read again) with a key whose private half this
ledger holds, or is a keyless signature this ledger noted making (`KeyStore.note_keyless`) whose
stored Sigstore bundle carries exactly that signature of exactly that payload. A keyid alone is
a hint anyone may write into an envelope (a co-signer the verifiers ignore): it names no signer
(review rev29, finding 1).

Non-scope: verifying the record under a policy (the verifiers do, as for every record); which
log an import brought a record from (``catalog.Origins``).
Spec: docs/third-party.md ("What an import adds").
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from trajledger.verify.dsse import Envelope, Signature, pae
from trajledger.verify.errors import ProvenanceError
from trajledger.verify.keys import PublicKey
from trajledger.verify.log_entry import LogEntry

from .catalog import Origins
from .errors import LedgerError

if TYPE_CHECKING:
    from .home import LedgerHome

__all__ = ["sent_back", "signed_with"]


def sent_back(ledger: LedgerHome, entries: Mapping[int, LogEntry]) -> set[int]:
    """Which of ``entries`` (another log's, an update takes in) are records of this ledger's
    own: logged here, listed by no import record, and signed, as the envelope stored here
    verifies, by a key whose private half this ledger holds, or keylessly here
    (`KeyStore.note_keyless`; kless31 finding 1) (a party that imported them from here ships
    them back, or appends them to its log). Not taken in again: an import record listing one
    made it another log's, so this ledger's own release suite was refused as unpinned, and a
    revocation of it whose envelope that log withheld was taken in and failed closed (review
    rev28, finding 3). Another log's records an earlier version logged without an import record
    (stopped between its two appends: left28) are signed by that log's keys, or keylessly
    there: taken in, and listed, as before, even when their envelope names one of this
    ledger's keyids beside a signature that does not verify (review rev29, finding 1)."""
    found = {i: h for i, e in entries.items() if (h := ledger.log.find_envelope(e.envelope))
             is not None}
    if not found:
        return set()
    made = ledger.keys.keyless_made()  # keyless signatures made here (kless31)
    keys: dict[str, PublicKey] = {}
    for path in ledger.keys.list_private():
        with contextlib.suppress(ProvenanceError, LedgerError, OSError):
            key = ledger.keys.public(path.stem)
            keys[key.keyid] = key
    state, origins = ledger.trust_state(), Origins(ledger)
    return {i for i, h in found.items() if (e := state.entry(h)) is not None
            and (keys.keys() | made).intersection(e.signers) and not origins.imported(h)
            and _signed_here(ledger, e.envelope, keys, made)}


def signed_with(ledger: LedgerHome, envelope: str, key: PublicKey) -> bool:
    """Whether the envelope stored here under digest ``envelope`` carries a signature of
    ``key`` that verifies; its keyid alone names no signer (review rev29, finding 1; rev30:
    `status.withdraw` lets a key withdraw an approval it signed)."""
    return _signed_here(ledger, envelope, {key.keyid: key}, set())


def _signed_here(ledger: LedgerHome, envelope: str, keys: Mapping[str, PublicKey],
                 made: set[str]) -> bool:
    """Whether a signature of the envelope ``envelope``, as stored here, verifies with one of
    ``keys`` or is the keyless signature of a bundle in ``made`` (stored here, signing this
    payload with this signature). An envelope or bundle missing, damaged or unreadable: no."""
    raw = ledger.read_blob(envelope)
    if raw is None or "sha256:" + hashlib.sha256(raw).hexdigest() != envelope:
        return False
    try:
        env = Envelope.from_bytes(raw, f"envelope {envelope}")
    except ProvenanceError:
        return False
    message = pae(env.payload_type, env.payload)
    return any((s.keyid in keys and keys[s.keyid].verify(s.sig, message))
               or (s.keyid in made and _bundle_signs(ledger, s, env)) for s in env.signatures)


def _bundle_signs(ledger: LedgerHome, sig: Signature, env: Envelope) -> bool:
    """Whether the Sigstore bundle stored under ``sig``'s keyid carries exactly ``sig`` over
    ``env``'s payloadType and payload (what `sign_statement` put in the envelope; the bundle's
    own verification is the verifiers' business)."""
    from trajledger.verify.sigstore_adapter import SigstoreBundle, bundle_keyid

    raw = ledger.read_blob("sha256:" + sig.keyid)
    if raw is None or bundle_keyid(raw) != sig.keyid:
        return False
    try:
        bundle = SigstoreBundle.from_bytes(raw, f"Sigstore bundle {sig.keyid[:16]}")
    except ProvenanceError:
        return False
    inner = bundle.envelope
    return (inner is not None and (inner.payload_type, inner.payload) == (env.payload_type,
                                                                        env.payload)
            and [s.sig for s in inner.signatures] == [sig.sig])
