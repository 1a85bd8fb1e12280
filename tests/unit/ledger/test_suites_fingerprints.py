"""Unsealing checks a sealed batch's published normalised text fingerprints against its data
(`suites._check_fingerprints`): a producer cannot publish another to slip a chat past the
gate, and a record made before they were published (none) is still read."""

from __future__ import annotations

import dataclasses
import io
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajledger.ledger.episode_features import FEATURE_VERSION
from trajledger.ledger.sealing import fingerprints
from trajledger.ledger.suites import _check_fingerprints
from trajledger.verify.errors import DigestMismatchError
from trajledger.verify.sealed_files import Sealed


def steps() -> bytes:
    table = pa.table({"episode_id": ["c", "c"], "step": [0, 1], "role": ["user", "assistant"],
                      "content": ["Translate: the cat sat", "Le chat"], "reward": [0.0, 1.0]})
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def test_a_false_normalised_fingerprint_is_caught_when_unsealed() -> None:
    data = steps()
    [episode] = fingerprints(data)
    assert episode.normalised is not None and episode.modality == "text"

    def check(normalised: str | None) -> None:
        sealed = Sealed((), {}, (dataclasses.replace(episode, normalised=normalised),),
                        FEATURE_VERSION)
        pred: Any = SimpleNamespace(sealed=sealed)
        _check_fingerprints("sha256:" + "11" * 32, pred, {"steps.parquet": data})

    check(episode.normalised)
    check(None)  # sealed before it was published
    with pytest.raises(DigestMismatchError, match="episode c: its normalised fingerprint "
                                                  "differs"):
        check("00" * 32)
