"""`held_windows`: the held side's grouped windows in hash order, and a damaged file refused
(its hashes and episode table when read, where its windows are when a block is read)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from trajledger.ledger import held_windows
from trajledger.ledger.fs import temp_name
from trajledger.ledger.step_windows import WINDOW, StepWindows
from trajledger.verify.errors import FormatError


def windows(ids: list[str], tracks: list[np.ndarray]) -> StepWindows:
    """Each episode's windows, their hashes given (one per window: steps - WINDOW + 1)."""
    return StepWindows(ids, np.array([len(t) + WINDOW - 1 for t in tracks], np.int64),
                       np.concatenate([np.full(len(t), e, np.int64) for e, t in enumerate(tracks)]),
                       np.concatenate([np.arange(len(t), dtype=np.int64) for t in tracks]),
                       np.concatenate(tracks).astype(np.uint64))


def test_the_grouped_windows_are_in_hash_order() -> None:
    """`held_windows._by_hash` sorts each window's index packed under its hash's high bits, then
    puts the runs whose high bits tie in order of their whole hash: the order of a sort, for
    hashes of few distinct values, of ties in their high bits only, and of none or one."""
    rng = np.random.default_rng(3)
    cases = [rng.integers(0, hi, n, dtype=np.uint64) for n in (0, 1, 2, 7, 5000)
             for hi in (3, 1 << 20, 1 << 63)]
    cases.append((rng.integers(0, 9, 5000, dtype=np.uint64) << np.uint64(40))
                 | rng.integers(0, 1 << 40, 5000, dtype=np.uint64))
    for h in cases:
        by = held_windows._by_hash(h)
        assert np.array_equal(h[by], np.sort(h))
        assert np.array_equal(np.sort(by), np.arange(len(h)))


def test_a_damaged_grouped_file_is_not_read(tmp_path: Path) -> None:
    """A grouped file truncated, with a flipped byte in its hashes or its episode table, of
    other held batches or of another version is refused when read (`FormatError`); a flipped
    byte where a window is, when that block is read (`Damaged`)."""
    ws = [windows(["e0", "e1"], [np.arange(1, 40, dtype=np.uint64),
                                 np.arange(100, 140, dtype=np.uint64)])]
    key = [("b", "sha256:" + "0" * 64)]
    path = tmp_path / "g.grouped"
    grouped = held_windows.group_file(path, ["b"], [ws], key)
    assert grouped is not None
    n = len(grouped.hashes)
    want = [a.tolist() for a in grouped.placed(np.arange(n))]
    grouped.close()
    good = path.read_bytes()
    body = len(good) - 20 * n - 4 * ((n + held_windows.BLOCK - 1) // held_windows.BLOCK) - (
        8 * 5 + 4)  # the hashes begin here: 2 lengths, 3 offsets, 4 bytes of ids
    for bad in (good[:-3], good[:body + 9] + bytes([good[body + 9] ^ 1]) + good[body + 10:],
                good[:-2] + bytes([good[-2] ^ 1]) + good[-1:],
                good.replace(b'"version":', b'"version":9')):
        path.write_bytes(bad)
        with pytest.raises(FormatError):  # the hashes read whole (held37: no filter)
            held_windows.read(path, key, probe=False)
    path.write_bytes(good)
    with pytest.raises(FormatError):
        held_windows.read(path, [("c", key[0][1])])
    at = body + 8 * n + 4 * 5  # the segment of window 5
    path.write_bytes(good[:at] + bytes([good[at] ^ 1]) + good[at + 1:])
    got = held_windows.read(path, key)
    with pytest.raises(held_windows.Damaged):  # and closed: the check is made again
        got.placed(np.array([5], np.int64))
    path.write_bytes(good)
    got = held_windows.read(path, key)
    path.unlink()  # another call's `forget_grouped` meanwhile: the file read is still read
    assert [a.tolist() for a in got.placed(np.arange(n))] == want
    got.close()


