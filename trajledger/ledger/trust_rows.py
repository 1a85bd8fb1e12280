"""The rows a log's records give a user's trust state (`ledger.trust_state`), and the worker
processes that derive them during a long first use.

Scope: for each entry of a kind that names, lists or links (`reads_envelope`), its record's rows
(`derive`): its name and version, the digests it lists, the artifacts it depends on, whether it
is a held-out dataset, or, when its envelope cannot be read, that it is unreadable. Records are
parsed strictly (`verify.log_index.read_record`), except a rollout batch's, whose rows come from
a few members (`batch_fields`): why that is safe is said there. `Workers` reads and parses the
envelopes of a long first use in forked processes.
Non-scope: verifying anything (a decision verifies each record it uses); the state's tables and
transactions (``trust_state``).
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from trajledger.verify.digest import digest_bytes, parse_digest
from trajledger.verify.errors import FormatError, ProvenanceError
from trajledger.verify.kinds import KINDS, name_version
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.log_index import read_record
from trajledger.verify.predicates import HELD_OUT, ROLLOUT_BATCH, Dataset
from trajledger.verify.statement import Statement, Subject

__all__ = ["WORKERS", "DerivedRows", "Workers", "batch_fields", "derive", "read_or_none",
           "reads_envelope"]

WORKERS = 2
"""How many processes read envelopes for a long first use."""


class Workers:
    """Processes that read and parse envelopes for a long first use (`TrustState.sync`): each
    makes its own ``read_blob`` with the factory it is given, and derives the rows of a run of
    entries (`_derive_run`) while the caller reads, chains and inserts the runs before it."""

    def __init__(self, blob_reader: Callable[[], Callable[[str], bytes | None]]) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self._pool = ProcessPoolExecutor(
            WORKERS, mp_context=multiprocessing.get_context("fork"),
            initializer=_start_worker, initargs=(blob_reader,))

    @staticmethod
    def possible() -> bool:
        """Workers are forked, on Linux, from a process with no other thread: a fork copies
        no lock another thread holds, and (unlike spawn) re-runs no caller's script."""
        return sys.platform == "linux" and threading.active_count() == 1

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(cancel_futures=True)

    def derive(self, entries: Sequence[tuple[int, LogEntry, bytes]]) -> Any:
        """The future of the rows of ``entries`` that need their envelopes; None when a worker
        died before (the caller derives them itself: `rows`)."""
        from concurrent.futures import BrokenExecutor

        try:
            return self._pool.submit(_derive_run, [(i, e.kind, e.envelope, e.subject, raw)
                                                   for i, e, raw in entries
                                                   if reads_envelope(e.kind)])
        except BrokenExecutor:
            return None

    @staticmethod
    def rows(future: Any) -> DerivedRows | None:
        """The rows a worker derived (`derive`'s future); None when it gave none because a
        worker process died (the out-of-memory killer, a signal): the caller then derives
        them itself, as without workers, instead of failing the whole reading."""
        from concurrent.futures import BrokenExecutor

        if future is None:
            return None
        try:
            rows: DerivedRows = future.result()
        except BrokenExecutor:
            return None
        return rows


_worker_read: Callable[[str], bytes | None] | None = None
"""A worker process's ``read_blob`` (`_start_worker`)."""


def _start_worker(blob_reader: Callable[[], Callable[[str], bytes | None]]) -> None:
    import signal

    from trajledger._signals import exit_with_parent

    global _worker_read
    # Ctrl-C reaches the whole process group: the parent stops the reading and the pool; a
    # worker interrupted too would print its own traceback on the user's terminal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()
    _worker_read = blob_reader()


def _derive_run(run: Sequence[tuple[int, str, str, str, bytes]]) -> DerivedRows:
    """In a worker: the rows of entries of kinds that read their envelope, already parsed and
    chained by the caller, each ``(index, kind, envelope digest, subject, entry bytes)``: a
    rollout batch's entry is parsed again only when its envelope does not give its rows."""
    assert _worker_read is not None
    rows = DerivedRows()
    for i, kind, digest, subject, raw in run:
        envelope = read_or_none(_worker_read, digest)
        if kind != "rollout-batch" or not _derive_batch(rows, i, digest, subject, envelope):
            derive(rows, i, LogEntry.from_bytes(raw, f"log entry {i}"), envelope)
    return rows


def reads_envelope(kind: str) -> bool:
    """Whether the index needs a record's statement: its kind is named, lists or links."""
    k = KINDS[kind]
    return bool(k.named or k.lists or k.lineage)


def read_or_none(read_blob: Callable[[str], bytes | None], digest: str) -> bytes | None:
    try:
        return read_blob(digest)
    except OSError:
        return None


