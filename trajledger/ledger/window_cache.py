"""The step windows and normalised text fingerprints of a batch's step file, kept in the
derived cache so that ``dataset create`` reads them (8 bytes a window) instead of its step
files at every call.

Scope: `Compared` (what ``ledger.contamination`` compares of a batch besides its features:
every step window of its numeric episodes, `step_windows.iter_marked`, and the normalised text
fingerprints of its text episodes, `text_fingerprint.normalised_fingerprints`); `compute`
(from a step file whose bytes the caller checked); the cache file and its place
(``<ledger>/index/features/w<WINDOWS_VERSION>/<hex of the step file's digest>.windows``):
`encode`, `decode`, `read_kept`, `keep`.

The file: `MAGIC`, a 4-byte little-endian length, a JSON header (``steps``: the step file's
digest, ``version``: `WINDOWS_VERSION`, ``parts``, the counts of each array and ``sha256``:
the body's digest), then the body: the episodes' lengths (int64), every window's hash
(uint64), one bit a window (too few distinct steps), the episode ids (UTF-8 and their int64
offsets), the text episodes' ids and their 32-byte fingerprints, then (part ``orders``, kept
once the batch was read as held out) per other order of `step_windows.ORDERS` its windows'
hashes and bits, then (part ``columns``) every window's `step_windows.COLUMNS` hash and bit
(no such hash or too few distinct steps), then (part ``clocks``, its count ``clocks`` in the
header) the windows with a clock column hashed without it (`step_windows.clock_columns`):
their indexes (int64, ascending), hashes and bits, then their `COLUMNS` hashes and bits,
then (part ``still``, its count ``still``) the windows of episodes with a standing column
hashed without it and their clocks (`standing_columns`), or of a frame stack over its newest
frames (`frame_stacks`), the train side's: their
indexes (int64, ascending), hashes and `COLUMNS` hashes.
Which episode and start each window has follows from the lengths (every start from 0 to
length - `step_windows.WINDOW`, the lengths in each order from `step_windows.order_lengths`).

Trust: the same as the kept features' derived cache (``batch_features``): whoever writes the
ledger's directory can write this file, so what ``dataset create`` reports from it is as
good as that directory (the admission gate never reads it: it computes windows and
fingerprints from the bytes it verified). An entry is used only when it names the step file
(and is the file of its name), is of this version and its body hashes to the digest its
header gives; anything else (truncated, damaged, another file's, another version's) is
computed again from the step file, with a warning, and rewritten.

Non-scope: the definitions (``step_windows``, ``text_fingerprint``), comparing
(``contamination_matcher.Matcher``), erasure (``batch_features.forget_cached`` deletes these too).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from trajledger.verify.digest import parse_digest
from trajledger.verify.errors import FormatError
from trajledger.verify.ledger_dir import read_regular

from .episode_features import FeatureChunk, parquet_batches
from .fs import drop_other_versions, write_file_atomic
from .step_windows import (
    COLUMNS,
    ORDERS,
    WINDOW,
    WINDOW_COLUMNS,
    StepWindows,
    columns_kept,
    columns_spans,
    iter_marked,
    kept,
    order_lengths,
)
from .text_fingerprint import NORMALISED_COLUMNS, Pairs, normalised_fingerprints

__all__ = ["MAGIC", "WINDOWS_VERSION", "Compared", "cache_file", "compared_parts", "compute",
           "decode", "encode", "keep", "read_kept"]

WINDOWS_VERSION = 13
"""The definitions of `step_windows` and `text_fingerprint` the kept files hold: a change of
either (a step's or a window's hash, `MIN_DISTINCT`, the normalisation) takes a new number,
and the files of other numbers are not read. 2: the held side's other orders (win25); 3: every
second step reversed and every fourth step (copy26); 4: the windows of the set of their
columns (`step_windows.COLUMNS`, copy28); 5: those of few values over `step_windows.LONG`
steps, and of Dict and Tuple spaces per member (copy30); 6: a `COLUMNS` hash's low bit says
whether it is of `step_windows.LONG` steps (or a whole episode of `step_windows.MIN_WHOLE`
to `LONG` - 1 steps, which has one now: copy31); 7: the windows with a clock column hashed
without it too (`step_windows.clock_columns`, part ``clocks``), and the marks of those windows
decided without it (clock33); 8: the marks of a held episode's windows in the other orders
decided without their clocks too, a clock's step no longer compared with its size, and the
windows of an episode's every set of clock columns (rev31); image observations'
`step_windows.COLUMNS` windows, each the least over the flips of its frames (`image_windows`,
img34); a null step no longer turns a batch's `COLUMNS` windows off (img34); 9: an image's
frames each in its least form of eight (flips, turns, transposes), its channels hashed apart and
each value scaled to the frame's finite range (rev32); the train side's windows without clocks
also without their episode's standing columns (`standing_columns`, copy35); 10: those of a
frame stack's episodes over each step's newest frame (`frame_stacks`, win36); 11: the held
side's too, kept with its windows without clocks (part ``clocks``), and a Dict or Tuple space's
member a stack by itself (`frame_stacks.member_stacks`, win37); 12: a record batch whose
observations are all null is null steps of its episodes, as within a batch, not left out
(`step_windows.iter_marked`, rev38 finding 7): a file's windows no longer depend on where its
row groups are cut (an older file is not read: computed again); 13: a frame stack's windows
decided per episode, its steps compared across record batches (`frame_stacks.FrameStacks`,
frames43: a batch holding a null step had none, for every episode in it)."""
MAGIC = b"trajledger-compared\n"
_HEADER_BYTES = 1 << 12
_PARTS = ("windows", "normalised", "orders", "columns", "clocks", "still")
Clocks = tuple[npt.NDArray[np.int64], npt.NDArray[np.uint64], npt.NDArray[np.bool_],
               npt.NDArray[np.uint64], npt.NDArray[np.bool_]]
"""`Compared.clocks`."""
Still = tuple[npt.NDArray[np.int64], npt.NDArray[np.uint64], npt.NDArray[np.uint64]]
"""`Compared.still`."""
Read = Callable[[Path, Sequence[str]], Iterator[pa.RecordBatch]]
"""How `compute` reads a step file's columns (`record_windows`: its row groups as written)."""
Wanted = tuple[bool, bool, bool]
"""The parts of a batch compared: normalised text fingerprints, windows, windows in other
orders (of a held batch)."""


