"""A dataset's card in its signed record (``dataset/v2``), as the verifier reads and checks it.

The typed predicate (``verify.predicates.DatasetV2``: v1's fields and the card's digest), the kind
registry reading either version (`Kind.read`, `Kind.predicate_types`, `Kind.documents`), and
lineage verification of the card (``verify.lineage``): the card's bytes are read whole and
checked against the digest the record names; one test per attack: changed bytes, a missing
blob, a record naming another digest than the manifest lists, a manifest without the card, a
card over the size limit; an erased card is reported as erased; a policy that does not allow
``dataset/v2`` fails the record and says how to allow it; a v1 record with a ``card`` field
has no card.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from trajledger import Ledger
from trajledger.ledger.artifacts import create_dataset, record_batch, register_environment
from trajledger.ledger.cards import ProducerCard
from trajledger.ledger.record import KIND_BY_PREDICATE, record_files
from trajledger.ledger.status import erase, record_policy
from trajledger.verify import predicates
from trajledger.verify.errors import FormatError
from trajledger.verify.kinds import KINDS
from trajledger.verify.ledger_dir import LedgerDirEvidence
from trajledger.verify.lineage import ERASED, OK, LineageVerifier, Report
from trajledger.verify.policy import TrustPolicy
from trajledger.verify.report import FAIL
from trajledger.verify.statement import Statement

D = "sha256:" + "ab" * 32
CARD = b"""
description = "Grid rollouts"
[collection]
process = "simulated"
[consent]
obtained = "not applicable: no people"
[retention]
policy = "two years"
[personal_information]
contains = false
[uses]
intended = ["tests"]
[access]
conditions = "internal"
"""
POLICY = """\
name = "cards"
serial = 1
{extra}
[roles.producer]
keys = ["keys/vendor.pub"]
[roles.approver]
keys = ["keys/approver.pub"]
[roles.log]
vkeys = ["{vkey}"]
"""


def rows(seed: int) -> list[dict[str, Any]]:
    return [{"episode_id": f"e{seed}", "step": s, "obs": [float(s)], "action": [0.0],
             "reward": 1.0, "terminated": s == 2, "truncated": False} for s in range(3)]


class World:
    """A ledger with one batch and a dataset with a card."""

    def __init__(self, root: Path, extra: str = "") -> None:
        self.home = root / "ledger"
        self.ledger = Ledger.init(self.home, origin="test/cards")
        self.vendor = self.ledger.keys.create("vendor", encrypt=False)
        approver = self.ledger.keys.create("approver", encrypt=False)
        self.policy_path = self.home / "policy.toml"
        self.policy_path.write_text(POLICY.format(vkey=self.ledger.log.vkey, extra=extra))
        record_policy(self.ledger, self.policy_path, [approver])
        register_environment(self.ledger, "grid", "1", self.vendor, source="tests")
        self.batch = record_batch(self.ledger, rows(1), env="grid@1", policy="random",
                                  signer=self.vendor, licence="CC-BY-4.0").recorded.digest
        self.card = ProducerCard.from_toml(CARD)

    def policy(self) -> TrustPolicy:
        return TrustPolicy.from_toml(self.policy_path.read_bytes(), self.home)

    def verify(self, digest: str) -> Report:
        return LineageVerifier(LedgerDirEvidence(self.home), self.policy()).verify(digest)

    def carded(self, name: str = "ds") -> str:
        return create_dataset(self.ledger, name, "1", "train", [self.batch], self.vendor,
                              card=self.card).digest

    def blob(self, digest: str) -> Path:
        return self.ledger.store.path_of(digest)


def checks(report: Report, digest: str, what: str) -> list[tuple[str, str]]:
    return [(c.status, c.detail) for c in report.nodes[digest].checks if c.what == what]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


# -- the predicate and the registry ---------------------------------------------------------------


def test_v2_is_v1_with_the_cards_digest() -> None:
    fields = {"name": "d", "version": "1", "split": "train", "purpose": "train",
              "batches": [D], "card": D}
    typed = predicates.DatasetV2.from_predicate(fields)
    assert isinstance(typed, predicates.Dataset) and typed.card == D
    assert typed.written() == fields
    with pytest.raises(FormatError, match=r"\(dataset/v2\): card is missing"):
        predicates.DatasetV2.from_predicate({k: v for k, v in fields.items() if k != "card"})
    with pytest.raises(FormatError, match="card"):
        predicates.DatasetV2.from_predicate({**fields, "card": "sha256:AB"})
    # In v1 a card field is a field v1 does not know: kept, never read as a card.
    v1 = predicates.Dataset.from_predicate(fields)
    assert type(v1) is predicates.Dataset and v1.unrecognized == {"card": D}
    assert KINDS["dataset"].documents(v1) == {}
    assert KINDS["dataset"].documents(typed) == {"card.json": D}


def test_the_dataset_kind_reads_both_versions() -> None:
    kind = KINDS["dataset"]
    assert kind.predicate_types == (predicates.DATASET, predicates.DATASET_V2)
    assert KIND_BY_PREDICATE[predicates.DATASET_V2] == kind.name
    assert predicates.DATASET_V2 in predicates.ALL
    subject = [{"name": "d@1", "digest": {"sha256": "ab" * 32}}]
    body = {"name": "d", "version": "1", "split": "train", "batches": [D]}
    for ptype, cls, extra in ((predicates.DATASET, predicates.Dataset, {}),
                              (predicates.DATASET_V2, predicates.DatasetV2, {"card": D})):
        st = Statement.from_bytes(json.dumps({
            "_type": "https://in-toto.io/Statement/v1", "subject": subject,
            "predicateType": ptype, "predicate": {**body, **extra}}).encode())
        assert type(kind.read(st, "x")) is cls
    st = Statement.from_bytes(json.dumps({
        "_type": "https://in-toto.io/Statement/v1", "subject": subject,
        "predicateType": predicates.APPROVAL, "predicate": body}).encode())
    with pytest.raises(FormatError, match=r"want https://trajledger.dev/attestation/dataset/v1 "
                       r"or https://trajledger.dev/attestation/dataset/v2"):
        kind.read(st, "x")


# -- verification ---------------------------------------------------------------------------------


def test_a_card_is_recorded_in_the_manifest_and_named_by_the_record(world: World) -> None:
    digest = world.carded()
    report = world.verify(digest)
    assert report.ok, report.failures()
    assert checks(report, digest, "card.json") == [
        (OK, f"{len(world.card.canonical_bytes())} bytes, the digest its signed record names")]
    assert world.ledger.store.get_verified(world.card.digest) == world.card.canonical_bytes()
    # A dataset without a card is still a v1 record, and has no card check.
    plain = create_dataset(world.ledger, "plain", "1", "train", [world.batch],
                           world.vendor).digest
    assert checks(world.verify(plain), plain, "card.json") == []


def test_changed_card_bytes_fail(world: World) -> None:
    digest = world.carded()
    path = world.blob(world.card.digest)
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x01  # same size, other bytes
    path.write_bytes(bytes(data))
    report = world.verify(digest)
    (status, detail), = checks(report, digest, "card.json")
    assert status == FAIL
    assert detail.startswith("tampered: content hashes to sha256:") and detail.endswith(
        f", want {world.card.digest[:19]}…")
    path.write_bytes(bytes(data) + b" ")
    (status, detail), = checks(world.verify(digest), digest, "card.json")
    size = len(world.card.canonical_bytes())
    assert (status, detail) == (FAIL, f"tampered: {size + 1} bytes, want {size} (blob "
                                      f"{world.card.digest[:19]}…)")


def test_a_missing_card_fails_and_an_erased_one_is_erased(world: World) -> None:
    digest = world.carded()
    os.unlink(world.blob(world.card.digest))
    (status, detail), = checks(world.verify(digest), digest, "card.json")
    assert (status, detail) == (FAIL, f"blob {world.card.digest[:19]}… is missing (exports "
                                      "carry it, with data or without)")
    erase(world.ledger, "ds@1", world.vendor, reason="retention")
    report = world.verify(digest)
    assert report.ok, report.failures()
    (status, detail), = checks(report, digest, "card.json")
    assert status == ERASED and detail.startswith("retention (log index ")
    assert "card.json deleted" in detail


def _signed_v2(world: World, files: dict[str, bytes], card: str) -> str:
    tmp = world.home / "tmp" / "crafted"
    tmp.mkdir(parents=True)
    paths = {}
    for name, data in files.items():
        (tmp / name).write_bytes(data)
        paths[name] = tmp / name
    predicate = predicates.DatasetV2("crafted", "1", "train", (world.batch,), card=card)
    return record_files(world.ledger, paths, world.vendor, predicates.DATASET_V2,
                        predicate.written(), name="crafted@1").digest


def test_a_record_naming_another_card_than_the_manifest_fails(world: World) -> None:
    other = ProducerCard.from_toml(CARD.replace(b"Grid rollouts", b"Other rollouts"))
    digest = _signed_v2(world, {"dataset.json": b"{}", "card.json": world.card.canonical_bytes()},
                        other.digest)
    (status, detail), = checks(world.verify(digest), digest, "card.json")
    assert (status, detail) == (
        FAIL, f"the signed record names card.json {other.digest[:19]}…, the manifest lists "
              f"{world.card.digest[:19]}…")


def test_a_record_whose_manifest_has_no_card_fails(world: World) -> None:
    digest = _signed_v2(world, {"dataset.json": b"{}"}, world.card.digest)
    (status, detail), = checks(world.verify(digest), digest, "card.json")
    assert (status, detail) == (FAIL, f"the signed record names card.json "
                                      f"{world.card.digest[:19]}…, the manifest does not list it")


def test_a_card_over_the_limit_is_not_read(world: World) -> None:
    big = b"{" + b" " * predicates.CARD_MAX_BYTES + b"}"
    from trajledger.verify.digest import digest_bytes

    digest = _signed_v2(world, {"dataset.json": b"{}", "card.json": big}, digest_bytes(big))
    (status, detail), = checks(world.verify(digest), digest, "card.json")
    assert (status, detail) == (FAIL, f"{len(big)} bytes, want at most "
                                      f"{predicates.CARD_MAX_BYTES}")


def test_a_policy_without_v2_fails_the_record_and_says_how_to_allow_it(tmp_path: Path) -> None:
    listed = [t for t in sorted(predicates.ALL) if t != predicates.DATASET_V2]
    extra = "allowed_predicate_types = [" + ", ".join(f'"{t}"' for t in listed) + "]"
    world = World(tmp_path, extra)
    # Recording is refused up front: every verifier under this policy would fail the record.
    from trajledger.verify.errors import PolicyError

    size = world.ledger.log.size
    with pytest.raises(PolicyError, match=r"a dataset with a card is recorded as "
                       r"https://trajledger.dev/attestation/dataset/v2, which the policy in "
                       r"force \('cards' serial 1\) does not allow; add it to "
                       r"allowed_predicate_types"):
        world.carded()
    assert world.ledger.log.size == size
    # A record made anyway (another tool, another policy) fails verification with a hint.
    digest = _signed_v2(world, {"dataset.json": b"{}",
                                "card.json": world.card.canonical_bytes()}, world.card.digest)
    (status, detail), = checks(world.verify(digest), digest, "record")
    assert status == FAIL
    assert detail == (
        f"dataset record {size}: predicate type {predicates.DATASET_V2} is not allowed by the "
        "policy; add it to allowed_predicate_types to accept such records")
