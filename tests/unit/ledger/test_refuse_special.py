"""`fs.refuse_special`, called just before an output the user named is renamed into place (the
lead, eighteenth round): a device, FIFO or socket there is refused; a file, a link (replaced
itself by the rename) or nothing passes. `fs.write_file_atomic` replaces a special file, as a
cache's is meant to be (tests/e2e/test_special_files.py)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from trajledger.ledger.fs import refuse_special, write_file_atomic


def test_a_fifo_and_a_socket_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="is a FIFO, not a file: not replaced"):
        refuse_special(fifo)
    where = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(where))
        with pytest.raises(OSError, match="is a socket, not a file: not replaced"):
            refuse_special(where)


def test_a_file_a_link_and_nothing_pass(tmp_path: Path) -> None:
    path, target, link = tmp_path / "f", tmp_path / "target", tmp_path / "link"
    path.write_bytes(b"old")
    target.write_bytes(b"kept")
    link.symlink_to(target)
    for p in (path, link, tmp_path / "none", tmp_path / "none" / "deeper"):
        refuse_special(p)
    write_file_atomic(link, b"new")  # the link replaced, its target untouched
    assert not link.is_symlink() and target.read_bytes() == b"kept"