@dataclass
class DerivedRows:
    """The rows derived from a run of entries, inserted together: one statement per table."""

    entries: list[tuple[int, str, str, bytes]] = field(default_factory=list)
    names: list[tuple[int, str, str, str, str]] = field(default_factory=list)
    listing: list[tuple[str, int]] = field(default_factory=list)
    refs: list[tuple[str, int, str]] = field(default_factory=list)
    unreadable: list[tuple[int]] = field(default_factory=list)
    held_out: list[tuple[int]] = field(default_factory=list)

    def insert(self, executemany: Callable[[str, Iterable[Sequence[Any]]], None]) -> None:
        """Insert the rows with ``executemany`` (a state's), one statement per table."""
        executemany("INSERT OR REPLACE INTO entries (idx, kind, subject, raw) "
                    "VALUES (?, ?, ?, ?)", self.entries)
        executemany("INSERT OR REPLACE INTO names VALUES (?, ?, ?, ?, ?)", self.names)
        executemany("INSERT INTO listing (digest, idx) VALUES (?, ?)", self.listing)
        executemany("INSERT INTO refs (dst, idx, role) VALUES (?, ?, ?)", self.refs)
        executemany("INSERT OR IGNORE INTO unreadable (idx) VALUES (?)", self.unreadable)
        executemany("INSERT OR IGNORE INTO held_out (idx) VALUES (?)", self.held_out)


def derive(rows: DerivedRows, i: int, entry: LogEntry, envelope: bytes | None) -> bool:
    """Add the rows entry ``i``'s record gives (its name, what it lists, what it references,
    whether it is a held-out dataset) from its ``envelope``, unverified: a decision verifies
    the record it uses. A record that cannot be read is listed as unreadable (and a named one
    keeps a row without its name). False then.

    A rollout batch is read by `batch_fields` (the few members its rows come from), every
    other record, and a batch that does not give those members, strictly (`read_record`)."""
    kind = KINDS[entry.kind]
    if entry.kind == "rollout-batch" and _derive_batch(rows, i, entry.envelope, entry.subject,
                                                       envelope):
        return True
    try:
        statement, pred = read_record(entry, envelope, f"log entry {i}")
    except ProvenanceError:
        if kind.named:
            rows.names.append((i, entry.kind, "", "", entry.subject))
        rows.unreadable.append((i,))
        return False
    if kind.named:
        name, version = name_version(entry.kind, statement)
        rows.names.append((i, entry.kind, name, version, entry.subject))
    rows.listing += [(d, i) for d in kind.listed(pred)]
    rows.refs += [(d.digest, i, d.role) for d in kind.dependencies(pred)]
    if isinstance(pred, Dataset) and pred.split in HELD_OUT:
        rows.held_out.append((i,))
    return True


def _derive_batch(rows: DerivedRows, i: int, envelope_digest: str, subject: str,
                  envelope: bytes | None) -> bool:
    """Add the rows of rollout batch ``i`` (its envelope's digest and its subject as its log
    entry gives them) read by `batch_fields`; False (nothing added) when it cannot."""
    fields = None if envelope is None else batch_fields(envelope_digest, subject, envelope)
    if fields is None:
        return False
    statement, pred = fields
    rows.names.append((i, "rollout-batch", *name_version("rollout-batch", statement), subject))
    rows.refs += [(d.digest, i, d.role) for d in KINDS["rollout-batch"].dependencies(pred)]
    return True


def batch_fields(envelope_digest: str, subject: str, envelope: bytes
                  ) -> tuple[Statement, Any] | None:
    """The members of a rollout batch's record its index rows come from (its first subject's
    name, the artifacts it depends on: `verify.kinds` reads them from these), read without the
    strict parse; None when one is missing or of another type (the strict read decides then).

    Why a batch may skip the strict parse (about 80 of its 100 µs here): a rollout batch names
    and links, it neither lists nor restricts (`Kind.restricts`), and is never a held-out
    dataset, so nothing fails closed on its being unreadable; every decision that uses a batch
    reads its record strictly and verifies it (`verify.lineage.LineageVerifier.record`), so a
    batch this reads but the strict read refuses fails there, as it did when it was listed
    unreadable (tests/unit/ledger/test_trust_state.py). Its envelope's digest is still checked:
    the rows are those of the record the entry names.
    """
    if digest_bytes(envelope) != envelope_digest:
        return None
    try:
        doc = json.loads(envelope)
        statement = json.loads(base64.b64decode(doc["payload"], validate=True))
        pred = statement["predicate"]
        first = statement["subject"][0]
        if not isinstance(pred, dict) or not isinstance(first, dict):
            return None
        refs = {k: pred.get(k) for k in ("environment", "evaluator")}
        if (statement["predicateType"] != ROLLOUT_BATCH
                or not isinstance(first["name"], str) or not first["name"]
                or not isinstance(refs["environment"], dict)
                or not (refs["evaluator"] is None or isinstance(refs["evaluator"], dict))):
            return None
        batch = SimpleNamespace(
            environment=SimpleNamespace(digest=refs["environment"]["digest"]),
            evaluator=None if refs["evaluator"] is None
            else SimpleNamespace(digest=refs["evaluator"]["digest"]),
            failures_of=pred.get("failuresOf"),
            policy_version=pred["policyVersion"],
        )
        for d in (batch.environment.digest, getattr(batch.evaluator, "digest", None),
                  batch.failures_of):
            if d is not None:
                parse_digest(d)
        if not isinstance(batch.policy_version, str) or not batch.policy_version:
            return None
    except (ValueError, TypeError, KeyError, IndexError, RecursionError, FormatError):
        return None
    return Statement((Subject(first["name"], subject.removeprefix("sha256:")),),
                     ROLLOUT_BATCH, pred), batch
