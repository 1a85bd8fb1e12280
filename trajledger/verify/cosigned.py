"""The message of a c2sp.org/tlog-cosignature v1 signature (type 0x04, a witness's): loaded
for a witness's key.

Scope: `cosignature_message` (what a witness signs), `signed_timestamp` (the time a
cosignature states) and `cosigned_message` (what `verify.note.Verifier.verify` checks a type
0x04 signature against). It imports nothing of the package: ``verify.note`` loads it when a
cosignature key verifies a signature.
Non-scope: the signed-note format and Ed25519 (``verify.note``), counting witnesses against a
threshold (``verify.cosignatures``).
Spec: c2sp.org/tlog-cosignature (Ed25519 signed message).
"""

from __future__ import annotations

import struct

__all__ = ["cosignature_message", "cosigned_message", "signed_timestamp"]

_MAX_TIMESTAMP = (1 << 63) - 1
_U64 = struct.Struct(">Q")


def cosignature_message(body: bytes, timestamp: int) -> bytes:
    r"""Return the message a tlog-cosignature v1 (Ed25519) witness signs.

    Args:
        body: the checkpoint note text, including its final newline.
        timestamp: POSIX seconds, 0..2**63-1.

    Returns:
        ``"cosignature/v1\ntime <timestamp>\n" || body``.

    Raises:
        ValueError: the timestamp is out of range.
    """
    if not 0 <= timestamp <= _MAX_TIMESTAMP:
        raise ValueError(f"cosignature timestamp {timestamp}, want 0..2**63-1")
    return b"cosignature/v1\ntime " + str(timestamp).encode() + b"\n" + body


def signed_timestamp(sig: bytes) -> int | None:
    """The POSIX timestamp a cosignature/v1 signature ``sig`` (``u64 timestamp || Ed25519
    signature``, the bytes after the key ID) states; None when ``sig`` is not 72 bytes."""
    return int(_U64.unpack_from(sig)[0]) if len(sig) == 8 + 64 else None


def cosigned_message(msg: bytes, sig: bytes) -> tuple[bytes, bytes] | None:
    """What a cosignature/v1 signature ``sig`` on the note text ``msg`` signs, and its Ed25519
    signature; None when ``sig`` cannot be one (not 72 bytes, or a timestamp above
    2**63 - 1)."""
    timestamp = signed_timestamp(sig)
    if timestamp is None or timestamp > _MAX_TIMESTAMP:
        return None
    return cosignature_message(msg, timestamp), sig[8:]
