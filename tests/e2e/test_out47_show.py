"""End to end: ``show CHECKPOINT`` says what its record carries without printing it inline
(out47, out46's Left): the dependency lock a training run records is carried whole, base64,
in the checkpoint's provenance (several KB); ``show`` printed it on one line.

Findings: docs/SECURITY.md, "Review of 2026-12-07, thirty-second round (out47)".
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from click.testing import CliRunner
from test_evaluations import evals_template, home  # noqa: F401
from test_runner_cli import expect, run


def lock_of(home: Path) -> dict:  # type: ignore[type-arg]  # noqa: F811
    """The dependency-lock descriptor of bc@1's provenance, as ``show --json`` prints it."""
    r = run(CliRunner(), home, "show", "bc@1", "--json")
    expect(r, 0)
    deps = json.loads(r.stdout)["predicate"]["buildDefinition"]["resolvedDependencies"]
    (lock,) = [d for d in deps if d["name"] == "dependency-lock"]
    return lock  # type: ignore[no-any-return]


def test_show_names_the_lock_by_digest_and_size_and_says_how_to_get_it(
    runner: CliRunner, home: Path  # noqa: F811
) -> None:
    """out47 finding 1 (the brief's a): ``show bc@1`` printed the lock's base64 inline."""
    lock = lock_of(home)
    data = base64.b64decode(lock["content"])
    assert len(data) > 500  # the lock is a real one, several hundred bytes at least
    r = run(runner, home, "show", "bc@1")
    expect(r, 0)
    assert lock["content"][:40] not in r.stdout, r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) < 2000, r.stdout
    assert (f"  carries     dependency-lock  sha256:{lock['digest']['sha256']}  {len(data)} bytes"
            " ('trajledger show bc@1 --content dependency-lock' prints it)\n") in r.stdout
    r = run(runner, home, "show", "bc@1", "--content", "dependency-lock")
    expect(r, 0)
    assert r.stdout_bytes == data
    assert hashlib.sha256(r.stdout_bytes).hexdigest() == lock["digest"]["sha256"]
    r = run(runner, home, "show", "bc@1", "--json")
    doc = json.loads(r.stdout)
    assert doc["carries"][0] == {"name": "dependency-lock", "digest":
                                 f"sha256:{lock['digest']['sha256']}", "size": len(data)}, doc
    # the training run's metrics, a byproduct carried whole with no digest, are listed too
    assert [c["name"] for c in doc["carries"]] == ["dependency-lock", "metrics"], doc
    metrics = json.loads(run(runner, home, "show", "bc@1", "--content", "metrics").stdout)
    assert metrics["accuracy"] == doc["predicate"]["runDetails"]["byproducts"][0][
        "annotations"]["accuracy"], metrics


def test_show_of_content_the_record_does_not_carry_is_a_usage_error(
    runner: CliRunner, home: Path  # noqa: F811
) -> None:
    r = run(runner, home, "show", "bc@1", "--content", "lock")
    expect(r, 2)
    assert ("bc@1 carries no content named 'lock' (it carries: dependency-lock, metrics)"
            in r.stderr), r.stderr
    r = run(runner, home, "show", "train@1", "--content", "dependency-lock")
    expect(r, 2)
    assert "carries no content named 'dependency-lock' (it carries: none)" in r.stderr


def test_content_that_does_not_hash_to_its_digest_is_not_printed(
    runner: CliRunner, home: Path, monkeypatch: object  # noqa: F811
) -> None:
    """A signer's record whose carried bytes are not those its digest names: exit 1, nothing
    on stdout (the record is described, not trusted: ``verify`` judges it)."""
    import pytest

    from trajledger.ledger import show

    describe = show.describe

    def other_bytes(ledger: object, ref: str) -> dict:  # type: ignore[type-arg]
        info = describe(ledger, ref)  # type: ignore[arg-type]
        deps = info["predicate"]["buildDefinition"]["resolvedDependencies"]
        next(d for d in deps if d["name"] == "dependency-lock")["content"] = "b3RoZXI="
        return info

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setattr(show, "describe", other_bytes)
    r = run(runner, home, "show", "bc@1", "--content", "dependency-lock")
    expect(r, 1)
    assert r.stdout == "", r.stdout
    assert ("FAIL: bc@1: the 'dependency-lock' it carries does not hash to the digest named "
            "beside it (sha256:") in r.stderr, r.stderr
