"""No private reach (issue 20 item 6), checked on the source of ``trajledger/``.

- No module imports a private module of another project (a dotted part ``_name``, such as
  ``sigstore._internal``): those change between releases without notice. The only exception is
  ``_typeshed``, which exists for type checkers only (imported under ``TYPE_CHECKING``).
- No module imports another module's private name (``from .note import _helper``): a helper
  two modules share is public in the one that defines it (in its ``__all__``).

(Private *modules* of trajledger's own packages are the business of tests/unit/test_layering.py.)

And on the tests (``tests/``): a test uses trajledger's public names. A private name (``_name``:
a function, class, constant, attribute or method defined in ``trajledger/``, or a private
module) appears only in the unit test file of a module that defines it, a white-box test of its
own helpers: ``tests/unit/<package>/test_<name>.py`` or ``test_<name>_<aspect>.py``, where
``<package>`` is the module's package (``verify``, ``ledger``, ``runner``; ``tests/unit/`` itself
for the others) and ``<name>`` the module's name or one of its subpackages' (without a leading
underscore; a trailing ``s`` may go: ``test_rollout_convert.py`` owns ``ledger/rollouts/*``).
The few seams a test of another file must reach (a crash injected between two steps of the log
writer, an expired certificate) are listed in `SEAMS` with the reason. What is checked is
what the source shows: imports, attribute names (``x._name``, whatever ``x`` is: a private name
trajledger defines is taken to be that one), ``setattr(x, "_name", ...)`` and dotted targets
(``monkeypatch.setattr("trajledger.m._name", ...)``).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "trajledger"
TESTS = Path(__file__).resolve().parents[1]
TYPING_ONLY = frozenset({"_typeshed"})
TOP = ("verify", "ledger", "runner")
"""The packages whose unit tests have a directory of their own under tests/unit/."""

SEAMS: dict[tuple[str, str], str] = {
    ("unit/ledger/test_chat_typed.py", "_map_block"):
        "a worker's block mapped in process: the typed chat path against the old one (chat48)",
    ("e2e/test_log_tamper_cli.py", "_publish"):
        "a crash between committing entries and publishing their checkpoint, seen by commands",
    ("e2e/test_updates.py", "_judge"):
        "an import killed between its import record and its judgement, then run again",
    ("e2e/test_erased_not_restored.py", "_judge"):
        "an import stopped right after its log commit leaves no erased bytes (left29)",
    ("unit/test_ray_integration.py", "_write"):
        "holds the user state's write lock (TrustState) while a Ray worker appends",
    ("unit/ledger/test_trust_state.py", "_BAR_FROM"):
        "the Ledger's first use draws its progress bar from 30 entries behind, not 2,000",
    ("interop/test_sigstore_keyless.py", "_not_after"):
        "the signer's certificate expires now (sigstore signs only while it is valid)",
    ("interop/test_sigstore_keyless.py", "_signing_context"):
        "a missing trust config is reported when the signing context is first built",
    ("interop/test_sigstore_keyless.py", "_now"):
        "the log's operator backdates an entry (the log writer's clock) before a compromise",
    ("interop/test_sigstore_keyless.py", "_verified_times"):
        "a verified signing time before the compromise beside Rekor's (the instance has no TSA)",
    ("e2e/test_fault_sweep.py", "_now"):
        "a revocation run again within one second of its first run (its statement's time)",
    ("e2e/test_insider_races.py", "_locked"):
        "a group member removes the log's lock file just after a command took it (fix12)",
    ("e2e/test_exit_codes.py", "_publish"):
        "Ctrl-C between an append's commit and its publication: the line names the entries",
    ("e2e/test_exit_codes.py", "_tell_published"):
        "Ctrl-C just after an append's publication: the line says they were recorded",
    ("e2e/test_exit_codes.py", "_mark_inflight"):
        "Ctrl-C as an append's commit starts: the next writer drops it, as the line says",
    ("e2e/test_exit_codes.py", "_get_signer"):
        "Ctrl-C before an append writes anything: the line says nothing was recorded",
}
"""``(test file from tests/, private name): why`` for the private seams reached from a test
file that does not own them."""
TARGETS = frozenset({"setattr", "delattr", "patch", "import_module", "importorskip"})
"""Calls whose string argument names what they reach (``monkeypatch.setattr("a.b._c", v)``)."""


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_module(file: str, level: int, module: str | None, name: str) -> bool:
    """Whether ``from <level dots><module> import <name>`` in ``file`` names a module of ours
    (a private module of trajledger's own packages: test_layering's business, not a name)."""
    if level:
        base = (SRC.parent / file).parent
        for _ in range(level - 1):
            base = base.parent
    elif module and module.split(".")[0] == "trajledger":
        base = SRC.parent
    else:
        return False
    target = base.joinpath(*(module.split(".") if module else []), name)
    return target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()


@functools.cache
def nodes(source: str, file: str) -> tuple[ast.AST, ...]:
    """``ast.walk(ast.parse(source, file))``, once per session (per xdist worker): the tests
    below go over the product's source twice and the tests' twice (parsing and walking either
    costs a second or two of CPU). The nodes are only read."""
    return tuple(ast.walk(ast.parse(source, file)))


def violations(source: str, file: str) -> list[str]:
    """The private reaches in one module's source (``file``: its path from the repository)."""
    bad: list[str] = []
    for node in nodes(source, file):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""] if node.level == 0 else []
            bad += [
                f"{file}:{node.lineno}: imports the private name {a.name} of "
                f"{'.' * node.level}{node.module or ''}"
                for a in node.names
                if _private(a.name) and not _is_module(file, node.level, node.module, a.name)
            ]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] == "trajledger" or parts[0] in TYPING_ONLY:
                continue
            if any(_private(p) for p in parts):
                bad.append(f"{file}:{node.lineno}: imports {module}, private to {parts[0]}")
    return bad


