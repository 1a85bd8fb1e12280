"""Who revoked a failing lineage's revoked causes, by this ledger's records of where each
revocation came from, and what to do: the words `verify`, `lineage`, `admit` and `train` put
after a revoked cause's line, and the ``revokedBy`` of its ``causes`` item in their JSON
(schemas/report.v1.md).

Not trust: the revocation counted already (the verifier judged it under the policy); this
names its origin only, from the user's index and import records, and the log whose own keys
signed it when another log relayed it (`first_contact.signer_log`, as an import names it:
``revoked by VENDOR, relayed by LAB``). out55 finding 6 put the words on `verify`'s line;
out57 carried them to the JSON and to the gate's refusals, and named the signer's log.

The signers named are those whose signatures verified under the policy (the keys, and the
Sigstore identities that signed keylessly), as the import names them (`update_judge`), not
the keyids the log entry lists: that list is the writer of the relaying log's word, and the
verifier asks only that the keys that verified be among them. A relay whose identity's
keyless signature made its own revocation count listed the vendor's key there and was
written up as ``revoked by VENDOR, relayed by LAB (signed by <the vendor's key>)`` (rev53).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trajledger.ledger.home import LedgerHome
    from trajledger.verify.judge import Record
    from trajledger.verify.policy import TrustPolicy
    from trajledger.verify.report import Report


@dataclass(frozen=True)
class Revoker:
    """A revoked cause of a report: its node, the log index of the revocation here, the logs
    that brought it (none: this ledger's own), the other log whose own keys signed it (a
    relay: ``signer_log``), and the keys and Sigstore identities (``SUBJECT (ISSUER)``) whose
    signatures verified."""

    node: str
    start: str
    index: int
    logs: tuple[str, ...]
    signer_log: str | None
    signers: tuple[str, ...]
    identities: tuple[str, ...] = ()

    def words(self) -> str:
        """What follows the cause's line: who revoked it and the way on."""
        who = (f"{self.signer_log}, relayed by {', '.join(self.logs)}" if self.signer_log
               else ", ".join(self.logs) or "this ledger")
        by = ", ".join([k[:12] for k in self.signers]
                       + [f"identity {i}" for i in self.identities])
        return (f"; revoked by {who}{f' (signed by {by})' if by else ''}: "
                f"'trajledger impact {self.node}' lists what it reaches here; stop using them, "
                "and build on data that stands (train again on a dataset without it)")

    def to_json(self) -> dict[str, Any]:
        """The ``revokedBy`` of the cause's JSON item."""
        return {"logIndex": self.index, "logs": list(self.logs), "signerLog": self.signer_log,
                "signers": list(self.signers), "identities": list(self.identities)}


def revokers(ledger: LedgerHome, report: Report, policy: TrustPolicy | None) -> list[Revoker]:
    """The revoked causes of ``report`` (none when it passes), each with who revoked it: its
    signers judged under ``policy`` (None: the policy in force), what ``report`` was judged
    under."""
    if report.ok:
        return []
    from trajledger.ledger.catalog import Origins, origin_name
    from trajledger.ledger.first_contact import signer_log

    origins, state = Origins(ledger), ledger.trust_state()
    revoked = [(node, c, int(found[1])) for node, checks, _depend in report.causes()
               for c in checks if c.what == "revoked"
               and (found := re.search(r"\(log index (\d+)\)$", c.detail)) is not None
               and state.entry(int(found[1])) is not None]
    judged = _verified(ledger, policy, [i for _n, _c, i in revoked]) if revoked else {}
    out = []
    for node, c, index in revoked:
        rec, vkeys = judged[index], origins.of(index)
        signers = () if rec is None else tuple(sorted(rec.signers))
        idents = () if rec is None else tuple(sorted(
            f"{i.subject} ({i.issuer})" for i in rec.identities))
        out.append(Revoker(node.id, f"{node.label} > revoked: {c.detail}", index,
                           tuple(sorted(origin_name(v) for v in vkeys)),
                           signer_log(vkeys, signers) if vkeys and signers else None,
                           signers, idents))
    return out


def _verified(ledger: LedgerHome, policy: TrustPolicy | None,
              indices: Sequence[int]) -> dict[int, Record | None]:
    """The revocation records at ``indices`` as they verify under ``policy`` (None: the
    policy in force): a `Record` (its verified keys and identities), else None."""
    from trajledger.ledger.evidence import ledger_evidence
    from trajledger.ledger.policy_state import current_policy
    from trajledger.verify.judge import Record
    from trajledger.verify.lineage import LineageVerifier

    if policy is None:
        found = current_policy(ledger)
        if found is None:
            return dict.fromkeys(indices)
        policy = found[1]
    verifier = LineageVerifier(ledger_evidence(ledger), policy, index=ledger.trust_state(),
                               data="size")
    try:
        return {i: r if isinstance(r := verifier.record(i), Record) else None
                for i in indices}
    finally:
        verifier.close()


def more(found: Sequence[Revoker]) -> dict[str, str]:
    """What follows each revoked cause's line, by the line's start (`report_raise`'s ``more``)."""
    return {r.start: r.words() for r in found}


def with_words(lines: Sequence[str], found: Sequence[Revoker]) -> list[str]:
    """``lines`` (a report's failures), each revoked cause's with its revoker's words."""
    starts = more(found)
    return [line + next((m for s, m in starts.items() if line.startswith(s)), "")
            for line in lines]


def with_json(doc: Mapping[str, Any], found: Sequence[Revoker]) -> dict[str, Any]:
    """A report's JSON (``doc``) with each revoked cause's ``revokedBy``."""
    by = {r.node: r.to_json() for r in found}
    out = dict(doc)
    if by and isinstance(doc.get("causes"), list):
        out["causes"] = [c | {"revokedBy": by[c["node"]]} if c.get("node") in by else c
                         for c in doc["causes"]]
    return out
