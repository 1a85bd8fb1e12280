"""Every command with bad input (the outside check of 2026-12-03, eighth round: rev15).

The standard: every command validates its input, exits with the design's codes (1 refused, 2
usage, 3 operational; 4 only for a bug), prints no traceback, prints one JSON document (or
nothing) on stdout under ``--json``, and leaves the ledger as it was. The parser tests
(test_hostile_inputs.py), the exit-code rules (test_exit_codes.py) and the surface walk
(test_cli_surface.py) each cover a part; this module sweeps every leaf command of the CLI with
bad values for each of its parameters, chosen by the parameter's click type and name:

- paths: missing, a directory where a file is wanted and the reverse, empty, random bytes,
  unreadable (skipped as root), a file where a parent directory is wanted (outputs);
- references: not recorded, ``sha256:zz``, 63 hex digits, ``/`` and ``..``, a control
  character, empty; key and object names likewise;
- numbers: negative, zero where not allowed, huge, ``nan``; durations and dates that do not
  parse.

Each case runs on a copy of a quickstart ledger (one copy per command; each case compares the
ledger with the copy as it was), in process, with ``--json`` where the command takes it; a few
run through a real process. A value that cannot mean anything must not succeed (exit 0): the
exceptions are listed in `ACCEPTED`, each with why.

Its findings, and what it probed and found sound: docs/SECURITY.md, "Review of 2026-12-03,
eighth round (rev15)". A finding not yet fixed is listed in `KNOWN`.

Parameters are swept one at a time (the others keep the plausible values of `BASE`), with
every bad value of the parameter's kind: 826 cases over the 51 commands, about 14 CPU-s;
and an empty path (``--policy ''``) for each path, a usage error (exit 2: left37), as are the
values `OPTION_VALUES` lists (an empty ``--reason``: left38).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import testkit

from trajledger.ledger.clikit import KeyName, OutPath, RecordName, VKey
from trajledger.runner.cli import main

SKIP = {
    ("log", "serve"): "serves until stopped: only its port is swept (out of range)",
}

BASE: dict[str, dict[str, object]] = {
    "admit": {"dataset": "cartpole-train@1"},
    "approve": {"ref": "cartpole-train@1", "key": "approver-a"},
    "attest": {"paths": ["@file"], "key_names": "vendor"},
    "card": {"dataset": "cartpole-train@1"},
    "dataset create": {"name": "d", "version": "1", "batches": "@batch", "key": "vendor"},
    "env register": {"name": "e", "version": "1", "key": "vendor"},
    "erase": {"ref": "cartpole-train@1", "key": "vendor"},
    "eval": {"checkpoint": "cartpole-bc@1", "suite": "cartpole-train@1", "key": "vendor"},
    "evaluator register": {"name": "j", "version": "1", "key": "vendor"},
    "export": {"ref": "cartpole-train@1", "out": "@out"},
    "import": {"file": "@file", "keys": "vendor"},
    "key encrypt": {"name": "vendor"},
    "key export": {"name": "vendor"},
    "key new": {"name": "fresh"},
    "lineage": {"ref": "cartpole-bc@1"},
    "impact": {"ref": "cartpole-bc@1"},
    "log add-cosignature": {"file": "@file", "witnesses": "@vkey"},
    "log consistency": {"old": "1"},
    "log cosign": {"key_name": "vendor"},
    "log proof": {"index": "0"},
    "log serve": {"port": "8080"},
    "monitor": {"url": "http://127.0.0.1:9/", "vkey": "@vkey", "timeout": "0.2"},
    "policy check": {"file": "@policy"},
    "policy inline": {"file": "@policy"},
    "policy set": {"file": "@policy", "keys": "approver-a,approver-b"},
    "quickstart": {"directory": "@new"},
    "record": {"paths": ["@file"], "env_ref": "cartpole@1", "policy": "random", "key": "vendor"},
    "release": {"checkpoint": "cartpole-bc@1", "keys": "approver-a,approver-b"},
    "revoke": {"ref": "cartpole-train@1", "key": "vendor", "reason": "test"},
    "rollout": {"checkpoint": "cartpole-bc@1", "env": "cartpole@1", "key": "vendor"},
    "show": {"ref": "cartpole-bc@1"},
    "sign": {"paths": ["@file"], "key_name": "vendor", "out": "@out"},
    "stats": {"ref": "cartpole-train@1"},
    "train": {"dataset": "cartpole-train@1", "key": "trainer"},
    "validate": {"paths": ["@file"]},
    "verify": {"targets": ["cartpole-bc@1"]},
}
"""Plausible values of each command's required parameters (``@...``: made per ledger), so that
the value swept is, as far as can be, the only thing wrong with the command line."""

JSON_LINES = {("log", "show")}
"""Commands whose ``--json`` is one JSON object per line (their help says so)."""

REFS = {"ref", "dataset", "checkpoint", "suite", "env_ref", "env", "evaluator_ref", "parent",
        "targets", "policy", "file"}
KEYS = {"key", "key_name", "keys", "cosign_key", "evaluator_key", "judge_key", "unseal_key",
        "key_names", "producers", "approvers", "trainers", "roles", "witnesses"}
NAMES = {"name", "version", "trainer_name", "dataset_id", "origin", "predicate_type"}
DURATIONS = {"expires", "min_age", "retention"}
DATES = {"within"}

REF_VALUES = ["nosuch@1", "sha256:zz", "sha256:" + "a" * 63, "a/../b@1", "x\x1by@1", ""]
KEY_VALUES = ["nosuch", "../vendor", "a/b", "x\x1by", ""]
NAME_VALUES = ["a/b", "..", "x\x1by", ""]
NEW_NAME_VALUES = [*NAME_VALUES, "cartpole\u2010train", "a+b", "a@b", "x" * 5000]
"""A new record's name or version (`RecordName`, rev22): each is a usage error (exit 2)."""
DURATION_VALUES = ["-1d", "soon", "", "99999999999999999999d"]
DATE_VALUES = ["yesterday", "2026-13-45", ""]
INT_VALUES = ["-1", "0", str(10**30), "x"]
FLOAT_VALUES = ["-1", "nan", "inf", "x"]
TEXT_VALUES = ["", "x\x1by"]

