"""Revocations and erasures as a lineage meets them: who may make one, and what an erasure
excuses.

Scope: `authority` (an approver may stop the use of anything, a producer only of what it
produced), `erasure_note` and `note_erased` (the ``erased`` checks of an artifact whose data a
verified erasure deleted), `check_erased` (a bundle's list of erased blobs). Pure, as
``verify.judge``; loaded only when the walk meets a revocation or an erasure
(``verify.lineage``), a document a verified erasure deleted (``verify.documents``), or a bundle
that lists erased blobs (``verify.bundle``).
Non-scope: finding those records and verifying them (``verify.lineage``, ``verify.judge``); a
revocation's ``revoked`` check (``verify.judge.standing``).
Spec: schemas/SPEC.md, section "Lineage verification".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from .bundle_index import INDEX_NAME
from .judge import Record, RecordFailure
from .policy import TrustPolicy
from .predicates import Erasure
from .report import ERASED, INFO, Node
from .report import short as _short

__all__ = ["authority", "check_erased", "erasure_note", "note_erased"]


def check_erased(erased: Sequence[str], erased_blob: Callable[[str], Record | None],
                 bundle: Node) -> None:
    """The ``erased`` checks of a ``bundle`` node whose ``bundle.json`` lists ``erased`` blobs:
    a verified erasure record of the lineage (``erased_blob``, by digest) deleted each."""
    for digest in erased:
        if erased_blob(digest) is None:
            bundle.fail("erased", f"{INDEX_NAME} lists {digest[:19]}… as erased, but no "
                        "verified erasure record of this lineage deleted it")
    bundle.add("erased", INFO, f"{len(erased)} blob(s) not in the bundle: deleted "
               "by verified erasure records (their digests still verify)")


def authority(rec: Record, policy: TrustPolicy, kind: str | None,
              made: Record | RecordFailure | None) -> str | None:
    """Why a revocation or erasure has no authority over its subject, or None when it has:
    an approver (of the policy it was logged under) may stop the use of anything; a producer
    only of what it produced (it signed ``made``, the subject's identity record, of ``kind``)."""
    approver = policy.policy_at(rec.index).role("approver")
    if rec.signers & approver.keyids or rec.identities & set(approver.identities):
        return None
    if isinstance(made, Record) and (rec.signers & made.signers
                                     or rec.identities & made.identities):
        return None
    who = ", ".join(k[:12] for k in sorted(rec.signers)) or "an identity"
    subject = _short(rec.entry.subject)
    what = f"{kind} {subject}" if kind else subject
    if made is None:
        return (f"{rec.entry.kind} record {rec.index}: signed by producer key {who}, but no "
                f"record of {subject} was found to tell whether that key produced it")
    return (f"{rec.entry.kind} record {rec.index}: signed by producer key {who}, which did "
            f"not produce {what}: a producer may revoke or erase only what it produced, "
            "an approver anything")


def erasure_note(erased: Record, extra: str = "") -> str:
    """What an erasure says, for an ``erased`` check."""
    pred = erased.predicate
    reason = pred.reason if isinstance(pred, Erasure) else ""
    return (f"{reason} (log index {erased.index})" + (f"; {extra}" if extra else "")
            + "; digests and signed records still verify")


def note_erased(node: Node, erased: Record | None, extra: str = "",
                others: Iterable[Record] = ()) -> None:
    """Add ``node``'s ``erased`` checks: its own erasure ``erased`` (``extra``: what of it was
    deleted), and each other erasure that deleted blobs of it (``others``)."""
    if erased is not None:
        node.add("erased", ERASED, erasure_note(erased, extra))
    for other in others:
        node.add("erased", ERASED, f"blob(s) deleted by the erasure of "
                 f"{_short(other.entry.subject)} (log index {other.index}); digests still "
                 "verify")
