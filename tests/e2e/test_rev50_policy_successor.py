"""rev50: ``policy init``'s successor, written from the policy in force (out52's
`policy_state.policy_toml` and `toml_value`), read back as that policy holds it; docs/SECURITY.md,
"Review of 2026-12-07, thirty-eighth round (rev50)"."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from testkit import Party

from trajledger import Ledger

POLICY = """\
name = "lab"
serial = 1
roles.producer.keys = ["keys/vendor.pub"]
roles.approver.keys = ["keys/approver.pub"]
roles.trainer.keys = ["keys/trainer.pub"]
roles.log.vkeys = ["{vkey}"]
revoked_keys = [{{ key = "{old}", compromised_since = 0, reason = {reason} }}]
"""


def test_a_revocations_reason_cannot_write_an_evaluator_role_into_the_successor(
    tmp_path: Path,
) -> None:
    """finding 1: `toml_value` wrote a string that starts ``-----BEGIN`` and holds a line
    break between ``\"\"\"`` as it is (a PEM's form): a reason of the policy in force closed
    that string and wrote TOML of its own, here ``format = 2`` and an evaluator role holding
    mallory's key, which the successor then held (``policy init`` said it kept what it was not
    asked to change). Expected: every kept value is read back as it is."""
    lab = Party(tmp_path, "lab")
    ledger = Ledger.init(lab.home, origin="lab.example/log")
    for k in ("vendor", "approver", "trainer", "old", "mallory"):
        ledger.keys.create(k, encrypt=False)
    old = ledger.keys.public("old").keyid
    mallory = ledger.keys.public("mallory").to_pem().decode()
    reason = ('-----BEGIN NOTE-----\n""" }]\nformat = 2\nroles.evaluator = { keys = ['
              + json.dumps(mallory) + '], threshold = 1 }\nrevoked_identities = [{ issuer = '
              '"i", subject = "s", compromised_since = 0, reason = """x')
    (lab.home / "policy.toml").write_text(
        POLICY.format(vkey=ledger.log.vkey, old=old, reason=json.dumps(reason)))
    lab.run("policy", "set", lab.home / "policy.toml", "--key", "approver", "--yes")

    out = tmp_path / "p2.toml"
    lab.run("policy", "init", "--out", out)
    doc = tomllib.loads(out.read_text())
    assert "evaluator" not in doc["roles"], "mallory's evaluator role was written"
    assert doc["revoked_keys"] == [{"key": old, "compromised_since": 0, "reason": reason}]
    assert "revoked_identities" not in doc and "format" not in doc
    lab.run("policy", "set", out, "--key", "approver", "--yes")
    after = json.loads(lab.run("policy", "show", "--json").stdout)["policy"]
    assert after["revoked_keys"][0]["reason"] == reason
    assert "evaluator" not in after["roles"]



def test_a_trusted_root_holding_a_null_is_one_line_not_a_bug(tmp_path: Path) -> None:
    """finding 2: a policy's ``sigstore_trusted_root`` is a JSON file (a path in the TOML
    form), which may hold ``null``; `toml_value` had no form for a null in a list and raised
    TypeError: ``policy init`` said ``BUG: TypeError: no TOML form for NoneType``, exit 4.
    Expected: one line naming the value and what to do, exit 3, no file written."""
    lab = Party(tmp_path, "lab")
    ledger = Ledger.init(lab.home, origin="lab.example/log")
    for k in ("vendor", "approver", "trainer", "old"):
        ledger.keys.create(k, encrypt=False)
    (lab.home / "root.json").write_text(json.dumps({
        "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
        "tlogs": [None]}))
    text = POLICY.format(vkey=ledger.log.vkey, old=ledger.keys.public("old").keyid,
                         reason='"lost"').replace(
        "serial = 1\n", 'serial = 1\nsigstore_trusted_root = "root.json"\n')
    (lab.home / "policy.toml").write_text(text)
    lab.run("policy", "set", lab.home / "policy.toml", "--key", "approver", "--yes")
    out = tmp_path / "p2.toml"
    r = lab.run("policy", "init", "--out", out, code=3)
    assert r.stderr.splitlines() == [
        f"FAIL: {out}: not written: serial 1 (in force) holds what this command cannot keep: "
        "sigstore_trusted_root.tlogs[0] is null, which a TOML file cannot hold; write the "
        "successor by hand from its file (raise its serial)"], r.stderr
    assert not out.exists()


def test_the_log_roles_threshold_is_kept(tmp_path: Path) -> None:
    """finding 5: the successor kept the policy in force's other log keys but wrote the log
    role's ``threshold = 1`` whatever it was: a policy whose checkpoints needed 2 of its 2 log
    keys got a successor a single log key's signature satisfies, while ``policy init`` said
    it kept what it was not asked to change. Expected: the threshold kept, and said."""
    from trajledger.ledger.encode import vkey_string

    lab = Party(tmp_path, "lab")
    ledger = Ledger.init(lab.home, origin="lab.example/log")
    for k in ("vendor", "approver", "trainer", "old"):
        ledger.keys.create(k, encrypt=False)
    second = vkey_string("lab.example/log", bytes(range(32)))
    text = POLICY.format(vkey=ledger.log.vkey, old=ledger.keys.public("old").keyid,
                         reason='"lost"').replace(
        f'vkeys = ["{ledger.log.vkey}"]\n', f'vkeys = ["{ledger.log.vkey}", "{second}"]\n'
        "roles.log.threshold = 2\n")
    (lab.home / "policy.toml").write_text(text)
    lab.run("policy", "set", lab.home / "policy.toml", "--key", "approver", "--yes")
    out = tmp_path / "p2.toml"
    err = lab.run("policy", "init", "--out", out).stderr
    assert tomllib.loads(out.read_text())["roles"]["log"] == {
        "vkeys": [ledger.log.vkey, second], "threshold": 2}
    assert "1 other log key(s), log threshold 2" in err, err
