"""The ``trajledger`` command: composes the commands of each package.

Start-up imports only click and the command modules; each command imports what it needs.
"""

from __future__ import annotations

from pathlib import Path

import click

from trajledger.ledger import (
    artifact_cli,
    card_cli,
    exchange_cli,
    fsck_cli,
    index_cli,
    trust_cli,
)
from trajledger.ledger import cli as ledger_cli
from trajledger.ledger.clikit import Context, Group, default_home, warnings_as_lines

from . import commands as runner_commands
from . import eval_cli, lineage_cli
from .quickstart import quickstart

__all__ = ["main"]


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--ledger",
    "home",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="TRAJLEDGER_HOME",
    default=None,
    help="Ledger directory [env TRAJLEDGER_HOME; default: the nearest ledger from the current "
    "directory up, as git finds .git: a ledger directory itself or a .trajledger in it; "
    "init: ./.trajledger].",
)
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks for internal errors.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
@click.version_option(None, "-V", "--version", package_name="trajledger", prog_name="trajledger")
@click.pass_context
def main(ctx: click.Context, home: Path | None, verbose: bool, quiet: bool) -> None:
    """trajledger: a provenance ledger for RL rollouts.

    Sign and verify datasets, record rollouts in a tamper-evident log, train only on approved
    data, and prove what made a checkpoint.

    Exit codes: 0 ok, 1 verification failed or data refused, 2 usage, 3 operational problem,
    4 internal bug. Every command that prints a result takes --json; shell completion:
    docs/cli.md.

    \b
    Examples:
      trajledger quickstart demo
      trajledger --ledger demo lineage cartpole-bc@2 --format html --out lineage.html
    """
    from trajledger.api import Ledger

    warnings_as_lines()
    ctx.obj = Context(home or default_home(), verbose, quiet, opener=Ledger.open,
                      found=home is None)


for _command in [
    *ledger_cli.COMMANDS,
    *artifact_cli.COMMANDS,
    *card_cli.COMMANDS,
    *runner_commands.COMMANDS,
    *eval_cli.COMMANDS,
    *lineage_cli.COMMANDS,
    *index_cli.COMMANDS,
    *exchange_cli.COMMANDS,
    *fsck_cli.COMMANDS,
    *trust_cli.COMMANDS,
]:
    main.add_command(_command)
main.add_command(quickstart)
