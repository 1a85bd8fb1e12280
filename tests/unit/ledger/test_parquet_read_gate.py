"""spd52: the gate on a dataset of tiny batches (out53: 400 one-step batches, 12 ms each at the
gate). A batch's step and episode files whose strings the pages' headers bound below every
limit are read without dictionaries (`parquet_read._small`); the gate decides as it did when
every file was read as dictionaries and counted row by row: the same tables admitted, the same
refusals, word for word, of a tampered, revoked, unapproved or contaminated batch."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import testkit

from trajledger import Ledger
from trajledger.ledger.artifacts import batch_files
from trajledger.ledger.rollouts import parquet_read
from trajledger.runner.admission import Admission, DataRefusedError

POLICY = """\
name = "unit"
serial = 1
max_approval_age = "3650d"
[roles.producer]
keys = ["keys/vendor.pub"]
[roles.approver]
keys = ["keys/a.pub", "keys/b.pub"]
threshold = 2
[roles.trainer]
keys = ["keys/trainer.pub"]
[roles.log]
vkeys = ["{vkey}"]
"""


def _steps(seed: int) -> pa.Table:
    """One step of an episode of its own."""
    rng = np.random.default_rng(seed)
    return pa.table({
        "episode_id": [f"e{seed}"], "step": pa.array([0], pa.int64()),
        "obs": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(4, dtype=np.float32)), 4),
        "action": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(2, dtype=np.float32)), 2),
        "reward": pa.array(rng.random(1)), "terminated": [True], "truncated": [False],
    })  # fmt: skip


def build(root: Path) -> list[str]:
    """Keys vendor, a, b, trainer; the policy; env e@1; batches b0..b3 of one step each, and
    batch h (a holdout's) holding a copy of b0's episode; dataset ds@1 of b0..b3 approved by a
    and b. Returns the batches' digests, h last."""
    ledger = Ledger.init(root, origin="test/spd52")
    keys = {k: ledger.keys.create(k, encrypt=False) for k in ("vendor", "a", "b", "trainer")}
    (root / "policy.toml").write_text(POLICY.format(vkey=ledger.log.vkey))
    ledger.set_policy(root / "policy.toml", keys=[keys["a"], keys["b"]])
    ledger.register_environment("e", "1", key=keys["vendor"], gym_id="CartPole-v1")
    digests = [ledger.record_batch(_steps(i), env="e@1", policy="random",
                                   signer=keys["vendor"], name=f"b{i}").digest
               for i in range(4)]  # fmt: skip
    held = pa.concat_tables([_steps(0), _steps(9)])  # (b0's episode, and one of its own)
    digests.append(ledger.record_batch(held, env="e@1", policy="random",
                                       signer=keys["vendor"], name="h").digest)
    ledger.create_dataset("ds", "1", "train", digests[:4], key=keys["vendor"])
    for k in ("a", "b"):
        ledger.approve("ds@1", key=keys[k], expires="3650d")
    return digests


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[list[str]]:
    return testkit.build_template(tmp_path_factory.mktemp("spd52-gate"), build)


def _tamper(ledger: Ledger, digests: list[str]) -> str:
    path = Path(ledger.store.path_of(batch_files(ledger, digests[1])["steps.parquet"]))
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    return "ds@1"


def _revoke(ledger: Ledger, digests: list[str]) -> str:
    ledger.revoke(digests[2], key="vendor", reason="a bad run")
    return "ds@1"


def _unapproved(ledger: Ledger, digests: list[str]) -> str:
    ledger.create_dataset("other", "1", "train", digests[:2], key="vendor")
    ledger.approve("other@1", key="a", expires="3650d")
    return "other@1"


def _contaminated(ledger: Ledger, digests: list[str]) -> str:
    """A holdout holding a copy of a train episode, recorded as a tool that skipped `dataset
    create`'s own check would (test_evaluations.py does so too): the gate must refuse."""
    from trajledger.ledger.record import record_files
    from trajledger.verify import predicates

    (ledger.root / "dataset.json").write_text("{}")
    record_files(ledger, {"dataset.json": ledger.root / "dataset.json"},
                 ledger.keys.signer("vendor"), predicates.DATASET,
                 predicates.Dataset("held", "1", "holdout", (digests[4],)).written(),
                 name="held@1")
    return "ds@1"


CASES: dict[str, Callable[[Ledger, list[str]], str]] = {
    "admitted": lambda _ledger, _digests: "ds@1", "tampered": _tamper, "revoked": _revoke,
    "unapproved": _unapproved, "contaminated": _contaminated,
}


def _admit(ledger: Ledger, ref: str) -> Admission | str:
    try:
        return ledger.admit(ref, policy=ledger.policy())
    except DataRefusedError as e:
        return str(e)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_gate_decides_as_it_did_with_every_file_read_as_dictionaries(
    template: testkit.Template[list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    case: str,
) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "state"))
    ledger = Ledger.open(testkit.copy_template(template, tmp_path / "home"))
    ref = CASES[case](ledger, list(template.value))

    def not_counted(*_args: object) -> None:
        raise AssertionError("a tiny batch's file read as dictionaries and counted")

    with monkeypatch.context() as m:
        m.setattr(parquet_read, "_checked_rows", not_counted)
        fast = _admit(ledger, ref)
    with monkeypatch.context() as m:
        m.setattr(parquet_read, "_small", lambda *_a: False)
        slow = _admit(ledger, ref)
    if case == "admitted":
        assert isinstance(fast, Admission) and isinstance(slow, Admission)
        assert len(fast.batches) == 4
        for f, s in zip(fast.batches, slow.batches, strict=True):
            assert f.digest == s.digest and f.files == s.files
            assert f.steps.equals(s.steps) and f.episodes.equals(s.episodes)
    else:
        assert isinstance(fast, str) and fast == slow
        want = {"tampered": "tampered", "revoked": "revoked", "unapproved": "approvals: 1 of 2",
                "contaminated": "exact duplicate"}[case]
        assert want in fast, fast
