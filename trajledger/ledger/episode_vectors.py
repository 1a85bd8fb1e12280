"""An episode's near-duplicate feature vector, of either kind, from its rows: the kernels.

Scope: the two vectors of ``ledger.episode_features`` (whose module docstring defines every
feature of an episode), each `VECTOR_DIM` float32 scaled to unit length:

- the text vector (`text_vectors`): texts lower-cased and split into words on `WORD_SPLIT`
  (byte-wise for ASCII text, by Arrow's kernels otherwise), each word hashed by `token_hashes`
  (a polynomial over its UTF-8 bytes, finalised by SplitMix64), bigrams of consecutive words,
  and a hashed bag of the distinct unigrams and bigrams;
- the numeric vector (`numeric_features`): each step's obs and action folded into 16 and 4
  slots (`fold`) beside its reward, and the 21 features of every step count-sketched into the
  buckets SHAKE-256 chooses (`numeric_vectors`), in spans of `_SKETCH_BLOCK` steps for a long
  episode.

Vectorised over whole arrays (no per-token or per-step Python step); a vector depends on its
own rows alone, never on the rows beside them or on the slices the work is cut into
(`TEXT_SLICE`, `NUMERIC_SLICE`). A module apart from ``episode_features.py``, which stood at
997 of the 1,000 lines the house allows: that module finds the episodes of a run of steps, their
fingerprint, modality and safety sum, and chooses the rows whose vector this module computes;
the kernels here know nothing of episode ids, their order or record batches. Text and numeric
kernels are kept together because they give one vector (one length, one scaling, one index
column compared by cosine): its shape is owned here, and neither kind imports the other.
Non-scope: which rows make an episode, its modality and a chat's task side
(``episode_features.py``); keeping, indexing and comparing vectors (``batch_features.py``,
``index/``, ``contamination.py``).
Spec: docs/audit-index.md ("Duplicates and contamination between splits"); a change to a vector
is a change of ``episode_features.FEATURE_VERSION``.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .rollouts.space_values import leaf_arrays

__all__ = [
    "NUMERIC_SLICE",
    "SEGMENT_SORT_MIN",
    "SKETCH_PARTS",
    "TEXT_SLICE",
    "VECTOR_DIM",
    "WORD_SPLIT",
    "NumericSketch",
    "TextCounts",
    "fold",
    "numeric_features",
    "numeric_vectors",
    "sketch_parts",
    "sorted_by_owner",
    "splitmix64",
    "still_parts",
    "string_parts",
    "text_vectors",
    "token_hashes",
]

VECTOR_DIM = 128
"""Length of an episode's feature vector."""

WORD_SPLIT = r"[^\p{L}\p{N}_]+"
"""Words are maximal runs of Unicode letters, numbers and underscore (RE2 syntax)."""
TEXT_SLICE = 1 << 20
"""Bytes of text tokenised at once (scratch memory is about 40 times this)."""

_OBS_SLOTS, _ACTION_SLOTS = 16, 4
_STEP_FEATURES = _OBS_SLOTS + _ACTION_SLOTS + 1  # obs, action, reward
_CHUNK_STEPS = 256
_SKETCH_BLOCK = 1 << 14
"""Steps sketched by one ``bincount``: whole episodes, or spans of a longer one counted from its
first step (so an episode's sums never depend on its neighbours)."""
_U64 = np.uint64
_POLY = _U64(0x100000001B3)  # FNV-1 64-bit prime, the polynomial's base
_GOLDEN = _U64(0x9E3779B97F4A7C15)


# --------------------------------------------------------------------------------------------
# Hashing tokens, vectorised


