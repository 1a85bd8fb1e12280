"""The writer of every record's JSON form, loaded only when a record is written.

Scope: `record_json`, what `verify.records.Record.to_json` returns: the known fields of a record
by their specs (absent optional ones omitted, sorted lists sorted, nested records and manifests
in their own JSON forms), then every member it did not know, where it was; and `WRITERS`, how
the field types a module loaded on use adds (`verify.records.field_type`) write their values.
A verifier reads records and never writes one, so this loads with the writers (``ledger``, the
runner) and the records that hold such a field type, not with a bundle's verification.
Non-scope: reading records (`verify.records`); which records exist (`verify.predicates`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import Field
from typing import Any

__all__ = ["WRITERS", "record_json"]

WRITERS: dict[str, Callable[[Any, Any], Any]] = {}
"""How the field types `verify.records.field_type` added write their values (others:
`_json`)."""


def _json(value: Any) -> Any:
    if hasattr(value, "to_json"):  # a nested record or a manifest: its own JSON form
        return value.to_json()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple | list):
        return [_json(v) for v in value]
    return value


def record_json(
    record: Any,
    fields: Iterable[tuple[Field[Any], Any]],
    member_at: Callable[[dict[str, Any], str], dict[str, Any]],
) -> dict[str, Any]:
    """The JSON form of ``record`` (a `verify.records.Record`): the known fields (absent
    optional ones omitted), then every unrecognized member.

    Args:
        record: the record.
        fields: its fields with their specs (`verify.records.field_specs`).
        member_at: the object at a dotted key's path (`verify.records.member_at`).
    """
    out = dict(record.unrecognized)
    for f, s in sorted(fields, key=lambda fs: fs[1].type != "rest"):
        value = getattr(record, f.name)
        path, _, name = s.key.rpartition(".")
        if s.type == "rest":
            member_at(out, s.key).update(value)
        elif value is not None and (value or not s.omit_empty):
            member_at(out, path)[name] = (
                WRITERS[s.type](s, value) if s.type in WRITERS
                else sorted(value) if s.sort else _json(value)
            )
    return out
