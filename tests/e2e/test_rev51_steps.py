"""rev51: the steps a message tells the user to run, run as printed; docs/SECURITY.md,
"Review of 2026-12-07, thirty-ninth round (rev51)"."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from testkit import Party

from trajledger import Ledger


def test_a_path_starting_with_a_dash_is_no_option_in_the_step_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """finding 4: ``policy init --out ./-p.toml`` (a file name the user chose) printed its next
    step as ``'trajledger policy set -p.toml --key APPROVER...'`` (``Path`` drops the ``./``):
    run as printed, ``Error: No such option '-p'``, exit 2 (likewise ``chmod 600 PATH``,
    ``policy inline PATH`` of such a path). Expected: ``./-p.toml``, which runs."""
    monkeypatch.chdir(tmp_path)
    lab = Party(tmp_path, "lab")
    ledger = Ledger.init(lab.home, origin="lab.example/log")
    for k in ("vendor", "approver", "trainer"):
        ledger.keys.create(k, encrypt=False)
    err = lab.run("policy", "init", "--out", "./-p.toml").stderr
    told = re.search(r"next: '([^']+)'", err)
    assert told, err
    args = shlex.split(told.group(1).replace("APPROVER...", "approver"))
    assert args[:4] == ["trajledger", "policy", "set", "./-p.toml"], args
    lab.run(*args[1:], "--yes")  # (a first policy: its members listed, confirmed)
