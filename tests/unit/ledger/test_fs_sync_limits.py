"""The durability pass over many files (`ledger.fs.sync_paths`, an import's staged objects) under
a small limit of open files.

Found by review (issue 21): the pass held up to 256 descriptors open at once whatever the
process's limit, so with macOS's default soft limit (256, ``ulimit -n``), or a Linux shell that
set one as low, an import of a bundle of a few hundred objects failed with "Too many open
files" (the sync pass runs on a thread beside the verification, which has files of its own
open). The pass now holds at most a quarter of the soft limit.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

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
