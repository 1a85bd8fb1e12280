"""Log entries (verify/log_entry.py): one canonical encoding, a strict parser, the hash chain.

The writer's encoding is checked against an independent RFC 8785 implementation (the ``rfc8785``
package) and the JSON Schema; every mutation of an entry is refused with a message naming it.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from trajledger.ledger.encode import log_entry
from trajledger.verify.errors import FormatError
from trajledger.verify.log_entry import ENTRY_VERSION, GENESIS_PREV, KINDS, LogEntry
from trajledger.verify.logcheck import check_entries
from trajledger.verify.merkle import leaf_hash, root_from_leaf_hashes

SCHEMA = json.loads(
    (Path(__file__).parents[3] / "schemas" / "log-entry.v1.schema.json").read_text()
)
HEX = "0123456789abcdef"


def digest(seed: str) -> str:
    return "sha256:" + hashlib.sha256(seed.encode()).hexdigest()


def keyid(seed: str) -> str:
    return hashlib.sha256(b"key" + seed.encode()).hexdigest()


def entry(**over: object) -> LogEntry:
    fields: dict[str, object] = {
        "kind": "files",
        "subject": digest("s"),
        "envelope": digest("e"),
        "signers": tuple(sorted([keyid("a"), keyid("b")])),
        "time": "2025-03-01T12:00:00Z",
        "prev": GENESIS_PREV,
    }
    fields.update(over)
    return log_entry(**fields)  # type: ignore[arg-type]


hex64 = st.text(alphabet=HEX, min_size=64, max_size=64)
entries = st.builds(
    lambda kind, s, e, signers, t, prev: log_entry(
        kind, "sha256:" + s, "sha256:" + e, tuple(sorted(signers)), t, prev
    ),
    st.sampled_from(sorted(KINDS)),
    hex64,
    hex64,
    st.sets(hex64, min_size=1, max_size=5),
    st.datetimes(min_value=datetime(1000, 1, 1)).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ")),
    hex64,
)


@settings(max_examples=200)
@given(entries)
def test_encoding_is_rfc8785_and_round_trips(e: LogEntry) -> None:
    raw = e.to_bytes()
    # An independent RFC 8785 implementation gives the same bytes.
    fields = {"envelope": e.envelope, "kind": e.kind, "prev": e.prev, "signers": list(e.signers),
              "subject": e.subject, "time": e.time, "v": ENTRY_VERSION}
    assert bytes(rfc8785.dumps(fields)) == raw
    back = LogEntry.from_bytes(raw)
    assert back == e
    assert back.to_bytes() == raw
    assert back.leaf_hash == leaf_hash(raw)
    jsonschema.validate(json.loads(raw), SCHEMA)


def test_known_answer() -> None:
    # Derivation: the JCS object with keys in code-point order and no whitespace; the leaf hash
    # is sha256(0x00 || bytes), RFC 6962 section 2.1.
    e = entry()
    want = (
        '{"envelope":"' + digest("e") + '","kind":"files","prev":"' + "0" * 64 + '",'
        '"signers":["' + '","'.join(sorted([keyid("a"), keyid("b")])) + '"],'
        '"subject":"' + digest("s") + '","time":"2025-03-01T12:00:00Z","v":1}'
    ).encode()
    assert e.to_bytes() == want
    assert e.leaf_hash == hashlib.sha256(b"\x00" + want).digest()


def mutate(old: str, new: str) -> bytes:
    raw = entry().to_bytes()
    assert old.encode() in raw
    return raw.replace(old.encode(), new.encode(), 1)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b" " + entry().to_bytes(), "not in canonical form"),
        (mutate('"kind":"files",', '"kind": "files",'), "not in canonical form"),
        (mutate('"kind":"files"', '"kind":"\\u0066iles"'), "not in canonical form"),
        (mutate('"v":1}', '"v":1,"extra":1}'), r"unknown field\(s\) \['extra'\]"),
        (mutate('"v":1}', '"v":2}'), "v is 2, want 1"),
        (mutate('"v":1}', '"v":true}'), "v is True, want 1"),
        (mutate('"v":1}', '"v":1.0}'), "v is 1.0, want 1"),
        (mutate('"v":1}', '"v":1,"v":1}'), "duplicate JSON key 'v'"),
        (mutate(',"v":1}', "}"), r"missing field\(s\) \['v'\]"),
        (mutate('"kind":"files"', '"kind":"file"'), "kind 'file' is unknown"),
        (mutate("sha256:", "SHA256:"), "not of the form sha256:<64 lowercase hex>"),
        (mutate(digest("s")[7:15], digest("s")[7:15].upper()), "sha256:<64 lowercase hex>"),
        (mutate("2025-03-01T12:00:00Z", "2025-02-30T12:00:00Z"), "not a valid UTC date"),
        (mutate("2025-03-01T12:00:00Z", "2025-03-01T12:00:00+00:00"), "YYYY-MM-DDTHH:MM:SSZ"),
        (mutate("2025-03-01T12:00:00Z", "2025-03-01T24:00:00Z"), "not a valid UTC date"),
        (mutate("0" * 64, "0" * 63), "prev '0{63}' is not 64 lowercase hex"),
        (mutate('"signers":[', '"signers":["' + keyid("z") + '",'), "not sorted and unique"),
        (
            mutate('"signers":[', '"signers":["' + min(keyid("a"), keyid("b")) + '",'),
            "not sorted and unique",
        ),
        (
            mutate(
                '"signers":["' + '","'.join(sorted([keyid("a"), keyid("b")])) + '"]',
                '"signers":[]',
            ),
            "signers is empty",
        ),
        (
            mutate(
                '"signers":["' + '","'.join(sorted([keyid("a"), keyid("b")])) + '"]',
                '"signers":"' + keyid("a") + '"',
            ),
            "signers is str, want a list",
        ),
        (b"[]", "top level is list, want an object"),
        (b"\xff", "not valid UTF-8"),
    ],
)
def test_mutations_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        LogEntry.from_bytes(data, "log entry 7")
    with pytest.raises(FormatError, match=r"^log entry 7: "):
        LogEntry.from_bytes(data, "log entry 7")


def test_oversize_entry_is_refused() -> None:
    signers = tuple(sorted(keyid(str(i)) for i in range(1000)))
    with pytest.raises(FormatError, match=r"encodes to \d+ bytes, want at most 65535"):
        entry(signers=signers)
    with pytest.raises(FormatError, match=r"log entry 1: 65536 bytes, want at most 65535"):
        LogEntry.from_bytes(b"x" * 65536, "log entry 1")


def test_constructor_checks_every_field() -> None:
    with pytest.raises(FormatError, match="kind 'nope' is unknown"):
        entry(kind="nope")
    with pytest.raises(FormatError, match="not sorted and unique"):
        entry(
            signers=(keyid("b"), keyid("a"))
            if keyid("b") > keyid("a")
            else (keyid("a"), keyid("b"))
        )
    with pytest.raises(FormatError, match="signer keyid 'x' is not 64 lowercase hex"):
        entry(signers=("x",))


def chain(n: int) -> list[bytes]:
    out, prev = [], GENESIS_PREV
    for i in range(n):
        raw = entry(subject=digest(f"s{i}"), envelope=digest(f"e{i}"), prev=prev).to_bytes()
        out.append(raw)
        prev = leaf_hash(raw).hex()
    return out


def _check_chain(raws: list[bytes]) -> list[str]:
    """The findings of the one chain-and-root checker (`verify.logcheck.check_entries`) on
    ``raws`` as a whole tree whose root the entries themselves give."""
    root = root_from_leaf_hashes([leaf_hash(r) for r in raws])
    return [f.message for f in check_entries(dict(enumerate(raws)), len(raws), root,
                                             lambda i: [])]


def test_chain_verifies() -> None:
    raws = chain(10)
    assert _check_chain(raws) == []
    assert LogEntry.from_bytes(raws[4]).prev == leaf_hash(raws[3]).hex()


def test_chain_break_names_the_entry() -> None:
    raws = chain(6)
    del raws[3]  # entry 4 now follows entry 2
    assert any(re.fullmatch(r"entry 3: prev is [0-9a-f]{64}, want [0-9a-f]{64} \(the leaf hash "
                            r"of entry 2\): the hash chain is broken", m)
               for m in _check_chain(raws))


def test_chain_first_entry_must_be_genesis() -> None:
    raws = chain(3)
    assert any(re.fullmatch(r"entry 0: prev is [0-9a-f]{64}, want 0{64} \(the leaf hash of no "
                            r"entry \(genesis\)\): the hash chain is broken", m)
               for m in _check_chain(raws[1:]))


def test_chain_parses_strictly() -> None:
    raws = chain(2)
    raws[1] = raws[1] + b" "
    assert any(m.startswith("log entry 1: is valid JSON but not in canonical form")
               for m in _check_chain(raws))
