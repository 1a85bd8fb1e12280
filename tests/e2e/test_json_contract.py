"""The machine consumer's contract (out39): a script that drives every read command with
``--json`` and parses what it prints.

test_cli_surface.py walks the click tree for an example in every ``--help`` and a ``--json``
on every command that prints a result; test_bad_input_sweep.py checks that bad values leave
one JSON document or nothing. This module checks the rest of docs/cli.md's promise, read
from docs/cli.md itself:

- every command that takes ``--json`` is named in its ``--json`` paragraph, and every read
  command has a row in its table of keys (``| `COMMAND` | shape | keys |``);
- each read command, run on a quickstart ledger with ``--json`` and no terminal, prints on
  stdout exactly one JSON document (``log show``: one object a line) of the documented shape,
  whose keys are the documented ones (its ``OK:`` line and notes go to stderr);
- a reference that names nothing is exit 3 with stdout empty and one ``FAIL:`` line;
- the checks whose failure is their report (``verify``, ``lineage``, ``impact``, ``admit``,
  ``log verify``, ``fsck``, ``validate``) print that report, ``ok`` false, exit 1 (``impact``:
  0, its answer whole, the failing checks marked), on a tampered ledger.

Findings: docs/SECURITY.md, "Review of 2026-12-06, twenty-fourth round (out39)".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import testkit
from click.testing import CliRunner

from trajledger.runner.cli import main

CLI_MD = Path(__file__).parents[2] / "docs" / "cli.md"

READ: dict[str, list[str]] = {
    "admit": ["cartpole-train@2"],
    "fsck": [],
    "gc": [],
    "impact": ["cartpole-random"],
    "key export": ["vendor"],
    "key list": [],
    "lineage": ["cartpole-bc@2"],
    "log consistency": ["3", "20"],
    "log info": [],
    "log proof": ["3"],
    "log show": [],
    "log verify": [],
    "policy check": ["@policy"],
    "policy show": [],
    "query artifacts": [],
    "query episodes": [],
    "show": ["cartpole-bc@2"],
    "stats": ["cartpole-random"],
    "trust": [],
    "validate": ["@steps"],
    "verify": ["cartpole-bc@2"],
}
"""The read commands and plausible arguments on a quickstart ledger (``@policy``: its policy
file; ``@steps``: a one-step JSON lines file)."""

NOT_RUN = {
    "monitor": "polls a URL (tests/e2e/test_monitor.py runs it against a served log)",
    "release": "needs a policy with [release] (tests/e2e/test_out45_release.py runs it)",
    "release --dry-run": "as release",
}
"""Read commands this module does not run, each with why."""

NAMES_NOTHING: dict[str, list[str]] = {
    "admit": ["nope@1"], "impact": ["nope@1"], "lineage": ["nope@1"], "show": ["nope@1"],
    "stats": ["nope@1"], "verify": ["nope@1"], "key export": ["nope"],
}
"""A reference that names nothing, for the commands that take one: exit 3, stdout empty."""

REPORT_ON_FAILURE = {"verify": ["cartpole-bc@2"], "lineage": ["cartpole-bc@2"],
                     "impact": ["cartpole-random"], "admit": ["cartpole-train@2"],
                     "log verify": [], "fsck": []}
"""The checks whose failure is their report (docs/cli.md), on a ledger with one flipped blob;
``validate`` is run on a bad file apart."""


def leaves(cmd: click.Command = main, path: tuple[str, ...] = ()) -> Iterator[
        tuple[str, click.Command]]:
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from leaves(sub, (*path, name))
    else:
        yield " ".join(path), cmd


def takes_json(cmd: click.Command) -> bool:
    return any("--json" in p.opts for p in cmd.params if isinstance(p, click.Option))


def json_paragraph() -> str:
    """docs/cli.md from its ``**`--json`.**`` paragraph to the one on failures."""
    text = CLI_MD.read_text()
    start = text.index("**`--json`.**")
    return text[start:text.index("**`--json` when a command fails**", start)]


Keys = tuple[set[str], set[str]] | None
"""The keys always there and those there only sometimes (``?`` in the table); None: the
row lists none (a table's columns)."""


def documented_keys() -> dict[str, tuple[str, Keys]]:
    """docs/cli.md's table of read commands: command -> (shape, keys)."""
    text = CLI_MD.read_text()
    start = text.index("| read command | `--json` prints | its keys |")
    rows: dict[str, tuple[str, Keys]] = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        command, shape, keys = (c.strip() for c in line.strip("|").split("|"))
        name = command.split("`")[1]
        listed = re.findall(r"`([A-Za-z_]+)`(\??)", re.sub(r"\([^)]*\)", "", keys))
        always = {k for k, q in listed if not q}
        rows[name] = (shape, (always, {k for k, q in listed if q}) if listed else None)
    return rows


@pytest.fixture(scope="module")
def demo(quickstart_template: testkit.Template[str],
         tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = testkit.copy_template(quickstart_template, tmp_path_factory.mktemp("json") / "demo")
    (home.parent / "steps.jsonl").write_text(
        '{"episode_id":"e1","step":0,"reward":1.0,"obs":[0.1],"action":0,"is_first":true,'
        '"is_last":true,"terminated":true,"truncated":false}\n')
    return home


def invoke(runner: CliRunner, home: Path, command: str, args: list[str]) -> tuple[int, str, str]:
    subs = {"@policy": str(home / "policy.toml"), "@steps": str(home.parent / "steps.jsonl")}
    argv = ["--ledger", str(home), *command.split(), *(subs.get(a, a) for a in args), "--json"]
    r = runner.invoke(main, argv, prog_name="trajledger")
    return r.exit_code, r.stdout, r.stderr


def test_every_command_with_json_is_documented_and_every_read_command_is_run() -> None:
    paragraph = json_paragraph()
    with_json = [name for name, cmd in leaves() if takes_json(cmd)]
    unnamed = [n for n in with_json if f"`{n}`" not in paragraph
               and not (n.startswith("query ") and "`query`" in paragraph)]
    assert not unnamed, f"docs/cli.md's --json paragraph names no {unnamed}"
    table = documented_keys()
    assert set(table) == set(READ) | set(NOT_RUN), set(table) ^ (set(READ) | set(NOT_RUN))
    assert set(READ) <= set(with_json)


@pytest.mark.parametrize("command", sorted(READ))
def test_a_read_commands_json_is_one_document_with_the_documented_keys(
        runner: CliRunner, demo: Path, command: str) -> None:
    code, out, err = invoke(runner, demo, command, READ[command])
    assert code == 0, (command, err)
    assert "Traceback" not in out + err
    shape, keys = documented_keys()[command]
    if shape == "one object a line":
        docs = [json.loads(line) for line in out.splitlines()]
        assert docs and all(isinstance(d, dict) for d in docs)
    else:
        doc = json.loads(out)  # one document: json.loads refuses trailing text
        assert shape in ("object", "list of objects"), shape
        docs = [doc] if shape == "object" else doc
        assert isinstance(doc, dict if shape == "object" else list), (command, type(doc))
        assert docs, command
    for d in docs:
        assert isinstance(d, dict)
        if keys is not None:
            always, sometimes = keys
            assert always <= set(d) <= always | sometimes, (
                f"{command}: keys {sorted(d)}, docs/cli.md lists {sorted(always)} and "
                f"sometimes {sorted(sometimes)}")


@pytest.mark.parametrize("command", sorted(NAMES_NOTHING))
def test_a_reference_that_names_nothing_leaves_stdout_empty(
        runner: CliRunner, demo: Path, command: str) -> None:
    code, out, err = invoke(runner, demo, command, NAMES_NOTHING[command])
    assert (code, out) == (3, ""), (command, code, out)
    fails = [line for line in err.splitlines() if not line.startswith("NOTE: first use")]
    assert len(fails) == 1 and fails[0].startswith("FAIL: ") and "nope" in fails[0], err


def test_a_check_whose_failure_is_its_report_prints_it_with_ok_false(
        runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path) -> None:
    home = testkit.copy_template(quickstart_template, tmp_path / "tampered")
    code, out, _ = invoke(runner, home, "show", ["cartpole-random"])
    digest = next(f["digest"] for f in json.loads(out)["files"] if f["path"] == "steps.parquet")
    hexd = digest.removeprefix("sha256:")  # the first batch's steps: every check reaches it
    steps = home / "objects" / "sha256" / hexd[:2] / hexd[2:4] / hexd
    steps.chmod(0o644)
    data = bytearray(steps.read_bytes())
    data[len(data) // 2] ^= 1
    steps.write_bytes(bytes(data))
    for command, args in REPORT_ON_FAILURE.items():
        code, out, err = invoke(runner, home, command, args)
        # impact answers which checkpoints used the data, failing checks marked: exit 0
        assert code == (0 if command == "impact" else 1), (command, code, err)
        doc = json.loads(out)
        assert isinstance(doc, dict), command
        verdict = doc["admitted"] if command == "admit" else doc["ok"]
        assert verdict is False, (command, doc)
    (tmp_path / "bad.jsonl").write_text('{"episode_id": "e1", "step": "x"}\n')
    code, out, _ = invoke(runner, home, "validate", [str(tmp_path / "bad.jsonl")])
    assert code == 1 and json.loads(out)["ok"] is False
