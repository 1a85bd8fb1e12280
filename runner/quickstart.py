"""``trajledger quickstart DIR``: the README's main job, end to end on the embedded defaults.

It runs every step a new user would type, through the same library calls the commands use, and
narrates them. Keys are encrypted when ``TRAJLEDGER_PASSPHRASE`` is set; otherwise they are demo
keys written in the clear, with a warning. Its last stdout line is the final artifact's digest.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from ledger.clikit import Context, pass_ctx, warn

__all__ = ["quickstart"]


def _step(text: str) -> None:
    click.echo(click.style(f"==> {text}", bold=True), err=True)


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@pass_ctx
def quickstart(ctx: Context, directory: Path) -> None:
    """Create a demo ledger in DIRECTORY and walk through signing, logging and verification."""
    from ledger.errors import LedgerError
    from ledger.files import collect_files, manifest_for
    from ledger.home import Ledger
    from ledger.keys import PASSPHRASE_ENV
    from ledger.signing import files_predicate, sign_statement
    from verify import predicates
    from verify.dsse import Envelope
    from verify.errors import VerificationError
    from verify.manifest import diff_tree, manifest_from_statement
    from verify.statement import verify_statement

    if (directory / "ledger.toml").exists():
        raise LedgerError(f"{directory}: already holds a ledger; pick a new directory")
    encrypt = bool(os.environ.get(PASSPHRASE_ENV))
    if not encrypt:
        warn(f"{PASSPHRASE_ENV} is not set: the demo keys are written unencrypted (demo only)")

    _step(f"creating a ledger in {directory}")
    ledger = Ledger.init(directory, origin="trajledger.quickstart/demo")
    vendor = ledger.keys.create("vendor", encrypt=encrypt)
    click.echo(f"key vendor {vendor.keyid}")

    _step("writing a small dataset and signing it as the vendor")
    data = directory / "dataset"
    (data / "shards").mkdir(parents=True, exist_ok=True)
    for i in range(3):
        (data / "shards" / f"part-{i}.jsonl").write_text(
            "".join(f'{{"episode_id": "{i}-{j}", "return": {j}}}\n' for j in range(100))
        )
    (data / "README.txt").write_text("demo rollouts\n")
    files = collect_files([data])
    manifest = manifest_for(files)
    ptype, predicate = files_predicate(manifest)
    envelope = sign_statement([("dataset", manifest.digest)], ptype, predicate, [vendor])
    env_path = directory / "dataset.intoto.json"
    env_path.write_bytes(envelope.to_bytes() + b"\n")
    click.echo(f"signed {len(manifest.files)} files: {manifest.digest}")

    _step("verifying the dataset as a buyer would, with only the vendor's public key")
    parsed = Envelope.from_bytes(env_path.read_bytes())
    verified = verify_statement(parsed, [ledger.keys.public("vendor")], allowed_predicate_types={predicates.FILES})
    signed = manifest_from_statement(verified.statement)
    diff = diff_tree(signed, collect_files([data]))
    diff.raise_if_failed("dataset")
    click.echo("OK: every file matches and the vendor's signature holds")

    _step("tampering with one shard: verification must fail")
    shard = data / "shards" / "part-1.jsonl"
    original = shard.read_bytes()
    shard.write_bytes(original.replace(b'"return": 7', b'"return": 70'))
    diff = diff_tree(signed, collect_files([data]))
    try:
        diff.raise_if_failed("dataset")
        raise VerificationError("tampered dataset was accepted")  # pragma: no cover - a bug
    except VerificationError as e:
        if "tampered dataset was accepted" in str(e):
            raise
        click.echo(f"refused as expected: {diff.problems()[0]}")
    shard.write_bytes(original)

    click.echo(manifest.digest)
