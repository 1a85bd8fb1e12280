"""End to end (out37, twenty-second round): a vendor's revocation reaches a third party that
holds the vendor's records through a lab.

A vendor's batch goes to a lab, which trains on it and exports its checkpoint to a third party
(another buyer): the third party holds the vendor's records as the lab's bundle brought them,
and has applied nothing of the vendor's own log. Then the vendor revokes the batch. Through the
lab's update the revocation arrives (held). Straight from the vendor it did not: ``monitor`` of
the vendor's log (docs/third-party.md's "What a buyer runs daily") said ``first seen:
remembered``, exit 0 with ``--fail-on-revocation``, and applied nothing, then ``unchanged``
for ever; an update bundle exported since a size after the revocation was imported, exit 0,
marking the log applied past it, so no later update carried it. The checkpoint kept verifying.
Now the monitor examines such a log from its first entry, and that import is refused, naming
``--updates-since 0``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_updates import Vendor, served, train_a_buyer
from testkit import Party

REASON = "consent withdrawn"
THIRD_POLICY = (  # the vendor's producer, the lab's approver and trainer, its own approver
    'name = "third"\naccepted_licences = ["CC-BY-4.0"]\n'
    '[roles.producer]\nkeys = ["trust/vendor.pub"]\n'
    '[roles.approver]\nkeys = ["keys/approver.pub", "trust/lab-approver.pub"]\n'
    '[roles.trainer]\nkeys = ["trust/lab-trainer.pub"]\n[roles.log]\nvkeys = [{vkeys}]\n'
)


def _three_parties(tmp_path: Path) -> tuple[Vendor, Party, str]:
    """The vendor's batch trained on by the lab (`train_a_buyer`), the lab's checkpoint
    imported by a third party; then the vendor revokes the batch with its producer key."""
    vendor, lab, ckpt = train_a_buyer(tmp_path)
    bundle = tmp_path / "lab-checkpoint.tar.zst"
    lab.run("export", "bh-policy@1", "--out", bundle)
    third = Party(tmp_path, "third")
    third.run("init", "--origin", "third.example/log")
    third.run("key", "new", "approver", "--no-encrypt")
    trust = third.home / "trust"
    trust.mkdir()
    for src, name in ((vendor.home / "keys" / "vendor.pub", "vendor.pub"),
                      (lab.home / "keys" / "approver.pub", "lab-approver.pub"),
                      (lab.home / "keys" / "trainer.pub", "lab-trainer.pub")):
        (trust / name).write_bytes(src.read_bytes())
    vkeys = ", ".join(f'"{k}"' for k in (vendor.vkey(), lab.vkey(), third.vkey()))
    (third.home / "policy.toml").write_text(THIRD_POLICY.format(vkeys=vkeys))
    third.run("policy", "set", third.home / "policy.toml", "--key", "approver", "--yes")
    third.run("import", bundle, "--key", "approver")
    third.run("verify", ckpt)
    vendor.run("revoke", vendor.batches[0], "--reason", REASON, "--key", "vendor")
    return vendor, third, ckpt


def test_an_update_past_the_revocation_is_refused_to_a_third_party(tmp_path: Path) -> None:
    vendor, third, ckpt = _three_parties(tmp_path)
    late = tmp_path / "late.tar.zst"  # exported since a size after the revocation
    vendor.run("export", "--updates-since", str(vendor.size()), "--out", late)
    before = third.run("log", "show", "--json").stdout
    r = third.run("import", late, "--key", "approver", code=1)
    assert r.stderr.strip().splitlines()[-1].endswith(
        "unprovable: you have applied nothing of this log, and you hold records that other "
        f"logs brought you: what its entries before size {vendor.size()} (where the bundle's "
        "extension starts) say about them, a revocation or an erasure, would never be seen: "
        "ask for a bundle exported with --updates-since 0"), r.stderr
    assert third.run("log", "show", "--json").stdout == before  # the ledger as it was
    whole = tmp_path / "whole.tar.zst"
    vendor.run("export", "--updates-since", "0", "--out", whole)
    r = third.run("import", whole, "--key", "approver")
    assert "consent withdrawn (signed by " in r.stderr, r.stderr
    r = third.run("verify", ckpt, code=1)
    assert f"revoked: {REASON}" in r.stderr, r.stderr


def test_monitor_of_the_vendor_applies_its_revocation_at_a_third_party(tmp_path: Path) -> None:
    vendor, third, ckpt = _three_parties(tmp_path)
    for url in served(vendor):
        r = third.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver",
                      "--fail-on-revocation", code=1)  # fmt: skip
        assert f"WARNING: revoked by {vendor.origin}: rollout-batch vendor-1 " in r.stderr
        third.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver",
                  "--fail-on-revocation")  # fmt: skip
    r = third.run("verify", ckpt, code=1)
    assert f"revoked: {REASON}" in r.stderr, r.stderr


def _unrelated(tmp_path: Path) -> Party:
    """A log that holds nothing the third party holds: one environment of its own."""
    other = Party(tmp_path, "other")
    other.run("init", "--origin", "other.example/log")
    other.run("key", "new", "vendor", "--no-encrypt")
    other.run("policy", "init", "--roles", "producer", "--out", other.home / "policy.toml")
    other.run("policy", "set", other.home / "policy.toml", "--key", "vendor", "--yes")
    other.run("env", "register", "maze", "--version", "1", "--source", "sim", "--key", "vendor")
    return other


def test_monitor_of_a_log_with_nothing_held_applies_nothing(tmp_path: Path) -> None:
    """The other side of `first_contact`: a ledger that imported from a lab, monitoring a log
    that holds nothing it holds, reads it all once and records nothing (first seen)."""
    _vendor, third, _ckpt = _three_parties(tmp_path)
    other = _unrelated(tmp_path)
    before = third.run("log", "show", "--json").stdout
    for url in served(other):
        r = third.run("monitor", url, "--vkey", other.vkey(), "--key", "approver")
        assert "first seen: remembered" in r.stderr, r.stderr
    assert third.run("log", "show", "--json").stdout == before


def test_an_update_after_a_rotation_must_start_where_the_old_key_was_applied(
    tmp_path: Path,
) -> None:
    """The size applied was kept per log key: after the vendor rotated its log key, the new
    key had none, so an update bundle exported since any size was taken in (out37 finding 2).
    One exported since a size after the revocation (the vendor's, or a peer's choice) then
    skipped it for good; now the size applied under the old key counts."""
    vendor, buyer, ckpt = train_a_buyer(tmp_path)
    applied = vendor.size()
    vendor.run("revoke", vendor.batches[0], "--reason", REASON, "--key", "vendor")
    vendor.run("log", "rotate-key")
    late = tmp_path / "late.tar.zst"
    vendor.run("export", "--updates-since", str(applied + 1), "--consistency-from",
               str(applied), "--out", late)  # fmt: skip
    r = buyer.run("import", late, "--key", "approver", code=1)
    assert (f"unprovable: the bundle does not carry the log since size {applied}, what you "
            f"applied of it (its extension starts at {applied + 1}") in r.stderr, r.stderr
    buyer.run("verify", ckpt)  # nothing taken in: the revocation not seen yet
    update = tmp_path / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    buyer.run("import", update, "--key", "approver")
    r = buyer.run("verify", ckpt, code=1)
    assert f"revoked: {REASON}" in r.stderr, r.stderr


def test_monitor_after_a_rotation_applies_the_revocation(tmp_path: Path) -> None:
    """A probe that held (out37's table): ``monitor`` given the old key follows the rotation
    and applies the revocation logged before it (``--fail-on-revocation`` exits 1); kept as
    the monitor's side of the rotation test above."""
    vendor, buyer, ckpt = train_a_buyer(tmp_path)
    old = vendor.vkey()
    vendor.run("revoke", vendor.batches[0], "--reason", REASON, "--key", "vendor")
    vendor.run("log", "rotate-key")
    for url in served(vendor):
        r = buyer.run("monitor", url, "--vkey", old, "--key", "approver",
                      "--fail-on-revocation", code=1)  # fmt: skip
        assert "WARNING: revoked by " in r.stderr, r.stderr
    r = buyer.run("verify", ckpt, code=1)
    assert f"revoked: {REASON}" in r.stderr, r.stderr


def test_a_log_with_nothing_held_is_read_once_not_at_every_monitor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """rev35 finding 1: a first contact that found nothing about what the ledger holds recorded
    nothing, so every later ``monitor`` (the daily cron, unchanged log or not) was a first
    contact again and fetched and hashed the log's every entry bundle, for good. Now the
    examined size is the size applied: the next monitor reads what is new only."""
    from trajledger.ledger import monitor

    _vendor, third, _ckpt = _three_parties(tmp_path)
    other = _unrelated(tmp_path)
    fetched: list[str] = []
    real = monitor.HttpLog.fetch

    def counted(self: monitor.HttpLog, path: str) -> bytes:
        fetched.append(path)
        return real(self, path)

    monkeypatch.setattr(monitor.HttpLog, "fetch", counted)
    before = third.run("log", "show", "--json").stdout
    for url in served(other):
        third.run("monitor", url, "--vkey", other.vkey(), "--key", "approver")
        assert any(p.startswith("tile/entries/") for p in fetched), fetched  # read once
        fetched.clear()
        r = third.run("monitor", url, "--vkey", other.vkey(), "--key", "approver")
        assert "unchanged since last seen" in r.stderr, r.stderr
        assert not [p for p in fetched if p.startswith("tile/entries/")], fetched
    assert third.run("log", "show", "--json").stdout == before  # nothing recorded
