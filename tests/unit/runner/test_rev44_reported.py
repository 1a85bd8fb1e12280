"""rev44's findings in the runner (thirty-second round): an attack on the thirty-first."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from trajledger.ledger.errors import LedgerError
from trajledger.runner.command import run_command
from trajledger.runner.suite_contamination import training_batches
from trajledger.verify import predicates
from trajledger.verify.lineage import Record


def _dataset(name: str, batches: tuple[str, ...]) -> Record:
    """A verified train dataset's record, as `training_batches` reads it."""
    ds = object.__new__(predicates.Dataset)
    for field, value in (("split", "train"), ("name", name), ("version", 1),
                         ("batches", batches)):
        object.__setattr__(ds, field, value)
    rec = object.__new__(Record)
    object.__setattr__(rec, "predicate", ds)
    return rec


class _Chain:
    """A walked lineage: checkpoint i continues from i + 1, each trained on dataset ``d``
    (continued training), the last on ``e`` too; ``reads`` counts the dataset records read."""

    def __init__(self, n: int, loop: bool = False) -> None:
        self.cks = [f"sha256:{i:064x}" for i in range(n)]
        self.loop, self.reads = loop, 0
        self.records = {"d": _dataset("d", ("b1", "b2")), "e": _dataset("e", ("b3",))}

    def dependencies(self, ck: str) -> list[SimpleNamespace]:
        i = self.cks.index(ck)
        deps = [SimpleNamespace(role="dataset", digest="d")] * 2  # named twice
        if i + 1 < len(self.cks):
            deps += [SimpleNamespace(role="base-checkpoint", digest=self.cks[i + 1])] * 2
        else:
            deps.append(SimpleNamespace(role="dataset", digest="e"))
            if self.loop:  # the last names the first as its base: a loop of records
                deps.append(SimpleNamespace(role="base-checkpoint", digest=self.cks[0]))
        return deps

    def identity_record(self, digest: str, kind: str) -> Record:
        self.reads += 1
        return self.records[digest]


def test_a_long_chain_of_continued_training_reads_each_dataset_once() -> None:
    """rev44 finding 1: `training_batches` read one dataset record (and went through its
    batches) at every generation of a chain of continued training, and tested each base
    checkpoint against the list of the lineage: quadratic in the chain's length (20,000
    generations: 2.85 CPU-s for the walk alone, 0.06 now)."""
    chain = _Chain(300)
    assert training_batches(chain, chain.cks[0]) == {
        "b1": ["train d@1"], "b2": ["train d@1"], "b3": ["train e@1"]}
    assert chain.reads == 2  # d and e, once each (1,200 before: each named twice)


def test_a_loop_of_base_checkpoints_ends_with_every_dataset() -> None:
    chain = _Chain(5, loop=True)
    assert set(training_batches(chain, chain.cks[2])) == {"b1", "b2", "b3"}
    assert chain.reads == 2


def test_a_command_that_cannot_start_leaves_no_kept_log(tmp_path: Path) -> None:
    """rev44 finding 2: `run_command(keep_logs=)` created both logs before COMMAND started
    (194aadb1) and, when it could not start (not on PATH), closed them but left them: the next
    run into the same directory was refused ('stdout.log: ... it already exists')."""
    logs = tmp_path / "logs"
    for _ in range(2):  # the second is refused for the command alone, as the first
        with pytest.raises(LedgerError, match=r"cannot be started: .*; is it installed"):
            run_command([str(tmp_path / "no-such-command")], env=dict(os.environ),
                        keep_logs=logs)
        assert sorted(os.listdir(logs)) == []
