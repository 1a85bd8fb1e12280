"""End to end: the runner's commands (policy, approve, revoke, erase, admit, train, rollout,
verify) through click's CliRunner on a ``tmp_path`` ledger.

One test per refusal reason of DESIGN §6: each builds the bad case, runs ``trajledger train``
(and, where it adds something, ``trajledger admit``), and asserts exit 1, the exact ``FAIL:``
lines, no traceback, that nothing was trained, and that a refused ``train`` appended exactly one
refusal record. Then the full path: a checkpoint trained, rolled out and trained again through
the ledger beats the random policy; ``verify`` of its lineage before and after a revocation or
an erasure; the policy commands.

A template ledger (keys, policy, environment, evaluator, two small CartPole batches, a dataset
approved 2-of-2) is built once per session and copied for each test.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import testkit
from click.testing import CliRunner, Result
from cryptography.hazmat.primitives.asymmetric import ed25519

from trajledger import Ledger
from trajledger.ledger.artifacts import (
    batch_files,
    create_dataset,
    record_batch,
    register_environment,
    register_evaluator,
)
from trajledger.ledger.catalog import Catalog
from trajledger.ledger.encode import checkpoint_text, format_signature_line
from trajledger.ledger.errors import TamperError
from trajledger.ledger.keys import KeyStore, Signer
from trajledger.ledger.record import record_files
from trajledger.ledger.status import approve, record_policy
from trajledger.runner.cli import main
from trajledger.runner.rollouts import run_policy
from trajledger.verify import predicates
from trajledger.verify.checkpoint import Checkpoint
from trajledger.verify.digest import digest_bytes
from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import PolicyError
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.note import Note, verifier_from_vkey
from trajledger.verify.statement import Statement

ORIGIN = "test/runner"
FIXED_CLOCK = 1_700_000_000_000_000
KEYS = ("vendor", "approver-a", "approver-b", "trainer", "outsider")

POLICY = """\
name = "test"
serial = {serial}
max_approval_age = "90d"

[roles.producer]
keys = ["keys/vendor.pub"]

[roles.approver]
keys = ["keys/approver-a.pub", "keys/approver-b.pub"]
threshold = 2

[roles.trainer]
keys = ["keys/trainer.pub"]

[roles.log]
vkeys = ["{vkey}"]
"""


def clock() -> int:
    return FIXED_CLOCK


def run(runner: CliRunner, home: Path, *args: str | Path) -> Result:
    return runner.invoke(main, ["--ledger", str(home), *map(str, args)], prog_name="trajledger")


def expect(result: Result, code: int, stderr: str | None = None) -> None:
    """Exit code, exact stderr when given, and no escaped exception or traceback."""
    if stderr is not None:
        assert result.stderr == stderr, result.output
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output


@dataclass
class World:
    """A copied template ledger and the handles a test needs."""

    home: Path
    policy_path: Path
    batch: str
    spare: str
    dataset: str

    @property
    def ledger(self) -> Ledger:
        return Ledger.open(self.home)

    def signer(self, name: str) -> Signer:
        return KeyStore(self.home / "keys").signer(name)

    def entries(self) -> list[LogEntry]:
        log = self.ledger.log
        return [LogEntry.from_bytes(e) for e in log.entries(0, log.size)]

    def kinds(self) -> list[str]:
        return [e.kind for e in self.entries()]

    def blob_path(self, batch: str, name: str) -> Path:
        from trajledger.ledger.artifacts import batch_files

        ledger = self.ledger
        return Path(ledger.store.path_of(batch_files(ledger, batch)[name]))

    def predicate(self, digest: str, kind: str) -> dict[str, Any]:
        entry = next(e for e in self.entries() if e.subject == digest and e.kind == kind)
        env = Envelope.from_bytes(self.ledger.store.get(entry.envelope))
        return Statement.from_bytes(env.payload).predicate

    def craft_dataset(self, name: str, split: str, batches: list[str]) -> str:
        """Record a dataset directly, bypassing `create_dataset`'s own checks (an attacker's
        or a buggy producer's record: the gate must not depend on the writer's checks)."""
        body = {
            "name": name,
            "version": "1",
            "split": split,
            "purpose": "train",
            "batches": sorted(batches),
        }
        path = self.home / "tmp" / f"{name}.json"
        path.write_text(json.dumps(body))
        rec = record_files(
            self.ledger,
            {"dataset.json": path},
            self.signer("vendor"),
            predicates.DATASET,
            body,
            name=f"{name}@1",
        )
        return rec.digest

    def approve_both(self, ref: str, **kw: Any) -> None:
        for a in ("approver-a", "approver-b"):
            approve(self.ledger, ref, self.signer(a), **kw)

    def new_batch(self, seed: int, signer: Signer | None = None, name: str = "extra") -> str:
        """A batch signed by ``signer`` (default the producer). A key the policy holds no
        producer role for is refused by trajledger's writer (issue 18), so such a batch is
        recorded with that check left out: as another tool, or an older trajledger, would
        have recorded it; the verifier must refuse it all the same."""
        from trajledger.ledger import policy_state

        played = run_policy(None, "CartPole-v1", 3, seed, policy_version="random", clock=clock)
        with pytest.MonkeyPatch.context() as m:
            if signer is not None:
                m.setattr(policy_state, "check_signers", lambda *_a, **_k: None)
            return record_batch(
                self.ledger,
                played.steps,
                episodes=played.episodes,
                env="cartpole@1",
                evaluator="episode-return@1",
                policy="random",
                signer=signer or self.signer("vendor"),
                name=name,
            ).recorded.digest

    def dataset_of(self, name: str, batch: str, split: str = "train") -> str:
        """A dataset holding ``batch``, approved 2-of-2."""
        digest = create_dataset(
            self.ledger, name, "1", split, [batch], self.signer("vendor")
        ).recorded.digest
        self.approve_both(f"{name}@1")
        return digest


def build_world(home: Path) -> World:
    ledger = Ledger.init(home, origin=ORIGIN)
    signers = {k: ledger.keys.create(k, encrypt=False) for k in KEYS}
    policy_path = home / "policy.toml"
    policy_path.write_text(POLICY.format(serial=1, vkey=ledger.log.vkey))
    record_policy(ledger, policy_path, [signers["approver-a"], signers["approver-b"]])
    register_environment(
        ledger, "cartpole", "1", signers["vendor"], gymnasium_id="CartPole-v1", source="gymnasium"
    )
    register_evaluator(ledger, "episode-return", "1", "deterministic", signers["vendor"])
    digests = []
    for seed, name in ((0, "random-a"), (100, "random-b")):
        played = run_policy(None, "CartPole-v1", 4, seed, policy_version="random", clock=clock)
        digests.append(
            record_batch(
                ledger,
                played.steps,
                episodes=played.episodes,
                env="cartpole@1",
                evaluator="episode-return@1",
                policy="random",
                signer=signers["vendor"],
                name=name,
            ).recorded.digest
        )
    ds = create_dataset(ledger, "ds", "1", "train", [digests[0]], signers["vendor"])
    for a in ("approver-a", "approver-b"):
        approve(ledger, "ds@1", signers[a])
    return World(home, policy_path, digests[0], digests[1], ds.recorded.digest)


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[World]:
    return testkit.build_template(tmp_path_factory.mktemp("template"), build_world)


@pytest.fixture
def world(template: testkit.Template[World], tmp_path: Path) -> Iterator[World]:
    """A copy of `build_world`'s ledger, known to this test's user (`testkit.copy_template`)."""
    home = testkit.copy_template(template, tmp_path / "home")
    w = template.value
    yield World(home, home / "policy.toml", w.batch, w.spare, w.dataset)


DEPENDS = "; and 1 record that depends on it"
"""The end of a batch's root-cause line when the dataset admitted depends on it (issue 19)."""


