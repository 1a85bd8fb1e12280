"""Trivially changed copies of held-out episodes in a train set (holdout22): what ``dataset
create`` and the admission gate say of each, and the policy setting that refuses near
duplicates (``[contamination] refuse = "near"``, `verify.contamination_rules`).

One ledger is built per module: a holdout dataset of a chat episode (two user turns) and a
numeric (CartPole-like, 60 steps) episode, and one train batch per transform of either, not in
any dataset. `TRANSFORMS` is the probe table of docs/SECURITY.md (eleventh round, holdout22):
for each transform, what the checks said before this round, and what they say now under the
default policy and under one that refuses near duplicates.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import testkit

from trajledger import Ledger
from trajledger.ledger import window_cache
from trajledger.ledger.artifacts import create_dataset, record_batch, register_environment
from trajledger.ledger.contamination import DatasetCheck, check_dataset, refusal
from trajledger.ledger.held_windows import forget_grouped
from trajledger.ledger.policy_state import contamination_rules as policy_rules
from trajledger.ledger.record import record_files
from trajledger.ledger.status import approve, record_policy
from trajledger.ledger.window_cache import WINDOWS_VERSION
from trajledger.runner.admission import DataRefusedError, admit
from trajledger.verify import predicates
from trajledger.verify.contamination_rules import ContaminationRules
from trajledger.verify.errors import PolicyError
from trajledger.verify.policy import TrustPolicy
from trajledger.verify.predicates import Dataset

POLICY = (  # one key per role (dotted keys), and ``extra`` tables
    'name = "holdout-copies"\nserial = {serial}\n'
    + "".join(f'roles.{r}.keys = ["keys/{r}.pub"]\n' for r in ("producer", "approver", "trainer"))
    .replace("producer.pub", "vendor.pub")
    + 'roles.log.vkeys = ["{vkey}"]\n{extra}'
)
NEAR = '[contamination]\nrefuse = "near"\n'

# -- the held-out episodes and their copies ------------------------------------------------------

VOCAB = [f"w{i}" for i in range(300)]


def words(seed: int, n: int = 40) -> str:
    return " ".join(VOCAB[i] for i in np.random.default_rng(seed).integers(len(VOCAB), size=n))


HELD_CHAT = [("user", "Solve the following task carefully: " + words(1)),
             ("assistant", "The answer is 42."),
             ("user", "Now explain why the answer holds for " + words(2, 20)),
             ("assistant", "Because it is.")]
LOOK_ALIKES = str.maketrans({"a": "\u0430", "e": "\u0435", "o": "\u043e", "p": "\u0440"})


def users(change: Callable[[str], str]) -> list[tuple[str, str]]:
    return [(r, change(c) if r == "user" else c) for r, c in HELD_CHAT]


def full_width(s: str) -> str:
    return "".join(chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else ch for ch in s)


def one_word(s: str) -> str:
    w = s.split(" ")
    w[10] = "different"
    return " ".join(w)


STEPS = 60
OBS = np.cumsum(np.random.default_rng(1).normal(0, 0.05, size=(STEPS, 4)), axis=0)
ACT = [int(a) for a in np.random.default_rng(9).integers(2, size=STEPS)]
MORE = np.cumsum(np.random.default_rng(2).normal(0, 0.05, size=(10, 4)), axis=0) + OBS[-1]
LONG = np.cumsum(np.random.default_rng(3).normal(0, 0.05, size=(128, 4)), axis=0)
"""A longer held episode (held-long): every fourth of its steps is more than a window."""


def grid_walk(seed: int, n: int, size: int) -> np.ndarray:
    """The cells of a random walk on a ``size`` x ``size`` grid (a move a step, walls stop)."""
    rng = np.random.default_rng(seed)
    at, cells = np.array([size // 2, size // 2]), []
    for move in rng.integers(4, size=n):
        cells.append(at[0] * size + at[1])
        at = np.clip(at + [(0, 1), (0, -1), (1, 0), (-1, 0)][move], 0, size - 1)
    return np.array(cells)


GRID = np.eye(36)[grid_walk(4, STEPS, 6)]
"""A held grid-world episode (held-grid): its cell one-hot, 36 values a step (copy30)."""
SHORT_GRID = np.eye(36)[grid_walk(5, 40, 6)]
"""A held grid-world episode shorter than `step_windows.LONG` (held-short, copy31)."""
DICT = {"pos": np.cumsum(np.random.default_rng(6).normal(0, 0.05, size=(STEPS, 4)), axis=0),
        "vel": np.random.default_rng(7).normal(0, 0.05, size=(STEPS, 3))}
"""A held episode of a Dict observation space (held-dict, copy30)."""
WIDE = np.cumsum(np.random.default_rng(8).normal(0, 0.05, size=(STEPS, 300)), axis=0)
"""A held episode of 300 numbers a step (held-wide: wider than `step_windows.MAX_COLUMNS`)."""
CLOCK = np.arange(STEPS, dtype=np.float64)[:, None]
"""The step number Gymnasium's ``TimeAwareObservation`` adds to an observation (clock33)."""
TIMED = np.hstack([np.cumsum(np.random.default_rng(12).normal(0, 0.05, size=(STEPS, 3)),
                             axis=0), CLOCK / 500])
"""A held episode recorded with a clock, ``t / 500``, as its last column (held-timed)."""

def sprite_frames(seed: int, n: int) -> np.ndarray:
    """16 x 16 RGB frames (uint8): a 3 x 3 sprite's random walk over a background every
    episode shares (img34)."""
    rng = np.random.default_rng(seed)
    bg = np.full((16, 16, 3), 40, dtype=np.uint8)
    bg[:3] = np.random.default_rng(0).integers(0, 255, size=(3, 16, 3))
    out, at = np.repeat(bg[None], n, axis=0), np.array([8, 8])
    for t in range(n):
        out[t, at[0] : at[0] + 3, at[1] : at[1] + 3] = (230, 60, 60)
        at = np.clip(at + rng.integers(-2, 3, size=2), (3, 0), (13, 13))
    return out


def stacked(o: np.ndarray, k: int, zeros: bool = False) -> np.ndarray:
    """Each step the last ``k`` observations, oldest first, the first steps padded with the
    first observation (or zeros), as Gymnasium's ``FrameStackObservation`` does (win36);
    of vectors, flattened."""
    pad = np.zeros_like(o[:1]) if zeros else o[:1]
    x = np.concatenate([np.repeat(pad, k - 1, axis=0), o])
    out = np.stack([x[j : j + len(o)] for j in range(k)], axis=1)
    return out.reshape(len(o), -1) if o.ndim == 2 else out


IMAGE = sprite_frames(13, STEPS)
"""A held episode of image observations, 16 x 16 x 3 uint8 (held-image, img34)."""
STACKED = np.cumsum(np.random.default_rng(14).normal(0, 0.05, size=(STEPS, 4)), axis=0)
"""A held episode recorded as a frame stack of 4 (held-stacked, win37): its newest frames."""

