"""Verify an artifact and its whole lineage against a trust policy, as a graph.

Scope: given `Evidence` (a ledger directory or an exported bundle), a `LogIndex` over its entries
and a `TrustPolicy`, check everything an auditor must believe before trusting a checkpoint, a
dataset or a rollout batch:

- the log: the checkpoint signed by the policy's log key(s) (and cosigned by the witness
  threshold, when the policy's witness role applies to this log's origin), the hash chain, each
  record used included under the checkpoint;
- each artifact: its identity record (envelope bytes hash to the entry; signed by the role(s)
  and threshold its kind requires, `verify.kinds`; allowed predicate type; subject = artifact),
  its typed predicate, its manifest and every data blob (re-hashed, or with ``data="size"``
  compared by size only, and said so);
- terms: a rollout batch whose licence the policy does not accept (``accepted_licences``)
  fails;
- status: revocations (fail), erasures (reported as erased, not as tampering: a blob is excused
  as erased only when a verified erasure lists it). **Fail closed**: a revocation or erasure of
  the artifact, or a dataset that could hold its batches out, whose envelope is missing or
  damaged fails the artifact (it cannot be known what it says); one that verifies but is not
  signed under the policy is shown and ignored;
- relations, from the registry (`verify.kinds.Kind.dependencies`): a checkpoint's datasets (train
  split only, no member batch in a holdout or regression dataset recorded before it, approved by
  the approver threshold for the purpose before it was recorded, unexpired), environments,
  evaluators and parent; a dataset's batches; a batch's environment, evaluator and generating
  checkpoint.

The result is a DAG: one `Node` per artifact (keyed by digest), verified once however many
artifacts use it, with `Edge`s carrying the dependency's role. Rendering it as text shows each
node once and refers back ("see above"); its JSON is a node table plus an edge list
(``schemas/report.v1.md``). The cost is linear in nodes + edges. On request
(`LineageVerifier.with_records`), a report also carries the records about its artifacts that
are not nodes of it (`Mark`: approvals, revocations, erasures, evaluations...), each verified
as a record, for a picture of the lineage.
Non-scope: reading rollout data as tables (the runner does that on the bytes it verified); where
the index comes from (a ledger keeps it in the user's state directory).
Spec: schemas/SPEC.md, section "Lineage verification"; schemas/report.v1.md.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ._jcs import canonical_bytes
from .checkpoint import Checkpoint, check_consistent, verify_checkpoint, verify_cosignatures
from .digest import digest_bytes, hash_file, parse_digest, result_of
from .dsse import Envelope
from .errors import FormatError, PolicyError, ProvenanceError, SignatureError, VerificationError
from .evidence import Evidence
from .kinds import CHECKPOINT_ROLES, KINDS, NAMED, Dependency, Kind, Signing, name_version
from .log_entry import LogEntry
from .log_index import LogIndex, MemoryIndex
from .log_key import Handover, key_chain
from .logcheck import check_entries
from .manifest import Manifest, check_file_subjects
from .merkle import leaf_hash, verify_inclusion
from .note import verifier_from_vkey
from .policy import KEY_ROLES, Identity, TrustPolicy
from .predicates import (
    CARD_MAX_BYTES,
    HELD_OUT,
    Approval,
    Dataset,
    Erasure,
    Evaluation,
    Predicate,
    Provenance,
    Release,
    Revocation,
    RolloutBatch,
    Sealed,
    split_test_name,
)
from .statement import Statement, unsigned_statement, verify_statement
from .strict_json import load_object
from .times import format_time, parse_time

__all__ = [
    "CLOCK_SKEW",
    "ERASED",
    "FAIL",
    "INFO",
    "OK",
    "REPORT_FORMAT",
    "Check",
    "Edge",
    "LineageVerifier",
    "Mark",
    "Node",
    "Record",
    "RecordFailure",
    "Report",
]

OK, FAIL, ERASED, INFO = "ok", "fail", "erased", "info"
REPORT_FORMAT = "https://trajledger.dev/report/v1"
"""The ``format`` of a report's JSON form (schemas/report.v1.md)."""

_MARK = {OK: "✓", FAIL: "✗", ERASED: "∅", INFO: "·"}
CLOCK_SKEW = 300
"""Seconds a signed time may run ahead of the time the log integrated its record (clocks
differ a little); more, and the signed time is not believed."""
_MAX_INDENT = 12
"""Depth at which the text report stops indenting further. A chain of training iterations
nests three levels per iteration; indenting all the way would make each line's width, and the
report's size, grow with the chain (quadratic in its length). Deeper lines name their depth."""


@dataclass
class Check:
    """One check of a node: what was checked, its outcome and why.

    Attributes:
        what: e.g. ``files``, ``record``, ``revoked``, ``dataset cartpole@2: approvals``.
        status: ``ok``, ``fail``, ``erased`` (blobs deleted by a valid erasure) or ``info``.
        detail: the reason or a short fact.
    """

    what: str
    status: str = OK
    detail: str = ""
    cause: str | None = None
    """For a failure that follows from another node's (a record signed by a key the policy
    does not hold, a batch left unverified because its checkpoint failed): that node's id."""

    def to_json(self) -> dict[str, str]:
        """The JSON form (``cause`` only when there is one)."""
        out = {"what": self.what, "status": self.status, "detail": self.detail}
        return out | ({"cause": self.cause} if self.cause else {})


