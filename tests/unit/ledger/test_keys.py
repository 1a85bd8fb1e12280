"""KeyStore and Signer: files on disk, encryption at rest, loading, and refusals."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from trajledger.ledger.errors import KeyError_, LedgerError
from trajledger.ledger.keys import KeyStore, Signer
from trajledger.verify.keys import PublicKey


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def keys(tmp_path: Path) -> KeyStore:
    return KeyStore(tmp_path / "keys")


def test_create_writes_encrypted_private_key_0600_and_public_key(
    keys: KeyStore, passphrase: str
) -> None:
    signer = keys.create("alice")

    priv, pub = keys.directory / "alice.key", keys.directory / "alice.pub"
    assert _mode(priv) == 0o600
    assert _mode(pub) == 0o644
    assert _mode(keys.directory) == 0o700
    assert priv.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----\n")
    with pytest.raises(TypeError, match="encrypted"):
        serialization.load_pem_private_key(priv.read_bytes(), password=None)
    loaded = serialization.load_pem_private_key(priv.read_bytes(), passphrase.encode())
    assert (
        loaded.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        == signer.public.spki_der
    )
    assert pub.read_bytes() == signer.public.to_pem()


def test_keyid_is_sha256_of_spki_der(keys: KeyStore, passphrase: str) -> None:
    signer = keys.create("alice")
    spki = serialization.load_pem_public_key(
        (keys.directory / "alice.pub").read_bytes()
    ).public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert signer.keyid == hashlib.sha256(spki).hexdigest()
    assert keys.public("alice").keyid == signer.keyid


@pytest.mark.parametrize(("algorithm", "raw_len"), [("ed25519", 64), ("ecdsa-p256", None)])
def test_loaded_signer_signs_for_its_public_key(
    keys: KeyStore, passphrase: str, algorithm: str, raw_len: int | None
) -> None:
    made = keys.create("k", algorithm)
    signer = keys.signer("k")
    assert signer.public.algorithm == algorithm
    assert signer.keyid == made.keyid
    sig = signer.sign(b"message")
    if raw_len is not None:
        assert len(sig) == raw_len
    assert keys.public("k").verify(sig, b"message")
    assert not keys.public("k").verify(sig, b"messagE")


def test_passphrase_callback_is_used_when_env_unset(keys: KeyStore, tmp_path: Path) -> None:
    asked: list[str] = []

    def ask(name: str) -> bytes:
        asked.append(name)
        return b"from-prompt"

    store = KeyStore(keys.directory, passphrase=ask)
    store.create("bob")
    assert store.signer("bob").name == "bob"
    assert asked == ["bob"]  # asked once per store
    assert KeyStore(keys.directory, passphrase=ask).signer("bob").name == "bob"
    assert asked == ["bob", "bob"]
    with pytest.raises(KeyError_, match=r"^key bob: cannot load .*: wrong passphrase or corrupt"):
        KeyStore(keys.directory, passphrase=lambda _n: b"other").signer("bob")


def test_wrong_passphrase(keys: KeyStore, passphrase: str, monkeypatch: pytest.MonkeyPatch) -> None:
    keys.create("alice")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", "not the passphrase")
    with pytest.raises(
        KeyError_,
        match=r"^key alice: cannot load .*alice\.key: wrong passphrase or corrupt key file "
              r"\(the passphrase in TRAJLEDGER_PASSPHRASE\)$",
    ):
        keys.signer("alice")


def test_encrypted_key_without_passphrase_is_refused(
    keys: KeyStore, passphrase: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys.create("alice")
    monkeypatch.delenv("TRAJLEDGER_PASSPHRASE")
    with pytest.raises(KeyError_, match=r"^key alice: is encrypted; set TRAJLEDGER_PASSPHRASE"):
        keys.signer("alice")


def test_an_empty_passphrase_variable_is_named_as_empty(
    keys: KeyStore, passphrase: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CI secret that is missing sets the variable to nothing: the line says so, not only
    "set TRAJLEDGER_PASSPHRASE", which the user believes done (out41)."""
    keys.create("alice")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", "")
    with pytest.raises(KeyError_, match=r"^key alice: is encrypted; set TRAJLEDGER_PASSPHRASE.*"
                       r"\(TRAJLEDGER_PASSPHRASE: set but empty, which is not set\)"):
        keys.signer("alice")


