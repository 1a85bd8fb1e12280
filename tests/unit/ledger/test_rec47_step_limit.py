"""The most steps a batch may hold (rec47 finding 2): a Parquet file of kilobytes holds
millions of valid steps, and nothing bounded the work a batch could cost; honest constant
data compresses as well, so the bound is on steps (``TRAJLEDGER_MAX_STEPS``, default
`MAX_STEPS`), not on steps per byte.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajledger.ledger.episode_features import parquet_batches
from trajledger.ledger.rollouts import write_steps_parquet
from trajledger.ledger.rollouts.chunks import MAX_STEPS, StepLimitError, max_steps
from trajledger.ledger.rollouts.readers import iter_rollout_chunks


def _steps(episodes: int, length: int = 10, prefix: str = "e") -> pa.Table:
    n = episodes * length
    return pa.table({
        "episode_id": [f"{prefix}{i // length}" for i in range(n)],
        "step": pa.array([i % length for i in range(n)], pa.int64()),
        "obs": [[0.0, 1.0]] * n,
        "action": [[0.0]] * n,
        "reward": [1.0] * n,
        "terminated": [i % length == length - 1 for i in range(n)],
        "truncated": [False] * n,
    })  # fmt: skip


def test_a_batch_over_the_limit_is_refused_and_no_more_of_it_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """100 batches of 10 steps under a limit of 30: refused (`StepLimitError`, a FormatError:
    exit 1) after at most a few batches were read, nothing left; at 1,000 the same batches are
    written."""
    read = [0]

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(100):
            read[0] += 1
            yield _steps(1, prefix=f"b{i}-").to_batches()[0]

    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", "30")
    with pytest.raises(StepLimitError, match=r"over 30 steps.*TRAJLEDGER_MAX_STEPS"):
        write_steps_parquet(batches(), tmp_path / "steps.parquet", subject="in.parquet")
    assert read[0] <= 8, f"{read[0]} batches read"
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", "1_000")
    stats = write_steps_parquet(batches(), tmp_path / "steps.parquet")
    assert stats.num_steps == 1_000


def test_the_limits_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAJLEDGER_MAX_STEPS", raising=False)
    assert max_steps() == MAX_STEPS == 1 << 24
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", " 50000000 ")
    assert max_steps() == 50_000_000
    for bad in ("0", "-5", "1e9", "many", "٣"):
        monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", bad)
        with pytest.raises(StepLimitError, match="is not a number of steps"):
            max_steps()


def test_a_stored_step_file_over_the_limit_is_refused_from_its_footer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What reads a recorded or imported batch's steps (features at the gate, windows, the
    audit index: `parquet_batches`) refuses a file whose footer states more steps than the
    limit, before reading any."""
    path = tmp_path / "steps.parquet"
    pq.write_table(_steps(5), path)
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", "49")
    with pytest.raises(StepLimitError, match="holds 50 steps, more than the 49"):
        next(parquet_batches(path, ["episode_id", "obs"]))
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", "50")
    assert sum(b.num_rows for b in parquet_batches(path.read_bytes(), ["episode_id"])) == 50


def test_validate_says_so_in_one_line_and_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(_steps(4), path)
    env = {**os.environ, "TRAJLEDGER_MAX_STEPS": "39", "HOME": str(tmp_path)}
    run = subprocess.run([sys.executable, "-m", "trajledger", "validate", str(path)],
                         capture_output=True, text=True, env=env, check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = (run.stdout + run.stderr).strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0]
    assert lines[0].startswith(f"FAIL: {path}: holds 40 steps, more than one batch may (39: ")
    assert "set TRAJLEDGER_MAX_STEPS to the steps it holds" in lines[0]


def test_a_parquet_input_over_the_limit_is_refused_from_its_footer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`record`'s Parquet input whose footer states more steps than the limit: refused by the
    reader before any step is read (it was read up to the limit: 32 CPU-s at the default)."""
    path = tmp_path / "in.parquet"
    pq.write_table(_steps(4), path)
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", "39")
    with pytest.raises(StepLimitError, match=r"in.parquet: holds 40 steps, more than one batch"):
        next(iter_rollout_chunks(path))
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", "40")
    assert sum(c.steps.num_rows for c in iter_rollout_chunks(path)) == 40
