"""A withdrawal named by what it withdraws (fifteenth review round, left28; docs/SECURITY.md
"Review of 2026-12-05, fifteenth round (left28)"): ``trajledger revoke NAME@VERSION --approval
[--by KEYID]`` withdraws the approval of the dataset or batch (the one ``--by`` signed); before,
only ``revoke APPROVAL-DIGEST`` did, a digest the user had to find in ``approve``'s output or
the log. Two approvals it could mean are refused, listing each one's digest.

On the quickstart ledger (tests/e2e/test_withdraw_approval.py's: cartpole-train@2, approved by
approver-a and approver-b, 2 of 2 required).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import testkit
from test_withdraw_approval import DATASET, approval, producers_withdrawal, run, size

from trajledger import Ledger


@pytest.fixture
def quick(quickstart_template: testkit.Template[str], tmp_path: Path) -> Path:
    return testkit.copy_template(quickstart_template, tmp_path / "home")


def keyid(home: Path, name: str) -> str:
    led = Ledger.open(home)
    try:
        return led.keys.public(name).keyid
    finally:
        led.close()


def test_an_approval_is_withdrawn_by_the_dataset_and_its_signer(quick: Path) -> None:
    home = quick
    a_index, a_envelope = approval(home, "approver-a")
    b_index, b_envelope = approval(home, "approver-b")
    before = size(home)
    # Two approvals: refused, each named (on main: no such option, exit 2).
    named = ", ".join(f"log index {i} signed by {keyid(home, k)[:16]} ({env})"
                      for i, env, k in [(a_index, a_envelope, "approver-a"),
                                        (b_index, b_envelope, "approver-b")])
    r = run(home, "revoke", DATASET, "--approval", "--key", "approver-b", "--reason", "wrong")
    assert (r.exit_code, r.stderr) == (1, (
        f"FAIL: revoke {DATASET} --approval: 2 approvals of it could be meant: {named}; name "
        "one with --by KEYID (--by-identity SUBJECT: a keyless one's), or revoke its digest; "
        "nothing was signed\n")), r.output
    assert size(home) == before
    # --by a key that signed none: refused.
    r = run(home, "revoke", DATASET, "--approval", "--by", "00ff", "--key", "approver-b",
            "--reason", "wrong")  # fmt: skip
    assert r.exit_code == 1, r.output
    assert r.stderr == (f"FAIL: revoke {DATASET} --approval: no approval of it signed by "
                        "00ff is in force here (none that counts under the policy in force, "
                        "or withdrawn already); nothing was signed\n"), r.stderr
    # --by names approver-a's: withdrawn, as 'revoke DIGEST' would.
    r = run(home, "revoke", DATASET, "--approval", "--by", keyid(home, "approver-a")[:12],
            "--key", "approver-b", "--reason", "the wrong version")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().startswith("sha256:"), r.output
    led = Ledger.open(home)
    try:
        state = led.trust_state()
        (withdrawal,) = [i for i in state.about(a_envelope)
                         if (e := state.entry(i)) is not None and e.kind == "revocation"]
    finally:
        led.close()
    assert withdrawal == before
    assert f"approval at log index {a_index} withdrawn (log index {before})" in r.stderr, r.stderr
    r = run(home, "admit", DATASET)
    assert r.exit_code == 1 and f"approval {a_index} does not count" in r.output, r.output
    # One left in force: '--approval' alone now means it.
    r = run(home, "revoke", DATASET, "--approval", "--key", "approver-b", "--reason", "too")
    assert r.exit_code == 0, r.output
    assert f"approval at log index {b_index} withdrawn" in r.stderr, r.stderr
    # '--by' is for '--approval' only.
    r = run(home, "revoke", DATASET, "--by", "00ff", "--key", "approver-b", "--reason", "x")
    assert r.exit_code == 2 and "--by is for --approval" in r.output, r.output


def test_a_withdrawal_that_counts_for_nothing_leaves_the_approval_to_withdraw(quick: Path
                                                                            ) -> None:
    """A producer's withdrawal forced into the log (or another log's, taken in by an import)
    counts for nothing: the approval is still in force, so it is still one ``--approval`` can
    mean and withdraw (review rev28, finding 1: on main it was taken for withdrawn already,
    ``--by`` its signer refused and ``--approval`` alone took the other approval)."""
    home = quick
    a_index, a_envelope = approval(home, "approver-a")
    b_index, _b_envelope = approval(home, "approver-b")
    producers_withdrawal(home, a_envelope)
    assert run(home, "admit", DATASET).exit_code == 0  # ignored: both approvals count
    before = size(home)
    r = run(home, "revoke", DATASET, "--approval", "--key", "approver-b", "--reason", "bad")
    assert r.exit_code == 1 and "2 approvals of it could be meant" in r.stderr, r.output
    assert size(home) == before
    r = run(home, "revoke", DATASET, "--approval", "--by", keyid(home, "approver-a")[:12],
            "--key", "approver-b", "--reason", "bad data")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert f"approval at log index {a_index} withdrawn (log index {before})" in r.stderr
    r = run(home, "admit", DATASET)
    assert r.exit_code == 1 and f"approval {a_index} does not count: withdrawn" in r.stderr
    assert f"approval {b_index} does not count" not in r.stderr, r.stderr


def test_an_empty_by_names_no_approval(quick: Path) -> None:
    """review rev30, finding 3: ``--by ""`` matched every keyid (a prefix of them all), so with
    one approval in force it withdrew that one, whoever signed it: a script's
    ``--by "$KEYID"`` with the variable unset withdrew another approver's approval. An empty
    ``--by`` or ``--by-identity`` is a usage error, nothing signed (the library refuses it
    too)."""
    from trajledger.verify.errors import FormatError

    home = quick
    _a_index, a_envelope = approval(home, "approver-a")
    r = run(home, "revoke", a_envelope, "--key", "approver-a", "--reason", "wrong")
    assert r.exit_code == 0, r.output
    before = size(home)  # approver-b's approval alone in force
    for option in ("--by", "--by-identity"):
        for value in ("", " "):
            r = run(home, "revoke", DATASET, "--approval", option, value, "--key", "approver-a",
                    "--reason", "wrong")
            assert r.exit_code == 2 and f"{option} is empty" in r.output, r.output
            assert size(home) == before
    led = Ledger.open(home)
    try:
        with pytest.raises(FormatError, match="empty"):
            led.withdraw(DATASET, key="approver-a", reason="wrong", by="")
    finally:
        led.close()
def plant_approvals(home: Path, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Approvals of `DATASET` that count for nothing, made by a tool that checks no role (the
    write side's check switched off): the producer key ``vendor``'s and a key of no role's."""
    from trajledger.ledger import policy_state
    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.keys import Signer
    from trajledger.ledger.record import record_statement
    from trajledger.verify import predicates

    body = predicates.Approval("train", "2026-01-01T00:00:00Z",
                               "2999-01-01T00:00:00Z").to_predicate()
    with monkeypatch.context() as m:
        m.setattr(policy_state, "check_signers", lambda *a, **k: None)
        led = Ledger.open(home)
        try:
            digest = Catalog(led).resolve(DATASET).digest
            return [record_statement(led, DATASET, digest, predicates.APPROVAL, body, s).index
                    for s in (led.keys.signer("vendor"), Signer.generate("mallory"))]
        finally:
            led.close()


