"""Lineage (upstream) and impact (downstream) of recorded artifacts, and their renderings.

Scope: ``trajledger lineage`` and ``trajledger impact`` answer audit questions with the same
verified graph `trajledger verify` builds (`verify.lineage.Report`: one node per artifact, each
verified once, edges with roles): what made an artifact (a checkpoint's datasets, their batches,
the batches' environments, evaluators and generating checkpoints, parent checkpoints...), or what
an artifact reached (a batch's datasets, the checkpoints trained on them, the rollouts those
checkpoints generated, and onwards, found through the user's index of the log in O(downstream)).
Both carry the records about their artifacts that are not nodes (approvals, revocations,
erasures, evaluations, releases...: `verify.marks.Mark`, found generically from the kinds).

Renders as text, JSON (the report's node table, edge list and records), Mermaid, DOT or one
self-contained HTML page. Every picture gives each artifact a distinct short name (cut where
long names differ, not at a fixed width: `lineage_layout.short_names`) with its full name on
hover, and draws the records beside what they are about, with dashed edges. The HTML page is
laid out here (`lineage_layout.layout`: no two boxes or labels overlap); Mermaid and Graphviz
lay out their own.
Non-scope: deciding trust (the verifier does).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from trajledger.ledger.catalog import named_json

# (the pictures' layout and `html` load where a picture is drawn: `verify` and `lineage` print
# text, walk50)
if TYPE_CHECKING:
    from trajledger.ledger.home import LedgerHome
    from trajledger.verify.lineage import Node, Report
    from trajledger.verify.marks import Mark
    from trajledger.verify.policy import TrustPolicy

    from .lineage_layout import Layout, Rect
    from .revokers import Revoker

__all__ = ["affected", "impact", "incomplete", "lineage", "named_json", "qualified", "render"]

FORMATS = ("text", "json", "mermaid", "dot", "html")


def lineage(ledger: LedgerHome, ref: str, policy: TrustPolicy) -> Report:
    """The upstream graph of ``ref``: everything that made it, verified under ``policy``, with
    the records about it."""
    from trajledger.ledger.catalog import Catalog
    from trajledger.verify.impact import with_records

    from .verification import chosen, ledger_verifier, verify_naming_files

    item = Catalog(ledger).resolve(ref)
    verifier = chosen(ledger_verifier(ledger, policy), item)
    return with_records(verifier, verify_naming_files(verifier, item.digest))


def impact(ledger: LedgerHome, ref: str, policy: TrustPolicy) -> Report:
    """The downstream graph of ``ref``: every artifact whose lineage includes it, verified, with
    the records about them."""
    from trajledger.ledger.catalog import Catalog
    from trajledger.verify.impact import impact as verify_impact
    from trajledger.verify.impact import with_records

    from .verification import chosen, ledger_verifier

    item = Catalog(ledger).resolve(ref)
    verifier = chosen(ledger_verifier(ledger, policy), item)
    return with_records(verifier, verify_impact(verifier, item.digest))


def qualified(ledger: LedgerHome, report: Report) -> dict[str, str]:
    """`catalog.qualified_nodes`: the origin-qualified names of ``report``'s imported nodes
    whose plain names name other records here (out49)."""
    from trajledger.ledger.catalog import qualified_nodes

    return qualified_nodes(ledger, report)


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


def _escaped(report: Report) -> Report:
    """A copy of ``report`` whose signed strings (names, versions, checks, what records say)
    are escaped as the text report escapes them (`verify.report.HIDDEN`): a signer's control
    characters, line separators and bidirectional controls cannot break a picture's strings
    or reorder what a reader sees in them."""
    from dataclasses import replace

    from trajledger.verify.report import HIDDEN

    def seen(text: str) -> str:
        return text.translate(HIDDEN)

    nodes = {nid: replace(n, name=seen(n.name), version=seen(n.version), checks=[
        replace(c, what=seen(c.what), detail=seen(c.detail)) for c in n.checks])
        for nid, n in report.nodes.items()}
    return replace(report, nodes=nodes,
                   records=[replace(m, detail=seen(m.detail)) for m in report.records])


def _artifacts(report: Report) -> list[Node]:
    return [n for n in report.nodes.values() if n.kind not in ("log", "bundle", "admission")]


# -- what every picture shows ------------------------------------------------------------------

_MARK = {
    "verified": "✓",
    "failed": "✗",
    "revoked": "✗ revoked",
    "lineage fails": "✗ lineage",
    "erased": "∅ erased",
    "unverified": "·",
}
_RECORD_MARK = {"ok": "·", "info": "· ignored", "fail": "✗ unreadable"}
_COLOR = {
    "verified": "#2e7d32",
    "failed": "#c62828",
    "revoked": "#c62828",
    "lineage fails": "#c62828",
    "erased": "#6d6d6d",
    "unverified": "#455a64",
}
_RECORD_COLOR = {"ok": "#546e7a", "info": "#9e9e9e", "fail": "#c62828"}

NAME_CHARS = 28
"""The most characters of an artifact's short name in a picture (`short_names`)."""


