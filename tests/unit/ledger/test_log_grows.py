"""The log only grows: tamper rules on open, the external floor, the publication hook.

Each attack is one test: change the files as an attacker with write access to the log directory
(and no log key) would, then expect `TamperError` naming the file, with every byte of the log as
it was found, for a reader and for a writer alike.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import testkit

from trajledger.ledger.encode import checkpoint_text, format_signature_line
from trajledger.ledger.errors import LogError, TamperError
from trajledger.ledger.keys import Signer
from trajledger.ledger.log import EntrySpec, Log, format_tree_state
from trajledger.verify.checkpoint import Checkpoint
from trajledger.verify.note import ALG_ED25519, key_hash

ORIGIN = "example.org/grows"
SIGNER = Signer.generate("log")  # TEST ONLY
KEYID = Signer.generate("producer").keyid  # TEST ONLY


def spec(i: int) -> EntrySpec:
    return testkit.entry_spec(i, KEYID)


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture
def log(tmp_path: Path) -> Log:
    log = Log.create(tmp_path / "log", ORIGIN, SIGNER)
    log.append([spec(i) for i in range(20)])
    return log


def refused(directory: Path, file: str, match: str) -> None:
    """A reader and a writer both refuse, naming ``file``; nothing changes."""
    before = snapshot(directory)
    with pytest.raises(TamperError, match=match) as info:
        Log.open(directory)
    assert info.value.path == directory / file
    assert str(info.value).startswith(f"{directory / file}: ")
    with pytest.raises(TamperError, match=match):
        Log.open(directory, SIGNER).append([spec(100)])
    assert snapshot(directory) == before


def test_tree_state_rolled_back_is_tampering(log: Log) -> None:
    old = (log.directory / ".state/treeState").read_bytes()
    log.append([spec(20)])  # a revocation, say, at index 20
    (log.directory / ".state/treeState").write_bytes(old)
    refused(log.directory, ".state/treeState", "size 20 is behind the signed checkpoint's 21")


def test_tree_state_with_another_root_at_the_signed_size(log: Log) -> None:
    (log.directory / ".state/treeState").write_bytes(format_tree_state(20, b"\x01" * 32))
    refused(log.directory, ".state/treeState", "root at size 20 is AQEB")


def test_missing_checkpoint(log: Log) -> None:
    (log.directory / "checkpoint").unlink()
    refused(log.directory, "checkpoint", "missing: the signed checkpoint is gone")


def test_truncated_checkpoint(log: Log) -> None:
    cp = log.directory / "checkpoint"
    cp.write_bytes(cp.read_bytes()[:40])
    refused(log.directory, "checkpoint", "not a checkpoint signed by the log key")


def test_foreign_checkpoint(log: Log) -> None:
    """Same origin, size and root, signed by a key that is not the log's."""
    other = Signer.generate("impostor")
    cp = log.checkpoint()
    text = checkpoint_text(Checkpoint(ORIGIN, cp.size, cp.root))
    raw = other.public.raw_ed25519()
    line = format_signature_line(ORIGIN, key_hash(ORIGIN, ALG_ED25519, raw), other.sign(text))
    (log.directory / "checkpoint").write_bytes(text + b"\n" + line)
    refused(log.directory, "checkpoint", "not a checkpoint signed by the log key")


def test_missing_tile_and_altered_bundle(log: Log) -> None:
    d = log.directory
    saved = (d / "tile/0/000.p/20").read_bytes()
    (d / "tile/0/000.p/20").unlink()
    refused(d, "tile/0/000.p/20", "missing, but the committed tree of size 20 needs it")
    (d / "tile/0/000.p/20").write_bytes(saved)
    bundle = d / "tile/entries/000.p/20"
    data = bytearray(bundle.read_bytes())
    data[-3] ^= 1
    bundle.write_bytes(bytes(data))
    refused(d, "tile/entries/000.p/20", "its entries do not hash to the leaves")


def test_a_crashed_creation_is_published_by_the_next_writer(tmp_path: Path) -> None:
    log = Log.create(tmp_path / "log", ORIGIN, SIGNER)
    (log.directory / "checkpoint").unlink()  # as if the creation died before its publication
    reader = Log.open(log.directory)
    assert reader.size == 0
    with pytest.raises(LogError, match="no checkpoint published yet"):
        reader.checkpoint()
    assert not (log.directory / "checkpoint").exists()
    writer = Log.open(log.directory, SIGNER)
    assert writer.append([spec(0)]) == [0]
    assert reader.checkpoint().size == 1


def test_a_creation_that_stopped_before_its_tree_state(tmp_path: Path) -> None:
    log = Log.create(tmp_path / "log", ORIGIN, SIGNER)
    (log.directory / "checkpoint").unlink()
    (log.directory / ".state/treeState").unlink()
    assert Log.open(log.directory).size == 0
    assert not (log.directory / ".state/treeState").exists()
    assert Log.open(log.directory, SIGNER).append([spec(0)]) == [0]
    assert Log.open(log.directory).checkpoint().size == 1


