"""Episode features (``ledger/episode_features.py``), white-box: its sketch span
(``_SKETCH_BLOCK``) made small, so that an episode longer than a span is cut into spans counted
from its first step, whatever the record batches it arrives in; and a known answer: the features
of a fixed table, bit for bit, as the definitions gave them before their kernels were made
faster. The properties of the features (equal when computed again from the stored bytes) are in
tests/property/test_features_props.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from trajledger.ledger import episode_features
from trajledger.ledger.episode_features import FeatureChunk, iter_step_features


def test_long_episodes_are_sketched_in_spans_from_their_first_step(monkeypatch: Any) -> None:
    # An episode longer than a sketch span gets the same vector whatever the record batches.
    monkeypatch.setattr(episode_features, "_SKETCH_BLOCK", 256)
    rng = np.random.default_rng(1)
    n = 1000
    t = pa.table({
        "episode_id": ["long"] * 900 + ["short"] * 100,
        "step": pa.array(np.r_[np.arange(900), np.arange(100)], pa.int64()),
        "obs": pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=n * 5)), 5),
        "reward": rng.normal(size=n),
    })  # fmt: skip
    whole = FeatureChunk.concat(list(iter_step_features([t])))
    for size in (1, 97, 256, 512):
        cut = FeatureChunk.concat(list(iter_step_features(t.to_batches(max_chunksize=size))))
        assert np.array_equal(whole.vectors, cut.vectors), size
    assert whole.valid.all()


def _reference_hash(token: bytes) -> int:
    """token_hashes' definition, one token in Python: SplitMix64(poly(bytes) xor len * golden)."""
    mask = (1 << 64) - 1
    h = 0
    for b in token:
        h = (h * 0x100000001B3 + b) & mask
    z = (h ^ (len(token) * 0x9E3779B97F4A7C15 & mask)) + 0x9E3779B97F4A7C15 & mask
    z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9 & mask
    z = (z ^ z >> 27) * 0x94D049BB133111EB & mask
    return z ^ z >> 31


def test_token_hashes_follow_their_definition_token_by_token() -> None:
    rng = np.random.default_rng(5)
    tokens = [
        "a",
        "Z",
        "é",
        "中文",
        "x" * 5000,
        "_9",
        *(
            "".join(chr(c) for c in rng.integers(33, 0x3000, rng.integers(1, 40)))
            for _ in range(200)
        ),
    ]
    got = episode_features.token_hashes(pa.array(tokens).slice(1))
    assert got.tolist() == [_reference_hash(t.encode()) for t in tokens[1:]]


def test_words_of_ascii_text_are_those_of_the_regular_expression() -> None:
    """The byte-wise word split of ASCII text (the fast path) gives the words, hashes and texts
    of the Arrow kernels (utf8_lower, split on WORD_SPLIT), also for empty texts, nulls filled,
    texts of separators only, and a sliced array."""
    rng = np.random.default_rng(6)
    alphabet = np.array(list("aZq_09 .,-\n\t!'\"/"))
    for _ in range(300):
        n = int(rng.integers(1, 12))
        texts = ["".join(rng.choice(alphabet, rng.integers(0, 25))) for _ in range(n)]
        arr = pa.array(texts, pa.string()).slice(int(rng.integers(0, n)))
        offsets, data = episode_features.string_parts(arr)
        h1, of1 = episode_features._words_arrow(arr)
        h2, of2 = episode_features._words_ascii(offsets, data)
        assert h1.tolist() == h2.tolist(), texts
        assert of1.tolist() == of2.tolist(), texts


def test_text_vectors_take_the_arrow_path_for_text_beyond_ascii() -> None:
    """A text with a non-ASCII letter is split by the Unicode classes: 'naïve' is one word."""
    rows = np.zeros(1, np.int64)
    accented, _ = episode_features.text_vectors(pa.array(["naïve naïve"]), rows, 1)
    split, _ = episode_features.text_vectors(pa.array(["na ve na ve"]), rows, 1)
    whole, _ = episode_features.text_vectors(pa.array(["naive naive"]), rows, 1)
    assert np.count_nonzero(accented) <= 2  # one word and one bigram
    assert not np.array_equal(accented, split)
    assert not np.array_equal(accented, whole)


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


@pytest.mark.parametrize("text_slice", [episode_features.TEXT_SLICE, 300])
def test_features_of_a_fixed_table_are_the_known_answer(text_slice: int, monkeypatch: Any) -> None:
    """Every feature of a fixed table (fingerprints, modality, vectors bit for bit, validity,
    safety sums), whatever the record batches and text slices (small ones: some slices are all
    ASCII, split byte-wise, others not, split by Arrow's kernels), hashes to the value the
    definitions gave before their fast paths were rewritten (issue 21): a faster kernel must
    not change one bit. A change of the definitions bumps FEATURE_VERSION and this answer."""
    import hashlib

    monkeypatch.setattr(episode_features, "TEXT_SLICE", text_slice)
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


def test_finite_values_whose_sum_overflows_fold_as_the_general_path() -> None:
    # Finite float64 values whose sum overflows take the path for NaN and infinities; they once
    # came back to it without end (RecursionError). They fold as the general path folds them.
    values = np.array([[1e308, 1e308, 1.0], [-1e308, 2.0, 3.0]])
    fixed = pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), 3)
    got = episode_features.fold(fixed, 2, 2)
    want = episode_features._fold_any(fixed.cast(pa.list_(pa.float64())), 2, 2)
    assert np.array_equal(got, want)
    t = pa.table({"episode_id": ["a", "a"], "step": pa.array([0, 1], pa.int64()), "obs": fixed})
    (chunk,) = iter_step_features([t])
    assert chunk.modality == ["numeric"]


def test_numeric_vectors_in_place_are_those_of_a_copy() -> None:
    # The recording forms the signed values in its scratch array (overwrite): the same
    # vectors, bit for bit, as from an untouched array; episodes of one length and of many.
    rng = np.random.default_rng(5)
    for lengths in ([1000] * 40, [200] * 90 + [7], [3, 17000, 5]):
        lens = np.array(lengths, dtype=np.int64)
        starts = np.cumsum(lens) - lens
        x = rng.normal(size=(int(lens.sum()), 21))
        want = episode_features.numeric_vectors(x.copy(), starts, lens)
        got = episode_features.numeric_vectors(x, starts, lens, overwrite=True)
        assert got[0].tobytes() == want[0].tobytes()
        assert np.array_equal(got[1], want[1])


@pytest.mark.parametrize("steps", [1, 7, 250])
def test_numeric_episodes_sketched_in_slices_are_those_of_the_whole(
    steps: int, monkeypatch: Any
) -> None:
    # Numeric episodes are folded and sketched a slice of about NUMERIC_SLICE steps at a time
    # (whole episodes; a longer one alone), through one scratch array: the same vectors, bit
    # for bit, as with every row at once, among chat episodes, NaNs and an infinity.
    t = _known_steps()
    whole = FeatureChunk.concat(list(iter_step_features([t])))
    monkeypatch.setattr(episode_features, "NUMERIC_SLICE", steps)
    sliced = FeatureChunk.concat(list(iter_step_features([t])))
    assert sliced.vectors.tobytes() == whole.vectors.tobytes()
    assert np.array_equal(sliced.valid, whole.valid)
    assert sliced.fingerprints == whole.fingerprints
