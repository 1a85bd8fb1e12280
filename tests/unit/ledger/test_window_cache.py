"""The step windows and normalised text fingerprints kept in the derived cache
(`ledger.window_cache`): read back as computed, and never used when truncated, damaged,
another step file's or another version's."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajledger.ledger import window_cache
from trajledger.ledger.step_windows import (
    COLUMNS,
    LONG_COLUMNS,
    ORDERS,
    WINDOW_COLUMNS,
    iter_windows,
)
from trajledger.ledger.window_cache import MAGIC, Compared, compute, decode, encode, keep, read_kept
from trajledger.verify.errors import FormatError

STEPS = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def step_file(tmp_path: Path) -> Path:
    """Numeric episodes of 40, 10 (too short for a window) and 30 steps (its last 20 steps
    padding), one of 56 steps of few values (cells of a grid: `step_windows.LONG_COLUMNS`;
    it ends a record batch of 17 rows: one with a chat has no `COLUMNS` windows), one of 51
    steps whose third column is a clock from step 20 (clock33: windows without it too), one
    of 40 steps whose second column stands at 7 (copy35: the train side's windows without
    it), then two chats, one with a system prompt."""
    rng = np.random.default_rng(3)
    rows: list[dict[str, object]] = []
    for e, n in (("é-0", 40), ("e-1", 10), ("e-2", 30), ("k-4", 51), ("s-5", 40),
                 ("g-3", 56)):
        obs = np.cumsum(rng.normal(size=(n, 3)), axis=0)
        if e == "e-2":
            obs[10:] = 0.0
        if e == "k-4":
            obs[20:, 2] = np.arange(31) / 500
        if e == "s-5":
            obs[:, 1] = 7.0
        if e == "g-3":
            obs = rng.integers(0, 4, size=(n, 3)).astype(float)
        rows += [{"episode_id": e, "obs": [float(v) for v in obs[t]], "role": None,
                  "content": None} for t in range(n)]
    for e, turns in (("c-0", [("system", "Be brief"), ("user", "Hello  World")]),
                     ("c-1", [("user", "ＡＢＣ"), ("assistant", "ok")])):
        rows += [{"episode_id": e, "obs": None, "role": r, "content": c} for r, c in turns]
    path = tmp_path / "steps.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=17)
    return path


def same(a: Compared, b: Compared) -> None:
    assert a.normalised == b.normalised
    for held in (False, True):
        xs, ys = a.step_windows(held), b.step_windows(held)
        assert len(xs) == len(ys) == (len(ORDERS) if held and a.orders else 1) + 3 + 2 * held + (
            0 if held or a.still is None else 2)
        for x, y in zip(xs, ys, strict=True):
            assert (x.episode_ids, x.order, x.clocks, x.still) == (
                y.episode_ids, y.order, y.clocks, y.still)
            for f in ("lengths", "episode", "start", "hashes"):
                assert np.array_equal(getattr(x, f), getattr(y, f)), f


def test_kept_reads_back_as_computed(tmp_path: Path) -> None:
    path = step_file(tmp_path)
    got = compute(path, (True, True, True))
    assert got.normalised is not None and [e for e, _ in got.normalised] == ["c-0", "c-1"]
    # The windows are those `iter_windows` gives, held (in every order) or not (computed as
    # a train batch's: its windows without standing columns, copy35).
    assert got.still is None
    for held in (False, True):
        ws = (got if held else compute(path, (True, True, False))).step_windows(held)
        direct = list(iter_windows(pq.ParquetFile(path).iter_batches(
            batch_size=17, columns=list(WINDOW_COLUMNS)), held=held))
        spans = [COLUMNS, *([LONG_COLUMNS] if held else [])]
        assert [(w.order, w.clocks, w.still) for w in ws] == [
            *((o, False, False) for o in [*range(len(ORDERS) if held else 1), *spans]),
            (0, True, False), *((o, True, False) for o in spans),
            *([] if held else [(0, False, True), (COLUMNS, False, True)])]  # copy35: train
        tail = ws[-3 - 2 * held :] if held else ws[-5:-2]
        assert [len(w.hashes) > 0 for w in tail] == [True] * (3 + held) + [
            False] * held  # the clocked episode takes many values: no long windows
        assert {w.episode_ids[e] for w in ws if w.clocks for e in w.episode} == {"k-4"}
        assert {w.episode_ids[e] for w in ws if w.still for e in w.episode} == (
            set() if held else {"s-5"})
        if not held:
            assert all(len(w.hashes) == 25 for w in ws[-2:])
        for w in ws:
            kind = (w.order, w.clocks, w.still)
            assert np.array_equal(w.hashes, np.concatenate(
                [d.hashes for d in direct if (d.order, d.clocks, d.still) == kind]))
            assert np.array_equal(w.start, np.concatenate(
                [d.start for d in direct if (d.order, d.clocks, d.still) == kind]))
    assert got.few.any() and not got.few.all()  # e-2's padding
    data = encode(got, STEPS)
    assert data is not None and data.startswith(MAGIC)
    same(decode(data, STEPS), got)
    keep(tmp_path / "cache", STEPS, got)
    kept, why = read_kept(tmp_path / "cache", STEPS, (True, True, True))
    assert why == "" and kept is not None
    same(kept, got)
    # A held batch's file has no windows without standing columns: as train, computed again.
    assert read_kept(tmp_path / "cache", STEPS, (True, True, False)) == (None, "")
    # A part not kept is not there: computed again, silently.
    as_train = compute(path, (True, True, False))
    assert as_train.orders is None and len(as_train.step_windows(True)) == 6  # and COLUMNS
    keep(tmp_path / "cache", STEPS, as_train)
    same(read_kept(tmp_path / "cache", STEPS, (True, True, False))[0] or got, as_train)
    assert read_kept(tmp_path / "cache", STEPS, (False, True, True)) == (None, "")  # as held
    only_text = compute(path, (True, False, False))
    keep(tmp_path / "cache", STEPS, only_text)
    assert read_kept(tmp_path / "cache", STEPS, (False, True, False)) == (None, "")
    assert read_kept(tmp_path / "nothing", STEPS, (True, True, True)) == (None, "")


def edit_header(data: bytes, key: str, value: object) -> bytes:
    size = struct.unpack_from("<I", data, len(MAGIC))[0]
    at = len(MAGIC) + 4
    header = json.loads(data[at : at + size])
    header[key] = value
    head = json.dumps(header).encode()
    return MAGIC + struct.pack("<I", len(head)) + head + data[at + size :]


@pytest.mark.parametrize("damage", ["truncated", "a byte changed", "another step file's",
                                    "another version's", "more windows said", "not one",
                                    "empty", "resealed with an id out of range",
                                    "resealed with clocks out of order",
                                    "resealed with standing windows out of order"])
def test_a_damaged_or_foreign_entry_is_not_used(tmp_path: Path, damage: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    got = compute(step_file(tmp_path), (True, True, "standing" not in damage))
    data = encode(got, STEPS)
    assert data is not None
    body_at = len(data) - 40
    bad = {
        "truncated": data[:-9],
        "a byte changed": data[:body_at] + bytes([data[body_at] ^ 1]) + data[body_at + 1 :],
        "another step file's": encode(got, OTHER),
        "another version's": edit_header(data, "version", window_cache.WINDOWS_VERSION + 1),
        "more windows said": edit_header(data, "windows", 10**12),
        "not one": b"PAR1" + data,
        "empty": b"",
    }.get(damage)
    if damage == "resealed with clocks out of order":
        assert got.clocks is not None and len(got.clocks[0]) > 1
        pos = got.clocks[0].copy()
        pos[[0, 1]] = pos[[1, 0]]
        with monkeypatch.context() as m:  # as a forger would write it
            m.setattr(window_cache, "_ascending", lambda pos, windows: True)
            data = encode(dataclasses.replace(got, clocks=(pos, *got.clocks[1:])), STEPS) or b""
        with pytest.raises(FormatError, match="not in order"):
            decode(data, STEPS)
        bad = data
    if damage == "resealed with standing windows out of order":  # copy35
        assert got.still is not None and len(got.still[0]) > 1
        at = got.still[0].copy()
        at[[0, 1]] = at[[1, 0]]
        with monkeypatch.context() as m:
            m.setattr(window_cache, "_ascending", lambda pos, windows: True)
            data = encode(dataclasses.replace(got, still=(at, *got.still[1:])), STEPS) or b""
        with pytest.raises(FormatError, match="not in order"):
            decode(data, STEPS)
        bad = data
    if bad is None:  # a body rewritten, its digest too: offsets that run past the ids
        size = struct.unpack_from("<I", data, len(MAGIC))[0]
        at = len(MAGIC) + 4 + size
        header = json.loads(data[len(MAGIC) + 4 : at])
        body = bytearray(data[at:])
        ids_at = 8 * header["episodes"] + 8 * header["windows"] + (header["windows"] + 7) // 8
        body[ids_at + 8 : ids_at + 16] = struct.pack("<q", 1 << 40)
        bad = edit_header(data[:at] + bytes(body), "sha256", hashlib.sha256(body).hexdigest())
    with pytest.raises(FormatError):
        decode(bad, STEPS)
    where = window_cache.cache_file(tmp_path / "cache", STEPS)
    where.parent.mkdir(parents=True)
    where.write_bytes(bad)
    kept, why = read_kept(tmp_path / "cache", STEPS, (True, True, True))
    assert kept is None and why  # a reason, for the warning


def test_the_first_kept_file_of_a_version_drops_the_other_versions(tmp_path: Path) -> None:
    """The lead (seventeenth round): copy31's new `WINDOWS_VERSION` left every batch's kept
    windows of the version before (and a grouped held side) for good, gigabytes at a large
    holdout. The first file kept under a version deletes the other versions' directories;
    anything else there (another name, a file, a link and what it points at) stays."""
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.windows").write_bytes(b"not ours")
    for old in (f"w{window_cache.WINDOWS_VERSION - 1}", "w2"):
        (cache / old).mkdir(parents=True)
        (cache / old / f"{'ab' * 32}.windows").write_bytes(b"stale")
    (cache / "v3").mkdir()
    (cache / "wide").mkdir()
    (cache / "w9.txt").write_bytes(b"a file")
    (cache / "w1").symlink_to(outside)
    got = compute(step_file(tmp_path), (True, True, True))
    keep(cache, STEPS, got)
    assert sorted(p.name for p in cache.iterdir()) == [
        "v3", "w1", f"w{window_cache.WINDOWS_VERSION}", "w9.txt", "wide"]
    assert (outside / "keep.windows").read_bytes() == b"not ours"
    assert read_kept(cache, STEPS, (True, True, True))[0] is not None
    (cache / "w2").mkdir()  # another version's, made after: this version's files are there
    keep(cache, OTHER, got)  # so it is not looked for again on every write
    assert (cache / "w2").is_dir()

