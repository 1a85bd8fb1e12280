"""Lineage verification (``verify.lineage``) on a small ledger, read through ``Evidence``.

The report (``Report``): a DAG of nodes keyed by digest, each verified once; failure lines
``<node> > <check>: <detail>``; counts; erased checks; rendering each node once ("see above");
JSON as a node table plus an edge list. Then the verifier, one test per attack on the evidence:
a log checkpoint not signed by the policy's log key, a missing witness cosignature, a broken hash
chain, an entry not included, a missing or replaced envelope, a record by the wrong role; and the
rules: revocations fail, erasures are reported (only for blobs a verified erasure lists),
status records that verify but are not under the policy are ignored while missing or damaged
ones fail (fail closed), approvals count only before the use and for the purpose, and a holdout
recorded after a checkpoint does not taint it. ``check_known_checkpoint`` catches a fork and a
rollback.

Evidence tampering goes through `TamperedEvidence`, an in-memory wrapper over the ledger
directory, so the ledger itself stays sound.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import inspect
import itertools
import json
import os
import sys
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import testkit
from click.testing import CliRunner

from trajledger import Ledger
from trajledger.ledger.artifacts import (
    batch_files,
    create_dataset,
    record_batch,
    register_environment,
    register_evaluator,
)
from trajledger.ledger.encode import checkpoint_text, format_signature_line, vkey_string
from trajledger.ledger.files import media_type_for
from trajledger.ledger.keys import KeyStore, Signer
from trajledger.ledger.record import record_files, record_statement
from trajledger.ledger.status import approve, erase, record_policy, revoke
from trajledger.runner.admission import DataRefusedError
from trajledger.runner.cli import main
from trajledger.runner.rollouts import run_policy
from trajledger.runner.train import train
from trajledger.verify import blobs as blobs_module
from trajledger.verify import predicates
from trajledger.verify.checkpoint import Checkpoint
from trajledger.verify.compact import CompactRange
from trajledger.verify.digest import digest_bytes
from trajledger.verify.impact import impact, with_records
from trajledger.verify.ledger_dir import LedgerDirEvidence
from trajledger.verify.lineage import (
    ERASED,
    INFO,
    Edge,
    LineageVerifier,
    Node,
    Report,
)
from trajledger.verify.manifest import FileEntry, Manifest
from trajledger.verify.note import verifier_from_vkey
from trajledger.verify.policy import TrustPolicy
from trajledger.verify.report import FAIL
from trajledger.verify.report_json import REPORT_FORMAT

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


# -- Report ---------------------------------------------------------------------------------------


def _diamond() -> Report:
    """c -> d1 -> b, c -> d2 -> b: b is reached twice."""
    nodes = {
        "log": Node("log", "log", name="log"),
        "sha256:" + "c" * 64: Node("sha256:" + "c" * 64, "checkpoint", "m", "1", 9),
        "sha256:" + "1" * 64: Node("sha256:" + "1" * 64, "dataset", "d1", "1", 5),
        "sha256:" + "2" * 64: Node("sha256:" + "2" * 64, "dataset", "d2", "1", 6),
        "sha256:" + "b" * 64: Node("sha256:" + "b" * 64, "rollout-batch", "b", "", 3),
    }
    c, d1, d2, b = ("sha256:" + x * 64 for x in "c12b")
    nodes[b].add("files", "ok", "1 file")
    nodes[b].add("erased", ERASED, "consent")
    nodes[d2].add("note", INFO, "fyi")
    edges = [Edge(c, d1, "dataset"), Edge(c, d2, "dataset"), Edge(d1, b, "batch"),
             Edge(d2, b, "batch")]
    return Report(c, ["log", c], nodes, edges)


def test_a_node_reached_twice_is_counted_and_drawn_once() -> None:
    r = _diamond()
    assert r.count() == (3, 0) and r.erased() == 1 and r.ok
    assert r.render() == [
        "✓ OK: checkpoint m@1 (sha256:cccccccccccc…): 3 checks passed (1 erased: data deleted, "
        "digests verified)",
        "✓ log",
        "✓ checkpoint m@1 (sha256:cccccccccccc…) — log index 9",
        "    dataset → ✓ dataset d1@1 (sha256:111111111111…) — log index 5",
        "        batch → ∅ rollout-batch b (sha256:bbbbbbbbbbbb…) — log index 3",
        "            ✓ files — 1 file",
        "            ∅ erased — consent",
        "    dataset → ✓ dataset d2@1 (sha256:222222222222…) — log index 6",
        "        · note — fyi",
        "        batch → ∅ rollout-batch b (sha256:bbbbbbbbbbbb…) (see above)",
    ]
    r.nodes["sha256:" + "b" * 64].fail("steps.parquet", "missing")
    assert not r.ok
    assert r.failures() == ["rollout-batch b (sha256:bbbbbbbbbbbb…) > steps.parquet: missing; "
                            "and 3 records that depend on it"]


def test_a_failing_lineage_looks_failing() -> None:
    """Issue 18: what depends on a failing node fails too: the verdict comes first with the
    count of problems (each once), and every node built on the failure is marked ✗."""
    r = _diamond()
    c, d1, d2, b = ("sha256:" + x * 64 for x in "c12b")
    r.nodes[b].fail("revoked", "PII (log index 7)")
    assert r.failing() == {c, d1, d2, b}
    lines = r.render()
    assert lines[0] == ("✗ FAIL: checkpoint m@1 (sha256:cccccccccccc…): 1 problem(s) in 4 "
                        "checks, in 1 node(s); 3 more fail through their lineage")
    # Issue 19: the root cause once, right under the verdict, with what depends on it.
    assert lines[1] == ("  ✗ cause: rollout-batch b (sha256:bbbbbbbbbbbb…) > revoked: PII (log "
                        "index 7); and 3 records that depend on it")
    assert lines[3] == "✗ checkpoint m@1 (sha256:cccccccccccc…) — log index 9"
    assert lines[4] == ("    ✗ lineage — depends on 2 failing: dataset d1@1 "
                        "(sha256:111111111111…); dataset d2@1 (sha256:222222222222…)")
    assert not any(x.lstrip().startswith(("✓ checkpoint", "dataset → ✓")) for x in lines)
    doc = r.to_json()
    assert doc["failed"] == 1 and {n["lineage"] for n in doc["nodes"] if n["id"] != "log"} == {
        "fail"}
    # Downstream (impact), the same edges: everything built on the failing subject fails.
    down = Report(b, ["log", b], r.nodes, r.edges, "downstream")
    assert down.failing() == {c, d1, d2, b}
    assert down.verdict().startswith("✗ FAIL: rollout-batch b (sha256:bbbbbbbbbbbb…): 1 problem")


def test_a_long_chain_is_indented_to_depth_12_then_says_its_depth() -> None:
    """100 training iterations nest 300 levels: indenting each would make the text quadratic."""
    ids = [f"sha256:{i:02x}{'0' * 62}" for i in range(40)]
    nodes = {d: Node(d, "checkpoint", "m", str(i), i) for i, d in enumerate(ids)}
    edges = [Edge(a, b, "base-checkpoint") for a, b in itertools.pairwise(ids)]
    lines = Report(ids[0], [ids[0]], nodes, edges).render()[1:]  # after the verdict
    assert len(lines) == 40
    assert lines[12] == (" " * 48 + "base-checkpoint → ✓ checkpoint m@12 (sha256:0c0000000000…) "
                         "— log index 12")
    assert lines[39] == (" " * 48 + "[depth 39] base-checkpoint → ✓ checkpoint m@39 "
                         "(sha256:270000000000…) — log index 39")


def test_the_json_is_a_node_table_and_an_edge_list() -> None:
    doc = _diamond().to_json()
    assert doc["format"] == REPORT_FORMAT and doc["direction"] == "upstream"
    assert [n["id"][:8] for n in doc["nodes"]].count("sha256:b") == 1
    assert len(doc["edges"]) == 4
    assert doc["edges"][2] == {"from": "sha256:" + "1" * 64, "to": "sha256:" + "b" * 64,
                               "role": "batch"}
    assert doc["ok"] is True and doc["checks"] == 3 and doc["failed"] == 0


# -- a small ledger -------------------------------------------------------------------------------


@contextlib.contextmanager
def another_tool() -> Iterator[None]:
    """Record what trajledger's writer refuses to sign (a key without the kind's role in the
    policy in force, issue 18): as another tool, or an older trajledger, would. The verifier
    must judge such records all the same."""
    from trajledger.ledger import policy_state

    with pytest.MonkeyPatch.context() as m:
        m.setattr(policy_state, "check_signers", lambda *_a, **_k: None)
        yield


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

    def envelope_of(self, index: int) -> str:
        entry = json.loads(dict(LedgerDirEvidence(self.root).entries())[index])
        return str(entry["envelope"])


KEYS = ("vendor", "a", "b", "trainer", "x")


def build(root: Path) -> tuple[str, str, str]:
    """The small ledger at ``root``: keys `KEYS`, the policy (2 approvals), an environment and
    an evaluator, a batch of 3 random CartPole episodes, dataset ds@1 of it (approved by a and
    b), and checkpoint m@1 trained on it; returns the batch's, dataset's and checkpoint's
    digests."""
    ledger = Ledger.init(root, origin="test/lineage")
    keys = {k: ledger.keys.create(k, encrypt=False) for k in KEYS}
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
    return batch, ds, ckpt


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[tuple[str, str, str]]:
    return testkit.build_template(tmp_path_factory.mktemp("lineage"), build)


@pytest.fixture
def setup(template: testkit.Template[tuple[str, str, str]], tmp_path: Path) -> Setup:
    root = testkit.copy_template(template, tmp_path / "home")
    ledger = Ledger.open(root)
    keys = {k: ledger.keys.signer(k) for k in KEYS}
    return Setup(root, ledger, keys, *template.value)


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

    def key_handovers(self) -> list[bytes]:
        return self.inner.key_handovers()

    def extension(self) -> CompactRange | None:
        return None

    def blob(self, digest: str) -> bytes | None:
        return self.blobs[digest] if digest in self.blobs else self.inner.blob(digest)

    def has_blob(self, digest: str) -> bool:
        return self.blob(digest) is not None

    def blob_path(self, digest: str) -> Path | None:
        return None if self.blobs.get(digest, b"") is None else self.inner.blob_path(digest)

    def blob_size(self, digest: str) -> int | None:
        data = self.blob(digest)
        return None if data is None else len(data)

    def omitted(self, digest: str) -> bool:
        return False


def sign_note(s: Setup, size: int, root: bytes) -> bytes:
    key = KeyStore(s.root / "log-key").signer("log")
    verifier = verifier_from_vkey(s.ledger.log.vkey)
    text = checkpoint_text(Checkpoint("test/lineage", size, root))
    return text + b"\n" + format_signature_line("test/lineage", verifier.key_hash, key.sign(text))


DEPEND = "; and 2 records that depend on it"
"""The end of a root cause's line when the dataset and checkpoint above a batch depend on it."""


