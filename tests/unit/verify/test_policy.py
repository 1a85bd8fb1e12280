"""Trust policies (``verify.policy``): parsing, validation, identity, succession, history.

- The TOML form: every setting, keys by file, inline PEM or keyid, and one clear refusal per
  kind of mistake (each message names the setting).
- The JSON form round-trips and has one digest.
- ``check_successor``, ``policy_from_record`` and ``follow_history``: one test per attack
  (rollback, replay, too few approvers, wrong subject, a first policy not self-signed).
- ``keys/example-policy.toml`` parses, and ``keys/README.md`` shows exactly that file.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from trajledger.ledger.encode import envelope_bytes, vkey_string
from trajledger.ledger.keys import Signer
from trajledger.ledger.signing import sign_statement
from trajledger.verify import predicates
from trajledger.verify.errors import DigestMismatchError, FormatError, PolicyError, SignatureError
from trajledger.verify.policy import (
    ROLES,
    Identity,
    TrustPolicy,
    parse_duration,
    policy_digest,
)
from trajledger.verify.policy_history import follow_history
from trajledger.verify.policy_settings import published
from trajledger.verify.succession import check_successor, policy_from_record

ROOT = Path(__file__).resolve().parents[3]
LOG_VKEY = vkey_string("test/log", bytes(range(32)))
WITNESS_VKEY = vkey_string("witness", bytes(range(1, 33)), 0x04)

SIGNERS = {n: Signer.generate(n) for n in ("vendor", "a", "b", "c", "trainer")}


def pem(name: str) -> str:
    return SIGNERS[name].public.to_pem().decode("ascii")


@pytest.fixture
def keydir(tmp_path: Path) -> Path:
    for name, s in SIGNERS.items():
        (tmp_path / f"{name}.pub").write_bytes(s.public.to_pem())
    return tmp_path


def toml(
    serial: int = 1, approvers: Sequence[str] = ("a", "b"), threshold: int = 2, extra: str = ""
) -> bytes:
    keys = ", ".join(f'"{a}.pub"' for a in approvers)
    return f"""
name = "p"
serial = {serial}
{extra}
[roles.producer]
keys = ["vendor.pub"]
[roles.approver]
keys = [{keys}]
threshold = {threshold}
[roles.trainer]
keys = ["trainer.pub"]
[roles.log]
vkeys = ["{LOG_VKEY}"]
""".encode()


def parse(keydir: Path, data: bytes) -> TrustPolicy:
    return TrustPolicy.from_toml(data, keydir, "policy p.toml")


# -- parsing ----------------------------------------------------------------------------------


def test_a_full_policy(keydir: Path) -> None:
    p = parse(keydir, toml(extra='max_approval_age = "2w"'))
    assert (p.name, p.serial, p.max_approval_age) == ("p", 1, 14 * 86400)
    assert set(p.roles) == set(ROLES)
    assert p.role("approver").threshold == 2
    assert p.role("approver").keyids == {SIGNERS["a"].keyid, SIGNERS["b"].keyid}
    assert p.holds("producer", SIGNERS["vendor"].keyid)
    assert not p.holds("approver", SIGNERS["vendor"].keyid)
    assert p.role("trainer").threshold == 1  # default with members
    assert p.role("witness").threshold == 0 and not p.role("witness").vkeys
    assert p.allowed_predicate_types == predicates.ALL  # default: every known type
    assert [v.name for v in p.role("log").note_verifiers()] == ["test/log"]


def test_defaults_of_a_minimal_policy() -> None:
    p = TrustPolicy.from_toml(b"", None)
    assert (p.name, p.serial, p.max_approval_age) == ("policy", 1, 90 * 86400)
    assert all(not r.keys and not r.vkeys and r.threshold == 0 for r in p.roles.values())


def test_keys_inline_absolute_and_by_keyid(keydir: Path) -> None:
    absolute = keydir / "trainer.pub"
    keyid = SIGNERS["c"].keyid
    data = f'''
[roles.producer]
keys = ["""{pem("vendor")}"""]
[roles.trainer]
keys = ["{absolute}"]
[roles.approver]
keys = ["{keyid}", "sha256:{SIGNERS["a"].keyid}"]
'''.encode()
    found = {SIGNERS["c"].keyid: SIGNERS["c"].public, SIGNERS["a"].keyid: SIGNERS["a"].public}
    p = TrustPolicy.from_toml(data, keydir, key_lookup=found.get)
    assert p.holds("producer", SIGNERS["vendor"].keyid)
    assert p.holds("trainer", SIGNERS["trainer"].keyid)
    assert p.role("approver").keyids == set(found)
    with pytest.raises(FormatError, match=rf"keyid {keyid[:16]}… is not a key of this ledger"):
        TrustPolicy.from_toml(data, keydir)


def test_a_lookup_returning_another_key_is_refused(keydir: Path) -> None:
    keyid = SIGNERS["c"].keyid
    data = f'[roles.approver]\nkeys = ["{keyid}"]\n'.encode()
    with pytest.raises(FormatError, match=rf"key found for {keyid[:16]}… has keyid "):
        TrustPolicy.from_toml(data, keydir, key_lookup=lambda k: SIGNERS["a"].public)


def test_identities_count_as_members(keydir: Path) -> None:
    data = b"""
