"""The windows of a batch computed at record time from its row groups as written (win40): they
are those computed from the step file read back, over the Arrow types a written row group may
have (dictionaries, large and fixed-size lists, nulls at any depth, chunked and sliced arrays,
structs of a Dict space, several row groups, several read batches a row group), and the step
file is read back whenever the arrays cannot be shown to be those the file gives."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajledger.ledger import episode_features, record_windows
from trajledger.ledger.episode_features import parquet_batches
from trajledger.ledger.record_windows import Written
from trajledger.ledger.rollouts.parquet_io import parquet_writer
from trajledger.ledger.step_windows import WINDOW_COLUMNS
from trajledger.ledger.text_fingerprint import NORMALISED_COLUMNS, Pairs
from trajledger.ledger.window_cache import compute, encode

STEPS = 600
"""Steps of each case: episodes of 40 to 90 steps, some of them copies of others' runs."""


def _episodes(rng: np.random.Generator) -> list[str]:
    ids, at = [], 0
    while at < STEPS:
        n = min(int(rng.integers(40, 90)), STEPS - at)
        ids += [f"ep-{len(set(ids))}"] * n
        at += n
    return ids


def _values(rng: np.random.Generator, width: int) -> np.ndarray:
    walk = np.cumsum(rng.normal(size=(STEPS, width)), axis=0).astype(np.float32)
    walk[300:330] = walk[100:130]  # a shared run of 30 steps between two episodes
    walk[400:420] = 1.0  # a run standing still (few distinct steps)
    return walk


def _nulls(arr: pa.Array, rows: list[int]) -> pa.Array:
    """``arr`` with the slots ``rows`` null, the values under them kept (as a caller's own
    array may have them: a file read back has none)."""
    mask = np.zeros(len(arr), dtype=bool)
    mask[rows] = True
    if pa.types.is_struct(arr.type):
        return pa.StructArray.from_arrays([arr.field(i) for i in range(arr.type.num_fields)],
                                          fields=list(arr.type), mask=pa.array(mask))
    offsets = arr.offsets
    cls = pa.LargeListArray if pa.types.is_large_list(arr.type) else pa.ListArray
    return cls.from_arrays(offsets, arr.values, mask=pa.array(mask))


def _cases() -> dict[str, tuple[pa.Table, str | None]]:
    """Per case: its step table and the column whose arrays the fast path must not take (it
    reads the file when that column is read, and still decides as from it), or None."""
    rng = np.random.default_rng(40)
    ids = pa.array(_episodes(rng))
    v4, v1 = _values(rng, 4), _values(rng, 1)
    flat4 = pa.array(v4.ravel())
    lists = pa.ListArray.from_arrays(pa.array(np.arange(0, 4 * STEPS + 1, 4, dtype=np.int32)),
                                     flat4)
    large = pa.LargeListArray.from_arrays(pa.array(np.arange(0, 4 * STEPS + 1, 4)),
                                          pa.array(v4.ravel().astype(np.float64)))
    fixed = pa.FixedSizeListArray.from_arrays(flat4, 4)
    nested = pa.ListArray.from_arrays(
        pa.array(np.arange(0, 2 * STEPS + 1, 2, dtype=np.int32)),
        pa.ListArray.from_arrays(pa.array(np.arange(0, 4 * STEPS + 1, 2, dtype=np.int32)), flat4))
    leaf_nulls = pa.ListArray.from_arrays(
        lists.offsets, pa.array(v4.ravel(), mask=np.arange(4 * STEPS) % 37 == 5))
    struct = pa.StructArray.from_arrays([lists, pa.array(v1.ravel())], names=["pos", "speed"])
    text = pa.array([f"say {i % 7}" for i in range(STEPS)])

    def table(obs: pa.Array | pa.ChunkedArray, eids: pa.Array | pa.ChunkedArray = ids,
              **more: pa.Array) -> pa.Table:
        return pa.table({"episode_id": eids, "obs": obs, **more})

    def chunked(arr: pa.Array) -> pa.ChunkedArray:
        return pa.chunked_array([arr.slice(0, 123), arr.slice(123, 1), arr.slice(124)])

    offset = pa.concat_arrays([lists.slice(0, 7), lists]).slice(7)  # sliced: offset 7
    return {
        "list float32": (table(lists), None),
        "large list float64": (table(large), None),
        "fixed-size list": (table(fixed), None),
        "nested lists (a matrix)": (table(nested), None),
        "null values in a list": (table(leaf_nulls), None),
        "a number a step": (table(pa.array(v1.ravel())), None),
        "a number a step, nulls": (table(pa.array(v1.ravel(), mask=np.arange(STEPS) % 9 == 0)),
                                   None),
        "integers": (table(pa.ListArray.from_arrays(
            lists.offsets, pa.array((v4 * 10).astype(np.int16).ravel()))), None),
        "Dict space (struct)": (table(struct), None),
        "chunked columns": (table(chunked(lists), chunked(ids)), None),
        "a sliced array": (table(offset), None),
        "field and schema metadata": (table(lists).replace_schema_metadata({"k": "v"}).cast(
            pa.schema([pa.field("episode_id", pa.string()), pa.field(
                "obs", lists.type, metadata={"shape": "[4]"})], metadata={"k": "v"})), None),
        "large string ids": (table(lists, ids.cast(pa.large_string())), None),
        "dictionary ids": (table(lists, ids.dictionary_encode()), "episode_id"),
        "null list slots": (table(_nulls(lists, [3, 200, 201, 599])), "obs"),
        "null struct slots": (table(_nulls(struct, [0, 77])), "obs"),
        "texts": (table(lists, role=pa.array(["user"] * STEPS), content=text), None),
    }


