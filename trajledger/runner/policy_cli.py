"""The ``policy`` commands: init, check, set, inline, show; and `policy_from_file`, the policy
FILE as read where no ledger's policy history applies (also ``verify``'s bundle and Sigstore
paths, ``runner.commands``).

Heavy modules load inside the commands.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from trajledger.ledger.clikit import (
    JSON_OPTION,
    KEY_NAME,
    OUT_PATH,
    Context,
    Group,
    emit_json,
    emit_result,
    ok,
    pass_ctx,
    recorded_json,
    visible,
    warn,
)
from trajledger.ledger.errors import LedgerError, shell_word

__all__ = ["policy", "policy_from_file"]


def policy_from_file(ctx: Context, file: Path) -> Any:
    """The policy FILE as read where no ledger's policy history applies (policy check, set and
    inline, bundle and Sigstore verification): keys named by keyid are looked up in the key
    store of the ledger directory, as `load_policy` does for admit, train, verify, export and
    import. An invalid one is a `PolicyFileError`, exit 2 (the user's file to fix; left36)."""
    from trajledger.ledger.policy_state import keystore_lookup, read_policy_file

    return read_policy_file(file, keystore_lookup(ctx.keystore()))


@click.group(cls=Group)
def policy() -> None:
    """Check, record and show trust policies.

    \b
    Examples:
      trajledger policy init
      trajledger policy set policy.toml --key approver-a --key approver-b --yes
    """


def _describe(p: Any) -> list[str]:
    """A trust policy in a few lines: name, serial, digest, each role, the limits."""
    from trajledger.verify.policy import ROLES, policy_digest

    fmt = f" format {p.format}" if p.format > 1 else ""
    lines = [f"policy {p.name} serial {p.serial}{fmt} ({policy_digest(p)})"]
    for r in ROLES:
        if r == "evaluator" and p.format < 2:
            continue  # a format-1 policy has no evaluator role
        role = p.role(r)
        members = (
            [k.keyid[:16] for k in role.keys]
            + [f"{i.issuer} {i.subject}" for i in role.identities]
            + [v.split("+")[0] for v in role.vkeys]
        )
        lines.append(
            f"  {r:9} threshold {role.threshold} of {len(members)}: {', '.join(members) or '-'}"
        )
        if role.encryption_keys:
            lines.append(f"  {'':9} encryption keys (x25519): "
                         + ", ".join(k.keyid[:16] for k in role.encryption_keys))
    return [visible(line) for line in lines] + _settings(p)  # names: the policy author's text


def _settings(p: Any) -> list[str]:
    """What a policy holds besides its roles, a line each (`_describe`'s last lines): what a
    successor keeps, changes or drops (``policy init``, ``policy set``: out45)."""
    lines: list[str] = []
    if p.release is not None:
        lines.append(f"  release   {p.release.approvals} approver(s); requires "
                     + "; ".join(f"{r.metric} on {r.suite}"
                                 + (f" (pinned {r.digest[:19]}…)" if r.digest else "")
                                 + "".join(f" {op} {v:g}" for op, v in (
                                     (">=", r.min), ("<=", r.max), ("drop <=", r.max_drop))
                                     if v is not None)
                                 for r in p.release.require)
                     + ("; every evaluation it cites compared with all its training data "
                        + ("(require_contamination_check)" if p.release.require_contamination_check
                           else '([contamination] refuse = "near" implies it: fix60)')
                        if p.release.require_contamination_check or (
                            p.contamination is not None and p.contamination.refuse == "near")
                        else ""))
    lines += [p.contamination.describe()] if p.contamination is not None else []
    for rk in p.revoked_keys:
        lines.append(f"  revoked   {rk.keyid[:16]}: {rk.describe()}")
    for ri in p.revoked_identities:
        lines.append(f"  revoked   {ri.identity.issuer} {ri.identity.subject}: {ri.describe()}")
    lines.append(
        f"  max approval age {p.max_approval_age}s; "
        f"{len(p.allowed_predicate_types)} predicate type(s) allowed"
    )
    lines += [f"  licences  {', '.join(p.accepted_licences) or 'none'} accepted"
              ] if p.accepted_licences is not None else []
    lines += [f"  publish   {', '.join(p.publish) or 'nothing'}"] if p.publish is not None else []
    return [visible(line) for line in lines]


def _settings_changed(old: Any, new: Any) -> list[str]:
    """The lines of `_settings` a successor drops (``-``) and adds (``+``)."""
    was, now = _settings(old), _settings(new)
    return ([f"  settings  - {line.strip()}" for line in was if line not in now]
            + [f"  settings  + {line.strip()}" for line in now if line not in was])


_FORBIDS = {
    "approver": "nothing recorded here can be approved for training, imported or released, "
    "and the policy's successors are signed by its producers",
    "trainer": "no checkpoint can be recorded (training is refused)",
}
"""What a policy without the role forbids (``policy init --roles``)."""


class _Successor:
    """What ``policy init`` keeps of the policy in force in the successor it writes (out52):
    what the user did not ask to change, each said in one line (`notes`), and a role their
    ``--roles`` leaves out dropped with a line saying how to keep it."""

    def __init__(self, pairs: dict[str, list[tuple[str, Any]]],
                 asked: dict[str, tuple[tuple[str, ...], tuple[str, ...]]], roles_said: bool,
                 roles: str) -> None:
        self.pairs, self.asked, self.roles_said, self.roles = pairs, asked, roles_said, roles
        self.thresholds: dict[str, int] = {}
        self.identities: dict[str, int] = {}
        self.fields: dict[str, dict[str, object]] = {}
        self.tail: dict[str, object] = {}
        self.log_vkeys: list[str] = []
        self.log_threshold = 1
        self.witness: dict[str, object] = {}
        self.max_age = "90d"
        self.notes: list[str] = []
        self.dropped: dict[str, str] = {}  # a role --roles leaves out: how to keep it

    def follow(self, current: Any, own_log: str, names: dict[str, str],
               kept_name: Callable[[str], str] | None = None) -> None:
        """Keep ``current``'s roles, log keys and settings the command was not told to
        change. ``names``: this ledger's key names by keyid; ``kept_name(keyid)``: what names
        a key kept that is none of them, after ``kept from serial N`` (`_kept_name`)."""
        from trajledger.verify import predicates
        from trajledger.verify.policy import KEY_ROLES

        doc = current.to_json()
        was = f"serial {current.serial}"
        kept: list[str] = []
        for r in KEY_ROLES:
            role = current.role(r)
            if not role.keys and not role.identities:
                continue
            if r not in self.pairs and self.roles_said:
                seal = (f", {len(role.encryption_keys)} encryption key(s)"
                        if role.encryption_keys else "")
                self.dropped[r] = (
                    f"drops the {r} role of {was} ({len(role.keys) + len(role.identities)} "
                    f"key(s){seal}): to keep it, write it again with --{r} KEY or --roles "
                    f"{self.roles},{r}")
                continue
            if r not in self.pairs:
                self.pairs[r] = []
                kept.append(f"the {r} role")
            ours = {k.keyid for _, k in self.pairs[r]}
            others = [k for k in role.keys if k.keyid not in ours]
            if others and self.asked[r][0]:
                self.notes.append(
                    f"drops {len(others)} {r} key(s) of {was} not given with --{r} ("
                    + ", ".join(k.keyid[:16] for k in others) + f"): to keep them, give them "
                    f"with --{r} too, or copy them into [roles.{r}] (their PEM: 'trajledger "
                    "policy show --json')")
            elif others:
                self.pairs[r] += [(names.get(k.keyid) or f"kept from {was}" + (
                    kept_name(k.keyid) if kept_name else ""), k) for k in others]
                kept += [f"{len(others)} {r} key(s) not in this ledger"] if ours else [
                    f"the {r} role's {len(others)} key(s)"] if f"the {r} role" not in kept else []
            # (at most its members written: kept, or said when keys dropped lower it, as the
            # log threshold: rev51 finding 2)
            self.identities[r] = len(role.identities)  # (kept in self.fields)
            members = len(self.pairs[r]) + len(role.identities)
            self.thresholds[r] = min(max(role.threshold, 1), members) if members else 1
            if self.thresholds[r] < role.threshold:
                self.notes.append(
                    f"lowers the {r} threshold of {was} from {role.threshold} to "
                    f"{self.thresholds[r]}: the successor holds {members} of its member(s)")
            entry = doc["roles"][r]
            self.fields[r] = {f: entry[f] for f in ("identities", "encryption_keys")
                              if entry.get(f)}
            kept += [f"{len(entry['encryption_keys'])} {r} encryption key(s)"
                     ] if entry.get("encryption_keys") else []
        log = current.role("log").vkeys
        self.log_vkeys = [own_log] + [v for v in log if v != own_log]
        kept += [f"{len(self.log_vkeys) - 1} other log key(s)"] if len(self.log_vkeys) > 1 else []
        # (its threshold too: a successor asked for 1 of 2 log keys, a single key's signature
        # on a checkpoint, without a word: rev50 finding 5)
        self.log_threshold = min(max(current.role("log").threshold, 1), len(self.log_vkeys))
        kept += [f"log threshold {self.log_threshold}"] if self.log_threshold > 1 else []
        witness = current.role("witness")  # (out52's Left: kept, as every other role)
        self.witness = doc["roles"]["witness"] if witness.vkeys else {}
        kept += [f"[roles.witness] ({len(witness.vkeys)} witness key(s), threshold "
                 f"{witness.threshold})"] if witness.vkeys else []
        age = current.max_approval_age
        unit, n = next((u, n) for u, n in (("w", 604800), ("d", 86400), ("h", 3600),
                                           ("m", 60), ("s", 1)) if age % n == 0)
        self.max_age = f"{age // n}{unit}"
        self.tail = {k: v for k, v in doc.items() if k not in {
            "format", "name", "serial", "max_approval_age", "roles", "allowed_predicate_types"}}
        if "evaluator" not in self.pairs and (current.release and current.release.require):
            del self.tail["release"]  # its rules count evaluations, which evaluators sign
            self.notes.append(f"drops [release] of {was}: its rules count evaluations, which "
                              "the evaluator role signs; keep that role to keep it")
        release = self.tail.get("release")
        approvers = len(self.pairs.get("approver", ())) + self.identities.get("approver", 0)
        if isinstance(release, dict) and release.get("approvals", 1) > approvers:
            self.notes.append(  # (kept as it is: the author's bar; rev51 finding 7)
                f"keeps [release] approvals = {release['approvals']} of {was}, but the successor "
                f"holds {approvers} approver(s): no release can be recorded under it until it "
                "holds as many (give them with --approver, or lower it)")
        if set(doc["allowed_predicate_types"]) != predicates.ALL:
            self.tail["allowed_predicate_types"] = doc["allowed_predicate_types"]
        kept += [f"max_approval_age {self.max_age}"] if self.max_age != "90d" else []
        kept += [f"[{k}]" if isinstance(v, dict) else k for k, v in self.tail.items()]
        if kept:
            self.notes.insert(0, f"keeps from {was} (in force) what this command was not "
                              f"asked to change: {', '.join(kept)}; edit the file to change it "
                              "('policy set' lists each change)")


def _kept_name(ledger: Any, keyid: str) -> str:
    """What follows ``kept from serial N`` for a key of the policy in force that is not this
    ledger's: the records it signed here and the logs they came from (out55: out52's and
    out53's Left, a key kept unnamed), "" when it signed none."""
    from trajledger.ledger.catalog import Origins, origin_name

    signed = ledger.trust_state().signed_by(keyid)
    origins = Origins(ledger)
    logs = sorted({origin_name(v) for i in signed for v in origins.of(i)})
    return (f" (signed {len(signed)} record(s) here" + (f", from {', '.join(logs)}" if logs
                                                         else "") + ")") if signed else ""


@policy.command("init")
@click.option("--roles", default="producer,approver,trainer", show_default=True,
              metavar="ROLE[,ROLE...]",
              help="The roles this ledger uses: producer (always), approver, trainer, "
              "evaluator (or give --evaluator). A data vendor that only records and exports "
              "needs 'producer'.")
@click.option("--producer", "producers", multiple=True, metavar="KEY",
              help="Producer key name (repeat); default: keys named vendor* or producer*.")
@click.option("--approver", "approvers", multiple=True, metavar="KEY",
              help="Approver key name (repeat); default: keys named approver*.")
@click.option("--trainer", "trainers", multiple=True, metavar="KEY",
              help="Trainer key name (repeat); default: keys named trainer*.")
@click.option("--evaluator", "evaluators", multiple=True, metavar="KEY",
              help="Evaluator key name (repeat): signs evaluations ('trajledger eval'); "
              "the policy is then format 2. With --roles ...,evaluator: keys named "
              "evaluator*.")
@click.option("--approvals", type=click.IntRange(min=1),
              help="Approvals needed to train on a dataset [default: 2, or 1 with one approver].")
@click.option("--out", type=OUT_PATH, default=Path("policy.toml"), show_default=True,
              help="Where to write the policy (refused if it exists).")
@pass_ctx
def policy_init(
    ctx: Context,
    roles: str,
    producers: tuple[str, ...],
    approvers: tuple[str, ...],
    trainers: tuple[str, ...],
    evaluators: tuple[str, ...],
    approvals: int | None,
    out: Path,
) -> None:
    """Write a starting trust policy from the ledger's keys (by role) and its log key.

    Each key is written inline (its PEM), under a comment with its name and fingerprint, so
    the file names no key file someone else could replace. Compare the fingerprints with
    'trajledger key list' (and each key's owner), check it ('trajledger policy check FILE'),
    edit it, then record it ('trajledger policy set FILE --key APPROVER...', or --key PRODUCER
    for a policy without approvers).

    Only the roles in --roles are asked for (all missing keys are named at once), and each
    role left out is said to forbid what it would have allowed. On a ledger with a policy in
    force, the file is its successor (its name, the next serial) and keeps what that policy
    holds and this command was not asked to change (its evaluator role and encryption keys,
    other keys of a role when no key of it is given, each role's threshold (lowered, said,
    only as far as the keys given leave members), other logs' keys and the log threshold,
    its witnesses, [release], revocations, the approval age, ...), said in a NOTE; a role
    --roles leaves out is dropped, a line saying how to keep it.

    \b
    Examples:
      trajledger policy init --producer vendor --approver approver-a --trainer trainer
      trajledger policy init --roles producer      # a data vendor: record and export
      trajledger policy init --evaluator evaluator  # and a key that signs evaluations
    """
    from trajledger.ledger.fs import write_output
    from trajledger.ledger.policy_state import current_policy, policy_toml
    from trajledger.ledger.suggestions import did_you_mean, suggest
    from trajledger.ledger.user_state import notice
    from trajledger.verify.policy import load_policy_file

    ledger = ctx.ledger()
    listed = ledger.keys.list()
    names = [k.name for k in listed]
    used = [r.strip() for r in roles.split(",") if r.strip()]
    used += ["evaluator"] if evaluators and "evaluator" not in used else []
    unknown = sorted(set(used) - {"producer", "approver", "trainer", "evaluator"})
    if unknown or "producer" not in used:
        raise click.BadParameter(f"{', '.join(unknown) or 'no producer'}: want producer, and "
                                 "any of approver, trainer, evaluator", param_hint="--roles")
    asked = {"producer": (producers, ("vendor", "producer")),
             "approver": (approvers, ("approver",)), "trainer": (trainers, ("trainer",)),
             "evaluator": (evaluators, ("evaluator",))}
    for role, (given, _p) in asked.items():
        if given and role not in used:
            raise click.UsageError(f"--{role} is given, but --roles leaves {role} out")
    chosen = {r: list(asked[r][0]) or [n for n in names if n.startswith(asked[r][1])]
              for r in asked if r in used}
    for role, keys in chosen.items():
        for n in keys:
            if n not in names:
                close = did_you_mean(suggest(n, names))
                raise click.BadParameter(
                    f"no key {n!r} in {ledger.keys.directory}" + (f"; {close}" if close else ""),
                    param_hint=f"--{role}")
    found = current_policy(ledger)  # a successor: the next serial, the name, what it keeps
    missing = [r for r, keys in chosen.items() if not keys and not (found and (
        found[1].role(r).keys or found[1].role(r).identities))]  # (kept: a buyer's, out53)
    if missing:
        raise click.UsageError(
            "no " + " and no ".join(f"{r} key (--{r} KEY)" for r in missing) + f" (keys: "
            f"{', '.join(names) or 'none'}; create them with 'trajledger key new NAME', or leave "
            "a role out with --roles)"
        )
    members = chosen
    roles_said = click.get_current_context().get_parameter_source("roles") not in (
        ParameterSource.DEFAULT, None)
    pairs = {r: [(k, ledger.keys.public(k)) for k in keys] for r, keys in members.items()}
    parts = _Successor(pairs, asked, roles_said, roles) if found is not None else None
    if parts is not None and found is not None:
        parts.follow(found[1], ledger.log.vkey, {k.keyid: k.name for k in listed},
                     lambda keyid: _kept_name(ledger, keyid))
    need = approvals or (parts.thresholds.get("approver") if parts else None) or min(
        2, len(pairs.get("approver", [])))
    if "approver" not in pairs:
        if approvals is not None:
            raise click.UsageError("--approvals applies when the policy has approvers")
    elif need > len(pairs["approver"]) + (ids := parts.identities.get("approver", 0)
                                          if parts else 0):  # (kept identities: rev50's Left)
        raise click.BadParameter(
            f"{need} approvals, but only {len(pairs['approver'])} approver key(s)"
            + (f" and {ids} identities" if ids else ""),
            param_hint="--approvals",
        )
    if out.exists():
        raise LedgerError(f"{out}: already exists; pick another --out or remove it")
    name, serial = (ledger.config.origin, 1) if found is None else (
        found[1].name, found[1].serial + 1)
    fmt = max(2 if "evaluator" in pairs else 1, found[1].format if found else 1)
    try:
        text = policy_toml(
            name,
            {role: (keys, need if role == "approver" else (
                parts.thresholds.get(role, 1) if parts else 1), "")
             for role, keys in pairs.items()},
            parts.log_vkeys if parts else ledger.log.vkey,
            header="# A starting trust policy (trajledger policy init): see keys/README.md for "
            "every setting.\n# Keys are inline: compare each fingerprint with its owner's "
            "'trajledger key list'." + (f"\nformat = {fmt}" + (
                "  # the evaluator role needs it" if "evaluator" in pairs else "")
                if fmt > 1 else ""),
            serial=serial,
            max_approval_age=parts.max_age if parts else "90d",
            role_fields=parts.fields if parts else None,
            tail=parts.tail if parts else None,
            log_threshold=parts.log_threshold if parts else 1,
            witness=parts.witness if parts else None,
        )
    except LedgerError as e:  # (a kept setting TOML cannot hold: rev50 finding 2)
        raise LedgerError(f"{out}: not written: serial {serial - 1} (in force) holds what this "
                          f"command cannot keep: {e}; write the successor by hand from its "
                          "file (raise its serial)") from e
    write_output(out, text.encode("utf-8"), durable=False, output=True)
    try:
        written = load_policy_file(out)
    except Exception:
        out.unlink()
        raise
    members = {r: [k for k, _ in keys] for r, keys in pairs.items()}
    for role, keys in members.items():
        for k in keys:
            if k in names:
                click.echo(f"{role:9} {k:16} {ledger.keys.public(k).keyid}", err=True)
    left_out = dict(parts.dropped) if parts else {}
    for role, forbids in _FORBIDS.items():
        if role not in members:  # and the line of the role in force it drops, if any
            notice(f"{out}: no {role} role: {forbids}"
                   + (f"; it {left_out.pop(role)}" if role in left_out else ""))
    for line in (parts.notes if parts else []) + list(left_out.values()):
        notice(f"{out}: {line}")
    unused = [n for n in names if n.startswith("evaluator")] if "evaluator" not in members else []
    if unused:  # out51: a newcomer's evaluator key, left out without a word
        notice(f"{out}: no evaluator role, so no evaluation can be recorded ('trajledger eval'): "
               f"key(s) {', '.join(unused)} are left out; to sign evaluations with them, write "
               f"it again with --evaluator {' --evaluator '.join(unused)}")
    dropped = [] if found is None else [line for line in _settings_changed(found[1], written)
                                        if line.startswith("  settings  - ")]
    if dropped:
        notice(f"{out}: a successor of policy {name!r} serial {serial - 1} (in force), with the "
               "roles asked for only: it drops what else that policy holds, unless you copy it "
               "in (keys/README.md; 'policy set' lists each change): "
               + "; ".join(line.removeprefix("  settings  - ") for line in dropped))
    counts = [f"{len(members['producer'])} producer"]
    if "approver" in members:
        counts.append(f"{len(members['approver'])} approver ({need} needed)")
    if "trainer" in members:
        counts.append(f"{len(members['trainer'])} trainer")
    if "evaluator" in members:
        counts.append(f"{len(members['evaluator'])} evaluator")
    signer = "APPROVER" if "approver" in members else "PRODUCER"
    ok(f"policy {out} written: {', '.join(counts)} key(s), inline; next: "
       f"'trajledger policy set {shell_word(out)} --key {signer}...'")


@policy.command("check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the parsed policy as JSON.")
@pass_ctx
def policy_check(ctx: Context, file: Path, as_json: bool) -> None:
    """Parse and check a trust policy file; print its roles.

    An invalid policy file exits 1 with one line naming the setting; an unreadable one exits 3.
    Keys named by keyid are looked up in the ledger's key store.

    \b
    Example:
      trajledger policy check policy.toml
    """
    from trajledger.ledger.errors import PolicyFileError
    from trajledger.verify.errors import FormatError
    from trajledger.verify.policy import policy_digest

    try:
        p = policy_from_file(ctx, file)
    except PolicyFileError as e:  # the file is what is judged here: its verdict, exit 1
        raise FormatError(str(e)) from e
    _refuse_unreadable(p, file)
    if as_json:
        emit_json(p.to_json() | {"digest": policy_digest(p)})
    else:
        click.echo("\n".join(_describe(p)))
    _note_paths(file, p)
    ok(f"policy {file}: valid, serial {p.serial}")


def _refuse_unreadable(p: Any, file: Path, *, usage: bool = False) -> None:
    """Refuse a ``[release]`` bound or ``[contamination]`` threshold written as a string that
    is no JSON number (left33, left34); with ``usage`` (``policy set``: the user's file to
    fix, not the file judged) as a `PolicyFileError`, exit 2 (left36)."""
    from trajledger.ledger.errors import PolicyFileError
    from trajledger.ledger.policy_state import refuse_unreadable
    from trajledger.verify.errors import FormatError

    try:
        refuse_unreadable(p, f"policy {file}")
    except FormatError as e:
        if not usage:
            raise
        raise PolicyFileError(str(e)) from e


def _note_paths(file: Path, p: Any) -> None:
    """A note for keys named by path (read again on each read); a warning per odd suite name."""
    from trajledger.ledger.names import suite_problems
    from trajledger.ledger.policy_state import path_entries
    from trajledger.ledger.user_state import notice

    for line in suite_problems(p):
        warn(line)
    paths = path_entries(p)
    if paths:
        notice(
            f"{file}: names {len(paths)} key(s) by path ({', '.join(paths[:3])}"
            f"{', ...' if len(paths) > 3 else ''}): whoever can replace those files changes "
            f"this policy; write the keys inline with "
            f"'trajledger policy inline {shell_word(file)}'"
        )


@policy.command("set")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--key",
    "keys",
    multiple=True,
    required=True,
    type=KEY_NAME,
    help="Approver key signing the policy (repeat up to the threshold); producer keys for a "
    "policy without approvers.",
)
@click.option("--yes", is_flag=True,
              help="Record a policy that adds or removes members of a role (shown first).")