def label(kind: str, digest: str, ref: str = "") -> str:
    return f"{kind} {ref} ({digest[:19]}…)" if ref else f"{kind} {digest[:19]}…"


# -- the good path --------------------------------------------------------------------------------


def test_a_sound_lineage(setup: Setup) -> None:
    report = setup.verifier().verify(setup.checkpoint)
    assert report.ok, report.failures()
    lines = "\n".join(report.render())
    for part in (
        "✓ log test/lineage",
        "    ✓ checkpoint — size ",
        "✓ checkpoint m@1 (",
        "    dataset → ✓ dataset ds@1 (",
        "        batch → ✓ rollout-batch b (",
        "            environment → ✓ environment env@1 (",
        "            evaluator → ✓ evaluator ev@1 (",
        "    ✓ dataset ds@1: split — train",
        "    ✓ dataset ds@1: approvals — 2 of 2 required approver(s) for 'train'",
        "    ✓ dataset ds@1: not held out — no batch is in a holdout or regression split",
        "    · trainer-code — trainer-code:bc sha256:",
        "re-hashed",
    ):
        assert part in lines, part
    # Any kind verifies on its own.
    for digest in (setup.batch, setup.dataset):
        assert setup.verifier().verify(digest).ok


def test_each_artifact_is_verified_once(setup: Setup) -> None:
    v = setup.verifier()
    report = v.verify(setup.checkpoint)
    ids = [n["id"] for n in report.to_json()["nodes"]]
    assert len(ids) == len(set(ids)) == 6  # log, checkpoint, dataset, batch, env, evaluator
    # Verifying a second artifact of the same lineage reuses every node already verified.
    before = dict(v._records)
    again = v.verify(setup.dataset)
    assert again.ok and v._records == before


