"""An import taken in as revoked says so on its last line (out47's Left: the auditor's import of
a bundle whose lineage holds a revocation printed the report's ``✗ FAIL: … 1 problem(s)``, then
``OK: … imported``, exit 0: two lines that read as opposite verdicts)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from test_out43_reported import Party
from test_rev41_reported import _vendor


def test_a_bundle_taken_in_as_revoked_says_it_on_its_ok_line(
    runner: CliRunner, tmp_path: Path
) -> None:
    (vendor, batch), buyer = _vendor(runner, tmp_path), Party(runner, tmp_path, "buyer")
    vendor("revoke", batch, "--reason", "bad batch", "--key", "vendor")
    bundle = tmp_path / "grid-1.tar.zst"
    vendor("export", "grid@1", "--out", bundle)
    buyer.buys_from(vendor, tmp_path / "buyer-policy.toml")
    r = buyer("import", bundle, "--key", "approver")
    assert r.stdout.startswith("✗ FAIL: dataset grid@1 "), r.stdout
    [line] = [x for x in r.stderr.splitlines() if x.startswith("OK: dataset grid@1 ")]
    assert ": imported as it fails above (revoked: every use of it is refused here), " in line
    r = buyer("import", bundle, "--key", "approver", "--json")  # (already imported)
    assert json.loads(r.stdout)["ok"] is False


def test_a_bundle_that_verifies_says_imported_alone(runner: CliRunner, tmp_path: Path) -> None:
    (vendor, _batch), buyer = _vendor(runner, tmp_path), Party(runner, tmp_path, "buyer")
    bundle = tmp_path / "grid-1.tar.zst"
    vendor("export", "grid@1", "--out", bundle)
    buyer.buys_from(vendor, tmp_path / "buyer-policy.toml")
    r = buyer("import", bundle, "--key", "approver")
    assert r.stdout.startswith("✓ OK: dataset grid@1 "), r.stdout
    assert ": imported, " in r.stderr and "as it fails" not in r.stderr, r.stderr
