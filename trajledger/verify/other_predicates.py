"""The predicates of the kinds a checkpoint's lineage does not hold: evaluations, releases,
unsealings, imports, refusals and model signatures.

Scope: each predicate's shape, declared as in `verify.predicates` (a frozen dataclass of `spec`
fields, read and written by `verify.records.Record`; unknown fields kept). Their type URIs are
constants of `verify.predicates` (``predicates.ALL`` lists every type), so the kind table
(`verify.kinds`) names every kind whether or not this module is loaded; it is loaded when a
record of one of these kinds is read (`verify.kinds.Kind.read`), or by the writers and readers
that use the classes.
Non-scope: judging the records (``verify.releases`` judges evaluations and releases;
``verify.lineage`` the rest), trust decisions.
Spec: ``schemas/<kind>.v1.schema.json``; in-toto test-result/v0.1 (evaluations).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .digest import HEX64, parse_digest
from .errors import FormatError
from .log_entry import LogEntry
from .manifest import Manifest
from .predicates import (
    EVALUATION,
    IMPORT,
    MODEL_SIGNATURE,
    REFUSAL,
    RELEASE,
    UNSEALING,
    ArtifactRef,
    ResourceDescriptor,
)
from .records import Predicate, check_finite, spec

__all__ = [
    "RESULTS",
    "Evaluation",
    "Import",
    "ModelSignature",
    "Refusal",
    "Release",
    "Unsealing",
    "split_test_name",
]

RESULTS = ("PASSED", "FAILED")
"""An evaluation's ``result`` (in-toto test-result/v0.1 without ``WARNED``)."""


@dataclass(frozen=True)
class Refusal(Predicate):
    """``refusal/v1``: the runner refused to train on a dataset, and why."""

    TYPE: ClassVar[str] = REFUSAL
    dataset: str = spec("dataset", "digest")
    trainer: str = spec("trainer")
    reasons: tuple[str, ...] = spec("reasons", "strings", nonempty=True)
    refused_at: str = spec("refusedAt", "time")


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
    artifact: Mapping[str, Any] | None = spec("artifact", "mapping", required=False)
    log: Mapping[str, Any] = spec("log", "mapping")
    entries: tuple[Mapping[str, Any], ...] = spec("entries", "objects", default=())
    data_included: bool = spec("dataIncluded", "flag", default=True)
    applied: int | None = spec("applied", "integer", default=None)

    def _check(self, what: str) -> None:
        if self.artifact is not None:
            parse_digest(self.artifact.get("digest"), f"{what}: artifact.digest")
        for k in ("origin", "vkey", "checkpoint"):
            if not isinstance(self.log.get(k), str) or not self.log[k]:
                raise FormatError(f"{what}: log.{k} is missing")
        if self.applied is not None and self.applied < 0:
            raise FormatError(f"{what}: applied is {self.applied}, want a tree size")

    @property
    def artifact_digest(self) -> str | None:
        """The foreign artifact's digest (None: updates alone)."""
        return None if self.artifact is None else str(self.artifact["digest"])

    @property
    def envelopes(self) -> tuple[str, ...]:
        """The envelopes of the foreign records the import brought (logged here before it),
        each once: a status lookup finds the import by them, so a local record of the same
        digest is not taken for a second record of this origin (`verify.kinds.Kind.listed`)."""
        out = []
        for e in self.entries:
            raw = e.get("entry")
            if not isinstance(raw, str):
                continue  # the verifier judges the import's evidence; nothing to list
            try:
                out.append(LogEntry.from_bytes(raw.encode("utf-8")).envelope)
            except (FormatError, UnicodeEncodeError):
                continue
        return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class ModelSignature(Predicate):
    """``model-signature/v1``: a checkpoint's files were signed in OpenSSF model_signing's
    format; ``bundle`` is the signature file (a Sigstore bundle v0.3) in the store, ``model``
    names the model and model_signing's root digest of its files."""

    TYPE: ClassVar[str] = MODEL_SIGNATURE
    bundle: str = spec("bundle", "digest")
    signed_predicate_type: str = spec("signedPredicateType")
    model: Mapping[str, Any] = spec("model", "mapping")
    signature_name: str = spec("signatureName")
    signed_at: str = spec("signedAt", "time")


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
    result: str = spec("result", choices=RESULTS)
    checkpoint: ArtifactRef = spec("checkpoint", "record", record=ArtifactRef)
    suite: ArtifactRef = spec("suite", "record", record=ArtifactRef)
    passed_tests: tuple[str, ...] = spec("passedTests", "strings")
    failed_tests: tuple[str, ...] = spec("failedTests", "strings")
    metrics: Mapping[str, float | int] = spec("metrics", "mapping", absent={})
    evaluated_at: str = spec("evaluatedAt", "time")
    evaluator: ArtifactRef | None = spec("evaluator", "record", default=None, record=ArtifactRef)
    configuration: tuple[ResourceDescriptor, ...] = spec(
        "configuration", "records", default=(), record=ResourceDescriptor)
    manifest: Manifest | None = spec("manifest", "manifest", default=None)

    def _check(self, what: str) -> None:
        check_finite(f"{what}: metrics", self.metrics, "a finite number")
        tests = self.passed_tests + self.failed_tests
        for t in tests:
            split_test_name(t, f"{what}: test")
        if not tests or len(set(tests)) != len(tests):
            raise FormatError(f"{what}: want at least one test, each listed once")
        if (self.result == "FAILED") != bool(self.failed_tests):
            raise FormatError(f"{what}: result {self.result} with {len(self.failed_tests)} "
                              "failed test(s)")

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
    checkpoint: ArtifactRef = spec("checkpoint", "record", record=ArtifactRef)
    evaluations: tuple[str, ...] = spec("evaluations", "digests", nonempty=True)
    policy: Mapping[str, Any] = spec("policy", "mapping")
    released_at: str = spec("releasedAt", "time")
    note: str | None = spec("note", default=None, empty=True)

    def _check(self, what: str) -> None:
        name, serial = self.policy.get("name"), self.policy.get("serial")
        if not (isinstance(name, str) and name and type(serial) is int and serial >= 1):
            raise FormatError(f"{what}: policy: want a name, a serial (>= 1) and a digest")
        parse_digest(self.policy.get("digest"), f"{what}: policy: digest")


@dataclass(frozen=True)
class Unsealing(Predicate):
    """``unsealing/v1``: an evaluator unwrapped the data key of sealed batches of a suite (the
    subject) with its X25519 key ``recipient``, for ``purpose``; logged before any byte is
    decrypted."""

    TYPE: ClassVar[str] = UNSEALING
    batches: tuple[str, ...] = spec("batches", "digests", nonempty=True)
    recipient: str = spec("recipient")
    purpose: str = spec("purpose")
    unsealed_at: str = spec("unsealedAt", "time")

    def _check(self, what: str) -> None:
        if not HEX64.fullmatch(self.recipient):
            raise FormatError(f"{what}: recipient is not a keyid (64 lowercase hex)")
