"""Sealing (``ledger.sealing``) and X25519 keys (``ledger.keys.KeyStore``).

- Known answer: a sealed file is byte for byte the format of schemas/SPEC.md ("Sealed suites"),
  rebuilt here from the primitives (the data key and salt fixed), and its size is the rule.
- Round trips of empty, one-byte, one-segment, segment-boundary and multi-segment files; the
  wrapped data key is RFC 9180 HPKE (``cryptography``'s suite opens it with the stated info).
- One test per attack: a flipped byte, a dropped or reordered segment, a file's ciphertext
  under another file's name, a wrapped key moved to another batch, another recipient's key, a
  ciphertext that is not what the record binds.
- Fingerprints published for a sealed batch equal the gate's features of the plaintext (the
  same feature version, dimensions and bytes); another version's are not compared.
- X25519 keys: encrypted at rest (0600), the passphrase needed, a private key that is not the
  pair of its .pub refused, a world-readable one refused.
"""

from __future__ import annotations

import base64
import dataclasses
import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, hpke
from cryptography.hazmat.primitives.asymmetric import x25519
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from trajledger.ledger.episode_features import FEATURE_VERSION
from trajledger.ledger.errors import KeyError_, TamperError
from trajledger.ledger.keys import KeyStore
from trajledger.ledger.sealing import SealError, open_file, seal_files, unwrap_key
from trajledger.ledger.store import ObjectStore
from trajledger.verify.digest import FileDigest, hash_file
from trajledger.verify.encryption_key import EncryptionKey
from trajledger.verify.errors import DigestMismatchError
from trajledger.verify.sealed_files import SEAL_SEGMENT, Sealed

BATCH = "sha256:" + "ab" * 32


def keypair() -> tuple[EncryptionKey, x25519.X25519PrivateKey]:
    from cryptography.hazmat.primitives import serialization as ser

    private = x25519.X25519PrivateKey.generate()
    pem = private.public_key().public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo)
    return EncryptionKey.from_pem(pem), private


def plain(tmp: Path, name: str, data: bytes) -> FileDigest:
    path = tmp / name
    path.write_bytes(data)
    return hash_file(path)


def seal(
    tmp: Path, files: dict[str, bytes], recipients: list[EncryptionKey]
) -> tuple[ObjectStore, Sealed, dict[str, FileDigest]]:
    """Seal ``files`` into a new store; returns it, the ``sealed`` record and the plaintexts."""
    store = ObjectStore(tmp / "objects")
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    plains = {n: plain(work, f"plain-{i}", d) for i, (n, d) in enumerate(sorted(files.items()))}
    wrapped, cts = seal_files(BATCH, plains, recipients, work)
    for c in cts.values():
        store.put_file(c.path)
    files = {p: (c.digest, c.size) for p, c in cts.items()}
    return store, Sealed(wrapped, files, (), FEATURE_VERSION), plains


def reference(data_key: bytes, salt: bytes, digest: str, data: bytes) -> bytes:
    """The sealed-file format, spec-literal: magic, salt, 64 KiB segments under the file key,
    nonce = 11-byte big-endian counter || final flag."""
    key = HKDF(hashes.SHA256(), 32, salt, b"trajledger-sealed-v1 file " + digest.encode())
    aead = ChaCha20Poly1305(key.derive(data_key))
    pieces = [data[i:i + SEAL_SEGMENT] for i in range(0, len(data), SEAL_SEGMENT)] or [b""]
    out = b"trajledger-sealed-v1\n" + salt
    for n, piece in enumerate(pieces):
        final = b"\x01" if n == len(pieces) - 1 else b"\x00"
        out += aead.encrypt(n.to_bytes(11, "big") + final, piece, None)
    return out


@pytest.mark.parametrize("size", [0, 1, SEAL_SEGMENT, SEAL_SEGMENT + 1, 3 * SEAL_SEGMENT + 7])
def test_known_answer_and_round_trip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    draws = iter([bytes(range(32)), bytes(range(100, 116))])  # the data key, then the salt
    monkeypatch.setattr(os, "urandom", lambda n: next(draws))
    key, private = keypair()
    store, sealed, plains = seal(tmp_path, {"steps.parquet": data}, [key])
    digest, n = sealed.files["steps.parquet"]
    blob = store.get(digest)
    want = reference(bytes(range(32)), bytes(range(100, 116)), plains["steps.parquet"].digest,
                     data)
    assert blob == want
    assert n == len(blob) == Sealed.ciphertext_size(size)
    # The wrapped key: RFC 9180 single-shot output, opened by the library's HPKE suite.
    (keyid, enc), = sealed.recipients
    assert keyid == key.keyid and len(base64.b64decode(enc)) == 80
    suite = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)
    assert suite.decrypt(base64.b64decode(enc), private,
                         info=b"trajledger-sealed-v1 key " + BATCH.encode()) == bytes(range(32))
    data_key = unwrap_key(sealed, BATCH, key, private)
    p = plains["steps.parquet"]
    assert open_file(store, data_key, "steps.parquet", (digest, n), (p.digest, p.size)) == data


