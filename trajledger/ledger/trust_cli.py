"""The ``trust`` and ``upgrade`` commands: what this user pins, and bringing an older ledger up
to date.

``trust VKEY`` pins a log's key ahead of its first use (and, with ``--checkpoint``, a signed
checkpoint of it as the floor); ``trust --settings`` accepts a deliberate change of a ledger's
pinned settings (a moved store, group sharing); ``trust`` alone shows what this user holds about
the ledger. ``upgrade`` encrypts the plaintext keys of a ledger of trajledger 0.1.0 and records
it. Each command parses its options, calls the library and renders the result.
Spec: docs/SECURITY.md ("First use", "Pinned settings").
"""

from __future__ import annotations

from pathlib import Path

import click

from .clikit import VKEY, Context, emit_json, ok, pass_ctx, warn

__all__ = ["COMMANDS"]


def _sizes(_ctx: click.Context, _param: click.Parameter, value: str | None
           ) -> tuple[int, int] | None:
    """``HELD:NOW`` as two sizes."""
    if value is None:
        return None
    held, _, now = value.partition(":")
    if not (held.isdigit() and now.isdigit()):
        raise click.BadParameter(f"{value!r}: want HELD:NOW, the size of your floor and the "
                                 "checkpoint's (e.g. 22:21)")
    return int(held), int(now)


