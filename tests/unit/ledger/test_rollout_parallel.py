"""The parallel JSON-lines reader decides as the reader in line, and its workers compute the
episode features of the steps written (issue 21 item 5).

`reader_process.iter_jsonl_parallel` parses and maps blocks of lines in worker processes; what
depends on the lines before (line numbers, repeated ids, the cap on problems listed per kind,
blank-line and line-length limits, undecodable data, the cut of chunks) is decided in the
parent. For random mixes of good records, bad JSON, mistyped fields, repeated ids and blank
lines, cut into tiny blocks, both readers yield the same chunks and raise the same problems; so
do the refusals of the whole file (a line too long, too many blank lines, corrupt zstd).

The comparisons start their pools' workers from a preloaded fork server (tests/preforked.py:
what a worker decides does not depend on how it was started, and a ``spawn`` start costs each
of the two dozen workers 0.3 to 0.6 CPU-s of imports); the large file's recording starts them
as the reader does, with ``spawn``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import preforked
import pyarrow as pa
import pytest
import zstandard
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from trajledger.ledger.batch_features import FeatureRecorder, whole_episode_features
from trajledger.ledger.episode_features import FeatureChunk
from trajledger.ledger.rollouts import chat, idset, jsonl, reader_process
from trajledger.ledger.rollouts.chunks import ReaderOptions, RolloutChunk
from trajledger.ledger.rollouts.idset import IdSet
from trajledger.ledger.rollouts.parquet_io import write_steps_parquet
from trajledger.ledger.rollouts.problems import RolloutValidationError
from trajledger.ledger.rollouts.readers import _iter_jsonl, iter_rollout_chunks


def good(n: int, eid: str | None = None) -> str:
    record: dict[str, Any] = {
        "messages": [
            {"role": "user", "content": f"question {n} " * (n % 7)},
            {"role": "assistant", "content": f"answer {n}", "tool_calls": [{"id": f"c{n}"}]},
        ],
        "reward": n / 7,
        "judge_scores": {"a": 1.0},
    }
    if eid is not None:
        record["episode_id"] = eid
    return json.dumps(record)


LINES = {
    "good": lambda n: good(n),
    "named": lambda n: good(n, f"ep-{n % 5}"),  # repeats: ids given twice
    "bad json": lambda n: '{"messages": [',
    "not an object": lambda n: "[1, 2]",
    "mistyped": lambda n: json.dumps({"messages": [{"role": 3, "content": "x"}]}),
    "duplicate key": lambda n: '{"messages": [], "messages": []}',
    "nan": lambda n: '{"messages": [{"role": "user", "content": "x"}], "reward": NaN}',
    "blank": lambda n: "   ",
}


def outcome(chunks: Iterator[RolloutChunk]) -> tuple[list[Any], Any]:
    got: list[Any] = []
    try:
        for c in chunks:
            got.append((c.steps.to_pylist(), None if c.episodes is None else
                        c.episodes.to_pylist(), c.meta))  # fmt: skip
    except RolloutValidationError as e:
        return got, (e.subject, e.problems)
    return got, None


def both(path: Path, batch_rows: int = 5) -> tuple[Any, Any]:
    opts = ReaderOptions()
    return (
        outcome(_iter_jsonl(path, "chat-jsonl", batch_rows, opts)),
        outcome(reader_process.iter_jsonl_parallel(path, "chat-jsonl", batch_rows, opts, 2)),
    )


def preforked_start(method: str) -> Any:
    """The reader's ``multiprocessing.get_context``, with the preloaded fork server in place of
    the ``spawn`` start it asks for (module docstring)."""
    assert method == "spawn", method
    return preforked.context()


@pytest.fixture
def tiny_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader_process, "BLOCK_BYTES", 300)
    monkeypatch.setattr(reader_process, "_READ", 97)
    monkeypatch.setattr(
        reader_process, "multiprocessing", SimpleNamespace(get_context=preforked_start)
    )


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(kinds=st.lists(st.sampled_from(sorted(LINES)), min_size=0, max_size=60))
def test_random_mixes_decide_alike(tiny_blocks: None, tmp_path: Path, kinds: list[str]) -> None:
    path = tmp_path / "mix.jsonl"
    path.write_text("".join(LINES[k](n) + "\n" for n, k in enumerate(kinds)))
    inline, parallel = both(path)
    assert parallel == inline


def test_problems_over_the_cap_are_counted_alike(tiny_blocks: None, tmp_path: Path) -> None:
    """45 mistyped records (ROWS_PER_KIND is 20) and 30 repeated ids, spread over blocks."""
    lines = [LINES["mistyped"](n) if n % 2 else LINES["named"](n) for n in range(90)]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    inline, parallel = both(path)
    assert parallel == inline
    assert any("more like" in p.message for p in inline[1][1])


def test_refusals_of_the_whole_file_alike(
    tiny_blocks: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 400)
    monkeypatch.setattr(reader_process, "MAX_LINE_BYTES", 400)
    long_line = tmp_path / "long.jsonl"
    long_line.write_text("\n".join([good(n) for n in range(8)] + ["x" * 500, good(9)]) + "\n")
    inline, parallel = both(long_line)
    assert parallel == inline and "MAX_LINE_BYTES" in inline[1][1][-1].message
    monkeypatch.setattr(jsonl, "MAX_BLANK_BYTES", 50)
    monkeypatch.setattr(reader_process, "MAX_BLANK_BYTES", 50)
    blanks = tmp_path / "blank.jsonl"
    blanks.write_text("\n".join([good(1), " " * 30, good(2), " " * 30, good(3)]) + "\n")
    inline, parallel = both(blanks)
    assert parallel == inline and "MAX_BLANK_BYTES" in inline[1][1][-1].message
    data = zstandard.ZstdCompressor().compress(
        ("\n".join(good(n) for n in range(40)) + "\n").encode()
    )
    corrupt = tmp_path / "corrupt.jsonl.zst"
    corrupt.write_bytes(data[: len(data) // 2] + bytes(64) + data[len(data) // 2 :])
    inline, parallel = both(corrupt)
    assert parallel == inline and "zstd data" in inline[1][1][-1].message


def test_recording_a_large_file_gives_the_same_files(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(good(n) + "\n" for n in range(3000)))
    digests = []
    for threshold in (1 << 40, 0):  # in line, then in parallel
        out = tmp_path / f"out{threshold}"
        out.mkdir()
        chunks = iter_rollout_chunks(
            path, options=ReaderOptions(workers=2), process_min_bytes=threshold
        )
        stats = write_steps_parquet(chunks, out / "steps.parquet")
        digests.append((stats.steps_file.sha256, stats.episodes_file.sha256))
    assert digests[0] == digests[1]


# --------------------------------------------------------------------------------------------
# Memory: the compact id set (`idset.IdSet`) decides as a dict of ids, and the blocks in flight
# stay within their bound (issue 21 item 5: a 2 GiB chat file in at most 1 GiB). Each id-set
# test runs with Python's hash and with one that makes most ids collide, so that the exact
# confirmation decides and the batch proof `maybe_any` sends every batch to it.


@pytest.fixture(params=["hash", "colliding"])
def hashing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "colliding":
        monkeypatch.setattr(idset, "_hash", lambda s: len(s) % 3)
    return str(request.param)


@pytest.mark.parametrize("small", [5, IdSet.SMALL])
def test_idset_agrees_with_a_dict(
    hashing: str, small: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of up to 12 ids are small adds: with ``SMALL`` 5 they move into runs every few
    rounds, with the real bound they all stay in the dict; both decide as a dict."""
    monkeypatch.setattr(IdSet, "SMALL", small)
    rng = random.Random(7)
    model: dict[object, int] = {}
    ids = IdSet()
    for round_ in range(300):
        batch: list[object] = []
        for _ in range(rng.randint(0, 12)):
            eid: object = f"ep-{rng.randint(0, 400)}"
            if rng.random() < 0.05:
                eid = str(eid).encode() + b"\xff"  # not UTF-8: kept aside, as bytes
            batch.append(eid)
        strings = [e for e in batch if type(e) is str]
        if len(strings) == len(batch) and not ids.maybe_any(strings):
            # proved: none held and none twice
            assert not any(e in model for e in batch) and len(set(batch)) == len(batch)
        fresh = list(dict.fromkeys(e for e in batch if e not in model))
        for e in batch:
            assert ids.get(e) == model.get(e)
            assert (e in ids) == (e in model)
        ids.add(fresh, [round_] * len(fresh))
        model.update((e, round_) for e in fresh)
        assert len(ids) == len(model)
    for n in range(401):
        assert ids.get(f"ep-{n}") == model.get(f"ep-{n}")
    assert bool(ids._runs) == (small == 5)  # the runs were used, or the dict alone


