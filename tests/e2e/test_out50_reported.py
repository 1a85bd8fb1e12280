"""What out50 found playing a vendor and a buyer from scratch (exchange between organisations),
and out49's Left: after a name clash (a buyer's own ``train@1`` beside an imported ``train@1``)
the refusals of ``train``, ``eval`` and ``release`` and the reports of ``import`` and
``release`` named the imported record by its plain name, which every command takes for the
buyer's own; docs/SECURITY.md, "Review of 2026-12-07, thirty-sixth round (out50)".
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from test_release_again import files_of
from test_release_suites_across_logs import EVALUATE, trained_buyer
from test_updates import Vendor, make_buyer, rollouts, vendor_copy
from testkit import Party

SCHEMA = json.loads((Path(__file__).parents[2] / "schemas/report.v1.schema.json").read_text())


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


def clashed(tmp_path: Path) -> tuple[Vendor, Party, str, str, Any]:
    """A vendor's ``train@1`` imported (not approved) by a buyer that has a ``train@1`` of its
    own (approved, ``pol@1`` trained on it) and the release rule of
    test_release_suites_across_logs: the vendor, the buyer, the vendor's dataset's digest, the
    name that finds it here (``ORIGIN+KEYHASH+train@1``) and the import's result."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    theirs = vendor.last("dataset", "create", "train", "--version", "1", "--split", "train",
                         "--batch", vendor.batches[0], "--key", "vendor")  # fmt: skip
    vendor.run("export", "train@1", "--out", tmp_path / "train.tar.zst")
    buyer = trained_buyer(tmp_path, vendor)
    imported = buyer.run("import", tmp_path / "train.tar.zst", "--key", "approver")
    return vendor, buyer, theirs, f"{vendor.origin}+train@1", imported


def _plain(text: str, digest: str) -> list[str]:
    """The lines of ``text`` that name the dataset ``digest`` by its plain name."""
    return [line for line in text.splitlines() if f"dataset train@1 ({digest[:19]}" in line]


def test_a_refusal_short_of_approvals_names_the_imported_dataset_to_approve(
    tmp_path: Path
) -> None:
    """The buyer imported the vendor's ``train@1`` (the import names the clash) and trained on
    it by the name the import gave, ``ORIGIN+KEYHASH+train@1``, before approving it: refused,
    ``FAIL: dataset train@1: refused`` and ``approve it … ('trajledger approve train@1 --key
    NAME')``: the buyer's own dataset, approved already. Run as printed, the approver signed
    an approval of the buyer's own dataset again and the run was refused again, saying the
    same. Expected: the refusal names the vendor's dataset by the name that finds it, and the
    command it prints approves it (then the run is admitted); the import's report (the tree,
    its verdict and the OK line; ``--json``'s ``qualifiedName``) names it so too, and so do
    ``revoke``'s refusals of a key that may not revoke it (``dataset train@1: key producer
    (…) did not produce it``, ``cannot revoke train@1``)."""
    _vendor, buyer, theirs, name, imported = clashed(tmp_path)
    assert f"✓ OK: dataset {name} ({theirs[:19]}…)" in imported.stdout, imported.stdout
    assert f"OK: dataset {name} ({theirs[:19]}…) from " in imported.stderr, imported.stderr
    assert not _plain(imported.stdout + imported.stderr, theirs), imported.output
    doc = json.loads(buyer.run("import", tmp_path / "train.tar.zst", "--key", "approver",
                               "--json").stdout)  # (imported already: the same report)
    (node,) = [n for n in doc["nodes"] if n["id"] == theirs]
    assert (node["name"], node.get("qualifiedName")) == ("train", name), node
    args = ("train", "--dataset", name, "--key", "trainer", "--name", "vpol", "--version", "1")
    r = buyer.run(*args, code=1)
    assert f"FAIL: dataset {name}: refused, 1 problem(s)" in r.stderr, r.stderr
    assert not _plain(r.stderr, theirs) and "approve train@1" not in r.stderr, r.stderr
    told = re.search(r"'trajledger (approve \S+) --key NAME'", r.stderr)
    assert told and told.group(1) == f"approve {name}", r.stderr
    buyer.run(*told.group(1).split(), "--key", "approver")
    buyer.run(*args)
    # A revocation the buyer's keys may not sign, refused: named so too.
    r = buyer.run("revoke", name, "--reason", "r", "--key", "producer", code=1)
    assert r.stderr.startswith(f"FAIL: dataset {name}: key producer ("), r.stderr
    r = buyer.run("revoke", name, "--reason", "r", "--key", "trainer", code=1)
    assert f": cannot revoke {name}: it holds trainer role" in r.stderr, r.stderr


