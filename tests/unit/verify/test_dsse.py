"""DSSE: PAE known answers, strict envelope parsing, base64 rules, signature verification.

One test per attack on the envelope layer (modify, re-sign where relevant, expect the specific
error). Statement-level attacks are in test_statement.py, manifest-level ones in
test_manifest.py.
"""

from __future__ import annotations

import base64
import itertools
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajledger.ledger.encode import b64encode, envelope_bytes
from trajledger.ledger.keys import Signer
from trajledger.verify.dsse import (
    INTOTO_PAYLOAD_TYPE,
    MAX_ENVELOPE_BYTES,
    Envelope,
    Signature,
    b64decode,
    pae,
    verify_envelope,
)
from trajledger.verify.errors import FormatError, SignatureError

PAYLOAD = b'{"_type":"https://in-toto.io/Statement/v1"}'


@pytest.fixture(scope="module")
def ed_a() -> Signer:
    return Signer.generate("a")


@pytest.fixture(scope="module")
def ed_b() -> Signer:
    return Signer.generate("b")


@pytest.fixture(scope="module")
def p256() -> Signer:
    return Signer.generate("p", "ecdsa-p256")


def sign(
    signers: list[Signer],
    payload: bytes = PAYLOAD,
    payload_type: str = INTOTO_PAYLOAD_TYPE,
    keyids: list[str] | None = None,
) -> Envelope:
    message = pae(payload_type, payload)
    ids = keyids if keyids is not None else [s.keyid for s in signers]
    return Envelope(
        payload,
        payload_type,
        tuple(Signature(k, s.sign(message)) for s, k in zip(signers, ids, strict=True)),
    )


def as_obj(env: Envelope) -> dict:
    return json.loads(envelope_bytes(env))


