"""The whole tiled log checked over a fetcher, like Tessera's fsck: every entry, tile and root.

Scope: given ``fetch(rel_path) -> bytes`` (paths as c2sp.org/tlog-tiles builds them) and a tree
(size and root, normally from a verified checkpoint), `check_log` rebuilds the tree from the
entries and checks everything on the way, like Tessera's ``fsck/fsck.go``: every entry bundle
parses with the width the size requires; each entry's leaf hash equals the level-0 tile's hash;
each tile of level L >= 1 equals the tile roots rebuilt from level L - 1; the rebuilt root is the
given one; every trajledger entry parses strictly (`LogEntry.from_bytes`) and its ``prev`` is the
leaf hash of the entry before. It reports every problem with the file it is in (a bundle or a
tile, relative to the log root) and the entry index, not only the first.

A *subset* of entries (what an evidence bundle holds) is `verify.logcheck.check_entries`'s.

Non-scope: I/O (the caller's ``fetch`` does it: a directory, a bundle, HTTP), trust in the size
and root (verify the checkpoint first: ``verify.checkpoint``), what entries claim about
envelopes and blobs (the caller's per-entry callback), and writer state (``.state/``, leftovers,
older partial tiles: ``ledger.log.check`` adds those for a ledger's log directory).

Spec: c2sp.org/tlog-tiles; RFC 6962 section 2.1; schemas/log-entry.v1.md (entries, chain).

API (for ``log verify`` and ``ledger.log.check``)::

    result = check_log(fetch, size, root,
                       on_entry=lambda i, entry: [...problem messages...],  # optional
                       on_progress=lambda done, total: ...,                 # optional
                       on_tile=lambda level, index, items: ...)              # optional
    result.ok, result.findings           # Finding(file, index, message): culprits, then by index
    result.root                          # the root of the tree checked (None if it cannot be)

``fetch`` raises FileNotFoundError for a path that does not exist (any other OSError is reported
as unreadable). A partial tile or bundle that is missing is read as the prefix of the full one
when that exists (tlog-tiles lets a log delete partials once the full tile is there).
``on_entry(index, entry)`` is called once per entry that parses, in log order, and returns the
problems it found (strings, reported against that entry's bundle); ``on_tile(level, index,
items)`` receives every tile of the tree the signed root confirms (level -1: the bundle's
entries; level >= 0: the hashes), so a caller can check other copies of it: the tiles as rebuilt
from the entries, except where a bundle was changed and its level-0 tile gives the signed root
(then that tile, and `LEAF_HASHES`: the leaf hashes the bundle's entries must have).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import FormatError
from .ledger_dir import read_regular
from .log_entry import GENESIS_PREV, LogEntry
from .logcheck import EntryCallback, Finding
from .merkle import EMPTY_ROOT, HASH_SIZE, leaf_hash, node_hash, root_from_leaf_hashes
from .tiles import (
    TILE_HEIGHT,
    TILE_WIDTH,
    entries_path,
    parse_entry_bundle,
    parse_tile,
    tile_path,
)

__all__ = ["LEAF_HASHES", "Fetch", "LogCheck", "check_log", "directory_fetch"]

Fetch = Callable[[str], bytes]
"""Returns the bytes at a path relative to the log root; FileNotFoundError when absent."""

LEAF_HASHES = -2
"""``on_tile``'s level for the leaf hashes an entry bundle must give, passed instead of its
entries (level -1) where the signed root confirms the level-0 tile, not the bundle."""
_MAX_PER_FILE = 5
_ZERO = bytes(HASH_SIZE)


@dataclass
class LogCheck:
    """The result of `check_log`.

    Attributes:
        size: the tree size checked.
        root: the root rebuilt from the entries, or ``root`` when the level-0 tiles give it and
            the entries do not (None when entries and tiles are missing).
        findings: every problem found, sorted by entry index (file-level ones first).
        entries_checked: entries parsed (``entry_format``) or hashed.
        culprits: how many of the first findings name the file whose bytes disagree with the
            signed tree (where a bundle and its tile disagree); the rest may follow from them.
    """

    size: int
    root: bytes | None = None
    findings: list[Finding] = field(default_factory=list)
    entries_checked: int = 0
    culprits: int = 0

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.findings


def directory_fetch(root: Path) -> Fetch:
    """A `Fetch` reading a log directory; refuses paths that would leave it.

    Args:
        root: the log directory.

    Returns:
        ``fetch(rel) -> bytes``.
    """

    def fetch(rel: str) -> bytes:
        parts = rel.split("/")
        if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise FileNotFoundError(2, "not a relative log path", rel)
        return read_regular(root / os.path.join(*parts))

    return fetch


class _Run:
    """The state of one `check_log` run."""

    def __init__(self, fetch: Fetch, size: int, entry_format: bool) -> None:
        self.fetch = fetch
        self.size = size
        self.entry_format = entry_format
        self.result = LogCheck(size)
        self.prev: str | None = GENESIS_PREV  # None: unknown (the bundle before is unreadable)
        self.mismatches: list[tuple[str, str, int, list[tuple[int, bytes, bytes]]]] = []

    def problem(self, file: str, message: str, index: int | None = None) -> None:
        self.result.findings.append(Finding(file, index, message))

    def read(self, rel: str, full: str | None) -> tuple[str, bytes] | None:
        """Read ``rel``; a missing partial falls back to its full version ``full``."""
        try:
            return rel, self.fetch(rel)
        except FileNotFoundError:
            if full is not None:
                try:
                    return full, self.fetch(full)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    self.problem(full, f"cannot read: {e.strerror or e}")
                    return None
            self.problem(rel, "missing")
        except OSError as e:
            self.problem(rel, f"cannot read: {e.strerror or e}")
        return None

    # (1) (2) (3) a bundle and its level-0 tile
    def bundle(
        self, b: int, width: int, on_entry: EntryCallback | None
    ) -> tuple[list[bytes] | None, list[bytes] | None, list[bytes] | None]:
        w = None if width == TILE_WIDTH else width
        erel, trel = entries_path(b, w), tile_path(0, b, w)
        first = b * TILE_WIDTH
        entries: list[bytes] | None = None
        got = self.read(erel, entries_path(b) if w is not None else None)
        if got is not None:
            name, data = got
            try:
                stored = parse_entry_bundle(data, width=TILE_WIDTH if name != erel else width)
                entries = stored[:width]
            except FormatError as e:
                self.problem(name, str(e))
        tile: list[bytes] | None = None
        got = self.read(trel, tile_path(0, b) if w is not None else None)
        if got is not None:
            name, data = got
            try:
                tile = parse_tile(data, TILE_WIDTH if name != trel else width)[:width]
            except FormatError as e:
                self.problem(name, str(e))
        leaves = [leaf_hash(e) for e in entries] if entries is not None else None
        if leaves is not None and tile is not None and leaves != tile:
            bad = [i for i in range(width) if leaves[i] != tile[i]]
            self.mismatches.append((erel, trel, first, [(i, leaves[i], tile[i]) for i in bad]))
        if self.entry_format:
            if entries is not None:
                self.entries(erel, first, entries, on_entry)
            else:
                # The bundle is unreadable: continue the chain from the tile's last leaf hash,
                # if any, rather than blame the next bundle for this one.
                self.prev = tile[-1].hex() if tile is not None else None
        self.result.entries_checked += len(entries) if entries is not None else 0
        return entries, leaves, tile

    # (4) entries: format and chain
    def entries(
        self, rel: str, first: int, entries: Sequence[bytes], on_entry: EntryCallback | None
    ) -> None:
        for i, raw in enumerate(entries, first):
            try:
                entry = LogEntry.from_bytes(raw, f"log entry {i}")
            except FormatError as e:
                self.problem(rel, str(e), i)
                self.prev = leaf_hash(raw).hex()
                continue
            if self.prev is not None and entry.prev != self.prev:
                self.problem(
                    rel,
                    f"entry {i}: prev is {entry.prev}, want {self.prev} (the leaf hash of the "
                    "entry before): the hash chain is broken",
                    i,
                )
            self.prev = entry.leaf_hash.hex()
            if on_entry is not None:
                for message in on_entry(i, entry):
                    self.problem(rel, message, i)

    def compare(self, rel: str, data: bytes, want: bytes) -> None:
        """A hash tile against the hashes rebuilt from below."""
        if data == want:
            return
        if len(data) != len(want):
            self.problem(
                rel, f"has {len(data)} bytes, want {len(want)} ({len(want) // HASH_SIZE} hashes)"
            )
            return
        bad = [
            i
            for i in range(0, len(want), HASH_SIZE)
            if data[i : i + HASH_SIZE] != want[i : i + HASH_SIZE]
        ]
        for off in bad[:_MAX_PER_FILE]:
            self.problem(
                rel,
                f"hash {off // HASH_SIZE} is {data[off : off + HASH_SIZE].hex()}, want "
                f"{want[off : off + HASH_SIZE].hex()} (rebuilt from the entries)",
            )
        if len(bad) > _MAX_PER_FILE:
            self.problem(rel, f"and {len(bad) - _MAX_PER_FILE} more wrong hashes")

    # (5) levels >= 1
    def upper_levels(
        self, level1: list[bytes], on_tile: Callable[[int, int, Sequence[bytes]], None] | None
    ) -> list[list[bytes]]:
        levels: list[list[bytes]] = [[], level1]
        level = 1
        while self.size >> (TILE_HEIGHT * level):
            hashes = levels[level]
            count = self.size >> (TILE_HEIGHT * level)
            full, width = divmod(count, TILE_WIDTH)
            for t in range(full + (1 if width else 0)):
                w = TILE_WIDTH if t < full else width
                pw = None if w == TILE_WIDTH else w
                rel = tile_path(level, t, pw)
                chunk = hashes[t * TILE_WIDTH : t * TILE_WIDTH + w]
                got = self.read(rel, tile_path(level, t) if pw is not None else None)
                if got is not None:
                    name, data = got
                    self.compare(name, data[: w * HASH_SIZE] if name != rel else data,
                                 b"".join(chunk))  # fmt: skip
                if on_tile is not None:
                    on_tile(level, t, chunk)
            levels.append(
                [
                    root_from_leaf_hashes(hashes[t * TILE_WIDTH : (t + 1) * TILE_WIDTH])
                    for t in range(full)
                ]
            )
            level += 1
        return levels

    def follows(self, i: int, held: bytes, rel: str) -> None:
        """Entry ``i`` was changed in ``rel`` and the signed tree holds ``held`` for it: the
        next entry's broken ``prev`` (which is ``held``) follows from that change."""
        broken = f"entry {i + 1}: prev is {held.hex()},"
        for n, f in enumerate(self.result.findings):
            if f.index == i + 1 and f.message.startswith(broken):
                self.result.findings[n] = Finding(f.file, f.index, f"{f.message} (follows from "
                                                  f"entry {i}, changed in {rel}: this prev is "
                                                  f"the signed tree's leaf hash of entry {i})")

    # (6) which file is wrong where a bundle and its tile disagree
    def blame(self, trusted: bytes, by_entries: bool, by_tiles: bool) -> None:
        for erel, trel, first, bad in self.mismatches:
            for i, leaf, held in bad[:_MAX_PER_FILE]:
                if by_entries:
                    self.problem(
                        trel,
                        f"hash {i} is {held.hex()}, want {leaf.hex()} (the leaf hash of entry "
                        f"{first + i} in {erel})",
                        first + i,
                    )
                elif by_tiles:
                    self.problem(
                        erel,
                        f"entry {first + i} hashes to {leaf.hex()}, but {trel} and the trusted "
                        f"root have {held.hex()}",
                        first + i,
                    )
                    self.follows(first + i, held, erel)
                else:
                    self.problem(
                        erel,
                        f"entry {first + i} hashes to {leaf.hex()}, but {trel} has {held.hex()}",
                        first + i,
                    )
            if len(bad) > _MAX_PER_FILE:
                culprit = trel if by_entries else erel
                self.problem(culprit, f"and {len(bad) - _MAX_PER_FILE} more hashes differ")


