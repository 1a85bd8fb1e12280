"""Signing keys and X25519 encryption keys: create, store encrypted at rest, load, and sign.

Scope: private keys in a key directory (``<ledger>/keys`` by default): ``NAME.key`` is an
encrypted PKCS#8 PEM written with mode 0600, ``NAME.pub`` the public key PEM. Each key's
passphrase comes from ``TRAJLEDGER_PASSPHRASE_<NAME>`` (`passphrase_env`) or the file
``TRAJLEDGER_PASSPHRASEFILE_<NAME>`` names (`passphrase_file_env`, `read_passphrase_file`), else
from ``TRAJLEDGER_PASSPHRASE`` or the file ``TRAJLEDGER_PASSPHRASEFILE`` names, else is asked for
on a terminal (`passphrase_sources`). Keys written with ``encrypt=False``
are for demos and tests only: where a ledger's keys are encrypted, or a passphrase for the key is
set, a plaintext key file is refused as planted. Key files and their directory writable by the
group or others are refused (a ledger a team shares through its group allows the group).
Evaluators' X25519 keys, which sealed suites are encrypted to, live the same way in ``x25519/``
and are read under the same rules.
Non-scope: verification (``verify.keys.PublicKey``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519

from trajledger.verify.encryption_key import EncryptionKey
from trajledger.verify.keys import ALGORITHMS, PublicKey

from .errors import KeyError_, TamperError, shell_word
from .fs import drop_stale_temps, fsync_dir, write_file_atomic
from .key_pkcs8 import (
    KDF_LIMIT,
    is_encrypted,
    kdf_cost,
    private_pem,
    weakly_encrypted,
)

__all__ = [
    "ENCRYPTION_DIR",
    "PASSPHRASE_ENV",
    "PASSPHRASE_FILE_ENV",
    "KeyInfo",
    "KeyStore",
    "Signer",
    "is_encrypted",
    "passphrase_env",
    "passphrase_file_env",
    "passphrase_sources",
    "read_passphrase_file",
    "refuse_twin",
]

PASSPHRASE_ENV = "TRAJLEDGER_PASSPHRASE"
"""The passphrase of every key without one of its own (`passphrase_env`)."""
PASSPHRASE_FILE_ENV = "TRAJLEDGER_PASSPHRASEFILE"
"""The file holding the passphrase of every key without one of its own (`passphrase_file_env`).
No key's variable can take this name or a per-key file's: theirs go on with ``_`` after
``TRAJLEDGER_PASSPHRASE`` (a key named ``file`` is ``TRAJLEDGER_PASSPHRASE_FILE``), these with
``F``; and every one of them begins with ``TRAJLEDGER_PASSPHRASE``, the prefix a command and git
do not inherit (``runner.workdir.HIDDEN_ENV``)."""
PASSPHRASE_FILE_LIMIT = 65536
"""The most bytes a passphrase file may hold (a passphrase is far shorter)."""
_FROM_PIPES: dict[tuple[int, int], bytes] = {}
"""Passphrases read from pipes and other files that are not regular (``/dev/fd/N``), by device
and inode: a pipe is read once, and a command may need the passphrase more than once."""
ENCRYPTION_DIR = "x25519"
"""The key store's subdirectory of X25519 encryption keys (sealed suites)."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class Signer:
    """A private key able to sign, with its public half and name."""

    name: str
    public: PublicKey
    _key: _PrivateKey = field(repr=False, compare=False)

    @property
    def keyid(self) -> str:
        """The keyid of the public key."""
        return self.public.keyid

    def sign(self, data: bytes) -> bytes:
        """Sign ``data``: raw Ed25519, or DER ECDSA over SHA-256."""
        if isinstance(self._key, ed25519.Ed25519PrivateKey):
            return self._key.sign(data)
        return self._key.sign(data, ec.ECDSA(hashes.SHA256()))

    @classmethod
    def generate(cls, name: str, algorithm: str = "ed25519") -> Signer:
        """Make a new key in memory."""
        key: _PrivateKey
        if algorithm == "ed25519":
            key = ed25519.Ed25519PrivateKey.generate()
        elif algorithm == "ecdsa-p256":
            key = ec.generate_private_key(ec.SECP256R1())
        else:
            raise KeyError_(
                f"key {name}: unknown algorithm {algorithm!r}, want one of {ALGORITHMS}"
            )
        return cls.from_private(name, key)

    @classmethod
    def from_private(
        cls, name: str, key: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey
    ) -> Signer:
        """A signer named ``name`` of a private key object of ``cryptography`` held in memory
        (a key loaded by other means than the key store, or a known-answer test key).

        The key is used as given: `KeyStore`'s rules (encryption at rest, file modes) do not
        apply to it.

        Raises:
            FormatError: the key is neither Ed25519 nor ECDSA P-256.
        """
        pem = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return cls(name, PublicKey.from_pem(pem), key)

    def derived_ed25519(self) -> bytes | None:
        """The raw Ed25519 public key derived from the private key this object signs with
        (not `public`, the half it was given), or None when its signatures are not made here
        by that key: a subclass with a `sign` of its own (one that signs through another
        process) or a key that is not Ed25519. A signature it makes then verifies by this key
        (Ed25519's correctness), which a caller may rely on without verifying it (the log's
        writer, for the checkpoints it signs: `CheckedNotes.own`)."""
        if type(self).sign is not Signer.sign or not isinstance(
            self._key, ed25519.Ed25519PrivateKey
        ):
            return None
        return self._key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )

    def private_pem(self, passphrase: bytes | None) -> bytes:
        """The private key as PKCS#8 PEM, encrypted when a passphrase is given
        (`encrypted_pkcs8`)."""
        return private_pem(self._key, passphrase)

    def raw_ed25519_private(self) -> bytes:
        """The 32-byte Ed25519 seed (for signed-note keys)."""
        if not isinstance(self._key, ed25519.Ed25519PrivateKey):
            raise KeyError_(f"key {self.name}: is {self.public.algorithm}, want ed25519")
        return self._key.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )


