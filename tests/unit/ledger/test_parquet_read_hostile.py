"""Hostile repetition levels given to the Parquet reader's level scan (rev42's findings in
rollouts/parquet_read.py, pq45's file this round: strict xfails for it or the lead; the
reproducers are in /tmp/rev42-s/)."""

from __future__ import annotations

import pytest

from trajledger.ledger.rollouts import parquet_read


class _Counted(bytes):
    """Levels whose reads are counted (the scan indexes them byte by byte)."""

    reads = 0

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        _Counted.reads += 1
        return super().__getitem__(i)


@pytest.mark.xfail(strict=True, reason=(
    "rev42 finding 5: the level scan walks runs of no levels one by one in Python (2 bytes an "
    "RLE run, 1 a bit-packed one), which Arrow's decoder takes for the end of the levels: a "
    "16 MiB page of them, 812 bytes of zstd, 3.2 CPU-s before pyarrow refuses the file"))
@pytest.mark.parametrize("run", [b"\x00\x00", b"\x01"], ids=["rle", "bit-packed"])
def test_a_run_of_no_levels_ends_the_scan_of_a_page(run: bytes) -> None:
    """`_levels` reads a run's header, adds its count (0) and goes on while levels are left
    to read: a page of such runs is walked to its end whatever its size (`MAX_PAGE_BYTES`, 256
    MiB: about 64M iterations), each page of a file again, before anything is decoded. Arrow's
    `RleDecoder` ends at a run of no levels (the page then holds fewer levels than its header
    says, and pyarrow refuses it: "Number of decoded rep / def levels do not match"). Here a
    mebibyte of such runs for a page of 40M values: the scan should stop at the first."""
    _Counted.reads = 0
    levels = _Counted(run * ((1 << 20) // len(run)))
    parquet_read._levels(parquet_read._Rows(1 << 40), levels, 1, 40_000_000)
    assert _Counted.reads < 100, _Counted.reads