def _written(path: Path, table: pa.Table, group_rows: int) -> Written:
    """Write ``table`` as the recorder does (its writer, row groups of ``group_rows`` rows),
    handing each group to a `Written` as `write_steps_parquet` hands it."""
    written = Written()
    with parquet_writer(path, table.schema) as writer:
        for lo in range(0, table.num_rows, group_rows):
            group = table.slice(lo, group_rows)
            written.add(group)
            writer.write_table(group, row_group_size=group_rows)
    return written


@pytest.mark.parametrize("group_rows", [STEPS, 250, 77])
def test_the_row_groups_as_written_are_read_as_the_step_file_is(
    tmp_path: Path, group_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per case: the batches the fast path gives are those `parquet_batches` reads of the file
    (schema, field metadata, values, cuts), or the file's own; `compute` from them gives the
    same windows, marks and text fingerprints byte for byte; and the fast path is taken
    wherever the arrays are plain (else the test would compare the file with itself)."""
    monkeypatch.setattr(record_windows, "_BATCH_ROWS", 100)  # several read batches a group
    monkeypatch.setattr("trajledger.ledger.rollouts.parquet_read.iter_parquet.__defaults__",
                        (None, 100))
    for name, (table, slow) in _cases().items():
        path = tmp_path / f"{name}-{group_rows}.parquet"
        written = _written(path, table, group_rows)
        for columns in (WINDOW_COLUMNS, NORMALISED_COLUMNS):
            want = list(parquet_batches(path, columns))
            got = record_windows._as_read(written.groups or [], path, columns)
            assert (got is None) == (slow in columns), name
            if got is not None:
                assert [b.num_rows for b in got] == [b.num_rows for b in want], name
                for a, b in zip(got, want, strict=True):
                    assert a.schema.equals(b.schema, check_metadata=True), name
                    assert a.equals(b), name
        for wanted in ((False, True, False), (True, True, False), (False, True, True)):
            slow = compute(path, wanted)
            quick = compute(path, wanted, written.read)
            assert encode(quick, "sha256:" + "0" * 64) == encode(slow, "sha256:" + "0" * 64), name
            assert slow.windows is not None and len(slow.windows.hashes), name


def test_a_batch_over_the_bound_or_its_bytes_holds_nothing(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Columns past `RECORD_STEPS` rows or `chunks.CHUNK_BYTES` are not held (memory), and
    the file is read instead; a file not written from the groups held (another row count) is
    read too."""
    table = _cases()["list float32"][0]
    monkeypatch.setattr(record_windows, "RECORD_STEPS", STEPS - 1)
    assert _written(tmp_path / "a.parquet", table, 250).groups is None
    monkeypatch.setattr(record_windows, "RECORD_STEPS", STEPS)
    monkeypatch.setattr(record_windows, "CHUNK_BYTES", 1000)
    assert _written(tmp_path / "b.parquet", table, 250).groups is None
    monkeypatch.setattr(record_windows, "CHUNK_BYTES", 64 << 20)
    written = _written(tmp_path / "c.parquet", table, 250)
    assert written.groups is not None
    pq.write_table(table.slice(1), tmp_path / "d.parquet")
    assert record_windows._as_read(written.groups, tmp_path / "d.parquet", WINDOW_COLUMNS) is None
    assert [b.num_rows for b in written.read(tmp_path / "d.parquet", WINDOW_COLUMNS)] == [
        STEPS - 1]


def _rows(episode: str, obs: list[object]) -> list[dict[str, object]]:
    return [{"episode_id": episode, "step": t, "obs": o, "action": [0.0], "reward": 1.0,
             "terminated": t == len(obs) - 1, "truncated": False} for t, o in enumerate(obs)]


def test_record_keeps_from_its_row_groups_what_the_step_file_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``record_batch`` computes the windows from its row groups (the step file never read
    back: reading it fails here) for vectors, a Dict space, an image, a clock column, a text
    episode; each file kept is, byte for byte, what `window_cache.compute` gives from the
    stored step file, as ``dataset create`` computes it."""
    from trajledger import Ledger
    from trajledger.ledger.artifacts import record_batch, register_environment
    from trajledger.ledger.batch_features import batch_files
    from trajledger.ledger.window_cache import cache_file

    ledger = Ledger.open(Ledger.init(tmp_path / "home", origin="test/record-windows").root)
    key = ledger.keys.create("vendor", encrypt=False)
    register_environment(ledger, "grid", "1", key)
    register_environment(ledger, "chat", "1", key)
    rng = np.random.default_rng(7)
    walk = np.cumsum(rng.normal(size=(80, 4)), axis=0)
    image = list(rng.integers(0, 255, size=(40, 12, 12, 3)).astype(np.uint8))
    batches = {
        "vector": _rows("v", [[float(x) for x in r] for r in walk]),
        "dict": _rows("d", [{"pos": [float(x) for x in r[:2]], "vel": [float(x) for x in r[2:]]}
                            for r in walk]),
        "image": _rows("i", image),
        "clock": _rows("c", [[float(x) for x in r] + [float(t)] for t, r in enumerate(walk)]),
    }
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"episode_id": "t", "messages": [{"role": "user", "content": "Hello there"},'
                    ' {"role": "assistant", "content": "General Kenobi"}]}\n')

    def unread(*_args: object) -> None:
        raise AssertionError("the step file was read back")

    kept = 0
    for name, source in [*batches.items(), ("text", [chat])]:
        with monkeypatch.context() as m:
            m.setattr(episode_features, "iter_parquet", unread)
            digest = record_batch(ledger, source, env="chat@1" if name == "text" else "grid@1",
                                  policy="p", signer=key, name=name).recorded.digest
        steps = batch_files(ledger.store, digest)["steps.parquet"]
        want = encode(compute(ledger.store.path_of(steps), (name == "text", name != "text",
                                                            False)), steps)
        assert want is not None
        assert cache_file(ledger.root / "index" / "features", steps).read_bytes() == want, name
        kept += 1
    assert kept == 5


def _chat(n: int) -> str:
    """A chat record of its own kind by ``n``: tool calls, a system prompt, an empty content,
    Unicode the normalisation folds, a message with no text."""
    import json

    kinds = [
        [{"role": "user", "content": f"Ｈｅｌｌｏ {n}"}, {"role": "assistant", "content": "Hi"}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"q{n}"}],
        [{"role": "system", "content": "only a system prompt"}],
        [{"role": "user", "content": ""}, {"role": "assistant", "content": None,
          "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]},
         {"role": "tool", "content": f"result {n % 3}"}],
        [{"role": "user", "content": f"same {n % 2}"}],
    ]
    return json.dumps({"episode_id": f"c{n}", "messages": kinds[n % len(kinds)]})


@pytest.mark.parametrize("bound", [1, 16_384])
def test_a_text_batch_of_any_size_takes_the_workers_fingerprints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: int
) -> None:
    """A chat file read by the reader's workers (``ReaderOptions(workers=2)``): the normalised
    fingerprints are computed there beside the features (`given_features`), so that a batch
    over `RECORD_STEPS` (``bound`` 1) keeps them too, nothing read back; the file kept is, byte
    for byte, what `window_cache.compute` gives from the stored step file. A chunk the workers
    gave no fingerprints for (its features not taken) leaves them to the file again."""
    from trajledger import Ledger
    from trajledger.ledger.artifacts import record_batch, register_environment
    from trajledger.ledger.batch_features import batch_files
    from trajledger.ledger.rollouts import readers
    from trajledger.ledger.rollouts.chunks import ReaderOptions
    from trajledger.ledger.window_cache import cache_file

    ledger = Ledger.open(Ledger.init(tmp_path / "home", origin="test/record-windows").root)
    key = ledger.keys.create("vendor", encrypt=False)
    register_environment(ledger, "chat", "1", key)
    real = readers.iter_rollout_chunks
    monkeypatch.setattr(readers, "iter_rollout_chunks", lambda *a, **k: real(
        *a, **k, process_min_bytes=0))
    monkeypatch.setattr(record_windows, "RECORD_STEPS", bound)
    for run, lines in enumerate((400, 3)):
        chat = tmp_path / f"chat{run}.jsonl"
        chat.write_text("".join(_chat(n) + "\n" for n in range(run * 1000, run * 1000 + lines)))
        with monkeypatch.context() as m:
            m.setattr(episode_features, "iter_parquet", lambda *_a: (_ for _ in ()).throw(
                AssertionError("the step file was read back")))
            digest = record_batch(ledger, [chat], env="chat@1", policy="p", signer=key,
                                  options=ReaderOptions(workers=2)).recorded.digest
        steps = batch_files(ledger.store, digest)["steps.parquet"]
        want = encode(compute(ledger.store.path_of(steps), (True, False, False)), steps)
        assert want is not None
        assert cache_file(ledger.root / "index" / "features", steps).read_bytes() == want
    # The workers' features not taken for a chunk: no fingerprints from them either.
    real_given = record_windows.Written.given

    def without(self: Written, then: Callable[[Any], None]) -> Callable[[Any], None]:
        both = real_given(self, then)
        return lambda got: both(dataclasses.replace(got, normalised=None) if isinstance(
            got, record_windows.Given) else got)

    monkeypatch.setattr(record_windows.Written, "given", without)
    chat = tmp_path / "chat-none.jsonl"
    chat.write_text("".join(_chat(n) + "\n" for n in range(5000, 5040)))
    digest = record_batch(ledger, [chat], env="chat@1", policy="p", signer=key,
                          options=ReaderOptions(workers=2)).recorded.digest
    steps = batch_files(ledger.store, digest)["steps.parquet"]
    where = cache_file(ledger.root / "index" / "features", steps)
    assert where.exists() == (bound > 40)  # read back from the file under the bound only


def test_what_fails_to_be_derived_fails_nothing_else(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Derived data is never a reason to fail: an Arrow error showing the row groups to be the
    file's reads the file; one computing a block's fingerprints in a worker gives its features
    without them (the block, and the record, go on)."""
    from trajledger.ledger import text_fingerprint
    from trajledger.ledger.batch_features import whole_episode_features
    from trajledger.ledger.rollouts.readers import iter_rollout_chunks

    table = _cases()["list float32"][0]
    written = _written(tmp_path / "a.parquet", table, 250)

    def arrow_fails(*_args: object) -> None:
        raise pa.ArrowNotImplementedError("no such cast")

    monkeypatch.setattr(record_windows, "_as_read", arrow_fails)
    assert [b.num_rows for b in written.read(tmp_path / "a.parquet", WINDOW_COLUMNS)] == [
        250, 250, 100]
    chat = tmp_path / "chat.jsonl"
    chat.write_text("".join(_chat(n) + "\n" for n in range(20)))
    steps = next(iter(iter_rollout_chunks(chat))).steps
    assert isinstance(steps, pa.RecordBatch)
    got = record_windows.given_features(steps)
    assert got is not None and got.normalised is not None and any(got.normalised)
    monkeypatch.setattr(text_fingerprint, "normalised_fingerprints", arrow_fails)
    got = record_windows.given_features(steps)
    assert got is not None and got.normalised is None
    want = whole_episode_features(steps)
    assert want is not None and got.features.episode_ids == want.episode_ids
    assert (got.features.vectors == want.vectors).all()


_NUMBERS = [pa.float32(), pa.float64(), pa.float16(), pa.int8(), pa.int64(), pa.uint8(),
            pa.uint64(), pa.bool_()]


def _numbers(rng: np.random.Generator, n: int, t: pa.DataType, odd: bool) -> pa.Array:
    """``n`` values of type ``t``, a walk; ``odd``: some -0.0, infinities and NaNs, some with a
    payload (bits a file keeps or not: BYTE_STREAM_SPLIT floats, dictionary integers)."""
    if pa.types.is_boolean(t):
        return pa.array(rng.integers(0, 2, n).astype(bool))
    dtype = t.to_pandas_dtype()
    if pa.types.is_integer(t):
        info = np.iinfo(dtype)
        return pa.array(np.cumsum(rng.integers(-3, 4, n)).clip(info.min, info.max).astype(dtype))
    v = np.cumsum(rng.normal(size=n)).astype(dtype)
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[v.itemsize]
    for i in rng.integers(0, n, n // 8 if odd else 0):
        v[i] = rng.choice([-0.0, np.inf, -np.inf, np.nan])
        if np.isnan(v[i]):
            v.view(bits)[i] |= bits(int(rng.integers(1, 64)))  # a payload
    return pa.array(v, type=t)


def _masked(rng: np.random.Generator, arr: pa.Array, p: float) -> pa.Array:
    """``arr`` with a share ``p`` of its slots null, the values under them kept."""
    if not p or not len(arr):
        return arr
    mask = pa.array(rng.random(len(arr)) < p)
    t = arr.type
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays([arr.field(i) for i in range(t.num_fields)],
                                          fields=list(t), mask=mask)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        return cls.from_arrays(arr.offsets, arr.values, mask=mask)
    return pa.array(arr.to_numpy(zero_copy_only=False), type=t, mask=mask.to_numpy(
        zero_copy_only=False))


def _observations(rng: np.random.Generator, n: int, shape: str, t: pa.DataType, odd: bool,
                  leaf: float, slot: float) -> pa.Array:
    def lists(k: int, width: int, cls: type = pa.ListArray) -> pa.Array:
        return cls.from_arrays(pa.array(np.arange(0, k * width + 1, width, dtype=(
            np.int64 if cls is pa.LargeListArray else np.int32))),
            _masked(rng, _numbers(rng, k * width, t, odd), leaf))

    width = int(rng.integers(2, 6))
    if shape == "number":  # (its nulls are its slots')
        return _masked(rng, _numbers(rng, n, t, odd), max(leaf, slot))
    elif shape == "list":
        got = lists(n, width)
    elif shape == "large list":
        got = lists(n, width, pa.LargeListArray)
    elif shape == "fixed-size list":  # (no null slot: the reader's ValueError, rev38 finding)
        return pa.FixedSizeListArray.from_arrays(
            _masked(rng, _numbers(rng, n * width, t, odd), leaf), width)
    elif shape == "ragged":
        ends = np.concatenate(([0], np.cumsum(rng.integers(0, 4, n)))).astype(np.int32)
        got = pa.ListArray.from_arrays(pa.array(ends), _masked(rng, _numbers(
            rng, int(ends[-1]), t, odd), leaf))
    elif shape == "matrix":
        got = pa.ListArray.from_arrays(pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32)),
                                       lists(2 * n, width))
    else:  # a Dict space: a struct of a vector and a number, or a list of such structs
        k = n if shape == "struct" else 2 * n
        got = pa.StructArray.from_arrays(
            [lists(k, width), _masked(rng, _numbers(rng, k, t, odd), leaf)], names=["p", "v"])
        if shape == "list of structs":
            got = pa.ListArray.from_arrays(pa.array(np.arange(0, k + 1, 2, dtype=np.int32)), got)
    return _masked(rng, got, slot)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 200),
       shape=st.sampled_from(["number", "list", "large list", "fixed-size list", "ragged",
                              "matrix", "struct", "list of structs"]),
       t=st.sampled_from(_NUMBERS), odd=st.booleans(), leaf=st.sampled_from([0, 0, 0.05, 0.5]),
       slot=st.sampled_from([0, 0, 0.05]), ids=st.sampled_from(["string", "large", "dict"]),
       offset=st.integers(0, 5), chunks=st.integers(1, 4), group_rows=st.integers(1, 320))
