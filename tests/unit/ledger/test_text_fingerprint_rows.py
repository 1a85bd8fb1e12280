"""`text_fingerprint.normalised_fingerprints` hashes an episode's rows from Arrow's joined
buffer (chat42): the same fingerprints, byte for byte, as a row at a time in Python (the
definition, kept here as `_by_rows`), for any rows and any cut into record batches."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from itertools import pairwise

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajledger.ledger.text_fingerprint import normalised_fingerprints, normalised_texts, row_texts


def _by_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, str]]:
    """The definition as it was written before chat42, a row at a time (its texts as
    `row_texts` gives them)."""
    current: str | None = None
    h = hashlib.sha256()
    rows = 0
    for batch in batches:
        roles, texts = row_texts(batch)
        for eid, role, text in zip(batch.column("episode_id").to_pylist(), roles.to_pylist(),
                                   texts.to_pylist(), strict=True):
            if eid != current:
                if current is not None and rows:
                    yield current, h.hexdigest()
                current, h, rows = eid, hashlib.sha256(), 0
            if text and role != "system":
                row = f"{role}\x1f{text}".encode()
                h.update(b"%d:" % len(row) + row)
                rows += 1
    if current is not None and rows:
        yield current, h.hexdigest()


_TEXTS = st.one_of(st.none(), st.sampled_from(["", "  ", "Hi there", "HI  there\n", "ｆｕｌｌ",
                                               "a\u200bb", "\u3000x\u3000", "émoji 🎉", "1:2"]),
                   st.text(max_size=12))
_ROW = st.tuples(st.sampled_from(["a", "b", "c", None]),
                 st.sampled_from(["user", "assistant", "system", "tool", "", None]),
                 _TEXTS, _TEXTS, _TEXTS)


@settings(max_examples=150)
@given(rows=st.lists(_ROW, max_size=40), cuts=st.lists(st.integers(0, 40), max_size=4),
       columns=st.sampled_from([("content",), ("content", "tool_calls", "tool_results"),
                                ("tool_calls",), ()]),
       roles=st.booleans())
def test_the_joined_rows_hash_as_the_rows_one_at_a_time(
        rows: list[tuple[str | None, str | None, str | None, str | None, str | None]],
        cuts: list[int], columns: tuple[str, ...], roles: bool) -> None:
    data = {"episode_id": pa.array([r[0] for r in rows], pa.string())}
    if roles:
        data["role"] = pa.array([r[1] for r in rows], pa.string())
    for i, name in enumerate(("content", "tool_calls", "tool_results")):
        if name in columns:
            data[name] = pa.array([r[2 + i] for r in rows], pa.string())
    table = pa.table(data)
    at = sorted({0, len(rows), *(c for c in cuts if c <= len(rows))})
    batches = [table.slice(a, b - a).combine_chunks().to_batches()[0] if b > a else
               pa.RecordBatch.from_pylist([], schema=table.schema)
               for a, b in pairwise(at)]
    assert list(normalised_fingerprints(batches)) == list(_by_rows(batches))


@settings(max_examples=200)
@given(texts=st.lists(st.one_of(_TEXTS, st.text(st.characters(max_codepoint=0x7F))),
                      max_size=30),
       at=st.integers(0, 3))
def test_ascii_texts_lower_cased_byte_wise_are_normalised_as_before(
    texts: list[str | None], at: int
) -> None:
    """The ASCII texts lower-cased by ``ascii_lower`` (rec44): `normalised_texts` gives every
    text, ASCII or not, null, empty, in a sliced array, what it gave with ``utf8_lower``
    (the definition before rec44: every text lower-cased so first)."""
    arr = pa.array(["X"] * at + texts, pa.string()).slice(at)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(pc, "ascii_lower", pc.utf8_lower)
        want = normalised_texts(arr).to_pylist()
    assert normalised_texts(arr).to_pylist() == want
