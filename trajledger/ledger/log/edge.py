"""The right edge of a tiled Merkle tree: what appending needs from a committed tree.

Scope: `Edge` holds the compact range of a tree (the roots of the perfect subtrees it splits
into), the hashes of its rightmost partial tile at each level and its partial entry bundle, so
that appending a batch costs O(batch + log n) and writes only the tiles the batch touches.
`load_edge` reads it from the tiles (O(log n) tile reads) and checks that the partial entry
bundle hashes to the partial level-0 tile.

Non-scope: files (``writer`` writes what `Edge.extend` returns), trust (`load_edge` believes the
tiles; ``state`` compares the root with treeState and the signed checkpoint).
Spec: c2sp.org/tlog-tiles; RFC 6962 section 2.1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trajledger.verify.errors import FormatError
from trajledger.verify.merkle import EMPTY_ROOT, HASH_SIZE, leaf_hash, node_hash
from trajledger.verify.tiles import (
    MAX_ENTRY_SIZE,
    TILE_HEIGHT,
    TILE_WIDTH,
    TileReader,
    entries_path,
    format_entry_bundle,
    tile_path,
)

__all__ = ["ZERO_HASH", "Edge", "fold", "load_edge"]

ZERO_HASH = bytes(HASH_SIZE)


def fold(compact: Sequence[tuple[int, bytes]]) -> bytes:
    """The root of a tree from its compact range (largest subtree first)."""
    if not compact:
        return EMPTY_ROOT
    root = compact[-1][1]
    for _, h in reversed(compact[:-1]):
        root = node_hash(h, root)
    return root


@dataclass
class Edge:
    """What appending needs from a committed tree.

    Attributes:
        size: the tree size.
        compact: (height, hash) of the perfect subtrees the tree splits into, largest first.
        tiles: ``tiles[L]`` the hashes of the partial tile at level L (empty when none).
        bundle: the entries of the partial entry bundle.
        prev: the leaf hash of the last entry (zeros for an empty tree).
        root: the tree's root (computed from ``compact`` when not given).
        encoded: ``bundle`` encoded as an entry bundle (computed when not given): `extend`
            appends to it, so a commit encodes only its own entries, not the whole partial
            bundle again.
    """

    size: int
    compact: list[tuple[int, bytes]]
    tiles: list[list[bytes]]
    bundle: list[bytes]
    prev: bytes
    root: bytes = b""
    encoded: bytes = b""

    def __post_init__(self) -> None:
        """Compute the root and the encoded bundle when they were not given."""
        if not self.root:
            self.root = fold(self.compact)
        if self.bundle and not self.encoded:
            self.encoded = format_entry_bundle(self.bundle)

    def extend(
        self, entries: Sequence[bytes], hashes: Sequence[bytes]
    ) -> tuple[Edge, list[tuple[str, bytes]], list[str], dict[int, tuple[int, int]]]:
        """Append entries (with their leaf hashes).

        Returns:
            The new edge; the files to write (bundles first, then tiles level by level); the
            tiles completed (whose partial versions may go after the commit); and the partial
            tile each level now ends with, as (index, width) by level (-1: the entry bundle).
        """
        n = self.size
        compact = list(self.compact)
        tiles = [list(t) for t in self.tiles]
        bundle = list(self.bundle)
        encoded = bytearray(self.encoded)
        bundle_writes: list[tuple[str, bytes]] = []
        tile_writes: dict[int, list[tuple[str, bytes]]] = {}
        completed: list[str] = []
        touched: set[int] = set()

        def push(level: int, pos: int, h: bytes) -> None:
            while len(tiles) <= level:
                tiles.append([])
            tile = tiles[level]
            tile.append(h)
            touched.add(level)
            if len(tile) == TILE_WIDTH:
                path = tile_path(level, pos >> TILE_HEIGHT)
                tile_writes.setdefault(level, []).append((path, b"".join(tile)))
                completed.append(path)
                tiles[level] = []

        for raw, lh in zip(entries, hashes, strict=True):
            if len(raw) > MAX_ENTRY_SIZE:  # (as `format_entry_bundle` refuses it)
                raise FormatError(
                    f"entry {len(bundle)} has {len(raw)} bytes, want at most {MAX_ENTRY_SIZE}"
                )
            bundle.append(raw)
            encoded += len(raw).to_bytes(2, "big")
            encoded += raw
            if len(bundle) == TILE_WIDTH:
                path = entries_path(n >> TILE_HEIGHT)
                bundle_writes.append((path, bytes(encoded)))
                completed.append(path)
                bundle = []
                encoded = bytearray()
            push(0, n, lh)
            n += 1
            compact.append((0, lh))
            while len(compact) > 1 and compact[-1][0] == compact[-2][0]:
                height, right = compact.pop()
                _, left = compact.pop()
                height += 1
                node = node_hash(left, right)
                compact.append((height, node))
                if height % TILE_HEIGHT == 0:
                    push(height // TILE_HEIGHT, (n >> height) - 1, node)

        partial: dict[int, tuple[int, int]] = {}
        tail = bytes(encoded)
        if bundle and entries:
            path = entries_path(n >> TILE_HEIGHT, len(bundle))
            bundle_writes.append((path, tail))
            partial[-1] = (n >> TILE_HEIGHT, len(bundle))
        writes = list(bundle_writes)
        for level in sorted(set(tile_writes) | touched):
            writes.extend(tile_writes.get(level, []))
            if level in touched and tiles[level]:
                index = n >> (TILE_HEIGHT * (level + 1))
                writes.append((tile_path(level, index, len(tiles[level])), b"".join(tiles[level])))
                partial[level] = (index, len(tiles[level]))
        edge = Edge(n, compact, tiles, bundle, hashes[-1] if hashes else self.prev,
                    encoded=tail)  # fmt: skip
        return edge, writes, completed, partial


class EdgeMismatch(FormatError):
    """The partial entry bundle does not hash to the partial level-0 tile.

    Attributes:
        rel: the bundle's path.
    """

    def __init__(self, message: str, rel: str) -> None:
        super().__init__(message)
        self.rel = rel


def load_edge(reader: TileReader) -> Edge:
    """Read the right edge of the tree of ``reader.size`` entries from the tiles.

    A partial tile that is gone because the full tile replaced it (another writer appended
    meanwhile) is read from the full tile, as `TileReader` does.

    Raises:
        FileNotFoundError: a tile or bundle the tree needs is missing.
        FormatError: one is malformed (`EdgeMismatch`: the bundle does not match its tile).
    """
    size = reader.size
    tiles: list[list[bytes]] = []
    level = 0
    while size >> (TILE_HEIGHT * level):
        width = (size >> (TILE_HEIGHT * level)) % TILE_WIDTH
        first = (size >> (TILE_HEIGHT * (level + 1))) * TILE_WIDTH
        tiles.append(reader.tile_hashes(level, first // TILE_WIDTH) if width else [])
        level += 1
    bundle: list[bytes] = []
    width = size % TILE_WIDTH
    if width:
        bundle = reader.entries(size - width, size)
        if [leaf_hash(e) for e in bundle] != tiles[0]:
            rel = entries_path(size >> TILE_HEIGHT, width)
            raise EdgeMismatch(
                f"{rel}: its entries do not hash to the leaves of "
                f"{tile_path(0, size >> TILE_HEIGHT, width)}",
                rel,
            )
    compact: list[tuple[int, bytes]] = []
    start = 0
    for height in range(size.bit_length() - 1, -1, -1):
        if size >> height & 1:
            compact.append((height, reader.node_hash(height, start >> height)))
            start += 1 << height
    prev = reader.leaf_hashes(size - 1, size)[0] if size else ZERO_HASH
    return Edge(size, compact, tiles, bundle, prev)