@JSON_OPTION
@pass_ctx
def policy_set(ctx: Context, file: Path, keys: tuple[str, ...], yes: bool, as_json: bool) -> None:
    """Record FILE as the policy in force (signed by the current approvers' threshold, or its
    producers' when it has no approvers: a data vendor's ledger).

    FILE needs a higher serial than the policy in force. Before anything is signed, each
    role's members that FILE adds or removes are shown by fingerprint (the first policy: all
    of them), each other setting it drops or adds (settings - / +), and, when it adds
    [contamination] refuse = "near", each recorded release that then fails verification (an
    evaluation it uses found near duplicates of its training data); a change of
    membership, or a lowered threshold, needs --yes, or typing 'yes' on a terminal. Keys
    named by path in FILE are read now: compare the fingerprints before you confirm.

    To replace a producer, approver or trainer key, list the new key in its role instead of
    the old one: records the old key signed before this one's log index stay valid, later ones
    do not count. After a theft, also add the old key to revoked_keys with compromised_since
    (a log index or time): nothing it signed from then on counts (keys/README.md;
    docs/SECURITY.md, "A stolen key").

    \b
    Example:
      trajledger policy set policy-2.toml --key approver-a --key approver-b --yes
    """
    from trajledger.ledger.clikit import interactive
    from trajledger.ledger.policy_state import current_policy, membership_changes
    from trajledger.verify.errors import PolicyError

    ledger = ctx.ledger()
    if not os.path.lexists(file):  # out51: the README's 'policy init' step skipped
        from trajledger.ledger.errors import shell_word

        raise LedgerError(f"policy {file}: no such file; write one with 'trajledger policy "
                          f"init --out {shell_word(file)}' (this ledger's keys, by role), "
                          "check and edit it, then run this again")
    new = policy_from_file(ctx, file)
    _refuse_unreadable(new, file, usage=True)
    _note_paths(file, new)
    found = current_policy(ledger)
    lines, changed = membership_changes(found[1] if found is not None else None, new)
    lines += _settings_changed(found[1], new) if found is not None else []
    failing = _near_releases(ledger, found[1] if found is not None else None, new)
    lines += [f"  releases  {line}" for line in failing]
    for line in lines:
        click.echo(visible(line), err=True)
    if changed and not yes:
        confirmed = interactive() and click.prompt(
            "These members change: type 'yes' to record the policy", default="", err=True,
            show_default=False,
        ) == "yes"
        if not confirmed:
            raise PolicyError(
                f"policy {file}: changes the members of a role, or lowers its threshold "
                "(listed above, by fingerprint); "
                "nothing was recorded. Compare each fingerprint with its owner, then run again "
                "with --yes"
            )
    kept: list[str] = []  # each pin kept from the policy in force that fails now (left34)

    def kept_pin(line: str) -> None:
        kept.append(line)
        warn(line)

    rec = ledger.set_policy(new, keys=list(keys), on_warning=kept_pin)
    ok(f"policy {file} recorded at log index {rec.index}")
    emit_result(as_json, rec.digest, recorded_json("trust-policy", rec, new.name,
                                                   str(new.serial))
                | {"keptPins": kept, "failingReleases": failing})


