"""Trust policy: who may produce, approve, train, run the log and witness it, and how many.

Scope: parse a policy from TOML (the file a user edits) or from its JSON form (the predicate of a
``trust-policy`` artifact in the log, with every key inline so it verifies alone), and answer the
questions a verifier asks: which keys hold a role, how many must sign, which predicate types are
allowed, how old an approval may be, which keys and Sigstore identities were compromised from
which point of the log on (``revoked_keys``, ``revoked_identities``), and which policy judged a
record logged before the one in force (`TrustPolicy.policy_at`: after a succession replaced a
key, what the old key signed before the succession's log index stays valid).
Non-scope: applying the policy to evidence (``verify.lineage``) and policy history (a new policy
takes effect only when the threshold of the current policy's approvers (or producers, in a
policy without approvers) signed it; see
`verify.succession.check_successor`).
The settings a key-signed policy does without (Sigstore identities and root, witnesses, an
evaluator's encryption keys, licences, revocations, ``[release]``, ``publish``,
``[contamination]``) are read by
``verify.policy_settings``, loaded only for a policy that has one.
Spec: keys/README.md (the TOML form, with a full example) and
``schemas/trust-policy.v1.schema.json`` (the JSON form).
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import predicates
from .digest import HEX64, digest_bytes
from .dsse import MAX_ENVELOPE_BYTES
from .errors import FormatError, refuse_unknown
from .keys import Identity, KeyLookup, PublicKey
from .note import Verifier, verifier_from_vkey
from .strict_json import json_list, load_object

__all__ = ["KEY_ROLES", "NOTE_ROLES", "POLICY_FORMAT", "POLICY_FORMATS", "ROLES", "KeyLookup",
           "Role", "TrustPolicy", "load_policy_file", "parse_duration", "policy_digest"]

POLICY_FORMAT = 3
"""The newest policy format: 2 adds the ``evaluator`` role (with X25519 ``encryption_keys``)
and ``[release]``; 3 adds ``publish``. A policy keeps the format it states (default 1), so an
older policy's JSON form, and its digest, stay what they were."""
POLICY_FORMATS = (1, 2, 3)
KEY_ROLES = ("producer", "approver", "trainer", "evaluator")
NOTE_ROLES = ("log", "witness")
ROLES = KEY_ROLES + NOTE_ROLES
_DURATION = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SETTINGS = frozenset({"sigstore_trusted_root", "accepted_licences", "revoked_keys",
                       "revoked_identities", "release", "publish", "contamination"})
"""The settings of `_TOP_KEYS` a key-signed policy does without: `verify.policy_settings`
reads them (and a role's identities, logs and encryption keys, and witnesses), loaded only for
a policy that has one."""
_TOP_KEYS = _SETTINGS | {"format", "name", "serial", "max_approval_age",
                         "allowed_predicate_types", "roles"}
"""Every setting of a policy's top level (any other is refused)."""
_KEY_ROLE_FIELDS = frozenset({"threshold", "keys", "identities"})
_ROLE_FIELDS = {"evaluator": _KEY_ROLE_FIELDS | {"encryption_keys"},
                "log": frozenset({"threshold", "vkeys"}),
                "witness": frozenset({"threshold", "vkeys", "logs"})}
"""The fields of each role's table: of a key role (`_KEY_ROLE_FIELDS`), and the others'."""
_NEWER = {"release": 2, "publish": 3}
"""The format each newer setting needs (the ``evaluator`` role needs 2)."""

if TYPE_CHECKING:
    from .compromise import RevokedIdentity, RevokedKey
    from .contamination_rules import ContaminationRules
    from .encryption_key import EncryptionKey
    from .release_rules import ReleaseRules

def parse_duration(value: object, what: str = "duration") -> int:
    """Seconds in ``"30d"``, ``"12h"``, ``"90m"``, ``"2w"`` or a non-negative integer of seconds.

    Raises:
        FormatError: anything else.
    """
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, str):
        m = _DURATION.fullmatch(value.strip())
        if m:
            return int(m.group(1)) * _UNITS[m.group(2)]
    raise FormatError(f"{what}: {value!r} is not a duration such as '30d', '12h' or seconds")


