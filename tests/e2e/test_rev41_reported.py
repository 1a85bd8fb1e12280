"""Findings of rev41 in files other helpers own, as failing tests for the lead (strict xfail:
each passes once its finding is fixed). Reproducers are in /tmp/rev41-s/."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from test_out43_reported import Party


def _vendor(runner: CliRunner, tmp_path: Path) -> tuple[Party, str]:
    """out43's vendor: a dataset grid@1 of one batch of chat rollouts (the batch's digest)."""
    vendor, policy = Party(runner, tmp_path, "vendor"), tmp_path / "vendor-policy.toml"
    data = tmp_path / "w1.jsonl"
    data.write_text("".join(json.dumps({"episode_id": f"e{i}", "reward": 1.0, "messages": [
        {"role": "user", "content": f"q {i}"}]}) + "\n" for i in range(3)))  # fmt: skip
    for args in (["init"], ["key", "new", "vendor", "--no-encrypt"],
                 ["policy", "init", "--roles", "producer", "--producer", "vendor", "--out", policy],
                 ["policy", "set", policy, "--key", "vendor", "--yes"],
                 ["env", "register", "chat", "--version", "1", "--key", "vendor"]):
        vendor(*args)
    batch = vendor("record", data, "--env", "chat@1", "--policy", "m", "--key", "vendor")
    batch = batch.stdout.strip()
    vendor("dataset", "create", "grid", "--version", "1", "--split", "train", "--batch", batch,
           "--key", "vendor")  # fmt: skip
    return vendor, batch


def test_the_data_of_a_bundle_imported_before_without_them_are_taken_in_after_an_update(
    runner: CliRunner, tmp_path: Path
) -> None:
    """The vendor exports grid@1 twice at one tree, `--no-data` (to look at first) and whole;
    the buyer imports the first, then an update of the vendor's log (a new batch), then the
    whole bundle: `already imported at log index 4; nothing new recorded`, exit 0 (the lead's
    `earlier_import` return: this tree was accepted with this artifact), and its data are not
    stored: `verify grid@1` fails, `blob … is missing`. Without the update between, the same
    import stores them (the import path, idempotent, takes in the objects: verify passes)."""
    vendor, _batch = _vendor(runner, tmp_path)
    meta, whole = tmp_path / "grid-1-meta.tar.zst", tmp_path / "grid-1.tar.zst"
    vendor("export", "grid@1", "--no-data", "--out", meta)
    vendor("export", "grid@1", "--out", whole)
    size = json.loads(vendor("log", "info", "--json").stdout)["size"]
    vendor("env", "register", "chat", "--version", "2", "--key", "vendor")
    updates = tmp_path / "updates.tar.zst"
    vendor("export", "--updates-since", size, "--out", updates)
    buyer = Party(runner, tmp_path, "buyer")
    buyer.buys_from(vendor, tmp_path / "buyer-policy.toml")
    buyer("import", meta, "--key", "approver")
    buyer("import", updates, "--key", "approver")
    r = buyer("import", whole, "--key", "approver", code=None)
    assert r.exit_code != 0 or "already imported" not in r.stderr or buyer(
        "verify", "grid@1", code=None).exit_code == 0, r.stderr


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
    (vendor, batch), buyer = _vendor(runner, tmp_path), Party(runner, tmp_path, "buyer")
    old, updates = tmp_path / "grid-1.tar.zst", tmp_path / "updates.tar.zst"
    vendor("export", "grid@1", "--out", old)
    since = str(json.loads(vendor("log", "info", "--json").stdout)["size"])
    vendor("revoke", batch, "--reason", "bad batch", "--key", "vendor")
    vendor("export", "--updates-since", since, "--out", updates)
    buyer.buys_from(vendor, tmp_path / "buyer-policy.toml")
    for bundle in (old, updates):
        buyer("import", bundle, "--key", "approver")
    assert "revoked: bad batch" in buyer("verify", "grid@1", code=1).stderr  # (here: revoked)
    r = buyer("import", old, "--key", "approver", code=None)
    assert "already imported" in r.stderr, r.stderr  # (the lead's fix: no rollback)
    assert r.exit_code != 0 or "revoked" in r.stdout + r.stderr, r.output
    r = buyer("import", old, "--key", "approver", "--json", code=None)
    assert r.exit_code != 0 or "revoked" in r.stdout, r.stdout


_LIST_BOMB = (  # (874 bytes: one row, a list of 40,000,000 float64 zeros, zstd; written by
    # pq.write_table of pa.ListArray.from_arrays([0, n], np.zeros(n)), data_page_size=1 << 30)
    "UEFSMRUEFQoVHEwVAhUAEgAAKLUv/SAFKQAAAQAAAGUVABUSFSQsFQIVEBUGFQYcNgAoAWUYAWUREQAAACi1L/0gCUkA"
    "AAIAAAACAQECABUEFRAVIkwVAhUAEgAAKLUv/SAIQQAAAAAAAAAAAAAVABU0FUYsFYDokiYVEBUGFQYcGAgAAAAAAAAA"
    "ABgIAAAAAAAAAIAWACgIAAAAAAAAAAAYCAAAAAAAAACAEREAAAAotS/9IBrRAAAHAAAAA/7w55ImAQUAAACA6JImAwGA"
    "6JImABUEGVw1ABgGc2NoZW1hFQQAFQwlAhgKZXBpc29kZV9pZCUATBwAAAA1AhgDb2JzFQIVBkw8AAAANQQYBGxpc3QV"
    "AgAVCiUCGAdlbGVtZW50ABYCGRwZLCYAHBUMGTUABhAZGAplcGlzb2RlX2lkFQwWAhZyFpYBJkAmCBw2ACgBZRgBZRER"
    "ABksFQQVABUCABUAFRAVAgA8FgIZBhkmAAIAAAAmABwVChk1AAYQGTgDb2JzBGxpc3QHZWxlbWVudBUMFoDokiYW5AEW"
    "iAIm3AEmngEcGAgAAAAAAAAAABgIAAAAAAAAAIAWACgIAAAAAAAAAAAYCAAAAAAAAACAEREAGSwVBBUAFQIAFQAVEBUC"
    "ADwpJgL+55ImGUYAAACA6JImAAAAFtYCFgImCBaeAwAZHBgMQVJST1c6c2NoZW1hGKACLy8vLy85QUFBQUFRQUFBQUFB"
    "QUtBQXdBQmdBRkFBZ0FDZ0FBQUFBQkJBQU1BQUFBQ0FBSUFBQUFCQUFJQUFBQUJBQUFBQUlBQUFCd0FBQUFCQUFBQUtq"
    "Ly8vOEFBQUVNRkFBQUFCZ0FBQUFFQUFBQUFRQUFBQkFBQUFBREFBQUFiMkp6QUpULy8vL1EvLy8vQUFBQkF4QUFBQUFj"
    "QUFBQUJBQUFBQUFBQUFBRUFBQUFhWFJsYlFBQUJnQUlBQVlBQmdBQUFBQUFBZ0FRQUJRQUNBQUdBQWNBREFBQUFCQUFF"
    "QUFBQUFBQUFRVVFBQUFBSUFBQUFBUUFBQUFBQUFBQUNnQUFBR1Z3YVhOdlpHVmZhV1FBQUFRQUJBQUVBQUFBABggcGFy"
    "cXVldC1jcHAtYXJyb3cgdmVyc2lvbiAyNi4wLjEZLBwAABwAAACPAgAAUEFSMQ=="
)

_READ_BOMB = """
import base64, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # (a cap for this machine's sake)
from trajledger.ledger.rollouts.parquet_read import iter_parquet
path = sys.argv[1]
open(path, "wb").write(base64.b64decode(sys.argv[2]))
try:
    rows = sum(b.num_rows for b in iter_parquet(path, ["episode_id", "obs"]))
    print("read", rows)