def test_create_without_passphrase_refuses_and_writes_nothing(keys: KeyStore) -> None:
    with pytest.raises(KeyError_, match=r"^key alice: no passphrase; set TRAJLEDGER_PASSPHRASE"):
        keys.create("alice")
    assert not (keys.directory / "alice.key").exists()
    assert not (keys.directory / "alice.pub").exists()


def test_unencrypted_key(keys: KeyStore) -> None:
    keys.create("demo", encrypt=False)
    data = (keys.directory / "demo.key").read_bytes()
    assert data.startswith(b"-----BEGIN PRIVATE KEY-----\n")
    assert _mode(keys.directory / "demo.key") == 0o600
    assert keys.signer("demo").public.algorithm == "ed25519"


def test_create_refuses_existing_name_and_keeps_the_old_key(
    keys: KeyStore, passphrase: str
) -> None:
    keys.create("alice")
    before = (keys.directory / "alice.key").read_bytes()
    with pytest.raises(KeyError_, match=r"^key alice: already exists in .*; pick another name$"):
        keys.create("alice")
    assert (keys.directory / "alice.key").read_bytes() == before


def test_create_refuses_when_only_the_public_half_exists(keys: KeyStore, passphrase: str) -> None:
    keys.directory.mkdir()
    (keys.directory / "alice.pub").write_bytes(b"x")
    with pytest.raises(KeyError_, match="already exists"):
        keys.create("alice")


@pytest.mark.parametrize("name", ["", "../evil", "a/b", ".hidden", "-dash", "x" * 65, "sp ace"])
def test_unsafe_key_names_are_refused(keys: KeyStore, passphrase: str, name: str) -> None:
    with pytest.raises(KeyError_, match=r"^key name .*: use 1-64 letters"):
        keys.create(name)
    with pytest.raises(KeyError_, match=r"^key name"):
        keys.signer(name)
    assert not keys.directory.exists()


def test_unknown_algorithm(keys: KeyStore, passphrase: str) -> None:
    with pytest.raises(KeyError_, match=r"^key k: unknown algorithm 'rsa', want one of"):
        keys.create("k", "rsa")


def test_unknown_key(keys: KeyStore) -> None:
    with pytest.raises(
        KeyError_, match=r"^key nobody: not found in .*; see 'trajledger key list'$"
    ):
        keys.public("nobody")
    with pytest.raises(
        KeyError_, match=r"^key nobody: no private key in .*trajledger key new nobody'$"
    ):
        keys.signer("nobody")


def test_mistyped_key_gets_did_you_mean(keys: KeyStore) -> None:
    """A name close to an existing key suggests it (and lists the keys) instead of telling to
    create a key under the mistyped name."""
    for name in ("approver-a", "approver-b", "trainer"):
        keys.create(name, encrypt=False)
    d = re.escape(str(keys.directory))
    with pytest.raises(KeyError_, match=(
        rf"^key aprover-a: no private key in {d}; did you mean 'approver-a'\? \(keys: "
        r"approver-a, approver-b, trainer\)$"
    )):
        keys.signer("aprover-a")
    with pytest.raises(KeyError_, match=rf"^key trainr: not found in {d}; did you mean 'trainer'"):
        keys.public("trainr")
    with pytest.raises(KeyError_, match=r"^key vendor: no private key in .*; create it with "):
        keys.signer("vendor")


