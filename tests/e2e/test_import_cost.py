"""What an import does beyond reading its bundle once (issue 21 item 3, xfer44): counted, not
timed. ``bundle.json``'s member list, read from its bytes on each use (`Members`), is walked
three times an import (checked as parsed, summed once, followed as the members stream), not
six; each object's size is the one it streamed with.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_updates import Buyer, Vendor

from trajledger.verify import bundle_index
from trajledger.verify.bundle import BundleEvidence


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


class _Counted:
    """`bundle_index._MEMBER`, counting its matches: one per member when ``bundle.json`` is
    parsed, one each time a member is rebuilt from its bytes."""

    def __init__(self, pattern: re.Pattern[bytes]) -> None:
        self.pattern, self.matched = pattern, 0

    def match(self, data: bytes, pos: int = 0) -> re.Match[bytes] | None:
        self.matched += 1
        return self.pattern.match(data, pos)


def test_an_import_walks_the_member_list_three_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vendor = Vendor(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    with BundleEvidence.open(vendor.bundle) as ev:
        listed = len(ev.index.members)
    counted = _Counted(bundle_index._MEMBER)
    monkeypatch.setattr(bundle_index, "_MEMBER", counted)
    buyer.run("import", vendor.bundle, "--key", "approver")
    assert 0 < counted.matched <= (1 + 3) * listed  # parsed once, walked three times
    monkeypatch.undo()
    r = buyer.run("fsck")  # every object in the store at the size it streamed with
    assert "damaged\t0\n" in r.stdout and "orphans\t0\n" in r.stdout, r.stdout