def test_a_missing_checkpoint_of_a_log_with_entries_is_never_republished(log: Log) -> None:
    """Even with treeState set back to 0: the tiles and history show entries were committed."""
    (log.directory / "checkpoint").unlink()
    (log.directory / ".state/treeState").write_bytes(
        format_tree_state(0, hashlib.sha256().digest())
    )
    refused(log.directory, "checkpoint", "missing: the signed checkpoint is gone")


def test_floor_rollback_and_fork(log: Log, tmp_path: Path) -> None:
    published: list[bytes] = []
    writer = Log.open(log.directory, SIGNER, on_publish=published.append)
    old_copy = tmp_path / "old"
    shutil.copytree(log.directory, old_copy)
    assert writer.append([spec(20), spec(21)]) == [20, 21]
    assert published == [(log.directory / "checkpoint").read_bytes()]
    floor = published[-1]
    # The same tree, and a consistent extension of it, are fine.
    assert Log.open(log.directory, floor=floor).size == 22
    writer.append([spec(22)])
    assert Log.open(log.directory, floor=floor).size == 23
    # Rollback: the whole directory replaced by an older copy (self-consistent).
    shutil.rmtree(log.directory)
    shutil.copytree(old_copy, log.directory)
    rollback = r"checkpoint: rollback: the signed checkpoint has size 20, but size 22"
    with pytest.raises(TamperError, match=rollback):
        Log.open(log.directory, floor=floor)
    # Fork: the old copy grows another history past the floor's size.
    other = Log.open(log.directory, SIGNER)
    other.append([spec(30), spec(31), spec(32)])
    before = snapshot(log.directory)
    fork = r"checkpoint: fork: the signed checkpoint of size 23 \(root \S+\) does not extend "
    with pytest.raises(TamperError, match=fork):
        Log.open(log.directory, SIGNER, floor=floor).append([spec(40)])
    with pytest.raises(TamperError, match=r"checkpoint: fork: the signed checkpoint of size 23"):
        Log.open(log.directory, floor=floor)
    assert snapshot(log.directory) == before


def test_floor_at_the_same_size_with_another_root(log: Log, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(log.directory, copy)
    log.append([spec(20)])
    floor = log.checkpoint_bytes()
    Log.open(copy, SIGNER).append([spec(99)])
    fork = r"fork: the signed checkpoint at size 21 has root \S+, but root \S+ was seen before at"
    with pytest.raises(TamperError, match=fork):
        Log.open(copy, floor=floor)


def test_floor_signed_by_another_key_means_the_key_was_replaced(log: Log, tmp_path: Path) -> None:
    stranger = Log.create(tmp_path / "stranger", ORIGIN, Signer.generate("stranger"))
    with pytest.raises(TamperError, match="not signed by this key") as info:
        Log.open(log.directory, floor=stranger.checkpoint_bytes())
    assert info.value.path == log.directory / "vkey"


def test_a_trusted_vkey_other_than_the_logs_file(log: Log) -> None:
    stranger = Log.create(log.directory.parent / "s", ORIGIN, Signer.generate("s"))
    with pytest.raises(TamperError, match=r"vkey: is '.*', want '.*' \(the trusted log key\)"):
        Log.open(log.directory, vkey=stranger.vkey)
    assert Log.open(log.directory, vkey=log.vkey).size == 20


def test_a_reader_sees_a_rollback_after_open(log: Log) -> None:
    """The floor a reader holds in memory is the largest checkpoint it verified."""
    reader = Log.open(log.directory)
    assert reader.size == 20
    state = (log.directory / ".state/treeState").read_bytes()
    cp = (log.directory / "checkpoint").read_bytes()
    log.append([spec(20)])
    assert reader.size == 21
    (log.directory / ".state/treeState").write_bytes(state)
    (log.directory / "checkpoint").write_bytes(cp)
    with pytest.raises(TamperError, match="rollback: the signed checkpoint has size 20"):
        reader.size  # noqa: B018 - the property reads the state


def test_readers_never_write(log: Log, tmp_path: Path) -> None:
    """Open, read, prove and look up on a log with every kind of leftover: not a byte changes."""
    d = log.directory
    log.append([spec(i) for i in range(20, 300)])
    (d / "tile/entries/001.p/99").write_bytes(b"junk past the committed size")
    (d / ".state/.tmp-treeState").write_bytes(b"half")
    (d / ".state/inflight").touch()
    (d / ".state/history").write_bytes((d / ".state/history").read_bytes() + b"\x00\x01")
    before = snapshot(d)
    reader = Log.open(d, cache_dir=tmp_path / "cache")
    assert reader.size == 300
    assert reader.find_envelope(spec(250).envelope) == 250
    assert reader.find_subject(spec(7).subject) == [7]
    reader.tlog_proof(299)
    reader.consistency_proof(10)
    assert len(reader.entries(0, 300)) == 300
    Log.open(d, SIGNER)  # a writer that has not written yet
    assert snapshot(d) == before
    # The next write recovers forward: leftovers past the committed size go.
    writer = Log.open(d, SIGNER)
    assert writer.append([spec(5)]) == [5]
    assert not (d / "tile/entries/001.p/99").exists()
    assert not (d / ".state/.tmp-treeState").exists() and not (d / ".state/inflight").exists()
    assert writer.verify().ok and writer.verify().warnings == []
