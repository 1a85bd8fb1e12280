"""The normalised text fingerprint of a chat episode: its conversation once trivial changes are
undone, so that a copy of a held-out episode with other whitespace, case, compatibility
characters (full-width letters, ligatures), invisible format characters or another system
prompt is still an exact duplicate.

Scope: `normalised_fingerprints` (episode id -> fingerprint, for each text episode of a run of
step record batches, streamed); `Pairs` (such pairs held as bytes while a batch is recorded).
The fingerprint is SHA-256 over the episode's rows in step order that hold text and whose
role is not ``system``: each row's role and its text (``content``, ``tool_calls``,
``tool_results`` joined by newlines) after Unicode NFKC, lower-casing, NFKC again, removal of
format characters (``\\p{Cf}``: zero-width spaces and joiners, soft hyphens) and collapsing
every run of white space (``\\s``, ``\\p{Z}``) into one space, trimmed.
The admission gate computes it from the bytes it verified; ``dataset create`` keeps it in the
derived cache (``window_cache``, bound to the step file's digest and
``window_cache.WINDOWS_VERSION``: a change here takes a new number); the kept episode features
(``ledger.batch_features``, ``episode_features.FEATURE_VERSION``) and their "exact"
fingerprint are unchanged.
Non-scope: comparing (``ledger.contamination.Matcher``); look-alike letters of other scripts
(Cyrillic ``а`` for Latin ``a``), which NFKC leaves as they are.
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .episode_features import parquet_batches
from .rollouts.parquet_read import Source

__all__ = ["NORMALISED_COLUMNS", "Pairs", "normalised_fingerprints", "normalised_of",
           "normalised_texts", "row_texts"]

NORMALISED_COLUMNS = ("episode_id", "role", "content", "tool_calls", "tool_results")
"""The step columns the normalised fingerprint reads."""
_TEXT = ("content", "tool_calls", "tool_results")


def normalised_texts(texts: pa.Array) -> pa.Array:
    """Each text NFKC-normalised, lower-cased, without format characters, white space
    collapsed and trimmed (nulls stay null). ASCII texts, which NFKC leaves as they are and
    which hold no format character, are only lower-cased before the white space: the Unicode
    steps run on the others alone (a regular expression over every text cost twice the
    episode features). The ASCII texts are lower-cased by `pc.ascii_lower`, which gives
    them what ``utf8_lower`` gives in an eighth of its time; the others' lower-casing is
    replaced by theirs below (tested against ``utf8_lower`` for every text:
    tests/unit/ledger/test_text_fingerprint_rows.py)."""
    t = pc.ascii_lower(texts)
    other = pc.invert(pc.fill_null(pc.string_is_ascii(texts), True))
    if pc.any(other).as_py():
        u = pc.utf8_normalize(texts.filter(other), form="NFKC")
        u = pc.utf8_normalize(pc.utf8_lower(u), form="NFKC")
        u = pc.replace_substring_regex(u, pattern=r"\p{Cf}+", replacement="")
        # Runs of Unicode white space (as NFKC leaves them: U+3000 is one) become one space.
        t = pc.replace_with_mask(t, other, pc.binary_join(pc.utf8_split_whitespace(u), " "))
    # Runs of ASCII white space become one space (a quarter of the cost of splitting every
    # text at Unicode white space), then the ends are trimmed.
    t = pc.replace_substring_regex(t, pattern=r"[ \t\n\v\f\r]{2,}|[\t\n\v\f\r]", replacement=" ")
    return pc.utf8_trim_whitespace(t)


def row_texts(batch: pa.RecordBatch) -> tuple[pa.Array, pa.Array]:
    """Each step's role (``""`` for none) and its text (``content``, ``tool_calls``,
    ``tool_results`` joined by newlines) normalised (`normalised_texts`; null: none), as the
    fingerprint reads them."""
    names = set(batch.schema.names)
    cols = [batch.column(c).cast(pa.string()) for c in _TEXT if c in names]
    if len(cols) > 1:
        # "skip" drops a row whose columns are all null (pyarrow 26: fewer rows than the
        # batch, and a numeric step among text ones made the batch unreadable): such a
        # row holds no text, as "" says.
        none = pc.is_null(cols[0])
        for c in cols[1:]:
            none = pc.and_(none, pc.is_null(c))
        cols[0] = pc.if_else(none, pa.scalar("", pa.string()), cols[0])
    if not cols:
        texts = pa.nulls(batch.num_rows, pa.string())
    else:
        texts = pc.binary_join_element_wise(*cols, pa.scalar("\n", pa.string()),
                                            null_handling="skip") if len(cols) > 1 else cols[0]
    texts = normalised_texts(texts)
    roles = (batch.column("role").cast(pa.string()).fill_null("") if "role" in names
             else pa.array([""] * batch.num_rows, pa.string()))
    return roles, texts


def normalised_fingerprints(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, str]]:
    """``(episode id, fingerprint)`` of each episode of the steps with text outside system
    rows, in file order (episodes are contiguous, as schema validation guarantees); an
    episode may run across record batches."""
    current: str | None = None
    h = hashlib.sha256()
    rows = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        roles, texts = row_texts(batch)
        # Each kept row (text, not a system row) as ``<bytes>:<role>\x1f<text>``, joined by
        # Arrow; an episode's rows then hashed in one call from the joined buffer (chat42: a
        # row at a time through Python strings was two thirds of this function's time).
        keep = pc.and_(pc.and_(pc.is_valid(texts), pc.greater(pc.binary_length(texts), 0)),
                       pc.not_equal(roles, "system")).fill_null(False)
        row = pc.binary_join_element_wise(roles.filter(keep), texts.filter(keep), "\x1f")
        row = pc.binary_join_element_wise(pc.binary_length(row).cast(pa.string()), row, ":")
        at = np.frombuffer(row.buffers()[1], dtype=np.int32, count=len(row) + 1,
                           offset=4 * row.offset) if len(row) else np.zeros(1, np.int32)
        data = memoryview(row.buffers()[2] or b"")
        eids = batch.column("episode_id")
        firsts = np.flatnonzero(np.concatenate(([True], np.asarray(pc.not_equal(
            eids[1:], eids[:-1]).fill_null(True).to_numpy(zero_copy_only=False), dtype=bool))))
        kept = np.searchsorted(np.flatnonzero(keep.to_numpy(zero_copy_only=False)),
                               np.append(firsts, batch.num_rows)).tolist()
        for eid, a, b in zip(eids.take(firsts).to_pylist(), kept[:-1], kept[1:], strict=True):
            if eid != current:
                if current is not None and rows:
                    yield current, h.hexdigest()
                current, h, rows = eid, hashlib.sha256(), 0
            if b > a:
                h.update(data[at[a] : at[b]])
                rows += b - a
    if current is not None and rows:
        yield current, h.hexdigest()



def normalised_of(steps: Source) -> dict[str, str]:
    """Episode id -> normalised fingerprint of the text episodes of a step file (a path or
    its bytes): what a sealed batch publishes (``sealed.episodes[].normalised``)."""
    return dict(normalised_fingerprints(parquet_batches(steps, NORMALISED_COLUMNS)))


class Pairs:
    """``(episode id, normalised fingerprint)`` pairs, in order, held as the derived cache
    keeps them (``window_cache``): the ids' UTF-8 and their lengths, the fingerprints' 32
    bytes; about 50 bytes a pair, where a list of tuples of Python strings took about 230
    (chat42: 220 MiB of a 2 GiB chat file's 982,200 episodes, held while it was recorded)."""

    def __init__(self) -> None:
        self._ids, self._fingerprints = bytearray(), bytearray()
        self._lengths = array("q")

    def add(self, ids: Sequence[str], fingerprints: Sequence[str]) -> None:
        """Pairs ``ids[i]``, ``fingerprints[i]`` (hex), each episode without one (``""``) left
        out."""
        for e, fp in zip(ids, fingerprints, strict=True):
            if fp:
                raw = e.encode("utf-8", "surrogatepass")
                self._ids += raw
                self._lengths.append(len(raw))
                self._fingerprints += bytes.fromhex(fp)

    def __len__(self) -> int:
        return len(self._lengths)

    def columns(self) -> tuple[memoryview, bytearray, bytearray]:
        """The ids' offsets (``len + 1`` little-endian int64, from 0), their UTF-8 joined, the
        fingerprints' bytes joined (not copied: `window_cache.encode` copies them once, into
        the file)."""
        at = np.zeros(len(self._lengths) + 1, dtype="<i8")
        np.cumsum(np.frombuffer(self._lengths, dtype=np.int64), out=at[1:])
        return at.data.cast("B"), self._ids, self._fingerprints
