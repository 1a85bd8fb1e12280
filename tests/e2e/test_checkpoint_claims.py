"""Bytes two checkpoint records claim (hist38 finding 1; the exchange histories' seed 91).

The buyer trains ``c1`` on its own train set ``d1`` of the vendor's batch ``v1``; the vendor
trains ``vc1`` on its train set ``w1`` of the same batch with the same trainer and seed: the
same bytes. Once the buyer's policy names the vendor's trainer, ``vc1``'s bundle imports: two
checkpoint records of one digest at the buyer, each with a lineage of its own. The vendor then
revokes ``w1`` and the buyer takes it in. The rules (docs/SECURITY.md, "twenty-third round
(hist38)"; ``verify.claims``):

- a reference by name judges the record of that name: ``verify vc1@1`` fails (it verified, on
  the buyer's own record, before), ``verify c1@1`` holds;
- a reference by digest judges every record and fails if any does, naming each: ``verify
  DIGEST``, ``lineage DIGEST``, a bundle of it, and what records the digest: a fine-tune from
  it (``train --parent``), refused before anything runs.

tests/e2e/test_histories_exchange.py models it (R32) in its generated histories.
"""

from __future__ import annotations

from pathlib import Path

from test_histories_agree import Step, impact_verdict
from test_histories_exchange import judge_history, replay, run_history

SETUP = [Step("vrecord", ("v1", 0, "orig", False)), Step("vdataset", ("w1", ("v1",), "train")),
         Step("vapprove", ("w1",)), Step("vtrain", ("vc1", "w1")), Step("ship", ("v1",)),
         Step("bdataset", ("d1", ("v1",), "train")), Step("bapprove", ("d1",)),
         Step("btrain", ("c1", "d1", None)), Step("bvtrust"), Step("vckship", ("vc1",))]


def test_a_revoked_lineage_is_not_hidden_behind_a_second_record(tmp_path: Path) -> None:
    run = run_history(tmp_path / "h", SETUP)
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    m, b = run.model, run.buyer
    digest = m.buyer["c1"].digest
    assert m.buyer["vc1"].digest == digest  # one digest, two checkpoint records
    assert b.cli("verify", "vc1@1").exit_code == 0 and judge_history(run) == []
    replay(run, [Step("vrevoke", ("w1",)), Step("update")])
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    named = b.cli("verify", "vc1@1")
    assert named.exit_code == 1, named.output  # was 0: judged on the buyer's own record
    assert b.cli("verify", "c1@1").exit_code == 0
    # The sizes-only walk judges alike.
    assert b.cli("verify", "--skip-data", "c1@1").exit_code == 0
    assert b.cli("verify", "--skip-data", "vc1@1").exit_code == 1
    for args in (("verify", digest), ("lineage", digest)):
        r = b.cli(*args)
        assert r.exit_code == 1, (args, r.output)
    r = b.cli("verify", digest)
    assert "checkpoint record" in r.output and "vc1@1 records these bytes too" in r.output, \
        r.output
    child = b.cli("train", "--dataset", m.buyer["d1"].digest, "--key", "trainer", "--name",
                  "c2", "--version", "1", "--parent", "c1@1", "--seed", "2")
    assert child.exit_code == 1 and "its lineage fails" in child.stderr, child.output
    assert not m.checkpoint_ok("c1") and m.checkpoint_ok("c1", True)
    assert judge_history(run) == []


def test_a_revoked_dataset_is_not_hidden_behind_the_buyers_own_record_of_it(
        tmp_path: Path) -> None:
    """hist39 finding 1 (R34): the buyer makes ``w1@1`` of the vendor's ``v1`` as the vendor
    did (the same bytes), approves it, then imports the vendor's: one digest, two dataset
    records. The vendor revokes its ``w1``: by digest every record is judged, so the gate
    and every verifier refuse it (on e3002ae0 each judged the buyer's own record, first, and
    ignored the vendor's revocation as one by a producer of something it did not produce);
    by name the record of that name (the buyer's, the first of that name here)."""
    run = run_history(tmp_path / "h", [
        Step("vrecord", ("v1", 0, "orig", False)), Step("vdataset", ("w1", ("v1",), "train")),
        Step("ship", ("v1",)), Step("bdataset", ("w1", ("v1",), "train")),
        Step("bapprove", ("w1",)), Step("ship", ("w1",)), Step("vrevoke", ("w1",)),
        Step("update")])
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    m, b = run.model, run.buyer
    digest = m.buyer["w1"].digest
    assert m.vendor["w1"].digest == digest  # one digest, two dataset records
    for args in (("verify", digest), ("admit", digest), ("lineage", digest)):
        r = b.cli(*args)
        assert r.exit_code == 1 and "revoked: agree26" in r.output, (args, r.output)
    r = b.cli("train", "--dataset", digest, "--key", "trainer", "--name", "c1", "--version",
              "1", "--seed", "1")
    assert r.exit_code == 1 and "revoked: agree26" in r.stderr, r.output
    assert "records these bytes too" in b.cli("verify", digest).output
    named = b.cli("verify", "w1@1")
    assert named.exit_code == 0 and "not judged: the reference names" in named.output
    assert judge_history(run) == []


