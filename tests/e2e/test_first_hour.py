"""Mistakes of a first hour with trajledger (issue 23), each answered with one readable line, the
exit code of its kind and the next step. Found by following README.md and docs/ as new users;
each test is one mistake.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import click
import pytest
import testkit
from click.testing import CliRunner
from test_runner_cli import expect, run  # tests/e2e is on sys.path (its conftest)

from trajledger import Ledger
from trajledger.runner.cli import main


@pytest.fixture
def runner() -> CliRunner:
    return testkit.new_runner()


@pytest.fixture
def home(quickstart_template: testkit.Template[str], tmp_path: Path) -> Path:
    return testkit.copy_template(quickstart_template, tmp_path / "home")


def test_a_mistyped_command_gets_the_closest_only(runner: CliRunner) -> None:
    # click's own matching also offered 'query' for 'verfy'.
    r = runner.invoke(main, ["verfy", "x"], prog_name="trajledger")
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: No such command 'verfy'. Did you mean 'verify'? See "
                             "'trajledger --help'\n")
    r = runner.invoke(main, ["dataset", "creat"], prog_name="trajledger")
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: No such command 'creat'. Did you mean 'create'? See "
                             "'trajledger dataset --help'\n")
    r = runner.invoke(main, ["key", "nwe"], prog_name="trajledger")  # short: 67% alike
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: No such command 'nwe'. Did you mean 'new'? See "
                             "'trajledger key --help'\n")
    r = runner.invoke(main, ["zzz"], prog_name="trajledger")
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: No such command 'zzz'; see 'trajledger --help'\n")


def test_eval_without_an_evaluator_role_says_how_to_get_one(
    runner: CliRunner, home: Path
) -> None:
    # The quickstart's policy is format 1: no evaluator role at all.
    r = run(runner, home, "eval", "cartpole-bc@2", "--suite", "cartpole-holdout@1", "--key",
            "trainer")
    expect(r, 1)
    assert r.stderr.splitlines()[-1].endswith(
        "does not hold the evaluator role in policy 'quickstart' serial 1 (format 1); "
        "evaluations are signed by roles.evaluator keys: record a policy with "
        "[roles.evaluator] naming it (format = 2, a higher serial: 'trajledger policy init "
        "--evaluator trainer --out FILE' writes one of this ledger's keys; docs/evaluations.md "
        "shows one)")
    assert r.stderr.startswith("FAIL: key trainer (")


def test_exporting_a_dataset_as_rollout_files_names_where_its_batches_are(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    r = run(runner, home, "export", "cartpole-holdout@1", "--format", "parquet", "--out",
            tmp_path / "out")
    expect(r, 3, "FAIL: cartpole-holdout@1: is a dataset, not a rollout-batch; give one of its "
                 "batches ('trajledger show cartpole-holdout@1' lists them)\n")
    assert not (tmp_path / "out").exists()


def test_train_output_keeps_a_plug_in_checkpoints_files(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    """An RL engineer who trained with the built-in trainer gets the model files (and an auditor
    checks them with --files); before, --output went with a COMMAND only."""
    from trajledger import Ledger

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("mine")
    size = Ledger.open(home).log.size
    r = run(runner, home, "train", "--dataset", "cartpole-train@2", "--key", "trainer",
            "--name", "bc-out", "--version", "1", "--seed", "1", "--output", taken)
    expect(r, 3, f"FAIL: --output {taken}: not empty (it holds 'x'); give a new or empty "
                 "directory, so that only what the command writes is recorded (the files of a "
                 "run stopped before it ended were never recorded: remove them and run again)\n")
    assert Ledger.open(home).log.size == size  # refused before training
    model = tmp_path / "model"
    r = run(runner, home, "train", "--dataset", "cartpole-train@2", "--key", "trainer",
            "--name", "bc-out", "--version", "1", "--seed", "1", "--output", model)
    expect(r, 0)
    assert r.stderr.splitlines()[-1] == (
        f"OK: 2 checkpoint file(s) written to {model}: policy.npz, trainer.json")
    shown = json.loads(run(runner, home, "show", "bc-out@1", "--json").stdout)
    assert {f["path"]: f["digest"] for f in shown["files"]} == {
        p.name: "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest() for p in model.iterdir()}
    assert not any(p.is_symlink() or p.stat().st_nlink > 1 for p in model.iterdir())


def test_training_the_same_files_again_says_to_change_the_seed(
    runner: CliRunner, home: Path
) -> None:
    # The quickstart trained cartpole-train@2 with seed 0 (parent cartpole-bc@1): the same files.
    r = run(runner, home, "train", "--dataset", "cartpole-train@2", "--key", "trainer")
    expect(r, 1)
    assert r.stderr.startswith("FAIL: checkpoint sha256:")
    assert r.stderr.endswith(
        "so nothing was recorded: the same dataset, trainer, config and seed train the same "
        "files; give another --seed (this was --seed 0) for a new checkpoint\n")


def test_an_option_that_takes_one_value_given_twice_is_a_usage_error(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    """click keeps the last of two values silently: ``train --dataset A --dataset B`` trained on
    B alone, ``--ledger A --ledger B`` used B, ``export --out a --out b`` wrote b. Now exit 2
    before anything runs; options that take many values, and flags, may repeat."""
    size = Ledger.open(home).log.size
    out = tmp_path / "a.tar.zst"
    cases = [
        (["--ledger", home, "train", "--dataset", "cartpole-train@1", "--dataset",
          "cartpole-train@2", "--key", "trainer", "--seed", "5"], "--dataset"),
        (["--ledger", home, "--ledger", tmp_path, "log", "info"], "--ledger"),
        (["log", "info", "--ledger", home, "--ledger", tmp_path], "--ledger"),
        (["--ledger", home, "export", "cartpole-bc@2", "--out", out, f"--out={out}.2"], "--out"),
        (["--ledger", home, "log", "show", "--from", "1", "--from", "2"], "--from"),
        (["--ledger", home, "key", "new", "x", "--alg", "p256", "--alg", "ed25519"], "--alg"),
    ]
    for args, option in cases:
        r = runner.invoke(main, [str(a) for a in args], prog_name="trajledger")
        expect(r, 2)
        [line] = r.stderr.splitlines()  # one line (left35)
        assert line.startswith(f"Error: {option} was given 2 times; it takes one value: give "
                               "it once; see 'trajledger "), args
    assert Ledger.open(home).log.size == size
    assert not list(tmp_path.glob("a.tar.zst*")) and not (home / "keys" / "x.key").exists()
    # Options that take many values, and flags, may be given again.
    r = run(runner, home, "lineage", "cartpole-bc@2", "--json", "--json")
    expect(r, 0)
    assert json.loads(r.stdout)["nodes"]
    expect(run(runner, home, "-q", "verify", "cartpole-bc@2", "-q"), 0)


def test_a_ledger_given_as_the_directory_that_holds_it_is_named_and_never_doubled(
    runner: CliRunner, tmp_path: Path
) -> None:
    """``cd lab && trajledger init`` makes ``lab/.trajledger``; from the parent, ``--ledger lab``
    said "no ledger here; run 'trajledger init'", and ``trajledger --ledger lab init`` then made
    a second, empty ledger in ``lab`` that every command run in ``lab`` found first, hiding the
    first one and all it recorded. Now the refusal names ``lab/.trajledger`` and init refuses."""
    from trajledger.ledger.errors import LedgerError

    lab = tmp_path / "lab"
    inner = lab / ".trajledger"
    expect(run(runner, inner, "init"), 0)
    before = sorted(p.name for p in lab.iterdir())
    named = (f"{lab}: no ledger here, but {inner} is one (made by 'trajledger init' in {lab}): "
             f"give that (--ledger {inner}; Ledger.open({str(inner)!r}))")
    expect(run(runner, lab, "log", "info"), 3, f"FAIL: {named}\n")
    with pytest.raises(LedgerError) as e:
        Ledger.open(lab)
    assert str(e.value) == named
    expect(run(runner, lab, "init"), 3,
           f"FAIL: {lab}: holds the ledger {inner}: a second ledger here would hide it from every "
           f"command run in {lab}; give --ledger {inner} to use it, or another directory for a "
           "new ledger\n")
    assert sorted(p.name for p in lab.iterdir()) == before == [".trajledger"]
    with pytest.raises(LedgerError):
        Ledger.init(lab)
    assert sorted(p.name for p in lab.iterdir()) == [".trajledger"]
    # Nothing near: the advice is unchanged.
    expect(run(runner, tmp_path / "none", "log", "info"), 3,
           f"FAIL: {tmp_path / 'none'}: no ledger here; run 'trajledger init' or pass --ledger "
           "DIR\n")


def test_a_column_under_gymnasiums_or_another_name_gets_the_schemas_name(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    """A Gymnasium user writes ``observation`` and ``done``: the refusal said only "unknown
    column ... keep other fields in 'extras'", and ``extras`` was the wrong advice. Now it names
    the column of the schema meant (from a table of common names, else the closest name)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    size = Ledger.open(home).log.size
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(
        {"episode_id": "e", "step": i, "observation": [0.1, 0.2, 0.3, 0.4], "action": 0,
         "rewrd": 1.0, "terminated": i == 1, "truncated": False}) + "\n" for i in range(2)))
    r = run(runner, home, "record", rows, "--env", "cartpole@1", "--policy", "p", "--key",
            "vendor")
    expect(r, 1)
    assert r.stderr.splitlines()[1:] == [
        "FAIL:   column 'observation': unknown step field: rollout schema v3 has no such column; "
        "did you mean 'obs'? (keep other fields in 'extras')",
        "FAIL:   column 'rewrd': unknown step field: rollout schema v3 has no such column; "
        "did you mean 'reward'? (keep other fields in 'extras')"]
    table = tmp_path / "steps.parquet"
    pq.write_table(pa.table({
        "episode_id": ["e", "e"], "step": [0, 1], "obs": [[0.1], [0.2]], "actions": [0, 1],
        "reward": [1.0, 1.0], "done": [False, True], "colour": ["a", "b"]}), table)
    r = run(runner, home, "record", table, "--env", "cartpole@1", "--policy", "p", "--key",
            "vendor")
    expect(r, 1)
    assert r.stderr.splitlines()[1:4] == [
        "FAIL:   column 'actions': unknown column: rollout schema v3 has no such column; did you "
        "mean 'action'? (see schemas/rollout.v3.md; keep other fields in 'extras')",
        "FAIL:   column 'done': unknown column: rollout schema v3 has no such column; did you "
        "mean 'terminated' and 'truncated'? ('done' is either: give both) (see "
        "schemas/rollout.v3.md; keep other fields in 'extras')",
        "FAIL:   column 'colour': unknown column: rollout schema v3 has no such column (see "
        "schemas/rollout.v3.md; keep other fields in 'extras')"]
    assert Ledger.open(home).log.size == size


