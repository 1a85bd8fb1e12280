"""Parquet of unknown origin (``ledger.rollouts.parquet_read``): read as pyarrow reads it, and
a decompression bomb refused before it is expanded."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajledger.ledger.rollouts import parquet_read, parquet_thrift
from trajledger.ledger.rollouts.parquet_read import BombError, iter_parquet, read_parquet

MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))


def _table(n: int = 7) -> pa.Table:
    """Strings at every depth, nulls, binary and numbers."""
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "text": pa.array([None if i % 3 == 2 else "t" * (i % 5) for i in range(n)]),
        "blob": pa.array([bytes([i % 256]) * (i % 9) for i in range(n)], pa.large_binary()),
        "extras": pa.array([[("k", "v" * i)] if i % 2 else None for i in range(n)],
                           pa.map_(pa.string(), pa.string())),
        "messages": pa.array([[{"role": "user", "content": "c" * i}, {"role": None,
                               "content": None}] if i % 4 else [] for i in range(n)], MESSAGES),
        "pair": pa.FixedSizeListArray.from_arrays(pa.array([str(i) for i in range(2 * n)]), 2),
        "obs": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(3 * n, dtype=np.float32)), 3),
        # (a view cannot be cast from a dictionary: read as it is)
        "view": pa.array([f"v{i}" for i in range(n)], pa.string_view()),
    })  # fmt: skip


def _bytes(table: pa.Table, **kw: object) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, **kw)  # type: ignore[arg-type]
    return out.getvalue()


@pytest.mark.parametrize("options", [
    {}, {"use_dictionary": False}, {"compression": "zstd", "row_group_size": 3},
    {"data_page_version": "2.0", "compression": "snappy"},
])  # fmt: skip
def test_tables_read_as_pyarrow_reads_them(tmp_path: Path, options: dict[str, object]) -> None:
    want = _table()
    data = _bytes(want, **options)
    (path := tmp_path / "t.parquet").write_bytes(data)
    for source in (data, path):
        assert read_parquet(source).equals(want)
        for rows in (1, 2, 1000):
            got = pa.Table.from_batches(list(iter_parquet(source, batch_rows=rows)))
            assert got.equals(want)
        assert read_parquet(source, columns=["messages", "id"]).equals(
            pq.read_table(io.BytesIO(data), columns=["messages", "id"]))
    numbers = want.select(["id", "obs"])
    assert read_parquet(_bytes(numbers)).equals(numbers)


@pytest.mark.parametrize("values", [pa.float32(), pa.string()])
def test_a_fixed_size_list_with_a_null_row_reads_as_pyarrow_reads_it(values: pa.DataType
                                                                       ) -> None:
    """A null row of a fixed-size list (an observation missing at one step) has its slots in
    the child array, which `flatten` leaves out: the row sizes were cut short (rev38 finding 6:
    ``ValueError: cannot reshape``, exit 4 from ``record``)."""
    rows = [[1.0, 2.0], None, [3.0, 4.0], None, [5.0, 6.0]]
    col = pa.array([None if r is None else [str(x) if values == pa.string() else x for x in r]
                    for r in rows], pa.list_(values, 2))
    want = pa.table({"obs": col})
    data = _bytes(want, row_group_size=2)
    assert read_parquet(data).equals(want)
    got = pa.Table.from_batches(list(iter_parquet(data, batch_rows=3)))
    assert got.equals(want)


def test_batches_hold_at_most_chunk_bytes_of_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parquet_read, "CHUNK_BYTES", 100)
    table = pa.table({"text": ["x" * 30] * 10 + ["y" * 150] + ["z" * 30] * 3})
    batches = list(iter_parquet(_bytes(table)))
    assert pa.Table.from_batches(batches).equals(table)
    sizes = [sum(len(s) for s in b.column(0).to_pylist()) for b in batches]
    assert all(s <= 100 or b.num_rows == 1 for s, b in zip(sizes, batches, strict=True))
    assert len(batches) > 3


def _one_value_many_times(value_bytes: int, rows: int, **kw: object) -> bytes:
    """``rows`` rows all holding one string of ``value_bytes``: a dictionary of one value
    (built as one, so that making it costs the value's bytes, not the rows')."""
    info = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)),
                                          pa.array(["a" * value_bytes]))
    table = pa.table({"id": pa.array(range(rows)), "info": info})
    # (without pyarrow's own schema, which would tell a reader to keep the dictionary)
    return _bytes(table, compression="zstd", store_schema=False, **kw)


def test_a_value_over_its_limit_is_refused_before_it_is_expanded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(parquet_read, "MAX_VALUE_BYTES", 1000)
    data = _one_value_many_times(1001, 50)
    with pytest.raises(BombError, match="column 'info': a value of 1,001 bytes"):
        read_parquet(data)
    with pytest.raises(BombError, match="decompression bomb"):
        list(iter_parquet(data))
    assert read_parquet(_one_value_many_times(1000, 50)).num_rows == 50


def test_a_row_and_a_file_over_their_limits_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # One row's list points at one short value many times (the value passes, the row does not).
    table = pa.table({"messages": pa.array([[{"role": "r" * 100, "content": None}] * 50],
                                           MESSAGES)})
    data = _bytes(table)
    monkeypatch.setattr(parquet_read, "MAX_ROW_BYTES", 4999)
    with pytest.raises(BombError, match=r"decodes to 5,000 bytes .*MAX_ROW_BYTES"):
        list(iter_parquet(data))
    monkeypatch.setattr(parquet_read, "MAX_ROW_BYTES", 5000)
    assert read_parquet(data).equals(table)
    many = _one_value_many_times(100, 1000)
    monkeypatch.setattr(parquet_read, "MAX_DECODED_BYTES", 50_000)
    with pytest.raises(BombError, match="MAX_DECODED_BYTES"):
        list(iter_parquet(many, batch_rows=100))
    monkeypatch.setattr(parquet_read, "MAX_TABLE_BYTES", 99_999)
    with pytest.raises(BombError, match="100,000 bytes, over the 99,999"):
        read_parquet(many)


def test_a_page_over_its_limit_is_refused_from_its_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parquet_read, "MAX_PAGE_BYTES", 1 << 16)
    data = _bytes(pa.table({"x": pa.array(np.zeros(1 << 15))}), use_dictionary=False,
                  compression="zstd", data_page_size=1 << 20)
    with pytest.raises(BombError, match=r"column 'x': a page decompresses to .*"
                                               r"MAX_PAGE_BYTES"):
        read_parquet(data)


@pytest.mark.parametrize("options", [
    {}, {"compression": "zstd", "data_page_size": 64}, {"data_page_version": "2.0"},
    {"use_dictionary": False, "write_statistics": False},
])  # fmt: skip
def test_page_headers_add_up_to_the_footers_sizes(options: dict[str, object]) -> None:
    """Known answer: each chunk's pages (header + body) fill its compressed size exactly, and
    their declared sizes (header + decompressed body) its uncompressed size."""
    data = _bytes(_table(300), **options)
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    f = io.BytesIO(data)
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            chunk = meta.row_group(g).column(c)
            pos = chunk.dictionary_page_offset if chunk.has_dictionary_page else (
                chunk.data_page_offset)
            end, plain = pos + chunk.total_compressed_size, 0
            while pos < end:
                got = parquet_thrift.read_header(f, pos, end - pos)
                assert got is not None
                size, compressed, length, *_ = got
                pos, plain = pos + length + compressed, plain + length + size
            assert pos == end
            assert plain == chunk.total_uncompressed_size


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_as_a_page_header_give_sizes_or_none(junk: bytes) -> None:
    got = parquet_thrift.read_header(io.BytesIO(junk), 0, len(junk))
    assert got is None or all(isinstance(v, int) for v in got)


def test_a_list_counting_more_elements_than_bytes_is_not_a_header() -> None:
    """tfast3: field 1 a list of booleans counting 2^62 (11 bytes in all) made `_skip` loop for
    ever (a boolean element never indexes the buffer). Run in a child: before the fix it does
    not return, and the child's timeout fails the test."""
    code = ("import io; from trajledger.ledger.rollouts import parquet_thrift as p; "
            "junk = bytes([0x19, 0xf1]) + b'\\xff' * 8 + b'\\x3f'; "
            "print(p.read_header(io.BytesIO(junk), 0, len(junk)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0 and done.stdout == "None\n", done.stderr[-2000:]


def test_a_header_nested_past_any_real_one_is_not_a_header() -> None:
    deep = b"\x1c" * 10_000  # field 1, a struct, inside each other
    assert parquet_thrift.read_header(io.BytesIO(deep), 0, len(deep)) is None


def _peak_rss_of(code: str) -> tuple[int, str]:
    """Run ``code`` in a new interpreter: its own peak resident memory (bytes: its VmHWM,
    which a new program starts afresh, unlike rusage, which keeps its parent's at a fork), and
    its stderr."""
    tail = "\nprint(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])"
    done = subprocess.run([sys.executable, "-c", code + tail], capture_output=True, text=True,
                          check=True)
    return int(done.stdout.split()[-1]) * 1024, done.stderr


@pytest.mark.slow
def test_a_bomb_costs_kilobytes_of_memory_not_gigabytes(tmp_path: Path) -> None:
    """Each of these few-kilobyte files decodes to gigabytes as pyarrow reads it: a row whose
    list points 300 times at one 1 MiB string (300 MiB: refused from the dictionaries, before
    any row is decoded); a dictionary of one 80 MiB string that 16 rows use (1.25 GiB: refused
    from its page's header, one value in 80 MiB); one 260 MiB page (its header)."""
    refs = pa.ListArray.from_arrays(pa.array([0, 300], pa.int32()), pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(300, np.int32)), pa.array(["m" * (1 << 20)])))
    row = _bytes(pa.table({"contents": refs}), compression="zstd", store_schema=False)
    for name, data in (("row", row),
                       ("value", _one_value_many_times(80 << 20, 16)),
                       ("page", _one_value_many_times(260 << 20, 1, use_dictionary=False))):
        path = tmp_path / f"{name}.parquet"
        path.write_bytes(data)
        assert path.stat().st_size < 200_000
        peak, err = _peak_rss_of(
            "from trajledger.ledger.rollouts.parquet_read import BombError, read_parquet\n"
            f"try:\n    read_parquet({str(path)!r})\nexcept BombError as e:\n"
            "    import sys; print(e, file=sys.stderr)\nelse:\n    raise SystemExit('read')"
        )
        assert "decompression bomb" in err
        assert peak < 300 << 20, (name, peak)