ZERO_MEANS = "zero is a value of its own here (the first entry or seed, none since, all rows)"
EMPTY_TEXT = "free text or a filter left empty: the same as not giving the option"
FREE_TEXT = ("free text, signed as given: it holds no name or path, and every report and OK line "
             "escapes its control characters (docs/SECURITY.md, rev15: left)")
NAMESPACE = ("a name with '/' is a namespace ('org/env', Minari's 'ns/name-v0') and '..' is "
             "only text: no artifact name becomes a path")
ANY_BYTES = "any bytes can be signed, empty or not"
SAME_CHECKPOINT = ("the built-in trainer is deterministic: training on the same data finds the "
                   "checkpoint already recorded and names it; the names asked for are not read")
NO_LEDGER = "takes no ledger: runs, or creates one (init), where --ledger points"
EMPTY_POLICY = ("an empty policy file is a valid policy that trusts nothing (every lineage fails "
                "under it: tests/e2e/test_bad_input_sweep.py::test_an_empty_policy_trusts_nothing)")

ACCEPTED: dict[tuple[str, str, str], str] = {
    **{(c, p, "0"): ZERO_MEANS for c, p in [
        ("export", "updates_since"), ("log proof", "index"), ("log show", "start"),
        ("log show", "end"), ("query artifacts", "limit"), ("query episodes", "limit"),
        ("rollout", "seed"), ("train", "seed")]},
    **{(c, p, ""): EMPTY_TEXT for c, p in [
        ("admit", "purpose"), ("approve", "note"), ("query artifacts", "where"),
        ("query artifacts", "columns"), ("query episodes", "where"),
        ("query episodes", "columns"), ("stats", "by"), ("export", "dataset_id"),
        ("train", "parent"), ("rollout", "allow_env_module"), ("sign", "name")]},
    **{(c, p, "x\x1by"): FREE_TEXT for c, p in [
        ("approve", "note"), ("approve", "purpose"), ("revoke", "reason"),
        ("rollout", "allow_env_module"), ("export", "dataset_id")]},
    **{(c, p, v): NAMESPACE for c, p in [
        ("attest", "name"), ("sign", "name"), ("export", "dataset_id")] for v in ("a/b", "..")},
    **{(c, "paths", v): ANY_BYTES for c in ("attest", "sign") for v in ("@empty", "@random")},
    ("env register", "files", "@empty"): ANY_BYTES,
    **{("train", "trainer_name", v): SAME_CHECKPOINT for v in ("", "a/b", "..", "x\x1by")},
    **{(c, "--ledger", v): NO_LEDGER for c in (
        "init", "key list", "policy check", "policy inline") for v in ("@missing", "@dir")},
    **{(c, p, "@empty"): EMPTY_POLICY for c, p in [
        ("policy check", "file"), ("policy inline", "file"), ("export", "policy_file")]},
    ("gc", "min_age", "99999999999999999999d"): "nothing is that old: gc finds nothing to do",
    ("rollout", "max_steps", str(10**30)): "a cap no episode reaches: episodes end on their own",
}
"""(command, parameter, value) that may succeed, each with why it means something."""

