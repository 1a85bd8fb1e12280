"""The import's read-ahead (``ledger.exchange.read_ahead``): the bundle's stream decompressed on
a thread of its own, handed on whole, in order, with the decompressor's errors where they
happened, and the thread bounded and ended with the reading."""

from __future__ import annotations

import io
import threading

import pytest

from trajledger.ledger.exchange import READ_AHEAD, read_ahead


class Source(io.RawIOBase):
    """A stream of ``chunks`` reads, then ``error`` (if any) instead of the end; counts reads."""

    def __init__(self, chunks: list[bytes], error: BaseException | None = None) -> None:
        self.chunks = list(chunks)
        self.error = error
        self.reads = 0

    def read(self, n: int = -1) -> bytes:
        self.reads += 1
        if self.chunks:
            return self.chunks.pop(0)
        if self.error is not None:
            raise self.error
        return b""


def test_every_byte_comes_in_order_in_pieces_of_any_size() -> None:
    chunks = [bytes([i]) * (1000 + 37 * i) for i in range(20)]
    with read_ahead(Source(chunks)) as ahead:  # type: ignore[arg-type]
        got = []
        for n in range(1, 10_000):
            piece = ahead.read(n % 700 + 1)
            assert len(piece) <= n % 700 + 1
            if not piece:
                break
            got.append(piece)
        assert ahead.read(512) == b"" and ahead.read(1) == b""  # the end, again
    assert b"".join(got) == b"".join(chunks)


def test_a_decompressor_error_is_raised_after_the_bytes_before_it_and_again() -> None:
    error = ValueError("corrupt frame")
    with read_ahead(Source([b"a" * 10, b"b" * 10], error)) as ahead:  # type: ignore[arg-type]
        assert ahead.read(15) == b"a" * 10
        assert ahead.read(15) == b"b" * 10
        for _ in range(2):
            with pytest.raises(ValueError, match="corrupt frame"):
                ahead.read(15)


def test_the_thread_stays_bounded_and_ends_when_the_reader_stops() -> None:
    endless = Source([b"x" * 100] * 10_000)
    before = threading.active_count()
    with read_ahead(endless) as ahead:  # type: ignore[arg-type]
        assert ahead.read(100) == b"x" * 100
        for _ in range(100):  # the thread fills its queue, then waits
            if endless.reads >= READ_AHEAD + 2:
                break
            threading.Event().wait(0.01)
        assert endless.reads <= READ_AHEAD + 2
    assert not ahead.thread.is_alive()
    assert threading.active_count() == before
    assert endless.reads <= READ_AHEAD + 2
