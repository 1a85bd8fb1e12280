"""Property tests: envelopes and statements resist every single-byte change; base64 decoding
round-trips and refuses mixed alphabets (the verifier's JCS is tested against the ``rfc8785``
package in tests/unit/verify/test_jcs.py).

What "rejected" means. A changed envelope must raise FormatError or SignatureError (never
another exception type) unless the change leaves every signed byte as it was. One such change
exists, by design and documented in schemas/SPEC.md: swapping '+' for '-' or '/' for '_' in a
base64 string that holds only one of the two standard-only characters (URL-safe input is
accepted, and it decodes to the same bytes). The keyid is not such a change: it only narrows the
keys tried, so an edited keyid names no trusted key and the signature counts for nothing.
The strict test below builds an envelope where the swap cannot happen (each base64 string holds
both or neither of '+' and '/') and checks that every change is refused.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajledger.ledger.encode import b64encode, envelope_bytes
from trajledger.ledger.keys import Signer
from trajledger.ledger.signing import files_predicate, sign_statement
from trajledger.verify import predicates
from trajledger.verify.dsse import (
    INTOTO_PAYLOAD_TYPE,
    Envelope,
    b64decode,
    pae,
)
from trajledger.verify.errors import FormatError, SignatureError
from trajledger.verify.manifest import FileEntry, Manifest
from trajledger.verify.statement import verify_statement

REJECTED = (FormatError, SignatureError)
ED = Signer.generate("ed")
P256 = Signer.generate("p", "ecdsa-p256")
MANIFEST = Manifest.from_files(
    [FileEntry("data/steps.parquet", 1234, "a" * 64), FileEntry("README.md", 9, "b" * 64)]
)
PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _signed(signer: Signer, name: str = "dataset") -> Envelope:
    ptype, predicate = files_predicate(MANIFEST)
    return sign_statement([(name, MANIFEST.digest)], ptype, predicate, [signer])


ENVELOPES = {"ed25519": envelope_bytes(_signed(ED)), "p256": envelope_bytes(_signed(P256))}
KEYS = {"ed25519": ED.public, "p256": P256.public}


def _outcome(data: bytes, key: Any) -> Envelope | None:
    """The parsed envelope if it verifies, None if refused with an allowed error."""
    try:
        env = Envelope.from_bytes(data)
        verify_statement(env, [key], allowed_predicate_types={predicates.FILES})
    except REJECTED:
        return None
    return env


def _keyid_span(data: bytes) -> range:
    start = data.index(b'"keyid":"') + len(b'"keyid":"')
    return range(start, data.index(b'"', start))


def _signed_content(env: Envelope) -> tuple[bytes, str, tuple[bytes, ...]]:
    return env.payload, env.payload_type, tuple(s.sig for s in env.signatures)


EQUIVALENT_SWAPS = {(ord("+"), ord("-")), (ord("/"), ord("_"))}


@PROPS
@given(alg=st.sampled_from(sorted(ENVELOPES)), data=st.data())
def test_single_byte_change_to_envelope_is_rejected(alg: str, data: st.DataObject) -> None:
    original = ENVELOPES[alg]
    i = data.draw(st.integers(0, len(original) - 1), label="index")
    new = data.draw(st.integers(0, 255).filter(lambda b: b != original[i]), label="byte")
    mutated = original[:i] + bytes([new]) + original[i + 1 :]
    env = _outcome(mutated, KEYS[alg])
    if env is not None:
        # Accepted: only an unsigned byte may have changed (see the module docstring).
        assert _signed_content(env) == _signed_content(Envelope.from_bytes(original))
        assert (original[i], new) in EQUIVALENT_SWAPS


def _strict_envelope() -> bytes:
    """An envelope whose base64 strings each hold both or neither of '+' and '/'."""
    for n in range(1000):
        env = _signed(ED, f"dataset-{n}")
        strings = [b64encode(env.payload), b64encode(env.signatures[0].sig)]
        if all(("+" in s) == ("/" in s) for s in strings):
            return envelope_bytes(env)
    raise AssertionError("no suitable envelope")


STRICT = _strict_envelope()


def test_every_single_byte_change_to_a_strict_envelope_is_rejected() -> None:
    """Exhaustive over positions: flip each byte to each of three other values."""
    assert _outcome(STRICT, ED.public) is not None
    for i, old in enumerate(STRICT):
        for new in {old ^ 0x01, old ^ 0x20, 0x00}:
            if new == old:
                continue
            mutated = STRICT[:i] + bytes([new]) + STRICT[i + 1 :]
            assert _outcome(mutated, ED.public) is None, (i, chr(old), chr(new))


@PROPS
@given(data=st.data())
def test_any_single_byte_change_to_strict_envelope_is_rejected(data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(STRICT) - 1), label="index")
    new = data.draw(st.integers(0, 255).filter(lambda b: b != STRICT[i]), label="byte")
    assert _outcome(STRICT[:i] + bytes([new]) + STRICT[i + 1 :], ED.public) is None


@PROPS
@given(alg=st.sampled_from(sorted(ENVELOPES)), data=st.data())
def test_single_byte_change_to_statement_payload_is_rejected(
    alg: str, data: st.DataObject
) -> None:
    """Change the payload, re-encode it into the envelope, keep the old signature."""
    env = Envelope.from_bytes(ENVELOPES[alg])
    i = data.draw(st.integers(0, len(env.payload) - 1), label="index")
    new = data.draw(st.integers(0, 255).filter(lambda b: b != env.payload[i]), label="byte")
    payload = env.payload[:i] + bytes([new]) + env.payload[i + 1 :]
    forged = envelope_bytes(Envelope(payload, env.payload_type, env.signatures))
    with pytest.raises(REJECTED):
        verify_statement(
            Envelope.from_bytes(forged), [KEYS[alg]], allowed_predicate_types={predicates.FILES}
        )


@PROPS
@given(data=st.binary(max_size=4096))
def test_arbitrary_bytes_never_raise_another_type(data: bytes) -> None:
    assert _outcome(data, ED.public) is None


# --- base64 ------------------------------------------------------------------------------------


@PROPS
@given(data=st.binary(max_size=200))
def test_b64decode_round_trips(data: bytes) -> None:
    std = base64.b64encode(data).decode()
    url = base64.urlsafe_b64encode(data).decode()
    for text in (std, std.rstrip("="), url, url.rstrip("=")):
        assert b64decode(text, "x") == data
    assert b64encode(data) == std


STD_ONLY, URL_ONLY = "+/", "-_"
B64_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


@PROPS
@given(
    body=st.text(alphabet=B64_CHARS, max_size=120),
    std=st.sampled_from(STD_ONLY),
    url=st.sampled_from(URL_ONLY),
    where=st.tuples(st.integers(0, 120), st.integers(0, 121)),
    padding=st.sampled_from(["", "=", "=="]),
)
def test_b64decode_refuses_mixed_alphabets(
    body: str, std: str, url: str, where: tuple[int, int], padding: str
) -> None:
    text = body[: where[0]] + std + body[where[0] :]
    text = text[: where[1]] + url + text[where[1] :]
    with pytest.raises(FormatError, match=r"x: is not valid base64$"):
        b64decode(text + padding, "x")


@PROPS
@given(text=st.text(max_size=64))
def test_b64decode_only_raises_format_error(text: str) -> None:
    try:
        out = b64decode(text, "x")
    except FormatError:
        return
    # Whatever it accepted is the one canonical encoding of what it returned.
    assert b64encode(out).rstrip("=") == text.rstrip("=").replace("-", "+").replace("_", "/")


@PROPS
@given(data=st.binary(min_size=1, max_size=100).filter(lambda d: len(d) % 3 != 0))
def test_b64decode_refuses_non_zero_padding_bits(data: bytes) -> None:
    alphabet = B64_CHARS + STD_ONLY
    text = b64encode(data).rstrip("=")
    last = alphabet.index(text[-1])
    unused = 0b1111 if len(data) % 3 == 1 else 0b11
    assert last & unused == 0
    bad = text[:-1] + alphabet[last | 1]
    with pytest.raises(FormatError, match=r"not canonical base64"):
        b64decode(bad, "x")


def test_pae_is_injective_on_the_boundary() -> None:
    """Moving bytes between type and body changes the PAE (lengths are part of it)."""
    assert pae("ab", b"c") != pae("a", b"bc")
    assert pae(INTOTO_PAYLOAD_TYPE, b"") != pae(INTOTO_PAYLOAD_TYPE + " 0 ", b"")


def test_the_one_unsigned_change_is_accepted_with_the_same_content() -> None:
    """Pins down the exception the module docstring allows, and that keyid edits are refused."""
    original = ENVELOPES["ed25519"]
    span = _keyid_span(original)
    i = span.start
    renamed = original[:i] + (b"0" if original[i : i + 1] != b"0" else b"1") + original[i + 1 :]
    assert _outcome(renamed, ED.public) is None
    obj = json.loads(original)
    obj["payload"] = base64.urlsafe_b64encode(base64.b64decode(obj["payload"])).decode()
    env = _outcome(json.dumps(obj).encode(), ED.public)
    assert env is not None
    assert _signed_content(env) == _signed_content(Envelope.from_bytes(original))
