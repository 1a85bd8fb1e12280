"""Commands of the audit index: reindex, query, stats (docs/audit-index.md).

Each command parses, calls one function of ``ledger.index`` and renders the result. The index
and lancedb load inside the commands, so ``trajledger --help`` stays light. A filter or column
the index cannot use is a usage error: one ``FAIL:`` line and exit code 2.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from .clikit import (
    EXIT_USAGE,
    Context,
    Group,
    emit_json,
    fail,
    ok,
    pass_ctx,
    progress,
    visible,
    warn,
)

__all__ = ["COMMANDS"]

F = TypeVar("F", bound=Callable[..., Any])

_EPISODE_COLUMNS = (
    "batch",
    "episode_id",
    "env_version",
    "policy_version",
    "return",
    "num_steps",
    "termination_reason",
)
_ARTIFACT_COLUMNS = ("log_index", "kind", "ref", "digest", "time", "revoked", "erased")


@contextmanager
def _usage_errors() -> Iterator[None]:
    """A `QueryError` becomes one FAIL line and exit code 2 (usage), not 3."""
    from .index import QueryError

    try:
        yield
    except QueryError as e:
        fail(str(e))
        raise click.exceptions.Exit(EXIT_USAGE) from e


def _progress(ctx: Context) -> Callable[[int, str], Any]:
    """A progress bar for batches indexed on the way (quiet with --quiet or no terminal)."""
    return lambda total, label: progress(total, label, quiet=ctx.quiet)


def _split(value: str | None) -> list[str]:
    return [c.strip() for c in (value or "").split(",") if c.strip()]


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list):
        return ",".join(_cell(x) for x in v)
    s = str(v)
    return s[:19] + "…" if s.startswith("sha256:") and len(s) == 71 else s


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    rows = [[visible(c) for c in r] for r in rows]  # cells hold what signers chose: names...
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    for line in [list(header), *rows]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())


@click.command()
@click.option("--check", is_flag=True,
              help="Read only: derive your trust state's rows and the audit index again from "
              "the log and the store and report every table that disagrees (exit 1), "
              "rebuilding nothing.")
@pass_ctx
def reindex(ctx: Context, check: bool) -> None:
    """Rebuild the derived indexes from the log: your trust state's index of the log (names,
    references, revocations; kept in $TRAJLEDGER_STATE_DIR) and the audit index.

    Both are derived data. The trust state's index is re-read from the whole log, which must
    still extend the checkpoint you saw before (that floor is kept: a rollback stays refused).
    The audit index (<ledger>/index/lance/) is one nothing is verified against: query and
    stats keep it current, so rebuilding is only needed when fsck or a command says it is
    damaged; the cached episode features of batches recorded before features were kept
    (<ledger>/index/features/) are dropped with it. Both passes show progress.

    With --check, nothing is rebuilt: the rows of your trust state that decide what is revoked,
    erased, held out or built on are derived again from the log and compared, and so is the
    audit index, as far as it is built (its log entries, and the batches it indexed, derived
    again in a temporary directory: about as long as rebuilding those); what disagrees
    (edited by a writer of your state directory or of the ledger) exits 1, naming each table.

    \b
    Examples:
      trajledger reindex --check
      trajledger reindex
    """
    if check:
        _check_state(ctx)
        return
    from .index import reindex as rebuild

    ledger = ctx.ledger()
    with progress(ledger.log.size, "reading the log", quiet=ctx.quiet) as advance:
        ledger.rebuild_trust_state(on_progress=advance)
    with progress(ledger.log.size, "indexing log entries", quiet=ctx.quiet) as advance:
        result = rebuild(ledger, on_progress=advance, progress=_progress(ctx))
    ok(
        f"index rebuilt: {result.entries} log entries, {result.batches} batch(es), "
        f"{result.episodes} episode(s)"
    )


def _check_state(ctx: Context) -> None:
    """``reindex --check``: the trust state's rows and the audit index against the log (and
    the store), read only."""
    from trajledger.verify.errors import VerificationError

    from .index import Index

    ledger = ctx.ledger()
    state = ledger.log_state(ledger.log_vkey() or ledger.log.vkey)
    index = Index(ledger)
    problems = state.disagreements(ledger.log.entries, ledger.read_blob)
    problems += index.disagreements()
    if problems:
        raise VerificationError("\n".join(problems))
    ok(f"trust state {state.path}: its {state.size} indexed entries and every row derived from "
       "them agree with the log")
    ok(f"audit index {index.dir}: agrees with the log and the store, as far as it is built")


def _query_options(f: F) -> F:
    for option in reversed(
        [
            click.option(
                "--where",
                metavar="SQL",
                help='Filter as LanceDB (DataFusion) SQL, e.g. "return > 100 AND '
                "env_version = 'cartpole@1'\".",
            ),
            click.option("--columns", metavar="COL[,COL]", help="Columns to show."),
            click.option(
                "--limit",
                type=click.IntRange(min=0, max=2**31 - 1),
                default=50,
                show_default=True,
                help="At most this many rows (up to 2147483647); 0 for all.",
            ),
            click.option("--json", "as_json", is_flag=True, help="Print JSON rows (all columns)."),
        ]
    ):
        f = option(f)
    return f


def _run_query(
    ctx: Context,
    table: str,
    default: Sequence[str],
    where: str | None,
    columns: str | None,
    limit: int,
    as_json: bool,
    within: str | None = None,
) -> None:
    from .index import query_table

    cols = _split(columns) or (None if as_json else list(default))
    probe = limit + 1 if 0 < limit < 2**31 - 1 else limit  # one more: were rows cut off?
    ledger, digest, batches = ctx.ledger(), "", None
    with _usage_errors():
        if within is not None:  # resolved once: the rows and the warnings below are of one REF
            from .catalog import Catalog
            from .index import Index

            item = Catalog(ledger).resolve(within, {"rollout-batch", "dataset", "checkpoint"})
            digest, batches = item.digest, Index(ledger).batches_of(item.digest, item.kind)
        result = query_table(ledger, table, where, columns=cols, limit=probe or None,
                             batches=batches, progress=_progress(ctx), note=warn)  # fmt: skip
    rows = result.to_pylist()
    if 0 < limit < len(rows):  # a script's --json count would be short without a word
        rows, result = rows[:limit], result.slice(0, limit)
        warn(f"{table}: more rows match than the {limit} shown (--limit {limit}; rows come in "
             "no particular order): give --limit 0 for all, or a narrower --where")  # fmt: skip
    if as_json:
        emit_json(rows)
    else:
        names = result.column_names
        _print_table(names, [[_cell(r[c]) for c in names] for r in rows])
    if batches is not None:  # as `stats REF` says it (its rows were listed without a word)
        for w in _retracted(ledger, digest, batches, "rows", erasures=False):
            warn(w)  # (an erasure: the index's own line says its rows are left out)
    ok(f"{len(rows)} row(s) of {table}")


@click.group(cls=Group)
def query() -> None:
    """Query the audit index with SQL filters (derived data: nothing is verified).

    \b
    Example:
      trajledger query episodes --where "return > 100" --in cartpole-train@1
    """


@query.command("episodes")
@_query_options
@click.option(
    "--in", "within", metavar="REF", help="Only episodes of this batch, dataset or checkpoint."
)
@pass_ctx
def query_episodes(
    ctx: Context,
    where: str | None,
    columns: str | None,
    limit: int,
    as_json: bool,
    within: str | None,
) -> None:
    """Episodes matching --where, one row per episode of every batch (--in: of REF's batches).

    Batches whose episodes are not indexed yet are indexed first (a progress bar shows it).
    Columns: batch, batch_index, episode_id, task_id, env_version, policy_version, seed,
    return, num_steps, termination_reason, success, judge_scores, judge_score, cost_usd,
    language, task_type, invalid, safety_interventions, modality, fingerprint.

    \b
    Example:
      trajledger query episodes --where "return > 100" --in cartpole-train@1
    """
    _run_query(ctx, "episodes", _EPISODE_COLUMNS, where, columns, limit, as_json, within)


@query.command("artifacts")
@_query_options
@pass_ctx
def query_artifacts(
    ctx: Context, where: str | None, columns: str | None, limit: int, as_json: bool
) -> None:
    """Log entries matching --where, one row per entry (batches, datasets, approvals...).

    Columns: log_index, kind, digest, envelope, name, version, ref, time, signers, split,
    purpose, expires, env, env_digest, evaluator, evaluator_digest, policy_version,
    num_episodes, num_steps, batches, datasets, reason, revoked, erased, data,
    episodes_indexed.

    The revoked and erased cells of the rows returned are your trust state's (the log holds
    a revocation, an erasure, of the digest): where the index holds another value (edited),
    the trust state's is printed, --json too, with a WARNING naming the row. A row that an
    edited flag keeps out of a --where filter is not returned: only 'trajledger reindex
    --check' finds it.

    \b
    Example:
      trajledger query artifacts --where "kind = 'approval'" --json
    """
    _run_query(ctx, "artifacts", _ARTIFACT_COLUMNS, where, columns, limit, as_json)


def _short(text: str) -> str:
    return re.sub(r"sha256:[0-9a-f]{64}", lambda m: m[0][:19] + "…", text)


def _money(v: float | None) -> str:
    return "-" if v is None else f"${v:.4f}"


def _num(v: float | None, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def _stats_row(label: str, m: Any) -> list[str]:
    judge = "-" if m.judge_agreement is None else f"{m.judge_agreement:.3f} (n={m.judged})"
    success = "-" if m.success_rate is None else f"{m.success_rate:.3f} (n={m.labelled})"
    return [
        _short(label),
        str(m.episodes),
        success,
        _num(m.mean_return, ".4g"),
        _num(m.mean_length, ".4g"),
        _num(m.invalid_rate),
        _num(m.intervention_rate),
        judge,
        _money(m.cost_per_episode),
        _money(m.cost_per_success),
    ]


@click.command()
@click.argument("ref")
@click.option("--by", "by", metavar="COL[,COL]", help="Episode columns to segment by.")
@click.option(
    "--judge", "judge_key", metavar="NAME", help="Judge score to use (default: mean of scores); "
    "also reports the judge's agreement with the expert labels of the calibration dataset its "
    "newest evaluator version names."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def stats(ctx: Context, ref: str, by: str | None, judge_key: str | None, as_json: bool) -> None:
    """Episode statistics of a batch, dataset or checkpoint, segmented --by columns.

    A checkpoint's episodes are those of the datasets it was trained on; its evaluations are
    listed after the table. Per segment: success rate, mean return and length,
    invalid-action and safety-intervention rates, judge agreement, cost per episode and per
    solved task. A segment far below the aggregate (more than 2 standard errors and 20%)
    gets a WARNING line. With --judge NAME, a judge is called calibrated only on the expert
    labels of the calibration dataset its evaluator version names. The figures are the audit
    index's, not a verdict: a revocation or erasure of REF or of one of its batches, and a
    record of theirs signed by a key the policy in force declares compromised, each get a
    WARNING line (exit 0; 'trajledger verify REF' judges).

    \b
    Example:
      trajledger stats chat@1 --by language --judge gpt-judge
    """
    from .index import segment_stats

    with _usage_errors():
        report = segment_stats(
            ctx.ledger(), ref, _split(by), judge_key=judge_key, progress=_progress(ctx), note=warn
        )
    if as_json:
        emit_json(report.to_json())
    else:
        click.echo(visible(
            f"{report.kind} {report.ref} ({report.digest[:19]}…): {len(report.batches)} "
            f"batch(es), {report.aggregate.episodes} episode(s)"
            + (f", by {', '.join(report.by)}" if report.by else "")
        ))
        header = [
            "segment", "episodes", "success", "return", "length", "invalid", "interv.",
            "judge agr.", "cost/ep", "cost/solved",
        ]  # fmt: skip
        rows = [_stats_row("(all)", report.aggregate)]
        rows += [_stats_row(s.label, s.metrics) for s in report.segments]
        _print_table(header, rows)
        for e in report.evaluations:
            click.echo(visible(f"evaluation {e.digest[:19]}… (log index {e.index}) on "
                               f"{e.suite}: {e.result}, success rate {e.success_rate:.3f} "
                               f"over {e.episodes} episode(s)"))
        c = report.calibration
        if c is not None:
            state = (f"calibrated: agreement {c.agreement:.3f} with expert labels (n={c.judged})"
                     if c.agreement is not None else "NOT calibrated")
            click.echo(visible(f"judge {c.judge}: {state}; {c.why}"))
    for w in report.warnings:
        warn(_short(w))
    for w in _retracted(ctx.ledger(), report.digest, report.batches):
        warn(w)
    ok(f"stats of {report.kind} {report.ref}")


def _retracted(
    ledger: Any, digest: str, batches: Sequence[str], what: str = "figures", erasures: bool = True
) -> Iterator[str]:
    """A warning for each revocation or erasure the log holds about ``digest``, one of its
    ``batches`` or, for a checkpoint, one of its base checkpoints or the datasets it and they
    were trained on (`_lineage`; out56: a dataset or a parent revoked after training was not
    said, though every verify of the checkpoint fails on it),
    and for each of their records signed by a key the policy in force declares compromised
    (``revoked_keys``): the figures (``what``) come from the audit index, derived and
    unverified by design, and must not read as a clean bill (whether a retraction or a
    signature counts is the verifier's to say)."""
    from .index import Index
    from .policy_state import current_policy

    datasets = _lineage(ledger, Index(ledger), digest)
    state = ledger.trust_state()
    in_force = current_policy(ledger)
    verdict = (f"these {what} are the audit index's, not a verdict: run 'trajledger verify' "
               "or 'trajledger impact' on it")
    kinds = ("revocation", "erasure") if erasures else ("revocation",)
    for d in dict.fromkeys((digest, *datasets, *batches)):  # (a batch is its own: once)
        for i in state.about(d):
            e = state.entry(i)
            if e is not None and e.kind in kinds:
                yield (f"{d[:19]}…: the log holds {'an' if e.kind == 'erasure' else 'a'} "
                       f"{e.kind} of it (log index {i}); {verdict}")
            elif e is not None and in_force is not None and e.kind in _RECORDS:
                for keyid in e.signers:
                    rk = in_force[1].revocation(keyid, i, e.time)
                    if rk is not None:
                        yield (f"{d[:19]}…: its {e.kind} record (log index {i}) is signed by "
                               f"key {keyid[:12]}, which the policy in force declares "
                               f"{rk.describe()}; {verdict}")


def _lineage(ledger: Any, index: Any, digest: str) -> list[str]:
    """For a checkpoint: its base checkpoints (read from their records' statements, unverified,
    as everything here) and the datasets it and they were trained on (the index's rows);
    nothing for another kind. What `_retracted` looks at besides the batches."""
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.errors import ProvenanceError
    from trajledger.verify.kinds import KINDS
    from trajledger.verify.statement import Statement

    out: dict[str, None] = {}
    todo = [digest]
    while todo:
        row = index.artifact(ck := todo.pop(), "checkpoint")
        if row is None:
            continue
        out.update(dict.fromkeys(row["datasets"] or []))
        try:
            statement = Statement.from_bytes(
                Envelope.from_bytes(ledger.store.get(row["envelope"])).payload)
            kind = KINDS["checkpoint"]
            bases = [d.digest for d in kind.dependencies(kind.read(statement, ck))
                     if d.role == "base-checkpoint"]
        except (ProvenanceError, OSError):  # (unreadable: verify says so; nothing to add)
            continue
        todo += [b for b in bases if b not in out and b != digest]
        out.update(dict.fromkeys(bases))
    return list(out)


_RECORDS = frozenset({"rollout-batch", "dataset", "checkpoint"})
"""The records ``stats`` sums (a checkpoint's, its datasets' batches)."""


COMMANDS = [reindex, query, stats]
