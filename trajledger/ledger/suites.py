"""Evaluation suites: a held-out dataset's verified bytes, sealed batches opened under a log.

Scope:

- `read_suite`: the files of every batch of a holdout or regression dataset, read once and
  checked against their digests; sealed batches (``ledger.sealing``) are opened with an
  evaluator's X25519 key, and only after a signed ``unsealing`` record naming the suite, the
  batches, the key and the purpose is in the log (each unsealing is logged, even one that
  fails). A sealed batch's plaintext must hash to its manifest, and its episodes must have the
  fingerprints its record published (a producer cannot hide a duplicate from the gate by
  stating other ones).
- `suite_from_failures`: a regression suite's next version, from the failed episodes of an
  evaluation (``dataset create --from-failures``): per batch of the evaluated suite, a batch of
  its failed episodes (sealed again when it was sealed), linked to the evaluation, and a
  regression dataset of them.

Non-scope: verifying the suite's lineage (the caller verifies it first: ``runner.evaluate``,
`suite_from_failures` itself), the cryptography (``ledger.sealing``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trajledger.verify import predicates
from trajledger.verify.digest import digest_bytes
from trajledger.verify.errors import DigestMismatchError, FormatError, PolicyError
from trajledger.verify.manifest import Manifest
from trajledger.verify.other_predicates import Unsealing
from trajledger.verify.predicates import Dataset, RolloutBatch
from trajledger.verify.strict_json import load_object
from trajledger.verify.times import now

from .errors import LedgerError, disk_error

if TYPE_CHECKING:
    import pyarrow as pa
    from cryptography.hazmat.primitives.asymmetric import x25519

    from trajledger.verify.encryption_key import EncryptionKey
    from trajledger.verify.lineage import LineageVerifier

    from .home import LedgerHome
    from .keys import Signer
    from .record import Recorded

__all__ = [
    "FAILED_IN",
    "SuiteBatch",
    "Unsealer",
    "read_suite",
    "sealed_batches",
    "suite_from_failures",
]

SKETCH_AGREEMENT = 0.9999
"""Recomputed near-duplicate sketches must agree with the published ones to this cosine (the
same code computes both; only floating-point summation order may differ)."""


@dataclass(frozen=True)
class SuiteBatch:
    """One batch of a suite: its digest, log index, verified predicate and plaintext files."""

    digest: str
    index: int
    predicate: RolloutBatch
    files: Mapping[str, bytes]


@dataclass(frozen=True)
class Unsealer:
    """Who opens sealed batches: an evaluator's X25519 key and the evaluator signing key that
    logs each unsealing."""

    key: EncryptionKey
    private: x25519.X25519PrivateKey
    signer: Signer
    logged: list[Recorded] = field(default_factory=list, compare=False)
    """The unsealing records it logged, in order (the one an evaluation cites: its own)."""

    @classmethod
    def load(cls, ledger: LedgerHome, signer: Signer, name: str | None = None) -> Unsealer:
        """The X25519 key ``name`` (default: named as the signing key) of the key store.

        Raises:
            KeyError_: no such key, or it cannot be decrypted.
        """
        key, private = ledger.keys.decrypter(name or signer.name)
        return cls(key, private, signer)


def sealed_batches(verifier: LineageVerifier, suite: str) -> list[str]:
    """The suite's batches whose verified records say they are sealed."""
    from trajledger.verify.lineage import Record

    rec = verifier.identity_record(suite, "dataset")
    if not isinstance(rec, Record) or not isinstance(rec.predicate, Dataset):
        return []
    out = []
    for b in rec.predicate.batches:
        r = verifier.identity_record(b, "rollout-batch")
        if isinstance(r, Record) and isinstance(r.predicate, RolloutBatch) and r.predicate.sealed:
            out.append(b)
    return out


