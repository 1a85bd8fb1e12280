"""An import judges another log's records by the importer's policy in force (review left23,
finding 4, found adding ``import`` to the fault sweep).

The importer's policy in force carries the policies it replaced (`TrustPolicy.earlier`), each
with the index of the importer's log from which its successor holds; `verify_bundle` applied
them to the bundle's records by the bundle's log indices. So a buyer whose policy changed at
its log index 12 judged a vendor's records 1 to 4 by its policy before the change: a vendor key
the buyer had taken out of its producers still brought its dataset in (exit 0, records logged,
an import record signed), and a vendor added by a successor could not be imported at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_updates import Buyer, vendor_copy


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


def successor(buyer: Buyer, tmp_path: Path, *edits: tuple[str, str]) -> None:
    """The buyer's log grown past the vendor's size (eight attestations), then a successor of
    its policy recorded, with ``edits`` (old, new) made to its text."""
    for i in range(8):
        (tmp_path / f"f{i}.txt").write_text(f"x{i}")
        buyer.run("attest", tmp_path / f"f{i}.txt", "--key", "producer")
    text = (buyer.home / "policy.toml").read_text()
    for old, new in edits:
        assert old in text, text
        text = text.replace(old, new)
    text = text.replace('name = "buyer"', 'name = "buyer"\nserial = 2')
    (buyer.home / "policy-2.toml").write_text(text)
    buyer.run("policy", "set", buyer.home / "policy-2.toml", "--key", "approver", "--yes")


def test_a_vendor_key_taken_out_of_the_buyer_s_policy_imports_nothing(tmp_path: Path) -> None:
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    successor(buyer, tmp_path, ('"trust/vendor.pub", ', ""))
    size = buyer.size()
    assert vendor.size() < size - 1  # the vendor's records below the buyer's policy change
    r = buyer.run("import", vendor.bundle, "--key", "approver", code=1)
    assert "nothing imported" in r.stderr, r.output
    assert "not in the policy), want producer key(s)" in r.stderr, r.output
    assert buyer.size() == size


def test_a_vendor_added_by_a_successor_policy_is_imported(tmp_path: Path) -> None:
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [])  # its first policy trusts no vendor; its successor this one
    (buyer.home / "trust" / "vendor.pub").write_bytes((vendor.home / "keys" / "vendor.pub")
                                                      .read_bytes())
    successor(buyer, tmp_path,
              ('[roles.producer]\nkeys = [', '[roles.producer]\nkeys = ["trust/vendor.pub", '),
              ("vkeys = [", f'vkeys = ["{vendor.vkey()}", '))
    r = buyer.run("import", vendor.bundle, "--key", "approver")
    assert "imported" in r.stderr, r.output
    buyer.run("verify", r.stdout.strip().splitlines()[-1])
