"""Leftovers of a writer in another process-id namespace of this host (``ledger.fs``).

Found by review (issue 21): containers that share a host name (``--network host``) and a
ledger volume each have pids of their own. A temp name carried the host name's hash and the
writer's pid; a writer in the other container found no such pid in its own namespace, judged
the live writer's import staging stale and swept it ("cannot move into the store: No such file
or directory" for the importer). The host tag now names the pid namespace too, so a name from
another namespace is judged as another host's: by its age.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trajledger import Ledger
from trajledger.ledger import fs
from trajledger.ledger.log import EntrySpec

INNER = """
import os, sys, time
for _ in range(300):  # pids of its own, past the few the namespace starts with
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
child = os.fork()  # the writer: not pid 1, which is alive in every namespace
if child:
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
from pathlib import Path
from trajledger.ledger.fs import temp_dir
with temp_dir(Path(sys.argv[1])) as staging:
    (Path(staging) / "object").write_bytes(b"staged")
    print(staging, os.getpid(), flush=True)
    sys.stdin.read()  # alive until told
"""


def _in_new_pid_namespace(tmp: Path) -> subprocess.Popen[str]:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1)")
    probe = subprocess.run([unshare, "--pid", "--fork", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a pid namespace here: {probe.stderr.decode().strip()}")
    return subprocess.Popen([unshare, "--pid", "--fork", sys.executable, "-c", INNER, str(tmp)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_a_live_writer_in_another_pid_namespace_keeps_its_staging(home: Path) -> None:
    ledger = Ledger.open(home)
    proc = _in_new_pid_namespace(home / "tmp")
    try:
        assert proc.stdout is not None
        staging, pid = proc.stdout.readline().split()
        if fs._pid_alive(int(pid)):
            pytest.skip(f"pid {pid} of the other namespace is also alive here")
        assert not fs.is_stale(Path(staging))
        # A writer here sweeps leftovers under the log's lock before its first append.
        d = "sha256:" + "ab" * 32
        ledger.log.append([EntrySpec("files", d, d, ("0" * 64,))])
        assert (Path(staging) / "object").read_bytes() == b"staged"
    finally:
        proc.communicate("", timeout=60)
    assert proc.returncode == 0
    assert not Path(staging).exists()  # its owner removed it


def test_the_host_tag_names_the_pid_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    here = fs._host_tag()
    real = os.readlink
    monkeypatch.setattr(fs.os, "readlink", lambda p: "pid:[1]" if p == "/proc/self/ns/pid"
                        else real(p))
    assert fs._host_tag() != here
