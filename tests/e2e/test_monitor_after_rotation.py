"""End to end (left38, twenty-third round): ``monitor`` of a vendor that rotated its log key.

rev34's findings 2 and 3 go through ``import``, whose bundle carries the vendor's handovers:
the log's keys are its key and those whose handovers lead to it (`Update.logs`). ``monitor``
passed the served key alone, so what the vendor brought here under its old log key was another
log's there: its revocation by a key the buyer does not trust was ``NOTE: ignored`` (not
rev34's "its own" WARNING, and not a stop for ``--fail-on-revocation``), and its key compromise
declared after the rotation revoked nothing it had brought. Now ``monitor`` reads the log's
handovers (``key-handovers/<n>``) and passes those that lead to its key, whichever key the
buyer gave (the old one, whose rotation it follows, or the new one, as its WARNING asks).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_borrowed_handovers import _mallory_relaying, rotated_then_compromised
from test_untrusted_revocations import _vendor_with_an_approver
from test_updates import served, short, train_a_buyer

REASON = "ep-1 has reward 5 per step"


@pytest.mark.parametrize("given", ["old", "new"])
def test_monitor_after_a_rotation_warns_of_the_vendors_own_untrusted_revocation(
    tmp_path: Path, given: str
) -> None:
    """rev34 finding 2 (`Origins.first`) through ``monitor``: the buyer got the batch from
    the vendor (under its old log key), so the vendor's revocation of it by a key the buyer
    does not trust is its own: the WARNING, ``own`` true, a stop (exit 1)."""
    vendor, buyer, ckpt = train_a_buyer(tmp_path)
    old = vendor.vkey()
    vendor.run("log", "rotate-key")
    _vendor_with_an_approver(vendor)
    vendor.run("revoke", vendor.batches[0], "--reason", REASON, "--key", "approver-a")
    origin = "+".join(vendor.vkey().split("+")[:2])  # the new key's
    for url in served(vendor):
        r = buyer.run("monitor", url, "--vkey", old if given == "old" else vendor.vkey(),
                      "--key", "approver", "--fail-on-revocation", "--json", code=1)
        batch = f"rollout-batch vendor-1 ({short(vendor.batches[0])})"
        assert f"WARNING: not applied here: {origin} revoked its own {batch}" \
            in r.stderr, r.stderr  # fmt: skip
        ignored = json.loads(r.stdout)["updates"]["ignored"]
        assert [(x["digest"], x["own"], x["affects"]) for x in ignored] == [
            (vendor.batches[0], True, [ckpt])]


@pytest.mark.parametrize("given", ["old", "new"])
def test_monitor_after_a_rotation_applies_the_vendors_key_compromise(
    tmp_path: Path, given: str
) -> None:
    """rev34 finding 3 through ``monitor``: the vendor's key compromise, declared after it
    rotated its log key, revokes what it brought here under the old key."""
    vendor, buyer, _applied, old = rotated_then_compromised(tmp_path)
    for url in served(vendor):
        r = buyer.run("monitor", url, "--vkey", old if given == "old" else vendor.vkey(),
                      "--key", "approver", "--json")
        revoked = json.loads(r.stdout)["updates"]["compromised"][0]["revokedHere"]
        assert set(vendor.batches) <= set(revoked), r.stderr
    buyer.run("admit", vendor.dataset, code=1)


def test_a_handover_another_log_serves_makes_nothing_its_own_through_monitor(
    tmp_path: Path,
) -> None:
    """The attack on the change above (rev34 finding 1 through ``monitor``): mallory relays the
    vendor's records and serves a copy of the vendor's handover note in its own log
    (``key-handovers/1``); that handover leads to the vendor's key, not mallory's, so it makes
    none of the vendor's records mallory's: its revocation of the vendor's batch stays a
    ``NOTE``, ``own`` false, and ``--fail-on-revocation`` exits 0. (A guard: it fails if
    `first_contact.rotated_from` took every served handover for the log's.)"""
    vendor, mallory, buyer, _ckpt, _applied = _mallory_relaying(tmp_path, borrowed=True)
    mallory.run("revoke", vendor.batches[0], "--reason", REASON, "--key", "mal-approver")
    for url in served(mallory):
        r = buyer.run("monitor", url, "--vkey", mallory.vkey(), "--key", "approver",
                      "--fail-on-revocation", "--json")
        assert "WARNING: not applied here" not in r.stderr, r.stderr
        ignored = json.loads(r.stdout)["updates"]["ignored"]
        assert [(x["digest"], x["own"]) for x in ignored] == [(vendor.batches[0], False)]
