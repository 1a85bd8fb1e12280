"""What out53 found playing a data vendor and its buyer as outsiders (README.md, docs/ and
``--help`` only): keys and log keys rotated between deliveries, revocations reaching a buyer,
update bundles out of order, and out52's **Left**; docs/SECURITY.md, "Review of 2026-12-07,
thirty-eighth round (out53)".
"""

from __future__ import annotations

import json
from pathlib import Path

from testkit import Party

from trajledger import Ledger


def test_policy_init_keeps_the_witness_role_of_the_policy_in_force(tmp_path: Path) -> None:
    """out52's Left: ``policy init`` on a ledger whose policy in force has a
    ``[roles.witness]`` wrote a successor without it (a NOTE said to copy it in), while every
    other role and setting is kept: recorded as written, the log's checkpoints were no longer
    required to carry the witnesses' cosignatures. Expected: kept, and said so."""
    from trajledger.ledger.monitor import witness_vkey
    from trajledger.ledger.keys import Signer

    lab = Party(tmp_path, "lab")
    ledger = Ledger.init(lab.home, origin="lab.example/log")
    ledger.keys.create("vendor", encrypt=False)
    lab.run("policy", "init", "--roles", "producer", "--out", tmp_path / "p1.toml")
    wit = witness_vkey(Signer.generate("w1"))
    text = (tmp_path / "p1.toml").read_text()
    (tmp_path / "p1.toml").write_text(
        text + f'\n[roles.witness]\nvkeys = ["{wit}"]\nthreshold = 1\nlogs = ["other.example/log"]\n')
    lab.run("policy", "set", tmp_path / "p1.toml", "--key", "vendor", "--yes")
    before = json.loads(lab.run("policy", "show", "--json").stdout)["policy"]["roles"]["witness"]
    assert before["vkeys"] == [wit]
    err = lab.run("policy", "init", "--roles", "producer", "--out", tmp_path / "p2.toml").stderr
    assert "drops [roles.witness]" not in err, err
    assert "keeps from serial 1 (in force) what this command was not asked to change: " \
        "[roles.witness] (1 witness key(s), threshold 1)" in err, err
    lab.run("policy", "set", tmp_path / "p2.toml", "--key", "vendor", "--yes")
    after = json.loads(lab.run("policy", "show", "--json").stdout)["policy"]
    assert after["serial"] == 2 and after["roles"]["witness"] == before