def test_the_windows_from_the_row_groups_are_those_of_the_file_drawn(
    tmp_path_factory: pytest.TempPathFactory, seed: int, n: int, shape: str, t: pa.DataType,
    odd: bool, leaf: float, slot: float, ids: str, offset: int, chunks: int, group_rows: int,
) -> None:
    """rev38, differential: a step table drawn (observations of any shape a step file holds,
    of eight number types, -0.0, infinities, NaNs with payloads, nulls with values under them
    in leaves and slots, episode ids of three string types, a slice's offset, chunked columns,
    row groups of 1 to 320 rows), written as the recorder writes it: what `compute` gives from
    the row groups held (`Written`) is, byte for byte, what it gives from the file read back,
    the windows and their orders (one run outside the suite: 1,500 examples, 803 from the row
    groups and 697 from the file, as `_as_read` decided; none differed)."""
    rng = np.random.default_rng(seed)
    lengths: list[int] = []
    while sum(lengths) < n:
        lengths.append(min(int(rng.integers(1, 80)), n - sum(lengths)))
    eids = pa.array([f"ep-{i}" for i, k in enumerate(lengths) for _ in range(k)])
    eids = {"string": eids, "large": eids.cast(pa.large_string()),
            "dict": eids.dictionary_encode()}[ids]
    obs = _observations(rng, n, shape, t, odd, leaf, slot)
    if min(offset, n):
        obs = pa.concat_arrays([obs.slice(0, min(offset, n)), obs]).slice(min(offset, n))
    table = pa.table({"episode_id": eids, "obs": obs})
    cuts = [0, *sorted({int(c) for c in rng.integers(0, n + 1, chunks - 1)}), n]
    table = pa.concat_tables([table.slice(a, b - a) for a, b in itertools.pairwise(cuts)])
    path = tmp_path_factory.mktemp("drawn") / "steps.parquet"
    written = _written(path, table, group_rows)
    for wanted in ((False, True, False), (False, True, True)):
        slow = encode(compute(path, wanted), "sha256:" + "0" * 64)
        assert encode(compute(path, wanted, written.read), "sha256:" + "0" * 64) == slow


