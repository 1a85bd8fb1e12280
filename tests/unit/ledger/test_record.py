"""Recording artifacts (ledger/record.py): files -> blobs -> manifest -> signed statement ->
envelope -> log entry; statements about a digest; bad input leaves the ledger unchanged."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from trajledger import Ledger
from trajledger.ledger.errors import KeyError_, LedgerError
from trajledger.ledger.keys import Signer
from trajledger.ledger.record import KIND_BY_PREDICATE, kind_for, record_files, record_statement
from trajledger.verify import predicates
from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import FormatError
from trajledger.verify.log_entry import KINDS, LogEntry
from trajledger.verify.manifest import Manifest
from trajledger.verify.statement import verify_statement
from trajledger.verify.tlog_proof import verify_tlog_proof
from trajledger.verify.tree import manifest_from_statement

TREE = {"steps.jsonl": '{"r": 1}\n', "meta/config.toml": "seed = 1\n", "weights.bin": 2048}


@pytest.fixture
def ledger(home: Path) -> Ledger:
    return Ledger.open(home)


@pytest.fixture
def alice(ledger: Ledger) -> Signer:
    return ledger.keys.create("alice", encrypt=False)


def snapshot(ledger: Ledger) -> tuple[int, set[str]]:
    return ledger.log.size, set(ledger.store.iter_digests())


def test_record_files_end_to_end(ledger: Ledger, alice: Signer, make_tree: Any) -> None:
    data = make_tree(TREE)
    rec = record_files(ledger, [data], alice, name="batch-7")
    assert rec.index == 0
    # Blobs, manifest and envelope are in the store.
    assert rec.manifest is not None
    for f in rec.manifest.files:
        assert ledger.store.get_verified(f.digest) == (data / f.path).read_bytes()
    manifest_bytes = ledger.store.get_verified(rec.digest)
    assert manifest_bytes == rec.manifest.canonical_bytes()
    env = Envelope.from_bytes(ledger.store.get_verified(rec.envelope_digest))
    vs = verify_statement(
        env, [alice.public], allowed_predicate_types={predicates.FILES}, subject_digest=rec.digest
    )
    assert [s.name for s in vs.statement.subjects] == ["batch-7"]
    assert manifest_from_statement(vs.statement) == rec.manifest
    assert [f.path for f in rec.manifest.files] == [
        "meta/config.toml",
        "steps.jsonl",
        "weights.bin",
    ]
    # The log entry names both digests and the signer; it is provable offline.
    entry = LogEntry.from_bytes(ledger.log.entry(rec.index))
    assert (entry.kind, entry.subject, entry.envelope, entry.signers) == (
        "files",
        rec.digest,
        rec.envelope_digest,
        (alice.keyid,),
    )
    verify_tlog_proof(ledger.log.tlog_proof(0), ledger.log.entry(0), ledger.log.verifier)


def test_record_files_is_idempotent(ledger: Ledger, alice: Signer, make_tree: Any) -> None:
    data = make_tree(TREE)
    first = record_files(ledger, [data], alice)
    again = record_files(ledger, [data], alice)  # Ed25519 signatures are deterministic
    assert again == dataclasses.replace(first, new=False)
    assert first.new and first.where == "recorded at log index 0"
    assert again.where == "already recorded at log index 0"
    assert ledger.log.size == 1


def test_record_files_cosigned_with_extra_predicate(
    ledger: Ledger, alice: Signer, make_tree: Any
) -> None:
    bob = ledger.keys.create("bob", "ecdsa-p256", encrypt=False)
    files = {"env/rules.txt": make_tree({"r.txt": "no cheating\n"}) / "r.txt"}
    rec = record_files(
        ledger,
        files,
        [alice, bob],
        predicates.ENVIRONMENT,
        {"name": "gridworld", "version": "1.2.0", "score": 0.5},
        name="gridworld",
    )
    entry = LogEntry.from_bytes(ledger.log.entry(rec.index))
    assert entry.kind == "environment"
    assert entry.signers == tuple(sorted([alice.keyid, bob.keyid]))
    env = Envelope.from_bytes(ledger.store.get(rec.envelope_digest))
    vs = verify_statement(
        env,
        [alice.public, bob.public],
        threshold=2,
        allowed_predicate_types={predicates.ENVIRONMENT},
        subject_digest=rec.digest,
    )
    assert vs.statement.predicate["version"] == "1.2.0"
    assert Manifest.from_json(vs.statement.predicate["manifest"]).files[0].path == "env/rules.txt"


def test_record_statement(ledger: Ledger, alice: Signer, make_tree: Any) -> None:
    rec = record_files(ledger, [make_tree(TREE)], alice)
    appr = record_statement(
        ledger, "batch", rec.digest, predicates.APPROVAL, {"purpose": "train"}, alice
    )
    assert (appr.digest, appr.index, appr.manifest) == (rec.digest, 1, None)
    assert ledger.log.find_subject(rec.digest) == [0, 1]
    entry = LogEntry.from_bytes(ledger.log.entry(1))
    assert entry.kind == "approval"
    vs = verify_statement(
        Envelope.from_bytes(ledger.store.get(appr.envelope_digest)),
        [alice.public],
        allowed_predicate_types={predicates.APPROVAL},
        subject_digest=rec.digest,
    )
    assert vs.statement.predicate == {"purpose": "train"}


def test_every_predicate_type_has_a_kind() -> None:
    assert set(KIND_BY_PREDICATE) == set(predicates.ALL)
    assert set(KIND_BY_PREDICATE.values()) == KINDS
    assert kind_for(predicates.SLSA_PROVENANCE_V1) == "checkpoint"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"predicate_type": "https://example.com/x"}, FormatError, "is not one trajledger records"),
        ({"kind": "nonsense"}, FormatError, "log entry kind 'nonsense' is unknown"),
        ({"predicate_extra": {"r": float("nan")}}, FormatError, "cannot be canonicalised"),
        ({"predicate_extra": {"n": 2**60}}, FormatError, "cannot be canonicalised"),
        ({"predicate_extra": {"manifest": {}}}, FormatError, "'manifest' is set by trajledger"),
        ({"paths": ["missing-dir"]}, LedgerError, "missing-dir: no such file or directory"),
        ({"signers": []}, ValueError, "recording needs at least one signer"),
    ],
)
def test_bad_input_leaves_the_ledger_unchanged(
    ledger: Ledger,
    alice: Signer,
    make_tree: Any,
    tmp_path: Path,
    kwargs: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    data = make_tree(TREE)
    record_files(ledger, [make_tree({"other.txt": "x"})], alice)
    before = snapshot(ledger)
    args: dict[str, Any] = {"paths_or_files": [data], "signers": alice}
    if "paths" in kwargs:
        args["paths_or_files"] = [tmp_path / kwargs.pop("paths")[0]]
    args.update(kwargs)
    with pytest.raises(error, match=message):
        record_files(ledger, **args)
    assert snapshot(ledger) == before


def test_bad_statement_input(ledger: Ledger, alice: Signer) -> None:
    before = snapshot(ledger)
    digest = "sha256:" + hashlib.sha256(b"x").hexdigest()
    with pytest.raises(FormatError, match="subject digest: 'sha256:XYZ'"):
        record_statement(ledger, "x", "sha256:XYZ", predicates.APPROVAL, {}, alice)
    with pytest.raises(FormatError, match="subject name is empty"):
        record_statement(ledger, "", digest, predicates.APPROVAL, {}, alice)
    with pytest.raises(FormatError, match="cannot be canonicalised"):
        record_statement(ledger, "x", digest, predicates.APPROVAL, {"x": float("inf")}, alice)
    # A reason given as bytes that are not UTF-8 (revoke --reason $'\xfd'): said once (out40;
    # was "predicate: cannot be canonicalised (RFC 8785): cannot be canonicalised (RFC 8785): …").
    with pytest.raises(FormatError, match=r"^predicate: cannot be canonicalised \(RFC 8785\): "
                       r"contains a lone surrogate, not valid Unicode$"):
        record_statement(ledger, "x", digest, predicates.REVOCATION, {"reason": "n\udcfdo"},
                         alice)
    assert snapshot(ledger) == before


def test_an_unloadable_log_key_stores_nothing(
    tmp_path: Path, make_tree: Any, monkeypatch: pytest.MonkeyPatch, passphrase: str
) -> None:
    ledger = Ledger.init(tmp_path / "enc", origin="test/enc")  # log key encrypted
    alice = ledger.keys.create("alice")  # the ledger's keys are encrypted: no plaintext key
    monkeypatch.delenv("TRAJLEDGER_PASSPHRASE")
    reopened = Ledger.open(tmp_path / "enc")
    with pytest.raises(KeyError_, match="key log: is encrypted; set TRAJLEDGER_PASSPHRASE"):
        record_files(reopened, [make_tree(TREE)], alice)
    assert snapshot(reopened) == (0, set())
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", passphrase)
    assert record_files(Ledger.open(tmp_path / "enc"), [make_tree(TREE)], alice).index == 0


def test_another_logs_record_of_a_digest_is_no_second_record_of_this_one(
    ledger: Ledger, alice: Signer, make_tree: Any, tmp_path: Path
) -> None:
    """Issue 18: one record per digest per origin. A vendor's record of the same files, logged
    here by an import (its import record lists the envelope), does not stop this ledger from
    recording them with its own metadata; the same record of this origin would."""
    from trajledger.ledger.errors import AlreadyRecordedError
    from trajledger.ledger.log import EntrySpec

    data = make_tree(TREE)
    vendor = Ledger.init(tmp_path / "vendor", origin="test/vendor")
    theirs = record_files(vendor, [data], vendor.keys.create("v", encrypt=False), name="theirs")
    entry = LogEntry.from_bytes(vendor.log.entry(theirs.index))
    ledger.store.put_bytes(vendor.store.get(theirs.envelope_digest))
    (logged,) = ledger.log.append(
        [EntrySpec(entry.kind, entry.subject, entry.envelope, entry.signers)], foreign=True)
    predicate = {
        "artifact": {"digest": theirs.digest, "kind": "files", "name": "theirs", "logIndex": 0},
        "log": {"origin": "test/vendor", "vkey": vendor.log.vkey,
                "checkpoint": vendor.log.checkpoint_bytes().decode()},
        "entries": [{"index": theirs.index, "entry": vendor.log.entry(theirs.index).decode(),
                     "inclusion": []}],
        "dataIncluded": True,
    }
    record_statement(ledger, "theirs", theirs.digest, predicates.IMPORT, predicate, alice,
                     kind="import")
    ours = record_files(ledger, [data], alice, name="ours")
    assert ours.digest == theirs.digest and ours.new and ours.index > logged
    with pytest.raises(AlreadyRecordedError, match=(
            rf"^files {ours.digest}: already recorded at log index {ours.index} with other "
            r"signed metadata \(name: 'ours' vs 'again'\)")):
        record_files(ledger, [data], alice, name="again")


# -- the copies' names: made durable in one pass before anything names them --------------------


def test_the_copies_names_are_made_durable_before_the_manifest_and_the_log_name_them(
    ledger: Ledger, alice: Signer, make_tree: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No directory fsync per object: every directory that gained an object's name is fsynced
    in one pass (`ObjectStore.sync_names`), after the last copy and before the manifest is
    stored or the entry appended."""
    from trajledger.ledger import store as store_module

    data = make_tree(TREE)
    events: list[str] = []
    synced: list[list[Path]] = []
    real_sync, real_put, real_append = (
        store_module.sync_paths, type(ledger.store).put_bytes, type(ledger.log).append)

    def sync_paths(paths: list[Path], *a: Any, **kw: Any) -> None:
        events.append("names")
        synced.append(list(paths))
        real_sync(paths, *a, **kw)

    def put_bytes(self: Any, b: bytes) -> str:
        events.append("put_bytes")
        return real_put(self, b)

    def append(self: Any, *a: Any, **kw: Any) -> Any:
        events.append("append")
        return real_append(self, *a, **kw)

    def fsync(fd: int) -> None:  # a directory's: the manifest's and the envelope's own
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            events.append("dir")
        real_fsync(fd)

    real_fsync = os.fsync
    monkeypatch.setattr(store_module, "sync_paths", sync_paths)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(type(ledger.store), "put_bytes", put_bytes)
    monkeypatch.setattr(type(ledger.log), "append", append)
    rec = record_files(ledger, [data], alice, name="batch-7")
    monkeypatch.undo()
    # one pass for the copies, before the manifest is stored (a later one is the manifest's or
    # the envelope's own new fan-out directories: att47 finding 2)
    assert events[0] == "names" and "append" in events
    assert events[:events.index("put_bytes")].count("names") == 1
    assert rec.manifest is not None
    leaves = {ledger.store.path_of(f.digest).parent for f in rec.manifest.files}
    # and the directories that gained a fan-out directory made for them (att47 finding 2)
    first = set(synced[0])
    assert leaves <= first <= leaves | {p.parents[i] for p in leaves for i in range(3)}, sorted(
        first - leaves)  # the fan-out levels, sha256, and the store that gained sha256
    assert len(synced[0]) == len(first)


