"""A long first use whose worker processes fail (`trust_rows.Workers`): the rows are still the
ones read in this process, and the reading still completes.

Found by review (issue 21): a worker killed while it derived rows (the out-of-memory killer, a
signal) made the whole first use fail with ``BrokenProcessPool`` (exit 4, "please report"),
and every later command read the log again and could fail the same way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trajledger import Ledger
from trajledger.ledger import home as home_module
from trajledger.ledger import trust_rows, trust_state
from trajledger.ledger.user_state import STATE_DIR_ENV


def _rows(home: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch
          ) -> dict[str, set[tuple[Any, ...]]]:
    monkeypatch.setenv(STATE_DIR_ENV, str(state_dir))
    state = Ledger.open(home).trust_state()
    try:
        assert state.size == Ledger.open(home).log.size
        return {t: state._rows(t) for t in trust_state._TABLES}
    finally:
        state.close()


def test_a_worker_killed_mid_reading_leaves_the_rows_to_this_process(
    chat_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alone = _rows(chat_home, tmp_path / "alone", monkeypatch)
    # Envelopes read by worker processes, runs of 2 entries; the first read in a worker
    # kills it (os._exit, as the out-of-memory killer would): the pool is then broken.
    monkeypatch.setattr(trust_state, "_PARALLEL_FROM", 1)
    monkeypatch.setattr(trust_state, "_CHUNK", 2)
    monkeypatch.setattr(trust_rows.Workers, "possible", staticmethod(lambda: True))
    flag = tmp_path / "killed"
    real = home_module.local_blob_reader

    def dying_reader(root: Path) -> Callable[[str], bytes | None]:
        read = real(root)

        def first_read_kills(digest: str) -> bytes | None:
            try:
                os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return read(digest)
            os._exit(9)

        return first_read_kills

    monkeypatch.setattr(home_module, "local_blob_reader", dying_reader)
    handed: list[int] = []
    derive = trust_rows.Workers.derive

    def counted(self: Any, entries: Any) -> Any:
        handed.append(len(entries))
        return derive(self, entries)

    monkeypatch.setattr(trust_rows.Workers, "derive", counted)
    assert _rows(chat_home, tmp_path / "killed-worker", monkeypatch) == alone
    assert flag.exists() and len(handed) > 2  # a worker did die, and the reading went on
