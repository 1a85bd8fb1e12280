"""rev51: what a producer refused a revocation of what another key signed is told to do
(`ledger.authority_hint`, out53 finding 1); docs/SECURITY.md, "Review of 2026-12-07,
thirty-ninth round (rev51)"."""

from __future__ import annotations

from pathlib import Path

from testkit import Party


def test_a_key_that_was_never_a_producer_is_not_told_to_be_made_one(tmp_path: Path) -> None:
    """finding 5: a files record signed by a key of no role (``attest --key ci``: any key may
    sign one; a CI machine's, a colleague's), revoked by the vendor's producer key: the
    refusal said ``its record is signed by …, a producer key the policy in force no longer
    holds; key ci here is that key: to revoke it where buyers count it too, name it again in a
    successor ('trajledger policy init --roles producer --producer vendor --producer ci …')``:
    done as told, a key that never was the vendor's producer signs as one (and no buyer counts
    its revocation: their policies never held it). Expected: a key is named again only if it
    was a producer when the record was logged; this one is said to have held no producer
    role, and the way is an approver's."""
    vendor = Party(tmp_path, "vendor")
    vendor.run("init", "--origin", "vendor.example/log")
    for k in ("vendor", "ci"):
        vendor.run("key", "new", k, "--no-encrypt")
    vendor.run("policy", "init", "--roles", "producer", "--out", tmp_path / "p.toml")
    vendor.run("policy", "set", tmp_path / "p.toml", "--key", "vendor", "--yes")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.txt").write_text("hi\n")
    vendor.run("attest", tmp_path / "m", "--key", "ci", "--name", "model")
    size = vendor.size()
    err = vendor.run("revoke", "model", "--key", "vendor", "--reason", "bad", code=1).stderr
    assert "--producer ci" not in err and "key ci here is that key" not in err, err
    assert ", a key that held no producer role: only an approver may revoke it now" in err, err
    assert vendor.size() == size