def test_parallel_reader_decides_alike_with_colliding_ids(
    hashing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_process, "BLOCK_BYTES", 300)
    monkeypatch.setattr(
        reader_process, "multiprocessing", SimpleNamespace(get_context=preforked_start)
    )
    rng = random.Random(3)
    kinds = ["good", "named", "named", "bad json", "mistyped", "blank"]
    lines = [LINES[rng.choice(kinds)](n) for n in range(160)]
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    opts = ReaderOptions()
    inline = outcome(_iter_jsonl(path, "chat-jsonl", 5, opts))
    parallel = outcome(reader_process.iter_jsonl_parallel(path, "chat-jsonl", 5, opts, 2))
    assert parallel == inline
    assert inline[1] is not None and any("already given on line" in p.message
                                         for p in inline[1][1])  # fmt: skip


class _CountingPool:
    """A pool that maps blocks in this process and counts the blocks handed out and not yet
    taken back: `reader_process.IN_FLIGHT` bounds them."""

    most = 0

    def __init__(self, **_: Any) -> None:
        self.out = 0

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        self.out += 1
        _CountingPool.most = max(_CountingPool.most, self.out)
        pool = self

        class _Taken(Future[Any]):
            def result(self, timeout: float | None = None) -> Any:
                pool.out -= 1
                return super().result(timeout)

        f = _Taken()
        f.set_result(fn(*args))
        return f

    def shutdown(self, **_: Any) -> None:
        pass


