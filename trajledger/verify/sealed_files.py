"""A sealed rollout batch's stored ciphertexts, against its manifest: loaded only for one.

Scope: `ciphertexts`, which blob holds each file of a sealed batch (``sealed`` of
rollout-batch/v1: the store keeps only ciphertexts, bound by the signed predicate) and whether
each ciphertext's size is the sealing's for its plaintext's size. A lineage that holds no sealed
batch (a checkpoint's: sealed suites are never trained on) never loads it.
Non-scope: the ``sealed`` format (``verify.predicates.Sealed``), sealing and unsealing
(``ledger.sealing``), re-hashing the ciphertexts (``verify.blobs``).
Spec: schemas/SPEC.md, section "Sealed suites".
"""

from __future__ import annotations

from .manifest import Manifest
from .predicates import Sealed
from .report import Node

__all__ = ["ciphertexts"]


def ciphertexts(manifest: Manifest, sealed: Sealed, node: Node) -> dict[str, tuple[str, int]]:
    """Each manifest file's stored blob (digest, size): for a sealed batch its ciphertext, whose
    size must be the sealing's for the plaintext size (`Sealed.ciphertext_size`). A file the
    sealing does not list has none (the ``sealed`` check of ``node`` fails)."""
    paths = {f.path for f in manifest.files}
    if set(sealed.files) != paths:
        node.fail("sealed", f"seals {sorted(sealed.files)}, the manifest lists {sorted(paths)}")
    out = {}
    for f in manifest.files:
        if f.path in sealed.files:
            digest, size = sealed.files[f.path]
            if size != Sealed.ciphertext_size(f.size):
                node.fail(f.path, f"sealed: ciphertext of {size} bytes for {f.size} plaintext "
                          f"bytes, want {Sealed.ciphertext_size(f.size)}")
            out[f.path] = (digest, size)
    return out
