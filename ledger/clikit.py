"""What every trajledger command shares: exit codes, output conventions, progress, prompts.

Exit codes (DESIGN §8): 0 ok; 1 verification failed or data refused (and malformed evidence);
2 usage (click); 3 operational (missing file, I/O, unknown key, no ledger); 4 internal bug.
Results go to stdout (``--json`` is stable); stderr gets ``OK: <subject>`` or
``FAIL: <subject>: <message>``, one line per problem. Expected errors never print a traceback.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from trajledger.verify.errors import FormatError, ProvenanceError, VerificationError

from .errors import LedgerError

__all__ = [
    "EXIT_BUG",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_OPERATIONAL",
    "EXIT_USAGE",
    "Context",
    "Group",
    "emit_json",
    "fail",
    "ok",
    "pass_ctx",
    "progress",
    "progress_to",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_OPERATIONAL, EXIT_BUG = 0, 1, 2, 3, 4
HOME_ENV = "TRAJLEDGER_HOME"
DEFAULT_HOME = ".trajledger"


@dataclass
class Context:
    """Global options, passed to every command."""

    home: Path
    verbose: bool = False
    quiet: bool = False

    def ledger(self) -> Any:
        """Open the ledger at ``home`` (raises LedgerError when there is none)."""
        from .home import Ledger

        return Ledger.open(self.home, passphrase=ask_passphrase)

    def keystore(self) -> Any:
        """The key store of ``home`` (usable before ``init``)."""
        from .keys import KeyStore

        return KeyStore(self.home / "keys", passphrase=ask_passphrase)


pass_ctx = click.make_pass_decorator(Context)


def ask_passphrase(name: str, *, confirm: bool = False) -> bytes | None:
    """Prompt for a key passphrase on a terminal; None when there is no terminal."""
    if not sys.stdin.isatty():
        return None
    value = click.prompt(
        f"Passphrase for key {name}", hide_input=True, confirmation_prompt=confirm, err=True
    )
    return str(value).encode("utf-8")


def ok(subject: str) -> None:
    """Report success on stderr."""
    click.echo(f"OK: {subject}", err=True)


def fail(message: str) -> None:
    """Report a problem on stderr: one ``FAIL:`` line per line of ``message``."""
    for line in message.splitlines() or [""]:
        click.echo(f"FAIL: {line}", err=True)


def warn(message: str) -> None:
    """A warning on stderr."""
    click.echo(f"WARNING: {message}", err=True)


def emit_json(value: Any) -> None:
    """Print a JSON document on stdout (sorted keys, one line)."""
    click.echo(json.dumps(value, sort_keys=True, separators=(",", ":")))


@contextmanager
def progress(total: int, label: str, *, quiet: bool = False) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr when it is a terminal and not ``--quiet``; else silent.

    Yields:
        ``advance(n)``: move the bar ``n`` units.
    """
    if quiet or not sys.stderr.isatty() or total <= 0:
        yield lambda n: None
        return
    with click.progressbar(length=total, label=label, file=sys.stderr) as bar:
        yield bar.update


@contextmanager
def progress_to(*, label: str, quiet: bool = False) -> Iterator[Callable[[int, int], None]]:
    """Like `progress`, for library callbacks that report ``(done, total)``.

    Yields:
        ``report(done, total)``; the bar is created on the first call (when the total is known).
    """
    state: list[Any] = []  # [context manager, advance, done]

    def report(done: int, total: int) -> None:
        if not state:
            cm = progress(total, label, quiet=quiet)
            state.extend([cm, cm.__enter__(), 0])
        state[1](done - state[2])
        state[2] = done

    try:
        yield report
    finally:
        if state:
            state[0].__exit__(None, None, None)


def exit_code_for(e: BaseException) -> int:
    """The CLI exit code of an exception (DESIGN §8)."""
    if isinstance(e, VerificationError | FormatError):
        return EXIT_FAILED
    if isinstance(e, LedgerError | ProvenanceError | OSError):
        return EXIT_OPERATIONAL
    return EXIT_BUG


class Group(click.Group):
    """A click group that maps exceptions to exit codes and one-line messages."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; translate expected errors, report bugs."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except BrokenPipeError as e:
            # The reader went away (``trajledger log show | head``): not an error. Point stdout
            # at /dev/null so the interpreter's final flush does not fail again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise click.exceptions.Exit(EXIT_OK) from e
        except ProvenanceError as e:
            fail(str(e))
            raise click.exceptions.Exit(exit_code_for(e)) from e
        except OSError as e:
            where = f"{e.filename}: " if e.filename else ""
            fail(f"{where}{e.strerror or e}")
            raise click.exceptions.Exit(EXIT_OPERATIONAL) from e
        except Exception as e:
            verbose = bool(ctx.find_object(Context) and ctx.find_object(Context).verbose)  # type: ignore[union-attr]
            if verbose:
                traceback.print_exc()
            click.echo(
                f"BUG: {type(e).__name__}: {e}\nThis is a bug in trajledger; please report it"
                + ("" if verbose else " (rerun with --verbose for the traceback)"),
                err=True,
            )
            raise click.exceptions.Exit(EXIT_BUG) from e


def default_home() -> Path:
    """``$TRAJLEDGER_HOME`` or ``./.trajledger``."""
    return Path(os.environ.get(HOME_ENV) or DEFAULT_HOME)
