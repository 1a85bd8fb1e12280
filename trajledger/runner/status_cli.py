"""The commands that record what an artifact's status is: approve, revoke (an artifact, or an
approval: withdrawn) and erase. Listed among the runner's commands (``runner.commands``).

Each parses its options, calls one library function and renders the result.
"""

from __future__ import annotations

from typing import Any

import click

from trajledger.ledger.clikit import (
    DURATION,
    JSON_OPTION,
    KEY_NAME,
    Context,
    emit_result,
    ok,
    pass_ctx,
    warn,
)

__all__ = ["approve", "erase", "revoke"]


@click.command()
@click.argument("ref")
@click.option("--key", required=True, type=KEY_NAME, help="Approver key.")
@click.option("--purpose", default="train", show_default=True,
              help="What the data is approved for.")
@click.option("--expires", type=DURATION, default="30d", show_default=True,
              help="How long the approval lasts (e.g. 30d, 12h).")
@click.option("--note", help="Free text kept with the approval.")
@JSON_OPTION
@pass_ctx
def approve(
    ctx: Context, ref: str, key: str, purpose: str, expires: str, note: str | None, as_json: bool
) -> None:
    """Approve a dataset or batch for a purpose, until an expiry; prints the approval's
    envelope digest.

    \b
    Example:
      trajledger approve cartpole-train@1 --key approver-a --expires 30d
    """
    rec = ctx.ledger().approve(ref, key=key, purpose=purpose, expires=expires, note=note)
    ok(f"{ref} approved for {purpose!r} by {key} for {expires} (log index {rec.index})")
    emit_result(as_json, rec.envelope_digest,
                _status_json("approval", rec) | {"purpose": purpose, "expires": expires})


@click.command()
@click.argument("ref")
@click.option("--key", required=True, type=KEY_NAME, help="Producer or approver key.")
@click.option("--reason", required=True, help="Why it must no longer be used.")
@click.option("--approval", is_flag=True,
              help="Withdraw REF's approval (REF: the dataset or batch), not REF itself.")
@click.option("--by", metavar="KEYID",
              help="With --approval: the one this key signed (a keyid or its prefix).")
@JSON_OPTION
@pass_ctx
def revoke(ctx: Context, ref: str, key: str, reason: str, approval: bool, by: str | None,
           as_json: bool) -> None:
    """Revoke an artifact (its lineage fails verification; see 'trajledger impact') or withdraw
    an approval (REF: the digest 'approve' printed, or, with --approval, the dataset or batch
    it approves; it no longer counts, for earlier uses too).

    \b
    Example:
      trajledger revoke cartpole-random --key approver-a --reason "PII in episode 12"
      trajledger revoke cartpole-train@1 --approval --by 3f2a… --key approver-a --reason \
        "approved the wrong version"
    """
    if by is not None and not approval:
        raise click.UsageError("--by is for --approval (whose approval to withdraw)")
    if approval:
        index, rec = ctx.ledger().withdraw(ref, key=key, reason=reason, by=by)
        ok(f"{ref}: approval at log index {index} withdrawn (log index {rec.index})")
    else:
        rec = ctx.ledger().revoke(ref, key=key, reason=reason)
        ok(f"{ref} revoked (log index {rec.index})")
    emit_result(as_json, rec.envelope_digest, _status_json("revocation", rec) | {"reason": reason})


@click.command()
@click.argument("ref")
@click.option("--key", required=True, type=KEY_NAME, help="Producer or approver key.")
@click.option(
    "--reason",
    required=True,
    type=click.Choice(["retention", "consent", "legal"]),
    help="Why the data is erased.",
)
@JSON_OPTION
@pass_ctx
def erase(ctx: Context, ref: str, key: str, reason: str, as_json: bool) -> None:
    """Erase an artifact's data: blobs deleted, digests and signed records kept.

    \b
    Example:
      trajledger erase cartpole-random --key approver-a --reason consent
    """
    rec, deleted, kept = ctx.ledger().erase(ref, key=key, reason=reason)
    if kept:
        holders = sorted(set(kept.values()))
        warn(f"{ref}: {len(kept)} blob(s) kept: also a file of {', '.join(holders)} (not erased; "
             "the store keeps one blob per content): erase that too to delete them")
    if rec.new:
        ok(f"{ref} erased ({reason}): {deleted} blob(s) deleted, record at log index {rec.index}")
    else:  # an erase that had not finished: its record stands, no second one
        ok(f"{ref} erased: {deleted} blob(s) deleted that the erasure at log index {rec.index} "
           "lists and the store still held (nothing new recorded)")
    emit_result(as_json, rec.envelope_digest,
                _status_json("erasure", rec) | {"reason": reason, "deleted": deleted,
                                                "kept": {b: kept[b] for b in sorted(kept)}})


def _status_json(kind: str, rec: Any) -> dict[str, Any]:
    """``--json`` of a record about an artifact (approval, revocation, erasure): stdout's
    text is its envelope digest (what 'trajledger show' takes)."""
    return {"kind": kind, "subject": rec.digest, "envelope": rec.envelope_digest,
            "logIndex": rec.index, "new": rec.new}