def test_blocks_in_flight_never_exceed_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_process, "BLOCK_BYTES", 200)
    monkeypatch.setattr(reader_process, "_READ", 97)
    monkeypatch.setattr(reader_process.cf, "ProcessPoolExecutor", _CountingPool)
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(LINES["good"](n) for n in range(120)) + "\n", encoding="utf-8")
    chunks = list(reader_process.iter_jsonl_parallel(path, "chat-jsonl", 7, ReaderOptions(), 2))
    assert sum(c.steps.num_rows for c in chunks) == 240
    assert _CountingPool.most == reader_process.IN_FLIGHT  # reached, never passed


# --------------------------------------------------------------------------------------------
# Episode features computed in the workers are those of the steps written. With
# ``ReaderOptions(features=...)`` each worker computes the features of its block's steps (whole
# records, so whole episodes), the parent slices them to the records it keeps, and each chunk
# carries the features of exactly its steps; `write_steps_parquet` hands them to the
# `FeatureRecorder` only when the step file stores the very columns they were computed from,
# and the recorder falls back to the row groups (first chunk) or to the stored step file (a
# later chunk) otherwise. Every way gives the features file the row groups give, byte for byte.

FEATURES = ReaderOptions(features=whole_episode_features)


def same(a: FeatureChunk, b: FeatureChunk) -> bool:
    return (
        a.episode_ids == b.episode_ids
        and a.fingerprints == b.fingerprints
        and a.modality == b.modality
        and a.safety == b.safety
        and np.array_equal(a.num_steps, b.num_steps)
        and np.array_equal(a.valid, b.valid)
        and a.vectors.tobytes() == b.vectors.tobytes()
    )


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(kinds=st.lists(st.sampled_from(sorted(LINES)), min_size=1, max_size=60))
def test_each_chunk_carries_the_features_of_its_steps(
    tiny_blocks: None, tmp_path: Path, kinds: list[str]
) -> None:
    """Good records, bad ones (dropped by the worker) and repeated ids (dropped by the parent)
    in tiny blocks: a chunk's features are those of its steps, or None, never others."""
    path = tmp_path / "mix.jsonl"
    path.write_text("".join(LINES[k](n) + "\n" for n, k in enumerate(kinds)))
    clean = all(k in ("good", "blank") for k in kinds)
    chunks: list[RolloutChunk] = []
    try:
        for c in reader_process.iter_jsonl_parallel(path, "chat-jsonl", 5, FEATURES, 2):
            chunks.append(c)
    except RolloutValidationError:
        assert not clean
    for c in chunks:
        if c.steps.num_rows == 0:
            continue
        expected = whole_episode_features(c.steps)
        assert expected is not None
        if clean:
            assert c.features is not None
        if c.features is not None:
            assert same(c.features, expected)


class _Counts:
    """Features reduced to step counts, sliced and joined as `FeatureChunk` is."""

    def __init__(self, num_steps: Any) -> None:
        self.num_steps = np.asarray(num_steps, dtype=np.int64)

    def slice(self, a: int, b: int) -> _Counts:
        return _Counts(self.num_steps[a:b])

    @staticmethod
    def concat(chunks: list[_Counts]) -> _Counts:
        return _Counts(np.concatenate([c.num_steps for c in chunks]))


def test_kept_features_refuse_ranges_that_cut_an_episode() -> None:
    chunk = RolloutChunk(pa.RecordBatch.from_pylist([{"step": s} for s in range(6)]))
    counts = _Counts([2, 1, 3])

    def kept(ranges: list[tuple[int, int]], features: Any = counts) -> Any:
        got = reader_process._kept_features([(chunk, ranges, [], features)])
        return None if got is None else got.num_steps.tolist()

    assert kept([(0, 2), (2, 1)]) == [2, 1]  # neighbouring ranges joined
    assert kept([(0, 2), (3, 3)]) == [2, 3]  # a record left out between
    assert kept([(0, 0), (3, 3), (6, 0)]) == [3]  # records without steps
    assert kept([(0, 1)]) is None  # half an episode
    assert kept([(1, 2)]) is None
    assert kept([(3, 4)]) is None  # past the end
    assert kept([(0, 2)], None) is None  # a block without features