@dataclass(frozen=True)
class Compared:
    """What is compared of a batch besides its features.

    Attributes:
        windows: every window of its numeric episodes (one `StepWindows`), or None when not
            computed (the batch has no numeric episode of `WINDOW` steps).
        few: per window, whether it has too few distinct steps to be compared as held out.
        normalised: ``(episode id, fingerprint)`` of its text episodes, or None when not
            computed.
        orders: per other order of `step_windows.ORDERS` (1, 2, ...), every window's hash
            and whether it has too few distinct steps; None when not computed.
        columns: every window's `step_windows.COLUMNS` hash and whether it is not compared
            as held out (`step_windows.columns_windows`); None with ``windows``.
        clocks: the windows with a clock column (`step_windows.clock_columns`), hashed
            without it: their indexes into ``windows`` (ascending), their hashes and marks,
            their `step_windows.COLUMNS` hashes and marks; None with ``windows``.
        still: the windows of episodes with a standing column (`standing_columns`)
            hashed without it and their clocks: their indexes into ``windows`` (ascending),
            their hashes and `step_windows.COLUMNS` hashes (0: none); compared as train
            windows only (copy35); None with ``windows``, or computed as a held batch's
            (with ``orders``: read as train windows, it is computed again).
    """

    windows: StepWindows | None
    few: npt.NDArray[np.bool_]
    normalised: list[tuple[str, str]] | None
    orders: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.bool_]]] | None = None
    columns: tuple[npt.NDArray[np.uint64], npt.NDArray[np.bool_]] | None = None
    clocks: Clocks | None = None
    still: Still | None = None

    def has(self, wanted: Wanted) -> bool:
        """Whether it holds the parts ``wanted``."""
        return ((not wanted[0] or self.normalised is not None)
                and (not wanted[1] or (self.windows is not None and self.columns is not None
                                       and self.clocks is not None
                                       and (wanted[2] or self.still is not None)))
                and (not wanted[2] or self.windows is None or self.orders is not None))

    def step_windows(self, held: bool) -> list[StepWindows]:
        """The windows to compare: all of them, or (``held``) those of enough distinct steps,
        in every order kept; then the `step_windows.COLUMNS` ones (``held``: those of
        `step_windows.LONG` steps apart, `step_windows.columns_spans`); then those without
        their clocks, in order 0 and `step_windows.COLUMNS`."""
        if self.windows is None:
            return []
        w = self.windows
        columns = [] if self.columns is None else [
            StepWindows(w.episode_ids, w.lengths, w.episode, w.start, self.columns[0], COLUMNS)]
        bare: list[tuple[StepWindows, npt.NDArray[np.bool_]]] = []
        if self.clocks is not None and len(self.clocks[0]):
            pos, h0, f0, hc, fc = self.clocks
            some = StepWindows(w.episode_ids, w.lengths, w.episode[pos], w.start[pos], h0,
                               clocks=True)
            bare = [(some, f0), (replace(some, hashes=hc, order=COLUMNS), fc)]
        if not held:
            still = [] if self.still is None or not len(self.still[0]) else [StepWindows(
                w.episode_ids, w.lengths, w.episode[self.still[0]], w.start[self.still[0]],
                hs, order, still=True) for hs, order in ((self.still[1], 0),
                                                          (self.still[2], COLUMNS))]
            return [w, *map(columns_kept, columns + [b for b, _ in bare] + still)]
        out = [kept(w, ~self.few)]
        for order, (hashes, few) in enumerate(self.orders or [], start=1):
            lengths = order_lengths(w.lengths, order)
            episode, start = _placed(lengths)
            out.append(kept(StepWindows(w.episode_ids, lengths, episode, start, hashes, order),
                            ~few))
        return out + [s for c in columns if self.columns is not None
                      for s in columns_spans(kept(c, ~self.columns[1]))] + [
            s for b, few in bare for s in columns_spans(kept(b, ~few))]


