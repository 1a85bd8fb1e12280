"""Findings of out43 in files other helpers owned, fixed by the lead at the merge (each was a
strict xfail, failing before its fix). Reproducers were in /tmp/out43-s/."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import testkit
from click.testing import CliRunner

from trajledger.runner.cli import main


class Party:
    """One ledger with a state directory of its own, driven through the command line."""

    def __init__(self, runner: CliRunner, root: Path, name: str) -> None:
        self.runner, self.home = runner, root / name
        self.env = {"TRAJLEDGER_STATE_DIR": str(root / f"{name}-state")}

    def __call__(self, *args: str | Path, code: int | None = 0) -> Any:
        r = self.runner.invoke(main, ["--ledger", str(self.home), *map(str, args)], env=self.env)
        assert code is None or r.exit_code == code, r.output
        return r

    def vkey(self) -> str:
        return str(json.loads(self("log", "info", "--json").stdout)["vkey"])

    def buys_from(self, vendor: Party, policy: Path) -> None:
        """A new ledger whose policy trusts the vendor's key ``vendor`` and log, and its own
        approver key; the vendor's log pinned ahead."""
        self("init")
        self("key", "new", "approver", "--no-encrypt")
        pem = vendor("key", "export", "vendor").stdout
        mine = self("key", "export", "approver").stdout
        policy.write_text(
            f'name = "buyer"\nserial = 1\n[roles.producer]\nkeys = ["""{pem}"""]\n'
            f'[roles.approver]\nkeys = ["""{mine}"""]\n[roles.log]\n'
            f'vkeys = ["{vendor.vkey()}", "{self.vkey()}"]\n'
        )
        self("policy", "set", policy, "--key", "approver", "--yes")
        self("trust", vendor.vkey())


def test_an_older_bundle_already_imported_says_so(runner: CliRunner, tmp_path: Path) -> None:
    """A buyer imports the vendor's grid@1, then the vendor's update (a revocation), then
    grid-1.tar.zst again (its download folder): `FAIL: import grid-1.tar.zst: the log …:
    rollback: … size 5 … accepted before; size 4 … now`, exit 1, where the same bundle imported
    before the update says `already imported at log index N; nothing new recorded` (exit 0)
    and `verify BUNDLE` says to ask the sender for a bundle exported now."""
    vendor, buyer = Party(runner, tmp_path, "vendor"), Party(runner, tmp_path, "buyer")
    vendor("init")
    vendor("key", "new", "vendor", "--no-encrypt")
    policy = tmp_path / "vendor-policy.toml"
    vendor("policy", "init", "--roles", "producer", "--producer", "vendor", "--out", policy)
    vendor("policy", "set", policy, "--key", "vendor", "--yes")
    vendor("env", "register", "chat", "--version", "1", "--key", "vendor")
    data = tmp_path / "w1.jsonl"
    data.write_text("".join(json.dumps({"episode_id": f"e{i}", "reward": 1.0, "messages": [
        {"role": "user", "content": f"q {i}"}]}) + "\n" for i in range(3)))  # fmt: skip
    batch = vendor("record", data, "--env", "chat@1", "--policy", "m", "--key", "vendor")
    batch = batch.stdout.strip()
    vendor("dataset", "create", "grid", "--version", "1", "--split", "train", "--batch", batch,
           "--key", "vendor")  # fmt: skip
    old = tmp_path / "grid-1.tar.zst"
    vendor("export", "grid@1", "--out", old)
    size = json.loads(vendor("log", "info", "--json").stdout)["size"]
    vendor("revoke", batch, "--reason", "bad batch", "--key", "vendor")
    updates = tmp_path / "updates.tar.zst"
    vendor("export", "--updates-since", size, "--out", updates)
    buyer.buys_from(vendor, tmp_path / "buyer-policy.toml")
    buyer("import", old, "--key", "approver")
    assert "already imported" in buyer("import", old, "--key", "approver").stderr  # (holds)
    buyer("import", updates, "--key", "approver")
    r = buyer("import", old, "--key", "approver", code=None)
    assert r.exit_code == 0 and "already imported" in r.stderr, r.stderr
    assert f"--updates-since {size + 1}" in r.stderr, r.stderr  # (what was applied: the update)

    # A tree of the log this ledger never accepted, smaller than one it did, is still refused:
    # a second buyer that took the newer full bundle first cannot check the older one.
    newer = tmp_path / "grid-1-now.tar.zst"
    vendor("export", "grid@1", "--out", newer)
    other = Party(runner, tmp_path, "other")
    other.buys_from(vendor, tmp_path / "other-policy.toml")
    other("import", newer, "--key", "approver")
    r = other("import", old, "--key", "approver", code=1)
    assert "rollback" in r.stderr, r.stderr


