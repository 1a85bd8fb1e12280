"""The admission gate: a dataset is trained on only when every rule holds for every batch.

Scope: DESIGN §6. For a dataset and a trust policy, check that every member batch

1. has bytes that hash to its digests (read once from the store, kept in memory, and handed to
   the trainer: nothing is read again between the check and the use);
2. carries a valid producer signature (the policy's producer threshold);
3. is included in the log under a checkpoint signed by the policy's log key and consistent with
   the newest checkpoint this user has seen (no fork, no rollback: the user's trust state,
   outside the ledger, `trajledger.ledger.trust_state`);
4. is approved, with the dataset, by ``threshold`` approvers for the purpose, unexpired;
5. is not revoked or erased (a revocation or erasure whose envelope is missing or damaged
   refuses too: fail closed);
6. is not in a holdout or regression split (the dataset's own split is train, and no other
   signed dataset puts the batch in holdout or regression);
7. passes schema validation.

Every failed check is reported and then the gate refuses with `DataRefusedError` carrying the
report (the same graph `trajledger verify` shows, with an ``admission`` node): a refusal is an
exception, never a boolean.
Non-scope: training (``runner.train``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trajledger.verify.errors import PolicyError, ProvenanceError
from trajledger.verify.lineage import (
    INFO,
    OK,
    Edge,
    LineageVerifier,
    Node,
    Record,
    RecordFailure,
    Report,
)
from trajledger.verify.policy import TrustPolicy
from trajledger.verify.predicates import Dataset, Erasure, RolloutBatch

if TYPE_CHECKING:
    import pyarrow as pa

    from trajledger.ledger.home import LedgerHome
    from trajledger.verify.contamination_rules import ContaminationRules

__all__ = [
    "Admission",
    "AdmittedBatch",
    "DataRefusedError",
    "Dependency",
    "admit",
    "refuse_erased",
]


class DataRefusedError(PolicyError):
    """The runner refused data. ``report`` is the verified graph; the message lists failures."""

    def __init__(self, message: str, report: Report) -> None:
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class AdmittedBatch:
    """One admitted batch: its digest, log index, the verified tables and predicate.

    ``files`` holds the verified bytes of each of the batch's files by manifest path (the bytes
    the tables were parsed from), for the runs that hand files rather than tables to the
    trainer (`runner.workdir`).
    """

    digest: str
    index: int
    steps: pa.Table
    episodes: pa.Table
    predicate: RolloutBatch
    files: Mapping[str, bytes] = field(default_factory=dict)

    def __repr__(self) -> str:
        """The batch by digest, index and sizes: not its tables or bytes (out51: a printed
        `TrainOutcome` held every file of every batch, hundreds of kilobytes of Parquet)."""
        return (f"AdmittedBatch(digest={self.digest!r}, index={self.index}, "
                f"steps=<{self.steps.num_rows} rows>, episodes=<{self.episodes.num_rows} rows>, "
                f"files={ {p: f'<{len(b)} bytes>' for p, b in self.files.items()} })")


@dataclass(frozen=True)
class Dependency:
    """A verified artifact the admitted data depends on (an environment or an evaluator)."""

    role: str
    name: str
    digest: str
    index: int


@dataclass(frozen=True)
class Admission:
    """What the gate admitted: the dataset record and each batch's verified data."""

    dataset: str
    dataset_index: int
    name: str
    version: str
    purpose: str
    policy: TrustPolicy = field(repr=False)
    report: Report = field(repr=False)
    batches: tuple[AdmittedBatch, ...]
    predicate: Dataset = field(repr=False)
    dependencies: tuple[Dependency, ...] = field(default_factory=tuple)


