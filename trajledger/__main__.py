"""The ``trajledger`` command (also ``python -m trajledger``).

Only the standard library is imported here, so that a Ctrl-C while the command's modules load
(click, cryptography, pyarrow: most of a second on a cold cache) exits 130 with one line, as a
Ctrl-C during the command does (``ledger.clikit.Group.invoke``), not with a traceback.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    """Load the command line and run it."""
    try:
        from trajledger.runner.cli import main as command
    except KeyboardInterrupt:
        sys.stderr.write("FAIL: interrupted; nothing was half-written\n")
        raise SystemExit(130) from None
    command()


if __name__ == "__main__":
    main()
