"""The log writer and reader (ledger/log.py): layout, appends, idempotence, proofs, lookups.

Proofs are checked with ``verify.merkle`` against the signed checkpoint for many tree sizes;
roots are compared with a spec-literal Merkle Tree Hash of all leaves.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import pickle
import random
import shutil
from pathlib import Path

import pytest
import testkit

from trajledger.ledger.encode import tlog_proof_bytes
from trajledger.ledger.errors import LogError, TamperError
from trajledger.ledger.keys import Signer
from trajledger.ledger.log import (
    CACHE_DIR,
    Appended,
    EntrySpec,
    Log,
    format_tree_state,
    parse_tree_state,
)
from trajledger.ledger.log.lookup import TAIL
from trajledger.verify.checkpoint import verify_checkpoint
from trajledger.verify.consistency import verify_consistency
from trajledger.verify.errors import FormatError, ProofError
from trajledger.verify.log_entry import GENESIS_PREV, LogEntry
from trajledger.verify.logcheck import check_entries
from trajledger.verify.merkle import (
    leaf_hash,
    root_from_leaf_hashes,
    verify_inclusion,
)
from trajledger.verify.note import verifier_from_vkey
from trajledger.verify.tiles import TileReader, parse_entry_bundle, parse_tile
from trajledger.verify.tlog_proof import TlogProof, verify_tlog_proof

ORIGIN = "example.org/test-log"
SIGNER = Signer.generate("log")  # TEST ONLY
PRODUCER = Signer.generate("producer")  # TEST ONLY


def spec(i: int, *, kind: str = "files", subject: str | None = None) -> EntrySpec:
    return testkit.entry_spec(i, PRODUCER.keyid, kind=kind, subject=subject)


def next_specs(log: Log, n: int) -> list[EntrySpec]:
    """The ``n`` specs that follow the log's last entry (``spec(size)`` on), the size read once:
    each read of ``Log.size`` reads the log's state from disk (it sees other writers)."""
    size = log.size
    return [spec(size + i) for i in range(n)]


@pytest.fixture
def log(tmp_path: Path) -> Log:
    return Log.create(tmp_path / "log", ORIGIN, SIGNER)


def files(log: Log) -> list[str]:
    base = log.directory
    return sorted(
        str(p.relative_to(base)) for p in base.rglob("*") if p.is_file() and "index" not in p.name
    )


def all_leaves(log: Log) -> list[bytes]:
    return [leaf_hash(e) for e in log.entries(0, log.size)]


# -- creation and layout -------------------------------------------------------------------


def test_create_writes_an_empty_signed_log(log: Log) -> None:
    assert log.size == 0
    cp = log.checkpoint()
    assert (cp.origin, cp.size, cp.root) == (ORIGIN, 0, hashlib.sha256(b"").digest())
    assert (log.directory / "vkey").read_text() == log.vkey + "\n"
    assert verifier_from_vkey(log.vkey).public_key == SIGNER.public.raw_ed25519()
    assert parse_tree_state((log.directory / ".state/treeState").read_bytes()) == (0, cp.root)


def test_create_refuses_an_existing_log(log: Log) -> None:
    with pytest.raises(LogError, match="a log already exists here"):
        Log.create(log.directory, ORIGIN, SIGNER)


def test_create_refuses_bad_origin_and_key(tmp_path: Path) -> None:
    with pytest.raises(LogError, match="log origin 'has space'"):
        Log.create(tmp_path / "a", "has space", SIGNER)
    p256 = Signer.generate("p", "ecdsa-p256")
    with pytest.raises(LogError, match="log key p: is ecdsa-p256, want ed25519"):
        Log.create(tmp_path / "b", ORIGIN, p256)