def revoked_here(w: World, key: str, digest: str) -> str:
    """The end of the gate's line of a cause this ledger revoked with ``key`` (out57)."""
    return (f"; revoked by this ledger (signed by {w.signer(key).keyid[:12]}): 'trajledger "
            f"impact {digest}' lists what it reaches here; stop using them, and build on data "
            "that stands (train again on a dataset without it)")


def short(digest: str) -> str:
    return digest[:19] + "…"


def _match(got: list[str], want: tuple[str, ...], exact: bool) -> None:
    assert len(got) == len(want), got
    for g, w in zip(got, want, strict=True):
        assert g == w if exact else g.startswith(w), (g, w)


def adm(w: World, ref: str) -> str:
    """The admission decision's label for a dataset reference: failure lines start with it."""
    digest = Catalog(w.ledger).resolve(ref, {"dataset"}).digest
    return f"admission of dataset {ref} ({short(digest)})"


def refused_train(
    runner: CliRunner, w: World, dataset: str, *lines: str, exact: bool = True
) -> Result:
    """Run ``train``; expect a refusal listing exactly ``lines`` (or lines starting with them
    when not ``exact``); check nothing was trained and exactly one refusal record was appended,
    naming the same reasons."""
    before = w.kinds()
    r = run(runner, w.home, "train", "--dataset", dataset, "--key", "trainer")
    expect(r, 1)
    _match(
        r.stderr.splitlines(),
        (
            f"FAIL: dataset {dataset}: refused, {len(lines)} problem(s)",
            *(f"FAIL: {x}" for x in lines),
        ),
        exact,
    )
    assert r.stdout == ""
    after = w.kinds()
    assert after[: len(before)] == before
    assert after[len(before) :] == ["refusal"], "a refused run appends exactly one refusal"
    assert "checkpoint" not in after
    refusal = w.entries()[-1]
    body = Statement.from_bytes(
        Envelope.from_bytes(w.ledger.store.get(refusal.envelope)).payload
    ).predicate
    _match(body["reasons"], tuple(x.split("; revoked by ")[0] for x in lines), exact)  # (the
    # signed record: the report's lines, without who revoked a cause and what next: out57)
    assert body["trainer"] == "bc"
    return r


def refused_admit(runner: CliRunner, w: World, dataset: str, *lines: str) -> None:
    """The dry run refuses with the same lines and appends nothing."""
    size = w.ledger.log.size
    r = run(runner, w.home, "admit", dataset)
    header = f"FAIL: dataset {dataset}: refused, {len(lines)} problem(s)\n"
    expect(r, 1, header + "".join(f"FAIL: {line}\n" for line in lines))
    assert "✗" in r.stdout  # the report tree
    assert w.ledger.log.size == size


# -- the good path -----------------------------------------------------------------------------


def test_admit_and_train_a_good_dataset(runner: CliRunner, world: World) -> None:
    r = run(runner, world.home, "admit", "ds@1")
    expect(r, 0, "OK: dataset ds@1: admitted (1 batch(es))\n")
    assert "✓ dataset ds@1: approvals — 2 of 2 required approver(s) for 'train'" in r.stdout
    r = run(runner, world.home, "admit", "ds@1", "--json")
    expect(r, 0)
    report = json.loads(r.stdout)
    assert report["admitted"] is True and report["report"]["ok"] is True

    size = world.ledger.log.size
    r = run(runner, world.home, "train", "--dataset", "ds@1", "--key", "trainer", "--seed", "3")
    expect(r, 0)
    digest = r.stdout.splitlines()[-1]
    assert digest.startswith("sha256:") and len(digest) == 71
    assert r.stderr.startswith(f"OK: checkpoint recorded at log index {size} (")
    assert world.kinds()[size:] == ["checkpoint"]

    provenance = world.predicate(digest, "checkpoint")
    build = provenance["buildDefinition"]
    assert build["externalParameters"]["seed"] == 3
    assert build["externalParameters"]["dataset"] == world.dataset
    roles = {d["annotations"]["role"]: d for d in build["resolvedDependencies"]}
    assert set(roles) == {
        "dataset",
        "environment",
        "evaluator",
        "trainer-code",
        "dependency-lock",
    }
    assert roles["dataset"]["digest"]["sha256"] == world.dataset[7:]
    assert roles["dataset"]["annotations"]["logIndex"] == world.kinds().index("dataset")

    r = run(runner, world.home, "verify", digest)
    expect(r, 0)
    assert r.stderr.startswith(f"OK: {digest}: ") and r.stderr.endswith(" checks passed\n")
    assert "✓ dataset ds@1: split — train" in r.stdout


def test_train_with_an_explicit_policy_file(runner: CliRunner, world: World) -> None:
    r = run(
        runner,
        world.home,
        "train",
        "--dataset",
        "ds@1",
        "--key",
        "trainer",
        "--policy",
        world.policy_path,
    )
    expect(r, 0)


def test_train_refuses_a_signer_without_the_trainer_role(runner: CliRunner, world: World) -> None:
    size = world.ledger.log.size
    r = run(runner, world.home, "train", "--dataset", "ds@1", "--key", "vendor")
    keyid = world.signer("vendor").keyid
    expect(
        r,
        1,
        f"FAIL: key vendor ({keyid[:12]}): does not hold the trainer role in policy 'test' "
        f"serial 1; sign with one of its trainer keys ({world.signer('trainer').keyid[:16]}; "
        "'trajledger key list' shows your keys' fingerprints)\n",  # (hour33: the next step)
    )
    assert world.ledger.log.size == size


