"""``[release]`` of a trust policy (format 2): the evaluations a release needs.

Scope: `ReleaseRules` and `Requirement` (a suite ``NAME@VERSION``, a metric and its bounds:
``min``, ``max``, ``max_drop`` from the parent checkpoint's), their parsing (`parse_release`,
for ``verify.policy``) and `requirement_problems` (one metric against one rule). Loaded only
for a policy with ``[release]``, and by the release judgement (``verify.releases``).
Non-scope: the rest of the policy (``verify.policy``), judging evaluation records
(``verify.releases``).
Spec: keys/README.md (``[release]``), schemas/SPEC.md section "Release".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from .digest import parse_digest
from .errors import FormatError, refuse_unknown

if TYPE_CHECKING:
    from .keys import Identity, PublicKey

__all__ = ["ReleaseRules", "Requirement", "Signers", "bound_problem", "finite_number",
           "parse_release", "refuse_unreadable", "requirement_problems"]


class Signers(Protocol):
    """The evaluator role as ``[release]`` is checked against it: a `verify.policy.Role`
    (``verify.policy`` stands above this module)."""

    @property
    def keys(self) -> tuple[PublicKey, ...]: ...

    @property
    def identities(self) -> tuple[Identity, ...]: ...


def finite_number(value: object, what: str) -> float:
    """A finite number (TOML or JSON number, or a decimal string as the JSON form writes; also
    for ``[contamination]``, `verify.contamination_rules`)."""
    try:
        if type(value) in (int, float) or isinstance(value, str):
            number = float(value)  # type: ignore[arg-type]
            if math.isfinite(number):
                return number
    except (ValueError, OverflowError):  # OverflowError: an integer of 309 digits or more
        pass
    raise FormatError(f"{what}: {value!r} is not a finite number")


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


def bound_problem(value: object) -> str | None:
    """Why a bound given as a string (the JSON form writes `repr` of the float) is no number
    anyone wrote, or None: off the JSON number grammar (RFC 8259 section 6), which Python's
    ``float`` reads past (``'1_0'`` is 10, ``' 0.5 '`` 0.5, ``'+1'``, ``'.5'``, other scripts'
    digits), or not zero but read as 0 (``'1e-400'``: it underflows). Review left33."""
    if not isinstance(value, str):
        return None
    if not _JSON_NUMBER.fullmatch(value):
        return ("is not a JSON number (RFC 8259: digits, an optional fraction and exponent; "
                "no spaces, '_', '+' or '.' first)")
    if float(value) == 0 and value.split("e")[0].split("E")[0].strip("-0.") != "":
        return "is too small to hold: it reads as 0"
    return None


@dataclass(frozen=True)
class Requirement:
    """One rule of ``[release]``: the suite ``NAME@VERSION`` a checkpoint must be evaluated
    on, and bounds on one ``metric`` of that evaluation (``success_rate``, computed from the
    passed and failed episodes, by default): at least ``min``, at most ``max``, and no drop of
    more than ``max_drop`` (in the metric's units: 0.02 is 2 points of success rate) below the
    parent checkpoint's evaluation on the same suite (judged by
    `requirement_problems`). With ``digest``, the suite is the dataset of that digest only
    (it must carry the name and be held out): no other record of the name counts."""

    suite: str
    metric: str = "success_rate"
    min: float | None = None
    max: float | None = None
    max_drop: float | None = None
    digest: str | None = None
    unreadable: str = ""
    """Why a bound of a recorded policy is no number anyone wrote (`bound_problem`): such a
    policy, signed, cannot be rewritten, so the rule passes no release (fail closed); a policy
    file with one is refused (`refuse_unreadable`). Not in the JSON form."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form (bounds as decimal strings: the policy is hashed as RFC 8785 JSON,
        which the verifier canonicalises without floating point)."""
        out: dict[str, Any] = {"suite": self.suite, "metric": self.metric}
        if self.digest is not None:
            out["digest"] = self.digest
        for k in ("min", "max", "max_drop"):
            if (v := getattr(self, k)) is not None:
                out[k] = repr(v)
        return out


@dataclass(frozen=True)
class ReleaseRules:
    """``[release]``: the evaluations a release needs (`Requirement`), how many approvers
    must have recorded it (``approvals``) and whether each evaluation it cites must record
    the comparison of its suite with every train batch of its checkpoint's lineage
    (``require_contamination_check``; default: such an evaluation counts, said: rel48)."""

    require: tuple[Requirement, ...]
    approvals: int = 1
    require_contamination_check: bool = False

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``require_contamination_check`` only when set: a policy without it
        keeps its digest)."""
        out = {"approvals": self.approvals, "require": [r.to_json() for r in self.require]}
        return out | ({"require_contamination_check": True}
                      if self.require_contamination_check else {})


_METRIC = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_REQUIREMENT = {"suite", "digest", "metric", "min", "max", "max_drop"}


