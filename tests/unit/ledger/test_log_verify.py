"""Checking a whole log (``verify_log_dir``): the chain, duplicates, and what entries claim about
the store (envelopes, subjects, signers, signatures, blobs, erasures).

One test per attack: alter, then expect the specific problem with its file and index. The sweep
over every file of a log (flipped byte, truncation, deletion) is in tests/e2e/test_log_cli.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from trajledger import Ledger
from trajledger.ledger.encode import envelope_bytes
from trajledger.ledger.keys import Signer
from trajledger.ledger.log import EntrySpec, Log, LogReport, verify_log_dir
from trajledger.ledger.record import Recorded, record_files, record_statement
from trajledger.ledger.signing import sign_statement
from trajledger.verify import predicates
from trajledger.verify.dsse import Envelope, Signature
from trajledger.verify.errors import VerificationError
from trajledger.verify.log_entry import LogEntry


@pytest.fixture
def ledger(home: Path) -> Ledger:
    return Ledger.open(home)


@pytest.fixture
def alice(ledger: Ledger) -> Signer:
    return ledger.keys.create("alice", encrypt=False)


def record(ledger: Ledger, signer: Signer, make_tree: Any, n: int = 3) -> list[Recorded]:
    out = []
    for i in range(n):
        data = make_tree({f"part-{i}.jsonl": f'{{"i": {i}}}\n', "rules.txt": f"rules {i}\n"})
        out.append(record_files(ledger, [data], signer, name=f"batch-{i}"))
    return out


def check(ledger: Ledger, **kw: Any) -> LogReport:
    keys = {k.keyid: ledger.keys.public(k.name) for k in ledger.keys.list()}
    return verify_log_dir(ledger.log_dir, store=ledger.store, keys=keys, **kw)


def problems(report: LogReport) -> list[tuple[str, int | None]]:
    return [(p.file, p.index) for p in report.problems]


def writable(path: Path) -> Path:
    os.chmod(path, 0o644)
    return path


def test_a_recorded_ledger_verifies(ledger: Ledger, alice: Signer, make_tree: Any) -> None:
    recs = record(ledger, alice, make_tree)
    record_statement(
        ledger, "batch-0", recs[0].digest, predicates.APPROVAL, {"purpose": "train"}, alice
    )
    report = check(ledger)
    assert report.ok, report.problems
    assert (report.size, report.entries_checked, report.envelopes_checked) == (4, 4, 4)
    assert report.blobs_checked == 6
    assert report.data == "re-hashed"
    report.raise_if_failed()
    assert check(ledger, skip_data=True).data == "size only, not re-hashed"


def test_missing_envelope(ledger: Ledger, alice: Signer, make_tree: Any) -> None:
    recs = record(ledger, alice, make_tree)
    ledger.store.delete(recs[1].envelope_digest)
    report = check(ledger)
    assert problems(report) == [("tile/entries/000.p/3", 1)]
    assert report.problems[0].message == f"object {recs[1].envelope_digest}: not in the store"
    with pytest.raises(VerificationError, match=r"log/tile/entries/000.p/3 \(entry 1\): object"):
        report.raise_if_failed()


def test_altered_envelope(ledger: Ledger, alice: Signer, make_tree: Any) -> None:
    recs = record(ledger, alice, make_tree)
    path = writable(ledger.store.path_of(recs[2].envelope_digest))
    path.write_bytes(path.read_bytes().replace(b'"sig"', b'"sig" '))
    report = check(ledger)
    assert problems(report) == [("tile/entries/000.p/3", 2)]
    assert "content hashes to sha256:" in report.problems[0].message


def test_entry_with_another_subject(ledger: Ledger, alice: Signer, make_tree: Any) -> None:
    recs = record(ledger, alice, make_tree)
    env = sign_statement([("x", recs[0].digest)], predicates.FILES, {}, [alice])
    digest = ledger.store.put_bytes(envelope_bytes(env))
    ledger.log.one_record = None  # another tool, which does not keep one record per digest
    ledger.log.append([EntrySpec("files", recs[1].digest, digest, (alice.keyid,))])
    report = check(ledger)
    assert problems(report) == [("tile/entries/000.p/4", 3)]
    assert f"the first subject (the artifact) is {recs[0].digest}, want {recs[1].digest}" in str(
        report.problems[0]
    )


def test_entry_naming_a_later_subject(ledger: Ledger, alice: Signer, make_tree: Any) -> None:
    """The log entry names the artifact: the statement's first subject, never a part of it."""
    recs = record(ledger, alice, make_tree, 2)
    env = sign_statement(
        [("x", recs[0].digest), ("part", recs[1].digest)], predicates.FILES, {}, [alice]
    )
    digest = ledger.store.put_bytes(envelope_bytes(env))
    ledger.log.one_record = None  # another tool, which does not keep one record per digest
    ledger.log.append([EntrySpec("files", recs[1].digest, digest, (alice.keyid,))])
    report = check(ledger)
    assert len(report.problems) == 1
    assert "it is the later subject 'part', a part, not the artifact" in str(report.problems[0])


