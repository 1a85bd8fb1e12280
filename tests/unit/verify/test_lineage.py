"""Lineage verification (``verify.lineage``) on a small ledger, read through ``Evidence``.

The report tree (``Check``): short failure paths from the nearest anchor, counts, erased
nodes, rendering. Then the verifier, one test per attack on the evidence: a log checkpoint not
signed by the policy's log key, a missing witness cosignature, a broken hash chain, an entry
not included, a missing or replaced envelope, a record by the wrong role; and the rules:
revocations fail, erasures are reported (only for blobs a verified erasure lists), unverifiable
status records are ignored, approvals count only before the use and for the purpose, and a
holdout recorded after a checkpoint does not taint it. ``check_known_checkpoint`` catches a
fork and a rollback.

Evidence tampering goes through `TamperedEvidence`, an in-memory wrapper over the ledger
directory, so the ledger itself stays sound.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trajledger.ledger.artifacts import (
    batch_files,
    create_dataset,
    record_batch,
    register_environment,
    register_evaluator,
)
from trajledger.ledger.home import Ledger
from trajledger.ledger.keys import KeyStore, Signer
from trajledger.ledger.record import record_files, record_statement
from trajledger.ledger.status import approve, erase, record_policy, revoke
from trajledger.runner.rollouts import run_policy
from trajledger.runner.train import train
from trajledger.verify import predicates
from trajledger.verify.checkpoint import Checkpoint
from trajledger.verify.evidence import LedgerDirEvidence
from trajledger.verify.lineage import ERASED, FAIL, INFO, OK, Check, LineageVerifier
from trajledger.verify.note import format_signature_line, verifier_from_vkey, vkey_string
from trajledger.verify.policy import TrustPolicy

POLICY = """\
name = "lineage"
serial = 1
[roles.producer]
keys = ["keys/vendor.pub"]
[roles.approver]
keys = ["keys/a.pub", "keys/b.pub"]
threshold = {threshold}
[roles.trainer]
keys = ["keys/trainer.pub"]
[roles.log]
vkeys = ["{vkey}"]
{extra}
"""


def clock() -> int:
    return 1_700_000_000_000_000


# -- Check ----------------------------------------------------------------------------------------


def test_failure_paths_start_at_the_nearest_anchor() -> None:
    root = Check("lineage of x", anchor=True)
    art = root.add(Check("checkpoint c", anchor=True))
    batch = art.add(Check("rollout-batch b", anchor=True))
    files = batch.add(Check("files"))
    files.fail("steps.parquet: missing")
    art.add(Check("use")).add(Check("approvals", FAIL, "1 of 2"))
    batch.fail("revoked")
    assert root.failures() == [
        "rollout-batch b > files: steps.parquet: missing",
        "rollout-batch b: revoked",
        "checkpoint c > use > approvals: 1 of 2",
    ]
    assert root.count() == (8, 3)
    assert not root.ok and files.status == OK and not files.ok


def test_shared_subtrees_count_once_and_render_once() -> None:
    root = Check("root", anchor=True)
    shared = Check("environment e", anchor=True, children=[Check("files", OK, "1 file")])
    shared.add(Check("erased", ERASED, "consent"))
    a = root.add(Check("a"))
    b = root.add(Check("b"))
    a.add(shared)
    b.add(shared)
    b.add(Check("note", INFO, "fyi"))
    assert root.count() == (7, 0)
    assert root.erased() == 1
    assert root.render() == [
        "✓ root",
        "  ✓ a",
        "    ✓ environment e",
        "      ✓ files — 1 file",
        "      ∅ erased — consent",
        "  ✓ b",
        "    ✓ environment e (shown above)",
        "    · note — fyi",
    ]
    shared.fail("bad")
    assert root.failures() == ["environment e: bad"]
    assert root.render()[0] == "✗ root"
    assert root.to_json()["status"] == "fail"
    assert root.to_json()["children"][1]["children"][0]["status"] == "fail"


# -- a small ledger -------------------------------------------------------------------------------


@dataclass
class Setup:
    root: Path
    ledger: Ledger
    keys: dict[str, Signer]
    batch: str
    dataset: str
    checkpoint: str

    def policy(self, threshold: int = 2, extra: str = "") -> TrustPolicy:
        text = POLICY.format(threshold=threshold, vkey=self.ledger.log.vkey, extra=extra)
        return TrustPolicy.from_toml(text.encode(), self.root)

    def verifier(self, evidence: Any = None, **kw: Any) -> LineageVerifier:
        return LineageVerifier(
            evidence or LedgerDirEvidence(self.root), kw.pop("policy", None) or self.policy(), **kw
        )

    def index_of(self, subject: str, kind: str) -> int:
        v = self.verifier()
        return v.records(subject, kind)[0]


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    root = tmp_path / "home"
    ledger = Ledger.init(root, origin="test/lineage")
    keys = {k: ledger.keys.create(k, encrypt=False) for k in ("vendor", "a", "b", "trainer", "x")}
    path = root / "policy.toml"
    path.write_text(POLICY.format(threshold=2, vkey=ledger.log.vkey, extra=""))
    record_policy(ledger, path, [keys["a"], keys["b"]])
    register_environment(ledger, "env", "1", keys["vendor"], gymnasium_id="CartPole-v1")
    register_evaluator(ledger, "ev", "1", "deterministic", keys["vendor"])
    played = run_policy(None, "CartPole-v1", 3, 0, policy_version="random", clock=clock)
    batch = record_batch(
        ledger,
        played.steps,
        episodes=played.episodes,
        env="env@1",
        evaluator="ev@1",
        policy="random",
        signer=keys["vendor"],
        name="b",
    ).recorded.digest
    ds = create_dataset(ledger, "ds", "1", "train", [batch], keys["vendor"]).recorded.digest
    for a in ("a", "b"):
        approve(ledger, "ds@1", keys[a])
    policy = TrustPolicy.from_toml(path.read_bytes(), root)
    ckpt = train(ledger, "ds@1", "bc", keys["trainer"], policy, name="m", version="1").digest
    return Setup(root, ledger, keys, batch, ds, ckpt)


class TamperedEvidence:
    """The ledger directory, with some answers replaced (an attacker between disk and verifier)."""

    def __init__(self, root: Path) -> None:
        self.inner = LedgerDirEvidence(root)
        self.entry_bytes: dict[int, bytes] = {}
        self.blobs: dict[str, bytes | None] = {}
        self.note: bytes | None = None

    def checkpoint_note(self) -> bytes:
        return self.note if self.note is not None else self.inner.checkpoint_note()

    def entries(self) -> Iterator[tuple[int, bytes]]:
        for i, e in self.inner.entries():
            yield i, self.entry_bytes.get(i, e)

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        return self.inner.inclusion_proof(index, size)

    def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]:
        return self.inner.consistency_proof(old_size, new_size)

    def blob(self, digest: str) -> bytes | None:
        return self.blobs[digest] if digest in self.blobs else self.inner.blob(digest)

    def has_blob(self, digest: str) -> bool:
        return self.blob(digest) is not None

    def blob_path(self, digest: str) -> Path | None:
        return None if self.blobs.get(digest, b"") is None else self.inner.blob_path(digest)


def sign_note(s: Setup, size: int, root: bytes) -> bytes:
    key = KeyStore(s.root / "log-key").signer("log")
    verifier = verifier_from_vkey(s.ledger.log.vkey)
    text = Checkpoint("test/lineage", size, root).to_text()
    return text + b"\n" + format_signature_line("test/lineage", verifier.key_hash, key.sign(text))


# -- the good path --------------------------------------------------------------------------------


def test_a_sound_lineage(setup: Setup) -> None:
    report = setup.verifier().verify(setup.checkpoint)
    assert report.ok, report.failures()
    lines = "\n".join(report.render())
    for part in (
        "✓ log — test/lineage size ",
        "✓ checkpoint m@1 (",
        "✓ dataset ds@1 (",
        "✓ rollout-batch b (",
        "✓ environment env@1 (",
        "✓ evaluator ev@1 (",
        "✓ training on dataset ds@1 (log index ",
        "✓ approvals — 2 of 2 required approver(s) for 'train'",
        "✓ not in a holdout or regression split",
        "· trainer-code trainer-code:bc — sha256:",
    ):
        assert part in lines, part
    # Any kind verifies on its own.
    for digest in (setup.batch, setup.dataset):
        assert setup.verifier().verify(digest).ok


def test_an_unknown_digest(setup: Setup) -> None:
    digest = "sha256:" + "0" * 64
    report = setup.verifier().verify(digest)
    assert report.failures() == [
        f"lineage of sha256:000000000000…: {digest}: no artifact with this digest is recorded "
        "in the log"
    ]


# -- the log ---------------------------------------------------------------------------------------


def test_a_checkpoint_by_another_log_key(setup: Setup) -> None:
    other = vkey_string("test/lineage", bytes(32))
    policy = TrustPolicy.from_toml(
        POLICY.format(threshold=2, vkey=other, extra="").encode(), setup.root
    )
    report = setup.verifier(policy=policy).verify(setup.checkpoint)
    assert report.failures()[0].startswith("log: checkpoint signed by 0 of 1 trusted log key(s) (")
    assert "no checkpoint" not in report.failures()[0]


def test_a_policy_without_a_log_key(setup: Setup) -> None:
    policy = TrustPolicy.from_toml(
        POLICY.format(threshold=2, vkey="", extra="").replace('vkeys = [""]', "").encode(),
        setup.root,
    )
    report = setup.verifier(policy=policy).verify(setup.checkpoint)
    assert report.failures()[0] == "log: the policy names no log key (roles.log.vkeys)"


def test_a_required_witness_is_missing(setup: Setup) -> None:
    witness = vkey_string("witness", bytes(range(32)), 0x04)
    policy = setup.policy(extra=f'[roles.witness]\nvkeys = ["{witness}"]\nthreshold = 1')
    failures = setup.verifier(policy=policy).verify(setup.checkpoint).failures()
    assert len(failures) == 1 and failures[0].startswith("log > witnesses: ")


def test_a_broken_hash_chain_and_an_entry_not_included(setup: Setup) -> None:
    ev = TamperedEvidence(setup.root)
    index = setup.index_of(setup.batch, "rollout-batch")
    entry = json.loads(dict(ev.inner.entries())[index])
    entry["prev"] = "ab" * 32
    ev.entry_bytes[index] = json.dumps(entry, separators=(",", ":"), sort_keys=True).encode()
    failures = setup.verifier(ev).verify(setup.checkpoint).failures()
    assert f"log: entry {index}: prev is abababababababab…, want " in failures[0]
    assert failures[0].endswith("(hash chain broken)")
    assert any(
        f": log entry {index}: not included under the checkpoint: " in f for f in failures
    ), failures


def test_a_missing_or_replaced_envelope(setup: Setup) -> None:
    index = setup.index_of(setup.batch, "rollout-batch")
    entry = json.loads(dict(LedgerDirEvidence(setup.root).entries())[index])
    ev = TamperedEvidence(setup.root)
    ev.blobs[entry["envelope"]] = None
    failures = setup.verifier(ev).verify(setup.checkpoint).failures()
    assert failures == [
        f"rollout-batch {setup.batch[:19]}…: log entry {index}: envelope "
        f"{entry['envelope'][:19]}… is missing"
    ]
    ev.blobs[entry["envelope"]] = b"{}"
    failures = setup.verifier(ev).verify(setup.checkpoint).failures()
    assert len(failures) == 1
    assert f"log entry {index}: envelope hashes to sha256:" in failures[0]


def test_a_record_signed_by_the_wrong_role(setup: Setup) -> None:
    # The trainer records a "batch": it verifies as nothing.
    record_statement(
        setup.ledger,
        "fake",
        "sha256:" + "1" * 64,
        predicates.ROLLOUT_BATCH,
        {"x": 1},
        setup.keys["trainer"],
    )
    report = setup.verifier().verify("sha256:" + "1" * 64)
    (line,) = report.failures()
    assert (
        "no signature by a trusted key: 0 of 1 required signature(s) verified; the envelope "
        f"names key {setup.keys['trainer'].keyid[:12]} (trainer role), want producer key(s)" in line
    )


def test_a_predicate_type_the_policy_does_not_allow(setup: Setup) -> None:
    allowed = sorted(predicates.ALL - {predicates.EVALUATOR})
    extra = "allowed_predicate_types = " + json.dumps(allowed)
    text = extra + "\n" + POLICY.format(threshold=2, vkey=setup.ledger.log.vkey, extra="")
    policy = TrustPolicy.from_toml(text.encode(), setup.root)
    failures = setup.verifier(policy=policy).verify(setup.batch).failures()
    (line,) = failures
    assert line.startswith("evaluator sha256:")
    assert line.endswith(
        ": predicate type https://trajledger.dev/attestation/evaluator/v1 is not allowed by "
        "the policy"
    )


# -- status: revocation and erasure ---------------------------------------------------------------


def test_a_revocation_fails_the_lineage(setup: Setup) -> None:
    rec = revoke(setup.ledger, setup.batch, setup.keys["a"], reason="wrong env")
    failures = setup.verifier().verify(setup.checkpoint).failures()
    assert failures == [
        f"rollout-batch b ({setup.batch[:19]}…) > revoked: wrong env (log index {rec.index})"
    ]


def test_an_unverifiable_revocation_is_ignored(setup: Setup) -> None:
    rec = record_statement(
        setup.ledger,
        "b",
        setup.batch,
        predicates.REVOCATION,
        {"reason": "sabotage", "revokedAt": "2024-01-01T00:00:00Z"},
        setup.keys["x"],
    )
    report = setup.verifier().verify(setup.checkpoint)
    assert report.ok
    lines = "\n".join(report.render())
    assert (
        f"· revocation record {rec.index} — ignored: revocation record {rec.index}: no "
        "signature by a trusted key" in lines
    )


@pytest.mark.parametrize("deep", [False, True])
def test_an_erasure_is_reported_not_failed(setup: Setup, deep: bool) -> None:
    rec, deleted = erase(setup.ledger, setup.batch, setup.keys["vendor"], reason="consent")
    assert deleted == 2
    report = setup.verifier(deep=deep).verify(setup.checkpoint)
    assert report.ok, report.failures()
    assert report.erased() == 1
    assert any(
        line.endswith(
            f"∅ erased — consent (log index {rec.index}); 2 of 2 blob(s) deleted; "
            "digests and signed records still verify"
        )
        for line in report.render()
    )


def test_a_missing_blob_is_excused_only_by_an_erasure_listing_it(setup: Setup) -> None:
    files = batch_files(setup.ledger, setup.batch)
    os.unlink(setup.ledger.store.path_of(files["episodes.parquet"]))
    failures = setup.verifier().verify(setup.checkpoint).failures()
    assert failures == [
        f"rollout-batch b ({setup.batch[:19]}…) > files: episodes.parquet: blob "
        f"{files['episodes.parquet'][:19]}… is missing"
    ]
    # Another artifact's erasure listing the same blob (content addressing shares blobs).
    body = {
        "reason": "legal",
        "erasedAt": "2024-01-01T00:00:00Z",
        "blobs": [files["episodes.parquet"]],
    }
    other = record_statement(
        setup.ledger,
        "other",
        "sha256:" + "2" * 64,
        predicates.ERASURE,
        body,
        setup.keys["vendor"],
    )
    report = setup.verifier().verify(setup.checkpoint)
    assert report.ok, report.failures()
    assert any(
        f"deleted by the erasure of sha256:222222222222… (log index {other.index})" in line
        for line in report.render()
    )


def test_an_erasure_by_an_unknown_key_excuses_nothing(setup: Setup) -> None:
    files = batch_files(setup.ledger, setup.batch)
    body = {"reason": "legal", "erasedAt": "2024-01-01T00:00:00Z", "blobs": sorted(files.values())}
    record_statement(setup.ledger, "b", setup.batch, predicates.ERASURE, body, setup.keys["x"])
    for d in files.values():
        os.unlink(setup.ledger.store.path_of(d))
    failures = setup.verifier().verify(setup.checkpoint).failures()
    assert len(failures) == 2 and all("is missing" in f for f in failures)


# -- the rules of training -------------------------------------------------------------------------


def test_approvals_after_the_use_do_not_count(setup: Setup) -> None:
    # The checkpoint was trained under a 2-of-2 policy; a third approver added later, with a
    # 3-of-3 threshold, must have approved before the checkpoint: it did not.
    c = setup.ledger.keys.create("c", encrypt=False)
    policy = TrustPolicy.from_toml(
        POLICY.format(threshold=3, vkey=setup.ledger.log.vkey, extra="")
        .replace('"keys/b.pub"]', '"keys/b.pub", "keys/c.pub"]')
        .encode(),
        setup.root,
    )
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {"purpose": "train", "approvedAt": now, "expires": "2999-01-01T00:00:00Z"}
    # Recorded directly: the ledger's policy in force does not know c yet.
    late = record_statement(setup.ledger, "ds@1", setup.dataset, predicates.APPROVAL, body, c)
    ckpt_index = setup.index_of(setup.checkpoint, "checkpoint")
    failures = setup.verifier(policy=policy).verify(setup.checkpoint).failures()
    assert failures == [
        f"training on dataset ds@1 (log index {ckpt_index}) > approvals: 2 of 3 required "
        f"approver(s) for 'train'; approval {late.index} was logged after the use "
        f"(log index {ckpt_index})"
    ]


def test_approvals_are_judged_at_the_time_of_use(setup: Setup) -> None:
    # Verifying a year later: the approvals had not expired when the checkpoint was made.
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=365)
    assert setup.verifier(now=later).verify(setup.checkpoint).ok


def test_a_holdout_recorded_after_the_checkpoint_does_not_taint_it(setup: Setup) -> None:
    path = setup.root / "tmp" / "h.json"
    path.write_text("{}")
    body = {
        "name": "h",
        "version": "1",
        "split": "holdout",
        "purpose": "eval",
        "batches": [setup.batch],
    }
    rec = record_files(
        setup.ledger,
        {"dataset.json": path},
        setup.keys["vendor"],
        predicates.DATASET,
        body,
        name="h@1",
    )
    v = setup.verifier()
    assert v.verify(setup.checkpoint).ok
    use = v.dataset_use(setup.dataset, rec.index + 1, dt.datetime.now(dt.UTC))
    assert use.failures() == [
        f"training on dataset ds@1 (log index {rec.index + 1}) > not in a holdout or regression "
        f"split > rollout-batch {setup.batch[:19]}…: is in holdout dataset h@1 (log index "
        f"{rec.index})"
    ]


# -- fork and rollback -----------------------------------------------------------------------------


def test_check_known_checkpoint(setup: Setup) -> None:
    v = setup.verifier()
    assert v.checkpoint is not None
    size, root = v.checkpoint.size, v.checkpoint.root
    v.check_known_checkpoint(sign_note(setup, size, root))
    v.check_known_checkpoint(LedgerDirEvidence(setup.root).checkpoint_note())
    assert v.log.ok

    old = setup.verifier()
    note = old.evidence.checkpoint_note()
    approve(setup.ledger, "ds@1", setup.keys["a"], note="more")
    newer = setup.verifier()
    newer.check_known_checkpoint(note)
    assert newer.log.ok
    assert newer.log.children[-1].detail == f"size {size} -> {size + 1}"

    forked = setup.verifier()
    forked.check_known_checkpoint(sign_note(setup, size + 1, bytes(32)))
    (line,) = forked.log.failures()
    assert line.startswith(
        f"log > consistent with the checkpoint seen before: log fork or rollback: checkpoint "
        f"fork for test/lineage: two roots at size {size + 1}: {'00' * 32} and "
    )
    rolled = setup.verifier()
    rolled.check_known_checkpoint(sign_note(setup, size + 5, bytes(32)))
    assert rolled.log.failures() == [
        "log > consistent with the checkpoint seen before: log fork or rollback: checkpoint "
        f"rollback for test/lineage: size {size + 1} is smaller than the {size + 5} seen before"
    ]
    inconsistent = setup.verifier()
    inconsistent.check_known_checkpoint(sign_note(setup, size - 1, bytes(32)))
    assert "are not consistent" in inconsistent.log.failures()[0]

    stranger = setup.verifier()
    other = Signer.generate("log")
    text = Checkpoint("test/lineage", size, root).to_text()
    forged = text + b"\n" + format_signature_line("test/lineage", b"\0\0\0\0", other.sign(text))
    stranger.check_known_checkpoint(forged)
    assert "checkpoint seen before: not signed by a trusted log key" in stranger.log.failures()[0]


def test_unreadable_entries_fail_the_log(setup: Setup) -> None:
    class Unreadable(TamperedEvidence):
        def entries(self) -> Iterator[tuple[int, bytes]]:
            yield from list(super().entries())[:2]
            raise FileNotFoundError(2, "No such file or directory", "tile/entries/000.p/9")

    report = setup.verifier(Unreadable(setup.root)).verify(setup.checkpoint)
    assert report.failures()[0] == (
        "log: entries cannot be read: tile/entries/000.p/9: No such file or directory"
    )