OPTION_VALUES = {("approve", "purpose", ""), ("approve", "expires", "99999999999999999999d"),
                 ("revoke", "reason", ""), ("revoke", "by", ""), ("revoke", "by_identity", "")}
"""Values `ledger.errors.OptionValueError` refuses (left37 finding 1: they exited 1, "verification
failed", after work): a usage error, exit 2, in the one line of any usage error (left38)."""

KNOWN: dict[tuple[str, str, str], str] = {}
"""Cases that still fail the standard (a finding not yet fixed), each with its finding: they
must fail, so that the fix is seen, and its entry then removed."""


@dataclass(frozen=True)
class Case:
    command: tuple[str, ...]
    param: str
    value: str

    @property
    def id(self) -> str:
        return f"{' '.join(self.command)}:{self.param}={self.value!r}"


def leaves(cmd: click.Command = main, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], click.Command]]:
    """Every leaf command with its path (as test_cli_surface.py's ``commands``)."""
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from leaves(sub, (*path, name))
    else:
        yield path, cmd


def bad_values(param: click.Parameter) -> list[str]:
    """The bad values of one parameter, by its type and name (``@...``: made per ledger)."""
    t, name = param.type, param.name or ""
    if isinstance(t, click.Choice) or getattr(param, "is_flag", False) or name in (
            "help", "command"):
        return []  # click's own check; flags take no value
    if isinstance(t, click.Path):
        out = ["@missing", "@empty", "@random", "@unreadable", "@blank"]
        if not t.dir_okay:
            out.append("@dir")
        if not t.file_okay:
            out = ["@file", "@unreadable-dir", "@blank"] + (["@missing"] if t.exists else [])
        return out
    if isinstance(t, OutPath):
        return ["@under-file", "@under-missing", "@blank"]
    if isinstance(t, RecordName):
        return NEW_NAME_VALUES
    if isinstance(t, VKey):
        return ["nosuch+00000000+AAAA", "x\x1by", ""]
    if isinstance(t, (click.IntRange, click.types.IntParamType)):
        return INT_VALUES
    if isinstance(t, (click.FloatRange, click.types.FloatParamType)):
        return FLOAT_VALUES
    if name in REFS:
        return REF_VALUES
    if name in KEYS:
        return KEY_VALUES
    if name in NAMES:
        return NAME_VALUES
    if name in DURATIONS:
        return DURATION_VALUES
    if name in DATES:
        return DATE_VALUES
    return TEXT_VALUES


def cases() -> Iterator[Case]:
    for path, cmd in leaves():
        for p in cmd.params:
            if path in SKIP and not (path == ("log", "serve") and p.name == "port"):
                continue
            values = bad_values(p)
            if path == ("log", "serve"):
                values = ["-1", str(10**30), "x"]  # out of range: it never starts serving
            if path in (("quickstart",), ("rollout",)) and p.name == "episodes":
                values = ["-1", "0", "x"]  # huge is a (long) run, not a bad value
            for v in values:
                yield Case(path, p.name or "", v)


LEDGER_VALUES = ["@missing", "@file", "@dir"]
"""``--ledger`` (every command's): no ledger there, a file, an empty directory."""