def test_an_interrupted_walk_stops_the_rehashing(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blobs_module, "GROUP_BLOBS", 1)  # each blob handed over at once
    v = setup.verifier()
    hashed: list[str] = []
    started = threading.Event()
    real = v.blobs.check

    def spy(digest: str, size: int, stop: threading.Event) -> str | None:
        hashed.append(digest)
        started.set()
        stop.wait(60)  # the first blob is still being hashed when the walk is interrupted
        return real(digest, size, stop)

    monkeypatch.setattr(v.blobs, "check", spy)

    def interrupted(*args: Any, **kw: Any) -> None:
        assert v.blobs.pool is not None  # the batch's blobs are being re-hashed during the walk
        assert started.wait(60)  # (on a loaded machine the pool's thread may start late)
        raise KeyboardInterrupt

    monkeypatch.setattr(v, "dataset_use", interrupted)
    with pytest.raises(KeyboardInterrupt):
        v.verify(setup.checkpoint)
    assert v.blobs.pool is None and v.blobs.stop.is_set() and not v.blobs.pending
    # What was dropped does not look verified.
    assert "not re-hashed: the verification was interrupted" in "\n".join(
        v.report(setup.checkpoint, ["log", setup.checkpoint]).render()
    )
    assert hashed, "the walk had started re-hashing before it was interrupted"
    # A whole walk re-hashes every blob and leaves no pool behind either.
    w = setup.verifier()
    report = w.verify(setup.checkpoint)
    assert report.ok and w.blobs.pool is None and "re-hashed" in "\n".join(report.render())


def test_skip_data_compares_sizes_and_says_so(setup: Setup) -> None:
    files = batch_files(setup.ledger, setup.batch)
    path = setup.ledger.store.path_of(files["steps.parquet"])
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    lines = "\n".join(setup.verifier(data="size").verify(setup.checkpoint).render())
    assert "size only, not re-hashed" in lines
    failures = setup.verifier().verify(setup.checkpoint).failures()
    assert failures == [
        f"{label('rollout-batch', setup.batch, 'b')} > steps.parquet: tampered: content hashes "
        f"to sha256:{failures[0].split('sha256:')[2][:12]}…, want {files['steps.parquet'][:19]}…"
        f"{DEPEND}"
    ]
    path.write_bytes(bytes(data[:10]))
    failures = setup.verifier(data="size").verify(setup.checkpoint).failures()
    assert failures == [
        f"{label('rollout-batch', setup.batch, 'b')} > steps.parquet: tampered: 10 bytes, want "
        f"{len(data)} (blob {files['steps.parquet'][:19]}…){DEPEND}"
    ]


def test_an_unknown_digest(setup: Setup) -> None:
    digest = "sha256:" + "0" * 64
    report = setup.verifier().verify(digest)
    assert report.failures() == [
        f"artifact sha256:000000000000… > record: {digest}: no artifact with this digest is "
        "recorded in the log"
    ]


# -- the log ---------------------------------------------------------------------------------------


def test_a_checkpoint_by_another_log_key(setup: Setup) -> None:
    other = vkey_string("test/lineage", Signer.generate("x").public.raw_ed25519())
    policy = TrustPolicy.from_toml(
        POLICY.format(threshold=2, vkey=other, extra="").encode(), setup.root
    )
    report = setup.verifier(policy=policy).verify(setup.checkpoint)
    assert report.failures()[0].startswith(
        "log > checkpoint: signed by 0 of 1 trusted log key(s) ("
    )


def test_a_log_key_that_did_not_sign_holds_no_walk_after_it(setup: Setup) -> None:
    """A policy of two log keys, one of which did not sign the checkpoint (a buyer's policy
    names its own log's key and the vendor's): the error of the key that did not sign, raised
    again where the keys it handed over to were sought (`log_key.follow_handovers`), was held
    by that function's frame, which its traceback holds: a reference cycle of the error, the
    frames and, through their callers, the verifier and all it made, freed only by the cyclic
    collector. With the collector off (an ``import`` in its own process, imp49) they all lived
    to the command's end (66,141 objects, 7 MiB on exchange_bench's lineage). Now nothing holds
    them once the verifier is dropped."""
    other = vkey_string("test/lineage", Signer.generate("x").public.raw_ed25519())
    policy = TrustPolicy.from_toml(POLICY.format(
        threshold=2, vkey=f'{other}", "{setup.ledger.log.vkey}', extra="").encode(), setup.root)
    gc.disable()
    try:
        verifier = setup.verifier(policy=policy)
        assert verifier.verify(setup.checkpoint).ok  # (one of the two keys is enough)
        dropped = weakref.ref(verifier)
        del verifier
        assert dropped() is None
    finally:
        gc.enable()


def test_a_policy_without_a_log_key(setup: Setup) -> None:
    policy = TrustPolicy.from_toml(
        POLICY.format(threshold=2, vkey="", extra="").replace('vkeys = [""]', "").encode(),
        setup.root,
    )
    report = setup.verifier(policy=policy).verify(setup.checkpoint)
    assert report.failures()[0] == "log > checkpoint: the policy names no log key (roles.log.vkeys)"


def test_a_required_witness_is_missing(setup: Setup) -> None:
    witness = vkey_string("witness", bytes(range(32)), 0x04)
    policy = setup.policy(extra=f'[roles.witness]\nvkeys = ["{witness}"]\nthreshold = 1')
    failures = setup.verifier(policy=policy).verify(setup.checkpoint).failures()
    assert len(failures) == 1 and failures[0].startswith("log test/lineage > witnesses: ")