Spec = Any  # a chat (role, content) list, or a list of numeric episodes (obs, actions)
CHAT: dict[str, Spec] = {
    "id changed": HELD_CHAT,
    "white space": users(lambda c: "  " + c.replace(" ", "   ") + " \n"),
    "case": users(str.upper),
    "look-alikes": users(lambda c: c.translate(LOOK_ALIKES)),
    "full-width": users(full_width),
    "zero-width space in words": users(lambda c: " ".join(w[:1] + "\u200b" + w[1:]
                                                          for w in c.split(" "))),
    "punctuation": users(lambda c: c.replace(" ", ", ") + "!"),
    "system prompt": [("system", "You are a helpful assistant."), *HELD_CHAT],
    "turn added": [*HELD_CHAT, ("user", "Thanks, anything else?"), ("assistant", "No.")],
    "turn dropped": HELD_CHAT[:2],
    "one word": users(one_word),
}
NUMERIC: dict[str, Spec] = {
    "id changed": [(OBS, ACT)],
    "scaled 1.000001": [(OBS * 1.000001, ACT)],
    "rounded 3 decimals": [(np.round(OBS, 3), ACT)],
    "float32": [(OBS.astype(np.float32).astype(np.float64), ACT)],
    "10 steps appended": [(np.vstack([OBS, MORE]), ACT + [0] * 10)],
    "first step dropped": [(OBS[1:], ACT[1:])],
    "split 30+30": [(OBS[:30], ACT[:30]), (OBS[30:], ACT[30:])],
    # holdout23: more cuts and shifts, and copies that are not caught (see `Row.now`)
    "split 50+10": [(OBS[:50], ACT[:50]), (OBS[50:], ACT[50:])],
    "float32, 5 steps dropped": [(OBS.astype(np.float32).astype(np.float64)[5:], ACT[5:])],
    "inside unrelated steps": [(np.vstack([OBS[:5] + 3, OBS[20:40], OBS[:5] - 3]),
                                ACT[:5] + ACT[20:40] + ACT[:5])],
    "actions and rewards changed": [(OBS[3:], [1 - a for a in ACT[3:]])],
    "rounded 3 decimals, shifted": [(np.round(OBS, 3)[1:], ACT[1:])],
    "reversed": [(OBS[::-1], ACT[::-1])],
    "every other step": [(OBS[::2], ACT[::2])],
    "columns duplicated": [(np.hstack([OBS, OBS]), ACT)],
    # win25: frame skip from either phase, reversed, and what is still not caught
    "every other step from the second": [(OBS[1::2], ACT[1::2])],
    "every third step, first dropped": [(OBS[::3][1:], ACT[::3][1:])],
    "reversed, first step dropped": [(OBS[::-1][1:], ACT[::-1][1:])],
    "reversed, every other step": [(OBS[::-2], ACT[::-2])],
    "columns permuted": [(OBS[:, ::-1], ACT)],
    # copy26: reversed and subsampled at once, every fourth step
    "reversed, every other step from the second": [(OBS[-2::-2], ACT[-2::-2])],
    "every fourth step": [(OBS[::4], ACT[::4])],
    "every fourth step of 128, from the second": [(LONG[1::4], [0] * 32)],
    # copy30: few-valued (one-hot) observations permuted, Dict spaces, wide observations
    "one-hot columns permuted": [(GRID[:, ::-1], ACT)],
    "one-hot columns permuted, first 10 steps dropped": [
        (GRID[10:][:, np.random.default_rng(10).permutation(36)], ACT[10:])],
    # copy31: few-valued episodes shorter than `step_windows.LONG` steps
    "one-hot of 40 steps, columns permuted": [
        (SHORT_GRID[:, np.random.default_rng(11).permutation(36)], ACT[:40])],
    "one-hot of 40 steps, columns permuted, first step dropped": [
        (SHORT_GRID[1:, np.random.default_rng(11).permutation(36)], ACT[1:40])],
    "Dict, first step dropped": [({k: v[1:] for k, v in DICT.items()}, ACT[1:])],
    "Dict, columns permuted in each member": [({"pos": DICT["pos"][:, [2, 0, 3, 1]],
                                                "vel": DICT["vel"][:, ::-1]}, ACT)],
    "wide, first step dropped": [(WIDE[1:], ACT[1:])],
    # clock33: a clock column added (the step number, t / 500, the time left), or dropped
    "step number appended": [(np.hstack([OBS, CLOCK]), ACT)],
    "t / 500 appended, first 5 steps dropped": [(np.hstack([OBS, CLOCK / 500])[5:], ACT[5:])],
    "time left inserted, inside unrelated steps": [(np.insert(np.vstack(
        [OBS[:5] + 3, OBS[20:40], OBS[:5] - 3]), 1, 1 - np.arange(30) / 500, axis=1),
        ACT[:5] + ACT[20:40] + ACT[:5])],
    "one-hot with the step number, columns permuted": [(np.hstack([GRID, CLOCK])[:, ::-1], ACT)],
    "Dict, a time member added": [({"pos": DICT["pos"], "time": CLOCK, "vel": DICT["vel"]},
                                   ACT)],
    "recorded with a clock, the clock dropped": [(TIMED[3:, :3], ACT[3:])],
    # copy35: a column that stands throughout the episode added (a task id, a bias feature,
    # a time stamp that stands in float32)
    "task id appended": [(np.hstack([OBS, np.full((STEPS, 1), 7.0)]), ACT)],
    "bias inserted, columns permuted, first 5 steps dropped": [
        (np.insert(OBS, 2, 1.0, axis=1)[5:, [4, 0, 2, 3, 1]], ACT[5:])],
    "a time stamp appended": [(np.hstack([OBS, 1.7e9 + 0.02 * CLOCK]), ACT)],
    "Dict, a task member added": [({"pos": DICT["pos"], "task": np.full((STEPS, 1), 3.0),
                                    "vel": DICT["vel"]}, ACT)],
    "wide, columns permuted": [(WIDE[:, ::-1], ACT)],
    # img34: image observations flipped, channels swapped, rescaled; cropped
    "image, flipped left to right": [(IMAGE[:, :, ::-1], ACT)],
    "image, RGB <-> BGR, first 5 steps dropped": [(IMAGE[5:, :, :, ::-1], ACT[5:])],
    "image, float32 / 255, flipped up and down": [(IMAGE[:, ::-1].astype(np.float32) / 255,
                                                    ACT)],
    "image, cropped 1 pixel a side": [(IMAGE[:, 1:-1, 1:-1], ACT)],
    # rev32: each frame turned or flipped its own way; transposed, to [-1, 1], a constant alpha
    "image, turned or flipped each step its own way": [(np.stack(
        [np.rot90(f, k % 4) if k % 2 else f[::-1] for k, f in enumerate(IMAGE)]), ACT)],
    "image, transposed, float32 / 127.5 - 1, a constant alpha": [(np.concatenate(
        (IMAGE.transpose(0, 2, 1, 3), np.full((*IMAGE.shape[:3], 1), 255, np.uint8)),
        axis=3).astype(np.float32) / np.float32(127.5) - 1, ACT)],
    # win36: frame stacks (Gymnasium's ``FrameStackObservation``, Atari's 4 frames)
    "4 frames stacked, first 5 steps dropped": [(stacked(OBS, 4)[5:], ACT[5:])],
    "3 frames stacked, interleaved, zeros first": [(stacked(OBS, 3, zeros=True).reshape(
        STEPS, 3, 4).transpose(0, 2, 1).reshape(STEPS, 12), ACT)],
    "image, 4 frames stacked (4 x H x W x 3)": [(stacked(IMAGE, 4), ACT)],
    "image, 4 frames stacked on the channels (H x W x 12), first 3 steps dropped": [(
        np.concatenate(list(stacked(IMAGE, 4).transpose(1, 0, 2, 3, 4)), axis=3)[3:], ACT[3:])],
    # win37: a held stack copied without it; a Dict space's stacked member
    "a held stack's newest frames, first 5 steps dropped": [(STACKED[5:], ACT[5:])],
    "Dict, pos stacked (4 frames)": [({"pos": stacked(DICT["pos"], 4), "vel": DICT["vel"]}, ACT)],
    # copy28: columns permuted or duplicated, and cut too
    "columns permuted, first 10 steps dropped": [(OBS[10:, [2, 0, 3, 1]], ACT[10:])],
    "one column duplicated, permuted": [(OBS[:, [3, 1, 1, 0, 2]], ACT)],
    "reversed, every third step": [(OBS[::-3], ACT[::-3])],
    "reversed, every third step from the second": [(OBS[-2::-3], ACT[-2::-3])],
    "every fifth step of 128": [(LONG[::5], [0] * 26)],
    "every fifth step of 128, from the fifth": [(LONG[4::5], [0] * 25)],
}


@dataclass(frozen=True)
class Row:
    """One transform: what was said before this round (``exact``, ``near``, ``nothing``), and
    now: the finding (``exact``, ``normalised``: exact once text is normalised, ``run``: exact,
    a train episode shares a run of `step_windows.WINDOW` steps, ``near``, ``nothing``)."""

    modality: str
    name: str
    before: str
    now: str
    of: str = "held-num"
    """The held episode a numeric copy is of."""


TRANSFORMS = [
    Row("text", "id changed", "exact", "exact"),
    Row("text", "white space", "near", "normalised"),
    Row("text", "case", "near", "normalised"),
    Row("text", "look-alikes", "near", "near"),
    Row("text", "full-width", "nothing", "normalised"),
    Row("text", "zero-width space in words", "nothing", "normalised"),
    Row("text", "punctuation", "near", "near"),
    Row("text", "system prompt", "near", "normalised"),
    Row("text", "turn added", "near", "near"),
    Row("text", "turn dropped", "near", "near"),
    Row("text", "one word", "near", "near"),
    Row("numeric", "id changed", "exact", "exact"),
    Row("numeric", "scaled 1.000001", "near", "run"),
    Row("numeric", "rounded 3 decimals", "near", "near"),
    Row("numeric", "float32", "near", "run"),
    Row("numeric", "10 steps appended", "nothing", "run"),
    Row("numeric", "first step dropped", "nothing", "run"),
    Row("numeric", "split 30+30", "nothing", "run"),
    Row("numeric", "split 50+10", "nothing", "run"),
    Row("numeric", "float32, 5 steps dropped", "nothing", "run"),
    Row("numeric", "inside unrelated steps", "nothing", "run"),
    Row("numeric", "actions and rewards changed", "nothing", "run"),
    # Not caught (docs/SECURITY.md, twelfth round, holdout23's Left; thirteenth, win25's):
    # rounding to 3 decimals moves values across the 3-significant-digit steps the windows
    # compare at.
    Row("numeric", "rounded 3 decimals, shifted", "nothing", "nothing"),
    # win25: the held side's windows of its steps reversed and of every 2nd and 3rd step
    # (`step_windows.ORDERS`).
    Row("numeric", "reversed", "nothing", "run"),
    Row("numeric", "reversed, first step dropped", "nothing", "run"),
    Row("numeric", "every other step", "nothing", "run"),
    Row("numeric", "every other step from the second", "nothing", "run"),
    Row("numeric", "every third step, first dropped", "nothing", "run"),
    # copy26: every second step reversed, every fourth step (`ORDERS`); every fourth step of
    # a 60-step episode is 15 steps, under a window: only its exact fingerprint would match.
    Row("numeric", "reversed, every other step", "nothing", "run"),
    Row("numeric", "reversed, every other step from the second", "nothing", "run"),
    Row("numeric", "every fourth step", "nothing", "nothing"),
    Row("numeric", "every fourth step of 128, from the second", "nothing", "run", "held-long"),
    # copy28: the windows of each step's columns as a set (`step_windows.COLUMNS`), both
    # sides; every third step reversed, every fifth step (`ORDERS`). Nothing found before.
    *(Row("numeric", name, "nothing", "run", of) for name, of in (
        ("columns duplicated", "held-num"), ("columns permuted", "held-num"),
        ("columns permuted, first 10 steps dropped", "held-num"),
        ("one column duplicated, permuted", "held-num"),
        ("reversed, every third step", "held-num"),
        ("reversed, every third step from the second", "held-num"),
        ("every fifth step of 128", "held-long"),
        ("every fifth step of 128, from the fifth", "held-long"))),
    # copy30: a one-hot observation's columns permuted: its `COLUMNS` windows of few values
    # are of 32 steps (`step_windows.LONG`); a Dict space's windows of columns, per member.
    Row("numeric", "one-hot columns permuted", "nothing", "run", "held-grid"),
    Row("numeric", "one-hot columns permuted, first 10 steps dropped", "nothing", "run",
        "held-grid"),
    # copy31: one of fewer than `LONG` steps is one window over the whole episode; a copy of
    # another length is not found (docs/SECURITY.md, seventeenth round, copy31's Left).
    Row("numeric", "one-hot of 40 steps, columns permuted", "nothing", "run", "held-short"),
    Row("numeric", "one-hot of 40 steps, columns permuted, first step dropped", "nothing",
        "nothing", "held-short"),
    Row("numeric", "Dict, first step dropped", "run", "run", "held-dict"),
    Row("numeric", "Dict, columns permuted in each member", "nothing", "run", "held-dict"),
    Row("numeric", "wide, first step dropped", "run", "run", "held-wide"),
    # clock33: a clock column added or dropped shared no window (docs/SECURITY.md,
    # seventeenth round, rev29's Left): the windows without it are the held ones.
    *(Row("numeric", name, "nothing", "run", of) for name, of in (
        ("step number appended", "held-num"),
        ("t / 500 appended, first 5 steps dropped", "held-num"),
        ("time left inserted, inside unrelated steps", "held-num"),
        ("one-hot with the step number, columns permuted", "held-grid"),
        ("Dict, a time member added", "held-dict"),
        ("recorded with a clock, the clock dropped", "held-timed"))),
    # copy35: a standing column added shared no window (docs/SECURITY.md, nineteenth round,
    # rev31's Left): the train side's windows without clocks are without it too.
    *(Row("numeric", name, "nothing", "run", of) for name, of in (
        ("task id appended", "held-num"),
        ("bias inserted, columns permuted, first 5 steps dropped", "held-num"),
        ("a time stamp appended", "held-num"), ("Dict, a task member added", "held-dict"))),
    # Not caught (docs/SECURITY.md, sixteenth round, copy30's Left): no `COLUMNS` windows
    # for more than `step_windows.MAX_COLUMNS` numbers a step.
    Row("numeric", "wide, columns permuted", "nothing", "nothing", "held-wide"),
    # img34: an image's `COLUMNS` windows are its frames' windows as they are or flipped,
    # channels in any order, each frame divided by its largest value (`image_windows`); a
    # crop moves every pixel: not found (docs/SECURITY.md, nineteenth round, img34's Left).
    *(Row("numeric", name, "nothing", "run", "held-image") for name in (
        "image, flipped left to right", "image, RGB <-> BGR, first 5 steps dropped",
        "image, float32 / 255, flipped up and down")),
    Row("numeric", "image, cropped 1 pixel a side", "nothing", "nothing", "held-image"),
    # win36: a frame stack's windows over its newest frame (`frame_stacks`)
    *(Row("numeric", name, "nothing", "run", of) for name, of in (
        ("4 frames stacked, first 5 steps dropped", "held-num"),
        ("3 frames stacked, interleaved, zeros first", "held-num"),
        ("image, 4 frames stacked (4 x H x W x 3)", "held-image"),
        ("image, 4 frames stacked on the channels (H x W x 12), first 3 steps dropped",
         "held-image"))),
    # win37: the held side's windows over a stack's newest frames; a Dict member's stack
    *(Row("numeric", name, "nothing", "run", of) for name, of in (
        ("a held stack's newest frames, first 5 steps dropped", "held-stacked"),
        ("Dict, pos stacked (4 frames)", "held-dict"))),
    # rev32: each frame in its least of eight forms, channels apart, scaled to its range
    *(Row("numeric", name, "nothing", "run", "held-image") for name in (
        "image, turned or flipped each step its own way",
        "image, transposed, float32 / 127.5 - 1, a constant alpha")),
]


