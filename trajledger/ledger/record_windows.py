"""The step windows and normalised text fingerprints of a batch computed while it is
recorded, so that the first ``dataset create`` of it reads them kept instead of computing
them (issue 21 item 1; win39).

Scope: `computed` (from the step file recording just wrote and hashed, in its private
temporary directory, before the record's commit: what ``dataset create`` would compute for
the batch on the train side, `window_cache.compute` with the parts `window_cache.compared_parts`
of its features and not ``held``), `kept` (into the derived cache after the commit, the same
file and binding as ``dataset create`` writes: ``window_cache.keep``, named by the step file's
digest, of `window_cache.WINDOWS_VERSION`, its body hashed in its header). Batches of more than
`RECORD_STEPS` steps are left to ``dataset create``: their windows cost more than their
recording (1.4-1.6 CPU-s at 1,000,000 steps against 0.6 for recording them, issue 21 item 6;
twice their recording in process at 65,536 steps); a sealed batch has none (``dataset create``
reads what its record publishes).

Trust: the derived cache's, unchanged (``window_cache``): the file is read only when it names
the step file, is of this version and its body hashes to its header's digest; anything else is
computed again from the verified step file, with a warning. A crash between the commit and
`kept` leaves the batch without kept windows: ``dataset create`` computes them, as for a batch
recorded before this (by an older tree). A file already there is left as it is (another
record of the same step file, or the held side's, which holds more parts); none is left for a
step file erased between the commit and the write (nothing derived from erased data is kept).

Non-scope: the definitions (``step_windows``, ``text_fingerprint``), the comparison
(``contamination``), the admission gate (it never reads the cache).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trajledger.verify.errors import ProvenanceError

from .batch_features import decode_features
from .errors import LedgerError, read_failure

if TYPE_CHECKING:
    from .home import LedgerHome
    from .window_cache import Compared

__all__ = ["RECORD_STEPS", "computed", "kept"]

RECORD_STEPS = 16_384
"""The most steps a batch has for its windows to be computed while it is recorded: about a
tenth of a ``trajledger record`` process at this size (2 to 3.5 CPU-us a step, against 0.45
CPU-s a process and about 1 CPU-us a step; in process, without the interpreter's start,
they cost 50 to 70 % of a ``record_batch`` of 8,400 steps: win39's run in
docs/PERFORMANCE.md, "The windows at record time"). Larger batches are left to
``dataset create``."""


def computed(steps_path: Path, features: Path, steps: str, num_steps: int) -> Compared | None:
    """What ``dataset create`` compares of the batch being recorded on the train side,
    computed from its step file ``steps_path`` (digest ``steps``) and its features file
    ``features`` (the parts it needs); None when it has more than `RECORD_STEPS` steps, nothing
    to compare by windows or text, or when it cannot be computed here (then ``dataset create``
    computes it, and says why).

    Raises:
        OSError: the system failed to read those files (or an error raised from that,
            `errors.read_failure`: EIO, EACCES): nothing is committed yet; an operational
            error, as any other read of recording's.
    """
    if num_steps > RECORD_STEPS:
        return None  # (and step_windows not imported: 10-25 ms)
    from .window_cache import compared_parts, compute

    try:
        parts = compared_parts(decode_features(features.read_bytes(), steps))
        return compute(steps_path, (*parts, False)) if any(parts) else None
    except (ProvenanceError, LedgerError, OSError, ValueError, TypeError, KeyError) as e:
        if read_failure(e):  # the system failed a read of the files being recorded: exit 3
            raise
        return None  # derived data: never a reason to refuse a record


def kept(ledger: LedgerHome, steps: str, got: Compared | None) -> None:
    """Keep ``got`` (`computed`) in the derived cache of ``ledger`` for step file ``steps``,
    unless a file is there already; none when the step file was erased meanwhile (an erasure
    deletes the blob, then its derived files: `status.delete_erased`, under the log's lock,
    which the record no longer holds here)."""
    if got is None:
        return
    from .window_cache import cache_file, keep

    cache = ledger.cache_dir / "features"
    try:
        where = cache_file(cache, steps)
        if where.exists():
            return
        keep(cache, steps, got)
        if not ledger.store.exists(steps):  # erased since the commit: nothing derived kept
            where.unlink(missing_ok=True)
    except (OSError, ProvenanceError, LedgerError):  # derived: computed at dataset create
        return
