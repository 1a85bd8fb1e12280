"""Dataset cards written for others' tools: a Hugging Face dataset card and a Croissant file.

Scope: render `ledger.cards.CardFacts` as

- a Hugging Face dataset card (`hf_card`): ``README.md`` with YAML metadata as the Hub's dataset
  card spec defines it (``pretty_name``, ``license``, ``language``, ``tags``,
  ``task_categories``, ``size_categories``, ``dataset_info``) plus a ``trajledger`` block of
  provenance, and the sections of the Hub's dataset card template, filled from the producer's
  card and the verified records;
- a Croissant 1.0 JSON-LD file with the Responsible AI (RAI 1.0) properties (`croissant_card`):
  the dataset's metadata, one ``cr:FileObject`` per file (SHA-256, size, media type; its
  ``contentUrl`` is the member name the file has in an evidence bundle exported with data,
  ``objects/sha256/<hex>``), the RAI fields from the producer's card, and the provenance block
  as a JSON literal (``trajledger:provenance``).

The producer's prose is theirs; the facts come from signed records only. The producer's text
cannot make headings or raw HTML in the Markdown (`_prose`), so it cannot pass itself off as the
generated provenance sections. Both outputs are a function of the log's state: the same
checkpoint gives the same bytes.

Non-scope: gathering and verifying the facts (``ledger.cards``).
Spec: https://github.com/huggingface/hub-docs/blob/main/datasetcard.md (metadata),
huggingface_hub's ``datasetcard_template.md`` (sections), Croissant 1.0
(http://mlcommons.org/croissant/1.0) and Croissant RAI 1.0
(http://mlcommons.org/croissant/RAI/1.0); ``docs/cards.md`` maps every field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from .cards import CardFacts, FileFacts

__all__ = ["CROISSANT_CONTEXT", "FORMATS", "croissant_card", "hf_card", "render"]

FORMATS = ("hf", "croissant")
"""The card formats `render` writes."""

HF_LICENSES = frozenset({
    "apache-2.0", "mit", "openrail", "bigscience-openrail-m", "creativeml-openrail-m",
    "bigscience-bloom-rail-1.0", "bigcode-openrail-m", "afl-3.0", "artistic-2.0", "bsl-1.0",
    "bsd", "bsd-2-clause", "bsd-3-clause", "bsd-3-clause-clear", "c-uda", "cc", "cc0-1.0",
    "cc-by-2.0", "cc-by-2.5", "cc-by-3.0", "cc-by-4.0", "cc-by-sa-3.0", "cc-by-sa-4.0",
    "cc-by-nc-2.0", "cc-by-nc-3.0", "cc-by-nc-4.0", "cc-by-nd-4.0", "cc-by-nc-nd-3.0",
    "cc-by-nc-nd-4.0", "cc-by-nc-sa-2.0", "cc-by-nc-sa-3.0", "cc-by-nc-sa-4.0",
    "cdla-sharing-1.0", "cdla-permissive-1.0", "cdla-permissive-2.0", "wtfpl", "ecl-2.0",
    "epl-1.0", "epl-2.0", "etalab-2.0", "eupl-1.1", "agpl-3.0", "gfdl", "gpl", "gpl-2.0",
    "gpl-3.0", "lgpl", "lgpl-2.1", "lgpl-3.0", "isc", "lppl-1.3c", "ms-pl", "mpl-2.0", "odc-by",
    "odbl", "openrail++", "osl-3.0", "postgresql", "ofl-1.1", "ncsa", "unlicense", "zlib", "pddl",
    "lgpl-lr", "deepfloyd-if-license", "llama2", "gemma", "unknown", "other",
})
"""The Hub's licence identifiers (hub-docs ``repositories-licenses.md``); any other licence is
``other`` with a ``license_name``."""

_SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
          (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"),
          (1_000_000_000, "100M<n<1B"), (10_000_000_000, "1B<n<10B"),
          (100_000_000_000, "10B<n<100B"), (1_000_000_000_000, "100B<n<1T"))
_NEEDED = "[More Information Needed]"
_NO_CARD = ("Not documented: this dataset was recorded without a card (`trajledger dataset "
            "create --card card.toml`).")


def render(facts: CardFacts, fmt: str) -> bytes:
    """The card in ``fmt`` (``hf`` or ``croissant``) as UTF-8 bytes.

    Raises:
        ValueError: another format.
    """
    if fmt == "hf":
        return hf_card(facts).encode("utf-8")
    if fmt == "croissant":
        text = json.dumps(croissant_card(facts), indent=2, ensure_ascii=False)
        return (text + "\n").encode("utf-8")
    raise ValueError(f"card format {fmt!r}, want one of {', '.join(FORMATS)}")


# -- YAML (a subset: block mappings and sequences of JSON-quoted scalars) -----------------------

_YAML_UNSAFE = re.compile(
    "[^\t\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)
"""Characters a YAML double-quoted scalar must escape beyond JSON's: C1 controls and DEL (not
printable in YAML), NEL, LINE and PARAGRAPH SEPARATOR (line breaks in YAML 1.1), the BOM."""


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        # A JSON string is a YAML double-quoted scalar once YAML's extra breaks are escaped.
        text = json.dumps(value, ensure_ascii=False)
        return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    if isinstance(value, dict | list) and not value:
        return "{}" if isinstance(value, dict) else "[]"
    raise TypeError(f"not a YAML scalar: {value!r}")


_YAML_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_YAML_11_WORDS = frozenset(["y", "n", "yes", "no", "on", "off", "true", "false", "null"])
"""Words YAML 1.1 reads as booleans or null whatever their case: a key spelled so is quoted."""


def _yaml_key(key: str) -> str:
    """A mapping key: plain when it is an identifier YAML reads as that string, else quoted."""
    if _YAML_PLAIN_KEY.fullmatch(key) and key.lower() not in _YAML_11_WORDS:
        return key
    return _yaml_scalar(key)


def _yaml(value: Any, indent: int = 0) -> list[str]:
    """Block YAML lines for a dict or a list."""
    pad = "  " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, v in value.items():
            k = _yaml_key(str(key))
            if isinstance(v, dict) and v:
                lines.append(f"{pad}{k}:")
                lines += _yaml(v, indent + 1)
            elif isinstance(v, list) and v:
                lines.append(f"{pad}{k}:")
                lines += _yaml(v, indent)
            else:
                lines.append(f"{pad}{k}: {_yaml_scalar(v)}")
        return lines
    for item in value:
        if isinstance(item, dict | list) and item:
            sub = _yaml(item, indent + 1)
            sub[0] = f"{pad}- {sub[0][len(pad) + 2:]}"
            lines += sub
        else:
            lines.append(f"{pad}- {_yaml_scalar(item)}")
    return lines


# -- Markdown -----------------------------------------------------------------------------------

_MARKER = re.compile(r">|(?:[-+*]|[0-9]{1,9}[.)])(?=[ \t]|$)")
"""A block quote or list marker: what may open a line before its content."""
_SETEXT = re.compile(r"(=+|-+)[ \t]*")


def _prose(text: str) -> str:
    """The producer's text as Markdown that makes no heading and no raw HTML: where a line, or
    its content after any of its quote and list markers, starts with ``#`` or is a Setext
    underline (``=``/``-`` only), that character is escaped; ``<`` and ``&`` become entities.
    Lists, quotes, emphasis and links stay."""
    out = []
    for line in text.replace("&", "&amp;").replace("<", "&lt;").split("\n"):
        at = 0
        while True:
            rest = line[at:].lstrip(" \t")
            at = len(line) - len(rest)
            if rest.startswith("#") or _SETEXT.fullmatch(rest):
                line = line[:at] + "\\" + rest
                break
            marker = _MARKER.match(rest)
            if marker is None:
                break
            at += marker.end()
        out.append(line)
    return "\n".join(out)


def _line(text: str) -> str:
    """A signer's string as one line of text: white space runs made one space, other control
    characters and bidirectional controls escaped (`verify.report.HIDDEN`)."""
    from trajledger.verify.report import HIDDEN

    return " ".join(text.split()).translate(HIDDEN)


def _word(ref: str, digest: str) -> str:
    """A dataset's signed name in the card's command, one shell word (rev49 finding 8: an
    imported dataset's ``x'; curl … | sh; '`` was pasted as code by the card's readers); its
    digest when not every shell reads the name back as one argument, or the command's code
    span would not show it as it is (a backtick ends the span; `_cell`'s ``\\|``, ``&amp;``
    and ``&lt;`` are shown as they are in one: rev50 finding 4)."""
    from trajledger.verify.nodes import NAMED
    from trajledger.verify.shell_word import every_shell, shell_word

    shown = every_shell(ref, NAMED) and not set(ref) & set("`|&<")
    return shell_word(ref if shown else digest, NAMED)


def _cell(text: str) -> str:
    """Text inside a line (a table cell, a list item's value): one line, no pipes, no HTML."""
    return _line(text).replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")


def _bullets(items: Iterable[str]) -> str:
    return "\n".join(f"- {_prose(i).replace(chr(10), chr(10) + '  ')}" for i in items)


def _short(digest: str) -> str:
    return digest[:19] + "…"


def _keys(keyids: Iterable[str]) -> str:
    return ", ".join(f"`{k[:12]}`" for k in keyids) or "none"


def _ref(r: Any) -> str:
    return f"{_cell(r.name)}@{_cell(r.version)} (`{_short(r.digest)}`)"


def _size_category(n: int) -> str:
    for bound, name in _SIZES:
        if n < bound:
            return name
    return "n>1T"


def _hf_licence(licences: tuple[str | None, ...]) -> dict[str, Any]:
    ids: list[str] = []
    others: list[str] = []
    for licence in licences:
        lid = "unknown" if licence is None else licence.lower()
        if lid not in HF_LICENSES:
            others.append(re.sub(r"[^a-z0-9.+-]+", "-", lid).strip("-") or "other")
            lid = "other"
        if lid not in ids:
            ids.append(lid)
    out: dict[str, Any] = {"license": ids[0] if len(ids) == 1 else ids}
    if len(others) == 1:
        out["license_name"] = others[0]
    return out


def _producer(facts: CardFacts, section: str | None, key: str) -> Any:
    return facts.producer.get(section, key) if facts.producer is not None else None


def _text(facts: CardFacts, section: str | None, key: str, default: str = _NEEDED) -> str:
    value = _producer(facts, section, key)
    if value is None:
        return _NO_CARD if facts.producer is None and default == _NEEDED else default
    return _prose(value)


def _list(facts: CardFacts, section: str, key: str, default: str = _NEEDED) -> str:
    value = _producer(facts, section, key)
    if not value:
        return _NO_CARD if facts.producer is None and default == _NEEDED else default
    return _bullets(value)


def _citation(facts: CardFacts) -> str:
    given = _producer(facts, None, "citation")
    if given:
        return str(given)
    key = re.sub(r"[^A-Za-z0-9]+", "-", facts.ref).strip("-") or "dataset"
    title = _producer(facts, None, "title") or _line(facts.ref)
    return (f"@misc{{{key},\n  title = {{{title}}},\n  year = {{{facts.time[:4]}}},\n"
            f"  note = {{trajledger dataset {facts.digest}, log {facts.origin}, "
            f"index {facts.index}}}\n}}")


def _status_lines(items: Iterable[Any], what: str) -> str:
    lines = []
    for s in items:
        f = s.fields
        if s.kind == "approval":
            detail = (f"for `{_cell(f['purpose'])}`, approved {f['approvedAt']}, expires "
                      f"{f['expires']}")
            if "withdrawn" in f:
                detail += f", **withdrawn** (does not count): {_cell(f['withdrawn'])}"
        elif s.kind == "revocation":
            detail = f"**revoked** {f['revokedAt']}: {_cell(f['reason'])}"
        else:
            detail = f"erased {f['erasedAt']} ({f['reason']}): {f['blobs']} blob(s) deleted"
        lines.append(f"- {_cell(s.about)}: {detail} — log index {s.index}, signed by "
                     f"{_keys(s.signers)}")
    return "\n".join(lines) or f"None: no verified {what} record."


def hf_card(facts: CardFacts) -> str:
    """A Hugging Face dataset card: ``README.md`` with YAML metadata (``docs/cards.md``)."""
    ds = facts.dataset
    title = _producer(facts, None, "title") or facts.ref
    episodes = sum(b.episodes for b in facts.batches)
    steps = sum(b.steps for b in facts.batches)
    size = sum(b.size for b in facts.batches)
    meta: dict[str, Any] = {"pretty_name": title, **_hf_licence(facts.licences)}
    if _producer(facts, None, "languages"):
        meta["language"] = _producer(facts, None, "languages")
    meta["tags"] = ["trajledger", "reinforcement-learning", "provenance",
                    *(_producer(facts, None, "tags") or [])]
    meta["task_categories"] = ["reinforcement-learning"]
    meta["size_categories"] = [_size_category(episodes)]
    meta["dataset_info"] = {
        "splits": [{"name": ds.split, "num_bytes": size, "num_examples": episodes}],
        "dataset_size": size,
    }
    meta["trajledger"] = facts.provenance()
    revoked = facts.revocations
    banner = ""
    if revoked:
        banner = ("\n> **Revoked.** Verified revocation records name this dataset or its data "
                  "(see [Provenance](#provenance)); it must not be used.\n")
    licences = ", ".join(f"`{_cell(x)}`" if x else "none stated" for x in facts.licences)
    terms = "\n".join(
        f"| `{_short(b.digest)}` | {b.index} | {b.episodes} | {b.steps} | {b.size} | "
        f"{_ref(b.predicate.environment)} | "
        f"{_ref(b.predicate.evaluator) if b.predicate.evaluator else '—'} | "
        f"{_cell(b.predicate.licence or '—')} | {_cell(b.predicate.consent or '—')} | "
        f"{_cell(b.predicate.retention or '—')} |"
        for b in facts.batches
    )
    pi = _producer(facts, "personal_information", "contains")
    if pi is None:
        personal = _NO_CARD
    elif pi:
        personal = ("The producer states the data holds personal or sensitive information:\n\n"
                    + _list(facts, "personal_information", "categories"))
    else:
        personal = ("The producer states the data holds no personal or sensitive "
                    "information.")
    handling = _producer(facts, "personal_information", "handling")
    if handling:
        personal += "\n\n**Handling:** " + _prose(handling)
    collection_facts = []
    types = _producer(facts, "collection", "types")
    if types:
        collection_facts.append(f"- **Collection types:** {', '.join(_cell(t) for t in types)}")
    timeframe = _producer(facts, "collection", "timeframe")
    if timeframe:
        collection_facts.append(f"- **Timeframe:** {' to '.join(timeframe)}")
    source = _producer(facts, "collection", "source")
    if source:
        collection_facts.append(f"- **Raw data:** {_cell(source)}")
    preprocessing = _producer(facts, "collection", "preprocessing")
    if preprocessing:
        collection_facts.append("- **Preprocessing:**")
        collection_facts += [f"  - {_cell(p)}" for p in preprocessing]
    card_line = (
        f"`{facts.card_digest}` (`card.json` in the dataset's manifest; the signed record names "
        "this digest, and every verifier checks the card's bytes against it)"
        + (" — **erased** by a verified erasure" if facts.card_erased else "")
        if facts.card_digest else "none: the dataset was recorded without a card"
    )
    until = _producer(facts, "retention", "until")
    withdrawal = _producer(facts, "consent", "withdrawal")
    contact = _producer(facts, "access", "contact")
    homepage = _producer(facts, None, "homepage")
    creators = ", ".join(_cell(c) for c in _producer(facts, None, "creators") or [])
    languages = ", ".join(_producer(facts, None, "languages") or [])
    producers = _keys(sorted({k for b in facts.batches for k in b.signers}))
    generators = ", ".join(sorted({f"`{_cell(b.predicate.generator or '—')}`"
                                   for b in facts.batches}))
    policies = ", ".join(sorted({f"`{_cell(b.predicate.policy_version)}`"
                                 for b in facts.batches}))
    parts = [
        "---",
        *_yaml(meta),
        "---",
        "",
        f"# Dataset Card for {_cell(title)}",
        banner,
        _text(facts, None, "description"),
        "",
        f"This card was written by trajledger from records verified under trust policy "
        f"`{_cell(str(facts.policy['name']))}` (serial {facts.policy['serial']}) at log "
        f"`{_cell(facts.origin)}` size {facts.size}. The description and the producer's "
        "sections (uses, collection, consent, retention, access, personal information, "
        "limitations) are the producer's words, signed with the dataset; everything else comes "
        "from signed records. "
        f"Check it yourself: `trajledger verify {_cell(_word(facts.ref, facts.digest))}`, or "
        "`python -m verify BUNDLE --policy POLICY` on an exported evidence bundle.",
        "",
        "## Dataset Details",
        "",
        "### Dataset Description",
        "",
        f"- **Name and version:** `{_cell(facts.ref)}`",
        f"- **Digest:** `{facts.digest}` (its manifest; dataset record at log index "
        f"{facts.index}, {facts.time}, signed by producer key(s) {_keys(facts.signers)})",
        f"- **Curated by:** {creators or _NEEDED}",
        f"- **Language(s):** {languages or _NEEDED}",
        f"- **License:** {licences} (as the batches' signed records state)",
        f"- **Split:** `{ds.split}`"
        + (" (may be trained on)" if ds.split == "train" else " (never trained on)"),
        f"- **Purpose:** `{_cell(ds.purpose)}` (what approvals must name)",
        "",
        "### Dataset Sources",
        "",
        f"- **Homepage:** {_cell(homepage) if homepage else _NEEDED}",
        f"- **Log:** `{_cell(facts.origin)}` (verifier key `{_cell(facts.vkey)}`)",
        "",
        "## Uses",
        "",
        "### Direct Use",
        "",
        "The producer's intended uses:",
        "",
        _list(facts, "uses", "intended"),
        "",
        "### Out-of-Scope Use",
        "",
        _list(facts, "uses", "out_of_scope"),
        "",
        "## Dataset Structure",
        "",
        f"{len(facts.batches)} rollout batch(es): {episodes} episodes, {steps} steps, {size} "
        "bytes (trajledger rollout schema: `steps.parquet`, `episodes.parquet`). Each batch, as "
        "its signed record states it:",
        "",
        "| batch | log index | episodes | steps | bytes | environment | evaluator | licence "
        "| consent | retention |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        terms,
        "",
        "## Dataset Creation",
        "",
        "### Source Data",
        "",
        "#### Data Collection and Processing",
        "",
        _text(facts, "collection", "process"),
        *(["", *collection_facts] if collection_facts else []),
        "",
        "#### Who are the source data producers?",
        "",
        f"Batch records signed by producer key(s) {producers}; generators: {generators}; "
        f"policy versions: {policies}.",
        "",
        "### Consent",
        "",
        _text(facts, "consent", "obtained"),
        *(["", "**Withdrawal:** " + _prose(withdrawal)] if withdrawal else []),
        "",
        "### Retention",
        "",
        _text(facts, "retention", "policy"),
        *(["", f"**Keep until:** {until}"] if until else []),
        "",
        "### Access",
        "",
        _text(facts, "access", "conditions"),
        "",
        "### Personal and Sensitive Information",
        "",
        personal,
        "",
        "## Bias, Risks, and Limitations",
        "",
        "**Limitations:**",
        "",
        _list(facts, "uses", "limitations"),
        "",
        "**Biases:**",
        "",
        _list(facts, "uses", "biases"),
        "",
        "## Provenance",
        "",
        f"- **Log checkpoint:** `{_cell(facts.origin)}`, size {facts.size}, root "
        f"`{facts.root}`",
        f"- **Trust policy:** `{_cell(str(facts.policy['name']))}` serial "
        f"{facts.policy['serial']} (`{facts.policy['digest']}`)",
        "- **Data:** "
        + ("every blob re-hashed" if facts.data == "hash" else "sizes compared, not re-hashed"),
        f"- **Card:** {card_line}",
        "- **Environments:** " + (", ".join(_ref(e) for e in facts.environments) or "none"),
        "- **Evaluators:** " + (", ".join(_ref(e) for e in facts.evaluators) or "none"),
        "",
        "### Approvals",
        "",
        _status_lines(facts.approvals, "approval"),
        *(["", _status_lines(facts.withdrawn, "approval")] if facts.withdrawn else []),
        "",
        "### Revocations",
        "",
        _status_lines(facts.revocations, "revocation"),
        "",
        "### Erasures",
        "",
        _status_lines(facts.erasures, "erasure"),
        "",
        "## Citation",
        "",
        "**BibTeX:**",
        "",
        "```bibtex",
        _citation(facts).replace("```", "'''"),
        "```",
        "",
        "## Dataset Card Contact",
        "",
        _prose(contact) if contact else _NEEDED,
        "",
    ]
    return "\n".join(parts)


# -- Croissant ----------------------------------------------------------------------------------

CROISSANT_CONTEXT: dict[str, Any] = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "cr": "http://mlcommons.org/croissant/",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/",
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract",
    "field": "cr:field",
    "fileProperty": "cr:fileProperty",
    "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "parentField": "cr:parentField",
    "path": "cr:path",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "samplingRate": "cr:samplingRate",
    "sc": "https://schema.org/",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
    "trajledger": "https://trajledger.dev/ns/card#",
    "trajledger:provenance": {"@type": "@json"},
}
"""The Croissant 1.0 context, the RAI prefix, and trajledger's provenance term (a JSON
literal, the same block as the Hugging Face card's ``trajledger``)."""


