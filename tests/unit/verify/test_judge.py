"""The judgement layer (``verify.judge``) decides from bytes and records alone: no ledger, no
files, no index, no threads.

- A revocation's envelope bytes judged under an in-memory policy: a `Record` signed by an
  approver; the same bytes altered, a damaged `RecordFailure` (fail closed); signed by a key the
  policy does not hold, a failure whose cause is that key (`verify.untrusted_key.key_node`).
- A revocation has authority over its subject when an approver or the subject's own producer
  signed it; another producer's does not count (`verify.retractions.authority`, as pure).
- A revoked batch's cascade: the revocation judged from bytes fails the batch (`standing`);
  the dataset and checkpoint built on it fail through their lineage, with the batch as the one
  root cause.
- Approvals are counted from in-memory records by their log time and purpose.
"""

from __future__ import annotations

import datetime as dt
import hashlib

from cryptography.hazmat.primitives import serialization

from trajledger.ledger.encode import envelope_bytes, log_entry
from trajledger.ledger.keys import Signer
from trajledger.ledger.signing import sign_statement
from trajledger.verify import predicates
from trajledger.verify.judge import (
    Record,
    RecordFailure,
    approvals,
    judge_record,
    standing,
)
from trajledger.verify.log_entry import GENESIS_PREV, LogEntry
from trajledger.verify.policy import TrustPolicy
from trajledger.verify.report import FAIL, OK, Edge, Node, Report, Status
from trajledger.verify.retractions import authority
from trajledger.verify.untrusted_key import key_node

PRODUCER = Signer.generate("producer")  # TEST ONLY
APPROVER = Signer.generate("approver")  # TEST ONLY
STRANGER = Signer.generate("stranger")  # TEST ONLY


def pem(s: Signer) -> str:
    key = serialization.load_der_public_key(s.public.spki_der)
    return key.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def judge_policy(serial: int, approver: Signer, extra: str = "") -> TrustPolicy:
    """The policy of these tests: ``approver`` approves; ``extra`` is TOML after the roles."""
    return TrustPolicy.from_toml(f'''
name = "judge"
serial = {serial}
[roles.producer]
keys = ["""{pem(PRODUCER)}"""]
[roles.approver]
keys = ["""{pem(approver)}"""]
threshold = 1
{extra}'''.encode())


POLICY = judge_policy(1, APPROVER)


def digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def revocation(subject: str, signer: Signer, reason: str = "leaked test data"
               ) -> tuple[LogEntry, bytes]:
    """A revocation's log entry and envelope bytes, signed by ``signer``."""
    env = sign_statement([("artifact", subject)], predicates.REVOCATION,
                         {"reason": reason, "revokedAt": "2026-01-02T03:04:05Z"}, [signer])
    data = envelope_bytes(env)
    entry = log_entry("revocation", subject, "sha256:" + hashlib.sha256(data).hexdigest(),
                     (signer.keyid,), "2026-01-02T03:04:06Z", GENESIS_PREV)
    return entry, data


def nothing(_digest: str) -> bytes | None:
    return None


def test_a_record_is_judged_from_its_envelope_bytes() -> None:
    batch = digest("batch")
    entry, data = revocation(batch, APPROVER)
    rec = judge_record(7, entry, data, POLICY, nothing)
    assert isinstance(rec, Record)
    assert rec.index == 7 and rec.signers == {APPROVER.keyid}
    assert isinstance(rec.predicate, predicates.Revocation)
    assert rec.predicate.reason == "leaked test data"
    # Other bytes than the entry names, or none: damaged, what it says is unknown.
    bad = judge_record(7, entry, data[:-1] + b" }", POLICY, nothing)
    assert isinstance(bad, RecordFailure) and bad.damaged
    assert "envelope hashes to" in bad.message
    gone = judge_record(7, entry, None, POLICY, nothing)
    assert isinstance(gone, RecordFailure) and gone.damaged and "is missing" in gone.message


def test_a_key_the_policy_does_not_hold_is_the_cause() -> None:
    entry, data = revocation(digest("batch"), STRANGER)
    rec = judge_record(3, entry, data, POLICY, nothing)
    assert isinstance(rec, RecordFailure) and not rec.damaged
    assert rec.cause == f"key:{STRANGER.keyid}:producer or approver"
    assert "not in the policy" in rec.note
    node = key_node(rec, POLICY)
    assert node.id == rec.cause and node.status is Status.FAIL
    detail = node.checks[0].detail  # (the way on said once: out44 finding 5)
    # a revocation: what counts, not "add it to [roles.producer]", which never would (out53)
    assert detail.count("a revocation or erasure counts signed by the key that produced") == 1
    assert "add it to [roles." not in detail and "add the key" not in detail


