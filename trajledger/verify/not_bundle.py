"""What a file given as a bundle that is no zstd frame at all is, and what is wanted instead
(out52: ``python -m trajledger.verify FILE`` and ``trajledger verify FILE`` said the magic
number alone). Loaded on that failure only, off the verifier core's path."""

from __future__ import annotations

__all__ = ["not_a_bundle_line"]


def not_a_bundle_line(what: str, head: bytes) -> str:
    """The one line for ``what`` (``bundle NAME``) whose first bytes ``head`` are not zstd's
    magic number."""
    return (f"{what}: not zstd-compressed (magic {head[:4].hex() or 'none'}): not a bundle; "
            "a bundle is the .tar.zst file 'trajledger export' writes, verified as it was sent "
            "(not unpacked or compressed again); rollout files are recorded with 'trajledger "
            "record', files signed with 'trajledger sign' by 'trajledger verify FILE... "
            "--envelope E --pubkey K'")
