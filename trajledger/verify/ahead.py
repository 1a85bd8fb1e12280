"""The walk with its signature checks on a second thread (issue 21 item 2, walk38).

Scope: `walk_ahead` runs one lineage walk while a thread of its own checks the walk's signatures:
`cryptography`'s Ed25519 (and ECDSA) check releases the GIL, so the checks run on the second core
while the walk's Python runs on the first.

**It cannot change a decision.** Every `PublicKey.verify` the walk makes answers True at once
(`verify.keys.AHEAD`) and is checked on the thread, with the same key over the same bytes. Before
the walk's result is returned, every check started has returned (`SignatureThread.confirm`). When
each held, the walk took the path the checks made in turn would have taken, answer for answer, so
its report is theirs. When one did not hold (or raised), the walk is stopped where it learnt it,
its verifier and report thrown away, and the walk made again on a fresh verifier with every check
in turn, as without this module: a failing lineage reports exactly what it reports without it. A
walk that raised is raised as it is only when every check held (then the checks in turn raise it
at the same point); else it is walked again in turn.

**Bounded.** The walk runs at most `BUDGET` ahead of its checks, counting each artifact it walks
and each artifact its record names (`SignatureThread.walked`, called by the walk before it looks
up or follows what a record names): past it, the walk waits for every check started. So records
whose signatures are not yet known make the walk look at no more than `BUDGET` artifacts before
a forged one is found: a forged record naming 100,000 parents is confirmed before the first is
looked up. Each record is read whole (at most `MAX_ENVELOPE_BYTES`), with its own files, before its
check returns: what the walk in turn reads before it knows a record fails. At most `WINDOW`
checks wait at a time.

Nothing is trusted from a caller: the answers are made here, for this walk, and thrown away with
it. The thread is ended on every way out (a walk that raises, Ctrl-C, a hang-up); a check still
queued then is dropped.

Non-scope: the verifier alone (``python -m verify``) walks in turn: this module would count in its
core's lines; the re-hashing (``data="hash"``) keeps the second core for the hashing workers.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import TypeVar

from .keys import AHEAD, PublicKey

__all__ = ["BUDGET", "WINDOW", "Refuted", "SignatureThread", "walk_ahead"]

V = TypeVar("V")
T = TypeVar("T")
WINDOW = 64
"""Checks that may wait at a time; the next waits for the oldest (the queue's memory stays
bounded). A refutation learnt so is raised by the next `confirm`."""
BUDGET = 64
"""How far the walk may run ahead of its checks: artifacts walked and named (`walked`)."""


class Refuted(BaseException):
    """A check answered True ahead did not hold: the walk made on that answer is thrown away
    (a `BaseException`, so no ``except Exception`` of the walk can take it for a failure)."""


class SignatureThread:
    """The thread that makes the checks (`verify.keys.ChecksAhead`)."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[PublicKey, bytes, bytes] | None] = queue.SimpleQueue()
        self.answers: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self.owed = self.spent = 0
        self.refuted = False
        self.dropping = False
        self.thread = threading.Thread(target=self._work, name="signatures", daemon=True)
        self.thread.start()

    def _work(self) -> None:
        # The thread's own context has no `AHEAD` (a thread starts with an empty one): each
        # `verify` here is the check itself.
        while (job := self.jobs.get()) is not None:
            try:
                held = not self.dropping and job[0].verify(job[1], job[2]) is True
            except BaseException:  # a check that raises did not hold; the walk in turn raises it
                held = False
            self.answers.put(held)

    def check(self, key: PublicKey, signature: bytes, data: bytes) -> bool:
        """Queue the check; answer True (confirmed by `confirm`)."""
        if self.owed >= WINDOW:  # (the oldest answer first: the one thread answers in order)
            self.owed -= 1
            self.refuted = self.refuted or not self.answers.get()
        self.jobs.put((key, signature, data))
        self.owed += 1
        return True

    def walked(self, names: int) -> None:
        """An artifact walked, whose record names ``names`` others: past `BUDGET` since the
        last confirmation, `confirm`."""
        self.spent += 1 + names
        if self.spent > BUDGET:
            self.confirm()

    def confirm(self) -> None:
        """Wait for every check queued.

        Raises:
            Refuted: one did not hold (and every later call raises it too).
        """
        self.spent = 0
        while self.owed and not self.refuted:
            self.owed -= 1
            self.refuted = not self.answers.get()
        if self.refuted:
            raise Refuted

    def close(self) -> None:
        """End the thread: checks still queued are dropped."""
        self.dropping = True
        self.jobs.put(None)
        self.thread.join()


def walk_ahead(verifier: V, walk: Callable[[V], T], again: Callable[[], V]) -> T:
    """``walk(verifier)`` with its signatures checked on a thread (the module's doc): its result
    when every check held; else ``walk(again())``, a fresh verifier walked with every check in
    turn.

    Raises:
        BaseException: what ``walk`` raised, when every check held; what the walk in turn
            raises, else; a Ctrl-C at once.
    """
    checks = SignatureThread()
    token = AHEAD.set(checks)
    try:
        try:
            out = walk(verifier)
            checks.confirm()
            return out
        except Refuted:
            pass
        except Exception:
            try:
                checks.confirm()
            except Refuted:
                pass
            else:
                raise
    finally:
        AHEAD.reset(token)
        checks.close()
    return walk(again())
