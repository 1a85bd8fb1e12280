"""Every predicate trajledger writes or accepts: its type URI and one typed reader/writer.

Scope: the shape of each predicate, defined once and shared by the writer (``ledger``), every
reader (the verifier, the catalog, the audit index) and the runner. Each predicate is a frozen
dataclass with

- ``from_predicate(obj, what)``: strict reading of the fields this version knows (types,
  digests, times), every other field kept verbatim in ``unrecognized`` so that a newer writer's
  additions survive a round trip and are never silently dropped;
- ``to_predicate()``: the JSON object to sign (known fields, omitting absent optional ones, plus
  ``unrecognized``).

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

import base64
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from .digest import parse_digest
from .errors import FormatError
from .manifest import Manifest
from .times import parse_time

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
    "SEAL_SCHEME",
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
    "Evaluation",
    "Evaluator",
    "FeaturesRef",
    "Files",
    "Import",
    "ModelSignature",
    "Predicate",
    "Provenance",
    "Refusal",
    "Release",
    "ResourceDescriptor",
    "Revocation",
    "RolloutBatch",
    "Sealed",
    "SealedEpisode",
    "TrustPolicyRecord",
    "Unsealing",
    "split_test_name",
]

PROJECT_PREFIX = "https://trajledger.dev/attestation/"

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

ALL = frozenset(
    {
        FILES,
        ENVIRONMENT,
        EVALUATOR,
        ROLLOUT_BATCH,
        DATASET,
        DATASET_V2,
        APPROVAL,
        REVOCATION,
        ERASURE,
        IMPORT,
        TRUST_POLICY,
        REFUSAL,
        MODEL_SIGNATURE,
        EVALUATION,
        RELEASE,
        UNSEALING,
        SLSA_PROVENANCE_V1,
    }
)

SPLITS = ("train", "holdout", "regression")
HELD_OUT = ("holdout", "regression")
"""The splits that are never trained on."""
"""Dataset splits. Only ``train`` data is ever trained on."""

EVALUATOR_KINDS = ("deterministic", "llm-judge", "human")
ERASURE_REASONS = ("retention", "consent", "legal")
RESULTS = ("PASSED", "FAILED")
"""An evaluation's ``result`` (in-toto test-result/v0.1 without ``WARNED``)."""
SEAL_SCHEME = "hpke-x25519-sha256-chacha20poly1305/stream-64k/v1"
"""The one sealing scheme (schemas/SPEC.md, "Sealed suites"): RFC 9180 HPKE base mode,
DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305 wraps a batch's data key for each
recipient; each file is ChaCha20-Poly1305 in 64 KiB segments under a key derived from it."""
SEAL_MAGIC = b"trajledger-sealed-v1\n"
SEAL_SEGMENT = 64 * 1024
_SEAL_OVERHEAD = len(SEAL_MAGIC) + 16  # magic, salt; then a 16-byte tag per segment

P = TypeVar("P", bound="Predicate")
_HEX64 = re.compile(r"[0-9a-f]{64}")


# -- reading fields -----------------------------------------------------------------------------


class _Reader:
    """Takes the known fields out of a JSON object; what is left is ``unrecognized``."""

    def __init__(self, obj: object, what: str) -> None:
        if not isinstance(obj, Mapping):
            raise FormatError(f"{what}: the predicate is not a JSON object")
        self.rest: dict[str, Any] = dict(obj)
        self.what = what

    def _take(self, key: str, required: bool) -> Any:
        if key not in self.rest:
            if required:
                raise FormatError(f"{self.what}: {key} is missing")
            return None
        value = self.rest.pop(key)
        if value is None and required:
            raise FormatError(f"{self.what}: {key} is null")
        return value

    def text(self, key: str, *, required: bool = True, empty: bool = False) -> str | None:
        value = self._take(key, required)
        if value is None:
            return None
        if not isinstance(value, str) or (not empty and not value):
            raise FormatError(f"{self.what}: {key} is {value!r}, want a non-empty string")
        return value

    def req_text(self, key: str, *, empty: bool = False) -> str:
        value = self.text(key, empty=empty)
        assert value is not None
        return value

    def choice(self, key: str, allowed: Iterable[str], default: str | None = None) -> str:
        value = self.text(key, required=default is None)
        if value is None:
            assert default is not None
            return default
        allowed = tuple(allowed)
        if value not in allowed:
            raise FormatError(f"{self.what}: {key} is {value!r}, want one of {list(allowed)}")
        return value

    def digest(self, key: str, *, required: bool = True) -> str | None:
        value = self._take(key, required)
        if value is None:
            return None
        parse_digest(value, f"{self.what}: {key}")
        return str(value)

    def time(self, key: str, *, required: bool = True) -> str | None:
        value = self._take(key, required)
        if value is None:
            return None
        parse_time(value, f"{self.what}: {key}")
        return str(value)

    def digests(
        self, key: str, *, required: bool = True, non_empty: bool = False
    ) -> tuple[str, ...]:
        value = self._take(key, required)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise FormatError(f"{self.what}: {key} is not a list")
        for i, v in enumerate(value):
            parse_digest(v, f"{self.what}: {key}[{i}]")
        out = tuple(str(v) for v in value)
        if non_empty and not out:
            raise FormatError(f"{self.what}: {key} is empty")
        if len(set(out)) != len(out):
            raise FormatError(f"{self.what}: {key} lists a digest twice")
        return out

    def strings(
        self, key: str, *, required: bool = True, non_empty: bool = False
    ) -> tuple[str, ...]:
        value = self._take(key, required)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise FormatError(f"{self.what}: {key} is not a list of strings")
        if non_empty and not value:
            raise FormatError(f"{self.what}: {key} is empty")
        return tuple(value)

    def mapping(self, key: str, *, required: bool = True) -> dict[str, Any] | None:
        value = self._take(key, required)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise FormatError(f"{self.what}: {key} is not a JSON object")
        return dict(value)

    def integer(self, key: str, *, required: bool = True) -> int | None:
        value = self._take(key, required)
        if value is None:
            return None
        if type(value) is not int:
            raise FormatError(f"{self.what}: {key} is {value!r}, want an integer")
        return value

    def flag(self, key: str, *, required: bool = True) -> bool | None:
        value = self._take(key, required)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise FormatError(f"{self.what}: {key} is {value!r}, want true or false")
        return value

    def array(self, key: str, *, required: bool = True) -> list[Any]:
        value = self._take(key, required)
        if value is None:
            return []
        if not isinstance(value, list):
            raise FormatError(f"{self.what}: {key} is not a list")
        return value

    def raw(self, key: str, *, required: bool = False) -> Any:
        return self._take(key, required)


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        out[key] = value


