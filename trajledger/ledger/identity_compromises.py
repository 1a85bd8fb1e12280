"""What a Sigstore identity another log declares compromised signed, revoked here: step 2 of
`update_compromises.compromises` for an identity, as for a key (out55's Left, out57).

Scope: the records that log alone brought here (`update_compromises._brought_by`), logged
there at or after the point its policy declares (``compromised_since``, of that log), whose
envelope's keyless signature verifies here (the buyer's policy's trusted root) as the
identity's. A key's keyid is in the log entry; which identity signed keylessly is in the
record's Sigstore bundle (the certificate's SAN and issuer), stored by the keyid the envelope
names, so each candidate's bundle is verified (`verify.sigstore_adapter.identity_signers`).

Non-scope: a record another log brought too (a log stops only what it alone brought), and a
record whose bundle cannot be verified here (no sigstore package, a damaged bundle): left as
before, its identity's warning names the successor that stops it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from trajledger.verify.errors import ProvenanceError
from trajledger.verify.kinds import KINDS

from .errors import LedgerError

if TYPE_CHECKING:
    from trajledger.verify.compromise import RevokedIdentity
    from trajledger.verify.lineage import LineageVerifier
    from trajledger.verify.log_entry import LogEntry
    from trajledger.verify.policy import TrustPolicy

    from .home import LedgerHome
    from .keys import Signer
    from .trust_state import TrustState

__all__ = ["revoke_signed"]


def revoke_signed(ledger: LedgerHome, policy: TrustPolicy, ri: RevokedIdentity,
                  seen: Mapping[int, LogEntry], alone: Callable[[str], bool], state: TrustState,
                  verifier: LineageVerifier, signer: Signer, reason: str) -> list[str]:
    """Revoke here, signed by ``signer``, what the identity of ``ri`` signed keylessly since
    the point it declares, of the entries ``seen`` of another log, held here from that log
    alone (``alone``: `update_compromises._brought_by`) and not revoked here already; the
    digests revoked.

    Steps:
        1. Each entry of ``seen`` of a lineage kind that ``ri`` covers and whose subject this
           ledger holds from that log alone (``alone``).
        2. Its envelope read from the store, its keyless signatures verified under
           ``policy``'s trusted root: the identity among their signers.
        3. Unless a revocation of it counts here already, revoked with ``reason``.
    """
    from trajledger.verify.dsse import MAX_ENVELOPE_BYTES, Envelope
    from trajledger.verify.lineage import Record
    from trajledger.verify.sigstore_adapter import identity_signers, trusted_root_bytes

    from .status import revoke
    from .update_reads import held

    def blob(digest: str) -> bytes | None:
        try:
            return ledger.store.get(digest, limit=MAX_ENVELOPE_BYTES)
        except (LedgerError, OSError):
            return None

    root, out = trusted_root_bytes(policy.sigstore_trusted_root), []
    for i, e in sorted(seen.items()):
        # (1)
        if (not KINDS[e.kind].lineage or not ri.covers(i, e.time) or e.subject in out
                or not held(ledger, e.subject, state)
                or not alone(e.subject)):
            continue
        # (2)
        raw = blob(e.envelope)
        try:
            found, _notes = identity_signers(Envelope.from_bytes(raw or b""), blob,
                                             [ri.identity], trusted_root=root)
        except ProvenanceError:  # (fail closed to the warning: not verifiable here)
            continue
        if ri.identity not in found:
            continue
        # (3)
        if any(isinstance(verifier.record(j), Record)
               for j in verifier.records(e.subject, "revocation")):
            continue
        revoke(ledger, e.subject, signer, reason=reason)
        out.append(e.subject)
    return out