except Exception as e:
    print(type(e).__name__, e)
"""


def test_a_list_of_numbers_declared_huge_is_refused_as_a_bomb(tmp_path: Path) -> None:
    """A row of a list<double> column holding 40,000,000 zeros is 874 bytes of Parquet
    (dictionary and run-length encoded, every page small once decompressed, so the page
    check passes); `iter_parquet` decoded it: 305 MiB of values, 1,066 MiB resident, 2 s.
    The file's footer states the column's 40,000,000 values. Ten such rows (or one of 2**31
    values) take more memory than most machines have. `MAX_ROW_BYTES` (256 MiB) and
    `MAX_DECODED_BYTES` bound strings and binary values only; the docstring's "fixed-width
    columns decode to at most their row count times their width" is not so of a list of
    them."""
    import subprocess
    import sys

    got = subprocess.run([sys.executable, "-c", _READ_BOMB, str(tmp_path / "bomb.parquet"),
                          "".join(_LIST_BOMB)], capture_output=True, text=True, timeout=600)
    assert got.stdout.startswith("BombError"), (got.stdout, got.stderr[-2000:])


_WRITE_UNEVEN = """
import sys, tempfile
from pathlib import Path
import numpy as np, pyarrow as pa
from trajledger.ledger.rollouts.parquet_io import write_steps_parquet
frames, width, narrow = 24, 1 << 20, 1000
rows = frames + narrow
values = np.random.default_rng(0).integers(0, 256, frames * width + narrow, dtype=np.uint8)
offsets = np.concatenate([np.arange(frames + 1) * width, frames * width + 1 + np.arange(narrow)])
obs = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))
columns = {"episode_id": ["e"] * rows, "step": np.arange(rows), "action": np.zeros(rows, int),
           "reward": np.zeros(rows), "terminated": np.arange(rows) == rows - 1,
           "truncated": np.zeros(rows, bool)}
steps = pa.table({"obs": obs, **{name: pa.array(v) for name, v in columns.items()}})
with tempfile.TemporaryDirectory() as d:
    write_steps_parquet([steps], Path(d) / "s.parquet", episodes_path=Path(d) / "e.parquet")
print(pa.default_memory_pool().max_memory() / (frames * width))
"""


def test_wide_frames_beside_narrow_steps_take_a_row_group_of_values_at_a_time() -> None:
    """frames43's test of `ROW_GROUP_VALUES` (24 frames of 1 MiB: the pool's peak 1.9 x the
    frames) with 1,000 steps of one value after the frames (an episode of images, then one of
    numbers, in one `obs` column of varying width: frames43 finding 2's case): `group_rows`
    takes the table's average, 25,166 values a row, so a row group of 170 rows holds all 24
    frames (25M values) and the peak is 11.5 x the frames (15.6 x with 20,000 steps), the peak
    frames43 finding 3 removed for frames alone."""
    import subprocess
    import sys

    got = subprocess.run([sys.executable, "-c", _WRITE_UNEVEN], capture_output=True, text=True,
                         check=True, timeout=600)
    assert float(got.stdout) < 4, got.stdout  # (frames alone: 1.9)

