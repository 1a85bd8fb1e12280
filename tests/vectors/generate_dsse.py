"""Regenerate the DSSE, statement and manifest vectors from fixed TEST ONLY keys.

Usage: ``python tests/vectors/generate_dsse.py`` rewrites ``tests/vectors/{dsse,statement,
manifest}/*.json``; ``tests/unit/verify/test_vectors_dsse.py`` regenerates in memory and diffs.

Each vector is one JSON file named after its mutation, with ``description``, its inputs, and
``expected_error`` (null for a valid case, else the error class name) plus
``expected_error_match`` (a regular expression the message must contain). Bytes that are not
valid UTF-8 are stored as ``*_base64``; everything else as text, so a reader sees the mutation.

Keys (TEST ONLY, publicly known, never trust them):
- ``ed25519-a``, ``ed25519-b``, ``ed25519-outsider``: the secret keys of RFC 8032 section 7.1
  tests 1, 2 and 3;
- ``p256``: the private key of RFC 6979 appendix A.2.5.

Ed25519 signatures are deterministic. ECDSA signatures are randomised, so a P-256 signature is
made once and kept: before signing, the generator looks in the committed vectors for a P-256
signature that already verifies over the same PAE and reuses it. Regenerating therefore changes
no byte unless the signed content changed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from trajledger.ledger import encode
from trajledger.ledger.encode import b64encode
from trajledger.ledger.keys import Signer
from trajledger.ledger.signing import canonical_json, statement_bytes
from trajledger.verify import predicates
from trajledger.verify.dsse import INTOTO_PAYLOAD_TYPE, Envelope, Signature, pae
from trajledger.verify.errors import FormatError
from trajledger.verify.manifest import FileEntry, Manifest

VECTORS = Path(__file__).resolve().parent
DIRS = ("dsse", "statement", "manifest")

# TEST ONLY. RFC 8032 section 7.1, tests 1-3 (SECRET KEY).
ED25519_SEEDS = {
    "ed25519-a": "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    "ed25519-b": "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
    "ed25519-outsider": "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
}
# TEST ONLY. RFC 6979 appendix A.2.5 (P-256 private key x).
P256_SECRET = 0xC9AFA9D845BA75166B5C215767B1D6934E50C3DB36E89B127B8A622B120F6721


@dataclass
class FixedKey:
    """A fixed TEST ONLY key; P-256 signatures come from the cache when one fits."""

    signer: Signer
    cache: dict[str, list[bytes]] = field(default_factory=dict)

    @property
    def keyid(self) -> str:
        return self.signer.keyid

    def sign(self, message: bytes) -> bytes:
        if self.signer.public.algorithm == "ecdsa-p256":
            known = self.cache.setdefault(hashlib.sha256(message).hexdigest(), [])
            for sig in known:
                if self.signer.public.verify(sig, message):
                    return sig
            known.append(self.signer.sign(message))
            return known[-1]
        return self.signer.sign(message)

    def key_json(self) -> dict[str, str]:
        return {
            "name": self.signer.name,
            "algorithm": self.signer.public.algorithm,
            "keyid": self.keyid,
            "public_key_pem": self.signer.public.to_pem().decode("ascii"),
        }


def fixed_keys(cache: dict[str, list[bytes]]) -> dict[str, FixedKey]:
    """The fixed keys, P-256 sharing ``cache``."""
    keys = {
        name: FixedKey(
            Signer.from_private(
                name, ed25519.Ed25519PrivateKey.from_private_bytes(bytes.fromhex(seed))
            )
        )
        for name, seed in ED25519_SEEDS.items()
    }
    p256 = ec.derive_private_key(P256_SECRET, ec.SECP256R1())
    keys["p256"] = FixedKey(Signer.from_private("p256", p256), cache)
    return keys


def load_p256_cache(root: Path) -> dict[str, list[bytes]]:
    """Every signature in the committed envelopes, by SHA-256 of the PAE it may cover."""
    cache: dict[str, list[bytes]] = {}
    for name in ("dsse", "statement"):
        for path in sorted((root / name).glob("*.json")):
            case = json.loads(path.read_text("utf-8"))
            if "envelope" not in case and "envelope_base64" not in case:
                continue
            try:
                env = Envelope.from_bytes(envelope_bytes(case))
            except FormatError:
                continue
            h = hashlib.sha256(pae(env.payload_type, env.payload)).hexdigest()
            cache.setdefault(h, []).extend(s.sig for s in env.signatures)
    return cache


def envelope_bytes(case: dict[str, Any]) -> bytes:
    """The exact envelope bytes of a vector."""
    if "envelope_base64" in case:
        return base64.b64decode(case["envelope_base64"])
    return str(case["envelope"]).encode("utf-8")


def _put_envelope(case: dict[str, Any], data: bytes) -> None:
    try:
        case["envelope"] = data.decode("utf-8")
    except UnicodeDecodeError:
        case["envelope_base64"] = base64.b64encode(data).decode("ascii")


def _sub(data: Any, old: Any, new: Any) -> Any:
    """Replace the first ``old`` (which must be present: a silent no-op would make a bad vector)."""
    assert old in data, f"generator bug: {old!r} not found"
    return data.replace(old, new, 1)


# ---------------------------------------------------------------------------------------------
# Content


def demo_manifest() -> Manifest:
    """Two files with fixed bytes."""
    files = {
        "README.md": b"# demo dataset\n",
        "data/steps.parquet": b"PAR1 not really parquet PAR1",
    }
    return Manifest.from_files(
        [
            FileEntry(
                p,
                len(b),
                hashlib.sha256(b).hexdigest(),
                "text/markdown" if p.endswith(".md") else "application/vnd.apache.parquet",
            )
            for p, b in files.items()
        ]
    )


def files_statement(manifest: Manifest | None = None, name: str = "dataset") -> bytes:
    m = manifest or demo_manifest()
    return statement_bytes([(name, m.digest)], predicates.FILES, {"manifest": m.to_json()})


def raw_statement(obj: dict[str, Any]) -> bytes:
    return canonical_json(obj)


def sign_env(
    payload: bytes,
    signers: list[FixedKey],
    payload_type: str = INTOTO_PAYLOAD_TYPE,
    keyids: list[str] | None = None,
) -> Envelope:
    msg = pae(payload_type, payload)
    ids = keyids if keyids is not None else [k.keyid for k in signers]
    return Envelope(
        payload,
        payload_type,
        tuple(Signature(kid, k.sign(msg)) for k, kid in zip(signers, ids, strict=True)),
    )


def env_obj(env: Envelope) -> dict[str, Any]:
    """The envelope as a JSON object, in the form ``Envelope.to_bytes`` writes."""
    obj: dict[str, Any] = json.loads(encode.envelope_bytes(env))
    return obj


def compact(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("ascii")


def _flip_b64_char(s: str, i: int) -> str:
    """Change one base64 character so the decoded bytes change (alphabet-preserving)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    c = s[i]
    return s[:i] + alphabet[alphabet.index(c) ^ 0x20] + s[i + 1 :]