def sealed_one(tmp: Path, data: bytes) -> tuple[ObjectStore, Sealed, bytes, tuple[str, int],
                                                    EncryptionKey, x25519.X25519PrivateKey]:
    key, private = keypair()
    store, sealed, plains = seal(tmp, {"a": data, "b": data[::-1]}, [key])
    p = plains["a"]
    return store, sealed, unwrap_key(sealed, BATCH, key, private), (p.digest, p.size), key, \
        private


def reput(store: ObjectStore, data: bytes) -> tuple[str, int]:
    return store.put_bytes(data), len(data)


def test_attacks_on_sealed_files(tmp_path: Path) -> None:
    data = os.urandom(2 * SEAL_SEGMENT + 10)
    store, sealed, data_key, p, _key, _private = sealed_one(tmp_path, data)
    blob = store.get(sealed.files["a"][0])
    head, seg = 37, SEAL_SEGMENT + 16
    # (1) One byte flipped (the attacker also stores it under its new digest).
    flipped = bytearray(blob)
    flipped[head + 5] ^= 1
    with pytest.raises(SealError, match=r"segment 0 of sealed blob .* does not authenticate"):
        open_file(store, data_key, "a", reput(store, bytes(flipped)), p)
    # (2) The last segment dropped: the one before is not flagged final.
    with pytest.raises(SealError, match="segment 1 of sealed blob"):
        open_file(store, data_key, "a", reput(store, blob[: head + 2 * seg]), p)
    # (3) Two segments swapped.
    swapped = blob[:head] + blob[head + seg: head + 2 * seg] + blob[head: head + seg] + \
        blob[head + 2 * seg:]
    with pytest.raises(SealError, match="segment 0"):
        open_file(store, data_key, "a", reput(store, swapped), p)
    # (4) File b's ciphertext opened as file a: the file key depends on the plaintext digest.
    with pytest.raises(SealError, match="segment 0"):
        open_file(store, data_key, "a", sealed.files["b"], p)
    # (5) The stored blob is not what the record binds.
    with pytest.raises(DigestMismatchError, match=r"sealed blob .* hashes to"):
        open_file(store, data_key, "a", (sealed.files["a"][0], sealed.files["a"][1] - 1), p)
    # (6) Something after the final segment.
    with pytest.raises(SealError, match="segment 2"):
        open_file(store, data_key, "a", reput(store, blob + b"x"), p)
    # (7) A plaintext digest other than the manifest's (a swapped manifest).
    with pytest.raises(SealError):
        open_file(store, data_key, "a", sealed.files["a"], ("sha256:" + "00" * 32, p[1]))


def test_wrapped_keys_are_bound_to_recipient_and_batch(tmp_path: Path) -> None:
    _store, sealed, _k, _p, key, private = sealed_one(tmp_path, b"data")
    other, other_private = keypair()
    with pytest.raises(SealError, match="not sealed to encryption key"):
        unwrap_key(sealed, BATCH, other, other_private)
    with pytest.raises(SealError, match="does not open with key"):
        unwrap_key(sealed, "sha256:" + "cd" * 32, key, private)
    # A recipient entry relabelled with another keyid does not open with that key either.
    moved = Sealed(((other.keyid, sealed.recipients[0][1]),), sealed.files, (), FEATURE_VERSION)
    with pytest.raises(SealError, match="does not open with key"):
        unwrap_key(moved, BATCH, other, other_private)


def test_several_recipients_each_open_it(tmp_path: Path) -> None:
    pairs = [keypair() for _ in range(3)]
    store, sealed, plains = seal(tmp_path, {"a": b"x" * 10}, [k for k, _ in pairs])
    assert sorted(k for k, _ in sealed.recipients) == sorted(k.keyid for k, _ in pairs)
    p = plains["a"]
    for key, private in pairs:
        data_key = unwrap_key(sealed, BATCH, key, private)
        assert open_file(store, data_key, "a", sealed.files["a"], (p.digest, p.size)) == b"x" * 10