def _feature_chunk(modality: list[str], num_steps: list[int]) -> episode_features.FeatureChunk:
    n = len(modality)
    return episode_features.FeatureChunk(
        [f"ep-{i}" for i in range(n)], np.array(num_steps, dtype=np.int64), ["ab" * 32] * n,
        modality, np.zeros((n, 128), dtype=np.float32), np.zeros(n, dtype=bool), [None] * n)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["text", "numeric"]), st.integers(1, 40)),
                max_size=40), st.integers(1, 7))
def test_the_parts_compared_are_read_from_two_columns_as_from_the_whole_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, episodes: list[tuple[str, int]],
        rows: int) -> None:
    """`record_windows.computed` learns which parts to compare from the features file's
    modality and step counts alone, a record batch at a time (chat41: decoding the whole file
    of a 2 GiB chat batch took about 1.8 GiB); the same parts as the whole file decoded."""
    from trajledger.ledger import batch_features
    from trajledger.ledger.window_cache import compared_parts

    monkeypatch.setattr(batch_features, "ROWS_PER_BATCH", rows)
    chunk = _feature_chunk([m for m, _ in episodes], [n for _, n in episodes])
    steps = "sha256:" + "cd" * 32
    (path := tmp_path / "f.arrow").write_bytes(batch_features.encode_features(chunk, steps))
    want = compared_parts(batch_features.decode_features(path.read_bytes(), steps))
    assert record_windows._parts(path, steps) == want
    with pytest.raises(batch_features.FormatError):
        record_windows._parts(path, "sha256:" + "ef" * 32)


