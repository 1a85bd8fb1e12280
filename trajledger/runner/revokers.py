"""Who revoked a failing lineage's revoked causes, by this ledger's records of where each
revocation came from, and what to do: the words `verify`, `lineage`, `admit` and `train` put
after a revoked cause's line, and the ``revokedBy`` of its ``causes`` item in their JSON
(schemas/report.v1.md).

Not trust: the revocation counted already (the verifier judged it under the policy); this
names its origin only, from the user's index and import records, and the log whose own keys
signed it when another log relayed it (`first_contact.signer_log`, as an import names it:
``revoked by VENDOR, relayed by LAB``). out55 finding 6 put the words on `verify`'s line;
out57 carried them to the JSON and to the gate's refusals, and named the signer's log.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trajledger.ledger.home import LedgerHome
    from trajledger.verify.report import Report


@dataclass(frozen=True)
class Revoker:
    """A revoked cause of a report: its node, the log index of the revocation here, the logs
    that brought it (none: this ledger's own), the other log whose own keys signed it (a
    relay: ``signer_log``), and the keys that signed it."""

    node: str
    start: str
    index: int
    logs: tuple[str, ...]
    signer_log: str | None
    signers: tuple[str, ...]

    def words(self) -> str:
        """What follows the cause's line: who revoked it and the way on."""
        who = (f"{self.signer_log}, relayed by {', '.join(self.logs)}" if self.signer_log
               else ", ".join(self.logs) or "this ledger")
        return (f"; revoked by {who} (signed by {', '.join(k[:12] for k in self.signers)}): "
                f"'trajledger impact {self.node}' lists what it reaches here; stop using them, "
                "and build on data that stands (train again on a dataset without it)")

    def to_json(self) -> dict[str, Any]:
        """The ``revokedBy`` of the cause's JSON item."""
        return {"logIndex": self.index, "logs": list(self.logs), "signerLog": self.signer_log,
                "signers": list(self.signers)}


def revokers(ledger: LedgerHome, report: Report) -> list[Revoker]:
    """The revoked causes of ``report`` (none when it passes), each with who revoked it."""
    if report.ok:
        return []
    from trajledger.ledger.catalog import Origins, origin_name
    from trajledger.ledger.first_contact import signer_log

    out, origins, state = [], Origins(ledger), ledger.trust_state()
    for node, checks, _depend in report.causes():
        for c in checks:
            found = re.search(r"\(log index (\d+)\)$", c.detail) if c.what == "revoked" else None
            entry = state.entry(int(found[1])) if found else None
            if found is None or entry is None:
                continue
            vkeys = origins.of(int(found[1]))
            signers = tuple(sorted(entry.signers))
            out.append(Revoker(node.id, f"{node.label} > revoked: {c.detail}", int(found[1]),
                               tuple(sorted(origin_name(v) for v in vkeys)),
                               signer_log(vkeys, signers) if vkeys else None, signers))
    return out


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
