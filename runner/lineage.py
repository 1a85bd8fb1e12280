"""Lineage (upstream) and impact (downstream) graphs of recorded artifacts, and their renderings.

Scope: build the graph of what made an artifact (a checkpoint's datasets, their batches, the
batches' environments, evaluators and generating checkpoints, parent checkpoints...) or of what
an artifact reached (a batch's datasets, the checkpoints trained on them, the rollouts those
checkpoints generated, and onwards); mark each node with its signer, log index and status
(verified, failed, revoked, erased) from ``verify.lineage``; render as text, JSON, Mermaid, DOT
or one self-contained HTML page.
Non-scope: deciding trust. Statuses come from the verifier; the graph's edges come from the
signed predicates, read through the catalog.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trajledger.ledger.catalog import CatalogItem
    from trajledger.ledger.home import Ledger
    from trajledger.verify.lineage import LineageVerifier
    from trajledger.verify.policy import TrustPolicy

__all__ = ["Edge", "Graph", "Node", "impact", "lineage", "render"]

FORMATS = ("text", "json", "mermaid", "dot", "html")


@dataclass
class Node:
    """One artifact in a graph."""

    digest: str
    kind: str
    name: str
    version: str
    index: int
    signers: list[str]
    status: str = "unverified"
    detail: str = ""

    @property
    def label(self) -> str:
        """``kind name@version``."""
        ref = f"{self.name}@{self.version}" if self.version else self.name
        return f"{self.kind} {ref}"


@dataclass(frozen=True)
class Edge:
    """``src`` depends on ``dst`` (upstream), in the role ``role``."""

    src: str
    dst: str
    role: str


@dataclass
class Graph:
    """Nodes by digest, edges, and the artifact the graph is about."""

    root: str
    direction: str
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Stable JSON form."""
        return {
            "root": self.root,
            "direction": self.direction,
            "nodes": [asdict(n) for n in self.nodes.values()],
            "edges": [asdict(e) for e in self.edges],
        }


class _Reader:
    """Reads predicates of recorded artifacts through the catalog (unverified: edges only)."""

    def __init__(self, ledger: Ledger) -> None:
        from trajledger.ledger.catalog import Catalog

        self.ledger = ledger
        self.catalog = Catalog(ledger)
        self.items = {i.digest: i for i in reversed(self.catalog.items())}
        self._predicates: dict[str, dict[str, Any]] = {}

    def item(self, digest: str) -> CatalogItem | None:
        return self.items.get(digest)

    def predicate(self, digest: str) -> dict[str, Any]:
        if digest not in self._predicates:
            from trajledger.verify.dsse import Envelope
            from trajledger.verify.errors import ProvenanceError
            from trajledger.verify.statement import Statement

            item = self.items.get(digest)
            p: dict[str, Any] = {}
            if item is not None:
                try:
                    env = Envelope.from_bytes(self.ledger.store.get(item.envelope))
                    p = Statement.from_bytes(env.payload).predicate
                except ProvenanceError:
                    p = {}
            self._predicates[digest] = p
        return self._predicates[digest]

    def upstream(self, digest: str) -> list[tuple[str, str]]:
        """``(dependency digest, role)`` pairs of one artifact."""
        item = self.items.get(digest)
        if item is None:
            return []
        p = self.predicate(digest)
        out: list[tuple[str, str]] = []
        if item.kind == "checkpoint":
            deps = (p.get("buildDefinition") or {}).get("resolvedDependencies") or []
            for d in deps:
                sha = (d.get("digest") or {}).get("sha256") if isinstance(d, dict) else None
                role = (
                    (d.get("annotations") or {}).get("role") if isinstance(d, dict) else None
                ) or ""
                if sha and role in ("dataset", "environment", "evaluator", "base-checkpoint"):
                    out.append(("sha256:" + sha, role))
        elif item.kind == "dataset":
            out += [(str(b), "batch") for b in p.get("batches", [])]
        elif item.kind == "rollout-batch":
            for role in ("environment", "evaluator"):
                ref = p.get(role)
                if isinstance(ref, dict) and ref.get("digest"):
                    out.append((str(ref["digest"]), role))
            pv = p.get("policyVersion")
            if isinstance(pv, str) and pv in self.items and self.items[pv].kind == "checkpoint":
                out.append((pv, "generated-by"))
        return out

    def downstream_index(self) -> dict[str, list[tuple[str, str]]]:
        """For every artifact, the artifacts that depend on it: ``{dst: [(src, role)]}``."""
        users: dict[str, list[tuple[str, str]]] = {}
        for digest in self.items:
            for dep, role in self.upstream(digest):
                users.setdefault(dep, []).append((digest, role))
        return users


