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


def _histogram_cut(data: bytes, old: bytes, new: bytes) -> bytes:
    """``data`` (a Parquet file) with the one place of its footer holding ``old`` made ``new``
    (as long: the footer's length stands)."""
    start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    footer = data[start:-8]
    at = footer.find(old)
    assert at >= 0 and footer.find(old, at + 1) < 0, footer.hex(" ")
    return data[:start + at] + new + data[start + at + len(old):]


FOOTER_CASES = """
import io, sys
import pyarrow as pa, pyarrow.parquet as pq
from trajledger.ledger.rollouts.parquet_read import read_parquet

def write(t):
    b = io.BytesIO()
    pq.write_table(t, b, compression="none")
    return b.getvalue()

def cut(data, old, new):
    start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    at = data.find(old, start)
    assert at >= 0 and data.find(old, at + 1) < 0
    return data[:at] + new + data[at + len(old):]

cases = [  # a list header of 2 entries (0x26) made 1 of a 2-byte varint: the footer as long
    cut(write(pa.table({"x": pa.array([1, None, 3], pa.int64())})),
        b"\\x26\\x02\\x04", b"\\x16\\x82\\x04"),
    cut(write(pa.table({"l": pa.array([[1, 2], [3]], pa.list_(pa.int64()))})),
        b"\\x29\\x26\\x04\\x02\\x19\\x46", b"\\x29\\x16\\x84\\x02\\x19\\x46"),
    cut(write(pa.table({"s": pa.array(["ab", "c"], pa.string())})),  # BYTE_ARRAY -> INT64
        b"\\x15\\x0c\\x25\\x02\\x18\\x01\\x73", b"\\x15\\x04\\x25\\x02\\x18\\x01\\x73"),
]
for data in cases:
    try:
        read_parquet(data)
    except ValueError as e:
        print(type(e).__name__, e)
"""


def test_a_footers_size_statistics_pyarrow_would_abort_on_are_refused(tmp_path: Path) -> None:
    """rev52's Left: a column chunk's size statistics with a level histogram of another
    length than its leaf's levels (one byte of the footer changed), or unencoded byte array
    sizes for a leaf of another type: pyarrow's ``RowGroupMetaData.column(i)`` throws a C++
    exception through Cython, ``terminate``, SIGABRT, exit 134 (`trajledger validate`, the
    gate's and the recorder's `_check_pages`). Now the footer is read first
    (`parquet_thrift.footer_chunks`) and the file refused in one line, exit 1."""
    import pyarrow.parquet as pq
    from test_updates import rollouts

    data = rollouts(tmp_path / "r.parquet", 1).read_bytes()
    # episode_id's definition levels (nullable: 2 entries) made one entry, after its
    # unencoded sizes (0xc0 0x01) and its empty repetition levels
    (tmp_path / "cut.parquet").write_bytes(_histogram_cut(
        data, b"\x16\xc0\x01\x19\x06\x19\x26\x00\x20", b"\x16\xc0\x01\x19\x06\x19\x16\x80\x20"))
    pq.read_metadata(tmp_path / "cut.parquet")  # (pyarrow opens it: the footer parses)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    r = subprocess.run([sys.executable, "-m", "trajledger", "validate",
                        str(tmp_path / "cut.parquet")],
                       capture_output=True, text=True, timeout=300, env=env, check=False)
    assert r.returncode == 1, r.stderr
    assert ("column 'episode_id': its size statistics' definition level histogram has 1 "
            "entries, want 2") in r.stderr, r.stderr
    assert "terminate" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-c", FOOTER_CASES], capture_output=True, text=True,
                       timeout=300, env=env, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "FormatError column 'x': its size statistics' definition level histogram has 1 "
        "entries, want 2",
        "FormatError column 'l.list.element': its size statistics' repetition level histogram "
        "has 1 entries, want 2",
        "FormatError column 's': its size statistics give unencoded byte array sizes for a "
        "INT64 leaf",
    ], r.stdout + r.stderr