[roles.producer]
keys = ["vendor.pub"]
identities = [{ issuer = "https://accounts.example.com", subject = "ci@example.com" }]
threshold = 2
"""
    p = parse(keydir, data)
    (ident,) = p.role("producer").identities
    assert (ident.issuer, ident.subject) == ("https://accounts.example.com", "ci@example.com")
    assert p.role("producer").threshold == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"name = [", "policy p.toml: not valid TOML: "),
        (b"\xff", "policy p.toml: not valid TOML: "),
        (b"colour = 1", "policy p.toml: unknown setting(s) colour; known: "),
        (b"serail = 2", "policy p.toml: unknown setting(s) serail (did you mean serial?)"),
        (b"format = 4", "policy p.toml: format 4, want one of (1, 2, 3)"),
        (b'format = 2\npublish = ["revocation"]', "policy p.toml: publish need format = 3 (the "
         "policy states format 2)"),
        (b'format = 3\npublish = ["revocations"]', "policy p.toml: publish: unknown kind "
         "'revocations', want some of "),
        (b'format = 3\npublish = ["erasure", "erasure"]', "publish: an item is listed twice"),
        (b"[roles.evaluator]", "policy p.toml: roles.evaluator need format = 2"),
        (b"format = 2\n[release]\napprovals = 1", "release: require names no suite"),
        (b'name = ""', "policy p.toml: name must be a non-empty string"),
        (b"serial = 0", "policy p.toml: serial must be a positive integer, got 0"),
        (b'serial = "2"', "policy p.toml: serial must be a positive integer, got '2'"),
        (b"serial = true", "policy p.toml: serial must be a positive integer, got True"),
        (b'max_approval_age = "3y"', "policy p.toml: max_approval_age: '3y' is not a duration"),
        (b"max_approval_age = 0", "policy p.toml: max_approval_age is 0, no approval could"),
        (b'allowed_predicate_types = "all"', "allowed_predicate_types must be a list of URIs"),
        (
            b'allowed_predicate_types = ["https://x/v1"]',
            "allowed_predicate_types: unknown type(s) https://x/v1; known: ",
        ),
        (b"roles = 1", "policy p.toml: roles must be a table"),
        (
            b"[roles.auditor]",
            "policy p.toml: unknown role(s) auditor (did you mean evaluator?); known: approver, "
            "evaluator, log, producer, trainer, witness",
        ),
        (b"[roles]\nproducer = 1", "policy p.toml: role producer: must be a table"),
        (
            b"[roles.producer]\ntreshold = 1",
            "role producer: unknown field(s) treshold (did you mean threshold?)",
        ),
        (b'[roles.producer]\nvkeys = ["x"]', "role producer: unknown field(s) vkeys"),
        (b'[roles.log]\nkeys = ["x"]', "role log: unknown field(s) keys"),
        (b'[roles.producer]\nkeys = "vendor.pub"', "role producer: keys: must be a list"),
        (b"[roles.producer]\nkeys = [1]", "role producer: key 0: must be a PEM string, a path"),
        (b'[roles.producer]\nkeys = ["nobody.pub"]', "role producer: key 0: cannot read key file "),
        (
            b'[roles.producer]\nkeys = ["-----BEGIN PUBLIC KEY-----\\nAAAA\\n-----END PUBLIC '
            b'KEY-----\\n"]',
            "role producer: key 0",
        ),
        (
            b'[roles.producer]\nkeys = ["vendor.pub", "vendor.pub"]',
            "role producer: the same key is listed twice",
        ),
        (
            b'[roles.producer]\nidentities = [{ issuer = "i" }]',
            "role producer: identity 0 must have exactly issuer and subject",
        ),
        (
            b'[roles.producer]\nidentities = [{ issuer = "i", subjct = "s" }]',
            "role producer: identity 0: unknown field(s) subjct (did you mean subject?)",
        ),
        (
            b'[roles.producer]\nidentities = [{ issuer = "", subject = "s" }]',
            "role producer: identity 0 issuer and subject must be non-empty strings",
        ),
        (b'[roles.log]\nvkeys = ["not a vkey"]', "role log: vkey 0: verifier key 'not a vkey'"),
        (b"[roles.log]\nvkeys = [1]", "role log: vkey 0 must be a string"),
        (
            b"[roles.producer]\nthreshold = -1",
            "role producer: threshold must be a non-negative integer, got -1",
        ),
        (
            b"[roles.producer]\nthreshold = true",
            "role producer: threshold must be a non-negative integer, got True",
        ),
        (
            b'[roles.producer]\nkeys = ["vendor.pub"]\nthreshold = 2',
            "role producer: threshold 2 but only 1 member(s)",
        ),
        (
            b'[roles.producer]\nkeys = ["vendor.pub"]\nthreshold = 0',
            "role producer: threshold 0 would accept anything; use at least 1",
        ),
        (
            b'[roles.approver]\nkeys = ["vendor.pub"]\n[roles.producer]\nkeys = ["vendor.pub"]',
            "holds both approver and producer; approvers need keys of their own",
        ),
        (
            b'[roles.approver]\nkeys = ["trainer.pub"]\n[roles.trainer]\nkeys = ["trainer.pub"]',
            "holds both approver and trainer; approvers need keys of their own",
        ),
    ],
)
def test_invalid_policies_are_refused(keydir: Path, data: bytes, message: str) -> None:
    with pytest.raises(FormatError) as e:
        parse(keydir, data)
    assert message in str(e.value)
    assert str(e.value).startswith("policy p.toml")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'accepted_licences = "MIT"', "accepted_licences: must be a list"),
        (b'accepted_licences = ["MIT", ""]', "accepted_licences: item 1 must be a licence"),
        (b"accepted_licences = [1]", "accepted_licences: item 0 must be a licence (an SPDX id)"),
        (b'accepted_licences = ["MIT", "mit"]', "accepted_licences: a licence is listed twice"),
        (b'[roles.witness]\nlogs = ["a/log"]', "role witness: logs is set but threshold is 0"),
        (b'[roles.witness]\nlogs = "a/log"', "role witness: logs: must be a list"),
        (b'[roles.log]\nlogs = ["a/log"]', "role log: unknown field(s) logs"),
        (b'[roles.producer]\nlogs = ["a/log"]', "role producer: unknown field(s) logs"),
    ],
)
def test_invalid_terms_and_witness_settings(keydir: Path, data: bytes, message: str) -> None:
    with pytest.raises(FormatError) as e:
        parse(keydir, data)
    assert message in str(e.value) and str(e.value).startswith("policy p.toml")


def test_accepted_licences_and_witnessed_logs(keydir: Path) -> None:
    extra = (f'accepted_licences = ["CC-BY-4.0", "MIT"]\n[roles.witness]\nvkeys = '
             f'["{WITNESS_VKEY}"]\nthreshold = 1\nlogs = ["vendor.example/log"]')  # fmt: skip
    p = parse(keydir, toml().replace(b"[roles.producer]", extra.encode() + b"\n[roles.producer]"))
    assert p.accepted_licences == ("CC-BY-4.0", "MIT")
    assert p.licence_problem("cc-by-4.0") is None and p.licence_problem("MIT") is None
    assert p.licence_problem("GPL-3.0") == (
        "licence 'GPL-3.0' is not accepted by policy 'p' (accepted: CC-BY-4.0, MIT)"
    )
    assert p.licence_problem(None) == "the batch states no licence; policy 'p' accepts only " \
        "CC-BY-4.0, MIT"  # fmt: skip
    w = p.role("witness")
    assert w.witnessed("vendor.example/log") and not w.witnessed("lab.example/log")
    assert parse(keydir, toml()).licence_problem(None) is None  # no setting: no restriction
    again = TrustPolicy.from_json(p.to_json())
    assert again.to_json() == p.to_json() and policy_digest(again) == policy_digest(p)
    assert p.to_json()["accepted_licences"] == ["CC-BY-4.0", "MIT"]
    assert p.to_json()["roles"]["witness"]["logs"] == ["vendor.example/log"]
    plain = parse(keydir, toml()).to_json()
    assert "accepted_licences" not in plain and "logs" not in plain["roles"]["witness"]


@pytest.mark.parametrize(
    ("extra", "loaded"),
    [
        ("", False),
        ('accepted_licences = ["MIT"]', True),
        ('publish = ["revocation"]', True),
        (f'[roles.witness]\nvkeys = ["{WITNESS_VKEY}"]\nthreshold = 1', True),
        ('[roles.evaluator]\nidentities = [{issuer = "https://i.example", subject = "s"}]', True),
    ],
)
def test_settings_a_key_signed_policy_does_without_load_only_when_present(
    keydir: Path, extra: str, loaded: bool
) -> None:
    """``verify.policy_settings`` reads licences, publish, witnesses, identities... and loads
    only for a policy that has one (a fresh interpreter: nothing else loaded it)."""
    data = toml(extra="format = 3\n" + extra)
    code = ("import sys; from pathlib import Path; from trajledger.verify.policy import "
            "TrustPolicy; p = TrustPolicy.from_toml(sys.stdin.buffer.read(), Path(sys.argv[1])); "
            "print('trajledger.verify.policy_settings' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code, str(keydir)], input=data,
                         capture_output=True, check=False,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0, run.stderr
    assert run.stdout.decode().strip() == str(loaded)


def test_a_vkey_listed_twice(keydir: Path) -> None:
    data = f'[roles.witness]\nvkeys = ["{WITNESS_VKEY}", "{WITNESS_VKEY}"]\n'.encode()
    with pytest.raises(FormatError, match="role witness: vkey 1 is listed twice"):
        parse(keydir, data)


def test_one_note_key_under_two_names_is_refused(keydir: Path) -> None:
    """Issue 18: a member counts once however it is named: one witness key as w and w-alias is
    refused (its cosignature line copied under the other name would verify too); so is the
    log's own key among the witnesses."""
    alias = vkey_string("witness-alias", bytes(range(1, 33)), 0x04)
    data = f'[roles.witness]\nvkeys = ["{WITNESS_VKEY}", "{alias}"]\nthreshold = 2\n'.encode()
    with pytest.raises(FormatError, match=re.escape(
        "role witness: vkey 1 (witness-alias) is the key of vkey 0 (witness) under another "
        "name: a member counts once however it is named")):
        parse(keydir, data)
    itself = vkey_string("log-as-witness", bytes(range(32)), 0x04)
    data = (f'[roles.log]\nvkeys = ["{LOG_VKEY}"]\n[roles.witness]\nvkeys = ["{itself}"]\n'
            ).encode()
    with pytest.raises(FormatError, match="role witness: log-as-witness is the key of the log "
                       "role; a witness needs a key of its own"):
        parse(keydir, data)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30d", 2592000),
        ("12h", 43200),
        ("90m", 5400),
        ("2w", 1209600),
        ("45s", 45),
        (0, 0),
        (7, 7),
        (" 1d ", 86400),
    ],
)
def test_parse_duration(value: object, seconds: int) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "1", "1y", "-1d", "1.5d", -3, True, None, 1.0, "d"])
def test_parse_duration_refuses(value: object) -> None:
    with pytest.raises(FormatError, match="is not a duration such as"):
        parse_duration(value, "--expires")


