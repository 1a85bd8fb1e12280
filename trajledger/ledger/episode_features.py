"""Episode features of a step file, streamed record batch by record batch, vectorised.

Scope: for each episode of a rollout step table (``steps.parquet``), in file order:

- the exact content **fingerprint**: SHA-256 over the same bytes as
  `ledger.rollouts.dedup.episode_fingerprints` (step count, then each content column's name and
  values in step order), so both give the same hex for the same episode;
- its **modality** (``text`` when a step has ``content``, ``tool_calls`` or ``tool_results``);
- the near-duplicate **feature vector** (128 float32, unit length): a hashed bag of word
  unigrams and bigrams of the task side of a conversation, or a count sketch of the
  time-aligned numeric step features;
- the sum of its **safety interventions** (None when no step records them).

These are the one definition of an episode's duplicate fingerprints: recording computes them
once, while the steps are in memory (`FeatureStream`, kept next to the batch by
``ledger.batch_features``), and every reader that computes them again from the stored bytes
(the admission gate, the audit index, batches recorded before features were kept) gets the same
values bit for bit: each episode's features depend only on its own rows, never on how the
steps were cut into record batches.

`iter_step_features` reads record batches and carries only the unfinished last episode from
one batch to the next, so memory is bounded by one record batch plus the longest episode,
whatever the file's size. Every feature is computed with numpy / pyarrow kernels over a whole
record batch: tokenising, token hashing (a polynomial hash over the UTF-8 bytes, finalised by
SplitMix64), counting, bucketing and sketching have no per-token or per-step Python step. Only
the SHA-256 of the fingerprint runs once per episode.

Non-scope: storing features (``ledger.batch_features``, ``ledger.index``), judging them
(``ledger.contamination``).
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
Requires episodes to be contiguous and their steps ascending, as schema validation
guarantees for every recorded batch; a step file that breaks this within one record batch (or
across two consecutive ones) raises `FeatureOrderError`. The index also checks the episodes
against ``episodes.parquet`` in order, which catches an episode that reappears later.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from trajledger.verify.errors import FormatError

from .rollouts.space_values import leaf_arrays

if TYPE_CHECKING:
    import pyarrow.parquet as pq


__all__ = [
    "CONTENT_COLUMNS",
    "FEATURE_COLUMNS",
    "FEATURE_VERSION",
    "VECTOR_DIM",
    "FeatureChunk",
    "FeatureOrderError",
    "FeatureStream",
    "fold",
    "iter_step_features",
    "numeric_vectors",
    "text_vectors",
    "token_hashes",
    "whole_episodes",
]

FEATURE_VERSION = 3
"""Version of the feature definitions (2: vectorised token hashing; 3: numeric vectors are
count sketches); part of the index format and of every kept features file."""

VECTOR_DIM = 128
"""Length of an episode's feature vector."""

CONTENT_COLUMNS = (
    "obs",
    "action",
    "reward",
    "terminated",
    "truncated",
    "role",
    "content",
    "tool_calls",
    "tool_results",
)
"""The columns the fingerprint covers, in this order (as ``ledger.rollouts.dedup``)."""

FEATURE_COLUMNS = ("episode_id", "step", *CONTENT_COLUMNS, "safety_interventions")
"""The step columns `iter_step_features` reads."""

TEXT_COLUMNS = ("content", "tool_calls", "tool_results")
PROMPT_EXCLUDED = ("system", "assistant")
"""Roles left out of a text vector: shared by design (system) or the policy's answer."""

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


class FeatureOrderError(FormatError):
    """A step file whose episodes are not contiguous or whose steps are not ascending."""


# --------------------------------------------------------------------------------------------
# Hashing tokens, vectorised