def dump(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# --- PAE -------------------------------------------------------------------------------------


def test_pae_known_answer() -> None:
    # DSSE protocol.md: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body, lengths in
    # decimal ASCII. len("http://example.com/HelloWorld") = 29, len("hello world") = 11.
    assert (
        pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_empty_payload_keeps_separator() -> None:
    assert pae("t", b"") == b"DSSEv1 1 t 0 "


def test_pae_counts_utf8_bytes_not_characters() -> None:
    # "é" is one character, two UTF-8 bytes (C3 A9).
    assert pae("\u00e9", "\u00e9".encode()) == b"DSSEv1 2 \xc3\xa9 2 \xc3\xa9"


def test_pae_binary_payload_is_opaque() -> None:
    body = bytes(range(256))
    assert pae("x", body) == b"DSSEv1 1 x 256 " + body


# --- base64 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("aGk=", b"hi"),
        ("aGk", b"hi"),  # padding optional
        ("", b""),
        ("-_8=", b"\xfb\xff"),  # URL-safe
        ("+/8=", b"\xfb\xff"),  # standard
        ("-_8", b"\xfb\xff"),
    ],
)
def test_b64decode_accepts(text: str, want: bytes) -> None:
    assert b64decode(text, "x") == want


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("+_8=", r"x: is not valid base64$"),  # mixed alphabets
        ("aGk!", r"x: is not valid base64$"),
        ("aG k", r"x: is not valid base64$"),
        ("aGk==", r"bad length or padding"),
        ("aGk=a", r"x: is not valid base64$"),
        ("a", r"bad length or padding"),
        ("aGl=", r"not canonical base64"),  # 'l' leaves non-zero unused bits
        ("aQ=", r"bad length or padding"),
    ],
)
def test_b64decode_refuses(text: str, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        b64decode(text, "x")


def _b64decode_checked_whole(text: str) -> bytes | str:
    """The checks of `b64decode` spelled out one by one, none skipped (the fast path of
    standard, canonical base64 must decide and word everything as they do): the bytes, or the
    end of the message."""
    if re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", text):
        alt = None
    elif re.fullmatch(r"[A-Za-z0-9_-]*={0,2}", text):
        alt = b"-_"
    else:
        return "is not valid base64"
    bare = text.rstrip("=")
    if len(bare) % 4 == 1 or (text != bare and len(text) % 4):
        return "bad length or padding)"
    out = base64.b64decode(bare + "=" * (-len(bare) % 4), altchars=alt, validate=True)
    if base64.b64encode(out, altchars=alt).decode().rstrip("=") != bare:
        return "(non-zero padding bits)"
    return out


def test_b64decode_decides_as_every_check_does() -> None:
    # Every string of up to 5 characters over letters of each kind (standard, URL-safe,
    # padding, bits left over in a last group), and encodings with padding added or removed.
    texts = ["".join(t) for n in range(6) for t in itertools.product("AQ/+-_=", repeat=n)]
    for k in range(7):
        enc = base64.b64encode(bytes(range(250, 250 - k, -1))).decode()
        texts += [enc, enc.rstrip("="), enc + "=", enc + "==", enc.rstrip("=") + "==="]
    for text in texts:
        want = _b64decode_checked_whole(text)
        try:
            got: bytes | str = b64decode(text, "x")
        except FormatError as e:
            assert isinstance(want, str) and str(e).endswith(want), (text, str(e), want)
        else:
            assert got == want, text


def _decides_as_every_check_does(text: str) -> None:
    want = _b64decode_checked_whole(text)
    try:
        got: bytes | str = b64decode(text, "x")
    except FormatError as e:
        assert isinstance(want, str) and str(e).endswith(want), (text, str(e), want)
    else:
        assert got == want, text


def test_b64decode_decides_as_every_check_does_on_odd_characters() -> None:
    # Every string of up to 4 characters over letters, padding and what the C decoder of the
    # fast path might skip or take: whitespace, a newline, NUL, a non-ASCII letter and digit.
    for n in range(5):
        for t in itertools.product("Ag/_= \n\t\r\x00é٣", repeat=n):
            _decides_as_every_check_does("".join(t))


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=40), cut=st.integers(0, 60),
       put=st.sampled_from(["", "=", "==", "===", "\n", " ", "\r\n", "A", "-", "_", "+", "/",
                            "é", "\x00", "=A"]),
       url=st.booleans(), bare=st.booleans())
def test_b64decode_decides_as_every_check_does_on_changed_encodings(
    data: bytes, cut: int, put: str, url: bool, bare: bool
) -> None:
    """Encodings of any bytes, standard or URL-safe, padded or bare, with one thing put in
    anywhere (padding, whitespace, a newline, a letter of the other alphabet...)."""
    text = (base64.urlsafe_b64encode if url else base64.b64encode)(data).decode()
    text = text.rstrip("=") if bare else text
    _decides_as_every_check_does(text[:cut] + put + text[cut:])


def test_b64decode_refuses_non_string() -> None:
    with pytest.raises(FormatError, match=r"x: is bytes, want a base64 string"):
        b64decode(b"aGk=", "x")


def test_b64encode_is_standard_padded() -> None:
    assert b64encode(b"\xfb\xff") == "+/8="


# --- parsing ---------------------------------------------------------------------------------


def test_from_bytes_round_trip(ed_a: Signer, p256: Signer) -> None:
    env = sign([ed_a, p256])
    again = Envelope.from_bytes(envelope_bytes(env))
    assert again == env
    assert envelope_bytes(again) == envelope_bytes(env)


