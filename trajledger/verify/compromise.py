"""Keys and Sigstore identities a trust policy distrusts from a point of the log on: they were
compromised.

Scope: `RevokedKey` and `RevokedIdentity` (from which log index or time on their signatures do
not count, and why) and the parsing of a policy's ``revoked_keys`` and ``revoked_identities``
(`revoked_keys`, `revoked_identities`, for ``verify.policy``), and the one spelling of a
keyid a policy may write (`lower_keyid`). Loaded only for a policy that
names some: which signatures a revocation voids is `verify.policy.TrustPolicy.revocation`.
Non-scope: the rest of the policy (``verify.policy``), revocation records of artifacts
(``verify.predicates.Revocation``).
Spec: keys/README.md (``revoked_keys``, ``revoked_identities``),
``schemas/trust-policy.v1.schema.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .digest import HEX64
from .errors import FormatError
from .keys import Identity, PublicKey
from .strict_json import json_list
from .times import parse_time

__all__ = ["RevokedIdentity", "RevokedKey", "lower_keyid", "revoked_identities", "revoked_keys"]

_REVOKED_KEYS = {"key", "compromised_since", "reason"}
_REVOKED_IDENTITIES = {"issuer", "subject", "compromised_since", "reason"}


class _Compromise:
    """What `RevokedKey` and `RevokedIdentity` share: from which point of the log on their
    signatures do not count, and why."""

    since_index: int | None
    since_time: str | None
    reason: str | None

    def covers(self, index: int, time: str) -> bool:
        """True when a signature by the revoked key or identity on the record logged at
        ``index``, at ``time`` (``YYYY-MM-DDTHH:MM:SSZ``, which compares as a string), does
        not count."""
        if self.since_index is not None:
            return index >= self.since_index
        assert self.since_time is not None
        return time >= self.since_time

    def describe(self) -> str:
        """``compromised since log index 7`` or ``compromised since 2025-01-01T00:00:00Z``."""
        since = f"log index {self.since_index}" if self.since_index is not None else self.since_time
        return f"compromised since {since}" + (f": {self.reason}" if self.reason else "")

    def _json(self, who: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON form: ``who``, then the index (an integer) or time (a string), and the
        reason if any."""
        since = self.since_index if self.since_index is not None else str(self.since_time)
        out = {**who, "compromised_since": since}
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class RevokedKey(_Compromise):
    """A key the policy distrusts from a point of the log on: it was compromised.

    Its signatures do not count on any record logged at or after ``since_index`` (a log index)
    or, with ``since_time``, at or after that time (the log entry's ``time``); records it
    signed before stay valid. ``since_index`` 0 distrusts everything it ever signed.
    """

    keyid: str
    since_index: int | None = None
    since_time: str | None = None
    reason: str | None = None

    @property
    def who(self) -> str:
        """The keyid (`verify.policy.TrustPolicy.revocation` finds a revocation by it)."""
        return self.keyid

    def to_json(self) -> dict[str, Any]:
        """The JSON form: the keyid, and the index (an integer) or time (a string)."""
        return self._json({"key": self.keyid})


@dataclass(frozen=True)
class RevokedIdentity(_Compromise):
    """A Sigstore identity the policy distrusts from a point of the log on (a CI workflow or
    an account someone else could sign as): like `RevokedKey`, for keyless signatures."""

    identity: Identity
    since_index: int | None = None
    since_time: str | None = None
    reason: str | None = None

    @property
    def who(self) -> Identity:
        """The identity (`verify.policy.TrustPolicy.revocation` finds a revocation by it)."""
        return self.identity

    def to_json(self) -> dict[str, Any]:
        """The JSON form: issuer, subject, and the index (an integer) or time (a string)."""
        return self._json({"issuer": self.identity.issuer, "subject": self.identity.subject})


