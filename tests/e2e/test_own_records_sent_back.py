"""End to end: a buyer's own records shipped back by a party that took them in (sixteenth review
round, rev28 finding 3; docs/SECURITY.md "Review of 2026-12-05, sixteenth round (rev28)").

An import takes in the other log's records of what it brings, and its import record lists their
envelopes: that is what makes a record "another log's" (`catalog.Origins`,
`verify.releases.brought_by`). A record already in the buyer's log was listed too (the append
returns its index), so a vendor that had taken the buyer's suite in (the buyer shared it) and
exported it back made the buyer's own ``regression@1`` another log's: the buyer's release on it
was refused as an unpinned suite of another log. Now a record of the buyer's own (logged here,
listed by no import record, signed by a key the buyer holds) is not taken in again.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from test_release_suites_across_logs import EVALUATE, trained_buyer
from test_updates import Vendor, rollouts, vendor_copy
from testkit import Party


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


def _trusts_the_buyer(vendor: Vendor, buyer: Party) -> None:
    """The vendor's successor policy: the buyer's log and producer trusted, an approver of its
    own to sign imports."""
    vendor.run("key", "new", "vapprover", "--no-encrypt")
    (vendor.home / "buyer.pub").write_bytes((buyer.home / "keys" / "producer.pub").read_bytes())
    pol = (vendor.home / "policy.toml").read_text()
    pol = pol.replace("serial = 1", "serial = 2").replace('""",\n]', '""",\n  "buyer.pub",\n]')
    pol = pol.replace("[roles.log]", '[roles.approver]\nkeys = ["keys/vapprover.pub"]\n\n'
                      "[roles.log]")
    pol = re.sub(r"vkeys = \[(.*)\]", lambda m: f'vkeys = [{m.group(1)}, "{buyer.vkey()}"]',
                 pol)
    (vendor.home / "policy2.toml").write_text(pol)
    vendor.run("policy", "set", vendor.home / "policy2.toml", "--key", "vendor", "--yes")


def test_the_buyers_own_suite_sent_back_stays_its_own(tmp_path: Path) -> None:
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = trained_buyer(tmp_path, vendor)
    held = buyer.last("record", rollouts(tmp_path / "held.parquet", 31), "--env", "grid@1",
                      "--policy", "p", "--name", "held-1", "--licence", "CC-BY-4.0", "--key",
                      "producer")  # fmt: skip
    mine = buyer.last("dataset", "create", "regression", "--version", "1", "--split",
                      "regression", "--batch", held, "--key", "producer")  # fmt: skip
    at = int(json.loads(buyer.run("show", mine, "--json").stdout)["index"])
    script = tmp_path / "evaluate.py"
    script.write_text(EVALUATE)
    buyer.run("eval", "pol@1", "--suite", "regression@1", "--key", "evaluator", "--",
              sys.executable, script, "pass")  # fmt: skip
    # The buyer shares its suite; the vendor takes it in, then exports it back.
    shared, back = tmp_path / "shared.tar.zst", tmp_path / "back.tar.zst"
    buyer.run("export", "regression@1", "--out", shared)
    _trusts_the_buyer(vendor, buyer)
    vendor.run("import", shared, "--key", "vapprover")
    vendor.run("export", mine, "--out", back)
    size = buyer.size()
    r = buyer.run("import", back, "--key", "approver")
    # Of its records only the vendor's own environment record is another log's (on main: "3
    # foreign record(s) in this log (log indices 6..9)", the buyer's batch and suite among them).
    assert f"1 foreign record(s) in this log (log index {size})" in r.stderr, r.stderr
    # Still the buyer's own suite: the release on it is recorded. On main: refused, "sha256:…
    # (log index 7) came from another log, by import, and is not its suite".
    r = buyer.run("release", "pol@1", "--key", "approver")
    assert "came from another log" not in r.stderr, r.stderr
    shown = json.loads(buyer.run("show", mine, "--json").stdout)
    assert int(shown["index"]) == at
