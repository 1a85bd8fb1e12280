"""Every predicate type URI trajledger writes or accepts, in one place.

Scope: names only. Each project predicate is versioned in its URI and has a JSON Schema in
``schemas/`` of the same name. Checkpoints reuse SLSA Provenance v1.
"""

from __future__ import annotations

__all__ = [
    "ALL",
    "APPROVAL",
    "CHECKPOINT",
    "DATASET",
    "ENVIRONMENT",
    "ERASURE",
    "EVALUATOR",
    "FILES",
    "IMPORT",
    "MODEL_SIGNATURE",
    "PROJECT_PREFIX",
    "REFUSAL",
    "REVOCATION",
    "ROLLOUT_BATCH",
    "SLSA_PROVENANCE_V1",
    "TRUST_POLICY",
]

PROJECT_PREFIX = "https://trajledger.dev/attestation/"

FILES = PROJECT_PREFIX + "files/v1"
ENVIRONMENT = PROJECT_PREFIX + "environment/v1"
EVALUATOR = PROJECT_PREFIX + "evaluator/v1"
ROLLOUT_BATCH = PROJECT_PREFIX + "rollout-batch/v1"
DATASET = PROJECT_PREFIX + "dataset/v1"
APPROVAL = PROJECT_PREFIX + "approval/v1"
REVOCATION = PROJECT_PREFIX + "revocation/v1"
ERASURE = PROJECT_PREFIX + "erasure/v1"
IMPORT = PROJECT_PREFIX + "import/v1"
TRUST_POLICY = PROJECT_PREFIX + "trust-policy/v1"
REFUSAL = PROJECT_PREFIX + "refusal/v1"
MODEL_SIGNATURE = PROJECT_PREFIX + "model-signature/v1"
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
CHECKPOINT = SLSA_PROVENANCE_V1

ALL = frozenset(
    {
        FILES,
        ENVIRONMENT,
        EVALUATOR,
        ROLLOUT_BATCH,
        DATASET,
        APPROVAL,
        REVOCATION,
        ERASURE,
        IMPORT,
        TRUST_POLICY,
        REFUSAL,
        MODEL_SIGNATURE,
        SLSA_PROVENANCE_V1,
    }
)
