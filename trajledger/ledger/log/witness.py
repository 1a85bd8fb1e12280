"""A witness for the log: cosign its checkpoint after checking it only grew.

Scope: `cosign` keeps, per log origin, the log key pinned on first use and the checkpoint last
cosigned (``<state_dir>/<hex sha256(origin)>.json``), refuses a rollback, a fork or a failed
consistency proof, and adds a c2sp.org/tlog-cosignature/v1 line to the log's checkpoint.
Non-scope: the log's own tamper rules (``state``), witness policies (``verify.policy``).
Spec: schemas/log-entry.v1.md (witness), c2sp.org/tlog-cosignature, c2sp.org/tlog-witness.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time as _time
from dataclasses import dataclass
from pathlib import Path

from trajledger.verify.checkpoint import verify_checkpoint
from trajledger.verify.consistency import check_consistent
from trajledger.verify.cosigned import cosignature_message
from trajledger.verify.errors import SignatureError
from trajledger.verify.log_key import Handover, key_chain
from trajledger.verify.note import (
    ALG_COSIGNATURE_V1,
    Note,
    key_hash,
    verifier_from_vkey,
)

from ..encode import format_signature_line, signature_line, vkey_string
from ..errors import LogError, cannot_write
from ..fs import write_output
from ..keys import Signer
from .spec import note_key_bytes
from .writer import Log

__all__ = ["CosignResult", "cosign", "cosign_note"]


@dataclass(frozen=True)
class CosignResult:
    """What `cosign` did.

    Attributes:
        origin: the log cosigned.
        old_size: the size last cosigned before (None on the first cosignature).
        size: the size cosigned now.
        witness_vkey: the witness's verifier key (cosignature/v1) for trust policies.
        timestamp: the cosignature's time (POSIX seconds).
    """

    origin: str
    old_size: int | None
    size: int
    witness_vkey: str
    timestamp: int


def _state_path(state_dir: Path, origin: str) -> Path:
    return state_dir / (hashlib.sha256(origin.encode()).hexdigest() + ".json")


def _load_state(path: Path) -> dict[str, str] | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise LogError(f"witness state {path}: cannot read: {e.strerror}") from e
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise LogError(f"witness state {path}: not JSON: {e}") from e
    if not isinstance(doc, dict) or not all(
        isinstance(doc.get(k), str) for k in ("log_vkey", "checkpoint")
    ):
        raise LogError(f"witness state {path}: want an object with log_vkey and checkpoint")
    return {k: str(v) for k, v in doc.items()}


def cosign(log: Log, witness: Signer, state_dir: Path, *, now: int | None = None) -> CosignResult:
    """Act as a witness: check the log's checkpoint is consistent with the last one cosigned,
    then add a tlog-cosignature/v1 line to it.

    Steps:
        1. Load the witness's state for this origin: the log key pinned on first use and the
           checkpoint last cosigned.
        2. Refuse a log key other than the pinned one, unless the pinned key handed over to it
           (the log's ``key-handovers``, ``verify.log_key.key_chain``): then the log since
           must extend each handover's tree, and the new key is pinned.
        3. Verify the log's current checkpoint with that key.
        4. Check it against the last cosigned one (`check_consistent`): a smaller size
           (rollback), another root at the same size (fork) or a failed consistency proof
           (fetched from the log, verified against both signed roots) is refused.
        5. Sign the cosignature and add it to ``checkpoint`` (under the log's lock, only if the
           checkpoint did not change meanwhile; an older line by this witness is replaced).
        6. Record the cosigned checkpoint as the new state.

    Args:
        log: the log to witness.
        witness: the witness's Ed25519 key; its name is the cosignature's key name.
        state_dir: where the witness keeps its state (``<ledger>/witness``).
        now: the cosignature time; default now.

    Returns:
        What was cosigned.

    Raises:
        LogError: the witness key is not Ed25519, the state or checkpoint cannot be read or
            written, or the checkpoint changed while cosigning.
        SignatureError: the checkpoint is not signed by the pinned log key, or the log key changed.
        ConsistencyError: rollback, fork or inconsistent checkpoints.
    """
    raw = note_key_bytes(witness, "witness")
    witness_vkey = vkey_string(witness.name, raw, ALG_COSIGNATURE_V1)
    # (1)
    path = _state_path(state_dir, log.origin)
    state = _load_state(path)
    pinned = state["log_vkey"] if state else log.vkey
    # (2)
    chain: list[Handover] = []
    if pinned != log.vkey:
        chain = key_chain(pinned, log.key_handovers())
        if log.vkey not in [h.new for h in chain]:
            raise SignatureError(
                f"log {log.origin}: key is now {log.vkey}, but the witness pinned {pinned} and "
                "no key handover by it leads to the new key"
            )
    verifier = verifier_from_vkey(pinned)
    # (3)
    cp_bytes = log.checkpoint_bytes()
    new = verify_checkpoint(cp_bytes, verifier_from_vkey(log.vkey), origin=log.origin)
    for h in chain:
        at = h.checkpoint
        check_consistent(at, new, log.consistency_proof(at.size, new.size)
                         if 0 < at.size < new.size else [])
    # (4)
    old_size: int | None = None
    if state:
        old = verify_checkpoint(state["checkpoint"].encode(), verifier, origin=log.origin)
        old_size = old.size
        proof: list[bytes] = []
        if 0 < old.size < new.size:
            proof = log.consistency_proof(old.size, new.size)
        check_consistent(old, new, proof)
    # (5)
    timestamp = int(_time.time()) if now is None else now
    log.add_cosignature(cp_bytes, cosign_note(cp_bytes, witness, now=timestamp))
    # (6)
    doc = {
        "origin": log.origin,
        "log_vkey": log.vkey,
        "witness": witness_vkey,
        "checkpoint": cp_bytes.decode("utf-8"),
    }
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        write_output(path, json.dumps(doc, sort_keys=True, indent=1).encode() + b"\n")
    except OSError as e:
        raise LogError(cannot_write(f"witness state {path}", e)) from e
    return CosignResult(log.origin, old_size, new.size, witness_vkey, timestamp)


def cosign_note(note_bytes: bytes, witness: Signer, *, now: int | None = None) -> bytes:
    """Add a c2sp.org/tlog-cosignature/v1 line by ``witness`` to a signed checkpoint note.

    An older cosignature by the same witness key is replaced; every other line is kept.

    Raises:
        LogError: the witness key is not Ed25519.
        FormatError: the note is malformed.
    """
    raw = note_key_bytes(witness, "witness")
    timestamp = int(_time.time()) if now is None else now
    note = Note.from_bytes(note_bytes)
    sig = witness.sign(cosignature_message(note.text, timestamp))
    kh = key_hash(witness.name, ALG_COSIGNATURE_V1, raw)
    line = format_signature_line(witness.name, kh, struct.pack(">Q", timestamp) + sig)
    kept = b"".join(
        signature_line(s) for s in note.signatures if (s.name, s.key_hash) != (witness.name, kh)
    )
    return note.text + b"\n" + kept + line