def admit(
    ledger: LedgerHome,
    dataset_ref: str,
    policy: TrustPolicy,
    *,
    purpose: str | None = None,
    now: dt.datetime | None = None,
) -> Admission:
    """Check a dataset against every rule; return its verified data or refuse.

    Steps:
        1. Resolve the dataset (confirmed from the log) and bring the user's trust state up to
           the log's signed checkpoint (a rollback or fork raises `TamperError`); build the
           lineage verifier over the ledger with that state as its index.
        2. Verify the dataset and each batch (records, producer signatures, inclusion,
           revocations, files re-hashed, environment and evaluator).
        3. Check the rules of training on it now: train split, no batch in a holdout or
           regression dataset, approvals by the threshold for the purpose, unexpired.
        4. Refuse erased data: the dataset or a batch with a verified erasure record.
        5. Read each batch's files once, check their digests, and validate their schema.
        6. Contamination: no episode exactly duplicates one of a holdout or regression dataset
           (near duplicates are reported, not refused), from verified bytes only.
        7. Refuse with every failure, or return the verified tables.

    Args:
        ledger: the open ledger.
        dataset_ref: ``NAME@VERSION``, a digest or a digest prefix.
        policy: the trust policy to apply.
        purpose: the purpose approvals must name (default the dataset's own purpose).
        now: the time approvals are judged at (default: now); no earlier than the floor
            `runner.verification.ledger_verifier` sets (the log's last entry, the newest
            time the user's state was used at): a time behind it is judged as of the floor.

    Raises:
        DataRefusedError: any rule fails (the report lists all of them).
        RefError: the dataset reference resolves to nothing.
        TamperError: the log was rolled back or forked since this user last saw it.
    """
    from trajledger.ledger.catalog import Catalog, named_report, qualified_ref

    from .verification import ledger_verifier

    # (1)
    item = Catalog(ledger).resolve(dataset_ref, {"dataset"})
    ref = qualified_ref(ledger, item)  # (an imported one after a clash: out50)
    verifier = ledger_verifier(ledger, policy)
    # Batch blobs are hashed below as they are read into memory for training (the bytes used
    # are the bytes hashed); the verifier re-hashes every other file of the lineage.
    verifier.caller_hashes = frozenset({"rollout-batch"})
    if now is not None:  # later only: never behind `ledger_verifier`'s floor (review left27)
        verifier.now = max(verifier.now, now)
    decision = Node(f"admission:{item.digest}", "admission",
                    name=f"admission of dataset {ref} ({item.digest[:19]}…)")
    # A walk that raises (Ctrl-C) must stop the blobs still being re-hashed.
    try:
        # (2)
        ds_node = verifier.artifact(item.digest, "dataset")
        verifier.decision(decision, [Edge(decision.id, item.digest, "dataset")])
        rec = verifier.identity_record(item.digest, "dataset")
        batches: list[AdmittedBatch] = []
        deps: dict[str, Dependency] = {}
        want_purpose = purpose or "train"
        if isinstance(rec, Record) and isinstance(rec.predicate, Dataset):
            ds = rec.predicate
            want_purpose = purpose or ds.purpose
            # (3)
            verifier.dataset_use(decision, item.digest, None, purpose=want_purpose)
            # (4)
            refuse_erased(verifier, decision, ds_node)
            for b in ds.batches:
                batch_node = verifier.artifact(b, "rollout-batch")
                if refuse_erased(verifier, decision, batch_node):
                    continue
                # (5)
                batch = _read_batch(verifier, b, decision, batch_node.label)
                if batch is not None:
                    batches.append(batch)
                    _dependencies(verifier, batch, deps)
            # (6)
            _contamination(ledger, verifier, decision, batches, f"train {item.ref}",
                           policy.contamination)
        else:
            decision.fail("dataset", "the dataset record does not verify (see the dataset node)")
        verifier.finish()
    finally:
        verifier.close()
    report = verifier.report(item.digest, ["log", decision.id])
    # (7)
    if not report.ok or not isinstance(rec, Record) or not isinstance(rec.predicate, Dataset):
        from trajledger.ledger.catalog import command_ref
        from trajledger.verify.report import HIDDEN

        # the approvals line of this dataset, known by its start (the decision's label, the
        # check's name, the dataset named plainly or, after a clash, as `named_report` names it:
        # out50), not by words anywhere in a line (signed text: a licence, a reason); the step
        # names it as commands find it (after a clash: rev48 finding 4; a name that finds
        # another record: finding 9); no approval admits revoked or erased data: then no
        # approve is suggested (out50)
        starts = tuple(f"{decision.label} > dataset {shown}: approvals: ".translate(HIDDEN)
                       for shown in dict.fromkeys((ref, f"{item.name}@{item.version}")))
        ended = any(c.status == "fail" and (c.what == "revoked" or c.what.endswith(": erased"))
                    for n in report.nodes.values() for c in n.checks)  # (a label ends "…)")
        from .revokers import revokers, with_words

        step, named = command_ref(ledger, item), named_report(ledger, report)
        failures = with_words([line if ended else _approve_hint(ledger, policy, line, starts,
                                                                step)
                               for line in named.failures()],
                              revokers(ledger, named, policy))  # who revoked it (out57)
        raise DataRefusedError(
            f"dataset {ref}: refused, {len(failures)} problem(s)\n" + "\n".join(failures),
            report,
        )
    return Admission(
        item.digest,
        rec.index,
        item.name,
        item.version,
        want_purpose,
        policy,
        report,
        tuple(batches),
        rec.predicate,
        tuple(deps.values()),
    )


