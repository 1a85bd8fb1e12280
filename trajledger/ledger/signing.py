"""Make signed statements: in-toto Statement v1 in a DSSE envelope.

Scope: serialise a statement (RFC 8785: plain JSON through json's C encoder, anything else via
the ``rfc8785`` package, so floats in predicates are canonical too), sign PAE(payloadType,
payload) with one or several keys (or keylessly through Sigstore,
``sigstore_sign.KeylessSigner``), and the ``files`` predicate used by ``sign`` and ``attest``.
Non-scope: verification, which lives in ``verify/`` and is the only reader of these bytes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import rfc8785

from trajledger.verify import predicates
from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE, Envelope, Signature, pae
from trajledger.verify.errors import FormatError
from trajledger.verify.manifest import Manifest
from trajledger.verify.statement import STATEMENT_TYPE

from .keys import Signer

if TYPE_CHECKING:
    from .sigstore_sign import KeylessSigner

__all__ = ["AnySigner", "canonical_json", "files_predicate", "sign_statement", "statement_bytes"]

AnySigner: TypeAlias = "Signer | KeylessSigner"
"""A key (``keys.Signer``) or Sigstore keyless signing (``sigstore_sign.KeylessSigner``)."""


_SAFE_INTEGER = 2**53 - 1


def _plain(value: Any) -> bool:
    """Whether ``value`` is JSON whose RFC 8785 form json's C encoder writes byte for byte:
    exactly None, bool, str, int within +-(2**53 - 1), list, tuple, and dict with str keys of
    the Basic Multilingual Plane (their code-point order is their UTF-16 order). No float: its
    canonical form is ECMAScript's, which only ``rfc8785`` writes."""
    t = type(value)
    if t is str or t is bool or value is None:
        return True
    if t is int:
        return bool(-_SAFE_INTEGER <= value <= _SAFE_INTEGER)
    if t is dict:
        return all(type(k) is str and (k.isascii() or max(k) <= "\uffff") and _plain(v)
                   for k, v in value.items())
    return (t is list or t is tuple) and all(_plain(v) for v in value)


def canonical_json(value: Any) -> bytes:
    """RFC 8785 bytes of ``value``.

    Plain JSON (`_plain`: a signed statement's usual contents) goes through json's C encoder,
    whose escapes (``ensure_ascii`` off) are RFC 8785's, about 3x faster than ``rfc8785`` on
    an import record; anything else, and text that is not Unicode, through ``rfc8785``, which
    writes floats and refuses what cannot be canonicalised.

    Raises:
        FormatError: NaN or an infinity, an integer beyond 2^53, or text that is not Unicode (a
            lone surrogate: a name given as bytes that are not UTF-8, a JSON escape without its
            pair).
    """
    try:
        if _plain(value):
            with contextlib.suppress(UnicodeEncodeError, RecursionError):
                return json.dumps(value, ensure_ascii=False, sort_keys=True,
                                  separators=(",", ":")).encode("utf-8")
        return bytes(rfc8785.dumps(value))
    except rfc8785.CanonicalizationError as e:
        why = ("contains a lone surrogate, not valid Unicode" if "UTF-8" in str(e) else str(e))
        raise FormatError(f"cannot be canonicalised (RFC 8785): {why}") from e


def statement_bytes(
    subjects: Sequence[tuple[str, str]], predicate_type: str, predicate: dict[str, Any]
) -> bytes:
    """The canonical bytes of a Statement with ``(name, "sha256:<hex>")`` subjects."""
    return canonical_json(
        {
            "_type": STATEMENT_TYPE,
            "subject": [
                {"name": name, "digest": {"sha256": digest.removeprefix("sha256:")}}
                for name, digest in subjects
            ],
            "predicateType": predicate_type,
            "predicate": predicate,
        }
    )


def sign_statement(
    subjects: Sequence[tuple[str, str]],
    predicate_type: str,
    predicate: dict[str, Any],
    signers: Sequence[AnySigner],
    *,
    on_bundle: Callable[[bytes], object] | None = None,
) -> Envelope:
    """Build a statement and sign it with every signer (co-signing).

    A keyless signer's signature carries keyid = sha256 of its Sigstore bundle, and the bundle
    is handed to ``on_bundle``, which must store it (the envelope names it).

    Raises:
        ValueError: no signer, or a keyless signer without ``on_bundle``.
    """
    if not signers:
        raise ValueError("sign_statement needs at least one signer")
    payload = statement_bytes(subjects, predicate_type, predicate)
    message = pae(INTOTO_PAYLOAD_TYPE, payload)
    sigs = []
    for s in signers:
        if isinstance(s, Signer):
            sigs.append(Signature(s.keyid, s.sign(message)))
            continue
        if on_bundle is None:
            raise ValueError("a keyless signature needs on_bundle to store its Sigstore bundle")
        keyless = s.sign_dsse(INTOTO_PAYLOAD_TYPE, payload)
        on_bundle(keyless.bundle)
        sigs.append(Signature(keyless.keyid, keyless.signature))
    return Envelope(payload, INTOTO_PAYLOAD_TYPE, tuple(sigs))


def files_predicate(manifest: Manifest, **extra: Any) -> tuple[str, dict[str, Any]]:
    """The ``files/v1`` predicate: the manifest inline, so one envelope verifies a tree alone."""
    return predicates.FILES, {"manifest": manifest.to_json(), **extra}
