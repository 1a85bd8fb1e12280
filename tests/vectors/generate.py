"""Generate the language-neutral negative vectors for notes, checkpoints and tlog-proofs.

TEST ONLY: the private keys below come from fixed, public seeds. They sign nothing real.

Writes ``tests/vectors/{note,checkpoint,tlog-proof}/<case>.json``. Each case is named after the
mutation it applies (``missing-blank-line``, ``proof-bit-flip-2``, ``checkpoint-rollback``, ...)
and holds ``description``, its inputs, ``expected_error`` (an exception class name from
``verify.errors``, or null when the input is valid) and ``expected_message`` (a regular
expression the error message must match). Ed25519 signatures are deterministic, so running this
again gives the same bytes; ``tests/unit/verify/test_vectors_generated.py`` checks that.

Run from the repository root: ``python tests/vectors/generate.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # pragma: no cover - script use without an installed package
    sys.path.insert(0, str(HERE.parent.parent))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from trajledger.ledger import encode  # noqa: E402
from trajledger.ledger.encode import format_signature_line, tlog_proof_bytes, vkey_string  # noqa: E402
from trajledger.verify.checkpoint import Checkpoint  # noqa: E402
from trajledger.verify.cosigned import cosignature_message  # noqa: E402
from trajledger.verify.merkle import leaf_hash  # noqa: E402
from trajledger.verify.note import (  # noqa: E402
    ALG_COSIGNATURE_V1,
    ALG_ED25519,
    key_hash,
)
from trajledger.verify.tiles import (  # noqa: E402
    TILE_HEIGHT,
    TILE_WIDTH,
    TileReader,
    entries_path,
    format_entry_bundle,
    tile_path,
    tile_width,
)
from trajledger.verify.tlog_proof import TlogProof  # noqa: E402

Case = dict[str, Any]

# -- TEST ONLY keys ---------------------------------------------------------------------------


def test_key(label: str) -> Ed25519PrivateKey:
    """Return the TEST ONLY Ed25519 key derived from a fixed seed."""
    seed = hashlib.sha256(b"trajledger TEST ONLY key: " + label.encode()).digest()
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_bytes(key: Ed25519PrivateKey) -> bytes:
    """Return the raw 32-byte public key."""
    return key.public_key().public_bytes_raw()


LOG_NAME = "log.trajledger.test/vectors"
LOG_KEY = test_key("log")
OTHER_LOG_KEY = test_key("other log")
WITNESS_NAME = "witness.trajledger.test/w1"
WITNESS_KEY = test_key("witness 1")
WITNESS2_NAME = "witness.trajledger.test/w2"
WITNESS2_KEY = test_key("witness 2")
COSIGN_TIME = 1_700_000_000

LOG_VKEY = vkey_string(LOG_NAME, public_bytes(LOG_KEY))
OTHER_LOG_VKEY = vkey_string(LOG_NAME, public_bytes(OTHER_LOG_KEY))
WITNESS_VKEY = vkey_string(WITNESS_NAME, public_bytes(WITNESS_KEY), ALG_COSIGNATURE_V1)
WITNESS2_VKEY = vkey_string(WITNESS2_NAME, public_bytes(WITNESS2_KEY), ALG_COSIGNATURE_V1)


def sign_line(text: bytes, name: str, key: Ed25519PrivateKey) -> bytes:
    """Return an Ed25519 note signature line over ``text``."""
    kh = key_hash(name, ALG_ED25519, public_bytes(key))
    return format_signature_line(name, kh, key.sign(text))


def cosign_line(
    text: bytes, name: str, key: Ed25519PrivateKey, timestamp: int = COSIGN_TIME
) -> bytes:
    """Return a tlog-cosignature v1 signature line over checkpoint ``text``."""
    kh = key_hash(name, ALG_COSIGNATURE_V1, public_bytes(key))
    sig = struct.pack(">Q", timestamp) + key.sign(cosignature_message(text, timestamp))
    return format_signature_line(name, kh, sig)


def signed(text: bytes, *lines: bytes) -> bytes:
    """Assemble a note from its text and signature lines."""
    return text + b"\n" + b"".join(lines)


def flip(data: bytes, i: int, bit: int = 0) -> bytes:
    """Return ``data`` with one bit of byte ``i`` flipped."""
    out = bytearray(data)
    out[i] ^= 1 << bit
    return bytes(out)


def tamper(line: bytes, i: int, bit: int = 0) -> bytes:
    """Return a signature line with one bit of its signature (after the key ID) flipped."""
    name, sig64 = line.decode().rstrip("\n").split(" ")[1:]
    raw = base64.b64decode(sig64)
    return format_signature_line(name, raw[:4], flip(raw[4:], i, bit))


def b64(data: bytes) -> str:
    """Standard base64 text."""
    return base64.b64encode(data).decode()


# -- a small log --------------------------------------------------------------------------------

ENTRIES = [f"entry {i}".encode() for i in range(13)]


def build_tiles(entries: list[bytes]) -> dict[str, bytes]:
    """Return the tile and entry-bundle files of a log holding ``entries`` (TEST ONLY writer).

    Writes, for the final size only, every full tile and the partial tile at each level.
    """
    size = len(entries)
    files: dict[str, bytes] = {}
    hashes = [leaf_hash(e) for e in entries]
    for n in range(0, size, TILE_WIDTH):
        chunk = entries[n : n + TILE_WIDTH]
        files[entries_path(n // TILE_WIDTH, len(chunk))] = format_entry_bundle(chunk)
    level = 0
    while hashes:
        for n in range(0, len(hashes), TILE_WIDTH):
            w = tile_width(level, n // TILE_WIDTH, size)
            files[tile_path(level, n // TILE_WIDTH, w)] = b"".join(hashes[n : n + TILE_WIDTH])
        # The next tile level holds the roots of the full tiles of this one.
        full = len(hashes) // TILE_WIDTH
        nxt = []
        for n in range(full):
            layer = hashes[n * TILE_WIDTH : (n + 1) * TILE_WIDTH]
            for _ in range(TILE_HEIGHT):
                layer = [
                    hashlib.sha256(b"\x01" + layer[i] + layer[i + 1]).digest()
                    for i in range(0, len(layer), 2)
                ]
            nxt.extend(layer)
        hashes = nxt
        level += 1
    return files


def reader(entries: list[bytes], size: int | None = None) -> TileReader:
    """A TileReader over an in-memory log of ``entries``."""
    files = build_tiles(entries)

    def fetch(path: str) -> bytes:
        try:
            return files[path]
        except KeyError:
            raise FileNotFoundError(path) from None

    return TileReader(fetch, len(entries) if size is None else size)


def checkpoint_text(size: int, origin: str = LOG_NAME, extensions: tuple[str, ...] = ()) -> bytes:
    """The checkpoint text of the vector log at ``size``."""
    root = reader(ENTRIES[:size]).root()
    return encode.checkpoint_text(Checkpoint(origin, size, root, extensions))


def signed_checkpoint(size: int) -> bytes:
    """The vector log's checkpoint at ``size``, signed by the log key."""
    text = checkpoint_text(size)
    return signed(text, sign_line(text, LOG_NAME, LOG_KEY))