@dataclass(frozen=True)
class Predicate:
    """Base of every typed predicate: its type URI and the fields it does not know."""

    TYPE: ClassVar[str] = ""
    unrecognized: Mapping[str, Any] = field(default_factory=dict, kw_only=True, compare=False,
                                            repr=False)

    @classmethod
    def from_predicate(cls: type[P], obj: object, what: str = "predicate") -> P:
        """Read a predicate JSON object (strict on known fields; others kept).

        Raises:
            FormatError: a known field is missing or malformed.
        """
        r = _Reader(obj, f"{what} ({cls.TYPE.removeprefix(PROJECT_PREFIX)})")
        made = cls._read(r)
        object.__setattr__(made, "unrecognized", r.rest)
        return made

    @classmethod
    def _read(cls: type[P], r: _Reader) -> P:
        raise NotImplementedError

    def _fields(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_predicate(self) -> dict[str, Any]:
        """The JSON object to sign: the known fields, then every unrecognized one."""
        out = dict(self.unrecognized)
        out.update(self._fields())
        return out

    def written(self, what: str = "predicate") -> dict[str, Any]:
        """`to_predicate`, checked by reading it back with the strict reader: what a writer
        signs is exactly what every reader accepts (one definition of the format).

        Raises:
            FormatError: a field the reader would refuse (an empty name, a bad digest...).
        """
        out = self.to_predicate()
        type(self).from_predicate(out, what)
        return out


def _opt_dict(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict(value)


def _features(r: _Reader) -> FeaturesRef | None:
    obj = r.mapping("features", required=False)
    return None if obj is None else FeaturesRef.from_json(obj, f"{r.what}: features")


def _manifest(r: _Reader) -> Manifest | None:
    obj = r.mapping("manifest", required=False)
    return None if obj is None else Manifest.from_json(obj, f"{r.what}: manifest")


def _ref(r: _Reader, key: str, *, required: bool = True) -> ArtifactRef | None:
    obj = r.mapping(key, required=required)
    return None if obj is None else ArtifactRef.from_json(obj, f"{r.what}: {key}")


def _numbers(r: _Reader, key: str) -> dict[str, float | int]:
    """A map of metric names to finite numbers (JSON has no NaN; a reader refuses one)."""
    out = r.mapping(key, required=False) or {}
    for k, v in out.items():
        if type(v) not in (int, float) or not math.isfinite(v):
            raise FormatError(f"{r.what}: {key}.{k} is {v!r}, want a finite number")
    return out


# -- artifacts with files ----------------------------------------------------------------------


@dataclass(frozen=True)
class Files(Predicate):
    """``files/v1``: a tree of files, its manifest inline so one envelope verifies it alone."""

    TYPE: ClassVar[str] = FILES
    manifest: Manifest

    @classmethod
    def _read(cls, r: _Reader) -> Files:
        m = _manifest(r)
        if m is None:
            raise FormatError(f"{r.what}: manifest is missing")
        return cls(m)

    def _fields(self) -> dict[str, Any]:
        return {"manifest": self.manifest.to_json()}


@dataclass(frozen=True)
class Environment(Predicate):
    """``environment/v1``: an environment version (code, config, rules files)."""

    TYPE: ClassVar[str] = ENVIRONMENT
    name: str
    version: str
    source: str | None = None
    rules_digest: str | None = None
    gymnasium_id: str | None = None
    manifest: Manifest | None = None
    observation_space: Mapping[str, Any] | None = None
    """The observation space (schemas/rollout.v2.md, "Spaces"): enough to undo flattening."""
    action_space: Mapping[str, Any] | None = None
    env_spec: Mapping[str, Any] | None = None
    """The Gymnasium ``EnvSpec`` (id, kwargs, ...) the environment is made from."""

    @classmethod
    def _read(cls, r: _Reader) -> Environment:
        return cls(
            r.req_text("name"),
            r.req_text("version"),
            r.text("source", required=False, empty=True),
            r.digest("rulesDigest", required=False),
            r.text("gymnasiumId", required=False),
            _manifest(r),
            r.mapping("observationSpace", required=False),
            r.mapping("actionSpace", required=False),
            r.mapping("envSpec", required=False),
        )

    def _fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "version": self.version}
        _put(out, "source", self.source)
        _put(out, "rulesDigest", self.rules_digest)
        _put(out, "gymnasiumId", self.gymnasium_id)
        _put(out, "observationSpace", _opt_dict(self.observation_space))
        _put(out, "actionSpace", _opt_dict(self.action_space))
        _put(out, "envSpec", _opt_dict(self.env_spec))
        if self.manifest is not None:
            out["manifest"] = self.manifest.to_json()
        return out


@dataclass(frozen=True)
class Evaluator(Predicate):
    """``evaluator/v1``: an evaluator version (deterministic, LLM judge or human)."""

    TYPE: ClassVar[str] = EVALUATOR
    name: str
    version: str
    kind: str
    model_id: str | None = None
    rubric_digest: str | None = None
    prompt_digest: str | None = None
    manifest: Manifest | None = None
    calibration: ArtifactRef | None = None
    """The expert-labelled dataset the judge's agreement is measured on (``stats --judge``)."""

    @classmethod
    def _read(cls, r: _Reader) -> Evaluator:
        return cls(
            r.req_text("name"),
            r.req_text("version"),
            r.choice("kind", EVALUATOR_KINDS),
            r.text("modelId", required=False),
            r.digest("rubricDigest", required=False),
            r.digest("promptDigest", required=False),
            _manifest(r),
            _ref(r, "calibration", required=False),
        )

    def _fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "version": self.version, "kind": self.kind}
        _put(out, "modelId", self.model_id)
        _put(out, "rubricDigest", self.rubric_digest)
        _put(out, "promptDigest", self.prompt_digest)
        if self.calibration is not None:
            out["calibration"] = self.calibration.to_json()
        if self.manifest is not None:
            out["manifest"] = self.manifest.to_json()
        return out


