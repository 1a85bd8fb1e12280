"""in-toto Statement v1: strict parsing and the checks a verifier makes on it.

Scope: the Statement layer of the in-toto attestation framework
(github.com/in-toto/attestation, spec/v1/statement.md): ``_type``, ``subject``,
``predicateType``, ``predicate``. trajledger requires a name and a ``sha256`` digest on every
subject.
Non-scope: signatures (dsse.py) and predicate contents (each kind's own checks).
Spec: schemas/SPEC.md section "Statement".
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .digest import HEX64
from .dsse import INTOTO_PAYLOAD_TYPE, Envelope, verify_envelope
from .errors import DigestMismatchError, FormatError, PolicyError
from .keys import PublicKey
from .strict_json import load_object

__all__ = [
    "STATEMENT_TYPE",
    "Statement",
    "Subject",
    "VerifiedStatement",
    "unsigned_statement",
    "verify_statement",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
_KNOWN = frozenset(("_type", "subject", "predicateType", "predicate"))


@dataclass(frozen=True)
class Subject:
    """One statement subject: a name and its SHA-256 (64 lowercase hex); its other members (an
    in-toto ResourceDescriptor's ``uri``, ``annotations``, other digests) kept verbatim."""

    name: str
    sha256: str
    unrecognized: Mapping[str, Any] = field(default_factory=dict, kw_only=True, compare=False,
                                            repr=False)

    @property
    def digest(self) -> str:
        """The ``sha256:<hex>`` digest string."""
        return "sha256:" + self.sha256


@dataclass(frozen=True)
class Statement:
    """A parsed in-toto Statement v1. Build with `from_bytes`.

    Attributes:
        subjects: at least one subject, names unique.
        predicate_type: the predicateType URI.
        predicate: the predicate object (parsed, never re-serialised for verification).
        unrecognized: members other than those four, kept verbatim (schemas/SPEC.md, "Unknown
            fields": statements accept them, as in-toto does).
    """

    subjects: tuple[Subject, ...]
    predicate_type: str
    predicate: dict[str, Any]
    unrecognized: Mapping[str, Any] = field(default_factory=dict, kw_only=True, compare=False,
                                            repr=False)

    @classmethod
    def from_bytes(cls, payload: bytes, what: str = "statement") -> Statement:
        """Parse a statement strictly.

        Raises:
            FormatError: malformed JSON, duplicate keys, wrong ``_type``, missing or ill-typed
                fields, a subject without a name or a ``sha256`` digest, duplicate subject names.
        """
        obj = load_object(payload, what)
        if obj.get("_type") != STATEMENT_TYPE:
            raise FormatError(f"{what}: _type is {obj.get('_type')!r}, want {STATEMENT_TYPE!r}")
        raw_subjects = obj.get("subject")
        if not isinstance(raw_subjects, list) or not raw_subjects:
            raise FormatError(f"{what}: subject must be a non-empty list")
        subjects: list[Subject] = []
        seen: set[str] = set()
        for i, raw in enumerate(raw_subjects):
            if not isinstance(raw, dict):
                raise FormatError(f"{what}: subject {i} is not an object")
            name = raw.get("name")
            if not isinstance(name, str) or not name:
                raise FormatError(f"{what}: subject {i} has no name")
            if name in seen:
                raise FormatError(f"{what}: subject name {name!r} appears twice")
            seen.add(name)
            digest = raw.get("digest")
            if not isinstance(digest, dict) or not isinstance(digest.get("sha256"), str):
                raise FormatError(f"{what}: subject {name!r} has no sha256 digest")
            if not HEX64.fullmatch(digest["sha256"]):
                raise FormatError(
                    f"{what}: subject {name!r} sha256 {digest['sha256']!r} is not 64 lowercase hex"
                )
            rest = {} if len(raw) == 2 and len(digest) == 1 else {  # (a name and a sha256)
                k: v for k, v in (raw | {"digest": {
                    k: v for k, v in digest.items() if k != "sha256"}}).items()
                if v and k != "name"}
            subjects.append(Subject(name, digest["sha256"], unrecognized=rest))
        predicate_type = obj.get("predicateType")
        if not isinstance(predicate_type, str) or not predicate_type:
            raise FormatError(f"{what}: predicateType must be a non-empty string")
        predicate = obj.get("predicate", {})
        if not isinstance(predicate, dict):
            raise FormatError(f"{what}: predicate must be an object")
        return cls(tuple(subjects), predicate_type, predicate, unrecognized={}
                   if obj.keys() <= _KNOWN else {k: v for k, v in obj.items() if k not in _KNOWN})

    @property
    def identity(self) -> Subject:
        """The first subject: the artifact the statement is about (the log entry's subject).
        Later subjects (a checkpoint's model files) describe parts of it."""
        return self.subjects[0]

    def check_identity(self, digest: str, what: str = "statement") -> None:
        """Check the first subject is ``digest``.

        Raises:
            DigestMismatchError: it is not (naming where ``digest`` appears, if anywhere).
        """
        if self.identity.digest == digest:
            return
        later = [s.name for s in self.subjects[1:] if s.digest == digest]
        where = f"; it is the later subject {later[0]!r}, a part, not the artifact" if later else ""
        raise DigestMismatchError(
            f"{what}: the first subject (the artifact) is {self.identity.digest}, want "
            f"{digest}{where}",
            subject=what,
            expected=digest,
            observed=self.identity.digest,
        )


@dataclass(frozen=True)
class VerifiedStatement:
    """A statement whose envelope verified, with the keys that signed it."""

    statement: Statement
    signers: tuple[PublicKey, ...]


def unsigned_statement(
    envelope: Envelope,
    *,
    allowed_predicate_types: Collection[str],
    subject_digest: str | None = None,
    what: str = "envelope",
) -> Statement:
    """Steps 2-5 of `verify_statement`, for an envelope whose signatures the caller verified
    another way (keyless Sigstore signatures, `verify.sigstore_adapter.identity_signers`).

    Raises:
        FormatError, PolicyError, DigestMismatchError: as `verify_statement`.
    """
    if envelope.payload_type != INTOTO_PAYLOAD_TYPE:
        raise FormatError(
            f"{what}: payloadType {envelope.payload_type!r}, want {INTOTO_PAYLOAD_TYPE!r}"
        )
    statement = Statement.from_bytes(envelope.payload, f"{what}: statement")
    if statement.predicate_type not in allowed_predicate_types:
        raise PolicyError(f"{what}: predicateType {statement.predicate_type!r} is not allowed here")
    if subject_digest is not None:
        statement.check_identity(subject_digest, what)
    return statement


def verify_statement(
    envelope: Envelope,
    keys: Iterable[PublicKey],
    *,
    allowed_predicate_types: Collection[str],
    threshold: int = 1,
    subject_digest: str | None = None,
    what: str = "envelope",
) -> VerifiedStatement:
    """Verify a signed statement in the order DESIGN §3 fixes.

    Steps:
        1. Verify the signatures over the exact payload bytes (threshold of trusted keys).
        2. Check payloadType is the in-toto type (done by `verify_envelope` after 1).
        3. Parse the payload as a Statement.
        4. Check predicateType against the allow-list.
        5. When ``subject_digest`` is given, check it is the first subject (the artifact's
           identity; later subjects are its parts).

    Raises:
        SignatureError: step 1.
        FormatError: steps 2 and 3.
        PolicyError: step 4.
        DigestMismatchError: step 5.
    """
    # (1) (2)
    signers = verify_envelope(
        envelope, keys, threshold=threshold, payload_type=INTOTO_PAYLOAD_TYPE, what=what
    )
    # (3) (4) (5)
    statement = unsigned_statement(envelope, allowed_predicate_types=allowed_predicate_types,
                                   subject_digest=subject_digest, what=what)
    return VerifiedStatement(statement, signers)
