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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from trajledger.verify import predicates
from trajledger.verify.digest import DIGEST_PREFIX, HEX64
from trajledger.verify.errors import FormatError, PolicyError, ProvenanceError
from trajledger.verify.policy import KEY_ROLES, TrustPolicy, parse_duration
from trajledger.verify.predicates import ERASURE_REASONS, Approval, Erasure, Revocation
from trajledger.verify.succession import check_successor
from trajledger.verify.times import format_time

from .catalog import Catalog, CatalogItem, shown_ref
from .errors import LedgerError, OptionValueError, StoreError, read_failure
from .keys import Signer
from .record import Recorded, record_statement

if TYPE_CHECKING:
    from trajledger.verify.judge import Record, RecordFailure
    from trajledger.verify.lineage import LineageVerifier
    from trajledger.verify.log_entry import LogEntry

    from .home import LedgerHome
    from .signing import AnySigner
    from .sigstore_sign import KeylessSigner

__all__ = [
    "approval_of", "approve", "delete_erased", "erasable_blobs", "erase", "erased_before",
    "files_here", "held_elsewhere", "in_force", "kept_blobs", "label", "pins_it_breaks",
    "record_policy", "revocations", "revoke", "withdraw", "withdraw_of",
]

APPROVABLE = frozenset({"dataset", "rollout-batch"})


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _item(ledger: LedgerHome, ref: str, kinds: frozenset[str] | None = None) -> CatalogItem:
    return Catalog(ledger).resolve(ref, kinds)


def approve(
    ledger: LedgerHome,
    ref: str,
    signer: AnySigner,
    *,
    purpose: str = "train",
    expires: str = "30d",
    note: str | None = None,
    validation_report: str | None = None,
    now: dt.datetime | None = None,
    check: Callable[[int], None] | None = None,
) -> Recorded:
    """Record an approval of a dataset or batch for ``purpose``, valid for ``expires``.

    The signer must hold the approver role of the ledger's policy in force, when there is one.
    The data's lineage is not verified here (the raw recorder, which tests use to build
    ledgers): `trajledger.Ledger.approve`, what the CLI calls, verifies it first and again
    under the log's lock (``check``, run there as `record.record_statement`'s).

    Raises:
        RefError: ``ref`` names no dataset or batch.
        FormatError: a bad duration or purpose.
        PolicyError: the signer is not an approver of the policy in force (a keyless one:
            `keyless_check.check_keyless_approver`, before it signs); the approval signed is
            one withdrawn (the same statement, made again in the same second).
    """
    item = _item(ledger, ref, APPROVABLE)
    when = now or _now()
    seconds = parse_duration(expires, "--expires")
    if seconds == 0:
        raise OptionValueError("--expires 0: an approval must last longer than 0 seconds; "
                               "give a duration such as --expires 90d")
    try:
        until = when + dt.timedelta(seconds=seconds)
    except OverflowError:  # past datetime's year 9999
        raise OptionValueError(f"--expires {expires!r} ends after the year 9999; give a shorter "
                               "duration, such as --expires 365d") from None
    if not purpose.strip():
        raise OptionValueError("--purpose is empty: say what the data is approved for, such as "
                               "--purpose training")
    if not isinstance(signer, Signer):  # keyless: its token's identity (left32 finding 2)
        from .keyless_check import check_keyless_approver

        check_keyless_approver(ledger, signer, f"approve {shown_ref(ledger, item)}")
    predicate = Approval(
        purpose,
        format_time(when),
        format_time(until),
        note,
        validation_report,
    )
    if not isinstance(signer, Signer):  # a keyless signature is new bytes each time (left33)
        _refuse_withdrawn_again(ledger, item, predicate, signer)
    rec = record_statement(
        ledger, item.ref or item.name, item.digest, predicates.APPROVAL,
        predicate.to_predicate(), signer, action=f"approve {shown_ref(ledger, item)}", check=check,
    )
    if rec.new:  # (read nothing more once the log grew: a fault here would say it did not)
        return rec
    state = ledger.trust_state()
    gone = [i for i in state.about(rec.envelope_digest)
            if (e := state.entry(i)) is not None and e.kind == "revocation"]
    if gone:  # the same signed approval, withdrawn: made again within the same second
        raise PolicyError(
            f"approve {shown_ref(ledger, item)}: this is the approval at log index {rec.index}, "
            f"withdrawn (the revocation at log index {gone[0]} names it): the same approver, "
            "purpose, expiry "
            "and note in the same second sign the same statement; approve again a second "
            "later, or with another --expires or --note; nothing new was recorded"
        )
    return rec


def _refuse_withdrawn_again(ledger: LedgerHome, item: CatalogItem, predicate: Approval,
                            signer: KeylessSigner) -> None:
    """Refuse, before a keyless signer signs it, an approval whose statement is that of an
    approval withdrawn that this token's identity might have signed: it would count for nothing
    (`verify.withdrawals`: a withdrawal withdraws the statement). A key's is found after the
    append, the same envelope (`approve`); a keyless signature is new bytes each time.

    Raises:
        PolicyError: such an approval is withdrawn (nothing signed).
    """
    from trajledger.verify.judge import Record
    from trajledger.verify.statement import Statement
    from trajledger.verify.withdrawals import withdrawn

    from .keyless_check import might_be
    from .policy_state import current_policy
    from .signing import statement_bytes

    found_policy = current_policy(ledger)
    if found_policy is None:
        return
    new = Statement.from_bytes(statement_bytes([(item.ref or item.name, item.digest)],
                                               predicates.APPROVAL, predicate.to_predicate()))
    with _approvals(ledger, found_policy[1], item.digest) as (verifier, found):
        same = {r.index for r in found if isinstance(r, Record) and r.statement == new}
        gone = [r for r, now in zip(found, withdrawn(verifier, found), strict=True)
                if isinstance(r, Record) and r.index in same and not isinstance(now, Record)
                ] if same else []
    if not gone:
        return
    _token, maybe = might_be(signer)
    hit = next((r for r in gone if maybe(r.identities)), None)
    if hit is not None:
        raise PolicyError(
            f"approve {shown_ref(ledger, item)}: this is the approval at log index {hit.index}, "
            "withdrawn: the same identity, purpose, expiry and note in the same second sign the "
            "same statement; approve again a second later, or with another --expires or "
            "--note; nothing was signed")


