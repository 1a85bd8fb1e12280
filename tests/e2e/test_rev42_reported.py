"""Findings of rev42 in files other helpers owned (docs/SECURITY.md, "thirtieth round
(rev42)"): each was a strict xfail, failing for the reason it named, until its fix landed (1, 2:
pq45; 3: upd45; 4: pqrev), and now checks the fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from test_out43_reported import Party

_READ = """
import base64, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # (a cap for this machine's sake)
from trajledger.ledger.rollouts.parquet_read import iter_parquet
path = sys.argv[1]
open(path, "wb").write(base64.b64decode(sys.argv[2]))
try:
    rows = sum(b.num_rows for b in iter_parquet(path))
    print("read", rows, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10, "MiB")
except Exception as e:
    print(type(e).__name__, e)
"""


def _read(tmp_path: Path, lines: tuple[str, ...]) -> str:
    got = subprocess.run([sys.executable, "-c", _READ, str(tmp_path / "bomb.parquet"),
                          "".join(lines)], capture_output=True, text=True, timeout=600)
    return got.stdout + got.stderr[-2000:]


_FOOTER_UNDERSTATES = (  # (538 bytes: rev41's bomb, one row of a list<double> of 40,000,000
    # zeros in one zstd page of RLE levels and dictionary indices, its chunk's num_values in
    # the footer set to 1: /tmp/rev42-s/mk1.py)
    "UEFSMRUEFRAVIkwVAhUAEgAAKLUv/SAIQQAAAAAAAAAAAAAVABU0FUYsFYDokiYVEBUGFQYcAAAAKLUv/SAa0QAABwAA"
    "AAP+8OeSJgEFAAAAgOiSJgMBgOiSJgAVBBlMNQAYBnNjaGVtYRUCADUCGANvYnMVAhUGTDwAAAA1BBgEbGlzdBUCABUK"
    "JQIYB2VsZW1lbnQAFgIZHBkcJgAcFQoZNQAGEBk4A29icwRsaXN0B2VsZW1lbnQVDBYCFowBFrABJkYmCCksFQQVABUC"
    "ABUAFRAVAgA8KSYC/ueSJhlGAAAAgOiSJgAAABaMARYCJggWsAEAGRwYDEFSUk9XOnNjaGVtYRjgAS8vLy8vNkFBQUFB"
    "UUFBQUFBQUFLQUF3QUJnQUZBQWdBQ2dBQUFBQUJCQUFNQUFBQUNBQUlBQUFBQkFBSUFBQUFCQUFBQUFFQUFBQUVBQUFB"
    "MVAvLy93QUFBUXdVQUFBQUhBQUFBQVFBQUFBQkFBQUFKQUFBQUFNQUFBQnZZbk1BQkFBRUFBUUFBQUFRQUJRQUNBQUdB"
    "QWNBREFBQUFCQUFFQUFBQUFBQUFRTVFBQUFBSEFBQUFBUUFBQUFBQUFBQUJBQUFBR2wwWlcwQUFBWUFDQUFHQUFZQUFB"
    "QUFBQUlBABggcGFycXVldC1jcHAtYXJyb3cgdmVyc2lvbiAyNi4wLjEZHBwAAAC2AQAAUEFSMQ=="
)


def test_a_list_chunk_whose_footer_understates_its_values_is_refused_as_a_bomb(
    tmp_path: Path,
) -> None:
    """The lead's fix 1 of the twenty-ninth round scans a row group's repetition levels only
    when its footer states over `MAX_ROW_BYTES` of values under lists. Arrow reads pages while
    the values their headers state are fewer than the chunk's `num_values`, so a footer saying
    1 lets the first data page hold any count (its header's, up to 2**31): the 538-byte file
    decodes to 305 MiB of zeros, about 900 MiB resident; `trajledger record` of such a step
    file (2,196 bytes) peaks at 1,213 MiB before the schema refuses the tensor (109 MiB with
    the true count: a `BombError`)."""
    assert _read(tmp_path, _FOOTER_UNDERSTATES).startswith("BombError")


_PAST_THE_CHUNK = (  # (301 bytes: the same row, the footer's num_values true (40,000,000), the
    # chunk's total_compressed_size covering its dictionary page only, created_by "parquet-mr
    # version 1.2.8": /tmp/rev42-s/mk2.py)
    "UEFSMRUEFRAVIkwVAhUAEgAAKLUv/SAIQQAAAAAAAAAAAAAVABU0FUYsFYDokiYVEBUGFQYcAAAAKLUv/SAa0QAABwAA"
    "AAP+8OeSJgEFAAAAgOiSJgMBgOiSJgAVBBlMNQAYBnNjaGVtYRUCADUCGANvYnMVAhUGTDwAAAA1BBgEbGlzdBUCABUK"
    "JQIYB2VsZW1lbnQAFgIZHBkcJgAcFQoZNQAGEBk4A29icwRsaXN0B2VsZW1lbnQVDBaA6JImFowBFj4mRiYIKSwVBBUA"
    "FQIAFQAVEBUCADwpJgL+55ImGUYAAACA6JImAAAAFowBFgImCBawAQAoJXBhcnF1ZXQtbXIgdmVyc2lvbiAxLjIuOCAo"
    "YnVpbGQgYWJjZCkZHBwAAADJAAAAUEFSMQ=="
)


def test_a_page_past_the_chunks_stated_end_is_scanned_as_arrow_reads_it(tmp_path: Path) -> None:
    """The footer states the chunk's 40,000,000 values (so the scan runs), its
    `total_compressed_size` ends after the dictionary page, and `created_by` names parquet-mr
    1.2.8: Arrow's `ComputeColumnChunkRange` adds up to 100 bytes for such writers (their
    dictionary page header was not counted) and reads the data page lying there; `_check_pages`
    and `_longest_row` read to the stated end only, see no data page, and let it pass."""
    assert _read(tmp_path, _PAST_THE_CHUNK).startswith("BombError")


def _blobs(party: Party) -> set[str]:
    return {p.name for p in (party.home / "objects").rglob("*") if p.is_file()}


def test_an_older_bundle_imported_again_after_an_update_stores_no_erased_file(
    runner: CliRunner, tmp_path: Path
) -> None:
    """The buyer imports grid@1 whole, erases its batch (consent: 2 files deleted), takes an
    update of the vendor's log in, then imports the same bundle again: `already imported`,
    exit 0, `--json` `ok` true, `leftOut` and `heldHere` empty, and both erased files are in
    the store again, while `verify grid@1` says `1 erased: data deleted`. Without the update
    between, the same import leaves them out (`NOTE: erased here: ...`, `leftOut` 2).
    `update_judge._erased_here` reads only erasures whose subject's manifest the update
    carries; the lead's fix 5 of the twenty-ninth round hands `store_objects` the objects the
    store lacks, and the erased batch's manifest is not among them (an erasure keeps it)."""
    vendor, buyer = Party(runner, tmp_path, "vendor"), Party(runner, tmp_path, "buyer")
    policy = tmp_path / "vendor-policy.toml"
    for args in (["init"], ["key", "new", "vendor", "--no-encrypt"],
                 ["policy", "init", "--roles", "producer", "--producer", "vendor", "--out", policy],
                 ["policy", "set", policy, "--key", "vendor", "--yes"],
                 ["env", "register", "chat", "--version", "1", "--key", "vendor"]):
        vendor(*args)

    def batch(name: str) -> str:
        data = tmp_path / f"{name}.jsonl"
        data.write_text("".join(json.dumps({"episode_id": f"{name}{i}", "reward": 1.0,
                                            "messages": [{"role": "user", "content": f"q {i}"}]})
                                + "\n" for i in range(3)))
        return str(vendor("record", data, "--env", "chat@1", "--policy", "m", "--key",
                          "vendor").stdout.strip())

    b1 = batch("w1")
    vendor("dataset", "create", "grid", "--version", "1", "--split", "train", "--batch", b1,
           "--key", "vendor")  # fmt: skip
    full, updates = tmp_path / "grid-1.tar.zst", tmp_path / "updates.tar.zst"
    vendor("export", "grid@1", "--out", full)
    size = json.loads(vendor("log", "info", "--json").stdout)["size"]
    batch("w2")
    vendor("export", "--updates-since", size, "--out", updates)
    buyer.buys_from(vendor, tmp_path / "buyer-policy.toml")
    buyer("import", full, "--key", "approver")
    held = _blobs(buyer)
    buyer("erase", b1, "--key", "approver", "--reason", "consent")
    erased = held - _blobs(buyer)
    assert len(erased) == 2
    buyer("import", updates, "--key", "approver")
    doc = json.loads(buyer("import", full, "--key", "approver", "--json").stdout)
    assert not erased & _blobs(buyer), "the erased files are stored again"
    assert doc["import"]["leftOut"], doc


