"""The keys another party's policy added, removed or moved, as an update brings its successor
(upd44, out43's Left: a vendor's new producer key reached the buyer only as a refusal).

Scope: `policy_keys` compares the other log's policy in force before the update (followed from
the policy records this ledger's import records list of it) with its policy after it (those
and the update's), and names each key of a signing role that changed, with its fingerprint,
what it can sign here under this ledger's policy (which alone decides), and the way on. What
the other party's policy says never changes what this ledger trusts: the buyer adds a key by
its own ``policy set``. A log met for the first time has no policy before: nothing is said
(its policy is the one the buyer read when it set its own).

Non-scope: the keys it declares compromised (``update_compromises``); following a policy
history (``verify.policy_history``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from trajledger.verify.log_entry import LogEntry
from trajledger.verify.other_predicates import Import
from trajledger.verify.policy import TrustPolicy

from .catalog import origin_name
from .update_changes import Changes
from .update_compromises import KEY_ROLES, entries_of, their_policy
from .update_reads import Update

if TYPE_CHECKING:
    from .home import LedgerHome

__all__ = ["policy_keys"]


def policy_keys(ledger: LedgerHome, policy: TrustPolicy, update: Update,
                imports: Sequence[tuple[int, Import]], parsed: Mapping[int, LogEntry],
                changes: Changes) -> None:
    """Fill ``changes.policy_keys``: one item a key whose roles the other log's policy changed.

    ``imports``: this ledger's import records read before the update's own was appended (what
    was known of the log before it); ``parsed``: entries of ``update`` already parsed. Only
    when the update brings a policy record not listed before are the two policies followed.
    """
    logs = (*update.logs, update.vkey)
    before = {i: e for k in logs for i, e in entries_of(k, imports).items()}
    mine = {i: parsed[i] if i in parsed else LogEntry.from_bytes(update.entries[i])
            for i in update.entries}
    if not any(e.kind == "trust-policy" and i not in before for i, e in mine.items()):
        return
    was = their_policy(ledger, before, update.objects)
    now = their_policy(ledger, before | mine, update.objects)
    if was is None or now is None or (was.serial, was.roles) == (now.serial, now.roles):
        return
    origin = origin_name(update.vkey)
    theirs = {k for r in KEY_ROLES for k in was.role(r).keyids}
    compromised = {x.keyid for x in now.revoked_keys}  # `update_compromises` names those
    granted = {r for r in KEY_ROLES if policy.role(r).keyids & theirs}
    own = {k.keyid: k.name for k in ledger.keys.list()}
    for key in sorted({k for p in (was, now) for r in KEY_ROLES for k in p.role(r).keyids}
                      - compromised):
        added = [r for r in KEY_ROLES if now.holds(r, key) and not was.holds(r, key)]
        removed = [r for r in KEY_ROLES if was.holds(r, key) and not now.holds(r, key)]
        if not (added or removed):
            continue
        level, text = _line(origin, key, added, removed, policy, granted, own.get(key))
        changes.policy_keys.append({
            "key": key, "added": added, "removed": removed, "serial": now.serial,
            "wasSerial": was.serial, "level": level,
            "trustedHere": [r for r in KEY_ROLES if policy.holds(r, key)],
            "text": f"the policy of {origin} (serial {now.serial}, was {was.serial}) {text}"})


def _line(origin: str, key: str, added: list[str], removed: list[str], policy: TrustPolicy,
          granted: set[str], own: str | None) -> tuple[str, str]:
    """(level, the line after its head) of one key: what changed, what it can sign here,
    what to do. ``granted``: the roles this ledger's policy gives any of that log's keys;
    ``own``: the name of this ledger's key of that fingerprint, if any."""
    k, act = key[:16], own is not None
    verb = (f"moves key {k} from {' and '.join(removed)} to {' and '.join(added)}"
            if added and removed else f"adds key {k} as {' and '.join(added)}" if added
            else f"removes key {k} from {' and '.join(removed)}")
    parts = [f"it is your own key {own!r}: a policy may list anyone's public key, and "
             f"{origin}'s gives it nothing here; nothing to do"] if own else []
    for r in added if own is None else ():
        if policy.holds(r, key):
            parts.append(f"your policy trusts it as {r} already: what it signs as {r} from this "
                         "log verifies here")
        elif r in granted:
            act = True
            parts.append(f"records it signs from this log are refused here ('not in the "
                         f"policy') until you add it: if {origin} confirms the key is theirs "
                         "(ask them out of band, not this bundle: compare the fingerprint), add "
                         f"its public key to [roles.{r}] of your policy and run 'trajledger "
                         "policy set FILE --key APPROVER'")
        else:
            act = True
            parts.append(f"your policy grants no key of this log {r}, so it can sign nothing "
                         f"as {r} here; your policy's {r} keys are {r}s of all you hold, not "
                         f"only of this log's: leave it out unless you mean {origin} to have "
                         "that")
    for r in removed if own is None else ():
        if policy.holds(r, key):
            act = True
            # (out59) a replaced key is not a compromised one: what it signed there stays
            # valid, and their later bundles carry it again (a dataset built on an older record)
            parts.append(f"your policy still trusts it as {r}: what it signed there before "
                         f"stays valid ({origin} does not declare it compromised), and a bundle "
                         f"of theirs that carries such a record (a later dataset built on one) "
                         "is refused here without it; keep it while you take those in, then "
                         "take it out of your policy and run 'trajledger policy set FILE --key "
                         "APPROVER' (what you hold keeps verifying)")
        else:
            parts.append(f"your policy does not name it as {r}: nothing to do")
    return ("warning" if act else "note",
            f"{verb} (fingerprint {key}): {'; '.join(parts)}; your policy is unchanged (a "
            "vendor's policy never changes what you trust)")