def record(chunks: Any, out: Path, **options: Any) -> tuple[str, str, str, list[Any]]:
    """The steps, episodes and features digests of a recording (``options`` for
    `write_steps_parquet`), and what `given` received (None: features not known for a
    chunk)."""
    out.mkdir()
    recorder = FeatureRecorder(out)
    seen: list[Any] = []

    def given(f: Any) -> None:
        seen.append(f)
        recorder.given(f)

    steps = out / "steps.parquet"
    stats = write_steps_parquet(chunks, steps, on_steps=recorder.add, on_features=given,
                                **options)  # fmt: skip
    kept = recorder.finish(stats.steps_file.digest, steps)
    return stats.steps_file.sha256, stats.episodes_file.sha256, kept.sha256, seen


def test_recording_with_the_workers_features_gives_the_same_files(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(good(n) + "\n" for n in range(3000)))
    inline = record(iter_rollout_chunks(path, options=FEATURES, process_min_bytes=1 << 40),
                    tmp_path / "inline")  # fmt: skip
    parallel = record(
        iter_rollout_chunks(path, options=ReaderOptions(workers=2, features=whole_episode_features),
                            process_min_bytes=0),
        tmp_path / "parallel",
    )  # fmt: skip
    assert inline[:3] == parallel[:3]
    assert inline[3] and all(f is None for f in inline[3])  # in line: computed from row groups
    assert parallel[3] and all(f is not None for f in parallel[3])  # taken from the workers


def chunks_of(path: Path, cut: int) -> list[RolloutChunk]:
    """The in-line reader's chunks of ``path`` with the features of their steps attached."""
    out = []
    for c in iter_rollout_chunks(path, batch_rows=cut, process_min_bytes=1 << 40):
        f = whole_episode_features(c.steps) if c.steps.num_rows else None
        out.append(RolloutChunk(c.steps, c.episodes, c.meta, c.read, f))
    return out


def test_a_chunk_without_features_falls_back_to_the_row_groups_or_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(good(n) + "\n" for n in range(300)))
    plain = record(iter_rollout_chunks(path, process_min_bytes=1 << 40), tmp_path / "plain")
    given = chunks_of(path, 64)
    assert record(given, tmp_path / "given")[:3] == plain[:3]
    first = [RolloutChunk(given[0].steps, given[0].episodes, given[0].meta), *given[1:]]
    assert record(first, tmp_path / "first")[:3] == plain[:3]  # row groups from the start
    later = [*given[:2], RolloutChunk(given[2].steps, given[2].episodes), *given[3:]]
    assert record(later, tmp_path / "later")[:3] == plain[:3]  # the stored file, read again


def test_features_of_columns_changed_when_normalised_are_not_taken(tmp_path: Path) -> None:
    """A chunk whose steps the normaliser converts (here: without its optional columns) is
    written with other columns than its features saw: they are not handed on."""
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(good(n) + "\n" for n in range(50)))
    (chunk,) = chunks_of(path, 1 << 20)
    keep = ["episode_id", "step", "is_first", "is_last", "terminated", "truncated", "reward",
            "role", "content", "tool_calls"]  # fmt: skip
    narrow = chunk.steps.select(keep)
    plain = record([RolloutChunk(narrow, chunk.episodes, chunk.meta)], tmp_path / "plain")
    got = record([RolloutChunk(narrow, chunk.episodes, chunk.meta, None, chunk.features)],
                 tmp_path / "narrow")  # fmt: skip
    assert got[3] == [None] and got[:3] == plain[:3]