def chat_line(episode: str, messages: list[tuple[str, str]]) -> str:
    return json.dumps({"episode_id": episode, "reward": 1.0,
                       "messages": [{"role": r, "content": c} for r, c in messages]})


def numeric_rows(episode: str, obs: np.ndarray | dict[str, np.ndarray],
                 actions: list[int]) -> list[dict[str, Any]]:
    """The steps of an episode (``obs``: a Dict space's, a dict of arrays)."""
    def at(t: int) -> Any:
        if isinstance(obs, dict):
            return {k: [float(v) for v in o[t]] for k, o in obs.items()}
        return obs[t] if obs.ndim > 2 else [float(v) for v in obs[t]]  # an image: its shape

    n = len(next(iter(obs.values()))) if isinstance(obs, dict) else len(obs)
    return [{"episode_id": episode, "step": t, "obs": at(t),
             "action": [float(actions[t])], "reward": 1.0, "terminated": t == n - 1,
             "truncated": False} for t in range(n)]


def build(home: Path) -> dict[str, str]:
    """The module's ledger; returns ``"<modality> <transform>"`` -> its train batch."""
    ledger = Ledger.init(home, origin="test/holdout-copies")
    keys = {k: ledger.keys.create(k, encrypt=False) for k in ("vendor", "approver", "trainer")}
    path = home / "policy.toml"
    path.write_text(POLICY.format(serial=1, vkey=ledger.log.vkey, extra=""))
    record_policy(ledger, path, [keys["approver"]])
    register_environment(ledger, "chat", "1", keys["vendor"])
    register_environment(ledger, "grid", "1", keys["vendor"])
    held = home / "held.jsonl"
    held.write_text(chat_line("held-chat", HELD_CHAT) + "\n"
                    + chat_line("other-chat", [("user", words(77))]) + "\n")
    text = record_batch(ledger, [held], env="chat@1", policy="m", signer=keys["vendor"],
                        name="held-text").recorded.digest
    other = np.cumsum(np.random.default_rng(5).normal(0, 0.05, size=(STEPS, 4)), axis=0)
    numeric = record_batch(ledger, numeric_rows("held-num", OBS, ACT)
                           + numeric_rows("other-num", other, ACT)
                           + numeric_rows("held-long", LONG, [0] * 128), env="grid@1", policy="p",
                           signer=keys["vendor"], name="held-num").recorded.digest
    more = [record_batch(ledger, numeric_rows(name, o, ACT), env="grid@1", policy="p",
                         signer=keys["vendor"], name=name).recorded.digest
            for name, o in (("held-grid", GRID), ("held-dict", DICT), ("held-wide", WIDE),
                            ("held-short", SHORT_GRID), ("held-timed", TIMED),
                            ("held-image", IMAGE), ("held-stacked", stacked(STACKED, 4)))]
    create_dataset(ledger, "held", "1", "holdout", [text, numeric, *more], keys["vendor"])
    out = {}
    for n, (name, messages) in enumerate(CHAT.items()):
        src = home / f"copy{n}.jsonl"
        src.write_text(chat_line(f"copy-{n}", messages) + "\n")
        out[f"text {name}"] = record_batch(ledger, [src], env="chat@1", policy="m",
                                           signer=keys["vendor"]).recorded.digest
    for n, (name, episodes) in enumerate(NUMERIC.items()):
        rows = [r for i, (o, a) in enumerate(episodes) for r in numeric_rows(f"n{n}-{i}", o, a)]
        out[f"numeric {name}"] = record_batch(ledger, rows, env="grid@1", policy="p",
                                              signer=keys["vendor"]).recorded.digest
    return out


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[dict[str, str]]:
    return testkit.build_template(tmp_path_factory.mktemp("holdout-copies"), build)


@pytest.fixture
def ledger(template: testkit.Template[dict[str, str]], tmp_path: Path) -> Ledger:
    return Ledger.open(testkit.copy_template(template, tmp_path / "home"))


