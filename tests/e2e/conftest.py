"""The end-to-end tests' own setup.

``tamperkit.py`` holds the helpers the tamper tests share (test_tamper_sweep.py,
test_tamper_matrix.py, test_read_only.py); they ``import tamperkit``. ``--import-mode=importlib``
puts no test directory on ``sys.path``, so this directory is put there, once.

Quickstart ledgers, built once per session (per xdist worker) for the modules that start from
one (each copies what it uses, or extends a copy in a user state of its own:
`testkit.extend_template`, `testkit.user_state`):

- ``quickstart_template`` (tests/conftest.py, as the unit tests use it too): ``trajledger
  quickstart --episodes 10``, keys in the clear; its value is the final checkpoint's digest.
- ``secured_quickstart``: `tamperkit.build_quickstart` (keys encrypted under
  ``tamperkit.PASSPHRASE``, its user's state beside it); tests copy it, never use it in place.
- ``alice_home``: a copy, per test, of a ledger with key alice (encrypted under the test
  passphrase, set for the test), environment cart@1 and evaluator judge@1: the recording tests'.

The user state's commits go to the page cache (`state_commits_to_the_page_cache`), as the
flushes do (tests/conftest.py, `flush_to_the_page_cache`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import tamperkit as tk  # noqa: E402
import testkit  # noqa: E402


@pytest.fixture(scope="session")
def secured_quickstart(tmp_path_factory: pytest.TempPathFactory) -> tk.Quickstart:
    return tk.build_quickstart(tmp_path_factory.mktemp("secured-quickstart"))


def _alice(home: Path) -> None:
    testkit.run_commands(home, "init --origin test/e2e", "key new alice",
                         "env register cart --version 1 --gym-id CartPole-v1 --key alice",
                         "evaluator register judge --version 1 --kind deterministic --key alice")


@pytest.fixture(scope="session")
def alice_template(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[None]:
    return testkit.build_template(tmp_path_factory.mktemp("alice"), _alice)


@pytest.fixture
def alice_home(alice_template: testkit.Template[None], tmp_path: Path, passphrase: str) -> Path:
    return testkit.copy_template(alice_template, tmp_path / "home")


# -- the user state's commits, to the page cache -------------------------------------------------

FLUSH_NAMES = re.compile(r"\b(fsync|fdatasync|syncfs)\b")
"""A test module whose source names one of these keeps the real flushes (as tests/conftest.py's
``_real_flushes``), the user state's commits too."""
_NAMES_FLUSHES: dict[str, bool] = {}
_SYNCED = "PRAGMA synchronous=FULL"


class _PageCacheCommits(sqlite3.Connection):
    """A connection whose ``PRAGMA synchronous=FULL`` (the user state's: every commit waits
    for the disk) is ``OFF``: its commits go to the page cache, as `os.fsync` does in the tests
    (tests/conftest.py, `flush_to_the_page_cache`: a power cut is what they would survive, and
    no test makes one; a killed process loses nothing the kernel holds)."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        return super().execute("PRAGMA synchronous=OFF" if sql == _SYNCED else sql, *args)


def _connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
    kwargs.setdefault("factory", _PageCacheCommits)
    return _REAL_CONNECT(*args, **kwargs)  # type: ignore[no-any-return]


_REAL_CONNECT = sqlite3.connect


def _real_flushes(item: pytest.Item) -> bool:
    if os.environ.get("TRAJLEDGER_TESTS_REAL_FLUSHES") == "1":
        return True
    path = str(item.path)
    if path not in _NAMES_FLUSHES:
        _NAMES_FLUSHES[path] = bool(FLUSH_NAMES.search(Path(path).read_text("utf-8")))
    return _NAMES_FLUSHES[path]


@contextlib.contextmanager
def state_commits_to_the_page_cache(item: pytest.Item) -> Iterator[None]:
    """While an e2e test's setup, call or teardown runs (its module's and session's fixtures
    too, built in its setup), `sqlite3.connect` makes `_PageCacheCommits`: the user state's
    commits do not wait for the disk (about 4 ms each under the helpers' load: 2,194 commits,
    8 of the 100 profiled s of test_paths_agree and test_histories_agree, ci55); unless its
    module keeps the real flushes (`_real_flushes`) or ``TRAJLEDGER_TESTS_REAL_FLUSHES=1``.
    The processes the tests start commit for real."""
    if _real_flushes(item):
        yield
        return
    setattr(sqlite3, "connect", _connect)  # noqa: B010 (mypy: an overloaded function)
    try:
        yield
    finally:
        sqlite3.connect = _REAL_CONNECT


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with state_commits_to_the_page_cache(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with state_commits_to_the_page_cache(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    with state_commits_to_the_page_cache(item):
        return (yield)