@dataclass(frozen=True)
class ArtifactRef:
    """A reference to another artifact: its name, version and digest."""

    name: str
    version: str
    digest: str

    @classmethod
    def from_json(cls, obj: object, what: str) -> ArtifactRef:
        """Read ``{"name","version","digest"}`` (strict).

        Raises:
            FormatError: a field is missing or malformed.
        """
        r = _Reader(obj, what)
        ref = cls(r.req_text("name"), r.req_text("version"), str(r.digest("digest")))
        if r.rest:
            raise FormatError(f"{what}: unknown field(s) {sorted(r.rest)}")
        return ref

    def to_json(self) -> dict[str, str]:
        """The JSON form."""
        return {"name": self.name, "version": self.version, "digest": self.digest}


@dataclass(frozen=True)
class FeaturesRef:
    """A rollout batch's episode features file, kept beside its data: the blob's digest and
    size, and the version of the feature definitions it holds (SPEC, "Episode features")."""

    digest: str
    size: int
    version: int

    @classmethod
    def from_json(cls, obj: object, what: str) -> FeaturesRef:
        """Read ``{"digest","size","version"}`` (strict).

        Raises:
            FormatError: a field is missing or malformed.
        """
        r = _Reader(obj, what)
        size, version = r.integer("size"), r.integer("version")
        assert size is not None and version is not None
        ref = cls(str(r.digest("digest")), size, version)
        if r.rest:
            raise FormatError(f"{what}: unknown field(s) {sorted(r.rest)}")
        if size < 0 or version < 1:
            raise FormatError(f"{what}: size {size}, version {version}, want >= 0 and >= 1")
        return ref

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {"digest": self.digest, "size": self.size, "version": self.version}