def test_layout_follows_tlog_tiles(log: Log) -> None:
    log.append([spec(i) for i in range(300)])
    assert files(log) == [
        ".state/history",
        ".state/lock",
        ".state/treeState",
        "checkpoint",
        "tile/0/000",
        "tile/0/001.p/44",
        "tile/1/000.p/1",
        "tile/entries/000",
        "tile/entries/001.p/44",
        "vkey",
    ]
    entries = parse_entry_bundle((log.directory / "tile/entries/001.p/44").read_bytes(), width=44)
    assert entries == log.entries(256, 300)
    tile = parse_tile((log.directory / "tile/0/001.p/44").read_bytes(), 44)
    assert tile == [leaf_hash(e) for e in entries]
    level1 = parse_tile((log.directory / "tile/1/000.p/1").read_bytes(), 1)
    assert level1 == [root_from_leaf_hashes(all_leaves(log)[:256])]
    state = json.loads((log.directory / ".state/treeState").read_bytes())
    assert state == {"size": 300, "root": base64.b64encode(log.checkpoint().root).decode()}
    assert (log.directory / ".state/treeState").read_bytes() == format_tree_state(
        300, log.checkpoint().root
    )


def test_older_partials_are_kept_until_the_tile_is_full(log: Log) -> None:
    for n in (3, 5, 240):
        log.append(next_specs(log, n))
    assert [f for f in files(log) if f.startswith("tile/")] == [
        "tile/0/000.p/248",
        "tile/0/000.p/3",
        "tile/0/000.p/8",
        "tile/entries/000.p/248",
        "tile/entries/000.p/3",
        "tile/entries/000.p/8",
    ]
    log.append(next_specs(log, 10))
    assert [f for f in files(log) if f.startswith("tile/")] == [
        "tile/0/000",
        "tile/0/001.p/2",
        "tile/1/000.p/1",
        "tile/entries/000",
        "tile/entries/001.p/2",
    ]


# -- appending -----------------------------------------------------------------------------


def test_entries_chain_and_match_the_specs(log: Log) -> None:
    specs = [spec(i, kind=k) for i, k in enumerate(["files", "dataset", "approval", "erasure"])]
    assert log.append(specs) == [0, 1, 2, 3]
    raws = log.entries(0, 4)
    assert check_entries(dict(enumerate(raws)), 4, log.checkpoint().root, lambda i: []) == []
    parsed = [LogEntry.from_bytes(r) for r in raws]
    assert parsed[0].prev == GENESIS_PREV
    for s, e in zip(specs, parsed, strict=True):
        assert (e.kind, e.subject, e.envelope, e.signers) == (
            s.kind,
            s.subject,
            s.envelope,
            s.signers,
        )


def test_append_is_idempotent_by_envelope(log: Log) -> None:
    assert log.append([spec(0), spec(1)]) == [0, 1]
    # Again, mixed with new ones and with a duplicate inside the batch.
    assert log.append([spec(1), spec(2), spec(2), spec(0), spec(3)]) == [1, 2, 2, 0, 3]
    assert log.size == 4
    # A second Log object (another process) sees the same.
    other = Log.open(log.directory, SIGNER)
    assert other.append([spec(3), spec(0)]) == [3, 0]
    assert other.size == 4


def test_append_says_which_entries_it_made(log: Log) -> None:
    """`Appended.made`: true only for the spec whose entry this call made, judged under the
    lock: not for an envelope logged before (by this object or another writer, which a look
    before the append could not tell: the lead's fix of rev41 finding 5 read the size through
    the precondition), nor for a duplicate later in the same call. It survives pickling (a Ray
    writer's answer crosses processes) and a request's part of a group commit keeps its own."""
    first = log.append([spec(0), spec(1)])
    assert (first, first.made) == ([0, 1], (True, True))
    other = Log.open(log.directory, SIGNER)  # another process
    again = other.append([spec(1), spec(2), spec(2), spec(0)])
    assert (again, again.made) == ([1, 2, 2, 0], (False, True, False, False))
    assert log.append([spec(2)]).made == (False,)
    back = pickle.loads(pickle.dumps(again))
    assert (type(back), back, back.made) == (Appended, again, again.made)
    part = again.part(1, 3)
    assert (part, part.made) == ([2, 2], (True, False))
    with pytest.raises(ValueError, match="2 indices, 1 flags"):
        Appended([0, 1], [True])


