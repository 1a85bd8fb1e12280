"""fix60: the fortieth round's Left, the small ones (rev52, out58, spd53); docs/SECURITY.md,
"Review of 2026-12-07, forty-first round (fix60)"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_updates import Buyer, vendor_copy

FAILING_LOOKALIKES = """
import errno, runpy, sys
from trajledger.ledger import exchange_cli

def failing(_ledger, _rows):
    raise OSError(errno.EIO, "Input/output error")

exchange_cli.lookalike_warnings = failing  # (the trust state's disk, after the record)
sys.argv = ["trajledger", *sys.argv[1:]]
runpy.run_module("trajledger", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("as_json", [False, True])
def test_an_import_to_a_reader_gone_whose_lookalike_check_fails_is_still_exit_3(
    tmp_path: Path, as_json: bool
) -> None:
    """rev52's Left: ``import``'s report met the closed pipe, `Group.invoke` ended it 0, and
    the failed look-alike check after the record (exit 3, `fault27`) was never said."""
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    before = buyer.size()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["TRAJLEDGER_STATE_DIR"] = str(buyer.state)
    read, write = os.pipe()
    os.close(read)  # the reader gone before the command starts
    with os.fdopen(write, "w") as pipe:
        r = subprocess.run(
            [sys.executable, "-c", FAILING_LOOKALIKES, "--ledger", str(buyer.home), "import",
             str(vendor.bundle), "--key", "approver", *(["--json"] if as_json else [])],
            stdout=pipe, stderr=subprocess.PIPE, text=True, timeout=300, env=env, check=False)
    assert r.returncode == 3, r.stderr
    assert buyer.size() > before  # recorded, as the line says
    assert "could not then be checked for look-alikes: " in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("held", ["producer", "approver"])
def test_a_key_named_to_give_instead_has_its_private_half_here(tmp_path: Path, held: str
                                                                  ) -> None:
    """rev51's Left (rev52 read it): `authority_hint.give`'s first two branches named a key
    of this ledger whose public half only is here (``NAME.pub`` without ``NAME.key``: a key
    copied to verify with, a private half moved to a safe): ``key vendor here: give --key
    vendor`` (the record's producer) or ``give an approver's key, --key approver``; followed,
    the step ends ``no private key``, exit 3. Reached by a second producer's ``revoke`` of
    what the first produced, the first's private half moved away (the first branch), or the
    first's whole key and the approver's private half (the second)."""
    from testkit import Party

    vendor = Party(tmp_path, "vendor")
    vendor.run("init", "--origin", "vendor.example/log")
    keys = ["vendor", "vendor2", *(["approver"] if held == "approver" else [])]
    for k in keys:
        vendor.run("key", "new", k, "--no-encrypt")
    roles = ["--roles", "producer,approver", "--approver", "approver"] if held == "approver" \
        else ["--roles", "producer"]
    vendor.run("policy", "init", *roles, "--producer", "vendor", "--producer", "vendor2",
               "--out", tmp_path / "p.toml")
    vendor.run("policy", "set", tmp_path / "p.toml", "--key", keys[-1], "--yes")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.txt").write_text("hi\n")
    vendor.run("attest", tmp_path / "m", "--key", "vendor", "--name", "model")
    gone = ["vendor.key", "approver.key", *(["vendor.pub"] if held == "approver" else [])]
    for name in gone:  # (the producer's whole key gone: the second branch, the approver's)
        (vendor.home / "keys" / name).unlink(missing_ok=True)
    size = vendor.size()
    err = vendor.run("revoke", "model", "--key", "vendor2", "--reason", "bad", code=1).stderr
    assert "did not produce it" in err, err
    assert "give --key vendor" not in err and "--key approver" not in err, err
    assert vendor.size() == size


@pytest.mark.parametrize("cwd", ["elsewhere", "beside"])
def test_a_rank_saving_beside_a_given_output_is_said(tmp_path: Path, cwd: str) -> None:
    """out58's Left: ``train --output runs/bc3 -- python launch.py`` whose rank 1 saved
    ``runs/rank1.bin`` beside the output (its parent, the user's): the look was under the
    working directory only, and nothing was said. Now the output's parent is looked under
    too (the working directory not twice: ``runs/proj``, beside the output), 1,000 entries
    at most."""
    import time
    import warnings

    from trajledger.runner.written import BesideOutputWarning, beside_output

    runs = tmp_path / "runs"
    out = runs / "bc3"
    out.mkdir(parents=True)
    work = tmp_path / "work" if cwd == "elsewhere" else runs / "proj"
    work.mkdir()
    since = time.time()
    (out / "rank0.bin").write_bytes(b"0")
    (runs / "rank1.bin").write_bytes(b"1")
    (runs / "train.log").write_text("a log is no part of a model\n")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        beside_output(work, since, {"rank0.bin": out / "rank0.bin"},
                      skip=(tmp_path / "ledger", out), given=out)
    lines = [str(w.message) for w in said if issubclass(w.category, BesideOutputWarning)]
    assert len(lines) == 1 and f"wrote rank1.bin under {runs}," in lines[0], lines
    assert "train.log" not in lines[0]