def test_the_log_s_own_key_does_not_count_as_its_witness(setup: Setup) -> None:
    """A witness is there to catch the log showing two views; the log's own key (one the
    policy's log role lists, or one the log was handed over to, which the role does not list
    and `policy check` cannot see) must not count as one, else the log cosigns its own forks.
    The policy is built past `policy check` (which refuses the listed key) to reach the
    verifier's own rule."""
    import dataclasses

    from trajledger.ledger.log.witness import cosign_note
    from trajledger.ledger.monitor import witness_vkey
    from trajledger.verify.policy import Role

    log_key = KeyStore(setup.root / "log-key").signer("log")
    note = cosign_note(LedgerDirEvidence(setup.root).checkpoint_note(), log_key)
    ev = TamperedEvidence(setup.root)
    ev.note = note
    base = setup.policy()
    roles = dict(base.roles)
    roles["witness"] = Role("witness", 1, vkeys=(witness_vkey(log_key),))
    report = setup.verifier(ev, policy=dataclasses.replace(base, roles=roles)).verify(
        setup.checkpoint)
    assert not report.ok
    [check] = [c for c in report.nodes["log"].checks if c.what == "witnesses"]
    assert check.status == FAIL and "is a key of the log itself: not counted" in check.detail


def test_a_broken_hash_chain_and_an_entry_not_included(setup: Setup) -> None:
    ev = TamperedEvidence(setup.root)
    index = setup.index_of(setup.batch, "rollout-batch")
    entry = json.loads(dict(ev.inner.entries())[index])
    entry["prev"] = "ab" * 32
    ev.entry_bytes[index] = json.dumps(entry, separators=(",", ":"), sort_keys=True).encode()
    failures = setup.verifier(ev).verify(setup.checkpoint).failures()
    assert failures[0].startswith(f"log test/lineage > entries: entry {index}: prev is {'ab' * 32}")
    assert failures[0].endswith(f"(the leaf hash of entry {index - 1}): the hash chain is broken")
    assert any(f.startswith("log test/lineage > entries: tree: the root of the ") for f in failures)
    assert any(f": log entry {index}: not included under the checkpoint: " in f for f in failures)


def test_a_missing_or_replaced_envelope(setup: Setup) -> None:
    index = setup.index_of(setup.batch, "rollout-batch")
    envelope = setup.envelope_of(index)
    ev = TamperedEvidence(setup.root)
    ev.blobs[envelope] = None
    failures = setup.verifier(ev).verify(setup.checkpoint).failures()
    assert failures == [
        f"rollout-batch {setup.batch[:19]}… > record: log entry {index} (rollout-batch): envelope "
        f"{envelope[:19]}… is missing; restore it from a copy with 'trajledger fsck --repair "
        f"--from BUNDLE|LEDGER'{DEPEND}"
    ]
    ev.blobs[envelope] = b"{}"
    failures = setup.verifier(ev).verify(setup.checkpoint).failures()
    assert len(failures) == 1
    assert f"log entry {index} (rollout-batch): envelope hashes to sha256:" in failures[0]


def test_a_record_signed_by_the_wrong_role(setup: Setup) -> None:
    # The trainer records a "batch": it verifies as nothing.
    with another_tool():
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
        "the policy; add it to allowed_predicate_types to accept such records; and 1 record "
        "that depends on it"
    )


# -- status: revocation and erasure ---------------------------------------------------------------


def test_a_revocation_fails_the_lineage(setup: Setup) -> None:
    rec = revoke(setup.ledger, setup.batch, setup.keys["a"], reason="wrong env")
    failures = setup.verifier().verify(setup.checkpoint).failures()
    assert failures == [
        f"{label('rollout-batch', setup.batch, 'b')} > revoked: wrong env (log index {rec.index})"
        f"{DEPEND}"
    ]


def test_a_revocation_by_a_key_outside_the_policy_is_ignored(setup: Setup) -> None:
    with another_tool():
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


@pytest.mark.parametrize("damage", ["missing", "flipped"])
def test_a_damaged_revocation_fails_closed(setup: Setup, damage: str) -> None:
    rec = revoke(setup.ledger, setup.batch, setup.keys["a"], reason="PII")
    ev = TamperedEvidence(setup.root)
    data = setup.ledger.store.get(rec.envelope_digest)
    ev.blobs[rec.envelope_digest] = None if damage == "missing" else data[:-2] + b"x}"
    failures = setup.verifier(ev).verify(setup.checkpoint).failures()
    (line,) = failures
    assert line.startswith(
        f"{label('rollout-batch', setup.batch, 'b')} > revocation record {rec.index}: cannot be "
        "read, so what it says is unknown: "
    )
    assert ("is missing" if damage == "missing" else "envelope hashes to") in line


@pytest.mark.parametrize("data", ["hash", "size"])
def test_an_erasure_is_reported_not_failed(setup: Setup, data: str) -> None:
    rec, deleted, _kept = erase(setup.ledger, setup.batch, setup.keys["vendor"], reason="consent")
    assert deleted == 3  # the two data files, and the episode features kept with them
    report = setup.verifier(data=data).verify(setup.checkpoint)
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
        f"{label('rollout-batch', setup.batch, 'b')} > episodes.parquet: blob "
        f"{files['episodes.parquet'][:19]}… is missing{DEPEND}"
    ]
    # Another artifact's erasure listing the same blob (content addressing shares blobs): an
    # approver's (a producer may erase only what it produced, issue 19).
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
        setup.keys["a"],
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
    with another_tool():
        record_statement(setup.ledger, "b", setup.batch, predicates.ERASURE, body,
                         setup.keys["x"])
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
    with another_tool():
        late = record_statement(setup.ledger, "ds@1", setup.dataset, predicates.APPROVAL, body,
                                c)
    ckpt_index = setup.index_of(setup.checkpoint, "checkpoint")
    failures = setup.verifier(policy=policy).verify(setup.checkpoint).failures()
    assert failures == [
        f"{label('checkpoint', setup.checkpoint, 'm@1')} > dataset ds@1: approvals: 2 of 3 "
        f"required approver(s) for 'train'; approval {late.index} was logged after the use "
        f"(log index {ckpt_index})"
    ]


def test_approvals_are_judged_at_the_time_of_use(setup: Setup) -> None:
    # Verifying a year later: the approvals had not expired when the checkpoint was made.
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=365)
    assert setup.verifier(now=later).verify(setup.checkpoint).ok