@dataclass(frozen=True)
class KeyInfo:
    """What `KeyStore.list` reports about one key."""

    name: str
    algorithm: str
    keyid: str
    encrypted: bool
    public_path: Path
    weak: bool = False
    """Encrypted with less key-derivation work than trajledger writes (`weakly_encrypted`):
    ``trajledger key encrypt NAME`` re-encrypts it."""
    private: bool = True
    """Its private half is here (a ``.key`` beside the ``.pub``); without it the key verifies
    and cannot sign (a second machine given the public keys, or a lost key)."""


def passphrase_env(name: str) -> str:
    """The environment variable holding key ``name``'s own passphrase:
    ``TRAJLEDGER_PASSPHRASE_<NAME>``, the name upper-cased with every other character than a
    letter or digit as ``_`` (``approver-a`` -> ``TRAJLEDGER_PASSPHRASE_APPROVER_A``; the log's
    key is ``LOG``)."""
    return f"{PASSPHRASE_ENV}_{re.sub(r'[^A-Z0-9]', '_', name.upper())}"


def refuse_twin(folder: Path, name: str, what: str) -> None:
    """Refuse a new key ``name`` beside a key whose name differs only in letter case or in
    ``.``, ``-`` and ``_`` (``Vendor``, ``vendor_a`` beside ``vendor``, ``vendor-a``): one is
    typed for the other, they share a passphrase variable (`passphrase_env`), and the first
    two are one file on a case-insensitive file system.

    Raises:
        KeyError_: such a key is in ``folder``.
    """
    mine = passphrase_env(name)
    twin = next((p.stem for p in sorted(folder.glob("*.[kp][eu][yb]"))
                 if p.suffix in (".key", ".pub") and p.stem != name
                 and passphrase_env(p.stem) == mine), None)
    if twin is not None:
        raise KeyError_(f"{what} {name}: key {twin} is in {folder}, the same name but for letter "
                        f"case or '.', '-', '_' (both read {mine}); pick another name")


def passphrase_file_env(name: str) -> str:
    """The environment variable naming the file of key ``name``'s own passphrase:
    ``TRAJLEDGER_PASSPHRASEFILE_<NAME>``, the name as in `passphrase_env`."""
    return f"{PASSPHRASE_FILE_ENV}_{re.sub(r'[^A-Z0-9]', '_', name.upper())}"


def passphrase_sources(name: str) -> list[tuple[str, str]]:
    """Where key ``name``'s passphrase is looked for, first to last: its own variable and file
    variable, then every key's. At each level the variable and the file variable may not both
    be set (`KeyStore`); an empty variable is not set."""
    return [(passphrase_env(name), passphrase_file_env(name)),
            (PASSPHRASE_ENV, PASSPHRASE_FILE_ENV)]


def passphrase_hint(name: str) -> str:
    """How to give key ``name``'s passphrase, for an error message; a variable set but empty
    (a CI secret that is missing) is named, as it counts as not set (out41)."""
    empty = [v for pair in passphrase_sources(name) for v in pair if os.environ.get(v) == ""]
    return (f"set {passphrase_env(name)} or {PASSPHRASE_ENV}, name a file holding it in "
            f"{passphrase_file_env(name)} or {PASSPHRASE_FILE_ENV}" + (
                f" ({', '.join(empty)}: set but empty, which is not set)" if empty else ""))