def held_side(rng: np.random.Generator) -> list[list[StepWindows]]:
    """Random held batches: each of 0 to 3 runs of windows (order 0 first) of one episode
    list, 0 to 30 windows a run, of few distinct hashes or many."""
    out = []
    for b in range(int(rng.integers(1, 4))):
        n = int(rng.integers(1, 5))
        ids, lengths = [f"b{b}-{k}" for k in range(n)], rng.integers(WINDOW, WINDOW + 9, n)
        out.append([StepWindows(ids, lengths, rng.integers(0, n, m), rng.integers(0, 9, m),
                                rng.integers(0, int(rng.choice([3, 40, 1 << 62])), m,
                                             dtype=np.uint64), order)
                    for order in range(int(rng.integers(0, 4)))
                    for m in [int(rng.integers(0, 31))]])
    return out


def one_at_a_time(held: list[list[StepWindows]]) -> Iterator[list[StepWindows]]:
    """Each batch's windows, given once every batch before it was taken (hold32: one batch's
    windows held at a time)."""
    for b, ws in enumerate(held):
        assert not any(held[:b]), "a batch given before the ones before it were taken"
        yield ws


def test_grouped_in_sorted_runs_as_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    """hold31: `group_file` with the windows sorted a few at a time into a scratch file, then
    merged into the grouped file, writes the bytes it writes with all of them sorted at once
    (one run), and places every window as it: runs of 1 to 9 windows, 1 to 40 read ahead of all
    runs together, blocks of 1 to 5, hashes of few distinct values (ties across runs and
    across what is read ahead); nothing else is left beside the file. hold32: the batches
    given one at a time, each only once the ones before it were taken (runs across batches)."""
    rng = np.random.default_rng(31)
    for case in range(200):
        monkeypatch.setattr(held_windows, "BLOCK", int(rng.integers(1, 6)))
        monkeypatch.setattr(held_windows, "_MERGE", int(rng.integers(1, 41)))
        held = held_side(rng)
        key = [(f"b{b}", f"sha256:{b:064x}") for b in range(len(held))]
        names = [b for b, _ in key]
        at_once = held_windows.group_file(tmp_path / "a" / "g.grouped", names,
                                          [list(ws) for ws in held], key, run=1 << 30)
        assert at_once is not None
        got = held_windows.group_file(tmp_path / "b" / "g.grouped", names, one_at_a_time(held),
                                      key, run=int(rng.integers(1, 10)))
        assert got is not None
        assert (tmp_path / "b" / "g.grouped").read_bytes() == (
            tmp_path / "a" / "g.grouped").read_bytes(), case
        every = np.arange(len(at_once.hashes))
        assert [a.tolist() for a in got.placed(every)] == [
            a.tolist() for a in at_once.placed(every)], case
        got.close()
        assert sorted(os.listdir(tmp_path / "b")) == ["g.checked", "g.filter", "g.grouped"]
        assert not any(len(w.hashes) for ws in held for w in ws)  # taken as sorted


@pytest.mark.parametrize("stop", ["exception", "SIGINT", "disk full"])
@pytest.mark.parametrize("sorts", [1, 3, 5])  # between the runs; in the merge; at its end
def test_an_interrupted_grouping_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                stop: str, sorts: int) -> None:
    """hold31: a grouping stopped between its sorted runs or while it merges them (an
    exception, Ctrl-C) leaves no scratch file, no temp file and no grouped file, and the
    exception goes on; a write that fails (a full disk) leaves nothing either, and gives None
    (the caller holds the windows as they are)."""
    def held() -> list[list[StepWindows]]:
        return [[StepWindows(["e"], np.array([40]), np.zeros(9, np.int64), np.arange(9),
                             np.arange(9, 0, -1).astype(np.uint64))]]

    key, calls, real = [("b", "sha256:" + "0" * 64)], [], held_windows._by_hash
    pwrite = held_windows._pwrite

    def sort(h: np.ndarray) -> np.ndarray:
        calls.append(1)
        if len(calls) == sorts and stop == "exception":
            raise RuntimeError("stopped")
        if len(calls) == sorts and stop == "SIGINT":
            os.kill(os.getpid(), signal.SIGINT)
        return real(h)

    def write(fd: int, a: np.ndarray, at: int) -> None:
        calls.append(1)
        if len(calls) == 4 * sorts:  # the last part of the first run, of the last, a merged
            raise OSError(errno.ENOSPC, "No space left on device")
        pwrite(fd, a, at)

    monkeypatch.setattr(held_windows, "_MERGE", 2)  # 3 runs of 3: a window ahead each
    monkeypatch.setattr(held_windows, *(("_pwrite", write) if stop == "disk full"
                                        else ("_by_hash", sort)))
    path = tmp_path / "w" / "g.grouped"
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if stop == "disk full":
            assert held_windows.group_file(path, ["b"], held(), key, run=3) is None
        else:
            with pytest.raises(RuntimeError if stop == "exception" else KeyboardInterrupt):
                held_windows.group_file(path, ["b"], held(), key, run=3)
                time.sleep(1)  # the signal is handled at once: never reached
    finally:
        signal.signal(signal.SIGINT, before)
    assert len(calls) >= sorts
    assert os.listdir(tmp_path / "w") == []
    monkeypatch.undo()
    assert held_windows.group_file(path, ["b"], held(), key, run=3) is not None  # then whole


