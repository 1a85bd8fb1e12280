"""What out57 found playing three organisations as outsiders (README.md, docs/ and ``--help``
only): a vendor A that records and exports, a lab B that imports, approves, trains and
re-exports (A's records with its own), and a third party C (an auditor, a second buyer) that
verifies, admits and trains; A's updates out of order, replayed and twice; and out55's
**Left**. docs/SECURITY.md, "Review of 2026-12-07, fortieth round (out57)". Every refusal
leaves the party's ledger and user state as they were, file by file (`refused`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_out55_reported import refused
from test_records_after_applied import relayed_by_the_lab
from test_third_party_updates import REASON
from test_updates import train_a_buyer
from testkit import Party

BATCH = "rollout-batch vendor-1 (sha256:23520155630d…) > revoked: "
WAY = ("'trajledger impact {digest}' lists what it reaches here; stop using them, and build on "
       "data that stands (train again on a dataset without it)")


def origin(party: Party) -> str:
    """A party's log as lines name it: ``ORIGIN+KEYHASH``."""
    return "+".join(party.vkey().split("+")[:2])


def cause(doc: dict[str, object], digest: str) -> dict[str, object]:
    """The ``causes`` item of ``digest`` in a report's JSON."""
    causes = doc["causes"]
    assert isinstance(causes, list)
    return next(c for c in causes if c["node"] == digest)


def test_a_revocation_the_lab_relays_names_the_vendor_everywhere_the_third_party_looks(
    tmp_path: Path,
) -> None:
    """A -> B -> C: the vendor revoked its batch, the lab took the revocation in and relayed
    it in its update to the third party, which had read the vendor's log (its own keys known
    here). The import said ``WARNING: revoked by vendor.example/log, relayed by LAB`` (rot40),
    but ``verify`` and ``lineage`` of the lab's checkpoint, what C runs next and in CI, said
    ``revoked by LAB (signed by …)``: the lab passed for the revoker of what the vendor
    revoked (an auditor asks the wrong party why); their ``--json`` named no revoker at all,
    nor did ``admit``'s refusal (out55's Left). Expected: every one names the vendor, relayed
    by the lab; JSON as ``causes[].revokedBy``."""
    vendor, lab, third, relayed, _seen = relayed_by_the_lab(tmp_path)
    third.run("import", relayed, "--key", "approver")
    third.run("verify", "bh-policy@1", code=1)  # (its first use today noted: `used_at`)
    batch, lab_log = vendor.batches[0], origin(lab)
    who = f"revoked by vendor.example/log, relayed by {lab_log} (signed by "
    for command in ("verify", "lineage"):
        err = refused(third, command, "bh-policy@1")
        line = err.splitlines()[1]
        assert line.startswith(f"FAIL: {BATCH}{REASON} (log index "), err
        assert who in line and line.endswith(WAY.format(digest=batch)), line
        out = third.run(command, "bh-policy@1", "--json", code=1).stdout
        by = cause(json.loads(out), batch)["revokedBy"]
        assert isinstance(by, dict) and by["logs"] == [lab_log], by
        assert by["signerLog"] == "vendor.example/log" and len(by["signers"]) == 1, by
    err = refused(third, "admit", "bh@1")
    assert who in err and err.rstrip().endswith(WAY.format(digest=batch)), err
    out = third.run("admit", "bh@1", "--json", code=1).stdout
    assert cause(json.loads(out)["report"], batch)["revokedBy"]["signerLog"] == \
        "vendor.example/log"


