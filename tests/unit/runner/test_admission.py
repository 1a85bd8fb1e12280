"""The admission gate (``runner.admission``) and training on what it admitted
(``runner.train``), through the library.

- ``admit`` returns exactly the verified bytes as tables, with the verified dependencies;
- it refuses with an exception carrying the whole report, every failure listed;
- a dataset record whose envelope is damaged fails the contamination check (it may be a
  holdout);
- the newest checkpoint seen is remembered in the user's trust state (outside the ledger), and a
  log rolled back behind it is refused;
- ``load_policy``: the policy given, followed through the log's history, or the one in force;
  a trust-policy record whose envelope is missing or damaged fails it (fail closed);
- replacing a batch's file after admission, before training reads it, cannot change what is
  trained on (the trainer gets the admitted bytes; the checkpoint equals one trained on the
  original);
- ``train`` checks the trainer role before anything, and a refusal appends one refusal record.
"""

from __future__ import annotations

import datetime as dt
import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import testkit

from trajledger import Ledger
from trajledger.ledger.artifacts import (
    batch_files,
    create_dataset,
    record_batch,
    register_environment,
    register_evaluator,
)
from trajledger.ledger.catalog import Catalog
from trajledger.ledger.errors import LedgerError, TamperError
from trajledger.ledger.keys import Signer
from trajledger.ledger.policy_state import load_policy
from trajledger.ledger.status import approve, erase, record_policy
from trajledger.runner import train as train_module
from trajledger.runner.admission import DataRefusedError, admit
from trajledger.runner.rollouts import run_policy
from trajledger.runner.train import train
from trajledger.runner.trainers import TrainingData, TrainResult
from trajledger.verify.errors import PolicyError
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.policy import TrustPolicy

POLICY = """\
name = "unit"
serial = {serial}
max_approval_age = "{age}"

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
    return 1_700_000_000_000_000


@dataclass
class Setup:
    ledger: Ledger
    keys: dict[str, Signer]
    policy_path: Path
    policy: TrustPolicy
    batches: list[str]

    def write_policy(self, serial: int, age: str = "90d", name: str = "policy.toml") -> Path:
        path = self.ledger.root / name
        path.write_text(POLICY.format(serial=serial, age=age, vkey=self.ledger.log.vkey))
        return path

    def approve_both(self, ref: str, **kw: Any) -> None:
        for a in ("approver-a", "approver-b"):
            approve(self.ledger, ref, self.keys[a], **kw)

    def kinds(self) -> list[str]:
        log = self.ledger.log
        return [LogEntry.from_bytes(e).kind for e in log.entries(0, log.size)]

    def blob(self, batch: str, name: str) -> Path:
        return Path(self.ledger.store.path_of(batch_files(self.ledger, batch)[name]))


KEYS = ("vendor", "approver-a", "approver-b", "trainer")


def build(root: Path) -> list[str]:
    """The ledger at ``root``: keys `KEYS`, policy serial 1 in force, cartpole@1 and return@1,
    batches b0 and b50 (4 random episodes each), dataset ds@1 of b0 approved by both approvers;
    returns the batches' digests."""
    ledger = Ledger.init(root, origin="test/admission")
    keys = {k: ledger.keys.create(k, encrypt=False) for k in KEYS}
    s = Setup(ledger, keys, root / "policy.toml", None, [])  # type: ignore[arg-type]
    record_policy(ledger, s.write_policy(1), [keys["approver-a"], keys["approver-b"]])
    register_environment(ledger, "cartpole", "1", keys["vendor"], gymnasium_id="CartPole-v1")
    register_evaluator(ledger, "return", "1", "deterministic", keys["vendor"])
    for seed in (0, 50):
        played = run_policy(None, "CartPole-v1", 4, seed, policy_version="random", clock=clock)
        s.batches.append(
            record_batch(
                ledger,
                played.steps,
                episodes=played.episodes,
                env="cartpole@1",
                evaluator="return@1",
                policy="random",
                signer=keys["vendor"],
                name=f"b{seed}",
            ).recorded.digest
        )
    create_dataset(ledger, "ds", "1", "train", [s.batches[0]], keys["vendor"])
    s.approve_both("ds@1")
    return s.batches


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[list[str]]:
    return testkit.build_template(tmp_path_factory.mktemp("admission"), build)


@pytest.fixture
def setup(template: testkit.Template[list[str]], tmp_path: Path) -> Setup:
    ledger = Ledger.open(testkit.copy_template(template, tmp_path / "home"))
    policy_path = ledger.root / "policy.toml"
    return Setup(
        ledger,
        {k: ledger.keys.signer(k) for k in KEYS},
        policy_path,
        TrustPolicy.from_toml(policy_path.read_bytes(), policy_path.parent),
        list(template.value),
    )


