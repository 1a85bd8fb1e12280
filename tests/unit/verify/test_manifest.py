"""Manifests: path rules, exact JCS bytes and identity, tree comparison, subject binding."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from trajledger.ledger.encode import envelope_bytes
from trajledger.ledger.keys import Signer
from trajledger.ledger.signing import files_predicate, sign_statement
from trajledger.verify import predicates
from trajledger.verify.dsse import Envelope
from trajledger.verify.errors import DigestMismatchError, FormatError
from trajledger.verify.manifest import (
    MANIFEST_MEDIA_TYPE,
    FileEntry,
    Manifest,
    check_file_subjects,
    check_path,
)
from trajledger.verify.statement import Statement, verify_statement
from trajledger.verify.tree import diff_tree, manifest_from_statement

ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # FIPS 180-2


# --- paths -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["a", "a/b", "a.b/c..d", "...", "a b/\u00e9", ".hidden/x"])
def test_check_path_accepts(path: str) -> None:
    assert check_path(path) == path


@pytest.mark.parametrize(
    ("path", "match"),
    [
        ("", r"must be a non-empty string"),
        (None, r"must be a non-empty string"),
        ("/etc/passwd", r"must be a relative POSIX path"),
        ("a\\b", r"must be a relative POSIX path"),
        ("a\x00b", r"must be a relative POSIX path"),
        ("..", r"'\.\.' segment"),
        ("../a", r"'\.\.' segment"),
        ("a/../../b", r"'\.\.' segment"),
        ("a/..", r"'\.\.' segment"),
        ("./a", r"'\.' or"),
        ("a//b", r"an empty"),
        ("a/", r"an empty"),
    ],
)
def test_check_path_refuses(path: object, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        check_path(path, "p")


# --- bytes and identity ----------------------------------------------------------------------


def test_canonical_bytes_known_answer() -> None:
    m = Manifest.from_files([FileEntry("a.txt", 3, ABC_SHA256, "text/plain")])
    want = (
        b'{"files":[{"digest":{"sha256":"' + ABC_SHA256.encode() + b'"},'
        b'"mediaType":"text/plain","path":"a.txt","size":3}],'
        b'"mediaType":"application/vnd.trajledger.manifest.v1+json"}'
    )
    assert m.canonical_bytes() == want
    # Identity: SHA-256 over exactly those bytes, computed here without trajledger.
    assert m.digest == "sha256:" + hashlib.sha256(want).hexdigest()


def test_from_bytes_takes_the_signed_copy_only_for_its_own_bytes() -> None:
    signed = Manifest.from_files([FileEntry("a.txt", 3, ABC_SHA256, "text/plain"),
                                  FileEntry("b/c", 0, ABC_SHA256)])
    raw = signed.canonical_bytes()
    assert Manifest.from_bytes(raw, signed) is signed  # its JSON, byte for byte: one parse
    assert Manifest.from_bytes(raw) == signed
    # Any other bytes are read as they are, and decide as they would alone: equal in value
    # is not enough (a size 3.0, a repeated key, spaces, another order, another manifest).
    text = raw.decode()
    for other, match in [
        (text.replace('"size":3', '"size":3.0'), "size 3.0 is not an integer"),
        (text.replace('{"files"', '{"mediaType":"x","files"', 1), "duplicate JSON key"),
        (text.replace(",", ", "), None),
        (json.dumps(signed.to_json()), None),
        (text.replace('"size":0', '"size":1'), None),
    ]:
        if match is None:
            got = Manifest.from_bytes(other.encode(), signed)
            assert got is not signed and got == Manifest.from_bytes(other.encode())
        else:
            with pytest.raises(FormatError, match=match):
                Manifest.from_bytes(other.encode(), signed)



@pytest.mark.parametrize("name", ["a.txt", "é/ü", 'q"uote', "tab\tx", "日本/x", "\U0001f600",
                                  "ctl\x01"])
def test_from_bytes_takes_the_signed_copy_for_json_dumps_bytes(name: str) -> None:
    """The signed copy's JSON, written out directly, is ``json.dumps`` of it (sorted keys, no
    spaces, ASCII escapes), byte for byte, whatever a path or media type holds."""
    signed = Manifest.from_files([FileEntry(name, 7, ABC_SHA256, f"text/{name}\\"),
                                  FileEntry("z", 2**53 - 1, ABC_SHA256)])
    raw = json.dumps(signed.to_json(), sort_keys=True, separators=(",", ":")).encode()
    assert Manifest.from_bytes(raw, signed) is signed
    assert Manifest.from_bytes(raw.replace(b'"size":7', b'"size":8'), signed) is not signed


def test_from_files_sorts_by_path() -> None:
    m = Manifest.from_files([FileEntry("b", 1, ABC_SHA256), FileEntry("a/z", 1, ABC_SHA256)])
    assert [f.path for f in m.files] == ["a/z", "b"]


def test_sort_is_by_code_point_not_utf16() -> None:
    # U+FF61 < U+1F600 by code point (and UTF-8 bytes); UTF-16 would put the emoji first.
    m = Manifest.from_files(
        [FileEntry("\U0001f600", 1, ABC_SHA256), FileEntry("\uff61", 1, ABC_SHA256)]
    )
    assert [f.path for f in m.files] == ["\uff61", "\U0001f600"]


@pytest.mark.parametrize(
    ("files", "match"),
    [
        ([FileEntry("a", 1, ABC_SHA256), FileEntry("a", 2, ABC_SHA256)], r"'a' appears twice"),
        ([FileEntry("a", 1, ABC_SHA256), FileEntry("a/b", 1, ABC_SHA256)], r"file and a dir"),
        ([FileEntry("../a", 1, ABC_SHA256)], r"'\.\.' segment"),
        ([FileEntry("a", -1, ABC_SHA256)], r"size -1 is not an integer in \[0, 2\^53\)"),
        ([FileEntry("a", 2**53, ABC_SHA256)], r"size 9007199254740992 is not an integer"),
        ([FileEntry("a", 1, ABC_SHA256.upper())], r"sha256 is not 64 lowercase hex"),
        ([FileEntry("a", 1, ABC_SHA256, "")], r"mediaType must be a non-empty string"),
    ],
)
def test_from_files_refuses(files: list[FileEntry], match: str) -> None:
    with pytest.raises(FormatError, match=match):
        Manifest.from_files(files)


def test_from_json_refuses_unsorted_and_keeps_order_otherwise() -> None:
    entries = [FileEntry("b", 1, ABC_SHA256).to_json(), FileEntry("a", 1, ABC_SHA256).to_json()]
    with pytest.raises(FormatError, match=r"paths not sorted \('b' before 'a'\)"):
        Manifest.from_json({"mediaType": MANIFEST_MEDIA_TYPE, "files": entries})
    ok = Manifest.from_json({"mediaType": MANIFEST_MEDIA_TYPE, "files": entries[::-1]})
    assert [f.path for f in ok.files] == ["a", "b"]


def test_names_and_sizes_are_bound() -> None:
    """Renaming or resizing a file changes the artifact identity (model_signing binds neither)."""
    base = Manifest.from_files([FileEntry("a", 3, ABC_SHA256)]).digest
    assert Manifest.from_files([FileEntry("b", 3, ABC_SHA256)]).digest != base
    assert Manifest.from_files([FileEntry("a", 4, ABC_SHA256)]).digest != base
    assert Manifest.from_files([FileEntry("a", 3, ABC_SHA256, "text/plain")]).digest != base


def test_accessors() -> None:
    m = Manifest.from_files([FileEntry("a", 3, ABC_SHA256), FileEntry("b", 4, ABC_SHA256)])
    assert m.total_size == 7
    assert m.by_path()["b"].digest == "sha256:" + ABC_SHA256
    assert Manifest.from_json(m.to_json()) == m


# --- comparing a tree ------------------------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, bytes]) -> dict[str, Path]:
    out = {}
    for name, data in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        out[name] = p
    return out


def _manifest_of(files: dict[str, bytes]) -> Manifest:
    return Manifest.from_files(
        [FileEntry(n, len(b), hashlib.sha256(b).hexdigest()) for n, b in files.items()]
    )


def test_diff_tree_match(tmp_path: Path) -> None:
    files = {"a": b"abc", "d/b": b"", "d/c": b"x" * 3_000_000}
    diff = diff_tree(_manifest_of(files), _tree(tmp_path, files), workers=2)
    assert diff.ok and diff.problems() == []
    diff.raise_if_failed()


def test_diff_tree_reports_every_problem(tmp_path: Path) -> None:
    signed = {"a": b"abc", "b": b"bbb", "c": b"ccc", "gone": b"1"}
    present = {"a": b"abc", "b": b"bbbb", "c": b"cCc", "new": b"2"}
    diff = diff_tree(_manifest_of(signed), _tree(tmp_path, present))
    assert diff.missing == ("gone",)
    assert diff.extra == ("new",)
    assert diff.changed == (
        ("b", "size 4, want 3"),
        ("c", f"content hashes to sha256:{hashlib.sha256(b'cCc').hexdigest()}, "
              f"want sha256:{hashlib.sha256(b'ccc').hexdigest()}"),
    )
    with pytest.raises(DigestMismatchError, match=r"^tree: 4 problem\(s\)\ngone: missing\n"):
        diff.raise_if_failed("tree")


def test_diff_tree_file_vanished(tmp_path: Path) -> None:
    files = {"a": b"abc"}
    diff = diff_tree(_manifest_of(files), {"a": tmp_path / "not-there"})
    assert diff.missing == ("a",)


# --- binding to a signed statement -----------------------------------------------------------


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate("vendor")


def _signed_statement(signer: Signer, subject_digest: str, manifest_json: object) -> Statement:
    env = sign_statement(
        [("dataset", subject_digest)], predicates.FILES, {"manifest": manifest_json}, [signer]
    )
    env = Envelope.from_bytes(envelope_bytes(env))
    return verify_statement(
        env, [signer.public], allowed_predicate_types={predicates.FILES}
    ).statement


def test_manifest_from_statement(signer: Signer) -> None:
    m = _manifest_of({"a": b"abc"})
    ptype, predicate = files_predicate(m)
    assert ptype == predicates.FILES
    st = _signed_statement(signer, m.digest, predicate["manifest"])
    assert manifest_from_statement(st) == m


def test_attack_manifest_not_bound_to_subject(signer: Signer) -> None:
    """The signer names artifact X and lists the files of artifact Y."""
    listed = _manifest_of({"a": b"evil"})
    named = _manifest_of({"a": b"abc"})
    st = _signed_statement(signer, named.digest, listed.to_json())
    with pytest.raises(
        DigestMismatchError,
        match=rf"st: manifest hashes to {listed.digest}, but the first subject \(the "
        rf"artifact\) is {named.digest}",
    ) as e:
        manifest_from_statement(st, "st")
    assert e.value.observed == listed.digest


def test_attack_manifest_bound_to_a_later_subject(signer: Signer) -> None:
    """The manifest hashes to a later subject (a part), not to the artifact: refused, and so is
    a later subject that names a file the manifest does not bind."""
    m = _manifest_of({"a": b"abc"})
    other = _manifest_of({"b": b"xyz"})
    env = sign_statement([("x", other.digest), ("y", m.digest)], predicates.FILES,
                         {"manifest": m.to_json()}, [signer])  # fmt: skip
    st = verify_statement(Envelope.from_bytes(envelope_bytes(env)), [signer.public],
                          allowed_predicate_types={predicates.FILES}).statement  # fmt: skip
    with pytest.raises(DigestMismatchError, match="but the first subject"):
        manifest_from_statement(st, "st")
    env = sign_statement([("x", m.digest), ("a", "sha256:" + "0" * 64)], predicates.FILES,
                         {"manifest": m.to_json()}, [signer])  # fmt: skip
    st = verify_statement(Envelope.from_bytes(envelope_bytes(env)), [signer.public],
                          allowed_predicate_types={predicates.FILES}).statement  # fmt: skip
    assert manifest_from_statement(st) == m
    with pytest.raises(DigestMismatchError, match=r"subject 'a' has sha256:0{64}, the manifest"):
        check_file_subjects(st, m, "st")
    env = sign_statement([("x", m.digest), ("zz", m.files[0].digest)], predicates.FILES,
                         {"manifest": m.to_json()}, [signer])  # fmt: skip
    st = verify_statement(Envelope.from_bytes(envelope_bytes(env)), [signer.public],
                          allowed_predicate_types={predicates.FILES}).statement  # fmt: skip
    with pytest.raises(DigestMismatchError, match=r"subject 'zz' is not a file of the artifact"):
        check_file_subjects(st, m, "st")
    env = sign_statement([("x", m.digest), ("a", m.files[0].digest)], predicates.FILES,
                         {"manifest": m.to_json()}, [signer])  # fmt: skip
    st = verify_statement(Envelope.from_bytes(envelope_bytes(env)), [signer.public],
                          allowed_predicate_types={predicates.FILES}).statement  # fmt: skip
    assert check_file_subjects(st, m, "st") == 1


def test_attack_path_traversal_in_manifest(signer: Signer) -> None:
    """A signed manifest naming '../../.bashrc': refused before any path is used."""
    m = _manifest_of({"a": b"abc"}).to_json()
    m["files"][0]["path"] = "../../.bashrc"
    st = _signed_statement(signer, "sha256:" + ABC_SHA256, m)
    with pytest.raises(FormatError, match=r"file 0 path: '\.\./\.\./\.bashrc' has an empty"):
        manifest_from_statement(st)


def test_statement_without_manifest(signer: Signer) -> None:
    st = _signed_statement(signer, "sha256:" + ABC_SHA256, None)
    with pytest.raises(FormatError, match=r"predicate has no manifest"):
        manifest_from_statement(st)
