"""`record_batch` with the reader's workers hands them its private workdir for their spills
(rec47 finding 3: `ReaderOptions.spill` existed, and `record_batch` passed none, so a long
conversation's spill went under the system's temporary directory)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trajledger import Ledger
from trajledger.ledger.artifacts import record_batch, register_environment
from trajledger.ledger.rollouts import readers
from trajledger.ledger.rollouts.chunks import ReaderOptions


def test_the_workers_spill_in_the_recorders_workdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger.open(Ledger.init(tmp_path / "home", origin="test/workers-spill").root)
    key = ledger.keys.create("vendor", encrypt=False)
    register_environment(ledger, "chat", "1", key)
    chat = tmp_path / "chat.jsonl"
    chat.write_text("".join(json.dumps({"episode_id": f"c{n}", "messages": [
        {"role": "user", "content": f"hello {n}"}]}) + "\n" for n in range(5)))
    given: list[str | None] = []
    real = readers.iter_rollout_chunks

    def noting(*a: Any, options: ReaderOptions | None = None, **kw: Any) -> Any:
        given.append(options.spill if options is not None else None)
        assert options is not None and options.spill is not None
        assert Path(options.spill).is_dir()  # the workdir, there while the batch is read
        return real(*a, options=options, **kw)

    monkeypatch.setattr(readers, "iter_rollout_chunks", noting)
    record_batch(ledger, [chat], env="chat@1", policy="p", signer=key,
                 options=ReaderOptions(workers=2))
    [spill] = given
    assert spill is not None and Path(spill).is_relative_to(ledger.scratch)
    assert not Path(spill).exists()  # removed with the workdir
