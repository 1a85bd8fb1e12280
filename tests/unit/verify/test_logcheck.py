"""verify/logcheck.py: the chain-and-root checker over a fetcher (a dict of files here).

One test per kind of damage: each must be reported with the file it is in and the entry index.
The log is written by the ledger's writer, then read back into memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import testkit

from trajledger.ledger.encode import log_entry
from trajledger.ledger.keys import Signer
from trajledger.ledger.log import EntrySpec, Log
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.log_fsck import check_log, directory_fetch
from trajledger.verify.logcheck import check_entries
from trajledger.verify.merkle import leaf_hash
from trajledger.verify.tiles import TileReader, format_entry_bundle

SIGNER = Signer.generate("log")  # TEST ONLY


def spec(i: int) -> EntrySpec:
    return testkit.entry_spec(i, "a" * 64)


@pytest.fixture
def files(tmp_path: Path) -> tuple[dict[str, bytes], int, bytes]:
    """A log of 300 entries (full and partial tiles on two levels), as a dict of files."""
    log = Log.create(tmp_path / "log", "example.org/check", SIGNER)
    log.append([spec(i) for i in range(290)])
    log.append([spec(i) for i in range(290, 300)])
    cp = log.checkpoint()
    out = {
        p.relative_to(log.directory).as_posix(): p.read_bytes()
        for p in log.directory.rglob("*")
        if p.is_file() and p.parts[-2:][0] != ".state"
    }
    return out, cp.size, cp.root


def fetcher(files: dict[str, bytes]):  # type: ignore[no-untyped-def]
    def fetch(rel: str) -> bytes:
        try:
            return files[rel]
        except KeyError as e:
            raise FileNotFoundError(2, "missing", rel) from e

    return fetch


def test_a_sound_log_checks(files: tuple[dict[str, bytes], int, bytes]) -> None:
    data, size, root = files
    seen: list[int] = []
    progress: list[tuple[int, int]] = []
    tiles: list[tuple[int, int, int]] = []
    result = check_log(
        fetcher(data), size, root,
        on_entry=lambda i, e: seen.append(i) or [],
        on_progress=lambda d, t: progress.append((d, t)),
        on_tile=lambda lv, ix, items: tiles.append((lv, ix, len(items))),
    )  # fmt: skip
    assert result.ok, result.findings
    assert (result.root, result.entries_checked) == (root, 300)
    assert seen == list(range(300))
    assert progress == [(256, 300), (300, 300)]
    assert sorted(tiles) == [(-1, 0, 256), (-1, 1, 44), (0, 0, 256), (0, 1, 44), (1, 0, 1)]


def test_a_flipped_leaf_hash_names_the_tile(files: tuple[dict[str, bytes], int, bytes]) -> None:
    data, size, root = files
    tile = bytearray(data["tile/0/000"])
    tile[32 * 7] ^= 1
    data["tile/0/000"] = bytes(tile)
    result = check_log(fetcher(data), size, root)
    assert [(f.file, f.index) for f in result.findings] == [("tile/0/000", 7)]
    assert "the leaf hash of entry 7 in tile/entries/000" in result.findings[0].message
    assert result.root == root  # rebuilt from the entries, which are sound


def test_an_altered_entry_names_the_bundle(files: tuple[dict[str, bytes], int, bytes]) -> None:
    data, size, root = files
    bundle = bytearray(data["tile/entries/001.p/44"])
    i = bundle.index(b'"time":"') + 9
    bundle[i] = ord("1") if bundle[i] != ord("1") else ord("2")
    data["tile/entries/001.p/44"] = bytes(bundle)
    result = check_log(fetcher(data), size, root)
    files_and_indices = {(f.file, f.index) for f in result.findings}
    assert ("tile/entries/001.p/44", 256) in files_and_indices
    msg = next(f.message for f in result.findings if f.index == 256 and "hashes to" in f.message)
    assert "but tile/0/001.p/44 and the trusted root have" in msg


def test_a_broken_chain(files: tuple[dict[str, bytes], int, bytes]) -> None:
    data, size, _root = files
    entries = TileReader(fetcher(data), size).entries(256, 300)
    e = LogEntry.from_bytes(entries[5])
    forged = log_entry(e.kind, e.subject, e.envelope, e.signers, e.time, "f" * 64).to_bytes()
    entries[5] = forged
    data["tile/entries/001.p/44"] = format_entry_bundle(entries)
    result = check_log(fetcher(data), size, None)
    chain = [f for f in result.findings if "hash chain is broken" in f.message]
    # 261 names the wrong predecessor, and 262 names 261's old leaf hash, not its new one.
    assert [(f.file, f.index) for f in chain] == [
        ("tile/entries/001.p/44", 261),
        ("tile/entries/001.p/44", 262),
    ]
    assert chain[0].message.startswith(f"entry 261: prev is {'f' * 64}, want ")


def test_missing_partials_fall_back_to_the_full_tile(
    files: tuple[dict[str, bytes], int, bytes],
) -> None:
    data, size, root = files
    # A checkpoint of size 290 whose partial tiles were deleted once the full ones existed is
    # checked from prefixes; with the full tile gone too, the partial one is named missing.
    at = TileReader(fetcher(data), size).subtree_root(0, 290)
    assert check_log(fetcher(data), 290, at).ok
    del data["tile/0/001.p/44"]
    result = check_log(fetcher(data), size, root)
    assert [(f.file, f.message) for f in result.findings] == [("tile/0/001.p/44", "missing")]


def test_a_wrong_root_and_a_truncated_bundle(files: tuple[dict[str, bytes], int, bytes]) -> None:
    data, size, root = files
    result = check_log(fetcher(data), size, b"\x01" * 32)
    assert [f.file for f in result.findings] == ["checkpoint"]
    assert result.findings[0].message.startswith(f"root at size {size} is {'01' * 32}")
    data["tile/entries/000"] = data["tile/entries/000"][:-5]
    result = check_log(fetcher(data), size, root)
    assert result.findings[0].file == "tile/entries/000"
    assert "entry bundle is truncated" in result.findings[0].message


def test_entry_callback_problems_are_reported_against_the_bundle(
    files: tuple[dict[str, bytes], int, bytes],
) -> None:
    data, size, root = files
    result = check_log(
        fetcher(data), size, root, on_entry=lambda i, e: [f"odd {i}"] if i in (3, 299) else []
    )
    assert [(f.file, f.index, f.message) for f in result.findings] == [
        ("tile/entries/000", 3, "odd 3"),
        ("tile/entries/001.p/44", 299, "odd 299"),
    ]


def test_a_subset_of_entries(files: tuple[dict[str, bytes], int, bytes]) -> None:
    data, size, root = files
    reader = TileReader(fetcher(data), size)
    wanted = [0, 1, 2, 150, 299]
    subset = {i: reader.entries(i, i + 1)[0] for i in wanted}
    proofs = {i: reader.inclusion_proof(i) for i in wanted}
    assert check_entries(subset, size, root, proofs.__getitem__) == []
    # A forged neighbour breaks the chain; a wrong proof and a missing one are named.
    e = LogEntry.from_bytes(subset[2])
    subset[2] = log_entry(e.kind, e.subject, e.envelope, e.signers, e.time, "e" * 64).to_bytes()
    proofs[150] = proofs[150][::-1]
    del proofs[299]
    subset[400] = subset[0]
    found = check_entries(subset, size, root, proofs.__getitem__, name=lambda i: f"entries/{i}")
    got = [(f.file, f.message.split(":")[0]) for f in found]
    assert ("entries/2", "entry 2") in got  # prev is not the leaf hash of entry 1
    assert ("entries/2", "not included under the tree") in got  # its leaf changed too
    assert ("entries/150", "not included under the tree") in got
    assert ("entries/299", "no inclusion proof at size 300") in got
    assert ("entries/400", "index 400 is outside the tree of size 300") in got
    assert leaf_hash(subset[0]).hex() == LogEntry.from_bytes(subset[1]).prev


def test_the_whole_tree_as_a_subset_rebuilds_the_root(
    files: tuple[dict[str, bytes], int, bytes],
) -> None:
    data, size, root = files
    reader = TileReader(fetcher(data), size)
    every = {i: reader.entries(i, i + 1)[0] for i in range(size)}

    def no_proofs(i: int) -> list[bytes]:
        raise AssertionError("the whole tree needs no inclusion proof")

    assert check_entries(every, size, root, no_proofs) == []
    found = check_entries(every, size, bytes(32), no_proofs)
    assert [(f.file, f.index) for f in found] == [("tree", None)]
    assert found[0].message.startswith(f"the root of the {size} entries is {root.hex()[:16]}…")


def test_directory_fetch_refuses_escapes(tmp_path: Path) -> None:
    (tmp_path / "log").mkdir()
    (tmp_path / "secret").write_bytes(b"x")
    fetch = directory_fetch(tmp_path / "log")
    for rel in ("../secret", "/etc/passwd", "tile//0", "tile/./0"):
        with pytest.raises(FileNotFoundError):
            fetch(rel)


def test_an_altered_full_bundle_blames_it_alone(files: tuple[dict[str, bytes], int, bytes]) -> None:
    """Review rev7: the upper tiles are compared with the tree the signed root confirms (the
    level-0 tiles'), not with one rebuilt from the edited entries, and the root reported is
    the signed one; the edited bundle comes first, and the tiles passed on are the signed
    tree's (the bundle's as leaf hashes)."""
    data, size, root = files
    bundle = bytearray(data["tile/entries/000"])
    i = bundle.index(b'"time":"') + 9
    bundle[i] = ord("1") if bundle[i] != ord("1") else ord("2")
    data["tile/entries/000"] = bytes(bundle)
    tiles: dict[tuple[int, int], list[bytes]] = {}
    result = check_log(fetcher(data), size, root,
                       on_tile=lambda lv, ix, items: tiles.update({(lv, ix): list(items)}))
    assert [(f.file, f.index) for f in result.findings] == [
        ("tile/entries/000", 0), ("tile/entries/000", 1)], result.findings
    assert result.findings[1].message.endswith("(follows from entry 0, changed in "
                                              "tile/entries/000: this prev is the signed "
                                              "tree's leaf hash of entry 0)")
    assert (result.root, result.culprits) == (root, 1)
    assert sorted(tiles) == [(-2, 0), (-1, 1), (0, 0), (0, 1), (1, 0)]
    assert b"".join(tiles[(-2, 0)]) == b"".join(tiles[(0, 0)]) == data["tile/0/000"]
