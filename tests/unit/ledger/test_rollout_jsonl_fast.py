"""The JSON lines decoded by msgspec are the objects the strict decoder gives (issue 21 item 5).

`jsonl.fast_object` decodes a line with msgspec when it can prove the object is the strict
decoder's, and leaves every other line (and every refusal, with its message) to the strict
decoder. Hostile lines (keys given twice, also nested and spelled with escapes, lone surrogates,
bad UTF-8, trailing text, NaN and Infinity, numbers past every range, deep nesting, odd
whitespace) and random JSON values give the same object or the same problems both ways, and a
recorded batch has the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajledger.ledger.rollouts import jsonl
from trajledger.ledger.rollouts.chunks import ReaderOptions, RecordProblems
from trajledger.ledger.rollouts.parquet_io import write_steps_parquet
from trajledger.ledger.rollouts.problems import ProblemCollector, RolloutValidationError
from trajledger.ledger.rollouts.readers import iter_rollout_chunks


def decided(raw: bytes, *, fast: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    """What `jsonl.decode_line` makes of a line, with or without the fast decoder: the object's
    repr (types, key order and the sign of zero kept) and the problems."""
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(jsonl, "fast_object", lambda raw: None)
        c = ProblemCollector()
        obj = jsonl.decode_line(jsonl.strict_decoder(), raw, RecordProblems(1, c))
    return repr(obj), [(p.message, p.line) for p in c.problems()]


HOSTILE = [
    b'{"a": 1, "a": 2}',
    b'{"m": [{"role": "user", "role": "tool"}]}',
    b'{"m": {"x": {"k": 1, "k": {"deep": ":"}}}}',
    b'{"a": 1, "\\u0061": 2}',
    b'{"a:b": "x:", "a:b": "y"}',
    b'{"a": "\\u003a", "a": "\\u003A"}',
    b'{"a": "\\u003a"}',
    b'{"a": "\\ud800"}',
    b'{"a": "\\udc00x"}',
    b'{"a": "\\ud800\\ud800"}',
    b'{"a": "\\ud83d\\ude00"}',
    b'{"a": "\\ud800\\u0041"}',
    b'{"a": "\xff"}',
    b'{"a": "\xed\xa0\x80"}',
    b'{"a": "\xc0\xaf"}',
    b'{"a": 1} x',
    b'{"a": 1}{"b": 2}',
    b'{"a": 1}\x00',
    b'{"a": 1}\x0c\n',
    b'\x0c{"a": 1}',
    b'\xef\xbb\xbf{"a": 1}',
    b'{"a": NaN}',
    b'{"a": -Infinity}',
    b'{"a": 1e400}',
    b'{"a": -1e400}',
    b'{"a": 1e-400}',
    b'{"a": -0}',
    b'{"a": -0.0}',
    b'{"a": 123456789012345678901234567890}',
    b'{"a": -9223372036854775809}',
    b'{"a": ' + b"7" * 4300 + b"}",
    b'{"a": ' + b"7" * 4301 + b"}",
    b'{"a": 17976931348623157e292}',
    b'{"a": 0.1e1, "b": 1E+2, "c": 2.5e-3}',
    b'{"a": [2.2250738585072011e-308, 4.9e-324, 2.4703282292062328e-324, 1e23, 9007199254740993]}',
    b'{"a": [1.00000000000000011102230246251565404236316680908203125, 8.988465674311579e307]}',
    b'{"a": [0.1000000000000000055511151231257827021181583404541015625, 7.3177701707893310e+15]}',
    b'{"a": "\x01"}',
    b'{"a": "\x7f"}',
    b'{"a": 01}',
    b'{"a": [1,]}',
    b'{"a": 1,}',
    b'{"a": tru}',
    b"[1, 2]",
    b'"text"',
    b"null",
    b"{}",
    b' \t{"a" :1 , "b":[ ]}\r\n',
    *(b'{"a": ' + b"[" * n + b"]" * n + b"}" for n in (255, 256, 300, 990, 1000, 3000)),
    b'{"a": ' + b'{"b": ' * 1200 + b"1" + b"}" * 1201,
    # Integers at and past every machine range; numbers JSON does not allow.
    *(b'{"a": %d}' % n for n in (1 << 63, -(1 << 63), (1 << 64) - 1, 1 << 64, -(1 << 64),
                                   -(1 << 64) - 1, 10**30, -(10**30))),
    b'{"a": 1.}', b'{"a": .5}', b'{"a": +1}', b'{"a": 1.e5}', b'{"a": -}', b'{"a": 1e}',
    b'{"a": 1E+}', b'{"a": 0x1}', b'{"a": 00}', b'{"a": -01}', b'{"a": -0e0}', b'{"a": -0E-0}',
    b'{"a": Infinity}', b'{"a": -NaN}', b'{"a": nan}', b'{"a": inf}', b'{"a": 1e309}',
    b'{"a": ' + b"9" * 4301 + b"e0}", b'{"a": -' + b"7" * 4301 + b"}",
    b'{"a": ' + b"1" * 5000 + b".0}", b'{"a": 0.' + b"0" * 5000 + b"1}",
    b'{"a": 1' + b"0" * 400 + b".0e-400}",
    # Whitespace other than JSON's four, outside strings (Python's str.strip takes some).
    b'{"a":\x0b1}', b'\x0b{"a": 1}', b'{"a": 1}\x0b', b'\xc2\xa0{"a": 1}', b'{"a": 1}\xc2\xa0',
    b'{"a":\xc2\xa01}', b'\xe2\x80\xa8{"a": 1}', b'{"a": 1}\xe2\x80\xa9', b'\x1c{"a": 1}',
    b'{"a": 1}\x1f', b'\xc2\x85{"a": 1}', b'{"a": 1}\r', b'{"a": 1}\r\r', b'\r{"a": 1}',
    # Escapes and UTF-8: surrogates in keys, reversed, upper case; beyond U+10FFFF, overlong.
    b'{"\\ud800": 1}', b'{"\xed\xa0\x80": 1}', b'{"a": "\\ude00\\ud83d"}',
    b'{"a": "\\uD83D\\uDE00"}', b'{"\\ud83d\\ude00": 1, "\xf0\x9f\x98\x80": 2}',
    b'{"a": "\xf4\x90\x80\x80"}', b'{"a": "\xf8\x88\x80\x80\x80"}', b'{"a": "\xe0\x80\x80"}',
    b'{"a": "\\U0041"}', b'{"a": "\\x41"}', b'{"a": "\\u12"}', b'{"a": "\t"}', b'{"a": "\\/"}',
    b'{"\xef\xbb\xbfa": 1}', b'{"a": "\xef\xbb\xbf"}', b'{"a": "\\ufeff"}',
    # Keys given twice where the pair lost holds no colon of its own in a string.
    b'{"": 1, "": 2}', b'{"a": [], "a": []}', b'{"a": {}, "b": {}, "a": {}}',
    b'{"a": 1, "b": {"c": 2, "c": 3}}', b'{"a": "\\u003A", "\\u0061": "x"}',
]


@pytest.mark.parametrize("raw", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_lines_decide_alike(raw: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = decided(raw + b"\n", fast=True, monkeypatch=monkeypatch)
    assert fast == decided(raw + b"\n", fast=False, monkeypatch=monkeypatch)


@pytest.mark.parametrize(
    "raw",
    [
        b'\xc2\xa0{"a": 1}',
        b'{"a": 1}\xe2\x80\xa8',
        b'\x1c{"a": 1}',
        b'{"a": 1}\x0b',
        b'\xc2\x85{"a": 1}',
        b'{"a": 1}\x0c',
    ],
)
def test_only_json_whitespace_may_stand_around_the_object(
    raw: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RFC 8259 allows space, tab, CR and LF around a value; U+00A0, U+2028, U+0085 and the
    control characters `str.strip` also takes are refused, as any other extra text."""
    _, problems = decided(raw + b"\n", fast=False, monkeypatch=monkeypatch)
    assert len(problems) == 1 and problems[0][0].startswith("not valid JSON"), problems
    assert decided(b'\t {"a": 1} \r\n', fast=False, monkeypatch=monkeypatch)[1] == []