def test_time_comes_from_the_log(setup: Setup) -> None:
    """Issue 18: an approval's age and expiry are judged by the time the log integrated it,
    not the approvedAt its signer wrote; one dated more than CLOCK_SKEW after its log time does
    not count."""
    from trajledger.verify.judge import CLOCK_SKEW
    from trajledger.verify.lineage import Node

    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    ds = create_dataset(setup.ledger, "t", "1", "train", [setup.batch], setup.keys["vendor"])

    def judged(at: dt.datetime) -> tuple[int, str]:
        v = setup.verifier()
        node = Node("decision", "admission")
        got = v.approvals(node, "t@1", ds.recorded.digest, "train", 10**9, at)
        return len(got), node.checks[-1].detail

    future = approve(setup.ledger, "t@1", setup.keys["a"], expires="30d",
                     now=now + dt.timedelta(seconds=CLOCK_SKEW + 60))
    back = approve(setup.ledger, "t@1", setup.keys["b"], expires="365d",
                   now=now - dt.timedelta(days=100))
    count, detail = judged(now)
    assert count == 1  # the back-dated one: logged now, young
    assert f"approval {future.index} is dated " in detail and "after the log took it in" in detail
    # A hundred days on, the back-dated approval is 100 days old by the log's clock (90 allowed).
    count, detail = judged(now + dt.timedelta(days=100))
    assert count == 0 and f"approval {back.index} logged " in detail and (
        "is older than the policy's maximum approval age (7776000s)") in detail
    # A signed time a little ahead (within the skew) counts; its lifetime runs from the log's.
    near = approve(setup.ledger, "t@1", setup.keys["a"], expires="1d",
                   now=now + dt.timedelta(seconds=60))
    count, _ = judged(now + dt.timedelta(hours=23))
    assert count == 2
    count, detail = judged(now + dt.timedelta(days=2))
    assert f"approval {near.index} expired at " in detail


def _holdout(setup: Setup, key: str = "vendor", split: str = "holdout") -> int:
    path = setup.root / "tmp" / "h.json"
    path.write_text("{}")
    body = {
        "name": "h",
        "version": "1",
        "split": split,
        "purpose": "eval",
        "batches": [setup.batch],
    }
    with another_tool():
        return record_files(
            setup.ledger,
            {"dataset.json": path},
            setup.keys[key],
            predicates.DATASET,
            body,
            name="h@1",
        ).index


def test_a_holdout_recorded_after_the_checkpoint_does_not_taint_it(setup: Setup) -> None:
    index = _holdout(setup)
    v = setup.verifier()
    assert v.verify(setup.checkpoint).ok
    use = Node("use", "admission", name="use now")
    v.dataset_use(use, setup.dataset, None)
    assert [f"{c.what}: {c.detail}" for c in use.checks if c.status == FAIL] == [
        f"dataset ds@1: not held out: rollout-batch {setup.batch[:19]}… is in holdout dataset "
        f"h@1 (log index {index})"
    ]


DISTRUSTED = {
    "a key the policy does not hold": ("x", "", "(not in the policy), want producer key(s)"),
    "a key out of its role": ("trainer", "", "(trainer role), want producer key(s)"),
    "a key the policy declares compromised": (
        "x", '[[revoked_keys]]\nkey = "keys/x.pub"\ncompromised_since = {index}\n'
        'reason = "laptop stolen"\n', "compromised since log index {index}: laptop stolen"),
}


@pytest.mark.parametrize("case", DISTRUSTED)
def test_a_holdout_the_policy_does_not_trust_still_holds_out(setup: Setup, case: str) -> None:
    """hist34 finding 1, the lead's decision (hold35): a held-out dataset record that is intact
    but not trusted by the policy holds its batches out all the same (fail closed), for a use
    now (the verifiers' ``dataset_use``) and at the gate (``train``), which decide alike; the
    line says which record, why it is not trusted and the way on. A train set so signed that
    lists the batch holds nothing out."""
    key, extra, why = DISTRUSTED[case]
    index = _holdout(setup, key)
    policy = setup.policy(extra=extra.format(index=index))
    use = Node("use", "admission", name="use now")
    setup.verifier(policy=policy).dataset_use(use, setup.dataset, None)
    (line,) = [f"{c.what}: {c.detail}" for c in use.checks if c.status == FAIL]
    assert line.startswith(
        f"dataset ds@1: not held out: rollout-batch {setup.batch[:19]}… is in holdout dataset "
        f"h@1 (log index {index}), whose record the policy does not trust (dataset record "
        f"{index}: no signature by a trusted key")
    assert why.format(index=index) in line and line.endswith(
        "held out all the same (fail closed: what no one trusted declared held out may be a "
        "test set); train on a dataset without this batch"), line
    with pytest.raises(DataRefusedError) as refused:
        train(setup.ledger, "ds@1", "bc", setup.keys["trainer"], policy, name="m2", version="1")
    assert line.removeprefix("dataset ds@1: not held out: ") in str(refused.value)


def test_dataset_creates_refusal_says_the_holdouts_record_is_not_trusted(setup: Setup) -> None:
    """left36 (hold35's Left): ``dataset create`` refuses a batch a distrusted holdout lists
    (it reads the index, as before) and now says, on that path only, that the holdout's record
    is not trusted here, why, and that it is held out all the same; the same decision ``admit``
    and the verifiers make (``verify.distrusted``)."""
    from trajledger.ledger.artifacts import create_dataset
    from trajledger.verify.errors import PolicyError

    index = _holdout(setup, "x")  # h@1 holds the batch out, signed by a key not in the policy
    h = setup.ledger.log.entry(index)
    with pytest.raises(PolicyError) as refused:
        create_dataset(setup.ledger, "t", "2", "train", [setup.batch], setup.keys["vendor"])
    line = str(refused.value)
    assert line.startswith(f"dataset t@2 (train): batch {setup.batch} is already in holdout "
                           f"dataset h@1 (sha256:{json.loads(h)['subject'][7:19]}…); its record "
                           f"(log index {index}) is not trusted here (dataset record {index}: no "
                           "signature by a trusted key"), line
    assert "(not in the policy), want producer key(s)" in line and line.endswith(
        "held out all the same (fail closed: what no one trusted declared held out may be a "
        "test set): leave it out (a batch is in one split), or record new rollouts for the "
        "train set"), line


