"""``trajledger lineage`` and ``trajledger impact``: audit questions as graphs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from trajledger.ledger.clikit import (
    OUT_PATH,
    Context,
    not_a_bundle,
    ok,
    pass_ctx,
    verdict_follows,
    warn,
)

__all__ = ["COMMANDS"]

_FORMAT = click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "mermaid", "dot", "html"]),
    default="text",
    show_default=True,
    help="Output format; html is one self-contained page.",
)
_JSON = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON: the same as --format json."
)


def _a_file(ctx: click.Context, param: click.Parameter, out: Path | None) -> Path | None:
    """--out names the file to write: a directory is refused before anything is judged (its
    write failed after, as `cannot write in PARENT: Is a directory`, exit 3)."""
    if out is not None and out.is_dir():
        raise click.BadParameter(f"{out}: is a directory; give the path of a file in it, such "
                                 f"as --out {out / (ctx.info_name or 'report')}.html", ctx, param)
    return out


_OUT = click.option(
    "--out",
    type=OUT_PATH,
    callback=_a_file,
    help="Write to FILE instead of stdout.",
)
_POLICY = click.option(
    "--policy",
    "policy_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Trust policy to verify under (default: the ledger's policy in force).",
)


def _policy(ledger: Any, policy_file: Path | None) -> Any:
    from trajledger.ledger.clikit import warn
    from trajledger.ledger.policy_state import given_policy

    return given_policy(ledger, policy_file, warn)


def _emit(text: str, out: Path | None) -> None:
    if out is None:
        with verdict_follows():  # (the verdict follows: `report_raise`)
            click.echo(text)
        return
    from trajledger.ledger.fs import write_file_atomic

    write_file_atomic(out, text.encode("utf-8"), durable=False, output=True)
    ok(f"written to {out}")


def _format(fmt: str, as_json: bool) -> str:
    """``--json`` is ``--format json``; with another --format given (``text`` included) it is a
    usage error."""
    given = (click.get_current_context().get_parameter_source("fmt")
             is not click.core.ParameterSource.DEFAULT)
    if as_json and given and fmt != "json":
        raise click.UsageError(f"--json and --format {fmt}: choose one")
    return "json" if as_json else fmt


@click.command()
@click.argument("ref")
@_FORMAT
@_JSON
@_OUT
@_POLICY
@pass_ctx
def lineage(
    ctx: Context, ref: str, fmt: str, as_json: bool, out: Path | None, policy_file: Path | None
) -> None:
    """What made REF: its datasets, batches, environments, evaluators, parent checkpoints.

    The report's first line is the verdict (with the count of problems); an artifact whose
    lineage fails is marked failing. Exits 1 whenever 'trajledger verify REF' would, after
    writing the report.

    \b
    Example:
      trajledger lineage cartpole-bc@2 --format html --out lineage.html
    """
    from .commands import report_raise
    from .lineage import qualified, render
    from .revokers import more, revokers

    not_a_bundle(ref, "lineage", ctx)
    fmt = _format(fmt, as_json)
    ledger = ctx.ledger()
    policy = _policy(ledger, policy_file)
    graph = ledger.lineage(ref, policy=policy)
    revoked = revokers(ledger, graph, policy)  # who revoked a revoked cause (out55, out57)
    _emit(render(graph, fmt, qualified(ledger, graph), revoked), out)  # (imported after a
    report_raise(graph, ref, more=more(revoked))  # clash: out49)


@click.command()
@click.argument("ref")
@_FORMAT
@_JSON
@_OUT
@_POLICY
@pass_ctx
def impact(
    ctx: Context, ref: str, fmt: str, as_json: bool, out: Path | None, policy_file: Path | None
) -> None:
    """What REF reached: the datasets and checkpoints that used it, and what they generated.

    Use it after a revocation: every checkpoint listed was trained, directly or through
    rollouts of an earlier checkpoint, on the revoked data, and is marked failing. The
    report's first line is the verdict, and a failing one is said on stderr too (a WARNING
    line). Exits 0 when the answer is whole, even if what it lists fails (that is the
    answer); 1 when evidence it needed is damaged (a record that cannot be read, a failing
    log), since a damaged record can hide a user.

    \b
    Examples:
      trajledger impact cartpole-random
      trajledger impact cartpole-random --format html --out impact.html
    """
    from trajledger.verify.errors import VerificationError

    from .lineage import affected, incomplete, qualified, render

    not_a_bundle(ref, "impact", ctx)
    fmt = _format(fmt, as_json)
    ledger = ctx.ledger()
    graph = ledger.impact(ref, policy=_policy(ledger, policy_file))
    names = qualified(ledger, graph)  # an imported one whose plain name is yours too by its
    _emit(render(graph, fmt, names), out)  # origin-qualified name (out48; the trees: out49)
    hit = affected(graph)
    if hit:
        from trajledger.verify.nodes import NAMED

        # a name escaped as the report's are (signed text: rev47 finding 3)
        click.echo(
            f"{len(hit)} checkpoint(s) reached: "
            + ", ".join(names.get(n.id, "").translate(NAMED)
                        or (n.label if not n.name else f"{n.name}@{n.version}".translate(NAMED))
                        for n in hit),
            err=True,
        )
    released = affected(graph, ("release",))
    if released:  # out46: "which releases must be withdrawn?"
        failing = graph.failing()
        bad = [r for r in released if r.id in failing]
        click.echo(
            f"{len(released)} release(s) reached"
            + (", failing with it: " if bad else ": ")
            + ", ".join(f"{r.label} at log index {r.index}" for r in bad or released)
            + (f"; {len(released) - len(bad)} not failing" if bad and len(bad) < len(released)
               else "")
            + ("; whoever holds their bundles learns of it from an update ('trajledger export "
               "--updates-since SIZE', SIZE: the log size they hold; docs/third-party.md)"
               if bad else ""),
            err=True,
        )
    damaged = incomplete(graph)
    n, failed = graph.count()
    if failed and not damaged:  # out36 finding 5: the verdict, not only the report's
        warn(f"impact {ref}: {failed} of {n} checks failed, so what is marked failing in the "
             "report fails through it ('trajledger verify REF' of each says why); the answer "
             "is whole: exit 0")
    if damaged:
        raise VerificationError(f"impact {ref}: the answer may be incomplete: "
                                f"{len(damaged)} problem(s) of damaged evidence\n"
                                + "\n".join(damaged))


COMMANDS = [lineage, impact]
