"""held37: the held side's filter (`held_filter`) decides as the hashes read whole do.

Every test here fails with the fast path broken: `Probe.ranges` missing a window of a hash
looked up, a candidate not confirmed against its page, a damaged or stale filter trusted, a
filter left behind an erasure.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajledger.ledger import held_filter, held_windows
from trajledger.ledger.step_windows import StepWindows

KEY = [("b", "sha256:" + "0" * 64)]


def group(path: Path, hashes: np.ndarray) -> None:
    """Group ``hashes`` as the windows of one held episode (their file and filter written)."""
    n = len(hashes)
    ws = [StepWindows(["e"], np.array([n + 40], np.int64), np.zeros(n, np.int64),
                      np.arange(n, dtype=np.int64), hashes.astype(np.uint64))]
    got = held_windows.group_file(path, ["b"], [ws], KEY)
    assert got is not None
    got.close()


def near(h: int, bits: int) -> int:
    """A hash of the bucket and fingerprint of ``h`` (``bits`` bucket bits), another below
    them: a candidate the filter cannot tell from ``h``."""
    low = (1 << (64 - bits - 16)) - 1
    return (h & ~low) | ((h + 1) & low) if low else h


def lookups(path: Path, queries: np.ndarray) -> tuple[list[int], list[int], list[int]]:
    """The positions found for ``queries`` with the filter and with the hashes read whole,
    and the hashes at the former (read page by page)."""
    fast = held_windows.read(path, KEY)
    slow = held_windows.read(path, KEY, probe=False)
    try:
        assert fast.probe is not None and slow.probe is None
        got = fast.lookup(queries)
        return got.tolist(), slow.lookup(queries).tolist(), fast.hashes_at(got).tolist()
    finally:
        fast.close()
        slow.close()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=300),
       st.lists(st.integers(0, 2**64 - 1), max_size=40), st.integers(0, 2**32), st.data())
def test_the_filter_finds_what_the_whole_hashes_find(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        held: list[int], other: list[int], seed: int, data: st.DataObject) -> None:
    """Random held hashes (some many times: a deterministic environment's identical
    windows), looked up with some of them, hashes of their bucket and fingerprint but not
    theirs (the filter's false positives: confirmed away) and others: the same positions as
    the hashes read whole; pages of one, four or 512 hashes (many pages, runs of them read at
    once), the filter made a few hashes at a time (buckets across chunks) or at once."""
    monkeypatch.setattr(held_filter, "PAGE", data.draw(st.sampled_from([1, 4, 512])))
    monkeypatch.setattr(held_filter, "_CHUNK", data.draw(st.sampled_from([1, 7, 1 << 20])))
    rng = np.random.default_rng(seed)
    hashes = np.array(held, np.uint64)
    hashes = np.concatenate([hashes, rng.choice(hashes, int(rng.integers(0, 30)))])
    path = tmp_path_factory.mktemp("f") / "g.grouped"
    group(path, hashes)
    bits = held_filter._bits(len(hashes))
    twins = [near(h, bits) for h in held]
    q = np.unique(np.array([*held[: len(held) // 2], *twins, *other], np.uint64))
    fast, slow, found = lookups(path, q)
    assert fast == slow
    assert sorted(set(found)) == sorted(set(q.tolist()) & set(hashes.tolist()))


def test_every_page_is_checked_when_read(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A flipped byte in the grouped file's hashes, with a good filter: the hash's lookup
    finds it (`Damaged`: grouped again by the caller) instead of missing the window; a lookup
    whose pages are whole decides as before."""
    monkeypatch.setattr(held_filter, "PAGE", 4)
    hashes = np.arange(1, 200, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    path = tmp_path / "g.grouped"
    group(path, hashes)
    g = held_windows.read(path, KEY, probe=False)
    at, ordered = g.at - 8 * g.size, g.hashes.copy()
    g.close()
    good = path.read_bytes()
    path.write_bytes(good[: at + 8 * 41] + bytes([good[at + 8 * 41] ^ 1]) + good[at + 8 * 41 + 1:])
    g = held_windows.read(path, KEY)
    assert g.probe is not None  # the filter is still that file's: the damage is found on use
    assert g.lookup(ordered[[0, 100]]).tolist() == [0, 100]  # pages 0 and 25: whole
    with pytest.raises(held_windows.Damaged):
        g.lookup(ordered[[41]])
    path.write_bytes(good[: at + 8 * 198])  # truncated within its hashes: refused when read
    with pytest.raises(held_windows.FormatError):
        held_windows.read(path, KEY)


@pytest.mark.parametrize("how", ["missing", "flipped", "truncated", "another file's",
                                 "another header", "not a filter"])
def test_a_filter_not_of_its_file_is_not_trusted(tmp_path: Path, how: str) -> None:
    """A missing, damaged, truncated or stale filter (another grouping's) is not used: the
    hashes are read whole and checked, as before, and the filter written again from them."""
    rng = np.random.default_rng(37)
    hashes = rng.integers(0, 2**63, 3000, dtype=np.uint64)
    path = tmp_path / "g.grouped"
    group(path, hashes)
    flt = held_filter.filter_path(path)
    good = flt.read_bytes()
    other = tmp_path / "o" / "g.grouped"
    other.parent.mkdir()
    group(other, rng.integers(0, 2**63, 3000, dtype=np.uint64))  # as many: another file
    body = len(held_filter.MAGIC) + 4 + int.from_bytes(good[len(held_filter.MAGIC):][:4],
                                                         "little")
    bad = {"missing": None,  # a fingerprint flipped: a lookup that misses, if trusted
           "flipped": good[:body + 1] + bytes([good[body + 1] ^ 4]) + good[body + 2:],
           "truncated": good[:-4], "another file's": held_filter.filter_path(other).read_bytes(),
           "another header": good.replace(b'"format":1', b'"format":2'),
           "not a filter": b"x" * 100}[how]
    if bad is None:
        flt.unlink()
    else:
        flt.write_bytes(bad)
    q = np.sort(hashes[:1000])
    g = held_windows.read(path, KEY)
    assert g.probe is None  # not trusted: the hashes read whole
    assert g.lookup(q).tolist() == held_windows.read(path, KEY, probe=False).lookup(q).tolist()
    g.close()
    assert flt.read_bytes() == good  # written again from the hashes checked
    assert held_windows.read(path, KEY).probe is not None


def test_a_regrouping_or_an_erasure_leaves_no_filter_behind(tmp_path: Path) -> None:
    """`forget_grouped` (an erased batch's windows may be in a grouped file) deletes the
    filters too: their fingerprints are the erased windows'; a grouping into a kept file's
    place leaves the new file's filter (the old one dropped before the rename, and not that
    file's anyway)."""
    cache = tmp_path / "features"
    path = held_windows.grouped_file(cache, KEY)
    group(path, np.arange(50, dtype=np.uint64))
    assert held_filter.filter_path(path).exists()
    held_windows.forget_grouped(cache)
    assert sorted(p.name for p in path.parent.iterdir()) == []
    group(path, np.arange(50, dtype=np.uint64))
    old = held_filter.filter_path(path).read_bytes()
    ws = [StepWindows(["e"], np.array([90], np.int64), np.zeros(51, np.int64),
                      np.arange(51, dtype=np.int64), np.arange(51, dtype=np.uint64))]
    assert held_windows.group_file(path, ["b"], [ws], KEY) is not None
    assert held_filter.filter_path(path).read_bytes() != old  # the new file's, read back


class _Crcs:
    """`zlib` for `held_filter`, counting the CRCs of more than a page (a body's)."""

    def __init__(self) -> None:
        import zlib

        self.zlib, self.bodies = zlib, 0

    def crc32(self, data: bytes, value: int = 0) -> int:
        self.bodies += memoryview(data).nbytes > 8 * held_filter.PAGE
        return self.zlib.crc32(data, value)


def _body_crcs(monkeypatch: pytest.MonkeyPatch, path: Path) -> tuple[int, bool]:
    """How many body CRCs a read of ``path``'s filter computes, and whether it is used."""
    crcs = _Crcs()
    monkeypatch.setattr(held_filter, "zlib", crcs)
    g = held_windows.read(path, KEY)
    try:
        return crcs.bodies, g.probe is not None
    finally:
        g.close()
        monkeypatch.undo()


def test_a_stamped_filter_is_used_without_its_body_crc(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """held38: the filter's body CRC is checked once per version of the file: `write` stamps
    the file it wrote (its mtime set back); a read of that version skips the CRC and finds
    what the hashes read whole find; a damaged stamp only costs the CRC again."""
    rng = np.random.default_rng(38)
    hashes = rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64)
    path = tmp_path / "g.grouped"
    group(path, hashes)
    flt = held_filter.filter_path(path)
    assert held_filter.stamp_path(flt).exists()
    assert _body_crcs(monkeypatch, path) == (0, True)
    q = np.sort(np.concatenate([hashes[:500], rng.integers(0, 2**64 - 1, 500,
                                                           dtype=np.uint64)]))
    fast, slow, at = lookups(path, q)
    assert fast == slow and len(fast) >= 500
    assert set(at) == set(q.tolist()) & set(hashes.tolist())
    held_filter.stamp_path(flt).write_bytes(b"[]")
    assert _body_crcs(monkeypatch, path) == (1, True)  # checked, stamped again (settled)
    assert _body_crcs(monkeypatch, path) == (0, True)


@pytest.mark.parametrize("how", ["rewritten", "mtime put back", "fresh copy"])
def test_a_filter_changed_after_its_stamp_is_checked(tmp_path: Path, how: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A filter changed through the file system after it was stamped (a fingerprint flipped,
    its size kept; even with its mtime put back: its ctime moved) has its CRC checked, so it is
    not used, and the hashes are read whole; a fresh filter, its mtime not `_SETTLED`, is
    checked at every read until it is (a write within one tick of a coarse clock would
    otherwise keep its stamp)."""
    import os

    rng = np.random.default_rng(39)
    hashes = rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64)
    path = tmp_path / "g.grouped"
    group(path, hashes)
    flt = held_filter.filter_path(path)
    good = flt.read_bytes()
    st = os.stat(flt)
    if how == "fresh copy":
        held_filter.stamp_path(flt).unlink()
        flt.write_bytes(good)
        assert _body_crcs(monkeypatch, path) == (1, True)
        assert not held_filter.stamp_path(flt).exists()  # not settled: not stamped
        assert _body_crcs(monkeypatch, path) == (1, True)
        return
    body = len(held_filter.MAGIC) + 4 + int.from_bytes(good[len(held_filter.MAGIC):][:4],
                                                         "little")
    with open(flt, "r+b") as f:  # in place: the same inode and size
        f.seek(body + 1)
        f.write(bytes([good[body + 1] ^ 4]))
    if how == "mtime put back":
        os.utime(flt, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(flt).st_ino == st.st_ino and os.stat(flt).st_size == st.st_size
    assert _body_crcs(monkeypatch, path)[1] is False  # not trusted: read whole, written again
    q = np.sort(hashes[:1000])
    g = held_windows.read(path, KEY)
    assert g.probe is not None and g.lookup(q).tolist() == held_windows.read(
        path, KEY, probe=False).lookup(q).tolist()
    g.close()
    assert flt.read_bytes() == good
