"""`trust_handover.floor_across`: the floor a bundle's checkpoint must extend, from the keys this
user noted for the log's origin (review of 2026-12-04, eleventh round: the lead)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trajledger.ledger.encode import vkey_string
from trajledger.ledger.errors import LedgerError
from trajledger.ledger.trust_handover import floor_across
from trajledger.ledger.user_state import origin_dir

ORIGIN = "vendor.example/log"


def test_a_noted_key_that_cannot_be_read_fails_closed(tmp_path: Path) -> None:
    """A key noted for the origin may carry the floor of the log before a rotation: one that
    cannot be read (a FIFO planted in the state) was skipped with every other noted key, and
    the bundle was judged with no floor. Now the verification stops, naming the file."""
    vkey = vkey_string(ORIGIN, bytes(range(32)))
    assert floor_across(vkey, [], tmp_path) is None  # nothing noted: no floor, nothing made
    origin = origin_dir(ORIGIN, tmp_path)
    origin.mkdir(parents=True)
    (origin / ".settings.json").write_text("{}")  # (not a key: skipped)
    assert floor_across(vkey, [], tmp_path) is None
    os.mkfifo(origin / "0123abcd")
    with pytest.raises(LedgerError, match=r"0123abcd: cannot read a log key noted for this "
                                          r"origin \(.*\): its floor cannot be applied"):
        floor_across(vkey, [], tmp_path)