def _toml_float(text: str) -> float:
    """A TOML float as written (``tomllib``'s ``parse_float``), refused when it does not hold:
    not finite (``1e999``, ``inf``), or read as 0 though its digits are not all 0 (``1e-400``
    underflows): a bound nobody wrote (left34; a string bound: `release_rules.bound_problem`).
    """
    number = float(text)
    if not math.isfinite(number) or (not number and text.lower().split("e")[0].strip("+-0._")):
        raise ValueError(f"the number {text} reads as {number}: write one that holds")
    return number


@dataclass(frozen=True)
class Role:
    """A role: the keys (or identities, or note verifier keys) that hold it, and a threshold.

    ``logs`` (witness role only): the origins of the logs whose checkpoints need the witness
    threshold; empty means every log's. A buyer that requires witnesses on a vendor's log
    names the vendor's origin here, so that its own ledger's checkpoints need none.
    """

    name: str
    threshold: int
    keys: tuple[PublicKey, ...] = ()
    identities: tuple[Identity, ...] = ()
    vkeys: tuple[str, ...] = ()
    logs: tuple[str, ...] = ()
    encryption_keys: tuple[EncryptionKey, ...] = ()
    """X25519 keys sealed suites are encrypted to (evaluator role only)."""

    def witnessed(self, origin: str) -> bool:
        """True when this (witness) role's threshold applies to the log ``origin``."""
        return self.threshold > 0 and (not self.logs or origin in self.logs)

    @property
    def keyids(self) -> frozenset[str]:
        """Keyids of the role's keys."""
        return frozenset(k.keyid for k in self.keys)

    def note_verifiers(self) -> list[Verifier]:
        """Signed-note verifiers for the log and witness roles."""
        return [verifier_from_vkey(v) for v in self.vkeys]


