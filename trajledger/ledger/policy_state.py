"""The trust policy in force in a ledger, from its trust-policy records.

Scope: the one way every command loads a policy (`load_policy`): a file the user trusts (read by
`verify.policy.load_policy_file`, keys named by keyid looked up in the ledger's key store), then
followed through the log's trust-policy records (`verify.policy.follow_history`); or, with no
file, the log's own policy history from its first record.
**Fail closed**: every trust-policy record of the log must have its envelope present and hashing
to its entry; otherwise the policy in force cannot be known and loading fails naming the record
(a deleted or damaged successor must never silently put an older, weaker policy back in force).
Non-scope: judging evidence with a policy (``verify.lineage``), recording one (``ledger.status``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trajledger.verify.digest import digest_bytes
from trajledger.verify.errors import PolicyError
from trajledger.verify.policy import KeyLookup, TrustPolicy, follow_history, load_policy_file

from .errors import LedgerError, StoreError, TamperError

if TYPE_CHECKING:
    from trajledger.verify.keys import PublicKey

    from .home import Ledger
    from .keys import KeyStore

__all__ = [
    "current_policy",
    "key_lookup",
    "keystore_lookup",
    "load_policy",
    "policy_records",
    "refuse_revoked",
]


def policy_records(ledger: Ledger) -> list[tuple[int, str, bytes]]:
    """``(log index, subject, envelope bytes)`` of every trust-policy record, in log order.

    Raises:
        TamperError: a record's envelope is missing or does not hash to its entry.
    """
    state = ledger.trust_state()
    store = ledger.store
    out = []
    for i in state.of_kind("trust-policy"):
        entry = state.entry(i)
        assert entry is not None
        where = store.path_of(entry.envelope) if store.is_local else None
        try:
            data = store.get(entry.envelope) if store.exists(entry.envelope) else None
        except (OSError, StoreError):
            data = None
        problem = "is missing" if data is None else (
            None if digest_bytes(data) == entry.envelope else "does not hash to its entry"
        )
        if problem is not None or data is None:
            raise TamperError(
                f"trust-policy record at log index {i}: its envelope {entry.envelope[:19]}… "
                f"{problem}, so the policy in force cannot be known; restore it with "
                "'trajledger fsck --repair --from BUNDLE|LEDGER'",
                where,
            )
        out.append((i, entry.subject, data))
    return out


def current_policy(
    ledger: Ledger, trusted: TrustPolicy | None = None
) -> tuple[list[str], TrustPolicy] | None:
    """The policy in force (following the history from ``trusted``, or from the first record).

    Returns:
        The notes on the history (one per record examined) and the policy; None when no policy
        is given and none is recorded.

    Raises:
        TamperError: a trust-policy record's envelope is missing or damaged.
    """
    policy, notes = follow_history(trusted, policy_records(ledger))
    return None if policy is None else (notes, policy)


def key_lookup(ledger: Ledger) -> KeyLookup:
    """Find a public key of the ledger's key store by its keyid (None when there is none)."""
    return keystore_lookup(ledger.keys)


def keystore_lookup(keys: KeyStore) -> KeyLookup:
    """Find a public key of ``keys`` by its keyid (None when there is none).

    Every command that reads a policy file resolves keyids with this, so a policy naming keys
    by keyid means the same to each of them (a key store that does not exist yet has no keys).
    """

    def lookup(keyid: str) -> PublicKey | None:
        for info in keys.list():
            if info.keyid == keyid:
                return keys.public(info.name)
        return None

    return lookup


def load_policy(ledger: Ledger, policy_file: Path | None) -> tuple[TrustPolicy, list[str]]:
    """The policy to apply: the file given (followed through the log's policy history), or the
    ledger's policy in force. Every command that applies a policy loads it here.

    Raises:
        LedgerError: no policy given and none recorded.
        OSError: the file cannot be read.
        FormatError: the policy file is invalid.
        TamperError: a trust-policy record's envelope is missing or damaged.
    """
    trusted = None
    if policy_file is not None:
        trusted = load_policy_file(policy_file, key_lookup=key_lookup(ledger))
    found = current_policy(ledger, trusted)
    if found is None:
        raise LedgerError(
            "no trust policy: pass --policy FILE, or record one with "
            "'trajledger policy set FILE --key APPROVER...'"
        )
    notes, policy = found
    return policy, notes


def refuse_revoked(ledger: Ledger, signers: list[tuple[str, str]]) -> None:
    """Refuse to sign a record with a key the ledger's policy in force revokes.

    Every verifier would ignore that signature (`TrustPolicy.revocation`); saying so before
    anything is written keeps a user from believing the record counts. Keys that merely hold no
    role are not refused here: the verifier reports them.

    Args:
        ledger: the open ledger.
        signers: ``(name, keyid)`` of each signing key.

    Raises:
        PolicyError: a key is revoked for a record logged now (at the log's current size).
        TamperError: a trust-policy record's envelope is missing or damaged.
    """
    from trajledger.verify.times import now

    found = current_policy(ledger)
    if found is None:
        return
    policy = found[1]
    if not policy.revoked_keys:
        return
    index, time = ledger.log.size, now()
    for name, keyid in signers:
        revoked = policy.revocation(keyid, index, time)
        if revoked is not None:
            raise PolicyError(
                f"key {name} ({keyid[:12]}): revoked by policy {policy.name!r} serial "
                f"{policy.serial} ({revoked.describe()}); it cannot sign records"
            )
