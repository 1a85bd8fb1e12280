"""`test_updates.train_a_buyer`'s copies (suite46): built once per test process, each call's
parties are ledgers of their own under its directory, each as a fresh build would be."""

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
