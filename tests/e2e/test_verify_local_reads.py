"""The walk's reads of a local store in one step (issue 21 item 2, walk32) decide as the reads
through the store's layers did.

``ledger.evidence.ledger_evidence`` reads a local store's blobs, and looks up their sizes, itself
(the walk of ``verify`` reads an envelope and a manifest, and looks up the sizes of the data
blobs, of every record); before, each went through ``StoreBlobs`` and ``ObjectStore.get`` /
``ObjectStore.size``, which `through_the_store` still builds. Here the quickstart's lineage is
verified both ways over the user's trust state, sound and with its blobs damaged: an envelope
changed, one whose signature was swapped for another record's, one holding a key twice, one
missing, a directory or a FIFO where an envelope was, a data blob changed or missing, a
manifest missing; and each blob's bytes and size are read both ways, including one that cannot
be read (an I/O error). The reports are the same, node for node and check for check; the reads
give the same bytes, sizes, ``None`` and errors.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import testkit
from test_verify_bulk import REF, batches, envelope_of, flip

from trajledger import Ledger
from trajledger.ledger import evidence as ledger_evidence_module
from trajledger.ledger import store as store_module
from trajledger.ledger.catalog import Catalog
from trajledger.ledger.errors import StoreError
from trajledger.ledger.evidence import StoreBlobs, ledger_evidence
from trajledger.verify.ledger_dir import LedgerDirEvidence
from trajledger.verify.lineage import LineageVerifier
from trajledger.verify.manifest import Manifest
from trajledger.verify.strict_json import load_object


@pytest.fixture
def home(quickstart_template: testkit.Template[str], tmp_path: Path) -> Path:
    return testkit.copy_template(quickstart_template, tmp_path / "home")


def through_the_store(ledger: Ledger) -> LedgerDirEvidence:
    """The evidence as it read a local store before: every read through `StoreBlobs`."""
    return LedgerDirEvidence(ledger.root, StoreBlobs(ledger.store),
                             note=ledger.trust_state().floor())


def walk(home: Path, evidence: Callable[[Ledger], LedgerDirEvidence], data: str
         ) -> dict[str, Any]:
    ledger = Ledger.open(home)
    v = LineageVerifier(evidence(ledger), ledger.policy(), index=ledger.trust_state(), data=data)
    doc = v.verify(Catalog(ledger).resolve(REF).digest).to_json()
    assert isinstance(doc, dict)
    return doc


def writable(path: Path) -> Path:
    path.chmod(0o644)
    return path


def envelope(home: Path, i: int = 0) -> Path:
    return envelope_of(home, batches(home)[i])


def manifest_of(home: Path) -> Manifest:
    ledger = Ledger.open(home)
    return Manifest.from_json(load_object(ledger.store.get(batches(home)[1]), "manifest"))


def swap_signature(home: Path) -> None:
    """The first batch's envelope with the second batch's signature in it."""
    mine, other = (json.loads(envelope(home, i).read_bytes()) for i in (0, 1))
    mine["signatures"] = other["signatures"]
    writable(envelope(home)).write_bytes(json.dumps(mine, separators=(",", ":")).encode())


def duplicate_key(home: Path) -> None:
    """The first batch's envelope with its payloadType given twice."""
    path = writable(envelope(home))
    text = path.read_text()
    path.write_text(text.replace('"payloadType":', '"payloadType":"x","payloadType":', 1))


def directory_for_envelope(home: Path) -> None:
    path = envelope(home)
    path.unlink()
    path.mkdir()


def fifo_for_envelope(home: Path) -> None:
    path = envelope(home)
    path.unlink()
    os.mkfifo(path)


def blob_path(home: Path, digest: str) -> Path:
    return Ledger.open(home).store.path_of(digest)


def directory_for_data_blob(home: Path) -> None:
    path = blob_path(home, manifest_of(home).files[0].digest)
    path.unlink()
    path.mkdir()


ATTACKS: dict[str, Callable[[Path], None]] = {
    "sound": lambda home: None,
    "envelope changed": lambda home: flip(envelope(home)),
    "signature swapped": swap_signature,
    "duplicate key": duplicate_key,
    "envelope missing": lambda home: envelope(home, 1).unlink(),
    "a directory for the envelope": directory_for_envelope,
    "a FIFO for the envelope": fifo_for_envelope,
    "data blob changed": lambda home: flip(blob_path(home, manifest_of(home).files[0].digest)),
    "data blob missing": lambda home: blob_path(home, manifest_of(home).files[0].digest).unlink(),
    "a directory for a data blob": directory_for_data_blob,
    "manifest missing": lambda home: blob_path(home, batches(home)[1]).unlink(),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_the_one_step_reads_report_what_the_store_reads_report(home: Path, attack: str) -> None:
    ATTACKS[attack](home)
    for data in ("size", "hash"):
        fast, slow = walk(home, ledger_evidence, data), walk(home, through_the_store, data)
        assert fast == slow
        failed = [c["detail"] for n in fast["nodes"] for c in n["checks"] if c["status"] == "fail"]
        # (a changed data blob of the same size is seen by the re-hash only)
        seen = attack != "sound" and not (data == "size" and attack == "data blob changed")
        assert bool(failed) == seen, failed


def every_blob(home: Path) -> list[str]:
    root = Ledger.open(home).store.root / "sha256"
    return sorted("sha256:" + p.name for p in root.glob("*/*/*"))


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_each_read_gives_what_the_store_gives(home: Path, attack: str) -> None:
    digests = every_blob(home)
    ATTACKS[attack](home)
    ledger = Ledger.open(home)
    fast, slow = ledger_evidence(ledger), through_the_store(ledger)
    assert len(digests) > 10
    for d in [*digests, "sha256:" + "0" * 64]:
        assert fast.blob(d) == slow.blob(d), d
        assert fast.blob_size(d) == slow.blob_size(d), d


def test_a_blob_that_cannot_be_read_is_refused_the_same_way(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = Ledger.open(home)
    fast, slow = ledger_evidence(ledger), through_the_store(ledger)
    digest = envelope(home).name

    def eio(path: str) -> bytes:
        raise OSError(errno.EIO, "Input/output error", path)

    for module in (store_module, ledger_evidence_module):
        monkeypatch.setattr(module, "read_local", eio)
    errors = []
    for ev in (fast, slow):
        with pytest.raises(StoreError) as e:
            ev.blob("sha256:" + digest)
        errors.append(str(e.value))
    assert errors[0] == errors[1] == f"object sha256:{digest}: present but unreadable"


def test_a_remote_store_reads_through_the_store(home: Path) -> None:
    """Only a local store is read in one step: the evidence of a store without a local
    directory answers through `StoreBlobs` (here, the same local store seen as remote)."""
    ledger = Ledger.open(home)
    ev = ledger_evidence(ledger)
    assert ledger.store.local_dir() == str(ledger.store.root)
    remote = type(ev)(ledger.root, StoreBlobs(ledger.store), note=ledger.trust_state().floor(),
                      local=None)
    for d in every_blob(home)[:20]:
        assert remote.blob(d) == ev.blob(d)
        assert remote.blob_size(d) == ev.blob_size(d)
