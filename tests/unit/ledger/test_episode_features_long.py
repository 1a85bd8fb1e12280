"""A long episode's features taken in pieces (``ledger/episode_features.py`` `LongEpisode`,
rev43 finding 6, feat46): bit for bit the features of the whole episode at once (as
`_features` gives them, the definition every reader of the features depends on), however its
steps are cut into record batches and pieces; its spilled files removed when it ends, when a
batch is refused and when the stream is dropped.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from trajledger.ledger import episode_features
from trajledger.ledger.episode_features import (
    FeatureChunk,
    FeatureOrderError,
    FeatureStream,
    iter_step_features,
    whole_episodes,
)
from trajledger.ledger.rollouts.dedup import episode_fingerprints

WORDS = ["fetch", "the", "Page", "tool_1", "x", "naïve", "Größe", "42", "what", "it"]


def _numeric(lengths: list[int], seed: int = 0, null_in: int | None = None) -> pa.Table:
    """Numeric episodes of ``lengths`` steps: obs lists of 0 to 20 float32 (null rows, a null
    element, a NaN), action lists of int64 (a null element in a row of episode ``null_in``:
    a piece without one gives int64 values, with one float64), rewards and safety
    interventions with nulls."""
    rng = np.random.default_rng(seed)
    n = sum(lengths)
    ids = np.repeat([f"n{i}" for i in range(len(lengths))], lengths)
    step = np.concatenate([np.arange(k) * 2 + 1 for k in lengths])  # ascending, with gaps
    sizes = rng.integers(0, 21, n)
    obs: list[list[float] | None] = [list(rng.normal(size=k).astype(np.float32)) for k in sizes]
    for i in rng.choice(n, max(1, n // 500), replace=False):
        obs[int(i)] = None
    obs[n // 3] = [float("nan"), 1.0]
    obs[n // 2] = [None, 2.0]  # type: ignore[list-item]
    action: list[list[int | None]] = [list(rng.integers(0, 9, 3).tolist()) for _ in range(n)]
    if null_in is not None:
        action[sum(lengths[:null_in]) + lengths[null_in] // 2][1] = None
    reward = rng.normal(size=n)
    known = rng.random(n) > 0.01
    safety = rng.integers(0, 3, n)
    return pa.table({
        "episode_id": pa.array(ids),
        "step": pa.array(step, pa.int64()),
        "obs": pa.array(obs, pa.list_(pa.float32())),
        "action": pa.array(action, pa.list_(pa.int64())),
        "reward": pa.array(reward, mask=~known),
        "terminated": pa.array(rng.random(n) > 0.5),
        "truncated": pa.array(np.zeros(n, bool)),
        "safety_interventions": pa.array(safety, pa.int64(), mask=rng.random(n) < 0.3),
    })  # fmt: skip


def _chat(lengths: list[int], seed: int = 0) -> pa.Table:
    """Chat episodes of ``lengths`` steps: episode 0 of every role (accented words in some
    rows only, so pieces are tokenised byte-wise or by Arrow in turn), empty and null content,
    tool calls; episode 1 of system and assistant rows only (its vector from the assistant's),
    but for a user row near its end (after many pieces of them); episode 2 numeric rows with
    text rows late (text); others of system text only."""
    rng = np.random.default_rng(seed)
    ids, role, content, calls = [], [], [], []
    for e, k in enumerate(lengths):
        for s in range(k):
            ids.append(f"c{e}")
            if e == 0:
                r = ["system", "user", "assistant", "tool", None][(s * 7 + 3) % 5]
            elif e == 1:
                r = "user" if s == k - 3 else ["system", "assistant"][s % 2]
            elif e == 2:
                r = "user" if s > k - 50 else None
            else:
                r = "system"
            role.append(r)
            m = int(rng.integers(0, 8))
            words = rng.choice(WORDS if s % 1000 < 500 else WORDS[:5], m)
            text = " ".join(words) if m else ("" if s % 2 else None)
            content.append(None if e == 2 and r is None else text)
            calls.append('{"name":"fetch"}' if r == "assistant" and m % 3 == 0 else None)
    n = len(ids)
    return pa.table({
        "episode_id": pa.array(ids),
        "step": pa.array(np.concatenate([np.arange(k) for k in lengths]), pa.int64()),
        "obs": pa.array(rng.normal(size=n)),
        "reward": pa.array(rng.normal(size=n)),
        "terminated": pa.array(np.zeros(n, bool)),
        "role": pa.array(role, pa.string()),
        "content": pa.array(content, pa.string()),
        "tool_calls": pa.array(calls, pa.string()),
    })  # fmt: skip


def _at_once(table: pa.Table, monkeypatch: pytest.MonkeyPatch) -> FeatureChunk:
    """The features of every episode of ``table`` from all its rows at once (no piece)."""
    with monkeypatch.context() as m:
        m.setattr(episode_features, "SPILL_STEPS", 1 << 62)
        return whole_episodes(table.combine_chunks().to_batches()[0])


def _cut(table: pa.Table, cuts: list[int]) -> Iterator[pa.Table]:
    bounds = [0, *sorted(set(cuts)), table.num_rows]
    for lo, hi in pairwise(bounds):
        if hi > lo:
            yield table.slice(lo, hi - lo)


def _same(a: FeatureChunk, b: FeatureChunk) -> None:
    assert a.episode_ids == b.episode_ids
    assert a.fingerprints == b.fingerprints
    assert a.modality == b.modality
    assert a.num_steps.tolist() == b.num_steps.tolist()
    assert a.vectors.tobytes() == b.vectors.tobytes()
    assert a.valid.tolist() == b.valid.tolist()
    assert a.safety == b.safety


CUTS = [
    [],  # one batch: the long episodes found within it
    [1],
    [333, 334, 1000],
    [4999, 5000, 5001],
    [17, 2048, 2049, 4095, 6000, 9999],
]


@functools.cache
def _uncut(kind: str) -> tuple[pa.Table, FeatureChunk]:
    """The episodes of the test below and their features at once (`_at_once`), checked, made
    once per test process: the same for each of its cuts (the table's making and the features
    at once were half of each case's time, ci56). Only read: Arrow tables are immutable, and
    `_same` reads the features."""
    lengths = [3, 4_000, 1, 2_500, 3_000]
    table = _numeric(lengths, null_in=3) if kind == "numeric" else _chat(lengths)
    with pytest.MonkeyPatch.context() as m:
        want = _at_once(table, m)
    assert want.fingerprints == [episode_fingerprints(table)[i] for i in want.episode_ids]
    if kind == "chat":  # the system's text alone is no task side: no vector
        assert want.modality == ["text"] * 5 and want.valid.tolist() == [1, 1, 1, 0, 0]
    return table, want


@pytest.mark.parametrize("cuts", CUTS)
@pytest.mark.parametrize("kind", ["numeric", "chat"])
def test_a_long_episode_cut_anywhere_has_the_features_of_the_uncut_one(
    kind: str, cuts: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Episodes of 3, 4,000, 1, 2,500 and 3,000 steps (more than the 100 `SPILL_STEPS` is set to
    here, taken in pieces of 37 steps), cut into batches at the rows given and at 40 random
    places: every feature equal to the uncut episodes' (and the fingerprints to `dedup`'s)."""
    table, want = _uncut(kind)
    monkeypatch.setattr(episode_features, "SPILL_STEPS", 100)
    monkeypatch.setattr(episode_features, "PIECE_STEPS", 37)
    rng = np.random.default_rng(len(cuts))
    for places in (cuts, rng.integers(1, table.num_rows, 40).tolist()):
        got = FeatureChunk.concat(list(iter_step_features(_cut(table, places), tmp_path)))
        _same(want, got)
    _same(want, whole_episodes(table.combine_chunks().to_batches()[0]))
    assert not list(tmp_path.iterdir())


def test_a_long_numeric_episode_over_many_sketch_spans(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """50,000 steps (the sketch sums spans of 16,384 steps from the episode's first, each
    alone, then adds them) and one of exactly 16,384, in pieces of 5,000 and batches of
    7,777: the same vector, to the bit."""
    table = _numeric([50_000, 16_384, 20], seed=3)
    want = _at_once(table, monkeypatch)
    monkeypatch.setattr(episode_features, "SPILL_STEPS", 1_000)
    monkeypatch.setattr(episode_features, "PIECE_STEPS", 5_000)
    got = FeatureChunk.concat(list(iter_step_features(table.to_batches(7_777), tmp_path)))
    _same(want, got)
    assert want.modality == ["numeric"] * 3 and all(want.valid)


def _spill_dirs(where: Path) -> list[Path]:
    return sorted(where.glob("trajledger-episode-*"))


def test_the_spill_is_taken_and_removed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A long episode's directory is made under the stream's (0700) while the episode is
    open, and removed when it ends; a short episode makes none."""
    monkeypatch.setattr(episode_features, "SPILL_STEPS", 100)
    table = _numeric([50, 1_000, 10])
    stream = FeatureStream(tmp_path)
    assert stream.add(table.slice(0, 40)) is None
    assert stream.add(table.slice(40, 100)) is not None  # the first episode ends
    assert not _spill_dirs(tmp_path)  # 90 steps carried
    assert stream.add(table.slice(140, 500)) is None
    (spill,) = _spill_dirs(tmp_path)
    assert spill.stat().st_mode & 0o777 == 0o700
    done = stream.add(table.slice(640, 1_000))
    assert done is not None and done.episode_ids == ["n1"]
    assert not _spill_dirs(tmp_path)
    last = stream.finish()
    assert last is not None and last.episode_ids == ["n2"]


def test_the_spill_is_removed_when_a_batch_is_refused_or_the_stream_dropped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Steps going back within the long episode (`FeatureOrderError`), to a stream and to
    `iter_step_features`, and a reader that stops while the episode is open: no directory
    left."""
    monkeypatch.setattr(episode_features, "SPILL_STEPS", 100)
    table = _numeric([1_000, 10])
    stream = FeatureStream(tmp_path)
    stream.add(table.slice(0, 500))
    assert _spill_dirs(tmp_path)
    with pytest.raises(FeatureOrderError, match="ascending"):
        stream.add(table.slice(200, 100))
    assert not _spill_dirs(tmp_path)
    with pytest.raises(FeatureOrderError, match="ascending"):
        list(iter_step_features([table.slice(0, 500), table.slice(200, 800)], tmp_path))
    assert not _spill_dirs(tmp_path)
    table = _numeric([50, 1_000, 10])
    reader = iter_step_features([table.slice(0, 600), table.slice(600)], tmp_path)
    assert next(reader).episode_ids == ["n0"]
    assert _spill_dirs(tmp_path)  # n1 open, 550 steps in
    reader.close()
    assert not _spill_dirs(tmp_path)


def test_an_integer_lists_null_element_in_one_piece(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An int64 action list with a null element in one row of a long episode: the episode's
    whole array of values is float64 (Arrow gives ints with nulls as float64), so the pieces
    without one (int64) are hashed as float64: the fingerprint of the episode alone, as
    `dedup` gives it."""
    table = _numeric([2_000], seed=5, null_in=0)
    want = episode_fingerprints(table)["n0"]
    assert _at_once(table, monkeypatch).fingerprints == [want]
    monkeypatch.setattr(episode_features, "SPILL_STEPS", 100)
    monkeypatch.setattr(episode_features, "PIECE_STEPS", 64)
    got = FeatureChunk.concat(list(iter_step_features(table.to_batches(300), tmp_path)))
    assert got.fingerprints == [want]


def test_an_episodes_fingerprint_does_not_depend_on_a_null_in_its_neighbours_values() -> None:
    """feat46 finding 2: an int64 action list with a null element in one episode made numpy's
    array of the whole batch's values float64, so every other episode of the batch was hashed
    as float64 too: its fingerprint depended on its neighbours (not `dedup`'s, and another in
    a batch cut elsewhere: an exact copy missed). Now each episode's values in their own type."""
    table = _numeric([5, 7, 3, 9], seed=2, null_in=2)
    want = episode_fingerprints(table)
    alone = [whole_episodes(table.slice(lo, n).combine_chunks().to_batches()[0]).fingerprints[0]
             for lo, n in ((0, 5), (5, 7), (12, 3), (15, 9))]  # fmt: skip
    together = whole_episodes(table.combine_chunks().to_batches()[0])
    assert together.fingerprints == alone == [want[f"n{i}"] for i in range(4)]


def test_an_episode_in_one_row_batches_is_carried_up_to_its_summed_bytes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """ci53: an episode carried over many one-row batches is measured by its rows' bytes as
    they come (the carried table's own nbytes, asked at each batch, walked every chunk: 700
    steps one at a time took a minute). It is taken in pieces at the row that passes
    `SPILL_BYTES`, as before, with the features of the episode at once."""
    table = _numeric([400, 3], seed=4)
    sizes = np.cumsum([table.slice(i, 1).nbytes for i in range(400)])
    limit = int(sizes[249])  # rows 0..249 carried whole; row 250 passes the limit
    monkeypatch.setattr(episode_features, "SPILL_BYTES", limit)
    stream = FeatureStream(tmp_path)
    done = []
    for i in range(table.num_rows):
        if (chunk := stream.add(table.slice(i, 1))) is not None:
            done.append(chunk)
        assert bool(_spill_dirs(tmp_path)) == (250 <= i < 400), i
    last = stream.finish()
    assert last is not None and not _spill_dirs(tmp_path)
    _same(_at_once(table, monkeypatch), FeatureChunk.concat([*done, last]))


def test_an_episode_in_ten_thousand_one_row_batches_is_joined_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """spd53: an episode carried over 10,000 one-row batches is kept as a list of its parts,
    each 1,024 of them gathered into one table (their objects cost memory), and joined once,
    when it ends (joined to the carried table at each batch, the chunk list was copied at each:
    13.9 CPU-s for 10,000 steps, quadratic). Its features are those of the episode at once; a
    part of another schema (a null-typed column promoted) is joined then, as before."""
    table = _numeric([10_000, 2], seed=6)
    want = _at_once(table, monkeypatch)
    joins: list[int] = []
    concat = pa.concat_tables

    def counted(tables: list[pa.Table], **kw: str) -> pa.Table:
        joins.append(len(tables))
        return concat(tables, **kw)

    monkeypatch.setattr(pa, "concat_tables", counted)
    stream = FeatureStream(tmp_path)
    done = [c for i in range(table.num_rows) if (c := stream.add(table.slice(i, 1)))]
    last = stream.finish()
    assert last is not None
    _same(want, FeatureChunk.concat([*done, last]))
    assert joins == [1_024] * 9 + [9 + 10_000 - 9 * 1_024, 2]
    joins.clear()
    nulls = table.slice(0, 3).set_column(2, "obs", pa.nulls(3))
    stream = FeatureStream(tmp_path)
    for part in (nulls.slice(0, 1), nulls.slice(1, 1), table.slice(2, 1), table.slice(3, 1)):
        assert stream.add(part) is None
    last = stream.finish()
    assert last is not None and joins == [3, 2] and not _spill_dirs(tmp_path)
    whole = pa.concat_tables([nulls.slice(0, 2), table.slice(2, 2)], promote_options="permissive")
    _same(_at_once(whole, monkeypatch), last)


def test_a_long_episodes_one_row_batches_are_taken_in_few_pieces(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """spd53: a long episode in one-row batches (taken in pieces past `SPILL_STEPS`) has its
    small parts taken together, up to `PIECE_STEPS` steps a piece (a piece a row cost 0.4 ms a
    step); its steps' order is still checked as they come; the features are the episode's at
    once."""
    table = _numeric([1_000, 3], seed=7, null_in=0)
    want = _at_once(table, monkeypatch)
    monkeypatch.setattr(episode_features, "SPILL_STEPS", 100)
    monkeypatch.setattr(episode_features, "PIECE_STEPS", 300)
    pieces: list[int] = []
    piece = episode_features.LongEpisode._piece

    def counted(self: episode_features.LongEpisode, t: pa.Table) -> None:
        pieces.append(t.num_rows)
        piece(self, t)

    monkeypatch.setattr(episode_features.LongEpisode, "_piece", counted)
    stream = FeatureStream(tmp_path)
    done = [c for i in range(table.num_rows) if (c := stream.add(table.slice(i, 1)))]
    last = stream.finish()
    assert last is not None
    _same(want, FeatureChunk.concat([*done, last]))
    assert pieces == [300, 300, 300, 100]  # the carried 101 steps among them
    stream = FeatureStream(tmp_path)
    for i in range(150):
        stream.add(table.slice(i, 1))
    with pytest.raises(FeatureOrderError, match="ascending"):
        stream.add(table.slice(120, 1))
    assert not _spill_dirs(tmp_path)
