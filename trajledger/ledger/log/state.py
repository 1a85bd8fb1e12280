"""The state of a log directory, classified before anyone reads or writes it: the log only grows.

Scope: `read_state` reads the signed checkpoint, then ``.state/treeState`` (in that order: a
writer writes them in the other order, so a reader racing a writer never sees treeState behind
the checkpoint), and the right edge of the committed tree from the tiles, and classifies them:

(a) treeState equals the signed checkpoint (size and root): the normal case.
(b) treeState is ahead of the checkpoint and consistent with it (the tiles give treeState's
    root, and the checkpoint's root at its size): a committed but unpublished tail, left by a
    writer that stopped between its commit and its publication. Readers read up to the signed
    checkpoint; the next writer republishes.
(c) anything else is tampering, because no crash can produce it (treeState is written and made
    durable before the checkpoint): treeState behind the signed checkpoint, or at its size with
    another root; a missing, unparsable or foreign (not signed by the log's key) checkpoint; a
    missing or malformed treeState; tiles or entries that do not give the committed roots.
    `TamperError` names the file, and nothing is changed.

The one state a crash can leave without a checkpoint: a log whose creation stopped before its
first checkpoint (treeState of size 0 or none yet, no entries, no history). It is reported as
unpublished (``checkpoint is None``); a writer publishes it.

`check_floor` compares the signed checkpoint with one seen before (a floor): it must be the same
tree or a consistent extension of it (consistency proof from the tiles), else rollback or fork.

Non-scope: repairing anything (only writers recover, and only forward: ``writer``), checking
every entry (``check``).
Spec: schemas/log-entry.v1.md (commit protocol, floor, tamper rules).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.consistency import check_consistent
from trajledger.verify.errors import ConsistencyError, FormatError, ProofError, SignatureError
from trajledger.verify.ledger_dir import read_regular
from trajledger.verify.merkle import EMPTY_ROOT
from trajledger.verify.note import Verifier
from trajledger.verify.tiles import TILE_WIDTH, TileReader, tile_width

from ..encode import verifier_vkey
from ..errors import TamperError
from .edge import ZERO_HASH, Edge, EdgeMismatch, load_edge
from .layout import (
    CHECKPOINT_FILE,
    HISTORY_FILE,
    TREE_STATE_FILE,
    behind_checkpoint,
    parse_tile_rel,
    parse_tree_state,
    tile_rel,
)

__all__ = ["LogState", "check_floor", "missing_file", "read_state", "tamper"]

_NEXT = (
    "nothing was changed; run 'trajledger log verify' for every problem and restore the log "
    "from a copy you trust"
)


def tamper(path: Path, message: str) -> TamperError:
    """A `TamperError` about ``path``: ``<path>: <message>; <what to do>``."""
    return TamperError(f"{path}: {message}; {_NEXT}", path)


def missing_file(directory: Path, filename: str | None, size: int) -> Path:
    """The file a tree of ``size`` needs, given the one a reader found missing.

    A reader falls back from a missing partial tile to the full one; name the partial tile the
    tree needs rather than the full one it tried last.
    """
    if not filename:
        return directory / "tile"
    path = Path(filename)
    try:
        rel = path.relative_to(directory).as_posix()
    except ValueError:
        return path
    parsed = parse_tile_rel(rel)
    if parsed is not None and parsed[2] is None:
        level, index, _ = parsed
        width = tile_width(max(level, 0), index, size)
        if 0 < width < TILE_WIDTH:
            return directory / tile_rel(level, index, width)
    return path


def _b64(h: bytes) -> str:
    return base64.b64encode(h).decode()


@dataclass(frozen=True)
class LogState:
    """A classified view of a log directory.

    Attributes:
        key: the checkpoint and treeState bytes it was read from (None: no checkpoint).
        checkpoint: the signed checkpoint, verified; None for a log whose creation stopped
            before its first checkpoint.
        note: the checkpoint file's bytes (with any witness cosignatures).
        tree_size: the committed size (treeState's).
        tree_root: the committed root.
        edge: the right edge of the committed tree, from the tiles.
    """

    key: tuple[bytes | None, bytes]
    checkpoint: Checkpoint | None
    note: bytes | None
    tree_size: int
    tree_root: bytes
    edge: Edge

    @property
    def published(self) -> int:
        """The size of the signed checkpoint (0 when none is published yet)."""
        return self.checkpoint.size if self.checkpoint is not None else 0

    @property
    def unpublished(self) -> bool:
        """True when committed entries (or a new log) wait for a checkpoint: case (b)."""
        return self.checkpoint is None or self.tree_size > self.checkpoint.size


def _fresh(directory: Path) -> bool:
    """No entry was ever committed: no history record and no file under ``tile/``."""
    try:
        if (directory / HISTORY_FILE).stat().st_size:
            return False
    except FileNotFoundError:
        pass
    return not any(files for _d, _s, files in os.walk(directory / "tile"))


def read_state(
    directory: Path, verifier: Verifier,
    checked: Callable[[bytes, Verifier], Checkpoint] = verify_checkpoint,
) -> LogState:
    """Read and classify the log in ``directory`` (see the module docstring).

    Steps:
        1. Read the checkpoint file, then treeState.
        2. treeState must parse; the checkpoint must be present (unless the log's creation
           stopped before it: treeState of size 0 and nothing committed), parse, and carry a
           valid signature by the log key with the log's origin.
        3. treeState must not be behind the checkpoint, nor at its size with another root.
        4. The tiles must give treeState's root at its size (right edge, O(log n) reads) and
           the checkpoint's root at the checkpoint's size.

    Args:
        directory: the log directory.
        verifier: the log's key (from its ``vkey``, checked by the caller).
        checked: verifies the checkpoint note by the key (`verify_checkpoint`; the log's
            `CheckedNotes`: its floor, verified already, is not verified again).

    Returns:
        The `LogState` (case (a) or (b)).

    Raises:
        TamperError: case (c), naming the file.
        LogError: a file exists but cannot be read (permissions, I/O).
    """
    from ..errors import LogError

    cp_path, ts_path = directory / CHECKPOINT_FILE, directory / TREE_STATE_FILE
    # (1)
    note: bytes | None
    try:
        note = read_regular(cp_path)
    except FileNotFoundError:
        note = None
    except OSError as e:
        raise LogError(f"{cp_path}: cannot read: {e.strerror}") from e
    try:
        ts_bytes = read_regular(ts_path)
    except FileNotFoundError as e:
        if note is None and _fresh(directory):
            # Creation stopped before its first treeState: an empty, unpublished log.
            return LogState((None, b""), None, None, 0, EMPTY_ROOT, Edge(0, [], [], [], ZERO_HASH))
        raise tamper(ts_path, "missing: the committed size of the log is gone") from e
    except OSError as e:
        raise LogError(f"{ts_path}: cannot read: {e.strerror}") from e
    # (2)
    try:
        size, root = parse_tree_state(ts_bytes)
    except FormatError as e:
        raise tamper(ts_path, str(e)) from e
    cp: Checkpoint | None = None
    if note is None:
        if size != 0 or not _fresh(directory):
            raise tamper(
                cp_path,
                f"missing: the signed checkpoint is gone (treeState says size {size})",
            )
    else:
        try:
            cp = checked(note, verifier)
        except (FormatError, SignatureError) as e:
            raise tamper(
                cp_path, f"not a checkpoint signed by the log key {verifier_vkey(verifier)}: {e}"
            ) from e
    # (3)
    if cp is not None and size < cp.size:
        raise tamper(ts_path, behind_checkpoint(size, cp.size))
    if cp is not None and size == cp.size and root != cp.root:
        raise tamper(
            ts_path,
            f"root at size {size} is {_b64(root)}, but the signed checkpoint says {_b64(cp.root)}",
        )
    # (4)
    reader = TileReader(lambda rel: read_regular(directory / rel), size)
    try:
        edge = load_edge(reader)
        at_cp = reader.subtree_root(0, cp.size) if cp is not None and cp.size < size else None
    except FileNotFoundError as e:
        where = missing_file(directory, e.filename, size)
        raise tamper(where, f"missing, but the committed tree of size {size} needs it") from e
    except EdgeMismatch as e:
        raise tamper(directory / e.rel, str(e).split(": ", 1)[1]) from e
    except (FormatError, ProofError) as e:
        raise tamper(directory / "tile", str(e)) from e
    if edge.root != root:
        culprit = directory / "tile" if cp is not None and cp.size == size else ts_path
        raise tamper(
            culprit,
            f"the tiles give root {_b64(edge.root)} at size {size}, but treeState says "
            f"{_b64(root)}",
        )
    if cp is not None and at_cp is not None and at_cp != cp.root:
        raise tamper(
            directory / "tile",
            f"the tiles give root {_b64(at_cp)} at size {cp.size}, but the signed checkpoint "
            f"says {_b64(cp.root)}",
        )
    return LogState((note, ts_bytes), cp, note, size, root, edge)


def check_floor(
    directory: Path, floor: Checkpoint, state: LogState, reader: TileReader
) -> None:
    """Check the signed checkpoint is ``floor``'s tree or a consistent extension of it.

    Args:
        directory: the log directory (for messages).
        floor: a checkpoint of this log seen before (verified by the caller).
        state: the classified state; ``reader`` serves its committed tree.
        reader: a tile reader of ``state.tree_size``.

    Raises:
        TamperError: rollback (smaller size, or no checkpoint), fork (another root at the
            same size, or no consistency proof), naming both sizes and roots.
    """
    cp_path = directory / CHECKPOINT_FILE
    cp = state.checkpoint
    seen = f"size {floor.size} root {_b64(floor.root)}"
    if cp is None:
        if floor.size or floor.root != state.tree_root:
            raise tamper(cp_path, f"missing, but a checkpoint of {seen} was seen before")
        return
    if cp.origin != floor.origin:
        raise tamper(
            cp_path, f"origin {cp.origin!r}, but the checkpoint seen before is {floor.origin!r}"
        )
    if cp.size < floor.size:
        raise tamper(
            cp_path,
            f"rollback: the signed checkpoint has size {cp.size}, but size {floor.size} (root "
            f"{floor.root.hex()[:16]}…) was seen before; the log was rolled back or replaced "
            "(a copy you restored on purpose: 'trajledger trust --help', --accept-rollback)",
        )
    if cp.size == floor.size and cp.root != floor.root:
        raise tamper(
            cp_path,
            f"fork: the signed checkpoint at size {cp.size} has root {cp.root.hex()[:16]}…, but "
            f"root {floor.root.hex()[:16]}… was seen before at that size",
        )
    proof: list[bytes] = []
    try:
        if 0 < floor.size < cp.size:
            proof = reader.consistency_proof(floor.size, cp.size)
        check_consistent(floor, cp, proof)
    except (ConsistencyError, OSError, FormatError, ProofError) as e:
        raise tamper(
            cp_path,
            f"fork: the signed checkpoint of size {cp.size} (root {cp.root.hex()[:16]}…) does "
            f"not extend size {floor.size} (root {floor.root.hex()[:16]}…) seen before: {e}",
        ) from e
