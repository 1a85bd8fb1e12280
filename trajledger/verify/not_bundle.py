"""What a file given as a bundle that is no zstd frame at all is, and what is wanted instead
(out52: ``python -m trajledger.verify FILE`` and ``trajledger verify FILE`` said the magic
number alone); a file that ends within its first bytes, as a download or a copy stopped early
leaves it (out55: it read ``not a bundle``, or the zstd library's words). Loaded on that
failure only, off the verifier core's path."""

from __future__ import annotations

__all__ = ["HEAD", "cut_short_line", "not_a_bundle_line"]

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
HEAD = 18
"""The most bytes a zstd frame header (magic number included) takes: the callers' ``head``."""


def cut_short_line(what: str, head: bytes) -> str | None:
    """The one line for ``what`` (``bundle NAME``), a file whose first (at most `HEAD`)
    bytes are ``head``, when it ends there, within what a zstd frame starts with (empty, a
    prefix of the magic number, a frame header cut off); None otherwise."""
    if len(head) >= HEAD or not ZSTD_MAGIC.startswith(head[:4]):
        return None
    where = ("it is empty" if not head else "within the zstd frame's magic number"
             if len(head) < len(ZSTD_MAGIC) else "within the zstd frame's header")
    return (f"{what}: cut short: {len(head)} byte(s), {where} (a download or a copy stopped "
            "early): get it again from its sender, as 'trajledger export' wrote it")


def not_a_bundle_line(what: str, head: bytes, error: Exception | None = None) -> str:
    """The one line for ``what`` (``bundle NAME``) whose first (at most `HEAD`) bytes ``head``
    are not zstd's magic number, or are and ``error`` says they hold no frame header."""
    if line := cut_short_line(what, head):
        return line
    if error is not None and head[:4] == ZSTD_MAGIC:
        return f"{what}: corrupt zstd frame header: {error}: get it again from its sender"
    return (f"{what}: not zstd-compressed (magic {head[:4].hex() or 'none'}): not a bundle; "
            "a bundle is the .tar.zst file 'trajledger export' writes, verified as it was sent "
            "(not unpacked or compressed again); rollout files are recorded with 'trajledger "
            "record', files signed with 'trajledger sign' by 'trajledger verify FILE... "
            "--envelope E --pubkey K'")