def _approve_hint(ledger: LedgerHome, policy: TrustPolicy, line: str,
                  starts: tuple[str, ...], ref: str) -> str:
    """``line``, and when it is the admitted dataset's approvals short of the threshold (it
    begins with one of ``starts``: `verify.judge`), what to do (out46): approve ``ref`` (its name as
    commands find it, one shell word: rev48) with as many more approver keys, naming the
    policy's approver keys this ledger holds."""
    import re

    from trajledger.verify.nodes import NAMED
    from trajledger.verify.shell_word import shell_word

    start = next((s for s in starts if line.startswith(s)), None)
    found = None if start is None else re.match(
        r"(\d+) of (\d+) required approver\(s\) for '([^']*)'", line.removeprefix(start))
    if found is None:
        return line
    have, need, purpose = found.groups()
    mine = [k.name + ("" if k.private else " (its public half only: its holder signs)")
            for k in ledger.keys.list() if policy.holds("approver", k.keyid)]  # (out48)
    more = int(need) - int(have)
    return (f"{line}: approve it with {more if more > 0 else 'another'} more approver key"
            f"{'s' if more > 1 else ''} ('trajledger approve {shell_word(ref, NAMED)} --key NAME"
            f"{'' if purpose == 'train' else f' --purpose {shell_word(purpose)}'}'; the "
            f"policy's approver keys here: {', '.join(mine) or 'none (ask its approvers)'}; "
            "each key counts once), then run this again")


def _erased(verifier: LineageVerifier, batch: str) -> str | None:
    """Who erased ``batch`` by a verified erasure: "approver", "producer" or None. A producer
    may erase what it produced, but a held-out batch is the approvers' test set: its producer
    alone must not be able to end the comparison (and then train on copies of it)."""
    found = None
    for i in verifier.records(batch, "erasure"):
        rec = verifier.record(i)
        if isinstance(rec, Record):
            approver = verifier.policy.policy_at(rec.index).role("approver")
            if rec.signers & approver.keyids or rec.identities & set(approver.identities):
                return "approver"
            found = "producer"
    return found


def _unverified_way_on(verifier: LineageVerifier, failure: RecordFailure, batch: str,
                       held: list[str]) -> str:
    """Why a held-out batch whose record does not verify cannot be checked, and the way on.

    Sealed (its record read without trusting its signer, as `verify.distrusted` reads a
    holdout's): what it publishes to compare with cannot be trusted (hist32 finding 1). Not
    sealed, and its bytes not here (history 234: the vendor erased it, then the buyer's marking
    made the erasure and the batch's record count for nothing): nothing the policy trusts says
    why they are gone, and no bundle of the batch imports under it. Either way only an
    approver's erasure of the batch ends the comparison (the holdout's revocation or erasure
    does not: no record ends a holdout)."""
    from trajledger.verify.log_index import read_record

    entry = verifier.entry(failure.index)
    try:
        pred = None if entry is None else read_record(
            entry, verifier.evidence.blob(entry.envelope), f"log entry {failure.index}")[1]
    except ProvenanceError:
        pred = None
    erase = (f"an approver's erasure of it ends the comparison (trajledger erase {batch} "
             "--key APPROVER --reason REASON)")
    if not isinstance(pred, RolloutBatch) or pred.sealed is not None:
        return f"so what a sealed batch publishes to compare with cannot be trusted; {erase}"
    return (f"so nothing this policy trusts says why its bytes are gone (an erasure signed by "
            f"a key it no longer trusts, say) and no import of them verifies under it; held out "
            f"by {' and '.join(held)}: {erase}; revoking or erasing the holdout does not")