def test_no_private_module_of_another_project_and_no_private_name_of_another_module() -> None:
    files = sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)
    assert len(files) > 50
    bad: list[str] = []
    for path in files:
        bad += violations(path.read_text("utf-8"), str(path.relative_to(SRC.parent)))
    assert bad == [], "private reach:\n" + "\n".join(bad)


def test_the_checker_catches_both_kinds() -> None:
    source = (
        "from sigstore._internal.rekor import RekorClientError\n"
        "import sigstore._internal.fulcio.client\n"
        "from .note import Note, _b64decode_strict\n"
        "from .merkle import node_hash as _hash_children\n"  # a public name, aliased: fine
        "from trajledger.verify import _jcs\n"  # trajledger's own modules: test_layering's
        "from _typeshed import WriteableBuffer\n"
        "import sigstore.errors\n"
    )
    file = "trajledger/verify/x.py"
    assert violations(source, file) == [
        f"{file}:1: imports sigstore._internal.rekor, private to sigstore",
        f"{file}:2: imports sigstore._internal.fulcio.client, private to sigstore",
        f"{file}:3: imports the private name _b64decode_strict of .note",
    ]


# -- tests use public names ---------------------------------------------------------------------


def private_definitions(root: Path = SRC) -> dict[str, set[str]]:
    """``{private name: dotted modules defining it}`` for every module under ``root``: its
    private functions, classes and module or class variables, the attributes it sets on
    ``self`` or ``cls``, and the private module itself."""
    out: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        names = [path.stem]
        file = str(path.relative_to(root.parent))
        for node in nodes(path.read_text("utf-8"), file):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.append(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for e in ast.walk(target):
                        if isinstance(e, ast.Name):
                            names.append(e.id)
                        elif (isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name)
                              and e.value.id in ("self", "cls")):
                            names.append(e.attr)
        for name in names:
            if _private(name):
                out.setdefault(name, set()).add(module)
    return out


def owns(test: str, module: str) -> bool:
    """Whether the test file ``test`` (its path from tests/) is the unit test of the dotted
    ``module`` (``trajledger.<package>...``), by the rule of this module's docstring."""
    parts = module.split(".")[1:]
    folder, _, file = test.rpartition("/")
    if parts[0] in TOP:
        want, names = f"unit/{parts[0]}", parts[1:]
    else:
        want, names = "unit", parts
    if folder != want or not file.startswith("test_"):
        return False
    words = file.removeprefix("test_").removesuffix(".py")
    for name in names:
        name = name.lstrip("_")
        for own in {name, name.removesuffix("s")}:
            if words == own or words.startswith(own + "_"):
                return True
    return False


