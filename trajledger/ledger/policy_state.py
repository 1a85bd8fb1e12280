"""The trust policy in force in a ledger, from its trust-policy records.

Scope: the one way every command loads a policy (`load_policy`): a file the user trusts (read by
`verify.policy.load_policy_file`, keys named by keyid looked up in the ledger's key store), then
followed through the log's trust-policy records (`verify.policy_history.follow_history`); or,
with no file, the log's own policy history from its first record.
**Fail closed**: every trust-policy record of the log must have its envelope present and hashing
to its entry; otherwise the policy in force cannot be known and loading fails naming the record
(a deleted or damaged successor must never silently put an older, weaker policy back in force).
Non-scope: judging evidence with a policy (``verify.lineage``), recording one (``ledger.status``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from trajledger.verify.digest import digest_bytes
from trajledger.verify.errors import FormatError, PolicyError, ProvenanceError
from trajledger.verify.policy import KEY_ROLES, KeyLookup, TrustPolicy, load_policy_file
from trajledger.verify.policy_history import follow_history

from .errors import LedgerError, PolicyFileError, StoreError, TamperError

_HEX64 = re.compile(r"[0-9a-f]{64}")
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]+-----\n[A-Za-z0-9+/=\n]+-----END [A-Z0-9 ]+-----\n?")
"""A PEM as `inline_keys_toml` writes it: nothing TOML's multi-line string would read
otherwise (no quote, no backslash)."""

if TYPE_CHECKING:
    from trajledger.verify.contamination_rules import ContaminationRules
    from trajledger.verify.encryption_key import EncryptionKey
    from trajledger.verify.keys import PublicKey

    from .home import LedgerHome
    from .keys import KeyStore

__all__ = [
    "check_signers",
    "contamination_rules",
    "current_policy",
    "exported_key_line",
    "given_policy",
    "inline_keys_toml",
    "inline_paths",
    "key_lookup",
    "keystore_lookup",
    "load_policy",
    "membership_changes",
    "path_entries",
    "policy_records",
    "policy_toml",
    "read_policy_file",
    "who_may_sign",
]


def policy_records(ledger: LedgerHome) -> list[tuple[int, str, bytes]]:
    """``(log index, subject, envelope bytes)`` of every trust-policy record, in log order.

    Raises:
        TamperError: a record's envelope is missing or does not hash to its entry.
        StoreError, OSError: it cannot be read (an I/O error).
    """
    state = ledger.trust_state()
    store = ledger.store
    out = []
    for i in state.of_kind("trust-policy"):
        entry = state.entry(i)
        assert entry is not None
        where = store.path_of(entry.envelope) if store.is_local else None
        try:
            data = store.get(entry.envelope) if store.exists(entry.envelope) else None
        except (OSError, StoreError) as e:
            cause = e if isinstance(e, OSError) else e.__cause__
            if isinstance(cause, OSError) and not isinstance(cause, FileNotFoundError):
                raise  # a disk that cannot give it back (EIO): exit 3, not "missing"
            data = None
        problem = "is missing" if data is None else (
            None if digest_bytes(data) == entry.envelope else "does not hash to its entry"
        )
        if problem is not None or data is None:
            raise TamperError(
                f"trust-policy record at log index {i}: its envelope {entry.envelope[:19]}… "
                f"{problem}, so the policy in force cannot be known; restore it with "
                "'trajledger fsck --repair --from BUNDLE|LEDGER'",
                where,
            )
        out.append((i, entry.subject, data))
    return out


def not_in_role(name: str, keyid: str, policy: TrustPolicy, role: str) -> str:
    """The head of the refusal of key ``name`` (``keyid``) that does not hold ``role`` in
    ``policy``: which key, role and policy, and when the policy declares the key compromised,
    since when and why (a replaced key: "add it to the policy" could not be done; aud34).
    ``train``, ``eval`` and ``release`` say what to do next after it."""
    revoked = next((r for r in policy.revoked_keys if r.keyid == keyid), None)
    return (f"key {name} ({keyid[:12]}): does not hold the {role} role in policy "
            f"{policy.name!r} serial {policy.serial}"
            + (f", which declares it {revoked.describe()}" if revoked else ""))


def current_policy(
    ledger: LedgerHome, trusted: TrustPolicy | None = None
) -> tuple[list[str], TrustPolicy] | None:
    """The policy in force (following the history from ``trusted``, or from the first record).

    Returns:
        The notes on the history (one per record examined) and the policy; None when no policy
        is given and none is recorded.

    Raises:
        TamperError: a trust-policy record's envelope is missing or damaged.
    """
    records = policy_records(ledger)
    key = tuple(records)
    for held, start, found in list(_FOLLOWED):
        if held == key and (start is trusted or (
                start is not None and trusted is not None and start == trusted
                and start.source == trusted.source)):
            policy, notes = found
            break
    else:
        policy, notes = follow_history(trusted, records)
        _FOLLOWED.insert(0, (key, trusted, (policy, notes)))
        del _FOLLOWED[_FOLLOWED_KEPT:]
    return None if policy is None else (list(notes), policy)


_FOLLOWED: list[tuple[tuple[tuple[int, str, bytes], ...], TrustPolicy | None,
                      tuple[TrustPolicy | None, list[str]]]] = []
"""The last `follow_history` answers of this process: ``(records, trusted, answer)``. It is
pure (bytes and parsed policies in, a policy out), and a command follows the same records
from the same start several times (each check of a signer, each lineage it judges: ci47 counted
2 to 3 in ``record``, ``approve``, ``dataset create``, 33 in ``quickstart``, one Ed25519
verification or more each); the records are compared whole, envelopes included, so another
record, a changed envelope or another start is followed again."""
_FOLLOWED_KEPT = 4


def contamination_rules(ledger: LedgerHome) -> ContaminationRules:
    """The ``[contamination]`` of the policy in force (`current_policy`): what ``dataset
    create`` refuses of a train set's duplicates of held-out episodes; the default (exact
    duplicates only) without a policy or without the table.

    Raises:
        TamperError: as `current_policy` (a damaged policy record: fail closed).
    """
    from trajledger.verify.contamination_rules import ContaminationRules

    found = current_policy(ledger)
    rules = found[1].contamination if found is not None else None
    return rules or ContaminationRules()


def refuse_unreadable(policy: TrustPolicy, what: str) -> None:
    """Refuse a policy file whose ``[release]`` bound or ``[contamination]`` threshold is a
    string that is no number anyone wrote (`verify.release_rules.bound_problem`: off the JSON
    number grammar, ``"0.9_9"``): ``policy check`` and ``policy set`` (a recorded one fails
    closed where it is used; left33, left34).

    Raises:
        FormatError: naming the first such value.
    """
    from trajledger.verify.errors import FormatError
    from trajledger.verify.release_rules import refuse_unreadable as refuse_release

    refuse_release(policy.release, what)
    if policy.contamination is not None and policy.contamination.unreadable:
        raise FormatError(f"{what}: contamination: {policy.contamination.unreadable}; write it "
                          "as a JSON number, as 0.9")


def key_lookup(ledger: LedgerHome) -> KeyLookup:
    """Find a public key of the ledger's key store by its keyid (None when there is none)."""
    return keystore_lookup(ledger.keys)


