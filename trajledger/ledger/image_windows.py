"""Windows of image observations that a flipped, channel-swapped or rescaled copy keeps (img34).

Scope: `image_steps` (per step of an image observation column, the hashes of its frame and of
the frame flipped left to right, up and down, and both) and `image_windows` (per window of
`step_windows.WINDOW` steps, the least of the four window hashes: a canonical form under the
flips). An observation is an image when its field declares a shape ``H x W``, ``H x W x C``
or ``C x H x W`` (C at most `MAX_CHANNELS`: RGB, RGBA, a stack of 4 grayscale frames) of more
than `step_windows.MAX_COLUMNS` numbers, which have no `COLUMNS` windows of their own: these
take their place (order `step_windows.COLUMNS`, a hash's low bit 0). A frame's hash is over
its pixels in place, each pixel's hash the sum of its channels' mixed values (so that any
order of the channels, RGB <-> BGR or a frame stack reversed, keeps it), each value divided by
its frame's largest first (so that a copy scaled by a constant, uint8 -> float32 / 255, keeps
it: for integer values to 255 a quotient x / m is at least 2^-18 of itself from a rounding
boundary of `step_windows`' 10-bit mantissa, far above float32's error, so both sides round
alike), and channel first or last alike. Two windows share a hash only when the frames of one
are those of the other flipped (the same flip for all 16 steps), scaled, with channels
permuted: as exact as a window of order 0 otherwise, so that the background every episode of
an environment shares matches nothing by itself.
Non-scope: crops, pads, resizes, grayscale conversion, frame stacking and JPEG (each moves or
mixes pixels: not found, measured in docs/SECURITY.md, nineteenth round (img34)); images
without a declared shape (a flat vector); comparing (``contamination_matcher``).
Spec: docs/audit-index.md ("Duplicates and contamination between splits").
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .episode_vectors import splitmix64
from .rollouts.schema import tensor_shape

__all__ = ["FLIPS", "MAX_CHANNELS", "image_shape", "image_steps", "image_windows"]

MAX_CHANNELS = 4
"""The most channels an image's first or last axis may have (RGBA, 4 stacked frames)."""
FLIPS = 4
"""The hashes of a frame (`image_steps`): as it is, flipped left to right, up and down, both."""
_U64 = np.uint64
_SALT = _U64(0x8CB92BA72F3D8DD7)
_WINDOW_SALT = _U64(0xA0761D6478BD642F)
_NULL = _U64(0xE7037ED1A0B428DB)  # a null step's hashes
_POLY = _U64(0x100000001B3)
_ROUND = np.uint32(1 << 12)  # as `step_windows`: float32 rounded to 10 bits of mantissa
_KEEP = np.uint32(0xFFFFE000)
_ROWS = 256  # frames hashed at once: bounded memory


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


def _multipliers(h: int, w: int) -> npt.NDArray[np.uint64]:
    """Each pixel's place's multiplier (odd), for each flip of `FLIPS`: ``(FLIPS, h * w)``."""
    y, x = np.meshgrid(np.arange(h, dtype=np.uint64), np.arange(w, dtype=np.uint64),
                       indexing="ij")
    with np.errstate(over="ignore"):
        a = splitmix64(y * _U64(1 << 32) + x + _SALT) | _U64(1)
    return np.stack([a.ravel(), a[:, ::-1].ravel(), a[::-1].ravel(), a[::-1, ::-1].ravel()])


def image_steps(obs: pa.Array, field: pa.Field, least: int) -> npt.NDArray[np.uint64] | None:
    """Per step of an image observation column (`image_shape` of ``field``, more than ``least``
    numbers a step), its frame's hash as it is and flipped (`FLIPS`): ``(steps, FLIPS)``;
    None when it is no image."""
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
    mult = _multipliers(h, w).T
    out = np.empty((n, FLIPS), dtype=np.uint64)
    for lo in range(0, n, _ROWS):
        x = flat[lo : lo + _ROWS]
        if small:
            mixed = _uint8_mixed(x)
        else:
            x = x.astype(np.float64)
            mixed = _mixed(x, x.max(axis=1))
        mixed = mixed.reshape(len(x), c, h * w) if first else mixed.reshape(len(x), h * w, c)
        pixel = mixed[:, 0] if first else mixed[:, :, 0]
        with np.errstate(over="ignore"):
            for k in range(1, c):  # the channels summed: any order of them keeps a pixel
                pixel = pixel + (mixed[:, k] if first else mixed[:, :, k])
            out[lo : lo + len(x)] = splitmix64((pixel @ mult) ^ _U64(h * 65599 + w))
    if valid is None:
        return out
    every = np.full((len(valid), FLIPS), _NULL, dtype=np.uint64)
    every[valid] = out
    return every


def _mixed(x: npt.NDArray[np.float64], top: npt.NDArray[np.float64]
           ) -> npt.NDArray[np.uint64]:
    """Each value of frames ``x`` (a row a frame) divided by its frame's largest, ``top``
    (none when that is not above 0), rounded as `step_windows` rounds, mixed."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x = x / np.where(top > 0, top, 1.0)[:, None]
        q = (x.astype(np.float32).view(np.uint32) + _ROUND) & _KEEP
        q[x == 0] = 0  # -0.0 as 0.0
        return splitmix64(q.astype(np.uint64) ^ _SALT)


def _uint8_mixed(x: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint64]:
    """`_mixed` of uint8 frames, by a table of the 256 values for each largest value."""
    tops, which = np.unique(x.max(axis=1), return_inverse=True)
    levels = np.broadcast_to(np.arange(256, dtype=np.float64), (len(tops), 256))
    tables = _mixed(levels, tops.astype(np.float64))
    if len(tops) == 1:  # the rule: a frame's brightest value is in every frame
        return np.asarray(tables[0][x], dtype=np.uint64)
    return np.asarray(tables[which.reshape(-1)[:, None], x], dtype=np.uint64)


def image_windows(f: npt.NDArray[np.uint64], lengths: npt.NDArray[np.int64],
                  episode: npt.NDArray[np.int64], start: npt.NDArray[np.int64],
                  window: int) -> npt.NDArray[np.uint64]:
    """The hash of each window (``start`` steps into ``episode``, of episodes of ``lengths``
    steps whose `image_steps` are ``f``, ``window`` steps each): the least of its steps'
    polynomials in each flip, so that a copy flipped alike for all its steps has it; its low
    bit 0 (a `step_windows.COLUMNS` hash of `step_windows.WINDOW` steps), never 0."""
    if not len(episode):
        return np.zeros(0, dtype=np.uint64)
    m = len(f) - window + 1
    acc = np.zeros((m, FLIPS), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(window):
            acc = acc * _POLY + f[k : k + m]
    at = (np.cumsum(lengths) - lengths)[episode] + start
    got = splitmix64(acc[at].min(axis=1) ^ _WINDOW_SALT) & ~_U64(1)
    got[got == 0] = 2
    return got
