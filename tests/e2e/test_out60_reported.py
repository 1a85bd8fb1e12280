"""What the forty-first round's out59 and rev53 left, fixed by out60 (docs/SECURITY.md, "Review
of 2026-12-07, forty-first round (out60)"): the vendor A, the lab B that relays A's records, the
third party C. The parties are built once per process (`testkit.built_once`) and copied.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from test_out59_reported import keyid, lab_policy, origin
from test_third_party_updates import REASON, third_party
from test_updates import Vendor, served, short, train_a_buyer
from testkit import Party, built_once


def revoked_by_the_vendor(root: Path) -> tuple[Vendor, Party, Party, int]:
    """B trains on A's batches and exports its checkpoint; C imports it and reads A's log
    whole once (so A's own keys are known at C); A revokes its first batch and exports the
    update (``vendor-update.tar.zst``). The vendor, the lab, the third party, the lab's size
    when C imported."""
    return built_once("revoked_by_the_vendor", root, _build_revoked_by_the_vendor)


def _build_revoked_by_the_vendor(root: Path) -> tuple[Vendor, Party, Party, int]:
    vendor, lab, _ckpt = train_a_buyer(root)
    bundle = root / "lab-checkpoint.tar.zst"
    lab.run("export", "bh-policy@1", "--out", bundle)
    since = lab.size()
    third = third_party(root, vendor, lab)
    third.run("import", bundle, "--key", "approver")
    for url in served(vendor):
        third.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver")
    seen = vendor.size()
    vendor.run("revoke", vendor.batches[0], "--reason", REASON, "--key", "vendor")
    vendor.run("export", "--updates-since", str(seen), "--out", root / "vendor-update.tar.zst")
    return vendor, lab, third, since


@pytest.mark.parametrize(("kind", "read"), [("import", "import"), ("trust-policy", "import"),
                                            ("import", "monitor")])
def test_a_relay_listing_the_vendors_key_on_its_own_records_is_not_named_the_revoker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, read: str
) -> None:
    """rev53's Left: B's log lists A's key ``vendor`` beside its own among the signers of
    B's own record (its import record of A's revocation, or its next policy): C took every
    such entry's listed signers as B's own keys, so A's revocation that B relays (signed by
    ``vendor``) read ``revoked by <B>``, and ``signerLog`` was null: the relay named as the
    revoker, the auditor sent to the wrong party. Now B's own keys are those whose signatures
    on those records verified against B's policies: ``revoked by vendor.example/log, relayed
    by <B>``; at the import and at ``monitor`` of B's log alike."""
    vendor, lab, third, since = revoked_by_the_vendor(tmp_path)
    from trajledger.ledger.log.spec import EntrySpec
    from trajledger.ledger.log.writer import Log

    append, extra = Log.append, keyid(vendor, "vendor")

    def listing(self: Log, specs: Sequence[EntrySpec], **kw: Any) -> Any:
        return append(self, [dataclasses.replace(s, signers=(*s.signers, extra))
                             if s.kind == kind else s for s in specs], **kw)

    monkeypatch.setattr(Log, "append", listing)
    lab.run("import", tmp_path / "vendor-update.tar.zst", "--key", "approver")
    if kind == "trust-policy":
        lab_policy(lab, vendor, 2, ("vendor",))
    monkeypatch.undo()
    relayed = tmp_path / "lab-update.tar.zst"
    lab.run("export", "--updates-since", str(since), "--out", relayed)
    if read == "monitor":  # (C reads B's log as served: its entries, then their envelopes)
        for url in served(lab):
            r = third.run("monitor", url, "--vkey", lab.vkey(), "--key", "approver")
    else:
        r = third.run("import", relayed, "--key", "approver", "--json")
    batch = f"rollout-batch vendor-1 ({short(vendor.batches[0])})"
    assert (f"WARNING: revoked by vendor.example/log, relayed by {origin(lab)}: {batch}: "
            f"{REASON} (signed by ") in r.stderr, r.stderr
    if read == "monitor":
        return
    revoked = json.loads(r.stdout)["import"]["revoked"]
    assert [(x["digest"], x.get("signerLog")) for x in revoked] == [
        (vendor.batches[0], "vendor.example/log")]