def per_command() -> dict[tuple[str, ...], list[Case]]:
    out: dict[tuple[str, ...], list[Case]] = {}
    for path, _ in leaves():
        if path not in SKIP and path != ("quickstart",):
            for v in LEDGER_VALUES:
                out.setdefault(path, []).append(Case(path, "--ledger", v))
    for c in cases():
        out.setdefault(c.command, []).append(c)
    return out


CASES = per_command()
NEW_NAMES = {(path, p.name): p.type for path, cmd in leaves() for p in cmd.params
             if isinstance(p.type, RecordName)}


def refused_by_type(t: click.ParamType | None, value: str) -> bool:
    """Whether the parameter type ``t`` refuses ``value`` (a usage error, exit 2)."""
    try:
        return t is not None and t.convert(value, None, None) is None
    except click.BadParameter:
        return True
KEY_NAMES = {(path, p.name) for path, cmd in leaves() for p in cmd.params
             if isinstance(p.type, KeyName)}


class Ledger:
    """A copy of the quickstart ledger, the files the cases name, and what to compare."""

    def __init__(self, template: testkit.Template[str], root: Path) -> None:
        self.root = root
        self.home = testkit.copy_template(template, root / "home")
        self.work = root / "work"
        self.work.mkdir()
        (self.work / "file.txt").write_text("some content\n")
        (self.work / "empty").write_bytes(b"")
        (self.work / "random").write_bytes(hashlib.sha256(b"rev15").digest() * 64 + b"\xff\x00")
        (self.work / "dir").mkdir()
        (self.work / "unreadable").write_text("secret\n")
        (self.work / "unreadable").chmod(0)
        (self.work / "unreadable-dir").mkdir()
        (self.work / "unreadable-dir").chmod(0)
        self.runner = testkit.new_runner()
        info = self.run_ok("log", "info", "--json")
        self.vkey = info["vkey"]
        self.batch = next(e for e in self.run_ok("log", "show", "--json", lines=True)
                          if e["kind"] == "rollout-batch")["subject"]
        self.before = self.state()

    def run_ok(self, *args: str, lines: bool = False) -> dict:
        r = self.runner.invoke(main, ["--ledger", str(self.home), *args])
        assert r.exit_code == 0, r.output
        if lines:
            return [json.loads(x) for x in r.stdout.splitlines()]  # type: ignore[return-value]
        return json.loads(r.stdout)

    def value(self, v: str) -> str:
        """A value with its ``@...`` placeholder made real."""
        fixed = {"@file": self.work / "file.txt", "@empty": self.work / "empty",
                 "@random": self.work / "random", "@dir": self.work / "dir",
                 "@missing": self.work / "missing", "@unreadable": self.work / "unreadable",
                 "@unreadable-dir": self.work / "unreadable-dir",
                 "@under-file": self.work / "file.txt" / "out",
                 "@under-missing": self.work / "missing" / "out",
                 "@out": self.work / "out", "@new": self.work / "new",
                 "@policy": self.home / "policy.toml", "@blank": ""}
        if v in fixed:
            return str(fixed[v])
        return {"@vkey": self.vkey, "@batch": self.batch}.get(v, v)

    def state(self) -> dict[str, bytes]:
        """Every file of the ledger (not its scratch ``tmp``) by relative path, with its
        contents: the log, the store, the keys, the policy, the settings."""
        return {str(p.relative_to(self.home)): p.read_bytes()
                for p in sorted(self.home.rglob("*"))
                if p.is_file() and p.relative_to(self.home).parts[0] != "tmp"}

    def argv(self, case: Case, cmd: click.Command) -> list[str]:
        base = dict(BASE.get(" ".join(case.command), {}))
        base[case.param] = case.value
        args: list[str] = []
        for p in cmd.params:
            if p.name not in base:
                continue
            given = base[p.name]
            values = [self.value(v) for v in (given if isinstance(given, list) else [given])]
            if isinstance(p, click.Argument):
                args += values
            else:
                opt = max(p.opts, key=len)
                for v in values:
                    args += [opt, v]
        if any("--json" in p.opts for p in cmd.params if isinstance(p, click.Option)):
            args.append("--json")
        home = self.value(case.value) if case.param == "--ledger" else str(self.home)
        return ["--ledger", home, *case.command, *args]