# -- one test per refusal reason ----------------------------------------------------------------


def test_refuses_an_envelope_without_a_valid_signature(runner: CliRunner, world: World) -> None:
    vendor = world.signer("vendor")

    class Forger(Signer):
        """Names the vendor's key but cannot sign with it."""

        def sign(self, data: bytes) -> bytes:
            return bytes(64)

    # Any private half will do (`sign` never uses it): the vendor's is not the test's to take.
    forged = Forger(vendor.name, vendor.public, ed25519.Ed25519PrivateKey.generate())
    batch = world.new_batch(7, forged)
    index = [e.subject for e in world.entries()].index(batch)
    world.dataset_of("unsigned", batch)
    line = (
        f"rollout-batch {short(batch)} > record: rollout-batch record {index}: invalid signature "
        "by key "
        f"{vendor.keyid[:16]}: 0 of 1 required signature(s) verified; the envelope names key "
        f"{vendor.keyid[:12]} (producer role), want producer key(s){DEPENDS}"
    )
    refused_train(runner, world, "unsigned@1", line)
    refused_admit(runner, world, "unsigned@1", line)


def test_refuses_a_batch_signed_by_a_key_outside_the_policy(
    runner: CliRunner, world: World
) -> None:
    outsider = world.signer("outsider")
    batch = world.new_batch(7, outsider)
    index = [e.subject for e in world.entries()].index(batch)
    world.dataset_of("outside", batch)
    refused_train(
        runner,
        world,
        "outside@1",
        f"rollout-batch {short(batch)} > record: rollout-batch record {index}: no signature by a "
        "trusted key: 0 of 1 required signature(s) verified; the envelope names key "
        f"{outsider.keyid[:12]} (not in the policy), want producer key(s); if the signer "
        "confirms the key is theirs (ask them, not the data), add it to [roles.producer] of the "
        "policy you verify with (the --policy file, or a ledger's, then 'policy set'); otherwise "
        f"treat the record as forged{DEPENDS}",
    )


def test_refuses_a_batch_whose_signer_is_not_a_producer(runner: CliRunner, world: World) -> None:
    trainer = world.signer("trainer")
    batch = world.new_batch(7, trainer)
    index = [e.subject for e in world.entries()].index(batch)
    world.dataset_of("by-trainer", batch)
    refused_train(
        runner,
        world,
        "by-trainer@1",
        f"rollout-batch {short(batch)} > record: rollout-batch record {index}: no signature by a "
        "trusted key: 0 of 1 required signature(s) verified; the envelope names key "
        f"{trainer.keyid[:12]} (trainer role), want producer key(s){DEPENDS}",
    )


def test_refuses_approvals_below_the_threshold(runner: CliRunner, world: World) -> None:
    create_dataset(world.ledger, "half", "1", "train", [world.spare], world.signer("vendor"))
    r = run(runner, world.home, "approve", "half@1", "--key", "approver-a")
    expect(r, 0)
    line = f"{adm(world, 'half@1')} > dataset half@1: approvals: 1 of 2 required approver(s) " \
        "for 'train'"
    refused_train(runner, world, "half@1", line, exact=False)  # the record: the line alone
    refused_admit(runner, world, "half@1", line + ": approve it with 1 more approver key "
                  "('trajledger approve half@1 --key NAME'; the policy's approver keys here: "
                  "approver-a, approver-b; each key counts once), then run this again")


def test_refuses_approvals_for_another_purpose(runner: CliRunner, world: World) -> None:
    create_dataset(world.ledger, "evalonly", "1", "train", [world.spare], world.signer("vendor"))
    world.approve_both("evalonly@1", purpose="eval")
    a, b = [i for i, k in enumerate(world.kinds()) if k == "approval"][-2:]
    refused_train(
        runner,
        world,
        "evalonly@1",
        f"{adm(world, 'evalonly@1')} > dataset evalonly@1: approvals: 0 of 2 required "
        f"approver(s) for 'train'; approval {a} is for 'eval', not 'train'; approval {b} is for "
        "'eval', not 'train'",
        exact=False,  # stderr adds what to do (out46): approve it with 2 more approver keys
    )


