"""The ``fsck`` and ``gc`` commands: a ledger's objects against its log.

Each command parses its options, opens the ledger, calls one function of ``ledger.fsck`` and
renders the result: results on stdout (``--json`` is stable), ``OK:`` / ``FAIL:`` /
``WARNING:`` lines on stderr, exit codes per ``ledger.clikit``.
Non-scope: the checks themselves (``ledger.fsck``), the log's own files (``log verify``).
"""

from __future__ import annotations

from pathlib import Path

import click

from .clikit import (
    EXIT_FAILED,
    Context,
    bundle_file,
    emit_json,
    fail,
    ok,
    pass_ctx,
    progress_to,
    verdict_follows,
    warn,
)
from .config import CONFIG_NAME
from .errors import shell_word

__all__ = ["COMMANDS", "fsck", "gc"]

_WRITABLE_SHOWN = 20
"""Directories others may write named one a line by ``fsck`` (a store's fan-out may hold
thousands): the rest are counted, and listed in ``--json``."""


def _render(report: object, as_json: bool) -> None:
    from .fsck import FsckReport

    assert isinstance(report, FsckReport)
    if as_json:
        emit_json(report.to_json())
        return
    stale = sum(x.stale for x in report.leftovers)
    click.echo(
        f"log size\t{report.size}\nobjects named\t{report.named}\nre-hashed\t{report.checked}\n"
        f"missing\t{len(report.missing)}\nunreadable\t{len(report.unreadable)}\n"
        f"damaged\t{len(report.damaged)}\n"
        f"erased\t{report.erased}\nunerased\t{len(report.unerased)}\n"
        f"orphans\t{len(report.orphans)}\n"
        f"leftovers\t{len(report.leftovers)} ({stale} stale)\n"
        f"writable dirs\t{len(report.writable)}"
    )


