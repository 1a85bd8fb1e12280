"""Commands for logs that others watch: ``log serve``, ``log add-cosignature`` and ``monitor``.

Each parses its options, calls one function of ``ledger.serve`` or ``ledger.monitor`` and renders
the result (``--json`` is stable); exit codes per ``ledger.clikit`` (a fork or rollback is 1,
an unreachable or misbehaving server 3).
Spec: docs/third-party.md ("Watching a vendor's log"); c2sp.org/tlog-tiles and tlog-cosignature.
"""

from __future__ import annotations

import errno
import ipaddress
import math
from pathlib import Path
from typing import Any

import click

from .clikit import (
    JSON_OPTION,
    KEY_NAME,
    OUT_PATH,
    VKEY,
    Context,
    emit_json,
    emit_result,
    ok,
    pass_ctx,
    verdict_follows,
    warn,
)
from .errors import LedgerError

__all__ = ["log_add_cosignature", "log_serve", "monitor"]


def _not_nan(_ctx: click.Context, param: click.Parameter, value: float) -> float:
    """``value``, unless it is NaN (which passes every range: no comparison holds for it)."""
    if math.isnan(value):
        raise click.BadParameter("nan is not a number of seconds", param=param)
    return value


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (loopback by default; put TLS in front for others).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0: any free port, printed).")
@JSON_OPTION
@pass_ctx
def log_serve(ctx: Context, host: str, port: int, as_json: bool) -> None:
    """Serve the log read-only over HTTP as a C2SP tiled log: /checkpoint and the tiles, and
    the envelopes the policy in force publishes (its 'publish' setting: revocations, erasures
    and policies by default) at /envelopes/<hex>.

    Others watch it with 'trajledger monitor URL --vkey V' (the vkey is 'log info's): a buyer
    holding your data takes in your revocations that way. Any static file server can serve the
    log directory instead (docs/third-party.md). Runs until Ctrl-C; restart it after a policy
    changes what it publishes.

    \b
    Example:
      trajledger log serve --host 0.0.0.0 --port 8080
    """
    from trajledger.verify import policy_settings

    from .policy_state import current_policy
    from .serve import LogServer, Published

    ledger = ctx.ledger()
    found = current_policy(ledger)
    kinds = (policy_settings.published(found[1]) if found is not None
             else policy_settings.DEFAULT_PUBLISH)
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        warn(f"serving on {host}: anyone who can reach it can read the log (it is public by "
             "design: entries name digests, not data); use TLS in front of it")  # fmt: skip
    # (the store's error, not `read_blob`'s None: one it cannot read is no envelope missing)
    published = Published(ledger.log.directory, ledger.store.get, kinds)
    try:
        server = LogServer(ledger.log.directory, host, port, verbose=ctx.verbose,
                           published=published)
    except OSError as e:
        if e.filename is not None:
            raise  # the log directory: named by the error itself
        hint = ("another program listens there: choose another --port (0: any free one)"
                if e.errno == errno.EADDRINUSE else "check --host and --port")
        raise LedgerError(f"cannot listen on {host} port {port}: "
                          f"{e.strerror or e}; {hint}; nothing was served") from e
    shown = ", ".join(kinds) if kinds else "none"
    ok(f"log {ledger.log.origin} served read-only at {server.url} (vkey {ledger.log.vkey}); "
       f"envelopes published: {shown}; Ctrl-C stops")  # fmt: skip
    emit_result(as_json, server.url, {"url": server.url, "origin": ledger.log.origin,
                                      "vkey": ledger.log.vkey, "published": list(kinds)})
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@click.command("add-cosignature")
@click.argument("file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option("--witness", "witnesses", multiple=True, required=True, type=VKEY,
              metavar="VKEY",
              help="The witness's verifier key (repeat); only its cosignature lines are added.")
