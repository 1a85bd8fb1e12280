"""Verify an artifact and its whole lineage against a trust policy, as a graph.

Scope: given `Evidence` (a ledger directory or an exported bundle), a `LogIndex` over its entries
and a `TrustPolicy`, check everything an auditor must believe before trusting a checkpoint, a
dataset or a rollout batch:

- the log: the checkpoint signed by the policy's log key(s) (and cosigned by the witness
  threshold, when the policy's witness role applies to this log's origin), the hash chain, each
  record used included under the checkpoint;
- each artifact: its identity record (envelope bytes hash to the entry; signed by the role(s)
  and threshold its kind requires, `verify.kinds`; allowed predicate type; subject = artifact),
  its typed predicate, its manifest and every data blob (re-hashed, or with ``data="size"``
  compared by size only, and said so);
- terms: a rollout batch whose licence the policy does not accept (``accepted_licences``)
  fails;
- status: revocations (fail), erasures (reported as erased, not as tampering: a blob is excused
  as erased only when a verified erasure lists it). **Fail closed**: a revocation or erasure of
  the artifact, or a dataset that could hold its batches out, whose envelope is missing or
  damaged fails the artifact (it cannot be known what it says); a revocation or erasure that is
  intact but not signed under the policy is shown and ignored, a held-out dataset so signed
  still holds its batches out (`verify.distrusted`);
- relations, from the registry (`verify.kinds.Kind.dependencies`): a checkpoint's datasets (train
  split only, no member batch in a holdout or regression dataset recorded before it, approved by
  the approver threshold for the purpose before it was recorded, unexpired), environments,
  evaluators and parent; a dataset's batches; a batch's environment, evaluator and generating
  checkpoint.

The result is a DAG: one `Node` per artifact (keyed by digest), verified once however many
artifacts use it, with `Edge`s carrying the dependency's role. Rendering it as text shows each
node once and refers back ("see above"); its JSON is a node table plus an edge list
(``schemas/report.v1.md``, ``verify.report_json``). The cost is linear in nodes + edges. On
request (`verify.impact.with_records`), a report also carries the records about its artifacts
that are not nodes of it (`verify.marks.Mark`: approvals, revocations, erasures,
evaluations...), each verified as a record, for a picture of the lineage.
The work is split as python-tuf splits its updater from ``TrustedMetadataSet``: this module
walks (finds records in the index, reads envelopes and manifests from the evidence, memoises,
builds the graph); ``verify.trusted_log`` checks the log, ``verify.judge`` decides what each
record is worth from bytes alone, ``verify.blobs`` re-hashes data on a thread pool, and
``verify.report`` is the graph's form.
Non-scope: reading rollout data as tables (the runner does that on the bytes it verified); where
the index comes from (a ledger keeps it in the user's state directory).
Spec: schemas/SPEC.md, section "Lineage verification"; schemas/report.v1.md.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from .blobs import BlobHasher, DataMode, size_problem
from .digest import digest_bytes, parse_digest
from .errors import ProvenanceError, VerificationError
from .evidence import Evidence
from .judge import (
    REPAIR_HINT,
    Record,
    RecordFailure,
    approvals,
    held_out,
    judge_record,
    standing,
)
from .kinds import CHECKPOINT_ROLES, KINDS, NAMED, Dependency, name_version
from .log_entry import LogEntry
from .log_index import LogIndex
from .manifest import Manifest, check_file_subjects
from .policy import TrustPolicy
from .predicates import Dataset, Predicate, Provenance
from .report import (
    ERASED,
    INFO,
    OK,
    Direction,
    Edge,
    Node,
    Report,
)
from .report import short as _short
from .statement import Statement
from .times import parse_time
from .trusted_log import TrustedLog

__all__ = [
    "ERASED",
    "INFO",
    "OK",
    "DataMode",
    "Direction",
    "Edge",
    "LineageVerifier",
    "Node",
    "Record",
    "RecordFailure",
    "Report",
    "name_files",
]


T = TypeVar("T")


class LineageVerifier:
    """Verifies artifacts and their lineage from one evidence source under one policy.

    Build it once per evidence source: the log is checked on construction (`TrustedLog`);
    then `verify`, `artifact` (and `verify.impact.impact`) may be called for several digests.
    Every record and artifact is verified once (memoised); data blobs are re-hashed by the
    blob checker (a thread pool, `BlobHasher`) while signatures are checked, and `finish`
    (called by `verify` and `run`) collects the results.
    """

    def __init__(
        self,
        evidence: Evidence,
        policy: TrustPolicy,
        *,
        index: LogIndex | None = None,
        now: dt.datetime | None = None,
        data: str = DataMode.HASH,
        blobs: BlobHasher | None = None,
    ) -> None:
        """Check the log (`TrustedLog`).

        Args:
            evidence: where to read.
            policy: the trust policy to apply.
            index: a complete index of the entries (trajledger passes the one it keeps in
                the user's state directory); default: built from ``evidence``.
            now: the time approvals are judged at when no consuming record fixes one.
            data: a `DataMode`: ``"hash"`` re-hashes every data blob; ``"size"`` compares
                sizes with the manifest only (and every report line says so).
            blobs: the blob checker that re-hashes data (default: one over ``evidence``).
        """
        if data not in set(DataMode):
            raise ValueError(f"data must be 'hash' or 'size', not {data!r}")
        self.evidence = evidence
        self.policy = policy
        self.now = now or dt.datetime.now(dt.UTC)
        self.data = DataMode(data)
        self.caller_hashes: frozenset[str] = frozenset()
        """Kinds whose data blobs the caller hashes itself as it reads them (the runner, for
        the batches it trains on): the verifier compares their sizes only."""
        self.trusted = TrustedLog(evidence, policy, index)
        self.log = self.trusted.log
        self.checkpoint = self.trusted.checkpoint
        self.index: LogIndex = self.trusted.index  # (the index records are looked up in)
        self.used = self.trusted.used
        """Indices of the log entries the verification relied on (an export bundles these)."""
        self.blobs = blobs if blobs is not None else BlobHasher(evidence)
        self._records: dict[int, Record | RecordFailure] = {}
        self._entries: dict[int, LogEntry | None] = {}
        self._raw: dict[int, bytes] = {}
        self._about: dict[str, list[tuple[int, str]]] = {}
        self._nodes: dict[str, Node] = {}
        self._edges: dict[str, list[Edge]] = {}
        self._walking: set[str] = set()  # (the artifacts being followed: a loop comes back)
        self._deps: dict[str, list[Dependency]] = {}
        self._erased_blobs: dict[str, Record | None] = {}
        self.chosen: dict[str, int] = {}  # (by digest: a record a name chose, `verify.claims`)

    def check_known_checkpoint(self, note: bytes, what: str = "checkpoint seen before") -> None:
        """`verify.consistency.check_known_checkpoint`: the log extends a checkpoint seen
        earlier."""
        from .consistency import check_known_checkpoint  # loaded only with one seen before

        check_known_checkpoint(self.trusted, note, what)

    def included(self, index: int) -> str | None:
        """None when entry ``index`` is included under the verified checkpoint; else why not."""
        return self.trusted.included(index)

    # -- records ---------------------------------------------------------------------------------

    def entry(self, index: int) -> LogEntry | None:
        """The index's entry at ``index``, parsed once per verifier (it asks many times)."""
        if index not in self._entries:
            self._entries[index] = self.index.entry(index)
        return self._entries[index]

    def prefetch(self, subjects: Iterable[str]) -> None:
        """Look up the records about many artifacts at once (`LogIndex.entries_about`): a
        dataset's batches in one query, not one round trip per batch. What `records` and
        `record` then read comes from this look-up."""
        todo = [d for d in dict.fromkeys(subjects) if d not in self._about]
        if len(todo) < 2:
            return
        found: dict[str, list[tuple[int, str]]] = {d: [] for d in todo}
        for i, (e, raw) in sorted(self.index.entries_about(todo).items()):
            self._entries.setdefault(i, e)
            self._raw.setdefault(i, raw)
            found[e.subject].append((i, e.kind))
        self._about.update(found)

    def kind_at(self, index: int, kind: str) -> LogEntry | None:
        """The entry at ``index`` when it is of ``kind``."""
        return e if (e := self.entry(index)) is not None and e.kind == kind else None

    def records(self, subject: str, kind: str) -> list[int]:
        """Indices of entries of ``kind`` about ``subject`` (looked up once per subject)."""
        found = self._about.get(subject)
        if found is None:
            found = [(i, e.kind) for i in self.index.about(subject)
                     if (e := self.entry(i)) is not None]
            self._about[subject] = found
        return [i for i, k in found if k == kind]

    def record(self, index: int) -> Record | RecordFailure:
        """Verify the record at ``index`` (memoised).

        Steps:
            1. The entry is included under the checkpoint.
            2. Its envelope, read from the evidence, is judged (`verify.judge.judge_record`:
               digest, signatures by the roles its kind requires, predicate type, subject).
            3. A revocation or erasure must have authority over its subject (an artifact, or
               an approval's record: `verify.retractions.with_authority`).
        """
        if index not in self._records:
            self._records[index] = self._record(index)
        return self._records[index]

    def _record(self, index: int) -> Record | RecordFailure:
        if self.checkpoint is None:
            return RecordFailure(index, "no verified log checkpoint", True, "log")
        entry = self.entry(index)
        raw = self._raw.get(index) or self.index.entry_bytes(index)  # (entries are not empty)
        if entry is None or raw is None:
            return RecordFailure(index, f"log entry {index} is not available", True)
        # (1)
        why = self.trusted.included_raw(index, raw)
        if why is not None:
            return RecordFailure(index, why, True)
        # (2)
        data = self.evidence.blob(entry.envelope)
        rec = judge_record(index, entry, data, self.policy, self.evidence.blob)
        # (3)
        if isinstance(rec, Record) and entry.kind in ("revocation", "erasure"):
            from .retractions import with_authority  # loaded only for a revocation or an erasure

            return with_authority(self, rec)
        return rec

    def node(self, digest: str) -> Node:
        """The node of an artifact verified already (`artifact`)."""
        return self._nodes[digest]

    def dependencies(self, digest: str) -> list[Dependency]:
        """The dependencies of a verified artifact its identity record names (empty when it
        does not verify, or has not been verified)."""
        return self._deps.get(digest, [])

    def identity_record(self, digest: str, kind: str) -> Record | RecordFailure | None:
        """The identity record of an artifact: its first record of ``kind`` (None: none), or
        the one `chosen`; when the first is signed only by a key the policy does not hold, the
        first that is not (`verify.claims.believed`: rev36; of any kind, as claims judges)."""
        found = [self.chosen[digest]] if digest in self.chosen else self.records(digest, kind)
        first = self.record(found[0]) if found else None
        if len(found) > 1 and isinstance(first, RecordFailure):
            from .claims import believed, ignored  # loaded only for bytes two records claim

            return (believed(self, found) if ignored(first) else None) or first
        return first

    # -- status: revocation, erasure ------------------------------------------------------------

    def _status(self, node: Node, digest: str, kind: str) -> list[Record]:
        """Verified ``kind`` records about ``digest``. A damaged one fails ``node`` (fail
        closed); one that is intact but not signed under the policy is noted and ignored."""
        out: list[Record] = []
        for i in self.records(digest, kind):
            r = self.record(i)
            if isinstance(r, Record):
                out.append(r)
            elif r.damaged:
                node.fail(f"{kind} record {i}", "cannot be read, so what it says is unknown: "
                          f"{r.message}; {REPAIR_HINT}")
            else:
                node.add(f"{kind} record {i}", INFO, f"ignored: {r.message}")
        return out

    def erased_blob(self, blob: str) -> Record | None:
        """The verified erasure that lists ``blob`` among its deleted blobs, if any."""
        if blob not in self._erased_blobs:
            found = (self.record(i) for i in self.index.listing(blob)
                     if self.kind_at(i, "erasure") is not None)
            self._erased_blobs[blob] = next((r for r in found if isinstance(r, Record)), None)
        return self._erased_blobs[blob]

    # -- artifacts ---------------------------------------------------------------------------------

    def artifact(self, digest: str, kind: str, *, follow: bool = True) -> Node:
        """Verify one artifact of a known kind, with its dependencies (memoised by digest).

        Steps:
            1. Its identity record (the first of ``kind``) verifies (`record`).
            2. No verified revocation names it (a damaged one fails it); a verified erasure
               marks it erased; a rollout batch's licence is one the policy accepts.
            3. For kinds with files: the manifest hashes to the digest and each blob is
               re-hashed (or its size compared), or listed by a verified erasure.
            4. With ``follow``: its dependencies (`verify.kinds.Kind.dependencies`) are
               verified in turn and linked by edges; a checkpoint's use of each dataset is
               checked (`dataset_use`), an evaluation's suite and a release's rules. The walk
               is depth first, in the order a recursion would take, on a stack of its own
               (`_follow` yields each dependency): a lineage is as deep as a training run is
               long, and Python's stack would end it in `RecursionError` after a few hundred
               generations.
        """
        node = self._nodes.get(digest)
        if node is None:
            node = self._verify_node(digest, kind)
        elif node.kind != kind:
            node.fail("kind", f"used as {kind} but recorded as {node.kind}")
            return node
        walks = [self._follow(node)] if follow and digest not in self._edges else []
        while walks:  # each followed once, depth first as a recursion, without Python's stack
            if (dep := next(walks[-1], None)) is None:
                walks.pop()
            elif (n := self.artifact(dep.digest, dep.kind, follow=False)).kind == dep.kind \
                    and n.id not in self._edges:
                walks.append(self._follow(n))
        return node

    def _verify_node(self, digest: str, kind: str) -> Node:
        node = self._nodes[digest] = Node(digest, kind)
        # (1)
        rec = self.identity_record(digest, kind)
        if rec is None:
            node.fail("record", f"not recorded in the log as {kind}")
            return node
        node.index = rec.index
        if isinstance(rec, RecordFailure):
            # It may follow from another node (`RecordFailure.cause`): the log, or a key that
            # signed records the policy does not trust, made once, as a node of its own, so
            # every record it signed counts under it (loaded only for such a key).
            cause = rec.cause
            if cause is not None and cause.startswith("key:") and cause not in self._nodes:
                from .untrusted_key import key_node

                self._nodes[cause] = key_node(rec, self.policy)
            node.fail("record", rec.message + (f"; {REPAIR_HINT}" if rec.damaged else ""), cause)
            return node
        node.name, node.version = name_version(kind, rec.statement)
        node.signers = tuple(sorted(rec.signers))
        node.add("record", OK, "signature, role and inclusion verified")
        # (2)
        standing(node, rec.predicate, self._status(node, digest, "revocation"), self.policy)
        erased = next(iter(self._status(node, digest, "erasure")), None)  # (each one judged)
        # (3)
        k = KINDS[kind]
        if k.files:
            self._check_files(node, erased, rec.statement, k.documents(rec.predicate),
                              rec.predicate)
        elif erased is not None:
            from .retractions import note_erased  # loaded only for erased data

            note_erased(node, erased)
        self._deps[digest] = [
            d for d in k.dependencies(rec.predicate)
            if not (d.optional and not self.records(d.digest, d.kind))
        ]
        if isinstance(rec.predicate, Provenance):
            # Facts the provenance records that are not artifacts of the log (trainer code,
            # dependency lock): shown, not verified.
            for d in rec.predicate.resolved_dependencies:
                if d.role not in CHECKPOINT_ROLES:
                    node.add(d.role or "dependency", INFO,
                             f"{d.name or ''} {_short(d.sha256 or d.uri or '')}".strip())
        if kind == "checkpoint" and not any(d.role == "dataset" for d in self._deps[digest]):
            node.fail("datasets", "provenance names no dataset (resolvedDependencies with role "
                      "'dataset')")
        return node

    def _follow(self, node: Node) -> Iterator[Dependency]:
        # (4), yielding each dependency for `artifact` to follow before it goes on
        self._edges[node.id] = []
        self._walking.add(node.id)
        rec = self.identity_record(node.id, node.kind)
        self.prefetch(d.digest for d in self._deps.get(node.id, []))
        for dep in self._deps.get(node.id, []):
            if dep.digest in self._walking:  # no run uses what was made from its own output
                node.fail(dep.role, f"{_short(dep.digest)} is built on this {node.kind}: the "
                          "lineage comes back to itself, which no run can make")
            yield dep
            self._edges[node.id].append(Edge(node.id, dep.digest, dep.role))
            if node.kind == "checkpoint" and dep.role == "dataset" and isinstance(rec, Record):
                self.dataset_use(node, dep.digest, rec)
        if isinstance(rec, Record) and node.kind in ("evaluation", "release"):
            from .releases import judge_use  # loaded only for an evaluation or a release

            judge_use(self, node, rec)
        if len(self.records(node.id, node.kind)) > 1:
            from .claims import judge_claims  # loaded only for bytes two records claim

            judge_claims(self, node, self._edges[node.id], self._deps.setdefault(node.id, []))
        self._walking.discard(node.id)

    def _check_files(
        self,
        node: Node,
        erased: Record | None,
        statement: Statement,
        documents: dict[str, str],
        predicate: Predicate,
    ) -> None:
        """Check an artifact's manifest (its digest is the node's) and data blobs: each
        present blob is given to the blob checker (or its size compared), each missing one
        must be listed by a verified erasure; ``documents`` are read whole. The copy of the
        manifest the ``predicate`` holds, if any, is taken when the file is it, byte for byte
        (`Manifest.from_bytes`); a sealed batch's files are its ``sealed`` ciphertexts."""
        digest, sealed = node.id, getattr(predicate, "sealed", None)
        raw = self.evidence.blob(digest)
        if raw is None:
            if erased is not None:
                from .retractions import note_erased

                note_erased(node, erased, "manifest deleted")
            else:
                node.fail("files", f"manifest {_short(digest)} is missing")
            return
        try:
            got = digest_bytes(raw)
            if got != digest:
                raise VerificationError(f"manifest hashes to {_short(got)}, want {_short(digest)}")
            manifest = Manifest.from_bytes(raw, getattr(predicate, "manifest", None))
            # A checkpoint's statement also lists its model files: they must be the manifest's.
            file_subjects = check_file_subjects(statement, manifest, "the signed statement")
        except ProvenanceError as e:
            node.fail("files", str(e))
            return
        if documents:  # a dataset's card: its check loads only then
            from .documents import check_document

            for path, want in documents.items():
                check_document(self, node, manifest, path, want)
        gone = present = absent = 0
        by_other: dict[int, Record] = {}
        caller = node.kind in self.caller_hashes and sealed is None
        stored = {f.path: (f.digest, f.size) for f in manifest.files}
        if sealed is not None:  # its blobs are ciphertexts: their check loads only then
            from .sealed_files import ciphertexts

            stored = ciphertexts(manifest, sealed, node.fail)
        rehash = self.data == DataMode.HASH and not caller
        for f in manifest.files:
            if documents.get(f.path) == f.digest or f.path not in stored:
                continue  # read whole and checked above; or sealed without a ciphertext: failed
            f_digest, f_size = stored[f.path]
            # One look at the file per blob: its presence to re-hash it, else its size.
            size = None if rehash else self.evidence.blob_size(f_digest)
            if self.evidence.omitted(f_digest):
                absent += 1
            elif size is not None or (rehash and self.evidence.has_blob(f_digest)):
                present += 1
                if rehash:
                    self.blobs.later(node, f.path, f_digest, f_size)
                # (the caller hashes the bytes as it reads them, and reports)
                elif not caller and size is not None and size != f_size:
                    node.fail(f.path, size_problem(f_digest, size, f_size))
            # A missing blob is erased only when a verified erasure lists it; otherwise lost.
            elif (by := self.erased_blob(f_digest)) is None:  # (hist40: one that does not count)
                at = [i for i in self.index.listing(f_digest) if self.kind_at(i, "erasure")]
                node.fail(f.path, f"blob {_short(f_digest)} is missing" + (
                    f": deleted by the erasure at log index {at[0]}, which does not count for "
                    "this record" if at else ""))
            else:
                gone += 1
                if erased is None or by.index != erased.index:
                    by_other[by.index] = by
        if erased is not None or by_other:
            from .retractions import note_erased

            note_erased(node, erased, f"{gone} of {len(manifest.files)} blob(s) deleted",
                        by_other.values())
        how = ("hashed by the runner as read" if caller else "re-hashed"
               if self.data == DataMode.HASH else "size only, not re-hashed")
        if sealed is not None:
            how = f"sealed (ciphertexts {how}) to {len(sealed.recipients)} recipient(s)"
        node.add("files", OK,
                 f"{len(manifest.files)} file(s), {manifest.total_size} bytes"
                 + (f", {present} {how}" if present else "")
                 + (f"; the {file_subjects} file subject(s) of its statement match"
                    if file_subjects else ""))
        if absent:
            node.add("data", INFO, f"{absent} data blob(s) not present here (exported without "
                     "data): their digests are bound by the manifest, their bytes not checked")

    def finish(self) -> None:
        """Wait for the blobs being re-hashed and file their failures in the report
        (`BlobHasher.finish`)."""
        self.blobs.finish()

    def close(self) -> None:
        """Stop any re-hashing still under way (`BlobHasher.close`). `finish` calls it; so must
        anyone who walks with this verifier and does not reach `finish`."""
        self.blobs.close()

    # -- the rules of training on a dataset -----------------------------------------------------

    def dataset_use(
        self, node: Node, digest: str, use: Record | None, *, purpose: str | None = None,
    ) -> None:
        """Check the rules for training on a dataset, adding one check per rule to ``node``.

        Steps:
            1. The dataset's record verifies.
            2. Its split is ``train``.
            3. No member batch is in a holdout or regression dataset recorded before the use;
               a dataset record that cannot be read (so could hold one out) fails the use, and
               one that is intact but not trusted by the policy holds its batches out all the
               same (`verify.judge.held_out`, `distrusted`: fail closed).
            4. The approver threshold approved it for the purpose, before the use, unexpired
               at the time of the use (`verify.judge.approvals`).

        Args:
            node: where the checks go (the checkpoint, or an admission decision).
            digest: the dataset.
            use: the record of the use (a checkpoint); None for a use now, at the end of the
                verified log.
            purpose: the purpose approvals must name (default: the use's own, else the
                dataset's).
        """
        assert self.checkpoint is not None
        before = use.index if use is not None else self.checkpoint.size
        at_time = parse_time(use.entry.time) if use is not None else self.now
        if use is not None and purpose is None:
            purpose = getattr(use.predicate, "purpose", None)
        # (1)
        rec = self.identity_record(digest, "dataset")
        if not isinstance(rec, Record) or not isinstance(rec.predicate, Dataset):
            node.fail(f"training on dataset {_short(digest)}", "the dataset record does not "
                      "verify", digest if digest in self._nodes else None)
            return
        ds = rec.predicate
        label = f"dataset {ds.name}@{ds.version}"
        # (2)
        if ds.split != "train":
            node.fail(f"{label}: split", f"the dataset is {ds.split!r}, want 'train': holdout "
                      "and regression data are never trained on")
        else:
            node.add(f"{label}: split", OK, "train")

        # (3)
        def other(e: LogEntry | None, i: int) -> bool:
            return e is not None and e.kind == "dataset" and i < before and e.subject != digest

        listed = self.index.listings(ds.batches)  # one look-up for every batch
        held_out(node, label,
                 ((i, b, self.record(i)) for b in ds.batches for i in listed[b]
                  if other(self.entry(i), i)),
                 [i for i in self.index.unreadable() if other(self.entry(i), i)],
                 self.distrusted)
        # (4)
        self.approvals(node, label, digest, purpose or ds.purpose, before, at_time)

    def distrusted(self, index: int, batch: str, failure: RecordFailure) -> str | None:
        """Why the dataset record at ``index``, intact but not trusted by the policy
        (``failure``), holds ``batch`` out all the same (None: it does not hold it out):
        `verify.distrusted.held_out_line`, loaded only for such a record."""
        from .distrusted import held_out_line

        return held_out_line(self, index, batch, failure)

    def approvals(
        self, node: Node, label: str, digest: str, purpose: str, before: int, at_time: dt.datetime
    ) -> set[str]:
        """Count the valid approvals of ``digest`` for ``purpose`` recorded before ``before``
        (`verify.judge.approvals`), adding an ``approvals`` check to ``node``; returns the
        approvers that counted. One a revocation of its record names is withdrawn, whenever
        that was logged (`verify.withdrawals.withdrawn`, loaded only then)."""
        found = [self.record(i) for i in self.records(digest, "approval")]
        if any(self.records(r.entry.envelope, "revocation") for r in found
               if isinstance(r, Record)):
            from .withdrawals import withdrawn

            found = withdrawn(self, found, before)
        return approvals(node, label, found, self.policy, purpose, before, at_time)

    # -- reports -----------------------------------------------------------------------------------

    def primary_kind(self, digest: str) -> str | None:
        """The kind an artifact is recorded as (its first named record), or None."""
        return next((e.kind for i in self.index.about(digest)
                     if (e := self.entry(i)) is not None and e.kind in NAMED), None)

    def run(self, walk: Callable[[], T]) -> T:
        """Run ``walk`` (verification with this verifier), then `finish`. On any exception
        (also a Ctrl-C as `finish` begins) the blob checker is closed (`close`) before it
        propagates."""
        try:
            out = walk()
            self.finish()
        except BaseException:
            self.close()
            raise
        return out

    def verify(self, digest: str) -> Report:
        """Verify an artifact of any kind and its lineage; returns the report (upstream)."""
        parse_digest(digest, "artifact digest")
        kind = self.primary_kind(digest)
        if kind is None:
            missing = Node(digest, "artifact", name=f"artifact {_short(digest)}")
            missing.fail("record", f"{digest}: " + ("no artifact with this digest is recorded in "
                         "the log" if self.checkpoint else "not looked up: the log did not verify"))
            self._nodes.setdefault(digest, missing)
            self.finish()
        else:
            self.run(lambda: self.artifact(digest, kind))
        return self.report(digest, ["log", digest])

    def decision(self, node: Node, links: Iterable[Edge] = ()) -> None:
        """Add a decision node (an admission) and its edges to the graph."""
        self._nodes[node.id] = node
        self._edges[node.id] = list(links)

    def report(
        self, subject: str, roots: Sequence[str], downstream: Sequence[Edge] | None = None
    ) -> Report:
        """The graph as a `Report`, each node once: upstream, what is reachable from ``roots``
        through the dependency edges; downstream, the ``downstream`` edges given."""
        nodes = {"log": self.log} | {r: self._nodes[r] for r in roots if r != "log"}
        edges = list(downstream) if downstream is not None else []
        todo = [r for r in roots if r != "log"] if downstream is None else []
        done: set[str] = set()
        while todo:  # upstream: what the roots reach through the dependency edges
            nid = todo.pop()
            if nid not in done:
                done.add(nid)
                nodes.setdefault(nid, self._nodes[nid])
                edges += self._edges.get(nid, [])
                todo += [e.dst for e in self._edges.get(nid, [])]
        for e in edges:  # downstream: the ends of the edges given
            nodes.setdefault(e.src, self._nodes[e.src])
            nodes.setdefault(e.dst, self._nodes[e.dst])
        # A key the policy does not hold comes along as the root cause of the records naming
        # it, when there are several (one such record is clearer shown as itself).
        named = Counter(c.cause for node in nodes.values() for c in node.checks
                        if c.cause is not None and c.cause not in nodes and c.cause in self._nodes)
        nodes.update({k: self._nodes[k] for k, n in named.items() if n > 1})
        return Report(subject, list(roots), nodes, edges,
                      Direction.UPSTREAM if downstream is None else Direction.DOWNSTREAM)


def name_files(node: Node, evidence: Evidence, files: Path | None = None) -> None:
    """Name each file of ``node``'s manifest with its digest and size; with ``files``, check it.

    Steps:
        1. Only a manifest the lineage verified is named: ``node`` passed its ``files`` check
           (the manifest hashes to its digest, which its signed record names).
        2. Without ``files``: one ``file <path>`` line each (information).
        3. With ``files``: the directory compared with the manifest (`verify.tree.check_tree`,
           loaded only then).

    Raises:
        OSError: ``files`` is not a directory, or cannot be listed.
    """
    # (1)
    raw = evidence.blob(node.id) if any(c.what == "files" and c.status == OK
                                        for c in node.checks) else None
    if raw is None or digest_bytes(raw) != node.id:
        if files is not None:
            node.fail("files", f"{files}: not compared: {node.label} has no verified file list")
        return
    manifest = Manifest.from_bytes(raw)
    # (2)
    if files is None:
        for f in manifest.files:
            node.add(f"file {f.path}", INFO, f"{f.digest}, {f.size} bytes")
        return
    # (3)
    from .tree import check_tree  # loaded only to compare files on disk

    check_tree(node, manifest, files)
