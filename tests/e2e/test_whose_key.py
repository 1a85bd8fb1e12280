"""End to end (vend43, twenty-eighth round): whose key is it, when a log declares compromised a
key whose records another log brought.

A log's policy may list anyone's public key (rev4 finding 1): its declaration stops only what
it alone brought here. When the declaration is taken in first and a record the key signed
comes later from another log, `updates._declared_elsewhere` warns (a thief selling through a
second vendor) with the way on ``if the key is theirs, record a successor with
[[revoked_keys]] …``. Before this round the line was the same whether or not the declaring
log had ever brought this ledger anything the key signed; the other order (the records held,
then the declaration: `_compromises` step 3, hist41 finding 6) says ``its log holds nothing
it signed (a policy may list anyone's key): if the key is theirs, …``. Now both say it: the
buyer is told the declarer showed nothing of that key here before it decides whose it is.
"""

from __future__ import annotations

import json
from pathlib import Path

from test_updates import Buyer, Vendor, vendor_copy

SAYS = "brought you nothing that key signed (a policy may list anyone's key)"


def _keyid(party: Vendor, name: str) -> str:
    keys = json.loads(party.run("key", "list", "--json").stdout)
    return str(next(k["keyid"] for k in keys if k["name"] == name))


def _two_declares_ones_key(tmp_path: Path) -> tuple[Vendor, Vendor, Buyer, str]:
    """Vendor two lists vendor one's producer key in its policy, then declares it compromised
    since 0 (no entry of its log signed by it); the buyer has taken in two's bundle and that
    update, and nothing of one's yet. Returns one, two, the buyer, one's key id."""
    one = vendor_copy(tmp_path, "one", "one.example/log")
    two = vendor_copy(tmp_path, "two", "two.example/log", seeds=(3, 4))
    buyer = Buyer(tmp_path, [one, two])
    buyer.run("import", two.bundle, "--key", "approver")
    applied = two.size()
    theirs = _keyid(one, "vendor")
    (two.home / "one.pub").write_bytes((one.home / "keys" / "vendor.pub").read_bytes())
    policy = two.home / "policy.toml"
    first = policy.read_text()
    revoked = f'[[revoked_keys]]\nkey = "{theirs}"\ncompromised_since = 0\nreason = "hostile"'
    for serial, text in ((2, first.replace("keys = [", 'keys = ["one.pub", ', 1)),
                         (3, f"{first}\n{revoked}\n")):  # listed, then declared compromised
        policy.write_text(text.replace("serial = 1", f"serial = {serial}"))
        two.run("policy", "set", policy, "--key", "vendor", "--yes")
    update = tmp_path / "two-update.tar.zst"
    two.run("export", "--updates-since", str(applied), "--out", update)
    buyer.run("import", update, "--key", "approver")
    return one, two, buyer, theirs


def test_a_declaration_of_a_key_the_declarer_never_brought_says_so_when_its_records_come(
    tmp_path: Path,
) -> None:
    """Before: ``WARNING: key …, which two.example/log… declares compromised …, signed what was
    just taken in from one.example/log…: …; not revoked here (a log stops only what it
    brought): if the key is theirs, record a successor …``, the line a vendor's own
    declaration gives, though two never brought anything one's key signed."""
    one, _two, buyer, theirs = _two_declares_ones_key(tmp_path)
    r = buyer.run("import", one.bundle, "--key", "approver", "--json")
    (suspect,) = json.loads(r.stdout)["import"]["suspect"]
    line = suspect["text"]
    assert suspect["key"] == theirs and line.startswith(f"key {theirs[:16]}, which two."), line
    # (upd46: one's bundle shows the key signed one's policies, none of two's: a claim)
    assert "two.example/log+" in line and f"signed the policies of {one.origin} and none of " \
        "two.example/log+" in line and "is a claim, not its owner's declaration" in line, line
    assert f'record a successor with [[revoked_keys]] key = "{theirs}"' in line, line
    assert suspect["declarerBrought"] is False and suspect["owner"] == one.origin, suspect
    assert f"WARNING: {line}" in r.stderr, r.stderr
    assert "revoked here" not in r.stderr.replace("not revoked here", ""), r.stderr
    r = buyer.run("verify", one.dataset)  # nothing revoked: two's word stops nothing of one's
    assert "revoked" not in r.output, r.output

