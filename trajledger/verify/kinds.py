"""The kind registry: every artifact and record kind of the log, defined once.

Scope: for each kind a log entry can have, the one definition every part of trajledger reads:

- its predicate types and typed predicates (`verify.predicates`; the kinds a checkpoint's
  lineage does not hold have theirs in `verify.other_predicates`, loaded on first use:
  `predicate_class`);
- which policy roles may sign it, and how signatures count (`Signing`);
- whether its subject is a manifest of files in the store, whether users refer to it by
  ``NAME@VERSION``, and whether it can restrict a decision (so a missing or corrupt envelope must
  fail closed);
- its edges in the lineage: the artifacts it depends on, each with a role, read from its typed
  predicate (`Kind.dependencies`); and the digests it lists for a status lookup (a dataset's
  batches, an erasure's deleted blobs, an import's foreign records: `Kind.listed`);
- the later versions of its predicate it also reads (a dataset with a card, ``dataset/v2``),
  and the files of its manifest its predicate names as documents (the card: `Kind.documents`).

Adding a kind means adding its predicate in ``predicates.py`` (or ``other_predicates.py``, its
type URI in ``predicates.py``) and one `Kind` here.
Non-scope: verifying anything (``verify.lineage`` does, using these definitions); the signed
metadata two records of an artifact's digest must share to be the same record
(``ledger.log.spec.differences``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from . import predicates as p
from .digest import DIGEST_PREFIX, HEX64
from .errors import FormatError
from .statement import Statement

__all__ = [
    "KINDS",
    "NAMED",
    "Dependency",
    "Kind",
    "Signing",
    "name_version",
    "predicate_class",
]


class Signing(Enum):
    """How the signatures on one envelope of a kind count.

    - ``THRESHOLD``: the threshold of the kind's one role, within the envelope.
    - ``ANY_ONE``: one key of any of the kind's roles (stopping the use of data must be easy for
      producers and approvers alike: revocation, erasure).
    - ``PER_RECORD``: one key of the role per record; thresholds are counted across records
      (approvals: each approver records their own).
    """

    THRESHOLD = "threshold"
    ANY_ONE = "any-one"
    PER_RECORD = "per-record"


@dataclass(frozen=True)
class Dependency:
    """An edge of the lineage: the depending artifact uses ``digest`` (of ``kind``) as ``role``.

    ``optional``: the edge exists only when ``digest`` is recorded as ``kind`` (a batch's policy
    version names a checkpoint only when its rollouts came from one).
    """

    role: str
    digest: str
    kind: str
    optional: bool = False
    log_index: int | None = None


def _named(predicate: p.Predicate, field: str) -> tuple[str, ...]:
    """The digests a predicate's ``field`` names: an artifact reference's, a digest, a list of
    digests, or none."""
    value = getattr(predicate, field)
    if value is None:
        return ()
    return value if isinstance(value, tuple) else (getattr(value, "digest", value),)


def _generated_by(pred: Any) -> list[Dependency]:
    """A batch's policy version, when it is a digest: the checkpoint that generated it, if
    one is recorded under that digest."""
    b: p.RolloutBatch = pred
    if not (b.policy_version.startswith(DIGEST_PREFIX) and HEX64.fullmatch(b.policy_version, 7)):
        return []  # a version that is not a digest (`parse_digest`) names no checkpoint
    return [Dependency("generated-by", b.policy_version, "checkpoint", optional=True)]


CHECKPOINT_ROLES: Mapping[str, str] = {
    "dataset": "dataset",
    "environment": "environment",
    "evaluator": "evaluator",
    "base-checkpoint": "checkpoint",
}
"""Roles of a checkpoint's resolved dependencies that are artifacts of the log, and their kind.
Other roles (trainer code, dependency lock) are facts recorded, not artifacts."""


def _checkpoint_deps(pred: Any) -> list[Dependency]:
    prov: p.Provenance = pred
    out = []
    for d in prov.resolved_dependencies:
        role = d.role
        if role is not None and role in CHECKPOINT_ROLES and d.sha256:
            index = d.annotations.get("logIndex")
            out.append(Dependency(role, d.sha256, CHECKPOINT_ROLES[role],
                                  log_index=index if type(index) is int else None))
    return out


def _no_deps(pred: Any) -> list[Dependency]:
    return []


@dataclass(frozen=True)
class Kind:
    """One kind of log entry.

    Attributes:
        name: the entry's ``kind`` field.
        predicate_types: the predicate type URIs a statement of this kind may carry, oldest
            first: its first version (what most writers write), then later versions, also
            read; writers choose one. Each names its typed predicate class (`predicate_class`;
            a later version's is a subclass of the first's).
        roles: the policy roles whose keys may sign it.
        signing: how the signatures count.
        files: the subject is a manifest of files in the store.
        named: users refer to it by ``NAME@VERSION`` (an artifact, not a status record).
        restricts: a record of this kind can stop a use of data (revocation, erasure, trust
            policy, a holdout dataset): its envelope must be present and intact, else every
            decision it could affect fails (fail closed).
        lineage: it is a node of the lineage (an artifact), not a record about one.
        listing: the field of its predicate holding the digests a status lookup finds its
            records by (`listed`); "" for none.
        uses: the lineage edges its predicate's fields name, ``(role, field, kind)``: the
            field holds an artifact reference, a digest or a list of digests (`_named`).
    """

    name: str
    predicate_types: tuple[str, ...]
    roles: tuple[str, ...]
    signing: Signing
    files: bool
    named: bool
    restricts: bool
    lineage: bool
    _deps: Callable[[Any], list[Dependency]] = _no_deps
    listing: str = ""
    uses: tuple[tuple[str, str, str], ...] = ()

    def read(self, statement: Statement, what: str) -> p.Predicate:
        """The statement's predicate as this kind's typed predicate (of its version).

        Raises:
            FormatError: another predicate type, or a malformed predicate.
        """
        if statement.predicate_type in self.predicate_types:
            cls = predicate_class(statement.predicate_type)
            return cls.from_predicate(statement.predicate, what)
        raise FormatError(
            f"{what}: predicate type {statement.predicate_type}, want "
            + " or ".join(self.predicate_types)
        )

    def documents(self, predicate: p.Predicate) -> dict[str, str]:
        """The files of its manifest the predicate names as documents, ``{path: digest}`` (a
        dataset's card): verifiers read them whole and check them against the signed digest,
        so every export carries them, with data or without."""
        return {p.CARD_PATH: predicate.card} if isinstance(predicate, p.DatasetV2) else {}

    def dependencies(self, predicate: p.Predicate) -> list[Dependency]:
        """The lineage edges this artifact's predicate names (its upstream)."""
        return [Dependency(role, digest, kind) for role, field, kind in self.uses
                for digest in _named(predicate, field)] + self._deps(predicate)

    @property
    def judges(self) -> bool:
        """Its records judge the artifacts they name rather than build on them: signed by
        roles that approve and evaluate, not by producers or trainers (an evaluation, a
        release, an approval). A lineage draws them beside what they judge (`verify.lineage
        .LineageVerifier.with_records`); what is built on an artifact is its impact."""
        return not set(self.roles) & {"producer", "trainer"}

    @property
    def lists(self) -> bool:
        """Records of this kind are found by the digests they list (`listed`)."""
        return bool(self.listing)

    def listed(self, predicate: p.Predicate) -> tuple[str, ...]:
        """The digests a status lookup finds this record by: a dataset's batches (to find the
        holdout datasets of a batch), an erasure's deleted blobs, the envelopes of an import's
        foreign records."""
        return tuple(getattr(predicate, self.listing)) if self.listing else ()


def predicate_class(type_uri: str) -> type[p.Predicate]:
    """The typed predicate class of a predicate type URI of `verify.predicates.ALL`: the kinds
    a checkpoint's lineage does not hold have theirs in `verify.other_predicates`, imported on
    the first use of one."""
    if type_uri not in p.Predicate.TYPES:
        from . import other_predicates  # noqa: F401  (its classes register their types)
    return p.Predicate.TYPES[type_uri]


_K = Kind
KINDS: Mapping[str, Kind] = {
    k.name: k
    for k in (
        _K("files", (p.FILES,), ("producer",), Signing.THRESHOLD, True, True, False, True),
        _K("environment", (p.ENVIRONMENT,), ("producer",), Signing.THRESHOLD, True, True, False,
           True),
        _K("evaluator", (p.EVALUATOR,), ("producer",), Signing.THRESHOLD, True, True, False, True),
        _K("rollout-batch", (p.ROLLOUT_BATCH,), ("producer",), Signing.THRESHOLD, True, True, False,
           True, _generated_by, uses=(("environment", "environment", "environment"),
                                      ("evaluator", "evaluator", "evaluator"),
                                      ("failures-of", "failures_of", "evaluation"))),
        _K("dataset", (p.DATASET, p.DATASET_V2), ("producer",), Signing.THRESHOLD, True, True,
           True, True, listing="batches",
           uses=(("batch", "batches", "rollout-batch"),)),
        _K("checkpoint", (p.SLSA_PROVENANCE_V1,), ("trainer",), Signing.THRESHOLD, True, True,
           False, True, _checkpoint_deps),
        _K("approval", (p.APPROVAL,), ("approver",), Signing.PER_RECORD, False, False, False,
           False),
        _K("revocation", (p.REVOCATION,), ("producer", "approver"), Signing.ANY_ONE, False, False,
           True, False),
        _K("erasure", (p.ERASURE,), ("producer", "approver"), Signing.ANY_ONE, False, False, True,
           False, listing="blobs"),
        _K("import", (p.IMPORT,), ("approver",), Signing.THRESHOLD, False, True, False, False,
           listing="envelopes"),
        _K("trust-policy", (p.TRUST_POLICY,), ("approver",), Signing.THRESHOLD, False, True,
           True, False),
        _K("refusal", (p.REFUSAL,), ("trainer",), Signing.THRESHOLD, False, False, False, False),
        _K("model-signature", (p.MODEL_SIGNATURE,), ("trainer",), Signing.THRESHOLD, False, False,
           False, False),
        _K("evaluation", (p.EVALUATION,), ("evaluator",), Signing.THRESHOLD, True, True, False,
           True, uses=(("checkpoint", "checkpoint", "checkpoint"), ("suite", "suite", "dataset"),
                       ("evaluator", "evaluator", "evaluator"))),
        # Any one approver records a release; the policy's [release] approvals counts them.
        _K("release", (p.RELEASE,), ("approver",), Signing.ANY_ONE, False, True, False, True,
           uses=(("checkpoint", "checkpoint", "checkpoint"),
                 ("evaluation", "evaluations", "evaluation"))),
        _K("unsealing", (p.UNSEALING,), ("evaluator",), Signing.ANY_ONE, False, False, False,
           False),
    )
}
"""Every kind, by entry kind name."""

NAMED = frozenset(k.name for k in KINDS.values() if k.named)
"""Kinds users refer to by name (artifacts, policies, imports)."""


def name_version(entry_kind: str, statement: Statement) -> tuple[str, str]:
    """An artifact's name and version as its signed statement gives them.

    Artifacts with a ``name``/``version`` in their predicate (environments, evaluators, datasets;
    a checkpoint's ``externalParameters``) use those; a trust policy is ``NAME#SERIAL`` (its
    subject name); others (batches, files, imports) the statement's first subject name with no
    version. Malformed predicates fall back to the subject name: naming is never a check.
    """
    named: object = statement.predicate  # the object holding the name and version, if any
    if entry_kind == "checkpoint":
        build = statement.predicate.get("buildDefinition")
        named = build.get("externalParameters") if isinstance(build, Mapping) else None
    elif entry_kind not in ("environment", "evaluator", "dataset"):
        named = None
    if isinstance(named, Mapping) and isinstance(named.get("name"), str) and named["name"]:
        version = named.get("version")
        return str(named["name"]), version if isinstance(version, str) else ""
    return statement.subjects[0].name, ""