def test_append_refuses_a_logged_envelope_with_another_subject(log: Log) -> None:
    log.append([spec(0)])
    clash = EntrySpec("files", "sha256:" + "1" * 64, spec(0).envelope, (PRODUCER.keyid,))
    with pytest.raises(LogError, match=r"already logged at index 0 as files of sha256:"):
        log.append([clash])
    with pytest.raises(LogError, match=r"given twice, as files of sha256:\w+ and as files of"):
        log.append([spec(1), EntrySpec("files", clash.subject, spec(1).envelope, clash.signers)])
    assert log.size == 1


def test_append_sees_other_writers(log: Log) -> None:
    other = Log.open(log.directory, SIGNER)
    log.append([spec(0)])
    other.append([spec(1)])
    log.append([spec(2)])
    assert log.size == 3
    assert check_entries(dict(enumerate(log.entries(0, 3))), 3, log.checkpoint().root,
                         lambda i: []) == []
    assert log.verify().ok


def test_append_needs_the_log_key(log: Log) -> None:
    reader = Log.open(log.directory)
    with pytest.raises(LogError, match="opened without its key; cannot append"):
        reader.append([spec(0)])
    with pytest.raises(
        LogError, match=r"log key other: is not the key of log example\.org/test-log"
    ):
        Log.open(log.directory, Signer.generate("other"))
    lazy = Log.open(log.directory, lambda: Signer.generate("late"))
    with pytest.raises(LogError, match="log key late: is not the key of log"):
        lazy.append([spec(0)])
    assert log.size == 0


def test_entry_spec_checks_fields() -> None:
    with pytest.raises(FormatError, match="kind 'files2' is unknown"):
        EntrySpec("files2", spec(0).subject, spec(0).envelope, (PRODUCER.keyid,))
    with pytest.raises(FormatError, match="envelope: 'sha256:xyz' is not of the form"):
        EntrySpec("files", spec(0).subject, "sha256:xyz", (PRODUCER.keyid,))
    with pytest.raises(FormatError, match="time 'yesterday' is not of the form"):
        EntrySpec("files", spec(0).subject, spec(0).envelope, (PRODUCER.keyid,), "yesterday")
    s = EntrySpec("files", spec(0).subject, spec(0).envelope, ("b" * 64, "a" * 64, "b" * 64))
    assert s.signers == ("a" * 64, "b" * 64)


def test_empty_append_does_nothing(log: Log) -> None:
    assert log.append([]) == []
    assert log.append([]).made == ()
    assert log.size == 0


# -- proofs --------------------------------------------------------------------------------


def test_proofs_verify_against_the_checkpoint_for_many_sizes(log: Log) -> None:
    rng = random.Random(7)
    batches = [1, 1, 2, 3, 9, 48, 191, 1, 255, 1, 256, 257, 2, 511, 560]
    seen: list[tuple[int, bytes]] = []
    for b in batches:
        log.append(next_specs(log, b))
        cp = log.checkpoint()
        leaves = all_leaves(log)
        # The root is the RFC 6962 MTH of all leaves (spec-literal reference in verify.merkle).
        assert cp.root == root_from_leaf_hashes(leaves)
        for i in sorted({0, cp.size - 1, *rng.sample(range(cp.size), min(12, cp.size))}):
            verify_inclusion(i, cp.size, leaves[i], log.inclusion_proof(i), cp.root)
        for old_size, old_root in seen:
            verify_consistency(
                old_size, cp.size, log.consistency_proof(old_size), old_root, cp.root
            )
            # Proofs for older sizes come from the current tiles too.
            j = rng.randrange(old_size)
            verify_inclusion(j, old_size, leaves[j], log.inclusion_proof(j, old_size), old_root)
        seen.append((cp.size, cp.root))


