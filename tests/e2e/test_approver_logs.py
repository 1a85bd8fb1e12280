"""End to end (vend41, twenty-sixth round): a log whose keys approve here may have revoked any
record held here (rot40 finding 7).

A revocation counts when its producer or an approver signed it (an approver may revoke
anything: `verify.retractions`). The lab imported another vendor's batch and revoked it with its
approver key, which the third party trusts as an approver (it must, to import the lab's
checkpoint with the lab's approvals). The third party holds that batch from the other vendor's
own log; then it meets the lab's full checkpoint bundle first. The bundle carries its subject's
lineage, not the revocation; `unseen` named only the records held here signed by a key of the
bundle's records, and the other vendor, with an environment of its own, signs none: the lab's
log was applied up to the checkpoint and its revocation never read (``monitor
--fail-on-revocation`` exit 0 for good). Now, when a key that signed the bundle's entries is an
approver here, every record other logs brought is named, and nothing of the lab's log is
applied: its next monitor reads it from its first entry.
"""

from __future__ import annotations

import json
from pathlib import Path

from test_third_party_updates import REASON, third_party
from test_updates import Buyer, Vendor, served, vendor_copy
from testkit import Party


def _lab_revoked_the_other_vendors_batch(tmp_path: Path, *, approves: bool = True,
                                         held: bool = True
                                         ) -> tuple[Vendor, Party, Party, Path]:
    """The vendor (``grid``) and another vendor (``maze``, its own environment and batches);
    the lab imports both, trains on the vendor's dataset and revokes the other vendor's first
    batch with its approver; the third party (the lab's approver an approver there, not with
    ``approves`` False) imports the other vendor's bundle from its own log (not with ``held``
    False). Returns the other
    vendor, the lab, the third party, and the lab's bundle (its checkpoint's, ``approves``; its
    batch's otherwise: a checkpoint needs the lab's approver)."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    other = vendor_copy(tmp_path, "other", "other.example/log", seeds=(3, 4), env="maze")
    lab = Buyer(tmp_path, [vendor, other])
    for v in (vendor, other):
        lab.run("import", v.bundle, "--key", "approver")
    lab.run("approve", vendor.dataset, "--key", "approver")
    lab.run("train", "--dataset", vendor.dataset, "--key", "trainer", "--name", "bh-policy",
            "--version", "1")  # fmt: skip
    lab.run("revoke", other.batches[0], "--reason", REASON, "--key", "approver")
    bundle = tmp_path / "lab.tar.zst"
    lab.run("export", "bh-policy@1" if approves else vendor.batches[1], "--out", bundle)
    third = third_party(tmp_path, vendor, lab, [other], approvers=approves)
    if held:
        third.run("import", other.bundle, "--key", "approver")
    return other, lab, third, bundle


def test_a_full_bundle_of_a_log_whose_key_approves_here_names_every_record_brought(
    tmp_path: Path,
) -> None:
    """On 9ed7ee20: nothing named, the lab's log applied up to its checkpoint, and the monitor
    with ``--fail-on-revocation`` exits 0: the lab's revocation of ``other-1`` is never read."""
    other, lab, third, bundle = _lab_revoked_the_other_vendors_batch(tmp_path)
    r = third.run("import", bundle, "--key", "approver", "--json")
    assert "rollout-batch other-1 (" in r.stderr and "environment maze@1 (" in r.stderr, \
        r.stderr  # fmt: skip
    assert json.loads(r.stdout)["import"]["applied"] == 0, r.stdout
    for url in served(lab):
        r = third.run("monitor", url, "--vkey", lab.vkey(), "--key", "approver",
                      "--fail-on-revocation", code=1)  # fmt: skip
        assert "WARNING: revoked by " in r.stderr and "rollout-batch other-1 " in r.stderr, \
            r.stderr  # fmt: skip
    r = third.run("verify", other.batches[0], code=1)
    assert f"revoked: {REASON}" in r.stderr, r.stderr


def test_a_full_bundle_whose_keys_approve_nothing_here_names_what_they_signed_only(
    tmp_path: Path,
) -> None:
    """Held (the rule's other side): the lab's approver is no approver here, so no key of the
    lab's batch bundle may revoke the other vendor's records: nothing is named and the lab's
    log is applied (what the lab's approver revoked does not count here)."""
    _other, lab, third, bundle = _lab_revoked_the_other_vendors_batch(tmp_path, approves=False)
    r = third.run("import", bundle, "--key", "approver", "--json")
    assert "other-1" not in r.stderr and "maze" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["import"]["applied"] == lab.size(), r.stdout


def test_a_mark_for_records_its_keys_did_not_sign_does_not_say_they_did(tmp_path: Path) -> None:
    """The line of the mark above (vend42): the lab's log is marked for the other vendor's
    records because the lab's approver approves here, not because its keys signed them. On
    350977cf: ``log lab… has not been read for …, signed by its keys and brought here by another
    log …``; it says why now."""
    other, lab, third, bundle = _lab_revoked_the_other_vendors_batch(tmp_path, held=False)
    third.run("import", bundle, "--key", "approver")
    r = third.run("import", other.bundle, "--key", "approver")
    origin = "+".join(lab.vkey().split("+")[:2])
    line = next(x for x in r.stderr.splitlines() if x.startswith(f"WARNING: log {origin} "))
    assert "rollout-batch other-1 (" in line and "signed by its keys" not in line, line
    assert f", brought here by another log after you applied it up to size {lab.size()} (one " \
        "of its keys approves here: it may revoke anything): " in line, line  # fmt: skip


def test_a_record_brought_after_a_log_whose_key_approves_here_was_applied_marks_it(
    tmp_path: Path,
) -> None:
    """The same hole the other way round (gap39's `brought`): the third party applied the
    lab's log first (its checkpoint bundle, nothing of other logs held then), then takes the
    other vendor's batch from the other vendor's own log. The mark went only to logs whose
    kept keys signed the record brought; the lab's log holds no record of the other vendor's,
    so it was not marked, and its revocation (by its approver, an approver here) was never
    read (on 9ed7ee20: no ``has not been read`` line, the monitor exit 0). Now a log whose
    kept keys include an approver here is marked for every record another log brings."""
    other, lab, third, bundle = _lab_revoked_the_other_vendors_batch(tmp_path, held=False)
    r = third.run("import", bundle, "--key", "approver", "--json")
    assert json.loads(r.stdout)["import"]["applied"] == lab.size(), r.stdout  # as before
    r = third.run("import", other.bundle, "--key", "approver")
    origin = "+".join(lab.vkey().split("+")[:2])
    assert f"WARNING: log {origin} has not been read for " in r.stderr and \
        "rollout-batch other-1 (" in r.stderr, r.stderr  # fmt: skip
    for url in served(lab):
        r = third.run("monitor", url, "--vkey", lab.vkey(), "--key", "approver",
                      "--fail-on-revocation", code=1)  # fmt: skip
        assert "WARNING: revoked by " in r.stderr and "rollout-batch other-1 " in r.stderr, \
            r.stderr  # fmt: skip
    third.run("verify", other.batches[0], code=1)
