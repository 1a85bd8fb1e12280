"""A ledger whose blobs live in a remote object store (pyarrow.fs), here pyarrow's in-memory
mock filesystem standing in for ``s3://``: recording, admission, training, lineage verification
(sizes only, and re-hashed) and export all read blobs through the store, not the local disk.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pafs = pytest.importorskip("pyarrow.fs")

from trajledger.ledger.artifacts import create_dataset, record_batch, register_environment  # noqa: E402
from trajledger.ledger.exchange import export_bundle  # noqa: E402
from trajledger.ledger.home import Ledger  # noqa: E402
from trajledger.ledger.status import approve  # noqa: E402
from trajledger.runner.admission import admit  # noqa: E402
from trajledger.runner.rollouts import run_policy  # noqa: E402
from trajledger.runner.train import train  # noqa: E402
from trajledger.runner.verification import verify_ref  # noqa: E402
from trajledger.verify.bundle import BundleEvidence, verify_bundle  # noqa: E402
from trajledger.verify.policy import TrustPolicy  # noqa: E402


def test_a_remote_store_serves_the_whole_pipeline(tmp_path: Path) -> None:
    # pyarrow's in-memory filesystem (``mock:``): this Ledger's store lives as long as it does.
    ledger = Ledger.init(tmp_path / "home", origin="test/remote", store="mock:///bucket/ledger")
    keys = {n: ledger.keys.create(n, encrypt=False) for n in ("vendor", "a", "b", "trainer")}
    policy_path = ledger.root / "policy.toml"
    policy_path.write_text(
        f"""name = "remote"
[roles.producer]
keys = ["keys/vendor.pub"]
[roles.approver]
keys = ["keys/a.pub", "keys/b.pub"]
threshold = 2
[roles.trainer]
keys = ["keys/trainer.pub"]
[roles.log]
vkeys = ["{ledger.log.vkey}"]
"""
    )
    policy = TrustPolicy.from_toml(policy_path.read_bytes(), ledger.root)
    register_environment(ledger, "cartpole", "1", keys["vendor"], gymnasium_id="CartPole-v1")
    played = run_policy(None, "CartPole-v1", 6, 0, policy_version="random")
    batch = record_batch(
        ledger,
        played.steps,
        episodes=played.episodes,
        env="cartpole@1",
        policy="random",
        signer=keys["vendor"],
        name="random",
    ).recorded.digest
    create_dataset(ledger, "ds", "1", "train", [batch], keys["vendor"])
    for k in ("a", "b"):
        approve(ledger, "ds@1", keys[k])
    # Nothing but the derived index and temp dirs on the local disk: blobs are remote.
    assert not (ledger.root / "objects").exists()
    assert len(list(ledger.store.iter_digests())) > 5

    assert len(admit(ledger, "ds@1", policy).batches) == 1
    ckpt = train(ledger, "ds@1", "bc", keys["trainer"], policy, seed=0)
    for data in ("size", "hash"):
        report = verify_ref(ledger, ckpt.digest, policy, data=data)
        assert report.ok, report.failures()

    out = tmp_path / "ckpt.tar.zst"
    export_bundle(ledger, ckpt.digest, out, policy=policy)
    with BundleEvidence.open(out) as ev:
        bundled = verify_bundle(ev, policy)
    assert bundled.ok, bundled.failures()


def test_the_standalone_verifier_refuses_a_remote_store_clearly(tmp_path: Path) -> None:
    from trajledger.verify.errors import FormatError
    from trajledger.verify.ledger_dir import LedgerDirEvidence

    ledger = Ledger.init(tmp_path / "home", origin="test/remote", store="s3://bucket/ledger")
    with pytest.raises(FormatError, match=r"the store is s3://bucket/ledger; the standalone"):
        LedgerDirEvidence(ledger.root)