# ---------------------------------------------------------------------------------------------
# Vectors


def dsse_vectors(k: dict[str, FixedKey]) -> dict[str, dict[str, Any]]:
    a, b, p, out_ = k["ed25519-a"], k["ed25519-b"], k["p256"], k["ed25519-outsider"]
    payload = files_statement()
    good = sign_env(payload, [a])
    out: dict[str, dict[str, Any]] = {}

    def pae_case(name: str, desc: str, ptype: str, body: str) -> None:
        out[name] = {
            "description": desc,
            "kind": "pae",
            "payload_type": ptype,
            "payload": body,
            "expected_pae": pae(ptype, body.encode("utf-8")).decode("utf-8"),
            "expected_error": None,
        }

    pae_case(
        "pae-known-answer",
        "The DSSE protocol.md known answer: lengths are decimal ASCII byte counts.",
        "http://example.com/HelloWorld",
        "hello world",
    )
    pae_case(
        "pae-empty-payload",
        "An empty payload still gets its length (0) and the separating space.",
        INTOTO_PAYLOAD_TYPE,
        "",
    )
    pae_case(
        "pae-lengths-count-utf8-bytes",
        "Lengths count UTF-8 bytes, not characters: 'é' is 2 bytes.",
        "http://example.com/\u00e9",
        "\u00e9",
    )

    def env_case(
        name: str,
        desc: str,
        data: bytes,
        trusted: list[FixedKey],
        error: str | None,
        match: str | None = None,
        *,
        threshold: int = 1,
        signers: list[FixedKey] | None = None,
    ) -> None:
        case: dict[str, Any] = {
            "description": desc,
            "kind": "envelope",
            "trusted_keys": [t.key_json() for t in trusted],
            "threshold": threshold,
            "payload_type": INTOTO_PAYLOAD_TYPE,
        }
        _put_envelope(case, data)
        case["expected_error"] = error
        if error is None:
            case["expected_signers"] = [s.keyid for s in (signers or [])]
        else:
            case["expected_error_match"] = match
        out[name] = case

    env_case("ed25519-valid", "One Ed25519 signature over an in-toto statement.",
             encode.envelope_bytes(good), [a], None, signers=[a])
    env_case("p256-valid", "One ECDSA P-256 / SHA-256 signature (DER). Stored once: ECDSA "
             "signatures are randomised, so this one is reused, never regenerated.",
             encode.envelope_bytes(sign_env(payload, [p])), [p], None, signers=[p])
    env_case("co-signed-threshold-2", "Ed25519 and P-256 co-sign; threshold 2 of 2 trusted.",
             encode.envelope_bytes(sign_env(payload, [a, p])), [a, p], None, threshold=2,
             signers=[a, p])

    o = env_obj(good)
    o["payload"] = base64.urlsafe_b64encode(good.payload).decode().rstrip("=")
    sig = good.signatures[0].sig
    o["signatures"][0]["sig"] = base64.urlsafe_b64encode(sig).decode().rstrip("=")
    env_case("urlsafe-base64-accepted", "Payload and sig in URL-safe base64 without padding: "
             "accepted on input (the same bytes as the standard form).", compact(o), [a], None,
             signers=[a])

    o = env_obj(good)
    o["signatures"][0]["sig"] = o["signatures"][0]["sig"].rstrip("=")
    env_case("unpadded-base64-accepted", "Standard base64 with the padding left off: accepted.",
             compact(o), [a], None, signers=[a])

    o = env_obj(good)
    del o["signatures"][0]["keyid"]
    env_case("keyid-omitted-accepted", "No keyid: the signature is tried against every trusted "
             "key.", compact(o), [b, a], None, signers=[a])

    o = env_obj(good)
    o["signatures"][0]["keyid"] = "SHA256:some-other-tool's-key-name"
    env_case("foreign-keyid-ignored", "A keyid that names no trusted key narrows the keys tried "
             "to none: the hint may narrow, never widen, so the signature counts for nothing.",
             compact(o), [a], "SignatureError", r"no signature by a trusted key: 0 of 1")

    env_case("unknown-key-signature-ignored", "A co-signature by a key outside the trusted set "
             "is ignored; the trusted one meets threshold 1.",
             encode.envelope_bytes(sign_env(payload, [out_, a])), [a], None, signers=[a])

    env_case("wrong-payload-type", "Validly signed, but payloadType is application/json: "
             "refused after the signature check.",
             encode.envelope_bytes(sign_env(payload, [a], "application/json")), [a], "FormatError",
             r"payloadType is 'application/json', want 'application/vnd\.in-toto\+json'")

    o = env_obj(good)
    text = compact(o).decode()
    dup = _sub(text, '{"payload":', '{"payload":"e30=","payload":')
    env_case("duplicate-key", "'payload' appears twice: two readers could disagree on which "
             "one wins.", dup.encode(), [a], "FormatError", r"duplicate JSON key 'payload'")

    o = env_obj(good)
    o["payload"] = "!" + o["payload"][1:]
    env_case("bad-base64", "A character outside both base64 alphabets in the payload.",
             compact(o), [a], "FormatError", r"payload: is not valid base64")

    # The demo signature has neither '+' nor '/': sign a sibling statement whose signature has
    # both, so the mixed string decodes, under a lenient decoder, to a valid signature.
    mixed_env = next(
        e
        for e in (sign_env(files_statement(name=f"dataset-{i}"), [a]) for i in range(100))
        if {"+", "/"} <= set(b64encode(e.signatures[0].sig))
    )
    o = env_obj(mixed_env)
    o["signatures"][0]["sig"] = _sub(o["signatures"][0]["sig"], "/", "_")
    env_case("mixed-base64-alphabets", "'/' (standard) and '_' (URL-safe) in one string: "
             "refused, one alphabet per string.", compact(o), [a], "FormatError",
             r"is not valid base64")

    o = env_obj(good)
    sig = o["signatures"][0]["sig"]  # 64 bytes: "...Xw==", X carries 4 unused low bits
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    c = sig[-3]
    o["signatures"][0]["sig"] = sig[:-3] + alphabet[alphabet.index(c) | 1] + "=="
    env_case("non-canonical-base64", "The sig's last character has a non-zero unused bit: "
             "decodes to the same bytes under lenient decoders, refused here.", compact(o), [a],
             "FormatError", r"not canonical base64")

    o = env_obj(good)
    o["signatures"][0]["sig"] = o["signatures"][0]["sig"][:-1]
    env_case("bad-base64-padding", "One '=' of two: length with padding not a multiple of 4.",
             compact(o), [a], "FormatError", r"bad length or padding")

    o = env_obj(good)
    o["payloadHash"] = "ignored-by-lenient-readers"
    env_case("unknown-field", "An envelope field DSSE does not define.", compact(o), [a],
             "FormatError", r"unknown field\(s\) payloadHash")

    o = env_obj(good)
    o["signatures"][0]["cert"] = "MIIB"
    env_case("signature-unknown-field", "A signature field trajledger does not define.",
             compact(o), [a], "FormatError", r"signature 0 has unknown field\(s\) \['cert'\]")

    o = env_obj(good)
    del o["payloadType"]
    env_case("missing-payload-type", "No payloadType.", compact(o), [a], "FormatError",
             r"missing field 'payloadType'")

    o = env_obj(good)
    o["signatures"] = []
    env_case("empty-signatures", "An empty signature list.", compact(o), [a], "FormatError",
             r"signatures must be a non-empty list")

    o = env_obj(good)
    o["signatures"] = o["signatures"] * 65
    env_case("too-many-signatures", "65 copies of a valid signature: more than 64 signatures is "
             "refused before any is checked (each costs a verification).", compact(o), [a],
             "FormatError", r"65 signatures, more than 64: refused before any is checked")

    o = env_obj(good)
    o["signatures"][0]["sig"] = ""
    env_case("empty-sig", "A signature of zero bytes.", compact(o), [a], "FormatError",
             r"signature 0 is empty")

    o = env_obj(good)
    o["signatures"][0]["keyid"] = 7
    env_case("keyid-not-string", "keyid is a number.", compact(o), [a], "FormatError",
             r"signature 0 keyid must be a string")

    o = env_obj(good)
    o["signatures"][0]["sig"] = _flip_b64_char(o["signatures"][0]["sig"], 10)
    env_case("sig-bit-flip", "One bit of the signature flipped.", compact(o), [a],
             "SignatureError", r"invalid signature by key [0-9a-f]{16}: 0 of 1")

    o = env_obj(good)
    o["payload"] = _flip_b64_char(o["payload"], 40)
    env_case("payload-bit-flip", "One bit of the payload flipped, signature kept.", compact(o),
             [a], "SignatureError", r"invalid signature by key [0-9a-f]{16}: 0 of 1")

    other = sign_env(files_statement(name="other-dataset"), [a])
    o = env_obj(good)
    o["payload"] = env_obj(other)["payload"]
    env_case("signature-wrapping", "A valid signature over statement X carried with statement "
             "Y: the signature is checked over the bytes received.", compact(o), [a],
             "SignatureError", r"invalid signature by key")

    env_case("wrong-key", "Signed by a key outside the trusted set.",
             encode.envelope_bytes(sign_env(payload, [out_])), [a], "SignatureError",
             r"no signature by a trusted key: 0 of 1")

    env_case("key-confusion-p256-sig-ed25519-keyid", "A valid P-256 signature labelled with "
             "the Ed25519 key's keyid: a keyid naming a trusted key binds the signature to it.",
             encode.envelope_bytes(sign_env(payload, [p], keyids=[a.keyid])), [a, p],
             "SignatureError", r"invalid signature by key")

    o = env_obj(good)
    o["signatures"] = [o["signatures"][0], o["signatures"][0]]
    env_case("duplicate-signatures-threshold-2", "The same key's signature twice does not "
             "meet threshold 2.", compact(o), [a, b], "SignatureError",
             r"too few signatures by trusted keys: 1 of 2", threshold=2)

    env_case("below-threshold", "One trusted signature, threshold 2.",
             encode.envelope_bytes(good), [a, b], "SignatureError", r"1 of 2 required",
             threshold=2)

    env_case("bom", "A UTF-8 byte-order mark before the JSON.",
             b"\xef\xbb\xbf" + encode.envelope_bytes(good), [a], "FormatError", r"byte-order mark")

    o = env_obj(good)
    bad = _sub(compact(o), b'"keyid":"', b'"keyid":"\xff')
    env_case("invalid-utf8", "Byte 0xFF inside the keyid string: not UTF-8.", bad, [a],
             "FormatError", r"not valid UTF-8 at byte \d+")

    o = env_obj(good)
    nan = _sub(compact(o), b'"keyid":"' + a.keyid.encode() + b'"', b'"keyid":NaN')
    env_case("nan", "NaN is not JSON, though Python's json module reads it.", nan, [a],
             "FormatError", r"NaN is not valid JSON")

    o = env_obj(good)
    big = _sub(compact(o), b'"keyid":"' + a.keyid.encode() + b'"', b'"keyid":1e400')
    env_case("number-overflows-to-infinity", "1e400 parses to infinity in Python: refused "
             "like Infinity.", big, [a], "FormatError", r"overflows to infinity")

    o = env_obj(good)
    digits = _sub(compact(o), b'"keyid":"' + a.keyid.encode() + b'"', b'"keyid":' + b"9" * 5000)
    env_case("integer-too-long", "An integer of 5000 digits: one line of FormatError, not a "
             "bare ValueError from int().", digits, [a], "FormatError", r"more than \d+ digits")

    env_case("trailing-garbage", "Bytes after the JSON object.",
             encode.envelope_bytes(good) + b"x", [a], "FormatError", r"malformed JSON")

    env_case("top-level-array", "The envelope wrapped in an array.",
             b"[" + encode.envelope_bytes(good) + b"]", [a], "FormatError", r"top level is list")

    o = env_obj(good)
    surrogate = _sub(compact(o), b'"payloadType":"', b'"payloadType":"\\ud800')
    env_case("payload-type-lone-surrogate", "payloadType holds a lone surrogate escape: valid "
             "JSON, but it has no UTF-8 bytes for PAE.", surrogate, [a], "FormatError",
             r"holds a lone surrogate")
    return out