@dataclass
class Node:
    """One node of a report: an artifact (keyed by digest), the log, or a decision.

    Attributes:
        id: the artifact's digest, ``log``, or ``<decision>:<digest>``.
        kind: the artifact kind, ``log`` or the decision (``admission``).
        name, version: from the artifact's signed predicate (empty when unknown).
        index: the log index of its identity record, when it has one.
        signers: keyids that signed that record.
        checks: every check made of it.
    """

    id: str
    kind: str
    name: str = ""
    version: str = ""
    index: int | None = None
    signers: tuple[str, ...] = ()
    checks: list[Check] = field(default_factory=list)

    def add(self, what: str, status: str = OK, detail: str = "", cause: str | None = None
            ) -> Check:
        """Record a check and return it."""
        c = Check(what, status, detail, cause)
        self.checks.append(c)
        return c

    def fail(self, what: str, detail: str, cause: str | None = None) -> Check:
        """Record a failed check (``cause``: the node whose failure it follows from)."""
        return self.add(what, FAIL, detail, cause)

    @property
    def status(self) -> str:
        """``fail`` when a check failed; else ``erased`` when data was erased; else ``ok``."""
        statuses = {c.status for c in self.checks}
        if FAIL in statuses:
            return FAIL
        return ERASED if ERASED in statuses else OK

    @property
    def ok(self) -> bool:
        """True when no check of this node failed."""
        return self.status != FAIL

    @property
    def label(self) -> str:
        """``kind name@version (sha256:1234abcd…)`` (or the node's own name)."""
        if self.kind in KINDS:
            ref = f"{self.name}@{self.version}" if self.version else self.name
            if not ref:
                return f"{self.kind} {_short(self.id)}"
            return f"{self.kind} {ref} ({_short(self.id)})"
        return self.name or self.kind

    def to_json(self) -> dict[str, Any]:
        """The JSON form (a row of the report's node table)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "version": self.version,
            "logIndex": self.index,
            "signers": list(self.signers),
            "status": self.status,
            "checks": [c.to_json() for c in self.checks],
        }


@dataclass(frozen=True)
class Edge:
    """``src`` depends on ``dst`` in the role ``role`` (a dataset's ``batch``...)."""

    src: str
    dst: str
    role: str

    def to_json(self) -> dict[str, str]:
        """The JSON form."""
        return {"from": self.src, "to": self.dst, "role": self.role}


@dataclass(frozen=True)
class Mark:
    """A log record about artifacts of a report that is not a node of it: an approval, a
    revocation, an erasure, an evaluation of a checkpoint... (`LineageVerifier.with_records`).

    Attributes:
        index: its log index.
        kind: its entry kind.
        about: ``(node id, role)`` for each artifact of the report it is about: its subject
            (the role is the kind) or a dependency it names (the dependency's role).
        signers: the keyids its entry names.
        status: ``ok`` (it verifies as a record: signature, role, inclusion), ``info`` (intact,
            not signed under the policy: ignored) or ``fail`` (missing or damaged evidence).
        detail: what it says (its predicate's plain fields), or why it does not verify.
    """

    index: int
    kind: str
    about: tuple[tuple[str, str], ...]
    signers: tuple[str, ...]
    status: str
    detail: str

    @property
    def label(self) -> str:
        """``approval at log index 12``."""
        return f"{self.kind} at log index {self.index}"

    def to_json(self) -> dict[str, Any]:
        """The JSON form (a row of the report's ``records``)."""
        return {"logIndex": self.index, "kind": self.kind,
                "about": [{"id": i, "role": r} for i, r in self.about],
                "signers": list(self.signers), "status": self.status, "detail": self.detail}


@dataclass
class Report:
    """A verified graph: the nodes reachable from ``roots`` and the edges between them.

    ``direction`` is ``upstream`` (what made the subject: edges followed from depending to
    dependency) or ``downstream`` (what the subject reached: edges followed backwards).
    ``records`` are the records about its artifacts that are not nodes (`Mark`), when asked
    for (`LineageVerifier.with_records`).
    """

    subject: str
    roots: list[str]
    nodes: dict[str, Node]
    edges: list[Edge]
    direction: str = "upstream"
    records: list[Mark] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no check of any node failed."""
        return all(n.ok for n in self.nodes.values())

    def count(self) -> tuple[int, int]:
        """(checks, failed checks) over the whole graph, each node counted once."""
        n = sum(len(node.checks) for node in self.nodes.values())
        f = sum(1 for node in self.nodes.values() for c in node.checks if c.status == FAIL)
        return n, f

    def failing(self) -> set[str]:
        """The nodes that fail: a check of their own failed, or they depend (through any
        number of edges) on a node that does: what was built on a revoked batch fails too."""
        users: dict[str, list[str]] = {}
        for e in self.edges:
            users.setdefault(e.dst, []).append(e.src)
        out = {nid for nid, n in self.nodes.items() if not n.ok}
        todo = list(out)
        while todo:
            for src in users.get(todo.pop(), []):
                if src not in out:
                    out.add(src)
                    todo.append(src)
        return out

    def causes(self) -> list[tuple[Node, list[Check], int]]:
        """The root causes: each node with failed checks that follow from no other failure
        (its own problems), those checks, and how many records depend on it (fail only
        because of it: nodes failing through their lineage, and each check naming it, or a
        node depending on it, as its cause). In walk order, then nodes no root reaches (a
        key that signed records the policy does not trust)."""
        return self._blame()[0]

    def _blame(self) -> tuple[list[tuple[Node, list[Check], int]], int]:
        """`causes`, and how many records fail only because of a root cause (each once)."""
        failing = self.failing()
        deps: dict[str, list[str]] = {}
        for e in self.edges:
            deps.setdefault(e.src, []).append(e.dst)
        failed = {nid: [c for c in n.checks if c.status == FAIL] for nid, n in self.nodes.items()}
        own = {nid: [c for c in cs if c.cause not in failing] for nid, cs in failed.items()}

        def via(nid: str) -> list[str]:
            caused = [c.cause for c in failed[nid] if c.cause in failing]
            return [v for v in caused if v is not None] or [
                d for d in deps.get(nid, []) if d in failing]

        blamed: dict[str, set[str]] = {}
        for start in failing:  # iteratively: a lineage may be thousands of nodes deep
            stack, visiting = [start], set()
            while stack:
                nid = stack[-1]
                if nid in blamed or own[nid]:
                    stack.pop()
                    continue
                todo = [v for v in via(nid) if v not in blamed and not own[v]
                        and v not in visiting]
                if todo and nid not in visiting:
                    visiting.add(nid)
                    stack.extend(todo)
                    continue
                blamed[nid] = set().union(*({v} if own[v] else blamed.get(v, set())
                                            for v in via(nid)))
                stack.pop()
        counts: dict[str, int] = {}
        total = 0
        for nid in failing:
            if own[nid]:
                continue
            # A record is an artifact failing through its lineage, or each check that follows
            # from a cause (a bundle's terms of batches never reached); decisions are not.
            units = sum(1 for c in failed[nid] if c.cause in failing) or int(
                self.nodes[nid].kind in KINDS)
            total += units
            for r in blamed.get(nid, ()):
                counts[r] = counts.get(r, 0) + units
        order = [node.id for _d, _e, node, first in self.walk() if first]
        walked = set(order)
        order += [nid for nid in self.nodes if nid not in walked]
        return [(self.nodes[nid], own[nid], counts.get(nid, 0)) for nid in order
                if own[nid]], total

    def verdict(self) -> str:
        """The report's first line: the outcome, the subject and the count of problems.

        ``✓ OK: <subject>: N checks passed`` or ``✗ FAIL: <subject>: P problem(s) in N checks,
        in K node(s); M more fail through their lineage``; a problem is a root cause (a failed
        check that follows from no other failure, `causes`), and what fails only because of
        one is counted apart.
        """
        n, failed = self.count()
        node = self.nodes.get(self.subject)
        subject = node.label if node is not None else self.subject
        if not failed:
            erased = self.erased()
            return f"✓ OK: {subject}: {n} checks passed" + (
                f" ({erased} erased: data deleted, digests verified)" if erased else "")
        causes, depend = self._blame()
        problems = sum(len(checks) for _n, checks, _d in causes)
        where = (f"in {len(causes)} node(s)" if [c[0].id for c in causes] != ["log"]
                 else "in the log")
        return (f"✗ FAIL: {subject}: {problems} problem(s) in {n} checks, {where}"
                + (f"; {depend} more fail through their lineage" if depend else ""))

    def erased(self) -> int:
        """How many ``erased`` checks the graph holds."""
        return sum(1 for n in self.nodes.values() for c in n.checks if c.status == ERASED)

    def _children(self) -> dict[str, list[Edge]]:
        out: dict[str, list[Edge]] = {}
        for e in self.edges:
            key = e.src if self.direction == "upstream" else e.dst
            out.setdefault(key, []).append(e)
        return out

    def walk(self) -> Iterator[tuple[int, Edge | None, Node, bool]]:
        """Depth-first from each root: ``(depth, edge followed, node, first visit)``."""
        children = self._children()
        seen: set[str] = set()
        stack: list[tuple[int, Edge | None, str]] = [(0, None, r) for r in reversed(self.roots)]
        while stack:
            depth, edge, nid = stack.pop()
            node = self.nodes[nid]
            first = nid not in seen
            seen.add(nid)
            yield depth, edge, node, first
            if first:
                for e in reversed(children.get(nid, [])):
                    other = e.dst if self.direction == "upstream" else e.src
                    stack.append((depth + 1, e, other))

    def failures(self) -> list[str]:
        """One line per root cause (`causes`), ``<node label> > <what>: <detail>``, each once;
        a node's last line ends ``; and N records that depend on it`` when some do. What
        fails only because of a root cause has no line of its own (``to_json`` keeps it)."""
        out: list[str] = []
        for node, checks, depend in self.causes():
            out.extend(f"{node.label} > {c.what}: {c.detail}" for c in checks)
            if depend:
                out[-1] += (f"; and {depend} records that depend on it" if depend > 1
                            else "; and 1 record that depends on it")
        return out

    def render(self) -> list[str]:
        """A text tree under the verdict line (`verdict`): ``✓`` passed, ``✗`` failed (its own
        check, or something it depends on: then a ``lineage`` line says what), ``∅`` erased,
        ``·`` information. A node reached again is one line saying "(see above)". Indentation
        stops at depth 12; deeper nodes say ``[depth N]``, so the text stays linear in the
        size of the graph."""
        failing = self.failing()
        users: dict[str, set[str]] = {}
        for e in self.edges:
            users.setdefault(e.src, set()).add(e.dst)
        marks: dict[str, list[tuple[str, Mark]]] = {}
        for m in self.records:
            for nid, role in m.about:
                marks.setdefault(nid, []).append((role, m))
        lines: list[str] = [self.verdict()]
        causes = self.causes()
        if len(causes) > 1 or any(d for _n, _c, d in causes):
            lines += [f"  {_MARK[FAIL]} cause: {line}" for line in self.failures()]
        for depth, edge, node, first in self.walk():
            pad = "    " * min(depth, _MAX_INDENT)
            via = f"{edge.role} → " if edge is not None else ""
            if depth > _MAX_INDENT:
                via = f"[depth {depth}] {via}"
            mark = _MARK[FAIL if node.id in failing else node.status]
            if not first:
                lines.append(f"{pad}{via}{mark} {node.label} (see above)")
                continue
            head = f"{pad}{via}{mark} {node.label}"
            facts = []
            if node.index is not None:
                facts.append(f"log index {node.index}")
            if node.signers:
                facts.append("signed by " + ", ".join(s[:12] for s in node.signers))
            lines.append(head + (f" — {', '.join(facts)}" if facts else ""))
            following: dict[str, list[Check]] = {}
            for c in node.checks:
                if c.status == FAIL and c.cause in self.nodes and c.cause is not None:
                    following.setdefault(c.cause, []).append(c)
                    if len(following[c.cause]) > 1:
                        continue  # drawn once below, with how many there are
                text = c.what + (f" — {c.detail}" if c.detail else "")
                lines.append(f"{pad}    {_MARK[c.status]} {text}")
            for cause, same in following.items():
                if len(same) > 1:
                    lines.append(f"{pad}    {_MARK[FAIL]} and {len(same) - 1} more "
                                 f"{'/'.join(sorted({c.what for c in same}))} check(s) failing "
                                 f"because {self.nodes[cause].label} fails")
            if node.ok and node.id in failing:
                bad = sorted(self.nodes[d].label for d in users.get(node.id, ()) if d in failing)
                lines.append(f"{pad}    {_MARK[FAIL]} lineage — depends on {len(bad)} failing: "
                             + "; ".join(bad))
            for role, m in marks.get(node.id, []):
                by = f", signed by {', '.join(s[:12] for s in m.signers)}" if m.signers else ""
                via = "" if role == m.kind else f" (names it as {role})"
                lines.append(f"{pad}    {_MARK[INFO if m.status == OK else m.status]} "
                             f"{m.label}{via}{by} — {m.detail}")
        return lines

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form: a node table and an edge list (schemas/report.v1.md); and the
        records about its artifacts, when it carries them (`LineageVerifier.with_records`)."""
        n, f = self.count()
        failing = self.failing()
        records = {"records": [m.to_json() for m in self.records]} if self.records else {}
        return records | {
            "format": REPORT_FORMAT,
            "subject": self.subject,
            "direction": self.direction,
            "ok": self.ok,
            "checks": n,
            "failed": f,
            "causes": [{"node": node.id, "dependents": d} for node, _c, d in self.causes()],
            "roots": list(self.roots),
            "nodes": [node.to_json() | {"lineage": FAIL if node.id in failing else OK,
                                        "checks": [c.to_json() if c.cause in self.nodes
                                                   else Check(c.what, c.status, c.detail).to_json()
                                                   for c in node.checks]}
                      for node in self.nodes.values()],
            "edges": [e.to_json() for e in self.edges],
        }


@dataclass(frozen=True)
class Record:
    """A log record whose envelope verified: what the rest of the verification builds on.

    ``signers`` are the keyids of the policy keys that signed it; ``identities`` the policy's
    Sigstore identities that signed it keylessly (each counts toward a threshold like a key).
    """

    index: int
    entry: LogEntry
    statement: Statement
    predicate: Predicate
    signers: frozenset[str]
    identities: frozenset[Identity] = frozenset()


@dataclass(frozen=True)
class RecordFailure:
    """A log record that did not verify.

    ``damaged``: the evidence itself is missing or corrupt (not included, envelope absent or not
    hashing to the entry, unparsable): what the record says is unknown. Otherwise the record is
    intact but does not verify under the policy (an unknown key, too few signatures).
    """

    index: int
    message: str
    damaged: bool
    cause: str | None = None
    """What it fails because of: ``log`` (no verified checkpoint), or ``key:<keyid>:<roles>``
    (its envelope names only that key, which holds none of those roles)."""


def _short(digest: str) -> str:
    return digest[:19] + "…" if len(digest) > 20 else digest


def _repair_hint() -> str:
    return "restore it from a copy with 'trajledger fsck --repair --from BUNDLE|LEDGER'"


_GROUP_BLOBS = 32
_GROUP_BYTES = 16 << 20
"""A re-hashing task's size: at most this many blobs, or about this many bytes."""


class _Blob(NamedTuple):
    """A data blob queued for re-hashing, and the report line its result goes to."""

    node: Node
    path: str
    digest: str
    size: int


class LineageVerifier:
    """Verifies artifacts and their lineage from one evidence source under one policy.

    Build it once per evidence source: the log is checked on construction; then `verify`,
    `impact` and `artifact` may be called for several digests. Every record and artifact is
    verified once (memoised); data blobs are re-hashed on a thread pool while signatures are
    checked, and `finish` (called by `verify` and `impact`) collects the results.
    """

    def __init__(
        self,
        evidence: Evidence,
        policy: TrustPolicy,
        *,
        index: LogIndex | None = None,
        now: dt.datetime | None = None,
        data: str = "hash",
    ) -> None:
        """Check the log.

        Steps:
            1. Verify the checkpoint: signed by the policy's log key(s) (threshold; a key
               counts through the keys it handed over to, `_verify_checkpoint`) and, when the
               policy requires witnesses, cosigned by their threshold.
            2. Without an ``index``: read every available entry into a `MemoryIndex`, check
               the hash chain between neighbours, and when every entry is at hand recompute
               the root once (it proves each entry included, and nothing else).
            3. With an ``index``: it must cover the checkpoint's tree.

        Args:
            evidence: where to read.
            policy: the trust policy to apply.
            index: a complete index of the entries (trajledger passes the one it keeps in
                the user's state directory); default: built from ``evidence``.
            now: the time approvals are judged at when no consuming record fixes one.
            data: ``"hash"`` re-hashes every data blob; ``"size"`` compares sizes with the
                manifest only (and every report line says so).
        """
        if data not in ("hash", "size"):
            raise ValueError(f"data must be 'hash' or 'size', not {data!r}")
        self.evidence = evidence
        self.policy = policy
        self.now = now or dt.datetime.now(dt.UTC)
        self.data = data
        self.used: set[int] = set()
        """Indices of the log entries the verification relied on (an export bundles these)."""
        self.caller_hashes: frozenset[str] = frozenset()
        """Kinds whose data blobs the caller hashes itself as it reads them (the runner, for
        the batches it trains on): the verifier compares their sizes only."""
        self.log = Node("log", "log", name="log")
        self.checkpoint: Checkpoint | None = None
        self._trusted_vkeys: list[str] = []
        """The policy's log keys that verified the checkpoint and the keys they handed over
        to (a checkpoint seen earlier may be signed by any of them)."""
        self._group: list[_Blob] = []
        self._group_bytes = 0
        self._pending: list[tuple[list[_Blob], Future[list[str | None]]]] = []
        self._pool: ThreadPoolExecutor | None = None
        self._stop = threading.Event()
        self._proven_root: bytes | None = None
        self._proven: set[int] = set()  # entries checked under the checkpoint already
        self._records: dict[int, Record | RecordFailure] = {}
        self._entries: dict[int, LogEntry | None] = {}
        self._about: dict[str, list[tuple[int, str]]] = {}
        self._nodes: dict[str, Node] = {}
        self._edges: dict[str, list[Edge]] = {}
        self._deps: dict[str, list[Dependency]] = {}
        self._followed: set[str] = set()
        self._erased_blobs: dict[str, Record | None] = {}
        self._key_notes: dict[str, str] = {}
        self._index: LogIndex = index if index is not None else MemoryIndex(0, evidence)
        self._check_log(index)

    @property
    def index(self) -> LogIndex:
        """The index the verifier looks records up in."""
        return self._index

    # -- the log -------------------------------------------------------------------------------

    def _check_log(self, index: LogIndex | None) -> None:
        log_role = self.policy.role("log")
        note = self.evidence.checkpoint_note()
        # (1)
        if not log_role.vkeys:
            self.log.fail("checkpoint", "the policy names no log key (roles.log.vkeys)")
            return
        verified: list[Checkpoint] = []
        errors: list[str] = []
        handed: list[Handover] = []
        for vkey in log_role.vkeys:
            try:
                cp, chain = self._verify_checkpoint(note, vkey)
            except (ProvenanceError, OSError) as e:
                errors.append(str(e))
                continue
            verified.append(cp)
            handed += chain
            self._trusted_vkeys += [vkey, *(h.new for h in chain)]
        need = max(log_role.threshold, 1)
        if len(verified) < need:
            self.log.fail(
                "checkpoint",
                f"signed by {len(verified)} of {need} trusted log key(s) ({'; '.join(errors)})",
            )
            return
        cp = verified[0]
        self.checkpoint = cp
        self.log.name = f"log {cp.origin}"
        self.log.add("checkpoint", OK, f"size {cp.size}, signed by {len(verified)} of {need} "
                     "trusted log key(s)")
        for h in handed:
            self.log.add("key handover", OK, f"log key {_key_id(h.old)} handed over to "
                         f"{_key_id(h.new)} at size {h.checkpoint.size}, signed by both; "
                         "the log since extends that tree")
        witness = self.policy.role("witness")
        if witness.witnessed(cp.origin):
            try:
                names = verify_cosignatures(
                    note, witness.note_verifiers(), threshold=witness.threshold
                )
                self.log.add("witnesses", OK, f"cosigned by {', '.join(sorted(names))}")
            except ProvenanceError as e:
                self.log.fail("witnesses", str(e))
        if index is not None:
            # (3)
            if index.size != cp.size:
                self.log.fail(
                    "index", f"the log index covers size {index.size}, the checkpoint {cp.size}"
                )
            root = getattr(index, "root", None)
            if root == cp.root:
                self._proven_root = cp.root
            return
        # (2)
        built = MemoryIndex(cp.size, self.evidence)
        self._index = built
        try:
            self._read_entries(cp, built)
        except (OSError, ProvenanceError) as e:
            where = f"{e.filename}: " if isinstance(e, OSError) and e.filename else ""
            self.log.fail("entries", f"cannot be read: {where}{getattr(e, 'strerror', None) or e}")

    def _verify_checkpoint(self, note: bytes, vkey: str) -> tuple[Checkpoint, list[Handover]]:
        """Verify the checkpoint by the trusted log key ``vkey``, or by a key it handed over to.

        Steps:
            1. Verify the note by ``vkey``; done when it is signed by it.
            2. Otherwise follow the evidence's key handovers from ``vkey`` (`key_chain`) and
               verify the note by the first key of the chain that signed it.
            3. The tree of every handover up to that key must be extended by the checkpoint
               (a consistency proof from the evidence).

        Returns:
            The checkpoint and the handovers followed (empty when ``vkey`` signed it).

        Raises:
            ProvenanceError: not signed by ``vkey`` nor a successor, a bad handover, or a tree
                the checkpoint does not extend.
            OSError: a consistency proof is not in the evidence.
        """
        # (1)
        try:
            return verify_checkpoint(note, verifier_from_vkey(vkey)), []
        except SignatureError as e:
            first = e
        # (2)
        chain = key_chain(vkey, self.evidence.key_handovers())
        for n, h in enumerate(chain):
            try:
                cp = verify_checkpoint(note, verifier_from_vkey(h.new))
            except SignatureError:
                continue
            # (3)
            for earlier in chain[: n + 1]:
                old = earlier.checkpoint
                proof = (self.evidence.consistency_proof(old.size, cp.size)
                         if 0 < old.size < cp.size else [])
                try:
                    check_consistent(old, cp, proof)
                except ProvenanceError as e:
                    raise VerificationError(
                        f"the log under key {_key_id(h.new)} does not extend the tree its key "
                        f"handover vouched for: {e}"
                    ) from e
            return cp, chain[: n + 1]
        raise first

    def _read_entries(self, cp: Checkpoint, built: MemoryIndex) -> None:
        """Index the evidence's entries and check them with the one chain-and-root checker
        (`verify.logcheck.check_entries`): the whole tree's root rebuilt when every entry is
        there, else each entry's inclusion proof; the ``prev`` chain between neighbours."""
        entries: dict[int, bytes] = {}
        for index, data in self.evidence.entries():
            if index >= cp.size:
                break
            entries[index] = data
            with contextlib.suppress(FormatError):  # check_entries reports it
                built.add(index, data)
        findings = check_entries(
            entries,
            cp.size,
            cp.root,
            lambda i: self.evidence.inclusion_proof(i, cp.size),
            name=lambda i: f"entry {i}",
            start=self.evidence.extension(),
        )
        for f in findings[:10]:
            self.log.fail("entries", f.message if f.file.startswith("entry ") else str(f))
        if len(findings) > 10:
            self.log.fail("entries", f"{len(findings) - 10} more problem(s)")
        bad = {f.index for f in findings}
        self._proven = {i for i in entries if i not in bad} if None not in bad else set()
        if entries and not findings:
            how = (f"root recomputed from all {cp.size} entries" if len(entries) == cp.size
                   else f"{len(entries)} entries proven included")
            self.log.add("tree", OK, how)

    def check_known_checkpoint(self, note: bytes, what: str = "checkpoint seen before") -> None:
        """Check the log's checkpoint extends one seen earlier (no fork, no rollback).

        Steps:
            1. Verify the earlier checkpoint by the policy's log key.
            2. `check_consistent` it with the current one, using a proof from the evidence; or,
               when the evidence holds the log's extension from a size at or below the earlier
               one, the root its entries give at that size must be the earlier root.

        A failure is added to the log node, naming both sizes and roots.
        """
        if self.checkpoint is None:
            return
        try:
            # (1)
            old = None
            problems: list[str] = []
            for vkey in self._trusted_vkeys:
                try:
                    old = verify_checkpoint(note, verifier_from_vkey(vkey))
                    break
                except ProvenanceError as e:
                    problems.append(str(e))
            if old is None:
                raise VerificationError(
                    f"{what}: not signed by a trusted log key ({'; '.join(problems)})"
                )
            # (2)
            new = self.checkpoint
            proof: list[bytes] = []
            ext = self.evidence.extension()
            if ext is not None and ext.size <= old.size <= new.size and self.log.ok:
                leaves = [leaf_hash(self._index.entry_bytes(i) or b"")
                          for i in range(ext.size, old.size)]
                got = ext.extend(leaves).root()
                if got != old.root:
                    raise VerificationError(
                        f"fork: the log's entries give root {got.hex()[:16]}… at size "
                        f"{old.size}, the {what} says {old.root.hex()[:16]}…")
            elif 0 < old.size < new.size:
                proof = self.evidence.consistency_proof(old.size, new.size)
                check_consistent(old, new, proof)
            else:
                check_consistent(old, new, proof)
            self.log.add(f"consistent with the {what}", OK, f"size {old.size} -> {new.size}")
        except (ProvenanceError, OSError) as e:
            self.log.fail(f"consistent with the {what}", f"log fork or rollback: {e}")

    def included(self, index: int) -> str | None:
        """None when entry ``index`` is included under the verified checkpoint; else why not."""
        raw = self._index.entry_bytes(index)
        if self.checkpoint is None or raw is None:
            return f"log entry {index}: not available under a verified checkpoint"
        return self._included(index, raw)

    def _included(self, index: int, raw: bytes) -> str | None:
        """None when entry ``index`` is included under the verified checkpoint; else why not."""
        assert self.checkpoint is not None
        self.used.add(index)
        if self._proven_root is not None or index in self._proven:
            return None
        try:
            proof = self.evidence.inclusion_proof(index, self.checkpoint.size)
            verify_inclusion(index, self.checkpoint.size, leaf_hash(raw), proof,
                             self.checkpoint.root)
        except (ProvenanceError, OSError) as e:
            return f"log entry {index}: not included under the checkpoint: {e}"
        return None

    # -- records ---------------------------------------------------------------------------------

    def _entry(self, index: int) -> LogEntry | None:
        """The index's entry at ``index``, parsed once per verifier (it asks many times)."""
        if index not in self._entries:
            self._entries[index] = self._index.entry(index)
        return self._entries[index]

    def records(self, subject: str, kind: str) -> list[int]:
        """Indices of entries of ``kind`` about ``subject`` (looked up once per subject)."""
        found = self._about.get(subject)
        if found is None:
            found = [
                (i, e.kind) for i in self._index.about(subject)
                if (e := self._entry(i)) is not None
            ]
            self._about[subject] = found
        return [i for i, k in found if k == kind]

    def record(self, index: int) -> Record | RecordFailure:
        """Verify the record at ``index`` (memoised).

        Steps:
            1. The entry is included under the checkpoint.
            2. The envelope is present, hashes to the digest in the entry, and parses.
            3. Its signatures meet what the kind requires of the policy's roles
               (`verify.kinds.Signing`); the predicate type is the kind's and the policy
               allows it; a subject of the statement is the entry's subject.
            4. The entry names the signers that verified; the predicate reads as the kind's
               typed predicate.
        """
        cached = self._records.get(index)
        if cached is not None:
            return cached
        result = self._record(index)
        self._records[index] = result
        return result

    def _record(self, index: int) -> Record | RecordFailure:
        if self.checkpoint is None:
            return RecordFailure(index, "no verified log checkpoint", True, "log")
        entry = self._entry(index)
        raw = self._index.entry_bytes(index)
        if entry is None or raw is None:
            return RecordFailure(index, f"log entry {index} is not available", True)
        # (1)
        why = self._included(index, raw)
        if why is not None:
            return RecordFailure(index, why, True)
        # (2)
        data = self.evidence.blob(entry.envelope)
        if data is None:
            return RecordFailure(
                index,
                f"log entry {index} ({entry.kind}): envelope {_short(entry.envelope)} is missing",
                True,
            )
        got = digest_bytes(data)
        if got != entry.envelope:
            return RecordFailure(
                index,
                f"log entry {index} ({entry.kind}): envelope hashes to {_short(got)}, want "
                f"{_short(entry.envelope)}",
                True,
            )
        try:
            envelope = Envelope.from_bytes(data, f"envelope of entry {index}")
        except FormatError as e:
            return RecordFailure(index, str(e), True)
        kind = KINDS[entry.kind]
        try:
            # (3)
            ptypes = kind.predicate_types
            allowed = self.policy.allowed_predicate_types
            if not any(t in allowed for t in ptypes):
                raise VerificationError(
                    f"log entry {index}: predicate type {' or '.join(kind.predicate_types)} is "
                    "not allowed by the policy"
                )
            keys, idents, threshold, revoked = self._signing_keys(kind, index, entry.time)
            if not keys and not idents and not revoked:
                raise VerificationError(
                    f"log entry {index} ({entry.kind}): the policy has no "
                    f"{' or '.join(kind.roles)} keys or identities"
                )
            what = f"{entry.kind} record {index}"
            # Keyless signatures by the policy's Sigstore identities count like keys.
            found: frozenset[Identity] = frozenset()
            notes: tuple[str, ...] = ()
            if idents:
                # Loaded only here: with cryptography.x509, a sixth of `verify`'s imports.
                from .sigstore_adapter import identity_signers

                found, notes = identity_signers(
                    envelope, self.evidence.blob, idents,
                    trusted_root=self.policy.sigstore_trusted_root_bytes, what=what,
                )
            need = max(threshold - len(found), 0)
            try:
                if need and not keys and not idents:  # every key of the role is revoked
                    raise SignatureError(
                        f"{what}: no signature by a trusted key: 0 of {threshold} required "
                        "signature(s) verified"
                    )
                if need and not keys:
                    raise SignatureError(
                        f"{what}: signed by {len(found)} of {threshold} required identities"
                        + (f" ({'; '.join(notes)})" if notes else "")
                    )
                if need:
                    verified = verify_statement(
                        envelope, keys, allowed_predicate_types=ptypes, threshold=need,
                        subject_digest=entry.subject, what=what,
                    )
                    statement, key_signers = verified.statement, verified.signers
                else:
                    statement, key_signers = unsigned_statement(
                        envelope, allowed_predicate_types=ptypes, subject_digest=entry.subject,
                        what=what,
                    ), ()
            except SignatureError as e:
                hint = f"; {'; '.join(notes)}" if notes else ""
                signed_by = self._signed_by(envelope, kind.roles, index, entry.time)
                named = {sig.keyid for sig in envelope.signatures if sig.keyid}
                if len(named) == 1 and not named & {k.keyid for k in keys} and not found:
                    # One key, which the policy does not hold for this: every record it
                    # signed fails the same way; the report names it once, as their cause.
                    cause = f"key:{named.pop()}:{' or '.join(kind.roles)}"
                    self._key_notes.setdefault(cause, signed_by)
                    return RecordFailure(index, f"{e}; {signed_by}{hint}", False, cause)
                raise SignatureError(f"{e}; {signed_by}{hint}") from e
            if statement.predicate_type not in allowed:  # a version the policy does not allow
                raise PolicyError(
                    f"{what}: predicate type {statement.predicate_type} is not allowed by the "
                    "policy; add it to allowed_predicate_types to accept such records"
                )
            # (4)
            signers = frozenset(k.keyid for k in key_signers)
            if not signers <= set(entry.signers):
                raise VerificationError(
                    f"log entry {index}: records signers {sorted(entry.signers)}, "
                    f"but {sorted(signers)} signed"
                )
            predicate = kind.read(statement, f"{entry.kind} record {index}")
        except FormatError as e:
            return RecordFailure(index, str(e), True)
        except ProvenanceError as e:
            return RecordFailure(index, str(e), False)
        record = Record(index, entry, statement, predicate, signers, found)
        if kind.name in ("revocation", "erasure"):
            problem = self._authority(record)
            if problem is not None:
                return RecordFailure(index, problem, False)
        return record

    def _authority(self, rec: Record) -> str | None:
        """Why a revocation or erasure has no authority over its subject, or None when it has:
        an approver (of the policy it was logged under) may stop the use of anything; a
        producer only of what it produced (it signed the subject's identity record)."""
        policy = self.policy.policy_at(rec.index)
        approver = policy.role("approver")
        if rec.signers & approver.keyids or rec.identities & set(approver.identities):
            return None
        subject = rec.entry.subject
        kind = self.primary_kind(subject)
        made = self.identity_record(subject, kind) if kind is not None else None
        if isinstance(made, Record) and (rec.signers & made.signers
                                         or rec.identities & made.identities):
            return None
        who = ", ".join(k[:12] for k in sorted(rec.signers)) or "an identity"
        what = f"{kind} {_short(subject)}" if kind else _short(subject)
        return (f"{rec.entry.kind} record {rec.index}: signed by producer key {who}, which did "
                f"not produce {what}: a producer may revoke or erase only what it produced, "
                "an approver anything")

    def _signing_keys(
        self, kind: Kind, index: int, time: str
    ) -> tuple[list[Any], list[Identity], int, int]:
        """The keys and identities that may sign a record of ``kind`` logged at ``index`` at
        ``time``, how many must, and how many of the role's keys and identities are left out as
        revoked: the roles of the policy in force when it was logged
        (`TrustPolicy.policy_at`), less the keys and identities the policy in force now revokes
        from a point at or before it (`TrustPolicy.revocation`,
        `TrustPolicy.identity_revocation`)."""
        policy = self.policy.policy_at(index)
        names = (policy.signing_role(),) if kind.name == "trust-policy" else kind.roles
        roles = [policy.role(r) for r in names]
        held = [k for r in roles for k in r.keys]
        keys = [k for k in held if self.policy.revocation(k.keyid, index, time) is None]
        held_ids = [i for r in roles for i in r.identities]
        identities = [
            i for i in held_ids if self.policy.identity_revocation(i, index, time) is None
        ]
        threshold = max(roles[0].threshold, 1) if kind.signing is Signing.THRESHOLD else 1
        revoked = len(held) - len(keys) + len(held_ids) - len(identities)
        return keys, identities, threshold, revoked

    def _signed_by(self, envelope: Envelope, roles: tuple[str, ...], index: int, time: str
                   ) -> str:
        """Which policy roles the keys an envelope names hold (the keyids are only hints)."""
        policy = self.policy.policy_at(index)
        named = []
        for sig in envelope.signatures:
            revoked = self.policy.revocation(sig.keyid, index, time) if sig.keyid else None
            held = [r for r in KEY_ROLES if sig.keyid and policy.holds(r, sig.keyid)]
            if revoked is not None:
                who = f"revoked by policy {self.policy.name!r} serial {self.policy.serial}: " \
                    + revoked.describe()
            else:
                who = f"{', '.join(held)} role" if held else "not in the policy"
            named.append(f"key {sig.keyid[:12] or '(no keyid)'} ({who})")
        out = f"the envelope names {'; '.join(named)}, want {' or '.join(roles)} key(s)"
        for ident in (i for r in roles for i in policy.role(r).identities):
            gone = self.policy.identity_revocation(ident, index, time)
            if gone is not None:  # its keyless signatures were not even checked
                out += (f"; identity {ident.subject} ({ident.issuer}) revoked by policy "
                        f"{self.policy.name!r} serial {self.policy.serial}: {gone.describe()}")
        return out

    def _cause_node(self, failure: RecordFailure) -> str | None:
        """The node a record failure follows from (`RecordFailure.cause`): the log, or a key
        that signed records the policy does not trust (made once, as a node of its own, so
        every record it signed counts under it)."""
        cause = failure.cause
        if cause is None or not cause.startswith("key:"):
            return cause
        if cause not in self._nodes:
            _key, keyid, roles = cause.split(":", 2)
            node = Node(cause, "key", name=f"key {keyid[:12]}")
            node.fail("trust", f"{self._key_notes.get(cause, '')}: records whose envelope names "
                      f"only this key do not count under policy {self.policy.name!r} serial "
                      f"{self.policy.serial}; if you trust its owner as {roles}, add the key "
                      f"{keyid} to the policy")
            self._nodes[cause] = node
            self._edges[cause] = []
        return cause

    def identity_record(self, digest: str, kind: str) -> Record | RecordFailure | None:
        """The identity record of an artifact: its first record of ``kind`` (None: none)."""
        found = self.records(digest, kind)
        return self.record(found[0]) if found else None

    # -- status: revocation, erasure ------------------------------------------------------------

    def _status(self, node: Node, digest: str, kind: str) -> list[Record]:
        """Verified ``kind`` records about ``digest``. A damaged one fails ``node`` (fail
        closed); one that is intact but not signed under the policy is noted and ignored."""
        out: list[Record] = []
        for i in self.records(digest, kind):
            r = self.record(i)
            if isinstance(r, Record):
                out.append(r)
            elif r.damaged:
                node.fail(
                    f"{kind} record {i}",
                    f"cannot be read, so what it says is unknown: {r.message}; {_repair_hint()}",
                )
            else:
                node.add(f"{kind} record {i}", INFO, f"ignored: {r.message}")
        return out

    def erased_blob(self, blob: str) -> Record | None:
        """The verified erasure that lists ``blob`` among its deleted blobs, if any."""
        if blob not in self._erased_blobs:
            found = None
            for i in self._index.listing(blob):
                e = self._entry(i)
                if e is None or e.kind != "erasure":
                    continue
                r = self.record(i)
                if isinstance(r, Record):
                    found = r
                    break
            self._erased_blobs[blob] = found
        return self._erased_blobs[blob]

    # -- artifacts ---------------------------------------------------------------------------------

    def artifact(self, digest: str, kind: str, *, follow: bool = True) -> Node:
        """Verify one artifact of a known kind, with its dependencies (memoised by digest).

        Steps:
            1. Its identity record (the first of ``kind``) verifies (`record`).
            2. No verified revocation names it (a damaged one fails it); a verified erasure
               marks it erased.
            3. For kinds with files: the manifest hashes to the digest and each blob is
               re-hashed (or its size compared), or listed by a verified erasure.
            4. With ``follow``: its dependencies (`verify.kinds.Kind.dependencies`) are
               verified in turn and linked by edges; a checkpoint's use of each dataset is
               checked (`dataset_use`).
        """
        node = self._nodes.get(digest)
        if node is None:
            node = self._verify_node(digest, kind)
        elif node.kind != kind:
            node.fail("kind", f"used as {kind} but recorded as {node.kind}")
            return node
        if follow and digest not in self._followed:
            self._followed.add(digest)
            self._follow(node)
        return node

    def _verify_node(self, digest: str, kind: str) -> Node:
        node = Node(digest, kind)
        self._nodes[digest] = node
        self._edges[digest] = []
        self._deps[digest] = []
        # (1)
        rec = self.identity_record(digest, kind)
        if rec is None:
            node.fail("record", f"not recorded in the log as {kind}")
            return node
        if isinstance(rec, RecordFailure):
            node.index = rec.index
            node.fail("record", rec.message + (f"; {_repair_hint()}" if rec.damaged else ""),
                      self._cause_node(rec))
            return node
        node.name, node.version = name_version(kind, rec.statement)
        node.index = rec.index
        node.signers = tuple(sorted(rec.signers))
        node.add("record", OK, "signature, role and inclusion verified")
        # (2)
        for r in self._status(node, digest, "revocation"):
            pred = r.predicate
            reason = pred.reason if isinstance(pred, Revocation) else ""
            node.fail("revoked", f"{reason} (log index {r.index})")
        if isinstance(rec.predicate, RolloutBatch):
            # The terms the data travels with: the policy may accept only some licences.
            problem = self.policy.licence_problem(rec.predicate.licence)
            if problem is not None:
                node.fail("licence", problem)
            elif self.policy.accepted_licences is not None:
                node.add("licence", OK, f"{rec.predicate.licence} (accepted by the policy)")
        erasures = self._status(node, digest, "erasure")
        erased = erasures[0] if erasures else None
        # (3)
        k = KINDS[kind]
        if k.files:
            sealed = getattr(rec.predicate, "sealed", None)
            self._check_files(digest, node, erased, rec.statement, k.documents(rec.predicate),
                              sealed)
        elif erased is not None:
            node.add("erased", ERASED, _erasure_note(erased))
        self._deps[digest] = [
            d for d in k.dependencies(rec.predicate)
            if not (d.optional and not self.records(d.digest, d.kind))
        ]
        if isinstance(rec.predicate, Provenance):
            # Facts the provenance records that are not artifacts of the log (trainer code,
            # dependency lock): shown, not verified.
            for d in rec.predicate.resolved_dependencies:
                if d.role not in CHECKPOINT_ROLES:
                    node.add(d.role or "dependency", INFO,
                             f"{d.name or ''} {_short(d.sha256 or d.uri or '')}".strip())
        if kind == "checkpoint" and not any(d.role == "dataset" for d in self._deps[digest]):
            node.fail("datasets", "provenance names no dataset (resolvedDependencies with role "
                      "'dataset')")
        return node

    def _follow(self, node: Node) -> None:
        # (4)
        rec = self.identity_record(node.id, node.kind)
        for dep in self._deps.get(node.id, []):
            self.artifact(dep.digest, dep.kind)
            self._edges[node.id].append(Edge(node.id, dep.digest, dep.role))
            if node.kind == "checkpoint" and dep.role == "dataset" and isinstance(rec, Record):
                self.dataset_use(node, dep.digest, rec)
        if node.kind in _RULES and isinstance(rec, Record):
            _RULES[node.kind](self, node, rec)

    def _check_files(
        self,
        digest: str,
        node: Node,
        erased: Record | None,
        statement: Statement,
        documents: dict[str, str],
        sealed: Sealed | None = None,
    ) -> None:
        raw = self.evidence.blob(digest)
        if raw is None:
            if erased is not None:
                node.add("erased", ERASED, _erasure_note(erased, "manifest deleted"))
            else:
                node.fail("files", f"manifest {_short(digest)} is missing")
            return
        try:
            got = digest_bytes(raw)
            if got != digest:
                raise VerificationError(f"manifest hashes to {_short(got)}, want {_short(digest)}")
            manifest = Manifest.from_json(load_object(raw, "manifest"))
            # A checkpoint's statement also lists its model files: they must be the manifest's.
            file_subjects = check_file_subjects(statement, manifest, "the signed statement")
        except ProvenanceError as e:
            node.fail("files", str(e))
            return
        for path, want in documents.items():
            self._check_document(node, manifest, path, want)
        gone = 0
        by_other: dict[int, Record] = {}
        present = 0
        absent = 0
        stored = _stored_files(manifest, sealed, node)
        for f in manifest.files:
            if documents.get(f.path) == f.digest:
                continue  # read whole and checked above
            if f.path not in stored:
                continue  # a sealed file without its ciphertext: failed above
            f_digest, f_size = stored[f.path]
            if self.evidence.omitted(f_digest):
                absent += 1
                continue
            if self.evidence.has_blob(f_digest):
                present += 1
                if node.kind in self.caller_hashes and sealed is None:
                    continue  # the caller hashes the bytes as it reads them, and reports
                if self.data == "hash":
                    self._hash_later(node, f.path, f_digest, f_size)
                else:
                    size = self.evidence.blob_size(f_digest)
                    if size is not None and size != f_size:
                        node.fail(f.path, f"tampered: {size} bytes, want {f_size} (blob "
                                  f"{_short(f_digest)})")
                continue
            # A missing blob is erased only when a verified erasure lists it; otherwise lost.
            by = self.erased_blob(f_digest)
            if by is None:
                node.fail(f.path, f"blob {_short(f_digest)} is missing")
                continue
            gone += 1
            if erased is None or by.index != erased.index:
                by_other[by.index] = by
        if erased is not None:
            node.add("erased", ERASED,
                     _erasure_note(erased, f"{gone} of {len(manifest.files)} blob(s) deleted"))
        for other in by_other.values():
            node.add(
                "erased",
                ERASED,
                f"blob(s) deleted by the erasure of {_short(other.entry.subject)} "
                f"(log index {other.index}); digests still verify",
            )
        how = (
            "hashed by the runner as read" if node.kind in self.caller_hashes and not sealed
            else "re-hashed" if self.data == "hash" else "size only, not re-hashed"
        )
        if sealed is not None:
            how = f"sealed (ciphertexts {how}) to {len(sealed.recipients)} recipient(s)"
        node.add("files", OK,
                 f"{len(manifest.files)} file(s), {manifest.total_size} bytes"
                 + (f", {present} {how}" if present else "")
                 + (f"; the {file_subjects} file subject(s) of its statement match"
                    if file_subjects else ""))
        if absent:
            node.add("data", INFO, f"{absent} data blob(s) not present here (exported without "
                     "data): their digests are bound by the manifest, their bytes not checked")

    def _check_document(self, node: Node, manifest: Manifest, path: str, digest: str) -> None:
        """Check a file the signed predicate names as a document (a dataset's card).

        Steps:
            1. The manifest lists ``path`` with the digest the predicate names.
            2. It is at most `CARD_MAX_BYTES`; its blob is present (or deleted by a verified
               erasure) with the listed size.
            3. Its bytes, read whole (so an export carries them even without data), hash to
               the digest.
        """
        # (1)
        listed = next((f for f in manifest.files if f.path == path), None)
        if listed is None or listed.digest != digest:
            node.fail(path, f"the signed record names {path} {_short(digest)}, the manifest "
                      + (f"lists {_short(listed.digest)}" if listed else "does not list it"))
            return
        # (2)
        if listed.size > CARD_MAX_BYTES:
            node.fail(path, f"{listed.size} bytes, want at most {CARD_MAX_BYTES}")
            return
        size = self.evidence.blob_size(digest)
        data = self.evidence.blob(digest) if size == listed.size else None
        if size is None or (data is None and size == listed.size):
            by = self.erased_blob(digest)
            if by is not None:
                node.add(path, ERASED, _erasure_note(by, f"{path} deleted"))
            else:
                node.fail(path, f"blob {_short(digest)} is missing (exports carry it, with "
                          "data or without)")
            return
        if data is None:
            node.fail(path, f"tampered: {size} bytes, want {listed.size} (blob {_short(digest)})")
            return
        # (3)
        got = digest_bytes(data)
        if got != digest:
            node.fail(path, f"tampered: content hashes to {_short(got)}, want {_short(digest)}")
            return
        node.add(path, OK, f"{listed.size} bytes, the digest its signed record names")

    def _hash_blob(self, digest: str, size: int, stop: threading.Event) -> str | None:
        path = self.evidence.blob_path(digest)
        if path is None:
            return f"blob {_short(digest)} is missing"
        got = hash_file(path, stop)
        if got.size != size:
            return f"tampered: {got.size} bytes, want {size} (blob {_short(digest)})"
        if got.digest != digest:
            return f"tampered: content hashes to sha256:{got.sha256[:12]}…, want {_short(digest)}"
        return None

    def _hash_later(self, node: Node, path: str, digest: str, size: int) -> None:
        """Start re-hashing a blob on the thread pool (one thread per core, at least 2) while
        this thread goes on verifying records; `finish` files the result.

        Blobs go to the workers in groups (up to `_GROUP_BLOBS` blobs or `_GROUP_BYTES`
        bytes): a worker switching between this thread's Python code and hashlib's released
        GIL pays for each switch, and one task per small blob was measured to cost about 10%
        more CPU (bench/verify_bench.py, docs/PERFORMANCE.md)."""
        self._group.append(_Blob(node, path, digest, size))
        self._group_bytes += size
        if len(self._group) >= _GROUP_BLOBS or self._group_bytes >= _GROUP_BYTES:
            self._submit_group()

    def _submit_group(self) -> None:
        group, self._group, self._group_bytes = self._group, [], 0
        if not group:
            return
        if self._pool is None:
            self._stop = threading.Event()
            self._pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1))
        stop = self._stop
        future = self._pool.submit(
            lambda: [self._hash_blob(b.digest, b.size, stop) for b in group]
        )
        self._pending.append((group, future))

    def finish(self) -> None:
        """Wait for the blobs being re-hashed and file their failures in the report.

        Interrupted (Ctrl-C), the workers stop within one chunk instead of hashing on."""
        try:
            self._submit_group()
            pending, self._pending = self._pending, []
            for group, future in pending:
                problems: list[str | None] = result_of(future)
                for blob, problem in zip(group, problems, strict=True):
                    if problem:
                        blob.node.fail(blob.path, problem)
        finally:
            self.close()

    def close(self) -> None:
        """Stop any re-hashing still under way (a walk that raised): the workers stop within
        one chunk and queued blobs are dropped, each failing its node (never left looking
        verified). `finish` calls it; so must anyone who walks with this verifier and does not
        reach `finish`."""
        pool, self._pool = self._pool, None
        dropped = [b for group, _ in self._pending for b in group] + self._group
        self._pending, self._group, self._group_bytes = [], [], 0
        for blob in dropped:
            blob.node.fail(blob.path, "not re-hashed: the verification was interrupted")
        if pool is not None:
            self._stop.set()
            pool.shutdown(wait=True, cancel_futures=True)

    # -- the rules of training on a dataset -----------------------------------------------------

    def dataset_use(
        self,
        node: Node,
        digest: str,
        use: Record | None,
        *,
        purpose: str | None = None,
    ) -> None:
        """Check the rules for training on a dataset, adding one check per rule to ``node``.

        Steps:
            1. The dataset's record verifies.
            2. Its split is ``train``.
            3. No member batch is in a holdout or regression dataset recorded before the use;
               a dataset record that cannot be read (so could hold one out) fails the use.
            4. The approver threshold approved it for the purpose, before the use, unexpired
               at the time of the use (`approvals`).

        Args:
            node: where the checks go (the checkpoint, or an admission decision).
            digest: the dataset.
            use: the record of the use (a checkpoint); None for a use now, at the end of the
                verified log.
            purpose: the purpose approvals must name (default: the use's own, else the
                dataset's).
        """
        assert self.checkpoint is not None
        before = use.index if use is not None else self.checkpoint.size
        at_time = parse_time(use.entry.time) if use is not None else self.now
        if use is not None and purpose is None:
            purpose = getattr(use.predicate, "purpose", None)
        # (1)
        rec = self.identity_record(digest, "dataset")
        if not isinstance(rec, Record) or not isinstance(rec.predicate, Dataset):
            node.fail(f"training on dataset {_short(digest)}", "the dataset record does not "
                      "verify", digest if digest in self._nodes else None)
            return
        ds = rec.predicate
        label = f"dataset {ds.name}@{ds.version}"
        # (2)
        if ds.split != "train":
            node.fail(f"{label}: split", f"the dataset is {ds.split!r}, want 'train': holdout "
                      "and regression data are never trained on")
        else:
            node.add(f"{label}: split", OK, "train")
        # (3)
        held = 0
        for b in ds.batches:
            for i in self._index.listing(b):
                e = self._entry(i)
                if e is None or e.kind != "dataset" or i >= before or e.subject == digest:
                    continue
                other = self.record(i)
                if isinstance(other, RecordFailure):
                    if other.damaged:
                        held += 1
                        node.fail(f"{label}: not held out",
                                  f"dataset record {i} lists batch {_short(b)} but cannot be "
                                  f"read: {other.message}; {_repair_hint()}")
                    continue
                o = other.predicate
                if isinstance(o, Dataset) and o.split in ("holdout", "regression"):
                    held += 1
                    node.fail(f"{label}: not held out",
                              f"rollout-batch {_short(b)} is in {o.split} dataset "
                              f"{o.name}@{o.version} (log index {i})")
        for i in self._index.unreadable():
            e = self._entry(i)
            if e is not None and e.kind == "dataset" and i < before and e.subject != digest:
                held += 1
                node.fail(f"{label}: not held out",
                          f"dataset record {i} cannot be read, so it may hold these batches out; "
                          f"{_repair_hint()}")
        if not held:
            node.add(f"{label}: not held out", OK, "no batch is in a holdout or regression split")
        # (4)
        self.approvals(node, label, digest, purpose or ds.purpose, before, at_time)

    def approvals(
        self, node: Node, label: str, digest: str, purpose: str, before: int, at_time: dt.datetime
    ) -> set[str]:
        """Count valid approvals of ``digest`` for ``purpose``, recorded before ``before``.

        Steps:
            1. Each approval record of ``digest`` verifies (signed by an approver key).
            2. It names ``purpose`` and was logged before ``before``. Its age and expiry are
               judged by the time the log integrated it (its entry's time), never the
               ``approvedAt`` its signer wrote: one dated more than `CLOCK_SKEW` after its log
               time does not count; it expires at its signed ``expires`` or at its log time
               plus the lifetime it was given (``expires - approvedAt``), whichever is first,
               and must not be older than the policy's maximum approval age at ``at_time``.
            3. Distinct approver keys of the counted records reach the approver threshold.

        Adds an ``approvals`` check to ``node`` (failed with every reason a record did not
        count) and returns the keyids that counted.
        """
        role = self.policy.role("approver")
        approvers: set[str] = set()
        notes: list[str] = []
        for i in self.records(digest, "approval"):
            # (1)
            r = self.record(i)
            if isinstance(r, RecordFailure):
                notes.append(f"approval {i} does not count: {r.message}")
                continue
            # (2)
            p = r.predicate
            assert isinstance(p, Approval)
            logged = parse_time(r.entry.time)
            signed = parse_time(p.approved_at)
            # The approval lasts what its signer gave it, from when the log took it in.
            expires = min(parse_time(p.expires), logged + (parse_time(p.expires) - signed))
            if p.purpose != purpose:
                notes.append(f"approval {i} is for {p.purpose!r}, not {purpose!r}")
            elif i > before:
                notes.append(f"approval {i} was logged after the use (log index {before})")
            elif (signed - logged).total_seconds() > CLOCK_SKEW:
                notes.append(
                    f"approval {i} is dated {p.approved_at}, after the log took it in at "
                    f"{r.entry.time} (more than {CLOCK_SKEW // 60} minutes): a signer's clock "
                    "does not decide how old an approval is"
                )
            elif expires <= at_time:
                notes.append(f"approval {i} expired at {format_time(expires)} (logged "
                             f"{r.entry.time}; judged at {format_time(at_time)})")
            elif (at_time - logged).total_seconds() > self.policy.max_approval_age:
                notes.append(
                    f"approval {i} logged {r.entry.time} is older than the policy's maximum "
                    f"approval age ({self.policy.max_approval_age}s)"
                )
            else:
                # The record verified against the approver keys in force when it was logged.
                approvers |= r.signers
                approvers |= {f"identity {i.issuer} {i.subject}" for i in r.identities}
        # (3)
        need = max(role.threshold, 1)
        detail = f"{len(approvers)} of {need} required approver(s) for {purpose!r}"
        if len(approvers) < need:
            node.fail(f"{label}: approvals", detail + ("; " + "; ".join(notes) if notes else ""))
        else:
            node.add(f"{label}: approvals", OK, detail)
        return approvers

    # -- evaluations and releases ------------------------------------------------------------------

    def _evaluation_use(self, node: Node, rec: Record) -> None:
        """An evaluation ran on a held-out suite (`_evaluation_problems`)."""
        ev = rec.predicate
        assert isinstance(ev, Evaluation)
        problems = self._evaluation_problems(ev)
        for p in problems:
            node.fail("suite", p)
        if not problems:
            tests = len(ev.passed_tests) + len(ev.failed_tests)
            node.add("suite", OK, f"{ev.suite.name}@{ev.suite.version}: "
                     f"{len(ev.passed_tests)} of {tests} episode(s) passed")

    def _evaluation_problems(self, ev: Evaluation) -> list[str]:
        """Why an evaluation is not one of a held-out suite: the suite's verified record is a
        holdout or regression dataset, and each test names one of its batches."""
        self.artifact(ev.suite.digest, "dataset")
        suite = self.identity_record(ev.suite.digest, "dataset")
        if not isinstance(suite, Record) or not isinstance(suite.predicate, Dataset):
            return ["the suite's dataset record does not verify"]
        ds, out = suite.predicate, []
        if ds.split not in HELD_OUT:
            out.append(f"dataset {ds.name}@{ds.version} is a {ds.split!r} split; evaluations "
                       "run on holdout or regression suites")
        outside = {split_test_name(t)[0] for t in ev.passed_tests + ev.failed_tests}
        if outside - set(ds.batches):
            out.append(f"tests name {len(outside - set(ds.batches))} batch(es) not in the suite "
                       f"(first {_short(min(outside - set(ds.batches)))})")
        return out

    def _release_use(self, node: Node, rec: Record) -> None:
        """A release is named by its content, and meets the policy's ``[release]`` on the
        evaluations it cites (`release_rules`)."""
        rel = rec.predicate
        assert isinstance(rel, Release)
        try:
            named = digest_bytes(canonical_bytes(rec.statement.predicate, "release"))
        except FormatError as e:
            named = str(e)
        if named != rec.entry.subject:
            node.fail("release", f"its subject is not the SHA-256 of its predicate ({named})")
        self.release_rules(node, rel.checkpoint.digest, rel.evaluations,
                           len(rec.signers) + len(rec.identities), before=rec.index)

    def release_rules(
        self, node: Node, checkpoint: str, cited: Sequence[str] | None, approvers: int,
        *, before: int | None = None,
    ) -> set[str]:
        """Check the policy's ``[release]`` for releasing ``checkpoint`` (verified already with
        `artifact`), adding one check per requirement to ``node``.

        Steps:
            1. The policy has ``[release]``; ``approvers`` reach its ``approvals``.
            2. For each requirement, the evaluation that counts is the latest verified one
               (signed by the evaluator role) of the checkpoint on the suite ``NAME@VERSION``
               (a holdout or regression dataset) logged before ``before``, among those the
               index knows and those ``cited``; it must exist and, when ``cited`` is given,
               be cited (no choosing an older, better run).
            3. Its metric is within ``min`` / ``max``; with ``max_drop`` and a parent
               checkpoint, the parent's evaluation on the same suite (found as in 2) exists,
               is cited, and the metric dropped no more than ``max_drop`` from it.

        Args:
            cited: the evaluations a release cites; None to choose them (``trajledger
                release`` before recording).
            approvers: how many approver keys sign the release.
            before: the log index of the release (default: the end of the log).

        Returns:
            The digests of the evaluations the rules used (what a release must cite).
        """
        rules = self.policy.release
        assert self.checkpoint is not None
        until = self.checkpoint.size if before is None else before
        used: set[str] = set()
        # (1)
        if rules is None:
            node.fail("release", f"policy {self.policy.name!r} serial {self.policy.serial} has "
                      "no [release]: nothing is released under it")
            return used
        if approvers < rules.approvals:
            node.fail("release", f"signed by {approvers} approver(s), [release] needs "
                      f"{rules.approvals}")
        parents = [d.digest for d in self._deps.get(checkpoint, []) if d.role == "base-checkpoint"]
        for req in rules.require:
            # (2)
            label = f"{req.metric} on {req.suite}"
            ev = self._latest_evaluation(checkpoint, req.suite, cited or (), until)
            if ev is None:
                node.fail(label, f"missing: no verified evaluation of {_short(checkpoint)} on "
                          f"{req.suite}; run 'trajledger eval {checkpoint} --suite {req.suite}'")
                continue
            # (3)
            runs = [ev]
            parent = None
            if req.max_drop is not None and parents:
                parent = self._latest_evaluation(parents[0], req.suite, cited or (), until)
                runs += [parent] if parent is not None else []
            assert isinstance(ev.predicate, Evaluation)
            problems = req.judge(
                ev.predicate.metric(req.metric),
                parent.predicate.metric(req.metric) if parent is not None
                and isinstance(parent.predicate, Evaluation) else None,
            )
            if req.max_drop is not None and parents and parent is None:
                problems.append(f"the parent {_short(parents[0])} has no verified evaluation "
                                f"on {req.suite}")
            problems += [f"evaluation {_short(r.entry.subject)} (log index {r.index}) is the "
                         "latest but not cited" for r in runs
                         if cited is not None and r.entry.subject not in cited]
            used |= {r.entry.subject for r in runs}
            what = "; ".join(f"{'parent ' if r is parent else ''}evaluation "
                             f"{_short(r.entry.subject)} (log index {r.index})" for r in runs)
            if problems:
                node.fail(label, "; ".join(problems) + f" ({what})")
            else:
                node.add(label, OK, f"{ev.predicate.metric(req.metric):.4g} ({what})")
        return used

    def _latest_evaluation(
        self, checkpoint: str, suite: str, cited: Iterable[str], before: int
    ) -> Record | None:
        """The latest verified evaluation record of ``checkpoint`` on the suite
        ``NAME@VERSION`` logged before ``before``, among the index's referrers and the records
        of ``cited`` evaluations. Each record counts on its own (a run whose results equal an
        earlier run's is a later record of the same artifact)."""
        found = None
        seen = {i for i, role in self._index.referrers(checkpoint) if role == "checkpoint"}
        seen |= {i for d in cited for i in self.records(d, "evaluation")}
        for i in sorted(seen):
            e = self._entry(i)
            if e is None or e.kind != "evaluation" or i >= before:
                continue
            node = self.artifact(e.subject, "evaluation")
            rec = self.record(i)
            if not node.ok or not isinstance(rec, Record):
                continue
            ev = rec.predicate
            assert isinstance(ev, Evaluation)
            if ev.checkpoint.digest != checkpoint or self._evaluation_problems(ev):
                continue
            s = self._nodes[ev.suite.digest]
            if s.ok and f"{s.name}@{s.version}" == suite:
                found = rec
        return found

    # -- reports -----------------------------------------------------------------------------------

    def primary_kind(self, digest: str) -> str | None:
        """The kind an artifact is recorded as (its first named record), or None."""
        for i in self._index.about(digest):
            e = self._entry(i)
            if e is not None and e.kind in NAMED:
                return e.kind
        return None

    def verify(self, digest: str) -> Report:
        """Verify an artifact of any kind and its lineage; returns the report (upstream)."""
        parse_digest(digest, "artifact digest")
        kind = self.primary_kind(digest)
        if kind is None:
            missing = Node(digest, "artifact", name=f"artifact {_short(digest)}")
            missing.fail("record", f"{digest}: no artifact with this digest is recorded in the "
                         "log")
            self._nodes.setdefault(digest, missing)
        else:
            try:
                self.artifact(digest, kind)
            except BaseException:
                self.close()
                raise
        self.finish()
        return self.report(digest, ["log", digest])

    def decision(self, node: Node, links: Iterable[Edge] = ()) -> None:
        """Add a decision node (an admission) and its edges to the graph."""
        self._nodes[node.id] = node
        self._edges[node.id] = list(links)

    def report(
        self, subject: str, roots: Sequence[str], downstream: Sequence[Edge] | None = None
    ) -> Report:
        """The graph as a `Report`, each node once: upstream, what is reachable from ``roots``
        through the dependency edges; downstream, the ``downstream`` edges given."""
        nodes: dict[str, Node] = {"log": self.log}
        for r in roots:
            if r != "log":
                nodes[r] = self._nodes[r]
        edges: list[Edge] = []
        if downstream is None:
            todo = [r for r in roots if r != "log"]
            done: set[str] = set()
            while todo:
                nid = todo.pop()
                if nid in done:
                    continue
                done.add(nid)
                nodes.setdefault(nid, self._nodes[nid])
                for e in self._edges.get(nid, []):
                    edges.append(e)
                    todo.append(e.dst)
        else:
            for e in downstream:
                nodes.setdefault(e.src, self._nodes[e.src])
                nodes.setdefault(e.dst, self._nodes[e.dst])
                edges.append(e)
        # A key the policy does not hold comes along as the root cause of the records naming
        # it, when there are several (one such record is clearer shown as itself).
        named: dict[str, int] = {}
        for node in nodes.values():
            for c in node.checks:
                if c.cause is not None and c.cause not in nodes and c.cause in self._nodes:
                    named[c.cause] = named.get(c.cause, 0) + 1
        nodes.update({k: self._nodes[k] for k, n in named.items() if n > 1})
        return Report(subject, list(roots), nodes, edges,
                      "upstream" if downstream is None else "downstream")

    def impact(self, digest: str) -> Report:
        """Everything downstream of ``digest``: the artifacts whose lineage includes it, each
        verified (memoised), with the edges that reach them. Cost: O(downstream)."""
        parse_digest(digest, "artifact digest")
        kind = self.primary_kind(digest)
        if kind is None:
            self.verify(digest)
            return self.report(digest, ["log", digest])
        try:
            down = self._downstream(digest, kind)
        except BaseException:
            self.close()
            raise
        self.finish()
        # Everything downstream was built on the subject: when it fails, they fail through
        # their lineage (`Report.failing`), each counted once as the subject's problem.
        return self.report(digest, ["log", digest], down)

    def with_records(self, report: Report) -> Report:
        """``report`` with the records about its artifacts that are not nodes of it (`Mark`),
        found generically from the kinds (`verify.kinds`), in log order:

        - every record whose subject is an artifact of the report and whose kind is not an
          artifact kind (approvals, revocations, erasures, refusals, imports...);
        - every record of an artifact kind that judges (`Kind.judges`: evaluations,
          releases) and names an artifact of the report as a dependency, when it is not a
          node itself.

        Each is verified as a record (`record`: signature, role, inclusion); what it decides
        is already in the checks of the nodes (a revocation fails its artifact, approvals
        count in the checkpoint's use of a dataset). Call it after `verify` or `impact`.
        """
        found: dict[int, list[tuple[str, str]]] = {}
        for nid, node in report.nodes.items():
            if node.kind not in KINDS:
                continue
            for i in self._index.about(nid):
                e = self._entry(i)
                if e is not None and e.kind in KINDS and not KINDS[e.kind].lineage:
                    found.setdefault(i, []).append((nid, e.kind))
            for i, role in self._index.referrers(nid):
                e = self._entry(i)
                if (e is not None and e.kind in KINDS and KINDS[e.kind].lineage
                        and KINDS[e.kind].judges and e.subject not in report.nodes):
                    found.setdefault(i, []).append((nid, role))
        marks = []
        for i in sorted(found):
            rec = self.record(i)
            entry = self._entry(i)
            assert entry is not None
            if isinstance(rec, Record):
                status, detail = OK, _gist(rec.statement.predicate)
                signers = tuple(sorted(rec.signers))
            else:
                status = FAIL if rec.damaged else INFO
                detail = rec.message if rec.damaged else f"ignored: {rec.message}"
                signers = entry.signers
            marks.append(Mark(i, entry.kind, tuple(dict.fromkeys(found[i])), signers, status,
                              detail))
        return Report(report.subject, report.roots, report.nodes, report.edges,
                      report.direction, marks)

    def _downstream(self, digest: str, kind: str) -> list[Edge]:
        """Verify ``digest`` and walk the referrers: the edges reaching it."""
        self.artifact(digest, kind, follow=False)
        down: list[Edge] = []
        seen = {digest}
        todo = [digest]
        while todo:
            d = todo.pop()
            for i, role in self._index.referrers(d):
                e = self._entry(i)
                if e is None:
                    continue
                src = e.subject
                # A referrer counts only when its own verified identity record names the edge.
                src_node = self.artifact(src, e.kind, follow=False)
                if src_node.index != i or not any(
                    dep.digest == d and dep.role == role for dep in self._deps.get(src, [])
                ):
                    continue
                down.append(Edge(src, d, role))
                if src not in seen:
                    seen.add(src)
                    todo.append(src)
        return down


