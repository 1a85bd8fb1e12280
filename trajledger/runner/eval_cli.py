"""``trajledger eval`` and ``trajledger release``: evaluations as records, verifiable releases.

Each parses its options, calls one method of the public API (``release --dry-run``:
`runner.release.judge_release`, which records nothing) and renders the result
(docs/evaluations.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from trajledger.ledger.clikit import (
    JSON_OPTION,
    KEY_NAME,
    OUT_DIR,
    Context,
    emit_json,
    emit_result,
    ok,
    pass_ctx,
    verdict_follows,
    visible,
)

from .commands import ALLOW_ENV_MODULE_OPTION, POLICY_OPTION, command_policy

T = TypeVar("T")

if TYPE_CHECKING:
    from trajledger.verify.other_predicates import Release
    from trajledger.verify.report import Report

__all__ = ["COMMANDS"]


@click.command("eval")
@click.argument("checkpoint")
@click.option("--suite", required=True, help="Holdout or regression dataset (NAME@VERSION or "
              "digest) to evaluate on.")
@click.option("--key", required=True, type=KEY_NAME, help="Evaluator key (roles.evaluator); a "
              "sealed suite is opened with the X25519 key of the same name (--unseal-key to name "
              "another).")
@click.option("--evaluator", "evaluator_ref", help="Registered evaluator version the evaluation "
              "names (NAME@VERSION or digest).")
@click.option("--pass-return", type=float, help="Built-in evaluator: an episode passes with at "
              "least this return [default: the environment spec's reward_threshold].")
@click.option("--max-steps", type=click.IntRange(min=1), help="Built-in evaluator: cut "
              "episodes at this many steps.")
@click.option("--output", type=OUT_DIR,
              help="Where results.json (and COMMAND's outputs) go, new or empty, kept "
              "[default: a temporary directory, removed].")
@click.option("--keep-logs", is_flag=True, help="Also store COMMAND's stdout and stderr with the "
              "evaluation (only their digests otherwise).")
@click.option("--unseal-key", metavar="NAME", type=KEY_NAME, help="X25519 key "
              "(keys/x25519/NAME) that opens a sealed suite [default: the --key name].")
@ALLOW_ENV_MODULE_OPTION
@POLICY_OPTION
@JSON_OPTION
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARGS]...]")
@pass_ctx
def eval_(
    ctx: Context,
    checkpoint: str,
    suite: str,
    key: str,
    evaluator_ref: str | None,
    pass_return: float | None,
    max_steps: int | None,
    output: Path | None,
    keep_logs: bool,
    unseal_key: str | None,
    allow_env_module: tuple[str, ...],
    policy_file: Path | None,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Evaluate CHECKPOINT on a holdout or regression suite; record a signed evaluation.

    \b
    Built in (no COMMAND), for checkpoints of the built-in trainers on Gymnasium
    environments: each suite episode's seed is replayed with the checkpoint's policy; an
    episode passes when its return reaches --pass-return. An imported environment whose
    Gymnasium id names a module to import (MODULE:ID) is refused unless --allow-env-module
    MODULE names it.
    With a COMMAND: it gets $TRAJLEDGER_CHECKPOINT_DIR (the checkpoint's files),
    $TRAJLEDGER_SUITE_DIR (the suite's verified data, read-only) and an empty
    $TRAJLEDGER_OUTPUT_DIR, and writes results.json there: every suite episode once,
    {"format": "trajledger.eval-results/1", "episodes": [{"batch": "sha256:...",
    "episode_id": "...", "passed": true, "metrics": {...}}], "metrics": {...}}.

    \b
    Examples:
      trajledger eval ppo@3 --suite regression@3 --key evaluator --pass-return 195
      trajledger eval sft@1 --suite holdout@1 --key evaluator -- python judge.py

    The checkpoint's lineage and the suite must verify first. A sealed suite is opened only
    after an unsealing record is logged. A failing COMMAND, a changed input or invalid
    results record nothing (exit 1); the evaluation's digest is printed on stdout.
    """
    ledger = ctx.ledger()
    if command and (pass_return is not None or max_steps is not None):
        raise click.UsageError("--pass-return and --max-steps are for the built-in evaluator, "
                               "not with a COMMAND")
    if not command and keep_logs:
        raise click.UsageError("--keep-logs goes with a COMMAND (after '--')")
    if command and allow_env_module:
        raise click.UsageError("--allow-env-module is for the built-in evaluator (it replays the "
                               "suite's environments), not with a COMMAND")
    out = ledger.evaluate(
        checkpoint, suite, key=key, command=list(command) if command else None,
        evaluator=evaluator_ref, pass_return=pass_return, max_steps=max_steps,
        policy=command_policy(ctx, ledger, policy_file), output=output, keep_logs=keep_logs,
        unseal_key=unseal_key, allow_env_modules=allow_env_module,
    )
    ev = out.evaluation
    sealed = f"; unsealing logged at {out.unsealing}" if out.unsealing is not None else ""
    from trajledger.ledger.catalog import qualified_digest  # (after a clash: out50)

    refs = (("checkpoint", ev.checkpoint), ("dataset", ev.suite))
    ck, suite = _recorded_name(
        lambda: [qualified_digest(ledger, kind, a.name, a.version, a.digest) for kind, a in refs],
        [f"{a.name}@{a.version}" for _kind, a in refs])
    ok(f"evaluation of {ck} on {suite} recorded at log index {out.index}: "
       f"{len(ev.passed_tests)} of {len(ev.passed_tests) + len(ev.failed_tests)} episode(s) "
       f"passed (success rate "
       f"{ev.success_rate:.3f}){sealed}")
    emit_result(as_json, out.digest, {
        "kind": "evaluation", "digest": out.digest, "logIndex": out.index,
        "checkpoint": {"name": ev.checkpoint.name, "version": ev.checkpoint.version,
                       "digest": ev.checkpoint.digest},
        "suite": {"name": ev.suite.name, "version": ev.suite.version, "digest": ev.suite.digest},
        "passed": len(ev.passed_tests), "failed": len(ev.failed_tests),
        "successRate": ev.success_rate, "unsealing": out.unsealing})