def test_who_may_revoke() -> None:
    batch = digest("batch")
    made_entry = log_entry("rollout-batch", batch, digest("env"), (PRODUCER.keyid,),
                          "2026-01-01T00:00:00Z", GENESIS_PREV)
    made = Record(0, made_entry, None, None, frozenset({PRODUCER.keyid}))  # type: ignore[arg-type]
    by_approver = judge_record(1, *revocation(batch, APPROVER), POLICY, nothing)
    by_producer = judge_record(2, *revocation(batch, PRODUCER), POLICY, nothing)
    assert isinstance(by_approver, Record) and isinstance(by_producer, Record)
    assert authority(by_approver, POLICY, "rollout-batch", None) is None
    assert authority(by_producer, POLICY, "rollout-batch", made) is None
    # Another producer's batch: a producer may revoke only what it produced.
    other = Record(0, made_entry, None, None, frozenset({STRANGER.keyid}))  # type: ignore[arg-type]
    why = authority(by_producer, POLICY, "rollout-batch", other)
    assert why is not None and "a producer may revoke or erase only what it produced" in why


def test_a_revoked_batch_fails_what_was_built_on_it() -> None:
    batch, dataset, checkpoint = digest("batch"), digest("dataset"), digest("checkpoint")
    rec = judge_record(9, *revocation(batch, APPROVER), POLICY, nothing)
    assert isinstance(rec, Record)
    nodes = {d: Node(d, k, name=k) for d, k in ((batch, "rollout-batch"),
                                                  (dataset, "dataset"),
                                                  (checkpoint, "checkpoint"))}
    for n in nodes.values():
        n.add("record", OK, "signature, role and inclusion verified")
    standing(nodes[batch], rec.predicate, [rec], POLICY)
    assert [(c.what, c.status) for c in nodes[batch].checks][-1] == ("revoked", FAIL)
    assert nodes[batch].checks[-1].detail == "leaked test data (log index 9)"
    log = Node("log", "log", name="log")
    report = Report(checkpoint, ["log", checkpoint], {"log": log, **nodes},
                    [Edge(checkpoint, dataset, "dataset"), Edge(dataset, batch, "batch")])
    assert not report.ok
    assert report.failing() == {batch, dataset, checkpoint}
    causes = report.causes()
    assert [(n.id, [c.what for c in cs], d) for n, cs, d in causes] == [(batch, ["revoked"], 2)]
    assert report.verdict().endswith("1 problem(s) in 4 checks, in 1 node(s); "
                                     "2 more fail through their lineage")
    assert report.to_json()["nodes"][3]["lineage"] == "fail"  # the checkpoint, as a string


def test_approvals_from_in_memory_records() -> None:
    ds = digest("dataset")
    env = sign_statement([("dataset", ds)], predicates.APPROVAL, {
        "purpose": "train", "approvedAt": "2026-01-02T00:00:00Z",
        "expires": "2026-02-02T00:00:00Z"}, [APPROVER])
    data = envelope_bytes(env)
    entry = log_entry("approval", ds, "sha256:" + hashlib.sha256(data).hexdigest(),
                     (APPROVER.keyid,), "2026-01-02T00:00:10Z", GENESIS_PREV)
    rec = judge_record(4, entry, data, POLICY, nothing)
    assert isinstance(rec, Record), rec
    at = dt.datetime(2026, 1, 10, tzinfo=dt.UTC)
    node = Node("decision", "admission")
    assert approvals(node, "ds@1", [rec], POLICY, "train", 10, at) == {APPROVER.keyid}
    assert node.checks[-1].status is Status.OK
    # Logged after the use, or for another purpose: it does not count, and the check says why.
    late = Node("decision", "admission")
    assert approvals(late, "ds@1", [rec], POLICY, "train", 3, at) == set()
    assert late.checks[-1].status is Status.FAIL
    assert "was logged after the use (log index 3)" in late.checks[-1].detail
    other = Node("decision", "admission")
    assert approvals(other, "ds@1", [rec], POLICY, "eval", 10, at) == set()
    assert "is for 'train', not 'eval'" in other.checks[-1].detail


