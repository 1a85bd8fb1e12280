"""Dataset cards: the producer's part, signed with the dataset, and the facts the records hold.

Scope:

- `ProducerCard`: what only the producer can say about a dataset (what the data is, how it was
  collected, with what consent, how long it may be kept, what personal or sensitive information
  it holds, what it is for, who may see it), read strictly from ``card.toml``
  (`ProducerCard.from_toml`: every problem reported, one line each) and stored as
  ``card.json``, its RFC 8785 bytes, in the dataset's manifest. A dataset recorded with a card
  is a ``dataset/v2`` record whose ``card`` names that file's digest (`verify.predicates`), so
  the card is signed with the dataset and every verifier checks its bytes.
- `dataset_card`: the card's facts about one dataset, each from a record verified under the
  trust policy (``verify.lineage``): digests, sizes, the split, licences and terms, environment
  and evaluator versions, approvals, revocations, erasures and the log checkpoint. The writers
  of Hugging Face and Croissant cards (``ledger.card_formats``) render these facts and nothing
  else.

Non-scope: rendering (``ledger.card_formats``); checking a card's bytes (``verify.lineage``
does, through `verify.kinds.Kind.documents`).
Spec: ``schemas/card.v1.schema.json``; ``docs/cards.md``.
"""

from __future__ import annotations

import base64
import datetime as dt
import difflib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajledger.verify.digest import digest_bytes
from trajledger.verify.errors import FormatError, VerificationError
from trajledger.verify.predicates import (
    CARD_MAX_BYTES,
    Approval,
    ArtifactRef,
    Dataset,
    DatasetV2,
    Erasure,
    Revocation,
    RolloutBatch,
)
from trajledger.verify.report import HIDDEN
from trajledger.verify.strict_json import load_object

from .signing import canonical_json

if TYPE_CHECKING:
    from trajledger.verify.lineage import LineageVerifier
    from trajledger.verify.policy import TrustPolicy

    from .home import LedgerHome

__all__ = [
    "CARD_FORMAT",
    "BatchFacts",
    "CardFacts",
    "FileFacts",
    "ProducerCard",
    "StatusFacts",
    "check_policy_allows_cards",
    "dataset_card",
]

CARD_FORMAT = 1
"""The ``format`` of ``card.json`` this version writes and reads."""
MAX_TEXT = 65536
"""The most characters one text of a card may hold."""
MAX_ITEMS = 256
"""The most items one list of a card may hold."""


# -- the producer's part -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Field:
    """One setting of ``card.toml``: its type, whether it is required, what it is for."""

    type: str  # text, texts, flag, dates, date, url, languages, format
    required: bool
    help: str


_TOP = {
    "format": _Field("format", False, f"the card format, {CARD_FORMAT}"),
    "description": _Field("text", True, "what the data is"),
    "title": _Field("text", False, "a human-readable name"),
    "creators": _Field("texts", False, "who made the data (people or organisations)"),
    "languages": _Field("languages", False, "languages of the content, as BCP 47 tags ('en')"),
    "tags": _Field("texts", False, "keywords"),
    "homepage": _Field("url", False, "an http(s) URL about the data"),
    "citation": _Field("text", False, "how to cite the data (BibTeX welcome)"),
}
_SECTIONS: dict[str, dict[str, _Field]] = {
    "collection": {
        "process": _Field("text", True, "how the data was collected"),
        "types": _Field("texts", False, "kinds of collection ('Software Collection', ...)"),
        "timeframe": _Field("dates", False, "when it was collected: [start] or [start, end]"),
        "source": _Field("text", False, "where the raw data came from"),
        "preprocessing": _Field("texts", False, "the steps applied before recording"),
    },
    "consent": {
        "obtained": _Field("text", True, "how consent was obtained, or why none was needed"),
        "withdrawal": _Field("text", False, "how a person withdraws consent"),
    },
    "retention": {
        "policy": _Field("text", True, "how long the data may be kept, and what happens then"),
        "until": _Field("date", False, "the date after which it must not be kept"),
    },
    "personal_information": {
        "contains": _Field("flag", True, "whether the data holds personal or sensitive "
                           "information (true or false)"),
        "categories": _Field("texts", False, "which kinds (required when contains = true)"),
        "handling": _Field("text", False, "how it is protected (anonymised, pseudonymised...)"),
    },
    "uses": {
        "intended": _Field("texts", True, "what the data is for (at least one use)"),
        "out_of_scope": _Field("texts", False, "uses it is not fit or not licensed for"),
        "limitations": _Field("texts", False, "known limits of the data"),
        "biases": _Field("texts", False, "known biases"),
    },
    "access": {
        "conditions": _Field("text", True, "who may see the data, and on what terms"),
        "contact": _Field("text", False, "whom to ask about the data"),
    },
}
_LANGUAGE = re.compile(r"[a-z]{2,3}(-[A-Za-z0-9]{1,8})*")
_URL = re.compile(r"https?://[^\s/?#]+[^\s]*")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# What a report escapes (control characters, NEL, line and paragraph separators, bidirectional
# controls) but tabs and line breaks: prose that holds them could reorder or hide what a reader
# of the card sees (review rev5), so a card holding any is refused, stored or not.
_CONTROL = re.compile("[" + "".join(re.escape(chr(c)) for c in HIDDEN if c not in (9, 10)) + "]")


