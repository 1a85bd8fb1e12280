"""Windows of image observations that a flipped, turned, channel-swapped or rescaled copy keeps
(img34, rev32).

Scope: `image_steps` (per step of an image observation column, one hash of its frame: the
least of its `TRANSFORMS` forms' hashes, flipped left to right, up and down, turned, transposed)
and `image_windows` (per window of `step_windows.WINDOW` steps, its steps' polynomial: a copy
whose frames are each flipped or turned its own way keeps it). An observation is an image when
its field declares a shape ``H x W``, ``H x W x C`` or ``C x H x W`` (C at most
`MAX_CHANNELS`: RGB, RGBA, a stack of 4 grayscale frames) of more than
`step_windows.MAX_COLUMNS` numbers, which have no `COLUMNS` windows of their own: these take
their place (order `step_windows.COLUMNS`, a hash's low bit 0). A frame's hash in a form is
the sum of its channels' hashes there, each channel hashed over its pixels in place (a pixel's
multiplier its row's times its column's in that form), so that the channels in another order
(RGB <-> BGR, a frame stack reversed, channels first or last) keep it while a red sprite and a
blue one on one background differ (rev32: img34 summed each pixel's channels, a colour's values
in any order alike); a channel repeated counts once and one constant over the frame not at all
(gray as RGB, a constant alpha, a stack padded with blank frames). Each value first has its
frame's least finite value taken from it and is divided by the frame's finite range (over the
channels that are not constant), so that a copy scaled and offset by constants (uint8 ->
float32 / 255, to [-1, 1], Dreamer's / 255 - 0.5) keeps it: for integer values to 255 such a
quotient is far from a rounding boundary of `step_windows`' 10-bit mantissa, so both sides round
alike (all pairs with a least of 0; 6 of 2.8 million triples otherwise), and an infinite depth
sets no scale. Two frames share a hash only when one is the other so changed, as exact as a
step of order 0 otherwise, so that the background every episode of an environment shares
matches nothing by itself.
Non-scope: crops, pads, resizes, grayscale conversion, frame stacking, a dropped colour channel,
clipped brightness and JPEG (each moves, mixes or loses pixels: not found, docs/SECURITY.md,
nineteenth round (img34), twentieth (rev32)); images without a declared shape (a flat vector);
comparing (``contamination_matcher``).
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .episode_vectors import splitmix64
from .rollouts.schema import tensor_shape

__all__ = ["MAX_CHANNELS", "TRANSFORMS", "image_shape", "image_steps", "image_windows"]

MAX_CHANNELS = 4
"""The most channels an image's first or last axis may have (RGBA, 4 stacked frames)."""
TRANSFORMS = 8
"""A frame's forms (`image_steps`): as it is, flipped left to right, up and down, both (a half
turn), and transposed then each of those (a quarter turn either way, a transpose, the other
diagonal's): its least hash is the frame's (a frame and its transpose hash alike, `_forms`)."""
_U64 = np.uint64
_SALT = _U64(0x8CB92BA72F3D8DD7)
_WINDOW_SALT = _U64(0xA0761D6478BD642F)
_FRAME_SALT = _U64(0xE7037ED1A0B428DB ^ 0x8EBC6AF09C88C6E3)
_NULL = _U64(0xE7037ED1A0B428DB)  # a null step's hash
_NAN = np.uint32(0x7FC00000)  # every NaN, whatever its payload
_POLY = _U64(0x100000001B3)
_ROUND = np.uint32(1 << 12)  # as `step_windows`: float32 rounded to 10 bits of mantissa
_KEEP = np.uint32(0xFFFFE000)
_VALUES = 1 << 21  # numbers hashed at once (a frame at least): bounded memory, ~80 bytes each


def image_shape(field: pa.Field, width: int, least: int) -> tuple[int, int, int, bool] | None:
    """``(H, W, C, channels first)`` of an image field (its declared shape) of ``width``
    numbers a step, more than ``least``; None for any other field."""
    try:
        shape = tensor_shape(field)
    except ValueError:
        return None
    if shape is None or width <= least or not 2 <= len(shape) <= 3:
        return None
    first = len(shape) == 3 and shape[-1] > MAX_CHANNELS and shape[0] <= MAX_CHANNELS
    c = shape[2] if len(shape) == 3 else 1
    h, w, c = (shape[1], shape[2], shape[0]) if first else (shape[0], shape[1], c)
    if min(h, w) < 2 or c > MAX_CHANNELS or h * w * c != width:
        return None
    return h, w, c, first


