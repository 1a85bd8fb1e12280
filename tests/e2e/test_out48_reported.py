"""What out48's outsiders found (the three kinds of user, each on a clean ledger: a team
signing its own datasets, an auditor, two vendors exchanging bundles); docs/SECURITY.md,
"Review of 2026-12-07, thirty-fourth round (out48)".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import testkit
from click.testing import CliRunner
from test_runner_cli import expect, run


def test_key_list_does_not_call_a_public_half_alone_a_key_in_the_clear(
    runner: CliRunner, home: Path
) -> None:
    """The team's second machine holds only the public keys (``keys/*.pub``, as an auditor's
    copy of a ledger does; or a key whose ``.key`` was lost): ``key list`` marked each
    ``PLAIN``, the word it uses for a private key left unencrypted, and ``--json`` said
    ``"encrypted": false``, nothing else. Expected: it says the private half is not here
    (it verifies, it cannot sign), ``--json`` ``"private": false``; a key in the clear keeps
    ``PLAIN``."""
    expect(run(runner, home, "key", "new", "held", "--no-encrypt"), 0)
    expect(run(runner, home, "key", "new", "gone", "--no-encrypt"), 0)
    (home / "keys" / "gone.key").unlink()
    text = run(runner, home, "key", "list")
    expect(text, 0)
    lines = {line.split("\t")[0]: line.split("\t")[3] for line in text.stdout.splitlines()}
    assert lines["held"] == "PLAIN", lines
    assert "PLAIN" not in lines["gone"] and "cannot sign" in lines["gone"], lines
    listed = run(runner, home, "key", "list", "--json")
    expect(listed, 0)
    rows = {k["name"]: k for k in json.loads(listed.stdout)}
    assert rows["gone"]["private"] is False and rows["held"]["private"] is True, rows


def test_an_export_of_a_damaged_object_names_commands_that_exist(
    runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """The auditor's lab flips one byte of a checkpoint's model file in the store, then
    exports the checkpoint: refused (exit 1) as it should be, but the line ended ``(run
    'trajledger log verify --deep')``, an option ``log verify`` does not have (exit 2).
    Expected: every command the refusal names runs (no usage error), and one names the
    damaged object."""
    home = testkit.copy_template(quickstart_template, tmp_path / "demo")
    shown = run(runner, home, "show", "cartpole-bc@2", "--json")
    expect(shown, 0)
    blob = json.loads(shown.stdout)["files"][0]["digest"].removeprefix("sha256:")
    path = home / "objects" / "sha256" / blob[:2] / blob[2:4] / blob
    path.chmod(0o600)
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    r = run(runner, home, "export", "cartpole-bc@2", "--out", tmp_path / "ck.tar.zst")
    expect(r, 1)
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("FAIL:")]
    named = [c.split()[1:] for c in re.findall(r"'(trajledger [^']+)'", line)]
    assert named, line
    codes = {}
    for command in named:
        if "BUNDLE|LEDGER" in command:
            continue  # a placeholder to fill in, not a command to run as written
        ran = run(runner, home, *command)
        codes[" ".join(command)] = ran.exit_code
        assert ran.exit_code != 2, (line, ran.output)
    assert any(blob in run(runner, home, *c.split()).stderr for c in codes), (line, codes)