def _near_releases(ledger: Any, old: Any, new: Any) -> list[str]:
    """A successor that adds ``[contamination] refuse = "near"``: each recorded release that
    uses an evaluation which found near duplicates of its checkpoint's training data, which
    fails verification under it (out56 finding 1), one line each (out58); else none."""
    from trajledger.ledger.evidence import ledger_evidence
    from trajledger.verify.blobs import DataMode
    from trajledger.verify.judge import Record
    from trajledger.verify.lineage import LineageVerifier
    from trajledger.verify.other_predicates import Release
    from trajledger.verify.releases import near_duplicates

    def near(p: Any) -> bool:
        return p is not None and p.contamination is not None and p.contamination.refuse == "near"

    if not near(new) or near(old):
        return []
    v = LineageVerifier(ledger_evidence(ledger), new, index=ledger.trust_state(),
                        data=DataMode.SIZE)
    out: list[str] = []
    for i in v.index.of_kind("release"):
        rec = v.record(i)
        if not (isinstance(rec, Record) and isinstance(r := rec.predicate, Release)):
            continue
        found = next((said for d in r.evaluations for j in v.records(d, "evaluation")
                      if isinstance(ev := v.record(j), Record)
                      and (said := near_duplicates(ev)) is not None), None)
        if found is not None:
            ck = f"{r.checkpoint.name}@{r.checkpoint.version}"
            out.append(f"the release of {ck} {rec.entry.subject[:19]}… (log index {i}) fails "
                       f"verification under it: its {found}; to release {ck} again, record a "
                       "suite without them, require it, evaluate and release "
                       "(docs/evaluations.md)")
    return out


