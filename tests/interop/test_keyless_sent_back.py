"""A buyer's own records signed keylessly, shipped back by another log (sixteenth review round,
kless31 finding 1; docs/SECURITY.md "Review of 2026-12-05, sixteenth round (kless31)").

rev28 (finding 3) made an update leave out the records of this ledger's own that another log
ships back (`updates.sent_back`), but knew them only by a key whose private half the ledger
holds: a record signed keylessly alone (``attest --sigstore``) has none, so it was taken in again
and listed by the import record, which made it another log's. Now the ledger notes each keyless
signature it makes (`KeyStore.note_keyless`) and knows its own by that note; another log's
keyless records an earlier version logged without their import record (left28) were made
elsewhere, noted by no one here, and are still taken in and listed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sigstore")

from trajledger.ledger.log import EntrySpec
from trajledger.ledger.sigstore_sign import TOKEN_ENV, TRUST_CONFIG_ENV
from trajledger.runner.cli import main
from trajledger.verify.dsse import Envelope, Signature
from trajledger.verify.log_entry import LogEntry


def _attested(runner: Any, home: Path, data: Path, origin: str) -> LogEntry:
    """A ledger at ``home`` whose newest record is ``data`` attested keylessly alone."""
    for args in (["init", "--origin", origin], ["attest", str(data), "--sigstore"]):
        r = runner.invoke(main, ["--ledger", str(home), *args])
        assert r.exit_code == 0, r.output
    from trajledger import Ledger

    ledger = Ledger.open(home)
    return LogEntry.from_bytes(ledger.log.entry(ledger.log.size - 1))


def _two_ledgers(runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                 sigstore_instance: Any, trust_files: tuple[Path, Path]) -> tuple[
                     LogEntry, LogEntry, Any, Any]:
    """A buyer and a vendor, each with one record attested keylessly by the same identity:
    the buyer's entry, the vendor's, and the two ledgers opened."""
    from trajledger import Ledger

    config, _ = trust_files
    monkeypatch.setenv(TOKEN_ENV, sigstore_instance.token("alice@example.com"))
    monkeypatch.setenv(TRUST_CONFIG_ENV, str(config))
    (tmp_path / "mine.txt").write_text("the buyer's suite")
    (tmp_path / "theirs.txt").write_text("the vendor's data")
    mine = _attested(runner, tmp_path / "buyer", tmp_path / "mine.txt", "buyer.example/log")
    theirs = _attested(runner, tmp_path / "vendor", tmp_path / "theirs.txt",
                       "vendor.example/log")
    return mine, theirs, Ledger.open(tmp_path / "buyer"), Ledger.open(tmp_path / "vendor")


def test_a_keyless_record_of_its_ownsent_back_is_not_taken_in_again(
    runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigstore_instance: Any,
    trust_files: tuple[Path, Path],
) -> None:
    from trajledger import Ledger
    from trajledger.ledger.updates import sent_back

    mine, theirs, buyer, vendor = _two_ledgers(runner, tmp_path, monkeypatch, sigstore_instance,
                                               trust_files)
    # The vendor's keyless record, logged here as an earlier version's import stopped between
    # its two appends left it (left28): its envelope and bundle stored, no import record.
    for d in (theirs.envelope, *("sha256:" + k for k in theirs.signers)):
        buyer.store.put_bytes(vendor.store.get(d))
    assert Envelope.from_bytes(buyer.store.get(theirs.envelope)).signatures
    buyer.log.append([EntrySpec(theirs.kind, theirs.subject, theirs.envelope, theirs.signers)],
                     foreign=True)
    buyer = Ledger.open(tmp_path / "buyer")
    # The vendor's update carries both (at its indices 3 and 4): the buyer's own record is left
    # out (on main: taken in, set(), its only signer a keyless bundle, no key held here); the
    # vendor's is taken in and listed, as before.
    assert sent_back(buyer, {3: mine, 4: theirs}) == {3}
    # A note that is not a regular file is no note (read without following or waiting).
    note = buyer.keys.directory / "keyless-made"
    note.rename(tmp_path / "note")
    note.symlink_to(tmp_path / "note")
    assert buyer.keys.keyless_made() == set()
    assert sent_back(buyer, {3: mine, 4: theirs}) == set()


def test_a_vendors_record_naming_a_keyless_keyid_made_here_is_not_the_buyers(
    runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigstore_instance: Any,
    trust_files: tuple[Path, Path],
) -> None:
    """rev29 finding 1: the note lists keyids, and a keyid is what an envelope says. The vendor
    holds the buyer's keyless record (and its bundle, whose sha256 is the keyid) and adds that
    keyid, with a signature of its own choosing, to an envelope of its own: counted as made
    here on main; now only a bundle stored here that carries exactly that signature of exactly
    that payload counts."""
    from trajledger import Ledger
    from trajledger.ledger.encode import envelope_bytes
    from trajledger.ledger.updates import sent_back

    mine, theirs, buyer, vendor = _two_ledgers(runner, tmp_path, monkeypatch, sigstore_instance,
                                               trust_files)
    (noted,) = mine.signers
    assert noted in buyer.keys.keyless_made()
    env = Envelope.from_bytes(vendor.store.get(theirs.envelope))
    for sig in (env.signatures[0].sig, b"\x00" * 64):  # its own signature, or another
        forged = Envelope(env.payload, env.payload_type, (*env.signatures, Signature(noted, sig)))
        digest = buyer.store.put_bytes(envelope_bytes(forged))
        for d in theirs.signers:
            buyer.store.put_bytes(vendor.store.get("sha256:" + d))
        signers = tuple(sorted({*theirs.signers, noted}))
        (at,) = buyer.log.append([EntrySpec(theirs.kind, theirs.subject, digest, signers)],
                                 foreign=True)
        entry = LogEntry.from_bytes(buyer.log.entry(at))
        # On main: {4}, the vendor's record taken for the buyer's own.
        assert sent_back(Ledger.open(tmp_path / "buyer"), {4: entry}) == set()
    # The buyer's own keyless record is still its own (its bundle carries its signature).
    assert sent_back(Ledger.open(tmp_path / "buyer"), {3: mine}) == {3}