_RULES = {
    "evaluation": LineageVerifier._evaluation_use,
    "release": LineageVerifier._release_use,
}
"""Rules beyond its records for the kinds that have them, checked once its dependencies are."""


_GIST_CHARS = 160
"""How much of a record's predicate `_gist` shows."""
_TIME = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+Z")


def _gist(predicate: Any) -> str:
    """A record's plain fields, ``key: value; ...`` (numbers one level deep too; digests cut),
    for a picture: what an approval, revocation or evaluation says, read generically."""
    parts: list[str] = []

    def plain(value: Any) -> str | None:
        if isinstance(value, bool) or value is None:
            return None if value is None else str(value).lower()
        if isinstance(value, int | float):
            return f"{value:.4g}" if isinstance(value, float) else str(value)
        if isinstance(value, str):
            return _short(value) if value.startswith("sha256:") else value
        return None

    nested: list[str] = []  # then the numbers one level down (an evaluation's metrics)
    times: list[str] = []  # last: what a record says comes before when it said it
    for key, value in (predicate.items() if isinstance(predicate, dict) else ()):
        if isinstance(value, dict):
            nested += [f"{key}.{k}: {t}" for k, v in value.items()
                       if not isinstance(v, dict | str) and (t := plain(v)) is not None]
        elif (text := plain(value)) is not None:
            (times if _TIME.fullmatch(text) else parts).append(f"{key}: {text}")
    out = "; ".join(parts + nested + times)
    return out if len(out) <= _GIST_CHARS else out[: _GIST_CHARS - 1] + "…"