def test_an_empty_reference_says_a_shell_variable_was_left_empty(
    runner: CliRunner, home: Path
) -> None:
    """The tour keeps each digest in a variable (``BATCH=$(trajledger record ...)``): when that
    command failed, the next one got ``--batch ""`` and said "FAIL: : no rollout-batch has this
    name" (``verify ""``: "bundle .: is a directory"). Now it says the reference is empty, and
    why it may be."""
    size = Ledger.open(home).log.size
    hint = ("a shell variable left empty? REF=$(trajledger ...) is empty when that command "
            "failed; give NAME@VERSION, sha256:<hex> or a digest prefix of 6+ hex characters")
    r = run(runner, home, "dataset", "create", "x", "--version", "1", "--split", "train",
            "--batch", "", "--key", "vendor")
    expect(r, 3, f"FAIL: an empty reference where a rollout-batch is wanted ({hint})\n")
    for args in (["show", ""], ["lineage", " "], ["train", "--dataset", "", "--key", "trainer"]):
        r = run(runner, home, *args)
        expect(r, 3)
        assert r.stderr.startswith("FAIL: an empty reference where ") and hint in r.stderr, args
    r = run(runner, home, "verify", "")  # not "bundle .: is a directory"
    expect(r, 3, f"FAIL: an empty reference where an artifact is wanted ({hint})\n")
    assert Ledger.open(home).log.size == size


