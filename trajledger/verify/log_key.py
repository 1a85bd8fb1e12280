"""Log key rotation: the handover checkpoint by which a log's key names its successor.

Scope: the format of a key handover and its checks. A handover is a checkpoint of the log (the
tree at the moment of rotation) with one extension line naming both keys, signed by the old key
*and* the new one (two signature lines of one c2sp.org/signed-note)::

    <origin>
    <size>
    <base64 root>
    trajledger.dev/log-key-handover <old vkey> <new vkey>

    — <origin> <base64(old key ID || signature)>
    — <origin> <base64(new key ID || signature)>

The old key's signature covers the new key's name (a signature by the old key over a plain
checkpoint names no successor, so nobody can turn one into a handover), and the new key's proves
its holder took part. `parse_handover` checks one; `key_chain` follows the handovers from a key
a verifier trusts to the keys that succeeded it, refusing two successors of one key (a fork of
the log's identity). Whoever follows a chain must still check that what the new key signs
extends each handover's tree (a consistency proof from the handover's size): the handover vouches
for the new key only as the continuation of that tree. `follow_handovers` does both for a
verification whose trusted log key did not sign the checkpoint (loaded only then).

Non-scope: writing handovers (``ledger.log.writer``, ``trajledger log rotate-key``), where they
are kept (``log/key-handovers/<n>``, bundle members ``key-handovers/<n>``), and trust state.
Spec: schemas/SPEC.md, section "Log key rotation"; c2sp.org/tlog-checkpoint (extension lines),
c2sp.org/signed-note (several signatures on one note).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .checkpoint import HANDOVER_DIR, Checkpoint, verify_checkpoint
from .errors import FormatError, ProvenanceError, SignatureError, VerificationError
from .note import ALG_ED25519, Note, verifier_from_vkey

if TYPE_CHECKING:
    from .evidence import Evidence

__all__ = [
    "HANDOVER_DIR",
    "HANDOVER_EXTENSION",
    "MAX_HANDOVERS",
    "Handover",
    "follow_handovers",
    "handover_checkpoint",
    "key_chain",
    "key_id",
    "parse_handover",
    "parse_handovers",
]

HANDOVER_EXTENSION = "trajledger.dev/log-key-handover"
"""The first word of a handover checkpoint's extension line."""
MAX_HANDOVERS = 64
"""The most key handovers a bundle may carry (a log whose key rotated more often is refused:
following chains is quadratic in them, rev35)."""


@dataclass(frozen=True)
class Handover:
    """A verified key handover.

    Attributes:
        old: the verifier key (vkey) that handed over.
        new: the vkey that took over.
        checkpoint: the tree at the handover (origin, size, root).
        note: the signed note, verbatim.
    """

    old: str
    new: str
    checkpoint: Checkpoint
    note: bytes

    def describe(self) -> str:
        """What a verification that followed it says (the ``key handover`` check)."""
        return (f"log key {key_id(self.old)} handed over to {key_id(self.new)} at size "
                f"{self.checkpoint.size}, signed by both; the log since extends that tree")


def key_id(vkey: str) -> str:
    """``origin+keyhash`` of a vkey (the public key itself is long and says nothing more)."""
    return "+".join(vkey.split("+")[:2])


def handover_checkpoint(cp: Checkpoint, old: str, new: str) -> Checkpoint:
    """The checkpoint text a handover signs: ``cp``'s tree with the extension line naming both
    keys (the writer signs its `Checkpoint.to_text` with both keys).

    Raises:
        FormatError: ``cp`` already has extension lines, or a vkey is malformed.
    """
    if cp.extensions:
        raise FormatError("handover: the checkpoint already has extension lines")
    verifier_from_vkey(old)
    verifier_from_vkey(new)
    return Checkpoint(cp.origin, cp.size, cp.root, (f"{HANDOVER_EXTENSION} {old} {new}",))


