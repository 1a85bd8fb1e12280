"""An approval can be withdrawn (withdraw26): ``trajledger revoke APPROVAL`` takes the digest
``approve`` printed, and every judging path counts the approval for nothing from then on.

On the quickstart ledger (the session's ``quickstart_template``: dataset cartpole-train@2,
approved by approver-a and approver-b, 2 of 2 required, and checkpoint 2 trained on it). The
rules (docs/SECURITY.md, "fourteenth round (withdraw26)"; ``verify.withdrawals``):

- an approver withdraws any approval, the key that signed it its own; a producer may not: the
  write side refuses it, and a producer's withdrawal forced into the log is ignored (shown,
  not failed closed);
- a withdrawal withdraws the signed statement: the approval replayed into the log in an
  envelope encoded anew still counts for nothing; a new approval counts;
- a withdrawal whose envelope is lost fails closed: the approval it names does not count.

tests/e2e/test_paths_agree.py ("approval withdrawn") runs every path on a withdrawal;
tests/e2e/test_histories_agree.py models it in generated histories (R7).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import testkit
from click.testing import Result
from test_paths_agree import (
    World,
    quickstart,  # noqa: F401  (the fixture)
    quickstart_world,
    withdrawn_approval,
)

from trajledger import Ledger
from trajledger.runner.cli import main

DATASET = "cartpole-train@2"


def run(home: Path, *args: str | Path) -> Result:
    return testkit.new_runner().invoke(main, ["--ledger", str(home), *map(str, args)])


@pytest.fixture
def home(quickstart_template: testkit.Template[str], tmp_path: Path) -> Path:
    return testkit.copy_template(quickstart_template, tmp_path / "home")


def approval(home: Path, approver: str) -> tuple[int, str]:
    """The log index and envelope digest of ``approver``'s approval of `DATASET`."""
    from trajledger.ledger.catalog import Catalog

    led = Ledger.open(home)
    try:
        digest, keyid = Catalog(led).resolve(DATASET).digest, led.keys.public(approver).keyid
        state = led.trust_state()
        return next((i, e.envelope) for i in state.about(digest)
                    if (e := state.entry(i)) is not None and e.kind == "approval"
                    and keyid in e.signers)
    finally:
        led.close()


def producers_withdrawal(home: Path, envelope: str) -> None:
    """A withdrawal of the approval ``envelope`` by the producer key ``vendor``, forced into
    the log past the write side's check (a producer may append): it counts for nothing."""
    from trajledger.ledger.record import record_statement
    from trajledger.verify import predicates

    led = Ledger.open(home)
    try:
        body = predicates.Revocation("nuisance", "2026-01-01T00:00:00Z").to_predicate()
        record_statement(led, "approval", envelope, predicates.REVOCATION, body,
                         led.keys.signer("vendor"))
    finally:
        led.close()


def size(home: Path) -> int:
    led = Ledger.open(home)
    try:
        return led.log.size
    finally:
        led.close()


def test_an_approver_withdraws_an_approval_and_a_new_one_counts(home: Path) -> None:
    index, envelope = approval(home, "approver-a")
    assert run(home, "admit", DATASET).exit_code == 0
    r = run(home, "revoke", envelope, "--key", "approver-b", "--reason", "the wrong version")
    assert r.exit_code == 0, r.output
    r = run(home, "admit", DATASET)
    assert r.exit_code == 1
    assert (f"approvals: 1 of 2 required approver(s) for 'train'; approval {index} does not "
            f"count: withdrawn by revocation record {size(home) - 1} (the wrong version)"
            in r.stderr)
    # The lineage's picture says so beside the dataset (its records: `verify.impact`).
    r = run(home, "lineage", DATASET)
    assert re.search(rf"approval at log index {index}, signed by \w+ — ignored: withdrawn by "
                     r"revocation record \d+ \(the wrong version\)", r.stdout), r.stdout
    # 'show' says which revocation names it, of the dataset and of the approval.
    shown = json.loads(run(home, "show", DATASET, "--json").stdout)["status"]
    named = f"revocation at log index {size(home) - 1} names it (withdrawn, if it counts)"
    assert f"approval at log index {index} " in shown[0] and shown[0].endswith(named), shown
    assert json.loads(run(home, "show", envelope, "--json").stdout)["status"] == [named]
    # approver-a approves again: a new statement, signed anew, counts.
    r = run(home, "approve", DATASET, "--key", "approver-a")
    assert r.exit_code == 0, r.output
    assert run(home, "admit", DATASET).exit_code == 0