def _tensor_width(obs: pa.Array) -> int | None:
    """The one length of a list column of numbers (its rows not null), else None."""
    t = obs.type
    if not len(obs) or not (
            pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        return None
    v = t.value_type
    if not (pa.types.is_integer(v) or pa.types.is_floating(v)):
        return None
    bounds = pc.min_max(pc.list_value_length(obs)).as_py()
    return int(bounds["min"]) if bounds["min"] == bounds["max"] else None


def _factors(n: int) -> npt.NDArray[np.uint64]:
    """The odd multipliers of the ``n`` rows (or columns) of a frame ``n`` high (wide), and
    of the same reversed: ``(n, 2)``."""
    with np.errstate(over="ignore"):
        f = splitmix64(np.arange(n, dtype=np.uint64) + _U64(n << 32) + _SALT) | _U64(1)
    return np.stack([f, f[::-1]], axis=1)


def _forms(mixed: npt.NDArray[np.uint64], h: int, w: int) -> npt.NDArray[np.uint64]:
    """The hashes of each channel of frames ``(n, c, h * w)`` as they are, flipped left to
    right, up and down, and both: ``(n, c, 4)``. A pixel's multiplier is its row's times its
    column's, of one rule for rows and columns (`_factors` of the frame's height and width), so
    that a frame and its transpose hash alike: the four are the eight forms' (`TRANSFORMS`)."""
    with np.errstate(over="ignore"):
        by_row = mixed.reshape(*mixed.shape[:2], h, w) @ _factors(w)  # (n, c, h, 2)
        both = np.swapaxes(by_row, -1, -2) @ _factors(h)  # (n, c, 2 columns', 2 rows')
    return both.reshape(*mixed.shape[:2], 4)


def image_steps(obs: pa.Array, field: pa.Field, least: int) -> npt.NDArray[np.uint64] | None:
    """Per step of an image observation column (`image_shape` of ``field``, more than ``least``
    numbers a step), its frame's hash: the least over its forms (`TRANSFORMS`) of the sum of
    its channels' hashes, each channel once (one repeated counts once, one that is constant
    over the frame not at all: gray as RGB, RGBA with a constant alpha, a stack padded with
    blank frames); None when it is no image."""
    valid = None
    if obs.null_count:  # a null step hashes as none other: the other steps keep their windows
        valid = np.asarray(obs.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        obs = obs.filter(pa.array(valid))
    width = _tensor_width(obs)
    shape = None if width is None else image_shape(field, width, least)
    if shape is None:
        return None
    h, w, c, first = shape
    n = len(obs)
    values = pc.list_flatten(obs)
    small = pa.types.is_uint8(values.type)  # by a table of its 256 values a frame
    if not (small or pa.types.is_floating(values.type)) or values.type == pa.float16():
        values = values.cast(pa.float64())
    flat = np.asarray(values.to_numpy(zero_copy_only=False)).reshape(n, -1)
    out = np.empty(n, dtype=np.uint64)
    rows = max(1, _VALUES // (h * w * c))
    for lo in range(0, n, rows):
        x = flat[lo : lo + rows]
        x = x.reshape(len(x), c, h * w) if first else np.ascontiguousarray(np.swapaxes(
            x.reshape(len(x), h * w, c), 1, 2))
        if not small:
            x = x.astype(np.float64)
        steady, low, span = _bounds(x)
        mixed = _uint8_mixed(x, low, span) if small else _mixed(x, low, span)
        hashes = _forms(mixed, h, w)
        once = ~steady
        for k in range(1, c):  # a channel equal to an earlier one counts once
            once[:, k] &= ~np.any(hashes[:, :k, 0] == hashes[:, k : k + 1, 0], axis=1)
        with np.errstate(over="ignore"):
            summed = (splitmix64(hashes ^ _SALT) * once[..., None]).sum(axis=1, dtype=np.uint64)
            out[lo : lo + len(x)] = splitmix64(summed.min(axis=1) ^ _FRAME_SALT)
    if valid is None:
        return out
    every = np.full(len(valid), _NULL, dtype=np.uint64)
    every[valid] = out
    return every


def _bounds(x: npt.NDArray[np.generic]) -> tuple[
        npt.NDArray[np.bool_], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Of frames ``(n, c, pixels)``: which channels are constant over their frame (a constant
    alpha is no part of the picture), and each frame's least finite value over the others and
    its largest finite value less that (an infinite depth sets no scale); 0 and 0 for a frame
    of constant channels only."""
    lo, hi = x.min(axis=2).astype(np.float64), x.max(axis=2).astype(np.float64)
    steady = lo == hi  # NaN in a channel: neither
    odd = np.flatnonzero(~np.all(np.isfinite(lo) & np.isfinite(hi), axis=1))
    if len(odd):  # frames with an infinity or a NaN: their finite values' bounds
        y = x[odd]
        finite = np.isfinite(y)
        lo[odd] = np.where(finite, y, np.inf).min(axis=2)
        hi[odd] = np.where(finite, y, -np.inf).max(axis=2)
        steady[odd] = (lo[odd] == hi[odd]) & finite.all(axis=2)
    least = np.where(steady, np.inf, lo).min(axis=1)
    most = np.where(steady, -np.inf, hi).max(axis=1)
    some = np.isfinite(least) & np.isfinite(most)
    return steady, np.where(some, least, 0.0), np.where(some, most - least, 0.0)


def _mixed(x: npt.NDArray[np.float64], lo: npt.NDArray[np.float64],
           top: npt.NDArray[np.float64]) -> npt.NDArray[np.uint64]:
    """Each value of frames ``x`` (a frame a row, any shape after) less its frame's least,
    ``lo``, divided by its frame's range, ``top`` (none when that is not above 0), rounded as
    `step_windows` rounds, mixed; infinities as they are, every NaN alike."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        shape = (-1, *([1] * (x.ndim - 1)))
        x = (x - lo.reshape(shape)) / np.where(top > 0, top, 1.0).reshape(shape)
        q = (x.astype(np.float32).view(np.uint32) + _ROUND) & _KEEP
        q[x == 0] = 0  # -0.0 as 0.0
        q[np.isnan(x)] = _NAN
        return splitmix64(q.astype(np.uint64) ^ _SALT)


def _uint8_mixed(x: npt.NDArray[np.uint8], lo: npt.NDArray[np.float64],
                 top: npt.NDArray[np.float64]) -> npt.NDArray[np.uint64]:
    """`_mixed` of uint8 frames, by a table of the 256 values for each least value and range."""
    pairs, which = np.unique(lo * 256 + top, return_inverse=True)
    levels = np.broadcast_to(np.arange(256, dtype=np.float64), (len(pairs), 256))
    tables = _mixed(levels, pairs // 256, pairs % 256)
    if len(pairs) == 1:  # the rule: a frame's darkest and brightest values are in every frame
        return np.asarray(tables[0][x], dtype=np.uint64)
    return np.asarray(tables[which.reshape(-1)[:, None, None], x], dtype=np.uint64)


def image_windows(f: npt.NDArray[np.uint64], lengths: npt.NDArray[np.int64],
                  episode: npt.NDArray[np.int64], start: npt.NDArray[np.int64],
                  window: int) -> npt.NDArray[np.uint64]:
    """The hash of each window (``start`` steps into ``episode``, of episodes of ``lengths``
    steps whose `image_steps` are ``f``, ``window`` steps each): its steps' polynomial, each
    step's frame in its own least form, so that a copy whose frames are turned or flipped each
    its own way (a random flip a step) has it; its low bit 0 (a `step_windows.COLUMNS` hash of
    `step_windows.WINDOW` steps), never 0."""
    if not len(episode):
        return np.zeros(0, dtype=np.uint64)
    m = len(f) - window + 1
    acc = np.zeros(m, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(window):
            acc = acc * _POLY + f[k : k + m]
    at = (np.cumsum(lengths) - lengths)[episode] + start
    got = splitmix64(acc[at] ^ _WINDOW_SALT) & ~_U64(1)
    got[got == 0] = 2
    return got
