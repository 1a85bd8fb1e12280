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


_SIGSTORE = click.option(
    "--sigstore", is_flag=True,
    help="Sign keylessly (Sigstore; the OIDC identity token from SIGSTORE_ID_TOKEN or the CI; "
    "needs network and trajledger[sigstore]) instead of with --key; docs/sigstore.md.")


def _signer(key: str | None, sigstore: bool) -> Any:
    """The key's name, or the keyless signer ``--sigstore`` asks for (one of the two)."""
    if (key is None) == (not sigstore):
        raise click.UsageError("give --key NAME or --sigstore (one of them)")
    from trajledger.ledger.sigstore_sign import KeylessSigner

    return key if key is not None else KeylessSigner.from_environment()


def _by(key: str | None, signer: Any) -> str:
    """Who signed, for the line: the key's name, or the keyless identity."""
    return key or ", ".join(f"keyless signature by {k.subject} (issuer {k.issuer})"
                            for k in getattr(signer, "signed", [])) or "a keyless signature"


@click.command()
@click.argument("ref")
@click.option("--key", type=KEY_NAME, help="Approver key.")
@_SIGSTORE
@click.option("--purpose", default="train", show_default=True,
              help="What the data is approved for.")
@click.option("--expires", type=DURATION, default="30d", show_default=True,
              help="How long the approval lasts (e.g. 30d, 12h).")
@click.option("--note", help="Free text kept with the approval.")
@JSON_OPTION
@pass_ctx
def approve(
    ctx: Context, ref: str, key: str | None, sigstore: bool, purpose: str, expires: str,
    note: str | None, as_json: bool,
) -> None:
    """Approve a dataset or batch for a purpose, until an expiry; prints the approval's
    envelope digest.

    REF is the dataset (NAME@VERSION) or rollout batch (its name) to approve, or its digest
    ('trajledger show REF' shows what it names). Training on a dataset needs as many
    approvals as the policy's approvers threshold ('trajledger admit DATASET' says how many
    are missing).

    \b
    Example:
      trajledger approve cartpole-train@1 --key approver-a --expires 30d
      trajledger approve cartpole-train@1 --sigstore
    """
    signer = _signer(key, sigstore)
    longer = _longer_than_counted(ctx, expires)  # (read before: nothing is read after the append)
    rec = ctx.ledger().approve(ref, key=signer, purpose=purpose, expires=expires, note=note)
    if longer is not None:
        warn(longer)
    ok(f"{ref} approved for {purpose!r} by {_by(key, signer)} for {expires} "
       f"(log index {rec.index})")
    emit_result(as_json, rec.envelope_digest,
                _status_json("approval", rec) | {"purpose": purpose, "expires": expires})


def _longer_than_counted(ctx: Context, expires: str) -> str | None:
    """The warning for an --expires past the policy in force's max_approval_age, which bounds
    how long the gate and the verifiers count an approval (None: within it, or no policy)."""
    from trajledger.ledger.policy_state import current_policy
    from trajledger.verify.policy import parse_duration

    in_force = current_policy(ctx.ledger())
    if in_force is None:
        return None
    policy, age = in_force[1], in_force[1].max_approval_age
    if parse_duration(expires, "--expires") <= age:
        return None
    shown = f"{age // 86400}d" if age % 86400 == 0 else f"{age}s"
    return (f"the policy in force {policy.name!r} counts an approval for at most {shown} after "
            f"the log takes it in (max_approval_age), so this one counts for {shown}, not "
            f"{expires}: approve again before then, or record a policy with a longer "
            "max_approval_age")  # fmt: skip


@click.command()
@click.argument("ref")
@click.option("--key", type=KEY_NAME, help="Producer or approver key.")
@click.option("--reason", required=True, help="Why it must no longer be used.")
@click.option("--approval", is_flag=True,
              help="Withdraw REF's approval (REF: the dataset or batch), not REF itself.")
@click.option("--by", metavar="KEYID",
              help="With --approval: the one this key signed (a keyid or its prefix).")
@click.option("--by-identity", "by_identity", metavar="SUBJECT",
              help="With --approval: the one this Sigstore identity signed keylessly (its "
              "certificate's subject: an email or URI).")
