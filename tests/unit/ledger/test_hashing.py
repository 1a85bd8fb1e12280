"""ledger.hashing: copying a stream while hashing it."""

from __future__ import annotations

import io

from trajledger.ledger.hashing import copy_hashing
from trajledger.verify.digest import digest_bytes


def test_copy_hashing_copies_and_hashes_in_one_pass() -> None:
    data = bytes(range(256)) * 5000
    out = io.BytesIO()
    assert copy_hashing(io.BytesIO(data).read, out.write, chunk=4096) == (
        digest_bytes(data),
        len(data),
    )
    assert out.getvalue() == data
    assert copy_hashing(io.BytesIO(b"").read, out.write) == (digest_bytes(b""), 0)
