"""The one grammar of the names and versions a new record is given.

Scope: `check_name` (a NAME or a VERSION of an environment, evaluator, dataset or checkpoint
this ledger records, and a key's name), `check_origin` (a new log's origin: the same with ``/``
and ``:``), `GRAMMAR` (what it says when it refuses), `check_new` (the grammar, and no recorded
name or version the new one equals but for letter case), `imported_problem` (why an
imported name could mislead: the caller warns), `origin_problem` (likewise another log's
origin, at ``import`` and ``monitor``) and `suite_problems` (a policy's release suites, at
``policy check`` and ``policy set``). Names are what people approve and audit by
(``approve cartpole-train@1``): a new one is ASCII letters, digits, ``.``, ``_`` and ``-``,
starting with a letter or digit, so that it cannot pass for another (``cartpole‐train`` with
U+2010), become a path (``../x``, ``a/b``), hold a control character or clash with the
reference syntax (``@`` ends a name, ``+`` follows an origin: ``ORIGIN+NAME@V``).
Non-scope: records already in a log, this ledger's older ones and another vendor's imported
ones: they keep the name they were signed with and still verify (the verifier never judges a
name); where they are shown, they are escaped (`verify.report`) and an import warns of
look-alikes (`record.lookalike`). Batch names (unversioned, ``rollouts-ENV@V-seedN``) and
the subject names of ``record`` / ``sign`` / ``attest`` (a file's name) keep
`record.check_subject_name`.
Spec: ``schemas/SPEC.md`` ("Names and versions").
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from trajledger.verify.errors import FormatError, PolicyError
from trajledger.verify.report import HIDDEN

if TYPE_CHECKING:
    from .trust_index import TrustIndex

__all__ = ["GRAMMAR", "NAME_MAX", "ORIGIN_MAX", "VERSION_MAX", "check_name", "check_new",
           "check_origin", "imported_problem", "origin_problem", "suite_problems"]

NAME_MAX = 128
VERSION_MAX = 64
ORIGIN_MAX = 255
_FORM = "[A-Za-z0-9][A-Za-z0-9._-]{{0,{m}}}"
GRAMMAR = ("1-{n} ASCII letters, digits, '.', '_' or '-', starting with a letter or digit "
           f"({_FORM})")
_FIRST, _REST = "A-Za-z0-9", "A-Za-z0-9._-"


def check_name(value: str, what: str, longest: int = NAME_MAX) -> str:
    """``value`` if it is a new record's name (or version, with ``longest=VERSION_MAX``).

    Raises:
        FormatError: one line: ``what``, the value (escaped: `ascii`), and the grammar.
    """
    if not re.fullmatch(f"[{_FIRST}][{_REST}]{{0,{longest - 1}}}", value):
        raise FormatError(f"{what} {_shown(value)}: use "
                          f"{GRAMMAR.format(n=longest, m=longest - 1)}")
    return value


def check_origin(value: str) -> str:
    """``value`` if it is a new log's origin (``init --origin``): the grammar of names with
    ``/`` and ``:`` too (``vendor.example/log``; C2SP note key names hold no ``+`` and no
    space), so that a log's name shown to a buyer (``imported ... from ORIGIN+KEYHASH``)
    cannot pass for another's (``vendor‐example/log``, U+2010).

    Raises:
        FormatError: one line: the value (escaped) and the grammar.
    """
    if not re.fullmatch(f"[{_FIRST}][/:{_REST}]{{0,{ORIGIN_MAX - 1}}}", value):
        raise FormatError(f"origin {_shown(value)}: use 1-{ORIGIN_MAX} ASCII letters, digits, "
                          f"'.', '_', '-', '/' or ':', starting with a letter or digit")
    return value


def origin_problem(origin: str) -> str:
    """Why another log's ``origin`` could mislead a reader of this ledger, or ``""``: off the
    grammar of new origins (`check_origin`), as ``vendor‐example/log`` (U+2010) that every
    listing shows as ``vendor-example/log``. The log is trusted by its key, never by this
    name: the caller warns."""
    try:
        check_origin(origin)
    except FormatError:
        return ("is off the grammar of log origins ([A-Za-z0-9][A-Za-z0-9._/:-]{0,254}): it "
                "may pass for another log's")
    return ""


def suite_problems(policy: Any) -> list[str]:
    """One line for each ``[[release.require]] suite`` of ``policy`` (a `TrustPolicy`) whose
    NAME or VERSION is off the grammar: the verifier takes it as signed (a suite may be
    another vendor's, named before the grammar), but a suite named ``regression‐suite@1``
    (U+2010) is not the ``regression-suite@1`` its reviewer reads."""
    out = []
    for req in policy.release.require if policy.release is not None else ():
        name, _, version = req.suite.rpartition("@")
        try:
            check_name(name, "name")
            check_name(version, "version", VERSION_MAX)
        except FormatError as e:
            out.append(f"[[release.require]] suite {req.suite!a}: its {e}; is it the suite you "
                       "mean? (pin it with digest = \"sha256:...\")")
    return out


def _shown(value: str) -> str:
    return ascii(value) if len(value) <= 80 else f"{value[:40]!a}... ({len(value)} characters)"


def check_new(state: TrustIndex, kind: str, name: str, version: str) -> None:
    """Refuse a new record's ``name`` and ``version`` off the grammar, or one that differs
    from a recorded name (any kind, this ledger's or imported), or a recorded version of that
    name, only in letter case (``Cartpole-train`` beside ``cartpole-train``: one would pass
    for the other in a listing, and they are one directory on a case-insensitive file system).

    Raises:
        FormatError: off the grammar.
        PolicyError: a twin in letter case is recorded.
    """
    check_name(name, f"{kind} name")
    check_name(version, f"{kind} version", VERSION_MAX)
    for r in state.by_folded_name(name):
        other_version = r.version != version and r.version.lower() == version.lower()
        twin = r.name if r.name != name else f"{name}@{r.version}" if other_version else None
        if twin is not None:
            raise PolicyError(
                f"{kind} {name}@{version}: {r.kind} {twin.translate(HIDDEN)} is recorded (log "
                f"index {r.index}), the same name but for letter case; use that spelling or "
                "another name"
            )


def imported_problem(state: TrustIndex, name: str, version: str) -> str:
    """Why an imported record's ``name`` and ``version`` could mislead a reader of this
    ledger, or ``""``: off the grammar (``cartpole‐train`` with U+2010, which no listing tells
    from ``cartpole-train``), or equal to another recorded name but for letter case. The
    record is another log's, signed as it is: it is kept, and the caller warns."""
    try:
        check_name(name, "name")
        check_name(version, "version", VERSION_MAX)
    except FormatError:
        return (f"is off the grammar of this ledger's names ({_FORM.format(m=NAME_MAX - 1)}, "
                f"a version {{0,{VERSION_MAX - 1}}}): it may pass for another name")
    twin = next((r.name for r in state.by_folded_name(name) if r.name != name), None)
    if twin is None:
        return ""
    return f"differs from the recorded name {twin.translate(HIDDEN)!r} only in letter case"
