"""``monitor`` warns of look-alike names as ``import`` does (left31's Left; review left32).

A vendor whose own software signs a name this ledger refuses to record (`record.lookalike`:
``vеndor-1``, a Cyrillic ``е`` in its ``vendor-1``) records a batch the buyer holds once more
under that name, and publishes the record. ``import`` warned of such a name
(`exchange_cli.lookalike_warnings`); ``monitor`` took the record in without a word (not even
a ``new:`` line: the batch was held), and the name then named the batch here.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_updates import Buyer, Vendor, served, vendor_copy

from trajledger import Ledger
from trajledger.ledger import record
from trajledger.verify.log_entry import LogEntry

LOOKALIKE = "v\u0435ndor-1"  # the vendor's "vendor-1", with a Cyrillic "е"


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


def record_again(vendor: Vendor, digest: str, name: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """The vendor's record of ``digest`` signed again under ``name`` by software that checks no
    name (`record.check_subject_name` patched, as tests/e2e/test_vendor_strings.py does) and
    keeps no rule of one record per digest (`Log.one_record`); its log index there."""
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(vendor.state))
    ledger = Ledger.open(vendor.home)
    index = next(i for i in ledger.log.find_subject(digest)
                 if LogEntry.from_bytes(ledger.log.entry(i)).kind == "rollout-batch")
    envelope = json.loads(ledger.store.get(LogEntry.from_bytes(ledger.log.entry(index)).envelope))
    statement = json.loads(base64.b64decode(envelope["payload"]))
    with monkeypatch.context() as m:
        m.setattr(record, "check_subject_name", lambda _name: None)
        m.setattr(ledger.log, "one_record", None)
        done = record.record_statement(ledger, name, digest, statement["predicateType"],
                                       statement["predicate"], ledger.keys.signer("vendor"),
                                       "rollout-batch")
    return done.index


@pytest.fixture
def parties(tmp_path: Path) -> Iterator[tuple[Vendor, Buyer]]:
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    buyer.run("import", vendor.bundle, "--key", "approver")
    # A vendor that publishes its batches' envelopes too (docs/third-party.md, "publish").
    policy = vendor.home / "policy.toml"
    text = policy.read_text()
    policy.write_text(text.replace("serial = 1\n", "serial = 2\nformat = 3\npublish = ["
                                   "\"revocation\", \"erasure\", \"trust-policy\", "
                                   "\"rollout-batch\"]\n"))
    vendor.run("policy", "set", policy, "--key", "vendor", "--yes")
    yield vendor, buyer


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_monitor_warns_of_a_lookalike_name_it_takes_in(
    parties: tuple[Vendor, Buyer], monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    vendor, buyer = parties
    record_again(vendor, vendor.batches[0], LOOKALIKE, monkeypatch)
    before = buyer.size()
    text = ("imported name 'v\u0435ndor-1' mixes letters of the Cyrillic and Latin scripts in "
            "'v\u0435ndor', whose shapes look alike (Cyrillic '\u0430', Latin 'a'): it can pass "
            "for another name; refer to it by its digest")
    for url in served(vendor):
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver",
                      *(["--json"] if as_json else []))
        assert buyer.size() == before + 2, r.stderr  # the record and the import record
        assert f"WARNING: {text}" in r.stderr.splitlines(), r.stderr
        assert r.stderr.count("imported name") == 1, r.stderr
        if as_json:
            assert json.loads(r.stdout)["updates"]["lookalikes"] == [text]
        # Taken in once: the next watch takes nothing in and warns of nothing.
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver", "--json")
        assert "imported name" not in r.stderr and buyer.size() == before + 2, r.stderr
        assert json.loads(r.stdout)["updates"] is None  # nothing new since
    # The name names the batch here (the warning is what tells it from the vendor's own).
    r = buyer.run("show", LOOKALIKE, "--json")
    assert json.loads(r.stdout)["digest"] == vendor.batches[0]


def test_a_failed_check_after_the_update_says_the_update_is_recorded(
    parties: tuple[Vendor, Buyer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The names are checked after the update is recorded: a read failure then (the trust
    state's disk) is exit 3 with a line saying what is recorded (fault27), not a traceback nor
    a line that reads as if nothing were."""
    import errno

    from trajledger.ledger import exchange_cli

    vendor, buyer = parties
    record_again(vendor, vendor.batches[0], LOOKALIKE, monkeypatch)
    before = buyer.size()

    def failing(_ledger: object, _rows: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(exchange_cli, "lookalike_warnings", failing)
    for url in served(vendor):
        r = buyer.run("monitor", url, "--vkey", vendor.vkey(), "--key", "approver", code=3)
        assert buyer.size() == before + 2
        assert (f"its update is recorded (log index {before}), but the names it "
                "took in could not then be checked for look-alikes") in r.stderr, r.stderr
