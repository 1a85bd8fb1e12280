"""What an import does beyond reading its bundle once (issue 21 item 3, xfer44): counted, not
timed. ``bundle.json``'s member list, read from its bytes on each use (`Members`), is walked
three times an import (checked as parsed, summed once, followed as the members stream), not
six; each object's size is the one it streamed with.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_updates import Buyer, Vendor

from trajledger.verify import bundle_index
from trajledger.verify.bundle import BundleEvidence
from trajledger.verify.bundle_index import Member


def test_an_import_walks_the_member_list_three_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))  # (no one's)
    vendor = Vendor(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    with BundleEvidence.open(vendor.bundle) as ev:
        listed = len(ev.index.members)
    built: list[str] = []

    class Counted(Member):  # each member rebuilt from bundle.json's bytes is a new Member
        def __init__(self, name: str, size: int, sha256: str) -> None:
            built.append(name)
            super().__init__(name, size, sha256)

    monkeypatch.setattr(bundle_index, "Member", Counted)
    buyer.run("import", vendor.bundle, "--key", "approver")
    assert 0 < len(built) <= 3 * listed  # checked as parsed, summed once, streamed (six before)
    monkeypatch.setattr(bundle_index, "Member", Member)
    r = buyer.run("fsck")  # every object in the store at the size it streamed with
    assert "damaged\t0\n" in r.stdout and "orphans\t0\n" in r.stdout, r.stdout
