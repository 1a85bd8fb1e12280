"""A log whose key was rotated more often than a bundle may carry handovers still exports
bundles a verifier takes (rev36, twenty-fourth round; docs/SECURITY.md).

rev35 bounded a bundle's key handovers at `verify.log_key.MAX_HANDOVERS` (64): more are
refused unread. ``export`` carried every handover of the log, so after its key's 65th rotation
(monthly, five years and a half) every bundle it wrote was refused by every verifier, one that
trusts the current key and needs no handover too, while ``export`` said OK. It now carries the
last `MAX_HANDOVERS`, renumbered from 1, and says which recipients cannot follow them. Here the
bound is made 2 and the key rotated three times.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_key_rotation import World, rotate, run, template, world  # noqa: F401

import trajledger.ledger.exchange as exchange
import trajledger.verify.log_key as log_key
from trajledger.verify.__main__ import main as verify_main


def test_a_log_rotated_more_often_than_a_bundle_carries_exports_the_last_handovers(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    for module in (log_key, exchange):
        monkeypatch.setattr(module, "MAX_HANDOVERS", 2)
    keys = [rotate(world.home) for _ in range(3)]
    bundle = tmp_path / "b.tar.zst"
    r = run(world.home, "export", "ds-old@1", "--out", bundle)
    assert r.exit_code == 0, r.output
    assert ("WARNING: the log's key was rotated 3 times; the bundle carries the last 2 "
            "handovers, the most a verifier takes: a recipient who trusts only a key older "
            "than handover 2 cannot follow them") in r.stderr, r.stderr
    # The current key, and the oldest one the carried handovers start from: verified (was 1:
    # "3 key handovers, more than 2"); the first key, handed over in the handover left out:
    # not followed.
    for vkey, code in ((keys[-1], 0), (keys[0], 0), (world.v1, 1)):
        policy = world.policy_file(9, vkeys=(vkey,))
        assert verify_main([str(bundle), "--policy", str(policy)]) == code, capsys.readouterr()
