"""Strict JSON reading: what a lenient parser accepts and trajledger refuses."""

from __future__ import annotations

import pytest

from trajledger.verify.errors import FormatError
from trajledger.verify.strict_json import load_object, loads_strict


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (b'{"a":[1,2.5,"x",true,false,null]}', {"a": [1, 2.5, "x", True, False, None]}),
        ('{"\u00e9":"\u00e9"}', {"\u00e9": "\u00e9"}),
        (b' {"a" : 1} \n', {"a": 1}),
        (b'"\\ud83d\\ude00"', "\U0001f600"),  # an escaped surrogate pair is one character
        (b"1e308", 1e308),
        (b"-0", 0),
    ],
)
def test_accepts(data: bytes | str, want: object) -> None:
    assert loads_strict(data) == want


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b'{"a":1,"a":2}', r"^doc: duplicate JSON key 'a'$"),
        (b'{"o":{"k":1,"k":1}}', r"duplicate JSON key 'k'"),
        (b'[{"a":1},{"b":1,"b":2}]', r"duplicate JSON key 'b'"),
        (b"NaN", r"^doc: NaN is not valid JSON$"),
        (b'{"r":Infinity}', r"Infinity is not valid JSON"),
        (b"[-Infinity]", r"-Infinity is not valid JSON"),
        (b"1e400", r"^doc: number 1e400 overflows to infinity$"),
        (b"-1.5e999", r"overflows to infinity"),
        (b"9" * 5000, r"^doc: a number has more than \d+ digits$"),
        (b"\xef\xbb\xbf{}", r"^doc: starts with a UTF-8 byte-order mark$"),
        (b'{"a":"\xff"}', r"^doc: not valid UTF-8 at byte 6$"),
        (b'{"a":"\xed\xa0\x80"}', r"not valid UTF-8"),  # CESU-8 surrogate
        (b'{"a":"\xc0\xaf"}', r"not valid UTF-8"),  # overlong '/'
        (b"{", r"^doc: malformed JSON at line 1 column 2: "),
        (b"{} {}", r"malformed JSON at line 1 column 4: Extra data"),
        (b"{'a':1}", r"malformed JSON"),
        (b'{"a":1,}', r"malformed JSON"),
        (b"", r"malformed JSON"),
        (b"[" * 100_000, r"^doc: nested too deeply$"),
        # I-JSON (RFC 7493 2.1): a lone surrogate escape is no Unicode text; as a value, a key,
        # a low half alone, a pair in the wrong order, deep inside.
        (b'{"a":"\\ud800"}', r"^doc: the string '\\ud800' holds a lone surrogate "),
        (b'{"x\\uDBFF":1}', r"holds a lone surrogate"),
        (b'["\\udc00"]', r"holds a lone surrogate"),
        (b'"\\ude00\\ud83d"', r"holds a lone surrogate"),
        (b'{"a":[{"b":["ok","\\ud800"]}]}', r"holds a lone surrogate"),
        ('{"a":"x\ud800"}', r"^doc: not valid Unicode at character 7$"),  # text, not an escape
    ],
)
def test_refuses(data: bytes | str, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        loads_strict(data, "doc")


def test_bom_in_text_input_is_malformed() -> None:
    with pytest.raises(FormatError, match=r"malformed JSON"):
        loads_strict("\ufeff{}", "doc")


@pytest.mark.parametrize(("data", "kind"), [(b"[]", "list"), (b"1", "int"), (b"null", "NoneType")])
def test_load_object_needs_an_object(data: bytes, kind: str) -> None:
    with pytest.raises(FormatError, match=rf"^doc: top level is {kind}, want an object$"):
        load_object(data, "doc")


def test_load_object() -> None:
    assert load_object(b'{"a":{}}') == {"a": {}}


def test_format_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        loads_strict(b"{")