def _file_object(owner: str, f: FileFacts) -> dict[str, Any]:
    return {
        "@type": "cr:FileObject",
        "@id": f"{owner[7:23]}/{quote(f.path)}",
        "name": f.path,
        "description": f"{f.path} of {owner}",
        "contentUrl": f"objects/sha256/{f.digest[7:]}",
        "encodingFormat": f.media_type,
        "contentSize": f"{f.size} B",
        "sha256": f.digest[7:],
    }


def croissant_card(facts: CardFacts) -> dict[str, Any]:
    """A Croissant 1.0 JSON-LD document with RAI 1.0 fields (``docs/cards.md``)."""
    title = _producer(facts, None, "title")
    description = _producer(facts, None, "description") or _NO_CARD
    if title:
        description = f"{title}. {description}"
    doc: dict[str, Any] = {
        "@context": CROISSANT_CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": ["http://mlcommons.org/croissant/1.0",
                       "http://mlcommons.org/croissant/RAI/1.0"],
        "name": facts.dataset.name,
        "description": description,
        "version": facts.dataset.version,
        "datePublished": facts.time,
        "citeAs": _citation(facts),
    }
    licences = [x for x in facts.licences if x]
    if licences:
        doc["license"] = licences[0] if len(licences) == 1 else licences
    homepage = _producer(facts, None, "homepage")
    if homepage:
        doc["url"] = homepage
    creators = _producer(facts, None, "creators")
    if creators:
        doc["creator"] = [{"@type": "sc:Organization", "name": c} for c in creators]
    for key, value in (("keywords", _producer(facts, None, "tags")),
                       ("inLanguage", _producer(facts, None, "languages")),
                       ("conditionsOfAccess", _producer(facts, "access", "conditions"))):
        if value:
            doc[key] = value
    doc.update(_rai(facts))
    doc["distribution"] = [
        *(_file_object(facts.digest, f) for f in facts.files),
        *(_file_object(b.digest, f) for b in facts.batches for f in b.files),
    ]
    doc["trajledger:provenance"] = facts.provenance()
    return doc


