"""The verified graph a lineage verification produces, and its text form.

Scope: `Node` (an artifact, the log, or a decision, with its `Check`s), `Edge`, and `Report`:
which nodes fail (their own checks, or through their lineage), the root causes (found by
`verify.blame`, loaded only when a node fails), the verdict line and the text tree. Pure: no
I/O, no evidence, no policy. The records a report may carry about its artifacts
(`verify.marks.Mark`) load only where asked for.
Non-scope: deciding what the checks say (``verify.judge``, ``verify.lineage``); the JSON form
(``schemas/report.v1.md``: ``verify.report_json``, loaded only when asked for).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from .kinds import KINDS

if TYPE_CHECKING:
    from .marks import Mark

__all__ = ["ERASED", "FAIL", "INFO", "OK", "Check", "Direction", "Edge", "Node", "Report", "Status",
           "short"]


class Status(StrEnum):
    """The outcome of a check, a node or a record (str-valued: the JSON form is the value)."""

    OK = "ok"
    FAIL = "fail"
    ERASED = "erased"
    """Blobs deleted by a valid erasure (digests and signed records still verify)."""
    INFO = "info"


class Direction(StrEnum):
    """Which way a report follows its edges (`Report.direction`)."""

    UPSTREAM = "upstream"
    DOWNSTREAM = "downstream"


OK, FAIL, ERASED, INFO = Status.OK, Status.FAIL, Status.ERASED, Status.INFO

_MARK = {OK: "✓", FAIL: "✗", ERASED: "∅", INFO: "·"}
_MAX_INDENT = 12
"""Depth at which the text report stops indenting further. A chain of training iterations
nests three levels per iteration; indenting all the way would make each line's width, and the
report's size, grow with the chain (quadratic in its length). Deeper lines name their depth."""


# Escaped (as ``\u001b``) in every line a report renders: control characters, NEL, line and
# paragraph separators and bidirectional controls. A signer chooses names, licences and reasons:
# none may erase, redraw, break or reorder what a reader sees (the lines' own breaks remain).
HIDDEN = {c: f"\\u{c:04x}" for c in (*range(32), *range(127, 160), 0x61C, 0x200E, 0x200F,
                                      *range(0x2028, 0x202F), *range(0x2066, 0x206A))}


def short(digest: str) -> str:
    """``sha256:1234abcd12…``: a digest cut for a message (other text unchanged)."""
    return digest[:19] + "…" if len(digest) > 20 else digest


@dataclass
class Check:
    """One check of a node: what was checked, its outcome and why.

    Attributes:
        what: e.g. ``files``, ``record``, ``revoked``, ``dataset cartpole@2: approvals``.
        status: ``ok``, ``fail``, ``erased`` (blobs deleted by a valid erasure) or ``info``.
        detail: the reason or a short fact.
    """

    what: str
    status: Status = OK
    detail: str = ""
    cause: str | None = None
    """For a failure that follows from another node's (a record signed by a key the policy
    does not hold, a batch left unverified because its checkpoint failed): that node's id."""


@dataclass
class Node:
    """One node of a report: an artifact (keyed by digest), the log, or a decision.

    Attributes:
        id: the artifact's digest, ``log``, or ``<decision>:<digest>``.
        kind: the artifact kind, ``log`` or the decision (``admission``).
        name, version: from the artifact's signed predicate (empty when unknown).
        index: the log index of its identity record, when it has one.
        signers: keyids that signed that record.
        checks: every check made of it.
    """

    id: str
    kind: str
    name: str = ""
    version: str = ""
    index: int | None = None
    signers: tuple[str, ...] = ()
    checks: list[Check] = field(default_factory=list)

    def add(self, what: str, status: Status = OK, detail: str = "", cause: str | None = None
            ) -> Check:
        """Record a check and return it."""
        c = Check(what, status, detail, cause)
        self.checks.append(c)
        return c

    def fail(self, what: str, detail: str, cause: str | None = None) -> Check:
        """Record a failed check (``cause``: the node whose failure it follows from)."""
        return self.add(what, FAIL, detail, cause)

    @property
    def status(self) -> Status:
        """``fail`` when a check failed; else ``erased`` when data was erased; else ``ok``."""
        statuses = {c.status for c in self.checks}
        if FAIL in statuses:
            return FAIL
        return ERASED if ERASED in statuses else OK

    @property
    def ok(self) -> bool:
        """True when no check of this node failed."""
        return self.status != FAIL

    @property
    def label(self) -> str:
        """``kind name@version (sha256:1234abcd…)`` (or the node's own name), escaped (`HIDDEN`):
        messages name nodes by it."""
        if self.kind in KINDS:
            ref = (f"{self.name}@{self.version}" if self.version else self.name).translate(HIDDEN)
            if not ref:
                return f"{self.kind} {short(self.id)}"
            return f"{self.kind} {ref} ({short(self.id)})"
        return (self.name or self.kind).translate(HIDDEN)


