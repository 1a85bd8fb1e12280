"""Statements about recorded artifacts: approvals, revocations, erasures, and the trust policy.

Scope: record an approver's approval of a dataset or batch for a purpose until an expiry; a
revocation (the subject must no longer be used); an erasure (the subject's blobs are deleted,
its digests and signed records stay, so lineage still verifies and says "erased"); and a new
trust policy, which takes effect only when the threshold of the current policy's approvers
signed it.
Non-scope: judging them (``verify.lineage`` and the runner's admission gate do).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from verify import predicates
from verify.errors import FormatError, PolicyError
from verify.policy import TrustPolicy, check_successor, parse_duration

from .catalog import Catalog, CatalogItem
from .keys import Signer
from .models import ApprovalPredicate, ErasurePredicate, RevocationPredicate, rfc3339
from .record import Recorded, record_statement

if TYPE_CHECKING:
    from .home import Ledger

__all__ = ["approve", "erase", "record_policy", "revoke"]

APPROVABLE = frozenset({"dataset", "rollout-batch"})


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _item(ledger: Ledger, ref: str, kinds: frozenset[str] | None = None) -> CatalogItem:
    return Catalog(ledger).resolve(ref, kinds)


def approve(
    ledger: Ledger,
    ref: str,
    signer: Signer,
    *,
    purpose: str = "train",
    expires: str = "30d",
    note: str | None = None,
    validation_report: str | None = None,
    now: dt.datetime | None = None,
) -> Recorded:
    """Record an approval of a dataset or batch for ``purpose``, valid for ``expires``.

    Raises:
        RefError: ``ref`` names no dataset or batch.
        FormatError: a bad duration.
    """
    item = _item(ledger, ref, APPROVABLE)
    when = now or _now()
    seconds = parse_duration(expires, "--expires")
    if seconds == 0:
        raise FormatError("--expires: an approval must last longer than 0 seconds")
    predicate = ApprovalPredicate(
        purpose=purpose,
        approved_at=rfc3339(when),
        expires=rfc3339(when + dt.timedelta(seconds=seconds)),
        note=note,
        validation_report=validation_report,
    ).to_json()
    return record_statement(
        ledger, item.ref or item.name, item.digest, predicates.APPROVAL, predicate, signer
    )


def revoke(ledger: Ledger, ref: str, signer: Signer, *, reason: str) -> Recorded:
    """Record that ``ref`` must no longer be used (its lineage then fails verification).

    Raises:
        RefError: ``ref`` names nothing recorded.
        FormatError: an empty reason.
    """
    if not reason.strip():
        raise FormatError("--reason: say why the artifact is revoked")
    item = _item(ledger, ref)
    predicate = RevocationPredicate(reason=reason, revoked_at=rfc3339(_now())).to_json()
    return record_statement(
        ledger, item.ref or item.name, item.digest, predicates.REVOCATION, predicate, signer
    )


def erase(ledger: Ledger, ref: str, signer: Signer, *, reason: str) -> tuple[Recorded, int]:
    """Delete an artifact's data blobs and record a signed erasure.

    The manifest (names, sizes, digests) and every signed record stay, so lineage still
    verifies and reports "erased". The erasure record is appended first: if deleting fails
    half-way, the record already explains the missing blobs, and re-running finishes the job.

    Returns:
        The erasure record and how many blobs were deleted.

    Raises:
        RefError: ``ref`` names nothing recorded, or something without files.
        FormatError: an unknown reason.
    """
    from verify._json import load_object
    from verify.manifest import Manifest

    item = _item(ledger, ref)
    if not ledger.store.exists(item.digest):
        raise PolicyError(
            f"{item.kind} {item.ref}: has no manifest in this store; nothing to erase"
        )
    manifest = Manifest.from_json(load_object(ledger.store.get_verified(item.digest), "manifest"))
    blobs = sorted({f.digest for f in manifest.files})
    predicate = ErasurePredicate(reason=reason, erased_at=rfc3339(_now()), blobs=blobs).to_json()  # type: ignore[arg-type]
    rec = record_statement(
        ledger, item.ref or item.name, item.digest, predicates.ERASURE, predicate, signer
    )
    deleted = sum(ledger.store.delete(d) for d in blobs)
    return rec, deleted


def record_policy(ledger: Ledger, policy_file: Path, signers: Sequence[Signer]) -> Recorded:
    """Record a trust policy as the ledger's policy in force.

    The first policy recorded is self-signed: the threshold of its own approvers must sign it
    (whoever verifies decides to trust it by its digest or by holding the same file). Every
    later policy must have a higher serial and be signed by the threshold of the current
    policy's approvers (`verify.policy.check_successor`).

    Raises:
        FormatError: the policy file is invalid.
        PolicyError: the signers are not enough approvers, or the serial does not increase.
    """
    from ._policy_state import current_policy

    try:
        data = policy_file.read_bytes()
    except OSError as e:
        from .errors import LedgerError

        raise LedgerError(f"{policy_file}: cannot read: {e.strerror}") from e
    new = TrustPolicy.from_toml(data, policy_file.parent, f"policy {policy_file}")
    signer_ids = frozenset(s.keyid for s in signers)
    current = current_policy(ledger)
    if current is None:
        approvers = new.role("approver")
        got = len(signer_ids & approvers.keyids)
        if approvers.threshold == 0 or got < approvers.threshold:
            raise PolicyError(
                f"policy {new.name!r}: the first policy must be signed by its own approver "
                f"threshold: {got} of {max(approvers.threshold, 1)} approver key(s) signed"
            )
    else:
        check_successor(current[1], new, signer_ids)
    from verify.digest import digest_bytes

    from .signing import canonical_json

    body = new.to_json()
    digest = digest_bytes(canonical_json(body))
    ledger.store.put_bytes(canonical_json(body))
    return record_statement(
        ledger,
        f"{new.name}#{new.serial}",
        digest,
        predicates.TRUST_POLICY,
        {"policy": body},
        list(signers),
    )