def keystore_lookup(keys: KeyStore) -> KeyLookup:
    """Find a public key of ``keys`` by its keyid (None when there is none).

    Every command that reads a policy file resolves keyids with this, so a policy naming keys
    by keyid means the same to each of them (a key store that does not exist yet has no keys).
    """

    def lookup(keyid: str) -> PublicKey | None:
        for info in keys.list():
            if info.keyid == keyid:
                return keys.public(info.name)
        return None

    return lookup


def read_policy_file(path: Path, lookup: KeyLookup | None) -> TrustPolicy:
    """The user's own policy FILE (`verify.policy.load_policy_file`, keys named by keyid found
    with ``lookup``).

    Raises:
        PolicyFileError: it is invalid: a usage error, exit 2 (left36).
        OSError: it cannot be read.
    """
    try:
        return load_policy_file(path, key_lookup=lookup)
    except FormatError as e:
        raise PolicyFileError(str(e)) from e


def given_policy(ledger: LedgerHome, policy_file: Path | None,
                 warn: Callable[[str], None]) -> TrustPolicy:
    """`load_policy`, saying through ``warn`` that the file given was changed after it was
    recorded (`verify.policy_as_given`: left37 finding 4), for the commands that load
    ``--policy`` outside `runner.commands.command_policy` (``export``, ``import``,
    ``lineage``, ``impact``: left38)."""
    from trajledger.verify.policy_as_given import OTHER

    policy, notes = load_policy(ledger, policy_file)
    for n in notes:
        if OTHER in n:
            warn(n)
    return policy