@click.command()
@click.argument("checkpoint")
@click.option("--key", "keys", multiple=True, type=KEY_NAME,
              help="Approver key (roles.approver); repeat when [release] approvals > 1.")
@click.option("--note", help="Free text kept with the release.")
@click.option("--dry-run", is_flag=True,
              help="Judge only: exit 0 when the release would be recorded, 1 when not; "
                   "nothing is signed or recorded (--key optional: its public half is read).")
@click.option("--json", "as_json", is_flag=True, help="Print the decision's report as JSON.")
@POLICY_OPTION
@pass_ctx
def release(
    ctx: Context,
    checkpoint: str,
    keys: tuple[str, ...],
    note: str | None,
    dry_run: bool,
    as_json: bool,
    policy_file: Path | None,
) -> None:
    """Release CHECKPOINT when the policy's [release] holds; prints the release's digest.

    The checkpoint's whole lineage must verify, and for each [[release.require]] the latest
    evaluation of the checkpoint on the suite NAME@VERSION, signed by an evaluator key, must
    exist and meet min / max, and drop no more than max_drop from its parent's evaluation on
    the same suite. Otherwise exit 1 with one line per missing or failing evaluation, and
    nothing is recorded. An evaluation counted that did not compare its suite with every train
    batch (older, other tooling, or data erased) is a NOTE line, and a FAIL under the policy's
    [release] require_contamination_check = true (or [contamination] refuse = "near", which
    implies it). Run again on the same evaluations
    (a CI job retried), it answers with the release that stands and records nothing. Anyone
    verifies the release offline from its bundle ('trajledger export RELEASE', then
    'python -m verify BUNDLE --policy P').

    \b
    Example:
      trajledger release ppo@3 --key approver-a
      trajledger release ppo@3 --dry-run      # is it releasable? exit 0 / 1, nothing recorded
    """
    from trajledger.ledger.catalog import qualified_ref

    from .lineage import named_json, qualified
    from .release import ReleaseRefusedError, judge_release

    if not keys and not dry_run:
        raise click.UsageError("give the approver key(s) that sign the release: --key NAME "
                               "(a --dry-run may go without)")
    ledger = ctx.ledger()
    policy = ledger.policy(command_policy(ctx, ledger, policy_file))
    try:
        if dry_run:
            judged = judge_release(ledger, checkpoint,
                                   [(k, ledger.keys.public(k).keyid) for k in keys], policy)
        else:
            out = ledger.release(checkpoint, key=list(keys), note=note, policy=policy)
    except ReleaseRefusedError as e:
        if as_json:
            with verdict_follows():
                emit_json({"released": False, "releasable": False, "dryRun": dry_run,
                           "next": e.next, "report": named_json(e.report.to_json(), qualified(
                               ledger, e.report))})
        raise
    if dry_run:
        held = judged.held
        again = ("" if held is None else f"; released already at log index {held.index} "
                 f"({held.digest}), which 'release' answers with")
        ref = qualified_ref(ledger, judged.ref)  # (an imported one after a clash: out50)
        ok(f"release of {ref}: releasable on {len(judged.evaluations)} "
           f"evaluation(s) under policy {policy.name!r} serial {policy.serial} (dry run: "
           f"nothing was signed or recorded){again}"
           f"{_note_fate(note, None if held is None else held.release, True)}")
        _unchecked(judged.report, ref)
        if as_json:
            emit_json({"released": held is not None, "releasable": True, "dryRun": True,
                       "digest": None if held is None else held.digest,
                       "logIndex": None if held is None else held.index,
                       "evaluations": list(judged.evaluations),
                       "note": note, "noteKept": note is not None and held is None,
                       "report": named_json(judged.report.to_json(),
                                            qualified(ledger, judged.report))})
        return
    r = out.release
    names: dict[str, str] = _recorded_name(lambda: qualified(ledger, out.report), {})
    ck = names.get(r.checkpoint.digest, f"{r.checkpoint.name}@{r.checkpoint.version}")
    name = f"release of {ck}"
    if out.recorded:
        ok(f"{name} recorded at log index {out.index} on {len(r.evaluations)} evaluation(s)")
    else:
        ok(f"{name}: released already at log index {out.index} on the same "
           f"{len(r.evaluations)} evaluation(s) under policy {policy.name!r} serial "
           f"{policy.serial}; nothing new was recorded (a new evaluation, a new release)"
           f"{_note_fate(note, r, False)}")
    _unchecked(out.report, ck)
    emit_result(as_json, out.digest, {
        "released": True, "releasable": True, "dryRun": False, "recorded": out.recorded,
        "digest": out.digest, "logIndex": out.index,
        "report": named_json(out.report.to_json(), names)})