def test_an_option_that_took_the_next_option_as_its_value_says_so(
    runner: CliRunner, home: Path
) -> None:
    """``--batch $BATCH --key vendor`` with BATCH empty and unquoted: click took ``--key`` as
    the batch and then said "Missing option '--key'", about the one option that was given. Now
    the usage error names the option left without its value."""
    size = Ledger.open(home).log.size
    r = run(runner, home, "dataset", "create", "x", "--version", "1", "--split", "train",
            "--batch", "--key", "vendor")
    expect(r, 2)
    assert r.stderr.splitlines() == [
        "Error: --batch took the option --key as its value: give --batch a value first (an "
        "unquoted shell variable left empty?); see 'trajledger dataset create --help'"]
    r = run(runner, home, "approve", "cartpole-train@2", "--expires", "--key", "approver-a")
    expect(r, 2)
    assert r.stderr.splitlines()[-1].startswith("Error: --expires took the option --key ")
    assert Ledger.open(home).log.size == size


def test_init_inside_a_ledger_directory_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    """README: 'cd demo' after the quickstart; 'trajledger init' there made demo/.trajledger, a
    ledger inside the ledger that no command run in demo found, and in demo/keys one that every
    command run there found instead of demo. Now both are refused, nothing made."""
    demo = tmp_path / "demo"
    expect(run(runner, demo, "init"), 0)
    before = sorted(p.relative_to(demo) for p in demo.rglob("*"))
    for where in (demo / ".trajledger", demo / "keys" / ".trajledger", demo / "log" / "x"):
        expect(run(runner, where, "init"), 3,
               f"FAIL: {where}: inside the ledger {demo}, which commands run there would find "
               "first or which this one would hide: make a new ledger outside it (--ledger "
               "DIR)\n")
    assert sorted(p.relative_to(demo) for p in demo.rglob("*")) == before
    expect(run(runner, tmp_path / "beside", "init"), 0)  # beside it: as before