@dataclass(frozen=True)
class TrustPolicy:
    """A validated trust policy. Build with `from_toml` or `from_json`."""

    name: str
    serial: int
    roles: Mapping[str, Role]
    allowed_predicate_types: frozenset[str]
    max_approval_age: int
    source: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)
    sigstore_trusted_root: Mapping[str, Any] | None = field(repr=False, default=None)
    """A Sigstore ``trusted_root.json`` that keyless signatures verify against
    (`verify.sigstore_adapter.trusted_root_bytes` gives its bytes); None: the ``sigstore``
    package's production root."""
    accepted_licences: tuple[str, ...] | None = None
    """The licences of rollout data this policy accepts (compared ignoring case, as SPDX
    identifiers are); a batch stating another licence, or none, fails verification. None: no
    restriction."""
    revoked_keys: tuple[RevokedKey, ...] = ()
    """Keys distrusted from a point of the log on (`RevokedKey`); none may hold a role."""
    revoked_identities: tuple[RevokedIdentity, ...] = ()
    """Sigstore identities distrusted from a point of the log on; none may hold a role."""
    format: int = 1
    """The format the policy states (`POLICY_FORMATS`); its JSON form keeps it."""
    release: ReleaseRules | None = None
    """``[release]`` (format 2): what a release needs."""
    publish: tuple[str, ...] | None = None
    """``publish`` (format 3): the kinds of record whose envelopes the log publishes to those
    watching it (``log serve``) and puts in update bundles; None: the default
    (`verify.policy_settings.published`)."""
    contamination: ContaminationRules | None = None
    """``[contamination]``: near duplicates of held-out episodes refused too (None: exact)."""
    earlier: tuple[tuple[int, TrustPolicy], ...] = field(default=(), repr=False, compare=False)
    """The policies in force before this one, oldest first, each with the log index of the
    record of the policy that replaced it: records logged up to that index (the replacing
    record included: its signers are the replaced policy's approvers) were signed under it
    (`policy_at`). Set by `follow_history`; not part of the policy's content or digest."""

    def signing_role(self) -> str:
        """The role whose threshold signs this policy's successors (and a first policy itself):
        its approvers; a policy without approvers (a vendor's, which records and exports but
        approves nothing) is signed by its producers."""
        approvers = self.roles["approver"]
        return "approver" if approvers.keys or approvers.identities else "producer"

    def policy_at(self, index: int) -> TrustPolicy:
        """The policy whose roles judge the signatures of the record at log ``index``: the one
        in force when it was logged (the first known policy for records older than it)."""
        for until, policy in self.earlier:
            if index <= until:
                return policy
        return self

    def revocation(
        self, who: str | Identity, index: int, time: str
    ) -> RevokedKey | RevokedIdentity | None:
        """The revocation that makes the signature of ``who`` (a keyid, or a Sigstore identity
        signing keylessly) on the record logged at ``index``, at ``time``, count for nothing;
        None when it counts."""
        revoked: tuple[RevokedKey | RevokedIdentity, ...] = (*self.revoked_keys,
                                                             *self.revoked_identities)
        for r in revoked:
            if r.who == who and r.covers(index, time):
                return r
        return None

    def licence_problem(self, licence: str | None) -> str | None:
        """Why a batch's ``licence`` is not accepted, or None when it is."""
        if self.accepted_licences is None:
            return None
        from .policy_settings import licence_problem

        return licence_problem(self, licence)

    def role(self, name: str) -> Role:
        """The role named ``name`` (every role exists; an unset one has no keys)."""
        return self.roles[name]

    def holds(self, role: str, keyid: str) -> bool:
        """True when the key ``keyid`` holds ``role``."""
        return keyid in self.roles[role].keyids

    def to_json(self) -> dict[str, Any]:
        """The self-contained JSON form (keys inline as PEM), for the trust-policy predicate."""
        roles: dict[str, Any] = {}
        for name, r in self.roles.items():
            if name == "evaluator" and self.format < 2:
                continue  # a format-1 policy's JSON (and digest) is what it always was
            entry: dict[str, Any] = {"threshold": r.threshold}
            if name in KEY_ROLES:
                entry["keys"] = [k.to_pem().decode("ascii") for k in r.keys]
                entry["identities"] = [asdict(i) for i in r.identities]  # issuer, subject
                if name == "evaluator":
                    entry["encryption_keys"] = [k.to_pem() for k in r.encryption_keys]
            else:
                entry["vkeys"] = list(r.vkeys)
                if r.logs:
                    entry["logs"] = list(r.logs)
            roles[name] = entry
        out = {
            "format": self.format,
            "name": self.name,
            "serial": self.serial,
            "max_approval_age": self.max_approval_age,
            "allowed_predicate_types": sorted(self.allowed_predicate_types),
            "roles": roles,
        }
        # The settings a key-signed policy does without: written, each only when set (so older
        # policies keep their digests), by policy_settings, loaded only for a policy with one.
        if any(getattr(self, f.name) != f.default for f in fields(self) if f.name in _SETTINGS):
            from .policy_settings import settings_json

            out |= settings_json(self)
        return out

    @classmethod
    def from_toml(
        cls,
        data: bytes,
        base_dir: Path | None = None,
        what: str = "policy",
        *,
        key_lookup: KeyLookup | None = None,
    ) -> TrustPolicy:
        """Parse the TOML form.

        Args:
            data: the file's bytes.
            base_dir: key file paths resolve relative to it (the policy file's directory).
            what: names the policy in error messages.
            key_lookup: resolves keys the policy names by keyid (64 lowercase hex); without
                it, a keyid is refused.

        Raises:
            FormatError: not TOML, unknown fields, bad keys, thresholds or durations.
        """
        try:
            doc = tomllib.loads(data.decode("utf-8"), parse_float=_toml_float)
        except ValueError as e:  # TOML's, UTF-8's, or a number that does not hold
            raise FormatError(f"{what}: not valid TOML: {e}") from e
        except RecursionError as e:
            raise FormatError(f"{what}: not valid TOML: nested too deeply") from e
        return cls._from_doc(doc, base_dir, what, key_lookup)

    @classmethod
    def from_json(cls, obj: object, what: str = "policy") -> TrustPolicy:
        """Parse the JSON form (keys inline only; no file references).

        Raises:
            FormatError: as `from_toml`.
        """
        if not isinstance(obj, dict):
            raise FormatError(f"{what}: must be an object")
        return cls._from_doc(obj, None, what)

    @classmethod
    def _from_doc(
        cls,
        doc: dict[str, Any],
        base_dir: Path | None,
        what: str,
        key_lookup: KeyLookup | None = None,
    ) -> TrustPolicy:
        refuse_unknown(set(doc), _TOP_KEYS, f"{what}: unknown setting(s)")
        fmt = doc.get("format", 1)
        if fmt not in POLICY_FORMATS or type(fmt) is not int:
            raise FormatError(f"{what}: format {fmt!r}, want one of {POLICY_FORMATS}")
        raw_roles = doc.get("roles", {})
        needs = {k: v for k, v in _NEWER.items() if k in doc}
        if isinstance(raw_roles, dict) and "evaluator" in raw_roles:
            needs["roles.evaluator"] = 2
        newer = sorted(k for k, v in needs.items() if v > fmt)
        if newer:
            want = max(needs[k] for k in newer)
            default = ", the default" if "format" not in doc else ""
            raise FormatError(f"{what}: {', '.join(newer)} need format = {want} (the policy "
                              f"states format {fmt}{default})")
        name = doc.get("name", "policy")
        if not isinstance(name, str) or not name:
            raise FormatError(f"{what}: name must be a non-empty string")
        serial = doc.get("serial", 1)
        if type(serial) is not int or serial < 1:
            raise FormatError(f"{what}: serial must be a positive integer, got {serial!r}")
        max_age = parse_duration(doc.get("max_approval_age", "90d"), f"{what}: max_approval_age")
        allowed_raw = doc.get("allowed_predicate_types", sorted(predicates.ALL))
        if not isinstance(allowed_raw, list) or not all(isinstance(t, str) for t in allowed_raw):
            raise FormatError(f"{what}: allowed_predicate_types must be a list of URIs")
        # A typo would silently forbid a kind of record; refuse it where it is written.
        refuse_unknown(set(allowed_raw), predicates.ALL, f"{what}: allowed_predicate_types: "
                       "unknown type(s)")
        if max_age == 0:
            raise FormatError(f"{what}: max_approval_age is 0, no approval could ever count")
        if not isinstance(raw_roles, dict):
            raise FormatError(f"{what}: roles must be a table")
        refuse_unknown(set(raw_roles), set(ROLES), f"{what}: unknown role(s)")
        roles = {
            r: _parse_role(r, raw_roles.get(r, {}), base_dir, f"{what}: role {r}", key_lookup)
            for r in ROLES
        }
        settings: dict[str, Any] = {}
        if _SETTINGS & set(doc):  # keyless signing, licences, revocations, [release], publish
            from .policy_settings import top_settings

            settings = top_settings(doc, roles, base_dir, what,
                                    lambda spec, here: _load_key(spec, base_dir, here, None))
        policy = cls(name, serial, roles, frozenset(allowed_raw), max_age, doc, format=fmt,
                     **settings)
        if roles["witness"].vkeys:  # witnesses: loaded only for a policy requiring some
            from .policy_settings import check_witnesses

            check_witnesses(roles, what)
        # Approvers must be independent of the keys whose work they approve: one stolen key
        # must not both produce (or train) and approve.
        approver_ids = roles["approver"].keyids
        for r in ("producer", "trainer", "evaluator"):
            both = approver_ids & roles[r].keyids
            if both:
                raise FormatError(
                    f"{what}: key {sorted(both)[0][:16]} holds both approver and {r}; "
                    "approvers need keys of their own"
                )
        return policy