def _edges(report: Report) -> list[tuple[str, str, str]]:
    """``(from, to, role)`` between artifacts, always from the depending artifact."""
    ids = {n.id for n in _artifacts(report)}
    return [(e.src, e.dst, e.role) for e in report.edges if e.src in ids and e.dst in ids]


def _full_name(n: Node) -> str:
    if n.name:
        return f"{n.name}@{n.version}" if n.version else n.name
    return n.id


def _tags(ids: Iterable[str]) -> dict[str, str]:
    """The shortest digest prefixes (6 hex digits or more) that tell these digests apart."""
    hexes = {i: i.removeprefix("sha256:") for i in ids}
    for n in range(6, 65):
        tags = {i: h[:n] for i, h in hexes.items()}
        if len(set(tags.values())) == len(tags):
            return tags
    return hexes


class _Picture:
    """What every format draws: the artifacts with distinct short names, their status, the
    records about them, and the edges between them all."""

    def __init__(self, report: Report) -> None:
        from .lineage_layout import short_names

        self.report = report
        self.nodes = {n.id: n for n in _artifacts(report)}
        self.failing = report.failing()
        self.edges = _edges(report)
        self.records: list[Mark] = [m for m in report.records
                                    if any(i in self.nodes for i, _ in m.about)]
        full = {nid: _full_name(n) for nid, n in self.nodes.items()}
        self.full = full
        self.short = short_names(full, NAME_CHARS, _tags(self.nodes))
        self.ident = {nid: f"n{k}" for k, nid in enumerate(self.nodes)}
        self.ident |= {f"record:{m.index}": f"r{m.index}" for m in self.records}

    def status(self, n: Node) -> str:
        return _status(n, self.failing)

    def hover(self, n: Node) -> str:
        """The full name and facts of an artifact, for a tooltip."""
        st = self.status(n)
        why = _detail(n, self.failing)
        return (f"{n.kind} {self.full[n.id]}\n{n.id}\n{_index(n)}\nsigners: "
                f"{', '.join(n.signers) or '-'}\n{st}" + (f": {why}" if why else ""))

    def record_hover(self, m: Mark) -> str:
        """A record's facts, for a tooltip."""
        about = ", ".join(f"{role}: {self.nodes[i].kind} {self.full[i]}" for i, role in m.about
                          if i in self.nodes)
        return (f"{m.label}\nabout {about}\nsigners: {', '.join(m.signers) or '-'}\n"
                f"{m.status}: {m.detail}")

    def record_links(self) -> list[tuple[Mark, str, str]]:
        """``(record, artifact, role)`` for each artifact of the picture a record is about."""
        return [(m, i, role) for m in self.records for i, role in m.about if i in self.nodes]


def _index(n: Node) -> str:
    return f"log #{n.index}" if n.index is not None else "not logged"


def _mermaid(*lines: str) -> str:
    """Lines for a Mermaid string: names come from signed records, which anyone who signs can
    choose, so nothing in them may end the string or be read as HTML (entity codes for ``"``,
    ``<``, ``>``, ``&``, ``#``); lines joined by ``<br/>``."""
    codes = {"#": "#35;", "&": "#38;", '"': "#quot;", "<": "#lt;", ">": "#gt;"}
    return "<br/>".join("".join(codes.get(c, c) for c in line.replace("\n", " · "))
                        for line in lines)


def _dot(*lines: str) -> str:
    """Lines for a Graphviz string: backslashes and double quotes escaped (a name ending in a
    backslash must not escape the closing quote), lines joined by ``\\n``."""
    return "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " · ")
                       for line in lines)