def read_suite(
    ledger: LedgerHome,
    verifier: LineageVerifier,
    suite: str,
    *,
    unsealer: Unsealer | None,
    purpose: str,
) -> list[SuiteBatch]:
    """Read the files of every batch of ``suite`` (verified by ``verifier`` already).

    Steps:
        1. For each batch, in the dataset's order: its verified record and its manifest
           (re-hashed against the batch digest).
        2. With sealed batches: an ``unsealer`` whose key each is sealed to, else refuse; then
           log an ``unsealing`` record (signed by the unsealer's evaluator key) before any
           byte is decrypted.
        3. Each file: a plain one read and hashed; a sealed one opened (`sealing.open_file`:
           ciphertext hashed, segments authenticated, plaintext hashed).
        4. A sealed batch's recomputed episode fingerprints equal the published ones (when
           published with this feature version: the gate compares no others).

    Raises:
        PolicyError: sealed batches and no unsealer, or one not sealed to its key.
        DigestMismatchError, SealError: bytes that are not what the records bind.
        LedgerError: a record that does not verify, a missing blob.
    """
    from trajledger.verify.lineage import Record

    from .sealing import open_file, unwrap_key

    # (1)
    rec = verifier.identity_record(suite, "dataset")
    if not isinstance(rec, Record) or not isinstance(rec.predicate, Dataset):
        raise LedgerError(f"suite {suite[:19]}…: its dataset record does not verify")
    found: list[tuple[str, int, RolloutBatch, Manifest]] = []
    for b in rec.predicate.batches:
        r = verifier.identity_record(b, "rollout-batch")
        if not isinstance(r, Record) or not isinstance(r.predicate, RolloutBatch):
            raise LedgerError(f"batch {b[:19]}… of the suite: its record does not verify")
        manifest = Manifest.from_json(load_object(ledger.store.get_verified(b), "manifest"))
        found.append((b, r.index, r.predicate, manifest))
    # (2)
    sealed = [(b, p.sealed) for b, _i, p, _m in found if p.sealed is not None]
    keys: dict[str, bytes] = {}
    if sealed:
        if unsealer is None:
            raise PolicyError(
                f"suite {suite[:19]}…: {len(sealed)} batch(es) are sealed to the evaluators' "
                "encryption keys; only an evaluator holding one can read them (give "
                "--evaluator-key KEY: the name of an evaluator's X25519 key it is sealed to)"
            )
        for b, s in sealed:
            if unsealer.key.keyid not in {k for k, _ in s.recipients}:
                raise PolicyError(
                    f"batch {b[:19]}… of suite {suite[:19]}…: not sealed to encryption key "
                    f"{unsealer.key.keyid[:16]}… (sealed to "
                    f"{', '.join(k[:16] + '…' for k, _ in s.recipients)}); nothing was unsealed"
                )
        log_unsealing(ledger, suite, [b for b, _ in sealed], unsealer, purpose)
        keys = {b: unwrap_key(s, b, unsealer.key, unsealer.private) for b, s in sealed}
    # (3)
    out = []
    for b, index, pred, manifest in found:
        files: dict[str, bytes] = {}
        for f in manifest.files:
            if pred.sealed is not None:
                files[f.path] = open_file(ledger.store, keys[b], f.path, pred.sealed.files[f.path],
                                          (f.digest, f.size))
                continue
            data = ledger.store.get(f.digest, size=f.size)
            got = digest_bytes(data)
            if got != f.digest:
                raise DigestMismatchError(f"{f.path} of batch {b[:19]}…: hashes to {got[:19]}…",
                                          subject=f.path, expected=f.digest, observed=got)
            files[f.path] = data
        # (4)
        if pred.sealed is not None:
            _check_fingerprints(b, pred, files)
        out.append(SuiteBatch(b, index, pred, files))
    return out


def log_unsealing(
    ledger: LedgerHome, suite: str, batches: Sequence[str], unsealer: Unsealer, purpose: str
) -> Recorded:
    """Record that ``unsealer`` opens ``batches`` of ``suite`` for ``purpose`` (before it
    does), as a record of its own (one identical in the same second: at the next second, rev40
    finding 2); it is added to ``unsealer.logged``."""
    from .record import record_statement
    from .same_second import recorded_anew

    def record(when: str) -> Recorded:
        body = Unsealing(tuple(sorted(batches)), unsealer.key.keyid, purpose, when)
        return record_statement(ledger, f"unsealing of {suite[:19]}…", suite,
                                predicates.UNSEALING, body.written(), unsealer.signer)

    unsealer.logged.append(recorded_anew(record, now))
    return unsealer.logged[-1]


