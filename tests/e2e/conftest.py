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
"""

from __future__ import annotations

import sys
from pathlib import Path

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
