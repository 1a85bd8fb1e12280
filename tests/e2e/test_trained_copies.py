"""`test_updates.train_a_buyer`'s copies (suite46) and `test_updates.vendor_copy`'s (ci51):
built once per test process, each call's parties are ledgers of their own under its directory,
each as a fresh build would be."""

from __future__ import annotations

import json
from pathlib import Path

from test_updates import train_a_buyer


def test_each_call_has_parties_of_its_own(tmp_path: Path) -> None:
    one = train_a_buyer(tmp_path / "one")
    two = train_a_buyer(tmp_path / "two")
    for (vendor, buyer, ckpt), root in ((one, tmp_path / "one"), (two, tmp_path / "two")):
        for path in (vendor.home, vendor.state, vendor.bundle, buyer.home, buyer.state):
            assert path.is_relative_to(root) and path.exists(), path
        buyer.run("verify", ckpt)
    vendor, buyer, ckpt = one
    size = two[0].size()
    vendor.run("revoke", vendor.batches[0], "--reason", "consent withdrawn", "--key", "vendor")
    assert vendor.size() == size + 1 and two[0].size() == size  # the other copy untouched
    shown = json.loads(buyer.run("show", ckpt, "--json").stdout)
    assert json.loads(two[1].run("show", ckpt, "--json").stdout) == shown


def test_each_vendor_copy_is_a_ledger_of_its_own_and_one_test_gets_two_vendors(
        tmp_path: Path) -> None:
    """`test_updates.vendor_copy` (ci51): the build of its arguments copied under the call's
    own root; a second call with the same arguments in one test is another vendor (its own
    keys and log key), as two ``Vendor(...)`` calls would be."""
    from test_updates import Buyer, vendor_copy
    from testkit import BUILT

    one = vendor_copy(tmp_path / "one", "copied", "copied.example/log")
    two = vendor_copy(tmp_path / "two", "copied", "copied.example/log")
    for party, root in ((one, tmp_path / "one"), (two, tmp_path / "two")):
        for path in (party.home, party.state, party.bundle):
            assert path.is_relative_to(root) and path.exists(), path
    assert one.origin != two.origin  # two log keys
    assert one.vkey() != two.vkey()
    built = BUILT[("vendor", "copied", "copied.example/log", (1, 2), "grid")][1]
    size = built.size()
    one.run("revoke", one.batches[0], "--reason", "consent withdrawn", "--key", "vendor")
    assert one.size() == size + 1 and built.size() == size  # the build untouched
    buyer = Buyer(tmp_path / "one", [one])
    buyer.run("import", one.bundle, "--key", "approver")
    buyer.run("verify", one.dataset)
