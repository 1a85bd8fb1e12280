"""The ledger's commands: init, key, sign, attest, log.

``trajledger verify`` (files against an envelope, or a lineage) is composed in ``runner``.

Each command parses its options, builds library objects, calls one library function and renders
the result. Heavy modules are imported inside the commands so ``trajledger --help`` stays fast.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from .clikit import (
    HOME_ENV,
    JSON_OPTION,
    KEY_NAME,
    NEW_ORIGIN,
    OUT_PATH,
    Context,
    Group,
    emit_json,
    emit_result,
    ok,
    pass_ctx,
    progress,
    warn,
)
from .log_cli import attest, log
from .watch_cli import log_add_cosignature, log_serve, monitor

__all__ = ["COMMANDS"]


@click.command()
@click.option(
    "--origin", type=NEW_ORIGIN, help="Log origin (a unique name: ASCII letters, digits, '.', "
    "'_', '-', '/', ':'); default: trajledger/<host>/<random>."
)
@click.option(
    "--store",
    default="objects",
    show_default=True,
    help="Blob store: a directory relative to the ledger, or a URI such as s3://bucket/prefix "
    "(S3 settings from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_REGION).",
)
@JSON_OPTION
@pass_ctx
def init(ctx: Context, origin: str | None, store: str, as_json: bool) -> None:
    """Create a ledger in the ledger directory (--ledger, default ./.trajledger).

    The log and the keys always live in the ledger directory; blobs live in --store. A remote
    store must be reachable (its bucket must exist) before anything is created.

    The log's key is encrypted with its passphrase (TRAJLEDGER_PASSPHRASE_LOG or
    TRAJLEDGER_PASSPHRASE, or in the file TRAJLEDGER_PASSPHRASEFILE_LOG or
    TRAJLEDGER_PASSPHRASEFILE names; asked twice on a terminal), and ledger.toml records that this
    ledger's keys are encrypted: a plaintext key file is then refused as planted. Without a
    passphrase (no terminal, none set) the keys are demo keys, recorded as plain.
    Nothing is left behind when init fails; run it again.

    \b
    Examples:
      TRAJLEDGER_PASSPHRASE_LOG=... trajledger --ledger ./ledger init --origin acme/rollouts
      TRAJLEDGER_PASSPHRASEFILE=~/.config/trajledger/pass trajledger init
    """
    from .config import DEFAULT_HOME, KEYS_PLAIN
    from .home import LedgerHome

    # init makes a new ledger here: a ledger found in a parent directory is not where it goes.
    where = Path(DEFAULT_HOME) if ctx.found and HOME_ENV not in os.environ else ctx.home
    ledger = LedgerHome.init(where, origin=origin, store=store, passphrase=_ask, check_store=True)
    if ledger.config.keys == KEYS_PLAIN:
        warn(
            "the log key is written unencrypted and this ledger records plain keys (no "
            "passphrase set, no terminal): for demos and tests; set TRAJLEDGER_PASSPHRASE_LOG "
            "or TRAJLEDGER_PASSPHRASE (or TRAJLEDGER_PASSPHRASEFILE naming a file) before init "
            "for a ledger an insider cannot sign for"
        )
    emit_result(as_json, f"created ledger {ledger.root} (origin {ledger.config.origin})",
                {"ledger": str(ledger.root), "origin": ledger.config.origin,
                 "vkey": ledger.log.vkey, "keys": ledger.config.keys})


def _ask(name: str) -> bytes | None:
    from .clikit import ask_passphrase

    return ask_passphrase(name, confirm=True)


@click.group(cls=Group)
def key() -> None:
    """Create, list and export signing keys and X25519 encryption keys (kept in <ledger>/keys).

    \b
    Examples:
      trajledger key new vendor
      trajledger key list
    """


@key.command("new")
@click.argument("name", type=KEY_NAME)
@click.option(
    "--alg",
    type=click.Choice(["ed25519", "p256", "x25519"]),
    default="ed25519",
    show_default=True,
    help="Signature algorithm; x25519 makes an encryption key (keys/x25519/) that sealed suites "
    "are encrypted to: pin its .pub in the policy's evaluator encryption_keys.",
)
@click.option(
    "--no-encrypt", is_flag=True, help="Write the private key unencrypted (demos and tests only)."
)
@JSON_OPTION
@pass_ctx
def key_new(ctx: Context, name: str, alg: str, no_encrypt: bool, as_json: bool) -> None:
    """Create key NAME: an encrypted PKCS#8 private key (mode 0600) and its public key.

    Each key may have its own passphrase: TRAJLEDGER_PASSPHRASE_<NAME> (the name upper-cased,
    other characters than letters and digits as _) or the file TRAJLEDGER_PASSPHRASEFILE_<NAME>
    names, else TRAJLEDGER_PASSPHRASE or the file TRAJLEDGER_PASSPHRASEFILE names, else it is
    asked for (twice) on a terminal. A passphrase file holds the passphrase (one trailing
    newline is dropped), is yours and mode 600; a pipe works (bash: <(pass show KEY)).
    --no-encrypt is refused where the ledger's keys are encrypted.

    \b
    Examples:
      TRAJLEDGER_PASSPHRASE_APPROVER_A=... trajledger key new approver-a
      TRAJLEDGER_PASSPHRASEFILE_VENDOR=~/.secrets/vendor.pass trajledger key new vendor
    """
    from .keys import KeyStore

    keys = ctx.ledger().keys  # refuses a mistyped --ledger instead of making a stray directory
    store = KeyStore(keys.directory, passphrase=_ask, require_encrypted=keys.require_encrypted,
                     group_writable=keys.group_writable)
    if no_encrypt:
        warn(f"key {name} is written unencrypted; use it for demos and tests only")
    if alg == "x25519":
        enc = store.create_encryption_key(name, encrypt=not no_encrypt)
        emit_result(as_json, f"{name} x25519 {enc.keyid}", {
            "name": name, "algorithm": "x25519", "keyid": enc.keyid, "encrypted": not no_encrypt})
        ok(f"encryption key {name} written to {store.encryption_directory}")
        return
    signer = store.create_or_finish(  # (a creation killed between the key's two files)
        name, "ecdsa-p256" if alg == "p256" else "ed25519", encrypt=not no_encrypt
    )
    emit_result(as_json, f"{name} {signer.public.algorithm} {signer.keyid}", {
        "name": name, "algorithm": signer.public.algorithm, "keyid": signer.keyid,
        "encrypted": not no_encrypt})
    ok(f"key {name} written to {store.directory}")


@key.command("encrypt")
@click.argument("name", type=KEY_NAME, required=False)
@click.option("--log", "log_key", is_flag=True, help="Encrypt the log's key (log-key/log.key).")
@click.option("--x25519", "x25519_key", is_flag=True,
              help="NAME is an X25519 encryption key (keys/x25519/NAME.key).")
@pass_ctx
def key_encrypt(ctx: Context, name: str | None, log_key: bool, x25519_key: bool) -> None:
    """Encrypt a plaintext private key in place, with its passphrase (as for 'key new'); or
    re-encrypt one that 'key list' marks weak (encrypted by trajledger before 2026-12-03 with
    2,048 PBKDF2 rounds) with scrypt, as keys are written now, under the same passphrase.

    Keys written with --no-encrypt, and the log key of a ledger made without a passphrase,
    are plaintext; 'trajledger upgrade' encrypts all of them and records it in ledger.toml.

    \b
    Examples:
      trajledger key encrypt vendor
      TRAJLEDGER_PASSPHRASE_LOG=... trajledger key encrypt --log
      trajledger key encrypt --x25519 evaluator
    """
    if (name is None) == (not log_key) or (log_key and x25519_key):
        raise click.UsageError("give a key NAME (with --x25519 for an encryption key) or --log")
    ledger = ctx.ledger()
    store = ledger.log_keys() if log_key else ledger.keys
    who = "log" if log_key else str(name)
    if store.encrypt(who, x25519_key=x25519_key):
        folder = store.encryption_directory if x25519_key else store.directory
        ok(f"key {who}: {folder / (who + '.key')} encrypted")
    else:
        ok(f"key {who}: already encrypted")


@key.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def key_list(ctx: Context, as_json: bool) -> None:
    """List keys: name, algorithm, keyid, whether the private key is encrypted, PLAIN (in the
    clear) or not here at all ('public only': it verifies, it cannot sign), signing keys, then
    X25519 encryption keys.

    \b
    Example:
      trajledger key list --json
    """
    store = ctx.keystore()
    rows = [(k.name, k.algorithm, k.keyid, k.encrypted, k.weak, k.private) for k in store.list()]
    folder = store.encryption_directory
    rows += [(n, "x25519", k.keyid, enc, weak, (folder / f"{n}.key").exists())
             for n, k, enc, weak in store.encryption_keys()]
    if as_json:
        emit_json([{"name": n, "algorithm": a, "keyid": i, "encrypted": e, "weak": w,
                    "private": p} for n, a, i, e, w, p in rows])
        return
    for n, a, i, e, w, p in rows:
        # a public half alone is no key in the clear: it verifies here and cannot sign (out48)
        how = ("encrypted" if e else "PLAIN" if p
               else "public only (no .key here: it verifies, it cannot sign)")
        if w:
            x = " --x25519" if a == "x25519" else ""
            how += f" (weak key derivation: 'trajledger key encrypt{x} {n}' re-encrypts it)"
        click.echo(f"{n}\t{a}\t{i}\t{how}")


@key.command("export")
@click.argument("name", type=KEY_NAME)
@JSON_OPTION
@pass_ctx
def key_export(ctx: Context, name: str, as_json: bool) -> None:
    """Print the public key of NAME as PEM (share this; never the .key file).

    \b
    Example:
      trajledger key export vendor > vendor.pub
    """
    store = ctx.keystore()
    key = store.public(name)
    pem = key.to_pem().decode("ascii")
    level, line, roles = "ok", "", None
    if (ctx.home / "ledger.toml").exists():  # a key store before 'init' has no policy
        from trajledger.verify.errors import ProvenanceError

        from .errors import LedgerError
        from .policy_state import exported_key_line

        others = [(k.name, k.keyid) for k in store.list()]
        try:
            level, line, roles = exported_key_line(ctx.ledger(), name, key, others)
        except (LedgerError, ProvenanceError) as e:  # the key is printed all the same
            level, line = "warning", f"key {name}: its roles cannot be read: {e}"
    emit_result(as_json, pem.removesuffix("\n"), {
        "name": name, "algorithm": key.algorithm, "keyid": key.keyid, "pem": pem,
        "roles": roles})
    if line:
        (warn if level == "warning" else ok)(line)


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--key", "key_name", required=True, type=KEY_NAME, help="Name of the signing key.")
@click.option(
    "--out",
    required=True,
    type=OUT_PATH,
    help="Where to write the DSSE envelope.",
)
@click.option("--name", help="Subject name; default: the first path's name.")
@JSON_OPTION
@pass_ctx
def sign(
    ctx: Context, paths: tuple[Path, ...], key_name: str, out: Path, name: str | None,
    as_json: bool,
) -> None:
    """Sign files and directories into a DSSE envelope (in-toto statement + manifest).

    Directories are expanded: every file is listed by its path relative to the directory, with
    its size and SHA-256. Verify with 'trajledger verify PATH... --envelope FILE --pubkey PEM'.

    \b
    Example:
      trajledger sign model/ --key vendor --out model.intoto.json
    """
    from .encode import envelope_bytes
    from .files import collect_files, manifest_for
    from .fs import write_output
    from .record import check_subject_name
    from .signing import files_predicate, sign_statement

    subject = name or (paths[0].resolve().name or "files")
    check_subject_name(subject)
    signer = ctx.keystore().signer(key_name)
    files = collect_files(paths)
    with progress(len(files), "hashing", quiet=ctx.quiet) as advance:
        manifest = manifest_for(files, on_done=lambda _d: advance(1))
    ptype, predicate = files_predicate(manifest)
    envelope = sign_statement([(subject, manifest.digest)], ptype, predicate, [signer])
    write_output(out, envelope_bytes(envelope) + b"\n", output=True)
    emit_result(as_json, manifest.digest, {
        "digest": manifest.digest, "name": subject, "envelope": str(out),
        "files": len(manifest.files), "size": manifest.total_size, "keyid": signer.keyid})
    ok(
        f"{len(manifest.files)} file(s), {manifest.total_size} bytes signed by {key_name} "
        f"into {out}"
    )


log.add_command(log_serve)
log.add_command(log_add_cosignature)

COMMANDS = [init, key, sign, attest, log, monitor]