def approval_of(ledger: LedgerHome, ref: str) -> tuple[int, str] | None:
    """The log index and envelope digest of the approval whose envelope digest (or its
    prefix) ``ref`` is, or None when ``ref`` names no approval."""
    from .show import envelope_entry

    index = envelope_entry(ledger, ref)
    entry = ledger.trust_state().entry(index) if index is not None else None
    return (index, entry.envelope) if index is not None and entry is not None \
        and entry.kind == "approval" else None


def revoke(ledger: LedgerHome, ref: str, signer: AnySigner, *, reason: str) -> Recorded:
    """Record that ``ref`` must no longer be used (its lineage then fails verification), or,
    when ``ref`` is an approval's envelope digest (what ``approve`` prints), that the approval
    is withdrawn (`withdraw`; the one way to withdraw one of two approvals an identity signed
    keylessly: ``revoke DIGEST --sigstore``).

    The signer must hold the producer or approver role of the policy in force, when there is
    one; a keyless signer withdraws approvals only.

    Raises:
        RefError: ``ref`` names nothing recorded.
        FormatError: an empty reason.
        PolicyError: the signer is neither a producer nor an approver of the policy in force;
            a producer withdrawing an approval; a keyless signer revoking an artifact.
    """
    if not reason.strip():
        raise OptionValueError("--reason is empty: say why the artifact is revoked, such as "
                               "--reason 'collected with a buggy reward'")
    approval = approval_of(ledger, ref)
    if approval is not None:
        earlier = withdrawn_already(ledger, approval[0])
        if earlier is not None:  # a second withdrawal counts for nothing (left34)
            raise PolicyError(f"revoke {ref}: the approval at log index {approval[0]} is "
                              f"withdrawn already ({earlier}); nothing was signed")
        return withdraw(ledger, *approval, signer, reason=reason)
    if not isinstance(signer, Signer):
        raise PolicyError(f"revoke {ref}: a keyless signer withdraws approvals only (an "
                          "approval's envelope digest, or NAME@V with --approval); revoke an "
                          "artifact with its producer's or an approver's key; nothing was signed")
    item = _item(ledger, ref)
    _check_authority(ledger, item, signer, "revoke")
    from .policy_state import check_signers

    check_signers(ledger, "revocation", [(signer.name, signer.keyid)],
                  f"revoke {shown_ref(ledger, item)}")
    first = _revoked_by(ledger, item.digest, signer.keyid)  # (a key that may sign: hist38)
    if first is not None:  # one record, whatever the clock (hist38 finding 2)
        return first
    predicate = Revocation(reason, format_time(_now()))
    return record_statement(
        ledger, item.ref or item.name, item.digest, predicates.REVOCATION,
        predicate.to_predicate(), signer, action=f"revoke {shown_ref(ledger, item)}",
    )


def _revoked_by(ledger: LedgerHome, digest: str, keyid: str) -> Recorded | None:
    """The first revocation of ``digest`` that ``keyid`` signed (``new`` false), or None.
    Whatever the time, a second one by the same key says nothing more: one signed in the same
    second was the same record, which the log keeps once, and one a second later a new entry
    (a recipient's ``monitor --fail-on-revocation`` then told them apart); so ``revoke`` run
    again answers with the first, as when it is run again after a failure that followed its
    append."""
    state = ledger.trust_state()
    return next((Recorded(digest, e.envelope, i, new=False) for i in state.about(digest)
                 if (e := state.entry(i)) is not None and e.kind == "revocation"
                 and keyid in e.signers), None)


def withdrawn_already(ledger: LedgerHome, index: int) -> str | None:
    """What withdrew the approval at log index ``index``, judged as the admission gate judges
    it (`verify.withdrawals.withdrawn` over the subject's approvals, under the policy in force:
    a withdrawal of a replay of its statement withdraws it too; one of no authority does not
    count), or None. Without a policy, any revocation of its envelope (as `withdraw_of`). An
    approval that counts for nothing is judged by the revocations of its envelope that count
    (`revocations`)."""
    from trajledger.verify.judge import Record
    from trajledger.verify.withdrawals import withdrawn

    from .policy_state import current_policy

    entry, found = ledger.trust_state().entry(index), current_policy(ledger)
    if entry is None:
        return None
    if found is None:
        return next(iter(revocations(ledger, entry.envelope, None)), None)
    with _approvals(ledger, found[1], entry.subject) as (verifier, records):
        mine = next((r for r in records if r.index == index), None)
        if isinstance(mine, Record):
            return next((r.message for r in withdrawn(verifier, records)
                         if r.index == index and not isinstance(r, Record)), None)
    return next(iter(revocations(ledger, entry.envelope, found[1])), None)


