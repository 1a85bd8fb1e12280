"""Error hierarchy shared by every layer of trajledger.

Scope: exception types only. This module imports nothing, so any layer (and a third party
auditing ``verify/`` alone) can use it.

Every message names the object, then what was observed against what was expected, for example
``inclusion proof for leaf 5 (size 8) has 3 hashes, want 4``. Errors carry their evidence as
attributes where a caller may want it.
"""

from __future__ import annotations

__all__ = [
    "ConsistencyError",
    "DigestMismatchError",
    "FormatError",
    "PolicyError",
    "ProofError",
    "ProvenanceError",
    "SignatureError",
    "VerificationError",
]


class ProvenanceError(Exception):
    """Root of every error trajledger raises on purpose."""


class FormatError(ProvenanceError, ValueError):
    """Input is malformed: it does not parse as the format it claims to be."""


class VerificationError(ProvenanceError):
    """Input parsed, but a check on it failed."""


class SignatureError(VerificationError):
    """A signature is missing, invalid, made by an unknown key, or below threshold."""


class DigestMismatchError(VerificationError):
    """Bytes do not hash to the digest that names them.

    Attributes:
        subject: what was hashed (a path or a name).
        expected: the digest the evidence claims.
        observed: the digest of the bytes present, or None when the bytes are absent.
    """

    def __init__(
        self, message: str, *, subject: str = "", expected: str = "", observed: str | None = None
    ) -> None:
        super().__init__(message)
        self.subject = subject
        self.expected = expected
        self.observed = observed


class ProofError(VerificationError):
    """A Merkle inclusion or consistency proof does not verify."""


class ConsistencyError(VerificationError):
    """Two views of a log cannot both be honest (a fork or a rollback).

    Attributes:
        old: the older checkpoint (text or object) involved, when known.
        new: the newer checkpoint involved, when known.
        proof: the consistency proof that failed, when there was one.
    """

    def __init__(
        self, message: str, *, old: object = None, new: object = None, proof: object = None
    ) -> None:
        super().__init__(message)
        self.old = old
        self.new = new
        self.proof = proof


class PolicyError(VerificationError):
    """Evidence is valid, but the trust policy does not accept it."""


def refuse_unknown(given: set[str], allowed: set[str] | frozenset[str], message: str) -> None:
    """A policy is read in full or refused: a name it does not know is an error, with the
    known name it most resembles (a misspelling) or the names it knows."""
    unknown = sorted(given - allowed)
    if not unknown:
        return
    import difflib

    hints = [f"{u} (did you mean {c[0]}?)" if (c := difflib.get_close_matches(u, allowed, 1))
             else u for u in unknown]
    raise FormatError(f"{message} {', '.join(hints)}; known: {', '.join(sorted(allowed))}")