def test_entry_with_other_signers(ledger: Ledger, alice: Signer, make_tree: Any) -> None:
    recs = record(ledger, alice, make_tree, 1)
    bob = ledger.keys.create("bob", encrypt=False)
    env = sign_statement([("x", recs[0].digest)], predicates.APPROVAL, {}, [alice])
    digest = ledger.store.put_bytes(envelope_bytes(env))
    ledger.log.append([EntrySpec("approval", recs[0].digest, digest, (bob.keyid,))])
    report = check(ledger)
    assert problems(report) == [("tile/entries/000.p/2", 1)]
    assert f"signed by keyids ['{alice.keyid}'], entry says ['{bob.keyid}']" in str(
        report.problems[0]
    )


def test_bad_signature_by_a_known_key(ledger: Ledger, alice: Signer, make_tree: Any) -> None:
    recs = record(ledger, alice, make_tree, 1)
    env = sign_statement([("x", recs[0].digest)], predicates.APPROVAL, {"a": 1}, [alice])
    forged = Envelope(env.payload, env.payload_type, (Signature(alice.keyid, b"\x01" * 64),))
    digest = ledger.store.put_bytes(envelope_bytes(forged))
    ledger.log.append([EntrySpec("approval", recs[0].digest, digest, (alice.keyid,))])
    report = check(ledger)
    assert problems(report) == [("tile/entries/000.p/2", 1)]
    assert "invalid signature by key" in report.problems[0].message


def test_missing_and_altered_blobs(ledger: Ledger, alice: Signer, make_tree: Any) -> None:
    recs = record(ledger, alice, make_tree)
    assert recs[0].manifest is not None and recs[1].manifest is not None
    gone = recs[0].manifest.files[0]
    ledger.store.delete(gone.digest)
    changed = recs[1].manifest.files[1]
    writable(ledger.store.path_of(changed.digest)).write_bytes(b"tampered, longer")
    # By default every blob is re-hashed: the altered one is found.
    report = check(ledger)
    assert problems(report) == [("tile/entries/000.p/3", 0), ("tile/entries/000.p/3", 1)]
    assert report.problems[0].message == f"blob {gone.path} ({gone.digest}): not in the store"
    assert report.problems[1].message.startswith(f"blob {changed.path}: object ")
    assert report.problems[1].message.endswith(f"bytes, want {changed.size}")
    # Sizes only: a change of size is found, a same-size change is not (and the report says so).
    quick = check(ledger, skip_data=True)
    assert quick.data == "size only, not re-hashed"
    assert problems(quick) == [("tile/entries/000.p/3", 0), ("tile/entries/000.p/3", 1)]
    assert quick.problems[1].message.endswith(f"bytes, want {changed.size}")
    writable(ledger.store.path_of(changed.digest)).write_bytes(b"x" * changed.size)
    assert problems(check(ledger, skip_data=True)) == [("tile/entries/000.p/3", 0)]
    assert problems(check(ledger)) == [("tile/entries/000.p/3", 0), ("tile/entries/000.p/3", 1)]


def test_erased_blobs_are_not_missing(ledger: Ledger, alice: Signer, make_tree: Any) -> None:
    recs = record(ledger, alice, make_tree)
    assert recs[0].manifest is not None
    for f in recs[0].manifest.files:
        ledger.store.delete(f.digest)
    record_statement(
        ledger,
        "batch-0",
        recs[0].digest,
        predicates.ERASURE,
        {"reason": "consent withdrawn"},
        alice,
    )
    report = check(ledger)
    assert report.ok, report.problems