def test_to_bytes_omits_empty_keyid() -> None:
    env = Envelope(b"x", "t", (Signature("", b"\x01"),))
    want = b'{"payload":"eA==","payloadType":"t","signatures":[{"sig":"AQ=="}]}'
    assert envelope_bytes(env) == want


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda o: o.pop("payload"), r"missing field 'payload'"),
        (lambda o: o.pop("signatures"), r"missing field 'signatures'"),
        (lambda o: o.update(payloadType=""), r"payloadType must be a non-empty string"),
        (lambda o: o.update(payloadType=5), r"payloadType must be a non-empty string"),
        (lambda o: o.update(payload=None), r"payload: is NoneType, want a base64 string"),
        (lambda o: o.update(signatures={}), r"signatures must be a non-empty list"),
        (lambda o: o.update(signatures=["x"]), r"signature 0 is not an object"),
        (lambda o: o["signatures"][0].pop("sig"), r"signature 0 has no 'sig'"),
        (lambda o: o["signatures"][0].update(keyid=None), r"keyid must be a string"),
        (lambda o: o.update(extra=1), r"unknown field\(s\) extra"),
    ],
)
def test_from_bytes_refuses_malformed(ed_a: Signer, mutate, match: str) -> None:
    obj = as_obj(sign([ed_a]))
    mutate(obj)
    with pytest.raises(FormatError, match=match):
        Envelope.from_bytes(dump(obj), "envelope e.json")


def test_error_names_the_envelope(ed_a: Signer) -> None:
    with pytest.raises(FormatError, match=r"^envelope e\.json: malformed JSON at line 1"):
        Envelope.from_bytes(b"{", "envelope e.json")


# --- verification ----------------------------------------------------------------------------


def test_verify_ed25519(ed_a: Signer) -> None:
    assert verify_envelope(sign([ed_a]), [ed_a.public]) == (ed_a.public,)


def test_verify_p256(p256: Signer) -> None:
    assert verify_envelope(sign([p256]), [p256.public]) == (p256.public,)


def test_verify_co_signed_threshold_2(ed_a: Signer, p256: Signer) -> None:
    signers = verify_envelope(sign([ed_a, p256]), [p256.public, ed_a.public], threshold=2)
    assert signers == (p256.public, ed_a.public)  # in the order of the trusted keys


def test_verify_keyid_omitted_tries_every_key(ed_a: Signer, ed_b: Signer) -> None:
    env = sign([ed_a], keyids=[""])
    assert verify_envelope(env, [ed_b.public, ed_a.public]) == (ed_a.public,)


def test_verify_foreign_keyid_narrows_to_no_key(ed_a: Signer) -> None:
    """The keyid hint only narrows the keys tried: one naming no trusted key counts for nothing."""
    env = sign([ed_a], keyids=["another tool's name for the key"])
    with pytest.raises(SignatureError, match=r"no signature by a trusted key: 0 of 1"):
        verify_envelope(env, [ed_a.public])


def test_verify_preconditions(ed_a: Signer) -> None:
    with pytest.raises(ValueError, match=r"at least one trusted key"):
        verify_envelope(sign([ed_a]), [])
    with pytest.raises(ValueError, match=r"threshold must be at least 1, got 0"):
        verify_envelope(sign([ed_a]), [ed_a.public], threshold=0)


def test_verify_custom_payload_type(ed_a: Signer) -> None:
    env = sign([ed_a], b"hello", "text/plain")
    assert verify_envelope(env, [ed_a.public], payload_type="text/plain") == (ed_a.public,)


# --- attacks: one test each ------------------------------------------------------------------


def test_attack_signature_wrapping(ed_a: Signer) -> None:
    """A valid signature over one payload, carried with another."""
    signed = sign([ed_a], b'{"subject":"good"}')
    wrapped = Envelope(b'{"subject":"evil"}', signed.payload_type, signed.signatures)
    env = Envelope.from_bytes(envelope_bytes(wrapped))
    with pytest.raises(SignatureError, match=r"invalid signature by key [0-9a-f]{16}: 0 of 1"):
        verify_envelope(env, [ed_a.public])