def test_dataset_creates_contamination_refusal_says_the_holdouts_record_is_not_trusted(
        setup: Setup) -> None:
    """left37's Left (left38 item 4): a train batch holding copies of a distrusted holdout's
    episodes (another batch: step 4, the contamination check, not step 2) was refused with
    findings naming the holdout's batch only; now each dataset record of the other split that
    lists it says, as step 2's refusal does, that it is not trusted here and counts all the
    same (`split_trust.held_notes`)."""
    from trajledger.verify.errors import PolicyError

    index = _holdout(setup, "x")  # h@1 holds the batch out, signed by a key not in the policy
    h = json.loads(setup.ledger.log.entry(index))["subject"]
    played = run_policy(None, "CartPole-v1", 4, 0, policy_version="random", clock=clock)
    # the holdout's 3 episodes and a fourth: another batch
    copy = record_batch(setup.ledger, played.steps, episodes=played.episodes, env="env@1",
                        evaluator="ev@1", policy="random", signer=setup.keys["vendor"],
                        name="copy").recorded.digest
    with pytest.raises(PolicyError) as refused:
        create_dataset(setup.ledger, "t", "2", "train", [copy], setup.keys["vendor"])
    line = str(refused.value)
    assert line.startswith("dataset t@2 (train): 3 episode(s) exactly duplicate episodes of "
                           "the other split: "), line
    assert line.endswith(f"; holdout dataset h@1 ({h[:19]}…); its record (log index {index}) "
                         f"is not trusted here (dataset record {index}: no signature by a "
                         "trusted key: 0 of 1 required signature(s) verified; the envelope "
                         "names key " + setup.keys["x"].keyid[:12] + " (not in the policy), "
                         "want producer key(s); if the signer confirms the key is theirs (ask "
                         "them, not the data), add it to [roles.producer] of the policy you "
                         "verify with (the --policy file, or a ledger's, then 'policy set'); "
                         "otherwise treat the record as forged): held "
                         "out all the same (fail closed: what no "
                         "one trusted declared held out may be a test set)"), line
    assert "dataset ds@1" not in line  # the train set that lists it too: same split, unnamed


def test_a_train_set_the_policy_does_not_trust_holds_nothing_out(setup: Setup) -> None:
    _holdout(setup, "x", "train")
    use = Node("use", "admission", name="use now")
    setup.verifier().dataset_use(use, setup.dataset, None)
    assert [c.detail for c in use.checks if c.what == "dataset ds@1: not held out"] == [
        "no batch is in a holdout or regression split"]


def test_a_release_suite_whose_record_does_not_verify_is_named(setup: Setup) -> None:
    """left36 (hold35's Left): releases' suite choice skipped a record of the suite's name
    that the policy does not trust (or a damaged one) and said the suite was "missing"; it
    names the record, why it does not verify and the way on, pinned or not."""
    from trajledger.verify.release_rules import Requirement
    from trajledger.verify.releases import release_suite

    index = _holdout(setup, "x")  # h@1, signed by a key the policy does not hold
    v = setup.verifier()
    digest = v.entry(index).subject  # type: ignore[union-attr]
    suite, problem = release_suite(v, Requirement("h@1"), index + 1)
    assert suite is None and problem is not None, problem
    assert problem.startswith(
        f"the holdout dataset h@1 (log index {index}) is not trusted by the policy (dataset "
        f"record {index}: no signature by a trusted key"), problem
    assert problem.endswith(
        "an evaluation counts only on a suite whose record verifies; if the policy should trust "
        "its signer, give that key the producer role in a policy successor (a key declared "
        "compromised stays so), else record the suite again with a producer key, under another "
        "version, and name that one in [[release.require]]"), problem
    assert release_suite(v, Requirement("h@2"), index + 1) == (None, None)  # another name
    pinned = release_suite(v, Requirement("h@1", digest=digest), index + 1)[1]
    assert pinned is not None and pinned.startswith(
        f"the suite is pinned to {digest}: its dataset record (log index {index}) is not "
        f"trusted by the policy (dataset record {index}: no signature by a trusted key"), pinned
    ev = TamperedEvidence(setup.root)  # its envelope gone: a name no one can read
    ev.blobs[setup.envelope_of(index)] = None
    problem = release_suite(setup.verifier(ev), Requirement("h@1"), index + 1)[1]
    assert problem is not None and problem.startswith(
        "missing: no verified holdout or regression dataset h@1 is logged before it; dataset "
        f"record {index}, whose name cannot be read (it may be the suite), is damaged ("), problem
    assert "restore it from a copy with 'trajledger fsck --repair --from BUNDLE|LEDGER'" in problem


def test_a_dataset_record_that_cannot_be_read_fails_a_later_use(setup: Setup) -> None:
    # It may be a holdout holding these batches out: what it lists is unknown (fail closed).
    index = _holdout(setup)
    ev = TamperedEvidence(setup.root)
    ev.blobs[setup.envelope_of(index)] = None
    v = setup.verifier(ev)
    use = Node("use", "admission", name="use now")
    v.dataset_use(use, setup.dataset, None)
    (line,) = [f"{c.what}: {c.detail}" for c in use.checks if c.status == FAIL]
    assert line.startswith(
        f"dataset ds@1: not held out: dataset record {index} cannot be read, so it may hold "
        "these batches out"
    )


# -- impact ----------------------------------------------------------------------------------------


def test_impact_reaches_the_checkpoint_through_the_dataset(setup: Setup) -> None:
    report = impact(setup.verifier(), setup.batch)
    assert report.direction == "downstream" and report.ok
    kinds = sorted(n.kind for n in report.nodes.values())
    assert kinds == ["checkpoint", "dataset", "log", "rollout-batch"]
    assert {(e.role, e.dst) for e in report.edges} == {
        ("batch", setup.batch), ("dataset", setup.dataset)
    }
    lines = report.render()
    assert any(ln.startswith("✓ rollout-batch b (") for ln in lines)
    assert any(ln.startswith("    batch → ✓ dataset ds@1 (") for ln in lines)
    assert any(ln.startswith("        dataset → ✓ checkpoint m@1 (") for ln in lines)