def parse_release(value: object, evaluator: Signers, what: str) -> ReleaseRules | None:
    """``[release]``: ``approvals`` (default 1), ``require_contamination_check`` (``true`` or
    ``false``, the default) and ``[[release.require]]`` tables of ``suite``
    (``NAME@VERSION``), optionally its ``digest`` (``sha256:...``), ``metric`` (default
    ``success_rate``) and ``min`` / ``max`` / ``max_drop`` (at least one)."""
    if value is None:
        return None
    what = f"{what}: release"
    if not isinstance(value, dict):
        raise FormatError(f"{what}: must be a table of approvals, require and "
                          "require_contamination_check")
    refuse_unknown(set(value), {"approvals", "require", "require_contamination_check"},
                   f"{what}: unknown setting(s)")
    approvals = value.get("approvals", 1)
    if type(approvals) is not int or approvals < 1:
        raise FormatError(f"{what}: approvals must be an integer >= 1, got {approvals!r}")
    checked = value.get("require_contamination_check", False)
    if type(checked) is not bool:  # (not 1, "true" or "yes": a TOML boolean, unquoted)
        raise FormatError(f"{what}: require_contamination_check must be true or false "
                          f"(unquoted), got {checked!r}: true refuses a release citing an "
                          "evaluation whose suite was not compared with every train batch of "
                          "its checkpoint; leave it out for the default, false")
    require = value.get("require", [])
    if not isinstance(require, list):
        raise FormatError(f"{what}: require: must be a list")
    out: list[Requirement] = []
    for i, item in enumerate(require):
        here = f"{what}: require item {i}"
        if not isinstance(item, dict):
            raise FormatError(f"{here}: must be a table of {', '.join(sorted(_REQUIREMENT))}")
        refuse_unknown(set(item), _REQUIREMENT, f"{here}: unknown setting(s)")
        suite, metric = item.get("suite"), item.get("metric", "success_rate")
        name, at, version = suite.rpartition("@") if isinstance(suite, str) else ("", "", "")
        if not (isinstance(suite, str) and name and at and version):
            raise FormatError(f"{here}: suite {suite!r} must be NAME@VERSION")
        if not isinstance(metric, str) or not _METRIC.fullmatch(metric):
            raise FormatError(f"{here}: metric {metric!r} is not a metric name")
        bounds = {k: finite_number(item[k], f"{here}: {k}") for k in ("min", "max", "max_drop")
                  if k in item}
        unreadable = "; ".join(f"{k} {item[k]!r} {p}" for k in ("min", "max", "max_drop")
                               if k in item and (p := bound_problem(item[k])))
        if not bounds or bounds.get("max_drop", 0) < 0:
            raise FormatError(f"{here}: give min, max or max_drop (max_drop >= 0)")
        if any(r.suite == suite and r.metric == metric for r in out):
            raise FormatError(f"{here}: {metric} on {suite} is required twice")
        digest = item.get("digest")
        if digest is not None:
            parse_digest(digest, f"{here}: digest")
        out.append(Requirement(suite, metric, **bounds, digest=digest, unreadable=unreadable))
    if not out:
        raise FormatError(f"{what}: require names no suite; add [[release.require]] tables")
    if not (evaluator.keys or evaluator.identities):
        raise FormatError(f"{what}: needs evaluator keys (roles.evaluator) to sign evaluations")
    return ReleaseRules(tuple(out), approvals, checked)


def refuse_unreadable(rules: ReleaseRules | None, what: str) -> None:
    """Refuse a policy file whose ``[release]`` bound is no number anyone wrote
    (`Requirement.unreadable`): ``policy set`` and ``policy check`` (a recorded one is judged,
    failing closed).

    Raises:
        FormatError: naming the first such bound.
    """
    for i, req in enumerate(rules.require if rules else ()):
        if req.unreadable:
            raise FormatError(f"{what}: release: require item {i}: {req.unreadable}; write it "
                              "as a JSON number, as 0.5 or 1e-3")


def requirement_problems(req: Requirement, value: float | None,
                         parent: float | None) -> list[str]:
    """Why ``value`` (and its drop from the parent's ``parent``, when the rule has
    ``max_drop`` and the checkpoint a parent) fails the rule ``req``; empty when it passes."""
    if value is None:
        return [f"the evaluation records no metric {req.metric!r}"]
    out = [f"the policy's {req.unreadable}, so this rule passes no release; record a policy "
           "that writes it as a JSON number"] if req.unreadable else []
    if req.min is not None and value < req.min:
        out.append(f"{req.metric} {value:.4g} is below the minimum {req.min:g}")
    if req.max is not None and value > req.max:
        out.append(f"{req.metric} {value:.4g} is above the maximum {req.max:g}")
    if req.max_drop is not None and parent is not None and drop(parent, value) > decimal(
            req.max_drop):
        out.append(f"{req.metric} {value:.4g} dropped {parent - value:.4g} from the parent's "
                   f"{parent:.4g}, more than {req.max_drop:g}")
    return out


def decimal(x: float) -> Decimal:
    """``x`` as the decimal it prints (its shortest form that reads back as ``x``)."""
    return Decimal(repr(x))


def drop(parent: float, value: float) -> Decimal:
    """How far ``value`` is below ``parent``: the difference of the decimals they print, so
    that 0.92 to 0.90 drops 0.02, not the 0.020000000000000018 of the binary floats'
    difference, which is more than a ``max_drop`` of 0.02 (hist30 finding 1)."""
    return decimal(parent) - decimal(value)
