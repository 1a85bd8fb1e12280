"""The command line a person expects (issue 23 item 3), walked over every command.

- every command and subcommand shows an example in ``--help``, and each example names a real
  command with options it has;
- every command that prints a result takes ``--json`` (the exceptions are listed, each with
  why), and ``--json`` prints one JSON document;
- ``-V``; click's "did you mean" for commands and options (``train --json`` no longer
  suggests ``--version``); shell completion scripts for bash, zsh and fish generate, and
  complete command names;
- ``NO_COLOR`` drops styling (bold too), and nothing styles text but ``clikit.style``.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from trajledger.ledger.clikit import GLOBAL_OPTIONS, style
from trajledger.runner.cli import main

NO_RESULT = {
    "key encrypt": "encrypts a key file in place; prints only an OK line",
    "log add-cosignature": "adds lines to the log's checkpoint; prints only an OK line",
    "policy init": "writes the policy file; its roles go to stderr beside the OK line",
    "policy inline": "rewrites the policy file; its keys go to stderr beside the OK line",
    "reindex": "rebuilds derived indexes; prints only OK lines",
    "upgrade": "upgrades the ledger; prints one OK line per step",
    "card": "prints the card itself, in the --format asked for (croissant is JSON-LD)",
}
"""Leaf commands without --json: each prints no result of its own on stdout."""


def commands(cmd: click.Command = main, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], click.Command]]:
    """Every command and subcommand (the root first), with its path below ``trajledger``."""
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from commands(sub, (*path, name))


def examples(cmd: click.Command) -> list[str]:
    """The example command lines of a command's help (backslash continuations joined)."""
    lines = (cmd.help or "").splitlines()
    out: list[str] = []
    inside = False
    for line in lines:
        text = line.strip()
        if text in ("Example:", "Examples:"):
            inside = True
            continue
        if inside and not text:
            inside = False
        if inside:
            if out and out[-1].endswith("\\"):
                out[-1] = out[-1][:-1] + " " + text
            else:
                out.append(text)
    return out


def check_example(line: str) -> tuple[str, ...]:
    """Parse one example as the shell would and walk it through the command tree; returns
    the command path it runs. Fails on an unknown command or an option the command lacks."""
    words = shlex.split(line)
    segments: list[list[str]] = [[]]
    for w in words:
        if w in ("&&", "|", ">"):
            segments.append([w])
        else:
            segments[-1].append(w)
    runs = []
    for seg in segments:
        if seg and seg[0] == ">":
            continue  # a redirection target
        seg = [w for w in seg if w not in ("&&", "|")]
        while seg and "=" in seg[0] and seg[0].split("=")[0].isupper():
            seg = seg[1:]  # VAR=value before the command
        if seg and seg[0] == "trajledger":
            runs.append(seg[1:])
    assert runs, f"{line!r}: runs no trajledger command"
    paths = [_walk(args, line) for args in runs]
    return paths[0]


def _walk(args: list[str], line: str) -> tuple[str, ...]:
    cmd: click.Command = main
    path: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        name = a.split("=", 1)[0]
        if name in GLOBAL_OPTIONS:
            i += 1 + (0 if "=" in a else GLOBAL_OPTIONS[name])
            continue
        if isinstance(cmd, click.Group) and not a.startswith("-"):
            sub = cmd.commands.get(a)
            assert sub is not None, f"{line!r}: no command {a!r} under {' '.join(path)!r}"
            cmd, path = sub, [*path, a]
            i += 1
            continue
        break
    options = {o: p for p in cmd.params if isinstance(p, click.Option) for o in p.opts}
    while i < len(args):
        a = args[i]
        if a == "--":
            break  # a COMMAND to run
        name = a.split("=", 1)[0]
        if a.startswith("-") and len(a) > 1 and not a[1].isdigit():
            if name in GLOBAL_OPTIONS:
                i += 1 + (0 if "=" in a else GLOBAL_OPTIONS[name])
                continue
            assert name in options, f"{line!r}: trajledger {' '.join(path)} has no {name}"
            opt = options[name]
            takes = 0 if (opt.is_flag or opt.count or "=" in a) else opt.nargs
            i += 1 + takes
            continue
        i += 1
    return tuple(path)