# -- the JSON form and the digest -------------------------------------------------------------


def test_json_round_trip_and_digest(keydir: Path) -> None:
    extra = f'max_approval_age = "1d"\n[roles.witness]\nvkeys = ["{WITNESS_VKEY}"]\nthreshold = 1'
    p = parse(keydir, toml().replace(b"[roles.producer]", extra.encode() + b"\n[roles.producer]"))
    again = TrustPolicy.from_json(p.to_json())
    assert again.to_json() == p.to_json()
    assert policy_digest(again) == policy_digest(p)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", policy_digest(p))
    assert policy_digest(parse(keydir, toml(serial=2))) != policy_digest(parse(keydir, toml()))
    # The JSON form is self-contained: no file references.
    body = p.to_json()
    body["roles"]["producer"]["keys"] = ["vendor.pub"]
    with pytest.raises(FormatError, match="keys must be inline PEM in the JSON form"):
        TrustPolicy.from_json(body)
    with pytest.raises(FormatError, match="policy: must be an object"):
        TrustPolicy.from_json([])


# -- succession ---------------------------------------------------------------------------------


def test_check_successor(keydir: Path) -> None:
    current = parse(keydir, toml())
    new = parse(keydir, toml(serial=2, approvers=("a", "c"), threshold=1))
    ids = frozenset({SIGNERS["a"].keyid, SIGNERS["b"].keyid})
    check_successor(current, new, ids)
    with pytest.raises(PolicyError, match=(
        r"^policy 'p': serial 1 does not follow serial 1; a successor needs a higher serial "
        r"\(serial = 2\)$"
    )):
        check_successor(current, parse(keydir, toml()), ids)
    with pytest.raises(
        PolicyError,
        match=r"^policy 'p' serial 2: signed by 1 of the current policy's approvers, want 2$",
    ):
        # The new policy's own approver (c) does not count: only the current approvers do.
        check_successor(current, new, frozenset({SIGNERS["a"].keyid, SIGNERS["c"].keyid}))
    with pytest.raises(PolicyError, match="does not follow serial 2"):
        check_successor(new, current, ids)