def render_mermaid(report: Report) -> str:
    """A Mermaid flowchart (arrows point from an artifact to what it was made from; a record's
    dashed arrow to what it is about); each node's full name is its tooltip."""
    report = _escaped(report)
    pic = _Picture(report)
    lines = ["flowchart TD"]
    for nid, n in pic.nodes.items():
        st = pic.status(n).replace(" ", "-")
        label = _mermaid(n.kind, pic.short[nid], f"{_index(n)} · {_MARK[pic.status(n)]}")
        ident = pic.ident[nid]
        lines += [f'  {ident}["{label}"]', f"  class {ident} {st}",
                  f'  click {ident} href "#{ident}" "{_mermaid(pic.hover(n))}"']
    for m in pic.records:
        ident = pic.ident[f"record:{m.index}"]
        label = _mermaid(m.kind, f"log #{m.index} · {_RECORD_MARK[m.status]}")
        lines += [f'  {ident}(["{label}"])', f"  class {ident} record",
                  f'  click {ident} href "#{ident}" "{_mermaid(pic.record_hover(m))}"']
    for src, dst, role in pic.edges:
        lines.append(f"  {pic.ident[src]} -->|{role}| {pic.ident[dst]}")
    for m, nid, role in pic.record_links():
        lines.append(f"  {pic.ident[f'record:{m.index}']} -.->|{role}| {pic.ident[nid]}")
    for status, color in _COLOR.items():
        lines.append(f"  classDef {status.replace(' ', '-')} stroke:{color},stroke-width:2px")
    lines.append("  classDef record stroke:#90a4ae,stroke-dasharray:4 3")
    return "\n".join(lines)


def render_dot(report: Report) -> str:
    """A Graphviz digraph; each node's full name is its tooltip."""
    report = _escaped(report)
    pic = _Picture(report)
    lines = ["digraph lineage {", "  rankdir=BT;", '  node [shape=box, fontname="Helvetica"];']
    for nid, n in pic.nodes.items():
        st = pic.status(n)
        label = _dot(n.kind, pic.short[nid], f"{_index(n)} · {_MARK[st]}")
        lines.append(f'  {pic.ident[nid]} [label="{label}", tooltip="{_dot(pic.hover(n))}", '
                     f'color="{_COLOR[st]}"];')
    for m in pic.records:
        label = _dot(m.kind, f"log #{m.index} · {_RECORD_MARK[m.status]}")
        lines.append(f'  {pic.ident[f"record:{m.index}"]} [label="{label}", '
                     f'tooltip="{_dot(pic.record_hover(m))}", style="dashed,rounded", '
                     f'color="{_RECORD_COLOR[m.status]}"];')
    for src, dst, role in pic.edges:
        lines.append(f'  {pic.ident[src]} -> {pic.ident[dst]} [label="{role}"];')
    for m, nid, role in pic.record_links():
        lines.append(f'  {pic.ident[f"record:{m.index}"]} -> {pic.ident[nid]} '
                     f'[label="{role}", style=dashed];')
    lines.append("}")
    return "\n".join(lines)


# -- the HTML page -------------------------------------------------------------------------------

BOX = (232, 58)
"""An artifact's box in the HTML picture, px: kind, short name, status line."""
RECORD_BOX = (184, 52)
"""A record's box, px: kind, log index and signer, what it says."""
PAD = 10
"""Left padding of a box's text, px."""


def _fit(text: str, room: float, font: int) -> str:
    """``text`` cut with "…" to ``room`` px of the picture's monospace font."""
    from .lineage_layout import CHAR_EM

    most = max(1, int(room / (CHAR_EM * font)))
    return text if len(text) <= most else text[: most - 1] + "…"


def _drawn(pic: _Picture) -> list[tuple[str, str, str]]:
    """The edges the picture draws, in layers: every edge but those that close a loop. Only a
    false claim makes a loop (a checkpoint naming as its parent itself, or one built on it);
    the verifier fails the record that closes it, and the tables say why. Loops are found
    depth first from each artifact in turn, on a stack (a lineage may be thousands deep)."""
    out: dict[str, list[tuple[str, str, str]]] = {nid: [] for nid in pic.nodes}
    for e in pic.edges:
        out[e[0]].append(e)
    on_path: dict[str, bool] = {}  # each artifact reached: True while it is on the path
    back: set[tuple[str, str, str]] = set()
    for start in pic.nodes:
        if start in on_path:
            continue
        on_path[start] = True
        stack = [(start, iter(out[start]))]
        while stack:
            nid, todo = stack[-1]
            if (edge := next(todo, None)) is None:
                on_path[nid] = False
                stack.pop()
            elif on_path.get(edge[1]):
                back.add(edge)
            elif edge[1] not in on_path:
                on_path[edge[1]] = True
                stack.append((edge[1], iter(out[edge[1]])))
    return [e for e in pic.edges if e not in back]