def withdraw(ledger: LedgerHome, index: int, envelope: str, signer: AnySigner, *,
             reason: str) -> Recorded:
    """Withdraw the approval at log index ``index`` (its envelope digest ``envelope``): a
    revocation whose subject is that digest, after which verifiers count the approval for
    nothing, for uses before it too (`trajledger.verify.withdrawals`).

    Under the policy in force, an approver may withdraw any approval, the key that signed it
    its own (an approver key of the policy it was logged under, its signature verifying on
    the envelope stored here: a keyid the envelope names beside a signature that does not
    verify, or a producer's co-signature, is no signer of it, review rev30); a producer may not (it
    revokes its data instead): verifiers apply the same rule
    (`trajledger.verify.retractions.authority`), so such a record would count for nothing.

    A keyless signer (``revoke --approval --sigstore``) is refused by the same rule before it
    signs when its token cannot be an approver identity or the approval's signer
    (`keyless_check.check_keyless_approver`; left32 finding 2).

    Raises:
        PolicyError: the signer may not withdraw it (nothing signed).
    """
    from .own_records import signed_with
    from .policy_state import current_policy

    entry = ledger.trust_state().entry(index)
    found = current_policy(ledger)
    if isinstance(signer, Signer) and found is not None and entry is not None and not found[
            1].holds("approver", signer.keyid) and not (  # its signer, as verifiers count it:
            signer.keyid in entry.signers  # an approver key then, its signature verifying
            and found[1].policy_at(index).holds("approver", signer.keyid)
            and signed_with(ledger, envelope, signer.public)):
        raise PolicyError(
            f"approval at log index {index}: key {signer.name} ({signer.keyid[:12]}) is no "
            "approver of the policy in force and did not sign it (as an approver of the policy "
            "it was logged under): only an approver may withdraw an approval (a producer "
            "revokes its data instead); nothing was signed"
        )
    if not isinstance(signer, Signer) and entry is not None:
        from .keyless_check import check_keyless_approver

        check_keyless_approver(ledger, signer, f"withdraw the approval at log index {index}",
                               approval=(index, envelope))
    predicate = Revocation(reason, format_time(_now()))
    return record_statement(
        ledger, f"approval at log index {index}", envelope, predicates.REVOCATION,
        predicate.to_predicate(), signer, action=f"withdraw the approval at log index {index}",
    )


def withdraw_of(ledger: LedgerHome, ref: str, signer: AnySigner, *, reason: str,
                by: str | None = None, by_identity: str | None = None) -> tuple[int, Recorded]:
    """Withdraw the approval of ``ref`` (a dataset or batch) that ``by`` signed (a keyid or its
    prefix; None: any signer), or the Sigstore identity ``by_identity`` signed keylessly (the
    certificate's subject, its bundle verified as verifiers do), of those in force
    (`in_force`): ``trajledger revoke REF --approval``, the readable form of `withdraw`.
    Returns the approval's log index and the withdrawal.

    The candidates are the approvals that count under the policy in force, as the admission
    gate judges them, whatever their purpose or age, and any whose record cannot be read (it
    may be the one meant); a signer that is no approver of the policy in force may withdraw
    only its own, so only its own are its candidates (left33 finding 1: an approval that counts
    for nothing, a producer's or one by a key or identity of no role, made outside the CLI,
    was a candidate, so its mere presence forced ``--by``, ``--by-identity`` or a digest).

    Raises:
        RefError: ``ref`` names nothing recorded.
        FormatError: an empty reason, an empty ``by`` or ``by_identity``.
        PolicyError: no such approval, or more than one (each named, with its digest); the
            signer may not withdraw it (`withdraw`). Nothing is signed.
    """
    if not reason.strip():
        raise OptionValueError("--reason is empty: say why the approval is withdrawn, such as "
                               "--reason 'approved by mistake'")
    if any(x is not None and not x.strip() for x in (by, by_identity)):
        raise OptionValueError("--by, --by-identity: empty; name the approval's key or identity")
    from .policy_state import current_policy

    item, state, found_policy = _item(ledger, ref, APPROVABLE), ledger.trust_state(), \
        current_policy(ledger)
    what = f"revoke {ref} --approval"
    policy = found_policy[1] if found_policy is not None else None
    entries = {i: e for i in state.about(item.digest) if (e := state.entry(i)) is not None
               and e.kind == "approval"}
    # Without a policy nothing can be judged: every approval no revocation names (rev28).
    judged = in_force(ledger, policy, item.digest) if policy is not None else {
        i: None for i, e in entries.items() if not revocations(ledger, e.envelope, None)}
    found = [(i, entries[i], r) for i, r in judged.items() if i in entries
             and (by is None or any(k.startswith(by.lower()) for k in entries[i].signers))
             and (by_identity is None or (r is None and policy is not None)
                  or (r is not None and any(x.subject == by_identity for x in r.identities)))]
    by_text = f" signed by {by}" if by else f" signed by {by_identity}" if by_identity else ""
    if found and policy is not None:
        found = _own_unless_approver(what, signer, policy, found)
    if len(found) != 1:
        raise PolicyError(
            f"{what}: " + (f"no approval of it{by_text} is in force here (none that counts "
                           "under the policy in force, or withdrawn already)" if not found else
                           f"{len(found)} approvals of it could be meant: " + ", ".join(
                               f"log index {i} signed by {','.join(k[:16] for k in e.signers)} "
                               f"({e.envelope})" + (" (cannot be read: it may be this one)"
                                                    if r is None and policy else "")
                               for i, e, r in found)
                           + "; name one with --by KEYID (--by-identity SUBJECT: a keyless "
                           "one's), or revoke its digest")
            + "; nothing was signed")
    index, entry, _r = found[0]
    return index, withdraw(ledger, index, entry.envelope, signer, reason=reason)


