"""What out49 followed up of out48's and rev46's Left (outsiders' follow-ups): a name clash's
imported record named in the report trees, one rule for a record of yours taking an imported
name, the progress bar's total, and what a team does with every approver key lost;
docs/SECURITY.md, "Review of 2026-12-07, thirty-fifth round (out49)".
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import click
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_out48_reported import vendor_only
from testkit import Party

from trajledger.ledger.rollouts.parquet_read import stated_steps


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


def understated(data: bytes, rows: int = 1) -> bytes:
    """``data`` (a Parquet file pyarrow wrote) with its footer's total of rows set to ``rows``
    (as rev46's test_rev46_stated_steps.py crafts it); the row groups as they were."""
    import struct

    size = struct.unpack("<I", data[-8:-4])[0]
    start = len(data) - 8 - size
    footer = data[start:-8]
    total = pq.read_metadata(pa.BufferReader(data)).num_rows
    field = b"\x16" + _varint(total << 1) + b"\x19"
    assert footer.count(field) == 1
    footer = footer.replace(field, b"\x16" + _varint(rows << 1) + b"\x19")
    return data[:start] + footer + struct.pack("<I", len(footer)) + b"PAR1"


def test_the_recording_bar_counts_the_row_groups_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev46's Left: ``record``'s progress bar (stderr a terminal) took its length from a
    Parquet footer's total of rows, which no reader decodes by: a footer stating 1 row over
    row groups of 100 drew a bar of 1 step. Expected: the row groups' rows
    (`parquet_read.stated_steps`), what the recording reads."""
    vendor = Party(tmp_path, "vendor")
    vendor_only(vendor, tmp_path)
    out = io.BytesIO()
    pq.write_table(pa.table({
        "episode_id": ["e"] * 100, "step": list(range(100)),
        "obs": [[0.01 * t, 0.0, 0.0, 0.0] for t in range(100)], "action": [t % 2 for t in range(100)],
        "reward": [1.0] * 100, "terminated": [t == 99 for t in range(100)],
        "truncated": [False] * 100}), out, row_group_size=30)
    crafted = understated(out.getvalue())
    assert stated_steps(pq.read_metadata(pa.BufferReader(crafted))) == 100
    (tmp_path / "steps.parquet").write_bytes(crafted)
    lengths: list[Any] = []
    real = click.progressbar

    def progressbar(*args: Any, **kwargs: Any) -> Any:
        lengths.append(kwargs.get("length"))
        return real(*args, **kwargs)

    monkeypatch.setattr(click, "progressbar", progressbar)
    monkeypatch.setattr("trajledger.ledger.artifact_cli.is_terminal", lambda stream: True)
    vendor.run("record", tmp_path / "steps.parquet", "--env", "cartpole@1", "--policy", "random",
               "--key", "vendor")
    assert lengths == [100], lengths