def test_a_junk_header_in_one_leaf_does_not_end_the_other_leaves_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A leaf nobody reads may hold junk where its first page header should be: pyarrow reads
    only the columns asked for. The pages of the leaves after it are still checked (they were
    not: the check stopped at the first header it could not read)."""
    monkeypatch.setattr(parquet_read, "MAX_PAGE_BYTES", 1 << 16)
    table = pa.table({"junk": ["j"] * (1 << 15), "x": pa.array(np.zeros(1 << 15))})
    data = bytearray(_bytes(table, use_dictionary=False, compression="zstd",
                            data_page_size=1 << 20))
    junk = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(0).column(0)
    data[junk.data_page_offset : junk.data_page_offset + 8] = b"\xff" * 8
    with pytest.raises(BombError, match=r"column 'x': a page decompresses to .*MAX_PAGE_BYTES"):
        read_parquet(bytes(data), columns=["x"])


# -- a file whose strings are few, read without dictionaries (spd52) ---------------------------


def _slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file read as before spd52: its strings as dictionaries, counted row by row."""
    monkeypatch.setattr(parquet_read, "_small", lambda *_a: False)


def _not_counted(*_args: object) -> None:
    raise AssertionError("read as dictionaries and counted")


def test_a_tiny_file_is_read_without_dictionaries_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch of one step (the gate reads two such files a batch: out53, 400 of them) is read
    as it is: no second reader with dictionaries, no row counted (3 ms a file of 26 columns),
    the same table as the dictionaries gave."""
    data = _bytes(_table(3), compression="zstd")
    monkeypatch.setattr(parquet_read, "_checked_rows", _not_counted)
    got = read_parquet(data)
    assert pa.Table.from_batches(list(iter_parquet(data))).equals(got)
    monkeypatch.undo()
    _slow(monkeypatch)
    assert read_parquet(data).equals(got)
    assert got.equals(_table(3))


@pytest.mark.parametrize("options", [
    {}, {"use_dictionary": False}, {"compression": "zstd", "row_group_size": 3},
    {"data_page_version": "2.0", "compression": "snappy"},
    {"column_encoding": {"text": "DELTA_BYTE_ARRAY"}, "use_dictionary": False},
])  # fmt: skip
@pytest.mark.parametrize("limit", ["MAX_VALUE_BYTES", "MAX_ROW_BYTES", "MAX_TABLE_BYTES",
                                   "CHUNK_BYTES"])
def test_the_small_path_decides_as_the_dictionaries_do(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, object], limit: str
) -> None:
    """For each limit set anywhere from below to above what a file decodes to, the file is
    read, refused or not readable as it was when every file was read as dictionaries (a
    delta-encoded string is not readable so: still refused)."""
    data = _bytes(_table(40), **options)
    want = pq.read_table(io.BytesIO(data))

    def outcome(cap: int, slow: bool) -> str:
        with monkeypatch.context() as m:
            m.setattr(parquet_read, limit, cap)
            if slow:
                _slow(m)
            try:
                return "read" if read_parquet(data).equals(want) else "other"
            except BombError:
                return "refused"
            except (OSError, pa.ArrowException):
                return "unreadable"

    for cap in (1, 30, 300, 3_000, 30_000, 300_000, 1 << 40):
        assert outcome(cap, True) == outcome(cap, False), cap


def test_a_bomb_is_never_taken_for_a_small_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many rows that point at one value: the headers' bound (rows times the dictionary's
    bytes) is over the limits, so the rows are counted and the file refused as before."""
    monkeypatch.setattr(parquet_read, "MAX_TABLE_BYTES", 99_999)
    small = parquet_read._small
    seen: list[bool] = []
    monkeypatch.setattr(parquet_read, "_small", lambda *a: seen.append(small(*a)) or seen[-1])
    with pytest.raises(BombError, match="100,000 bytes, over the 99,999"):
        read_parquet(_one_value_many_times(100, 1000))
    assert seen == [False]