# -- what admission returns ---------------------------------------------------------------------


def test_admit_returns_the_verified_bytes_as_tables(setup: Setup) -> None:
    got = admit(setup.ledger, "ds@1", setup.policy)
    catalog = Catalog(setup.ledger)
    assert got.dataset == catalog.resolve("ds@1", {"dataset"}).digest
    assert (got.name, got.version, got.purpose) == ("ds", "1", "train")
    assert got.report.ok
    (batch,) = got.batches
    assert batch.digest == setup.batches[0]
    assert batch.index == catalog.resolve(batch.digest).index
    for name, table in (("steps.parquet", batch.steps), ("episodes.parquet", batch.episodes)):
        assert table.equals(pq.read_table(setup.blob(batch.digest, name)))
    assert batch.predicate.policy_version == "random"
    deps = {(d.role, d.name): d for d in got.dependencies}
    assert set(deps) == {("environment", "cartpole@1"), ("evaluator", "return@1")}
    assert deps[("environment", "cartpole@1")].index == catalog.resolve("cartpole@1").index


def test_refusal_is_an_exception_with_the_whole_report(setup: Setup) -> None:
    create_dataset(setup.ledger, "two", "1", "train", setup.batches, setup.keys["vendor"])
    approve(setup.ledger, "two@1", setup.keys["approver-a"])
    for digest in setup.batches:
        path = setup.blob(digest, "episodes.parquet")
        os.chmod(path, 0o644)
        path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(DataRefusedError, match=r"^dataset two@1: refused, 3 problem\(s\)\n") as e:
        admit(setup.ledger, "two@1", setup.policy)
    assert isinstance(e.value, PolicyError)
    failures = e.value.report.failures()
    assert len(failures) == 3
    # The rules of its use, then batch by batch, in the dataset's order (sorted digests).
    ds = Catalog(setup.ledger).resolve("two@1").digest
    decision = f"admission of dataset two@1 ({ds[:19]}…)"
    assert failures[0].startswith(f"{decision} > dataset two@1: approvals: 1 of 2")
    names = {setup.batches[0]: "b0", setup.batches[1]: "b50"}
    for digest, line in zip(sorted(setup.batches), failures[1:], strict=True):
        assert line.startswith(f"{decision} > rollout-batch {names[digest]} ({digest[:19]}…) > ")
        assert "> episodes.parquet: tampered: " in line
    # The message: the report's lines, the approvals' with what to do (out46).
    said = str(e.value).splitlines()[1:]
    assert said[1:] == failures[1:] and said[0].startswith(failures[0] + ": approve it with 1 ")


def test_a_batch_approval_does_not_approve_the_dataset(setup: Setup) -> None:
    """Training needs approvals of the dataset itself; approving its batches is not enough."""
    create_dataset(setup.ledger, "b-only", "1", "train", [setup.batches[1]], setup.keys["vendor"])
    setup.approve_both(setup.batches[1])
    with pytest.raises(DataRefusedError, match="approvals: 0 of 2 required approver"):
        admit(setup.ledger, "b-only@1", setup.policy)


def test_purpose_and_time_are_judged(setup: Setup) -> None:
    with pytest.raises(DataRefusedError, match=r"0 of 2 required approver\(s\) for 'eval'"):
        admit(setup.ledger, "ds@1", setup.policy, purpose="eval")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=31)
    with pytest.raises(DataRefusedError, match=r"approval \d+ expired at "):
        admit(setup.ledger, "ds@1", setup.policy, now=later)


def test_an_erased_dataset_is_refused(setup: Setup) -> None:
    erase(setup.ledger, "ds@1", setup.keys["vendor"], reason="legal")
    with pytest.raises(DataRefusedError) as e:
        admit(setup.ledger, "ds@1", setup.policy)
    assert any(
        "> dataset ds@1 (" in f and ": erased: legal (log index " in f
        for f in e.value.report.failures()
    )