@pytest.fixture(scope="module")
def shared(template: testkit.Template[dict[str, str]],
           tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One copy of `template` (and its user state, beside it) for the tests that only check
    datasets (`reader`). A copy is the template's 1,300 files: 0.2 CPU-s, most of a probe
    table case's CPU (suite42)."""
    root = tmp_path_factory.mktemp("holdout-shared")
    with testkit.user_state(root / "state"):
        return testkit.copy_template(template, root / "home")


@pytest.fixture(scope="module")
def as_they_are(template: testkit.Template[dict[str, str]],
                tmp_path_factory: pytest.TempPathFactory) -> dict[str, DatasetCheck]:
    """Every probe's check with the held side's windows held as they are (nothing grouped:
    the slow path, `Matcher.hold_windows`), on a copy of `template` of its own: what a
    grouping, whole, failed or stopped midway, must decide as (computed once for the module:
    each probe's check is most of such a test's time, ci53)."""
    from trajledger.ledger import contamination

    root = tmp_path_factory.mktemp("holdout-as-they-are")
    with testkit.user_state(root / "state"), pytest.MonkeyPatch.context() as m:
        ledger = Ledger.open(testkit.copy_template(template, root / "home"))
        m.setattr(contamination, "group_file", lambda *_, **__: None)
        return {b: check_dataset(ledger, "train", [b]) for b in template.value.values()}


def outside_the_cache(home: Path) -> dict[str, bytes]:
    """Every file of ``home`` but the derived cache (index/features), with its bytes.

    Walked with `os.scandir` and the relative paths joined as strings: taken before and after
    each `reader` test (the ledger's 1,300 files, 142 times a run), ``os.walk`` with
    ``os.path.relpath`` for each file cost 2.5 times as much (the module's CPU 39.7 -> 35.5 s,
    ci56)."""
    out: dict[str, bytes] = {}
    cache = os.path.join(home, "index", "features")

    def walk(directory: str, rel: str) -> None:
        with os.scandir(directory) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    if e.path != cache:
                        walk(e.path, rel + e.name + "/")
                elif not (e.is_symlink() and e.is_dir()):  # (as os.walk: not followed)
                    with open(e.path, "rb") as f:
                        out[rel + e.name] = f.read()

    walk(str(home), "")
    return out


@pytest.fixture
def reader(shared: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ledger]:
    """`shared`, opened as its user, for a test that writes nothing but the derived cache
    (`check_dataset` keeps the windows it computed and the held side's grouped file there,
    which decide as the step files: test_kept_runs_and_texts_decide_as_the_step_files,
    test_the_held_side_grouped_decides_as_its_windows). Checked after the test: every other
    file of the ledger is as it was."""
    monkeypatch.setenv(testkit.STATE_ENV, str(shared.parent / "state"))
    before = outside_the_cache(shared)
    yield Ledger.open(shared)
    assert outside_the_cache(shared) == before, "a reader's test wrote the shared ledger"


def refuse_near(ledger: Ledger, extra: str = NEAR, serial: int = 2) -> TrustPolicy:
    """Record policy ``serial``: the first with ``extra`` (by default, refuse near
    duplicates)."""
    path = ledger.root / f"policy{serial}.toml"
    path.write_text(POLICY.format(serial=serial, vkey=ledger.log.vkey, extra=extra))
    record_policy(ledger, path, [ledger.keys.signer("approver")])
    return TrustPolicy.from_toml(path.read_bytes(), path.parent)


def train_set(ledger: Ledger, name: str, batch: str) -> None:
    """A train dataset of ``batch`` recorded without the check (as an older writer could),
    approved."""
    body = Dataset(name, "1", "train", (batch,)).to_predicate()
    path = ledger.root / f"{name}.json"
    path.write_text(json.dumps(body))
    record_files(ledger, {"dataset.json": path}, ledger.keys.signer("vendor"),
                 predicates.DATASET, body, name=f"{name}@1")
    approve(ledger, f"{name}@1", ledger.keys.signer("approver"))


# -- the probe table ---------------------------------------------------------------------------


@pytest.mark.parametrize("row", TRANSFORMS, ids=[f"{r.modality}-{r.name}" for r in TRANSFORMS])
def test_each_transform_of_a_held_out_episode(
    template: testkit.Template[dict[str, str]], reader: Ledger, row: Row
) -> None:
    """What ``dataset create`` finds of each copy, and refuses under either policy. Before
    this round, white space, case and the system prompt were near duplicates only (reported,
    never refused by default), and full-width letters or a zero-width space inside words
    nothing at all."""
    found = check_dataset(reader, "train", [template.value[f"{row.modality} {row.name}"]])
    got = [("normalised" if f.normalised else "run" if f.shared else f.kind)
           for f in found.findings]
    assert got == ([] if row.now == "nothing" else [row.now])
    if found.findings:
        assert found.findings[0].other_episode == ("held-chat" if row.modality == "text"
                                                   else row.of)
    default = refusal("d", found.findings, ContaminationRules())
    near = refusal("d", found.findings, ContaminationRules("near"))
    assert (default is not None) == (row.now in ("exact", "normalised", "run"))
    assert (near is not None) == (row.now != "nothing")


# -- refusing near duplicates: dataset create and the gate --------------------------------------

NEAR_COPIES = [("text", "one word", "held-chat"), ("numeric", "rounded 3 decimals", "held-num")]


@pytest.mark.parametrize(("modality", "name", "held"), NEAR_COPIES, ids=["text", "numeric"])
def test_dataset_create_refuses_near_duplicates_when_the_policy_says(
    template: testkit.Template[dict[str, str]], ledger: Ledger, modality: str, name: str,
    held: str,
) -> None:
    """Under the default policy a near copy is recorded (and reported); once the policy in
    force says ``refuse = "near"`` it is refused: one line per finding, the log unchanged."""
    batch = template.value[f"{modality} {name}"]
    vendor = ledger.keys.signer("vendor")
    assert policy_rules(ledger) == ContaminationRules()  # an old policy: today's behaviour
    made = create_dataset(ledger, "ok", "1", "train", [batch], vendor)
    assert len(made.near_duplicates) == 1
    assert f"episode {held} of batch " in made.near_duplicates[0]
    refuse_near(ledger)
    size = ledger.log.size
    with pytest.raises(PolicyError) as e:
        create_dataset(ledger, "no", "1", "train", [batch], vendor)
    head, line = str(e.value).splitlines()
    assert head == ("dataset no@1 (train): 1 episode(s) duplicate episodes of the other split, "
                    "exactly or nearly (the policy's [contamination] refuses near duplicates):")
    assert line.startswith(f"  episode {held} of batch ") and "is a near duplicate" in line
    assert ledger.log.size == size


@pytest.mark.parametrize(("modality", "name", "held"), NEAR_COPIES, ids=["text", "numeric"])
def test_the_gate_refuses_near_duplicates_when_the_policy_says(
    template: testkit.Template[dict[str, str]], ledger: Ledger, modality: str, name: str,
    held: str,
) -> None:
    what = "no episode duplicates a holdout or regression episode"
    train_set(ledger, "copies", template.value[f"{modality} {name}"])
    path = ledger.root / "policy.toml"
    report = admit(ledger, "copies@1", TrustPolicy.from_toml(path.read_bytes(), path.parent))
    assert any(what in x and "0 exact, 1 near" in x for x in report.report.render())
    policy = refuse_near(ledger)
    with pytest.raises(DataRefusedError) as e:
        admit(ledger, "copies@1", policy)
    [failure] = e.value.report.failures()
    assert f"{what}: near duplicate: episode {held} of batch " in failure


def test_a_lower_threshold_refuses_more(
    template: testkit.Template[dict[str, str]], ledger: Ledger
) -> None:
    """A policy may lower a threshold (refusing more): a chat sharing 30 of its first 40 words
    with the held one (similarity 0.58) is a near duplicate at 0.5, not at the default 0.8."""
    policy = refuse_near(ledger, NEAR + "text_threshold = 0.5\n")
    assert policy.contamination == ContaminationRules("near", text_threshold=0.5)
    assert policy_rules(ledger).thresholds() == {"text": 0.5, "numeric": 0.995}
    far = home_chat(ledger, [("user", words(1, 30) + " " + words(3, 10))])
    found = check_dataset(ledger, "train", [far], thresholds={"text": 0.5}).findings
    assert [(f.kind, f.other_episode) for f in found] == [("near", "held-chat")]
    assert 0.5 <= found[0].similarity < 0.8
    assert check_dataset(ledger, "train", [far]).findings == ()
    with pytest.raises(PolicyError, match=r"\n  episode held-chat of batch .* near duplicate "
                       r"\(similarity 0\.5"):
        create_dataset(ledger, "far", "1", "train", [far], ledger.keys.signer("vendor"))


def home_chat(ledger: Ledger, messages: list[tuple[str, str]]) -> str:
    src = ledger.root / "far.jsonl"
    src.write_text(chat_line("far", messages) + "\n")
    return record_batch(ledger, [src], env="chat@1", policy="m",
                        signer=ledger.keys.signer("vendor")).recorded.digest


# -- the command line --------------------------------------------------------------------------


def test_the_command_line(template: testkit.Template[dict[str, str]], ledger: Ledger) -> None:
    """``policy check`` / ``show`` print the setting; a bad value is one FAIL line (exit 1, as
    every invalid policy); ``dataset create`` refuses a near copy: a FAIL line per line."""
    home = ledger.root
    bad = home / "bad.toml"
    for extra, message in [
        ('[contamination]\nrefuse = "nearly"\n', "refuse 'nearly', want \"exact\" or \"near\""),
        (NEAR + "text_threshold = 0.9\n", "text_threshold 0.9 must be above 0 and at most "
                                          "the default 0.8"),
        ('[contamination]\nnumeric_threshold = 0.9\n', "numeric_threshold is set but refuse "
                                                       "is \"exact\""),
        ('[contamination]\nrefuse = "near"\nsimilarity = 1\n', "unknown setting(s) similarity; "
                                                              "known: numeric_threshold"),
    ]:
        bad.write_text(POLICY.format(serial=2, vkey=ledger.log.vkey, extra=extra))
        r = testkit.invoke(home, "policy", "check", bad)
        assert r.exit_code == 1, r.output
        [line] = r.stderr.splitlines()
        assert line.startswith(f"FAIL: policy {bad}: contamination: ") and message in line, line
    good = home / "good.toml"
    good.write_text(POLICY.format(serial=2, vkey=ledger.log.vkey,
                                  extra=NEAR + "numeric_threshold = 0.99\n"))
    r = testkit.invoke(home, "policy", "check", good)
    assert r.exit_code == 0, r.output
    assert ("  contamination refuses exact and near duplicates of held-out episodes (text "
            "similarity >= 0.8, numeric >= 0.99)") in r.stdout.splitlines()
    assert "contamination" not in testkit.invoke(home, "policy", "show").stdout
    record_policy(ledger, good, [ledger.keys.signer("approver")])
    shown = testkit.invoke(home, "policy", "show", "--json")
    assert json.loads(shown.stdout)["policy"]["contamination"] == {
        "refuse": "near", "numeric_threshold": "0.99"}
    r = testkit.invoke(home, "dataset", "create", "leak", "--version", "1", "--split", "train",
                       "--batch", template.value["text white space"],
                       "--batch", template.value["numeric rounded 3 decimals"],
                       "--key", "vendor")
    assert r.exit_code == 1, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 3 and all(x.startswith("FAIL: ") for x in lines), r.stderr
    assert "once text is normalised" in lines[1] and "near duplicate" in lines[2]


def test_normalised_texts() -> None:
    """ASCII texts take the short path (lower case, ASCII white space), the others NFKC and
    Unicode white space: both end the same for the same words."""
    import pyarrow as pa

    from trajledger.ledger.text_fingerprint import normalised_texts

    got = normalised_texts(pa.array([" A \t b\n\nC ", "Ａ\u3000b\u00a0\u200bc", "\ufb01ne\u2028x",
                                     None, "", " \v "]))
    assert got.to_pylist() == ["a b c", "a b c", "fine x", None, "", ""]


# -- shared runs of steps (holdout23) ----------------------------------------------------------


def test_a_shared_run_of_steps_says_what_was_shared(
    template: testkit.Template[dict[str, str]], ledger: Ledger
) -> None:
    """A copy cut, shifted or split shares runs of observations with the held episode: an
    exact finding naming the longest run shared with the first train episode found, refused
    by ``dataset create`` under the default policy (before holdout23: nothing found)."""
    [first] = check_dataset(ledger, "train", [template.value["numeric first step dropped"]]
                            ).findings
    assert (first.kind, first.shared, first.train_episode) == ("exact", (2, 60, 60), "n5-0")
    assert str(first).startswith("train episode n5-0 of batch sha256:")
    assert "shares 59 consecutive steps (steps 2-60 of 60 of held-out episode held-num of " \
           "batch sha256:" in str(first)
    assert "(holdout held@1)" in str(first)
    assert first.to_json()["shared"] == [2, 60, 60]
    [split] = check_dataset(ledger, "train", [template.value["numeric split 30+30"]]).findings
    assert (split.shared, split.matches, split.train_episode) == ((1, 30, 60), 2, "n6-0")
    assert ") and 1 more train episodes: a copy" in str(split)
    with pytest.raises(PolicyError, match=r"1 episode\(s\) exactly duplicate .* shares 59 "
                                          r"consecutive steps \(steps 2-60 of 60 "):
        create_dataset(ledger, "cut", "1", "train", [template.value["numeric first step dropped"]],
                       ledger.keys.signer("vendor"))


def test_a_reordered_run_says_how_it_was_reordered(
    template: testkit.Template[dict[str, str]], reader: Ledger
) -> None:
    """A frame-skipped or reversed copy: the message and the JSON say which steps of the held
    episode, in which order (win25; before: nothing found)."""
    [skip] = check_dataset(reader, "train", [template.value["numeric every other step from "
                                                            "the second"]]).findings
    assert (skip.kind, skip.shared, skip.every, skip.reversed) == ("exact", (2, 60, 60), 2,
                                                                   False)
    assert "shares 30 consecutive steps (every second step of steps 2-60 of 60 of held-out " \
           "episode held-num of batch sha256:" in str(skip)
    assert str(skip).endswith("(equal to 3 significant digits)")
    assert (skip.to_json()["every"], "reversed" in skip.to_json()) == (2, False)
    [third] = check_dataset(reader, "train", [template.value["numeric every third step, first "
                                                             "dropped"]]).findings
    assert "shares 19 consecutive steps (every third step of steps 4-58 of 60 " in str(third)
    [back] = check_dataset(reader, "train", [template.value["numeric reversed, first step "
                                                            "dropped"]]).findings
    assert (back.shared, back.every, back.reversed) == ((1, 59, 60), 1, True)
    assert "shares 59 consecutive steps (steps 59-1 of 60 of held-out episode held-num" \
           in str(back)
    assert str(back).endswith(", reversed in time")
    assert (back.to_json()["reversed"], "every" in back.to_json()) == (True, False)
    [both] = check_dataset(reader, "train", [template.value["numeric reversed, every other "
                                                            "step"]]).findings  # copy26
    assert (both.shared, both.every, both.reversed) == ((2, 60, 60), 2, True)
    assert "shares 30 consecutive steps (every second step of steps 60-2 of 60 of held-out " \
           "episode held-num" in str(both) and str(both).endswith(", reversed in time")
    assert (both.to_json()["reversed"], both.to_json()["every"]) == (True, 2)
    [fourth] = check_dataset(reader, "train", [template.value["numeric every fourth step of "
                                                              "128, from the second"]]).findings
    assert "shares 32 consecutive steps (every fourth step of steps 2-126 of 128 of held-out " \
           "episode held-long" in str(fourth)
    [ahead] = check_dataset(reader, "train", [template.value["numeric first step dropped"]]
                            ).findings
    assert {"every", "reversed", "columns"}.isdisjoint(ahead.to_json())  # as before
    for name, shared in (("columns permuted", (1, 60, 60)),  # copy28
                         ("columns permuted, first 10 steps dropped", (11, 60, 60)),
                         ("one column duplicated, permuted", (1, 60, 60))):
        [cols] = check_dataset(reader, "train", [template.value[f"numeric {name}"]]).findings
        assert (cols.shared, cols.every, cols.reversed, cols.columns) == (shared, 1, False, True)
        a, b, _ = shared
        assert f"shares {b - a + 1} consecutive steps (steps {a}-{b} of 60 of held-out episode " \
               "held-num" in str(cols), name
        assert str(cols).endswith("(equal to 3 significant digits), its columns reordered or "
                                  "duplicated (of an image: its frames flipped, their channels "
                                  "reordered or rescaled)")
        assert (cols.to_json()["columns"], {"every", "reversed", "added"} & set(cols.to_json())
                ) == (True, set())
    # copy30; copy31: the run named whole (on 5f64dc8: 28 steps 1-28, 18 steps 11-28: each
    # window of `step_windows.LONG` steps counted as 16)
    for name, held, shared in (("one-hot columns permuted", "held-grid", (1, 60, 60)),
                               ("one-hot columns permuted, first 10 steps dropped", "held-grid",
                                (11, 60, 60)),
                               ("Dict, columns permuted in each member", "held-dict",
                                (1, 60, 60)),
                               ("one-hot of 40 steps, columns permuted", "held-short",
                                (1, 40, 40))):
        [cols] = check_dataset(reader, "train", [template.value[f"numeric {name}"]]).findings
        assert (cols.other_episode, cols.shared, cols.every, cols.reversed, cols.columns) == (
            held, shared, 1, False, True), name
        a, b, _ = shared
        assert f"shares {b - a + 1} consecutive steps (steps {a}-{b} of {shared[2]} of held-out " \
               f"episode {held} of batch " in str(cols), name
        assert str(cols).endswith(", its columns reordered or duplicated (of an image: its "
                                  "frames flipped, their channels reordered or rescaled)")
    [third] = check_dataset(reader, "train", [template.value["numeric reversed, every third "
                                                             "step"]]).findings  # copy28
    assert (third.shared, third.every, third.reversed) == ((3, 60, 60), 3, True)
    assert "shares 20 consecutive steps (every third step of steps 60-3 of 60 of held-out " \
           "episode held-num" in str(third) and str(third).endswith(", reversed in time")
    [fifth] = check_dataset(reader, "train", [template.value["numeric every fifth step of 128, "
                                                             "from the fifth"]]).findings
    assert "shares 25 consecutive steps (every fifth step of steps 5-125 of 128 of held-out " \
           "episode held-long" in str(fifth) and fifth.to_json()["every"] == 5


def test_the_gate_refuses_a_shared_run_of_steps(
    template: testkit.Template[dict[str, str]], ledger: Ledger
) -> None:
    """The gate finds the run from the bytes it verified, and fails under the default policy."""
    train_set(ledger, "cut", template.value["numeric split 50+10"])
    path = ledger.root / "policy.toml"
    with pytest.raises(DataRefusedError) as e:
        admit(ledger, "cut@1", TrustPolicy.from_toml(path.read_bytes(), path.parent))
    [failure] = e.value.report.failures()
    assert ("exact duplicate: train episode n7-0 of batch " in failure
            and "shares 50 consecutive steps (steps 1-50 of 60 of held-out episode held-num"
            in failure), failure
    train_set(ledger, "skip", template.value["numeric every other step"])  # win25
    with pytest.raises(DataRefusedError) as e:
        admit(ledger, "skip@1", TrustPolicy.from_toml(path.read_bytes(), path.parent))
    [failure] = e.value.report.failures()
    assert "shares 30 consecutive steps (every second step of steps 1-59 of 60 of held-out " \
           "episode held-num" in failure, failure
    reordered = (", its columns reordered or duplicated (of an image: its frames flipped, their "
                 "channels reordered or rescaled)")
    clock = ", with a clock column (the step number or a time) added"  # copy35: what was added
    standing = ", with a column of one value (a task id, a bias) or earlier frames (a frame " \
               "stack) added"
    for name, copy, says, ends in (  # copy28; copy30; copy31 (the run named whole; a short
            # episode); clock33: a clock added or dropped (the windows without it)
            ("cols", "one column duplicated, permuted", "60 consecutive steps (steps 1-60 of 60 "
             "of held-out episode held-num", reordered),
            ("grid", "one-hot columns permuted", "60 consecutive steps (steps 1-60 of 60 of "
             "held-out episode held-grid", reordered),
            ("short", "one-hot of 40 steps, columns permuted", "40 consecutive steps (steps "
             "1-40 of 40 of held-out episode held-short", reordered),
            ("timed", "step number appended", "60 consecutive steps (steps 1-60 of 60 of "
             "held-out episode held-num", "(equal to 3 significant digits)" + clock),
            ("timed-grid", "one-hot with the step number, columns permuted", "60 consecutive "
             "steps (steps 1-60 of 60 of held-out episode held-grid", reordered + clock),
            ("task", "task id appended", "60 consecutive steps (steps 1-60 of 60 of held-out "
             "episode held-num", standing),
            ("stamp", "a time stamp appended", "60 consecutive steps (steps 1-60 of 60 of "
             "held-out episode held-num", standing),
            ("stack", "4 frames stacked, first 5 steps dropped", "55 consecutive steps (steps "
             "6-60 of 60 of held-out episode held-num", standing),  # win36
            ("untimed", "recorded with a clock, the clock dropped", "57 consecutive steps "
             "(steps 4-60 of 60 of held-out episode held-timed", "(equal to 3 significant "
             "digits)"),  # the held side's clock: not said
            ("unstacked", "a held stack's newest frames, first 5 steps dropped", "55 "
             "consecutive steps (steps 6-60 of 60 of held-out episode held-stacked", "(equal "
             "to 3 significant digits)"),  # win37: the held side's stack, not said either
            ("image", "image, RGB <-> BGR, first 5 steps dropped", "51 consecutive steps "  # img34
             "(steps 10-60 of 60 of held-out episode held-image", reordered)):  # the held
        # windows from steps 6 to 9 hold fewer than `step_windows.MIN_DISTINCT` frames
        train_set(ledger, name, template.value[f"numeric {copy}"])
        with pytest.raises(DataRefusedError) as e:
            admit(ledger, f"{name}@1", TrustPolicy.from_toml(path.read_bytes(), path.parent))
        [failure] = e.value.report.failures()
        assert f"shares {says}" in failure and failure.endswith(ends), failure


def test_the_policy_may_rank_shared_runs_as_near(
    template: testkit.Template[dict[str, str]], ledger: Ledger
) -> None:
    """An environment whose genuine episodes share openings: the approvers sign ``runs =
    "near"``, and a shared run is then a near duplicate: reported by ``dataset create`` and the
    gate, not refused, unless ``refuse = "near"`` too (the lead, twelfth round)."""
    cut = template.value["numeric first step dropped"]
    policy = refuse_near(ledger, '[contamination]\nruns = "near"\n')
    made = create_dataset(ledger, "cut", "1", "train", [cut], ledger.keys.signer("vendor"))
    assert [n for n in made.near_duplicates if "shares 59 consecutive steps" in n], made
    approve(ledger, "cut@1", ledger.keys.signer("approver"))
    report = admit(ledger, "cut@1", policy).report
    assert not report.failures()
    assert "1 near duplicate(s) (first: train episode n5-0 of batch" in "\n".join(
        report.render())
    policy = refuse_near(ledger, '[contamination]\nruns = "near"\nrefuse = "near"\n', 3)
    with pytest.raises(DataRefusedError) as e:
        admit(ledger, "cut@1", policy)
    assert any("near duplicate: train episode n5-0" in f for f in e.value.report.failures())


def test_padding_shared_by_unrelated_episodes_is_not_a_run(ledger: Ledger) -> None:
    """Unrelated episodes that share 30 steps of padding (all zeros) and 20 of a static
    scene flickering between two frames are not copies: windows of fewer than
    `step_windows.MIN_DISTINCT` distinct steps are not compared."""
    rng = np.random.default_rng(11)
    pad = np.zeros((30, 4))
    flicker = np.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0]] * 10)

    def episode(name: str) -> list[dict[str, Any]]:
        walk = np.cumsum(rng.normal(0, 0.05, size=(20, 4)), axis=0)
        return numeric_rows(name, np.vstack([walk, pad, flicker]), [0] * 70)

    vendor = ledger.keys.signer("vendor")
    held = record_batch(ledger, episode("held-pad"), env="grid@1", policy="p",
                        signer=vendor).recorded.digest
    create_dataset(ledger, "held-pad", "1", "holdout", [held], vendor)
    train = record_batch(ledger, episode("train-pad"), env="grid@1", policy="p",
                         signer=vendor).recorded.digest
    found = check_dataset(ledger, "train", [train]).findings
    assert [f for f in found if f.other_episode == "held-pad"] == []


