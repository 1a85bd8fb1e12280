"""``show``'s ``carries`` line tells the command that prints what the record shown carries, and
that command finds the record shown (rev49 finding 7).

The line was ``('trajledger show cartpole-bc@1 --content metrics' prints it)`` by the record's
plain name: after a name clash (the lab's ``cartpole-bc@1`` imported, then a ``cartpole-bc@1``
of the buyer's own, out49 finding 2) that name is the buyer's, and the command printed the
buyer's metrics and lock for the lab's. docs/SECURITY.md, "Review of 2026-12-07,
thirty-seventh round (rev49)".
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import testkit
from click.testing import CliRunner
from test_out48_reported import lab_buyer


def test_the_carries_command_prints_the_shown_records_content(
        runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path) -> None:
    theirs, buyer = lab_buyer(runner, quickstart_template, tmp_path)
    buyer.run("import", tmp_path / "ck.tar.zst", "--key", "b1", "--key", "b2")
    buyer.run("train", "--dataset", "cartpole-train@1", "--key", "bt", "--name", "cartpole-bc",
              "--version", "1", "--seed", "7")
    mine = json.loads(buyer.run("show", "cartpole-bc@1", "--json").stdout)["digest"]
    assert mine != theirs
    for digest in (theirs, mine):
        shown = buyer.run("show", digest).stdout
        told = re.findall(r"carries +(\S+) .*\('(trajledger show .*)' prints it\)", shown)
        assert [name for name, _how in told] == ["dependency-lock", "metrics"], shown
        for name, how in told:
            argv = shlex.split(how)
            assert argv[:2] == ["trajledger", "show"] and argv[3:] == ["--content", name], how
            printed = buyer.run(*argv[1:]).stdout_bytes
            assert printed == buyer.run("show", digest, "--content", name).stdout_bytes, how
