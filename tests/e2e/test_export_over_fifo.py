"""An evidence bundle is never renamed over a device, FIFO or socket put at its path after
``--out`` was checked (the lead, eighteenth round: `fs.refuse_special` before the rename)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import testkit
from test_withdraw_approval import DATASET

from trajledger import Ledger


def test_a_bundle_is_not_renamed_over_a_fifo(
    quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    home = testkit.copy_template(quickstart_template, tmp_path / "home")
    out = tmp_path / "out" / "bundle.tar.zst"
    out.parent.mkdir()
    os.mkfifo(out)
    led = Ledger.open(home)
    try:
        with pytest.raises(OSError, match="is a FIFO, not a file: not replaced"):
            led.export(DATASET, out)
    finally:
        led.close()
    assert stat.S_ISFIFO(os.lstat(out).st_mode)
    assert [p.name for p in out.parent.iterdir()] == ["bundle.tar.zst"]  # no temp file left