def _splitmix64(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finaliser (Steele, Lea, Flood 2014), element-wise, wrapping mod 2**64."""
    with np.errstate(over="ignore"):
        z = z + _GOLDEN
        z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
        return np.asarray(z ^ (z >> _U64(31)), dtype=np.uint64)


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
    expressions or building the words (tests/unit/ledger/test_episode_features.py compares)."""
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
    if len(texts) == 0:
        return _unit_rows(out)
    if texts.null_count:
        texts = texts.fill_null("")
    offsets, data = string_parts(texts)
    if int(np.max(data[int(offsets[0]) : int(offsets[-1])], initial=0)) < 0x80:
        h, text_of = _words_ascii(offsets, data)
    else:
        h, text_of = _words_arrow(texts)
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
    packed.sort()  # in place
    first = np.concatenate(([True], packed[1:] != packed[:-1]))
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, len(packed)))
    unique = packed[starts]
    weight = np.log(counts)
    weight += 1.0
    np.negative(weight, out=weight, where=(unique & _U64(1 << 39)) != 0)  # exactly -1.0 * w
    # The slot: owner * 128 + bucket (below 2**31, so the same value as an int64).
    slot = ((unique >> _U64(40)) << _U64(7)) | (unique & _U64(VECTOR_DIM - 1))
    counted = np.bincount(slot.view(np.int64), weights=weight, minlength=n * VECTOR_DIM)
    out += counted.reshape(n, VECTOR_DIM)
    return _unit_rows(out)


@lru_cache(maxsize=256)
def _sketch_chunk(chunk: int) -> npt.NDArray[np.uint8]:
    """One byte per (step, feature) of steps ``chunk*256 ..``: bits of SHAKE-256, fixed forever.
    The low 7 bits are the bucket, the high bit the sign (set: negative)."""
    seed = f"trajledger/features/v3/numeric/{chunk}".encode()
    raw = hashlib.shake_256(seed).digest(_CHUNK_STEPS * _STEP_FEATURES)
    return np.frombuffer(raw, np.uint8).reshape(_CHUNK_STEPS, _STEP_FEATURES)


