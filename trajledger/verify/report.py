"""The verified graph a lineage verification produces, and its text form.

Scope: `Report`, a graph of the `Node`s (each with its `Check`s) and `Edge`s of
``verify.nodes`` (named here too): which nodes fail (their own checks, or through their
lineage), the root causes (found by `verify.blame`, loaded only when a node fails), the verdict
line and the text tree. Pure: no I/O, no evidence, no policy. The records a report may carry
about its artifacts (`verify.marks.Mark`) load only where asked for.
Non-scope: deciding what the checks say (``verify.judge``, ``verify.lineage``); the JSON form
(``schemas/report.v1.md``: ``verify.report_json``, loaded only when asked for).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .nodes import ERASED, FAIL, HIDDEN, INFO, OK, Check, Direction, Edge, Node, Status, hide, short

if TYPE_CHECKING:
    from .marks import Mark

__all__ = ["ERASED", "FAIL", "HIDDEN", "INFO", "OK", "Check", "Direction", "Edge", "Node", "Report",
           "Status", "short"]


_MARK = {OK: "✓", FAIL: "✗", ERASED: "∅", INFO: "·"}
_MAX_INDENT = 12
"""Depth at which the text report stops indenting further. A chain of training iterations
nests three levels per iteration; indenting all the way would make each line's width, and the
report's size, grow with the chain (quadratic in its length). Deeper lines name their depth."""


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

    def __repr__(self) -> str:  # a notebook's line: the verdict, not every node (out41)
        return f"<Report {self.direction}: {self.verdict()}>"

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
        subject = hide(node.label if node is not None else self.subject)
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

        return [hide(line) for line in failure_lines(self.causes())]

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
            if node.id in failing:  # its checks grouped by cause, or its failing lineage
                from .blame import failing_node_lines

                lines += failing_node_lines(self, node, f"{pad}    ", failing, deps, _MARK)
            else:
                lines += [f"{pad}    {_MARK[c.status]} {c.what}" + (f" — {c.detail}" if c.detail
                                                                   else "") for c in node.checks]
            lines += [f"{pad}    {_MARK[status]} {text}" for status, text in marks.get(node.id, [])]
        return [hide(line) for line in lines]

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form: a node table and an edge list (schemas/report.v1.md); and the
        records about its artifacts, when it carries them (`verify.impact.with_records`).
        Written by `verify.report_json.report_json`, loaded only when this form is asked for."""
        from .report_json import report_json

        failing = self.failing()
        return report_json(self, {nid: FAIL if nid in failing else OK for nid in self.nodes})
