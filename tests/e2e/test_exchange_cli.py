"""End to end: ``trajledger export`` / ``import`` and ``python -m verify`` on a quickstart ledger.

The vendor is a quickstart ledger; the buyer is a second ledger whose policy trusts the vendor's
log and keys and adds two buyer approvers, who sign the import record. Covers the full path
(export with and without data, offline verification, import, re-import as a no-op, consistency
with a checkpoint seen before) and the refusal paths (a tampered bundle, an untrusted log, keys
that are not approvers, bad references and options): exit codes and exact stderr, and nothing
copied into the buyer's ledger when an import is refused.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
import tamperkit as tk
import testkit
import zstandard
from click.testing import Result
from testkit import new_runner

from trajledger import Ledger
from trajledger.ledger.catalog import origin_name
from trajledger.ledger.encode import bundle_index_bytes, tlog_proof_bytes
from trajledger.runner.cli import main
from trajledger.verify.__main__ import main as verify_main
from trajledger.verify.bundle_index import BundleIndex, Member
from trajledger.verify.kinds import KINDS
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.tlog_proof import TlogProof


def run(home: Path, *args: str | Path, state: Path | None = None) -> Result:
    """Run a command; ``state`` is the user state directory of another party (the vendor)."""
    env = {"TRAJLEDGER_STATE_DIR": str(state)} if state is not None else None
    return new_runner().invoke(main, ["--ledger", str(home), *map(str, args)], env=env)


def expect(result: Result, code: int, stderr: str | None = None) -> None:
    assert result.exit_code == code, result.output
    if stderr is not None:
        assert result.stderr == stderr, result.output
    assert "Traceback" not in result.output


class Vendor:
    def __init__(self, root: Path, quickstart: testkit.Template[str]) -> None:
        self.home = testkit.copy_template(quickstart, root / "vendor")
        self.ref = quickstart.value
        self.policy = self.home / "policy.toml"
        self.bundle = root / "vendor.tar.zst"
        r = run(self.home, "export", self.ref, "--out", self.bundle)
        expect(r, 0)
        self.export_result = r
        self.vkey = Ledger.open(self.home).log.vkey
        self.size = Ledger.open(self.home).log.size
        members = tk.bundle_members(self.bundle)
        names = [n for n, _ in members]
        self.entries = sum(n.startswith("entries/") for n in names)
        self.objects = sum(n.startswith("objects/") for n in names)
        # The bundled entries an import logs in the buyer's log (all but trust policies).
        self.relogged = [
            LogEntry.from_bytes(d) for n, d in sorted(
                ((n, d) for n, d in members if n.startswith("entries/")),
                key=lambda m: int(m[0].split("/")[1]))
            if LogEntry.from_bytes(d).kind != "trust-policy"
        ]  # fmt: skip


@pytest.fixture(scope="module")
def vendor(
    quickstart_template: testkit.Template[str], tmp_path_factory: pytest.TempPathFactory
) -> Vendor:
    """A copy of the quickstart ledger, exported, as a user of its own (`testkit.as_own_user`)."""
    root = tmp_path_factory.mktemp("exchange")
    return testkit.as_own_user(root, lambda r: Vendor(r, quickstart_template))


BUYER_POLICY = testkit.BUYER_POLICY


@pytest.fixture
def buyer(tmp_path: Path, vendor: Vendor) -> Path:
    home = tmp_path / "buyer"
    expect(run(home, "init", "--origin", "buyer/log"), 0)
    for k in ("b1", "b2", "outsider"):
        expect(run(home, "key", "new", k, "--no-encrypt"), 0)
    trust = home / "trust"
    trust.mkdir()
    for p in [*(vendor.home / "keys").glob("*.pub"), *(home / "keys").glob("b*.pub")]:
        shutil.copy(p, trust / p.name)
    vkeys = f'"{vendor.vkey}", "{Ledger.open(home).log.vkey}"'
    (home / "policy.toml").write_text(BUYER_POLICY.format(vkeys=vkeys))
    return home


def verify_cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = verify_main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def store_count(home: Path) -> int:
    return sum(1 for p in (home / "objects").rglob("*") if p.is_file())


# -- the full path -------------------------------------------------------------------------------


def test_export_writes_a_bundle_that_verifies_offline(
    vendor: Vendor, capsys: pytest.CaptureFixture[str]
) -> None:
    r = vendor.export_result
    size = vendor.bundle.stat().st_size
    assert r.stdout == f"{vendor.ref}\n"
    assert r.stderr == (
        f"OK: {vendor.ref}: bundle {vendor.bundle} written: {vendor.entries} log entries, "
        f"{vendor.objects} objects, {size} bytes, checkpoint size {vendor.size}\n"
        "OK: terms stated in bundle.json: 2 batch(es): licence none stated (2); consent none "
        "stated (2); retention none stated (2)\n"
    )
    code, out, err = verify_cli(capsys, vendor.bundle, "--policy", vendor.policy)
    assert code == 0, err
    verdict, first = out.splitlines()[:2]
    assert verdict.startswith("✓ OK: checkpoint cartpole-bc@2 (") and verdict.endswith(
        " checks passed")
    assert first == f"✓ bundle {vendor.bundle.name}"
    assert "✓ checkpoint cartpole-bc@2" in out
    assert err.startswith(f"OK: {vendor.bundle}: ") and err.endswith(" checks passed\n")
    code, out, _ = verify_cli(capsys, vendor.bundle, "--policy", vendor.policy, "--json")
    assert code == 0 and json.loads(out)["ok"] is True


def test_export_without_data(
    vendor: Vendor, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "nodata.tar.zst"
    r = run(vendor.home, "export", vendor.ref, "--out", out, "--no-data")
    expect(r, 0)
    index = BundleIndex.from_bytes(tk.bundle_members(out)[0][1])
    omitted = len(index.omitted)
    assert (
        omitted > 5
        and f"{vendor.objects - omitted} objects, {omitted} data blob(s) omitted" in r.stderr
    )
    assert out.stat().st_size < vendor.bundle.stat().st_size / 2
    code, text, err = verify_cli(capsys, out, "--policy", vendor.policy)
    assert code == 0, err
    assert f"{omitted} data blob(s) not included (exported with --no-data)" in text
    # rev16: the OK line, what a script or a hurried reader takes as the answer, says so too
    # (whoever hands a bundle over can strip its data and list it as omitted: bundle.json is
    # not signed); before, it read as that of a bundle whose every blob was hashed.
    said = f" checks passed ({omitted} data blob(s) not in the bundle: their bytes not checked)"
    assert err.startswith(f"OK: {out}: ") and err.endswith(said + "\n"), err
    r = run(vendor.home, "verify", out, "--policy", vendor.policy)
    expect(r, 0)
    assert r.stderr.endswith(said + "\n"), r.stderr


def test_import_verifies_copies_and_records_once(vendor: Vendor, buyer: Path) -> None:
    policy = buyer / "policy.toml"
    r = run(buyer, "import", vendor.bundle, "--policy", policy, "--key", "b1", "--key", "b2")
    expect(r, 0)
    n = len(vendor.relogged)
    kinds: dict[str, int] = {}
    for e in vendor.relogged:
        if KINDS[e.kind].lineage:
            kinds[e.kind] = kinds.get(e.kind, 0) + 1
    assert r.stderr == (
        f"OK: checkpoint cartpole-bc@2 ({vendor.ref[:19]}…) from "
        f"{origin_name(vendor.vkey)}: imported, {vendor.objects} object(s), {n} foreign "
        f"record(s) in this log (log indices 0..{n - 1}), import record at log index {n}; its "
        f"log applied up to size {vendor.size}: ask its owner for updates with 'trajledger "
        f"export --updates-since {vendor.size}'\n"  # what the next update starts from (aud34)
        "OK: new: " + ", ".join(f"{v} {k}(s)" for k, v in sorted(kinds.items())) + "\n"
    )
    assert r.stdout.splitlines()[-1] == vendor.ref
    ledger = Ledger.open(buyer)
    assert ledger.log.size == n + 1
    # The vendor's records, unchanged (same kind, subject, envelope, signers), in its order.
    logged = [LogEntry.from_bytes(ledger.log.entry(i)) for i in range(n)]
    assert [(e.kind, e.subject, e.envelope, e.signers) for e in logged] == [
        (e.kind, e.subject, e.envelope, e.signers) for e in vendor.relogged
    ]
    stored = store_count(buyer)
    assert stored == vendor.objects + 1  # the bundle's objects and the import envelope
    # The buyer's own log now proves the checkpoint's whole lineage, under the buyer's policy.
    expect(run(buyer, "verify", vendor.ref, "--policy", policy), 0)
    # The same evidence again: nothing new.
    again = run(buyer, "import", vendor.bundle, "--policy", policy, "--key", "b1", "--key", "b2")
    expect(again, 0)
    since = f"'trajledger export --updates-since {vendor.size}'\n"
    assert again.stderr.endswith(f"already imported at log index {n}; nothing new recorded; "
                                 f"its log applied up to size {vendor.size}: ask its owner for "
                                 f"updates with {since}")
    assert Ledger.open(buyer).log.size == n + 1 and store_count(buyer) == stored


def test_import_record_carries_the_evidence(vendor: Vendor, buyer: Path) -> None:
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.merkle import leaf_hash, verify_inclusion
    from trajledger.verify.statement import Statement

    expect(
        run(
            buyer,
            "import",
            vendor.bundle,
            "--key",
            "b1",
            "--key",
            "b2",
            "--policy",
            buyer / "policy.toml",
        ),
        0,
    )
    ledger = Ledger.open(buyer)
    entry = LogEntry.from_bytes(ledger.log.entry(ledger.log.size - 1))
    assert (entry.kind, entry.subject) == ("import", vendor.ref)
    st = Statement.from_bytes(Envelope.from_bytes(ledger.store.get(entry.envelope)).payload)
    p = st.predicate
    assert p["artifact"]["kind"] == "checkpoint" and p["artifact"]["digest"] == vendor.ref
    assert p["log"]["vkey"] == vendor.vkey
    assert p["log"]["checkpoint"] == (vendor.home / "log" / "checkpoint").read_text()
    assert p["dataIncluded"] is True
    root = Ledger.open(vendor.home).log.checkpoint().root
    import base64

    for e in p["entries"]:
        proof = [base64.b64decode(h) for h in e["inclusion"]]
        verify_inclusion(e["index"], vendor.size, leaf_hash(e["entry"].encode()), proof, root)


def test_show_names_the_log_an_import_brought_a_record_from(vendor: Vendor, buyer: Path) -> None:
    import json

    policy = buyer / "policy.toml"
    expect(run(buyer, "import", vendor.bundle, "--policy", policy, "--key", "b1", "--key", "b2"), 0)
    origin = origin_name(vendor.vkey)
    shown = run(buyer, "show", vendor.ref, "--json")
    expect(shown, 0)
    assert json.loads(shown.stdout)["origins"] == [origin]
    text = run(buyer, "show", vendor.ref)
    expect(text, 0)
    assert f"  imported    from the log {origin}\n" in text.stdout
    # A record shown by its envelope digest (the vendor's approval) names it too.
    approval = next(e for e in vendor.relogged if e.kind == "approval")
    by_envelope = run(buyer, "show", approval.envelope, "--json")
    expect(by_envelope, 0)
    assert json.loads(by_envelope.stdout)["origins"] == [origin]
    # The buyer's own records, and the vendor's in its own ledger, name none.
    own = LogEntry.from_bytes(Ledger.open(buyer).log.entry(Ledger.open(buyer).log.size - 1))
    assert json.loads(run(buyer, "show", own.envelope, "--json").stdout)["origins"] == []
    home = run(vendor.home, "show", vendor.ref)
    expect(home, 0)
    assert "imported" not in home.stdout


# -- refusals ------------------------------------------------------------------------------------


def test_import_of_a_tampered_bundle_copies_nothing(
    vendor: Vendor, buyer: Path, tmp_path: Path
) -> None:
    members = tk.bundle_members(vendor.bundle)
    name, data = max(members[1:], key=lambda m: len(m[1]))  # the biggest data blob
    i = len(data) // 2
    bad = [(n, d[:i] + bytes([d[i] ^ 1]) + d[i + 1 :] if n == name else d) for n, d in members]
    tampered = tk.write_bundle(tmp_path / "tampered.tar.zst", bad, reindex=True)
    r = run(
        buyer, "import", tampered, "--policy", buyer / "policy.toml", "--key", "b1", "--key", "b2"
    )
    expect(r, 1)
    assert r.stderr.startswith(f"FAIL: bundle tampered.tar.zst: member {name}: content hashes to")
    assert "not its name: changed since it was made: get it again" in r.stderr, r.stderr
    assert Ledger.open(buyer).log.size == 0 and store_count(buyer) == 0


def test_import_under_a_policy_not_trusting_the_vendor_log_copies_nothing(
    vendor: Vendor, buyer: Path
) -> None:
    text = (buyer / "policy.toml").read_text().replace(f'"{vendor.vkey}", ', "")
    (buyer / "untrusting.toml").write_text(text)
    r = run(
        buyer,
        "import",
        vendor.bundle,
        "--policy",
        buyer / "untrusting.toml",
        "--key",
        "b1",
        "--key",
        "b2",
    )
    expect(r, 1)
    lines = r.stderr.splitlines()
    assert lines[0].startswith(f"FAIL: import {vendor.bundle.name}: ")
    assert lines[0].endswith("checks failed; nothing imported")
    assert any("trusted log key" in line for line in lines[1:])
    assert Ledger.open(buyer).log.size == 0 and store_count(buyer) == 0


def test_import_says_the_bundles_own_problems_before_the_threshold(
        vendor: Vendor, buyer: Path) -> None:
    """A file that is no bundle, or a bundle that does not verify, given one approver key where
    two are needed, said only `signed by 1 approver key(s), policy 'buyer' wants 2` (out36's
    Left): the user gathered a second approver for a file then refused. Now the file's own
    problem first, the threshold after it (left37); nothing imported either way."""
    policy = buyer / "policy.toml"
    junk = buyer / "junk.tar.zst"
    junk.write_bytes(b"junk")
    expect(run(buyer, "import", junk, "--policy", policy, "--key", "b1"), 1,
           "FAIL: bundle junk.tar.zst: not zstd-compressed (magic 6a756e6b): not a bundle; "
           "'import' takes the .tar.zst file 'trajledger export' writes, as it was sent "
           "(rollout files are recorded with 'trajledger record'); nothing imported\n")
    text = (buyer / "policy.toml").read_text().replace(f'"{vendor.vkey}", ', "")
    (buyer / "untrusting.toml").write_text(text)
    r = run(buyer, "import", vendor.bundle, "--policy", buyer / "untrusting.toml", "--key", "b1")
    expect(r, 1)
    lines = r.stderr.splitlines()
    assert lines[0].startswith(f"FAIL: import {vendor.bundle.name}: "), r.stderr
    assert lines[0].endswith("checks failed; nothing imported"), r.stderr
    assert lines[-1] == ("FAIL: import: signed by 1 approver key(s), policy 'buyer' wants 2: "
                         "give --key for each of 2 approver key(s) (the policy's approver "
                         "keys here: b1, b2)")  # the way on (upd47, out46's Left)
    assert Ledger.open(buyer).log.size == 0 and store_count(buyer) == 0


def test_import_needs_the_approver_threshold(vendor: Vendor, buyer: Path) -> None:
    policy = buyer / "policy.toml"
    expect(
        run(buyer, "import", vendor.bundle, "--policy", policy, "--key", "outsider", "--key", "b1"),
        1,
        "FAIL: import: key(s) outsider are not approvers in policy 'buyer': give --key for "
        "each of 2 approver key(s) (the policy's approver keys here: b1, b2)\n",
    )
    expect(
        run(buyer, "import", vendor.bundle, "--policy", policy, "--key", "b1"),
        1,
        "FAIL: import: signed by 1 approver key(s), policy 'buyer' wants 2: give --key for "
        "each of 2 approver key(s) (the policy's approver keys here: b1, b2)\n",
    )
    expect(
        run(buyer, "import", buyer / "nope.tar.zst", "--policy", policy, "--key", "b1"),
        3,
        f"FAIL: bundle {buyer / 'nope.tar.zst'}: no such file\n",
    )
    assert store_count(buyer) == 0


def test_export_refusals(vendor: Vendor, tmp_path: Path) -> None:
    tk.pin_log(vendor.home)
    out = tmp_path / "x.tar.zst"
    r = run(vendor.home, "export", "no-such-thing@1", "--out", out)
    expect(r, 3)
    assert r.stderr.startswith("FAIL: ") and not out.exists()
    expect(
        run(vendor.home, "export", vendor.ref, "--out", out, "--consistency-from", "99"),
        3,
        f"FAIL: export: consistency from size 99: want 1..{vendor.size} (the checkpoint's size)\n",
    )
    assert not out.exists() and list(tmp_path.iterdir()) == []
    expect(run(vendor.home, "export", vendor.ref), 2)


@pytest.mark.parametrize(("fmt", "option"), [
    ("bundle", ["--dataset-id", "x/y-v0"]),
    ("bundle", ["--minari-backend", "arrow"]),
    ("parquet", ["--key", "trainer"]),
    ("jsonl", ["--dataset-id", "x/y-v0"]),
    ("sigstore", ["--minari-backend", "hdf5"]),  # given, even as the default
])
def test_an_option_of_another_format_is_a_usage_error(
    vendor: Vendor, tmp_path: Path, fmt: str, option: list[str]
) -> None:
    """Review rev15's left item: options another format reads were silently ignored (a
    ``--key`` meant to choose the signature, a ``--dataset-id``); the bundle was written, exit
    0. Now exit 2, naming the option and where it applies; nothing is written."""
    tk.pin_log(vendor.home)
    out = tmp_path / "out"
    r = run(vendor.home, "export", vendor.ref, "--format", fmt, "--out", out, *option)
    expect(r, 2)
    assert f"{option[0]} applies to --format" in r.stderr and f"not {fmt}" in r.stderr
    assert not out.exists()


def test_verify_command_line_refusals(
    vendor: Vendor, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        verify_main([str(vendor.bundle)])
    assert e.value.code == 2
    capsys.readouterr()
    code, _, err = verify_cli(capsys, tmp_path / "none.tar.zst", "--policy", vendor.policy)
    assert (code, err) == (
        3,
        f"FAIL: {tmp_path / 'none.tar.zst'}: bundle {tmp_path / 'none.tar.zst'}: no such file\n",
    )
    code, _, err = verify_cli(capsys, vendor.bundle, "--policy", tmp_path / "none.toml")
    assert (code, err) == (
        3,
        f"FAIL: {vendor.bundle}: policy {tmp_path / 'none.toml'}: no such file\n",
    )


@pytest.mark.parametrize("name", ["d", "d.tar.zst"])
def test_a_directory_given_as_the_bundle_is_named_as_one(
    vendor: Vendor, buyer: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Review rev5: a directory where a bundle file is expected said "no such file" (or, to
    ``verify``, named no artifact). Every command taking a bundle says it is a directory, one
    line, exit 3 (operational, as a missing file: the arguments were well formed)."""
    d = tmp_path / name
    d.mkdir()
    want = f"bundle {d}: is a directory, want a .tar.zst bundle file"
    policy = buyer / "policy.toml"
    expect(run(buyer, "import", d, "--policy", policy, "--key", "b1"), 3, f"FAIL: {want}\n")
    assert verify_cli(capsys, d, "--policy", vendor.policy) == (3, "", f"FAIL: {d}: {want}\n")
    for home in (buyer, tmp_path / "no-ledger"):  # a name of none, or no ledger to look it up
        r = run(home, "verify", d, "--policy", vendor.policy)
        expect(r, 3)
        assert r.stderr.startswith(f"FAIL: {want} (a model's files go with --files DIR); as a "
                                   f"REF: "), r.stderr
        assert r.stderr.count("\n") == 1 and r.stdout == "", r.output
    expect(run(buyer, "fsck", "--repair", "--from", d), 3,
           f"FAIL: {want} or a ledger directory (it holds no ledger.toml)\n")
    expect(run(buyer, "fsck", "--repair", "--from", tmp_path / "none.tar.zst"), 3,
           f"FAIL: bundle {tmp_path / 'none.tar.zst'}: no such file\n")
    assert store_count(buyer) == 0


