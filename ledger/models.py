"""Writer-side models of every project predicate (pydantic).

Scope: the shape of what the ledger signs for each artifact kind. The reader side is
``verify/`` (stdlib JSON with explicit checks); ``schemas/<kind>.v1.schema.json`` is the
contract, and a test validates what these models emit against those schemas.
Non-scope: checking evidence; nothing is ever verified through these models.

Conventions: camelCase field names as in in-toto and SLSA; times are RFC 3339 UTC strings
``YYYY-MM-DDTHH:MM:SSZ``; digests are ``sha256:<hex>`` strings; counts that can exceed 2^53 are
decimal strings; no NaN or infinities anywhere (refused at validation).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trajledger.verify import predicates

__all__ = [
    "ApprovalPredicate",
    "ArtifactRef",
    "DatasetPredicate",
    "EnvironmentPredicate",
    "ErasurePredicate",
    "EvaluatorPredicate",
    "RefusalPredicate",
    "RevocationPredicate",
    "RolloutBatchPredicate",
    "rfc3339",
]

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"


def rfc3339(when: dt.datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` in UTC."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        """The predicate as JSON (aliases, no None fields)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ArtifactRef(_Model):
    """A reference to another artifact: its name, version and digest."""

    name: str
    version: str
    digest: str = Field(pattern=DIGEST_PATTERN)


class EnvironmentPredicate(_Model):
    """``environment/v1``: an environment version (code, config, rules files).

    The spaces and spec fields (added with rollout schema 2) let flattened observations and
    actions be unflattened from the record alone.
    """

    TYPE: ClassVar[str] = predicates.ENVIRONMENT
    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    source: str | None = None
    rules_digest: str | None = Field(default=None, alias="rulesDigest", pattern=DIGEST_PATTERN)
    gymnasium_id: str | None = Field(default=None, alias="gymnasiumId")
    observation_space: dict[str, Any] | None = Field(default=None, alias="observationSpace")
    """The observation space (``ledger.rollouts.spaces.space_to_json``)."""
    action_space: dict[str, Any] | None = Field(default=None, alias="actionSpace")
    env_spec: dict[str, Any] | None = Field(default=None, alias="envSpec")
    """The Gymnasium ``EnvSpec`` (its ``to_json``, numbers made canonical)."""


class EvaluatorPredicate(_Model):
    """``evaluator/v1``: an evaluator version (deterministic, LLM judge or human)."""

    TYPE: ClassVar[str] = predicates.EVALUATOR
    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    kind: Literal["deterministic", "llm-judge", "human"]
    model_id: str | None = Field(default=None, alias="modelId")
    rubric_digest: str | None = Field(default=None, alias="rubricDigest", pattern=DIGEST_PATTERN)
    prompt_digest: str | None = Field(default=None, alias="promptDigest", pattern=DIGEST_PATTERN)


class RolloutBatchPredicate(_Model):
    """``rollout-batch/v1``: a batch of rollouts (steps.parquet + episodes.parquet).

    ``schemaVersion`` names the rollout schema of the files (``1`` or ``2``); the fields after
    ``retention`` were added with rollout schema 2 (readers keep unknown fields).
    """

    TYPE: ClassVar[str] = predicates.ROLLOUT_BATCH
    schema_version: str = Field(alias="schemaVersion")
    environment: ArtifactRef
    evaluator: ArtifactRef | None = None
    policy_version: str = Field(alias="policyVersion", min_length=1)
    generator: str
    seeds: list[str] = Field(default_factory=list)
    """Every distinct seed, as decimal strings (int64 seeds exceed 2^53)."""
    counts: dict[str, int]
    stats: dict[str, float | int | None]
    consent: str | None = None
    licence: str | None = None
    retention: str | None = None
    source: dict[str, Any] | None = None
    """What the input was: ``formats`` (the input formats read) and, for a Minari dataset,
    ``minari`` (its metadata: dataset id, version, author, reference scores, ...)."""
    observation_space: dict[str, Any] | None = Field(default=None, alias="observationSpace")
    """The observation space the ``obs`` tensors come from; Dict and Tuple spaces are stored
    flattened (``gymnasium.spaces.flatten``) and unflatten with it."""
    action_space: dict[str, Any] | None = Field(default=None, alias="actionSpace")
    env_spec: dict[str, Any] | None = Field(default=None, alias="envSpec")

    @field_validator("stats")
    @classmethod
    def _finite(cls, v: dict[str, float | int | None]) -> dict[str, float | int | None]:
        for k, x in v.items():
            if isinstance(x, float) and not math.isfinite(x):
                raise ValueError(f"stats.{k} is {x}; summary statistics must be finite")
        return v


class DatasetPredicate(_Model):
    """``dataset/v1``: a named, versioned set of batches with a split and a purpose."""

    TYPE: ClassVar[str] = predicates.DATASET
    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    split: Literal["train", "holdout", "regression"]
    purpose: str = "train"
    batches: list[str] = Field(min_length=1)

    @field_validator("batches")
    @classmethod
    def _digests(cls, v: list[str]) -> list[str]:
        import re

        for d in v:
            if not re.fullmatch(DIGEST_PATTERN, d):
                raise ValueError(f"batch {d!r} is not a sha256:<hex> digest")
        if len(set(v)) != len(v):
            raise ValueError("a batch is listed twice")
        return sorted(v)


class ApprovalPredicate(_Model):
    """``approval/v1``: an approver's yes for a purpose, until an expiry."""

    TYPE: ClassVar[str] = predicates.APPROVAL
    purpose: str = Field(min_length=1)
    approved_at: str = Field(alias="approvedAt")
    expires: str
    note: str | None = None
    validation_report: str | None = Field(
        default=None, alias="validationReport", pattern=DIGEST_PATTERN
    )


class RevocationPredicate(_Model):
    """``revocation/v1``: the subject must no longer be used."""

    TYPE: ClassVar[str] = predicates.REVOCATION
    reason: str = Field(min_length=1)
    revoked_at: str = Field(alias="revokedAt")


class ErasurePredicate(_Model):
    """``erasure/v1``: the subject's blobs were deleted; digests and lineage remain."""

    TYPE: ClassVar[str] = predicates.ERASURE
    reason: Literal["retention", "consent", "legal"]
    erased_at: str = Field(alias="erasedAt")
    blobs: list[str]


class RefusalPredicate(_Model):
    """``refusal/v1``: the runner refused to train on a dataset, and why."""

    TYPE: ClassVar[str] = predicates.REFUSAL
    dataset: str = Field(pattern=DIGEST_PATTERN)
    trainer: str
    reasons: list[str] = Field(min_length=1)
    refused_at: str = Field(alias="refusedAt")
