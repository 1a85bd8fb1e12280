"""What out55 found playing a data vendor and its buyer as outsiders (README.md, docs/ and
``--help`` only): bundles cut short, witnesses' cosignatures carried to an import, two vendors
whose names collide, ``monitor`` across a log key rotation and a producer key replacement, and
out53's **Left**; docs/SECURITY.md, "Review of 2026-12-07, thirty-ninth round (out55)" (the
vendor that signs keylessly: tests/interop/test_out55_keyless.py). Every refusal leaves the
buyer's ledger and user state as they were, file by file (`files`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_updates import train_a_buyer
from testkit import Party, new_runner, release_files

from trajledger.runner.cli import main
from trajledger.verify.__main__ import main as verify_main


def files(*roots: Path) -> dict[str, bytes]:
    """Every file under ``roots`` by path, but SQLite's shared-memory index (a read touches
    it: out53) and the ledger's scratch directory: a refusal leaves them as they were. The
    commands run before, in this process, have their SQLite connections closed first (a
    connection closed checkpoints its write-ahead log into the database: the same rows in
    other files)."""
    release_files(*roots)
    return {str(p): rows(p) if p.suffix == ".sqlite" else p.read_bytes()
            for root in roots for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.endswith(("-shm", "-wal"))
            and "tmp" not in p.relative_to(root).parts}


def rows(db: Path) -> bytes:
    """A SQLite database's schema and rows (its write-ahead log's included), as SQL text; but
    the user state's ``used_at`` (a read notes the time it was last used at, once a minute:
    `TrustState.used_at`, as test_read_only allows: on a slow machine a template built more
    than a minute before its copy's command was noted again)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return "\n".join(line for line in con.iterdump()
                         if not line.startswith("INSERT INTO \"meta\" VALUES('used_at'")
                         ).encode()
    finally:
        con.close()


def refused(party: Party, *args: str | Path, code: int = 1) -> str:
    """``trajledger ARGS`` as ``party``, which must exit ``code`` and leave its ledger and user
    state as they were; its stderr. (A read first: a ledger copied
    to another directory is pinned in the user state when first opened.)"""
    party.run("reindex")
    before = files(party.home, party.state)
    r = new_runner().invoke(main, ["--ledger", str(party.home), *map(str, args)],
                            env={"TRAJLEDGER_STATE_DIR": str(party.state)})
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    after = files(party.home, party.state)
    changed = sorted(k for k in after.keys() | before.keys() if after.get(k) != before.get(k))
    assert after == before, (args, changed)
    return str(r.stderr)