def test_a_chunk_whose_headers_do_not_reach_its_end_is_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Junk where a string chunk's page header should be: its pages' sizes are unknown, so its
    strings are read as dictionaries (and pyarrow refuses the junk as before)."""
    table = pa.table({"text": ["t"] * 10, "x": pa.array(np.zeros(10))})
    data = bytearray(_bytes(table, use_dictionary=False))
    chunk = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(0).column(0)
    data[chunk.data_page_offset : chunk.data_page_offset + 8] = b"\xff" * 8
    walked: dict[tuple[int, int], int] = {}
    meta = pq.ParquetFile(io.BytesIO(bytes(data))).metadata
    parquet_read._check_pages(bytes(data), meta, walked)
    assert (0, 0) not in walked and (0, 1) in walked
    assert not parquet_read._small(meta, {"text": 0}, {}, walked)


# -- values under lists counted row by row (rev41 finding 3) ---------------------------------


def _list_file(lengths: list[int | None], values: npt.NDArray[Any], **options: Any) -> bytes:
    """A file of one ``list<double>`` column whose rows hold ``lengths`` values (None: a null
    list), taken in order from ``values``."""
    offsets = np.concatenate([[0], np.cumsum([n or 0 for n in lengths])]).astype(np.int32)
    column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values[:offsets[-1]]),
                                      mask=pa.array([n is None for n in lengths]))
    sink = io.BytesIO()
    pq.write_table(pa.table({"obs": column}), sink, **options)
    return sink.getvalue()


def test_one_long_list_row_among_empty_ones_is_refused_before_it_is_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One row of zeros over the row limit, hidden among 100,000 empty rows (so the row
    group's average is tiny), dictionary-coded to a few kilobytes: refused from the pages'
    repetition levels, before pyarrow decodes a value."""
    monkeypatch.setattr(parquet_read, "MAX_ROW_BYTES", 1 << 20)
    lengths: list[int | None] = [0] * 50_000 + [200_000] + [0] * 50_000
    data = _list_file(lengths, np.zeros(200_000), compression="zstd")
    assert len(data) < 20_000

    def decoded(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("decoded")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", decoded)
    with pytest.raises(BombError, match=r"column 'obs.list.element': a row of row group 0 "
                       r"holds values under lists that decode to over 1,048,576 bytes"):
        next(iter_parquet(data))
    with pytest.raises(BombError, match="MAX_ROW_BYTES"):
        read_parquet(data)


def test_rows_under_the_limit_come_in_batches_of_chunk_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many rows each under the row limit but together far over a batch's bytes, in one row
    group (a few kilobytes of zeros): read a few rows at a time, the same values."""
    monkeypatch.setattr(parquet_read, "MAX_ROW_BYTES", 1 << 20)
    monkeypatch.setattr(parquet_read, "CHUNK_BYTES", 2 << 20)
    lengths: list[int | None] = [100_000] * 40  # (800,000 bytes a row: 2 a batch)
    data = _list_file(lengths, np.zeros(4_000_000), compression="zstd")
    batches = list(iter_parquet(data))
    assert max(b.num_rows for b in batches) == 2
    assert pa.Table.from_batches(batches).equals(pq.read_table(io.BytesIO(data)))


def test_numbers_that_take_their_size_in_the_file_are_not_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Random numbers (zstd cannot shrink them): a row of them decodes to about what it takes
    in the file, so the levels are not read, whatever the row group holds."""
    monkeypatch.setattr(parquet_read, "MAX_ROW_BYTES", 1 << 16)
    data = _list_file([50_000, 10, None, 3], np.random.default_rng(1).random(50_013))
    assert sum(b.num_rows for b in iter_parquet(data)) == 4


@pytest.mark.parametrize("options", [
    {"compression": c, "data_page_version": v, "data_page_size": 512}
    for c in ("zstd", "snappy", "gzip", "lz4", "none") for v in ("1.0", "2.0")
])
@settings(max_examples=8, deadline=None)
@given(lengths=st.lists(st.one_of(st.none(), st.integers(0, 40), st.just(3000)), min_size=1,
                        max_size=300))
def test_the_longest_row_from_the_levels_is_pyarrows(
    options: dict[str, Any], lengths: list[int | None]
) -> None:
    """The levels a row holds (its values, or one for an empty or null list) counted from the
    pages' repetition levels, against pyarrow's decoded lists: every codec, both page versions,
    pages cut every 512 bytes (rows across pages)."""
    data = _list_file(lengths, np.zeros(3000 * len(lengths)), **options)
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    with io.BytesIO(data) as f:
        got = parquet_read._longest_row(f, meta.row_group(0).column(0), 1, 1 << 40)
    assert got == max(max(n or 0, 1) for n in lengths)


def _hybrid(runs: list[tuple[int, int, bytes]], bits: int) -> bytes:
    """The RLE / bit-packed hybrid of ``runs``: ``(1, groups, packed bytes)`` or ``(0, count,
    level)``, the level as one byte."""
    out = bytearray()
    for packed, count, body in runs:
        head = count << 1 | packed
        while head > 0x7F:
            out.append(head & 0x7F | 0x80)
            head >>= 7
        out.append(head)
        out += body
    return bytes(out)


def _longest_levels(levels: bytes, bits: int, n: int) -> tuple[int, bool]:
    """The longest row of the first ``n`` levels of ``levels``, decoded run by run as the
    hybrid's definition says (a bit-packed run cut short: its whole groups; a run of one level
    longer than ``n``: up to ``n``; a run of no levels: their end, as Arrow's `RleDecoder`
    takes it), each run as (level, count): the reference; and whether a run's header or level
    was cut short (the rows before it counted)."""
    pairs: list[tuple[int, int]] = []
    pos = total = 0
    cut = False
    while total < n and pos < len(levels):
        try:
            head, at = parquet_read.varint(levels, pos)
            if head >> 1 and not head & 1:
                levels[at]  # (its level)
        except IndexError:
            cut = True
            break
        if not head >> 1:
            break
        pos = at
        if head & 1:
            groups = min(head >> 1, (len(levels) - pos) // bits)
            bits_ = np.unpackbits(np.frombuffer(levels[pos:pos + groups * bits], np.uint8),
                                  bitorder="little").reshape(-1, bits)
            got = [int(v) for v in bits_ @ (1 << np.arange(bits))][:n - total]
            pairs += [(v, 1) for v in got]
            total, pos = total + len(got), pos + groups * bits
        else:
            count = min(head >> 1, n - total)
            pairs.append((levels[pos], count))
            total, pos = total + count, pos + 1
    longest = current = 0
    for value, count in pairs:
        if value == 0 and count:
            longest, current = max(longest, current, 1 if count > 1 else 0), 1
        else:
            current += count
    return max(longest, current), cut


def _run(bits: int) -> st.SearchStrategy[tuple[int, int, bytes]]:
    top = (1 << bits) - 1
    rle = st.tuples(st.just(0), st.one_of(st.integers(0, 20), st.integers(60, 400)),
                    st.integers(0, top).map(lambda v: bytes([v])))
    packed = st.integers(0, 3).flatmap(lambda g: st.tuples(st.just(1), st.just(g),
                                                           st.binary(min_size=g * bits,
                                                                     max_size=g * bits)))
    return st.one_of(rle, packed)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), bits=st.sampled_from([1, 2]), limit=st.sampled_from([1 << 40, 50]))
