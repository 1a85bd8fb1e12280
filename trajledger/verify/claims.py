"""Bytes that several records of one kind claim: every record's lineage is judged.

Scope: `judge_claims`, for an artifact whose digest more than one record of its kind names (a
buyer's own training and a vendor's, imported, that made the same bytes; a dataset or a batch
the buyer recorded itself before the vendor's record of the same bytes was imported; or a
trainer's second record of bytes it holds). The rules (docs/SECURITY.md, "twenty-third round
(hist38)" finding 1, "twenty-fourth round (hist39)" finding 1):

- **By digest** (a reference by digest, what another record names: a child's parent, an
  evaluation's or a release's checkpoint, a dataset's batch, a gate's dataset, a bundle's
  subject): every record is judged, each with its own lineage (a checkpoint's datasets used as
  of its own log index and time, its parent), and the artifact fails if any fails, each record
  named; a producer's revocation or erasure of any record counts
  (`verify.retractions.with_authority`). A trainer cannot hide a revoked lineage of some bytes
  behind a second, clean record of the same bytes, nor a producer a revoked batch or dataset.
- **By name** (``verify NAME@VERSION``, ``lineage``, ``impact``): the record of that name is
  judged (`LineageVerifier.chosen`); the others are named, not judged.
- **A record signed only by a key the policy does not hold for it** (`ignored`: a stranger's,
  or one declared compromised since) is intact and says nothing the policy accepts: named and
  ignored, as such a revocation is (docs/SECURITY.md, "twenty-fourth round (rev36)"); before,
  it failed every holder of those bytes for good, with no remedy, since the log keeps it. A
  damaged record (its envelope missing or replaced) still fails: what it says is unknown.
- **At most `MAX_CLAIMS` records are judged**: bytes more records claim fail by digest, and
  by name the others are counted, not listed (a hostile bundle could carry many).

Loaded only when an artifact's digest has more than one record of its kind (the walk of
``verify.lineage``, as it follows the artifact).
Non-scope: which record a name resolves to (``ledger.catalog``).
Spec: schemas/SPEC.md, section "Lineage verification".
"""

from __future__ import annotations

from typing import Protocol

from .judge import REPAIR_HINT, Record, RecordFailure
from .kinds import KINDS, Dependency, name_version
from .nodes import INFO, OK, Edge, Node

__all__ = ["MAX_CLAIMS", "Walk", "believed", "ignored", "judge_claims", "judged"]

MAX_CLAIMS = 64
"""The records of one kind and digest a walk judges one by one (each one's lineage); bytes
that more records claim fail by digest (rev36: a bundle may carry any number of them)."""


def ignored(r: Record | RecordFailure) -> bool:
    """``r`` is intact and signed only by a key the policy does not hold for its kind (a
    stranger's, one declared compromised since: `RecordFailure.cause` ``key:``)."""
    return isinstance(r, RecordFailure) and not r.damaged and (r.cause or "").startswith("key:")


def believed(v: Walk, found: list[int]) -> Record | RecordFailure | None:
    """The first of the records ``found`` that is not `ignored` (the identity record of bytes
    whose first record a key the policy does not hold signed), or None."""
    return next((r for r in map(v.record, found[1:MAX_CLAIMS]) if not ignored(r)), None)


class Walk(Protocol):
    """Where the records are judged: a `verify.lineage.LineageVerifier`, which stands above
    this module and loads it for bytes two records claim."""

    chosen: dict[str, int]

    def records(self, subject: str, kind: str) -> list[int]: ...

    def record(self, index: int) -> Record | RecordFailure: ...

    def artifact(self, digest: str, kind: str, *, follow: bool = True) -> Node: ...

    def dataset_use(self, node: Node, digest: str, use: Record | None, *,
                    purpose: str | None = None) -> None: ...


def judged(v: Walk, node: Node) -> list[int | None]:
    """The log indices of the records of ``node`` a walk judges: its identity record's, and
    every other record of its kind and bytes unless a reference by name chose one (a
    checkpoint's, hist38; a dataset's or a batch's too, hist39: `impact` judged only the
    first, so a batch whose other record no longer verified was ``ok`` there)."""
    found: list[int | None] = [*v.records(node.id, node.kind)]
    return found if len(found) > 1 and node.id not in v.chosen else [node.index]


def judge_claims(v: Walk, node: Node, edges: list[Edge], deps: list[Dependency]
                 ) -> None:
    """Judge every record of ``node``'s kind and digest after its identity record's (whose
    lineage the walk followed): each other record's dependencies are verified, linked by
    ``edges`` and added to ``deps`` (what `LineageVerifier.dependencies` answers: an impact's
    walk, a suite's overlap), a checkpoint's datasets' use checked as of that record
    (`LineageVerifier.dataset_use`). With a record chosen by name, the others are only named.
    A dataset's or a batch's revocation by the producer of any of its records counts by
    digest (`verify.retractions.with_authority`)."""
    kind = node.kind
    found = v.records(node.id, kind)
    chosen = v.chosen.get(node.id)
    if len(found) > MAX_CLAIMS:
        what = f"{len(found)} {kind} records claim these bytes"
        if chosen is None:
            node.fail(f"{kind} records", f"{what}, more than the {MAX_CLAIMS} a verifier "
                      "judges one by one: their lineages are not judged, so the bytes fail by "
                      "digest; name a record (NAME@VERSION) to judge it alone")
        else:
            node.add(f"{kind} records", INFO, f"{what}; not judged: the reference names "
                     f"the record at log index {chosen}")
        return
    for i in found:
        if i == node.index:
            continue
        r = v.record(i)
        label = f"{kind} record {i}"
        if chosen is not None:
            node.add(label, INFO, "records these bytes too; not judged: the reference names the "
                     f"record at log index {chosen} (its digest judges every record)")
        elif ignored(r):
            assert isinstance(r, RecordFailure)
            node.add(label, INFO, f"records these bytes too; ignored: {r.message}")
        elif not isinstance(r, Record):
            node.fail(label, "another record of these bytes does not verify: " + r.message
                      + (f"; {REPAIR_HINT}" if r.damaged else ""), r.cause)
        else:
            name, version = name_version(kind, r.statement)
            ref = f"{name}@{version}" if version else name
            claimed = [d for d in KINDS[kind].dependencies(r.predicate)
                       if not (d.optional and not v.records(d.digest, d.kind))]
            if kind == "checkpoint" and not any(d.role == "dataset" for d in claimed):
                node.fail(label, f"{ref}: provenance names no dataset")
            for d in claimed:
                if d.digest == node.id:  # (as `LineageVerifier._follow` fails its own record)
                    node.fail(label, f"{name}@{version} is built on these bytes themselves: "
                              "the lineage comes back to itself, which no run can make")
                    continue
                v.artifact(d.digest, d.kind)
                if (edge := Edge(node.id, d.digest, d.role)) not in edges:
                    edges.append(edge)
                    deps.append(d)
                if kind == "checkpoint" and d.role == "dataset":
                    v.dataset_use(node, d.digest, r)
            node.add(label, OK, f"{ref} records these bytes too: its lineage is "
                     "judged with this one's")