def test_no_recipient_is_refused(tmp_path: Path) -> None:
    from trajledger.ledger.errors import LedgerError

    with pytest.raises(LedgerError, match="no recipient to seal it to"):
        seal(tmp_path, {"a": b"x"}, [])


def test_published_fingerprints_are_the_gates_features(tmp_path: Path) -> None:
    """What a sealed record publishes is, bit for bit, the version-3 features of its plaintext
    (what the gate computes, what a features file would hold), and reads back to them."""
    import pyarrow.parquet as pq

    from trajledger.ledger.batch_features import (
        decode_features,
        encode_features,
        published_features,
    )
    from trajledger.ledger.episode_features import (
        FEATURE_COLUMNS,
        FeatureChunk,
        iter_step_features,
        parquet_batches,
    )
    from trajledger.ledger.episode_vectors import VECTOR_DIM
    from trajledger.ledger.sealing import fingerprints
    from trajledger.runner.rollouts import run_policy

    played = run_policy(None, "CartPole-v1", 3, 7, policy_version="random")
    path = tmp_path / "steps.parquet"
    pq.write_table(played.steps, path)
    published = fingerprints(path)
    assert published == fingerprints(path.read_bytes())
    want = FeatureChunk.concat(list(iter_step_features(parquet_batches(path, FEATURE_COLUMNS))))
    for e, i in zip(published, range(len(want)), strict=True):
        assert e.sketch is not None and want.valid[i]
        raw = base64.b64decode(e.sketch)
        assert len(raw) == 4 * VECTOR_DIM and raw == want.vectors[i].astype("<f4").tobytes()
    got = published_features(Sealed((), {}, published, FEATURE_VERSION))
    # The features file of the published features holds the same bytes as the plaintext's,
    # but for the safety counts, which are not published.
    steps = "sha256:" + "00" * 32
    plain = dataclasses.replace(want, safety=[None] * len(want))
    assert encode_features(got, steps) == encode_features(plain, steps)
    assert decode_features(encode_features(got, steps), steps).fingerprints == want.fingerprints


def test_fingerprints_of_another_feature_version_are_not_compared() -> None:
    from trajledger.ledger.batch_features import published_features
    from trajledger.verify.errors import FormatError

    with pytest.raises(FormatError, match=f"of feature version 2, want {FEATURE_VERSION}"):
        published_features(Sealed((), {}, (), 2))


# -- X25519 keys ---------------------------------------------------------------------------------


def test_x25519_keys_at_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", "pw (TEST ONLY)")
    store = KeyStore(tmp_path / "keys")
    made = store.create_encryption_key("ev")
    path = tmp_path / "keys" / "x25519" / "ev.key"
    assert path.stat().st_mode & 0o777 == 0o600
    assert b"ENCRYPTED PRIVATE KEY" in path.read_bytes()
    public, _private = store.decrypter("ev")
    assert public == made == store.encryption_key("ev")
    assert store.encryption_keys() == [("ev", made, True, False)]
    assert store.list() == []  # signing keys are listed apart
    with pytest.raises(KeyError_, match="already exists"):
        store.create_encryption_key("ev")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", "wrong")
    with pytest.raises(KeyError_, match="wrong passphrase or corrupt key file"):
        store.decrypter("ev")
    monkeypatch.delenv("TRAJLEDGER_PASSPHRASE")
    with pytest.raises(KeyError_, match="is encrypted; set TRAJLEDGER_PASSPHRASE"):
        store.decrypter("ev")
    with pytest.raises(KeyError_, match="no passphrase"):
        store.create_encryption_key("other")
    with pytest.raises(KeyError_, match=r"not found .* --alg x25519"):
        store.encryption_key("nobody")
    with pytest.raises(KeyError_, match="create it with 'trajledger key new nobody --alg x25519'"):
        store.decrypter("nobody")


def test_x25519_key_swapped_or_readable_is_refused(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.create_encryption_key("a", encrypt=False)
    store.create_encryption_key("b", encrypt=False)
    folder = tmp_path / "keys" / "x25519"
    (folder / "a.key").write_bytes((folder / "b.key").read_bytes())
    with pytest.raises(TamperError, match=r"is not the private half of its \.pub"):
        store.decrypter("a")
    (folder / "b.key").chmod(0o644)
    with pytest.raises(KeyError_, match="can be read by other users"):
        store.decrypter("b")