def _contamination(
    ledger: LedgerHome,
    verifier: LineageVerifier,
    decision: Node,
    batches: list[AdmittedBatch],
    label: str,
    rules: ContaminationRules | None,
) -> None:
    """Exact duplicates of held-out episodes fail (byte for byte, or once their text is
    normalised); near duplicates are information, or fail too when the policy's
    ``[contamination]`` (``rules``) says ``refuse = "near"`` (at its thresholds).

    Read from verified bytes only, never from the audit index (editing the index cannot hide a
    duplicate): the admitted batches' tables (the bytes the gate hashed), and every holdout or
    regression batch of a verified dataset record, re-hashed as it is read. A held-out batch
    that cannot be read and verified fails the check: contamination cannot be ruled out. So
    does a dataset record whose evidence is damaged (its envelope missing or not hashing to
    its entry): its split is unknown, and it may be a holdout. A held-out record that is intact
    but not trusted by the policy is a holdout all the same (fail closed,
    `verify.distrusted`): its batches are compared, and a failure names it and why.
    """
    from trajledger.ledger.contamination import ruled, verified_contamination
    from trajledger.verify.distrusted import distrusted_holdout

    what = "no episode duplicates a holdout or regression episode"
    if rules is not None and rules.unreadable:  # a threshold no one wrote: fail closed (left34)
        decision.fail(what, rules.refused())
    admitted = {b.digest for b in batches}
    others: dict[str, list[str]] = {}
    damaged: list[str] = []
    distrusted: dict[int, tuple[Dataset, str]] = {}  # (hist34 finding 1; hold35: fail closed)
    # The index's held-out datasets, and every dataset record whose envelope it could not read
    # (its split is unknown): each verified here.
    index = verifier.index
    unread = [i for i in index.unreadable() if (e := index.entry(i)) and e.kind == "dataset"]
    holdouts = set(index.held_out())
    for i in sorted({*holdouts, *unread}):
        rec = verifier.record(i)
        ds = rec.predicate if isinstance(rec, Record) else None
        if isinstance(rec, RecordFailure) and rec.damaged:
            damaged.append(rec.message)
        elif isinstance(rec, RecordFailure) and i in holdouts:
            # Intact but distrusted (its signer's key declared compromised since before it,
            # say: hist34): a holdout all the same, read without trusting its signer.
            ds = distrusted_holdout(verifier, i)
            if ds is not None:
                distrusted[i] = (ds, rec.message)
        if not isinstance(ds, Dataset) or ds.split not in ("holdout", "regression"):
            continue
        for b in ds.batches:
            if b not in admitted:
                others.setdefault(b, []).append(f"{ds.split} {ds.name}@{ds.version}")
    for message in damaged:
        decision.fail(what, f"cannot be checked: a dataset record is damaged: {message}")
    # A sealed held-out batch is compared by the fingerprints its verified record publishes:
    # the gate needs no key to its bytes (nor do they go with an erasure of its blobs).
    sealed, untrusted = {}, {}
    for b in others:
        found = verifier.identity_record(b, "rollout-batch")
        if (isinstance(found, Record) and isinstance(found.predicate, RolloutBatch)
                and found.predicate.sealed is not None):
            sealed[b] = found.predicate.sealed
        elif isinstance(found, RecordFailure):  # its bytes are compared, if it has any here
            untrusted[b[:19]] = (found.message, _unverified_way_on(verifier, found, b, others[b]))
    # A held-out batch an approver erased (consent withdrawn, say) has no data left to compare
    # with, nor to evaluate on: it is said, not failed; failing it refused every train set of
    # the ledger for good (agree24). Its producer's erasure alone still fails the check.
    erased = {b: who for b in others if b not in sealed and (who := _erased(verifier, b))}
    for b in [b for b, who in erased.items() if who == "approver"]:
        decision.add(what, INFO, f"{' and '.join(others.pop(b))} batch {b[:19]}… is erased "
                     "by an approver: nothing of it to compare with")
    for b in [b for b, who in erased.items() if who == "producer"]:
        decision.add(what, INFO, f"held-out batch {b[:19]}… was erased by its producer only: "
                     "it must still be compared; an approver's erasure of it ends that")
    if not others or not batches:
        if not damaged:
            decision.add(what, OK, "no holdout or regression data to compare with")
        return
    refuse_near = rules is not None and rules.refuse == "near"
    report = verified_contamination(
        ledger.store,
        {b.digest: b.steps for b in batches},
        others,
        train_labels={b.digest: [label] for b in batches},
        sealed=sealed,
        thresholds=rules.thresholds() if rules is not None else None,
    )
    for line in report.unchecked:
        # A sealed batch whose record does not verify (its signer's key declared compromised,
        # say: hist32) has only ciphertext here, and fingerprints no one can trust: say so.
        bad = next((m for b, m in untrusted.items() if f" {b}…: " in line), None)
        decision.fail(what, f"cannot be checked: {line}" + (
            "" if bad is None else f"; its record does not verify ({bad[0]}), {bad[1]}"))
    # A batch in both splits is reported by the split rule; here, only episodes that reached
    # the other side in another batch.
    findings = ruled(report.findings, rules)
    exact = [f for f in findings if f.train_batch != f.other_batch
             and (f.kind == "exact" or refuse_near)]
    for f in exact[:20]:
        decision.fail(what, f"{f.kind} duplicate: {f}")
    if len(exact) > 20:
        decision.fail(what, f"... and {len(exact) - 20} more duplicates")
    # A holdout no one trusted that refuses this train set is named, with why and the way on.
    hit = {f.other_batch for f in exact} | {
        b for b in others if any(f" {b[:19]}…: " in line for line in report.unchecked)}
    for i, (ds, why) in distrusted.items():
        line = (f"{ds.split} dataset {ds.name}@{ds.version} (log index {i}) does not verify "
                f"({why}): taken as a holdout all the same (fail closed: what no one trusted "
                "declared held out may be a test set), its batches compared with")
        if hit & set(ds.batches):
            decision.fail(what, line + "; leave the copies out of the train set, or an "
                          "approver's erasure of the held-out batch (trajledger erase) ends the "
                          "comparison with it")
        else:
            decision.add(what, INFO, line)
    near = [f for f in findings if f.kind != "exact"]
    if near and not refuse_near:
        decision.add(what, INFO, f"{len(near)} near duplicate(s) (first: {near[0]})")
    if not exact and not report.unchecked and not damaged:
        held, mine = report.episodes
        decision.add(what, OK, f"0 exact, {len(near)} near duplicate(s) among {held} held-out "
                     f"and {mine} admitted episodes (re-hashed data, not the audit index)")


