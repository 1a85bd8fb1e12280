"""End to end (out36, twenty-first round): a vendor's revocation of its own data signed by a
key the buyer's policy does not trust.

The README's vendor revokes with its approver key (`revoke ... --key approver-a`, the tour's
step 7); the README's buyer writes a policy naming only the vendor's producer key. The
revocation then does not count at the buyer (by design: a buyer trusts the keys it names), but
the buyer was told only by a ``NOTE: ignored: ...`` line, exit 0, with nothing to do next, while
its gate kept admitting the data and its checkpoint kept verifying: the vendor's revocation did
not reach the buyer, the first outsiders' complaint in a new case. Now it is a ``WARNING`` that
names what the buyer built on it and the two ways on (ask the vendor for a revocation by a key
the policy names, or revoke it here), and ``monitor --fail-on-revocation`` exits 1 for it.
"""

from __future__ import annotations

import json
from pathlib import Path

from test_updates import Buyer, Vendor, served, short, train_a_buyer

REASON = "ep-1 has reward 5 per step"


def _vendor_with_an_approver(vendor: Vendor) -> None:
    """The vendor's policy gains an approver role (the README's vendor has two approvers)."""
    vendor.run("key", "new", "approver-a", "--no-encrypt")
    policy = vendor.home / "policy.toml"
    pem = (vendor.home / "keys" / "approver-a.pub").read_text()
    policy.write_text(policy.read_text().replace("serial = 1", "serial = 2")
                      + f'\n[roles.approver]\nkeys = ["""{pem}"""]\nthreshold = 1\n')
    vendor.run("policy", "set", policy, "--key", "vendor", "--yes")


def _revoked_by_the_vendors_approver(tmp_path: Path) -> tuple[Vendor, Buyer, str, int]:
    vendor, buyer, ckpt = train_a_buyer(tmp_path)
    applied = vendor.size()  # what the buyer applied of the vendor's log
    _vendor_with_an_approver(vendor)
    vendor.run("revoke", vendor.batches[0], "--reason", REASON, "--key", "approver-a")
    return vendor, buyer, ckpt, applied


def test_a_revocation_by_a_vendor_key_the_buyer_does_not_trust_is_a_warning_with_a_way_on(
    tmp_path: Path,
) -> None:
    vendor, buyer, ckpt, applied = _revoked_by_the_vendors_approver(tmp_path)
    update = tmp_path / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    r = buyer.run("import", update, "--key", "approver", "--json")
    batch = f"rollout-batch vendor-1 ({short(vendor.batches[0])})"
    lines = [x for x in r.stderr.splitlines() if batch in x]
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert line.startswith(f"WARNING: not applied here: {vendor.origin} revoked its own {batch}"
                           f", which you hold and checkpoint bh-policy@1 ({short(ckpt)}) is "
                           "built on it, but revocation record "), line
    assert "no signature by a trusted key" in line, line
    assert line.endswith(
        f"; so your gate, verify and impact still take it as good: ask {vendor.origin} for a "
        "revocation signed by a key your policy names for it, or revoke it here yourself "
        f"('trajledger revoke {vendor.batches[0]} --key APPROVER --reason ...')"), line
    ignored = json.loads(r.stdout)["import"]["ignored"]
    assert [(x["digest"], x["own"], x["affects"]) for x in ignored] == [
        (vendor.batches[0], True, [ckpt])]
    # What the warning says stands: the revocation does not count here (the buyer's policy
    # decides), until the buyer revokes it itself.
    buyer.run("admit", "bh@1")
    buyer.run("revoke", vendor.batches[0], "--reason", REASON, "--key", "approver")
    r = buyer.run("admit", "bh@1", code=1)
    assert f"revoked: {REASON}" in r.stderr, r.stderr


def test_monitor_fails_on_a_revocation_of_what_it_holds_that_it_does_not_count(
    tmp_path: Path,
) -> None:
    vendor, buyer, _ckpt, _applied = _revoked_by_the_vendors_approver(tmp_path)
    for url in served(vendor):
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver",
                      "--fail-on-revocation", code=1)  # fmt: skip
        assert "WARNING: not applied here: " in r.stderr, r.stderr
        assert r.stderr.splitlines()[-1].startswith("FAIL: log "), r.stderr