def _layers(pic: _Picture, edges: list[tuple[str, str, str]]) -> dict[str, int]:
    """Each box's layer: an artifact's longest path from the subject (what it was made from
    below it; in an impact picture, what was built on it below it), along ``edges`` (`_drawn`);
    a record just on the users' side of what it is about (above it upstream, below
    downstream)."""
    up = pic.report.direction == "upstream"
    kids: dict[str, list[str]] = {}
    indegree = {nid: 0 for nid in pic.nodes}
    for src, dst, _role in edges:
        a, b = (src, dst) if up else (dst, src)
        kids.setdefault(a, []).append(b)
        indegree[b] += 1
    depth = {nid: 0 for nid in pic.nodes}
    todo = [nid for nid, d in indegree.items() if d == 0]
    while todo:  # in topological order: each node after everything above it
        a = todo.pop()
        for b in kids.get(a, []):
            depth[b] = max(depth[b], depth[a] + 1)
            indegree[b] -= 1
            if indegree[b] == 0:
                todo.append(b)
    for m in pic.records:
        at = [depth[i] for i, _ in m.about if i in pic.nodes]
        depth[f"record:{m.index}"] = min(at) - 1 if up else max(at) + 1
    low = min(depth.values(), default=0)
    return {k: d - low for k, d in depth.items()}


def _layout(pic: _Picture) -> Layout:
    from .lineage_layout import Link, layout

    up = pic.report.direction == "upstream"
    sizes = {nid: BOX for nid in pic.nodes} | {f"record:{m.index}": RECORD_BOX
                                                for m in pic.records}
    edges = _drawn(pic)
    links = [Link(src, dst, role, "lower") if up else Link(dst, src, role, "upper")
             for src, dst, role in edges]
    links += [Link(f"record:{m.index}", nid, role, "lower", dashed=True) if up
              else Link(nid, f"record:{m.index}", role, "upper", dashed=True)
              for m, nid, role in pic.record_links()]
    kinds = ["checkpoint", "dataset", "rollout-batch", "environment", "evaluator"]

    def order(box: str) -> tuple[int, int, str]:
        n = pic.nodes.get(box)
        if n is None:
            return (len(kinds) + 1, int(box.split(":")[1]), box)
        return (kinds.index(n.kind) if n.kind in kinds else len(kinds), n.index or 0, box)

    return layout(sizes, _layers(pic, edges), links, order)


def _curve(points: tuple[tuple[float, float], ...]) -> str:
    """An SVG path through ``points`` (top to bottom), each step a vertical S-curve."""
    (x0, y0), rest = points[0], points[1:]
    out = [f"M {x0:.1f} {y0:.1f}"]
    for x1, y1 in rest:
        mid = (y0 + y1) / 2
        out.append(f"C {x0:.1f} {mid:.1f}, {x1:.1f} {mid:.1f}, {x1:.1f} {y1:.1f}")
        x0, y0 = x1, y1
    return " ".join(out)