def parse_handover(note: bytes, what: str = "key handover") -> Handover:
    """Parse and verify a key handover note.

    Steps:
        1. Parse the note and its checkpoint text: exactly one extension line,
           ``trajledger.dev/log-key-handover <old vkey> <new vkey>``.
        2. Both vkeys parse as Ed25519 note keys named after the checkpoint's origin, and
           differ.
        3. The note carries a valid signature by the old key and one by the new key.

    Raises:
        FormatError: a malformed note, checkpoint, extension line or vkey.
        SignatureError: a signature by either key is missing or invalid.
    """
    # (1)
    try:
        parsed = Note.from_bytes(note)
        cp = Checkpoint.from_text(parsed.text)
    except FormatError as e:
        raise FormatError(f"{what}: {e}") from e
    words = cp.extensions[0].split(" ") if len(cp.extensions) == 1 else []
    if len(words) != 3 or words[0] != HANDOVER_EXTENSION:
        raise FormatError(
            f"{what}: want one extension line '{HANDOVER_EXTENSION} <old vkey> <new vkey>', "
            f"got {len(cp.extensions)} extension line(s)"
        )
    old, new = words[1], words[2]
    # (2)
    for role, vkey in (("old", old), ("new", new)):
        try:
            v = verifier_from_vkey(vkey)
        except FormatError as e:
            raise FormatError(f"{what}: {role} key: {e}") from e
        if v.alg != ALG_ED25519 or v.name != cp.origin:
            raise FormatError(
                f"{what}: {role} key {vkey!r} is not an Ed25519 log key named {cp.origin!r}"
            )
    if old == new:
        raise FormatError(f"{what}: hands the key {old!r} over to itself")
    # (3)
    for role, vkey in (("old", old), ("new", new)):
        try:
            verify_checkpoint(note, verifier_from_vkey(vkey))
        except SignatureError as e:
            raise SignatureError(f"{what}: not signed by the {role} key {vkey}: {e}") from e
    return Handover(old, new, cp, note)


def parse_handovers(members: dict[int, bytes], what: str) -> None:
    """Check a bundle's key handovers (``<HANDOVER_DIR>/<n>``): numbered 1, 2, ... without
    a gap, at most `MAX_HANDOVERS`, each parsed and signed by both keys it names
    (`parse_handover`).

    Raises:
        FormatError, SignatureError: as `parse_handover`; or a gap in the numbers, or too many.
    """
    if sorted(members) != list(range(1, len(members) + 1)):
        raise FormatError(f"{what}: key handovers are not numbered 1..{len(members)}")
    if len(members) > MAX_HANDOVERS:
        raise FormatError(f"{what}: {len(members)} key handovers, more than {MAX_HANDOVERS}")
    for n, data in sorted(members.items()):
        parse_handover(data, f"{what}: member {HANDOVER_DIR}/{n}")


def key_chain(trusted: str, notes: Sequence[bytes]) -> list[Handover]:
    """The handovers that lead from the key ``trusted`` to its latest successor, in order.

    Steps:
        1. Parse every note (`parse_handover`); one that does not parse or verify fails the
           whole chain (it could be the missing link).
        2. From ``trusted``, follow the handover whose old key is the current key, until none
           is; two handovers from one key are refused (two successors: the log's identity
           forked), and so is a chain that comes back to a key it left.
        3. Each handover's tree is at least as large as the one before (a key cannot hand over
           a smaller tree than it received).

    Args:
        trusted: the vkey the caller trusts.
        notes: every handover note available (in any order; unrelated ones are ignored).

    Returns:
        The handovers from ``trusted`` on (empty when it handed over to nobody).

    Raises:
        FormatError, SignatureError: a note is malformed or does not verify.
        VerificationError: two successors of one key, a cycle, or a shrinking tree.
    """
    # (1)
    return _chain(trusted, _by_old([parse_handover(n, f"key handover {i + 1}")
                                    for i, n in enumerate(notes)]))


def _by_old(parsed: Sequence[Handover]) -> dict[str, list[Handover]]:
    """Parsed handovers by their old key, each once."""
    by_old: dict[str, list[Handover]] = {}
    for h in parsed:
        if h not in by_old.get(h.old, []):
            by_old.setdefault(h.old, []).append(h)
    return by_old


