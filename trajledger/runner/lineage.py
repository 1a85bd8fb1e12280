"""Lineage (upstream) and impact (downstream) of recorded artifacts, and their renderings.

Scope: ``trajledger lineage`` and ``trajledger impact`` answer audit questions with the same
verified graph `trajledger verify` builds (`verify.lineage.Report`: one node per artifact, each
verified once, edges with roles): what made an artifact (a checkpoint's datasets, their batches,
the batches' environments, evaluators and generating checkpoints, parent checkpoints...), or what
an artifact reached (a batch's datasets, the checkpoints trained on them, the rollouts those
checkpoints generated, and onwards, found through the user's index of the log in O(downstream)).
Renders as text, JSON (the report's node table and edge list), Mermaid, DOT or one
self-contained HTML page.
Non-scope: deciding trust (the verifier does).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trajledger.ledger.home import Ledger
    from trajledger.verify.lineage import Node, Report
    from trajledger.verify.policy import TrustPolicy

__all__ = ["affected", "impact", "lineage", "render"]

FORMATS = ("text", "json", "mermaid", "dot", "html")


def lineage(ledger: Ledger, ref: str, policy: TrustPolicy) -> Report:
    """The upstream graph of ``ref``: everything that made it, verified under ``policy``."""
    from .verification import verify_ref

    return verify_ref(ledger, ref, policy)


def impact(ledger: Ledger, ref: str, policy: TrustPolicy) -> Report:
    """The downstream graph of ``ref``: every artifact whose lineage includes it, verified."""
    from trajledger.ledger.catalog import Catalog

    from .verification import ledger_verifier

    item = Catalog(ledger).resolve(ref)
    return ledger_verifier(ledger, policy).impact(item.digest)


def _status(node: Node, failing: set[str]) -> str:
    if any(c.what == "revoked" and c.status == "fail" for c in node.checks):
        return "revoked"
    if node.ok and node.id in failing:
        return "lineage fails"
    return {"ok": "verified", "fail": "failed", "erased": "erased"}[node.status]


def _detail(node: Node, failing: set[str]) -> str:
    for c in node.checks:
        if c.status == "fail" or (c.status == "erased" and node.status != "fail"):
            return f"{c.what}: {c.detail}"
    if node.id in failing:
        return "built on an artifact that fails"
    return ""


def _artifacts(report: Report) -> list[Node]:
    return [n for n in report.nodes.values() if n.kind not in ("log", "bundle", "admission")]


# -- rendering ---------------------------------------------------------------------------------

_MARK = {
    "verified": "✓",
    "failed": "✗",
    "revoked": "✗ revoked",
    "lineage fails": "✗ lineage",
    "erased": "∅ erased",
    "unverified": "·",
}
_COLOR = {
    "verified": "#2e7d32",
    "failed": "#c62828",
    "revoked": "#c62828",
    "lineage fails": "#c62828",
    "erased": "#6d6d6d",
    "unverified": "#455a64",
}


def _edges(report: Report) -> list[tuple[str, str, str]]:
    """``(from, to, role)`` between artifacts, always from the depending artifact."""
    ids = {n.id for n in _artifacts(report)}
    return [(e.src, e.dst, e.role) for e in report.edges if e.src in ids and e.dst in ids]


def _ident(digest: str) -> str:
    return "n" + digest.removeprefix("sha256:")[:12]


def _index(n: Node) -> str:
    return f"log #{n.index}" if n.index is not None else "not logged"


def render_mermaid(report: Report) -> str:
    """A Mermaid flowchart (arrows point from an artifact to what it was made from)."""
    lines = ["flowchart TD"]
    failing = report.failing()
    for n in _artifacts(report):
        st = _status(n, failing).replace(" ", "-")
        label = f"{_title(n)}<br/>{n.id[:19]}…<br/>{_index(n)} · {st}".replace('"', "'")
        lines.append(f'  {_ident(n.id)}["{label}"]')
        lines.append(f"  class {_ident(n.id)} {st}")
    for src, dst, role in _edges(report):
        lines.append(f"  {_ident(src)} -->|{role}| {_ident(dst)}")
    for status, color in _COLOR.items():
        lines.append(f"  classDef {status.replace(' ', '-')} stroke:{color},stroke-width:2px")
    return "\n".join(lines)


def render_dot(report: Report) -> str:
    """A Graphviz digraph."""
    lines = ["digraph lineage {", "  rankdir=BT;", '  node [shape=box, fontname="Helvetica"];']
    failing = report.failing()
    for n in _artifacts(report):
        st = _status(n, failing)
        label = f"{_title(n)}\\n{n.id[:19]}…\\n{_index(n)} · {st}".replace('"', "'")
        lines.append(f'  {_ident(n.id)} [label="{label}", color="{_COLOR[st]}"];')
    for src, dst, role in _edges(report):
        lines.append(f'  {_ident(src)} -> {_ident(dst)} [label="{role}"];')
    lines.append("}")
    return "\n".join(lines)


def _title(n: Node) -> str:
    return f"{n.kind} {n.name}@{n.version}" if n.version else f"{n.kind} {n.name}"


def render_html(report: Report) -> str:
    """One self-contained HTML page: the graph drawn as layered SVG, and a table of nodes."""
    nodes = {n.id: n for n in _artifacts(report)}
    failing = report.failing()
    edges = _edges(report)
    layers = _layers(report, nodes, edges)
    box_w, box_h, gap_x, gap_y = 230, 62, 30, 70
    width = max(len(layer) for layer in layers) * (box_w + gap_x) + gap_x + 40 + 14 * len(edges)
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
    for src, dst, role in edges:
        (x1, y1), (x2, y2) = pos[src], pos[dst]
        span = abs(depth_of[src] - depth_of[dst])
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
            f'<text x="{label_at[0]}" y="{label_at[1]}" class="role">{html.escape(role)}</text>'
        )
    for digest, (x, y) in pos.items():
        n = nodes[digest]
        st = _status(n, failing)
        color = _COLOR[st]
        title = html.escape(
            f"{_title(n)}\n{n.id}\n{_index(n)}\nsigners: {', '.join(n.signers)}\n"
            f"{st}: {_detail(n, failing)}"
        )
        svg.append(
            f'<g><title>{title}</title><rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" '
            f'rx="8" fill="#fff" stroke="{color}" stroke-width="2.5"/>'
        )
        svg.append(f'<text x="{x + 10}" y="{y + 20}" class="kind">{html.escape(n.kind)}</text>')
        name = html.escape(_short(_title(n).split(" ", 1)[-1], 28))
        svg.append(f'<text x="{x + 10}" y="{y + 38}" class="name">{name}</text>')
        meta = f"{_MARK[st]} · {_index(n)} · {n.id[7:19]}"
        svg.append(
            f'<text x="{x + 10}" y="{y + 54}" class="meta" fill="{color}">'
            f"{html.escape(meta)}</text></g>"
        )
    svg.append("</svg>")
    rows = "".join(
        f"<tr><td>{html.escape(n.kind)}</td><td>{html.escape(_title(n).split(' ', 1)[-1])}</td>"
        f"<td><code>{html.escape(n.id)}</code></td><td>{_index(n)}</td>"
        f"<td><code>{html.escape(', '.join(s[:16] for s in n.signers))}</code></td>"
        f'<td style="color:{_COLOR[_status(n, failing)]}"><b>'
        f"{html.escape(_status(n, failing))}</b> {html.escape(_detail(n, failing))}</td></tr>"
        for n in sorted(nodes.values(), key=lambda n: -1 if n.index is None else n.index)
    )
    root = report.nodes[report.subject]
    title = f"{'Lineage' if report.direction == 'upstream' else 'Impact'} of {_title(root)}"
    statuses = [_status(n, failing) for n in nodes.values()]
    summary = ", ".join(f"{statuses.count(s)} {s}" for s in _COLOR if s in statuses)
    verdict = report.verdict()
    causes = "".join(
        f"<li><b>{html.escape(n.label)}</b> &gt; {html.escape(c.what)}: "
        f"{html.escape(c.detail)}</li>"
        for n in report.nodes.values() for c in n.checks if c.status == "fail"
    )
    heading = (
        f'<p class="verdict {"ok" if report.ok else "fail"}">{html.escape(verdict)}</p>\n'
        + (f'<p>Root cause(s):</p><ul class="causes">{causes}</ul>\n' if causes else "")
        + f'<p class="sub"><code>{html.escape(root.id)}</code> · {len(nodes)} artifacts · '
        f"{html.escape(summary)}</p>"
    )
    head = "<tr>" + "".join(
        f"<th>{h}</th>" for h in ("kind", "name", "digest", "log index", "signers", "status")
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style></head><body>\n"
        f"{heading}\n<h1>{html.escape(title)}</h1>\n{''.join(svg)}\n"
        f"<table>{head}</tr>{rows}</table>\n"
        '<p class="sub">Made by trajledger. Statuses come from verifying each artifact\'s '
        "signatures, log inclusion, approvals and data against the trust policy.</p>\n"
        "</body></html>\n"
    )


_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2rem;color:#263238}
h1{font-size:1.4rem} .sub{color:#607d8b}
.verdict{font-size:1.1rem;font-weight:700;padding:.5rem .8rem;border-radius:6px}
.verdict.ok{color:#2e7d32;background:#e8f5e9} .verdict.fail{color:#c62828;background:#ffebee}
ul.causes{color:#c62828}
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


def _layers(
    report: Report, nodes: dict[str, Node], edges: list[tuple[str, str, str]]
) -> list[list[str]]:
    """Nodes by distance from the subject (longest path, so dependencies sit below users)."""
    up = report.direction == "upstream"
    kids: dict[str, list[str]] = {}
    for src, dst, _role in edges:
        kids.setdefault(src if up else dst, []).append(dst if up else src)
    depth: dict[str, int] = {report.subject: 0}
    changed = True
    rounds = 0
    while changed and rounds <= len(nodes):
        changed, rounds = False, rounds + 1
        for src, others in kids.items():
            if src not in depth:
                continue
            for other in others:
                if depth.get(other, -1) < depth[src] + 1:
                    depth[other] = depth[src] + 1
                    changed = True
    out: list[list[str]] = [[] for _ in range(max(depth.values()) + 1)]
    for digest in nodes:
        out[depth.get(digest, 0)].append(digest)
    for layer in out:
        layer.sort(key=lambda d: (nodes[d].kind, nodes[d].index or 0))
    return [layer for layer in out if layer] or [[]]


def render(report: Report, fmt: str) -> str:
    """Render in one of `FORMATS`."""
    if fmt == "json":
        return json.dumps(report.to_json(), sort_keys=True, indent=2)
    if fmt == "text":
        return "\n".join(report.render())
    return {"mermaid": render_mermaid, "dot": render_dot, "html": render_html}[fmt](report)


def affected(report: Report, kinds: Iterable[str] = ("checkpoint",)) -> list[Node]:
    """Nodes of the given kinds in a report, in log order (e.g. checkpoints a batch reached)."""
    wanted = set(kinds)
    return sorted(
        (n for n in report.nodes.values() if n.kind in wanted and n.id != report.subject),
        key=lambda n: -1 if n.index is None else n.index,
    )