def in_force(ledger: LedgerHome, policy: TrustPolicy, digest: str) -> dict[int, Record | None]:
    """The approvals of ``digest`` in force under ``policy`` (log index -> its verified record),
    judged as the admission gate judges them (`verify.lineage.LineageVerifier.approvals`: each
    record verified under the policy it was logged under, less those withdrawn, by
    `verify.withdrawals.withdrawn`), purpose and age not judged; an approval whose record
    cannot be read (damaged: what it says is unknown) and that no revocation names is kept,
    as None. Nothing an approval that counts for nothing says can hide one that counts."""
    from trajledger.verify.judge import Record
    from trajledger.verify.withdrawals import withdrawn

    with _approvals(ledger, policy, digest) as (verifier, found):
        if any(verifier.records(r.entry.envelope, "revocation") for r in found
               if isinstance(r, Record)):
            found = withdrawn(verifier, found)
        out: dict[int, Record | None] = {}
        for r in found:
            if isinstance(r, Record):
                out[r.index] = r
            elif r.damaged and (e := verifier.entry(r.index)) is not None and not any(
                    isinstance(w := verifier.record(j), Record) or w.damaged
                    for j in verifier.records(e.envelope, "revocation")):
                out[r.index] = None  # unknown: a revocation of it that counts withdrew it
        return out


@contextmanager
def _approvals(ledger: LedgerHome, policy: TrustPolicy, digest: str) -> Iterator[
        tuple[LineageVerifier, list[Record | RecordFailure]]]:
    """A verifier of the ledger under ``policy`` (data by size; closed after) and the approvals
    of ``digest`` as it judges them: what `in_force`, `withdrawn_already` and
    `_refuse_withdrawn_again` judge withdrawals over (`verify.withdrawals.withdrawn`), as the
    admission gate does."""
    from trajledger.verify.lineage import LineageVerifier

    from .evidence import ledger_evidence

    verifier = LineageVerifier(ledger_evidence(ledger), policy, index=ledger.trust_state(),
                               data="size")
    try:
        yield verifier, [verifier.record(i) for i in verifier.records(digest, "approval")]
    finally:
        verifier.close()


def _own_unless_approver(what: str, signer: AnySigner, policy: TrustPolicy,
                         found: list[tuple[int, LogEntry, Record | None]]
                         ) -> list[tuple[int, LogEntry, Record | None]]:
    """``found`` (approvals in force, `in_force`), less those ``signer`` may not withdraw when
    it is no approver of ``policy``: only its own (its key or identity among the record's
    verified signers, as `verify.retractions.authority` judges it), and of those that cannot
    be read, a key's when the log entry names it (as `withdraw` judges them), any for a keyless
    signer (their signers unknown: `withdraw` refuses them).

    Raises:
        PolicyError: it is no approver and none of ``found`` (two or more) is its own.
    """
    if isinstance(signer, Signer):
        if policy.holds("approver", signer.keyid):
            return found
        who = f"key {signer.name} ({signer.keyid[:12]})"
        mine = [(i, e, r) for i, e, r in found
                if signer.keyid in (r.signers if r is not None else e.signers)]
    else:
        from .keyless_check import might_be

        token, maybe = might_be(signer)
        if maybe(policy.role("approver").identities):
            return found
        who = f"the Sigstore identity {token.identity} (issuer {token.federated_issuer})"
        mine = [(i, e, r) for i, e, r in found if r is None or maybe(r.identities)]
    if mine or len(found) == 1:  # one: `withdraw` refuses it, naming who may
        return mine or found
    raise PolicyError(
        f"{what}: {who} is no approver of policy {policy.name!r} serial {policy.serial} and "
        f"signed none of the {len(found)} approval(s) of it in force: only an approver may "
        "withdraw an approval, its signer its own (a producer revokes its data instead); "
        "nothing was signed")


