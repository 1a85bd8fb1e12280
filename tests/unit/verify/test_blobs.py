"""verify.blobs.BlobHasher: blobs re-hashed on a thread pool while the walk goes on, the bar
drawn from the first blob found with a total that grows (issue 23 item 4), and each failure
filed on the node that asked, whether the bar grows or not."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from testkit import DigestFiles

from trajledger.verify.blobs import GROUP_BLOBS, BlobHasher
from trajledger.verify.hash_bar import Growing
from trajledger.verify.report import FAIL, Node


class Bar:
    """A progress factory that records what it was asked to draw."""

    def __init__(self, grows: bool) -> None:
        self.grows = grows
        self.events: list[tuple[str, int]] = []

    @contextlib.contextmanager
    def __call__(self, total: int, label: str) -> Iterator[Callable[[int], None]]:
        assert label == "re-hashing data"
        self.events.append(("open", total))
        bar = self

        class Advance:
            def __call__(self, n: int) -> None:
                bar.events.append(("advance", n))

        class GrowingAdvance(Advance):
            def grow(self, total: int) -> None:
                bar.events.append(("grow", total))

        advance = GrowingAdvance() if self.grows else Advance()
        assert isinstance(advance, Growing) == self.grows
        try:
            yield advance
        finally:
            self.events.append(("close", 0))

    def advanced(self) -> int:
        return sum(n for e, n in self.events if e == "advance")


@pytest.mark.parametrize("grows", [True, False])
def test_the_bar_is_drawn_from_the_first_blob_and_covers_every_byte(
    tmp_path: Path, grows: bool
) -> None:
    blobs = DigestFiles(tmp_path)
    bar = Bar(grows)
    hasher = BlobHasher(blobs, progress=bar)
    node = Node("sha256:" + "0" * 64, "rollout-batch")
    sizes = [10 + i for i in range(2 * GROUP_BLOBS + 5)]
    for i, size in enumerate(sizes):
        hasher.later(node, f"f{i}", blobs.put(bytes([i % 256]) * size), size)
        if i == 0:  # drawn as soon as the walk finds a blob, its total that blob's bytes
            assert bar.events == [("open", sizes[0])]
    before_finish = list(bar.events)
    hasher.finish()
    assert node.ok
    assert bar.events[-1] == ("close", 0)
    assert bar.advanced() == sum(sizes)
    grown = [t for e, t in bar.events if e == "grow"]
    if grows:
        # Each group sent to the workers grows the total to the bytes found so far.
        assert grown == sorted(grown) and grown[-1] == sum(sizes)
        assert [t for e, t in before_finish if e == "grow"] == [
            sum(sizes[:GROUP_BLOBS]), sum(sizes[:2 * GROUP_BLOBS])]
    else:
        assert grown == []


def test_failures_are_filed_on_their_nodes_with_the_same_messages(tmp_path: Path) -> None:
    blobs = DigestFiles(tmp_path)
    hasher = BlobHasher(blobs, progress=Bar(True))
    good, bad = Node("sha256:" + "1" * 64, "checkpoint"), Node("sha256:" + "2" * 64, "dataset")
    ok = blobs.put(b"weights")
    tampered = blobs.put(b"original")
    (tmp_path / tampered.removeprefix("sha256:")).write_bytes(b"changed!")
    shorter = blobs.put(b"long enough")
    missing = "sha256:" + "3" * 64
    hasher.later(good, "weights.bin", ok, 7)
    hasher.later(bad, "a", tampered, 8)
    hasher.later(bad, "b", shorter, 99)
    hasher.later(bad, "c", missing, 1)
    hasher.finish()
    assert good.ok
    got = {c.what: c.detail for c in bad.checks if c.status == FAIL}
    h = hashlib.sha256(b"changed!").hexdigest()
    assert got == {
        "a": f"tampered: content hashes to sha256:{h[:12]}…, want {tampered[:19]}…",
        "b": f"tampered: 11 bytes, want 99 (blob {shorter[:19]}…)",
        "c": f"blob {missing[:19]}… is missing",
    }


def test_a_walk_that_stops_closes_the_bar_and_fails_what_it_dropped(tmp_path: Path) -> None:
    blobs = DigestFiles(tmp_path)
    bar = Bar(True)
    hasher = BlobHasher(blobs, progress=bar)
    node = Node("sha256:" + "4" * 64, "rollout-batch")
    hasher.later(node, "steps.parquet", blobs.put(b"x" * 100), 100)
    hasher.close()
    assert bar.events == [("open", 100), ("close", 0)]
    assert [(c.what, c.detail) for c in node.checks] == [
        ("steps.parquet", "not re-hashed: the verification was interrupted")]


def test_no_blob_no_bar(tmp_path: Path) -> None:
    bar = Bar(True)
    BlobHasher(DigestFiles(tmp_path), progress=bar).finish()
    assert bar.events == []