def _approval(approved_at: str, expires: str, logged: str) -> Record:
    ds = digest("dataset")
    env = sign_statement([("dataset", ds)], predicates.APPROVAL, {
        "purpose": "train", "approvedAt": approved_at, "expires": expires}, [APPROVER])
    data = envelope_bytes(env)
    entry = log_entry("approval", ds, "sha256:" + hashlib.sha256(data).hexdigest(),
                      (APPROVER.keyid,), logged, GENESIS_PREV)
    rec = judge_record(4, entry, data, POLICY, nothing)
    assert isinstance(rec, Record), rec
    return rec


def test_approval_dates_at_the_ends_of_the_calendar_are_judged() -> None:
    """rev16: an approval's lifetime (``expires - approvedAt``) was added to its log time as
    a datetime: an approver's record dated 0001 and expiring 9999 (or the reverse, or expiring
    in year 1 and dated a minute ahead of its log time) ended every verification judging it in
    ``OverflowError`` (exit 4, a traceback) instead of a verdict."""
    logged, at = "2026-01-02T00:00:10Z", dt.datetime(2026, 1, 10, tzinfo=dt.UTC)
    cases = [  # (approvedAt, expires): the approval counts, or the reason it does not
        ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", None),
        ("9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "after the log took it in"),
        ("2026-01-02T00:00:00Z", "0001-01-01T00:00:00Z", "expired at 0001-01-01T00:00:00Z"),
        ("2026-01-02T00:01:10Z", "0001-01-01T00:00:30Z", "expired at 0001-01-01T00:00:00Z"),
        # (and as before: the signed expiry, or the lifetime from the log time, whichever is
        # first; an approval dated 0001 lasts from its log time as long as it says)
        ("2026-01-02T00:00:00Z", "2026-01-05T00:00:00Z", "expired at 2026-01-05T00:00:00Z"),
        ("2026-01-02T00:02:00Z", "2026-01-09T00:02:00Z", "expired at 2026-01-09T00:00:10Z"),
        ("2025-12-30T00:00:00Z", "2026-01-12T00:00:00Z", None),
    ]
    for approved_at, expires, why in cases:
        node = Node("decision", "admission")
        got = approvals(node, "ds@1", [_approval(approved_at, expires, logged)], POLICY, "train",
                        10, at)
        assert got == (set() if why else {APPROVER.keyid}), (approved_at, expires)
        assert why is None or why in node.checks[-1].detail, node.checks[-1].detail


def test_a_compromised_key_without_its_keyid_is_named_with_its_compromise() -> None:
    """redo15 finding 3: a record signed by a key the policy declares compromised is refused
    naming the key, the policy that says so and from when. A keyid is only a hint: with the
    envelope's keyid left out (or another one written), the refusal said "(no keyid) (not in
    the policy)", hiding why. Now the compromised key that made the signature is found."""
    import dataclasses

    from trajledger.verify.dsse import Envelope

    successor = judge_policy(2, STRANGER, f'[[revoked_keys]]\nkey = "{APPROVER.keyid}"\n'
                                          'compromised_since = 5\nreason = "laptop stolen"\n')
    policy = dataclasses.replace(successor, earlier=((9, POLICY),))  # serial 1 until index 9
    entry, data = revocation(digest("batch"), APPROVER)
    env = Envelope.from_bytes(data)
    for keyid in ("", STRANGER.keyid, "0" * 64):
        unnamed = dataclasses.replace(env, signatures=tuple(
            dataclasses.replace(s, keyid=keyid) for s in env.signatures))
        raw = envelope_bytes(unnamed)
        rec = judge_record(7, dataclasses.replace(entry, envelope=digest_of(raw)), raw, policy,
                           nothing)
        assert isinstance(rec, RecordFailure) and not rec.damaged
        assert (f"key {APPROVER.keyid[:12]} (found by its signature; the envelope names "
                f"{keyid[:12] or 'no keyid'}) (revoked by policy 'judge' serial 2: compromised "
                "since log index 5: laptop stolen)") in rec.message, (keyid, rec.message)
    # Before the compromise the same signature counts.
    ok = judge_record(4, entry, data, policy, nothing)
    assert isinstance(ok, Record) and ok.signers == {APPROVER.keyid}


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