@click.command("fsck")
@click.option("--repair", is_flag=True, help="Restore missing or damaged objects (needs --from).")
@click.option(
    "--from",
    "source",
    type=click.Path(path_type=Path),
    help="Where to restore from: an exported bundle (.tar.zst) or another ledger directory.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_ctx
def fsck(ctx: Context, repair: bool, source: Path | None, as_json: bool) -> None:
    """Check every object the log names: present and re-hashing to its digest.

    Reads only. Reports missing, unreadable and damaged objects (exit 1), orphan objects no
    record names, leftovers of killed writers (run 'trajledger gc' for those), blobs an
    erasure lists that are still stored (an erase that did not finish: run it again),
    directories other users (or the group, unless the ledger is shared through it) may
    write, each with the chmod to run, derived caches that disagree with the log, and
    symbolic links planted where the store's fan-out or the log's tiles keep directories
    (exit 1: writers refuse them). With --repair --from BUNDLE|LEDGER, missing, unreadable
    and damaged objects are restored from an exported bundle or another ledger; every byte
    restored is hashed. Erased blobs are never restored.
    The log's own files are checked by 'trajledger log verify'.

    \b
    Examples:
      trajledger fsck
      trajledger fsck --repair --from backup.tar.zst
    """
    from . import fsck as lib

    if repair and source is None:
        raise click.UsageError("--repair needs --from BUNDLE|LEDGER")
    if source is not None and not repair:
        raise click.UsageError("--from is only used with --repair")
    if source is not None and not (source / CONFIG_NAME).is_file():  # else a ledger directory
        bundle_file(source, f" or a ledger directory (it holds no {CONFIG_NAME})")
    ledger = ctx.ledger()
    with progress_to(quiet=ctx.quiet, label="checking objects") as bar:
        report = lib.fsck(ledger, on_progress=bar)
    if repair:
        assert source is not None
        with progress_to(quiet=ctx.quiet, label="restoring") as bar:
            result = lib.repair(ledger, source, report=report, on_progress=bar)
        for digest in result.restored:
            ok(f"object {digest}: restored from {source}")
        for digest in result.unavailable:
            fail(f"object {digest}: not in {source} (or not with these bytes)")
        for digest, why in result.unreadable.items():
            fail(f"object {digest}: {why}; not read")
        assert result.after is not None
        report = result.after
    with verdict_follows():
        _render(report, as_json)
    if report.orphans:
        total = sum(report.orphans.values())
        warn(
            f"{len(report.orphans)} orphan object(s) ({total} bytes) named by no record; "
            "'trajledger gc' lists and removes them"
        )
    stale = [x for x in report.leftovers if x.stale]
    if stale:
        warn(f"{len(stale)} leftover(s) of killed writers; 'trajledger gc' removes them")
    if report.unerased:
        at = ", ".join(str(i) for i in sorted(set(report.unerased.values())))
        warn(f"{len(report.unerased)} blob(s) that the erasure record(s) at log index {at} list "
             "are still stored, and no artifact that is not erased holds them: an erase that "
             "did not finish (run the same 'trajledger erase' again to delete them), or "
             "another log's erasure this ledger did not take")
    writable = sorted(report.writable.items())
    for path, bits in writable[:_WRITABLE_SHOWN]:
        who = {"g": "its group", "o": "other users", "go": "its group and other users"}[bits]
        warn(f"{path}: writable by {who} (a ledger made under a lax umask): they could delete "
             f"or replace evidence there; run 'chmod {bits}-w {shell_word(path)}'")
    if len(writable) > _WRITABLE_SHOWN:
        bits = "".join(sorted({b for _p, v in writable for b in v}))
        warn(f"and {len(writable) - _WRITABLE_SHOWN} more such directories (all in --json); "
             f"'chmod -R {bits}-w {shell_word(ledger.root)}' (and the store's directory, if "
             "elsewhere) fixes them all")
    if not report.ok:
        for line in report.problems():
            fail(line)
        if not repair and (report.missing or report.unreadable or report.damaged):
            fail(
                "restore them with 'trajledger fsck --repair --from BUNDLE|LEDGER' (an exported "
                "bundle or another ledger holding them)"
            )
        raise click.exceptions.Exit(EXIT_FAILED)
    ok(f"ledger {ledger.root}: {report.checked} object(s) named by {report.size} entries verified")


@click.command("gc")
@click.option("--yes", is_flag=True, help="Remove them (default: only list, a dry run).")
@click.option(
    "--min-age",
    default="24h",
    show_default=True,
    help="Keep orphans written more recently than this: '24h', '30m', '2d' or seconds (a "
    "record in progress stores its blobs before its log entry).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def gc(ctx: Context, yes: bool, min_age: str, as_json: bool) -> None:
    """List (with --yes remove) orphan objects and leftovers of killed writers.

    Orphans are stored objects that no record of the log names (for example the blobs of a
    record that was interrupted before its log entry). Objects written less than --min-age ago
    are kept. Leftovers are temp files and directories that no live writer can own.

    \b
    Examples:
      trajledger gc
      trajledger gc --yes --min-age 2d
    """
    from trajledger.verify.errors import FormatError
    from trajledger.verify.policy import parse_duration

    from . import fsck as lib

    try:
        seconds = int(min_age) if min_age.isdigit() else parse_duration(min_age, "--min-age")
    except FormatError as e:
        raise click.BadParameter(str(e), param_hint="--min-age") from e
    ledger = ctx.ledger()
    result = lib.gc(ledger, apply=yes, min_age=float(seconds))
    if as_json:
        emit_json(result.to_json())
    else:
        for digest, size in sorted(result.orphans.items()):
            click.echo(f"orphan\t{digest}\t{size}")
        for path in result.leftovers:
            click.echo(f"leftover\t{path}")
    total = sum(result.orphans.values())
    what = (
        f"{len(result.orphans)} orphan object(s) ({total} bytes), "
        f"{len(result.leftovers)} leftover(s)"
    )
    if result.young:
        warn(f"{result.young} orphan(s) younger than {min_age} kept")
    if yes:
        ok(f"removed {what}")
    else:
        ok(f"would remove {what} (dry run; pass --yes to remove)")


COMMANDS = [fsck, gc]