@_SIGSTORE
@JSON_OPTION
@pass_ctx
def revoke(ctx: Context, ref: str, key: str | None, reason: str, approval: bool,
           by: str | None, by_identity: str | None, sigstore: bool, as_json: bool) -> None:
    """Revoke an artifact (its lineage fails verification; see 'trajledger impact') or withdraw
    an approval (REF: the digest 'approve' printed, or, with --approval, the dataset or batch
    it approves; it no longer counts, for earlier uses too).

    \b
    Example:
      trajledger revoke cartpole-random --key approver-a --reason "PII in episode 12"
      trajledger revoke cartpole-train@1 --approval --by 3f2a… --key approver-a --reason \\
        "approved the wrong version"
      trajledger revoke cartpole-train@1 --approval --sigstore --reason "approved too early"
      trajledger revoke cartpole-train@1 --approval --by-identity alice@example.com \\
        --sigstore --reason "approved too early"
      trajledger revoke sha256:9c1e… --sigstore --reason "approved too early"
    """
    for given, option in ((by, "--by"), (by_identity, "--by-identity")):
        if given is not None and not approval:
            raise click.UsageError(f"{option} is for --approval (whose approval to withdraw)")
        if given is not None and not given.strip():  # (would name any approval: rev30)
            raise click.UsageError(f"{option} is empty: name the approval's " + (
                "key (a keyid or its prefix)" if option == "--by" else "Sigstore identity"))
    if by is not None and by_identity is not None:
        raise click.UsageError("--by or --by-identity (one of them): the approval's key, or "
                               "its keyless identity")
    if sigstore and not approval:
        from trajledger.ledger.status import approval_of

        if approval_of(ctx.ledger(), ref) is None:
            raise click.UsageError("--sigstore withdraws an approval: give its digest (what "
                                   "'approve' printed), or the dataset or batch with "
                                   "--approval; revoke an artifact with --key")
    if sigstore and by is not None:
        raise click.UsageError("--by names a key's approval; with --sigstore, withdraw the only "
                               "approval in force, name a keyless one with --by-identity "
                               "SUBJECT, or revoke the approval's digest with --key")
    signer = _signer(key, sigstore)
    reason_json: str | None = reason  # (a revocation found again: its first record's, hist39)
    if approval:
        index, rec = ctx.ledger().withdraw(ref, key=signer, reason=reason, by=by,
                                           by_identity=by_identity)
        ok(f"{ref}: approval at log index {index} withdrawn" + (
            f" by {_by(key, signer)}" if sigstore else "") + f" (log index {rec.index})" + (
            " (a keyless withdrawal counts if its identity approved it or is an approver's: "
            "verifiers judge it)" if sigstore else ""))
    elif sigstore:  # an approval's digest, withdrawn keylessly
        rec = ctx.ledger().revoke(ref, key=signer, reason=reason)
        ok(f"{ref}: approval withdrawn by {_by(key, signer)} (log index {rec.index}) (a keyless "
           "withdrawal counts if its identity approved it or is an approver's: verifiers "
           "judge it)")
    else:
        assert key is not None
        rec = ctx.ledger().revoke(ref, key=key, reason=reason)
        first = reason if rec.new else _first_reason(ctx, rec.envelope_digest)
        ok(f"{ref} revoked (log index {rec.index})" if rec.new else f"{ref}: revoked already "
           f"by {key} (log index {rec.index}" + ("" if first == reason else (
               f", reason {first!r}: the reason given now, {reason!r}, is not recorded"
               if first is not None else "; its reason cannot be read"))
           + "); nothing new was signed")
        reason_json = first
    emit_result(as_json, rec.envelope_digest,
                _status_json("revocation", rec) | {"reason": reason_json})


def _first_reason(ctx: Context, envelope: str) -> str | None:
    """The reason of the revocation ``envelope`` (a first record, found again: hist39), as
    signed; None when its statement cannot be read."""
    from trajledger.ledger.home import envelope_statement

    statement = envelope_statement(ctx.ledger(), envelope)
    reason = statement.predicate.get("reason") if statement is not None else None
    return reason if isinstance(reason, str) else None


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

    REF is the artifact (a rollout batch by its name, a dataset or checkpoint as
    NAME@VERSION, or a digest) whose files are deleted from the store, except those another
    artifact here also holds. Its manifest and every signed record stay, so a lineage through
    it still verifies and reports it erased; nothing is admitted for training on it again.

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