def _type_name(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "a list", dict: "a table"}
    for t, n in names.items():
        if type(value) is t:
            return n
    return f"a {type(value).__name__}"


def _suggest(word: str, choices: Any, table: bool = False) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    if not close:
        return ""
    return f" (did you mean [{close[0]}]?)" if table else f" (did you mean {close[0]!r}?)"


class _Checker:
    """Collects every problem of a card document, and builds its normal JSON form."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def text(self, where: str, value: Any) -> str | None:
        if not isinstance(value, str):
            self.problems.append(f"{where} is {_type_name(value)}, want a string")
            return None
        text: str = value.replace("\r\n", "\n").strip()
        if not text:
            self.problems.append(f"{where} is empty, want some text")
            return None
        if len(text) > MAX_TEXT:
            self.problems.append(f"{where} holds {len(text)} characters, want at most "
                                 f"{MAX_TEXT}")
            return None
        if hidden := _CONTROL.search(text):
            self.problems.append(f"{where} holds {HIDDEN[ord(hidden[0])]}, a control, line "
                                 "separator or bidirectional control character; want text (tabs "
                                 "and line breaks are fine; write right-to-left text in its "
                                 "logical order, without bidirectional controls)")
            return None
        return text

    def texts(self, where: str, value: Any) -> list[str] | None:
        if not isinstance(value, list):
            self.problems.append(f"{where} is {_type_name(value)}, want a list of strings")
            return None
        if len(value) > MAX_ITEMS:
            self.problems.append(f"{where} has {len(value)} items, want at most {MAX_ITEMS}")
            return None
        out = [self.text(f"{where}[{i}]", v) for i, v in enumerate(value)]
        if any(v is None for v in out):
            return None
        return [v for v in out if v is not None]

    def date(self, where: str, value: Any) -> str | None:
        # TOML dates and offset date-times; the same as strings (how card.json holds them).
        if isinstance(value, dt.datetime):
            if value.tzinfo is None:
                self.problems.append(f"{where} is a local date-time, want a date or a date-time "
                                     "with an offset (2025-01-31 or 2025-01-31T12:00:00Z)")
                return None
            return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if isinstance(value, dt.date):
            return value.isoformat()
        if isinstance(value, str):
            try:
                if _DATE.fullmatch(value):
                    dt.date.fromisoformat(value)
                    return value
                parsed = dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
                return parsed.strftime("%Y-%m-%dT%H:%M:%SZ")
            except ValueError:
                pass
        self.problems.append(f"{where} is {value!r}, want a date (2025-01-31) or a UTC date-time "
                             "(2025-01-31T12:00:00Z)")
        return None

    def value(self, where: str, f: _Field, value: Any) -> Any:
        if f.type == "text":
            return self.text(where, value)
        if f.type == "texts":
            return self.texts(where, value)
        if f.type == "flag":
            if not isinstance(value, bool):
                self.problems.append(f"{where} is {_type_name(value)}, want true or false")
                return None
            return value
        if f.type == "date":
            return self.date(where, value)
        if f.type == "dates":
            if not isinstance(value, list) or not 1 <= len(value) <= 2:
                self.problems.append(f"{where} is {value!r}, want [start] or [start, end] dates")
                return None
            dates = [self.date(f"{where}[{i}]", v) for i, v in enumerate(value)]
            if any(d is None for d in dates):
                return None
            if len(dates) == 2 and str(dates[0])[:10] > str(dates[1])[:10]:
                self.problems.append(f"{where} ends ({dates[1]}) before it starts ({dates[0]})")
                return None
            return dates
        if f.type == "url":
            text = self.text(where, value)
            if text is not None and not _URL.fullmatch(text):
                self.problems.append(f"{where} is {text!r}, want an http(s) URL")
                return None
            return text
        if f.type == "languages":
            langs = self.texts(where, value)
            if langs is None:
                return None
            bad = [v for v in langs if not _LANGUAGE.fullmatch(v)]
            if bad:
                self.problems.append(f"{where}: {bad[0]!r} is not a language tag, want "
                                     "BCP 47 such as 'en' or 'pt-BR'")
                return None
            return langs
        assert f.type == "format"
        if type(value) is not int:
            self.problems.append(f"{where} is {_type_name(value)}, want {CARD_FORMAT}")
        elif value != CARD_FORMAT:
            self.problems.append(f"{where} is {value}: a newer trajledger wrote it, this one "
                                 f"reads format {CARD_FORMAT}")
        return CARD_FORMAT

    def table(self, section: str | None, doc: Mapping[str, Any],
              fields: Mapping[str, _Field]) -> dict[str, Any]:
        prefix = f"[{section}] " if section else ""
        out: dict[str, Any] = {}
        for key in doc:
            if key not in fields:
                if section is None and isinstance(doc[key], Mapping):
                    self.problems.append(f"unknown table [{key}]{_suggest(key, _SECTIONS, True)}")
                else:
                    self.problems.append(f"{prefix}unknown key {key!r}{_suggest(key, fields)}")
        for key, f in fields.items():
            if key not in doc:
                if f.required:
                    self.problems.append(f"{prefix}{key} is missing: {f.help}")
                continue
            value = self.value(f"{prefix}{key}", f, doc[key])
            if value is not None:
                out[key] = value
        return out


def _check_card(doc: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The normal JSON form of a card document and every problem found in it."""
    c = _Checker()
    top = {k: v for k, v in doc.items() if k not in _SECTIONS}
    out = c.table(None, top, _TOP)
    out["format"] = CARD_FORMAT
    for section, fields in _SECTIONS.items():
        body = doc.get(section)
        if body is None:
            c.problems.append(f"[{section}] is missing: " + "; ".join(
                f"{k}: {f.help}" for k, f in fields.items() if f.required))
            continue
        if not isinstance(body, Mapping):
            c.problems.append(f"[{section}] is {_type_name(body)}, want a table")
            continue
        out[section] = c.table(section, body, fields)
    pi = doc.get("personal_information")
    if isinstance(pi, Mapping) and isinstance(pi.get("contains"), bool):
        categories = pi.get("categories")
        if pi["contains"] and "categories" not in pi:
            c.problems.append("[personal_information] categories is missing: contains = true, "
                              "so name the kinds of personal or sensitive information")
        elif pi["contains"] and categories == []:
            c.problems.append("[personal_information] categories is empty: contains = true, "
                              "so name at least one kind")
        elif not pi["contains"] and categories:
            c.problems.append("[personal_information] categories lists kinds, but contains = "
                              "false; set contains = true or remove the categories")
    uses = doc.get("uses")
    if isinstance(uses, Mapping) and uses.get("intended") == []:
        c.problems.append("[uses] intended is empty, want at least one intended use")
    return out, c.problems