def test_train_eval_and_release_refusals_name_the_imported_dataset_after_a_clash(
    tmp_path: Path
) -> None:
    """out49's Left: the buyer approved the vendor's ``train@1`` and trained ``vpol@1`` on it;
    the vendor revoked that dataset and the revocation came by an update bundle. ``train``
    on it again, ``eval`` of ``vpol@1`` and ``release vpol@1`` were refused naming ``dataset
    train@1 (sha256:…) > revoked`` (the verifier's ``Node.label``), a name that ``verify``,
    ``show`` and ``approve`` take for the buyer's own dataset, which is not revoked. Expected:
    each ``FAIL:`` line names it ``ORIGIN+KEYHASH+train@1``; ``release --json``'s report gives
    the node its ``qualifiedName`` (schema-valid)."""
    vendor, buyer, theirs, name, _imported = clashed(tmp_path)
    buyer.run("approve", name, "--key", "approver")
    buyer.run("train", "--dataset", name, "--key", "trainer", "--name", "vpol", "--version", "1")
    since = vendor.size()
    vendor.run("revoke", theirs, "--reason", "consent withdrawn", "--key", "vendor")
    vendor.run("export", "--updates-since", str(since), "--out", tmp_path / "u.tar.zst")
    buyer.run("import", tmp_path / "u.tar.zst", "--key", "approver")
    mine = buyer.last("record", rollouts(tmp_path / "reg.parquet", 31), "--env", "grid@1",
                      "--policy", "p", "--name", "reg-1", "--licence", "CC-BY-4.0", "--key",
                      "producer")  # fmt: skip
    buyer.run("dataset", "create", "regression", "--version", "1", "--split", "regression",
              "--batch", mine, "--key", "producer")  # fmt: skip
    script = tmp_path / "evaluate.py"
    script.write_text(EVALUATE)
    revoked = f"FAIL: dataset {name} ({theirs[:19]}…) > revoked: consent withdrawn"
    for args in (
        ("train", "--dataset", name, "--key", "trainer", "--name", "vpol", "--version", "2"),
        ("eval", "vpol@1", "--suite", "regression@1", "--key", "evaluator", "--",
         sys.executable, script, "pass"),
        ("release", "vpol@1", "--key", "approver"),
        ("release", "vpol@1", "--dry-run"),
    ):
        r = buyer.run(*args, code=1)
        assert any(line.startswith(revoked) for line in r.stderr.splitlines()), (args, r.stderr)
        assert not _plain(r.stderr, theirs), (args, r.stderr)
    doc = json.loads(buyer.run("release", "vpol@1", "--key", "approver", "--json",
                               code=1).stdout)
    jsonschema.validate(doc["report"], SCHEMA)
    (node,) = [n for n in doc["report"]["nodes"] if n["id"] == theirs]
    assert (node["name"], node.get("qualifiedName")) == ("train", name), node
    # The buyer's own train@1, and what was built on it, by their plain names still.
    r = buyer.run("release", "pol@1", "--key", "approver", code=1)
    assert "+train@1" not in r.stderr, r.stderr


def test_a_pictures_short_name_of_an_imported_record_keeps_its_name_and_its_log(
    tmp_path: Path
) -> None:
    """out49's Left: the pictures (Mermaid, DOT, HTML) name a node by a short name of 28
    characters. An imported record's origin-qualified name was cut as any long name: its
    start (the origin's first characters) and its end. Two logs of one origin name (two keys:
    the buyer's policy trusts each) that both sent a ``cartpole-train@2`` were cut alike,
    then told apart in the middle of the log's key, the dataset's name cut away
    (``vendor.…e/log+f1848b3f+ca…``). Expected: each short name ends with the whole
    ``+NAME@VERSION`` and holds its log's ``KEYHASH`` (the part that tells the two logs
    apart); the buyer's own keeps its plain name."""
    from trajledger.runner.lineage import NAME_CHARS
    from trajledger.runner.lineage_layout import short_names

    full = {"a": "vendor.example/log+f1848b3f+cartpole-train@2",
            "b": "vendor.example/log+0a1b2c3d+cartpole-train@2",
            "c": "cartpole-train@2", "d": "vendor.example/log+0a1b2c3d+grid@1"}
    short = short_names(full, NAME_CHARS, {k: f"{k}{k}{k}" for k in full})
    assert len(set(short.values())) == 4 and max(map(len, short.values())) <= NAME_CHARS, short
    for item in "abd":
        keyhash, ref = full[item].split("+")[1:]
        assert short[item].endswith(f"+{keyhash}+{ref}"), short
    assert short["c"] == "cartpole-train@2", short


