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

from collections.abc import Sequence
from pathlib import Path

import pytest
from test_updates import Buyer, Vendor, served, train_a_buyer, vendor_copy
from testkit import Party, built_once

REASON = "consent withdrawn"
THIRD_POLICY = (  # the vendors' producers, the lab's approver and trainer, its own approver
    'name = "third"\naccepted_licences = ["CC-BY-4.0"]\n'
    '[roles.producer]\nkeys = [{producers}]\n'
    '[roles.approver]\nkeys = ["keys/approver.pub", "trust/lab-approver.pub"]\n'
    '[roles.trainer]\nkeys = ["trust/lab-trainer.pub"]\n[roles.log]\nvkeys = [{vkeys}]\n'
)


def third_party(tmp_path: Path, vendor: Party, lab: Party, others: Sequence[Party] = (),
                *, approvers: bool = True) -> Party:
    """A third party whose policy names the vendor's producer key (and that of each of
    ``others``, vendors too), the lab's approver (not with ``approvers`` False) and trainer,
    its own approver, and every log key; nothing imported yet."""
    third = Party(tmp_path, "third")
    third.run("init", "--origin", "third.example/log")
    third.run("key", "new", "approver", "--no-encrypt")
    trust = third.home / "trust"
    trust.mkdir()
    for src, name in ((lab.home / "keys" / "approver.pub", "lab-approver.pub"),
                      (lab.home / "keys" / "trainer.pub", "lab-trainer.pub"),
                      *((v.home / "keys" / "vendor.pub", f"{v.name}.pub")
                        for v in (vendor, *others))):
        (trust / name).write_bytes(src.read_bytes())
    vkeys = ", ".join(f'"{p.vkey()}"' for p in (vendor, *others, lab, third))
    producers = ", ".join(f'"trust/{v.name}.pub"' for v in (vendor, *others))
    text = THIRD_POLICY if approvers else THIRD_POLICY.replace(', "trust/lab-approver.pub"', "")
    (third.home / "policy.toml").write_text(text.format(vkeys=vkeys, producers=producers))
    third.run("policy", "set", third.home / "policy.toml", "--key", "approver", "--yes")
    return third


def _three_parties(tmp_path: Path) -> tuple[Vendor, Party, str]:
    """The vendor's batch trained on by the lab (`train_a_buyer`), the lab's checkpoint
    imported by a third party; then the vendor revokes the batch with its producer key. Built
    once per test process and copied (`testkit.built_once`)."""
    return built_once("_three_parties", tmp_path, _build_three_parties)


def _build_three_parties(tmp_path: Path) -> tuple[Vendor, Party, str]:
    """`_three_parties` built at ``tmp_path``."""
    vendor, lab, ckpt = train_a_buyer(tmp_path)
    bundle = tmp_path / "lab-checkpoint.tar.zst"
    lab.run("export", "bh-policy@1", "--out", bundle)
    third = third_party(tmp_path, vendor, lab)
    third.run("import", bundle, "--key", "approver")
    third.run("verify", ckpt)
    vendor.run("revoke", vendor.batches[0], "--reason", REASON, "--key", "vendor")
    return vendor, third, ckpt


def the_whole_update_revokes(tmp_path: Path, vendor: Vendor, third: Party, ckpt: str) -> None:
    """The vendor's update since 0, imported by the third party, revokes the batch: the lab's
    checkpoint fails."""
    whole = tmp_path / "whole.tar.zst"
    vendor.run("export", "--updates-since", "0", "--out", whole)
    r = third.run("import", whole, "--key", "approver")
    assert "consent withdrawn (signed by " in r.stderr, r.stderr
    r = third.run("verify", ckpt, code=1)
    assert f"revoked: {REASON}" in r.stderr, r.stderr


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
    the_whole_update_revokes(tmp_path, vendor, third, ckpt)


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