def render_svg(report: Report) -> str:
    """The picture as SVG: boxes, records, edges and their labels, as `lineage_layout` places
    them (no two boxes or labels overlap); each box's full name in its ``<title>`` (hover)."""
    import html

    from .lineage_layout import LABEL_FONT

    report = _escaped(report)
    pic = _Picture(report)
    placed = _layout(pic)
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{placed.width:.0f}" '
        f'height="{placed.height:.0f}" viewBox="0 0 {placed.width:.0f} {placed.height:.0f}" '
        'role="img">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#90a4ae"/></marker></defs>',
    ]
    for path in placed.paths:
        end = "marker-end" if path.link.arrow == "lower" else "marker-start"
        dash = ' stroke-dasharray="4 3"' if path.link.dashed else ""
        svg.append(f'<path class="edge" d="{_curve(path.points)}" fill="none" stroke="#90a4ae" '
                   f'stroke-width="1.3"{dash} {end}="url(#arrow)"/>')
    for nid, n in pic.nodes.items():
        r = placed.boxes[nid]
        st = pic.status(n)
        room = r.w - 2 * PAD
        meta = f"{_MARK[st]} · {_index(n)} · {nid[7:19]}"
        svg.append(_box("node", pic.ident[nid], pic.hover(n), r, _COLOR[st], [
            ("kind", _fit(n.kind, room, 10), 10, 16),
            ("name", _fit(pic.short[nid], room, 12), 12, 33),
            ("meta", _fit(meta, room, 10), 10, 48)], dashed=False))
    for m in pic.records:
        key = f"record:{m.index}"
        r = placed.boxes[key]
        room = r.w - 2 * PAD
        by = f" · {m.signers[0][:8]}" if m.signers else ""
        svg.append(_box("record", pic.ident[key], pic.record_hover(m), r,
                        _RECORD_COLOR[m.status], [
                            ("kind", _fit(m.kind, room, 10), 10, 15),
                            ("name", _fit(f"log #{m.index}{by}", room, 10), 10, 30),
                            ("meta", _fit(f"{_RECORD_MARK[m.status]} {m.detail}", room, 10),
                             10, 44)], dashed=True))
    for label in placed.labels:
        r = label.rect
        svg.append(
            f'<g class="label"><rect x="{r.x:.1f}" y="{r.y:.1f}" width="{r.w:.1f}" '
            f'height="{r.h:.1f}" rx="3" fill="#fff" stroke="#cfd8dc"/><text '
            f'x="{r.x + r.w / 2:.1f}" y="{r.y + r.h - 4:.1f}" text-anchor="middle" '
            f'font-size="{LABEL_FONT}">{html.escape(label.text)}</text></g>')
    svg.append("</svg>")
    return "".join(svg)


def _box(cls: str, ident: str, hover: str, r: Rect, color: str,
         lines: list[tuple[str, str, int, int]], *, dashed: bool) -> str:
    """One box: its hover title, its rectangle, and its lines of text, each ``(class, text,
    font px, baseline below the top)``."""
    import html

    dash = ' stroke-dasharray="5 3"' if dashed else ""
    width = 2.5 if cls == "node" else 1.5
    out = [f'<g class="{cls}" id="{ident}"><title>{html.escape(hover)}</title>'
           f'<rect x="{r.x:.1f}" y="{r.y:.1f}" width="{r.w:.1f}" height="{r.h:.1f}" rx="8" '
           f'fill="#fff" stroke="{color}" stroke-width="{width}"{dash}/>']
    for k, text, font, baseline in lines:
        bold = ' font-weight="600"' if k == "name" and cls == "node" else ""
        fill = f' fill="{color}"' if k == "meta" else ""
        out.append(f'<text class="{k}" x="{r.x + PAD:.1f}" y="{r.y + baseline:.1f}" '
                   f'font-size="{font}"{bold}{fill}>{html.escape(text)}</text>')
    return "".join(out) + "</g>"


def render_html(report: Report) -> str:
    """One self-contained HTML page: the verdict, the picture (`render_svg`), a table of the
    artifacts and one of the records."""
    import html

    report = _escaped(report)
    pic = _Picture(report)
    nodes = pic.nodes
    failing = pic.failing
    rows = "".join(
        f"<tr><td>{html.escape(n.kind)}</td><td>{html.escape(pic.full[n.id])}</td>"
        f"<td><code>{html.escape(n.id)}</code></td><td>{_index(n)}</td>"
        f"<td><code>{html.escape(', '.join(s[:16] for s in n.signers))}</code></td>"
        f'<td style="color:{_COLOR[_status(n, failing)]}"><b>'
        f"{html.escape(_status(n, failing))}</b> {html.escape(_detail(n, failing))}</td></tr>"
        for n in sorted(nodes.values(), key=lambda n: -1 if n.index is None else n.index)
    )
    records = "".join(
        f"<tr><td>{html.escape(m.kind)}</td><td>{m.index}</td><td>"
        + "<br>".join(html.escape(f"{role}: {nodes[i].kind} {pic.full[i]}")
                      for i, role in m.about if i in nodes)
        + f"</td><td><code>{html.escape(', '.join(s[:16] for s in m.signers))}</code></td>"
        f'<td style="color:{_RECORD_COLOR[m.status]}">{html.escape(m.detail)}</td></tr>'
        for m in pic.records
    )
    root = report.nodes[report.subject]
    name = f"{root.kind} {_full_name(root)}" if root.kind not in ("log", "bundle") else root.label
    title = f"{'Lineage' if report.direction == 'upstream' else 'Impact'} of {name}"
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
        f"{len(pic.records)} records · {html.escape(summary)}</p>"
    )
    head = "<tr>" + "".join(
        f"<th>{h}</th>" for h in ("kind", "name", "digest", "log index", "signers", "status")
    ) + "</tr>"
    record_head = "<tr>" + "".join(
        f"<th>{h}</th>" for h in ("record", "log index", "about", "signers", "says")) + "</tr>"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style></head><body>\n"
        f"{heading}\n<h1>{html.escape(title)}</h1>\n"
        '<p class="sub">Solid arrows point from an artifact to what it was made from; dashed '
        "ones from a record (approval, revocation, evaluation...) to what it is about. Hover "
        "over a box for its full name and digest.</p>\n"
        f'<div class="graph">{render_svg(report)}</div>\n'
        f"<table>{head}{rows}</table>\n"
        + (f"<h2>Records</h2>\n<table>{record_head}{records}</table>\n" if records else "")
        + f'<p class="sub">{html.escape(_made_from(report, root))}</p>\n'
        "</body></html>\n"
    )


