"""End to end (rot40, twenty-fifth round): what a buyer applied of a vendor's log follows a
rotation of the vendor's log key.

hist39 finding 6 (seed 1392): the buyer took in the vendor's erasure through an update bundle
(its log applied up to size N); the vendor then ran ``log rotate-key``. The size applied is
kept per key, and the new key's had none, so ``monitor --fail-on-revocation`` (with the new key,
or with the old key the buyer's policy names) read the log from its first entry again, reported
the erasure as news and exited 1 where nothing was new. Now a key whose verified handovers lead
from a key applied here starts where that one stopped, when the tree applied under the old key
is proven a prefix of the new key's (a consistency proof from the served tiles): nothing is read
twice, and nothing the old key's tree did not show is skipped: a revocation signed after the
rotation is still found (exit 1).
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from test_updates import Buyer, Vendor, served, short, train_a_buyer

CONSENT = "consent"


def _erased_then_rotated(tmp_path: Path) -> tuple[Vendor, Buyer, str, int]:
    """The buyer trains on the vendor's batches; the vendor erases its second batch, the buyer
    imports that update (the erasure taken in), then the vendor rotates its log key. Returns
    the vendor, the buyer, the vendor's old key and the size the buyer applied."""
    vendor, buyer, _ckpt = train_a_buyer(tmp_path)
    applied = vendor.size()
    vendor.run("erase", vendor.batches[1], "--reason", CONSENT, "--key", "vendor")
    update = tmp_path / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    r = buyer.run("import", update, "--key", "approver")
    assert "WARNING: erased by " in r.stderr, r.stderr
    old = vendor.vkey()
    vendor.run("log", "rotate-key")
    assert vendor.vkey() != old
    return vendor, buyer, old, applied + 1


@pytest.mark.parametrize("given", ["old", "new"])
def test_a_rotation_does_not_report_again_what_was_taken_in(tmp_path: Path, given: str) -> None:
    """hist39 finding 6: nothing new, exit 0; the erasure taken in by the import is not read
    again (its line not printed), and the log is read from where the old key left it."""
    vendor, buyer, old, applied = _erased_then_rotated(tmp_path)
    for url in served(vendor):
        r = buyer.run("monitor", url, "--vkey", old if given == "old" else vendor.vkey(),
                      "--key", "approver", "--fail-on-revocation", "--json")
        assert "erased by" not in r.stderr and "affected here" not in r.stderr, r.stderr
        assert json.loads(r.stdout)["updates"] is None or \
            not json.loads(r.stdout)["updates"].get("erased"), r.stdout  # fmt: skip
        again = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver",
                          "--fail-on-revocation")  # the new key's size applied now set
        assert "erased by" not in again.stderr, again.stderr
    assert applied <= vendor.size()


@pytest.mark.parametrize("given", ["old", "new"])
def test_a_revocation_signed_after_the_rotation_is_still_found(
    tmp_path: Path, given: str
) -> None:
    """The other half: the carried size skips nothing. The vendor revokes its first batch
    under the new key; the monitor reports it (exit 1), and it alone (not the erasure)."""
    vendor, buyer, old, _applied = _erased_then_rotated(tmp_path)
    vendor.run("revoke", vendor.batches[0], "--reason", "reward hacked", "--key", "vendor")
    batch = f"rollout-batch vendor-1 ({short(vendor.batches[0])})"
    for url in served(vendor):
        r = buyer.run("monitor", url, "--vkey", old if given == "old" else vendor.vkey(),
                      "--key", "approver", "--fail-on-revocation", code=1)
        assert f"{batch}: reward hacked" in r.stderr and "WARNING: revoked by " in r.stderr, \
            r.stderr  # fmt: skip
        assert "erased by" not in r.stderr, r.stderr
    buyer.run("admit", vendor.dataset, code=1)


def test_a_size_applied_under_a_forked_old_key_is_not_carried(tmp_path: Path) -> None:
    """A thief of one log key (the attack on the change above): holding the vendor's old key
    (a copy of its ledger), the thief shows the buyer a fork in which index N is not the
    vendor's revocation of its first batch, and the buyer applies it under the old key. The
    vendor then rotates; the buyer monitors the vendor with the new key (its policy names it:
    nothing compares the new key's tree with the old key's floor before the read). The size
    applied under the old key is of another history: carried, the read would start after the
    revocation and pass over it for good. Its tree is not a prefix of the new key's (no
    consistency proof), so nothing is carried: the log is read from its first entry and the
    revocation found (exit 1). (A guard: it fails with `first_contact._prefix` answering
    True.)"""
    vendor, buyer, _ckpt = train_a_buyer(tmp_path)
    thief = copy.copy(vendor)
    thief.home, thief.state = tmp_path / "thief", tmp_path / "thief-state"
    shutil.copytree(vendor.home, thief.home)
    shutil.copytree(vendor.state, thief.state)
    thief.run("revoke", vendor.batches[1], "--reason", "a decoy", "--key", "vendor")
    vendor.run("revoke", vendor.batches[0], "--reason", "reward hacked", "--key", "vendor")
    old = vendor.vkey()
    for url in served(thief):  # the fork, under the old key
        buyer.run("monitor", url, "--vkey", old, "--key", "approver")
    vendor.run("log", "rotate-key")
    batch = f"rollout-batch vendor-1 ({short(vendor.batches[0])})"
    for url in served(vendor):
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver",
                      "--fail-on-revocation", code=1)
        assert f"{batch}: reward hacked" in r.stderr, r.stderr
    buyer.run("admit", vendor.dataset, code=1)


def test_an_update_after_a_forked_old_key_needs_the_log_from_0(tmp_path: Path) -> None:
    """The same attack through ``import``: the buyer applied the thief's fork under the old
    key (an update bundle of it), then saw the vendor's log under the new key (a monitor
    without ``--key``: its floor, nothing applied). The vendor's update since the size the
    buyer applied rebuilds another root at that size than the old key's floor: nothing is
    carried, so the update is refused (it must start at 0), and the one since 0 brings the
    revocation. (A guard: with `first_contact._prefix` answering True the first update is
    taken and the revocation at index N passed over.)"""
    vendor, buyer, _ckpt = train_a_buyer(tmp_path)
    applied = vendor.size()
    thief = copy.copy(vendor)
    thief.home, thief.state = tmp_path / "thief", tmp_path / "thief-state"
    shutil.copytree(vendor.home, thief.home)
    shutil.copytree(vendor.state, thief.state)
    thief.run("revoke", vendor.batches[1], "--reason", "a decoy", "--key", "vendor")
    fork = tmp_path / "fork.tar.zst"
    thief.run("export", "--updates-since", str(applied), "--out", fork)
    buyer.run("import", fork, "--key", "approver")
    vendor.run("revoke", vendor.batches[0], "--reason", "reward hacked", "--key", "vendor")
    vendor.run("log", "rotate-key")
    for url in served(vendor):
        buyer.run("monitor", url, "--vkey", vendor.vkey())
    update = tmp_path / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied + 1), "--out", update)
    r = buyer.run("import", update, "--key", "approver", code=1)
    assert "--updates-since 0" in r.stderr, r.stderr
    whole = tmp_path / "whole.tar.zst"
    vendor.run("export", "--updates-since", "0", "--out", whole)
    r = buyer.run("import", whole, "--key", "approver")
    batch = f"rollout-batch vendor-1 ({short(vendor.batches[0])})"
    assert f"{batch}: reward hacked" in r.stderr, r.stderr
