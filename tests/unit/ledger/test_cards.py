"""The producer's card (``ledger.cards.ProducerCard``) and the text the card writers emit.

``card.toml`` is read strictly: a good card gives one canonical ``card.json`` (dates as
   strings, text trimmed, CRLF as LF), read back to the same digest; a bad one is refused with
   every problem on its own line, naming the setting, what was found and what is wanted
   (unknown keys with a suggestion); limits on sizes hold.

The text the card writers emit (YAML, Markdown) is tested in test_card_formats.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from trajledger.ledger.cards import MAX_TEXT, ProducerCard
from trajledger.verify.errors import FormatError
from trajledger.verify.predicates import CARD_MAX_BYTES

GOOD = b"""\
title = "Grid rollouts"
description = \"\"\"
Rollouts of a grid world.\r
Two lines.
\"\"\"
creators = ["Vendor Inc."]
languages = ["en", "pt-BR"]
tags = ["grid"]
homepage = "https://example.com/grid"
citation = "@misc{grid}"

[collection]
process = "Simulated with seeds 0-9."
types = ["Software Collection"]
timeframe = [2025-01-01, 2025-01-31T12:00:00+02:00]
source = "simulator"
preprocessing = ["none"]

[consent]
obtained = "Not applicable: no people involved."
withdrawal = "n/a"

[retention]
policy = "Two years."
until = 2027-01-01

[personal_information]
contains = true
categories = ["player names"]
handling = "pseudonymised"

[uses]
intended = ["baselines"]
out_of_scope = ["medical use"]
limitations = ["one environment"]
biases = ["seeded"]

[access]
conditions = "Customers under contract."
contact = "data@example.com"
"""


def test_a_good_card_has_one_canonical_form() -> None:
    card = ProducerCard.from_toml(GOOD)
    doc = card.to_json()
    assert doc["format"] == 1
    assert doc["description"] == "Rollouts of a grid world.\nTwo lines."
    assert doc["collection"]["timeframe"] == ["2025-01-01", "2025-01-31T10:00:00Z"]
    assert doc["retention"]["until"] == "2027-01-01"
    assert card.get("personal_information", "categories") == ["player names"]
    assert card.get(None, "homepage") == "https://example.com/grid"
    assert card.get("uses", "nothing") is None
    data = card.canonical_bytes()
    assert data.startswith(b'{"access":{"conditions":"Customers under contract.","contact"')
    again = ProducerCard.from_bytes(data)
    assert again.canonical_bytes() == data and again.digest == card.digest
    # The JSON form reads as TOML values do: the same card whichever way it was written.
    assert ProducerCard(doc).digest == card.digest


def test_every_problem_is_one_line_naming_the_setting() -> None:
    bad = b"""\