@pass_ctx
def log_add_cosignature(ctx: Context, file: Path, witnesses: tuple[str, ...]) -> None:
    """Publish witnesses' cosignatures: add their lines from FILE (a checkpoint a witness
    cosigned, from 'trajledger monitor --cosign-key K --out FILE') to the log's checkpoint.

    Each named witness's cosignature must verify over the log's current checkpoint; bundles
    exported from now on carry it, for buyers whose policy requires witnesses.

    \b
    Example:
      trajledger log add-cosignature cosigned.txt --witness 'witness+1a2b3c4d+AbC...='
    """
    from .monitor import merge_cosignatures

    ledger = ctx.ledger()
    log = ledger.log
    cosigned = file.read_bytes()
    current = log.checkpoint_bytes()
    merged = merge_cosignatures(current, cosigned, list(witnesses))
    log.add_cosignature(current, merged)
    names = ", ".join(w.split("+")[0] for w in witnesses)
    ok(f"log {log.origin} at size {log.size}: cosignature(s) by {names} added to its checkpoint")


@click.command("monitor")
@click.argument("url")
@click.option("--vkey", required=True, type=VKEY,
              help="The log's verifier key (its operator's 'log info'), got out of band.")
@click.option("--cosign-key", "cosign_key", type=KEY_NAME,
              help="Cosign the checkpoint as a witness with this Ed25519 key of the ledger.")
@click.option("--out", type=OUT_PATH,
              help="With --cosign-key: write the cosigned checkpoint here, for the log's operator "
              "('trajledger log add-cosignature FILE --witness VKEY').")
@click.option("--timeout", default=20.0, show_default=True,
              type=click.FloatRange(min=0.1, max=86400.0), callback=_not_nan,
              help="Seconds any one network read may wait (at most a day).")