def statement_vectors(k: dict[str, FixedKey]) -> dict[str, dict[str, Any]]:
    a, p, out_ = k["ed25519-a"], k["p256"], k["ed25519-outsider"]
    m = demo_manifest()
    base = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "dataset", "digest": {"sha256": m.digest.removeprefix("sha256:")}}],
        "predicateType": predicates.FILES,
        "predicate": {"manifest": m.to_json()},
    }
    out: dict[str, dict[str, Any]] = {}

    def case(
        name: str,
        desc: str,
        env: Envelope | bytes,
        error: str | None,
        match: str | None = None,
        *,
        trusted: list[FixedKey] | None = None,
        subject_digest: str | None = m.digest,
        check_manifest: bool = True,
    ) -> None:
        data = env if isinstance(env, bytes) else encode.envelope_bytes(env)
        c: dict[str, Any] = {
            "description": desc,
            "kind": "statement",
            "trusted_keys": [t.key_json() for t in (trusted or [a])],
            "threshold": 1,
            "allowed_predicate_types": [predicates.FILES],
            "subject_digest": subject_digest,
            "check_manifest": check_manifest,
        }
        _put_envelope(c, data)
        c["expected_error"] = error
        if error is None:
            c["expected_manifest_digest"] = m.digest if check_manifest else None
        else:
            c["expected_error_match"] = match
        out[name] = c

    def signed(obj: dict[str, Any] | bytes, key: FixedKey = a) -> Envelope:
        payload = obj if isinstance(obj, bytes) else raw_statement(obj)
        return sign_env(payload, [key])

    def changed(**kw: Any) -> dict[str, Any]:
        d = json.loads(json.dumps(base))
        d.update(kw)
        return d

    case("files-statement-valid", "The statement `trajledger sign` writes: the manifest "
         "inline, its digest as the subject.", signed(base), None)
    case("files-statement-p256-valid", "The same, signed with P-256 (stored signature).",
         signed(base, p), None, trusted=[p])
    case("predicate-type-not-allowed", "A valid statement of a type the caller did not allow.",
         signed(changed(predicateType="https://slsa.dev/provenance/v1")), "PolicyError",
         r"predicateType 'https://slsa\.dev/provenance/v1' is not allowed here")
    sub = changed()
    sub["subject"][0]["digest"] = {"sha512": "ab" * 64}
    case("subject-missing-sha256", "A subject with only a sha512 digest.", signed(sub),
         "FormatError", r"subject 'dataset' has no sha256 digest")
    sub = changed()
    del sub["subject"][0]["name"]
    case("subject-missing-name", "A subject without a name.", signed(sub), "FormatError",
         r"subject 0 has no name")
    sub = changed()
    sub["subject"][0]["digest"]["sha256"] = sub["subject"][0]["digest"]["sha256"].upper()
    case("subject-sha256-uppercase", "Uppercase hex in a subject digest.", signed(sub),
         "FormatError", r"is not 64 lowercase hex")
    sub = changed()
    sub["subject"] = [sub["subject"][0], sub["subject"][0]]
    case("duplicate-subject-name", "Two subjects with one name.", signed(sub), "FormatError",
         r"subject name 'dataset' appears twice")
    case("empty-subject-list", "No subject.", signed(changed(subject=[])), "FormatError",
         r"subject must be a non-empty list")
    case("subject-digest-mismatch", "The caller's artifact is not a subject of the statement.",
         signed(base), "DigestMismatchError",
         r"the first subject \(the artifact\) is sha256:[0-9a-f]{64}, want sha256:0{64}$",
         subject_digest="sha256:" + "0" * 64)
    sub = changed()
    sub["subject"] = [{"name": "other", "digest": {"sha256": "0" * 64}}, sub["subject"][0]]
    case("artifact-is-a-later-subject", "The caller's artifact is the second subject, not the "
         "first: a later subject is a part of the artifact (a checkpoint's model file), never "
         "its identity.", signed(sub), "DigestMismatchError",
         r"the first subject \(the artifact\) is sha256:0{64}, want sha256:[0-9a-f]{64}; it is "
         r"the later subject 'dataset', a part, not the artifact",
         subject_digest=m.digest)
    case("wrong-statement-type", "_type of in-toto Statement v0.1.",
         signed(changed(_type="https://in-toto.io/Statement/v0.1")), "FormatError",
         r"_type is 'https://in-toto\.io/Statement/v0\.1'")
    case("unknown-statement-field-kept", "A top-level field in-toto v1 does not define: "
         "accepted and kept, as in-toto readers do (SPEC.md, \"Unknown fields\").",
         signed(changed(predicateVersion="1")), None)
    case("predicate-not-object", "predicate is a list.", signed(changed(predicate=[])),
         "FormatError", r"predicate must be an object")
    text = raw_statement(base).decode()
    dup = _sub(text, '{"_type":', '{"_type":"x","_type":').encode()
    case("duplicate-key-in-payload", "Signed payload with '_type' twice: refused after the "
         "signature holds.", signed(dup), "FormatError", r"duplicate JSON key '_type'")
    nan = _sub(text, '"predicate":{', '"predicate":{"reward":NaN,').encode()
    case("nan-in-payload", "Signed payload with NaN in the predicate.", signed(nan),
         "FormatError", r"NaN is not valid JSON")
    case("bom-in-payload", "Signed payload starting with a byte-order mark.",
         signed(b"\xef\xbb\xbf" + text.encode()), "FormatError", r"byte-order mark")
    bad = _sub(text, '"name":"dataset"', '"name":"data\\u00e9"').encode()
    bad = _sub(bad, b"data\\u00e9", b"data\xe9")
    case("invalid-utf8-in-payload", "Signed payload with a Latin-1 byte (0xE9) in a name.",
         signed(bad), "FormatError", r"not valid UTF-8")
    case("wrong-payload-type-after-valid-signature", "Signature valid over PAE with "
         "payloadType application/json: refused as the wrong type, after the signature.",
         sign_env(raw_statement(base), [a], "application/json"), "FormatError",
         r"payloadType is 'application/json'")
    case("bad-signature-checked-before-payload-type", "Wrong payloadType and an untrusted "
         "signer: the signature is checked first.",
         sign_env(raw_statement(base), [out_], "application/json"), "SignatureError",
         r"no signature by a trusted key")
    case("bad-signature-checked-before-parse", "A malformed payload from an untrusted signer: "
         "nothing is parsed before the signature holds.", signed(b"{not json", out_),
         "SignatureError", r"no signature by a trusted key")
    sub = changed()
    sub["subject"][0]["digest"]["sha256"] = hashlib.sha256(b"something else").hexdigest()
    case("manifest-not-bound-to-subject", "The inline manifest does not hash to the subject "
         "digest (a signer bound one artifact, listed another's files).", signed(sub),
         "DigestMismatchError", r"manifest hashes to sha256:[0-9a-f]{64}, but the first "
         r"subject \(the artifact\) is sha256:", subject_digest=None)
    mm = m.to_json()
    mm["files"][0]["path"] = "../README.md"
    case("manifest-path-traversal", "A signed manifest naming '../README.md'.",
         signed(changed(predicate={"manifest": mm})), "FormatError",
         r"'\.\./README\.md' has an empty, '\.' or '\.\.' segment", subject_digest=None)
    case("predicate-missing-manifest", "A files predicate without a manifest.",
         signed(changed(predicate={})), "FormatError", r"predicate has no manifest",
         subject_digest=None)
    return out


