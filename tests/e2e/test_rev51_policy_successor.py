"""rev51: ``policy init``'s successor read back as the policy in force holds it: its names,
its thresholds; docs/SECURITY.md, "Review of 2026-12-07, thirty-ninth round (rev51)"."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from testkit import Party

from trajledger import Ledger

POLICY = """\
name = "{name}"
serial = {serial}
roles.producer.keys = [{producers}]
roles.approver.keys = ["keys/approver.pub"]
roles.trainer.keys = ["keys/trainer.pub"]
roles.log.vkeys = [{vkeys}]
"""


def _lab(tmp_path: Path, *keys: str) -> tuple[Party, Ledger]:
    lab = Party(tmp_path, "lab")
    ledger = Ledger.init(lab.home, origin="lab.example/log")
    for k in ("vendor", "approver", "trainer", *keys):
        ledger.keys.create(k, encrypt=False)
    return lab, ledger


def _shown(lab: Party) -> dict[str, object]:
    return dict(json.loads(lab.run("policy", "show", "--json").stdout)["policy"])


def test_a_name_outside_the_basic_plane_is_written_as_toml_reads_it(tmp_path: Path) -> None:
    """finding 1: the successor's ``name`` and the log role's ``vkeys`` were written by
    ``json.dumps``, which spells a character outside Unicode's basic plane (an emoji, a CJK
    extension) as a surrogate pair, ``\\ud83d\\ude80``, which TOML refuses: ``policy init``
    of a policy named ``lab 🚀``, or trusting a log whose origin holds one, said ``FAIL: policy
    succ.toml: not valid TOML: Escaped character is not a Unicode scalar value``, exit 1, about
    the file it wrote itself. Expected: written, and read back as the policy in force."""
    from trajledger.ledger.encode import vkey_string

    lab, ledger = _lab(tmp_path)
    other = vkey_string("\U0001f680.example/log", bytes(range(32)))
    (lab.home / "policy.toml").write_text(POLICY.format(
        name="lab \U0001f680", serial=1, producers='"keys/vendor.pub"',
        vkeys=f'"{ledger.log.vkey}", "{other}"'))
    lab.run("policy", "set", lab.home / "policy.toml", "--key", "approver", "--yes")
    before = _shown(lab)
    out = tmp_path / "succ.toml"
    lab.run("policy", "init", "--out", out)
    doc = tomllib.loads(out.read_text("utf-8"))
    assert doc["name"] == "lab \U0001f680"
    assert doc["roles"]["log"]["vkeys"] == [ledger.log.vkey, other]
    lab.run("policy", "set", out, "--key", "approver", "--yes")
    after = _shown(lab)
    assert after == before | {"serial": 2}


def test_a_key_roles_threshold_is_kept_as_far_as_its_members_written_and_said(
    tmp_path: Path,
) -> None:
    """finding 2: a key role's threshold was kept only when the successor held as many members
    as it, else written as 1 without a word: a producer role of 3 of 3 keys, one of them
    dropped (``--producer vendor --producer vendor2``), became 1 of 2, a single stolen key's
    signature, while the NOTE said only that one key was dropped (rev50 finding 5 was the log
    role's). Expected: 2 of 2 (as many as are written), and a NOTE saying it is lowered."""
    lab, ledger = _lab(tmp_path, "vendor2", "vendor3")
    (lab.home / "policy.toml").write_text(POLICY.format(
        name="lab", serial=1, vkeys=f'"{ledger.log.vkey}"',
        producers='"keys/vendor.pub", "keys/vendor2.pub", "keys/vendor3.pub"')
        + "roles.producer.threshold = 3\n")
    lab.run("policy", "set", lab.home / "policy.toml", "--key", "approver", "--yes")
    out = tmp_path / "succ.toml"
    err = lab.run("policy", "init", "--out", out, "--producer", "vendor",
                  "--producer", "vendor2").stderr
    assert tomllib.loads(out.read_text())["roles"]["producer"]["threshold"] == 2
    assert (f"NOTE: {out}: lowers the producer threshold of serial 1 from 3 to 2: the "
            "successor holds 2 of its member(s)") in err, err
    out.unlink()
    lab.run("policy", "init", "--out", out)  # every key kept: the threshold too
    assert tomllib.loads(out.read_text())["roles"]["producer"]["threshold"] == 3


def test_an_approver_threshold_counting_identities_is_kept(tmp_path: Path) -> None:
    """finding 3 (rev50's Left): ``policy init`` kept an approver threshold that counts keyless
    identities (1 key and 2 Sigstore identities, threshold 3), then compared it with the keys
    alone: ``Invalid value for --approvals: 3 approvals, but only 1 approver key(s)``, exit 2,
    for a policy in force it had not been asked to change. Expected: written as it is."""
    lab, ledger = _lab(tmp_path)
    ids = ('roles.approver.identities = [{ issuer = "https://accounts.example", subject = '
           '"a@example.com" }, { issuer = "https://accounts.example", subject = '
           '"b@example.com" }]\n')
    for serial, threshold in ((1, ""), (2, "roles.approver.threshold = 3\n")):
        (lab.home / f"p{serial}.toml").write_text(POLICY.format(
            name="lab", serial=serial, producers='"keys/vendor.pub"',
            vkeys=f'"{ledger.log.vkey}"') + ids + threshold)
        lab.run("policy", "set", lab.home / f"p{serial}.toml", "--key", "approver", "--yes")
    before = _shown(lab)
    out = tmp_path / "succ.toml"
    lab.run("policy", "init", "--out", out)
    after = json.loads(lab.run("policy", "check", "--json", out).stdout)
    del after["digest"]
    assert after == before | {"serial": 3}


def test_a_release_approvals_bar_the_successors_approvers_cannot_meet_is_said(
    tmp_path: Path,
) -> None:
    """finding 7: a policy in force whose ``[release]`` needs 2 approvals, its successor
    written with one approver key (``policy init --approver approver``, the other dropped):
    the successor kept ``approvals = 2`` with 1 approver, so no release could ever be recorded
    under it, and ``policy init`` said only that a key was dropped (``policy set`` lists no
    change of ``[release]``). Expected: kept (the author's bar), and a NOTE saying so."""
    lab, ledger = _lab(tmp_path, "ap2", "evaluator")
    (lab.home / "policy.toml").write_text(
        "format = 2\n" + POLICY.format(
            name="lab", serial=1, producers='"keys/vendor.pub"', vkeys=f'"{ledger.log.vkey}"')
        .replace('["keys/approver.pub"]', '["keys/approver.pub", "keys/ap2.pub"]')
        + 'roles.evaluator.keys = ["keys/evaluator.pub"]\n'
        + '[release]\napprovals = 2\n[[release.require]]\nsuite = "suite@1"\nmin = 0.5\n')
    lab.run("policy", "set", lab.home / "policy.toml", "--key", "approver", "--key", "ap2",
            "--yes")
    out = tmp_path / "succ.toml"
    err = lab.run("policy", "init", "--out", out, "--approver", "approver").stderr
    assert tomllib.loads(out.read_text())["release"]["approvals"] == 2
    assert (f"NOTE: {out}: keeps [release] approvals = 2 of serial 1, but the successor holds 1 "
            "approver(s): no release can be recorded under it until it holds as many") in err, err
