"""`held_windows`: the held side's grouped windows in hash order, and a damaged file refused
(its hashes and episode table when read, where its windows are when a block is read)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trajledger.ledger import held_windows
from trajledger.ledger.step_windows import WINDOW, StepWindows
from trajledger.verify.errors import FormatError


def windows(ids: list[str], tracks: list[np.ndarray]) -> StepWindows:
    """Each episode's windows, their hashes given (one per window: steps - WINDOW + 1)."""
    return StepWindows(ids, np.array([len(t) + WINDOW - 1 for t in tracks], np.int64),
                       np.concatenate([np.full(len(t), e, np.int64) for e, t in enumerate(tracks)]),
                       np.concatenate([np.arange(len(t), dtype=np.int64) for t in tracks]),
                       np.concatenate(tracks).astype(np.uint64))


def test_the_grouped_windows_are_in_hash_order() -> None:
    """`held_windows.group` sorts each window's index packed under its hash's high bits, then
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
    grouped = held_windows.group(["b"], [ws])
    assert grouped is not None
    key = [("b", "sha256:" + "0" * 64)]
    path = tmp_path / "g.grouped"
    held_windows.write(path, grouped, key)
    good = path.read_bytes()
    n = len(grouped.hashes)
    body = len(good) - 20 * n - 4 * ((n + held_windows.BLOCK - 1) // held_windows.BLOCK) - (
        8 * 5 + 4)  # the hashes begin here: 2 lengths, 3 offsets, 4 bytes of ids
    for bad in (good[:-3], good[:body + 9] + bytes([good[body + 9] ^ 1]) + good[body + 10:],
                good[:-2] + bytes([good[-2] ^ 1]) + good[-1:],
                good.replace(b'"version":', b'"version":9')):
        path.write_bytes(bad)
        with pytest.raises(FormatError):
            held_windows.read(path, key)
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
    assert [a.tolist() for a in got.placed(np.arange(n))] == [
        a.tolist() for a in grouped.placed(np.arange(n))]
    got.close()
