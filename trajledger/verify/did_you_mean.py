"""``python -m verify``'s "did you mean": the close option for a misspelt one in a usage error.

Scope: `suggestions`, the text `verify.__main__` adds to argparse's usage error. Loaded only on
a usage error: a command line that parses never needs it.
Non-scope: parsing the command line (``verify.__main__``, argparse); the ``trajledger``
command's suggestions (``ledger.suggestions``, which ``verify/`` cannot import).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

__all__ = ["suggestions"]


def suggestions(given: Sequence[str], options: Sequence[str]) -> str:
    """``; for --x, did you mean --y?`` for each argument of ``given`` that is a long option
    close to one of ``options`` and neither one of them nor an abbreviation of one (argparse
    accepts those); empty when there is none.

    Args:
        given: the command line's arguments, as given (``--name=value`` is read as ``--name``).
        options: the parser's option strings, in the order they were added.
    """
    out = ""
    for arg in given:
        name = arg.split("=")[0]
        known = any(o.startswith(name) for o in options)  # or an abbreviation
        close = difflib.get_close_matches(name, options, 1)
        if name.startswith("--") and close and not known:
            out += f"; for {name}, did you mean {close[0]}?"
    return out
