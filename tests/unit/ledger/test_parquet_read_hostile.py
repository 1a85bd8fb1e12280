"""Hostile repetition levels given to the Parquet reader's level scan (rev42's finding 5 in
rollouts/parquet_read.py, fixed by pqrev; rev42's reproducers were in /tmp/rev42-s/): the
scan's work counted, never timed."""

from __future__ import annotations

import io

import numpy as np
import numpy.typing as npt
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



@pytest.mark.parametrize("count", [1, 7])
def test_runs_of_under_eight_levels_are_refused_after_a_bounded_number(count: int) -> None:
    """rev42 finding 5's second half: RLE runs of under 8 levels each (legal; Arrow's,
    parquet-mr's and Rust's encoders write a run only for 8 or more of one level, bit-packing
    the rest, so only a page's last is shorter) walk the scan through a page two bytes a run:
    16 MiB of them, 1,695 bytes of zstd, cost 4.5 CPU-s, and a file may hold many such pages.
    Past `_SHORT_RUNS` of them in a file (counted across its pages and chunks: the list is
    shared), the scan stops: its reads are counted (not timed) and do not grow with the page.
    The levels do not repeat (0 and 1 in a pseudo-random order), so no stretch of them is
    counted in bulk."""
    bits = np.random.default_rng(5).integers(0, 2, 1 << 19)
    levels = _Counted(b"".join(bytes([count << 1, int(b)]) for b in bits))  # (1 MiB of runs)
    short = [parquet_read._SHORT_RUNS - 1000]
    _Counted.reads = 0
    with pytest.raises(parquet_read._ShortRuns):
        parquet_read._levels(parquet_read._Rows(1 << 40, short), levels, 1, count << 19)
    assert _Counted.reads < 20_000, _Counted.reads
    assert short[0] == parquet_read._SHORT_RUNS + 1


def test_a_pages_last_run_under_eight_levels_is_not_counted() -> None:
    """A run of under 8 levels at a page's end (every writer's last) costs nothing of the
    budget; one before another run does."""
    short = [0]
    rows = parquet_read._Rows(1 << 40, short)
    parquet_read._levels(rows, bytes([16 << 1, 0, 3 << 1, 1]), 1, 19)
    assert short == [0] and rows.done() == 4  # (the last row: a 0, then three 1s)
    parquet_read._levels(rows, bytes([3 << 1, 0, 16 << 1, 1]), 1, 19)
    assert short == [1]


def test_short_runs_make_a_bomb_error_naming_the_column(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan's refusal reaches the reader as a `BombError` before anything is decoded (a
    file written by pyarrow, its scan made to find the budget spent)."""
    def spent(*_args: object) -> None:
        raise parquet_read._ShortRuns

    monkeypatch.setattr(parquet_read, "_levels", spent)
    obs = pa.ListArray.from_arrays(pa.array(np.array([0, 3], np.int32)), pa.array(np.zeros(3)))
    out = io.BytesIO()
    pq.write_table(pa.table({"obs": obs}), out)
    meta = pq.ParquetFile(io.BytesIO(out.getvalue())).metadata
    with pytest.raises(parquet_read.BombError, match=r"column 'obs.list.element': .* runs of "):
        parquet_read._longest_row(io.BytesIO(out.getvalue()), meta.row_group(0).column(0), 1,
                                  1 << 40)


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


def test_the_scan_reads_a_chunks_pages_up_to_its_footers_values_as_arrow_does() -> None:
    """Arrow's page reader stops once the data pages read hold the footer's `num_values` (so a
    footer that understates them has its first page decoded whole, scanned whole here; and the
    100 bytes read past an old parquet-mr chunk, another chunk's pages, are not taken for this
    one's): a long row in a page past the footer's values is not counted, and is with the
    footer's own count."""
    lengths = [1] * 2000 + [5000]
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    obs = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.zeros(int(offsets[-1]))))
    out = io.BytesIO()
    pq.write_table(pa.table({"obs": obs}), out, data_page_size=512, use_dictionary=False)
    chunk = pq.ParquetFile(io.BytesIO(out.getvalue())).metadata.row_group(0).column(0)

    class Fewer:  # (the chunk as its footer would be with one value)
        def __getattr__(self, name: str) -> object:
            return 1 if name == "num_values" else getattr(chunk, name)

    with io.BytesIO(out.getvalue()) as f:
        assert parquet_read._longest_row(f, chunk, 1, 1 << 40) == 5000
        assert parquet_read._longest_row(f, Fewer(), 1, 1 << 40) == 1  # type: ignore[arg-type]


class _Stated:
    """A file's footer as read, with every column chunk stating ``size`` stored bytes."""

    def __init__(self, meta: pq.FileMetaData, size: int) -> None:
        self.meta, self.size = meta, size

    def __getattr__(self, name: str) -> object:
        return getattr(self.meta, name)

    def row_group(self, g: int) -> object:
        group = self.meta.row_group(g)
        size = self.size

        class Group:
            def __getattr__(self, name: str) -> object:
                return getattr(group, name)

            def column(self, j: int) -> object:
                chunk = group.column(j)

                class Chunk:
                    def __getattr__(self, name: str) -> object:
                        return size if name == "total_compressed_size" else getattr(chunk, name)

                return Chunk()

        return Group()


def test_a_row_groups_list_chunks_state_no_more_stored_bytes_than_the_file_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """rev43 finding 1: `_list_rows` spared a list chunk the count when its values were within
    8 x its stored bytes, each chunk judged alone by its footer's size (at most the file's):
    32 leaves each stating the whole file's bytes (Arrow reads a chunk's pages only until they
    hold its values, so the stated ends may all lie in one stretch of padding) passed a row of
    32 x 8 x the file (a 4 MB file, one row of 952 MiB, 1.7 GiB resident:
    /tmp/rev43-s/mkmulti.py). The file's bytes are now counted once among the chunks spared;
    an honest file's chunks never state more than it holds, so none is counted that was not."""
    monkeypatch.setattr(parquet_read, "MAX_ROW_BYTES", 1 << 20)
    rng = np.random.default_rng(0)

    def file(values: list[npt.NDArray[np.float64]]) -> tuple[bytes, pq.FileMetaData]:
        rows = [pa.ListArray.from_arrays(pa.array(np.array([0, len(v)], np.int32)), pa.array(v))
                for v in values]
        table = pa.table({"obs": pa.StructArray.from_arrays(rows, [f"f{i}" for i in range(8)]),
                          "pad": pa.array([rng.random(10_000).tobytes()])})
        out = io.BytesIO()
        pq.write_table(table, out, compression="zstd")
        return out.getvalue(), pq.ParquetFile(io.BytesIO(out.getvalue())).metadata

    # Honest: 8 rows of 40,000 random numbers (2.5 MB in one row, each chunk its own 320 KB)
    # are spared the count, as before.
    data, meta = file([rng.random(40_000) for _ in range(8)])
    assert parquet_read._list_rows(data, meta, {"obs", "pad"}) == {}
    # Zeros, each chunk stating 45,000 bytes (8 x 45,000 over its 320,000 bytes of values) of
    # the file's 81 KB: together they claim more than it holds.
    data, meta = file([np.zeros(40_000)] * 8)
    assert all(meta.row_group(0).column(j).total_compressed_size < 1000 for j in range(8))
    with pytest.raises(parquet_read.BombError, match="MAX_ROW_BYTES"):
        parquet_read._list_rows(data, _Stated(meta, 45_000), {"obs", "pad"})  # type: ignore[arg-type]
