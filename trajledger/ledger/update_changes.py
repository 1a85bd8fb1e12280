"""What an import or a monitor of another party's log changed here, as its report says it.

Scope: `Changes`, the lists an update fills (`trajledger.ledger.updates.apply_update`) and
their lines (stderr) and JSON (``--json``). Moved out of ``updates`` (twenty-fifth round, rot40:
it was at its cap), unchanged; ``updates`` re-exports it.
Non-scope: deciding what changed (``updates``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Changes"]


@dataclass
class Changes:
    """What an import or a monitor changed in this ledger (each list item a dict, as
    ``--json`` prints them).

    Attributes:
        origin: the other log, ``ORIGIN+KEYHASH`` (`catalog.origin_name`).
        new: artifacts this ledger did not hold before, by kind.
        revoked: the other party's revocations of what this ledger holds that count here.
        erased: its erasures that count here, with how many blobs were deleted here.
        compromised: keys its policy declares compromised, and what was revoked here for it.
        unreadable: revocations and erasures taken in without their envelope (fail closed).
        ignored: its revocations and erasures that do not count here, and why.
        affected: this ledger's datasets and checkpoints (imported ones too) built on what
            was revoked or erased.
        clashes: names of imported records that are also names of other records here.
        pending: revocations and erasures a monitor found about what this ledger holds but did
            not take in (no approver key to sign the import).
        suspect: records just taken in that a key signed which another log here declares
            compromised (`_declared_elsewhere`): warned of, not revoked.
        left_out: erasures recorded here before, whose files the update carries: not stored
            (`_left_out`).
        deleted_again: erasures recorded here before, whose files the update brought back
            (`_erased_before`): deleted again.
        policy_keys: keys whose roles the other log's policy changed (`update_keys`): what
            they can sign here, what to do; nothing in this ledger's policy changed.
        logged: this log's indices of the other log's records taken in (not in the JSON).
        unnamed: why the logs that signed the stops it relays are not named (a state read
            after the import record failed: `first_contact.relayed`), what is recorded said.
    """

    origin: str
    new: dict[str, list[str]] = field(default_factory=dict)
    revoked: list[dict[str, Any]] = field(default_factory=list)
    erased: list[dict[str, Any]] = field(default_factory=list)
    compromised: list[dict[str, Any]] = field(default_factory=list)
    unreadable: list[dict[str, Any]] = field(default_factory=list)
    ignored: list[dict[str, Any]] = field(default_factory=list)
    affected: list[dict[str, Any]] = field(default_factory=list)
    clashes: list[str] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    suspect: list[dict[str, Any]] = field(default_factory=list)
    deleted_again: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[dict[str, Any]] = field(default_factory=list)
    policy_keys: list[dict[str, Any]] = field(default_factory=list)
    logged: tuple[int, ...] = ()
    unnamed: str | None = None

    @property
    def stopped(self) -> bool:
        """True when something this ledger holds may no longer be used (revoked, erased,
        signed by a compromised key, or named by a record that cannot be read), or the other
        log revoked or erased its own artifact held here with a key this policy does not
        count (out36 finding 1)."""
        return bool(self.revoked or self.erased or self.compromised or self.unreadable
                    or self.pending or any(r.get("own") for r in self.ignored))

    def lines(self) -> list[tuple[str, str]]:
        """``(level, text)`` lines for the command's stderr: ``ok``, ``warning``, ``note``."""
        out: list[tuple[str, str]] = []
        if self.new:
            out.append(("ok", "new: " + ", ".join(f"{len(v)} {k}(s)" for k, v in
                                                  sorted(self.new.items()))))
        out += [(r["level"], r["text"]) for r in self.policy_keys]
        for r in self.revoked:
            was = r.get("already")
            out.append(("warning", (f"revoked already here by {was['signer'][:12]} (log index "
                                    f"{was['logIndex']}); now also " if was else "revoked ")
                        + f"by {self._by(r)}: {r['label']}: {r['reason']} "
                        f"(signed by {r['signer'][:12]}, {self._at(r)})"))
        for r in self.erased:
            out.append(("warning", f"erased by {self._by(r)}: {r['label']}: {r['reason']} "
                        f"(signed by {r['signer'][:12]}, {self._at(r)}); "
                        f"{r['deleted']} blob(s) deleted here"
                        + (f"; {r['keptBlobs']} kept: also a file of {', '.join(r['kept'])}"
                           if r.get("kept") else "")))
        if self.unnamed:
            out.append(("warning", self.unnamed))
        for r in self.compromised + self.suspect:
            out.append(("warning", r["text"]))
        for r in self.unreadable:
            out.append(("warning", f"{r['kind']} at log index {r['logIndex']} of "
                        f"{self.origin} about {r['label']}: its envelope is not here (not "
                        "published), so every decision about it fails until it is; ask for an "
                        f"update (export --updates-since {r['logIndex']})"))
        for r in self.pending:
            if "text" in r:  # a key compromise (`update_compromises.pending_compromises`)
                out.append(("warning", r["text"]))
                continue
            out.append(("warning", f"pending: {r['kind']} at log index {r['logIndex']} of "
                        f"{self.origin} about {r['label']}, which you hold: not taken in "
                        "(pass --key APPROVER to apply it)"))
        for r in self.ignored:
            if r.get("own"):
                out.append(("warning", self._not_applied(r)))
                continue
            out.append(("note", f"ignored: {r['kind']} at log index {r['logIndex']} of "
                        f"{self.origin} about {r['label']}: {r['why']}"))
        for a in self.affected:
            out.append(("warning", f"affected here: {a['label']} is built on {a['because']} — "
                        f"see 'trajledger impact {a['becauseDigest']}'"))
        out += [("warning", c) for c in self.clashes]
        out += [("note", f"erased here: {r['label']} (erasure at log index {r['logIndex']}): "
                 f"the {r['leftOut']} file(s) of it this import carries are not stored")
                for r in self.left_out]
        out += [("note", f"erased here: {r['label']} (erasure at log index {r['logIndex']}): "
                 f"the {r['deleted']} file(s) of it this import brought are deleted again")
                for r in self.deleted_again]
        return out

    def _by(self, r: Mapping[str, Any]) -> str:
        """Who a stop is by: the other log; or the log whose own keys signed it, when the other
        log relays it (``signerLog``: `first_contact.relayed`)."""
        return f"{r['signerLog']}, relayed by {self.origin}" if r.get("signerLog") \
            else self.origin

    def _at(self, r: Mapping[str, Any]) -> str:
        """Where the stop is in the other log."""
        return f"log index {r['logIndex']} of {self.origin}" if r.get("signerLog") \
            else f"its log index {r['logIndex']}"

    def _not_applied(self, r: Mapping[str, Any]) -> str:
        """The line of the other log's revocation or erasure of its own artifact, held here,
        that this ledger's policy does not count (signed by a key it does not name): the
        vendor's word did not reach the gate, so say what is built on it and the ways on."""
        verb, command = (("erased", "erase") if r["kind"] == "erasure"
                         else ("revoked", "revoke"))
        names = r.get("affectsLabels", [])
        built = f" and {', '.join(names[:3])} {'is' if len(names) == 1 else 'are'} built on it"
        built = "" if not names else built + (
            f" (and {len(names) - 3} more: 'trajledger impact')" if len(names) > 3 else "")
        return (f"not applied here: {self.origin} {verb} its own {r['label']}"
                f", which you hold{built}, but {r['why']}; so your gate, verify and impact "
                f"still take it as good: ask {self.origin} for a {r['kind']} signed by a key "
                f"your policy names for it, or {command} it here yourself ('trajledger "
                f"{command} {r['digest']} --key APPROVER --reason ...')")

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form."""
        return {"origin": self.origin, "new": self.new, "revoked": self.revoked,
                "erased": self.erased, "compromised": self.compromised,
                "unreadable": self.unreadable, "ignored": self.ignored,
                "affected": self.affected, "clashes": self.clashes, "pending": self.pending,
                "suspect": self.suspect, "deletedAgain": self.deleted_again,
                "leftOut": self.left_out, "unnamed": self.unnamed,
                "policyKeys": self.policy_keys}