def private_uses(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of each private name one test module's source uses and does not
    define itself (a test's own helper class may have private attributes)."""
    return list(_private_uses(source))


@functools.cache  # each test file's source is read twice (`reaches`, and SEAMS still used)
def _private_uses(source: str) -> tuple[tuple[int, str], ...]:
    own: set[str] = set()
    uses: list[tuple[int, str]] = []
    for node in nodes(source, "<unknown>"):  # one pass: the uses are filtered last
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id == "self"):
            own.add(node.attr)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trajledger"):
            uses += [(node.lineno, p) for p in (node.module or "").split(".") if _private(p)]
            uses += [(node.lineno, a.name) for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("trajledger."):
                    uses += [(node.lineno, p) for p in a.name.split(".") if _private(p)]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            uses.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call):
            # setattr(x, "_name", ...), and a dotted target: monkeypatch.setattr("trajledger...")
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            words = [a.value for a in node.args[:2]
                     if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            for word in words:
                if called == "setattr" and _private(word):
                    uses.append((node.lineno, word))
                elif called in TARGETS and word.startswith("trajledger."):
                    uses += [(node.lineno, p) for p in word.split(".") if _private(p)]
    return tuple((line, name) for line, name in uses if name not in own)


def reaches(test: str, source: str, defined: dict[str, set[str]]) -> list[str]:
    """The private names of trajledger the test file ``test`` (from tests/) uses without
    owning a module that defines them, and without a `SEAMS` entry."""
    return [
        f"tests/{test}:{line}: uses {name} of {', '.join(sorted(defined[name]))}"
        for line, name in private_uses(source)
        if name in defined
        and not any(owns(test, m) for m in defined[name])
        and (test, name) not in SEAMS
    ]


def test_tests_use_public_names_outside_a_modules_own_unit_tests() -> None:
    defined = private_definitions()
    files = sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)
    bad: list[str] = []
    seen: set[tuple[str, str]] = set()
    for path in files:
        test = path.relative_to(TESTS).as_posix()
        source = path.read_text("utf-8")
        bad += reaches(test, source, defined)
        seen |= {(test, name) for _, name in private_uses(source)}
    assert bad == [], "tests reaching private names (use a public one, or test it in the " \
        "module's own unit test file):\n" + "\n".join(bad)
    assert set(SEAMS) <= seen, f"SEAMS no longer used: {sorted(set(SEAMS) - seen)}"


def test_the_test_checker_knows_whose_private_names_a_test_may_use() -> None:
    defined = {"_helper": {"trajledger.ledger.log.writer"}, "_jcs": {"trajledger.verify._jcs"},
               "_Writer": {"trajledger.integrations.ray"}}
    source = (
        "from trajledger.ledger.log.writer import _helper\n"
        "import trajledger.verify._jcs\n"
        "log._helper()\n"
        "monkeypatch.setattr(Log, '_helper', f)\n"
        "monkeypatch.setattr('trajledger.integrations.ray._Writer', f)\n"
        "os._exit(0)\n"  # not trajledger's
        "class Fake:\n"
        "    def __init__(self):\n"
        "        self._helper = 1\n"  # the test's own
    )
    fake = source.replace("class Fake:\n    def __init__(self):\n        self._helper = 1\n", "")
    assert sorted(private_uses(fake)) == [
        (1, "_helper"), (2, "_jcs"), (3, "_helper"), (4, "_helper"), (5, "_Writer"), (6, "_exit")
    ]
    assert sorted(private_uses(source)) == [(2, "_jcs"), (5, "_Writer"), (6, "_exit")]
    assert sorted(reaches("e2e/test_log_cli.py", fake, defined)) == sorted([
        f"tests/e2e/test_log_cli.py:{n}: uses {name} of {module}"
        for n, name, module in [
            (1, "_helper", "trajledger.ledger.log.writer"),
            (2, "_jcs", "trajledger.verify._jcs"),
            (3, "_helper", "trajledger.ledger.log.writer"),
            (4, "_helper", "trajledger.ledger.log.writer"),
            (5, "_Writer", "trajledger.integrations.ray"),
        ]
    ])
    assert owns("unit/ledger/test_log_recovery.py", "trajledger.ledger.log.writer")
    assert owns("unit/ledger/test_writer.py", "trajledger.ledger.log.writer")
    assert owns("unit/ledger/test_rollout_convert.py", "trajledger.ledger.rollouts.readers")
    assert owns("unit/verify/test_jcs.py", "trajledger.verify._jcs")
    assert owns("unit/test_ray_integration.py", "trajledger.integrations.ray")
    assert owns("unit/test_platform.py", "trajledger._platform")
    assert not owns("unit/verify/test_log.py", "trajledger.ledger.log.writer")  # other package
    assert not owns("e2e/test_log_cli.py", "trajledger.ledger.log.writer")  # not a unit test
    assert not owns("unit/ledger/test_logs.py", "trajledger.ledger.log.writer")
    assert not owns("unit/ledger/test_cards.py", "trajledger.ledger.card_formats")
    assert not owns("property/test_jcs.py", "trajledger.verify._jcs")