def load_policy(ledger: LedgerHome, policy_file: Path | None) -> tuple[TrustPolicy, list[str]]:
    """The policy to apply: the file given (followed through the log's policy history), or the
    ledger's policy in force. Every command that applies a policy loads it here.

    Raises:
        LedgerError: no policy given and none recorded.
        OSError: the file cannot be read.
        PolicyFileError: the policy file is invalid (a `FormatError`; exit 2).
        TamperError: a trust-policy record's envelope is missing or damaged.
    """
    trusted = None
    if policy_file is not None:
        trusted = read_policy_file(policy_file, key_lookup(ledger))
        # A log key the user's own file names is pinned ahead: its first use is no blind one.
        ledger.expect_log_keys(trusted.role("log").vkeys)
    found = current_policy(ledger, trusted)
    if found is None:
        raise LedgerError(
            "no trust policy: pass --policy FILE, or write one ('trajledger policy init') and "
            "record it ('trajledger policy set FILE --key APPROVER...')"
        )
    notes, policy = found
    return policy, notes


ROLE_FREE_KINDS = frozenset({"files"})
"""Kinds any key may sign at recording time (``trajledger attest``): who may produce them is the
verifier's question. Every other kind is signed only by a key its role holds (keys/README.md,
"Signers without a role")."""


def check_signers(
    ledger: LedgerHome, kind: str, signers: Sequence[tuple[str, str]], action: str | None = None
) -> None:
    """Refuse to sign a ``kind`` record with a key the ledger's policy in force would not count.

    Steps:
        1. No policy in force (a ledger's bootstrap, before its first ``policy set``): nothing
           to check. A trust-policy record is checked by its own rules (`record_policy`).
        2. A key the policy revokes for a record logged now is refused: every verifier would
           ignore its signature.
        3. A key that holds none of the kind's roles (`verify.kinds.Kind.roles`) is refused,
           naming its fingerprint and the role's: the private key must be one the policy
           holds, not merely the pair of ``NAME.pub`` (a planted pair is refused here).

    Args:
        ledger: the open ledger.
        kind: the log entry kind of the record.
        signers: ``(name, keyid)`` of each signing key (keyless signers are judged by the
            verifier: their identity is known only once signed).
        action: what the user asked, for the message (default: sign a ``kind`` record).

    Raises:
        PolicyError: a key is revoked, or holds no role the kind needs.
        TamperError: a trust-policy record's envelope is missing or damaged.
    """
    from trajledger.verify.kinds import KINDS
    from trajledger.verify.times import now

    # (1)
    found = current_policy(ledger)
    if found is None or kind == "trust-policy":
        return
    policy = found[1]
    # (2)
    index, time = ledger.log.size, now()
    for name, keyid in signers:
        revoked = policy.revocation(keyid, index, time)
        if revoked is not None:
            raise PolicyError(
                f"key {name} ({keyid[:12]}): revoked by policy {policy.name!r} serial "
                f"{policy.serial} ({revoked.describe()}); it cannot sign records"
            )
    # (3)
    if kind in ROLE_FREE_KINDS:
        return
    roles = KINDS[kind].roles
    what = action or f"sign {'an' if kind[0] in 'aeio' else 'a'} {kind} record"
    for name, keyid in signers:
        if any(policy.holds(r, keyid) for r in roles):
            continue
        held = [r for r in KEY_ROLES if policy.holds(r, keyid)]  # (an evaluator's too, out40)
        members = sorted({k.keyid[:16] for r in roles for k in policy.role(r).keys})
        raise PolicyError(
            f"key {name} ({keyid[:12]}): cannot {what}: it holds "
            f"{' and '.join(held) + ' role' if held else 'no role'} in policy {policy.name!r} "
            f"serial {policy.serial}, want {' or '.join(roles)} (fingerprint {keyid[:16]}; "
            f"the policy's {' or '.join(roles)} key(s): {', '.join(members) or 'none'}); "
            "nothing was signed"
        )