def _made_from(report: Report, root: Node) -> str:
    """The page's last line: whose log and policy its statuses come from, and, for a lineage
    (a page handed to an auditor is a claim: out44 finding 3), how to check it without a
    ledger."""
    log = report.nodes.get("log")
    where = f" from the {log.name}" if log is not None and log.name.startswith("log ") else ""
    out = (f"Made by trajledger{where}. Statuses come from verifying each artifact's "
           "signatures, log inclusion, approvals and data against that ledger's trust policy")
    if report.direction != "upstream" or root.kind in ("log", "bundle"):
        return out + "."
    return out + (f": this page is a claim, not evidence. To check it, ask for the evidence "
                  f"bundle ('trajledger export {root.id}') and run 'python -m trajledger.verify "
                  f"BUNDLE --policy YOUR-POLICY --expect {root.id}' (your policy and the public "
                  "keys you trust; no ledger).")


_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2rem;color:#263238}
h1{font-size:1.4rem} h2{font-size:1.1rem} .sub{color:#607d8b}
.verdict{font-size:1.1rem;font-weight:700;padding:.5rem .8rem;border-radius:6px}
.verdict.ok{color:#2e7d32;background:#e8f5e9} .verdict.fail{color:#c62828;background:#ffebee}
ul.causes{color:#c62828}
.graph{overflow:auto;max-height:85vh;border:1px solid #eceff1;border-radius:8px;
background:#fafafa}
svg text{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;
fill:#263238}
svg text.kind{fill:#607d8b;text-transform:uppercase}
svg g.label text{fill:#78909c}
table{border-collapse:collapse;margin-top:1.5rem;font-size:13px}
td,th{border-bottom:1px solid #eceff1;padding:6px 10px;text-align:left;vertical-align:top}
code{font-size:12px;word-break:break-all}
"""


def render(report: Report, fmt: str, names: Mapping[str, str] | None = None,
           revoked: Sequence[Revoker] = ()) -> str:
    """Render in one of `FORMATS`; ``names``: the origin-qualified names of imported nodes
    after a clash (`qualified`), in place of their plain names, and in JSON as each node's
    ``qualifiedName`` (schemas/report.v1.md); ``revoked``: who revoked its revoked causes, in
    JSON as their ``revokedBy`` (`revokers.revokers`)."""
    if fmt == "json":
        from .revokers import with_json

        doc = with_json(named_json(report.to_json(), names), revoked)
        return json.dumps(doc, sort_keys=True, indent=2)
    if names:
        from trajledger.ledger.catalog import renamed

        report = renamed(report, names)
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


def incomplete(report: Report) -> list[str]:
    """Why an impact answer cannot be trusted to be complete, one line each (none: it can).

    A revoked, erased or unapproved artifact fails the answer's nodes, but the answer (what was
    built on REF) is whole. Damaged evidence is another matter: a record that cannot be read
    (`verify.judge.REPAIR_HINT` names the repair) may name REF, and a log that fails its checks
    may hold entries not shown; either can hide a user, so `impact` exits 1 on them."""
    from trajledger.verify.judge import REPAIR_HINT

    return [f"{node.label} > {c.what}: {c.detail}"
            for node, checks, _n in report.causes() for c in checks
            if node.id == "log" or REPAIR_HINT in c.detail]
