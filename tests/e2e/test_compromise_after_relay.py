"""End to end (vend42, twenty-seventh round): a vendor's key compromise and a lab's relay of
the vendor's batch, read in either order, say the same (hist41 finding 2).

The third party holds the vendor's batch ``vendor-1`` from the vendor's own log; a lab's bundle
brings the same record again (a relay). The vendor then declares its key ``vendor``
compromised since 0. The update revokes nothing: a log stops only what it alone brought here
(rev4 finding 1), and ``vendor-1`` is held from the lab's log too. It said so in a ``NOTE``
only, without the way on, where the other order (the declaration taken in, then the relay)
gave ``WARNING: key …, which vendor… declares compromised …, signed what was just taken in
from lab…: …; not revoked here …: if the key is theirs, record a successor with
[[revoked_keys]] …``. Both orders now warn, naming the record and the conditional advice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_third_party_updates import third_party
from test_updates import Buyer, Vendor, declare_compromised, served, vendor_copy
from testkit import Party


def _relay(tmp_path: Path) -> tuple[Vendor, Party, Path, str]:
    """The vendor; the lab (which imported the vendor's bundle) and its bundle of the vendor's
    first batch; the third party (the lab's approver no approver there), nothing imported yet;
    the vendor's key ``vendor``'s id."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    lab = Buyer(tmp_path, [vendor])
    lab.run("import", vendor.bundle, "--key", "approver")
    relay = tmp_path / "lab.tar.zst"
    lab.run("export", vendor.batches[0], "--out", relay)
    third = third_party(tmp_path, vendor, lab, approvers=False)
    keys = json.loads(vendor.run("key", "list", "--json").stdout)
    return vendor, third, relay, next(k["keyid"] for k in keys if k["name"] == "vendor")


def _warned(stderr: str, keyid: str) -> str:
    """The warning that names ``vendor-1`` and gives the way on."""
    lines = [x for x in stderr.splitlines() if x.startswith(f"WARNING: key {keyid[:16]}, which ")
             and " declares compromised " in x]
    assert len(lines) == 1, stderr
    line = lines[0]
    assert "rollout-batch vendor-1 (" in line, line
    assert line.endswith(f'if the key is theirs, record a successor with [[revoked_keys]] key = '
                         f'"{keyid}"'), line  # fmt: skip
    return line


@pytest.mark.parametrize("how", ["import", "monitor"])
def test_a_compromise_taken_in_after_a_relay_of_a_batch_held_from_the_vendor_warns(
    tmp_path: Path, how: str,
) -> None:
    """On 350977cf: ``NOTE: ignored: key compromise … you hold it as your own or from another
    log …`` and no ``WARNING`` naming the key (import and monitor alike)."""
    vendor, third, relay, keyid = _relay(tmp_path)
    third.run("import", vendor.bundle, "--key", "approver")
    third.run("import", relay, "--key", "approver")
    applied = vendor.size()
    declare_compromised(vendor, tmp_path / "new.toml", keyid)
    if how == "import":
        update = tmp_path / "update.tar.zst"
        vendor.run("export", "--updates-since", str(applied), "--out", update)
        r = third.run("import", update, "--key", "approver")
    else:
        for url in served(vendor):
            r = third.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver")
    assert "NOTE: ignored: key compromise " in r.stderr, r.stderr  # still not revoked here
    assert "still trusts" not in r.stderr, r.stderr  # not the firm advice (rev4 finding 1)
    _warned(r.stderr, keyid)
    r = third.run("verify", vendor.batches[0])  # nothing revoked: a log stops what it alone brought
    assert "revoked" not in r.stderr, r.stderr


def test_the_other_order_says_the_same(tmp_path: Path) -> None:
    """Held (the declaration taken in, then the relay): the warning the fix above matches."""
    vendor, third, relay, keyid = _relay(tmp_path)
    third.run("import", vendor.bundle, "--key", "approver")
    applied = vendor.size()
    declare_compromised(vendor, tmp_path / "new.toml", keyid)
    update = tmp_path / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    r = third.run("import", update, "--key", "approver")
    assert " is compromised " in r.stderr, r.stderr  # alone brought: revoked, the firm advice
    r = third.run("import", relay, "--key", "approver")
    assert "brought you nothing" not in _warned(r.stderr, keyid)  # the vendor's own (vend43)
