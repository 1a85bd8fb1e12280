"""Revocations and erasures as a lineage meets them: who may make one, and what an erasure
excuses.

Scope: `authority` (an approver may stop the use of anything, a producer only of what it
produced; an approval's record is an approver's: a producer may not withdraw one) and
`with_authority` (a verified revocation or erasure judged by it, its subject's record looked up
through the walk), `erasure_note` and `note_erased` (the ``erased`` checks of an artifact
whose data a verified erasure deleted), `check_erased` (a bundle's list of erased blobs). Pure
but `with_authority`, as ``verify.judge``; loaded only when the walk meets a revocation or an
erasure (``verify.lineage``), a document a verified erasure deleted (``verify.documents``), or
a bundle that lists erased blobs (``verify.bundle``).
Non-scope: finding those records and verifying them (``verify.lineage``, ``verify.judge``); a
revocation's ``revoked`` check (``verify.judge.standing``).
Spec: schemas/SPEC.md, section "Lineage verification".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from .bundle_index import INDEX_NAME
from .judge import Record, RecordFailure
from .policy import TrustPolicy
from .predicates import Erasure
from .report import ERASED, INFO, Node
from .report import short as _short

if TYPE_CHECKING:
    from .log_entry import LogEntry
    from .log_index import LogIndex

__all__ = ["Walk", "authority", "check_erased", "erasure_note", "note_erased", "with_authority"]


class Walk(Protocol):
    """What a retraction's authority is judged from: a `verify.lineage.LineageVerifier`,
    which stands above this module and loads it for a revocation or an erasure."""

    policy: TrustPolicy
    chosen: dict[str, int]

    @property
    def index(self) -> LogIndex: ...

    def entry(self, index: int) -> LogEntry | None: ...

    def records(self, subject: str, kind: str) -> list[int]: ...

    def record(self, index: int) -> Record | RecordFailure: ...

    def primary_kind(self, digest: str) -> str | None: ...

    def identity_record(self, digest: str, kind: str) -> Record | RecordFailure | None: ...


def with_authority(walk: Walk, rec: Record) -> Record | RecordFailure:
    """A verified revocation or erasure ``rec`` as it counts: itself when it has authority over
    its subject (`authority`), else a failure. Its subject is an artifact (judged by its
    identity record) or, when it is no artifact, an approval's envelope (a withdrawal:
    `verify.withdrawals`), judged by that approval's record; with neither, who made the
    subject is unknown, and a producer's record fails closed (damaged)."""
    subject = rec.entry.subject
    kind = walk.primary_kind(subject)
    made = walk.identity_record(subject, kind) if kind is not None else None
    problem = authority(rec, walk.policy, kind, made)
    if problem is not None and kind is not None and subject not in walk.chosen:
        # By digest every record is judged (`verify.claims`): a producer of any record of
        # these bytes may revoke or erase them; by name, the record of that name only.
        others = (walk.record(i) for i in walk.records(subject, kind)[1:])
        if any(isinstance(r, Record) and authority(rec, walk.policy, kind, r) is None
               for r in others):
            return rec
    if problem is not None and kind is None:  # no artifact: an approval's record?
        found = [i for i in walk.index.of_kind("approval")
                 if (e := walk.entry(i)) is not None and e.envelope == subject]
        if found:
            made, kind = walk.record(found[0]), "approval"
            problem = authority(rec, walk.policy, kind, made)
    return rec if problem is None else RecordFailure(rec.index, problem, made is None)


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
    only of what it produced (it signed ``made``, the subject's identity record, of ``kind``).
    An approval (``kind`` ``"approval"``, ``made`` its record) is withdrawn by an approver, or
    by the key that signed it; never by a producer (withdrawals: docs/SECURITY.md, withdraw26)."""
    approver = policy.policy_at(rec.index).role("approver")
    if rec.signers & approver.keyids or rec.identities & set(approver.identities):
        return None
    if isinstance(made, Record) and (rec.signers & made.signers
                                     or rec.identities & made.identities):
        return None
    who = ", ".join(k[:12] for k in sorted(rec.signers)) or "an identity"
    subject = _short(rec.entry.subject)
    what = f"{kind} {subject}" if kind else subject
    if kind == "approval":
        return (f"{rec.entry.kind} record {rec.index}: signed by producer key {who}, which may "
                f"not withdraw approval {subject}: only an approver may (a producer revokes "
                "its data instead)")
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