def _fold(compact: Sequence[bytes]) -> bytes:
    root = compact[-1]
    for h in reversed(compact[:-1]):
        root = node_hash(h, root)
    return root


def _root_from_levels(
    size: int, levels: Sequence[Sequence[bytes]], last_leaves: Sequence[bytes]
) -> bytes:
    """MTH of the tree from the per-level hashes and the leaves of the last level-0 tile."""
    if size == 0:
        return EMPTY_ROOT
    compact: list[bytes] = []
    start = 0
    for height in range(size.bit_length() - 1, -1, -1):
        if not size >> height & 1:
            continue
        level = height // TILE_HEIGHT
        if level == 0:
            offset = start - (size >> TILE_HEIGHT << TILE_HEIGHT)
            node = root_from_leaf_hashes(last_leaves[offset : offset + (1 << height)])
        else:
            first = start >> (TILE_HEIGHT * level)
            node = root_from_leaf_hashes(
                levels[level][first : first + (1 << (height - TILE_HEIGHT * level))]
            )
        compact.append(node)
        start += 1 << height
    return _fold(compact)


def _levels_above(size: int, level1: list[bytes]) -> list[list[bytes]]:
    """Per-level hashes (levels >= 1) from level-1 hashes alone, reading no tile."""
    levels: list[list[bytes]] = [[], level1]
    level = 1
    while size >> (TILE_HEIGHT * level):
        hashes = levels[level]
        full = (size >> (TILE_HEIGHT * level)) // TILE_WIDTH
        levels.append(
            [
                root_from_leaf_hashes(hashes[t * TILE_WIDTH : (t + 1) * TILE_WIDTH])
                for t in range(full)
            ]
        )
        level += 1
    return levels