def test_attack_payload_type_swap(ed_a: Signer) -> None:
    """Signature made for payloadType A, envelope relabelled as B (PAE binds the type)."""
    signed = sign([ed_a], PAYLOAD, "application/json")
    relabelled = Envelope(signed.payload, INTOTO_PAYLOAD_TYPE, signed.signatures)
    with pytest.raises(SignatureError, match=r"invalid signature by key"):
        verify_envelope(relabelled, [ed_a.public])


def test_attack_key_confusion_p256_sig_claimed_by_ed25519_keyid(
    ed_a: Signer, p256: Signer
) -> None:
    """A valid P-256 signature labelled with a trusted Ed25519 key's keyid."""
    env = sign([p256], keyids=[ed_a.keyid])
    with pytest.raises(SignatureError, match=r"invalid signature by key " + ed_a.keyid[:16]):
        verify_envelope(env, [ed_a.public, p256.public])


def test_attack_ed25519_sig_claimed_by_p256_keyid(ed_a: Signer, p256: Signer) -> None:
    env = sign([ed_a], keyids=[p256.keyid])
    with pytest.raises(SignatureError, match=r"invalid signature by key " + p256.keyid[:16]):
        verify_envelope(env, [ed_a.public, p256.public])


def test_attack_duplicate_signatures_do_not_meet_threshold(ed_a: Signer, ed_b: Signer) -> None:
    """One key's signature twice is one signer, not two."""
    one = sign([ed_a]).signatures[0]
    env = Envelope(PAYLOAD, INTOTO_PAYLOAD_TYPE, (one, one))
    with pytest.raises(
        SignatureError, match=r"too few signatures by trusted keys: 1 of 2 required"
    ):
        verify_envelope(env, [ed_a.public, ed_b.public], threshold=2)


def test_attack_duplicate_unnamed_signatures_do_not_meet_threshold(
    ed_a: Signer, ed_b: Signer
) -> None:
    one = sign([ed_a], keyids=[""]).signatures[0]
    env = Envelope(PAYLOAD, INTOTO_PAYLOAD_TYPE, (one, one))
    with pytest.raises(SignatureError, match=r"1 of 2 required"):
        verify_envelope(env, [ed_a.public, ed_b.public], threshold=2)


def test_attack_unknown_key_signatures_are_ignored(ed_a: Signer, ed_b: Signer) -> None:
    """Signatures by keys outside the trusted set count for nothing (and do no harm)."""
    outsider = Signer.generate("outsider")
    env = sign([outsider, ed_a])
    assert verify_envelope(env, [ed_a.public]) == (ed_a.public,)
    with pytest.raises(SignatureError, match=r"1 of 2 required"):
        verify_envelope(env, [ed_a.public, ed_b.public], threshold=2)


def test_attack_only_unknown_key_signatures(ed_a: Signer) -> None:
    outsider = Signer.generate("outsider")
    with pytest.raises(SignatureError, match=r"no signature by a trusted key: 0 of 1"):
        verify_envelope(sign([outsider]), [ed_a.public])


def test_attack_wrong_payload_type_after_valid_signature(ed_a: Signer) -> None:
    """Signed honestly as application/json: the signature holds, the type is refused."""
    env = sign([ed_a], PAYLOAD, "application/json")
    with pytest.raises(
        FormatError,
        match=r"payloadType is 'application/json', want 'application/vnd\.in-toto\+json'",
    ):
        verify_envelope(env, [ed_a.public])


def test_attack_sig_bit_flip(ed_a: Signer) -> None:
    good = sign([ed_a])
    sig = bytearray(good.signatures[0].sig)
    sig[0] ^= 1
    env = Envelope(good.payload, good.payload_type, (Signature(ed_a.keyid, bytes(sig)),))
    with pytest.raises(SignatureError, match=r"invalid signature by key"):
        verify_envelope(env, [ed_a.public])


def test_attack_truncated_signature(p256: Signer) -> None:
    good = sign([p256])
    env = Envelope(
        good.payload, good.payload_type, (Signature(p256.keyid, good.signatures[0].sig[:-1]),)
    )
    with pytest.raises(SignatureError, match=r"invalid signature by key"):
        verify_envelope(env, [p256.public])


