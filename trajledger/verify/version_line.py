"""``python -m verify -V``: the line naming the trajledger this verifier came from.

Scope: `print_version`, the ``-V`` line: the installed trajledger's version, or that this is a
copy of ``verify/`` alone. Loaded only for ``-V`` (it is off the path that verifies a bundle,
tests/unit/verify/test_core_size.py).
Non-scope: the command line itself (``verify.__main__``).
"""

from __future__ import annotations

__all__ = ["print_version"]


def print_version(prog: str) -> None:
    """Print ``PROG (trajledger VERSION)``, or ``PROG (a copy of verify/; …)`` when no
    trajledger distribution is installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        print(f"{prog} (trajledger {version('trajledger')})")
    except PackageNotFoundError:
        print(f"{prog} (a copy of verify/; trajledger is not installed)")