def manifest_vectors() -> dict[str, dict[str, Any]]:
    m = demo_manifest()
    out: dict[str, dict[str, Any]] = {}

    def case(name: str, desc: str, doc: bytes, error: str | None, match: str | None = None) -> None:
        c: dict[str, Any] = {"description": desc, "kind": "manifest"}
        try:
            c["manifest"] = doc.decode("utf-8")
        except UnicodeDecodeError:
            c["manifest_base64"] = base64.b64encode(doc).decode("ascii")
        c["expected_error"] = error
        if error is None:
            parsed = Manifest.from_json(json.loads(doc))
            c["expected_canonical"] = parsed.canonical_bytes().decode("utf-8")
            c["expected_digest"] = parsed.digest
        else:
            c["expected_error_match"] = match
        out[name] = c

    def with_files(files: list[dict[str, Any]], **top: Any) -> bytes:
        obj: dict[str, Any] = {"files": files, "mediaType": m.to_json()["mediaType"]}
        obj.update(top)
        # Not canonical_json: the invalid cases hold values (2^53, 5.5) JCS refuses to write.
        return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()

    def entry(
        path: str, size: Any = 1, sha: str = "a" * 64, mt: str = "text/plain"
    ) -> dict[str, Any]:
        return {"digest": {"sha256": sha}, "mediaType": mt, "path": path, "size": size}

    case("two-files-valid", "Two files; the identity is SHA-256 of these exact JCS bytes.",
         m.canonical_bytes(), None)
    case("paths-sorted-by-code-point", "Paths sort by Unicode code point (= UTF-8 byte "
         "order), not UTF-16: U+FF61 before U+1F600.",
         with_files([entry("\uff61.txt"), entry("\U0001f600.txt")]), None)
    case("non-canonical-input-same-identity", "Whitespace and another key order: the "
         "manifest is read as JSON and its identity is the digest of its JCS form.",
         json.dumps(m.to_json(), indent=1, sort_keys=False).encode(), None)
    case("path-traversal", "'../etc/passwd' escapes the root.",
         with_files([entry("../etc/passwd")]), "FormatError",
         r"'\.\./etc/passwd' has an empty, '\.' or '\.\.' segment")
    case("path-traversal-inner", "'a/../../b' escapes the root.",
         with_files([entry("a/../../b")]), "FormatError", r"'\.\.' segment")
    case("absolute-path", "An absolute path.", with_files([entry("/etc/passwd")]),
         "FormatError", r"must be a relative POSIX path")
    case("backslash-path", "A backslash (a separator on Windows).",
         with_files([entry("a\\b")]), "FormatError", r"must be a relative POSIX path")
    case("nul-in-path", "A NUL byte in a path.", with_files([entry("a\x00b")]), "FormatError",
         r"must be a relative POSIX path")
    case("empty-segment", "'a//b'.", with_files([entry("a//b")]), "FormatError",
         r"empty, '\.' or '\.\.' segment")
    case("trailing-slash", "'a/'.", with_files([entry("a/")]), "FormatError",
         r"empty, '\.' or '\.\.' segment")
    case("dot-segment", "'./a'.", with_files([entry("./a")]), "FormatError",
         r"empty, '\.' or '\.\.' segment")
    case("empty-path", "An empty path.", with_files([entry("")]), "FormatError",
         r"must be a non-empty string")
    case("unsorted-paths", "Files out of order.", with_files([entry("b"), entry("a")]),
         "FormatError", r"paths not sorted \('b' before 'a'\)")
    case("duplicate-path", "One path twice.", with_files([entry("a"), entry("a", 2)]),
         "FormatError", r"path 'a' appears twice")
    case("file-and-directory", "'a' is a file and the directory of 'a/b'.",
         with_files([entry("a"), entry("a/b")]), "FormatError",
         r"'a' is both a file and a directory")
    case("size-over-2^53", "size 2^53: beyond the integers every JSON reader keeps exactly.",
         with_files([entry("a", 2**53)]), "FormatError", r"size 9007199254740992 is not an "
         r"integer in \[0, 2\^53\)")
    case("size-max-safe-integer-valid", "size 2^53-1, the largest allowed.",
         with_files([entry("a", 2**53 - 1)]), None)
    case("negative-size", "size -1.", with_files([entry("a", -1)]), "FormatError",
         r"size -1 is not an integer")
    case("size-as-string", "size \"5\".", with_files([entry("a", "5")]), "FormatError",
         r"size '5' is not an integer")
    case("size-float", "size 5.5.", with_files([entry("a", 5.5)]), "FormatError",
         r"size 5\.5 is not an integer")
    case("size-bool", "size true (a bool is not an integer here).",
         with_files([entry("a", True)]), "FormatError", r"size True is not an integer")
    case("sha256-uppercase", "Uppercase hex.", with_files([entry("a", sha="A" * 64)]),
         "FormatError", r"sha256 is not 64 lowercase hex")
    case("sha256-short", "63 hex characters.", with_files([entry("a", sha="a" * 63)]),
         "FormatError", r"sha256 is not 64 lowercase hex")
    e = entry("a")
    e["digest"]["sha512"] = "b" * 128
    case("digest-extra-algorithm", "A second digest algorithm.", with_files([e]),
         "FormatError", r"digest must be \{'sha256': <hex>\}")
    e = entry("a")
    del e["mediaType"]
    case("file-missing-media-type", "A file entry without mediaType.", with_files([e]),
         "FormatError", r"want exactly digest, mediaType, path, size")
    case("file-empty-media-type", "mediaType \"\".", with_files([entry("a", mt="")]),
         "FormatError", r"mediaType must be a non-empty string")
    case("unknown-field", "A top-level field the format does not define.",
         with_files([entry("a")], name="x"), "FormatError", r"fields are \['files', "
         r"'mediaType', 'name'\]")
    case("wrong-media-type", "Another manifest format.",
         with_files([entry("a")], mediaType="application/json"), "FormatError",
         r"mediaType is 'application/json'")
    text = m.canonical_bytes().decode()
    case("duplicate-key", "'mediaType' twice.",
         _sub(text, '"mediaType":"application/vnd.trajledger', '"mediaType":"x",'
              '"mediaType":"application/vnd.trajledger').encode(),
         "FormatError", r"duplicate JSON key 'mediaType'")
    case("nan-size", "size NaN.", _sub(text, '"size":15', '"size":NaN').encode(),
         "FormatError", r"NaN is not valid JSON")
    case("invalid-utf8-path", "A Latin-1 byte in a path.",
         _sub(text, '"README.md"', '"READM\xc9.md"').encode("latin-1"), "FormatError",
         r"not valid UTF-8")
    return out


def generate(root: Path = VECTORS) -> dict[str, bytes]:
    """All vectors as ``{"dsse/<name>.json": bytes}``, reusing P-256 signatures under ``root``."""
    keys = fixed_keys(load_p256_cache(root))
    files: dict[str, bytes] = {}
    groups: list[tuple[str, Callable[[], dict[str, dict[str, Any]]]]] = [
        ("dsse", lambda: dsse_vectors(keys)),
        ("statement", lambda: statement_vectors(keys)),
        ("manifest", manifest_vectors),
    ]
    for directory, make in groups:
        for name, case in make().items():
            text = json.dumps(case, indent=2, ensure_ascii=True) + "\n"
            files[f"{directory}/{name}.json"] = text.encode("ascii")
    return files


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else VECTORS
    files = generate(root)
    for directory in DIRS:
        for stale in (root / directory).glob("*.json"):
            if f"{directory}/{stale.name}" not in files:
                stale.unlink()
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    print(f"wrote {len(files)} vectors under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