def compared_parts(chunk: FeatureChunk) -> tuple[bool, bool]:
    """Whether a batch with these episodes is compared by normalised text fingerprints (it
    has text episodes) and by step windows (it has numeric episodes of `WINDOW` steps): the
    first two parts of its `Wanted`."""
    long = chunk.num_steps >= WINDOW
    return "text" in chunk.modality, any(
        m == "numeric" and bool(x) for m, x in zip(chunk.modality, long, strict=True))


def compute(path: Path, wanted: Wanted, read: Read = parquet_batches) -> Compared:
    """The parts ``wanted`` of the step file at ``path`` (its columns' record batches as
    ``read`` gives them: as `episode_features.parquet_batches` reads them)."""
    normalised = (list(normalised_fingerprints(read(path, NORMALISED_COLUMNS)))
                  if wanted[0] else None)  # fmt: skip
    if not wanted[1]:
        return Compared(None, np.zeros(0, dtype=bool), normalised)
    ids: list[str] = []
    lengths, episode, start = [], [], []
    hashes: list[list[npt.NDArray[np.uint64]]] = [[] for _ in range(COLUMNS + 1)]
    few: list[list[npt.NDArray[np.bool_]]] = [[] for _ in range(COLUMNS + 1)]
    bare: list[list[npt.NDArray[np.generic]]] = [[] for _ in range(6)]  # episode, start, ...
    still: list[list[npt.NDArray[np.generic]]] = [[] for _ in range(4)]  # idem, h0, hc
    for w, marks in iter_marked(read(path, WINDOW_COLUMNS), orders=wanted[2]):
        if w.still:  # idem (copy35)
            if not w.order:
                still[0].append(w.episode + (len(ids) - len(w.episode_ids)))
                still[1].append(w.start)
            still[2 + bool(w.order)].append(w.hashes)
            continue
        if w.clocks:  # after its batch's order 0: its episodes are counted
            if not w.order:
                bare[0].append(w.episode + (len(ids) - len(w.episode_ids)))
                bare[1].append(w.start)
            bare[2 + 2 * bool(w.order)].append(w.hashes)
            bare[3 + 2 * bool(w.order)].append(marks)
            continue
        hashes[w.order].append(w.hashes)
        few[w.order].append(marks)
        if w.order:
            continue
        episode.append(w.episode + len(ids))
        ids += w.episode_ids
        lengths.append(w.lengths)
        start.append(w.start)

    def cat(parts: list[npt.NDArray[np.int64]]) -> npt.NDArray[np.int64]:
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

    def h(o: int) -> npt.NDArray[np.uint64]:
        return np.concatenate(hashes[o]) if hashes[o] else np.zeros(0, np.uint64)

    def f(o: int) -> npt.NDArray[np.bool_]:
        return np.concatenate(few[o]) if few[o] else np.zeros(0, bool)

    windows = StepWindows(ids, cat(lengths), cat(episode), cat(start), h(0))
    orders = [(h(o), f(o)) for o in range(1, len(ORDERS))] if wanted[2] else None
    counts = np.maximum(windows.lengths - (WINDOW - 1), 0)
    pos = (np.cumsum(counts) - counts)[cat(bare[0])] + cat(bare[1])  # type: ignore[arg-type]
    parts = [np.concatenate(b) if b else np.zeros(0, np.uint64 if i % 2 == 0 else bool)
             for i, b in enumerate(bare[2:])]
    clocks = (pos.astype(np.int64), parts[0].astype(np.uint64), parts[1].astype(bool),
              parts[2].astype(np.uint64), parts[3].astype(bool))
    at = (np.cumsum(counts) - counts)[cat(still[0])] + cat(still[1])  # type: ignore[arg-type]
    stills = (at.astype(np.int64), *(np.concatenate(x).astype(np.uint64) if x else
                                     np.zeros(0, np.uint64) for x in still[2:]))
    return Compared(windows, f(0), normalised, orders, (h(COLUMNS), f(COLUMNS)), clocks,
                    None if wanted[2] else stills)