def _check_fingerprints(batch: str, pred: RolloutBatch, files: Mapping[str, bytes]) -> None:
    import base64

    import numpy as np

    from .episode_features import FEATURE_VERSION
    from .sealing import fingerprints

    assert pred.sealed is not None
    if pred.sealed.feature_version != FEATURE_VERSION:
        # Fingerprints of other feature definitions cannot be recomputed here; nor can they
        # mislead the gate, which does not compare them (the batch is "cannot be checked").
        return
    published = pred.sealed.episodes
    got = fingerprints(files["steps.parquet"]) if "steps.parquet" in files else ()
    problems = []
    if [(e.episode_id, e.steps, e.modality, e.fingerprint) for e in got] != [
        (e.episode_id, e.steps, e.modality, e.fingerprint) for e in published
    ]:
        problems.append("episode ids, lengths or exact fingerprints differ")
    for mine, theirs in zip(got, published, strict=False):
        if theirs.normalised is not None and theirs.normalised != mine.normalised:
            problems.append(f"episode {mine.episode_id}: its normalised fingerprint differs")
        if (mine.sketch is None) != (theirs.sketch is None):
            problems.append(f"episode {mine.episode_id}: a sketch is missing")
        elif mine.sketch is not None and theirs.sketch is not None:
            a = np.frombuffer(base64.b64decode(mine.sketch), dtype="<f4")
            b = np.frombuffer(base64.b64decode(theirs.sketch), dtype="<f4")
            if float(a @ b) < SKETCH_AGREEMENT:
                problems.append(f"episode {mine.episode_id}: its sketch differs")
    if problems:
        raise DigestMismatchError(
            f"sealed batch {batch[:19]}…: the fingerprints its record publishes are not those "
            f"of its data ({'; '.join(problems[:3])}): the gate's holdout check was misled",
            subject=batch,
        )


FAILED_IN = "trajledger.failed_in"
"""The ``extras`` key each episode of a suite of failures carries: the evaluation it failed in,
as a JSON string (so the new batch is never the old one again, even when every episode
failed)."""


def _marked(episodes: pa.Table, evaluation: str) -> pa.Table:
    """``episodes`` with ``extras[FAILED_IN] = evaluation`` on every row."""
    import pyarrow as pa

    column = episodes.schema.get_field_index("extras")
    old = (episodes.column("extras").to_pylist() if column >= 0
           else [None] * episodes.num_rows)
    mark = json.dumps(evaluation)  # extras values are JSON text
    merged = [[*(kv for kv in (o or []) if kv[0] != FAILED_IN), (FAILED_IN, mark)] for o in old]
    array = pa.array(merged, type=pa.map_(pa.string(), pa.string()))
    if column >= 0:
        return episodes.set_column(column, episodes.schema.field("extras"), array.cast(
            episodes.schema.field("extras").type))
    return episodes.append_column("extras", array)


