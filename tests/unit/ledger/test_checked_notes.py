"""A checkpoint note verified once by its holder (ci47 finding 6), and for nothing else.

`CheckedNotes` keeps `verify_checkpoint`'s answer under the note's exact bytes and the whole key:
these tests pin that it answers for no other key of the same name, no other bytes, and keeps
nothing of a note that fails; tests/e2e/test_ci47_checkpoint_once.py counts the verifications of
one `verify`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import testkit
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from trajledger.ledger.encode import checkpoint_text, format_signature_line, vkey_string
from trajledger.ledger.keys import Signer
from trajledger.ledger.log import Log
from trajledger.ledger.log import checked as checked_module
from trajledger.ledger.log.checked import CheckedNotes
from trajledger.verify.checkpoint import Checkpoint, verify_checkpoint
from trajledger.verify.errors import SignatureError
from trajledger.verify.note import Verifier, verifier_from_vkey

NAME = "log.trajledger.test/checked"


def key() -> tuple[Ed25519PrivateKey, Verifier]:
    private = Ed25519PrivateKey.generate()
    raw = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return private, verifier_from_vkey(vkey_string(NAME, raw))


def signed(private: Ed25519PrivateKey, verifier: Verifier, size: int) -> bytes:
    text = checkpoint_text(Checkpoint(NAME, size, bytes([size]) * 32))
    return text + b"\n" + format_signature_line(NAME, verifier.key_hash, private.sign(text))


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The notes `CheckedNotes` verified (by `verify_checkpoint`), in order."""
    seen: list[bytes] = []
    real = checked_module.verify_checkpoint

    def counting(note: bytes, verifier: Verifier, **kwargs: Any) -> Checkpoint:
        seen.append(note)
        return real(note, verifier, **kwargs)

    monkeypatch.setattr(checked_module, "verify_checkpoint", counting)
    return seen


def test_the_same_note_by_the_same_key_is_verified_once(calls: list[bytes]) -> None:
    private, verifier = key()
    note = signed(private, verifier, 7)
    checked = CheckedNotes()
    first = checked(note, verifier)
    assert checked(bytes(note), verifier_from_vkey(vkey_string(NAME, verifier.public_key))) is first
    assert (first.size, calls) == (7, [note])


def test_another_key_of_the_same_name_is_not_answered_for(calls: list[bytes]) -> None:
    private, verifier = key()
    _, other = key()
    note = signed(private, verifier, 7)
    checked = CheckedNotes()
    checked(note, verifier)
    with pytest.raises(SignatureError):
        checked(note, other)
    assert calls == [note, note]


def test_other_bytes_are_verified_and_a_failing_note_is_kept_nowhere(calls: list[bytes]) -> None:
    private, verifier = key()
    other_private, other = key()
    note = signed(private, verifier, 7)
    forged = signed(other_private, other, 7)  # the same text, signed by another key
    checked = CheckedNotes()
    checked(note, verifier)
    for _ in range(2):
        with pytest.raises(SignatureError):
            checked(forged, verifier)
    assert calls == [note, forged, forged]


def test_a_long_lived_holder_keeps_a_few_notes(calls: list[bytes]) -> None:
    private, verifier = key()
    checked = CheckedNotes()
    notes = [signed(private, verifier, n) for n in range(1, 30)]
    assert [checked(note, verifier).size for note in notes] == list(range(1, 30))
    assert [checked(note, verifier).size for note in notes[-3:]] == [27, 28, 29]
    assert calls == notes  # the newest kept
    checked(notes[0], verifier)
    assert calls == [*notes, notes[0]]  # the oldest not: verified again


def test_a_full_holder_drops_its_oldest_note_only(calls: list[bytes]) -> None:
    """Full, a holder makes room by dropping its oldest note, not all of them (app51: emptied,
    it had a ledger's writer verify its floor, the note before the newest, again every seventh
    publication); another thread changing the notes meanwhile empties them, as before."""
    private, verifier = key()
    checked = CheckedNotes()
    notes = [signed(private, verifier, n) for n in range(1, 12)]
    for note in notes:
        checked(note, verifier)
    del calls[:]
    for note in notes[-checked_module._KEPT :]:
        checked(note, verifier)
    assert calls == []  # the eight newest all kept

    class Racing(dict[Any, Any]):
        def __iter__(self) -> Any:
            raise RuntimeError("dictionary changed size during iteration")

    checked._seen = Racing(checked._seen)
    newer = signed(private, verifier, 12)
    assert checked(newer, verifier).size == 12
    assert list(dict.keys(checked._seen)) == [(newer, verifier)] and calls == [newer]


# -- the notes a log's writer signs (app50: kept as verified, only when it signs them here) ----

LOG_ORIGIN = "example.org/checked-log"


class _Elsewhere(Signer):
    """Signs through another party (as a Ray worker's key signs in the writer actor): what it
    returns is known only by verifying it."""

    def sign(self, data: bytes) -> bytes:
        return super().sign(data)


def _appended(log: Log, calls: list[bytes], n: int) -> list[bytes]:
    """Append ``n`` entries one by one; each published note, then whether ``log.checked``
    verified it when asked for it (the calls made since, in ``calls``)."""
    notes = []
    for _ in range(n):
        log.append([testkit.entry_spec(log.size, "0" * 64)])
        notes.append(log.checkpoint_bytes())
    del calls[:]
    for note in notes:
        log.checked(note, log.verifier)
    return notes


def test_a_writer_keeps_the_notes_it_signs_as_verified(
    tmp_path: Path, calls: list[bytes]
) -> None:
    """The notes a writer signed with its own key (a new log's, appended ones, after a rotation
    to a new key) are answered without verifying them, and each is what `verify_checkpoint`
    says of it."""
    signer = Signer.generate("log")  # TEST ONLY
    log = Log.create(tmp_path / "log", LOG_ORIGIN, signer)
    notes = [log.checkpoint_bytes(), *_appended(log, calls, 3)]
    assert calls == []
    for note in notes:
        assert log.checked(note, log.verifier) == verify_checkpoint(note, log.verifier)
    log.rotate_key(new := Signer.generate("log2"))  # TEST ONLY
    notes = _appended(log, calls, 2)
    assert calls == [] and log.verifier.public_key == new.public.raw_ed25519()
    assert [log.checked(n, log.verifier).size for n in notes] == [4, 5]


def test_a_note_signed_elsewhere_is_verified(tmp_path: Path, calls: list[bytes]) -> None:
    """A signer whose `sign` is its own (it may sign in another process) is not trusted to
    have made a valid signature: its notes are verified when asked for."""
    signer = _Elsewhere.from_private("log", Ed25519PrivateKey.generate())  # TEST ONLY
    log = Log.create(tmp_path / "log", LOG_ORIGIN, signer)
    notes = _appended(log, calls, 2)
    assert calls == notes


def test_a_key_not_the_pair_of_its_public_half_is_not_trusted(
    tmp_path: Path, calls: list[bytes]
) -> None:
    """A `Signer` given a public half that is not its private key's (made by hand, not by the
    key store, which refuses such a pair) signs notes that do not verify by the log's key: they
    are not kept as verified, and asking for one fails."""
    public = Signer.generate("log").public  # TEST ONLY
    signer = Signer("log", public, Ed25519PrivateKey.generate())
    log = Log.create(tmp_path / "log", LOG_ORIGIN, signer)
    assert log.verifier.public_key == public.raw_ed25519()
    with pytest.raises(SignatureError):
        log.checked(log.checkpoint_bytes(), log.verifier)
    assert calls == [log.checkpoint_bytes()]