@lru_cache(maxsize=8)
def _sketch_tables(first: int, chunks: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
    """Buckets and signs of steps ``first*256 .. (first+chunks)*256``, one row per step."""
    raw = np.concatenate([_sketch_chunk(c) for c in range(first, first + chunks)])
    return (raw & 127).astype(np.intp), 1.0 - 2.0 * (raw >> 7).astype(np.float64)


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


# --------------------------------------------------------------------------------------------
# Fingerprint bytes, per column


def _bytes_view(a: npt.NDArray[Any]) -> memoryview:
    """The bytes of an array, without a copy when it is contiguous (as ``tobytes`` would give)."""
    try:
        return np.ascontiguousarray(a).data.cast("B")
    except (TypeError, ValueError):  # a dtype the buffer protocol cannot show (datetime64)
        return memoryview(a.tobytes())


class _ColumnBytes:
    """A content column of a run of steps laid out so that any episode's bytes (as
    ``ledger.rollouts.dedup``) are a few memoryview slices, without re-encoding per episode."""

    def __init__(self, name: str, arr: pa.Array) -> None:
        self.prefix = name.encode() + b"\x00"
        t = arr.type
        self.kind = "other"
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            self.kind = "list"
            counts = pc.list_value_length(arr)
            lengths = np.asarray(
                (counts.fill_null(-1) if arr.null_count else counts).to_numpy(zero_copy_only=False),
                dtype=np.int64,
            )
            values = np.asarray(pc.list_flatten(arr).to_numpy(zero_copy_only=False))
            self.cum = np.concatenate(([0], np.cumsum(np.maximum(lengths, 0))))
            self.a, self.a_size = _bytes_view(lengths), 8
            self.b, self.b_size = _bytes_view(values), values.itemsize
        elif (pa.types.is_string(t) or pa.types.is_large_string(t)) and arr.null_count == len(arr):
            self.kind = "nulls"  # "\x01" per step, joined by "\x00": one shared buffer
            self.a = memoryview(b"\x01\x00" * len(arr))
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            self.kind = "string"
            joined = pc.binary_join_element_wise(arr.fill_null("\x01"), pa.scalar("", t), "\x00")
            offsets, data = string_parts(joined)
            self.offsets = offsets - offsets[0]
            self.a = _bytes_view(data[int(offsets[0]) : int(offsets[-1])])
        else:
            nulls = (
                np.asarray(arr.is_null().to_numpy(zero_copy_only=False))
                if arr.null_count
                else np.zeros(len(arr), dtype=bool)  # the same bytes, without converting
            )
            values = np.asarray(
                (arr.fill_null(0) if arr.null_count else arr).to_numpy(zero_copy_only=False)
            )
            self.a, self.a_size = _bytes_view(nulls), nulls.itemsize
            self.b, self.b_size = _bytes_view(values), values.itemsize

    def parts(
        self, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
    ) -> list[Iterator[Any]]:
        """Each episode's bytes of this column (rows ``starts[i] .. ends[i]``, not empty), as
        parallel iterators, each giving one part per episode: the column's prefix, then views of
        the layout. The offsets are computed for all episodes in one go; the views are cut one
        episode at a time (kept all at once, they would be hundreds of thousands of objects for
        the garbage collector to walk) by ``map`` over slices, so no Python code runs per
        episode (a generator per column cost more than hashing the bytes, for short episodes)."""
        p = repeat(self.prefix, len(starts))
        if self.kind == "nulls":
            return [p, _cut(self.a, np.zeros_like(starts), 2 * (ends - starts) - 1)]
        if self.kind == "string":
            return [p, _cut(self.a, self.offsets[starts], self.offsets[ends] - 1)]
        if self.kind == "list":
            a_lo, a_hi = starts * 8, ends * 8
            b_lo, b_hi = self.cum[starts] * self.b_size, self.cum[ends] * self.b_size
        else:
            a_lo, a_hi = starts * self.a_size, ends * self.a_size
            b_lo, b_hi = starts * self.b_size, ends * self.b_size
        return [p, _cut(self.a, a_lo, a_hi), _cut(self.b, b_lo, b_hi)]


def _cut(
    view: memoryview, lo: npt.NDArray[np.int64], hi: npt.NDArray[np.int64]
) -> Iterator[memoryview]:
    """``view[lo[i]:hi[i]]`` for each i, lazily."""
    return map(view.__getitem__, map(slice, lo.tolist(), hi.tolist()))


# --------------------------------------------------------------------------------------------
# Episodes of a run of steps


@dataclass(frozen=True)
class FeatureChunk:
    """Features of consecutive complete episodes, in file order.

    Attributes:
        episode_ids: the episodes.
        num_steps: their step counts.
        fingerprints: exact content fingerprints (hex SHA-256).
        modality: ``text`` or ``numeric`` per episode.
        vectors: ``(n, 128)`` float32 feature vectors (zero rows where not valid).
        valid: whether each vector exists (a numeric episode of zeros, or a text episode
            without a word, has none).
        safety: summed safety interventions; None where no step records them.
    """

    episode_ids: list[str]
    num_steps: npt.NDArray[np.int64]
    fingerprints: list[str]
    modality: list[str]
    vectors: npt.NDArray[np.float32]
    valid: npt.NDArray[np.bool_]
    safety: list[int | None]

    def __len__(self) -> int:
        return len(self.episode_ids)

    def slice(self, a: int, b: int) -> FeatureChunk:
        """Episodes ``a .. b``."""
        return FeatureChunk(
            self.episode_ids[a:b], self.num_steps[a:b], self.fingerprints[a:b],
            self.modality[a:b], self.vectors[a:b], self.valid[a:b], self.safety[a:b],
        )  # fmt: skip

    @staticmethod
    def concat(chunks: Sequence[FeatureChunk]) -> FeatureChunk:
        """One chunk of several, in order."""
        return FeatureChunk(
            [i for c in chunks for i in c.episode_ids],
            np.concatenate([c.num_steps for c in chunks]) if chunks else np.zeros(0, np.int64),
            [f for c in chunks for f in c.fingerprints],
            [m for c in chunks for m in c.modality],
            (
                np.concatenate([c.vectors for c in chunks])
                if chunks
                else np.zeros((0, VECTOR_DIM), np.float32)
            ),
            np.concatenate([c.valid for c in chunks]) if chunks else np.zeros(0, bool),
            [s for c in chunks for s in c.safety],
        )


def _run_starts(ids: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.int64]:
    """Start rows of each run of equal ids (one comparison of neighbours for the whole batch)."""
    if ids.null_count:
        raise FeatureOrderError("steps: an episode_id is null")
    n = len(ids)
    changes = _bools(pc.not_equal(ids.slice(1), ids.slice(0, n - 1)))
    return np.concatenate(([0], np.flatnonzero(changes) + 1)).astype(np.int64)


def _runs(
    t: pa.Table, previous: str | None, starts: npt.NDArray[np.int64] | None = None
) -> tuple[npt.NDArray[np.int64], list[str]]:
    """Start rows of each episode run of ``t`` (``starts`` when the caller found them) and the
    run ids; checks contiguity and order."""
    ids_arr = _column(t, "episode_id")
    if starts is None:
        starts = _run_starts(ids_arr)
    n = len(ids_arr)
    run_ids = [str(v) for v in ids_arr.take(pa.array(starts)).to_pylist()]
    if len(set(run_ids)) != len(run_ids) or (previous is not None and run_ids[0] == previous):
        raise FeatureOrderError("steps: an episode's steps are not contiguous")
    if "step" in t.column_names:
        step = np.asarray(_column(t, "step").fill_null(-1).to_numpy())
        boundary = np.zeros(n, dtype=bool)
        boundary[starts] = True
        if np.any(~boundary[1:] & (step[1:] <= step[:-1])):
            raise FeatureOrderError("steps: an episode's steps are not in ascending order")
    return starts, run_ids


def _column(t: pa.Table, name: str) -> pa.Array:
    """A column of ``t`` as one array: its only chunk as it is (no copy), or the chunks joined."""
    column = t.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


_LONG_EPISODE = 256
"""Mean steps per episode from which a fingerprint hashes each part in turn instead of joining
them first (the join copies every byte once more)."""


def _sha256_hex(parts: tuple[Any, ...]) -> str:
    """The hex SHA-256 of the parts one after the other (as of their join, without it)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.hexdigest()


def _features(
    t: pa.Table, previous: str | None, starts: npt.NDArray[np.int64] | None = None
) -> FeatureChunk:
    """Features of the complete episodes that make up ``t`` (starting at rows ``starts``, when
    the caller found them)."""
    n = t.num_rows
    names = set(t.column_names)
    starts, run_ids = _runs(t, previous, starts)
    ends = np.append(starts[1:], n)
    lengths = ends - starts

    combined: dict[str, pa.Array] = {}

    def col(name: str) -> pa.Array | None:
        if name not in names:
            return None
        if name not in combined:  # each column joined into one array once
            combined[name] = _column(t, name)
        return combined[name]

    # Fingerprints: one SHA-256 per episode over slices of per-column byte layouts.
    layouts = [
        _ColumnBytes(name, leaf)
        for c in CONTENT_COLUMNS
        if c in names
        for name, leaf in leaf_arrays(c, col(c))
    ]
    counts = map(str.encode, map(str, lengths.tolist()))
    parts = [part for layout in layouts for part in layout.parts(starts, ends)]
    per_episode = zip(counts, *parts, strict=True)
    if n >= _LONG_EPISODE * len(starts):  # long episodes: their parts hashed as they are
        fingerprints = list(map(_sha256_hex, per_episode))
    else:  # short ones: one join and one call each beat a call per part
        fingerprints = [h.hexdigest() for h in map(hashlib.sha256, map(b"".join, per_episode))]
    # Safety interventions: sum of the known values per episode.
    safety_col = col("safety_interventions")
    if safety_col is None or safety_col.null_count == n:
        safety: list[int | None] = [None] * len(starts)
    else:
        known = np.asarray(safety_col.is_valid().to_numpy(zero_copy_only=False), dtype=np.int64)
        vals = np.asarray(safety_col.fill_null(0).to_numpy(), dtype=np.int64)
        sums = np.add.reduceat(vals, starts)
        seen = np.add.reduceat(known, starts)
        safety = [int(s) if k else None for s, k in zip(sums, seen, strict=True)]
    # Modality: text when any step of the episode has non-empty text.
    text_cols = [c for c in TEXT_COLUMNS if c in names]
    has_text = np.zeros(n, dtype=bool)
    for c in text_cols:
        if t.column(c).null_count == n:
            continue
        lens = pc.binary_length(col(c)).fill_null(0)
        has_text |= np.asarray(lens.to_numpy(zero_copy_only=False)) > 0
    text_ep = (
        np.add.reduceat(has_text.astype(np.int64), starts) > 0
        if text_cols
        else np.zeros(len(starts), dtype=bool)
    )
    vectors = np.zeros((len(starts), VECTOR_DIM), dtype=np.float32)
    valid = np.zeros(len(starts), dtype=bool)
    numeric = np.flatnonzero(~text_ep)
    if len(numeric):
        numeric_features(
            (col("obs"), col("action"), col("reward")), starts[numeric], lengths[numeric],
            out=(vectors, valid, numeric),
        )  # fmt: skip
    if text_ep.any():
        # The task side: rows whose role is neither system nor assistant; an episode with no
        # such text row uses every non-system row.
        row_ep = np.repeat(np.arange(len(starts)), lengths)
        role_col = col("role")
        if role_col is None:
            excluded, system = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        else:  # a null role is neither (as the empty string)
            if not (pa.types.is_string(role_col.type) or pa.types.is_large_string(role_col.type)):
                role_col = role_col.cast(pa.string())  # a dictionary-encoded column
            roles = role_col.fill_null("")
            excluded = _bools(pc.is_in(roles, value_set=pa.array(PROMPT_EXCLUDED, roles.type)))
            system = _bools(pc.equal(roles, pa.scalar("system", roles.type)))
        task_row = has_text & ~excluded
        task_ep = np.add.reduceat(task_row.astype(np.int64), starts) > 0
        chosen = np.where(task_ep[row_ep], task_row, has_text & ~system)
        chosen &= text_ep[row_ep]
        idx = np.flatnonzero(chosen)
        if len(idx):
            take = pa.array(idx)
            parts_ = [col(c).take(take) for c in text_cols]  # type: ignore[union-attr]
            texts = pc.binary_join_element_wise(
                *parts_, pa.scalar("\n", pa.string()), null_handling="replace", null_replacement=""
            )
            owners = row_ep[idx]
            # Tokenising and hashing need ~40 bytes of scratch per byte of text: work through
            # slices of about TEXT_SLICE bytes, cut between episodes, so memory stays bounded.
            sizes = np.asarray(pc.binary_length(texts).to_numpy(zero_copy_only=False))
            cum = np.cumsum(sizes)
            lo = 0
            while lo < len(idx):
                hi = int(np.searchsorted(cum, (cum[lo - 1] if lo else 0) + TEXT_SLICE)) + 1
                hi = min(max(hi, lo + 1), len(idx))
                while hi < len(idx) and owners[hi] == owners[hi - 1]:
                    hi += 1  # never split an episode
                first, last = int(owners[lo]), int(owners[hi - 1]) + 1
                tv, tvalid = text_vectors(
                    texts.slice(lo, hi - lo), owners[lo:hi] - first, last - first
                )
                keep_ = text_ep[first:last]
                vectors[first:last][keep_] = tv[keep_]
                valid[first:last][keep_] = tvalid[keep_]
                lo = hi
    return FeatureChunk(
        run_ids,
        lengths.astype(np.int64),
        fingerprints,
        ["text" if x else "numeric" for x in text_ep.tolist()],
        vectors,
        valid,
        safety,
    )


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
    obs, action, reward = columns
    vectors, valid, at = out
    ends = starts + lengths
    scratch = np.empty((min(int(ends[-1] - starts[0]), NUMERIC_SLICE), _STEP_FEATURES))
    k = 0
    while k < len(starts):
        lo = int(starts[k])
        j = max(k + 1, int(np.searchsorted(ends, lo + NUMERIC_SLICE, side="right")))
        m = int(ends[j - 1]) - lo
        x = scratch[:m] if m <= len(scratch) else np.empty((m, _STEP_FEATURES))
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
        vectors[at[k:j]], valid[at[k:j]] = numeric_vectors(
            x, starts[k:j] - lo, lengths[k:j], overwrite=True
        )
        k = j


def _bools(arr: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.bool_]:
    """A boolean array without nulls as numpy (its bits unpacked: a tenth of ``to_numpy``)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count or not pa.types.is_boolean(arr.type) or arr.buffers()[1] is None:
        return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)
    bits = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
    unpacked = np.unpackbits(bits, count=arr.offset + len(arr), bitorder="little")
    return unpacked[arr.offset :].view(bool)


