"""End to end (upd44, twenty-ninth round; vend43's Left): a declarer that only relayed a
vendor's records counts as having brought them.

Vendor two imports vendor one's bundle (its policy lists one's producer key: anyone's public
key) and sells one's dataset to the buyer, who gets one's records from two first. Two then
declares one's key compromised (from a later index of its log: nothing here is revoked). Two
never signed anything with that key; it relayed what one signed. Yet the buyer is told, at the
declaration, ``key … of two… is compromised …; your policy still trusts it as producer: record a
successor without it and with [[revoked_keys]] …`` with no doubt (hist41 finding 6's doubt,
``its log holds nothing it signed (a policy may list anyone's key)``, is for a log that holds
nothing the key signed, and two's log holds what it relayed), and when one's own next bundle
comes, the suspect line has no ``two… brought you nothing that key signed`` (``declarerBrought``
true: vend43's `_shown` counts what two brought first, relayed or not).

Not fixed this round (docs/SECURITY.md, upd44, finding 3): what tells a relayed record from the
declarer's own is the declarer's own import record that lists it, an entry of its log the
buyer's import records do not keep (``import`` entries are neither taken nor consulted). Strict
xfail: the test states what the buyer should be told.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_borrowed_handovers import relays
from test_updates import Buyer, Vendor


def _keyid(party: Vendor, name: str) -> str:
    keys = json.loads(party.run("key", "list", "--json").stdout)
    return str(next(k["keyid"] for k in keys if k["name"] == name))


@pytest.mark.xfail(strict=True, reason="upd44 finding 3: a relay counts as showing the key")
def test_a_declarer_that_only_relayed_the_keys_records_is_doubted(tmp_path: Path) -> None:
    one = Vendor(tmp_path, "one", "one.example/log")
    two = Vendor(tmp_path, "two", "two.example/log", seeds=(3, 4))
    buyer = Buyer(tmp_path, [one, two])
    relays(two, one)
    policy = two.home / "policy.toml"
    one_pem = (one.home / "keys" / "vendor.pub").read_text()
    relay = tmp_path / "relay.tar.zst"
    two.run("export", one.dataset, "--out", relay)
    buyer.run("import", relay, "--key", "approver")  # one's records, from two first
    applied, theirs = two.size(), _keyid(one, "vendor")
    declared = policy.read_text().replace("serial = 2", "serial = 3").replace(
        f'"""{one_pem}""",', "")
    policy.write_text(f'{declared}\n[[revoked_keys]]\nkey = "{theirs}"\n'
                      f'compromised_since = {applied}\nreason = "hostile"\n')
    two.run("policy", "set", policy, "--key", "mal-approver", "--yes")
    update = tmp_path / "two-update.tar.zst"
    two.run("export", "--updates-since", str(applied), "--out", update)
    r = buyer.run("import", update, "--key", "approver")
    (line,) = [x for x in r.stderr.splitlines() if theirs[:16] in x]
    assert "(a policy may list anyone's key)" in line, line
    one.run("dataset", "create", "bh", "--version", "2", "--split", "train", "--batch",
            one.batches[0], "--key", "vendor")  # fmt: skip
    second = tmp_path / "bh2.tar.zst"
    one.run("export", "bh@2", "--out", second)
    r = buyer.run("import", second, "--key", "approver", "--json")
    (suspect,) = json.loads(r.stdout)["import"]["suspect"]
    assert suspect["declarerBrought"] is False, suspect
