"""Terms travel with the data: licence, consent and retention in the bundle, erased blobs left
out and said so, and a buyer's policy that refuses licences it does not accept.

A vendor ledger (library calls, small classic rollouts) records batches under two licences,
erases one batch, and exports a dataset. Checked: ``bundle.json`` (format 2) states each batch's
terms exactly as its signed record does, and lists the erased blobs; ``python -m verify`` passes
and says so; an edited ``bundle.json`` (a licence changed, a blob claimed erased that no erasure
deleted) fails naming it; ``import`` under ``accepted_licences`` refuses a batch under another
licence (or none) with exit 1 and says why, copying nothing; a format 1 bundle (trajledger
0.1.0) still verifies (tests/e2e/test_compat.py) and its index still parses.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import tamperkit as tk
from click.testing import Result
from testkit import new_runner

from trajledger import Ledger
from trajledger.ledger.encode import bundle_index_bytes
from trajledger.runner.cli import main
from trajledger.verify.__main__ import main as verify_main
from trajledger.verify.bundle_index import BundleIndex, Member

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "compat-0.1.0"

POLICY = """\
name = "{name}"
serial = 1
{extra}
[roles.producer]
keys = ["{keys}/vendor.pub"]
[roles.approver]
keys = ["{keys}/approver.pub"]
[roles.log]
vkeys = [{vkeys}]
"""


def rows(episodes: int, seed: int) -> list[dict[str, Any]]:
    return [
        {"episode_id": f"ep-{seed}-{e}", "step": s, "obs": [float(seed), float(e), s / 4],
         "action": [float((e + s) % 2)], "reward": float(e), "terminated": s == 3,
         "truncated": False}
        for e in range(episodes) for s in range(4)
    ]  # fmt: skip


def run(*args: str | Path) -> Result:
    r = new_runner()
    return r.invoke(main, [str(a) for a in args])


class World:
    def __init__(self, root: Path) -> None:
        from trajledger.ledger.artifacts import create_dataset, record_batch, register_environment
        from trajledger.ledger.status import erase, record_policy

        self.root = root
        self.home = root / "vendor"
        ledger = Ledger.init(self.home, origin="vendor.example/terms")
        self.vendor = ledger.keys.create("vendor", encrypt=False)
        approver = ledger.keys.create("approver", encrypt=False)
        self.vkey = str(ledger.log.vkey)
        self.policy = self.home / "policy.toml"
        self.policy.write_text(POLICY.format(name="vendor", keys="keys", vkeys=f'"{self.vkey}"',
                                             extra=""))  # fmt: skip
        record_policy(ledger, self.policy, [approver])
        register_environment(ledger, "grid", "1", self.vendor, source="tests")
        terms = {1: ("CC-BY-4.0", "opt-in", "365d"), 2: ("proprietary-vendor", "contract", None),
                 3: ("CC-BY-4.0", "opt-in", "30d")}  # fmt: skip
        self.batches = {}
        for seed, (licence, consent, retention) in terms.items():
            self.batches[seed] = record_batch(
                ledger, rows(4, seed), env="grid@1", policy="random", signer=self.vendor,
                name=f"b{seed}", licence=licence, consent=consent, retention=retention,
            ).recorded.digest  # fmt: skip
        self.erased_blobs = sorted(
            f["digest"]["sha256"] for f in json.loads(
                ledger.store.get(self.batches[3]))["files"]
        )  # fmt: skip
        create_dataset(ledger, "mixed", "1", "train", list(self.batches.values()), self.vendor)
        create_dataset(ledger, "open", "1", "train", [self.batches[1]], self.vendor)
        erase(ledger, self.batches[3], self.vendor, reason="consent")
        self.bundle = root / "mixed.tar.zst"
        self.export = run("--ledger", self.home, "export", "mixed@1", "--out", self.bundle)
        assert self.export.exit_code == 0, self.export.output


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("terms"))


def test_the_bundle_states_each_batchs_terms_and_the_erased_blobs(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    index = BundleIndex.from_bytes(tk.bundle_members(world.bundle)[0][1])
    assert index.format == 2
    got = {t.batch: (t.licence, t.consent, t.retention) for t in index.terms}
    assert got == {
        world.batches[1]: ("CC-BY-4.0", "opt-in", "365d"),
        world.batches[2]: ("proprietary-vendor", "contract", None),
        world.batches[3]: ("CC-BY-4.0", "opt-in", "30d"),
    }
    # The erased batch's data is not in the bundle, and the index says why.
    assert [d[7:] for d in index.erased] == world.erased_blobs
    names = {m.name for m in index.members}
    assert not any(f"objects/sha256/{h}" in names for h in world.erased_blobs)
    err = world.export.stderr
    assert err.startswith(
        "WARNING: 2 blob(s) of the lineage are not in the bundle: erasure records deleted them "
        "(listed as erased in bundle.json; their digests still verify)\n"
    ), err
    assert err.endswith(
        "OK: terms stated in bundle.json: 3 batch(es): licence CC-BY-4.0 (2), proprietary-vendor "
        "(1); consent contract (1), opt-in (2); retention 30d (1), 365d (1), none stated (1)\n"
    ), err
    assert verify_main([str(world.bundle), "--policy", str(world.policy)]) == 0
    out = capsys.readouterr().out
    assert "✓ terms — 3 batch(es), as signed: licence CC-BY-4.0 (2), proprietary-vendor (1)" in out
    assert "· erased — 2 blob(s) not in the bundle: deleted by verified erasure records" in out
    assert "∅ erased" in out


def _edited(world: World, tmp_path: Path, edit: Any) -> Path:
    """The bundle with ``bundle.json`` edited (it is not covered by any member hash)."""
    items = tk.bundle_members(world.bundle)
    obj = json.loads(items[0][1])
    edit(obj, items)
    index = BundleIndex.from_bytes(json.dumps(obj, separators=(",", ":"), sort_keys=True).encode())
    return tk.write_bundle(tmp_path / "edited.tar.zst",
                  [("bundle.json", bundle_index_bytes(index)), *items[1:]])


def test_a_licence_edited_in_the_index_fails(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(obj: dict[str, Any], _items: Any) -> None:
        for t in obj["terms"]:
            if t["licence"] == "proprietary-vendor":
                t["licence"] = "CC0-1.0"

    bad = _edited(world, tmp_path, edit)
    assert verify_main([str(bad), "--policy", str(world.policy)]) == 1
    err = capsys.readouterr().err
    assert (f"bundle.json states licence CC0-1.0, consent contract, retention none for batch "
            f"{world.batches[2][:19]}…; its signed record states licence proprietary-vendor, "
            "consent contract, retention none") in err, err  # fmt: skip


def test_a_blob_claimed_erased_that_no_erasure_deleted_fails(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(obj: dict[str, Any], items: list[tuple[str, bytes]]) -> None:
        # Drop a data blob of batch 1 from the bundle and claim it was erased.
        manifest = json.loads(dict(items)[f"objects/sha256/{world.batches[1][7:]}"])
        gone = manifest["files"][0]["digest"]["sha256"]
        items[:] = [i for i in items if i[0] != f"objects/sha256/{gone}"]
        obj["members"] = [m for m in obj["members"] if m["name"] != f"objects/sha256/{gone}"]
        obj["erased"] = sorted([*obj["erased"], f"sha256:{gone}"])

    bad = _edited(world, tmp_path, edit)
    assert verify_main([str(bad), "--policy", str(world.policy)]) == 1
    err = capsys.readouterr().err
    assert "as erased, but no verified erasure record of this lineage deleted it" in err, err


def test_the_index_format_is_versioned() -> None:
    fixture = tk.bundle_members(FIXTURES / "checkpoint.tar.zst")[0][1]
    old = BundleIndex.from_bytes(fixture)
    assert old.format == 1 and old.terms == () and old.erased == ()
    assert bundle_index_bytes(old) == fixture  # read and written back byte for byte
    obj = json.loads(fixture)
    from trajledger.verify.errors import FormatError

    for fmt, extra, problem in [
        (5, {}, r"format 5, want one of \[1, 2, 3, 4\] \(a newer trajledger wrote it\? upgrade"),
        (4, {"terms": [], "erased": []}, r"missing \['extension'\]"),
        (4, {"terms": [], "erased": [], "extension": None}, r"extension None: format 4 has an"),
        (2, {"terms": [], "erased": [], "extension": 3}, r"unknown \['extension'\]"),
        (3, {"terms": [], "erased": []}, r"format 3 without key handovers"),
        (1, {"terms": [], "erased": []}, r"unknown \['erased', 'terms'\]"),
        (2, {}, r"missing \['erased', 'terms'\]"),
        (2, {"terms": [{"batch": "sha256:" + "a" * 64}], "erased": []},
         r"terms\[0\]: must have exactly batch, consent, licence, retention"),
        (2, {"terms": [{"batch": "sha256:" + "b" * 64, "licence": None, "consent": None,
                        "retention": None},
                       {"batch": "sha256:" + "a" * 64, "licence": None, "consent": None,
                        "retention": None}], "erased": []},
         r"terms must be sorted by batch"),
        (2, {"terms": [], "erased": ["sha256:" + "a" * 64, "sha256:" + "a" * 64]},
         r"erased digests must be sorted and unique"),
        (2, {"terms": [{"batch": "sha256:" + "a" * 64, "licence": 7, "consent": None,
                        "retention": None}], "erased": []}, r"licence must be a string or null"),
    ]:  # fmt: skip
        changed = {**obj, "format": fmt, **extra}
        data = json.dumps(changed, separators=(",", ":"), sort_keys=True).encode()
        with pytest.raises(FormatError, match=problem):
            BundleIndex.from_bytes(data)
    listed = Member("checkpoint", 1, "0" * 64)
    with pytest.raises(FormatError, match="listed as erased and also present or omitted"):
        BundleIndex("sha256:" + "a" * 64, "o", "v", "2025-01-01T00:00:00Z", (listed,),
                    ("sha256:" + "b" * 64,), erased=("sha256:" + "b" * 64,))  # fmt: skip


# -- the buyer's licences -------------------------------------------------------------------------


def buyer(world: World, root: Path, accepted: str) -> tuple[Path, Path]:
    home = root / "buyer"
    ledger = Ledger.init(home, origin="buyer.example/log")
    ledger.keys.create("approver", encrypt=False)
    trust = home / "trust"
    trust.mkdir()
    shutil.copy(world.home / "keys" / "vendor.pub", trust)
    shutil.copy(home / "keys" / "approver.pub", trust)
    policy = home / "policy.toml"
    policy.write_text(POLICY.format(
        name="buyer", keys="trust", vkeys=f'"{world.vkey}", "{ledger.log.vkey}"', extra=accepted))
    return home, policy  # fmt: skip


def test_import_refuses_a_licence_the_buyer_does_not_accept(world: World, tmp_path: Path) -> None:
    home, policy = buyer(world, tmp_path, 'accepted_licences = ["cc-by-4.0", "MIT"]')
    before = sorted(p.name for p in (home / "objects").rglob("*"))
    r = run("--ledger", home, "import", world.bundle, "--policy", policy, "--key", "approver")
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert r.stderr.endswith(
        " checks failed; nothing imported\n"
        f"FAIL: rollout-batch b2 (sha256:{world.batches[2][7:19]}…) > licence: licence "
        "'proprietary-vendor' is not accepted by policy 'buyer' (accepted: cc-by-4.0, MIT); and 1 "
        "record that depends on it\n"
    ), r.stderr
    assert r.stderr.startswith("FAIL: import mixed.tar.zst: 1 of "), r.stderr
    assert Ledger.open(home).log.size == 0
    assert sorted(p.name for p in (home / "objects").rglob("*")) == before
    # The open dataset (CC-BY-4.0 only, compared ignoring case as SPDX ids are) is accepted.
    ok = tmp_path / "open.tar.zst"
    assert run("--ledger", world.home, "export", "open@1", "--out", ok).exit_code == 0
    r = run("--ledger", home, "import", ok, "--policy", policy, "--key", "approver")
    assert r.exit_code == 0, r.output
    assert "✓ licence — CC-BY-4.0 (accepted by the policy)" in r.stdout
    # The runner applies the same rule: under a policy that no longer accepts CC-BY-4.0, the
    # imported dataset is refused for training, saying why.
    from trajledger.runner.admission import DataRefusedError, admit
    from trajledger.verify.policy import TrustPolicy

    ledger = Ledger.open(home)
    assert run("--ledger", home, "approve", "open@1", "--key", "approver").exit_code == 0
    strict = TrustPolicy.from_toml(policy.read_bytes().replace(b'"cc-by-4.0", ', b""), home)
    with pytest.raises(DataRefusedError, match=r"licence 'CC-BY-4\.0' is not accepted by policy "
                       r"'buyer' \(accepted: MIT\)"):  # fmt: skip
        admit(ledger, "open@1", strict)
    assert admit(ledger, "open@1", TrustPolicy.from_toml(policy.read_bytes(), home)).batches


def test_a_batch_without_a_licence_is_refused_when_the_policy_lists_licences(
    world: World, tmp_path: Path
) -> None:
    from trajledger.ledger.artifacts import record_batch
    from trajledger.ledger.exchange import export_bundle

    copy = tmp_path / "vendor"
    shutil.copytree(world.home, copy)
    ledger = Ledger.open(copy)
    digest = record_batch(ledger, rows(2, 9), env="grid@1", policy="random",
                          signer=ledger.keys.signer("vendor"), name="unlicensed",
                          ).recorded.digest  # fmt: skip
    bundle = tmp_path / "unlicensed.tar.zst"
    export_bundle(ledger, digest, bundle)
    _, policy = buyer(world, tmp_path, 'accepted_licences = ["CC-BY-4.0"]')
    assert verify_main([str(bundle), "--policy", str(policy)]) == 1
    policy.write_text(policy.read_text().replace('accepted_licences = ["CC-BY-4.0"]', ""))
    assert verify_main([str(bundle), "--policy", str(policy)]) == 0


def test_a_recorded_policy_keeps_its_digest(tmp_path: Path) -> None:
    """accepted_licences and witness logs appear in a policy's JSON form only when set, so a
    policy recorded before them (0.1.0's) re-reads to the digest its record names."""
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.log_entry import LogEntry
    from trajledger.verify.policy import TrustPolicy, policy_digest
    from trajledger.verify.statement import Statement

    copy = tmp_path / "ledger"
    shutil.copytree(FIXTURES / "ledger", copy)
    ledger = Ledger.open(copy)
    entry = next(
        e for e in map(LogEntry.from_bytes, ledger.log.entries(0, ledger.log.size))
        if e.kind == "trust-policy"
    )  # fmt: skip
    st = Statement.from_bytes(Envelope.from_bytes(ledger.store.get(entry.envelope)).payload)
    policy = TrustPolicy.from_json(st.predicate["policy"])
    assert policy.accepted_licences is None and policy.role("witness").logs == ()
    assert policy_digest(policy) == entry.subject
