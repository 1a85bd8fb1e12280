"""End to end: ``trajledger train --dataset D --key K --name N --version V -- COMMAND``.

On a copy of the chat ledger (tests/conftest.py: an approved chat dataset ``chat@1``), through
click's CliRunner, asserting exit codes and stderr lines: a command that trains (its provenance
names the command line, the git commit, the locks, the exit code and the digests of its
output; the checkpoint verifies), a failing command, a command that changes its data
directory, a command that writes nothing, kept logs, an output directory of the user's, a
parent checkpoint handed to the command, usage errors, a refused dataset, chat data given to
the built-in trainer, and, in a subprocess, Ctrl-C during a launcher's run (exit 130, nothing
recorded, the signal reached its workers), and real ``torchrun`` and ``accelerate launch`` as
COMMAND when the ``train`` extra is installed.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from test_exit_codes import cli  # tests/e2e is on sys.path (its conftest)
from test_statements_strict import strict_problems

from trajledger import Ledger
from trajledger.runner.buildinfo import environment_lock
from trajledger.runner.chat import CHAT_HINT
from trajledger.runner.cli import main
from trajledger.verify.dsse import Envelope
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.statement import Statement

TRAIN = textwrap.dedent(
    """
    # A training script: reads the verified data, writes a model into the output directory.
    import json, os, pathlib, sys
    import pyarrow.parquet as pq
    data = pathlib.Path(os.environ["TRAJLEDGER_DATA_DIR"])
    out = pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"])
    listing = json.loads((data / "manifest.json").read_text())
    rows = sum(pq.read_table(data / b["directory"] / "steps.parquet").num_rows
               for b in listing["batches"])
    (out / "model").mkdir()
    (out / "model" / "weights.bin").write_bytes(rows.to_bytes(4, "big"))
    (out / "requirements.lock").write_text("numpy==2.0.0\\n")
    (out / "seen.json").write_text(json.dumps({
        "passphrase": os.environ.get("TRAJLEDGER_PASSPHRASE_SOMEONE_ELSE"),
        "parent": os.environ.get("TRAJLEDGER_PARENT_DIR"),
        "dataset": listing["dataset"]["name"],
    }))
    print(f"trained on {rows} rows")
    print("a warning", file=sys.stderr)
    """
)


def run(runner: CliRunner, home: Path, *args: str | Path, **kw: Any) -> Result:
    return runner.invoke(main, ["--ledger", str(home), *map(str, args)], prog_name="trajledger",
                         **kw)


def entries(home: Path) -> list[LogEntry]:
    log = Ledger.open(home).log
    return [LogEntry.from_bytes(e) for e in log.entries(0, log.size)]


def statement(home: Path, digest: str) -> dict[str, Any]:
    """The checkpoint's signed statement, as JSON."""
    ledger = Ledger.open(home)
    entry = next(e for e in entries(home) if e.subject == digest and e.kind == "checkpoint")
    payload: dict[str, Any] = json.loads(Envelope.from_bytes(ledger.store.get(entry.envelope))
                                         .payload)
    return payload


def provenance(home: Path, digest: str) -> dict[str, Any]:
    pred: dict[str, Any] = statement(home, digest)["predicate"]
    return pred


