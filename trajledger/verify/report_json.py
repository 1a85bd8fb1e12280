"""The JSON form of a verified graph (``schemas/report.v1.md``), loaded only when asked for.

Scope: `report_json`, what `verify.report.Report.to_json` returns: a node table, an edge list,
the root causes and, when the report carries them, the records about its artifacts
(`verify.marks.Mark`). A run asks for one form of its report: the text tree
(`verify.report.Report.render`) or this one (``--json``); ``python -m verify BUNDLE`` loads this
module only with ``--json``.
Non-scope: which nodes fail and why (``verify.report``); deciding anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .marks import Mark
    from .nodes import Check, Direction, Edge, Node, Status

__all__ = ["REPORT_FORMAT", "Graph", "dumps", "report_json", "strict"]


class Graph(Protocol):
    """What the JSON form is written from: a `verify.report.Report`, which stands above this
    module and loads it when that form is asked for."""

    subject: str
    roots: list[str]
    nodes: dict[str, Node]
    edges: list[Edge]
    direction: Direction
    records: list[Mark]

    @property
    def ok(self) -> bool: ...

    def count(self) -> tuple[int, int]: ...

    def causes(self) -> Sequence[tuple[Node, list[Check], int]]: ...

REPORT_FORMAT = "https://trajledger.dev/report/v1"
"""The ``format`` of a report's JSON form (schemas/report.v1.md)."""


def report_json(report: Graph, lineage: Mapping[str, Status]) -> dict[str, Any]:
    """The stable JSON form of ``report``; ``lineage`` is each node's status through its
    lineage (``fail`` when it or anything it depends on fails, `Report.failing`).

    A check names its ``cause`` only when that node is in the report (a key the policy does
    not hold comes along only when several records name it); ``records`` is present only when
    the report carries some (`verify.impact.with_records`)."""
    n, f = report.count()
    records = {"records": [
        {"logIndex": m.index, "kind": m.kind, "about": [{"id": i, "role": r} for i, r in m.about],
         "signers": list(m.signers), "status": m.status, "detail": m.detail}
        for m in report.records
    ]} if report.records else {}
    return records | {
        "format": REPORT_FORMAT,
        "subject": report.subject,
        "direction": report.direction,
        "ok": report.ok,
        "checks": n,
        "failed": f,
        "causes": [{"node": node.id, "dependents": d} for node, _c, d in report.causes()],
        "roots": list(report.roots),
        "nodes": [{
            "id": node.id,
            "kind": node.kind,
            "name": node.name,
            "version": node.version,
            "logIndex": node.index,
            "signers": list(node.signers),
            "status": node.status,
            "checks": [{"what": c.what, "status": c.status, "detail": c.detail}
                       | ({"cause": c.cause} if c.cause and c.cause in report.nodes else {})
                       for c in node.checks],
            "lineage": lineage[node.id],
        } for node in report.nodes.values()],
        "edges": [{"from": e.src, "to": e.dst, "role": e.role} for e in report.edges],
    }


def strict(value: Any) -> Any:
    """``value`` (a JSON value) with each string's lone surrogates, keys' too, as
    `verify.nodes.UNDECODABLE` shows them (``\\xfd``): what `dumps` and ``trajledger``'s
    ``--json`` (``ledger.clikit.emit_json``) print (rev39: one walk, one table)."""
    from .nodes import UNDECODABLE

    if isinstance(value, str):
        return value.translate(UNDECODABLE)
    if isinstance(value, list):
        return [strict(v) for v in value]
    if isinstance(value, dict):
        return {strict(k): strict(v) for k, v in value.items()}
    return value


def dumps(doc: Mapping[str, Any]) -> str:
    """``python -m verify --json``'s document: one line, keys sorted; a string holding a lone
    surrogate (a bundle's or a file's name that is not UTF-8) with it as ``\\xfd``, as
    ``trajledger``'s ``--json`` writes it (docs/cli.md, "Names that are not UTF-8"): it was the
    escape ``"b\\udcfdx"``, which strict parsers (Go's, Rust's serde_json) refuse or replace
    (out41). The document is walked only when its text holds ``\\ud``."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return text if "\\ud" not in text else json.dumps(strict(doc), sort_keys=True,
                                                      separators=(",", ":"))