@pytest.mark.parametrize("cut", [0, 1, 2, 3, 4, 5])
def test_a_bundle_cut_within_its_first_bytes_says_it_was_cut_short(
    tmp_path: Path, cut: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """out53's Left: a bundle cut to 1 to 3 bytes (a prefix of zstd's magic number) read
    ``not zstd-compressed (magic 28b5): not a bundle; 'import' takes the .tar.zst file …``, as
    rollouts given for a bundle do; cut to 4 or 5 bytes, ``corrupt zstd frame header: not
    enough data for frame parameters; need 5 bytes`` and no next step; empty, ``magic none``.
    Each is a download or a copy cut short: expected, the line says so and to get it again, at
    ``import``, ``trajledger verify BUNDLE`` and ``python -m verify`` alike."""
    vendor, buyer, _ckpt = train_a_buyer(tmp_path)
    bad = tmp_path / "bh.tar.zst"
    bad.write_bytes(vendor.bundle.read_bytes()[:cut])
    policy = buyer.home / "policy.toml"
    lines = [refused(buyer, "import", bad, "--key", "approver"),
             refused(buyer, "verify", bad, "--policy", policy)]
    assert verify_main([str(bad), "--policy", str(policy)]) == 1
    lines += capsys.readouterr().err.splitlines()
    for line in lines:
        assert len(line.splitlines()) == 1, line
        assert "not a bundle" not in line and "corrupt" not in line, line
        assert f"bundle bh.tar.zst: cut short: {cut} byte(s)" in line, line
        assert "get it again from its sender" in line, line


def test_a_bundle_cut_anywhere_else_is_refused_saying_to_get_it_again(tmp_path: Path) -> None:
    """Held: the vendor's bundle cut at each length 6 to 64, in the middle of its compressed
    bytes, and a valid zstd frame around its tar cut in the middle of each member (a copy
    stopped before it was compressed): each import refused, exit 1, one line on stderr with
    what happened and ``get it again``, the buyer's ledger and user state as they were. The
    same of a bundle with bytes appended, or its last bytes changed, since out55."""
    import io
    import tarfile

    import zstandard

    vendor, buyer, _ckpt = train_a_buyer(tmp_path)
    data = vendor.bundle.read_bytes()
    tar = zstandard.ZstdDecompressor().stream_reader(data).read()
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        middles = [m.offset_data + m.size // 2 for m in t.getmembers()]
    cuts = [data[:n] for n in (*range(6, 65), len(data) // 2)]
    cuts += [zstandard.ZstdCompressor().compress(tar[:n]) for n in middles]
    cuts += [data + b"junk", data[:-8] + bytes(b ^ 0xFF for b in data[-8:])]  # (out55: said
    # "corrupt zstd stream: zstd decompress error: Unknown frame descriptor", and no way on)
    buyer.run("reindex")  # (its derived state caught up first)
    before = files(buyer.home, buyer.state)
    bad = tmp_path / "cut.tar.zst"
    for cut in cuts:
        bad.write_bytes(cut)
        r = new_runner().invoke(main, ["--ledger", str(buyer.home), "import", str(bad), "--key",
                                       "approver"], env={"TRAJLEDGER_STATE_DIR": str(buyer.state)})
        assert r.exit_code == 1 and len(r.stderr.splitlines()) == 1, (len(cut), r.output)
        assert r.stderr.startswith("FAIL: bundle cut.tar.zst: ") and "get it again" in r.stderr
    assert files(buyer.home, buyer.state) == before


def bundle_with_checkpoint(good: Path, out: Path, checkpoint: bytes) -> Path:
    """``good`` with its signed checkpoint replaced by ``checkpoint`` (in ``checkpoint`` and in
    each tlog-proof, which carry it too) and its index made to agree: what a vendor, or
    anyone between it and the buyer, can send."""
    import tamperkit

    members = tamperkit.bundle_members(good)
    old = dict(members)["checkpoint"]
    return tamperkit.write_bundle(out, [
        (n, checkpoint if n == "checkpoint" else d.replace(old, checkpoint)
         if n.startswith("proofs/") else d) for n, d in members], reindex=True)


def cosign(vendor: Party, wit: Party, out: Path) -> str:
    """The witness ``wit`` watches the vendor's served log (``log serve``'s server) and
    cosigns its checkpoint into ``out`` (``monitor --cosign-key witness``); its verifier
    key."""
    import json

    from trajledger.ledger.serve import LogServer

    server = LogServer(vendor.home / "log")
    server.start()
    try:
        r = wit.run("monitor", server.url, "--vkey", vendor.vkey(), "--cosign-key", "witness",
                    "--out", out, "--json")
    finally:
        server.stop()
    return str(json.loads(r.stdout)["witness_vkey"])


def witnessed(tmp_path: Path, threshold: int = 1) -> tuple[Party, Party, Party, Path, str]:
    """A vendor whose log a witness (a party of its own) cosigned (`cosign`); a buyer whose
    policy requires ``threshold`` cosignature(s) on the vendor's log by that witness (and, with
    2, by a second one who never cosigned). The vendor, the buyer, the witness, its cosigned
    checkpoint, its verifier key."""
    import json

    from test_updates import BUYER_POLICY, make_buyer, vendor_copy

    from trajledger.ledger.keys import Signer
    from trajledger.ledger.monitor import witness_vkey

    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    wit = Party(tmp_path, "wit")
    wit.run("init", "--origin", "wit.example/log")
    wit.run("key", "new", "witness", "--no-encrypt")
    vkey = cosign(vendor, wit, tmp_path / "cosigned")
    vkeys = [vkey, *([witness_vkey(Signer.generate("second"))] if threshold == 2 else [])]
    buyer = Party(tmp_path, "buyer")
    make_buyer(buyer, [vendor], BUYER_POLICY + (
        f"[roles.witness]\nvkeys = {json.dumps(vkeys)}\nthreshold = {threshold}\n"
        'logs = ["vendor.example/log"]\n'))
    return vendor, buyer, wit, tmp_path / "cosigned", vkey


def refused_offline(capsys: pytest.CaptureFixture[str], bundle: Path, policy: Path) -> str:
    """``python -m verify BUNDLE --policy P``, which must exit 1; its stderr."""
    capsys.readouterr()
    assert verify_main([str(bundle), "--policy", str(policy)]) == 1
    return capsys.readouterr().err


def test_a_bundle_without_its_witnesses_cosignature_says_who_must_cosign_and_how(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A buyer whose policy requires a witness's cosignature on the vendor's log (docs/
    third-party.md, "Witnesses") imported the vendor's bundle exported before the vendor
    published it: ``log vendor.example/log > witnesses: checkpoint has 0 valid witness
    cosignatures, want at least 1``, naming neither the witness wanted nor what to do. A
    cosignature of the vendor's previous checkpoint pasted onto the current one (the log grew
    since the witness cosigned) read ``note signature line 2 by witness+… does not verify``.
    Expected: each names the witness key(s) and the way on; done as said, the import passes.
    Held: a cosignature by a witness the policy does not name is not counted and harms
    nothing; a line under the witness's name by another key is not counted."""
    from trajledger.ledger.keys import Signer
    from trajledger.ledger.log.witness import cosign_note

    vendor, buyer, wit, cosigned, wvkey = witnessed(tmp_path)
    policy = buyer.home / "policy.toml"
    name = "+".join(wvkey.split("+")[:2])
    way = (f"(of {name}, the witness key(s) your policy names for vendor.example/log): ask the "
           "log's owner to publish the witnesses' cosignatures of this checkpoint ('trajledger "
           "log add-cosignature', docs/third-party.md \"Witnesses\") and export again")
    for line in (refused(buyer, "import", vendor.bundle, "--key", "approver"),
                 refused_offline(capsys, vendor.bundle, policy)):
        assert "checkpoint has 0 valid witness cosignatures, want at least 1 " + way in line, line
    # a cosignature of the previous checkpoint on the current one
    vendor.run("env", "register", "grid-2", "--version", "1", "--source", "sim",
               "--key", "vendor")
    grown = tmp_path / "grown.tar.zst"
    vendor.run("export", "bh@1", "--out", grown)
    import tamperkit

    current = dict(tamperkit.bundle_members(grown))["checkpoint"]
    old_line = [x for x in cosigned.read_bytes().splitlines(keepends=True)
                if x.startswith(f"— {name.split('+')[0]} ".encode())]
    stale = bundle_with_checkpoint(grown, tmp_path / "stale.tar.zst", current + old_line[0])
    changed = ("does not verify: a cosignature of another checkpoint (the log's before it "
               "grew), or a line or checkpoint changed since it was signed: get the bundle "
               "again; the same, ask the log's owner for one its witnesses cosigned as it is")
    for line in (refused(buyer, "import", stale, "--key", "approver"),
                 refused_offline(capsys, stale, policy)):
        assert f"note signature line 2 by {name} " + changed in line, line
    # held: a line under the witness's name by another key, and a stranger's cosignature
    impostor = cosign_note(current, Signer.generate(name.split("+")[0]))
    bad = bundle_with_checkpoint(grown, tmp_path / "impostor.tar.zst", impostor)
    assert "0 valid witness cosignatures" in refused(buyer, "import", bad, "--key", "approver")
    # done as said: the witness cosigns the current checkpoint, the vendor publishes it
    cosign(vendor, wit, cosigned)
    vendor.run("log", "add-cosignature", cosigned, "--witness", wvkey)
    good = tmp_path / "good.tar.zst"
    vendor.run("export", "bh@1", "--out", good)
    cp = dict(tamperkit.bundle_members(good))["checkpoint"]
    extra = bundle_with_checkpoint(good, tmp_path / "extra.tar.zst",
                                   cosign_note(cp, Signer.generate("stranger")))
    assert verify_main([str(extra), "--policy", str(policy)]) == 0
    buyer.run("import", extra, "--key", "approver")


def test_one_witness_cosigning_twice_counts_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Held: a policy requiring two witnesses' cosignatures on the vendor's log, and a
    checkpoint carrying the one witness's line twice (once more under another name): one
    witness, refused at import and offline, the ledger as it was."""
    vendor, buyer, _wit, cosigned, wvkey = witnessed(tmp_path, threshold=2)
    vendor.run("log", "add-cosignature", cosigned, "--witness", wvkey)
    good = tmp_path / "good.tar.zst"
    vendor.run("export", "bh@1", "--out", good)
    import tamperkit

    cp = dict(tamperkit.bundle_members(good))["checkpoint"]
    line = cp.splitlines(keepends=True)[-1]
    renamed = line.replace(b"\xe2\x80\x94 witness ", b"\xe2\x80\x94 witness2 ")
    twice = bundle_with_checkpoint(good, tmp_path / "twice.tar.zst", cp + line + renamed)
    for text in (refused(buyer, "import", twice, "--key", "approver"),
                 refused_offline(capsys, twice, buyer.home / "policy.toml")):
        assert "checkpoint has 1 valid witness cosignatures, want at least 2" in text, text


def test_a_vendors_revocation_of_another_vendors_batch_counts_for_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: two vendors (``one``, ``two``, each a dataset ``bh@1`` signed by a key named
    ``vendor``) whose bundles a buyer imports; the buyer trains on one's. Vendor two signs a
    revocation of one's batch (written below the CLI, whose ``revoke`` refuses a digest its
    ledger does not hold) and sends it in an update bundle: the import takes it in and says
    it is ignored (two's key did not produce the batch), and ``verify`` of the checkpoint and
    ``admit`` of one's dataset pass."""
    from test_updates import two_vendors_trained

    from trajledger import Ledger
    from trajledger.ledger.record import record_statement
    from trajledger.verify import predicates
    from trajledger.verify.predicates import Revocation

    one, two, buyer, ckpt = two_vendors_trained(tmp_path, ("one", "two"), "ck")
    applied = two.size()
    with monkeypatch.context() as m:
        m.setenv("TRAJLEDGER_STATE_DIR", str(two.state))
        ledger = Ledger.open(two.home)
        record_statement(ledger, "one-1", one.batches[0], predicates.REVOCATION,
                         Revocation("hostile", "2026-12-07T00:00:00Z").to_predicate(),
                         ledger.keys.signer("vendor"))
        ledger.close()
    update = tmp_path / "u.tar.zst"
    two.run("export", "--updates-since", str(applied), "--out", update)
    err = buyer.run("import", update, "--key", "approver").stderr
    assert ("NOTE: ignored: revocation at log index 5 of two.example/log+" in err
            and "which did not produce rollout-batch" in err), err
    buyer.run("verify", ckpt)
    buyer.run("admit", one.dataset)


def test_revoke_with_the_replaced_key_that_produced_it_names_the_way_at_once(
    tmp_path: Path,
) -> None:
    """out53's Left: a vendor that replaced its producer key ``vendor`` by ``vendor2`` must
    revoke a batch ``vendor`` produced. ``revoke B --key vendor`` (the key that produced it:
    what a user tries first) said ``it holds no role in policy … serial 2, want producer or
    approver (…; the policy's producer or approver key(s): …)``, which sends to ``--key
    vendor2``, whose refusal names the way (out53 finding 1): two steps where one does.
    Expected: the first refusal names the way; followed as printed, the revocation is logged
    and counts at the buyer."""
    vendor, buyer, ckpt = train_a_buyer(tmp_path)
    applied = vendor.size()
    vendor.run("key", "new", "vendor2", "--no-encrypt")
    vendor.run("policy", "init", "--roles", "producer", "--producer", "vendor2",
               "--out", tmp_path / "p2.toml")
    vendor.run("policy", "set", tmp_path / "p2.toml", "--key", "vendor", "--yes")
    err = refused(vendor, "revoke", vendor.batches[0], "--reason", "consent withdrawn",
                  "--key", "vendor")
    assert "holds no role" not in err, err
    way = ("key vendor here is that key: to revoke it where buyers count it too, name it again "
           "in a successor ('trajledger policy init --roles producer --producer vendor2 "
           "--producer vendor --out FILE' and 'trajledger policy set FILE --key vendor2'), give "
           "--key vendor, then record a successor without it")
    assert way in err, err
    assert len(err.splitlines()) == 1, err
    # done as printed
    vendor.run("policy", "init", "--roles", "producer", "--producer", "vendor2", "--producer",
               "vendor", "--out", tmp_path / "p3.toml")
    vendor.run("policy", "set", tmp_path / "p3.toml", "--key", "vendor2", "--yes")
    vendor.run("revoke", vendor.batches[0], "--reason", "consent withdrawn", "--key", "vendor")
    vendor.run("policy", "init", "--roles", "producer", "--producer", "vendor2",
               "--out", tmp_path / "p4.toml")
    vendor.run("policy", "set", tmp_path / "p4.toml", "--key", "vendor2", "--yes")
    vendor.run("export", "--updates-since", str(applied), "--out", tmp_path / "u.tar.zst")
    buyer.run("import", tmp_path / "u.tar.zst", "--key", "approver")
    assert "> revoked: consent withdrawn" in buyer.run("verify", ckpt, code=1).stderr


def test_verify_of_a_lineage_revoked_by_the_vendor_names_the_vendor_and_the_way_on(
    tmp_path: Path,
) -> None:
    """out53's Left: the vendor revoked a batch the buyer trained on (its producer key, an
    update bundle); the buyer's import WARNINGs name the vendor and ``impact``, but ``verify``
    of the checkpoint, what the buyer runs next, said ``rollout-batch vendor-1 (…) > revoked:
    consent withdrawn (log index 8); and 2 records that depend on it``: no revoker (this
    ledger's log index of a record the vendor signed), no next step. Expected: the line names
    the vendor's log and key and the way on; a revocation of the buyer's own says so."""
    vendor, buyer, ckpt = train_a_buyer(tmp_path)
    applied = vendor.size()
    vendor.run("revoke", vendor.batches[0], "--reason", "consent withdrawn", "--key", "vendor")
    vendor.run("export", "--updates-since", str(applied), "--out", tmp_path / "u.tar.zst")
    buyer.run("import", tmp_path / "u.tar.zst", "--key", "approver")
    index = buyer.size() - 2  # the vendor's revocation, then its import record
    lines = buyer.run("verify", ckpt, code=1).stderr.splitlines()
    assert lines[1].startswith(
        f"FAIL: rollout-batch vendor-1 (sha256:{vendor.batches[0][7:19]}…) > revoked: consent "
        f"withdrawn (log index {index}); and 2 records that depend on it; revoked by "
        f"{vendor.origin} (signed by "), lines
    assert lines[1].endswith(
        f"): 'trajledger impact {vendor.batches[0]}' lists what it reaches here; stop using "
        "them, and build on data that stands (train again on a dataset without it)"), lines
    # the buyer's own revocation of the other batch
    buyer.run("revoke", vendor.batches[1], "--reason", "mislabelled", "--key", "approver")
    err = buyer.run("verify", ckpt, code=1).stderr
    assert "> revoked: mislabelled (log index " in err and "; revoked by this ledger (signed" \
        in err, err


def test_monitor_follows_a_log_key_rotation_and_names_a_replaced_producer_key(
    tmp_path: Path,
) -> None:
    """Held: the vendor replaced its producer key (a successor naming ``vendor2`` only) and
    rotated its log key, then recorded a batch with the new key; the buyer, which imported
    and trained, runs ``monitor URL --vkey OLD --key approver`` on its served log (``log
    serve``): exit 0, the handover followed with the new key to pass, and the producer key
    removed and the one added each named with the way on, as an update bundle's import does."""
    from test_updates import rollouts, served

    vendor, buyer, _ckpt = train_a_buyer(tmp_path)
    old = vendor.vkey()
    vendor.run("key", "new", "vendor2", "--no-encrypt")
    vendor.run("policy", "init", "--roles", "producer", "--producer", "vendor2",
               "--out", tmp_path / "p2.toml")
    vendor.run("policy", "set", tmp_path / "p2.toml", "--key", "vendor", "--yes")
    vendor.run("log", "rotate-key")
    vendor.run("record", rollouts(tmp_path / "r9.parquet", 9), "--env", "grid@1", "--policy",
               "scripted", "--name", "vendor-9", "--licence", "CC-BY-4.0", "--key", "vendor2")
    for url in served(vendor):
        err = buyer.run("monitor", url, "--vkey", old, "--key", "approver").stderr
    assert (f"WARNING: the log's key was rotated: the key you gave handed over to "
            f"{vendor.vkey()}; pass that one with --vkey from now on") in err, err
    assert "(serial 2, was 1) removes key " in err and "take it out of your policy" in err, err
    assert "(serial 2, was 1) adds key " in err and "add its public key to [roles.producer]" \
        in err, err


def test_policy_init_names_a_kept_key_by_the_records_it_signed_here(tmp_path: Path) -> None:
    """out52's and out53's Left: the buyer (the vendor's key in its producer role, beside its
    own) writing a successor with ``policy init --approver approver2`` got the vendor's key
    under ``# kept from serial 1: ed25519, fingerprint …``: which key is it? Expected: named by
    the records it signed here and the log they came from."""
    from test_updates import Vendor, make_buyer

    vendor = Vendor(tmp_path, "vendor", "vendor.example/log")
    buyer = Party(tmp_path, "buyer")
    make_buyer(buyer, [vendor], keys=("approver2",))
    buyer.run("import", vendor.bundle, "--key", "approver")
    buyer.run("policy", "init", "--approver", "approver2", "--out", tmp_path / "p2.toml")
    text = (tmp_path / "p2.toml").read_text()
    assert (f"# kept from serial 1 (signed 4 record(s) here, from {vendor.origin}): "
            "ed25519, fingerprint ") in text, text
    assert "# producer: ed25519" in text, text  # the buyer's own, by its name
