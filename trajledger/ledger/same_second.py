"""Records whose time is to the second, made again within that second.

Scope: `recorded_anew`. A record that names its time (an evaluation's ``evaluatedAt``, a
release's ``releasedAt``, an unsealing's ``unsealedAt``: to the second) and is otherwise the
same as one made earlier in that second is the same envelope: the log holds it already
(`ledger.record.Recorded.new` is false) and nothing is logged. Each run of the command that
records it is an event of its own (a run between two identical ones would stay the latest; a
re-release after a revocation would be the revoked release; a second opening of a sealed suite
would go unlogged): it is recorded again at the next second (rev40, SECURITY.md "twenty-eighth
round"). Non-scope: records that name a fresh identifier (a training run's ``invocationId``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .errors import AlreadyRecordedError

if TYPE_CHECKING:
    from .record import Recorded

__all__ = ["recorded_anew"]


def recorded_anew(record: Callable[[str], Recorded], clock: Callable[[], str]) -> Recorded:
    """``record(when)`` at ``clock()``'s second, again at each later second the clock tells
    (a clock set back: the second it tells) until the log did not hold it already: neither the
    same record nor, for an artifact, its digest with other signed metadata (an evaluation with
    the same files and another configuration: `AlreadyRecordedError`, nothing appended)."""
    when = clock()
    while True:
        try:
            if (rec := record(when)).new:
                return rec
        except AlreadyRecordedError:
            pass
        while (later := clock()) == when:
            time.sleep(0.05)
        when = later
