"""What TRL and verl write, mapped onto rollout schema v3, one record at a time.

Scope: TRL's completions table (what ``GRPOTrainer.log`` writes to
``completions/completions_NNNNN.parquet`` with ``log_completions``, and its pandas JSONL
export), TRL's dataset types (prompt/completion, preference pairs, unpaired preference with a
KTO label; conversational ``messages`` is the chat format, ``chat.py``), and verl's rollout
dumps (``_write_generations``). A module apart from the chat mapping: trainers' outputs, each a
prompt and its completions with the trainer's reward columns and training step.
Non-scope: reading one field (``fields.py``), a prompt's or completion's messages
(``chat.py``), which format a record is (``formats.py``).
Spec: ``schemas/rollout-inputs.md`` (each mapping, field by field).
"""

from __future__ import annotations

import math
from typing import Any, Final

from .chat import text_or_messages
from .chunk_builder import Episode
from .chunks import ReaderOptions, RecordProblems
from .fields import beyond, episode_id_of, extras_of, is_num, opt

__all__ = [
    "map_trl_completions",
    "map_trl_preference",
    "map_trl_prompt_completion",
    "map_verl",
]


def _policy_step(obj: dict[str, Any], rec: RecordProblems) -> str | None:
    step = obj.get("step")
    if isinstance(step, float) and step.is_integer():
        step = int(step)  # pandas may write an integer column as floats
    step = opt({"step": step}, "step", "int", rec, "step")
    return None if step is None else str(step)


_TRL_FIXED: Final = frozenset({"episode_id", "task_id", "step", "prompt", "completion", "success"})


def map_trl_completions(
    obj: dict[str, Any], rec: RecordProblems, opts: ReaderOptions
) -> list[Episode]:
    """A row of TRL's completions table (``GRPOTrainer.log``; see rollout-inputs.md)."""
    steps = text_or_messages(obj.get("prompt"), "user", rec, "prompt")
    steps += text_or_messages(obj.get("completion"), "assistant", rec, "completion")
    weights = opts.reward_weights
    if weights is not None:
        for name in weights:
            if name not in obj:
                rec.error(name, "missing: a reward function named by --reward-weights")
        reward_cols = list(weights)
    else:
        reward_cols = [
            k
            for k, v in obj.items()
            if k not in _TRL_FIXED and k != "advantage" and (v is None or is_num(v))
        ]
    scores: list[tuple[str, float]] = []
    for name in reward_cols:
        v = obj.get(name)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue  # the function did not apply: a missing score, never a NaN reward
        if not is_num(v) or not math.isfinite(v):
            rec.error(name, f"reward function score {v!r}, want a finite number or NaN")
            continue
        scores.append((name, float(v)))
    reward: float | None
    if opts.reward_column is not None:
        v = obj.get(opts.reward_column)
        if opts.reward_column not in obj:
            rec.error(opts.reward_column, "missing: the column named by --reward-column")
        if v is None or (isinstance(v, float) and math.isnan(v)):
            reward = None
        elif is_num(v):
            reward = float(v)
        else:
            rec.error(opts.reward_column, beyond(v))
            reward = None
    elif scores:
        w = weights or {}
        try:  # TRL: weighted nansum (OverflowError past float64, ValueError of inf - inf)
            reward = math.fsum(w.get(n, 1.0) * s for n, s in scores)
        except (OverflowError, ValueError):
            reward = math.nan
        if not math.isfinite(reward):  # (an infinite or NaN weight, too)
            rec.error(None, "the weighted sum of the reward functions' scores is not a finite "
                      "number")  # fmt: skip
            reward = None
    else:
        reward = None  # every function returned None: unscorable, no reward
    attrs = {
        "task_id": opt(obj, "task_id", "str", rec, "task_id"),
        # Not TRL's `step`: it is the trainer's step when the table was logged, after that
        # step's update (and the buffers hold rows of earlier steps and of evaluations), so it
        # does not name the policy that generated the completions. It is kept as the extra
        # `step`; the policy version is `record --policy`'s.
        "judge_scores": scores or None,
        "success": opt(obj, "success", "bool", rec, "success"),
    }
    extras = extras_of(obj, (_TRL_FIXED - {"step"}) | set(reward_cols), rec)
    return [Episode(episode_id_of(obj, rec), steps, attrs, reward, False, extras)]


