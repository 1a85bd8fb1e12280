"""Is an evaluation's suite made of the checkpoint's training data? (evalc46; seal46 finding 4)

Scope: `check_suite`, for ``eval`` once it holds the suite's plain steps (a sealed suite's
opened by the evaluator): every suite episode against every train batch of the checkpoint's
lineage (the datasets it and its base checkpoints were trained on), with
`ledger.contamination.verified_contamination` (the matcher and thresholds of the admission
gate; the train batches re-hashed from the store; the suite as `ledger.suites.read_suite`
verified it, compared as plain data, by its runs of steps too, sealed or not) under the
policy's ``[contamination]`` as ``dataset create`` applies it (`ruled`, `refusal`): what
``dataset create`` would refuse is refused with its words, what it would only warn of is a
``WARNING``. What was checked goes into the evaluation's configuration
(`SuiteCheck.descriptor`), signed by the evaluator with its results: ``release`` and a third
party read there that it was checked, and by what rule (the plain steps a sealed suite's
check needs are the evaluator's alone).

Non-scope: a suite that holds one of the train batches themselves (`verify.releases.
trained_on_suite` refuses it before anything is read); releases.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from trajledger.verify.errors import VerificationError
from trajledger.verify.predicates import ResourceDescriptor

if TYPE_CHECKING:
    from trajledger.ledger.catalog import CatalogItem
    from trajledger.ledger.home import LedgerHome
    from trajledger.ledger.suites import SuiteBatch
    from trajledger.verify.contamination_rules import ContaminationRules
    from trajledger.verify.policy import TrustPolicy

__all__ = ["CONTAMINATION_CHECK", "SuiteCheck", "check_suite", "training_batches",
           "unlisted_batches"]

CONTAMINATION_CHECK: Final = "https://trajledger.dev/check/suite-contamination/v1"
"""The ``uri`` of the evaluation's ``contamination`` configuration entry."""


@dataclass(frozen=True)
class SuiteCheck:
    """What `check_suite` compared and found (nothing refused: it raised).

    Attributes:
        train_batches: how many train batches of the lineage were to be compared.
        episodes: suite and train episodes compared.
        near: near duplicates found (warned of).
        unchecked: one line per train batch that could not be read and verified (erased, or
            imported without its data): not compared, said.
        unchecked_batches: those batches' digests (the entry's ``uncheckedBatches``, which a
            release names: rel48).
        rules: the ``[contamination]`` applied.
    """

    train_batches: int
    episodes: tuple[int, int]
    near: int
    unchecked: tuple[str, ...]
    rules: ContaminationRules
    unchecked_batches: tuple[str, ...] = ()

    def descriptor(self) -> ResourceDescriptor:
        """The evaluation's ``contamination`` configuration entry."""
        return ResourceDescriptor(name="contamination", uri=CONTAMINATION_CHECK, annotations={
            "role": "contamination-check", "trainBatches": self.train_batches,
            "suiteEpisodes": self.episodes[0], "trainEpisodes": self.episodes[1],
            "exact": 0, "near": self.near, "unchecked": len(self.unchecked),
            "refuse": self.rules.refuse, "runs": self.rules.runs,
        } | ({"uncheckedBatches": sorted(self.unchecked_batches)} if self.unchecked_batches
             else {}))


def training_batches(verifier: Any, checkpoint: str) -> dict[str, list[str]]:
    """Train batch digest -> labels (``train NAME@VERSION``) of the verified datasets the
    checkpoint and its base checkpoints were trained on (its lineage, walked already): what a
    release names as unchecked too (`verify.releases.train_batches`)."""
    from trajledger.verify.releases import train_batches

    return train_batches(verifier, checkpoint)


def check_suite(
    ledger: LedgerHome, verifier: Any, policy: TrustPolicy, ck: CatalogItem,
    suite: CatalogItem, label: str, batches: Sequence[SuiteBatch], unsealing: int | None,
) -> SuiteCheck:
    """Compare the suite's episodes (``batches``, as read) with the checkpoint's training
    data (see the module doc); ``label``: the suite's (``holdout NAME@VERSION``);
    ``unsealing``: the log index of the suite's unsealing record.

    Raises:
        VerificationError: ``dataset create`` would refuse the suite beside that training
            data (exact duplicates; near ones too under ``refuse = "near"``).
    """
    from trajledger.ledger.contamination import refusal, ruled, verified_contamination
    from trajledger.ledger.rollouts.parquet_read import read_parquet
    from trajledger.verify.contamination_rules import ContaminationRules

    rules = policy.contamination or ContaminationRules()
    if rules.unreadable:  # a threshold no one wrote: fail closed, as dataset create (left34)
        raise VerificationError(f"evaluation of {ck.ref} on {suite.ref}: {rules.refused()}")
    held = {b.digest for b in batches}
    train = {b: labels for b, labels in training_batches(verifier, ck.digest).items()
             if b not in held}
    if not train or not batches:
        return SuiteCheck(len(train), (0, 0), 0, (), rules)
    report = verified_contamination(
        ledger.store, dict.fromkeys(train), {d: [label] for d in held},
        train_labels=train, thresholds=rules.thresholds(),
        held_tables={b.digest: read_parquet(b.files["steps.parquet"], name=(
            f"steps.parquet of suite batch {b.digest[:19]}…")) for b in batches},
    )
    what = f"evaluation of {ck.ref} on {suite.ref}"
    findings = ruled(report.findings, rules)
    refused = refusal(what, findings, rules)
    if refused is not None:
        kept = (f" but the unsealing (log index {unsealing}), which stays logged"
                if unsealing is not None else "")
        raise VerificationError(
            f"{refused}\n{what}: the suite holds episodes {ck.ref} was trained on (of "
            f"{', '.join(sorted({x for f in findings for x in f.train_datasets}))}), so it "
            f"proves nothing of it; nothing was recorded{kept} (evaluate on a suite of other "
            "episodes; 'dataset create' refuses such a suite under this policy)")
    near = [f for f in findings if f.kind != "exact"]
    lines = [f"{what}: suite {f}" for f in near[:10]]
    lines += [f"{what}: ... and {len(near) - 10} more near duplicates"] if len(near) > 10 else []
    lines += [f"{what}: not compared with {ck.ref}'s training data: {u}"
              for u in report.unchecked]
    for line in lines:
        sys.stderr.write(f"WARNING: {line}\n")
    return SuiteCheck(len(train), report.episodes, len(near), report.unchecked, rules,
                      tuple(b for b in report.unchecked_batches if b in train))



def unlisted_batches(ledger: LedgerHome) -> list[str]:
    """The recorded rollout batches no dataset record lists, in log order: what a refused
    ``dataset create`` leaves behind (nothing records a refusal), for ``eval --suite`` of a
    name nothing holds."""
    state = ledger.trust_state()
    batches = [e.subject for i in state.of_kind("rollout-batch")
               if (e := state.entry(i)) is not None]
    listed = state.listings(set(batches))
    return [b for b in dict.fromkeys(batches) if not any(
        (e := state.entry(i)) is not None and e.kind == "dataset" for i in listed.get(b, ()))]
