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

Fixed (upd45, docs/SECURITY.md, thirtieth round): what tells a relayed record from the
declarer's own is the declarer's own import record that lists it. A log whose policy publishes
its imports (``publish = [..., "import"]``) carries, in a bundle of what it relayed, the import
records that brought it (the bundle's extension from the first); the buyer consults them and
keeps them (its import record lists them, their envelopes stored), and a record the declarer's
own import record says it relayed from another log does not show the key as the declarer's.
A relay that does not publish its imports holds, for the buyer, the very evidence an owner does
(up to names, test_compromise_after_relay.py's ``test_the_other_order_says_the_same``): it
still passes for the owner, and an owner's declaration after its relay stays a note
(`test_without_the_relays_imports_the_owners_declaration_stays_a_note`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_borrowed_handovers import relays
from test_updates import Buyer, Vendor, declare_compromised, vendor_copy
from test_whose_declaration import two_declares


def _keyid(party: Vendor, name: str) -> str:
    keys = json.loads(party.run("key", "list", "--json").stdout)
    return str(next(k["keyid"] for k in keys if k["name"] == name))


PUBLISH = 'format = 3\npublish = ["revocation", "erasure", "trust-policy", "import"]\n'


def _publishing_imports(party: Vendor) -> None:
    """``party``'s policy file publishes its import records too (set by `relays`)."""
    policy = party.home / "policy.toml"
    text = policy.read_text()
    policy.write_text(text.replace('max_approval_age = "90d"\n',
                                   f'max_approval_age = "90d"\n{PUBLISH}', 1))


def test_a_declarer_that_only_relayed_the_keys_records_is_doubted(tmp_path: Path) -> None:
    one = vendor_copy(tmp_path, "one", "one.example/log")
    two = vendor_copy(tmp_path, "two", "two.example/log", seeds=(3, 4))
    buyer = Buyer(tmp_path, [one, two])
    _publishing_imports(two)
    relays(two, one)
    relay = tmp_path / "relay.tar.zst"
    two.run("export", one.dataset, "--out", relay)
    buyer.run("import", relay, "--key", "approver")  # one's records, from two first
    theirs = _keyid(one, "vendor")
    r = two_declares(tmp_path, one, two, buyer, theirs)  # since its size now
    (line,) = [x for x in r.stderr.splitlines() if theirs[:16] in x]
    assert "(a policy may list anyone's key)" in line, line
    assert f"but what it relayed from {'+'.join(one.vkey().split('+')[:2])} (its import " \
        "records say so)" in line, line
    one.run("dataset", "create", "bh", "--version", "2", "--split", "train", "--batch",
            one.batches[0], "--key", "vendor")  # fmt: skip
    second = tmp_path / "bh2.tar.zst"
    one.run("export", "bh@2", "--out", second)
    r = buyer.run("import", second, "--key", "approver", "--json")
    (suspect,) = json.loads(r.stdout)["import"]["suspect"]
    assert suspect["declarerBrought"] is False, suspect


def _relayed_first(tmp_path: Path, *, publish: bool) -> tuple[Vendor, Vendor, Buyer, str]:
    """Two relays one's dataset to the buyer first (publishing its imports or not); then the
    buyer imports one's own bundle. Returns one, two, the buyer and one's key ``vendor``."""
    one = vendor_copy(tmp_path, "one", "one.example/log")
    two = vendor_copy(tmp_path, "two", "two.example/log", seeds=(3, 4))
    buyer = Buyer(tmp_path, [one, two])
    if publish:
        _publishing_imports(two)
    relays(two, one)
    relay = tmp_path / "relay.tar.zst"
    two.run("export", one.dataset, "--out", relay)
    buyer.run("import", relay, "--key", "approver")
    buyer.run("import", one.bundle, "--key", "approver")
    return one, two, buyer, _keyid(one, "vendor")


def _owner_declares(tmp_path: Path, one: Vendor, buyer: Buyer, theirs: str) -> Any:
    """One declares its key ``theirs`` compromised since 0; the buyer imports that update
    (``--json``): the result."""
    applied = one.size()
    declare_compromised(one, tmp_path / "one-2.toml", theirs)
    update = tmp_path / "one-update.tar.zst"
    one.run("export", "--updates-since", str(applied), "--out", update)
    r = buyer.run("import", update, "--key", "approver", "--json")
    return r


def test_the_owners_declaration_warns_when_a_relay_showing_its_imports_brought_first(
        tmp_path: Path) -> None:
    """One declares its own key compromised; two had brought one's records to the buyer first.
    Before: four ``NOTE: ignored`` lines and nothing else (the first to bring a record counts
    as its source: two), though the buyer's policy still trusts the key. Two's import record
    says it relayed them from one: one's declaration is a warning with the way on."""
    one, _two, buyer, theirs = _relayed_first(tmp_path, publish=True)
    r = _owner_declares(tmp_path, one, buyer, theirs)
    (suspect,) = json.loads(r.stdout)["import"]["suspect"]
    assert suspect["declarerBrought"] is True, suspect
    assert len(suspect["digests"]) == 4, suspect
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("WARNING: key ")]
    assert f'if the key is theirs, record a successor with [[revoked_keys]] key = "{theirs}"' \
        in line, line


def test_without_the_relays_imports_the_owners_declaration_warns_too(tmp_path: Path) -> None:
    """Was the limit (upd45: one's own declaration stayed four ``NOTE: ignored`` lines, two
    having brought one's records first without publishing its imports). The key signed one's
    policies (upd46, test_whose_declaration.py): the owner's declaration warns whoever brought
    first."""
    one, _two, buyer, theirs = _relayed_first(tmp_path, publish=False)
    r = _owner_declares(tmp_path, one, buyer, theirs)
    report = json.loads(r.stdout)["import"]
    (suspect,) = report["suspect"]
    assert suspect["declarerBrought"] is True and len(suspect["digests"]) == 4, report
    assert len(report["ignored"]) == 4, report  # still not revoked here