def _node(reader: _Reader, digest: str) -> Node:
    from trajledger.verify.log_entry import LogEntry

    item = reader.item(digest)
    if item is None:
        return Node(
            digest, "unknown", digest[:19] + "…", "", -1, [], "failed", "not recorded in the log"
        )
    entry = LogEntry.from_bytes(reader.ledger.log.entry(item.index))
    return Node(
        digest, item.kind, item.name, item.version, item.index, [s[:16] for s in entry.signers]
    )


def _walk(reader: _Reader, root: str, step: Any, direction: str) -> Graph:
    graph = Graph(root, direction)
    todo = [root]
    while todo:
        digest = todo.pop()
        if digest in graph.nodes:
            continue
        graph.nodes[digest] = _node(reader, digest)
        for other, role in step(digest):
            if direction == "upstream":
                graph.edges.append(Edge(digest, other, role))
            else:
                graph.edges.append(Edge(other, digest, role))
            todo.append(other)
    return graph


def _statuses(graph: Graph, verifier: LineageVerifier) -> None:
    """Fill each node's status from the verifier's check of that artifact."""
    from trajledger.verify.lineage import ERASED

    for node in graph.nodes.values():
        if node.kind == "unknown":
            continue
        check = verifier.artifact(node.digest, node.kind)
        failures = check.failures()
        flags = [c for c in check.children if c.what in ("revoked", "erased")]
        if any(c.what == "revoked" for c in flags):
            node.status, node.detail = (
                "revoked",
                next(c.detail for c in flags if c.what == "revoked"),
            )
        elif failures:
            node.status, node.detail = "failed", failures[0]
        elif any(c.status == ERASED for c in flags):
            node.status, node.detail = "erased", next(c.detail for c in flags if c.status == ERASED)
        else:
            node.status = "verified"


def _verifier(ledger: Ledger, policy: TrustPolicy) -> LineageVerifier:
    from trajledger.ledger.evidence import ledger_evidence
    from trajledger.verify.lineage import LineageVerifier

    return LineageVerifier(ledger_evidence(ledger), policy)


def lineage(ledger: Ledger, ref: str, policy: TrustPolicy | None = None) -> Graph:
    """The upstream graph of ``ref``: everything that made it. Statuses when a policy is given."""
    reader = _Reader(ledger)
    root = reader.catalog.resolve(ref).digest
    graph = _walk(reader, root, reader.upstream, "upstream")
    if policy is not None:
        _statuses(graph, _verifier(ledger, policy))
    return graph


def impact(ledger: Ledger, ref: str, policy: TrustPolicy | None = None) -> Graph:
    """The downstream graph of ``ref``: every dataset, checkpoint and batch it reached."""
    reader = _Reader(ledger)
    root = reader.catalog.resolve(ref).digest
    users = reader.downstream_index()
    graph = _walk(reader, root, lambda d: users.get(d, []), "downstream")
    if policy is not None:
        _statuses(graph, _verifier(ledger, policy))
    return graph


# -- rendering ---------------------------------------------------------------------------------

_MARK = {
    "verified": "✓",
    "failed": "✗",
    "revoked": "✗ revoked",
    "erased": "∅ erased",
    "unverified": "·",
}
_COLOR = {
    "verified": "#2e7d32",
    "failed": "#c62828",
    "revoked": "#c62828",
    "erased": "#6d6d6d",
    "unverified": "#455a64",
}


def _children(graph: Graph) -> dict[str, list[Edge]]:
    out: dict[str, list[Edge]] = {}
    for e in graph.edges:
        key = e.src if graph.direction == "upstream" else e.dst
        out.setdefault(key, []).append(e)
    return out


def render_text(graph: Graph) -> str:
    """An indented tree; a node reached twice is expanded once."""
    kids = _children(graph)
    lines: list[str] = []
    seen: set[str] = set()

    def walk(digest: str, role: str, indent: str) -> None:
        n = graph.nodes[digest]
        where = f"log #{n.index}" if n.index >= 0 else "not logged"
        head = f"{indent}{_MARK[n.status]} {n.label} {digest[:19]}… ({where}"
        head += f", signed by {', '.join(n.signers)})" if n.signers else ")"
        if role:
            head = f"{indent}[{role}] " + head[len(indent) :]
        if n.detail and n.status != "verified":
            head += f" — {n.detail}"
        if digest in seen and kids.get(digest):
            lines.append(head + " (shown above)")
            return
        seen.add(digest)
        lines.append(head)
        for e in kids.get(digest, []):
            walk(e.dst if graph.direction == "upstream" else e.src, e.role, indent + "  ")

    walk(graph.root, "", "")
    return "\n".join(lines)