def test_broken_chain_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log.create(tmp_path / "log", "example.org/chain", Signer.generate("l"))
    specs = [
        EntrySpec("files", "sha256:" + f"{i:064x}", "sha256:" + f"{i + 100:064x}", ("a" * 64,))
        for i in range(6)
    ]
    original = EntrySpec.entry

    def wrong_prev(self: EntrySpec, prev: str, now: str) -> LogEntry:
        return original(self, "f" * 64 if self is specs[4] else prev, now)

    monkeypatch.setattr(EntrySpec, "entry", wrong_prev)
    log.append(specs)
    report = verify_log_dir(log.directory)
    assert problems(report) == [("tile/entries/000.p/6", 4)]
    assert report.problems[0].message.startswith(f"entry 4: prev is {'f' * 64}, want ")
    assert report.problems[0].message.endswith("the hash chain is broken")


def test_malformed_entry_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log.create(tmp_path / "log", "example.org/chain", Signer.generate("l"))
    good = EntrySpec("files", "sha256:" + "1" * 64, "sha256:" + "2" * 64, ("a" * 64,))
    log.append([good])

    class Junk:
        def to_bytes(self) -> bytes:
            return b'{"not":"an entry"}'

    monkeypatch.setattr(EntrySpec, "entry", lambda self, prev, now: Junk())
    log.append([EntrySpec("files", "sha256:" + "3" * 64, "sha256:" + "4" * 64, ("a" * 64,))])
    report = verify_log_dir(log.directory)
    assert problems(report) == [("tile/entries/000.p/2", 1)]
    assert report.problems[0].message.startswith("log entry 1: missing field(s)")


def test_duplicate_envelope_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log.create(tmp_path / "log", "example.org/dup", Signer.generate("l"))
    s = EntrySpec("files", "sha256:" + "1" * 64, "sha256:" + "2" * 64, ("a" * 64,))
    log.append([s])
    monkeypatch.setattr(Log, "_find", lambda self, column, digests, st, writer: {})
    log.append([s])
    report = verify_log_dir(log.directory)
    assert problems(report) == [("tile/entries/000.p/2", 1)]
    assert "is logged twice, at 0 and 1" in report.problems[0].message


def test_report_json(ledger: Ledger, alice: Signer, make_tree: Any) -> None:
    record(ledger, alice, make_tree, 1)
    doc = check(ledger).to_json()
    assert doc["ok"] is True and doc["size"] == 1 and doc["problems"] == []
    assert set(doc) == {
        "directory",
        "origin",
        "size",
        "root",
        "checkpoint_size",
        "ok",
        "problems",
        "warnings",
        "entries_checked",
        "envelopes_checked",
        "blobs_checked",
        "data",
    }


@pytest.mark.parametrize("older_too", [False, True])
def test_an_edited_bundle_is_named_first_and_older_partials_are_not_blamed(
    tmp_path: Path, older_too: bool
) -> None:
    """Review rev7: an entry edited in the current partial bundle made `log verify` blame every
    authentic older partial (compared with the tiles rebuilt from the edited entries), report
    a root nobody signed, and name the edited file last. Now the bundle comes first, the chain
    break after it says it follows from it, older partials are compared with the signed tree
    (one edited as well is still named), and the root is the signed one."""
    log = Log.create(tmp_path / "log", "example.org/edit", Signer.generate("l"))
    for i in range(8):  # one append each: older partials 000.p/1 .. 000.p/7 stay
        log.append([EntrySpec("files", f"sha256:{i:064x}", f"sha256:{i + 100:064x}",
                              ("a" * 64,))])
    signed = log.checkpoint().root

    def edit(rel: str, entry: int) -> None:
        path = log.directory / rel
        data = bytearray(path.read_bytes())
        at = data.index(f"sha256:{entry + 100:064x}".encode()) + 7  # its manifest digest
        data[at] = ord("f")
        writable(path).write_bytes(bytes(data))

    edit("tile/entries/000.p/8", 2)
    if older_too:
        edit("tile/entries/000.p/5", 1)
    report = verify_log_dir(log.directory)
    want = [("tile/entries/000.p/8", 2)]
    if older_too:
        want.append(("tile/entries/000.p/5", 1))
    want.append(("tile/entries/000.p/8", 3))
    assert problems(report) == want, report.problems
    assert "but tile/0/000.p/8 and the trusted root have" in report.problems[0].message
    assert report.problems[-1].message.endswith(
        "the hash chain is broken (follows from entry 2, changed in tile/entries/000.p/8: this "
        "prev is the signed tree's leaf hash of entry 2)")
    if older_too:
        assert report.problems[1].message.endswith("(the signed tree's)")
    assert report.root == signed
