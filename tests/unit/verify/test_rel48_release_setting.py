"""``[release] require_contamination_check`` (rel48): parsed, refused when no boolean, in the
JSON form (and so the digest) only when true; and the words a release's ``contamination``
check says of an evaluation, with and without it (`verify.releases.unchecked`).

Spec: keys/README.md (``[release]``), schemas/trust-policy.v1.schema.json, docs/evaluations.md.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from trajledger.ledger.signing import canonical_json
from trajledger.verify.errors import FormatError
from trajledger.verify.policy import TrustPolicy, policy_digest
from trajledger.verify.predicates import ArtifactRef, ResourceDescriptor
from trajledger.verify.release_rules import Requirement
from trajledger.verify.report import Node

SEED = bytes(range(32))  # (a fixed key: the same policy bytes every run)


def policy(tmp_path: Path, release: str) -> TrustPolicy:
    """A format-2 policy whose ``[release]`` table holds ``release`` (its keys written to
    ``tmp_path``)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.from_private_bytes(SEED).public_key()
    (tmp_path / "evaluator.pub").write_bytes(key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    text = ('format = 2\nname = "p"\nserial = 1\n[roles.evaluator]\nkeys = ["evaluator.pub"]\n'
            f'[release]\n{release}\n[[release.require]]\nsuite = "regression@1"\nmin = 0.5\n')
    return TrustPolicy.from_toml(text.encode(), tmp_path, "policy p.toml")


def test_without_the_setting_a_policy_reads_and_hashes_as_before(tmp_path: Path) -> None:
    """An old policy (no setting) reads as today: the check not required, and its JSON form's
    ``release`` holds only what it held (so its digest is the one recorded before); ``false``
    written out is the same policy, the same digest."""
    old = policy(tmp_path, "approvals = 1")
    assert old.release is not None and old.release.require_contamination_check is False
    assert set(old.to_json()["release"]) == {"approvals", "require"}
    same = policy(tmp_path, "approvals = 1\nrequire_contamination_check = false")
    assert same.release is not None and not same.release.require_contamination_check
    assert canonical_json(same.to_json()) == canonical_json(old.to_json())
    assert policy_digest(same) == policy_digest(old)


def test_the_setting_is_in_the_signed_json_form_and_digest(tmp_path: Path) -> None:
    """``true`` is written (``require_contamination_check: true``), read back from the JSON
    form (a recorded policy, a bundle's) the same, and another digest."""
    old = policy(tmp_path, "approvals = 1")
    strict = policy(tmp_path, "approvals = 1\nrequire_contamination_check = true")
    assert strict.release is not None and strict.release.require_contamination_check is True
    assert strict.to_json()["release"]["require_contamination_check"] is True
    assert policy_digest(strict) != policy_digest(old)
    again = TrustPolicy.from_json(strict.to_json())
    assert again.release == strict.release
    assert policy_digest(again) == policy_digest(strict)


@pytest.mark.parametrize("value", ['"true"', '"yes"', "1", "0", "[]", '"false"'])
def test_a_value_that_is_no_boolean_is_refused(tmp_path: Path, value: str) -> None:
    """Not read as true or false by Python's truth: ``"false"`` would be true."""
    with pytest.raises(FormatError, match=re.escape(
            "policy p.toml: release: require_contamination_check must be true or false "
            "(unquoted), got ")):
        policy(tmp_path, f"approvals = 1\nrequire_contamination_check = {value}")


def test_a_misspelt_setting_is_refused_with_the_name_it_resembles(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match=re.escape(
            "release: unknown setting(s) require_contamination_checks (did you mean "
            "require_contamination_check?); known: approvals, require, "
            "require_contamination_check")):
        policy(tmp_path, "approvals = 1\nrequire_contamination_checks = true")


class _Entry:
    """A log entry as `unchecked` reads one: its subject."""

    subject = "sha256:" + "e" * 64


def _evaluation(annotations: dict[str, Any] | None) -> Any:
    """A verified evaluation record of bc@1 on regression@1 whose configuration holds a
    ``contamination`` entry of ``annotations`` (None: no entry)."""
    from trajledger.verify.judge import Record
    from trajledger.verify.other_predicates import Evaluation

    ck = ArtifactRef("bc", "1", "sha256:" + "c" * 64)
    config = [] if annotations is None else [ResourceDescriptor(
        name="contamination", uri="https://trajledger.dev/check/suite-contamination/v1",
        annotations={"role": "contamination-check", **annotations})]
    ev = Evaluation(result="PASSED", checkpoint=ck, suite=ArtifactRef(
        "regression", "1", "sha256:" + "d" * 64), passed_tests=("sha256:" + "d" * 64 + "/e0",),
        failed_tests=(), metrics={}, evaluated_at="2026-12-07T00:00:00Z",
        configuration=tuple(config))
    return Record(12, _Entry(), None, ev, frozenset())  # type: ignore[arg-type]


TRAIN = {"sha256:" + "a" * 64: ["train train@1"], "sha256:" + "b" * 64: ["train train@2"]}


@pytest.mark.parametrize(("annotations", "said"), [
    (None, "records no comparison of its suite with bc@1's training data (no 'contamination' "
           "entry: made before 'eval' compared them, or by other tooling), 2 train batches: "
           "sha256:aaaaaaaaaaaa… (train train@1); sha256:bbbbbbbbbbbb… (train train@2)"),
    ({"unchecked": 1, "uncheckedBatches": ["sha256:" + "b" * 64]},
     "did not compare its suite with 1 train batch: sha256:bbbbbbbbbbbb… (train train@2) of "
     "bc@1's training data, unreadable where it ran"),
    ({"unchecked": 2}, "did not compare its suite with 2 train batches of bc@1's training data"),
    # an entry (of other tooling) that counts fewer train batches than the lineage holds
    ({"unchecked": 0, "trainBatches": 1}, "compared its suite with 1 train batch(es) of bc@1's "
     "training data, which holds 2 train batches: sha256:aaaaaaaaaaaa… (train train@1); "
     "sha256:bbbbbbbbbbbb… (train train@2)"),
    ({"unchecked": 0}, "compared its suite with an unstated number of train batch(es)"),
    ({"unchecked": 0, "trainBatches": 2, "uncheckedBatches": ["sha256:" + "a" * 64]},
     "did not compare its suite with 1 train batch: sha256:aaaaaaaaaaaa… (train train@1)"),
    ({"unchecked": 1, "uncheckedBatches": ["\x1b]0;title\x07"]},
     "did not compare its suite with 1 train batch of bc@1's training data"),
])
def test_what_a_release_says_of_an_unchecked_evaluation(
        annotations: dict[str, Any] | None, said: str) -> None:
    """Named: the lineage's train batches (no entry), the entry's ``uncheckedBatches`` (only
    digests: signed text a terminal would act on is not printed), or its count alone; an
    ``info`` check by default, a failing one under the setting, the way on at its end."""
    from trajledger.verify.releases import CHECK_AGAIN, release_requirement, unchecked

    rec = _evaluation(annotations)
    assert said in (unchecked(rec, lambda ck: TRAIN) or ""), unchecked(rec, lambda ck: TRAIN)
    for strict in (False, True):
        node = Node("release:x", "release-decision")
        release_requirement(node, Requirement("regression@1", min=0.5),
                            rec.predicate.checkpoint.digest, rec, None, [], None,
                            train=lambda ck: TRAIN, strict=strict)
        ok, check = node.checks
        assert ok.status == "ok" and check.what == "contamination on regression@1"
        assert said in check.detail
        assert check.status == ("fail" if strict else "info"), check
        assert check.detail.endswith(CHECK_AGAIN.format(  # (by digest: rev48 finding 8)
            run=f"'trajledger eval {rec.predicate.checkpoint.digest} --suite regression@1 --key "
                "KEY' (KEY: a key of the policy's evaluator role)",
            setting="require_contamination_check") if strict else
            "(KEY: a key of the policy's evaluator role)")


@pytest.mark.parametrize("annotations", [{"unchecked": 0, "trainBatches": 2},
                                         {"unchecked": 0, "trainBatches": 3}])
def test_an_evaluation_that_compared_every_train_batch_is_not_mentioned(
        annotations: dict[str, Any]) -> None:
    from trajledger.verify.releases import unchecked

    assert unchecked(_evaluation(annotations), lambda ck: TRAIN) is None
    # a checkpoint with no train batch: nothing to compare, nothing said
    assert unchecked(_evaluation(None), lambda ck: {}) is None


def test_a_lineage_of_many_train_batches_names_the_first_five() -> None:
    from trajledger.verify.releases import unchecked

    many = {f"sha256:{i:x}" + "0" * 63: ["train t@1"] for i in range(7)}
    said = unchecked(_evaluation(None), lambda ck: many) or ""
    assert "7 train batches: " in said and said.endswith("(train t@1); and 2 more"), said
    assert said.count("sha256:") == 6  # the evaluation's and five batches'


@pytest.mark.parametrize("listed", [
    ["\x1b]0;title\x07"],  # signed text that is no digest: left out of the words, not ignored
    ["sha256:" + "A" * 64],  # a digest in capitals (no digest of ours)
    "sha256:" + "a" * 64,  # one digest, not a list
    {"sha256:" + "a" * 64: 1},
])
def test_an_entry_listing_unchecked_batches_is_unchecked_whatever_its_count_says(
        listed: object) -> None:
    """rev47 finding 1: an entry (of other tooling) whose ``uncheckedBatches`` lists anything
    read as checked when its items were no digests (or not in a list) and ``unchecked`` said 0:
    the items were left out of the words, and with them the entry's own word that it did not
    compare some batches. It is unchecked, said as some batches (the count 0 contradicts it)."""
    from trajledger.verify.releases import unchecked

    said = unchecked(_evaluation({"unchecked": 0, "trainBatches": 2, "uncheckedBatches": listed}),
                     lambda ck: TRAIN)
    assert said is not None and "did not compare its suite with some train batches of bc@1's " \
        "training data" in said, said
    assert "\x1b" not in said


def test_an_evaluation_with_two_contamination_entries_is_unchecked_if_either_is() -> None:
    """rev47 finding 2: only the first ``contamination`` entry was read, so an evaluation
    whose second entry (of other tooling) says 1 batch unchecked read as checked."""
    from trajledger.verify.judge import Record
    from trajledger.verify.releases import compared, unchecked

    rec = _evaluation({"unchecked": 0, "trainBatches": 2})
    ev = rec.predicate
    second = ResourceDescriptor(
        name="contamination", uri="https://trajledger.dev/check/suite-contamination/v1",
        annotations={"role": "contamination-check", "unchecked": 1,
                     "uncheckedBatches": ["sha256:" + "b" * 64]})
    import dataclasses
    for config in ((*ev.configuration, second), (second, *ev.configuration)):
        two = Record(12, _Entry(), None, dataclasses.replace(ev, configuration=config),
                     frozenset())  # type: ignore[arg-type]
        assert compared(two)
        said = unchecked(two, lambda ck: TRAIN)
        assert said is not None and "sha256:bbbbbbbbbbbb… (train train@2)" in said, said