def _ident(digest: str) -> str:
    return "n" + digest.removeprefix("sha256:")[:12]


def render_mermaid(graph: Graph) -> str:
    """A Mermaid flowchart (arrows point from an artifact to what it was made from)."""
    lines = ["flowchart TD"]
    for n in graph.nodes.values():
        label = f"{n.label}<br/>{n.digest[:19]}…<br/>log #{n.index} · {n.status}".replace('"', "'")
        lines.append(f'  {_ident(n.digest)}["{label}"]')
        lines.append(f"  class {_ident(n.digest)} {n.status}")
    for e in graph.edges:
        lines.append(f"  {_ident(e.src)} -->|{e.role}| {_ident(e.dst)}")
    for status, color in _COLOR.items():
        lines.append(f"  classDef {status} stroke:{color},stroke-width:2px")
    return "\n".join(lines)


def render_dot(graph: Graph) -> str:
    """A Graphviz digraph."""
    lines = ["digraph lineage {", "  rankdir=BT;", '  node [shape=box, fontname="Helvetica"];']
    for n in graph.nodes.values():
        label = f"{n.label}\\n{n.digest[:19]}…\\nlog #{n.index} · {n.status}".replace('"', "'")
        lines.append(f'  {_ident(n.digest)} [label="{label}", color="{_COLOR[n.status]}"];')
    for e in graph.edges:
        lines.append(f'  {_ident(e.src)} -> {_ident(e.dst)} [label="{e.role}"];')
    lines.append("}")
    return "\n".join(lines)