def _splitmix64(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finaliser (Steele, Lea, Flood 2014), element-wise, wrapping mod 2**64."""
    with np.errstate(over="ignore"):
        z = z + _GOLDEN
        z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
        return np.asarray(z ^ (z >> _U64(31)), dtype=np.uint64)


splitmix64 = _splitmix64  # shared with ``ledger.step_windows``


_POLY_INVERSE = _U64(pow(int(_POLY), -1, 1 << 64))  # P is odd: invertible mod 2**64
_power_cache: dict[bool, npt.NDArray[np.uint64]] = {}
_POWER_CACHE_MAX = 2 * TEXT_SLICE
"""Powers kept for the next call, at most (16 MiB a table); a longer text makes its own."""


def _powers(n: int, inverse: bool = False) -> npt.NDArray[np.uint64]:
    """``P ** k mod 2**64`` (``P ** -k`` with ``inverse``) for k < n (at least), P `_POLY`."""
    have = _power_cache.get(inverse)
    if have is None or len(have) < n:
        grown = min(2 * len(have), _POWER_CACHE_MAX) if have is not None else 0
        out = np.empty(max(n, 1024, grown), dtype=np.uint64)
        out[0] = 1
        size, step = 1, _POLY_INVERSE if inverse else _POLY
        with np.errstate(over="ignore"):
            while size < len(out):  # doubling: P**(k + size) = P**k * P**size
                m = min(size, len(out) - size)
                out[size : size + m] = out[:m] * (out[size - 1] * step)
                size += m
        if len(out) > _POWER_CACHE_MAX:
            return out  # a very long text: not kept
        _power_cache[inverse] = have = out
    return have


def string_parts(arr: pa.Array) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """The int64 offsets (``len + 1``) and the data bytes of a string array (nulls empty)."""
    large = arr.cast(pa.large_string())
    if isinstance(large, pa.ChunkedArray):
        large = large.combine_chunks()
    offsets = np.frombuffer(
        large.buffers()[1], dtype=np.int64, count=len(large) + 1, offset=large.offset * 8
    )
    data_buf = large.buffers()[2]
    data = np.zeros(0, np.uint8) if data_buf is None else np.frombuffer(data_buf, dtype=np.uint8)
    return offsets, data


def token_hashes(tokens: pa.Array) -> npt.NDArray[np.uint64]:
    """A 64-bit hash of each non-empty string: SplitMix64(poly(bytes) xor len * golden).

    ``poly(b_0 .. b_{L-1}) = sum b_i * P**(L-1-i) mod 2**64`` with P the FNV-1 prime, computed
    for every token at once (one multiply per byte, one segmented sum).
    """
    n = len(tokens)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    offsets, data = string_parts(tokens)
    start, end = offsets[:-1], offsets[1:]
    if int((end - start).min()) <= 0:
        raise ValueError("token_hashes: empty tokens cannot be hashed")
    base = int(start[0])
    return _span_hashes(data[base : int(end[-1])], start - base, end - base)


def _span_hashes(
    data: npt.NDArray[np.uint8],
    start: npt.NDArray[np.int64],
    end: npt.NDArray[np.int64],
    table: npt.NDArray[np.uint64] | None = None,
) -> npt.NDArray[np.uint64]:
    """`token_hashes` of the byte spans ``data[start[i]:end[i]]`` (not empty; bytes outside
    every span are ignored), each byte mapped through ``table`` first when one is given.

    The polynomial of a span from prefix sums: with ``C[j] = sum_{i<j} data[i] * P**-i`` (P is
    odd, so invertible mod 2**64), ``poly(data[s:e]) = (C[e] - C[s]) * P**(e - 1)``: three
    operations per byte, whatever the spans.
    """
    lengths = end - start
    total = len(data)
    prefix = np.empty(total + 1, dtype=np.uint64)
    prefix[0] = 0
    with np.errstate(over="ignore"):
        # In place: no temporary of 8 bytes per byte of text (allocating and faulting in a
        # fresh one per call cost about as much as the arithmetic).
        if table is None:
            prefix[1:] = data
        else:  # the byte's value through the table, written as 64 bits (no cast after)
            np.take(table, data, out=prefix[1:], mode="clip")  # (clip: not buffered)
        np.multiply(prefix[1:], _powers(total, inverse=True)[:total], out=prefix[1:])
        np.cumsum(prefix[1:], out=prefix[1:])
        h = (prefix[end] - prefix[start]) * _powers(total)[end - 1]
        h = h ^ (lengths.astype(np.uint64) * _GOLDEN)
    return _splitmix64(np.asarray(h, dtype=np.uint64))


_ASCII_WORD = np.zeros(256, dtype=bool)
for _c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_":
    _ASCII_WORD[_c] = True
_ASCII_LOWER = np.arange(256, dtype=np.uint64)
_ASCII_LOWER[ord("A") : ord("Z") + 1] += _U64(32)


def _words_arrow(texts: pa.Array) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """The hash of each word of ``texts`` (`WORD_SPLIT`, lower-cased) and the text it is in."""
    words = pc.split_pattern_regex(pc.utf8_lower(texts), pattern=WORD_SPLIT)
    flat = pc.list_flatten(words)
    parent = np.asarray(pc.list_parent_indices(words).to_numpy(zero_copy_only=False))
    keep = pc.greater(pc.binary_length(flat), 0)
    tokens = flat.filter(keep)
    text_of = parent[np.asarray(keep.to_numpy(zero_copy_only=False), dtype=bool)]
    return token_hashes(tokens), text_of.astype(np.int64)


def _words_ascii(
    offsets: npt.NDArray[np.int64], data: npt.NDArray[np.uint8]
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """`_words_arrow` of texts whose bytes are all ASCII, from their offsets and data, with
    numpy alone: in ASCII, ``[^\\p{L}\\p{N}_]+`` separates runs of ``[A-Za-z0-9_]`` and
    lower-casing maps A-Z to a-z, so words are found and hashed byte-wise, without regular
    expressions or building the words (tests/unit/ledger/test_episode_vectors.py compares)."""
    base, total = int(offsets[0]), int(offsets[-1] - offsets[0])
    if total == 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    raw = data[base : base + total]
    word = np.take(_ASCII_WORD, raw)  # a table lookup per byte: faster than ``table[raw]``
    bounds = offsets - base
    inner = bounds[(bounds > 0) & (bounds < total)]  # a text starts here: words end before
    # A word starts at a word byte after a byte that is not (for booleans ``a > b`` is
    # ``a and not b``), or at the start of a text; it ends likewise before one, or at a text's
    # end. One pass each, written in place.
    edge = np.empty(total, dtype=bool)
    edge[0] = word[0]
    np.greater(word[1:], word[:-1], out=edge[1:])
    edge[inner] = word[inner]
    start = np.flatnonzero(edge)
    if len(start) == 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    edge[-1] = word[-1]
    np.greater(word[:-1], word[1:], out=edge[:-1])
    edge[inner - 1] = word[inner - 1]
    end = np.flatnonzero(edge) + 1
    h = _span_hashes(raw, start, end, _ASCII_LOWER)
    # The text of each word: text i holds the words starting in bounds[i] .. bounds[i + 1]
    # (a search per text, not per word).
    per_text = np.diff(np.searchsorted(start, bounds))
    text_of = np.repeat(np.arange(len(per_text), dtype=np.int64), per_text)
    return h, text_of


def _words(texts: pa.Array) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """The hash of each word of ``texts`` (a null text is empty) and the text it is in."""
    if len(texts) == 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    if texts.null_count:
        texts = texts.fill_null("")
    offsets, data = string_parts(texts)
    if int(np.max(data[int(offsets[0]) : int(offsets[-1])], initial=0)) < 0x80:
        return _words_ascii(offsets, data)
    return _words_arrow(texts)


def _bigram_hashes(a: npt.NDArray[np.uint64], b: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    with np.errstate(over="ignore"):
        return _splitmix64(a * _GOLDEN + b + _U64(1))


# --------------------------------------------------------------------------------------------
# Vectors


def _unit_rows(v: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    with np.errstate(over="ignore"):  # a norm past float64's range: no vector (not valid)
        norms = np.linalg.norm(v, axis=1)
    valid = np.isfinite(norms) & (norms > 0)
    out = np.zeros(v.shape, dtype=np.float32)
    out[valid] = (v[valid] / norms[valid, None]).astype(np.float32)
    return out, valid


def text_vectors(
    texts: pa.Array, rows: npt.NDArray[np.int64], n: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """Hashed bags of word unigrams and bigrams: the text of row ``i`` belongs to vector
    ``rows[i]`` (of ``n``).

    Text is lower-cased and split into words (`WORD_SPLIT`); bigrams pair consecutive words of
    one text. Each distinct unigram or bigram of a vector adds ``±(1 + ln count)`` to bucket
    ``hash mod 128``, negative when bit 39 of the hash is set; vectors are scaled to unit
    length. (Words are told apart by the low 40 bits of their hash within one vector.)

    Returns:
        ``(vectors, valid)``: ``(n, 128)`` float32 and whether each vector has any word.
    """
    out = np.zeros((n, VECTOR_DIM), dtype=np.float64)
    h, text_of = _words(texts)
    if len(h) == 0:
        return _unit_rows(out)
    owner = rows[text_of]
    pair = text_of[1:] == text_of[:-1]
    keys = np.concatenate([h, _bigram_hashes(h[:-1], h[1:])[pair]])
    owners = np.concatenate([owner, owner[:-1][pair]]).astype(np.uint64)
    # Count each distinct (vector, word hash) with one sort of packed 64-bit values: the
    # owner in the top 24 bits, the hash's low 40 bits below (sign and bucket come from those).
    if n >= 1 << 24:
        raise ValueError(f"text_vectors: {n} vectors in one call, want fewer than 2**24")
    packed = (owners << _U64(40)) | (keys & _U64((1 << 40) - 1))
    packed = sorted_by_owner(packed, owner, owner[:-1][pair], n)
    unique, counts = _distinct(packed)
    weight = _weights(unique, counts)
    # The slot: owner * 128 + bucket (below 2**31, so the same value as an int64).
    slot = ((unique >> _U64(40)) << _U64(7)) | (unique & _U64(VECTOR_DIM - 1))
    counted = np.bincount(slot.view(np.int64), weights=weight, minlength=n * VECTOR_DIM)
    out += counted.reshape(n, VECTOR_DIM)
    return _unit_rows(out)


def _distinct(
    keys: npt.NDArray[np.uint64], counts: npt.NDArray[np.int64] | None = None
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """The distinct values of the sorted ``keys`` and how often each occurs (the sum of their
    ``counts``, when given: each key counted that many times)."""
    if not len(keys):
        return keys, np.zeros(0, np.int64)
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    if counts is None:
        return keys[starts], np.diff(np.append(starts, len(keys)))
    return keys[starts], np.add.reduceat(counts, starts)


def _weights(unique: npt.NDArray[np.uint64], counts: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
    """``±(1 + ln count)`` of each distinct key, negative when bit 39 of its hash is set."""
    weight = np.log(counts)
    weight += 1.0
    np.negative(weight, out=weight, where=(unique & _U64(1 << 39)) != 0)  # exactly -1.0 * w
    return weight


class TextCounts:
    """The text vector of one episode whose task-side texts come in pieces (a long episode):
    its distinct words and bigrams, counted as they come, the same vector as `text_vectors` of
    all its texts at once (whose sums run over the distinct keys in sorted order, as here).
    Memory: 16 bytes a distinct word or bigram of the episode (twice that while merging), not
    a byte of its text kept. The pieces' counts are merged into the whole's once they hold as
    many keys as it does (or `_MERGE_MIN`): each key is merged about log(pieces) times, not
    once a piece."""

    _MERGE_MIN = 1 << 16

    def __init__(self) -> None:
        """No text yet."""
        self._keys = np.zeros(0, dtype=np.uint64)
        self._counts = np.zeros(0, dtype=np.int64)
        self._pending: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]] = []
        self._held = 0

    def add(self, texts: pa.Array) -> None:
        """The next rows' texts (each row's words and their bigrams; no bigram across rows)."""
        h, text_of = _words(texts)
        if len(h) == 0:
            return
        pair = text_of[1:] == text_of[:-1]
        keys = np.concatenate([h, _bigram_hashes(h[:-1], h[1:])[pair]]) & _U64((1 << 40) - 1)
        keys.sort()
        self._pending.append(_distinct(keys))
        self._held += len(self._pending[-1][0])
        if self._held >= max(len(self._keys), self._MERGE_MIN):
            self._merge()

    def _merge(self) -> None:
        merged = np.concatenate([self._keys, *(k for k, _ in self._pending)])
        order = np.argsort(merged, kind="stable")
        counts = np.concatenate([self._counts, *(c for _, c in self._pending)])
        self._keys, self._counts = _distinct(merged[order], counts[order])
        self._pending, self._held = [], 0

    def vector(self) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        """The ``(1, 128)`` vector and whether it is valid (any word)."""
        self._merge()
        out = np.zeros((1, VECTOR_DIM), dtype=np.float64)
        if len(self._keys):
            slot = (self._keys & _U64(VECTOR_DIM - 1)).astype(np.int64)
            counted = np.bincount(
                slot, weights=_weights(self._keys, self._counts), minlength=VECTOR_DIM
            )
            out += counted.reshape(1, VECTOR_DIM)
        return _unit_rows(out)


SEGMENT_SORT_MIN: Final = 64
"""`sorted_by_owner` sorts owner by owner when the owners' spans hold at least this many
values on average; below it, one sort of the whole array is cheaper than a call per span."""


def sorted_by_owner(
    packed: npt.NDArray[np.uint64],
    first: npt.NDArray[np.int64],
    second: npt.NDArray[np.int64],
    n: int,
) -> npt.NDArray[np.uint64]:
    """``np.sort(packed)`` (which may sort ``packed`` in place), where ``packed`` is two runs,
    words then bigrams, each value's owner (of ``n``) in its top bits: ``first`` and
    ``second``, the runs' owners.

    When each run's owners are in order (the rows of an episode together, as recorded), the
    values are moved into owner order, each owner's words then bigrams (a scatter), and each
    owner's span is sorted alone: the same values in the same order as one sort of the whole,
    since an owner's values sort below the next owner's. Many short sorts are cheaper than one
    long one (about a quarter of its time for spans of about 500 values: a 1 MiB block of the
    bench's chat records). Otherwise, or for short spans, one sort (tested against it:
    tests/unit/ledger/test_episode_vectors.py)."""
    count_1 = np.bincount(first, minlength=n)
    count_2 = np.bincount(second, minlength=n)
    ends = np.cumsum(count_1 + count_2)
    spans = max(int(np.count_nonzero(count_1 + count_2 > 1)), 1)
    if (
        len(packed) < SEGMENT_SORT_MIN * spans
        or np.any(first[1:] < first[:-1])
        or np.any(second[1:] < second[:-1])
    ):
        packed.sort()  # in place
        return packed
    out = np.empty_like(packed)
    # The i-th word is preceded by the i words before it and by the bigrams of every owner
    # before its own; the j-th bigram by the j bigrams before it and every word up to its
    # owner's last.
    before_2 = np.cumsum(count_2) - count_2
    out[np.arange(len(first)) + before_2[first]] = packed[: len(first)]
    out[np.arange(len(second)) + np.cumsum(count_1)[second]] = packed[len(first) :]
    wide = np.flatnonzero(count_1 + count_2 > 1)
    for start, end in zip((ends - count_1 - count_2)[wide].tolist(), ends[wide].tolist(),
                          strict=True):  # fmt: skip
        out[start:end].sort()
    return out


@lru_cache(maxsize=256)
def _sketch_chunk(chunk: int) -> npt.NDArray[np.uint8]:
    """One byte per (step, feature) of steps ``chunk*256 ..``: bits of SHAKE-256, fixed forever.
    The low 7 bits are the bucket, the high bit the sign (set: negative)."""
    seed = f"trajledger/features/v3/numeric/{chunk}".encode()
    raw = hashlib.shake_256(seed).digest(_CHUNK_STEPS * _STEP_FEATURES)
    return np.frombuffer(raw, np.uint8).reshape(_CHUNK_STEPS, _STEP_FEATURES)


def _span_tables(first: int, chunks: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
    """Buckets and signs of steps ``first*256 .. (first+chunks)*256``, one row per step."""
    raw = np.concatenate([_sketch_chunk(c) for c in range(first, first + chunks)])
    return (raw & 127).astype(np.intp), 1.0 - 2.0 * (raw >> 7).astype(np.float64)


_sketch_tables = lru_cache(maxsize=8)(_span_tables)
"""`_span_tables`, kept for the next call (a long episode's later spans are not: each is
used once, 5.5 MiB a span)."""


def fold(
    col: pa.Array | pa.ChunkedArray | None,
    n: int,
    width: int,
    out: npt.NDArray[np.float64] | None = None,
) -> npt.NDArray[np.float64]:
    """A list column as ``(n, width)``: value k of a row adds to slot k % width with sign
    (-1)^(k // width), so vectors of any length fit (a count-sketch fold; identity up to width).
    A Dict or Tuple space column folds each of its tensors and adds them; strings fold to 0.
    With ``out`` (an ``(n, width)`` view), the result is written there."""
    if col is None or col.null_count == n:
        result = np.zeros((n, width))
    else:
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if pa.types.is_fixed_size_list(arr.type) and not arr.null_count:
            return _fold_fixed(arr, n, width, out)
        if pa.types.is_list(arr.type) and not arr.null_count and n:
            bounds = pc.min_max(pc.list_value_length(arr)).as_py()
            if bounds["min"] == bounds["max"] and bounds["min"]:  # one shape: a tensor column
                flat = pc.list_flatten(arr)
                fixed = pa.FixedSizeListArray.from_arrays(flat, int(bounds["min"]))
                return _fold_fixed(fixed, n, width, out)
        result = _fold_any(arr, n, width)
    if out is None:
        return result
    out[...] = result
    return out


def _fold_any(arr: pa.Array, n: int, width: int) -> npt.NDArray[np.float64]:
    """`fold` in general: lists of any lengths, nulls, Dict and Tuple columns."""
    if pa.types.is_fixed_size_list(arr.type):  # with null rows
        arr = arr.cast(pa.list_(arr.type.value_field))
    if not pa.types.is_list(arr.type):
        leaves = [
            a
            for _, a in leaf_arrays("", arr)
            if pa.types.is_list(a.type) or pa.types.is_fixed_size_list(a.type)
        ]
        return sum((fold(a, n, width) for a in leaves), np.zeros((n, width)))
    lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
    lengths = np.asarray(lengths, dtype=np.int64)
    values = np.asarray(pc.list_flatten(arr).to_numpy(zero_copy_only=False), dtype=np.float64)
    values = np.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0)
    rows = np.repeat(np.arange(n), lengths)
    k = np.arange(len(values)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    signed = values * (1.0 - 2.0 * ((k // width) % 2))
    folded = np.bincount(rows * width + k % width, weights=signed, minlength=n * width)
    return np.asarray(folded, dtype=np.float64).reshape(n, width)


def _fold_fixed(
    arr: pa.FixedSizeListArray,
    n: int,
    width: int,
    out: npt.NDArray[np.float64] | None = None,
    *,
    finite: bool = False,
) -> npt.NDArray[np.float64]:
    """`fold` of a fixed-size list column without null rows: whole blocks of ``width`` values
    added and subtracted in turn, in the order (and so with the sums) of the general case.
    ``finite``: the values are known to be finite (not checked again)."""
    size = arr.type.list_size
    values = np.asarray(arr.flatten().to_numpy(zero_copy_only=False)).reshape(n, size)
    if values.dtype.kind not in "biuf":
        values = values.astype(np.float64)
    out = np.empty((n, width)) if out is None else out
    out[:, : min(size, width)] = values[:, :width]  # 0 + v: only a zero's sign can differ
    out[:, size:] = 0.0
    for block, lo in enumerate(range(width, size, width), start=1):
        part = values[:, lo : lo + width]
        if block % 2:
            out[:, : part.shape[1]] -= part
        else:
            out[:, : part.shape[1]] += part
    with np.errstate(over="ignore"):
        total = np.sum(values) if not finite and values.dtype.kind == "f" else 0.0
    if not np.isfinite(total):
        # A NaN or infinity counts as 0 where it is (rare: one sum in the values' own type
        # tells; a sum that overflows only sends finite values down this exact path too, which
        # gives them the same result).
        clean = np.nan_to_num(values.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        fixed = pa.FixedSizeListArray.from_arrays(clean.reshape(-1), size)
        # (Checked again, finite values whose sum overflows came back here without end.)
        return _fold_fixed(fixed, n, width, out, finite=True)
    return out


def numeric_vectors(
    x: npt.NDArray[np.float64],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    *,
    overwrite: bool = False,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
    """Count sketches of episodes' time-aligned step features (obs, action, reward).

    Episode ``k`` is rows ``starts[k] .. starts[k] + lengths[k]`` of ``x`` (one row of 21
    features per step). Feature ``j`` of its step ``t`` adds ``±x[t, j]`` to one of the 128
    buckets, both chosen by the byte of SHAKE-256 for ``(t, j)`` (`_sketch_chunk`): an
    unbiased sketch of the whole ``t x 21`` series, so cosine similarity of the sketches
    estimates that of the series (as a dense random projection would, at 21 additions per
    step instead of 2,688 multiplications). Sums run in float64 in step order per episode.
    With ``overwrite``, the signed values of episodes of one length are formed in ``x`` itself
    (a C-contiguous array the caller has no further use for): no second array of its size.
    """
    n_ep = len(starts)
    out = np.zeros((n_ep, VECTOR_DIM))
    if n_ep == 0:
        return _unit_rows(out)
    cum = np.cumsum(lengths)
    a = 0
    while a < n_ep:
        if lengths[a] > _SKETCH_BLOCK:
            out[a] = _long_sketch(x, int(starts[a]), int(lengths[a]))
            a += 1
            continue
        base = int(cum[a - 1]) if a else 0
        b = int(np.searchsorted(cum, base + _SKETCH_BLOCK, side="right"))
        b = max(a + 1, min(b, n_ep))
        while b > a + 1 and lengths[b - 1] > _SKETCH_BLOCK:
            b -= 1
        lens = lengths[a:b]
        total, longest = int(lens.sum()), int(lens.max())
        first = int(starts[a])
        contiguous = np.array_equal(starts[a:b], first + np.cumsum(lens) - lens)
        buckets, signs = _sketch_tables(0, -(-longest // _CHUNK_STEPS))
        if contiguous and longest * (b - a) == total:
            # Episodes of one length, one after the other (the usual case): no gathers, and
            # the keys are the same for every such block (made once).
            keys = _block_keys(b - a, longest)
            span = x[first : first + total].reshape(b - a, longest, -1)
            if overwrite and x.flags.c_contiguous:
                weights = np.multiply(span, signs[:longest], out=span)
            else:
                weights = span * signs[:longest]
        else:
            owner = np.arange(b - a) * VECTOR_DIM
            pos = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
            rows = pos + np.repeat(starts[a:b], lens)
            keys = buckets[pos] + np.repeat(owner, lens)[:, None]
            weights = signs[pos] * x[rows]
        out[a:b] = np.bincount(
            keys.ravel(), weights=weights.ravel(), minlength=(b - a) * VECTOR_DIM
        ).reshape(b - a, VECTOR_DIM)
        a = b
    return _unit_rows(out)


@lru_cache(maxsize=4)
def _block_keys(count: int, length: int) -> npt.NDArray[np.intp]:
    """The ``bincount`` keys of `count` episodes of `length` steps sketched together (episode k
    counts into buckets ``k*128 ..``), shared by every block of that shape: never written to
    (left writeable, as ``bincount`` copies a read-only array)."""
    buckets, _ = _sketch_tables(0, -(-length // _CHUNK_STEPS))
    return buckets[None, :length] + (np.arange(count) * VECTOR_DIM)[:, None, None]


def _long_sketch(x: npt.NDArray[np.float64], start: int, length: int) -> npt.NDArray[np.float64]:
    """The sketch of one episode longer than `_SKETCH_BLOCK`, in spans from its first step."""
    out = np.zeros(VECTOR_DIM)
    for lo in range(0, length, _SKETCH_BLOCK):
        span = min(_SKETCH_BLOCK, length - lo)
        buckets, signs = _sketch_tables(lo // _CHUNK_STEPS, -(-span // _CHUNK_STEPS))
        rows = x[start + lo : start + lo + span]
        out += np.bincount(
            buckets[:span].ravel(), weights=(signs[:span] * rows).ravel(), minlength=VECTOR_DIM
        )
    return out


NUMERIC_SLICE = 1 << 15
"""Steps whose numeric features are folded and sketched at once (whole episodes; a longer
episode alone): a scratch array of 21 float64 a step, small enough to stay in cache."""


def numeric_features(
    columns: tuple[pa.Array | None, pa.Array | None, pa.Array | None],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    *,
    out: tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_], npt.NDArray[np.int64]],
) -> None:
    """The count sketches of numeric episodes (rows ``starts[k] ..`` of the obs, action and
    reward columns), written to ``vectors[at]`` and ``valid[at]`` of ``out``.

    Each step's 21 features depend on its row alone and each sketch on its episode's rows
    alone, so episodes are taken in slices of about `NUMERIC_SLICE` steps through one
    scratch array: the same values as all rows at once, without an array of the whole batch's
    size (allocated and faulted in anew for every batch)."""
    vectors, valid, at = out
    ends = starts + lengths
    scratch = np.empty((min(int(ends[-1] - starts[0]), NUMERIC_SLICE), _STEP_FEATURES))
    k = 0
    while k < len(starts):
        lo = int(starts[k])
        j = max(k + 1, int(np.searchsorted(ends, lo + NUMERIC_SLICE, side="right")))
        m = int(ends[j - 1]) - lo
        x = scratch[:m] if m <= len(scratch) else np.empty((m, _STEP_FEATURES))
        _step_features(columns, lo, x)
        vectors[at[k:j]], valid[at[k:j]] = numeric_vectors(
            x, starts[k:j] - lo, lengths[k:j], overwrite=True
        )
        k = j


def _step_features(
    columns: tuple[pa.Array | None, pa.Array | None, pa.Array | None],
    lo: int,
    x: npt.NDArray[np.float64],
) -> None:
    """The 21 features of the steps ``lo .. lo + len(x)`` of the obs, action and reward
    columns, written to ``x`` (each row's from its step alone)."""
    obs, action, reward = columns
    m = len(x)
    fold(None if obs is None else obs.slice(lo, m), m, _OBS_SLOTS, x[:, :_OBS_SLOTS])
    fold(
        None if action is None else action.slice(lo, m), m, _ACTION_SLOTS,
        x[:, _OBS_SLOTS : _OBS_SLOTS + _ACTION_SLOTS],
    )  # fmt: skip
    x[:, -1] = (
        0.0
        if reward is None
        else np.nan_to_num(
            np.asarray(
                reward.slice(lo, m).cast(pa.float64()).fill_null(0).to_numpy(),
                dtype=np.float64,
            ),
            nan=0.0, posinf=0.0, neginf=0.0,
        )
    )  # fmt: skip


SKETCH_PARTS = 11
"""The parts of an episode's numeric sketch (`sketch_parts`): its observations', each action
slot's values and ones, its rewards' and ones."""
_PART_OF = np.array([0] * _OBS_SLOTS + list(range(1, _ACTION_SLOTS + 2)), dtype=np.intp)
_ONES_OF = _PART_OF[_OBS_SLOTS:] + _ACTION_SLOTS + 1  # the ones of action slot j and reward


@lru_cache(maxsize=4)
def _part_keys(count: int, length: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
    """`sketch_parts`'s ``bincount`` keys of `count` episodes of `length` steps (never written
    to), and the parts of ones of one such episode (flat, its other parts zero)."""
    buckets, signs = _sketch_tables(0, -(-length // _CHUNK_STEPS))
    b = buckets[:length]
    keys = ((np.arange(count) * SKETCH_PARTS * VECTOR_DIM)[:, None, None]
            + _PART_OF * VECTOR_DIM + b).ravel()
    ones = np.bincount((_ONES_OF * VECTOR_DIM + b[:, _OBS_SLOTS:]).ravel(),
                       weights=signs[:length, _OBS_SLOTS:].ravel(),
                       minlength=SKETCH_PARTS * VECTOR_DIM)
    return keys, np.asarray(ones, dtype=np.float64)


@lru_cache(maxsize=4)
def still_parts(length: int) -> npt.NDArray[np.float64]:
    """``(2 * 16, 128)``: the observations' part (`sketch_parts`' part 0) of an episode of
    ``length`` steps whose observations fold to a 1 in one slot at every step, and to the step
    (0, 1, ...) in it, for each of the 16 slots. Observations in their span (constant over the
    episode, a counter) are the same, to a scale, in every such episode of the length: they say
    nothing of which episode it is (rev45 finding 1: `contamination_matcher.Parts`)."""
    buckets, signs = _sketch_tables(0, -(-length // _CHUNK_STEPS))
    b, sg = buckets[:length, :_OBS_SLOTS], signs[:length, :_OBS_SLOTS]
    out = np.zeros((2 * _OBS_SLOTS, VECTOR_DIM))
    steps = np.arange(length, dtype=np.float64)[:, None]
    for j in range(_OBS_SLOTS):
        out[j] = np.bincount(b[:, j], weights=sg[:, j], minlength=VECTOR_DIM)
        out[_OBS_SLOTS + j] = np.bincount(b[:, j], weights=(sg * steps)[:, j],
                                          minlength=VECTOR_DIM)
    out.flags.writeable = False
    return out


def sketch_parts(
    columns: tuple[pa.Array | None, pa.Array | None, pa.Array | None],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """The sketch of each episode (rows ``starts[k] ..`` of the obs, action and reward
    columns, as `numeric_features`) split by what it sums, ``(n, SKETCH_PARTS, 128)`` float64,
    not scaled: part 0 its observations' terms, 1 to 4 each action slot's, 5 the reward's
    (their sum is the sketch before scaling, to float64 rounding), and 6 to 10 the sketch of a 1
    in each action slot and in the reward at every step (the same for every episode of its
    length). The sketch is linear and separable by its slots, so an episode's actions and
    rewards each mapped affinely (``2 r + 1``, ``1 - a``) sketch in the span of these parts
    with the observations' part (`contamination_matcher.tangents`)."""
    n = len(starts)
    out = np.zeros(n * SKETCH_PARTS * VECTOR_DIM)
    if not n:
        return out.reshape(0, SKETCH_PARTS, VECTOR_DIM)
    buckets, signs = _span_tables(0, -(-int(lengths.max()) // _CHUNK_STEPS))
    for k in range(0, n, 256):  # a few thousand steps at a time
        ss, ls = starts[k : k + 256], lengths[k : k + 256]
        lo, hi = int(ss.min()), int((ss + ls).max())
        if hi - lo <= 4 * int(ls.sum()):  # close together: one pass over their span
            span = np.empty((hi - lo, _STEP_FEATURES))
            _step_features(columns, lo, span)
            x = span[np.repeat(ss - lo - np.cumsum(ls) + ls, ls) + np.arange(int(ls.sum()))]
        else:
            x = np.empty((int(ls.sum()), _STEP_FEATURES))
            for at, s, m in zip((np.cumsum(ls) - ls).tolist(), ss.tolist(), ls.tolist(),
                                strict=True):
                _step_features(columns, s, x[at : at + m])
        size = len(ls) * SKETCH_PARTS * VECTOR_DIM
        if (ls == ls[0]).all():  # one length (the usual case): keys made once, ones once
            keys, ones = _part_keys(len(ls), int(ls[0]))
            part = np.asarray(np.bincount(keys, weights=(
                signs[: ls[0]] * x.reshape(len(ls), ls[0], -1)).ravel(), minlength=size),
                dtype=np.float64)
            part.reshape(len(ls), SKETCH_PARTS * VECTOR_DIM)[:] += ones
        else:
            pos = np.arange(len(x)) - np.repeat(np.cumsum(ls) - ls, ls)
            base = np.repeat(np.arange(len(ls)) * SKETCH_PARTS * VECTOR_DIM, ls)[:, None]
            b, sg = buckets[pos], signs[pos]
            part = np.asarray(np.bincount((base + _PART_OF * VECTOR_DIM + b).ravel(),
                                          weights=(sg * x).ravel(), minlength=size), np.float64)
            part += np.bincount((base + _ONES_OF * VECTOR_DIM + b[:, _OBS_SLOTS:]).ravel(),
                                weights=sg[:, _OBS_SLOTS:].ravel(), minlength=size)
        out[k * SKETCH_PARTS * VECTOR_DIM : k * SKETCH_PARTS * VECTOR_DIM + size] = part
    return out.reshape(n, SKETCH_PARTS, VECTOR_DIM)


class NumericSketch:
    """The count sketch of one numeric episode whose steps come in pieces (a long episode),
    in memory of one span of `_SKETCH_BLOCK` steps: the same vector as `numeric_vectors` of
    all its steps at once, which sums a longer episode span by span from its first step (each
    span's ``bincount`` added in turn, as here) and a shorter one in one ``bincount``."""

    def __init__(self) -> None:
        """No steps yet."""
        self._sum = np.zeros(VECTOR_DIM)
        self._span = np.empty((0, _STEP_FEATURES))
        self._held = 0  # steps of the span not yet counted
        self._counted = 0  # steps of the spans counted

    def add(self, columns: tuple[pa.Array | None, pa.Array | None, pa.Array | None]) -> None:
        """The next steps' obs, action and reward columns (of one length; None: absent)."""
        n = next((len(c) for c in columns if c is not None), 0)
        if not len(self._span):
            self._span = np.empty((_SKETCH_BLOCK, _STEP_FEATURES))
        lo = 0
        while lo < n:
            if self._held == _SKETCH_BLOCK:  # more steps come: the full span is counted
                buckets, signs = _span_tables(self._counted // _CHUNK_STEPS,
                                              _SKETCH_BLOCK // _CHUNK_STEPS)  # fmt: skip
                self._sum += np.bincount(
                    buckets.ravel(), weights=(signs * self._span).ravel(), minlength=VECTOR_DIM
                )
                self._counted += _SKETCH_BLOCK
                self._held = 0
            m = min(n - lo, _SKETCH_BLOCK - self._held)
            _step_features(columns, lo, self._span[self._held : self._held + m])
            self._held += m
            lo += m

    def vector(self) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        """The ``(1, 128)`` sketch and whether it is valid (not all zeros)."""
        steps = np.array([self._counted + self._held], dtype=np.int64)
        if not self._counted:
            return numeric_vectors(self._span[: self._held], np.zeros(1, np.int64), steps)
        out = np.zeros((1, VECTOR_DIM))
        out[0] = self._sum
        buckets, signs = _span_tables(self._counted // _CHUNK_STEPS,
                                      -(-self._held // _CHUNK_STEPS))  # fmt: skip
        out[0] += np.bincount(
            buckets[: self._held].ravel(),
            weights=(signs[: self._held] * self._span[: self._held]).ravel(),
            minlength=VECTOR_DIM,
        )
        return _unit_rows(out)
