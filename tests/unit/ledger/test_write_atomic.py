"""`fs.write_file_atomic` never renames over a device, FIFO or socket (the lead, eighteenth
round): hour33 refuses one given as ``--out`` where the option is parsed; one put at the path
after that (or a path no option parsed) was still replaced by a regular file, which as root
replaces the system's ``/dev/null``."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from trajledger.ledger.fs import write_file_atomic


def test_a_fifo_is_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="is a device, FIFO or socket, not a file: not replaced"):
        write_file_atomic(fifo, b"{}\n")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no temp file left


def test_a_socket_is_not_replaced(tmp_path: Path) -> None:
    where = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(where))
        with pytest.raises(OSError, match="not replaced"):
            write_file_atomic(where, b"x", durable=False)
        assert stat.S_ISSOCK(os.lstat(where).st_mode)


def test_a_file_and_a_link_are_replaced_as_before(tmp_path: Path) -> None:
    """A regular file is replaced; a link is replaced itself (its target untouched)."""
    path, target, link = tmp_path / "f", tmp_path / "target", tmp_path / "link"
    path.write_bytes(b"old")
    target.write_bytes(b"kept")
    link.symlink_to(target)
    write_file_atomic(path, b"new")
    write_file_atomic(link, b"new")
    assert path.read_bytes() == b"new" and link.read_bytes() == b"new"
    assert not link.is_symlink() and target.read_bytes() == b"kept"