def test_the_fast_decoder_leaves_what_it_cannot_prove() -> None:
    """Keys given twice (a pair lost), a colon spelled as an escape, deep lines, not objects:
    None, for the strict decoder to decide; a plain object is decoded."""
    for raw in (b'{"a": 1, "a": 2}', b'{"m": [{"a": {}, "a": {}}]}', b'{"a": "\\u003a"}',
                b'{"a": ' + b"[" * 300 + b"]" * 300 + b"}", b"[1]", b'{"a": NaN}'):  # fmt: skip
        assert jsonl.fast_object(raw) is None, raw
    assert jsonl.fast_object(b'{"a": "x:y", "b": [{"c": null}]}\n') == {
        "a": "x:y", "b": [{"c": None}]
    }  # fmt: skip


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 80), max_value=1 << 80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=8)
    | st.sampled_from([":", '":"', "\\u003a", "a:b", "\u2028", "\x00"])
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "b", ":", "a:", "é"]), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(
    value=st.dictionaries(st.sampled_from(["a", "b", "c", "x:"]), _VALUES, max_size=5),
    compact=st.booleans(),
    ascii_only=st.booleans(),
    twice=st.sampled_from([None, '"a": 0', '"x:": ":"', '"\\u0061": 1']),
)
def test_random_objects_decide_alike(
    value: dict[str, Any], compact: bool, ascii_only: bool, twice: str | None
) -> None:
    """Random objects, written compact or spaced, escaped or not, some with a key given twice
    (at the start, so a later one repeats it): the fast decoder gives the strict object or
    None; never another object."""
    text = json.dumps(
        value, ensure_ascii=ascii_only, separators=(",", ":") if compact else (", ", ": ")
    )
    if twice is not None:
        text = "{" + twice + ("," + text[1:] if value else "}")
    raw = text.encode("utf-8", "surrogatepass") + b"\n"
    got = jsonl.fast_object(raw)
    try:
        want = jsonl.strict_decoder().decode(raw.decode())
    except ValueError:
        assert got is None
        return
    assert got is None or repr(got) == repr(want)
    if twice is None and "\\u003" not in text:
        assert got is not None  # no key twice: the fast path decides


