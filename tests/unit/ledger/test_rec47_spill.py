"""Where the parallel reader's workers spill a long episode's features (rec47 finding 3): the
recorder's private workdir (`ReaderOptions.spill`), cleaned with it, as the features of the row
groups (feat46) and the episode table's returns (ep46) are; a worker put them under the
system's temporary directory (`record` of a chat file of 32 MiB or more with a conversation
of over 65,536 messages: ``/tmp/trajledger-episode-…``, checked with ``strace``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from trajledger.ledger.batch_features import whole_episode_features
from trajledger.ledger.rollouts.chunks import ReaderOptions
from trajledger.ledger.rollouts.readers import iter_rollout_chunks

NOTE = "REC47_SPILL_NOTE"


def noting_features(steps: Any) -> Any:
    """`whole_episode_features`, noting in the file ``$REC47_SPILL_NOTE`` each directory it
    makes (run in a reader worker: a module-level function, the environment inherited)."""
    made: list[str] = []
    real = tempfile.mkdtemp

    def note(*args: Any, **kwargs: Any) -> str:
        made.append(real(*args, **kwargs))
        return made[-1]

    tempfile.mkdtemp = note  # type: ignore[assignment]
    try:
        return whole_episode_features(steps)
    finally:
        tempfile.mkdtemp = real
        with open(os.environ[NOTE], "a", encoding="utf-8") as f:
            f.writelines(f"{d}\n" for d in made)


def test_the_workers_spill_goes_to_the_recorders_workdir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A conversation of 70,000 messages (over `SPILL_STEPS`) read by two workers: its spill
    directory made under the workdir given, and removed; none under the system's."""
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"w{i % 50} x"}
                for i in range(70_000)]
    path = tmp_path / "chat.jsonl"
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps({"messages": messages[:4]}) + "\n")
        f.write(json.dumps({"messages": messages}) + "\n")
    work, system = tmp_path / "work", tmp_path / "system"
    work.mkdir()
    system.mkdir()
    note = tmp_path / "note"
    note.touch()
    monkeypatch.setenv(NOTE, str(note))
    monkeypatch.setenv("TMPDIR", str(system))  # (the workers' system temporary directory)
    options = ReaderOptions(workers=2, features=noting_features, spill=str(work))
    chunks = list(iter_rollout_chunks(path, "chat-jsonl", options=options, process_min_bytes=0))
    assert sum(c.steps.num_rows for c in chunks) == 70_004
    assert any(c.features is not None for c in chunks)
    made = note.read_text().split()
    assert made, "no long episode spilled"
    assert all(Path(d).parent == work for d in made), made
    assert not list(work.iterdir()) and not list(system.iterdir())