@pytest.mark.slow
def test_proofs_across_level_2_tiles(log: Log) -> None:
    sizes = []
    for b in (4096,) * 16 + (700, 1):
        log.append(next_specs(log, b))
        sizes.append((log.size, log.checkpoint().root))
    cp = log.checkpoint()
    assert cp.size == 65536 + 701
    assert (log.directory / "tile/2/000.p/1").is_file()
    reader = TileReader(lambda p: (log.directory / p).read_bytes(), cp.size)
    assert reader.root() == cp.root
    for i in (0, 255, 256, 65535, 65536, cp.size - 1):
        verify_inclusion(i, cp.size, leaf_hash(log.entry(i)), log.inclusion_proof(i), cp.root)
    for old, root in sizes[:-1]:
        verify_consistency(old, cp.size, log.consistency_proof(old), root, cp.root)
    assert log.verify().ok


def test_proof_arguments_are_checked(log: Log) -> None:
    log.append([spec(i) for i in range(5)])
    with pytest.raises(LogError, match=r"inclusion proof for entry 5 at size 5: want 0 <= index"):
        log.inclusion_proof(5)
    with pytest.raises(LogError, match=r"inclusion proof for entry 1 at size 6"):
        log.inclusion_proof(1, 6)
    with pytest.raises(LogError, match=r"consistency proof from size 0 to 5"):
        log.consistency_proof(0)
    with pytest.raises(LogError, match=r"log entry 9: outside the log of size 5"):
        log.entry(9)
    with pytest.raises(LogError, match=r"entry range \[3, 7\) is outside the log of size 5"):
        log.entries(3, 7)


def test_tlog_proof_round_trips_and_verifies(log: Log) -> None:
    log.append([spec(i) for i in range(40)])
    proof = log.tlog_proof(17)
    data = tlog_proof_bytes(proof)
    assert data.startswith(b"c2sp.org/tlog-proof@v1\nindex 17\n")
    parsed = TlogProof.from_bytes(data)
    cp = verify_tlog_proof(parsed, log.entry(17), log.verifier, ORIGIN)
    assert cp.size == 40
    with pytest.raises(ProofError, match=r"inclusion proof for leaf 17 .* leads to root"):
        verify_tlog_proof(parsed, log.entry(18), log.verifier)
    with pytest.raises(LogError, match="log entry 40: not covered by the published checkpoint"):
        log.tlog_proof(40)


def test_checkpoint_is_verified(log: Log) -> None:
    log.append([spec(0)])
    path = log.directory / "checkpoint"
    data = path.read_bytes()
    path.write_bytes(data.replace(b"\n1\n", b"\n2\n", 1))
    with pytest.raises(TamperError, match=r"not a checkpoint signed by the log key .*does not"):
        log.checkpoint()
    cp = verify_checkpoint(data, log.verifier)
    assert cp.size == 1


# -- lookups -------------------------------------------------------------------------------


def test_find_envelope_and_subject(log: Log) -> None:
    subject = "sha256:" + "ab" * 32
    log.append([spec(0), spec(1, subject=subject), spec(2), spec(3, subject=subject)])
    assert log.find_envelope(spec(2).envelope) == 2
    assert log.find_envelope("sha256:" + "00" * 32) is None
    assert log.find_subject(subject) == [1, 3]
    assert log.find_subject(spec(0).subject) == [0]
    with pytest.raises(FormatError, match="envelope digest: 'nope'"):
        log.find_envelope("nope")


def test_lookups_see_appends_by_other_processes(log: Log) -> None:
    reader = Log.open(log.directory)
    assert reader.find_envelope(spec(0).envelope) is None
    log.append([spec(0), spec(1)])
    assert reader.find_envelope(spec(1).envelope) == 1
    assert reader.find_subject(spec(0).subject) == [0]


def cached(log: Log, tmp_path: Path, signer: Signer | None = SIGNER) -> Log:
    return Log.open(log.directory, signer, cache_dir=tmp_path / "cache")