def _parse_role(
    name: str, raw: object, base_dir: Path | None, what: str, key_lookup: KeyLookup | None
) -> Role:
    if not isinstance(raw, dict):
        raise FormatError(f"{what}: must be a table")
    refuse_unknown(set(raw), _ROLE_FIELDS.get(name, _KEY_ROLE_FIELDS), f"{what}: unknown field(s)")
    keys: list[PublicKey] = []
    identities: list[Identity] = []
    vkeys: list[str] = []
    if name in KEY_ROLES:
        for i, spec in enumerate(json_list(raw.get("keys", []), f"{what}: keys")):
            keys.append(_load_key(spec, base_dir, f"{what}: key {i}", key_lookup))
        if raw.get("identities", []) != []:  # keyless signers: loaded only for some
            from .policy_settings import role_identities

            identities = role_identities(raw["identities"], what)
        if len({k.keyid for k in keys}) != len(keys):
            raise FormatError(f"{what}: the same key is listed twice")
        members = len(keys) + len(identities)
    else:
        by_key: dict[bytes, int] = {}
        for i, v in enumerate(json_list(raw.get("vkeys", []), f"{what}: vkeys")):
            if not isinstance(v, str):
                raise FormatError(f"{what}: vkey {i} must be a string")
            try:
                verifier = verifier_from_vkey(v)  # malformed keys refused now, not when used
            except FormatError as e:
                raise FormatError(f"{what}: vkey {i}: {e}") from e
            if v in vkeys:
                raise FormatError(f"{what}: vkey {i} is listed twice")
            if verifier.public_key in by_key:
                j = by_key[verifier.public_key]
                raise FormatError(
                    f"{what}: vkey {i} ({verifier.name}) is the key of vkey {j} "
                    f"({vkeys[j].split('+')[0]}) under another name: a member counts once "
                    "however it is named"
                )
            by_key[verifier.public_key] = i
            vkeys.append(v)
        members = len(vkeys)
    default_threshold = 1 if members and name != "witness" else 0
    threshold = raw.get("threshold", default_threshold)
    if type(threshold) is not int or threshold < 0:
        raise FormatError(f"{what}: threshold must be a non-negative integer, got {threshold!r}")
    if threshold > members:
        raise FormatError(f"{what}: threshold {threshold} but only {members} member(s)")
    if threshold == 0 and name != "witness" and members:
        raise FormatError(f"{what}: threshold 0 would accept anything; use at least 1")
    logs: tuple[str, ...] = ()
    if raw.get("logs", []) != []:  # the logs that need witnesses
        from .policy_settings import role_logs

        logs = role_logs(raw["logs"], threshold, what)
    sealing: tuple[EncryptionKey, ...] = ()
    if raw.get("encryption_keys", []) != []:  # sealed suites: an evaluator's X25519 keys
        from .policy_settings import role_encryption_keys

        sealing = role_encryption_keys(raw["encryption_keys"], what,
                                       lambda spec, here: _key_bytes(spec, base_dir, here))
    return Role(name, threshold, tuple(keys), tuple(identities), tuple(vkeys), logs, sealing)


