"""A sealed rollout batch: its ``sealed`` member and its stored ciphertexts, against its
manifest: loaded only for one.

Scope: the ``sealed`` format of rollout-batch/v1 (`Sealed`, `SealedEpisode`, the scheme's
constants, and the ``rows`` field type its lists of recipients and files are read and written
as): read by `verify.records` when a batch's predicate has the member (``RolloutBatch.sealed``
names it lazily); and `ciphertexts`, which blob holds each file of a
sealed batch (the store keeps only ciphertexts, bound by the signed predicate) and whether each
ciphertext's size is the sealing's for its plaintext's size. A lineage that holds no sealed
batch (a checkpoint's: sealed suites are never trained on) never loads it.
Non-scope: sealing and unsealing (``ledger.sealing``), re-hashing the ciphertexts
(``verify.blobs``).
Spec: schemas/SPEC.md, section "Sealed suites".
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .digest import HEX64
from .errors import FormatError
from .manifest import Manifest
from .records import Record, column, field_type, read_members, spec

__all__ = ["SEAL_MAGIC", "SEAL_SCHEME", "SEAL_SEGMENT", "Sealed", "SealedEpisode", "ciphertexts"]

SEAL_SCHEME = "hpke-x25519-sha256-chacha20poly1305/stream-64k/v1"
"""The one sealing scheme (schemas/SPEC.md, "Sealed suites"): RFC 9180 HPKE base mode,
DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305 wraps a batch's data key for each
recipient; each file is ChaCha20-Poly1305 in 64 KiB segments under a key derived from it."""
SEAL_MAGIC = b"trajledger-sealed-v1\n"
SEAL_SEGMENT = 64 * 1024
_SEAL_OVERHEAD = len(SEAL_MAGIC) + 16  # magic, salt; then a 16-byte tag per segment


class _Rows(tuple[Any, ...]):
    """Rows read from JSON, each a tuple of its members, with each row's unknown members."""

    extras: tuple[dict[str, Any], ...] = ()


class _KeyedRows(dict[Any, Any]):
    """Keyed rows read from JSON (``{first: rest}``), with each row's unknown members, in the
    rows' sorted order."""

    extras: tuple[dict[str, Any], ...] = ()


def _rows(s: Any, v: Any, at: str) -> _Rows | _KeyedRows:
    """Rows of plain values (a tuple each, or ``{first: rest}`` when keyed) and each row's
    unknown members, in the order they are written (keyed rows are written sorted)."""
    if not isinstance(v, list):
        raise FormatError(f"{at} is not a list")
    rows, extras = [], []
    for i, item in enumerate(v):
        values, rest = read_members(s.columns, item, f"{at}[{i}]")
        rows.append(tuple(values))
        extras.append(rest[""])
    out: _Rows | _KeyedRows = _Rows(rows)
    if s.keyed:
        out = _KeyedRows()
        for i, row in enumerate(rows):
            if row[0] in out:
                raise FormatError(f"{at}[{i}]: {s.columns[0].key} {row[0]!r} is listed twice")
            out[row[0]] = row[1:] if len(row) > 2 else row[1]
        order = sorted(range(len(rows)), key=lambda i: rows[i][0])
        extras = [extras[i] for i in order]
    out.extras = tuple(extras)
    return out


def _rows_json(s: Any, value: Any) -> list[dict[str, Any]]:
    rows = [(k, *(v if isinstance(v, tuple) else (v,))) for k, v in sorted(value.items())] \
        if s.keyed else list(value)
    extras = getattr(value, "extras", ())
    if len(extras) != len(rows):
        extras = ({},) * len(rows)
    return [{**x, **{c.key: v for c, v in zip(s.columns, row, strict=True)}}
            for x, row in zip(extras, rows, strict=True)]


field_type("rows", _rows, _rows_json)


