"""Records "filled by plan" (``verify.records.read_members``: a plan per record type, members
looked up where they are, unknown members found by each object's known names) decide as the
reader before the plan did (issue 21: the fast paths decide as the slow ones did).

The reader before the plan (commit 4f6d31c's parent: each object copied, each known member
popped, what is left unknown) is kept below as the oracle. Every open record, and each of its
members at every depth, is changed: removed, null, each wrong JSON type, wrapped in an object
or a list, and unknown members added (also ones spelled like a dotted key, or like a nested
object's member at the top): the same record (its fields and the unknown members it keeps,
nested records' included) or the same refusal, message for message.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from collections.abc import Iterator, Mapping
from dataclasses import MISSING
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajledger.verify import predicates as p
from trajledger.verify import records, sealed_files
from trajledger.verify.errors import FormatError
from trajledger.verify.statement import STATEMENT_TYPE, Statement

_SPEC = importlib.util.spec_from_file_location(
    "unknown_fields_table", Path(__file__).with_name("test_unknown_fields.py"))
assert _SPEC is not None and _SPEC.loader is not None
_TABLE = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_TABLE)
OPEN = _TABLE.OPEN
"""Each open record type with a valid document (tests/unit/verify/test_unknown_fields.py)."""


def before_the_plan(
    specs: tuple[Any, ...], obj: object, what: str
) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """``records._read_members`` as it was before the plan (the oracle)."""
    if not isinstance(obj, Mapping):
        raise FormatError(f"{what} is not a JSON object")
    objects: dict[str, tuple[dict[str, Any], str]] = {"": (dict(obj), what)}

    def members(path: str) -> tuple[dict[str, Any], str]:
        if path not in objects:
            parent, _, name = path.rpartition(".")
            outer, outer_what = members(parent)
            value = outer.pop(name, MISSING)
            if value is MISSING or value is None:
                raise FormatError(f"{outer_what}: {name} is "
                                  f"{'missing' if value is MISSING else 'null'}")
            if not isinstance(value, Mapping):
                raise FormatError(f"{outer_what}: {name} is not a JSON object")
            objects[path] = (dict(value), f"{outer_what}: {name}")
        return objects[path]

    values = []
    for s in specs:
        path, _, name = s.key.rpartition(".")
        rest, at = members(path)
        value = rest.pop(name, MISSING) if s.type != "rest" else MISSING
        if value is MISSING or value is None:
            if s.required or (s.required is None and s.absent is records._UNSET):
                raise FormatError(f"{at}: {name} is {'missing' if value is MISSING else 'null'}")
            absent = None if s.absent is records._UNSET else s.absent
            values.append(dict(absent) if isinstance(absent, dict) else absent)
        else:
            values.append(records._READ[s.type](s, value, f"{at}: {name}"))
    return values, {path: rest for path, (rest, _) in objects.items()}


def state(value: Any) -> Any:
    """A value read, records spelled out: each field and the unknown members kept, at any
    depth (a record's ``unrecognized`` takes no part in its equality)."""
    if isinstance(value, records.Record):
        return (type(value).__name__, {k: state(v) for k, v in vars(value).items()})
    if isinstance(value, Mapping):
        return {k: state(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [state(v) for v in value]
    return repr(value)


def outcome(cls: type[p.Predicate], doc: Any) -> tuple[str, Any]:
    """The record read from ``doc`` (`state`), or the refusal's message."""
    try:
        made = cls.from_predicate(doc)
    except FormatError as e:
        return "refused", str(e)
    return "read", json.dumps(state(made))


WRONG: list[Any] = [None, 0, -1, 1.5, True, False, "", "x", "sha256:" + "ab" * 32,
                    "2025-01-02T03:04:05Z", [], [1], ["x"], {}, {"a": 1}]


def objects_in(doc: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every object and list in ``doc``, with its path."""
    if isinstance(doc, dict | list):
        yield at, doc
        for k, v in (doc.items() if isinstance(doc, dict) else enumerate(doc)):
            yield from objects_in(v, (*at, k))


def changed(doc: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """``doc`` changed in one place each time (a copy each)."""
    for path, _node in list(objects_in(doc)):
        def copy_at(path: tuple[Any, ...] = path) -> tuple[Any, Any]:
            out = copy.deepcopy(doc)
            node = out
            for step in path:
                node = node[step]
            return out, node

        out, node = copy_at()
        if isinstance(node, list):
            out, node = copy_at()
            node.append({"futureField": 1})
            yield f"{path}+item", out
            continue
        for key, value in list(node.items()):
            out, node = copy_at()
            del node[key]
            yield f"{path}-{key}", out
            for bad in [*WRONG, {"k": value}, [value]]:
                out, node = copy_at()
                node[key] = bad
                yield f"{path}.{key}={bad!r:.30}", out
        for extra in ("futureField", "a.b", "buildType", "buildDefinition.buildType",
                      "unrecognized", "digest"):
            out, node = copy_at()
            if extra not in node:
                node[extra] = {"x": [1, {"y": None}]}
                yield f"{path}+{extra}", out
    yield "not an object", [doc]


CASES = [(cls, doc) for _schema, cls, doc, _paths in OPEN]


@pytest.mark.parametrize(("cls", "doc"), CASES,
                         ids=[f"{c.TYPE.rsplit('/', 2)[-2]}-{i}" for i, (c, _) in enumerate(CASES)])
def test_records_by_plan_decide_as_before_the_plan(
    cls: type[p.Predicate], doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = list(changed(doc))
    now = [outcome(cls, d) for _, d in cases]
    monkeypatch.setattr(records, "read_members", before_the_plan)
    monkeypatch.setattr(sealed_files, "read_members", before_the_plan)
    then = [outcome(cls, d) for _, d in cases]
    differ = [(name, a, b) for (name, _), a, b in zip(cases, now, then, strict=True) if a != b]
    assert not differ, differ[:3]
    # The changes reach both outcomes: some refused, some read with unknown members kept.
    assert {kind for kind, _ in now} == {"read", "refused"}


_JSON = st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from(["", "x"]) | \
    st.sampled_from([[], [0], {}, {"a": 0}])


@settings(max_examples=200, deadline=None)
@given(
    extra=st.dictionaries(st.sampled_from(["uri", "digest", "x", "name2", "annotations"]), _JSON,
                          max_size=3),
    algs=st.dictionaries(st.sampled_from(["sha512", "gitCommit", "sha256x"]),
                         st.sampled_from(["", "cd" * 64]), max_size=2),
    top=st.dictionaries(st.sampled_from(["_type2", "futureField", "predicat"]), _JSON,
                        max_size=2),
)
def test_statements_keep_what_they_kept_before(
    extra: dict[str, Any], algs: dict[str, str], top: dict[str, Any]
) -> None:
    """A statement's and a subject's unknown members (the skip for a plain document, commit
    cd1784e) are what the formula before it kept: every member but the name, the digest's other
    algorithms, each only when not empty or false."""
    digest = {"sha256": "ab" * 32, **algs}
    subject = {"name": "x", "digest": digest, **{k: v for k, v in extra.items() if k != "digest"}}
    doc = {"_type": STATEMENT_TYPE, "subject": [subject], "predicateType": p.FILES,
           "predicate": {}, **top}
    st_ = Statement.from_bytes(json.dumps(doc).encode())
    rest = {k: v for k, v in subject.items() if k != "name"}
    rest["digest"] = {k: v for k, v in digest.items() if k != "sha256"}
    assert st_.subjects[0].unrecognized == {k: v for k, v in rest.items() if v}
    assert st_.unrecognized == top
