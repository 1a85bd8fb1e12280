"""The trust policy settings a key-signed policy does without, parsed only for a policy that has
one: Sigstore identities and ``sigstore_trusted_root`` (keyless signing), witnesses (the
``witness`` role's keys and ``logs``), an evaluator's ``encryption_keys`` (sealed suites),
``accepted_licences``, ``revoked_keys`` and ``revoked_identities`` (with `verify.compromise`),
``[release]`` (with `verify.release_rules`), ``publish`` (what a vendor's log publishes),
``[contamination]`` (with `verify.contamination_rules`), and keys named by keyid (found in a
ledger's key store).

Scope: reading and checking those settings for ``verify.policy`` (`role_identities`,
`role_logs`, `role_encryption_keys`, `check_witnesses`, `top_settings`, `key_by_keyid`), and
what they answer (`licence_problem`, `published`), and their JSON form (`settings_json`).
Every refusal is the one ``verify.policy`` made when it read them.
Non-scope: the rest of the policy (``verify.policy``: roles, keys, thresholds, the predicate
types, approval lifetime), and judging signatures against it (``verify.judge``).
Spec: keys/README.md, ``schemas/trust-policy.v1.schema.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .errors import FormatError, refuse_unknown
from .keys import Identity, KeyLookup, PublicKey
from .strict_json import json_list

if TYPE_CHECKING:
    from .compromise import RevokedIdentity, RevokedKey
    from .contamination_rules import ContaminationRules
    from .encryption_key import EncryptionKey
    from .note import Verifier
    from .release_rules import ReleaseRules

__all__ = [
    "DEFAULT_PUBLISH",
    "Role",
    "Settings",
    "check_witnesses",
    "key_by_keyid",
    "licence_problem",
    "published",
    "role_encryption_keys",
    "role_identities",
    "role_logs",
    "settings_json",
    "top_settings",
]

class Role(Protocol):
    """A role as its settings are checked against it: a `verify.policy.Role` (``verify.policy``
    stands above this module and loads it for a policy with such settings)."""

    @property
    def keys(self) -> tuple[PublicKey, ...]: ...

    @property
    def identities(self) -> tuple[Identity, ...]: ...

    @property
    def keyids(self) -> frozenset[str]: ...

    def note_verifiers(self) -> list[Verifier]: ...


class Settings(Protocol):
    """The settings of a `verify.policy.TrustPolicy` this module reads back."""

    @property
    def name(self) -> str: ...

    @property
    def sigstore_trusted_root(self) -> Mapping[str, Any] | None: ...

    @property
    def accepted_licences(self) -> tuple[str, ...] | None: ...

    @property
    def revoked_keys(self) -> tuple[RevokedKey, ...]: ...

    @property
    def revoked_identities(self) -> tuple[RevokedIdentity, ...]: ...

    @property
    def release(self) -> ReleaseRules | None: ...

    @property
    def publish(self) -> tuple[str, ...] | None: ...

    @property
    def contamination(self) -> ContaminationRules | None: ...


DEFAULT_PUBLISH = ("revocation", "erasure", "trust-policy")
"""The kinds of record whose envelopes a log publishes (``log serve``, update bundles) when
its policy does not say (``publish``): what its buyers need to stop using data."""


def role_identities(value: object, what: str) -> list[Identity]:
    """A key role's ``identities``: Sigstore identities, each exactly an issuer and a subject
    (the certificate's SAN), both non-empty strings."""
    identities: list[Identity] = []
    for i, ident in enumerate(json_list(value, f"{what}: identities")):
        if isinstance(ident, dict):
            refuse_unknown(set(ident), {"issuer", "subject"}, f"{what}: identity {i}: unknown "
                           "field(s)")
        if not isinstance(ident, dict) or set(ident) != {"issuer", "subject"}:
            raise FormatError(f"{what}: identity {i} must have exactly issuer and subject")
        if not all(isinstance(v, str) and v for v in ident.values()):
            raise FormatError(
                f"{what}: identity {i} issuer and subject must be non-empty strings"
            )
        identities.append(Identity(ident["issuer"], ident["subject"]))
    return identities


def key_by_keyid(keyid: str, key_lookup: KeyLookup | None, what: str) -> PublicKey:
    """A key a policy names by its keyid (64 lowercase hex), found with ``key_lookup`` (a
    ledger's key store; without one, every keyid is refused).

    Raises:
        FormatError: a keyid not in lower case, no key has that keyid, or the key found has
            another.
    """
    from .compromise import lower_keyid

    lower_keyid(keyid, what)
    found = key_lookup(keyid) if key_lookup is not None else None
    if found is None:
        raise FormatError(
            f"{what}: keyid {keyid[:16]}… is not a key of this ledger's key store; "
            "name the key by its .pub file instead"
        )
    if found.keyid != keyid:
        raise FormatError(f"{what}: key found for {keyid[:16]}… has keyid {found.keyid}")
    return found


def role_logs(value: object, threshold: int, what: str) -> tuple[str, ...]:
    """The witness role's ``logs``: the origins of the logs whose checkpoints need the witness
    threshold (`verify.policy.Role.witnessed`); useless with a threshold of 0."""
    logs = strings(value, f"{what}: logs", "a log origin")
    if logs and threshold == 0:
        raise FormatError(f"{what}: logs is set but threshold is 0, so it would require nothing")
    return logs


def role_encryption_keys(
    value: object, what: str, key_bytes: Callable[[object, str], bytes]
) -> tuple[EncryptionKey, ...]:
    """The evaluator role's ``encryption_keys``: X25519 keys that sealed suites are encrypted
    to (`verify.encryption_key`), each once; ``key_bytes(spec, what)`` reads a key's PEM."""
    from .encryption_key import EncryptionKey

    sealing = tuple(
        EncryptionKey.from_pem(key_bytes(spec, f"{what}: encryption key {i}"),
                               f"{what}: encryption key {i}")
        for i, spec in enumerate(json_list(value, f"{what}: encryption_keys"))
    )
    if len({k.keyid for k in sealing}) != len(sealing):
        raise FormatError(f"{what}: the same encryption key is listed twice")
    return sealing


def check_witnesses(roles: Mapping[str, Role], what: str) -> None:
    """A log cannot witness itself: its own key among the witnesses would count as one.

    Raises:
        FormatError: a witness key is the key of the log role.
    """
    log_keys = {v.public_key for v in roles["log"].note_verifiers()}
    for v in roles["witness"].note_verifiers():
        if v.public_key in log_keys:
            raise FormatError(
                f"{what}: role witness: {v.name} is the key of the log role; a witness "
                "needs a key of its own"
            )


def top_settings(
    doc: Mapping[str, Any],
    roles: Mapping[str, Role],
    base_dir: Path | None,
    what: str,
    load_key: Callable[[object, str], PublicKey],
) -> dict[str, Any]:
    """The top-level settings ``doc`` has of those a key-signed policy does without, as
    `verify.policy.TrustPolicy` fields.

    Steps:
        1. ``sigstore_trusted_root`` (`verify.sigstore_adapter.parse_trusted_root`).
        2. ``accepted_licences``: licence names (SPDX ids), each once ignoring case.
        3. ``revoked_keys`` and ``revoked_identities`` (`verify.compromise`).
        4. ``[release]`` (`verify.release_rules.parse_release`).
        5. ``publish``: kinds of record (log entry kinds), each once.
        6. ``[contamination]`` (`verify.contamination_rules.parse_contamination`).
        7. No revoked key or identity holds a role: it would be trusted and distrusted at once.

    Raises:
        FormatError: a setting is malformed.
    """
    out: dict[str, Any] = {}
    # (1)
    if doc.get("sigstore_trusted_root") is not None:  # keyless signing: Sigstore's adapter
        from .sigstore_adapter import parse_trusted_root

        out["sigstore_trusted_root"] = parse_trusted_root(doc["sigstore_trusted_root"],
                                                          base_dir, what)
    # (2)
    if doc.get("accepted_licences") is not None:
        licences = strings(doc["accepted_licences"], f"{what}: accepted_licences",
                           "a licence (an SPDX id)")
        if len({v.casefold() for v in licences}) != len(licences):
            raise FormatError(f"{what}: accepted_licences: a licence is listed twice")
        out["accepted_licences"] = licences
    # (3)
    if "revoked_keys" in doc or "revoked_identities" in doc:
        from .compromise import revoked_identities, revoked_keys

        out["revoked_keys"] = revoked_keys(doc.get("revoked_keys", []), what, load_key)
        out["revoked_identities"] = revoked_identities(doc.get("revoked_identities", []), what)
    # (4)
    if doc.get("release") is not None:
        from .release_rules import parse_release

        out["release"] = parse_release(doc["release"], roles["evaluator"], what)
    # (5)
    if doc.get("publish") is not None:
        from .kinds import KINDS

        kinds = strings(doc["publish"], f"{what}: publish", "a kind of record")
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            raise FormatError(f"{what}: publish: unknown kind {unknown[0]!r}, want some of "
                              f"{', '.join(sorted(KINDS))}")
        out["publish"] = kinds
    # (6)
    if doc.get("contamination") is not None:
        from .contamination_rules import parse_contamination

        out["contamination"] = parse_contamination(doc["contamination"], what)
    # (7)
    for rk in out.get("revoked_keys", ()):
        held = [name for name, role in roles.items() if rk.keyid in role.keyids]
        if held:
            raise FormatError(
                f"{what}: revoked_keys: key {rk.keyid[:16]} still holds the {held[0]} role; "
                "remove it from the role"
            )
    for ri in out.get("revoked_identities", ()):
        held = [name for name, role in roles.items() if ri.identity in role.identities]
        if held:
            raise FormatError(
                f"{what}: revoked_identities: {ri.identity.subject} "
                f"({ri.identity.issuer}) still holds the {held[0]} role; remove it from the "
                "role"
            )
    return out


def settings_json(policy: Settings) -> dict[str, Any]:
    """The JSON form of the settings ``policy`` has (for `verify.policy.TrustPolicy.to_json`):
    each only when set, so that older policies keep their digests."""
    optional = {
        "sigstore_trusted_root": None if policy.sigstore_trusted_root is None
        else dict(policy.sigstore_trusted_root),
        "accepted_licences": None if policy.accepted_licences is None
        else list(policy.accepted_licences),
        "revoked_keys": [r.to_json() for r in policy.revoked_keys] or None,
        "revoked_identities": [r.to_json() for r in policy.revoked_identities] or None,
        "release": policy.release and policy.release.to_json(),
        "publish": None if policy.publish is None else list(policy.publish),
        "contamination": policy.contamination and policy.contamination.to_json(),
    }
    return {k: v for k, v in optional.items() if v is not None}


def strings(value: object, what: str, item: str) -> tuple[str, ...]:
    """A list of unique non-empty strings.

    Raises:
        FormatError: not a list, an item that is not a non-empty string, or one listed twice.
    """
    out = json_list(value, what)
    for i, v in enumerate(out):
        if not isinstance(v, str) or not v.strip():
            raise FormatError(f"{what}: item {i} must be {item}, a non-empty string")
    if len(set(out)) != len(out):
        raise FormatError(f"{what}: an item is listed twice")
    return tuple(out)


def licence_problem(policy: Settings, licence: str | None) -> str | None:
    """Why a batch's ``licence`` is not accepted by ``policy`` (which sets
    ``accepted_licences``), or None when it is."""
    assert policy.accepted_licences is not None
    accepted = ", ".join(policy.accepted_licences) or "none"
    if not licence:
        return (f"the batch states no licence; policy {policy.name!r} accepts only "
                f"{accepted}")
    if licence.casefold() in {a.casefold() for a in policy.accepted_licences}:
        return None
    return (f"licence {licence!r} is not accepted by policy {policy.name!r} (accepted: "
            f"{accepted})")


def published(policy: Settings) -> tuple[str, ...]:
    """The kinds of record whose envelopes the log of ``policy`` publishes (``publish``, else
    `DEFAULT_PUBLISH`)."""
    return DEFAULT_PUBLISH if policy.publish is None else policy.publish
