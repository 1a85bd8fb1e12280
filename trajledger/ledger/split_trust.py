"""Why a dataset record that `dataset create` refuses to share a batch with is, or is not,
trusted here (hold35's Left, twenty-first round left36).

Scope: `untrusted_note`, on `artifacts.create_dataset`'s refusal paths only (step 2: a batch
already in a dataset of another split; step 4, `held_notes`: episodes that copy episodes of the
other split's batches, each batch mapped to the dataset records listing it: left38). The
refusal itself reads the trust state's index (which lists every dataset, trusted or not: its
checks only add refusals, hold32's design) and stays as it is; this says when the other
dataset's record does not verify under the policy in force, why, and that it counts all the
same, as ``admit`` and the verifiers say of a distrusted holdout (``verify.distrusted``).
Nothing here runs when the dataset is recorded.
Non-scope: the refusal (``ledger.artifacts``), judging records (``verify.judge``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .home import LedgerHome

__all__ = ["held_notes", "untrusted_note"]


def untrusted_note(ledger: LedgerHome, index: int, split: str) -> str:
    """``"; its record is not trusted here (why): …"`` for the dataset record at ``index`` (of
    ``split``) when it does not verify under the policy in force, or is damaged; ``""`` when it
    verifies, or no policy is recorded (nothing to judge it by)."""
    from trajledger.verify.judge import RecordFailure
    from trajledger.verify.lineage import LineageVerifier
    from trajledger.verify.predicates import HELD_OUT

    from .evidence import ledger_evidence
    from .policy_state import current_policy

    found = current_policy(ledger)
    if found is None:
        return ""
    verifier = LineageVerifier(ledger_evidence(ledger), found[1], index=ledger.trust_state(),
                               data="size")
    try:
        rec = verifier.record(index)
    finally:
        verifier.close()
    if not isinstance(rec, RecordFailure):
        return ""
    state = "damaged" if rec.damaged else "not trusted here"
    held = ("held out all the same (fail closed: what no one trusted declared held out may be a "
            "test set)") if split in HELD_OUT else (
            "its split counts all the same (fail closed: no batch is in two splits, whoever "
            "recorded the other)")
    return f"; its record (log index {index}) is {state} ({rec.message}): {held}"


def held_notes(ledger: LedgerHome, split: str, batches: Collection[str]) -> str:
    """`untrusted_note` of each dataset record of a split other than ``split`` that lists one
    of ``batches`` (the other split's batches a contamination refusal names, whose findings
    name batches, not the dataset records that hold them out: left37's Left), one
    ``"; dataset NAME@VERSION (sha256:…); its record … is not trusted here …"`` each; ``""``
    when each is trusted."""
    from trajledger.verify.kinds import name_version

    from .home import envelope_statement

    state, out, seen = ledger.trust_state(), [], set()
    for batch in sorted(batches):
        for i in state.listing(batch):
            entry = state.entry(i)
            if i in seen or entry is None or entry.kind != "dataset":
                continue
            seen.add(i)
            statement = envelope_statement(ledger, entry.envelope)
            other = str(statement.predicate.get("split")) if statement is not None else ""
            if other == split:
                continue
            note = untrusted_note(ledger, i, other)
            if note and statement is not None:
                name, version = name_version("dataset", statement)
                out.append(f"; {other} dataset {name}@{version} ({entry.subject[:19]}…){note}")
    return "".join(out)