# -- cases --------------------------------------------------------------------------------------


def note_cases() -> dict[str, Case]:
    """Signed-note parsing and verification cases."""
    text = b"An example note.\nIt has two lines.\n"
    good = sign_line(text, LOG_NAME, LOG_KEY)
    other = sign_line(text, LOG_NAME, OTHER_LOG_KEY)
    stranger = sign_line(text, "stranger.test/key", test_key("stranger"))
    raw_sig = base64.b64decode(good.decode().split(" ")[2])
    cases: dict[str, Case] = {}

    def case(
        name: str,
        description: str,
        note: bytes,
        error: str | None,
        message: str = "",
        vkeys: tuple[str, ...] = (LOG_VKEY,),
        names: tuple[str, ...] = (LOG_NAME,),
    ) -> None:
        c: Case = {"description": description, "vkeys": list(vkeys)}
        try:
            c["note"] = note.decode("utf-8")
        except UnicodeDecodeError:
            c["note_b64"] = b64(note)
        c["expected_error"] = error
        if error is None:
            c["expected_names"] = list(names)
        else:
            c["expected_message"] = message
        cases[name] = c

    case("valid", "a note signed by the known key", signed(text, good), None)
    case(
        "valid-with-unknown-signatures",
        "signatures by unknown keys are ignored, even one sharing the known key's name",
        signed(text, stranger, other, good),
        None,
    )
    case(
        "valid-text-with-blank-lines",
        "the text may hold blank lines; the last blank line separates the signatures",
        signed(b"a\n\nb\n", sign_line(b"a\n\nb\n", LOG_NAME, LOG_KEY)),
        None,
    )
    many = [sign_line(text, f"k{i}.test/key", test_key(f"k{i}")) for i in range(99)]
    case("hundred-signatures", "100 signature lines are accepted", signed(text, *many, good), None)
    case(
        "too-many-signatures",
        "101 signature lines are refused before any is verified",
        signed(text, *many, stranger, good),
        "FormatError",
        "101 signature lines, want at most 100",
    )
    case(
        "missing-blank-line",
        "no blank line between the text and the signatures",
        text + good,
        "FormatError",
        "no blank line",
    )
    case(
        "bad-em-dash",
        "signature line starts with a hyphen-minus instead of U+2014",
        signed(text, b"-" + good[3:]),
        "FormatError",
        "em dash",
    )
    case(
        "en-dash",
        "signature line starts with U+2013 EN DASH",
        signed(text, "\u2013".encode() + good[3:]),
        "FormatError",
        "em dash",
    )
    case(
        "trailing-garbage",
        "bytes after the last signature line",
        signed(text, good) + b"junk",
        "FormatError",
        "does not end in a newline",
    )
    case(
        "trailing-garbage-line",
        "a line after the signatures that is not a signature line",
        signed(text, good, b"junk\n"),
        "FormatError",
        "signature line 2: does not start with an em dash",
    )
    case(
        "no-signatures",
        "a blank line and nothing after it",
        text + b"\n",
        "FormatError",
        "no signature lines",
    )
    case(
        "invalid-utf8",
        "a byte that is not UTF-8 in the text",
        signed(b"An \xff note.\n", good),
        "FormatError",
        "not valid UTF-8",
    )
    case(
        "control-character",
        "a carriage return in the text",
        signed(b"An example note.\r\n", good),
        "FormatError",
        "control character U\\+000D",
    )
    case(
        "name-with-plus",
        "a key name containing '+'",
        signed(text, good.replace(LOG_NAME.encode(), LOG_NAME.encode() + b"+x")),
        "FormatError",
        "must be non-empty, without spaces or '\\+'",
    )
    case(
        "empty-name",
        "no key name between the em dash and the signature",
        signed(text, "\u2014  ".encode() + b64(raw_sig).encode() + b"\n"),
        "FormatError",
        "must be non-empty",
    )
    case(
        "non-canonical-base64",
        "signature base64 with padding bits set (decodes, but is not the canonical spelling)",
        signed(text, good[:-3] + b"R=\n"),
        "FormatError",
        "not canonical standard base64",
    )
    case(
        "url-safe-base64",
        "signature in URL-safe base64",
        signed(text, good.replace(b"+", b"-").replace(b"/", b"_"))
        if b"+" in good or b"/" in good
        else signed(text, good[:-3] + b"-=\n"),
        "FormatError",
        "not standard base64",
    )
    case(
        "short-signature",
        "signature of 4 bytes: a key ID and nothing else",
        signed(
            text, "\u2014 ".encode() + LOG_NAME.encode() + b" " + b64(raw_sig[:4]).encode() + b"\n"
        ),
        "FormatError",
        "want at least 5",
    )
    case(
        "signature-bit-flip",
        "one bit of the known key's signature flipped",
        signed(text, tamper(good, 10)),
        "SignatureError",
        "does not verify",
    )
    case(
        "modified-text",
        "the text changed after signing",
        signed(b"An example note.\nIt has three lines.\n", good),
        "SignatureError",
        "does not verify",
    )
    case(
        "unknown-key-only",
        "signed only by another key with the same name (different key ID)",
        signed(text, other),
        "SignatureError",
        "no signature by a known key",
    )
    case(
        "wrong-key-id",
        "the known key's name with a key ID of another key",
        signed(text, format_signature_line(LOG_NAME, flip(raw_sig[:4], 0), raw_sig[4:])),
        "SignatureError",
        "no signature by a known key",
    )
    case(
        "repeated-bad-signature",
        "a valid signature, then a failing one by the same key (every line of a known key counts)",
        signed(text, good, tamper(good, 0)),
        "SignatureError",
        "signature line 2 .* does not verify",
    )
    cp_text = checkpoint_text(5)
    case(
        "cosignature",
        "a checkpoint cosigned by a tlog-cosignature v1 witness",
        signed(
            cp_text,
            sign_line(cp_text, LOG_NAME, LOG_KEY),
            cosign_line(cp_text, WITNESS_NAME, WITNESS_KEY),
        ),
        None,
        vkeys=(WITNESS_VKEY,),
        names=(WITNESS_NAME,),
    )
    cosig = cosign_line(cp_text, WITNESS_NAME, WITNESS_KEY)
    cosig_raw = base64.b64decode(cosig.decode().split(" ")[2])
    case(
        "cosignature-timestamp-changed",
        "the cosignature's timestamp changed after signing",
        signed(cp_text, tamper(cosig, 7)),
        "SignatureError",
        "does not verify",
        vkeys=(WITNESS_VKEY,),
    )
    case(
        "cosignature-as-plain-ed25519",
        "a witness Ed25519 signature over the bare text under the cosignature key ID",
        signed(
            cp_text,
            format_signature_line(
                WITNESS_NAME, cosig_raw[:4], cosig_raw[4:12] + WITNESS_KEY.sign(cp_text)
            ),
        ),
        "SignatureError",
        "does not verify",
        vkeys=(WITNESS_VKEY,),
    )
    identity = (1).to_bytes(32, "little")  # the neutral point: a key of order 1
    weak_vkey = (f"{LOG_NAME}+{key_hash(LOG_NAME, ALG_ED25519, identity).hex()}+"
                 + b64(bytes([ALG_ED25519]) + identity))
    case(
        "small-order-key",
        "a vkey holding a point of small order (here the identity): R = identity, S = 0 "
        "verifies as its signature of any text in OpenSSL, so the key is refused when read",
        signed(text, format_signature_line(
            LOG_NAME, key_hash(LOG_NAME, ALG_ED25519, identity), identity + bytes(32))),
        "FormatError",
        "small order or not canonical",
        vkeys=(weak_vkey,),
    )
    return cases


