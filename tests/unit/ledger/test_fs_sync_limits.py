"""The durability pass over many files (`ledger.fs.sync_paths`, an import's staged objects) under
a small limit of open files.

Found by review (issue 21): the pass held up to 256 descriptors open at once whatever the
process's limit, so with macOS's default soft limit (256, ``ulimit -n``), or a Linux shell that
set one as low, an import of a bundle of a few hundred objects failed with "Too many open
files" (the sync pass runs on a thread beside the verification, which has files of its own
open). The pass now holds at most a quarter of the soft limit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

CHILD = textwrap.dedent("""
    import resource, sys
    from pathlib import Path
    from trajledger.ledger.fs import sync_paths, sync_paths_ahead
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    files = sorted(Path(sys.argv[1]).iterdir())
    held = [open(f, "rb") for f in files[:100]]  # what the rest of the command has open
    sync_paths(files)
    sync_paths_ahead(files)()
    print("synced", len(files))
""")


def test_the_sync_pass_stays_within_a_small_open_file_limit(tmp_path: Path) -> None:
    staged = tmp_path / "staged"
    staged.mkdir()
    for n in range(600):
        (staged / f"{n:04}").write_bytes(b"%d" % n)
    r = subprocess.run([sys.executable, "-c", CHILD, str(staged)], capture_output=True,
                       text=True, timeout=300, check=False)
    assert (r.returncode, r.stdout, r.stderr[-500:]) == (0, "synced 600\n", "")


def test_a_pass_ahead_that_is_abandoned_stops_after_the_batch_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused import abandons the data pass it started ahead (its objects are not kept):
    the batch in flight finishes (no descriptor is closed under its fsync), no other starts,
    so the refusal waits for one batch, not for every staged object."""
    import trajledger.ledger.fs as fs

    monkeypatch.setattr(fs, "_sync_batch", lambda: 2)
    in_flight, release = threading.Event(), threading.Event()
    synced: list[int] = []

    def fsync(fd: int) -> None:
        synced.append(fd)
        in_flight.set()
        release.wait(30)

    monkeypatch.setattr(os, "fsync", fsync)
    files = []
    for n in range(10):
        (f := tmp_path / f"{n}").write_bytes(b"%d" % n)
        files.append(f)
    stop = threading.Event()
    wait = fs.sync_paths_ahead(files, stop)
    assert in_flight.wait(30)
    stop.set()
    release.set()
    wait()
    assert len(synced) == 2