def test_a_failing_flush_of_the_names_records_nothing(
    ledger: Ledger, alice: Signer, make_tree: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directories' fsync fails (EIO: the disk lost the names): the command fails as an
    operational error, nothing is logged, and no manifest names the copies."""
    import errno
    import os

    from trajledger.ledger import fs
    from trajledger.ledger.errors import StoreError

    data = make_tree(TREE)
    size, before = snapshot(ledger)
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        import stat

        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(fs.os, "fsync", fsync)
    with pytest.raises(StoreError, match=r"cannot make the stored objects' names durable: "
                                         r"Input/output error$"):
        record_files(ledger, [data], alice, name="batch-7")
    monkeypatch.undo()
    assert ledger.log.size == size
    # Only the copies themselves are in the store (orphans for gc): no manifest, no envelope.
    copies = {"sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()
              for p in data.rglob("*") if p.is_file()}
    assert set(ledger.store.iter_digests()) - before == copies


@pytest.mark.parametrize("change", ["rewritten", "truncated", "grown"])
def test_a_file_changed_while_it_is_copied_is_recorded_as_the_bytes_stored(
    ledger: Ledger, alice: Signer, make_tree: Any, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """att40 (issue 21 item 8): the copy hashes what it stores, in one pass, from one buffer.
    A file changed by someone else after its first MiB was copied (rewritten in place, cut
    short, or grown) is recorded with the digest and size of exactly the bytes the store holds
    under that digest (old first MiB, then whatever the file held when the rest was read),
    never with a digest of other bytes, and the record verifies."""
    from trajledger.ledger import store as store_module
    from trajledger.ledger.store_sink import DirectSink

    chunk = 1 << 20
    old = bytes(range(256)) * (3 * chunk // 256) + b"tail"
    data = make_tree({"model.bin": 1})
    src = data / "model.bin"
    src.write_bytes(old)
    new = {"rewritten": b"\xa5" * len(old), "truncated": b"\x5a" * (chunk + 10),
           "grown": b"\x3c" * (len(old) + chunk)}[change]
    calls: list[int] = []

    class Changing(DirectSink):
        def write(self, data: bytes | memoryview) -> None:
            super().write(data)
            calls.append(len(data))
            if len(calls) == 1:  # the first MiB is stored: the file changes under the reader
                with open(src, "r+b") as f:
                    f.write(new)
                    f.truncate(len(new))

    monkeypatch.setattr(store_module, "DirectSink", Changing)
    rec = record_files(ledger, [data], alice, name="changing")
    monkeypatch.undo()
    assert rec.manifest is not None
    (entry,) = rec.manifest.files
    want = old[:chunk] + new[chunk:]
    stored = ledger.store.path_of(entry.digest).read_bytes()
    assert stored == want and entry.size == len(want)
    assert entry.digest == "sha256:" + hashlib.sha256(stored).hexdigest()
    assert ledger.store.get_verified(entry.digest) == want
    assert manifest_from_statement(verify_statement(
        Envelope.from_bytes(ledger.store.get_verified(rec.envelope_digest)), [alice.public],
        allowed_predicate_types={predicates.FILES}, subject_digest=rec.digest,
    ).statement) == rec.manifest


@pytest.mark.parametrize("swap", ["file-for-link", "dir-for-link", "file-renamed-over"])
def test_a_file_swapped_after_the_listing_is_not_followed_nor_recorded(
    ledger: Ledger, alice: Signer, make_tree: Any, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path, swap: str,
) -> None:
    """att40 finding 1: links are not signed (`collect_files` refuses them), yet a file of the
    directory swapped after it was listed, before it was copied, for a link to a file outside
    (or a directory above it swapped for a link to another directory) was followed: the
    target's bytes (a key the attester can read, another user's file) were stored and signed
    under the listed name. Now the file opened must be the one listed (device and inode), else
    nothing is recorded."""
    from trajledger.ledger import record as record_module

    data = make_tree({"w/model.bin": "weights", "readme.txt": "hello"})
    secret = tmp_path / "outside" / "w"
    secret.mkdir(parents=True)
    (secret / "model.bin").write_bytes(b"the attester's private key")
    size, before = snapshot(ledger)
    real = record_module.collect_files

    def collect_then_swap(*a: Any, **kw: Any) -> Any:
        listed = real(*a, **kw)
        target = data / "w" / "model.bin"
        if swap == "file-for-link":
            target.unlink()
            target.symlink_to(secret / "model.bin")
        elif swap == "dir-for-link":
            (data / "w").rename(tmp_path / "moved-away")
            (data / "w").symlink_to(secret)
        else:
            (data / "new").write_bytes(b"weights")
            (data / "new").replace(target)
        return listed

    monkeypatch.setattr(record_module, "collect_files", collect_then_swap)
    with pytest.raises(LedgerError, match=r"w/model\.bin: not the file listed .*nothing was "
                                          r"recorded"):
        record_files(ledger, [data], alice, name="swapped")
    assert ledger.log.size == size
    stored = {ledger.store.get(d) for d in set(ledger.store.iter_digests()) - before}
    assert b"the attester's private key" not in stored


def test_a_directory_swapped_for_a_link_while_it_is_listed_is_not_followed(
    ledger: Ledger, alice: Signer, make_tree: Any, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """rev38: `collect_files` walked the directory by path (``os.walk``): a subdirectory
    swapped for a link to another directory after its parent was listed (and the link checks
    made), before it was itself listed, was listed through the link, every file of the
    target with its own ``lstat``, so that `same_as_listed` found the files opened through
    the link to be those listed: the other directory's files (a key the attester can read)
    were stored and signed under the subdirectory's name. Each directory is now opened
    relative to its parent's, without following a link (``O_NOFOLLOW``)."""
    data = make_tree({"w/model.bin": "weights", "readme.txt": "hello"})
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "model.bin").write_bytes(b"the attester's private key")
    size, before = snapshot(ledger)
    real_scandir, real_open = os.scandir, os.open
    swapped: list[bool] = []

    def swap(path: object) -> None:  # the race's winner: just before ``w`` is listed
        if not swapped and isinstance(path, (str, os.PathLike)) and os.fspath(path) in (
                str(data / "w"), "w"):
            swapped.append(True)
            (data / "w").rename(tmp_path / "moved-away")
            (data / "w").symlink_to(secret)

    def scandir(path: Any = ".") -> Any:
        swap(path)
        return real_scandir(path)

    def open_(path: Any, *a: Any, **kw: Any) -> Any:
        swap(path)
        return real_open(path, *a, **kw)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "open", open_)
    with pytest.raises(LedgerError, match=r"w: is a symbolic link"):
        record_files(ledger, [data], alice, name="swapped")
    monkeypatch.undo()
    assert swapped
    assert ledger.log.size == size
    stored = {ledger.store.get(d) for d in set(ledger.store.iter_digests()) - before}
    assert b"the attester's private key" not in stored


def test_an_environment_file_swapped_for_a_link_after_the_listing_is_not_recorded(
    ledger: Ledger, alice: Signer, make_tree: Any, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The same for `register_environment`, which lists its files and records them by name."""
    from trajledger.ledger import artifacts

    data = make_tree({"env/step.py": "def step(): ...\n"})
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"the attester's private key")
    size = ledger.log.size
    real = artifacts.collect_files

    def collect_then_swap(*a: Any, **kw: Any) -> Any:
        listed = real(*a, **kw)
        (data / "env" / "step.py").unlink()
        (data / "env" / "step.py").symlink_to(secret)
        return listed

    monkeypatch.setattr(artifacts, "collect_files", collect_then_swap)
    with pytest.raises(LedgerError, match=r"step\.py: not the file listed"):
        artifacts.register_environment(ledger, "swapped", "1", signer=alice,
                                       files=[data / "env"])
    assert ledger.log.size == size
