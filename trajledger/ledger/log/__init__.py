"""The ledger's transparency log: a hash-chained RFC 6962 Merkle log in the C2SP tlog-tiles layout.

Split along Tessera's lines (each module states its scope):

- ``layout``   file names, tile paths, the treeState and history formats
- ``edge``     the right edge of the tree: what an append needs, O(log n) to load
- ``state``    classifying a log directory before use: normal, unpublished tail, or tampering;
               the floor (a checkpoint seen before) and its consistency
- ``checked``  `CheckedNotes`: a checkpoint note verified once by a key for its holder (the
               ledger's handle shares one with its log, trust state and verifier)
- ``lookup``   the derived lookup cache (envelope and subject -> entries), outside ``log/``
- ``spec``     what an append is given: `EntrySpec`, `OneRecord`, the log's key; what it
               answers: `Appended`
- ``reader``   `LogReader`: opening, the classified state, entries, proofs, lookups; never writes
- ``files``    the write side's files: written under their own names, synced in one round
- ``recovery`` removing what an append that died before its commit left
- ``writer``   `Log`, a `LogReader` that is also the single writer that only grows the log
- ``check``    `verify_log_dir`: the whole directory, over ``verify.log_fsck``
- ``witness``  `cosign`: cosign the checkpoint after checking it only grew

Files, relative to the log directory (Tessera's POSIX layout)::

    checkpoint                   C2SP signed note (tlog-checkpoint) by the log's Ed25519 key
    vkey                         the log's C2SP verifier key string
    key-handovers/<n>            each rotation of the log key: the tree signed by the old key
                                 and the new one, naming both (``verify.log_key``)
    tile/<L>/<N>[.p/<W>]         hash tiles
    tile/entries/<N>[.p/<W>]     entry bundles (uint16 big-endian length prefix per entry)
    .state/lock                  flock()ed by the one process appending; its first byte is 1
                                 from an append's first write to its publication
    .state/treeState             {"size":n,"root":"<b64>"}: the commit point
    .state/history               every committed size (u64 BE + CRC-32)

Spec: schemas/log-entry.v1.md, c2sp.org/tlog-tiles, c2sp.org/tlog-checkpoint,
c2sp.org/signed-note, c2sp.org/tlog-cosignature, RFC 6962.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trajledger.verify.log_entry import KINDS

from .layout import CHECKPOINT_FILE, format_tree_state, parse_tree_state
from .lookup import CACHE_DIR
from .spec import Appended
from .writer import EntrySpec, Log, OneRecord, SignerSource

if TYPE_CHECKING:
    from .check import DATA_REHASHED, DATA_SIZE_ONLY, LogReport, Problem, verify_log_dir
    from .witness import CosignResult, cosign

_ON_USE = {"DATA_REHASHED": "check", "DATA_SIZE_ONLY": "check", "LogReport": "check",
           "Problem": "check", "verify_log_dir": "check", "CosignResult": "witness",
           "cosign": "witness"}
"""Names of the whole-log check (``check``, over ``verify.log_fsck``) and of the witness
(``witness``), loaded when first used: the commands that open a log to read or append do not
import them (a tenth of ``verify``'s imports)."""


def __getattr__(name: str) -> Any:
    """A name of `_ON_USE`, its module imported on first use."""
    if name not in _ON_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{_ON_USE[name]}"), name)

__all__ = [
    "CACHE_DIR",
    "CHECKPOINT_FILE",
    "DATA_REHASHED",
    "DATA_SIZE_ONLY",
    "KINDS",
    "Appended",
    "CosignResult",
    "EntrySpec",
    "Log",
    "LogReport",
    "OneRecord",
    "Problem",
    "SignerSource",
    "cosign",
    "format_tree_state",
    "parse_tree_state",
    "verify_log_dir",
]
