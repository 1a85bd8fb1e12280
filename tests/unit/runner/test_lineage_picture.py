"""The lineage picture at 100 nodes (issue 23 item 6): ``runner.lineage`` and its layout.

A generated lineage (ten training iterations, each a checkpoint trained on a dataset of eight
rollout batches with long names that differ only in the middle, two batches of one name, two
approvals per dataset, an evaluation per checkpoint, a revoked batch) is rendered; the tests read
the geometry the renderer emits (the SVG's rectangles and texts, not pixels) and check that every
artifact's short name is distinct with its full name on hover, that no two boxes or labels
overlap, that every text fits its box, and that approvals, evaluations and revocations are drawn
in every format.
"""

from __future__ import annotations

import hashlib
import json
import re
import xml.etree.ElementTree as ET

import pytest

from trajledger.runner.lineage import NAME_CHARS, render, render_svg
from trajledger.runner.lineage_layout import (
    CHAR_EM,
    Layout,
    Link,
    Rect,
    layout,
    overlaps,
    short_names,
)
from trajledger.verify.lineage import Edge, Node, Report
from trajledger.verify.marks import Mark

SVG = "{http://www.w3.org/2000/svg}"
KEY = "ab" * 32


def generated(iterations: int = 10, batches: int = 8) -> Report:
    """A lineage of ``iterations`` checkpoints, each trained on a dataset of ``batches``
    rollouts of the checkpoint before (102 artifacts with the defaults)."""
    nodes: dict[str, Node] = {}
    edges: list[Edge] = []
    marks: list[Mark] = []

    def add(kind: str, name: str, version: str = "") -> str:
        digest = "sha256:" + hashlib.sha256(f"{kind}/{name}/{version}/{len(nodes)}".encode()
                                            ).hexdigest()
        node = Node(digest, kind, name, version, index=len(nodes) * 3, signers=(KEY,))
        node.add("record", "ok", "signature, role and inclusion verified")
        nodes[digest] = node
        return digest

    env = add("environment", "cartpole-swingup-with-a-long-name", "1")
    judge = add("evaluator", "episode-return", "3")
    parent = None
    for it in range(iterations):
        members = []
        for w in range(batches):
            name = (f"rollouts-of-checkpoint-cartpole-bc-iteration-{it:03d}-worker-{w}-seed-1000"
                    if (it, w) not in ((0, 0), (0, 1)) else "cartpole-random")
            b = add("rollout-batch", name)
            edges += [Edge(b, env, "environment"), Edge(b, judge, "evaluator")]
            if parent is not None:
                edges.append(Edge(b, parent, "generated-by"))
            members.append(b)
        ds = add("dataset", "cartpole-train", str(it + 1))
        edges += [Edge(ds, b, "batch") for b in members]
        ck = add("checkpoint", "cartpole-bc", str(it + 1))
        edges += [Edge(ck, ds, "dataset"), Edge(ck, env, "environment"),
                  Edge(ck, judge, "evaluator")]
        if parent is not None:
            edges.append(Edge(ck, parent, "base-checkpoint"))
        marks += [Mark(1000 + 10 * it + a, "approval", ((ds, "approval"),), (KEY,), "ok",
                       "purpose: train; expires: 2030-01-01T00:00:00Z") for a in range(2)]
        marks.append(Mark(1005 + 10 * it, "evaluation", ((ck, "checkpoint"),), (KEY,), "ok",
                          "result: pass; metrics.success_rate: 0.95"))
        parent = ck
    revoked = members[min(3, len(members) - 1)]
    nodes[revoked].fail("revoked", "PII found (log index 2000)")
    marks.append(Mark(2000, "revocation", ((revoked, "revocation"),), (KEY,), "ok",
                      "reason: PII found"))
    assert parent is not None
    log = Node("log", "log", "log test/generated", index=None)
    log.add("checkpoint", "ok", "size 2100, signed by 1 of 1 trusted log key(s)")
    return Report(parent, ["log", parent], {"log": log, **nodes}, edges, "upstream", marks)


def boxes(svg: str) -> dict[str, tuple[Rect, dict[str, tuple[str, float, float, int]], str]]:
    """Each box group of the SVG: its rectangle, its texts by class (text, x, y, font px) and
    its hover title."""
    root = ET.fromstring(svg)
    out = {}
    for g in root.iter(f"{SVG}g"):
        if g.get("class") not in ("node", "record"):
            continue
        rect = g.find(f"{SVG}rect")
        assert rect is not None
        texts = {t.get("class", ""): (t.text or "", float(t.get("x", 0)), float(t.get("y", 0)),
                                      int(t.get("font-size", 0)))
                 for t in g.findall(f"{SVG}text")}
        title = g.find(f"{SVG}title")
        out[g.get("id", "")] = (_rect(rect), texts, title.text or "" if title is not None else "")
    return out


