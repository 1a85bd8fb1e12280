"""The judgement of lineage verification: what a record, an approval, a dataset use, an
evaluation or a release is worth under a trust policy, decided from bytes and records alone.

Scope: pure functions over what the walker (``verify.lineage``) hands over: a log entry and its
envelope's bytes become a `Record` (signed by the roles and threshold its kind requires, of the
policy in force when it was logged, less revoked keys) or a `RecordFailure` (damaged evidence:
fail closed; or intact but not signed under the policy); verified records become checks on a
`Node` (approvals counted, held-out batches, evaluation suites, release requirements). Nothing
here reads a file, looks anything up in a log or starts a thread: the caller finds the records
(and checks their inclusion), this module decides what they mean. As python-tuf's
``TrustedMetadataSet`` is to its updater.
Non-scope: finding records and blobs, memoising, the graph (``verify.lineage``); the report's
form (``verify.report``).
Spec: schemas/SPEC.md, section "Lineage verification".
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .digest import digest_bytes
from .dsse import Envelope, verify_envelope
from .errors import FormatError, PolicyError, ProvenanceError, SignatureError, VerificationError
from .keys import Identity, PublicKey
from .kinds import KINDS, Kind, Signing
from .log_entry import LogEntry
from .policy import TrustPolicy
from .predicates import (
    HELD_OUT,
    Approval,
    Dataset,
    Predicate,
    Revocation,
    RolloutBatch,
)
from .report import OK, Node
from .report import short as _short
from .statement import Statement, unsigned_statement
from .times import format_time, parse_time

__all__ = ["CLOCK_SKEW", "REPAIR_HINT", "Record", "RecordFailure", "approvals", "held_out",
           "judge_record", "signing_keys", "standing"]

CLOCK_SKEW = 300
"""Seconds a signed time may run ahead of the time the log integrated its record (clocks
differ a little); more, and the signed time is not believed."""
_YEAR_1 = dt.datetime.min.replace(tzinfo=dt.UTC)
REPAIR_HINT = "restore it from a copy with 'trajledger fsck --repair --from BUNDLE|LEDGER'"


@dataclass(frozen=True)
class Record:
    """A log record whose envelope verified: what the rest of the verification builds on.

    ``signers`` are the keyids of the policy keys that signed it; ``identities`` the policy's
    Sigstore identities that signed it keylessly (each counts toward a threshold like a key).
    """

    index: int
    entry: LogEntry
    statement: Statement
    predicate: Predicate
    signers: frozenset[str]
    identities: frozenset[Identity] = frozenset()


@dataclass(frozen=True)
class RecordFailure:
    """A log record that did not verify.

    ``damaged``: the evidence itself is missing or corrupt (not included, envelope absent or not
    hashing to the entry, unparsable): what the record says is unknown. Otherwise the record is
    intact but does not verify under the policy (an unknown key, too few signatures).
    """

    index: int
    message: str
    damaged: bool
    cause: str | None = None
    """What it fails because of: ``log`` (no verified checkpoint), or ``key:<keyid>:<roles>``
    (its envelope names only that key, which holds none of those roles)."""
    note: str = ""
    """For a ``key:`` cause: which policy roles the keys its envelope names hold."""


# -- records ---------------------------------------------------------------------------------


def judge_record(index: int, entry: LogEntry, data: bytes | None, policy: TrustPolicy,
                 read: Callable[[str], bytes | None]) -> Record | RecordFailure:
    """Judge the record of log entry ``index`` (included under the checkpoint: the caller
    checked) from its envelope's bytes ``data`` (None: missing).

    Steps:
        1. The envelope is present, hashes to the digest in the entry, and parses.
        2. Its signatures meet what the kind requires of the policy's roles
           (`verify.kinds.Signing`, `signing_keys`); the predicate type is the kind's and the
           policy allows it; a subject of the statement is the entry's subject.
        3. The entry names the signers that verified; the predicate reads as the kind's typed
           predicate.

    ``read`` gives a blob by digest: the Sigstore bundles of keyless signatures (a policy
    with identities only).
    """
    head = f"log entry {index} ({entry.kind})"
    kind = KINDS[entry.kind]
    try:
        # (1) Damaged evidence is a FormatError: the record fails closed (below).
        if data is None:
            raise FormatError(f"{head}: envelope {_short(entry.envelope)} is missing")
        got = digest_bytes(data)
        if got != entry.envelope:
            raise FormatError(f"{head}: envelope hashes to {_short(got)}, want "
                              f"{_short(entry.envelope)}")
        envelope = Envelope.from_bytes(data, f"envelope of entry {index}")
        # (2)
        ptypes = kind.predicate_types
        allowed = policy.allowed_predicate_types
        if not any(t in allowed for t in ptypes):
            raise VerificationError(  # (out53: what to do, as for a version not allowed)
                f"log entry {index}: predicate type {' or '.join(ptypes)} is not allowed by the "
                "policy; add it to allowed_predicate_types to accept such records")
        keys, idents, threshold, revoked = signing_keys(policy, kind, index, entry.time)
        if not keys and not idents and not revoked:
            raise VerificationError(f"{head}: the policy has no {' or '.join(kind.roles)} keys or "
                                    f"identities: to trust its signer, add its public key (from its"
                                    f" owner, by a channel you trust) to [roles.{kind.roles[0]}]")
        what = f"{entry.kind} record {index}"
        # Keyless signatures by the policy's Sigstore identities count like keys.
        found: frozenset[Identity] = frozenset()
        notes: tuple[str, ...] = ()
        if idents:
            # Loaded only here: with cryptography.x509, a sixth of `verify`'s imports.
            from .sigstore_adapter import identity_signers, trusted_root_bytes

            found, notes = identity_signers(
                envelope, read, idents, revoked=lambda i, t: policy.revocation(i, index, t),
                trusted_root=trusted_root_bytes(policy.sigstore_trusted_root), what=what,
            )
        need = max(threshold - len(found), 0)
        key_signers: tuple[PublicKey, ...] = ()
        try:
            if need and not keys:  # every key of the role is revoked, or it has identities
                raise SignatureError(  # only, too few of which signed
                    (f"{what}: signed by {len(found)} of {threshold} required identities"
                     + (f" ({'; '.join(notes)})" if notes else "")) if idents else
                    f"{what}: no signature by a trusted key: 0 of {threshold} required "
                    "signature(s) verified"
                )
            if need:
                key_signers = verify_envelope(envelope, keys, threshold=need, what=what)
        except SignatureError as e:
            from .key_roles import signed_by  # loaded only for a record that does not verify

            hint = f"; {'; '.join(notes)}" if notes and notes[0] not in str(e) else ""
            by = signed_by(policy, envelope, kind.roles, index, entry.time, notes)
            named = {sig.keyid for sig in envelope.signatures if sig.keyid}
            if len(named) == 1 and not named & {k.keyid for k in keys} and not found:
                # One key, which the policy does not hold for this: every record it signed
                # fails the same way; the report names it once, as their cause
                # (`verify.untrusted_key.key_node`).
                cause = f"key:{named.pop()}:{' or '.join(kind.roles)}"
                return RecordFailure(index, f"{e}; {by}{hint}", False, cause, by)
            raise SignatureError(f"{e}; {by}{hint}") from e
        statement = unsigned_statement(envelope, allowed_predicate_types=ptypes,
                                       subject_digest=entry.subject, what=what)
        if statement.predicate_type not in allowed:  # a version the policy does not allow
            raise PolicyError(
                f"{what}: predicate type {statement.predicate_type} is not allowed by the "
                "policy; add it to allowed_predicate_types to accept such records"
            )
        # (3)
        signers = frozenset(k.keyid for k in key_signers)
        if not signers <= set(entry.signers):
            raise VerificationError(
                f"log entry {index}: records signers {sorted(entry.signers)}, "
                f"but {sorted(signers)} signed"
            )
        predicate = kind.read(statement, what)
    except FormatError as e:
        return RecordFailure(index, str(e), True)
    except ProvenanceError as e:
        return RecordFailure(index, str(e), False)
    return Record(index, entry, statement, predicate, signers, found)


def signing_keys(
    policy: TrustPolicy, kind: Kind, index: int, time: str
) -> tuple[list[Any], list[Identity], int, int]:
    """The keys and identities that may sign a record of ``kind`` logged at ``index`` at
    ``time``, how many must, and how many of the role's keys and identities are left out as
    revoked: the roles of the policy in force when it was logged (`TrustPolicy.policy_at`),
    less the keys and identities the policy in force now revokes from a point at or before it
    (`TrustPolicy.revocation`)."""
    then = policy.policy_at(index)
    names = (then.signing_role(),) if kind.name == "trust-policy" else kind.roles
    roles = [then.role(r) for r in names]
    held = [k for r in roles for k in r.keys]
    keys = [k for k in held if policy.revocation(k.keyid, index, time) is None]
    held_ids = [i for r in roles for i in r.identities]
    identities = [i for i in held_ids if policy.revocation(i, index, time) is None]
    threshold = max(roles[0].threshold, 1) if kind.signing is Signing.THRESHOLD else 1
    revoked = len(held) - len(keys) + len(held_ids) - len(identities)
    return keys, identities, threshold, revoked


def standing(node: Node, predicate: Predicate, revocations: Iterable[Record],
             policy: TrustPolicy) -> None:
    """Add an artifact's standing to ``node``: each verified revocation of it (``revocations``)
    fails it; a rollout batch's licence must be one the policy accepts (its terms)."""
    for r in revocations:
        reason = r.predicate.reason if isinstance(r.predicate, Revocation) else ""
        node.fail("revoked", f"{reason} (log index {r.index})")
    if isinstance(predicate, RolloutBatch):
        problem = policy.licence_problem(predicate.licence)
        if problem is not None:
            node.fail("licence", problem)
        elif policy.accepted_licences is not None:
            node.add("licence", OK, f"{predicate.licence} (accepted by the policy)")