def test_a_batch_whose_data_another_erasure_deleted_is_refused_not_dropped(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store keeps one blob per content: ``copy`` (b0's steps recorded again under another
    policy) shares b0's ``steps.parquet``. An erasure of ``copy`` that lists and deletes it
    (as every erasure did before rev8; since, one another log brought, or an older ledger's)
    leaves b0 verifying as "erased", not failed. Admission then skipped b0 without a word:
    ``ds@1`` was "admitted (0 batch(es))" and a dataset of two batches trained on one, its
    checkpoint recorded as trained on the whole dataset (rev8). Now the batch is refused,
    naming the erasure; erased data is never trained on."""
    from trajledger.ledger import status

    steps = setup.blob(setup.batches[0], "steps.parquet")
    copy = record_batch(setup.ledger, [steps], env="cartpole@1", evaluator="return@1",
                        policy="other", signer=setup.keys["vendor"], name="copy"
                        ).recorded.digest  # fmt: skip
    assert batch_files(setup.ledger, copy)["steps.parquet"] == batch_files(
        setup.ledger, setup.batches[0])["steps.parquet"]  # one blob, two batches
    create_dataset(setup.ledger, "two", "1", "train", setup.batches, setup.keys["vendor"])
    setup.approve_both("two@1")
    monkeypatch.setattr(status, "kept_blobs", lambda *_a: {})  # an erasure before rev8's fix
    erased = erase(setup.ledger, "copy", setup.keys["vendor"], reason="consent")[0]
    assert not steps.exists()
    for ds in ("ds@1", "two@1"):
        with pytest.raises(DataRefusedError) as e:
            admit(setup.ledger, ds, setup.policy)
        assert [f for f in e.value.report.failures() if "> steps.parquet" in f] == [
            f"admission of dataset {ds} ({Catalog(setup.ledger).resolve(ds).digest[:19]}…) > "
            f"rollout-batch b0 ({setup.batches[0][:19]}…) > steps.parquet: erased: deleted by "
            f"the erasure of {copy[:19]}… (consent, log index {erased.index}): erased data is "
            "never trained on"
        ], e.value.report.failures()


def test_a_damaged_dataset_record_fails_the_contamination_check(setup: Setup) -> None:
    """A dataset record whose envelope is gone may be a holdout: contamination cannot be ruled
    out (found by the tamper matrix: the check said "no holdout or regression data" and the
    dataset was admitted). An intact record of another split changes nothing."""
    held = create_dataset(
        setup.ledger, "held", "1", "holdout", [setup.batches[1]], setup.keys["vendor"]
    )
    what = "no episode duplicates a holdout or regression episode"
    report = admit(setup.ledger, "ds@1", setup.policy).report
    assert any(what in line and "0 exact" in line for line in report.render())
    envelope = Path(setup.ledger.store.path_of(held.recorded.envelope_digest))
    os.chmod(envelope, 0o644)
    envelope.unlink()
    with pytest.raises(DataRefusedError) as e:
        admit(setup.ledger, "ds@1", setup.policy)
    [failure] = e.value.report.failures()
    assert f"{what}: cannot be checked: a dataset record is damaged: log entry " in failure
    assert f"(dataset): envelope {held.recorded.envelope_digest[:19]}… is missing" in failure


def test_unknown_dataset_is_operational(setup: Setup) -> None:
    with pytest.raises(LedgerError, match=r"^nope@1: no dataset has this name"):
        admit(setup.ledger, "nope@1", setup.policy)


# -- the newest checkpoint seen -------------------------------------------------------------------


def test_the_newest_checkpoint_seen_is_remembered_outside_the_ledger(setup: Setup) -> None:
    admit(setup.ledger, "ds@1", setup.policy)
    state = setup.ledger.trust_state()
    assert state.floor() == (setup.ledger.root / "log" / "checkpoint").read_bytes()
    assert not str(state.path).startswith(str(setup.ledger.root))
    approve(setup.ledger, "ds@1", setup.keys["approver-a"], note="again")  # the log grows
    admit(setup.ledger, "ds@1", setup.policy)
    assert Ledger.open(setup.ledger.root).trust_state().size == setup.ledger.log.size


def test_a_log_rolled_back_behind_what_was_seen_is_refused(setup: Setup) -> None:
    log = setup.ledger.root / "log"
    saved = {p: p.read_bytes() for p in log.rglob("*") if p.is_file()}
    approve(setup.ledger, "ds@1", setup.keys["approver-a"], note="seen")
    admit(setup.ledger, "ds@1", setup.policy)
    # Someone with write access to the ledger puts the whole older log back.
    for p in log.rglob("*"):
        if p.is_file() and p not in saved:
            p.unlink()
    for p, data in saved.items():
        p.write_bytes(data)
    rollback = r"/log/checkpoint: rollback: the signed checkpoint has size \d+, but"
    with pytest.raises(TamperError, match=rollback):
        admit(Ledger.open(setup.ledger.root), "ds@1", setup.policy)


# -- which policy applies -----------------------------------------------------------------------


def test_load_policy(setup: Setup, tmp_path: Path) -> None:
    policy, notes = load_policy(setup.ledger, None)
    assert (policy.name, policy.serial) == ("unit", 1)
    assert notes == ["policy 'unit' serial 1: first policy, log index 0"]
    # A successor recorded in the log is followed from the file a verifier holds.
    two = setup.write_policy(2, age="30d", name="two.toml")
    rec = record_policy(setup.ledger, two, [setup.keys["approver-a"], setup.keys["approver-b"]])
    policy, notes = load_policy(setup.ledger, setup.policy_path)
    assert (policy.serial, policy.max_approval_age) == (2, 30 * 86400)
    assert notes[-1] == f"policy 'unit' serial 2: in force from log index {rec.index}"
    # A file that is not in the log is used as given.
    three = setup.write_policy(3, age="10d", name="three.toml")
    policy, notes = load_policy(setup.ledger, three)
    assert policy.serial == 3
    assert notes == ["policy 'unit' serial 3: used as given (not recorded in the log)"]
    with pytest.raises(OSError, match=r"absent\.toml: no such file"):
        load_policy(setup.ledger, tmp_path / "absent.toml")


def test_load_policy_without_any(tmp_path: Path) -> None:
    ledger = Ledger.init(tmp_path / "empty", origin="test/empty")
    with pytest.raises(LedgerError, match=r"^no trust policy: pass --policy FILE"):
        load_policy(ledger, None)


# -- training uses exactly the admitted bytes ---------------------------------------------------


class Spy:
    """Wraps the real trainer and keeps what it was given."""

    name = "bc"

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seen: list[TrainingData] = []

    def train(self, data: TrainingData, config: Mapping[str, Any], seed: int) -> TrainResult:
        self.seen.append(data)
        result: TrainResult = self.inner.train(data, config, seed)
        return result


def test_replacing_a_file_after_admission_cannot_change_what_is_trained(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trajledger.runner import trainers

    batch = setup.batches[0]
    steps_path = setup.blob(batch, "steps.parquet")
    original = steps_path.read_bytes()
    other = setup.blob(setup.batches[1], "steps.parquet").read_bytes()
    assert original != other

    real_load = trainers.load_trainer
    spies: list[Spy] = []

    def load_spy(name: str) -> Spy:
        spies.append(Spy(real_load(name)))
        return spies[-1]

    monkeypatch.setattr(trainers, "load_trainer", load_spy)
    baseline = train(setup.ledger, "ds@1", "bc", setup.keys["trainer"], setup.policy, seed=4)

    real_admit = train_module.admit  # type: ignore[attr-defined]
    swapped: list[bool] = []

    def admit_then_swap(*args: Any, **kw: Any) -> Any:
        admission = real_admit(*args, **kw)
        # Between the check and the use, someone replaces the batch's file in the store.
        os.chmod(steps_path, 0o644)
        steps_path.write_bytes(other)
        swapped.append(True)
        return admission

    monkeypatch.setattr(train_module, "admit", admit_then_swap)
    attacked = train(setup.ledger, "ds@1", "bc", setup.keys["trainer"], setup.policy, seed=4)

    assert swapped and steps_path.read_bytes() == other  # the swap did happen
    trained_on = spies[-1].seen[0].steps
    assert trained_on.equals(pq.read_table(io.BytesIO(original)))
    assert not trained_on.equals(pq.read_table(io.BytesIO(other)))
    assert spies[0].seen[0].steps.equals(trained_on)
    # Same files, byte for byte: the checkpoint's manifest digest is the same.
    assert attacked.digest == baseline.digest
    # And the swapped file is refused from now on.
    monkeypatch.setattr(train_module, "admit", real_admit)
    with pytest.raises(DataRefusedError, match=r"> steps\.parquet: tampered: "):
        admit(setup.ledger, "ds@1", setup.policy)


# -- train ----------------------------------------------------------------------------------------


def test_train_checks_the_trainer_role_first(setup: Setup) -> None:
    size = setup.ledger.log.size
    with pytest.raises(PolicyError, match=r"^key vendor .*: does not hold the trainer role"):
        train(setup.ledger, "ds@1", "bc", setup.keys["vendor"], setup.policy)
    assert setup.ledger.log.size == size


def test_a_refused_train_appends_one_refusal(setup: Setup) -> None:
    create_dataset(setup.ledger, "nope", "1", "train", [setup.batches[1]], setup.keys["vendor"])
    before = setup.kinds()
    with pytest.raises(DataRefusedError, match="approvals: 0 of 2"):
        train(setup.ledger, "nope@1", "bc", setup.keys["trainer"], setup.policy)
    assert setup.kinds() == [*before, "refusal"]


def test_train_records_provenance(setup: Setup) -> None:
    out = train(
        setup.ledger,
        "ds@1",
        "bc",
        setup.keys["trainer"],
        setup.policy,
        seed=2,
        name="m",
        version="1",
    )
    second = train(
        setup.ledger,
        "ds@1",
        "bc",
        setup.keys["trainer"],
        setup.policy,
        seed=3,
        name="m",
        version="2",
        parent="m@1",
    )
    assert out.metrics and second.admission.dataset == out.admission.dataset
    item = Catalog(setup.ledger).resolve("m@2", {"checkpoint"})
    assert item.digest == second.digest