def test_the_longest_row_of_any_hybrid_levels_is_the_references(
    data: st.DataObject, bits: int, limit: int
) -> None:
    """Levels of runs, a stretch of them repeated many times (rows of one length: read in
    bulk) between others, cut anywhere, of any declared count: the longest row is the one the
    levels decoded run by run give (a bit-packed run cut short, levels past the count, runs of
    hundreds)."""
    before, stretch, after = (data.draw(st.lists(_run(bits), max_size=k)) for k in (4, 6, 4))
    reps = data.draw(st.integers(0, 300))
    levels = _hybrid(before, bits) + _hybrid(stretch, bits) * reps + _hybrid(after, bits)
    levels = levels[:data.draw(st.integers(0, len(levels)))] if data.draw(st.booleans()) \
        else levels
    n = data.draw(st.one_of(st.just(1 << 31), st.integers(0, 60_000)))
    want, cut = _longest_levels(levels, bits, n)
    rows = parquet_read._Rows(limit)
    try:
        parquet_read._levels(rows, levels, bits, n)
    except IndexError:  # (a run cut short: what the reference found, the rows before counted)
        assert cut
    else:  # (or the limit reached before the cut)
        assert not cut or rows.done() >= limit
    assert min(rows.done(), limit) == min(want, limit)