def test_normalised_fingerprints_of_steps_without_text() -> None:
    """A numeric step (no text in any column) among chat steps: pyarrow's join dropped its
    row, so the texts no longer lined up with the steps and the whole batch raised
    ``ValueError`` (``dataset create``: the chats were not compared once normalised, the gate:
    "unchecked", refused). Now such a row holds no text, and the chat's fingerprint is that of
    the chat alone."""
    import pyarrow as pa

    from trajledger.ledger.text_fingerprint import normalised_fingerprints

    def steps(rows: list[tuple[str, str | None, str | None]]) -> pa.RecordBatch:
        return pa.record_batch({
            "episode_id": [e for e, _, _ in rows], "role": [r for _, r, _ in rows],
            "content": pa.array([c for _, _, c in rows], pa.string()),
            "tool_calls": pa.nulls(len(rows), pa.string())})

    chat = [("c", "user", "Hello there"), ("c", "assistant", "Hi")]
    alone = dict(normalised_fingerprints([steps(chat)]))
    mixed = dict(normalised_fingerprints([steps([("n", None, None), *chat, ("m", None, None)])]))
    assert mixed == alone and set(alone) == {"c"}


def kept_files(ledger: Ledger) -> dict[str, Path]:
    """The kept runs of steps and normalised texts (`window_cache`), by the episodes named."""
    from trajledger.ledger.window_cache import decode

    out = {}
    for path in sorted((ledger.root / "index" / "features").glob("w*/*.windows")):
        got = decode(path.read_bytes(), "sha256:" + path.stem)
        names = (got.windows.episode_ids if got.windows else []) + [
            e for e, _ in got.normalised or []]
        out[",".join(names)] = path
    return out