def test_a_missing_evaluation_names_a_command_that_runs() -> None:
    """The release engineer's CI ran the line `release` printed for a missing evaluation,
    `trajledger eval sha256:… --suite regression@1`: `Error: Missing option '--key'`, exit 2.
    (A missing parent evaluation under max_drop, `the parent sha256:… has no verified
    evaluation on regression@1`, names no command at all.)"""
    from trajledger.verify.release_rules import Requirement
    from trajledger.verify.releases import release_requirement
    from trajledger.verify.report import Node

    node = Node("release:x", "release-decision")
    release_requirement(node, Requirement("regression@1", min=0.75), "sha256:" + "a" * 64,
                        None, None, [], None)  # fmt: skip
    (check,) = node.checks
    assert "--suite regression@1 --key " in check.detail, check.detail


def test_a_record_by_a_key_not_in_the_policy_says_what_to_do(
    runner: CliRunner, tmp_path: Path
) -> None:
    """The vendor rotated its producer key mid-contract and signed week 3 with the new one:
    the buyer's import says `dataset record 3: no signature by a trusted key: 0 of 1 required
    signature(s) verified; the envelope names key b994c76f4092 (not in the policy), want
    producer key(s)`, and stops there: nothing says to get that key from the vendor out of band
    and add it to the policy's producer role (with `policy set`), or that it may be an attack."""
    vendor, buyer = Party(runner, tmp_path, "vendor"), Party(runner, tmp_path, "buyer")
    vendor("init")
    for name in ("vendor", "vendor2"):
        vendor("key", "new", name, "--no-encrypt")
    policy = tmp_path / "vendor-policy.toml"
    vendor("policy", "init", "--roles", "producer", "--producer", "vendor", "--producer",
           "vendor2", "--out", policy)  # fmt: skip
    vendor("policy", "set", policy, "--key", "vendor", "--yes")
    vendor("env", "register", "chat", "--version", "1", "--key", "vendor")
    data = tmp_path / "w3.jsonl"
    data.write_text(json.dumps({"episode_id": "e0", "reward": 1.0, "messages": [
        {"role": "user", "content": "q"}]}) + "\n")  # fmt: skip
    vendor("record", data, "--env", "chat@1", "--policy", "m", "--key", "vendor", "--name", "w3")
    vendor("dataset", "create", "grid", "--version", "3", "--split", "train", "--batch", "w3",
           "--key", "vendor2")  # fmt: skip
    bundle = tmp_path / "grid-3.tar.zst"
    vendor("export", "grid@3", "--out", bundle)
    buyer.buys_from(vendor, tmp_path / "buyer-policy.toml")
    r = buyer("import", bundle, "--key", "approver", code=1)
    (line,) = [x for x in r.stderr.splitlines() if "(not in the policy)" in x]
    assert "[roles.producer]" in line or "policy set" in line, line


def test_an_output_left_by_a_stopped_run_says_what_to_do(tmp_path: Path) -> None:
    """`train --output sft-out -- COMMAND`, Ctrl-C after COMMAND wrote shard0: `FAIL:
    interrupted; nothing was recorded or half-written`, exit 130, and sft-out keeps shard0. The
    same command line again: `FAIL: --output sft-out: not empty; give a new or empty directory,
    so that only what the command writes is recorded`: what is there (a stopped run's files,
    never recorded) and that removing it is the way on are not said."""
    from trajledger.ledger.errors import LedgerError
    from trajledger.runner.workdir import check_output_dir

    out = tmp_path / "sft-out"
    out.mkdir()
    (out / "shard0").write_text("partial")
    with pytest.raises(LedgerError) as e:
        check_output_dir(out)
    assert "shard0" in str(e.value) and "remove" in str(e.value), str(e.value)


def test_a_card_of_a_checkpoint_says_where_its_card_is(
    runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """The release engineer, having released cartpole-bc@2, writes its model card: `trajledger
    card cartpole-bc@2 --format hf` says `FAIL: cartpole-bc@2: is a checkpoint, not a dataset`
    (a release: `is a release (release of …), not a dataset`), and not where a checkpoint's
    card is: its lineage (`lineage CK --format html`) and the cards of the datasets it was
    trained on (docs/cards.md)."""
    home = tmp_path / "demo"  # (a copy: the template is never used in place)
    shutil.copytree(quickstart_template.home, home, symlinks=True)
    r = runner.invoke(main, ["--ledger", str(home), "card",
                             "cartpole-bc@2", "--format", "hf"],
                      env={"TRAJLEDGER_STATE_DIR": str(tmp_path / "state")})  # fmt: skip
    assert r.exit_code == 3, r.output
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("FAIL:")]
    assert line.startswith("FAIL: cartpole-bc@2: is a checkpoint, not a dataset")
    assert "lineage" in line or "cartpole-train@" in line, line