def _load_key(
    spec: object, base_dir: Path | None, what: str, key_lookup: KeyLookup | None
) -> PublicKey:
    if not isinstance(spec, str) or not spec:
        raise FormatError(f"{what}: must be a PEM string, a path to a PEM file or a keyid")
    if spec.lstrip().startswith("-----BEGIN"):
        try:
            return PublicKey.from_pem(spec.encode("ascii"), what)
        except UnicodeEncodeError as e:
            raise FormatError(f"{what}: an inline PEM must be ASCII") from e
    if HEX64.fullmatch(spec.removeprefix("sha256:").lower()):  # a key of a ledger's key store
        from .policy_settings import key_by_keyid

        return key_by_keyid(spec.removeprefix("sha256:"), key_lookup, what)
    return PublicKey.from_pem(_key_bytes(spec, base_dir, what), what)


def _key_bytes(spec: object, base_dir: Path | None, what: str) -> bytes:
    """A key's PEM: inline, or read from a file relative to the policy (TOML form only)."""
    if not isinstance(spec, str) or not spec:
        raise FormatError(f"{what}: must be a PEM string or a path to a PEM file")
    if spec.lstrip().startswith("-----BEGIN"):
        return spec.encode("ascii", "replace")
    if base_dir is None:
        raise FormatError(f"{what}: {spec!r}: keys must be inline PEM in the JSON form")
    path = (base_dir / spec) if not Path(spec).is_absolute() else Path(spec)
    try:
        return path.read_bytes()
    except OSError as e:
        raise FormatError(f"{what}: cannot read key file {path}: {e.strerror}") from e


def policy_digest(policy: TrustPolicy) -> str:
    """The identity of a policy: ``sha256:`` of the RFC 8785 bytes of its JSON form."""
    from ._jcs import canonical_bytes

    return digest_bytes(canonical_bytes(policy.to_json(), "policy"))


def load_policy_file(path: Path, *, key_lookup: KeyLookup | None = None) -> TrustPolicy:
    """Read a policy file: the one loader every command uses.

    The JSON form when the file ends in ``.json`` (keys inline), else TOML (key paths relative
    to the file's directory; keys named by keyid found with ``key_lookup``).

    Raises:
        OSError: the file cannot be read (the message names it).
        FormatError: the policy is invalid.
    """
    try:  # a policy is no larger than the log records one (/dev/zero ends: rev34)
        with path.open("rb") as f:
            data = f.read(MAX_ENVELOPE_BYTES + 1)
    except FileNotFoundError as e:
        raise OSError(f"policy {path}: no such file") from e
    except OSError as e:
        raise OSError(f"policy {path}: cannot read: {e.strerror or e}") from e
    if len(data) > MAX_ENVELOPE_BYTES:
        raise FormatError(f"policy {path}: larger than {MAX_ENVELOPE_BYTES >> 20} MiB")
    if path.suffix == ".json":
        return TrustPolicy.from_json(load_object(data, f"policy {path}"), f"policy {path}")
    return TrustPolicy.from_toml(data, path.parent, f"policy {path}", key_lookup=key_lookup)