def suite_from_failures(
    ledger: LedgerHome,
    evaluation: str,
    name: str,
    version: str,
    signer: Signer,
    *,
    unsealer: Unsealer | None = None,
    split: str = "regression",
    extra_batches: Sequence[str] = (),
    on_warning: Callable[[str], None] | None = None,
) -> tuple[Recorded, list[str]]:
    """Record a regression suite of the failed episodes of ``evaluation``; ``on_warning`` is
    given each line to show the user (a batch sealed again whose published sketches give its
    episodes back, `sealing.sparse_sketches`; what `artifacts.create_dataset` noticed: kept
    features computed again, duplicates, near duplicates across splits).

    Steps:
        1. Verify the evaluation and its lineage under the policy in force; it must have
           failed tests.
        2. Read its suite (opening sealed batches as `read_suite` does, logged).
        3. For each batch with failed episodes: record a batch of exactly those episodes'
           steps and episode rows (each with ``extras[FAILED_IN]``: the evaluation; same
           environment, policy version and evaluator; the evaluation as ``failuresOf``),
           sealed to the policy's evaluator encryption keys when the original was sealed.
        4. Record the dataset ``name@version`` (``split``) of those batches and
           ``extra_batches``.

    Returns:
        The dataset record and the new batches' digests.

    Raises:
        VerificationError: the evaluation's lineage does not verify.
        FormatError: the evaluation has no failed episode.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from trajledger.verify.errors import VerificationError
    from trajledger.verify.lineage import LineageVerifier, Record
    from trajledger.verify.other_predicates import Evaluation, split_test_name

    from .artifacts import create_dataset, record_batch
    from .catalog import Catalog
    from .evidence import ledger_evidence
    from .policy_state import load_policy
    from .rollouts.parquet_read import read_parquet

    # (1)
    if split not in predicates.HELD_OUT:
        raise FormatError(f"--split {split}: a suite of failures is a holdout or regression "
                          "dataset, never trained on")
    item = Catalog(ledger).resolve(evaluation, {"evaluation"})
    policy = load_policy(ledger, None)[0]
    verifier = LineageVerifier(ledger_evidence(ledger), policy, index=ledger.trust_state())
    report = verifier.verify(item.digest)
    if not report.ok:
        raise VerificationError(f"evaluation {item.ref}: does not verify; nothing recorded\n"
                                + "\n".join(report.failures()))
    rec = verifier.identity_record(item.digest, "evaluation")
    assert isinstance(rec, Record) and isinstance(rec.predicate, Evaluation)
    ev = rec.predicate
    failed: dict[str, set[str]] = {}
    for t in ev.failed_tests:
        b, e = split_test_name(t)
        failed.setdefault(b, set()).add(e)
    if not failed:
        raise FormatError(f"evaluation {item.ref}: every episode passed; no failure to keep")
    # (2)
    suite = read_suite(ledger, verifier, ev.suite.digest, unsealer=unsealer,
                       purpose=f"regression suite {name}@{version} from the failures of "
                       f"{item.ref}")
    recipients = policy.role("evaluator").encryption_keys
    # (3)
    made: list[str] = []
    at: list[int] = []
    try:
        for sb in suite:
            keep = sorted(failed.get(sb.digest, ()))
            if not keep:
                continue
            steps, episodes = (read_parquet(sb.files[f"{p}.parquet"], name=(
                f"{p}.parquet of suite batch {sb.digest[:19]}…")) for p in ("steps", "episodes"))
            absent = set(keep) - set(episodes.column("episode_id").to_pylist())
            if absent:
                raise FormatError(f"evaluation {item.ref}: failed episode "
                                  f"{sorted(absent)[0]!r} is not in batch {sb.digest[:19]}… of "
                                  "its suite")
            wanted = pa.array(keep, pa.string())
            p = sb.predicate
            result = record_batch(
                ledger,
                steps.filter(pc.is_in(steps.column("episode_id"), wanted)),
                episodes=_marked(episodes.filter(pc.is_in(episodes.column("episode_id"),
                                                          wanted)), item.digest),
                env=p.environment.digest, policy=p.policy_version, signer=signer,
                evaluator=p.evaluator.digest if p.evaluator else None,
                name=(f"failures-of-{ev.checkpoint.name}@{ev.checkpoint.version}-"
                      f"{sb.digest[7:19]}"),
                generator="trajledger dataset create --from-failures",
                consent=p.consent, licence=p.licence, retention=p.retention,
                seal_to=recipients if p.sealed is not None else None,
                failures_of=item.digest,
            )
            made.append(result.digest)
            at.append(result.recorded.index)
            if on_warning is not None:
                for line in result.warnings:
                    on_warning(line)
        # (4)
        ds = create_dataset(ledger, name, version, split, [*made, *extra_batches], signer)
        for line in (*ds.warnings, *ds.duplicate_episodes, *ds.near_duplicates):
            if on_warning is not None:  # (what it noticed: said as `dataset create` says it)
                on_warning(line)
    except Exception as e:  # after an append, the line says what is recorded (fault28)
        if not made or isinstance(e, VerificationError) or not (
                isinstance(e, (LedgerError, OSError)) or disk_error(e)):
            raise
        raise LedgerError(
            f"dataset {name}@{version}: its {len(made)} new batch(es) of failures are recorded "
            f"(log indices {', '.join(map(str, at))}), but then it stopped: {e}; run it again: "
            "it records what is not done") from e
    return ds.recorded, made