@pytest.mark.parametrize(("path", "cmd"), list(commands()),
                         ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_every_help_has_an_example_that_parses(path: tuple[str, ...], cmd: click.Command) -> None:
    found = examples(cmd)
    assert found, f"trajledger {' '.join(path)} --help shows no example"
    for line in found:
        ran = check_example(line)
        assert ran[: len(path)] == path, (
            f"{line!r} in the help of {' '.join(path)!r} runs {' '.join(ran)!r}")
        if not isinstance(cmd, click.Group):
            assert ran == path, line


def test_the_example_checker_catches_mistakes() -> None:
    with pytest.raises(AssertionError, match="has no --jsn"):
        check_example("trajledger lineage X --jsn")
    with pytest.raises(AssertionError, match="no command 'lineag'"):
        check_example("trajledger lineag X")
    assert check_example("A=1 trajledger --ledger d key new x && cd d > f") == ("key", "new")


def test_help_examples_are_shown(runner: CliRunner) -> None:
    r = runner.invoke(main, ["record", "--help"], prog_name="trajledger")
    assert r.exit_code == 0
    shown = "Examples:\n    trajledger record steps.jsonl --env cartpole@1 --policy random"
    assert shown in r.stdout


def test_every_command_that_prints_a_result_takes_json() -> None:
    leaves = {" ".join(p): c for p, c in commands() if not isinstance(c, click.Group)}
    assert set(NO_RESULT) <= set(leaves), set(NO_RESULT) - set(leaves)
    missing = [name for name, c in leaves.items() if name not in NO_RESULT
               and not any("--json" in p.opts for p in c.params if isinstance(p, click.Option))]
    assert not missing, f"no --json: {missing}"


def run(runner: CliRunner, home: Path, *args: str) -> Result:
    return runner.invoke(main, ["--ledger", str(home), *args], prog_name="trajledger")


def test_json_of_commands_that_record(runner: CliRunner, tmp_path: Path) -> None:
    home = tmp_path / "ledger"
    r = run(runner, home, "init", "--origin", "test/json", "--json")
    assert r.exit_code == 0, r.output
    made = json.loads(r.stdout)
    assert made["origin"] == "test/json" and made["ledger"] == str(home.resolve())
    assert made["vkey"].startswith("test/json+") and made["keys"] == "plain"
    r = run(runner, home, "key", "new", "vendor", "--no-encrypt", "--json")
    key = json.loads(r.stdout)
    assert (key["name"], key["algorithm"], key["encrypted"]) == ("vendor", "ed25519", False)
    exported = json.loads(run(runner, home, "key", "export", "vendor", "--json").stdout)
    assert exported["keyid"] == key["keyid"] and exported["pem"].startswith("-----BEGIN PUBLIC")
    r = run(runner, home, "env", "register", "grid", "--version", "1", "--key", "vendor",
            "--json")
    assert r.exit_code == 0, r.output
    env = json.loads(r.stdout)
    assert {k: env[k] for k in ("kind", "name", "version", "logIndex", "new")} == {
        "kind": "environment", "name": "grid", "version": "1", "logIndex": 0, "new": True}
    shown = json.loads(run(runner, home, "show", "grid@1", "--json").stdout)
    assert (env["digest"], env["envelope"]) == (shown["digest"], shown["envelope"])
    # Without --json the digest alone, as before: X=$(trajledger ...) keeps working.
    r = run(runner, home, "evaluator", "register", "judge", "--version", "1", "--kind", "human",
            "--key", "vendor")
    assert r.stdout.strip().startswith("sha256:") and len(r.stdout.splitlines()) == 1
    # A mistyped key name, wherever one is taken, gets the key that exists.
    r = run(runner, home, "env", "register", "grid", "--version", "2", "--key", "vendr")
    assert r.exit_code == 3 and r.stderr == (
        f"FAIL: key vendr: no private key in {home / 'keys'}; did you mean 'vendor'? "
        "(keys: vendor)\n")
    r = run(runner, home, "policy", "init", "--producer", "vendr", "--out",
            str(tmp_path / "p.toml"))
    assert r.exit_code == 2 and "no key 'vendr' in" in r.stderr
    assert "did you mean 'vendor'?" in r.stderr


def test_version(runner: CliRunner) -> None:
    for flag in ("-V", "--version"):
        r = runner.invoke(main, [flag], prog_name="trajledger")
        assert r.exit_code == 0 and r.stdout.startswith("trajledger, version "), r.output


def test_click_suggests_commands_and_options(runner: CliRunner) -> None:
    r = runner.invoke(main, ["lineag", "x"], prog_name="trajledger")
    assert r.exit_code == 2 and "No such command 'lineag'. Did you mean 'lineage'?" in r.stderr
    r = runner.invoke(main, ["key", "nwe"], prog_name="trajledger")
    assert r.exit_code == 2 and "Did you mean 'new'?" in r.stderr
    r = runner.invoke(main, ["lineage", "x", "--fromat", "dot"], prog_name="trajledger")
    assert r.exit_code == 2 and "No such option '--fromat'. Did you mean '--format'?" in r.stderr
    r = runner.invoke(main, ["train", "--jsn"], prog_name="trajledger")
    assert r.exit_code == 2 and "Did you mean '--json'?" in r.stderr, r.stderr


def test_a_usage_error_is_one_line_naming_the_help_to_read(runner: CliRunner,
                                                          tmp_path: Path) -> None:
    """left35 finding 5 (an old Left): click printed a usage error in three lines and more
    (``Usage: …``, ``Try '… --help' for help.``, a blank line, ``Error: …``); for every command,
    an unknown option (and a subcommand missing its argument, a group given a command it lacks)
    is now one line saying what was wrong and the help to read, exit 2. ``--help`` is as it
    was."""
    for path, cmd in commands():
        r = runner.invoke(main, ["--ledger", str(tmp_path), *path, "--no-such-option"],
                          prog_name="trajledger")
        assert r.exit_code == 2, (path, r.output)
        assert r.stderr.splitlines() == [
            f"Error: No such option '--no-such-option'; see '{' '.join(['trajledger', *path])} "
            "--help'"], (path, r.stderr)
        assert r.stdout == "", (path, r.output)
        if isinstance(cmd, click.Group) and path:
            r = runner.invoke(main, [*path, "frobnicate"], prog_name="trajledger")
            assert r.exit_code == 2 and r.stderr.splitlines() == [
                f"Error: No such command 'frobnicate'; see 'trajledger {' '.join(path)} "
                "--help'"], (path, r.stderr)
        r = runner.invoke(main, [*path, "--help"], prog_name="trajledger")
        assert r.exit_code == 0 and r.stdout.startswith(
            f"Usage: {' '.join(['trajledger', *path])} [OPTIONS]"), (path, r.output)
    r = runner.invoke(main, ["verify", "x", "--policy"], prog_name="trajledger")
    assert r.exit_code == 2 and r.stderr == ("Error: Option '--policy' requires an argument; see "
                                             "'trajledger verify --help'\n"), r.stderr
    r = runner.invoke(main, ["lineage", "x", "--fromat", "dot"], prog_name="trajledger")
    assert r.exit_code == 2 and r.stderr == ("Error: No such option '--fromat'. Did you mean "
                                             "'--format'? See 'trajledger lineage --help'\n")


def test_json_and_another_format_is_a_usage_error(runner: CliRunner, home: Path) -> None:
    r = run(runner, home, "lineage", "x", "--json", "--format", "dot")
    assert r.exit_code == 2 and "Error: --json and --format dot: choose one" in r.stderr
    # text given on the line is a choice too, not the default (it printed JSON silently)
    r = run(runner, home, "impact", "x", "--format", "text", "--json")
    assert r.exit_code == 2 and "Error: --json and --format text: choose one" in r.stderr
    r = run(runner, home, "lineage", "x", "--format", "json", "--json")
    assert "choose one" not in r.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_generate_and_complete(shell: str, tmp_path: Path) -> None:
    """docs/cli.md's completion set-up: the script click generates for each shell, and the
    completions it then asks for."""
    env = {**os.environ, "_TRAJLEDGER_COMPLETE": f"{shell}_source"}
    script = Path(sys.executable).with_name("trajledger")
    # The installed command; else the same entry point under the same name (click names the
    # completion variable after the program).
    cmd = [str(script)] if script.is_file() else [
        sys.executable, "-c", "import sys; from trajledger.__main__ import main; "
        "sys.argv[0] = 'trajledger'; main()"]
    src = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert src.returncode == 0, src.stderr
    assert {"bash": "complete -o nosort -F _trajledger_completion trajledger",
            "zsh": "#compdef trajledger",
            "fish": "complete --no-files --command trajledger"}[shell] in src.stdout
    # bash and zsh pass the index of the word completed, fish the word itself.
    env = {**os.environ, "_TRAJLEDGER_COMPLETE": f"{shell}_complete",
           "COMP_WORDS": "trajledger lin", "COMP_CWORD": "lin" if shell == "fish" else "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "lineage" in done.stdout and "impact" not in done.stdout


def test_no_color_drops_bold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert style("x", bold=True) == "\x1b[1mx\x1b[0m"
    monkeypatch.setenv("NO_COLOR", "1")
    assert style("x", bold=True) == "x"
    monkeypatch.setenv("NO_COLOR", "")  # no-color.org: set and not empty
    assert style("x", bold=True) != "x"


def test_nothing_styles_text_but_clikit_style() -> None:
    """So NO_COLOR reaches every styled line: no module calls click.style or click.secho."""
    root = Path(__file__).parents[2] / "trajledger"
    calls = []
    for py in root.rglob("*.py"):
        for node in ast.walk(ast.parse(py.read_text(), str(py))):
            if (isinstance(node, ast.Attribute) and node.attr in ("style", "secho")
                    and isinstance(node.value, ast.Name) and node.value.id == "click"
                    and py.name != "clikit.py"):
                calls.append(f"{py.relative_to(root)}:{node.lineno}")
    assert not calls, calls


@pytest.mark.parametrize("args", [
    ["trust", "acme+1a2b3c4d+AbC"],
    ["monitor", "http://127.0.0.1:9/", "--vkey", "acme+zz+AbC="],
    ["log", "add-cosignature", "README.md", "--witness", "not a vkey"],
], ids=["trust", "monitor", "add-cosignature"])
def test_a_malformed_vkey_is_a_usage_error(runner: CliRunner, home: Path, args: list[str]) -> None:
    """A verifier key given on the line is parsed before anything opens: a malformed one is
    exit 2 (it was exit 1, "refused", as if evidence had failed), naming what is wrong."""
    if args[1] == "add-cosignature":
        args = [*args[:2], str(Path(__file__)), *args[3:]]
    r = run(runner, home, *args)
    assert r.exit_code == 2, r.output
    assert "verifier key" in r.stderr and "Traceback" not in r.output, r.stderr