def test_refuses_an_expired_approval(runner: CliRunner, world: World) -> None:
    create_dataset(world.ledger, "stale", "1", "train", [world.spare], world.signer("vendor"))
    then = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(days=40)
    approve(world.ledger, "stale@1", world.signer("approver-a"))
    approve(world.ledger, "stale@1", world.signer("approver-b"), expires="30d", now=then)
    expired = (then + dt.timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    index = len(world.kinds()) - 1
    refused_train(
        runner,
        world,
        "stale@1",
        f"{adm(world, 'stale@1')} > dataset stale@1: approvals: 1 of 2 required approver(s) "
        f"for 'train'; approval {index} expired at {expired} (logged ",
        exact=False,
    )


def test_an_approvals_age_is_counted_from_its_log_time(runner: CliRunner, world: World) -> None:
    """max_approval_age counts from when the log took the approval in, not from the approvedAt
    its signer wrote (issue 18): one dated 100 days back still counts now; judged 100 days
    later, it is older than the policy allows (90 days)."""
    from trajledger.runner.admission import DataRefusedError, admit

    create_dataset(world.ledger, "old", "1", "train", [world.spare], world.signer("vendor"))
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    approve(world.ledger, "old@1", world.signer("approver-a"))
    approve(world.ledger, "old@1", world.signer("approver-b"), expires="365d",
            now=now - dt.timedelta(days=100))
    index = len(world.kinds()) - 1
    expect(run(runner, world.home, "admit", "old@1"), 0)
    logged = world.entries()[index].time
    with pytest.raises(DataRefusedError) as refused:
        admit(world.ledger, "old@1", world.ledger.policy(), now=now + dt.timedelta(days=100))
    assert (f"approval {index} logged {logged} is older than the policy's maximum approval age "
            "(7776000s)") in str(refused.value)


def test_refuses_a_revoked_batch(runner: CliRunner, world: World) -> None:
    r = run(runner, world.home, "revoke", world.batch, "--key", "vendor", "--reason", "PII found")
    expect(r, 0)
    index = len(world.kinds()) - 1
    assert r.stderr == f"OK: {world.batch} revoked (log index {index})\n"
    line = (f"rollout-batch random-a ({short(world.batch)}) > revoked: PII found (log index "
            f"{index}){DEPENDS}{revoked_here(world, 'vendor', world.batch)}")
    refused_train(runner, world, "ds@1", line)
    refused_admit(runner, world, "ds@1", line)


def test_show_finds_a_record_by_the_digest_its_command_printed(runner: CliRunner,
                                                               world: World) -> None:
    """approve and revoke print the envelope digest of their record: show resolves it."""
    r = run(runner, world.home, "revoke", world.batch, "--key", "vendor", "--reason", "PII found")
    expect(r, 0)
    printed = r.stdout.strip()
    index = len(world.kinds()) - 1
    shown = run(runner, world.home, "show", printed)
    expect(shown, 0)
    assert shown.stdout.startswith(f"revocation at log index {index}\n")
    assert f"  about       rollout-batch random-a {world.batch}\n" in shown.stdout
    assert "    reason: PII found\n" in shown.stdout
    got = json.loads(run(runner, world.home, "show", printed, "--json").stdout)
    assert (got["kind"], got["envelope"], got["subject"], got["index"]) == (
        "revocation", printed, world.batch, index)
    # Only a full envelope digest: a prefix of one, or a digest of nothing, stays unknown (3).
    expect(run(runner, world.home, "show", printed[:20]), 3)
    expect(run(runner, world.home, "show", "sha256:" + "0" * 64), 3)


def test_refuses_a_revoked_dataset(runner: CliRunner, world: World) -> None:
    r = run(runner, world.home, "revoke", "ds@1", "--key", "approver-b", "--reason", "superseded")
    expect(r, 0)
    index = len(world.kinds()) - 1
    refused_train(
        runner,
        world,
        "ds@1",
        f"dataset ds@1 ({short(world.dataset)}) > revoked: superseded (log index {index})"
        + revoked_here(world, "approver-b", world.dataset),
    )


def test_refuses_an_erased_batch(runner: CliRunner, world: World) -> None:
    steps = world.blob_path(world.batch, "steps.parquet")
    r = run(runner, world.home, "erase", world.batch[:16], "--key", "vendor", "--reason", "consent")
    expect(r, 0)
    index = len(world.kinds()) - 1
    assert r.stderr == (
        f"OK: {world.batch[:16]} erased (consent): 3 blob(s) deleted, record at log index {index}\n"
    )
    assert not steps.exists()
    line = (
        f"{adm(world, 'ds@1')} > rollout-batch random-a ({short(world.batch)}): erased: consent "
        f"(log index {index}): erased data is never trained on"
    )
    refused_train(runner, world, "ds@1", line)
    refused_admit(runner, world, "ds@1", line)


def test_refuses_a_batch_that_is_not_in_the_log(runner: CliRunner, world: World) -> None:
    ghost = digest_bytes(b"a batch that was never recorded")
    world.craft_dataset("ghost", "train", [ghost])
    world.approve_both("ghost@1")
    refused_train(
        runner,
        world,
        "ghost@1",
        f"rollout-batch {short(ghost)} > record: not recorded in the log as rollout-batch"
        f"{DEPENDS}",
    )


def _sign_checkpoint(w: World, size: int, root: bytes) -> bytes:
    """A checkpoint note signed with the ledger's own log key (what a compromised or buggy log
    operator can produce)."""
    log_key = KeyStore(w.home / "log-key").signer("log")
    verifier = verifier_from_vkey(w.ledger.log.vkey)
    text = checkpoint_text(Checkpoint(ORIGIN, size, root))
    return text + b"\n" + format_signature_line(ORIGIN, verifier.key_hash, log_key.sign(text))


def _checkpoint(w: World) -> Checkpoint:
    return Checkpoint.from_text(Note.from_bytes((w.home / "log" / "checkpoint").read_bytes()).text)


def _seen(w: World, note: bytes) -> None:
    """Make the user's trust state remember ``note`` as the newest checkpoint seen."""
    import sqlite3

    state = w.ledger.trust_state()
    db = sqlite3.connect(state.path / "state.sqlite")
    db.execute("UPDATE meta SET value = ? WHERE key = 'checkpoint'", (note,))
    db.commit()
    db.close()


def test_refuses_a_log_fork(runner: CliRunner, world: World) -> None:
    # This user saw a checkpoint of the current size with another root: two checkpoints of one
    # size with different roots, both validly signed by the log key.
    current = _checkpoint(world)
    other_root = bytes(b ^ 0xFF for b in current.root)
    _seen(world, _sign_checkpoint(world, current.size, other_root))
    log = {p: p.read_bytes() for p in (world.home / "log").rglob("*") if p.is_file()}
    message = (
        f"FAIL: {world.home / 'log' / 'checkpoint'}: fork: the signed checkpoint at size "
        f"{current.size} has root {current.root.hex()[:16]}…, but root {other_root.hex()[:16]}… "
        "was seen before at that size; nothing was changed; run 'trajledger log verify' for "
        "every problem and restore the log from a copy you trust\n"
    )
    for args in (["admit", "ds@1"], ["train", "--dataset", "ds@1", "--key", "trainer"],
                 ["verify", "ds@1"]):
        expect(run(runner, world.home, *args), 1, message)
    # The evidence is kept: nothing in the log changed, and the other view is still remembered.
    assert {p: p.read_bytes() for p in (world.home / "log").rglob("*") if p.is_file()} == log
    floor = Ledger.open(world.home)
    with pytest.raises(TamperError):
        floor.trust_state()


def test_refuses_a_log_rollback(runner: CliRunner, world: World) -> None:
    backup = world.home.parent / "log-backup"
    shutil.copytree(world.home / "log", backup)
    old_size = _checkpoint(world).size
    register_evaluator(world.ledger, "other", "1", "human", world.signer("vendor"))
    r = run(runner, world.home, "train", "--dataset", "ds@1", "--key", "trainer")
    expect(r, 0)  # this user has now seen a larger size (the evaluator and the checkpoint)
    seen = _checkpoint(world).size
    assert seen == old_size + 2
    shutil.rmtree(world.home / "log")
    shutil.copytree(backup, world.home / "log")  # an old copy of the log is put back
    r = run(runner, world.home, "train", "--dataset", "ds@1", "--key", "trainer")
    expect(r, 1)
    assert r.stderr.startswith(
        f"FAIL: {world.home / 'log' / 'checkpoint'}: rollback: the signed checkpoint has "
        f"size {old_size}, but size {seen} (root "
    )


@pytest.mark.parametrize("split", ["holdout", "regression"])
def test_refuses_a_holdout_or_regression_dataset(
    runner: CliRunner, world: World, split: str
) -> None:
    world.dataset_of("held", world.spare, split)
    line = (
        f"{adm(world, 'held@1')} > dataset held@1: split: the dataset is '{split}', want "
        "'train': holdout and regression data are never trained on"
    )
    refused_train(runner, world, "held@1", line)
    refused_admit(runner, world, "held@1", line)


def test_refuses_a_batch_another_dataset_puts_in_holdout(runner: CliRunner, world: World) -> None:
    world.craft_dataset("exam", "holdout", [world.batch])
    index = len(world.kinds()) - 1
    refused_train(
        runner,
        world,
        "ds@1",
        f"{adm(world, 'ds@1')} > dataset ds@1: not held out: rollout-batch "
        f"{short(world.batch)} is in holdout dataset exam@1 (log index {index})",
    )


def test_refuses_tampered_bytes(runner: CliRunner, world: World) -> None:
    path = world.blob_path(world.batch, "steps.parquet")
    original = path.read_bytes()
    tampered = bytearray(original)
    tampered[len(tampered) // 2] ^= 0x01
    os.chmod(path, 0o644)
    path.write_bytes(bytes(tampered))
    from trajledger.ledger.artifacts import batch_files

    expected = batch_files(world.ledger, world.batch)["steps.parquet"]
    line = (
        f"{adm(world, 'ds@1')} > rollout-batch random-a ({short(world.batch)}) > steps.parquet: "
        f"tampered: content hashes to {short(digest_bytes(bytes(tampered)))}, want "
        f"{short(expected)}"
    )
    refused_train(runner, world, "ds@1", line)
    refused_admit(runner, world, "ds@1", line)


def test_refuses_a_truncated_blob(runner: CliRunner, world: World) -> None:
    path = world.blob_path(world.batch, "episodes.parquet")
    size = path.stat().st_size
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes()[:-10])
    refused_train(
        runner,
        world,
        "ds@1",
        f"{adm(world, 'ds@1')} > rollout-batch random-a ({short(world.batch)}) > "
        f"episodes.parquet: tampered: {size - 10} bytes, want {size} (blob "
        f"{short(batch_files(world.ledger, world.batch)['episodes.parquet'])})",
    )


def test_refuses_a_schema_failure(runner: CliRunner, world: World) -> None:
    import pyarrow.parquet as pq

    good_steps = pq.read_table(world.blob_path(world.batch, "steps.parquet"))
    bad = world.home / "tmp" / "steps.parquet"
    pq.write_table(good_steps.drop_columns(["terminated"]), bad)
    predicate = {
        k: v for k, v in world.predicate(world.batch, "rollout-batch").items() if k != "manifest"
    }
    rec = record_files(
        world.ledger,
        {
            "steps.parquet": bad,
            "episodes.parquet": world.blob_path(world.batch, "episodes.parquet"),
        },
        world.signer("vendor"),
        predicates.ROLLOUT_BATCH,
        predicate,
        name="no-rewards",
    )
    # `create_dataset` reads member batches to find duplicate episodes; record directly.
    world.craft_dataset("broken", "train", [rec.digest])
    world.approve_both("broken@1")
    r = refused_train(
        runner,
        world,
        "broken@1",
        f"{adm(world, 'broken@1')} > rollout-batch no-rewards ({short(rec.digest)}): schema: "
        "steps.parquet: ",
        exact=False,
    )
    assert "terminated" in r.stderr and "missing required column" in r.stderr


def test_reports_every_failure_batch_by_batch(runner: CliRunner, world: World) -> None:
    outsider = world.signer("outsider")
    bad = world.new_batch(9, outsider, name="outsiders")
    create_dataset(world.ledger, "mixed", "1", "train", [world.batch, bad], world.signer("vendor"))
    approve(world.ledger, "mixed@1", world.signer("approver-a"))
    run(runner, world.home, "revoke", world.batch, "--key", "vendor", "--reason", "leak")
    r = run(runner, world.home, "train", "--dataset", "mixed@1", "--key", "trainer")
    expect(r, 1)
    lines = r.stderr.splitlines()
    assert lines[0] == "FAIL: dataset mixed@1: refused, 3 problem(s)"
    assert any("approvals: 1 of 2" in x for x in lines)
    assert any(
        x.startswith(f"FAIL: rollout-batch random-a ({short(world.batch)}) > revoked")
        for x in lines
    )
    assert any(
        x.startswith(f"FAIL: rollout-batch {short(bad)} > record: rollout-batch record")
        for x in lines
    )


# -- training uses exactly the verified bytes ---------------------------------------------------


def test_admit_json_on_refusal(runner: CliRunner, world: World) -> None:
    create_dataset(world.ledger, "none", "1", "train", [world.spare], world.signer("vendor"))
    r = run(runner, world.home, "admit", "none@1", "--json")
    expect(r, 1)
    doc = json.loads(r.stdout)
    assert doc["admitted"] is False
    assert doc["report"]["ok"] is False


# -- verify: revocation fails a lineage, erasure does not ---------------------------------------


def _trained(runner: CliRunner, w: World) -> str:
    r = run(runner, w.home, "train", "--dataset", "ds@1", "--key", "trainer")
    expect(r, 0)
    return r.stdout.splitlines()[-1]


def test_verify_fails_after_a_revocation(runner: CliRunner, world: World) -> None:
    ckpt = _trained(runner, world)
    expect(run(runner, world.home, "verify", ckpt), 0)
    r = run(runner, world.home, "revoke", world.batch, "--key", "approver-a", "--reason", "leak")
    expect(r, 0)
    index = len(world.kinds()) - 1
    r = run(runner, world.home, "verify", ckpt)
    expect(r, 1)
    lines = r.stderr.splitlines()
    assert lines[0].startswith(f"FAIL: {ckpt}: 1 of ") and lines[0].endswith(" checks failed")
    assert len(lines) == 2 and lines[1].startswith(
        f"FAIL: rollout-batch random-a ({short(world.batch)}) > revoked: leak (log index {index})"
        "; and 2 records that depend on it; revoked by this ledger (signed by "), lines
    assert lines[1].endswith(f"): 'trajledger impact {world.batch}' lists what it reaches here; "
                             "stop using them, and build on data that stands (train again on a "
                             "dataset without it)"), lines  # (out55)
    assert "✗ revoked — leak" in r.stdout
    r = run(runner, world.home, "verify", ckpt, "--json")
    expect(r, 1)
    assert json.loads(r.stdout)["ok"] is False


def test_verify_says_erased_and_passes_after_an_erasure(runner: CliRunner, world: World) -> None:
    ckpt = _trained(runner, world)
    r = run(
        runner, world.home, "erase", world.batch, "--key", "approver-b", "--reason", "retention"
    )
    expect(r, 0)
    index = len(world.kinds()) - 1
    for skip in ((), ("--skip-data",)):
        r = run(runner, world.home, "verify", ckpt, *skip)
        expect(r, 0)
        assert r.stderr.startswith(f"OK: {ckpt}: ")
        assert r.stderr.endswith(
            " checks passed (1 erased: data deleted, digests verified)"
            + (" (data: sizes only, not re-hashed)" if skip else "") + "\n"
        )
        assert (
            f"∅ erased — retention (log index {index}); 2 of 2 blob(s) deleted; digests and "
            "signed records still verify"
        ) in r.stdout


def test_verify_fails_on_a_lost_blob(runner: CliRunner, world: World) -> None:
    ckpt = _trained(runner, world)
    path = world.blob_path(world.batch, "steps.parquet")
    path.unlink()  # lost, not erased: no erasure record explains it
    r = run(runner, world.home, "verify", ckpt)
    expect(r, 1)
    assert r.stderr.splitlines()[1].startswith(
        f"FAIL: rollout-batch random-a ({short(world.batch)}) > steps.parquet: blob "
    )


def test_verify_rehashes_data_by_default(runner: CliRunner, world: World) -> None:
    ckpt = _trained(runner, world)
    path = world.blob_path(world.batch, "steps.parquet")
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    r = run(runner, world.home, "verify", ckpt)
    expect(r, 1)
    assert "steps.parquet: tampered: content hashes to" in r.stderr
    # --skip-data compares sizes only, and says so on every file it did not re-hash.
    r = run(runner, world.home, "verify", ckpt, "--skip-data")
    expect(r, 0)
    assert "size only, not re-hashed" in r.stdout
    assert r.stderr.endswith(" (data: sizes only, not re-hashed)\n")
    path.write_bytes(bytes(data[:10]))
    r = run(runner, world.home, "verify", ckpt, "--skip-data")
    expect(r, 1)
    assert "steps.parquet: tampered: 10 bytes, want " in r.stderr


def test_verify_unknown_ref(runner: CliRunner, world: World) -> None:
    r = run(runner, world.home, "verify", "nothing@9")
    expect(
        r,
        3,
        "FAIL: nothing@9: no artifact has this name; see 'trajledger log show'\n",
    )


# -- status commands ------------------------------------------------------------------------------


def test_approve_refuses_a_key_without_the_approver_role(runner: CliRunner, world: World) -> None:
    keyid = world.signer("vendor").keyid
    r = run(runner, world.home, "approve", "ds@1", "--key", "vendor")
    expect(
        r,
        1,
        f"FAIL: key vendor ({keyid[:12]}): cannot approve ds@1: it holds producer role in "
        f"policy 'test' serial 1, want approver (fingerprint {keyid[:16]}; the policy's approver "
        f"key(s): {', '.join(sorted(world.signer(a).keyid[:16] for a in APPROVERS))}); nothing "
        "was signed\n",
    )


def test_approve_bad_expiry(runner: CliRunner, world: World) -> None:
    r = run(runner, world.home, "approve", "ds@1", "--key", "approver-a", "--expires", "soon")
    expect(r, 2)
    assert r.stderr.endswith(
        "Error: Invalid value for '--expires': 'soon' is not a duration such as '30d', '12h' or "
        "seconds; see 'trajledger approve --help'\n"
    )


def test_revoke_needs_a_producer_or_approver(runner: CliRunner, world: World) -> None:
    r = run(runner, world.home, "revoke", "ds@1", "--key", "outsider", "--reason", "x")
    keyid = world.signer("outsider").keyid
    expect(
        r,
        1,
        f"FAIL: key outsider ({keyid[:12]}): cannot revoke ds@1: it holds no role in policy "
        f"'test' serial 1, want producer or approver (fingerprint {keyid[:16]}; the policy's "
        "producer or approver key(s): "
        f"{', '.join(sorted(world.signer(k).keyid[:16] for k in ('vendor', *APPROVERS)))}); "
        "nothing was signed\n",
    )


def test_erase_needs_a_known_reason(runner: CliRunner, world: World) -> None:
    r = run(runner, world.home, "erase", "ds@1", "--key", "vendor", "--reason", "boredom")
    expect(r, 2)


# -- the policy commands --------------------------------------------------------------------------


APPROVERS = ("approver-a", "approver-b")


def paths_note(path: Path, n: int = 4) -> str:
    """The note `policy check` and `policy set` print for a policy naming keys by path."""
    listed = ", ".join(["keys/vendor.pub", "keys/approver-a.pub", "keys/approver-b.pub"])
    return (f"NOTE: {path}: names {n} key(s) by path ({listed}, ...): whoever can replace those "
            f"files changes this policy; write the keys inline with 'trajledger policy inline "
            f"{path}'\n")


def _policy_file(w: World, serial: int, name: str = "next.toml", **swap: str) -> Path:
    text = POLICY.format(serial=serial, vkey=w.ledger.log.vkey)
    for old, new in swap.items():
        text = text.replace(old, new)
    path = w.home / name
    path.write_text(text)
    return path


def test_policy_check_good(runner: CliRunner, world: World) -> None:
    r = run(runner, world.home, "policy", "check", world.policy_path)
    expect(r, 0, paths_note(world.policy_path) + f"OK: policy {world.policy_path}: valid, "
           "serial 1\n")
    lines = r.stdout.splitlines()
    assert lines[0].startswith("policy test serial 1 (sha256:")
    assert lines[2].startswith("  approver  threshold 2 of 2: ")
    r = run(runner, world.home, "policy", "check", world.policy_path, "--json")
    expect(r, 0)
    assert json.loads(r.stdout)["roles"]["approver"]["threshold"] == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name = [", "not valid TOML: "),
        (
            "serial = 1\n[roles.auditor]\nkeys = []\n",
            "unknown role(s) auditor (did you mean evaluator?); known: approver, evaluator, log, "
            "producer, trainer, witness",
        ),
        (
            '[roles.approver]\nkeys = ["keys/approver-a.pub"]\nthreshold = 2\n',
            "role approver: threshold 2 but only 1 member(s)",
        ),
        (
            '[roles.approver]\nkeys = ["keys/vendor.pub"]\n[roles.producer]\nkeys = '
            '["keys/vendor.pub"]\n',
            "holds both approver and producer; approvers need keys of their own",
        ),
        (
            '[roles.producer]\nkeys = ["keys/nobody.pub"]\n',
            "role producer: key 0: cannot read key file ",
        ),
        (
            "[roles.producer]\ntreshold = 1\n",
            "role producer: unknown field(s) treshold (did you mean threshold?); known: "
            "identities, keys, threshold",
        ),
        ('max_approval_age = "forever"\n', "max_approval_age: 'forever' is not a duration"),
        (
            'allowed_predicate_types = ["https://example.com/x"]\n',
            "allowed_predicate_types: unknown type(s) https://example.com/x; known: ",
        ),
    ],
)
def test_policy_check_bad(runner: CliRunner, world: World, text: str, message: str) -> None:
    path = world.home / "bad.toml"
    path.write_text(text)
    r = run(runner, world.home, "policy", "check", path)
    expect(r, 1)
    assert r.stderr.startswith(f"FAIL: policy {path}: "), r.stderr
    assert message in r.stderr
    assert len(r.stderr.splitlines()) == 1


