"""The exchange commands: ``export`` (write an evidence bundle) and ``import`` (verify, then take
one in).

Each parses its options, opens the ledger, calls one function of ``ledger.exchange`` and renders
the result: the report on stdout (``--json`` is stable), ``OK:`` / ``FAIL:`` / ``WARNING:``
lines on stderr, exit codes per ``ledger.clikit``. zstandard and the verifier load inside the
commands.

Spec: schemas/bundle.v1.md.
"""

from __future__ import annotations

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
    type=click.Path(path_type=Path),
    help="Bundle file to write (conventionally NAME.tar.zst); with a data --format, the new "
    "directory to write.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["bundle", "minari", "parquet", "jsonl"]),
    default="bundle",
    show_default=True,
    help="bundle: evidence to verify REF offline. minari, parquet, jsonl: the data of the "
    "rollout batch REF as a Minari dataset or as plain files (pandas, polars, DuckDB, datasets).",
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
@POLICY
@pass_ctx
def export(
    ctx: Context,
    ref: str,
    out: Path,
    fmt: str,
    minari_backend: str,
    dataset_id: str | None,
    no_data: bool,
    consistency_from: tuple[int, ...],
    policy_file: Path | None,
) -> None:
    """Write an evidence bundle: everything needed to verify REF and its lineage offline.

    Anyone can check it with 'python -m verify FILE --policy POLICY' (only verify/,
    cryptography and zstandard needed) or take it in with 'trajledger import'.

    With --format minari, parquet or jsonl, write the data of the rollout batch REF instead
    (read from the store and checked against its digests) into the new directory --out.
    """
    if fmt != "bundle":
        from .rollout_export import export_batch

        digest, written = export_batch(
            ctx.ledger(), ref, out, fmt, minari_format=minari_backend, dataset_id=dataset_id
        )
        ok(
            f"{ref}: {written.episodes} episode(s), {written.steps} step(s) written to {out} "
            f"as {fmt} ({len(written.files)} file(s))"
        )
        click.echo(digest)
        return
    if out.is_dir():
        raise click.BadParameter(
            f"{out} is a directory; give the bundle file to write", param_hint="--out"
        )
    from .exchange import export_bundle

    ledger = ctx.ledger()
    result = export_bundle(
        ledger,
        ref,
        out,
        data=not no_data,
        policy=_policy(ledger, policy_file),
        consistency_from=consistency_from,
    )
    for line in result.report.failures():
        warn(f"the lineage does not verify, the recipient will see: {line}")
    omitted = f", {result.omitted} data blob(s) omitted" if result.omitted else ""
    ok(
        f"{ref}: bundle {out} written: {len(result.entries)} log entries, {result.objects} "
        f"objects{omitted}, {result.size} bytes, checkpoint size {result.checkpoint_size}"
    )
    click.echo(result.digest)


@click.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
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
    ctx: Context, file: Path, policy_file: Path | None, keys: tuple[str, ...], as_json: bool
) -> None:
    """Verify the bundle FILE under the policy, then copy its objects and record the import.

    Nothing is copied unless the whole lineage verifies. Importing the same evidence again
    changes nothing and names the earlier record.
    """
    from .exchange import import_bundle

    if not file.is_file():
        from .errors import LedgerError

        raise LedgerError(f"bundle {file}: no such file")
    ledger = ctx.ledger()
    policy = _policy(ledger, policy_file)
    result = import_bundle(ledger, file, policy, [ledger.keys.signer(k) for k in keys])
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
