"""End to end (rot40, twenty-fifth round): a revocation another log relays names its signer's
log (left38's Left, item 1; gap39's Left, item 1).

The lab took the vendor's revocation of its batch in (an update of the vendor's log) and the
third party takes it from the lab's update: the line read ``revoked by <lab>``, as if the lab
had revoked the batch. A log's own keys are now told from the keys of the records it relays:
its own are those that signed the entries only a log's owner logs (its policies, its import
records, its refusals), kept per log with the keys that signed anything (`first_contact.saw`).
A stop signed by keys that are another applied log's own and none of the relaying log's own
reads ``revoked by <vendor>, relayed by <lab>`` (``--json``: ``signerLog``); where that is
ambiguous (the relaying log's own keys unknown or among the signers, no other log's or
several), the line is as before: the record is taken as the relaying log's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_records_after_applied import UNREAD, relayed_by_the_lab
from test_third_party_updates import REASON, third_party
from test_updates import Vendor, short, train_a_buyer
from testkit import Party


def _relayed(tmp_path: Path, *, read_vendor: bool) -> tuple[Vendor, Party, Party, Path]:
    """`relayed_by_the_lab`: the vendor, the lab, the third party, the lab's update."""
    vendor, lab, third, relayed, _seen = relayed_by_the_lab(tmp_path, read_vendor=read_vendor)
    return vendor, lab, third, relayed


def _origin(party: Party) -> str:
    return "+".join(party.vkey().split("+")[:2])


def test_a_relayed_revocation_names_its_signers_log_and_the_relay(tmp_path: Path) -> None:
    """On 2af7bb98: ``revoked by lab.example/log+…: rollout-batch vendor-1 …``."""
    vendor, lab, third, relayed = _relayed(tmp_path, read_vendor=True)
    r = third.run("import", relayed, "--key", "approver", "--json")
    batch = f"rollout-batch vendor-1 ({short(vendor.batches[0])})"
    assert (f"WARNING: revoked by vendor.example/log, relayed by {_origin(lab)}: {batch}: "
            f"{REASON} (signed by ") in r.stderr, r.stderr
    assert f", log index {lab.size() - 2} of {_origin(lab)})" in r.stderr, r.stderr
    assert UNREAD not in r.stderr, r.stderr
    revoked = json.loads(r.stdout)["import"]["revoked"]
    assert [(x["digest"], x.get("signerLog")) for x in revoked] == [
        (vendor.batches[0], "vendor.example/log")]


def test_a_relayed_revocation_whose_signers_log_is_unknown_reads_as_before(
    tmp_path: Path,
) -> None:
    """Held (fail closed): the third party never read the vendor's log, so no log here has
    the vendor's key among its own: the line names the lab, as before."""
    _vendor, lab, third, relayed = _relayed(tmp_path, read_vendor=False)
    r = third.run("import", relayed, "--key", "approver", "--json")
    assert f"WARNING: revoked by {_origin(lab)}: rollout-batch vendor-1 " in r.stderr, r.stderr
    revoked = json.loads(r.stdout)["import"]["revoked"]
    assert [x.get("signerLog") for x in revoked] == [None]


@pytest.mark.parametrize("approves", [False, True])
def test_a_full_bundle_met_first_does_not_count_another_logs_own_keys_as_its_own(
    tmp_path: Path, approves: bool
) -> None:
    """`unseen` (left38 finding 1) named the records held here that other logs brought,
    signed by any key of the full bundle's records: a lab's bundle carries the vendor's
    records, so every record of the vendor's held here (brought by the vendor's log, read
    here) was named, and nothing of the lab's log applied. The vendor's key is the vendor's
    log's own (it signed its policy), none of the lab's own (its policies' and import
    records' signer), so the vendor's log is where its records' revocations are read: the
    lab's log is applied (on 2af7bb98: the maze named, ``applied`` 0). Held (fail closed,
    ``approves``): where a key of the lab's own is an approver here, it may revoke the
    vendor's records too: named, as before (a guard: fails with that rule taken out)."""
    vendor, lab, _ckpt = train_a_buyer(tmp_path)
    bundle = tmp_path / "lab-batch.tar.zst"
    lab.run("export", vendor.batches[1], "--out", bundle)
    third = third_party(tmp_path, vendor, lab, approvers=approves)
    third.run("import", vendor.bundle, "--key", "approver")
    seen = vendor.size()
    vendor.run("env", "register", "maze", "--version", "1", "--source", "sim", "--key",
               "vendor")  # fmt: skip
    maze = tmp_path / "maze.tar.zst"
    vendor.run("export", "maze@1", "--out", maze, "--updates-since", str(seen))
    third.run("import", maze, "--key", "approver")
    r = third.run("import", bundle, "--key", "approver", "--json")
    assert ("environment maze@1 (" in r.stderr) is approves, r.stderr
    assert json.loads(r.stdout)["import"]["applied"] == (0 if approves else lab.size()), \
        r.stdout  # fmt: skip


def test_a_state_that_cannot_be_read_after_the_import_record_leaves_the_line_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rot40's Left: `relayed` reads the user's states after the import record is written; a
    read that failed there (an I/O error) ended the import with exit 3 and the bare error, as
    if nothing were imported (on 9ed7ee20: ``FAIL: database: disk I/O error (a read or write
    of the user's state or an index failed; …)``, exit 3). The naming is wording
    only: the line as before (``revoked by <lab>``), a WARNING that says the import is recorded
    and why the signer's log is not named, exit 0; the stop counts all the same."""
    import sqlite3

    from trajledger.ledger import trust_state, updates

    vendor, lab, third, relayed = _relayed(tmp_path, read_vendor=True)
    applied, noted = updates.apply_update, trust_state.TrustState.noted
    faults: list[str] = []

    def apply_then_fail(*args: object, **kwargs: object) -> object:
        done = applied(*args, **kwargs)  # type: ignore[arg-type]
        faults.append("armed")
        return done

    def failing(self: trust_state.TrustState, key: str) -> bytes | None:
        if faults == ["armed"]:  # the first state read after the import record, once
            faults.append("failed")
            raise sqlite3.OperationalError("disk I/O error")
        return noted(self, key)

    monkeypatch.setattr(updates, "apply_update", apply_then_fail)
    monkeypatch.setattr(trust_state.TrustState, "noted", failing)
    size = third.size()
    r = third.run("import", relayed, "--key", "approver", "--json")
    assert faults == ["armed", "failed"], faults
    assert f"WARNING: revoked by {_origin(lab)}: rollout-batch vendor-1 " in r.stderr, r.stderr
    assert (f"its update is recorded (log index {size}), but the log that signed each stop "
            f"it relays could not then be known (the lines name {_origin(lab)}, which brought "
            "them): disk I/O error") in r.stderr, r.stderr
    report = json.loads(r.stdout)["import"]
    assert report["index"] == size + 1 and "disk I/O error" in report["unnamed"], r.stdout
    third.run("verify", vendor.batches[0], code=1)