def forked(tmp_path: Path) -> tuple[Vendor, Party, int]:
    """A buyer that imported a vendor's ``bh@1`` and an update to one entry more (a
    revocation); then the vendor's ledger restored from a copy of it before the update (its
    files and state, by hand) and recorded on: its log forks from what the buyer saw. The
    vendor, the buyer, the size the buyer first applied; ``older`` in ``tmp_path``: the
    vendor's checkpoint before the update."""
    vendor, buyer = vendor_copy(tmp_path, "vendor", "vendor.example/log"), Party(tmp_path, "buyer")
    make_buyer(buyer, [vendor])
    buyer.run("import", vendor.bundle, "--key", "approver")
    (tmp_path / "older").write_bytes((vendor.home / "log" / "checkpoint").read_bytes())
    shutil.copytree(vendor.home, tmp_path / "copy")
    shutil.copytree(vendor.state, tmp_path / "copy-state")
    since = vendor.size()
    vendor.run("revoke", vendor.batches[0], "--reason", "one", "--key", "vendor")
    vendor.run("export", "--updates-since", str(since), "--out", tmp_path / "u1.tar.zst")
    buyer.run("import", tmp_path / "u1.tar.zst", "--key", "approver")
    for copy, at in ((tmp_path / "copy", vendor.home), (tmp_path / "copy-state", vendor.state)):
        shutil.rmtree(at)
        shutil.copytree(copy, at)
    vendor.run("revoke", vendor.batches[1], "--reason", "two", "--key", "vendor")
    return vendor, buyer, since


def test_an_import_refused_for_a_fork_says_what_to_do(tmp_path: Path) -> None:
    """The vendor restored its ledger from a copy (the files, by hand) and recorded again: its
    log signed another tree at a size the buyer had imported up to. ``import`` of its next
    update was refused, rightly, ``fork: two roots at one size: … accepted before; … now``,
    and said nothing more: not that nothing was imported, nor to keep the bundle (the other
    signed checkpoint) as evidence, nor what to ask (``monitor`` says so of the same fork).
    Expected: the line says both and what to do next; the ledger is left as it was."""
    vendor, buyer, since = forked(tmp_path)
    vendor.run("export", "--updates-since", str(since), "--out", tmp_path / "u2.tar.zst")
    before = files_of(buyer.home)
    r = buyer.run("import", tmp_path / "u2.tar.zst", "--key", "approver", code=1)
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("FAIL:")]
    assert ": fork: two roots at one size: " in line, line
    assert line.endswith("nothing was imported: keep this bundle (the log's signed checkpoint "
                         "it carries) as evidence, with the one accepted before (your state), "
                         "and ask the log's owner which tree it stands by; nothing more from "
                         "this log is imported until a bundle extends the one accepted "
                         "before"), line
    assert r.stdout == "" and files_of(buyer.home) == before


