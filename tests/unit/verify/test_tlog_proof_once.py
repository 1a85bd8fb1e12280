"""verify.tlog_proof: a checkpoint note shared by many proofs is parsed once, with the same
decisions (issue 21 item 3, xfer45: a bundle's ~1,000 proofs carry one note, and each proof
parsed it again, in `export` and in `BundleEvidence.open`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajledger.ledger.encode import tlog_proof_bytes
from trajledger.verify import tlog_proof
from trajledger.verify.errors import FormatError, SignatureError
from trajledger.verify.note import Note, verifier_from_vkey
from trajledger.verify.tiles import TileReader
from trajledger.verify.tlog_proof import TlogProof, verify_tlog_proof

# The Tessera log of tests/vectors/tlog (as test_tlog_proof.py reads it): 15 entries.
_T = json.loads((Path(__file__).resolve().parents[2] / "vectors/tlog/tlog-vectors.json")
                .read_text())["tessera_posix_log"]
LOG, CHECKPOINT = verifier_from_vkey(_T["vkey"]), str(_T["checkpoint_latest"]).encode()
ENTRIES = [e.encode() for e in _T["entries_utf8"]]
READER = TileReader(lambda p: bytes.fromhex(_T["files_hex"][p]), len(ENTRIES))
N = 1_000
# The note altered two ways: it no longer parses (its size line), or it parses and its signature
# no longer holds (its root's first base64 letter).
BAD_FORMAT = CHECKPOINT.replace(b"\n15\n", b"\n15x\n", 1)
_lines = CHECKPOINT.split(b"\n")
BAD_SIGNATURE = b"\n".join([*_lines[:2], (b"B" if _lines[2][:1] != b"B" else b"C")
                            + _lines[2][1:], *_lines[3:]])


def texts(altered: int | None = None, note: bytes = CHECKPOINT) -> list[bytes]:
    """N proofs' bytes of entries 0..14 in turn, each a bytes object of its own (as each
    bundle member is), the proof at ``altered`` carrying ``note`` instead of the checkpoint."""
    out = []
    for k in range(N):
        i = k % len(ENTRIES)
        good = tlog_proof_bytes(TlogProof(i, tuple(READER.inclusion_proof(i)), CHECKPOINT))
        out.append(good[: -len(CHECKPOINT)] + (note if k == altered else CHECKPOINT))
    return out


def decisions(proofs: list[bytes]) -> list[str]:
    """What parsing and verifying each proof decided: ok, or the error's type and message."""
    out = []
    for k, data in enumerate(proofs):
        try:
            verify_tlog_proof(TlogProof.from_bytes(data), ENTRIES[k % len(ENTRIES)], LOG)
            out.append("ok")
        except (FormatError, SignatureError) as e:
            out.append(f"{type(e).__name__}: {e}")
    return out


def test_a_note_carried_by_a_thousand_proofs_is_parsed_once(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    proofs = texts()
    calls = []
    real = Note.from_bytes

    def counted(data: bytes) -> Note:
        calls.append(data)
        return real(data)

    monkeypatch.setattr(tlog_proof.Note, "from_bytes", counted)
    tlog_proof._check_note.cache_clear()
    parsed = [TlogProof.from_bytes(p) for p in proofs]
    assert len(calls) == 1  # was one a proof
    assert all(p.checkpoint == CHECKPOINT for p in parsed)


@pytest.mark.parametrize("note", [BAD_FORMAT, BAD_SIGNATURE], ids=["format", "signature"])
@pytest.mark.parametrize("where", [0, 500, N - 1])
def test_one_altered_note_among_a_thousand_proofs_is_refused_as_before(
        note: bytes, where: int, monkeypatch: pytest.MonkeyPatch) -> None:
    proofs = texts(altered=where, note=note)
    got = decisions(proofs)
    # The same proofs with nothing remembered: each note parsed for each proof, as before.
    monkeypatch.setattr(tlog_proof, "_check_note", tlog_proof._check_note.__wrapped__)
    assert decisions(proofs) == got
    assert [k for k, d in enumerate(got) if d != "ok"] == [where]
    want = "FormatError" if note is BAD_FORMAT else "SignatureError"
    assert got[where].startswith(want), got[where]
    # And again, the altered proof seen before and after the cached good note.
    assert decisions(proofs) == got


def test_a_note_that_failed_is_not_remembered_as_checked() -> None:
    with pytest.raises(FormatError):
        TlogProof.from_bytes(texts(altered=0, note=BAD_FORMAT)[0])
    with pytest.raises(FormatError):  # the second time too
        TlogProof.from_bytes(texts(altered=0, note=BAD_FORMAT)[0])
    with pytest.raises(FormatError):
        TlogProof(0, (), BAD_FORMAT)