def test_a_policy_without_approvers_or_producers_has_no_successor(keydir: Path) -> None:
    current = TrustPolicy.from_toml(b"", None)
    new = parse(keydir, toml(serial=2))
    with pytest.raises(PolicyError, match="signed by 0 of the current policy's producers, want 1"):
        check_successor(current, new, frozenset({SIGNERS["a"].keyid}))


VENDOR_ONLY = f"""
name = "vendor"
format = 3
publish = ["revocation", "erasure"]
[roles.producer]
keys = ["vendor.pub"]
[roles.log]
vkeys = ["{LOG_VKEY}"]
"""


def test_a_vendor_policy_is_signed_by_its_producers(keydir: Path) -> None:
    """Issue 19: a policy with only producer and log roles records and exports; its first
    record and its successors are signed by its producers, not by approvers it does not have."""
    vendor = parse(keydir, VENDOR_ONLY.encode())
    assert vendor.signing_role() == "producer" and not vendor.role("approver").keys
    assert published(vendor) == ("revocation", "erasure")
    assert vendor.to_json()["publish"] == ["revocation", "erasure"]
    assert TrustPolicy.from_json(vendor.to_json()) == vendor  # the JSON form keeps it
    assert published(parse(keydir, toml())) == ("revocation", "erasure", "trust-policy")
    assert "publish" not in parse(keydir, toml()).to_json()  # older digests unchanged
    d1, e1 = record(vendor, ["vendor"])
    second = parse(keydir, VENDOR_ONLY.replace('name = "vendor"', 'name = "vendor"\nserial = 2')
                   .encode())
    d2, e2 = record(second, ["vendor"])
    d3, e3 = record(parse(keydir, toml(serial=3)), ["a", "b"])  # not the producers: ignored
    policy, notes = follow_history(None, [(0, d1, e1), (4, d2, e2), (9, d3, e3)])
    assert policy is not None and (policy.name, policy.serial) == ("vendor", 2), notes
    assert notes[-1].startswith("policy at log index 9: ignored: ") and "no signature by a " \
        "trusted key" in notes[-1]
    with pytest.raises(PolicyError, match="signed by 0 of the current policy's producers"):
        check_successor(vendor, second, frozenset({SIGNERS["a"].keyid}))
    check_successor(vendor, second, frozenset({SIGNERS["vendor"].keyid}))