def test_a_worker_does_not_import_pandas() -> None:
    code = (
        "import sys\n"
        "from trajledger.ledger.rollouts import reader_process as rp\n"
        "rp._worker_start()\n"
        "import pyarrow as pa\n"
        "assert pa.array(['a', None]).to_pylist() == ['a', None]\n"
        "assert 'pandas' not in sys.modules\n"
        "import gc\n"
        "assert gc.get_threshold() == rp.GC_THRESHOLD\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# --------------------------------------------------------------------------------------------
# The features file a recording keeps is the same, byte for byte, whether the reader's workers
# computed the features (``ReaderOptions.features``, as ``record`` asks with workers) or the
# recorder computed them from the row groups written (the features off): for any mix of inputs
# of one batch, read in parallel or in line in either order, with records of other shapes
# (text, non-ASCII text, no text: numeric features, system prompts, tool calls, multi-part
# content, preference pairs: two episodes a record), blank lines and empty blocks, chunks cut
# by ``batch_rows`` inside a block, tiny row groups, and the recorder's text slices cut
# otherwise than the workers' (`episode_features.TEXT_SLICE`: each episode's vector from its
# own words).

CHAT = {
    "ascii": lambda n: json.dumps({"messages": [
        {"role": "user", "content": f"question {n} " * (n % 7)},
        {"role": "assistant", "content": f"Answer_{n} is {n * 3}"}], "reward": n / 7}),
    "unicode": lambda n: json.dumps({"messages": [
        {"role": "system", "content": "Sei höflich."},
        {"role": "user", "content": f"Größe {n} café 東京 " * (n % 3 + 1)},
        {"role": "assistant", "content": "naïve ÉCOLE"}], "reward": -0.0}, ensure_ascii=n % 2),
    "no text": lambda n: json.dumps({"messages": [
        {"role": "user", "content": ""}, {"role": "assistant", "content": None}], "reward": n}),
    "system only": lambda n: json.dumps({"messages": [
        {"role": "system", "content": f"only the system {n}"},
        {"role": "assistant", "content": "ok"}]}),
    "tools": lambda n: good(n),
    "named": lambda n: good(n, f"given-{n}"),
    "multi-part": lambda n: json.dumps({"messages": [
        {"role": "user", "content": [{"type": "text", "text": f"part {n}"}]},
        {"role": "assistant", "content": "x"}], "reward": 1}),
    "long": lambda n: json.dumps({"messages": [
        {"role": "user", "content": f"word{n} other " * 300},
        {"role": "assistant", "content": "short"}]}),
    "blank": lambda n: "   ",
}


def preference(n: int, kind: str) -> str:
    if kind == "blank":
        return ""
    return json.dumps({"prompt": f"which {n}?", "chosen": f"this one {n} " * (n % 4),
                       "rejected": f"nicht dieses {n} ü"})  # fmt: skip


def recorded(chunks: Any, out: Path, row_group_rows: int) -> tuple[str, str, str, list[Any]]:
    """`record` as `record_batch` writes: an episodes file, row groups, filled columns."""
    return record(chunks, out, episodes_path=out / "episodes.parquet",
                  row_group_rows=row_group_rows,
                  fill={"env_version": "sha256:" + "e" * 64, "policy_version": "p1"})  # fmt: skip


def batch_of(
    tmp_path: Path, files: list[tuple[bool, str, list[str]]], batch_rows: int, *,
    features: bool, monkeypatch: pytest.MonkeyPatch,
) -> Iterator[RolloutChunk]:
    """The chunks of one batch of ``files`` (parallel or not, chat or preference records of
    the kinds given), read as `artifacts.record_batch` reads several inputs."""
    from trajledger.ledger.rollouts import readers

    paths = []
    for i, (parallel, fmt, kinds) in enumerate(files):
        path = tmp_path / f"{'p' if parallel else 'i'}{i}.jsonl"
        if not path.exists():
            lines = [CHAT[k](n) if fmt == "chat" else preference(n, k)
                     for n, k in enumerate(kinds, 1000 * i)]  # (ids of its own)  # fmt: skip
            if not any(line.strip() for line in lines):
                lines.append(CHAT["tools"](len(lines)) if fmt == "chat" else preference(0, ""))
            path.write_text("".join(line + "\n" for line in lines))
        paths.append(path)
    real = readers.iter_rollout_chunks

    def per_file(path: Any, *args: Any, **kwargs: Any) -> Iterator[RolloutChunk]:
        parallel = Path(path).name.startswith("p")
        return real(path, *args, **kwargs, process_min_bytes=0 if parallel else 1 << 40)

    monkeypatch.setattr(readers, "iter_rollout_chunks", per_file)
    options = ReaderOptions(workers=2, features=whole_episode_features if features else None)
    return readers.iter_batch_inputs(paths, None, batch_rows, options=options)


def outcome_of(run: Any) -> tuple[str, Any]:
    try:
        return "recorded", run()
    except RolloutValidationError as e:
        return "refused", e.problems


FILES = st.lists(
    st.tuples(st.booleans(), st.sampled_from(["chat", "preference"]),
              st.lists(st.sampled_from(sorted(CHAT)), max_size=25)),
    min_size=1, max_size=3,
)  # fmt: skip


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(files=FILES, batch_rows=st.integers(1, 12), row_group_rows=st.sampled_from([1, 5, 4096]))
def test_the_workers_features_give_the_features_file_of_the_row_groups(
    tiny_blocks: None, tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch, files: list[tuple[bool, str, list[str]]], batch_rows: int,
    row_group_rows: int,
) -> None:
    from trajledger.ledger import episode_features

    tmp = tmp_path_factory.mktemp("given")
    monkeypatch.setattr(episode_features, "TEXT_SLICE", 64)  # (this process's slices only)

    def run(features: bool) -> Any:
        with monkeypatch.context() as m:
            chunks = batch_of(tmp, files, batch_rows, features=features, monkeypatch=m)
            return recorded(chunks, tmp / ("on" if features else "off"), row_group_rows)

    (how, on), (how_off, off) = outcome_of(lambda: run(True)), outcome_of(lambda: run(False))
    assert how == how_off, (on, off)
    event(how if how == "refused" else
          "recorded: " + ("row groups" if not on[3] or on[3][0] is None else
                          "the stored file" if None in on[3] else "the workers' features"))
    if how == "recorded":
        assert on[:3] == off[:3]  # the same step, episode and features files
        assert all(f is None for f in off[3])
        if files[0][0]:  # read in parallel first: the workers' features are taken
            assert on[3] and on[3][0] is not None
    else:
        assert on == off  # the same refusal


@pytest.mark.parametrize("order", [(True, False), (False, True), (True, True), (True, False, True)])
def test_inputs_read_in_parallel_and_in_line_give_the_same_features(
    tiny_blocks: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: tuple[bool, ...],
) -> None:
    """Parallel then in line: the first chunk in line has no features, so the features come
    from the stored step file; in line then parallel: from the row groups throughout."""
    kinds = sorted(CHAT) * 3
    files = [(parallel, "chat", kinds) for parallel in order]
    got = {}
    for features in (True, False):
        with monkeypatch.context() as m:
            chunks = batch_of(tmp_path, files, 7, features=features, monkeypatch=m)
            got[features] = recorded(chunks, tmp_path / str(features), 5)
    assert got[True][:3] == got[False][:3]
    seen = got[True][3]
    if order[0]:
        assert seen[0] is not None
        assert (None in seen) == (False in order)  # then read again from the stored file
    else:
        assert seen[0] is None


SPACES = [" ", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u2028", "\u3000", "\ufeff"]


def test_whitespace_around_and_instead_of_a_record_is_decided_alike(
    tiny_blocks: None, tmp_path: Path
) -> None:
    """JSON's four whitespace characters may stand around a line's object or make up a blank
    line; any other one refuses the line, around an object or alone, in both readers, with
    the same messages (commit 930a329: the in-line reader's rule)."""
    lines = []
    for n, space in enumerate(SPACES):
        lines += [space + good(n) + space, good(100 + n) + space, space * 3, space + "\t"]
    path = tmp_path / "spaces.jsonl"
    path.write_bytes("".join(line + "\n" for line in lines).encode())
    inline, parallel = both(path)
    assert parallel == inline
    refused = {p.message for p in inline[1][1]}
    assert any("not valid JSON" in m for m in refused), refused
    # Line by line, a file each (the problems listed are capped): the lines of JSON's space,
    # tab and CR pass or are blank; every line of any other character is refused, a line of
    # it alone too (a vertical tab or a form feed is no blank line).
    for space in SPACES:
        path.write_bytes("".join(line + "\n" for line in [
            space + good(1) + space, good(2) + space, space * 3, space + "\t", good(3)]).encode())
        inline, parallel = both(path)
        assert parallel == inline
        bad = set() if inline[1] is None else {p.line for p in inline[1][1]}
        assert bad == (set() if space in " \t\r" else {1, 2, 3, 4}), (repr(space), bad)


def assembled(blocks: list[tuple[int, bytes]], batch_rows: int) -> tuple[Any, ...]:
    """The parent's side of the parallel reader over blocks mapped in this process: each chunk
    (steps, episodes, bytes read, features), the problems, whether a record was seen, and the
    line kept with each id."""
    assembly = reader_process._Assembly(Path("mix.jsonl"), "chat-jsonl", batch_rows)
    got: list[Any] = []
    for n, (first, data) in enumerate(blocks):
        assembly.read = n
        for c in assembly.take(reader_process._map_block("chat-jsonl", FEATURES, first, data)):
            assert c.episodes is not None
            features = None if c.features is None else (c.features.episode_ids,
                                                         c.features.fingerprints)  # fmt: skip
            got.append((c.steps.to_pylist(), c.episodes.to_pylist(), c.read, features))
    ids = [(f"ep-{n}", assembly.ids.get(f"ep-{n}")) for n in range(5)]
    return got, assembly.c.problems(), assembly.seen, assembly.rows, assembly.text, ids


@settings(max_examples=300, deadline=None)
@given(
    kinds=st.lists(st.sampled_from([*sorted(LINES), *["good"] * 8]), max_size=40),
    cuts=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    batch_rows=st.integers(0, 9),
    text_bytes=st.sampled_from([1, 40, 1 << 26, 1 << 26, 1 << 26]),
)
def test_clean_blocks_are_assembled_as_records_one_by_one(
    kinds: list[str], cuts: list[int], batch_rows: int, text_bytes: int
) -> None:
    """`_Assembly._take_clean` (a block with no problem, blank line or repeated id) gives the
    chunks, cuts (by steps and by text), features, problems and ids of `take`'s loop over its
    records, for random mixes of good and bad lines cut into blocks of a few lines."""
    lines = [LINES[k](n) + "\n" for n, k in enumerate(kinds)]
    blocks, at = [], 0
    while at < len(lines):
        n = cuts[len(blocks) % len(cuts)]
        blocks.append((at + 1, "".join(lines[at : at + n]).encode()))
        at += n
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reader_process, "CHUNK_TEXT_BYTES", text_bytes)
        fast = assembled(blocks, batch_rows)
        mp.setattr(reader_process, "_all_kept", lambda _: False)
        slow = assembled(blocks, batch_rows)
    assert fast == slow


@given(st.binary(max_size=600))
def test_newlines_are_counted_as_bytes_count_does(data: bytes) -> None:
    assert reader_process._newlines(data) == data.count(b"\n")
    assert reader_process._newlines(data + b"\n" * 40) == data.count(b"\n") + 40


# --------------------------------------------------------------------------------------------
# A worker's one-step path for the common chat record (`reader_process.PLAIN_KINDS`: a line
# `jsonl.fast_object` decodes into a record `chat.plain_chat` takes is queued at once) decides
# as the general path: for random lines near and off the common shape, written in several ways,
# and lines that only the strict decoder decides (repeated keys, a colon escaped, NaN, deep
# nesting, other whitespace, not an object), each block maps to the same records, blanks,
# problems, steps, episodes and features, and the blocks assembled give the same three files,
# byte for byte, or the same refusal.

_WORD = st.sampled_from(["hi", "é 東京", "a:b", "\u2028", '"q"', "", "x" * 40])
_NUM = st.one_of(st.none(), st.integers(-3, 3), st.floats(allow_nan=False, allow_infinity=False),
                 st.sampled_from([True, "1", (1 << 53) + 1, 1 << 63, 10**30, -0.0]))  # fmt: skip
_MESSAGE = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["user", "assistant", "tool", "system"]), st.just(3))},
    optional={
        "content": st.one_of(st.none(), _WORD, st.just(["part"]), st.just(3)),
        "tool_calls": st.sampled_from([None, [{"id": "c", "function": {"name": "f"}}],
                                       {"id": "c", "é": 1}, "[]", 3, []]),
        "tool_call_id": st.one_of(st.none(), _WORD, st.just(3)),
        "name": st.one_of(st.none(), _WORD),
        "reasoning_content": _WORD,
    },
)  # fmt: skip
_RECORD = st.fixed_dictionaries(
    {"messages": st.one_of(st.lists(_MESSAGE, min_size=1, max_size=3),
                           st.sampled_from([[], None, "hi", [None]]))},
    optional={
        "episode_id": st.sampled_from(["e1", "e2", "é", "", 7, None]),
        "reward": _NUM, "cost_usd": _NUM, "latency_ms": _NUM,
        "judge_scores": st.one_of(st.none(), st.dictionaries(st.sampled_from(["a", "b"]), _NUM)),
        "usage": st.one_of(st.none(), st.dictionaries(
            st.sampled_from(["prompt_tokens", "completion_tokens", "total"]), _NUM)),
        "model_id": st.one_of(st.none(), _WORD, st.just(3)),
        "termination_reason": st.sampled_from(["length", "success", None, 1]),
        "language": st.one_of(st.none(), _WORD, st.just(1)),
        "tags": st.just(["a"]), "seed": st.sampled_from([3, "12"]),
    },
)  # fmt: skip
_RAW = st.sampled_from([
    '{"messages": [{"role": "user", "content": "x"}], "reward": 1, "reward": 2}',
    '{"messages": [{"role": "user", "role": "tool", "content": "x"}]}',
    '{"messages": [{"role": "user", "content": "a\\u003ab"}], "x": 1, "x": 2}',
    '{"messages": [{"role": "user", "content": "a\\u003Ab"}]}',
    '{"messages": [{"role": "user", "content": "x"}], "reward": NaN}',
    '{"messages": [{"role": "user", "content": "x"}]} trailing',
    '{"messages": [{"role": "user", "content": "x"}], "info": ' + "[" * 300 + "]" * 300 + "}",
    '\ufeff{"messages": [{"role": "user", "content": "x"}]}',
    '\x0b{"messages": [{"role": "user", "content": "x"}]}',
    '{"messages": [{"role": "user", "content": "\\ud800"}]}',
    "[1, 2]", '"text"', "{", "   ", "\t", "\x0b", "",
])  # fmt: skip


