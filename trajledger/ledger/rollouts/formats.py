"""What LLM training libraries write, mapped onto rollout schema v3, one record at a time.

Scope: the record formats (a record is a JSON line, or a row of a Parquet/Arrow file read as a
dict), `RECORD_FORMATS`: `kind_of_record` names the format from a record's keys, `map_record`
maps a record with its format's mapping: chat rollouts (``messages``: ``chat.py``), TRL's
completions table, TRL's dataset types and verl's rollout dumps (``trl_verl.py``). The mappings
read fields one way (``fields.py``) and give `Episode` objects, which `ChunkBuilder`
(``chunk_builder.py``) collects into `RolloutChunk` objects of bounded size. This module is the
table of formats, above the modules of one job each it was split into (no module over 1,000
lines).
Non-scope: reading files and decompressing (``readers.py``, ``jsonl.py``), normalising and
validating the tables (``normalise.py``, ``validate.py``).
Spec: ``schemas/rollout-inputs.md`` (each mapping, field by field), ``schemas/rollout.v3.md``.

Nothing is dropped: fields a mapping does not place in a column are kept in the episode's (or,
for message fields, the step's) ``extras`` as typed JSON. Each bad record is reported with its
line (or row) and field, and left out; the caller raises after the whole input is read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .chat import map_chat
from .chunk_builder import Episode
from .chunks import ReaderOptions, RecordProblems
from .trl_verl import (
    map_trl_completions,
    map_trl_preference,
    map_trl_prompt_completion,
    map_verl,
)

__all__ = ["RECORD_FORMATS", "kind_of_record", "map_record"]


RECORD_FORMATS: Final = (
    "chat-jsonl",
    "trl-completions",
    "trl-prompt-completion",
    "trl-preference",
    "trl-kto",
    "verl-jsonl",
)
"""Formats whose records are mapped here (as JSON lines, or rows of Parquet/Arrow files)."""


_MAPPERS: Final[
    dict[str, Callable[[dict[str, Any], RecordProblems, ReaderOptions], list[Episode]]]
] = {
    "chat-jsonl": map_chat,
    "trl-completions": map_trl_completions,
    "trl-prompt-completion": map_trl_prompt_completion,
    "trl-kto": map_trl_prompt_completion,
    "trl-preference": map_trl_preference,
    "verl-jsonl": map_verl,
}


def kind_of_record(keys: set[str] | frozenset[str]) -> str | None:
    """Name a record format from the keys of a first record (or the columns of a table).

    Returns:
        One of `RECORD_FORMATS`, or None when the keys fit none.
    """
    if "messages" in keys:
        return "chat-jsonl"
    if "chosen" in keys and "rejected" in keys:
        return "trl-preference"
    if "completion" in keys and "prompt" in keys and ("advantage" in keys or "step" in keys):
        return "trl-completions"
    if "completion" in keys and "label" in keys:
        return "trl-kto"
    if "completion" in keys:
        return "trl-prompt-completion"
    if ("response" in keys or "output" in keys) and ("prompt" in keys or "input" in keys):
        return "verl-jsonl"
    return None


def map_record(
    kind: str, obj: dict[str, Any], rec: RecordProblems, opts: ReaderOptions
) -> list[Episode]:
    """Map one record of format ``kind`` to its episodes (two for a preference pair)."""
    return _MAPPERS[kind](obj, rec, opts)