@click.command()
@click.argument("vkey", required=False, type=VKEY)
@click.option(
    "--checkpoint",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A signed checkpoint of that log, from its owner: pinned as your floor too (the log "
    "must never be smaller, nor fork from it).",
)
@click.option(
    "--settings",
    is_flag=True,
    help="Accept this ledger's current settings (a store you moved, group sharing you set) "
    "after a deliberate change that is refused otherwise.",
)
@click.option(
    "--accept-rollback",
    "rollback",
    metavar="HELD:NOW",
    callback=_sizes,
    help="With VKEY and --checkpoint: accept that the log is now that older checkpoint (a "
    "backup restored on purpose), restating the size of your floor and the checkpoint's "
    "(e.g. 22:21). It must be an older copy of the log you saw, not another history; your "
    "state keeps the record. Refused under TRAJLEDGER_REQUIRE_PIN=1.",
)
@click.option(
    "--clock-ahead",
    metavar="TIME",
    help="With VKEY: the time your state noted it was used at (TIME, as the clock note prints "
    "it) was a clock running ahead, not yours now: forget it, so that what expires is judged by "
    "your clock again. Refused under TRAJLEDGER_REQUIRE_PIN=1.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (when showing).")
@pass_ctx
def trust(
    ctx: Context, vkey: str | None, checkpoint: Path | None, settings: bool,
    rollback: tuple[int, int] | None, clock_ahead: str | None, as_json: bool
) -> None:
    """Pin a log's key ahead of its first use, accept a deliberate change of this ledger's
    settings, or show what you trust about this ledger.

    The first command that uses a log whose key you did not pin ahead trusts it as found and
    says so (a note with its key); with TRAJLEDGER_REQUIRE_PIN=1 it refuses instead. Get the
    vkey from the log's owner ('trajledger log info' prints it) and pin it before you use a
    copy of their ledger. Your pins live in your state directory, never in a ledger.

    A backup of a log restored on purpose is refused as a rollback until you accept the
    loss: give the restored log's checkpoint and restate the floor you hold and its size
    ('trust' shows your floor); 'trust' and 'monitor' say later that you did, and when.

    Your state remembers the newest time it was used at, and judges what expires no earlier.
    When a clock that ran ahead once (or a state copied from another machine) left that time
    ahead of your clock, which is right, forget it with --clock-ahead, restating that time as
    the clock note prints it.

    \b
    Examples:
      trajledger trust 'acme/rollouts+1a2b3c4d+AbC...='
      trajledger trust 'acme/rollouts+1a2b3c4d+AbC...=' --checkpoint checkpoint.txt
      trajledger trust 'acme/rollouts+1a2b3c4d+AbC...=' --checkpoint ledger/log/checkpoint \\
          --accept-rollback 22:21
      trajledger trust 'acme/rollouts+1a2b3c4d+AbC...=' --clock-ahead 2028-01-09T02:23:22Z
      trajledger --ledger ./ledger trust --settings
      trajledger --ledger ./ledger trust --json
    """
    from .home import LedgerHome

    if as_json and (vkey is not None or settings):
        raise click.UsageError("--json applies to showing what you trust (no VKEY, no "
                               "--settings)")
    if clock_ahead is not None:
        if vkey is None or checkpoint is not None or settings or rollback is not None:
            raise click.UsageError("--clock-ahead needs the log's VKEY, and nothing else")
        from .trust_pins import forget_clock_ahead

        forget_clock_ahead(vkey, clock_ahead)
        ok(f"log {vkey.split('+')[0]}: the time your state noted, {clock_ahead}, is forgotten "
           "as a clock running ahead; what expires is judged by your clock again")
        return
    if rollback is not None:
        if vkey is None or checkpoint is None or settings:
            raise click.UsageError("--accept-rollback needs the log's VKEY and the checkpoint "
                                   "accepted (--checkpoint FILE), and no --settings")
        from .trust_pins import accept_rollback

        done = accept_rollback(vkey, checkpoint.read_bytes(), *rollback, str(checkpoint))
        ok(f"log {done.origin}: the rollback of key {done.fingerprint} from size {done.held} "
           f"to size {done.now} is accepted ({done.at}); your floor is size {done.now}, and "
           "your state keeps the record of it")
        return
    if vkey is not None:
        if settings:
            raise click.UsageError("give a VKEY to pin, or --settings, not both")
        from .trust_pins import pin_log_key

        pinned = pin_log_key(vkey, checkpoint.read_bytes() if checkpoint is not None else None)
        ok(f"log {pinned.origin}: key {pinned.fingerprint} pinned" + (
            f"; floor at size {pinned.size}" if pinned.size is not None else ""))
        if pinned.others:  # out36 finding 4: a second key under a name this user trusts
            held = ", ".join(f"{k} ({'size ' + str(n) + ' seen' if n is not None else 'pinned'})"
                             for k, n in pinned.others)
            warn(f"log {pinned.origin}: you trusted another key for this origin before: {held}; "
                 "both are trusted now, each on its own. If its owner rotated its key, the "
                 "handover from the old key is followed without a pin; if not, one of the two "
                 "keys is not the owner's: check the fingerprint with them (run 'trajledger "
                 "trust' in a ledger of each to see its key)")
        return
    if checkpoint is not None:
        raise click.UsageError("--checkpoint goes with the VKEY it is signed by")
    if settings:
        for change in LedgerHome.accept_settings(ctx.home):
            ok(f"accepted: {change}")
        ok(f"ledger {ctx.home}: its settings are pinned as they are now")
        return
    info = ctx.ledger().trusted()
    if as_json:
        emit_json(info)
        return
    for k, v in info.items():
        if k != "rollbacks":
            click.echo(f"{k}\t{v}")
    for r in info["rollbacks"]:
        click.echo(f"rollback accepted\t{r['at']}: size {r['from']} to size {r['to']}")


@click.command()
@click.option(
    "--plain-keys",
    is_flag=True,
    help="Record that this ledger's keys are plaintext demo keys, instead of encrypting them.",
)
@pass_ctx
def upgrade(ctx: Context, plain_keys: bool) -> None:
    """Bring a ledger of trajledger 0.1.0 up to date, saying each step.

    Its private keys (the log's included) that are not encrypted are encrypted, each with its
    passphrase (TRAJLEDGER_PASSPHRASE_<NAME>, TRAJLEDGER_PASSPHRASE, a file
    TRAJLEDGER_PASSPHRASEFILE[_<NAME>] names, or asked on a terminal),
    and ledger.toml records keys = "encrypted": from then on a plaintext key file there is
    refused as planted. A key file that is a symbolic link is refused (exit 3), naming it,
    before any key is changed: encrypting it would leave its target in the clear. With
    --plain-keys, nothing is encrypted and keys = "plain" is recorded (demo ledgers). Nothing
    else is rewritten; policy files naming keys by path are upgraded with 'trajledger policy
    inline FILE'.

    \b
    Example:
      TRAJLEDGER_PASSPHRASE=... trajledger --ledger ./ledger upgrade
    """
    for step in ctx.ledger().upgrade(plain=plain_keys):
        ok(step)


COMMANDS = [trust, upgrade]