def _first_other(ids: pa.ChunkedArray, value: pa.Scalar) -> int | None:
    """The first row whose id is not ``value`` (None when every row's is)."""
    differs = pc.not_equal(ids, value).fill_null(True)
    found = pc.index(differs, True).as_py()
    return None if found < 0 else int(found)


class FeatureStream:
    """Features of a stream of step batches, episode by episode, in stream order.

    `add` takes the next record batch and returns the features of the episodes it completes;
    the last episode of each batch may go on in the next one, so its rows are carried over
    (memory: one batch plus the longest episode). `finish` gives the last episode's.
    """

    def __init__(self) -> None:
        """Start before the first step."""
        self._carry: pa.Table | None = None
        self._previous: str | None = None

    def add(self, batch: pa.RecordBatch | pa.Table) -> FeatureChunk | None:
        """Features of the episodes ``batch`` completes (None when it completes none).

        Raises:
            FeatureOrderError: an episode's steps are not contiguous or not ascending.
        """
        if isinstance(batch, pa.Table) and any(c.num_chunks > 1 for c in batch.columns):
            # A table of several record batches (a row group gathered from chunks) is taken a
            # batch at a time: joining its chunks would copy every column, carrying over
            # copies only the episode that spans two batches. (The features of an episode
            # never depend on how its steps were cut.)
            done = [c for b in batch.to_batches() if (c := self._add(b)) is not None]
            return FeatureChunk.concat(done) if done else None
        return self._add(batch)

    def _add(self, batch: pa.RecordBatch | pa.Table) -> FeatureChunk | None:
        t = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if t.num_rows == 0:
            return None
        done: list[FeatureChunk] = []
        if self._carry is not None:
            # The carried episode ends where t's ids first differ from it: only its rows are
            # joined (joining the whole batch would copy every column).
            b = _first_other(t.column("episode_id"), self._carry.column("episode_id")[0])
            if b is None:
                self._carry = pa.concat_tables([self._carry, t], promote_options="permissive")
                return None
            head = pa.concat_tables([self._carry, t.slice(0, b)], promote_options="permissive")
            self._carry = None
            done.append(self._complete(head))
            t = t.slice(b)
        # The episodes of t, found once: all but the last run are complete.
        starts = _run_starts(_column(t, "episode_id"))
        cut = int(starts[-1])
        self._carry = t.slice(cut)
        if cut:
            done.append(self._complete(t.slice(0, cut), starts[:-1]))
        return FeatureChunk.concat(done) if done else None

    def _complete(self, t: pa.Table, starts: npt.NDArray[np.int64] | None = None) -> FeatureChunk:
        chunk = _features(t, self._previous, starts)
        self._previous = chunk.episode_ids[-1]
        return chunk

    def finish(self) -> FeatureChunk | None:
        """Features of the last episode (None when there were no steps)."""
        carry, self._carry = self._carry, None
        if carry is None or not carry.num_rows:
            return None
        return _features(carry, self._previous)


def iter_step_features(batches: Iterable[pa.RecordBatch | pa.Table]) -> Iterator[FeatureChunk]:
    """Features of every episode of a stream of step record batches, in stream order
    (`FeatureStream` over the stream).

    Raises:
        FeatureOrderError: an episode's steps are not contiguous or not ascending.
    """
    stream = FeatureStream()
    for batch in batches:
        chunk = stream.add(batch)
        if chunk is not None:
            yield chunk
    last = stream.finish()
    if last is not None:
        yield last


def whole_episodes(steps: pa.RecordBatch) -> FeatureChunk:
    """`iter_step_features` of a batch of whole episodes in one pass (the last episode is not
    held back for a next batch). Raises FeatureOrderError as `iter_step_features` does."""
    return _features(pa.Table.from_batches([steps]), None)


def parquet_batches(pf: pq.ParquetFile, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """The record batches of the columns of ``pf`` that exist (row group by row group)."""
    present = set(pf.schema_arrow.names)
    cols = [c for c in columns if c in present]
    for g in range(pf.metadata.num_row_groups):
        yield from pf.read_row_group(g, columns=cols).to_batches()
