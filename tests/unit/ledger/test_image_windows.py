"""The windows of image observations (`ledger.image_windows`, img34): a held-out image episode
copied flipped, with its channels in another order or rescaled holds the held windows; unrelated
episodes of one environment (one static background, one start) share none."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pyarrow as pa
import pytest

from trajledger.ledger.image_windows import image_shape, image_steps
from trajledger.ledger.rollouts.schema import SHAPE_KEY, tensor_field
from trajledger.ledger.step_windows import COLUMNS, MAX_COLUMNS, WINDOW, iter_windows

H, W = 24, 20  # not square: a transpose is no flip


def background() -> np.ndarray:
    """The background every episode shares: walls, a textured band, a bar."""
    bg = np.full((H, W, 3), 40, dtype=np.uint8)
    bg[:4] = np.random.default_rng(0).integers(0, 255, size=(4, W, 3))
    bg[:, :1] = bg[:, -1:] = bg[-1:] = 200
    bg[H // 2, W // 4 : 3 * W // 4] = 120
    return bg


def frames(seed: int, n: int = 40) -> np.ndarray:
    """A 3 x 3 sprite's random walk over `background`, from the same cell in every episode."""
    rng = np.random.default_rng(seed)
    out, at = np.repeat(background()[None], n, axis=0), np.array([H // 2 + 2, W // 2])
    for t in range(n):
        out[t, at[0] : at[0] + 3, at[1] : at[1] + 3] = (230, 60, 60)
        at = np.clip(at + rng.integers(-2, 3, size=2), (5, 1), (H - 4, W - 4))
    return out


def batch(episodes: list[tuple[str, np.ndarray]]) -> pa.RecordBatch:
    """Steps of image episodes, their field declaring the frames' shape."""
    ids = [e for e, o in episodes for _ in range(len(o))]
    flat = np.concatenate([o.reshape(len(o), -1) for _, o in episodes])
    typ = pa.from_numpy_dtype(flat.dtype)
    obs = pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel(), typ), flat.shape[1])
    schema = pa.schema([pa.field("episode_id", pa.string()),
                        tensor_field("obs", typ, episodes[0][1].shape[1:])])
    return pa.record_batch([pa.array(ids), obs.cast(pa.list_(typ))], schema=schema)


def columns(*batches: pa.RecordBatch, held: bool = False) -> dict[str, list[int]]:
    """Each episode's `COLUMNS` window hashes."""
    out: dict[str, list[int]] = {}
    for w in iter_windows(batches, held=held):
        if w.order == COLUMNS:
            for e, h in zip(w.episode.tolist(), w.hashes.tolist(), strict=True):
                out.setdefault(w.episode_ids[e], []).append(h)
    return out


COPIES = {
    "flipped left to right": lambda o: o[:, :, ::-1],
    "flipped up and down": lambda o: o[:, ::-1],
    "rotated half a turn": lambda o: o[:, ::-1, ::-1],
    "RGB <-> BGR": lambda o: o[..., ::-1],
    "float32 / 255": lambda o: o.astype(np.float32) / 255,
    "float64 / 255, flipped": lambda o: o[:, :, ::-1].astype(np.float64) / 255,
    "channels first": lambda o: o.transpose(0, 3, 1, 2),
    "channels rotated, first 7 steps dropped": lambda o: o[7:, :, :, [1, 2, 0]],
    # rev32: each frame its own way, transposed or turned, an alpha added, an offset
    "flipped each step its own way": lambda o: np.stack(
        [f[:, ::-1] if k % 3 == 1 else f[::-1] if k % 3 == 2 else f for k, f in enumerate(o)]),
    "transposed (W x H)": lambda o: o.transpose(0, 2, 1, 3),
    "a quarter turn": lambda o: np.rot90(o, axes=(1, 2)),
    "RGBA, a constant alpha": lambda o: np.concatenate(
        (o, np.full((*o.shape[:3], 1), 255, dtype=np.uint8)), axis=3),
    "uint8 + 1": lambda o: o + 1,
    "float32 / 127.5 - 1": lambda o: o.astype(np.float32) / np.float32(127.5) - 1,
    "float32 / 255 - 0.5, a quarter turn back": lambda o: np.rot90(
        o.astype(np.float32) / 255 - np.float32(0.5), axes=(2, 1)),
}