def _recorded_name(names: Callable[[], T], plain: T) -> T:
    """``names()``, the qualified names of what was just recorded (out50), or ``plain`` when
    the user's state cannot be read then: the record stands, and its ``OK:`` line says so."""
    import sqlite3

    from trajledger.ledger.errors import LedgerError

    try:
        return names()
    except (LedgerError, OSError, sqlite3.Error):
        return plain


def _unchecked(report: Report, ck: str) -> None:
    """A ``NOTE:`` line per evaluation the release counts that did not compare its suite with
    every train batch of the checkpoint's lineage (``verify.releases.unchecked``; the
    decision's ``info`` check in --json): it counts, and the user learns it was not checked
    (out47 finding 3; rel48: its unchecked batches too); and one per evaluation in another
    environment version than the checkpoint was trained in (out56)."""
    from trajledger.ledger.user_state import notice

    for node in report.nodes.values():
        for c in node.checks if node.kind == "release-decision" else ():
            if c.status == "info" and c.what.startswith(("contamination on ",
                                                          "environment on ")):
                notice(visible(f"release of {ck}: {c.what}: {c.detail}"))


def _note_fate(note: str | None, held: Release | None, dry: bool) -> str:
    """What becomes of ``--note`` (out45): kept with the release a dry run would record, or
    not kept where ``held``, the release that stands, is the answer; nothing said of none."""
    if note is None:
        return ""
    if held is None:
        return f"; the note {note!r} would be kept with it"
    if held.note == note:
        return f"; the release that stands has the same note {note!r}"
    has = "none" if held.note is None else f"its own ({held.note!r})"
    return (f"; the note {note!r} {'would not be' if dry else 'was not'} kept: the release "
            f"that stands has {has}")


COMMANDS = [eval_, release]