descripton = "typo"
title = 3
languages = ["English"]
homepage = "ftp://example.com"
[colection]
process = "x"
[consent]
obtained = ""
extra = 1
[retention]
policy = "two years"
until = 2025-01-01T00:00:00
[personal_information]
contains = "no"
[uses]
intended = []
[access]
conditions = ["a"]
"""
    with pytest.raises(FormatError) as e:
        ProducerCard.from_toml(bad, "card.toml")
    assert str(e.value).splitlines() == [
        "card.toml: unknown key 'descripton' (did you mean 'description'?)",
        "card.toml: unknown table [colection] (did you mean [collection]?)",
        "card.toml: description is missing: what the data is",
        "card.toml: title is an integer, want a string",
        "card.toml: languages: 'English' is not a language tag, want BCP 47 such as 'en' or "
        "'pt-BR'",
        "card.toml: homepage is 'ftp://example.com', want an http(s) URL",
        "card.toml: [collection] is missing: process: how the data was collected",
        "card.toml: [consent] unknown key 'extra'",
        "card.toml: [consent] obtained is empty, want some text",
        "card.toml: [retention] until is a local date-time, want a date or a date-time with an "
        "offset (2025-01-31 or 2025-01-31T12:00:00Z)",
        "card.toml: [personal_information] contains is a string, want true or false",
        "card.toml: [access] conditions is a list, want a string",
        "card.toml: [uses] intended is empty, want at least one intended use",
    ]


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        (lambda c: c.pop("consent"),
         "[consent] is missing: obtained: how consent was obtained, or why none was needed"),
        (lambda c: c.update(consent="yes"), "[consent] is a string, want a table"),
        (lambda c: c["personal_information"].pop("categories"),
         "[personal_information] categories is missing: contains = true, so name the kinds of "
         "personal or sensitive information"),
        (lambda c: c["personal_information"].update(categories=[]),
         "[personal_information] categories is empty: contains = true, so name at least one "
         "kind"),
        (lambda c: c["personal_information"].update(contains=False),
         "[personal_information] categories lists kinds, but contains = false; set contains = "
         "true or remove the categories"),
        (lambda c: c["collection"].update(timeframe=["2025-02-01", "2025-01-01"]),
         "[collection] timeframe ends (2025-01-01) before it starts (2025-02-01)"),
        (lambda c: c["collection"].update(timeframe=["2025-02-30"]),
         "[collection] timeframe[0] is '2025-02-30', want a date (2025-01-31) or a UTC "
         "date-time (2025-01-31T12:00:00Z)"),
        (lambda c: c["collection"].update(timeframe=[]),
         "[collection] timeframe is [], want [start] or [start, end] dates"),
        (lambda c: c["uses"].update(intended=["ok", 5]),
         "[uses] intended[1] is an integer, want a string"),
        (lambda c: c["uses"].update(biases="one"), "[uses] biases is a string, want a list of "
         "strings"),
        *[(lambda c, ch=ch: c.update(description=f"a{ch}b"),  # C0, DEL, C1 (NEL, CSI),
           f"description holds \\u{ord(ch):04x}, a control, line separator or bidirectional "
           "control character; want text (tabs and line breaks are fine; write right-to-left "
           "text in its logical order, without bidirectional controls)")
          for ch in "\x07\r\x7f\x85\x9b\u2028\u202e\u2067\u200f\u061c"],  # LS, RLO, RLI...
        (lambda c: c["uses"].update(biases=["fine", "evil\u202e"]),
         "[uses] biases[1] holds \\u202e, a control, line separator or bidirectional control "
         "character; want text (tabs and line breaks are fine; write right-to-left text in its "
         "logical order, without bidirectional controls)"),
        (lambda c: c.update(description="x" * (MAX_TEXT + 1)),
         f"description holds {MAX_TEXT + 1} characters, want at most {MAX_TEXT}"),
        (lambda c: c.update(tags=["t"] * 257), "tags has 257 items, want at most 256"),
        (lambda c: c.update(format=2),
         "format is 2: a newer trajledger wrote it, this one reads format 1"),
        (lambda c: c.update(format="1"), "format is a string, want 1"),
    ],
)
def test_a_card_is_refused_with_one_line_per_problem(edit: Any, line: str) -> None:
    doc = ProducerCard.from_toml(GOOD).to_json()
    edit(doc)
    with pytest.raises(FormatError) as e:
        ProducerCard(doc, "card.json")
    assert str(e.value).splitlines() == [f"card.json: {line}"]


def test_prose_keeps_tabs_line_breaks_and_right_to_left_text() -> None:
    """Markdown prose: paragraphs, an indented code block, a tab, Arabic and Hebrew in their
    logical order (the viewer's bidirectional algorithm shows them; no control is needed)."""
    doc = ProducerCard.from_toml(GOOD).to_json()
    text = "One.\n\n    code\n\tmore code\n\nعربي and עברית, 1–2 × ½ “quoted”."
    doc["description"] = text
    assert ProducerCard(doc, "card.json").get(None, "description") == text


def test_not_toml_and_too_large_are_one_line_each(tmp_path: Any) -> None:
    with pytest.raises(FormatError, match=r"^card.toml: not valid TOML: Expected '=' after a "
                       r"key in a key/value pair \(at end of document\)$"):
        ProducerCard.from_toml(b"oops")
    with pytest.raises(FormatError, match=r"^card.toml: not UTF-8 text: invalid start byte at "
                       r"byte 0$"):
        ProducerCard.from_toml(b"\xff")
    doc = ProducerCard.from_toml(GOOD).to_json()
    doc["uses"]["limitations"] = ["x" * MAX_TEXT] * 17
    with pytest.raises(FormatError, match=r"^card: \d+ bytes as card.json, want at most "
                       f"{CARD_MAX_BYTES}$"):
        ProducerCard(doc)
    huge = tmp_path / "huge.toml"
    huge.write_bytes(b"#" * (CARD_MAX_BYTES * 4 + 1))
    with pytest.raises(FormatError, match="larger than 4194304 bytes, not a card"):
        ProducerCard.from_file(huge)