def map_trl_prompt_completion(
    obj: dict[str, Any], rec: RecordProblems, opts: ReaderOptions
) -> list[Episode]:
    """TRL prompt-completion dataset rows; with a boolean ``label``, unpaired preference (KTO)."""
    steps: list[dict[str, Any]] = []
    if obj.get("prompt") is not None:
        steps = text_or_messages(obj["prompt"], "user", rec, "prompt")
    steps += text_or_messages(obj.get("completion"), "assistant", rec, "completion")
    attrs: dict[str, Any] = {
        "task_id": opt(obj, "task_id", "str", rec, "task_id"),
        "success": opt(obj, "success", "bool", rec, "success"),
    }
    known = {"episode_id", "task_id", "prompt", "completion", "success"}
    if "label" in obj:
        label = opt(obj, "label", "bool", rec, "label")
        if label is None and obj.get("label") is None:
            rec.error("label", "null, want a boolean (KTO: desirable or not)")
        attrs["label"] = None if label is None else ("desirable" if label else "undesirable")
        known.add("label")
    reward = opt(obj, "reward", "num", rec, "reward")
    known.add("reward")
    extras = extras_of(obj, frozenset(known), rec)
    return [Episode(episode_id_of(obj, rec), steps, attrs, reward, False, extras)]


def map_trl_preference(
    obj: dict[str, Any], rec: RecordProblems, opts: ReaderOptions
) -> list[Episode]:
    """TRL preference rows: ``chosen`` and ``rejected`` (with or without ``prompt``) become two
    episodes of one group, labelled ``chosen`` and ``rejected``."""
    prompt: list[dict[str, Any]] = []
    if obj.get("prompt") is not None:
        prompt = text_or_messages(obj["prompt"], "user", rec, "prompt")
    base = episode_id_of(obj, rec)
    task = opt(obj, "task_id", "str", rec, "task_id")
    extras = extras_of(
        obj, frozenset({"episode_id", "task_id", "prompt", "chosen", "rejected"}), rec
    )
    out = []
    for side in ("chosen", "rejected"):
        steps = [dict(s) for s in prompt]
        steps += text_or_messages(obj.get(side), "assistant", rec, side)
        attrs = {"task_id": task, "label": side, "group_id": base}
        out.append(
            Episode(
                None if base is None else f"{base}/{side}",
                steps,
                attrs,
                None,
                False,
                dict(extras),
                id_suffix=f"/{side}",
            )
        )
    return out


_VERL_FIXED: Final = frozenset(
    {
        "episode_id",
        "task_id",
        "prompt",
        "input",
        "response",
        "output",
        "score",
        "reward",
        "step",
        "success",
    }
)


def _same_number(a: object, b: object) -> bool:
    return (a is None and b is None) or (is_num(a) and is_num(b) and a == b)


def map_verl(obj: dict[str, Any], rec: RecordProblems, opts: ReaderOptions) -> list[Episode]:
    """A line of verl's rollout dump (``RayPPOTrainer._write_generations``)."""
    for a, b in (("prompt", "input"), ("response", "output")):
        if a in obj and b in obj:
            rec.error(b, f"both {a} and {b} given, want one")
    # verl's validation dumps write the score twice (reward_extra_infos_dict["reward"]).
    if "score" in obj and "reward" in obj and not _same_number(obj["score"], obj["reward"]):
        rec.error("reward", f"both score ({obj['score']!r}) and reward ({obj['reward']!r}) "
                  "given, and they differ; want one, or the same number (verl's validation "
                  "dumps write both)")  # fmt: skip
    prompt = obj.get("prompt", obj.get("input"))
    response = obj.get("response", obj.get("output"))
    steps = text_or_messages(prompt, "user", rec, "prompt" if "prompt" in obj else "input")
    steps += text_or_messages(
        response, "assistant", rec, "response" if "response" in obj else "output"
    )
    key = "score" if "score" in obj else "reward"
    reward = opt(obj, key, "num", rec, key)
    extras = extras_of(obj, _VERL_FIXED, rec)
    # Numeric reward details (verl's reward_extra_info, e.g. acc) are also judge scores.
    scores = [
        (k, float(v))
        for k, v in obj.items()
        if k not in _VERL_FIXED
        and (is_num(v) or isinstance(v, bool))
        and math.isfinite(float(v))
        and k != "gts"
    ]
    uid = obj.get("uid")
    attrs = {
        "task_id": opt(obj, "task_id", "str", rec, "task_id"),
        "policy_version": _policy_step(obj, rec),
        "judge_scores": scores or None,
        # verl's uid names the prompt a group of n responses answers (GRPO's group).
        "group_id": uid if isinstance(uid, str) else None,
        "success": opt(obj, "success", "bool", rec, "success"),
    }
    return [Episode(episode_id_of(obj, rec), steps, attrs, reward, False, extras)]
