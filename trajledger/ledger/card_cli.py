"""``trajledger card``: write a dataset's card for Hugging Face or Croissant tools.

Parses its options, gathers the card's facts from the verified records (`ledger.cards`),
renders them (`ledger.card_formats`) and writes the file atomically (or prints it).
Spec: docs/cards.md.
"""

from __future__ import annotations

from pathlib import Path

import click

from .clikit import OUT_PATH, Context, ok, pass_ctx, warn
from .exchange_cli import POLICY

__all__ = ["COMMANDS"]


@click.command("card")
@click.argument("dataset")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["hf", "croissant"]),
    required=True,
    help="hf: a Hugging Face dataset card (README.md with YAML metadata). croissant: a "
    "Croissant 1.0 JSON-LD file with the Responsible AI (RAI) fields.",
)
@click.option(
    "--out",
    type=OUT_PATH,
    help="File to write (conventionally README.md or croissant.json); default: stdout.",
)
@click.option(
    "--skip-data",
    is_flag=True,
    help="Compare data sizes with the manifests instead of re-hashing (the card says so).",
)
@POLICY
@pass_ctx
def card(
    ctx: Context,
    dataset: str,
    fmt: str,
    out: Path | None,
    skip_data: bool,
    policy_file: Path | None,
) -> None:
    """Write the card of DATASET (NAME@VERSION or digest) from its verified records.

    The producer's part (what the data is, collection, consent, retention, personal
    information, uses, access) comes from the card signed with the dataset ('dataset create
    --card card.toml'); the rest from signed records: digests, sizes, split, licences,
    environment and evaluator versions, approvals, revocations, erasures and the log
    checkpoint. A lineage that fails verification gets no card (exit 1); a revoked one gets a
    card that says so.

    \b
    Example:
      trajledger card cartpole-train@1 --format hf --out README.md
    """
    from .card_formats import render
    from .cards import dataset_card
    from .catalog import Catalog, RefError
    from .fs import write_output

    ledger = ctx.ledger()
    try:
        facts = dataset_card(ledger, dataset, ledger.policy(policy_file),
                             data="size" if skip_data else "hash")
    except RefError as e:  # (a checkpoint's card: where it is, out43 finding 10)
        try:
            Catalog(ledger).resolve(dataset, {"checkpoint", "release"})
        except RefError:
            raise e from None
        raise RefError(f"{e}; a checkpoint's card is its lineage ('trajledger lineage "
                       f"{dataset} --format html --out lineage.html') and the cards of the "
                       "datasets it was trained on ('trajledger card DATASET', docs/cards.md)"
                       ) from None
    data = render(facts, fmt)
    for r in facts.revocations:
        warn(f"{r.about} is revoked: {r.fields['reason']} (log index {r.index}); the card "
             "says so")
    if facts.producer is None:
        warn(f"dataset {facts.ref} has no card of its producer ("
             + ("erased" if facts.card_erased else "recorded without --card")
             + "): its sections say 'not documented'")
    if out is None:
        click.echo(data.decode("utf-8"), nl=False)
    else:
        write_output(out, data, output=True)
    ok(f"card of dataset {facts.ref} ({fmt}) " + (f"written to {out}" if out else "printed"))


COMMANDS = [card]