def record(
    p: TrustPolicy,
    signers: Sequence[str],
    subject: str | None = None,
    ptype: str = predicates.TRUST_POLICY,
) -> tuple[str, bytes]:
    digest = subject or policy_digest(p)
    env = sign_statement(
        [(f"{p.name}#{p.serial}", digest)],
        ptype,
        {"policy": p.to_json()},
        [SIGNERS[s] for s in signers],
    )
    return digest, envelope_bytes(env)


def test_policy_from_record(keydir: Path) -> None:
    p = parse(keydir, toml())
    digest, env = record(p, ["a", "b"])
    got, signers = policy_from_record(env, digest, p, "policy at log index 0")
    assert policy_digest(got) == digest
    assert signers == {SIGNERS["a"].keyid, SIGNERS["b"].keyid}

    _, one = record(p, ["a", "vendor"])
    with pytest.raises(SignatureError, match="1 of 2 required signature"):
        policy_from_record(one, digest, p, "policy at log index 0")
    other = parse(keydir, toml(serial=3))
    wrong_digest, wrong = record(other, ["a", "b"], subject=digest)
    with pytest.raises(DigestMismatchError, match=r"policy hashes to sha256:\w+, want "):
        policy_from_record(wrong, digest, p, "policy at log index 0")
    assert wrong_digest == digest
    _, files = record(p, ["a", "b"], ptype=predicates.FILES)
    with pytest.raises(PolicyError, match="is not allowed here"):
        policy_from_record(files, digest, p, "policy at log index 0")
    with pytest.raises(PolicyError, match="has no approver or producer keys"):
        policy_from_record(env, digest, TrustPolicy.from_toml(b"", None), "x")


def test_follow_history(keydir: Path) -> None:
    one = parse(keydir, toml())
    two = parse(keydir, toml(serial=2, approvers=("a", "c"), threshold=2))
    three_bad = parse(keydir, toml(serial=3))
    back = parse(keydir, toml(serial=1, approvers=("a", "b"), threshold=1))
    d1, e1 = record(one, ["a", "b"])
    d2, e2 = record(two, ["a", "b"])  # signed by the approvers of one
    d3, e3 = record(three_bad, ["a", "b"])  # b is no approver of two: 1 of 2
    d4, e4 = record(back, ["a", "c"])  # a rollback of the serial
    records = [(0, d1, e1), (5, d2, e2), (9, d3, e3), (12, d4, e4)]

    assert follow_history(None, []) == (None, [])
    policy, notes = follow_history(None, records)
    assert policy is not None and policy.serial == 2
    assert notes[0] == "policy 'p' serial 1: first policy, log index 0"
    assert notes[1] == "policy 'p' serial 2: in force from log index 5"
    assert notes[2].startswith("policy at log index 9: ignored: policy at log index 9: ")
    assert "1 of 2 required signature(s)" in notes[2]
    assert notes[3].startswith("policy at log index 12: ignored: policy 'p': serial 1 does not")

    policy, notes = follow_history(one, records)  # a verifier holding policy one
    assert policy is not None and policy.serial == 2
    assert notes[0] == "policy 'p' serial 1: recorded at log index 0"

    four = parse(keydir, toml(serial=4))
    policy, notes = follow_history(four, records)  # not in the log: used as given
    assert policy is four
    assert notes == ["policy 'p' serial 4: used as given (not recorded in the log)"]


def test_history_judges_each_record_by_the_policy_it_was_signed_under(keydir: Path) -> None:
    one = parse(keydir, toml())
    two = parse(keydir, toml(serial=2).replace(b'"vendor.pub"', b'"c.pub"'))
    three = parse(keydir, toml(serial=3).replace(b'"vendor.pub"', b'"trainer.pub"')
                  .replace(b'[roles.trainer]\nkeys = ["trainer.pub"]', b""))
    d1, e1 = record(one, ["a", "b"])
    d2, e2 = record(two, ["a", "b"])
    d3, e3 = record(three, ["a", "b"])
    policy, _ = follow_history(None, [(0, d1, e1), (5, d2, e2), (9, d3, e3)])
    assert policy is not None and policy.serial == 3
    # Up to the successor's own record (signed by the approvers it replaces), the old policy.
    assert [policy.policy_at(i).serial for i in (0, 4, 5, 6, 9, 10, 99)] == [1, 1, 1, 2, 2, 3, 3]
    assert policy.policy_at(3).holds("producer", SIGNERS["vendor"].keyid)
    assert not policy.holds("producer", SIGNERS["vendor"].keyid)
    # History is not content: the digest is the policy's own.
    assert policy_digest(policy) == d3 and policy == three
    # A trusted policy not in the log has no history: it judges everything.
    assert parse(keydir, toml(serial=4)).policy_at(0).serial == 4


