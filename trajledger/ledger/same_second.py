"""Records whose time is to the second, made again within that second.

Scope: `recorded_anew`. A record that names its time (an evaluation's ``evaluatedAt``, a
release's ``releasedAt``, an unsealing's ``unsealedAt``, a refusal's: to the second) and is
otherwise the same as one made earlier in that second is the same envelope: the log holds it
already (`ledger.record.Recorded.new` is false) and nothing is logged. Where each run is an
event of its own (a run between two identical evaluations would stay the latest; a second
opening of a sealed suite, or a second refused training, would go unlogged; a re-release after
its revocation would be the revoked release), it is recorded again at the next second (rev40,
SECURITY.md "twenty-eighth round"). Non-scope: records that name a fresh identifier (a
training run's ``invocationId``); approvals and revocations (``ledger.status``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .errors import AlreadyRecordedError, LedgerError

if TYPE_CHECKING:
    from .record import Recorded

__all__ = ["recorded_anew"]

_WAIT, _POLL, _TRIES = 5.0, 0.05, 5


def recorded_anew(record: Callable[[str], Recorded], clock: Callable[[], str],
                  stands: Callable[[Recorded], bool] | None = None) -> Recorded:
    """``record(when)`` at ``clock()``'s second; again at each later second the clock tells (a
    clock set back: the second it tells) while the log held it already, unless ``stands``
    says the record held still stands for this run (a release run again after a commit it
    could not confirm: the same decision), or held its digest with other signed metadata (an
    evaluation with the same files and another configuration: `AlreadyRecordedError`, nothing
    appended).

    Raises:
        LedgerError: the clock did not move on within `_WAIT` seconds, or the record was held
            already at each of `_TRIES` seconds (nothing more recorded).
        AlreadyRecordedError: its digest was held with other signed metadata at each of
            `_TRIES` seconds: not the same second's doing (the lead: a clash that does not
            depend on the time looped for ever).
    """
    when = clock()
    for tried in range(1, _TRIES + 1):
        try:
            rec = record(when)
            if rec.new or (stands is not None and stands(rec)):
                return rec
        except AlreadyRecordedError:
            if tried == _TRIES:
                raise
        if tried == _TRIES:
            break
        for _ in range(int(_WAIT / _POLL)):
            if (later := clock()) != when:
                break
            time.sleep(_POLL)
        else:
            raise LedgerError(f"the same record was made at {when} already, and the clock did "
                              f"not move on within {_WAIT:.0f} s to make this one at the next "
                              "second; nothing more was recorded (check the system clock)")
        when = later
    raise LedgerError(f"the same record was held already at each of {_TRIES} seconds up to "
                      f"{when}; nothing more was recorded (another process makes it too?)")