def test_attack_duplicate_json_keys(ed_a: Signer) -> None:
    """Two 'payload' fields: a lenient reader takes the last, another the first."""
    text = envelope_bytes(sign([ed_a])).decode()
    evil = text.replace('{"payload":', '{"payload":"e30=","payload":', 1)
    with pytest.raises(FormatError, match=r"duplicate JSON key 'payload'"):
        Envelope.from_bytes(evil.encode())


def test_attack_nan_in_json(ed_a: Signer) -> None:
    obj = as_obj(sign([ed_a]))
    text = dump(obj).replace(b'"keyid":"' + ed_a.keyid.encode() + b'"', b'"keyid":NaN')
    with pytest.raises(FormatError, match=r"NaN is not valid JSON"):
        Envelope.from_bytes(text)


@pytest.mark.parametrize("literal", [b"Infinity", b"-Infinity", b"1e400"])
def test_attack_infinity_in_json(ed_a: Signer, literal: bytes) -> None:
    text = envelope_bytes(sign([ed_a])).replace(b"{", b'{"x":' + literal + b",", 1)
    with pytest.raises(FormatError, match=r"Infinity is not valid JSON|overflows to infinity"):
        Envelope.from_bytes(text)


def test_attack_bom(ed_a: Signer) -> None:
    with pytest.raises(FormatError, match=r"envelope: starts with a UTF-8 byte-order mark"):
        Envelope.from_bytes(b"\xef\xbb\xbf" + envelope_bytes(sign([ed_a])))


def test_attack_invalid_utf8(ed_a: Signer) -> None:
    data = envelope_bytes(sign([ed_a])).replace(b'"keyid":"', b'"keyid":"\xc0\xaf', 1)
    with pytest.raises(FormatError, match=r"envelope: not valid UTF-8 at byte \d+"):
        Envelope.from_bytes(data)


def test_attack_oversize_envelope() -> None:
    # Refused on length alone, before any parsing.
    data = b" " * (MAX_ENVELOPE_BYTES + 1)
    with pytest.raises(FormatError, match=rf"envelope: {MAX_ENVELOPE_BYTES + 1} bytes, more than"):
        Envelope.from_bytes(data)


def test_attack_mixed_base64_alphabets(ed_a: Signer) -> None:
    """'+' and '_' in one string decode to the same bytes under lenient readers; refused."""
    obj = as_obj(sign([ed_a]))
    obj["payload"] = "+_" + obj["payload"][2:]
    with pytest.raises(FormatError, match=r"envelope: payload: is not valid base64"):
        Envelope.from_bytes(dump(obj))


def test_attack_non_canonical_base64(ed_a: Signer) -> None:
    obj = as_obj(sign([ed_a]))
    sig = obj["signatures"][0]["sig"]  # 64 bytes -> "...X==", X has 4 unused bits
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    obj["signatures"][0]["sig"] = sig[:-3] + alphabet[alphabet.index(sig[-3]) | 1] + "=="
    assert base64.b64decode(obj["signatures"][0]["sig"]) == base64.b64decode(sig)
    with pytest.raises(FormatError, match=r"signature 0: is not canonical base64"):
        Envelope.from_bytes(dump(obj))


def test_attack_lone_surrogate_payload_type(ed_a: Signer) -> None:
    data = envelope_bytes(sign([ed_a])).replace(b'"payloadType":"', b'"payloadType":"\\udc00', 1)
    with pytest.raises(FormatError, match=r"holds a lone surrogate"):
        Envelope.from_bytes(data)


def test_attack_deeply_nested_json() -> None:
    with pytest.raises(FormatError, match=r"nested too deeply"):
        Envelope.from_bytes(b"[" * 100_000 + b"]" * 100_000)
