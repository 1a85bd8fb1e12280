"""The walk with its signatures checked on a second thread (`verify.ahead`, issue 21 item 2,
walk38) decides as the walk that checks each signature in turn: the quickstart's
``cartpole-bc@2`` walked sizes only both ways (``verify_ref``, which walks ahead, against
``verify_naming_files`` over a fresh ``ledger_verifier``, which does not), sound and damaged, the
reports compared whole.

A signature that does not hold is made by answering False for one signature's bytes wherever it is
really checked (`PublicKey.verify` with no walk ahead: the walk in turn, and the signature thread,
whose context has none), as the key's own check answers for a forged one; the records are the
first, the middle and the last the sound walk checks.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import testkit
from test_verify_bulk import (
    REF,
    batches,
    envelope_of,
    remove_envelope,
    revoke_batch,
    stranger_policy,
)

from trajledger import Ledger
from trajledger.ledger.catalog import Catalog
from trajledger.runner import verification
from trajledger.verify import ahead, keys
from trajledger.verify.lineage import LineageVerifier
from trajledger.verify.policy import TrustPolicy


@pytest.fixture
def home(quickstart_template: testkit.Template[str], tmp_path: Path) -> Path:
    return testkit.copy_template(quickstart_template, tmp_path / "home")


def both(home: Path, policy: TrustPolicy | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The report of the walk ahead and of the walk in turn, as JSON."""
    ledger = Ledger.open(home)
    policy = policy or ledger.policy()
    digest = Catalog(ledger).resolve(REF).digest
    fast = verification.verify_ref(ledger, REF, policy, data="size").to_json()
    slow = verification.verify_naming_files(
        verification.ledger_verifier(ledger, policy, data="size"), digest).to_json()
    assert not any(t.name == "signatures" for t in threading.enumerate()), "thread ended"
    return fast, slow


def signatures(home: Path) -> list[bytes]:
    """The signatures a sound walk checks, in its order."""
    seen: list[bytes] = []
    real = keys.PublicKey.verify

    def spy(self: keys.PublicKey, signature: bytes, data: bytes) -> bool:
        if keys.AHEAD.get(None) is not None:  # (the walk's, not the policy's)
            seen.append(signature)
        return real(self, signature, data)

    policy = Ledger.open(home).policy()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(keys.PublicKey, "verify", spy)
        both(home, policy)
    return list(dict.fromkeys(seen))


def forge(monkeypatch: pytest.MonkeyPatch, signature: bytes) -> None:
    """``signature`` no longer holds where it is checked (the walk ahead still answers True)."""
    real = keys.PublicKey.verify

    def forged(self: keys.PublicKey, sig: bytes, data: bytes) -> bool:
        if sig == signature and keys.AHEAD.get(None) is None:
            return False
        return real(self, sig, data)

    monkeypatch.setattr(keys.PublicKey, "verify", forged)


