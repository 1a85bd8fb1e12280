"""The vectors' kernels (``ledger/episode_vectors.py``), white-box: the sketch span
(``_SKETCH_BLOCK``) made small, so that an episode longer than a span is cut into spans counted
from its first step, whatever the record batches it arrives in; token hashes against their
definition; the byte-wise word split of ASCII text against Arrow's kernels, which split any
other text; the fold's fast path and the sketch formed in place against the general ones. The
known answer of every feature is in tests/unit/ledger/test_episode_features.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from trajledger.ledger import episode_vectors
from trajledger.ledger.episode_features import FeatureChunk, iter_step_features


def test_long_episodes_are_sketched_in_spans_from_their_first_step(monkeypatch: Any) -> None:
    # An episode longer than a sketch span gets the same vector whatever the record batches.
    monkeypatch.setattr(episode_vectors, "_SKETCH_BLOCK", 256)
    rng = np.random.default_rng(1)
    n = 1000
    t = pa.table({
        "episode_id": ["long"] * 900 + ["short"] * 100,
        "step": pa.array(np.r_[np.arange(900), np.arange(100)], pa.int64()),
        "obs": pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=n * 5)), 5),
        "reward": rng.normal(size=n),
    })  # fmt: skip
    whole = FeatureChunk.concat(list(iter_step_features([t])))
    for size in (1, 97, 256, 512):
        cut = FeatureChunk.concat(list(iter_step_features(t.to_batches(max_chunksize=size))))
        assert np.array_equal(whole.vectors, cut.vectors), size
    assert whole.valid.all()


def _reference_hash(token: bytes) -> int:
    """token_hashes' definition, one token in Python: SplitMix64(poly(bytes) xor len * golden)."""
    mask = (1 << 64) - 1
    h = 0
    for b in token:
        h = (h * 0x100000001B3 + b) & mask
    z = (h ^ (len(token) * 0x9E3779B97F4A7C15 & mask)) + 0x9E3779B97F4A7C15 & mask
    z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9 & mask
    z = (z ^ z >> 27) * 0x94D049BB133111EB & mask
    return z ^ z >> 31


def test_token_hashes_follow_their_definition_token_by_token() -> None:
    rng = np.random.default_rng(5)
    tokens = [
        "a",
        "Z",
        "é",
        "中文",
        "x" * 5000,
        "_9",
        *(
            "".join(chr(c) for c in rng.integers(33, 0x3000, rng.integers(1, 40)))
            for _ in range(200)
        ),
    ]
    got = episode_vectors.token_hashes(pa.array(tokens).slice(1))
    assert got.tolist() == [_reference_hash(t.encode()) for t in tokens[1:]]


def test_words_of_ascii_text_are_those_of_the_regular_expression() -> None:
    """The byte-wise word split of ASCII text (the fast path) gives the words, hashes and texts
    of the Arrow kernels (utf8_lower, split on WORD_SPLIT), also for empty texts, nulls filled,
    texts of separators only, and a sliced array."""
    rng = np.random.default_rng(6)
    alphabet = np.array(list("aZq_09 .,-\n\t!'\"/"))
    for _ in range(300):
        n = int(rng.integers(1, 12))
        texts = ["".join(rng.choice(alphabet, rng.integers(0, 25))) for _ in range(n)]
        arr = pa.array(texts, pa.string()).slice(int(rng.integers(0, n)))
        offsets, data = episode_vectors.string_parts(arr)
        h1, of1 = episode_vectors._words_arrow(arr)
        h2, of2 = episode_vectors._words_ascii(offsets, data)
        assert h1.tolist() == h2.tolist(), texts
        assert of1.tolist() == of2.tolist(), texts