@dataclass(frozen=True)
class SealedEpisode:
    """What a sealed batch shows of one episode: the duplicate fingerprints the admission gate
    compares (``ledger.episode_features``): the exact content ``fingerprint`` (hex SHA-256),
    the ``modality`` and step count, and the near-duplicate ``sketch`` (128 float32, little
    endian, base64; None where the episode has no vector)."""

    episode_id: str
    steps: int
    modality: str
    fingerprint: str
    sketch: str | None

    @classmethod
    def from_json(cls, obj: object, what: str) -> SealedEpisode:
        """Read one episode's fingerprints (strict).

        Raises:
            FormatError: a field is missing, malformed or unknown.
        """
        r = _Reader(obj, what)
        ep = cls(r.req_text("episodeId"), r.integer("steps") or 0,
                 r.choice("modality", ("numeric", "text")), r.req_text("fingerprint"),
                 r.text("sketch", required=False))
        if r.rest:
            raise FormatError(f"{what}: unknown field(s) {sorted(r.rest)}")
        if ep.steps < 1 or not _HEX64.fullmatch(ep.fingerprint):
            raise FormatError(f"{what}: steps must be >= 1 and fingerprint 64 lowercase hex")
        if ep.sketch is not None:
            try:
                raw = base64.b64decode(ep.sketch, validate=True)
            except ValueError as e:
                raise FormatError(f"{what}: sketch is not base64") from e
            if len(raw) != 512:
                raise FormatError(f"{what}: sketch holds {len(raw)} bytes, want 512")
        return ep

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``sketch`` omitted when None)."""
        out: dict[str, Any] = {"episodeId": self.episode_id, "steps": self.steps,
                               "modality": self.modality, "fingerprint": self.fingerprint}
        _put(out, "sketch", self.sketch)
        return out


@dataclass(frozen=True)
class Sealed:
    """A rollout batch stored encrypted (``sealed`` of rollout-batch/v1; schemas/SPEC.md,
    "Sealed suites"). The batch's manifest lists the plaintext files (what lineage uses); the
    store holds only their ciphertexts, bound here: ``files`` maps each manifest path to its
    ciphertext's digest and size. ``recipients`` holds the batch's data key wrapped for each
    recipient X25519 key by keyid (HPKE ``enc || ciphertext``, base64); ``episodes`` the
    duplicate fingerprints of every episode, so that the gate needs no key, computed with the
    episode feature definitions of version ``feature_version`` (a reader of another version
    cannot compare them)."""

    recipients: tuple[tuple[str, str], ...]
    files: Mapping[str, tuple[str, int]]
    episodes: tuple[SealedEpisode, ...]
    feature_version: int
    scheme: str = SEAL_SCHEME

    @staticmethod
    def ciphertext_size(plain: int) -> int:
        """The size of the ciphertext of a ``plain``-byte file (one tag per 64 KiB segment, at
        least one segment)."""
        return _SEAL_OVERHEAD + plain + 16 * max(1, -(-plain // SEAL_SEGMENT))

    @classmethod
    def from_json(cls, obj: object, what: str) -> Sealed:
        """Read ``sealed`` (strict: the one scheme, at least one recipient and file).

        Raises:
            FormatError: anything malformed or unknown.
        """
        r = _Reader(obj, what)
        scheme = r.choice("scheme", (SEAL_SCHEME,))
        recipients = []
        for i, item in enumerate(r.array("recipients")):
            rr = _Reader(item, f"{what}: recipients[{i}]")
            keyid, enc = rr.req_text("keyid"), rr.req_text("encapsulatedKey")
            if rr.rest or not _HEX64.fullmatch(keyid):
                raise FormatError(f"{rr.what}: want exactly keyid (64 hex) and encapsulatedKey")
            recipients.append((keyid, enc))
        files: dict[str, tuple[str, int]] = {}
        for i, item in enumerate(r.array("files")):
            fr = _Reader(item, f"{what}: files[{i}]")
            path, digest, size = fr.req_text("path"), fr.digest("ciphertext"), fr.integer("size")
            if fr.rest or size is None or size < 0 or path in files:
                raise FormatError(f"{fr.what}: want a new path, ciphertext and size only")
            files[path] = (str(digest), size)
        episodes = tuple(SealedEpisode.from_json(e, f"{what}: episodes[{i}]")
                         for i, e in enumerate(r.array("episodes")))
        version = r.integer("featureVersion")
        if r.rest or not recipients or not files or version is None or version < 1:
            raise FormatError(f"{what}: want recipients, files and a featureVersion >= 1 (and "
                              "nothing unknown)")
        return cls(tuple(recipients), files, episodes, version, scheme)

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "scheme": self.scheme,
            "recipients": [{"keyid": k, "encapsulatedKey": e} for k, e in self.recipients],
            "files": [{"path": p, "ciphertext": d, "size": n}
                      for p, (d, n) in sorted(self.files.items())],
            "episodes": [e.to_json() for e in self.episodes],
            "featureVersion": self.feature_version,
        }


@dataclass(frozen=True)
class RolloutBatch(Predicate):
    """``rollout-batch/v1``: a batch of rollouts (steps.parquet, episodes.parquet)."""

    TYPE: ClassVar[str] = ROLLOUT_BATCH
    schema_version: str
    environment: ArtifactRef
    policy_version: str
    generator: str
    counts: Mapping[str, int]
    stats: Mapping[str, float | int | None]
    evaluator: ArtifactRef | None = None
    seeds: tuple[str, ...] = ()
    consent: str | None = None
    licence: str | None = None
    retention: str | None = None
    manifest: Manifest | None = None
    source: Mapping[str, Any] | None = None
    """Where the rollouts were read from (input formats, a Minari dataset's metadata)."""
    observation_space: Mapping[str, Any] | None = None
    action_space: Mapping[str, Any] | None = None
    env_spec: Mapping[str, Any] | None = None
    features: FeaturesRef | None = None
    """The episode features file recorded with the batch (derived data; not in the manifest,
    so the batch digest does not depend on the feature definitions)."""
    sealed: Sealed | None = None
    """Set when the batch's files are stored encrypted (`Sealed`)."""
    failures_of: str | None = None
    """The evaluation whose failed episodes the batch holds (a regression suite's next
    version, ``dataset create --from-failures``)."""

    @classmethod
    def _read(cls, r: _Reader) -> RolloutBatch:
        schema_version = r.req_text("schemaVersion")
        env = ArtifactRef.from_json(r.mapping("environment"), f"{r.what}: environment")
        ev_obj = r.mapping("evaluator", required=False)
        ev = None if ev_obj is None else ArtifactRef.from_json(ev_obj, f"{r.what}: evaluator")
        policy_version = r.req_text("policyVersion")
        generator = r.req_text("generator", empty=True)
        seeds = r.strings("seeds", required=False)
        counts = r.mapping("counts") or {}
        for k, v in counts.items():
            if type(v) is not int or v < 0:
                raise FormatError(f"{r.what}: counts.{k} is {v!r}, want a count")
        stats = r.mapping("stats") or {}
        for k, v in stats.items():
            if v is not None and (
                type(v) not in (int, float) or (isinstance(v, float) and not math.isfinite(v))
            ):
                raise FormatError(f"{r.what}: stats.{k} is {v!r}, want a finite number or null")
        out = cls(
            schema_version,
            env,
            policy_version,
            generator,
            counts,
            stats,
            ev,
            seeds,
            r.text("consent", required=False, empty=True),
            r.text("licence", required=False, empty=True),
            r.text("retention", required=False, empty=True),
            _manifest(r),
            r.mapping("source", required=False),
            r.mapping("observationSpace", required=False),
            r.mapping("actionSpace", required=False),
            r.mapping("envSpec", required=False),
            _features(r),
            None if (sealed := r.mapping("sealed", required=False)) is None
            else Sealed.from_json(sealed, f"{r.what}: sealed"),
            r.digest("failuresOf", required=False),
        )
        if out.sealed is not None and out.features is not None:
            # A features file is stored in the clear: it would show more of a sealed batch
            # than its published fingerprints (SPEC, "Sealed suites").
            raise FormatError(f"{r.what}: a sealed batch has no features file (its episodes' "
                              "published fingerprints are its features)")
        return out

    def _fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schemaVersion": self.schema_version,
            "environment": self.environment.to_json(),
            "policyVersion": self.policy_version,
            "generator": self.generator,
            "seeds": list(self.seeds),
            "counts": dict(self.counts),
            "stats": dict(self.stats),
        }
        if self.evaluator is not None:
            out["evaluator"] = self.evaluator.to_json()
        _put(out, "consent", self.consent)
        _put(out, "licence", self.licence)
        _put(out, "retention", self.retention)
        _put(out, "source", _opt_dict(self.source))
        _put(out, "observationSpace", _opt_dict(self.observation_space))
        _put(out, "actionSpace", _opt_dict(self.action_space))
        _put(out, "envSpec", _opt_dict(self.env_spec))
        _put(out, "features", self.features.to_json() if self.features else None)
        if self.sealed is not None:
            out["sealed"] = self.sealed.to_json()
        _put(out, "failuresOf", self.failures_of)
        if self.manifest is not None:
            out["manifest"] = self.manifest.to_json()
        return out