def test_known_checkpoint_consistency(
    vendor: Vendor, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "vendor"
    shutil.copytree(vendor.home, home)
    old = tmp_path / "seen.checkpoint"
    old.write_bytes((home / "log" / "checkpoint").read_bytes())
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "f.txt").write_text("more\n")
    expect(run(home, "attest", tmp_path / "more", "--key", "vendor"), 0)
    grown = tmp_path / "grown.tar.zst"
    expect(
        run(home, "export", vendor.ref, "--out", grown, "--consistency-from", str(vendor.size)), 0
    )
    policy = home / "policy.toml"
    code, out, err = verify_cli(capsys, grown, "--policy", policy, "--known-checkpoint", old)
    assert code == 0, err
    n = vendor.size
    assert f"✓ consistent with the checkpoint seen before — size {n} -> {n + 1}" in out
    plain = tmp_path / "plain.tar.zst"
    expect(run(home, "export", vendor.ref, "--out", plain), 0)
    code, _, err = verify_cli(capsys, plain, "--policy", policy, "--known-checkpoint", old)
    assert code == 1
    assert f"the bundle holds no consistency proof from size {n} to {n + 1}" in err


# -- each foreign origin is remembered: rollback, unprovable, fork -------------------------------


def _grown(vendor: Vendor, where: Path, note: str) -> Path:
    """A copy of the vendor ledger (same log key) with one more record appended, by a vendor
    user of its own (the buyer's state never sees the vendor's log directly)."""
    home = where / "vendor-copy"
    shutil.copytree(vendor.home, home)
    state = where / "vendor-state"
    state.mkdir(parents=True)
    expect(run(home, "approve", "cartpole-train@2", "--key", "approver-a", "--note", note,
               state=state), 0)
    return home


