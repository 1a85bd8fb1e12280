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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .clikit import Context, emit_json, ok, pass_ctx, warn

if TYPE_CHECKING:
    from .home import Ledger

__all__ = ["COMMANDS"]


def _policy(ledger: Ledger, policy_file: Path | None) -> Any:
    """The policy FILE (followed through this ledger's policy history), else the one in force."""
    from trajledger.verify.policy import TrustPolicy

    from ._policy_state import current_policy
    from .errors import LedgerError
    from .verify_files import read_input

    trusted = None
    if policy_file is not None:
        data = read_input(policy_file, "policy")
        trusted = TrustPolicy.from_toml(data, policy_file.parent, f"policy {policy_file}")
    found = current_policy(ledger, trusted)
    if found is None:
        raise LedgerError(
            "no trust policy: pass --policy FILE, or record one with 'trajledger policy set FILE'"
        )
    return found[1]


POLICY = click.option(
    "--policy",
    "policy_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Trust policy TOML (default: the ledger's policy in force).",
)


@click.command("export")
@click.argument("ref")
@click.option(
    "--out",
    required=True,
    metavar="FILE|URI",
    help="Bundle file to write (conventionally NAME.tar.zst), or a URI (s3://bucket/key).",
)
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
@POLICY
@pass_ctx
def export(
    ctx: Context,
    ref: str,
    out: str,
    no_data: bool,
    consistency_from: tuple[int, ...],
    policy_file: Path | None,
) -> None:
    """Write an evidence bundle: everything needed to verify REF and its lineage offline.

    Anyone can check it with 'python -m verify FILE --policy POLICY' (only verify/,
    cryptography and zstandard needed) or take it in with 'trajledger import'.
    """
    from .exchange import export_bundle
    from .remote import is_uri, upload

    ledger = ctx.ledger()
    with tempfile.TemporaryDirectory(prefix="trajledger-export-") as tmp:
        local = Path(tmp) / "bundle.tar.zst" if is_uri(out) else Path(out)
        result = export_bundle(
            ledger,
            ref,
            local,
            data=not no_data,
            policy=_policy(ledger, policy_file),
            consistency_from=consistency_from,
        )
        if is_uri(out):
            upload(local, out)
    for line in result.report.failures():
        warn(f"the lineage does not verify, the recipient will see: {line}")
    omitted = f", {result.omitted} data blob(s) omitted" if result.omitted else ""
    ok(
        f"{ref}: bundle {out} written: {len(result.entries)} log entries, {result.objects} "
        f"objects{omitted}, {result.size} bytes, checkpoint size {result.checkpoint_size}"
    )
    click.echo(result.digest)


@click.command("import")
@click.argument("file", metavar="FILE|URI")
@POLICY
@click.option(
    "--key",
    "keys",
    multiple=True,
    required=True,
    help="Approver key signing the import record (repeat up to the approver threshold).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verification report as JSON.")
@pass_ctx
def import_(
    ctx: Context, file: str, policy_file: Path | None, keys: tuple[str, ...], as_json: bool
) -> None:
    """Verify the bundle FILE under the policy, then copy its objects and record the import.

    FILE may be a URI (s3://bucket/key): it is downloaded to a temporary file first. Nothing is
    copied unless the whole lineage verifies. Importing the same evidence again changes
    nothing and names the earlier record.
    """
    from .exchange import import_bundle
    from .remote import download, is_uri

    ledger = ctx.ledger()
    policy = _policy(ledger, policy_file)
    signers = [ledger.keys.signer(k) for k in keys]
    with tempfile.TemporaryDirectory(prefix="trajledger-import-") as tmp:
        path = download(file, Path(tmp)) if is_uri(file) else Path(file)
        if not path.is_file():
            from .errors import LedgerError

            raise LedgerError(f"bundle {file}: no such file")
        result = import_bundle(ledger, path, policy, signers)
    if as_json:
        emit_json(result.report.to_json())
    else:
        click.echo("\n".join(result.report.render()))
    what = f"{result.kind} {result.name} ({result.digest[:19]}…) from {result.origin}"
    if result.recorded:
        ok(f"{what}: imported, {result.objects} object(s), record at log index {result.index}")
    else:
        ok(f"{what}: already imported at log index {result.index}; nothing new recorded")
    click.echo(result.digest)


COMMANDS = [export, import_]