@dataclass(frozen=True)
class Dataset(Predicate):
    """``dataset/v1``: a named, versioned set of batches with a split and a purpose."""

    TYPE: ClassVar[str] = DATASET
    name: str
    version: str
    split: str
    batches: tuple[str, ...]
    purpose: str = "train"
    manifest: Manifest | None = None

    @classmethod
    def _read(cls, r: _Reader) -> Dataset:
        name, version = r.req_text("name"), r.req_text("version")
        split = r.choice("split", SPLITS)
        purpose = r.text("purpose", required=False) or "train"
        batches = r.digests("batches", non_empty=True)
        return cls(name, version, split, tuple(sorted(batches)), purpose, _manifest(r),
                   **cls._read_more(r))

    @classmethod
    def _read_more(cls, r: _Reader) -> dict[str, Any]:
        """The fields a later version adds (none in v1)."""
        return {}

    def _fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "split": self.split,
            "purpose": self.purpose,
            "batches": sorted(self.batches),
        }
        if self.manifest is not None:
            out["manifest"] = self.manifest.to_json()
        return out


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
    card: str = field(kw_only=True)

    @classmethod
    def _read_more(cls, r: _Reader) -> dict[str, Any]:
        return {"card": str(r.digest("card"))}

    def _fields(self) -> dict[str, Any]:
        return {**super()._fields(), "card": self.card}


# -- status records ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Approval(Predicate):
    """``approval/v1``: an approver's yes for a purpose, until an expiry."""

    TYPE: ClassVar[str] = APPROVAL
    purpose: str
    approved_at: str
    expires: str
    note: str | None = None
    validation_report: str | None = None

    @classmethod
    def _read(cls, r: _Reader) -> Approval:
        return cls(
            r.req_text("purpose"),
            str(r.time("approvedAt")),
            str(r.time("expires")),
            r.text("note", required=False, empty=True),
            r.digest("validationReport", required=False),
        )

    def _fields(self) -> dict[str, Any]:
        out = {"purpose": self.purpose, "approvedAt": self.approved_at, "expires": self.expires}
        _put(out, "note", self.note)
        _put(out, "validationReport", self.validation_report)
        return out


@dataclass(frozen=True)
class Revocation(Predicate):
    """``revocation/v1``: the subject must no longer be used."""

    TYPE: ClassVar[str] = REVOCATION
    reason: str
    revoked_at: str

    @classmethod
    def _read(cls, r: _Reader) -> Revocation:
        return cls(r.req_text("reason"), str(r.time("revokedAt")))

    def _fields(self) -> dict[str, Any]:
        return {"reason": self.reason, "revokedAt": self.revoked_at}


