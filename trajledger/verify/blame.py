"""Why a report fails: its root causes, and what fails only because of one.

Scope: `blame`, what `verify.report.Report.causes` and the verdict line of a failing report
are made of: each node with failed checks that follow from no other failure (its own
problems), those checks, and how many records fail only because of it (nodes failing through
their lineage, and each check naming it as its cause); `fail_verdict`, the verdict line of a
failing report; `failure_lines`, one line per cause (`verify.report.Report.failures`);
`failing_node_lines`, the lines of a failing node in the text tree. Loaded only when a report
fails (a report that passes has no cause to find).
Non-scope: which nodes fail (`verify.report.Report.failing`); the text and JSON forms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .kinds import KINDS
from .nodes import FAIL

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from .nodes import Check, Edge, Node, Status

__all__ = ["Graph", "blame", "fail_verdict", "failing_node_lines", "failure_lines"]


class Graph(Protocol):
    """What the causes are found from: a `verify.report.Report`, which stands above this
    module and loads it when a node fails."""

    nodes: dict[str, Node]

    def edges_by(self, end: str) -> dict[str, list[Edge]]: ...

    def walk(self) -> Iterator[tuple[int, Edge | None, Node, bool]]: ...

    def failing(self) -> set[str]: ...


def blame(report: Graph, failing: set[str]) -> tuple[list[tuple[Node, list[Check], int]], int]:
    """The root causes of ``report`` (`verify.report.Report.causes`: in walk order, then
    nodes no root reaches), and how many records fail only because of one (each once).
    ``failing``: `verify.report.Report.failing`."""
    deps = report.edges_by("src")
    failed = {nid: [c for c in n.checks if c.status == "fail"]  # `verify.report.FAIL`
              for nid, n in report.nodes.items()}
    own = {nid: [c for c in cs if c.cause not in failing] for nid, cs in failed.items()}

    # A node failing through its lineage (no problem of its own) reaches the failing nodes
    # it fails because of: the causes its checks name, else its failing dependencies. A
    # root cause counts each node that reaches it, through such nodes, once.
    users: dict[str, list[str]] = {}
    units: dict[str, int] = {}
    for nid in failing:
        if own[nid]:
            continue
        caused = [c.cause for c in failed[nid] if c.cause in failing and c.cause is not None]
        for v in caused or [e.dst for e in deps.get(nid, []) if e.dst in failing]:
            users.setdefault(v, []).append(nid)
        # A record is an artifact failing through its lineage, or each check that follows
        # from a cause (a bundle's terms of batches never reached); decisions are not.
        units[nid] = len(caused) or int(report.nodes[nid].kind in KINDS)
    counts: dict[str, int] = {}
    for root in (nid for nid in failing if own[nid]):
        seen: set[str] = set()
        todo = [root]
        while todo:  # iteratively: a lineage may be thousands of nodes deep
            for nid in users.get(todo.pop(), ()):
                if nid not in seen:
                    seen.add(nid)
                    todo.append(nid)
        counts[root] = sum(units[nid] for nid in seen)
    order = [node.id for _d, _e, node, first in report.walk() if first]
    walked = set(order)
    order += [nid for nid in report.nodes if nid not in walked]
    return [(report.nodes[nid], own[nid], counts.get(nid, 0)) for nid in order
            if own[nid]], sum(units.values())


def failure_lines(causes: list[tuple[Node, list[Check], int]]) -> list[str]:
    """One line per root cause of ``causes`` (`verify.report.Report.causes`), ``<node label> >
    <what>: <detail>``, each once; a node's last line ends ``; and N records that depend on
    it`` when some do."""
    out: list[str] = []
    for node, checks, depend in causes:
        out.extend(f"{node.label} > {c.what}: {c.detail}" for c in checks)
        if depend:
            out[-1] += (f"; and {depend} records that depend on it" if depend > 1
                        else "; and 1 record that depends on it")
    return out


def fail_verdict(report: Graph, subject: str, n: int) -> str:
    """The verdict line of a failing ``report`` (`verify.report.Report.verdict`) about
    ``subject`` (its label) after ``n`` checks: ``✗ FAIL: <subject>: P problem(s) in N
    checks, in K node(s); M more fail through their lineage``; a problem is a root cause, and
    what fails only because of one is counted apart."""
    causes, depend = blame(report, report.failing())
    problems = sum(len(checks) for _n, checks, _d in causes)
    where = (f"in {len(causes)} node(s)" if [c[0].id for c in causes] != ["log"]
             else "in the log")
    return (f"✗ FAIL: {subject}: {problems} problem(s) in {n} checks, {where}"
            + (f"; {depend} more fail through their lineage" if depend else ""))


def failing_node_lines(report: Graph, node: Node, pad: str, failing: set[str],
                       deps: Mapping[str, list[Edge]], mark: Mapping[Status, str]) -> list[str]:
    """The lines under a failing ``node`` in the text tree (`verify.report.Report.render`,
    ``pad`` their indent, ``mark`` the sign of each status): each check, but the failures
    naming the same other node as their cause drawn once, with how many more there are; and a
    node whose own checks pass, failing through its lineage (``deps``: the edges by their
    ``src``), a ``lineage`` line naming what it depends on that fails."""
    lines: list[str] = []
    following: dict[str, list[Check]] = {}
    for c in node.checks:
        if c.status == FAIL and c.cause in report.nodes and c.cause is not None:
            following.setdefault(c.cause, []).append(c)
            if len(following[c.cause]) > 1:
                continue  # drawn once below, with how many there are
        text = c.what + (f" — {c.detail}" if c.detail else "")
        lines.append(f"{pad}{mark[c.status]} {text}")
    for cause, same in following.items():
        if len(same) > 1:
            lines.append(f"{pad}{mark[FAIL]} and {len(same) - 1} more "
                         f"{'/'.join(sorted({c.what for c in same}))} check(s) failing "
                         f"because {report.nodes[cause].label} fails")
    if node.ok:
        bad = sorted(report.nodes[d].label
                     for d in {e.dst for e in deps.get(node.id, ()) if e.dst in failing})
        lines.append(f"{pad}{mark[FAIL]} lineage — depends on {len(bad)} failing: "
                     + "; ".join(bad))
    return lines
