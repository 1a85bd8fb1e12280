"""verify.sealed_files.ciphertexts: a sealed batch's blobs are its ciphertexts, each bound by the
signed predicate to a manifest path, with the size the sealing gives its plaintext (the walk
through a sealed suite loads it: tests/e2e/test_evaluations.py); and the ``sealed`` member of a
rollout batch, which `RolloutBatch` names lazily (``verify.records``) and reads with `Sealed`."""

from __future__ import annotations

import pytest

from trajledger.verify.errors import FormatError
from trajledger.verify.manifest import FileEntry, Manifest
from trajledger.verify.predicates import ArtifactRef, RolloutBatch
from trajledger.verify.report import FAIL, Node
from trajledger.verify.sealed_files import Sealed, ciphertexts

A, B, C = ("sha256:" + c * 64 for c in "abc")


def manifest() -> Manifest:
    return Manifest.from_files([FileEntry("episodes.parquet", 100, "1" * 64),
                                FileEntry("steps.parquet", 70000, "2" * 64)])


def test_each_file_is_its_ciphertext() -> None:
    node = Node(C, "rollout-batch")
    files = {"episodes.parquet": (A, Sealed.ciphertext_size(100)),
             "steps.parquet": (B, Sealed.ciphertext_size(70000))}
    got = ciphertexts(manifest(), Sealed((), files, (), 1), node.fail)
    assert got == files and node.checks == []


def test_a_ciphertext_of_the_wrong_size_or_a_file_not_sealed_fails() -> None:
    node = Node(C, "rollout-batch")
    files = {"steps.parquet": (B, 70000)}
    got = ciphertexts(manifest(), Sealed((), files, (), 1), node.fail)
    assert got == files  # re-hashed all the same: its digest is bound
    assert [(c.what, c.status, c.detail) for c in node.checks] == [
        ("sealed", FAIL, "seals ['steps.parquet'], the manifest lists ['episodes.parquet', "
         "'steps.parquet']"),
        ("steps.parquet", FAIL, "sealed: ciphertext of 70000 bytes for 70000 plaintext bytes, "
         f"want {Sealed.ciphertext_size(70000)}"),
    ]


def test_a_batch_reads_its_sealed_member_with_this_module() -> None:
    sealed = Sealed((("ef" * 32, "AAAA"),), {"a": (A, 53)}, (), 1)
    batch = RolloutBatch("1", ArtifactRef("e", "1", B), "p", "g", {}, {}, sealed=sealed)
    got = RolloutBatch.from_json(batch.to_json(), "batch")
    assert isinstance(got.sealed, Sealed) and got.sealed == sealed
    bad = {**batch.to_json(), "sealed": {**sealed.to_json(), "recipients": []}}
    with pytest.raises(FormatError, match=r"^batch: sealed: want recipients, files and a"):
        RolloutBatch.from_json(bad, "batch")