def rewritten(ledger: Ledger, path: Path, cut: str, first: DatasetCheck, bad: tuple[bytes, ...],
              says: tuple[str, ...], regroup: bool = False) -> None:
    """Each of ``bad`` written at ``path`` (``regroup``: the held side's grouped file
    dropped, so that the batches' kept files are read): the check of ``cut`` finds what
    ``first`` found, with one warning that says ``says``, and the file is rewritten."""
    good = path.read_bytes()
    for data in bad:
        path.write_bytes(data)
        if regroup:
            forget_grouped(ledger.root / "index" / "features")
        check = check_dataset(ledger, "train", [cut])
        assert check.findings == first.findings
        [warning] = check.warnings
        assert all(s in warning for s in says), warning
        assert path.read_bytes() == good  # rewritten


def test_kept_runs_and_texts_decide_as_the_step_files(
    template: testkit.Template[dict[str, str]], ledger: Ledger
) -> None:
    """Issue 21's rule, the fast path decides as the slow one: the held side's and the train
    side's windows and normalised fingerprints, kept in index/features by the first check,
    give the findings computed from the step files; a truncated, damaged, another step file's
    or another version's kept file is computed again, with a warning, and rewritten."""
    def each() -> dict[str, DatasetCheck]:  # one set per transform: each finding is seen
        return {b: check_dataset(ledger, "train", [b]) for b in template.value.values()}

    first = each()  # keeps the train side's
    kept = kept_files(ledger)
    name = "held-num,other-num,held-long"
    held = kept[name]
    assert {"held-chat,other-chat", name} <= set(kept) and len(kept) > 2
    found = [f for c in first.values() for f in c.findings]
    assert [f for f in found if f.shared] and [f for f in found if f.normalised]
    assert each() == first  # everything from the kept files
    assert not [w for c in first.values() for w in c.warnings]
    shutil.rmtree(ledger.root / "index" / "features")
    assert each() == first  # from the step files
    good = held.read_bytes()
    other = kept["held-chat,other-chat"].read_bytes()
    cut = template.value["numeric first step dropped"]
    start = len(window_cache.MAGIC) + 4  # rev29: a header nested past the recursion limit
    rest = good[start + int.from_bytes(good[start - 4 : start], "little") :]
    rewritten(ledger, held, cut, first[cut],
              (good[:-5], good[:-100] + bytes([good[-100] ^ 4]) + good[-99:], other,
               good.replace(b'"version":%d' % WINDOWS_VERSION,
                            b'"version":%d' % (WINDOWS_VERSION + 1)),
               good[: start - 4] + (4_000).to_bytes(4, "little") + b"[" * 4_000 + rest),
              ("its kept runs of steps and normalised text (",
               "computed from its steps.parquet again"), regroup=True)
    # A file kept by the previous version (win25: 2, the held side's other orders; copy26: 3,
    # more orders) is in its own directory: not read, no warning (not one a batch), computed
    # again and kept anew.
    held.unlink()
    old = held.parent.parent / f"w{WINDOWS_VERSION - 1}" / held.name
    old.parent.mkdir()
    old.write_bytes(good.replace(b'"version":%d' % WINDOWS_VERSION,
                                 b'"version":%d' % (WINDOWS_VERSION - 1)))
    forget_grouped(ledger.root / "index" / "features")
    check = check_dataset(ledger, "train", [cut])
    assert (check.findings, list(check.warnings)) == (first[cut].findings, [])
    assert held.read_bytes() == good


def test_a_forged_kept_file_does_not_reach_the_gate(
    template: testkit.Template[dict[str, str]], ledger: Ledger
) -> None:
    """Whoever writes the ledger's directory can write a well-formed kept file without the
    held episode's windows: ``dataset create`` trusts the derived cache as it trusts the
    cached features (docs/SECURITY.md, thirteenth round, cache24), but the gate computes the
    windows from the bytes it verified and still refuses the copy."""
    from trajledger.ledger.step_windows import ORDERS
    from trajledger.ledger.window_cache import Compared, decode, encode

    cut = template.value["numeric first step dropped"]
    assert [f for f in check_dataset(ledger, "train", [cut]).findings if f.shared]
    held = kept_files(ledger)["held-num,other-num,held-long"]
    steps = "sha256:" + held.stem
    real = decode(held.read_bytes(), steps)
    assert real.windows is not None
    none = dataclasses.replace(real.windows, episode_ids=[], lengths=real.windows.lengths[:0],
                               episode=real.windows.episode[:0], start=real.windows.start[:0],
                               hashes=real.windows.hashes[:0])
    forged = encode(Compared(none, real.few[:0], real.normalised,
                             [(real.windows.hashes[:0], real.few[:0])] * (len(ORDERS) - 1),
                             (real.windows.hashes[:0], real.few[:0]),
                             (real.windows.start[:0], real.windows.hashes[:0], real.few[:0],
                              real.windows.hashes[:0], real.few[:0]),
                             (real.windows.start[:0], real.windows.hashes[:0],
                              real.windows.hashes[:0])), steps)
    assert forged is not None
    held.write_bytes(forged)
    forget_grouped(ledger.root / "index" / "features")  # grouped again from the forged file
    assert not [f for f in check_dataset(ledger, "train", [cut]).findings if f.shared]
    train_set(ledger, "cut", cut)
    path = ledger.root / "policy.toml"
    with pytest.raises(DataRefusedError) as e:
        admit(ledger, "cut@1", TrustPolicy.from_toml(path.read_bytes(), path.parent))
    assert any("shares 59 consecutive steps" in f for f in e.value.report.failures())


def test_the_held_side_grouped_decides_as_its_windows(
    template: testkit.Template[dict[str, str]], ledger: Ledger, as_they_are: dict[str, DatasetCheck]
) -> None:
    """hold30: the held side's windows grouped by hash, kept in one file per holdout
    (`held_windows`) and looked up, give every probe's findings as the held windows held as
    they are (the slow path, `Matcher.hold_windows`); a truncated, damaged (in its hashes, or
    where its windows are: found when a hit reads it), another version's file is grouped
    again, with a warning, and rewritten."""

    def each() -> dict[str, DatasetCheck]:
        return {b: check_dataset(ledger, "train", [b]) for b in template.value.values()}

    cache = ledger.root / "index" / "features"
    first = each()
    [path] = cache.glob("w*/held-*.grouped")
    assert [f for c in first.values() for f in c.findings if f.shared]
    assert first == as_they_are  # the windows held as they are decide the same
    assert each() == first  # looked up in the file
    forget_grouped(cache)
    assert each() == first  # grouped again
    good = path.read_bytes()
    head = len(b"trajledger-held-windows\n") + 4
    header = json.loads(good[head : head + int.from_bytes(good[head - 4 : head], "little")])
    hashes = head + int.from_bytes(good[head - 4 : head], "little")  # the header padded
    n = header["windows"]
    where = hashes + 8 * n
    cut = template.value["numeric first step dropped"]
    # rev29 (seventeenth round): a header nested past Python's recursion limit, a count, an
    # episode's first or a segment's order given as Infinity (on main: RecursionError,
    # OverflowError, a traceback from ``dataset create``).
    crafted = [b"[" * 100_000, *(json.dumps(h).encode() for h in (
        {**header, "windows": float("inf")}, {**header, "first": [0, float("inf")]},
        {**header, "segments": [[0, float("inf")]]}))]
    rewritten(ledger, path, cut, first[cut],
              (good[:-5], good[: hashes + 3] + bytes([good[hashes + 3] ^ 8]) + good[hashes + 4 :],
               good[:where] + bytes(12 * n) + good[where + 12 * n :],
               good.replace(b'"version":%d' % WINDOWS_VERSION,
                            b'"version":%d' % (WINDOWS_VERSION + 1)),
               *(good[: head - 4] + len(c).to_bytes(4, "little") + c + good[hashes:]
                 for c in crafted)),
              ("the held side's grouped step windows (",
               "grouped again from the held batches' windows"))


