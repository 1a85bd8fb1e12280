"""Property tests: verify.merkle and verify.tiles against a spec-literal RFC 6962 oracle.

The oracle below transcribes RFC 6962 section 2.1 (MTH), 2.1.1 (PATH) and 2.1.2 (PROOF /
SUBPROOF) as written, recursion and all. It is slow and obviously right; the implementation is
iterative (merkle.py) or tile-based (tiles.py) and must agree with it on every input.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from trajledger.verify.consistency import root_from_consistency_proof, verify_consistency
from trajledger.verify.errors import ProofError
from trajledger.verify.merkle import (
    leaf_hash,
    root_from_inclusion_proof,
    root_from_leaf_hashes,
    verify_inclusion,
)
from trajledger.verify.tiles import TileReader

# -- RFC 6962 section 2.1, literally ---------------------------------------------------------


def _k(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(d: list[bytes]) -> bytes:
    """MTH(D[n])."""
    n = len(d)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + d[0]).digest()
    k = _k(n)
    return hashlib.sha256(b"\x01" + mth(d[:k]) + mth(d[k:])).digest()


def path(m: int, d: list[bytes]) -> list[bytes]:
    """PATH(m, D[n])."""
    n = len(d)
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return [*path(m, d[:k]), mth(d[k:])]
    return [*path(m - k, d[k:]), mth(d[:k])]


def subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b)."""
    n = len(d)
    if m == n:
        return [] if b else [mth(d)]
    k = _k(n)
    if m <= k:
        return [*subproof(m, d[:k], b), mth(d[k:])]
    return [*subproof(m - k, d[k:], False), mth(d[:k])]


def proof(m: int, d: list[bytes]) -> list[bytes]:
    """PROOF(m, D[n])."""
    return subproof(m, d, True)


# -- helpers ---------------------------------------------------------------------------------


def _generator() -> ModuleType:
    name = "trajledger_vectors_generate"
    if name not in sys.modules:
        where = Path(__file__).resolve().parents[1] / "vectors/generate.py"
        spec = importlib.util.spec_from_file_location(name, where)
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def entries(n: int, salt: int) -> list[bytes]:
    """n distinct entries (distinct so that no two leaves can stand in for each other)."""
    return [f"{salt}:{i}".encode() for i in range(n)]


def tile_reader(d: list[bytes]) -> TileReader:
    reader: TileReader = _generator().reader(d)
    return reader


sizes = st.integers(min_value=1, max_value=600)
salts = st.integers(min_value=0, max_value=2**16)
SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def size_and_index(draw: st.DrawFn) -> tuple[int, int]:
    n = draw(sizes)
    return n, draw(st.integers(min_value=0, max_value=n - 1))


@st.composite
def two_sizes(draw: st.DrawFn) -> tuple[int, int]:
    n = draw(sizes)
    return draw(st.integers(min_value=1, max_value=n)), n


def _mutate(hashes: list[bytes], which: int, pos: int, value: int) -> list[bytes]:
    h = bytearray(hashes[which])
    h[pos] = value
    return [bytes(h) if i == which else x for i, x in enumerate(hashes)]


# -- properties ------------------------------------------------------------------------------


@SETTINGS
@given(st.lists(st.binary(max_size=8), max_size=300))
def test_root_matches_mth(d: list[bytes]) -> None:
    assert root_from_leaf_hashes([leaf_hash(e) for e in d]) == mth(d)


@SETTINGS
@given(size_and_index(), salts)
def test_inclusion_holds_and_tiles_build_the_rfc_path(nm: tuple[int, int], salt: int) -> None:
    n, m = nm
    d = entries(n, salt)
    root = mth(d)
    want = path(m, d)
    verify_inclusion(m, n, leaf_hash(d[m]), want, root)
    assert root_from_inclusion_proof(m, n, leaf_hash(d[m]), want) == root
    reader = tile_reader(d)
    assert reader.root() == root
    assert reader.inclusion_proof(m) == want


@SETTINGS
@given(two_sizes(), salts)
def test_consistency_holds_for_any_pair_of_sizes(mn: tuple[int, int], salt: int) -> None:
    m, n = mn
    d = entries(n, salt)
    want = proof(m, d)
    verify_consistency(m, n, want, mth(d[:m]), mth(d))
    assert root_from_consistency_proof(m, n, want, mth(d[:m])) == mth(d)
    reader = tile_reader(d)
    assert reader.consistency_proof(m) == want
    assert reader.subtree_root(0, m) == mth(d[:m])


@SETTINGS
@given(size_and_index(), salts, st.data())
def test_any_single_byte_change_to_an_inclusion_proof_is_rejected(
    nm: tuple[int, int], salt: int, data: st.DataObject
) -> None:
    n, m = nm
    d = entries(n, salt)
    p = path(m, d)
    assume(p)
    which = data.draw(st.integers(0, len(p) - 1))
    pos = data.draw(st.integers(0, 31))
    value = data.draw(st.integers(0, 255).filter(lambda v: v != p[which][pos]))
    with pytest.raises(ProofError, match=f"inclusion proof for leaf {m} \\(size {n}\\) leads to"):
        verify_inclusion(m, n, leaf_hash(d[m]), _mutate(p, which, pos, value), mth(d))


@SETTINGS
@given(two_sizes(), salts, st.data())
def test_any_single_byte_change_to_a_consistency_proof_is_rejected(
    mn: tuple[int, int], salt: int, data: st.DataObject
) -> None:
    m, n = mn
    d = entries(n, salt)
    p = proof(m, d)
    assume(p)
    which = data.draw(st.integers(0, len(p) - 1))
    pos = data.draw(st.integers(0, 31))
    value = data.draw(st.integers(0, 255).filter(lambda v: v != p[which][pos]))
    with pytest.raises(ProofError, match=f"consistency proof from size {m} to size {n} leads to"):
        verify_consistency(m, n, _mutate(p, which, pos, value), mth(d[:m]), mth(d))


@SETTINGS
@given(size_and_index(), st.integers(min_value=0, max_value=700), salts)
def test_inclusion_at_another_index_is_rejected(nm: tuple[int, int], other: int, salt: int) -> None:
    # Only the index: a proof can verify for a larger claimed size whose tree shape agrees on
    # the path (RFC 6962 roots do not commit to the size; checkpoints do).
    n, m = nm
    d = entries(n, salt)
    assume(other != m)
    with pytest.raises(ProofError):
        verify_inclusion(other, n, leaf_hash(d[m]), path(m, d), mth(d))
