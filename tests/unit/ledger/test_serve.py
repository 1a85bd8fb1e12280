"""``ledger.serve``: which paths are tlog-tiles resources, and what the server will read.

The grammar follows c2sp.org/tlog-tiles to the character (levels 0..63 without leading zeros,
three-digit index groups with ``x`` prefixes on all but the last, widths 1..255), and every path
the log writer produces (`verify.tiles.tile_path`, `entries_path`) is accepted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trajledger.ledger.serve import LogServer, max_size, resource_kind
from trajledger.verify.tiles import entries_path, tile_path


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("checkpoint", "checkpoint"),
        ("tile/0/000", "tile"),
        ("tile/0/x001/x234/067", "tile"),
        ("tile/63/000.p/255", "tile"),
        ("tile/1/000.p/1", "tile"),
        ("tile/entries/000", "entries"),
        ("tile/entries/x001/000.p/17", "entries"),
        ("tile/64/000", None),
        ("tile/01/000", None),
        ("tile/0/00", None),
        ("tile/0/0000", None),
        ("tile/0/x001", None),
        ("tile/0/001/000", None),
        ("tile/0/000.p/0", None),
        ("tile/0/000.p/256", None),
        ("tile/0/000.p/09", None),
        ("tile/0/000.p/", None),
        ("tile/entries/000.p/300", None),
        ("tile/entries", None),
        ("/checkpoint", None),
        ("checkpoint/", None),
        ("tile/0/../000", None),
        (".state/treeState", None),
        ("vkey", None),
        ("tile/0/000\n", None),
    ],
)
def test_resource_grammar(path: str, kind: str | None) -> None:
    assert resource_kind(path) == kind


@pytest.mark.parametrize("index", [0, 1, 999, 1000, 1234067, 10**9 + 7])
def test_every_path_the_writer_makes_is_served(index: int) -> None:
    for width in (None, 1, 17, 255):
        assert resource_kind(tile_path(3, index, width)) == "tile"
        assert resource_kind(entries_path(index, width)) == "entries"


def test_oversized_and_special_files_are_not_served(tmp_path: Path) -> None:
    log = tmp_path / "log"
    (log / "tile" / "0").mkdir(parents=True)
    (log / "tile" / "0" / "000").write_bytes(b"\0" * max_size("tile"))
    (log / "tile" / "0" / "001").write_bytes(b"\0" * (max_size("tile") + 1))
    (log / "tile" / "0" / "002").mkdir()
    server = LogServer(log)
    try:
        assert server.read("tile/0/000", "tile") == b"\0" * 8192
        assert server.read("tile/0/001", "tile") is None  # larger than a full tile
        assert server.read("tile/0/002", "tile") is None  # a directory
        assert server.read("tile/0/003", "tile") is None  # absent
        assert server.url.startswith("http://127.0.0.1:")
    finally:
        server.server_close()
    assert max_size("entries") == 256 * (2 + 65535) and max_size("checkpoint") == 1 << 20
