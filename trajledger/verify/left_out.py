"""What the exporter's own policy declares: why a bundle lacks what its verification needed,
and a key the verifier's policy trusts that it declares compromised.

Scope: the history of trust-policy records a bundle carries, followed from its first (the
exporter's own policy, `exporters_declarations`), read for its ``[[revoked_keys]]``:
`explain_left_out`, a bundle's record that verifies under the verifier's policy but whose
manifest or data blob the bundle lacks, because that policy declares the key that signed the
record compromised: its export read nothing of it (the record failed there), so left it out.
The failing check then names the key, that policy and since when, not only "manifest … is
missing" (docs/SECURITY.md, rev18 "Left" and redo15 finding 3). `trusted_compromised`, a key
the verifier's policy (written by hand, or an older one, used as given: the exporter's
successors are not followed from it) holds in a role though the exporter's policy declares it
compromised (left35 finding 3): a record of the bundle it signed since then fails (its
owner's word is that the signature may be a thief's), and without one the report warns that
the policy must be updated; `trusted_identities_compromised`, the same for a Sigstore identity
its ``[[revoked_identities]]`` declares compromised (left36 finding 1: a record the identity
signed keylessly since then). The exporter's word is its newest policy the history follows to:
a successor that drops a declaration is not followed (``verify.succession``: a revoked key or
identity stays revoked), and one that moves its point is its approvers' later word, which the
verifier applies to the exporter's own log as well (`TrustPolicy.revocation` of the policy in
force, not of the earlier ones). Loaded only for a bundle whose verification failed, or whose
policy in force is not the exporter's newest (the latter only where an auditor verifies:
``python -m verify``, ``trajledger verify BUNDLE``; an import judges a vendor's declarations
itself, ``ledger.exchange``).
Non-scope: judging records (``verify.judge``), the verifier's own revocations
(``verify.key_roles.signed_by`` says those).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from .errors import ProvenanceError
from .log_entry import LogEntry
from .nodes import FAIL, INFO, Node
from .policy import KEY_ROLES, TrustPolicy
from .policy_history import follow_history

if TYPE_CHECKING:
    from .compromise import RevokedIdentity, RevokedKey
    from .keys import Identity
    from .report import Report

__all__ = ["Bundled", "explain_left_out", "exporters_declarations", "trusted_compromised",
           "trusted_identities_compromised"]


class Included(Protocol):
    """The verification's log (a `verify.lineage.LineageVerifier`): its checkpoint, verified
    under the policy in force (None: it did not verify), and what it includes."""

    @property
    def checkpoint(self) -> object | None: ...

    def included(self, index: int) -> str | None: ...


class Bundled(Protocol):
    """What is read of a bundle (a `verify.bundle.BundleEvidence`): its log entries."""

    def entry_bytes(self, index: int) -> bytes | None: ...

    def entries(self) -> Iterator[tuple[int, bytes]]: ...

    def blob(self, digest: str) -> bytes | None: ...


def exporters_declarations(report: Report, bundle: Node, trusted: TrustPolicy | None,
                           records: list[tuple[int, str, bytes]], evidence: Bundled,
                           log: Included | None = None) -> None:
    """Read the exporter's own policy (``records``: the bundle's trust-policy records, as
    `verify.policy_history.follow_history` takes them, followed from the first) for what its
    ``[[revoked_keys]]`` explain of a failing ``report`` (`explain_left_out`) and the keys of
    the policy in force, ``trusted``, it declares compromised (`trusted_compromised`, on the
    ``bundle`` node; None: an import, which judges a vendor's declarations itself). The keys it
    trusts are named (`successor_keys`) only from a history and entries of the log the policy
    in force trusts (``log``, the verification's: its checkpoint verified, each included):
    any sender can write a history of its own (rev44 finding 4)."""
    try:
        theirs, _notes = follow_history(None, records)
    except ProvenanceError:
        return  # a history that cannot be followed declares nothing
    if theirs is None:
        return
    if trusted is not None and not report.ok and log is not None and log.checkpoint is not None \
            and all(log.included(i) is None for i, _s, _e in records):
        successor_keys(bundle, trusted, theirs, records[-1][0],
                       ((i, raw) for i, raw in evidence.entries() if log.included(i) is None))
    if not (theirs.revoked_keys or theirs.revoked_identities):
        return
    if not report.ok and theirs.revoked_keys:
        explain_left_out(report, evidence.entry_bytes, theirs)
    if trusted is not None:
        trusted_compromised(bundle, trusted, theirs, evidence.entries())
        trusted_identities_compromised(bundle, trusted, theirs, evidence)


def successor_keys(bundle: Node, trusted: TrustPolicy, theirs: TrustPolicy, index: int,
                   entries: Iterator[tuple[int, bytes]]) -> None:
    """An ``info`` check on ``bundle`` naming each key that signed a record of this bundle and
    that the exporter's own newest policy ``theirs`` (at log ``index``) holds in a role where
    the policy in force, ``trusted``, does not: a vendor rotated its producer key, and a
    buyer's policy from before fails the new key's records (out46 finding 10: without a word of
    the successor the bundle carries)."""
    signers = {k for _i, raw in entries for k in LogEntry.from_bytes(raw).signers}
    new = sorted({(k.keyid, r) for r in KEY_ROLES for k in theirs.role(r).keys
                  if k.keyid in signers and not trusted.holds(r, k.keyid)})
    if new:
        keys = ", ".join(f"key {k[:12]} as {r}" for k, r in new)
        bundle.add("policy", INFO, f"the exporter's own policy {theirs.name!r} serial "
                   f"{theirs.serial} (in this bundle, log index {index}) trusts {keys}, which "
                   f"signed records here and your policy {trusted.name!r} does not: if you "
                   "follow the exporter's policies, verify from its first policy (the bundle's "
                   "policy/0.json, once its digest matches one you got out of band), whose "
                   "recorded successors are followed, or add the key to your policy")


def trusted_compromised(bundle: Node, trusted: TrustPolicy, theirs: TrustPolicy,
                        entries: Iterator[tuple[int, bytes]]) -> None:
    """A ``policy`` check on ``bundle`` for each key ``trusted`` holds in a role that the
    exporter's policy ``theirs`` declares compromised: failed when a bundled record (each is
    one the verification relied on: an unused member fails the bundle) was signed by it at
    or after the point declared, whose signature the key's owner disowns; else a warning
    (information) that the policy counts what the key signs from now on."""
    held = {rk.keyid: (rk, roles) for rk in theirs.revoked_keys
            if (roles := [r for r in KEY_ROLES if trusted.holds(r, rk.keyid)])}
    if not held:
        return
    since: dict[str, list[int]] = {k: [] for k in held}
    for i, raw in entries:
        entry = LogEntry.from_bytes(raw)  # checked when the bundle was opened
        for keyid in set(entry.signers) & set(held):
            if held[keyid][0].covers(i, entry.time):
                since[keyid].append(i)
    for keyid, (rk, roles) in held.items():
        _declared(bundle, trusted, theirs, ("key", keyid[:12]), roles, rk, since[keyid])


def trusted_identities_compromised(bundle: Node, trusted: TrustPolicy, theirs: TrustPolicy,
                                   evidence: Bundled) -> None:
    """As `trusted_compromised`, for the Sigstore identities ``trusted`` holds in a role that
    the exporter's policy declares compromised (``[[revoked_identities]]``): a bundled record
    such an identity signed keylessly (its Sigstore bundle verifying under ``trusted``'s root)
    at or after the point declared, by the log entry's time or a signing time Sigstore
    verified (as `verify.judge.judge_record` judges a revoked identity), fails the check."""
    held = [(ri, roles) for ri in theirs.revoked_identities
            if (roles := [r for r in KEY_ROLES if ri.identity in trusted.role(r).identities])]
    if not held:
        return
    from .sigstore_adapter import trusted_root_bytes  # loaded only for such an identity

    root = trusted_root_bytes(trusted.sigstore_trusted_root)
    since: list[list[int]] = [[] for _ in held]
    for i, raw in evidence.entries():
        entry = LogEntry.from_bytes(raw)  # checked when the bundle was opened
        data = evidence.blob(entry.envelope)
        for (ri, _roles), found in zip(held, since, strict=True):
            if data is not None and _signed_since(ri, i, entry, data, evidence.blob, root):
                found.append(i)
    for (ri, roles), found in zip(held, since, strict=True):
        who = f"{ri.identity.subject} ({ri.identity.issuer})"
        _declared(bundle, trusted, theirs, ("identity", who), roles, ri, found)


def _signed_since(ri: RevokedIdentity, index: int, entry: LogEntry, data: bytes,
                  blob: Callable[[str], bytes | None], root: bytes | None) -> bool:
    """True when the identity ``ri`` declares compromised signed the envelope ``data`` of the
    record at ``index`` keylessly, at or after the point declared."""
    from .dsse import Envelope
    from .sigstore_adapter import identity_signers

    times: list[str] = []

    def covered(_who: Identity, time: str) -> None:
        times.extend([time] if ri.covers(index, time) else [])

    try:
        envelope = Envelope.from_bytes(data, f"envelope of entry {index}")
        found, _notes = identity_signers(envelope, blob, [ri.identity], trusted_root=root,
                                         revoked=covered)
    except ProvenanceError:  # a damaged envelope: the verification fails it already
        return False
    return bool(found) and (bool(times) or ri.covers(index, entry.time))


def _declared(bundle: Node, trusted: TrustPolicy, theirs: TrustPolicy, who: tuple[str, str],
              roles: list[str], declared: RevokedKey | RevokedIdentity, since: list[int]) -> None:
    """The ``policy`` check on ``bundle`` for one key or identity (``who``: what it is, and
    its name) ``trusted`` holds in ``roles`` that the exporter's policy ``theirs`` declares
    compromised: failed when the bundle's records at ``since`` were signed by it since then."""
    said = (f"your policy {trusted.name!r} trusts {who[0]} {who[1]} as {' and '.join(roles)}, "
            f"which the exporter's own policy {theirs.name!r} serial {theirs.serial} (in this "
            f"bundle) declares {declared.describe()}")
    fix = (f"if the {who[0]} is theirs, update your policy: verify from the exporter's first "
           "policy (the bundle's policy/0.json, once its digest matches one you got out of "
           f"band), whose recorded successors are followed, or take the {who[0]} out of your "
           "roles")
    if since:
        bundle.fail("policy", f"{said}; this bundle's record(s) at log index "
                    f"{', '.join(map(str, since))} were signed by it since then, which its "
                    f"owner disowns: {fix}")
    else:
        bundle.add("policy", INFO, f"WARNING: {said}; nothing in this bundle was signed by it "
                   f"since then, but your policy would count what it signs: {fix}")


def explain_left_out(report: Report, entry_bytes: Callable[[int], bytes | None],
                     theirs: TrustPolicy) -> None:
    """Add the exporter's reason to each failed "… is missing" check of ``report`` whose
    record a key its policy declares compromised signed (``entry_bytes``: the bundle's log
    entry at an index; ``theirs``: the exporter's policy, `exporters_declarations`)."""
    for node in report.nodes.values():
        missing = [i for i, c in enumerate(node.checks)
                   if c.status == FAIL and c.detail.endswith(" is missing")]
        raw = entry_bytes(node.index) if missing and node.index is not None else None
        if raw is None or node.index is None:
            continue
        entry = LogEntry.from_bytes(raw)  # checked when the bundle was opened
        why = "; ".join(
            f"signed by key {rk.keyid[:12]}, which the exporter's policy {theirs.name!r} serial "
            f"{theirs.serial} declares {rk.describe()}"
            for rk in theirs.revoked_keys
            if rk.keyid in entry.signers and rk.covers(node.index, entry.time))
        for i in missing if why else ():
            node.checks[i] = dataclasses.replace(node.checks[i], detail=(
                f"{node.checks[i].detail}: the exporter left it out, its record (log index "
                f"{node.index}) {why}"))