@dataclass(frozen=True)
class Erasure(Predicate):
    """``erasure/v1``: the subject's blobs were deleted; digests and lineage remain."""

    TYPE: ClassVar[str] = ERASURE
    reason: str
    erased_at: str
    blobs: tuple[str, ...]

    @classmethod
    def _read(cls, r: _Reader) -> Erasure:
        return cls(r.choice("reason", ERASURE_REASONS), str(r.time("erasedAt")),
                   r.digests("blobs"))

    def _fields(self) -> dict[str, Any]:
        return {"reason": self.reason, "erasedAt": self.erased_at, "blobs": list(self.blobs)}


@dataclass(frozen=True)
class Refusal(Predicate):
    """``refusal/v1``: the runner refused to train on a dataset, and why."""

    TYPE: ClassVar[str] = REFUSAL
    dataset: str
    trainer: str
    reasons: tuple[str, ...]
    refused_at: str

    @classmethod
    def _read(cls, r: _Reader) -> Refusal:
        return cls(str(r.digest("dataset")), r.req_text("trainer"),
                   r.strings("reasons", non_empty=True), str(r.time("refusedAt")))

    def _fields(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "trainer": self.trainer, "reasons": list(self.reasons),
                "refusedAt": self.refused_at}


@dataclass(frozen=True)
class TrustPolicyRecord(Predicate):
    """``trust-policy/v1``: a trust policy in its JSON form (`verify.policy.TrustPolicy`)."""

    TYPE: ClassVar[str] = TRUST_POLICY
    policy: Mapping[str, Any]

    @classmethod
    def _read(cls, r: _Reader) -> TrustPolicyRecord:
        body = r.mapping("policy")
        assert body is not None
        return cls(body)

    def _fields(self) -> dict[str, Any]:
        return {"policy": dict(self.policy)}


@dataclass(frozen=True)
class Import(Predicate):
    """``import/v1``: what was accepted from another log, with that log's evidence.

    ``artifact`` is the foreign artifact asked for (absent in an import of updates alone);
    ``log`` names the origin log (``origin``, ``vkey``, the signed ``checkpoint`` note
    accepted); ``entries`` carries each entry taken in or consulted, with its inclusion proof
    (or, for an entry of the log's extension, none: the extension's entries proved themselves
    by rebuilding the checkpoint's root); ``applied`` is the tree size up to which every entry
    of the origin log was examined and the ones about what this ledger holds taken in.
    """

    TYPE: ClassVar[str] = IMPORT
    artifact: Mapping[str, Any] | None
    log: Mapping[str, Any]
    entries: tuple[Mapping[str, Any], ...] = ()
    data_included: bool = True
    applied: int | None = None

    @classmethod
    def _read(cls, r: _Reader) -> Import:
        artifact = r.mapping("artifact", required=False)
        if artifact is not None:
            parse_digest(artifact.get("digest"), f"{r.what}: artifact.digest")
        log = r.mapping("log") or {}
        for k in ("origin", "vkey", "checkpoint"):
            if not isinstance(log.get(k), str) or not log[k]:
                raise FormatError(f"{r.what}: log.{k} is missing")
        entries = r.array("entries", required=False)
        if not all(isinstance(e, Mapping) for e in entries):
            raise FormatError(f"{r.what}: entries must be objects")
        included = r.flag("dataIncluded", required=False)
        applied = r.integer("applied", required=False)
        if applied is not None and applied < 0:
            raise FormatError(f"{r.what}: applied is {applied}, want a tree size")
        return cls(artifact, log, tuple(entries), True if included is None else included,
                   applied)

    @property
    def artifact_digest(self) -> str | None:
        """The foreign artifact's digest (None: updates alone)."""
        return None if self.artifact is None else str(self.artifact["digest"])

    def _fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "log": dict(self.log),
            "entries": [dict(e) for e in self.entries],
            "dataIncluded": self.data_included,
        }
        if self.artifact is not None:
            out["artifact"] = dict(self.artifact)
        if self.applied is not None:
            out["applied"] = self.applied
        return out


@dataclass(frozen=True)
class ModelSignature(Predicate):
    """``model-signature/v1``: a checkpoint's files were signed in OpenSSF model_signing's
    format; ``bundle`` is the signature file (a Sigstore bundle v0.3) in the store, ``model``
    names the model and model_signing's root digest of its files."""

    TYPE: ClassVar[str] = MODEL_SIGNATURE
    bundle: str
    signed_predicate_type: str
    model: Mapping[str, Any]
    signature_name: str
    signed_at: str

    @classmethod
    def _read(cls, r: _Reader) -> ModelSignature:
        return cls(str(r.digest("bundle")), r.req_text("signedPredicateType"),
                   r.mapping("model") or {}, r.req_text("signatureName"),
                   str(r.time("signedAt")))

    def _fields(self) -> dict[str, Any]:
        return {"bundle": self.bundle, "signedPredicateType": self.signed_predicate_type,
                "model": dict(self.model), "signatureName": self.signature_name,
                "signedAt": self.signed_at}


# -- evaluations and releases ----------------------------------------------------------------------


def split_test_name(name: str, what: str = "test") -> tuple[str, str]:
    """An evaluation's test name ``<batch digest>/<episode id>`` as ``(batch, episode)``.

    Raises:
        FormatError: not a digest, a slash and a non-empty episode id.
    """
    batch, sep, episode = name.partition("/")
    parse_digest(batch, f"{what} {name[:80]!r}")
    if not sep or not episode:
        raise FormatError(f"{what} {name[:80]!r}: want <batch digest>/<episode id>")
    return batch, episode