def test_policy_check_missing_file(runner: CliRunner, world: World) -> None:
    path = world.home / "absent.toml"
    r = run(runner, world.home, "policy", "check", path)
    expect(r, 3, f"FAIL: policy {path}: no such file\n")


def test_policy_check_keyid_from_the_key_store(runner: CliRunner, world: World) -> None:
    keyid = world.signer("vendor").keyid
    path = _policy_file(world, 2, **{'keys = ["keys/vendor.pub"]': f'keys = ["{keyid}"]'})
    expect(run(runner, world.home, "policy", "check", path), 0)
    unknown = _policy_file(world, 2, **{'keys = ["keys/vendor.pub"]': f'keys = ["{"ab" * 32}"]'})
    r = run(runner, world.home, "policy", "check", unknown)
    expect(r, 1)
    assert "keyid abababababababab… is not a key of this ledger's key store" in r.stderr


def test_policy_set_successor_needs_the_current_approvers(runner: CliRunner, world: World) -> None:
    # Serial 2 makes the trainer's key the only producer: a change of membership (--yes).
    path = _policy_file(world, 2, **{"keys/vendor.pub": "keys/trainer.pub"})
    size = world.ledger.log.size
    vendor, trainer = world.signer("vendor").keyid, world.signer("trainer").keyid
    r = run(runner, world.home, "policy", "set", path, "--key", "approver-a", "--key",
            "approver-b")
    expect(r, 1)
    shown = r.stderr.splitlines()
    assert shown[1] == "policy 'test' serial 2, against serial 1 in force:"
    assert shown[2:5] == [
        "  producer  threshold 1",
        f"  producer    + key {trainer}",
        f"  producer    - key {vendor}",
    ]
    assert shown[-1] == (
        f"FAIL: policy {path}: changes the members of a role, or lowers its "
        "threshold (listed above, by fingerprint); nothing was recorded. Compare each "
        "fingerprint with its owner, then run again with --yes"
    )
    r = run(runner, world.home, "policy", "set", path, "--key", "approver-a", "--yes")
    expect(r, 1)
    assert r.stderr.endswith(
        "FAIL: policy 'test' serial 2: signed by 1 of the current policy's approvers, want 2: "
        "sign it with the approver keys of the policy in force, each by its own --key "
        "('trajledger policy set FILE --key approver-a --key approver-b'); a new key does not "
        "count until a successor they sign names it\n"  # out48
    )
    r = run(runner, world.home, "policy", "set", path, "--key", "outsider", "--key", "vendor",
            "--yes")
    expect(r, 1)
    assert r.stderr.endswith(
        "FAIL: policy 'test' serial 2: signed by 0 of the current policy's approvers, want 2: "
        "sign it with the approver keys of the policy in force, each by its own --key "
        "('trajledger policy set FILE --key approver-a --key approver-b'); a new key does not "
        "count until a successor they sign names it\n"
    )
    assert world.ledger.log.size == size
    r = run(runner, world.home, "policy", "set", path, "--key", "approver-a", "--key", "approver-b",
            "--yes")
    expect(r, 0)
    assert r.stderr.endswith(f"OK: policy {path} recorded at log index {size}\n")
    r = run(runner, world.home, "policy", "show")
    expect(r, 0, "")
    assert r.stdout.startswith("policy test serial 2 (sha256:")
    assert r.stdout.endswith(
        "history:\n  policy 'test' serial 1: first policy, log index 0\n"
        f"  policy 'test' serial 2: in force from log index {size}\n"
    )
    # What the vendor signed before the succession was signed under serial 1: it stays valid.
    expect(run(runner, world.home, "admit", "ds@1"), 0)
    # The vendor is no producer any more: trajledger refuses to sign with it, and what it
    # signed anyway (another tool) is refused by the verifier.
    with pytest.raises(PolicyError, match="cannot sign a rollout-batch record: it holds no role"):
        world.new_batch(7)
    batch = world.new_batch(7, world.signer("vendor"))
    create_dataset(world.ledger, "after", "1", "train", [batch], world.signer("trainer"))
    world.approve_both("after@1")
    r = run(runner, world.home, "admit", "after@1")
    expect(r, 1)
    assert "(producer role)" not in r.stderr and "(not in the policy)" in r.stderr