def erase(ledger: LedgerHome, ref: str, signer: Signer, *, reason: str
          ) -> tuple[Recorded, int, dict[str, str]]:
    """Delete an artifact's data blobs and record a signed erasure.

    The manifest (names, sizes, digests) and every signed record stay, so lineage still
    verifies and reports "erased". The store keeps one blob per content: a blob that a file of
    another artifact here also lists (the same rollouts recorded twice, the same config
    registered under two names, a vendor's batch) is kept while that artifact is not erased
    itself, and the record lists only the blobs it deletes (`kept_blobs`); erasing that
    artifact too deletes it. The erasure record is appended first: if deleting fails half-way,
    the record already explains the missing blobs, and re-running finishes the job.

    What to keep is decided, and the blobs deleted, under the log's writer lock: a `record`
    of the same bytes either is logged first (and holds the blob, which is kept) or is refused
    under that lock (`record._refuse_lost`); it never keeps a blob this deletes.

    An artifact already erased (an erasure of it that counts: verified under the policy in
    force, or any without a policy) gets no second record: running again deletes what that
    record lists and the store still holds (an erase that did not finish), with nothing to
    delete it is refused; only blobs it kept then that may now go (their holders erased
    since) make a new record, listing just those. An approver's erase of what only its
    producer erased is recorded (`_approver_confirms`), listing the blobs that erasure
    deleted and deleting none.

    Returns:
        The erasure record (the earlier one, ``new`` False, when none was needed), how many
        blobs were deleted, and the blobs kept (blob -> the label of an artifact here that
        holds it).

    Raises:
        RefError: ``ref`` names nothing recorded.
        FormatError: an unknown reason.
        PolicyError: ``ref`` has no manifest in the store; the signer is neither a producer
            nor an approver of the policy in force; already erased with nothing left to
            delete.
    """
    if reason not in ERASURE_REASONS:
        raise FormatError(
            f"--reason: {reason!r} is not an erasure reason, want one of "
            f"{', '.join(ERASURE_REASONS)}"
        )
    item = _item(ledger, ref)
    shown = shown_ref(ledger, item)
    from trajledger.verify.kinds import KINDS

    if not KINDS[item.kind].files:
        raise PolicyError(f"{item.kind} {shown}: is a statement, not an "
                          "artifact with files; nothing to erase (revoke it, or erase the "
                          "artifact whose data it is about)")
    if not ledger.store.exists(item.digest):
        raise PolicyError(f"{item.kind} {shown}: has no manifest in this store; nothing to erase")
    from .policy_state import check_signers

    check_signers(ledger, "erasure", [(signer.name, signer.keyid)], f"erase {shown}")
    _check_authority(ledger, item, signer, "erase")
    with ledger.log.exclusive():  # (no writer appends between the decision and the deletion)
        mine = erasable_blobs(ledger, item.digest)
        kept = kept_blobs(ledger, item.digest, mine)
        first, listed = erased_before(ledger, item.digest)
        blobs = sorted(mine.difference(kept, listed))
        unfinished = sorted(b for b in mine.intersection(listed).difference(kept)
                            if ledger.store.exists(b))
        # An approver may confirm a producer's erasure (nothing left to delete): the gate ends
        # a held-out batch's comparison on an approver's erasure only (runner.admission).
        confirm = (first is not None and not blobs and not unfinished
                   and _approver_confirms(ledger, item.digest, signer))
        if first is not None and not blobs and not confirm:
            if not unfinished:
                held = (f" ({len(kept)} blob(s) still kept: also a file of "
                        f"{', '.join(sorted(set(kept.values())))}, not erased)" if kept else "")
                raise PolicyError(
                    f"{item.kind} {shown_ref(ledger, item)}: already erased (log index "
                    f"{first.index}) and every blob that erasure lists is deleted{held}; "
                    "nothing to erase, nothing recorded")
            rec = first
        else:  # a confirmation lists what its producer's erasure deleted: it stands alone,
            # should that one stop counting (its key marked compromised since: hist33)
            again = sorted(mine.intersection(listed).difference(kept)) if confirm else []
            predicate = Erasure(reason, format_time(_now()), tuple(blobs or again))
            rec = record_statement(
                ledger, item.ref or item.name, item.digest, predicates.ERASURE,
                predicate.to_predicate(), signer, action=f"erase {shown_ref(ledger, item)}",
            )
        blobs = sorted({*blobs, *unfinished})
        told = (f"the erasure is recorded (log index {rec.index})" if rec is not first
                else "nothing was recorded")
        try:
            return rec, delete_erased(ledger, blobs, done=lambda n: (
                f"{told} and {n} of its {len(blobs)} blob(s) are deleted, nothing more")), kept
        except OSError as e:  # a read-only or failing store: the record stands, the data too
            left = sum(ledger.store.exists(b) for b in blobs)
            raise LedgerError(
                f"{item.kind} {shown_ref(ledger, item)}: the erasure is recorded (log index "
                f"{rec.index}) but {left} of its {len(blobs)} blob(s) are still stored: "
                f"{e.strerror or e} ({e.filename or 'the store'}); run the same 'trajledger "
                "erase' again once the store is writable: it deletes them"
            ) from e


def erased_before(ledger: LedgerHome, subject: str) -> tuple[Recorded | None, set[str]]:
    """The first erasure of ``subject`` here that counts (verified under the policy in force;
    without a policy, any erasure record), and the blobs every such erasure lists: what an
    erase again need not record twice."""
    from trajledger.verify.lineage import LineageVerifier, Record
    from trajledger.verify.log_index import read_record

    from .evidence import ledger_evidence
    from .policy_state import current_policy

    state = ledger.trust_state()
    found = [i for i in state.about(subject)
             if (e := state.entry(i)) is not None and e.kind == "erasure"]
    policy = current_policy(ledger) if found else None
    if policy is not None:
        verifier = LineageVerifier(ledger_evidence(ledger), policy[1], index=state, data="size")
        try:
            found = [j for j in verifier.records(subject, "erasure")
                     if isinstance(verifier.record(j), Record)]
        finally:
            verifier.close()
    listed: set[str] = set()
    for i in found:
        e = state.entry(i)
        assert e is not None
        try:  # unreadable: its blobs unknown, not "none" (a second record would list them)
            raw = ledger.read_blob(e.envelope, failed=True)
        except StoreError as x:
            raise StoreError(f"erasure at log index {i}: {x}: which blobs it erased is "
                             "unknown; nothing was recorded: run it again") from x
        try:
            _st, pred = read_record(e, raw, f"log entry {i}")
        except ProvenanceError:
            continue
        assert isinstance(pred, Erasure)
        listed.update(pred.blobs)
    if not found:
        return None, listed
    i = min(found)
    e = state.entry(i)
    assert e is not None
    return Recorded(subject, e.envelope, i, new=False), listed


def kept_blobs(ledger: LedgerHome, subject: str, blobs: set[str]) -> dict[str, str]:
    """Of ``blobs`` (what an erasure of ``subject`` here would delete), those a file of
    another artifact here lists that is not erased (blob -> its label): erasing one artifact
    must not take the data of another that holds the same bytes. An artifact counts as erased
    when an erasure of it verifies under the policy in force (without a policy, when one is
    recorded). Reads every artifact's manifest (`files_here`): erasing is rare."""
    from trajledger.verify.lineage import LineageVerifier

    from .evidence import ledger_evidence
    from .policy_state import current_policy

    files = files_here(ledger) if blobs else {}
    if not any(files.get(b, set()) - {subject} for b in blobs):
        return {}
    found = current_policy(ledger)
    if found is None:
        state, out = ledger.trust_state(), dict[str, str]()
        for b in sorted(blobs):
            for h in sorted(files.get(b, set()) - {subject}):
                if not any((e := state.entry(i)) and e.kind == "erasure"
                           for i in state.about(h)):
                    out[b] = label(ledger, h)
                    break
        return out
    verifier = LineageVerifier(ledger_evidence(ledger), found[1], index=ledger.trust_state(),
                               data="size")
    try:
        return held_elsewhere(ledger, verifier, blobs, subject, files)
    finally:
        verifier.close()