def check(case: Case, argv: list[str], code: int, stdout: str, stderr: str,
          led: Ledger, exception: BaseException | None = None) -> None:
    """The standard, for one case."""
    where = f"{case.id}\n$ trajledger {' '.join(argv)}\nexit {code}\n{stdout}{stderr}"
    assert exception is None or isinstance(exception, SystemExit), where
    assert "Traceback" not in stdout + stderr and "BUG:" not in stdout + stderr, where
    accepted = (" ".join(case.command), case.param, case.value) in ACCEPTED
    if refused_by_type(NEW_NAMES.get((case.command, case.param)), case.value):
        assert code == 2 and "starting with a letter or digit" in stderr, where
    if case.value == "@blank":  # an empty path: read or written as "." before (left37)
        assert code == 2 and "is empty: give the path of a file or directory" in stderr, where
    if (" ".join(case.command), case.param, case.value) in OPTION_VALUES:
        assert code == 2 and "; see 'trajledger " in stderr, where
    if (case.command, case.param) in KEY_NAMES and case.value != "nosuch":  # (rev22)
        assert code == 2 and "use 1-64 letters, digits" in stderr, where
    assert code in ((0, 1, 2, 3) if accepted else (1, 2, 3)), where
    if "--json" in argv and stdout.strip():
        documents = stdout.splitlines() if case.command in JSON_LINES else [stdout]
        try:
            for d in documents:
                json.loads(d)
        except ValueError:
            raise AssertionError(f"--json: stdout is not one JSON document\n{where}") from None
    if code != 0:
        after = led.state()
        changed = sorted(k for k in set(after) | set(led.before)
                         if after.get(k) != led.before.get(k))
        assert not changed, f"refused, yet the ledger changed: {changed}\n{where}"
        assert len(stderr.strip().splitlines()) >= 1, f"refused without a word\n{where}"


@pytest.mark.parametrize("command", sorted(CASES), ids=" ".join)
def test_every_command_refuses_bad_values(
        command: tuple[str, ...], quickstart_template: testkit.Template[str],
        tmp_path: Path) -> None:
    led = Ledger(quickstart_template, tmp_path)
    cmd = dict(leaves())[command]
    failed = []
    for case in CASES[command]:
        if "unreadable" in case.value and os.geteuid() == 0:
            continue  # root reads anything
        argv = led.argv(case, cmd)
        r = led.runner.invoke(main, argv, prog_name="trajledger")
        known = KNOWN.get((" ".join(case.command), case.param, case.value))
        try:
            check(case, argv, r.exit_code, r.stdout, r.stderr, led, r.exception)
        except AssertionError as e:
            if known is None:
                failed.append(str(e))
            led.before = led.state()
        else:
            if known is not None:
                failed.append(f"{case.id}: passes now ({known}): remove it from KNOWN")
        if r.exit_code == 0:
            led.before = led.state()  # an accepted value that changes the ledger
    assert not failed, "\n\n".join(failed)


REAL_PROCESS = [
    Case(("show",), "ref", "sha256:zz"),
    Case(("record",), "paths", "@random"),
    Case(("verify",), "envelope", "@dir"),
    Case(("log", "proof"), "index", str(10**30)),
]


@pytest.mark.parametrize("case", REAL_PROCESS, ids=lambda c: c.id)
def test_bad_values_through_a_real_process(
        case: Case, quickstart_template: testkit.Template[str], tmp_path: Path) -> None:
    led = Ledger(quickstart_template, tmp_path)
    argv = led.argv(case, dict(leaves())[case.command])
    r = subprocess.run([sys.executable, "-m", "trajledger", *argv], capture_output=True,
                       text=True, timeout=120, check=False, env=os.environ)
    check(case, argv, r.returncode, r.stdout, r.stderr, led)


def test_the_sweep_covers_every_command() -> None:
    swept = set(CASES)
    missing = [p for p, _ in leaves() if p not in swept and p not in SKIP]
    assert not missing, missing
    assert sum(len(c) for c in CASES.values()) > 150