def revoked_keys(value: object, what: str, load_key: Callable[[object, str], PublicKey]
                 ) -> tuple[RevokedKey, ...]:
    """``revoked_keys``: a list of ``{key, compromised_since, reason?}`` tables.

    ``key`` is a keyid (64 hex, optionally ``sha256:``-prefixed; the JSON form writes this), a
    PEM file or inline PEM; ``compromised_since`` a log index (integer >= 0) or a time
    ``YYYY-MM-DDTHH:MM:SSZ`` (a string; a TOML date-time must be quoted). ``load_key(spec,
    what)`` reads a PEM (``verify.policy``: inline, or a file relative to the policy).
    """
    out: list[RevokedKey] = []
    for i, item in enumerate(json_list(value, f"{what}: revoked_keys")):
        here = f"{what}: revoked_keys item {i}"
        if not isinstance(item, dict):
            raise FormatError(f"{here}: must be a table with key and compromised_since")
        unknown = set(item) - _REVOKED_KEYS
        if unknown:
            raise FormatError(f"{here}: unknown field(s) {', '.join(sorted(unknown))}")
        spec = item.get("key")
        if isinstance(spec, str) and HEX64.fullmatch(spec.removeprefix("sha256:").lower()):
            keyid = lower_keyid(spec.removeprefix("sha256:"), f"{here}: key")
        else:
            keyid = load_key(spec, f"{here}: key").keyid
        if any(r.keyid == keyid for r in out):
            raise FormatError(f"{here}: key {keyid[:16]} is listed twice")
        out.append(RevokedKey(keyid, *_compromise(item, here)))
    return tuple(out)


def lower_keyid(keyid: str, what: str) -> str:
    """``keyid`` (64 hex digits), refused unless in lower case: keyids are compared as
    written, and another spelling named no key (docs/SECURITY.md, redo15 finding 1).

    Raises:
        FormatError: upper-case hex digits.
    """
    if not HEX64.fullmatch(keyid):
        raise FormatError(f"{what}: keyid {keyid[:16]}… must be written in lower-case hex")
    return keyid


def revoked_identities(value: object, what: str) -> tuple[RevokedIdentity, ...]:
    """``revoked_identities``: a list of ``{issuer, subject, compromised_since, reason?}``
    tables, ``compromised_since`` as in `revoked_keys`."""
    out: list[RevokedIdentity] = []
    for i, item in enumerate(json_list(value, f"{what}: revoked_identities")):
        here = f"{what}: revoked_identities item {i}"
        if not isinstance(item, dict):
            raise FormatError(f"{here}: must be a table with issuer, subject and "
                              "compromised_since")
        unknown = set(item) - _REVOKED_IDENTITIES
        if unknown:
            raise FormatError(f"{here}: unknown field(s) {', '.join(sorted(unknown))}")
        issuer, subject = item.get("issuer"), item.get("subject")
        if not (isinstance(issuer, str) and issuer and isinstance(subject, str) and subject):
            raise FormatError(f"{here}: issuer and subject must be non-empty strings")
        identity = Identity(issuer, subject)
        if any(r.identity == identity for r in out):
            raise FormatError(f"{here}: {subject} ({issuer}) is listed twice")
        out.append(RevokedIdentity(identity, *_compromise(item, here)))
    return tuple(out)


def _compromise(item: Mapping[str, Any], here: str) -> tuple[int | None, str | None, str | None]:
    """``compromised_since`` (a log index, or a time) and ``reason`` of a revocation item."""
    since = item.get("compromised_since")
    index = time = None
    if type(since) is int and since >= 0:
        index = since
    elif isinstance(since, str):
        parse_time(since, f"{here}: compromised_since")
        time = since
    else:
        raise FormatError(
            f"{here}: compromised_since must be a log index (an integer >= 0) or a time "
            f"\"YYYY-MM-DDTHH:MM:SSZ\" (a quoted string), got {since!r}"
        )
    reason = item.get("reason")
    if reason is not None and (not isinstance(reason, str) or not reason.strip()):
        raise FormatError(f"{here}: reason must be a non-empty string")
    return index, time, reason