def deps(pred: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [d for d in pred["buildDefinition"]["resolvedDependencies"]
            if d.get("annotations", {}).get("role") == role]


def byproduct(pred: dict[str, Any], name: str) -> dict[str, Any]:
    return next(b for b in pred["runDetails"]["byproducts"] if b["name"] == name)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "work" / "train.py"
    path.parent.mkdir()
    path.write_text(TRAIN)
    return path


@pytest.fixture
def repo(script: Path) -> Path:
    """The script's directory as a git work tree (committed, clean), the current directory."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    cwd = script.parent
    for args in (["init", "-q"], ["add", "train.py"], ["commit", "-q", "-m", "train"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
                       cwd=cwd, check=True, capture_output=True)
    return cwd


def _no_leftovers(home: Path) -> None:
    tmp = home / "tmp"
    assert not tmp.exists() or list(tmp.iterdir()) == []


def test_a_command_trains_and_its_checkpoint_records_how(
    runner: CliRunner, chat_home: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo)
    # The ledger's keys are plain (TRAJLEDGER_PASSPHRASE would refuse them); a per-key
    # passphrase of a key the run does not use must not reach the command either.
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE_SOMEONE_ELSE", "not for the command")
    before = len(entries(chat_home))
    r = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
            "sft", "--version", "1", "--", sys.executable, "train.py")
    assert r.exit_code == 0, r.output
    digest = r.stdout.strip()
    assert r.stdout == digest + "\n"
    lines = r.stderr.splitlines()
    assert "trained on 26 rows" in lines and "a warning" in lines  # its output, on stderr
    assert lines[-1] == (f"OK: checkpoint sft@1 recorded at log index {before}: 3 file(s) from "
                         f"{sys.executable} (exit 0, trained on 1 batch(es) of chat@1)")
    assert [e.kind for e in entries(chat_home)][before:] == ["checkpoint"]
    _no_leftovers(chat_home)

    assert strict_problems(statement(chat_home, digest)) == []  # in-toto and SLSA, strictly
    pred = provenance(chat_home, digest)
    build = pred["buildDefinition"]
    assert build["buildType"] == "https://trajledger.dev/build/command/v1"
    assert build["externalParameters"]["command"] == [sys.executable, "train.py"]
    assert build["externalParameters"]["name"] == "sft"
    [source] = deps(pred, "source")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert source["digest"] == {"gitCommit": head}
    assert source["annotations"] == {"role": "source", "dirty": False}
    env_lock, command_lock = deps(pred, "dependency-lock")
    assert base64.b64decode(env_lock["content"]) == environment_lock()
    assert env_lock["name"] == "python-environment"
    assert command_lock["annotations"]["file"] == "requirements.lock"
    assert command_lock["digest"] == {"sha256": sha(b"numpy==2.0.0\n")}
    assert [d["annotations"]["role"] for d in build["resolvedDependencies"][:2]] == [
        "dataset", "environment"]
    assert byproduct(pred, "exit-code")["annotations"] == {"exitCode": 0}
    out = byproduct(pred, "stdout")
    assert out["digest"] == {"sha256": sha(b"trained on 26 rows\n")}
    assert byproduct(pred, "stderr")["digest"] == {"sha256": sha(b"a warning\n")}
    assert "file" not in out["annotations"]  # the text is not stored without --keep-logs

    ledger = Ledger.open(chat_home)
    from trajledger.ledger.artifacts import batch_files

    files = batch_files(ledger, digest)
    assert sorted(files) == ["model/weights.bin", "requirements.lock", "seen.json"]
    seen = json.loads(ledger.store.get_verified(files["seen.json"]))
    assert seen == {"passphrase": None, "parent": None, "dataset": "chat"}
    assert ledger.store.get_verified(files["model/weights.bin"]) == (26).to_bytes(4, "big")

    v = run(runner, chat_home, "verify", digest)
    assert v.exit_code == 0, v.output
    assert "    · source — source\n" in v.stdout  # shown, not an artifact of the log
    assert v.stderr.startswith(f"OK: {digest}: ")


def test_a_failing_command_records_nothing(
    runner: CliRunner, chat_home: Path, tmp_path: Path
) -> None:
    before = entries(chat_home)
    code = "import sys; print('loss: nan'); sys.exit(3)"
    r = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
            "sft", "--version", "1", "--", sys.executable, "-c", code)
    assert r.exit_code == 1, r.output
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        "loss: nan",
        f"FAIL: command {shlex.join([sys.executable, '-c', code])!r} exited with code 3; "
        "nothing was recorded",
    ]
    assert entries(chat_home) == before
    _no_leftovers(chat_home)


def test_the_same_files_again_under_a_new_version_say_which_checkpoint_they_are(
    runner: CliRunner, chat_home: Path
) -> None:
    """A digest names one checkpoint: a run that writes the same files from the same dataset
    and command is the checkpoint already recorded (exit 0, its digest), and the OK line says
    so, naming it, instead of "sft@2 recorded" for a name that was not recorded."""
    code = "import os; open(os.environ['TRAJLEDGER_OUTPUT_DIR'] + '/w.bin', 'wb').write(b'w')"
    args = ("train", "--dataset", "chat@1", "--key", "trainer", "--name", "sft", "--",
            sys.executable, "-c", code)
    first = run(runner, chat_home, *args[:7], "--version", "1", *args[7:])
    assert first.exit_code == 0, first.output
    before = entries(chat_home)
    again = run(runner, chat_home, *args[:7], "--version", "2", *args[7:])
    assert again.exit_code == 0, again.output
    assert again.stdout == first.stdout
    assert again.stderr == (
        f"OK: checkpoint sft@1 already recorded at log index {len(before) - 1}: this run wrote "
        "the same files from the same dataset, parent and command, and a digest names one "
        "checkpoint; sft@2 was not recorded\n")
    assert entries(chat_home) == before
    assert run(runner, chat_home, "show", "sft@2").exit_code == 3
    _no_leftovers(chat_home)


def test_a_command_that_changes_its_data_records_nothing(
    runner: CliRunner, chat_home: Path
) -> None:
    before = entries(chat_home)
    code = textwrap.dedent(
        """
        import os, pathlib
        data = pathlib.Path(os.environ["TRAJLEDGER_DATA_DIR"])
        card = data / "README.md"
        os.chmod(data, 0o755); os.chmod(card, 0o644)
        card.write_text("edited")
        (data / "extra.txt").write_text("x")
        pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"], "model.bin").write_bytes(b"m")
        """
    )
    r = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
            "sft", "--version", "1", "--", sys.executable, "-c", code)
    assert r.exit_code == 1, r.output
    lines = r.stderr.splitlines()
    assert lines[0].startswith("FAIL: $TRAJLEDGER_DATA_DIR (")
    assert lines[0].endswith("/data) was changed by the command: 2 problem(s); nothing was "
                             "recorded")
    assert lines[1] == "FAIL: data/extra.txt: extra file, not in the manifest"
    assert lines[2].startswith("FAIL: data/README.md: size 6, want ")
    assert len(lines) == 3
    assert entries(chat_home) == before
    _no_leftovers(chat_home)


def test_a_command_that_writes_nothing_records_nothing(
    runner: CliRunner, chat_home: Path
) -> None:
    before = entries(chat_home)
    r = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
            "sft", "--version", "1", "--", sys.executable, "-c", "pass")
    assert r.exit_code == 1, r.output
    [line] = r.stderr.splitlines()
    assert line.startswith(f"FAIL: command '{sys.executable} -c pass' exited 0 but wrote no "
                           "file in $TRAJLEDGER_OUTPUT_DIR (")
    assert line.endswith("): there is no checkpoint to record")
    assert entries(chat_home) == before


def test_kept_logs_and_a_users_output_directory(
    runner: CliRunner, chat_home: Path, script: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(script.parent)
    out = tmp_path / "my-model"
    r = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
            "sft", "--version", "1", "--output", out, "--keep-logs", "--", sys.executable,
            "train.py")
    assert r.exit_code == 0, r.output
    digest = r.stdout.strip()
    assert (out / "model" / "weights.bin").read_bytes() == (26).to_bytes(4, "big")  # kept
    from trajledger.ledger.artifacts import batch_files

    ledger = Ledger.open(chat_home)
    files = batch_files(ledger, digest)
    assert ledger.store.get_verified(files["trajledger-run/stdout.log"]) == b"trained on 26 rows\n"
    assert ledger.store.get_verified(files["trajledger-run/stderr.log"]) == b"a warning\n"
    pred = provenance(chat_home, digest)
    assert byproduct(pred, "stdout")["annotations"]["file"] == "trajledger-run/stdout.log"
    assert deps(pred, "source") == []  # not a git work tree

    # The directory now holds files: refused before anything is admitted or run.
    before = entries(chat_home)
    again = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
                "sft", "--version", "2", "--output", out, "--", sys.executable, "train.py")
    assert again.exit_code == 3
    assert again.stderr == (f"FAIL: --output {out}: not empty (it holds 'model', "
                            "'requirements.lock', 'seen.json'); give a new or empty directory, "
                            "so that only what the command writes is recorded (the files of a "
                            "run stopped before it ended were never recorded: remove them and "
                            "run again)\n")
    assert entries(chat_home) == before


def test_a_parent_checkpoints_files_are_handed_to_the_command(
    runner: CliRunner, chat_home: Path, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(script.parent)
    first = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer",
                "--name", "sft", "--version", "1", "--", sys.executable, "train.py")
    assert first.exit_code == 0, first.output
    parent = first.stdout.strip()
    code = textwrap.dedent(
        """
        import os, pathlib, shutil
        parent = pathlib.Path(os.environ["TRAJLEDGER_PARENT_DIR"])
        out = pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"])
        w = (parent / "model" / "weights.bin").read_bytes()
        (out / "weights.bin").write_bytes(w + b"+tuned")
        """
    )
    r = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
            "sft", "--version", "2", "--parent", "sft@1", "--", sys.executable, "-c", code)
    assert r.exit_code == 0, r.output
    child = r.stdout.strip()
    [base] = deps(provenance(chat_home, child), "base-checkpoint")
    assert base["digest"] == {"sha256": parent.removeprefix("sha256:")}
    from trajledger.ledger.artifacts import batch_files

    ledger = Ledger.open(chat_home)
    weights = ledger.store.get_verified(batch_files(ledger, child)["weights.bin"])
    assert weights == (26).to_bytes(4, "big") + b"+tuned"
    v = run(runner, chat_home, "verify", child)
    assert v.exit_code == 0, v.output
    _no_leftovers(chat_home)

    # The same name@version again: refused before anything runs.
    before = entries(chat_home)
    dup = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
              "sft", "--version", "2", "--", sys.executable, "-c", code)
    assert dup.exit_code == 3
    assert dup.stderr == (f"FAIL: checkpoint sft@2 is already recorded ({child[:19]}…, log index "
                          f"{len(before) - 1}); give another --version\n")
    assert entries(chat_home) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trainer", "bc"], "Error: --trainer: for trainer plug-ins, not with a COMMAND"),
        (["--seed", "3"], "Error: --seed: for trainer plug-ins, not with a COMMAND"),
        (["--name", "x"], "Error: a COMMAND needs --version"),
        ([], "Error: a COMMAND needs --name and --version"),
    ],
)
def test_usage_errors(runner: CliRunner, chat_home: Path, args: list[str], message: str) -> None:
    r = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", *args, "--",
            "true")
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [f"{message}; see 'trajledger train --help'"]  # one (left35)


def test_keep_logs_without_a_command_is_a_usage_error(runner: CliRunner, chat_home: Path) -> None:
    r = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--keep-logs")
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        "Error: --keep-logs goes with a COMMAND (after '--'); see 'trajledger train --help'"]


def test_a_refused_dataset_runs_nothing_and_records_the_refusal(
    runner: CliRunner, chat_home: Path, tmp_path: Path
) -> None:
    ledger = Ledger.open(chat_home)
    batch = next(e.subject for e in entries(chat_home) if e.kind == "rollout-batch")
    ledger.create_dataset("chat", "2", "train", [batch], key="vendor")  # never approved
    marker = tmp_path / "ran"
    before = len(entries(chat_home))
    r = run(runner, chat_home, "train", "--dataset", "chat@2", "--key", "trainer", "--name",
            "sft", "--version", "1", "--", sys.executable, "-c",
            f"open({str(marker)!r}, 'w')")
    assert r.exit_code == 1
    assert r.stderr.splitlines()[0] == "FAIL: dataset chat@2: refused, 1 problem(s)"
    assert not marker.exists()
    after = entries(chat_home)
    assert [e.kind for e in after[before:]] == ["refusal"]
    body = Statement.from_bytes(
        Envelope.from_bytes(ledger.store.get(after[-1].envelope)).payload).predicate
    argv = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    assert body["trainer"] == ("command: " + shlex.join(argv))[:200]


def test_data_revoked_during_the_run_records_nothing(
    runner: CliRunner, chat_home: Path
) -> None:
    # Admitted at the start, revoked while COMMAND runs: recorded, the checkpoint's lineage
    # would fail from its first day (rev6 finding 1). The rules are judged again just before
    # the checkpoint is appended.
    batch = next(e.subject for e in entries(chat_home) if e.kind == "rollout-batch")
    code = (
        "import os, pathlib\n"
        "from trajledger import Ledger\n"
        f"Ledger.open({str(chat_home)!r}).revoke({batch!r}, key='approver', reason='PII')\n"
        "pathlib.Path(os.environ['TRAJLEDGER_OUTPUT_DIR'], 'w.bin').write_bytes(b'w')\n"
    )
    before = len(entries(chat_home))
    objects = {p.name for p in (chat_home / "objects").rglob("*") if p.is_file()}
    r = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
            "sft", "--version", "1", "--", sys.executable, "-c", code)
    assert r.exit_code == 1, r.output
    lines = r.stderr.splitlines()
    assert lines[0] == ("FAIL: dataset chat@1: refused when the checkpoint was to be recorded "
                        "(the rules changed during the run), 1 problem(s); nothing was "
                        "recorded"), r.stderr
    assert "revoked: PII" in lines[1]
    added = entries(chat_home)[before:]
    assert [e.kind for e in added] == ["revocation", "refusal"]
    # Judged before the files are stored: no orphan of the refused checkpoint in the store.
    new = {p.name for p in (chat_home / "objects").rglob("*") if p.is_file()} - objects
    assert new == {e.envelope.removeprefix("sha256:") for e in added}
    assert "Traceback" not in r.output
    _no_leftovers(chat_home)


def test_an_approval_that_expires_during_the_run_records_nothing(
    runner: CliRunner, chat_home: Path
) -> None:
    # The checkpoint's lineage judges approvals at its own log time: recorded after the
    # approval expired, it would never verify (rev6 finding 1).
    ledger = Ledger.open(chat_home)
    batch = next(e.subject for e in entries(chat_home) if e.kind == "rollout-batch")
    ledger.create_dataset("chat", "2", "train", [batch], key="vendor")
    ledger.approve("chat@2", key="approver", expires="2s")
    code = ("import os, pathlib, time; time.sleep(3); "
            "pathlib.Path(os.environ['TRAJLEDGER_OUTPUT_DIR'], 'w.bin').write_bytes(b'w')")
    before = len(entries(chat_home))
    r = run(runner, chat_home, "train", "--dataset", "chat@2", "--key", "trainer", "--name",
            "sft", "--version", "1", "--", sys.executable, "-c", code)
    assert r.exit_code == 1, r.output
    lines = r.stderr.splitlines()
    assert lines[0].startswith("FAIL: dataset chat@2: refused when the checkpoint was to be "
                               "recorded"), r.stderr
    assert "approvals: 0 of 1 required approver(s)" in lines[1] and "expired" in lines[1]
    assert [e.kind for e in entries(chat_home)][before:] == ["refusal"]
    _no_leftovers(chat_home)


def test_a_parent_whose_lineage_fails_is_refused_before_anything_runs(
    runner: CliRunner, chat_home: Path, tmp_path: Path
) -> None:
    # rev6 finding 6: a revoked parent was handed to COMMAND, which trained; the child was
    # recorded (exit 0) with a lineage that fails through its parent.
    code = ("import os, pathlib; "
            "pathlib.Path(os.environ['TRAJLEDGER_OUTPUT_DIR'], 'w').write_text('w')")
    first = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer",
                "--name", "sft", "--version", "1", "--", sys.executable, "-c", code)
    assert first.exit_code == 0, first.output
    Ledger.open(chat_home).revoke("sft@1", key="approver", reason="poisoned")
    marker = tmp_path / "ran"
    before = len(entries(chat_home))
    r = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
            "sft", "--version", "2", "--parent", "sft@1", "--", sys.executable, "-c",
            f"open({str(marker)!r}, 'w'); " + code.replace("'w')", "'w2')"))
    assert r.exit_code == 1, r.output
    lines = r.stderr.splitlines()
    assert lines[0] == ("FAIL: parent checkpoint sft@1: its lineage fails, 1 problem(s); "
                        "nothing was run"), r.stderr
    assert "revoked: poisoned" in lines[1]
    assert not marker.exists()
    assert len(entries(chat_home)) == before
    _no_leftovers(chat_home)


def test_two_runs_racing_for_one_checkpoint_name_record_one(
    runner: CliRunner, chat_home: Path
) -> None:
    # rev6: the name was checked free when each run started; a run that finished meanwhile
    # under the same NAME@VERSION (here: started by COMMAND itself) left two checkpoints sft@1.
    write = ("import os, pathlib; "
             "pathlib.Path(os.environ['TRAJLEDGER_OUTPUT_DIR'], 'w').write_text({!r})")
    inner = [sys.executable, "-m", "trajledger", "--ledger", str(chat_home), "train", "--dataset",
             "chat@1", "--key", "trainer", "--name", "sft", "--version", "1", "--",
             sys.executable, "-c", write.format("inner")]
    outer = f"import subprocess; subprocess.run({inner!r}, check=True)\n" + write.format("outer")
    r = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
            "sft", "--version", "1", "--", sys.executable, "-c", outer)
    assert r.exit_code == 3, r.output
    assert r.stderr.splitlines()[-1].startswith("FAIL: checkpoint sft@1 is already recorded ")
    assert [e.kind for e in entries(chat_home)].count("checkpoint") == 1
    _no_leftovers(chat_home)


def test_chat_data_and_no_command_names_the_ways_to_train(
    runner: CliRunner, chat_home: Path
) -> None:
    before = entries(chat_home)
    r = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer")
    assert r.exit_code == 1
    assert r.stderr == (
        "FAIL: bc: none of 26 steps has an obs and an action, and bc (behaviour cloning) "
        f"learns only from those: {CHAT_HINT}\n"
    )
    assert "-- COMMAND" in CHAT_HINT and "LedgerCallback" in CHAT_HINT
    assert entries(chat_home) == before


# -- in a subprocess: Ctrl-C, real launchers ---------------------------------------------------


def test_ctrl_c_stops_the_launcher_and_its_workers_and_records_nothing(
    chat_home: Path, launcher: Path
) -> None:
    before = entries(chat_home)
    proc = subprocess.Popen(
        cli("--ledger", chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
            "sft", "--version", "1", "--", sys.executable, launcher / "launcher.py", launcher,
            "wait"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        for _ in range(12_000):  # until both workers run (admission first), or the run ends
            if proc.poll() is not None or all(
                (launcher / f"worker{i}.pid").exists() for i in range(2)
            ):
                break
            time.sleep(0.01)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)  # what a terminal sends on Ctrl-C
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert out == ""
    assert err.splitlines()[-1] == "FAIL: interrupted; nothing was recorded or half-written"
    # The launcher does not pass signals on: its workers got Ctrl-C from the process group.
    assert (launcher / "launcher.signal").read_text() == "INT"
    assert (launcher / "worker0.signal").read_text() == "SIGINT"
    assert (launcher / "worker1.signal").read_text() == "SIGINT"
    assert entries(chat_home) == before
    _no_leftovers(chat_home)


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie awaiting its new parent's wait counts)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except (OSError, IndexError):
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_command_whose_trajledger_is_killed_is_stopped(chat_home: Path, tmp_path: Path) -> None:
    """SIGKILL to trajledger runs no handler of its: before, COMMAND (in a process group of its
    own) ran on, writing to an output directory nothing would read (out38's Left). The kernel
    now sends it SIGTERM (``PR_SET_PDEATHSIG``)."""
    pidfile = tmp_path / "command.pid"
    code = (f"import os, pathlib, time; p = pathlib.Path({str(pidfile)!r}); "
            "p.with_suffix('.tmp').write_text(str(os.getpid())); "
            "p.with_suffix('.tmp').rename(p); time.sleep(600)")  # fmt: skip
    proc = subprocess.Popen(
        cli("--ledger", chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
            "sft", "--version", "1", "--", sys.executable, "-c", code),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    pid = None
    try:
        for _ in range(12_000):  # until COMMAND runs (admission first), or the run ends
            if proc.poll() is not None or pidfile.exists():
                break
            time.sleep(0.01)
        assert proc.poll() is None and pidfile.exists()
        pid = int(pidfile.read_text())
        proc.kill()
        proc.wait()
        for _ in range(300):  # a generous wait: 30 s
            if _gone(pid):
                break
            time.sleep(0.1)
        assert _gone(pid), "COMMAND outlived its trajledger"
    finally:
        if proc.poll() is None:
            proc.kill()
        if pid is not None and not _gone(pid):
            os.killpg(pid, signal.SIGKILL)


DIST = textwrap.dedent(
    """
    import os, pathlib
    rank, world = os.environ.get("RANK", "0"), os.environ.get("WORLD_SIZE", "1")
    out = pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"])
    (out / f"rank{rank}.txt").write_text(f"rank {rank} of {world}\\n")
    """
)


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_real_launchers_work_as_the_command(
    runner: CliRunner, chat_home: Path, tmp_path: Path, launcher: str
) -> None:
    # Installed or not, without importing torch here (2 CPU-s): the launchers import it.
    torch = importlib.util.find_spec("torch")
    if torch is None or torch.origin is None:
        pytest.skip("the train extra is not installed")
    script = tmp_path / "dist.py"
    script.write_text(DIST)
    if launcher == "torchrun":
        if not (Path(torch.origin).parent / "distributed" / "run.py").is_file():
            pytest.skip("this torch has no torch.distributed.run")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", "2", str(script)]
        want = ["rank0.txt", "rank1.txt"]
    else:
        if importlib.util.find_spec("accelerate") is None:
            pytest.skip("accelerate is not installed")
        command = [sys.executable, "-m", "accelerate.commands.launch", "--cpu",
                   "--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no",
                   "--dynamo_backend", "no", str(script)]
        want = ["rank0.txt"]
    r = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
            launcher, "--version", "1", "--", *command)
    assert r.exit_code == 0, r.output
    from trajledger.ledger.artifacts import batch_files

    assert sorted(batch_files(Ledger.open(chat_home), r.stdout.strip())) == want
    pred = provenance(chat_home, r.stdout.strip())
    assert pred["buildDefinition"]["externalParameters"]["command"] == command


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
def test_a_server_the_command_leaves_running_is_stopped_and_named(
    runner: CliRunner, chat_home: Path, tmp_path: Path
) -> None:
    """rev39: a process the command started outside its process group (a daemon's
    ``setsid``, a TensorBoard left behind) ran on after the run, free to change the outputs
    once hashed. It is stopped before the outputs are recorded, and the run says so."""
    import warnings

    pidfile = tmp_path / "server.pid"
    server = (f"import os, time; os.setsid(); open({str(pidfile)!r}, 'w').write(str(os.getpid()))"
              "; time.sleep(600)")
    code = textwrap.dedent(
        f"""
        import os, pathlib, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", {server!r}], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        while not pathlib.Path({str(pidfile)!r}).exists() or not \\
                pathlib.Path({str(pidfile)!r}).read_text():
            time.sleep(0.01)
        (pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"]) / "w.bin").write_bytes(b"w")
        """
    )
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        r = run(runner, chat_home, "train", "--dataset", "chat@1", "--key", "trainer", "--name",
                "sft", "--version", "1", "--", sys.executable, "-c", code)
    pid = int(pidfile.read_text())
    alive = Path(f"/proc/{pid}").exists() and b") Z " not in Path(f"/proc/{pid}/stat").read_bytes()
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "the server the command left running still runs"
    assert r.exit_code == 0, r.output
    assert f"WARNING: stopped 1 process(es) the command left running outside its process " \
           f"group: {pid} (python" in r.stderr, r.stderr