def labels(svg: str) -> list[tuple[Rect, str, float, int]]:
    """Each edge label: its rectangle, text, text centre x and font px."""
    out = []
    for g in ET.fromstring(svg).iter(f"{SVG}g"):
        if g.get("class") == "label":
            rect, text = g.find(f"{SVG}rect"), g.find(f"{SVG}text")
            assert rect is not None and text is not None
            out.append((_rect(rect), text.text or "", float(text.get("x", 0)),
                        int(text.get("font-size", 0))))
    return out


def _rect(e: ET.Element) -> Rect:
    return Rect(*(float(e.get(k, 0)) for k in ("x", "y", "width", "height")))


@pytest.fixture(scope="module")
def report() -> Report:
    return generated()


@pytest.fixture(scope="module")
def svg(report: Report) -> str:
    return render_svg(report)


def test_the_generated_lineage_has_100_nodes(report: Report) -> None:
    assert len(report.nodes) == 1 + 102 and len(report.records) == 31


def test_short_names_are_distinct_with_the_full_name_on_hover(report: Report, svg: str) -> None:
    drawn = {i: b for i, b in boxes(svg).items() if i.startswith("n")}
    artifacts = [n for n in report.nodes.values() if n.kind != "log"]
    assert len(drawn) == len(artifacts)
    names = [texts["name"][0] for _rect_, texts, _title in drawn.values()]
    assert len(set(names)) == len(names), sorted(n for n in names if names.count(n) > 1)
    assert all(len(n) <= NAME_CHARS for n in names)
    titles = [title for _rect_, _texts, title in drawn.values()]
    for node in artifacts:
        full = f"{node.kind} {node.name}@{node.version}" if node.version else \
            f"{node.kind} {node.name}"
        hover = [t for t in titles if t.splitlines()[1] == node.id]
        assert len(hover) == 1 and hover[0].splitlines()[0] == full
    # The series that differ in the middle keep the part that differs.
    series = sorted(n for n in names if "…" in n and "worker" in n)
    assert len(series) == 78 and len(set(series)) == 78
    assert "cartpole-random #" in " ".join(names)  # the two of one name, told apart


def test_no_boxes_or_labels_overlap_and_every_text_fits(svg: str) -> None:
    drawn = boxes(svg)
    placed = Layout(boxes={i: r for i, (r, _t, _h) in drawn.items()})
    edge_labels = labels(svg)
    from trajledger.runner.lineage_layout import Label

    placed.labels = [Label(text, rect, "") for rect, text, _x, _f in edge_labels]
    assert not overlaps(placed)
    for rect, texts, _title in drawn.values():
        for text, x, y, font in texts.values():
            assert rect.x <= x and x + len(text) * CHAR_EM * font <= rect.x + rect.w, text
            assert rect.y < y <= rect.y + rect.h, text
    for rect, text, cx, font in edge_labels:
        half = len(text) * CHAR_EM * font / 2
        assert rect.x <= cx - half and cx + half <= rect.x + rect.w, text
    root = ET.fromstring(svg)
    width, height = float(root.get("width", 0)), float(root.get("height", 0))
    for rect in [r for r, _t, _h in drawn.values()] + [r for r, *_ in edge_labels]:
        assert rect.x >= 0 and rect.x + rect.w <= width and rect.y >= 0
        assert rect.y + rect.h <= height


def test_the_overlap_check_finds_overlaps() -> None:
    placed = Layout(boxes={"a": Rect(0, 0, 10, 10), "b": Rect(9, 9, 10, 10),
                           "c": Rect(10, 0, 5, 5)})
    assert overlaps(placed) == ["box a overlaps box b"]


def test_labels_are_one_per_role_and_lower_box(svg: str) -> None:
    texts = [text for _r, text, _x, _f in labels(svg)]
    assert texts.count("batch") == 80 and texts.count("approval ×2") == 10
    assert texts.count("revocation") == 1 and texts.count("checkpoint") == 10
    # The 90 links to the environment (80 batches, 10 checkpoints) end at one label.
    assert texts.count("environment ×90") == 1 and texts.count("evaluator ×90") == 1
    assert texts.count("generated-by ×8") == 9 and texts.count("base-checkpoint") == 9
    assert len(texts) == 80 + 10 + 1 + 10 + 2 + 9 + 9 + 10  # + dataset, one per checkpoint


