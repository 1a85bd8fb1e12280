"""End to end: a lineage check made before a record is made again under the log's lock when
another writer appended meanwhile (lock24).

On test_approve_lineage.py's ledger (test_evaluations.py's CartPole ledger, train@1 approved, a
second batch ``b2``). ``approve``, ``dataset create``, ``record --policy CK`` and ``rollout``
verified a lineage, then appended: a revocation appended between the check and the append (by
another process, a few milliseconds; for ``record``, the whole time its input is read; for
``rollout``, the episodes' playing time) was not seen, and the approval or batch landed over
revoked data (approve23's and rev23's Left). The seam, deterministic: the first lineage
verification of the command (`LineageVerifier.verify`) returns, then another writer appends
the revocation, before the command takes the log's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_approve_lineage import home, home_template, lines, steps_file  # noqa: F401 (fixtures)
from test_runner_cli import run

from trajledger import Ledger
from trajledger.verify.lineage import LineageVerifier
from trajledger.verify.log_entry import LogEntry


@pytest.fixture
def after_first_check(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[], Any]],
                                                                              None]]:
    """``after_first_check(action)``: ``action`` runs once, right after the command's first
    lineage verification returns (another writer, between the check and the append)."""
    pending: list[Callable[[], Any]] = []
    real = LineageVerifier.verify

    def verify(self: LineageVerifier, *args: Any, **kwargs: Any) -> Any:
        report = real(self, *args, **kwargs)
        while pending:
            pending.pop()()
        return report

    monkeypatch.setattr(LineageVerifier, "verify", verify)
    yield pending.append


def entries(at: Path) -> list[str]:
    """The kinds of the log's entries, in order."""
    ledger = Ledger.open(at)
    return [LogEntry.from_bytes(ledger.log.entry(i)).kind for i in range(ledger.log.size)]


def test_a_revocation_appended_after_approve_s_check_is_seen(
        runner: CliRunner, home: Path, after_first_check: Callable[[Callable[[], Any]], None],  # noqa: F811
) -> None:
    before = entries(home)
    after_first_check(lambda: Ledger.open(home).revoke("b2", key="vendor", reason="pii"))
    r = run(runner, home, "approve", "b2", "--key", "approver")
    got = lines(r)
    assert r.exit_code == 1, r.output
    assert got[0] == ("FAIL: rollout-batch b2: its lineage fails, 1 problem(s); nothing was "
                      "approved"), got
    assert "revoked: pii" in got[1], got
    assert entries(home) == [*before, "revocation"]  # no approval after it


@pytest.mark.parametrize(("command", "consequence"), [
    ("record", "nothing was recorded"),
    ("rollout", "the episodes played were not recorded"),
])
def test_a_revocation_appended_after_a_batch_s_check_is_seen(
        runner: CliRunner, home: Path, tmp_path: Path, command: str, consequence: str,  # noqa: F811
        after_first_check: Callable[[Callable[[], Any]], None]) -> None:
    """The batch names checkpoint bc@1 as its policy (``record --policy CK``, ``rollout``):
    bc@1's training data is revoked after the check."""
    ledger = Ledger.open(home)
    ck = ledger.train("train@1", key="trainer", name="bc", version="1", seed=1).digest
    before = entries(home)
    after_first_check(lambda: Ledger.open(home).revoke("train@1", key="approver", reason="pii"))
    args = ([command, steps_file(tmp_path), "--policy", ck] if command == "record" else
            [command, "--checkpoint", "bc@1", "--episodes", "2"])
    r = run(runner, home, *args, "--env", "cartpole@1", "--key", "vendor")
    got = lines(r)
    assert r.exit_code == 1, r.output
    assert got[0] == f"FAIL: checkpoint bc@1: its lineage fails, 1 problem(s); {consequence}", got
    assert "dataset train@1" in got[1] and "revoked: pii" in got[1], got
    assert entries(home) == [*before, "revocation"]


def test_a_revocation_appended_after_dataset_create_s_check_is_warned_of(
        runner: CliRunner, home: Path,  # noqa: F811
        after_first_check: Callable[[Callable[[], Any]], None]) -> None:
    after_first_check(lambda: Ledger.open(home).revoke("b2", key="vendor", reason="pii"))
    r = run(runner, home, "dataset", "create", "again", "--version", "1", "--split", "train",
            "--batch", "b2", "--key", "vendor")
    assert r.exit_code == 0, r.output
    warned = [x for x in lines(r) if x.startswith("WARNING: rollout-batch b2")]
    assert len(warned) == 1 and "revoked: pii" in warned[0], lines(r)


def test_a_log_that_did_not_grow_is_not_judged_again(
        runner: CliRunner, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The guard: with no writer between, the approval is recorded after one lineage check."""
    calls: list[str] = []
    real = LineageVerifier.verify

    def verify(self: LineageVerifier, digest: str) -> Any:
        calls.append(digest)
        return real(self, digest)

    monkeypatch.setattr(LineageVerifier, "verify", verify)
    r = run(runner, home, "approve", "b2", "--key", "approver")
    assert r.exit_code == 0, r.output
    assert entries(home)[-1] == "approval"
    assert len(calls) == 1, calls


# -- record --env E / --evaluator V: what the batch names must verify -------------------------


def prepared(home: Path, revoked: str | None) -> Ledger:  # noqa: F811
    """``home`` with a second environment cartpole-b@1 and an evaluator judge@1, the one named
    by ``revoked`` (``environment``, ``evaluator``) revoked."""
    ledger = Ledger.open(home)
    ledger.register_environment("cartpole-b", "1", key="vendor", gym_id="CartPole-v1")
    ledger.register_evaluator("judge", "1", "deterministic", key="vendor")
    if revoked is not None:
        ledger.revoke("cartpole-b@1" if revoked == "environment" else "judge@1", key="vendor",
                      reason="wrong physics")
    return ledger


@pytest.mark.parametrize("revoked", ["environment", "evaluator", None])
def test_a_batch_in_a_revoked_environment_or_by_a_revoked_evaluator_is_not_recorded(
        runner: CliRunner, home: Path, tmp_path: Path, revoked: str | None) -> None:  # noqa: F811
    """The batch names its environment and evaluator: with either revoked it failed from its
    first day (`verify BATCH`), exit 0, as a batch of a failing ``--policy CK`` did."""
    prepared(home, revoked)
    before = entries(home)
    r = run(runner, home, "record", steps_file(tmp_path), "--env", "cartpole-b@1",
            "--evaluator", "judge@1", "--policy", "random", "--key", "vendor")
    got = lines(r)
    if revoked is None:
        assert r.exit_code == 0, r.output
        return
    assert r.exit_code == 1, r.output
    ref = "cartpole-b@1" if revoked == "environment" else "judge@1"
    assert got[0] == (f"FAIL: {revoked} {ref}: its lineage fails, 1 problem(s); nothing was "
                      "recorded"), got
    assert "revoked: wrong physics" in got[1], got
    assert len(got) == 2, got
    assert entries(home) == before
