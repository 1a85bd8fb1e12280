"""A Parquet footer's total of rows is a field of its own: pyarrow decodes each row group's
rows and reads the total for nothing (rev46 finding 1). Every step bound read from it
(`TRAJLEDGER_MAX_STEPS` at the admission gate, on a stored step file, on an input) passed a
crafted footer stating 1 row over row groups of any size; the bound now counts the row
groups' rows (`parquet_read.stated_steps`). docs/SECURITY.md, "Review of 2026-12-07,
thirty-fourth round (rev46)"."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from testkit import understated

from trajledger import Ledger
from trajledger.ledger.episode_features import parquet_batches
from trajledger.ledger.record import record_files
from trajledger.ledger.rollouts.chunks import StepLimitError
from trajledger.ledger.rollouts.parquet_read import read_parquet, stated_steps
from trajledger.ledger.rollouts.readers import iter_rollout_chunks
from trajledger.runner.admission import AdmittedBatch, DataRefusedError, admit
from trajledger.verify import predicates


def test_a_crafted_footer_understates_what_pyarrow_reads() -> None:
    """The premise: the total says 1, the row groups 100, and 100 rows are decoded."""
    out = io.BytesIO()
    pq.write_table(pa.table({"x": list(range(100))}), out, row_group_size=30)
    crafted = understated(out.getvalue())
    meta = pq.read_metadata(pa.BufferReader(crafted))
    assert meta.num_rows == 1 and read_parquet(crafted).num_rows == 100
    assert stated_steps(meta) == 100


def _steps(n: int) -> pa.Table:
    return pa.table({
        "episode_id": ["e0"] * n,
        "step": pa.array(range(n), pa.int64()),
        "obs": [[0.0]] * n,
        "action": [[0.0]] * n,
        "reward": [1.0] * n,
        "terminated": [False] * (n - 1) + [True],
        "truncated": [False] * n,
    })  # fmt: skip


def test_a_stored_step_file_and_an_input_are_held_to_their_row_groups_rows(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = io.BytesIO()
    pq.write_table(_steps(50), out, row_group_size=20)
    crafted = understated(out.getvalue())
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", "49")
    with pytest.raises(StepLimitError, match="a step file holds 50 steps, more than the 49"):
        next(parquet_batches(crafted, ["reward"]))
    path = tmp_path / "in.parquet"
    path.write_bytes(crafted)
    with pytest.raises(StepLimitError, match="holds 50 steps, more than one batch may"):
        next(iter_rollout_chunks(path))


def signed(ledger: Ledger, honest: AdmittedBatch, tmp_path: Path, name: str, steps: bytes,
           episodes: bytes) -> str:
    """A vendor's batch of these files under ``honest``'s predicate, in dataset ``name``@1,
    approved: its reference."""
    files = {}
    for path, data in (("steps.parquet", steps), ("episodes.parquet", episodes)):
        files[path] = tmp_path / f"{name}-{path}"
        files[path].write_bytes(data)
    predicate = {k: v for k, v in honest.predicate.to_json().items()
                 if k not in ("manifest", "features")}
    batch = record_files(ledger, files, ledger.keys.signer("vendor"), predicates.ROLLOUT_BATCH,
                         predicate, name=name)
    ledger.create_dataset(name, "1", "train", [batch.digest], key="vendor")
    ledger.approve(f"{name}@1", key="approver")
    return f"{name}@1"


def test_a_signed_batch_whose_footer_understates_its_steps_is_refused_at_the_gate(
    chat_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A vendor signs a batch whose steps.parquet states 1 step in its footer's total over
    row groups of all of them: under a buyer's limit below them, the gate refuses it from the
    footer, naming the steps its row groups hold, as it refuses the honest batch."""
    ledger = Ledger.open(chat_home)
    honest = admit(ledger, "chat@1", ledger.policy()).batches[0]
    steps = honest.steps.num_rows
    ref = signed(ledger, honest, tmp_path, "understated",
                 understated(honest.files["steps.parquet"]), honest.files["episodes.parquet"])
    assert admit(ledger, ref, ledger.policy()).batches[0].steps.num_rows == steps
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", str(steps - 1))
    with pytest.raises(DataRefusedError) as refused:
        admit(ledger, ref, ledger.policy())
    assert (f"holds {steps:,} steps, more than the {steps - 1:,} a batch may here "
            "(TRAJLEDGER_MAX_STEPS), refused before reading them") in str(refused.value)


def test_a_whole_read_is_held_to_the_step_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """`read_parquet` (a suite's batch at eval, an episode file, an export) refuses a file of
    more rows than a batch may hold, crafted footer or not, naming it (rev46 finding 2)."""
    out = io.BytesIO()
    pq.write_table(_steps(50), out, row_group_size=20)
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", "49")
    for data in (out.getvalue(), understated(out.getvalue())):
        with pytest.raises(StepLimitError, match=r"^steps.parquet of suite batch x holds 50 "
                                                 r"rows, more than the 49 steps a batch may"):
            read_parquet(data, name="steps.parquet of suite batch x")
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", "50")
    assert read_parquet(understated(out.getvalue())).num_rows == 50


def test_a_step_limit_of_any_length_is_a_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A limit of thousands of digits (past `int`'s 4,300) is no bug (rev46 finding 3: exit 4,
    'ValueError: Exceeds the limit'): past int64 it is int64's largest; zeros are no limit."""
    from trajledger.ledger.rollouts.chunks import max_steps

    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", "9" * 5000)
    assert max_steps() == (1 << 63) - 1
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", "0" * 5000 + "12")
    assert max_steps() == 12
    for bad in ("0" * 5000, "000"):
        monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", bad)
        with pytest.raises(StepLimitError, match="is not a number of steps"):
            max_steps()


def test_a_signed_batch_of_more_episodes_than_the_limit_is_refused_at_the_gate(
    chat_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The gate bounded a batch's steps.parquet, not its episodes.parquet, read whole beside it
    (rev46 finding 2): an episode file of more rows than the limit is refused, named, before
    it is decoded."""
    ledger = Ledger.open(chat_home)
    honest = admit(ledger, "chat@1", ledger.policy()).batches[0]
    steps = honest.steps.num_rows
    many = pa.concat_tables([honest.episodes] * (steps // honest.episodes.num_rows + 1))
    out = io.BytesIO()
    pq.write_table(many, out)
    ref = signed(ledger, honest, tmp_path, "many", honest.files["steps.parquet"], out.getvalue())
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", str(steps))
    with pytest.raises(DataRefusedError) as refused:
        admit(ledger, ref, ledger.policy())
    assert (f"schema: episodes.parquet holds {many.num_rows:,} rows, more than the {steps:,} "
            "steps a batch may here (TRAJLEDGER_MAX_STEPS), refused before reading them"
            ) in str(refused.value)


def test_an_export_over_the_step_limit_names_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An export reads a batch's files whole: held to the limit (finding 2), the file named."""
    from trajledger.ledger.rollouts.export import export_rollouts

    out = io.BytesIO()
    pq.write_table(_steps(50), out)
    monkeypatch.setenv("TRAJLEDGER_MAX_STEPS", "49")
    with pytest.raises(StepLimitError, match=r"^the batch's steps.parquet holds 50 rows"):
        export_rollouts(out.getvalue(), out.getvalue(), {}, tmp_path / "out", "parquet")
    assert not (tmp_path / "out").exists()
