"""What a run records is what trajledger read (trn35 findings 1 to 3, `runner.settled`).

A command (`train -- COMMAND`, `eval -- COMMAND`) runs as the user, and a process it started
outside its process group with its output pipes closed is not stopped when it exits. Before
trn35, three things it could do were recorded as OK (exit 0) and verified:

1. replace a kept log (`--keep-logs`: `$TRAJLEDGER_OUTPUT_DIR/../logs/stdout.log`) with other
   text: the checkpoint's `trajledger-run/stdout.log` held it, while the signed provenance's
   `stdout` byproduct, which names that file, stated the digest of what the command printed;
2. rewrite `results.json` after trajledger parsed it: the evaluation's predicate (its tests,
   result and success rate, from the parsed bytes) said PASSED of a stored results file that
   failed every episode;
3. keep writing an output file (or add one) while the files were hashed into the store: the
   checkpoint held a mix of the file's states, and `--output DIR` kept other bytes than those
   recorded.

Each is now refused, exit 1, nothing recorded. The writer that races the recording is
simulated deterministically: the store's copy of each file is followed by the change (the
real case is a process the command left running; its timing cannot be a test's).
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_evaluations import EVALUATE, evals_template, home, log_size  # noqa: F401
from test_runner_cli import expect, run

FORGE_LOG = textwrap.dedent(
    """
    import os, pathlib
    out = pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"])
    (out / "w.bin").write_bytes(b"weights")
    print("what the command printed", flush=True)
    kept = out.parent / "logs" / "stdout.log"
    kept.unlink()
    kept.write_text("a forged log\\n")
    """
)


def _train(runner: CliRunner, ledger: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
           text: str, *options: str | Path) -> Any:
    """`train -- python SCRIPT` of ``text``, with ``options``, from ``tmp_path``."""
    script = tmp_path / "script.py"
    script.write_text(text)
    monkeypatch.chdir(tmp_path)
    return run(runner, ledger, "train", "--dataset", "chat@1", "--key", "trainer", "--name", "sft",
               "--version", "1", *options, "--", sys.executable, script)


def test_a_kept_log_replaced_by_the_command_is_refused(
    runner: CliRunner, chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = log_size(chat_home)
    r = _train(runner, chat_home, tmp_path, monkeypatch, FORGE_LOG, "--keep-logs")
    expect(r, 1)
    assert r.stderr.splitlines()[-1].startswith(
        "FAIL: trajledger-run/stdout.log: stored as sha256:")
    assert ("but trajledger hashed sha256:" in r.stderr
            and "the file was replaced after that; nothing was recorded" in r.stderr)
    assert log_size(chat_home) == size


def test_an_evaluations_kept_log_replaced_by_the_command_is_refused(
    runner: CliRunner, home: Path, tmp_path: Path  # noqa: F811
) -> None:
    script = tmp_path / "evaluate.py"
    script.write_text(EVALUATE + FORGE_LOG.replace('(out / "w.bin").write_bytes(b"weights")', ""))
    size = log_size(home)
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
            "--keep-logs", "--", sys.executable, script, "results-only")
    expect(r, 1)
    assert "FAIL: trajledger-run/stdout.log: stored as sha256:" in r.stderr
    assert log_size(home) == size


def _after_each_copy(monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    """Run ``change(path)`` after the store copied ``path`` (a writer racing the recording)."""
    from trajledger.ledger.store import ObjectStore

    put = ObjectStore.put_file

    def put_then_change(self: ObjectStore, path: Any, **kw: Any) -> Any:
        got = put(self, path, **kw)
        change(Path(path))
        return got

    monkeypatch.setattr(ObjectStore, "put_file", put_then_change)


def test_results_json_rewritten_after_it_was_parsed_is_refused(
    runner: CliRunner, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    from trajledger.runner import evaluate

    script = tmp_path / "evaluate.py"
    script.write_text(EVALUATE)
    parse = evaluate.Results.from_bytes

    def parsed_then_rewritten(data: bytes, suite: Any, what: str) -> Any:
        got = parse(data, suite, what)
        for out in (home / "tmp").rglob("output/results.json"):
            doc = json.loads(out.read_bytes())
            for e in doc["episodes"]:
                e["passed"] = False
            out.write_text(json.dumps(doc))
        return got

    monkeypatch.setattr(evaluate.Results, "from_bytes", staticmethod(parsed_then_rewritten))
    size = log_size(home)
    r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator", "--",
            sys.executable, script, "pass")
    expect(r, 1)
    assert "FAIL: results.json: stored as sha256:" in r.stderr
    assert log_size(home) == size


WRITE = textwrap.dedent(
    """
    import os, pathlib
    out = pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"])
    (out / "model.bin").write_bytes(b"0" * 1000)
    (out / "config.json").write_text("{}")
    """
)


@pytest.mark.parametrize(("change", "message"), [
    (lambda p: p.open("ab").write(b"x" * 100) if p.name == "config.json" else None,
     "FAIL: config.json: changed while it was recorded; a process the command started outside "
     "its process group (setsid, a daemon) may still write there: stop it, and run again; "
     "nothing was recorded"),
    (lambda p: (p.parent / "late.bin").write_bytes(b"late") if p.name == "model.bin" else None,
     "late.bin was added while the outputs were recorded; a process the command started "
     "outside its process group"),
])
def test_an_output_that_changes_while_it_is_recorded_is_refused(
    runner: CliRunner, chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    change: Any, message: str,
) -> None:
    _after_each_copy(monkeypatch, change)
    size = log_size(chat_home)
    r = _train(runner, chat_home, tmp_path, monkeypatch, WRITE, "--output", tmp_path / "out")
    expect(r, 1)
    assert message in r.stderr
    assert log_size(chat_home) == size


def test_outputs_that_hold_still_are_recorded(
    runner: CliRunner, chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expect(_train(runner, chat_home, tmp_path, monkeypatch, WRITE, "--keep-logs"), 0)


@pytest.mark.parametrize("keep", [[], ["--keep-logs"]])
def test_a_file_the_command_writes_under_trajledger_run_is_refused(
    runner: CliRunner, chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    keep: list[str],
) -> None:
    # trajledger-run/ holds trajledger's own files (the kept logs); without --keep-logs a
    # command could put a `trajledger-run/stdout.log` of its own making in the checkpoint,
    # where a reader (docs/trainers.md) looks for the log: recorded, exit 0, before trn35.
    text = WRITE + "(out / 'trajledger-run').mkdir()\n(out / 'trajledger-run' / 'stdout.log')" \
        ".write_text('all tests passed')\n"
    size = log_size(chat_home)
    r = _train(runner, chat_home, tmp_path, monkeypatch, text, *keep)
    expect(r, 3, "FAIL: the command wrote trajledger-run/stdout.log in its output directory, "
                 "where --keep-logs puts the logs (trajledger-run/); nothing was recorded\n")
    assert log_size(chat_home) == size


def test_a_directory_renamed_away_for_the_read_and_back_is_refused(
    runner: CliRunner, chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rev33 finding 3: each output's `lstat` was compared when listed, after the store read it
    # and under the log's lock: a writer that renamed the output directory away, put a file of
    # the same size at the path for the store's read, then renamed the directory back, left
    # the path's `lstat` as listed. The checkpoint recorded model.bin as b"1" * 1000, exit 0,
    # while --output kept b"0" * 1000. Now the file the store opens must be the one listed.
    import shutil

    from trajledger.ledger.store import ObjectStore

    put = ObjectStore.put_file

    def swapped_for_the_read(self: ObjectStore, path: Any, **kw: Any) -> Any:
        path = Path(path)
        if path.name != "model.bin":
            return put(self, path, **kw)
        away = path.parent.with_name("away")
        path.parent.rename(away)
        path.parent.mkdir()
        path.write_bytes(b"1" * 1000)
        try:
            return put(self, path, **kw)
        finally:
            shutil.rmtree(path.parent)
            away.rename(path.parent)

    monkeypatch.setattr(ObjectStore, "put_file", swapped_for_the_read)
    size = log_size(chat_home)
    one = WRITE.replace('(out / "config.json").write_text("{}")', "")  # (no other read)
    r = _train(runner, chat_home, tmp_path, monkeypatch, one, "--output", tmp_path / "out")
    expect(r, 1)
    # (the first FAIL line; a WARNING before it says what --output keeps: out56)
    first = next(x for x in r.stderr.splitlines() if x.startswith("FAIL: "))
    assert first.startswith("FAIL: model.bin: changed while it was recorded; a process the "
                            "command started outside its process group"), r.stderr
    assert log_size(chat_home) == size
    assert (tmp_path / "out" / "model.bin").read_bytes() == b"0" * 1000