@pytest.mark.parametrize("options", [
    {"compression": c, "data_page_version": v} for c in ("zstd", "snappy", "none")
    for v in ("1.0", "2.0")
])
@pytest.mark.parametrize("length", [1, 7, 80, 81, 1000])
def test_rows_of_one_length_are_read_in_bulk(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], length: int
) -> None:
    """Rows of one length (constant observations, the list-bomb check's costly case: every
    row's levels the same bytes) are counted a stretch of repeating bytes at a time, not run by
    run; one longer row among them, or one shorter, is still found (against pyarrow's)."""
    seen: list[int] = []
    monkeypatch.setattr(parquet_read, "varint",
                        lambda b, pos, f=parquet_read.varint: seen.append(pos) or f(b, pos))
    for odd in (length + 9, max(length - 1, 0), length):
        seen.clear()
        lengths: list[int | None] = [length] * 3000 + [odd] + [length] * 3000
        data = _list_file(lengths, np.zeros(length * 6001 + 10), **options)
        meta = pq.ParquetFile(io.BytesIO(data)).metadata
        with io.BytesIO(data) as f:
            got = parquet_read._longest_row(f, meta.row_group(0).column(0), 1, 1 << 40)
        read = pq.read_table(io.BytesIO(data)).column("obs").combine_chunks()
        assert got == int(max(max(n, 1) for n in pc.list_value_length(read).to_pylist()))
        assert len(seen) < 100, f"{len(seen)} run headers read one by one"