def _chain(trusted: str, by_old: dict[str, list[Handover]]) -> list[Handover]:
    """`key_chain` steps 2 and 3, from handovers parsed and verified already (`_by_old`)."""
    # (2)
    chain: list[Handover] = []
    seen = {trusted}
    current = trusted
    while current in by_old:
        found = by_old[current]
        if len({h.new for h in found}) > 1:
            raise VerificationError(
                f"log key {current}: handed over to {len(found)} different keys "
                f"({', '.join(sorted({h.new for h in found}))}): the log's key forked"
            )
        h = found[0]
        if h.new in seen:
            raise VerificationError(f"log key {h.new}: the key handovers go round in a circle")
        # (3)
        if chain and h.checkpoint.size < chain[-1].checkpoint.size:
            raise VerificationError(
                f"log key {current}: handed over at size {h.checkpoint.size}, smaller than the "
                f"{chain[-1].checkpoint.size} it received"
            )
        chain.append(h)
        seen.add(h.new)
        current = h.new
    return chain


def predecessors(trusted: Sequence[str], notes: Sequence[bytes]) -> list[str]:
    """The keys from which the handovers ``notes`` lead to a key of ``trusted``: the same log
    before its key rotated (a checkpoint seen under one is of this log too, also for a policy
    that names only the new key: docs/SECURITY.md, redo15 finding 2). A handover that does not
    parse or verify leads nowhere (the log's own check names it), and so does every other:
    `key_chain` fails whole on it. Each note is parsed and verified once (rev35's Left: it
    was once per note, quadratic in the signature checks); the chains are walked in the
    parsed handovers."""
    try:
        parsed = [parse_handover(n) for n in notes]
    except ProvenanceError:
        return []
    by_old, leads = _by_old(parsed), dict[str, bool]()
    for h in parsed:  # (each old key's chain walked once: dictionary look-ups)
        if h.old not in leads:
            try:
                leads[h.old] = bool({x.new for x in _chain(h.old, by_old)} & set(trusted))
            except ProvenanceError:
                leads[h.old] = False
    return [h.old for h in parsed if h.old not in trusted and leads[h.old]]


def follow_handovers(
    note: bytes, vkey: str, evidence: Evidence, unsigned: SignatureError
) -> tuple[Checkpoint, list[Handover]]:
    """Verify the checkpoint ``note`` by a key the trusted log key ``vkey`` handed over to
    (``vkey`` itself did not sign it: ``unsigned``), for `verify.trusted_log.TrustedLog`.

    Steps:
        1. Follow the evidence's key handovers from ``vkey`` (`key_chain`) and verify the
           note by the first key of the chain that signed it.
        2. The tree of every handover up to that key must be extended by the checkpoint
           (a consistency proof from the evidence).

    Returns:
        The checkpoint and the handovers followed.

    Raises:
        ProvenanceError: not signed by a successor (``unsigned``), a bad handover, or a tree
            the checkpoint does not extend.
        OSError: a consistency proof is not in the evidence.
    """
    # (1)
    chain = key_chain(vkey, evidence.key_handovers())
    for n, h in enumerate(chain):
        try:
            cp = verify_checkpoint(note, verifier_from_vkey(h.new))
        except SignatureError:
            continue
        # (2)
        from .consistency import check_consistent

        for earlier in chain[: n + 1]:
            old = earlier.checkpoint
            proof = (evidence.consistency_proof(old.size, cp.size)
                     if 0 < old.size < cp.size else [])
            try:
                check_consistent(old, cp, proof)
            except ProvenanceError as e:
                raise VerificationError(
                    f"the log under key {key_id(h.new)} does not extend the tree its key "
                    f"handover vouched for: {e}"
                ) from e
        return cp, chain[: n + 1]
    try:  # (not held by this frame, which its traceback holds: a cycle that kept an import's
        raise unsigned  # frames and all they held, with the collector off, to the end: imp49)
    finally:
        del unsigned