def test_import_refuses_a_rollback_of_the_origin(
    vendor: Vendor, buyer: Path, tmp_path: Path
) -> None:
    grown = _grown(vendor, tmp_path, "later")
    newer = tmp_path / "newer.tar.zst"
    expect(run(grown, "export", vendor.ref, "--out", newer, state=tmp_path / "vendor-state"), 0)
    policy = buyer / "policy.toml"
    expect(run(buyer, "import", newer, "--policy", policy, "--key", "b1", "--key", "b2"), 0)
    before = store_count(buyer), Ledger.open(buyer).log.size
    r = run(buyer, "import", vendor.bundle, "--policy", policy, "--key", "b1", "--key", "b2")
    expect(r, 1)
    assert r.stderr.startswith(
        f"FAIL: import {vendor.bundle.name}: the log {origin_name(vendor.vkey)}: rollback: "
        f"{vendor.vkey.split('+')[0]} size {vendor.size + 1} root "
    ), r.stderr
    assert f"accepted before; size {vendor.size} root " in r.stderr
    assert (store_count(buyer), Ledger.open(buyer).log.size) == before


def test_import_of_a_newer_bundle_needs_the_log_since_what_was_applied(
    vendor: Vendor, buyer: Path, tmp_path: Path
) -> None:
    """Issue 19: an import takes the vendor's log extension, not one verdict: a bundle of a
    log that grew since the size the buyer applied must carry every entry since (export
    --updates-since); a consistency proof alone shows the log grew, not what it says."""
    policy = buyer / "policy.toml"
    expect(run(buyer, "import", vendor.bundle, "--policy", policy, "--key", "b1", "--key", "b2"), 0)
    grown = _grown(vendor, tmp_path, "later")
    bare, proved = tmp_path / "bare.tar.zst", tmp_path / "proved.tar.zst"
    late, updated = tmp_path / "late.tar.zst", tmp_path / "updated.tar.zst"
    state = tmp_path / "vendor-state"
    expect(run(grown, "export", vendor.ref, "--out", bare, state=state), 0)
    expect(run(grown, "export", vendor.ref, "--out", proved, "--consistency-from",
               str(vendor.size), state=state), 0)
    expect(run(grown, "export", vendor.ref, "--out", late, "--updates-since",
               str(vendor.size + 1), state=state), 0)
    expect(run(grown, "export", vendor.ref, "--out", updated, "--updates-since",
               str(vendor.size), state=state), 0)
    size = Ledger.open(buyer).log.size
    for bundle, why in [(bare, "it holds no extension"), (proved, "it holds no extension"),
                        (late, f"its extension starts at {vendor.size + 1}")]:
        r = run(buyer, "import", bundle, "--policy", policy, "--key", "b1", "--key", "b2")
        expect(r, 1)
        assert r.stderr == (
            f"FAIL: import {bundle.name}: the log {origin_name(vendor.vkey)}: unprovable: the "
            f"bundle does not carry the log since size {vendor.size}, what you applied of it "
            f"({why}; its checkpoint has size {vendor.size + 1}): ask for a bundle exported "
            f"with --updates-since {vendor.size}\n"), r.stderr
        assert Ledger.open(buyer).log.size == size
    r = run(buyer, "import", updated, "--policy", policy, "--key", "b1", "--key", "b2")
    expect(r, 0)
    # The vendor's new approval is about a dataset the buyer holds: taken in.
    assert "imported, " in r.stderr and "1 foreign record(s) in this log" not in r.stderr


