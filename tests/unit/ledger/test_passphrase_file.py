"""Passphrases from files (fix10, rev9's limit "Passphrases come from environment variables or a
prompt only"): ``TRAJLEDGER_PASSPHRASEFILE_<NAME>`` and ``TRAJLEDGER_PASSPHRASEFILE`` name a file
holding a key's passphrase, so a non-interactive run need not keep it in its environment.

Each test here failed before fix10: the variables were not read (a key made with a passphrase
file set was refused, "no passphrase"), or were read as nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from trajledger.ledger.errors import KeyError_
from trajledger.ledger.keys import (
    PASSPHRASE_FILE_LIMIT,
    KeyStore,
    passphrase_env,
    passphrase_file_env,
)

PASSWORD = "horse staple (file)"


@pytest.fixture
def keys(tmp_path: Path) -> KeyStore:
    return KeyStore(tmp_path / "keys")


def _secret(tmp_path: Path, data: bytes, name: str = "pass", mode: int = 0o600) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    path.chmod(mode)
    return path


def _opens_with(keys: KeyStore, name: str, passphrase: bytes) -> bool:
    """Whether key ``name``'s file decrypts with ``passphrase`` (read apart from the store)."""
    try:
        serialization.load_pem_private_key((keys.directory / f"{name}.key").read_bytes(),
                                           passphrase)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("variable", ["TRAJLEDGER_PASSPHRASEFILE",
                                      "TRAJLEDGER_PASSPHRASEFILE_ALICE"])
