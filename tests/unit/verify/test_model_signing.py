"""verify/model_signing.py: model_signing's statement, read strictly; its root digest.

Known answer: ``model_signing sign key`` (model-signing 1.1.1) over a directory holding
``a.txt`` ("hello\\n") and ``sub/w.bin`` wrote the statement ``KNOWN`` below: resources in path
order, the subject's root digest over their raw digests.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest

from trajledger.verify.errors import FormatError
from trajledger.verify.model_signing import (
    PREDICATE_TYPE,
    ModelSignature,
    diff_model,
    is_ignored,
    root_digest,
)
from trajledger.verify.statement import Statement

A = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"  # sha256("hello\n")
W = "b8a168d1a7683f8eba2f0ee27636dfc037b76b67617823abd5bf41545dd63a29"
KNOWN: dict[str, Any] = {
    "_type": "https://in-toto.io/Statement/v1",
    "subject": [
        {
            "name": "model",
            "digest": {
                "sha256": "165e06cf5f54a5df98be5a6cec489c9c3b5bfb6f642ba3dee169558f5ea4ef3d"
            },
        }
    ],
    "predicateType": "https://model_signing/signature/v1.0",
    "predicate": {
        "resources": [
            {"name": "a.txt", "digest": A, "algorithm": "sha256"},
            {"name": "sub/w.bin", "digest": W, "algorithm": "sha256"},
        ],
        "serialization": {
            "hash_type": "sha256",
            "method": "files",
            "allow_symlinks": False,
            "ignore_paths": ["model.sig", ".gitignore", ".github", ".git", ".gitattributes"],
        },
    },
}


def _read(obj: dict[str, Any]) -> ModelSignature:
    return ModelSignature.from_statement(Statement.from_bytes(json.dumps(obj).encode()))


def test_known_answer() -> None:
    assert hashlib.sha256(b"hello\n").hexdigest() == A
    assert root_digest([A, W]) == KNOWN["subject"][0]["digest"]["sha256"]
    sig = _read(KNOWN)
    assert (sig.name, dict(sig.files), sig.allow_symlinks) == (
        "model",
        {"a.txt": A, "sub/w.bin": W},
        False,
    )
    assert diff_model(sig, {"a.txt": A, "sub/w.bin": W}).ok
    diff = diff_model(sig, {"a.txt": W, "new": A})
    assert (diff.missing, diff.extra) == (("sub/w.bin",), ("new",))
    assert diff.changed == (("a.txt", f"content hashes to sha256:{W}, want sha256:{A}"),)


def test_ignored_paths() -> None:
    ignore = (".git", "model.sig", "logs/")
    assert is_ignored(".git/config", ignore) and is_ignored("model.sig", ignore)
    assert is_ignored("logs/x", ignore) and not is_ignored(".gitignore", ignore)
    assert not is_ignored("model.sig.bak", ignore)


def _mut(path: list[Any], value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(KNOWN)
    target: Any = obj
    for p in path[:-1]:
        target = target[p]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return obj


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (_mut(["predicateType"], "https://model_signing/Digests/v0.1"), "model_signing >= 1.0"),
        (_mut(["predicate", "serialization", "method"], "shards"), "whole-file digests"),
        (_mut(["predicate", "serialization", "hash_type"], "blake3"), "sha256 only"),
        (_mut(["predicate", "serialization", "shard_size"], 1), "unknown field"),
        (_mut(["predicate", "serialization", "ignore_paths"], ["/etc"]), "relative POSIX path"),
        (_mut(["predicate", "resources", 0, "name"], "../escape"), r"'\.\.' segment"),
        (_mut(["predicate", "resources", 1, "name"], "a.txt"), "listed twice"),
        (_mut(["predicate", "resources", 0, "digest"], A.upper()), "64 lowercase hex"),
        (_mut(["predicate", "resources", 0, "algorithm"], "sha512"), "want sha256"),
        (_mut(["predicate", "resources", 0, "size"], 6), "exactly name, algorithm, digest"),
        (_mut(["predicate", "resources"], KeyError), "no resources list"),
        (_mut(["predicate", "serialization"], KeyError), "no serialization"),
        (_mut(["subject", 0, "digest", "sha256"], A), "the resources hash to root"),
        (_mut(["predicate", "resources", 1, "digest"], A), "the resources hash to root"),
    ],
)
def test_refusals(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(FormatError, match=message):
        _read(obj)


def test_two_subjects_are_refused() -> None:
    obj = copy.deepcopy(KNOWN)
    obj["subject"].append({"name": "other", "digest": {"sha256": A}})
    with pytest.raises(FormatError, match="2 subjects, want 1"):
        _read(obj)
    assert KNOWN["predicateType"] == PREDICATE_TYPE
