"""A report's lines escaped by `verify.nodes.hide` (walk50): what ``translate(HIDDEN)`` gives,
with the table looked up only for a line that is not printable (every character the table
escapes is not).

A lineage of 1,003 records renders 4,016 lines, nearly all without one; translating each cost 11
of the 20 ms of `Report.render` (the command line's text, after the walk: no other core's work
hides it).
"""

from __future__ import annotations

import pytest

from trajledger.verify import nodes, report
from trajledger.verify.nodes import HIDDEN, UNDECODABLE, Edge, Node, hide
from trajledger.verify.report import Report


def test_every_character_is_escaped_as_the_table_says() -> None:
    """Every character the table holds is not printable (so a printable line holds none)."""
    assert not any(chr(c).isprintable() for c in HIDDEN)
    for c in range(0x110000):
        line = f"a{chr(c)}b"
        assert hide(line) == line.translate(HIDDEN), hex(c)
    assert len(HIDDEN) == 2048 + 32 + 33 + 1 + 2 + 7 + 4 and UNDECODABLE.items() <= HIDDEN.items()


@pytest.mark.parametrize("text", ["", "plain ascii", "✓ checkpoint m@1 — log index 9",
                                  "x\x1b[2Jy", "\u202eevil", "name\u2066\u2069", "a\ud800\udcfd",
                                  "\u0085nel", "\u061c", "tab\there\n"])
def test_a_line_is_the_translated_line(text: str) -> None:
    assert hide(text) == text.translate(HIDDEN)


class _Counted(dict[int, str]):
    """`HIDDEN`, counting the look-ups ``str.translate`` makes of it."""

    looked_up = 0

    def __getitem__(self, c: int) -> str:
        _Counted.looked_up += 1
        return super().__getitem__(c)


def _report(detail: str) -> Report:
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    graph = {"log": Node("log", "log", name="log"), a: Node(a, "checkpoint", "m", "1", 9),
             b: Node(b, "rollout-batch", "batch-0", "", 3)}
    graph[b].add("files", detail=detail)
    return Report(a, ["log", a], graph, [Edge(a, b, "batch")])


def test_a_report_with_nothing_to_escape_never_looks_the_table_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed before walk50: every line was translated, the table looked up for each of its
    characters that is not ASCII (the marks, the dashes, the arrows)."""
    counted = _Counted(HIDDEN)
    monkeypatch.setattr(nodes, "HIDDEN", counted)
    monkeypatch.setattr(report, "HIDDEN", counted)
    lines = _report("2 file(s), 846564 bytes, 2 re-hashed").render()
    assert lines[3:] == ["    batch → ✓ rollout-batch batch-0 (sha256:bbbbbbbbbbbb…) — log index 3",
                         "        ✓ files — 2 file(s), 846564 bytes, 2 re-hashed"]
    assert _Counted.looked_up == 0
    dirty = _report("read \x1b[2J\u202egnp.").render()  # a detail with escapes in it
    assert _Counted.looked_up > 0
    assert dirty[4] == "        ✓ files — read \\u001b[2J\\u202egnp."