def test_a_grouping_failed_midway_decides_as_its_windows(
    template: testkit.Template[dict[str, str]], ledger: Ledger, monkeypatch: pytest.MonkeyPatch,
    as_they_are: dict[str, DatasetCheck],
) -> None:
    """hold31: a grouping that fails once it took the windows from each batch's list (its
    file, grouped in sorted runs of 256 windows, cannot be read back: deleted meanwhile, a
    disk's EIO) holds each batch's windows as they are, taken again from their kept files:
    every probe's findings, no warning."""
    from trajledger.ledger import held_windows

    cache = ledger.root / "index" / "features"

    def each() -> dict[str, DatasetCheck]:
        out = {}
        for b in template.value.values():
            forget_grouped(cache)
            out[b] = check_dataset(ledger, "train", [b])
        return out

    def gone(path: Path, held: Any) -> Any:
        calls.append(path)
        raise OSError(errno.EIO, "Input/output error")

    calls: list[Path] = []
    # Runs of 256: the held side's 2,751 windows in eleven runs, spilled to the scratch file
    # and merged as a large held side's are (runs of 4, 688 of them, made each probe's
    # grouping most of the test's time, ci53).
    monkeypatch.setattr(held_windows, "RUN", 256)
    monkeypatch.setattr(held_windows, "read", gone)
    assert each() == as_they_are
    assert len(calls) == len(as_they_are)