@pytest.mark.parametrize("copy", list(COPIES), ids=list(COPIES))
def test_a_flipped_channel_swapped_or_rescaled_copy_holds_the_held_windows(copy: str) -> None:
    """Every `COLUMNS` window of the copy (train side, cut across record batches or not) is a
    held one of the held episode, none another's; on 3742111 an image (more than
    `MAX_COLUMNS` numbers a step) had none."""
    held = columns(batch([("a", frames(1)), ("b", frames(2))]), held=True)
    assert len(held["a"]) == len(held["b"]) == 40 - WINDOW + 1
    o = COPIES[copy](frames(1))
    whole = columns(batch([("c", o)]))["c"]
    assert len(whole) == len(o) - WINDOW + 1 and set(whole) <= set(held["a"])
    assert not set(whole) & set(held["b"])
    cut = columns(batch([("c", o[:5])]), batch([("c", o[5:20])]), batch([("c", o[20:])]))
    assert cut["c"] == whole


def test_gray_frames_as_rgb_or_padded_with_a_blank_channel_hold_the_held_windows() -> None:
    """A gray episode (H x W) copied as RGB (each channel the gray frame), or with a blank
    channel beside it, channels first: each channel counts once, a constant one not at all
    (rev32; on bc3060a none of the copy's windows was held)."""
    gray = frames(1).mean(axis=3).astype(np.uint8)
    held = columns(batch([("a", gray)]), held=True)["a"]
    for copy in (np.repeat(gray[..., None], 3, axis=3),
                 np.stack((np.zeros_like(gray), gray), axis=1)):
        got = columns(batch([("c", copy)]))["c"]
        assert got == held


def test_colours_whose_values_are_swapped_in_the_picture_are_not_alike() -> None:
    """A red sprite (230, 60, 60) and a blue one (60, 60, 230) on the background every episode
    shares, on the same walk: unrelated frames (the background's colours are not swapped). On
    bc3060a each pixel's channels were summed, so every window of the one was held of the other
    (an unrelated train episode refused as a copy). The same frames with every channel swapped
    (BGR) are still a copy (`COPIES`)."""
    def walk(colour: tuple[int, int, int]) -> np.ndarray:
        o = frames(1)
        o[np.all(o == (230, 60, 60), axis=3)] = colour
        return o

    held = columns(batch([("a", walk((230, 60, 60)))]), held=True)["a"]
    assert not set(held) & set(columns(batch([("c", walk((60, 60, 230)))]))["c"])
    assert not set(held) & set(columns(batch([("c", walk((60, 230, 60)))]))["c"])


def test_an_infinite_depth_sets_no_scale() -> None:
    """Unrelated depth episodes (float32, H x W; infinite where nothing is in range, a region
    that grows with the step in both): on bc3060a a frame was divided by its largest value,
    infinite, so every finite depth read as 0 and only where the infinities are was seen: 17
    of 25 windows shared. Now the largest finite value scales a frame; a NaN is a NaN."""
    rng = np.random.default_rng(3)
    depth = rng.uniform(0.5, 10, size=(2, 40, H, W)).astype(np.float32)
    for t in range(40):
        depth[:, t, : t % 17 + 1] = np.inf
    depth[:, :, -1, -1] = np.nan
    held = columns(batch([("a", depth[0])]), held=True)["a"]
    assert not set(held) & set(columns(batch([("c", depth[1])]))["c"])
    assert columns(batch([("c", depth[0][:, ::-1] * 2)]))["c"] == held


def test_unrelated_image_episodes_share_no_window() -> None:
    """60 held and 60 train episodes of one environment (the same background, the same first
    frame, a sprite's random walk): 0 shared `COLUMNS` windows (25 x 25 window pairs an
    episode pair), whatever flip; the held side holds no window of the sprite standing still
    (fewer than `step_windows.MIN_DISTINCT` distinct steps)."""
    held = columns(batch([(f"h{i}", frames(100 + i)) for i in range(60)]), held=True)
    train = columns(batch([(f"t{i}", frames(200 + i)) for i in range(60)]))
    assert sum(map(len, held.values())) == sum(map(len, train.values())) == 60 * 25
    seen = {h for hs in held.values() for h in hs}
    assert not seen & {h for hs in train.values() for h in hs}
    still = np.repeat(frames(1)[:1], 40, axis=0)
    assert columns(batch([("s", still)]), held=True) == {}
    assert len(columns(batch([("s", still)]))["s"]) == 40 - WINDOW + 1  # the train side's


def test_uint8_and_float32_over_255_round_alike() -> None:
    """For every largest value of a frame (1 to 255) and every value up to it, a uint8 frame
    (hashed by a table of its values) and its float32 / 255 copy (divided by its largest)
    round to the same bits: a quotient of integers to 255 is far from a rounding boundary of
    10 bits of mantissa, so every frame's hashes are alike."""
    top = np.arange(1, 256)
    u8 = np.where(np.arange(16 * 17)[None, :] <= top[:, None], np.arange(16 * 17)[None, :],
                  0).astype(np.uint8).reshape(255, 16, 17)
    got = [image_steps(b.column("obs"), b.schema.field("obs"), MAX_COLUMNS)
           for b in (batch([("e", u8)]), batch([("e", u8.astype(np.float32) / 255)]))]
    assert got[0] is not None and got[1] is not None
    assert np.array_equal(got[0], got[1])


