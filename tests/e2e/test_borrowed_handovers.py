"""End to end (rev34, twenty-second round): a log that relays another log's records, or
carries its key handovers.

1. A key handover note (``key-handovers/<n>``) is public: every bundle a vendor exports after
   it rotated its log key carries it, signed by both of its keys. An import took the keys of
   every handover in a bundle for the bundle's own log's keys (`Update.logs`), whether or not
   they led to the key that signed it. Mallory, another vendor the buyer buys from, copying
   the vendor's handover into its own log, passed for the vendor: its policy's declaration
   that the vendor's producer key is compromised revoked the vendor's batches at the buyer,
   signed by the buyer's approver (`updates._compromises` stops only what a log alone
   brought). Now only the handovers that lead to the bundle's key are its log's.
2. A log that relays the vendor's records (it imported them) and revokes the vendor's batch
   with a key the buyer does not trust was out36's ``WARNING: not applied here: mallory...
   revoked its own ...``, counted as a stop (``monitor --fail-on-revocation`` exit 1). Its
   own is now what the buyer got from it first.
3. The vendor's own key compromise, declared after it rotated its log key, revoked nothing
   the vendor had brought here under its old log key (`_compromises` read the import
   records of the new key only).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_updates import Buyer, Vendor, declare_compromised, short, two_vendors_trained, vendor_copy

REASON = "a competitor's data"


def _mallory_relaying(tmp_path: Path, *, borrowed: bool = True
                     ) -> tuple[Vendor, Vendor, Buyer, str, int]:
    """The buyer buys from the vendor and from mallory (its policy names both logs and both
    producer keys, each for its own data) and trains on the vendor's dataset; mallory imports
    the vendor's bundle too (its policy names the vendor's keys: anyone's public keys) and
    gains an approver key; the vendor rotates its log key and the buyer follows; with
    ``borrowed``, mallory copies the vendor's handover note into its own log, so that its
    exports carry it.
    Returns the vendor, mallory, the buyer, the checkpoint and what the buyer applied of
    mallory's log."""
    vendor, mallory, buyer, ckpt = two_vendors_trained(tmp_path, ("vendor", "mallory"),
                                                       "bh-policy")
    applied = mallory.size()
    relays(mallory, vendor)
    rotated_at = vendor.size()
    vendor.run("log", "rotate-key")
    update = tmp_path / "rotated.tar.zst"
    vendor.run("export", "--updates-since", str(rotated_at), "--out", update)
    buyer.run("import", update, "--key", "approver")
    if borrowed:
        handovers = mallory.home / "log" / "key-handovers"
        handovers.mkdir()
        (handovers / "1").write_bytes(
            (vendor.home / "log" / "key-handovers" / "1").read_bytes())
    return vendor, mallory, buyer, ckpt, applied


def relays(mallory: Vendor, vendor: Vendor) -> None:
    """Mallory's policy of serial 2 lists the vendor's producer key and log (anyone's public
    keys) and an approver key of its own, ``mal-approver``; mallory imports the vendor's
    bundle with it (tests/e2e/test_relaying_declarer.py too)."""
    mallory.run("key", "new", "mal-approver", "--no-encrypt")
    policy = mallory.home / "policy.toml"
    vendor_pem = (vendor.home / "keys" / "vendor.pub").read_text()
    own_pem = (mallory.home / "keys" / "mal-approver.pub").read_text()
    text = policy.read_text().replace("serial = 1", "serial = 2").replace(
        "[roles.producer]\nkeys = [", f'[roles.producer]\nkeys = [\n"""{vendor_pem}""",'
    ).replace('vkeys = ["', f'vkeys = ["{vendor.vkey()}", "')
    policy.write_text(text + f'\n[roles.approver]\nkeys = ["""{own_pem}"""]\nthreshold = 1\n')
    mallory.run("policy", "set", policy, "--key", "vendor", "--yes")
    mallory.run("import", vendor.bundle, "--key", "mal-approver")