def test_approvals_that_count_for_nothing_are_no_candidates(
        quick: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review left33, finding 1 (rev29 finding 8, the rest): an approval that counts for nothing
    under the policy in force (a producer's, a key of no role's, made outside the CLI) was a
    candidate of ``--approval``, so whoever could append one kept an approver from withdrawing
    the one approval in force without naming it (on c717ad8: ``3 approvals of it could be
    meant``, exit 1). The candidates are those the admission gate counts; one whose record
    cannot be read stays one (it may be the one meant)."""
    home = quick
    a_index, _a_envelope = approval(home, "approver-a")
    r = run(home, "revoke", DATASET, "--approval", "--by", keyid(home, "approver-b")[:12],
            "--key", "approver-b", "--reason", "the wrong version")  # fmt: skip
    assert r.exit_code == 0, r.output
    planted = plant_approvals(home, monkeypatch)
    r = run(home, "admit", DATASET)
    assert r.exit_code == 1 and all(f"approval {i} does not count" in r.stderr
                                    for i in planted), r.output
    before = size(home)
    # The producer: no approver, and none of the approvals in force is its own.
    r = run(home, "revoke", DATASET, "--approval", "--key", "vendor", "--reason", "nuisance")
    assert r.exit_code == 1, r.output
    assert (f"FAIL: approval at log index {a_index}: key vendor ({keyid(home, 'vendor')[:12]}) "
            "is no approver of the policy in force and did not sign it") in r.stderr, r.stderr
    assert size(home) == before
    # approver-a withdraws the one approval in force; the planted ones are no candidates.
    r = run(home, "revoke", DATASET, "--approval", "--key", "approver-a", "--reason", "mine")
    assert r.exit_code == 0, r.output
    assert f"approval at log index {a_index} withdrawn (log index {before})" in r.stderr
    r = run(home, "revoke", DATASET, "--approval", "--key", "approver-a", "--reason", "again")
    assert (r.exit_code, r.stderr) == (1, (
        f"FAIL: revoke {DATASET} --approval: no approval of it is in force here (none that "
        "counts under the policy in force, or withdrawn already); nothing was signed\n"))
    assert size(home) == before + 1


def test_an_approval_that_cannot_be_read_stays_a_candidate(quick: Path) -> None:
    """What an approval whose envelope is lost says is unknown: it may be the one meant, so it
    is never left out of the candidates (it would leave the other one to be withdrawn in its
    place, and count again once restored)."""
    home = quick
    a_index, a_envelope = approval(home, "approver-a")
    b_index, b_envelope = approval(home, "approver-b")
    (home / "objects" / "sha256" / b_envelope[7:9] / b_envelope[9:11] / b_envelope[7:]).unlink()
    before = size(home)
    r = run(home, "revoke", DATASET, "--approval", "--key", "approver-a", "--reason", "wrong")
    assert r.exit_code == 1, r.output
    assert (f"2 approvals of it could be meant: log index {a_index} signed by "
            f"{keyid(home, 'approver-a')[:16]} ({a_envelope}), log index {b_index} signed by "
            f"{keyid(home, 'approver-b')[:16]} ({b_envelope}) (cannot be read: it may be this "
            "one)") in r.stderr, r.stderr
    assert size(home) == before
