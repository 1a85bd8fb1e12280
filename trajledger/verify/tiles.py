"""The c2sp.org/tlog-tiles layout: tile paths, tile and entry-bundle encodings, and a reader.

Scope: everything the log writer and the verifier must agree on to store and read a tiled log:
the ``tile/<L>/<N>[.p/<W>]`` and ``tile/entries/<N>[.p/<W>]`` paths, which tiles a tree of a
given size has and how wide they are, the hash-tile encoding (concatenated 32-byte hashes), the
entry-bundle encoding (each entry prefixed by its uint16 big-endian length), and `TileReader`,
which reads hashes, roots, proofs and entries through an injected ``fetch`` function, so it works
the same over a directory, an exported bundle or an in-memory dict.

Non-scope: I/O (the caller's ``fetch`` does it), writing tiles, checkpoints and signatures, and
trust: `TileReader` believes what the tiles say. Nothing it returns is authenticated until a root
or proof built from it has been checked against a verified checkpoint (``verify.merkle``,
``verify.checkpoint``).

Spec: c2sp.org/tlog-tiles (paths, widths, partial tiles); the entry-bundle format of
transparency-dev/tessera's POSIX log; RFC 6962 section 2.1 for every hash.

A level-L hash tile N holds the hashes of Merkle level 8*L nodes N*256 ... N*256+255; a
partial tile ``.p/W`` holds the first W of them.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable, Sequence

from .compact import CompactRange
from .errors import FormatError, ProofError
from .log_entry import MAX_ENTRY_SIZE
from .merkle import EMPTY_ROOT, HASH_SIZE
from .merkle import node_hash as _hash_children

__all__ = [
    "MAX_ENTRY_SIZE",
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "TileReader",
    "entries_path",
    "format_entry_bundle",
    "parse_entry_bundle",
    "parse_tile",
    "tile_path",
    "tile_width",
]

TILE_HEIGHT = 8
"""Merkle levels spanned by one tile level."""

TILE_WIDTH = 1 << TILE_HEIGHT
"""Hashes in a full tile (and entries in a full entry bundle): 256."""

_MAX_LEVEL = 63
_U16 = struct.Struct(">H")


def _format_index(n: int) -> str:
    # Groups of three digits, most significant first; all groups but the last start with "x".
    parts = [f"{n % 1000:03d}"]
    n //= 1000
    while n > 0:
        parts.append(f"x{n % 1000:03d}")
        n //= 1000
    return "/".join(reversed(parts))


def _suffix(width: int | None) -> str:
    if width is None or width == TILE_WIDTH:
        return ""
    if not 1 <= width < TILE_WIDTH:
        raise ValueError(f"tile width {width}, want 1..{TILE_WIDTH} or None for a full tile")
    return f".p/{width}"


def tile_path(level: int, index: int, width: int | None = None) -> str:
    """Return the path of a hash tile relative to the log root.

    Args:
        level: tile level, 0..63 (level L holds Merkle level 8*L hashes).
        index: index of the tile within its level.
        width: number of hashes in a partial tile (1..255); None or 256 for a full tile.

    Returns:
        For example ``tile/0/x001/x234/067`` or ``tile/1/000.p/17``.

    Raises:
        ValueError: an argument is out of range.
    """
    if not 0 <= level <= _MAX_LEVEL:
        raise ValueError(f"tile level {level}, want 0..{_MAX_LEVEL}")
    if index < 0:
        raise ValueError(f"tile index {index}, want >= 0")
    return f"tile/{level}/{_format_index(index)}{_suffix(width)}"


def entries_path(index: int, width: int | None = None) -> str:
    """Return the path of an entry bundle relative to the log root.

    Args:
        index: index of the bundle (entries ``index*256 ...``).
        width: number of entries in a partial bundle (1..255); None or 256 for a full one.

    Returns:
        For example ``tile/entries/000.p/15``.

    Raises:
        ValueError: an argument is out of range.
    """
    if index < 0:
        raise ValueError(f"entry bundle index {index}, want >= 0")
    return f"tile/entries/{_format_index(index)}{_suffix(width)}"


def tile_width(level: int, index: int, size: int) -> int:
    """Return how many hashes tile ``(level, index)`` holds in a tree of ``size`` leaves.

    Level 0 doubles as the entry-bundle width. Per tlog-tiles, the rightmost tile at level L has
    ``floor(size / 256**L) mod 256`` hashes.

    Args:
        level: tile level.
        index: tile index within the level.
        size: tree size.

    Returns:
        256 for a full tile, 1..255 for a partial tile, 0 when the tree has no such tile.
    """
    nodes = size >> (TILE_HEIGHT * level)
    return max(0, min(TILE_WIDTH, nodes - index * TILE_WIDTH))


def parse_tile(data: bytes, width: int) -> list[bytes]:
    """Split a hash tile into its hashes.

    Args:
        data: the tile's bytes.
        width: the number of hashes the tile must hold (1..256).

    Returns:
        ``width`` 32-byte hashes.

    Raises:
        FormatError: the tile is not exactly ``width`` hashes long.
        ValueError: ``width`` is out of range.
    """
    if not 1 <= width <= TILE_WIDTH:
        raise ValueError(f"tile width {width}, want 1..{TILE_WIDTH}")
    if len(data) != width * HASH_SIZE:
        raise FormatError(
            f"hash tile has {len(data)} bytes, want {width * HASH_SIZE} ({width} hashes)"
        )
    return [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]


def parse_entry_bundle(data: bytes, *, width: int | None = None) -> list[bytes]:
    """Split an entry bundle into its entries.

    Args:
        data: the bundle's bytes: entries, each prefixed by its uint16 big-endian length.
        width: when given, the exact number of entries the bundle must hold.

    Returns:
        The entries, in log order.

    Raises:
        FormatError: the bundle is empty, truncated (a length prefix or an entry runs past the
            end, which is also how trailing garbage shows), holds more than 256 entries, or not
            ``width`` entries.
    """
    if not data:
        raise FormatError("entry bundle is empty, want at least 1 entry")
    entries: list[bytes] = []
    pos = 0
    while pos < len(data):
        if len(entries) == TILE_WIDTH:
            raise FormatError(
                f"entry bundle has bytes after entry {TILE_WIDTH - 1} at offset {pos}, "
                f"want at most {TILE_WIDTH} entries"
            )
        if pos + 2 > len(data):
            raise FormatError(
                f"entry bundle is truncated: length prefix of entry {len(entries)} at offset {pos} "
                f"has {len(data) - pos} of 2 bytes"
            )
        (n,) = _U16.unpack_from(data, pos)
        pos += 2
        if pos + n > len(data):
            raise FormatError(
                f"entry bundle is truncated: entry {len(entries)} at offset {pos} has "
                f"{len(data) - pos} of {n} bytes"
            )
        entries.append(data[pos : pos + n])
        pos += n
    if width is not None and len(entries) != width:
        raise FormatError(f"entry bundle has {len(entries)} entries, want {width}")
    return entries


def format_entry_bundle(entries: Sequence[bytes]) -> bytes:
    """Encode entries as an entry bundle.

    Args:
        entries: 1..256 entries, each at most 65,535 bytes.

    Returns:
        The bundle bytes.

    Raises:
        FormatError: no entries, more than 256, or an entry too long for its uint16 prefix.
    """
    if not 1 <= len(entries) <= TILE_WIDTH:
        raise FormatError(f"entry bundle of {len(entries)} entries, want 1..{TILE_WIDTH}")
    out = bytearray()
    for i, e in enumerate(entries):
        if len(e) > MAX_ENTRY_SIZE:
            raise FormatError(f"entry {i} has {len(e)} bytes, want at most {MAX_ENTRY_SIZE}")
        out += _U16.pack(len(e))
        out += e
    return bytes(out)


class TileReader:
    """Reads hashes, roots, proofs and entries of one tree size from a tiled log.

    Tiles are fetched through ``fetch`` (a path relative to the log root, as built by
    `tile_path` / `entries_path`) and kept in an LRU cache, so a proof reads O(log n) tiles.
    Which tile exists, and whether it is partial, follows from ``size`` alone: the reader only
    asks for tiles that a checkpoint of that size requires. When a partial tile is gone (a log
    may delete it once the full tile exists), the full tile is read instead.

    The reader does not authenticate anything: compare `root` with a verified checkpoint, or
    verify the proofs it builds, before trusting what it returns. It is not thread-safe.

    Attributes:
        size: the tree size the reader serves.
    """

    def __init__(self, fetch: Callable[[str], bytes], size: int, *, cache_tiles: int = 64) -> None:
        """Create a reader.

        Args:
            fetch: returns the bytes at a path relative to the log root; raises
                FileNotFoundError when there is nothing there.
            size: the tree size to serve, usually that of a verified checkpoint.
            cache_tiles: how many tiles and bundles to keep in memory (at least 1).

        Raises:
            ValueError: ``size`` is negative or ``cache_tiles`` is below 1.
        """
        if size < 0:
            raise ValueError(f"tree size {size}, want >= 0")
        if cache_tiles < 1:
            raise ValueError(f"cache_tiles {cache_tiles}, want >= 1")
        self._fetch = fetch
        self.size = size
        self._cache_max = cache_tiles
        self._cache: OrderedDict[tuple[str, int, int], list[bytes]] = OrderedDict()

    # -- tile access -------------------------------------------------------------------------

    def _cached(self, key: tuple[str, int, int]) -> list[bytes] | None:
        got = self._cache.get(key)
        if got is not None:
            self._cache.move_to_end(key)
        return got

    def _remember(self, key: tuple[str, int, int], value: list[bytes]) -> None:
        self._cache[key] = value
        if len(self._cache) > self._cache_max:
            self._cache.popitem(last=False)

    def _read(self, kind: str, level: int, index: int) -> list[bytes]:
        """Read hash tile ``(level, index)`` (kind "tile") or entry bundle ``index`` ("entries")."""
        key = (kind, level, index)
        got = self._cached(key)
        if got is not None:
            return got
        width = tile_width(level, index, self.size)
        if width == 0:
            raise ProofError(f"tree of size {self.size} has no {kind} {level}/{index}")

        def path(w: int) -> str:
            return tile_path(level, index, w) if kind == "tile" else entries_path(index, w)

        def parse(data: bytes, w: int) -> list[bytes]:
            if kind == "tile":
                return parse_tile(data, w)
            return parse_entry_bundle(data, width=w)

        stored = width
        try:
            data = self._fetch(path(width))
        except FileNotFoundError:
            if width == TILE_WIDTH:
                raise
            # tlog-tiles lets a log drop a partial tile once the full one exists; a full tile
            # starts with the same hashes (or entries) as every partial version of it.
            stored = TILE_WIDTH
            data = self._fetch(path(stored))
        try:
            items = parse(data, stored)[:width]
        except FormatError as e:
            raise FormatError(f"{path(stored)}: {e}") from e
        self._remember(key, items)
        return items

    # -- hashes ------------------------------------------------------------------------------

    def _check_range(self, what: str, start: int, end: int) -> None:
        if not 0 <= start <= end <= self.size:
            raise ProofError(
                f"{what} [{start}, {end}) is outside the tree of size {self.size}, "
                f"want 0 <= start <= end <= {self.size}"
            )

    def leaf_hashes(self, start: int, end: int) -> list[bytes]:
        """Return the leaf hashes of entries ``start`` to ``end - 1``, from level-0 tiles.

        Args:
            start: first index.
            end: one past the last index; at most `size`.

        Returns:
            ``end - start`` hashes.

        Raises:
            ProofError: the range is not within the tree.
            FormatError: a tile is malformed.
            FileNotFoundError: a tile is missing.
        """
        self._check_range("leaf range", start, end)
        out: list[bytes] = []
        i = start
        while i < end:
            tile = self._read("tile", 0, i // TILE_WIDTH)
            take = min(end, (i // TILE_WIDTH + 1) * TILE_WIDTH) - i
            offset = i % TILE_WIDTH
            out.extend(tile[offset : offset + take])
            i += take
        return out

    def tile_hashes(self, level: int, index: int) -> list[bytes]:
        """Return the hashes of tile ``(level, index)`` in the tree of `size` leaves.

        Args:
            level: tile level (level L holds Merkle level 8*L hashes).
            index: tile index within the level.

        Returns:
            `tile_width` hashes (fewer than 256 for the rightmost tile of a level).

        Raises:
            ProofError: the tree has no such tile.
            FormatError: the tile is malformed.
            FileNotFoundError: the tile is missing.
        """
        return list(self._read("tile", level, index))

    def node_hash(self, level: int, index: int) -> bytes:
        """Return the hash of the complete subtree at Merkle ``level`` and position ``index``.

        The node covers leaves ``index * 2**level`` to ``(index + 1) * 2**level - 1``, all of
        which must be in the tree. It is read from tile level ``level // 8`` and, when ``level``
        is not a multiple of 8, hashed up from the ``2**(level % 8)`` hashes below it there.

        Args:
            level: Merkle level (0 for leaves).
            index: position of the node within its level.

        Returns:
            The 32-byte node hash.

        Raises:
            ProofError: the node is not a complete subtree of the tree.
            FormatError: a tile is malformed.
            FileNotFoundError: a tile is missing.
        """
        if level < 0 or index < 0 or (index + 1) << level > self.size:
            raise ProofError(
                f"node at level {level} index {index} is not a complete subtree of a tree of "
                f"size {self.size}"
            )
        tile_level, rest = divmod(level, TILE_HEIGHT)
        first = index << rest  # first hash of the node at Merkle level 8 * tile_level
        tile = self._read("tile", tile_level, first // TILE_WIDTH)
        offset = first % TILE_WIDTH
        hashes = tile[offset : offset + (1 << rest)]
        while len(hashes) > 1:
            hashes = [_hash_children(hashes[i], hashes[i + 1]) for i in range(0, len(hashes), 2)]
        return hashes[0]

    def subtree_root(self, start: int, end: int) -> bytes:
        """Return MTH(D[start:end]), the Merkle Tree Hash of entries ``start`` to ``end - 1``.

        Aligned ranges (``start`` a multiple of the smallest power of two >= ``end - start``, or
        ``start == 0``) cost O(log n) node reads; other ranges are correct but slower.

        Args:
            start: first index.
            end: one past the last index; at most `size`.

        Returns:
            The 32-byte hash; `EMPTY_ROOT` for an empty range.

        Raises:
            ProofError: the range is not within the tree.
            FormatError: a tile is malformed.
            FileNotFoundError: a tile is missing.
        """
        self._check_range("subtree", start, end)
        if start == end:
            return EMPTY_ROOT
        return self._mth(start, end)

    def _mth(self, start: int, end: int) -> bytes:
        n = end - start
        if n & (n - 1) == 0 and start % n == 0:
            return self.node_hash(n.bit_length() - 1, start // n)
        k = 1 << ((n - 1).bit_length() - 1)  # largest power of two smaller than n
        return _hash_children(self._mth(start, start + k), self._mth(start + k, end))

    def compact_range(self, size: int) -> CompactRange:
        """Return the compact range of the first ``size`` leaves: the roots of its maximal
        perfect subtrees, left to right (what an update bundle starts its extension from).

        Raises:
            ProofError: ``size`` is beyond the tree.
            FormatError, FileNotFoundError: a tile is malformed or missing.
        """
        self._check_range("compact range", 0, size)
        hashes, start = [], 0
        for level in range(size.bit_length() - 1, -1, -1):
            if size >> level & 1:
                hashes.append(self.node_hash(level, start >> level))
                start += 1 << level
        return CompactRange(size, tuple(hashes))

    def root(self) -> bytes:
        """Return the root hash of the tree of `size` leaves.

        Raises:
            FormatError: a tile is malformed.
            FileNotFoundError: a tile is missing.
        """
        return self.subtree_root(0, self.size)

    # -- proofs ------------------------------------------------------------------------------

    def _resolve_size(self, size: int | None) -> int:
        if size is None:
            return self.size
        if not 0 <= size <= self.size:
            raise ProofError(f"tree size {size} is outside the reader's tree, want <= {self.size}")
        return size

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """Build the inclusion proof of leaf ``index`` in the tree of ``size`` leaves.

        Args:
            index: the leaf's index.
            size: tree size of the proof; default and maximum `size`.

        Returns:
            The RFC 6962 audit path, lowest sibling first.

        Raises:
            ProofError: ``index`` is not below ``size``, or ``size`` exceeds the reader's size.
            FormatError: a tile is malformed.
            FileNotFoundError: a tile is missing.
        """
        n = self._resolve_size(size)
        if not 0 <= index < n:
            raise ProofError(f"inclusion proof for leaf {index} (size {n}): want 0 <= index < {n}")
        path: list[bytes] = []
        lo, hi = 0, n
        # Walk down from the root; each step keeps the half holding the leaf and records the
        # root of the other half. Collected top-down, returned bottom-up.
        while hi - lo > 1:
            k = 1 << ((hi - lo - 1).bit_length() - 1)
            if index < lo + k:
                path.append(self._mth(lo + k, hi))
                hi = lo + k
            else:
                path.append(self._mth(lo, lo + k))
                lo = lo + k
        path.reverse()
        return path

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """Build the consistency proof from the tree of ``old_size`` to that of ``new_size``.

        Args:
            old_size: size of the older tree; at least 1.
            new_size: size of the newer tree; default and maximum `size`.

        Returns:
            The RFC 6962 consistency proof; empty when the sizes are equal.

        Raises:
            ProofError: ``old_size`` is not in ``[1, new_size]``, or ``new_size`` exceeds the
                reader's size.
            FormatError: a tile is malformed.
            FileNotFoundError: a tile is missing.
        """
        n = self._resolve_size(new_size)
        if not 0 < old_size <= n:
            raise ProofError(
                f"consistency proof from size {old_size} to size {n}: want 0 < {old_size} <= {n}"
            )
        proof: list[bytes] = []
        lo, hi, m = 0, n, old_size
        # RFC 6962 SUBPROOF(m, D[lo:hi], b), iteratively; ``complete`` is b: whether the old
        # tree's part so far is a complete subtree whose root the verifier already has.
        complete = True
        while m != hi:
            k = 1 << ((hi - lo - 1).bit_length() - 1)
            if m - lo <= k:
                proof.append(self._mth(lo + k, hi))
                hi = lo + k
            else:
                proof.append(self._mth(lo, lo + k))
                lo = lo + k
                complete = False
        if not complete:
            proof.append(self._mth(lo, hi))
        proof.reverse()
        return proof

    # -- entries -----------------------------------------------------------------------------

    def entries(self, start: int, end: int) -> list[bytes]:
        """Return entries ``start`` to ``end - 1`` from the entry bundles.

        Args:
            start: first index.
            end: one past the last index; at most `size`.

        Returns:
            The entries' bytes. They are not checked against the leaf hashes: hash them with
            ``verify.merkle.leaf_hash`` and prove their inclusion to trust them.

        Raises:
            ProofError: the range is not within the tree.
            FormatError: a bundle is malformed or holds the wrong number of entries.
            FileNotFoundError: a bundle is missing.
        """
        self._check_range("entry range", start, end)
        out: list[bytes] = []
        i = start
        while i < end:
            bundle = self._read("entries", 0, i // TILE_WIDTH)
            take = min(end, (i // TILE_WIDTH + 1) * TILE_WIDTH) - i
            offset = i % TILE_WIDTH
            out.extend(bundle[offset : offset + take])
            i += take
        return out
