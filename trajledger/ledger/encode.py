"""The write side's encodings of what ``verify/`` parses: what the ledger writes, the verifier
reads back with its strict parsers, and nothing a verification needs (so ``verify/`` keeps only
the reading half).

Scope: a bundle's ``proofs/<n>.consistency`` and ``.range`` members (read by
``verify.consistency.parse_consistency_proof``).
Non-scope: signing (``ledger.signing``), what is written where (``ledger.exchange``,
``ledger.log``).
"""

from __future__ import annotations

import base64

__all__ = ["consistency_proof_bytes"]


def consistency_proof_bytes(proof: list[bytes]) -> bytes:
    """A ``proofs/<n>.consistency`` member: one standard base64 hash per line, each ending LF."""
    return b"".join(base64.b64encode(h) + b"\n" for h in proof)