@dataclass(frozen=True)
class Evaluation(Predicate):
    """``evaluation/v1``: a checkpoint run on a holdout or regression suite, one test per
    episode (in-toto test-result/v0.1's ``result``, ``configuration``, ``passedTests`` and
    ``failedTests``; tests are named ``<batch digest>/<episode id>``), with the checkpoint, the
    suite, the evaluator version and the metrics. The evaluation's files (``results.json``,
    what an evaluating command wrote) are its manifest."""

    TYPE: ClassVar[str] = EVALUATION
    result: str
    checkpoint: ArtifactRef
    suite: ArtifactRef
    passed_tests: tuple[str, ...]
    failed_tests: tuple[str, ...]
    metrics: Mapping[str, float | int]
    evaluated_at: str
    evaluator: ArtifactRef | None = None
    configuration: tuple[ResourceDescriptor, ...] = ()
    manifest: Manifest | None = None

    @classmethod
    def _read(cls, r: _Reader) -> Evaluation:
        made = cls(
            r.choice("result", RESULTS), _req(_ref(r, "checkpoint")), _req(_ref(r, "suite")),
            r.strings("passedTests"), r.strings("failedTests"), _numbers(r, "metrics"),
            str(r.time("evaluatedAt")), _ref(r, "evaluator", required=False),
            tuple(ResourceDescriptor.from_json(d, f"{r.what}: configuration[{i}]")
                  for i, d in enumerate(r.array("configuration", required=False))),
            _manifest(r),
        )
        tests = made.passed_tests + made.failed_tests
        for t in tests:
            split_test_name(t, f"{r.what}: test")
        if not tests or len(set(tests)) != len(tests):
            raise FormatError(f"{r.what}: want at least one test, each listed once")
        if (made.result == "FAILED") != bool(made.failed_tests):
            raise FormatError(f"{r.what}: result {made.result} with {len(made.failed_tests)} "
                              "failed test(s)")
        return made

    def _fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "result": self.result, "checkpoint": self.checkpoint.to_json(),
            "suite": self.suite.to_json(), "passedTests": list(self.passed_tests),
            "failedTests": list(self.failed_tests), "metrics": dict(self.metrics),
            "evaluatedAt": self.evaluated_at,
            "configuration": [d.to_json() for d in self.configuration],
        }
        if self.evaluator is not None:
            out["evaluator"] = self.evaluator.to_json()
        if self.manifest is not None:
            out["manifest"] = self.manifest.to_json()
        return out

    @property
    def success_rate(self) -> float:
        """Passed tests over all tests (computed here, never taken from ``metrics``)."""
        return len(self.passed_tests) / (len(self.passed_tests) + len(self.failed_tests))

    def metric(self, name: str) -> float | None:
        """``success_rate`` (computed), ``episodes`` (counted) or a recorded metric."""
        if name == "success_rate":
            return self.success_rate
        if name == "episodes":
            return len(self.passed_tests) + len(self.failed_tests)
        value = self.metrics.get(name)
        return None if value is None else float(value)


@dataclass(frozen=True)
class Release(Predicate):
    """``release/v1``: approvers release a checkpoint on the evaluations the policy's
    ``[release]`` requires (and the parent's, for "no drop" rules). Its subject digest is the
    SHA-256 of this predicate's RFC 8785 bytes: the release is named by what it says."""

    TYPE: ClassVar[str] = RELEASE
    checkpoint: ArtifactRef
    evaluations: tuple[str, ...]
    policy: Mapping[str, Any]
    released_at: str
    note: str | None = None

    @classmethod
    def _read(cls, r: _Reader) -> Release:
        made = cls(_req(_ref(r, "checkpoint")), r.digests("evaluations", non_empty=True),
                   r.mapping("policy") or {}, str(r.time("releasedAt")),
                   r.text("note", required=False, empty=True))
        pr = _Reader(made.policy, f"{r.what}: policy")
        named = (pr.req_text("name"), pr.integer("serial"), pr.digest("digest"))
        if pr.rest or named[1] < 1:  # type: ignore[operator]
            raise FormatError(f"{pr.what}: want exactly name, serial (>= 1) and digest")
        return made

    def _fields(self) -> dict[str, Any]:
        out = {"checkpoint": self.checkpoint.to_json(), "evaluations": list(self.evaluations),
               "policy": dict(self.policy), "releasedAt": self.released_at}
        _put(out, "note", self.note)
        return out


@dataclass(frozen=True)
class Unsealing(Predicate):
    """``unsealing/v1``: an evaluator unwrapped the data key of sealed batches of a suite (the
    subject) with its X25519 key ``recipient``, for ``purpose``; logged before any byte is
    decrypted."""

    TYPE: ClassVar[str] = UNSEALING
    batches: tuple[str, ...]
    recipient: str
    purpose: str
    unsealed_at: str

    @classmethod
    def _read(cls, r: _Reader) -> Unsealing:
        made = cls(r.digests("batches", non_empty=True), r.req_text("recipient"),
                   r.req_text("purpose"), str(r.time("unsealedAt")))
        if not _HEX64.fullmatch(made.recipient):
            raise FormatError(f"{r.what}: recipient is not a keyid (64 lowercase hex)")
        return made

    def _fields(self) -> dict[str, Any]:
        return {"batches": list(self.batches), "recipient": self.recipient,
                "purpose": self.purpose, "unsealedAt": self.unsealed_at}


