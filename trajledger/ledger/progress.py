"""How long work draws its progress: the one type every layer takes a bar factory as.

Scope: `ProgressFactory` (``progress(total, label)`` -> a context yielding ``advance(n)``;
the verifier's re-hashing takes the same type, `verify.hash_bar.Progress`), and `no_progress`,
the one that draws nothing. The command line makes the bars (``clikit.progress``: stderr, not
under ``-q`` or off a terminal) and hands the factory down; the handle and the services only
call it. On the ground floor of the ledger package.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from trajledger.verify.hash_bar import Progress as ProgressFactory

__all__ = ["ProgressFactory", "no_progress"]


@contextlib.contextmanager
def no_progress(total: int, label: str) -> Iterator[Callable[[int], None]]:
    """The `ProgressFactory` that draws nothing (a library caller, ``-q``, no terminal)."""
    yield lambda n: None