@policy.command("inline")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@pass_ctx
def policy_inline(ctx: Context, file: Path) -> None:
    """Rewrite FILE with every key it names by path written inline (PEM), each under a
    comment with its name and fingerprint: the policy then names no file someone else could
    replace. The keys are read now: compare the fingerprints printed with their owners.
    Nothing else in the file changes; the result must parse to the same policy.

    \b
    Example:
      trajledger policy inline policy.toml
    """
    from trajledger.ledger.policy_state import inline_paths, keystore_lookup

    done = inline_paths(file, policy_from_file(ctx, file), keystore_lookup(ctx.keystore()))
    for spec, key in done:
        click.echo(f"{spec}\t{key.algorithm}\t{key.keyid}", err=True)
    ok(f"policy {file}: {len(done)} key(s) written inline" if done
       else f"policy {file}: names no key by path; nothing to do")


@policy.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def policy_show(ctx: Context, as_json: bool) -> None:
    """Show the ledger's policy in force and its history.

    \b
    Example:
      trajledger policy show --json
    """
    from trajledger.ledger.policy_state import current_policy

    found = current_policy(ctx.ledger())
    if found is None:
        raise LedgerError(
            "no trust policy recorded; record one with 'trajledger policy set FILE --key ...'"
        )
    notes, p = found
    if as_json:
        from trajledger.verify.policy import policy_digest

        emit_json({"policy": p.to_json(), "digest": policy_digest(p), "history": notes})
        return
    click.echo("\n".join(_describe(p)))
    click.echo("history:")
    for n in notes:
        click.echo(f"  {n}")