def test_impact_judges_a_downstream_checkpoint_s_use_of_its_dataset(setup: Setup) -> None:
    """'What was built on this batch, and does it hold?' A checkpoint whose dataset's
    approvals no longer count (a third approver required now, who never approved) is refused
    by `verify CK`; `impact BATCH` verified it without its lineage and showed it ok (redo20,
    Left). Its node now carries the checkpoint's use of each dataset, with the line `verify`
    prints, once however many times the verifier is asked."""
    setup.ledger.keys.create("c", encrypt=False)
    policy = TrustPolicy.from_toml(
        POLICY.format(threshold=3, vkey=setup.ledger.log.vkey, extra="")
        .replace('"keys/b.pub"]', '"keys/b.pub", "keys/c.pub"]').encode(), setup.root)
    line = (f"{label('checkpoint', setup.checkpoint, 'm@1')} > dataset ds@1: approvals: 2 of 3 "
            "required approver(s) for 'train'")
    assert setup.verifier(policy=policy).verify(setup.checkpoint).failures() == [line]
    v = setup.verifier(policy=policy)
    down = impact(v, setup.batch)
    assert not down.ok and down.nodes[setup.checkpoint].status == FAIL
    assert down.failures() == [line]
    for subject in (setup.dataset, setup.checkpoint):  # the checkpoint itself: judged too
        again = impact(v, subject)
        assert again.failures()[0] == line
        assert [c.what for c in again.nodes[setup.checkpoint].checks].count(
            "dataset ds@1: approvals") == 1
    assert impact(setup.verifier(), setup.batch).ok  # the ledger's own policy: 2 of 2


def _weights(g: int) -> bytes:
    return b"generation %d" % g


def _digest_of_generation(g: int) -> str:
    """The digest generation ``g`` of `_generations` will have: its manifest's, known before it
    is recorded (a checkpoint's digest does not depend on its provenance)."""
    data = _weights(g)
    manifest = Manifest.from_files([FileEntry("w.bin", len(data), digest_bytes(data)[7:],
                                              media_type_for("w.bin"))])
    return digest_bytes(manifest.canonical_bytes())


def _generations(setup: Setup, parents: list[str | None], start: int = 0) -> list[str]:
    """Record one checkpoint per item of ``parents`` (trained on ds@1, by the trainer key),
    each naming that item as its parent, or the checkpoint recorded just before it when the
    item is None (the first: m@1); returns their digests."""
    out, before = [], setup.checkpoint
    weights = setup.root / "tmp" / "w.bin"
    weights.parent.mkdir(exist_ok=True)
    for g, parent in enumerate(parents, start):
        weights.write_bytes(_weights(g))
        deps = [predicates.ResourceDescriptor.of("dataset:ds@1", setup.dataset, role="dataset"),
                predicates.ResourceDescriptor.of("checkpoint:parent", parent or before,
                                                 role="base-checkpoint")]
        prov = predicates.Provenance(
            build_type="https://example.org/bt", external_parameters={
                "name": "gen", "version": str(g), "dataset": setup.dataset, "purpose": "train"},
            internal_parameters={}, resolved_dependencies=tuple(deps),
            builder_id="https://example.org/b", metadata={}, byproducts=()).to_predicate()
        before = record_files(setup.ledger, {"w.bin": weights}, setup.keys["trainer"],
                              predicates.SLSA_PROVENANCE_V1, prov, kind="checkpoint",
                              name=f"gen@{g}", inline_manifest=False, file_subjects=True).digest
        out.append(before)
    return out