def delete_erased(ledger: LedgerHome, blobs: Iterable[str], *, done: Callable[[int], str],
                  recorded: bool = False) -> int:
    """Delete erased blobs from the store, and the episode features cached from any of them
    (nothing derived from erased data is kept); how many blobs were deleted. The caller holds
    the log's lock (`Log.exclusive`): before each deletion it must still be the lock file's
    (`Log.check_lock_held`, fix13), else a writer may be naming the blob meanwhile; the
    refusal says ``done(n)``, n blobs deleted (``recorded``: it says what is recorded).

    Raises:
        LogError: the lock file was removed or replaced (nothing more deleted).
    """
    from .batch_features import forget_cached

    deleted = 0
    for d in sorted(blobs):
        ledger.log.check_lock_held(done(deleted), recorded=recorded)
        deleted += ledger.store.delete(d)
        forget_cached(ledger.cache_dir / "features", d)
    return deleted


def erasable_blobs(ledger: LedgerHome, digest: str, identity: tuple[str, str] | None = None,
                   read: Callable[[str], bytes | None] | None = None) -> set[str]:
    """The blobs an erasure of the artifact ``digest`` deletes: the files its manifest (in the
    store, verified) lists, and a rollout batch's blobs kept beside them (a sealed batch's
    ciphertexts, the episode features file of any); nothing when its manifest is not here.
    An erasure another log brought deletes no more than these, whatever it lists.
    ``identity``: the kind and envelope digest of the artifact's identity record, when the
    caller has its log entry (a scan of every artifact); else the catalog finds them.
    ``read``: an object's bytes (None: absent), for objects not stored yet (an update's,
    `update_judge.left_out`); else the store's, verified.

    Raises:
        DigestMismatchError: the stored manifest does not hash to its name.
    """
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.kinds import KINDS
    from trajledger.verify.manifest import Manifest
    from trajledger.verify.predicates import RolloutBatch
    from trajledger.verify.statement import Statement
    from trajledger.verify.strict_json import load_object

    get = read or (lambda d: ledger.store.get_verified(d) if ledger.store.exists(d) else None)
    if (raw := get(digest)) is None:
        return set()
    manifest = Manifest.from_json(load_object(raw, "manifest"))
    out = {f.digest for f in manifest.files}
    if identity is None:
        item = Catalog(ledger).resolve(digest)
        identity = (item.kind, item.envelope)
    kind, envelope = identity
    if kind == "rollout-batch":
        st = Statement.from_bytes(Envelope.from_bytes(get(envelope) or b"").payload)
        batch = KINDS["rollout-batch"].read(st, f"rollout-batch {digest[:19]}")
        assert isinstance(batch, RolloutBatch)
        out |= {d for d, _n in batch.sealed.files.values()} if batch.sealed else set()
        out |= {batch.features.digest} if batch.features is not None else set()
    return out


def label(ledger: LedgerHome, digest: str) -> str:
    """``kind NAME@VERSION (sha256:…)`` of a record of this ledger, ``approval at log index N
    (sha256:…)`` of an approval's envelope, or the digest."""
    from trajledger.verify.kinds import KINDS, name_version
    from trajledger.verify.log_index import read_record
    from trajledger.verify.nodes import NAMED

    state = ledger.trust_state()
    for i in state.about(digest):
        e = state.entry(i)
        if e is None or not KINDS[e.kind].named:
            continue
        try:
            st, _pred = read_record(e, ledger.read_blob(e.envelope), f"log entry {i}")
        except ProvenanceError:
            break
        n, v = name_version(e.kind, st)
        from .catalog import qualified_name

        named = qualified_name(ledger, i, e.kind, n, v, digest, state).translate(NAMED)  # rev47 4
        return f"{e.kind} {named} ({digest[:19]}…)"
    # No artifact: an approval's record, named by its envelope (one withdrawn, say)?
    index = (ledger.log.find_envelope(digest) if digest.startswith(DIGEST_PREFIX)
             and HEX64.fullmatch(digest, 7) else None)
    e = state.entry(index) if index is not None else None
    if e is not None and e.kind == "approval":
        return f"approval at log index {index} ({digest[:19]}…)"
    return digest


def files_here(ledger: LedgerHome) -> dict[str, set[str]]:
    """Which artifacts here list each blob as a file (blob -> their digests), from every
    artifact record's manifest: read once per erase, or update bringing an erasure, that
    would delete something (rare)."""
    from trajledger.verify.kinds import KINDS

    state, out, seen = ledger.trust_state(), dict[str, set[str]](), set[str]()
    for kind in (k for k, v in KINDS.items() if v.lineage):
        for i in state.of_kind(kind):
            entry = state.entry(i)
            if entry is None or entry.subject in seen or not ledger.store.exists(entry.subject):
                continue
            seen.add(entry.subject)
            try:
                blobs = erasable_blobs(ledger, entry.subject, (entry.kind, entry.envelope))
            except (ProvenanceError, LedgerError) as e:
                if read_failure(e):  # unknown, not "lists none": its blobs would go (fault27)
                    raise
                continue  # not a manifest here: lists no file
            for blob in blobs:
                out.setdefault(blob, set()).add(entry.subject)
    return out