def test_a_key_is_made_and_opened_with_the_passphrase_in_a_file(
    keys: KeyStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """One trailing newline is stripped and nothing else (a space or a second newline stays)."""
    monkeypatch.setenv(variable, str(_secret(tmp_path, f" {PASSWORD}\n\n".encode())))
    made = keys.create("alice")
    assert _opens_with(keys, "alice", f" {PASSWORD}\n".encode())
    assert not _opens_with(keys, "alice", f" {PASSWORD}".encode())
    assert keys.signer("alice").keyid == made.keyid


def test_the_variable_names_cannot_collide_with_a_key_named_file(
    keys: KeyStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key named ``file`` has the passphrase variable TRAJLEDGER_PASSPHRASE_FILE (a passphrase,
    not a path), and TRAJLEDGER_PASSPHRASEFILE_FILE for its file; a key named ``file-log`` does
    not answer to the log's file variable."""
    assert passphrase_env("file") == "TRAJLEDGER_PASSPHRASE_FILE"
    assert passphrase_file_env("file") == "TRAJLEDGER_PASSPHRASEFILE_FILE"
    assert passphrase_file_env("log") != passphrase_env("file-log")
    path = _secret(tmp_path, b"from the file\n")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE_FILE", str(path))  # key file's passphrase
    keys.create("file")
    assert _opens_with(keys, "file", str(path).encode())  # the value itself, never read as a path
    monkeypatch.delenv("TRAJLEDGER_PASSPHRASE_FILE")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE_FILE", str(path))
    with pytest.raises(KeyError_, match="wrong passphrase"):
        keys.signer("file")  # the file's content is not this key's passphrase: its path was
    other = KeyStore(tmp_path / "other-keys")
    other.create("file")
    assert _opens_with(other, "file", b"from the file")


def test_precedence_own_variable_own_file_then_every_keys(
    keys: KeyStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key's own variable or own file first, then TRAJLEDGER_PASSPHRASE or
    TRAJLEDGER_PASSPHRASEFILE; a prompt last. Both of one level set is refused, naming both."""
    own, every = _secret(tmp_path, b"own\n", "own"), _secret(tmp_path, b"every\n", "every")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", "every-variable")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE_A", str(own))
    keys.create("a")
    assert _opens_with(keys, "a", b"own")  # own file over every key's variable
    monkeypatch.delenv("TRAJLEDGER_PASSPHRASE")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE", str(every))
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE_B", "b-variable")
    keys.create("b")
    assert _opens_with(keys, "b", b"b-variable")  # own variable over every key's file
    keys.create("c")
    assert _opens_with(keys, "c", b"every")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE_B", str(own))
    with pytest.raises(KeyError_) as caught:
        keys.signer("b")
    assert str(caught.value) == (
        "key b: both TRAJLEDGER_PASSPHRASE_B and TRAJLEDGER_PASSPHRASEFILE_B are set: which one "
        "holds its passphrase? Unset one")
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", "every-variable")
    with pytest.raises(KeyError_, match=r"^key c: both TRAJLEDGER_PASSPHRASE and "
                       "TRAJLEDGER_PASSPHRASEFILE are set"):
        keys.signer("c")
    asked: list[str] = []
    prompted = KeyStore(keys.directory, lambda n: asked.append(n) or b"every")
    monkeypatch.delenv("TRAJLEDGER_PASSPHRASE")
    assert prompted.signer("c") and asked == []  # a file set: no prompt


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o660])
def test_a_file_other_users_may_read_or_change_is_refused_saying_the_chmod(
    keys: KeyStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int
) -> None:
    path = _secret(tmp_path, b"pw\n", mode=mode)
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE", str(path))
    with pytest.raises(KeyError_) as caught:
        keys.create("alice")
    assert str(caught.value) == (
        f"key alice: the passphrase file {path} (TRAJLEDGER_PASSPHRASEFILE): other users may "
        f"read or change it (mode {mode:04o}); run 'chmod 600 {path}'")
    assert "\n" not in str(caught.value)
    assert not (keys.directory / "alice.key").exists()


def test_a_device_others_may_use_is_refused(
    keys: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/dev/null`` (or ``/dev/stdin`` on a terminal): no chmod to run on it."""
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE", "/dev/null")
    with pytest.raises(KeyError_) as caught:
        keys.create("alice")
    why = ("other users may read or change it (mode 0666); give a file of yours, mode 600"
           if os.geteuid() == 0 else "is owned by another user (uid 0), who could change it; "
           "use a file of your own, mode 600")
    assert str(caught.value) == (
        f"key alice: the passphrase file /dev/null (TRAJLEDGER_PASSPHRASEFILE): {why}")


def test_a_file_another_user_owns_is_refused(
    keys: KeyStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    path = _secret(tmp_path, b"pw\n")
    os.chown(path, 65534, -1)
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE_ALICE", str(path))
    with pytest.raises(KeyError_) as caught:
        keys.create("alice")
    assert str(caught.value) == (
        f"key alice: the passphrase file {path} (TRAJLEDGER_PASSPHRASEFILE_ALICE): is owned by "
        "another user (uid 65534), who could change it; use a file of your own, mode 600")


def test_a_symbolic_link_is_judged_by_the_file_it_points_to(
    keys: KeyStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Followed (``/dev/fd/N`` and ``/dev/stdin`` are links): a link to a 0600 file works, a link
    (itself 0777) to a 0644 file is refused with the target's mode."""
    target = _secret(tmp_path, b"linked\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE", str(link))
    keys.create("alice")
    assert _opens_with(keys, "alice", b"linked")
    target.chmod(0o644)
    with pytest.raises(KeyError_, match=r"other users may read or change it \(mode 0644\)"):
        keys.signer("alice")


@pytest.mark.parametrize(("data", "why"), [
    (b"", "is empty; write the passphrase in it"),
    (b"\n", "is empty; write the passphrase in it"),
    (b"se\xffcret\n", "is not UTF-8 text; write the passphrase as UTF-8 (nothing of it is "
                      "shown here)"),
    (b"x" * (PASSPHRASE_FILE_LIMIT + 1), "holds more than 65,536 bytes: not a passphrase"),
])
def test_an_empty_non_utf8_or_huge_file_is_refused_showing_nothing_of_it(
    keys: KeyStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes, why: str
) -> None:
    path = _secret(tmp_path, data)
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE", str(path))
    with pytest.raises(KeyError_) as caught:
        keys.create("carol")
    assert str(caught.value) == (
        f"key carol: the passphrase file {path} (TRAJLEDGER_PASSPHRASEFILE): {why}")
    assert caught.value.__cause__ is None
    assert not (keys.directory / "carol.key").exists()


def test_a_missing_file_or_a_directory_is_named(
    keys: KeyStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE", str(tmp_path / "nope"))
    with pytest.raises(KeyError_) as caught:
        keys.create("carol")
    assert str(caught.value) == (
        f"key carol: the passphrase file {tmp_path / 'nope'} (TRAJLEDGER_PASSPHRASEFILE): not "
        "found")
    folder = tmp_path / "folder"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE", str(folder))
    with pytest.raises(KeyError_, match=r"is a directory, not a file$"):
        keys.create("carol")


def test_a_plaintext_key_is_refused_as_planted_when_a_passphrase_file_is_set(
    keys: KeyStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with a passphrase variable: a passphrase given in a file is a passphrase set."""
    from trajledger.ledger.errors import TamperError

    keys.create("alice", encrypt=False)
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASEFILE_ALICE", str(_secret(tmp_path, b"pw\n")))
    assert keys.passphrase_given("alice")
    with pytest.raises(TamperError, match="but a passphrase for it is set"):
        keys.signer("alice")


def test_a_pipe_is_read_once_and_its_passphrase_kept(tmp_path: Path) -> None:
    """bash's ``<(printf ...)``: ``/dev/fd/63``, a link to a pipe, read to its end once; the key
    is made, then opened again in the same process (the pipe is empty by then)."""
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from trajledger.ledger.keys import KeyStore\n"
        f"keys = KeyStore(Path({str(tmp_path / 'keys')!r}))\n"
        "made = keys.create('alice')\n"
        "assert keys.signer('alice').keyid == made.keyid\n"
        "assert keys.signer('alice').keyid == made.keyid\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJLEDGER_PASSPHRASE")}
    run = subprocess.run(
        ["bash", "-c", f'TRAJLEDGER_PASSPHRASEFILE=<(printf "piped\\n") {sys.executable} -c "$0"',
         script], env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "ok\n"
    assert _opens_with(KeyStore(tmp_path / "keys"), "alice", b"piped")