def test_a_read_only_place_names_the_directory_and_the_next_step(
    runner: CliRunner, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hour33: ``lineage --out`` (``export``, ``init``) into a read-only directory said
    ``FAIL: DIR/.tmp-1a2b3c4d-4242-9f8e7d6c5b4a: Read-only file system``: a file the user never
    named, and nothing to do next. (A test's stand-in for a read-only mount: root ignores
    modes.)"""
    import errno
    import os

    ro = tmp_path / "ro"
    ro.mkdir()
    real_open = os.open

    def read_only(path: object, flags: int, *a: object, **kw: object) -> int:
        if str(path).startswith(f"{ro}/") and flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", read_only)
    expect(run(runner, home, "lineage", "cartpole-bc@2", "--format", "html", "--out",
               ro / "l.html"), 3,
           f"FAIL: cannot write in {ro}: Read-only file system; write elsewhere (another --out, "
           "--ledger or directory)\n")
    assert list(ro.iterdir()) == []


def _a_write_failing(runner: CliRunner, home: Path, tmp_path: Path,
                     monkeypatch: pytest.MonkeyPatch, error: OSError) -> str:
    """The one line of ``lineage --format html --out`` whose write raises ``error``."""
    from trajledger.ledger import fs

    def failing(*_a: object, **_kw: object) -> None:
        raise error

    monkeypatch.setattr(fs, "write_file_atomic", failing)
    r = run(runner, home, "lineage", "cartpole-bc@2", "--format", "html", "--out",
            tmp_path / "l.html")
    expect(r, 3)
    [line] = r.stderr.splitlines()
    assert line.startswith("FAIL: "), line
    return line


@pytest.mark.parametrize("error", [
    OSError(28, "No space left on device"),
    OSError("Error writing bytes to file. Detail: [errno 28] No space left on device"),  # pyarrow
])
def test_a_full_disk_says_to_free_space(
    runner: CliRunner, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    error: OSError,
) -> None:
    """hour33: a full disk was ``FAIL: No space left on device`` (the quickstart: pyarrow's
    ``Error writing bytes to file. Detail: [errno 28] ...``), with no next step."""
    line = _a_write_failing(runner, home, tmp_path, monkeypatch, error)
    assert "No space left on device" in line, line
    assert line.endswith("; free space on the disk written to (the ledger's, or where --out "
                         "writes) or write elsewhere, then run the command again"), line


def test_a_file_size_limit_says_which_limit_and_the_way_on(
    runner: CliRunner, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev44's Left: a write past ``ulimit -f`` (Python ignores SIGXFSZ, so the write fails
    with EFBIG) said ``FAIL: ...: File too large`` and nothing to do next."""
    import errno

    line = _a_write_failing(runner, home, tmp_path, monkeypatch,
                            OSError(errno.EFBIG, "File too large"))
    assert "File too large" in line, line
    assert line.endswith("('ulimit -f', or the file system's own limit): raise the limit or "
                         "write elsewhere, then run the command again"), line


def test_a_command_run_beside_the_quickstarts_ledger_names_it(
    runner: CliRunner, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hour33: after ``trajledger quickstart demo``, ``trajledger log info`` in the same directory
    said "no ledger here; run 'trajledger init'", and following it made an empty ledger beside
    the demo that every later command there used. Now the ledgers just below are named."""
    monkeypatch.delenv("TRAJLEDGER_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(main, ["log", "info"], prog_name="trajledger")
    expect(r, 3, "FAIL: .trajledger: no ledger here or above, but home is one: give --ledger "
                 "home (or cd home first), or run 'trajledger init' for a new ledger here\n")
    expect(runner.invoke(main, ["--ledger", "home", "log", "info"], prog_name="trajledger"), 0)
    monkeypatch.chdir(home / "keys")  # inside a ledger: found, as before
    expect(runner.invoke(main, ["log", "info"], prog_name="trajledger"), 0)
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    monkeypatch.chdir(lonely)
    expect(runner.invoke(main, ["log", "info"], prog_name="trajledger"), 3,
           "FAIL: .trajledger: no ledger here; run 'trajledger init' or pass --ledger DIR\n")


def test_quickstart_json_prints_one_document(runner: CliRunner, tmp_path: Path) -> None:
    """hour33: ``trajledger quickstart demo --json`` printed the lineage tree (4 KB of text) on
    stdout before its JSON document, so ``| python -m json.tool`` failed; the tree now goes to
    stderr with the steps."""
    r = runner.invoke(main, ["quickstart", str(tmp_path / "demo"), "--json", "--episodes", "10"],
                      prog_name="trajledger")  # (10 episodes: the output's shape is the same)
    expect(r, 0)
    shown = json.loads(r.stdout)
    assert shown["checkpoint"].startswith("sha256:") and shown["checks"] > 0
    assert shown["ledger"] == str(tmp_path / "demo")
    assert "checkpoint cartpole-bc@2" in r.stderr


def test_dataset_create_json_prints_what_it_recorded(runner: CliRunner, home: Path) -> None:
    """hour33: ``dataset create ... --json`` recorded the dataset, then ended in ``BUG:
    TypeError: Object of type CatalogItem is not JSON serializable`` (exit 4) and printed
    nothing: a script took the recorded dataset for a failure, and its rerun was refused."""
    r = run(runner, home, "dataset", "create", "again", "--version", "1", "--split", "train",
            "--batch", "cartpole-random", "--key", "vendor", "--json")
    expect(r, 0)
    shown = json.loads(r.stdout)
    batch = json.loads(run(runner, home, "show", "cartpole-random", "--json").stdout)["digest"]
    assert shown["kind"] == "dataset" and shown["name"] == "again" and shown["new"] is True
    assert shown["batches"] == [batch] and shown["split"] == "train"
    assert json.loads(run(runner, home, "show", "again@1", "--json").stdout)["digest"] == (
        shown["digest"])


def test_a_store_that_cannot_be_written_says_what_to_do(
    runner: CliRunner, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hour33: ``approve`` on a ledger on a read-only file system (a mounted backup, a
    container's read-only volume) said ``FAIL: object sha256:...: cannot write: Read-only file
    system`` and stopped there."""
    import errno
    import os

    real_open = os.open

    def read_only(path: object, flags: int, *a: object, **kw: object) -> int:
        if kw.get("dir_fd") is not None and flags & (os.O_WRONLY | os.O_RDWR):  # the store's
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *a, **kw)  # type: ignore[arg-type]

    before = testkit.snapshot(home)
    monkeypatch.setattr(os, "open", read_only)
    r = run(runner, home, "approve", "cartpole-train@2", "--key", "approver-a")
    expect(r, 3)
    [line] = r.stderr.splitlines()
    assert line.startswith("FAIL: object sha256:") and line.endswith(
        ": cannot write: Read-only file system; write elsewhere (another --out, --ledger or "
        "directory)"), line
    monkeypatch.undo()
    assert testkit.snapshot(home) == before


@pytest.mark.parametrize("command", [
    ["lineage", "cartpole-bc@2", "--format", "html"],
    ["export", "cartpole-train@2"],
    ["log", "proof", "3"],
])
def test_an_output_that_is_a_device_a_fifo_or_a_stream_is_refused_not_replaced(
    runner: CliRunner, home: Path, tmp_path: Path, command: list[str]
) -> None:
    """hour33: every ``--out`` writes a file beside the path and renames it into place, so
    ``--out /dev/null``, a FIFO, or ``/dev/stdout`` (a link to /proc/self/fd/1) was replaced by a
    regular file: as root, ``lineage --out /dev/null`` replaced the system's /dev/null (done here
    by accident to /dev/full, restored with mknod). Now a usage error, nothing replaced."""
    import os
    import stat

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    stream = tmp_path / "stdout"
    stream.symlink_to("/proc/self/fd/1")
    targets = [(fifo, "a FIFO"), (stream, "a link to /proc/self/fd/1")]
    if os.geteuid() == 0:  # making a device node needs root
        null = tmp_path / "null"
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        targets.append((null, "a character device"))
    before = testkit.snapshot(home)
    for path, what in targets:
        r = run(runner, home, *command, "--out", path)
        expect(r, 2)
        assert r.stderr.endswith(
            f"Error: Invalid value for '--out': {path}: is {what}, not a file: the output is "
            "written beside it and renamed into place, which would replace it; give the path "
            f"of a file; see 'trajledger {' '.join(command[:2 if command[0] == 'log' else 1])} "
            "--help'\n"), r.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and os.readlink(stream) == "/proc/self/fd/1"
    assert all(not stat.S_ISREG(p.lstat().st_mode) for p, _ in targets)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["home", *(p.name for p, _ in targets)])
    assert testkit.snapshot(home) == before


