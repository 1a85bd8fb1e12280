"""End to end: another log's record that names one of the buyer's keyids beside a signature
that does not verify is not the buyer's own (seventeenth review round, rev29 finding 1;
docs/SECURITY.md "Review of 2026-12-05, seventeenth round (rev29)").

An update leaves out the records of the buyer's own another log ships back (`sent_back`: logged
here, listed by no import record, signed by a key the buyer holds; rev28 finding 3). "Signed"
was read from the log entry's signers, the envelope's keyids, which whoever makes the envelope
writes: a vendor adds ``{"keyid": <the buyer's producer keyid>, "sig": <anything>}`` beside its
own signature, and every verifier ignores it (a co-signer that does not verify adds nothing).
Such a record of the vendor's, logged here as an earlier version's import stopped between its
two appends left it (left28), was taken for the buyer's own when the import ran again: not
listed by the import record, it stayed the buyer's own (no origin: a suite releasable unpinned,
a name the buyer owns). Now the signature must verify with the key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_release_suites_across_logs import trained_buyer
from test_updates import rollouts, vendor_copy

import trajledger.ledger.record as record
from trajledger.ledger.log import EntrySpec
from trajledger.verify.dsse import Envelope, Signature
from trajledger.verify.log_entry import LogEntry


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


def test_a_vendors_record_naming_the_buyers_keyid_stays_the_vendors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trajledger import Ledger
    from trajledger.ledger.updates import sent_back

    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = trained_buyer(tmp_path, vendor)
    mine = Ledger.open(buyer.home).keys.public("producer").keyid
    real = record.sign_statement

    def naming_the_buyer(*args: Any, **kwargs: Any) -> Envelope:
        env = real(*args, **kwargs)
        return Envelope(env.payload, env.payload_type,
                        (*env.signatures, Signature(mine, b"\x00" * 64)))

    # The vendor's new dataset: its envelopes name the buyer's producer keyid, a signature
    # that verifies with nothing, beside the vendor's.
    monkeypatch.setattr(record, "sign_statement", naming_the_buyer)
    batch = vendor.last("record", rollouts(tmp_path / "v3.parquet", 3), "--env", "grid@1",
                        "--policy", "scripted", "--name", "vendor-3", "--licence", "CC-BY-4.0",
                        "--key", "vendor")  # fmt: skip
    theirs = vendor.last("dataset", "create", "bh", "--version", "2", "--split", "train",
                         "--batch", batch, "--key", "vendor")  # fmt: skip
    monkeypatch.setattr(record, "sign_statement", real)
    bundle = tmp_path / "bh2.tar.zst"
    vendor.run("export", "bh@2", "--out", bundle)
    seller = Ledger.open(vendor.home)
    at = int(json.loads(vendor.run("show", theirs, "--json").stdout)["index"])
    entry = LogEntry.from_bytes(seller.log.entry(at))
    assert mine in entry.signers
    # Logged at the buyer as an earlier version's import stopped between its two appends left
    # it (left28): its envelope stored, no import record.
    here = Ledger.open(buyer.home)
    here.store.put_bytes(seller.store.get(entry.envelope))
    here.log.append([EntrySpec(entry.kind, entry.subject, entry.envelope, entry.signers)],
                    foreign=True)
    # On main: {at}, the vendor's dataset taken for the buyer's own.
    assert sent_back(Ledger.open(buyer.home), {at: entry}) == set()
    r = buyer.run("import", bundle, "--key", "approver")
    assert "foreign record(s) in this log" in r.stderr, r.stderr
    # Listed by the import record: the vendor's (on main: [], the buyer's own).
    origins = json.loads(buyer.run("show", theirs, "--json").stdout)["origins"]
    assert origins == [vendor.origin.split("+")[0] + "+" + vendor.origin.split("+")[1]]