def test_a_large_batchs_features_file_is_not_read_whole_to_choose_its_parts(
        tmp_path: Path) -> None:
    """A text batch over `RECORD_STEPS` steps with the workers' fingerprints: `computed` reads
    two columns of its features file, not the file (its peak of Python allocations was the
    file's size, and its decoding about twice more: chat41's 2 GiB run, 2,575 MiB)."""
    import tracemalloc

    from trajledger.ledger import batch_features

    n = 40_000
    chunk = _feature_chunk(["text"] * n, [3] * n)
    steps = "sha256:" + "cd" * 32
    (path := tmp_path / "f.arrow").write_bytes(batch_features.encode_features(chunk, steps))
    written = Written()
    written.normalised = Pairs()
    written.normalised.add([f"ep-{i}" for i in range(n)], ["00" * 32] * n)
    tracemalloc.start()
    try:
        got = record_windows.computed(tmp_path / "steps.parquet", path, steps,
                                      record_windows.RECORD_STEPS + 1, written)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got is written.normalised
    assert path.stat().st_size > 20_000_000
    assert peak < path.stat().st_size // 10


def test_the_workers_fingerprints_are_held_as_bytes_while_a_text_batch_is_recorded(
        tmp_path: Path) -> None:
    """`Written.given` held each text episode's normalised fingerprint as a tuple of two
    Python strings, about 230 bytes (chat42: 220 MiB of a 2 GiB chat file's 982,200 episodes,
    the most of what the recording process held that grew with the file), then `kept` encoded
    them from that list: the peak of Python allocations, from the first chunk the workers give
    to the cache file kept, is now under 150 bytes an episode (measured: held 48, peak 104;
    before, 234 and 436), and the file the same."""
    import hashlib
    import tracemalloc

    from trajledger.ledger import batch_features, window_cache

    n, size = 40_000, 2_000
    steps = "sha256:" + "cd" * 32
    features = tmp_path / "f.arrow"
    features.write_bytes(batch_features.encode_features(_feature_chunk(["text"] * n, [3] * n),
                                                        steps))
    chunk = _feature_chunk(["text"] * size, [3] * size)
    written = Written()
    hook = written.given(lambda _features: None)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for c in range(n // size):  # each chunk's strings new, as unpickled from a worker
            ids = [f"ep-{c * size + i}" for i in range(size)]
            fps = [hashlib.sha256(e.encode()).hexdigest() for e in ids]
            hook(record_windows.Given(dataclasses.replace(chunk, episode_ids=ids), fps))
            del ids, fps
        held = tracemalloc.get_traced_memory()[0] - base
        got = record_windows.computed(tmp_path / "steps.parquet", features, steps,
                                      record_windows.RECORD_STEPS + 1, written)
        assert got is not None
        window_cache.keep(tmp_path / "cache", steps, got)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert held < 80 * n and peak < 150 * n
    kept, why = window_cache.read_kept(tmp_path / "cache", steps, (True, False, False))
    assert why == "" and kept is not None and kept.normalised == [
        (f"ep-{i}", hashlib.sha256(f"ep-{i}".encode()).hexdigest()) for i in range(n)]