def test_a_held_batch_not_read_is_said_once(
    template: testkit.Template[dict[str, str]], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hold31: held batches whose windows cannot be read (nothing grouped: each batch's
    windows held as they are) are each said once, not read (and said) again for being empty
    as `group_file` leaves the batches it took."""
    from trajledger.ledger import contamination

    real = contamination.read_kept

    def unreadable(cache: Path, digest: str, wanted: Any) -> Any:
        if wanted[2]:  # the held side's
            raise ValueError("unreadable")
        return real(cache, digest, wanted)

    monkeypatch.setattr(contamination, "read_kept", unreadable)
    forget_grouped(ledger.root / "index" / "features")
    check = check_dataset(ledger, "train", [next(iter(template.value.values()))])
    said = [w for w in check.warnings if "unreadable" in w]
    assert said and len(said) == len(set(said))


def test_the_held_batches_are_grouped_one_at_a_time(
    template: testkit.Template[dict[str, str]], ledger: Ledger, monkeypatch: pytest.MonkeyPatch,
    as_they_are: dict[str, DatasetCheck],
) -> None:
    """hold32: the held side is grouped batch by batch: a held batch's windows are read from
    its kept file only once those of every batch before it were given to the grouping and
    taken into its runs (their lists emptied, nothing else holding them), and every probe's
    findings and warnings are those of the windows held as they are."""
    from trajledger.ledger import contamination

    cache = ledger.root / "index" / "features"
    group, read = contamination.group_file, contamination.read_kept
    given: list[list[Any]] = []
    reads: list[str] = []

    def grouping(path: Path, batches: Any, windows: Any, held: Any, **kw: Any) -> Any:
        def each() -> Any:
            for ws in windows:
                given.append(ws)
                yield ws
        return group(path, batches, each(), held, **kw)

    def read_kept(cache: Path, digest: str, wanted: Any) -> Any:
        if wanted[1] and wanted[2]:  # a held batch's windows
            assert len(given) == len(reads) and not any(given), (
                "a held batch's windows read before the one before it was taken")
            reads.append(digest)
        return read(cache, digest, wanted)

    def each() -> dict[str, DatasetCheck]:
        out = {}
        for b in template.value.values():
            forget_grouped(cache)
            given.clear()
            reads.clear()
            out[b] = check_dataset(ledger, "train", [b])
            assert len(given) == len(reads) == 8  # each held numeric batch once (num, grid,
            # dict, wide, short, timed: clock33's held-timed since the eighteenth round; image:
            # img34's held-image since the nineteenth; win37's held-stacked)
        return out

    monkeypatch.setattr(contamination, "group_file", grouping)
    monkeypatch.setattr(contamination, "read_kept", read_kept)
    assert each() == as_they_are
    assert [f for c in as_they_are.values() for f in c.findings if f.shared]


def test_a_held_batch_not_read_midway_leaves_the_others_held(
    template: testkit.Template[dict[str, str]], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hold32: when the third held batch's windows cannot be read, the grouping stops there
    (the first two already taken into its runs): the first two are taken again from their kept
    files and every batch but the third held as it is; every probe's findings and warnings
    (the third batch's said once) are those of the windows held as they are."""
    from trajledger.ledger import contamination

    cache, real, seen = ledger.root / "index" / "features", contamination.read_kept, []

    def third_unreadable(cache: Path, digest: str, wanted: Any) -> Any:
        if wanted[1] and wanted[2] and digest not in seen:  # a held batch's windows
            seen.append(digest)
        if len(seen) > 2 and digest == seen[2]:
            raise ValueError("unreadable")
        return real(cache, digest, wanted)

    def each() -> dict[str, DatasetCheck]:
        out = {}
        for b in template.value.values():
            forget_grouped(cache)
            out[b] = check_dataset(ledger, "train", [b])
            said = [w for w in out[b].warnings if "unreadable" in w]
            assert len(said) == 1, said
        return out

    monkeypatch.setattr(contamination, "read_kept", third_unreadable)
    with monkeypatch.context() as m:
        m.setattr(contamination, "group_file", lambda *_, **__: None)  # each batch's as they are
        want = each()
    assert each() == want
    assert not list(cache.glob("w*/held-*.grouped"))
    assert [f for c in want.values() for f in c.findings if f.shared]


def test_erasing_a_batch_deletes_the_grouped_held_windows(ledger: Ledger) -> None:
    """An erased held batch's windows are in the held side's grouped file: erasing deletes
    it (nothing derived from erased data is kept), as it deletes the batch's kept windows."""
    from trajledger.ledger.batch_features import forget_cached

    cache = ledger.root / "index" / "features"
    grouped = list(cache.glob("w*/held-*.grouped"))
    assert grouped
    forget_cached(cache, "sha256:" + "1" * 64)
    assert not [p for p in grouped if p.exists()]



def test_a_threshold_string_no_one_wrote_is_refused_and_a_recorded_one_fails_closed(
    template: testkit.Template[dict[str, str]], ledger: Ledger
) -> None:
    """hour33's Left (left34): a ``[contamination]`` threshold given as a string was read by
    Python's ``float``: ``"0.9_9"`` was 0.99, a number nobody wrote. ``policy check`` and
    ``policy set`` refuse such a file (one line, nothing recorded), as ``[release]``'s bounds
    (left33, `release_rules.bound_problem`). A policy already recorded with one (signed by
    other software: it cannot be rewritten) stays in force, and no dataset passes its check:
    ``dataset create`` and the gate both fail it, naming the threshold, until a successor
    writes it as a number."""
    from trajledger.ledger.record import record_statement
    from trajledger.ledger.signing import canonical_json
    from trajledger.verify.policy import load_policy_file, policy_digest

    home = ledger.root
    said = ("contamination: numeric_threshold '0.9_9' is not a JSON number (RFC 8259: digits, "
            "an optional fraction and exponent; no spaces, '_', '+' or '.' first)")
    bad = home / "bad.toml"
    bad.write_text(POLICY.format(serial=2, vkey=ledger.log.vkey,
                                 extra=NEAR + 'numeric_threshold = "0.9_9"\n'))
    size = ledger.log.size
    for command in (["policy", "check", bad], ["policy", "set", bad, "--key", "approver",
                                                "--yes"]):
        r = testkit.invoke(home, *command)  # the file judged: 1; the user's to fix: 2 (left36)
        assert r.exit_code == (1 if command[1] == "check" else 2), r.output
        assert r.stderr == f"FAIL: policy {bad}: {said}; write it as a JSON number, as 0.9\n"
    assert ledger.log.size == size
    good = home / "good.toml"
    for fine in ('"0.99"', "0.99"):
        good.write_text(POLICY.format(serial=2, vkey=ledger.log.vkey,
                                      extra=NEAR + f"numeric_threshold = {fine}\n"))
        assert testkit.invoke(home, "policy", "check", good).exit_code == 0
    # Recorded by other software: its statement says "0.9_9" (its subject: the JSON form's
    # digest, "0.99").
    new = load_policy_file(good)
    body = new.to_json()
    body["contamination"]["numeric_threshold"] = "0.9_9"
    ledger.store.put_bytes(canonical_json(new.to_json()))
    record_statement(ledger, "holdout-copies#2", policy_digest(new), predicates.TRUST_POLICY,
                     {"policy": body}, [ledger.keys.signer("approver")])
    rules = policy_rules(ledger)
    assert rules.numeric_threshold == 0.99 and rules.unreadable
    line = (f"the policy's {said}, so no dataset passes its check; record a policy that writes "
            "it as a JSON number")
    size = ledger.log.size
    with pytest.raises(PolicyError, match="^dataset far@1 \\(train\\): " + line.replace(
            "(", "\\(").replace(")", "\\)").replace("+", "\\+").replace(".", "\\.") + "$"):
        create_dataset(ledger, "far", "1", "train", [template.value["text white space"]],
                       ledger.keys.signer("vendor"))
    assert ledger.log.size == size
    train_set(ledger, "copies", template.value["numeric rounded 3 decimals"])
    with pytest.raises(DataRefusedError) as e:
        admit(ledger, "copies@1", TrustPolicy.from_json(body))
    assert any(line in f for f in e.value.report.failures()), e.value.report.failures()
    # A successor that writes it as a number ends it.
    good.write_text(POLICY.format(serial=3, vkey=ledger.log.vkey,
                                  extra=NEAR + 'numeric_threshold = "0.99"\n'))
    record_policy(ledger, good, [ledger.keys.signer("approver")])
    assert not policy_rules(ledger).unreadable


# -- the windows kept at record time (win39) ----------------------------------------------------


def windows_of(ledger: Ledger, batch: str) -> Path:
    """Where the derived cache keeps the windows of ``batch``'s step file."""
    from trajledger.ledger.batch_features import batch_files

    return window_cache.cache_file(ledger.root / "index" / "features",
                                   batch_files(ledger.store, batch)["steps.parquet"])


def no_compute(*_args: object) -> None:
    raise AssertionError("dataset create computed windows kept at record time")


def test_windows_kept_at_record_time_decide_as_those_of_dataset_create(
    template: testkit.Template[dict[str, str]], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21 item 1 (win39): each batch's step windows and normalised text fingerprints
    are kept while it is recorded (`record_windows`), so that the first ``dataset create``
    of a train set computes none; they are the bytes ``dataset create`` computes from the
    step file, and decide as they do for every copy of the probe table (held copies, near
    copies, frame-skipped, reversed, clock and standing columns, images, Dict spaces, frame
    stacks, texts)."""
    from trajledger.ledger import contamination

    cache = ledger.root / "index" / "features"
    kept = {p.name: p.read_bytes() for p in cache.glob("w*/*.windows")}
    assert len(kept) > len(template.value) // 2
    assert {windows_of(ledger, template.value[k]).name for k in (
        "text case", "numeric reversed", "numeric step number appended", "numeric wide, "
        "first step dropped", "numeric image, flipped left to right", "numeric Dict, first "
        "step dropped", "numeric 4 frames stacked, first 5 steps dropped")} <= set(kept)

    def each() -> dict[str, DatasetCheck]:  # one set per transform: each finding is seen
        return {b: check_dataset(ledger, "train", [b]) for b in template.value.values()}

    with monkeypatch.context() as m:
        m.setattr(contamination, "compute", no_compute)
        fast = each()
    assert not [w for c in fast.values() for w in c.warnings]
    found = [f for c in fast.values() for f in c.findings]
    assert [f for f in found if f.shared] and [f for f in found if f.normalised]
    shutil.rmtree(cache)
    assert each() == fast  # computed from the step files by dataset create
    assert {p.name: p.read_bytes() for p in cache.glob("w*/*.windows")} == kept


def test_a_batch_without_windows_kept_at_record_time_is_checked_as_before(
    template: testkit.Template[dict[str, str]], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch recorded by an older tree (no windows kept), by this one with more than
    `record_windows.RECORD_STEPS` steps, or whose recording ended between its commit and
    keeping its windows: ``dataset create`` computes them from the step file, keeps them, and
    finds what it finds with them kept at record time. A kept file damaged or another step
    file's is not used (a warning, computed again, rewritten); a file already kept (the held
    side's, with its other orders) is left as it is by recording the batch again; none is
    kept for a step file erased between the commit and the write."""
    from trajledger.ledger import record_windows
    from trajledger.ledger.catalog import Catalog

    cut = template.value["numeric first step dropped"]
    want = check_dataset(ledger, "train", [cut])
    assert [f for f in want.findings if f.shared]
    path = windows_of(ledger, cut)
    good = path.read_bytes()
    path.unlink()  # as an older tree recorded it
    assert check_dataset(ledger, "train", [cut]) == want
    assert path.read_bytes() == good
    other = windows_of(ledger, template.value["numeric reversed"]).read_bytes()
    rewritten(ledger, path, cut, want, (good[:-3], good[:-40] + bytes([good[-40] ^ 1])
                                        + good[-39:], other),
              ("its kept runs of steps and normalised text (",
               "computed from its steps.parquet again"))
    vendor = ledger.keys.signer("vendor")

    def crash(*_args: object) -> None:
        raise KeyboardInterrupt

    for name, where, patch in (("crashed", window_cache, ("keep", crash)),
                               ("large", record_windows, ("RECORD_STEPS", 50))):
        with monkeypatch.context() as m:
            m.setattr(where, *patch)
            try:
                record_batch(ledger, numeric_rows(name, OBS[2:], ACT[2:]), env="grid@1",
                             policy="p", signer=vendor, name=name)
            except KeyboardInterrupt:
                assert name == "crashed"
        batch = Catalog(ledger).resolve(name).digest  # committed
        assert not windows_of(ledger, batch).exists()
        found = check_dataset(ledger, "train", [batch])
        assert [(f.other_episode, f.train_episode, f.train_batch, bool(f.shared))
                for f in found.findings] == [("held-num", name, batch, True)], found.findings
        assert windows_of(ledger, batch).exists()
    # The system failing a read of the files being recorded is an operational error before
    # the commit (lead26's rule); any other failure to compute them leaves them to create.
    size = ledger.log.size
    for errno_, name in ((errno.EIO, "unread"), (errno.ENOENT, "uncomputed")):
        def fails(*_args: object, e: int = errno_) -> None:
            raise OSError(e, os.strerror(e))

        with monkeypatch.context() as m:
            m.setattr(window_cache, "compute", fails)
            try:
                record_batch(ledger, numeric_rows(name, OBS[3:], ACT[3:]), env="grid@1",
                             policy="p", signer=vendor, name=name)
            except OSError as e:
                assert e.errno == errno.EIO
        assert ledger.log.size == size + (name == "uncomputed")
    assert not windows_of(ledger, Catalog(ledger).resolve("uncomputed").digest).exists()
    # An erasure between the commit and the write (the blob deleted, then its derived files,
    # `status.delete_erased`): nothing derived from the erased step file is kept.
    real = window_cache.keep

    def erased_first(cache: Path, steps: str, got: Any) -> None:
        ledger.store.delete(steps)
        real(cache, steps, got)

    with monkeypatch.context() as m:
        m.setattr(window_cache, "keep", erased_first)
        gone = record_batch(ledger, numeric_rows("erased", OBS[4:], ACT[4:]), env="grid@1",
                            policy="p", signer=vendor, name="erased").recorded.digest
    assert not windows_of(ledger, gone).exists()
    held = windows_of(ledger, Catalog(ledger).resolve("held-grid").digest)
    before = held.read_bytes()
    record_batch(ledger, numeric_rows("held-grid", GRID, ACT), env="grid@1", policy="p",
                 signer=vendor, name="held-grid")
    assert held.read_bytes() == before


def test_no_windows_are_kept_for_a_step_file_erased_while_dataset_create_computed_them(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev37 (win39's Left 5): ``dataset create`` computes a batch's windows from a verified
    copy and keeps them outside the log's lock; an erasure of the batch in that moment (the
    blob deleted, then its derived files: `status.delete_erased`) left the windows of an
    erased step file in the derived cache. `contamination._Reader` checks the blob after the
    write, as `record_windows.kept` does."""
    from trajledger.ledger import contamination, record_windows

    with monkeypatch.context() as m:
        m.setattr(record_windows, "RECORD_STEPS", 50)  # none kept at record time
        batch = record_batch(ledger, numeric_rows("racing", OBS[5:], ACT[5:]), env="grid@1",
                             policy="p", signer=ledger.keys.signer("vendor"),
                             name="racing").recorded.digest
    where = windows_of(ledger, batch)
    assert not where.exists()
    real = contamination.keep

    def erased_first(cache: Path, steps: str, got: Any) -> None:
        ledger.store.delete(steps)  # the erasure, between the computation and the write
        real(cache, steps, got)

    with monkeypatch.context() as m:
        m.setattr(contamination, "keep", erased_first)
        check_dataset(ledger, "train", [batch])
    assert not where.exists()


def test_no_features_are_kept_for_a_step_file_erased_while_they_were_computed(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """rev38 (rev37's Left): `batch_features.batch_features` computes a batch's features from
    a verified copy of its step file and caches them outside the log's lock; an erasure in
    that moment (the blob deleted, then its derived files: `status.delete_erased`) left the
    features of an erased step file in the derived cache. The blob is checked after the
    write, as `record_windows.kept` does."""
    from trajledger.ledger import batch_features as bf
    from trajledger.ledger.status import delete_erased

    batch = record_batch(ledger, numeric_rows("racing", OBS[5:], ACT[5:]), env="grid@1",
                         policy="p", signer=ledger.keys.signer("vendor"),
                         name="racing").recorded.digest
    steps = bf.batch_files(ledger.store, batch)["steps.parquet"]
    cache = ledger.root / "index" / "features"
    real = bf.iter_step_features

    def erased_after(*args: Any) -> Any:
        got = list(real(*args))
        with ledger.log.exclusive():  # the erasure, between the computation and the write
            delete_erased(ledger, [steps], done=str)
        return got

    monkeypatch.setattr(bf, "iter_step_features", erased_after)
    got = bf.batch_features(ledger.store, batch, None, workdir=tmp_path, cache=cache)
    assert got.source == "computed" and got.chunk is not None
    assert not bf.cache_path(cache, steps).exists()


def test_no_grouped_held_windows_are_kept_for_a_step_file_erased_while_grouping(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev38 (rev37's Left): ``dataset create`` groups the held side's windows into a file of
    the derived cache outside the log's lock (`held_windows.group_file`); an erasure of a held
    batch once its windows were taken (the blob deleted, then its derived files, the grouped
    files among them) left a grouped file holding the windows of an erased step file. The
    held step files are checked once the file is in place: it is deleted if one is gone (this
    call goes on with what it grouped, from the file it holds open)."""
    from trajledger.ledger import contamination
    from trajledger.ledger.status import delete_erased

    held = Path(ledger.root / "index" / "features")
    forget_grouped(held)
    real = contamination.group_file
    erased: list[str] = []

    def racing(path: Path, batches: Any, windows: Any, key: Any, *a: Any, **k: Any) -> Any:
        def then_erased() -> Any:
            yield from windows
            erased.append(key[0][1])
            with ledger.log.exclusive():
                delete_erased(ledger, erased, done=str)
        return real(path, batches, then_erased(), key, *a, **k)

    monkeypatch.setattr(contamination, "group_file", racing)
    train = record_batch(ledger, numeric_rows("racing", OBS[5:], ACT[5:]), env="grid@1",
                         policy="p", signer=ledger.keys.signer("vendor"),
                         name="racing").recorded.digest
    check_dataset(ledger, "train", [train])
    assert erased
    assert not [p.name for p in held.glob("w*/held-*")]


def test_an_erasure_leaves_no_filter_of_the_held_sides_windows(ledger: Ledger) -> None:
    """rev38: erasing a batch deleted the held side's grouped windows (they may hold its
    windows) but not the filter of their hashes beside them, nor its stamp
    (``held-*.filter``, ``held-*.checked``, held37 and held38): derived from erased data."""
    from trajledger.ledger.batch_features import batch_files
    from trajledger.ledger.catalog import Catalog
    from trajledger.ledger.status import delete_erased

    held = Path(ledger.root / "index" / "features")
    train = record_batch(ledger, numeric_rows("racing", OBS[5:], ACT[5:]), env="grid@1",
                         policy="p", signer=ledger.keys.signer("vendor"),
                         name="racing").recorded.digest
    check_dataset(ledger, "train", [train])
    assert [p for p in held.glob("w*/held-*.filter")]
    steps = batch_files(ledger.store, Catalog(ledger).resolve("held-num").digest)["steps.parquet"]
    with ledger.log.exclusive():
        delete_erased(ledger, [steps], done=str)
    assert not [p.name for p in held.glob("w*/held-*")]
