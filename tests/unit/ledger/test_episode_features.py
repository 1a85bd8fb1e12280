"""Episode features (``ledger/episode_features.py``): a known answer, the features of a fixed
table, bit for bit, as the definitions gave them before their kernels were made faster, whatever
the record batches and the slices the work is cut into. The kernels' white-box tests are in
tests/unit/ledger/test_episode_vectors.py; the properties of the features (equal when computed
again from the stored bytes) in tests/property/test_features_props.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from trajledger.ledger import episode_features, episode_vectors
from trajledger.ledger.episode_features import FeatureChunk, iter_step_features


def _known_steps() -> pa.Table:
    """A fixed step table of every kind the features tell apart: chat episodes (ASCII and
    accented text, empty and null content, tool calls and results, system and assistant turns,
    an episode of system text only) and numeric ones (obs float32[17] folded past 16 slots, a
    NaN and an infinity, action float32[6], rewards), with safety interventions here and there."""
    rng = np.random.default_rng(21)
    words = ["fetch", "the", "Page", "tool_1", "x", "Summarise", "what", "it", "found", "42"]
    ids: list[str] = []
    role: list[str | None] = []
    content: list[str | None] = []
    calls: list[str | None] = []
    results: list[str | None] = []
    for e in range(40):
        n = int(rng.integers(1, 7))
        for s in range(n):
            ids.append(f"chat-{e}")
            r = ["system", "user", "assistant", "tool"][(s + e) % 4] if e % 9 else "system"
            role.append(r)
            k = int(rng.integers(0, 12))
            text = " ".join(rng.choice(words, k)) + (" naïve" if e % 7 == 3 else "")
            content.append(None if k == 0 else text + ("." if k % 2 else ""))
            call = '{"name":"fetch","arguments":"{}"}'
            calls.append(call if r == "assistant" and k % 3 else None)
            results.append('{"tool_call_id":"c1"}' if r == "tool" else None)
    chat = len(ids)
    lengths = [int(rng.integers(1, 300)) for _ in range(12)]
    for e, n in enumerate(lengths):
        ids += [f"num-{e}"] * n
    numeric = len(ids) - chat
    obs = rng.normal(size=(numeric, 17)).astype(np.float32)
    obs[5, 3], obs[9, 16] = np.nan, np.inf
    action = rng.normal(size=(numeric, 6)).astype(np.float32)
    steps = np.concatenate([np.arange(n) for n in [ids.count(i) for i in dict.fromkeys(ids)]])
    none = [None] * numeric
    return pa.table({
        "episode_id": pa.array(ids),
        "step": pa.array(steps, pa.int64()),
        "obs": pa.array([None] * chat + list(obs), pa.list_(pa.float32())),
        "action": pa.array([None] * chat + list(action), pa.list_(pa.float32())),
        "reward": pa.array(rng.normal(size=len(ids))),
        "terminated": pa.array(rng.integers(0, 2, len(ids)).astype(bool)),
        "truncated": pa.array(np.zeros(len(ids), bool)),
        "role": pa.array(role + none, pa.string()),
        "content": pa.array(content + none, pa.string()),
        "tool_calls": pa.array(calls + none, pa.string()),
        "tool_results": pa.array(results + none, pa.string()),
        "safety_interventions": pa.array(
            [int(v) if v < 3 else None for v in rng.integers(0, 6, len(ids))], pa.int64()
        ),
    })  # fmt: skip


@pytest.mark.parametrize("text_slice", [episode_vectors.TEXT_SLICE, 300])
def test_features_of_a_fixed_table_are_the_known_answer(text_slice: int, monkeypatch: Any) -> None:
    """Every feature of a fixed table (fingerprints, modality, vectors bit for bit, validity,
    safety sums), whatever the record batches and text slices (small ones: some slices are all
    ASCII, split byte-wise, others not, split by Arrow's kernels), hashes to the value the
    definitions gave before their fast paths were rewritten (issue 21): a faster kernel must
    not change one bit. A change of the definitions bumps FEATURE_VERSION and this answer."""
    import hashlib

    monkeypatch.setattr(episode_features, "TEXT_SLICE", text_slice)  # where texts are sliced
    t = _known_steps()
    for size in (t.num_rows, 97, 5):
        got = FeatureChunk.concat(list(iter_step_features(t.to_batches(max_chunksize=size))))
        h = hashlib.sha256()
        for part in (got.episode_ids, got.fingerprints, got.modality, got.safety):
            h.update(repr(part).encode())
        h.update(got.num_steps.tobytes() + got.vectors.tobytes() + got.valid.tobytes())
        assert (episode_features.FEATURE_VERSION, h.hexdigest()) == (
            3,
            "8590b32ea890b8d4e407121f802e61caf8e73fc18cc6117952accb597b956a20",
        ), size


@pytest.mark.parametrize("steps", [1, 7, 250])
def test_numeric_episodes_sketched_in_slices_are_those_of_the_whole(
    steps: int, monkeypatch: Any
) -> None:
    # Numeric episodes are folded and sketched a slice of about NUMERIC_SLICE steps at a time
    # (whole episodes; a longer one alone), through one scratch array: the same vectors, bit
    # for bit, as with every row at once, among chat episodes, NaNs and an infinity.
    t = _known_steps()
    whole = FeatureChunk.concat(list(iter_step_features([t])))
    monkeypatch.setattr(episode_vectors, "NUMERIC_SLICE", steps)
    sliced = FeatureChunk.concat(list(iter_step_features([t])))
    assert sliced.vectors.tobytes() == whole.vectors.tobytes()
    assert np.array_equal(sliced.valid, whole.valid)
    assert sliced.fingerprints == whole.fingerprints
