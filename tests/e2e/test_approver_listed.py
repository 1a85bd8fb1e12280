"""End to end (vend42, twenty-seventh round): a full bundle of a log whose policy lists a key
that approves here, though no entry the bundle carries is signed by it (vend41's Left).

vend41's rule (`first_contact.unseen`) names every record other logs brought here when a key
that signed one of a full bundle's entries is an approver in this ledger's policy: that key
may have revoked any of them in the log before the bundle's checkpoint. A lab whose policies
and import records another key of its own signs (``admin``), exporting a batch bundle (no
approval in it), carries no entry its approver signed: nothing was named, the lab's log was
applied up to the checkpoint, and its approver's revocation of another vendor's batch held here
was never read. The bundle's policies list the lab's approver: a key they list that approves
here counts now. The roles are this ledger's: a bundle's policy naming its own key an approver
counts for nothing here, and this ledger's own approvers (the importing keys) are not another
log's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_third_party_updates import REASON, third_party
from test_updates import BUYER_POLICY, Vendor, served, vendor_copy
from testkit import Party


def _lab(tmp_path: Path, vendors: list[Vendor]) -> Party:
    """A lab whose approvers are ``admin`` and ``approver`` (one signature enough): its policy
    and its imports signed by ``admin``, the vendors' bundles imported."""
    lab = Party(tmp_path, "lab")
    lab.run("init", "--origin", "lab.example/log")
    for k in ("admin", "approver", "trainer", "producer"):
        lab.run("key", "new", k, "--no-encrypt")
    trust = lab.home / "trust"
    trust.mkdir()
    for v in vendors:
        (trust / f"{v.name}.pub").write_bytes((v.home / "keys" / "vendor.pub").read_bytes())
    text = BUYER_POLICY.replace('keys = ["keys/approver.pub"]',
                                'keys = ["keys/admin.pub", "keys/approver.pub"]')
    (lab.home / "policy.toml").write_text(text.format(
        producers=", ".join(f'"trust/{v.name}.pub"' for v in vendors),
        vkeys=", ".join(f'"{p.vkey()}"' for p in (*vendors, lab))))  # fmt: skip
    lab.run("policy", "set", lab.home / "policy.toml", "--key", "admin", "--yes")
    for v in vendors:
        lab.run("import", v.bundle, "--key", "admin")
    return lab


def test_a_full_bundle_whose_policy_lists_a_key_that_approves_here_names_every_record_brought(
    tmp_path: Path,
) -> None:
    """On 350977cf: nothing named, ``applied`` 12, and ``monitor --fail-on-revocation`` of the
    lab exit 0: its approver's revocation of ``other-1`` (held here from the other vendor's
    log) never read."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    other = vendor_copy(tmp_path, "other", "other.example/log", seeds=(3, 4), env="maze")
    lab = _lab(tmp_path, [vendor, other])
    lab.run("revoke", other.batches[0], "--reason", REASON, "--key", "approver")
    bundle = tmp_path / "lab.tar.zst"
    lab.run("export", vendor.batches[1], "--out", bundle)
    third = third_party(tmp_path, vendor, lab, [other])
    third.run("import", other.bundle, "--key", "approver")
    r = third.run("import", bundle, "--key", "approver", "--json")
    assert "rollout-batch other-1 (" in r.stderr, r.stderr
    assert json.loads(r.stdout)["import"]["applied"] == 0, r.stdout
    for url in served(lab):
        r = third.run("monitor", url, "--vkey", lab.vkey(), "--key", "approver",
                      "--fail-on-revocation", code=1)  # fmt: skip
        assert "rollout-batch other-1 " in r.stderr and REASON in r.stderr, r.stderr


@pytest.mark.parametrize("listed", ["itself", "importer"])
def test_a_key_a_bundles_policy_lists_counts_only_as_an_approver_of_another_here(
    tmp_path: Path, listed: str,
) -> None:
    """Held: the other vendor's policy names as an approver a key of its own (none here) or
    the third party's own approver (the key that imports); neither is another party's
    approver here: its full bundle names nothing of the vendor's records and is applied."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    other = vendor_copy(tmp_path, "other", "other.example/log", seeds=(3, 4), env="maze")
    lab = _lab(tmp_path, [vendor, other])
    third = third_party(tmp_path, vendor, lab, [other])
    policy = other.home / "policy.toml"
    if listed == "importer":
        (other.home / "third.pub").write_bytes((third.home / "keys" / "approver.pub")
                                               .read_bytes())  # fmt: skip
        text = policy.read_text().replace("serial = 1", "serial = 2") \
            + '\n[roles.approver]\nkeys = ["third.pub"]\n'
    else:  # a key of its own (a producer's may not approve: `policy set` refuses it)
        other.run("key", "new", "vapprover", "--no-encrypt")
        text = policy.read_text().replace("serial = 1", "serial = 2") \
            + '\n[roles.approver]\nkeys = ["keys/vapprover.pub"]\n'
    policy.write_text(text)
    other.run("policy", "set", policy, "--key", "vendor", "--yes")
    bundle = tmp_path / "other-again.tar.zst"
    other.run("export", "bh@1", "--out", bundle)
    third.run("import", vendor.bundle, "--key", "approver")
    r = third.run("import", bundle, "--key", "approver", "--json")
    assert "has not been read" not in r.stderr and "you hold " not in r.stderr, r.stderr
    assert json.loads(r.stdout)["import"]["applied"] == other.size(), r.stdout
