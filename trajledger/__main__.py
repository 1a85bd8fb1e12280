"""The ``trajledger`` command (also ``python -m trajledger``).

Only the standard library is imported here, so that a Ctrl-C while the command's modules load
(click, cryptography, pyarrow: most of a second on a cold cache) exits 130 with one line, as a
Ctrl-C during the command does (``ledger.clikit.Group.invoke``), not with a traceback. On a
system that is not POSIX, the command says so in one line and exits 3 (``trajledger._platform``).
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    """Load the command line and run it."""
    from trajledger._platform import UnsupportedPlatformError

    try:
        from trajledger.runner.cli import main as command
    except KeyboardInterrupt:
        sys.stderr.write("FAIL: interrupted; nothing was half-written\n")
        raise SystemExit(130) from None
    except UnsupportedPlatformError as e:
        sys.stderr.write(f"FAIL: {e}\n")
        raise SystemExit(3) from None  # operational: this system, not the input
    command()


if __name__ == "__main__":
    main()
