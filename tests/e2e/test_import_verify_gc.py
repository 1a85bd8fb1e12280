"""``trajledger import`` and ``trajledger verify REF`` in their own process keep their work out
of the cyclic garbage collector's (imp49, issue 21 items 3 and 7, as exp48 did for ``export``):
the modules they import when they run, the open ledger and the import or the lineage walk
itself (the bundle's verification and the records taken in; the walk's records and report,
which live until the command is done) run with the collector off (`clikit.loading`), and the
collector is on again once they are done, also when they fail. A refused bundle still leaves
the buyer's ledger as it was. ``verify BUNDLE``'s reading and verification of the bundle too.

Each case runs the command's entry point in a fresh interpreter (`test_export_gc.entry_point`:
what it freezes would stay frozen in the test process).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tamperkit
import testkit
from test_export_gc import WATCH_THE_EXPORT, WATCH_THE_IMPORT, entry_point
from test_updates import Buyer, Vendor, vendor_copy

# `test_export_gc`'s watch of `export_bundle`, of `import_bundle`, of `Ledger.verify` (the
# walk of ``verify REF``) and of `verify_bundle` (``verify BUNDLE``'s): whether the collector
# was on when it ran, and after the command
WATCH_THE_BUNDLE_IMPORT = WATCH_THE_EXPORT.replace("export_bundle", "import_bundle").replace(
    "> export ran", "> import ran")
WATCH_THE_WALK = WATCH_THE_EXPORT.replace(
    "from trajledger.ledger import exchange", "from trajledger.api import Ledger").replace(
    "exchange.export_bundle", "Ledger.verify").replace("> export ran", "> the walk ran")
WATCH_THE_BUNDLE_WALK = WATCH_THE_EXPORT.replace(
    "trajledger.ledger import exchange", "trajledger.verify import bundle").replace(
    "exchange.export_bundle", "bundle.verify_bundle").replace("> export ran", "> the walk ran")


@pytest.fixture
def parties(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Vendor, Buyer]:
    """A vendor's bundle and a buyer ready to import it (the entry point runs as the buyer's
    user: its ``TRAJLEDGER_STATE_DIR``)."""
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))
    vendor = vendor_copy(tmp_path, "vendor", "vendor.example/log")
    buyer = Buyer(tmp_path, [vendor])
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(buyer.state))
    return vendor, buyer


@pytest.mark.parametrize(("watch", "said"), [
    (WATCH_THE_BUNDLE_IMPORT, ["> import ran with the collector off", "> then on"]),
    (WATCH_THE_IMPORT, ["> exchange imported with the collector off"]),
], ids=["the import", "its modules"])
def test_the_import_runs_with_the_collector_off_and_turns_it_back_on(
    parties: tuple[Vendor, Buyer], watch: str, said: list[str],
) -> None:
    vendor, buyer = parties
    status, lines = entry_point(watch, [
        "--ledger", str(buyer.home), "import", str(vendor.bundle), "--key", "approver"])
    assert status == 0
    assert lines == said
    assert vendor.dataset in buyer.run("show", vendor.dataset).stdout  # (taken in)


def test_a_refused_bundle_leaves_the_collector_on_and_the_ledger_as_it_was(
    parties: tuple[Vendor, Buyer],
) -> None:
    vendor, buyer = parties
    members = tamperkit.bundle_members(vendor.bundle)
    name = max((m for m in members if m[0].startswith("objects/")), key=lambda m: len(m[1]))[0]
    tampered = tamperkit.write_bundle(
        vendor.bundle.with_name("tampered.tar.zst"),
        [(n, tamperkit.flip(d) if n == name else d) for n, d in members], reindex=True)
    before = tamperkit.snapshot(buyer.home)
    status, lines = entry_point(WATCH_THE_BUNDLE_IMPORT, [
        "--ledger", str(buyer.home), "import", str(tampered), "--key", "approver"])
    assert status == 1  # (refused: an object that is not the bytes of its name)
    assert lines == ["> import ran with the collector off", "> then on"]
    assert tamperkit.snapshot(buyer.home) == before


def test_verify_walks_with_the_collector_off_and_turns_it_back_on(
    quickstart_template: testkit.Template[str], tmp_path: Path,
) -> None:
    home = testkit.copy_template(quickstart_template, tmp_path / "home")
    status, lines = entry_point(WATCH_THE_WALK, ["--ledger", str(home), "verify",
                                                 quickstart_template.value])
    assert status == 0
    assert lines == ["> the walk ran with the collector off", "> then on"]


def test_a_failed_verify_leaves_the_collector_on(
    quickstart_template: testkit.Template[str], tmp_path: Path,
) -> None:
    home = testkit.copy_template(quickstart_template, tmp_path / "home")
    status, lines = entry_point(WATCH_THE_WALK, ["--ledger", str(home), "verify", "no-such@1"])
    assert status == 3  # (no artifact has this name)
    assert lines == ["> the walk ran with the collector off", "> then on"]


@pytest.mark.parametrize("licences", ["CC-BY-4.0", "MIT"])
def test_verify_walks_a_bundle_with_the_collector_off_and_turns_it_back_on(
    parties: tuple[Vendor, Buyer], licences: str,
) -> None:
    """Under a policy accepting the bundle's licence, and under one that does not (the walk
    fails, exit 1)."""
    vendor, buyer = parties
    policy = buyer.home / "verifier.toml"
    policy.write_text((buyer.home / "policy.toml").read_text().replace(
        'accepted_licences = ["CC-BY-4.0"]', f'accepted_licences = ["{licences}"]'))
    status, lines = entry_point(WATCH_THE_BUNDLE_WALK, [
        "verify", str(vendor.bundle), "--policy", str(policy)])
    assert status == (0 if licences == "CC-BY-4.0" else 1)
    assert lines == ["> the walk ran with the collector off", "> then on"]