def _req(ref: ArtifactRef | None) -> ArtifactRef:
    assert ref is not None  # a required field: the reader raised when it was missing
    return ref


# -- SLSA Provenance v1 (checkpoints) ------------------------------------------------------------


@dataclass(frozen=True)
class ResourceDescriptor:
    """An in-toto ResourceDescriptor v1: MUST have at least one of ``uri``, ``digest``, ``content``.

    ``digest`` maps algorithm to lowercase hex (``{"sha256": "..."}``).
    """

    name: str | None = None
    uri: str | None = None
    digest: Mapping[str, str] = field(default_factory=dict)
    content: str | None = None
    download_location: str | None = None
    media_type: str | None = None
    annotations: Mapping[str, Any] = field(default_factory=dict)

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
    def from_json(cls, obj: object, what: str) -> ResourceDescriptor:
        """Read a descriptor (strict on the fields it knows; unknown fields refused).

        Raises:
            FormatError: malformed.
        """
        r = _Reader(obj, what)
        digest = r.mapping("digest", required=False) or {}
        for alg, value in digest.items():
            if not isinstance(value, str) or not value:
                raise FormatError(f"{what}: digest.{alg} is {value!r}")
        if "sha256" in digest:
            parse_digest("sha256:" + digest["sha256"], f"{what}: digest.sha256")
        rd = cls(
            r.text("name", required=False, empty=True),
            r.text("uri", required=False),
            digest,
            r.text("content", required=False, empty=True),
            r.text("downloadLocation", required=False),
            r.text("mediaType", required=False),
            r.mapping("annotations", required=False) or {},
        )
        if r.rest:
            raise FormatError(f"{what}: unknown field(s) {sorted(r.rest)}")
        return rd

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

    def to_json(self) -> dict[str, Any]:
        """The JSON form (absent fields omitted)."""
        out: dict[str, Any] = {}
        _put(out, "name", self.name)
        _put(out, "uri", self.uri)
        if self.digest:
            out["digest"] = dict(self.digest)
        _put(out, "content", self.content)
        _put(out, "downloadLocation", self.download_location)
        _put(out, "mediaType", self.media_type)
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


@dataclass(frozen=True)
class Provenance(Predicate):
    """SLSA Provenance v1, as trajledger writes it for a checkpoint.

    ``external_parameters`` carries ``name``, ``version``, ``dataset``, ``purpose``, ``trainer``,
    ``config`` and ``seed``; ``resolved_dependencies`` the datasets, environments, evaluators,
    trainer code, dependency lock and parent checkpoint, each with a ``role`` annotation.
    """

    TYPE: ClassVar[str] = SLSA_PROVENANCE_V1
    build_type: str
    external_parameters: Mapping[str, Any]
    internal_parameters: Mapping[str, Any] = field(default_factory=dict)
    resolved_dependencies: tuple[ResourceDescriptor, ...] = ()
    builder_id: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    byproducts: tuple[ResourceDescriptor, ...] = ()
    build_unrecognized: Mapping[str, Any] = field(default_factory=dict, compare=False)
    run_unrecognized: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def _read(cls, r: _Reader) -> Provenance:
        bd = _Reader(r.mapping("buildDefinition"), f"{r.what}: buildDefinition")
        build_type = bd.req_text("buildType")
        ext = bd.mapping("externalParameters") or {}
        internal = bd.mapping("internalParameters", required=False) or {}
        deps = tuple(
            ResourceDescriptor.from_json(d, f"{bd.what}: resolvedDependencies[{i}]")
            for i, d in enumerate(bd.array("resolvedDependencies", required=False))
        )
        rd = _Reader(r.mapping("runDetails"), f"{r.what}: runDetails")
        builder = _Reader(rd.mapping("builder"), f"{rd.what}: builder")
        builder_id = builder.req_text("id")
        metadata = rd.mapping("metadata", required=False) or {}
        byproducts = tuple(
            ResourceDescriptor.from_json(d, f"{rd.what}: byproducts[{i}]")
            for i, d in enumerate(rd.array("byproducts", required=False))
        )
        return cls(build_type, ext, internal, deps, builder_id, metadata, byproducts,
                   bd.rest, {**rd.rest, **({"builder": builder.rest} if builder.rest else {})})

    def _fields(self) -> dict[str, Any]:
        for d in (*self.resolved_dependencies, *self.byproducts):
            d.check()
        build: dict[str, Any] = dict(self.build_unrecognized)
        build.update({
            "buildType": self.build_type,
            "externalParameters": dict(self.external_parameters),
            "resolvedDependencies": [d.to_json() for d in self.resolved_dependencies],
        })
        if self.internal_parameters:
            build["internalParameters"] = dict(self.internal_parameters)
        run_rest = dict(self.run_unrecognized)
        builder_rest = run_rest.pop("builder", {})
        run: dict[str, Any] = dict(run_rest)
        run["builder"] = {**builder_rest, "id": self.builder_id}
        if self.metadata:
            run["metadata"] = dict(self.metadata)
        if self.byproducts:
            run["byproducts"] = [b.to_json() for b in self.byproducts]
        return {"buildDefinition": build, "runDetails": run}

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
