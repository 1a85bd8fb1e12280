"""End to end (upd44, twenty-ninth round): a vendor's new key reaches the buyer.

out43's Left: the vendor's updates bundle carries its new policy (a second producer key), but
the buyer's ``import`` said nothing of it (``0 foreign record(s)``): the buyer learnt of the key
when the first bundle signed by it failed (``… (not in the policy), want producer key(s)``).
Now the import names each key the vendor's policy added, removed or moved, per role, with its
fingerprint, what it can sign here for that vendor's log under the buyer's own policy, and the
buyer's way on (nothing changes in the buyer's policy without the buyer's own ``policy set``).
As an attacker: a key added for a role the buyer never granted that vendor's keys, a key moved
from producer to approver, a policy change carried by a forked log, the same update twice.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from test_updates import Buyer, Vendor, vendor_copy
from testkit import built_once


def _keyid(party: Vendor, name: str) -> str:
    keys = json.loads(party.run("key", "list", "--json").stdout)
    return str(next(k["keyid"] for k in keys if k["name"] == name))


def _succeed(vendor: Vendor, serial: int, *args: str) -> None:
    """The vendor's successor policy of ``serial``, from ``policy init ARGS``, set with its
    key ``vendor`` (its producer: the signing role of a policy without approvers)."""
    new = vendor.home / f"policy-{serial}.toml"
    vendor.run("policy", "init", *args, "--out", new)
    new.write_text(new.read_text().replace("serial = 1", f"serial = {serial}"))
    vendor.run("policy", "set", new, "--key", "vendor", "--yes")


def _update(vendor: Vendor, since: int, out: Path) -> Path:
    vendor.run("export", "--updates-since", str(since), "--out", out)
    return out


def _imported(tmp_path: Path) -> tuple[Vendor, Buyer, int]:
    """The vendor, a buyer that imported its bundle, the vendor's size then: built once per
    test process and copied (`testkit.built_once`)."""
    return built_once("_imported", tmp_path, _build_imported)


def _build_imported(tmp_path: Path) -> tuple[Vendor, Buyer, int]:
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    buyer.run("import", vendor.bundle, "--key", "approver")
    return vendor, buyer, vendor.size()


def _keys(r: Any) -> list[dict[str, Any]]:
    return list(json.loads(r.stdout)["import"]["policyKeys"])


def _one_key(buyer: Buyer, vendor: Vendor, since: int, out: Path) -> tuple[Any, dict[str, Any]]:
    """The buyer imports the vendor's update since ``since`` (``--json``): the result and the
    one key its report names."""
    r = buyer.run("import", _update(vendor, since, out), "--key", "approver", "--json")
    (item,) = _keys(r)
    return r, item


def test_a_producer_key_the_vendor_adds_is_named_with_what_to_do(tmp_path: Path) -> None:
    """Before: ``OK: updates from …: imported, 0 object(s), 0 foreign record(s) …`` and no word
    of the key (out43's Left)."""
    vendor, buyer, applied = _imported(tmp_path)
    vendor.run("key", "new", "vendor2", "--no-encrypt")
    kid = _keyid(vendor, "vendor2")
    _succeed(vendor, 2, "--roles", "producer", "--producer", "vendor", "--producer", "vendor2")
    update = _update(vendor, applied, tmp_path / "update.tar.zst")
    r = buyer.run("import", update, "--key", "approver", "--json")
    (item,) = _keys(r)
    assert item["key"] == kid and item["added"] == ["producer"] and item["removed"] == [], item
    assert item["trustedHere"] == [] and item["serial"] == 2 and item["wasSerial"] == 1, item
    line = item["text"]
    assert f"WARNING: {line}" in r.stderr, r.stderr
    assert line.startswith(f"the policy of {vendor.origin}+") or \
        line.startswith(f"the policy of {vendor.origin}"), line  # fmt: skip
    assert f"adds key {kid[:16]} as producer" in line and f"fingerprint {kid}" in line, line
    assert "records it signs from this log are refused here ('not in the policy')" in line, line
    assert "add its public key to [roles.producer] of your policy and run 'trajledger " \
        "policy set FILE --key APPROVER'" in line, line  # fmt: skip
    assert "your policy is unchanged" in line, line
    # the buyer's policy did not change: a bundle signed by the new key is still refused
    before = buyer.run("policy", "show", "--json").stdout
    vendor.run("dataset", "create", "bh", "--version", "2", "--split", "train", "--batch",
               vendor.batches[0], "--key", "vendor2")  # fmt: skip
    second = tmp_path / "bh2.tar.zst"
    vendor.run("export", "bh@2", "--out", second)
    buyer.run("import", second, "--key", "approver", code=1)
    assert buyer.run("policy", "show", "--json").stdout == before
    # the same update again says nothing more
    r = buyer.run("import", update, "--key", "approver", "--json")
    assert _keys(r) == [] and "adds key" not in r.stderr, r.stderr


def test_a_key_trusted_here_already_is_a_note(tmp_path: Path) -> None:
    """The vendor adds the key the buyer already trusts as a producer: a note, nothing to do."""
    vendor, buyer, applied = _imported(tmp_path)
    vendor.run("key", "new", "vendor2", "--no-encrypt")
    kid = _keyid(vendor, "vendor2")
    (buyer.home / "trust" / "vendor2.pub").write_bytes(
        (vendor.home / "keys" / "vendor2.pub").read_bytes())
    policy = buyer.home / "policy.toml"
    policy.write_text(policy.read_text().replace('"trust/vendor.pub"',
                                                 '"trust/vendor.pub", "trust/vendor2.pub"')
                      .replace('name = "buyer"', 'name = "buyer"\nserial = 2'))
    buyer.run("policy", "set", policy, "--key", "approver", "--yes")
    _succeed(vendor, 2, "--roles", "producer", "--producer", "vendor", "--producer", "vendor2")
    r, item = _one_key(buyer, vendor, applied, tmp_path / "u.tar.zst")
    assert item["key"] == kid and item["trustedHere"] == ["producer"], item
    assert f"NOTE: {item['text']}" in r.stderr, r.stderr
    assert "your policy trusts it as producer already" in item["text"], item


def test_a_key_added_for_a_role_never_granted_is_not_offered(tmp_path: Path) -> None:
    """The vendor names an approver of its own: the buyer's policy grants no key of this vendor
    the approver role (an approver here may approve and revoke anything): the line says so and
    does not tell the buyer to add it."""
    vendor, buyer, applied = _imported(tmp_path)
    vendor.run("key", "new", "approver", "--no-encrypt")
    kid = _keyid(vendor, "approver")
    _succeed(vendor, 2, "--roles", "producer,approver", "--producer", "vendor", "--approver",
             "approver")  # fmt: skip
    r, item = _one_key(buyer, vendor, applied, tmp_path / "u.tar.zst")
    assert item["key"] == kid and item["added"] == ["approver"], item
    line = item["text"]
    assert f"WARNING: {line}" in r.stderr, r.stderr
    assert "your policy grants no key of this log approver" in line, line
    assert "[roles.approver]" not in line, line


def test_a_key_moved_from_producer_to_approver_is_one_line(tmp_path: Path) -> None:
    vendor, buyer, applied = _imported(tmp_path)
    vendor.run("key", "new", "vendor2", "--no-encrypt")
    kid = _keyid(vendor, "vendor2")
    _succeed(vendor, 2, "--roles", "producer", "--producer", "vendor", "--producer", "vendor2")
    buyer.run("import", _update(vendor, applied, tmp_path / "u1.tar.zst"), "--key", "approver")
    applied = vendor.size()
    _succeed(vendor, 3, "--roles", "producer,approver", "--producer", "vendor", "--approver",
             "vendor2")  # fmt: skip
    r, item = _one_key(buyer, vendor, applied, tmp_path / "u2.tar.zst")
    assert item["key"] == kid and item["added"] == ["approver"], item
    assert item["removed"] == ["producer"] and item["wasSerial"] == 2, item
    assert f"moves key {kid[:16]} from producer to approver" in item["text"], item
    assert len([x for x in r.stderr.splitlines() if kid[:16] in x]) == 1, r.stderr


def test_a_key_of_the_buyers_own_in_the_vendors_policy_is_named_as_such(tmp_path: Path) -> None:
    """A vendor's policy may list anyone's public key: the buyer's own producer key listed as
    the vendor's producer is the buyer's own, and the line says it gives the vendor nothing."""
    vendor, buyer, applied = _imported(tmp_path)
    kid = _keyid(buyer, "producer")
    (vendor.home / "buyer.pub").write_bytes((buyer.home / "keys" / "producer.pub").read_bytes())
    new = vendor.home / "policy-2.toml"
    vendor.run("policy", "init", "--roles", "producer", "--producer", "vendor", "--out", new)
    text = new.read_text().replace("serial = 1", "serial = 2")
    new.write_text(text.replace("keys = [", 'keys = ["buyer.pub", ', 1))
    vendor.run("policy", "set", new, "--key", "vendor", "--yes")
    r, item = _one_key(buyer, vendor, applied, tmp_path / "u.tar.zst")
    assert item["key"] == kid and item["trustedHere"] == ["producer"], item
    assert "it is your own key 'producer': a policy may list anyone's public key" \
        in item["text"] and f"WARNING: {item['text']}" in r.stderr, r.stderr  # fmt: skip
    assert "trusts it as producer already" not in item["text"], item


def test_a_policy_change_on_a_forked_log_is_not_reported(tmp_path: Path) -> None:
    """The vendor's log forked: a copy of its ledger adds another key and exports an update
    of the same sizes. The buyer, having taken in the first view (its key named), refuses the
    second whole: no word of the fork's key."""
    vendor, buyer, applied = _imported(tmp_path)
    twin = Vendor.__new__(Vendor)
    twin.__dict__.update(vendor.__dict__)
    twin.home, twin.state = tmp_path / "fork", tmp_path / "fork-state"
    shutil.copytree(vendor.home, twin.home, symlinks=True)
    shutil.copytree(vendor.state, twin.state, symlinks=True)
    vendor.run("key", "new", "vendor2", "--no-encrypt")
    _succeed(vendor, 2, "--roles", "producer", "--producer", "vendor", "--producer", "vendor2")
    twin.run("key", "new", "vendor3", "--no-encrypt")
    other = _keyid(twin, "vendor3")
    _succeed(twin, 2, "--roles", "producer", "--producer", "vendor", "--producer", "vendor3")
    assert twin.size() == vendor.size()
    buyer.run("import", _update(vendor, applied, tmp_path / "u.tar.zst"), "--key", "approver")
    r = buyer.run("import", _update(twin, applied, tmp_path / "f.tar.zst"), "--key",
                  "approver", code=1)  # fmt: skip
    assert "fork" in r.stderr and other[:16] not in r.output, r.output


def test_monitor_names_the_key_the_vendor_adds(tmp_path: Path) -> None:
    """``monitor`` of the vendor's served log takes its policy record in as an import does: the
    same line (``--json``: ``updates.policyKeys``), once."""
    from test_updates import served

    vendor, buyer, _applied = _imported(tmp_path)
    vendor.run("key", "new", "vendor2", "--no-encrypt")
    kid = _keyid(vendor, "vendor2")
    _succeed(vendor, 2, "--roles", "producer", "--producer", "vendor", "--producer", "vendor2")
    for url in served(vendor):
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver", "--json")
        (item,) = json.loads(r.stdout)["updates"]["policyKeys"]
        assert item["key"] == kid and item["added"] == ["producer"], item
        assert f"WARNING: {item['text']}" in r.stderr, r.stderr
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver")
        assert "adds key" not in r.stderr, r.stderr


def test_monitor_without_keys_names_the_key_the_vendor_adds(tmp_path: Path) -> None:
    """upd44's Left (upd45): ``monitor`` without ``--key`` records nothing, and said nothing of
    the key the vendor's policy added (its pending stops only; ``policyKeys`` empty). It now
    names it as the import would, each run until a run with keys takes the policy in, which says
    it once more, then not again."""
    from test_updates import served

    vendor, buyer, _applied = _imported(tmp_path)
    vendor.run("key", "new", "vendor2", "--no-encrypt")
    kid = _keyid(vendor, "vendor2")
    _succeed(vendor, 2, "--roles", "producer", "--producer", "vendor", "--producer", "vendor2")
    for url in served(vendor):
        size = buyer.size()
        for _ in range(2):  # nothing recorded: said again
            r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--json")
            (item,) = json.loads(r.stdout)["updates"]["policyKeys"]
            assert item["key"] == kid and item["added"] == ["producer"], item
            assert item["serial"] == 2 and item["wasSerial"] == 1, item
            assert f"WARNING: {item['text']}" in r.stderr, r.stderr
        assert buyer.size() == size  # nothing recorded
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver")
        assert f"adds key {kid[:16]} as producer" in r.stderr, r.stderr
        r = buyer.run("monitor", url, "--vkey", vendor.vkey())
        assert "adds key" not in r.stderr, r.stderr
