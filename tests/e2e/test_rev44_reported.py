"""rev44's findings end to end (thirty-second round): an attack on the thirty-first."""

from __future__ import annotations

from pathlib import Path

import pytest
import testkit


def test_a_strangers_bundle_names_no_key_of_its_own_history_to_add(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rev44 finding 4: `verify.left_out.successor_keys` (out46 finding 10) read 'the
    exporter's own policy' from any bundle's history, followed from its first record with no
    anchor, and named each key of it that signed the bundle's entries, ending 'or add the key
    to your policy'. A stranger's bundle (its own log, keys and policy; its checkpoint signed
    by a log key the buyer's policy does not name) failed, as it must, with a line advising the
    buyer to add the stranger's four keys. The advice is now given only from a history and
    entries included under a checkpoint the policy in force verified (the rotation of
    test_out46_reported still gets it)."""
    from trajledger.runner.cli import main
    from trajledger.verify.__main__ import main as verify_main

    testkit.quickstart(tmp_path / "buyer")
    digest = testkit.quickstart(tmp_path / "stranger")
    bundle = tmp_path / "stranger.tar.zst"
    r = testkit.new_runner().invoke(main, ["--ledger", str(tmp_path / "stranger"), "export",
                                           digest, "--out", str(bundle)])
    assert r.exit_code == 0, r.output
    capsys.readouterr()
    code = verify_main([str(bundle), "--policy", str(tmp_path / "buyer" / "policy.toml")])
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    assert "which your policy's log role does not name" in out, out  # why it fails, as before
    assert "add the key to your policy" not in out, out
    assert "the exporter's own policy" not in out, out