def test_revoked_keys(keydir: Path) -> None:
    vendor = SIGNERS["vendor"].keyid
    extra = (
        '[[revoked_keys]]\nkey = "b.pub"\ncompromised_since = 7\nreason = "laptop stolen"\n'
        f'[[revoked_keys]]\nkey = "sha256:{vendor}"\ncompromised_since = "2025-01-02T03:04:05Z"\n'
    )
    # The trainer's key produces; the vendor's and b's keys hold no role (they are revoked).
    text = toml(approvers=("a", "c"), threshold=1)
    text = text.replace(b'[roles.trainer]\nkeys = ["trainer.pub"]', b"")
    text = text.replace(b'keys = ["vendor.pub"]', b'keys = ["trainer.pub"]')
    p = parse(keydir, text + extra.encode())
    b = SIGNERS["b"].keyid
    assert p.revocation(b, 6, "2030-01-01T00:00:00Z") is None
    revoked = p.revocation(b, 7, "2000-01-01T00:00:00Z")
    assert revoked is not None
    assert revoked.describe() == "compromised since log index 7: laptop stolen"
    assert p.revocation(vendor, 0, "2025-01-02T03:04:04Z") is None
    assert p.revocation(vendor, 0, "2025-01-02T03:04:05Z") is not None
    # The JSON form names keys by keyid, and round-trips.
    body = p.to_json()
    assert body["revoked_keys"][0] == {"key": b, "compromised_since": 7, "reason": "laptop stolen"}
    assert TrustPolicy.from_json(body).to_json() == body
    # Policies without revocations keep their digests: the setting is written only when set.
    assert "revoked_keys" not in parse(keydir, toml()).to_json()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('key = "vendor.pub"\ncompromised_since = 3',
         r"revoked_keys: key [0-9a-f]{16} still holds the producer role; remove it from the role"),
        ('key = "x.pub"\ncompromised_since = 3', r"revoked_keys item 0: key: cannot read key file"),
        ('key = "c.pub"\ncompromised_since = -1', r"compromised_since must be a log index"),
        ('key = "c.pub"\ncompromised_since = 2025-01-01T00:00:00Z',
         r"compromised_since must be a log index .* \(a quoted string\)"),
        ('key = "c.pub"\ncompromised_since = "yesterday"', r"is not of the form"),
        ('key = "c.pub"', r"compromised_since must be"),
        ('key = "c.pub"\ncompromised_since = 1\nwhen = 2', r"unknown field\(s\) when"),
        ('key = "c.pub"\ncompromised_since = 1\nreason = ""', r"reason must be a non-empty"),
    ],
)
def test_invalid_revocations(keydir: Path, entry: str, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        parse(keydir, toml() + f"[[revoked_keys]]\n{entry}\n".encode())
    with pytest.raises(FormatError, match=r"revoked_keys item 1: key [0-9a-f]{16} is listed twice"):
        parse(keydir, toml() + b'[[revoked_keys]]\nkey = "c.pub"\ncompromised_since = 1\n' * 2)


def test_a_successor_keeps_every_revocation(keydir: Path) -> None:
    revoking = b'[[revoked_keys]]\nkey = "c.pub"\ncompromised_since = 4\n'
    current = parse(keydir, toml() + revoking)
    ids = frozenset({SIGNERS["a"].keyid, SIGNERS["b"].keyid})
    check_successor(current, parse(keydir, toml(serial=2) + revoking.replace(b"4", b"2")), ids)
    with pytest.raises(
        PolicyError,
        match=r"^policy 'p' serial 2: drops the revocation of key [0-9a-f]{16} \(serial 1 "
        r"revokes it\); a revoked key stays revoked$",
    ):
        check_successor(current, parse(keydir, toml(serial=2)), ids)


ISSUER = "https://token.actions.githubusercontent.com"
WORKFLOW = "https://github.com/v/r/.github/workflows/record.yml@refs/heads/main"


def _revoked_identity(since: str = "5", subject: str = WORKFLOW, extra: str = "") -> bytes:
    return (f'[[revoked_identities]]\nissuer = "{ISSUER}"\nsubject = "{subject}"\n'
            f"compromised_since = {since}\n{extra}").encode()


def test_revoked_identities(keydir: Path) -> None:
    """A compromised Sigstore identity is distrusted from a point of the log on, as a key."""
    p = parse(keydir, toml() + _revoked_identity(extra='reason = "workflow hijacked"\n'))
    who = Identity(ISSUER, WORKFLOW)
    assert p.revocation(who, 4, "2030-01-01T00:00:00Z") is None
    revoked = p.revocation(who, 5, "2000-01-01T00:00:00Z")
    assert revoked is not None
    assert revoked.describe() == "compromised since log index 5: workflow hijacked"
    assert p.revocation(Identity(ISSUER, "other"), 9, "2030-01-01T00:00:00Z") is None
    timed = parse(keydir, toml() + _revoked_identity('"2025-01-02T03:04:05Z"'))
    assert timed.revocation(who, 0, "2025-01-02T03:04:04Z") is None
    assert timed.revocation(who, 0, "2025-01-02T03:04:05Z") is not None
    body = p.to_json()
    assert body["revoked_identities"] == [{"issuer": ISSUER, "subject": WORKFLOW,
                                           "compromised_since": 5,
                                           "reason": "workflow hijacked"}]
    assert TrustPolicy.from_json(body).to_json() == body
    assert "revoked_identities" not in parse(keydir, toml()).to_json()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_revoked_identity("-1"), r"revoked_identities item 0: compromised_since must be"),
        (_revoked_identity(subject=""), r"issuer and subject must be non-empty strings"),
        (_revoked_identity(extra="key = 1\n"), r"unknown field\(s\) key"),
        (_revoked_identity() * 2, r"revoked_identities item 1: .* is listed twice"),
    ],
)
def test_invalid_identity_revocations(keydir: Path, text: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        parse(keydir, toml() + text)
    # A revoked identity that still holds a role would be trusted and distrusted at once.
    holds = toml().replace(
        b'[roles.trainer]\nkeys = ["trainer.pub"]',
        f'[roles.trainer]\nkeys = ["trainer.pub"]\n'
        f'identities = [{{issuer = "{ISSUER}", subject = "{WORKFLOW}"}}]'.encode(),
    )
    with pytest.raises(FormatError, match=r"revoked_identities: .* still holds the trainer role"):
        parse(keydir, holds + _revoked_identity())


def test_a_successor_keeps_every_identity_revocation(keydir: Path) -> None:
    current = parse(keydir, toml() + _revoked_identity())
    ids = frozenset({SIGNERS["a"].keyid, SIGNERS["b"].keyid})
    check_successor(current, parse(keydir, toml(serial=2) + _revoked_identity("2")), ids)
    with pytest.raises(PolicyError, match=r"drops the revocation of identity "
                       r".*record\.yml@refs/heads/main \(https://token.*; serial 1 revokes it\); "
                       r"a revoked identity stays revoked$"):
        check_successor(current, parse(keydir, toml(serial=2)), ids)


def test_a_first_policy_must_be_self_signed(keydir: Path) -> None:
    p = parse(keydir, toml())
    digest, env = record(p, ["a"])
    policy, notes = follow_history(None, [(0, digest, env)])
    assert policy is None
    assert notes[0].startswith("policy at log index 0: not valid as a first policy: ")
    policy, notes = follow_history(None, [(0, digest, b"{}")])
    assert policy is None


# -- the documented example ---------------------------------------------------------------------


def test_example_policy_parses() -> None:
    path = ROOT / "keys" / "example-policy.toml"
    p = TrustPolicy.from_toml(path.read_bytes(), path.parent, str(path))
    assert p.role("approver").threshold == 2 and len(p.role("approver").keys) == 2
    assert p.role("witness").vkeys and p.role("witness").threshold == 0
    assert p.role("producer").identities
    for pub in (ROOT / "keys" / "example").iterdir():
        assert pub.suffix == ".pub"
        assert b"PRIVATE" not in pub.read_bytes()


def test_readme_shows_the_example_policy() -> None:
    readme = (ROOT / "keys" / "README.md").read_text("utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", readme, re.S)
    example = (ROOT / "keys" / "example-policy.toml").read_text("utf-8")
    assert example in blocks


def test_a_keyid_not_in_lower_case_is_refused(keydir: Path) -> None:
    """redo15 finding 1: keyids are compared as written; an upper-case one was read as a file
    name (TOML) or refused as not inline PEM (JSON, a vendor's signed policy), never with the
    reason. One line saying it, in a role, in ``revoked_keys`` and in the JSON form."""
    upper = SIGNERS["c"].keyid.upper()
    found = {SIGNERS["c"].keyid: SIGNERS["c"].public}
    for spec in (upper, f"sha256:{upper}"):
        data = f'[roles.approver]\nkeys = ["{spec}"]\n'.encode()
        with pytest.raises(FormatError, match=f"keyid {upper[:16]}… must be written in "
                                              "lower-case hex"):
            TrustPolicy.from_toml(data, keydir, key_lookup=found.get)
    extra = f'[[revoked_keys]]\nkey = "{upper}"\ncompromised_since = 0\n'.encode()
    with pytest.raises(FormatError, match=r"revoked_keys item 0: key: keyid .* lower-case hex"):
        parse(keydir, toml() + extra)
    body = parse(keydir, toml()).to_json()
    body["revoked_keys"] = [{"key": upper, "compromised_since": 0}]
    with pytest.raises(FormatError, match="lower-case hex"):
        TrustPolicy.from_json(body)


# -- [contamination] (holdout22) ---------------------------------------------------------------


def test_contamination_is_optional_and_keeps_old_digests(keydir: Path) -> None:
    """A policy without ``[contamination]`` refuses exact duplicates only, as before, and its
    JSON form (so its digest) has no such key; ``refuse = "exact"`` written out is another
    policy (another digest) that behaves the same."""
    old = parse(keydir, toml())
    assert old.contamination is None and "contamination" not in old.to_json()
    same = parse(keydir, toml(extra='[contamination]\nrefuse = "exact"'))
    assert same.contamination is not None and same.contamination.refuse == "exact"
    assert same.contamination.thresholds() == {"text": 0.8, "numeric": 0.995}
    assert policy_digest(same) != policy_digest(old)


def test_contamination_round_trips_through_json(keydir: Path) -> None:
    p = parse(keydir, toml(extra='[contamination]\nrefuse = "near"\ntext_threshold = 0.7'))
    assert p.to_json()["contamination"] == {"refuse": "near", "text_threshold": "0.7"}
    again = TrustPolicy.from_json(p.to_json())
    assert again.contamination == p.contamination
    assert policy_digest(again) == policy_digest(p)
    assert again.contamination is not None
    assert again.contamination.thresholds() == {"text": 0.7, "numeric": 0.995}


def test_contamination_runs_near_is_written_only_when_set(keydir: Path) -> None:
    """``runs = "near"`` (the lead, twelfth round) is in the JSON form and the policy's line;
    ``runs = "exact"``, the default, is not written, so it is the same policy as without it."""
    p = parse(keydir, toml(extra='[contamination]\nruns = "near"'))
    assert p.contamination is not None and p.contamination.runs == "near"
    assert p.to_json()["contamination"] == {"refuse": "exact", "runs": "near"}
    assert TrustPolicy.from_json(p.to_json()).contamination == p.contamination
    assert p.contamination.describe() == ("  contamination refuses exact duplicates of held-out "
                                          "episodes; a shared run of steps is a near duplicate")
    plain = parse(keydir, toml(extra='[contamination]\nrefuse = "exact"\nruns = "exact"'))
    assert policy_digest(plain) == policy_digest(
        parse(keydir, toml(extra='[contamination]\nrefuse = "exact"')))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('refuse = "all"', "contamination: refuse 'all', want \"exact\" or \"near\""),
        ("refuse = 1", "contamination: refuse 1, want"),
        ('refuse = "near"\ntext_threshold = 0.81', "text_threshold 0.81 must be above 0 and at "
                                                   "most the default 0.8"),
        ('refuse = "near"\nnumeric_threshold = 0', "numeric_threshold 0 must be above 0"),
        ('refuse = "near"\nnumeric_threshold = "x"', "numeric_threshold: 'x' is not a finite"),
        ('refuse = "near"\ntext_threshold = nan', "not valid TOML: the number nan reads as nan"),
        # left34: a TOML float that underflows read as 0.0 (here refused by the range; a
        # [release] bound it made 0: tests/e2e/test_release_bound_strings.py)
        ('refuse = "near"\ntext_threshold = 1e-400', "not valid TOML: the number 1e-400 reads "
                                                     "as 0.0: write one that holds"),
        ("text_threshold = 0.5", "text_threshold is set but refuse is \"exact\""),
        ('refuse = "near"\nthreshold = 0.5', "contamination: unknown setting(s) threshold "
                                             "(did you mean text_threshold?); known: "
                                             "numeric_threshold, refuse, runs, text_threshold"),
        ('runz = "near"', "contamination: unknown setting(s) runz (did you mean runs?)"),
        ('runs = "off"', "contamination: runs 'off', want \"exact\" or \"near\""),
    ],
)
def test_contamination_refusals(keydir: Path, table: str, message: str) -> None:
    """A threshold may only be lowered: a higher one would admit near duplicates the default
    reports; a threshold while only exact duplicates are refused would change nothing."""
    with pytest.raises(FormatError, match=re.escape(message)):
        parse(keydir, toml(extra=f"[contamination]\n{table}"))
    with pytest.raises(FormatError, match="contamination: must be a table"):
        parse(keydir, toml(extra='contamination = "near"'))


