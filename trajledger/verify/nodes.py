"""The nodes of a verified graph: what every check writes, and nothing that reads a graph.

Scope: `Status` (of a check, a node or a record) and its values, `Direction`, `Check`, `Node` (an
artifact, the log, or a decision, with its checks), `Edge`; `HIDDEN`, the escapes of every line a
report renders (`hide`), and `UNDECODABLE`, those of a lone surrogate; `short`, a digest cut for a
message. Pure data: no I/O, no evidence, no policy.
Non-scope: the graph and its verdict, causes and forms (``verify.report``, ``verify.blame``,
``verify.report_json``), which stand above this module and read these types.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from enum import StrEnum

from .kinds import KINDS

__all__ = ["ERASED", "FAIL", "HIDDEN", "INFO", "NAMED", "OK", "UNDECODABLE", "Check", "Direction",
           "Edge", "Node", "Status", "hide", "short"]


class Status(StrEnum):
    """The outcome of a check, a node or a record (str-valued: the JSON form is the value)."""

    OK = "ok"
    FAIL = "fail"
    ERASED = "erased"
    """Blobs deleted by a valid erasure (digests and signed records still verify)."""
    INFO = "info"


class Direction(StrEnum):
    """Which way a report follows its edges (`Report.direction`)."""

    UPSTREAM = "upstream"
    DOWNSTREAM = "downstream"


OK, FAIL, ERASED, INFO = Status.OK, Status.FAIL, Status.ERASED, Status.INFO

# Each lone surrogate as text any strict parser and UTF-8 encoder takes: the one ``os.fsdecode``
# makes of a byte that is not UTF-8 (a file name made under ``LANG=C``) as that byte, ``\xfd``,
# as ``backslashreplace`` shows bytes; any other as ``\udXXX``. The one table (rev39: there were
# three) of every line a report renders (`HIDDEN`), the verifier's ``--json``
# (``verify.report_json``), and trajledger's messages and ``--json`` (docs/cli.md, "Names that
# are not UTF-8"; out41).
UNDECODABLE = {c: f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c < 0xDD00 else f"\\u{c:04x}"
               for c in range(0xD800, 0xE000)}

# Escaped (as ``\u001b``) in every line a report renders: control characters, NEL, line and
# paragraph separators and bidirectional controls. A signer chooses names, licences and reasons:
# none may erase, redraw, break or reorder what a reader sees (the lines' own breaks remain).
# And a lone surrogate as `UNDECODABLE` shows it.
HIDDEN = {c: f"\\u{c:04x}" for c in (*range(32), *range(127, 160), 0x61C, 0x200E, 0x200F,
                                      *range(0x2028, 0x202F), *range(0x2066, 0x206A))} | UNDECODABLE


def hide(line: str) -> str:
    """``line.translate(HIDDEN)``, the table looked up only for a line that is not printable:
    every character of `HIDDEN` is a control, a format character, a separator or a surrogate,
    none printable, and nearly every line a report renders is (walk50: a lineage of 1,003
    records rendered in 10 ms less)."""
    return line if line.isprintable() else line.translate(HIDDEN)


class _Named(dict[int, str]):
    """And in a signed name (`Node.label`), which the ledger never records with them:
    parentheses (a name holding ``(sha256:<another digest>)`` passed for the subject's in an OK
    line, rev32) and, beyond ASCII, every character that shows as another or as nothing (rev33):
    a compatibility form (``（`` fullwidth, ``﹙`` small: NFKC changes it), a look-alike
    parenthesis (``❨``), a variation selector, a filler or a joiner, a format, private,
    unassigned or space character (soft hyphen, tags, invisible operators)."""

    def __missing__(self, c: int) -> str:
        ch, what = chr(c), unicodedata.name(chr(c), "")
        odd = unicodedata.category(ch)[0] in "CZ" or unicodedata.normalize("NFKC", ch) != ch
        odd |= any(w in what for w in ("PARENTHES", "VARIATION", "FILLER", "JOINER", "INHERENT"))
        return self.setdefault(c, ascii(ch)[1:-1] if c > 127 and odd else ch)  # \xad, \uff08


NAMED = _Named(HIDDEN | {40: "\\u0028", 41: "\\u0029"})


def short(digest: str) -> str:
    """``sha256:1234abcd12…``: a digest cut for a message (other text unchanged)."""
    return digest[:19] + "…" if len(digest) > 20 else digest


@dataclass
class Check:
    """One check of a node: what was checked, its outcome and why.

    Attributes:
        what: e.g. ``files``, ``record``, ``revoked``, ``dataset cartpole@2: approvals``.
        status: ``ok``, ``fail``, ``erased`` (blobs deleted by a valid erasure) or ``info``.
        detail: the reason or a short fact.
    """

    what: str
    status: Status = OK
    detail: str = ""
    cause: str | None = None
    """For a failure that follows from another node's (a record signed by a key the policy
    does not hold, a batch left unverified because its checkpoint failed): that node's id."""


@dataclass
class Node:
    """One node of a report: an artifact (keyed by digest), the log, or a decision.

    Attributes:
        id: the artifact's digest, ``log``, or ``<decision>:<digest>``.
        kind: the artifact kind, ``log`` or the decision (``admission``).
        name, version: from the artifact's signed predicate (empty when unknown).
        index: the log index of its identity record, when it has one.
        signers: keyids that signed that record.
        checks: every check made of it.
    """

    id: str
    kind: str
    name: str = ""
    version: str = ""
    index: int | None = None
    signers: tuple[str, ...] = ()
    checks: list[Check] = field(default_factory=list)

    def add(self, what: str, status: Status = OK, detail: str = "", cause: str | None = None
            ) -> Check:
        """Record a check and return it."""
        c = Check(what, status, detail, cause)
        self.checks.append(c)
        return c

    def fail(self, what: str, detail: str, cause: str | None = None) -> Check:
        """Record a failed check (``cause``: the node whose failure it follows from)."""
        return self.add(what, FAIL, detail, cause)

    @property
    def status(self) -> Status:
        """``fail`` when a check failed; else ``erased`` when data was erased; else ``ok``."""
        statuses = {c.status for c in self.checks}
        return FAIL if FAIL in statuses else ERASED if ERASED in statuses else OK

    @property
    def ok(self) -> bool:
        """True when no check of this node failed."""
        return self.status != FAIL

    @property
    def label(self) -> str:
        """``kind name@version (sha256:1234abcd…)`` (or the node's own name; a name that
        begins with the kind once: ``release of X``), escaped (`NAMED`): messages name nodes
        by it."""
        if self.kind in KINDS:
            ref = (f"{self.name}@{self.version}" if self.version else self.name).translate(NAMED)
            kind = "" if ref.startswith(f"{self.kind} ") else f"{self.kind} "  # "release of X"
            return f"{kind}{ref} ({short(self.id)})" if ref else f"{self.kind} {short(self.id)}"
        return hide(self.name or self.kind)


@dataclass(frozen=True)
class Edge:
    """``src`` depends on ``dst`` in the role ``role`` (a dataset's ``batch``...)."""

    src: str
    dst: str
    role: str
