"""Review redo20: what leaves in a plain format, and what ``stats`` says, of a lineage that
fails verification.

Finding 1: ``export --format sigstore|model-signing|minari|parquet|jsonl`` refused a revoked
lineage (rev4) but wrote one that fails otherwise (a record signed by a key the policy declares
compromised, approvals that no longer count), exit 0: the plain format carries no verdict, so
the recipient's own verifier (sigstore, model_signing, a data loader) took it. Now the export
refuses it as ``verify REF`` does, the same lines, exit 1, nothing written. model-signing:
tests/interop/test_model_signing.py; minari: tests/e2e/test_rollout_io_cli.py.

Finding 2: ``stats`` printed a checkpoint's figures, ``OK``, with no word that its record is
signed by a key the policy declares compromised; it warns now, as it does of a revocation.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import testkit
from test_paths_agree import (
    compromised_producer_key,
    compromised_trainer_key,
    quickstart,  # noqa: F401  (the fixture)
    quickstart_world,
    void_approval,
    withdrawn_approval,
)

CASES = {
    "trainer key compromised": (compromised_trainer_key, "checkpoint", ["sigstore"]),
    "approval no longer counts": (void_approval, "checkpoint", ["sigstore"]),
    "approval withdrawn": (withdrawn_approval, "checkpoint", ["sigstore"]),
    "producer key compromised": (compromised_producer_key, "batch",
                                 ["sigstore", "parquet", "jsonl"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_plain_export_refuses_what_verify_refuses(
    case: str, quickstart: tuple[testkit.Template[str], testkit.Template[None]],  # noqa: F811
    tmp_path: Path,
) -> None:
    w = quickstart_world(quickstart, tmp_path)
    mutate, what, formats = CASES[case]
    mutate(w)
    ref = w.checkpoint if what == "checkpoint" else w.root_batch
    verified = w.run("verify", ref)
    assert verified.exit_code == 1, verified.output
    before = testkit.snapshot(w.home)
    for fmt in formats:
        for more in ((), ("--include-revoked",)):
            out = tmp_path / f"out-{fmt}"
            r = w.run("export", ref, "--format", fmt, "--out", out, *more)
            assert r.exit_code == 1, (fmt, r.output)
            assert r.stderr == verified.stderr, (fmt, r.stderr, verified.stderr)
            assert not out.exists() and not out.with_name(out.name + ".revocations.json").exists()
            assert testkit.snapshot(w.home) == before
    if what == "checkpoint":  # the evidence bundle carries it, and says so (as before)
        r = w.run("export", ref, "--out", tmp_path / "b.tar.zst")
        assert r.exit_code == 0 and "the lineage does not verify" in r.stderr, r.output


def test_a_plain_export_of_a_lineage_that_verifies_is_written(
    quickstart: tuple[testkit.Template[str], testkit.Template[None]],  # noqa: F811
    tmp_path: Path,
) -> None:
    """The check refuses only what verify refuses: a rotated log key changes nothing."""
    w = quickstart_world(quickstart, tmp_path)
    assert w.run("log", "rotate-key").exit_code == 0
    for ref, fmt in ((w.checkpoint, "sigstore"), (w.root_batch, "parquet")):
        r = w.run("export", ref, "--format", fmt, "--out", tmp_path / f"out-{fmt}")
        assert r.exit_code == 0, r.output


def test_stats_warns_of_a_record_signed_by_a_compromised_key(
    quickstart: tuple[testkit.Template[str], testkit.Template[None]],  # noqa: F811
    tmp_path: Path,
) -> None:
    w = quickstart_world(quickstart, tmp_path)
    assert "WARNING" not in w.run("stats", w.checkpoint).stderr
    compromised_trainer_key(w)
    for args in ((), ("--json",)):
        r = w.run("stats", w.checkpoint, *args)
        assert r.exit_code == 0, r.output
        warnings = [x for x in r.stderr.splitlines() if x.startswith("WARNING: ")]
        # (its base checkpoint, log index 7, was signed by the same key: named too, out56)
        assert len(warnings) == 2, r.stderr
        assert (f"WARNING: {w.checkpoint[:19]}…: its checkpoint record (log index 12) is signed "
                "by key ") in warnings[0]
        assert ": its checkpoint record (log index 7) is signed by key " in warnings[1]
        assert ("which the policy in force declares compromised since log index 0: stolen "
                "laptop; these figures are the audit index's, not a verdict: run 'trajledger "
                "verify'") in warnings[0]


def test_a_plain_export_refuses_a_data_blob_changed_in_the_store(
    quickstart: tuple[testkit.Template[str], testkit.Template[None]],  # noqa: F811
    tmp_path: Path,
) -> None:
    """The lineage is verified as ``verify`` verifies it, data re-hashed: a blob of the
    lineage changed in place (its size kept) is refused by the Sigstore export too, although
    the bundle would carry only the envelope (the mutation harness found it accepted when the
    check compared sizes only)."""
    from test_paths_agree import flipped_blob

    w = quickstart_world(quickstart, tmp_path)
    flipped_blob(w)
    verified = w.run("verify", w.checkpoint)
    assert verified.exit_code == 1, verified.output
    for ref in (w.checkpoint, w.root_batch):
        r = w.run("export", ref, "--format", "sigstore", "--out", tmp_path / "out.json")
        assert r.exit_code == 1 and "content hashes to" in r.stderr, r.output
        assert not (tmp_path / "out.json").exists()
    r = w.run("export", w.checkpoint, "--format", "sigstore", "--out", tmp_path / "out.json")
    assert r.stderr == verified.stderr