def checkpoint_cases() -> dict[str, Case]:
    """Checkpoint signature, format, cosignature and consistency cases."""
    cases: dict[str, Case] = {}

    def verify_case(
        name: str,
        description: str,
        note: bytes,
        error: str | None,
        message: str = "",
        origin: str | None = None,
        vkey: str = LOG_VKEY,
    ) -> None:
        c: Case = {
            "description": description,
            "check": "verify_checkpoint",
            "note": note.decode(),
            "vkey": vkey,
            "origin": origin,
            "expected_error": error,
        }
        if error:
            c["expected_message"] = message
        cases[name] = c

    def body_case(name: str, description: str, text: bytes, message: str) -> None:
        verify_case(
            name,
            description,
            signed(text, sign_line(text, LOG_NAME, LOG_KEY)),
            "FormatError",
            message,
        )

    good_text = checkpoint_text(7)
    origin, size, root = good_text.decode().splitlines()
    verify_case("valid", "a checkpoint signed by the log key", signed_checkpoint(7), None)
    verify_case("valid-empty-tree", "the checkpoint of the empty tree", signed_checkpoint(0), None)
    ext_text = checkpoint_text(7, extensions=("ext one", "ext two"))
    verify_case(
        "valid-extensions",
        "extension lines after the root",
        signed(ext_text, sign_line(ext_text, LOG_NAME, LOG_KEY)),
        None,
    )
    verify_case(
        "expected-origin",
        "the origin the caller expects",
        signed_checkpoint(7),
        None,
        origin=LOG_NAME,
    )
    verify_case(
        "unexpected-origin",
        "a valid checkpoint of another log than the caller expects",
        signed_checkpoint(7),
        "PolicyError",
        "want 'log.trajledger.test/other'",
        origin="log.trajledger.test/other",
    )
    verify_case(
        "wrong-log-key",
        "signed by another key under the log's name",
        signed(good_text, sign_line(good_text, LOG_NAME, OTHER_LOG_KEY)),
        "SignatureError",
        "no signature by a known key",
    )
    verify_case(
        "signature-bit-flip",
        "one bit of the log signature flipped",
        signed(good_text, tamper(sign_line(good_text, LOG_NAME, LOG_KEY), 20)),
        "SignatureError",
        "does not verify",
    )
    bad_origin = f"other.test/log\n{size}\n{root}\n".encode()
    verify_case(
        "origin-not-key-name",
        "signed by the log key, but for an origin that is not the key's name",
        signed(bad_origin, sign_line(bad_origin, LOG_NAME, LOG_KEY)),
        "SignatureError",
        "does not match log key name",
    )
    body_case(
        "size-leading-zero",
        "tree size with a leading zero",
        f"{origin}\n07\n{root}\n".encode(),
        "leading zeros",
    )
    body_case(
        "size-plus-sign",
        "tree size with a plus sign",
        f"{origin}\n+7\n{root}\n".encode(),
        "leading zeros",
    )
    body_case(
        "size-negative", "negative tree size", f"{origin}\n-7\n{root}\n".encode(), "leading zeros"
    )
    body_case(
        "size-not-decimal", "tree size in hex", f"{origin}\n0x7\n{root}\n".encode(), "leading zeros"
    )
    body_case(
        "size-too-large",
        "tree size of 2**64",
        f"{origin}\n{1 << 64}\n{root}\n".encode(),
        "want 0..2\\*\\*64-1",
    )
    body_case(
        "root-short",
        "root of 31 bytes",
        f"{origin}\n{size}\n{b64(base64.b64decode(root)[:31])}\n".encode(),
        "root has 31 bytes, want 32",
    )
    body_case(
        "root-not-base64",
        "root that is not base64",
        f"{origin}\n{size}\n{root[:-1]}!\n".encode(),
        "not standard base64",
    )
    body_case(
        "root-url-safe-base64",
        "root in URL-safe base64",
        f"{origin}\n{size}\n{root.replace('+', '-').replace('/', '_')}\n".encode()
        if ("+" in root or "/" in root)
        else f"{origin}\n{size}\n-{root[1:]}\n".encode(),
        "not standard base64",
    )
    body_case(
        "missing-root-line",
        "only origin and size",
        f"{origin}\n{size}\n".encode(),
        "2 lines, want at least 3",
    )
    body_case(
        "empty-origin", "an empty first line", f"\n{size}\n{root}\n".encode(),
        "origin line is empty",
    )
    body_case(
        "empty-extension-line",
        "an empty line among the extension lines",
        f"{origin}\n{size}\n{root}\n\next\n".encode(),
        "extension line is empty",
    )

    # Witness cosignatures.
    def cosig_case(
        name: str,
        description: str,
        note: bytes,
        error: str | None,
        message: str = "",
        threshold: int = 1,
        not_after: int | None = None,
        names: tuple[str, ...] = (),
    ) -> None:
        c: Case = {
            "description": description,
            "check": "verify_cosignatures",
            "note": note.decode(),
            "vkey": LOG_VKEY,
            "witness_vkeys": [WITNESS_VKEY, WITNESS2_VKEY],
            "threshold": threshold,
            "not_after": not_after,
            "expected_error": error,
        }
        if error:
            c["expected_message"] = message
        else:
            c["expected_witnesses"] = list(names)
        cases[name] = c

    log_line = sign_line(good_text, LOG_NAME, LOG_KEY)
    w1 = cosign_line(good_text, WITNESS_NAME, WITNESS_KEY)
    w2 = cosign_line(good_text, WITNESS2_NAME, WITNESS2_KEY, COSIGN_TIME + 5)
    cosig_case(
        "cosigned-2-of-2",
        "two witnesses cosigned",
        signed(good_text, log_line, w1, w2),
        None,
        threshold=2,
        names=(WITNESS_NAME, WITNESS2_NAME),
    )
    cosig_case(
        "cosigned-below-threshold",
        "one witness cosigned, two required",
        signed(good_text, log_line, w1),
        "SignatureError",
        "1 valid witness cosignatures, want at least 2",
        threshold=2,
    )
    cosig_case(
        "cosignature-from-future",
        "a cosignature timestamped after the verifier's clock",
        signed(good_text, log_line, w1),
        "SignatureError",
        f"timestamped {COSIGN_TIME}, want at most {COSIGN_TIME - 1}",
        not_after=COSIGN_TIME - 1,
    )
    cosig_case(
        "cosignature-bit-flip",
        "one bit of a witness cosignature flipped",
        signed(good_text, log_line, tamper(w1, 40), w2),
        "SignatureError",
        "does not verify",
    )
    other_text = checkpoint_text(6)
    cosig_case(
        "cosignature-of-other-checkpoint",
        "a witness cosignature copied from another checkpoint",
        signed(good_text, log_line, cosign_line(other_text, WITNESS_NAME, WITNESS_KEY)),
        "SignatureError",
        "does not verify",
    )

    # Consistency between two checkpoints.
    def consistency_case(
        name: str,
        description: str,
        old: bytes,
        new: bytes,
        proof: list[bytes],
        error: str | None,
        message: str = "",
    ) -> None:
        c: Case = {
            "description": description,
            "check": "check_consistent",
            "vkey": LOG_VKEY,
            "old_note": old.decode(),
            "new_note": new.decode(),
            "proof_b64": [b64(h) for h in proof],
            "expected_error": error,
        }
        if error:
            c["expected_message"] = message
        cases[name] = c

    proof = reader(ENTRIES[:11]).consistency_proof(6)
    consistency_case(
        "consistent",
        "size 6 then 11 with a valid proof",
        signed_checkpoint(6),
        signed_checkpoint(11),
        proof,
        None,
    )
    consistency_case(
        "consistent-same",
        "the same checkpoint twice",
        signed_checkpoint(6),
        signed_checkpoint(6),
        [],
        None,
    )
    consistency_case(
        "consistent-from-empty",
        "the empty tree then size 11",
        signed_checkpoint(0),
        signed_checkpoint(11),
        [],
        None,
    )
    consistency_case(
        "checkpoint-rollback",
        "the newer checkpoint is smaller than the one seen before",
        signed_checkpoint(11),
        signed_checkpoint(6),
        proof,
        "ConsistencyError",
        "rollback .* size 6 is smaller than the 11 seen before",
    )
    fork_text = encode.checkpoint_text(Checkpoint(LOG_NAME, 11, leaf_hash(b"fork"), ()))
    fork = signed(fork_text, sign_line(fork_text, LOG_NAME, LOG_KEY))
    consistency_case(
        "checkpoint-fork",
        "two signed checkpoints of the same size with different roots",
        signed_checkpoint(11),
        fork,
        [],
        "ConsistencyError",
        "fork .* two roots at size 11",
    )
    consistency_case(
        "fork-at-larger-size",
        "a larger checkpoint whose root the proof cannot reach",
        signed_checkpoint(6),
        fork,
        proof,
        "ConsistencyError",
        "not consistent: consistency proof from size 6 to size 11 leads to new root",
    )
    for i in range(len(proof)):
        consistency_case(
            f"proof-bit-flip-{i}",
            f"one bit of consistency proof hash {i} flipped",
            signed_checkpoint(6),
            signed_checkpoint(11),
            [flip(h, 3) if j == i else h for j, h in enumerate(proof)],
            "ConsistencyError",
            "not consistent: consistency proof from size 6 to size 11 leads to",
        )
    consistency_case(
        "proof-truncated",
        "the last consistency proof hash removed",
        signed_checkpoint(6),
        signed_checkpoint(11),
        proof[:-1],
        "ConsistencyError",
        f"has {len(proof) - 1} hashes, want {len(proof)}",
    )
    return cases


