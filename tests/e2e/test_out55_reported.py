"""What out55 found playing a data vendor and its buyer as outsiders (README.md, docs/ and
``--help`` only): bundles cut short, witnesses' cosignatures carried to an import, two vendors
whose names collide, and out53's **Left**; docs/SECURITY.md, "Review of 2026-12-07,
thirty-ninth round (out55)". Every refusal leaves the buyer's ledger and user state as they
were, file by file (`files`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_updates import train_a_buyer
from testkit import Party, new_runner, release_files

from trajledger.runner.cli import main
from trajledger.verify.__main__ import main as verify_main


def files(*roots: Path) -> dict[str, bytes]:
    """Every file under ``roots`` by path, but SQLite's shared-memory index (a read touches
    it: out53) and the ledger's scratch directory: a refusal leaves them as they were. The
    commands run before, in this process, have their SQLite connections closed first (a
    connection closed checkpoints its write-ahead log into the database: the same rows in
    other files)."""
    release_files(*roots)
    return {str(p): rows(p) if p.suffix == ".sqlite" else p.read_bytes()
            for root in roots for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.endswith(("-shm", "-wal"))
            and "tmp" not in p.relative_to(root).parts}


def rows(db: Path) -> bytes:
    """A SQLite database's schema and rows (its write-ahead log's included), as SQL text."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return "\n".join(con.iterdump()).encode()
    finally:
        con.close()


def refused(party: Party, *args: str | Path, code: int = 1) -> str:
    """``trajledger ARGS`` as ``party``, which must exit ``code`` with one line on stderr and
    leave its ledger and user state as they were; that line. (A read first: a ledger copied
    to another directory is pinned in the user state when first opened.)"""
    party.run("show", "bh@1")
    before = files(party.home, party.state)
    r = new_runner().invoke(main, ["--ledger", str(party.home), *map(str, args)],
                            env={"TRAJLEDGER_STATE_DIR": str(party.state)})
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    after = files(party.home, party.state)
    changed = sorted(k for k in after.keys() | before.keys() if after.get(k) != before.get(k))
    assert after == before, (args, changed)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("cut", [0, 1, 2, 3, 4, 5])
def test_a_bundle_cut_within_its_first_bytes_says_it_was_cut_short(
    tmp_path: Path, cut: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """out53's Left: a bundle cut to 1 to 3 bytes (a prefix of zstd's magic number) read
    ``not zstd-compressed (magic 28b5): not a bundle; 'import' takes the .tar.zst file …``, as
    rollouts given for a bundle do; cut to 4 or 5 bytes, ``corrupt zstd frame header: not
    enough data for frame parameters; need 5 bytes`` and no next step; empty, ``magic none``.
    Each is a download or a copy cut short: expected, the line says so and to get it again, at
    ``import``, ``trajledger verify BUNDLE`` and ``python -m verify`` alike."""
    vendor, buyer, _ckpt = train_a_buyer(tmp_path)
    bad = tmp_path / "bh.tar.zst"
    bad.write_bytes(vendor.bundle.read_bytes()[:cut])
    policy = buyer.home / "policy.toml"
    lines = [refused(buyer, "import", bad, "--key", "approver"),
             refused(buyer, "verify", bad, "--policy", policy)]
    assert verify_main([str(bad), "--policy", str(policy)]) == 1
    lines += capsys.readouterr().err.splitlines()
    for line in lines:
        assert "not a bundle" not in line and "corrupt" not in line, line
        assert f"bundle bh.tar.zst: cut short: {cut} byte(s)" in line, line
        assert "get it again from its sender" in line, line