def exported_key_line(ledger: LedgerHome, name: str, key: PublicKey,
                      others: Sequence[tuple[str, str]]) -> tuple[str, str, list[str] | None]:
    """What ``trajledger key export NAME`` says of the key it prints (out36 finding 3): its
    fingerprint and the roles the policy in force gives it, so that a ``keys/NAME.pub``
    replaced, or linked to another key, is seen before it is handed to a buyer, who would
    trust it. ``others`` are the ``(name, keyid)`` of the key store's other keys.

    Returns:
        ``(level, text, roles)``: ``ok`` with the roles it holds (None and no text: no policy
        in force);
        ``warning`` when it is another name's key, or holds no role in the policy in force (a
        key made for the next policy also holds none: the line says both).
    """
    from trajledger.verify.policy import KEY_ROLES

    what = f"key {name} ({key.algorithm}, fingerprint {key.keyid[:16]})"
    found = current_policy(ledger)
    roles = None if found is None else [r for r in KEY_ROLES if found[1].holds(r, key.keyid)]
    same = sorted(n for n, keyid in others if keyid == key.keyid and n != name)
    if same:
        return ("warning", f"{what} is the key of {', '.join(same)} too: keys/{name}.pub was "
                "copied from or links to it; give out a key under one name only (its owner "
                "knows which), and compare fingerprints with the policy's", roles)
    if found is None:
        return ("ok", "", roles)  # a ledger's first keys, made for its first policy
    policy = found[1]
    where = f"policy {policy.name!r} serial {policy.serial}, the policy in force"
    if roles:
        return ("ok", f"{what}: {' and '.join(roles)} in {where}", roles)
    return ("warning", f"{what} holds no role in {where}: if it is not a key made for the next "
            f"policy, keys/{name}.pub was replaced; do not give it out: compare its fingerprint "
            "with the policy's ('trajledger policy show') and restore the file", roles)


# -- policy files: keys inline, and what a new policy changes ----------------------------------


def inline_keys_toml(keys: Sequence[tuple[str, PublicKey]]) -> str:
    """A TOML array of public keys written inline (PEM), each under a comment with its name,
    algorithm and fingerprint (keyid): a policy file that names no file someone else could
    replace."""
    items = "".join(  # (a name on one line: a comment cannot end it and write TOML)
        f"  # {' '.join(name.split())}: {k.algorithm}, fingerprint {k.keyid}\n"
        f'  """{k.to_pem().decode("ascii")}""",\n'
        for name, k in keys
    )
    return f"[\n{items}]"


def policy_toml(
    name: str,
    roles: Mapping[str, tuple[Sequence[tuple[str, PublicKey]], int, str]],
    log_vkey: str | Sequence[str],
    *,
    header: str,
    max_approval_age: str = "90d",
    serial: int = 1,
    role_fields: Mapping[str, Mapping[str, object]] | None = None,
    tail: Mapping[str, object] | None = None,
    log_threshold: int = 1,
    witness: Mapping[str, object] | None = None,
) -> str:
    """A trust policy file with every key inline.

    Args:
        name: the policy's name.
        serial: its serial (a successor's: the one in force's plus one).
        roles: per key role, its ``(name, key)`` members, threshold and a comment.
        log_vkey: the log's verifier key (or keys: the trusted logs, this ledger's first).
        header: the comment at the top.
        max_approval_age: the approval lifetime.
        role_fields: more fields of a role's table (``identities``, ``encryption_keys``: a
            successor's, kept from the policy in force), in the JSON form's values.
        tail: more top-level settings (``[release]``, ...), in the JSON form's values.
        log_threshold: how many of the log keys sign a checkpoint (a successor's: the one in
            force's, rev50 finding 5).
        witness: the ``[roles.witness]`` table (a successor's, kept), in its JSON form.
    """
    lines = [header, f"name = {toml_string(name)}", f"serial = {serial}",
             f"max_approval_age = {toml_string(max_approval_age)}"]
    for key, value in (tail or {}).items():
        if not isinstance(value, Mapping):
            lines.append(f"{toml_key(key)} = {toml_value(value, key)}")
    more = role_fields or {}
    for role, (keys, threshold, comment) in roles.items():
        lines += ["", f"[roles.{role}]" + (f"  # {comment}" if comment else ""),
                  f"keys = {inline_keys_toml(keys)}", f"threshold = {threshold}"]
        lines += [f"{field} = {toml_value(v, f'roles.{role}.{field}')}"
                  for field, v in more.get(role, {}).items()]
    vkeys = [log_vkey] if isinstance(log_vkey, str) else list(log_vkey)
    lines += ["", "[roles.log]  # the log whose signed checkpoints are trusted",
              f"vkeys = [{', '.join(map(toml_string, vkeys))}]", f"threshold = {log_threshold}",
              ""]
    lines += ["[roles.witness]  # witnesses that cosign the log's checkpoints"] + [
        f"{toml_key(k)} = {toml_value(v, f'roles.witness.{k}')}" for k, v in witness.items()
    ] + [""] if witness else []
    for key, value in (tail or {}).items():
        if isinstance(value, Mapping):
            lines += [f"[{toml_key(key)}]"] + [
                f"{toml_key(k)} = {toml_value(v, f'{key}.{k}')}" for k, v in value.items()
                if v is not None] + [""]
    return "\n".join(lines)


