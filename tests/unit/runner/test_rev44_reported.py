"""rev44's findings in the runner (thirty-second round): an attack on the thirty-first."""

from __future__ import annotations

import os
import time
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


def test_the_look_for_files_written_elsewhere_is_bounded_within_one_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rev44 finding 3: `written_elsewhere` checked its bound after each directory, so one
    directory of many files (a data set of images beside the script) was read whole and every
    file stat'ed: 300,000 files 0.87 CPU-s, 15 x the bound of 20,000 entries. Counted here as
    the entries the directory listings gave."""
    from trajledger.runner.written import written_elsewhere

    for i in range(2_000):
        (tmp_path / f"img{i:05}.png").touch()
    read = 0
    scandir = os.scandir

    class Counted:
        def __init__(self, path: str) -> None:
            self.listing = scandir(path)

        def __enter__(self) -> Counted:
            return self

        def __exit__(self, *exc: object) -> None:
            self.listing.close()

        def __iter__(self) -> Counted:
            return self

        def __next__(self) -> os.DirEntry[str]:
            nonlocal read
            entry = next(self.listing)
            read += 1
            return entry

        def close(self) -> None:
            self.listing.close()

    monkeypatch.setattr(os, "scandir", Counted)
    assert written_elsewhere(tmp_path, time.time() + 60, skip=tmp_path / "ledger", most=100) == ""
    assert read <= 100, read  # 2,000 before


def test_the_look_for_files_written_elsewhere_names_each_on_the_one_line(
        tmp_path: Path) -> None:
    """A FIFO, a symbolic link loop and a directory it may not read neither stop nor end the
    look (held before); a name with a newline is shown escaped (the line stays one)."""
    from trajledger.runner.written import written_elsewhere

    since = time.time()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "loop").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop")
    (tmp_path / "shut").mkdir(mode=0)
    (tmp_path / "a\nFAIL: y").write_text("{}")
    said = written_elsewhere(tmp_path, since, skip=tmp_path / "ledger")
    assert "\n" not in said, said
    assert "it wrote a\\nFAIL: y, fifo, loop, … under" in said, said
