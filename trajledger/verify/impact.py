"""Views around a verified lineage: what was built on an artifact, and the records about a
report's artifacts that are not nodes of it.

Scope: `impact` (everything downstream of an artifact, each verified, with the edges that reach
it) and `with_records` (a report with its `Mark`s: approvals, revocations, erasures,
evaluations... each verified as a record), both over a `LineageVerifier`, and `gist`, what a
record says in one line. Used by
``trajledger lineage``/``impact`` and updates; never by ``python -m verify BUNDLE``, which loads
none of this.
Non-scope: verifying anything itself (the verifier does, memoised).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .claims import judged
from .digest import parse_digest
from .judge import REPAIR_HINT, Record, RecordFailure
from .kinds import KINDS
from .marks import Mark
from .report import FAIL, INFO, OK, Direction, Edge, Node, Report
from .report import short as _short

if TYPE_CHECKING:
    from .lineage import LineageVerifier

__all__ = ["gist", "impact", "with_records"]


def impact(verifier: LineageVerifier, digest: str) -> Report:
    """Everything downstream of ``digest``: the artifacts whose lineage includes it, each
    verified (memoised), with the edges that reach them. Cost: O(downstream)."""
    parse_digest(digest, "artifact digest")
    kind = verifier.primary_kind(digest)
    if kind is None:
        return verifier.verify(digest)
    # Everything downstream was built on the subject: when it fails, they fail through
    # their lineage (`Report.failing`), each counted once as the subject's problem.
    down = verifier.run(lambda: _downstream(verifier, digest, kind))
    _unknown_users(verifier, verifier.node(digest), {e.src for e in down})
    return verifier.report(digest, ["log", digest], down)


def _unknown_users(verifier: LineageVerifier, node: Node, found: set[str]) -> None:
    """Fail closed: a record of an artifact kind whose envelope the index could not read may
    have been built on ``node``; what it names is unknown, so the answer is incomplete until it
    is restored (an insider deleting a checkpoint's envelope must not take it out of the
    answer). Any such record counts, wherever it is in the log: a record may name a
    dependency recorded after it (only a loop is refused)."""
    for i in verifier.index.unreadable():
        e = verifier.entry(i)
        if (e is not None and e.kind in KINDS and KINDS[e.kind].lineage
                and e.subject != node.id and e.subject not in found):
            node.fail(f"{e.kind} record {i}", "cannot be read, so whether it was built on "
                      f"this is unknown; {REPAIR_HINT}")


def _downstream(verifier: LineageVerifier, digest: str, kind: str) -> list[Edge]:
    """Verify ``digest`` and walk the referrers: the edges reaching it (a referrer whose
    record does not verify comes with the index's edge, failing)."""
    _judge_use(verifier, _claimed(verifier, verifier.artifact(digest, kind, follow=False)))
    down: list[Edge] = []
    seen = {digest}
    todo = [digest]
    # Per referrer, once (rev37): its records judged and the edges they name. Asked per
    # record, N records of one digest cost N x N steps (`LineageVerifier.records` lists them).
    claims: dict[tuple[str, str], tuple[Node, set[int | None], set[tuple[str, str]]]] = {}
    while todo:
        d = todo.pop()
        for i, role in verifier.index.referrers(d):
            e = verifier.entry(i)
            if e is None:
                continue
            src = e.subject
            # A referrer counts when its identity record names the edge. One whose record does
            # not verify (its envelope deleted or replaced) cannot say; the index, derived
            # from it when it could be read, does: it is shown, failing (fail closed), never
            # dropped, or an insider could hide a user of revoked data from the answer.
            # An artifact several records claim: each of them is a referrer (`verify.claims`).
            if (src, e.kind) not in claims:
                node = _claimed(verifier, verifier.artifact(src, e.kind, follow=False))
                claims[src, e.kind] = (node, set(judged(verifier, node)), {
                    (dep.digest, dep.role) for dep in verifier.dependencies(src)})
            src_node, mine, names = claims[src, e.kind]
            if i not in mine or (
                    isinstance(verifier.record(i), Record) and (d, role) not in names):
                continue
            down.append(Edge(src, d, role))
            if src not in seen:
                seen.add(src)
                todo.append(src)
                _judge_use(verifier, src_node)
    _judge_rules(verifier, seen)
    return down


def _claimed(verifier: LineageVerifier, node: Node) -> Node:
    """``node``; an artifact several records claim followed first, so that every record's
    lineage is judged and its dependencies known (`verify.claims`: each record a referrer)."""
    if len(judged(verifier, node)) > 1:
        verifier.artifact(node.id, node.kind)
    return node


def _judge_use(verifier: LineageVerifier, node: Node) -> None:
    """A downstream checkpoint's use of each dataset it names (split, holdouts, approvals at
    the time of its record: `LineageVerifier.dataset_use`), the checks `verify CK` adds when
    it follows the checkpoint's lineage, without following it: without them a checkpoint
    whose dataset's approvals no longer count was ``ok`` here (redo20, Left). Once a node: a
    verifier may answer several impacts (`ledger.updates`) or have followed it already."""
    rec = verifier.identity_record(node.id, node.kind)
    if node.kind != "checkpoint" or not isinstance(rec, Record) or any(
            c.what.startswith(("dataset ", "training on dataset ")) for c in node.checks):
        return
    for dep in verifier.dependencies(node.id):
        if dep.role == "dataset":
            verifier.dataset_use(node, dep.digest, rec)


def _judge_rules(verifier: LineageVerifier, graph: set[str]) -> None:
    """Each artifact of the graph (the subject too) judged as `verify REF` judges it: a
    dependency it names off this graph (the subject's environment, a downstream dataset's
    other batches, a checkpoint's parent or other datasets, an evaluation's suite...) that
    does not verify, with its lineage, fails it, naming the first problem there. An
    evaluation or a release is followed first (once: `LineageVerifier.artifact`), which adds
    its rules (`verify.releases.judge_use`: the suite is held out, the policy's
    ``[release]``). Without this, an evaluation on a suite revoked since showed ``ok`` here
    where ``verify EVAL`` exits 1 (left22, Left), and so did a batch whose environment was
    revoked, and every checkpoint trained on it (agree24). A checkpoint's use of its datasets
    is judged by `_judge_use`. Each dependency is verified once (memoised)."""
    failing: dict[str, str | None] = {}
    for nid in sorted(graph):
        node = verifier.node(nid)
        if node.kind not in KINDS or not isinstance(
                verifier.identity_record(nid, node.kind), Record):
            continue
        if node.kind in ("evaluation", "release"):
            verifier.artifact(nid, node.kind)
        for dep in verifier.dependencies(nid):
            if dep.digest in graph or any(c.cause == dep.digest for c in node.checks):
                continue
            if dep.digest not in failing:
                verifier.artifact(dep.digest, dep.kind)
                up = verifier.report(dep.digest, [dep.digest])
                failing[dep.digest] = (up.failures()[0] if dep.digest in up.failing()
                                       else None)
            if (why := failing[dep.digest]) is not None:
                node.fail(dep.role, f"{_short(dep.digest)} does not verify: {why}", dep.digest)


def with_records(verifier: LineageVerifier, report: Report) -> Report:
    """``report`` with the records about its artifacts that are not nodes of it (`Mark`),
    found generically from the kinds (`verify.kinds`), in log order:

    - every record whose subject is an artifact of the report and whose kind is not an
      artifact kind (approvals, revocations, erasures, refusals, imports...);
    - every record of an artifact kind that judges (`Kind.judges`: evaluations, releases)
      and names an artifact of the report as a dependency, when it is not a node itself.

    Each is verified as a record (`LineageVerifier.record`: signature, role, inclusion); what
    it decides is already in the checks of the nodes (a revocation fails its artifact,
    approvals count in the checkpoint's use of a dataset). Call it after `verify` or `impact`.
    """
    found: dict[int, list[tuple[str, str]]] = {}
    for nid, node in report.nodes.items():
        if node.kind not in KINDS:
            continue
        for i in verifier.index.about(nid):
            e = verifier.entry(i)
            if e is not None and e.kind in KINDS and not KINDS[e.kind].lineage:
                found.setdefault(i, []).append((nid, e.kind))
        for i, role in verifier.index.referrers(nid):
            e = verifier.entry(i)
            if (e is not None and e.kind in KINDS and KINDS[e.kind].lineage
                    and KINDS[e.kind].judges and e.subject not in report.nodes):
                found.setdefault(i, []).append((nid, role))
    marks = []
    for i in sorted(found):
        rec = verifier.record(i)
        entry = verifier.entry(i)
        assert entry is not None
        if isinstance(rec, Record) and entry.kind == "approval":
            rec = _withdrawn(verifier, rec)
        if isinstance(rec, Record):
            status, detail = OK, gist(rec.statement.predicate)
            signers = tuple(sorted(rec.signers))
        else:
            status = FAIL if rec.damaged else INFO
            detail = rec.message if rec.damaged else f"ignored: {rec.message}"
            signers = entry.signers
        marks.append(Mark(i, entry.kind, tuple(dict.fromkeys(found[i])), signers, status,
                          detail))
    return Report(report.subject, report.roots, report.nodes, report.edges,
                  Direction(report.direction), marks)


def _withdrawn(verifier: LineageVerifier, rec: Record) -> Record | RecordFailure:
    """An approval's record, or why it counts for nothing when it is withdrawn
    (`verify.withdrawals.withdrawn`, among the approvals of its subject: a replay too)."""
    found = [verifier.record(j) for j in verifier.records(rec.entry.subject, "approval")]
    if not any(verifier.records(r.entry.envelope, "revocation") for r in found
               if isinstance(r, Record)):
        return rec
    from .withdrawals import withdrawn

    return next(r for r in withdrawn(verifier, found) if r.index == rec.index)


_GIST_CHARS = 160
"""How much of a record's predicate `gist` shows."""
_TIME = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+Z")


def gist(predicate: Any) -> str:
    """A record's plain fields, ``key: value; ...`` (numbers one level deep too; digests cut),
    for a picture: what an approval, revocation or evaluation says, read generically."""

    def plain(value: Any) -> str | None:
        if isinstance(value, bool) or value is None:
            return None if value is None else str(value).lower()
        if isinstance(value, int | float):
            return f"{value:.4g}" if isinstance(value, float) else str(value)
        if isinstance(value, str):
            return _short(value) if value.startswith("sha256:") else value
        return None

    parts: list[str] = []
    nested: list[str] = []  # then the numbers one level down (an evaluation's metrics)
    times: list[str] = []  # last: what a record says comes before when it said it
    for key, value in (predicate.items() if isinstance(predicate, dict) else ()):
        if isinstance(value, dict):
            nested += [f"{key}.{k}: {t}" for k, v in value.items()
                       if not isinstance(v, dict | str) and (t := plain(v)) is not None]
        elif (text := plain(value)) is not None:
            (times if _TIME.fullmatch(text) else parts).append(f"{key}: {text}")
    out = "; ".join(parts + nested + times)
    return out if len(out) <= _GIST_CHARS else out[: _GIST_CHARS - 1] + "…"