@dataclass(frozen=True)
class SealedEpisode(Record):
    """What a sealed batch shows of one episode: the duplicate fingerprints the admission gate
    compares (``ledger.episode_features``): the exact content ``fingerprint`` (hex SHA-256),
    the ``modality`` and step count, the near-duplicate ``sketch`` (128 float32, little
    endian, base64; None where the episode has no vector) and, for a text episode, its
    ``normalised`` text fingerprint (``ledger.text_fingerprint``; absent from records made
    before it was published, which are compared without it)."""

    episode_id: str = spec("episodeId")
    steps: int = spec("steps", "integer")
    modality: str = spec("modality", choices=("numeric", "text"))
    fingerprint: str = spec("fingerprint")
    sketch: str | None = spec("sketch", required=False)
    normalised: str | None = spec("normalised", required=False, default=None)

    def _check(self, what: str) -> None:
        if self.steps < 1 or not HEX64.fullmatch(self.fingerprint) or not HEX64.fullmatch(
                self.normalised or self.fingerprint):
            raise FormatError(f"{what}: steps must be >= 1 and fingerprint (and normalised) 64 "
                              "lowercase hex")
        if self.sketch is not None:
            try:
                raw = base64.b64decode(self.sketch, validate=True)
            except ValueError as e:
                raise FormatError(f"{what}: sketch is not base64") from e
            if len(raw) != 512:
                raise FormatError(f"{what}: sketch holds {len(raw)} bytes, want 512")


@dataclass(frozen=True)
class Sealed(Record):
    """A rollout batch stored encrypted (``sealed`` of rollout-batch/v1; schemas/SPEC.md,
    "Sealed suites"). The batch's manifest lists the plaintext files (what lineage uses); the
    store holds only their ciphertexts, bound here: ``files`` maps each manifest path to its
    ciphertext's digest and size. ``recipients`` holds the batch's data key wrapped for each
    recipient X25519 key by keyid (HPKE ``enc || ciphertext``, base64); ``episodes`` the
    duplicate fingerprints of every episode, so that the gate needs no key, computed with the
    episode feature definitions of version ``feature_version`` (a reader of another version
    cannot compare them)."""

    recipients: tuple[tuple[str, str], ...] = spec(
        "recipients", "rows", columns=(column("keyid"), column("encapsulatedKey")))
    files: Mapping[str, tuple[str, int]] = spec(
        "files", "rows", keyed=True,
        columns=(column("path"), column("ciphertext", "digest"), column("size", "integer")))
    episodes: tuple[SealedEpisode, ...] = spec("episodes", "records", record=SealedEpisode)
    feature_version: int = spec("featureVersion", "integer")
    scheme: str = spec("scheme", default=SEAL_SCHEME, required=True, choices=(SEAL_SCHEME,))

    @staticmethod
    def ciphertext_size(plain: int) -> int:
        """The size of the ciphertext of a ``plain``-byte file (one tag per 64 KiB segment, at
        least one segment)."""
        return _SEAL_OVERHEAD + plain + 16 * max(1, -(-plain // SEAL_SEGMENT))

    def _check(self, what: str) -> None:
        if not self.recipients or not self.files or self.feature_version < 1:
            raise FormatError(f"{what}: want recipients, files and a featureVersion >= 1, got "
                              f"{len(self.recipients)}, {len(self.files)} and "
                              f"{self.feature_version}")
        for i, (keyid, _) in enumerate(self.recipients):
            if not HEX64.fullmatch(keyid):
                raise FormatError(f"{what}: recipients[{i}]: keyid is not 64 lowercase hex")
        for path, (_, size) in self.files.items():
            if size < 0:
                raise FormatError(f"{what}: files: {path!r} has size {size}, want >= 0")


def ciphertexts(manifest: Manifest, sealed: Sealed, fail: Callable[[str, str], object]
                ) -> dict[str, tuple[str, int]]:
    """Each manifest file's stored blob (digest, size): for a sealed batch its ciphertext, whose
    size must be the sealing's for the plaintext size (`Sealed.ciphertext_size`). A file the
    sealing does not list has none. Each problem is ``fail(what, detail)``: the batch node's
    `verify.nodes.Node.fail` (the ``sealed`` check, or the file's)."""
    paths = {f.path for f in manifest.files}
    if set(sealed.files) != paths:
        fail("sealed", f"seals {sorted(sealed.files)}, the manifest lists {sorted(paths)}")
    out = {}
    for f in manifest.files:
        if f.path in sealed.files:
            digest, size = sealed.files[f.path]
            if size != Sealed.ciphertext_size(f.size):
                fail(f.path, f"sealed: ciphertext of {size} bytes for {f.size} plaintext "
                          f"bytes, want {Sealed.ciphertext_size(f.size)}")
            out[f.path] = (digest, size)
    return out