@pytest.mark.parametrize("encrypt", [True, False])
def test_truncated_private_key(
    keys: KeyStore, passphrase: str, encrypt: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys.create("alice", encrypt=encrypt)
    if not encrypt:  # a plaintext key with a passphrase set would be refused as planted
        monkeypatch.delenv("TRAJLEDGER_PASSPHRASE")
    path = keys.directory / "alice.key"
    path.write_bytes(path.read_bytes()[:100])
    # Encrypted too: a file cut short is not a wrong passphrase (rev9 finding 4).
    with pytest.raises(KeyError_, match=r"^key alice: cannot load .*: corrupt or truncated key "
                       r"file$"):
        keys.signer("alice")


@pytest.mark.parametrize(
    "make",
    [
        lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
        lambda: ec.generate_private_key(ec.SECP384R1()),
    ],
    ids=["rsa", "p384"],
)


def test_private_key_of_unsupported_algorithm(keys: KeyStore, make: object) -> None:
    key = make()  # type: ignore[operator]
    keys.directory.mkdir()
    (keys.directory / "odd.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (keys.directory / "odd.key").chmod(0o600)
    with pytest.raises(
        KeyError_, match=r"^key odd: unsupported algorithm, want Ed25519 or ECDSA P-256$"
    ):
        keys.signer("odd")


def test_corrupt_public_key(keys: KeyStore, passphrase: str) -> None:
    keys.create("alice")
    (keys.directory / "alice.pub").write_bytes(b"-----BEGIN PUBLIC KEY-----\nAAAA\n")
    with pytest.raises(KeyError_, match=r"^key alice \(.*alice\.pub\): not a valid PEM public key"):
        keys.public("alice")


def test_list(keys: KeyStore, passphrase: str) -> None:
    assert keys.list() == []
    b = keys.create("bob", "ecdsa-p256")
    a = keys.create("alice", encrypt=False)
    listed = keys.list()
    assert [(k.name, k.algorithm, k.keyid, k.encrypted) for k in listed] == [
        ("alice", "ed25519", a.keyid, False),
        ("bob", "ecdsa-p256", b.keyid, True),
    ]
    assert listed[0].public_path == keys.directory / "alice.pub"


def test_generate_in_memory_and_raw_seed() -> None:
    ed = Signer.generate("n")
    assert len(ed.raw_ed25519_private()) == 32
    p256 = Signer.generate("p", "ecdsa-p256")
    with pytest.raises(KeyError_, match=r"^key p: is ecdsa-p256, want ed25519$"):
        p256.raw_ed25519_private()
    assert PublicKey.from_pem(p256.public.to_pem()).keyid == p256.keyid


def test_private_pem_round_trip() -> None:
    s = Signer.generate("n")
    pem = s.private_pem(b"pw")
    assert b"ENCRYPTED" in pem.split(b"\n", 1)[0]
    assert b"ENCRYPTED" not in s.private_pem(None)


# -- a private key must be private, and the pair of its public half -----------------------------


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_private_key_others_can_read_is_refused_with_the_chmod(
    keys: KeyStore, passphrase: str, mode: int
) -> None:
    keys.create("alice")
    path = keys.directory / "alice.key"
    path.chmod(mode)
    with pytest.raises(KeyError_, match=(
        rf"^key alice: {re.escape(str(path))} can be read by other users \(mode 0{mode:o}\); "
        rf"run 'chmod 600 {re.escape(str(path))}'$"
    )):
        keys.signer("alice")
    path.chmod(0o600)
    assert keys.signer("alice").name == "alice"


@pytest.mark.parametrize("how", ["copied", "symlinked"])
def test_a_private_key_that_is_not_the_pair_of_its_public_key_is_refused(
    keys: KeyStore, passphrase: str, how: str
) -> None:
    from trajledger.ledger.errors import TamperError

    alice, bob = keys.create("alice"), keys.create("bob")
    a = keys.directory / "alice.key"
    a.unlink()
    if how == "copied":
        a.write_bytes((keys.directory / "bob.key").read_bytes())
        a.chmod(0o600)
    else:
        a.symlink_to(keys.directory / "bob.key")
    with pytest.raises(TamperError, match=(
        rf"^key alice: .*alice\.key is not the private half of .*alice\.pub \(keyid "
        rf"{bob.keyid[:16]}…, want {alice.keyid[:16]}…\); the key file was replaced: nothing "
        "was signed$"
    )):
        keys.signer("alice")


# -- issue 18: plaintext keys refused, per-key passphrases, modes ---------------------------------


def test_each_key_may_have_its_own_passphrase(
    keys: KeyStore, passphrase: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trajledger.ledger.keys import passphrase_env

    assert passphrase_env("approver-a") == "TRAJLEDGER_PASSPHRASE_APPROVER_A"
    assert passphrase_env("log") == "TRAJLEDGER_PASSPHRASE_LOG"
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE_APPROVER_A", "a's own")
    keys.create("approver-a")
    keys.create("bob")  # TRAJLEDGER_PASSPHRASE
    monkeypatch.delenv("TRAJLEDGER_PASSPHRASE")
    assert keys.signer("approver-a").name == "approver-a"
    with pytest.raises(KeyError_, match=r"^key bob: is encrypted; set "
                       r"TRAJLEDGER_PASSPHRASE_BOB or TRAJLEDGER_PASSPHRASE, name a file "
                       r"holding it in TRAJLEDGER_PASSPHRASEFILE_BOB or TRAJLEDGER_PASSPHRASEFILE, "
                       r"or run in a"):
        keys.signer("bob")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE_APPROVER_A", "wrong")
    with pytest.raises(KeyError_, match="wrong passphrase or corrupt key file"):
        keys.signer("approver-a")


def test_a_plaintext_key_is_refused_where_keys_are_encrypted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trajledger.ledger.errors import TamperError

    plain = KeyStore(tmp_path / "keys")
    plain.create("demo", encrypt=False)
    assert plain.signer("demo").name == "demo"  # nothing says keys here are encrypted
    strict = KeyStore(tmp_path / "keys", require_encrypted=True)
    path = tmp_path / "keys" / "demo.key"
    with pytest.raises(TamperError, match=re.escape(
        f"key demo: {path} is not encrypted, but this ledger's keys are encrypted (ledger.toml: "
        'keys = "encrypted"): a key file planted by someone without the passphrase; nothing '
        "was signed. If you wrote it yourself, encrypt it with 'trajledger key encrypt demo'"
    )):
        strict.signer("demo")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE_DEMO", "set")
    with pytest.raises(TamperError, match="but a passphrase for it is set"):
        plain.signer("demo")
    with pytest.raises(KeyError_, match="a plaintext key would be refused as planted"):
        strict.create("other", encrypt=False)
    assert not (tmp_path / "keys" / "other.key").exists()
    # Encrypting it in place makes it usable where keys are encrypted.
    assert strict.encrypt("demo") is True
    assert path.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert strict.encrypt("demo") is False
    assert strict.signer("demo").name == "demo"
    assert strict.plaintext() == []


@pytest.mark.parametrize("what", ["dir", "pub"])
def test_key_files_others_or_the_group_may_write_are_refused(
    keys: KeyStore, what: str
) -> None:
    keys.create("k", encrypt=False)
    path = keys.directory if what == "dir" else keys.directory / "k.pub"
    path.chmod(0o770 if what == "dir" else 0o664)
    with pytest.raises(LedgerError, match=re.escape(
        f"{path}: writable by its group (mode {'0770' if what == 'dir' else '0664'}); run "
        f"'chmod g-w {path}'"
    )):
        keys.signer("k")
    shared = KeyStore(keys.directory, group_writable=True)  # a ledger shared through its group
    assert shared.signer("k").name == "k"
    path.chmod(0o777 if what == "dir" else 0o666)
    with pytest.raises(LedgerError, match="writable by other users"):
        shared.signer("k")


def test_a_terminal_is_asked_once_per_key(keys: KeyStore) -> None:
    asked: list[str] = []

    def ask(name: str) -> bytes:
        asked.append(name)
        return b"typed"

    log = KeyStore(keys.directory, passphrase=ask, label="log")
    assert log.has_passphrase("next")  # a rotation's next key goes by the log's name
    log.create("next")
    assert asked == ["log"]


# -- hostile and damaged key files (rev9 finding 4) ---------------------------------------------

_PBES2 = "1.2.840.113549.1.5.13"
_PBKDF2 = "1.2.840.113549.1.5.12"
_SCRYPT = "1.3.6.1.4.1.11591.4.11"
_HMAC_SHA256 = "1.2.840.113549.2.9"
_AES256_CBC = "2.16.840.1.101.3.4.1.42"


def _tlv(tag: int, body: bytes) -> bytes:
    n = len(body)
    size = n.to_bytes(max(1, (n.bit_length() + 7) // 8), "big")
    return bytes([tag]) + (size if n < 128 else bytes([0x80 | len(size)]) + size) + body


def _int(v: int) -> bytes:
    return _tlv(0x02, v.to_bytes(v.bit_length() // 8 + 1, "big"))


def _oid(dotted: str) -> bytes:
    a, b, *rest = map(int, dotted.split("."))
    body = bytearray([40 * a + b])
    for arc in rest:
        chunk = [arc & 0x7F]
        while arc > 0x7F:
            arc >>= 7
            chunk.insert(0, 0x80 | (arc & 0x7F))
        body += bytes(chunk)
    return _tlv(0x06, bytes(body))


def _seq(*parts: bytes) -> bytes:
    return _tlv(0x30, b"".join(parts))


def _encrypted_pem(key: object, kdf: bytes, derived: bytes) -> bytes:
    """An encrypted PKCS#8 PEM of ``key`` made by hand (PBES2, AES-256-CBC), as another tool
    writes one: ``kdf`` is the key derivation's AlgorithmIdentifier, ``derived`` its key."""
    import base64
    import os

    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    plain = key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    enc = Cipher(algorithms.AES(derived), modes.CBC(iv)).encryptor()
    body = enc.update(padder.update(plain) + padder.finalize()) + enc.finalize()
    der = _seq(_seq(_oid(_PBES2), _seq(kdf, _seq(_oid(_AES256_CBC), _tlv(0x04, iv)))),
               _tlv(0x04, body))
    return (b"-----BEGIN ENCRYPTED PRIVATE KEY-----\n" + base64.encodebytes(der)
            + b"-----END ENCRYPTED PRIVATE KEY-----\n")


def _pbkdf2(passphrase: bytes, salt: bytes, rounds: int) -> bytes:
    """The key PBKDF2-HMAC-SHA256 derives from ``passphrase`` in ``rounds``."""
    from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

    return PBKDF2HMAC(hashes.SHA256(), 32, salt, rounds).derive(passphrase)


def _pbkdf2_params(salt: bytes, rounds: int) -> bytes:
    return _seq(_oid(_PBKDF2), _seq(_tlv(0x04, salt), _int(rounds),
                                    _seq(_oid(_HMAC_SHA256), _tlv(0x05, b""))))


@pytest.fixture
def own_key(keys: KeyStore, passphrase: str) -> tuple[KeyStore, Path, object]:
    """Key alice of ``keys`` (its .pub, encrypted .key) and its private key object."""
    keys.create("alice")
    path = keys.directory / "alice.key"
    key = serialization.load_pem_private_key(path.read_bytes(), passphrase.encode())
    return keys, path, key


def test_a_key_file_made_by_another_tool_with_more_rounds_loads(
    own_key: tuple[KeyStore, Path, object], passphrase: str
) -> None:
    keys, path, key = own_key
    salt = b"s" * 16
    path.write_bytes(_encrypted_pem(key, _pbkdf2_params(salt, 100_000),
                                    _pbkdf2(passphrase.encode(), salt, 100_000)))
    assert keys.signer("alice").name == "alice"


@pytest.mark.parametrize(
    ("kdf", "cost"),
    [
        (_pbkdf2_params(b"s" * 16, 2**40), 2**40),  # crashed the loader: a Rust panic
        (_pbkdf2_params(b"s" * 16, 10_000_001), 10_000_001),
        (_seq(_oid(_SCRYPT), _seq(_tlv(0x04, b"s" * 16), _int(2**17), _int(8), _int(16))),
         2**17 * 8 * 16),  # 128 MiB, sixteen times over
    ],
    ids=["pbkdf2-2^40", "pbkdf2-over", "scrypt"],
)


def test_a_key_file_asking_for_a_ruinous_key_derivation_is_refused_at_once(
    own_key: tuple[KeyStore, Path, object], kdf: bytes, cost: int
) -> None:
    """rev9 finding 4: the key derivation's cost is the file's to say. One edited to 2^40
    PBKDF2 rounds made every command that loads the key end in a Rust panic
    (``pyo3_runtime.PanicException``, a traceback); 2^31 took minutes of CPU per load; scrypt
    parameters likewise. It is refused before anything is derived, naming the cost."""
    keys, path, key = own_key
    path.write_bytes(_encrypted_pem(key, kdf, b"k" * 32))
    with pytest.raises(KeyError_, match=re.escape(
        f"key alice: cannot load {path}: its key derivation asks for {cost:,} rounds, more "
        "than the 10,000,000 a key file may: a damaged or planted key file; nothing was signed"
    )):
        keys.signer("alice")


@pytest.mark.parametrize(
    "damage",
    [lambda b: b[:100], lambda b: b[:-40], lambda b: b.replace(b"\n", b"\n!", 1),
     lambda b: b.replace(b"-----END ENCRYPTED PRIVATE KEY-----", b"")],
    ids=["head", "tail", "not-base64", "no-end"],
)


def test_a_damaged_key_file_is_not_taken_for_a_wrong_passphrase(
    own_key: tuple[KeyStore, Path, object], damage: Any
) -> None:
    """rev9 finding 4: a truncated encrypted key file was "wrong passphrase or corrupt key
    file", the same line as a wrong passphrase; now the file is named damaged, before any
    passphrase is asked for (no prompt, no terminal needed)."""
    keys, path, _key = own_key
    path.write_bytes(damage(path.read_bytes()))
    asked: list[str] = []
    store = KeyStore(keys.directory, passphrase=lambda n: asked.append(n) or b"x")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("TRAJLEDGER_PASSPHRASE")
        with pytest.raises(KeyError_, match=re.escape(
            f"key alice: cannot load {path}: corrupt or truncated key file")):
            store.signer("alice")
    assert asked == []


@pytest.mark.parametrize("variable", ["TRAJLEDGER_PASSPHRASE", "TRAJLEDGER_PASSPHRASE_CAROL"])
def test_a_passphrase_that_is_not_utf8_is_refused_showing_nothing_of_it(
    keys: KeyStore, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """rev9 finding 6: a passphrase variable holding bytes that are not UTF-8 (``se\\xffcret``)
    ended in ``BUG: UnicodeEncodeError: 'utf-8' codec can't encode character '\\udcff' in
    position 2`` (exit 4): a byte of the passphrase and its place, in a CI log. Now one line
    names the variable, and nothing of its value."""
    monkeypatch.delenv("TRAJLEDGER_PASSPHRASE", raising=False)
    monkeypatch.setenv(variable, "se\udcffcret")  # the byte 0xff, as os.environ holds it
    with pytest.raises(KeyError_) as caught:
        keys.create("carol")
    assert str(caught.value) == (
        f"key carol: {variable} is not UTF-8 text; set the passphrase as UTF-8 (nothing of its "
        "value is shown here)")
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert not (keys.directory / "carol.key").exists()


def test_private_keys_are_encrypted_with_scrypt_as_openssl_writes_them(
    own_key: tuple[KeyStore, Path, object], passphrase: str, tmp_path: Path
) -> None:
    """Seventh round (rev9's design limit): keys were encrypted by ``cryptography``'s PKCS#8
    writer, PBKDF2 at 2,048 rounds (a guessable passphrase falls to a cheap offline search).
    They are PBES2 with scrypt at N = 2^14, r = 8, p = 1 and AES-256-CBC, the structure
    ``openssl pkcs8 -topk8 -scrypt`` writes, read here by OpenSSL's own parser and decrypter."""
    from trajledger.ledger.key_pkcs8 import SCRYPT_COST, kdf_cost

    keys, path, key = own_key
    pem = path.read_bytes()
    assert SCRYPT_COST == (2**14, 8, 1) and kdf_cost(pem) == 2**14 * 8
    plain = key.private_bytes(serialization.Encoding.DER,  # type: ignore[attr-defined]
                              serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to read the file with another implementation")
    parsed = subprocess.run(["openssl", "asn1parse", "-in", str(path)], capture_output=True,
                            text=True, check=True).stdout
    fields = [line.split(":", 3)[-1].strip() for line in parsed.splitlines()
              if "OBJECT" in line or "INTEGER" in line]
    assert fields == ["PBES2", "scrypt", "4000", "08", "01", "aes-256-cbc"], parsed
    out = subprocess.run(["openssl", "pkcs8", "-in", str(path), "-passin", "env:PW",
                          "-outform", "DER"], capture_output=True, check=True,
                         env={**os.environ, "PW": passphrase}).stdout
    assert out == plain
    # and a key openssl encrypted with its own scrypt defaults loads
    (tmp_path / "plain.der").write_bytes(plain)
    subprocess.run(["openssl", "pkcs8", "-topk8", "-scrypt", "-inform", "DER", "-in",
                    str(tmp_path / "plain.der"), "-passout", "env:PW", "-out", str(path)],
                   check=True, env={**os.environ, "PW": passphrase})
    assert keys.signer("alice").public == keys.public("alice")


def test_a_key_encrypted_the_old_way_is_listed_weak_and_re_encrypted_in_place(
    keys: KeyStore, passphrase: str
) -> None:
    """Keys written before the seventh round (PBKDF2, 2,048 rounds: ``cryptography``'s
    ``BestAvailableEncryption``) still load; ``key list`` marks them weak and ``encrypt``
    re-encrypts them with scrypt under the same passphrase (the signing key and the X25519 one
    alike), leaving a key written now as it is."""
    from cryptography.hazmat.primitives.asymmetric import x25519

    from trajledger.ledger.keys import kdf_cost

    keys.create("old")
    keys.create("new")
    keys.create_encryption_key("sealer")
    old_path = keys.directory / "old.key"
    seal_path = keys.encryption_directory / "sealer.key"
    pw = passphrase.encode()
    for path in (old_path, seal_path):
        key = serialization.load_pem_private_key(path.read_bytes(), pw)
        path.write_bytes(key.private_bytes(  # type: ignore[union-attr]
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(pw)))
        assert kdf_cost(path.read_bytes()) == 2048
    before = keys.signer("old").public
    assert {k.name: k.weak for k in keys.list()} == {"new": False, "old": True}
    assert [w for *_r, w in keys.encryption_keys()] == [True]
    new_bytes = (keys.directory / "new.key").read_bytes()
    assert keys.encrypt("new") is False and (keys.directory / "new.key").read_bytes() == new_bytes
    assert keys.encrypt("old") is True and keys.encrypt("sealer", x25519_key=True) is True
    assert kdf_cost(old_path.read_bytes()) == kdf_cost(seal_path.read_bytes()) == 2**14 * 8
    assert stat.S_IMODE(old_path.stat().st_mode) == stat.S_IMODE(seal_path.stat().st_mode) == 0o600
    assert keys.signer("old").public == before
    assert isinstance(keys.decrypter("sealer")[1], x25519.X25519PrivateKey)
    assert not any(k.weak for k in keys.list()) and [w for *_r, w in keys.encryption_keys()] == [
        False]
    assert keys.encrypt("old") is False


@pytest.mark.parametrize("planted", ["fifo", "fifo read", "directory", "link"])
def test_a_keyless_note_planted_as_no_regular_file_refuses_in_one_line(
    keys: KeyStore, tmp_path: Path, planted: str
) -> None:
    """rev29 (seventeenth round): ``keys/keyless-made`` planted as a FIFO, a directory or a link
    stops the keyless signature before its record is logged, naming the note and what to do; a
    FIFO somebody reads gets no keyid (on main: written into it, then ``Invalid argument`` from
    its fsync, or ``No such device or address`` / ``Is a directory`` with no name of what)."""
    note = keys.directory / "keyless-made"
    keys.directory.mkdir(mode=0o700)
    reader = None
    (tmp_path / "elsewhere").write_text("")
    if planted.startswith("fifo"):
        os.mkfifo(note, 0o600)
        if planted == "fifo read":
            reader = os.open(note, os.O_RDONLY | os.O_NONBLOCK)
    elif planted == "directory":
        note.mkdir()
    else:
        note.symlink_to(tmp_path / "elsewhere")
    try:
        with pytest.raises(KeyError_, match=r"keyless-made: not a regular file .* move it away"):
            keys.note_keyless(b"a bundle")
        if reader is not None:
            assert os.read(reader, 100) == b""  # nothing was written into the FIFO
    finally:
        if reader is not None:
            os.close(reader)
    assert keys.keyless_made() == set()  # on main, a directory: IsADirectoryError
    assert not (tmp_path / "elsewhere").read_text()


def test_a_keyless_note_keeps_only_keyids(keys: KeyStore) -> None:
    """Lines that are not 64 lower-case hex (upper case, a digest prefix, text) count for
    nothing; each noted keyid is the bundle's sha256."""
    made = keys.note_keyless(b"one bundle")
    assert made == hashlib.sha256(b"one bundle").hexdigest()
    with (keys.directory / "keyless-made").open("a") as f:
        f.write(made.upper() + "\nsha256:" + "a" * 64 + "\n" + "b" * 63 + "\nnot hex\n")
    assert keys.keyless_made() == {made}
    assert _mode(keys.directory / "keyless-made") == 0o600


def test_a_key_of_the_other_kind_is_named_so_not_offered_for_creation(
        keys: KeyStore, passphrase: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """hour33: a signing key asked for as an X25519 key (``eval --unseal-key``), or the other way
    round, said only "create it with 'trajledger key new NAME'": which kind the name holds is
    now said; and a wrong passphrase typed at the prompt is named so."""
    keys.create("signer")
    keys.create_encryption_key("sealer")
    with pytest.raises(KeyError_, match=r"^key signer: no X25519 encryption key in .*; signer is "
                       r"a signing key, which cannot open sealed suites"):
        keys.decrypter("signer")
    with pytest.raises(KeyError_, match=r"^key sealer: no signing key in .*; sealer is an X25519 "
                       r"encryption key \(x25519/\), which cannot sign"):
        keys.signer("sealer")
    with pytest.raises(KeyError_, match=r"create it with 'trajledger key new nobody'"):
        keys.signer("nobody")
    monkeypatch.delenv("TRAJLEDGER_PASSPHRASE")
    with pytest.raises(KeyError_, match=r"file \(the passphrase typed at the prompt\)$"):
        KeyStore(keys.directory, passphrase=lambda _n: b"other").signer("signer")
def test_a_keyless_note_that_is_a_hard_link_refuses_in_one_line(
    keys: KeyStore, tmp_path: Path
) -> None:
    """Review left33, finding 3 (rev29's Left): ``keys/keyless-made`` as a hard link to another
    file of the user's got the keyid appended to that file. Refused after opening (``st_nlink``),
    before anything is written, naming the note and how to give it a file of its own; the
    note made so signs again."""
    keys.directory.mkdir(mode=0o700)
    other = tmp_path / "elsewhere"
    other.write_text("mine\n")
    note = keys.directory / "keyless-made"
    os.link(other, note)
    with pytest.raises(KeyError_, match=r"keyless-made: a hard link \(2 names of one file\): "
                       r".* nothing was recorded; give it a file of its own \(cp -p .*\) and "
                       r"sign again$"):
        keys.note_keyless(b"a bundle")
    assert other.read_text() == "mine\n"
    copy = note.with_name("keyless-made.new")
    shutil.copy2(note, copy)
    copy.replace(note)
    made = keys.note_keyless(b"a bundle")
    assert keys.keyless_made() == {made} and other.read_text() == "mine\n"
