"""ledger.policy_state: policy files with keys inline, what a new policy changes, and who may sign
what (issue 18)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trajledger import Ledger
from trajledger.ledger.encode import vkey_string
from trajledger.ledger.keys import Signer
from trajledger.ledger.policy_state import (
    check_signers,
    inline_keys_toml,
    inline_paths,
    membership_changes,
    path_entries,
    policy_toml,
)
from trajledger.ledger.status import record_policy
from trajledger.verify.errors import FormatError, PolicyError
from trajledger.verify.policy import TrustPolicy, load_policy_file, policy_digest

VKEY = vkey_string("test/ps", bytes(range(32)))


def keys(*names: str) -> dict[str, Signer]:
    return {n: Signer.generate(n) for n in names}


def write(root: Path, ks: dict[str, Signer]) -> Path:
    text = policy_toml(
        "ps",
        {"producer": ([("vendor", ks["vendor"].public)], 1, "producers"),
         "approver": ([(a, ks[a].public) for a in ("a", "b")], 2, ""),
         "trainer": ([("trainer", ks["trainer"].public)], 1, "")},
        VKEY,
        header="# test policy",
    )
    path = root / "policy.toml"
    path.write_text(text)
    return path


def test_keys_inline_name_their_fingerprint_and_parse(tmp_path: Path) -> None:
    ks = keys("vendor", "a", "b", "trainer")
    path = write(tmp_path, ks)
    text = path.read_text()
    assert f"  # vendor: ed25519, fingerprint {ks['vendor'].keyid}\n" in text
    p = load_policy_file(path)
    assert p.role("producer").keyids == {ks["vendor"].keyid}
    assert p.role("approver").threshold == 2 and path_entries(p) == []
    assert inline_keys_toml([]) == "[\n]"


def test_a_keys_comment_stays_on_its_line() -> None:
    """A kept key's name (``kept from serial N (signed … from LOG)``: other parties' words)
    holding a line break cannot end the comment and write TOML of its own."""
    import tomllib

    k = keys("vendor")["vendor"].public
    text = inline_keys_toml([("x\n  \"\"\"\n]\nthreshold = 9\n#", k)])
    assert tomllib.loads(f"keys = {text}") == {"keys": [k.to_pem().decode("ascii")]}


def test_path_entries_are_found_and_written_inline(tmp_path: Path) -> None:
    ks = keys("vendor", "a", "b", "trainer")
    (tmp_path / "k").mkdir()
    for n, k in ks.items():
        (tmp_path / "k" / f"{n}.pub").write_bytes(k.public.to_pem())
    path = tmp_path / "paths.toml"
    path.write_text(
        'name = "ps"\n[roles.producer]\nkeys = ["k/vendor.pub"]  # the producer\n'
        "[roles.approver]\nkeys = ['k/a.pub', \"k/b.pub\"]\nthreshold = 2\n"
        f'[roles.trainer]\nkeys = ["{ks["trainer"].keyid}"]\n'
        '[[revoked_keys]]\nkey = "k/vendor.pub"\ncompromised_since = 0\n'
    )
    with pytest.raises(FormatError, match=r"keyid .* is not a key of this ledger's key store"):
        load_policy_file(path)

    def lookup(keyid: str) -> object:
        return ks["trainer"].public if keyid == ks["trainer"].keyid else None

    path.write_text(path.read_text().replace('[[revoked_keys]]\nkey = "k/vendor.pub"\n'
                                             "compromised_since = 0\n", ""))
    before = load_policy_file(path, key_lookup=lookup)  # type: ignore[arg-type]
    assert path_entries(before) == ["k/vendor.pub", "k/a.pub", "k/b.pub"]
    done = inline_paths(path, before, lookup)  # type: ignore[arg-type]
    assert [(spec, k.keyid) for spec, k in done] == [
        ("k/vendor.pub", ks["vendor"].keyid), ("k/a.pub", ks["a"].keyid),
        ("k/b.pub", ks["b"].keyid)]
    after = load_policy_file(path, key_lookup=lookup)  # type: ignore[arg-type]
    assert policy_digest(after) == policy_digest(before) and path_entries(after) == []
    assert "# the producer" in path.read_text()  # nothing else changed
    assert inline_paths(path, after, lookup) == []  # type: ignore[arg-type]


def test_inline_paths_refuses_a_key_file_that_changed_meanwhile(tmp_path: Path) -> None:
    ks = keys("vendor", "other")
    (tmp_path / "v.pub").write_bytes(ks["vendor"].public.to_pem())
    path = tmp_path / "p.toml"
    path.write_text('[roles.producer]\nkeys = ["v.pub"]\n')
    parsed = load_policy_file(path)
    (tmp_path / "v.pub").write_bytes(ks["other"].public.to_pem())  # replaced since
    with pytest.raises(FormatError, match="with its keys inline it is another policy"):
        inline_paths(path, parsed)
    assert path.read_text() == '[roles.producer]\nkeys = ["v.pub"]\n'


def test_an_evaluators_encryption_key_is_pinned_like_a_signing_key(tmp_path: Path) -> None:
    """A sealed suite is encrypted to the policy's X25519 keys: a path to one is flagged and
    written inline like any key, and a change of them is a change of membership."""
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import x25519

    def x25519_pem() -> bytes:
        return x25519.X25519PrivateKey.generate().public_key().public_bytes(
            ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo)

    ks = keys("judge")
    (tmp_path / "judge.pub").write_bytes(ks["judge"].public.to_pem())
    (tmp_path / "judge.x25519.pub").write_bytes(x25519_pem())
    path = tmp_path / "p.toml"
    path.write_text('format = 2\n[roles.evaluator]\nkeys = ["judge.pub"]\n'
                    'encryption_keys = ["judge.x25519.pub"]\n')
    parsed = load_policy_file(path)
    assert path_entries(parsed) == ["judge.pub", "judge.x25519.pub"]
    done = inline_paths(path, parsed)
    assert [(spec, key.algorithm) for spec, key in done] == [
        ("judge.pub", "ed25519"), ("judge.x25519.pub", "x25519")]
    again = load_policy_file(path)
    assert path_entries(again) == [] and policy_digest(again) == policy_digest(parsed)
    (enc,) = again.role("evaluator").encryption_keys
    assert f"fingerprint {enc.keyid}" in path.read_text()
    (tmp_path / "judge.x25519.pub").write_bytes(x25519_pem())  # another recipient
    other = load_policy_file(_with(
        tmp_path / "q.toml", 'format = 2\nserial = 2\n[roles.evaluator]\nkeys = ["judge.pub"]\n'
        'encryption_keys = ["judge.x25519.pub"]\n'))
    lines, changed = membership_changes(again, other)
    assert changed
    assert f"  evaluator   - X25519 encryption key {enc.keyid}" in lines


def _with(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_membership_changes_name_every_member_by_fingerprint(tmp_path: Path) -> None:
    ks = keys("vendor", "a", "b", "trainer", "c")
    old = load_policy_file(write(tmp_path, ks))
    lines, changed = membership_changes(None, old)
    assert changed and lines[0] == "policy 'ps' serial 1, the first policy of this ledger:"
    assert f"  producer    + key {ks['vendor'].keyid}" in lines
    assert f"  log         + vkey {VKEY}" in lines
    text = (tmp_path / "policy.toml").read_text().replace("serial = 1", "serial = 2")
    same = TrustPolicy.from_toml(text.encode(), tmp_path)
    lines, changed = membership_changes(old, same)
    assert not changed and lines[1] == "  producer  unchanged: 1 member(s), threshold 1"
    swapped = TrustPolicy.from_toml(
        text.replace(ks["b"].public.to_pem().decode(), ks["c"].public.to_pem().decode())
        .replace("threshold = 2", "threshold = 1").encode(), tmp_path)
    lines, changed = membership_changes(old, swapped)
    assert changed and lines[2:5] == [
        "  approver  threshold 2 -> 1",
        f"  approver    + key {ks['c'].keyid}",
        f"  approver    - key {ks['b'].keyid}",
    ]


def test_a_lowered_threshold_needs_confirming_like_a_member(tmp_path: Path) -> None:
    """The approvers' threshold lowered from 2 to 1, members unchanged, was recorded without
    --yes (one line among the unchanged roles): after it, one approver key alone (stolen, or
    planted in a policy file an insider edited) signs every successor. Found by rev4."""
    ks = keys("vendor", "a", "b", "trainer")
    old = load_policy_file(write(tmp_path, ks))
    text = (tmp_path / "policy.toml").read_text().replace("serial = 1", "serial = 2")
    lowered = TrustPolicy.from_toml(text.replace("threshold = 2", "threshold = 1").encode(),
                                    tmp_path)
    lines, changed = membership_changes(old, lowered)
    assert changed and "  approver  unchanged: 2 member(s), threshold 2 -> 1" in lines
    raised = load_policy_file(write(tmp_path, ks))  # serial 1, threshold 2: from 1 it is higher
    lines, changed = membership_changes(lowered, raised)
    assert not changed


def test_a_key_signs_a_record_only_when_the_policy_in_force_holds_it_for_the_role(
    tmp_path: Path,
) -> None:
    ledger = Ledger.init(tmp_path / "led", origin="test/ps")
    ks = {n: ledger.keys.create(n, encrypt=False) for n in ("vendor", "a", "b", "trainer")}
    path = tmp_path / "led" / "policy.toml"
    path.write_text(policy_toml(
        "ps", {"producer": ([("vendor", ks["vendor"].public)], 1, ""),
               "approver": ([(a, ks[a].public) for a in ("a", "b")], 2, ""),
               "trainer": ([("trainer", ks["trainer"].public)], 1, "")},
        ledger.log.vkey, header="#"))
    check_signers(ledger, "rollout-batch", [("trainer", ks["trainer"].keyid)])  # no policy yet
    record_policy(ledger, path, [ks["a"], ks["b"]])
    check_signers(ledger, "rollout-batch", [("vendor", ks["vendor"].keyid)])
    check_signers(ledger, "files", [("trainer", ks["trainer"].keyid)])  # attest: any key
    check_signers(ledger, "revocation", [("a", ks["a"].keyid)])
    with pytest.raises(PolicyError, match=re.escape(
        f"key trainer ({ks['trainer'].keyid[:12]}): cannot sign a dataset record: it holds "
        f"trainer role in policy 'ps' serial 1, want producer (fingerprint "
        f"{ks['trainer'].keyid[:16]}; the policy's producer key(s): {ks['vendor'].keyid[:16]}); "
        "nothing was signed")):
        check_signers(ledger, "dataset", [("trainer", ks["trainer"].keyid)])
    stranger = Signer.generate("vendor")
    with pytest.raises(PolicyError, match="holds no role"):
        check_signers(ledger, "checkpoint", [("vendor", stranger.keyid)], "train")
    # hour33: "cannot sign a environment record" (and a evaluator, a evaluation, a erasure)
    with pytest.raises(PolicyError, match=r"cannot sign an environment record: it holds trainer"):
        check_signers(ledger, "environment", [("trainer", ks["trainer"].keyid)])


def test_check_signers_names_the_evaluator_role_a_key_holds(tmp_path: Path) -> None:
    """An evaluator revoking its own evaluation (a flaky run) was told ``it holds no role in
    policy …``: the roles a key holds were looked up among producer, approver and trainer only
    (out40). Now every key role is."""
    ledger = Ledger.init(tmp_path / "led", origin="test/ev")
    ks = {n: ledger.keys.create(n, encrypt=False) for n in ("vendor", "a", "ev")}
    path = tmp_path / "led" / "policy.toml"
    path.write_text(policy_toml(
        "ev", {"producer": ([("vendor", ks["vendor"].public)], 1, ""),
               "approver": ([("a", ks["a"].public)], 1, ""),
               "evaluator": ([("ev", ks["ev"].public)], 1, "")},
        ledger.log.vkey, header="format = 2"))
    record_policy(ledger, path, [ks["a"]])
    with pytest.raises(PolicyError, match=re.escape(
            f"key ev ({ks['ev'].keyid[:12]}): cannot revoke it: it holds evaluator role in "
            "policy 'ev' serial 1, want producer or approver")):
        check_signers(ledger, "revocation", [("ev", ks["ev"].keyid)], "revoke it")
