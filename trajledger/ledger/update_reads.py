"""What an update brings (`Update`), and what it asks of this ledger's own state: its import
records of other logs (the floors they restore, the policies and entries of those logs they
list) and whether it holds an artifact. Split out of ``updates`` (twenty-ninth round, upd44: it
was at its cap), unchanged; ``updates`` re-exports `Update` and `held`.

Non-scope: deciding what to take in (``updates.select``), the marks of a log (``updates``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.digest import FileDigest
from trajledger.verify.dsse import MAX_ENVELOPE_BYTES
from trajledger.verify.errors import ProvenanceError
from trajledger.verify.kinds import KINDS
from trajledger.verify.log_index import read_record
from trajledger.verify.note import verifier_from_vkey
from trajledger.verify.other_predicates import Import

from .errors import StoreError, TamperError, read_failure

if TYPE_CHECKING:
    from .home import LedgerHome
    from .trust_state import TrustState

__all__ = ["Update", "held", "import_records", "relay_records"]


@dataclass(frozen=True)
class Update:
    """What an import or a monitor brings from another party's log.

    Attributes:
        vkey: the log's verifier key (its checkpoint verified with it, or a key it handed
            over to).
        note: the signed checkpoint accepted.
        entries: every entry examined, by its index there (the lineage asked for and the
            extension), unverified bytes proven under ``note``; a monitor keeps of its
            extension only the entries that can matter here (the log's policies, entries about
            what the ledger holds: all `select` and the key compromises look at there).
        taken: the entries to log here (`select`).
        consulted: entries listed in the import record without being logged (policies).
        inclusion: ``index -> inclusion proof`` under ``note``.
        objects: blobs to store, by digest: bytes, or a staged file on the store's
            filesystem whose digest was computed as it was written (moved into the store).
        artifact: the artifact asked for (``digest``, ``kind``, ``name``, ``logIndex``), or
            None for updates alone.
        applied: the size up to which every entry was examined (the checkpoint's).
        logs: the log's verifier keys besides ``vkey`` (those it rotated from): what it brought
            here before under them is its own too (`update_compromises.compromises`).
        data_included: the artifact's data came with it.
        synced: waits for the staged files' data to be on disk (a pass started while the
            bundle was verified); None: `store.ObjectStore.adopt_files` runs it.
        flush: makes the store's whole file system durable once the objects have their
            names (`fs.FileSystemSync.sync`); None: each directory that gained one is fsynced.
    """

    vkey: str
    note: bytes
    entries: Mapping[int, bytes]
    taken: Sequence[int]
    consulted: Sequence[int]
    inclusion: Callable[[int], Sequence[bytes]]
    objects: Mapping[str, FileDigest | bytes]
    artifact: Mapping[str, Any] | None
    applied: int
    data_included: bool = True
    synced: Callable[[], None] | None = None
    flush: Callable[[], None] | None = None
    logs: frozenset[str] = frozenset()

    @property
    def checkpoint(self) -> Checkpoint:
        """The checkpoint ``note`` signs."""
        return verify_checkpoint(self.note, verifier_from_vkey(self.vkey))


def import_records(ledger: LedgerHome, vkey: str | None = None,
                   state: TrustState | None = None) -> list[tuple[int, Import]]:
    """This ledger's import records (of the log ``vkey``), read from the store (``state``:
    its `trust_state` asked since its last append, as `held`'s).

    Raises:
        TamperError: an import record's envelope is missing or damaged (fail closed: it could
            hide a newer checkpoint, so a rollback).
    """
    state = state or ledger.trust_state()
    out = []
    for i in state.of_kind("import"):
        entry = state.entry(i)
        assert entry is not None
        try:
            data = ledger.store.get(entry.envelope, limit=MAX_ENVELOPE_BYTES)
            _st, pred = read_record(entry, data, f"import record at log index {i}")
        except (ProvenanceError, StoreError) as e:
            if read_failure(e):  # the disk's, not a record gone: exit 3, no repair (fault27)
                raise
            raise TamperError(
                f"import record at log index {i}: cannot be read ({e}), so what was accepted "
                "from other logs cannot be known; restore it with 'trajledger fsck --repair "
                "--from BUNDLE|LEDGER'"
            ) from e
        assert isinstance(pred, Import)
        if vkey is None or pred.log.get("vkey") == vkey:
            out.append((i, pred))
    return out


def held(ledger: LedgerHome, digest: str, state: TrustState | None = None) -> bool:
    """True when this ledger holds a record of the artifact ``digest`` (its own or imported);
    ``state``, its `trust_state` taken once for a read of many entries (each call brings it up
    to the log: the checkpoint verified, the rows counted; vend43, the cost of a mark)."""
    state = state or ledger.trust_state()
    return any((e := state.entry(i)) is not None and KINDS[e.kind].lineage
               for i in state.about(digest))


def relay_records(state: TrustState, indices: Collection[int], size: int) -> dict[int, str]:
    """The import records below ``size`` that list the envelope of a lineage record at
    ``indices``, with their envelopes: this log's own word that it relayed those records from
    another log. An export carries them, so that a buyer can tell a relay from the signer when
    the relay declares the signing key compromised (upd45, `update_compromises`)."""
    found = [e.envelope for i in indices if (e := state.entry(i)) is not None
             and KINDS[e.kind].lineage]
    out = {}
    for j in {j for js in state.listings(found).values() for j in js}:
        if j < size and (e := state.entry(j)) is not None and e.kind == "import":
            out[j] = e.envelope
    return out
