"""End to end: ``show REF --content NAME`` does not write what a signer chose to a terminal when
a terminal would act on it (rev45 finding 3). A record carries bytes its signer wrote (a
training run's metrics, with no digest; a dependency lock): escape sequences in them redrew,
retitled or hid what the reader's terminal showed, as the project's every other line of
signed text is kept from doing (`clikit.visible`). To a terminal they are refused, with the
way on (a file); redirected, they are written as they are, byte for byte.

docs/SECURITY.md, "Review of 2026-12-07, thirty-third round (rev45)".
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evaluations import evals_template, home  # noqa: F401
from test_runner_cli import expect, run

from trajledger.ledger import artifact_cli, show

ESCAPES = b'{"accuracy": 1.0}\x1b]0;owned\x07\x1b[2J\x1b[1A\r\n'


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    """bc@1's carried metrics (no digest) as a signer could write them: escape sequences."""
    describe = show.describe

    def metrics(ledger: object, ref: str) -> dict:  # type: ignore[type-arg]
        info = describe(ledger, ref)  # type: ignore[arg-type]
        for d in info["predicate"]["runDetails"]["byproducts"]:
            if d.get("name") == "metrics":
                d["content"] = base64.b64encode(ESCAPES).decode()
        return info

    monkeypatch.setattr(show, "describe", metrics)


def test_content_a_terminal_would_act_on_is_not_written_to_one(
    runner: CliRunner, home: Path, planted: None, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setattr(artifact_cli, "is_terminal", lambda stream: True)
    r = run(runner, home, "show", "bc@1", "--content", "metrics")
    expect(r, 2)
    assert r.stdout == "", r.stdout
    assert ("the 'metrics' it carries holds characters a terminal acts on (\\u001b at byte "
            "17): nothing written to the terminal; to read it, redirect it: 'trajledger show "
            "bc@1 --content metrics > FILE'") in r.stderr, r.stderr
    # the lock, plain text, is written to a terminal as before
    r = run(runner, home, "show", "bc@1", "--content", "dependency-lock")
    expect(r, 0)
    assert len(r.stdout_bytes) > 500, r.stdout


def test_redirected_it_is_written_byte_for_byte(
    runner: CliRunner, home: Path, planted: None  # noqa: F811
) -> None:
    r = run(runner, home, "show", "bc@1", "--content", "metrics")
    expect(r, 0)
    assert r.stdout_bytes == ESCAPES