def test_an_empty_policy_trusts_nothing(
        quickstart_template: testkit.Template[str], tmp_path: Path) -> None:
    """Why `ACCEPTED` lets ``policy check`` pass an empty file: the policy it is names no log
    key and no producer, so every lineage fails under it."""
    led = Ledger(quickstart_template, tmp_path)
    empty = led.value("@empty")
    r = led.runner.invoke(main, ["--ledger", str(led.home), "verify", "cartpole-bc@1",
                                 "--policy", empty])
    assert r.exit_code == 1 and "the policy names no log key" in r.stderr, r.output
    r = led.runner.invoke(main, ["--ledger", str(led.home), "admit", "cartpole-train@1",
                                 "--policy", empty])
    assert r.exit_code == 1 and "refused" in r.stderr, r.output


def test_a_record_refused_as_recorded_otherwise_leaves_no_envelope(
        quickstart_template: testkit.Template[str], tmp_path: Path) -> None:
    """The sweep's finding 5: a digest recorded again with other signed metadata was refused
    (exit 1, "nothing was recorded") yet left its signed envelope in the store, an orphan."""
    led = Ledger(quickstart_template, tmp_path)
    attest = ["--ledger", str(led.home), "attest", led.value("@file"), "--key", "vendor"]
    r = led.runner.invoke(main, [*attest, "--name", "first"])
    assert r.exit_code == 0, r.output
    before = led.state()
    r = led.runner.invoke(main, [*attest, "--name", "second"])
    assert r.exit_code == 1 and "with other signed metadata (name: 'first' vs 'second')" in (
        r.stderr), r.output
    assert led.state() == before


@pytest.mark.parametrize("extra", [["--pubkey", "@file"], ["--threshold", "2"],
                                   ["--threshold", "1"]], ids=" ".join)
def test_verify_a_ref_with_a_files_mode_option_is_a_usage_error(
        quickstart_template: testkit.Template[str], tmp_path: Path, extra: list[str]) -> None:
    """The sweep's finding 4: ``verify REF --pubkey K`` passed (exit 0) with K missing, empty
    or any key at all: the option was not read outside files mode, and looked like a pin."""
    led = Ledger(quickstart_template, tmp_path)
    r = led.runner.invoke(main, ["--ledger", str(led.home), "verify", "cartpole-bc@1",
                                 *[led.value(v) for v in extra]])
    assert r.exit_code == 2, r.output
    assert "--pubkey and --threshold are for files signed by 'trajledger sign'" in r.stderr


def test_rollout_seeds_past_64_bits_are_a_usage_error(
        quickstart_template: testkit.Template[str], tmp_path: Path) -> None:
    led = Ledger(quickstart_template, tmp_path)
    base = ["--ledger", str(led.home), "rollout", "--checkpoint", "cartpole-bc@1", "--env",
            "cartpole@1", "--key", "vendor"]
    r = led.runner.invoke(main, [*base, "--seed", str(2**63 - 1), "--episodes", "2"])
    assert r.exit_code == 2 and "seeds are 64-bit" in r.stderr, r.output
    r = led.runner.invoke(main, [*base, "--seed", str(2**63), "--episodes", "1"])
    assert r.exit_code == 2 and "--seed" in r.stderr, r.output
    assert led.state() == led.before


def test_stats_judge_of_no_judge_and_no_evaluator_is_refused(
        quickstart_template: testkit.Template[str], tmp_path: Path) -> None:
    """The sweep's stats finding: ``--judge`` of a judge no episode has and no evaluator is
    called reported every judged figure as null, exit 0. An evaluator of that name is still
    taken (its calibration is what ``--judge`` reports, scores or none)."""
    led = Ledger(quickstart_template, tmp_path)
    stats = ["--ledger", str(led.home), "stats", "cartpole-train@1", "--json", "--judge"]
    r = led.runner.invoke(main, [*stats, "episode-retrun"])
    assert r.exit_code == 2 and r.stdout == "" and r.stderr == (
        "FAIL: --judge 'episode-retrun': no episode here has that judge's score and no "
        "evaluator is called so (judges here: none)\n"), r.output
    r = led.runner.invoke(main, [*stats, "episode-return"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["calibration"]["evaluator"] == "episode-return@1"