def read_passphrase_file(path: str, variable: str, name: str) -> bytes:
    """The passphrase in the file ``path`` that ``variable`` names, for key ``name``: its bytes
    less one trailing newline, as UTF-8.

    The file is opened following symbolic links and judged by what it opened (its owner and
    mode, read from the open file): ``/dev/fd/N`` and ``/dev/stdin`` are links, to the pipe of
    a shell's ``<(pass show KEY)`` or to what the shell redirected. A pipe (or any file that is
    not a regular one) is read once; its passphrase is kept for the rest of the process.

    Raises:
        KeyError_: the file is missing, unreadable, a directory, owned by another user, open
            to other users (group or other: ``chmod 600``), empty, longer than
            `PASSPHRASE_FILE_LIMIT`, or not UTF-8 (nothing of it shown).
    """
    where = f"key {name}: the passphrase file {path} ({variable})"
    try:
        seen = os.stat(path)
        if not stat.S_ISREG(seen.st_mode) and (seen.st_dev, seen.st_ino) in _FROM_PIPES:
            return _FROM_PIPES[seen.st_dev, seen.st_ino]
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise KeyError_(f"{where}: not found") from None
    except OSError as e:
        raise KeyError_(f"{where}: cannot be read: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise KeyError_(f"{where}: is a directory, not a file")
        if st.st_uid != os.geteuid():
            raise KeyError_(f"{where}: is owned by another user (uid {st.st_uid}), who could "
                            "change it; use a file of your own, mode 600")
        if st.st_mode & 0o077:
            fix = (f"run 'chmod 600 {shell_word(path)}'" if stat.S_ISREG(st.st_mode)
                   or stat.S_ISFIFO(st.st_mode) else "give a file of yours, mode 600")
            raise KeyError_(f"{where}: other users may read or change it (mode "
                            f"{stat.S_IMODE(st.st_mode):04o}); {fix}")
        data = b""
        while len(data) <= PASSPHRASE_FILE_LIMIT:  # a pipe gives what was written, in parts
            part = os.read(fd, PASSPHRASE_FILE_LIMIT + 1 - len(data))
            if not part:
                break
            data += part
    except OSError as e:
        raise KeyError_(f"{where}: cannot be read: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > PASSPHRASE_FILE_LIMIT:
        raise KeyError_(f"{where}: holds more than {PASSPHRASE_FILE_LIMIT:,} bytes: not a "
                        "passphrase")
    if data.endswith(b"\n"):
        data = data[:-1]
    if not data:
        raise KeyError_(f"{where}: is empty; write the passphrase in it")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise KeyError_(f"{where}: is not UTF-8 text; write the passphrase as UTF-8 (nothing of "
                        "it is shown here)") from None
    if not stat.S_ISREG(st.st_mode):
        _FROM_PIPES[st.st_dev, st.st_ino] = data
    return data


def _read_or_empty(path: Path) -> bytes:
    """A private key file's bytes (at most 64 KiB: a key file is far smaller), or none; opened
    as a regular file (a FIFO left there hung 'key list' and 'key export' of every key: rev34).

    Raises:
        KeyError_: it is not a regular file, or cannot be read."""
    from trajledger.verify.ledger_dir import read_regular

    try:
        return read_regular(path, 65536)
    except FileNotFoundError:
        return b""
    except OSError as e:
        raise KeyError_(f"key {path.stem}: cannot read {path}: {e.strerror}") from e


def _refuse_link(path: Path) -> None:
    """Refuse a private key file that is a symbolic link, as an ``O_NOFOLLOW`` reader would:
    encrypting it replaces the link and leaves its target in the clear where it is.

    Raises:
        KeyError_: ``path`` is a link (its target named).
    """
    if path.is_symlink():
        raise KeyError_(
            f"{path}: is a symbolic link (to {os.readlink(path)}); encrypting it would replace "
            "the link and leave its target in the clear: put the key file itself there (or "
            "remove it); nothing was encrypted"
        )


def check_key_name(name: str) -> str:
    """Refuse names that are not safe file names.

    Raises:
        KeyError_: the name has path separators, starts with a dot, or is too long.
    """
    if not _NAME.fullmatch(name):
        raise KeyError_(
            f"key name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit"
        )
    return name


KEYLESS_MADE = "keyless-made"
"""The key directory's note of the keyless signatures made here (`KeyStore.note_keyless`)."""


class KeyStore:
    """Keys in one directory: ``NAME.key`` (private, 0600) and ``NAME.pub``."""

    def __init__(
        self,
        directory: Path,
        passphrase: Callable[[str], bytes | None] | None = None,
        *,
        label: str | None = None,
        require_encrypted: bool = False,
        group_writable: bool = False,
    ) -> None:
        """Open a key directory.

        Args:
            directory: where keys live (created on first write, mode 0700).
            passphrase: called with a key name when a passphrase is needed and none is set in
                the environment; returns it, or None for none.
            label: the name every key of this directory goes by for its passphrase (the log's
                key directory: ``log``, whichever file is being rotated in).
            require_encrypted: the ledger's keys are encrypted (``ledger.toml``): a plaintext
                private key is refused, and none is created.
            group_writable: the ledger is shared through its group: group write is accepted.
        """
        self.directory = directory
        self._ask = passphrase
        self.label = label
        self.require_encrypted = require_encrypted
        self.group_writable = group_writable
        self._given: dict[str, bytes | None] = {}

    def _passphrase_set(self, name: str) -> bytes | None:
        """The passphrase of key ``name`` given in the environment, if any (UTF-8): in a
        variable, or in the file a variable names (`passphrase_sources`, the first level set).

        Raises:
            KeyError_: the variable holds bytes that are not UTF-8 (named, its value not shown);
                both the variable and the file variable of one level are set; the file is
                refused (`read_passphrase_file`).
        """
        for variable, file_variable in passphrase_sources(self.label or name):
            value, path = os.environ.get(variable), os.environ.get(file_variable)
            if value and path:
                raise KeyError_(f"key {name}: both {variable} and {file_variable} are set: "
                                "which one holds its passphrase? Unset one")
            if path:
                return read_passphrase_file(path, file_variable, name)
            if not value:
                continue
            try:
                return value.encode("utf-8")
            except UnicodeEncodeError:  # os.environ holds undecodable bytes as surrogates
                raise KeyError_(
                    f"key {name}: {variable} is not UTF-8 text; set the passphrase as UTF-8 "
                    "(nothing of its value is shown here)"
                ) from None
        return None

    def passphrase_given(self, name: str) -> bool:
        """Whether a variable of key ``name``'s passphrase or its file is set (not read)."""
        return any(os.environ.get(v) for pair in passphrase_sources(self.label or name)
                   for v in pair)

    def _passphrase(self, name: str) -> bytes | None:
        found = self._passphrase_set(name)
        if found is not None:
            return found
        who = self.label or name
        if who not in self._given:  # asked once per key (and store)
            self._given[who] = self._ask(who) if self._ask else None
        return self._given[who]

    def has_passphrase(self, name: str) -> bool:
        """Whether key ``name`` has a passphrase: set in the environment, or asked for (on a
        terminal) and given; the answer is kept for this store's later use."""
        return bool(self._passphrase(name))

    def _refuse_writable(self, path: Path) -> None:
        from .fs import refuse_writable

        refuse_writable(path, group=not self.group_writable)

    def create(self, name: str, algorithm: str = "ed25519", *, encrypt: bool = True) -> Signer:
        """Generate a key and write it; refuses to overwrite an existing key.

        Raises:
            KeyError_: bad name or algorithm, the key exists, no passphrase for encryption, or
                a plaintext key where the ledger's keys are encrypted.
        """
        check_key_name(name)
        priv_path = self.directory / f"{name}.key"
        drop_stale_temps(self.directory)  # a killed creation's
        if priv_path.exists() or (self.directory / f"{name}.pub").exists():
            raise KeyError_(f"key {name}: already exists in {self.directory}; pick another name")
        refuse_twin(self.directory, name, "key")
        if not encrypt and self.require_encrypted:
            raise KeyError_(
                f"key {name}: this ledger's keys are encrypted (ledger.toml: keys = "
                '"encrypted"); a plaintext key would be refused as planted: drop --no-encrypt'
            )
        signer = Signer.generate(name, algorithm)
        passphrase = self._passphrase(name) if encrypt else None
        if encrypt and not passphrase:
            raise KeyError_(
                f"key {name}: no passphrase; {passphrase_hint(self.label or name)}, run in a "
                "terminal, or pass --no-encrypt for a demo key"
            )
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Neither file is written over one made meanwhile: two processes creating one name
        # (two 'log rotate-key' at once) would otherwise each keep a private key the other's
        # write replaced on disk (rev13 finding 6).
        try:
            write_file_atomic(priv_path, signer.private_pem(passphrase), mode=0o600,
                              exclusive=True)
            write_file_atomic(self.directory / f"{name}.pub", signer.public.to_pem(),
                              mode=0o644, exclusive=True)
        except FileExistsError as e:
            raise KeyError_(f"key {name}: already exists in {self.directory} (made by another "
                            "process meanwhile); pick another name") from e
        return signer

    def create_or_finish(self, name: str, algorithm: str = "ed25519", *,
                         encrypt: bool = True) -> Signer:
        """`create` a key, or finish one whose creation stopped between its two files (a kill,
        a full disk): a private key of ``algorithm`` without its public key gets the public
        key, derived from it (the private key passes `signer`'s checks first).

        Raises:
            KeyError_, TamperError: as `create`, or the private key cannot be loaded.
        """
        path, pub_path = self.directory / f"{name}.key", self.directory / f"{name}.pub"
        drop_stale_temps(self.directory)  # a killed creation's
        if not path.exists() or pub_path.exists() or pub_path.is_symlink():
            return self.create(name, algorithm, encrypt=encrypt)
        key = self._private(name, path, pub_path, "", allow_plain=not encrypt)
        signer = (Signer.from_private(name, key) if isinstance(key, ed25519.Ed25519PrivateKey
                                                                | ec.EllipticCurvePrivateKey)
                  else None)
        if signer is None or signer.public.algorithm != algorithm:
            raise KeyError_(f"key {name}: {path} is not an {algorithm} key; remove it (a "
                            "creation that stopped) to start over")
        with contextlib.suppress(FileExistsError):  # another process finished it meanwhile
            write_file_atomic(pub_path, signer.public.to_pem(), mode=0o644, exclusive=True)
        return self.signer(name)

    def encrypt(self, name: str, *, x25519_key: bool = False) -> bool:
        """Encrypt key ``name``'s private key file in place (its passphrase as for `signer`), or
        re-encrypt it with `encrypted_pkcs8` when it is encrypted with less key-derivation work
        (`weakly_encrypted`: the 2,048 PBKDF2 rounds of keys written before the seventh round of
        2026-12-03), with the passphrase it loads with. ``x25519_key``: the X25519 encryption
        key ``name`` (`decrypter`), not the signing key.

        Returns:
            False when it was encrypted already, with at least `SCRYPT_COST`'s work.

        Raises:
            KeyError_: as `signer` (or `decrypter`), or no passphrase to encrypt with.
        """
        folder = self.encryption_directory if x25519_key else self.directory
        path = folder / f"{check_key_name(name)}.key"
        _refuse_link(path)
        data = path.read_bytes() if path.is_file() else b""
        if is_encrypted(data) and not weakly_encrypted(data):
            return False
        key = (self.decrypter(name)[1] if x25519_key
               else self._load(name, allow_plain=True)._key)  # the refusals of a use
        passphrase = self._passphrase(name)
        if not passphrase:
            raise KeyError_(
                f"key {name}: no passphrase to encrypt {path} with; "
                f"{passphrase_hint(self.label or name)}, or run in a terminal"
            )
        write_file_atomic(path, private_pem(key, passphrase), mode=0o600)
        return True

    def public(self, name: str) -> PublicKey:
        """Load a public key by name.

        Raises:
            KeyError_: unknown key, or an unreadable / invalid public key file.
        """
        from trajledger.verify.ledger_dir import read_regular

        check_key_name(name)
        path = self.directory / f"{name}.pub"
        try:
            data = read_regular(path, 65536)  # a PEM public key is far smaller (rev34)
        except FileNotFoundError as e:
            key = path.with_suffix(".key")
            raise KeyError_(
                f"key {name}: its public half {path} is missing, but {key} is there: write it "
                f"again with 'openssl pkey -in {key} -pubout -out {path}' and compare its "
                "fingerprint ('trajledger key list') with your policy's" if key.exists()
                else self._unknown(name, self.directory, "see 'trajledger key list'")) from e
        except OSError as e:
            raise KeyError_(f"key {name}: cannot read {path}: {e.strerror}") from e
        try:
            return PublicKey.from_pem(data, f"key {name} ({path})")
        except ValueError as e:
            from .key_forms import hinted  # DER or OpenSSH: named, with how to convert (left38)

            raise KeyError_(hinted(str(e), data, path)) from e

    def signer(self, name: str) -> Signer:
        """Load a private key, decrypting it.

        Steps:
            1. The key directory, ``NAME.pub`` and ``NAME.key`` are writable only by their
               owner (and the group of a shared ledger); ``NAME.key`` is readable by nobody
               else.
            2. A plaintext ``NAME.key`` is refused where the ledger's keys are encrypted or a
               passphrase for it is set: someone who cannot encrypt planted it.
            3. Decrypt it; it must be Ed25519 or P-256, and the private half of ``NAME.pub``.

        Raises:
            KeyError_: unknown key, wrong or missing passphrase, corrupt or truncated file
                (told apart from a wrong passphrase), a key derivation asking for more work
                than `KDF_LIMIT`, an algorithm other than Ed25519 / P-256; a file or directory
                others may write, a private key others may read (exit 3).
            TamperError: a plaintext key where keys are encrypted, or a private key that is
                not the pair of ``NAME.pub`` (exit 1).
        """
        return self._load(name, allow_plain=False)

    def _load(self, name: str, *, allow_plain: bool) -> Signer:
        check_key_name(name)
        path = self.directory / f"{name}.key"
        pub_path = self.directory / f"{name}.pub"
        key = self._private(name, path, pub_path, "", allow_plain=allow_plain)
        if not isinstance(key, ed25519.Ed25519PrivateKey) and not (
            isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1)
        ):
            raise KeyError_(f"key {name}: unsupported algorithm, want Ed25519 or ECDSA P-256")
        signer = Signer.from_private(name, key)
        # The public half is what policies and key lists name: a private key that is not its
        # pair (a replaced or symlinked file) would sign under another key's name and role.
        public = self.public(name)
        if public.keyid != signer.keyid:
            raise TamperError(
                f"key {name}: {path} is not the private half of {pub_path}"
                f" (keyid {signer.keyid[:16]}…, want {public.keyid[:16]}…); the key file was "
                "replaced: nothing was signed",
                path,
            )
        return signer

    @staticmethod
    def _unknown(
        name: str, folder: Path, otherwise: str, missing: str = "not found in",
        what: str = "key",
    ) -> str:
        """Why key ``name`` is not in ``folder``: the keys there whose names are close
        ("did you mean"), else ``otherwise`` (how to create it)."""
        from .suggestions import did_you_mean, suggest

        names = sorted({p.stem for p in folder.glob("*.pub")}) if folder.is_dir() else []
        close = suggest(name, names)
        if close:
            shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
            return f"{what} {name}: {missing} {folder}; {did_you_mean(close)} (keys: {shown})"
        return f"{what} {name}: {missing} {folder}; {otherwise}"

    def note_keyless(self, bundle: bytes) -> str:
        """Note that this ledger made the keyless signature whose Sigstore bundle is ``bundle``:
        its keyid (hex sha256 of the bundle, `sigstore_adapter.bundle_keyid`) appended and
        synced to ``keyless-made`` here, before the record it signs is logged. A keyless
        signature has no private half held here; this note is what tells the records signed
        here from another log's (`updates.sent_back`; review kless31, finding 1). Returns the
        keyid.

        Raises:
            KeyError_: the note is no regular file (a link, a FIFO, a directory: rev29), or a
                hard link (left33): nothing written."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        path, keyid = self.directory / KEYLESS_MADE, hashlib.sha256(bundle).hexdigest()
        new = not path.exists()
        planted = (f"{path}: not a regular file (a link, a FIFO, a directory?): the keyless "
                   "signature made here cannot be noted, so nothing was recorded; move it away "
                   "and sign again")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                         | os.O_NONBLOCK, 0o660 if self.group_writable else 0o600)
        except OSError as e:  # a link (ELOOP), a FIFO nobody reads (ENXIO), a directory
            if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise KeyError_(planted) from e
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # a FIFO somebody reads (rev29)
                raise KeyError_(planted)
            if st.st_nlink != 1:  # another name of the file would get the keyid (left33)
                fresh = shell_word(f"{path}.new")
                raise KeyError_(
                    f"{path}: a hard link ({st.st_nlink} names of one file): the keyid would "
                    "be written into a file of another name too, so nothing was recorded; "
                    f"give it a file of its own (cp -p {shell_word(path)} {fresh} && mv {fresh} "
                    f"{shell_word(path)}) and sign again")
            os.write(fd, keyid.encode("ascii") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        if new:
            fsync_dir(self.directory)
        return keyid

    def keyless_made(self) -> set[str]:
        """The keyids of the keyless signatures this ledger made (`note_keyless`): none when
        the note is missing, a link or not a regular file."""
        try:
            fd = os.open(self.directory / KEYLESS_MADE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return set()
        try:  # a directory is opened, and os.fdopen would raise (rev29)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return set()
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as f:
            words = f.read().decode("ascii", "replace").split()
        return {w for w in words if re.fullmatch(r"[0-9a-f]{64}", w)}

    def list_private(self) -> list[Path]:
        """The private key files of this directory."""
        return sorted(self.directory.glob("*.key")) if self.directory.is_dir() else []

    def plaintext(self) -> list[Path]:
        """The private key files of this directory that are not encrypted."""
        return [p for p in self.list_private() if not is_encrypted(p.read_bytes()[:64])]

    def plaintext_to_encrypt(self) -> list[Path]:
        """`plaintext`, none of them a symbolic link (`encrypt` refuses one).

        Raises:
            KeyError_: one is a link, named with its target.
        """
        found = self.plaintext()
        for path in found:
            _refuse_link(path)
        return found

    def _private(
        self, name: str, path: Path, pub_path: Path, option: str, *, allow_plain: bool = False,
        use: str = "signed",
    ) -> object:
        """Read and decrypt the private key file ``path`` of key ``name`` (a signing key, or an
        X25519 key with ``option`` ``" --alg x25519"``, what 'trajledger key new' needs to make it).

        Steps:
            1. The key's directory, ``pub_path`` and ``path`` are writable only by their owner
               (and the group of a shared ledger); ``path`` is readable by nobody else.
            2. A plaintext key is refused where the ledger's keys are encrypted or a passphrase
               for it is set: someone who cannot encrypt planted it.
            3. Decrypt it.

        Raises:
            KeyError_: absent, readable by others, writable by others, no or a wrong
                passphrase, corrupt (exit 3).
            TamperError: a plaintext key where keys are encrypted (exit 1).
        """
        # (1)
        try:
            mode = os.stat(path).st_mode
            data = path.read_bytes()
        except FileNotFoundError as e:
            if pub_path.exists():  # 'key new' refuses the name while the .pub is there
                raise KeyError_(
                    f"key {name}: its private half {path} is missing, but {pub_path} is there: "
                    "restore it from your backup" + ("" if self.label else " (a lost key is "
                    "replaced by a new key under another name, which a successor policy names, "
                    "signed by the policy in force's approvers)")) from e
            raise KeyError_(self._other_kind(name, option) or self._unknown(
                name, path.parent, f"create it with 'trajledger key new {name}{option}'",
                "no private key in",
            )) from e
        except OSError as e:
            raise KeyError_(f"key {name}: cannot read {path}: {e.strerror}") from e
        if mode & 0o077:
            raise KeyError_(
                f"key {name}: {path} can be read by other users (mode {stat.S_IMODE(mode):04o}); "
                f"run 'chmod 600 {shell_word(path)}'"
            )
        for p in (path.parent, pub_path):
            self._refuse_writable(p)
        # (2)
        encrypted = is_encrypted(data)
        if not encrypted and not allow_plain:
            why = (
                "this ledger's keys are encrypted (ledger.toml: keys = \"encrypted\")"
                if self.require_encrypted
                else f"a passphrase for it is set ({passphrase_env(self.label or name)}, "
                f"{PASSPHRASE_ENV} or a passphrase file)"
                if self._passphrase_set(name) is not None
                else None
            )
            if why is not None:
                raise TamperError(
                    f"key {name}: {path} is not encrypted, but {why}: a key file planted by "
                    f"someone without the passphrase; nothing was {use}. If you wrote it "
                    f"yourself, encrypt it with 'trajledger key encrypt {name}'",
                    path,
                )
        # (3) The file's own key-derivation cost is bounded before anything is derived, and a
        # file that is not whole is named so, not taken for a wrong passphrase.
        if encrypted:
            try:
                cost = kdf_cost(data)
            except (ValueError, IndexError) as e:
                raise KeyError_(f"key {name}: cannot load {path}: corrupt or truncated key file"
                                ) from e
            if cost > KDF_LIMIT:
                raise KeyError_(
                    f"key {name}: cannot load {path}: its key derivation asks for {cost:,} "
                    f"rounds, more than the {KDF_LIMIT:,} a key file may: a damaged or planted "
                    f"key file; nothing was {use}"
                )
        passphrase = self._passphrase(name) if encrypted else None
        if encrypted and not passphrase:
            raise KeyError_(
                f"key {name}: is encrypted; {passphrase_hint(self.label or name)}, or run in "
                "a terminal"
            )
        try:
            return _load_private(data, passphrase)
        except (ValueError, TypeError) as e:
            why = (
                "wrong passphrase or corrupt key file" if encrypted
                else "it holds a public key, not the private one: put the private key there"
                if b"-----BEGIN PUBLIC KEY-----" in data else "corrupt or truncated key file"
            )
            if encrypted:
                why += f" (the passphrase {self._passphrase_from(name)})"
            raise KeyError_(f"key {name}: cannot load {path}: {why}") from e

    def _other_kind(self, name: str, option: str) -> str | None:
        """Why key ``name`` of the kind ``option`` asks for (``""`` a signing key, else an
        X25519 encryption key) is missing when a key of the other kind has that name: it is
        said, so that a key of the wrong kind is not taken for a missing one (an evaluator
        holds one of each, of one name: creating the other is then right)."""
        if option:
            there = self.directory / f"{name}.key"
            return (f"key {name}: no X25519 encryption key in {self.encryption_directory}; "
                    f"{name} is a signing key, which cannot open sealed suites: give an "
                    "encryption key, or make one of that name (an evaluator holds both) with "
                    f"'trajledger key new {name} --alg x25519'" if there.exists() else None)
        return (f"key {name}: no signing key in {self.directory}; {name} is an X25519 "
                f"encryption key ({ENCRYPTION_DIR}/), which cannot sign: give a signing key "
                "('trajledger key list'), or make one of that name (an evaluator holds both) "
                f"with 'trajledger key new {name}'"
                if (self.encryption_directory / f"{name}.key").exists() else None)

    def _passphrase_from(self, name: str) -> str:
        """Where key ``name``'s passphrase came from, for a wrong one: the variable (or file
        variable) set first of `passphrase_sources`, said to come before the others set."""
        given = [v for pair in passphrase_sources(self.label or name) for v in pair
                 if os.environ.get(v)]
        if not given:
            return "typed at the prompt"
        later = f", which is used before {', '.join(given[1:])}" if given[1:] else ""
        return f"in {given[0]}{later}"

    # -- X25519 encryption keys (sealed suites) ------------------------------------------------

    @property
    def encryption_directory(self) -> Path:
        """Where X25519 encryption keys live: ``<keys>/x25519/NAME.key`` (encrypted PKCS#8,
        0600) and ``NAME.pub``, apart from the signing keys (a policy names them separately)."""
        return self.directory / ENCRYPTION_DIR

    def create_encryption_key(self, name: str, *, encrypt: bool = True) -> EncryptionKey:
        """Generate an X25519 key pair for receiving sealed suites, written like a signing key.

        Raises:
            KeyError_: bad name, the key exists, or no passphrase for encryption.
        """
        check_key_name(name)
        folder = self.encryption_directory
        if (folder / f"{name}.key").exists() or (folder / f"{name}.pub").exists():
            raise KeyError_(f"encryption key {name}: already exists in {folder}; pick another name")
        refuse_twin(folder, name, "encryption key")
        passphrase = self._passphrase(name) if encrypt else None
        if encrypt and not passphrase:
            raise KeyError_(
                f"encryption key {name}: no passphrase; {passphrase_hint(self.label or name)}, "
                "run in a terminal, or pass --no-encrypt for a demo key"
            )
        key = x25519.X25519PrivateKey.generate()
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)  # as for a signing key
        folder.mkdir(exist_ok=True, mode=0o700)
        write_file_atomic(
            folder / f"{name}.key",
            private_pem(key, passphrase),
            mode=0o600,
        )
        pem = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        write_file_atomic(folder / f"{name}.pub", pem, mode=0o644)
        return EncryptionKey.from_pem(pem)

    def encryption_key(self, name: str) -> EncryptionKey:
        """The public half of X25519 key ``name``.

        Raises:
            KeyError_: unknown or unreadable.
        """
        check_key_name(name)
        path = self.encryption_directory / f"{name}.pub"
        try:
            return EncryptionKey.from_pem(path.read_bytes(), f"encryption key {name} ({path})")
        except FileNotFoundError as e:
            raise KeyError_(self._unknown(
                name, path.parent, f"create it with 'trajledger key new {name} --alg x25519'",
                what="encryption key",
            )) from e
        except (OSError, ValueError) as e:
            raise KeyError_(f"encryption key {name}: cannot read {path}: {e}") from e

    def decrypter(self, name: str) -> tuple[EncryptionKey, x25519.X25519PrivateKey]:
        """The X25519 private key ``name`` (decrypted as a signing key is) with its public half.

        Raises:
            KeyError_: as `signer`; not X25519.
            TamperError: the private key is not the pair of ``NAME.pub``.
        """
        check_key_name(name)
        path = self.encryption_directory / f"{name}.key"
        key = self._private(name, path, path.with_suffix(".pub"), " --alg x25519",
                            use="decrypted")
        if not isinstance(key, x25519.X25519PrivateKey):
            raise KeyError_(f"encryption key {name}: {path} is not an X25519 key")
        public = self.encryption_key(name)
        mine = EncryptionKey.from_pem(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        if mine.keyid != public.keyid:
            raise TamperError(
                f"encryption key {name}: {path} is not the private half of its .pub (keyid "
                f"{mine.keyid[:16]}…, want {public.keyid[:16]}…); nothing was decrypted",
                path,
            )
        return public, key

    def encryption_keys(self) -> list[tuple[str, EncryptionKey, bool, bool]]:
        """Every X25519 key (name, public key, private key encrypted, weakly), sorted by name."""
        folder = self.encryption_directory
        out = []
        for pub in sorted(folder.glob("*.pub")) if folder.is_dir() else []:
            data = _read_or_empty(folder / f"{pub.stem}.key")
            encrypted = is_encrypted(data)
            out.append((pub.stem, self.encryption_key(pub.stem), encrypted,
                        encrypted and weakly_encrypted(data)))
        return out

    def list(self) -> list[KeyInfo]:
        """Every key with a public half in the directory, sorted by name."""
        out: list[KeyInfo] = []
        if not self.directory.is_dir():
            return out
        for pub in sorted(self.directory.glob("*.pub")):
            name = pub.stem
            key = self.public(name)
            data = _read_or_empty(self.directory / f"{name}.key")
            encrypted = is_encrypted(data)
            out.append(KeyInfo(name, key.algorithm, key.keyid, encrypted, pub,
                               encrypted and weakly_encrypted(data), bool(data)))
        return out


def _load_private(data: bytes, passphrase: bytes | None) -> object:
    """The private key in PEM ``data``, decrypted with ``passphrase``; a passphrase that is
    not ASCII is tried again in its other Unicode normal forms (NFC, NFD) when the one given
    does not open it (out51: ``ü`` is one code point typed on one machine, two from another's
    keyboard, file or clipboard; the key was encrypted with the bytes of the first).

    Raises:
        ValueError / TypeError: no form opens it (cryptography's error for the one given).
    """
    import unicodedata

    try:
        return serialization.load_pem_private_key(data, password=passphrase)
    except (ValueError, TypeError):
        text = ""
        if passphrase is not None and not passphrase.isascii():
            with contextlib.suppress(UnicodeDecodeError):
                text = passphrase.decode("utf-8")
        for form in ("NFC", "NFD") if text else ():
            other = unicodedata.normalize(form, text).encode("utf-8")
            if other != passphrase:
                with contextlib.suppress(ValueError, TypeError):
                    return serialization.load_pem_private_key(data, password=other)
        raise