def _rai(facts: CardFacts) -> dict[str, Any]:
    """The RAI properties: the producer's card where RAI has a property for it; consent goes
    with the collection, retention with the release and maintenance plan (RAI 1.0 names
    retention there, under regulatory compliance, and has no consent property)."""
    if facts.producer is None:
        return {"rai:dataCollection": _NO_CARD}
    p = facts.producer
    out: dict[str, Any] = {}
    consent = f"Consent: {p.get('consent', 'obtained')}"
    if p.get("consent", "withdrawal"):
        consent += f" Withdrawal: {p.get('consent', 'withdrawal')}"
    out["rai:dataCollection"] = f"{p.get('collection', 'process')}\n\n{consent}"
    for key, value in (
        ("rai:dataCollectionType", p.get("collection", "types")),
        ("rai:dataCollectionTimeframe", p.get("collection", "timeframe")),
        ("rai:dataCollectionRawData", p.get("collection", "source")),
        ("rai:dataPreprocessingProtocol", p.get("collection", "preprocessing")),
        ("rai:dataUseCases", p.get("uses", "intended")),
        ("rai:dataBiases", p.get("uses", "biases")),
    ):
        if value:
            out[key] = value
    limits = list(p.get("uses", "limitations") or [])
    limits += [f"Out of scope: {u}" for u in p.get("uses", "out_of_scope") or []]
    if limits:
        out["rai:dataLimitations"] = limits
    if p.get("personal_information", "contains"):
        sensitive = list(p.get("personal_information", "categories") or [])
    else:
        sensitive = ["None: the producer states the data holds no personal or sensitive "
                     "information."]
    if p.get("personal_information", "handling"):
        sensitive.append(f"Handling: {p.get('personal_information', 'handling')}")
    out["rai:personalSensitiveInformation"] = sensitive
    retention = f"Retention: {p.get('retention', 'policy')}"
    if p.get("retention", "until"):
        retention += f" Keep until {p.get('retention', 'until')}."
    revoked = [f"Revoked ({r.about}, log index {r.index}): {r.fields['reason']}"
               for r in facts.revocations]
    out["rai:dataReleaseMaintenancePlan"] = "\n".join([retention, *revoked])
    return out
