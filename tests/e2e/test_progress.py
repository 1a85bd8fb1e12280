"""Progress on long work (issue 23 item 4), seen on a pseudo-terminal: export draws a bar over
the bundle's bytes, import one over the bytes it copies into the store, verify one over the
data it re-hashes; none under ``-q`` or when stderr is not a terminal.
(``record``'s bar: test_record_progress.py; waiting for another process: test_trust_state.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import testkit
from testkit import run_on_terminal


@pytest.fixture
def home(quickstart_template: testkit.Template[str], tmp_path: Path) -> Path:
    return testkit.copy_template(quickstart_template, tmp_path / "home")


def _cmd(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "trajledger", "--ledger", str(home), *args]


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, COLUMNS="100", **extra)


def _buyer(home: Path, vendor: Path) -> Path:
    """A second organisation: its own log, approvers b1 and b2, and a policy trusting the
    vendor's keys and log."""
    import shutil

    from trajledger import Ledger
    from trajledger.runner.cli import main

    runner = testkit.new_runner()
    for args in (["init", "--origin", "buyer/log"], *(["key", "new", k, "--no-encrypt"]
                                                       for k in ("b1", "b2"))):
        r = runner.invoke(main, ["--ledger", str(home), *args])
        assert r.exit_code == 0, r.output
    trust = home / "trust"
    trust.mkdir()
    for pub in [*(vendor / "keys").glob("*.pub"), *(home / "keys").glob("b*.pub")]:
        shutil.copy(pub, trust / pub.name)
    vkeys = f'"{Ledger.open(vendor).log.vkey}", "{Ledger.open(home).log.vkey}"'
    (home / "policy.toml").write_text(testkit.BUYER_POLICY.format(vkeys=vkeys))
    return home


def test_export_and_import_draw_bars_over_bytes(home: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "ck.tar.zst"
    code, err = run_on_terminal(_cmd(home, "export", "cartpole-bc@2", "--out", str(bundle)),
                                _env())
    assert code == 0, err
    assert "writing the bundle" in err and "100%" in err
    buyer = _buyer(tmp_path / "buyer", home)
    code, err = run_on_terminal(
        _cmd(buyer, "import", str(bundle), "--policy", str(buyer / "policy.toml"),
             "--key", "b1", "--key", "b2"), _env())
    assert "moving into the store" in err and "100%" in err, err
    assert code == 0, err


def test_verify_draws_a_bar_over_the_re_hashing_from_the_first_blob(home: Path) -> None:
    code, err = run_on_terminal(_cmd(home, "verify", "cartpole-bc@2"), _env())
    assert code == 0, err
    assert "re-hashing data" in err and "100%" in err
    # Drawn when the walk finds the checkpoint's first file (0% of what is known by then),
    # before the walk is done; the total grows as it finds the rest (tests/unit/verify/
    # test_blobs.py follows the totals).
    drawn = re.search(r"re-hashing data  \[-+\]    0%", err)
    assert drawn is not None and drawn.start() < err.index("100%"), err
    code, err = run_on_terminal(_cmd(home, "-q", "verify", "cartpole-bc@2"), _env())
    assert code == 0, err
    assert "re-hashing data" not in err and "%" not in err
    # Nothing is re-hashed with --skip-data: no bar.
    code, err = run_on_terminal(_cmd(home, "verify", "--skip-data", "cartpole-bc@2"), _env())
    assert code == 0, err
    assert "re-hashing data" not in err and "%" not in err
    r = subprocess.run(_cmd(home, "verify", "cartpole-bc@2"), capture_output=True, text=True,
                       env=_env(), check=False)
    assert r.returncode == 0, r.stderr
    assert "%" not in r.stderr and "re-hashing data" not in r.stderr


def test_no_bar_under_quiet_or_off_a_terminal(home: Path, tmp_path: Path) -> None:
    code, err = run_on_terminal(
        _cmd(home, "-q", "export", "cartpole-bc@2", "--out", str(tmp_path / "a.tar.zst")), _env())
    assert code == 0, err
    assert "%" not in err and "writing the bundle" not in err
    r = subprocess.run(_cmd(home, "export", "cartpole-bc@2", "--out", str(tmp_path / "b.tar.zst")),
                       capture_output=True, text=True, env=_env(), check=False)
    assert r.returncode == 0, r.stderr
    assert "%" not in r.stderr and "writing the bundle" not in r.stderr
