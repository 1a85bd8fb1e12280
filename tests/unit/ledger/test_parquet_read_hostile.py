"""Hostile repetition levels given to the Parquet reader's level scan (rev42's findings in
rollouts/parquet_read.py, pq45's file this round: strict xfails for it or the lead; the
reproducers are in /tmp/rev42-s/)."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
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


@pytest.mark.parametrize("options", [
    {}, {"compression": "zstd", "data_page_size": 64}, {"data_page_version": "2.0"},
    {"row_group_size": 3},
])  # fmt: skip
def test_the_pages_of_an_honest_file_state_its_footers_values(options: dict[str, object]) -> None:
    """rev42 finding 1: a chunk is judged by the values its data pages' headers state as well
    as its footer's (Arrow decodes what the pages hold). Known answer: in a file pyarrow
    writes, the two agree for every chunk (a dictionary page's values not among them), so no
    honest chunk is scanned that was not before."""
    obs = pa.array([[float(i)] * (i % 7) if i % 5 else None for i in range(300)],
                   pa.list_(pa.float64()))
    table = pa.table({"id": pa.array(range(300)), "obs": obs,
                      "text": pa.array([f"t{i % 4}" for i in range(300)])})
    out = io.BytesIO()
    pq.write_table(table, out, **options)  # type: ignore[arg-type]
    meta = pq.ParquetFile(io.BytesIO(out.getvalue())).metadata
    stated = parquet_read._check_pages(out.getvalue(), meta)
    assert stated == {(g, c): meta.row_group(g).column(c).num_values
                      for g in range(meta.num_row_groups) for c in range(meta.num_columns)}


@pytest.mark.parametrize(("created_by", "old"), [
    ("parquet-mr version 1.2.8 (build abcd)", True), ("parquet-mr version 1.2.9", False),
    ("parquet-mr version 1.10.1 (build a89df8f9932b6ef6633d06069e50c9b7970bebd1)", False),
    ("parquet-mr version 1.13.1", False), ("parquet-mr", True), ("parquet-mr version x", True),
    ("parquet-cpp-arrow version 26.0.1", False), ("", False), (None, False),
])  # fmt: skip
def test_old_parquet_mr_chunks_are_read_as_arrow_reads_them(created_by: str | None,
                                                           old: bool) -> None:
    """rev42 finding 2: Arrow reads up to 100 bytes past a column chunk's stated end in a file
    of parquet-mr before 1.2.9 (PARQUET-816; a version it cannot read counts as 0.0.0), and so
    do the page checks and the level scan; the padding stops at the file's end."""
    assert parquet_read._old_parquet_mr(created_by) is old

    class Chunk:
        data_page_offset, has_dictionary_page, dictionary_page_offset = 40, True, 4
        total_compressed_size = 100

    chunk = Chunk()
    assert parquet_read._chunk_range(chunk, old, 1000) == (4, 204 if old else 104)  # type: ignore[arg-type]
    assert parquet_read._chunk_range(chunk, True, 150) == (4, 150)  # type: ignore[arg-type]
