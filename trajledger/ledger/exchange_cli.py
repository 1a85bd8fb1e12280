"""The exchange commands: ``export`` (write an evidence bundle) and ``import`` (verify, then take
one in).

Each parses its options, opens the ledger, calls one function of ``ledger.exchange`` and renders
the result: the report on stdout (``--json`` is stable), ``OK:`` / ``FAIL:`` / ``WARNING:``
lines on stderr, exit codes per ``ledger.clikit``. zstandard and the verifier load inside the
commands.

Spec: schemas/bundle.v1.md.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

import click

from .clikit import (
    JSON_OPTION,
    KEY_NAME,
    OUT_PATH_OR_URI,
    Context,
    bundle_file,
    emit_json,
    emit_result,
    loading,
    ok,
    pass_ctx,
    verdict_follows,
    visible,
    warn,
)

if TYPE_CHECKING:
    from trajledger.verify.policy import TrustPolicy

    from .home import LedgerHome

__all__ = ["COMMANDS"]


def _policy(ledger: LedgerHome, policy_file: Path | None) -> Any:
    """The policy FILE (followed through this ledger's policy history), else the one in force."""
    from .policy_state import given_policy

    return given_policy(ledger, policy_file, warn)


POLICY = click.option(
    "--policy",
    "policy_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Trust policy TOML (default: the ledger's policy in force).",
)


@click.command("export")
@click.argument("ref", required=False)
@click.option(
    "--out",
    required=True,
    type=OUT_PATH_OR_URI,
    metavar="FILE|DIR|URI",
    help="Where to write: the bundle file (conventionally NAME.tar.zst) or a URI "
    "(s3://bucket/key); the Sigstore bundle file; a new directory for model-signing, minari, "
    "parquet and jsonl.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["bundle", "sigstore", "model-signing", "minari", "parquet", "jsonl"]),
    default="bundle",
    show_default=True,
    help="bundle: evidence to verify REF offline (tar + zstd). sigstore: REF's envelope as a "
    "Sigstore bundle v0.3 (sigstore-js, cosign). model-signing: a checkpoint's files and an "
    "OpenSSF model_signing signature. minari, parquet, jsonl: the data of the rollout batch "
    "REF as a Minari dataset or as plain files (pandas, polars, DuckDB, datasets).",
)
@click.option(
    "--key",
    help="sigstore: the signature to export when several signed (key name or keyid); "
    "model-signing: the trainer key that signs (ECDSA P-256).",
)
@click.option(
    "--minari-backend",
    type=click.Choice(["hdf5", "arrow"]),
    default="hdf5",
    show_default=True,
    help="Minari storage backend (with --format minari).",
)
@click.option("--dataset-id", help="Minari dataset id (default: the source dataset's).")
@click.option(
    "--no-data",
    is_flag=True,
    help="Leave data blobs out (listed as omitted); envelopes, manifests and proofs stay.",
)
@click.option(
    "--consistency-from",
    "consistency_from",
    multiple=True,
    type=click.IntRange(min=1),
    help="Include a consistency proof from this tree size (a checkpoint the recipient holds).",
)
@click.option(
    "--updates-since",
    "updates_since",
    type=click.IntRange(min=0),
    metavar="SIZE",
    help="An update bundle: every entry of this log since tree SIZE (what the recipient "
    "applied: its 'import' and 'monitor' say), a consistency proof from SIZE, and the "
    "envelopes this policy publishes (revocations, erasures, policies by default); REF may "
    "then be left out.",
)
@click.option(
    "--include-revoked",
    is_flag=True,
    help="Export REF in a plain format even though it is revoked, writing the revocation "
    "into the output's metadata (revocations.json; for a Sigstore bundle, FILE.revocations.json "
    "beside it).",
)
@POLICY
@JSON_OPTION
@pass_ctx
def export(
    ctx: Context,
    ref: str,
    out: str,
    fmt: str,
    key: str | None,
    minari_backend: str,
    dataset_id: str | None,
    no_data: bool,
    consistency_from: tuple[int, ...],
    updates_since: int | None,
    include_revoked: bool,
    policy_file: Path | None,
    as_json: bool,
) -> None:
    """Write an evidence bundle: everything needed to verify REF and its lineage offline.

    bundle.json states each rollout batch's licence, consent and retention; blobs deleted by
    erasure records are left out and listed as erased. Anyone can check it with
    'python -m verify FILE --policy POLICY' (only verify/, cryptography and zstandard needed)
    or take it in with 'trajledger import'.

    With --format sigstore or model-signing, write REF for other tools instead. With
    --format minari, parquet or jsonl, write the data of the rollout batch REF (read from the
    store and checked against its digests) into the new directory --out.

    These plain formats carry no revocation: exporting a REF that is revoked, or built on
    something revoked (a checkpoint trained on a revoked batch), exits 1 naming the
    revocation, unless --include-revoked, which writes it into the output's metadata. Nor
    do they carry a verdict: REF's lineage is verified first (as 'verify REF', data
    re-hashed), and one that fails otherwise (a record signed by a key the policy declares
    compromised, approvals that no longer count, a blob changed in the store) exits 1 with
    the lines 'verify' prints. An evidence
    bundle may carry revoked artifacts: it says so, and so does its verification.

    With --updates-since SIZE, the bundle also carries this log's extension since SIZE, so a
    buyer that applied SIZE takes in what changed about what it holds (a revocation, an
    erasure, a key compromise); without REF it carries nothing else: a revocation travels
    alone in a few kilobytes.

    Prints REF's digest on stdout; an update bundle without REF prints the size of the log it
    carries, the buyer's next --updates-since.

    \b
    Examples:
      trajledger export cartpole-bc@2 --out cartpole-bc-2.tar.zst
      trajledger export --updates-since 6 --out updates.tar.zst
      trajledger export cartpole-train@3 --updates-since 6 --out cartpole-train-3.tar.zst
      trajledger export cartpole-random --format parquet --out cartpole-random/
    """
    with loading():
        from .exchange import export_bundle
        from .remote import is_uri, upload

    if ref is None and (fmt != "bundle" or updates_since is None):
        raise click.UsageError("name what to export (REF), or give --updates-since SIZE for an "
                               "update bundle")
    _refuse_options_of_other_formats(fmt, key, dataset_id)
    if fmt != "bundle":
        assert ref is not None
        if no_data or consistency_from or updates_since is not None:
            raise click.UsageError("--no-data, --consistency-from and --updates-since apply to "
                                   "--format bundle")
        if is_uri(out):
            raise click.UsageError(f"--out {out}: a URI is for --format bundle; give a path")
        revoked = _revoked(ctx.ledger(), ref, policy_file, include_revoked)
    elif include_revoked:
        raise click.UsageError("--include-revoked applies to the plain formats (a bundle always "
                               "carries revocations)")
    if fmt in ("minari", "parquet", "jsonl"):
        from .rollout_export import export_batch

        digest, written = export_batch(
            ctx.ledger(), ref, Path(out), fmt, minari_format=minari_backend,
            dataset_id=dataset_id,
        )
        ok(
            f"{ref}: {written.episodes} episode(s), {written.steps} step(s) written to {out} "
            f"as {fmt} ({len(written.files)} file(s))"
        )
        _write_revocations(Path(out) / "revocations.json", digest, revoked)
        emit_result(as_json, digest, {
            "digest": digest, "format": fmt, "out": out, "episodes": written.episodes,
            "steps": written.steps, "files": len(written.files), "revoked": revoked})
        return
    if fmt != "bundle":
        digest = _export_interop(ctx, fmt, ref, Path(out), key, policy_file, as_json, revoked)
        _write_revocations(Path(out).with_name(Path(out).name + ".revocations.json")
                           if fmt == "sigstore" else Path(out) / "revocations.json",
                           digest, revoked)
        return
    if not is_uri(out) and Path(out).is_dir():
        raise click.UsageError(f"--out {out}: is a directory; an evidence bundle is a file")
    with tempfile.TemporaryDirectory(prefix="trajledger-export-") as tmp:
        local = Path(tmp) / "bundle.tar.zst" if is_uri(out) else Path(out)
        # (exp48) what the walk makes (records, the report) lives until the bundle is written:
        # collections meanwhile only walk it again (0.05 to 0.06 CPU-s of the main thread, the
        # export's critical path, on the bench's lineage)
        with loading():
            ledger = ctx.ledger()
            result = export_bundle(
                ledger,
                ref,
                local,
                data=not no_data,
                policy=_policy(ledger, policy_file),
                consistency_from=consistency_from,
                updates_since=updates_since,
            )
        if is_uri(out):
            upload(local, out)
    carried = [line for line in result.report.failures() if " > revoked: " in line]
    if carried:
        warn(f"the bundle carries {len(carried)} revoked artifact(s) (with their revocations: "
             "its verification fails naming them)")
    for line in result.report.failures():
        warn(f"the lineage does not verify, the recipient will see: {line}")
    if result.handovers_dropped:
        from trajledger.verify.log_key import MAX_HANDOVERS

        warn(f"the log's key was rotated {result.handovers_dropped + MAX_HANDOVERS} times; the "
             f"bundle carries the last {MAX_HANDOVERS} handovers, the most a verifier takes: a "
             "recipient who trusts only a key older than handover "
             f"{result.handovers_dropped + 1} cannot follow them (give it the log's current key)")
    omitted = f", {result.omitted} data blob(s) omitted" if result.omitted else ""
    if result.erased:
        warn(
            f"{len(result.erased)} blob(s) of the lineage are not in the bundle: erasure "
            "records deleted them (listed as erased in bundle.json; their digests still verify)"
        )
    since = (f", the log's {result.extension} entries since size {updates_since}"
             if updates_since is not None else "")
    ok(
        f"{ref or 'updates'}: bundle {out} written: {len(result.entries)} log entries"
        f"{since}, {result.objects} objects{omitted}, {result.size} bytes, checkpoint size "
        f"{result.checkpoint_size}"
    )
    if result.terms:
        ok(f"terms stated in bundle.json: {_terms_summary(result.terms)}")
    emit_result(as_json, result.digest or str(result.checkpoint_size), {
        "digest": result.digest, "format": fmt, "out": out, "entries": len(result.entries),
        "objects": result.objects, "omitted": result.omitted, "erased": len(result.erased),
        "size": result.size, "checkpointSize": result.checkpoint_size,
        "extension": result.extension, "failures": result.report.failures()})


def _refuse_options_of_other_formats(fmt: str, key: str | None, dataset_id: str | None) -> None:
    """An option another format reads is a usage error, not silently ignored (a ``--key`` the
    user meant to choose the signature with, say; review rev15)."""
    from click.core import ParameterSource

    given = click.get_current_context().get_parameter_source("minari_backend")
    for option, applies in (("--key", key is None or fmt in ("sigstore", "model-signing")),
                            ("--dataset-id", dataset_id is None or fmt == "minari"),
                            ("--minari-backend", given is not ParameterSource.COMMANDLINE
                             or fmt == "minari")):
        if not applies:
            formats = "sigstore and model-signing" if option == "--key" else "minari"
            raise click.UsageError(f"{option} applies to --format {formats}, not {fmt}")


def _revoked(ledger: LedgerHome, ref: str, policy_file: Path | None, include: bool) -> list[str]:
    """The revocations of the artifact REF names and of its lineage (what it was built on: a
    checkpoint's data, a dataset's batches), under the policy; refused unless ``include``
    (then they go into the output's metadata). Any other failure of the lineage (a record
    signed by a key the policy declares compromised, an approval that does not count, a
    missing object) is refused as ``verify`` refuses it, ``include`` or not: a plain format
    carries no verdict, so an outside verifier would take what this ledger's refuses."""
    from trajledger.verify.errors import PolicyError

    from .catalog import Catalog
    from .policy_state import current_policy
    from .status import revocations

    item = Catalog(ledger).resolve(ref)
    in_force = current_policy(ledger) if policy_file is None else None
    policy = _policy(ledger, policy_file) if policy_file is not None or in_force else None
    found = revocations(ledger, item.digest, policy)
    report = None if policy is None else _lineage_report(ledger, item.digest, policy)
    causes = [] if report is None else report.causes()
    found += [f"in its lineage: {line}" for line in _revoked_lineage(item.digest, causes)]
    if found and not include:
        raise PolicyError(
            f"{item.kind} {item.ref or item.digest}: {'; '.join(found)}: a plain format does "
            "not carry that, so nothing was written; export an evidence bundle, or pass "
            "--include-revoked to write the revocation into the output's metadata"
        )
    if report is not None and any(not all(_revocation(c) for c in checks)
                                  for _node, checks, _n in causes):
        from trajledger.verify.errors import VerificationError

        n, failed = report.count()  # what `verify REF` prints (`runner.commands.report_raise`)
        raise VerificationError(f"{ref}: {failed} of {n} checks failed\n"
                                + "\n".join(report.failures()))
    return found


def _revocation(check: Any) -> bool:
    return bool(check.what == "revoked" or check.what.startswith("revocation record"))


def _lineage_report(ledger: LedgerHome, digest: str, policy: TrustPolicy,
                    data: Literal["hash", "size"] = "hash") -> Any:
    """``digest``'s lineage verified as ``verify REF`` verifies it: every record, its
    signatures under the policy, approvals, revocations, the log, and every data blob
    re-hashed (what leaves in a plain format carries no verdict: a blob changed in the store
    fails here as it fails ``verify``; the cost is ``verify``'s); ``data="size"``: by size, for
    an import of evidence taken in before (its objects were verified as they were stored)."""
    from trajledger.verify.lineage import LineageVerifier, name_files

    from .evidence import ledger_evidence

    verifier = LineageVerifier(ledger_evidence(ledger), policy, index=ledger.trust_state(),
                               data=data)
    try:
        report = verifier.verify(digest)
        name_files(report.nodes[digest], verifier.evidence)  # as `verify REF` counts them
    finally:
        verifier.close()
    return report


def _revoked_lineage(digest: str, causes: list[Any]) -> list[str]:
    """The root causes of ``digest``'s lineage (``causes``: `Report.causes`) that are
    revocations, or revocation records that cannot be read, of other artifacts than
    ``digest``."""
    from trajledger.verify.blame import failure_lines

    return failure_lines([
        (node, stops, dependents) for node, checks, dependents in causes
        if node.id != digest and (stops := [c for c in checks if _revocation(c)])])


def _write_revocations(path: Path, digest: str, revoked: list[str]) -> None:
    """With --include-revoked, the revocations of what was exported, beside it."""
    import json

    from .fs import write_file_atomic

    if not revoked:
        return
    doc = {"artifact": digest, "revoked": revoked,
           "note": "this artifact is revoked: it must no longer be used"}
    write_file_atomic(path, json.dumps(doc, indent=2).encode("utf-8") + b"\n", durable=False,
                      output=True)
    warn(f"{digest}: revoked ({'; '.join(revoked)}); written anyway, with {path}")


def _terms_summary(terms: Any) -> str:
    """``2 batch(es): licence CC-BY-4.0 (2); consent ...`` for the export's terms."""
    parts = []
    for field in ("licence", "consent", "retention"):
        counts: dict[str, int] = {}
        for t in terms:
            value = getattr(t, field) or "none stated"
            counts[value] = counts.get(value, 0) + 1
        parts.append(f"{field} " + ", ".join(f"{k} ({n})" for k, n in sorted(counts.items())))
    return f"{len(terms)} batch(es): " + "; ".join(parts)


def _export_interop(
    ctx: Context, fmt: str, ref: str, out: Path, key: str | None, policy_file: Path | None,
    as_json: bool, revoked: list[str],
) -> str:
    """``export --format sigstore`` or ``model-signing`` (docs/sigstore.md); the digest."""
    if fmt == "sigstore" and out.is_dir():
        raise click.UsageError(f"--out {out}: is a directory; a Sigstore bundle is a file")
    ledger = ctx.ledger()
    if fmt == "sigstore":
        from .sigstore_export import export_sigstore

        try:
            done = export_sigstore(ledger, ref, out, key=key)
        except ValueError as e:
            raise click.UsageError(str(e)) from e
        how = "its stored keyless bundle" if done.keyless else "no tlog entry, public-key hint"
        ok(f"{ref}: Sigstore bundle {out} written: signature by {done.signer} ({how})")
        emit_result(as_json, done.digest, {"digest": done.digest, "format": fmt, "out": str(out),
                                           "signer": done.signer, "keyless": done.keyless,
                                           "revoked": revoked})
        return str(done.digest)
    from .model_signing_export import export_model_signing

    if key is None:
        raise click.UsageError("--format model-signing needs --key, an ECDSA P-256 trainer key")
    ms = export_model_signing(
        ledger, ref, out, ledger.keys.signer(key), _policy(ledger, policy_file)
    )
    ok(
        f"{ref}: {ms.files} file(s) and {out / 'model.sig'} written (model_signing, key {key}); "
        f"recorded at log index {ms.index}"
    )
    emit_result(as_json, ms.digest, {"digest": ms.digest, "format": fmt, "out": str(out),
                                     "files": ms.files, "logIndex": ms.index,
                                     "revoked": revoked})
    return str(ms.digest)


@click.command("import")
@click.argument("file", metavar="FILE|URI")
@POLICY
@click.option(
    "--key",
    "keys",
    multiple=True,
    required=True,
    type=KEY_NAME,
    help="Approver key signing the import record (repeat up to the approver threshold).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verification report as JSON.")
@pass_ctx
def import_(
    ctx: Context, file: str, policy_file: Path | None, keys: tuple[str, ...], as_json: bool
) -> None:
    """Verify the bundle FILE under the policy, then store its objects, log the vendor's records
    in this ledger's log (so they can be approved and trained on here) and record the import.

    FILE may be a URI (s3://bucket/key): it is downloaded first, into LEDGER/tmp (an object
    larger than a bundle may be, or than the free space there, is refused unread). Nothing is
    stored unless the whole lineage verifies (licences the policy does not accept, witness
    cosignatures it requires, a rollback or fork of the vendor's log: refused, saying why;
    two imports at once are judged one after the other, under the log's lock, for that too).
    Importing the same evidence again records nothing and names the earlier record (it
    stores data a first import without them lacked, and warns of what this ledger holds
    against the artifact since: a revocation, an erasure, a withdrawal). The
    objects are read once, hashed as read, into a staging directory under LEDGER/tmp (it needs
    their size free on the ledger's disk) and moved into the store only once everything
    verified.

    Prints the verification report, then the imported artifact's digest as the last line
    (with --json, only the report: one JSON document whose subject is that digest). An update
    bundle ('export --updates-since') holds no artifact: the report alone, its subject
    'bundle'; the OK line on stderr names the size of the vendor's log applied.

    \b
    Example:
      trajledger import cartpole-train-2.tar.zst --key approver
    """
    # (imp49) as `export`'s walk (exp48): the modules, the open ledger and what the bundle's
    # verification makes (its report, the records taken in) live until the import is done,
    # so the collections that would walk them meanwhile are wasted, on the main thread
    with loading():
        import sqlite3

        from trajledger.verify.errors import VerificationError

        from . import first_contact
        from .catalog import named_json, named_report, qualified_nodes, renamed
        from .errors import LedgerError, disk_error
        from .exchange import import_bundle, max_bundle_file
        from .fs import temp_dir
        from .remote import download, is_uri

        ledger = ctx.ledger()
        policy = _policy(ledger, policy_file)
        signers = [ledger.keys.signer(k) for k in keys]
        with temp_dir(ledger.scratch) as tmp:  # a killed import's is swept (`sweep_leftovers`)
            path = (download(file, Path(tmp), limit=max_bundle_file()) if is_uri(file)
                    else bundle_file(Path(file)))
            _refuse_compressed_twice(path, file)
            result = import_bundle(ledger, path, policy, signers)
    # Evidence taken in before: what this ledger holds of it now besides the bundle's view as
    # of its tree: a revocation, an erasure, a withdrawn approval recorded since (rev41 f. 1)
    held = (named_report(ledger, _lineage_report(ledger, str(result.digest), policy, "size")
                         ).failures()
            if not result.recorded and result.index >= 0 and result.digest else [])
    changes = result.changes
    # An imported record whose plain name names another here by its qualified name (out50);
    # the state unreadable after the import is recorded: plain names (said below, fault27)
    try:
        names = qualified_nodes(ledger, result.report, here=False)
    except (LedgerError, OSError, sqlite3.Error):
        names = {}
    plain = names.get(str(result.digest), result.name)
    named = (plain if plain.startswith(f"{result.kind} ")  # an evaluation's name
             else f"{result.kind} {plain}")  # says its kind (upd47, out46's Left)
    what = (f"{named} ({result.digest[:19]}…) from {result.origin}"
            if result.digest else f"updates from {result.origin}")
    try:  # before the document, for its `import.lookalikes` (left33 finding 2)
        lookalikes: list[str] | None = _lookalikes(ledger, result.report)
        failed = None
    except (LedgerError, OSError, sqlite3.Error) as e:  # said after the OK line (fault27)
        if not result.recorded or isinstance(e, VerificationError) or (
                isinstance(e, sqlite3.Error) and not disk_error(e)):
            raise
        lookalikes, failed = None, e  # unknown: null in the JSON
    unread = first_contact.unread_after(ledger, result.logged, what)  # gap39
    # (its reader gone, a look-alike check that failed is still exit 3: fix60, rev52's Left)
    with verdict_follows():
        if as_json:  # one JSON document: its subject is the digest (or "bundle": updates alone)
            emit_json(named_json(result.report.to_json(), names)
                      | ({"ok": False} if held else {}) | {"import": {
                "heldHere": held,
                "index": result.index, "recorded": result.recorded,
                "logged": list(result.logged), "applied": result.applied,
                **(changes.to_json() if changes else {}),
                "unseen": [{"digest": d, "label": x} for d, x in result.unseen.items()],
                "unread": unread,
                "lookalikes": lookalikes}})
        else:
            click.echo("\n".join(renamed(result.report, names).render()))
    # The size applied is what the vendor's next update bundle starts from (aud34 finding 4).
    since = (f"; its log applied up to size {result.applied}: ask its owner for updates with "
             f"'trajledger export --updates-since {result.applied}'")
    if result.index < 0:
        ok(f"{what}: applied already up to the bundle's checkpoint; nothing new{since}")
    elif result.recorded:
        ok(
            f"{what}: imported"
            # taken in with the revocations it fails on: its verdict is the report's (out47)
            + ("" if result.report.ok else " as it fails above (revoked: every use of it is "
               "refused here)")
            + f", {result.objects} object(s), {len(result.logged)} foreign "
            f"record(s) in this log{_span(result.logged)}, import record at log index "
            f"{result.index}{since}"
        )
    else:
        ok(f"{what}: already imported at log index {result.index}; nothing new recorded{since}")
        for line in held:  # (the report above is the bundle's)
            warn(f"{what}: as this ledger holds it: {line}")
    if result.unseen:  # a full bundle met first (out37's Left): nothing of its log applied
        warn(f"{what}: you hold {len(result.unseen)} record(s) that other logs brought you, "
             "signed by its keys (or any, when one of its keys is an approver here: it may "
             "revoke anything), which this bundle does not carry: "
             f"{', '.join(visible(x) for x in result.unseen.values())}; what its log says of "
             "them (a revocation, an erasure) cannot be seen in a full bundle, so nothing of "
             "the log is marked applied: run 'trajledger monitor URL --vkey VKEY' of it, or "
             "import an update it exports with --updates-since 0")
    for line in unread:
        warn(line)
    if changes is not None:
        show_changes(changes)
    warn_origin(result.origin)
    for line in lookalikes or ():
        warn(line)
    if failed is not None:
        raise LedgerError(f"{what}: the import is recorded (log index {result.index}), but "
                          f"its names could not then be checked for look-alikes: {failed}"
                          ) from failed
    if not as_json and result.digest:
        click.echo(result.digest)


def warn_origin(log: str) -> None:
    """One WARNING when the origin of another party's log (``log``: ``ORIGIN`` or
    ``ORIGIN+KEYHASH``, `catalog.origin_name`) is off the grammar of this ledger's origins
    (`names.origin_problem`): the log is trusted by its key, and named to people by this."""
    from .names import origin_problem

    origin, _, key = log.partition("+")
    if problem := origin_problem(origin):
        tell = f"; tell it by its key hash {key}" if key else "; tell it by its key (--vkey)"
        warn(f"the log's origin {origin!a} {problem}{tell}")


def _lookalikes(ledger: Any, report: Any) -> list[str]:
    """`lookalike_warnings` of an import's report: every node of the bundle's lineage."""
    rows = [(n.kind, n.name, n.version, n.id) for n in report.nodes.values()]
    return list(lookalike_warnings(ledger, rows))


def lookalike_warnings(ledger: Any, rows: Iterable[tuple[str, str, str, str]]) -> Iterator[str]:
    """A WARNING's text for each name another party signed, of ``rows`` ``(kind, name,
    version, digest)``, that this ledger would refuse to record (`record.lookalike`,
    `names.imported_problem`): it is theirs, kept as signed, and may be made to pass for
    another. Yielded as found (`import`, ``monitor``: left32 finding 1); this ledger's trust
    state is read only for the second kind of problem."""
    from trajledger.verify.kinds import NAMED

    from .names import imported_problem
    from .record import lookalike

    rows = list(rows)
    for name in sorted({name for _kind, name, _version, _digest in rows if name}):
        problem = lookalike(name)
        if problem:
            yield f"imported name {visible(name)!r} {problem}; refer to it by its digest"
    state = ledger.trust_state()
    for kind, name, version, digest in sorted(
            (r for r in rows if r[0] in NAMED and r[2]), key=lambda r: (r[3], r[1], r[2])):
        if not lookalike(name) and (problem := imported_problem(state, name, version)):
            yield (f"imported {kind} {name!a}@{version!a} {problem}; refer to it by its "
                   f"digest {digest[:19]}…")


def _refuse_compressed_twice(path: Path, name: str) -> None:
    """Refuse, with what to do, a bundle whose zstd frame holds another zstd frame: what
    ``export --out s3://...tar.zst`` stored before 2026-12-03 (pyarrow compressed the bundle
    again by the name's extension; docs/SECURITY.md, rev10's limits, fix9); and a file that is
    no zstd frame at all (rollouts, a tar unpacked: out50), saying what ``import`` takes.

    Raises:
        FormatError: the file is a bundle compressed twice, or not zstd-compressed.
    """
    import zstandard

    from trajledger.verify.errors import FormatError
    from trajledger.verify.not_bundle import HEAD, cut_short_line

    with path.open("rb") as f:
        head = f.read(HEAD)
    what = f"bundle {PurePosixPath(name).name}"
    if line := cut_short_line(what, head):  # (out55)
        raise FormatError(f"{line}; nothing imported")
    if head[:4] != b"\x28\xb5\x2f\xfd":  # zstd's magic number
        raise FormatError(
            f"{what}: not zstd-compressed (magic "
            f"{head[:4].hex() or 'none'}): not a bundle; 'import' takes the .tar.zst file "
            "'trajledger export' writes, as it was sent (rollout files are recorded with "
            "'trajledger record'); nothing imported")
    try:
        with path.open("rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as inner:
            twice = inner.read(4) == b"\x28\xb5\x2f\xfd"  # zstd's magic number, again
    except (OSError, zstandard.ZstdError):
        return  # not zstd, or unreadable: the bundle reader says what it is
    if twice:
        raise FormatError(
            f"{name}: a bundle compressed twice (as 'export --out s3://...' stored bundles "
            "before 2026-12-03): copy it down, run 'zstd -d' on it once, and import the "
            "file that gives; nothing imported"
        )


def show_changes(changes: Any) -> None:
    """An import's or a monitor's changes (`updates.Changes`), one stderr line each."""
    from .user_state import notice

    for level, text in changes.lines():
        {"ok": ok, "warning": warn, "note": notice}[level](text)


def _span(indices: tuple[int, ...]) -> str:
    """`` (log indices 1..2, 6)``: the indices as runs, the first eight of them (out43: records
    at 1, 2 and 6 were ``1..6``)."""
    if not indices:
        return ""
    runs: list[list[int]] = []
    for i in sorted(set(indices)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    shown = ", ".join(f"{lo}" if lo == hi else f"{lo}..{hi}" for lo, hi in runs[:8])
    more = f", … ({len(runs) - 8} more runs)" if len(runs) > 8 else ""
    one = len(runs) == 1 and runs[0][0] == runs[0][1]
    return f" (log index {shown})" if one else f" (log indices {shown}{more})"


COMMANDS = [export, import_]