def count(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many checks went to the thread, and how many walks were made again in turn."""
    seen = {"ahead": 0, "again": 0}
    check, again = ahead.SignatureThread.check, verification.walked_again

    def spy_check(self: ahead.SignatureThread, *args: Any) -> bool:
        seen["ahead"] += 1
        return check(self, *args)

    def spy_again(v: LineageVerifier) -> LineageVerifier:
        seen["again"] += 1
        return again(v)

    monkeypatch.setattr(ahead.SignatureThread, "check", spy_check)
    monkeypatch.setattr(verification, "walked_again", spy_again)
    return seen


def failures(report: dict[str, Any]) -> list[str]:
    return [c["detail"] for n in report["nodes"] for c in n["checks"] if c["status"] == "fail"]


def test_a_sound_lineage_is_walked_once_with_its_checks_ahead(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = count(monkeypatch)
    fast, slow = both(home)
    assert fast == slow and failures(fast) == []
    assert seen["ahead"] >= 10 and seen["again"] == 0


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_signature_that_does_not_hold_reports_what_the_walk_in_turn_reports(
    home: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    sigs = signatures(home)
    assert len(sigs) >= 10
    policy = Ledger.open(home).policy()
    forge(monkeypatch, sigs[{"first": 0, "middle": len(sigs) // 2, "last": -1}[where]])
    seen = count(monkeypatch)
    fast, slow = both(home, policy)
    assert fast == slow
    assert any("invalid signature" in d for d in failures(fast)), failures(fast)
    assert seen["again"] == 1


def test_what_an_unverified_record_names_is_not_followed(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dataset's record does not hold, and names more artifacts than the walk may run ahead
    of its checks (`verify.ahead.BUDGET`, made 1 here): the walk ahead stops before it looks at
    any of the batches it lists."""
    monkeypatch.setattr(ahead, "BUDGET", 1)
    ledger = Ledger.open(home)
    dataset = Catalog(ledger).resolve("cartpole-train@2").digest
    state = ledger.trust_state()
    entry = state.entry(state.about(dataset)[0])
    assert entry is not None
    from trajledger.verify.dsse import Envelope

    envelope = Envelope.from_bytes(ledger.store.get(entry.envelope))
    policy = ledger.policy()
    listed = set(batches(home))
    assert listed
    forge(monkeypatch, envelope.signatures[0].sig)
    walked: list[tuple[bool, str]] = []
    real = LineageVerifier.identity_record

    def spy(self: LineageVerifier, digest: str, kind: str) -> Any:
        walked.append((keys.AHEAD.get(None) is not None, digest))
        return real(self, digest, kind)

    monkeypatch.setattr(LineageVerifier, "identity_record", spy)
    fast, slow = both(home, policy)
    assert fast == slow
    assert (False, dataset) in walked  # refuted, walked again in turn
    ahead_of_checks = [d for is_ahead, d in walked if is_ahead]
    after = ahead_of_checks[ahead_of_checks.index(dataset) + 1:]
    assert after == [], "the walk ahead went on past a record whose signature did not hold"
    assert not listed & set(after)
    assert failures(fast)


def test_a_key_the_policy_does_not_hold_reports_the_same(home: Path) -> None:
    fast, slow = both(home, stranger_policy(home))
    assert fast == slow and failures(fast)


def not_json(home: Path) -> None:
    path = envelope_of(home, batches(home)[0])
    path.chmod(0o644)
    path.write_bytes(b"this is not JSON {")


@pytest.mark.parametrize("damage", [revoke_batch, remove_envelope, not_json],
                         ids=["revoked", "missing", "not-json"])
def test_a_damaged_lineage_reports_the_same(home: Path, damage: Any) -> None:
    damage(home)
    fast, slow = both(home)
    assert fast == slow and failures(fast)


def test_the_thread_is_ended_when_the_walk_is_interrupted(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = LineageVerifier.identity_record
    calls = []

    def interrupt(self: LineageVerifier, digest: str, kind: str) -> Any:
        calls.append(digest)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, digest, kind)

    monkeypatch.setattr(LineageVerifier, "identity_record", interrupt)
    ledger = Ledger.open(home)
    with pytest.raises(KeyboardInterrupt):
        verification.verify_ref(ledger, REF, ledger.policy(), data="size")
    assert not any(t.name == "signatures" for t in threading.enumerate())
    assert keys.AHEAD.get(None) is None


def test_a_walk_that_raises_with_every_check_held_raises_as_it_is(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = count(monkeypatch)
    real = LineageVerifier.identity_record

    def boom(self: LineageVerifier, digest: str, kind: str) -> Any:
        if kind == "rollout-batch":
            raise OSError("unreadable")
        return real(self, digest, kind)

    monkeypatch.setattr(LineageVerifier, "identity_record", boom)
    ledger = Ledger.open(home)
    with pytest.raises(OSError, match="unreadable"):
        verification.verify_ref(ledger, REF, ledger.policy(), data="size")
    assert seen["again"] == 0 and seen["ahead"] > 0


@pytest.mark.parametrize("where", ["first", "last"])
def test_a_refutation_learnt_when_the_window_is_full_is_not_lost(
    home: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """One check waiting at a time (`verify.ahead.WINDOW` 1), no bound on the walk: a check
    that did not hold, learnt when the next is queued, still has the lineage walked again."""
    sigs = signatures(home)
    policy = Ledger.open(home).policy()
    forge(monkeypatch, sigs[0 if where == "first" else -2])
    monkeypatch.setattr(ahead, "WINDOW", 1)
    monkeypatch.setattr(ahead, "BUDGET", 10**9)
    seen = count(monkeypatch)
    fast, slow = both(home, policy)
    assert fast == slow and any("invalid signature" in d for d in failures(fast))
    assert seen["again"] == 1
