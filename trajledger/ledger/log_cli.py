"""The log's commands: ``attest`` and the ``log`` group (info, rotate-key, show, proof,
consistency, verify, cosign).

Each command parses its options, opens the ledger, calls one library function (``ledger.record``
or ``ledger.log``) and renders the result: results on stdout (``--json`` is stable), ``OK:`` /
``FAIL:`` lines on stderr, exit codes per ``ledger.clikit``. Heavy modules are imported inside
the commands so ``trajledger --help`` stays fast.

Non-scope: any verification logic (``ledger.log.verify_log_dir`` and ``verify/`` hold it) and
the witness's consistency rules (``ledger.log.cosign``).
Spec: schemas/log-entry.v1.md (log files, ``log verify``, witness state), c2sp.org/tlog-proof.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import click

from .clikit import (
    EXIT_FAILED,
    JSON_OPTION,
    KEY_NAME,
    OUT_PATH,
    Context,
    Group,
    emit_json,
    emit_result,
    fail,
    loading,
    ok,
    pass_ctx,
    progress_to,
    recorded_json,
    verdict_follows,
    warn,
)

__all__ = ["attest", "log"]


def _predicate_type(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    from trajledger.verify import predicates

    if value is not None and value not in predicates.ALL:
        allowed = ", ".join(sorted(predicates.ALL))
        raise click.BadParameter(f"{value!r} is not a predicate type trajledger records: {allowed}")
    return value


def _load_predicate(path: Path) -> dict[str, Any]:
    from trajledger.verify.errors import FormatError
    from trajledger.verify.strict_json import load_object

    from .verify_files import read_input

    data = read_input(path, "predicate file")
    try:
        return load_object(data, f"predicate file {path}")
    except FormatError as e:
        raise click.BadParameter(str(e), param_hint="--predicate") from e


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--key",
    "key_names",
    multiple=True,
    type=KEY_NAME,
    help="Signing key name (repeatable: co-signing).",
)
@click.option(
    "--sigstore",
    is_flag=True,
    help="Sign keylessly with Sigstore (alone or with --key): OIDC token from "
    "SIGSTORE_ID_TOKEN or the CI; needs network and trajledger[sigstore]; docs/sigstore.md.",
)
@click.option(
    "--predicate-type",
    callback=_predicate_type,
    help="Predicate type URI (default: the files predicate).",
)
@click.option(
    "--predicate",
    "predicate_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON object with the predicate's own fields (the manifest is added).",
)
@click.option("--name", help="Subject name; default: the first path's name.")
@JSON_OPTION
@pass_ctx
def attest(
    ctx: Context,
    paths: tuple[Path, ...],
    key_names: tuple[str, ...],
    predicate_type: str | None,
    predicate_file: Path | None,
    name: str | None,
    sigstore: bool,
    as_json: bool,
) -> None:
    """Sign files, store them with their manifest and envelope, and record them in the log.

    Sign with keys (--key), keylessly with Sigstore (--sigstore), or both: a keyless
    signature's Sigstore bundle is stored as an object the envelope names.
    Prints the artifact digest (the manifest's sha256) as the last line of stdout.

    \b
    Examples:
      trajledger attest model/ --key trainer --name model
      trajledger attest model/ --key trainer --sigstore
    """
    with loading():
        from trajledger.verify import predicates

        from .record import kind_for, record_files
        from .sigstore_sign import signers_from_options

        extra = _load_predicate(predicate_file) if predicate_file is not None else {}
        ledger = ctx.ledger()
    try:
        signers = signers_from_options(ledger, key_names, sigstore)
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    rec = record_files(
        ledger, list(paths), signers, predicate_type or predicates.FILES, extra, name=name
    )
    assert rec.manifest is not None
    emit_result(as_json, rec.digest, recorded_json(kind_for(predicate_type or predicates.FILES),
                                                   rec, name or "")
                | {"files": len(rec.manifest.files), "size": rec.manifest.total_size})
    by = list(key_names)
    for s in signers:
        by += [
            f"keyless signature by {k.subject} (issuer {k.issuer})"
            for k in getattr(s, "signed", [])
        ]
    what = f"{len(rec.manifest.files)} file(s), {rec.manifest.total_size} bytes"
    if rec.new:
        ok(f"{what} attested by {', '.join(by)}: log index {rec.index}, envelope "
           f"{rec.envelope_digest}")
        _uncounted(ledger, kind_for(predicate_type or predicates.FILES), key_names)
    else:
        _held(ledger, rec.index, what, rec.envelope_digest, key_names)


def _held(ledger: Any, index: int, what: str, envelope: str, key_names: tuple[str, ...]) -> None:
    """The line of an ``attest`` that found its record logged already (out46): the record
    that stands and who signed it, not the keys given (their signatures were not recorded)."""
    from trajledger.verify.log_entry import LogEntry

    signed = LogEntry.from_bytes(ledger.log.entry(index)).signers
    names = {ledger.keys.public(n).keyid: n for n in key_names}
    ok(f"{what}: already attested at log index {index}, envelope {envelope}, signed by "
       + ", ".join(names.get(k, k[:12]) for k in signed) + "; nothing new was recorded")
    for keyid, name in names.items():
        if keyid not in signed:
            warn(f"key {name} ({keyid[:12]}) did not sign it: a digest names one record of "
                 "this log, the first made, and these files are that one")


def _uncounted(ledger: Any, kind: str, key_names: tuple[str, ...]) -> None:
    """Warn of each key that signed an ``attest`` record and holds none of the roles the
    policy in force counts for its kind (out46): any key may attest (keys/README.md, "Signers
    without a role"), and the record such a key signs fails ``verify`` under that policy."""
    from trajledger.verify.kinds import KINDS

    from .errors import shell_word
    from .policy_state import current_policy

    found = current_policy(ledger)
    if found is None or kind not in KINDS:
        return
    policy, roles = found[1], KINDS[kind].roles
    for name in key_names:
        keyid = ledger.keys.public(name).keyid
        if any(policy.holds(r, keyid) for r in roles):
            continue
        want = " or ".join(roles)
        trainer = name if policy.holds("trainer", keyid) else "TRAINER"
        warn(f"key {name} ({keyid[:12]}) holds no {want} role in policy {policy.name!r} serial "
             f"{policy.serial}, which counts {'an' if kind[0] in 'aeio' else 'a'} {kind} record "
             f"only when a {want} key signs it: 'trajledger verify' of this one fails under it, "
             "and a digest names one record of this log (these files cannot be attested again "
             "with another key); a checkpoint is recorded with what it was trained on by "
             f"'trajledger train --dataset NAME@VERSION --key {shell_word(trainer)} -- COMMAND' "
             "(docs/trainers.md)")


@click.group(cls=Group)
def log() -> None:
    """Inspect, prove, check and witness the ledger's transparency log.

    \b
    Examples:
      trajledger log info
      trajledger log verify --skip-data
    """


@log.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def log_info(ctx: Context, as_json: bool) -> None:
    """Show the log's origin, size, root and verifier key (vkey).

    \b
    Example:
      trajledger log info --json
    """
    lg = ctx.ledger().log
    size, root = lg.tree_state()
    cp = lg.checkpoint()
    info = {
        "origin": lg.origin,
        "size": size,
        "root": base64.b64encode(root).decode(),
        "vkey": lg.vkey,
        "checkpoint_size": cp.size,
    }
    if as_json:
        emit_json(info)
        return
    for k in ("origin", "size", "root", "vkey", "checkpoint_size"):
        click.echo(f"{k}\t{info[k]}")


@log.command("rotate-key")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def log_rotate_key(ctx: Context, as_json: bool) -> None:
    """Replace the log's signing key (after a theft, or routinely); the log itself is kept.

    A new Ed25519 key is made (encrypted with the log key's passphrase: TRAJLEDGER_PASSPHRASE_LOG,
    TRAJLEDGER_PASSPHRASE, or a file TRAJLEDGER_PASSPHRASEFILE[_LOG] names), and the current
    tree is published signed by BOTH the old key and the new one, with a line naming both: the
    key handover, also kept as log/key-handovers/N and put in every bundle exported from now on.
    Then the new key replaces log-key/log.key (the old private key is deleted) and log/vkey
    names it; from then on only the new key signs.

    Whoever trusted the old key follows the handover: your own trust state, buyers whose policy
    names the old vkey, monitors (trajledger monitor). A checkpoint signed by a new key that no
    handover by a trusted key names is still refused. Tell buyers and witnesses the new vkey
    (printed); see docs/SECURITY.md, "A stolen key". Interrupted, run it again to finish.
    A command already running with the old key (a train, a record) follows the handover and
    signs with the new key, loaded from log-key/ with the passphrase of the same variable or
    file; one that was asked for it at a prompt appends nothing (exit 3): run it again.

    \b
    Example:
      TRAJLEDGER_PASSPHRASE_LOG=... trajledger log rotate-key
    """
    ledger = ctx.ledger()
    handover = ledger.rotate_log_key()
    info = {
        "origin": handover.checkpoint.origin,
        "size": handover.checkpoint.size,
        "old_vkey": handover.old,
        "vkey": handover.new,
        "handover": handover.note.decode("utf-8"),
    }
    if as_json:
        emit_json(info)
    else:
        click.echo(handover.new)
    ok(f"log {handover.checkpoint.origin}: key rotated at size {handover.checkpoint.size}; "
       f"the handover is signed by the old key and the new one")


@log.command("show")
@click.option(
    "--from", "start", type=click.IntRange(min=0), default=0, show_default=True, help="First index."
)
@click.option(
    "--to",
    "end",
    type=click.IntRange(min=0),
    default=None,
    help="Stop before this index (default: the log size).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_ctx
def log_show(ctx: Context, start: int, end: int | None, as_json: bool) -> None:
    """List entries: index, kind, subject, envelope, signers, time.

    \b
    Example:
      trajledger log show --from 10 --to 20 --json
    """
    from trajledger.verify.log_entry import LogEntry

    lg = ctx.ledger().log
    size = lg.size
    stop = size if end is None else end
    if stop > size:
        raise click.BadParameter(f"{stop} is beyond the log size {size}", param_hint="--to")
    if start > stop:
        raise click.BadParameter(f"{start} is after --to {stop}", param_hint="--from")
    step = 256
    for base in range(start, stop, step):
        for i, raw in enumerate(lg.entries(base, min(stop, base + step)), base):
            e = LogEntry.from_bytes(raw, f"log entry {i}")
            if as_json:
                emit_json(
                    {
                        "index": i,
                        "kind": e.kind,
                        "subject": e.subject,
                        "envelope": e.envelope,
                        "signers": list(e.signers),
                        "time": e.time,
                    }
                )
            else:
                click.echo(f"{i}\t{e.kind}\t{e.subject}\t{e.envelope}\t{e.time}")


@log.command("proof")
@click.argument("index", type=click.IntRange(min=0))
@click.option(
    "--out",
    type=OUT_PATH,
    help="Write the proof here instead of stdout.",
)
@JSON_OPTION
@pass_ctx
def log_proof(ctx: Context, index: int, out: Path | None, as_json: bool) -> None:
    """Write a c2sp.org/tlog-proof@v1 proof that entry INDEX is in the log.

    The proof holds the inclusion path and the signed checkpoint; anyone with the log's vkey can
    check it offline.

    \b
    Example:
      trajledger log proof 12 --out entry-12.proof
    """
    from .encode import tlog_proof_bytes
    from .fs import write_file_atomic

    lg = ctx.ledger().log
    size = lg.size
    if index >= size:
        raise click.BadParameter(f"{index} is beyond the log size {size}", param_hint="INDEX")
    proof = lg.tlog_proof(index)
    data = tlog_proof_bytes(proof)
    if out is not None:
        write_file_atomic(out, data, output=True)
    if as_json:
        emit_json({"index": index, "hashes": len(proof.inclusion), "proof": data.decode("utf-8"),
                   "out": None if out is None else str(out)})
    elif out is None:
        click.echo(data, nl=False)
    ok(f"entry {index}: inclusion proof of {len(proof.inclusion)} hash(es) under the checkpoint")


@log.command("consistency")
@click.argument("old", type=click.IntRange(min=1))
@click.argument("new", type=click.IntRange(min=1), required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON with both roots.")
@pass_ctx
def log_consistency(ctx: Context, old: int, new: int | None, as_json: bool) -> None:
    """Print the consistency proof from tree size OLD to NEW (default: the log size).

    Text output: one base64 hash per line.

    \b
    Example:
      trajledger log consistency 8 --json
    """
    from trajledger.verify.consistency import verify_consistency

    lg = ctx.ledger().log
    size = lg.size
    target = size if new is None else new
    if target > size:
        raise click.BadParameter(f"{target} is beyond the log size {size}", param_hint="NEW")
    if old > target:
        raise click.BadParameter(f"{old} is larger than NEW {target}", param_hint="OLD")
    proof = lg.consistency_proof(old, target)
    old_root, new_root = lg.root_at(old), lg.root_at(target)
    verify_consistency(old, target, proof, old_root, new_root)
    if as_json:
        emit_json(
            {
                "old": old,
                "new": target,
                "old_root": base64.b64encode(old_root).decode(),
                "new_root": base64.b64encode(new_root).decode(),
                "proof": [base64.b64encode(h).decode() for h in proof],
            }
        )
    else:
        for h in proof:
            click.echo(base64.b64encode(h).decode())
    ok(f"consistency from size {old} to {target}: {len(proof)} hash(es)")


@log.command("verify")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--skip-data",
    is_flag=True,
    help="Compare each blob's size with its manifest instead of re-hashing it (faster; the "
    "report says 'size only, not re-hashed').",
)
@click.option("--no-store", is_flag=True, help="Check the log alone, not the envelopes and blobs.")
@pass_ctx
def log_verify(ctx: Context, as_json: bool, skip_data: bool, no_store: bool) -> None:
    """Check the whole log: rebuild the tree from the entries, check every tile, the chain,
    treeState and the signed checkpoint against each other, and every envelope and blob in the
    store (every blob re-hashed unless --skip-data).

    The log key is trusted from <ledger>/log-key/log.pub. A log intact by itself must also be
    the one you trust, as for every command: not rolled back or forked from what you saw, not
    signed by a key that replaced yours, pinned ahead under TRAJLEDGER_REQUIRE_PIN=1. Reads the
    ledger only. Exits 1 naming the file and entry index of every problem, and every key file
    of keys/ that holds no valid key.

    \b
    Example:
      trajledger log verify --skip-data
    """
    if skip_data and no_store:
        raise click.UsageError("--skip-data applies to the store's blobs, which --no-store does "
                               "not read")
    from .errors import KeyError_, TamperError
    from .log import verify_log_dir

    ledger = ctx.ledger()
    vkey = ledger.log_vkey()
    if vkey is None:
        warn("log key not readable (log-key/log.pub); trusting the log's own vkey file")
    keys = {}
    damaged = []  # a key file of the ledger that is no key: evidence damaged, not a usage error
    for pub in sorted(ledger.keys.directory.glob("*.pub")):
        try:
            k = ledger.keys.public(pub.stem)
        except KeyError_ as e:
            if isinstance(e.__cause__, OSError):
                raise  # unreadable here (permissions): operational
            damaged.append(f"{e}; the envelope signatures of this key were not checked")
            continue
        keys[k.keyid] = k
    with progress_to(quiet=ctx.quiet, label="verifying the log") as bar:
        report = verify_log_dir(
            ledger.log_dir,
            vkey=vkey,
            store=None if no_store else ledger.store,
            keys=keys,
            skip_data=skip_data,
            on_progress=bar,
        )
    trust = []  # what this user trusts (`LedgerHome.log`), judged once the log is intact
    if report.ok:
        try:
            ledger.log  # noqa: B018 (opening it checks the floor, the pins and the log key)
        except TamperError as e:
            trust.append(str(e))
    with verdict_follows():
        if as_json:
            emit_json({**report.to_json(), "ok": report.ok and not damaged and not trust,
                       "key_problems": damaged, "trust_problems": trust})
        else:
            root = base64.b64encode(report.root).decode() if report.root is not None else "-"
            data = f" ({report.data})" if report.data else ""
            click.echo(
                f"size\t{report.size}\nroot\t{root}\nentries\t{report.entries_checked}\n"
                f"envelopes\t{report.envelopes_checked}\nblobs\t{report.blobs_checked}{data}"
                f"\nproblems\t{len(report.problems) + len(damaged) + len(trust)}"
            )
    for w in report.warnings:
        warn(f"log/{w}")
    if damaged or trust or not report.ok:
        for p in report.problems:
            fail(f"log/{p}")
        for d in [*damaged, *trust]:
            fail(d)
        raise click.exceptions.Exit(EXIT_FAILED)
    blobs = ""
    if report.data is not None:
        blobs = f", {report.blobs_checked} blob(s) {report.data}"
    ok(f"log {report.origin}: {report.size} entries verified{blobs}")


@log.command("cosign")
@click.option("--key", "key_name", required=True, type=KEY_NAME,
              help="The witness's Ed25519 key name.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def log_cosign(ctx: Context, key_name: str, as_json: bool) -> None:
    """Witness the log: check its checkpoint is consistent with the last one this ledger's
    witness cosigned (refusing a rollback or fork), then add a tlog-cosignature line to it.

    Prints the witness's verifier key (cosignature/v1), for trust policies.

    \b
    Example:
      trajledger log cosign --key witness
    """
    from .log import cosign

    ledger = ctx.ledger()
    witness = ledger.keys.signer(key_name)
    res = cosign(ledger.log, witness, ledger.root / "witness")
    if as_json:
        emit_json(
            {
                "origin": res.origin,
                "old_size": res.old_size,
                "size": res.size,
                "witness_vkey": res.witness_vkey,
                "timestamp": res.timestamp,
            }
        )
    else:
        click.echo(res.witness_vkey)
    since = "first cosignature" if res.old_size is None else f"consistent with size {res.old_size}"
    ok(f"log {res.origin} at size {res.size} cosigned by {key_name} ({since})")