def test_a_producer_may_not_withdraw_an_approval(home: Path) -> None:
    _index, envelope = approval(home, "approver-a")
    before = size(home)
    r = run(home, "revoke", envelope, "--key", "vendor", "--reason", "nuisance")
    assert r.exit_code == 1
    assert "only an approver may withdraw an approval" in r.stderr
    assert size(home) == before
    # Forced into the log past the write side's check: shown, ignored, the approval counts.
    producers_withdrawal(home, envelope)
    assert run(home, "admit", DATASET).exit_code == 0
    r = run(home, "lineage", DATASET)
    assert r.exit_code == 0, r.output
    # Its own signer may withdraw it: here an approver too.
    r = run(home, "revoke", envelope, "--key", "approver-a", "--reason", "mine")
    assert r.exit_code == 0, r.output
    assert run(home, "admit", DATASET).exit_code == 1


def test_a_producer_named_in_an_approval_it_did_not_sign_may_not_withdraw_it(
    home: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """review rev30, finding 4: the write side let a key withdraw an approval whose envelope
    named its keyid, signature or not (a keyid names no signer: rev29 finding 1). An approval
    of approver-a's whose envelope also names producer ``vendor``'s keyid beside a signature
    that does not verify (made by another tool, or taken in by an import) was withdrawn by
    ``vendor``: signed, logged, ``OK: … revoked``, while verifiers count that withdrawal for
    nothing (a producer's; `retractions.authority` takes the approval's verified signers),
    so the approval stayed in force. Refused now, nothing signed; so is a producer whose
    signature of the approval verifies (a co-signer verifiers do not count)."""
    from cryptography.hazmat.primitives.asymmetric import ed25519

    import trajledger.ledger.policy_state as policy_state
    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.keys import Signer
    from trajledger.ledger.record import record_statement
    from trajledger.verify import predicates

    def approved(*names: str, named_only: str | None = None) -> str:
        led = Ledger.open(home)
        try:
            signers = [led.keys.signer(n) for n in names]
            if named_only:  # its keyid, a signature of another key
                signers.append(Signer("x", led.keys.public(named_only),
                                      ed25519.Ed25519PrivateKey.generate()))
            body = predicates.Approval("train", "2026-01-01T00:00:00Z",
                                       "2999-01-01T00:00:00Z", names[-1]).to_predicate()
            with monkeypatch.context() as m:  # (another tool's: the role check not run)
                m.setattr(policy_state, "check_signers", lambda *_a, **_k: None)
                return record_statement(led, DATASET, Catalog(led).resolve(DATASET).digest,
                                        predicates.APPROVAL, body, signers).envelope_digest
        finally:
            led.close()

    named = approved("approver-a", named_only="vendor")
    before = size(home)
    r = run(home, "revoke", named, "--key", "vendor", "--reason", "nuisance")
    assert r.exit_code == 1, r.output
    assert "is no approver of the policy in force and did not sign it" in r.stderr, r.stderr
    assert size(home) == before
    # Signed by both, vendor's signature verifying: still no signer of the approval as
    # verifiers count them (the approver keys of its policy: `judge.judge_record`), so its
    # withdrawal would count for nothing (exit 0 before).
    both = approved("approver-a", "vendor")
    r = run(home, "revoke", both, "--key", "vendor", "--reason", "mine")
    assert r.exit_code == 1 and "did not sign it (as an approver" in r.stderr, r.output
    assert size(home) == before + 1  # (the approval signed by both)
    r = run(home, "revoke", both, "--key", "approver-a", "--reason", "mine")
    assert r.exit_code == 0, r.output


def test_a_replayed_approval_stays_withdrawn(home: Path) -> None:
    index, envelope = approval(home, "approver-a")
    r = run(home, "revoke", envelope, "--key", "approver-a", "--reason", "obtained by fraud")
    assert r.exit_code == 0, r.output
    # The same signed statement, its envelope encoded anew (other bytes, another digest),
    # logged again as another approval record.
    from trajledger.ledger.log.spec import EntrySpec

    led = Ledger.open(home)
    try:
        entry = led.trust_state().entry(index)
        assert entry is not None
        data = json.dumps(json.loads(led.read_blob(envelope)), indent=2).encode()
        again = led.store.put_bytes(data)
        assert again != envelope
        (replayed,) = led.log.append([EntrySpec("approval", entry.subject, again,
                                                entry.signers)], foreign=True)
    finally:
        led.close()
    r = run(home, "admit", DATASET)
    assert r.exit_code == 1
    assert f"approval {replayed} does not count: withdrawn by revocation record" in r.stderr


def test_an_approval_withdrawn_already_is_not_withdrawn_again(home: Path) -> None:
    """rev30's Left: ``revoke DIGEST`` of an approval withdrawn already signed and logged a
    second withdrawal (with ``--sigstore`` a public Rekor entry), exit 0. Refused now before
    anything is signed, naming the earlier withdrawal, as the gate judges it: a replay of the
    withdrawn statement is withdrawn already too; a withdrawal that counts for nothing (a
    producer's) does not stop one that counts."""
    from trajledger.ledger.log.spec import EntrySpec

    index, envelope = approval(home, "approver-a")
    producers_withdrawal(home, envelope)  # counts for nothing: the approver's is still needed
    r = run(home, "revoke", envelope, "--key", "approver-b", "--reason", "the wrong version")
    assert r.exit_code == 0, r.output
    first, before = size(home) - 1, size(home)
    for key in ("approver-b", "approver-a"):
        r = run(home, "revoke", envelope, "--key", key, "--reason", "again")
        assert r.exit_code == 1, r.output
        assert r.stderr == (f"FAIL: revoke {envelope}: the approval at log index {index} is "
                            f"withdrawn already (withdrawn by revocation record {first} (the "
                            "wrong version)); nothing was signed\n"), r.stderr
        assert size(home) == before
    led = Ledger.open(home)  # the withdrawn statement replayed: withdrawn already too
    try:
        entry = led.trust_state().entry(index)
        assert entry is not None
        again = led.store.put_bytes(json.dumps(json.loads(led.read_blob(envelope))).encode())
        led.log.append([EntrySpec("approval", entry.subject, again, entry.signers)],
                       foreign=True)
    finally:
        led.close()
    r = run(home, "revoke", again, "--key", "approver-b", "--reason", "again")
    assert r.exit_code == 1 and f"withdrawn by revocation record {first} " in r.stderr, r.output
    assert size(home) == before + 1


def test_a_withdrawal_that_cannot_be_read_fails_closed(home: Path) -> None:
    _index, envelope = approval(home, "approver-a")
    r = run(home, "revoke", envelope, "--key", "approver-b", "--reason", "the wrong version")
    assert r.exit_code == 0, r.output
    withdrawal = r.stdout.strip()
    (home / "objects" / "sha256" / withdrawal[7:9] / withdrawal[9:11] / withdrawal[7:]).unlink()
    r = run(home, "admit", DATASET)
    assert r.exit_code == 1
    assert "names it but cannot be read, so it may withdraw it" in r.stderr


def test_an_approval_made_again_as_the_withdrawn_one_is_refused(home: Path) -> None:
    """The same approver, purpose, expiry and note in the same second sign the same statement
    (Ed25519 is deterministic): the log finds that record, withdrawn. ``approve`` said OK and
    the approval counted for nothing; it now says so, and how to approve again."""
    import datetime as dt

    from trajledger.ledger.status import approve
    from trajledger.verify.errors import PolicyError

    when = dt.datetime(2026, 12, 4, 12, 0, 0, tzinfo=dt.UTC)
    led = Ledger.open(home)
    try:
        signer = led.keys.signer("approver-a")
        first = approve(led, DATASET, signer, now=when, note="once")
        assert first.new
        led.revoke(first.envelope_digest, key="approver-b", reason="the wrong version")
        with pytest.raises(PolicyError, match=rf"this is the approval at log index "
                           rf"{first.index}, withdrawn .* approve again a second later"):
            approve(led, DATASET, signer, now=when, note="once")
        assert approve(led, DATASET, signer, now=when + dt.timedelta(seconds=1),
                       note="once").new
    finally:
        led.close()


def test_a_withdrawal_reaches_a_buyer_by_an_update_bundle(
    quickstart: tuple[testkit.Template[str], testkit.Template[None]],  # noqa: F811
    tmp_path: Path,
) -> None:
    """A buyer whose policy holds the vendor's approvers (testkit.BUYER_POLICY) imported the
    vendor's checkpoint; the vendor then withdraws an approval of its dataset and sends an
    update bundle (``export --updates-since``). The buyer takes the withdrawal in and its
    ``verify`` of the checkpoint fails, as the vendor's does. It was not taken in: an update
    takes the entries about what the buyer holds, and an approval's envelope is no artifact."""
    w = quickstart_world(quickstart, tmp_path)
    assert w.buyer is not None
    home, state = w.buyer
    bundle, update = w.work / "ck.tar.zst", w.work / "update.tar.zst"
    assert w.run("export", w.checkpoint, "--out", bundle).exit_code == 0
    applied = size(w.home)
    buyer = World(home, state, w.checkpoint, "", "", w.work, home / "policy.toml",
                  passphrase=testkit.TEST_PASSPHRASE)
    assert buyer.run("import", bundle, "--key", "b1", "--key", "b2").exit_code == 0
    assert buyer.run("verify", w.checkpoint).exit_code == 0
    withdrawn_approval(w)
    r = w.run("export", "--updates-since", str(applied), "--out", update)
    assert r.exit_code == 0, r.output
    r = buyer.run("import", update, "--key", "b1", "--key", "b2")
    assert r.exit_code == 0, r.output
    assert re.search(r"WARNING: revoked by \S+: approval at log index \d+ \(sha256:\w{12}…\): "
                     "the wrong version", r.stderr), r.stderr
    r = buyer.run("verify", w.checkpoint)
    assert r.exit_code == 1, r.output
    assert "does not count: withdrawn by revocation record" in r.stderr, r.stderr


def test_a_card_does_not_claim_a_withdrawn_approval(home: Path, tmp_path: Path) -> None:
    """A dataset card (``trajledger card``) lists the approvals that count; a withdrawn one is
    listed apart, as withdrawn, naming the revocation (left27; withdraw26's Left)."""
    index, envelope = approval(home, "approver-a")
    assert run(home, "revoke", envelope, "--key", "approver-b", "--reason",
               "the wrong version").exit_code == 0
    withdrawal = size(home) - 1
    out = tmp_path / "README.md"
    r = run(home, "card", DATASET, "--format", "hf", "--out", out)
    assert r.exit_code == 0, r.output
    text = out.read_text()
    block = json.loads(run(home, "card", DATASET, "--format", "croissant").stdout)
    provenance = next(v for k, v in block.items() if k.endswith("provenance"))
    assert index not in [a["logIndex"] for a in provenance["approvals"]], provenance
    gone = provenance["withdrawnApprovals"]
    assert [(a["logIndex"], a["withdrawn"]) for a in gone] == [
        (index, f"withdrawn by revocation record {withdrawal} (the wrong version)")]
    assert (f"**withdrawn** (does not count): withdrawn by revocation record {withdrawal} "
            f"(the wrong version) — log index {index}") in text, text
    assert "**Revoked.**" not in text  # the data is not revoked: one approval is withdrawn