def test_uint8_and_its_common_normalisations_round_alike() -> None:
    """For every largest value of a frame holding a 0 (1 to 255) and every value up to it, a
    uint8 frame and its float32 copies in [-1, 1] (x / 127.5 - 1) and [-0.5, 0.5] (x / 255 -
    0.5, Dreamer's) round to the same bits once the frame's least is taken from every value
    and the rest divided by its range (checked for every least and largest value too:
    /tmp/rev32-m/round.py, 6 of 2,828,800 triples differ, none with a least of 0)."""
    top = np.arange(1, 256)
    u8 = np.where(np.arange(16 * 17)[None, :] <= top[:, None], np.arange(16 * 17)[None, :],
                  0).astype(np.uint8).reshape(255, 16, 17)
    u8[:, 0, 0] = 0
    want = image_steps(*field_of(batch([("e", u8)])))
    for copy in (u8.astype(np.float32) / np.float32(127.5) - 1,
                 u8.astype(np.float32) / 255 - np.float32(0.5)):
        got = image_steps(*field_of(batch([("e", copy)])))
        assert want is not None and got is not None
        assert np.array_equal(want, got)


def field_of(b: pa.RecordBatch) -> tuple[pa.Array, pa.Field, int]:
    """`image_steps`' arguments for the observations of ``b``."""
    return b.column("obs"), b.schema.field("obs"), MAX_COLUMNS


def test_what_is_an_image() -> None:
    """A declared shape of 2 or 3 axes, channels (at most 4) first or last, more than
    `MAX_COLUMNS` numbers; a vector of as many numbers, a shape that is not its width, or a
    shape metadata that is not a list, is none."""
    def field(shape: object) -> pa.Field:
        f = tensor_field("obs", pa.uint8(), (1,))
        return f.with_metadata({SHAPE_KEY: str(shape).encode()} if shape is not None else {})

    assert image_shape(field([84, 84, 4]), 84 * 84 * 4, MAX_COLUMNS) == (84, 84, 4, False)
    assert image_shape(field([4, 84, 84]), 84 * 84 * 4, MAX_COLUMNS) == (84, 84, 4, True)
    assert image_shape(field([84, 84]), 84 * 84, MAX_COLUMNS) == (84, 84, 1, False)
    for shape, width in (([300], 300), ([84, 84, 4], 84 * 84), ([10, 10], 100),
                         ([84, 84, 5], 84 * 84 * 5), ('{"a": 1}', 7056), (None, 7056),
                         ([1, 7056], 7056)):
        assert image_shape(field(shape), width, MAX_COLUMNS) is None, shape


def test_a_null_observation_does_not_turn_the_image_windows_off() -> None:
    """A null observation in a train batch (another episode's, or the copy's own) left the
    whole batch without image windows in this branch's first version, so that one null step
    hid every flipped copy beside it; now only the windows holding the null step differ."""
    held = columns(batch([("a", frames(1))]), held=True)
    b = batch([("c", frames(1)[:, :, ::-1]), ("z", frames(5)[:20])])
    rows = b.column("obs").to_pylist()
    rows[-1] = None  # the other episode's last step
    rows[39] = None  # the copy's last step
    nulls = pa.record_batch([b.column("episode_id"), pa.array(rows, b.column("obs").type)],
                            schema=b.schema)
    got = columns(nulls)
    assert (len(got["c"]), len(got["z"])) == (40 - WINDOW + 1, 20 - WINDOW + 1)
    assert got["c"][:-1] == held["a"][:-1] and got["c"][-1] not in held["a"]


def test_the_memory_of_hashing_frames_is_bounded_by_numbers_not_frames() -> None:
    """256 float32 frames of 128 x 128 x 4 (67 MB): bc3060a hashed 256 frames at once whatever
    their size, 604 MB traced at the peak (9 times the frames: 1024 x 1024 x 3 camera frames
    would need 29 GB); now a bounded count of numbers at once (92 MB)."""
    o = np.random.default_rng(0).integers(0, 255, size=(256, 128, 128, 4), dtype=np.uint8)
    b = batch([("e", o.astype(np.float32) / 255)])
    tracemalloc.start()
    try:
        got = image_steps(*field_of(b))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got is not None and len(got) == 256
    assert peak < 2 * o.size * 4