def test_the_labs_gate_names_the_vendor_that_revoked_what_it_would_train_on(
    tmp_path: Path,
) -> None:
    """A -> B: the lab took the vendor's revocation in (an update of the vendor's log). Its
    ``train`` on the dataset, and on a parent checkpoint built on it, refused with the bare
    ``… > revoked: consent withdrawn (log index 8); and 1 record that depends on it``: no
    revoker, no next step (out55's Left), where ``verify`` names both. Expected: the gate's
    lines as ``verify``'s; nothing of the refusal but its signed refusal record."""
    vendor, lab, ckpt = train_a_buyer(tmp_path)
    applied = vendor.size()
    vendor.run("revoke", vendor.batches[0], "--reason", REASON, "--key", "vendor")
    vendor.run("export", "--updates-since", str(applied), "--out", tmp_path / "u.tar.zst")
    lab.run("import", tmp_path / "u.tar.zst", "--key", "approver")
    who = f"; revoked by {origin(vendor)} (signed by "
    way = WAY.format(digest=vendor.batches[0])
    err = refused(lab, "admit", "bh@1")
    assert who in err and err.rstrip().endswith(way), err
    for parent in ((), ("--parent", ckpt)):
        err = lab.run("train", "--dataset", "bh@1", "--key", "trainer", "--name", "bh-policy",
                      "--version", "2", *parent, code=1).stderr
        assert who in err and err.rstrip().endswith(way), err
    by = cause(json.loads(lab.run("verify", ckpt, "--json", code=1).stdout), vendor.batches[0])
    assert by["revokedBy"]["logs"] == [origin(vendor)] and by["revokedBy"]["signerLog"] is None
    lab.run("revoke", vendor.batches[1], "--reason", "mislabelled", "--key", "approver")
    doc = json.loads(lab.run("verify", ckpt, "--json", code=1).stdout)
    assert cause(doc, vendor.batches[1])["revokedBy"]["logs"] == []  # this ledger's own


def test_updates_out_of_order_replayed_and_twice_change_nothing(tmp_path: Path) -> None:
    """Held: the vendor revoked a batch (update U1, since what the lab applied) then replaced
    its producer key (U2, since U1's end). U2 first is refused naming the size to ask for;
    U1 then U2 apply; U1 again, U1 replayed after U2, an update since before both, and the
    vendor's first full bundle (from before the revocation) each say nothing new, the
    ledger as it was; ``verify`` of that old bundle fails as a rollback."""
    vendor, lab, ckpt = train_a_buyer(tmp_path)
    s0 = vendor.size()
    vendor.run("revoke", vendor.batches[0], "--reason", REASON, "--key", "vendor")
    u1, u2, u02 = (tmp_path / f"{n}.tar.zst" for n in ("u1", "u2", "u02"))
    vendor.run("export", "--updates-since", str(s0), "--out", u1)
    s1 = vendor.size()
    vendor.run("key", "new", "vendor2", "--no-encrypt")
    vendor.run("policy", "init", "--roles", "producer", "--producer", "vendor2",
               "--out", tmp_path / "p2.toml")
    vendor.run("policy", "set", tmp_path / "p2.toml", "--key", "vendor", "--yes")
    vendor.run("export", "--updates-since", str(s1), "--out", u2)
    vendor.run("export", "--updates-since", str(s0), "--out", u02)
    err = refused(lab, "import", u2, "--key", "approver")
    assert f"ask for a bundle exported with --updates-since {s0}" in err, err
    lab.run("import", u1, "--key", "approver")
    lab.run("import", u2, "--key", "approver")
    for again in (u1, u2, u02, vendor.bundle):
        r = lab.run("import", again, "--key", "approver")
        assert "nothing new" in r.stderr, r.stderr
    err = refused(lab, "verify", vendor.bundle, "--policy", lab.home / "policy.toml")
    assert "log fork or rollback: checkpoint rollback for vendor.example/log" in err, err
    assert f"revoked: {REASON}" in lab.run("verify", ckpt, code=1).stderr


def test_data_after_a_bundles_tar_archive_says_to_get_it_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """out55's Left: a bundle whose tar is followed by anything but its zero padding (bytes
    appended before it was compressed, a second archive) said ``data after the end of the
    tar archive (only zero padding, at most 1048576 bytes, may follow)``: what is wrong, not
    what to do, at ``import``, ``trajledger verify`` and ``python -m verify`` alike.
    Expected: ``…: get it again``, as a bundle cut short says."""
    import zstandard

    from trajledger.verify.__main__ import main as verify_main

    vendor, lab, _ckpt = train_a_buyer(tmp_path)
    tar = zstandard.ZstdDecompressor().stream_reader(vendor.bundle.read_bytes()).read()
    bad = tmp_path / "bad.tar.zst"
    bad.write_bytes(zstandard.ZstdCompressor().compress(tar + b"appended"))
    policy = lab.home / "policy.toml"
    lines = [refused(lab, "import", bad, "--key", "approver"),
             refused(lab, "verify", bad, "--policy", policy)]
    assert verify_main([str(bad), "--policy", str(policy)]) == 1
    lines.append(capsys.readouterr().err)
    for err in lines:
        assert len(err.splitlines()) == 1 and err.rstrip().endswith(
            "data after the end of the tar archive (only zero padding, at most 1048576 bytes, "
            "may follow): get it again"), err
