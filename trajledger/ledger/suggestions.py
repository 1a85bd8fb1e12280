"""Suggestions for a mistyped name: the one "did you mean" of the command line.

Scope: `suggest` (the names closest to what was typed) and `did_you_mean` (the phrase), for
names, ``NAME@VERSION`` references, key names and digest prefixes. On the ground floor of the
ledger package: the key store and the catalog both use it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["did_you_mean", "suggest"]


def suggest(
    wanted: str,
    candidates: Iterable[str] | Mapping[str, str],
    *,
    limit: int = 3,
    close: float | None = None,
) -> list[str]:
    """The candidates closest to ``wanted`` (a mistyped name, ``NAME@VERSION``, key name or
    digest prefix), best first: the one "did you mean" of the command line.

    Args:
        wanted: what the user typed.
        candidates: the names that exist; or ``{compared form: suggested form}`` (a digest
            prefix is compared with each digest cut to its length, and the whole digest is
            suggested; later, origin-qualified names can be fed in beside plain ones).
        limit: at most this many.
        close: how alike a candidate must be (default 75%); commands take click's 60%, as
            their names are few and short (``nwe`` is 67% alike ``new``).

    Returns:
        Up to ``limit`` suggestions: those equal but for case; else those
        `difflib.SequenceMatcher` finds at least ``close`` alike and nearly as alike as the closest
        (``aprover-a`` gets ``approver-a``, not also ``approver-b``). Empty when nothing is
        close.
    """
    forms = dict(candidates) if isinstance(candidates, Mapping) else {c: c for c in candidates}
    key = wanted.strip().lower()
    same = [s for c, s in forms.items() if c.lower() == key and c != wanted]
    if same:
        return list(dict.fromkeys(same))[:limit]
    cutoff = _CLOSE if close is None else close
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(key)
    scored: list[tuple[float, str]] = []
    for compared, shown in forms.items():
        if compared == wanted.strip():
            continue  # what was typed exists: the caller refused it for another reason
        matcher.set_seq1(compared.lower())
        # The cheap upper bounds first, as difflib.get_close_matches does.
        if (matcher.real_quick_ratio() >= cutoff and matcher.quick_ratio() >= cutoff
                and (score := matcher.ratio()) >= cutoff):
            scored.append((score, shown))
    if not scored:
        return []
    best = max(score for score, _ in scored)
    ranked = sorted((s for s in scored if s[0] >= best - _MARGIN), key=lambda s: (-s[0], s[1]))
    return list(dict.fromkeys(shown for _, shown in ranked))[:limit]


_CLOSE = 0.75
"""How alike (`difflib.SequenceMatcher.ratio`) a name must be to be suggested."""
_MARGIN = 0.05
"""Suggestions within this of the closest one are offered beside it."""


def did_you_mean(suggestions: Sequence[str]) -> str:
    """``did you mean 'a'?`` or ``did you mean 'a' or 'b'?``; empty for no suggestion."""
    if not suggestions:
        return ""
    quoted = [f"'{s}'" for s in suggestions]
    return "did you mean " + (
        quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    ) + "?"