def test_records_are_drawn_in_every_format(report: Report, svg: str) -> None:
    drawn = boxes(svg)
    kinds = sorted(texts["kind"][0] for i, (_r, texts, _h) in drawn.items() if i.startswith("r"))
    assert kinds == ["approval"] * 20 + ["evaluation"] * 10 + ["revocation"]
    mermaid = render(report, "mermaid")
    assert mermaid.count("-.->|approval|") == 20 and mermaid.count("-.->|checkpoint|") == 10
    assert mermaid.count("-.->|revocation|") == 1
    dot = render(report, "dot")
    assert dot.count("style=dashed];") == 31
    text = render(report, "text")
    assert text.count("· approval at log index") == 20
    assert "· revocation at log index 2000, signed by abababababab — reason: PII found" in text
    assert "· evaluation at log index 1095 (names it as checkpoint)" in text
    records = json.loads(render(report, "json"))["records"]
    assert len(records) == 31 and records[-1]["about"][0]["role"] == "revocation"


def test_mermaid_and_dot_use_the_short_names_with_the_full_name_as_tooltip(
    report: Report,
) -> None:
    mermaid = render(report, "mermaid")
    shown = re.findall(r'^  n\d+\["[^<]+<br/>([^<]+)<br/>', mermaid, re.M)
    assert len(shown) == 102 and len(set(shown)) == 102
    full = "rollouts-of-checkpoint-cartpole-bc-iteration-004-worker-5-seed-1000"
    assert re.search(rf'click n\d+ href "#n\d+" "rollout-batch {full} · sha256:', mermaid)
    dot = render(report, "dot")
    shown = re.findall(r'^  n\d+ \[label="[a-z-]+\\n([^\\]+)\\n', dot, re.M)
    assert len(shown) == 102 and len(set(shown)) == 102
    assert f'tooltip="rollout-batch {full} · sha256:' in dot


def test_short_names() -> None:
    full = {0: "cartpole@1", 1: "cartpole-random", 2: "cartpole-random",
            3: "rollouts-of-checkpoint-cartpole-bc-iteration-001-worker-1-seed-1000",
            4: "rollouts-of-checkpoint-cartpole-bc-iteration-002-worker-1-seed-1000",
            5: "a-name-that-is-long-but-like-no-other-at-all@7",
            6: "dataset-shard-001-of-the-big-crawl-final-version",
            7: "dataset-shard-002-of-the-big-crawl-final-version"}
    short = short_names({str(k): v for k, v in full.items()}, 28,
                        {str(k): f"{k:06x}" for k in full})
    assert short == {
        "0": "cartpole@1",
        "1": "cartpole-random #000001",  # one name, two items: their digests tell them apart
        "2": "cartpole-random #000002",
        # Cut at a fixed width ("rollouts-of-checkpoint-cart…"), these would be one name;
        # start and end tell them apart.
        "3": "rollout…1-worker-1-seed-1000",
        "4": "rollout…2-worker-1-seed-1000",
        "5": "a-name-tha…no-other-at-all@7",
        # Start and end alike too: the part where they differ.
        "6": "dataset…ard-001-of-the-big-…",
        "7": "dataset…ard-002-of-the-big-…",
    }
    assert all(len(v) <= 28 for v in short.values())


def test_a_link_must_go_down() -> None:
    with pytest.raises(ValueError, match="the upper box is in layer 1, not above layer 1"):
        layout({"a": (10, 10), "b": (10, 10)}, {"a": 1, "b": 1}, [Link("a", "b", "x")])


def test_hostile_names_stay_inside_their_strings() -> None:
    """Names come from signed records, which any producer chooses: a quote, a trailing
    backslash or markup in one must not end a Mermaid or DOT string nor become HTML."""
    hostile = ['x"] ; click n0 href "javascript:alert(1)" "', "<script>alert(1)</script>",
               "ends-in-a-backslash\\", 'tab\\" URL="javascript:alert(1)']
    report = generated(iterations=1, batches=3)
    for node, name in zip([n for n in report.nodes.values() if n.kind == "rollout-batch"]
                          + [n for n in report.nodes.values() if n.kind == "dataset"],
                          hostile, strict=False):
        node.name = name
    mermaid = render(report, "mermaid")
    assert "<script>" not in mermaid and "javascript:alert(1)\"" not in mermaid
    for line in mermaid.splitlines():
        assert line.count('"') in (0, 2, 4), line  # label, or link and tooltip: no more
    dot = render(report, "dot")
    for line in dot.splitlines():
        unescaped = re.findall(r'(?<!\\)(?:\\\\)*"', line)
        assert len(unescaped) % 2 == 0, line
        assert not re.search(r'(?<!\\)(?:\\\\)*", URL=', line), line
    svg = render_svg(report)
    ET.fromstring(svg)  # well-formed: every name escaped
    assert "<script>" not in svg
