"""Every predicate trajledger writes or accepts: its type URI and one typed reader/writer.

Scope: the shape of each predicate, defined once and shared by the writer (``ledger``), every
reader (the verifier, the catalog, the audit index) and the runner. Each predicate is a frozen
dataclass with

- its fields declared once, in order, each with its JSON key and a type from a small closed set
  (`spec`; the types are the keys of ``_READ``) and, where the fields must agree with each other,
  one ``_check`` method;
- ``from_predicate(obj, what)``: one generic strict reader of the fields this version knows
  (types, digests, times), every other field kept verbatim in ``unrecognized`` (at every level:
  nested records keep theirs) so that a newer writer's additions survive a round trip and are
  never silently dropped (schemas/SPEC.md, "Unknown fields");
- ``to_predicate()``: one generic writer: the JSON object to sign (known fields, omitting absent
  optional ones, plus ``unrecognized``).

Adding a field is one line: ``new_thing: str | None = spec("newThing", "text", default=None)``.
The predicates of the kinds a checkpoint's lineage does not hold (evaluations, releases,
unsealings, imports, refusals, model signatures) are in `verify.other_predicates`, loaded when
used; their type URIs are here.

Nothing here is a trust decision: a predicate is read from a statement whose signature was
verified first (`verify.statement.verify_statement`), or from an unverified one when only
looking things up (then the lookup's result is verified before it is believed).

Conventions: camelCase as in in-toto and SLSA; times ``YYYY-MM-DDTHH:MM:SSZ`` (`verify.times`);
digests ``sha256:<hex>`` strings (SLSA ResourceDescriptors use ``{"sha256": hex}``); counts that
can exceed 2^53 are decimal strings; no NaN or infinity (JSON has none).
Spec: ``schemas/<kind>.v1.schema.json`` (and ``dataset.v2.schema.json``), SLSA Provenance v1
(https://slsa.dev/spec/v1.0/provenance), in-toto ResourceDescriptor v1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from .digest import parse_digest
from .errors import FormatError
from .manifest import Manifest
from .records import PROJECT_PREFIX, Predicate, Record, check_finite, spec

if TYPE_CHECKING:
    from .sealed_files import Sealed

__all__ = [
    "ALL",
    "APPROVAL",
    "CARD_MAX_BYTES",
    "CARD_PATH",
    "CHECKPOINT",
    "DATASET",
    "DATASET_V2",
    "ENVIRONMENT",
    "ERASURE",
    "EVALUATION",
    "EVALUATOR",
    "FILES",
    "HELD_OUT",
    "IMPORT",
    "MODEL_SIGNATURE",
    "PROJECT_PREFIX",
    "REFUSAL",
    "RELEASE",
    "REVOCATION",
    "ROLLOUT_BATCH",
    "SLSA_PROVENANCE_V1",
    "SPLITS",
    "TRUST_POLICY",
    "UNSEALING",
    "Approval",
    "ArtifactRef",
    "Dataset",
    "DatasetV2",
    "Environment",
    "Erasure",
    "Evaluator",
    "FeaturesRef",
    "Files",
    "Predicate",
    "Provenance",
    "ResourceDescriptor",
    "Revocation",
    "RolloutBatch",
    "TrustPolicyRecord",
]


FILES = PROJECT_PREFIX + "files/v1"
ENVIRONMENT = PROJECT_PREFIX + "environment/v1"
EVALUATOR = PROJECT_PREFIX + "evaluator/v1"
ROLLOUT_BATCH = PROJECT_PREFIX + "rollout-batch/v1"
DATASET = PROJECT_PREFIX + "dataset/v1"
DATASET_V2 = PROJECT_PREFIX + "dataset/v2"
"""A dataset with its card (`DatasetV2`); datasets without one are still written as v1."""
APPROVAL = PROJECT_PREFIX + "approval/v1"
REVOCATION = PROJECT_PREFIX + "revocation/v1"
ERASURE = PROJECT_PREFIX + "erasure/v1"
IMPORT = PROJECT_PREFIX + "import/v1"
TRUST_POLICY = PROJECT_PREFIX + "trust-policy/v1"
REFUSAL = PROJECT_PREFIX + "refusal/v1"
MODEL_SIGNATURE = PROJECT_PREFIX + "model-signature/v1"
EVALUATION = PROJECT_PREFIX + "evaluation/v1"
RELEASE = PROJECT_PREFIX + "release/v1"
UNSEALING = PROJECT_PREFIX + "unsealing/v1"
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
CHECKPOINT = SLSA_PROVENANCE_V1

SPLITS = ("train", "holdout", "regression")
"""Dataset splits. Only ``train`` data is ever trained on."""
HELD_OUT = ("holdout", "regression")
"""The splits that are never trained on."""

EVALUATOR_KINDS = ("deterministic", "llm-judge", "human")
ERASURE_REASONS = ("retention", "consent", "legal")



# -- nested records -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArtifactRef(Record):
    """A reference to another artifact: its name, version and digest."""

    name: str = spec("name")
    version: str = spec("version")
    digest: str = spec("digest", "digest")


@dataclass(frozen=True)
class FeaturesRef(Record):
    """A rollout batch's episode features file, kept beside its data: the blob's digest and
    size, and the version of the feature definitions it holds (SPEC, "Episode features")."""

    digest: str = spec("digest", "digest")
    size: int = spec("size", "integer")
    version: int = spec("version", "integer")

    def _check(self, what: str) -> None:
        if self.size < 0 or self.version < 1:
            raise FormatError(f"{what}: size {self.size}, version {self.version}, want >= 0 "
                              "and >= 1")


@dataclass(frozen=True)
class ResourceDescriptor(Record):
    """An in-toto ResourceDescriptor v1: MUST have at least one of ``uri``, ``digest``, ``content``.

    ``digest`` maps algorithm to lowercase hex (``{"sha256": "..."}``).
    """

    name: str | None = spec("name", default=None, empty=True)
    uri: str | None = spec("uri", default=None)
    digest: Mapping[str, str] = spec("digest", "mapping", default={}, omit_empty=True)
    content: str | None = spec("content", default=None, empty=True)
    download_location: str | None = spec("downloadLocation", default=None)
    media_type: str | None = spec("mediaType", default=None)
    annotations: Mapping[str, Any] = spec("annotations", "mapping", default={}, omit_empty=True)

    def _check(self, what: str) -> None:
        for alg, value in self.digest.items():
            if not isinstance(value, str) or not value:
                raise FormatError(f"{what}: digest.{alg} is {value!r}")
        if "sha256" in self.digest:
            parse_digest("sha256:" + self.digest["sha256"], f"{what}: digest.sha256")

    def check(self) -> None:
        """Enforce the ResourceDescriptor rule (writers): one of uri, digest or content.

        Readers accept descriptors without them (trajledger 0.1.0 wrote such byproducts), so
        old records stay verifiable; nothing new is written that breaks the rule.

        Raises:
            FormatError: none of uri, digest and content.
        """
        if not (self.uri or self.digest or self.content):
            raise FormatError(
                f"resource descriptor {self.name!r}: has none of uri, digest and content"
            )

    @classmethod
    def of(cls, name: str, digest: str, **annotations: Any) -> ResourceDescriptor:
        """A descriptor naming an artifact by its ``sha256:<hex>`` digest."""
        return cls(name=name, digest={"sha256": parse_digest(digest)}, annotations=annotations)

    @property
    def sha256(self) -> str | None:
        """``sha256:<hex>`` when the descriptor has a sha256 digest."""
        hexd = self.digest.get("sha256")
        return f"sha256:{hexd}" if hexd else None

    @property
    def role(self) -> str | None:
        """The ``role`` annotation (trajledger's dependency roles)."""
        role = self.annotations.get("role")
        return role if isinstance(role, str) else None


# -- artifacts with files ----------------------------------------------------------------------


@dataclass(frozen=True)
class Files(Predicate):
    """``files/v1``: a tree of files, its manifest inline so one envelope verifies it alone."""

    TYPE: ClassVar[str] = FILES
    manifest: Manifest = spec("manifest", "manifest")


@dataclass(frozen=True)
class Environment(Predicate):
    """``environment/v1``: an environment version (code, config, rules files)."""

    TYPE: ClassVar[str] = ENVIRONMENT
    name: str = spec("name")
    version: str = spec("version")
    source: str | None = spec("source", default=None, empty=True)
    rules_digest: str | None = spec("rulesDigest", "digest", default=None)
    gymnasium_id: str | None = spec("gymnasiumId", default=None)
    manifest: Manifest | None = spec("manifest", "manifest", default=None)
    observation_space: Mapping[str, Any] | None = spec("observationSpace", "mapping", default=None)
    """The observation space (schemas/rollout.v2.md, "Spaces"): enough to undo flattening."""
    action_space: Mapping[str, Any] | None = spec("actionSpace", "mapping", default=None)
    env_spec: Mapping[str, Any] | None = spec("envSpec", "mapping", default=None)
    """The Gymnasium ``EnvSpec`` (id, kwargs, ...) the environment is made from."""


@dataclass(frozen=True)
class Evaluator(Predicate):
    """``evaluator/v1``: an evaluator version (deterministic, LLM judge or human)."""

    TYPE: ClassVar[str] = EVALUATOR
    name: str = spec("name")
    version: str = spec("version")
    kind: str = spec("kind", choices=EVALUATOR_KINDS)
    model_id: str | None = spec("modelId", default=None)
    rubric_digest: str | None = spec("rubricDigest", "digest", default=None)
    prompt_digest: str | None = spec("promptDigest", "digest", default=None)
    manifest: Manifest | None = spec("manifest", "manifest", default=None)
    calibration: ArtifactRef | None = spec("calibration", "record", default=None,
                                         record=ArtifactRef)
    """The expert-labelled dataset the judge's agreement is measured on (``stats --judge``)."""


@dataclass(frozen=True)
class RolloutBatch(Predicate):
    """``rollout-batch/v1``: a batch of rollouts (steps.parquet, episodes.parquet)."""

    TYPE: ClassVar[str] = ROLLOUT_BATCH
    schema_version: str = spec("schemaVersion")
    environment: ArtifactRef = spec("environment", "record", record=ArtifactRef)
    policy_version: str = spec("policyVersion")
    generator: str = spec("generator", empty=True)
    counts: Mapping[str, int] = spec("counts", "mapping")
    stats: Mapping[str, float | int | None] = spec("stats", "mapping")
    evaluator: ArtifactRef | None = spec("evaluator", "record", default=None, record=ArtifactRef)
    seeds: tuple[str, ...] = spec("seeds", "strings", default=())
    consent: str | None = spec("consent", default=None, empty=True)
    licence: str | None = spec("licence", default=None, empty=True)
    retention: str | None = spec("retention", default=None, empty=True)
    manifest: Manifest | None = spec("manifest", "manifest", default=None)
    source: Mapping[str, Any] | None = spec("source", "mapping", default=None)
    """Where the rollouts were read from (input formats, a Minari dataset's metadata)."""
    observation_space: Mapping[str, Any] | None = spec("observationSpace", "mapping", default=None)
    action_space: Mapping[str, Any] | None = spec("actionSpace", "mapping", default=None)
    env_spec: Mapping[str, Any] | None = spec("envSpec", "mapping", default=None)
    features: FeaturesRef | None = spec("features", "record", default=None, record=FeaturesRef)
    """The episode features file recorded with the batch (derived data; not in the manifest,
    so the batch digest does not depend on the feature definitions)."""
    sealed: Sealed | None = spec("sealed", "record", default=None, record="sealed_files.Sealed")
    """Set when the batch's files are stored encrypted (`verify.sealed_files.Sealed`, loaded
    when a batch has the member)."""
    failures_of: str | None = spec("failuresOf", "digest", default=None)
    """The evaluation whose failed episodes the batch holds (a regression suite's next
    version, ``dataset create --from-failures``)."""

    def _check(self, what: str) -> None:
        for k, v in self.counts.items():
            if type(v) is not int or v < 0:
                raise FormatError(f"{what}: counts.{k} is {v!r}, want a count")
        check_finite(f"{what}: stats", self.stats, "a finite number or null", null=True)
        if self.sealed is not None and self.features is not None:
            # A features file is stored in the clear: it would show more of a sealed batch
            # than its published fingerprints (SPEC, "Sealed suites").
            raise FormatError(f"{what}: a sealed batch has no features file (its episodes' "
                              "published fingerprints are its features)")


@dataclass(frozen=True)
class Dataset(Predicate):
    """``dataset/v1``: a named, versioned set of batches with a split and a purpose."""

    TYPE: ClassVar[str] = DATASET
    name: str = spec("name")
    version: str = spec("version")
    split: str = spec("split", choices=SPLITS)
    batches: tuple[str, ...] = spec("batches", "digests", nonempty=True, sort=True)
    purpose: str = spec("purpose", default="train")
    manifest: Manifest | None = spec("manifest", "manifest", default=None)


CARD_PATH = "card.json"
"""The manifest path of a dataset's card (``schemas/card.v1.schema.json``)."""
CARD_MAX_BYTES = 1 << 20
"""A card's largest size: writers refuse a larger one; verifiers read it whole, so a larger
one fails without being read."""


@dataclass(frozen=True)
class DatasetV2(Dataset):
    """``dataset/v2``: a dataset (every field of v1) with its card: ``card`` is the digest of
    the producer's card (``card.json`` in the dataset's manifest), so the signed record names
    the exact card bytes and verifiers check them (`verify.kinds.Kind.documents`)."""

    TYPE: ClassVar[str] = DATASET_V2
    card: str = spec("card", "digest", kw_only=True)


# -- status records ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Approval(Predicate):
    """``approval/v1``: an approver's yes for a purpose, until an expiry."""

    TYPE: ClassVar[str] = APPROVAL
    purpose: str = spec("purpose")
    approved_at: str = spec("approvedAt", "time")
    expires: str = spec("expires", "time")
    note: str | None = spec("note", default=None, empty=True)
    validation_report: str | None = spec("validationReport", "digest", default=None)


@dataclass(frozen=True)
class Revocation(Predicate):
    """``revocation/v1``: the subject must no longer be used."""

    TYPE: ClassVar[str] = REVOCATION
    reason: str = spec("reason")
    revoked_at: str = spec("revokedAt", "time")


@dataclass(frozen=True)
class Erasure(Predicate):
    """``erasure/v1``: the subject's blobs were deleted; digests and lineage remain."""

    TYPE: ClassVar[str] = ERASURE
    reason: str = spec("reason", choices=ERASURE_REASONS)
    erased_at: str = spec("erasedAt", "time")
    blobs: tuple[str, ...] = spec("blobs", "digests")


@dataclass(frozen=True)
class TrustPolicyRecord(Predicate):
    """``trust-policy/v1``: a trust policy in its JSON form (`verify.policy.TrustPolicy`)."""

    TYPE: ClassVar[str] = TRUST_POLICY
    policy: Mapping[str, Any] = spec("policy", "mapping")


# -- SLSA Provenance v1 (checkpoints) ------------------------------------------------------------


@dataclass(frozen=True)
class Provenance(Predicate):
    """SLSA Provenance v1, as trajledger writes it for a checkpoint.

    ``external_parameters`` carries ``name``, ``version``, ``dataset``, ``purpose``, ``trainer``,
    ``config`` and ``seed``; ``resolved_dependencies`` the datasets, environments, evaluators,
    trainer code, dependency lock and parent checkpoint, each with a ``role`` annotation.
    """

    TYPE: ClassVar[str] = SLSA_PROVENANCE_V1
    build_type: str = spec("buildDefinition.buildType")
    external_parameters: Mapping[str, Any] = spec("buildDefinition.externalParameters", "mapping")
    internal_parameters: Mapping[str, Any] = spec(
        "buildDefinition.internalParameters", "mapping", default={}, omit_empty=True)
    resolved_dependencies: tuple[ResourceDescriptor, ...] = spec(
        "buildDefinition.resolvedDependencies", "records", default=(), record=ResourceDescriptor)
    builder_id: str = spec("runDetails.builder.id", default="", required=True)
    metadata: Mapping[str, Any] = spec("runDetails.metadata", "mapping", default={},
                                     omit_empty=True)
    byproducts: tuple[ResourceDescriptor, ...] = spec(
        "runDetails.byproducts", "records", default=(), record=ResourceDescriptor,
        omit_empty=True)
    build_unrecognized: Mapping[str, Any] = spec("buildDefinition", "rest", default={},
                                               compare=False)
    run_unrecognized: Mapping[str, Any] = spec("runDetails", "rest", default={}, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The JSON form, after checking every descriptor names something (`check`)."""
        for d in (*self.resolved_dependencies, *self.byproducts):
            d.check()
        return super().to_json()

    @property
    def name(self) -> str | None:
        """The checkpoint's name (``externalParameters.name``)."""
        v = self.external_parameters.get("name")
        return v if isinstance(v, str) and v else None

    @property
    def version(self) -> str | None:
        """The checkpoint's version (``externalParameters.version``)."""
        v = self.external_parameters.get("version")
        return v if isinstance(v, str) and v else None

    @property
    def purpose(self) -> str | None:
        """The purpose the training data was used for."""
        v = self.external_parameters.get("purpose")
        return v if isinstance(v, str) and v else None

    def dependencies(self, role: str) -> list[ResourceDescriptor]:
        """The resolved dependencies with this ``role`` annotation, in order."""
        return [d for d in self.resolved_dependencies if d.role == role]


ALL = frozenset((FILES, ENVIRONMENT, EVALUATOR, ROLLOUT_BATCH, DATASET, DATASET_V2, APPROVAL,
                 REVOCATION, ERASURE, IMPORT, TRUST_POLICY, REFUSAL, MODEL_SIGNATURE, EVALUATION,
                 RELEASE, UNSEALING, SLSA_PROVENANCE_V1))
"""Every predicate type trajledger reads: each class above declares one, each class of
`verify.other_predicates` (the kinds a checkpoint's lineage does not hold) the others."""
