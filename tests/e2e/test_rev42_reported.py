"""Findings of rev42 in files other helpers own, as failing tests for the lead or the owner
(strict xfail: each passes once its finding is fixed). Reproducers are in /tmp/rev42-s/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.xfail(strict=True, reason=(
    "rev42 finding 1: a footer that states 1 value for a list chunk whose page holds 40M is not "
    "scanned (_list_rows trusts num_values) and pyarrow decodes them all: 900 MiB resident "
    "(rollouts/parquet_read.py, pq45)"))
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


@pytest.mark.xfail(strict=True, reason=(
    "rev42 finding 2: Arrow reads 100 bytes past a column chunk written by parquet-mr < 1.2.9 "
    "(PARQUET-816); the level scan stops at total_compressed_size, so a data page there is "
    "decoded unseen: 900 MiB resident (rollouts/parquet_read.py, pq45)"))
def test_a_page_past_the_chunks_stated_end_is_scanned_as_arrow_reads_it(tmp_path: Path) -> None:
    """The footer states the chunk's 40,000,000 values (so the scan runs), its
    `total_compressed_size` ends after the dictionary page, and `created_by` names parquet-mr
    1.2.8: Arrow's `ComputeColumnChunkRange` adds up to 100 bytes for such writers (their
    dictionary page header was not counted) and reads the data page lying there; `_check_pages`
    and `_longest_row` read to the stated end only, see no data page, and let it pass."""
    assert _read(tmp_path, _PAST_THE_CHUNK).startswith("BombError")