def rotated_then_compromised(tmp_path: Path) -> tuple[Vendor, Buyer, int, str]:
    """A buyer imports the vendor's bundle; the vendor rotates its log key, then declares its
    producer key compromised since 0. Returns the vendor, the buyer, the size the buyer
    applied and the old log key (tests/e2e/test_monitor_after_rotation.py too)."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    buyer.run("import", vendor.bundle, "--key", "approver")
    applied, old = vendor.size(), vendor.vkey()
    vendor.run("log", "rotate-key")
    declare_compromised(vendor, tmp_path / "vendor-2.toml", _vendor_keyid(vendor))
    return vendor, buyer, applied, old


def _vendor_keyid(vendor: Vendor) -> str:
    return str(next(k["keyid"] for k in json.loads(vendor.run("key", "list", "--json").stdout)
                    if k["name"] == "vendor"))


@pytest.mark.parametrize("borrowed", [False, True], ids=["relayed", "borrowed-handover"])
def test_a_relaying_logs_revocation_of_the_vendors_batch_is_a_note(
    tmp_path: Path, borrowed: bool
) -> None:
    """Mallory relays the vendor's records (its log holds them: it imported them) and revokes
    the vendor's batch with its own approver key. It never owned that batch: the buyer got it
    from the vendor first. Before the fix: ``WARNING: not applied here: mallory... revoked its
    own rollout-batch vendor-1 ..., which you hold and checkpoint bh-policy@1 ... is built on
    it``, and the import counted it as a stop (`Changes.stopped`: ``monitor
    --fail-on-revocation`` exit 1), with or without the vendor's handover copied in."""
    vendor, mallory, buyer, _ckpt, applied = _mallory_relaying(tmp_path, borrowed=borrowed)
    mallory.run("revoke", vendor.batches[0], "--reason", REASON, "--key", "mal-approver")
    forged = tmp_path / "mallory-update.tar.zst"
    mallory.run("export", "--updates-since", str(applied), "--out", forged)
    r = buyer.run("import", forged, "--key", "approver", "--json")
    assert "WARNING: not applied here" not in r.stderr, r.stderr
    batch = f"rollout-batch vendor-1 ({short(vendor.batches[0])})"
    assert f"NOTE: ignored: revocation at log index 11 of {mallory.origin} about {batch}: " \
        in r.stderr, r.stderr  # fmt: skip
    ignored = json.loads(r.stdout)["import"]["ignored"]
    assert [(x["digest"], x["own"], x["affects"]) for x in ignored] == [
        (vendor.batches[0], False, [])]
    buyer.run("admit", vendor.dataset)


def test_another_logs_key_compromise_with_a_borrowed_handover_revokes_nothing(
    tmp_path: Path,
) -> None:
    """Mallory's policy names the vendor's producer key (anyone's public key), then declares
    it compromised since 0. Before the fix the vendor's handover in mallory's export made
    what the vendor brought here mallory's "alone" (`_brought_by`), and the buyer's import
    revoked the vendor's environment, batches and dataset, signed by the buyer's approver:
    its gate refused the vendor's dataset, its checkpoint failed."""
    vendor, mallory, buyer, ckpt, applied = _mallory_relaying(tmp_path)
    keyid = _vendor_keyid(vendor)
    policy = mallory.home / "policy.toml"
    vendor_pem = (vendor.home / "keys" / "vendor.pub").read_text()
    text = policy.read_text().replace("serial = 2", "serial = 3").replace(
        f'"""{vendor_pem}""",', "")
    policy.write_text(text + f'\n[[revoked_keys]]\nkey = "{keyid}"\ncompromised_since = 0\n'
                      'reason = "stolen"\n')  # fmt: skip
    mallory.run("policy", "set", policy, "--key", "mal-approver", "--yes")
    forged = tmp_path / "mallory-update.tar.zst"
    mallory.run("export", "--updates-since", str(applied), "--out", forged)
    before = buyer.size()
    r = buyer.run("import", forged, "--key", "approver", "--json")
    changes = json.loads(r.stdout)["import"]
    assert changes["compromised"] == [], r.stderr
    assert {x["kind"] for x in changes["ignored"]} == {"key compromise"}, r.stderr
    assert vendor.batches[0] in {x["digest"] for x in changes["ignored"]}
    # (Since vend42 a record the declaring log first brought here, another log too, gets the
    # hedged warning "not revoked here …: if the key is theirs, …", here the environment
    # mallory's bundle brought first; what the vendor brought first gets none: the lead.)
    assert re.search(r"(?<!not )revoked here", r.stderr) is None, r.stderr
    assert "vendor-1" not in r.stderr.split("NOTE:")[0], r.stderr
    assert buyer.size() == before + 1  # the import record alone: nothing revoked
    buyer.run("admit", vendor.dataset)
    buyer.run("verify", ckpt)


def test_a_vendors_key_compromise_after_its_rotation_still_revokes_what_it_brought(
    tmp_path: Path,
) -> None:
    """The fix's other side: the handover that leads to the key signing the update is its
    log's, so what the vendor brought here under its old log key is its own to stop."""
    vendor, buyer, applied, _old = rotated_then_compromised(tmp_path)
    update = tmp_path / "vendor-update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    r = buyer.run("import", update, "--key", "approver", "--json")
    revoked = json.loads(r.stdout)["import"]["compromised"][0]["revokedHere"]
    assert set(vendor.batches) <= set(revoked), r.stderr
    buyer.run("admit", vendor.dataset, code=1)