class ProducerCard:
    """The producer's part of a dataset card, validated (an invalid one cannot be built).

    Build it with `from_toml` (``card.toml``, what ``dataset create --card`` reads) or
    `from_bytes` (``card.json``, what the ledger stores); `canonical_bytes` is the stored form.
    """

    def __init__(self, doc: Mapping[str, Any], what: str = "card") -> None:
        """Validate ``doc`` (TOML values, or their JSON form).

        Raises:
            FormatError: one line per problem, each starting with ``what``.
        """
        body, problems = _check_card(doc)
        if problems:
            raise FormatError("\n".join(f"{what}: {p}" for p in problems))
        self._doc = body
        self._bytes = canonical_json(body)
        if len(self._bytes) > CARD_MAX_BYTES:
            raise FormatError(f"{what}: {len(self._bytes)} bytes as card.json, want at most "
                              f"{CARD_MAX_BYTES}")

    @classmethod
    def from_toml(cls, data: bytes, what: str = "card.toml") -> ProducerCard:
        """Read ``card.toml``.

        Raises:
            FormatError: not UTF-8 TOML, or any problem of the card (one line each).
        """
        try:
            doc = tomllib.loads(data.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise FormatError(f"{what}: not UTF-8 text: {e.reason} at byte {e.start}") from e
        except tomllib.TOMLDecodeError as e:
            raise FormatError(f"{what}: not valid TOML: {e}") from e
        except RecursionError as e:
            raise FormatError(f"{what}: not valid TOML: nested too deeply") from e
        return cls(doc, what)

    @classmethod
    def from_file(cls, path: Path) -> ProducerCard:
        """Read ``card.toml`` from a file.

        Raises:
            OSError: the file cannot be read. FormatError: as `from_toml`.
        """
        with open(path, "rb") as f:
            data = f.read(CARD_MAX_BYTES * 4 + 1)
        if len(data) > CARD_MAX_BYTES * 4:
            raise FormatError(f"{path}: larger than {CARD_MAX_BYTES * 4} bytes, not a card")
        return cls.from_toml(data, str(path))

    @classmethod
    def from_bytes(cls, data: bytes, what: str = "card.json") -> ProducerCard:
        """Read a stored ``card.json`` (strict JSON).

        Raises:
            FormatError: not a JSON object, or any problem of the card.
        """
        if len(data) > CARD_MAX_BYTES:
            raise FormatError(f"{what}: {len(data)} bytes, want at most {CARD_MAX_BYTES}")
        return cls(load_object(data, what), what)

    def canonical_bytes(self) -> bytes:
        """``card.json``: the RFC 8785 bytes of the card's JSON form."""
        return self._bytes

    @property
    def digest(self) -> str:
        """``sha256:`` of `canonical_bytes`: what the dataset's signed record names."""
        return digest_bytes(self._bytes)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (a copy)."""
        return load_object(self._bytes, "card")

    def get(self, section: str | None, key: str) -> Any:
        """A setting: ``get(None, "description")``, ``get("consent", "obtained")``; None when
        the producer left an optional one out."""
        table = self._doc if section is None else self._doc.get(section, {})
        return table.get(key)


# -- the facts the records hold ---------------------------------------------------------------


@dataclass(frozen=True)
class FileFacts:
    """One file of an artifact's manifest: ``path``, ``size``, ``digest``, ``media_type``."""

    path: str
    size: int
    digest: str
    media_type: str


@dataclass(frozen=True)
class StatusFacts:
    """A verified approval, revocation or erasure: its kind, what it is about, its log index,
    its signers and its fields (purpose and dates, or reason and date)."""

    kind: str
    subject: str
    about: str
    index: int
    time: str
    signers: tuple[str, ...]
    fields: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The JSON form of the provenance block."""
        return {"kind": self.kind, "subject": self.subject, "about": self.about,
                "logIndex": self.index, "logged": self.time, "signers": list(self.signers),
                **self.fields}


@dataclass(frozen=True)
class BatchFacts:
    """A member rollout batch as its verified record states it."""

    digest: str
    name: str
    index: int
    time: str
    signers: tuple[str, ...]
    predicate: RolloutBatch
    files: tuple[FileFacts, ...]

    @property
    def episodes(self) -> int:
        """Episode count (signed)."""
        return int(self.predicate.counts.get("episodes", 0))

    @property
    def steps(self) -> int:
        """Step count (signed)."""
        return int(self.predicate.counts.get("steps", 0))

    @property
    def size(self) -> int:
        """Bytes of its files."""
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        """The JSON form of the provenance block."""
        p = self.predicate
        return {
            "digest": self.digest,
            "name": self.name,
            "logIndex": self.index,
            "logged": self.time,
            "signers": list(self.signers),
            "episodes": self.episodes,
            "steps": self.steps,
            "bytes": self.size,
            "licence": p.licence,
            "consent": p.consent,
            "retention": p.retention,
            "environment": p.environment.to_json(),
            "evaluator": p.evaluator.to_json() if p.evaluator is not None else None,
            "policyVersion": p.policy_version,
            "generator": p.generator,
            "schemaVersion": p.schema_version,
        }


@dataclass(frozen=True)
class CardFacts:
    """Everything a card says, each fact from a verified record.

    Attributes:
        digest: the dataset.
        dataset: its signed predicate (`DatasetV2` when it has a card).
        index, time, signers: its record's log index, log time and producer keyids.
        files: the dataset's own manifest (``dataset.json``, ``card.json``).
        producer: the producer's card; None when the dataset has none (a v1 record) or its
            card was erased (``card_erased``).
        batches: the member batches, by digest.
        environments, evaluators: the versions the batches name, by digest.
        approvals: verified approvals of the dataset and its batches that count.
        withdrawn: those a revocation of their record withdraws (``fields["withdrawn"]``
            says which): listed apart, never as approvals (review left27).
        revocations, erasures: verified ones of anything in the dataset's lineage.
        origin, size, root, vkey: the log checkpoint every record was verified under.
        policy: ``name``, ``serial`` and ``digest`` of the trust policy applied.
        data: ``hash`` (every blob re-hashed) or ``size`` (sizes only).
    """

    digest: str
    dataset: Dataset
    index: int
    time: str
    signers: tuple[str, ...]
    files: tuple[FileFacts, ...]
    producer: ProducerCard | None
    card_erased: bool
    batches: tuple[BatchFacts, ...]
    environments: tuple[ArtifactRef, ...]
    evaluators: tuple[ArtifactRef, ...]
    approvals: tuple[StatusFacts, ...]
    revocations: tuple[StatusFacts, ...]
    erasures: tuple[StatusFacts, ...]
    origin: str
    size: int
    root: str
    vkey: str
    policy: Mapping[str, Any]
    data: str
    withdrawn: tuple[StatusFacts, ...] = ()

    @property
    def ref(self) -> str:
        """``NAME@VERSION``."""
        return f"{self.dataset.name}@{self.dataset.version}"

    @property
    def card_digest(self) -> str | None:
        """The digest the signed record names for the card (None without a card)."""
        return self.dataset.card if isinstance(self.dataset, DatasetV2) else None

    @property
    def licences(self) -> tuple[str | None, ...]:
        """The distinct licences the batches' records state (None: a batch states none)."""
        seen: dict[str | None, None] = {}
        for b in self.batches:
            seen.setdefault(b.predicate.licence)
        return tuple(sorted(seen, key=lambda x: (x is None, x or "")))

    def provenance(self) -> dict[str, Any]:
        """The machine-readable block both card formats carry (``trajledger`` in the Hugging
        Face metadata, ``trajledger:provenance`` in Croissant), ``docs/cards.md``."""
        return {
            "dataset": {
                "name": self.dataset.name,
                "version": self.dataset.version,
                "digest": self.digest,
                "split": self.dataset.split,
                "purpose": self.dataset.purpose,
                "logIndex": self.index,
                "logged": self.time,
                "signers": list(self.signers),
            },
            "card": self.card_digest,
            "cardErased": self.card_erased,
            "log": {"origin": self.origin, "size": self.size, "root": self.root,
                    "vkey": self.vkey},
            "policy": dict(self.policy),
            "data": "re-hashed" if self.data == "hash" else "sizes only, not re-hashed",
            "batches": [b.to_json() for b in self.batches],
            "environments": [e.to_json() for e in self.environments],
            "evaluators": [e.to_json() for e in self.evaluators],
            "approvals": [a.to_json() for a in self.approvals],
            "withdrawnApprovals": [a.to_json() for a in self.withdrawn],
            "revocations": [r.to_json() for r in self.revocations],
            "erasures": [e.to_json() for e in self.erasures],
        }


def _manifest_files(ledger: LedgerHome, digest: str) -> tuple[FileFacts, ...]:
    from trajledger.verify.manifest import Manifest

    manifest = Manifest.from_json(load_object(ledger.store.get_verified(digest), "manifest"))
    return tuple(FileFacts(f.path, f.size, f.digest, f.media_type) for f in manifest.files)


def _status(
    verifier: LineageVerifier, subject: str, about: str, kinds: tuple[str, ...]
) -> list[StatusFacts]:
    """The verified records of ``kinds`` (approval, revocation, erasure) about ``subject``
    (others are left out, as verification ignores them: not signed under the policy). An
    approval a revocation of its record withdraws (`verify.withdrawals`, as every verifier
    judges it) carries ``withdrawn``: why it does not count."""
    from trajledger.verify.lineage import Record
    from trajledger.verify.withdrawals import withdrawn

    out = []
    for kind in kinds:
        found = [verifier.record(i) for i in verifier.records(subject, kind)]
        judged = withdrawn(verifier, found) if kind == "approval" else found
        for r, w in zip(found, judged, strict=True):
            if not isinstance(r, Record):
                continue
            p = r.predicate
            fields: dict[str, Any]
            if isinstance(p, Approval):
                fields = {"purpose": p.purpose, "approvedAt": p.approved_at,
                          "expires": p.expires}
                if not isinstance(w, Record):
                    fields["withdrawn"] = w.message
            elif isinstance(p, Revocation):
                fields = {"reason": p.reason, "revokedAt": p.revoked_at}
            else:
                assert isinstance(p, Erasure)
                fields = {"reason": p.reason, "erasedAt": p.erased_at, "blobs": len(p.blobs)}
            signers = tuple(sorted(r.signers)) + tuple(
                sorted(f"{ident.issuer} {ident.subject}" for ident in r.identities))
            out.append(StatusFacts(kind, subject, about, r.index, r.entry.time, signers, fields))
    return out


def dataset_card(
    ledger: LedgerHome, ref: str, policy: TrustPolicy, *, data: str = "hash"
) -> CardFacts:
    """The facts of the dataset ``ref``'s card, from its verified lineage.

    Steps:
        1. Resolve ``ref`` to a dataset; verify it and its lineage under ``policy`` with the
           ledger's published checkpoint (signatures, roles, inclusion, the card's bytes, data
           re-hashed or, with ``data="size"``, sizes compared).
        2. Refuse when a check failed other than a revocation (a revoked dataset gets a card
           that says so: that is what a buyer must learn).
        3. Collect the facts: the dataset's record and manifest, its producer card (read from
           the store against the digest its record names), each batch's record and files,
           the environment and evaluator versions, the verified approvals of the dataset and
           its batches, the verified revocations and erasures of anything in its lineage, and
           the log checkpoint and policy applied.

    Raises:
        RefError: ``ref`` names no dataset (or several).
        VerificationError: the lineage fails a check other than a revocation (every failure
            listed, one per line).
        LedgerError: the store cannot be read.
    """
    from trajledger.verify.kinds import KINDS
    from trajledger.verify.lineage import LineageVerifier, Record
    from trajledger.verify.policy import policy_digest
    from trajledger.verify.report import FAIL

    from .catalog import Catalog
    from .evidence import ledger_evidence

    # (1)
    item = Catalog(ledger).resolve(ref, {"dataset"})
    verifier = LineageVerifier(ledger_evidence(ledger), policy, index=ledger.trust_state(),
                               data=data)
    report = verifier.verify(item.digest)
    # (2)
    failed = [
        f"{node.label} > {c.what}: {c.detail}"
        for node in report.nodes.values()
        for c in node.checks
        if c.status == FAIL and c.what != "revoked"
    ]
    if failed:
        raise VerificationError(
            f"card {ref}: the dataset's lineage does not verify ({len(failed)} problem(s)); a "
            "card states verified facts only\n" + "\n".join(failed)
        )
    # (3)
    rec = verifier.identity_record(item.digest, "dataset")
    cp = verifier.checkpoint
    assert isinstance(rec, Record) and isinstance(rec.predicate, Dataset) and cp is not None
    ds = rec.predicate
    producer = None
    card_erased = False
    if isinstance(ds, DatasetV2):
        if ledger.store.exists(ds.card):
            producer = ProducerCard.from_bytes(ledger.store.get_verified(ds.card),
                                               f"card {ds.card}")
        else:
            card_erased = True  # the verifier found it deleted by a verified erasure
    batches = []
    envs: dict[str, ArtifactRef] = {}
    evals: dict[str, ArtifactRef] = {}
    for b in ds.batches:
        brec = verifier.identity_record(b, "rollout-batch")
        assert isinstance(brec, Record) and isinstance(brec.predicate, RolloutBatch)
        bp = brec.predicate
        name = brec.statement.subjects[0].name
        files = _manifest_files(ledger, b) if ledger.store.exists(b) else ()
        batches.append(BatchFacts(b, name, brec.index, brec.entry.time,
                                  tuple(sorted(brec.signers)), bp, files))
        envs[bp.environment.digest] = bp.environment
        if bp.evaluator is not None:
            evals[bp.evaluator.digest] = bp.evaluator
    # Approvals of the dataset and its batches; revocations and erasures of anything in the
    # lineage (a revoked checkpoint that generated a batch taints the data too).
    status: list[StatusFacts] = []
    for node in report.nodes.values():
        if node.kind not in KINDS:
            continue  # the log
        ref = f"{node.name}@{node.version}" if node.version else node.name or node.id[:19] + "…"
        near = node.id == item.digest or node.id in ds.batches
        status += _status(verifier, node.id, f"{node.kind} {ref}",
                          ("approval", "revocation", "erasure") if near
                          else ("revocation", "erasure"))
    status.sort(key=lambda x: x.index)
    return CardFacts(
        digest=item.digest,
        dataset=ds,
        index=rec.index,
        time=rec.entry.time,
        signers=tuple(sorted(rec.signers)),
        files=_manifest_files(ledger, item.digest) if ledger.store.exists(item.digest) else (),
        producer=producer,
        card_erased=card_erased,
        batches=tuple(batches),
        environments=tuple(envs[d] for d in sorted(envs)),
        evaluators=tuple(evals[d] for d in sorted(evals)),
        approvals=tuple(s for s in status if s.kind == "approval" and "withdrawn" not in s.fields),
        withdrawn=tuple(s for s in status if s.kind == "approval" and "withdrawn" in s.fields),
        revocations=tuple(s for s in status if s.kind == "revocation"),
        erasures=tuple(s for s in status if s.kind == "erasure"),
        origin=cp.origin,
        size=cp.size,
        root=base64.b64encode(cp.root).decode("ascii"),
        vkey=ledger.log.vkey,
        policy={"name": policy.name, "serial": policy.serial, "digest": policy_digest(policy)},
        data=data,
    )


def check_policy_allows_cards(ledger: LedgerHome, what: str) -> None:
    """Refuse a dataset with a card when the ledger's policy in force would not accept its
    record (``allowed_predicate_types`` without ``dataset/v2``): every verifier would fail it.

    Raises:
        PolicyError: the policy does not allow ``dataset/v2``.
    """
    from trajledger.verify.errors import PolicyError
    from trajledger.verify.predicates import DATASET_V2

    from .policy_state import current_policy

    found = current_policy(ledger)
    if found is None:
        return
    policy = found[1]
    if DATASET_V2 not in policy.allowed_predicate_types:
        raise PolicyError(
            f"{what}: a dataset with a card is recorded as {DATASET_V2}, which the policy in "
            f"force ({policy.name!r} serial {policy.serial}) does not allow; add it to "
            "allowed_predicate_types and record the policy with 'trajledger policy set', or "
            "create the dataset without --card"
        )