@click.option("--key", "keys", multiple=True, type=KEY_NAME,
              help="Approver key signing the import of what the log says about what this "
              "ledger holds (repeat up to the approver threshold); without it, that is only "
              "reported as pending.")
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Trust policy TOML to judge what is taken in (default: the policy in force).")
@click.option("--fail-on-revocation", is_flag=True,
              help="Exit 1 when something this ledger holds, or built on, was revoked or erased "
              "by the log (taken in now, or pending): for cron and CI.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_ctx
def monitor(
    ctx: Context,
    url: str,
    vkey: str,
    cosign_key: str | None,
    out: Path | None,
    timeout: float,
    keys: tuple[str, ...],
    policy_file: Path | None,
    fail_on_revocation: bool,
    as_json: bool,
) -> None:
    """Watch another party's log at URL: verify its checkpoint with VKEY, check its tiles and
    that it only grew since the last checkpoint you accepted from it (here or by 'import'),
    remember it, and optionally cosign it as a witness. Run in a ledger that imported from
    that log, it then applies the log's new entries about what the ledger holds, as an import
    of them would: revocations, erasures and key compromises take effect (signed by --key).

    A fork or a rollback is refused (exit 1) naming both checkpoints, and nothing is
    remembered; the conflicting checkpoint is printed (keep it: it is signed evidence). The
    memory is per log, in your state directory ($TRAJLEDGER_STATE_DIR).

    \b
    Examples:
      trajledger monitor https://logs.example.com/acme --vkey 'acme/rollouts+1a2b3c4d+AbC...='
      trajledger monitor URL --vkey VKEY --cosign-key witness --out cosigned.txt
      trajledger monitor URL --vkey VKEY --key approver --fail-on-revocation   # daily cron
    """
    from trajledger.verify.errors import ConsistencyError, VerificationError

    from .exchange_cli import show_changes, warn_origin
    from .first_contact import unread_after
    from .fs import write_file_atomic
    from .monitor import FetchLimits, HttpLog, watch_updates
    from .monitor import monitor as run_monitor
    from .user_state import notice

    if out is not None and cosign_key is None:
        raise click.UsageError("--out writes the cosigned checkpoint: it needs --cosign-key")
    has_ledger = (ctx.home / "ledger.toml").exists()
    if (keys or policy_file or fail_on_revocation) and not has_ledger:
        raise click.UsageError("--key, --policy and --fail-on-revocation apply what the log says "
                               "to a ledger: run it in one (--ledger DIR)")
    ledger = ctx.ledger() if has_ledger or cosign_key else None
    witness = ledger.keys.signer(cosign_key) if cosign_key and ledger is not None else None
    from .policy_state import current_policy, given_policy

    # the user's own --policy FILE is read before the log is: an invalid one is a usage error
    # (exit 2) with nothing fetched or noted, not found after the network (left37); one changed
    # since it was recorded is said to be (rev36: as export, import, lineage and impact)
    given = given_policy(ledger, policy_file, warn) if policy_file and ledger is not None \
        else None
    log = HttpLog(url, FetchLimits(timeout=timeout, deadline=max(60.0, 3 * timeout)))
    try:
        result = run_monitor(log, vkey, witness=witness)
    except ConsistencyError as e:
        if isinstance(e.new, bytes):  # the conflicting signed checkpoint: evidence, on stdout
            with verdict_follows():  # (its reader gone, the fork is still said: rev52 f. 2)
                click.echo(e.new.decode("utf-8", "replace"), nl=False)
        raise
    if out is not None and result.cosigned is not None:
        write_file_atomic(out, result.cosigned, output=True)
    changes = None
    if has_ledger and ledger is not None:
        found = current_policy(ledger) if policy_file is None else None
        policy = found[1] if found is not None else given
        if policy is not None:  # a ledger with no policy yet holds nothing imported
            changes = watch_updates(ledger, policy, [ledger.keys.signer(k) for k in keys],
                                    log, result)
    lookalikes = _lookalikes(ledger, changes, f"log {result.origin} at {result.url}")
    with verdict_follows():  # (--fail-on-revocation's)
        if as_json:
            emit_json(result.to_json() | {"updates": changes.to_json() | {
                "lookalikes": lookalikes} if changes else None})
        else:
            click.echo(result.note.decode("utf-8"), nl=False)
            if result.cosigned is not None:
                click.echo(result.cosigned.decode("utf-8").rsplit("\n", 2)[-2])
    if result.old_size is None:
        how = "first seen: remembered"
    elif result.advanced:
        how = f"consistent with size {result.old_size} seen before: remembered"
    else:
        how = "unchanged since last seen"
    ok(f"log {result.origin} at {result.url}: size {result.size}, {how}")
    for r in result.rollbacks:  # (the user's own decision, kept in the state: said each time)
        notice(f"log {result.origin}: you accepted a rollback of it on {r['at']}, from size "
               f"{r['from']} to size {r['to']} ('trajledger trust --accept-rollback'): what "
               "it held beyond was lost")
    warn_origin(result.origin)
    if result.vkey != vkey:
        warn(f"the log's key was rotated: the key you gave handed over to {result.vkey}; "
             "pass that one with --vkey from now on")
    if result.witness_vkey is not None:
        where = f" written to {out}" if out is not None else " printed above"
        ok(f"cosigned as witness {result.witness_vkey}; the cosigned checkpoint is{where}")
    if changes is not None:
        show_changes(changes)
        for line in lookalikes:
            warn(line)
        assert ledger is not None  # changes are a ledger's
        for line in unread_after(ledger, changes.logged, f"log {result.origin}"):  # gap39
            warn(line)
        if fail_on_revocation and changes.stopped:
            raise VerificationError(
                f"log {result.origin} at {result.url}: something this ledger holds was revoked "
                "or erased there (listed above): see 'trajledger impact REF' for what is built "
                "on it")


def _lookalikes(ledger: Any, changes: Any, what: str) -> list[str]:
    """`exchange_cli.lookalike_warnings` of the names of the records a monitor took in (the
    trust state's rows of their indices here; left32 finding 1)."""
    import sqlite3

    from .errors import after_update
    from .exchange_cli import lookalike_warnings

    if changes is None or not changes.logged:
        return []
    logged = set(changes.logged)
    try:
        rows = [(r.kind, r.name, r.version, r.subject)
                for r in ledger.trust_state().named() if r.index in logged]
        return list(lookalike_warnings(ledger, rows))
    except (LedgerError, OSError, sqlite3.Error) as e:  # recorded: say so (fault27)
        if (error := after_update(e, sorted(logged), what, "the names it took in could not "
                                  "then be checked for look-alikes")) is e:
            raise
        raise error from e
