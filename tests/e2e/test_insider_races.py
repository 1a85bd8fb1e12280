"""An insider during a command (rev14): a member of a shared ledger's group, who can write the
ledger's directory (not this user's state directory, not the passphrases), acts while another
user's command runs, between its check and its use. Each race is played with rev13's `Paused`
(tests/e2e/test_races.py): the command stops in front of a named library call, the insider
acts, the command goes on. The findings: docs/SECURITY.md, "Review of 2026-12-03, eighth round
(rev14)".
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_races import Paused, cli, log_size

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


# -- the other holders of the log's lock (fix12) ---------------------------------------------------

LOCK_REMOVED = ("/log/.state/lock: the log's lock file was removed or replaced while this "
                "command held it, so another command may be appending; ")
AGAIN = ": find who writes this ledger's files, then run the command again"


def _remove_the_lock_once_taken(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """The insider unlinks ``log/.state/lock`` each time the command has just taken it (the
    moment rev14 finding 2 played with `Paused`, here in this process: the command runs in
    `cli`): a second writer could now take a new lock file at once."""
    import contextlib

    from trajledger.ledger.log import Log

    taken = Log._locked

    @contextlib.contextmanager
    def locked(self: Log) -> Iterator[None]:
        with taken(self):
            (home / "log" / ".state" / "lock").unlink(missing_ok=True)
            yield

    monkeypatch.setattr(Log, "_locked", locked)


def _refused(result: tuple[int, str, str], nothing: str) -> None:
    code, _out, err = result
    assert code == 3 and "Traceback" not in err, result
    assert err.strip().splitlines()[-1].endswith(LOCK_REMOVED + nothing + AGAIN), err


def _old_orphan(home: Path) -> Path:
    from trajledger import Ledger

    store = Ledger.open(home).store
    path = store.path_of(store.put_bytes(b"an orphan gc may remove"))
    two_days_ago = time.time() - 2 * 86400
    os.utime(path, (two_days_ago, two_days_ago))
    return path


@pytest.mark.slow
def test_gc_removes_nothing_once_the_log_lock_is_removed(alice_home: Path) -> None:
    """``gc --yes`` holds the log's lock (`Log.exclusive`) so that no writer names an orphan
    while it removes it. A group member who removes the lock file lets a writer in at once:
    gc must remove nothing and say why. Before the fix it removed the orphan (exit 0)."""
    home = alice_home
    _share_through_group(home)
    orphan = _old_orphan(home)
    with pytest.MonkeyPatch.context() as insider:
        _remove_the_lock_once_taken(insider, home)
        _refused(cli(home, "gc", "--yes"), "nothing was removed")
    assert orphan.exists()
    code, _out, err = cli(home, "gc", "--yes")
    assert code == 0 and not orphan.exists(), err


@pytest.mark.slow
@pytest.mark.parametrize("writes_before", [0, 1, 2])
def test_rotate_key_does_not_rotate_once_the_log_lock_is_removed(
    alice_home: Path, writes_before: int
) -> None:
    """``log rotate-key`` writes the handover, then the checkpoint, then ``vkey``, under the
    lock. The insider removes the lock file when it is taken (0), or after the first or second
    of those writes: the command must stop before its next write, the key not rotated (the
    ``vkey`` file unchanged: an interrupted rotation, as after a crash there); run again, it
    finishes the rotation and the log verifies. Before the fix it
    rotated (exit 0) with another writer free to append under the old key."""
    from trajledger.ledger.log import writer

    home = alice_home
    _share_through_group(home)
    vkey = (home / "log" / "vkey").read_bytes()
    write, done = writer.write_file_atomic, []

    def write_then_insider(path: Path, data: bytes) -> None:
        write(path, data)
        done.append(path)
        if len(done) == writes_before:
            (home / "log" / ".state" / "lock").unlink()

    with pytest.MonkeyPatch.context() as insider:
        if writes_before == 0:
            _remove_the_lock_once_taken(insider, home)
        insider.setattr(writer, "write_file_atomic", write_then_insider)  # (counts the writes)
        _refused(cli(home, "log", "rotate-key"), "the log's key was not rotated")
    assert (home / "log" / "vkey").read_bytes() == vkey
    assert len(done) == writes_before
    code, _out, err = cli(home, "log", "rotate-key")
    assert code == 0, err
    assert (home / "log" / "vkey").read_bytes() != vkey
    code, out, err = cli(home, "log", "verify")
    assert code == 0, out + err


@pytest.mark.slow
def test_add_cosignature_writes_nothing_once_the_log_lock_is_removed(
    alice_home: Path, tmp_path: Path
) -> None:
    """``log add-cosignature`` replaces the checkpoint under the lock; with the lock file
    removed, another writer may be publishing a new one: it must write nothing. Before the
    fix it wrote the checkpoint (exit 0)."""
    from trajledger.ledger.keys import Signer
    from trajledger.ledger.log.witness import cosign_note
    from trajledger.ledger.monitor import witness_vkey

    home = alice_home
    _share_through_group(home)
    witness = Signer.generate("witness")
    checkpoint = home / "log" / "checkpoint"
    before = checkpoint.read_bytes()
    cosigned = tmp_path / "cosigned"
    cosigned.write_bytes(cosign_note(before, witness))
    args = ("log", "add-cosignature", cosigned, "--witness", witness_vkey(witness))
    with pytest.MonkeyPatch.context() as insider:
        _remove_the_lock_once_taken(insider, home)
        _refused(cli(home, *args), "the cosignature was not added")
    assert checkpoint.read_bytes() == before
    code, _out, err = cli(home, *args)
    assert code == 0, err
    assert checkpoint.read_bytes() == cosigned.read_bytes()


@pytest.mark.slow
def test_fsck_and_gc_list_the_leftovers_of_a_shared_ledgers_private_scratch(
    alice_home: Path,
) -> None:
    """A shared ledger's commands write in ``<state>/tmp`` (finding 1); what a killed one left
    there is a leftover `fsck` lists and ``gc --yes`` removes, as in ``<ledger>/tmp``. Before
    the fix only ``<ledger>/tmp`` was listed (the log's writer swept both)."""
    import json

    from trajledger import Ledger
    from trajledger.ledger.fs import STALE_AFTER

    home = alice_home
    _share_through_group(home)
    scratch = Ledger.open(home).scratch
    assert not scratch.is_relative_to(home)
    dead = scratch / "tmpdead123"
    dead.mkdir(parents=True)
    (dead / "steps.parquet").write_bytes(b"half")
    past = time.time() - STALE_AFTER - 60
    for p in (dead / "steps.parquet", dead):
        os.utime(p, (past, past))
    code, out, err = cli(home, "fsck", "--json")
    assert {"path": str(dead), "stale": True} in json.loads(out)["leftovers"], (code, out, err)
    code, out, err = cli(home, "gc", "--json")
    assert code == 0 and json.loads(out)["leftovers"] == [str(dead)], (out, err)
    code, out, err = cli(home, "gc", "--yes")
    assert code == 0 and not dead.exists(), (out, err)


# -- the other holders of the log's lock that write (fix13) ---------------------------------------


def _remove_the_lock_after(monkeypatch: pytest.MonkeyPatch, home: Path, module: object,
                           name: str) -> None:
    """The insider unlinks ``log/.state/lock`` once the command's call of ``module.name``
    returns (an append, say: its own checks passed), while the command still holds the lock
    for the writes that follow."""
    original = getattr(module, name)

    def then_insider(*a: object, **kw: object) -> object:
        result = original(*a, **kw)
        (home / "log" / ".state" / "lock").unlink(missing_ok=True)
        return result

    monkeypatch.setattr(module, name, then_insider)


def _blobs_of(home: Path, digest: str) -> list[Path]:
    from trajledger import Ledger
    from trajledger.ledger.status import erasable_blobs

    ledger = Ledger.open(home)
    return [ledger.store.path_of(b) for b in sorted(erasable_blobs(ledger, digest))]


@pytest.mark.slow
def test_erase_deletes_nothing_once_the_log_lock_is_removed(
    alice_home: Path, tmp_path: Path
) -> None:
    """``erase`` decides what to delete, records the erasure and deletes, all under the log's
    lock (`Log.exclusive`), so that no writer names a blob while it goes. A group member who
    removes the lock file once the erasure is recorded lets a writer in at once: the erase
    must delete nothing more and say what it did. Before the fix (fix13) it deleted every
    blob (exit 0). Run again, it deletes them (an erasure not finished)."""
    from test_races import log_size, rollouts

    from trajledger.ledger import status

    home = alice_home
    _share_through_group(home)
    code, out, err = cli(home, "record", rollouts(tmp_path / "b.parquet", 1), "--env",
                         "cart@1", "--policy", "p0", "--key", "alice", "--name", "b1")
    assert code == 0, err
    batch = out.strip().splitlines()[-1]
    blobs = _blobs_of(home, batch)
    assert blobs and all(b.exists() for b in blobs)
    with pytest.MonkeyPatch.context() as insider:
        _remove_the_lock_after(insider, home, status, "record_statement")
        code, out, err = cli(home, "erase", batch, "--reason", "consent", "--key", "alice")
    index = log_size(home) - 1
    _refused((code, out, err), f"the erasure is recorded (log index {index}) and 0 of its "
             f"{len(blobs)} blob(s) are deleted, nothing more")
    assert all(b.exists() for b in blobs)
    code, out, err = cli(home, "erase", batch, "--reason", "consent", "--key", "alice")
    assert code == 0 and not any(b.exists() for b in blobs), err


def _vendor_and_buyer(root: Path) -> tuple[Any, Any]:
    """tests/e2e/test_updates.py's vendor (two batches in dataset bh@1, exported) and a
    buyer trusting it."""
    from test_updates import Buyer, vendor_copy

    vendor = vendor_copy(root, "vendor", "vendor.example/log")
    return vendor, Buyer(root, [vendor])


def _refused_run(result: Any, nothing: str) -> None:
    assert result.exit_code == 3, result.output
    assert result.stderr.strip().splitlines()[-1].endswith(LOCK_REMOVED + nothing + AGAIN), (
        result.stderr)


def _origin(buyer: Any, vkey: str) -> tuple[int | None, int | None]:
    """The buyer's floor (size) and size applied of the log ``vkey``."""
    from testkit import user_state

    from trajledger.ledger.trust_state import TrustState

    with user_state(buyer.state):
        origin = TrustState.open(vkey)
        try:
            floor = origin.floor_checkpoint()
            return (floor.size if floor is not None else None), origin.applied()
        finally:
            origin.close()


def _objects(home: Path) -> set[str]:
    return {p.name for p in (home / "objects" / "sha256").rglob("*") if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("when", ["taken", "floor advanced"])
def test_an_import_moves_nothing_in_once_the_log_lock_is_removed(
    tmp_path: Path, when: str
) -> None:
    """``import`` holds the log's lock from its check against what was accepted from the log
    before to its last append (rev13 finding 3): it advances the log's floor, moves the staged
    objects into the store, then appends. A group member who removes the lock file when it is
    taken (or once the floor is advanced) lets another import (of a fork, say) in: nothing
    (more) must be written. Before the fix (fix13) the floor advanced and every object was
    moved in (then the first append refused, exit 3, leaving them orphans)."""
    from trajledger.ledger.trust_state import TrustState

    vendor, buyer = _vendor_and_buyer(tmp_path)
    before, vkey = _objects(buyer.home), vendor.vkey()
    with pytest.MonkeyPatch.context() as insider:
        if when == "taken":
            _remove_the_lock_once_taken(insider, buyer.home)
        else:
            _remove_the_lock_after(insider, buyer.home, TrustState, "advance_floor")
        _refused_run(buyer.run("import", vendor.bundle, "--key", "approver", code=3),
                     "nothing was imported")
    assert _objects(buyer.home) == before
    assert _origin(buyer, vkey) == ((None if when == "taken" else vendor.size()), None)
    buyer.run("import", vendor.bundle, "--key", "approver")
    assert _origin(buyer, vkey) == (vendor.size(), vendor.size())


@pytest.mark.slow
def test_an_import_notes_nothing_after_its_record_once_the_log_lock_is_removed(
    tmp_path: Path,
) -> None:
    """After the import record, still under the lock, the import notes the size applied of
    the vendor's log (the floor's mark) and judges what it brings. With the lock file removed
    once the record is appended, it writes nothing more and says so. Before the fix (fix13)
    it noted the size applied (exit 0). Run again, it notes it. (The records and the import
    record are one append since left28: the lock goes once it returns.)"""
    from trajledger.ledger.log.writer import Log

    vendor, buyer = _vendor_and_buyer(tmp_path)
    vkey = vendor.vkey()
    with pytest.MonkeyPatch.context() as insider:
        _remove_the_lock_after(insider, buyer.home, Log, "append")
        r = buyer.run("import", vendor.bundle, "--key", "approver", code=3)
    _refused_run(r, f"the import is recorded (log index {buyer.size() - 1}), nothing after it "
                 "was done (the size applied noted; key compromises, revocations and erasures "
                 "judged here)")
    assert _origin(buyer, vkey) == (vendor.size(), None)
    buyer.run("import", vendor.bundle, "--key", "approver")
    assert _origin(buyer, vkey) == (vendor.size(), vendor.size())


@pytest.mark.slow
def test_an_import_deletes_no_erased_blob_once_the_log_lock_is_removed(tmp_path: Path) -> None:
    """An update that brings the vendor's erasure of a batch this ledger holds deletes this
    ledger's copy of its blobs, under the log's lock (as ``erase`` does: no writer names a blob
    while it goes). With the lock file removed once the import is recorded, it deletes nothing
    and says so. Before the fix (fix13) it deleted them (exit 0)."""
    from testkit import user_state

    from trajledger.ledger import updates

    vendor, buyer = _vendor_and_buyer(tmp_path)
    buyer.run("import", vendor.bundle, "--key", "approver")
    applied = vendor.size()
    vendor.run("erase", vendor.batches[1], "--reason", "consent", "--key", "vendor")
    update = tmp_path / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    with user_state(buyer.state):
        listed = _blobs_of(buyer.home, vendor.batches[1])  # (an erasure counts missing ones)
    blobs = [b for b in listed if b.exists()]
    assert blobs
    with pytest.MonkeyPatch.context() as insider:
        _remove_the_lock_after(insider, buyer.home, updates, "_compromises")
        r = buyer.run("import", update, "--key", "approver", code=3)
    label = f"rollout-batch vendor-2 ({vendor.batches[1][:19]}…)"
    _refused_run(r, f"the import is recorded (log index {buyer.size() - 1}) and 0 of the "
                 f"{len(listed)} blob(s) its erasure of {label} deletes here are deleted, "
                 "nothing more")
    assert all(b.exists() for b in blobs)


def _swap_for_a_link(directory: Path, outside: Path) -> dict[str, bytes]:
    """What a group member can do to a directory of the ledger (its parent group-writable):
    copy it to a directory of their own (readers see the same files), move it aside and put a
    symbolic link to the copy in its place. Returns the copy's files."""
    if directory.is_dir():
        shutil.copytree(directory, outside)
        directory.rename(directory.with_name(directory.name + ".aside"))
    else:
        outside.mkdir(parents=True)
        directory.parent.mkdir(parents=True, exist_ok=True)
    directory.symlink_to(outside, target_is_directory=True)
    return _files(outside)


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() if p.is_file() else b"/"
            for p in directory.rglob("*")}


def _refused_link(result: tuple[int, str, str], link: Path) -> None:
    code, out, err = result
    assert code == 3, (code, out, err)
    assert f"{link}: is a symbolic link (to " in err and "'trajledger fsck'" in err, err
    assert "Traceback" not in err


def _fsck_names(home: Path, link: Path) -> None:
    """What the refusal says to run names the link (a failure: exit 1)."""
    code, out, err = cli(home, "fsck")
    assert code == 1 and f"FAIL: {link}: a symbolic link where trajledger keeps a directory " \
        "of its own" in err, (code, out, err)


@pytest.mark.parametrize("level", ["sha256", "fan", "leaf"])
def test_a_fan_out_directory_swapped_for_a_link_is_not_written_through(
    alice_home: Path, tmp_path: Path, level: str
) -> None:
    """A group member replaces a directory of the store (``objects/sha256``, or a fan-out
    directory of the object ``attest`` is about to store) by a link to a directory of theirs.
    Before the fix the command followed it: the object (and its temp file) was written there,
    and ``attest`` said OK (exit 0). Now nothing is written outside and the command fails
    (exit 3), naming the link and ``trajledger fsck``."""
    home = alice_home
    _share_through_group(home)
    data = tmp_path / "weights.bin"
    data.write_bytes(b"the bytes alice attests\n")
    h = hashlib.sha256(data.read_bytes()).hexdigest()
    link = home / "objects" / {"sha256": "sha256", "fan": f"sha256/{h[:2]}",
                               "leaf": f"sha256/{h[:2]}/{h[2:4]}"}[level]
    outside = tmp_path / "insider"
    before = _swap_for_a_link(link, outside)
    size = log_size(home)
    _refused_link(cli(home, "attest", data, "--name", "w", "--key", "alice"), link)
    assert _files(outside) == before
    assert log_size(home) == size
    _fsck_names(home, link)


@pytest.mark.parametrize("rel", ["tile", "tile/0", "tile/entries"])
def test_a_tile_directory_swapped_for_a_link_is_not_written_through(
    alice_home: Path, tmp_path: Path, rel: str
) -> None:
    """The same in the log: a group member replaces ``log/tile`` (or a level's directory, or
    the entry bundles') by a link to a directory of theirs. Before the fix the append wrote its
    tile or bundle there (``000.p/N``) and said OK (exit 0); now nothing is written outside,
    nothing is appended, and the command fails (exit 3) naming the link."""
    home = alice_home
    _share_through_group(home)
    data = tmp_path / "weights.bin"
    data.write_bytes(b"the bytes alice attests\n")
    size = log_size(home)
    link = home / "log" / rel
    outside = tmp_path / "insider"
    before = _swap_for_a_link(link, outside)
    _refused_link(cli(home, "attest", data, "--name", "w", "--key", "alice"), link)
    assert _files(outside) == before
    assert log_size(home) == size
    _fsck_names(home, link)
