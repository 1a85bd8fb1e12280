"""Ledger.init / Ledger.open and ledger.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from trajledger.ledger.errors import LedgerError
from trajledger.ledger.home import CONFIG_NAME, FORMAT_VERSION, Ledger, LedgerConfig, default_origin
from trajledger.ledger.keys import KeyStore
from trajledger.ledger.store import ObjectStore


def test_init_writes_settings_and_open_reads_them(tmp_path: Path) -> None:
    root = tmp_path / "led"
    made = Ledger.init(root, origin="example.com/log")
    text = (root / CONFIG_NAME).read_text()
    assert tomllib.loads(text) == {
        "ledger": {"format": FORMAT_VERSION, "origin": "example.com/log", "store": "objects",
                   "keys": "plain"}  # no passphrase: the log key is a demo key
    }
    assert (root / "objects").is_dir()
    opened = Ledger.open(root)
    assert opened.config == made.config == LedgerConfig("example.com/log", "objects",
                                                         keys="plain")
    assert opened.root == root
    assert opened.log_dir == root / "log"
    assert isinstance(opened.keys, KeyStore) and opened.keys.directory == root / "keys"
    assert isinstance(opened.store, ObjectStore) and opened.store.root == root / "objects"


def test_default_origin(tmp_path: Path) -> None:
    ledger = Ledger.init(tmp_path / "led")
    assert re.fullmatch(r"trajledger/[A-Za-z0-9.-]+/[0-9a-f]{8}", ledger.config.origin)
    assert default_origin() != default_origin()


def test_init_refuses_an_existing_ledger_and_keeps_it(tmp_path: Path) -> None:
    Ledger.init(tmp_path, origin="first")
    before = (tmp_path / CONFIG_NAME).read_bytes()
    with pytest.raises(LedgerError, match=r"^.*: a ledger already exists here$"):
        Ledger.init(tmp_path, origin="second")
    assert (tmp_path / CONFIG_NAME).read_bytes() == before


@pytest.mark.parametrize("origin", ["has space", "a+b", "tab\there", "new\nline"])
def test_invalid_origin_leaves_nothing_behind(tmp_path: Path, origin: str) -> None:
    root = tmp_path / "led"
    with pytest.raises(
        LedgerError, match=r"origin must be a non-empty string without spaces or '\+'"
    ):
        Ledger.init(root, origin=origin)
    assert not root.exists()


def test_open_without_ledger(tmp_path: Path) -> None:
    with pytest.raises(
        LedgerError, match=r"^.*/none: no ledger here; run 'trajledger init' or pass --ledger DIR$"
    ):
        Ledger.open(tmp_path / "none")


def test_store_uri_is_kept_and_not_created(tmp_path: Path) -> None:
    ledger = Ledger.init(tmp_path / "led", origin="o", store="s3://bucket/prefix")
    assert Ledger.open(tmp_path / "led").config.store == "s3://bucket/prefix"
    assert sorted(p.name for p in (tmp_path / "led").iterdir()) == [CONFIG_NAME, "log", "log-key"]
    assert ledger.config.store == "s3://bucket/prefix"


def test_relative_store_directory(tmp_path: Path) -> None:
    ledger = Ledger.init(tmp_path / "led", origin="o", store="blobs")
    assert (tmp_path / "led" / "blobs").is_dir()
    digest = ledger.store.put_bytes(b"x")
    assert (tmp_path / "led" / "blobs" / "sha256").is_dir()
    assert Ledger.open(tmp_path / "led").store.get(digest) == b"x"


@pytest.mark.parametrize(
    "value",
    ['quote"d', "back\\slash", "new\nline", "tab\t", "nul\x00", "del\x7f", "unicode-é-✓",
     "\\u0041"],
    ids=["quote", "backslash", "newline", "tab", "nul", "del", "unicode", "escape-lookalike"],
)
def test_settings_round_trip_any_string(value: str, tmp_path: Path) -> None:
    config = LedgerConfig("o", value)
    assert LedgerConfig.from_toml(config.to_toml(), tmp_path / CONFIG_NAME) == config


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("ledger = [", "not valid TOML"),
        ("[other]\nx = 1\n", "no \\[ledger\\] section"),
        ('[ledger]\nformat = 2\norigin = "o"\n', "format 2, this trajledger reads format 1"),
        ('[ledger]\norigin = "o"\n', "format None, this trajledger reads format 1"),
        ("[ledger]\nformat = 1\n", "origin must be a non-empty string"),
        ('[ledger]\nformat = 1\norigin = "o"\nstore = 5\n', "store must be a non-empty string"),
        ('[ledger]\nformat = 1\norigin = "o"\nstore = ""\n', "store must be a non-empty string"),
    ],
)
def test_invalid_settings(tmp_path: Path, text: str, error: str) -> None:
    tmp_path.joinpath(CONFIG_NAME).write_text(text)
    with pytest.raises(LedgerError, match=f"{CONFIG_NAME}: {error}"):
        Ledger.open(tmp_path)


def test_settings_not_utf8(tmp_path: Path) -> None:
    tmp_path.joinpath(CONFIG_NAME).write_bytes(b"\xff\xfe")
    with pytest.raises(LedgerError, match="not valid TOML"):
        Ledger.open(tmp_path)


def test_the_log_key_file_is_used_when_there_and_never_skipped_when_damaged(
    tmp_path: Path,
) -> None:
    """log-key/log.pub is the log key; a copy without log-key/ falls back to the log's own vkey,
    but a damaged log.pub is an error (found by the tamper matrix: a truncated one was skipped
    in silence, while a flipped one was refused)."""
    root = tmp_path / "led"
    ledger = Ledger.init(root, origin="example.com/log")
    own = (root / "log" / "vkey").read_text().strip()
    assert Ledger.open(root).log_vkey() == own == ledger.log.vkey
    pub = root / "log-key" / "log.pub"
    data = pub.read_bytes()
    pub.write_bytes(data[: len(data) // 2])
    with pytest.raises(LedgerError, match=r"key log \(.*log\.pub\)"):
        Ledger.open(root).log_vkey()
    with pytest.raises(LedgerError, match=r"log\.pub"):
        _ = Ledger.open(root).log
    p256 = KeyStore(root / "keys").create("p256", "ecdsa-p256", encrypt=False)
    pub.write_bytes(p256.public.to_pem())
    with pytest.raises(LedgerError, match=r"log\.pub: the log key: "):
        Ledger.open(root).log_vkey()
    pub.unlink()
    assert Ledger.open(root).log_vkey() is None
    assert Ledger.open(root).log.vkey == own