def toml_key(key: str) -> str:
    """``key`` as a TOML key: bare when it can be, else quoted."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_string(key)


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string: JSON's escapes, which TOML reads back, and DEL's,
    which JSON leaves as it is and TOML refuses."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(value: object, at: str = "value") -> str:
    """``value`` (a policy's JSON form: strings, numbers, booleans, lists, objects) as a TOML
    value; an object is an inline table, its null members left out (absent).

    Raises:
        LedgerError: a null in a list (a ``sigstore_trusted_root`` read from JSON holds what
            it likes), which TOML cannot write; ``at`` names where (rev50 finding 2).
    """
    if isinstance(value, str):  # a PEM, as `inline_keys_toml` writes it; else escaped (rev50)
        return f'"""{value}"""' if _PEM.fullmatch(value) else toml_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return {"inf": "inf", "-inf": "-inf", "nan": "nan"}.get(repr(value), repr(value))
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v, f'{at}.{k}')}"
                                for k, v in value.items() if v is not None) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v, f"{at}[{i}]") for i, v in enumerate(value)) + "]"
    if value is None:
        raise LedgerError(f"{at} is null, which a TOML file cannot hold")
    raise TypeError(f"no TOML form for {type(value).__name__}")


def path_entries(policy: TrustPolicy) -> list[str]:
    """The key files a policy read from its TOML form names by path (keys/README.md: a path
    is read again each time the file is; `inline_keys_toml` pins the keys themselves)."""
    from trajledger.verify.policy import KEY_ROLES

    roles = policy.source.get("roles")
    out: list[str] = []
    if not isinstance(roles, Mapping):
        return out
    specs = [s for r in KEY_ROLES if isinstance(roles.get(r), Mapping)
             for field in ("keys", "encryption_keys") for s in roles[r].get(field, [])]
    revoked = policy.source.get("revoked_keys")
    if isinstance(revoked, list):
        specs += [item.get("key") for item in revoked if isinstance(item, Mapping)]
    for spec in specs:
        if (isinstance(spec, str) and not spec.lstrip().startswith("-----BEGIN")
                and not _HEX64.fullmatch(spec.removeprefix("sha256:"))):
            out.append(spec)
    return out


def _members(policy: TrustPolicy | None, role: str) -> dict[str, str]:
    """``{identity: what to show}`` of a role's members: keys by keyid, Sigstore identities by
    issuer and subject, note keys by their public key (a name is no identity)."""
    if policy is None:
        return {}
    r = policy.role(role)
    out = {k.keyid: f"key {k.keyid}" for k in r.keys}
    out |= {f"enc {k.keyid}": f"X25519 encryption key {k.keyid}" for k in r.encryption_keys}
    out |= {f"id {i.issuer} {i.subject}": f"identity {i.subject} ({i.issuer})"
            for i in r.identities}
    for v, verifier in zip(r.vkeys, r.note_verifiers(), strict=True):
        out[f"vkey {verifier.public_key.hex()}"] = f"vkey {v}"
    return out


def membership_changes(current: TrustPolicy | None, new: TrustPolicy) -> tuple[list[str], bool]:
    """What ``new`` changes against the policy in force, role by role, every member named by
    its fingerprint (keyid, or the note key itself): the lines to show before recording it,
    and whether any role gains or loses a member or lowers its threshold (fewer keys then
    decide: as much a change of who is trusted as a new member).

    The first policy (``current`` None) lists every member as added.
    """
    from trajledger.verify.policy import ROLES

    lines: list[str] = []
    changed = False
    against = (f"against serial {current.serial} in force" if current is not None
               else "the first policy of this ledger")
    lines.append(f"policy {new.name!r} serial {new.serial}, {against}:")
    for role in ROLES:
        old, now = _members(current, role), _members(new, role)
        added = [now[k] for k in now if k not in old]
        removed = [old[k] for k in old if k not in now]
        threshold = new.role(role).threshold
        was = current.role(role).threshold if current is not None else None
        changed |= bool(added or removed) or (was is not None and threshold < was)
        th = (f"threshold {threshold}" if was in (None, threshold)
              else f"threshold {was} -> {threshold}")
        if not added and not removed:
            lines.append(f"  {role:9} unchanged: {len(now)} member(s), {th}")
            continue
        lines.append(f"  {role:9} {th}")
        lines += [f"  {role:9}   + {m}" for m in added]
        lines += [f"  {role:9}   - {m}" for m in removed]
    return lines, changed


def inline_paths(
    file: Path, policy: TrustPolicy, key_lookup: KeyLookup | None = None
) -> list[tuple[str, PublicKey | EncryptionKey]]:
    """Rewrite the policy ``file`` (already parsed as ``policy``) with each key it names by
    path written inline in its place, under a comment with its name and fingerprint; nothing
    else in the file changes.

    The result must parse to the same policy (same digest): a key file replaced between the
    two readings is refused, not written.

    Args:
        file: the policy file.
        policy: what it parsed to.
        key_lookup: resolves the keys it names by keyid (they stay as they are: a keyid pins
            a key as well as its PEM does).

    Returns:
        ``(path as written, key)`` of each key written inline.

    Raises:
        FormatError: a key file cannot be read, or the result is not the same policy.
        OSError: the file cannot be written.
    """
    from trajledger.verify.encryption_key import EncryptionKey
    from trajledger.verify.errors import FormatError
    from trajledger.verify.keys import PublicKey
    from trajledger.verify.policy import policy_digest

    from .fs import write_file_atomic

    text = file.read_text("utf-8")
    done: list[tuple[str, PublicKey | EncryptionKey]] = []
    for spec in dict.fromkeys(path_entries(policy)):
        path = Path(spec) if Path(spec).is_absolute() else file.parent / spec
        try:
            data = path.read_bytes()
        except OSError as e:
            raise FormatError(f"policy {file}: cannot read key file {path}: {e.strerror}") from e
        key: PublicKey | EncryptionKey
        try:
            key = PublicKey.from_pem(data, f"policy {file}: key {spec}")
            pem = key.to_pem().decode("ascii")
        except FormatError:  # an evaluator's X25519 encryption key
            key = EncryptionKey.from_pem(data, f"policy {file}: key {spec}")
            pem = key.to_pem()
        inline = f'"""{pem}"""  # {Path(spec).stem}: {key.algorithm}, fingerprint {key.keyid}\n'
        for quoted in (json.dumps(spec), f"'{spec}'"):
            text = text.replace(quoted, inline)
        done.append((spec, key))
    if not done:
        return done
    again = TrustPolicy.from_toml(text.encode("utf-8"), file.parent, f"policy {file}",
                                  key_lookup=key_lookup)
    if policy_digest(again) != policy_digest(policy):
        raise FormatError(
            f"policy {file}: with its keys inline it is another policy (a key file changed "
            "while it was read); nothing was written"
        )
    write_file_atomic(file, text.encode("utf-8"), durable=False, output=True)
    return done


def who_may_sign(ledger: LedgerHome, signer_ids: frozenset[str]) -> str:
    """The end of a successor's refusal for too few signers: the keys in force that may sign,
    as this ledger's key store holds them. A team that lost its only approver key was told,
    by the lost key's line, to make a new key "which a new policy names", and then by this
    refusal only ``signed by 0 of the current policy's approvers, want 1`` (out48)."""
    found = current_policy(ledger)
    if found is None:
        return ""
    policy = found[1]
    role = policy.signing_role()
    signing = policy.role(role)
    if len(signer_ids & signing.keyids) >= max(signing.threshold, 1):
        return ""  # refused for another reason (the serial, a dropped revocation)
    try:
        here = [k for k in ledger.keys.list() if k.keyid in signing.keyids]
    except (LedgerError, ProvenanceError, OSError):
        return ""
    usable = [k.name for k in here if k.private]
    lost = [k.name for k in here if not k.private]
    line = (f": sign it with the {role} keys of the policy in force, each by its own --key "
            f"('trajledger policy set FILE --key {' --key '.join(usable)}'); a new key does not "
            f"count until a successor they sign names it") if usable else (
        f": the policy in force's {role} keys are the only ones that count, and none of them "
        f"can sign here")
    if lost:
        line += (f"; {', '.join(lost)}: its private half is not here: restore it from your "
                 f"backup")
    if not here:
        line += (f" (this ledger's key store holds none of its {len(signing.keyids)} {role} "
                 f"key(s): sign where they are)")
    return line
