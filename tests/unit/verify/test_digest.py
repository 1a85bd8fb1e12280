"""Digest strings and file hashing."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from trajledger.verify.digest import (
    CHUNK,
    DIGEST_PREFIX,
    digest_bytes,
    hash_file,
    parse_digest,
    read_buffer,
    sha256_hex,
)
from trajledger.verify.errors import FormatError
from trajledger.verify.tree import hash_files

# FIPS 180-2 known answers.
EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_known_answers() -> None:
    assert sha256_hex(b"") == EMPTY
    assert digest_bytes(b"abc") == "sha256:" + ABC
    assert DIGEST_PREFIX == "sha256:"


def test_parse_digest() -> None:
    assert parse_digest("sha256:" + ABC) == ABC


@pytest.mark.parametrize(
    "value",
    [
        ABC,
        "sha256:" + ABC.upper(),
        "SHA256:" + ABC,
        "sha256:" + ABC[:-1],
        "sha256:" + ABC + "0",
        "sha512:" + ABC,
        "sha256: " + ABC,
        "sha256:" + ABC[:-1] + "g",
        "sha256:" + ABC + "\n",
        None,
        b"sha256:" + ABC.encode(),
    ],
)
def test_parse_digest_refuses(value: object) -> None:
    with pytest.raises(FormatError, match=r"^d: .* is not of the form sha256:<64 lowercase hex>$"):
        parse_digest(value, "d")


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 7])
def test_hash_file(tmp_path: Path, size: int) -> None:
    data = bytes(i % 251 for i in range(size))
    p = tmp_path / "f"
    p.write_bytes(data)
    got = hash_file(p)
    assert (got.size, got.sha256) == (size, hashlib.sha256(data).hexdigest())
    assert got.digest == "sha256:" + got.sha256
    assert got.path == p


def test_hash_file_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        hash_file(tmp_path / "nope")


def test_hash_files_keeps_input_order_and_reports_progress(tmp_path: Path) -> None:
    paths = []
    for i in range(20):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"x" * (i * 1000))
        paths.append(p)
    done = []
    got = list(hash_files(reversed(paths), workers=4, on_done=done.append))
    assert [g.path for g in got] == list(reversed(paths))
    assert done == got
    assert [g.sha256 for g in got] == [
        hashlib.sha256(b"x" * (i * 1000)).hexdigest() for i in reversed(range(20))
    ]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_child_reads_into_a_buffer_of_its_own(tmp_path: Path) -> None:
    """The read buffer this thread made before a fork is the child's copy, not shared memory:
    `ledger.rehash`'s workers hash their files at once, and a shared buffer mixed their bytes
    (a sound blob reported as tampered)."""
    p = tmp_path / "f"
    p.write_bytes(b"c" * 4096)
    _, view = read_buffer()
    view[:4096] = b"p" * 4096
    pid = os.fork()
    if pid == 0:  # the child: reads its file into the buffer, as a worker does
        try:
            hash_file(p)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert bytes(view[:4096]) == b"p" * 4096
