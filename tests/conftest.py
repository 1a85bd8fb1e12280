"""Shared fixtures for every test package.

- ``runner``: a click ``CliRunner`` whose results keep stdout and stderr apart
  (``result.stdout``, ``result.stderr``; ``result.output`` is both, interleaved).
- ``home``: an initialised ledger directory under ``tmp_path``.
- ``make_tree``: a factory writing a directory of files from a ``{path: content}`` spec.
- ``passphrase``: sets ``TRAJLEDGER_PASSPHRASE`` for one test and returns it.
- ``--update-goldens``: rewrite golden files instead of comparing; tests read it through the
  ``update_goldens`` fixture.
- Result tables: a test that calls ``record_property("summary:<title>", line)`` has ``line``
  printed under ``<title>`` at the end of the run (also under ``-n``: the properties travel
  with the reports), e.g. the outcome of every sigstore-conformance case.

Test modules are imported by path (``--import-mode=importlib`` in pyproject.toml), because the
tree mirrors the packages and file names repeat (tests/unit/verify/test_keys.py and
tests/unit/ledger/test_keys.py).

Every test runs with ``TRAJLEDGER_HOME`` and ``TRAJLEDGER_PASSPHRASE`` removed from the
environment, so a developer's own settings never leak into a result, and with its own
``TRAJLEDGER_STATE_DIR`` (the user state directory), so no test reads or writes ``~``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner

TEST_PASSPHRASE = "correct horse battery staple (TEST ONLY)"

TreeSpec = Mapping[str, "bytes | str | int"]
"""``{relative POSIX path: content}``; an ``int`` means that many seeded random bytes."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="Rewrite golden files from the current output instead of comparing with them.",
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    sections: dict[str, list[str]] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for key, value in getattr(report, "user_properties", ()):
                if isinstance(key, str) and key.startswith("summary:"):
                    sections.setdefault(key.removeprefix("summary:"), []).append(str(value))
    for title, lines in sorted(sections.items()):
        terminalreporter.write_sep("-", title)
        for line in sorted(lines):
            terminalreporter.write_line(line)


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    """True when the run was started with ``--update-goldens``."""
    return bool(request.config.getoption("--update-goldens"))


@pytest.fixture(scope="session", autouse=True)
def _session_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Session and module fixtures (built before any test's own environment) get a state
    directory of their own too: nothing a test run does reaches the developer's ~."""
    import os

    old = os.environ.get("TRAJLEDGER_STATE_DIR")
    os.environ["TRAJLEDGER_STATE_DIR"] = str(tmp_path_factory.mktemp("session-state"))
    yield
    if old is None:
        os.environ.pop("TRAJLEDGER_STATE_DIR", None)
    else:
        os.environ["TRAJLEDGER_STATE_DIR"] = old


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    for name in ("TRAJLEDGER_HOME", "TRAJLEDGER_PASSPHRASE"):
        monkeypatch.delenv(name, raising=False)
    # Each test has its own user state directory (seen checkpoints, trust state), never ~.
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path_factory.mktemp("state")))


@pytest.fixture
def runner() -> CliRunner:
    """A CliRunner with stderr kept apart from stdout.

    click < 8.2 mixes the streams unless ``mix_stderr=False``; click 8.2 removed that argument
    and always records both (``result.output`` interleaves them, as a terminal would).
    """
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


@pytest.fixture
def passphrase(monkeypatch: pytest.MonkeyPatch) -> str:
    """Set ``TRAJLEDGER_PASSPHRASE`` for this test; returns the passphrase."""
    monkeypatch.setenv("TRAJLEDGER_PASSPHRASE", TEST_PASSPHRASE)
    return TEST_PASSPHRASE


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An initialised, empty ledger directory (origin ``test/ledger``)."""
    from trajledger.ledger.home import Ledger

    root = tmp_path / "home"
    Ledger.init(root, origin="test/ledger")
    return root


@pytest.fixture
def make_tree(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Factory: ``make_tree(spec, root=None) -> root`` writes every file of ``spec``.

    Parent directories are created; ``str`` content is written as UTF-8, ``int`` content as
    that many bytes from a generator seeded by the path (so reruns write the same bytes).
    ``root`` defaults to a fresh directory under ``tmp_path``.
    """
    count = 0

    def make(spec: TreeSpec, root: Path | None = None) -> Path:
        nonlocal count
        if root is None:
            count += 1
            root = tmp_path / f"tree{count}"
        root.mkdir(parents=True, exist_ok=True)
        for rel, content in spec.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, int):
                data = random.Random(rel).randbytes(content)
            elif isinstance(content, str):
                data = content.encode("utf-8")
            else:
                data = content
            path.write_bytes(data)
        return root

    yield make