def check_log(
    fetch: Fetch,
    size: int,
    root: bytes | None,
    *,
    entry_format: bool = True,
    on_entry: EntryCallback | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_tile: Callable[[int, int, Sequence[bytes]], None] | None = None,
) -> LogCheck:
    """Check a whole tiled log of ``size`` entries against ``root``.

    Steps:
        1. Check the preconditions: ``size`` >= 0, ``root`` 32 bytes (or None: report the
           rebuilt root without judging it).
        2. For every entry bundle: read it (a missing partial falls back to the full one) and
           parse it with the width the size requires.
        3. Read the level-0 tile beside it; each entry's leaf hash must equal the tile's hash.
        4. With ``entry_format`` (trajledger logs): parse each entry strictly, follow ``prev``
           from `GENESIS_PREV`, and run ``on_entry``.
        5. Each tile of level L >= 1 must equal the roots of the tiles rebuilt below it.
        6. The root rebuilt from the entries must equal ``root``; where a bundle and its tile
           disagree, blame the tile when the entries give ``root``, the bundle when the tiles
           do (then the upper tiles are compared with those rebuilt from the level-0 tiles,
           the root reported is ``root``, and the next entry's broken ``prev`` is said to
           follow from the change), else both. The findings naming the changed file come
           first.
        7. Pass every tile of the tree ``root`` confirms to ``on_tile``.

    Args:
        fetch: reads a file of the log (`Fetch`).
        size: the tree size to check (a verified checkpoint's).
        root: the root the tree must have (the same checkpoint's); None to only rebuild it.
        entry_format: False for logs whose entries are not trajledger entries (Tessera's).
        on_entry: per-entry check (`EntryCallback`), e.g. envelopes and blobs.
        on_progress: called with (entries done, ``size``) after each bundle.
        on_tile: receives each tile of the tree ``root`` confirms (see the module docstring).

    Returns:
        The `LogCheck`; ``.ok`` is False when anything is wrong.

    Raises:
        ValueError: a precondition does not hold (a caller bug).
    """
    # (1)
    if size < 0:
        raise ValueError(f"tree size {size}, want >= 0")
    if root is not None and len(root) != HASH_SIZE:
        raise ValueError(f"root of {len(root)} bytes, want {HASH_SIZE}")
    run = _Run(fetch, size, entry_format)
    # (2) (3) (4)
    level1: list[bytes] = []  # roots of full level-0 tiles, from the entries where readable
    level1_tiles: list[bytes] = []  # the same from the level-0 tiles where readable
    last: tuple[list[bytes], list[bytes]] = ([], [])
    broken = False
    # Bundles that disagree with their tile, (b, entries, leaves, tile): which copy the signed
    # tree confirms is known at the end, and the other versions are compared with that one.
    held: list[tuple[int, list[bytes], list[bytes], list[bytes]]] = []
    full0, width0 = divmod(size, TILE_WIDTH)
    for b in range(full0 + (1 if width0 else 0)):
        width = TILE_WIDTH if b < full0 else width0
        entries, leaves, tile = run.bundle(b, width, on_entry)
        if leaves is None and tile is None:
            broken = True
        by_entries = leaves or tile or [_ZERO] * width
        by_tiles = tile or leaves or [_ZERO] * width
        if entries is not None and leaves is not None and tile is not None and leaves != tile:
            held.append((b, entries, leaves, tile))
        elif on_tile is not None:
            if entries is not None:
                on_tile(-1, b, entries)
            on_tile(0, b, by_entries)
        if width == TILE_WIDTH:
            level1.append(root_from_leaf_hashes(by_entries))
            level1_tiles.append(root_from_leaf_hashes(by_tiles))
        else:
            last = (by_entries, by_tiles)
        if on_progress is not None:
            on_progress(b * TILE_WIDTH + width, size)
    # (5)
    upper: list[tuple[int, int, Sequence[bytes]]] = []  # upper tiles, while ``held`` waits

    def later(level: int, index: int, items: Sequence[bytes]) -> None:
        upper.append((level, index, items))

    mark = len(run.result.findings)
    levels = run.upper_levels(level1, later if held else on_tile)
    end = len(run.result.findings)
    # (6)
    result = run.result
    tiles_trusted = False
    culprits: set[int] = set()
    if broken:
        run.problem(
            entries_path(0) if size else "tile", "the tree cannot be rebuilt: entries and "
            "tiles are missing"
        )
    else:
        rebuilt = _root_from_levels(size, levels, last[0])
        by_tiles_root = rebuilt
        if run.mismatches:
            by_tiles_root = _root_from_levels(size, _levels_above(size, level1_tiles), last[1])
        result.root = rebuilt
        if root is not None:
            tiles_trusted = rebuilt != root == by_tiles_root
            if tiles_trusted:  # an edited bundle: the upper tiles are compared with the tiles'
                result.root = root
                del result.findings[mark:end]
                upper.clear()
                run.upper_levels(level1_tiles, later)
            blamed = len(result.findings)
            run.blame(root, rebuilt == root, by_tiles_root == root)
            culprits = {id(f) for f in result.findings[blamed:]}
            if root not in (rebuilt, by_tiles_root):
                run.problem(
                    "checkpoint",
                    f"root at size {size} is {root.hex()}, but the entries give "
                    f"{rebuilt.hex()}",
                )
        else:
            run.blame(rebuilt, False, False)
    # (7)
    if on_tile is not None:
        for b, entries, leaves, tile in held:
            if tiles_trusted:
                on_tile(LEAF_HASHES, b, tile)
            else:
                on_tile(-1, b, entries)
            on_tile(0, b, tile if tiles_trusted else leaves)
        for tile_args in upper:
            on_tile(*tile_args)
    # The file whose bytes disagree with the signed tree first, then by entry index.
    result.findings.sort(key=lambda f: (id(f) not in culprits, -1 if f.index is None else f.index))
    result.culprits = sum(id(f) in culprits for f in result.findings)
    return result