def test_import_refuses_a_fork_of_the_origin(vendor: Vendor, buyer: Path, tmp_path: Path) -> None:
    policy = buyer / "policy.toml"
    one = _grown(vendor, tmp_path / "a", "view one")
    two = _grown(vendor, tmp_path / "b", "view two")  # same key, same size, another entry
    a, b = tmp_path / "a.tar.zst", tmp_path / "b.tar.zst"
    expect(run(one, "export", vendor.ref, "--out", a, state=tmp_path / "a" / "vendor-state"), 0)
    expect(run(two, "export", vendor.ref, "--out", b, state=tmp_path / "b" / "vendor-state"), 0)
    expect(run(buyer, "import", a, "--policy", policy, "--key", "b1", "--key", "b2"), 0)
    r = run(buyer, "import", b, "--policy", policy, "--key", "b1", "--key", "b2")
    expect(r, 1)
    assert ": fork: two roots at one size: " in r.stderr
    # The accepted view is kept in the signed import record: a fresh user state still knows it.
    fresh = tmp_path / "fresh-state"
    fresh.mkdir()
    r = new_runner().invoke(
        main, ["--ledger", str(buyer), "import", str(b), "--policy", str(policy), "--key", "b1",
               "--key", "b2"], env={"TRAJLEDGER_STATE_DIR": str(fresh)},
    )
    expect(r, 1)
    assert ": fork: two roots at one size: " in r.stderr