def test_lookup_cache_lives_outside_the_log_and_is_rebuilt(log: Log, tmp_path: Path) -> None:
    log.append([spec(i) for i in range(3000)])
    writer = cached(log, tmp_path)
    assert writer.append([spec(10), spec(3000)]) == [10, 3000]
    cache = tmp_path / "cache" / CACHE_DIR
    manifest = json.loads((cache / "MANIFEST").read_text())
    runs = [tuple(r) for r in manifest["runs"]]
    # Runs cover whole prefixes, sizes decreasing geometrically; the rest is each process's tail.
    assert runs[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(runs))
    assert sorted(p.name for p in cache.glob("run-*")) == sorted(n for _s, _e, n in runs)
    assert 3001 - runs[-1][1] < TAIL
    assert not [p for p in log.directory.rglob("*") if "lookup" in p.name or "index" in p.name]
    assert cached(log, tmp_path, None).find_envelope(spec(2999).envelope) == 2999
    # Missing: rebuilt from the entries.
    writer.close()
    shutil.rmtree(cache)
    fresh = cached(log, tmp_path)
    assert fresh.find_envelope(spec(2999).envelope) == 2999
    assert fresh.append([spec(5), spec(3001)]) == [5, 3001]
    assert (cache / "MANIFEST").is_file()
    # Garbage manifest, truncated run: rebuilt.
    (cache / "MANIFEST").write_bytes(os.urandom(200))
    assert cached(log, tmp_path).find_subject(spec(300).subject) == [300]
    run = next(cache.glob("run-*"))
    run.write_bytes(run.read_bytes()[:100])
    fresh = cached(log, tmp_path)
    assert fresh.find_subject(spec(1300).subject) == [1300]
    assert fresh.append([spec(3002)]) == [3002]
    assert log.verify().ok


def test_lookup_cache_candidates_are_confirmed(log: Log, tmp_path: Path) -> None:
    # A cache row that names the wrong entry is never believed; runs whose last leaf hash is
    # not this log's (another log's cache) are rebuilt.
    log.append([spec(i) for i in range(TAIL + 10)])
    writer = cached(log, tmp_path)
    assert writer.find_envelope(spec(1).envelope) == 1
    writer.close()
    cache = tmp_path / "cache" / CACHE_DIR
    manifest = json.loads((cache / "MANIFEST").read_text())
    run = cache / manifest["runs"][0][2]
    data = bytearray(run.read_bytes())
    count = (len(data) - 40) // 32
    idx = memoryview(data)[40 + 8 * count : 40 + 16 * count].cast("Q")
    hits = [j for j in range(count) if idx[j] in (0, 1)]
    idx[hits[0]], idx[hits[1]] = idx[hits[1]], idx[hits[0]]  # swap the rows of entries 0 and 1
    idx.release()
    run.write_bytes(bytes(data))
    fresh = cached(log, tmp_path)
    assert fresh.find_envelope(spec(0).envelope) is None  # candidate 1 is not spec(0)'s entry
    assert fresh.find_envelope(spec(7).envelope) == 7
    manifest["last"] = "07" * 32  # claims another log's history
    (cache / "MANIFEST").write_text(json.dumps(manifest))
    again = cached(log, tmp_path)
    assert again.find_envelope(spec(0).envelope) == 0
    assert again.append([spec(1), spec(0)]) == [1, 0]
    assert again.size == TAIL + 10


