"""A checkpoint note verified once by its holder (ci47 finding 6), and for nothing else.

`CheckedNotes` keeps `verify_checkpoint`'s answer under the note's exact bytes and the whole key:
these tests pin that it answers for no other key of the same name, no other bytes, and keeps
nothing of a note that fails; tests/e2e/test_ci47_checkpoint_once.py counts the verifications of
one `verify`.
"""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from trajledger.ledger.encode import checkpoint_text, format_signature_line, vkey_string
from trajledger.ledger.log import checked as checked_module
from trajledger.ledger.log.checked import CheckedNotes
from trajledger.verify.checkpoint import Checkpoint
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