def test_a_run_of_a_huge_count_counts_up_to_the_pages_levels() -> None:
    """A run of 2**40 ones after a row's start, in a page of 2**31 - 1 levels (a header may
    state any count): the row is the page's levels long, not 2**40, and nothing expands."""
    levels = _hybrid([(1, 1, b"\xfe"), (0, 1 << 40, b"\x01")] * 3, 1)
    rows = parquet_read._Rows(1 << 50)
    parquet_read._levels(rows, levels, 1, (1 << 31) - 1)
    assert rows.done() == (1 << 31) - 1


def test_levels_cut_short_after_a_long_row_still_count_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """pq45 finding 1: a page's repetition levels whose last run is cut short (a run's header
    without its level) after a row over the limit: pyarrow decodes that row before it finds the
    cut ("rep / def levels do not match"), so the row counts; it was dropped with the levels
    read since the last count (none of them: the row passed)."""
    monkeypatch.setattr(parquet_read, "MAX_ROW_BYTES", 1 << 20)
    lengths: list[int | None] = [0] * 50 + [200_000] + [0] * 50
    data = bytearray(_list_file(lengths, np.zeros(200_000), compression="zstd",
                                data_page_version="2.0"))
    chunk = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(0).column(0)
    pos = chunk.data_page_offset
    while True:  # the data page (V2: its levels first, as they are)
        got = dict.fromkeys(parquet_read._LEVELS, -1)
        length = parquet_thrift.skip_struct(bytes(data[pos:pos + 4096]), 0, got)
        if got[1,] == 3:
            break
        pos += length + got[3,]
    end = pos + length + got[8, 6]
    assert data[end - 2:end] == b"\x64\x00"  # (the 50 empty rows: one run of zeros)
    data[end - 2:end] = b"\x01\x02"  # no bit-packed groups, then a run's header alone
    cut = bytes(data)
    with io.BytesIO(cut) as f:
        assert parquet_read._longest_row(f, chunk, 1, 1 << 40) == 200_000
    rows = parquet_read._Rows(1 << 40)
    with pytest.raises(IndexError):
        parquet_read._levels(rows, b"\x02\x00\xbe\x9a\x0c\x01\x02", 1, 300_000)
    assert rows.done() == 1 + 99_999

    def decoded(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("decoded")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", decoded)
    with pytest.raises(BombError, match="MAX_ROW_BYTES"):
        next(iter_parquet(cut))


def _footer_says_one_value(data: bytes) -> bytes:
    """``data`` (one row group, one column) with its footer's ``num_values`` of the column
    chunk made 1 (a longer varint of 1 in the same bytes: the footer's length unchanged)."""
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    value = meta.row_group(0).column(0).num_values << 1  # (zigzag)
    coded = bytearray()
    while value > 0x7F:
        coded.append(value & 0x7F | 0x80)
        value >>= 7
    coded.append(value)
    length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - length
    at = data.index(bytes(coded), start)
    out = data[:at] + bytes([0x82] + [0x80] * (len(coded) - 2) + [0]) + data[at + len(coded):]
    assert pq.ParquetFile(io.BytesIO(out)).metadata.row_group(0).column(0).num_values == 1
    return out


def test_a_footer_stating_few_values_does_not_spare_the_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pq45 finding 3: the footer's ``num_values`` of a column chunk (1, where its page holds
    200,100) decided whether the levels were counted, and pyarrow reads the page whatever the
    footer says: the 200,000-value row passed, and `read_parquet` read a table over its limit.
    The pages' own counts (their headers, read before anything) decide now."""
    monkeypatch.setattr(parquet_read, "MAX_ROW_BYTES", 1 << 20)
    lengths: list[int | None] = [0] * 50 + [200_000] + [0] * 50
    data = _footer_says_one_value(_list_file(lengths, np.zeros(200_000), compression="zstd"))

    def decoded(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("decoded")

    with monkeypatch.context() as m:
        m.setattr(pq.ParquetFile, "iter_batches", decoded)
        with pytest.raises(BombError, match="MAX_ROW_BYTES"):
            next(iter_parquet(data))
    monkeypatch.setattr(parquet_read, "MAX_TABLE_BYTES", 2 << 20)
    many = _footer_says_one_value(_list_file([100_000] * 40, np.zeros(4_000_000),
                                             compression="zstd"))
    with pytest.raises(BombError, match="MAX_TABLE_BYTES"):
        read_parquet(many)


def _old_parquet_mr(data: bytes) -> bytes:
    """``data`` (one row group: a dictionary page, then one data page) as if parquet-mr 1.2.8
    wrote it, its column chunk's footer size covering the dictionary page alone: Arrow reads
    up to 100 bytes past such a chunk (PARQUET-816), so it reads the data page all the same."""
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    chunk = meta.row_group(0).column(0)
    length = int.from_bytes(data[-8:-4], "little")
    footer = data[len(data) - 8 - length:-8]
    old, size = chunk.total_compressed_size << 1, (
        chunk.data_page_offset - chunk.dictionary_page_offset) << 1
    coded = bytearray()
    while old > 0x7F:
        coded.append(old & 0x7F | 0x80)
        old >>= 7
    coded.append(old)
    short = bytes((size >> 7 * i) & 0x7F | (0x80 if i < len(coded) - 1 else 0)
                  for i in range(len(coded)))
    footer = footer.replace(bytes(coded), short, 1)
    by = meta.created_by.encode()
    mr = b"parquet-mr version 1.2.8"
    footer = footer.replace(bytes([len(by)]) + by, bytes([len(mr)]) + mr, 1)
    out = data[:len(data) - 8 - length] + footer + len(footer).to_bytes(4, "little") + b"PAR1"
    again = pq.ParquetFile(io.BytesIO(out)).metadata
    assert again.created_by == mr.decode()
    assert again.row_group(0).column(0).total_compressed_size == size >> 1
    return out


def test_a_page_past_an_old_parquet_mr_chunks_stated_end_is_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pq45 finding 4: a file that says parquet-mr 1.2.8 wrote it, whose column chunk's
    footer size leaves out its one data page (a row of 200,000 values, 93 bytes): pyarrow
    reads up to 100 bytes past such a chunk and decoded the row; neither the page checks nor
    the level count saw the page. Both read where Arrow reads now."""
    monkeypatch.setattr(parquet_read, "MAX_ROW_BYTES", 1 << 20)
    data = _old_parquet_mr(_list_file([200_000], np.zeros(200_000), compression="zstd"))
    assert pq.read_table(io.BytesIO(data)).num_rows == 1  # (pyarrow reads the page)

    def decoded(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("decoded")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", decoded)
    with pytest.raises(BombError, match="MAX_ROW_BYTES"):
        next(iter_parquet(data))
    monkeypatch.setattr(parquet_read, "MAX_PAGE_BYTES", 20)  # (the data page: 23 bytes)
    with pytest.raises(BombError, match="MAX_PAGE_BYTES"):
        parquet_read._check_pages(data, pq.ParquetFile(io.BytesIO(data)).metadata)


@pytest.mark.parametrize(("created_by", "padded"), [
    ("parquet-mr version 1.2.8", True), ("parquet-mr version 1.2.8-SNAPSHOT (build x)", True),
    ("parquet-mr version 1.2-cdh9.9", True), ("parquet-mr", True), ("Parquet-MR Version 1", True),
    (" parquet-mr version v1.2.8", True), ("parquet-mr version 1.2.9", False),
    ("parquet-mr version 1.12.3 (build abc)", False), ("parquet-mr v 1.2.8", False),
    ("parquet-mr-x version 1.2.8", False), ("parquet-cpp-arrow version 1.0.0", False),
    (None, False),
])  # fmt: skip
def test_the_span_of_a_chunk_is_arrows(created_by: str | None, padded: bool) -> None:
    """Arrow's PARQUET-816 rule: 100 bytes more for parquet-mr before 1.2.9 (a version it
    cannot read counts as 0.0.0; "1.2-cdh9.9" is 1.2.0), within the file: as pyarrow 26 reads
    finding 4's file with each string (upper case: pyarrow does not pad, this does)."""
    data = _list_file([3, 4], np.zeros(7))
    chunk = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0).column(0)
    start, end = parquet_read._span(chunk, created_by, 1 << 30)
    assert end - start == chunk.total_compressed_size + (100 if padded else 0)
    assert parquet_read._span(chunk, created_by, end - 60 if padded else 1 << 30)[1] == (
        end - 100 if padded else end) + (40 if padded else 0)


@pytest.mark.parametrize("tail", [
    [(1, 1000, b"\x01\x00")],  # a bit-packed run of 1,000 groups with two bytes there
    [(0, 1, b"\x00"), (0, 10**6, b"\x01")],  # a row of 1,000,001 levels past the count
    [(0, 1, b"")],  # a run's header without its level
])  # fmt: skip
def test_hostile_runs_after_rows_read_in_bulk(tail: list[tuple[int, int, bytes]]) -> None:
    """Rows of five levels read in bulk (200 of them), then a run cut short, levels past the
    page's count, or a header alone: the longest row is the reference's, each time (a level
    past the count never counts; the rows before a cut always do)."""
    row = [(1, 1, b"\x1e"), (0, 2, b"\x01")]  # (0, 1, 1, 1, 1, 0, 0, 0: a bit-packed group)
    levels = _hybrid(row * 200, 1) + _hybrid(tail, 1)
    n = 200 * 10 + (8 if tail[0][0] else 1)
    want, cut = _longest_levels(levels, 1, n)
    rows = parquet_read._Rows(1 << 40)
    try:
        parquet_read._levels(rows, levels, 1, n)
    except IndexError:
        assert cut
    assert rows.done() == want and want < 1000
