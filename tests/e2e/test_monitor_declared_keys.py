"""End to end (upd46, thirty-first round; upd45's Left): ``monitor`` without ``--key`` and the
keys the vendor declares compromised.

Before: a monitor without keys named the policy keys the vendor's successor added or removed
(upd45) but not a key it declared compromised: nothing pending, no line, exit 0 with
``--fail-on-revocation``, though the buyer's policy trusts the key and the vendor's log says it
signed what the buyer holds. Now the declaration is pending as the vendor's revocations are
(``updates.pending``, kind ``key compromise``), each run until a run with keys takes it in.
"""

from __future__ import annotations

import json
from pathlib import Path

from test_updates import Buyer, Vendor, declare_compromised, served, vendor_copy


def _keyid(party: Vendor, name: str) -> str:
    keys = json.loads(party.run("key", "list", "--json").stdout)
    return str(next(k["keyid"] for k in keys if k["name"] == name))


def test_monitor_without_keys_names_the_key_the_vendor_declares_compromised(
        tmp_path: Path) -> None:
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    buyer.run("import", vendor.bundle, "--key", "approver")
    kid = _keyid(vendor, "vendor")
    declare_compromised(vendor, tmp_path / "vendor-2.toml", kid)
    for url in served(vendor):
        size = buyer.size()
        for _ in range(2):  # nothing recorded: said again
            r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--json")
            pending = json.loads(r.stdout)["updates"]["pending"]
            (item,) = [p for p in pending if p["kind"] == "key compromise"]
            assert item["key"] == kid and item["trustedHere"] == ["producer"], item
            assert len(item["digests"]) == 4, item  # env, two batches, dataset: its log alone
            assert f"WARNING: {item['text']}" in r.stderr, r.stderr
            assert kid[:16] in item["text"] and "--key APPROVER" in item["text"], item
        assert buyer.size() == size  # nothing recorded
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--fail-on-revocation",
                      code=1)
        assert f"key {kid[:16]}" in r.stderr, r.stderr
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver", "--json")
        (taken,) = json.loads(r.stdout)["updates"]["compromised"]
        assert taken["key"] == kid and len(taken["revokedHere"]) == 4, taken
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--json")
        assert not (json.loads(r.stdout)["updates"] or {}).get("pending"), r.stdout
        assert "pending" not in r.stderr, r.stderr


def test_monitor_without_keys_names_a_relays_declaration_of_the_owners_key_a_claim(
        tmp_path: Path) -> None:
    """The same for a relay's declaration of the owner's key (test_whose_declaration.py): not
    pending (a run with keys revokes nothing for it), named a claim each run."""
    from test_whose_declaration import relaying_parties, two_declares

    one, two, buyer, relay, theirs = relaying_parties(tmp_path)
    buyer.run("import", one.bundle, "--key", "approver")
    buyer.run("import", relay, "--key", "approver")
    watcher = Buyer(tmp_path / "w", [one, two])  # the buyer's twin, not given the update
    for bundle in (one.bundle, relay):
        watcher.run("import", bundle, "--key", "approver")
    two_declares(tmp_path, one, two, buyer, theirs)
    for url in served(two):
        for _ in range(2):
            r = watcher.run("monitor", url, "--vkey", two.vkey(), "--json")
            updates = json.loads(r.stdout)["updates"]
            assert [p for p in updates["pending"] if p["kind"] == "key compromise"] == [], r.stdout
            (claim,) = updates["suspect"]
            assert claim["claim"] is True and claim["owner"] == one.origin, claim
            assert f"WARNING: {claim['text']}" in r.stderr, r.stderr