def test_an_import_under_a_policy_without_the_role_says_how_to_trust_the_signer(
    tmp_path: Path
) -> None:
    """A buyer's first policy, written by hand (``policy init`` wants a producer of its own):
    its approver and the vendor's log key, not yet the vendor's producer key. ``import`` was
    refused, rightly, ``… > record: log entry 4 (dataset): the policy has no producer keys or
    identities``, and said no more: a producer key in the policy that is not the signer's is
    told ``add it to [roles.producer]`` (out44), a role left out nothing. Expected: the line
    says which table to add the signer's key to; done so, the import passes."""
    vendor, buyer = vendor_copy(tmp_path, "vendor", "vendor.example/log"), Party(tmp_path, "buyer")
    buyer.run("init", "--origin", "buyer.example/log")
    buyer.run("key", "new", "approver", "--no-encrypt")
    policy = (f'name = "buyer"\nserial = {{}}\n{{}}[roles.approver]\nkeys = ["keys/approver.pub"]'
              f'\n[roles.log]\nvkeys = ["{vendor.vkey()}", "{buyer.vkey()}"]\n')
    (buyer.home / "policy.toml").write_text(policy.format(1, ""))
    buyer.run("policy", "set", buyer.home / "policy.toml", "--key", "approver", "--yes")
    before = files_of(buyer.home)
    r = buyer.run("import", vendor.bundle, "--key", "approver", code=1)
    line = next(x for x in r.stderr.splitlines() if "the policy has no producer keys" in x)
    assert ("the policy has no producer keys or identities: to trust its signer, add its public "
            "key (from its owner, by a channel you trust) to [roles.producer]") in line, line
    assert files_of(buyer.home) == before
    (buyer.home / "vendor.pub").write_bytes((vendor.home / "keys" / "vendor.pub").read_bytes())
    (buyer.home / "policy.toml").write_text(policy.format(2, '[roles.producer]\nkeys = '
                                                          '["vendor.pub"]\n'))
    buyer.run("policy", "set", buyer.home / "policy.toml", "--key", "approver", "--yes")
    buyer.run("import", vendor.bundle, "--key", "approver")


def test_a_pin_refused_for_a_rollback_or_fork_pins_nothing_and_says_what_to_do(
    tmp_path: Path
) -> None:
    """The buyer pins the vendor's log key with a checkpoint from the vendor (``trust VKEY
    --checkpoint FILE``), after an import had shown it a newer tree: a rollback (the vendor's
    older copy) or a fork (the copy restored, then recorded on) is refused, exit 1. But the
    key was marked pinned first (``pinned ahead ('trajledger trust')`` in the buyer's state:
    a refusal that changed the state), and the line said nothing of what to do. Expected:
    nothing pinned; a fork: keep both as evidence, ask for a tree that extends; the buyer's
    own log restored from a backup: the ``--accept-rollback HELD:NOW`` that accepts it, which
    runs as printed; a checkpoint of another log (``note has no signature by a known key``):
    what to give instead."""
    from trajledger.ledger.trust_state import TrustState

    vendor, buyer, _since = forked(tmp_path)
    vkey = vendor.vkey()

    def pinned() -> str | None:
        state = TrustState.open(vkey, buyer.state)
        try:
            return state.pinned()
        finally:
            state.close()

    assert pinned() is None
    for given, why in ((tmp_path / "older", ": rollback: "),
                       (vendor.home / "log" / "checkpoint", ": fork: ")):
        r = buyer.run("trust", vkey, "--checkpoint", given, code=1)
        (line,) = [x for x in r.stderr.splitlines() if x.startswith("FAIL:")]
        assert why in line and line.endswith(
            "; nothing was pinned: keep both checkpoints as evidence and ask the log's owner "
            "for a checkpoint that extends the one accepted before (a fork, or a rollback of a "
            "log seen through bundles or a monitor, is never accepted)"), line
        assert pinned() is None, line
    own = buyer.vkey()
    r = buyer.run("trust", own, "--checkpoint", vendor.home / "log" / "checkpoint", code=1)
    assert r.stderr.rstrip().endswith(
        "the checkpoint given is not one this key signed: give its log's (the owner's "
        "log/checkpoint file), or the vkey of the log that signed this one; nothing was "
        "pinned"), r.stderr
    before = (buyer.home / "log" / "checkpoint").read_bytes()
    buyer.run("env", "register", "other", "--version", "1", "--source", "sim", "--key",
              "producer")  # fmt: skip
    (tmp_path / "own-older").write_bytes(before)
    r = buyer.run("trust", own, "--checkpoint", tmp_path / "own-older", code=1)
    told = re.search(r"accept the loss with '([^']+)'", r.stderr)
    assert told, r.stderr
    args = told.group(1).replace("FILE", str(tmp_path / "own-older")).split()[1:]
    assert args[:2] == ["trust", own], args
    buyer.run(*args)