def refuse_erased(verifier: LineageVerifier, decision: Node, node: Node) -> bool:
    """Erased data is never trained on: refuse the dataset or batch a verified erasure names."""
    for i in verifier.records(node.id, "erasure"):
        r = verifier.record(i)
        if isinstance(r, Record) and isinstance(r.predicate, Erasure):
            decision.fail(f"{node.label}: erased",
                          f"{r.predicate.reason} (log index {r.index}): erased data is never "
                          "trained on")
            return True
    return False


def _dependencies(
    verifier: LineageVerifier, batch: AdmittedBatch, out: dict[str, Dependency]
) -> None:
    refs = [("environment", batch.predicate.environment)]
    if batch.predicate.evaluator is not None:
        refs.append(("evaluator", batch.predicate.evaluator))
    for role, ref in refs:
        if ref.digest in out:
            continue
        rec = verifier.identity_record(ref.digest, role)
        if not isinstance(rec, Record):
            continue
        node = verifier.artifact(ref.digest, role)
        out[ref.digest] = Dependency(role, f"{node.name}@{node.version}", ref.digest, rec.index)


def _read_batch(
    verifier: LineageVerifier, digest: str, decision: Node, label: str
) -> AdmittedBatch | None:
    """Read a batch's files once, verify their digests, validate their schema.

    The returned tables are parsed from the very bytes that were hashed: the trainer gets
    these, and the store is not read again.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trajledger.ledger.rollouts import validate_episodes, validate_steps
    from trajledger.ledger.rollouts.chunks import StepLimitError, max_steps
    from trajledger.ledger.rollouts.parquet_read import read_parquet, stated_steps
    from trajledger.verify.digest import digest_bytes
    from trajledger.verify.manifest import Manifest
    from trajledger.verify.strict_json import load_object

    rec = verifier.identity_record(digest, "rollout-batch")
    if not isinstance(rec, Record) or not isinstance(rec.predicate, RolloutBatch):
        return None  # the artifact node already says why
    if rec.predicate.sealed is not None:
        decision.fail(f"{label}: sealed", "the batch is stored encrypted for evaluators (a "
                      "sealed suite): held-out data is never trained on")
        return None
    raw = verifier.evidence.blob(digest)
    if raw is None or digest_bytes(raw) != digest:
        return None  # the artifact's "files" check already says why
    try:
        manifest = Manifest.from_json(load_object(raw, "manifest"))
    except ProvenanceError:
        return None
    data: dict[str, bytes] = {}
    for f in manifest.files:
        blob = verifier.evidence.blob(f.digest)
        if blob is None:
            # A lost blob fails the batch node; one a verified erasure lists only notes it
            # there ("erased"), whatever that erasure's subject: refused here, never skipped.
            if (by := verifier.erased_blob(f.digest)) is not None:
                assert isinstance(by.predicate, Erasure)
                decision.fail(f"{label} > {f.path}",
                              f"erased: deleted by the erasure of {by.entry.subject[:19]}… "
                              f"({by.predicate.reason}, log index {by.index}): erased data is "
                              "never trained on")
            continue
        got = digest_bytes(blob)
        if len(blob) != f.size:
            decision.fail(f"{label} > {f.path}",
                          f"tampered: {len(blob)} bytes, want {f.size} (blob {f.digest[:19]}…)")
            continue
        if got != f.digest:
            decision.fail(f"{label} > {f.path}",
                          f"tampered: content hashes to {got[:19]}…, want {f.digest[:19]}…")
            continue
        data[f.path] = blob
    if len(data) != len(manifest.files):
        return None
    missing = [p for p in ("steps.parquet", "episodes.parquet") if p not in data]
    if missing:
        decision.fail(f"{label}: schema", f"the batch has no {' and no '.join(missing)}")
        return None
    try:  # the buyer's bound, from the footer, before any step is decoded (rev45 finding 2)
        footer = pq.read_metadata(pa.BufferReader(data["steps.parquet"]))
        rows = stated_steps(footer)
        limit = max_steps()
    except StepLimitError as e:
        decision.fail(f"{label}: schema", str(e))
        return None
    except (OSError, ValueError, pa.ArrowException) as e:
        decision.fail(f"{label}: schema", f"not readable Parquet: {e}")
        return None
    if rows > limit:
        decision.fail(f"{label}: schema", (
            f"steps.parquet holds {rows:,} steps, more than the {limit:,} a batch may here "
            "(TRAJLEDGER_MAX_STEPS), refused before reading them: set TRAJLEDGER_MAX_STEPS to "
            "the steps it holds to admit it whole"))
        return None
    try:  # (the episodes' rows held to the limit too: rev46 finding 2)
        steps = read_parquet(data["steps.parquet"], name="steps.parquet", metadata=footer)
        episodes = read_parquet(data["episodes.parquet"], name="episodes.parquet")
    except StepLimitError as e:
        decision.fail(f"{label}: schema", str(e))
        return None
    except (OSError, ValueError, pa.ArrowException) as e:
        decision.fail(f"{label}: schema", f"not readable Parquet: {e}")
        return None
    steps_report = validate_steps(steps, subject="steps.parquet")
    # Episodes are compared with their steps only when the steps are valid (the comparison
    # derives episodes from the steps).
    reports = [
        steps_report,
        validate_episodes(
            episodes, steps=steps if steps_report.ok else None, subject="episodes.parquet"
        ),
    ]
    problems = [f"{r.subject}: {p}" for r in reports for p in r.problems]
    if problems:
        more = f"; ... {len(problems) - 5} more" if len(problems) > 5 else ""
        decision.fail(f"{label}: schema", "; ".join(problems[:5]) + more)
        return None
    decision.add(
        f"{label}: data",
        OK,
        f"{steps.num_rows} steps, {episodes.num_rows} episodes; bytes re-hashed as read, "
        "schema valid, held in memory for training",
    )
    return AdmittedBatch(digest, rec.index, steps, episodes, rec.predicate, data)
