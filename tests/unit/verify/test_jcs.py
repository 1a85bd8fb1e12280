"""RFC 8785 canonical JSON (the float-free subset in verify/_jcs.py): known answers, and
properties (hypothesis): it agrees with the ``rfc8785`` package and with the writer's
serialiser for random values, and is a fixed point.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajledger.ledger.signing import canonical_json
from trajledger.verify._jcs import MAX_SAFE_INTEGER, canonical_bytes
from trajledger.verify.errors import FormatError


def test_rfc8785_sorting_example() -> None:
    # RFC 8785 section 3.2.3: keys sort by UTF-16 code units, so U+1F600 (D83D DE00) sorts
    # before U+FB33, although its code point is larger.
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    want = (
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control",'
        '"\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign",'
        '"\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
    ).encode()
    assert canonical_bytes(value) == want
    assert canonical_bytes(value) == rfc8785.dumps(value)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (None, b"null"),
        (True, b"true"),
        (False, b"false"),
        (0, b"0"),
        (-1, b"-1"),
        (MAX_SAFE_INTEGER, b"9007199254740991"),
        (-MAX_SAFE_INTEGER, b"-9007199254740991"),
        ("", b'""'),
        # RFC 8785 3.2.2.2: \b \t \n \f \r as two-character escapes, other controls \u00XX
        # lowercase; '"' and '\' escaped; DEL, U+2028 and non-ASCII written as UTF-8.
        ("\b\t\n\f\r", b'"\\b\\t\\n\\f\\r"'),
        ("\x00\x1f", b'"\\u0000\\u001f"'),
        ('"\\/', b'"\\"\\\\/"'),
        ("\x7f\u2028\u00e9", '"\x7f\u2028\u00e9"'.encode()),
        ([], b"[]"),
        ({}, b"{}"),
        ([1, [2, {}], "a"], b'[1,[2,{}],"a"]'),
        ({"b": 1, "a": {"d": [], "c": None}}, b'{"a":{"c":null,"d":[]},"b":1}'),
        ((1, 2), b"[1,2]"),
    ],
)
def test_known_answers(value: object, want: bytes) -> None:
    assert canonical_bytes(value) == want


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (1.5, r"doc: float cannot be canonicalised here"),
        ({"a": [0.0]}, r"doc\.a\[0\]: float cannot"),
        (MAX_SAFE_INTEGER + 1, r"integer 9007199254740992 exceeds 2\^53-1"),
        (-MAX_SAFE_INTEGER - 1, r"exceeds 2\^53-1"),
        ({1: "a"}, r"doc: object key 1 is not a string"),
        ({"a": 1, 2: "b"}, r"object key 2 is not a string"),
        ("\ud800", r"doc: contains a lone surrogate"),
        ({"\udc00": 1, "a": 2}, r"contains a lone surrogate"),
        (b"bytes", r"bytes cannot be canonicalised"),
        ({1, 2}, r"set cannot be canonicalised"),
    ],
)
def test_refuses(value: object, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        canonical_bytes(value, "doc")


# --- properties --------------------------------------------------------------------------------

PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    | st.text(),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=30,
)


@PROPS
@given(value=json_values)
def test_jcs_matches_rfc8785_package(value: Any) -> None:
    assert canonical_bytes(value) == rfc8785.dumps(value)


@PROPS
@given(value=json_values)
def test_jcs_is_a_fixed_point(value: Any) -> None:
    once = canonical_bytes(value)
    assert canonical_bytes(json.loads(once)) == once
    assert canonical_json(value) == once  # the writer's serialiser agrees