def test_lookups_are_sublinear_in_the_log_size(
    log: Log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the cache covers the log, an append and a lookup read O(batch + log n) entries."""
    from trajledger.verify.tiles import TileReader

    log.append([spec(i) for i in range(5000)])
    writer = cached(log, tmp_path)
    writer.append([spec(5000)])  # the cache catches up once
    read: list[int] = []
    original = TileReader.entries

    def counting(self: TileReader, start: int, end: int) -> list[bytes]:
        read.append(end - start)
        return original(self, start, end)

    monkeypatch.setattr(TileReader, "entries", counting)
    assert writer.append([spec(5001), spec(3), spec(5002)]) == [5001, 3, 5002]
    assert writer.find_subject(spec(1234).subject) == [1234]
    assert sum(read) <= 10, read  # the confirmed candidates, not 5000
    read.clear()
    reader = cached(log, tmp_path, None)  # another process: reads its tail once, < TAIL entries
    assert reader.find_subject(spec(4321).subject) == [4321]
    assert sum(read) <= TAIL + 2, read


def test_reader_on_a_read_only_copy(log: Log, tmp_path: Path) -> None:
    log.append([spec(i) for i in range(20)])
    before = {p: p.read_bytes() for p in log.directory.rglob("*") if p.is_file()}
    (tmp_path / "cache").mkdir()
    os.chmod(log.directory / ".state", 0o555)
    os.chmod(tmp_path / "cache", 0o555)
    try:
        ro = cached(log, tmp_path, None)
        assert ro.find_envelope(spec(19).envelope) == 19
        assert ro.size == 20
    finally:
        os.chmod(log.directory / ".state", 0o755)
        os.chmod(tmp_path / "cache", 0o755)
    assert {p: p.read_bytes() for p in log.directory.rglob("*") if p.is_file()} == before


def test_a_cache_that_cannot_be_written_still_serves(
    log: Log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trajledger.ledger.log.lookup import Lookup

    log.append([spec(i) for i in range(2 * TAIL + 100)])
    cached(log, tmp_path).find_envelope(spec(0).envelope)  # a writer builds the runs
    cache = tmp_path / "cache" / CACHE_DIR
    log.append([spec(i) for i in range(2 * TAIL + 100, 3 * TAIL + 200)])  # a tail > TAIL
    before = {p.name: p.read_bytes() for p in cache.iterdir()}

    def refuse(self: Lookup) -> None:
        raise PermissionError(13, "Permission denied", str(cache))

    monkeypatch.setattr(Lookup, "_write_tail", refuse)
    reader = cached(log, tmp_path, None)
    assert reader.find_envelope(spec(5).envelope) == 5  # from a run
    assert reader.find_envelope(spec(3 * TAIL + 150).envelope) == 3 * TAIL + 150  # the tail
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == before


# -- one record per digest (issue 18) ------------------------------------------------


def test_the_one_record_hook_judges_every_entry_of_a_recorded_subject(log: Log) -> None:
    """`Log.one_record` sees, under the lock, the entries of its kinds already about a subject
    (in the log and earlier in the same append) and decides: reuse one, append, or refuse; an
    import's foreign records, and kinds it does not name, are not judged."""
    from trajledger.ledger.log import OneRecord

    seen: list[tuple[str, list[tuple[int, str]]]] = []

    def judge(new: EntrySpec, prior: object) -> int | None:
        entries = list(prior)  # type: ignore[call-overload]
        seen.append((new.envelope, entries))
        if new.envelope.endswith("b" * 8):
            raise LogError("refused: other metadata")
        return int(entries[0][0]) if new.envelope.endswith("a" * 8) else None

    subject = "sha256:" + "5" * 64
    first = EntrySpec("rollout-batch", subject, "sha256:" + "1" * 64, ("0" * 64,))
    again = EntrySpec("rollout-batch", subject, "sha256:" + "2" * 56 + "a" * 8, ("0" * 64,))
    other = EntrySpec("rollout-batch", subject, "sha256:" + "3" * 56 + "b" * 8, ("0" * 64,))
    about = EntrySpec("approval", subject, "sha256:" + "4" * 56 + "b" * 8, ("0" * 64,))
    log.one_record = OneRecord(frozenset({"rollout-batch"}), judge)
    assert log.append([first, again]) == [0, 0]  # the second repeats the first, in one append
    assert seen == [(again.envelope, [(0, first.envelope)])]
    with pytest.raises(LogError, match="refused: other metadata"):
        log.append([other])
    assert log.size == 1
    assert log.append([about]) == [1]  # not a kind of one record per digest
    assert log.append([other], foreign=True) == [2]  # another log's record: not judged
    assert len(seen) == 2


def test_an_append_on_a_full_disk_says_what_to_do_next(log: Log,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk at the append is one line with the next step, as every other write's (out41:
    ``cannot append: No space left on device`` alone), and the log stays as it was."""
    import errno

    from trajledger.ledger.log import writer

    log.append([spec(0)])
    before = (log.size, files(log))

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer, "write_new", full)
    with pytest.raises(LogError, match=r"cannot append: No space left on device; free space "
                       r"on the disk written to .*then run the command again$"):
        log.append([spec(1)])
    monkeypatch.undo()
    assert (log.size, files(log)) == before
