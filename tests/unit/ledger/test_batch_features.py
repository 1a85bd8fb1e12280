"""Episode features kept with each rollout batch (ledger/batch_features.py, issue 21 item 1).

- Recording keeps, beside the batch, the features of exactly the stored steps: the signed
  predicate names the file's digest, size and version; the file holds what is computed again
  from the stored step file, bit for bit, and the fingerprints `rollouts.dedup` gives.
- The features file refuses another step file, another version, other columns and garbage.
- Recording the same rollouts again keeps the first record, with its features (or without, as
  an older writer recorded them).
- A kept file swapped or deleted by whoever writes the ledger directory is detected (it does
  not hash to the digest the signed record names): the features are computed from the steps
  instead, with a warning, and give the same answers; fsck reports a damaged one.
- An erasure deletes the kept file and the cached copy; nothing about the erased episodes is
  reported afterwards.
- Batches recorded before features were kept (the 0.1.0 fixtures) are compared from their
  steps, the features cached in the derived index, with the same answers as the gate's.
- A sealed batch keeps no features file: it publishes, in its record, exactly the features
  recording computed (version, dimensions, bytes); dataset create, the gate and the audit
  index compare it by them, without a key; another version's are not compared; an erasure
  deletes its ciphertexts and any cached features, and its fingerprints are compared no more.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajledger import Ledger
from trajledger.ledger import artifacts
from trajledger.ledger.artifacts import (
    batch_files,
    create_dataset,
    record_batch,
    register_environment,
)
from trajledger.ledger.batch_features import (
    FEATURES_SCHEMA,
    METADATA_KEY,
    ROWS_PER_BATCH,
    batch_features,
    batch_predicate,
    cache_path,
    decode_features,
    encode_features,
    feature_columns,
)
from trajledger.ledger.catalog import Catalog
from trajledger.ledger.contamination import check_dataset, verified_contamination
from trajledger.ledger.episode_features import (
    FEATURE_COLUMNS,
    FEATURE_VERSION,
    FeatureChunk,
    iter_step_features,
    parquet_batches,
)
from trajledger.ledger.fsck import fsck
from trajledger.ledger.keys import Signer
from trajledger.ledger.rollouts.dedup import episode_fingerprints
from trajledger.ledger.status import erase
from trajledger.ledger.window_cache import WINDOWS_VERSION, cache_file
from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import FormatError, PolicyError
from trajledger.verify.predicates import RolloutBatch
from trajledger.verify.statement import Statement

COMPAT = Path(__file__).resolve().parents[2] / "fixtures" / "compat-0.1.0" / "ledger"


@pytest.fixture
def ledger(home: Path) -> Ledger:
    return Ledger.open(home)


@pytest.fixture
def alice(ledger: Ledger) -> Signer:
    signer = ledger.keys.create("alice", encrypt=False)
    register_environment(ledger, "grid", "1", signer)
    return signer


def walk(seed: int, steps: int) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).normal(size=(steps, 4)), axis=0)


def numeric(episode: str, seed: int, steps: int = 30, noise: float = 0.0) -> list[dict[str, Any]]:
    obs = walk(seed, steps) + np.random.default_rng(seed + 99).normal(0, noise, (steps, 4))
    return [
        {"episode_id": episode, "step": t, "obs": [float(v) for v in obs[t]],
         "action": [float(t % 2)], "reward": 1.0, "terminated": t == steps - 1,
         "truncated": False}
        for t in range(steps)
    ]  # fmt: skip


def chat(episode: str, prompt: str, answer: str = "ok") -> list[dict[str, Any]]:
    return [
        {"episode_id": episode, "step": 0, "role": "user", "content": prompt, "reward": 0.0,
         "terminated": False, "truncated": False},
        {"episode_id": episode, "step": 1, "role": "assistant", "content": answer,
         "reward": 1.0, "terminated": True, "truncated": False},
    ]  # fmt: skip


def record(ledger: Ledger, alice: Signer, rows: list[dict[str, Any]], name: str) -> str:
    return record_batch(ledger, rows, env="grid@1", policy="p", signer=alice, name=name).digest


def kept_path(ledger: Ledger, batch: str) -> Path:
    item = Catalog(ledger).resolve(batch, {"rollout-batch"})
    pred = batch_predicate(ledger.store, item.envelope)
    assert pred is not None and pred.features is not None
    return ledger.store.path_of(pred.features.digest)


def reread(ledger: Ledger, batch: str) -> tuple[str, FeatureChunk]:
    steps = batch_files(ledger, batch)["steps.parquet"]
    chunks = list(iter_step_features(parquet_batches(ledger.store.path_of(steps),
                                                     FEATURE_COLUMNS)))
    return steps, FeatureChunk.concat(chunks)


def same(a: FeatureChunk, b: FeatureChunk) -> bool:
    return (
        a.episode_ids == b.episode_ids and a.fingerprints == b.fingerprints
        and a.modality == b.modality and a.safety == b.safety
        and np.array_equal(a.num_steps, b.num_steps) and np.array_equal(a.valid, b.valid)
        and np.array_equal(a.vectors, b.vectors)
    )  # fmt: skip


# --------------------------------------------------------------------------------------------


def test_recording_keeps_the_features_of_the_stored_steps(ledger: Ledger, alice: Signer) -> None:
    rows = numeric("n0", 1) + numeric("n1", 2, steps=300) + chat("c0", "what is two plus two")
    batch = record(ledger, alice, rows, "mixed")
    item = Catalog(ledger).resolve(batch, {"rollout-batch"})
    pred = batch_predicate(ledger.store, item.envelope)
    assert pred is not None and pred.features is not None
    ref = pred.features
    assert ref.version == FEATURE_VERSION
    data = ledger.store.get_verified(ref.digest)  # stored, and hashes to the signed digest
    assert len(data) == ref.size
    steps, again = reread(ledger, batch)
    kept = decode_features(data, steps)
    assert same(kept, again) and kept.modality == ["numeric", "numeric", "text"]
    assert data == encode_features(again, steps)
    stored = pq.read_table(ledger.store.path_of(steps))
    assert dict(zip(kept.episode_ids, kept.fingerprints, strict=True)) == episode_fingerprints(
        stored
    )
    # Not in the manifest: the batch digest names the rollouts alone.
    assert sorted(batch_files(ledger, batch)) == ["episodes.parquet", "steps.parquet"]
    found = batch_features(ledger.store, batch, pred, workdir=ledger.root)
    assert found.source == "recorded" and found.problems == () and same(found.chunk, again)


def test_the_features_file_refuses_what_it_does_not_describe() -> None:
    t = pa.Table.from_pylist(numeric("a", 3) + numeric("b", 4))
    chunk = FeatureChunk.concat(list(iter_step_features([t])))
    steps, other = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    data = encode_features(chunk, steps)
    assert same(decode_features(data, steps), chunk)
    with pytest.raises(FormatError, match=r"^features file: computed from step file sha256:2222"):
        decode_features(encode_features(chunk, other), steps)
    with pytest.raises(FormatError, match=r"^features file: not an Arrow IPC file"):
        decode_features(b"garbage" * 10, steps)

    def written(schema: pa.Schema, table: pa.Table) -> bytes:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, schema) as w:
            w.write_table(table)
        return bytes(sink.getvalue().to_pybytes())

    good = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    meta = json.loads(good.schema.metadata[METADATA_KEY])
    older = {METADATA_KEY: json.dumps({**meta, "version": FEATURE_VERSION - 1}).encode()}
    with pytest.raises(FormatError, match=rf"feature version {FEATURE_VERSION - 1}, want"):
        decode_features(written(FEATURES_SCHEMA.with_metadata(older), good), steps)
    with pytest.raises(FormatError, match=r"no trajledger\.features metadata"):
        decode_features(written(FEATURES_SCHEMA, good.replace_schema_metadata()), steps)
    # rev29 (seventeenth round): a features file is a producer's (a vendor's, signed, taken in
    # by an import); metadata nested past Python's recursion limit is no metadata (on main:
    # RecursionError through `batch_features`, the index update and ``dataset create``).
    for deep in (b"[" * 100_000, b'{"a":' * 100_000):
        with pytest.raises(FormatError, match=r"no trajledger\.features metadata"):
            decode_features(written(FEATURES_SCHEMA.with_metadata({METADATA_KEY: deep}), good),
                            steps)
    fewer = {METADATA_KEY: json.dumps({**meta, "episodes": 1}).encode()}
    with pytest.raises(FormatError, match=r"2 rows of .*want 1 rows"):
        decode_features(written(FEATURES_SCHEMA.with_metadata(fewer), good), steps)
    bad = good.set_column(4, "vector", pa.FixedSizeListArray.from_arrays(
        pa.array(np.full(2 * 128, np.nan, np.float32)), 128))  # fmt: skip
    with pytest.raises(FormatError, match="not finite"):
        decode_features(written(bad.schema.with_metadata(good.schema.metadata), bad), steps)


def test_a_features_file_is_refused_alike_read_whole_or_by_columns(tmp_path: Path) -> None:
    """`feature_columns` (the file this ledger has just written, read by two columns) checks
    its header with `decode_features`' one check: each file it does not describe is refused
    by both with the same line (chat42: the check was a near copy, with a line of its own)."""
    t = pa.Table.from_pylist(numeric("a", 3) + numeric("b", 4))
    chunk = FeatureChunk.concat(list(iter_step_features([t])))
    steps = "sha256:" + "1" * 64
    good = pa.ipc.open_file(pa.BufferReader(encode_features(chunk, steps))).read_all()
    meta = json.loads(good.schema.metadata[METADATA_KEY])

    def forged(**changed: Any) -> dict[bytes, bytes]:
        return {METADATA_KEY: json.dumps({**meta, **changed}).encode()}

    renamed = good.rename_columns([*good.column_names[:-1], "safety"])
    for schema, table in (
        (FEATURES_SCHEMA.with_metadata(forged(steps="sha256:" + "2" * 64)), good),
        (FEATURES_SCHEMA.with_metadata(forged(version=FEATURE_VERSION - 1)), good),
        (FEATURES_SCHEMA, good.replace_schema_metadata()),
        (FEATURES_SCHEMA.with_metadata({METADATA_KEY: b"[" * 100_000}), good),
        (renamed.schema.with_metadata(forged()), renamed),
    ):
        path = tmp_path / "features.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as w:
            w.write_table(table.replace_schema_metadata(schema.metadata))
        with pytest.raises(FormatError) as whole:
            decode_features(path.read_bytes(), steps)
        with pytest.raises(FormatError) as columns:
            list(feature_columns(path, steps, ("modality", "num_steps")))
        assert str(columns.value) == str(whole.value)


def test_reading_a_features_file_does_not_import_pandas(tmp_path: Path) -> None:
    """pyarrow's ``to_numpy`` imports pandas the first time it runs (0.25 s of a 10-batch
    ``dataset create``, cache24): a features file is read from its buffers, with the same
    values, over several record batches, vectors missing among them, and an element missing
    in a vector still refused."""
    import subprocess
    import sys

    n = ROWS_PER_BATCH + 7
    rng = np.random.default_rng(4)
    valid = rng.random(n) > 0.2
    vectors = rng.normal(size=(n, 128)).astype(np.float32) * valid[:, None]
    chunk = FeatureChunk([f"e{i}" for i in range(n)], np.arange(1, n + 1, dtype=np.int64),
                         [f"{i:064x}" for i in range(n)], ["numeric"] * n, vectors, valid,
                         [None] * n)
    steps = "sha256:" + "3" * 64
    path = tmp_path / "features.arrow"
    path.write_bytes(encode_features(chunk, steps))
    assert same(decode_features(path.read_bytes(), steps), chunk)
    code = ("import sys\nfrom pathlib import Path\n"
            "from trajledger.ledger.batch_features import decode_features\n"
            f"c = decode_features(Path({str(path)!r}).read_bytes(), {steps!r})\n"
            "print(len(c), int(c.valid.sum()), int(c.num_steps.sum()), 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [str(n), str(int(valid.sum())), str(n * (n + 1) // 2), "False"]
    table = pa.ipc.open_file(pa.BufferReader(path.read_bytes())).read_all()
    child = pa.array(np.ones(2 * 128, np.float32), mask=np.arange(2 * 128) == 5)
    holed = table.slice(0, 2).set_column(4, "vector",
                                         pa.FixedSizeListArray.from_arrays(child, 128))
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, FEATURES_SCHEMA.with_metadata(
            {METADATA_KEY: json.dumps({**meta, "episodes": 2}).encode()})) as w:
        w.write_table(holed)
    with pytest.raises(FormatError, match="not finite"):
        decode_features(sink.getvalue().to_pybytes(), steps)


def test_a_features_file_declaring_a_decompression_bomb_is_refused_unread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A vendor's features file is read whole; a zstd batch declaring far more than it holds
    is refused from its declared sizes (``rollouts.ipc_read``), with the limit lowered here."""
    from trajledger.ledger.rollouts import ipc_read

    monkeypatch.setattr(ipc_read, "MAX_PAGE_BYTES", 1 << 20)
    sink = pa.BufferOutputStream()
    zeros = pa.table({"vector": pa.array(np.zeros(1 << 19))})
    with pa.ipc.new_file(sink, zeros.schema,
                         options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(zeros)
    with pytest.raises(FormatError, match=r"^features file: a record batch of .*bomb"):
        decode_features(sink.getvalue().to_pybytes(), "sha256:" + "1" * 64)


def test_recording_again_keeps_the_first_record(
    ledger: Ledger, alice: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = record_batch(ledger, numeric("a", 1), env="grid@1", policy="p", signer=alice)
    again = record_batch(ledger, numeric("a", 1), env="grid@1", policy="p", signer=alice)
    assert again.recorded == dataclasses.replace(first.recorded, new=False)
    # Rollouts recorded by an older writer, without kept features: recording them again is the
    # same record too (the features are derived data, not metadata).
    with monkeypatch.context() as m:
        m.setattr(artifacts, "FeaturesRef", lambda *a: None)
        old = record_batch(ledger, numeric("b", 2), env="grid@1", policy="p", signer=alice)
    item = Catalog(ledger).resolve(old.digest, {"rollout-batch"})
    pred = batch_predicate(ledger.store, item.envelope)
    assert pred is not None and pred.features is None
    size = ledger.log.size
    assert record_batch(ledger, numeric("b", 2), env="grid@1", policy="p",
                        signer=alice).recorded == dataclasses.replace(old.recorded, new=False)
    assert ledger.log.size == size
    # Other metadata is still refused, whatever the features.
    with pytest.raises(PolicyError, match=r"with other metadata \(licence\)"):
        record_batch(ledger, numeric("a", 1), env="grid@1", policy="p", signer=alice,
                     licence="MIT")  # fmt: skip


def test_a_swapped_kept_file_is_detected_and_changes_no_answer(
    ledger: Ledger, alice: Signer
) -> None:
    train = record(ledger, alice, numeric("a0", 1) + numeric("a1", 2), "train")
    hold = record(ledger, alice, numeric("h0", 1) + numeric("h1", 2, noise=1e-4), "hold")
    create_dataset(ledger, "t", "1", "train", [train], alice)
    before = check_dataset(ledger, "holdout", [hold])
    assert {(f.kind, f.other_episode) for f in before.findings} == {("exact", "h0"),
                                                                     ("near", "h1")}
    # Whoever writes the ledger directory puts another batch's features file in its place.
    target = kept_path(ledger, hold)
    digest = "sha256:" + target.name
    target.chmod(0o644)
    target.write_bytes(kept_path(ledger, train).read_bytes())
    after = check_dataset(ledger, "holdout", [hold])
    assert after.findings == before.findings and after.duplicates == before.duplicates
    assert after.sources[hold] == "computed"
    (warning,) = after.warnings
    assert warning.startswith(f"batch {hold[:19]}…: its recorded features file ")
    assert "hashes to" in warning and "computed from its steps.parquet" in warning
    report = fsck(ledger)
    assert not report.ok and list(report.damaged) == [digest]
    # The computed features are cached (derived data): the next check reads the cache.
    assert check_dataset(ledger, "holdout", [hold]).sources[hold] == "cache"


def test_the_first_features_file_of_a_version_drops_the_other_versions(
    ledger: Ledger, alice: Signer, tmp_path: Path
) -> None:
    """Review left33, finding 5 (the lead's Left, seventeenth round): a new `FEATURE_VERSION`
    left every batch's cached features of the version before (``index/features/v<N>/``) for
    good, as `WINDOWS_VERSION` left ``w<N>`` until the lead's sweep. The first features file
    cached under a version deletes the other ``v<N>`` directories, by the one rule the windows
    use (`fs.drop_other_versions`); the windows' ``w<N>``, other names, files, a link and what
    it points at stay."""
    cache, outside = ledger.root / "index" / "features", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.arrow").write_bytes(b"not ours")
    for old in (f"v{FEATURE_VERSION - 1}", "v0", f"w{WINDOWS_VERSION}"):
        (cache / old).mkdir(parents=True)
        (cache / old / f"{'ab' * 32}.arrow").write_bytes(b"stale")
    (cache / "vault").mkdir()
    (cache / "v9.txt").write_bytes(b"a file")
    (cache / "v7").symlink_to(outside)
    train = record(ledger, alice, numeric("a0", 1), "train")
    hold = record(ledger, alice, numeric("h0", 1), "hold")
    create_dataset(ledger, "t", "1", "train", [train], alice)
    kept_path(ledger, hold).unlink()  # so the check computes and caches them
    assert check_dataset(ledger, "holdout", [hold]).sources[hold] == "computed"
    names = sorted(p.name for p in cache.iterdir())
    assert [n for n in names if n.startswith("v")] == sorted(
        ["v7", f"v{FEATURE_VERSION}", "v9.txt", "vault"]), names
    assert (cache / f"w{WINDOWS_VERSION}" / f"{'ab' * 32}.arrow").exists()
    assert (outside / "keep.arrow").read_bytes() == b"not ours"
    assert check_dataset(ledger, "holdout", [hold]).sources[hold] == "cache"


def test_an_erasure_deletes_the_kept_features_and_their_cache(
    ledger: Ledger, alice: Signer
) -> None:
    train = record(ledger, alice, numeric("a0", 1), "train")
    hold = record(ledger, alice, numeric("h0", 1), "hold")
    create_dataset(ledger, "t", "1", "train", [train], alice)
    kept = kept_path(ledger, hold)
    kept.unlink()  # so the check computes and caches them
    assert check_dataset(ledger, "holdout", [hold]).sources[hold] == "computed"
    steps = batch_files(ledger, hold)["steps.parquet"]
    cached = cache_path(ledger.root / "index" / "features", steps)
    windows = cache_file(ledger.root / "index" / "features", steps)  # its runs of steps
    assert cached.exists() and windows.exists()
    item = Catalog(ledger).resolve(hold, {"rollout-batch"})
    pred = batch_predicate(ledger.store, item.envelope)
    assert pred is not None and pred.features is not None
    rec, _deleted, _kept = erase(ledger, hold, alice, reason="consent")
    assert not cached.exists() and not ledger.store.exists(pred.features.digest)
    assert not windows.exists()  # (before cache24: kept after the erasure)
    # The erasure record lists the kept file among the blobs it deleted.
    envelope = Envelope.from_bytes(ledger.store.get(rec.envelope_digest))
    assert pred.features.digest in Statement.from_bytes(envelope.payload).predicate["blobs"]
    check = check_dataset(ledger, "holdout", [hold])
    assert check.findings == () and check.warnings == ()  # erased: silently not compared


def test_batches_recorded_before_features_were_kept(tmp_path: Path) -> None:
    # The 0.1.0 quickstart ledger: no kept features. Compared from the steps, then the cache.
    shutil.copytree(COMPAT, tmp_path / "ledger")
    ledger = Ledger.open(tmp_path / "ledger")
    items = Catalog(ledger).items()
    batches = sorted(i.digest for i in items if i.kind == "rollout-batch")
    holdout = [i.digest for i in items if i.name == "cartpole-holdout"]
    train = [b for b in batches if b not in holdout]
    first = check_dataset(ledger, "train", train)
    assert set(first.sources.values()) == {"computed"} and first.warnings == ()
    second = check_dataset(ledger, "train", train)
    assert set(second.sources.values()) == {"cache"}
    assert second.findings == first.findings and second.duplicates == first.duplicates
    # The same batches as a holdout: every episode of a train batch is found (exactly), as the
    # admission gate, reading the verified bytes, finds it.
    as_holdout = check_dataset(ledger, "holdout", train[:1])
    gate = verified_contamination(ledger.store, {b: None for b in train},
                                  {train[0]: ["holdout new@1"]})  # fmt: skip
    assert gate.unchecked == ()
    assert {(f.kind, f.train_batch, f.train_episode, f.other_episode, f.similarity)
            for f in as_holdout.findings} == {
        (f.kind, f.train_batch, f.train_episode, f.other_episode, f.similarity)
        for f in gate.findings
    }  # fmt: skip
    assert len(as_holdout.findings) > 0


# -- sealed batches (issue 22's sealed suites) ---------------------------------------------------


def sealed(ledger: Ledger, alice: Signer, rows: list[dict[str, Any]], name: str) -> str:
    key = ledger.keys.create_encryption_key("ev", encrypt=False) if not (
        ledger.root / "keys" / "x25519" / "ev.pub").exists() else ledger.keys.encryption_key("ev")
    return record_batch(ledger, rows, env="grid@1", policy="p", signer=alice, name=name,
                        seal_to=[key]).digest  # fmt: skip


def predicate_of(ledger: Ledger, batch: str) -> RolloutBatch:
    item = Catalog(ledger).resolve(batch, {"rollout-batch"})
    pred = batch_predicate(ledger.store, item.envelope)
    assert pred is not None
    return pred


def test_a_sealed_batch_publishes_its_features_and_keeps_no_file(
    ledger: Ledger, alice: Signer, tmp_path: Path
) -> None:
    """The published fingerprints are the version-3 features recording computed, bit for bit
    (the features file of the same plaintext, less its safety counts); no features file is
    named or stored, and nothing reads the (absent) plaintext steps."""
    rows = numeric("n0", 1) + numeric("n1", 2, steps=300) + chat("c0", "what is two plus two")
    batch = sealed(ledger, alice, rows, "held")
    pred = predicate_of(ledger, batch)
    assert pred.features is None and pred.sealed is not None
    assert pred.sealed.feature_version == FEATURE_VERSION
    # The same plaintext recorded in the clear in another ledger: its kept features file.
    Ledger.init(tmp_path / "twin", origin="test/twin")
    twin = Ledger.open(tmp_path / "twin")
    bob = twin.keys.create("bob", encrypt=False)
    register_environment(twin, "grid", "1", bob)
    plain = record_batch(twin, rows, env="grid@1", policy="p", signer=bob, name="held").digest
    assert plain == batch  # the same manifest: the batch digest names the plaintext
    kept = predicate_of(twin, plain).features
    assert kept is not None and not ledger.store.exists(kept.digest)
    steps, want = reread(twin, plain)
    found = batch_features(ledger.store, batch, pred, workdir=tmp_path,
                           cache=ledger.root / "index" / "features")  # fmt: skip
    assert found.source == "sealed" and found.problems == () and found.chunk is not None
    no_safety = FeatureChunk(want.episode_ids, want.num_steps, want.fingerprints, want.modality,
                             want.vectors, want.valid, [None] * len(want))  # fmt: skip
    assert encode_features(found.chunk, steps) == encode_features(no_safety, steps)
    assert not (ledger.root / "index" / "features").exists()  # nothing cached, nothing read
    # The verifier and the schema refuse a sealed batch naming a features file.
    body = {**pred.to_predicate(), "features": kept.to_json()}
    with pytest.raises(FormatError, match="a sealed batch has no features file"):
        RolloutBatch.from_predicate(body)


def test_duplicates_of_a_sealed_holdout_are_found_from_its_published_fingerprints(
    ledger: Ledger, alice: Signer, tmp_path: Path
) -> None:
    """dataset create (check_dataset), the gate (verified_contamination) and the audit index
    compare a sealed batch by its published fingerprints: exact and near duplicates, no key."""
    from trajledger.ledger.index import Index

    # h1: a copy with noise, cosine 0.9997: near (at 1e-4 it is 1.0000, equal: an exact
    # duplicate of a sealed episode since seal46, tests/unit/ledger/test_sealed_copies.py)
    hold = sealed(ledger, alice, numeric("h0", 1) + numeric("h1", 2, noise=0.1), "hold")
    create_dataset(ledger, "h", "1", "holdout", [hold], alice)
    train = record(ledger, alice, numeric("a0", 1) + numeric("a1", 2) + numeric("a2", 9), "t")
    check = check_dataset(ledger, "train", [train])
    assert {(f.kind, f.other_episode, f.train_episode) for f in check.findings} == {
        ("exact", "h0", "a0"), ("near", "h1", "a1")}
    assert check.sources[hold] == "sealed" and check.warnings == ()
    with pytest.raises(PolicyError, match="exactly duplicate episodes of the other split"):
        create_dataset(ledger, "t", "1", "train", [train], alice)
    pred = predicate_of(ledger, hold)
    assert pred.sealed is not None
    gate = verified_contamination(ledger.store, {train: None}, {hold: ["holdout h@1"]},
                                  sealed={hold: pred.sealed})  # fmt: skip
    assert gate.unchecked == ()
    assert {(f.kind, f.other_episode, f.similarity) for f in gate.findings} == {
        (f.kind, f.other_episode, f.similarity) for f in check.findings}
    # Published with other feature definitions: not compared, and said so.
    other = dataclasses.replace(pred.sealed, feature_version=FEATURE_VERSION + 1)
    gate = verified_contamination(ledger.store, {train: None}, {hold: ["holdout h@1"]},
                                  sealed={hold: other})  # fmt: skip
    (line,) = gate.unchecked
    assert line.startswith(f"holdout/regression batch {hold[:19]}…: its published fingerprints "
                           f"are of feature version {FEATURE_VERSION + 1}")
    # The audit index: rows from the published fingerprints, status 'sealed'.
    index = Index(ledger)
    index.index_batches([hold])
    row = index.artifact(hold, "rollout-batch")
    assert row is not None and row["data"] == "sealed" and row["episodes_indexed"] == 2
    eps = index.query("episodes", columns=["episode_id", "num_steps", "fingerprint", "vector"],
                      batches=[hold]).sort_by("episode_id")  # fmt: skip
    published = {e.episode_id: e for e in pred.sealed.episodes}
    assert eps.column("episode_id").to_pylist() == ["h0", "h1"]
    for r in eps.to_pylist():
        e = published[r["episode_id"]]
        assert (r["num_steps"], r["fingerprint"]) == (e.steps, e.fingerprint)
        assert e.sketch is not None
        assert np.array(r["vector"], dtype="<f4").tobytes() == base64.b64decode(e.sketch)


def test_a_sealed_holdout_publishes_normalised_text_fingerprints(
    ledger: Ledger, alice: Signer
) -> None:
    """A sealed held-out chat publishes its normalised text fingerprint (holdout23; before,
    none: a train copy in upper case with other white space was only a near duplicate,
    recorded and admitted). ``dataset create`` and the gate refuse such a copy; a sealed
    record of before (no ``normalised``) is still read and compared as it was."""
    prompt = "Please translate the following sentence into French: the cat sat on the mat"
    hold = sealed(ledger, alice, chat("h0", prompt), "hold")
    create_dataset(ledger, "h", "1", "holdout", [hold], alice)
    pred = predicate_of(ledger, hold)
    assert pred.sealed is not None
    [episode] = pred.sealed.episodes
    assert episode.normalised is not None and len(episode.normalised) == 64
    train = record(ledger, alice, chat("t0", "  " + prompt.upper().replace(" ", " \n ")), "t")
    check = check_dataset(ledger, "train", [train])
    assert [(f.kind, f.normalised, f.other_episode) for f in check.findings] == [
        ("exact", True, "h0")]
    with pytest.raises(PolicyError, match="once text is normalised"):
        create_dataset(ledger, "t", "1", "train", [train], alice)
    gate = verified_contamination(ledger.store, {train: None}, {hold: ["holdout h@1"]},
                                  sealed={hold: pred.sealed})  # fmt: skip
    assert [(f.kind, f.normalised) for f in gate.findings] == [("exact", True)]
    old = dataclasses.replace(pred.sealed, episodes=(dataclasses.replace(episode,
                                                                        normalised=None),))
    assert "normalised" not in old.to_json()["episodes"][0]
    gate = verified_contamination(ledger.store, {train: None}, {hold: ["holdout h@1"]},
                                  sealed={hold: old})  # fmt: skip
    assert gate.unchecked == () and [f.kind for f in gate.findings] == ["near"]


def test_an_erasure_of_a_sealed_batch_deletes_its_ciphertexts_and_any_cache(
    ledger: Ledger, alice: Signer
) -> None:
    hold = sealed(ledger, alice, numeric("h0", 1), "hold")
    create_dataset(ledger, "h", "1", "holdout", [hold], alice)
    pred = predicate_of(ledger, hold)
    assert pred.sealed is not None
    ciphertexts = sorted(d for d, _n in pred.sealed.files.values())
    assert all(ledger.store.exists(d) for d in ciphertexts)
    # A cached copy of the plaintext's features (as a reader of the same steps made public
    # elsewhere would leave): erased with the batch.
    steps = batch_files(ledger, hold)["steps.parquet"]
    cached = cache_path(ledger.root / "index" / "features", steps)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"derived")
    rec, deleted, _kept = erase(ledger, hold, alice, reason="consent")
    assert deleted == len(ciphertexts) and not cached.exists()
    assert not any(ledger.store.exists(d) for d in ciphertexts)
    envelope = Envelope.from_bytes(ledger.store.get(rec.envelope_digest))
    assert set(ciphertexts) <= set(Statement.from_bytes(envelope.payload).predicate["blobs"])
    # Its published fingerprints stay in the signed record, but nothing compares them now.
    train = record(ledger, alice, numeric("a0", 1), "t")
    check = check_dataset(ledger, "train", [train])
    assert check.findings == () and check.warnings == ()
