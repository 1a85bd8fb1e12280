"""What an import does beyond reading its bundle once (issue 21 item 3, xfer44): counted, not
timed. ``bundle.json``'s member list, read from its bytes on each use (`Members`), is walked
three times an import (checked as parsed, summed once, followed as the members stream), not
six; each object's size is the one it streamed with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from test_updates import Buyer, Vendor

from trajledger.verify import bundle_index, merkle
from trajledger.verify.bundle import BundleEvidence
from trajledger.verify.bundle_index import Member
from trajledger.verify.merkle import leaf_hash


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


def test_an_import_checks_each_carried_inclusion_proof_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`BundleEvidence.open` checks every proof the bundle carries against the checkpoint's root
    (`check_entries`' ``carried``); the import's own check of the same proof, for the same entry
    bytes, at the same size (`exchange._checked_proof`) was a second one (xfer45). An altered
    proof is still refused: tests/unit/verify/test_bundle.py (a proof of a whole tree changed,
    and every other proof case) and below."""
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))  # (no one's)
    vendor = Vendor(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    with BundleEvidence.open(vendor.bundle) as ev:
        carried = {i: (leaf_hash(data), tuple(ev.inclusion_proof(i, ev.checkpoint.size)))
                   for i, data in ev.entries()}
    assert len(carried) > 2
    seen: Counter[tuple[int, bytes, tuple[bytes, ...]]] = Counter()
    real = merkle.root_from_inclusion_proof

    def counted(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
        seen[index, leaf, tuple(proof)] += 1
        return real(index, size, leaf, proof)

    monkeypatch.setattr(merkle, "root_from_inclusion_proof", counted)
    buyer.run("import", vendor.bundle, "--key", "approver")
    assert {i: seen[i, *carried[i]] for i in carried} == {i: 1 for i in carried}  # two before
