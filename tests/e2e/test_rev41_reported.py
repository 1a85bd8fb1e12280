"""Findings of rev41 in files other helpers own, as failing tests for the lead (strict xfail:
each passes once its finding is fixed). Reproducers are in /tmp/rev41-s/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_out43_reported import Party


@pytest.mark.xfail(strict=True, reason="rev41 finding 1: an older bundle imported again after "
                   "the update that revoked its batch says OK, all checks passed, exit 0, and "
                   "nothing of the revocation held here (exchange.py, earlier_import's return)")
def test_an_older_bundle_imported_again_after_its_revocation_says_it_is_revoked(
    runner: CliRunner, tmp_path: Path
) -> None:
    """A buyer imports the vendor's grid-1.tar.zst, then the vendor's update revoking its
    batch (`WARNING: revoked by …`), then grid-1.tar.zst again (the lead's fix for out43
    finding 6: `already imported`, exit 0). That import prints the bundle's own report, as of
    the bundle's tree: `✓ OK: dataset grid@1 …: 12 checks passed` (`--json`: `causes` empty),
    while `verify grid@1` here fails (`revoked: bad batch`). A CI script that imports what it
    downloaded and reads the exit code or the document is told the revoked dataset is sound;
    before the fix the same import was refused (rollback, exit 1)."""
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
    assert "revoked by" in buyer("import", updates, "--key", "approver").stderr
    assert "revoked: bad batch" in buyer("verify", "grid@1", code=1).stderr  # (here: revoked)
    r = buyer("import", old, "--key", "approver", code=None)
    assert "already imported" in r.stderr, r.stderr  # (the lead's fix: no rollback)
    assert r.exit_code != 0 or "revoked" in r.stdout + r.stderr, r.output
    r = buyer("import", old, "--key", "approver", "--json", code=None)
    assert r.exit_code != 0 or "revoked" in r.stdout, r.stdout