def _placed(lengths: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64],
                                                     npt.NDArray[np.int64]]:
    """The episode and start of every window of episodes of ``lengths`` steps, in order."""
    counts = np.maximum(lengths - (WINDOW - 1), 0)
    episode = np.repeat(np.arange(len(lengths), dtype=np.int64), counts)
    firsts = np.cumsum(counts) - counts
    return episode, np.arange(len(episode), dtype=np.int64) - firsts[episode]


def _strings(values: list[str]) -> tuple[bytes, bytes]:
    data = [v.encode("utf-8", "surrogatepass") for v in values]
    offsets = np.concatenate(([0], np.cumsum([len(d) for d in data], dtype=np.int64)))
    return offsets.astype("<i8").tobytes(), b"".join(data)


def encode(c: Compared | Pairs, steps: str) -> bytes | None:
    """The cache file of ``c``, computed from step file ``steps`` (`text_fingerprint.Pairs`:
    a batch's normalised text fingerprints alone, as its record held them); None when its
    windows are not every window of its episodes in order (then nothing is kept)."""
    pairs = c if isinstance(c, Pairs) else None
    if isinstance(c, Pairs):
        c = Compared(None, np.zeros(0, dtype=bool), [])
    parts = [p for p, on in zip(_PARTS, (c.windows is not None, c.normalised is not None,
                                         c.orders is not None, c.columns is not None,
                                         c.clocks is not None, c.still is not None),
                                strict=True) if on]
    w = c.windows or StepWindows([], np.zeros(0, np.int64), np.zeros(0, np.int64),
                                 np.zeros(0, np.int64), np.zeros(0, np.uint64))
    episode, start = _placed(w.lengths)
    orders = c.orders or []
    columns = [] if c.columns is None else [c.columns]
    clocks = c.clocks or (np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, bool),
                          np.zeros(0, np.uint64), np.zeros(0, bool))
    still = c.still or (np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.uint64))
    if not (np.array_equal(episode, w.episode) and np.array_equal(start, w.start)
            and len(c.few) == len(w.hashes) and _ascending(clocks[0], len(w.hashes))
            and all(len(a) == len(clocks[0]) for a in clocks)
            and _ascending(still[0], len(w.hashes)) and all(len(a) == len(still[0])
                                                            for a in still)
            and all(len(hs) == len(fs) == len(w.hashes) for hs, fs in columns)) or (orders and not (
                len(orders) == len(ORDERS) - 1 and all(
                    len(hs) == len(fs) == _windows(order_lengths(w.lengths, o))
                    for o, (hs, fs) in enumerate(orders, start=1)))):
        return None
    norm = c.normalised or []
    ids_at, ids = _strings(w.episode_ids)
    norm_at, norm_ids, fps = pairs.columns() if pairs is not None else (
        *_strings([e for e, _ in norm]), b"".join(bytes.fromhex(fp) for _, fp in norm))
    body = (
        w.lengths.astype("<i8").tobytes(), w.hashes.astype("<u8").tobytes(),
        np.packbits(c.few, bitorder="little").tobytes(), ids_at, ids, norm_at, norm_ids, fps,
        *(p for hs, fs in orders for p in (hs.astype("<u8").tobytes(),
                                           np.packbits(fs, bitorder="little").tobytes())),
        *(p for hs, fs in columns for p in (hs.astype("<u8").tobytes(),
                                            np.packbits(fs, bitorder="little").tobytes())),
        *((clocks[0].astype("<i8").tobytes(),
           *(p for hs, fs in (clocks[1:3], clocks[3:5]) for p in (
               hs.astype("<u8").tobytes(), np.packbits(fs, bitorder="little").tobytes())))
          if c.clocks is not None else ()),
        *((still[0].astype("<i8").tobytes(), still[1].astype("<u8").tobytes(),
           still[2].astype("<u8").tobytes()) if c.still is not None else ()))
    digest = hashlib.sha256()
    for piece in body:  # (not joined twice: a chat batch's pairs are most of it)
        digest.update(piece)
    header = {"steps": steps, "version": WINDOWS_VERSION, "parts": parts,
              "episodes": len(w.episode_ids), "windows": len(w.hashes), "ids": len(ids),
              "normalised": len(fps) // 32, "normalised_ids": len(norm_ids),
              "clocks": len(clocks[0]), "still": len(still[0]),
              "sha256": digest.hexdigest()}  # fmt: skip
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return b"".join((MAGIC, struct.pack("<I", len(head)), head, *body))


