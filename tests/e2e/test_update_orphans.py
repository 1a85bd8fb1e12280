"""An update bundle stores only the envelopes of what it takes in (review of issue 21's
streamed import, `ledger.exchange.import_bundle`).

Found by review: an update (``export --updates-since``) carries the envelopes of every record
its log publishes (revocations, erasures, policies), also those about artifacts the buyer does
not hold, which the import rightly does not take in; their envelopes were moved into the store
anyway, where no record names them: an orphan per such record on every update (``fsck`` warned
of them), at the vendor's will.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_updates import Buyer, rollouts, vendor_copy

from trajledger import Ledger


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


def test_an_update_about_what_the_buyer_does_not_hold_stores_nothing_of_it(
    tmp_path: Path,
) -> None:
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    buyer.run("import", vendor.bundle, "--key", "approver")
    applied = vendor.size()
    other = vendor.last("record", rollouts(tmp_path / "other.parquet", 7), "--env", "grid@1",
                        "--policy", "scripted", "--name", "other", "--licence", "CC-BY-4.0",
                        "--key", "vendor")  # fmt: skip
    vendor.run("revoke", other, "--reason", "not the buyer's business", "--key", "vendor")
    vendor.run("revoke", vendor.batches[0], "--reason", "consent withdrawn", "--key", "vendor")
    update = tmp_path / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    stored = set(Ledger.open(buyer.home).store.iter_digests())
    r = buyer.run("import", update, "--key", "approver")
    # The revocation of the held batch and the policy (consulted), not the other revocation.
    assert "imported, 2 object(s), 1 foreign record(s) in this log" in r.stderr, r.stderr
    new = set(Ledger.open(buyer.home).store.iter_digests()) - stored
    state = Ledger.open(buyer.home).trust_state()
    revocation = state.entry(state.of_kind("revocation")[-1])
    assert revocation is not None and revocation.subject == vendor.batches[0]
    record = state.entry(state.of_kind("import")[-1])
    assert record is not None
    # The held batch's revocation and the import record, nothing of the other revocation.
    assert new == {revocation.envelope, record.envelope}
    r = buyer.run("fsck")
    assert "orphans\t0\n" in r.stdout, r.stdout
    r = buyer.run("verify", "bh@1", code=1)
    assert "consent withdrawn" in r.stdout + r.stderr
