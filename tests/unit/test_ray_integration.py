"""trajledger.integrations.ray on a local Ray instance (``ray.init(num_cpus=2)``, started once
for this module): Ray tasks record batches through `LedgerWriter` (blobs written by the
workers, signatures and appends by the one writer actor); the log then holds exactly those
entries and verifies; the writer refuses to sign anything but a rollout batch whose manifest
is stored; a ledger it cannot open fails at start with a clear error.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from trajledger import Ledger
from trajledger.integrations.ray import LedgerWriter, _parse_pae, private_root
from trajledger.ledger.artifacts import register_environment
from trajledger.ledger.errors import LedgerError
from trajledger.ledger.log.spec import EntrySpec
from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE, Envelope, pae
from trajledger.verify.errors import FormatError
from trajledger.verify.log_entry import LogEntry


@pytest.fixture(scope="module")
def ray_instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
    )
    try:
        yield
    finally:
        ray.shutdown()


def steps(seed: int, episodes: int = 3, length: int = 12) -> list[dict[str, Any]]:
    rows = []
    for e in range(episodes):
        for t in range(length):
            rows.append(
                {
                    "episode_id": f"s{seed}-e{e}",
                    "step": t,
                    "obs": [float(seed), float(e), float(t)],
                    "action": [float((seed + t) % 2)],
                    "reward": 1.0,
                    "terminated": t == length - 1,
                    "truncated": False,
                }
            )
    return rows


@ray.remote
def rollout_worker(writer: LedgerWriter, worker: int, batches: int) -> list[str]:
    out = []
    for b in range(batches):
        result = writer.record_batch(
            steps(worker * 100 + b), env="grid@1", policy=f"worker-{worker}", name=f"w{worker}-{b}"
        )
        out.append(result.digest)
    return out


@pytest.fixture(scope="module")
def fleet(ray_instance: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("fleet") / "ledger"
    ledger = Ledger.init(root, origin=f"test/ray-{root.parent.name}")  # one origin per log
    key = ledger.keys.create("producer", encrypt=False)
    register_environment(ledger, "grid", "1", key)
    before = ledger.log.size
    writer = LedgerWriter.start(root, key="producer")
    digests = ray.get([rollout_worker.remote(writer, w, 3) for w in range(4)])
    return {
        "root": root,
        "writer": writer,
        "before": before,
        "digests": [d for ds in digests for d in ds],
    }


@pytest.mark.slow  # its module starts a Ray instance
def test_a_fleet_records_into_one_ledger(fleet: dict[str, Any]) -> None:
    ledger = Ledger.open(fleet["root"])
    digests = fleet["digests"]
    assert len(set(digests)) == 12
    assert ledger.log.size == fleet["before"] + 12  # exactly one entry per batch
    entries = [LogEntry.from_bytes(e) for e in ledger.log.entries(fleet["before"], ledger.log.size)]
    assert sorted(e.subject for e in entries) == sorted(digests)
    assert {e.kind for e in entries} == {"rollout-batch"}
    producer = ledger.keys.signer("producer").keyid
    assert all(e.signers == (producer,) for e in entries)
    # Every blob the workers wrote is in the ledger's store, and the whole log verifies.
    report = ledger.log.verify(store=ledger.store)
    assert report.ok, report.to_json()
    stats = fleet["writer"].stats()
    assert stats.appends == 12 and stats.signatures == 12
    assert 1 <= stats.commits <= 12


def test_the_workers_store_the_blobs_themselves(fleet: dict[str, Any]) -> None:
    ledger = Ledger.open(fleet["root"])
    from trajledger.ledger.artifacts import batch_files

    for d in fleet["digests"][:3]:
        files = batch_files(ledger, d)
        assert set(files) == {"steps.parquet", "episodes.parquet"}
        assert all(ledger.store.exists(f) for f in files.values())


def test_the_writer_signs_only_stored_rollout_batches(fleet: dict[str, Any]) -> None:
    from trajledger.ledger.signing import canonical_json
    from trajledger.verify import predicates

    writer = fleet["writer"]

    def statement(ptype: str, digest: str) -> bytes:
        body = {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "x", "digest": {"sha256": digest[7:]}}],
            "predicateType": ptype,
            "predicate": {},
        }
        return pae(INTOTO_PAYLOAD_TYPE, canonical_json(body))

    stored = fleet["digests"][0]
    with pytest.raises(ray.exceptions.RayTaskError, match="is not one this writer signs"):
        ray.get(writer.actor.sign.remote("producer", statement(predicates.DATASET, stored)))
    absent = "sha256:" + "0" * 64
    with pytest.raises(ray.exceptions.RayTaskError, match="is not in the store"):
        ray.get(writer.actor.sign.remote("producer", statement(predicates.ROLLOUT_BATCH, absent)))
    with pytest.raises(ray.exceptions.RayTaskError, match="not in-toto"):
        ray.get(writer.actor.sign.remote("producer", pae("text/plain", b"hi")))
    with pytest.raises(ray.exceptions.RayTaskError, match="signs with key producer, not other"):
        ray.get(writer.actor.sign.remote("other", statement(predicates.ROLLOUT_BATCH, stored)))
    # A rollout-batch predicate the ledger could not read is not signed (review rev11: an
    # empty one was).
    malformed = r"signing request: a malformed rollout-batch: .*schemaVersion is missing"
    with pytest.raises(ray.exceptions.RayTaskError, match=malformed):
        ray.get(writer.actor.sign.remote("producer", statement(predicates.ROLLOUT_BATCH, stored)))
    good = pae(INTOTO_PAYLOAD_TYPE, Envelope.from_bytes(envelope_of(fleet, stored)).payload)
    assert len(ray.get(writer.actor.sign.remote("producer", good))) == 64  # Ed25519


def test_pae_parsing_is_exact() -> None:
    assert _parse_pae(pae("t/x", b"a b")) == ("t/x", b"a b")
    for bad in (b"DSSEv2 1 t 1 a", b"DSSEv1 9 t 1 a", b"DSSEv1 1 t 2 a", b"DSSEv1 x t 1 a"):
        with pytest.raises(FormatError):
            _parse_pae(bad)


def test_a_ledger_the_writer_cannot_open_fails_at_start(ray_instance: None, tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match=r"^the ledger writer cannot start: .*nothing: no ledger"):
        LedgerWriter.start(tmp_path / "nothing", key="producer")


def test_reads_are_served_while_an_append_waits_for_the_user_state(tmp_path: Path) -> None:
    # A worker's index catching up holds the user's state (SQLite) while it reads entries from
    # the writer; an append meanwhile waits for that state to raise the floor. Reads must not
    # wait for the append, or each waits for the other (found as a 60 s stall in CI).
    from trajledger.integrations.ray import _Writer
    from trajledger.ledger.log import EntrySpec
    from trajledger.ledger.trust_state import TrustState
    from trajledger.verify import predicates

    root = tmp_path / "ledger"
    ledger = Ledger.init(root, origin="test/ray-reads")
    key = ledger.keys.create("producer", encrypt=False)
    writer = _Writer(str(root), "producer", (predicates.ROLLOUT_BATCH,))
    # This test is about locks: the made-up entry skips the check of what workers may append
    # (test_a_worker_appends_only_what_the_writer_signed tests that).
    writer._admit = lambda spec: None  # type: ignore[method-assign]
    size = writer.log_call("size", (), {})
    spec = EntrySpec("files", "sha256:" + "1" * 64, "sha256:" + "2" * 64, (key.keyid,))
    appended: dict[str, Any] = {}
    read: dict[str, Any] = {}
    worker_state = TrustState.open(writer.ledger.log.vkey)
    try:
        with worker_state._write():
            appender = threading.Thread(
                target=lambda: appended.update(indices=writer.append([spec])), daemon=True
            )
            appender.start()
            deadline = time.monotonic() + 10
            while not writer._log_lock.locked() and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)  # the append has reached the user's state and waits for it
            reader = threading.Thread(
                target=lambda: read.update(entries=writer.log_call("entries", (0, size), {})),
                daemon=True,
            )
            reader.start()
            reader.join(timeout=10)
            assert not reader.is_alive(), "a read waited for the append"
        appender.join(timeout=30)
    finally:
        worker_state.close()
    assert len(read["entries"]) == size
    assert appended["indices"] == [size]


@ray.remote
def racing_worker(writer: LedgerWriter, licence: str, go: str
                  ) -> tuple[str, int | None, str, bool]:
    """Record the same rows as every other racer, with this licence, once ``go`` exists;
    whether the writer said this racer made the record (`Recorded.new`)."""
    while not Path(go).exists():
        time.sleep(0.001)
    try:
        r = writer.record_batch(steps(4242), env="grid@1", policy="racer", name="the-rows",
                                licence=licence)
    except Exception as e:  # the refusal crosses from the writer actor
        return "refused", None, f"{type(e).__name__}: {e}", False
    return "recorded", r.recorded.index, r.digest, r.recorded.new


def test_racing_writers_of_one_digest_make_one_record(ray_instance: None, tmp_path: Path) -> None:
    """Issue 18: 8 tasks record the same rows, half as CC-BY-4.0 and half as proprietary, at
    once: exactly one record of the digest; the racers with its licence get that record, the
    others are refused naming it (checked under the log's lock, whichever writer comes first).
    Exactly one racer is told it made the record (`Appended.made`, judged by the writer under
    its lock: rev41 finding 5 through a Ray writer)."""
    root = tmp_path / "ledger"
    ledger = Ledger.init(root, origin="test/ray-race")
    key = ledger.keys.create("producer", encrypt=False)
    register_environment(ledger, "grid", "1", key)
    writer = LedgerWriter.start(root, key="producer", name="racers")
    go = tmp_path / "go"
    licences = ["CC-BY-4.0", "proprietary"] * 4
    futures = [racing_worker.remote(writer, lic, str(go)) for lic in licences]
    time.sleep(1.0)  # let the tasks start and wait
    go.touch()
    results = ray.get(futures)
    ledger = Ledger.open(root)
    entries = [LogEntry.from_bytes(e) for e in ledger.log.entries(0, ledger.log.size)]
    batches = [(i, e) for i, e in enumerate(entries) if e.kind == "rollout-batch"]
    assert len(batches) == 1, results
    (index, entry), = batches
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.statement import Statement

    won = Statement.from_bytes(Envelope.from_bytes(ledger.store.get(entry.envelope)).payload)
    winner = won.predicate["licence"]
    for lic, (outcome, at, detail, _) in zip(licences, results, strict=True):
        if lic == winner:
            assert (outcome, at, detail) == ("recorded", index, entry.subject), (lic, detail)
        else:
            assert outcome == "refused", (lic, detail)
            assert f"already recorded at log index {index}" in detail, detail
    assert [r[3] for r in results].count(True) == 1, results
    assert ledger.log.verify(store=ledger.store).ok


def envelope_of(fleet: dict[str, Any], digest: str) -> bytes:
    """The stored envelope of the fleet's record of ``digest``."""
    ledger = Ledger.open(fleet["root"])
    (index,) = ledger.log.find_subject(digest)
    return ledger.store.get(LogEntry.from_bytes(ledger.log.entry(index)).envelope)


@pytest.mark.slow  # its module starts a Ray instance
def test_a_worker_appends_only_what_the_writer_signed(fleet: dict[str, Any]) -> None:
    """Review rev11: the writer appended any entry a worker sent: a backdated revocation of a
    batch, naming the producer as signer, with an envelope that does not exist, went into the
    log for good (`show` then reported the batch revoked in 2001; `log verify` failed)."""
    ledger = Ledger.open(fleet["root"])
    writer, before = fleet["writer"], ledger.log.size
    batch, other = fleet["digests"][0], fleet["digests"][1]
    real = LogEntry.from_bytes(ledger.log.entry(ledger.log.find_subject(batch)[0]))
    producer = ledger.keys.signer("producer").keyid
    env_entry = LogEntry.from_bytes(ledger.log.entry(0))  # the environment grid@1
    absent = "sha256:" + "ab" * 32
    refused = [
        (EntrySpec("revocation", batch, absent, (producer,), "2001-01-01T00:00:00Z"),
         r"not a kind this writer records for workers"),
        (EntrySpec("approval", batch, real.envelope, (producer,)), r"not a kind this writer"),
        (EntrySpec("rollout-batch", batch, real.envelope, (producer,), "2001-01-01T00:00:00Z"),
         r"the writer stamps the time, not a worker \(2001-01-01T00:00:00Z\)"),
        (EntrySpec("rollout-batch", batch, real.envelope, ("f" * 64,)),
         r"signers \['f{64}'\], want the writer's key only"),
        (EntrySpec("rollout-batch", batch, absent, (producer,)),
         r"not an envelope this writer signed: .*"),
        (EntrySpec("rollout-batch", env_entry.subject, env_entry.envelope, (producer,)),
         r"not an envelope this writer signed: .*predicate type"),
        (EntrySpec("rollout-batch", other, real.envelope, (producer,)),
         r"the envelope is not a rollout-batch of " + other),
    ]  # fmt: skip
    for spec, message in refused:
        with pytest.raises(ray.exceptions.RayTaskError, match=message):
            ray.get(writer.actor.append.remote([spec]))
    assert Ledger.open(fleet["root"]).log.size == before


@pytest.mark.slow  # its module starts a Ray instance
def test_the_writer_serves_only_log_reads(fleet: dict[str, Any], tmp_path: Path) -> None:
    """Review rev11: any public method of the writer's Log was served, ``create`` (a new log
    anywhere the writer can write) and ``add_cosignature`` (rewriting the checkpoint) too."""
    writer = fleet["writer"]
    assert ray.get(writer.actor.log_call.remote("size", (), {})) >= 12
    for name in ("create", "add_cosignature", "rotate_key", "exclusive", "require_signer",
                 "open", "close", "append", "_locked"):  # fmt: skip
        with pytest.raises(ray.exceptions.RayTaskError, match=f"does not serve log.{name}$"):
            ray.get(writer.actor.log_call.remote(name, (tmp_path / "log", "x/y", None), {}))
    assert not (tmp_path / "log").exists()


_MAKE_ROOT = ("import os, sys, time; from pathlib import Path; "
              "from trajledger.integrations.ray import private_root; "
              "print(private_root(Path(sys.argv[1])), flush=True); "
              "time.sleep(600) if sys.argv[2] == 'live' else os._exit(0)")


def test_a_workers_directory_left_behind_is_removed_by_the_next(tmp_path: Path) -> None:
    """Ray ends its workers without their exit handlers: each worker's private directory
    (the derived caches of its view of the ledger) was left in /tmp, one a worker a job
    (760 on this machine in a day). The next worker now removes those whose process is
    gone (nobody holds their lock), never a live process's, nor one without a lock file."""
    def made(mode: str) -> tuple[subprocess.Popen[str], Path]:
        p = subprocess.Popen([sys.executable, "-c", _MAKE_ROOT, str(tmp_path), mode],
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None
        return p, Path(p.stdout.readline().strip())

    gone, left = made("exit")
    assert gone.wait(timeout=60) == 0 and left.is_dir()  # no exit handler ran
    live, alive = made("live")
    try:
        older = tmp_path / "trajledger-ray-older"  # an older version's: no lock file
        older.mkdir()
        mine = private_root(tmp_path)
        assert not left.exists()
        assert alive.is_dir() and older.is_dir() and mine.is_dir()
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            [alive.name, older.name, mine.name])
    finally:
        live.kill()
        live.wait()
