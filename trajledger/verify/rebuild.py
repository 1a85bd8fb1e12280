"""Entries proven by the root they rebuild: every entry of a tree, or every entry of an
extension of a compact range (an update bundle's), need no inclusion proofs.

Scope: `rebuild`, the part of `verify.logcheck.check_entries` for those entries: the extension
starts inside the tree, holds every entry to its end, and with the range rebuilds the tree's
root. Loaded only then: a bundle holding a subset of a log's entries proves each by its own
inclusion proof and never loads it.
Non-scope: each entry's own checks, and the proofs of the others (``verify.logcheck``); compact
ranges (``verify.compact``).
Spec: RFC 6962 section 2.1; schemas/log-entry.v1.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .compact import CompactRange
from .merkle import leaf_hash

__all__ = ["Problem", "rebuild"]

Problem = tuple[str, int | None, str]
"""A `verify.logcheck.Finding`'s fields: the file (the caller's name), the entry, what is wrong."""


def rebuild(
    entries: Mapping[int, bytes],
    size: int,
    root: bytes,
    start: CompactRange | None,
    name: Callable[[int], str],
) -> tuple[int, list[Problem], Problem | None]:
    """Check that ``entries`` from ``start.size`` to ``size`` extend ``start`` (None: the empty
    range, the whole tree) to ``root``.

    Steps:
        1. The extension starts inside the tree (else nothing more is checked).
        2. It holds every entry to ``size`` (else each entry needs its inclusion proof).
        3. The range extended by their leaf hashes has the root ``root``.

    Returns:
        The first index the rebuilt root proves (``size``: none; more than ``size``: the
        extension starts after the tree), the findings of steps 1 and 2 (they come before
        the entries'), and the one of step 3 (it comes after them), or None.
    """
    start = start if start is not None else CompactRange()
    # (1)
    if start.size > size:
        return size + 1, [("tree", None, f"the extension starts at size {start.size}, after "
                           f"the tree's {size}")], None
    # (2)
    missing = next((i for i in range(start.size, size) if i not in entries), None)
    if missing is not None:
        return size, [(name(missing), missing, f"entry {missing} of the extension from size "
                       f"{start.size} is missing")], None
    # (3)
    rebuilt = start.extend([leaf_hash(entries[i]) for i in range(start.size, size)]).root()
    if rebuilt == root:
        return start.size, [], None
    what = (f"the {size} entries" if start.size == 0 else
            f"the tree of size {start.size} extended by entries {start.size}..{size - 1}")
    return start.size, [], ("tree", None, f"the root of {what} is {rebuilt.hex()[:16]}…, the "
                            f"checkpoint says {root.hex()[:16]}…")