def held_elsewhere(ledger: LedgerHome, verifier: LineageVerifier, blobs: set[str],
                   subject: str, files: Mapping[str, set[str]]) -> dict[str, str]:
    """Of ``blobs`` (what an erasure of ``subject`` would delete here: this ledger's own, or
    another log's), those a
    file of another artifact here lists (``files``, `files_here`) that no verified erasure
    erased (blob -> its label): one blob is kept per content, and a log's erasure stops only
    its own artifact."""
    from trajledger.verify.lineage import Record

    out: dict[str, str] = {}
    for blob in sorted(blobs):
        for holder in sorted(files.get(blob, set()) - {subject}):
            if not any(isinstance(verifier.record(j), Record)
                       for j in verifier.records(holder, "erasure")):
                out[blob] = label(ledger, holder)
                break
    return out


def _approver_confirms(ledger: LedgerHome, subject: str, signer: Signer) -> bool:
    """Whether ``signer`` is an approver of the policy in force and no erasure of ``subject``
    here is signed by one yet (only its producer's): its erasure is then recorded again, as
    the approvers' (listing the blobs the producer's erasure deleted, none deleted again), which
    is what ends the admission gate's comparison with a held-out batch."""
    from .policy_state import current_policy

    found = current_policy(ledger)
    if found is None or not found[1].holds("approver", signer.keyid):
        return False
    approvers = found[1].role("approver").keyids
    state = ledger.trust_state()
    return not any((e := state.entry(i)) is not None and e.kind == "erasure"
                   and not approvers.isdisjoint(e.signers) for i in state.about(subject))


def _check_authority(ledger: LedgerHome, item: CatalogItem, signer: Signer, verb: str) -> None:
    """Refuse a revocation or erasure its signer has no authority for, before anything is
    written: under the policy in force, an approver may stop the use of anything, a producer
    only of what it produced (its key signed the artifact's record); verifiers apply the same
    rule (``verify.lineage``), so such a record would count for nothing.

    A key of no role that produced it (a producer key a successor replaced) is refused with
    the way to make its stop count (out55: the role check's refusal sent to the new key's,
    which named it: two steps).

    Raises:
        PolicyError: the signer is a producer (and no approver) that did not sign the record;
            or a key of no role that did.
    """
    from .policy_state import current_policy

    found = current_policy(ledger)
    if found is None or found[1].holds("approver", signer.keyid):
        return  # an approver may
    state = ledger.trust_state()
    entry = state.entry(item.index)
    producer = found[1].holds("producer", signer.keyid)
    if entry is None or producer == (signer.keyid in entry.signers) or (
            not producer and any(found[1].holds(r, signer.keyid) for r in KEY_ROLES)):
        return  # its producer may; any other key of no role is refused by the role check
    from .authority_hint import give

    try:  # the key to give instead, when this ledger holds one (a producer key rotated, say)
        here = [(k.name, k.keyid, k.private) for k in ledger.keys.list()]
    except (LedgerError, ProvenanceError, OSError):
        here = []
    if not producer:  # (out55) the key that produced it, replaced: the way, named at once
        if found[1].revocation(signer.keyid, ledger.log.size, format_time(_now())) is not None:
            return  # declared compromised: the role check says so
        current = next((n for n, k, _p in here if found[1].holds("producer", k)), "PRODUCER")
        raise PolicyError(
            f"{item.kind} {shown_ref(ledger, item)}: key {signer.name} ({signer.keyid[:12]}) "
            f"produced it{give(found[1], entry.signers, here, current, verb, item.index)}; "
            "nothing was signed")
    raise PolicyError(
        f"{item.kind} {shown_ref(ledger, item)}: key {signer.name} ({signer.keyid[:12]}) did not "
        f"produce it (its record is signed by {', '.join(k[:12] for k in entry.signers)}"
        f"{give(found[1], entry.signers, here, signer.name, verb, item.index)}): "
        f"a producer may {verb} only what it produced, an approver anything; nothing was signed"
    )