_GOOD_NUM = st.one_of(st.none(), st.integers(-3, 1 << 53), st.floats(allow_nan=False))
_PLAIN = st.fixed_dictionaries(
    {"messages": st.lists(st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool", "system"])},
        optional={"content": st.one_of(st.none(), _WORD),
                  "tool_calls": st.sampled_from([None, [{"id": "c", "function": {"name": "f"}}]]),
                  "tool_call_id": _WORD, "name": _WORD}), min_size=1, max_size=3)},
    optional={
        "episode_id": st.sampled_from(["e1", "e2", "é", None]),
        "reward": _GOOD_NUM, "cost_usd": _GOOD_NUM, "latency_ms": _GOOD_NUM,
        "judge_scores": st.dictionaries(st.sampled_from(["a", "b"]),
                                        st.integers(-3, 3) | st.floats(allow_nan=False)),
        "usage": st.dictionaries(st.sampled_from(["prompt_tokens", "completion_tokens"]),
                                 st.integers(-(1 << 63), (1 << 63) - 1)),
        "model_id": _WORD, "termination_reason": st.sampled_from(["length", "success", None]),
    },
)  # fmt: skip
"""Records `chat.plain_chat` takes (besides `_RECORD`'s, mostly taken off it)."""


@st.composite
def _line(draw: Any) -> str:
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(_RAW)
    record = draw(_PLAIN if kind < 3 else _RECORD)
    compact = draw(st.booleans())
    return json.dumps(record, ensure_ascii=draw(st.booleans()),
                      separators=(",", ":") if compact else None)  # fmt: skip


