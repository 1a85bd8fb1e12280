"""What one command verifies more than once (ci47): the log's signed checkpoint.

A `verify` in process verifies the same checkpoint note with the same key four times: the log
reader's open (ledger/log/reader.py), its classification of the log's files (ledger/log/state.py),
the trust state's floor (ledger/trust_floor.py, once an object) and the verifier's trusted log
(verify/trusted_log.py): an Ed25519 verification of 0.2 to 0.3 ms each, in every command that
opens a log. The same bytes under the same key give the same answer: the ledger's handle
verifies them once (`ledger.log.checked.CheckedNotes`, shared by its log, its trust state and the
verifier over that state; walk48).
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import Any

import pytest
import testkit

from trajledger.runner.cli import main
from trajledger.verify import checkpoint


def test_a_verify_verifies_its_logs_checkpoint_once(
    quickstart_template: testkit.Template[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = testkit.copy_template(quickstart_template, tmp_path / "home")
    warm = testkit.new_runner().invoke(main, ["--ledger", str(home), "verify", "cartpole-bc@2"])
    assert warm.exit_code == 0, warm.output
    real = checkpoint.verify_checkpoint
    notes: list[bytes] = []

    def counting(note: bytes, *args: Any, **kwargs: Any) -> Any:
        notes.append(note)
        return real(note, *args, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "verify_checkpoint", None) is real and module.__name__.startswith(
                "trajledger"):
            monkeypatch.setattr(module, "verify_checkpoint", counting)
    r = testkit.new_runner().invoke(main, ["--ledger", str(home), "verify", "cartpole-bc@2"])
    assert r.exit_code == 0, r.output
    assert notes, "no checkpoint verified: the spy missed the callers"
    assert max(collections.Counter(notes).values()) == 1, collections.Counter(notes).values()
