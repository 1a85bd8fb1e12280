"""What ``export`` reads to write a bundle (exp48, issue 21 item 3): the envelopes and manifests
its lineage walk read (and the trust policies' records) are written from the bytes it read,
once they hash to their names, not opened and read again by the writer; the data blobs, which
the walk only sized, are read, hashed and checked as they are written. Every object in the
bundle is, byte for byte, the file of that name in the store.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import testkit
import zstandard

from trajledger import Ledger
from trajledger.ledger import bundle_write
from trajledger.ledger.exchange import export_bundle
from trajledger.verify.log_entry import LogEntry


def _members(bundle: Path) -> dict[str, bytes]:
    """The bundle's members by name (a plain ustar reader: every name here fits 100 bytes)."""
    with open(bundle, "rb") as fh:
        tar = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True).read()
    out, i = {}, 0
    while tar[i:i + 1] not in (b"", b"\0"):
        size = int(tar[i + 124:i + 135], 8)
        out[tar[i:i + 100].rstrip(b"\0").decode()] = tar[i + 512:i + 512 + size]
        i += 512 + -(-size // 512) * 512
    return out


def test_the_walks_envelopes_are_written_as_read_and_the_data_read_as_written(
    quickstart_template: testkit.Template[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = testkit.copy_template(quickstart_template, tmp_path / "vendor")
    ledger = Ledger.open(home)
    opened: set[str] = set()

    def counted(path: Path, *args: object, **kwargs: object) -> object:
        opened.add(Path(path).name)
        return open(path, *args, **kwargs)  # (the writer closes it)

    monkeypatch.setattr(bundle_write, "open", counted, raising=False)
    out = tmp_path / "b.tar.zst"
    result = export_bundle(ledger, quickstart_template.value, out)
    members = _members(out)
    objects = {n[15:]: b for n, b in members.items() if n.startswith("objects/sha256/")}
    assert result.objects == len(objects) > 0
    for digest, data in objects.items():  # each the store's file, and its name's digest
        assert data == ledger.store.path_of(f"sha256:{digest}").read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest
    envelopes = {LogEntry.from_bytes(b).envelope[7:] for n, b in members.items()
                 if n.startswith("entries/")}
    assert envelopes and envelopes <= set(objects)
    assert opened and opened <= set(objects)
    assert not envelopes & opened  # (every one was opened again before exp48)


def test_an_envelope_changed_in_the_store_after_the_walk_read_it_is_not_taken(
    quickstart_template: testkit.Template[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An envelope whose stored bytes do not hash to its name (the walk read it so) is not
    written from them: the writer reads it again and refuses it, as before; nothing is
    written."""
    from trajledger.verify.errors import DigestMismatchError

    home = testkit.copy_template(quickstart_template, tmp_path / "vendor")
    ledger = Ledger.open(home)
    first = export_bundle(ledger, quickstart_template.value, tmp_path / "first.tar.zst")
    entry = next(e for n, b in _members(first.path).items() if n.startswith("entries/")
                 and (e := LogEntry.from_bytes(b)).kind == "rollout-batch")
    path = ledger.store.path_of(entry.envelope)
    data = path.read_bytes()
    path.chmod(0o644)
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size, other bytes
    out = tmp_path / "b.tar.zst"
    with pytest.raises(DigestMismatchError, match=f"object {entry.envelope} in the store is "
                                                  f"{len(data)} bytes hashing to sha256:"):
        export_bundle(ledger, quickstart_template.value, out)
    assert not out.exists() and not list(tmp_path.glob(".tmp-*"))
