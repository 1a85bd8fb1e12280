"""End to end, issue 19: exchange as a stream of signed updates between organisations.

A data vendor keeps a vendor-only ledger (a policy of producer and log roles alone); a buyer
imports its dataset, approves it and trains. Then the vendor's changes reach the buyer: a
revocation by an update bundle (``export --updates-since``) and by ``monitor`` of the served
log (``log serve`` publishes the envelopes), an erasure that deletes the buyer's copy, two
vendors that share an origin name and a dataset name (with the buyer's own dataset of that
name), and a cascade of one missing key reported as one root cause.

Every command goes through the CLI (click's CliRunner; ``log serve`` as a subprocess), each
party with its own ``TRAJLEDGER_STATE_DIR``; the checks are exit codes, exact messages, and what
the buyer's gate then decides.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from testkit import Party

from trajledger.verify.__main__ import main as verify_main


def rollouts(path: Path, seed: int, tag: str | None = None) -> Path:
    """Four episodes of four steps made of ``seed``, their ids of ``tag`` (default: the
    seed): two files of one seed and two tags hold exact copies of each other's episodes
    (holdout22's "id changed"; tests/e2e/test_histories_exchange.py)."""
    cols: dict[str, list[Any]] = {k: [] for k in (
        "episode_id", "step", "obs", "action", "reward", "terminated", "truncated")}  # fmt: skip
    for e in range(4):
        for s in range(4):
            cols["episode_id"].append(f"ep-{seed if tag is None else tag}-{e}")
            cols["step"].append(s)
            cols["obs"].append([float(seed), float(e), s / 4])
            cols["action"].append([float((e + s) % 2)])
            cols["reward"].append(float(e % 3))
            cols["terminated"].append(s == 3)
            cols["truncated"].append(False)
    pq.write_table(pa.table(cols), path)
    return path


class Vendor(Party):
    """A vendor-only ledger: producer and log roles, an environment (``env``@1: vendors of one
    ``grid`` record the same bytes, so each signs a record of every other's lineage), two
    batches, a dataset."""

    def __init__(self, root: Path, name: str, origin: str, seeds: tuple[int, int] = (1, 2),
                 env: str = "grid") -> None:
        super().__init__(root, name)
        self.run("init", "--origin", origin)
        self.run("key", "new", "vendor", "--no-encrypt")
        self.init = self.run("policy", "init", "--roles", "producer", "--out",
                             self.home / "policy.toml")  # fmt: skip
        self.run("policy", "set", self.home / "policy.toml", "--key", "vendor", "--yes")
        self.run("env", "register", env, "--version", "1", "--source", "sim", "--key",
                 "vendor")  # fmt: skip
        self.batches = [
            self.last("record", rollouts(root / f"{name}-{seed}.parquet", seed), "--env",
                      f"{env}@1", "--policy", "scripted", "--name", f"{name}-{n}",
                      "--licence", "CC-BY-4.0", "--key", "vendor")
            for n, seed in enumerate(seeds, 1)
        ]  # fmt: skip
        self.dataset = self.last("dataset", "create", "bh", "--version", "1", "--split",
                                 "train", "--batch", self.batches[0], "--batch",
                                 self.batches[1], "--key", "vendor")  # fmt: skip
        self.bundle = root / f"{name}.tar.zst"
        self.run("export", "bh@1", "--out", self.bundle)
        self.origin = "+".join(self.vkey().split("+")[:2])  # ORIGIN+KEYHASH


def vendor_copy(root: Path, name: str, origin: str, seeds: tuple[int, int] = (1, 2),
                env: str = "grid") -> Vendor:
    """``Vendor(root, name, origin, seeds, env)``, built once per test process for these
    arguments and copied into ``root`` (`testkit.built_once`): its ledger, its user state, its
    record files and its bundle (0.01 CPU-s, against 0.22 to 0.25 to build warm: 9 commands).
    Each call has a ledger of its own; the calls of one process with the same arguments share
    its keys and log key, which no test compares across tests (as `train_a_buyer`'s copies
    share theirs). A second call with the same arguments in one test builds anew (two vendors
    of one name and origin have two keys). For a vendor built after a test changed something
    the build reads (a clock, a fault), call ``Vendor``."""
    from testkit import built_once

    return built_once(("vendor", name, origin, seeds, env), root,
                      lambda at: Vendor(at, name, origin, seeds, env))


BUYER_POLICY = """\
name = "buyer"
accepted_licences = ["CC-BY-4.0"]
[roles.producer]
keys = [{producers}]
[roles.approver]
keys = ["keys/approver.pub"]
[roles.trainer]
keys = ["keys/trainer.pub"]
[roles.log]
vkeys = [{vkeys}]
"""


def make_buyer(buyer: Party, vendors: Sequence[Party], policy: str = BUYER_POLICY, *,
               evaluator: bool = False, keys: Sequence[str] = (),
               origin: str = "buyer.example/log") -> None:
    """Set ``buyer`` up as the buyer of ``vendors``: its ledger (its log named ``origin``), its
    keys (approver, trainer, producer; evaluator when asked; ``keys`` besides), each vendor's
    key ``vendor`` under ``trust/`` as ``NAME.pub``, and ``policy`` (`BUYER_POLICY`'s
    ``{producers}`` and ``{vkeys}`` filled in: the vendors' keys and the buyer's producer,
    every party's log key) set by its approver."""
    buyer.run("init", "--origin", origin)
    for k in ("approver", "trainer", "producer", *(("evaluator",) if evaluator else ()), *keys):
        buyer.run("key", "new", k, "--no-encrypt")
    trust = buyer.home / "trust"
    trust.mkdir()
    pems = [f"trust/{v.name}.pub" for v in vendors] + ["keys/producer.pub"]
    for v in vendors:
        (trust / f"{v.name}.pub").write_bytes((v.home / "keys" / "vendor.pub").read_bytes())
    vkeys = [v.vkey() for v in vendors] + [buyer.vkey()]
    (buyer.home / "policy.toml").write_text(policy.format(
        producers=", ".join(f'"{p}"' for p in pems),
        vkeys=", ".join(f'"{k}"' for k in vkeys)))  # fmt: skip
    buyer.run("policy", "set", buyer.home / "policy.toml", "--key", "approver", "--yes")


class Buyer(Party):
    def __init__(self, root: Path, vendors: list[Vendor], *, own: bool = False) -> None:
        super().__init__(root, "buyer")
        make_buyer(self, vendors)
        if own:  # the buyer's own dataset, named like the vendors'
            self.run("env", "register", "grid", "--version", "1", "--source", "sim", "--key",
                     "producer")  # fmt: skip
            batch = self.last("record", rollouts(root / "own.parquet", 9), "--env", "grid@1",
                              "--policy", "scripted", "--name", "own-1", "--licence",
                              "CC-BY-4.0", "--key", "producer")  # fmt: skip
            self.own = self.last("dataset", "create", "bh", "--version", "1", "--split",
                                 "train", "--batch", batch, "--key", "producer")  # fmt: skip


@pytest.fixture
def trained(tmp_path: Path) -> tuple[Vendor, Buyer, str]:
    """The vendor's dataset imported, approved and trained on by the buyer."""
    return train_a_buyer(tmp_path)


TRAINED: list[tuple[Path, tuple[Vendor, Buyer, str]]] = []
"""`train_a_buyer`'s parties as first built in this test process, and where (suite46)."""


def train_a_buyer(tmp_path: Path) -> tuple[Vendor, Buyer, str]:
    """`trained`, for other modules (tests/e2e/test_paths_agree.py and a dozen more).

    Built once per test process (`TRAINED`, in a temporary directory removed at its end) and
    copied into ``tmp_path`` for each call: the two ledgers, their users' states and the
    vendor's files, as `build_trained` left them under its root (0.02 CPU-s, against 0.4 to
    build them: about 40 calls a run). Each test has ledgers of its own, as before; the calls
    of one process share their keys and log keys, which no test here compares across calls
    (as `test_histories_exchange.make_parties`' copies share theirs)."""
    import atexit
    import copy
    import shutil
    import tempfile

    from testkit import release_files

    if not TRAINED:
        root = Path(tempfile.mkdtemp(prefix="trajledger-trained-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        built = build_trained(root)
        release_files(root)  # (its SQLite connections closed: each copy whole)
        TRAINED.append((root, built))
    root, (vendor, buyer, ckpt) = TRAINED[0]
    shutil.copytree(root, tmp_path, symlinks=True, dirs_exist_ok=True)

    def moved(party: Any) -> Any:
        party = copy.copy(party)
        for name, value in vars(party).items():
            if isinstance(value, Path) and value.is_relative_to(root):
                setattr(party, name, tmp_path / value.relative_to(root))
        return party

    return moved(vendor), moved(buyer), ckpt


def build_trained(tmp_path: Path) -> tuple[Vendor, Buyer, str]:
    """`train_a_buyer`'s parties built at ``tmp_path``."""
    vendor = Vendor(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    buyer.run("import", vendor.bundle, "--key", "approver")
    buyer.run("approve", "bh@1", "--key", "approver")
    ckpt = buyer.last("train", "--dataset", "bh@1", "--key", "trainer", "--name", "bh-policy",
                      "--version", "1")  # fmt: skip
    return vendor, buyer, ckpt


def two_vendors_trained(tmp_path: Path, names: tuple[str, str], ckpt: str
                        ) -> tuple[Vendor, Vendor, Buyer, str]:
    """Two vendors (``names``, origins ``NAME.example/log``) whose bundles a buyer imports; the
    buyer approves the first's dataset and trains ``ckpt``@1 on it."""
    one = vendor_copy(tmp_path, names[0], f"{names[0]}.example/log")
    two = vendor_copy(tmp_path, names[1], f"{names[1]}.example/log", seeds=(3, 4))
    buyer = Buyer(tmp_path, [one, two])
    for v in (one, two):
        buyer.run("import", v.bundle, "--key", "approver")
    buyer.run("approve", one.dataset, "--key", "approver")
    return one, two, buyer, buyer.last("train", "--dataset", one.dataset, "--key", "trainer",
                                       "--name", ckpt, "--version", "1")


def declare_compromised(vendor: Vendor, new: Path, keyid: str) -> None:
    """The vendor's successor policy: its producer a new key ``vendor-new``, its key ``keyid``
    declared compromised since 0, set with its key ``vendor``."""
    vendor.run("key", "new", "vendor-new", "--no-encrypt")
    vendor.run("policy", "init", "--roles", "producer", "--producer", "vendor-new", "--out", new)
    new.write_text(new.read_text().replace("serial = 1", "serial = 2")
                   + f'\n[[revoked_keys]]\nkey = "{keyid}"\ncompromised_since = 0\n'
                   'reason = "stolen laptop"\n')  # fmt: skip
    vendor.run("policy", "set", new, "--key", "vendor", "--yes")


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


def served(party: Party) -> Iterator[str]:
    """``log serve`` of ``party``'s log in a subprocess, yielding its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "from trajledger.runner.cli import main; main()",
         "--ledger", str(party.home), "log", "serve", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TRAJLEDGER_STATE_DIR": str(party.state)},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def short(digest: str) -> str:
    return digest[:19] + "…"


# -- item 5: vendor-only ledgers ------------------------------------------------------------------


def test_a_vendor_only_ledger_records_and_exports(tmp_path: Path) -> None:
    vendor = Vendor(tmp_path, "vendor", "vendor.example/log")
    policy = vendor.home / "policy.toml"
    assert vendor.init.stderr.splitlines()[1:] == [
        f"NOTE: {policy}: no approver role: nothing recorded here can be approved for training, "
        "imported or released, and the policy's successors are signed by its producers",
        f"NOTE: {policy}: no trainer role: no checkpoint can be recorded (training is refused)",
        f"OK: policy {policy} written: 1 producer key(s), inline; next: 'trajledger policy set "
        f"{policy} --key PRODUCER...'",
    ], vendor.init.stderr
    assert "[roles.approver]" not in policy.read_text()
    # Only the roles asked for are asked for: no approver key is needed.
    r = vendor.run("policy", "init", "--out", tmp_path / "full.toml", code=2)
    assert "no approver key (--approver KEY) and no trainer key (--trainer KEY)" in r.stderr
    # The bundle verifies offline, and a buyer trusting the vendor's producer key imports it.
    buyer = Buyer(tmp_path, [vendor])
    r = buyer.run("import", vendor.bundle, "--key", "approver")
    assert r.stdout.splitlines()[-1] == vendor.dataset
    # Revocation authority is explicit: a producer revokes only what it produced (the buyer's
    # own producer key cannot revoke the vendor's batch); an approver anything.
    before = buyer.size()
    r = buyer.run("revoke", vendor.batches[0], "--reason", "x", "--key", "producer", code=1)
    assert r.stderr.startswith("FAIL: rollout-batch vendor-1: key producer (") and r.stderr \
        .endswith("a producer may revoke only what it produced, an approver anything; nothing "
                  "was signed\n"), r.stderr  # fmt: skip
    assert buyer.size() == before
    buyer.run("revoke", vendor.batches[0], "--reason", "x", "--key", "approver")


# -- items 1, 2, 4: a revocation by an update bundle ---------------------------------------------


def test_a_revocation_reaches_the_buyer_in_an_update_bundle(
    trained: tuple[Vendor, Buyer, str], tmp_path: Path
) -> None:
    vendor, buyer, ckpt = trained
    applied = vendor.size()
    vendor.run("revoke", vendor.batches[0], "--reason", "consent withdrawn", "--key", "vendor")
    update = tmp_path / "update.tar.zst"
    r = vendor.run("export", "--updates-since", str(applied), "--out", update)
    assert r.stdout.strip() == str(applied + 1)
    assert update.stat().st_size < 8192, update.stat().st_size  # a revocation travels alone
    before = buyer.size()
    r = buyer.run("import", update, "--key", "approver")
    batch = f"rollout-batch vendor-1 ({short(vendor.batches[0])})"
    lines = r.stderr.splitlines()
    assert f"WARNING: revoked by {vendor.origin}: {batch}: consent withdrawn (signed by " \
        in r.stderr, r.stderr  # fmt: skip
    assert any(line.endswith(f"its log index {applied})") for line in lines), r.stderr
    assert (f"WARNING: affected here: checkpoint bh-policy@1 ({short(ckpt)}) is built on {batch}"
            f" — see 'trajledger impact {vendor.batches[0]}'") in lines, r.stderr
    # The report it prints (the bundle's, alone) does not call the revocation it applied
    # "ignored" (aud34 finding 5), and its OK line names the size applied, which the vendor's
    # next update starts from (aud34 finding 4).
    assert ": ignored: " not in r.stdout and ": not judged by this bundle alone: " in r.stdout
    assert f"its log applied up to size {applied + 1}: ask its owner for updates with " \
           f"'trajledger export --updates-since {applied + 1}'" in r.stderr, r.stderr
    # The revocation and an import record were logged; nothing else (other records: by hash).
    assert buyer.size() == before + 2
    # The buyer's gate refuses, impact names the buyer's checkpoint, verify fails.
    r = buyer.run("admit", "bh@1", code=1)
    assert f"{batch} > revoked: consent withdrawn" in r.stderr, r.stderr
    buyer.run("train", "--dataset", "bh@1", "--key", "trainer", "--name", "bh-policy",
              "--version", "2", code=1)  # fmt: skip
    r = buyer.run("impact", vendor.batches[0])
    assert f"checkpoint bh-policy@1 ({short(ckpt)})" in r.stdout, r.stdout
    r = buyer.run("verify", ckpt, code=1)
    assert f"{batch} > revoked: consent withdrawn" in r.stderr
    # The same update again (a replay) changes nothing.
    before = buyer.size()
    r = buyer.run("import", update, "--key", "approver")
    assert buyer.size() == before
    assert "revoked by" not in r.stderr


def test_an_import_stopped_after_its_record_judges_its_erasures_when_run_again(
    trained: tuple[Vendor, Buyer, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Killed (or refused by the lock check) between its import record and its judgement, an
    # import left the vendor's erasure unapplied: the buyer kept its copy of the erased bytes,
    # and running the import again said "already imported ... nothing new recorded" and stopped
    # there (fix13's left item).
    from trajledger.ledger import updates

    vendor, buyer, _ckpt = trained
    applied = vendor.size()
    vendor.run("erase", vendor.batches[1], "--reason", "consent", "--key", "vendor")
    bundle = tmp_path / "again.tar.zst"
    vendor.run("export", "bh@1", "--out", bundle, "--updates-since", str(applied))
    blobs = {p.name for p in (buyer.home / "objects").rglob("*") if p.is_file()}

    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(updates, "_judge", killed)
        buyer.run("import", bundle, "--key", "approver", code=130)
    size = buyer.size()
    assert blobs <= {p.name for p in (buyer.home / "objects").rglob("*") if p.is_file()}
    r = buyer.run("import", bundle, "--key", "approver")
    assert "already imported at log index" in r.stderr, r.stderr
    assert f"erased by {vendor.origin}" in r.stderr, r.stderr
    assert buyer.size() == size  # nothing logged twice
    left = {p.name for p in (buyer.home / "objects").rglob("*") if p.is_file()}
    assert blobs - left, "the buyer's copy of the erased batch's files is deleted"


def test_an_update_bundle_that_omits_entries_is_refused(
    trained: tuple[Vendor, Buyer, str], tmp_path: Path
) -> None:
    vendor, buyer, _ckpt = trained
    applied = vendor.size()
    vendor.run("revoke", vendor.batches[0], "--reason", "leak", "--key", "vendor")
    vendor.run("revoke", vendor.batches[1], "--reason", "leak", "--key", "vendor")
    late = tmp_path / "late.tar.zst"
    vendor.run("export", "--updates-since", str(applied + 1), "--out", late)
    before = buyer.size()
    r = buyer.run("import", late, "--key", "approver", code=1)
    assert r.stderr == (
        f"FAIL: import late.tar.zst: the log {vendor.origin}: unprovable: the bundle does not "
        f"carry the log since size {applied}, what you applied of it (its extension starts at "
        f"{applied + 1}; its checkpoint has size {applied + 2}): ask for a bundle exported with "
        f"--updates-since {applied}\n"
    )
    assert buyer.size() == before


# -- items 1, 3: a revocation and an erasure by monitor -------------------------------------------


def test_monitor_applies_the_vendors_revocations_and_erasures(
    trained: tuple[Vendor, Buyer, str],
) -> None:
    vendor, buyer, ckpt = trained
    vendor.run("erase", vendor.batches[1], "--reason", "consent", "--key", "vendor")
    vendor.run("revoke", vendor.batches[0], "--reason", "wrong env", "--key", "vendor")
    blobs = sum(1 for p in (buyer.home / "objects").rglob("*") if p.is_file())
    for url in served(vendor):
        # Without an approver key: reported as pending, nothing recorded.
        before = buyer.size()
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--fail-on-revocation", code=1)
        assert r.stderr.count("WARNING: pending: ") == 2, r.stderr
        assert buyer.size() == before
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver",
                      "--fail-on-revocation", "--json", code=1)  # fmt: skip
        updates = json.loads(r.stdout)["updates"]
        assert [x["digest"] for x in updates["revoked"]] == [vendor.batches[0]]
        assert [x["digest"] for x in updates["erased"]] == [vendor.batches[1]]
        assert updates["erased"][0]["deleted"] >= 1
        # the vendor's dataset here (imported) is built on them too (left38 item 3b)
        assert {a["digest"] for a in updates["affected"]} == {ckpt, vendor.dataset}
        assert r.stderr.splitlines()[-1].startswith(f"FAIL: log {vendor.origin.split('+')[0]} "
                                                    f"at {url}: something this ledger holds ")
        # The buyer's copy of the erased bytes is gone, as a local erasure would delete it.
        after = sum(1 for p in (buyer.home / "objects").rglob("*") if p.is_file())
        assert after < blobs + 3  # two envelopes and an import record in, data files out
        r = buyer.run("admit", "bh@1", code=1)
        assert "revoked: wrong env" in r.stderr
        # Applied once: the next watch finds nothing new (exit 0 even with the flag).
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver",
                      "--fail-on-revocation")  # fmt: skip
        assert "revoked by" not in r.stderr


def test_monitor_reads_a_long_extension_one_entry_bundle_at_a_time(
    trained: tuple[Vendor, Buyer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two and a half tiles of the vendor's own records about nothing the buyer holds, then a
    # revocation of what it does hold. The extension is read bundle by bundle (the memory of
    # a watch follows what can matter here, not the extension: rev10's left item), and the
    # revocation still reaches the buyer.
    import hashlib

    from trajledger import Ledger
    from trajledger.ledger.log import EntrySpec
    from trajledger.verify.tiles import TILE_WIDTH, TileReader

    vendor, buyer, _ckpt = trained
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(vendor.state))
    ledger = Ledger.open(vendor.home)
    signer = ledger.keys.signer("vendor")
    filler = [EntrySpec("files", "sha256:" + hashlib.sha256(b"%d" % n).hexdigest(),
                        "sha256:" + hashlib.sha256(b"e%d" % n).hexdigest(), (signer.keyid,))
              for n in range(TILE_WIDTH * 5 // 2)]  # fmt: skip
    ledger.log.append(filler)
    vendor.run("revoke", vendor.batches[0], "--reason", "consent withdrawn", "--key", "vendor")
    spans: list[tuple[int, int]] = []
    real = TileReader.entries

    def spy(self: TileReader, start: int, end: int) -> list[bytes]:
        spans.append((start, end))
        return real(self, start, end)

    monkeypatch.setattr(TileReader, "entries", spy)
    for url in served(vendor):
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver")
        assert "WARNING: revoked by" in r.stderr, r.stderr
    assert sum(end - start for start, end in spans) >= len(filler) + 1
    assert max(end - start for start, end in spans) <= TILE_WIDTH
    r = buyer.run("admit", "bh@1", code=1)
    assert "revoked: consent withdrawn" in r.stderr


# -- item 7: origins bound to their log keys -------------------------------------------------------


def test_two_vendors_with_one_origin_name_and_one_dataset_name(tmp_path: Path) -> None:
    one = vendor_copy(tmp_path, "one", "vendor.example/log")
    two = vendor_copy(tmp_path, "two", "vendor.example/log", seeds=(3, 4))
    assert one.origin != two.origin  # the same origin name, two keys
    buyer = Buyer(tmp_path, [one, two], own=True)
    buyer.run("import", one.bundle, "--key", "approver")
    r = buyer.run("import", two.bundle, "--key", "approver")
    # The clash is reported at import: the buyer's own name wins; each import is qualified.
    assert (f"WARNING: name clash: dataset bh@1 from {two.origin} has the name of your own "
            f"dataset bh@1 ({short(buyer.own)}): 'bh@1' names yours; refer to the imported one "
            f"as '{two.origin}+bh@1'") in r.stderr.splitlines(), r.stderr
    r = buyer.run("show", "bh@1", "--json")
    assert json.loads(r.stdout)["digest"] == buyer.own
    for vendor in (one, two):
        r = buyer.run("show", f"{vendor.origin}+bh@1", "--json")
        assert json.loads(r.stdout)["digest"] == vendor.dataset
    # The origin alone names two logs: ambiguous, and it says how to tell them apart.
    r = buyer.run("show", "vendor.example/log+bh@1", code=3)
    assert "ambiguous, matches 2 artifacts" in r.stderr and \
        "use the digest or an origin-qualified name instead" in r.stderr  # fmt: skip
    # A mistyped qualified name gets the qualified forms as suggestions.
    r = buyer.run("show", f"{one.origin}+bh@2", code=3)
    assert f"'{one.origin}+bh@1'" in r.stderr, r.stderr


# -- item 6: root causes first ---------------------------------------------------------------------


def test_one_missing_key_is_one_root_cause(
    trained: tuple[Vendor, Buyer, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vendor, buyer, ckpt = trained
    bundle = tmp_path / "ckpt.tar.zst"
    buyer.run("export", ckpt, "--out", bundle)
    # A third party trusting the vendor's key but not the buyer's trainer key.
    third = Party(tmp_path, "third")
    third.run("init", "--origin", "third.example/log")
    third.run("key", "new", "approver", "--no-encrypt")
    (third.home / "vendor.pub").write_bytes((vendor.home / "keys" / "vendor.pub").read_bytes())
    (third.home / "policy.toml").write_text(
        '[roles.producer]\nkeys = ["vendor.pub"]\n[roles.approver]\nkeys = '
        f'["keys/approver.pub"]\n[roles.log]\nvkeys = ["{buyer.vkey()}", "{third.vkey()}"]\n'
    )
    third.run("policy", "set", third.home / "policy.toml", "--key", "approver", "--yes")
    r = third.run("import", bundle, "--key", "approver", code=1)
    lines = r.stderr.splitlines()
    assert len(lines) == 2, r.stderr
    assert lines[0].startswith("FAIL: import ckpt.tar.zst: ") and lines[0].endswith(
        " checks failed; nothing imported")
    assert lines[1] == (f"FAIL: checkpoint {short(ckpt)} > record: log entry 7 (checkpoint): "
                        "the policy has no trainer keys or identities: to trust its signer, add "
                        "its public key (from its owner, by a channel you trust) to "
                        "[roles.trainer]; "
                        "and 2 records that depend on it")
    # The standalone verifier says the same; its --json keeps every node and names the cause.
    code = verify_main([str(bundle), "--policy", str(third.home / "policy.toml"), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [c["node"] for c in report["causes"]] == [ckpt]
    assert report["causes"][0]["dependents"] == 2
    terms = [c for n in report["nodes"] for c in n["checks"] if c["what"] == "terms"]
    assert len(terms) == 2 and all(c["cause"] == ckpt for c in terms)


def test_an_update_after_a_rotation_of_the_vendors_log_key_is_taken_in(
    trained: tuple[Vendor, Buyer, str], tmp_path: Path
) -> None:
    """The vendor revokes a batch, rotates its log key (as after a theft) and sends what the
    buyer's import asks for, ``export --updates-since N``. Before the fix the buyer refused it
    (following the handover needs a consistency proof from N, which only ``--consistency-from
    N`` added), so the revocation waited for a second round trip (rev24 finding 2)."""
    vendor, buyer, ckpt = trained
    applied = vendor.size()
    vendor.run("revoke", vendor.batches[0], "--reason", "consent", "--key", "vendor")
    vendor.run("log", "rotate-key")
    update = tmp_path / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    r = buyer.run("import", update, "--key", "approver")
    rotated = "+".join(vendor.vkey().split("+")[:2])
    assert rotated != vendor.origin
    assert f"WARNING: revoked by {rotated}: rollout-batch vendor-1" in r.stderr, r.stderr
    r = buyer.run("verify", ckpt, code=1)
    assert "revoked: consent" in r.stderr, r.stderr


def test_a_retired_log_key_cannot_show_another_history_after_its_handover(
    trained: tuple[Vendor, Buyer, str], tmp_path: Path
) -> None:
    """The vendor rotates its log key (after a theft) and the buyer follows the handover; its
    policy still names the old key, as most buyers' will. The thief holds a copy of the
    vendor's ledger with the old log key, appends its own entry and sends an update signed by
    the old key: another tree of the log after the rotation. Before the fix the buyer took it
    in (the old key is trusted on its own and that tree extends what it saw under it), and
    then took the vendor's tree of the same size under the new key too: two histories of one
    log accepted, neither refused; a monitor kept on the old key's view the same way, and
    `verify BUNDLE` said OK. Now a key the buyer followed a handover from signs nothing beyond
    the handed-over tree (rev24 finding 3)."""
    import shutil

    from testkit import Party

    vendor, buyer, _ckpt = trained
    applied = vendor.size()
    thief = Party(tmp_path, "thief")
    shutil.copytree(vendor.home, thief.home)
    vendor.run("log", "rotate-key")
    update = tmp_path / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    buyer.run("import", update, "--key", "approver")  # follows the handover
    thief.run("env", "register", "grid", "--version", "2", "--source", "sim", "--key", "vendor")
    forged = tmp_path / "forged.tar.zst"
    thief.run("export", "--updates-since", str(applied), "--out", forged)
    before = buyer.size()
    r = buyer.run("import", forged, "--key", "approver", code=1)
    assert f"key {vendor.origin} handed the log over to " in r.stderr and " at size " \
        f"{applied} (a rotation you followed), yet signs a tree of size {applied + 1} " \
        in r.stderr, r.stderr  # fmt: skip
    assert buyer.size() == before
    r = buyer.run("verify", forged, "--policy", buyer.home / "policy.toml", code=1)
    assert " handed the log over to " in r.stderr, r.stderr
    for url in served(thief):
        r = buyer.run("monitor", url, "--vkey", thief.vkey(), code=1)  # the old key
        assert " handed the log over to " in r.stderr, r.stderr
    vendor.run("revoke", vendor.batches[0], "--reason", "consent", "--key", "vendor")
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    assert "WARNING: revoked by " in buyer.run("import", update, "--key", "approver").stderr


def test_a_vendor_sharing_an_origin_name_with_another_can_rotate_its_log_key(
    tmp_path: Path,
) -> None:
    """Two vendors use one origin name (each log told apart by its key, as the policy names
    both). Vendor b rotates its log key and revokes a batch. Before the fix the buyer refused
    b's update as key confusion against vendor a's key ("no key handover signed by that key
    leads to the new one"), advising to remove a's state (its floor): b's revocation could not
    reach the buyer after a rotation (rev24 finding 4)."""
    a = vendor_copy(tmp_path, "a", "shared.example/log")
    b = vendor_copy(tmp_path, "b", "shared.example/log", seeds=(3, 4))
    buyer = Buyer(tmp_path, [a, b])
    for v in (a, b):
        buyer.run("import", v.bundle, "--key", "approver")
    applied = b.size()
    b.run("log", "rotate-key")
    b.run("revoke", b.batches[0], "--reason", "consent", "--key", "vendor")
    update = tmp_path / "update.tar.zst"
    b.run("export", "--updates-since", str(applied), "--out", update)
    r = buyer.run("import", update, "--key", "approver")
    assert "WARNING: revoked by shared.example/log+" in r.stderr and "rollout-batch b-1" \
        in r.stderr, r.stderr  # fmt: skip


def test_a_followed_key_has_no_second_successor(
    trained: tuple[Vendor, Buyer, str], tmp_path: Path
) -> None:
    """The buyer followed the vendor's rotation and, as docs/SECURITY.md section 5 advises,
    names the new log key in its policy too. A thief with a copy of the vendor's ledger from
    before (the old log key) rotates it to a key of its own and sends that log: a second
    successor of the key the buyer followed, refused as a fork of the log's identity (the
    guard finding 4's rule for two logs of one origin name needs; rev24)."""
    import shutil

    from testkit import Party

    vendor, buyer, _ckpt = trained
    applied, old = vendor.size(), vendor.vkey()
    thief = Party(tmp_path, "thief")
    shutil.copytree(vendor.home, thief.home)
    vendor.run("log", "rotate-key")
    vendor.run("revoke", vendor.batches[1], "--reason", "consent", "--key", "vendor")
    update = tmp_path / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    buyer.run("import", update, "--key", "approver")  # follows the handover
    policy = buyer.home / "policy.toml"
    policy.write_text("serial = 2\n" + policy.read_text().replace(
        f'"{old}"', f'"{old}", "{vendor.vkey()}"'))  # fmt: skip
    buyer.run("policy", "set", policy, "--key", "approver", "--yes")
    thief.run("log", "rotate-key")
    thief.run("env", "register", "grid", "--version", "2", "--source", "sim", "--key", "vendor")
    forged = tmp_path / "forged.tar.zst"
    thief.run("export", "--updates-since", str(applied), "--out", forged)
    before = buyer.size()
    r = buyer.run("import", forged, "--key", "approver", code=1)
    assert "(a rotation you followed), and now to " in r.stderr and "two successors of one " \
        "key, a fork of the log's identity" in r.stderr, r.stderr  # fmt: skip
    assert buyer.size() == before


# -- item 3: what the vendor publishes; an envelope withheld fails closed, for its own data only --


def test_a_withheld_revocation_fails_closed_only_for_the_vendors_own_data(
    trained: tuple[Vendor, Buyer, str],
) -> None:
    vendor, buyer, _ckpt = trained
    policy = vendor.home / "policy.toml"
    text = policy.read_text()
    assert "serial = 1" in text
    policy.write_text(text.replace("serial = 1", 'serial = 2\nformat = 3\npublish = ["erasure"]'))
    vendor.run("policy", "set", policy, "--key", "vendor")
    vendor.run("revoke", vendor.batches[0], "--reason", "withheld", "--key", "vendor")
    for url in served(vendor):
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver",
                      "--fail-on-revocation", "--json", code=1)  # fmt: skip
        updates = json.loads(r.stdout)["updates"]
        assert [x["digest"] for x in updates["unreadable"]] == [vendor.batches[0]]
        assert updates["revoked"] == []
        assert "its envelope is not here (not published), so every decision about it fails " \
            "until it is" in r.stderr  # fmt: skip
    r = buyer.run("admit", "bh@1", code=1)
    assert f"rollout-batch vendor-1 ({short(vendor.batches[0])})" in r.stderr, r.stderr


# -- item 1: a vendor's published key compromise --------------------------------------------------


def test_a_vendors_key_compromise_revokes_what_it_signed_here(
    trained: tuple[Vendor, Buyer, str], tmp_path: Path
) -> None:
    vendor, buyer, ckpt = trained
    applied = vendor.size()
    keyid = json.loads(vendor.run("key", "list", "--json").stdout)
    old = next(k["keyid"] for k in keyid if k["name"] == "vendor")
    declare_compromised(vendor, tmp_path / "new.toml", old)
    update = tmp_path / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    r = buyer.run("import", update, "--key", "approver")
    line = next(x for x in r.stderr.splitlines() if " is compromised " in x)
    assert line.startswith(f"WARNING: key {old[:16]} of {vendor.origin} is compromised ("), line
    assert "revoked here what it signed since: " in line and "rollout-batch vendor-1" in line
    # From the first of its records this import logged here; none: from now on.
    assert line.endswith('your policy still trusts it as producer: record a successor without it '
                         f'and with [[revoked_keys]] key = "{old}", compromised_since = '
                         f"{buyer.size()}"), line  # fmt: skip
    assert f"WARNING: affected here: checkpoint bh-policy@1 ({short(ckpt)}) is built on " \
        in r.stderr, r.stderr  # fmt: skip
    # The buyer's gate refuses what that key signed.
    r = buyer.run("admit", "bh@1", code=1)
    assert "declares compromised (compromised since log index 0: stolen laptop" in r.stderr


# -- a network peer between the monitor and the log (review rev10) -----------------------------


class _Substituting(http.server.BaseHTTPRequestHandler):
    """Serves the upstream log, except that each path in ``server.forged`` gets, from its
    ``server.after``-th request on, the forged bytes: a mirror, a cache or a man in the middle
    on plain http, holding no key of the vendor's."""

    def do_GET(self) -> None:
        srv: Any = self.server
        path = self.path.removeprefix("/")
        srv.count[path] = srv.count.get(path, 0) + 1
        if path in srv.forged and srv.count[path] > srv.after.get(path, 0):
            status, data = 200, srv.forged[path]
        else:
            try:
                with urllib.request.urlopen(srv.upstream + path, timeout=10) as resp:
                    status, data = resp.status, resp.read()
            except urllib.error.HTTPError as e:
                status, data = e.code, b""
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def substituting(upstream: str, forged: dict[str, bytes], after: dict[str, int]
                 ) -> Iterator[str]:
    srv: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Substituting)
    srv.upstream, srv.forged, srv.after, srv.count = upstream, forged, after, {}
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("key", [False, True], ids=["pending", "applied"])
def test_a_peer_that_serves_other_entries_cannot_hide_a_revocation(
    trained: tuple[Vendor, Buyer, str], key: bool
) -> None:
    # The checkpoint and the tiles that give its root are genuine; the level-0 tile the entries
    # are checked against is genuine on its first request (the root) and forged on the next,
    # with the entry bundle: the revocation becomes one of a digest the buyer does not hold.
    # Before the fix, `monitor` took that as "nothing about this ledger", marked the size
    # applied, and the revocation never reached the buyer (`admit` passed).
    from trajledger.verify.merkle import leaf_hash
    from trajledger.verify.tiles import format_entry_bundle, parse_entry_bundle

    vendor, buyer, _ckpt = trained
    vendor.run("revoke", vendor.batches[0], "--reason", "consent withdrawn", "--key", "vendor")
    size = vendor.size()
    log = vendor.home / "log"
    entries = parse_entry_bundle((log / f"tile/entries/000.p/{size}").read_bytes())
    forged = [e.replace(vendor.batches[0][7:].encode(), b"0" * 64) for e in entries]
    assert forged[-1] != entries[-1]
    tile, bundle = f"tile/0/000.p/{size}", f"tile/entries/000.p/{size}"
    for url in served(vendor):
        with substituting(url, {tile: b"".join(map(leaf_hash, forged)),
                                bundle: format_entry_bundle(forged)}, {tile: 1}) as peer:
            args = ("--key", "approver") if key else ()
            r = buyer.run("monitor", peer, "--vkey", vendor.vkey(), *args, code=1)
            assert "FAIL: " in r.stderr and "not the signed tree" in r.stderr, r.stderr
        buyer.run("admit", "bh@1")  # nothing was taken in, nothing marked applied
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver", code=0)
        assert "WARNING: revoked by" in r.stderr, r.stderr
        r = buyer.run("admit", "bh@1", code=1)
        assert "revoked: consent withdrawn" in r.stderr