_ROW_GROUPS = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # (a cap for this machine's sake)
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from trajledger.ledger.rollouts.parquet_read import iter_parquet
n = 7_000_000  # 56 MB of zeros a row group: its footer states under MAX_ROW_BYTES, not scanned
obs = pa.ListArray.from_arrays(pa.array(np.array([0, n], np.int32)), pa.array(np.zeros(n)))
t = pa.table({"episode": pa.array([0], pa.int64()), "obs": obs})
with pq.ParquetWriter(sys.argv[1], t.schema, compression="zstd", data_page_size=1 << 30) as w:
    for _ in range(5):
        w.write_table(t)
print(max(b.column("obs").values.nbytes for b in iter_parquet(sys.argv[1])))
"""


def test_row_groups_each_under_the_row_limit_are_not_read_as_one_batch(tmp_path: Path) -> None:
    """`_list_rows` judges each row group by its footer: one stating at most `MAX_ROW_BYTES`
    of values under lists is not scanned and has no cap. When no string or binary column is
    read, `_decoded` reads the file with `iter_batches(batch_size=65536)`, whose batches run
    across row groups: five row groups of one row of 7M zeros each (56 MB a group) come as one
    batch of 280 MB, over `MAX_ROW_BYTES`; any number of such row groups make one batch of up
    to 65,536 rows. A 2,444-byte file of four groups of 30M zeros: one batch of 929 MiB,
    2,031 MiB resident; `trajledger record` of such a step file (int episode ids, 6,456
    bytes): 2,438 MiB peak (with string ids, read a row group a batch: 1,254 MiB)."""
    got = subprocess.run([sys.executable, "-c", _ROW_GROUPS, str(tmp_path / "groups.parquet")],
                         capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    assert int(got.stdout) <= 256 << 20, got.stdout  # (MAX_ROW_BYTES: one row group's)
