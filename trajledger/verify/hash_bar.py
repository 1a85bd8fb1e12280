"""The progress bar of re-hashing data, loaded only when a caller draws one.

Scope: `Progress` (the bar factory type every layer takes: ``progress(total, label)`` -> a
context of ``advance(n)``), `Growing` (a bar whose total may grow) and `HashBar`, the bar a
`verify.blobs.BlobHasher` given a factory draws over the bytes it re-hashes. ``trajledger verify``
draws one; ``python -m verify`` never does, and loads none of this.
Non-scope: drawing (the command line's factory, ``ledger.clikit.progress``); re-hashing
(``verify.blobs``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Growing", "HashBar", "Progress"]

Progress = Callable[[int, str], contextlib.AbstractContextManager[Callable[[int], None]]]
"""``(total, label) -> context of advance(n)``: a progress bar (the CLI gives one). An
``advance`` that is also `Growing` takes a larger total while the work is under way."""


@runtime_checkable
class Growing(Protocol):
    """A bar whose total may grow: the re-hashing bar is drawn from the first blob the walk
    finds, its total the bytes found so far (the CLI's bars are)."""

    def grow(self, total: int) -> None:
        """Make the bar's total ``total`` (at least what it was)."""
        ...


class HashBar:
    """The bar over the bytes a `verify.blobs.BlobHasher` re-hashes: drawn when the walk
    queues its first bytes (a long walk shows it within its first second), its total the bytes
    queued so far; a `Growing` bar (the CLI's) takes each new total as groups go out to the
    workers; groups hashed advance it."""

    def __init__(self, progress: Progress) -> None:
        """A bar drawn by ``progress`` (not yet: `queued` draws it)."""
        self.progress = progress
        self.stack: contextlib.ExitStack | None = None
        self.advance: Callable[[int], None] = _nothing

    def queued(self, total: int, *, sent: bool = False) -> None:
        """``total`` bytes are queued so far: draw the bar over them if it is not drawn (and
        any are); with ``sent`` (a group went to the workers), grow a `Growing` bar to them."""
        if self.stack is None and total:
            self.stack = contextlib.ExitStack()
            self.advance = self.stack.enter_context(self.progress(total, "re-hashing data"))
        if sent and isinstance(self.advance, Growing):
            self.advance.grow(total)

    def close(self) -> None:
        """Close the bar, if drawn (a later `queued` draws a new one)."""
        stack, self.stack, self.advance = self.stack, None, _nothing
        if stack is not None:
            stack.close()


def _nothing(n: int) -> None:
    """The advance of no bar."""
