"""An insider during a command (rev14): a member of a shared ledger's group, who can write the
ledger's directory (not this user's state directory, not the passphrases), acts while another
user's command runs, between its check and its use. Each race is played with rev13's `Paused`
(tests/e2e/test_races.py): the command stops in front of a named library call, the insider
acts, the command goes on. The findings: docs/SECURITY.md, "Review of 2026-12-03, eighth round
(rev14)".
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_races import Paused, cli

FORGED = b'{"forged-by":"the insider"}'


def _share_through_group(home: Path) -> None:
    """The owner declares the ledger shared through its group, and accepts that setting."""
    toml = home / "ledger.toml"
    toml.write_text(toml.read_text() + "group_writable = true\n")
    code, _out, err = cli(home, "trust", "--settings")
    assert code == 0, err


def _swap_every_workspace(tmp: Path) -> list[str]:
    """What a group member can do in the ledger's ``tmp/`` (group-writable, not sticky):
    rename each directory another user's command made there, and put one of their own in its
    place holding the same file names with the insider's bytes. Returns the names swapped."""
    swapped = []
    for d in sorted(tmp.iterdir()) if tmp.is_dir() else []:
        if not d.is_dir():
            continue
        aside = d.with_name(d.name + ".aside")
        d.rename(aside)
        d.mkdir()
        for f in aside.rglob("*"):
            if f.is_file():
                (d / f.relative_to(aside)).parent.mkdir(parents=True, exist_ok=True)
                (d / f.relative_to(aside)).write_bytes(FORGED)
        swapped.append(d.name)
    return swapped


def _stored(home: Path) -> list[bytes]:
    return [p.read_bytes() for p in (home / "objects").rglob("*") if p.is_file()]


@pytest.mark.slow
def test_a_group_member_cannot_swap_what_a_record_signs_in_the_ledgers_tmp(
    alice_home: Path, tmp_path: Path
) -> None:
    """``env register`` writes its descriptor in a temporary directory, then hashes, stores and
    signs it. A group member who renames that directory and puts theirs in its place, between
    the write and the hash, must not get their bytes signed by alice's key. Before the fix the
    temporary directory was in ``<ledger>/tmp`` and the environment recorded (exit 0) was the
    insider's file, signed by alice, verifying forever."""
    home = alice_home
    _share_through_group(home)
    worker = Paused(tmp_path / "gate", "trajledger.ledger.artifacts.record_files",
                    "--ledger", home, "env", "register", "cart2", "--version", "1",
                    "--gym-id", "CartPole-v1", "--key", "alice")  # fmt: skip
    _swap_every_workspace(home / "tmp")
    code, out, err = worker.resume()
    assert code == 0, (code, out, err)
    assert FORGED not in _stored(home)
