"""The machinery every signed record's JSON shape is read and written by: one spec per field,
one reader and one writer for every record (`Record`, `Predicate`).

Scope: a record type declares each field once, as a dataclass field built with `spec` (its JSON
key, one of a closed set of field types, optional or required, a default) and one `_check`
for rules across fields; `Record.from_json` and `Record.to_json` serve every type, nested
records included; members a reader does not know are kept and written back where they were.
The writer (`verify.record_json`) loads only when a record is written: a verifier only reads.
Non-scope: which records exist and what they mean (``verify.predicates``), trust decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from importlib import import_module
from typing import Any, ClassVar, Self

from .digest import parse_digest
from .errors import FormatError
from .manifest import Manifest
from .times import parse_time

__all__ = ["PROJECT_PREFIX", "Predicate", "Record", "check_finite", "column", "field_type",
           "read_members", "spec"]

PROJECT_PREFIX = "https://trajledger.dev/attestation/"

# -- the table: one spec per field, one reader and one writer for every record -------------------


_UNSET: Any = object()  # no ``absent`` value: the field is required


@dataclass(frozen=True)
class _Spec:
    """How one dataclass field appears in JSON (in the field's metadata; build with `spec`).

    ``key`` is the JSON key, dotted for a member of a nested object (SLSA's
    ``buildDefinition.buildType``). A field is required unless it has a default or ``absent``
    (what an absent one reads as); ``required`` overrides. ``empty``: a text may be "";
    ``nonempty``: a list may not be []; ``choices``: the texts allowed; ``record``: the nested
    record type (or its name, `_nested`); ``sort``: a list read and written sorted;
    ``omit_empty``: written only when non-empty (else only ``None`` is omitted); ``columns``:
    the members of each row (``rows``, a type of ``verify.sealed_files``), the first keys a
    mapping when ``keyed``.
    """

    key: str
    type: str
    required: bool | None = None
    absent: Any = _UNSET
    empty: bool = False
    nonempty: bool = False
    choices: tuple[str, ...] = ()
    record: Any = None
    sort: bool = False
    omit_empty: bool = False
    columns: tuple[_Spec, ...] = ()
    keyed: bool = False


def spec(key: str, type_: str = "text", *, default: Any = MISSING, kw_only: bool = False,
       compare: bool = True, **options: Any) -> Any:
    """A dataclass field read from and written to JSON key ``key`` as ``type_`` (`_Spec`); an
    absent member reads as its ``default`` (a mutable one copied per read)."""
    if type_ not in _READ:
        raise ValueError(f"field {key}: type {type_!r}, want one of {sorted(_READ)}")
    if default is not MISSING:
        options["absent"] = default
    spec = _Spec(key, type_, **options)
    mutable = isinstance(default, dict)
    return field(default=MISSING if mutable else default,
                 default_factory=dict if mutable else MISSING,
                 kw_only=kw_only, compare=compare, metadata={"spec": spec})


def column(key: str, type_: str = "text", **options: Any) -> _Spec:
    """One member of a row (``rows``)."""
    return _Spec(key, type_, **options)


def _text(s: _Spec, v: Any, at: str) -> str:
    if not isinstance(v, str) or (not s.empty and not v):
        raise FormatError(f"{at} is {v!r}, want a non-empty string")
    if s.choices and v not in s.choices:
        raise FormatError(f"{at} is {v!r}, want one of {list(s.choices)}")
    return v


def _digest(s: _Spec, v: Any, at: str) -> str:
    parse_digest(v, at)
    return str(v)


def _time(s: _Spec, v: Any, at: str) -> str:
    parse_time(v, at)
    return str(v)


def _integer(s: _Spec, v: Any, at: str) -> int:
    if type(v) is not int:
        raise FormatError(f"{at} is {v!r}, want an integer")
    return v


def _flag(s: _Spec, v: Any, at: str) -> bool:
    if not isinstance(v, bool):
        raise FormatError(f"{at} is {v!r}, want true or false")
    return v


def _mapping(s: _Spec, v: Any, at: str) -> dict[str, Any]:
    if type(v) is not dict and not isinstance(v, Mapping):  # (a JSON object: a dict)
        raise FormatError(f"{at} is not a JSON object")
    return dict(v)


def _list(s: _Spec, v: Any, at: str, of: str = "") -> list[Any]:
    if not isinstance(v, list):
        raise FormatError(f"{at} is not a list{of}")
    if s.nonempty and not v:
        raise FormatError(f"{at} is empty")
    return v


def _strings(s: _Spec, v: Any, at: str) -> tuple[str, ...]:
    items = _list(s, v, at, " of strings")
    if not all(isinstance(x, str) for x in items):
        raise FormatError(f"{at} is not a list of strings")
    return tuple(items)


def _digests(s: _Spec, v: Any, at: str) -> tuple[str, ...]:
    out = tuple(_digest(s, x, f"{at}[{i}]") for i, x in enumerate(_list(s, v, at)))
    if len(set(out)) != len(out):
        raise FormatError(f"{at} lists a digest twice")
    return tuple(sorted(out)) if s.sort else out


def _objects(s: _Spec, v: Any, at: str) -> tuple[dict[str, Any], ...]:
    return tuple(_mapping(s, x, f"{at}[{i}]") for i, x in enumerate(_list(s, v, at)))


def _nested(s: _Spec) -> Any:
    """The nested record type of ``s``: a class, or ``"module.Class"`` of this package, loaded
    when a member of that type is first read (``verify.sealed_files``: few records hold one)."""
    if isinstance(s.record, str):
        module, _, name = s.record.rpartition(".")
        return getattr(import_module(f"{__package__}.{module}"), name)
    return s.record


def _records(s: _Spec, v: Any, at: str) -> tuple[Any, ...]:
    return tuple(_nested(s).from_json(x, f"{at}[{i}]") for i, x in enumerate(_list(s, v, at)))


_READ: dict[str, Callable[[_Spec, Any, str], Any]] = {
    "text": _text,
    "digest": _digest,
    "time": _time,
    "integer": _integer,
    "flag": _flag,
    "mapping": _mapping,
    "strings": _strings,
    "digests": _digests,
    "objects": _objects,
    "manifest": lambda s, v, at: Manifest.from_json(_mapping(s, v, at), at),
    "record": lambda s, v, at: _nested(s).from_json(v, at),
    "records": _records,
    "rest": lambda s, v, at: v,  # a nested object's unknown members (collected, not read)
}
"""The field types: each reads a JSON value at ``at`` into its Python value, or raises."""


def field_type(name: str, read: Callable[[_Spec, Any, str], Any],
               write: Callable[[_Spec, Any], Any]) -> None:
    """Add a field type that only the records of a module loaded on use hold (a sealed batch's
    rows: ``verify.sealed_files``): ``read`` as the types of `_READ`, ``write`` its JSON
    (`verify.record_json.WRITERS`)."""
    from .record_json import WRITERS  # the writer: loaded with the few records of such a type

    _READ[name], WRITERS[name] = read, write


def read_members(
    specs: tuple[_Spec, ...], obj: object, what: str
) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """Read ``specs`` from ``obj``: their values, and the members no spec took, by the dotted
    path of the object holding them (``""`` for ``obj`` itself). Nothing is copied but what is
    kept: each member is looked up where it is, and the members no spec took are found by
    comparing each object's keys with the names its specs know (`_plan`).

    Raises:
        FormatError: ``obj`` or a nested object is not an object; a required member is missing
            or null; a member is malformed.
    """
    if type(obj) is not dict and not isinstance(obj, Mapping):
        raise FormatError(f"{what} is not a JSON object")
    steps, known = _plan(specs)
    objects: dict[str, tuple[Mapping[str, Any], str]] = {"": (obj, what)}
    values = []
    for s, path, name, read, required, absent in steps:
        src, at = (obj, what) if not path else objects.get(path) or _member(objects, path)
        value = None if read is _COLLECTED else src.get(name)
        if value is None:
            if required:
                raise FormatError(f"{at}: {name} is {'null' if name in src else 'missing'}")
            values.append(dict(absent) if type(absent) is dict else absent)
        else:
            values.append(read(s, value, f"{at}: {name}"))
    return values, {path: {k: v for k, v in o.items() if k not in known[path]}
                    if not known[path].issuperset(o) else {} for path, (o, _) in objects.items()}


def _member(objects: dict[str, tuple[Mapping[str, Any], str]], path: str
            ) -> tuple[Mapping[str, Any], str]:
    """The nested object at dotted ``path`` (its parents first), and its name in messages."""
    parent, _, name = path.rpartition(".")
    outer, outer_what = objects.get(parent) or _member(objects, parent)
    value, at = outer.get(name), f"{outer_what}: {name}"
    if type(value) is not dict and not isinstance(value, Mapping):  # (None: missing or null)
        raise FormatError(f"{at} is " + ("not a JSON object" if value is not None else
                                         "null" if name in outer else "missing"))
    objects[path] = (value, at)
    return objects[path]


_COLLECTED = _READ["rest"]
_Plan = tuple[tuple[tuple[_Spec, str, str, Callable[[_Spec, Any, str], Any], bool, Any], ...],
              dict[str, set[str]]]
_PLANS: dict[int, tuple[tuple[_Spec, ...], _Plan]] = {}


def _plan(specs: tuple[_Spec, ...]) -> _Plan:
    """How `read_members` reads ``specs``, worked out once per tuple of specs (every record
    of a type reads the same): each spec, its parent path and member name, its reader
    (`_COLLECTED` for one that stands for the unknown members of a nested object),
    whether it is required, and what an absent one reads as; and the member names each
    object's specs know (its own and its nested objects'), by path."""
    found = _PLANS.get(id(specs))
    if found is None or found[0] is not specs:
        steps, known = [], {"": set[str]()}
        for s in specs:
            path, _, name = s.key.rpartition(".")
            steps.append((s, path, name, _READ[s.type],
                          bool(s.required or (s.required is None and s.absent is _UNSET)),
                          None if s.absent is _UNSET else s.absent))
            known.setdefault(path, set()).update(() if s.type == "rest" else (name,))
            while path:  # each nested object is a member its parent knows
                path, _, member = path.rpartition(".")
                known.setdefault(path, set()).add(member)
        found = _PLANS[id(specs)] = (specs, (tuple(steps), known))
    return found[1]


_Fields = tuple[tuple[Field[Any], _Spec], ...]
_SPECS: dict[type, tuple[_Fields, tuple[_Spec, ...], tuple[str, ...], dict[str, str]]] = {}


def field_specs(cls: type) -> tuple[_Fields, tuple[_Spec, ...], tuple[str, ...], dict[str, str]]:
    """The fields of ``cls`` read from JSON with their specs; the specs alone and the fields'
    names (what `Record.from_json` reads ``cls`` by); the fields that keep a nested object's
    unknown members, by key. Made once per class.

    Raises:
        TypeError: a field other than ``unrecognized`` has no spec, or the class has a
            ``__post_init__`` (`Record.from_json` sets the fields without calling it).
    """
    found = _SPECS.get(cls)
    if found is None:
        pairs = tuple((f, f.metadata["spec"]) for f in fields(cls) if "spec" in f.metadata)
        if len(pairs) != len(fields(cls)) - 1 or hasattr(cls, "__post_init__"):
            raise TypeError(f"{cls.__name__}: a record's fields all have specs, and no "
                            "__post_init__")
        found = _SPECS[cls] = (pairs, tuple(s for _f, s in pairs), tuple(f.name for f, _s in pairs),
                               {s.key: f.name for f, s in pairs if s.type == "rest"})
    return found


def member_at(out: dict[str, Any], path: str) -> dict[str, Any]:
    """The object at dotted ``path`` in ``out``, created or copied (never shared) on the way."""
    for name in filter(None, path.split(".")):
        out[name] = dict(out.get(name) or {})
        out = out[name]
    return out


@dataclass(frozen=True)
class Record:
    """A JSON object of a predicate (or a predicate): its fields from the table (`spec`), and
    every member it does not know, kept verbatim in ``unrecognized``."""

    unrecognized: Mapping[str, Any] = field(default_factory=dict, kw_only=True, compare=False,
                                            repr=False)

    @classmethod
    def from_json(cls, obj: object, what: str) -> Self:
        """Read the object (strict on known fields; others kept in ``unrecognized``).

        Raises:
            FormatError: not an object, or a known field is missing or malformed.
        """
        _pairs, specs, names, owners = field_specs(cls)
        values, rest = read_members(specs, obj, what)
        # Every field is read (`field_specs`): set them as a frozen dataclass's __init__ would.
        made = object.__new__(cls)
        kept: dict[str, Any] = made.__dict__
        kept.update(zip(names, values, strict=True))
        unrecognized = kept["unrecognized"] = rest.pop("")  # the members no spec took
        for path, members in sorted(rest.items()):  # parents first: nested members go inside
            if members:
                key = next((k for k in owners if path == k or path.startswith(k + ".")), "")
                into = kept[owners[key]] if key else unrecognized
                member_at(into, path.removeprefix(key)).update(members)
        made._check(what)
        return made

    def _check(self, what: str) -> None:
        """Rules across fields, beyond each field's type (none by default).

        Raises:
            FormatError: a rule is broken.
        """

    def to_json(self) -> dict[str, Any]:
        """The JSON form: the known fields (absent optional ones omitted), then every
        unrecognized member (`verify.record_json.record_json`, loaded only to write one)."""
        from .record_json import record_json

        return record_json(self, field_specs(type(self))[0], member_at)


@dataclass(frozen=True)
class Predicate(Record):
    """Base of every typed predicate: its type URI, its fields (`Record`) and the fields it does
    not know."""

    TYPE: ClassVar[str] = ""
    TYPES: ClassVar[dict[str, type[Predicate]]] = {}
    """Every predicate class that declares a ``TYPE``, by it (``verify.predicates.ALL``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register a predicate class that declares its type URI in `TYPES`."""
        super().__init_subclass__(**kwargs)
        if "TYPE" in cls.__dict__:
            Predicate.TYPES[cls.TYPE] = cls

    @classmethod
    def from_predicate(cls, obj: object, what: str = "predicate") -> Self:
        """Read a predicate JSON object (strict on known fields; others kept).

        Raises:
            FormatError: a known field is missing or malformed.
        """
        what = f"{what} ({cls.TYPE.removeprefix(PROJECT_PREFIX)})"
        if type(obj) is not dict and not isinstance(obj, Mapping):
            raise FormatError(f"{what}: the predicate is not a JSON object")
        return cls.from_json(obj, what)

    def to_predicate(self) -> dict[str, Any]:
        """The JSON object to sign: the known fields, then every unrecognized one."""
        return self.to_json()

    def written(self, what: str = "predicate") -> dict[str, Any]:
        """`to_predicate`, checked by reading it back with the strict reader: what a writer
        signs is exactly what every reader accepts (one definition of the format).

        Raises:
            FormatError: a field the reader would refuse (an empty name, a bad digest...).
        """
        out = self.to_predicate()
        type(self).from_predicate(out, what)
        return out


def check_finite(what: str, values: Mapping[str, Any], want: str, null: bool = False) -> None:
    """Check a map of names to finite numbers (JSON has no NaN; a reader refuses one)."""
    for k, v in values.items():
        if not (v is None and null) and (type(v) not in (int, float)  # float's range (rev29)
                                         or not abs(v) <= 1.7976931348623157e308):
            raise FormatError(f"{what}.{k} is {v!r:.40}, want {want}")