@dataclass(frozen=True)
class Edge:
    """``src`` depends on ``dst`` in the role ``role`` (a dataset's ``batch``...)."""

    src: str
    dst: str
    role: str


@dataclass
class Report:
    """A verified graph: the nodes reachable from ``roots`` and the edges between them.

    ``direction`` is ``upstream`` (what made the subject: edges followed from depending to
    dependency) or ``downstream`` (what the subject reached: edges followed backwards).
    ``records`` are the records about its artifacts that are not nodes (`Mark`), when asked
    for (`verify.impact.with_records`).
    """

    subject: str
    roots: list[str]
    nodes: dict[str, Node]
    edges: list[Edge]
    direction: Direction = Direction.UPSTREAM
    records: list[Mark] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no check of any node failed."""
        return all(n.ok for n in self.nodes.values())

    def count(self) -> tuple[int, int]:
        """(checks, failed checks) over the whole graph, each node counted once."""
        return (sum(len(node.checks) for node in self.nodes.values()),
                sum(1 for node in self.nodes.values() for c in node.checks if c.status == FAIL))

    def failing(self) -> set[str]:
        """The nodes that fail: a check of their own failed, or they depend (through any
        number of edges) on a node that does: what was built on a revoked batch fails too."""
        users = self.edges_by("dst")
        out = {nid for nid, n in self.nodes.items() if not n.ok}
        todo = list(out)
        while todo:
            for e in users.get(todo.pop(), []):
                if e.src not in out:
                    out.add(e.src)
                    todo.append(e.src)
        return out

    def edges_by(self, end: str) -> dict[str, list[Edge]]:
        """The edges by the node at their ``src`` or ``dst`` end, in report order."""
        out: dict[str, list[Edge]] = {}
        for e in self.edges:
            out.setdefault(getattr(e, end), []).append(e)
        return out

    def causes(self) -> list[tuple[Node, list[Check], int]]:
        """The root causes: each node with failed checks that follow from no other failure
        (its own problems), those checks, and how many records depend on it (fail only
        because of it: nodes failing through their lineage, and each check naming it, or a
        node depending on it, as its cause). In walk order, then nodes no root reaches (a
        key that signed records the policy does not trust). Found by `verify.blame.blame`,
        loaded only when a node fails (a report that passes has none)."""
        failing = self.failing()
        if not failing:
            return []
        from .blame import blame

        return blame(self, failing)[0]

    def verdict(self) -> str:
        """The report's first line: the outcome, the subject and the count of problems.

        ``✓ OK: <subject>: N checks passed`` or ``✗ FAIL: <subject>: P problem(s) in N checks,
        in K node(s); M more fail through their lineage``; a problem is a root cause (a failed
        check that follows from no other failure, `causes`), and what fails only because of
        one is counted apart.
        """
        n, failed = self.count()
        node = self.nodes.get(self.subject)
        subject = (node.label if node is not None else self.subject).translate(HIDDEN)
        if not failed:
            erased = self.erased()
            return f"✓ OK: {subject}: {n} checks passed" + (
                f" ({erased} erased: data deleted, digests verified)" if erased else "")
        from .blame import fail_verdict  # it fails: its root causes are found

        return fail_verdict(self, subject, n)

    def erased(self) -> int:
        """How many ``erased`` checks the graph holds."""
        return sum(1 for n in self.nodes.values() for c in n.checks if c.status == ERASED)

    def walk(self) -> Iterator[tuple[int, Edge | None, Node, bool]]:
        """Depth-first from each root: ``(depth, edge followed, node, first visit)``."""
        children = self.edges_by("src" if self.direction == Direction.UPSTREAM else "dst")
        seen: set[str] = set()
        stack: list[tuple[int, Edge | None, str]] = [(0, None, r) for r in reversed(self.roots)]
        while stack:
            depth, edge, nid = stack.pop()
            node = self.nodes[nid]
            first = nid not in seen
            seen.add(nid)
            yield depth, edge, node, first
            if first:
                for e in reversed(children.get(nid, [])):
                    other = e.dst if self.direction == Direction.UPSTREAM else e.src
                    stack.append((depth + 1, e, other))

    def failures(self) -> list[str]:
        """One line per root cause (`causes`), ``<node label> > <what>: <detail>``, each once;
        a node's last line ends ``; and N records that depend on it`` when some do. What
        fails only because of a root cause has no line of its own (``to_json`` keeps it):
        `verify.blame.failure_lines`."""
        from .blame import failure_lines

        return [line.translate(HIDDEN) for line in failure_lines(self.causes())]

    def render(self) -> list[str]:
        """A text tree under the verdict line (`verdict`): ``✓`` passed, ``✗`` failed (its own
        check, or something it depends on: then a ``lineage`` line says what), ``∅`` erased,
        ``·`` information. A node reached again is one line saying "(see above)". Indentation
        stops at depth 12; deeper nodes say ``[depth N]``, so the text stays linear in the
        size of the graph."""
        failing = self.failing()
        deps = self.edges_by("src")
        marks: dict[str, list[tuple[Status, str]]] = {}
        for m in self.records:
            for nid, role in m.about:
                marks.setdefault(nid, []).append(m.line(role))
        lines: list[str] = [self.verdict()]
        causes = self.causes()
        if len(causes) > 1 or any(d for _n, _c, d in causes):
            lines += [f"  {_MARK[FAIL]} cause: {line}" for line in self.failures()]
        for depth, edge, node, first in self.walk():
            pad = "    " * min(depth, _MAX_INDENT)
            via = f"{edge.role} → " if edge is not None else ""
            if depth > _MAX_INDENT:
                via = f"[depth {depth}] {via}"
            mark = _MARK[FAIL if node.id in failing else node.status]
            if not first:
                lines.append(f"{pad}{via}{mark} {node.label} (see above)")
                continue
            head = f"{pad}{via}{mark} {node.label}"
            facts = [f"log index {node.index}"] if node.index is not None else []
            if node.signers:
                facts.append("signed by " + ", ".join(s[:12] for s in node.signers))
            lines.append(head + (f" — {', '.join(facts)}" if facts else ""))
            following: dict[str, list[Check]] = {}
            for c in node.checks:
                if c.status == FAIL and c.cause in self.nodes and c.cause is not None:
                    following.setdefault(c.cause, []).append(c)
                    if len(following[c.cause]) > 1:
                        continue  # drawn once below, with how many there are
                text = c.what + (f" — {c.detail}" if c.detail else "")
                lines.append(f"{pad}    {_MARK[c.status]} {text}")
            for cause, same in following.items():
                if len(same) > 1:
                    lines.append(f"{pad}    {_MARK[FAIL]} and {len(same) - 1} more "
                                 f"{'/'.join(sorted({c.what for c in same}))} check(s) failing "
                                 f"because {self.nodes[cause].label} fails")
            if node.ok and node.id in failing:
                bad = sorted(self.nodes[d].label
                             for d in {e.dst for e in deps.get(node.id, ()) if e.dst in failing})
                lines.append(f"{pad}    {_MARK[FAIL]} lineage — depends on {len(bad)} failing: "
                             + "; ".join(bad))
            lines += [f"{pad}    {_MARK[status]} {text}" for status, text in marks.get(node.id, [])]
        return [line.translate(HIDDEN) for line in lines]

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form: a node table and an edge list (schemas/report.v1.md); and the
        records about its artifacts, when it carries them (`verify.impact.with_records`).
        Written by `verify.report_json.report_json`, loaded only when this form is asked for."""
        from .report_json import report_json

        failing = self.failing()
        return report_json(self, {nid: FAIL if nid in failing else OK for nid in self.nodes})