def _count(header: dict[str, object], key: str, most: int) -> int:
    v = header.get(key)
    if type(v) is not int or not 0 <= v <= most:
        raise FormatError(f"{key} {v!r}: want a count of at most {most}")
    return v


def decode(data: bytes, steps: str) -> Compared:
    """Read a cache file, checking that it is of this version, was computed from step file
    ``steps`` and is whole.

    Raises:
        FormatError: anything else (not such a file, truncated, damaged, another step file's
            or another version's).
    """
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
        raise FormatError("not a cache file of step windows")
    (size,) = struct.unpack_from("<I", data, len(MAGIC))
    at = len(MAGIC) + 4
    if size > _HEADER_BYTES or at + size > len(data):
        raise FormatError(f"a header of {size} bytes")
    try:
        header = json.loads(data[at : at + size])
    except (ValueError, RecursionError) as e:  # nested past the limit (rev29)
        raise FormatError(f"its header is not JSON ({e})") from e
    if not isinstance(header, dict):
        raise FormatError("its header is not a JSON object")
    if header.get("version") != WINDOWS_VERSION:
        raise FormatError(f"version {header.get('version')!r}, want {WINDOWS_VERSION}")
    if header.get("steps") != steps:
        raise FormatError(f"computed from step file {str(header.get('steps'))[:19]}…, want "
                          f"{steps[:19]}…")
    parts = header.get("parts")
    if not isinstance(parts, list) or not set(parts) <= set(_PARTS):
        raise FormatError(f"parts {parts!r}")
    body = memoryview(data)[at + size :]
    n = len(body)
    eps, w, k = (_count(header, key, n) for key in ("episodes", "windows", "normalised"))
    sizes: tuple[int, ...] = (8 * eps, 8 * w, (w + 7) // 8, 8 * (eps + 1),
                              _count(header, "ids", n), 8 * (k + 1),
                              _count(header, "normalised_ids", n), 32 * k)
    lengths = np.frombuffer(body[: 8 * eps] if 8 * eps <= n else b"", dtype="<i8").astype(
        np.int64)
    if len(lengths) != eps or (lengths < 1).any() or _windows(lengths) != w:
        raise FormatError("its episodes' lengths do not give its number of windows")
    counts = ([_windows(order_lengths(lengths, o)) for o in range(1, len(ORDERS))]
              if "orders" in parts else [])  # fmt: skip
    sizes += tuple(s for c in counts for s in (8 * c, (c + 7) // 8))
    if "columns" in parts:
        sizes += (8 * w, (w + 7) // 8)
    clocked = _count(header, "clocks", w) if "clocks" in parts else 0
    if "clocks" in parts:
        sizes += (8 * clocked, 8 * clocked, (clocked + 7) // 8, 8 * clocked, (clocked + 7) // 8)
    stood = _count(header, "still", w) if "still" in parts else 0
    if "still" in parts:
        sizes += (8 * stood,) * 3
    if sum(sizes) != n:
        raise FormatError(f"a body of {n} bytes, want {sum(sizes)}")
    if hashlib.sha256(body).hexdigest() != header.get("sha256"):
        raise FormatError("its body does not hash to the digest its header gives")
    cuts = np.cumsum((0, *sizes))
    piece = [body[cuts[i] : cuts[i + 1]] for i in range(len(sizes))]
    hashes = np.frombuffer(piece[1], dtype="<u8").astype(np.uint64)
    few = np.unpackbits(np.frombuffer(piece[2], dtype=np.uint8), bitorder="little")[:w] == 1
    ids = _read_strings(piece[3], piece[4], eps)
    norm_ids = _read_strings(piece[5], piece[6], k)
    fps = bytes(piece[7])
    episode, start = _placed(lengths)
    windows = StepWindows(ids, lengths, episode, start, hashes) if "windows" in parts else None
    normalised = ([(i, fps[32 * j : 32 * j + 32].hex()) for j, i in enumerate(norm_ids)]
                  if "normalised" in parts else None)  # fmt: skip
    orders = [(np.frombuffer(piece[8 + 2 * j], dtype="<u8").astype(np.uint64),
               np.unpackbits(np.frombuffer(piece[9 + 2 * j], dtype=np.uint8),
                             bitorder="little")[:c] == 1) for j, c in enumerate(counts)]
    columns = None
    if "columns" in parts:
        c = piece[8 + 2 * len(counts)], piece[9 + 2 * len(counts)]
        columns = (np.frombuffer(c[0], dtype="<u8").astype(np.uint64),
                   np.unpackbits(np.frombuffer(c[1], dtype=np.uint8), bitorder="little")[:w] == 1)
    clocks = None
    if "clocks" in parts:
        k = 8 + 2 * len(counts) + 2 * ("columns" in parts)
        pos = np.frombuffer(piece[k], dtype="<i8").astype(np.int64)
        if not _ascending(pos, w):
            raise FormatError("its windows with a clock are not in order")
        clocks = (pos, *(x for j in (1, 3) for x in (
            np.frombuffer(piece[k + j], dtype="<u8").astype(np.uint64),
            np.unpackbits(np.frombuffer(piece[k + j + 1], dtype=np.uint8),
                          bitorder="little")[:clocked] == 1)))
    still = None
    if "still" in parts:
        k = 8 + 2 * len(counts) + 2 * ("columns" in parts) + 5 * ("clocks" in parts)
        where = np.frombuffer(piece[k], dtype="<i8").astype(np.int64)
        still = (where, *(np.frombuffer(piece[k + j], dtype="<u8").astype(np.uint64)
                          for j in (1, 2)))
        if not _ascending(where, w):
            raise FormatError("its windows with a standing column are not in order")
    return Compared(windows, few, normalised, orders if "orders" in parts else None, columns,
                    clocks, still)  # type: ignore[arg-type]


def _ascending(pos: npt.NDArray[np.int64], windows: int) -> bool:
    """Whether ``pos`` are indexes of ``windows`` windows, each once, ascending."""
    return bool((np.diff(pos) > 0).all() and (not len(pos) or (pos[0] >= 0 and pos[-1] < windows)))


def _windows(lengths: npt.NDArray[np.int64]) -> int:
    """The number of windows of episodes of ``lengths`` steps."""
    return int(np.maximum(lengths - (WINDOW - 1), 0).sum())


def _read_strings(offsets: memoryview, data: memoryview, n: int) -> list[str]:
    at = np.frombuffer(offsets, dtype="<i8").astype(np.int64)
    if len(at) != n + 1 or at[0] != 0 or at[-1] != len(data) or (np.diff(at) < 0).any():
        raise FormatError("its string offsets are out of order")
    raw = bytes(data)
    try:
        return [raw[a:b].decode("utf-8", "surrogatepass") for a, b in
                zip(at[:-1].tolist(), at[1:].tolist(), strict=True)]
    except UnicodeDecodeError as e:
        raise FormatError(f"an episode id is not UTF-8 ({e})") from e


def cache_file(cache: Path, steps: str) -> Path:
    """Where the cache keeps what was computed from step file ``steps``."""
    return cache / f"w{WINDOWS_VERSION}" / f"{parse_digest(steps, 'step file digest')}.windows"


def read_kept(cache: Path, steps: str, wanted: Wanted) -> tuple[Compared | None, str]:
    """The kept parts of step file ``steps``, when they hold what is ``wanted``; else None
    and why (empty when nothing is kept: no warning)."""
    try:
        data = read_regular(cache_file(cache, steps))  # (a FIFO there: not read)
    except FileNotFoundError:
        return None, ""
    except OSError as e:
        return None, e.strerror or type(e).__name__
    try:
        got = decode(data, steps)
    except FormatError as e:
        return None, " ".join(str(e).split())
    return (got, "") if got.has(wanted) else (None, "")


def keep(cache: Path, steps: str, c: Compared | Pairs) -> None:
    """Keep what was computed from step file ``steps`` (derived data: a cache that cannot be
    written is no error)."""
    data = encode(c, steps)
    if data is None:
        return
    where = cache_file(cache, steps)
    with contextlib.suppress(OSError):  # read-only, full, a file in the way: computed next time
        if not where.parent.is_dir():  # this version's first: the others' are never read again
            drop_other_versions(where.parent)
        where.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(where, data, durable=False)

