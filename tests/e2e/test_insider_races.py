"""An insider during a command (rev14): a member of a shared ledger's group, who can write the
ledger's directory (not this user's state directory, not the passphrases), acts while another
user's command runs, between its check and its use. Each race is played with rev13's `Paused`
(tests/e2e/test_races.py): the command stops in front of a named library call, the insider
acts, the command goes on. The findings: docs/SECURITY.md, "Review of 2026-12-03, eighth round
(rev14)".
"""

from __future__ import annotations

import sys
import time
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


@pytest.mark.slow
def test_removing_the_log_lock_during_an_append_lets_no_second_writer_in(
    alice_home: Path, tmp_path: Path
) -> None:
    """A group member removes ``log/.state/lock`` while alice's ``record`` holds it (stopped
    under the lock, before it appends); bob's ``record`` then opens a new lock file and takes
    it at once. Two writers appending at the same index: one's entry (and the checkpoint the
    log key signed for it) must not be lost or forked. Before the fix both said `OK: …
    recorded at log index 2` (exit 0), one entry was lost and `log verify` failed
    (`log/.state/history: sizes are not strictly increasing`): the log key had signed two
    trees of size 3. Now the writer that held the removed lock appends nothing and says why."""
    from test_races import log_size, rollouts

    home = alice_home
    _share_through_group(home)
    size = log_size(home)
    a = rollouts(tmp_path / "a.parquet", 1)
    b = rollouts(tmp_path / "b.parquet", 2)
    worker = Paused(tmp_path / "gate", "trajledger.ledger.log.Log._commit",
                    "--ledger", home, "record", a, "--env", "cart@1", "--policy", "p0",
                    "--key", "alice", "--name", "a1")  # fmt: skip
    (home / "log" / ".state" / "lock").unlink()
    second = cli(home, "record", b, "--env", "cart@1", "--policy", "p0", "--key", "alice",
                 "--name", "b1")
    first = worker.resume()
    assert second[0] == 0, second
    code, out, err = first
    assert code == 3 and "Traceback" not in err, first
    assert err.strip().splitlines()[-1].endswith(
        "/log/.state/lock: the log's lock file was removed or replaced while this command held "
        "it, so another command may be appending; nothing was appended: find who writes this "
        "ledger's files, then run the command again"), err
    code, out, err = cli(home, "log", "verify")
    assert code == 0, (first, second, out + err)
    assert log_size(home) == size + 1
    code, out, err = cli(home, "record", a, "--env", "cart@1", "--policy", "p0", "--key",
                         "alice", "--name", "a1")
    assert code == 0, err
    assert log_size(home) == size + 2


COMMAND = r"""
import os, pathlib, sys, time
gate = pathlib.Path(sys.argv[1])
def wait(name):
    deadline = time.monotonic() + 60
    while not (gate / name).exists() and time.monotonic() < deadline:
        time.sleep(0.005)
data = sorted(pathlib.Path(os.environ["TRAJLEDGER_DATA_DIR"]).glob("batches/*/steps.parquet"))[0]
(gate / "started").write_text(str(data))
wait("swapped")
pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"], "w.bin").write_bytes(data.read_bytes())
(gate / "read").touch()
wait("restored")
"""


@pytest.mark.slow
def test_a_group_member_cannot_change_the_data_a_command_trains_on_through_a_hard_link(
    chat_home: Path, tmp_path: Path
) -> None:
    """In a shared ledger, an object another member stored is their file: they may write it
    whenever they like. The run's data directory hard-linked the store's object, hashed the
    link, and the command then read it: the owner rewrites it in place while the command reads
    and puts the verified bytes back before the check after the run. Before the fix the
    checkpoint (exit 0) was trained on the insider's bytes, and every check passed. Now a
    link is kept only to an object this user owns that no one else may write."""
    import threading

    home = chat_home
    _share_through_group(home)
    for obj in (home / "objects" / "sha256").rglob("*"):
        if obj.is_file() and not obj.name.startswith("."):
            obj.chmod(0o666)  # what the insider, their owner, may do to the objects they stored
    gate = tmp_path / "gate"
    gate.mkdir()

    def insider() -> None:
        deadline = time.monotonic() + 60
        while not (gate / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        seen = Path((gate / "started").read_text()).read_bytes()
        owned = [p for p in (home / "objects" / "sha256").rglob("*")
                 if p.is_file() and p.read_bytes() == seen]
        for p in owned:
            p.write_bytes(FORGED)  # in place: the same inode
        (gate / "swapped").touch()
        while not (gate / "read").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        for p in owned:
            p.write_bytes(seen)
        (gate / "restored").touch()

    actor = threading.Thread(target=insider)
    actor.start()
    code, out, err = cli(home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
                         "sft", "--version", "1", "--", sys.executable, "-c", COMMAND, gate)
    actor.join(60)
    assert code == 0, (out, err)
    assert FORGED not in _stored(home)
