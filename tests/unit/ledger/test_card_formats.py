"""The text the card writers emit (white-box tests of ``ledger/card_formats.py``'s helpers).

1. The YAML the Hugging Face card's metadata is written in (a block subset with JSON-quoted
   scalars) reads back, with PyYAML, to exactly the values written, for any text.
2. The producer's prose, rendered in Markdown, can make no heading and no raw HTML (checked
   with a CommonMark parser), whatever it holds, so it cannot pass itself off as the sections
   trajledger generates from signed records.
"""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from trajledger.ledger.card_formats import _prose, _yaml, _yaml_scalar

# -- YAML ------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_a_yaml_scalar_reads_back_as_written(text: str) -> None:
    assert yaml.safe_load(f"k: {_yaml_scalar(text)}\n") == {"k": text}


def test_yaml_line_breaks_of_yaml_11_are_escaped() -> None:
    for ch in ("\x85", "\u2028", "\u2029", "\x7f", "\ufeff", "\x9f"):
        assert ch not in _yaml_scalar(f"a{ch}b")
        assert yaml.safe_load(f"k: {_yaml_scalar(f'a{ch}b')}") == {"k": f"a{ch}b"}


@settings(max_examples=100, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.from_regex(r"[a-z][a-zA-Z_]{0,8}", fullmatch=True), inner, max_size=3),
    max_leaves=12,
))
def test_nested_yaml_reads_back_as_written(value: Any) -> None:
    doc = {"top": value}
    assert yaml.safe_load("\n".join(_yaml(doc)) + "\n") == doc


def test_keys_yaml_would_read_as_something_else_are_quoted() -> None:
    doc = {k: 1 for k in ("no", "On", "y", "NULL", "true", "1st", "a b", "x:y", "#", "", "ok")}
    lines = _yaml(doc)
    assert yaml.safe_load("\n".join(lines) + "\n") == doc
    assert "ok: 1" in lines and '"no": 1' in lines


# -- Markdown ------------------------------------------------------------------------------------


def _blocks(markdown: str) -> set[str]:
    tokens = MarkdownIt("commonmark").parse(markdown)
    kinds = {t.type for t in tokens}
    for t in tokens:
        kinds |= {c.type for c in t.children or []}
    return kinds


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("#=-+<>&`*_ \n\tab1.)|[]()!"), max_size=80))
def test_the_producers_prose_makes_no_heading_and_no_html(text: str) -> None:
    kinds = _blocks("Intro\n\n" + _prose(text) + "\n")
    assert "heading_open" not in kinds, _prose(text)
    assert not kinds & {"html_block", "html_inline"}, _prose(text)


def test_prose_keeps_lists_and_emphasis() -> None:
    out = _prose("- one\n- *two*\n# not a heading\n---\n<b>x</b> & y\n> - # quoted\n1. ===")
    assert out == ("- one\n- *two*\n\\# not a heading\n\\---\n&lt;b>x&lt;/b> &amp; y\n"
                   "> - \\# quoted\n1. \\===")
    for text in ("- # x", "> # x", "1) # x", "a\n  ===", "- a\n  ---", "   #x", "\t# x"):
        assert "heading_open" not in _blocks(_prose(text)), text