def test_a_killed_groupings_temp_file_is_removed_by_the_next(tmp_path: Path) -> None:
    """hold31: the temp file of a grouping killed before its rename (SIGKILL, the OOM killer:
    up to 20 bytes a held window) is removed by the next grouping beside it; a live
    process's is kept (its scratch file is unlinked once open: nothing of it is left)."""
    proc = subprocess.Popen(["true"])  # a pid that has exited
    proc.wait()
    dead = temp_name().replace(f"-{os.getpid()}-", f"-{proc.pid}-")
    live = temp_name()
    where = tmp_path / "w"
    where.mkdir()
    for name in (dead, live):
        (where / name).write_bytes(b"x" * 100)
    held = [[StepWindows(["e"], np.array([40]), np.zeros(9, np.int64), np.arange(9),
                         np.arange(9, dtype=np.uint64))]]
    assert held_windows.group_file(where / "g.grouped", ["b"], held,
                                   [("b", "sha256:" + "0" * 64)], run=4) is not None
    assert sorted(os.listdir(where)) == sorted(["g.checked", "g.filter", "g.grouped", live])


@pytest.mark.parametrize("stop", ["exception", "EIO", "another episode list", "too few",
                                  "too many"])
def test_a_grouping_stopped_between_batches_leaves_nothing(tmp_path: Path, stop: str) -> None:
    """hold32: a grouping fed batch by batch that stops after a batch was sorted into runs
    written to the scratch file (the next batch's windows cannot be computed: an exception, or
    a disk's EIO reading its step file; it does not fit the file: another episode list in one
    of its runs; the batches given are fewer or more than the held ones) leaves no scratch,
    temp or grouped file: the exception goes on (the EIO too: the caller's to report, not a
    file that cannot be written, None), else None, the batch that did not fit left as it was
    and no later batch taken."""
    def batch(ids: list[str], other: bool = False) -> list[StepWindows]:
        runs = [StepWindows(ids, np.array([40]), np.zeros(9, np.int64), np.arange(9),
                            np.arange(9, 0, -1).astype(np.uint64))]
        if other:
            runs.append(StepWindows(["x"], np.array([40]), np.zeros(9, np.int64), np.arange(9),
                                    np.arange(9, dtype=np.uint64), 1))
        return runs

    held = [batch(["a"]), batch(["b"], other=stop == "another episode list"), batch(["c"])]
    key = [(f"b{b}", f"sha256:{b:064x}") for b in range(3 if stop != "too many" else 2)]
    given: list[int] = []

    def each() -> Iterator[list[StepWindows]]:
        for b, ws in enumerate(held):
            if stop == "too few" and b == 2:
                return
            if stop == "exception" and b == 1:
                raise RuntimeError("stopped")
            if stop == "EIO" and b == 1:
                raise OSError(errno.EIO, "Input/output error")
            given.append(b)
            yield ws

    path = tmp_path / "w" / "g.grouped"
    if stop in ("exception", "EIO"):
        with pytest.raises(RuntimeError if stop == "exception" else OSError):
            held_windows.group_file(path, [b for b, _ in key], each(), key, run=4)
    else:
        assert held_windows.group_file(path, [b for b, _ in key], each(), key, run=4) is None
    assert os.listdir(tmp_path / "w") == []
    assert held[0] == []  # taken: two runs of four written, one window left in the third
    if stop == "another episode list":
        assert given == [0, 1] and len(held[1]) == 2 and len(held[2]) == 1
    assert held_windows.group_file(path, ["b"], [batch(["a"])], key[:1], run=4) is not None
