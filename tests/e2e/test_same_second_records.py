"""Records whose time is to the second, made twice in one second (rev40, the twenty-seventh
round's Left): an approval and an evaluation identical to an earlier one in the same second
were already recorded at the next second; a release and an unsealing were the earlier record
again (nothing logged, the command saying it was). On test_evaluations.py's ledger.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evaluations import (  # noqa: F401 (fixtures)
    entries,
    evals_template,
    evaluate,
    home,
    log_size,
    predicate,
    script,
)
from test_runner_cli import expect, run


def held_clock(monkeypatch: pytest.MonkeyPatch, module: object, held: int) -> None:
    """``module.now`` says one second for its first ``held`` calls, the next one after."""
    calls: list[int] = []

    def clock() -> str:
        calls.append(1)
        return "2026-12-06T16:30:00Z" if len(calls) <= held else "2026-12-06T16:30:01Z"

    monkeypatch.setattr(module, "now", clock)


def test_a_release_after_its_revocation_in_the_same_second_is_recorded(
    runner: CliRunner, home: Path, script: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """rev40 finding 1: a release's subject is the digest of its predicate, whose time is to
    the second. An approver released bc@1, revoked the release (a mistake, say: the wrong
    checkpoint announced) and released it again in the same second: the second release was
    the first one's record, already logged and revoked. ``release`` said OK and printed its
    digest; nothing was logged; the printed release failed ``verify`` (revoked) and an auditor
    read the log as "released, then withdrawn". Such a release is now recorded at the next
    second."""
    from trajledger.runner import release as releasing

    evaluate(runner, home, script, "pass")
    held_clock(monkeypatch, releasing, 2)
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    first = r.stdout.strip().splitlines()[-1]
    expect(run(runner, home, "revoke", first, "--key", "approver", "--reason", "too soon"), 0)
    expect(run(runner, home, "verify", first), 1)
    size = log_size(home)
    r = run(runner, home, "release", "bc@1", "--key", "approver")
    expect(r, 0)
    again = r.stdout.strip().splitlines()[-1]
    assert again != first and log_size(home) == size + 1, "the release was not recorded"
    assert predicate(home, again, "release")["releasedAt"] == "2026-12-06T16:30:01Z"
    expect(run(runner, home, "verify", again), 0)


def test_a_sealed_suite_opened_twice_in_one_second_logs_two_unsealings(
    runner: CliRunner, home: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """rev40 finding 2: an unsealing record (evaluator, batches, purpose, time to the second)
    is logged before a sealed suite is opened. The same evaluator evaluating the same
    checkpoint on it twice in one second opened it twice and logged one unsealing: the second
    was the first one's record again, and both evaluations cited it: an auditor counting who
    opened the holdout, and how often, counted one opening short. Each opening is now a
    record of its own, the second at the next second, and each evaluation cites its own."""
    from trajledger.ledger import suites

    held_clock(monkeypatch, suites, 2)
    size = log_size(home)
    cited = []
    for _ in range(2):
        r = run(runner, home, "eval", "bc@1", "--suite", "holdout@1", "--key", "evaluator",
                "--pass-return", "20")
        expect(r, 0)
        digest = r.stdout.strip().splitlines()[-1]
        config = predicate(home, digest, "evaluation")["configuration"]
        cited += [d["annotations"]["logIndex"] for d in config
                  if d.get("annotations", {}).get("role") == "unsealing"]
    log = entries(home)[size:]
    unsealings = [size + i for i, e in enumerate(log) if e.kind == "unsealing"]
    assert len(unsealings) == 2, [e.kind for e in log]
    assert cited == unsealings


def test_an_evaluation_cites_its_own_unsealing_not_one_logged_since(
    runner: CliRunner, home: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """rev40 finding 3: an evaluation of a sealed suite cites the unsealing record logged
    before the suite was opened. It took the suite's last unsealing in the log, read after its
    own was logged: a concurrent evaluation (here of bc@2, by the same evaluator) unsealing
    the suite in between had its record cited instead, and the evaluation of bc@1 named an
    opening for bc@2. It now cites the record its own unsealing made."""
    from trajledger.ledger import suites

    logged = suites.log_unsealing

    def and_another(ledger, suite, batches, unsealer, purpose):  # type: ignore[no-untyped-def]
        mine = logged(ledger, suite, batches, unsealer, purpose)
        racer = suites.Unsealer(unsealer.key, unsealer.private, unsealer.signer)
        logged(ledger, suite, batches, racer, "evaluation of bc@2 (…)")
        return mine

    monkeypatch.setattr(suites, "log_unsealing", and_another)
    size = log_size(home)
    r = run(runner, home, "eval", "bc@1", "--suite", "holdout@1", "--key", "evaluator",
            "--pass-return", "20")
    expect(r, 0)
    digest = r.stdout.strip().splitlines()[-1]
    config = predicate(home, digest, "evaluation")["configuration"]
    assert {"role": "unsealing", "logIndex": size} in [d.get("annotations") for d in config]
    assert r.stderr.endswith(f"; unsealing logged at {size}\n"), r.stderr


def test_a_rerun_with_another_configuration_in_the_same_second_is_recorded(
    runner: CliRunner, home: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """rev40 finding 4: an evaluation is an artifact (its files: the results and
    ``evaluation.json``, which names the second it was made) whose record signs its
    configuration too. Two built-in runs in one second whose results were the same but whose
    ``--pass-return`` differed (every episode failing both) were one digest with two
    configurations: the second ``eval`` failed, exit 1, "already recorded at log index N with
    other signed metadata (configuration: ...); a digest names one record of this log". So
    did a second evaluation of a sealed suite in one second once each cited its own unsealing
    (finding 2). Such a run is now recorded at the next second."""
    from trajledger.runner import evaluate as evaluating

    held_clock(monkeypatch, evaluating, 2)
    size = log_size(home)
    made = []
    for threshold in ("1000", "2000"):
        r = run(runner, home, "eval", "bc@1", "--suite", "regression@1", "--key", "evaluator",
                "--pass-return", threshold)
        expect(r, 0)
        made.append(r.stdout.strip().splitlines()[-1])
    assert made[0] != made[1] and log_size(home) == size + 2
    assert predicate(home, made[1], "evaluation")["evaluatedAt"] == "2026-12-06T16:30:01Z"
