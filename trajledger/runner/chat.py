"""Chat data in the rollout tables: recognising it, and reading it back as conversations.

Scope: an LLM-agent batch stores one step per message (``role``, ``content``,
``reasoning_content``, ``tool_calls``, ``tool_results``; schemas/rollout-inputs.md, "Message
objects"). `conversations` turns the step table back into one conversation per episode, in the
shape chat templates and TRL's conversational datasets take (``{"messages": [{"role",
"content"}, ...]}``). `is_chat` tells chat data from observation/action data, and `CHAT_HINT`
is what a trainer that needs observations says when it is given messages.

Non-scope: rendering prompts (the tokenizer's chat template does), rewards (episode columns).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CHAT_HINT", "conversations", "is_chat"]

CHAT_HINT: Final = (
    "these steps are chat messages (role and content, no observation or action): train on them "
    "with your own trainer, either as a command that reads the verified data from "
    "$TRAJLEDGER_DATA_DIR ('trajledger train --dataset D --key K --name N --version V -- "
    "COMMAND', e.g. -- python sft.py) or in Python with 'with ledger.training(D, ...) as run' "
    "and trajledger.integrations.transformers.LedgerCallback for a Hugging Face or TRL trainer "
    "(docs/trainers.md)"
)
"""What to do with chat data given to an observation/action trainer."""

_LINK_KEYS: Final = frozenset({"tool_call_id", "name"})


def is_chat(steps: pa.Table) -> bool:
    """True when some step is a message (has a ``role``) and none has an obs and an action."""
    import pyarrow.compute as pc

    if "role" not in steps.column_names or steps.num_rows == 0:
        return False
    if not pc.any(pc.is_valid(steps["role"])).as_py():
        return False
    if "obs" in steps.column_names and "action" in steps.column_names:
        both = pc.and_(pc.is_valid(steps["obs"]), pc.is_valid(steps["action"]))
        return not pc.any(both).as_py()
    return True


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text  # validated JSON when recorded; keep the text if a reader differs


def conversations(steps: pa.Table) -> list[dict[str, Any]]:
    """One conversation per episode, in table order: ``{"episode_id", "messages"}``.

    A message has ``role`` and ``content`` (a string, or null), and when present
    ``reasoning_content``, ``tool_calls`` (parsed JSON) and, for a tool message whose
    ``tool_results`` is the link ``{"tool_call_id", "name"}``, those two keys (as OpenAI-style
    tool messages carry them); other ``tool_results`` are given parsed as ``tool_results``.
    Steps without a role (not messages) are left out.
    """
    names = set(steps.column_names)
    wanted = [c for c in ("episode_id", "role", "content", "reasoning_content", "tool_calls",
                          "tool_results") if c in names]
    rows = steps.select(wanted).to_pylist()
    out: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for row in rows:
        if current is None or current["episode_id"] != row["episode_id"]:
            current = {"episode_id": row["episode_id"], "messages": []}
            out.append(current)
        role = row.get("role")
        if role is None:
            continue
        message: dict[str, Any] = {"role": role, "content": row.get("content")}
        if row.get("reasoning_content") is not None:
            message["reasoning_content"] = row["reasoning_content"]
        if row.get("tool_calls") is not None:
            message["tool_calls"] = _json(row["tool_calls"])
        results = _json(row.get("tool_results"))
        if isinstance(results, dict) and results and set(results) <= _LINK_KEYS:
            message.update(results)
        elif results is not None:
            message["tool_results"] = results
        current["messages"].append(message)
    return [c for c in out if c["messages"]]
