"""Withdrawn approvals: an approval a revocation of its record names no longer counts.

Scope: `withdrawn`, the approval records of an artifact less those withdrawn, for
``verify.judge.approvals`` to count. A withdrawal is a revocation record whose subject is an
approval's envelope digest (what ``trajledger approve`` prints; ``trajledger revoke`` takes
it). The rules (docs/SECURITY.md, "fourteenth round (withdraw26)"):

- **Who**: an approver of the policy in force when the withdrawal was logged, or the key that
  signed the approval; a producer's counts for nothing (`verify.retractions.authority`: it is
  shown and ignored, not failed closed: intact, it is known to say nothing that counts).
- **What**: the signed statement, not the envelope's bytes: every approval record carrying the
  same statement with a signer of the withdrawn one counts for nothing, so a replay (the same
  envelope logged again, or its signatures moved into an envelope encoded anew) does not bring
  it back. A new approval (another statement, signed anew) counts.
- **When**: as a revocation of the data it approves: whenever it was logged, the approval no
  longer counts, for a use before the withdrawal too (a checkpoint trained on it fails, as one
  trained on data revoked since: tests/e2e/test_histories_agree.py, R3 and R5).
- **Fail closed**: a withdrawal whose envelope is missing or damaged may withdraw the approval
  it names: that approval does not count.

Loaded only when an approval the walk counts has a revocation naming its record
(``verify.lineage.LineageVerifier.approvals``).
Non-scope: verifying the records (``verify.lineage``, ``verify.judge``); counting approvals
(``verify.judge.approvals``).
Spec: schemas/SPEC.md, section "Lineage verification".
"""

from __future__ import annotations

from .judge import REPAIR_HINT, Record, RecordFailure
from .predicates import Revocation
from .retractions import Walk

__all__ = ["withdrawn"]


def withdrawn(walk: Walk, found: list[Record | RecordFailure], use: int | None = None
              ) -> list[Record | RecordFailure]:
    """``found`` (the approval records of one artifact) with each withdrawn one replaced by a
    `RecordFailure` saying why it does not count; with ``use`` (the log index of the use the
    approvals are counted for), whether each withdrawal came before or after it (out44's
    Left: "was it approved when it was trained on?").

    Steps:
        1. The withdrawals of each verified approval: the revocation records about its
           envelope digest that verify (with authority); a damaged one counts as one (fail
           closed); one that is intact but not signed with authority is ignored.
        2. An approval record is withdrawn when a withdrawn one has the same statement and
           shares a signer (key or identity) with it.
    """
    # (1)
    gone: list[tuple[Record, str]] = []
    for a in found:
        if not isinstance(a, Record):
            continue
        for i in walk.records(a.entry.envelope, "revocation"):
            w = walk.record(i)
            if isinstance(w, Record):
                reason = w.predicate.reason if isinstance(w.predicate, Revocation) else ""
                when = "" if use is None else (
                    f", after the use (log index {use}): a withdrawal counts for earlier uses too"
                    if i > use else f", before the use (log index {use})")
                gone.append((a, f"withdrawn by revocation record {i} ({reason}){when}"))
            elif w.damaged:
                gone.append((a, f"revocation record {i} names it but cannot be read, so it may "
                             f"withdraw it: {w.message}; {REPAIR_HINT}"))
    # (2)
    out: list[Record | RecordFailure] = []
    for r in found:
        why = next((why for g, why in gone if isinstance(r, Record)
                    and r.statement == g.statement
                    and (r.signers & g.signers or r.identities & g.identities)), None)
        out.append(r if why is None else RecordFailure(r.index, why, False))
    return out