@settings(max_examples=50, deadline=None)
@given(
    number=st.from_regex(
        r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,25})?([eE][-+]?[0-9]{1,3})?", fullmatch=True
    )
)
def test_numbers_in_any_spelling_decode_alike(number: str) -> None:
    """Numbers of up to 26 digits before and after the point, any exponent: msgspec's value is
    the strict decoder's (correctly rounded floats, exact integers), or it leaves the line."""
    raw = f'{{"n": {number}}}'.encode()
    got = jsonl.fast_object(raw)
    want = jsonl.strict_decoder().decode(raw.decode())
    assert got is None or repr(got) == repr(want)


_SEEDS = [
    b'{"a": 1, "b": [1.5, -0, "x:y", {"c": null}], "d": "\\ud83d\\ude00", "e": 1e5, "f": true}',
    b'{"k": "\xc3\xa9\\u00e9", "k2": 18446744073709551616, "z": {"q": [[], {}]}, "n": -0.0}',
    b'{"a": 1, "b": {"a": "x"}}',
]
_TOKENS = [
    b"\\u", b"\\ud800", b"\\udc00", b'"', b":", b",", b"{", b"}", b"[", b"]", b"e", b"-",
    b"0", b".", b"\xed\xa0\x80", b"\\u003a", b'"a": 1,', b'"a": {},', b'"b": ":",', b'"a":',
    b"\xef\xbb\xbf", b"NaN", b"\xc2\xa0", b"\\", b"\x0b", b"\x00", b"\xff",
]


@settings(max_examples=300, deadline=None)
@given(
    seed=st.sampled_from(_SEEDS),
    edits=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 1 << 16),
                  st.sampled_from(_TOKENS) | st.binary(min_size=1, max_size=1)),
        min_size=1, max_size=3,
    ),
)
def test_changed_lines_decide_alike(seed: bytes, edits: list[tuple[int, int, bytes]]) -> None:
    """Lines a byte or a token away from good ones (put in, taken out or replaced anywhere,
    or put in where a member starts: a key given twice, among others): the same object or the
    same problems with and without the fast decoder."""
    line = bytearray(seed)
    for op, at, piece in edits:
        if op == 3:  # where an object or a member starts
            starts = [i + 1 for i, b in enumerate(line) if b in b"{,"] or [0]
            line[starts[at % len(starts)]:starts[at % len(starts)]] = piece
            continue
        at %= len(line) + 1
        if op == 0:
            line[at:at] = piece
        elif op == 1:
            del line[at : at + 1]
        else:
            line[at : at + 1] = piece
    raw = bytes(line) + b"\n"
    with pytest.MonkeyPatch.context() as m:
        assert decided(raw, fast=True, monkeypatch=m) == decided(raw, fast=False, monkeypatch=m)


def test_a_recording_is_the_same_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same lines, good and hostile, recorded with and without the fast decoder: the same
    files, byte for byte, and the same refusal."""
    good = {
        "episode_id": "e1",
        "messages": [
            {"role": "user", "content": "q: é \u2028"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "f": {"y": 1, "x": 2}}],
            },
            {"role": "tool", "tool_call_id": "c", "name": "f", "content": "r"},
        ],
        "reward": 0.5,
        "judge_scores": {"b": 1, "a": 0.25},
        "seed": 9223372036854775807,
        "extra": {"k": [123456789012345678901, 2.5, None, "\\u003a"]},
    }
    lines = [json.dumps(good), json.dumps({**good, "episode_id": "e2"}, ensure_ascii=False)]
    path = tmp_path / "good.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(path.read_bytes() + b"\n".join(HOSTILE) + b"\n")
    outcomes = []
    for fast in (True, False):
        with monkeypatch.context() as m:
            if not fast:
                m.setattr(jsonl, "fast_object", lambda raw: None)
            out = tmp_path / f"out-{fast}"
            out.mkdir()
            chunks = iter_rollout_chunks(path, options=ReaderOptions(), process_min_bytes=1 << 40)
            stats = write_steps_parquet(chunks, out / "steps.parquet")
            with pytest.raises(RolloutValidationError) as refusal:
                list(iter_rollout_chunks(bad, "chat-jsonl", process_min_bytes=1 << 40))
            outcomes.append(
                (stats.steps_file.sha256, stats.episodes_file.sha256, refusal.value.problems)
            )
    assert outcomes[0] == outcomes[1]
