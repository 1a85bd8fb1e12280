"""verify.tiles: paths, encodings, and TileReader over a real Tessera POSIX log and larger trees.

The Tessera log (tests/vectors/tlog/tlog-vectors.json, ``tessera_posix_log``) is
transparency-dev/tessera's testdata/log: 15 entries, a signed checkpoint after each append, and
the tile and entry-bundle files present at HEAD.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.consistency import verify_consistency
from trajledger.verify.errors import FormatError, ProofError
from trajledger.verify.merkle import (
    EMPTY_ROOT,
    leaf_hash,
    root_from_leaf_hashes,
    verify_inclusion,
)
from trajledger.verify.note import verifier_from_vkey
from trajledger.verify.tiles import (
    TILE_WIDTH,
    TileReader,
    entries_path,
    format_entry_bundle,
    parse_entry_bundle,
    parse_tile,
    tile_path,
    tile_width,
)

ROOT = Path(__file__).resolve().parents[2]
VECTORS: dict[str, Any] = json.loads((ROOT / "vectors/tlog/tlog-vectors.json").read_text())
TESSERA = VECTORS["tessera_posix_log"]
TESSERA_FILES = {k: bytes.fromhex(v) for k, v in TESSERA["files_hex"].items()}
TESSERA_ENTRIES = [e.encode() for e in TESSERA["entries_utf8"]]


def _generator() -> ModuleType:
    name = "trajledger_vectors_generate"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "vectors/generate.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def dict_fetch(files: dict[str, bytes], log: list[str] | None = None) -> Callable[[str], bytes]:
    """A fetch function over an in-memory log that records what it reads."""

    def fetch(path: str) -> bytes:
        if log is not None:
            log.append(path)
        try:
            return files[path]
        except KeyError:
            raise FileNotFoundError(path) from None

    return fetch


# -- paths and widths -----------------------------------------------------------------------


def test_index_encoding_example() -> None:
    for index, want in VECTORS["tlog_tiles_examples"]["index_encoding"].items():
        assert tile_path(0, int(index)) == f"tile/0/{want}"
        assert entries_path(int(index)) == f"tile/entries/{want}"


@pytest.mark.parametrize(
    ("level", "index", "width", "want"),
    [
        (0, 0, None, "tile/0/000"),
        (0, 0, 256, "tile/0/000"),
        (0, 7, 15, "tile/0/007.p/15"),
        (1, 1000, None, "tile/1/x001/000"),
        (2, 999, 1, "tile/2/999.p/1"),
        (63, 1_000_000, 255, "tile/63/x001/x000/000.p/255"),
    ],
)
def test_tile_path(level: int, index: int, width: int | None, want: str) -> None:
    assert tile_path(level, index, width) == want


def test_tile_path_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"tile level 64, want 0\.\.63"):
        tile_path(64, 0)
    with pytest.raises(ValueError, match="tile index -1"):
        tile_path(0, -1)
    with pytest.raises(ValueError, match="tile width 0"):
        tile_path(0, 0, 0)
    with pytest.raises(ValueError, match="tile width 257"):
        entries_path(0, 257)
    with pytest.raises(ValueError, match="entry bundle index -2"):
        entries_path(-2)


def _tiles_of(size: int) -> dict[int, tuple[int, int]]:
    """Per level: (number of full tiles, width of the partial tile or 0)."""
    out = {}
    level = 0
    while size >> (8 * level):
        full = sum(tile_width(level, i, size) == TILE_WIDTH for i in range(300))
        partial = tile_width(level, full, size)
        out[level] = (full, partial if partial < TILE_WIDTH else 0)
        level += 1
    return out


def test_tile_counts_from_the_spec() -> None:
    ex = VECTORS["tlog_tiles_examples"]
    t70k = ex["tree_size_70000"]
    assert _tiles_of(70000) == {
        0: (t70k["full_level0_tiles"], t70k["partial_level0_width"]),
        1: (t70k["full_level1_tiles"], t70k["partial_level1_width"]),
        2: (0, t70k["partial_level2_width"]),
    }
    t256 = ex["tree_size_256"]
    assert _tiles_of(256) == {
        0: (t256["full_level0_tiles"], 0),
        1: (0, t256["partial_level1_width"]),
    }
    assert tile_width(0, 1, 256) == 0  # no empty tiles


def test_tessera_files_are_exactly_the_partial_tiles_of_each_size() -> None:
    want = set()
    for size in range(1, 16):
        want.add(tile_path(0, 0, tile_width(0, 0, size)))
        want.add(entries_path(0, tile_width(0, 0, size)))
    assert set(TESSERA_FILES) == want


# -- encodings ------------------------------------------------------------------------------


def test_parse_tile() -> None:
    data = TESSERA_FILES["tile/0/000.p/3"]
    assert parse_tile(data, 3) == [leaf_hash(e) for e in TESSERA_ENTRIES[:3]]
    with pytest.raises(FormatError, match=r"hash tile has 96 bytes, want 64 \(2 hashes\)"):
        parse_tile(data, 2)
    with pytest.raises(FormatError, match="hash tile has 95 bytes, want 96"):
        parse_tile(data[:-1], 3)
    with pytest.raises(ValueError, match="tile width 0"):
        parse_tile(b"", 0)


def test_entry_bundles_of_tessera_log() -> None:
    for size in range(1, 16):
        data = TESSERA_FILES[entries_path(0, size)]
        assert parse_entry_bundle(data) == TESSERA_ENTRIES[:size]
        assert parse_entry_bundle(data, width=size) == TESSERA_ENTRIES[:size]
        assert format_entry_bundle(TESSERA_ENTRIES[:size]) == data


def test_entry_bundle_refuses_truncation_and_garbage() -> None:
    data = TESSERA_FILES["tile/entries/000.p/2"]  # 00 03 "one" 00 03 "two"
    with pytest.raises(FormatError, match="entry 1 at offset 7 has 2 of 3 bytes"):
        parse_entry_bundle(data[:-1])
    with pytest.raises(FormatError, match="length prefix of entry 2 at offset 10 has 1 of 2 bytes"):
        parse_entry_bundle(data + b"\x00")
    with pytest.raises(FormatError, match="entry 2 at offset 12 has 3 of 65535 bytes"):
        parse_entry_bundle(data + b"\xff\xffabc")
    with pytest.raises(FormatError, match="entry bundle has 3 entries, want 2"):
        parse_entry_bundle(data + b"\x00\x00", width=2)
    with pytest.raises(FormatError, match="entry bundle is empty"):
        parse_entry_bundle(b"")
    with pytest.raises(FormatError, match="want at most 256 entries"):
        parse_entry_bundle(b"\x00\x00" * 257)


def test_entry_bundle_edge_entries() -> None:
    entries = [b"", b"x" * 65535, b"\x00\x01"]
    assert parse_entry_bundle(format_entry_bundle(entries)) == entries
    assert len(parse_entry_bundle(b"\x00\x00" * 256)) == 256
    with pytest.raises(FormatError, match="entry 1 has 65536 bytes, want at most 65535"):
        format_entry_bundle([b"", b"x" * 65536])
    with pytest.raises(FormatError, match="entry bundle of 0 entries"):
        format_entry_bundle([])
    with pytest.raises(FormatError, match="entry bundle of 257 entries"):
        format_entry_bundle([b""] * 257)


# -- the Tessera POSIX log --------------------------------------------------------------------


def test_tessera_checkpoints_verify_against_vkey() -> None:
    log = verifier_from_vkey(TESSERA["vkey"])
    assert TESSERA["checkpoint_latest"] == TESSERA["checkpoints"]["15"]
    for size, note in TESSERA["checkpoints"].items():
        cp = verify_checkpoint(note.encode(), log, origin="example.com/log/testdata")
        assert cp.size == int(size)
        assert cp.extensions == ()


@pytest.mark.parametrize("size", range(16))
def test_tessera_roots_from_tiles_match_checkpoints(size: int) -> None:
    log = verifier_from_vkey(TESSERA["vkey"])
    cp = verify_checkpoint(TESSERA["checkpoints"][str(size)].encode(), log)
    reader = TileReader(dict_fetch(TESSERA_FILES), size)
    assert reader.root() == cp.root
    assert reader.root() == root_from_leaf_hashes([leaf_hash(e) for e in TESSERA_ENTRIES[:size]])
    assert reader.leaf_hashes(0, size) == [leaf_hash(e) for e in TESSERA_ENTRIES[:size]]
    assert reader.entries(0, size) == TESSERA_ENTRIES[:size]
    for i in range(size):
        entry = reader.entries(i, i + 1)[0]
        verify_inclusion(i, size, leaf_hash(entry), reader.inclusion_proof(i), cp.root)
    for old in range(1, size + 1):
        old_cp = Checkpoint.from_text(
            TESSERA["checkpoints"][str(old)].encode().split(b"\n\n")[0] + b"\n"
        )
        verify_consistency(old, size, reader.consistency_proof(old), old_cp.root, cp.root)


def test_tessera_tree_state_matches_latest_checkpoint() -> None:
    state = json.loads(TESSERA["state_treeState"])
    reader = TileReader(dict_fetch(TESSERA_FILES), state["size"])
    assert reader.root() == base64.b64decode(state["root"])


def test_reader_only_reads_tiles_its_size_requires() -> None:
    seen: list[str] = []
    reader = TileReader(dict_fetch(TESSERA_FILES, seen), 9)
    reader.root()
    reader.inclusion_proof(3)
    reader.entries(0, 9)
    assert sorted(set(seen)) == ["tile/0/000.p/9", "tile/entries/000.p/9"]
    assert len(seen) == 2  # cached


def test_reader_errors() -> None:
    reader = TileReader(dict_fetch(TESSERA_FILES), 15)
    with pytest.raises(ProofError, match=r"leaf range \[3, 16\) is outside the tree of size 15"):
        reader.leaf_hashes(3, 16)
    with pytest.raises(ProofError, match=r"entry range \[5, 4\)"):
        reader.entries(5, 4)
    with pytest.raises(ProofError, match="want 0 <= index < 15"):
        reader.inclusion_proof(15)
    with pytest.raises(ProofError, match="tree size 16 is outside the reader's tree"):
        reader.inclusion_proof(0, 16)
    with pytest.raises(ProofError, match="want 0 < 0 <= 15"):
        reader.consistency_proof(0)
    with pytest.raises(ProofError, match="level 4 index 0 is not a complete subtree"):
        reader.node_hash(4, 0)
    assert reader.consistency_proof(15) == []
    assert reader.subtree_root(4, 4) == EMPTY_ROOT
    assert TileReader(dict_fetch({}), 0).root() == EMPTY_ROOT
    with pytest.raises(FileNotFoundError):
        TileReader(dict_fetch({}), 16).root()
    with pytest.raises(ValueError, match="tree size -1"):
        TileReader(dict_fetch({}), -1)


def test_reader_refuses_malformed_tiles() -> None:
    files = dict(TESSERA_FILES)
    files["tile/0/000.p/5"] = files["tile/0/000.p/5"][:-1]
    files["tile/entries/000.p/5"] = files["tile/entries/000.p/4"]
    reader = TileReader(dict_fetch(files), 5)
    with pytest.raises(FormatError, match=r"tile/0/000.p/5: hash tile has 159 bytes, want 160"):
        reader.root()
    with pytest.raises(
        FormatError, match=r"tile/entries/000.p/5: entry bundle has 4 entries, want 5"
    ):
        reader.entries(0, 1)


# -- larger trees ---------------------------------------------------------------------------

BIG = 70_000
BIG_ENTRIES = [i.to_bytes(4, "big") for i in range(BIG)]


@pytest.fixture(scope="module")
def big_log() -> tuple[dict[str, bytes], list[bytes]]:
    files = _generator().build_tiles(BIG_ENTRIES)
    return files, [leaf_hash(e) for e in BIG_ENTRIES]


def test_big_tree_layout(big_log: tuple[dict[str, bytes], list[bytes]]) -> None:
    files, _ = big_log
    tiles = sorted(p for p in files if not p.startswith("tile/entries/"))
    assert len(tiles) == 273 + 1 + 1 + 1 + 1
    assert "tile/0/272" in files and "tile/0/273.p/112" in files
    assert "tile/1/000" in files and "tile/1/001.p/17" in files and "tile/2/000.p/1" in files


def test_big_tree_root_and_proofs(big_log: tuple[dict[str, bytes], list[bytes]]) -> None:
    files, hashes = big_log
    root = root_from_leaf_hashes(hashes)
    reader = TileReader(dict_fetch(files), BIG)
    assert reader.root() == root
    rng = random.Random(6962)
    for index in [0, 255, 256, 65535, 65536, BIG - 1, *rng.sample(range(BIG), 20)]:
        verify_inclusion(index, BIG, hashes[index], reader.inclusion_proof(index), root)
    for old in [1, 255, 256, 257, 65536, 69887, 69888, BIG - 1, *rng.sample(range(1, BIG), 10)]:
        old_root = root_from_leaf_hashes(hashes[:old])
        assert reader.subtree_root(0, old) == old_root
        verify_consistency(old, BIG, reader.consistency_proof(old), old_root, root)
        # Proofs into an older tree come from the newer tiles.
        verify_inclusion(
            old - 1, old, hashes[old - 1], reader.inclusion_proof(old - 1, old), old_root
        )


def test_big_tree_node_hashes(big_log: tuple[dict[str, bytes], list[bytes]]) -> None:
    files, hashes = big_log
    reader = TileReader(dict_fetch(files), BIG)
    for level, index in [(0, 69999), (3, 17), (8, 272), (9, 135), (16, 0), (12, 16)]:
        n = 1 << level
        assert reader.node_hash(level, index) == root_from_leaf_hashes(
            hashes[index * n : (index + 1) * n]
        )
    assert reader.leaf_hashes(65530, 65541) == hashes[65530:65541]
    assert reader.entries(255, 258) == BIG_ENTRIES[255:258]
    # An unaligned range still has the right MTH, from more reads.
    assert reader.subtree_root(3, 1000) == root_from_leaf_hashes(hashes[3:1000])


@pytest.mark.parametrize("index", [0, 1234, 65536, BIG - 1])
def test_proofs_read_log_n_tiles(big_log: tuple[dict[str, bytes], list[bytes]], index: int) -> None:
    files, _ = big_log
    seen: list[str] = []
    TileReader(dict_fetch(files, seen), BIG).inclusion_proof(index)
    # At most one tile on the leaf's path and one on the right border per tile level.
    assert len(seen) == len(set(seen)) <= 2 * 3
    seen.clear()
    TileReader(dict_fetch(files, seen), BIG).consistency_proof(index + 1 if index + 1 < BIG else 5)
    assert len(seen) <= 2 * 3 + 1


def test_lru_cache_bounds_memory_and_refetches(
    big_log: tuple[dict[str, bytes], list[bytes]],
) -> None:
    files, hashes = big_log
    seen: list[str] = []
    reader = TileReader(dict_fetch(files, seen), BIG, cache_tiles=2)
    assert reader.leaf_hashes(0, 1024) == hashes[:1024]
    assert len(seen) == 4
    reader.leaf_hashes(768, 1024)  # still cached
    assert len(seen) == 4
    reader.leaf_hashes(0, 1)  # evicted
    assert seen[-1] == "tile/0/000"
    with pytest.raises(ValueError, match="cache_tiles 0"):
        TileReader(dict_fetch(files), BIG, cache_tiles=0)


def test_missing_partial_tile_falls_back_to_full_tile(
    big_log: tuple[dict[str, bytes], list[bytes]],
) -> None:
    files, hashes = big_log
    # A reader for size 300 needs tile/0/001.p/44 and tile/1/000.p/1; the log has moved on to
    # 70,000 and deleted those partials, keeping only the full tiles.
    seen: list[str] = []
    reader = TileReader(dict_fetch(files, seen), 300)
    assert reader.root() == root_from_leaf_hashes(hashes[:300])
    assert reader.entries(290, 300) == BIG_ENTRIES[290:300]
    assert "tile/0/001.p/44" in seen and "tile/0/001" in seen
    assert "tile/entries/001.p/44" in seen and "tile/entries/001" in seen
