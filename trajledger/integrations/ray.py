"""Ray rollout fleets recording into one ledger: blobs in parallel, appends through one writer.

Scope: `LedgerWriter.start` runs one Ray actor per ledger that owns its log (the single
writer) and the producer key. Workers (Ray tasks or actors, as in verl or OpenRLHF rollout
fleets) record through the public recording API, `Ledger.record_batch`, on a worker-side view
of the ledger (`LedgerWriter.ledger`):

- validation, Parquet encoding, hashing and storing the blobs run in the worker, in parallel,
  straight into the shared object store (a directory every worker can reach, or ``s3://``);
- the producer signature is made by the writer actor (the private key never leaves it), and
  only for rollout-batch statements whose manifest is already in the store;
- log reads and appends go to the writer actor, which group-commits the appends that arrive
  together (one fsync round for many workers' batches).

Non-scope: scheduling rollouts (Ray, verl, OpenRLHF do that), other record kinds (datasets,
approvals: record them with the ledger itself), more than one writer per log.

Spec: docs/ray.md. Layer: above ``trajledger.ledger``; ray is imported with this module.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import ray

from trajledger.api import Ledger
from trajledger.ledger.config import LedgerConfig
from trajledger.ledger.errors import LedgerError
from trajledger.ledger.keys import Signer
from trajledger.ledger.log.reader import LogReader
from trajledger.verify import predicates
from trajledger.verify.errors import FormatError, PolicyError, ProvenanceError
from trajledger.verify.keys import PublicKey

if TYPE_CHECKING:
    from trajledger.ledger.artifacts import BatchResult
    from trajledger.ledger.log import Appended, EntrySpec, Log

__all__ = ["LedgerWriter", "WriterStats"]

_LOG_VALUES = frozenset({"size", "origin", "vkey"})
"""Log attributes that are values (properties), not methods."""

_LOG_READS = frozenset(n for n in vars(LogReader) if not n.startswith("_")) - {"open", "close"}
"""What the writer serves workers of its log: reads only (`LogReader`'s), never the writer's
methods (``create``, ``add_cosignature``, ``rotate_key``, ``exclusive``...) nor ``close``."""


@dataclass(frozen=True)
class WriterStats:
    """What the writer actor did.

    Attributes:
        appends: append requests received (one per recorded batch).
        commits: log appends made (each one fsync round; fewer than ``appends`` when requests
            arrived together and were group-committed).
        signatures: statements signed.
    """

    appends: int
    commits: int
    signatures: int


def _parse_pae(data: bytes) -> tuple[str, bytes]:
    """Split DSSE's PAE back into payload type and payload (exact lengths, nothing trailing)."""
    prefix = b"DSSEv1 "
    if not data.startswith(prefix):
        raise FormatError("signing request: not a DSSE v1 PAE")
    rest = data[len(prefix) :]
    type_len, _, rest = rest.partition(b" ")
    n = int(type_len) if type_len.isdigit() else -1
    if n < 0 or len(rest) < n + 1 or rest[n : n + 1] != b" ":
        raise FormatError("signing request: malformed PAE payload type")
    payload_type, rest = rest[:n].decode("utf-8"), rest[n + 1 :]
    body_len, _, body = rest.partition(b" ")
    m = int(body_len) if body_len.isdigit() else -1
    if m != len(body):
        raise FormatError("signing request: PAE body length does not match")
    return payload_type, body


class _Writer:
    """The Ray actor behind `LedgerWriter`: the one process that appends to the log."""

    def __init__(self, root: str, key: str, kinds: Sequence[str]) -> None:
        self.kinds = frozenset(kinds)
        self.error: str | None = None
        try:
            self.ledger = Ledger.open(Path(root))
            self.ledger.log.require_signer()  # fail at start, not at the first batch
            self.signer = self.ledger.keys.signer(key)
            from trajledger.ledger.log import Log

            # Workers' reads are served by a reader of their own, never behind an append. An
            # append raises the floor in the user's state (SQLite), which a worker holds while
            # its index reads new entries from here: if reads waited for appends, each would
            # wait for the other (until SQLite's 60 s timeout failed the append).
            self._reader = Log.open(
                self.ledger.log_dir,
                vkey=self.ledger.log.vkey,
                floor=self.ledger.log.checkpoint_bytes(),  # what the writer checked, at least
                cache_dir=self.ledger.cache_dir,
            )
        except ProvenanceError as e:
            self.error = str(e)  # reported by `describe`, as the caller's error
        self._log_lock = threading.Lock()  # one appender of the Log object at a time
        self._queue_lock = threading.Lock()
        self._queue: list[tuple[list[EntrySpec], dict[str, Any]]] = []
        self._appends = self._commits = self._signatures = 0

    def describe(self) -> dict[str, Any]:
        if self.error is not None:
            raise LedgerError(f"the ledger writer cannot start: {self.error}")
        store = self.ledger.config.store
        if "://" not in store:
            store = str((self.ledger.root / store).resolve())
        return {
            "origin": self.ledger.config.origin,
            "store": store,
            "key": self.signer.name,
            "public": self.signer.public.to_pem(),
        }

    def log_call(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        if name not in _LOG_READS:
            raise AttributeError(f"the ledger writer does not serve log.{name}")
        value = getattr(self._reader, name)  # the reader has its own lock
        if name in _LOG_VALUES:
            return value
        result = value(*args, **kwargs)
        # Iterators cannot cross processes: send what they yield.
        if hasattr(result, "__next__"):
            return list(result)
        return result

    def append(self, specs: list[EntrySpec], guard: tuple[Any, ...] | None = None
               ) -> Appended:
        """Queue the specs; whoever holds the log next appends every queued request at once.
        Each request gets its part of the group's `Appended` (of two workers' requests with the
        same envelope in one group, the first is told it made the entry).
        ``guard``: the blobs a worker's record names, the log size it began at, and a batch's
        `NamedLineages` (its references and size) or None, checked under the lock
        (`record.StillStored`) for every request of the group.

        Raises:
            PolicyError: an entry a worker may not append (see `_admit`); nothing is appended.
        """
        for spec in specs:
            self._admit(spec)
        slot: dict[str, Any] = {"guard": guard}
        with self._queue_lock:
            self._queue.append((specs, slot))
            self._appends += 1
        with self._log_lock:
            if "indices" not in slot and "error" not in slot:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                flat = [s for specs_, _ in batch for s in specs_]
                try:
                    indices = self.ledger.log.append(flat, check=self._guards(batch))
                    self._commits += 1
                except Exception as e:
                    if len(batch) == 1:
                        batch[0][1]["error"] = e
                    else:
                        # One request refused (a digest recorded with other metadata, under the
                        # log's lock) must not fail the others: each is appended alone.
                        for specs_, other in batch:
                            try:
                                other["indices"] = self.ledger.log.append(
                                    specs_, check=self._guards([(specs_, other)]))
                                self._commits += 1
                            except Exception as one:  # handed to that request's caller
                                other["error"] = one
                else:
                    at = 0
                    for specs_, other in batch:
                        other["indices"] = indices.part(at, at + len(specs_))
                        at += len(specs_)
        if "error" in slot:
            raise slot["error"]
        return cast("Appended", slot["indices"])

    def _admit(self, spec: EntrySpec) -> None:
        """Refuse an entry a worker may not append: only a record of a kind the writer signs
        for workers, stamped with the writer's time, whose stored envelope the writer signed
        (so `sign` checked it) about the entry's subject. A worker's append is otherwise an
        entry of any kind, time and claimed signer in a log nobody can edit."""
        from trajledger.verify.dsse import Envelope, verify_envelope
        from trajledger.verify.kinds import KINDS
        from trajledger.verify.statement import Statement

        what = f"append request ({spec.kind} entry, envelope {spec.envelope})"
        kind = KINDS.get(spec.kind)
        if kind is None or not self.kinds & set(kind.predicate_types):
            raise PolicyError(f"{what}: not a kind this writer records for workers")
        if spec.time is not None:
            raise PolicyError(f"{what}: the writer stamps the time, not a worker ({spec.time})")
        if spec.signers != (self.signer.public.keyid,):
            raise PolicyError(f"{what}: signers {list(spec.signers)}, want the writer's key only")
        try:
            envelope = Envelope.from_bytes(self.ledger.store.get_verified(spec.envelope), what)
            verify_envelope(envelope, [self.signer.public], what=what)
            statement = Statement.from_bytes(envelope.payload)
            kind.read(statement, what)
        except ProvenanceError as e:
            raise PolicyError(f"{what}: not an envelope this writer signed: {e}") from e
        if statement.predicate_type not in self.kinds or (
            statement.subjects[0].digest != spec.subject
        ):
            raise PolicyError(f"{what}: the envelope is not a {spec.kind} of {spec.subject}")

    def _guards(self, batch: Sequence[tuple[Any, dict[str, Any]]]
                ) -> Callable[[int], None] | None:
        from trajledger.ledger.artifacts import NamedLineages
        from trajledger.ledger.record import StillStored

        # The writer's own key, judged again for each kind it appends (a worker says nothing
        # about who signs: `_admit` holds it to the writer's key).
        me = ((self.signer.name, self.signer.public.keyid),)
        guards = [StillStored(self.ledger, frozenset(g[0]), g[1],
                              NamedLineages(self.ledger, tuple(g[2][0]), g[2][1]) if g[2] else None,
                              me, specs[0].kind)
                  for specs, slot in batch if (g := slot["guard"]) is not None and specs]
        if not guards:
            return None

        def check(size: int) -> None:
            for guard in guards:
                guard(size)

        return check

    def sign(self, name: str, data: bytes) -> bytes:
        """Sign a DSSE PAE for a worker: only an allowed statement about a stored manifest."""
        from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE
        from trajledger.verify.kinds import KINDS
        from trajledger.verify.statement import Statement

        if name != self.signer.name:
            raise PolicyError(f"the ledger writer signs with key {self.signer.name}, not {name}")
        payload_type, body = _parse_pae(data)
        if payload_type != INTOTO_PAYLOAD_TYPE:
            raise PolicyError(f"signing request: payload type {payload_type!r} is not in-toto")
        statement = Statement.from_bytes(body)
        if statement.predicate_type not in self.kinds:
            raise PolicyError(
                f"signing request: predicate type {statement.predicate_type!r} is not one this "
                f"writer signs for workers ({', '.join(sorted(self.kinds))})"
            )
        for subject in statement.subjects:
            if not self.ledger.store.exists(subject.digest):
                raise PolicyError(
                    f"signing request: {subject.digest} is not in the store; a worker stores "
                    "its files and manifest before asking for a signature"
                )
        for kind in KINDS.values():  # a predicate the ledger would refuse to read is not signed
            if statement.predicate_type in kind.predicate_types:
                try:
                    kind.read(statement, "predicate")
                except FormatError as e:
                    raise PolicyError(f"signing request: a malformed {kind.name}: {e}") from e
        self._signatures += 1
        return self.signer.sign(data)

    def stats(self) -> WriterStats:
        return WriterStats(self._appends, self._commits, self._signatures)


class _LogProxy:
    """The log of a worker-side ledger: every read and append is served by the writer actor."""

    def __init__(self, actor: Any) -> None:
        self._actor = actor

    def append(
        self, specs: Sequence[EntrySpec], check: Callable[[int], None] | None = None
    ) -> Appended:
        from trajledger.ledger.artifacts import NamedLineages
        from trajledger.ledger.record import StillStored

        guard = None
        then = check.then if isinstance(check, StillStored) else None
        if isinstance(check, StillStored) and (then is None or isinstance(then, NamedLineages)):
            # (the actor runs it under its lock, a batch's lineages judged again there)
            guard = (sorted(check.blobs), check.since,
                     (then.refs, then.since) if isinstance(then, NamedLineages) else None)
        elif check is not None:
            # A precondition is a local callable: it cannot run in the writer actor's process.
            raise LedgerError("a ledger attached to a Ray writer appends without preconditions")
        return cast("Appended", ray.get(self._actor.append.remote(list(specs), guard)))

    def require_signer(self) -> None:
        return None  # the writer loaded the log key when it started

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in _LOG_VALUES:
            return ray.get(self._actor.log_call.remote(name, (), {}))

        def call(*args: Any, **kwargs: Any) -> Any:
            return ray.get(self._actor.log_call.remote(name, args, kwargs))

        return call


@dataclass(frozen=True)
class _WriterSigner(Signer):
    """A producer key that signs through the writer actor (the private key stays there)."""

    actor: Any = field(default=None, repr=False, compare=False)

    def sign(self, data: bytes) -> bytes:
        return cast(bytes, ray.get(self.actor.sign.remote(self.name, data)))


_VIEWS: dict[str, tuple[Ledger, Signer]] = {}
_VIEWS_LOCK = threading.Lock()


_ROOT_PREFIX = "trajledger-ray-"
_HELD: list[int] = []  # the lock of this process's own directory, open for its life


def private_root(parent: Path | None = None) -> Path:
    """A private directory for this process's derived caches, removed at its exit.

    Ray ends its workers without running their exit handlers, so each directory is locked
    (``flock``) by its process for its life, and a new one first removes those of this user
    whose lock nobody holds: abandoned (before, each worker of each job left one behind).
    The lock file is locked before it takes its name, so a directory being made is never
    taken for abandoned; one without a lock file (an older version's) is left alone.
    """
    import fcntl

    parent = parent or Path(tempfile.gettempdir())
    for other in parent.glob(_ROOT_PREFIX + "*"):
        _remove_if_abandoned(other)
    root = Path(tempfile.mkdtemp(prefix=_ROOT_PREFIX, dir=parent))
    fd = os.open(root / ".lock-new", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(root / ".lock-new", root / ".lock")
    _HELD.append(fd)
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def _remove_if_abandoned(path: Path) -> None:
    import fcntl
    import stat

    try:
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return
        fd = os.open(path / ".lock", os.O_RDWR | os.O_NOFOLLOW)
    except OSError:  # no lock file: an older version's, or not ours to judge
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: its process is alive
        os.close(fd)
        return
    try:
        shutil.rmtree(path, ignore_errors=True)
    finally:
        os.close(fd)


class LedgerWriter:
    """A handle on the writer actor of one ledger; pass it to Ray tasks and actors.

    Example::

        writer = LedgerWriter.start("/shared/ledger", key="producer")

        @ray.remote
        def rollouts(writer, seed):
            steps = ...  # a step table, or one mapping per step
            return writer.record_batch(steps, env="cartpole@1", policy="ckpt-3").digest

        digests = ray.get([rollouts.remote(writer, s) for s in range(64)])
    """

    def __init__(self, actor: Any) -> None:
        """Wrap an existing writer actor (see `start` and `connect`)."""
        self.actor = actor

    @classmethod
    def start(
        cls,
        root: str | os.PathLike[str],
        *,
        key: str,
        name: str | None = None,
        kinds: Sequence[str] = (predicates.ROLLOUT_BATCH,),
        max_concurrency: int = 32,
        **options: Any,
    ) -> LedgerWriter:
        """Start the writer actor of the ledger at ``root`` (one per ledger).

        The actor opens the ledger, loads the log key and the producer key ``key`` (an
        encrypted key is opened with ``TRAJLEDGER_PASSPHRASE`` from the actor's environment).

        Args:
            root: the ledger directory, on the node where the actor runs.
            key: the producer key that signs the workers' batches.
            name: a Ray actor name, so that other drivers can `connect`.
            kinds: predicate types the writer signs for workers (default: rollout batches).
            max_concurrency: requests served at once (appends arriving together are
                group-committed).
            **options: more ``ray.remote`` actor options (``num_cpus``, ``resources``,
                ``runtime_env``...).

        Raises:
            LedgerError: the ledger, its log key or the producer key cannot be opened (raised
                by the first call on the handle when the actor failed to start).
        """
        opts: dict[str, Any] = {"max_concurrency": max_concurrency, "num_cpus": 0, **options}
        if name is not None:
            opts["name"] = name
        actor = ray.remote(_Writer).options(**opts).remote(str(root), key, tuple(kinds))
        handle = cls(actor)
        handle.describe()  # surface a start-up failure here
        return handle

    @classmethod
    def connect(cls, name: str) -> LedgerWriter:
        """The handle of a named writer actor started by another driver."""
        return cls(ray.get_actor(name))

    def describe(self) -> dict[str, Any]:
        """The ledger's origin, the store every worker writes to, and the producer key."""
        try:
            return cast(dict[str, Any], ray.get(self.actor.describe.remote()))
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, LedgerError):
                raise LedgerError(str(cause)) from e
            raise
        except ray.exceptions.RayActorError as e:
            raise LedgerError(f"the ledger writer actor died: {e}") from e

    def stats(self) -> WriterStats:
        """What the writer did so far."""
        return cast(WriterStats, ray.get(self.actor.stats.remote()))

    def ledger(self) -> tuple[Ledger, Signer]:
        """The worker-side view of the ledger and the producer signer (cached per process).

        The view stores blobs in the shared store itself, and reads and appends the log
        through the writer. Its derived caches (catalog) live in a private temporary
        directory of this process.
        """
        key = self.actor._actor_id.hex()
        with _VIEWS_LOCK:
            if key not in _VIEWS:
                info = self.describe()
                root = private_root()
                config = LedgerConfig(info["origin"], info["store"])
                ledger = Ledger.attached(root, config, cast("Log", _LogProxy(self.actor)))
                signer = _WriterSigner(
                    info["key"],
                    PublicKey.from_pem(info["public"]),
                    None,  # type: ignore[arg-type]  # the private key stays in the writer
                    actor=self.actor,
                )
                _VIEWS[key] = (ledger, signer)
            return _VIEWS[key]

    def record_batch(
        self, table_or_rows: Any, *, env: str, policy: str, **options: Any
    ) -> BatchResult:
        """Record one batch from this worker: `Ledger.record_batch` on the worker-side view.

        Args:
            table_or_rows: a step table, one mapping per step, or input files the worker reads.
            env: the registered environment (``NAME@VERSION``, digest or unique prefix).
            policy: the policy / model version that acted.
            **options: ``evaluator``, ``episodes``, ``name``, ``fmt``, ``consent``,
                ``licence``, ``retention``, ``generator``, ``on_chunk``.

        Returns:
            The recorded batch (``.digest``, ``.recorded.index``, ``.stats``).
        """
        ledger, signer = self.ledger()
        return ledger.record_batch(table_or_rows, env=env, policy=policy, signer=signer, **options)

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return (LedgerWriter, (self.actor,))
