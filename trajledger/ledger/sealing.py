"""Sealed suites: rollout batch files stored encrypted to the evaluators' X25519 keys.

Scope: the cryptography of ``sealed`` rollout batches (schemas/SPEC.md, "Sealed suites"):

- `seal_files`: a fresh 32-byte data key per batch, wrapped for every recipient with RFC 9180
  HPKE (base mode, single shot: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305;
  ``info`` = ``trajledger-sealed-v1 key `` + the batch digest, which binds the wrapped key to
  its batch); each file encrypted with it into a ciphertext file, hashed as it is written;
- `open_file`: the reverse for one file read from the store, its ciphertext hashed as read (it
  must be the digest the signed record binds) and its plaintext checked against the manifest's
  digest and size;
- `fingerprints`: each episode's duplicate fingerprints (exact hash, near-duplicate sketch),
  computed from a plaintext step file as the record publishes them (recording publishes the
  features it computed while writing the step file, ``batch_features.published_episodes``;
  reading a suite checks them against its unsealed steps).

File format (one per manifest file): ``trajledger-sealed-v1\\n`` (21 bytes), a random 16-byte
salt, then the plaintext in 64 KiB segments, each sealed with ChaCha20-Poly1305 under
``HKDF-SHA256(data key, salt, "trajledger-sealed-v1 file " + plaintext digest)`` with the
nonce ``uint88(segment number) || final`` (``final`` is 1 on the last segment, else 0; an empty
file is one empty final segment): the STREAM construction as age uses it. Segments cannot be
reordered, dropped, truncated at a boundary or moved between files (the key depends on the
plaintext digest), and a file holds nothing after its final segment.

Non-scope: recording (``ledger.artifacts.record_batch`` with ``seal_to``), reading suites and
logging each unsealing (``ledger.suites``), the keys (``ledger.keys.KeyStore``), the published
fingerprints as features for the duplicate checks (``ledger.batch_features``).
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, hpke
from cryptography.hazmat.primitives.asymmetric import x25519
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from trajledger.verify.digest import DIGEST_PREFIX, FileDigest
from trajledger.verify.encryption_key import EncryptionKey
from trajledger.verify.errors import DigestMismatchError, FormatError, VerificationError
from trajledger.verify.policy import TrustPolicy
from trajledger.verify.sealed_files import SEAL_MAGIC, SEAL_SEGMENT, Sealed, SealedEpisode

from .errors import LedgerError

if TYPE_CHECKING:
    from .store import ObjectStore

__all__ = [
    "SealError",
    "fingerprints",
    "open_file",
    "seal_files",
    "seal_recipients",
    "sparse_sketches",
    "unwrap_key",
]

KEY_INFO = b"trajledger-sealed-v1 key "
FILE_INFO = b"trajledger-sealed-v1 file "
_SALT = 16
_TAG = 16


class SealError(VerificationError):
    """A sealed file cannot be opened: its wrapped key or a segment fails authentication
    (altered, truncated, or sealed for another batch or file)."""


def _suite() -> hpke.Suite:

    return hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)


def _file_key(data_key: bytes, salt: bytes, plain_digest: str) -> ChaCha20Poly1305:
    key = HKDF(hashes.SHA256(), 32, salt, FILE_INFO + plain_digest.encode("ascii"))
    return ChaCha20Poly1305(key.derive(data_key))


def _nonce(counter: int, final: bool) -> bytes:
    return counter.to_bytes(11, "big") + (b"\x01" if final else b"\x00")


def _segments(read: IO[bytes], size: int) -> Iterator[tuple[bytes, bool]]:
    """``size`` bytes of ``read`` in `SEAL_SEGMENT` pieces, each with "is the last one"."""
    left = size
    while True:
        piece = read.read(min(SEAL_SEGMENT, left))
        if len(piece) != min(SEAL_SEGMENT, left):
            raise LedgerError(f"{read.name}: changed while it was sealed")
        left -= len(piece)
        yield piece, left == 0
        if left == 0:
            return


def seal_files(
    batch: str,
    files: Mapping[str, FileDigest],
    recipients: Sequence[EncryptionKey],
    workdir: Path,
) -> tuple[tuple[tuple[str, str], ...], dict[str, FileDigest]]:
    """Encrypt a batch's files to ``recipients``.

    Steps:
        1. Draw a 32-byte data key; wrap it for each recipient (HPKE, ``info`` naming
           ``batch``).
        2. Encrypt each file (its plaintext digest known: it was hashed as written) into
           ``workdir``, hashing the ciphertext as it is written; the plaintext is read once
           and must still be the size it was.

    Args:
        batch: the batch digest (its plaintext manifest's).
        files: manifest path -> the plaintext file and its digest.
        recipients: the X25519 keys that may open it (the policy's evaluator keys).
        workdir: a private directory for the ciphertexts.

    Returns:
        The wrapped keys (keyid, base64 ``enc || ct``) and path -> ciphertext file.

    Raises:
        LedgerError: no recipient, a file that changed.
    """
    if not recipients:
        raise LedgerError(f"batch {batch[:19]}…: no recipient to seal it to; the policy's "
                          "evaluator role names no encryption_keys")
    # (1)
    data_key = os.urandom(32)
    suite = _suite()
    wrapped = tuple(
        (r.keyid, base64.b64encode(suite.encrypt(
            data_key, x25519.X25519PublicKey.from_public_bytes(r.raw),
            info=KEY_INFO + batch.encode("ascii"))).decode("ascii"))
        for r in sorted({r.keyid: r for r in recipients}.values(), key=lambda r: r.keyid)
    )
    # (2)
    out: dict[str, FileDigest] = {}
    for n, (path, plain) in enumerate(sorted(files.items())):
        salt = os.urandom(_SALT)
        aead = _file_key(data_key, salt, plain.digest)
        dest = workdir / f"sealed-{n}"
        h = hashlib.sha256()
        size = 0
        with open(plain.path, "rb") as src, open(dest, "xb") as sink:
            for i, (piece, final) in enumerate(_segments(src, plain.size)):
                chunk = (SEAL_MAGIC + salt if i == 0 else b"") + aead.encrypt(
                    _nonce(i, final), piece, None
                )
                h.update(chunk)
                sink.write(chunk)
                size += len(chunk)
            if src.read(1):
                raise LedgerError(f"{path}: changed while it was sealed")
        out[path] = FileDigest(dest, size, h.hexdigest())
    return wrapped, out


def unwrap_key(
    sealed: Sealed, batch: str, key: EncryptionKey, private: x25519.X25519PrivateKey
) -> bytes:
    """The batch's data key, unwrapped with ``private`` (whose public half is ``key``).

    Raises:
        SealError: not sealed to ``key``, or its wrapped key fails authentication.
    """
    found = [enc for keyid, enc in sealed.recipients if keyid == key.keyid]
    if not found:
        raise SealError(
            f"batch {batch[:19]}…: not sealed to encryption key {key.keyid[:16]}… (sealed to "
            f"{', '.join(k[:16] + '…' for k, _ in sealed.recipients)}); ask an evaluator whose "
            "key it is sealed to"
        )
    try:
        data_key: bytes = _suite().decrypt(
            base64.b64decode(found[0], validate=True), private,
            info=KEY_INFO + batch.encode("ascii"),
        )
    except (InvalidTag, ValueError) as e:
        raise SealError(f"batch {batch[:19]}…: its wrapped data key does not open with key "
                        f"{key.keyid[:16]}…: altered, or sealed for another batch") from e
    if len(data_key) != 32:
        raise SealError(f"batch {batch[:19]}…: the wrapped data key has {len(data_key)} bytes")
    return data_key


def open_file(
    store: ObjectStore,
    data_key: bytes,
    path: str,
    ciphertext: tuple[str, int],
    plain: tuple[str, int],
) -> bytes:
    """Decrypt one sealed file from the store.

    Steps:
        1. Stream the ciphertext, hashing it: it must be the digest and size the signed record
           binds (the bytes checked are the bytes decrypted).
        2. Check the header, then open each segment in order (the last one flagged final).
        3. The plaintext must hash to the manifest's digest, with its size.

    Args:
        store: where the ciphertext is.
        data_key: the batch's data key (`unwrap_key`).
        path: the manifest path (for messages).
        ciphertext: (digest, size) of the stored ciphertext, from the signed record.
        plain: (digest, size) of the plaintext, from the batch's manifest.

    Returns:
        The plaintext.

    Raises:
        DigestMismatchError: the ciphertext or plaintext is not what the record binds.
        SealError: a segment fails authentication, or the file is truncated or extended.
        StoreError: the ciphertext is not in the store.
    """
    digest, size = ciphertext
    # (1)
    buf = bytearray()
    with store.open_input(digest) as src:
        while len(buf) <= size and (piece := src.read(min(1 << 20, size + 1 - len(buf)))):
            buf += piece  # never more than one byte past the size bound
    raw = bytes(buf)
    got = DIGEST_PREFIX + hashlib.sha256(raw).hexdigest()
    if got != digest or len(raw) != size:
        raise DigestMismatchError(
            f"{path}: sealed blob {digest[:19]}… hashes to {got[:19]}… ({len(raw)} bytes), "
            f"want {size} bytes",
            subject=path, expected=digest, observed=got,
        )
    # (2)
    head = len(SEAL_MAGIC) + _SALT
    if raw[: len(SEAL_MAGIC)] != SEAL_MAGIC:
        raise SealError(f"{path}: sealed blob {digest[:19]}… is not a trajledger-sealed-v1 file")
    aead = _file_key(data_key, raw[len(SEAL_MAGIC):head], plain[0])
    view, pieces = memoryview(raw), []
    at, i = head, 0
    while True:
        chunk = view[at : at + SEAL_SEGMENT + _TAG]
        at += len(chunk)
        final = at == len(raw)
        try:
            pieces.append(aead.decrypt(_nonce(i, final), chunk, None))
        except InvalidTag as e:
            raise SealError(f"{path}: segment {i} of sealed blob {digest[:19]}… does not "
                            "authenticate: altered, truncated or of another file") from e
        i += 1
        if final:
            break
    out = b"".join(pieces)
    # (3)
    plain_digest = DIGEST_PREFIX + hashlib.sha256(out).hexdigest()
    if (plain_digest, len(out)) != plain:
        raise DigestMismatchError(
            f"{path}: decrypts to {plain_digest[:19]}… ({len(out)} bytes), the manifest says "
            f"{plain[0][:19]}… ({plain[1]} bytes)",
            subject=path, expected=plain[0], observed=plain_digest,
        )
    return out


def fingerprints(steps: str | os.PathLike[str] | bytes) -> tuple[SealedEpisode, ...]:
    """Every episode's duplicate fingerprints, from a step file (a path or its bytes): what
    the gate compares (``ledger.episode_features``), in file order, as published.

    Raises:
        FormatError: the file cannot be read for features.
    """
    import pyarrow as pa

    from .batch_features import published_episodes
    from .episode_features import (
        FEATURE_COLUMNS,
        FeatureChunk,
        iter_step_features,
        parquet_batches,
    )
    from .rollouts.parquet_read import BombError
    from .text_fingerprint import normalised_of

    try:
        chunk = FeatureChunk.concat(
            list(iter_step_features(parquet_batches(steps, FEATURE_COLUMNS)))
        )
        normalised = normalised_of(steps) if "text" in chunk.modality else None
    except (OSError, BombError, pa.ArrowException) as e:
        raise FormatError(f"steps.parquet: cannot be read for fingerprints: {e}") from e
    return published_episodes(chunk, normalised)


SPARSE_BUCKETS = 32
"""A published sketch with at least this many of its 128 buckets empty (zero) is sparse: its
episode has few values (an episode of about 180 numeric values or fewer, or of as many distinct
words and word pairs), a quarter or more of them alone in their bucket, where whoever reads the
record reads them back (docs/SECURITY.md, rev26)."""


def sparse_sketches(name: str, episodes: Sequence[SealedEpisode]) -> str | None:
    """The warning a sealed batch ``name`` needs when the near-duplicate sketches its record
    publishes give its episodes' values back (`SPARSE_BUCKETS`); None when none does. Every
    (step, feature) of a numeric episode, and every word or word pair of a text, goes to one
    bucket with one sign, both public: a value alone in its bucket is that bucket."""
    import numpy as np

    sparse = sum(1 for ep in episodes if ep.sketch is not None and int(np.count_nonzero(
        np.frombuffer(base64.b64decode(ep.sketch), "<f4") == 0)) >= SPARSE_BUCKETS)
    if not sparse:
        return None
    return (f"sealed batch {name}: {sparse} of its {len(episodes)} episode(s) are short: the "
            "near-duplicate sketches its record publishes (so that the gate needs no key) leave "
            f"at least {SPARSE_BUCKETS} of their 128 buckets empty, and whoever reads the ledger "
            "or a bundle of it can read many of their values back (each value alone in its "
            "bucket: a numeric step's obs, action or reward; a text's words by trying a "
            "dictionary); seal longer episodes, or keep the suite out of a shared ledger "
            "(docs/SECURITY.md, section 8)")


def seal_recipients(policy: TrustPolicy) -> tuple[EncryptionKey, ...]:
    """The X25519 keys sealed suites are encrypted to: the evaluator role's
    ``encryption_keys`` of ``policy``.

    Raises:
        LedgerError: the policy names none (a format-1 policy has no evaluator role).
    """
    keys = policy.role("evaluator").encryption_keys
    if not keys:
        raise LedgerError(
            f"policy {policy.name!r} serial {policy.serial}: its evaluator role names no "
            "encryption_keys, so nothing can be sealed to the evaluators; add them "
            "(format = 2, [roles.evaluator] encryption_keys; keys/README.md)"
        )
    return keys