def test_a_first_contacts_read_of_the_whole_log_draws_its_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """out37's Left (left38 item 1): a first contact reads the log from entry 0 (200k entries
    26 s, 1M about 2 min), silently. Now it draws a bar over the entries from
    `monitor.READ_BAR_FROM` on (2,000; here 1), on stderr on a terminal, not under ``-q``
    (`clikit.progress`, replaced here by one that records)."""
    import contextlib
    from typing import Any

    from trajledger.ledger import clikit, monitor

    vendor, third, _ckpt = _three_parties(tmp_path)
    bars: list[tuple[int, str]] = []
    steps: list[int] = []

    @contextlib.contextmanager
    def bar(total: int, label: str, *, quiet: bool = False) -> Any:
        if label.startswith("reading log "):
            bars.append((total, label))
            yield steps.append
        else:
            yield lambda n: None

    monkeypatch.setattr(clikit, "progress", bar)
    monkeypatch.setattr(monitor, "READ_BAR_FROM", 1, raising=False)
    for url in served(vendor):
        third.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver")
    size = vendor.size()
    assert bars == [(size, f"reading log {vendor.origin}'s entries")] and sum(steps) == size
    monkeypatch.setattr(monitor, "READ_BAR_FROM", size + 1)  # fewer entries: no bar
    vendor.run("revoke", vendor.batches[1], "--reason", REASON, "--key", "vendor")
    bars.clear()
    for url in served(vendor):
        third.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver")
    assert bars == []


def test_a_full_bundle_met_first_names_what_it_cannot_show_and_applies_nothing(
    tmp_path: Path,
) -> None:
    """out37's Left (left38 item 3a): the third party holds the vendor's batches and dataset
    through the lab; its first bundle of the vendor's own log is a full one (the vendor's
    environment, ``export grid@1``), which carries the environment's lineage only, not the
    revocation of the batch logged before its checkpoint. The import marked the vendor's log
    applied up to that checkpoint: then ``--updates-since 0`` said ``applied already …
    nothing new``, the monitor read nothing, and the lab's checkpoint kept verifying for good.
    Now the import names what it cannot show and leaves the log unapplied, so what it
    advises works."""
    import json

    vendor, third, ckpt = _three_parties(tmp_path)
    full = tmp_path / "grid.tar.zst"
    vendor.run("export", "grid@1", "--out", full)
    r = third.run("import", full, "--key", "approver", "--json")
    line = next((x for x in r.stderr.splitlines() if "this bundle does not carry" in x), "")
    assert line.startswith("WARNING: environment grid@1 ") and "you hold 3 record(s) that " \
        "other logs brought you, signed by its keys (or any, when one of its keys is an " \
        "approver here" in line, r.stderr  # fmt: skip
    for name in ("rollout-batch vendor-1", "rollout-batch vendor-2", "dataset bh@1"):
        assert name in line, line
    assert line.endswith("run 'trajledger monitor URL --vkey VKEY' of it, or import an update "
                         "it exports with --updates-since 0"), line
    report = json.loads(r.stdout)["import"]
    assert report["applied"] == 0 and {x["digest"] for x in report["unseen"]} == {
        *vendor.batches, vendor.dataset}
    the_whole_update_revokes(tmp_path, vendor, third, ckpt)


def test_a_full_bundle_first_of_a_vendor_nothing_here_came_from_applies_it(
    tmp_path: Path,
) -> None:
    """The other side: a ledger holding nothing of the vendor's through another log (the
    buyer's own first import) is told nothing and applies the bundle's checkpoint, as before."""
    import json

    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    other = vendor_copy(tmp_path, "other", "other.example/log", seeds=(3, 4))
    buyer = Buyer(tmp_path, [vendor, other])
    buyer.run("import", other.bundle, "--key", "approver")
    r = buyer.run("import", vendor.bundle, "--key", "approver", "--json")
    assert "does not carry" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["import"]["applied"] == vendor.size()


def test_affected_here_names_the_imported_checkpoint_built_on_the_revoked_batch(
    tmp_path: Path,
) -> None:
    """out37's Left (left38 item 3b): at the third party, the lab's checkpoint it holds
    (imported) is built on the vendor's revoked batch, and ``verify`` of it fails; the
    import's report named only the ledger's own datasets and checkpoints (``affected here``),
    so nothing at all was named."""
    import json

    vendor, third, ckpt = _three_parties(tmp_path)
    whole = tmp_path / "whole.tar.zst"
    vendor.run("export", "--updates-since", "0", "--out", whole)
    r = third.run("import", whole, "--key", "approver", "--json")
    batch = f"rollout-batch vendor-1 ({vendor.batches[0][:19]}…)"
    assert (f"WARNING: affected here: checkpoint bh-policy@1 ({ckpt[:19]}…) is built on "
            f"{batch}") in r.stderr, r.stderr
    affected = {a["digest"] for a in json.loads(r.stdout)["import"]["affected"]}
    assert affected == {ckpt, vendor.dataset}, r.stderr
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
