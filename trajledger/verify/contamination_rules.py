"""``[contamination]`` of a trust policy: whether near duplicates of held-out episodes are
refused, and at which similarity.

Scope: `ContaminationRules` (``refuse``: ``"exact"``, the default, or ``"near"``; optional
per-modality thresholds; ``runs``: whether a shared run of steps is exact, the default, or
near) and its parsing (`parse_contamination`, for ``verify.policy`` through
``verify.policy_settings``); the default near-duplicate thresholds (`NEAR_TEXT_THRESHOLD`,
`NEAR_NUMERIC_THRESHOLD`), which ``ledger.contamination`` compares at. Loaded only for a policy
with ``[contamination]`` and by the ledger's duplicate checks.
Non-scope: finding duplicates and refusing them (``ledger.contamination`` at ``dataset
create``, ``runner.admission`` at the gate): the verifier of a bundle does not read episodes.
Spec: keys/README.md (``[contamination]``), docs/audit-index.md ("Duplicates and contamination
between splits").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import FormatError, refuse_unknown
from .release_rules import bound_problem, finite_number

__all__ = [
    "NEAR_NUMERIC_THRESHOLD",
    "NEAR_TEXT_THRESHOLD",
    "REFUSE",
    "ContaminationRules",
    "parse_contamination",
]

NEAR_TEXT_THRESHOLD = 0.8
"""Text episodes are near duplicates at this cosine similarity or above (docs/audit-index.md)."""

NEAR_NUMERIC_THRESHOLD = 0.995
"""Numeric episodes are near duplicates at this cosine similarity or above."""

REFUSE = ("exact", "near")
"""What ``refuse`` may say: exact duplicates only (today's rule), or near ones too."""

_DEFAULTS = {"text": NEAR_TEXT_THRESHOLD, "numeric": NEAR_NUMERIC_THRESHOLD}
_KEYS = {"refuse", "runs", "text_threshold", "numeric_threshold"}


@dataclass(frozen=True)
class ContaminationRules:
    """``[contamination]``: with ``refuse = "near"``, ``dataset create`` and the admission gate
    refuse near duplicates of holdout / regression episodes as they refuse exact ones. A
    modality's threshold may only be lowered from its default (a lower similarity finds, and
    refuses, more): a policy that refuses near duplicates never refuses fewer than the default
    reports as near.

    ``runs = "near"`` makes a train episode that shares a run of steps with a held one
    (``ledger.step_windows``) a near duplicate instead of an exact one: for environments whose
    genuine episodes share openings (a fixed start and deterministic moves), where the
    approvers, who sign the policy, judge such runs not to be copies."""

    refuse: str = "exact"
    text_threshold: float | None = None
    numeric_threshold: float | None = None
    runs: str = "exact"
    unreadable: str = ""
    """Why a threshold of a recorded policy is no number anyone wrote (a string off the JSON
    number grammar: `release_rules.bound_problem`): such a policy, signed, cannot be rewritten,
    so no dataset passes its check (fail closed, `refused`); a policy file with one is refused
    (``ledger.policy_state.refuse_unreadable``; left34). Not in the JSON form."""

    def refused(self) -> str:
        """What fails every check while `unreadable` (empty when it is not)."""
        return (f"the policy's contamination: {self.unreadable}, so no dataset passes its check; "
                "record a policy that writes it as a JSON number") if self.unreadable else ""

    def thresholds(self) -> dict[str, float]:
        """The similarity at or above which each modality's episodes are near duplicates."""
        return {"text": self.text_threshold or NEAR_TEXT_THRESHOLD,
                "numeric": self.numeric_threshold or NEAR_NUMERIC_THRESHOLD}

    def to_json(self) -> dict[str, Any]:
        """The JSON form (thresholds as decimal strings, as ``[release]``'s bounds: the policy
        is hashed as RFC 8785 JSON, which the verifier canonicalises without floating point)."""
        out: dict[str, Any] = {"refuse": self.refuse}
        if self.runs != "exact":  # (a policy without it keeps its digest)
            out["runs"] = self.runs
        for k in ("text_threshold", "numeric_threshold"):
            if (v := getattr(self, k)) is not None:
                out[k] = repr(v)
        return out

    def describe(self) -> str:
        """One line for ``policy show`` / ``policy check``."""
        runs = ("; a shared run of steps is a near duplicate" if self.runs == "near" else "")
        if self.refuse == "exact":
            return f"  contamination refuses exact duplicates of held-out episodes{runs}"
        t = self.thresholds()
        return ("  contamination refuses exact and near duplicates of held-out episodes "
                f"(text similarity >= {t['text']:g}, numeric >= {t['numeric']:g}){runs}")


def parse_contamination(value: object, what: str) -> ContaminationRules:
    """``[contamination]``: ``refuse`` (``"exact"`` or ``"near"``, default ``"exact"``) and,
    with ``"near"``, optionally ``text_threshold`` / ``numeric_threshold``, each above 0 and at
    most its default (`NEAR_TEXT_THRESHOLD`, `NEAR_NUMERIC_THRESHOLD`); ``runs`` (``"exact"``
    or ``"near"``, default ``"exact"``).

    Raises:
        FormatError: another setting, another ``refuse`` or ``runs``, a threshold out of range
            or one set while only exact duplicates are refused (it would change nothing).
    """
    what = f"{what}: contamination"
    if not isinstance(value, dict):
        raise FormatError(f"{what}: must be a table of {', '.join(sorted(_KEYS))}")
    refuse_unknown(set(value), _KEYS, f"{what}: unknown setting(s)")
    refuse = value.get("refuse", "exact")
    if refuse not in REFUSE:
        raise FormatError(f"{what}: refuse {refuse!r}, want \"exact\" or \"near\"")
    runs = value.get("runs", "exact")
    if runs not in REFUSE:
        raise FormatError(f"{what}: runs {runs!r}, want \"exact\" or \"near\" (whether a "
                          "train episode sharing a run of steps with a held one is an exact "
                          "or a near duplicate)")
    out: dict[str, float] = {}
    for modality, default in _DEFAULTS.items():
        key = f"{modality}_threshold"
        if key not in value:
            continue
        if refuse != "near":
            raise FormatError(f"{what}: {key} is set but refuse is \"exact\", so it would "
                              "refuse nothing more; set refuse = \"near\"")
        number = finite_number(value[key], f"{what}: {key}")
        if not 0 < number <= default:
            raise FormatError(f"{what}: {key} {number:g} must be above 0 and at most the "
                              f"default {default:g} (a lower similarity refuses more; a higher "
                              "one would admit near duplicates the default reports)")
        out[key] = number
    unreadable = "; ".join(f"{k} {value[k]!r} {p}" for k in out
                           if (p := bound_problem(value[k])))  # ("0.9_9": Python's float)
    return ContaminationRules(refuse, runs=runs, unreadable=unreadable, **out)