def test_a_revoked_batch_is_not_hidden_behind_the_buyers_own_record_of_it(
        tmp_path: Path) -> None:
    """hist39 finding 1 (R34): the buyer records the vendor's episodes itself (``b1``) before
    the vendor's ``v1`` of the same file is imported; the vendor revokes ``v1``. By digest
    (a dataset's batch, ``verify DIGEST``) every record: refused; by name the record of that
    name: ``verify v1`` fails, ``verify b1`` holds (on e3002ae0 all held: the vendor's
    revocation was ignored, its producer not the producer of the first record, the buyer's)."""
    run = run_history(tmp_path / "h", [Step("vrecord", ("v1", 0, "orig", False))])
    m, b = run.model, run.buyer
    b.run("env", "register", "grid", "--version", "1", "--source", "sim", "--key", "producer")
    b.run("record", run.root / "v1.parquet", "--env", "grid@1", "--policy", "scripted",
          "--name", "b1", "--licence", "CC-BY-4.0", "--key", "producer")
    replay(run, [Step("ship", ("v1",)), Step("vrevoke", ("v1",)), Step("update")])
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    digest = m.vendor["v1"].digest
    for args in (("verify", digest), ("verify", "v1"), ("lineage", digest)):
        r = b.cli(*args)
        assert r.exit_code == 1 and "revoked: agree26" in r.output, (args, r.output)
    assert b.cli("verify", "b1").exit_code == 0
    b.run("dataset", "create", "d1", "--version", "1", "--split", "train", "--batch", "b1",
          "--key", "producer")
    for args in (("approve", "d1@1", "--key", "approver"), ("admit", "d1@1"),
                 ("verify", "d1@1")):
        r = b.cli(*args)
        assert r.exit_code == 1 and "revoked: agree26" in r.output, (args, r.output)


def test_the_buyers_own_records_of_the_vendors_bytes_agree_with_the_model(
        tmp_path: Path) -> None:
    """R34 in a history of the generated kinds (``bsame``, ``vrotate``): the buyer records the
    vendor's ``v1`` itself; the vendor revokes it before its record reaches the buyer, whose
    ``monitor --fail-on-revocation`` takes the revocation in and exits 0 (it has no authority
    over the buyer's own record: noted, ignored); the vendor rotates its log key; the buyer
    makes ``w1`` as the vendor made it and approves it; the vendor's records of both arrive
    (``ship``), and from then on the revocation counts by digest, as the vendor's revocation
    of ``w1`` does once taken in; by name the buyer's own records hold. Every step and path
    agrees with the model (`judge_history`)."""
    run = run_history(tmp_path / "h", [
        Step("vrecord", ("v1", 0, "orig", False)), Step("vrecord", ("v2", 0, "orig", False)),
        Step("ship", ("v2",)), Step("bsame", ("v1",)), Step("vrevoke", ("v1",)),
        Step("bwatch"), Step("vrotate"), Step("vdataset", ("w1", ("v2",), "train")),
        Step("bsame", ("w1",)), Step("bapprove", ("w1",)), Step("btrain", ("c1", "w1", None)),
        Step("ship", ("v1",)), Step("ship", ("w1",)), Step("vrevoke", ("w1",)),
        Step("update")])
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    m, b = run.model, run.buyer
    assert m.buyer["v1"].own and m.buyer["v1"].second is not None
    assert b.cli("verify", m.buyer["v1"].digest).exit_code == 1
    assert b.cli("verify", "v1").exit_code == 0  # by name: the buyer's own record
    assert b.cli("admit", m.buyer["w1"].digest).exit_code == 1
    assert not m.checkpoint_ok("c1")
    assert judge_history(run) == []


def test_a_batch_whose_other_record_is_distrusted_is_ignored_in_impact_too(
        tmp_path: Path) -> None:
    """hist39 finding 5 (R34 with R20, by hand: the generator leaves the marking out of R34's
    histories): the buyer records ``v1`` itself, trains a set of it, then imports the vendor's
    ``v1`` and marks the vendor's key compromised since that import. ``impact`` judged only a
    batch's first record (`verify.claims.judged` was a checkpoint's only), so its node and
    ``verify`` disagreed (on 396ee396). As merged with rev36 finding 1, the vendor's record,
    signed only by a key the policy no longer holds, is named and ignored, for a batch as for
    a checkpoint: the buyer's own batch holds by digest and by name, in ``train``, ``verify``
    and ``impact`` alike, and the model agrees."""
    run = run_history(tmp_path / "h", [
        Step("vrecord", ("v1", 0, "orig", False)), Step("vrecord", ("v2", 0, "orig", False)),
        Step("ship", ("v2",)), Step("bsame", ("v1",)),
        Step("bdataset", ("d1", ("v1",), "train")), Step("bapprove", ("d1",)),
        Step("ship", ("v1",)), Step("bmark", ("v1",)), Step("btrain", ("c1", "d1", None))])
    assert run.ran[-1] == "btrain(c1, d1, None) -> ok", run.ran
    m, b = run.model, run.buyer
    digest = m.buyer["v1"].digest
    assert m.batch_ok("v1") and m.batch_ok("v1", True)
    assert impact_verdict(b, digest, digest)[0]
    r = b.cli("verify", digest)
    assert r.exit_code == 0 and "ignored" in r.output, r.output
    assert b.cli("verify", "v1").exit_code == 0
    assert judge_history(run) == []