JSON_ELSEWHERE = {
    "init": "tests/e2e/test_cli_surface.py test_json_of_commands_that_record (a new ledger)",
    "quickstart": "test_quickstart_json_prints_one_document (a new demo)",
    "log show": "JSON Lines, one entry a line, as docs/cli.md says",
    "log serve": "serves until stopped: tests/e2e/test_log_cli.py",
    "monitor": "needs a served log: tests/e2e/test_monitor.py",
    "import": "needs another ledger's bundle: tests/e2e/test_exchange_attacks.py",
    "eval": "needs a format-2 policy: tests/e2e/test_evaluations.py",
    "release": "needs a format-2 policy: tests/e2e/test_evaluations.py",
}
"""The commands with ``--json`` that `test_every_json_command_prints_one_document` does not run,
and where they are."""


def test_every_json_command_prints_one_document(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    """hour33: ``dataset create --json`` (exit 4 after recording) and ``quickstart --json``
    (text before the document) lived since ``--json`` came, because no test ran every command's
    ``--json``. Each command that takes it runs here once, successfully, on a quickstart ledger
    (or is named in `JSON_ELSEWHERE`), and prints exactly one JSON document on stdout."""
    from test_cli_surface import commands

    steps = tmp_path / "steps.jsonl"
    steps.write_text("".join(json.dumps(
        {"episode_id": "e", "step": i, "obs": [0.1 * i, 0.0, 0.0, 0.0], "action": i % 2,
         "reward": 1.0, "terminated": i == 2, "truncated": False}) + "\n" for i in range(3)))
    successor = tmp_path / "p2.toml"
    successor.write_text((home / "policy.toml").read_text().replace("serial = 1", "serial = 2"))
    ran: dict[str, object] = {}

    def j(*args: str | Path) -> dict[str, object]:
        words = [str(a) for a in args]
        r = run(runner, home, *words, "--json")
        expect(r, 0)
        shown = json.loads(r.stdout)  # one document, nothing else
        ran[" ".join(w for w in words[:2] if not w.startswith(("-", "/", "sha256:"))
                     and "@" not in w and w not in {"3", "5"})] = shown
        return shown if isinstance(shown, dict) else {}

    j("key", "list")
    j("key", "export", "vendor")
    j("key", "new", "extra", "--no-encrypt")
    j("sign", steps, "--key", "vendor", "--out", tmp_path / "steps.dsse.json")
    j("attest", steps, "--name", "steps", "--key", "vendor")
    j("log", "info")
    j("log", "proof", "3")
    j("log", "consistency", "5")
    j("log", "verify")
    j("env", "register", "grid", "--version", "1", "--gym-id", "CartPole-v1", "--key", "vendor")
    j("evaluator", "register", "judge", "--version", "1", "--kind", "human", "--key", "vendor")
    j("validate", steps)
    batch = j("record", steps, "--env", "cartpole@1", "--evaluator", "episode-return@1",
              "--policy", "random", "--key", "vendor")["digest"]
    j("dataset", "create", "again", "--version", "1", "--split", "train", "--batch", batch,
      "--key", "vendor")
    j("show", "again@1")
    j("policy", "check", home / "policy.toml")
    j("policy", "show")
    j("approve", "again@1", "--key", "approver-a")
    j("approve", "again@1", "--key", "approver-b")
    j("admit", "again@1")
    j("train", "--dataset", "again@1", "--key", "trainer")
    j("rollout", "--checkpoint", "cartpole-bc@2", "--env", "cartpole@1", "--episodes", "1",
      "--key", "vendor")
    j("verify", "cartpole-bc@2")
    j("lineage", "cartpole-bc@2")
    j("impact", "cartpole-train@1")
    j("query", "episodes")
    j("query", "artifacts")
    j("stats", "cartpole-train@2")
    j("export", "cartpole-train@2", "--out", tmp_path / "b.tar.zst")
    j("fsck")
    j("gc")
    j("trust")
    j("log", "cosign", "--key", "approver-a")
    assert j("policy", "set", successor, "--key", "approver-a", "--key", "approver-b",
             "--yes")["keptPins"] == []  # (none failing: test_histories_exchange.py has one)
    j("revoke", "again@1", "--key", "approver-a", "--reason", "a test")
    j("erase", batch, "--key", "approver-a", "--reason", "consent")
    j("log", "rotate-key")
    with_json = {" ".join(p) for p, c in commands() if not isinstance(c, click.Group)
                 and any("--json" in o.opts for o in c.params if isinstance(o, click.Option))}
    assert set(ran) | set(JSON_ELSEWHERE) == with_json, (
        with_json - set(ran) - set(JSON_ELSEWHERE), set(ran) - with_json)


@pytest.mark.parametrize("module", ["home", "trust_state"])
def test_a_full_disk_writing_the_users_state_says_to_free_space(
    runner: CliRunner, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    """hour33's Left (left34): the pins of a ledger (`home`) and a trust state's key note
    (`trust_state`) said ``cannot write: No space left on device`` with no next step, where
    every other write says what to do (`errors.next_step`, now through `errors.cannot_write`)."""
    import importlib

    def full(*_a: object, **_kw: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "fresh"))  # nothing pinned yet
    monkeypatch.setattr(importlib.import_module(f"trajledger.ledger.{module}"),
                        "write_file_atomic", full)
    r = run(runner, home, "verify", "cartpole-bc@2")
    expect(r, 3)
    [line] = r.stderr.splitlines()
    assert line.startswith("FAIL: ") and "No space left on device" in line, line
    assert line.endswith("; free space on the disk written to (the ledger's, or where --out "
                         "writes) or write elsewhere, then run the command again"), line