def _stored_files(
    manifest: Manifest, sealed: Sealed | None, node: Node
) -> dict[str, tuple[str, int]]:
    """Each manifest file's stored blob (digest, size): itself, or for a sealed batch its
    ciphertext, whose size must be the sealing's for the plaintext size."""
    if sealed is None:
        return {f.path: (f.digest, f.size) for f in manifest.files}
    paths = {f.path for f in manifest.files}
    if set(sealed.files) != paths:
        node.fail("sealed", f"seals {sorted(sealed.files)}, the manifest lists {sorted(paths)}")
    out = {}
    for f in manifest.files:
        if f.path in sealed.files:
            digest, size = sealed.files[f.path]
            if size != Sealed.ciphertext_size(f.size):
                node.fail(f.path, f"sealed: ciphertext of {size} bytes for {f.size} plaintext "
                          f"bytes, want {Sealed.ciphertext_size(f.size)}")
            out[f.path] = (digest, size)
    return out


def _key_id(vkey: str) -> str:
    """``origin+keyhash`` of a vkey (the public key itself is long and says nothing more)."""
    return "+".join(vkey.split("+")[:2])


def _erasure_note(erased: Record, extra: str = "") -> str:
    pred = erased.predicate
    reason = pred.reason if isinstance(pred, Erasure) else ""
    return (
        f"{reason} (log index {erased.index})"
        + (f"; {extra}" if extra else "")
        + "; digests and signed records still verify"
    )
