"""``bundle.json`` read in place (review left23, finding 3): the members it lists are matched
where canonical JSON puts them and kept as offsets into its bytes, not parsed into objects, so
an index listing hundreds of thousands of members absent from the archive costs about its own
bytes until the first one is found missing (it cost about seven times its bytes, 460 MB at the
64 MiB cap, before the first member was compared: left22 finding 4, not merged)."""

from __future__ import annotations

import hashlib
import tracemalloc

import pytest

from trajledger.ledger.encode import bundle_index_bytes
from trajledger.verify.bundle_index import BundleIndex, Member
from trajledger.verify.errors import FormatError


def index_of(n: int, **kw: object) -> BundleIndex:
    """An index listing ``n`` objects (none of them need exist: only the index is read)."""
    digests = sorted(hashlib.sha256(b"%d" % i).hexdigest() for i in range(n))
    fields: dict[str, object] = {
        "subject": "sha256:" + "a" * 64, "origin": "o.example/log", "vkey": "o.example/log+x",
        "created": "2026-12-04T00:00:00Z",
        "members": tuple(Member(f"objects/sha256/{d}", 1000 + i, d)
                         for i, d in enumerate(digests))}
    return BundleIndex(**{**fields, **kw})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def large() -> tuple[BundleIndex, bytes]:
    index = index_of(20_000)
    return index, bundle_index_bytes(index)


def test_reading_an_index_costs_about_its_bytes(large: tuple[BundleIndex, bytes]) -> None:
    """Python's allocations while parsing 20,000 listed members (3.6 MB): under twice the
    index's bytes (about six times before: a dictionary and strings a member, a Member, the
    canonical bytes again)."""
    _index, data = large
    tracemalloc.start()
    try:
        parsed = BundleIndex.from_bytes(data)
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(parsed.members) == 20_000
    assert peak < 2 * len(data), (peak, len(data))


def test_a_large_index_reads_back_whole(large: tuple[BundleIndex, bytes]) -> None:
    index, data = large
    parsed = BundleIndex.from_bytes(data)
    assert list(parsed.members) == list(index.members)
    assert bundle_index_bytes(parsed) == data
    some = index.members[12_345]
    assert parsed.member(some.name) == some
    assert parsed.member("objects/sha256/" + "0" * 64) is None


def test_a_members_list_off_the_canonical_form_is_refused() -> None:
    data = bundle_index_bytes(index_of(3))
    first = data.index(b'{"name"')
    second = data.index(b',{"name"', first)
    cases = {
        "a trailing comma": data.replace(b"}],", b"},],", 1),
        "another key": data[:first + 1] + b'"extra":1,' + data[first + 1:],
        "white space": data[:second] + b", " + data[second + 1:],
        "a key before members hiding another list": data.replace(
            b'{"created"', b'{"a":{"members":[]},"created"', 1),
        "a size with a leading zero": data.replace(b'"size":1000', b'"size":01000', 1),
        "no members": data.replace(data[data.index(b',"members"'):data.index(b',"omitted"')],
                                   b""),
    }
    for what, bad in cases.items():
        with pytest.raises(FormatError, match=r"bundle\.json: "):
            BundleIndex.from_bytes(bad)
        assert what


def test_an_extension_hiding_a_members_list_does_not_replace_the_index_s() -> None:
    """The first ``,"members":[`` is the index's: the keys before it in canonical order
    (created, erased, extension, format) hold no nested object; a list hidden in one is
    refused as what it is not, never read as the members."""
    data = bundle_index_bytes(index_of(2, format=4, extension=3, subject=None))
    forged = data.replace(b'"extension":3', b'"extension":{"b":1,"members":[]}', 1)
    with pytest.raises(FormatError, match=r"bundle\.json: "):
        BundleIndex.from_bytes(forged)
