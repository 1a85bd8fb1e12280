"""End to end (rot40, twenty-fifth round): gap39's unread mark survives a fresh state directory.

The mark (a log's size applied counts as 0 while records another log brought after it was
applied wait to be read against it) lived in the user's state directory only. A fresh one (a
new machine, the directory lost) restores each log's size applied from the signed import
records, not the mark: the vendor's log was read from the size applied on, and its revocation,
logged before that size, of the batch the lab's bundle brought after, was passed over for good
(``monitor --fail-on-revocation`` exit 0). Now a state that restores a size applied from the
import records derives the mark from the ledger too: the records other logs brought after that
log's first import are marked unread against it (its keys unknown there: any key, as for a
state of an earlier version), so its next read starts at 0: one reading more, never a record
passed over.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_records_after_applied import UNREAD, _lab_after_revocation, read_bars
from test_third_party_updates import REASON
from test_updates import served


def test_a_fresh_state_directory_still_reads_the_marked_log_from_0(tmp_path: Path) -> None:
    vendor, third, ckpt, bundle, _size = _lab_after_revocation(tmp_path, "applied")
    r = third.run("import", bundle, "--key", "approver")
    assert UNREAD in r.stderr, r.stderr
    shutil.rmtree(third.state)  # a fresh state directory: the mark was only there
    third.state.mkdir()
    for url in served(vendor):
        r = third.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver",
                      "--fail-on-revocation", code=1)
        assert "WARNING: revoked by " in r.stderr and "rollout-batch vendor-1 " in r.stderr, \
            r.stderr  # fmt: skip
        r = third.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver",
                      "--fail-on-revocation")  # read: the mark cleared, nothing new
        assert "revoked by" not in r.stderr, r.stderr
    r = third.run("verify", ckpt, code=1)
    assert f"revoked: {REASON}" in r.stderr and UNREAD not in r.stderr, r.stderr


def test_a_fresh_state_directory_of_a_buyer_with_one_log_reads_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: a ledger that imported from one log only holds no record another log brought:
    nothing is marked, and its monitor reads what is new only (the bar's total: the size
    applied restored from the import record), as before. (Fails when every restored log is
    marked: checked.)"""
    from test_updates import train_a_buyer


    vendor, buyer, _ckpt = train_a_buyer(tmp_path)
    applied = vendor.size()
    shutil.rmtree(buyer.state)
    buyer.state.mkdir()
    vendor.run("revoke", vendor.batches[0], "--reason", REASON, "--key", "vendor")
    bars = read_bars(monkeypatch)
    for url in served(vendor):
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver",
                      "--fail-on-revocation", code=1)
        assert "WARNING: revoked by " in r.stderr and UNREAD not in r.stderr, r.stderr
    assert bars == [vendor.size() - applied], bars


def test_a_record_marked_during_a_read_from_0_stays_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gap39's race (its Left): a monitor that began its read from 0 before another process's
    import marked a record, and ended after, cleared that mark too, though its read may have
    passed over the record's revocation (it was about nothing held when read). Now the read
    clears what was marked when it began (compare and clear): the record marked meanwhile
    (here in the middle of the read, as another process would) stays marked. (Fails with the
    whole mark cleared, gap39's rule.)"""
    from trajledger.ledger import updates
    from trajledger.ledger.trust_state import TrustState
    from trajledger.ledger.updates import UNREAD as MARK
    from trajledger.ledger.updates import mark_unread

    vendor, third, _ckpt, bundle, _size = _lab_after_revocation(tmp_path, "applied")
    third.run("import", bundle, "--key", "approver")
    late = {"sha256:" + "ab" * 32: "rollout-batch late-1 (sha256:abababababab…)"}
    holds, vkey, done = updates.held, vendor.vkey(), list[bool]()

    def held(ledger: Any, digest: str, state: Any = None) -> bool:  # of each entry read
        if not done:
            done.append(True)
            other = TrustState.open(vkey)  # another process's import marks it now
            try:
                mark_unread(other, late)
            finally:
                other.close()
        return holds(ledger, digest, state)

    monkeypatch.setattr(updates, "held", held)
    for url in served(vendor):
        third.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver",
                  "--fail-on-revocation", code=1)
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(third.state))
    state = TrustState.open(vkey)
    try:
        assert json.loads(state.noted(MARK) or b"{}") == late
    finally:
        state.close()
