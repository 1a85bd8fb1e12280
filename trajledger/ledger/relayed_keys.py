"""Who to ask about a key your policy does not hold, when a bundle brought records it signed:
the words `import` and `verify BUNDLE` put after such a record's line (`key … (not in the
policy)`), which says ``if the signer confirms the key is theirs (ask them …)``; and, for a
keyless signature whose Sigstore bundle the bundle lacks, the declaration by the bundle's log
that its identity was compromised (why its exporter left the Sigstore bundle out).

A third party that imports a lab's bundle may hold records a vendor signed, which the lab
relayed: "the signer" is then not the party that sent the bundle, and a keyid alone does not
say whose it is (out57's Left; out59, after a vendor replaced its key). From the bundle's own
records, read without trusting them (naming, not trust): an import record the bundle carries
that lists a record signed by the key names the log it came from and its index there (a log
whose policy's ``publish`` lists ``import`` bundles its import records); otherwise a policy of
the bundle's log that trusts the key for a role says to ask that log's owner whose it is (its
own, or of a log whose records it relays). Nothing here changes a verdict: the record failed
already. A party is named only when your policy trusts its log's key (``logs``: the bundle's,
and the origin an import record names), an index only when it is a number: the bundle's
records are the sender's word, and a hostile one named a log of its choosing (a look-alike of
the vendor's) as "the signer to ask", or wrote lines of its own into the refusal (rev54).
Non-scope: judging the record (`verify.judge`), the line's own advice (`verify.key_roles`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from trajledger.verify.errors import ProvenanceError
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.log_index import read_record
from trajledger.verify.other_predicates import Import
from trajledger.verify.policy import KEY_ROLES, TrustPolicy
from trajledger.verify.predicates import TrustPolicyRecord

from .catalog import origin_name

if TYPE_CHECKING:
    from trajledger.verify.bundle import BundleEvidence

__all__ = ["relayed_keys"]

_UNCHECKED = "keyless signature's Sigstore bundle, if it is one, not checked here"
_RECORD = re.compile(r" record (\d+): ")
_NAMED = re.compile(r"the envelope names key ([0-9a-f]{12}) \(not in the policy\)")


def relayed_keys(evidence: BundleEvidence, lines: Sequence[str],
                 logs: Collection[str] = ()) -> dict[str, str]:
    """What follows each of ``lines`` (a report's failures) that names a key the policy does
    not hold, by the line (`runner.commands.report_raise`'s ``more``): who signed with it and
    who to ask; or a keyless signature not checked whose identity the bundle's log declares
    compromised (`_declared`). Empty when no line names one, or the bundle says nothing, or
    the bundle's log is not one of ``logs`` (the log keys of the user's policy)."""
    out: dict[str, str] = {}
    if evidence.index.vkey not in logs:
        return out
    listed: list[tuple[tuple[str, ...], str, str, object]] | None = None
    for line in lines:
        record = _RECORD.search(line)
        raw = evidence.entry_bytes(int(record[1])) if record else None
        if record and raw and _UNCHECKED in line and (
                said := _declared(evidence, int(record[1]), raw)):
            out[line] = f"; {said}"
            continue
        for prefix in _NAMED.findall(line):
            try:  # (the record the line names, when it names one: its index at the origin)
                envelope = LogEntry.from_bytes(raw).envelope if raw else None
            except ProvenanceError:
                envelope = None
            listed = _listed(evidence, logs) if listed is None else listed
            if said := _whose(evidence, listed, prefix, envelope):
                out[line] = f"; {said}"
                break
    return out


def _listed(evidence: BundleEvidence, logs: Collection[str]
            ) -> list[tuple[tuple[str, ...], str, str, object]]:
    """The records the bundle's import records list from a log of ``logs``: ``(signers,
    envelope, the origin log's vkey, the record's index there)`` of each (an index that is not
    a number left out: rev54)."""
    out: list[tuple[tuple[str, ...], str, str, object]] = []
    for _i, raw in evidence.entries():
        try:
            entry = LogEntry.from_bytes(raw)
            if entry.kind != "import":
                continue
            _statement, predicate = read_record(entry, evidence.blob(entry.envelope), "import")
        except ProvenanceError:
            continue  # (unreadable: the verifier judged it; nothing to name)
        assert isinstance(predicate, Import)
        for item in predicate.entries:
            try:
                theirs = LogEntry.from_bytes(str(item.get("entry")).encode("utf-8"))
            except (ProvenanceError, UnicodeEncodeError):
                continue
            vkey, index = str(predicate.log.get("vkey")), item.get("index")
            if vkey in logs and type(index) is int:
                out.append((theirs.signers, theirs.envelope, vkey, index))
    return out


def _whose(evidence: BundleEvidence, listed: list[tuple[tuple[str, ...], str, str, object]],
           prefix: str, envelope: str | None) -> str | None:
    """Who to ask about the key whose keyid starts with ``prefix``, from the bundle's records
    (``listed`` by its import records, the entry of ``envelope``, the record a line names,
    first; then its policies)."""
    relay = origin_name(evidence.index.vkey)
    found = [(theirs != envelope, vkey, index) for signers, theirs, vkey, index in listed
             if any(s.startswith(prefix) for s in signers)]
    if found:
        _other, vkey, index = min(found, key=lambda f: f[0])
        origin = origin_name(vkey)
        return (f"the key signed a record of {origin} (its log index {index}), which {relay} "
                f"relayed: the signer to ask is {origin}'s owner, not {relay}, whose bundle "
                "brought it")
    for policy in _policies(evidence):
        roles = [r for r in KEY_ROLES if any(k.startswith(prefix) for k in policy.role(r).keyids)]
        if roles:
            return (f"{relay}'s policy (serial {policy.serial}, in this bundle) trusts the key as "
                    f"{' and '.join(roles)}: ask {relay}'s owner whose key it is (its own, or "
                    "of a log whose records it relays), then ask that owner")
    return None


def _declared(evidence: BundleEvidence, index: int, raw: bytes) -> str | None:
    """The declaration, by the newest policy the bundle carries of its log, of an identity
    compromised from a point at or before the record at ``index`` (entry ``raw``): why an
    exporter left the record's Sigstore bundle out (out59 finding 4)."""
    try:
        time = LogEntry.from_bytes(raw).time
    except ProvenanceError:
        return None
    for policy in _policies(evidence):
        gone = [r for r in policy.revoked_identities if r.covers(index, time)]
        if gone:
            relay = origin_name(evidence.index.vkey)
            return (f"{relay}'s policy (serial {policy.serial}, in this bundle) declares "
                    + "; ".join(f"identity {r.identity.subject} ({r.identity.issuer}) "
                                f"{r.describe()}" for r in gone)
                    + ": what it signed from then on counts for nothing there, so its export "
                    "leaves out the Sigstore bundle; take the record for one its signer does "
                    f"not stand by: ask {relay}'s owner for it signed again")
    return None


def _policies(evidence: BundleEvidence) -> list[TrustPolicy]:
    """The policies the bundle carries of its log, newest first (unreadable ones left out)."""
    out = []
    for _i, entry, data in reversed(evidence.policy_records()):
        try:
            record = read_record(entry, data, "policy")[1]
            assert isinstance(record, TrustPolicyRecord)
            out.append(TrustPolicy.from_json(record.policy))
        except (ProvenanceError, ValueError):  # (hostile input: naming only, never a bug)
            continue
    return out