def render_html(graph: Graph) -> str:
    """One self-contained HTML page: the graph drawn as layered SVG, and a table of nodes."""
    layers = _layers(graph)
    box_w, box_h, gap_x, gap_y = 230, 62, 30, 70
    width = (
        max(len(layer) for layer in layers) * (box_w + gap_x) + gap_x + 40 + 14 * len(graph.edges)
    )
    height = len(layers) * (box_h + gap_y) + gap_y
    pos: dict[str, tuple[int, int]] = {}
    for depth, layer in enumerate(layers):
        offset = (width - len(layer) * (box_w + gap_x) + gap_x) // 2
        for i, digest in enumerate(layer):
            pos[digest] = (offset + i * (box_w + gap_x), gap_y + depth * (box_h + gap_y))
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#90a4ae"/></marker></defs>',
    ]
    depth_of = {d: k for k, layer in enumerate(layers) for d in layer}
    detour = 0
    for e in graph.edges:
        (x1, y1), (x2, y2) = pos[e.src], pos[e.dst]
        span = abs(depth_of[e.src] - depth_of[e.dst])
        if span <= 1:
            a = (x1 + box_w // 2, y1 + box_h) if y2 > y1 else (x1 + box_w // 2, y1)
            b = (x2 + box_w // 2, y2) if y2 > y1 else (x2 + box_w // 2, y2 + box_h)
            svg.append(
                f'<line x1="{a[0]}" y1="{a[1]}" x2="{b[0]}" y2="{b[1]}" stroke="#90a4ae" '
                'stroke-width="1.5" marker-end="url(#arrow)"/>'
            )
            label_at = ((a[0] + b[0]) // 2 + 4, (a[1] + b[1]) // 2)
        else:
            # Edges that skip layers go around the right side, each a little further out.
            detour += 1
            a = (x1 + box_w, y1 + box_h // 2)
            b = (x2 + box_w, y2 + box_h // 2)
            bulge = max(x1, x2) + box_w + 18 + 14 * detour
            svg.append(
                f'<path d="M {a[0]} {a[1]} C {bulge} {a[1]}, {bulge} {b[1]}, {b[0]} {b[1]}" '
                'fill="none" stroke="#b0bec5" stroke-width="1.2" stroke-dasharray="4 3" '
                'marker-end="url(#arrow)"/>'
            )
            label_at = (int(bulge * 0.75 + a[0] * 0.25) + 2, (a[1] + b[1]) // 2)
        svg.append(
            f'<text x="{label_at[0]}" y="{label_at[1]}" class="role">{html.escape(e.role)}</text>'
        )
    for digest, (x, y) in pos.items():
        n = graph.nodes[digest]
        color = _COLOR[n.status]
        title = html.escape(
            f"{n.label}\n{n.digest}\nlog index {n.index}\nsigners: {', '.join(n.signers)}\n"
            f"{n.status}: {n.detail}"
        )
        svg.append(
            f'<g><title>{title}</title><rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" '
            f'rx="8" fill="#fff" stroke="{color}" stroke-width="2.5"/>'
        )
        svg.append(f'<text x="{x + 10}" y="{y + 20}" class="kind">{html.escape(n.kind)}</text>')
        name = html.escape(_short(n.label.split(" ", 1)[-1], 28))
        svg.append(f'<text x="{x + 10}" y="{y + 38}" class="name">{name}</text>')
        meta = f"{_MARK[n.status]} · log #{n.index} · {n.digest[7:19]}"
        svg.append(
            f'<text x="{x + 10}" y="{y + 54}" class="meta" fill="{color}">'
            f"{html.escape(meta)}</text></g>"
        )
    svg.append("</svg>")
    rows = "".join(
        f"<tr><td>{html.escape(n.kind)}</td><td>{html.escape(n.label.split(' ', 1)[-1])}</td>"
        f"<td><code>{html.escape(n.digest)}</code></td><td>{n.index}</td>"
        f"<td><code>{html.escape(', '.join(n.signers))}</code></td>"
        f'<td style="color:{_COLOR[n.status]}"><b>{html.escape(n.status)}</b> '
        f"{html.escape(n.detail)}</td></tr>"
        for n in sorted(graph.nodes.values(), key=lambda n: n.index)
    )
    root = graph.nodes[graph.root]
    title = f"{'Lineage' if graph.direction == 'upstream' else 'Impact'} of {root.label}"
    summary = ", ".join(
        f"{sum(1 for n in graph.nodes.values() if n.status == s)} {s}"
        for s in _COLOR
        if any(n.status == s for n in graph.nodes.values())
    )
    heading = (
        f'<p class="sub"><code>{html.escape(root.digest)}</code> · {len(graph.nodes)} artifacts · '
        f"{html.escape(summary)}</p>"
    )
    head = "<tr>" + "".join(
        f"<th>{h}</th>" for h in ("kind", "name", "digest", "log index", "signers", "status")
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n{heading}\n{''.join(svg)}\n"
        f"<table>{head}</tr>{rows}</table>\n"
        '<p class="sub">Made by trajledger. Statuses come from verifying each artifact\'s '
        "signatures, log inclusion, approvals and data against the trust policy.</p>\n"
        "</body></html>\n"
    )


_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2rem;color:#263238}
h1{font-size:1.4rem} .sub{color:#607d8b}
svg{max-width:100%;height:auto;border:1px solid #eceff1;border-radius:8px;background:#fafafa}
text.kind{font-size:11px;fill:#607d8b;text-transform:uppercase;letter-spacing:.05em}
text.name{font-size:13px;font-weight:600;fill:#263238}
text.meta{font-size:11px} text.role{font-size:10px;fill:#78909c}
table{border-collapse:collapse;margin-top:1.5rem;font-size:13px}
td,th{border-bottom:1px solid #eceff1;padding:6px 10px;text-align:left;vertical-align:top}
code{font-size:12px;word-break:break-all}
"""


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _layers(graph: Graph) -> list[list[str]]:
    """Nodes by distance from the root (longest path, so dependencies sit below users)."""
    kids = _children(graph)
    depth: dict[str, int] = {graph.root: 0}
    changed = True
    rounds = 0
    while changed and rounds <= len(graph.nodes):
        changed, rounds = False, rounds + 1
        for src, edges in kids.items():
            if src not in depth:
                continue
            for e in edges:
                other = e.dst if graph.direction == "upstream" else e.src
                if depth.get(other, -1) < depth[src] + 1:
                    depth[other] = depth[src] + 1
                    changed = True
    out: list[list[str]] = [[] for _ in range(max(depth.values()) + 1)]
    for digest in graph.nodes:
        out[depth.get(digest, 0)].append(digest)
    for layer in out:
        layer.sort(key=lambda d: (graph.nodes[d].kind, graph.nodes[d].index))
    return out


def render(graph: Graph, fmt: str) -> str:
    """Render in one of `FORMATS`."""
    if fmt == "json":
        return json.dumps(graph.to_json(), sort_keys=True, indent=2)
    return {"text": render_text, "mermaid": render_mermaid, "dot": render_dot, "html": render_html}[
        fmt
    ](graph)


def affected(graph: Graph, kinds: Iterable[str] = ("checkpoint",)) -> list[Node]:
    """Nodes of the given kinds in a graph, in log order (e.g. checkpoints a batch reached)."""
    wanted = set(kinds)
    return sorted(
        (n for n in graph.nodes.values() if n.kind in wanted and n.digest != graph.root),
        key=lambda n: n.index,
    )