def test_the_exporters_declaration_is_its_newest_followed_policys_word(keydir: Path) -> None:
    """left36 (the brief's question on ``TrustPolicy.earlier``): which of the exporter's
    recorded policies declares a key compromised, for `verify.left_out`? The newest its history
    follows to. A successor that drops the declaration is not followed (``check_successor``: a
    revoked key stays revoked), so a thief's (or a careless) policy cannot erase it; one that
    moves its point is the approvers' later word, which the verifier applies to the exporter's
    own log too (`TrustPolicy.revocation` of the policy in force)."""
    from types import SimpleNamespace

    from trajledger.verify.left_out import exporters_declarations
    from trajledger.verify.nodes import Node

    def revoking(since: int) -> str:
        return f'[[revoked_keys]]\nkey = "c.pub"\ncompromised_since = {since}\nreason = "lost"\n'

    d1, e1 = record(parse(keydir, toml(extra=revoking(4))), ["a", "b"])
    d2, e2 = record(parse(keydir, toml(serial=2)), ["a", "b"])  # drops it: not followed
    d3, e3 = record(parse(keydir, toml(serial=3, extra=revoking(8))), ["a", "b"])
    auditor = parse(keydir, toml().replace(b'"vendor.pub"', b'"c.pub"')
                    .replace(b'name = "p"', b'name = "auditor"'))
    evidence = SimpleNamespace(entries=lambda: iter(()), blob=lambda d: None,
                               entry_bytes=lambda i: None)

    def declared(records: list[tuple[int, str, bytes]]) -> list[str]:
        bundle = Node("bundle", "bundle", name="bundle b")
        exporters_declarations(SimpleNamespace(ok=True), bundle, auditor,  # type: ignore[arg-type]
                               records, evidence)  # type: ignore[arg-type]
        return [c.detail for c in bundle.checks]

    said = (f"WARNING: your policy 'auditor' trusts key {SIGNERS['c'].keyid[:12]} as producer, "
            "which the exporter's own policy 'p' serial {} (in this bundle) declares compromised "
            "since log index {}: lost; nothing in this bundle was signed by it since then")
    got = declared([(0, d1, e1), (5, d2, e2)])
    assert len(got) == 1 and got[0].startswith(said.format(1, 4)), got
    got = declared([(0, d1, e1), (5, d2, e2), (9, d3, e3)])
    assert len(got) == 1 and got[0].startswith(said.format(3, 8)), got
