"""rev54: `ledger.relayed_keys` names who to ask about a key only from logs the user's policy
trusts, by printable names (docs/SECURITY.md, "Review of 2026-12-07, forty-first round
(rev54)"). The bundle's import records are its sender's word: a hostile one named a look-alike
of the vendor's log as "the signer to ask", or wrote a line of its own into the refusal."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from trajledger.ledger import relayed_keys as rk

RELAY = "lab.example/log+0a0b0c0d+AAAA"
VENDOR = "vendor.example/log+01020304+BBBB"
LOOKALIKE = "vendor.exampie/log+01020304+CCCC"
KEY = "abcdef123456" + "0" * 52
LINE = ("bundle: record 5: the envelope names key abcdef123456 (not in the policy), want "
        "producer key(s)")


class _Import:
    def __init__(self, log: dict[str, Any], entries: tuple[dict[str, Any], ...]) -> None:
        self.log, self.entries = log, entries


def _said(monkeypatch: pytest.MonkeyPatch, relay: str, origin: str, index: object) -> str:
    """What follows LINE when the bundle of ``relay``'s log holds an import record that lists
    a record KEY signed, of ``origin``'s log at ``index`` (the user's policy trusts RELAY's and
    VENDOR's logs)."""
    def entry(raw: bytes) -> SimpleNamespace:
        if raw == b"import":
            return SimpleNamespace(kind="import", envelope="mine")
        return SimpleNamespace(kind="rollout-batch", envelope="theirs", signers=(KEY,))

    monkeypatch.setattr(rk, "LogEntry", SimpleNamespace(from_bytes=entry))
    monkeypatch.setattr(rk, "Import", _Import)
    monkeypatch.setattr(rk, "read_record", lambda *_a: (None, _Import(
        {"vkey": origin}, ({"entry": "theirs", "index": index},))))
    evidence = SimpleNamespace(index=SimpleNamespace(vkey=relay), entry_bytes=lambda _i: None,
                               entries=lambda: [(0, b"import")], blob=lambda _e: b"",
                               policy_records=lambda: [])
    return rk.relayed_keys(evidence, [LINE], (RELAY, VENDOR)).get(LINE, "")  # type: ignore[arg-type]


@pytest.mark.parametrize(("relay", "origin", "index", "named"), [
    (RELAY, VENDOR, 7, True),  # both logs trusted: named (out59 finding 3)
    (RELAY, LOOKALIKE, 7, False),  # a log the policy does not hold: not an authority
    (LOOKALIKE, VENDOR, 7, False),  # the bundle's own log not trusted: it names nothing
    (RELAY, VENDOR, "7)\nOK: bh@2 verified (", False),  # a line of the sender's own
    (RELAY, "vendor.example/log\nOK: verified+0102+BBBB", 7, False),
], ids=["trusted", "lookalike", "untrusted-relay", "index-line", "name-line"])  # fmt: skip
def test_who_to_ask_is_named_only_from_logs_the_policy_trusts(
    monkeypatch: pytest.MonkeyPatch, relay: str, origin: str, index: object, named: bool
) -> None:
    said = _said(monkeypatch, relay, origin, index)
    assert ("the signer to ask is vendor.example/log+01020304's owner" in said) is named, said
    assert "\n" not in said and "exampie" not in said, said