def test_a_lineage_as_deep_as_a_long_run_is_walked_without_recursion(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RL trains each checkpoint from the one before: a lineage is as deep as the run is long.
    The walk must not nest a Python call per generation: it ended in `RecursionError` past
    about 480 generations (160 iterations of roll out, dataset, train), caught by the JSON
    parser as "statement: nested too deeply; restore it from a copy": a sound lineage failed
    as damaged. Here 300 generations are verified under a recursion limit 200 frames above
    the caller's, which a walk nesting two frames per generation exceeds.
    (The 300 records are written without fsync: this test is about the walk, not durability;
    its 300 appends fsync 2,200 times: 5 s of 9-11 s here, more on a busy disk.)"""
    with monkeypatch.context() as m:
        m.setattr(os, "fsync", lambda _fd: None)
        chain = _generations(setup, [None] * 300)
    v = setup.verifier()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 200)
    try:
        report = v.verify(chain[-1])
    finally:
        sys.setrecursionlimit(limit)
    assert report.ok, report.failures()[:3]
    assert set(chain) | {setup.checkpoint} <= set(report.nodes)
    parents = {(e.src, e.dst) for e in report.edges if e.role == "base-checkpoint"}
    assert parents == set(zip(chain, [setup.checkpoint, *chain[:-1]], strict=True))
    down = impact(setup.verifier(), setup.checkpoint)
    assert down.ok and set(chain) <= set(down.nodes)


@pytest.mark.parametrize("shape", ["self", "pair"])
def test_a_lineage_that_comes_back_to_itself_fails(
    setup: Setup, runner: CliRunner, shape: str
) -> None:
    """A checkpoint's digest is its files', so its trainer can name, as its parent, itself or
    a checkpoint recorded later that names it back. No run makes such a history: it is a false
    claim, and it verified OK ('what made this checkpoint?' answered with a loop), and the HTML
    page of it ended in 'BUG: ValueError' (exit 4). The record that closes the loop fails, and
    every output mode exits 1."""
    a, b = _digest_of_generation(0), _digest_of_generation(1)
    parents = [a] if shape == "self" else [b, a]
    assert _generations(setup, parents) == [a, b][: len(parents)]
    for tip in (a, b)[: len(parents)]:
        closing = tip if shape == "self" else a if tip == b else b  # (the loop's last record)
        report = setup.verifier().verify(tip)
        assert not report.ok
        problems = [c.detail for c in report.nodes[closing].checks if c.status == FAIL]
        assert any("comes back to" in p for p in problems), problems
    for mode in ([], ["--json"], ["--format", "mermaid"], ["--format", "dot"],
                 ["--format", "html"], ["-q"]):
        quiet = ["-q"] if mode == ["-q"] else []
        r = runner.invoke(main, [*quiet, "--ledger", str(setup.root), "lineage", a,
                                 *[m for m in mode if m != "-q"]])
        assert r.exit_code == 1, (mode, r.output)
    r = runner.invoke(main, ["--ledger", str(setup.root), "impact", setup.dataset,
                             "--format", "html"])
    assert r.exit_code == 0, r.output
    assert "<html" in r.stdout


@pytest.mark.parametrize("damage", ["missing", "replaced"])
def test_impact_lists_a_user_whose_record_cannot_be_read(
    setup: Setup, runner: CliRunner, damage: str
) -> None:
    """'Which checkpoints used this batch?' An insider deletes (or replaces) the envelope of a
    checkpoint trained on it: the index still names the checkpoint as a user, but its record no
    longer verifies. impact dropped it without a word ('1 checkpoint(s) reached', OK); now it is
    listed, failing with its record's problem, and what was built on it is still reached."""
    child = _generations(setup, [None])[0]  # trained on ds@1 with m@1 as its parent
    index = setup.index_of(setup.checkpoint, "checkpoint")
    envelope = setup.envelope_of(index)
    ev = TamperedEvidence(setup.root)
    ev.blobs[envelope] = None if damage == "missing" else b"{}"
    # An index read from the damaged evidence cannot know what the record names: the answer
    # fails, naming it.
    report = impact(setup.verifier(ev), setup.batch)
    assert not report.ok and child in report.nodes
    problems = [c for c in report.nodes[setup.batch].checks if c.status == FAIL]
    assert [(c.what, c.detail.split(";")[0]) for c in problems] == [
        (f"checkpoint record {index}", "cannot be read, so whether it was built on this is "
         "unknown")]
    # The user's index, derived while the envelope could be read, names the edge: the
    # checkpoint is listed, failing with its record's problem.
    runner.invoke(main, ["--ledger", str(setup.root), "impact", setup.batch])  # (indexed)
    blob = setup.root / "objects/sha256" / envelope[7:9] / envelope[9:11] / envelope[7:]
    blob.chmod(0o600)
    blob.write_bytes(b"{}") if damage == "replaced" else blob.unlink()
    r = runner.invoke(main, ["--ledger", str(setup.root), "impact", setup.batch])
    # The answer is printed whole, but damaged evidence can hide a user: exit 1 (a revoked
    # batch's answer exits 0: tests/e2e/test_lineage_cli.py).
    assert r.exit_code == 1, r.output
    assert r.stdout.startswith("✗ FAIL: rollout-batch b (")
    assert f"checkpoint {setup.checkpoint[:19]}… > record: log entry {index} (checkpoint): " \
        "envelope" in r.stdout
    err = r.stderr.splitlines()
    assert err[0] == f"2 checkpoint(s) reached: checkpoint {setup.checkpoint[:19]}…, gen@0"
    assert err[1] == f"FAIL: impact {setup.batch}: the answer may be incomplete: 1 problem(s) " \
        "of damaged evidence"
    assert err[2].startswith(f"FAIL: checkpoint {setup.checkpoint[:19]}… > record: log entry "
                             f"{index} (checkpoint): envelope") and len(err) == 3


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
    assert newer.log.checks[-1].detail == f"size {size} -> {size + 1}"

    def failures(v: LineageVerifier) -> list[str]:
        return [f"{c.what}: {c.detail}" for c in v.log.checks if c.status == FAIL]

    forked = setup.verifier()
    forked.check_known_checkpoint(sign_note(setup, size + 1, bytes(32)))
    (line,) = failures(forked)
    assert line.startswith(
        f"consistent with the checkpoint seen before: log fork or rollback: checkpoint "
        f"fork for test/lineage: two roots at size {size + 1}: {'00' * 32} and "
    )
    rolled = setup.verifier()
    rolled.check_known_checkpoint(sign_note(setup, size + 5, bytes(32)))
    assert failures(rolled) == [
        "consistent with the checkpoint seen before: log fork or rollback: checkpoint "
        f"rollback for test/lineage: size {size + 1} is smaller than the {size + 5} seen before"
    ]
    inconsistent = setup.verifier()
    inconsistent.check_known_checkpoint(sign_note(setup, size - 1, bytes(32)))
    assert "are not consistent" in failures(inconsistent)[0]

    stranger = setup.verifier()
    other = Signer.generate("log")
    text = checkpoint_text(Checkpoint("test/lineage", size, root))
    forged = text + b"\n" + format_signature_line("test/lineage", b"\0\0\0\0", other.sign(text))
    stranger.check_known_checkpoint(forged)
    assert "checkpoint seen before is not one this log signed" in failures(stranger)[0]


def test_unreadable_entries_fail_the_log(setup: Setup) -> None:
    class Unreadable(TamperedEvidence):
        def entries(self) -> Iterator[tuple[int, bytes]]:
            yield from list(super().entries())[:2]
            raise FileNotFoundError(2, "No such file or directory", "tile/entries/000.p/9")

    report = setup.verifier(Unreadable(setup.root)).verify(setup.checkpoint)
    assert report.failures()[0] == (
        "log test/lineage > entries: cannot be read: tile/entries/000.p/9: No such file or "
        "directory"
    )


def test_reports_validate_against_their_schema(setup: Setup) -> None:
    import jsonschema

    schema = json.loads(
        (Path(__file__).resolve().parents[3] / "schemas" / "report.v1.schema.json").read_text()
    )
    revoke(setup.ledger, setup.batch, setup.keys["a"], reason="x")
    v = setup.verifier()
    for report in (v.verify(setup.checkpoint), impact(v, setup.batch)):
        assert "records" not in report.to_json()  # verify --json is as it was
        for doc in (report.to_json(), with_records(v, report).to_json()):
            jsonschema.validate(doc, schema)
            ids = [n["id"] for n in doc["nodes"]]
            assert len(ids) == len(set(ids)) and all(
                e["from"] in ids and e["to"] in ids for e in doc["edges"]
            )
            assert all(a["id"] in ids for r in doc.get("records", []) for a in r["about"])
    assert not doc["ok"] and doc["failed"] >= 1
    assert {r["kind"] for r in doc["records"]} == {"approval", "revocation"}




def test_an_interrupt_as_the_walk_finishes_still_stops_the_rehashing(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C between the walk's end and the re-hashing's finish (before `BlobHasher.finish`
    has begun its own clean-up): the blob checker is still closed, so no worker (thread or
    forked process) is left hashing."""
    v = setup.verifier()
    closed: list[bool] = []
    real_close = v.blobs.close

    def interrupted() -> None:
        raise KeyboardInterrupt

    def close() -> None:
        closed.append(True)
        real_close()

    monkeypatch.setattr(v.blobs, "finish", interrupted)
    monkeypatch.setattr(v.blobs, "close", close)
    with pytest.raises(KeyboardInterrupt):
        v.verify(setup.checkpoint)
    assert closed and v.blobs.pool is None and not v.blobs.pending