def test_an_import_of_a_file_that_is_no_bundle_says_what_import_takes(tmp_path: Path) -> None:
    """A buyer given the vendor's rollouts (a JSON lines file) ran ``import`` on them: ``FAIL:
    bundle steps.jsonl: not zstd-compressed (magic 7b226570)``, the bytes' magic number and no
    way on. Expected: the line says it is no bundle, what ``import`` takes and what records
    rollouts; nothing imported (the ledger's files as they were)."""
    vendor, buyer = vendor_copy(tmp_path, "vendor", "vendor.example/log"), Party(tmp_path, "buyer")
    make_buyer(buyer, [vendor])
    before = files_of(buyer.home)
    steps = tmp_path / "steps.jsonl"
    steps.write_text('{"episode_id": "e", "step": 0, "obs": [0.0], "reward": 1.0}\n')
    r = buyer.run("import", steps, "--key", "approver", code=1)
    assert r.stderr == (
        "FAIL: bundle steps.jsonl: not zstd-compressed (magic 7b226570): not a bundle; 'import' "
        "takes the .tar.zst file 'trajledger export' writes, as it was sent (rollout files are "
        "recorded with 'trajledger record'); nothing imported\n"), r.stderr
    assert files_of(buyer.home) == before


def test_an_evaluation_on_an_imported_suite_after_a_clash_names_it_so(tmp_path: Path) -> None:
    """The buyer imported the vendor's ``regression@1`` and then recorded a ``regression@1`` of
    its own (the clash said), and evaluated ``pol@1`` on the vendor's, by the qualified name:
    ``OK: evaluation of pol@1 on regression@1 recorded``, the name of the buyer's own suite,
    which its release rule counts (the vendor's does not: test_release_suites_across_logs).
    The ``NOTE:`` before it (an evaluation on it does not count for the release) named it
    ``suite regression@1 (sha256:…)`` too. Expected: both name the suite evaluated on by the
    name that finds it."""
    from test_release_suites_across_logs import vendor_suite_and_buyer

    theirs, bundle, buyer = vendor_suite_and_buyer(tmp_path)
    buyer.run("import", bundle, "--key", "approver")
    mine = buyer.last("record", rollouts(tmp_path / "reg.parquet", 31), "--env", "grid@1",
                      "--policy", "p", "--name", "reg-1", "--licence", "CC-BY-4.0", "--key",
                      "producer")  # fmt: skip
    buyer.run("dataset", "create", "regression", "--version", "1", "--split", "regression",
              "--batch", mine, "--key", "producer")  # fmt: skip
    shown = json.loads(buyer.run("show", theirs, "--json").stdout)
    name = f"{shown['origins'][0]}+regression@1"
    script = tmp_path / "evaluate.py"
    script.write_text(EVALUATE)
    r = buyer.run("eval", "pol@1", "--suite", name, "--key", "evaluator", "--",
                  sys.executable, script, "pass")
    assert f"OK: evaluation of pol@1 on {name} recorded at log index " in r.stderr, r.stderr
    assert f"NOTE: suite {name} ({theirs}): an evaluation on it does not count" in r.stderr


def test_a_refusal_of_revoked_data_does_not_send_the_approvers_to_approve_it(
    tmp_path: Path
) -> None:
    """The buyer imported the vendor's ``bh@1`` and had not approved it yet when the vendor's
    revocation of one of its batches came. ``train`` on it was refused with two lines: the
    revoked batch, and ``approvals: 0 of 1 …: approve it with 1 more approver key
    ('trajledger approve bh@1 --key NAME') …, then run this again``: an approval that admits
    nothing (revoked data is never trained on), signed because the refusal said so. Expected:
    both problems named, no approval suggested."""
    vendor, buyer = vendor_copy(tmp_path, "vendor", "vendor.example/log"), Party(tmp_path, "buyer")
    make_buyer(buyer, [vendor])
    buyer.run("import", vendor.bundle, "--key", "approver")
    since = vendor.size()
    vendor.run("revoke", vendor.batches[0], "--reason", "consent withdrawn", "--key", "vendor")
    vendor.run("export", "--updates-since", str(since), "--out", tmp_path / "u.tar.zst")
    buyer.run("import", tmp_path / "u.tar.zst", "--key", "approver")
    r = buyer.run("train", "--dataset", "bh@1", "--key", "trainer", "--name", "p", "--version",
                  "1", code=1)  # fmt: skip
    fails = [x for x in r.stderr.splitlines() if x.startswith("FAIL:")]
    assert any("> revoked: consent withdrawn" in x for x in fails), r.stderr
    assert any("approvals: 0 of 1 required approver(s)" in x for x in fails), r.stderr
    assert "approve it with" not in r.stderr and "trajledger approve" not in r.stderr, r.stderr