def record_policy(
    ledger: LedgerHome, policy_file: Path | TrustPolicy, signers: Sequence[Signer], *,
    on_warning: Callable[[str], None] | None = None,
) -> Recorded:
    """Record a trust policy as the ledger's policy in force.

    Steps:
        1. Read and parse the file (keys named by keyid are looked up in the key store), or
           take the policy as given (``trajledger policy set`` parses the file once, shows
           what it changes, and records exactly what it showed).
        2. The first policy of a ledger is self-signed: the threshold of its own approvers (of
           its producers, in a policy without approvers: a vendor's) must sign it (whoever
           verifies decides to trust it by its digest or by holding the same file). A later
           policy must have a higher serial and be signed by the threshold of the current
           policy's approvers, or producers (`verify.succession.check_successor`). A suite
           pinned by digest in ``[release]`` that this log holds must be a held-out dataset
           of the requirement's name, unless the policy in force pins it too
           (`pins_it_breaks`: each such kept pin that fails now is a line given to
           ``on_warning``).
        3. Store its JSON form and record it, signed by every signer; step 2 is checked again
           under the log's lock just before the append, so of two racing successors with the
           same serial one is recorded and the other refused.

    Raises:
        LedgerError: the policy file cannot be read.
        PolicyFileError: the policy file is invalid (a `FormatError`: the caller's file to fix,
            as the command line says with exit 2).
        FormatError: a ``[release]`` bound written as a string
            or ``[contamination]`` threshold off the JSON number grammar, or that reads as 0
            (`policy_state.refuse_unreadable`).
        PolicyError: the signers are not enough approvers, or the serial does not increase.
    """
    from trajledger.verify.policy import policy_digest

    from .policy_state import current_policy, key_lookup, read_policy_file

    # (1) a file invalid as written: `PolicyFileError`, as on the command line (left37)
    new = (policy_file if isinstance(policy_file, TrustPolicy)
           else read_policy_file(policy_file, key_lookup(ledger)))
    from .policy_state import refuse_unreadable

    refuse_unreadable(new, f"policy {new.name!r}")  # a string off JSON's grammar
    # (2)
    signer_ids = frozenset(s.keyid for s in signers)

    def may_follow(_size: int) -> None:
        current = current_policy(ledger)
        if current is None:
            role = new.signing_role()
            signing = new.role(role)
            got = len(signer_ids & signing.keyids)
            if signing.threshold == 0 or got < signing.threshold:
                raise PolicyError(
                    f"policy {new.name!r}: the first policy must be signed by its own {role} "
                    f"threshold: {got} of {max(signing.threshold, 1)} {role} key(s) signed"
                )
        else:
            check_successor(current[1], new, signer_ids)

    try:
        may_follow(0)  # fail fast; checked again under the log's lock, just before the append
    except PolicyError as e:
        from .policy_state import who_may_sign

        raise PolicyError(f"{e}{who_may_sign(ledger, signer_ids)}") from e
    for line in pins_it_breaks(ledger, new):  # judged once; the successor recorded all the same
        if on_warning is not None:
            on_warning(line)
    # (3)
    from .signing import canonical_json

    body = new.to_json()
    digest = policy_digest(new)
    ledger.store.put_bytes(canonical_json(body))  # the policy's JSON form, under its digest
    return record_statement(
        ledger,
        f"{new.name}#{new.serial}",
        digest,
        predicates.TRUST_POLICY,
        {"policy": body},
        list(signers),
        check=may_follow,
    )


def pins_it_breaks(ledger: LedgerHome, policy: TrustPolicy) -> list[str]:
    """Refuse a policy whose ``[release]`` pins a suite by a digest this log records as
    anything but a verified holdout or regression dataset of the requirement's
    ``NAME@VERSION`` (`verify.releases.release_suite`, judged under ``policy`` as the
    successor of the history in force, as `release` and every verifier will judge it: a
    record logged before it under the policies it was signed under, hist32). A digest the log
    does not hold yet passes: the suite may come by import; `release` refuses until it is
    logged.

    A pin the policy in force holds too (the same suite and digest) was checked when it was
    set: it is kept, and one line per such pin that fails now is returned, to be shown. A
    successor that makes a pinned suite fail (it marks the suite's signer compromised, say) is
    recorded, never held back by the pin: a declaration of compromise is the more urgent of
    the two (the lead, seventeenth round), and `release` refuses on that suite until another
    is pinned.

    Raises:
        PolicyError: a pin the policy in force does not hold names a recorded suite that
            fails.
    """
    pinned = [r for r in (policy.release.require if policy.release else ()) if r.digest]
    if not pinned:
        return []
    from dataclasses import replace

    from trajledger.verify.lineage import LineageVerifier
    from trajledger.verify.releases import release_suite

    from .evidence import ledger_evidence
    from .policy_state import current_policy

    current = current_policy(ledger)
    held: set[tuple[str, str | None]] = set()
    if current is not None:  # records up to this one's index were signed under the others
        then = current[1]
        policy = replace(policy, earlier=(*then.earlier, (ledger.log.size, then)))
        held = {(r.suite, r.digest) for r in (then.release.require if then.release else ())}
    verifier = LineageVerifier(ledger_evidence(ledger), policy, index=ledger.trust_state(),
                               data="size")
    kept = []
    try:
        assert verifier.checkpoint is not None
        for req in pinned:
            assert req.digest is not None
            if not verifier.index.about(req.digest):
                continue
            problem = release_suite(verifier, req, verifier.checkpoint.size)[1]
            if problem is None:
                continue
            line = f"policy {policy.name!r}: release: {req.metric} on {req.suite}: {problem}"
            if (req.suite, req.digest) not in held:
                raise PolicyError(line)
            kept.append(f"{line}: the pin is kept; no release on that suite passes until "
                        "another is pinned")
    finally:
        verifier.close()
    return kept


def revocations(ledger: LedgerHome, digest: str, policy: TrustPolicy | None) -> list[str]:
    """What says ``digest`` must no longer be used, one line each: its revocations that verify
    under ``policy``, and (fail closed) those whose envelope cannot be read. Without a policy
    (none recorded yet), every revocation record of it counts.

    Raises:
        TamperError, LogError: the log cannot be read.
    """
    from trajledger.verify.lineage import LineageVerifier, Record
    from trajledger.verify.predicates import Revocation

    from .evidence import ledger_evidence

    if policy is None:
        state = ledger.trust_state()
        return [f"revocation record at log index {i} (no policy in force to verify it)"
                for i in state.about(digest) if (e := state.entry(i)) and e.kind == "revocation"]
    verifier = LineageVerifier(ledger_evidence(ledger), policy, index=ledger.trust_state(),
                               data="size")
    try:
        out = []
        for i in verifier.records(digest, "revocation"):
            r = verifier.record(i)
            if isinstance(r, Record) and isinstance(r.predicate, Revocation):
                out.append(f"revoked at log index {i} ({r.predicate.revoked_at}): "
                           f"{r.predicate.reason}")
            elif not isinstance(r, Record) and r.damaged:
                out.append(f"revocation record {i} cannot be read, so it may revoke it: "
                           f"{r.message}")
        return out
    finally:
        verifier.close()
