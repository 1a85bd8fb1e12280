"""The real Tessera POSIX test log (transparency-dev/tessera testdata/log, tree size 15) is read
and verified by trajledger's reader: roots from tiles, every entry included, every checkpoint
signature, consistency between all of its checkpoints, every partial tile it kept.

Vectors: tests/vectors/tlog/tlog-vectors.json (a copy of the shared vector file), key
``tessera_posix_log`` (repository and commit in its ``_sources``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajledger.ledger.log import Log, verify_log_dir
from trajledger.verify.checkpoint import verify_checkpoint
from trajledger.verify.consistency import check_consistent
from trajledger.verify.errors import ProofError
from trajledger.verify.merkle import leaf_hash, verify_inclusion
from trajledger.verify.note import verifier_from_vkey
from trajledger.verify.tiles import TileReader

VECTORS = Path(__file__).parents[2] / "vectors" / "tlog" / "tlog-vectors.json"


@pytest.fixture(scope="module")
def tessera() -> dict[str, object]:
    data: dict[str, object] = json.loads(VECTORS.read_text())["tessera_posix_log"]
    return data


@pytest.fixture
def tessera_dir(tmp_path: Path, tessera: dict[str, object]) -> Path:
    d = tmp_path / "tessera"
    files = tessera["files_hex"]
    assert isinstance(files, dict)
    for rel, hexdata in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(bytes.fromhex(hexdata))
    (d / "checkpoint").write_text(str(tessera["checkpoint_latest"]))
    (d / ".state").mkdir()
    (d / ".state/treeState").write_text(str(tessera["state_treeState"]))
    return d


def test_reader_verifies_the_tessera_log(tessera_dir: Path, tessera: dict[str, object]) -> None:
    vkey = str(tessera["vkey"])
    verifier = verifier_from_vkey(vkey)
    entries = [e.encode() for e in tessera["entries_utf8"]]  # type: ignore[attr-defined]
    cps = {int(k): v.encode() for k, v in tessera["checkpoints"].items()}  # type: ignore[attr-defined]
    latest = verify_checkpoint((tessera_dir / "checkpoint").read_bytes(), verifier)
    assert latest.size == len(entries) == 15
    # Root from the tiles.
    reader = TileReader(lambda rel: (tessera_dir / rel).read_bytes(), latest.size)
    assert reader.root() == latest.root
    assert reader.entries(0, 15) == entries
    # Every entry included under the latest checkpoint.
    for i, e in enumerate(entries):
        verify_inclusion(i, latest.size, leaf_hash(e), reader.inclusion_proof(i), latest.root)
    # Every checkpoint signature, and consistency of every pair, from the tiles of size 15.
    verified = {n: verify_checkpoint(note, verifier) for n, note in cps.items()}
    for a in range(16):
        for b in range(a, 16):
            old, new = verified[a], verified[b]
            proof = reader.consistency_proof(a, b) if 0 < a < b else []
            check_consistent(old, new, proof)
            if a:
                assert reader.subtree_root(0, a) == old.root


def test_checker_accepts_the_tessera_log(tessera_dir: Path, tessera: dict[str, object]) -> None:
    report = verify_log_dir(tessera_dir, vkey=str(tessera["vkey"]), entry_format=False)
    # The only complaint: Tessera keeps no vkey file (the trusted vkey is given instead).
    assert [p.file for p in report.problems] == ["vkey"]
    assert report.size == 15 and report.checkpoint_size == 15
    assert report.warnings == [
        ".state/history: absent; older partial tiles are not checked for presence"
    ]
    (tessera_dir / "vkey").write_text(str(tessera["vkey"]) + "\n")
    report = verify_log_dir(tessera_dir, entry_format=False)
    assert report.ok, report.problems


def test_checker_finds_a_flipped_byte_in_an_old_tessera_partial(
    tessera_dir: Path, tessera: dict[str, object]
) -> None:
    (tessera_dir / "vkey").write_text(str(tessera["vkey"]) + "\n")
    old = tessera_dir / "tile/0/000.p/7"
    data = bytearray(old.read_bytes())
    data[100] ^= 1
    old.write_bytes(bytes(data))
    report = verify_log_dir(tessera_dir, entry_format=False)
    assert [(p.file, p.index) for p in report.problems] == [("tile/0/000.p/7", 3)]
    assert "hash 3 is" in report.problems[0].message


def test_log_opens_the_tessera_log_read_only(tessera_dir: Path, tessera: dict[str, object]) -> None:
    (tessera_dir / "vkey").write_text(str(tessera["vkey"]) + "\n")
    log = Log.open(tessera_dir)
    assert log.size == 15
    assert log.entries(0, 15) == [e.encode() for e in tessera["entries_utf8"]]  # type: ignore[attr-defined]
    cp = log.checkpoint()
    verify_inclusion(9, 15, leaf_hash(log.entry(9)), log.inclusion_proof(9), cp.root)
    with pytest.raises(ProofError):
        verify_inclusion(9, 15, leaf_hash(log.entry(8)), log.inclusion_proof(9), cp.root)