def test_import_json_prints_one_document(vendor: Vendor, buyer: Path) -> None:
    """``import --json`` prints the verification report as one JSON document (its subject is
    the imported artifact); the text form ends with the digest, for ``$(... | tail -n1)``."""
    policy = buyer / "policy.toml"
    r = run(buyer, "import", vendor.bundle, "--policy", policy, "--key", "b1", "--key", "b2",
            "--json")  # fmt: skip
    expect(r, 0)
    report = json.loads(r.stdout)
    assert (report["subject"], report["ok"], report["failed"]) == (vendor.ref, True, 0)
    again = run(buyer, "import", vendor.bundle, "--policy", policy, "--key", "b1", "--key", "b2")
    expect(again, 0)
    assert again.stdout.splitlines()[-1] == vendor.ref
    assert again.stdout.splitlines()[0].startswith("✓ ")


# -- streamed import: a refusal leaves nothing -----------------------------------------------------


def tree(home: Path) -> dict[str, bytes]:
    """Every file under ``home`` by relative path, with its bytes."""
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*"))
            if p.is_file()}


def tar_raw(path: Path, infos: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    """A bundle of exactly these tar members (links, odd names and all), zstd-compressed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in infos:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    path.write_bytes(zstandard.ZstdCompressor().compress(buf.getvalue()))
    return path


def _file(name: str, data: bytes, size: int | None = None) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data) if size is None else size
    return info, data.ljust(info.size, b"\0")[: info.size]


def hostile(vendor: Vendor, where: Path) -> dict[str, tuple[Path, str]]:
    """Bundles made from the vendor's real one that every import must refuse, each with the
    start of the message it is refused with. All but the first three are refused while the
    bundle is read; those three open (every object streamed into staging) and then fail."""
    members = tk.bundle_members(vendor.bundle)
    index = members[0][1]
    name, data = max(members[1:], key=lambda m: len(m[1]))  # the biggest data blob
    flipped = data[:-1] + bytes([data[-1] ^ 1])
    cp = next(d for n, d in members if n == "checkpoint")
    head, _, sig = cp.rstrip(b"\n").rpartition(b" ")
    raw = base64.b64decode(sig)
    bad_cp = head + b" " + base64.b64encode(raw[:-1] + bytes([raw[-1] ^ 1])) + b"\n"
    plain = [_file(n, d) for n, d in members]
    at = {n: i for i, (n, _) in enumerate(members)}
    b = vendor.bundle.name

    def swap(i: int, item: tuple[tarfile.TarInfo, bytes]) -> list[tuple[tarfile.TarInfo, bytes]]:
        return [*plain[:i], item, *plain[i + 1:]]

    spare = spare_name()
    listed = BundleIndex.from_bytes(index)
    spare_index = bundle_index_bytes(dataclasses.replace(listed, members=tuple(sorted(
        [*listed.members, Member(spare, 5, spare[15:])], key=lambda m: m.name))))
    with_spare = sorted([*plain[1:], _file(spare, b"spare")], key=lambda m: m[0].name)  # listed
    link = tarfile.TarInfo(name)
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    whole = vendor.bundle.read_bytes()
    out = {
        "untrusted-policy": (vendor.bundle, f"FAIL: import {b}: "),
        "checkpoint-resigned": (
            tk.write_bundle(where / "cp.tar.zst", [(n, bad_cp if n == "checkpoint" else d)
                                          for n, d in members], reindex=True),
            "FAIL: bundle cp.tar.zst: member checkpoint: not signed by the log key in bundle.json"),
        "unused-member": (tar_raw(where / "unused.tar.zst", [_file("bundle.json", spare_index),
                                                            *with_spare]),
                          "FAIL: import unused.tar.zst: 1 of "),
        "digest-mismatch": (tar_raw(where / "digest.tar.zst", swap(at[name], _file(name, flipped))),
                            f"FAIL: bundle digest.tar.zst: member {name}: content hashes to"),
        "not-its-name": (tk.write_bundle(where / "name.tar.zst", [(n, flipped if n == name else d)
                                                         for n, d in members], reindex=True),
                         f"FAIL: bundle name.tar.zst: member {name}: content hashes to"),
        "size-lie": (tar_raw(where / "size.tar.zst", swap(at[name], _file(name, data[:-1]))),
                     f"FAIL: bundle size.tar.zst: member {name}: {len(data) - 1} bytes, "
                     f"bundle.json says {len(data)}"),
        "unknown-member": (tar_raw(where / "extra.tar.zst", [*plain, _file("entries/999", b"x")]),
                           "FAIL: bundle extra.tar.zst: member entries/999: not listed"),
        "duplicate": (tar_raw(where / "dup.tar.zst", [*plain, plain[at[name]]]),
                      f"FAIL: bundle dup.tar.zst: member {name}: appears twice"),
        "traversal": (tar_raw(where / "up.tar.zst", [*plain, _file("objects/../../x", b"x")]),
                      "FAIL: member 'objects/../../x': path escapes the bundle ('..')"),
        "symlink": (tar_raw(where / "link.tar.zst", swap(at[name], (link, b""))),
                    f"FAIL: bundle link.tar.zst: member '{name}' is a symbolic link"),
        "index-lies": (tar_raw(where / "missing.tar.zst", [m for m in plain if m[0].name != name]),
                       f"FAIL: bundle missing.tar.zst: member {name}: listed in bundle.json "
                       "but missing"),
        "truncated": (where / "cut.tar.zst", "FAIL: bundle cut.tar.zst: "),
        "bomb": (tar_raw(where / "bomb.tar.zst", [_file("bundle.json", index.replace(
            f'"size":{len(data)}'.encode(), f'"size":{65 << 30}'.encode()))]),
            "FAIL: bundle bomb.tar.zst: bundle.json declares"),
    }
    (where / "cut.tar.zst").write_bytes(whole[: len(whole) * 2 // 3])
    # One carried proof of the middle altered: a hash of its path (it leads to another root), or
    # its checkpoint note, signed no more, among the others' unaltered one (xfer45: the import
    # checks each carried proof once, and parses one note once).
    proofs = [n for n, _ in members if n.endswith(".tlog-proof")]
    pname = proofs[len(proofs) // 2]
    proof = TlogProof.from_bytes(dict(members)[pname])
    path = tlog_proof_bytes(dataclasses.replace(proof, inclusion=(bytes(32), *proof.inclusion[1:])))
    note = tlog_proof_bytes(dataclasses.replace(proof, checkpoint=bad_cp))
    for case, file, altered, message in (
            ("proof-path", "path", path, f"members entries/{proof.index} and {pname}: not "
             "included under the tree"),
            ("proof-note", "note", note, f"member {pname}: proves against another checkpoint")):
        out[case] = (tk.write_bundle(where / f"{file}.tar.zst", [
            (n, altered if n == pname else d) for n, d in members], reindex=True),
            f"FAIL: bundle {file}.tar.zst: {message}")
    return out


def spare_name() -> str:
    return "objects/sha256/" + hashlib.sha256(b"spare").hexdigest()


HOSTILE = ["untrusted-policy", "checkpoint-resigned", "unused-member", "digest-mismatch",
           "not-its-name", "size-lie", "unknown-member", "duplicate", "traversal", "symlink",
           "index-lies", "truncated", "bomb", "proof-path", "proof-note"]


@pytest.mark.parametrize("case", HOSTILE)
def test_a_refused_import_leaves_the_ledger_byte_identical(
    vendor: Vendor, buyer: Path, tmp_path: Path, case: str
) -> None:
    """Streamed import refuses every hostile bundle, and the refusal leaves every file of the
    buyer's ledger as it was (store, log, keys) and no staging behind, whether the bundle was
    refused while read or after every object was staged (a failed verification)."""
    path, message = hostile(vendor, tmp_path)[case]
    policy = buyer / "policy.toml"
    if case == "untrusted-policy":
        policy = buyer / "untrusting.toml"
        policy.write_text((buyer / "policy.toml").read_text().replace(f'"{vendor.vkey}", ', ""))
    before = tree(buyer)
    r = run(buyer, "import", path, "--policy", policy, "--key", "b1", "--key", "b2")
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith(message), r.stderr
    assert case != "truncated" or "truncated" in r.stderr, r.stderr
    assert case != "unused-member" or f"member {spare_name()} is not used" in r.stderr, r.stderr
    assert "Traceback" not in r.output
    assert tree(buyer) == before
    assert not (buyer / "tmp").exists() or list((buyer / "tmp").iterdir()) == []


def test_staging_a_killed_import_left_is_cleaned_by_the_next(vendor: Vendor, buyer: Path) -> None:
    """A killed import leaves only its staging directory under ``<ledger>/tmp``: ``fsck``
    names it a stale leftover, and the next import removes it before it appends."""
    from trajledger.ledger.fs import temp_name

    dead = 2**22 + 12345  # above the default pid_max: no live process has it
    staging = buyer / "tmp" / temp_name(".d").replace(f"-{os.getpid()}-", f"-{dead}-")
    (staging / "trajledger-bundle-x" / "objects").mkdir(parents=True)
    (staging / "trajledger-bundle-x" / "objects" / ("ab" * 32)).write_bytes(b"half")
    r = run(buyer, "fsck", "--json")
    assert str(staging) in r.output, r.output
    expect(run(buyer, "import", vendor.bundle, "--policy", buyer / "policy.toml",
               "--key", "b1", "--key", "b2"), 0)
    assert list((buyer / "tmp").iterdir()) == []