def _blocks_of(lines: list[str], cuts: list[int], crlf: bool) -> list[tuple[int, bytes]]:
    end = "\r\n" if crlf else "\n"
    blocks, at = [], 0
    while at < len(lines):
        n = cuts[len(blocks) % len(cuts)]
        blocks.append((at + 1, "".join(line + end for line in lines[at : at + n]).encode()))
        at += n
    return blocks


def _mapped(block: Any) -> tuple[Any, ...]:
    c = block.chunk
    features = block.features
    return (
        block.records, block.blanks, block.events, block.more,
        None if c is None else (c.steps.schema, c.steps.to_pylist(), c.episodes.to_pylist()),
        None if features is None else (features.episode_ids, features.fingerprints,
                                       features.vectors.tobytes(), features.modality),
    )  # fmt: skip


def _through_assembly(blocks: list[tuple[int, bytes]], batch_rows: int) -> Iterator[RolloutChunk]:
    """`iter_jsonl_parallel` over ``blocks`` mapped in this process."""
    assembly = reader_process._Assembly(Path("mix.jsonl"), "chat-jsonl", batch_rows)
    for n, (first, data) in enumerate(blocks):
        assembly.read = n
        yield from assembly.take(reader_process._map_block("chat-jsonl", FEATURES, first, data))
    if assembly.rows or not assembly.seen:
        yield assembly.flush()
    if assembly.c.problems():
        raise RolloutValidationError("mix.jsonl", assembly.c.problems())


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(lines=st.lists(_line(), max_size=14), cuts=st.lists(st.integers(1, 5), min_size=1,
       max_size=4), crlf=st.booleans(), batch_rows=st.integers(1, 9))  # fmt: skip
def test_the_plain_chat_path_of_a_worker_decides_as_the_general_path(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str], cuts: list[int], crlf: bool,
    batch_rows: int,
) -> None:
    blocks = _blocks_of(lines, cuts, crlf)
    tmp = tmp_path_factory.mktemp("plain")
    got: dict[bool, Any] = {}
    for fast in (True, False):
        with pytest.MonkeyPatch.context() as mp:
            if not fast:
                mp.setattr(reader_process, "PLAIN_KINDS", frozenset())
            mapped = [_mapped(reader_process._map_block("chat-jsonl", FEATURES, first, data))
                      for first, data in blocks]  # fmt: skip
            files = outcome_of(partial(recorded, _through_assembly(blocks, batch_rows),
                                       tmp / str(fast), 5))  # fmt: skip
            files = files if files[0] == "refused" else ("recorded", files[1][:3])
        got[fast] = mapped, files
    assert got[True] == got[False]
    event(got[True][1][0])
    plain = sum(1 for line in lines if (o := jsonl.fast_object(line.encode())) is not None
                and chat.plain_chat(o) is not None)  # fmt: skip
    event(f"plain records: {min(plain, 3)}{'+' if plain >= 3 else ''}")
