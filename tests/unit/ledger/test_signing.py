"""The writer's RFC 8785 serialiser (`signing.canonical_json`): its fast path through json's C
encoder writes what the ``rfc8785`` package writes, byte for byte, and whatever it does not
take (floats, integers beyond 2^53, keys outside the Basic Multilingual Plane, lone
surrogates, other types) goes to the package, with the same bytes or the same refusal.
"""

from __future__ import annotations

import enum
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajledger.ledger.signing import _plain, canonical_json
from trajledger.verify.errors import FormatError

PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SAFE = 2**53 - 1
text = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF,
                             blacklist_categories=("Cs",)))
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-SAFE, SAFE)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda children: st.lists(children, max_size=5)
    | st.lists(children, max_size=3).map(tuple)
    | st.dictionaries(text, children, max_size=5),
    max_leaves=30,
)


@PROPS
@given(value=values)
def test_the_same_bytes_as_the_rfc8785_package(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


class Small(enum.IntEnum):
    ONE = 1


@pytest.mark.parametrize(
    "value",
    [
        # RFC 8785 3.2.3: U+1F600 sorts before U+FB33 by UTF-16 code units (not code points)
        {"\U0001f600": 1, "\ufb33": 2, "a": 3},
        {"a": 1.5, "b": [0.1, -0.0, 1e21]},
        [Small.ONE, {"k": Small.ONE}],
        {"a": (1, "b"), "\x00\x1f\u2028\x7f": '"\\/\b'},
        [True, False, None, -SAFE, SAFE, ""],
    ],
)
def test_known_values(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


def test_only_plain_json_takes_the_fast_path() -> None:
    assert _plain({"a": [1, "b", None, True, (2,)], "é": {"\uffff": SAFE}})
    for value in (1.0, SAFE + 1, -SAFE - 1, {"\U0001f600": 1}, {1: "a"}, Small.ONE, b"x",
                  {"a": {1, 2}}, [object()]):
        assert not _plain(value), value


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ({"a": "\ud800"}, r"^cannot be canonicalised \(RFC 8785\): contains a lone surrogate, "
                          r"not valid Unicode$"),
        ([SAFE + 1], r"^cannot be canonicalised \(RFC 8785\): 9007199254740992 exceeds safe "
                     r"integer domain for JSON floats$"),
        ({"a": float("nan")}, r"^cannot be canonicalised \(RFC 8785\): nan is not "
                              r"representable in JCS$"),
    ],
)
def test_refusals_are_the_packages(value: Any, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        canonical_json(value)


def test_a_lone_surrogate_key_fails_as_in_the_package() -> None:
    # rfc8785 sorts keys by their UTF-16 encoding, which refuses a lone surrogate
    with pytest.raises(UnicodeEncodeError):
        rfc8785.dumps({"\udc00": 1})
    with pytest.raises(UnicodeEncodeError):
        canonical_json({"\udc00": 1})