# -- the rules of training on a dataset -------------------------------------------------------


def held_out(node: Node, label: str, others: Iterable[tuple[int, str, Record | RecordFailure]],
             unreadable: Iterable[int],
             distrusted: Callable[[int, str, RecordFailure], str | None]) -> None:
    """Add the ``not held out`` check: ``others`` are the other dataset records logged before
    the use that list a batch of the dataset (``(index, batch, record)``), ``unreadable`` the
    dataset records before it whose envelopes cannot be read (they may hold any batch out).
    One that is intact but not trusted by the policy holds its batches out all the same (fail
    closed): ``distrusted`` says why it holds a batch out (None: it does not hold it out;
    `verify.distrusted.held_out_line`)."""
    what = f"{label}: not held out"
    before = len(node.checks)
    for i, b, other in others:
        if isinstance(other, RecordFailure):
            if other.damaged:
                node.fail(what, f"dataset record {i} lists batch {_short(b)} but cannot be "
                          f"read: {other.message}; {REPAIR_HINT}")
            elif (why := distrusted(i, b, other)) is not None:
                node.fail(what, why)
            continue
        o = other.predicate
        if isinstance(o, Dataset) and o.split in HELD_OUT:
            node.fail(what, f"rollout-batch {_short(b)} is in {o.split} dataset "
                      f"{o.name}@{o.version} (log index {i})")
    for i in unreadable:
        node.fail(what, f"dataset record {i} cannot be read, so it may hold these batches out; "
                  f"{REPAIR_HINT}")
    if len(node.checks) == before:
        node.add(what, OK, "no batch is in a holdout or regression split")