def tlog_proof_cases() -> dict[str, Case]:
    """c2sp.org/tlog-proof@v1 parsing and verification cases."""
    size, index = 13, 9
    log = reader(ENTRIES)
    incl = log.inclusion_proof(index)
    cp_text = checkpoint_text(size)
    cp = signed(cp_text, sign_line(cp_text, LOG_NAME, LOG_KEY))
    good = tlog_proof_bytes(TlogProof(index, tuple(incl), cp, extra=b"opaque extra data"))
    plain = tlog_proof_bytes(TlogProof(index, tuple(incl), cp))
    cases: dict[str, Case] = {}

    def case(
        name: str,
        description: str,
        proof: bytes,
        error: str | None,
        message: str = "",
        entry: bytes = ENTRIES[index],
        vkey: str = LOG_VKEY,
    ) -> None:
        c: Case = {
            "description": description,
            "proof": proof.decode(),
            "entry_b64": b64(entry),
            "vkey": vkey,
            "origin": LOG_NAME,
            "expected_error": error,
        }
        if error:
            c["expected_message"] = message
        cases[name] = c

    header, *_ = plain.split(b"\n", 1)
    case(
        "valid",
        "an entry, its index, inclusion proof and signed checkpoint, with extra data",
        good,
        None,
    )
    case("valid-no-extra", "the same proof without the extra line", plain, None)
    case(
        "valid-first-entry",
        "entry 0",
        tlog_proof_bytes(TlogProof(0, tuple(log.inclusion_proof(0)), cp)),
        None,
        entry=ENTRIES[0],
    )
    case(
        "valid-single-entry-tree",
        "the only entry of a tree of size 1 (empty inclusion proof)",
        tlog_proof_bytes(TlogProof(0, (), signed_checkpoint(1))),
        None,
        entry=ENTRIES[0],
    )
    case(
        "wrong-leaf",
        "the proof is for another entry",
        plain,
        "ProofError",
        f"inclusion proof for leaf {index} \\(size {size}\\) leads to root",
        entry=ENTRIES[index - 1],
    )
    case(
        "wrong-index",
        "the index of a neighbouring entry",
        tlog_proof_bytes(TlogProof(index - 1, tuple(incl), cp)),
        "ProofError",
        f"leaf {index - 1} \\(size {size}\\) leads to root",
    )
    case(
        "index-beyond-size",
        "an index past the checkpoint's tree size",
        tlog_proof_bytes(TlogProof(size, tuple(incl), cp)),
        "ProofError",
        f"want 0 <= index < {size}",
    )
    for i in range(len(incl)):
        case(
            f"proof-bit-flip-{i}",
            f"one bit of inclusion proof hash {i} flipped",
            tlog_proof_bytes(TlogProof(
                index, tuple(flip(h, 0) if j == i else h for j, h in enumerate(incl)), cp
            )),
            "ProofError",
            "leads to root",
        )
    case(
        "proof-hash-removed",
        "the last inclusion hash removed",
        tlog_proof_bytes(TlogProof(index, tuple(incl[:-1]), cp)),
        "ProofError",
        f"has {len(incl) - 1} hashes, want {len(incl)}",
    )
    case(
        "proof-hash-added",
        "an extra inclusion hash appended",
        tlog_proof_bytes(TlogProof(index, (*incl, incl[0]), cp)),
        "ProofError",
        f"has {len(incl) + 1} hashes, want {len(incl)}",
    )
    case(
        "checkpoint-signature-bit-flip",
        "one bit of the checkpoint's log signature flipped",
        tlog_proof_bytes(TlogProof(
            index, tuple(incl), signed(cp_text, tamper(sign_line(cp_text, LOG_NAME, LOG_KEY), 2))
        )),
        "SignatureError",
        "does not verify",
    )
    case(
        "checkpoint-wrong-key",
        "the checkpoint signed by another key under the log's name",
        tlog_proof_bytes(TlogProof(
            index, tuple(incl), signed(cp_text, sign_line(cp_text, LOG_NAME, OTHER_LOG_KEY))
        )),
        "SignatureError",
        "no signature by a known key",
    )
    case(
        "bad-header",
        "a header line of another version",
        plain.replace(header, b"c2sp.org/tlog-proof@v2", 1),
        "FormatError",
        "want b'c2sp.org/tlog-proof@v1'",
    )
    case(
        "index-leading-zero",
        "an index with a leading zero",
        plain.replace(f"index {index}\n".encode(), f"index 0{index}\n".encode(), 1),
        "FormatError",
        "want 'index <decimal without leading zeros>'",
    )
    case(
        "extra-not-base64",
        "extra data that is not base64",
        good.replace(b"extra ", b"extra !", 1),
        "FormatError",
        "extra data",
    )
    case(
        "missing-blank-line",
        "no blank line between the proof hashes and the checkpoint",
        plain.replace(b"\n\n", b"\n", 1),
        "FormatError",
        "hash 4",
    )
    case(
        "hash-short",
        "an inclusion hash of 31 bytes",
        plain.replace(b64(incl[1]).encode(), b64(incl[1][:31]).encode(), 1),
        "FormatError",
        "hash 1 has 31 bytes, want 32",
    )
    case(
        "trailing-garbage",
        "bytes after the checkpoint's signature lines",
        plain + b"junk\n",
        "FormatError",
        "signature line 2: does not start with an em dash",
    )
    return cases


GROUPS: dict[str, Callable[[], dict[str, Case]]] = {
    "note": note_cases,
    "checkpoint": checkpoint_cases,
    "tlog-proof": tlog_proof_cases,
}


def render(case: Case) -> bytes:
    """The exact bytes a case is stored as."""
    return (json.dumps(case, indent=2, ensure_ascii=False) + "\n").encode()


def generate() -> dict[str, bytes]:
    """Return every vector file, keyed by its path relative to ``tests/vectors``."""
    out: dict[str, bytes] = {}
    for group, make in GROUPS.items():
        for name, case in make().items():
            out[f"{group}/{name}.json"] = render(case)
    return out


def main() -> None:
    """Write the vector files next to this script, replacing stale ones."""
    files = generate()
    for group in GROUPS:
        for old in (HERE / group).glob("*.json"):
            if f"{group}/{old.name}" not in files:
                old.unlink()
    for rel, data in files.items():
        path = HERE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    print(f"wrote {len(files)} vector files under {HERE}")


if __name__ == "__main__":
    main()
