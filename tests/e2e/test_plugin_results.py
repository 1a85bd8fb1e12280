"""What a trainer plug-in hands back is checked before anything is written (trn35 finding 6,
`runner.trainers.check_result`). Before: a file named ``../escape.bin`` was written into the
ledger's ``tmp/`` (and left there), one named by an absolute path was written there, outside
the ledger, and only then did the record refuse the name; a plug-in returning no file recorded
an empty checkpoint (``OK: checkpoint recorded``, exit 0); text for bytes was a bug (exit 4);
``a`` beside ``a/b`` an operational error naming a temporary path. Each is now refused with one
line naming the plug-in, exit 3 (a plug-in that cannot be used), nothing written or recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_evaluations import log_size
from test_train_command import run

from trajledger.runner import trainers
from trajledger.runner.trainers import TrainResult


@pytest.mark.parametrize(("files", "problem"), [
    ({"../escape.bin": b"x"}, "file name '../escape.bin': '../escape.bin' has an empty, '.' or "
     "'..' segment"),
    ({"ABSOLUTE": b"x"}, "must be a relative POSIX path"),
    ({"a": b"", "a/b": b""}, "file name 'a' is also a directory of another file"),
    ({"w.bin": "text"}, "file 'w.bin' is a str, want bytes"),
    ({}, "returned no file: there is no checkpoint to record"),
])
def test_a_plugins_files_are_checked_before_anything_is_written(
    runner: CliRunner, chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    files: dict[str, Any], problem: str,
) -> None:
    outside = tmp_path / "outside.bin"
    files = {str(outside) if k == "ABSOLUTE" else k: v for k, v in files.items()}

    class Fake:
        name = "fake"

        def train(self, data: Any, config: Any, seed: int) -> TrainResult:
            return TrainResult(files=files)

    monkeypatch.setattr(trainers, "load_trainer", lambda _name: Fake())
    size = log_size(chat_home)
    r = run(runner, chat_home, "train", "--dataset", "chat@1", "--trainer", "fake", "--key",
            "trainer", "--name", "x", "--version", "1")
    assert r.exit_code == 3, r.output
    assert r.stderr.startswith("FAIL: trainer 'fake': ") and problem in r.stderr
    assert r.stderr.endswith("; nothing was recorded\n")
    assert log_size(chat_home) == size
    assert not outside.exists() and not list(chat_home.rglob("escape.bin"))