def approvals(
    node: Node, label: str, found: Iterable[Record | RecordFailure], policy: TrustPolicy,
    purpose: str, before: int, at_time: dt.datetime,
) -> set[str]:
    """Count valid approvals for ``purpose`` among ``found`` (the approval records of one
    artifact), for a use at log index ``before`` at ``at_time``.

    Steps:
        1. Each approval record verified (signed by an approver key).
        2. It names ``purpose`` and was logged before ``before``. Its age and expiry are
           judged by the time the log integrated it (its entry's time), never the
           ``approvedAt`` its signer wrote: one dated more than `CLOCK_SKEW` after its log
           time does not count; it expires at its signed ``expires`` or at its log time
           plus the lifetime it was given (``expires - approvedAt``), whichever is first,
           and must not be older than the policy's maximum approval age at ``at_time``.
        3. Distinct approver keys of the counted records reach the approver threshold.

    The threshold and the maximum age are those of the policy in force at the use
    (`TrustPolicy.policy_at`), as each record's signatures are judged by the policy in force
    when it was logged: a successor that raises the threshold does not fail what was trained
    before it (a use now is judged by the policy now).

    Adds an ``approvals`` check to ``node`` (failed with every reason a record did not
    count) and returns the keyids that counted.
    """
    policy = policy.policy_at(before)
    approvers: set[str] = set()
    notes: list[str] = []
    for r in found:
        # (1)
        if isinstance(r, RecordFailure):
            notes.append(f"approval {r.index} does not count: {r.message}")
            continue
        # (2)
        i, p = r.index, r.predicate
        assert isinstance(p, Approval)
        logged, signed, until = (parse_time(t) for t in (r.entry.time, p.approved_at, p.expires))
        # It lasts what its signer gave it, from when the log took it in, or to its expiry: as
        # timedeltas from the log time (no date of year 1 or 9999 overflows), at least to year 1.
        lasts = max(min(until - logged, until - signed), _YEAR_1 - logged)
        if p.purpose != purpose:
            notes.append(f"approval {i} is for {p.purpose!r}, not {purpose!r}")
        elif i > before:
            notes.append(f"approval {i} was logged after the use (log index {before})")
        elif (signed - logged).total_seconds() > CLOCK_SKEW:
            notes.append(
                f"approval {i} is dated {p.approved_at}, after the log took it in at "
                f"{r.entry.time} (more than {CLOCK_SKEW // 60} minutes): a signer's clock "
                "does not decide how old an approval is"
            )
        elif lasts <= at_time - logged:
            notes.append(f"approval {i} expired at {format_time(logged + lasts)} (logged "
                         f"{r.entry.time}; judged at {format_time(at_time)})")
        elif (at_time - logged).total_seconds() > policy.max_approval_age:
            notes.append(
                f"approval {i} logged {r.entry.time} is older than the policy's maximum "
                f"approval age ({policy.max_approval_age}s)"
            )
        else:
            # The record verified against the approver keys in force when it was logged.
            approvers |= r.signers
            approvers |= {f"identity {i.issuer} {i.subject}" for i in r.identities}
    # (3)
    need = max(policy.role("approver").threshold, 1)
    detail = f"{len(approvers)} of {need} required approver(s) for {purpose!r}"
    if len(approvers) < need:
        node.fail(f"{label}: approvals", detail + ("; " + "; ".join(notes) if notes else ""))
    else:
        node.add(f"{label}: approvals", OK, detail)
    return approvers