def test_policy_set_refuses_a_rollback_of_the_serial(runner: CliRunner, world: World) -> None:
    two = _policy_file(
        world, 2, "two.toml", **{'max_approval_age = "90d"': 'max_approval_age = "60d"'}
    )
    r = run(runner, world.home, "policy", "set", two, "--key", "approver-a", "--key", "approver-b")
    expect(r, 0)
    for serial in (1, 2):
        again = _policy_file(world, serial, "again.toml", **{'"90d"': '"30d"'})
        r = run(
            runner, world.home, "policy", "set", again, "--key", "approver-a", "--key", "approver-b"
        )
        expect(r, 1)
        assert r.stderr.endswith(
            f"FAIL: policy 'test': serial {serial} does not follow serial 2; a successor needs "
            "a higher serial (serial = 3)\n"
        )


def test_policy_set_first_policy_needs_its_own_approvers(runner: CliRunner, tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    ledger = Ledger.init(home, origin="test/fresh")
    for k in ("vendor", "approver-a", "approver-b", "trainer"):
        ledger.keys.create(k, encrypt=False)
    path = home / "policy.toml"
    path.write_text(POLICY.format(serial=1, vkey=ledger.log.vkey))
    r = run(runner, home, "policy", "show")
    expect(r, 3)
    r = run(runner, home, "policy", "set", path, "--key", "approver-a", "--key", "approver-b")
    expect(r, 1)  # the first policy adds every member: shown, and confirmed with --yes
    assert "policy 'test' serial 1, the first policy of this ledger:" in r.stderr
    r = run(runner, home, "policy", "set", path, "--key", "approver-a", "--yes")
    expect(r, 1)
    assert r.stderr.endswith(
        "FAIL: policy 'test': the first policy must be signed by its own approver threshold: "
        "1 of 2 approver key(s) signed\n"
    )
    r = run(runner, home, "policy", "set", path, "--key", "approver-a", "--key", "approver-b",
            "--yes")
    expect(r, 0)
    r = run(runner, home, "policy", "show", "--json")
    expect(r, 0)
    assert json.loads(r.stdout)["policy"]["serial"] == 1


def test_example_policy_is_accepted(runner: CliRunner, world: World) -> None:
    example = Path(__file__).resolve().parents[2] / "keys" / "example-policy.toml"
    r = run(runner, world.home, "policy", "check", example)
    expect(r, 0, f"OK: policy {example}: valid, serial 1\n")


# -- the ledger path: two iterations beat the random policy -------------------------------------


def test_second_iteration_through_the_ledger_beats_random(
    runner: CliRunner, world: World
) -> None:
    """record -> dataset -> approve -> train -> rollout -> dataset -> approve -> train, all
    through the ledger and the CLI; the returns are measured here with fixed seeds."""
    from trajledger.runner.train import checkpoint_files
    from trajledger.runner.trainers import load_policy

    w = world
    home = w.home
    played = run_policy(None, "CartPole-v1", 100, 0, policy_version="random", clock=clock)
    batch0 = record_batch(
        w.ledger,
        played.steps,
        episodes=played.episodes,
        env="cartpole@1",
        evaluator="episode-return@1",
        policy="random",
        signer=w.signer("vendor"),
        name="r100",
    ).recorded.digest
    create_dataset(w.ledger, "it", "1", "train", [batch0], w.signer("vendor"))
    for a in ("approver-a", "approver-b"):
        expect(run(runner, home, "approve", "it@1", "--key", a), 0)
    r = run(runner, home, "train", "--dataset", "it@1", "--key", "trainer", "--seed", "1")
    expect(r, 0)
    ckpt1 = r.stdout.splitlines()[-1]
    r = run(
        runner,
        home,
        "rollout",
        "--checkpoint",
        ckpt1,
        "--env",
        "CartPole-v1",
        "--episodes",
        "50",
        "--seed",
        "1000",
        "--key",
        "vendor",
    )
    expect(r, 0)
    batch1 = r.stdout.splitlines()[-1]
    assert w.predicate(batch1, "rollout-batch")["policyVersion"] == ckpt1
    create_dataset(w.ledger, "it", "2", "train", [batch0, batch1], w.signer("vendor"))
    for a in ("approver-a", "approver-b"):
        expect(run(runner, home, "approve", "it@2", "--key", a), 0)
    r = run(
        runner,
        home,
        "train",
        "--dataset",
        "it@2",
        "--key",
        "trainer",
        "--seed",
        "2",
        "--parent",
        ckpt1,
    )
    expect(r, 0)
    ckpt2 = r.stdout.splitlines()[-1]

    r = run(runner, home, "verify", ckpt2)
    expect(r, 0)
    assert "checkpoint it-bc@seed1" in r.stdout  # iteration 1 is in iteration 2's lineage

    eval_seed, episodes = 10_000, 30
    random_eval = run_policy(None, "CartPole-v1", episodes, eval_seed, policy_version="random")
    _item, files = checkpoint_files(w.ledger, ckpt2)
    second = run_policy(
        load_policy(files), "CartPole-v1", episodes, eval_seed, policy_version="iteration-2"
    )
    print(
        f"CartPole-v1 mean return over {episodes} episodes: random "
        f"{random_eval.mean_return:.1f}, iteration 2 (ledger) {second.mean_return:.1f}"
    )
    assert second.mean_return > random_eval.mean_return


# -- contamination between splits (audit index) ---------------------------------------------------


def _copy_batch(w: World, batch: str, name: str) -> str:
    """Record the same episodes again as a new batch (another name, so another record)."""
    import io

    import pyarrow.parquet as pq

    from trajledger.ledger.artifacts import batch_files

    files = batch_files(w.ledger, batch)
    steps = pq.read_table(io.BytesIO(w.ledger.store.get_verified(files["steps.parquet"])))
    episodes = pq.read_table(io.BytesIO(w.ledger.store.get_verified(files["episodes.parquet"])))
    ids = [f"copy-{e}" for e in steps.column("episode_id").to_pylist()]
    steps = steps.set_column(steps.schema.get_field_index("episode_id"), "episode_id", [ids])
    eids = [f"copy-{e}" for e in episodes.column("episode_id").to_pylist()]
    episodes = episodes.set_column(
        episodes.schema.get_field_index("episode_id"), "episode_id", [eids]
    )
    return record_batch(
        w.ledger,
        steps,
        episodes=episodes,
        env="cartpole@1",
        policy="random-copy",
        signer=w.signer("vendor"),
        name=name,
    ).recorded.digest


def test_dataset_create_refuses_an_exact_duplicate_of_a_train_episode(
    runner: CliRunner, world: World
) -> None:
    copy = _copy_batch(world, world.batch, "copied")
    size = world.ledger.log.size
    r = run(
        runner,
        world.home,
        "dataset",
        "create",
        "held",
        "--version",
        "1",
        "--split",
        "holdout",
        "--batch",
        copy,
        "--key",
        "vendor",
    )
    expect(r, 1)
    assert r.stderr.startswith(
        "FAIL: dataset held@1 (holdout): 4 episode(s) exactly duplicate "
        "episodes of the other split: "
    ), r.stderr
    assert world.ledger.log.size == size


def test_runner_refuses_train_data_that_duplicates_holdout_episodes(
    runner: CliRunner, world: World
) -> None:
    """A holdout dataset recorded around the writer's check (crafted) is still caught by the
    gate: the index finds the exact duplicates and the runner refuses."""
    copy = _copy_batch(world, world.batch, "copied")
    world.craft_dataset("held", "holdout", [copy])
    r = run(runner, world.home, "admit", "ds@1")
    expect(r, 1)
    lines = r.stderr.splitlines()
    assert lines[0] == "FAIL: dataset ds@1: refused, 4 problem(s)", r.stderr
    assert all("exact duplicate: " in line and "an exact duplicate" in line for line in lines[1:])
    # The gate reads verified bytes, not the audit index: destroying the index hides nothing.
    shutil.rmtree(world.home / "index", ignore_errors=True)
    (world.home / "index").mkdir()
    (world.home / "index" / "lance").write_text("garbage")
    r2 = run(runner, world.home, "admit", "ds@1")
    expect(r2, 1)
    assert r2.stderr == r.stderr


def test_a_bad_trainer_config_fails_before_any_data_is_read(
    runner: CliRunner, world: World, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"epoch": 3}')
    before = world.kinds()
    r = run(
        runner, world.home, "train", "--dataset", "ds@1", "--key", "trainer", "--config", config
    )
    expect(r, 1)
    assert r.stderr.startswith("FAIL: ") and "epoch" in r.stderr, r.stderr
    assert world.kinds() == before  # no checkpoint, and no refusal record: nothing was admitted
