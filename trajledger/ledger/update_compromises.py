"""Another party's key compromises, and another log's, met by what an update takes in: step 4
of `updates.apply_update`.

Scope: `compromises` follows the other log's policy history (from the import records and the
update) and, for each key it declares compromised that one of its own policies held, revokes
here what that log alone brought signed by it since; the rest is ignored or warned of (a policy
may list anyone's key). Split out of ``updates`` (twenty-ninth round, upd44: it was at its
cap), unchanged.

Non-scope: judging the update's own revocations and erasures (``update_judge``).
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from trajledger.verify.checkpoint import verify_checkpoint
from trajledger.verify.compromise import RevokedKey
from trajledger.verify.dsse import MAX_ENVELOPE_BYTES, Envelope, verify_envelope
from trajledger.verify.errors import ProvenanceError
from trajledger.verify.kinds import KINDS
from trajledger.verify.lineage import LineageVerifier, Record
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.log_index import read_record
from trajledger.verify.merkle import leaf_hash, verify_inclusion
from trajledger.verify.note import verifier_from_vkey
from trajledger.verify.other_predicates import Import
from trajledger.verify.policy import TrustPolicy, policy_digest
from trajledger.verify.policy_history import follow_history
from trajledger.verify.predicates import Revocation

from .catalog import Origins, origin_name
from .errors import LedgerError, read_failure
from .evidence import ledger_evidence
from .keys import Signer
from .status import label
from .update_changes import Changes
from .update_reads import Update, held, import_records

if TYPE_CHECKING:
    from trajledger.verify.keys import Identity

    from .home import LedgerHome
    from .trust_state import TrustState

__all__ = ["KEY_ROLES", "NOT_TAKEN", "compromises", "entries_of", "own_signed", "owned",
           "owners_declaration", "pending_compromises", "relayed_by", "their_policy"]

NOT_TAKEN = frozenset({"trust-policy", "import", "refusal"})
"""The kinds only a log's owner logs, never logged here: the other party's policies (consulted
for its key compromises, never trusted), its own imports and refusals (its business);
`updates.NOT_TAKEN`, defined here since that module imports this one."""

KEY_ROLES = ("producer", "approver", "trainer", "evaluator")
"""The roles a key signs records under (the log and witness roles name log keys)."""


def compromises(ledger: LedgerHome, policy: TrustPolicy, signers: Sequence[Signer],
                update: Update, here: Mapping[int, int], changes: Changes,
                parsed: Mapping[int, LogEntry], *, state: TrustState | None = None,
                imports: Sequence[tuple[int, Import]] | None = None) -> None:
    """Step 4 of `apply_update`: the other party's key compromises (``parsed``: entries of
    ``update`` already parsed, by index).

    Steps:
        1. Its policy in force, followed from its first policy through every policy record this
           ledger has seen of it (import records) and this update's, by its own rules; a
           history that cannot be followed declares nothing.
        2. For each key it revokes that one of its own policies held: the artifacts whose
           record its log says the key signed at or after ``compromised_since`` (of that log:
           its indices and its entry times) and that this ledger holds from that log alone
           (`_brought_by`) are revoked here, signed by the first of ``signers``, unless a
           revocation of them already counts here. A policy may list anyone's public key, and
           a log's entries are its writer's word: the others (this ledger's own artifacts,
           another log's) are listed as ignored, never revoked; those another log brought
           here whose record verifies signed by the key are named in a warning with the way on
           if the key is theirs (``changes.suspect``: what `_declared_elsewhere` says when the
           same facts come in the other order; hist41 finding 2).
        3. When the key holds a role of ``policy`` that does not revoke it, and signed nothing
           ignored in step 2, the report says to add it to ``revoked_keys``, from this log's
           index of its first record taken in after the compromise (or now): firmly only when
           the key signed that log's policies (`owned`). A key that signed none of them but
           another log's is that log's: the declaration is a claim (`_claimed`: no advice but
           to ask the owner; step 2's revocations stand), and step 2b's warning is not given
           (upd46).

    ``state``, ``imports``: this ledger's `trust_state` asked since the update's appends, and
    its import records (upd44: read once by `apply_update`); None: asked here.
    """
    from .status import revoke

    imports = import_records(ledger, state=state) if imports is None else imports
    _declared_elsewhere(ledger, policy, update, parsed, changes, imports, state)
    # (1) (an entry this update brings is its own: what import records say of that index,
    # this one's included, is not parsed only to be replaced)
    # (what it brought under the keys it rotated from too: rev34 finding 3)
    seen = {i: e for k in (*update.logs, update.vkey)
            for i, e in entries_of(k, imports, skip=update.entries).items()}
    seen |= {i: parsed[i] if i in parsed else LogEntry.from_bytes(update.entries[i])
             for i in update.entries}
    theirs, own = _their_compromises(ledger, seen)
    if theirs is None:
        return
    relayed = relayed_by(ledger, seen, logs := {update.vkey, *update.logs})
    mine = owned(ledger, seen)  # the keys that signed its policies (upd46)
    evidence = ledger_evidence(ledger)
    state = state or ledger.trust_state()
    verifier = LineageVerifier(evidence, policy, index=state, data="size")
    origins, vouched = Origins(ledger), None
    try:
        _identities(ledger, policy, theirs, update, seen, changes, state, verifier,
                    lambda d: _brought_by(state, origins, d, logs), signers[0])
        for rk in theirs.revoked_keys:
            if rk.keyid not in own:
                continue
            # (2)
            hits = {e.subject: i for i, e in sorted(seen.items()) if KINDS[e.kind].lineage
                    and rk.keyid in e.signers and rk.covers(i, e.time)
                    and held(ledger, e.subject, state)}
            # (upd46: a key that signed another log's policies and none of its own: a claim)
            owner = None if rk.keyid in mine else _owner(ledger, imports, rk.keyid, logs)
            foreign = [d for d in hits if not _brought_by(state, origins, d, logs)]
            # (2b) (hist41 finding 2: the warning the other order gives, `_declared_elsewhere`)
            if foreign and vouched is None:  # (upd45: what another log says it relayed)
                vouched = _vouched(ledger, imports, logs)
            signed = [d for d in foreign if not owner and _signed_there(  # its owner's word
                state, origins, verifier, d, seen[hits[d]].kind, rk.keyid, logs, vouched or {},
                anyone=rk.keyid in mine)]  # (upd46: whoever brought it first)
            if signed and not any(x.keyid == rk.keyid for x in policy.revoked_keys):
                own_ = any(seen[hits[d]].envelope not in relayed for d in signed)  # (upd45)
                changes.suspect.append({
                    "key": rk.keyid, "declaredBy": origin_name(update.vkey), "digests": signed,
                    "declarerBrought": own_,
                    "text": f"key {rk.keyid[:16]}, which {origin_name(update.vkey)} declares "
                            f"compromised ({rk.describe()}; its policy {theirs.name!r} serial "
                            f"{theirs.serial}), signed what you hold from another log: "
                            f"{', '.join(label(ledger, d) for d in signed)}; not revoked here "
                            "(a log stops only what it alone brought)" + ("" if own_ else
                            f"; {origin_name(update.vkey)} brought you nothing that key signed "
                            "but what it relayed (a policy may list anyone's key)")
                            + ": if the key is theirs, "
                            f"record a successor with [[revoked_keys]] key = \"{rk.keyid}\""})
            for d in foreign:
                changes.ignored.append({
                    "digest": d, "label": label(ledger, d), "logIndex": hits.pop(d),
                    "kind": "key compromise",
                    "why": f"its log says key {rk.keyid[:16]} signed it, and declares that key "
                           "compromised, but you hold it as your own or from another log: a "
                           "log stops only what it alone brought here"})
            revoked = []
            for digest in hits:
                counted = [r for j in verifier.records(digest, "revocation")
                           if isinstance(r := verifier.record(j), Record)]
                if counted:
                    continue
                reason = (f"{_reason(rk, update.vkey)} ({rk.describe()}; its policy "
                          f"{theirs.name!r} serial {theirs.serial})")
                revoke(ledger, digest, signers[0], reason=reason)
                revoked.append(digest)
            if owner:  # (3) (upd46)
                _claimed(ledger, changes, rk, theirs, update.vkey, owner, revoked)
                continue
            text = (f"key {rk.keyid[:16]} of {origin_name(update.vkey)} is compromised "
                    f"({rk.describe()}; its policy {theirs.name!r} serial {theirs.serial})"
                    + (": revoked here what it signed since: "
                       + ", ".join(label(ledger, d) for d in revoked) if revoked else ""))
            roles = [r for r in KEY_ROLES
                     if policy.holds(r, rk.keyid)]
            if roles and not foreign and not any(x.keyid == rk.keyid
                                                 for x in policy.revoked_keys):
                since = min((here[i] for i in here if rk.keyid in seen[i].signers
                             and rk.covers(i, seen[i].time)), default=ledger.log.size)
                sources = {relayed[e.envelope] for e in seen.values()
                           if rk.keyid in e.signers and e.envelope in relayed}
                text += (f"; your policy still trusts it as {' and '.join(roles)}: record a "
                         f"successor without it and with [[revoked_keys]] key = "
                         f"\"{rk.keyid}\", compromised_since = {since}"
                         if rk.keyid in mine and any(rk.keyid in e.signers and e.envelope
                                                     not in relayed for e in seen.values())
                         else f"; your policy trusts it as {' and '.join(roles)}, and it signed "
                         "none of its policies (a policy may list anyone's key): if the key is "
                         f"theirs, record a successor with [[revoked_keys]] key = \"{rk.keyid}\""
                         if rk.keyid not in mine and any(rk.keyid in e.signers and e.envelope
                                                         not in relayed for e in seen.values())
                         else
                         f"; your policy trusts it as {' and '.join(roles)}, and its log holds "
                         "nothing it signed" + (" but what it relayed from "
                         + ", ".join(sorted(origin_name(v) for v in sources))
                         + " (its import records say so)" if sources else "")
                         + " (a policy may list anyone's key): if the key is "
                         f"theirs, record a successor with [[revoked_keys]] key = "
                         f"\"{rk.keyid}\"")  # (hist41 finding 6: another's key, no word;
                # upd45: what it relayed, by its own import records, is not its own)
            if revoked or (roles and not foreign):
                changes.compromised.append({"key": rk.keyid, "text": text,
                                            "revokedHere": revoked})
    finally:
        verifier.close()


def _identities(ledger: LedgerHome, policy: TrustPolicy, theirs: TrustPolicy, update: Update,
                seen: Mapping[int, LogEntry], changes: Changes, state: TrustState,
                verifier: LineageVerifier | None = None,
                alone: Callable[[str], bool] | None = None, signer: Signer | None = None) -> None:
    """The Sigstore identities the other log's policy in force (``theirs``) declares
    compromised that a role of ``policy`` holds and it does not revoke: what each signed
    keylessly since the point declared, held here from that log alone (``alone``), revoked
    here signed by ``signer`` (`identity_compromises.revoke_signed`: the identity is in each
    record's Sigstore bundle, not in its log entry; out55 warned only, and what it signed
    after the point kept verifying: out57), and each named in a warning with the successor
    that stops what it signs next, from this log's index of the first record held from that
    log logged there at or after the point (``seen``: that log's entries). Without
    ``signer`` (`monitor` without keys) nothing is revoked: the warning alone."""
    from .identity_compromises import revoke_signed

    for ri in theirs.revoked_identities:
        who = ri.identity
        roles = [r for r in KEY_ROLES if who in policy.role(r).identities]
        if not roles or any(x.identity == who for x in policy.revoked_identities):
            continue
        since = min((j for i, e in seen.items() if KINDS[e.kind].lineage and ri.covers(i, e.time)
                     for j in state.about(e.subject)
                     if (x := state.entry(j)) is not None and x.envelope == e.envelope),
                    default=ledger.log.size)
        declared = f"({ri.describe()}; its policy {theirs.name!r} serial {theirs.serial})"
        what = (f"identity {who.subject} ({who.issuer}) of {origin_name(update.vkey)} is "
                f"compromised {declared}")
        revoked = [] if signer is None or verifier is None or alone is None else revoke_signed(
            ledger, policy, ri, seen, alone, state, verifier, signer,
            f"signed by identity {who.subject} ({who.issuer}), which "
            f"{origin_name(update.vkey)} declares compromised {declared}")
        changes.compromised.append({
            "identity": {"issuer": who.issuer, "subject": who.subject}, "revokedHere": revoked,
            "text": what + (": revoked here what it signed since: " + ", ".join(
                label(ledger, d) for d in revoked) if revoked else "")
            + f"; your policy still trusts it as {' and '.join(roles)}: "
              f"record a successor without it and with [[revoked_identities]] issuer = "
              f"\"{who.issuer}\", subject = \"{who.subject}\", compromised_since = "
              f"{since} (what it signed here from then on then fails)"})


def owned(ledger: LedgerHome, seen: Mapping[int, LogEntry],
          blobs: Mapping[str, object] | None = None, *,
          among: Collection[int] | None = None) -> set[str]:
    """The keys that signed a log's own policies: each record of the policy history followed
    from ``seen`` (`their_policy`), its envelope's signatures verified here against the keys
    those policies name (not its log's word of who signed: a log may list any signer in its
    entries, and a policy any key). What a buyer holds that makes a key a log's own; a relay's
    policy lists the keys of the records it relays, but they never sign it (upd46).
    ``among``: the indices of ``seen`` whose records only the log's owner logs (its policies,
    import records, refusals: `updates.NOT_TAKEN`) are verified so, whatever they are about
    (`own_signed`)."""
    theirs = their_policy(ledger, seen, blobs)
    chain = () if theirs is None else (theirs, *(q for _i, q in theirs.earlier))
    keys = {k.keyid: k for p in chain for r in KEY_ROLES for k in p.role(r).keys}
    digests = {policy_digest(p) for p in chain}
    out: set[str] = set()
    for i, e in seen.items():
        if not keys or (e.kind not in NOT_TAKEN or i not in among
                        if among is not None else
                        e.kind != "trust-policy" or e.subject not in digests):
            continue
        got = (blobs or {}).get(e.envelope)
        try:
            raw = got if isinstance(got, bytes) else ledger.store.get(
                e.envelope, limit=MAX_ENVELOPE_BYTES)
            out.update(k.keyid for k in verify_envelope(Envelope.from_bytes(raw),
                                                        keys.values()))
        except (OSError, LedgerError, ProvenanceError) as x:
            if read_failure(x):
                raise
    return out


def own_signed(ledger: LedgerHome, logs: Collection[str], entries: Mapping[int, bytes],
               blob: Callable[[str], bytes | None]) -> set[str]:
    """The keys that signed the records of the log ``logs`` (its key, and those it rotated
    from) that only its owner logs (`updates.NOT_TAKEN`) among ``entries`` (an update of it, by
    index; their envelopes from ``blob``), each envelope's signatures verified against the keys
    of that log's policy history (its policy records held here and the update's: `owned`), not
    the signers its entries list: a relay that lists another log's key there would be named
    as the revoker of what that log revoked (rev53's Left; `first_contact.saw`'s ``own``)."""
    parsed = {i: LogEntry.from_bytes(raw) for i, raw in entries.items()}
    if not any(e.kind in NOT_TAKEN for e in parsed.values()):
        return set()
    imports = import_records(ledger)
    seen = {i: e for k in logs for i, e in entries_of(k, imports, skip=entries).items()}
    seen |= parsed
    blobs = {e.envelope: got for i, e in seen.items()
             if (e.kind == "trust-policy" or i in parsed) and e.kind in NOT_TAKEN
             and (got := blob(e.envelope)) is not None}
    return owned(ledger, seen, blobs, among=parsed)


def _owner(ledger: LedgerHome, imports: Sequence[tuple[int, Import]], keyid: str,
           logs: Collection[str]) -> str | None:
    """The origins of the other logs applied here (not of the verifier keys ``logs``, nor of
    their origin: a log's keys before and after a rotation are one log) whose own policies
    ``keyid`` signed (`owned`), or None."""
    names = {vk.split("+")[0] for vk in logs}
    others = {vk for _i, p in imports if isinstance(vk := p.log.get("vkey"), str)
              and vk.split("+")[0] not in names}
    found = sorted({origin_name(vk) for vk in others
                    if keyid in owned(ledger, entries_of(vk, imports))})
    return ", ".join(found) or None


def _one_log(vkey: str, logs: Collection[str]) -> set[str]:
    """The verifier keys of ``logs`` that are the log ``vkey`` across the rotations of its key
    this user followed (each a handover `trust_handover.continue_trust` checked, noted as
    `TrustState.retired_to` in the user's state), ``vkey`` among them. Not every key of its
    origin name: two logs may share one, each trusted on its own, and grouped by the name one's
    claim took the other's line (named for the key that sorts first) and its revocations
    (rev46's Left, out49)."""
    from .trust_state import TrustState, one_spelling

    name = vkey.split("+")[0]
    same = {one_spelling(v): v for v in logs if v.split("+")[0] == name}
    if len(same) < 2:
        return {vkey}
    handed: list[tuple[str, str]] = []
    for spelled, v in same.items():  # (opened only when two keys of the name are met)
        state = TrustState.open(v)
        try:
            new = state.retired_to()
        finally:
            state.close()
        if new is not None and one_spelling(new) in same:
            handed.append((spelled, one_spelling(new)))
    kin, grew = {one_spelling(vkey)}, True
    while grew:
        grew = False
        for old, new in handed:
            if (old in kin) != (new in kin):
                kin |= {old, new}
                grew = True
    return {same.get(k, vkey) for k in kin}


def _claimed(ledger: LedgerHome, changes: Changes, rk: RevokedKey, theirs: TrustPolicy,
             vkey: str, owner: str, revoked: Sequence[str], *, before: Sequence[str] = ()
             ) -> None:
    """A declaration by the log ``vkey`` of a key that signed none of its policies and signed
    another log's (``owner``): a claim, not its owner's declaration (``claim``; in
    ``changes.compromised`` when it ``revoked`` here what that log alone brought, as any log's
    declaration does, else ``changes.suspect``): no firm advice, the owner named (upd46).
    ``before``: what this ledger revoked on that declaration before the owner was met
    (`_revoked_on`, ``revokedBefore``): named, with what stands and the way on, never undone:
    the owner met later may be a thief's log that signed its policy with the stolen key, and
    undoing would hand it the real owner's revocations (upd47; upd46's Left)."""
    by = origin_name(vkey)
    (changes.compromised if revoked else changes.suspect).append({
        "key": rk.keyid, "declaredBy": by, "digests": [], "declarerBrought": False,
        "claim": True, "owner": owner, "revokedHere": list(revoked),
        "revokedBefore": list(before),
        "text": f"key {rk.keyid[:16]}, which {by} declares compromised ({rk.describe()}; its "
                f"policy {theirs.name!r} serial {theirs.serial}), signed the policies of "
                f"{owner} and none of {by}'s: {by}'s word on it is a claim, not its owner's "
                "declaration (" + (f"revoked here only what {by} alone brought that it signed "
                f"since: {', '.join(label(ledger, d) for d in revoked)}" if revoked else
                f"revoked here on its word before you met {owner}, and not undone (a "
                "revocation stands: the log met later may be a thief's, its policy signed "
                f"with the stolen key): {', '.join(label(ledger, d) for d in before)}"
                if before else "not revoked here") + f"): ask {owner} about its key (its own "
                "declaration revokes what its log brought you; a thief's log may sign its "
                f"policy with a stolen key); if you believe {by}, record a successor "
                f"with [[revoked_keys]] key = \"{rk.keyid}\"" + (
                    f"; if {owner} shows the key is sound, ask it to record what was revoked "
                    f"again under a key you trust, and take {by}'s log out of your policy's "
                    "vkeys" if before else "")})


def _reason(rk: RevokedKey, vkey: str) -> str:
    """The start of the reason of a revocation `compromises` step 2 records here for the key
    ``rk`` the log ``vkey`` declares compromised (what `_revoked_on` finds again)."""
    return f"signed by key {rk.keyid[:16]}, which {origin_name(vkey)} declares compromised"


def _revoked_on(ledger: LedgerHome, policy: TrustPolicy, imports: Sequence[tuple[int, Import]],
                rk: RevokedKey, vkeys: Collection[str], state: TrustState | None) -> list[str]:
    """The artifacts of the log of the verifier keys ``vkeys`` (its entries the import records
    list) signed by ``rk`` that this ledger revoked on that log's declaration of it under one
    of those keys (`compromises` step 2): a revocation record of its own (no origin) whose
    reason is `_reason`'s (upd47)."""
    state = state or ledger.trust_state()
    digests = dict.fromkeys(e.subject for v in sorted(vkeys)
                            for e in entries_of(v, imports).values()
                            if KINDS[e.kind].lineage and rk.keyid in e.signers)
    origins, start = Origins(ledger), tuple(_reason(rk, v) for v in vkeys)
    verifier = LineageVerifier(ledger_evidence(ledger), policy, index=state, data="size")
    try:
        return [d for d in digests if any(
            not origins.of(j) and isinstance(r := verifier.record(j), Record)
            and isinstance(r.predicate, Revocation) and r.predicate.reason.startswith(start)
            for j in verifier.records(d, "revocation"))]
    finally:
        verifier.close()


def pending_compromises(ledger: LedgerHome, policy: TrustPolicy, update: Update,
                        imports: Sequence[tuple[int, Import]], changes: Changes) -> None:
    """The keys the other log's policy after ``update`` declares compromised that its policy
    before did not (a key of its own policies, not revoked by ``policy``), as ``pending``
    items of ``changes``: `monitor` without keys records nothing, so each run says them until
    one with keys takes the policy in (upd46; upd45's Left). Each names the roles ``policy``
    gives the key and what this ledger holds from that log alone signed by it since (what
    `compromises` step 2 would revoke here); one that is neither is not named. A claim
    (`_claimed`: the key signed another log's policies, none of this one's) is named as one."""
    logs = {update.vkey, *update.logs}
    taken = {i: LogEntry.from_bytes(update.entries[i]) for i in update.entries}
    # (upd47) a claim another log made on a key of this one's, named each run with what it
    # revoked here before (`_claimed`), as `compromises` names it when keys take the update in
    _declared_elsewhere(ledger, policy, update, {i: taken[i] for i in update.taken}, changes,
                        imports, claims=True)
    before = {i: e for k in logs for i, e in entries_of(k, imports).items()}
    seen = before | taken
    theirs, own = _their_compromises(ledger, seen, update.objects)
    if theirs is None:
        return
    was = their_policy(ledger, before)
    known = {x.keyid for x in (*(was.revoked_keys if was else ()), *policy.revoked_keys)}
    state, origins = ledger.trust_state(), Origins(ledger)
    _identities(ledger, policy, theirs, update, seen, changes, state)  # (out55: as with keys)
    mine = owned(ledger, seen, update.objects)
    for rk in theirs.revoked_keys:
        if rk.keyid not in own or rk.keyid in known:
            continue
        owner = None if rk.keyid in mine else _owner(ledger, imports, rk.keyid, logs)
        roles = [r for r in KEY_ROLES if policy.holds(r, rk.keyid)]
        hits = list(dict.fromkeys(
            e.subject for i, e in sorted(seen.items()) if KINDS[e.kind].lineage
            and rk.keyid in e.signers and rk.covers(i, e.time) and held(ledger, e.subject, state)
            and _brought_by(state, origins, e.subject, logs)))
        if owner and not hits:  # a claim that revokes nothing here (upd46)
            _claimed(ledger, changes, rk, theirs, update.vkey, owner, ())
            continue
        if not (roles or hits):
            continue
        at = max(i for i, e in seen.items() if e.kind == "trust-policy")
        changes.pending.append({
            "kind": "key compromise", "key": rk.keyid, "logIndex": at, "digests": hits,
            "trustedHere": roles, "label": f"key {rk.keyid[:16]}",
            "text": f"pending: key {rk.keyid[:16]} of {changes.origin} is declared compromised "
                    f"({rk.describe()}; its policy {theirs.name!r} serial {theirs.serial}, "
                    f"log index {at})" + (f"; your policy trusts it as {' and '.join(roles)}"
                                          if roles and not owner else "")
                    + (f"; it signed the policies of {owner} and none of {changes.origin}'s: "
                       "a claim, not its owner's declaration" if owner else "")
                    + (f"; it signed what you hold from that log alone: "
                       f"{', '.join(label(ledger, d) for d in hits)}" if hits else "")
                    + ": not taken in (pass --key APPROVER to apply it"
                    + ("; that revokes them here)" if hits else ")")})


def entries_of(vkey: str, imports: Sequence[tuple[int, Import]],
                skip: Collection[int] = ()) -> dict[int, LogEntry]:
    """The entries of the log ``vkey`` that this ledger's import records list, by index
    (those at ``skip`` left out; one that does not parse is skipped)."""
    seen: dict[int, LogEntry] = {}
    for _i, pred in imports:
        if pred.log.get("vkey") != vkey:
            continue
        for item in pred.entries:
            raw, at = item.get("entry"), item.get("index")
            if isinstance(raw, str) and isinstance(at, int) and at not in skip:
                try:
                    seen[int(at)] = LogEntry.from_bytes(raw.encode("utf-8"))
                except ProvenanceError:
                    continue
    return seen


def their_policy(ledger: LedgerHome, seen: Mapping[int, LogEntry],
                 blobs: Mapping[str, object] | None = None) -> TrustPolicy | None:
    """A log's policy in force, followed by its own rules from its policy records among
    ``seen`` (None when there is none). A policy record whose envelope is not here (nor among
    ``blobs``: envelopes at hand, hashed, not stored: `monitor` without keys) is passed
    over; one the disk fails to read ends the command (exit 3, `errors.read_failure`): passed
    over, a key it declares compromised went unnamed (left29 finding 2)."""
    records = []
    for i, e in sorted(seen.items()):
        if e.kind != "trust-policy":
            continue
        try:
            got = (blobs or {}).get(e.envelope)
            records.append((i, e.subject, got if isinstance(got, bytes) else
                            ledger.store.get(e.envelope, limit=MAX_ENVELOPE_BYTES)))
        except (OSError, LedgerError) as x:
            if read_failure(x):
                raise
    return follow_history(None, records)[0] if records else None


def _their_compromises(ledger: LedgerHome, seen: Mapping[int, LogEntry],
                       blobs: Mapping[str, object] | None = None
                       ) -> tuple[TrustPolicy | None, set[str]]:
    """Step 1 of `compromises` for one log: its policy in force (`their_policy`; None when it
    declares no key compromised), and the keys its own policies held (a party declares
    compromised only those: not another party's whose records it imported into its log)."""
    theirs = their_policy(ledger, seen, blobs)
    if theirs is None or not (theirs.revoked_keys or theirs.revoked_identities):
        return None, set()
    return theirs, {k for p in (theirs, *(q for _i, q in theirs.earlier))
                    for role in KEY_ROLES for k in p.role(role).keyids}


def _declared_elsewhere(ledger: LedgerHome, policy: TrustPolicy, update: Update,
                        taken: Mapping[int, LogEntry], changes: Changes,
                        imports: Sequence[tuple[int, Import]], state: TrustState | None = None,
                        *, claims: bool = False) -> None:
    """A record this update takes in that is signed by a key another log here declares
    compromised (a key of that log's own policies, which this ledger's policy does not
    revoke yet) is named in a warning (``changes.suspect``). Not revoked: a policy may list
    anyone's key, so a log's word stops only what it alone brought here (`compromises`);
    before, such a record was taken in silently (docs/SECURITY.md, rev24 finding 1).
    ``claims``: only the claims (`_claimed`; `pending_compromises`: nothing taken in)."""
    signed = {k for e in taken.values() if KINDS[e.kind].lineage for k in e.signers}
    if not signed:
        return
    revoked_here = {x.keyid for x in policy.revoked_keys}
    logs = {vk for _i, p in imports if isinstance(vk := p.log.get("vkey"), str)}
    bringer: set[str] | None = None  # the keys that signed the update's log's policies
    said: set[tuple[str, str]] = set()  # the claims named: a log's first key, the key
    for vkey in sorted(logs - {update.vkey, *update.logs}):
        theirs, own = _their_compromises(ledger, entries := entries_of(vkey, imports))
        for rk in theirs.revoked_keys if theirs is not None else ():
            if theirs is None or rk.keyid not in own & signed or rk.keyid in revoked_here:
                continue
            if rk.keyid not in owned(ledger, entries):  # (upd46) whose key is it?
                if bringer is None:
                    bringer = owned(ledger, {i: e for k in (*update.logs, update.vkey)
                                             for i, e in entries_of(k, imports).items()}
                                    | {i: LogEntry.from_bytes(raw) for i, raw
                                       in update.entries.items()}, update.objects)
                owner = origin_name(update.vkey) if rk.keyid in bringer else _owner(
                    ledger, imports, rk.keyid, {vkey})
                if owner:  # (upd47) what it revoked here before its owner came, under any
                    # of its keys (across a rotation this user followed: `_one_log`)
                    kin = _one_log(vkey, logs)
                    if (min(kin), rk.keyid) not in said:
                        said.add((min(kin), rk.keyid))
                        _claimed(ledger, changes, rk, theirs, vkey, owner, (), before=_revoked_on(
                            ledger, policy, imports, rk, kin, state))
                    continue
            if claims:
                continue
            hit = {e.subject: label(ledger, e.subject) for _i, e in sorted(taken.items())
                   if KINDS[e.kind].lineage and rk.keyid in e.signers}
            shown = _shown(ledger, policy, entries, rk.keyid, vkey, state)  # (vend43)
            changes.suspect.append({
                "key": rk.keyid, "declaredBy": origin_name(vkey), "digests": list(hit),
                "declarerBrought": shown,
                "text": f"key {rk.keyid[:16]}, which {origin_name(vkey)} declares compromised "
                        f"({rk.describe()}; its policy {theirs.name!r} serial "
                        f"{theirs.serial}), signed what was just taken in from "
                        f"{changes.origin}: {', '.join(hit.values())}; not revoked here (a log "
                        "stops only what it brought)" + ("" if shown else f"; {origin_name(vkey)}"
                        " brought you nothing that key signed (a policy may list anyone's key)")
                        + f": if the key is theirs, record a successor with [[revoked_keys]] "
                        f"key = \"{rk.keyid}\""})


def _shown(ledger: LedgerHome, policy: TrustPolicy, entries: Mapping[int, LogEntry],
           keyid: str, vkey: str, state: TrustState | None = None) -> bool:
    """Whether the log ``vkey`` brought here first a record that verifies signed by ``keyid``
    (`_signed_there`, of its ``entries`` its log says the key signed), other than one its own
    import records say it relayed (`relayed_by`, upd45): what shows the key it declares
    compromised may be its own (vend43; `compromises` step 3's line otherwise)."""
    evidence, origins = ledger_evidence(ledger), Origins(ledger)
    state = state or ledger.trust_state()
    relayed = relayed_by(ledger, entries, {vkey})
    verifier = LineageVerifier(evidence, policy, index=state, data="size")
    try:
        return any(_signed_there(state, origins, verifier, e.subject, e.kind, keyid, {vkey})
                   for e in entries.values() if KINDS[e.kind].lineage and keyid in e.signers
                   and e.envelope not in relayed and held(ledger, e.subject, state))
    finally:
        verifier.close()


def _brought_by(state: TrustState, origins: Origins, digest: str, logs: Collection[str]
                ) -> bool:
    """True when every record of the artifact ``digest`` here was brought by an import from
    the log of one of the verifier keys ``logs`` (none is this ledger's own, nor another
    log's)."""
    found = [origins.of(i) for i in state.about(digest)
             if (e := state.entry(i)) is not None and KINDS[e.kind].lineage]
    return bool(found) and all(o and o <= set(logs) for o in found)


def _vouched(ledger: LedgerHome, imports: Sequence[tuple[int, Import]], logs: Collection[str]
             ) -> set[str]:
    """The envelopes another log's own import records (kept here, `relayed_by`) say it relayed
    from the log of one of the verifier keys ``logs``: records that log showed first, whoever
    brought them here first (upd45)."""
    others = {vk for _i, p in imports if isinstance(vk := p.log.get("vkey"), str)} - set(logs)
    return {env for vk in sorted(others)
            for env, source in relayed_by(ledger, entries_of(vk, imports), {vk}).items()
            if source in logs}


def _signed_there(state: TrustState, origins: Origins, verifier: LineageVerifier, digest: str,
                  kind: str, keyid: str, logs: Collection[str],
                  vouched: Collection[str] = (), *, anyone: bool = False) -> bool:
    """True when every record of kind ``kind`` of the artifact ``digest`` here came from another
    log (none is this ledger's own), the first to bring it here is the declaring log (one of
    ``logs``: its own record, relayed later by another; a log that relayed another's record
    and declares its key compromised is not told of: the lead, at vend42's merge,
    test_borrowed_handovers.py), or its envelope is one of ``vouched`` (the log that brought it
    first relayed it from one of ``logs``, by its own import records: upd45), and one of them
    verifies here signed by ``keyid``: its envelope's signature, not a log's word of who signed
    (hist41 finding 2). ``anyone``: the key signed the declaring log's policies (`owned`):
    its owner's declaration counts whoever brought the record first (upd46)."""
    found = [j for j in state.about(digest) if (e := state.entry(j)) is not None
             and e.kind == kind]
    return bool(found) and all(origins.of(j) for j in found) and (anyone or any(
        origins.first(j) in logs or ((e := state.entry(j)) is not None and e.envelope in vouched)
        for j in found)) and any(
        isinstance(r := verifier.record(j), Record) and keyid in r.signers for j in found)


def relayed_by(ledger: LedgerHome, entries: Mapping[int, LogEntry], logs: Collection[str]
               ) -> dict[str, str]:
    """The envelopes of records a log (of the verifier keys ``logs``) relayed, by its own word:
    each listed by one of its import records among ``entries`` (the envelope kept here: taken
    in with an update that carried it, `updates.select`) as an entry of another log, mapped to
    that log's verifier key (upd45). Its word against itself: a record it lists was not its
    own to show; one it does not list (its imports unpublished, or hidden) is taken as its
    own, as before. An import record not here, or not readable, says nothing; nor does an
    entry it lists whose inclusion proof does not lead to the root of the other log's
    checkpoint it holds, signed by that log's key (upd46: the other log's word, not the
    relay's: a record listed so was in that log, whoever lists it)."""
    out: dict[str, str] = {}
    for i, e in sorted(entries.items()):
        if e.kind != "import":
            continue
        try:
            data = ledger.store.get(e.envelope, limit=MAX_ENVELOPE_BYTES)
            _st, pred = read_record(e, data, f"import record {i}")
        except (OSError, LedgerError, ProvenanceError) as x:
            if read_failure(x):
                raise
            continue
        if not isinstance(pred, Import) or not isinstance(source := pred.log.get("vkey"), str) \
                or source in logs:
            continue
        try:  # (upd46) the other log's signed checkpoint, each entry's proof under it
            cp = verify_checkpoint(str(pred.log.get("checkpoint")).encode("utf-8"),
                                   verifier_from_vkey(source))
        except (ProvenanceError, ValueError):
            continue
        for item in pred.entries:
            raw, at, path = item.get("entry"), item.get("index"), item.get("inclusion")
            with contextlib.suppress(ProvenanceError, ValueError):
                if isinstance(raw, str) and isinstance(at, int) and isinstance(path, list):
                    data = raw.encode("utf-8")
                    verify_inclusion(at, cp.size, leaf_hash(data),
                                     [base64.b64decode(str(h), validate=True) for h in path],
                                     cp.root)
                    out[LogEntry.from_bytes(data).envelope] = source
    return out


def owners_declaration(ledger: LedgerHome, policy: TrustPolicy, taken: Mapping[int, LogEntry],
                       logs: Collection[str], blob: Callable[[str], bytes | None]) -> str | None:
    """Why an update of the log ``logs`` (its key, and those it rotated from) is refused: a
    lineage record it takes in (``taken``) verifies here signed keylessly by a Sigstore identity
    that ``policy`` trusts for a role and does not revoke, which another log applied here
    declares compromised and owns (one of its own policies names it for a role, and it brought
    here first a record the identity signed: `_first_by`), logged there
    at or after the point declared, or not known here from that log's entries (fail closed:
    which of its indices it is cannot be told); None when none is. The owner's word on its
    identity, whoever relays what it signed (out59's Left 1(c)): before, a relay's copy
    verified until the buyer recorded the successor the owner's update's WARNING names. A
    key's declaration by another log stays a warning (`_declared_elsewhere`): a policy may list
    anyone's key, and who owns a key is what signed the log's policies (`owned`). ``blob``:
    the update's envelopes and Sigstore bundles, by digest."""
    origins: Origins | None
    lineage = [e for _i, e in sorted(taken.items()) if KINDS[e.kind].lineage]
    trusted = {w for r in KEY_ROLES for w in policy.role(r).identities} - {
        x.identity for x in policy.revoked_identities}
    if not lineage or not trusted:
        return None
    imports, origins = import_records(ledger), None
    for vkey in sorted({vk for _i, p in imports if isinstance(vk := p.log.get("vkey"), str)}
                       - set(logs)):
        seen = entries_of(vkey, imports)
        if (theirs := their_policy(ledger, seen)) is None:
            continue
        chain = (theirs, *(q for _i, q in theirs.earlier))
        at = {e.envelope: i for i, e in seen.items()}
        for ri in theirs.revoked_identities:
            who = ri.identity
            if who not in trusted or not any(who in p.role(r).identities
                                             for p in chain for r in KEY_ROLES) or not _first_by(
                    ledger, origins := origins or Origins(ledger), vkey, seen, who, policy):
                continue
            for e in lineage:
                if (i := at.get(e.envelope)) is not None and not ri.covers(i, seen[i].time):
                    continue
                if not _signed_by(e, blob, who, policy):
                    continue
                return (f"{e.kind} {e.subject} is signed by identity {who.subject} "
                        f"({who.issuer}), which {origin_name(vkey)} declares compromised "
                        f"({ri.describe()}; its policy {theirs.name!r} serial {theirs.serial}) "
                        f"and whose policy names it for a role: what it signed "
                        + (f"from then on (there, log index {i})" if i is not None else
                           f"that {origin_name(vkey)}'s entries held here do not show from "
                           "before that point")
                        + " counts for nothing here, whoever relays it; nothing was imported: "
                        f"record a successor of your policy with [[revoked_identities]] issuer "
                        f"= \"{who.issuer}\", subject = \"{who.subject}\" (as its update said), "
                        f"and ask {origin_name(vkey)}'s owner for the record signed again"
                        + ("" if i is not None else f" (or, if it signed it before that point, "
                           f"import it from {origin_name(vkey)} first)"))
    return None


def _first_by(ledger: LedgerHome, origins: Origins, vkey: str, seen: Mapping[int, LogEntry],
              who: Identity, policy: TrustPolicy) -> bool:
    """Whether the log ``vkey`` brought here first (`catalog.Origins.first`) a lineage record
    of its entries ``seen`` that verifies signed keylessly by ``who`` (``policy``'s trusted
    root): what shows an identity its policy names is its own, not a relay's whose policy
    names it to trust the owner's records (as `_shown` is for a key: vend43)."""

    def stored(digest: str) -> bytes | None:
        try:
            return ledger.store.get(digest, limit=MAX_ENVELOPE_BYTES)
        except (LedgerError, OSError) as x:
            if read_failure(x):
                raise
            return None

    return any(KINDS[e.kind].lineage and (j := ledger.log.find_envelope(e.envelope)) is not None
               and origins.first(j) == vkey and _signed_by(e, stored, who, policy)
               for e in seen.values())


def _signed_by(e: LogEntry, blob: Callable[[str], bytes | None], who: Identity,
               policy: TrustPolicy) -> bool:
    """Whether the envelope of ``e`` (its bytes and Sigstore bundles from ``blob``) verifies
    signed keylessly by ``who`` under ``policy``'s trusted root."""
    from trajledger.verify.sigstore_adapter import identity_signers, trusted_root_bytes

    try:
        found, _notes = identity_signers(
            Envelope.from_bytes(blob(e.envelope) or b""), blob, [who],
            trusted_root=trusted_root_bytes(policy.sigstore_trusted_root))
    except ProvenanceError:
        return False
    return who in found