def test_text_vectors_take_the_arrow_path_for_text_beyond_ascii() -> None:
    """A text with a non-ASCII letter is split by the Unicode classes: 'naïve' is one word."""
    rows = np.zeros(1, np.int64)
    accented, _ = episode_vectors.text_vectors(pa.array(["naïve naïve"]), rows, 1)
    split, _ = episode_vectors.text_vectors(pa.array(["na ve na ve"]), rows, 1)
    whole, _ = episode_vectors.text_vectors(pa.array(["naive naive"]), rows, 1)
    assert np.count_nonzero(accented) <= 2  # one word and one bigram
    assert not np.array_equal(accented, split)
    assert not np.array_equal(accented, whole)


def test_finite_values_whose_sum_overflows_fold_as_the_general_path() -> None:
    # Finite float64 values whose sum overflows take the path for NaN and infinities; they once
    # came back to it without end (RecursionError). They fold as the general path folds them.
    values = np.array([[1e308, 1e308, 1.0], [-1e308, 2.0, 3.0]])
    fixed = pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), 3)
    got = episode_vectors.fold(fixed, 2, 2)
    want = episode_vectors._fold_any(fixed.cast(pa.list_(pa.float64())), 2, 2)
    assert np.array_equal(got, want)
    t = pa.table({"episode_id": ["a", "a"], "step": pa.array([0, 1], pa.int64()), "obs": fixed})
    (chunk,) = iter_step_features([t])
    assert chunk.modality == ["numeric"]


def test_numeric_vectors_in_place_are_those_of_a_copy() -> None:
    # The recording forms the signed values in its scratch array (overwrite): the same
    # vectors, bit for bit, as from an untouched array; episodes of one length and of many.
    rng = np.random.default_rng(5)
    for lengths in ([1000] * 40, [200] * 90 + [7], [3, 17000, 5]):
        lens = np.array(lengths, dtype=np.int64)
        starts = np.cumsum(lens) - lens
        x = rng.normal(size=(int(lens.sum()), 21))
        want = episode_vectors.numeric_vectors(x.copy(), starts, lens)
        got = episode_vectors.numeric_vectors(x, starts, lens, overwrite=True)
        assert got[0].tobytes() == want[0].tobytes()
        assert np.array_equal(got[1], want[1])


def test_values_sorted_owner_by_owner_are_those_of_one_sort(monkeypatch: Any) -> None:
    """`sorted_by_owner` gives the array one sort gives, owner by owner or whole: owners in
    order or not, spans empty, of one value, long or short, repeated values; and `text_vectors`
    gives the same vectors, bit for bit, whichever way it sorts."""
    rng = np.random.default_rng(11)
    for case in range(400):
        n = int(rng.integers(1, 40))
        n1, n2 = int(rng.integers(0, 600)), int(rng.integers(0, 600))
        first = np.sort(rng.integers(0, n, n1)).astype(np.int64)
        second = np.sort(rng.integers(0, n, n2)).astype(np.int64)
        if case % 5 == 0 and n1 > 1:  # owners out of order: the one sort
            first = rng.permutation(first)
        keys = rng.integers(0, 1 << int(rng.integers(1, 41)), n1 + n2, dtype=np.int64)
        owners = np.concatenate([first, second]).astype(np.uint64)
        packed = (owners << np.uint64(40)) | keys.astype(np.uint64)
        want = np.sort(packed)
        monkeypatch.setattr(episode_vectors, "SEGMENT_SORT_MIN", int(rng.integers(0, 3)))
        got = episode_vectors.sorted_by_owner(packed.copy(), first, second, n)
        assert got.tolist() == want.tolist(), case
    words = ["the", "agent", "calls", "a", "tool", "to", "fetch", "fetch", "the", "page"]
    texts = pa.array([" ".join(rng.choice(words, int(rng.integers(0, 30)))) for _ in range(300)])
    rows = np.sort(rng.integers(0, 40, len(texts))).astype(np.int64)
    got = []
    for least in (0, 1 << 30):  # owner by owner, then one sort
        monkeypatch.setattr(episode_vectors, "SEGMENT_SORT_MIN", least)
        got.append(episode_vectors.text_vectors(texts, rows, 40))
    assert got[0][0].tobytes() == got[1][0].tobytes()
    assert got[0][1].tolist() == got[1][1].tolist()
